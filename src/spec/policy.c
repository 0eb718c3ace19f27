/*
 * policy.c — how long a draft to feed, and from which source (spec.h).
 *
 * Acceptance: for every (source, bucket) arm, decayed counts of how often
 * draft position j was reached and accepted; alpha_j = (acc + 1) / (reach + 2)
 * (a uniform prior: an arm never seen drafts until it is measured).  Every
 * verification feeds it, and so do shadow proposals (sched.c compares a
 * proposal it did not draft with the tokens then generated), so a source
 * that stopped drafting keeps being measured at no cost.
 *
 * Cost: a forward pass of n rows takes t(n) = a + b n, fitted by decayed
 * least squares over the engine's passes of at most SPEC_FIT_ROWS rows
 * (decode steps; long prefill chunks would fit the compute-bound slope
 * only).  One more row in a pass of n rows costs beta = b / (a + b n) of it.
 *
 * Decision: k maximizing (1 + E_k) / (1 + beta k), E_k = sum_{j<k} prod_{i<=j}
 * alpha_i the expected accepted tokens; no draft unless the best gain is at
 * least SPEC_MIN_GAIN.  With nothing accepted E_k -> 0: no drafts, so the
 * cost is the proposals alone (a hash-chain walk and a trie walk per step).
 */
#include <math.h>
#include <string.h>

#include "spec/spec.h"

#define SPEC_DECAY 0.99f      /* per observation of an arm: about the last 100 count */
#define SPEC_TIME_DECAY 0.995 /* per timed pass */
#define SPEC_FIT_ROWS 96
#define SPEC_MIN_GAIN 1.02

void spec_policy_init(struct spec_policy *p) {
    memset(p, 0, sizeof *p);
    /* b / a measured on codelm-15m, 2 threads (docs/BENCHMARKS.md): replaced by the fit */
    p->beta_default = 0.06;
}

void spec_policy_observe(struct spec_policy *p, enum dj_spec_src src, uint32_t bucket, size_t n_tried, size_t n_acc) {
    if (src >= DJ_SPEC_N_SRC || n_tried == 0) return;
    if (bucket >= DJ_SPEC_BUCKETS) bucket = DJ_SPEC_BUCKETS - 1;
    float *reach = p->reach[src][bucket], *acc = p->acc[src][bucket];
    for (size_t j = 0; j < DJ_SPEC_POS_MAX; j++) {
        reach[j] *= SPEC_DECAY;
        acc[j] *= SPEC_DECAY;
    }
    const size_t last = n_acc < n_tried ? n_acc + 1 : n_tried; /* positions reached */
    for (size_t j = 0; j < last; j++) {
        const size_t jj = j < DJ_SPEC_POS_MAX ? j : DJ_SPEC_POS_MAX - 1;
        reach[jj] += 1.0f;
        if (j < n_acc) acc[jj] += 1.0f;
    }
}

double spec_policy_alpha(const struct spec_policy *p, enum dj_spec_src src, uint32_t bucket, size_t j) {
    if (bucket >= DJ_SPEC_BUCKETS) bucket = DJ_SPEC_BUCKETS - 1;
    if (j >= DJ_SPEC_POS_MAX) j = DJ_SPEC_POS_MAX - 1;
    return ((double)p->acc[src][bucket][j] + 1.0) / ((double)p->reach[src][bucket][j] + 2.0);
}

void spec_policy_time(struct spec_policy *p, size_t n_rows, double t_ms) {
    if (n_rows == 0 || n_rows > SPEC_FIT_ROWS || !(t_ms > 0.0)) return;
    const double n = (double)n_rows, g = SPEC_TIME_DECAY;
    p->s_w = g * p->s_w + 1.0;
    p->s_n = g * p->s_n + n;
    p->s_t = g * p->s_t + t_ms;
    p->s_nn = g * p->s_nn + n * n;
    p->s_nt = g * p->s_nt + n * t_ms;
}

double spec_policy_beta(const struct spec_policy *p, size_t n_rows) {
    const double den = p->s_w * p->s_nn - p->s_n * p->s_n;
    /* too few distinct row counts measured yet for a slope */
    if (p->s_w < 8.0 || den <= 1e-9 * p->s_w * p->s_nn) return p->beta_default;
    double b = (p->s_w * p->s_nt - p->s_n * p->s_t) / den;
    double a = (p->s_t - b * p->s_n) / p->s_w;
    if (b < 0.0) b = 0.0;
    if (a <= 0.0) return p->beta_default;
    return b / (a + b * (double)(n_rows ? n_rows : 1));
}

/* Relative cost of k drafts and their verification: one pass of 1 + k rows, or
 * with exit (a, h = exit[0], exit[1]) the k + 1 exit passes first and a
 * verification resuming at the exit layer (spec.h). */
static double draft_cost(size_t k, double beta, const double *exit) {
    if (!exit) return 1.0 + beta * (double)k;
    return (double)(k + 1) * exit[0] + (double)k * exit[1] + (1.0 - exit[0]) * (1.0 + beta * (double)k);
}

/* The k in 1..kmax maximizing (1 + E_k) / cost(k) for arm (src, bucket); 0 unless
 * its gain reaches SPEC_MIN_GAIN. */
static size_t best_length(const struct spec_policy *p, enum dj_spec_src src, uint32_t bucket, size_t kmax,
                          double beta, const double *exit, double *gain) {
    *gain = 1.0;
    double reach = 1.0, e = 0.0, best = 1.0;
    size_t best_k = 0;
    for (size_t k = 1; k <= kmax; k++) {
        reach *= spec_policy_alpha(p, src, bucket, k - 1);
        e += reach;
        const double g = (1.0 + e) / draft_cost(k, beta, exit);
        if (g > best) {
            best = g;
            best_k = k;
        }
        if (reach < 1e-4) break;
    }
    if (best < SPEC_MIN_GAIN) return 0;
    *gain = best;
    return best_k;
}

size_t spec_policy_length(const struct spec_policy *p, const struct spec_proposal *pr, size_t n_rows, size_t cap,
                          double *gain) {
    return best_length(p, pr->src, pr->bucket, pr->n < cap ? pr->n : cap, spec_policy_beta(p, n_rows), NULL, gain);
}

size_t spec_policy_length_exit(const struct spec_policy *p, size_t n_rows, size_t cap, double a, double h,
                               double *gain) {
    const double exit[2] = {a, h};
    return best_length(p, DJ_SPEC_EXIT, 0, cap, spec_policy_beta(p, n_rows), exit, gain);
}

size_t spec_policy_length_mtp(const struct spec_policy *p, size_t n_rows, size_t cap, double a, double h,
                              double *gain) {
    const double cost[2] = {a, h};
    return best_length(p, DJ_SPEC_MTP, 0, cap, spec_policy_beta(p, n_rows), cost, gain);
}

double spec_exit_gain(double alpha, double beta, double a, double h, size_t cap, size_t *k) {
    double reach = 1.0, e = 0.0, best = 0.0;
    *k = 0;
    for (size_t j = 1; j <= cap; j++) {
        reach *= alpha;
        e += reach;
        const double g = (1.0 + e) / draft_cost(j, beta, (const double[2]){a, h});
        if (g > best) {
            best = g;
            *k = j;
        }
    }
    return best;
}
