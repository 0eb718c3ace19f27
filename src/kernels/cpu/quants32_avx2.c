/*
 * quants32_avx2.c — AVX2 kernels of the weight types with 32-element blocks and q8_0
 * activations: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (registered through quants_avx2.c).
 *
 * Per (row, token) pair 8 float chains, block b feeding chain b % 8 in order of b:
 *
 *     acc[b % 8]  = fma(float(T_b), d_w * d_a, acc[b % 8])   T_b: the block's exact integer dot
 *     accm[b % 8] = fma(m_w, d_a * sum(a), accm[b % 8])      (Q4_1, Q5_1, whose x = d q + m)
 *
 * and the result hsum8(acc) + hsum8(accm) (hsum8: ((0+4)+(2+6))+((1+5)+(3+7)), the
 * lanes' fixed tree).  Eight chains rather than one: a single chain was latency-bound in
 * decode (a dependent fma a block, two with a min, was the slowest part of a row).
 * Every path computes T_b its own way and then runs exactly these operations, which is
 * the batch-invariance contract:
 *
 *   - one row at a time (the dot; decode, up to KT_SMALL tokens; any batch without
 *     scratch): each block decoded to 32 bytes in element order, maddubs against the
 *     activations (the signed levels of Q5_0, IQ4_NL, MXFP4 by the sign trick), the
 *     totals of 8 blocks at once by dj_q_tree8 (lane k: block b0 + k), then one vector
 *     fma a group of 8 blocks: the 8 chains in the 8 lanes;
 *   - prefill: 8 rows decoded once per token chunk into a rows-in-lanes buffer
 *     (struct k32_lanes: vector v of a block holds in lane i row i's elements
 *     4v .. 4v+3, as u = level + OFF >= 0; IQ4_NL's levels stay signed), one
 *     activation dword broadcast to all 8 rows, WSUM maddubs summed as words before
 *     one madd (no saturation: WSUM * 2 * umax * 127 <= 32767), the offset taken off
 *     as OFF * sum(a): T_b of 8 rows in 8 lanes, and row i's chain b % 8 in lane i of
 *     the b % 8-th accumulator vector of its token.
 *     Float work and activation loads are shared by 8 rows, the way deja's q4_0
 *     kernel does it (kernels_avx2.c), where the row-at-a-time form pays a float
 *     multiply-add per block and pair.
 */
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/quants_avx2.h"

/* A block decoded: the 32 levels as bytes in element order, d, m. */
struct kt_b32 {
    __m256i q;
    float d, m;
    uint8_t pad_[24];
};

/* Q4_1: u = nibble (0..15), x = d u + m.  Q5_1: u = nibble | 5th bit << 4 (0..31). */
static inline DJ_ALWAYS_INLINE void q4_1_dec(const uint8_t *p, struct kt_b32 *o) {
    const struct dj_block_q4_1 *x = (const void *)p;
    o->q = dj_q_nib32(x->qs);
    o->d = dj_q_f16(&x->d);
    o->m = dj_q_f16(&x->m);
}
static inline __m256i fifth_bit(const uint8_t *qh) { /* bit i of the 32 -> bit 4 of byte i */
    return _mm256_and_si256(dj_q_bits32_mask(dj_load_u32(qh)), _mm256_set1_epi8(0x10));
}
static inline DJ_ALWAYS_INLINE void q5_1_dec(const uint8_t *p, struct kt_b32 *o) {
    const struct dj_block_q5_1 *x = (const void *)p;
    o->q = _mm256_or_si256(dj_q_nib32(x->qs), fifth_bit(x->qh));
    o->d = dj_q_f16(&x->d);
    o->m = dj_q_f16(&x->m);
}
/* Q5_0: level (nibble | 5th bit << 4) - 16, signed */
static inline DJ_ALWAYS_INLINE void q5_0_dec(const uint8_t *p, struct kt_b32 *o) {
    const struct dj_block_q5_0 *x = (const void *)p;
    o->q = _mm256_sub_epi8(_mm256_or_si256(dj_q_nib32(x->qs), fifth_bit(x->qh)), _mm256_set1_epi8(16));
    o->d = dj_q_f16(&x->d);
    o->m = 0;
}
/* IQ4_NL: kvalues_iq4nl[nibble]; MXFP4: kvalues_fp4[nibble] (the e2m1 values doubled), d
 * the E8M0 scale halved (ggml's GGML_E8M0_TO_FP32_HALF) */
static inline DJ_ALWAYS_INLINE void iq4_nl_dec(const uint8_t *p, struct kt_b32 *o) {
    const struct dj_block_iq4_nl *x = (const void *)p;
    o->q = dj_q_nib_lut(x->qs, dj_q_lut16(dj_kvalues_iq4nl));
    o->d = dj_q_f16(&x->d);
    o->m = 0;
}
static inline DJ_ALWAYS_INLINE void mxfp4_dec(const uint8_t *p, struct kt_b32 *o) {
    const struct dj_block_mxfp4 *x = (const void *)p;
    o->q = dj_q_nib_lut(x->qs, dj_q_lut16(dj_kvalues_fp4));
    o->d = dj_e8m0_to_f32_half(x->e);
    o->m = 0;
}

/* The f16 at p + i * bs (i < n8; 0 past n8) as 8 floats, converted at once */
static inline __m256 f16x8(const uint8_t *p, size_t bs, int n8) {
    if (n8 == 8) /* (a set of constants: -O1, the sanitizer build, unrolls no loop into an insert's immediate) */
        return _mm256_cvtph_ps(_mm_setr_epi16((short)dj_load_u16(p), (short)dj_load_u16(p + bs),
                                              (short)dj_load_u16(p + 2 * bs), (short)dj_load_u16(p + 3 * bs),
                                              (short)dj_load_u16(p + 4 * bs), (short)dj_load_u16(p + 5 * bs),
                                              (short)dj_load_u16(p + 6 * bs), (short)dj_load_u16(p + 7 * bs)));
    uint16_t t[8] = {0};
    for (int i = 0; i < n8; i++) t[i] = dj_load_u16(p + (size_t)i * bs);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

/* The row path's pieces: a block's levels (T_q), and the d and m of n8 consecutive blocks
 * as 8 lanes (T_dm8; lanes past n8 zero). */
static inline __m256i q4_1_q(const uint8_t *p) { return dj_q_nib32(((const struct dj_block_q4_1 *)(const void *)p)->qs); }
static inline __m256i q5_1_q(const uint8_t *p) {
    const struct dj_block_q5_1 *x = (const void *)p;
    return _mm256_or_si256(dj_q_nib32(x->qs), fifth_bit(x->qh));
}
static inline __m256i q5_0_q(const uint8_t *p) {
    const struct dj_block_q5_0 *x = (const void *)p;
    return _mm256_sub_epi8(_mm256_or_si256(dj_q_nib32(x->qs), fifth_bit(x->qh)), _mm256_set1_epi8(16));
}
static inline __m256i iq4_nl_q(const uint8_t *p) {
    return dj_q_nib_lut(((const struct dj_block_iq4_nl *)(const void *)p)->qs, dj_q_lut16(dj_kvalues_iq4nl));
}
static inline __m256i mxfp4_q(const uint8_t *p) {
    return dj_q_nib_lut(((const struct dj_block_mxfp4 *)(const void *)p)->qs, dj_q_lut16(dj_kvalues_fp4));
}
static inline void q4_1_dm8(const uint8_t *p, int n8, __m256 *d, __m256 *m) {
    *d = f16x8(p, sizeof(struct dj_block_q4_1), n8);
    *m = f16x8(p + 2, sizeof(struct dj_block_q4_1), n8);
}
static inline void q5_1_dm8(const uint8_t *p, int n8, __m256 *d, __m256 *m) {
    *d = f16x8(p, sizeof(struct dj_block_q5_1), n8);
    *m = f16x8(p + 2, sizeof(struct dj_block_q5_1), n8);
}
static inline void q5_0_dm8(const uint8_t *p, int n8, __m256 *d, __m256 *m) {
    *d = f16x8(p, sizeof(struct dj_block_q5_0), n8);
    *m = _mm256_setzero_ps();
}
static inline void iq4_nl_dm8(const uint8_t *p, int n8, __m256 *d, __m256 *m) {
    *d = f16x8(p, sizeof(struct dj_block_iq4_nl), n8);
    *m = _mm256_setzero_ps();
}
static inline void mxfp4_dm8(const uint8_t *p, int n8, __m256 *d, __m256 *m) {
    _Alignas(32) float t[8] = {0};
    for (int i = 0; i < n8; i++) t[i] = dj_e8m0_to_f32_half(p[(size_t)i * sizeof(struct dj_block_mxfp4)]);
    *d = _mm256_load_ps(t);
    *m = _mm256_setzero_ps();
}

/* ---- the activations' blocks, prepared once per call ------------------------------- */

/* The q8_0 tokens' blocks, prepared once per call: d[t * nb + b] = d_a, dsa = d_a * sum(a),
 * sa = sum(a) (structure of arrays: the row path loads 8 consecutive blocks' d_a at once). */
struct k32_tp {
    float *d, *dsa;
    int32_t *sa;
};
static inline void k32_prep1(const uint8_t *ab, float *d, float *dsa, int32_t *sa) {
    /* the sum of the 32 signed bytes: sad of (a ^ 0x80) against 0, minus 32 * 128 */
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ab + 2)),
                                                       _mm256_set1_epi8((char)0x80)),
                                      _mm256_setzero_si256());
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    *sa = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
    *d = dj_q_f16(ab);
    *dsa = *d * (float)*sa;
}
/* tokens [0, n_tok) of a (as apart), nb blocks each */
static void k32_prep(const uint8_t *a, size_t as, int64_t n_tok, int64_t nb, struct k32_tp tp) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const size_t i = (size_t)(t * nb + b);
            k32_prep1(a + (size_t)t * as + (size_t)b * sizeof(struct dj_block_q8_0), tp.d + i, tp.dsa + i, tp.sa + i);
        }
}

