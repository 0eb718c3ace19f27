/*
 * bench_sampler.c — µs per token of sampler_sample (and sampler_logprobs) on a
 * 152,064-token vocabulary (Qwen2's), one thread.
 *
 *   bench_sampler [--vocab N] [--tokens T] [--reps R]
 *
 * Two logit shapes, each 4 different vectors cycled so the caches see a new
 * array per token, as after a forward pass:
 *   peaked  N(0, 2) noise with 8 tokens lifted by +10..+17 (a confident model:
 *           top-p 0.9 is reached within the lifted tokens);
 *   flat    N(0, 1) noise and nothing else (a very uncertain model: top-p 0.9
 *           needs ~60 % of the vocabulary).
 * Each configuration runs T tokens (positions 0..T-1) R times; the table gives
 * the minimum and the median over the R repetitions of µs per token, measured
 * as the thread's CPU time (time descheduled on a shared machine is not ours).
 * The last rows are the previous implementation's approach (a full qsort of the
 * vocabulary per token, then the same filters), measured in the same run, for the
 * ratio.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "core/status.h"
#include "sample/sampler.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static uint64_t ctr;
static double gauss(void) {
    double u = dj_rng_uniform(1, ctr++), v = dj_rng_uniform(1, ctr++);
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

enum { NVEC = 4 };

static void make_logits(float *x, size_t n, int flat) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(gauss() * (flat ? 1.0 : 2.0));
    if (!flat)
        for (int k = 0; k < 8; k++) x[dj_rng_u64(2, ctr++) % n] += 10.0f + (float)k;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The previous sampler's approach, for the ratio: copy, full qsort by logit,
 * then top-k / top-p / min-p / temperature on the sorted array. */
struct oc {
    int id;
    float l, p;
};
static int oc_cmp(const void *a, const void *b) {
    const struct oc *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}
static int old_sample(struct oc *c, const float *l, size_t n, const struct dj_sampler_params *p, uint64_t pos) {
    for (size_t i = 0; i < n; i++) c[i] = (struct oc){(int)i, l[i], 0};
    qsort(c, n, sizeof *c, oc_cmp);
    if (p->top_k > 0 && (size_t)p->top_k < n) n = (size_t)p->top_k;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += c[i].p = expf(c[i].l - c[0].l);
    if (p->top_p < 1) {
        double cum = 0;
        for (size_t i = 0; i < n; i++)
            if ((cum += c[i].p / sum) >= p->top_p) {
                n = i + 1;
                break;
            }
    }
    if (p->min_p > 0) {
        size_t k = 1;
        while (k < n && c[k].p >= p->min_p) k++;
        n = k;
    }
    sum = 0;
    for (size_t i = 0; i < n; i++) sum += c[i].p = expf((c[i].l - c[0].l) / p->temp);
    double r = dj_rng_uniform(p->seed, pos) * sum, cum = 0;
    for (size_t i = 0; i < n; i++)
        if (r < (cum += c[i].p)) return c[i].id;
    return c[n - 1].id;
}

int main(int argc, char **argv) {
    size_t n = 152064;
    int tokens = 200, reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vocab")) n = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    if (n < 64 || tokens < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_sampler [--vocab N >= 64] [--tokens T] [--reps R <= 100]\n");
        return 1;
    }
    float *vec[2][NVEC];
    for (int f = 0; f < 2; f++)
        for (int v = 0; v < NVEC; v++) {
            vec[f][v] = malloc(n * sizeof(float));
            if (!vec[f][v]) return 1;
            make_logits(vec[f][v], n, f);
        }
    struct bcfg {
        const char *name;
        int kind; /* 0 sample, 1 logprobs, 2 old full sort */
        size_t n_top;
        struct dj_sampler_params p;
    } cfg[9];
    int nc = 0;
    struct dj_sampler_params d = sampler_default_params(), q;
    q = d, q.temp = 0;
    cfg[nc++] = (struct bcfg){"greedy", 0, 0, q};
    cfg[nc++] = (struct bcfg){"defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05", 0, 0, d};
    q = d, q.temp = 1, q.top_k = 0, q.top_p = 0.9f, q.min_p = 0;
    cfg[nc++] = (struct bcfg){"temp 1, top_p 0.9", 0, 0, q};
    q = d, q.temp = 1, q.top_k = 0, q.top_p = 1, q.min_p = 0;
    cfg[nc++] = (struct bcfg){"temp 1, no filters", 0, 0, q};
    q = d, q.repeat_penalty = 1.1f, q.freq_penalty = 0.1f, q.presence_penalty = 0.1f, q.penalty_last_n = 64;
    cfg[nc++] = (struct bcfg){"defaults + penalties (repeat 1.1, freq/presence 0.1, last 64)", 0, 0, q};
    cfg[nc++] = (struct bcfg){"logprobs, n_top 5", 1, 5, d};
    cfg[nc++] = (struct bcfg){"logprobs, n_top 20", 1, 20, d};
    cfg[nc++] = (struct bcfg){"previous sampler (full qsort), defaults", 2, 0, d};
    q = d, q.temp = 1, q.top_k = 0, q.top_p = 0.9f, q.min_p = 0;
    cfg[nc++] = (struct bcfg){"previous sampler (full qsort), temp 1, top_p 0.9", 2, 0, q};

    struct oc *old = malloc(n * sizeof *old);
    struct dj_logprob top[20];
    printf("vocab %zu, %d tokens x %d repetitions, µs/token (thread CPU time)\n\n", n, tokens, reps);
    printf("| configuration | peaked min | peaked median | flat min | flat median |\n|---|---|---|---|---|\n");
    uint64_t check = 0;
    for (int k = 0; k < nc; k++) {
        double res[2][2];
        int old_reps = cfg[k].kind == 2 ? (reps < 3 ? reps : 3) : reps;
        int old_tokens = cfg[k].kind == 2 ? (tokens < 20 ? tokens : 20) : tokens;
        for (int f = 0; f < 2; f++) {
            struct dj_sampler *s = NULL;
            if (sampler_create(&cfg[k].p, n, &s) != DJ_OK) {
                fprintf(stderr, "%s\n", dj_last_error());
                return 1;
            }
            for (int t = 0; t < 64; t++) sampler_accept(s, (dj_token)(dj_rng_u64(3, (uint64_t)t) % 2000));
            double us[100];
            for (int r = 0; r < old_reps; r++) {
                double t0 = now_us();
                for (int t = 0; t < old_tokens; t++) {
                    const float *x = vec[f][t % NVEC];
                    size_t n_out;
                    if (cfg[k].kind == 0) check += (uint64_t)sampler_sample(s, x, (uint64_t)t);
                    else if (cfg[k].kind == 1)
                        check += (uint64_t)(int64_t)(1e3f * sampler_logprobs(x, n, (dj_token)t, top, cfg[k].n_top, &n_out)) +
                                 (uint64_t)top[0].tok;
                    else check += (uint64_t)old_sample(old, x, n, &cfg[k].p, (uint64_t)t);
                }
                us[r] = (now_us() - t0) / old_tokens;
            }
            qsort(us, (size_t)old_reps, sizeof *us, cmp_d);
            res[f][0] = us[0];
            res[f][1] = us[old_reps / 2];
            sampler_free(s);
        }
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", cfg[k].name, res[0][0], res[0][1], res[1][0], res[1][1]);
        fflush(stdout);
    }
    printf("\n(checksum %llu)\n", (unsigned long long)check);
    free(old);
    for (int f = 0; f < 2; f++)
        for (int v = 0; v < NVEC; v++) free(vec[f][v]);
    return 0;
}
