/*
 * kernels_avx2.c — AVX2 + FMA + F16C kernels (x86-64-v3: Haswell, Zen 1+).
 *
 * Accumulation scheme, per (row, token) pair; tiles only share loads:
 *   - float types: one 8-lane accumulator, element i in lane i % 8,
 *     acc = fma(w, a, acc) over k in order, then the fixed tree of hsum8.
 *   - q8_0, q4_0 (x q8_0): one block of 32 per step: the exact int32 dot in
 *     8 lanes (maddubs + madd), converted to float and added with
 *     acc = fma(lanes, d_w * d_a, acc); hsum8 at the end.
 *   - q4_K, q6_K (x q8_K): the exact int32 dot of a whole super-block in 8
 *     lanes (sub-block scales applied in integers), then one (q4_K: two)
 *     fma per super-block into the float accumulator; hsum8 at the end.
 * Integer sums are exact and order-free; the float operations per pair are
 * the same whatever the tile shape, which is the batch-invariance contract.
 * Tiles (rows x tokens, 16 ymm registers): 4x2 for float, q8_0 and q4_0, 2x2
 * for the k-quants; up to 2 tokens, 1-row tiles (cpu/tile.h).
 *
 * maddubs (u8 x s8 -> s16, saturating) never saturates here: q8_0 weights
 * go in as |w| (<= 128) against sign(a, w) (|a| <= 127, so < 32767 per
 * pair); q4_0/q4_K nibbles are <= 15, q6_K values <= 63 (2*63*127 = 16002).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "core/fp16.h"
#include "core/status.h"
#include "kernels/cpu/tile.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16_to_f32(const uint8_t *p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(dj_load_u16(p))));
}

/* ---- float types: 8 elements per step, a zero-padded copy for the tail ------------- */

/* Loads 8 elements starting at element e of a row (bytes `esz` each), or the
 * n < 8 that remain followed by zeros. */
static inline __m128i load8x16(const uint8_t *row, int64_t e, int64_t n) {
    if (n >= 8) return _mm_loadu_si128((const __m128i *)(row + 2 * e));
    uint16_t tmp[8] = {0};
    memcpy(tmp, row + 2 * e, (size_t)n * 2);
    return _mm_loadu_si128((const __m128i *)tmp);
}

static inline __m256 load8_f32(const uint8_t *row, int64_t e, int64_t n) {
    if (n >= 8) return _mm256_loadu_ps((const float *)row + e);
    float tmp[8] = {0};
    memcpy(tmp, (const float *)row + e, (size_t)n * 4);
    return _mm256_loadu_ps(tmp);
}
static inline __m256 load8_f16(const uint8_t *row, int64_t e, int64_t n) {
    return _mm256_cvtph_ps(load8x16(row, e, n));
}
static inline __m256 load8_bf16(const uint8_t *row, int64_t e, int64_t n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8x16(row, e, n)), 16));
}

/* One step of 8 elements from e for an MR x NT tile; n = elements left (>= 8: plain loads). */
#define FLOAT_STEP(WLOAD, ALOAD, n_)                                                           \
    do {                                                                                       \
        __m256 wv[4];                                                                          \
        DJ_UNROLL for (int i = 0; i < MR; i++) wv[i] = WLOAD(w + (size_t)i * ws, e, n_);       \
        DJ_UNROLL for (int j = 0; j < NT; j++) {                                               \
            const __m256 av = ALOAD(a + (size_t)j * as, e, n_);                                \
            DJ_UNROLL for (int i = 0; i < MR; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], av, acc[i][j]); \
        }                                                                                      \
    } while (0)

