/*
 * cmd_synth.c — `deja synth`: a model with random weights at real shapes, so
 * performance at realistic sizes can be measured without downloading a model
 * (DESIGN.md §7).  The tokenizer (every tokenizer.* key) is copied from a
 * vocab file, so prompts tokenize as they would with the real model.
 *
 * Weights: uniform in ±0.035 (std ≈ 0.02, the usual initialisation), from a
 * generator seeded by --seed and the tensor's name, so the same command writes
 * the same bytes; norm weights are 1.  Matrices are stored as --type: F32, F16,
 * BF16, Q8_0 and Q4_0 quantized with the reference quantizers; every other
 * weight type (Q4_K, Q6_K and all the types of synth_blocks.h: Q4_1 … IQ4_XS,
 * TQ*, MXFP4, NVFP4, Q1_0, Q2_0) as random blocks with sane scales, weights
 * within about ±0.035..0.1 (the reference quantizers' search costs about 40
 * minutes of 2 cores for a 30B-A3B model, and the importance-matrix types have
 * none); q4_k_m: llama.cpp's mix, quant_mix.c.  Vectors and MoE routers are F32.  Generation is spread over -t threads by rows; the
 * result does not depend on the thread count.
 *
 * Architectures: llama, qwen2, qwen3 (dense), llama with experts (Mixtral-style),
 * qwen3moe, deepseek2 (MLA in the split attn_k_b / attn_v_b layout that
 * llama.cpp's converter writes), glm4moe (with its NextN block) and mistral3, with the metadata keys and tensor names and
 * shapes llama.cpp loads (golden/moe/README.md).  Tensors are produced while the
 * file is written (gguf_writer_add_tensor_fill), so a 17 GB model needs memory
 * for its largest tensor only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/hash.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/ref/ref.h"
#include "synth_blocks.h"

struct preset {
    const char *name, *archs; /* archs: the --arch values it applies to, space-separated */
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    /* MoE (n_expert 0: dense): experts, used per token, expert width, shared experts, leading dense layers */
    uint32_t n_expert, n_used, n_ff_exp, n_shared, n_dense;
    /* MLA (deepseek2): kv_lora, q_lora (0: none), qk_nope, qk_rope, v_head */
    uint32_t kv_lora, q_lora, qk_nope, qk_rope, v_head;
    uint32_t n_swa; /* gemma, gpt-oss: attention.sliding_window */
    uint32_t n_nextn;   /* glm4moe: NextN blocks after the n_layer run ones */
    uint32_t yarn_orig; /* mistral3: YaRN original context (and temperature floor) */
    float yarn_factor;  /* mistral3: rope.scaling.factor */
    bool tiny;          /* glm4moe: q/k norms; mistral3: attn_output bias, beta 8/2, log_mul 0.5;
                           qwen3next: the older fused ssm_in instead of attn_qkv / attn_gate */
    /* hybrids (qwen35, qwen35moe, qwen3next): Gated DeltaNet conv taps, head size S, k and v heads;
     * rotated dims; shared expert width; full_attention_interval (0: the key absent, 4);
     * M-RoPE sections (qwen35, qwen35moe) */
    uint32_t ssm_conv, ssm_state, ssm_nk, ssm_nv, n_rot, n_ff_shexp, fa_interval;
    int32_t sections[4];
};

