/*
 * cmd_quantize.c — `deja quantize IN OUT TYPE` (q8_0, q4_0, q4_k_m), the type
 * choices of llama.cpp's llama-quantize without an importance matrix, so the
 * files and their perplexities compare (the rules: quant_mix.c, shared with
 * `deja synth`); inspect prints what each tensor got.
 * Quantizing uses the reference quantizers (byte-identical to ggml's
 * quantize_row_*_ref), threaded by rows with -t.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/ref/ref.h"

static void quantize_usage(FILE *f) {
    fprintf(f, "usage: deja quantize IN.gguf OUT.gguf TYPE [-t THREADS]\n"
               "  TYPE: q8_0, q4_0 or q4_k_m (llama.cpp's mixes, no importance matrix)\n");
}

static bool str_is(const struct gguf_str *s, const char *lit) { return s->len == strlen(lit) && !memcmp(s->ptr, lit, s->len); }

struct q_job {
    const struct gguf_tensor *t;
    uint32_t type;
    size_t in_row, out_row;
    int64_t K, N;
    uint8_t *out;
    float *rows;
    bool ok;
};

static void q_task(void *arg, int ith, int nth) {
    struct q_job *j = arg;
    long r0, r1;
    threadpool_split((long)j->N, 1, ith, nth, &r0, &r1);
    float *x = j->rows + (size_t)ith * (size_t)j->K;
    for (long r = r0; r < r1; r++) {
        if (!dj_ref_dequantize_row(j->t->type, (const uint8_t *)j->t->data + (size_t)r * j->in_row, x, j->K) ||
            !dj_ref_quantize_row(j->type, x, j->out + (size_t)r * j->out_row, j->K))
            j->ok = false;
    }
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0;
    long n_threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            quantize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-t")) {
            const char *v = cli_value("quantize", argc, argv, &i);
            if (!v) return 1;
            n_threads = strtol(v, NULL, 10);
            if (n_threads < 1 || n_threads > 256) return cli_error("quantize", "-t: '%s' is not a valid count", v);
        } else if (argv[i][0] == '-' || n_pos == 3) {
            quantize_usage(stderr);
            return cli_error("quantize", "unexpected argument '%s'", argv[i]);
        } else {
            pos[n_pos++] = argv[i];
        }
    }
    if (n_pos != 3) {
        quantize_usage(stderr);
        return cli_error("quantize", "need IN, OUT and TYPE");
    }
    uint32_t base, ftype;
    bool k_m = false;
    if (!strcmp(pos[2], "q8_0") || !strcmp(pos[2], "Q8_0")) base = DJ_TYPE_Q8_0, ftype = 7;
    else if (!strcmp(pos[2], "q4_0") || !strcmp(pos[2], "Q4_0")) base = DJ_TYPE_Q4_0, ftype = 2;
    else if (!strcmp(pos[2], "q4_k_m") || !strcmp(pos[2], "Q4_K_M")) base = DJ_TYPE_Q4_K, ftype = 15, k_m = true;
    else return cli_error("quantize", "TYPE '%s' is not one of q8_0, q4_0, q4_k_m", pos[2]);

    struct gguf_ctx *in = NULL;
    if (gguf_open(pos[0], &in) != DJ_OK) return cli_error("quantize", "%s", dj_last_error());
    struct gguf_writer *w = gguf_writer_create();
    struct dj_threadpool *pool = threadpool_create((int)n_threads);
    size_t nt = gguf_n_tensors(in);
    uint8_t **bufs = calloc(nt ? nt : 1, sizeof *bufs);
    float *rows = NULL;
    int rc = 1;
    enum dj_status st;
    if (!w || !pool || !bufs) {
        cli_error("quantize", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < gguf_n_kv(in); i++) {
        struct gguf_str k = gguf_kv_key(in, i);
        if (str_is(&k, "general.file_type") || str_is(&k, "general.quantization_version")) continue;
        if ((st = gguf_writer_copy_kv(w, in, i))) goto fail_st;
    }
    if ((st = gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (st = gguf_writer_set_u32(w, "general.file_type", ftype)))
        goto fail_st;
    bool has_output = gguf_find_tensor(in, "output.weight") != NULL;
    uint32_t n_expert = 0, n_layer = 0; /* "<arch>.expert_count", "<arch>.block_count"; 0 when absent */
    struct gguf_str arch;
    if (gguf_get_str(in, "general.architecture", &arch) == DJ_OK && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.ptr);
        if (gguf_get_u32(in, key, &n_expert) != DJ_OK) n_expert = 0;
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
        if (gguf_get_u32(in, key, &n_layer) != DJ_OK) n_layer = 0;
    }
    struct quant_mix mix = {base, k_m, has_output, n_expert, n_layer, 0, 0, 0, 0};
    int64_t max_k = 1;
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor *t = gguf_tensor(in, i);
        quant_mix_count(&mix, t->name.ptr, t->name.len);
        if (t->ne[0] > max_k) max_k = t->ne[0];
    }
    rows = malloc((size_t)n_threads * (size_t)max_k * sizeof(float));
    if (!rows) {
        cli_error("quantize", "out of memory");
        goto done;
    }
    size_t bytes_in = 0, bytes_out = 0;
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor *t = gguf_tensor(in, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 255 ? t->name.len : 255), t->name.ptr);
        uint32_t type = t->type;
        if ((st = quant_mix_type(&mix, t->name.ptr, t->name.len, t->n_dims, t->ne[0], &type))) {
            cli_error("quantize", "%s: %s", pos[0], dj_last_error());
            goto done;
        }
        if (type != t->type && t->type != DJ_TYPE_F32 && t->type != DJ_TYPE_F16 && t->type != DJ_TYPE_BF16) {
            cli_error("quantize", "%s: tensor '%s' is already %s; quantize from f32/f16/bf16", pos[0], name,
                      dj_type_name(t->type));
            goto done;
        }
        const void *data = t->data;
        size_t nbytes = t->nbytes;
        if (type != t->type) {
            int64_t N = 1;
            for (uint32_t d = 1; d < t->n_dims; d++) N *= t->ne[d];
            size_t out_row;
            dj_row_bytes(type, t->ne[0], &out_row);
            nbytes = out_row * (size_t)N;
            bufs[i] = malloc(nbytes);
            if (!bufs[i]) {
                cli_error("quantize", "out of memory (%zu bytes for %s)", nbytes, name);
                goto done;
            }
            struct q_job j = {t, type, t->nbytes / (size_t)N, out_row, t->ne[0], N, bufs[i], rows, true};
            threadpool_run(pool, q_task, &j);
            if (!j.ok) {
                cli_error("quantize", "%s: cannot convert tensor '%s' from %s to %s", pos[0], name, dj_type_name(t->type),
                          dj_type_name(type));
                goto done;
            }
            data = bufs[i];
        }
        if ((st = gguf_writer_add_tensor(w, name, type, t->n_dims, t->ne, data, nbytes))) goto fail_st;
        bytes_in += t->nbytes;
        bytes_out += nbytes;
        fprintf(stderr, "[%zu/%zu] %-32s %-5s -> %-5s\n", i + 1, nt, name, dj_type_name(t->type), dj_type_name(type));
    }
    if ((st = gguf_writer_write(w, pos[1]))) goto fail_st;
    fprintf(stderr, "quantize: %s (%.1f MB) -> %s (%.1f MB), %s\n", pos[0], (double)bytes_in / 1e6, pos[1],
            (double)bytes_out / 1e6, pos[2]);
    rc = 0;
    goto done;
fail_st:
    cli_error("quantize", "%s", dj_last_error());
done:
    for (size_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    free(rows);
    threadpool_destroy(pool);
    gguf_writer_destroy(w);
    gguf_close(in);
    return rc;
}
