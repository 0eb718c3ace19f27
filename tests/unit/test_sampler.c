/*
 * test_sampler.c — the sampling chain (src/sample/sampler.h) and the counter-based
 * generator (src/core/rng.h).
 *
 *   - rng known answers: the generator can never change silently;
 *   - equivalence: a slow reference written from sampler.h's definition (full sorts
 *     of the candidate set at every stage) picks exactly the same token as the fast
 *     sampler, for thousands of random logit vectors x parameter sets x positions,
 *     vocabularies from 1 to 152,064 tokens, ties, masks, NaN, clusters, spikes;
 *   - reproducibility: the token at (seed, pos) does not depend on earlier calls;
 *   - draws follow the filtered distribution (chi-square), each parameter's effect,
 *     logit bias bans, the penalty window, invalid parameters, logprobs against a
 *     full-sort reference.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/status.h"
#include "sample/sampler.h"
#include "test.h"

#ifdef DJ_SANITIZE_BUILD
enum { SCALE = 4 }; /* fewer random trials under ASan/UBSan */
#else
enum { SCALE = 1 };
#endif

__extension__ typedef unsigned __int128 u128;

/* ---- test data ---- */

static uint64_t trng_state = 0x1234567;
static uint64_t trng(void) { return dj_rng_mix64(trng_state += DJ_RNG_GAMMA); }
static double trng_unit(void) { return (double)(trng() >> 11) * 0x1p-53; }
static size_t trng_below(size_t n) { return (size_t)(trng() % n); }
static double trng_gauss(void) {
    double u = trng_unit(), v = trng_unit();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* Random logits of several shapes: Gaussian at several scales, heavy ties, spikes,
 * a tight cluster with a far outlier (big buckets), masks, NaN. */
static void gen_logits(float *x, size_t n) {
    int shape = (int)trng_below(7);
    double sd = (double[]){0.01, 0.3, 1.0, 3.0, 10.0}[trng_below(5)];
    for (size_t i = 0; i < n; i++) {
        double v = trng_gauss() * sd;
        switch (shape) {
        case 1: v = floor(v * 2) / 2; break;                   /* ties */
        case 2: v = (double)(trng_below(4)); break;            /* very heavy ties */
        case 3: if (trng_below(50) == 0) v += 15; break;       /* spikes */
        case 4: v = 1e-3 * trng_gauss(); break;                /* flat: big buckets */
        case 5: v = 5 + 1e-4 * (double)trng_below(100); break; /* cluster ... */
        default: break;
        }
        x[i] = (float)v;
    }
    if (shape == 5 && n > 2) x[trng_below(n)] = -200; /* ... with an outlier stretching the range */
    int masks = (int)trng_below(4);
    if (masks == 1)
        for (size_t i = 0; i < n; i++)
            if (trng_below(3) == 0) x[i] = -INFINITY;
    if (masks == 2) x[trng_below(n)] = NAN;
    if (masks == 3 && trng_below(10) == 0)
        for (size_t i = 0; i < n; i++) x[i] = -INFINITY;
    if (trng_below(200) == 0) x[trng_below(n)] = INFINITY;
}

/* ---- the reference: sampler.h's definition with full sorts ---- */

struct rc {
    float y;
    float key;
    int32_t id;
};

static int by_logit(const void *a, const void *b) {
    const struct rc *x = a, *y = b;
    if (x->y != y->y) return x->y > y->y ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int by_key(const void *a, const void *b) {
    const struct rc *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static uint64_t ref_q(float y, float m, float t) { return sampler_mass((y - m) / t); }

static int by_id(const void *a, const void *b) {
    const struct rc *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The chain up to the draw.  Returns true with *tok set when no draw is needed
 * (greedy, no candidate, +INFINITY, one survivor); else the survivors, sorted by
 * logit, in c[0..*k) (malloc'd, the caller frees). */
static bool ref_chain(const struct dj_sampler_params *p, size_t n, const float *x, const dj_token *hist, size_t n_hist,
                      dj_token *tok, struct rc **cp, size_t *kp) {
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        float v = y[p->logit_bias[i].tok] + p->logit_bias[i].bias;
        y[p->logit_bias[i].tok] = isnan(v) ? -INFINITY : v;
    }
    bool pen = p->penalty_last_n != 0 &&
               (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f);
    if (pen) {
        /* the window: the last penalty_last_n accepted tokens inside the vocabulary */
        size_t n_valid = 0;
        for (size_t i = 0; i < n_hist; i++) n_valid += hist[i] >= 0 && (size_t)hist[i] < n;
        size_t skip = p->penalty_last_n < 0 || (size_t)p->penalty_last_n >= n_valid ? 0 : n_valid - (size_t)p->penalty_last_n;
        uint32_t *cnt = calloc(n, sizeof *cnt);
        for (size_t i = 0; i < n_hist; i++) {
            if (hist[i] < 0 || (size_t)hist[i] >= n) continue;
            if (skip) skip--;
            else cnt[hist[i]]++;
        }
        for (size_t t = 0; t < n; t++) {
            if (!cnt[t]) continue;
            float v = y[t];
            v = v <= 0 ? v * p->repeat_penalty : v / p->repeat_penalty;
            v -= (float)cnt[t] * p->freq_penalty + p->presence_penalty;
            y[t] = isnan(v) ? -INFINITY : v;
        }
        free(cnt);
    }
    *tok = 0;
    *cp = NULL;
    if (p->temp <= 0) {
        long best = -1;
        for (size_t i = 0; i < n; i++)
            if (y[i] >= -FLT_MAX && (best < 0 || y[i] > y[best])) best = (long)i;
        *tok = best < 0 ? 0 : (dj_token)best;
        free(y);
        return true;
    }
    struct rc *c = malloc(n * sizeof *c);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (y[i] >= -FLT_MAX) c[k++] = (struct rc){y[i], 0, (int32_t)i};
    free(y);
    qsort(c, k, sizeof *c, by_logit);
    if (k == 0 || c[0].y == INFINITY) {
        *tok = k ? c[0].id : 0;
        free(c);
        return true;
    }
    if (p->top_k > 0 && (size_t)p->top_k < k) k = (size_t)p->top_k;
    if (p->typical_p < 1.0f) {
        float m = c[0].y;
        u128 z = 0, m1 = 0;
        for (size_t i = 0; i < k; i++) {
            uint64_t q = ref_q(c[i].y, m, 1.0f);
            if (!q) continue;
            z += q;
            m1 += (u128)q * (uint64_t)((m - c[i].y) * 0x1p32f);
        }
        float mu = (float)((double)m1 / (double)z * 0x1p-32);
        for (size_t i = 0; i < k; i++) c[i].key = fabsf((m - c[i].y) - mu);
        qsort(c, k, sizeof *c, by_key);
        u128 cum = 0;
        for (size_t i = 0; i < k; i++) {
            cum += ref_q(c[i].y, m, 1.0f);
            if ((double)cum / (double)z > (double)p->typical_p) {
                k = i + 1;
                break;
            }
        }
        qsort(c, k, sizeof *c, by_logit);
    }
    if (p->top_p < 1.0f) {
        float m = c[0].y;
        u128 z = 0, cum = 0;
        for (size_t i = 0; i < k; i++) z += ref_q(c[i].y, m, 1.0f);
        for (size_t i = 0; i < k; i++) {
            cum += ref_q(c[i].y, m, 1.0f);
            if ((double)cum / (double)z >= (double)p->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float t = c[0].y + logf(p->min_p);
        size_t j = 0;
        while (j < k && c[j].y >= t) j++;
        k = j;
    }
    if (k == 1) {
        *tok = c[0].id;
        free(c);
        return true;
    }
    *cp = c;
    *kp = k;
    return false;
}

/* The draw over the survivors c[0..k) (walked in id order; c is sorted by id). */
static dj_token ref_draw(const struct dj_sampler_params *p, struct rc *c, size_t k, uint64_t pos) {
    double r = dj_rng_uniform(p->seed, pos);
    float m = -INFINITY;
    for (size_t i = 0; i < k; i++) m = c[i].y > m ? c[i].y : m;
    qsort(c, k, sizeof *c, by_id);
    u128 z = 0, cum = 0;
    for (size_t i = 0; i < k; i++) z += ref_q(c[i].y, m, p->temp);
    for (size_t i = 0; i < k; i++) {
        cum += ref_q(c[i].y, m, p->temp);
        if ((double)cum / (double)z > r) return c[i].id;
    }
    return -1; /* never: frac(S) = 1 > r */
}

/* ---- helpers ---- */

static struct dj_sampler *mk(const struct dj_sampler_params *p, size_t n) {
    struct dj_sampler *s = NULL;
    enum dj_status st = sampler_create(p, n, &s);
    CHECKF(st == DJ_OK && s, "sampler_create: %s", dj_last_error());
    return s;
}

static void random_params(struct dj_sampler_params *p, size_t n, struct dj_logit_bias *bias) {
    *p = sampler_default_params();
    p->temp = (float[]){0.0f, 0.3f, 0.8f, 1.0f, 2.5f, 1e-6f, 1.0f, 1.0f}[trng_below(8)];
    size_t big = n > 1 ? n - 1 : 1;
    p->top_k = (int32_t)(size_t[]){0, 0, 1, 2, 5, 40, 1500, big, n + 3, 300}[trng_below(10)];
    p->top_p = (float[]){1.0f, 1.0f, 0.0f, 0.5f, 0.9f, 0.95f, 0.999f}[trng_below(7)];
    p->min_p = (float[]){0.0f, 0.0f, 0.05f, 0.5f, 1.0f, 1e-6f}[trng_below(6)];
    p->typical_p = (float[]){1.0f, 1.0f, 1.0f, 0.0f, 0.2f, 0.9f, 0.99f}[trng_below(7)];
    if (trng_below(3) == 0) {
        p->repeat_penalty = (float[]){1.0f, 1.3f, 0.7f}[trng_below(3)];
        p->freq_penalty = (float[]){0.0f, 0.5f, -0.2f}[trng_below(3)];
        p->presence_penalty = (float[]){0.0f, 1.0f, -0.5f}[trng_below(3)];
        p->penalty_last_n = (int32_t[]){-1, 0, 4, 64}[trng_below(4)];
    }
    p->seed = trng();
    size_t nb = trng_below(4) == 0 ? trng_below(5) : 0;
    for (size_t i = 0; i < nb; i++)
        bias[i] = (struct dj_logit_bias){(dj_token)trng_below(n), (float[]){-INFINITY, 5.0f, -3.0f, 100.0f}[trng_below(4)]};
    p->logit_bias = bias;
    p->n_logit_bias = nb;
}

static void print_params(const struct dj_sampler_params *p, size_t n) {
    fprintf(stderr, "  n=%zu temp=%g top_k=%d typical=%g top_p=%g min_p=%g rep=%g freq=%g pres=%g last_n=%d bias=%zu\n", n,
            (double)p->temp, (int)p->top_k, (double)p->typical_p, (double)p->top_p, (double)p->min_p,
            (double)p->repeat_penalty, (double)p->freq_penalty, (double)p->presence_penalty, (int)p->penalty_last_n,
            p->n_logit_bias);
}

/* ---- tests ---- */

static void test_rng(void) {
    /* dj_rng_u64(0, c) is the SplitMix64 stream seeded with 0 (mix64(0) = 0) */
    CHECK(dj_rng_u64(0, 0) == 0xe220a8397b1dcdafULL);
    CHECK(dj_rng_u64(0, 1) == 0x6e789e6aa1b965f4ULL);
    CHECK(dj_rng_u64(0, 2) == 0x06c45d188009454fULL);
    CHECK(dj_rng_u64(0, 3) == 0xf88bb8a8724c81ecULL);
    CHECK(dj_rng_u64(42, 0) == 0x989b3f130a063869ULL);
    CHECK(dj_rng_u64(0xdeadbeef, 123456789) == 0x5113c163d94d406dULL);
    CHECK(dj_rng_uniform(1, 2) == 0.43828390628455283);
    CHECK(dj_rng_uniform(1, 2) == (double)(dj_rng_u64(1, 2) >> 11) * 0x1p-53);
    /* range and a rough mean; no repeats over a few thousand counters */
    double sum = 0;
    int bad = 0;
    for (uint64_t c = 0; c < 100000; c++) {
        double u = dj_rng_uniform(7, c);
        bad += !(u >= 0.0 && u < 1.0);
        sum += u;
    }
    CHECK(bad == 0);
    CHECKF(fabs(sum / 100000 - 0.5) < 0.005, "mean %.4f", sum / 100000);
    CHECK(dj_rng_u64(1, 0) != dj_rng_u64(0, 1) && dj_rng_u64(1, 5) != dj_rng_u64(2, 5));
}

/* sampler_mass is part of the chain's definition: pinned values, accuracy,
 * monotonicity on a grid, the edge cases. */
static void test_mass(void) {
    CHECK(sampler_mass(0.0f) == 2251799813685248ULL); /* 2^51 */
    CHECK(sampler_mass(-0.5f) == 1365785626480029ULL);
    CHECK(sampler_mass(-1.0f) == 828390854966161ULL);
    CHECK(sampler_mass(-2.25f) == 237337954226070ULL);
    CHECK(sampler_mass(-10.0f) == 102231553186ULL);
    CHECK(sampler_mass(-30.0f) == 211);
    CHECK(sampler_mass(-36.0f) == 1 && sampler_mass(-36.1f) == 0);
    CHECK(sampler_mass(-INFINITY) == 0 && sampler_mass(NAN) == 0 && sampler_mass(-1e30f) == 0);
    double worst = 0;
    uint64_t prev = UINT64_MAX;
    int nonmono = 0;
    for (int i = 0; i <= 400000; i++) {
        float x = (float)i * -1e-4f;
        uint64_t q = sampler_mass(x);
        double e = ldexp(exp((double)x), 51);
        if (e > 1e9 && fabs((double)q / e - 1) > worst) worst = fabs((double)q / e - 1);
        nonmono += q > prev;
        prev = q;
    }
    CHECKF(worst < 1e-8 && nonmono == 0, "worst relative error %.3g, %d increases", worst, nonmono);
}

static void test_equivalence(void) {
    enum { NMAX = 152064 };
    float *x = malloc(NMAX * sizeof *x);
    dj_token hist[300];
    struct dj_logit_bias bias[8];
    int trials = 0, mismatches = 0;
    size_t sizes[] = {1, 2, 3, 7, 40, 100, 513, 1000, 2100, 5000, 20000};
    int n_trials = 4000 / SCALE;
    for (int t = 0; t < n_trials; t++) {
        size_t n = sizes[trng_below(sizeof sizes / sizeof *sizes)];
        if (t % 200 == 199) n = NMAX; /* a few at the real vocabulary size */
        gen_logits(x, n);
        struct dj_sampler_params p;
        random_params(&p, n, bias);
        struct dj_sampler *s = mk(&p, n);
        if (!s) break;
        size_t nh = trng_below(200);
        for (size_t i = 0; i < nh; i++) {
            /* repeats, so counts above 1 occur; an out-of-range token is ignored by both */
            hist[i] = i && trng_below(3) == 0 ? hist[trng_below(i)] : (dj_token)trng_below(n);
            if (trng_below(100) == 0) hist[i] = (dj_token)n;
            sampler_accept(s, hist[i]);
        }
        dj_token fixed;
        struct rc *c = NULL;
        size_t kept = 0;
        bool decided = ref_chain(&p, n, x, hist, nh, &fixed, &c, &kept);
        for (int k = 0; k < 3; k++) {
            uint64_t pos = k == 2 ? trng() : trng_below(1000);
            dj_token a = sampler_sample(s, x, pos), b = decided ? fixed : ref_draw(&p, c, kept, pos);
            trials++;
            if (a != b && mismatches++ < 10) {
                fprintf(stderr, "FAIL equivalence: trial %d pos %" PRIu64 ": sampler %d, reference %d\n", t, pos, (int)a,
                        (int)b);
                print_params(&p, n);
            }
        }
        free(c);
        sampler_free(s);
    }
    CHECKF(mismatches == 0, "%d of %d draws differ from the reference", mismatches, trials);
    printf("equivalence: %d draws identical to the full-sort reference\n", trials - mismatches);
    free(x);
}

/* The filtered distribution by the reference's rules, at the token level: for a
 * fixed logits vector, the probability of each token = its share of the weights
 * after the filters (computed by sampling the reference at every r would be slow;
 * this walks the same steps in double). */
static void test_distribution(void) {
    enum { V = 8, N = 40000 };
    const float l[V] = {2.0f, 1.5f, 1.4f, 1.0f, 0.2f, 0.0f, -1.0f, -6.0f};
    struct dj_sampler_params p = sampler_default_params();
    p.top_k = 6, p.top_p = 0.97f, p.min_p = 0.02f, p.temp = 0.7f, p.seed = 11;
    struct dj_sampler *s = mk(&p, V);
    /* expected: top-6 (drops 6, 7); top-p 0.97 over softmax(l[0..6)) at T=1; min-p 0.02;
     * then softmax(l / 0.7) over the survivors */
    double e[V] = {0}, z = 0;
    for (int i = 0; i < 6; i++) z += exp(l[i] - l[0]);
    int keep = 6;
    double cum = 0;
    for (int i = 0; i < 6; i++) {
        cum += exp(l[i] - l[0]) / z;
        if (cum >= 0.97) {
            keep = i + 1;
            break;
        }
    }
    int keep2 = 0;
    while (keep2 < keep && l[keep2] >= l[0] + logf(0.02f)) keep2++;
    double w = 0;
    for (int i = 0; i < keep2; i++) w += e[i] = exp((l[i] - l[0]) / 0.7);
    for (int i = 0; i < keep2; i++) e[i] /= w;
    int cnt[V] = {0};
    for (int i = 0; i < N; i++) cnt[sampler_sample(s, l, (uint64_t)i)]++;
    double chi2 = 0;
    int bad = 0;
    for (int i = 0; i < V; i++) {
        if (e[i] == 0) bad += cnt[i];
        else chi2 += (cnt[i] - N * e[i]) * (cnt[i] - N * e[i]) / (N * e[i]);
    }
    /* df = keep2 - 1 (5 here); chi-square 0.999 quantile for df 5 is 20.5 */
    CHECKF(keep2 == 6 && bad == 0, "kept %d, %d draws outside the filtered set", keep2, bad);
    CHECKF(chi2 < 20.5, "chi2 = %.2f (df %d)", chi2, keep2 - 1);
    sampler_free(s);

    /* two tokens, logits 0 and ln 3 at T=1 → 1:3 (kept from the old test) */
    float two[2] = {0.0f, logf(3.0f)};
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 1, p.seed = 5;
    s = mk(&p, 2);
    int ones = 0;
    for (int i = 0; i < 20000; i++) ones += sampler_sample(s, two, (uint64_t)i) == 1;
    CHECKF(fabs(ones / 20000.0 - 0.75) < 0.02, "P(token 1) = %.3f, want 0.75", ones / 20000.0);
    sampler_free(s);
}

static void test_reproducible(void) {
    enum { V = 1000 };
    float *l = malloc(V * sizeof *l);
    for (int i = 0; i < V; i++) l[i] = (float)trng_gauss() * 2;
    struct dj_sampler_params p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 1.5f, p.seed = 1234;
    struct dj_sampler *a = mk(&p, V), *b = mk(&p, V);
    /* a sampler that sampled 100 other positions first gives the same token at pos k */
    for (uint64_t i = 1000; i < 1100; i++) (void)sampler_sample(a, l, i);
    int same = 0;
    for (uint64_t k = 0; k < 50; k++) same += sampler_sample(a, l, k) == sampler_sample(b, l, k);
    CHECK(same == 50);
    /* positions in reverse order give the same tokens */
    dj_token fwd[50];
    for (uint64_t k = 0; k < 50; k++) fwd[k] = sampler_sample(b, l, k);
    same = 0;
    for (uint64_t k = 50; k-- > 0;) same += sampler_sample(a, l, k) == fwd[k];
    CHECK(same == 50);
    /* another seed: another sequence, same distribution (mean logit of the draws) */
    p.seed = 99;
    struct dj_sampler *c = mk(&p, V);
    int same_ac = 0;
    double ma = 0, mc = 0;
    for (uint64_t i = 0; i < 4000; i++) {
        dj_token x = sampler_sample(a, l, i), z = sampler_sample(c, l, i);
        same_ac += x == z;
        ma += l[x];
        mc += l[z];
    }
    CHECKF(same_ac < 400, "seeds 1234 and 99 agree on %d of 4000 draws", same_ac);
    CHECKF(fabs(ma - mc) / 4000 < 0.15, "mean logit of draws %.3f vs %.3f", ma / 4000, mc / 4000);
    sampler_reset(a);
    CHECK(sampler_sample(a, l, 7) == sampler_sample(b, l, 7));
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
    free(l);
}

static void test_greedy_and_masks(void) {
    enum { V = 100 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)trng_gauss();
    dj_token am = sampler_argmax(l, V);
    for (int i = 0; i < V; i++) CHECK(l[i] <= l[am]);
    float tie[4] = {1, 3, 3, 2};
    CHECK(sampler_argmax(tie, 4) == 1);
    float masked[4] = {-INFINITY, NAN, -2.0f, -INFINITY};
    CHECK(sampler_argmax(masked, 4) == 2);
    float none[3] = {-INFINITY, NAN, -INFINITY};
    CHECK(sampler_argmax(none, 3) == 0);
    CHECK(sampler_argmax(none, 0) == 0);
    /* ties across the 8 lanes and the tail: lowest index */
    float many[21];
    for (int i = 0; i < 21; i++) many[i] = (float)(i % 5);
    CHECK(sampler_argmax(many, 21) == 4);
    many[20] = 4.0f, many[4] = 0.0f;
    CHECK(sampler_argmax(many, 21) == 9);

    struct dj_sampler_params p = sampler_default_params();
    p.temp = 0;
    struct dj_sampler *g = mk(&p, V);
    CHECK(sampler_sample(g, l, 0) == am);
    sampler_free(g);
    g = mk(&p, 4);
    CHECK(sampler_sample(g, masked, 0) == 2);
    sampler_free(g);

    /* top-k 1 == greedy at any temperature */
    p = sampler_default_params();
    p.top_k = 1, p.temp = 5;
    g = mk(&p, V);
    int ok = 0;
    for (int i = 0; i < 20; i++) ok += sampler_sample(g, l, (uint64_t)i) == am;
    CHECK(ok == 20);
    sampler_free(g);

    /* masked tokens never drawn, even at a high temperature with no filters */
    float mk4[4] = {0.0f, -INFINITY, 0.5f, NAN};
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 50;
    g = mk(&p, 4);
    int bad = 0, seen[4] = {0};
    for (int i = 0; i < 2000; i++) {
        dj_token t = sampler_sample(g, mk4, (uint64_t)i);
        bad += t == 1 || t == 3;
        seen[t & 3]++;
    }
    CHECK(bad == 0 && seen[0] > 500 && seen[2] > 500);
    /* all masked: token 0; a +INFINITY logit wins at any temperature */
    float allm[4] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    CHECK(sampler_sample(g, allm, 3) == 0);
    float pinf[4] = {0.0f, INFINITY, 1.0f, INFINITY};
    CHECK(sampler_sample(g, pinf, 3) == 1);
    sampler_free(g);
}

static int count_tok(struct dj_sampler *s, const float *l, dj_token t, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += sampler_sample(s, l, (uint64_t)i) == t;
    return c;
}

static void test_filters(void) {
    struct dj_sampler_params p = sampler_default_params();
    struct dj_sampler *a;
    /* top-k 2: only the two best */
    float l5[5] = {1.0f, 3.0f, 2.9f, 2.8f, 0.0f};
    p.top_k = 2, p.top_p = 1, p.min_p = 0, p.temp = 1;
    a = mk(&p, 5);
    int c1 = count_tok(a, l5, 1, 3000), c2 = count_tok(a, l5, 2, 3000);
    CHECK(c1 + c2 == 3000 && c1 > 1000 && c2 > 1000);
    sampler_free(a);

    /* min-p 0.5: only tokens with p >= 0.5 * p_max (kept from the old test) */
    float mp[3] = {0.0f, -0.5f, -5.0f}; /* relative probabilities 1, 0.61, 0.0067 */
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0.5f, p.temp = 1, p.seed = 5;
    a = mk(&p, 3);
    CHECK(count_tok(a, mp, 2, 2000) == 0 && count_tok(a, mp, 1, 2000) > 300);
    sampler_free(a);

    /* top-p 0.5 with probabilities 0.6 / 0.3 / 0.1: only the first; 0.7: the first two */
    float tp[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
    p.min_p = 0, p.top_p = 0.5f;
    a = mk(&p, 3);
    CHECK(count_tok(a, tp, 0, 2000) == 2000);
    sampler_free(a);
    p.top_p = 0.7f;
    a = mk(&p, 3);
    CHECK(count_tok(a, tp, 2, 2000) == 0 && count_tok(a, tp, 1, 2000) > 400);
    sampler_free(a);

    /* typical-p: probabilities 0.5 / 0.2 x 2 / 0.1: entropy H = 1.22 nats; |-log p - H|
     * = 0.53, 0.39, 0.39, 1.08: typical_p 0.3 keeps the two 0.2 tokens (cum 0.4 > 0.3)
     * and drops the most likely one */
    float ty[4] = {logf(0.5f), logf(0.2f), logf(0.2f), logf(0.1f)};
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 1, p.typical_p = 0.3f;
    a = mk(&p, 4);
    int c0 = count_tok(a, ty, 0, 2000), c3 = count_tok(a, ty, 3, 2000);
    c1 = count_tok(a, ty, 1, 2000);
    CHECKF(c0 == 0 && c3 == 0 && c1 > 800 && c1 < 1200, "typical: %d %d %d", c0, c1, c3);
    sampler_free(a);
    p.typical_p = 0.75f; /* + the 0.5 token (cum 0.9) */
    a = mk(&p, 4);
    CHECK(count_tok(a, ty, 3, 2000) == 0 && count_tok(a, ty, 0, 2000) > 900);
    sampler_free(a);

    /* temperature: low → the argmax nearly always; high → flatter */
    float tl[3] = {1.0f, 0.5f, 0.0f};
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 0.05f;
    a = mk(&p, 3);
    CHECK(count_tok(a, tl, 0, 2000) > 1990);
    sampler_free(a);
    p.temp = 10.0f;
    a = mk(&p, 3);
    int hi2 = count_tok(a, tl, 2, 3000);
    CHECKF(hi2 > 850 && hi2 < 1150, "T=10: token 2 drawn %d of 3000 (~1000)", hi2);
    sampler_free(a);
}

static void test_bias_penalties(void) {
    struct dj_sampler_params p = sampler_default_params();
    float l[4] = {3.0f, 2.0f, 1.0f, 0.0f};
    /* ban the argmax: greedy takes the runner-up; sampling never draws it */
    struct dj_logit_bias ban[2] = {{0, -INFINITY}, {3, 2.5f}};
    p.temp = 0, p.logit_bias = ban, p.n_logit_bias = 1;
    struct dj_sampler *a = mk(&p, 4);
    CHECK(sampler_sample(a, l, 0) == 1);
    sampler_free(a);
    p.n_logit_bias = 2; /* token 3: 0 + 2.5 > 2 */
    a = mk(&p, 4);
    CHECK(sampler_sample(a, l, 0) == 3);
    sampler_free(a);
    p.temp = 2, p.top_k = 0, p.top_p = 1, p.min_p = 0;
    a = mk(&p, 4);
    CHECK(count_tok(a, l, 0, 3000) == 0);
    sampler_free(a);
    /* the bias array is copied */
    struct dj_logit_bias tmp[1] = {{0, -INFINITY}};
    p.temp = 0, p.logit_bias = tmp, p.n_logit_bias = 1;
    a = mk(&p, 4);
    tmp[0].tok = 3;
    CHECK(sampler_sample(a, l, 0) == 1);
    sampler_free(a);

    /* penalties under greedy: a repeated winner loses to the runner-up (old test) */
    float pen[3] = {2.0f, 1.9f, 0.0f};
    p = sampler_default_params();
    p.temp = 0, p.repeat_penalty = 1.5f, p.penalty_last_n = 4;
    a = mk(&p, 3);
    CHECK(sampler_sample(a, pen, 0) == 0);
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, pen, 1) == 1);
    for (int i = 0; i < 4; i++) sampler_accept(a, 2); /* pushes token 0 out of the window */
    CHECK(sampler_sample(a, pen, 2) == 0);
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, pen, 3) == 1);
    sampler_reset(a); /* forgets the history */
    CHECK(sampler_sample(a, pen, 4) == 0);
    sampler_free(a);
    p = sampler_default_params();
    p.temp = 0, p.presence_penalty = 0.2f, p.penalty_last_n = 8;
    a = mk(&p, 3);
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, pen, 0) == 1);
    sampler_free(a);

    /* frequency penalty scales with the count; -1 keeps the whole history; 0 none */
    float fq[2] = {1.0f, 0.0f};
    p = sampler_default_params();
    p.temp = 0, p.freq_penalty = 0.3f, p.penalty_last_n = -1;
    a = mk(&p, 2);
    for (int i = 0; i < 3; i++) sampler_accept(a, 0);
    CHECK(sampler_sample(a, fq, 0) == 0); /* 1 - 0.9 > 0 */
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, fq, 0) == 1); /* 1 - 1.2 < 0 */
    for (int i = 0; i < 1000; i++) sampler_accept(a, 1); /* -1: token 0's count stays */
    float fq2[2] = {1.0f, 299.9f};                        /* 1 - 1.2 < 299.9 - 300 */
    CHECK(sampler_sample(a, fq2, 0) == 1);
    sampler_free(a);
    p.penalty_last_n = 0;
    a = mk(&p, 2);
    for (int i = 0; i < 10; i++) sampler_accept(a, 0);
    CHECK(sampler_sample(a, fq, 0) == 0);
    sampler_free(a);
    /* a long window over a tiny vocabulary: the distinct-token list stays bounded */
    p.penalty_last_n = 64, p.freq_penalty = 0.0f, p.presence_penalty = 5.0f;
    a = mk(&p, 2);
    for (int i = 0; i < 500; i++) sampler_accept(a, (dj_token)(i % 2));
    sampler_accept(a, -1);
    sampler_accept(a, 2);
    CHECK(sampler_sample(a, fq, 0) == 0);
    sampler_free(a);
}

