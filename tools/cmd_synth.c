/*
 * cmd_synth.c — `deja synth`: a model with random weights at real shapes, so
 * performance at realistic sizes can be measured without downloading a model
 * (DESIGN.md §7).  The tokenizer (every tokenizer.* key) is copied from a
 * vocab file, so prompts tokenize as they would with the real model.
 *
 * Weights: uniform in ±0.035 (std ≈ 0.02, the usual initialisation), from a
 * generator seeded by --seed and the tensor's name, so the same command writes
 * the same bytes; norm weights are 1.  Matrices are stored as --type (quantized
 * with the reference quantizers), vectors as F32.  Generation is spread over
 * -t threads by rows; the result does not depend on the thread count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/hash.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/ref/ref.h"

struct preset {
    const char *name;
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
};

static const struct preset presets[] = {
    {"tiny", 256, 4, 8, 4, 768, 2048},
    {"1b", 2048, 16, 32, 8, 8192, 4096},
    {"8b", 4096, 32, 32, 8, 14336, 8192},
};

static void synth_usage(FILE *f) {
    fprintf(f,
            "usage: deja synth --arch llama|qwen2|qwen3 --preset tiny|1b|8b [--type f16|q8_0|q4_0|q4_k]\n"
            "                  --vocab-from VOCAB.gguf -o OUT.gguf [--seed S] [-t THREADS]\n"
            "  random weights at real shapes (1b: n_embd 2048, 16 layers, 32 heads, 8 KV heads, n_ff 8192;\n"
            "  8b: 4096, 32, 32, 8, 14336; tiny: 256, 4, 8, 4, 768), tokenizer copied from VOCAB.gguf.\n"
            "  --type: storage of the matrices (default f16); vectors are f32.\n");
}

/* A tensor to generate: name, K (row length), N (rows), a matrix (takes
 * --type) or a vector (F32), initialised to ones (norms) or random. */
struct spec {
    char name[64];
    int64_t K, N;
    bool matrix, ones;
};

struct gen_job {
    const char *name;
    uint64_t seed;
    uint32_t type;
    int64_t K, N;
    size_t row_bytes;
    uint8_t *out;
    float *rows; /* per-thread float row buffers */
    bool ones;
};

static void gen_task(void *arg, int ith, int nth) {
    struct gen_job *j = arg;
    long r0, r1;
    threadpool_split((long)j->N, 1, ith, nth, &r0, &r1);
    float *x = j->rows + (size_t)ith * (size_t)j->K;
    for (long r = r0; r < r1; r++) {
        /* one independent stream per row: the bytes do not depend on the split */
        uint64_t s = dj_fnv1a_u32(dj_fnv1a(j->seed, j->name, strlen(j->name)), (uint32_t)r) | 1;
        for (int64_t i = 0; i < j->K; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i] = j->ones ? 1.0f : ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * 0.035f;
        }
        bool ok = dj_ref_quantize_row(j->type, x, j->out + (size_t)r * j->row_bytes, j->K);
        (void)ok; /* the type and K were checked before the job started */
    }
}

