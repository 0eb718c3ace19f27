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
 *
 * --exit-scan measures what an early-exit self-speculative draft (ctx_forward_exit,
 * then ctx_forward resuming at the exit layer) would gain at each exit layer L:
 * over the scored positions, how often the argmax of the logits after layer L
 * (output norm and matrix on that layer's residual stream) equals the full
 * model's (teacher-forced: the text, not the model's own output, is the
 * context); and, on the same context, the time of a one-token draft step at L
 * and of a verify batch relative to a one-token full decode, with the speedup
 * the two predict (exit_scan_usage states the formula).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/status.h"
#include "core/timer.h"
#include "model/context.h"
#include "opt/opt.h"

static void ppl_usage(FILE *f) {
    fprintf(f,
            "usage: deja perplexity -m MODEL -f FILE [-c CTX] [-t THREADS] [--ubatch N] [--chunks N] [--json]\n"
            "                       [-ctk T] [-ctv T] [--kl-f32] [--exit-scan [--exit-k K]]\n"
            "  llama.cpp's perplexity: non-overlapping chunks of CTX tokens (default 512), BOS at the\n"
            "  start of each, the second half of each chunk scored.  --json prints ppl, ppl_err, n_chunks.\n"
            CLI_KV_TYPE_HELP
            "  --kl-f32            also run each chunk with an f32 K/V cache: mean KL divergence of the\n"
            "                      chosen types' next-token distributions from it, and top-1 agreement\n"
            "  --exit-scan         for every exit layer L in 1..n_layer-1: top-1 agreement a of the early-exit\n"
            "                      logits (output norm + matrix after layer L) with the full model's over the\n"
            "                      scored positions; r = time of a one-token draft step at L (ctx_forward_exit)\n"
            "                      and v = time of a verify batch (k draft tokens resuming at L + the last\n"
            "                      draft from layer 0, ctx_forward), both over a one-token full decode on the\n"
            "                      same context (median of interleaved repetitions); predicted speedup of\n"
            "                      greedy drafting of k tokens: E / (k*r + v), E = (1 - a^(k+1)) / (1 - a)\n"
            "                      tokens per verify (assumes each draft token is accepted independently with\n"
            "                      probability a, the teacher-forced agreement; sampling and overheads ignored)\n"
            "  --exit-k N          k for --exit-scan (default 4)\n");
}

/* ---- --exit-scan ------------------------------------------------------------------- */

/* Index of the largest of n floats (the first on ties). */
static size_t argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t k = 1; k < n; k++)
        if (x[k] > x[best]) best = k;
    return best;
}

/* The early-exit argmax of every scored position of the chunk the context just
 * decoded (its K/V rows of every layer are in the cache): layer by layer, each
 * ctx_forward_exit resumes from the previous one's hidden rows, so the scan
 * costs one pass over the scored tokens plus an output matrix per layer.
 * agree[L] counts positions whose exit-at-L argmax equals full_top[i]. */
static enum dj_status exit_scan_chunk(struct dj_context *c, const dj_token *chunk, size_t j0, size_t n,
                                      const size_t *full_top, float *h0, float *h1, float *lx, uint32_t *start,
                                      uint32_t *pos, uint32_t *out, struct kv_seq **seqs, size_t *agree) {
    const struct dj_hparams *hp = &c->model->hp;
    for (size_t i = 0; i < n; i++) {
        pos[i] = (uint32_t)(j0 + i);
        out[i] = (uint32_t)i;
        seqs[i] = c->seq;
    }
    for (uint32_t L = 1; L < hp->n_layer; L++) {
        for (size_t i = 0; i < n; i++) start[i] = L - 1;
        struct dj_batch b = {n, chunk + j0, pos, seqs, n, out, L > 1 ? start : NULL, L > 1 ? h0 : NULL};
        enum dj_status st = ctx_forward_exit(c, &b, L, h1, lx);
        if (st) return st;
        for (size_t i = 0; i < n; i++) agree[L] += argmax(lx + i * hp->n_vocab, hp->n_vocab) == full_top[i];
        float *t = h0;
        h0 = h1;
        h1 = t;
    }
    return DJ_OK;
}

