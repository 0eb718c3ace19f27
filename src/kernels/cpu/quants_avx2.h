/*
 * quants_avx2.h — what quants_avx2.c (the 256-element super-block types) and
 * quants32_avx2.c (the 32-element block types) share: small AVX2 helpers and the
 * 32-block family's registration.  Include only from *_avx2.c files (compiled with
 * -mavx2 -mfma -mf16c -mbmi2, see CMakeLists.txt).
 */
#ifndef DJ_KERNELS_CPU_QUANTS_AVX2_H
#define DJ_KERNELS_CPU_QUANTS_AVX2_H

#include <immintrin.h>
#include <stddef.h>

#include "core/fp16.h"
#include "core/status.h"
#include "kernels/cpu/tile.h"
#include "kernels/quant_tables.h"

/* quants32_avx2.c: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (called by dj_kernels_init_avx2_quants) */
void dj_kernels_init_avx2_quants32(struct dj_kernels *k);

/* dj_q_hsum8's tree, ((0+4)+(2+6))+((1+5)+(3+7)), lane for lane over the 8 vectors p[0],
 * p[s], .., p[7 s] of 16 floats (the AMX kernels' chains; a macro: it is expanded only
 * inside their AVX-512 target pragma). */
#define DJ_Q_HSUM8_512(p, s)                                                                          \
    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps((p)[0], (p)[4 * (s)]), _mm512_add_ps((p)[2 * (s)], (p)[6 * (s)])), \
                  _mm512_add_ps(_mm512_add_ps((p)[(s)], (p)[5 * (s)]), _mm512_add_ps((p)[3 * (s)], (p)[7 * (s)])))

static inline float dj_q_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t dj_q_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The totals of 8 vectors, total of v[p] in lane p: a transpose tree of 21 single-uop
 * operations (6 per vector with a horizontal sum each).  Exact integers: the order of
 * the additions does not matter. */
static inline __m256i dj_q_tree8(const __m256i v[8]) {
    __m256i t[4], u[2];
    DJ_UNROLL for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    DJ_UNROLL for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20), _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

static inline float dj_q_f16(const void *p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(dj_load_u16(p)))); }
static inline float dj_q_load_f32(const void *p) { float f; memcpy(&f, p, 4); return f; }

/* byte i = 0xff where bit i of x is set */
static inline __m256i dj_q_bits32_mask(uint32_t x) {
    const __m256i sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)x), sh), bit), bit);
}

/* The 32 nibbles of 16 bytes as bytes in element order (low nibbles, then high) */
static inline __m256i dj_q_nib32(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
}
/* ... through a 16-entry byte table (in both lanes of lut) */
static inline __m256i dj_q_nib_lut(const uint8_t *qs, __m256i lut) { return _mm256_shuffle_epi8(lut, dj_q_nib32(qs)); }
static inline __m256i dj_q_lut16(const int8_t *t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

#endif