/* ---- one row at a time ---------------------------------------------------------------- */

/* Blocks b0 .. b0+n8-1 of one row (levels q[k], scales dw, mins mw: 8 lanes, zero past n8)
 * against NT tokens (block b0 at a + j * as; prepared in tp at j * nb + b0 + k, or tp.d
 * NULL: prepared here, the same bits): T_b of 8 blocks at once, then the 8 chains of each
 * token in the 8 lanes of acc[j] (accm[j]).  Past n8 the lanes get fma(0, 0, acc) = acc
 * (a chain is never -0: it starts at +0 and an exact zero sum rounds to +0). */
static inline DJ_ALWAYS_INLINE void k32_row8(const int NT, const int SG, const int MN, const __m256i q[8], __m256 dw,
                                             __m256 mw, int n8, const uint8_t *a, size_t as, struct k32_tp tp,
                                             int64_t b0, int64_t nb, __m256 *acc, __m256 *accm) {
    const __m256i ones = _mm256_set1_epi16(1);
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        const uint8_t *aj = a + (size_t)j * as;
        __m256i p[8];
        DJ_UNROLL for (int k = 0; k < 8; k++) {
            if (k < n8) {
                __m256i av = _mm256_loadu_si256((const __m256i *)(aj + (size_t)k * sizeof(struct dj_block_q8_0) + 2));
                if (SG) av = _mm256_sign_epi8(av, q[k]);
                p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(SG ? _mm256_sign_epi8(q[k], q[k]) : q[k], av), ones);
            } else {
                p[k] = _mm256_setzero_si256();
            }
        }
        __m256 da8, dsa8 = _mm256_setzero_ps();
        if (tp.d && n8 == 8) {
            const size_t i0 = (size_t)(j * nb + b0);
            da8 = _mm256_loadu_ps(tp.d + i0);
            if (MN) dsa8 = _mm256_loadu_ps(tp.dsa + i0);
        } else {
            _Alignas(32) float d_[8] = {0}, s_[8] = {0};
            int32_t sa_;
            for (int k = 0; k < n8; k++) {
                const size_t i = (size_t)(j * nb + b0 + k);
                if (tp.d) {
                    d_[k] = tp.d[i];
                    s_[k] = tp.dsa[i];
                } else {
                    k32_prep1(aj + (size_t)k * sizeof(struct dj_block_q8_0), &d_[k], &s_[k], &sa_);
                }
            }
            da8 = _mm256_load_ps(d_);
            dsa8 = _mm256_load_ps(s_);
        }
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dj_q_tree8(p)), _mm256_mul_ps(dw, da8), acc[j]);
        if (MN) accm[j] = _mm256_fmadd_ps(mw, dsa8, accm[j]);
    }
}

/* ---- prefill: 8 rows in the 8 lanes ------------------------------------------------- */

struct k32_lanes {
    __m256i u[8]; /* vector v: lane i = row i's levels of elements 4v .. 4v+3 (+ OFF) */
    __m256 d, m;  /* lane i: row i's d and m */
};

/* rows r[i] (8 vectors of 8 dwords) -> u[v] lane i = dword v of r[i] */
static inline void transpose8x8(const __m256i r[8], __m256i u[8]) {
    __m256i t[8], s[8];
    DJ_UNROLL for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    DJ_UNROLL for (int h = 0; h < 2; h++) { /* rows 0-3, 4-7 */
        s[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        s[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        s[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        s[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        u[v] = _mm256_permute2x128_si256(s[v], s[4 + v], 0x20);
        u[4 + v] = _mm256_permute2x128_si256(s[v], s[4 + v], 0x31);
    }
}

/* dj_q_hsum8's tree over 8 vectors, lane for lane: ((0+4)+(2+6))+((1+5)+(3+7)) */
static inline __m256 lanes_hsum8(const __m256 x[8]) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x[0], x[4]), _mm256_add_ps(x[2], x[6])),
                         _mm256_add_ps(_mm256_add_ps(x[1], x[5]), _mm256_add_ps(x[3], x[7])));
}

/* One block g (8 rows in the lanes form) against NT tokens (its activations at ab + j * as,
 * prepared at tp index j * tps + b): T_b of the 8 rows in 8 lanes, then
 * ac[j] = fma(float(T_b), d_w * d_a, ac[j]) (and am[j] = fma(m_w, d_a * sum(a), am[j])).
 * Every lanes path runs its blocks through this, so they all do the same operations. */
static inline DJ_ALWAYS_INLINE void k32_block(const int NT, const int SG, const int OFF, const int MN, const int WSUM,
                                              const struct k32_lanes *g, const uint8_t *ab, size_t as,
                                              struct k32_tp tp, int64_t tps, int64_t b, __m256 *ac, __m256 *am) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i is[4], w16[4];
    DJ_UNROLL for (int j = 0; j < NT; j++) is[j] = w16[j] = _mm256_setzero_si256();
#define K32_STEP(v)                                                                                                  \
    do {                                                                                                             \
        const __m256i u = g->u[v], ua = SG ? _mm256_sign_epi8(u, u) : u;                                            \
        DJ_UNROLL for (int j = 0; j < NT; j++) {                                                                     \
            const __m256i av = _mm256_set1_epi32((int)dj_load_u32(ab + (size_t)j * as + 4 * (size_t)(v)));          \
            if (SG)                                                                                                  \
                is[j] = _mm256_add_epi32(is[j], _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(av, u)), \
                                                                  ones));                                            \
            else                                                                                                     \
                w16[j] = _mm256_add_epi16(w16[j], _mm256_maddubs_epi16(u, av));                                      \
        }                                                                                                            \
        if (!SG && (v) % WSUM == WSUM - 1)                                                                           \
            DJ_UNROLL for (int j = 0; j < NT; j++) {                                                                 \
                is[j] = _mm256_add_epi32(is[j], _mm256_madd_epi16(w16[j], ones));                                    \
                w16[j] = _mm256_setzero_si256();                                                                     \
            }                                                                                                        \
    } while (0)
    DJ_UNROLL for (int v = 0; v < 8; v++) K32_STEP(v);
#undef K32_STEP
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        const size_t i = (size_t)j * (size_t)tps + (size_t)b;
        __m256i t = is[j];
        if (OFF) t = _mm256_sub_epi32(t, _mm256_set1_epi32(OFF * tp.sa[i]));
        ac[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(g->d, _mm256_broadcast_ss(tp.d + i)), ac[j]);
        if (MN) am[j] = _mm256_fmadd_ps(g->m, _mm256_broadcast_ss(tp.dsa + i), am[j]);
    }
}