#define DEF_FLOAT_BODY(name, WLOAD, ALOAD)                                                     \
    static inline DJ_ALWAYS_INLINE void name##_body(const int MR, const int NT, int64_t k,     \
                                                    const uint8_t *w, size_t ws,               \
                                                    const uint8_t *a, size_t as, float *c,     \
                                                    int64_t ldc) {                             \
        __m256 acc[4][4];                                                                      \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)          \
            acc[i][j] = _mm256_setzero_ps();                                                   \
        int64_t e = 0;                                                                         \
        for (; e + 8 <= k; e += 8) FLOAT_STEP(WLOAD, ALOAD, 8);                                \
        if (e < k) FLOAT_STEP(WLOAD, ALOAD, k - e); /* zero-padded copy of the tail */         \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)          \
            c[j * ldc + i] = hsum8(acc[i][j]);                                                 \
    }

DEF_FLOAT_BODY(f32, load8_f32, load8_f32)
DEF_FLOAT_BODY(f16, load8_f16, load8_f32)
DEF_FLOAT_BODY(bf16, load8_bf16, load8_f32)
DJ_TILES_4x2(f32)
DJ_TILES_4x2(f16)
DJ_TILES_4x2(bf16)
DJ_TILED_KERNEL(f32, 4)
DJ_TILED_KERNEL(f16, 4)
DJ_TILED_KERNEL(bf16, 4)

/* ---- q8_0 x q8_0 and q4_0 x q8_0 ------------------------------------------------------ */

/* 32 nibbles of a q4_0 block as bytes in element order (low nibbles, then high). */
static inline __m256i q4_0_unpack(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    const __m256i y = _mm256_insertf128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
    return _mm256_and_si256(y, _mm256_set1_epi8(0x0F));
}

static inline DJ_ALWAYS_INLINE void q8_0_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK8_0; ib++) {
        const size_t off = (size_t)ib * sizeof(struct dj_block_q8_0);
        __m256i wq[4], wabs[4];
        __m256 wd[4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            const uint8_t *p = w + (size_t)i * ws + off;
            wq[i] = _mm256_loadu_si256((const __m256i *)(p + 2));
            wabs[i] = _mm256_sign_epi8(wq[i], wq[i]);
            wd[i] = _mm256_set1_ps(f16_to_f32(p));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const uint8_t *q = a + (size_t)j * as + off;
            const __m256i aq = _mm256_loadu_si256((const __m256i *)(q + 2));
            const __m256 ad = _mm256_set1_ps(f16_to_f32(q));
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256i p16 = _mm256_maddubs_epi16(wabs[i], _mm256_sign_epi8(aq, wq[i]));
                const __m256 x = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][j] = _mm256_fmadd_ps(x, _mm256_mul_ps(wd[i], ad), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum8(acc[i][j]);
}

static inline DJ_ALWAYS_INLINE void q4_0_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m256i ones = _mm256_set1_epi16(1), eights = _mm256_set1_epi8(8);
    __m256 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK4_0; ib++) {
        __m256i wq[4];
        __m256 wd[4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            const uint8_t *p = w + (size_t)i * ws + (size_t)ib * sizeof(struct dj_block_q4_0);
            wq[i] = q4_0_unpack(p + 2);
            wd[i] = _mm256_set1_ps(f16_to_f32(p));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const uint8_t *q = a + (size_t)j * as + (size_t)ib * sizeof(struct dj_block_q8_0);
            const __m256i aq = _mm256_loadu_si256((const __m256i *)(q + 2));
            const __m256i corr = _mm256_maddubs_epi16(eights, aq); /* 8 * (a0 + a1) */
            const __m256 ad = _mm256_set1_ps(f16_to_f32(q));
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(wq[i], aq), corr);
                const __m256 x = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][j] = _mm256_fmadd_ps(x, _mm256_mul_ps(wd[i], ad), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum8(acc[i][j]);
}

DJ_TILES_4x2(q8_0)
DJ_TILES_4x2(q4_0)
DJ_TILED_KERNEL(q8_0, 1)
DJ_TILED_KERNEL(q4_0, 1)

/* ---- q4_K x q8_K ---------------------------------------------------------------------- */

