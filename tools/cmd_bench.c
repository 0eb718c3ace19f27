/*
 * cmd_bench.c — `deja bench`, like llama-bench: prefill (ppN: N tokens from an
 * empty cache in ubatches) and decode (tgN: N tokens one at a time from an
 * empty cache) throughput, the median of -r repetitions, and for decode the
 * achieved GB/s of weights read (every weight but the token embedding, whose
 * one row per token is negligible; of an MoE layer's experts, the n_expert_used a
 * token reads).  --membw measures this machine's memory
 * read bandwidth in the same run (each thread streams its share of a 2 GiB
 * buffer with 256-bit loads) and prints decode GB/s as a fraction of it.
 *
 * --batch N1,N2,...: instead, the serving engine's aggregate throughput with N
 * concurrent sequences, in the shapes of llama.cpp's llama-batched-bench (each
 * sequence its own -p-token prompt of random ids, nothing shared, then -n
 * greedy tokens): PP is one engine step holding the N prompts (chunked prefill
 * off), TG the decode steps after it, each one batched forward pass over the N
 * sequences; the columns are llama-batched-bench's (S_TG = N * n / T_TG) plus
 * the weight GB/s of the decode steps; of -r runs the fastest is kept.
 *
 * -d N (llama-bench's --n-depth): both tests start after N cached tokens (prefilled
 * once, untimed; each repetition cuts the cache back to them), so decode at depth
 * reads N positions of K/V per token — with -ctk/-ctv, of the chosen cache types.
 *
 * The LLAMA_OPT_* configuration is read from the environment as every command
 * that runs the model does (bad values: a message and exit 1; settings of
 * features that do not exist yet: a warning).  The benchmark runs one context
 * without the engine, so of the implemented variables only LLAMA_OPT_BLOCK_SIZE
 * (the KV block size) and LLAMA_OPT_PRECOMPUTE_ENABLED / _ROPE_MAX (the RoPE
 * table) apply; --batch runs the engine, which reads them all.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/context.h"
#include "opt/opt.h"

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: deja bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 3] [-t THREADS] [--ubatch 512] [-ctk T] [-ctv T]\n"
            "                  [--membw] [--json]\n"
            "       deja bench -m MODEL --batch 1,2,4,8,16 [-p 512] [-n 128] [-r 1] [-t THREADS] [--ubatch 512] [--json]\n"
            "  -p N     prefill test: N tokens (0 = skip)      -n N   decode test: N tokens (0 = skip)\n"
            "  -r N     repetitions (median reported)          --membw  also measure memory read bandwidth\n"
            "  -d N     depth: both tests run after N tokens already in the cache (prefilled once, untimed)\n"
            CLI_KV_TYPE_HELP
            "  --batch LIST  N sequences decoding together (llama-batched-bench's shapes; -p/-n per sequence)\n"
            CLI_DEVICE_HELP
            "  deja bench --membw [-t THREADS]   measures only the bandwidth\n");
}

/* ---- memory bandwidth ---------------------------------------------------- */

struct bw_job {
    const uint8_t *buf;
    size_t bytes;
    uint64_t sink;
};

__attribute__((target("avx2"))) static void *bw_thread(void *arg) {
    struct bw_job *j = arg;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= j->bytes; i += 128) {
        const __m256i *p = (const __m256i *)(j->buf + i);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(p));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + 3));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->sink = (uint64_t)_mm256_extract_epi64(a0, 0);
    return NULL;
}