/* Expected tokens a verify yields when each of n tokens it checks matches with
 * probability a, independently, and it stops at the first miss (which it
 * replaces by the full model's token): 1 + a + ... + a^(n-1). */
static double xs_tokens(double a, uint32_t n) { return a >= 1.0 ? (double)n : (1.0 - pow(a, (double)n)) / (1.0 - a); }

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times, on context c holding `depth` positions of toks: a one-token full decode
 * (t_full, microseconds), and per L in 1..n_layer-1 a one-token draft step
 * (ctx_forward_exit at L, keeping its hidden row) and a verify batch (k tokens
 * resuming at L from hidden rows the draft gave, then one from layer 0), as
 * ratios r[L], v[L] to t_full.  Nothing advances: every call rewrites the same
 * rows.  Medians of `reps` rounds, each round timing every case in turn (so a
 * busy machine slows them alike); a case is timed over enough calls to last
 * about 10 ms. */
static enum dj_status exit_scan_time(struct dj_context *c, const dj_token *toks, size_t depth, uint32_t k, int reps,
                                     double *t_full, double *r, double *v, double *v_at) {
    const struct dj_hparams *hp = &c->model->hp;
    const uint32_t NL = hp->n_layer;
    enum dj_status st = DJ_OK;
    ctx_reset(c);
    if ((st = ctx_decode(c, toks, depth, NULL, false))) return st;
    if ((st = kv_seq_prepare(c->seq, k + 1))) return st;
    uint32_t pos[17], start[17], out[17];
    struct kv_seq *seqs[17];
    for (uint32_t i = 0; i <= k; i++) pos[i] = (uint32_t)depth + i, out[i] = i, seqs[i] = c->seq;
    float *lg = malloc((size_t)(k + 1) * hp->n_vocab * sizeof(float));
    float *hid = malloc((size_t)NL * (k + 1) * hp->n_embd * sizeof(float)); /* per L: k draft rows */
    double *samp = malloc((size_t)reps * (3 * NL + 1) * sizeof(double));   /* [rep][case] */
    if (!lg || !hid || !samp) {
        st = dj_fail(DJ_ERR_NOMEM, "exit-scan: out of memory");
        goto out;
    }
    const dj_token *tk = toks + depth; /* the text's next tokens stand for the drafts */
    for (uint32_t L = 1; L < NL; L++) {
        struct dj_batch d = {k, tk, pos, seqs, 0, NULL};
        if ((st = ctx_forward_exit(c, &d, L, hid + (size_t)L * (k + 1) * hp->n_embd, NULL))) goto out;
    }
    /* case 0: full decode; 3L-2: draft at L; 3L-1: verify at L; 3L: verify at L without the last draft */
    int n_inner = 1;
    for (int round = -1; round < reps; round++)
        for (uint32_t cs = 0; cs < 3 * NL - 2; cs++) {
            const uint32_t L = (cs + 2) / 3;
            const int64_t t0 = dj_time_us();
            for (int it = 0; it < n_inner; it++) {
                if (cs == 0) {
                    struct dj_batch b = {1, tk, pos, seqs, 1, out};
                    st = ctx_forward(c, &b, lg);
                } else if (cs % 3 == 1) {
                    struct dj_batch b = {1, tk, pos, seqs, 1, out};
                    st = ctx_forward_exit(c, &b, L, hid, lg); /* hid's row 0: scratch */
                } else {
                    const uint32_t n = cs % 3 == 2 ? k + 1 : k;
                    for (uint32_t i = 0; i <= k; i++) start[i] = i < k ? L : 0;
                    struct dj_batch b = {n, tk, pos, seqs, n, out, start, hid + (size_t)L * (k + 1) * hp->n_embd};
                    st = ctx_forward(c, &b, lg);
                }
                if (st) goto out;
            }
            const double us = (double)(dj_time_us() - t0) / n_inner;
            if (round < 0) { /* calibration round (also warms up) */
                if (cs == 0) n_inner = us > 10000 ? 1 : (int)(10000 / (us > 1 ? us : 1));
                continue;
            }
            samp[(size_t)round * (3 * NL + 1) + cs] = us;
        }
    double *col = malloc((size_t)reps * sizeof(double));
    if (!col) {
        st = dj_fail(DJ_ERR_NOMEM, "exit-scan: out of memory");
        goto out;
    }
    for (uint32_t cs = 0; cs < 3 * NL - 2; cs++) {
        for (int i = 0; i < reps; i++) col[i] = samp[(size_t)i * (3 * NL + 1) + cs];
        qsort(col, (size_t)reps, sizeof *col, cmp_double);
        const double med = reps % 2 ? col[reps / 2] : 0.5 * (col[reps / 2 - 1] + col[reps / 2]);
        if (cs == 0) *t_full = med;
        else if (cs % 3 == 1) r[(cs + 2) / 3] = med / *t_full;
        else if (cs % 3 == 2) v[(cs + 2) / 3] = med / *t_full;
        else v_at[cs / 3] = med / *t_full;
    }
    free(col);
out:
    free(lg);
    free(hid);
    free(samp);
    return st;
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL;
    long n_ctx = 512, n_threads = 1, ubatch = 512, max_chunks = -1;
    long exit_k = 4;
    bool json = false, kl_f32 = false, exit_scan = false, ok;
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
        } else if (!strcmp(a, "--exit-scan")) {
            exit_scan = true;
        } else if (!strcmp(a, "--exit-k")) dst = &exit_k;
        else if (!strcmp(a, "-c")) dst = &n_ctx;
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
    if (exit_k > 16 || exit_k + 1 > n_ctx / 2)
        return cli_error("perplexity", "--exit-k %ld: at most 16 and below CTX/2 - 1", exit_k);
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
    /* --exit-scan */
    size_t *agree = NULL, *full_top = NULL;
    float *h0 = NULL, *h1 = NULL, *lx = NULL;
    uint32_t *xs_start = NULL, *xs_pos = NULL, *xs_out = NULL;
    struct kv_seq **xs_seq = NULL;
    double *xs_r = NULL, *xs_v = NULL, *xs_va = NULL, t_full = 0;
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
    const uint32_t NL = m->hp.n_layer;
    const size_t j0 = (size_t)n_ctx / 2, n_scored = (size_t)n_ctx - 1 - j0; /* the scored positions */
    if (exit_scan) {
        const size_t E = m->hp.n_embd;
        agree = calloc(NL + 1, sizeof *agree);
        full_top = malloc(n_scored * sizeof *full_top);
        h0 = malloc(n_scored * E * sizeof(float));
        h1 = malloc(n_scored * E * sizeof(float));
        lx = malloc(n_scored * V * sizeof(float));
        xs_start = malloc(n_scored * sizeof *xs_start);
        xs_pos = malloc(n_scored * sizeof *xs_pos);
        xs_out = malloc(n_scored * sizeof *xs_out);
        xs_seq = malloc(n_scored * sizeof *xs_seq);
        xs_r = calloc(NL + 1, sizeof *xs_r);
        xs_v = calloc(NL + 1, sizeof *xs_v);
        xs_va = calloc(NL + 1, sizeof *xs_va);
        if (!agree || !full_top || !h0 || !h1 || !lx || !xs_start || !xs_pos || !xs_out || !xs_seq || !xs_r ||
            !xs_v || !xs_va) {
            cli_error("perplexity", "out of memory");
            goto done;
        }
    }
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
        if (exit_scan && NL > 1) {
            for (size_t i = 0; i < n_scored; i++) full_top[i] = argmax(logits + (j0 + i) * V, V);
            st = exit_scan_chunk(c, chunk, j0, n_scored, full_top, h0, h1, lx, xs_start, xs_pos, xs_out, xs_seq, agree);
            if (st != DJ_OK) {
                cli_error("perplexity", "%s", dj_last_error());
                goto done;
            }
        }
        fprintf(stderr, "[%zu]%.4f,", ci + 1, exp(nll / (double)count));
    }
    fputc('\n', stderr);
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean), err = var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0;
    double secs = (double)(dj_time_us() - t0) / 1e6;
    fprintf(stderr, "perplexity: %.2f s, %.1f tokens/s\n", secs, (double)(n_chunks * (size_t)n_ctx) / secs);
    const uint32_t K = (uint32_t)exit_k;
    if (exit_scan && NL > 1) {
        if (exit_scan_time(c, toks, j0, K, 9, &t_full, xs_r, xs_v, xs_va) != DJ_OK) {
            cli_error("perplexity", "exit-scan timing: %s", dj_last_error());
            goto done;
        }
    }
    if (json) {
        printf("{\"ppl\": %.6f, \"ppl_err\": %.6f, \"n_chunks\": %zu, \"n_ctx\": %ld, \"n_tokens\": %zu, "
               "\"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\"",
               ppl, err, n_chunks, n_ctx, n_tok, dj_type_info(type_k)->name, dj_type_info(type_v)->name);
        if (c32) printf(", \"kl_f32\": %.9g, \"top1_f32\": %.6f", kl_sum / (double)count, (double)kl_top1 / (double)count);
        if (exit_scan && NL > 1) {
            printf(", \"exit_scan\": {\"k\": %u, \"n_layer\": %u, \"n_positions\": %zu, \"t_full_ms\": %.4f, "
                   "\"formula\": \"speedup = E / (k*r + v), E = (1 - a^(k+1)) / (1 - a); "
                   "speedup_at = E_at / (k*r + v_at), E_at = (1 - a^k) / (1 - a)\", \"layers\": [",
                   K, NL, n_scored * n_chunks, t_full / 1000);
            for (uint32_t L = 1; L < NL; L++) {
                const double a = (double)agree[L] / (double)(n_scored * n_chunks), e = xs_tokens(a, K + 1),
                             e_at = xs_tokens(a, K);
                printf("%s{\"L\": %u, \"top1\": %.6f, \"r\": %.4f, \"v\": %.4f, \"E\": %.4f, \"speedup\": %.4f, "
                       "\"v_at\": %.4f, \"E_at\": %.4f, \"speedup_at\": %.4f}",
                       L > 1 ? ", " : "", L, a, xs_r[L], xs_v[L], e, e / (K * xs_r[L] + xs_v[L]), xs_va[L], e_at,
                       e_at / (K * xs_r[L] + xs_va[L]));
            }
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
        if (c32)
            printf("K %s V %s against an f32 cache: mean KL divergence %.6g, same top token %.2f %%\n",
                   dj_type_info(type_k)->name, dj_type_info(type_v)->name, kl_sum / (double)count,
                   100.0 * (double)kl_top1 / (double)count);
        if (exit_scan && NL > 1) {
            printf("\nearly exit (self-speculative draft), k = %u draft tokens per verify; %zu positions, "
                   "one-token full decode %.3f ms\n"
                   "  a: top-1 agreement of the logits after layer L with the full model's (teacher-forced)\n"
                   "  r: one-token draft step at L, as a share of the full decode\n"
                   "  v: verify of the k drafts + the last one from layer 0 (k+1 tokens): E = (1 - a^(k+1)) / (1 - a)\n"
                   "  v_at: verify of the k draft inputs only, all resuming at L (k tokens): E_at = (1 - a^k) / (1 - a)\n"
                   "  speedup = E / (k*r + v), E_at / (k*r + v_at): greedy, each draft accepted independently\n"
                   "  with probability a, scheduling overheads ignored\n\n"
                   "| L | a (top-1) | r | v | E | speedup | v_at | E_at | speedup_at |\n"
                   "|---|---|---|---|---|---|---|---|---|\n",
                   K, n_scored * n_chunks, t_full / 1000);
            for (uint32_t L = 1; L < NL; L++) {
                const double a = (double)agree[L] / (double)(n_scored * n_chunks), e = xs_tokens(a, K + 1),
                             e_at = xs_tokens(a, K);
                printf("| %u/%u | %.2f %% | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", L, NL, 100 * a,
                       xs_r[L], xs_v[L], e, e / (K * xs_r[L] + xs_v[L]), xs_va[L], e_at, e_at / (K * xs_r[L] + xs_va[L]));
            }
        }
    }
    rc = 0;
done:
    free(agree);
    free(full_top);
    free(h0);
    free(h1);
    free(lx);
    free(xs_start);
    free(xs_pos);
    free(xs_out);
    free(xs_seq);
    free(xs_r);
    free(xs_v);
    free(xs_va);
    free(logits);
    free(logits32);
    free(toks);
    ctx_free(c);
    ctx_free(c32);
    model_free(m);
    free(text);
    return rc;
}
