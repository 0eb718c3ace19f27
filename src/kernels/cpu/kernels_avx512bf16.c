/*
 * kernels_avx512bf16.c — the avx512bf16 table: the AVX-512 (VNNI) table, plus
 * BF16 weights multiplied by VDPBF16PS (AVX512_BF16: Cooper Lake, Sapphire
 * Rapids and later Xeons, Zen 4, Zen 5).
 *
 * In this table BF16 weights pair with BF16 activations (as ggml's CPU backend
 * pairs them: its vec_dot_type for BF16 is BF16): each activation row is rounded
 * to bf16 once (quantize_act[BF16], round to nearest even, bitwise
 * dj_f32_to_bf16 = ggml's GGML_FP32_TO_BF16: an integer rounding, so a subnormal
 * input is rounded, not flushed, and a NaN stays a quiet NaN), then
 *
 *     acc (16 lanes) = 0
 *     for each 32 elements e of k, in order (the tail masked: zeros):
 *         acc = vdpbf16ps(acc, w[e..e+32), a[e..e+32))
 *     result = hsum16(acc)                                  (the tree of kernels_avx512.c)
 *
 * vdpbf16ps adds, per lane j, the products of elements 2j+1 then 2j of the pair
 * (each product exact in f32, each add rounded to nearest even; inputs and
 * outputs that are subnormal are flushed to zero, whatever MXCSR says: Intel
 * SDM, VDPBF16PS).  So every (row, token) pair is one fixed chain of
 * instructions on its own two rows, whatever the tile, the batch or the row
 * split: batch-invariant, and dot is the 1x1 tile.  It is not the f32 path's
 * rounding (activations rounded to bf16, two products per lane and step):
 * results are reproducible per table, as for every table (kernels.h).
 *
 * Twice the multiply-adds per instruction of an f32 FMA and no bf16 -> f32
 * widening of the weights (two shuffles per 16 elements in the avx512 table):
 * bench_kernels numbers in docs/BENCHMARKS.md ("BF16 with AVX512_BF16").
 *
 * Tiles: 6 rows x 4 tokens (24 accumulators, 6 weight vectors, 1 token vector of
 * the 32 zmm registers); up to 2 tokens, 4-row tiles (cpu/tile.h).  Prefill with
 * k <= 4096 visits the tiles weight-stationary (a ~512 KiB block of weight rows
 * stays in L2 while every token tile passes over it), as the avx512 table's f16;
 * longer rows take k in chunks with the accumulators kept in scratch between
 * them (a store and reload of the same 16 floats: the chain is unchanged).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fp16.h"
#include "kernels/cpu/tile.h"

static inline float hsum16(__m512 v) { /* the same tree as kernels_avx512.c */
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 bf16 elements of a row from e; n = elements left (>= 32: a plain load). */
static inline __m512i load32_bf16(const uint8_t *row, int64_t e, int64_t n) {
    if (n >= 32) return _mm512_loadu_si512((const void *)((const uint16_t *)row + e));
    return _mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1), (const uint16_t *)row + e);
}

static inline __m512 dp(__m512 acc, __m512i w, __m512i a) {
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)a);
}

#define BF_STEP(n_)                                                                            \
    do {                                                                                       \
        __m512i wv[6];                                                                         \
        DJ_UNROLL for (int i = 0; i < MR; i++) wv[i] = load32_bf16(w + (size_t)i * ws, e, n_); \
        DJ_UNROLL for (int j = 0; j < NT; j++) {                                               \
            const __m512i av = load32_bf16(a + (size_t)j * as, e, n_);                         \
            DJ_UNROLL for (int i = 0; i < MR; i++) acc[i][j] = dp(acc[i][j], wv[i], av);       \
        }                                                                                      \
    } while (0)

static inline DJ_ALWAYS_INLINE void bf16x_body(const int MR, const int NT, int64_t k, const uint8_t *w, size_t ws,
                                               const uint8_t *a, size_t as, float *c, int64_t ldc) {
    __m512 acc[6][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t e = 0;
    for (; e + 32 <= k; e += 32) BF_STEP(32);
    if (e < k) BF_STEP(k - e); /* masked: zeros past the end */
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + i] = hsum16(acc[i][j]);
}
DJ_TILES_6x4(bf16x)

/* k in chunks [e, e1) (tile.h: dj_matmul_kblocked). */
static inline DJ_ALWAYS_INLINE void bf16x_kbody(const int MR, const int NT, int64_t e, int64_t e1, int64_t k,
                                                const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                                                void *accv, int first, float *c, int64_t ldc) {
    __m512 *accp = accv, acc[6][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&accp[i * 4 + j]);
    for (; e + 32 <= e1; e += 32) BF_STEP(32);
    if (e1 == k) {
        if (e < k) BF_STEP(k - e);
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            c[j * ldc + i] = hsum16(acc[i][j]);
    } else {
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            _mm512_store_ps((float *)&accp[i * 4 + j], acc[i][j]);
    }
}
DJ_KCHUNK_SHAPES(bf16x)

float dj_bf16x_dot(int64_t k, const void *w, const void *a) {
    float c;
    bf16x_1x1(k, w, 0, a, 0, &c, 1);
    return c;
}

void dj_bf16x_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                         int64_t r0, int64_t r1, int64_t n_tok) {
    const uint8_t *w = wv, *a = av;
    if (n_tok <= DJ_SMALL_BATCH) { /* decode: 4-row tiles stream the weights (tile.h) */
        dj_matmul_drive(bf16x_tile, 4, bf16x_NT, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    if (k > 4096) {
        dj_matmul_kblocked(bf16x_ktab, dj_bf16x_dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    dj_matmul_wstationary(bf16x_tile, bf16x_MR, bf16x_NT, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}

/* f32 -> bf16, round to nearest even with integer operations (dj_f32_to_bf16, bitwise):
 * (x + 0x7fff + bit 16 of x) >> 16; a NaN keeps its top bits and gets the quiet bit. */
static void quant_bf16(const float *x, void *yv, int64_t n) {
    uint16_t *y = yv;
    const __m512i lsb = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), abs = _mm512_set1_epi32(0x7fffffff),
                  inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(64);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
        const __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), lsb))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i v = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtepi32_epi16(v));
    }
}

bool dj_kernels_init_avx512bf16(struct dj_kernels *k) {
    k->name = "avx512-vnni-bf16";
    k->isa = DJ_ISA_AVX512BF16;
    k->w[DJ_TYPE_BF16].act_type = DJ_TYPE_BF16;
    k->w[DJ_TYPE_BF16].matmul = dj_bf16x_matmul;
    k->w[DJ_TYPE_BF16].dot = dj_bf16x_dot;
    k->quantize_act[DJ_TYPE_BF16] = quant_bf16;
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_avx512bf16(struct dj_kernels *k) { (void)k; return false; }
#endif
