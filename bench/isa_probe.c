/*
 * isa_probe.c — what the avx512bf16 and amx kernel tables rest on, measured on the CPU
 * at hand (docs/ARCHITECTURE.md "Kernels and dispatch", docs/BENCHMARKS.md "BF16 by
 * AVX512_BF16 and AMX"):
 *
 *   0. the ceiling of the AVX2 int8 prefill mix (vpmaddubsw + vpaddw), in GOP/s;
 *   1. throughput of vdpbf16ps against vfmadd231ps (24 independent chains, registers only);
 *   2. throughput of TDPBF16PS (4 independent accumulator tiles);
 *   3. how one TDPBF16PS rounds: 16 x 16 outputs of random bf16 tiles (k = 64 pairs: 4
 *      instructions) against four emulations — fma per product (even then odd, odd then
 *      even), one rounding per pair, one per instruction — printed as mismatch counts;
 *   4. what the amx table's batch invariance needs: a token's outputs are the same bits
 *      in a 1-row tile, and in any row of a 16-row tile among other tokens.
 *
 * Not run by ctest.  `bench_isa_probe` prints "no AVX512_BF16" / "no AMX" and skips the
 * parts the CPU (or Linux: arch_prctl ARCH_REQ_XCOMP_PERM) does not allow.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench_rng.h"
#include "core/fp16.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static float rf(void) {
    return (float)(((double)(rnd() >> 11) / 9007199254740992.0 - 0.5) * exp(((double)(rnd() % 1000) / 1000 - 0.5) * 8));
}

/* 0. The ceiling of the AVX2 int8 prefill mix on this core (docs/BENCHMARKS.md, the AVX2
 * tables): kernels_avx2.c's q4_K inner step — a 32-byte weight vector's nibbles (one
 * vpand) against 4 tokens' broadcast activation dwords, vpmaddubsw + vpaddw each, the data
 * in L1, no outer loop — and vpmaddubsw + vpaddw alone (12 chains, registers only).  Both
 * in GOP/s (2 a multiply-add), the unit of bench_kernels. */
__attribute__((target("avx2"))) static void probe_avx2_int8(void) {
    static uint8_t wq[8][32] __attribute__((aligned(32))), act[4][32] __attribute__((aligned(32)));
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 32; j++) wq[i][j] = (uint8_t)rnd();
    for (int t = 0; t < 4; t++)
        for (int j = 0; j < 32; j++) act[t][j] = (uint8_t)(rnd() % 255);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i xs[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    const long n = 20000000;
    const uint8_t *wp = &wq[0][0], *ap = &act[0][0];
    const double t0 = now();
    for (long r = 0; r < n; r++) {
        __asm__ volatile("" : "+r"(wp), "+r"(ap)); /* reload every pass, as the kernel does */
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m256i q = _mm256_and_si256(_mm256_load_si256((const __m256i *)(wp + 32 * i)), m4);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                uint32_t v;
                memcpy(&v, ap + 32 * t + 4 * i, 4);
                xs[t] = _mm256_add_epi16(xs[t], _mm256_maddubs_epi16(q, _mm256_set1_epi32((int)v)));
                __asm__("" : "+x"(xs[t]));
            }
        }
    }
    const double t1 = now();
    __m256i ch[12], qa = _mm256_set1_epi8(3), qb = _mm256_set1_epi8(-5);
    for (int i = 0; i < 12; i++) ch[i] = _mm256_set1_epi16((short)i);
    for (long r = 0; r < n; r++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            ch[i] = _mm256_add_epi16(ch[i], _mm256_maddubs_epi16(qa, qb));
            __asm__("" : "+x"(ch[i]));
        }
        __asm__ volatile("" : "+x"(qa));
    }
    const double t2 = now();
    int16_t out[16];
    long s = 0;
    for (int t = 0; t < 4; t++) ch[t] = _mm256_add_epi16(ch[t], xs[t]);
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_si256((__m256i *)out, ch[i]);
        s += out[0];
    }
    printf("0. AVX2 int8: the q4_K prefill step (load, vpand, 4 x vpbroadcastd + vpmaddubsw + vpaddw) %.0f GOP/s; "
           "vpmaddubsw + vpaddw alone %.0f GOP/s  [%ld]\n",
           (double)n * 8 * 4 * 32 * 2 / (t1 - t0) / 1e9, (double)n * 12 * 32 * 2 / (t2 - t1) / 1e9, s);
}

__attribute__((target("avx512f,avx512bf16"))) static void probe_dpbf16(void) {
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i * 1e-9f);
    __m512i w = _mm512_set1_epi16(0x3f80), a = _mm512_set1_epi16(0x3f80);
    __m512 wf = _mm512_set1_ps(1e-9f), af = _mm512_set1_ps(1.0f);
    const long n = 20000000;
    const double t0 = now();
    for (long r = 0; r < n; r++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)w, (__m512bh)a);
        __asm__ volatile("" : "+v"(w));
    }
    const double t1 = now();
    for (long r = 0; r < n; r++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_fmadd_ps(wf, af, acc[i]);
        __asm__ volatile("" : "+v"(wf));
    }
    const double t2 = now();
    float s = 0;
    for (int i = 0; i < 24; i++) s += _mm512_reduce_add_ps(acc[i]);
    printf("1. vdpbf16ps %.2f G instr/s (%.0f GFLOP/s); vfmadd231ps %.2f G instr/s (%.0f GFLOP/s)  [%g]\n",
           (double)n * 24 / (t1 - t0) / 1e9, (double)n * 24 * 64 / (t1 - t0) / 1e9, (double)n * 24 / (t2 - t1) / 1e9,
           (double)n * 24 * 32 / (t2 - t1) / 1e9, (double)s);
}

struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
#define BARRIER() __asm__ volatile("" ::: "memory")
enum { NK = 64 }; /* pairs of k per output: 4 tiles */
static uint16_t A[16][2 * NK], B[NK][32], A1[16][2 * NK];

__attribute__((target("amx-tile,amx-bf16"))) static void amx_cfg(int rows) {
    _Alignas(64) struct tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = (uint8_t)(t < 2 ? rows : 16);
        c.colsb[t] = 64;
    }
    BARRIER();
    _tile_loadconfig(&c);
}
/* C = A (rows tokens) x B over NK pairs: tiles 0 (C), 1 (A), 2 (B). */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_run(int rows, uint16_t (*a)[2 * NK], float (*c)[16]) {
    amx_cfg(rows);
    BARRIER();
    _tile_zero(0);
    for (int kt = 0; kt < NK / 16; kt++) {
        _tile_loadd(1, &a[0][kt * 32], sizeof A[0]);
        _tile_loadd(2, &B[kt * 16][0], 64);
        _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, c, 64);
    BARRIER();
    _tile_release();
}
__attribute__((target("amx-tile,amx-bf16"))) static void probe_amx_speed(void) {
    amx_cfg(16);
    BARRIER();
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_loadd(0, A, sizeof A[0]);
    _tile_loadd(1, A, sizeof A[0]);
    _tile_loadd(2, B, 64);
    _tile_loadd(7, B, 64);
    const long n = 2000000;
    const double t0 = now();
    for (long i = 0; i < n; i++) {
        _tile_dpbf16ps(3, 0, 2);
        _tile_dpbf16ps(4, 0, 7);
        _tile_dpbf16ps(5, 1, 2);
        _tile_dpbf16ps(6, 1, 7);
    }
    const double t = now() - t0;
    _tile_release();
    printf("2. TDPBF16PS: %.0f GFLOP/s, %.1f ns an instruction (4 independent tiles)\n",
           (double)n * 4 * 16 * 16 * 32 * 2 / t / 1e9, t / ((double)n * 4) * 1e9);
}

static void probe_amx_rounding(void) {
    static float C[16][16], C1[16][16];
    long mism[4] = {0, 0, 0, 0}, total = 0, inv = 0, inv_total = 0;
    for (int trial = 0; trial < 200; trial++) {
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < 2 * NK; k++) A[m][k] = dj_f32_to_bf16(rf());
        for (int k = 0; k < NK; k++)
            for (int n = 0; n < 32; n++) B[k][n] = dj_f32_to_bf16(rf());
        amx_run(16, A, C);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                float e[4] = {0, 0, 0, 0};
                double tile = 0;
                for (int k = 0; k < NK; k++) {
                    const float ae = dj_bf16_to_f32(A[m][2 * k]), ao = dj_bf16_to_f32(A[m][2 * k + 1]);
                    const float be = dj_bf16_to_f32(B[k][2 * n]), bo = dj_bf16_to_f32(B[k][2 * n + 1]);
                    e[0] = fmaf(ao, bo, fmaf(ae, be, e[0]));
                    e[1] = fmaf(ae, be, fmaf(ao, bo, e[1]));
                    e[2] = (float)((double)e[2] + ((double)ae * be + (double)ao * bo));
                    tile += (double)ae * be + (double)ao * bo;
                    if (k % 16 == 15) {
                        e[3] = (float)((double)e[3] + tile);
                        tile = 0;
                    }
                }
                total++;
                for (int h = 0; h < 4; h++) mism[h] += memcmp(&e[h], &C[m][n], 4) != 0;
            }
        /* 4. token m alone (a 1-row tile), and in row (m + 5) % 16 among other tokens */
        for (int m = 0; m < 16; m++) {
            memcpy(A1[0], A[m], sizeof A[0]);
            amx_run(1, A1, C1);
            inv += memcmp(C1[0], C[m], 64) != 0;
            for (int i = 0; i < 16; i++)
                for (int k = 0; k < 2 * NK; k++) A1[i][k] = dj_f32_to_bf16(rf());
            memcpy(A1[(m + 5) % 16], A[m], sizeof A[0]);
            amx_run(16, A1, C1);
            inv += memcmp(C1[(m + 5) % 16], C[m], 64) != 0;
            inv_total += 2;
        }
    }
    printf("3. TDPBF16PS outputs differing from: fma even-then-odd %ld, odd-then-even %ld, one rounding a pair %ld, "
           "one a 16-pair instruction %ld (of %ld)\n",
           mism[0], mism[1], mism[2], mism[3], total);
    printf("4. a token's 16 outputs differing between tile positions / a 1-row tile: %ld of %ld\n", inv, inv_total);
}

int main(void) {
    unsigned a, b, c, d;
    const int bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
    const int leaf7 = __get_cpuid_count(7, 0, &a, &b, &c, &d);
    const int amx = leaf7 && (d >> 22 & 1) && (d >> 24 & 1), avx2 = leaf7 && (b >> 5 & 1);
    if (avx2) probe_avx2_int8();
    else printf("0. no AVX2\n");
    if (bf16) probe_dpbf16();
    else printf("1. no AVX512_BF16\n");
    if (!amx || syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        printf("2-4. no AMX (CPU or Linux)\n");
        return 0;
    }
    probe_amx_speed();
    probe_amx_rounding();
    return 0;
}
