/*
 * quant_mix.c — which type a tensor gets in llama.cpp's quantization mixes
 * without an importance matrix (llama-quant.cpp), shared by `deja quantize` and
 * `deja synth` so both write the same mix:
 *   - 2-D and 3-D (MoE expert) weights take the base type; 1-D tensors (norms,
 *     biases) and MoE routers (ffn_gate_inp.weight) keep their type;
 *   - output.weight (or token_embd.weight when the embeddings are tied) is Q6_K
 *     unless the base type is Q8_0;
 *   - q4_k_m: attn_v.weight and the ffn_down tensors (ffn_down, ffn_down_exps,
 *     ffn_down_shexp) of the layers llama.cpp's use_more_bits() picks (the first
 *     and last eighth, and every third in between) are Q6_K.  The layer of an
 *     ffn_down tensor is its position among them, or with experts (expert_count
 *     > 1) the N of its name blk.N. out of block_count, as llama.cpp's layer_info;
 *   - models of exactly 8 experts (Mixtral, qwen3moe-tiny): attn_v.weight and
 *     attn_k.weight are Q8_0 whatever the type (llama.cpp: "for the 8-expert
 *     model, bumping this to Q8_0 trades just ~128MB"); its Q5_K attn_output of
 *     q4_k_m is left out, as deja has no Q5_K;
 *   - a row length the block size does not divide falls back to a type whose
 *     block fits (Q8_0, else F16) — llama.cpp would pick Q5_0/IQ4_NL there,
 *     which deja does not implement.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/status.h"

static bool ends_with(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && !memcmp(s + len - n, suffix, n);
}

static bool is_attn_v(const char *s, size_t len) { return ends_with(s, len, "attn_v.weight"); }

/* llama.cpp's FFN_DOWN category */
static bool is_ffn_down(const char *s, size_t len) {
    return ends_with(s, len, "ffn_down.weight") || ends_with(s, len, "ffn_down_exps.weight") ||
           ends_with(s, len, "ffn_down_shexp.weight");
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

void quant_mix_count(struct quant_mix *q, const char *name, size_t len) {
    q->n_attn_v += is_attn_v(name, len);
    q->n_ffn_down += is_ffn_down(name, len);
}

enum dj_status quant_mix_type(struct quant_mix *q, const char *name, size_t len, uint32_t n_dims, int64_t ne0,
                              uint32_t *type) {
    const bool matrix = n_dims >= 2 && ends_with(name, len, ".weight") && !ends_with(name, len, "ffn_gate_inp.weight");
    if (!matrix) return DJ_OK;
    uint32_t t = q->base;
    const bool v = is_attn_v(name, len), down = is_ffn_down(name, len);
    if ((len == 13 && !memcmp(name, "output.weight", 13)) ||
        (!q->has_output && len == 17 && !memcmp(name, "token_embd.weight", 17))) {
        if (q->base != DJ_TYPE_Q8_0) t = DJ_TYPE_Q6_K;
    } else if (q->k_m && v) {
        if (use_more_bits(q->i_attn_v, q->n_attn_v)) t = DJ_TYPE_Q6_K;
    } else if (q->k_m && down) {
        int il = q->i_ffn_down, nl = q->n_ffn_down;
        if (q->n_expert > 1 && q->n_layer > 0) { /* the layer from the name, as llama.cpp's layer_info */
            nl = (int)q->n_layer;
            if (sscanf(name, "blk.%d.", &il) != 1 || il < 0 || il >= nl)
                return dj_fail(DJ_ERR_FORMAT, "tensor '%.*s': no layer in [0, %d) in its name", (int)len, name, nl);
        }
        if (use_more_bits(il, nl)) t = DJ_TYPE_Q6_K;
    }
    if (q->n_expert == 8 && (v || ends_with(name, len, "attn_k.weight"))) t = DJ_TYPE_Q8_0;
    q->i_attn_v += v;
    q->i_ffn_down += down;
    size_t rb;
    if (!dj_row_bytes(t, ne0, &rb)) t = dj_row_bytes(DJ_TYPE_Q8_0, ne0, &rb) ? DJ_TYPE_Q8_0 : DJ_TYPE_F16;
    *type = t;
    return DJ_OK;
}