/* Blocks [0, nb) of 8 rows (block 0 of row i at src[i]) against NT tokens: the chains of
 * the 8 rows in 8 lanes, stored to c + j * ldc in the lanes of mask. */
static inline DJ_ALWAYS_INLINE void k32_lanes_body(const int NT, const int SG, const int OFF, const int MN,
                                                   const int WSUM, const struct k32_lanes *G, int64_t nb,
                                                   const uint8_t *a, size_t as, struct k32_tp tp, int64_t tps,
                                                   float *c, int64_t ldc, __m256i mask) {
    __m256 acc[4][8], accm[4][8]; /* token j's chain k of row i in lane i of acc[j][k] */
    /* chain by chain (blocks k, k + 8, ...): a token's accumulator stays in a register */
    for (int k = 0; k < 8; k++) {
        __m256 ac[4], am[4];
        DJ_UNROLL for (int j = 0; j < NT; j++) ac[j] = am[j] = _mm256_setzero_ps();
        for (int64_t b = k; b < nb; b += 8)
            k32_block(NT, SG, OFF, MN, WSUM, G + b, a + (size_t)b * sizeof(struct dj_block_q8_0) + 2, as, tp, tps, b,
                      ac, am);
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            acc[j][k] = ac[j];
            accm[j][k] = am[j];
        }
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        __m256 r = lanes_hsum8(acc[j]);
        if (MN) r = _mm256_add_ps(r, lanes_hsum8(accm[j]));
        _mm256_maskstore_ps(c + j * ldc, mask, r);
    }
}

/* lanes [0, n) of 8, as a maskstore mask */
static inline __m256i lanes_to(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define K32_NT 4    /* tokens a prefill tile */
#define K32_SMALL 4 /* up to this many tokens: a row at a time */
#define K32_P1_MAX 2 /* packed: up to this many tokens, each group a token at a time */

typedef void (*k32_tile_fn)(const struct k32_lanes *G, int64_t nb, const uint8_t *a, size_t as, struct k32_tp tp,
                            int64_t tps, float *c, int64_t ldc, const __m256i *mask);

/* Type T (struct dj_block_T, decoder T_dec): SG, OFF, MN, WSUM as above (SG for the row
 * path: the level bytes are signed; the lanes path takes Q5_0 and MXFP4 as u = level + OFF). */
#define K32_TYPE(T, SG, OFF, MN, WSUM)                                                                             \
    static inline DJ_ALWAYS_INLINE void T##_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws,           \
                                                 const uint8_t *a, size_t as, struct k32_tp tp, float *c,          \
                                                 int64_t ldc, int64_t r0, int64_t r1) {                            \
        const size_t bs = sizeof(struct dj_block_##T), abs_ = sizeof(struct dj_block_q8_0);                       \
        for (int64_t r = r0; r < r1; r++) {                                                                        \
            __m256 acc[4], accm[4];                                                                                \
            DJ_UNROLL for (int j = 0; j < NT; j++) acc[j] = accm[j] = _mm256_setzero_ps();                         \
            const uint8_t *wr = w + (size_t)r * ws;                                                                \
            for (int64_t b0 = 0; b0 < nb; b0 += 8) {                                                               \
                const int n8 = nb - b0 < 8 ? (int)(nb - b0) : 8;                                                   \
                const uint8_t *wb = wr + (size_t)b0 * bs;                                                          \
                __m256i q[8];                                                                                      \
                __m256 dw, mw;                                                                                     \
                if (n8 == 8) {                                                                                     \
                    DJ_UNROLL for (int i = 0; i < 8; i++) q[i] = T##_q(wb + (size_t)i * bs);                       \
                    T##_dm8(wb, 8, &dw, &mw);                                                                      \
                    k32_row8(NT, SG, MN, q, dw, mw, 8, a + (size_t)b0 * abs_, as, tp, b0, nb, acc, accm);          \
                } else {                                                                                           \
                    for (int i = 0; i < n8; i++) q[i] = T##_q(wb + (size_t)i * bs);                                \
                    T##_dm8(wb, n8, &dw, &mw);                                                                     \
                    k32_row8(NT, SG, MN, q, dw, mw, n8, a + (size_t)b0 * abs_, as, tp, b0, nb, acc, accm);         \
                }                                                                                                  \
            }                                                                                                      \
            DJ_UNROLL for (int j = 0; j < NT; j++)                                                                 \
                c[j * ldc + r] = MN ? dj_q_hsum8(acc[j]) + dj_q_hsum8(accm[j]) : dj_q_hsum8(acc[j]);               \
        }                                                                                                          \
    }                                                                                                              \
    static void T##_rows1(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,                    \
                          struct k32_tp tp, float *c, int64_t ldc, int64_t r0, int64_t r1) {                       \
        T##_rows(1, nb, w, ws, a, as, tp, c, ldc, r0, r1);                                                         \
    }                                                                                                              \
    static void T##_rows2(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,                    \
                          struct k32_tp tp, float *c, int64_t ldc, int64_t r0, int64_t r1) {                       \
        T##_rows(2, nb, w, ws, a, as, tp, c, ldc, r0, r1);                                                         \
    }                                                                                                              \
    static void T##_rows4(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,                    \
                          struct k32_tp tp, float *c, int64_t ldc, int64_t r0, int64_t r1) {                       \
        T##_rows(4, nb, w, ws, a, as, tp, c, ldc, r0, r1);                                                         \
    }                                                                                                              \
    /* 8 rows (row i's block 0 at src[i]) decoded into the lanes form */                                            \
    static void T##_dec_group(const uint8_t *const src[8], int64_t nb, struct k32_lanes *dst) {                    \
        const size_t bs = sizeof(struct dj_block_##T);                                                            \
        for (int64_t b = 0; b < nb; b++) {                                                                         \
            struct kt_b32 blk[8];                                                                                  \
            __m256i r[8];                                                                                          \
            DJ_UNROLL for (int i = 0; i < 8; i++) {                                                                \
                T##_dec(src[i] + (size_t)b * bs, &blk[i]);                                                         \
                r[i] = OFF ? _mm256_add_epi8(blk[i].q, _mm256_set1_epi8(OFF)) : blk[i].q;                          \
            }                                                                                                      \
            transpose8x8(r, dst[b].u);                                                                             \
            dst[b].d = _mm256_setr_ps(blk[0].d, blk[1].d, blk[2].d, blk[3].d, blk[4].d, blk[5].d, blk[6].d,        \
                                      blk[7].d);                                                                   \
            dst[b].m = _mm256_setr_ps(blk[0].m, blk[1].m, blk[2].m, blk[3].m, blk[4].m, blk[5].m, blk[6].m,        \
                                      blk[7].m);                                                                   \
        }                                                                                                          \
    }                                                                                                              \
    static void T##_lanes1(const struct k32_lanes *G, int64_t nb, const uint8_t *a, size_t as,                     \
                           struct k32_tp tp, int64_t tps, float *c, int64_t ldc, const __m256i *mask) {               \
        k32_lanes_body(1, SG && !OFF, OFF, MN, WSUM, G, nb, a, as, tp, tps, c, ldc, *mask);                        \
    }                                                                                                              \
    static void T##_lanes2(const struct k32_lanes *G, int64_t nb, const uint8_t *a, size_t as,                     \
                           struct k32_tp tp, int64_t tps, float *c, int64_t ldc, const __m256i *mask) {               \
        k32_lanes_body(2, SG && !OFF, OFF, MN, WSUM, G, nb, a, as, tp, tps, c, ldc, *mask);                        \
    }                                                                                                              \
    static void T##_lanes3(const struct k32_lanes *G, int64_t nb, const uint8_t *a, size_t as,                     \
                           struct k32_tp tp, int64_t tps, float *c, int64_t ldc, const __m256i *mask) {               \
        k32_lanes_body(3, SG && !OFF, OFF, MN, WSUM, G, nb, a, as, tp, tps, c, ldc, *mask);                        \
    }                                                                                                              \
    static void T##_lanes4(const struct k32_lanes *G, int64_t nb, const uint8_t *a, size_t as,                     \
                           struct k32_tp tp, int64_t tps, float *c, int64_t ldc, const __m256i *mask) {               \
        k32_lanes_body(4, SG && !OFF, OFF, MN, WSUM, G, nb, a, as, tp, tps, c, ldc, *mask);                        \
    }                                                                                                              \
    static void T##_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc, \
                           int64_t r0, int64_t r1, int64_t n_tok) {                                                \
        static const k32_tile_fn lanes[K32_NT] = {T##_lanes1, T##_lanes2, T##_lanes3, T##_lanes4};                 \
        const uint8_t *w = wv, *a = av;                                                                            \
        const int64_t nb = k / 32;                                                                                 \
        k32_matmul(nb, w, ws, a, as, c, ldc, r0, r1, n_tok, T##_rows1, T##_rows2, T##_rows4, T##_dec_group,        \
                   lanes);                                                                                         \
    }                                                                                                              \
    static float T##_dot(int64_t k, const void *w, const void *a) {                                                \
        float c;                                                                                                   \
        T##_rows1(k / 32, w, 0, a, 0, (struct k32_tp){NULL, NULL, NULL}, &c, 1, 0, 1);                             \
        return c;                                                                                                  \
    }                                                                                                              \
    static void T##_dequant(const void *xv, float *y, int64_t n) { /* ggml: x0 * d (+ m) */                        \
        const uint8_t *x = xv;                                                                                     \
        for (int64_t b = 0; b < n / 32; b++, y += 32) {                                                            \
            struct kt_b32 blk;                                                                                     \
            T##_dec(x + (size_t)b * sizeof(struct dj_block_##T), &blk);                                            \
            const __m256 d = _mm256_set1_ps(blk.d), m = _mm256_set1_ps(blk.m);                                     \
            DJ_UNROLL for (int g = 0; g < 4; g++) {                                                                \
                const __m128i q8 = g < 2 ? _mm256_castsi256_si128(blk.q) : _mm256_extracti128_si256(blk.q, 1);     \
                const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(g % 2 ? _mm_srli_si128(q8, 8) : q8));     \
                __m256 r = _mm256_mul_ps(v, d);                                                                    \
                if (MN) r = _mm256_add_ps(r, m);                                                                   \
                _mm256_storeu_ps(y + 8 * g, r);                                                                    \
            }                                                                                                      \
        }                                                                                                          \
    }

