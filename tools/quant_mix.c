/*
 * quant_mix.c — which type a tensor gets in llama.cpp's quantization mixes
 * without an importance matrix (llama-quant.cpp), shared by `deja quantize` and
 * `deja synth` so both write the same mix:
 *   - 2-D and 3-D (MoE expert) weights take the base type; 1-D tensors (norms,
 *     biases) and MoE routers (ffn_gate_inp.weight) keep their type;
 *   - output.weight (or token_embd.weight when the embeddings are tied) is Q6_K
 *     unless the base type is Q8_0;
 *   - q4_k_m: attn_v.weight and ffn_down(_exps).weight of the layers
 *     use_more_bits() picks (the first and last eighth, and every third in
 *     between) are Q6_K;
 *   - a row length the block size does not divide falls back to a type whose
 *     block fits (Q8_0, else F16) — llama.cpp would pick Q5_0/IQ4_NL there,
 *     which deja does not implement.
 */
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"

static bool ends_with(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && !memcmp(s + len - n, suffix, n);
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool cli_quant_counted(const char *name, size_t len, bool *attn_v) {
    *attn_v = ends_with(name, len, "attn_v.weight");
    return *attn_v || ends_with(name, len, "ffn_down.weight") || ends_with(name, len, "ffn_down_exps.weight");
}

uint32_t cli_quant_type(const char *name, size_t len, uint32_t n_dims, int64_t ne0, uint32_t type, uint32_t base,
                        bool k_m, bool has_output, int i_layer, int n_layer) {
    const bool matrix = n_dims >= 2 && ends_with(name, len, ".weight") && !ends_with(name, len, "ffn_gate_inp.weight");
    if (!matrix) return type;
    type = base;
    bool attn_v;
    if ((len == 13 && !memcmp(name, "output.weight", 13)) ||
        (!has_output && len == 17 && !memcmp(name, "token_embd.weight", 17))) {
        if (base != DJ_TYPE_Q8_0) type = DJ_TYPE_Q6_K;
    } else if (k_m && cli_quant_counted(name, len, &attn_v) && use_more_bits(i_layer, n_layer)) {
        type = DJ_TYPE_Q6_K;
    }
    size_t rb;
    if (!dj_row_bytes(type, ne0, &rb)) type = dj_row_bytes(DJ_TYPE_Q8_0, ne0, &rb) ? DJ_TYPE_Q8_0 : DJ_TYPE_F16;
    return type;
}