static void test_invalid(void) {
    struct dj_sampler *s = (struct dj_sampler *)&s; /* must stay untouched on failure */
    struct dj_sampler *const sentinel = s;
    struct dj_logit_bias b = {0, 1.0f};
    for (int k = 0; k < 14; k++) {
        struct dj_sampler_params p = sampler_default_params();
        const char *want = "";
        size_t n = 10;
        switch (k) {
        case 0: p.temp = NAN, want = "temp"; break;
        case 1: p.top_p = 1.5f, want = "top_p"; break;
        case 2: p.min_p = -0.1f, want = "min_p"; break;
        case 3: p.typical_p = NAN, want = "typical_p"; break;
        case 4: p.repeat_penalty = -1.0f, want = "repeat_penalty"; break;
        case 5: p.repeat_penalty = 0.0f, want = "repeat_penalty"; break;
        case 6: p.freq_penalty = INFINITY, want = "freq_penalty"; break;
        case 7: p.presence_penalty = NAN, want = "presence_penalty"; break;
        case 8: p.penalty_last_n = -2, want = "penalty_last_n"; break;
        case 9: b.tok = 10, p.logit_bias = &b, p.n_logit_bias = 1, want = "logit_bias[0].tok"; break;
        case 10: b.tok = -1, p.logit_bias = &b, p.n_logit_bias = 1, want = "logit_bias[0].tok"; break;
        case 11: b = (struct dj_logit_bias){3, NAN}, p.logit_bias = &b, p.n_logit_bias = 1, want = "bias"; break;
        case 12: p.n_logit_bias = 2, want = "logit_bias"; break;
        case 13: n = 0, want = "n_vocab"; break;
        }
        enum dj_status st = sampler_create(&p, n, &s);
        CHECKF(st == DJ_ERR_INVALID && s == sentinel && strstr(dj_last_error(), want), "case %d: status %d, '%s'", k,
               (int)st, dj_last_error());
    }
    struct dj_sampler_params p = sampler_default_params();
    CHECK(sampler_create(NULL, 10, &s) == DJ_ERR_INVALID);
    CHECK(sampler_create(&p, 10, NULL) == DJ_ERR_INVALID);
    b = (struct dj_logit_bias){3, -INFINITY}; /* -inf is a valid bias (a ban) */
    p.logit_bias = &b, p.n_logit_bias = 1;
    CHECK(sampler_create(&p, 10, &s) == DJ_OK && s != sentinel);
    sampler_free(s);
    sampler_free(NULL);
}