typedef void (*k32_rows_fn)(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, struct k32_tp tp,
                            float *c, int64_t ldc, int64_t r0, int64_t r1);

/* The scratch of a matmul call: gbytes for a lanes-form group, then the prepared
 * activations of a token chunk (~256 KiB of activations, whole K32_NT tiles, at most n_tok:
 * *tok_chunk); *tp points into it.  NULL (tp zeroed) when there is no memory. */
static uint8_t *k32_scratch(int64_t nb, size_t as, int64_t n_tok, size_t gbytes, int64_t *tok_chunk,
                            struct k32_tp *tp) {
    int64_t tc = (int64_t)(((size_t)256 << 10) / as);
    tc -= tc % K32_NT;
    if (tc < K32_NT) tc = K32_NT;
    if (tc > n_tok) tc = n_tok;
    *tok_chunk = tc;
    const size_t ntb = (size_t)tc * (size_t)nb; /* prepared blocks */
    uint8_t *scr = dj_kernel_scratch(gbytes + ntb * (2 * sizeof(float) + sizeof(int32_t)));
    *tp = (struct k32_tp){NULL, NULL, NULL};
    if (scr) {
        tp->d = (float *)(scr + gbytes);
        tp->dsa = tp->d + ntb;
        tp->sa = (int32_t *)(tp->dsa + ntb);
    }
    return scr;
}

/* The matmul of every 32-block type: few tokens (or no scratch), rows a row at a time;
 * otherwise per token chunk (~256 KiB of activations) each 8-row group decoded into the
 * lanes form once, then every K32_NT-token tile of the chunk over it. */
static void k32_matmul(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, int64_t n_tok, k32_rows_fn rows1, k32_rows_fn rows2, k32_rows_fn rows4,
                       void (*dec_group)(const uint8_t *const src[8], int64_t nb, struct k32_lanes *dst),
                       const k32_tile_fn lanes[K32_NT]) {
    const size_t gbytes = n_tok > K32_SMALL ? (size_t)nb * sizeof(struct k32_lanes) : 0;
    int64_t tok_chunk;
    struct k32_tp tp;
    uint8_t *scr = k32_scratch(nb, as, n_tok, gbytes, &tok_chunk, &tp);
    struct k32_lanes *G = scr && gbytes ? (struct k32_lanes *)scr : NULL;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        float *ct = c + t0 * ldc;
        if (tp.d) k32_prep(at, as, nt_c, nb, tp);
        if (!G) { /* a row at a time, up to 4 tokens a pass */
            for (int64_t t = 0; t < nt_c;) {
                const int64_t n = nt_c - t;
                struct k32_tp tt = {NULL, NULL, NULL};
                if (tp.d) tt = (struct k32_tp){tp.d + t * nb, tp.dsa + t * nb, tp.sa + t * nb};
                const k32_rows_fn f = n >= 4 ? rows4 : n >= 2 ? rows2 : rows1;
                f(nb, w, ws, at + (size_t)t * as, as, tt, ct + t * ldc, ldc, r0, r1);
                t += n >= 4 ? 4 : n >= 2 ? 2 : 1;
            }
            continue;
        }
        for (int64_t r = r0; r < r1; r += 8) {
            const int64_t nr = r1 - r < 8 ? r1 - r : 8;
            const uint8_t *src[8];
            for (int64_t i = 0; i < 8; i++) src[i] = w + (size_t)(r + (i < nr ? i : nr - 1)) * ws;
            dec_group(src, nb, G);
            const __m256i mask = lanes_to(nr);
            for (int64_t t = 0; t < nt_c; t += K32_NT) {
                const int nt = (int)(nt_c - t < K32_NT ? nt_c - t : K32_NT);
                const struct k32_tp tt = {tp.d + t * nb, tp.dsa + t * nb, tp.sa + t * nb};
                lanes[nt - 1](G, nb, at + (size_t)t * as, as, tt, nb, ct + t * ldc + r, ldc, &mask);
            }
        }
    }
}

/* ---- the packed copy (kernels.h: pack, matmul_packed) ----------------------------------
 *
 * An 8-row group (two to a 16-row group of kernels.h) keeps its blocks in order, block b
 * of the 8 rows in 8 * bs bytes (bs: the file's block; the same bytes, rearranged):
 *   - 4 vectors of quants: vector d, lane i = row i's qs bytes 4d .. 4d+3, whose low
 *     nibbles are elements 4d .. 4d+3 and high nibbles 16+4d .. 16+4d+3;
 *   - Q5_0 / Q5_1: 32 bytes of fifth bits: lane i, byte j, bit v = row i's bit of
 *     element 4v + j, so one shift and mask a vector of the lanes form;
 *   - the 8 rows' d (f16; MXFP4: the E8M0 byte), then m (f16; Q4_1, Q5_1).
 * Decoding a block gives exactly the lanes form of the prefill path (struct k32_lanes),
 * and both run k32_block: the same bits as the file's layout, the row path and the dot.
 * Decode reads it as a stream: each group's 8 rows at once, one broadcast activation
 * dword for 8 rows, instead of a row at a time. */

/* Rows r (row i at src[i]) into the packed block at o (bs: the file's block bytes). */
static inline void k32_pack_block(const uint8_t *const src[8], size_t bs, int q5, int dlen, int mn, uint8_t *o) {
    const size_t qs_at = (size_t)(bs - 16); /* the quants are the block's last 16 bytes */
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < 8; i++) memcpy(o + 32 * d + 4 * i, src[i] + qs_at + 4 * d, 4);
    o += 128;
    if (q5) {
        const size_t qh_at = qs_at - 4;
        for (int i = 0; i < 8; i++) {
            const uint32_t qh = dj_load_u32(src[i] + qh_at);
            for (int j = 0; j < 4; j++) {
                uint8_t x = 0;
                for (int v = 0; v < 8; v++) x |= (uint8_t)(((qh >> (4 * v + j)) & 1u) << v);
                o[4 * i + j] = x;
            }
        }
        o += 32;
    }
    for (int i = 0; i < 8; i++) memcpy(o + (size_t)dlen * i, src[i], (size_t)dlen);
    o += 8 * dlen;
    if (mn)
        for (int i = 0; i < 8; i++) memcpy(o + 2 * i, src[i] + 2, 2);
}