static inline DJ_ALWAYS_INLINE void q4_K_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q4_K *wb[4];
        const struct dj_block_q8_K *ab[4];
        __m256i scb[4], mins[4], isum[4][4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            wb[i] = (const struct dj_block_q4_K *)(w + (size_t)i * ws) + ib;
            uint64_t sc, m;
            dj_q4_K_unpack_scales(wb[i]->scales, &sc, &m);
            /* scales as words in both 128-bit lanes; mins as [m0 m0 m1 m1 .. m7 m7] */
            const __m128i scw = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)sc));
            scb[i] = _mm256_broadcastsi128_si256(scw);
            const __m128i mw = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)m));
            mins[i] = _mm256_set_m128i(_mm_unpackhi_epi16(mw, mw), _mm_unpacklo_epi16(mw, mw));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ab[j] = (const struct dj_block_q8_K *)(a + (size_t)j * as) + ib;
            DJ_UNROLL for (int i = 0; i < MR; i++) isum[i][j] = _mm256_setzero_si256();
        }
        DJ_UNROLL for (int ch = 0; ch < 4; ch++) { /* 64 elements: sub-blocks 2ch, 2ch+1 */
            __m256i lo[4], hi[4], slo[4], shi[4];
            const __m256i bidx_lo = _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * ch)));
            const __m256i bidx_hi = _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * ch + 1)));
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(wb[i]->qs + 32 * ch));
                lo[i] = _mm256_and_si256(q, m4);
                hi[i] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                slo[i] = _mm256_shuffle_epi8(scb[i], bidx_lo); /* word sc_{2ch} everywhere */
                shi[i] = _mm256_shuffle_epi8(scb[i], bidx_hi);
            }
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const __m256i alo = _mm256_loadu_si256((const __m256i *)(ab[j]->qs + 64 * ch));
                const __m256i ahi = _mm256_loadu_si256((const __m256i *)(ab[j]->qs + 64 * ch + 32));
                DJ_UNROLL for (int i = 0; i < MR; i++) {
                    const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[i], alo), slo[i]);
                    const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[i], ahi), shi[i]);
                    isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_add_epi32(plo, phi));
                }
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)ab[j]->bsums);
            const __m256 d8 = _mm256_set1_ps(ab[j]->d);
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256 d = _mm256_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->d));
                const __m256 dmin = _mm256_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->dmin));
                const __m256i imin = _mm256_madd_epi16(bs, mins[i]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]), _mm256_mul_ps(d, d8), acc[i][j]);
                acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, d8), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum8(acc[i][j]);
}

/* ---- q6_K x q8_K ---------------------------------------------------------------------- */

