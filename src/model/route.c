/*
 * route.c — Mixture-of-Experts routing of one token, fused: gate (softmax or
 * sigmoid), selection bias, expert groups, top-k and weight normalization in
 * one routine over the router row (llama.cpp does the same steps as separate
 * ggml ops, and as one kernel in ggml-cuda/topk-moe.cu).
 *
 *   p = softmax(z)  (max subtracted, summed in double, in id order)  or  sigmoid(z)
 *   s = p + bias                                   (the selection score; bias optional)
 *   groups (n_group > 1): a group's score is the sum of its two best s; only the
 *       n_group_used best groups (iterative argmax, the lowest id on a tie) compete,
 *       the others' s become -inf
 *   S = the k largest s: descending score, the lowest id on a tie (llama.cpp's
 *       argsort order, as an iterative argmax finds them)
 *   w_i = p[S_i];  norm: w_i /= max(sum w in double rounded once, norm_min);  scale
 *
 * gpt-oss (softmax_weight): z += z_bias; p = z (no gate); w = softmax(z_S) over the k
 * selected (max subtracted, summed in double in selection order, times 1 / sum).
 *
 * Top-k is one pass keeping the k best so far in a list sorted by (score desc,
 * id asc): a new id joins only if strictly better than the list's last, and goes
 * after every equal score (ids arrive in increasing order), so the list is the
 * prefix of that order — the iterative argmax's choice, in O(n + k·inserts)
 * instead of its O(k²·n) (DeepSeek-V3: 256 experts, k 8).  A NaN score breaks the
 * total order the list relies on; then the iterative argmax itself runs, so the
 * result is the same whatever the row holds.
 *
 * The arithmetic of every value is the one the separate passes did (same
 * operations in the same order), so routing is bitwise unchanged (the golden
 * tests check it against llama.cpp's routing files; tests/unit/test_moe_route.c
 * against the iterative argmax).
 */
#include "model/route.h"

#include <math.h>

/* The k largest of s[0..n) by iterative argmax: the lowest id on a tie; a NaN
 * never replaces a best (comparisons with it are false). */
static void top_k_argmax(const float *s, int64_t n, int64_t k, int32_t *sel) {
    for (int64_t i = 0; i < k; i++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; e++) {
            bool taken = false;
            for (int64_t r = 0; r < i; r++) taken |= sel[r] == (int32_t)e;
            if (!taken && (best < 0 || s[e] > s[best])) best = e;
        }
        sel[i] = (int32_t)best;
    }
}

/* x[i] = exp(x[i] - max x) in place; returns 1 / their sum (summed in double, in order). */
static float exp_shifted(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += (double)x[i];
    }
    return (float)(1.0 / sum);
}

/* Offers (s, e) to the sorted list ks/sel of *cnt <= k entries. */
static inline void top_k_offer(float *ks, int32_t *sel, int64_t *cnt, int64_t k, float s, int32_t e) {
    int64_t i = *cnt;
    if (i == k) {
        if (!(s > ks[k - 1])) return;
        i = k - 1;
    } else {
        (*cnt)++;
    }
    for (; i > 0 && ks[i - 1] < s; i--) {
        ks[i] = ks[i - 1];
        sel[i] = sel[i - 1];
    }
    ks[i] = s;
    sel[i] = e;
}

void moe_route(const struct moe_router *r, float *z, int32_t *sel, float *w) {
    const int64_t n = r->n_expert, k = r->n_used;
    float s[MOE_ROUTE_MAX], ks[MOE_ROUTE_MAX]; /* scores; the sorted list's scores */
    float inv = 1.0f;
    if (r->z_bias)
        for (int64_t e = 0; e < n; e++) z[e] += r->z_bias[e];
    if (r->softmax_weight) {
        /* p = z: the selection below multiplies by inv = 1, which changes no bit */
    } else if (r->sigmoid) {
        for (int64_t e = 0; e < n; e++) z[e] = 1.0f / (1.0f + expf(-z[e]));
    } else {
        inv = exp_shifted(z, n);
    }
    int64_t cnt = 0;
    bool nan = false;
    if (r->n_group <= 1) { /* p, s and the top-k in one pass */
        for (int64_t e = 0; e < n; e++) {
            if (!r->sigmoid && !r->softmax_weight) z[e] *= inv;
            s[e] = r->bias ? z[e] + r->bias[e] : z[e];
            nan |= s[e] != s[e];
            top_k_offer(ks, sel, &cnt, k, s[e], (int32_t)e);
        }
    } else {
        for (int64_t e = 0; e < n; e++) {
            if (!r->sigmoid && !r->softmax_weight) z[e] *= inv;
            s[e] = r->bias ? z[e] + r->bias[e] : z[e];
        }
        const int64_t G = r->n_group, per = n / G;
        float gs[MOE_ROUTE_MAX];
        bool keep[MOE_ROUTE_MAX];
        for (int64_t g = 0; g < G; g++) { /* the sum of the group's two best s */
            int64_t a = -1, b = -1;
            for (int64_t e = g * per; e < (g + 1) * per; e++) {
                if (a < 0 || s[e] > s[a]) {
                    b = a;
                    a = e;
                } else if (b < 0 || s[e] > s[b]) {
                    b = e;
                }
            }
            gs[g] = s[a] + s[b];
            keep[g] = false;
        }
        for (uint32_t u = 0; u < r->n_group_used; u++) {
            int64_t best = -1;
            for (int64_t g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
            keep[best] = true;
        }
        for (int64_t e = 0; e < n; e++) {
            if (!keep[e / per]) s[e] = -INFINITY;
            nan |= s[e] != s[e];
            top_k_offer(ks, sel, &cnt, k, s[e], (int32_t)e);
        }
    }
    if (nan) top_k_argmax(s, n, k, sel);
    for (int64_t i = 0; i < k; i++) w[i] = z[sel[i]];
    if (r->softmax_weight) {
        const float winv = exp_shifted(w, k);
        for (int64_t i = 0; i < k; i++) w[i] *= winv;
    }
    if (r->norm) {
        double sum = 0.0;
        for (int64_t i = 0; i < k; i++) sum += (double)w[i];
        float ws = (float)sum;
        if (ws < r->norm_min) ws = r->norm_min;
        for (int64_t i = 0; i < k; i++) w[i] /= ws;
    }
    if (r->scale != 0.0f && r->scale != 1.0f)
        for (int64_t i = 0; i < k; i++) w[i] *= r->scale;
}