/* The levels of a packed block's vector v (elements 4v .. 4v+3 of each row): nibbles, with
 * the fifth bit (q5) or through lut (LUT: 1), as the lanes form holds them. */
static inline DJ_ALWAYS_INLINE __m256i k32_pu(const uint8_t *P, const int v, const int q5, const int LUT,
                                              __m256i lut) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(P + 32 * (v & 3)));
    __m256i n = _mm256_and_si256(v < 4 ? q : _mm256_srli_epi16(q, 4), m4);
    if (q5) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(P + 128));
        const __m256i hb = v < 4 ? _mm256_slli_epi16(h, 4 - v) : v > 4 ? _mm256_srli_epi16(h, v - 4) : h;
        n = _mm256_or_si256(n, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
    }
    return LUT ? _mm256_shuffle_epi8(lut, n) : n;
}

/* A packed block's 8 scales d (E8: MXFP4's E8M0 bytes) and mins m (MN), as 8 lanes. */
static inline DJ_ALWAYS_INLINE void k32_pscales(const uint8_t *P, const int q5, const int E8, const int MN, __m256 *d,
                                                __m256 *m) {
    const uint8_t *S = P + 128 + (q5 ? 32 : 0);
    if (E8) { /* 2^(e-128) as dj_e8m0_to_f32_half: e < 2: 0x00200000 << e, else (e - 1) << 23 */
        const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)S));
        const __m256i lo = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        const __m256i hi = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        *d = _mm256_castsi256_ps(_mm256_blendv_epi8(hi, lo, small));
    } else {
        *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)S));
    }
    *m = MN ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + 16))) : _mm256_setzero_ps();
}

/* A packed block into the lanes form (registers, once inlined). */
static inline DJ_ALWAYS_INLINE void k32_punpack(const uint8_t *P, const int q5, const int LUT, __m256i lut,
                                                const int E8, const int MN, struct k32_lanes *g) {
    DJ_UNROLL for (int v = 0; v < 8; v++) g->u[v] = k32_pu(P, v, q5, LUT, lut);
    k32_pscales(P, q5, E8, MN, &g->d, &g->m);
}

/* One token against a packed 8-row group, blocks in stream order: chain b % 8 of the 8 rows
 * in acc[b % 8] (the order of k32_lanes_body's chains).  tp.d NULL: each block's activation
 * prepared here (the no-scratch path; the same values). */
static inline DJ_ALWAYS_INLINE void k32_packed_1(const int SG, const int OFF, const int MN, const int WSUM,
                                                 const int q5, const int LUT, const int E8, __m256i lut,
                                                 size_t gbs, const uint8_t *G, int64_t nb, const uint8_t *a,
                                                 struct k32_tp tp, float *c, __m256i mask) {
    __m256 acc[8], accm[8];
    DJ_UNROLL for (int k = 0; k < 8; k++) acc[k] = accm[k] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        DJ_UNROLL for (int k = 0; k < 8; k++) {
            const int64_t b = b0 + k;
            if (b >= nb) continue; /* (not break: k stays a constant, acc[k] a register) */
            const uint8_t *P = G + (size_t)b * gbs;
            for (size_t l = 0; dj_avx2_pf && 64 * l < gbs; l++)
                _mm_prefetch((const char *)P + dj_avx2_pf + 64 * l, _MM_HINT_T0);
            struct k32_lanes g;
            k32_punpack(P, q5, LUT, lut, E8, MN, &g);
            const uint8_t *ab = a + (size_t)b * sizeof(struct dj_block_q8_0);
            if (tp.d) {
                k32_block(1, SG, OFF, MN, WSUM, &g, ab + 2, 0, tp, 0, b, &acc[k], &accm[k]);
            } else {
                float d, dsa;
                int32_t sa;
                k32_prep1(ab, &d, &dsa, &sa);
                k32_block(1, SG, OFF, MN, WSUM, &g, ab + 2, 0, (struct k32_tp){&d, &dsa, &sa}, 0, 0, &acc[k],
                          &accm[k]);
            }
        }
    }
    __m256 r = lanes_hsum8(acc);
    if (MN) r = _mm256_add_ps(r, lanes_hsum8(accm));
    _mm256_maskstore_ps(c, mask, r);
}

/* (lut: the type's 16 levels + OFF as bytes, and mask by pointer, not vectors: a function with
 * a 256-bit argument returns without vzeroupper, and the SSE code after it — expf in
 * ffn_swiglu — then ran ~30x slower on this machine; the mask was still one until 2026-11-29,
 * when ffn_swiglu and expf took 22 % of an IQ4_NL decode on a Xeon) */
typedef void (*k32_p1_fn)(const uint8_t *G, int64_t nb, const uint8_t *a, struct k32_tp tp, float *c, const __m256i *mask,
                          const int8_t *lut);
typedef void (*k32_pdec_fn)(const uint8_t *G, int64_t nb, struct k32_lanes *dst, const int8_t *lut);

/* matmul_packed of every 32-block type: up to K32_P1_MAX tokens (or no scratch) a packed
 * group at a time with k32_packed_1, token after token (the group is in cache for the
 * second: 2 tokens from DRAM, 4096 x 4096, 2.2-2.6 -> 1.8-2.0 ms; at 3 and 4 tokens the lanes
 * tiles were as fast or faster); more tokens, each group decoded into the lanes form once
 * per token chunk, then the prefill tiles (as k32_matmul). */
static void k32_matmul_packed(int64_t nb, size_t ws, const uint8_t *w, const uint8_t *a, size_t as, float *c,
                              int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok, k32_p1_fn one, k32_pdec_fn pdec,
                              const k32_tile_fn lanes[K32_NT], const int8_t *lut) {
    const size_t gbytes = n_tok > K32_P1_MAX ? (size_t)nb * sizeof(struct k32_lanes) : 0;
    int64_t tok_chunk;
    struct k32_tp tp;
    uint8_t *scr = k32_scratch(nb, as, n_tok, gbytes, &tok_chunk, &tp);
    struct k32_lanes *G = scr && gbytes ? (struct k32_lanes *)scr : NULL;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        float *ct = c + t0 * ldc;
        if (tp.d) k32_prep(at, as, nt_c, nb, tp);
        for (int64_t r = r0; r < r1;) {
            const int64_t g0 = r & ~(int64_t)7, hi = r1 - g0 < 8 ? r1 - g0 : 8;
            const __m256i mask = _mm256_andnot_si256(lanes_to(r - g0), lanes_to(hi));
            const uint8_t *Gp = w + (size_t)g0 * ws;
            if (!G) { /* a token at a time (no scratch: each block's activation prepared on the way) */
                for (int64_t t = 0; t < nt_c; t++) {
                    const struct k32_tp tt = tp.d ? (struct k32_tp){tp.d + t * nb, tp.dsa + t * nb, tp.sa + t * nb} : tp;
                    one(Gp, nb, at + (size_t)t * as, tt, ct + t * ldc + g0, &mask, lut);
                }
            } else {
                pdec(Gp, nb, G, lut);
                for (int64_t t = 0; t < nt_c; t += K32_NT) {
                    const int nt = (int)(nt_c - t < K32_NT ? nt_c - t : K32_NT);
                    const struct k32_tp tt = {tp.d + t * nb, tp.dsa + t * nb, tp.sa + t * nb};
                    lanes[nt - 1](G, nb, at + (size_t)t * as, as, tt, nb, ct + t * ldc + g0, ldc, &mask);
                }
            }
            r = g0 + hi;
        }
    }
}

/* Type T's pack and matmul_packed: Q5 (fifth bits), LUT (its 16 levels, OFF added, through
 * the table LUTP), E8 (MXFP4's E8M0 scale), and K32_TYPE's SG, OFF, MN, WSUM. */