#define DENSE "llama qwen2 qwen3"
static const struct preset presets[] = {
    {"tiny", DENSE, 256, 4, 8, 4, 32, 768, 2048, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* the agent tests' model: a real vocabulary and chat template, and prompts of 25k tokens
     * prefilled in seconds (attention at depth is what costs: one head of 64) */
    {"micro", DENSE, 64, 1, 1, 1, 64, 128, 65536, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"1b", DENSE, 2048, 16, 32, 8, 64, 8192, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"8b", DENSE, 4096, 32, 32, 8, 128, 14336, 8192, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* Mixtral-style: llama with experts of width feed_forward_length */
    {"tiny-moe", "llama", 256, 4, 8, 4, 32, 256, 2048, 8, 2, 256, 0, 0, 0, 0, 0, 0, 0},
    {"tiny", "qwen3moe", 256, 4, 8, 4, 32, 768, 2048, 8, 2, 256, 0, 0, 0, 0, 0, 0, 0},
    /* Qwen3-30B-A3B / Qwen3-Coder-30B-A3B */
    {"30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128, 6144, 40960, 128, 8, 768, 0, 0, 0, 0, 0, 0, 0},
    {"tiny", "deepseek2", 256, 4, 8, 1, 0, 768, 4096, 8, 2, 256, 1, 1, 256, 0, 64, 32, 64},
    /* DeepSeek-V2-Lite (15.7B, 2.4B active) */
    {"v2-lite", "deepseek2", 2048, 27, 16, 1, 0, 10944, 163840, 64, 6, 1408, 2, 1, 512, 0, 128, 64, 128, 0},
    /* gemma3: 5 sliding layers (window 16: a prompt of a few dozen tokens crosses it) and one
     * global, as the default pattern of 6; gemma2: sliding and global alternating */
    {"tiny", "gemma3", 256, 6, 4, 2, 64, 768, 2048, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16},
    {"tiny", "gemma2", 256, 4, 4, 2, 64, 768, 2048, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16},
    /* Gemma 3 4B (window 1024, linear rope scaling 8 on the global layers) */
    {"4b", "gemma3", 2560, 34, 8, 4, 256, 10240, 131072, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024},
    /* glm4moe: head 32 rotating 16 (partial NeoX), q/k/v biases and q/k norms, 1 dense layer,
     * 8 sigmoid-routed experts of 128 (2 used) + 1 shared, one NextN block */
    {"tiny", "glm4moe", 256, 4, 8, 4, 32, 768, 2048, 8, 2, 128, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, true},
    /* GLM-4.5-Air's shape (46 + 1 NextN blocks) with 11 + 1.  q4_k_m, codelm's vocabulary:
     * --layers 2 wrote 3.45 GB, --layers 3 5.14 GB (1.69 GB a MoE block), so ~18.7 GB here */
    {"air", "glm4moe", 4096, 11, 96, 8, 128, 10944, 131072, 128, 8, 1408, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, false},
    /* mistral3: YaRN factor 4 from an original context of 16 (so positions past 16 scale
     * their queries), attn_output bias */
    {"tiny", "mistral3", 256, 4, 8, 4, 32, 768, 2048, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 4.0f, true},
    /* Devstral-Small-2-24B's text model: 40 layers, 32/8 heads of 128, YaRN 48 from 8192 */
    {"devstral", "mistral3", 5120, 40, 32, 8, 128, 32768, 393216, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8192, 48.0f,
     false},
    /* gpt-oss: sliding window 16 (tiny: the golden prompts cross it) or 128, every other layer */
    {"tiny", "gpt-oss", 256, 4, 8, 2, 32, 256, 4096, 8, 2, 256, 0, 0, 0, 0, 0, 0, 0, 16},
    /* gpt-oss-20b (21B, 3.6B active; --type mxfp4: every matrix in MXFP4, as the released experts) */
    {"20b", "gpt-oss", 2880, 24, 64, 8, 64, 2880, 131072, 32, 4, 2880, 0, 0, 0, 0, 0, 0, 0, 128},
    /* hybrids: 4 layers, heads of 64 rotating 16 (M-RoPE sections 3/3/2 cover them), DeltaNet
     * heads of 32 (2 k heads, 4 v heads), conv 4.  qwen35: dense, layers 0-2 DeltaNet and 3
     * attention (the default interval, key absent), one NextN block; qwen35moe: interval 2
     * (two attention layers), 8 experts of 128 (2 used) + a shared expert of 256, one NextN
     * block; qwen3next: interval 2, experts as qwen35moe, the older fused ssm_in */
    {.name = "tiny", .archs = "qwen35", .n_embd = 256, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_ff = 768, .n_ctx = 4096, .n_nextn = 1, .ssm_conv = 4, .ssm_state = 32, .ssm_nk = 2, .ssm_nv = 4, .n_rot = 16,
     .sections = {3, 3, 2, 0}},
    {.name = "tiny", .archs = "qwen35moe", .n_embd = 256, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_ff = 768, .n_ctx = 4096, .n_expert = 8, .n_used = 2, .n_ff_exp = 128, .n_nextn = 1, .ssm_conv = 4,
     .ssm_state = 32, .ssm_nk = 2, .ssm_nv = 4, .n_rot = 16, .n_ff_shexp = 256, .fa_interval = 2,
     .sections = {3, 3, 2, 0}},
    {.name = "tiny", .archs = "qwen3next", .n_embd = 256, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_ff = 768, .n_ctx = 4096, .n_expert = 8, .n_used = 2, .n_ff_exp = 128, .tiny = true, .ssm_conv = 4,
     .ssm_state = 32, .ssm_nk = 2, .ssm_nv = 4, .n_rot = 16, .n_ff_shexp = 256, .fa_interval = 2},
    /* Qwen3.5-35B-A3B (Qwen3.6-35B-A3B: the same shapes): 2048, 40 layers (every 4th attention),
     * 16/2 heads of 256 rotating 64 (sections 11/11/10), DeltaNet 16 k / 32 v heads of 128,
     * conv 4, 256 experts of 512 (8 used) + a shared expert of 512, one NextN block; checked
     * against the defaults of transformers' Qwen3_5MoeTextConfig, whose docstring names the
     * Qwen/Qwen3.5-35B-A3B checkpoint (its vocabulary, 248320, comes from --vocab-from here) */
    {.name = "35b-a3b", .archs = "qwen35moe", .n_embd = 2048, .n_layer = 40, .n_head = 16, .n_head_kv = 2,
     .head_dim = 256, .n_ff = 512, .n_ctx = 262144, .n_expert = 256, .n_used = 8, .n_ff_exp = 512, .n_nextn = 1,
     .ssm_conv = 4, .ssm_state = 128, .ssm_nk = 16, .ssm_nv = 32, .n_rot = 64, .n_ff_shexp = 512, .fa_interval = 4,
     .sections = {11, 11, 10, 0}},
};
#undef DENSE

static void synth_usage(FILE *f) {
    fprintf(f,
            "usage: deja synth --arch ARCH --preset P [--type TYPE]\n"
            "                  --vocab-from VOCAB.gguf -o OUT.gguf [--layers N] [--seed S] [-t THREADS]\n"
            "  random weights at real shapes, tokenizer copied from VOCAB.gguf.  Presets:\n"
            "    llama, qwen2, qwen3:  tiny (n_embd 256, 4 layers, 8/4 heads, n_ff 768), micro (64, 1, 1/1,\n"
            "                          128; context 65536), 1b (2048, 16, 32/8, 8192), 8b (4096, 32, 32/8, 14336)\n"
            "    llama:                tiny-moe (Mixtral-style: tiny with 8 experts of 256, 2 used)\n"
            "    qwen3moe:             tiny (8 experts of 256, 2 used), 30b-a3b (Qwen3-30B-A3B: 2048, 48\n"
            "                          layers, 32/4 heads of 128, 128 experts of 768, 8 used)\n"
            "    deepseek2:            tiny (MLA kv_lora 256, 8 experts, 1 shared), v2-lite (DeepSeek-V2-Lite:\n"
            "                          2048, 27 layers, 16 heads, kv_lora 512, rope 64, 64 experts of 1408, 6\n"
            "                          used, 2 shared, 1 dense layer of 10944)\n"
            "    gemma3:               tiny (256, 6 layers: 5 sliding with window 16 and 1 global, 4/2 heads\n"
            "                          of 64, n_ff 768), 4b (Gemma 3 4B: 2560, 34 layers, 8/4 heads of 256,\n"
            "                          10240, window 1024, linear rope scaling 8)\n"
            "    gemma2:               tiny (gemma3's tiny with 4 layers alternating, soft-capping 50/30)\n"
            "    glm4moe:              tiny (head 32 rotating 16, biases, q/k norms, 8 experts of 128, 2 used,\n"
            "                          1 shared, 1 dense layer, 1 NextN block), air (GLM-4.5-Air's shape: 4096,\n"
            "                          96/8 heads of 128 rotating 64, 128 experts of 1408, 8 used, 1 shared,\n"
            "                          1 dense layer of 10944; 11 layers + 1 NextN instead of 46 + 1)\n"
            "    mistral3:             tiny (llama tiny with YaRN 4 from 16, temperature scaling 0.1, an\n"
            "                          attn_output bias), devstral (Devstral-Small-2: 5120, 40 layers, 32/8\n"
            "                          heads of 128, n_ff 32768, YaRN 48 from 8192, temperature 0.1)\n"
            "    qwen35:               tiny (256, 4 layers: 3 Gated DeltaNet + 1 gated attention, 4/2 heads of\n"
            "                          64 rotating 16, DeltaNet 2 k / 4 v heads of 32, n_ff 768, 1 NextN block)\n"
            "    qwen35moe:            tiny (qwen35's with attention every 2nd layer, 8 experts of 128, 2 used,\n"
            "                          a shared expert of 256), 35b-a3b (Qwen3.5-35B-A3B: 2048, 40 layers, 16/2\n"
            "                          heads of 256, DeltaNet 16 k / 32 v heads of 128, 256 experts of 512, 8\n"
            "                          used, shared 512, 1 NextN block)\n"
            "    qwen3next:            tiny (qwen35moe's tiny without NextN, the older fused ssm_in)\n"
            "  --type: storage of the matrices (default f16): f32, f16, bf16, q8_0, q4_0 (quantized), q4_k_m\n"
            "  (llama.cpp's mix, as deja quantize), or random blocks of q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k\n"
            "  q6_k iq4_nl iq4_xs iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m tq1_0 tq2_0 mxfp4 nvfp4\n"
            "  q1_0 q2_0 (every row length a multiple of the type's block; otherwise f16);\n"
            "  vectors and MoE routers are f32.  --layers: fewer (or more) layers than the preset.\n"
            "  The file is written tensor by tensor: memory stays near the largest tensor.\n");
}

/* A tensor to generate: name, K (row length), N (rows, all dims above the first),
 * its shape, a matrix (takes --type) or a vector (F32), ones (norms) or random. */
struct spec {
    char name[64];
    int64_t K, N;
    int64_t ne[3];
    uint32_t n_dims, type;
    size_t row_bytes;
    bool ones;
    float offset; /* added to the random values (hybrids: ssm_a negative, ssm_dt a slow decay) */
    const struct synth_state *S;
};

struct synth_state {
    uint64_t seed;
    struct dj_threadpool *pool;
    float *rows; /* per-thread float row buffers of max K */
};

struct gen_job {
    const struct spec *sp;
    uint8_t *out;
};

static void gen_task(void *arg, int ith, int nth) {
    const struct gen_job *j = arg;
    const struct spec *sp = j->sp;
    long r0, r1;
    threadpool_split((long)sp->N, 1, ith, nth, &r0, &r1);
    float *x = sp->S->rows + (size_t)ith * (size_t)sp->K;
    for (long r = r0; r < r1; r++) {
        /* one independent stream per row: the bytes do not depend on the split */
        uint64_t s = dj_fnv1a_u32(dj_fnv1a(sp->S->seed, sp->name, strlen(sp->name)), (uint32_t)r) | 1;
        uint8_t *row = j->out + (size_t)r * sp->row_bytes;
        if (synth_random_type(sp->type)) {
            synth_random_blocks(sp->type, row, sp->K / (int64_t)dj_type_info(sp->type)->blck, s);
            continue;
        }
        for (int64_t i = 0; i < sp->K; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i] = sp->ones ? 1.0f : ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * 0.035f + sp->offset;
        }
        bool ok = dj_ref_quantize_row(sp->type, x, row, sp->K);
        (void)ok; /* the type and K were checked when the spec was made */
    }
}

/* gguf_fill_fn: generates the tensor while the file is written. */
static enum dj_status gen_fill(void *arg, void *buf, size_t nbytes) {
    const struct spec *sp = arg;
    (void)nbytes; /* row_bytes * N, checked by the writer */
    struct gen_job j = {sp, buf};
    threadpool_run(sp->S->pool, gen_task, &j);
    return DJ_OK;
}

/* general.file_type (llama.cpp's enum llama_ftype, informational only) of a file whose
 * matrices are all `type`: the "mostly" file type of that tensor type, the _S variant
 * where llama.cpp has several. */
static uint32_t synth_ftype(uint32_t type) {
    static const struct { uint32_t type, ftype; } map[] = {
        {DJ_TYPE_F32, 0},      {DJ_TYPE_F16, 1},     {DJ_TYPE_Q4_0, 2},     {DJ_TYPE_Q4_1, 3},    {DJ_TYPE_Q8_0, 7},
        {DJ_TYPE_Q5_0, 8},     {DJ_TYPE_Q5_1, 9},    {DJ_TYPE_Q2_K, 10},    {DJ_TYPE_Q3_K, 11},   {DJ_TYPE_Q4_K, 14},
        {DJ_TYPE_Q5_K, 16},    {DJ_TYPE_Q6_K, 18},   {DJ_TYPE_IQ2_XXS, 19}, {DJ_TYPE_IQ2_XS, 20}, {DJ_TYPE_IQ3_XXS, 23},
        {DJ_TYPE_IQ1_S, 24},   {DJ_TYPE_IQ4_NL, 25}, {DJ_TYPE_IQ3_S, 26},   {DJ_TYPE_IQ2_S, 28},  {DJ_TYPE_IQ4_XS, 30},
        {DJ_TYPE_IQ1_M, 31},   {DJ_TYPE_BF16, 32},   {DJ_TYPE_TQ1_0, 36},   {DJ_TYPE_TQ2_0, 37},  {DJ_TYPE_MXFP4, 38},
        {DJ_TYPE_NVFP4, 39},   {DJ_TYPE_Q1_0, 40},   {DJ_TYPE_Q2_0, 41},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].type == type) return map[i].ftype;
    return 1024; /* LLAMA_FTYPE_GUESSED */
}

static bool arch_in(const char *arch, const char *list) {
    size_t n = strlen(arch);
    for (const char *p = list; (p = strstr(p, arch)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return true;
    return false;
}

int cmd_synth(int argc, char **argv) {
    const char *arch = NULL, *preset_name = NULL, *type_name = "f16", *vocab_path = NULL, *out_path = NULL;
    unsigned long long seed = 42, n_layer_opt = 0;
    long n_threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            synth_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--arch")) dst = &arch;
        else if (!strcmp(a, "--preset")) dst = &preset_name;
        else if (!strcmp(a, "--type")) dst = &type_name;
        else if (!strcmp(a, "--vocab-from")) dst = &vocab_path;
        else if (!strcmp(a, "-o")) dst = &out_path;
        else if (!strcmp(a, "--seed") || !strcmp(a, "-t") || !strcmp(a, "--layers")) {
            const char *v = cli_value("synth", argc, argv, &i);
            char *end;
            if (!v) return 1;
            unsigned long long x = strtoull(v, &end, 10);
            if (*end || end == v || (a[1] == 't' && (x < 1 || x > 256)) || (a[2] == 'l' && (x < 1 || x > 1024)))
                return cli_error("synth", "%s: '%s' is not a valid number", a, v);
            if (a[1] == 't') n_threads = (long)x;
            else if (a[2] == 'l') n_layer_opt = x;
            else seed = x;
        } else {
            synth_usage(stderr);
            return cli_error("synth", "unknown argument '%s'", a);
        }
        if (dst && !(*dst = cli_value("synth", argc, argv, &i))) return 1;
    }
    if (!arch || !preset_name || !vocab_path || !out_path) {
        synth_usage(stderr);
        return cli_error("synth", "need --arch, --preset, --vocab-from and -o");
    }
    if (!arch_in(arch, "llama qwen2 qwen3 qwen3moe deepseek2 gemma2 gemma3 glm4moe mistral3 gpt-oss qwen35 qwen35moe "
                 "qwen3next"))
        return cli_error("synth", "--arch: '%s' is not one of llama, qwen2, qwen3, qwen3moe, deepseek2, gemma2, gemma3, "
                         "glm4moe, mistral3, gpt-oss, qwen35, qwen35moe, qwen3next", arch);
    struct preset P = {0};
    bool found = false;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, preset_name) && arch_in(arch, presets[i].archs)) P = presets[i], found = true;
    if (!found) {
        char names[256] = "";
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
            if (arch_in(arch, presets[i].archs))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                         presets[i].name);
        return cli_error("synth", "--preset: '%s' is not a preset of %s (%s)", preset_name, arch, names);
    }
    if (n_layer_opt) {
        if (n_layer_opt <= P.n_dense) return cli_error("synth", "--layers: %s %s needs more than %u", arch, preset_name, P.n_dense);
        P.n_layer = (uint32_t)n_layer_opt;
    }
    const bool k_m = !strcmp(type_name, "q4_k_m");
    int type = !strcmp(type_name, "q4_k") || k_m ? DJ_TYPE_Q4_K : dj_type_from_name(type_name);
    if (type != DJ_TYPE_F16 && type != DJ_TYPE_Q8_0 && type != DJ_TYPE_Q4_0 && type != DJ_TYPE_F32 &&
        type != DJ_TYPE_BF16 && !(type >= 0 && synth_random_type((uint32_t)type)))
        return cli_error("synth", "--type: '%s' is not one of f16, bf16, f32, q8_0, q4_0, q4_k_m or a weight type of "
                         "synth_blocks.h (deja synth --help)", type_name);

    struct gguf_ctx *voc = NULL;
    if (gguf_open(vocab_path, &voc) != DJ_OK) return cli_error("synth", "%s", dj_last_error());
    struct gguf_arr toks;
    if (gguf_get_arr(voc, "tokenizer.ggml.tokens", &toks) != DJ_OK || toks.type != GGUF_TYPE_STRING) {
        gguf_close(voc);
        return cli_error("synth", "%s: no tokenizer.ggml.tokens string array", vocab_path);
    }
    const uint32_t n_vocab = (uint32_t)toks.n;
    const bool qwen = arch[0] == 'q', mla = !strcmp(arch, "deepseek2"), moe = P.n_expert > 0;
    const bool llama_moe = moe && !strcmp(arch, "llama");
    const bool gemma = !strncmp(arch, "gemma", 5), gemma3 = !strcmp(arch, "gemma3");
    const bool oss = !strcmp(arch, "gpt-oss");
    const bool glm = !strcmp(arch, "glm4moe"), mis3 = !strcmp(arch, "mistral3");
    const bool hyb = P.ssm_state > 0, next = !strcmp(arch, "qwen3next");
    const uint32_t fa_every = P.fa_interval ? P.fa_interval : 4;
    const uint32_t n_blocks = P.n_layer + P.n_nextn; /* block_count: glm4moe's NextN blocks included */
    const uint32_t hd = P.head_dim;
    struct gguf_writer *w = gguf_writer_create();
    struct synth_state S = {seed, threadpool_create((int)n_threads), NULL};
    int rc = 1;
    struct spec *sp = NULL;
    if (!w || !S.pool) {
        cli_error("synth", "out of memory");
        goto done;
    }
    char key[160], name[96];
    enum dj_status st = DJ_OK;
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
#define U32(k, v) (st = gguf_writer_set_u32(w, KEY(k), (v)))
#define F32(k, v) (st = gguf_writer_set_f32(w, KEY(k), (v)))
    snprintf(name, sizeof name, "deja-synth-%s-%s-%s", arch, preset_name, type_name);
    const uint32_t ftype = k_m ? 15 : synth_ftype((uint32_t)type);
    if ((st = gguf_writer_set_str(w, "general.architecture", arch, strlen(arch))) ||
        (st = gguf_writer_set_str(w, "general.name", name, strlen(name))) ||
        (st = gguf_writer_set_u32(w, "general.file_type", ftype)) ||
        (st = gguf_writer_set_u32(w, "general.quantization_version", 2)) || U32("vocab_size", n_vocab) ||
        U32("context_length", P.n_ctx) || U32("embedding_length", P.n_embd) || U32("block_count", n_blocks) ||
        U32("feed_forward_length", P.n_ff) || U32("attention.head_count", P.n_head) ||
        U32("attention.head_count_kv", P.n_head_kv) ||
        F32("attention.layer_norm_rms_epsilon", qwen || mla || gemma ? 1e-6f : 1e-5f))
        goto fail_st;
    if (mla) {
        /* the split layout llama.cpp's converter writes: key/value_length are the absorbed
         * (cached) widths, the _mla keys the per-head ones */
        if (U32("attention.key_length", P.kv_lora + P.qk_rope) || U32("attention.value_length", P.kv_lora) ||
            U32("attention.key_length_mla", P.qk_nope + P.qk_rope) || U32("attention.value_length_mla", P.v_head) ||
            U32("attention.q_lora_rank", P.q_lora) || U32("attention.kv_lora_rank", P.kv_lora) ||
            U32("rope.dimension_count", P.qk_rope) || F32("rope.freq_base", 10000.0f) ||
            (st = gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn", 4)) || F32("rope.scaling.factor", 40.0f) ||
            U32("rope.scaling.original_context_length", 4096) || F32("rope.scaling.yarn_log_multiplier", 0.0707f) ||
            U32("leading_dense_block_count", P.n_dense) || U32("expert_shared_count", P.n_shared) ||
            F32("expert_weights_scale", 1.0f) || (st = gguf_writer_set_bool(w, KEY("expert_weights_norm"), false)) ||
            U32("expert_gating_func", 1))
            goto fail_st;
    } else if (oss) { /* as llama.cpp's converter writes gpt-oss's config */
        if (U32("attention.key_length", hd) || U32("attention.value_length", hd) || U32("rope.dimension_count", hd) ||
            F32("rope.freq_base", 150000.0f) || (st = gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn", 4)) ||
            F32("rope.scaling.factor", 32.0f) || U32("rope.scaling.original_context_length", 4096) ||
            U32("attention.sliding_window", P.n_swa))
            goto fail_st;
    } else if (hyb) { /* as llama.cpp's converter writes Qwen3.5 / Qwen3-Next configs */
        if (U32("attention.key_length", hd) || U32("attention.value_length", hd) || U32("rope.dimension_count", P.n_rot) ||
            F32("rope.freq_base", 10000000.0f) || U32("ssm.conv_kernel", P.ssm_conv) ||
            U32("ssm.state_size", P.ssm_state) || U32("ssm.group_count", P.ssm_nk) ||
            U32("ssm.time_step_rank", P.ssm_nv) || U32("ssm.inner_size", P.ssm_state * P.ssm_nv) ||
            (P.fa_interval && U32("full_attention_interval", P.fa_interval)) ||
            (P.n_nextn && U32("nextn_predict_layers", P.n_nextn)) ||
            (moe && U32("expert_shared_feed_forward_length", P.n_ff_shexp)) ||
            (!next && (st = gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, P.sections, 4))))
            goto fail_st;
    } else if (U32("attention.key_length", hd) || U32("attention.value_length", hd) ||
               U32("rope.dimension_count", glm ? hd / 2 : hd) ||
               F32("rope.freq_base", qwen || gemma3 || glm || (mis3 && P.tiny) ? 1000000.0f : mis3 ? 100000000.0f : 10000.0f)) {
        goto fail_st;
    }
    if (glm && (U32("leading_dense_block_count", P.n_dense) || U32("expert_shared_count", P.n_shared) ||
                F32("expert_weights_scale", P.tiny ? 2.5f : 1.0f) ||
                (st = gguf_writer_set_bool(w, KEY("expert_weights_norm"), true)) || U32("expert_gating_func", 2) ||
                U32("nextn_predict_layers", P.n_nextn)))
        goto fail_st;
    /* mistral3: the keys convert_hf_to_gguf.py writes for Ministral 3 / Devstral 2 (yarn from
     * rope_parameters, mscale_all_dim as the log multiplier, llama_4_scaling_beta) */
    if (mis3 && ((st = gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn", 4)) ||
                 F32("rope.scaling.factor", P.yarn_factor) || U32("rope.scaling.original_context_length", P.yarn_orig) ||
                 F32("rope.scaling.yarn_beta_fast", P.tiny ? 8.0f : 32.0f) ||
                 F32("rope.scaling.yarn_beta_slow", P.tiny ? 2.0f : 1.0f) ||
                 F32("rope.scaling.yarn_log_multiplier", P.tiny ? 0.5f : 1.0f) ||
                 F32("attention.temperature_scale", 0.1f)))
        goto fail_st;
    /* gemma: the keys llama.cpp's converter writes (gemma2's soft-capping; Gemma 3 4B's linear
     * rope scaling of the global layers) */
    if (gemma && (U32("attention.sliding_window", P.n_swa) ||
                  (!gemma3 && (F32("attn_logit_softcapping", 50.0f) || F32("final_logit_softcapping", 30.0f))) ||
                  (P.n_embd >= 2560 && ((st = gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear", 6)) ||
                                        F32("rope.scaling.factor", 8.0f)))))
        goto fail_st;
    if (moe && (U32("expert_count", P.n_expert) || U32("expert_used_count", P.n_used) ||
                (!llama_moe && U32("expert_feed_forward_length", P.n_ff_exp))))
        goto fail_st;
#undef F32
#undef U32
#undef KEY
    for (size_t i = 0; i < gguf_n_kv(voc); i++) {
        struct gguf_str k = gguf_kv_key(voc, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10) && (st = gguf_writer_copy_kv(w, voc, i))) goto fail_st;
    }

    const int64_t E = P.n_embd, H = P.n_head, Q = H * hd, KV = (int64_t)P.n_head_kv * hd,
                  F = llama_moe ? P.n_ff_exp : P.n_ff, FE = P.n_ff_exp, NE = P.n_expert,
                  R = P.kv_lora, NOPE = P.qk_nope, ROPE = P.qk_rope, VH = P.v_head;
    size_t max_specs = 3 + (size_t)n_blocks * 24;
    sp = calloc(max_specs, sizeof *sp);
    if (!sp) {
        cli_error("synth", "out of memory");
        goto done;
    }
    size_t ns = 0;
    int64_t max_k = 1;
    /* dims: 1 (a vector), 2 (K x N) or 3 (K x N x NE: MoE experts, MLA per-head slabs) */
#define ADD(nm, k, n, n3, dims, one)                                                      \
    do {                                                                                  \
        snprintf(sp[ns].name, sizeof sp[ns].name, "%s", nm);                              \
        sp[ns].K = k, sp[ns].N = (int64_t)(n) * (n3), sp[ns].ones = one;                 \
        sp[ns].ne[0] = k, sp[ns].ne[1] = n, sp[ns].ne[2] = n3, sp[ns].n_dims = dims;     \
        if ((k) > max_k) max_k = k;                                                       \
        ns++;                                                                             \
    } while (0)
    ADD("token_embd.weight", E, n_vocab, 1, 2, false);
    ADD("output_norm.weight", E, 1, 1, 1, true);
    if (!gemma) ADD("output.weight", E, n_vocab, 1, 2, false); /* gemma: tied, as the released files */
    for (uint32_t il = 0; il < n_blocks; il++) {
        char n[64];
#define L(suffix, k, nn, n3, dims, one)                            \
    do {                                                           \
        snprintf(n, sizeof n, "blk.%u.%s", il, suffix);            \
        ADD(n, k, nn, n3, dims, one);                              \
    } while (0)
        L("attn_norm.weight", E, 1, 1, 1, true);
        const bool recr = hyb && il < P.n_layer && (il + 1) % fa_every != 0;
        if (recr) { /* Gated DeltaNet */
            const int64_t SD = P.ssm_state, KD = SD * P.ssm_nk, VD = SD * P.ssm_nv, NV = P.ssm_nv;
            if (P.tiny) {
                L("ssm_in.weight", E, 2 * KD + 2 * VD, 1, 2, false);
            } else {
                L("attn_qkv.weight", E, 2 * KD + VD, 1, 2, false);
                L("attn_gate.weight", E, VD, 1, 2, false);
            }
            if (next) {
                L("ssm_ba.weight", E, 2 * NV, 1, 2, false);
            } else {
                L("ssm_beta.weight", E, NV, 1, 2, false);
                L("ssm_alpha.weight", E, NV, 1, 2, false);
            }
            L("ssm_conv1d.weight", P.ssm_conv, 2 * KD + VD, 1, 2, false);
            L("ssm_dt.bias", NV, 1, 1, 1, false);
            sp[ns - 1].offset = -4.0f; /* softplus(-4) = 0.018: a decay of ~0.98 a token */
            L("ssm_a", NV, 1, 1, 1, false);
            sp[ns - 1].offset = -1.0f; /* -exp(A_log) */
            L("ssm_norm.weight", SD, 1, 1, 1, true);
            L("ssm_out.weight", VD, E, 1, 2, false);
        } else if (hyb) { /* gated attention: per head [q | gate] */
            L("attn_q.weight", E, 2 * Q, 1, 2, false);
            L("attn_k.weight", E, KV, 1, 2, false);
            L("attn_v.weight", E, KV, 1, 2, false);
            L("attn_q_norm.weight", hd, 1, 1, 1, true);
            L("attn_k_norm.weight", hd, 1, 1, 1, true);
            L("attn_output.weight", Q, E, 1, 2, false);
        } else if (mla) {
            if (P.q_lora) {
                L("attn_q_a.weight", E, P.q_lora, 1, 2, false);
                L("attn_q_a_norm.weight", P.q_lora, 1, 1, 1, true);
                L("attn_q_b.weight", P.q_lora, H * (NOPE + ROPE), 1, 2, false);
            } else {
                L("attn_q.weight", E, H * (NOPE + ROPE), 1, 2, false);
            }
            L("attn_kv_a_mqa.weight", E, R + ROPE, 1, 2, false);
            L("attn_kv_a_norm.weight", R, 1, 1, 1, true);
            L("attn_k_b.weight", NOPE, R, H, 3, false);
            L("attn_v_b.weight", R, VH, H, 3, false);
            L("attn_output.weight", H * VH, E, 1, 2, false);
        } else {
            L("attn_q.weight", E, Q, 1, 2, false);
            L("attn_k.weight", E, KV, 1, 2, false);
            L("attn_v.weight", E, KV, 1, 2, false);
            if (!strcmp(arch, "qwen2") || glm || oss) {
                L("attn_q.bias", Q, 1, 1, 1, false);
                L("attn_k.bias", KV, 1, 1, 1, false);
                L("attn_v.bias", KV, 1, 1, 1, false);
            }
            if (!strncmp(arch, "qwen3", 5) || gemma3 || (glm && P.tiny)) {
                L("attn_q_norm.weight", hd, 1, 1, 1, true);
                L("attn_k_norm.weight", hd, 1, 1, 1, true);
            }
            L("attn_output.weight", Q, E, 1, 2, false);
            if (gemma) L("post_attention_norm.weight", E, 1, 1, 1, true);
            if (mis3 && P.tiny) L("attn_output.bias", E, 1, 1, 1, false);
            if (oss) {
                L("attn_output.bias", E, 1, 1, 1, false);
                L("attn_sinks.weight", H, 1, 1, 1, false);
            }
        }
        L(glm || oss || hyb ? "post_attention_norm.weight" : "ffn_norm.weight", E, 1, 1, 1, true);
        if (gemma) L("post_ffw_norm.weight", E, 1, 1, 1, true);
        if (!moe || il < P.n_dense) {
            L("ffn_gate.weight", E, F, 1, 2, false);
            L("ffn_up.weight", E, F, 1, 2, false);
            L("ffn_down.weight", F, E, 1, 2, false);
        } else {
            L("ffn_gate_inp.weight", E, NE, 1, 2, false);
            if (glm) L("exp_probs_b.bias", NE, 1, 1, 1, false);
            L("ffn_gate_exps.weight", E, FE, NE, 3, false);
            L("ffn_up_exps.weight", E, FE, NE, 3, false);
            L("ffn_down_exps.weight", FE, E, NE, 3, false);
            if (oss) {
                L("ffn_gate_inp.bias", NE, 1, 1, 1, false);
                L("ffn_gate_exps.bias", FE, NE, 1, 2, false);
                L("ffn_up_exps.bias", FE, NE, 1, 2, false);
                L("ffn_down_exps.bias", E, NE, 1, 2, false);
            }
            if (hyb) {
                L("ffn_gate_inp_shexp.weight", E, 1, 1, 1, false);
                L("ffn_gate_shexp.weight", E, P.n_ff_shexp, 1, 2, false);
                L("ffn_up_shexp.weight", E, P.n_ff_shexp, 1, 2, false);
                L("ffn_down_shexp.weight", P.n_ff_shexp, E, 1, 2, false);
            }
            if (P.n_shared) {
                const int64_t FS = FE * P.n_shared;
                L("ffn_gate_shexp.weight", E, FS, 1, 2, false);
                L("ffn_up_shexp.weight", E, FS, 1, 2, false);
                L("ffn_down_shexp.weight", FS, E, 1, 2, false);
            }
        }
        if (il >= P.n_layer) { /* glm4moe, qwen35 NextN: bound by deja and llama.cpp, run by neither */
            L("nextn.eh_proj.weight", 2 * E, E, 1, 2, false);
            L("nextn.enorm.weight", E, 1, 1, 1, true);
            L("nextn.hnorm.weight", E, 1, 1, 1, true);
            L("nextn.shared_head_norm.weight", E, 1, 1, 1, true);
        }
#undef L
    }
#undef ADD
    S.rows = malloc((size_t)n_threads * (size_t)max_k * sizeof(float));
    if (!S.rows) {
        cli_error("synth", "out of memory");
        goto done;
    }
    struct quant_mix mix; /* q4_k_m: the tensors are made in llama-quantize's order of layers */
    quant_mix_init(&mix, quant_ftype_find("Q4_K_M"), arch, P.n_expert, n_blocks, P.n_head, P.n_head_kv);
    for (size_t i = 0; i < ns; i++) quant_mix_count(&mix, sp[i].name, strlen(sp[i].name));
    size_t total = 0;
    for (size_t i = 0; i < ns; i++) {
        uint32_t t = sp[i].n_dims == 1 || strstr(sp[i].name, "ffn_gate_inp") || strstr(sp[i].name, ".bias") ||
                             strstr(sp[i].name, "ssm_conv1d")
                         ? DJ_TYPE_F32 : (uint32_t)type;
        const int64_t ne4[4] = {sp[i].ne[0], sp[i].n_dims > 1 ? sp[i].ne[1] : 1, sp[i].n_dims > 2 ? sp[i].ne[2] : 1, 1};
        if (k_m && (st = quant_mix_type(&mix, sp[i].name, strlen(sp[i].name), ne4, &t, NULL))) goto fail_st;
        size_t rb;
        if (!dj_row_bytes(t, sp[i].K, &rb)) {
            t = DJ_TYPE_F16; /* a row the block size does not divide */
            dj_row_bytes(t, sp[i].K, &rb);
        }
        sp[i].type = t, sp[i].row_bytes = rb, sp[i].S = &S;
        const size_t nb = rb * (size_t)sp[i].N;
        if ((st = gguf_writer_add_tensor_fill(w, sp[i].name, t, sp[i].n_dims, sp[i].ne, nb, gen_fill, &sp[i])))
            goto fail_st;
        total += nb;
    }
    if ((st = gguf_writer_write(w, out_path))) goto fail_st;
    fprintf(stderr, "synth: wrote %s: %s %s, %u layers, %zu tensors, %.2f GB of weights\n", out_path, arch, preset_name,
            n_blocks, ns, (double)total / 1e9);
    rc = 0;
    goto done;
fail_st:
    cli_error("synth", "%s", dj_last_error());
done:
    free(sp);
    free(S.rows);
    threadpool_destroy(S.pool);
    gguf_writer_destroy(w);
    gguf_close(voc);
    return rc;
}