int cmd_synth(int argc, char **argv) {
    const char *arch = NULL, *preset_name = NULL, *type_name = "f16", *vocab_path = NULL, *out_path = NULL;
    unsigned long long seed = 42;
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
        else if (!strcmp(a, "--seed") || !strcmp(a, "-t")) {
            const char *v = cli_value("synth", argc, argv, &i);
            char *end;
            if (!v) return 1;
            unsigned long long x = strtoull(v, &end, 10);
            if (*end || end == v || (a[1] == 't' && (x < 1 || x > 256)))
                return cli_error("synth", "%s: '%s' is not a valid number", a, v);
            if (a[1] == 't') n_threads = (long)x;
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
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3"))
        return cli_error("synth", "--arch: '%s' is not one of llama, qwen2, qwen3", arch);
    const struct preset *P = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, preset_name)) P = &presets[i];
    if (!P) return cli_error("synth", "--preset: '%s' is not one of tiny, 1b, 8b", preset_name);
    int type = !strcmp(type_name, "q4_k") ? DJ_TYPE_Q4_K : dj_type_from_name(type_name);
    if (type != DJ_TYPE_F16 && type != DJ_TYPE_Q8_0 && type != DJ_TYPE_Q4_0 && type != DJ_TYPE_Q4_K &&
        type != DJ_TYPE_F32 && type != DJ_TYPE_BF16)
        return cli_error("synth", "--type: '%s' is not one of f16, q8_0, q4_0, q4_k (or f32, bf16)", type_name);

    struct gguf_ctx *voc = NULL;
    if (gguf_open(vocab_path, &voc) != DJ_OK) return cli_error("synth", "%s", dj_last_error());
    struct gguf_arr toks;
    if (gguf_get_arr(voc, "tokenizer.ggml.tokens", &toks) != DJ_OK || toks.type != GGUF_TYPE_STRING) {
        gguf_close(voc);
        return cli_error("synth", "%s: no tokenizer.ggml.tokens string array", vocab_path);
    }
    const uint32_t n_vocab = (uint32_t)toks.n;
    const bool qwen = arch[0] == 'q';
    const uint32_t hd = P->n_embd / P->n_head;
    struct gguf_writer *w = gguf_writer_create();
    struct dj_threadpool *pool = threadpool_create((int)n_threads);
    int rc = 1;
    uint8_t **bufs = NULL;
    size_t n_bufs = 0;
    float *rows = NULL;
    struct spec *sp = NULL;
    if (!w || !pool) {
        cli_error("synth", "out of memory");
        goto done;
    }
    char key[160], name[96];
    enum dj_status st = DJ_OK;
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
    snprintf(name, sizeof name, "deja-synth-%s-%s-%s", arch, preset_name, type_name);
    uint32_t ftype = type == DJ_TYPE_F32 ? 0 : type == DJ_TYPE_F16 ? 1 : type == DJ_TYPE_Q4_0 ? 2 : type == DJ_TYPE_Q8_0 ? 7
                   : type == DJ_TYPE_Q4_K ? 14 : 32;
    if ((st = gguf_writer_set_str(w, "general.architecture", arch, strlen(arch))) ||
        (st = gguf_writer_set_str(w, "general.name", name, strlen(name))) ||
        (st = gguf_writer_set_u32(w, "general.file_type", ftype)) ||
        (st = gguf_writer_set_u32(w, KEY("vocab_size"), n_vocab)) ||
        (st = gguf_writer_set_u32(w, KEY("context_length"), P->n_ctx)) ||
        (st = gguf_writer_set_u32(w, KEY("embedding_length"), P->n_embd)) ||
        (st = gguf_writer_set_u32(w, KEY("block_count"), P->n_layer)) ||
        (st = gguf_writer_set_u32(w, KEY("feed_forward_length"), P->n_ff)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.head_count"), P->n_head)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.head_count_kv"), P->n_head_kv)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.key_length"), hd)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.value_length"), hd)) ||
        (st = gguf_writer_set_u32(w, KEY("rope.dimension_count"), hd)) ||
        (st = gguf_writer_set_f32(w, KEY("rope.freq_base"), qwen ? 1000000.0f : 10000.0f)) ||
        (st = gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), qwen ? 1e-6f : 1e-5f)))
        goto fail_st;
#undef KEY
    for (size_t i = 0; i < gguf_n_kv(voc); i++) {
        struct gguf_str k = gguf_kv_key(voc, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10) && (st = gguf_writer_copy_kv(w, voc, i))) goto fail_st;
    }

    const int64_t E = P->n_embd, Q = (int64_t)P->n_head * hd, KV = (int64_t)P->n_head_kv * hd, F = P->n_ff;
    size_t max_specs = 3 + (size_t)P->n_layer * 14;
    sp = calloc(max_specs, sizeof *sp);
    bufs = calloc(max_specs, sizeof *bufs);
    if (!sp || !bufs) {
        cli_error("synth", "out of memory");
        goto done;
    }
    size_t ns = 0;