#define K32_PACKED(T, SG, OFF, MN, WSUM, Q5, LUT, LUTP, E8)                                                              \
    static void T##_pack(int64_t k, const void *wv, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) { \
        const uint8_t *w = wv;                                                                                      \
        const size_t bs = sizeof(struct dj_block_##T);                                                              \
        for (int64_t g = g0; g < g1; g++)                                                                           \
            for (int h = 0; h < 2; h++) {                                                                           \
                const uint8_t *src[8];                                                                              \
                for (int64_t i = 0; i < 8; i++) {                                                                   \
                    const int64_t r = 16 * g + 8 * h + i;                                                           \
                    src[i] = w + (size_t)(r < n_rows ? r : n_rows - 1) * ws;                                        \
                }                                                                                                   \
                uint8_t *o = (uint8_t *)dst + (size_t)(16 * g + 8 * h) * ws;                                        \
                for (int64_t b = 0; b < k / 32; b++) {                                                              \
                    const uint8_t *sb[8];                                                                           \
                    for (int i = 0; i < 8; i++) sb[i] = src[i] + (size_t)b * bs;                                    \
                    k32_pack_block(sb, bs, Q5, E8 ? 1 : 2, MN, o + (size_t)b * 8 * bs);                             \
                }                                                                                                   \
            }                                                                                                       \
    }                                                                                                               \
    static void T##_p1(const uint8_t *G, int64_t nb, const uint8_t *a, struct k32_tp tp, float *c,                 \
                       const __m256i *mask,                                                                          \
                       const int8_t *lut) {                                                                         \
        k32_packed_1(SG && !OFF, OFF, MN, WSUM, Q5, LUT, E8, dj_q_lut16(lut), 8 * sizeof(struct dj_block_##T), G, nb, \
                     a, tp, c, *mask);                                                                              \
    }                                                                                                               \
    static void T##_pdec(const uint8_t *G, int64_t nb, struct k32_lanes *dst, const int8_t *lut) {                  \
        const __m256i l = dj_q_lut16(lut);                                                                          \
        for (int64_t b = 0; b < nb; b++)                                                                            \
            k32_punpack(G + (size_t)b * 8 * sizeof(struct dj_block_##T), Q5, LUT, l, E8, MN, dst + b);               \
    }                                                                                                               \
    static void T##_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,          \
                                  int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                             \
        static const k32_tile_fn lanes[K32_NT] = {T##_lanes1, T##_lanes2, T##_lanes3, T##_lanes4};                  \
        _Alignas(16) int8_t t[16] = {0};                                                                            \
        if (LUT)                                                                                                    \
            for (int i = 0; i < 16; i++) t[i] = (int8_t)((LUTP)[i] + OFF);                                          \
        k32_matmul_packed(k / 32, ws, w, a, as, c, ldc, r0, r1, n_tok, T##_p1, T##_pdec, lanes, t);                 \
    }


/* Every 32-block type once: K32_TYPE's parameters, then K32_PACKED's own (LUT 0: the table
 * is not used) */
#define K32_TYPE_ALL(T, SG, OFF, MN, WSUM, Q5, LUT, LUTP, E8) \
    K32_TYPE(T, SG, OFF, MN, WSUM)                             \
    K32_PACKED(T, SG, OFF, MN, WSUM, Q5, LUT, LUTP, E8)
K32_TYPE_ALL(q4_1, 0, 0, 1, 8, 0, 0, dj_kvalues_iq4nl, 0)
K32_TYPE_ALL(q5_1, 0, 0, 1, 4, 1, 0, dj_kvalues_iq4nl, 0)
K32_TYPE_ALL(q5_0, 1, 16, 0, 4, 1, 0, dj_kvalues_iq4nl, 0)
K32_TYPE_ALL(iq4_nl, 1, 0, 0, 1, 0, 1, dj_kvalues_iq4nl, 0)
K32_TYPE_ALL(mxfp4, 1, 12, 0, 4, 0, 1, dj_kvalues_fp4, 1)

/* ---- a packed 16-row group in 512-bit vectors (the avx512 and amx kernels below) ------
 * The two 8-row halves of a 16-row group, hs bytes apart in the packed copy, side by side:
 * row i in lane i. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
/* vector v of the packed block at p for 16 rows (rows 8-15 at p + hs), as k32_pu gives it
 * for 8 (lut: broadcast to the four 128-bit lanes) */
static inline DJ_ALWAYS_INLINE __m512i k32_pu16(const uint8_t *p, size_t hs, const int v, const int q5, const int LUT,
                                                __m512i lut) {
#define K32_LD16(o)                                                                                                   \
    _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + (o)))),                       \
                       _mm256_loadu_si256((const __m256i *)(p + hs + (o))), 1)
    const __m512i q = K32_LD16(32 * (v & 3));
    __m512i n = _mm512_and_si512(v < 4 ? q : _mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0F));
    if (q5) {
        const __m512i h = K32_LD16(128);
        const __m512i hb = v < 4 ? _mm512_slli_epi16(h, 4 - v) : v > 4 ? _mm512_srli_epi16(h, v - 4) : h;
        n = _mm512_or_si512(n, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
    }
#undef K32_LD16
    return LUT ? _mm512_shuffle_epi8(lut, n) : n;
}
/* the 16 rows' d and m (MN) of the packed block at p, as k32_pscales gives them for 8 */
static inline DJ_ALWAYS_INLINE void k32_pscales16(const uint8_t *p, size_t hs, const int q5, const int E8, const int MN,
                                                  __m512 *d, __m512 *m) {
    __m256 d0, m0, d1, m1;
    k32_pscales(p, q5, E8, MN, &d0, &m0);
    k32_pscales(p + hs, q5, E8, MN, &d1, &m1);
    *d = _mm512_insertf32x8(_mm512_castps256_ps512(d0), d1, 1);
    *m = _mm512_insertf32x8(_mm512_castps256_ps512(m0), m1, 1);
}
/* the 16-byte lut broadcast to the four 128-bit lanes */
static inline __m512i k32_lut512(const int8_t *lut) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut));
}
#pragma GCC pop_options

/* ---- the avx512 table: AVX512-VNNI, 16 rows in the lanes ----------------------------
 *
 * The same packed layout, chains and float steps; only T_b is made otherwise, and 16 rows
 * go through at once.  VPDPBUSD multiplies unsigned bytes by signed ones and adds each 4
 * products to a dword with no saturation, so one instruction a vector and token takes the
 * place of maddubs + add (+ madd) and T_b needs no word sums: u = level + OFF >= 0 for
 * every type (IQ4_NL, signed in the avx2 table's lanes form, as level + 128 here), and
 * the offset comes off as OFF * sum(a) as before.  |T_b + OFF * sum(a)| <= 32 * 255 * 128
 * < 2^31: the same integer, so the same bits as the avx2 table's kernels and the dot.  Two
 * partial sums a token (vectors even and odd) halve the dependent VPDPBUSD chain; they are
 * added as integers.
 *
 * Every batch runs k32_s16_body: a 16-row group (the two 8-row halves of the packed copy
 * side by side, row i in lane i of a 512-bit vector) against up to 8 tokens at once,
 * straight from the packed stream with no lanes-form copy, chain by chain (blocks k,
 * k + 8, ...: each token's chain in one register).  That order walks a group 8 times with
 * a stride, which the hardware prefetchers do not follow from DRAM: the first token tile
 * prefetches the next group's block b as it reaches its own block b, so the group after
 * it is in cache when its turn comes (without it, decode from DRAM was 40 % slower than
 * k32_packed_1's stream order; with it 7-30 % faster, small batches 2-2.8x the former
 * path: docs/BENCHMARKS.md).  A type with an offset starts each sum from -OFF * sum(a)
 * (k32_s16 turns tp.sa into it).  Without scratch for the prepared activations the avx2
 * table's kernel runs (the same bits). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
/* NT tokens against the 16-row group at P (halves hs apart; pf: prefetch the next group, at
 * P + 2 hs) */
