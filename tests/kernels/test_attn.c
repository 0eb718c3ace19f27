/*
 * test_attn.c — the attention kernels of every ISA table this CPU runs:
 *  - a score depends only on (q, K row p): scoring n keys at once equals
 *    scoring each key alone, bitwise (batch invariance, DESIGN.md §3);
 *  - scores and weighted value sums are within float rounding of an exact
 *    (double) reference: |err| <= 2 * hd * 2^-24 * sum |terms|;
 *  - positions accumulate in order: zero weights after a prefix give the
 *    prefix's sum, bitwise; and a sum cut into pieces (acc = true), as the
 *    paged KV cache does, equals one call, bitwise;
 *  - head dims that are not multiples of the vector width (8, 12, 40) work;
 *  - value sums of many rows at once (attn_values_n) equal each row's, bitwise;
 *  - the softmax of a score row is within float rounding of a double reference.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels_testutil.h"
#include "test.h"

static void check_table(const struct dj_kernels *k) {
    struct trng r = {7};
    const int64_t hds[] = {8, 12, 32, 40, 64, 128};
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++) {
        const int64_t hd = hds[a], n = 37;
        const size_t stride = (size_t)hd * 3 + 5; /* rows of a KV cache holding several heads */
        float *q = malloc((size_t)hd * sizeof(float)), *kv = malloc((size_t)n * stride * sizeof(float));
        float s[37], s1, w[37], out[128], out_pre[128];
        trng_row(&r, q, hd, 0, 1.0f);
        for (int64_t p = 0; p < n; p++) trng_row(&r, kv + (size_t)p * stride, (int64_t)stride, (int)(p % 3), 1.0f);
        const float scale = 1.0f / sqrtf((float)hd);
        k->attn_scores(hd, q, kv, stride, n, scale, s);
        int bad_single = 0, bad_ref = 0;
        for (int64_t p = 0; p < n; p++) {
            k->attn_scores(hd, q, kv + (size_t)p * stride, stride, 1, scale, &s1);
            bad_single += memcmp(&s1, &s[p], sizeof s1) != 0;
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < hd; i++) {
                exact += (double)q[i] * kv[(size_t)p * stride + (size_t)i];
                mag += fabs((double)q[i] * kv[(size_t)p * stride + (size_t)i]);
            }
            bad_ref += fabs(s[p] - exact * scale) > 2.0 * (double)hd * 0x1p-24 * mag * scale + 1e-30;
        }
        CHECKF(bad_single == 0, "%s hd %lld: %d scores differ when computed alone", k->name, (long long)hd, bad_single);
        CHECKF(bad_ref == 0, "%s hd %lld: %d scores off the exact value", k->name, (long long)hd, bad_ref);

        for (int64_t p = 0; p < n; p++) w[p] = (float)trng_unif(&r);
        k->attn_values(hd, w, kv, stride, n, out, false);
        int bad_val = 0;
        for (int64_t d = 0; d < hd; d++) {
            double exact = 0, mag = 0;
            for (int64_t p = 0; p < n; p++) {
                exact += (double)w[p] * kv[(size_t)p * stride + (size_t)d];
                mag += fabs((double)w[p] * kv[(size_t)p * stride + (size_t)d]);
            }
            bad_val += fabs(out[d] - exact) > 2.0 * (double)n * 0x1p-24 * mag + 1e-30;
        }
        CHECKF(bad_val == 0, "%s hd %lld: %d value sums off", k->name, (long long)hd, bad_val);
        /* in-order accumulation: with zero weights after position 20, the sum over all n
         * positions is the sum over the first 20, bitwise (adding 0 * v leaves a sum as is) */
        float wz[37];
        for (int64_t p = 0; p < n; p++) wz[p] = p < 20 ? w[p] : 0.0f;
        k->attn_values(hd, wz, kv, stride, 20, out_pre, false);
        k->attn_values(hd, wz, kv, stride, n, out, false);
        CHECKF(!memcmp(out_pre, out, (size_t)hd * sizeof(float)), "%s hd %lld: prefix sum differs", k->name,
               (long long)hd);
        /* out-of-range lanes of `out` are not written */
        float guard[129];
        for (int i = 0; i < 129; i++) guard[i] = 12345.0f;
        k->attn_values(hd, w, kv, stride, n, guard, false);
        CHECK(guard[hd] == 12345.0f);
        /* cut into pieces (as a paged KV cache does), accumulating: bitwise one call */
        float pieces[128];
        k->attn_values(hd, w, kv, stride, n, out, false);
        k->attn_values(hd, w, kv, stride, 5, pieces, false);
        k->attn_values(hd, w + 5, kv + 5 * stride, stride, 16, pieces, true);
        k->attn_values(hd, w + 21, kv + 21 * stride, stride, n - 21, pieces, true);
        CHECKF(!memcmp(pieces, out, (size_t)hd * sizeof(float)), "%s hd %lld: pieces differ from one call", k->name,
               (long long)hd);
        /* many rows at once (attn_values_n: 1 .. 19 rows, past every row-group size of
         * the kernels, fresh and accumulating) equal each row's attn_values, bitwise */
        enum { NR = 19 };
        float wn[NR][37], on[NR][128], o1[128];
        const float *wp[NR];
        float *op[NR];
        for (int i = 0; i < NR; i++) {
            for (int64_t p = 0; p < n; p++) wn[i][p] = (float)trng_unif(&r);
            wp[i] = wn[i];
            op[i] = on[i];
        }
        int bad_rows = 0;
        for (int nr = 1; nr <= NR; nr += 3) {
            for (int acc = 0; acc < 2; acc++) {
                for (int i = 0; i < nr; i++) memcpy(on[i], out, (size_t)hd * sizeof(float));
                k->attn_values_n(hd, nr, wp, kv, stride, n, op, acc);
                for (int i = 0; i < nr; i++) {
                    memcpy(o1, out, (size_t)hd * sizeof(float));
                    k->attn_values(hd, wn[i], kv, stride, n, o1, acc);
                    bad_rows += memcmp(o1, on[i], (size_t)hd * sizeof(float)) != 0;
                }
            }
        }
        CHECKF(bad_rows == 0, "%s hd %lld: %d rows of attn_values_n differ from attn_values", k->name, (long long)hd,
               bad_rows);
        free(q);
        free(kv);
    }
}