#define ADD(nm, k, n, mat, one)                                                  \
    do {                                                                         \
        snprintf(sp[ns].name, sizeof sp[ns].name, "%s", nm);                     \
        sp[ns].K = k, sp[ns].N = n, sp[ns].matrix = mat, sp[ns].ones = one;      \
        ns++;                                                                    \
    } while (0)
    ADD("token_embd.weight", E, n_vocab, true, false);
    ADD("output_norm.weight", E, 1, false, true);
    ADD("output.weight", E, n_vocab, true, false);
    for (uint32_t il = 0; il < P->n_layer; il++) {
        char n[64];
#define L(suffix, k, nn, mat, one)                                 \
    do {                                                           \
        snprintf(n, sizeof n, "blk.%u.%s", il, suffix);            \
        ADD(n, k, nn, mat, one);                                   \
    } while (0)
        L("attn_norm.weight", E, 1, false, true);
        L("attn_q.weight", E, Q, true, false);
        L("attn_k.weight", E, KV, true, false);
        L("attn_v.weight", E, KV, true, false);
        if (!strcmp(arch, "qwen2")) {
            L("attn_q.bias", Q, 1, false, false);
            L("attn_k.bias", KV, 1, false, false);
            L("attn_v.bias", KV, 1, false, false);
        }
        if (!strcmp(arch, "qwen3")) {
            L("attn_q_norm.weight", hd, 1, false, true);
            L("attn_k_norm.weight", hd, 1, false, true);
        }
        L("attn_output.weight", Q, E, true, false);
        L("ffn_norm.weight", E, 1, false, true);
        L("ffn_gate.weight", E, F, true, false);
        L("ffn_up.weight", E, F, true, false);
        L("ffn_down.weight", F, E, true, false);
#undef L
    }
#undef ADD
    rows = malloc((size_t)n_threads * (size_t)(F > E ? F : E) * sizeof(float));
    if (!rows) {
        cli_error("synth", "out of memory");
        goto done;
    }
    size_t total = 0;
    for (size_t i = 0; i < ns; i++) {
        uint32_t t = sp[i].matrix ? (uint32_t)type : DJ_TYPE_F32;
        size_t rb;
        if (!dj_row_bytes(t, sp[i].K, &rb)) {
            t = DJ_TYPE_F16; /* a row the block size does not divide */
            dj_row_bytes(t, sp[i].K, &rb);
        }
        size_t nb = rb * (size_t)sp[i].N;
        bufs[n_bufs] = malloc(nb);
        if (!bufs[n_bufs]) {
            cli_error("synth", "out of memory allocating %zu bytes for %s (total so far %zu)", nb, sp[i].name, total);
            goto done;
        }
        struct gen_job j = {sp[i].name, seed, t, sp[i].K, sp[i].N, rb, bufs[n_bufs], rows, sp[i].ones};
        threadpool_run(pool, gen_task, &j);
        int64_t ne[2] = {sp[i].K, sp[i].N};
        if ((st = gguf_writer_add_tensor(w, sp[i].name, t, sp[i].N == 1 ? 1 : 2, ne, bufs[n_bufs], nb))) goto fail_st;
        n_bufs++;
        total += nb;
    }
    if ((st = gguf_writer_write(w, out_path))) goto fail_st;
    fprintf(stderr, "synth: wrote %s: %s %s, %zu tensors, %.2f GB of weights\n", out_path, arch, preset_name, n_bufs,
            (double)total / 1e9);
    rc = 0;
    goto done;
fail_st:
    cli_error("synth", "%s", dj_last_error());
done:
    free(sp);
    for (size_t i = 0; i < n_bufs; i++) free(bufs[i]);
    free(bufs);
    free(rows);
    threadpool_destroy(pool);
    gguf_writer_destroy(w);
    gguf_close(voc);
    return rc;
}
