/*
 * quant_mix.c — the file types `deja quantize` writes and which type each
 * tensor gets in them: llama.cpp's llama-quantize without an importance matrix
 * (src/llama-quant.cpp and tools/quantize/quantize.cpp of the d32676d7
 * snapshot: tensor_allows_quantization, llama_tensor_get_type_impl,
 * tensor_type_fallback), shared by `deja quantize` and `deja synth` so both
 * write the same mix.  Tensors must be passed in llama-quantize's order (by
 * layer, then by name: quant_mix_order) because the attn_v and ffn_down rules
 * count them.
 *
 * The rules, for the file types below (quantizable: a tensor of two or more
 * non-trivial dimensions whose name ends in "weight", minus norms, MoE routers
 * and a list of small or special tensors — quantizable()):
 *   - output.weight, or token_embd.weight when there is no output.weight (tied
 *     embeddings): Q8_0 for MXFP4_MOE, for falcon and when the base type's
 *     block does not divide its rows; else Q6_K unless the base type is Q8_0;
 *   - MXFP4_MOE: tensors with a third dimension (MoE experts) MXFP4, the rest Q8_0;
 *   - token_embd (untied): Q4_K for TQ1_0, TQ2_0 and Q2_0;
 *   - attn_v (and attn_qkv, attn_kv_b: llama.cpp's category_is_attn_v — so its
 *     attn_qkv rules after it are never reached): Q2_K -> Q4_K if n_head/n_head_kv
 *     >= 4 else Q3_K; IQ3_S -> Q4_K if n_gqa >= 4; IQ3_M -> Q4_K; Q3_K_M -> Q5_K
 *     for the first two then Q4_K; Q3_K_L -> Q5_K;
 *     IQ4_NL/IQ4_XS -> Q5_K if n_gqa >= 4; Q4_K_M/Q5_K_M -> Q6_K where
 *     use_more_bits (the first and last eighth, and every third in between);
 *     Q4_K_S -> Q5_K for the first four; a 70B model's Q3_K/Q4_K -> Q5_K;
 *     exactly 8 experts -> Q8_0 whatever came before;
 *   - attn_k: exactly 8 experts -> Q8_0;
 *   - ffn_down (ffn_down_exps, ffn_down_shexp too), by layer — the count of
 *     ffn_down tensors seen, or with experts (expert_count > 1) the N of the
 *     name's blk.N., out of block_count: Q2_K -> Q3_K; Q3_K_M -> Q5_K in the
 *     first sixteenth, else Q4_K (falcon: Q4_K where use_more_bits, else Q3_K);
 *     IQ3_M -> Q4_K in the first eighth (8 experts: and where use_more_bits);
 *     Q3_K_L -> Q5_K (falcon Q4_K); Q4_K_M -> Q6_K where use_more_bits (falcon:
 *     Q6_K in the first sixteenth, Q5_K where use_more_bits); IQ4_NL/IQ4_XS ->
 *     Q5_K in the first eighth; Q5_K_M -> Q6_K where use_more_bits; Q4_K_S ->
 *     Q5_K in the first eighth (not falcon);
 *   - attn_output: with exactly 8 experts Q5_K for Q2_K, Q3_K_S, Q3_K_M, IQ4_NL,
 *     Q4_K_S, Q4_K_M, IQ3_S, IQ3_M, IQ4_XS; else Q2_K -> Q3_K, Q3_K_M and IQ3_M ->
 *     Q4_K, Q3_K_L -> Q5_K (falcon: only Q3_K_L -> Q4_K);
 *   - then, when the chosen type's block does not divide the row length: IQ4_XS
 *     and IQ3_S -> IQ4_NL; Q2_K, Q3_K, TQ1_0, TQ2_0, Q2_0 -> Q4_0; Q4_K -> Q5_0;
 *     Q5_K -> Q5_1; Q6_K -> Q8_0; and F16 when that block does not divide it either.
 *     For the other types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q1_0)
 *     llama-quantize has no fallback and refuses the model; deja writes F16
 *     there (a deja extension: files llama-quantize would not write at all).
 * The importance-matrix file types (IQ1_S, IQ1_M, IQ2_*, IQ3_XXS, IQ3_XS, Q2_K_S)
 * are refused, as llama-quantize refuses them without --imatrix (they load and
 * run); IQ3_S and IQ3_M need none and are written.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/status.h"

#define IMATRIX_TYPE                                                                                   \
    "needs an importance matrix (llama-quantize --imatrix), which deja quantize does not take; files " \
    "of this type load and run"

/* llama-quantize's QUANT_OPTIONS names (and its Q3_K/Q4_K/Q5_K aliases), in its
 * order; ftype is llama.h's LLAMA_FTYPE_*, base llama_ftype_get_default_type. */
