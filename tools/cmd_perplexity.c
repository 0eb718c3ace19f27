/*
 * cmd_perplexity.c — `deja perplexity -m M -f FILE [-c CTX]`, llama.cpp's
 * method so the figures compare: the text is tokenized once (with BOS if the
 * vocab adds one), cut into non-overlapping chunks of CTX tokens; each chunk
 * is evaluated from an empty cache with its first token replaced by BOS; the
 * second half of each chunk is scored (the negative log-likelihood of token
 * j+1 given logits j, for j in [CTX/2, CTX-1)).  PPL = exp(mean NLL), and the
 * ± estimate is PPL * sqrt(var(NLL) / (count - 1)).
 *
 * The LLAMA_OPT_* configuration is read from the environment as every command
 * that runs the model does (bad values: a message and exit 1; settings of
 * features that do not exist yet: a warning).  Each chunk runs in one context
 * without the engine, so of the implemented variables only LLAMA_OPT_BLOCK_SIZE
 * (the KV block size; results do not depend on it) applies.
 *
 * -ctk/-ctv choose the K/V cache types; with --kl-f32 each chunk is evaluated a
 * second time with an f32 cache and the scored positions also give the mean KL
 * divergence KL(f32 || chosen types) and how often both pick the same top token —
 * the quality cost of a K/V type (docs/BENCHMARKS.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "model/context.h"
#include "opt/opt.h"

static void ppl_usage(FILE *f) {
    fprintf(f,
            "usage: deja perplexity -m MODEL -f FILE [-c CTX] [-t THREADS] [--ubatch N] [--chunks N] [--json]\n"
            "                       [-ctk T] [-ctv T] [--kl-f32]\n"
            "  llama.cpp's perplexity: non-overlapping chunks of CTX tokens (default 512), BOS at the\n"
            "  start of each, the second half of each chunk scored.  --json prints ppl, ppl_err, n_chunks.\n"
            CLI_KV_TYPE_HELP
            "  --kl-f32            also run each chunk with an f32 K/V cache: mean KL divergence of the\n"
            "                      chosen types' next-token distributions from it, and top-1 agreement\n");
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL;
    long n_ctx = 512, n_threads = 1, ubatch = 512, max_chunks = -1;
    bool json = false, kl_f32 = false, ok;
    uint32_t type_k = kv_type_default(), type_v = kv_type_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long *dst = NULL;
        if (cli_kv_type_opt("perplexity", argc, argv, &i, &type_k, &type_v, &ok)) {
            if (!ok) return 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ppl_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) {
            if (!(model_path = cli_value("perplexity", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f")) {
            if (!(file = cli_value("perplexity", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--kl-f32")) {
            kl_f32 = true;
        } else if (!strcmp(a, "-c")) dst = &n_ctx;
        else if (!strcmp(a, "-t")) dst = &n_threads;
        else if (!strcmp(a, "--ubatch")) dst = &ubatch;
        else if (!strcmp(a, "--chunks")) dst = &max_chunks;
        else {
            ppl_usage(stderr);
            return cli_error("perplexity", "unknown argument '%s'", a);
        }
        if (dst) {
            if (!(v = cli_value("perplexity", argc, argv, &i))) return 1;
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || end == v || x < (dst == &max_chunks ? -1 : 1) || x > 10000000)
                return cli_error("perplexity", "%s: '%s' is not a valid count", a, v);
            *dst = x;
        }
    }
    if (!model_path || !file) {
        ppl_usage(stderr);
        return cli_error("perplexity", "need -m MODEL and -f FILE");
    }
    if (n_ctx < 4) return cli_error("perplexity", "-c must be at least 4");
    struct llama_opt_config opt;
    if (llama_opt_config_from_env(&opt) != DJ_OK) return cli_error("perplexity", "%s", dj_last_error());
    size_t len;
    char *text = cli_read_file("perplexity", file, &len);
    if (!text) return 1;
    int rc = 1;
    struct dj_model *m = NULL;
    struct dj_context *c = NULL, *c32 = NULL;
    dj_token *toks = NULL;
    float *logits = NULL, *logits32 = NULL;
    double kl_sum = 0;
    size_t kl_top1 = 0;
    size_t n_tok = 0;
    if (model_load(model_path, &m) != DJ_OK) {
        cli_error("perplexity", "%s", dj_last_error());
        goto done;
    }
    if (vocab_tokenize(m->vocab, text, len, true, false, &toks, &n_tok) != DJ_OK) {
        cli_error("perplexity", "%s", dj_last_error());
        goto done;
    }
    if (n_tok < 2 * (size_t)n_ctx) {
        cli_error("perplexity", "%s: %zu tokens; need at least 2*CTX = %ld", file, n_tok, 2 * n_ctx);
        goto done;
    }
    size_t n_chunks = n_tok / (size_t)n_ctx;
    if (max_chunks > 0 && (size_t)max_chunks < n_chunks) n_chunks = (size_t)max_chunks;
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_threads = (int)n_threads;
    cp.n_ubatch = (uint32_t)ubatch;
    cp.block_size = opt.block_size;
    cp.type_k = type_k;
    cp.type_v = type_v;
    cp.rope_table_max = opt.precompute_enabled ? opt.precompute_rope_max : 0;
    if (ctx_create(m, cp, &c) != DJ_OK) {
        cli_error("perplexity", "%s", dj_last_error());
        goto done;
    }
    const size_t V = m->hp.n_vocab;
    if (kl_f32) {
        cp.type_k = cp.type_v = DJ_TYPE_F32;
        if (ctx_create(m, cp, &c32) != DJ_OK) {
            cli_error("perplexity", "%s", dj_last_error());
            goto done;
        }
        logits32 = malloc((size_t)n_ctx * V * sizeof(float));
    }
    logits = malloc((size_t)n_ctx * V * sizeof(float));
    if (!logits || (kl_f32 && !logits32)) {
        cli_error("perplexity", "out of memory");
        goto done;
    }
    const dj_token bos = vocab_bos(m->vocab);
    const bool add_bos = vocab_add_bos(m->vocab) && bos >= 0;
    double nll = 0, nll2 = 0;
    size_t count = 0;
    int64_t t0 = dj_time_us();
    fprintf(stderr, "perplexity: %zu tokens, %zu chunks of %ld\n", n_tok, n_chunks, n_ctx);
    for (size_t ci = 0; ci < n_chunks; ci++) {
        dj_token *chunk = toks + ci * (size_t)n_ctx;
        dj_token saved = chunk[0];
        if (add_bos) chunk[0] = bos;
        ctx_reset(c);
        enum dj_status st = ctx_decode(c, chunk, (size_t)n_ctx, logits, true);
        if (st == DJ_OK && c32) {
            ctx_reset(c32);
            st = ctx_decode(c32, chunk, (size_t)n_ctx, logits32, true);
        }
        chunk[0] = saved;
        if (st != DJ_OK) {
            cli_error("perplexity", "%s", dj_last_error());
            goto done;
        }
        for (long j = n_ctx / 2; j < n_ctx - 1; j++) {
            const float *lg = logits + (size_t)j * V;
            float mx = lg[0];
            for (size_t k = 1; k < V; k++) mx = lg[k] > mx ? lg[k] : mx;
            double sum = 0;
            for (size_t k = 0; k < V; k++) sum += (double)expf(lg[k] - mx); /* expf, summed in double: llama.cpp's log_softmax */
            const double v = -((double)(lg[chunk[j + 1]] - mx) - log(sum));
            nll += v;
            nll2 += v * v;
            count++;
            if (c32) {
                const float *lr = logits32 + (size_t)j * V;
                size_t ia = 0, ib = 0;
                for (size_t k = 1; k < V; k++) {
                    if (lr[k] > lr[ia]) ia = k;
                    if (lg[k] > lg[ib]) ib = k;
                }
                double zr = 0, z = 0; /* both normalized the same way: KL(x || x) = 0 */
                for (size_t k = 0; k < V; k++) {
                    zr += exp((double)lr[k] - lr[ia]);
                    z += exp((double)lg[k] - lg[ib]);
                }
                const double lzr = log(zr) + lr[ia], lz = log(z) + lg[ib];
                double kl = 0;
                for (size_t k = 0; k < V; k++) {
                    const double a = (double)lr[k] - lzr, b = (double)lg[k] - lz;
                    kl += exp(a) * (a - b);
                }
                kl_sum += kl;
                kl_top1 += ia == ib;
            }
        }
        fprintf(stderr, "[%zu]%.4f,", ci + 1, exp(nll / (double)count));
    }
    fputc('\n', stderr);
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean), err = var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0;
    double secs = (double)(dj_time_us() - t0) / 1e6;
    fprintf(stderr, "perplexity: %.2f s, %.1f tokens/s\n", secs, (double)(n_chunks * (size_t)n_ctx) / secs);
    if (json) {
        printf("{\"ppl\": %.6f, \"ppl_err\": %.6f, \"n_chunks\": %zu, \"n_ctx\": %ld, \"n_tokens\": %zu, "
               "\"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\"",
               ppl, err, n_chunks, n_ctx, n_tok, dj_type_info(type_k)->name, dj_type_info(type_v)->name);
        if (c32) printf(", \"kl_f32\": %.9g, \"top1_f32\": %.6f", kl_sum / (double)count, (double)kl_top1 / (double)count);
        printf("}\n");
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
        if (c32)
            printf("K %s V %s against an f32 cache: mean KL divergence %.6g, same top token %.2f %%\n",
                   dj_type_info(type_k)->name, dj_type_info(type_v)->name, kl_sum / (double)count,
                   100.0 * (double)kl_top1 / (double)count);
    }
    rc = 0;
done:
    free(logits);
    free(logits32);
    free(toks);
    ctx_free(c);
    ctx_free(c32);
    model_free(m);
    free(text);
    return rc;
}