static inline DJ_ALWAYS_INLINE void q6_K_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q6_K *wb[4];
        const struct dj_block_q8_K *ab[4];
        __m256i scb[4], isum[4][4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            wb[i] = (const struct dj_block_q6_K *)(w + (size_t)i * ws) + ib;
            scb[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wb[i]->scales));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ab[j] = (const struct dj_block_q8_K *)(a + (size_t)j * as) + ib;
            DJ_UNROLL for (int i = 0; i < MR; i++) isum[i][j] = _mm256_setzero_si256();
        }
        DJ_UNROLL for (int h = 0; h < 2; h++) {
            DJ_UNROLL for (int part = 0; part < 4; part++) { /* 32 elements: sub-blocks 8h+2part, +1 */
                /* scale words: the int8 scale in the high byte, then >> 8 (sign-extends) */
                const int s0 = 8 * h + 2 * part;
                const __m256i sidx = _mm256_set_epi8(
                    (char)(s0 + 1), -1, (char)(s0 + 1), -1, (char)(s0 + 1), -1, (char)(s0 + 1), -1,
                    (char)(s0 + 1), -1, (char)(s0 + 1), -1, (char)(s0 + 1), -1, (char)(s0 + 1), -1,
                    (char)s0, -1, (char)s0, -1, (char)s0, -1, (char)s0, -1,
                    (char)s0, -1, (char)s0, -1, (char)s0, -1, (char)s0, -1);
                __m256i q[4], sc[4];
                DJ_UNROLL for (int i = 0; i < MR; i++) {
                    const __m256i ql = _mm256_loadu_si256((const __m256i *)(wb[i]->ql + 64 * h + 32 * (part & 1)));
                    const __m256i qh = _mm256_loadu_si256((const __m256i *)(wb[i]->qh + 32 * h));
                    const __m256i lo = part < 2 ? _mm256_and_si256(ql, m4)
                                                : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
                    /* bits 2part, 2part+1 of qh moved to bits 4, 5 */
                    const __m256i hb = part == 0 ? _mm256_slli_epi16(qh, 4)
                                     : part == 1 ? _mm256_slli_epi16(qh, 2)
                                     : part == 2 ? qh
                                                 : _mm256_srli_epi16(qh, 2);
                    q[i] = _mm256_or_si256(lo, _mm256_and_si256(hb, m30));
                    sc[i] = _mm256_srai_epi16(_mm256_shuffle_epi8(scb[i], sidx), 8);
                }
                DJ_UNROLL for (int j = 0; j < NT; j++) {
                    const __m256i av = _mm256_loadu_si256((const __m256i *)(ab[j]->qs + 128 * h + 32 * part));
                    DJ_UNROLL for (int i = 0; i < MR; i++) {
                        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], av), sc[i]);
                        isum[i][j] = _mm256_add_epi32(isum[i][j], p);
                    }
                }
            }
        }
        /* the -32 offset of every value: -32 * sum_s sc_s * bsum_s */
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)ab[j]->bsums);
            const __m256 d8 = _mm256_set1_ps(ab[j]->d);
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256i scw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb[i]->scales));
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, scw), 5);
                const __m256 d = _mm256_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->d));
                const __m256i tot = _mm256_sub_epi32(isum[i][j], corr);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, d8), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum8(acc[i][j]);
}

DJ_TILES_2x2(q4_K)
DJ_TILES_2x2(q6_K)
DJ_TILED_KERNEL(q4_K, 1)
DJ_TILED_KERNEL(q6_K, 1)

/* ---- activation quantizers (bitwise equal to the reference: see ref.h) ---------------- */

static void quant_f16(const float *x, void *yv, int64_t n) {
    uint16_t *y = yv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = dj_f32_to_fp16(x[i]);
}

/* 32 int32 in four vectors -> 32 int8 in order (values already in int8 range). */
static inline __m256i pack32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static void quant_q8_0(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_0 *y = yv;
    DJ_ASSERT(n % DJ_QK8_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++, x += DJ_QK8_0) {
        __m256 v[4];
        for (int g = 0; g < 4; g++) v[g] = _mm256_loadu_ps(x + 8 * g);
        const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])),
                                               _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        y[ib].d = dj_f32_to_fp16(amax / 127.f);
        __m256i q[4];
        for (int g = 0; g < 4; g++) q[g] = _mm256_cvtps_epi32(_mm256_mul_ps(v[g], id)); /* half-even */
        _mm256_storeu_si256((__m256i *)y[ib].qs, pack32(q[0], q[1], q[2], q[3]));
    }
}

static void quant_q8_K(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_K *y = yv;
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q8_K *b = &y[ib];
        __m256 mx = _mm256_setzero_ps();
        for (int g = 0; g < 32; g++) mx = _mm256_max_ps(mx, abs8(_mm256_loadu_ps(x + 8 * g)));
        const float amax = hmax8(mx);
        if (amax == 0) {
            memset(b, 0, sizeof *b);
            continue;
        }
        /* the first element of largest magnitude decides the sign of the scale */
        float max = 0;
        const __m256 vamax = _mm256_set1_ps(amax);
        for (int g = 0; g < 32; g++) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs8(_mm256_loadu_ps(x + 8 * g)), vamax, _CMP_EQ_OQ));
            if (m) {
                max = x[8 * g + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int g = 0; g < 8; g++) {
            __m256i q[4];
            for (int u = 0; u < 4; u++)
                q[u] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * u), vs)), lim);
            _mm256_storeu_si256((__m256i *)(b->qs + 32 * g), pack32(q[0], q[1], q[2], q[3]));
        }
        for (int g = 0; g < DJ_QK_K / 16; g++) {
            const __m256i w16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16 * g)));
            const __m256i s32 = _mm256_madd_epi16(w16, _mm256_set1_epi16(1));
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
            b->bsums[g] = (int16_t)_mm_cvtsi128_si32(s);
        }
        b->d = 1 / iscale;
    }
}