/* The softmax of a score row: within float rounding of exp(s - max) / sum computed in
 * double, summing to 1, the element past the row untouched; the same row gives the same
 * bits again.  With a sink (gpt-oss): the sink is one more logit in the max and the sum,
 * its own probability dropped (the row sums to 1 - p_sink); sink -INFINITY is bitwise
 * the plain softmax of the older kernel contract (checked against a sink far below). */
static void check_softmax(const struct dj_kernels *k) {
    struct trng r = {11};
    const int64_t ns[] = {1, 7, 16, 17, 100, 4099};
    const float sinks[] = {-INFINITY, 3.5f, 40.0f, -2.0f};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t si = 0; si < sizeof sinks / sizeof sinks[0]; si++) {
            const int64_t n = ns[a];
            const float sink = sinks[si];
            float *x = malloc((size_t)(n + 1) * sizeof(float)), *s = malloc((size_t)(n + 1) * sizeof(float));
            float *s2 = malloc((size_t)(n + 1) * sizeof(float));
            for (int64_t p = 0; p < n; p++) x[p] = 12.0f * trng_gauss(&r);
            x[n] = 777.0f;
            memcpy(s, x, (size_t)(n + 1) * sizeof(float));
            memcpy(s2, x, (size_t)(n + 1) * sizeof(float));
            k->attn_softmax(s, n, sink);
            k->attn_softmax(s2, n, sink);
            double mx = -INFINITY, sum = 0, got = 0;
            for (int64_t p = 0; p < n; p++) mx = x[p] > mx ? x[p] : mx;
            if (sink > mx) mx = sink;
            for (int64_t p = 0; p < n; p++) sum += exp((double)x[p] - mx);
            const double p_sink = sink > -INFINITY ? exp((double)sink - mx) / (sum + exp((double)sink - mx)) : 0.0;
            if (sink > -INFINITY) sum += exp((double)sink - mx);
            int bad = 0;
            for (int64_t p = 0; p < n; p++) {
                /* s - max rounded to float first, as every table computes it (beyond Sterbenz's
                 * range that rounding alone moves exp by |s - max| * 2^-24 relative) */
                const double ref = exp((double)(x[p] - (float)mx)) / sum;
                bad += !(fabs(s[p] - ref) <= 1e-6 * ref + 1e-37);
                got += s[p];
            }
            CHECKF(bad == 0, "%s softmax n %lld sink %g: %d values off", k->name, (long long)n, (double)sink, bad);
            CHECKF(fabs(got - (1.0 - p_sink)) < 1e-5, "%s softmax n %lld sink %g: sums to %.9g, not %.9g", k->name,
                   (long long)n, (double)sink, got, 1.0 - p_sink);
            CHECKF(s[n] == 777.0f, "%s softmax n %lld: wrote past the row", k->name, (long long)n);
            CHECKF(!memcmp(s, s2, (size_t)n * sizeof(float)), "%s softmax n %lld: not reproducible", k->name,
                   (long long)n);
            if (sink == -INFINITY) { /* a sink too small to register changes no bit */
                memcpy(s2, x, (size_t)n * sizeof(float));
                k->attn_softmax(s2, n, -1e30f);
                CHECKF(!memcmp(s, s2, (size_t)n * sizeof(float)), "%s softmax n %lld: sink -1e30 is not the plain "
                       "softmax", k->name, (long long)n);
            }
            free(x);
            free(s);
            free(s2);
        }
}

int main(void) {
    int tables = 0;
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *k = dj_kernels_for_isa((enum dj_isa)isa);
        if (!k) continue;
        CHECK(k->attn_scores != NULL && k->attn_values != NULL && k->attn_values_n != NULL && k->attn_softmax != NULL);
        check_table(k);
        check_softmax(k);
        tables++;
        printf("attention kernels: %s checked\n", k->name);
    }
    CHECK(tables >= 1);
    TEST_END();
}