static const struct quant_ftype ftypes[] = {
    {"Q1_0", 40, DJ_TYPE_Q1_0, NULL},
    {"Q2_0", 41, DJ_TYPE_Q2_0, NULL},
    {"Q4_0", 2, DJ_TYPE_Q4_0, NULL},
    {"Q4_1", 3, DJ_TYPE_Q4_1, NULL},
    {"MXFP4_MOE", 38, DJ_TYPE_MXFP4, NULL},
    {"Q5_0", 8, DJ_TYPE_Q5_0, NULL},
    {"Q5_1", 9, DJ_TYPE_Q5_1, NULL},
    {"IQ2_XXS", 19, DJ_TYPE_IQ2_XXS, IMATRIX_TYPE},
    {"IQ2_XS", 20, DJ_TYPE_IQ2_XS, IMATRIX_TYPE},
    {"IQ2_S", 28, DJ_TYPE_IQ2_XS, IMATRIX_TYPE},
    {"IQ2_M", 29, DJ_TYPE_IQ2_S, IMATRIX_TYPE},
    {"IQ1_S", 24, DJ_TYPE_IQ1_S, IMATRIX_TYPE},
    {"IQ1_M", 31, DJ_TYPE_IQ1_M, IMATRIX_TYPE},
    {"TQ1_0", 36, DJ_TYPE_TQ1_0, NULL},
    {"TQ2_0", 37, DJ_TYPE_TQ2_0, NULL},
    {"Q2_K", 10, DJ_TYPE_Q2_K, NULL},
    {"Q2_K_S", 21, DJ_TYPE_Q2_K, IMATRIX_TYPE},
    {"IQ3_XXS", 23, DJ_TYPE_IQ3_XXS, IMATRIX_TYPE},
    {"IQ3_S", 26, DJ_TYPE_IQ3_S, NULL},
    {"IQ3_M", 27, DJ_TYPE_IQ3_S, NULL},
    {"Q3_K", 12, DJ_TYPE_Q3_K, NULL},
    {"IQ3_XS", 22, DJ_TYPE_IQ3_S, IMATRIX_TYPE},
    {"Q3_K_S", 11, DJ_TYPE_Q3_K, NULL},
    {"Q3_K_M", 12, DJ_TYPE_Q3_K, NULL},
    {"Q3_K_L", 13, DJ_TYPE_Q3_K, NULL},
    {"IQ4_NL", 25, DJ_TYPE_IQ4_NL, NULL},
    {"IQ4_XS", 30, DJ_TYPE_IQ4_XS, NULL},
    {"Q4_K", 15, DJ_TYPE_Q4_K, NULL},
    {"Q4_K_S", 14, DJ_TYPE_Q4_K, NULL},
    {"Q4_K_M", 15, DJ_TYPE_Q4_K, NULL},
    {"Q5_K", 17, DJ_TYPE_Q5_K, NULL},
    {"Q5_K_S", 16, DJ_TYPE_Q5_K, NULL},
    {"Q5_K_M", 17, DJ_TYPE_Q5_K, NULL},
    {"Q6_K", 18, DJ_TYPE_Q6_K, NULL},
    {"Q8_0", 7, DJ_TYPE_Q8_0, NULL},
    {"F16", 1, DJ_TYPE_F16, NULL},
    {"BF16", 32, DJ_TYPE_BF16, NULL},
    {"F32", 0, DJ_TYPE_F32, NULL},
};

/* LLAMA_FTYPE_MOSTLY_* used by the rules */
enum {
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_M = 17, FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27, FT_IQ4_XS = 30, FT_TQ1_0 = 36, FT_TQ2_0 = 37,
    FT_MXFP4_MOE = 38, FT_Q2_0 = 41,
};

const struct quant_ftype *quant_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (!strcasecmp(ftypes[i].name, name)) return &ftypes[i];
    return NULL;
}

void quant_ftype_list(FILE *f, bool writable) {
    const char *sep = "";
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++) {
        if ((ftypes[i].refuse == NULL) != writable) continue;
        fprintf(f, "%s%s", sep, ftypes[i].name);
        sep = ", ";
    }
}

static bool ends_with(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && !memcmp(s + len - n, suffix, n);
}

static bool contains(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(s + i, needle, n)) return true;
    return false;
}

static bool is_named(const char *s, size_t len, const char *name) {
    return len == strlen(name) && !memcmp(s, name, len);
}

/* llama.cpp's tensor_category, tested in its order (substrings, so
 * ffn_down_exps is FFN_DOWN; attn_qkv and attn_kv_b are tested before attn_v). */
enum category { C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_V, C_ATTN_K, C_ATTN_Q,
                C_ATTN_OUTPUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN };

static enum category category(const char *s, size_t len) {
    if (is_named(s, len, "output.weight")) return C_OUTPUT;
    if (is_named(s, len, "token_embd.weight") || is_named(s, len, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    static const struct { const char *sub; enum category c; } subs[] = {
        {"attn_qkv.weight", C_ATTN_QKV}, {"attn_kv_b.weight", C_ATTN_KV_B}, {"attn_v.weight", C_ATTN_V},
        {"attn_k.weight", C_ATTN_K},     {"attn_q.weight", C_ATTN_Q},       {"attn_output.weight", C_ATTN_OUTPUT},
        {"ffn_up", C_FFN_UP},            {"ffn_gate", C_FFN_GATE},          {"ffn_down", C_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (contains(s, len, subs[i].sub)) return subs[i].c;
    return C_OTHER;
}

static bool attn_v_like(enum category c) { return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B; }

/* llama.cpp's tensor_allows_quantization (with quantize_output_tensor and no
 * --only-copy): n_dims counts dimensions up to the last one above 1, as
 * ggml_n_dims. */
static bool quantizable(const char *s, size_t len, uint32_t n_dims) {
    if (n_dims < 2 || !ends_with(s, len, "weight")) return false;
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
        "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (contains(s, len, never[i])) return false;
    return !is_named(s, len, "position_embd.weight") && !is_named(s, len, "token_types.weight");
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

void quant_mix_init(struct quant_mix *q, const struct quant_ftype *ft, const char *arch, uint32_t n_expert,
                    uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv) {
    memset(q, 0, sizeof *q);
    q->ftype = ft->ftype;
    q->base = ft->base;
    q->n_expert = n_expert;
    q->n_layer = n_layer;
    q->n_gqa = n_head_kv ? n_head / n_head_kv : 0;
    q->falcon = !strcmp(arch, "falcon");
    /* LLM_TYPE_70B, as the architectures' load_hparams set it */
    q->is_70b = (!strcmp(arch, "llama") && n_expert != 8 && n_layer == 80 && n_head != n_head_kv) ||
                ((!strcmp(arch, "qwen2") || !strcmp(arch, "deci") || !strcmp(arch, "olmo")) && n_layer == 80) ||
                (!strcmp(arch, "jais2") && n_layer == 68);
}

void quant_mix_count(struct quant_mix *q, const char *name, size_t len) {
    enum category c = category(name, len);
    q->n_attn_v += attn_v_like(c);
    q->has_output |= c == C_OUTPUT;
}

/* The layer of an ffn_down tensor (llama.cpp's layer_info). */
static enum dj_status ffn_layer(const struct quant_mix *q, const char *name, size_t len, int *il, int *nl) {
    *il = q->i_ffn_down;
    *nl = (int)q->n_layer;
    if (q->n_expert > 1) { /* "experts ... are not consecutive": the layer from the name */
        char buf[32];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), name);
        if (sscanf(buf, "blk.%d.", il) != 1 || *il < 0 || *il >= *nl)
            return dj_fail(DJ_ERR_FORMAT, "tensor '%.*s': no layer in [0, %d) in its name", (int)len, name, *nl);
    }
    return DJ_OK;
}

/* llama_tensor_get_type_impl for the file types deja writes. */
static enum dj_status mix_rules(struct quant_mix *q, const char *name, size_t len, const int64_t ne[4],
                                uint32_t *type) {
    const uint32_t ft = q->ftype;
    uint32_t t = q->base;
    const enum category c = category(name, len);
    const struct dj_type_info *ti = dj_type_info(t);
    if (c == C_OUTPUT || (!q->has_output && c == C_TOKEN_EMBD)) {
        if (ft == FT_MXFP4_MOE || q->falcon || ne[0] % (int64_t)ti->blck != 0) t = DJ_TYPE_Q8_0;
        else if (t != DJ_TYPE_Q8_0) t = DJ_TYPE_Q6_K;
    } else if (ft == FT_MXFP4_MOE) {
        t = ne[2] > 1 ? DJ_TYPE_MXFP4 : DJ_TYPE_Q8_0;
    } else if (c == C_TOKEN_EMBD) {
        if (ft == FT_TQ1_0 || ft == FT_TQ2_0 || ft == FT_Q2_0) t = DJ_TYPE_Q4_K;
    } else if (attn_v_like(c)) {
        const int i = q->i_attn_v;
        if (ft == FT_Q2_K) t = q->n_gqa >= 4 ? DJ_TYPE_Q4_K : DJ_TYPE_Q3_K;
        else if (ft == FT_IQ3_S && q->n_gqa >= 4) t = DJ_TYPE_Q4_K;
        else if (ft == FT_IQ3_M) t = DJ_TYPE_Q4_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? DJ_TYPE_Q5_K : DJ_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = DJ_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && q->n_gqa >= 4) t = DJ_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, q->n_attn_v)) t = DJ_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = DJ_TYPE_Q5_K;
        /* "8 heads sharing the same attn_v weights": more bits for little size */
        if (q->is_70b && (t == DJ_TYPE_Q3_K || t == DJ_TYPE_Q4_K)) t = DJ_TYPE_Q5_K;
        /* "for the 8-expert model, bumping this to Q8_0 trades just ~128MB" */
        if (q->n_expert == 8) t = DJ_TYPE_Q8_0;
        q->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (q->n_expert == 8) t = DJ_TYPE_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int il, nl;
        enum dj_status st = ffn_layer(q, name, len, &il, &nl);
        if (st) return st;
        if (ft == FT_Q2_K) t = DJ_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = il < nl / 16 ? DJ_TYPE_Q5_K : !q->falcon || use_more_bits(il, nl) ? DJ_TYPE_Q4_K : DJ_TYPE_Q3_K;
        else if (ft == FT_IQ3_M && (il < nl / 8 || (q->n_expert == 8 && use_more_bits(il, nl)))) t = DJ_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = q->falcon ? DJ_TYPE_Q4_K : DJ_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (q->falcon) t = il < nl / 16 ? DJ_TYPE_Q6_K : use_more_bits(il, nl) ? DJ_TYPE_Q5_K : DJ_TYPE_Q4_K;
            else if (use_more_bits(il, nl)) t = DJ_TYPE_Q6_K;
        } else if (il < nl / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS)) t = DJ_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(il, nl)) t = DJ_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !q->falcon && il < nl / 8) t = DJ_TYPE_Q5_K;
        q->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (q->falcon) {
            if (ft == FT_Q3_K_L) t = DJ_TYPE_Q4_K;
        } else if (q->n_expert == 8) {
            if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                ft == FT_Q4_K_M || ft == FT_IQ3_S || ft == FT_IQ3_M || ft == FT_IQ4_XS)
                t = DJ_TYPE_Q5_K;
        } else if (ft == FT_Q2_K) t = DJ_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M || ft == FT_IQ3_M) t = DJ_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = DJ_TYPE_Q5_K;
    }
    /* (llama.cpp's attn_qkv, ffn_gate and ffn_up rules are for IQ3 types or
     * unreachable: attn_qkv is caught by the attn_v branch above) */
    *type = t;
    return DJ_OK;
}

