/*
 * bench_batched.c — aggregate throughput of the serving engine with N
 * concurrent sequences, in the shapes of llama.cpp's llama-batched-bench:
 * each of N sequences has its own prompt of npp tokens (random ids, distinct
 * per sequence, so nothing is shared) and generates ntg tokens greedily.
 *
 *   PP: the N prompts in one engine step (chunked prefill off: N*npp tokens
 *       in ubatches of --ubatch), which also samples each first token;
 *   TG: the ntg decode steps that follow, each one batched forward pass over
 *       the N sequences' next tokens.
 *
 * Prints one row per N: PP, TG, N_KV, T_PP s, S_PP t/s, T_TG s, S_TG t/s,
 * T s, S t/s (llama-batched-bench's columns; S_TG = N*ntg / T_TG), and with
 * --json one object per row.  Repeats each N -r times and keeps the best
 * (least disturbed) run.
 *
 * usage: bench_batched -m MODEL [-t 2] [-npp 512] [-ntg 128] [-npl 1,2,4,8,16] [--ubatch 512] [-r 1] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"
#include "engine/engine.h"

struct run {
    size_t n_first; /* requests that have their first token */
    size_t n_done;
};

static void on_token(void *ud, const struct dj_token_event *ev) {
    struct run *r = ud;
    if (ev->pos == 0) r->n_first++;
}
static void on_done(void *ud, const struct dj_turn_result *res) {
    struct run *r = ud;
    r->n_done++;
    if (res->finish == DJ_FINISH_ERROR) fprintf(stderr, "bench_batched: %s\n", res->error);
}

int main(int argc, char **argv) {
    const char *model = NULL, *npl_s = "1,2,4,8,16";
    int threads = 2, npp = 512, ntg = 128, ubatch = 512, reps = 1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model = argv[++i];
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "-npp") && v) npp = atoi(argv[++i]);
        else if (!strcmp(a, "-ntg") && v) ntg = atoi(argv[++i]);
        else if (!strcmp(a, "-npl") && v) npl_s = argv[++i];
        else if (!strcmp(a, "--ubatch") && v) ubatch = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) json = true;
        else {
            fprintf(stderr, "usage: bench_batched -m MODEL [-t 2] [-npp 512] [-ntg 128] [-npl 1,2,4,8,16] "
                            "[--ubatch 512] [-r 1] [--json]\n");
            return 2;
        }
    }
    if (!model || threads < 1 || npp < 1 || ntg < 1 || ubatch < 1 || reps < 1) {
        fprintf(stderr, "bench_batched: -m MODEL is required; counts must be positive\n");
        return 2;
    }
    struct dj_model *m = NULL;
    if (model_load(model, &m) != DJ_OK) {
        fprintf(stderr, "bench_batched: %s\n", dj_last_error());
        return 1;
    }
    if (!json)
        printf("|%6s |%6s |%4s |%7s |%8s |%9s |%8s |%9s |%8s |%9s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
               "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
    int rc = 0;
    for (const char *p = npl_s; *p;) {
        const int n_seq = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
        if (n_seq < 1) continue;
        double best_pp = 1e30, best_tg = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            struct dj_engine_params ep = engine_default_params();
            ep.n_ctx = (uint32_t)(npp + ntg + 1);
            ep.n_threads = threads;
            ep.n_ubatch = (uint32_t)ubatch;
            ep.n_batch = (uint32_t)(n_seq * npp);
            ep.chunked_prefill = false;
            ep.kv_budget_mib = (double)n_seq * (npp + ntg + 64) * engine_kv_bytes_per_token(m) / 1048576.0 * 1.1 + 1;
            struct dj_engine *e = NULL;
            if (engine_create(m, &ep, &e) != DJ_OK) {
                fprintf(stderr, "bench_batched: %s\n", dj_last_error());
                rc = 1;
                break;
            }
            dj_token *prompt = malloc((size_t)npp * sizeof *prompt);
            struct run r = {0, 0};
            uint64_t x = 0x243f6a8885a308d3ULL + (uint64_t)rep;
            for (int s = 0; s < n_seq && prompt; s++) {
                for (int k = 0; k < npp; k++) {
                    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                    prompt[k] = (dj_token)((x >> 33) % m->hp.n_vocab);
                }
                struct dj_request_params rp = engine_default_request();
                rp.prompt = prompt;
                rp.n_prompt = (size_t)npp;
                rp.max_tokens = (size_t)ntg + 1; /* the first token comes from PP; then ntg decode steps */
                rp.ignore_eos = true;
                rp.on_token = on_token;
                rp.on_done = on_done;
                rp.ud = &r;
                if (engine_submit(e, &rp, NULL) != DJ_OK) {
                    fprintf(stderr, "bench_batched: %s\n", dj_last_error());
                    rc = 1;
                }
            }
            free(prompt);
            if (rc) {
                engine_destroy(e);
                break;
            }
            const int64_t t0 = dj_time_us();
            while (r.n_first < (size_t)n_seq && engine_n_pending(e)) engine_step(e);
            const int64_t t1 = dj_time_us();
            engine_run_all(e);
            const int64_t t2 = dj_time_us();
            if (r.n_done != (size_t)n_seq) rc = 1;
            engine_destroy(e);
            const double t_pp = (double)(t1 - t0) / 1e6, t_tg = (double)(t2 - t1) / 1e6;
            if (t_pp + t_tg < best_pp + best_tg) {
                best_pp = t_pp;
                best_tg = t_tg;
            }
        }
        if (rc) break;
        const double pp_tok = (double)n_seq * npp, tg_tok = (double)n_seq * ntg;
        if (json)
            printf("{\"n_seq\": %d, \"npp\": %d, \"ntg\": %d, \"t_pp\": %.4f, \"s_pp\": %.2f, \"t_tg\": %.4f, "
                   "\"s_tg\": %.2f, \"t\": %.4f, \"s\": %.2f}\n",
                   n_seq, npp, ntg, best_pp, pp_tok / best_pp, best_tg, tg_tok / best_tg, best_pp + best_tg,
                   (pp_tok + tg_tok) / (best_pp + best_tg));
        else
            printf("|%6d |%6d |%4d |%7d |%8.3f |%9.2f |%8.3f |%9.2f |%8.3f |%9.2f |\n", npp, ntg, n_seq,
                   n_seq * (npp + ntg), best_pp, pp_tok / best_pp, best_tg, tg_tok / best_tg, best_pp + best_tg,
                   (pp_tok + tg_tok) / (best_pp + best_tg));
        fflush(stdout);
    }
    model_free(m);
    return rc;
}