static inline DJ_ALWAYS_INLINE void k32_s16_body(const int NT, const int OFF, const int MN, const int q5, const int LUT,
                                                 const int E8, __m512i lut, size_t gbs, const uint8_t *P, size_t hs,
                                                 bool pf, int64_t nb, const uint8_t *a, size_t as, struct k32_tp tp,
                                                 int64_t tps, float *c, int64_t ldc, __mmask16 m) {
    __m512 ch[8 * 8], chm[8 * 8]; /* chain k of token j at [8 * k + j] */
    for (int k = 0; k < 8; k++) {
        __m512 ac[8], am[8];
        DJ_UNROLL for (int j = 0; j < NT; j++) ac[j] = am[j] = _mm512_setzero_ps();
        for (int64_t b = k; b < nb; b += 8) {
            const uint8_t *p = P + (size_t)b * gbs;
            if (pf)
                for (size_t l = 0; l < gbs + 63; l += 64) {
                    _mm_prefetch((const char *)p + 2 * hs + l, _MM_HINT_T0);
                    _mm_prefetch((const char *)p + 3 * hs + l, _MM_HINT_T0);
                }
            __m512i u[8];
            DJ_UNROLL for (int v = 0; v < 8; v++) u[v] = k32_pu16(p, hs, v, q5, LUT, lut);
            __m512 dw, mw;
            k32_pscales16(p, hs, q5, E8, MN, &dw, &mw);
            const uint8_t *ab = a + (size_t)b * sizeof(struct dj_block_q8_0) + 2;
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const uint8_t *aj = ab + (size_t)j * as;
                const size_t i = (size_t)j * (size_t)tps + (size_t)b;
                /* tp.sa holds -OFF * sum(a) here (k32_s16): the sum starts from it */
                __m512i s0 = OFF ? _mm512_set1_epi32(tp.sa[i]) : _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                DJ_UNROLL for (int v = 0; v < 8; v += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, u[v], _mm512_set1_epi32((int)dj_load_u32(aj + 4 * v)));
                    s1 = _mm512_dpbusd_epi32(s1, u[v + 1], _mm512_set1_epi32((int)dj_load_u32(aj + 4 * v + 4)));
                }
                const __m512i t = _mm512_add_epi32(s0, s1);
                ac[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_set1_ps(tp.d[i])), ac[j]);
                if (MN) am[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tp.dsa[i]), am[j]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ch[8 * k + j] = ac[j];
            chm[8 * k + j] = am[j];
        }
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        __m512 r = DJ_Q_HSUM8_512(ch + j, 8);
        if (MN) r = _mm512_add_ps(r, DJ_Q_HSUM8_512(chm + j, 8));
        _mm512_mask_storeu_ps(c + (size_t)j * (size_t)ldc, m, r);
    }
}
typedef void (*k32_s16_fn)(size_t gbs, const uint8_t *P, size_t hs, bool pf, int64_t nb, const uint8_t *a, size_t as,
                           struct k32_tp tp, int64_t tps, float *c, int64_t ldc, __mmask16 m, const int8_t *lut);

/* The driver of k32_s16_body: per token chunk (~256 KiB of activations) and 16-row group,
 * tiles of up to 8 tokens.  False without scratch for the prepared activations (the caller
 * runs k32_matmul_packed, the same bits). */
static bool k32_s16(int64_t nb, size_t ws, size_t gbs, const uint8_t *w, const uint8_t *a, size_t as, float *c,
                    int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok, const k32_s16_fn fn[8], const int8_t *lut,
                    int32_t off) {
    int64_t tok_chunk;
    struct k32_tp tp;
    if (!k32_scratch(nb, as, n_tok, 0, &tok_chunk, &tp)) return false;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        k32_prep(at, as, nt_c, nb, tp);
        for (int64_t i = 0; i < nt_c * nb; i++) tp.sa[i] *= -off; /* the sums' start */
        for (int64_t r = r0; r < r1;) {
            int64_t g0;
            const __mmask16 m = dj_group16(r, r1, &g0);
            const bool nx = g0 + 16 < r1; /* the next group, prefetched at this one's pace by the first tile */
            for (int64_t t = 0; t < nt_c; t += 8) {
                const int nt = (int)(nt_c - t < 8 ? nt_c - t : 8);
                const struct k32_tp tt = {tp.d + t * nb, tp.dsa + t * nb, tp.sa + t * nb};
                fn[nt - 1](gbs, w + (size_t)g0 * ws, 8 * ws, nx && !t, nb, at + (size_t)t * as, as, tt, nb,
                           c + (t0 + t) * ldc + g0, ldc, m, lut);
            }
            r = g0 + 16;
        }
    }
    return true;
}

/* Type T's matmul_packed on the avx512 table: K32_PACKED's Q5, LUT, LUTP, E8, the mins
 * (MN), and OFFV, the offset that makes its levels unsigned. */
#define K32_VNNI(T, OFFV, MN, Q5, LUT, LUTP, E8)                                                                   \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 1)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 2)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 3)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 4)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 5)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 6)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 7)                                                                           \
    K32_S16(T, OFFV, MN, Q5, LUT, E8, 8)                                                                           \
    void dj_##T##_avx512_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,    \
                                       int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                       \
        static const k32_s16_fn s16[8] = {T##_s16_1, T##_s16_2, T##_s16_3, T##_s16_4,                              \
                                          T##_s16_5, T##_s16_6, T##_s16_7, T##_s16_8};                             \
        _Alignas(16) int8_t t[16] = {0};                                                                           \
        if (LUT)                                                                                                   \
            for (int i = 0; i < 16; i++) t[i] = (int8_t)(uint8_t)((LUTP)[i] + OFFV);                               \
        if (!k32_s16(k / 32, ws, 8 * sizeof(struct dj_block_##T), w, a, as, c, ldc, r0, r1, n_tok, s16, t, OFFV))  \
            T##_matmul_packed(k, w, ws, a, as, c, ldc, r0, r1, n_tok);                                             \
    }
/* k32_s16_body for N tokens (lut: the levels + OFFV) */
#define K32_S16(T, OFFV, MN, Q5, LUT, E8, N)                                                                       \
    static void T##_s16_##N(size_t gbs, const uint8_t *P, size_t hs, bool pf, int64_t nb, const uint8_t *a,        \
                            size_t as, struct k32_tp tp, int64_t tps, float *c, int64_t ldc, __mmask16 m,          \
                            const int8_t *lut) {                                                                   \
        k32_s16_body(N, OFFV, MN, Q5, LUT, E8, k32_lut512(lut), gbs, P, hs, pf, nb, a, as, tp, tps, c, ldc, m);    \
    }
K32_VNNI(q4_1, 0, 1, 0, 0, dj_kvalues_iq4nl, 0)
K32_VNNI(q5_1, 0, 1, 1, 0, dj_kvalues_iq4nl, 0)
K32_VNNI(q5_0, 16, 0, 1, 0, dj_kvalues_iq4nl, 0)
K32_VNNI(iq4_nl, 128, 0, 0, 1, dj_kvalues_iq4nl, 0)
K32_VNNI(mxfp4, 12, 0, 0, 1, dj_kvalues_fp4, 1)
#undef K32_VNNI
#undef K32_S16
#pragma GCC pop_options

/* ---- prefill by AMX-INT8 (the amx table: kernels_amx.c) ------------------------------
 *
 * T_b, the block's exact integer dot, is what TDPBSSD computes: per 16-row group (the two
 * packed 8-row groups) and block, the 32 signed levels of 16 rows go into one B tile (row
 * v: elements 4v .. 4v+3, k32_pu16 of the two halves side by side: Q5_0 as level - 16, the
 * LUT types through their levels without the offset, Q4_1 / Q5_1 as 0..31), the q8_0
 * bytes of 16 tokens are the A tile straight from the activation rows, and one TDPBSSD
 * gives the 16 x 16 dots in int32, exact whatever the hardware's order.  The float step is
 * k32_block's, chain by chain (blocks kc, kc + 8, ...; chain kc of 16 rows in the 16 lanes
 * of a token's accumulator), the mins' chains (Q4_1, Q5_1) after it, and lanes_hsum8's
 * tree at the end: the same operations on the same values, so the bits are the avx2
 * table's (and the dot's).  Batches of up to 16 tokens run the avx512 table's kernel.
 * Compiled for AVX-512 and AMX by a target pragma; reached only from the amx table
 * (kernels_amx.c checks the CPU, the OS and Linux's permission). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")
enum { K32_AMX_MIN_TOK = 16 };

/* A 16-row group's blocks as B tiles (ub: 512 bytes a block) and their d (m) as 16 lanes. */
static inline DJ_ALWAYS_INLINE void k32x_group(const int q5, const int LUT, const int E8, const int MN, const int SUB,
                                               __m512i lut, size_t gbs, const uint8_t *P, size_t hs, int64_t nb,
                                               uint8_t *ub, float *dwv, float *mwv) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = P + (size_t)b * gbs;
        __m512i *o = (__m512i *)(ub + (size_t)b * 512);
        DJ_UNROLL for (int v = 0; v < 8; v++) {
            const __m512i x = k32_pu16(p, hs, v, q5, LUT, lut);
            _mm512_store_si512(o + v, SUB ? _mm512_sub_epi8(x, _mm512_set1_epi8(SUB)) : x);
        }
        __m512 d, m;
        k32_pscales16(p, hs, q5, E8, MN, &d, &m);
        _mm512_store_ps(dwv + 16 * b, d);
        if (MN) _mm512_store_ps(mwv + 16 * b, m);
    }
}