static int lp_ref_cmp(const void *a, const void *b) {
    const struct dj_logprob *x = a, *y = b;
    if (x->logprob != y->logprob) return x->logprob > y->logprob ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

static void test_logprobs(void) {
    enum { NMAX = 3000 };
    float *x = malloc(NMAX * sizeof *x);
    struct dj_logprob *ref = malloc(NMAX * sizeof *ref), top[64];
    int bad = 0;
    for (int t = 0; t < 300; t++) {
        size_t n = 1 + trng_below(NMAX);
        gen_logits(x, n);
        for (size_t i = 0; i < n; i++)
            if (x[i] == INFINITY) x[i] = 0; /* +inf: checked below */
        size_t nf = 0;
        float m = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (x[i] >= -FLT_MAX) ref[nf++] = (struct dj_logprob){(dj_token)i, x[i]}, m = x[i] > m ? x[i] : m;
        qsort(ref, nf, sizeof *ref, lp_ref_cmp);
        double z = 0;
        for (size_t i = 0; i < nf; i++) z += exp((double)ref[i].logprob - m);
        size_t n_top = (size_t[]){0, 1, 5, 20, 64}[trng_below(5)], n_out = 99;
        dj_token chosen = (dj_token)trng_below(n + 1) - (trng_below(10) == 0 ? (dj_token)n + 1 : 0);
        float lp = sampler_logprobs(x, n, chosen, top, n_top, &n_out);
        size_t want = nf < n_top ? nf : n_top;
        bool ok = n_out == want;
        for (size_t i = 0; ok && i < want; i++)
            ok = top[i].tok == ref[i].tok &&
                 fabs(top[i].logprob - ((double)ref[i].logprob - m - log(z))) < 1e-4 + 1e-6 * fabs(top[i].logprob);
        double lw = chosen >= 0 && (size_t)chosen < n && x[chosen] >= -FLT_MAX ? (double)x[chosen] - m - log(z) : -INFINITY;
        ok = ok && (isinf(lw) ? lp == -INFINITY : fabs(lp - lw) < 1e-4 + 1e-6 * fabs(lw));
        if (!ok && bad++ < 5) fprintf(stderr, "FAIL logprobs: trial %d n %zu n_top %zu: n_out %zu want %zu\n", t, n, n_top, n_out, want);
    }
    CHECK(bad == 0);
    /* probabilities sum to 1; -inf entries get -inf; a tie keeps the lower id first */
    float l[5] = {1.0f, -INFINITY, 2.0f, 1.0f, 0.5f};
    size_t n_out = 0;
    double sum = 0;
    for (dj_token i = 0; i < 5; i++) sum += exp(sampler_logprobs(l, 5, i, NULL, 0, NULL));
    CHECKF(fabs(sum - 1) < 1e-6, "sum %.9f", sum);
    CHECK(sampler_logprobs(l, 5, 1, top, 5, &n_out) == -INFINITY && n_out == 4);
    CHECK(top[0].tok == 2 && top[1].tok == 0 && top[2].tok == 3 && top[3].tok == 4);
    float allm[2] = {-INFINITY, NAN};
    CHECK(sampler_logprobs(allm, 2, 0, top, 5, &n_out) == -INFINITY && n_out == 0);
    float pinf[3] = {INFINITY, 0.0f, INFINITY};
    float lpi = sampler_logprobs(pinf, 3, 2, top, 5, &n_out);
    CHECK(fabsf(lpi + logf(2.0f)) < 1e-6f && n_out == 2 && top[0].tok == 0 && top[1].tok == 2);
    free(x);
    free(ref);
}

int main(void) {
    test_rng();
    test_mass();
    test_greedy_and_masks();
    test_reproducible();
    test_distribution();
    test_filters();
    test_bias_penalties();
    test_invalid();
    test_logprobs();
    test_equivalence();
    TEST_END();
}