/* ---- dequantizers (bitwise equal to the reference formulas) --------------------------- */

static void dequant_f16(const void *xv, float *y, int64_t n) {
    const uint16_t *x = xv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = dj_fp16_to_f32(x[i]);
}

static void dequant_q8_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q8_0 *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++, y += DJ_QK8_0) {
        const __m256 d = _mm256_set1_ps(f16_to_f32((const uint8_t *)&x[ib].d));
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[ib].qs + 8 * g)));
            _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

static void dequant_q4_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q4_0 *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++, y += DJ_QK4_0) {
        const __m256 d = _mm256_set1_ps(f16_to_f32((const uint8_t *)&x[ib].d));
        const __m256i q = _mm256_sub_epi8(q4_0_unpack(x[ib].qs), _mm256_set1_epi8(8));
        for (int g = 0; g < 4; g++) {
            const __m256i q32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)&q + 8 * g)));
            _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(q32), d));
        }
    }
}

/* ---- attention: 8 lanes, element i in lane i % 8, a masked tail ---------------------- */

static inline __m256i tail_mask8(int64_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void attn_scores_avx2(int64_t hd, const float *q, const float *k, size_t stride, int64_t n, float scale,
                             float *s) {
    const int64_t full = hd & ~(int64_t)7;
    const __m256i m = tail_mask8(hd - full);
    for (int64_t p = 0; p < n; p++, k += stride) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < full; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
        if (full < hd)
            acc = _mm256_fmadd_ps(_mm256_maskload_ps(q + full, m), _mm256_maskload_ps(k + full, m), acc);
        s[p] = hsum8(acc) * scale;
    }
}

static void attn_values_avx2(int64_t hd, const float *w, const float *v, size_t stride, int64_t n, float *out,
                             bool accumulate) {
    for (int64_t d = 0; d < hd; d += 8) {
        const __m256i m = tail_mask8(hd - d);
        __m256 acc = accumulate ? _mm256_maskload_ps(out + d, m) : _mm256_setzero_ps();
        const float *vp = v + d;
        for (int64_t p = 0; p < n; p++, vp += stride)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w[p]), _mm256_maskload_ps(vp, m), acc);
        _mm256_maskstore_ps(out + d, m, acc);
    }
}

static void attn_values_avx2_n(int64_t hd, int nr, const float *const *w, const float *v, size_t stride, int64_t n,
                               float *const *out, bool acc) {
    for (int r = 0; r < nr; r++) attn_values_avx2(hd, w[r], v, stride, n, out[r], acc);
}

bool dj_kernels_init_avx2(struct dj_kernels *k) {
    k->name = "avx2";
    k->isa = DJ_ISA_AVX2;
    DJ_KERNELS_SET_MATMUL_DOT(k);
    k->w[DJ_TYPE_F16].dequantize_row = dequant_f16;
    k->w[DJ_TYPE_Q8_0].dequantize_row = dequant_q8_0;
    k->w[DJ_TYPE_Q4_0].dequantize_row = dequant_q4_0;
    k->quantize_act[DJ_TYPE_F16] = quant_f16;
    k->quantize_act[DJ_TYPE_Q8_0] = quant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_K] = quant_q8_K;
    k->attn_scores = attn_scores_avx2;
    k->attn_values = attn_values_avx2;
    k->attn_values_n = attn_values_avx2_n;
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_avx2(struct dj_kernels *k) { (void)k; return false; }
#endif