/* False: a small batch or no scratch (the caller runs the avx2 kernel: the same bits). */
static inline DJ_ALWAYS_INLINE bool k32_amx(const int q5, const int LUT, const int E8, const int MN, const int SUB,
                                           size_t bs, const int8_t *lut8, int64_t k, const uint8_t *w, size_t ws,
                                           const uint8_t *a, size_t as, float *c, int64_t ldc, int64_t r0,
                                           int64_t r1, int64_t n_tok) {
    const int64_t nb = k / 32, ntp = (n_tok + 15) / 16 * 16;
    int64_t tc = (int64_t)(((size_t)256 << 10) / as); /* tokens a chunk: ~256 KiB of activations */
    tc -= tc % 16;
    if (tc < 16) tc = 16;
    if (tc > ntp) tc = ntp;
    const size_t ub_bytes = (size_t)nb * 512, sc_bytes = (size_t)nb * 64, ch_bytes = 2 * 8 * 16 * sizeof(__m512);
    const size_t ntb = (size_t)tc * (size_t)nb;
    uint8_t *scr = n_tok > K32_AMX_MIN_TOK && nb > 0
                       ? dj_kernel_scratch(ub_bytes + 2 * sc_bytes + ch_bytes + ntb * (2 * sizeof(float) + sizeof(int32_t)))
                       : NULL;
    if (!scr) return false;
    uint8_t *ub = scr;
    float *dwv = (float *)(scr + ub_bytes), *mwv = dwv + 16 * nb;
    __m512 *ch = (__m512 *)(mwv + 16 * nb), *chm = ch + 8 * 16; /* chain kc of token j: ch[16 * kc + j] */
    struct k32_tp tp;
    tp.d = (float *)(chm + 8 * 16);
    tp.dsa = tp.d + ntb;
    tp.sa = (int32_t *)(tp.dsa + ntb);
    const __m512i lut = LUT ? k32_lut512(lut8) : _mm512_setzero_si512();
    const size_t gbs = 8 * bs;
    _Alignas(64) int32_t isum[2][16][16];
    memset(isum, 0, sizeof isum);
    int cur_rows = -1;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
        const int64_t nt_c = n_tok - t0 < tc ? n_tok - t0 : tc, ntc_p = (nt_c + 15) / 16 * 16;
        k32_prep(a + (size_t)t0 * as, as, nt_c, nb, tp);
        /* tokens past the chunk's last: 0 (their lanes are computed, never stored) */
        memset(tp.d + nt_c * nb, 0, (size_t)(ntc_p - nt_c) * (size_t)nb * sizeof(float));
        memset(tp.dsa + nt_c * nb, 0, (size_t)(ntc_p - nt_c) * (size_t)nb * sizeof(float));
        for (int64_t r = r0; r < r1;) {
            int64_t g0;
            const __mmask16 m = dj_group16(r, r1, &g0);
            k32x_group(q5, LUT, E8, MN, SUB, lut, gbs, w + (size_t)g0 * ws, 8 * ws, nb, ub, dwv, mwv);
            r = g0 + 16;
            for (int64_t t = 0; t < nt_c; t += 16) {
                const int nt = (int)(nt_c - t < 16 ? nt_c - t : 16);
                dj_amx_int8_rows(nt, 32, &cur_rows);
                const uint8_t *at = a + (size_t)(t0 + t) * as + 2;
                const float *td = tp.d + t * nb;
                for (int kc = 0; kc < 8; kc++) {
                    __m512 acc[16];
                    DJ_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
                    DJ_AMX_BARRIER();
                    /* block b's sums go to tile (i % 2) and are stored while block b + 8's are made */
                    for (int64_t b = kc, i = 0;; b += 8, i++) {
                        if (b < nb)
                            DJ_AMX_Q8_ISSUE(i, at + (size_t)b * sizeof(struct dj_block_q8_0), as, ub + (size_t)b * 512);
                        if (i > 0) {
                            const int64_t pb = b - 8;
                            DJ_AMX_Q8_STORE(i - 1, isum);
                            DJ_AMX_BARRIER();
                            const __m512 dw = _mm512_load_ps(dwv + 16 * pb);
                            const int32_t(*is)[16] = isum[(i - 1) % 2];
                            DJ_UNROLL for (int j = 0; j < 16; j++)
                                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(is[j])),
                                                         _mm512_mul_ps(dw, _mm512_set1_ps(td[j * nb + pb])), acc[j]);
                        }
                        if (b >= nb) break;
                    }
                    DJ_UNROLL for (int j = 0; j < 16; j++) ch[16 * kc + j] = acc[j];
                }
                if (MN) {
                    const float *ts = tp.dsa + t * nb;
                    for (int kc = 0; kc < 8; kc++) {
                        __m512 am[16];
                        DJ_UNROLL for (int j = 0; j < 16; j++) am[j] = _mm512_setzero_ps();
                        for (int64_t b = kc; b < nb; b += 8) {
                            const __m512 mw = _mm512_load_ps(mwv + 16 * b);
                            DJ_UNROLL for (int j = 0; j < 16; j++)
                                am[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ts[j * nb + b]), am[j]);
                        }
                        DJ_UNROLL for (int j = 0; j < 16; j++) chm[16 * kc + j] = am[j];
                    }
                }
                for (int j = 0; j < nt; j++) { /* lanes_hsum8's tree (and the mins') */
                    __m512 rr = DJ_Q_HSUM8_512(ch + j, 16);
                    if (MN) rr = _mm512_add_ps(rr, DJ_Q_HSUM8_512(chm + j, 16));
                    _mm512_mask_storeu_ps(c + (t0 + t + j) * ldc + g0, m, rr);
                }
            }
        }
    }
    _tile_release();
    return true;
}

/* Type T on the amx table: K32_PACKED's Q5, LUT (levels LUTP, no offset), E8, the mins
 * (MN), and SUB (Q5_0's 16). */
#define K32_AMX(T, Q5, LUT, LUTP, E8, MN, SUB)                                                                     \
    void dj_##T##_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,        \
                                    int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                           \
        if (!k32_amx(Q5, LUT, E8, MN, SUB, sizeof(struct dj_block_##T), (const int8_t *)(LUTP), k, w, ws, a, as, c, \
                     ldc, r0, r1, n_tok))                                                                           \
            dj_##T##_avx512_matmul_packed(k, w, ws, a, as, c, ldc, r0, r1, n_tok);                                  \
    }
K32_AMX(q4_1, 0, 0, dj_kvalues_iq4nl, 0, 1, 0)
K32_AMX(q5_1, 1, 0, dj_kvalues_iq4nl, 0, 1, 0)
K32_AMX(q5_0, 1, 0, dj_kvalues_iq4nl, 0, 0, 16)
K32_AMX(iq4_nl, 0, 1, dj_kvalues_iq4nl, 0, 0, 0)
K32_AMX(mxfp4, 0, 1, dj_kvalues_fp4, 1, 0, 0)
#pragma GCC pop_options

#define K32_SET(k, TYPE, T)                                                                                        \
    do {                                                                                                           \
        (k)->w[TYPE].act_type = dj_kernels_act_type(TYPE);                                                         \
        (k)->w[TYPE].matmul = T##_matmul;                                                                          \
        (k)->w[TYPE].dot = T##_dot;                                                                                \
        (k)->w[TYPE].dequantize_row = T##_dequant;                                                                 \
        (k)->w[TYPE].pack = T##_pack;                                                                              \
        (k)->w[TYPE].matmul_packed = T##_matmul_packed;                                                            \
    } while (0)

void dj_kernels_init_avx2_quants32(struct dj_kernels *k) {
    K32_SET(k, DJ_TYPE_Q4_1, q4_1);
    K32_SET(k, DJ_TYPE_Q5_1, q5_1);
    K32_SET(k, DJ_TYPE_Q5_0, q5_0);
    K32_SET(k, DJ_TYPE_IQ4_NL, iq4_nl);
    K32_SET(k, DJ_TYPE_MXFP4, mxfp4);
}

#endif
