/*
 * kernels_testutil.h — seeded random rows for the kernel tests.
 *
 * One generator (splitmix64) with an explicit state, so every test input is
 * reproducible from its seed.  Rows come in several "modes" that reach the
 * quantizers' corner cases: gaussian, uniform with an offset, outliers, many
 * zeros, many exact ties, all positive, zero sub-blocks, and tiny groups (below
 * the k-quants' 1e-15 all-zero threshold).
 */
#ifndef DJ_TESTS_KERNELS_TESTUTIL_H
#define DJ_TESTS_KERNELS_TESTUTIL_H

#include <math.h>
#include <stdint.h>

struct trng {
    uint64_t s;
};

static inline uint64_t trng_next(struct trng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double trng_unif(struct trng *r) { return (double)(trng_next(r) >> 11) / 9007199254740992.0; }

static inline float trng_gauss(struct trng *r) {
    const double u1 = trng_unif(r) + 1e-300, u2 = trng_unif(r);
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

enum { TROW_MODES = 8 };

/* A row of k floats of overall size `scale` in one of TROW_MODES modes. */
static inline void trng_row(struct trng *r, float *x, int64_t k, int mode, float scale) {
    for (int64_t i = 0; i < k; i++) {
        float v = trng_gauss(r) * scale;
        switch (mode) {
        case 1: v = (float)(trng_unif(r) - 0.3) * scale; break;        /* offset uniform */
        case 2: if (trng_next(r) % 17 == 0) v *= 30; break;             /* outliers */
        case 3: if (trng_next(r) % 3 == 0) v = 0; break;                /* many zeros */
        case 4: v = (float)(int)(trng_gauss(r) * 4) * scale; break;     /* exact ties */
        case 5: v = fabsf(v); break;                                    /* all positive */
        case 6: if (i % 256 < 16) v = 0; break;                         /* zero sub-blocks */
        case 7: v *= 1e-18f; break;                                     /* tiny groups */
        default: break;
        }
        x[i] = v;
    }
}

#endif
