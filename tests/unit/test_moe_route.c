/*
 * test_moe_route.c — the fused MoE router (src/model/route.c) against the
 * separate passes it replaced: softmax or sigmoid, the selection bias, expert
 * groups (the losers' scores -inf), top-k by iterative argmax (descending, the
 * lowest id on a tie, an O(k²·n) rescan) and the normalization, copied here
 * verbatim as the reference.  Ids and weights must be bitwise equal.
 *
 * Rows: 8 to 512 experts, k 1 to 8, logits random, or drawn from 3 values
 * (many exact ties), or with runs of equal logits, or with -inf and NaN entries;
 * with and without bias, groups (4 or 8 groups, 1 to all used), clamp and scale.
 */
#include <math.h>
#include <string.h>

#include "model/route.h"
#include "test.h"

/* ---- the reference: forward.c's routing before it was fused ---- */
static void ref_softmax(float *z, int64_t n) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < n; e++) mx = z[e] > mx ? z[e] : mx;
    double sum = 0.0;
    for (int64_t e = 0; e < n; e++) {
        z[e] = expf(z[e] - mx);
        sum += (double)z[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t e = 0; e < n; e++) z[e] *= inv;
}

static void ref_top_k(const float *score, const float *p, int64_t n, int64_t k, int32_t *sel, float *w) {
    for (int64_t s = 0; s < k; s++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; e++) {
            bool taken = false;
            for (int64_t r = 0; r < s; r++) taken |= sel[r] == (int32_t)e;
            if (!taken && (best < 0 || score[e] > score[best])) best = e;
        }
        sel[s] = (int32_t)best;
        w[s] = p[best];
    }
}

static void ref_route(const struct moe_router *r, float *z, int32_t *sel, float *w) {
    const int64_t NE = r->n_expert, K = r->n_used;
    if (r->sigmoid)
        for (int64_t e = 0; e < NE; e++) z[e] = 1.0f / (1.0f + expf(-z[e]));
    else
        ref_softmax(z, NE);
    float s[512];
    for (int64_t e = 0; e < NE; e++) s[e] = r->bias ? z[e] + r->bias[e] : z[e];
    if (r->n_group > 1) {
        const int64_t G = r->n_group, per = NE / G;
        float gs[512];
        bool keep[512];
        for (int64_t g = 0; g < G; g++) {
            int64_t a = -1, b = -1;
            for (int64_t e = g * per; e < (g + 1) * per; e++) {
                if (a < 0 || s[e] > s[a]) { b = a; a = e; }
                else if (b < 0 || s[e] > s[b]) b = e;
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
        for (int64_t e = 0; e < NE; e++)
            if (!keep[e / per]) s[e] = -INFINITY;
    }
    ref_top_k(s, z, NE, K, sel, w);
    if (r->norm) {
        double sum = 0.0;
        for (int64_t k = 0; k < K; k++) sum += (double)w[k];
        float ws = (float)sum;
        if (ws < r->norm_min) ws = r->norm_min;
        for (int64_t k = 0; k < K; k++) w[k] /= ws;
    }
    if (r->scale != 0.0f && r->scale != 1.0f)
        for (int64_t k = 0; k < K; k++) w[k] *= r->scale;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rndf(void) { return (float)rnd() / 4294967296.0f * 8.0f - 4.0f; }

int main(void) {
    static const uint32_t sizes[] = {8, 16, 64, 128, 160, 256, 512};
    float z[512], z_ref[512], bias[512], w[8], w_ref[8];
    int32_t sel[8], sel_ref[8];
    long n_rows = 0, n_bad = 0, n_tied = 0, n_nan = 0;
    for (int iter = 0; iter < 6000; iter++) {
        struct moe_router r = {0};
        r.n_expert = sizes[rnd() % (sizeof sizes / sizeof sizes[0])];
        r.n_used = 1 + rnd() % 8;
        if (r.n_used > r.n_expert) r.n_used = r.n_expert;
        r.sigmoid = rnd() % 2;
        r.bias = rnd() % 2 ? bias : NULL;
        if (rnd() % 2) { /* groups: 4 or 8 of at least 2 experts, enough experts in the used groups for k
                          * (what the loader accepts, deepseek2.c) */
            r.n_group = rnd() % 2 || r.n_expert < 16 ? 4 : 8;
            const uint32_t per = r.n_expert / r.n_group;
            r.n_group_used = 1 + rnd() % r.n_group;
            while ((uint64_t)r.n_group_used * per < r.n_used) r.n_group_used++;
        }
        r.norm = rnd() % 4 != 0;
        r.norm_min = rnd() % 2 ? 6.103515625e-5f : 0.0f;
        r.scale = (float[]){0.0f, 1.0f, 2.5f, 0.75f}[rnd() % 4];
        const int kind = iter % 5;
        bool tied = false, nan = false;
        for (uint32_t e = 0; e < r.n_expert; e++) {
            switch (kind) {
            case 0: z[e] = rndf(); break;
            case 1: z[e] = (float)(rnd() % 3); break;               /* many exact ties */
            case 2: z[e] = (float)(e / 7 % 4) * 0.5f; break;        /* runs of equal logits */
            case 3: z[e] = rnd() % 5 ? rndf() : -INFINITY; break;   /* masked experts */
            default: z[e] = rnd() % 16 ? rndf() : (rnd() % 2 ? NAN : -INFINITY); break;
            }
            bias[e] = kind == 1 ? (float)(rnd() % 2) * 0.25f : rndf() * 0.01f;
            nan |= z[e] != z[e];
        }
        if (kind == 3 && rnd() % 2)
            for (uint32_t e = 0; e < r.n_expert; e++) z[e] = -INFINITY; /* the whole row: NaN gates */
        memcpy(z_ref, z, r.n_expert * sizeof(float));
        moe_route(&r, z, sel, w);
        ref_route(&r, z_ref, sel_ref, w_ref);
        for (uint32_t i = 0; i + 1 < r.n_used; i++) tied |= z_ref[sel_ref[i]] == z_ref[sel_ref[i + 1]];
        n_tied += tied;
        n_nan += nan;
        n_rows++;
        const bool ok = !memcmp(sel, sel_ref, r.n_used * sizeof(int32_t)) && !memcmp(w, w_ref, r.n_used * sizeof(float)) &&
                        !memcmp(z, z_ref, r.n_expert * sizeof(float));
        if (!ok && n_bad++ < 5)
            CHECKF(ok, "row %d (kind %d, %u experts, k %u, %s, groups %u/%u): ids %d %d .. vs %d %d ..", iter, kind,
                   r.n_expert, r.n_used, r.sigmoid ? "sigmoid" : "softmax", r.n_group, r.n_group_used, sel[0],
                   r.n_used > 1 ? sel[1] : -1, sel_ref[0], r.n_used > 1 ? sel_ref[1] : -1);
    }
    CHECKF(n_bad == 0, "%ld of %ld rows differ from the iterative argmax", n_bad, n_rows);
    CHECK(n_tied > 100 && n_nan > 100); /* the cases the test is for did occur */
    printf("%ld rows (%ld with tied selected scores, %ld with NaN logits): fused router == separate passes, bitwise\n",
           n_rows, n_tied, n_nan);
    TEST_END();
}
