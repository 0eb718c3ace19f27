/*
 * cmd_quantize.c — `deja quantize IN OUT TYPE`: the file types llama.cpp's
 * llama-quantize writes without an importance matrix (Q4_0 … Q6_K, Q4_K_M,
 * IQ4_XS, MXFP4_MOE, TQ1_0, …; quant_mix.c has the list, the per-tensor rules
 * and why the importance-matrix types are refused), writing the same bytes as
 * llama-quantize for the same input: the same metadata order (input keys,
 * then general.quantization_version and general.file_type), the same tensor
 * order (by layer, then name — llama_model_loader's), the same types and the
 * same quantizers (kernels/ref/quantize_ref.c).  Quantizing is threaded by
 * rows with -t; the bytes do not depend on the thread count.
 */
#include <inttypes.h>
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
               "  TYPE (llama-quantize's names and mixes, any case): ");
    quant_ftype_list(f, true);
    fprintf(f, "\n  not written (load-only): ");
    quant_ftype_list(f, false);
    fprintf(f, "\n");
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

/* qsort comparator over tensor indices into q_names: llama-quantize's order */
static char (*q_names)[256];
static int by_llama_order(const void *a, const void *b) {
    return quant_mix_order(q_names[*(const size_t *)a], q_names[*(const size_t *)b]);
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
    const struct quant_ftype *ft = quant_ftype_find(pos[2]);
    if (!ft) {
        quantize_usage(stderr);
        return cli_error("quantize", "TYPE '%s' is not one of llama-quantize's types", pos[2]);
    }
    if (ft->refuse) return cli_error("quantize", "TYPE %s: %s", ft->name, ft->refuse);

    struct gguf_ctx *in = NULL;
    if (gguf_open(pos[0], &in) != DJ_OK) return cli_error("quantize", "%s", dj_last_error());
    struct gguf_writer *w = gguf_writer_create();
    struct dj_threadpool *pool = threadpool_create((int)n_threads);
    size_t nt = gguf_n_tensors(in);
    uint8_t **bufs = calloc(nt ? nt : 1, sizeof *bufs);
    char(*names)[256] = calloc(nt ? nt : 1, sizeof *names);
    size_t *order = calloc(nt ? nt : 1, sizeof *order);
    int64_t max_k = 1;
    float *rows = NULL;
    int rc = 1;
    enum dj_status st;
    if (!w || !pool || !bufs || !names || !order) {
        cli_error("quantize", "out of memory");
        goto done;
    }
    /* llama-quantize copies every key, then sets these two (removed and appended), and
     * drops the split keys */
    for (size_t i = 0; i < gguf_n_kv(in); i++) {
        struct gguf_str k = gguf_kv_key(in, i);
        if (str_is(&k, "general.file_type") || str_is(&k, "general.quantization_version") || str_is(&k, "split.no") ||
            str_is(&k, "split.count") || str_is(&k, "split.tensors.count"))
            continue;
        if ((st = gguf_writer_copy_kv(w, in, i))) goto fail_st;
    }
    if ((st = gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (st = gguf_writer_set_u32(w, "general.file_type", ft->ftype)))
        goto fail_st;
    struct quant_mix mix;
    {
        /* "<arch>.expert_count", "<arch>.block_count", head counts of layer 0; 0 when absent */
        uint32_t hp[4] = {0, 0, 0, 0};
        static const char *const keys[4] = {"expert_count", "block_count", "attention.head_count",
                                            "attention.head_count_kv"};
        char arch[64] = "";
        struct gguf_str a;
        if (gguf_get_str(in, "general.architecture", &a) == DJ_OK && a.len < sizeof arch)
            snprintf(arch, sizeof arch, "%.*s", (int)a.len, a.ptr);
        for (int k = 0; k < 4 && arch[0]; k++) {
            char key[128];
            snprintf(key, sizeof key, "%s.%s", arch, keys[k]);
            struct gguf_arr arr;
            if (gguf_get_u32(in, key, &hp[k]) != DJ_OK) {
                hp[k] = 0; /* per-layer head counts: layer 0's, as llama.cpp's n_gqa() */
                if (gguf_get_arr(in, key, &arr) == DJ_OK && arr.n > 0) hp[k] = (uint32_t)gguf_arr_i64(&arr, 0);
            }
        }
        if (hp[3] == 0) hp[3] = hp[2]; /* head_count_kv defaults to head_count */
        quant_mix_init(&mix, ft, arch, hp[0], hp[1], hp[2], hp[3]);
    }
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor *t = gguf_tensor(in, i);
        quant_mix_count(&mix, t->name.ptr, t->name.len);
        if (t->ne[0] > max_k) max_k = t->ne[0];
        snprintf(names[i], sizeof names[i], "%.*s", (int)(t->name.len < 255 ? t->name.len : 255), t->name.ptr);
        order[i] = i;
    }
    q_names = names;
    qsort(order, nt, sizeof *order, by_llama_order);
    rows = malloc((size_t)n_threads * (size_t)max_k * sizeof(float));
    if (!rows) {
        cli_error("quantize", "out of memory");
        goto done;
    }
    size_t bytes_in = 0, bytes_out = 0;
    int n_fallback = 0;
    for (size_t io = 0; io < nt; io++) {
        const size_t i = order[io];
        const struct gguf_tensor *t = gguf_tensor(in, i);
        const char *name = names[i];
        uint32_t type = t->type;
        bool fell_back = false;
        if ((st = quant_mix_type(&mix, t->name.ptr, t->name.len, t->ne, &type, &fell_back))) {
            cli_error("quantize", "%s: %s", pos[0], dj_last_error());
            goto done;
        }
        if (fell_back) {
            n_fallback++;
            fprintf(stderr, "quantize: %s: rows of %" PRId64 " are not whole blocks of the mix's type: %s\n", name,
                    t->ne[0], dj_type_name(type));
        }
        if (type != t->type && t->type != DJ_TYPE_F32 && t->type != DJ_TYPE_F16 && t->type != DJ_TYPE_BF16) {
            cli_error("quantize", "%s: tensor '%s' is already %s; quantize from f32/f16/bf16", pos[0], name,
                      dj_type_name(t->type));
            goto done;
        }
        const void *data = t->data;
        size_t nbytes = t->nbytes;
        int64_t N = 1;
        uint32_t n_dims = 1; /* written as ggml_n_dims: trailing dimensions of 1 dropped */
        for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++) {
            N *= t->ne[d];
            if (t->ne[d] > 1) n_dims = d + 1;
        }
        if (type != t->type) {
            size_t out_row;
            dj_row_bytes(type, t->ne[0], &out_row);
            nbytes = out_row * (size_t)N;
            bufs[i] = malloc(nbytes ? nbytes : 1);
            if (!bufs[i]) {
                cli_error("quantize", "out of memory (%zu bytes for %s)", nbytes, name);
                goto done;
            }
            struct q_job j = {t, type, N ? t->nbytes / (size_t)N : 0, out_row, t->ne[0], N, bufs[i], rows, true};
            threadpool_run(pool, q_task, &j);
            if (!j.ok) {
                cli_error("quantize", "%s: cannot convert tensor '%s' from %s to %s", pos[0], name,
                          dj_type_name(t->type), dj_type_name(type));
                goto done;
            }
            data = bufs[i];
        }
        if ((st = gguf_writer_add_tensor(w, name, type, n_dims, t->ne, data, nbytes))) goto fail_st;
        bytes_in += t->nbytes;
        bytes_out += nbytes;
        fprintf(stderr, "[%zu/%zu] %-32s %-5s -> %-5s\n", io + 1, nt, name, dj_type_name(t->type), dj_type_name(type));
    }
    if (n_fallback)
        fprintf(stderr, "quantize: %d of %zu tensors took a fallback type (their rows are not whole blocks)\n",
                n_fallback, nt);
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
    free(names);
    free(order);
    free(rows);
    threadpool_destroy(pool);
    gguf_writer_destroy(w);
    gguf_close(in);
    return rc;
}
