/*
 * test_kernels_fp16.c — half and bfloat16 conversions (core/fp16.h and the
 * F16C paths of the kernel tables).
 *
 *  - f16 -> f32 for all 65536 halves against a straightforward reference
 *    (sign * mantissa * 2^exp in double), NaN payloads included;
 *  - f32 -> f16 on random floats of every magnitude, on exact midpoints
 *    between neighbouring halves and one ulp either side, against a
 *    reference that picks the nearest half by search (ties to even), and,
 *    where the CPU has F16C, against the hardware instruction (NaNs too);
 *  - bf16 both ways likewise;
 *  - every kernel table's F16 activation quantizer and F16 dequantizer
 *    against the scalar functions, bitwise;
 *  - DJ_ISA=generic in the environment makes dj_kernels() the generic table.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "test.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double half_value(uint16_t h) { /* finite halves only */
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest half to f (finite), ties to even mantissa, by binary search over
 * the ordered positive halves 0 .. 0x7bff; |f| >= 65520 rounds to infinity. */
static uint16_t ref_f32_to_f16(float f) {
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    const double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    int lo = 0, hi = 0x7bff; /* largest half <= a */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
    }
    int r = lo;
    if (lo < 0x7bff) {
        const double dlo = a - half_value((uint16_t)lo), dhi = half_value((uint16_t)(lo + 1)) - a;
        if (dhi < dlo || (dhi == dlo && (lo & 1))) r = lo + 1;
    } else if (a - half_value(0x7bff) > 0) {
        r = 0x7bff; /* below 65520 */
    }
    return (uint16_t)(sign | r);
}

static uint16_t ref_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    const uint32_t lo = x & 0xffff, up = x >> 16;
    if (lo > 0x8000 || (lo == 0x8000 && (up & 1))) return (uint16_t)(up + 1);
    return (uint16_t)up;
}

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
#endif

/* A float of random sign, exponent in [-30, 20] and random mantissa bits. */
static float random_float(void) {
    const uint64_t r = rng_next();
    const int e = (int)(r % 51) - 30;
    return ldexpf(1.0f + (float)((r >> 8) & 0x7fffff) / 8388608.0f, e) * ((r >> 40) & 1 ? -1 : 1);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    /* DJ_ISA caps the table chosen at start-up (read once, on first use) */
    setenv("DJ_ISA", "generic", 1);
    CHECK(dj_kernels()->isa == DJ_ISA_GENERIC && strcmp(dj_kernels()->name, "generic") == 0);

    /* f16 -> f32, exhaustive */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = dj_fp16_to_f32((uint16_t)h);
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            const uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | ((uint32_t)m << 13);
            if (f32_bits(f) != want) bad++;
        } else if (f32_bits(f) != f32_bits((float)half_value((uint16_t)h))) {
            bad++;
        }
        /* and back: every half converts to float and back unchanged (NaNs stay NaN) */
        const uint16_t back = dj_f32_to_fp16(f);
        if (e == 31 && m) { if ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff)) bad++; }
        else if (back != h) bad++;
    }
    CHECKF(bad == 0, "%d halves convert wrongly", bad);

    /* f32 -> f16: random floats across the range (overflow, subnormals, underflow) */
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        const float f = random_float();
        if (dj_f32_to_fp16(f) != ref_f32_to_f16(f)) {
            if (bad++ < 5) fprintf(stderr, "f32->f16 %a: got %04x want %04x\n", f, dj_f32_to_fp16(f), ref_f32_to_f16(f));
        }
    }
    CHECKF(bad == 0, "%d random floats round wrongly to f16", bad);

    /* exact midpoints between neighbouring positive halves, and one float ulp either side */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        const double mid = (half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2;
        const float fm = (float)mid; /* exact: halves have 11 bits */
        const float probes[3] = {nextafterf(fm, 0), fm, nextafterf(fm, INFINITY)};
        for (int p = 0; p < 3; p++) {
            for (int s = 0; s < 2; s++) {
                const float f = s ? -probes[p] : probes[p];
                if (dj_f32_to_fp16(f) != ref_f32_to_f16(f)) bad++;
            }
        }
    }
    CHECKF(bad == 0, "%d midpoint cases round wrongly to f16", bad);
    CHECK(dj_f32_to_fp16(65519.996f) == 0x7bff);
    CHECK(dj_f32_to_fp16(65520.0f) == 0x7c00);
    CHECK(dj_f32_to_fp16(INFINITY) == 0x7c00 && dj_f32_to_fp16(-INFINITY) == 0xfc00);
    CHECK((dj_f32_to_fp16(NAN) & 0x7c00) == 0x7c00 && (dj_f32_to_fp16(NAN) & 0x3ff) != 0);

#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx")) { /* F16C shipped with AVX on every x86 that has both */
        bad = 0;
        for (int i = 0; i < 2000000; i++) {
            const float f = i & 1 ? random_float() : bits_f32((uint32_t)rng_next()); /* any bits, NaNs too */
            if (dj_f32_to_fp16(f) != hw_f32_to_f16(f)) {
                if (bad++ < 5) fprintf(stderr, "f32->f16 %a (%08x): got %04x, F16C %04x\n", f, f32_bits(f), dj_f32_to_fp16(f), hw_f32_to_f16(f));
            }
        }
        CHECKF(bad == 0, "%d floats differ from the F16C instruction", bad);
    }
#endif

    /* bf16 both ways */
    bad = 0;
    for (uint32_t b = 0; b < 65536; b++)
        if (f32_bits(dj_bf16_to_f32((uint16_t)b)) != b << 16) bad++;
    for (int i = 0; i < 2000000; i++) {
        const float f = i & 1 ? random_float() : bits_f32((uint32_t)rng_next());
        if (dj_f32_to_bf16(f) != ref_f32_to_bf16(f)) bad++;
    }
    CHECKF(bad == 0, "%d bf16 conversions wrong", bad);

    /* every table's F16 paths: activation quantizer and dequantizer, bitwise */
    enum { N = 65536 + 13 };
    static float xf[N], yf[N];
    static uint16_t hq[N], hr[N];
    for (int i = 0; i < N; i++) xf[i] = i < 65536 ? dj_fp16_to_f32((uint16_t)i) * (1.0f + 0x1p-12f) : random_float();
    for (int i = 0; i < 1000; i++) xf[(size_t)rng_next() % N] = bits_f32((uint32_t)rng_next());
    for (int isa = 0; isa < DJ_ISA_COUNT; isa++) {
        const struct dj_kernels *kt = dj_kernels_for_isa((enum dj_isa)isa);
        if (!kt) continue;
        kt->quantize_act[DJ_TYPE_F16](xf, hq, N);
        for (int i = 0; i < N; i++) hr[i] = dj_f32_to_fp16(xf[i]);
        CHECKF(memcmp(hq, hr, sizeof hq) == 0, "%s: f16 activation quantizer differs", kt->name);
        for (int i = 0; i < N; i++) hq[i] = (uint16_t)(i < 65536 ? (uint64_t)i : rng_next());
        kt->w[DJ_TYPE_F16].dequantize_row(hq, yf, N);
        bad = 0;
        /* bitwise, except that F16C quiets signaling NaNs (as ggml's conversions do):
         * a NaN only has to stay a NaN */
        for (int i = 0; i < N; i++) {
            const float want = dj_fp16_to_f32(hq[i]);
            if (isnan(want) ? !isnan(yf[i]) : f32_bits(yf[i]) != f32_bits(want)) bad++;
        }
        CHECKF(bad == 0, "%s: f16 dequantizer differs in %d values", kt->name, bad);
    }

    TEST_END();
}