/* llama.cpp's tensor_type_fallback: the block of `t` does not divide the rows. */
static uint32_t fallback(uint32_t t) {
    switch (t) {
    case DJ_TYPE_IQ1_S: case DJ_TYPE_IQ1_M: case DJ_TYPE_IQ2_XXS: case DJ_TYPE_IQ2_XS: case DJ_TYPE_IQ2_S:
    case DJ_TYPE_IQ3_XXS: case DJ_TYPE_IQ3_S: case DJ_TYPE_IQ4_XS: return DJ_TYPE_IQ4_NL;
    case DJ_TYPE_Q2_0: case DJ_TYPE_Q2_K: case DJ_TYPE_Q3_K: case DJ_TYPE_TQ1_0: case DJ_TYPE_TQ2_0:
        return DJ_TYPE_Q4_0;
    case DJ_TYPE_Q4_K: return DJ_TYPE_Q5_0;
    case DJ_TYPE_Q5_K: return DJ_TYPE_Q5_1;
    case DJ_TYPE_Q6_K: return DJ_TYPE_Q8_0;
    default: return DJ_TYPE_F16; /* llama-quantize: "no tensor type fallback is defined" (an error) */
    }
}

enum dj_status quant_mix_type(struct quant_mix *q, const char *name, size_t len, const int64_t ne[4], uint32_t *type,
                              bool *fell_back) {
    uint32_t n_dims = 1;
    for (uint32_t d = 1; d < 4; d++)
        if (ne[d] > 1) n_dims = d + 1;
    if (fell_back) *fell_back = false;
    if (!quantizable(name, len, n_dims)) return DJ_OK;
    const struct dj_type_info *bi = dj_type_info(q->base);
    if (bi->blck == 1) { /* F16, BF16, F32: no mix, no fallback (ggml_is_quantized is false) */
        *type = q->base;
        return DJ_OK;
    }
    uint32_t t;
    enum dj_status st = mix_rules(q, name, len, ne, &t);
    if (st) return st;
    if (ne[0] % (int64_t)dj_type_info(t)->blck != 0) {
        t = fallback(t);
        if (ne[0] % (int64_t)dj_type_info(t)->blck != 0) t = DJ_TYPE_F16;
        if (fell_back) *fell_back = true;
    }
    *type = t;
    return DJ_OK;
}

/* llama_model_loader's weight_name_comparer: by the N of "blk.N." (-1 without
 * one), then bytewise by name. */
int quant_mix_order(const char *a, const char *b) {
    int la = -1, lb = -1;
    sscanf(a, "blk.%d.", &la);
    sscanf(b, "blk.%d.", &lb);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}