/* GB/s (1e9 bytes) reading `bytes` with n threads; median of 5 passes. */
static double measure_membw(int n_threads, size_t bytes) {
    uint8_t *buf = aligned_alloc(64, bytes);
    if (!buf || !__builtin_cpu_supports("avx2")) {
        free(buf);
        return 0;
    }
    memset(buf, 1, bytes); /* fault the pages in */
    double best[5];
    for (int pass = 0; pass < 5; pass++) {
        pthread_t th[64];
        struct bw_job jobs[64];
        int nt = n_threads > 64 ? 64 : n_threads;
        size_t per = bytes / (size_t)nt / 128 * 128;
        int64_t t0 = dj_time_us();
        for (int i = 0; i < nt; i++) {
            jobs[i] = (struct bw_job){buf + (size_t)i * per, per, 0};
            pthread_create(&th[i], NULL, bw_thread, &jobs[i]);
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        double s = (double)(dj_time_us() - t0) / 1e6;
        best[pass] = (double)per * nt / s / 1e9;
    }
    free(buf);
    for (int i = 0; i < 5; i++) /* sort for the median */
        for (int k = i + 1; k < 5; k++)
            if (best[k] < best[i]) { double t = best[i]; best[i] = best[k]; best[k] = t; }
    return best[2];
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- --batch: N sequences through the serving engine --------------------------------- */

struct batch_run {
    size_t n_first, n_done, n_tok;
};
static void batch_on_token(void *ud, const struct dj_token_event *ev) {
    if (ev->pos == 0) ((struct batch_run *)ud)->n_first++;
    ((struct batch_run *)ud)->n_tok++;
}
static void batch_on_done(void *ud, const struct dj_turn_result *res) {
    ((struct batch_run *)ud)->n_done++;
    if (res->finish == DJ_FINISH_ERROR) fprintf(stderr, "deja bench: %s\n", res->error);
}

static uint32_t batch_type_k, batch_type_v, batch_gpu; /* -ctk/-ctv and --device for --batch */

/* One run with n_seq sequences: *t_pp, *t_tg in seconds; nonzero on failure. */
static int batch_once(struct dj_model *m, int n_seq, long npp, long ntg, long threads, long ubatch, uint64_t seed,
                      double *t_pp, double *t_tg) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = (uint32_t)(npp + ntg + 1);
    ep.n_threads = (int)threads;
    ep.n_ubatch = (uint32_t)ubatch;
    ep.n_batch = (uint32_t)((long)n_seq * npp);
    ep.chunked_prefill = false;
    ep.kv_type_k = batch_type_k;
    ep.kv_type_v = batch_type_v;
    ep.gpu = batch_gpu;
    /* room for every sequence at once, in whole KV blocks as the scheduler reserves them
     * (a prompt's blocks + 1; two spare): with less, later sequences wait for earlier ones
     * to finish and the decode steps are not N wide (checked below) */
    const size_t bs = ep.opt.block_size ? ep.opt.block_size : 1;
    const size_t seq_blocks = ((size_t)(npp + ntg + 1) + bs - 1) / bs + 3;
    ep.kv_budget_mib = (double)n_seq * (double)(seq_blocks * bs) * engine_kv_bytes_per_token(m, ep.kv_type_k, ep.kv_type_v) / 1048576.0 + 1;
    struct dj_engine *e = NULL;
    if (engine_create(m, &ep, &e) != DJ_OK) return cli_error("bench", "%s", dj_last_error());
    dj_token *prompt = malloc((size_t)npp * sizeof *prompt);
    struct batch_run r = {0, 0, 0};
    int rc = prompt ? 0 : cli_error("bench", "out of memory");
    uint64_t x = seed;
    for (int s = 0; s < n_seq && !rc; s++) {
        for (long k = 0; k < npp; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            prompt[k] = (dj_token)((x >> 33) % m->hp.n_vocab);
        }
        struct dj_request_params rp = engine_default_request();
        rp.prompt = prompt;
        rp.n_prompt = (size_t)npp;
        rp.max_tokens = (size_t)ntg + 1; /* the first token comes from PP; then ntg decode steps */
        rp.ignore_eos = true;
        rp.on_token = batch_on_token;
        rp.on_done = batch_on_done;
        rp.ud = &r;
        if (engine_submit(e, &rp, NULL) != DJ_OK) rc = cli_error("bench", "%s", dj_last_error());
    }
    free(prompt);
    if (!rc) {
        const int64_t t0 = dj_time_us();
        while (r.n_first < (size_t)n_seq && engine_n_pending(e)) engine_step(e);
        const int64_t t1 = dj_time_us();
        const size_t n_tok_pp = r.n_tok;
        engine_run_all(e);
        const int64_t t2 = dj_time_us();
        *t_pp = (double)(t1 - t0) / 1e6;
        *t_tg = (double)(t2 - t1) / 1e6;
        if (r.n_done != (size_t)n_seq) rc = cli_error("bench", "%zu of %d sequences finished", r.n_done, n_seq);
        else if (n_tok_pp != (size_t)n_seq || r.n_tok != (size_t)n_seq * (size_t)(ntg + 1))
            rc = cli_error("bench", "--batch %d: %zu tokens came before all first tokens, %zu in all (expected %d, "
                           "%ld): the sequences did not run together", n_seq, n_tok_pp, r.n_tok, n_seq,
                           (long)n_seq * (ntg + 1));
    }
    engine_destroy(e);
    return rc;
}

static int bench_batch(struct dj_model *m, const char *list, long npp, long ntg, long threads, long ubatch, long reps,
                       bool json, size_t weight_bytes) {
    if (npp < 1 || ntg < 1) return cli_error("bench", "--batch needs -p and -n of at least 1");
    long ns[64];
    int n_ns = 0;
    for (const char *p = list; *p;) {
        char *end;
        const long n_seq = strtol(p, &end, 10);
        if (end == p || n_seq < 1 || n_seq > 4096 || (*end && *end != ',') || n_ns == 64)
            return cli_error("bench", "--batch: '%s' is not a list of up to 64 sequence counts (1-4096)", list);
        ns[n_ns++] = n_seq;
        p = *end ? end + 1 : end;
    }
    if (!n_ns) return cli_error("bench", "--batch: an empty list");
    if (!json)
        printf("|%6s |%6s |%4s |%7s |%8s |%9s |%8s |%9s |%8s |%9s |%9s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
               "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s", "TG GB/s");
    for (int i = 0; i < n_ns; i++) {
        const long n_seq = ns[i];
        double best_pp = 0, best_tg = 0;
        for (long rep = 0; rep < reps; rep++) {
            double t_pp = 0, t_tg = 0;
            if (batch_once(m, (int)n_seq, npp, ntg, threads, ubatch, 0x243f6a8885a308d3ULL + (uint64_t)rep, &t_pp, &t_tg))
                return 1;
            if (rep == 0 || t_pp + t_tg < best_pp + best_tg) best_pp = t_pp, best_tg = t_tg;
        }
        const double pp_tok = (double)(n_seq * npp), tg_tok = (double)(n_seq * ntg);
        const double gbs = (double)weight_bytes * (double)ntg / best_tg / 1e9; /* one pass over the weights a step */
        char gb[32] = "null"; /* MoE: unknown (weight_bytes 0) */
        if (weight_bytes) snprintf(gb, sizeof gb, "%.2f", gbs);
        if (json)
            printf("{\"n_seq\": %ld, \"npp\": %ld, \"ntg\": %ld, \"t_pp\": %.4f, \"s_pp\": %.2f, \"t_tg\": %.4f, "
                   "\"s_tg\": %.2f, \"t\": %.4f, \"s\": %.2f, \"tg_gbs\": %s}\n",
                   n_seq, npp, ntg, best_pp, pp_tok / best_pp, best_tg, tg_tok / best_tg, best_pp + best_tg,
                   (pp_tok + tg_tok) / (best_pp + best_tg), gb);
        else
            printf("|%6ld |%6ld |%4ld |%7ld |%8.3f |%9.2f |%8.3f |%9.2f |%8.3f |%9.2f |%9s |\n", npp, ntg, n_seq,
                   n_seq * (npp + ntg), best_pp, pp_tok / best_pp, best_tg, tg_tok / best_tg, best_pp + best_tg,
                   (pp_tok + tg_tok) / (best_pp + best_tg), weight_bytes ? gb : "-");
        fflush(stdout);
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *batch = NULL;
    long n_pp = 512, n_tg = 128, reps = 3, n_threads = 1, ubatch = 512, depth = 0;
    bool reps_set = false, ok;
    bool json = false, membw = false;
    uint32_t type_k = kv_type_default(), type_v = kv_type_default();
    uint32_t gpu = 0; /* --device: 0 the CPU, N + 1 vulkan:N */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long *dst = NULL;
        if (cli_kv_type_opt("bench", argc, argv, &i, &type_k, &type_v, &ok) ||
            cli_device_opt("bench", argc, argv, &i, &gpu, &ok)) {
            if (!ok) return 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) {
            if (!(model_path = cli_value("bench", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--batch")) {
            if (!(batch = cli_value("bench", argc, argv, &i))) return 1;

        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--membw")) membw = true;
        else if (!strcmp(a, "-p")) dst = &n_pp;
        else if (!strcmp(a, "-n")) dst = &n_tg;
        else if (!strcmp(a, "-r")) dst = &reps;
        else if (!strcmp(a, "-d")) dst = &depth;
        else if (!strcmp(a, "-t")) dst = &n_threads;
        else if (!strcmp(a, "--ubatch")) dst = &ubatch;
        else {
            bench_usage(stderr);
            return cli_error("bench", "unknown argument '%s'", a);
        }
        if (dst) {
            const char *v = cli_value("bench", argc, argv, &i);
            if (!v) return 1;
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || end == v || x < 0 || x > 1000000 || ((dst == &reps || dst == &n_threads || dst == &ubatch) && x < 1))
                return cli_error("bench", "%s: '%s' is not a valid count", a, v);
            *dst = x;
            if (dst == &reps) reps_set = true;
        }
    }
    double bw = membw ? measure_membw((int)n_threads, (size_t)2 << 30) : 0;
    if (!model_path) {
        if (!membw) {
            bench_usage(stderr);
            return cli_error("bench", "no model given (-m MODEL)");
        }
        if (json) printf("{\"membw_gbs\": %.2f, \"threads\": %ld}\n", bw, n_threads);
        else printf("memory read bandwidth: %.1f GB/s with %ld threads\n", bw, n_threads);
        return 0;
    }
    struct llama_opt_config opt;
    if (llama_opt_config_from_env(&opt) != DJ_OK) return cli_error("bench", "%s", dj_last_error());
    struct dj_model *m = NULL;
    if (model_load(model_path, &m) != DJ_OK) return cli_error("bench", "%s", dj_last_error());
    /* the bytes one decode step reads: an MoE layer's expert tensors (*_exps) are read
     * for the n_expert_used experts a token picks (distinct: top-k), so n_used / n_expert
     * of them; the router and shared experts whole */
    size_t weight_bytes = 0, expert_bytes = 0;
    for (size_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor(m->gguf, i);
        const bool exps = t->name.len > 12 && memmem(t->name.ptr, t->name.len, "_exps.weight", 12);
        if (exps) expert_bytes += t->nbytes;
        else if (!(t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) || m->output_tied)
            weight_bytes += t->nbytes;
    }
    if (m->hp.n_expert) weight_bytes += (size_t)((double)expert_bytes * m->hp.n_expert_used / m->hp.n_expert);
    if (batch) {
        batch_gpu = gpu;
        batch_type_k = type_k;
        batch_type_v = type_v;
        /* several sequences read the union of their experts: not known here, so no GB/s for MoE */
        const int rc = bench_batch(m, batch, n_pp, n_tg, n_threads, ubatch, reps_set ? reps : 1, json,
                                   m->hp.n_expert ? 0 : weight_bytes);
        model_free(m);
        return rc;
    }
    const long n_toks = depth + (n_pp > n_tg ? n_pp : n_tg);
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)(n_toks + 1);
    cp.n_threads = (int)n_threads;
    cp.n_ubatch = (uint32_t)ubatch;
    cp.block_size = opt.block_size;
    cp.type_k = type_k;
    cp.type_v = type_v;
    cp.rope_table_max = opt.precompute_enabled ? opt.precompute_rope_max : 0;
    cp.gpu = gpu;
    struct dj_context *c = NULL;
    float *logits = malloc(m->hp.n_vocab * sizeof(float));
    dj_token *toks = malloc((size_t)n_toks * sizeof *toks + sizeof *toks);
    if (!logits || !toks || ctx_create(m, cp, &c) != DJ_OK) {
        free(logits);
        free(toks);
        model_free(m);
        return cli_error("bench", "%s", dj_last_error());
    }
    uint64_t x = 0x2545F4914F6CDD1DULL; /* fixed token stream: same work every run */
    for (long i = 0; i < n_toks; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[i] = (dj_token)(x % m->hp.n_vocab);
    }
    double pp[64], tg[64];
    int nr = reps > 64 ? 64 : (int)reps;
    enum dj_status st = DJ_OK;
    if (depth > 0) st = ctx_decode(c, toks, (size_t)depth, logits, false); /* once, untimed */
    /* a hybrid model's recurrent state at the depth, put back after each truncation to it */
    float *rs0 = NULL;
    if (!st && depth > 0 && m->hp.rs_floats && c->seq->rs &&
        (rs0 = malloc(m->hp.rs_floats * sizeof *rs0)) != NULL)
        memcpy(rs0, c->seq->rs, m->hp.rs_floats * sizeof *rs0);
    else if (!st && depth > 0 && m->hp.rs_floats)
        st = dj_fail(DJ_ERR_NOMEM, "out of memory for the recurrent state");
    const dj_token *tt = toks + depth;
    for (int r = 0; r < nr && !st; r++) {
        if (n_pp > 0) {
            ctx_truncate(c, (uint32_t)depth);
            if (rs0) kv_seq_rs_set(c->seq, rs0);
            int64_t t0 = dj_time_us();
            st = ctx_decode(c, tt, (size_t)n_pp, logits, false);
            pp[r] = (double)n_pp / ((double)(dj_time_us() - t0) / 1e6);
        }
        if (n_tg > 0 && !st) {
            ctx_truncate(c, (uint32_t)depth);
            if (rs0) kv_seq_rs_set(c->seq, rs0);
            int64_t t0 = dj_time_us();
            for (long i = 0; i < n_tg && !st; i++) st = ctx_decode(c, &tt[i], 1, logits, false);
            tg[r] = (double)n_tg / ((double)(dj_time_us() - t0) / 1e6);
        }
    }
    free(rs0);
    if (st) { /* a KV block the pool could not allocate, say: no timing to report */
        cli_error("bench", "%s", dj_last_error());
        ctx_free(c);
        free(logits);
        free(toks);
        model_free(m);
        return 1;
    }
    qsort(pp, (size_t)nr, sizeof(double), cmp_d);
    qsort(tg, (size_t)nr, sizeof(double), cmp_d);
    double pp_m = n_pp ? pp[nr / 2] : 0, tg_m = n_tg ? tg[nr / 2] : 0;
    double gbs = tg_m * (double)weight_bytes / 1e9;
    uint32_t ftype_n[DJ_TYPE_COUNT] = {0};
    uint32_t main_type = DJ_TYPE_F32;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) /* MoE: the experts' type */
        ftype_n[m->hp.n_expert ? m->layers[il].ffn_up_exps.type : m->layers[il].w_gate.type]++;
    for (int t = 0; t < DJ_TYPE_COUNT; t++)
        if (ftype_n[t] > ftype_n[main_type]) main_type = (uint32_t)t;
    if (json) {
        printf("{\"model\": \"%s\", \"type\": \"%s\", \"threads\": %ld, \"weight_bytes\": %zu, \"pp\": %ld, \"pp_tps\": %.2f, "
               "\"tg\": %ld, \"tg_tps\": %.2f, \"tg_gbs\": %.2f, \"depth\": %ld, \"cache_type_k\": \"%s\", "
               "\"cache_type_v\": \"%s\", \"device\": \"%s\"",
               model_path, dj_type_name(main_type), n_threads, weight_bytes, n_pp, pp_m, n_tg, tg_m, gbs, depth,
               dj_type_name(type_k), dj_type_name(type_v), gpu ? "vulkan" : "cpu");
        if (membw) printf(", \"membw_gbs\": %.2f, \"tg_bw_fraction\": %.3f", bw, bw > 0 ? gbs / bw : 0);
        printf("}\n");
    } else {
        printf("| model | type | threads | test | t/s (median of %d) | min | max |\n|---|---|---|---|---|---|---|\n", nr);
        char at[64] = "";
        if (depth) snprintf(at, sizeof at, " @ d%ld", depth);
        if (type_k != DJ_TYPE_F32 || type_v != DJ_TYPE_F32)
            snprintf(at + strlen(at), sizeof at - strlen(at), " (K %s, V %s)", dj_type_name(type_k),
                     dj_type_name(type_v));
        if (gpu) snprintf(at + strlen(at), sizeof at - strlen(at), " on vulkan:%u", gpu - 1);
        if (n_pp)
            printf("| %s | %s | %ld | pp%ld%s | %.2f | %.2f | %.2f |\n", model_path, dj_type_name(main_type), n_threads,
                   n_pp, at, pp_m, pp[0], pp[nr - 1]);
        if (n_tg)
            printf("| %s | %s | %ld | tg%ld%s | %.2f | %.2f | %.2f |\n", model_path, dj_type_name(main_type), n_threads,
                   n_tg, at, tg_m, tg[0], tg[nr - 1]);
        if (n_tg)
            printf("decode reads %.3f GB of weights per token%s: %.2f GB/s", (double)weight_bytes / 1e9,
                   m->hp.n_expert ? " (MoE: the experts a token uses)" : "", gbs);
        if (n_tg && membw) printf(" = %.0f%% of the measured %.1f GB/s memory read bandwidth", 100 * gbs / bw, bw);
        if (n_tg) putchar('\n');
    }
    ctx_free(c);
    free(logits);
    free(toks);
    model_free(m);
    return 0;
}
