/*
 * quants_avx2.c — AVX2 kernels of the 256-element super-block types beyond the
 * seven of kernels_avx2.c: the K-quants Q2_K, Q3_K, Q5_K, the i-quants IQ1_S …
 * IQ4_XS and the ternary TQ1_0 / TQ2_0, all x q8_K.  dj_kernels_init_avx2_quants
 * (cpu_internal.h) registers them and, through quants32_avx2.c, the 32-element
 * block types; the AVX-512 table inherits them all.
 *
 * Per (row, token) pair one float chain, super-blocks b = 0 .. nb-1 in order:
 *
 *     acc = fma(float(isum_b), d * d_a, acc)       isum_b: exact integer total of the
 *     acc = fma(-float(imin_b), dmin * d_a, acc)   super-block's sum of scale * level * a;
 *                                                  imin_b: sum of min * bsums (Q2_K, Q5_K)
 *
 * (acc starts at 0; the result) for the types with an offset (below); Q2_K, Q5_K and
 * IQ4_XS, with none, keep llama.cpp's form instead: the chain in 8 lanes of natural
 * partial sums, acc = fma(float(isum lanes), d * d_a, acc) (and fnmadd for the mins), the
 * result hsum8(acc) — no horizontal sum per super-block (decode: 0.72x -> 0.9-1.0x of
 * llama.cpp's vec_dot for Q2_K, same-run measure), and in prefill it costs what the
 * exact totals' vector epilogue does.  d, dmin: the block's f16 scales, d times the type's
 * power of two (IQ2: 1/8, IQ3_XXS: 1/4, IQ1: 1/8 — the integer scales are 2s+1, the
 * IQ1 levels 8 (grid +- 1/8)).  The lanes of a SIMD partial sum are added up in
 * integers before the one conversion: with an offset (below) a lane holds offset
 * terms that cancel only across lanes, and rounding it would scale the error with the
 * offset rather than with the dot's own terms (a sparse TQ row measured 0.66 of the
 * test bound that way, 0.02 now).  Every path computes the same exact integers its
 * own way and then runs exactly these float operations — the batch-invariance
 * contract.
 *
 * The decoded form, struct kt_sb (608 bytes a super-block and row), from a per-type
 * SIMD decoder (T_dec):
 *
 *     q[8]     chunk c = elements 32c .. 32c+31 as bytes, element order: u = level +
 *              OFF >= 0 (OFF: the type's offset: Q3_K 4, IQ2 43, IQ3_XXS 62, IQ3_S 15,
 *              IQ1 9, TQ 1) or, for IQ4_XS, the signed level
 *     scw[8]   chunk c's multipliers: 16 words, the low lane sub-block 2c's integer
 *              scale (elements 32c .. 32c+15), the high lane 2c+1's
 *     cw, mw   16 words each, one per 16 elements g, against the activation's bsums:
 *              -OFF * scale_g (takes the offset off exactly) and min_g
 *
 *     isum = sum_c madd(maddubs(q[c], a[c]), scw[c]) + madd(bsums, cw)
 *            (IQ4_XS: maddubs(|q|, sign(a, q)), the sign trick; Q2_K's prefill tiles:
 *            q[c] = u * scale, two chunks' maddubs added as words, then madd by 1 —
 *            the same total in every lane, a third fewer multiplies)
 *
 * Paths (T_matmul):
 *   - up to KT_SMALL tokens, or without scratch: rows one at a time (one sequential
 *     weight stream), each super-block decoded on the stack and dotted with all the
 *     tokens; with one token the grid types (IQ1/IQ2/IQ3) use their own integer dot
 *     instead (T_sb1: signs put on the activations, no offset — what a single token
 *     makes cheapest; the same totals);
 *   - prefill: KT_MR rows decoded whole into scratch once per token chunk (~256 KiB of
 *     activations), then every KT_MR x KT_NT tile of the chunk over them — decoding
 *     amortized over the chunk, where llama.cpp decodes per row-token pair.  A full
 *     2 x 4 tile runs its 8 pairs' chains in the 8 lanes of one vector (the 8 totals
 *     by a transpose tree, dj_q_tree8), lane for lane the same operations.  On
 *     AVX-512 VNNI (kt512_core, below) the same tiles over the same buffer, two chunks
 *     a 512-bit vector.
 *
 * maddubs never saturates: a pair is at most 2 * 124 * 127 = 31496 (IQ3_XXS, u <= 124;
 * the others less; IQ4_XS |level| <= 127, 32258).  The int32 sums are far from
 * overflow (IQ3_XXS's largest: 256 * 31 * 124 * 127 < 2^28).  float(isum) rounds only
 * past 2^24, relative to the dot's own terms.
 *
 * dequantize_row: bitwise ggml's dequantize_row_*: each value is A * v (exact: at most
 * a 24-bit product) minus B where ggml subtracts a min, as ggml computes them.
 */
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/quants_avx2.h"

/* ---- helpers ---------------------------------------------------------------------- */

/* v shifted left by s (right by -s) as 16-bit lanes; s a constant after inlining */
static inline __m256i shl16(__m256i v, int s) {
    return s > 0 ? _mm256_slli_epi16(v, s) : s < 0 ? _mm256_srli_epi16(v, -s) : v;
}

/* a word vector: low lane all lo, high lane all hi */
static inline __m256i words2(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

/* 16 scale bytes s (one per 16 elements; signed) -> the 8 chunks' multipliers: chunk c's
 * low lane sub-block 2c's scale, high lane 2c+1's — one in-lane shuffle a chunk from the
 * words of scales 0-7 (8-15) in both lanes */
static inline void scw8_from_bytes(__m128i s, __m256i scw[8]) {
    const __m256i w = _mm256_cvtepi8_epi16(s); /* words: scales 0-7 | 8-15 */
    const __m256i lo = _mm256_permute2x128_si256(w, w, 0x00), hi = _mm256_permute2x128_si256(w, w, 0x11);
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const int e = 4 * (c % 4); /* byte of word 2c (mod 8) */
        const __m256i ctl = _mm256_setr_epi8(e, e + 1, e, e + 1, e, e + 1, e, e + 1, e, e + 1, e, e + 1, e, e + 1, e,
                                             e + 1, e + 2, e + 3, e + 2, e + 3, e + 2, e + 3, e + 2, e + 3, e + 2,
                                             e + 3, e + 2, e + 3, e + 2, e + 3, e + 2, e + 3);
        scw[c] = _mm256_shuffle_epi8(c < 4 ? lo : hi, ctl);
    }
}

/* ---- the decoded forms ------------------------------------------------------------ */

struct kt_sb {
    __m256i q[8], scw[8], cw, mw;
    float d, dmin;
    uint8_t pad_[24];
};
_Static_assert(sizeof(struct kt_sb) % 32 == 0, "decoded super-block size");

/* ---- decoders: K-quants ------------------------------------------------------------ */

/* Q5_K: u = nibble | 5th bit << 4 (0..31); 6-bit scales and mins per 32 (as q4_K). */
static inline DJ_ALWAYS_INLINE void q5_K_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_q5_K *x = (const void *)p;
    uint64_t sc, mn;
    dj_q4_K_unpack_scales(x->scales, &sc, &mn);
    const __m256i scb = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m128i mnb = _mm_cvtsi64_si128((long long)mn);
    o->mw = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mnb, mnb));
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    DJ_UNROLL for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
        o->q[2 * j] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(shl16(qh, 4 - 2 * j), b4));
        o->q[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                          _mm256_and_si256(shl16(qh, 3 - 2 * j), b4));
    }
    DJ_UNROLL for (int c = 0; c < 8; c++)
        o->scw[c] = _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(2 * c | (2 * c + 1) << 8)));
    o->cw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = dj_q_f16(&x->dmin);
}

/* Q3_K: u = low 2 bits | high bit << 2 (value u - 4); 6-bit scales - 32 per 16. */
static inline DJ_ALWAYS_INLINE void q3_K_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_q3_K *x = (const void *)p;
    const uint32_t a0 = dj_load_u32(x->scales), a1 = dj_load_u32(x->scales + 4), a2 = dj_load_u32(x->scales + 8);
    const uint32_t s0 = (a0 & 0x0f0f0f0fu) | ((a2 & 0x03030303u) << 4);
    const uint32_t s1 = (a1 & 0x0f0f0f0fu) | (((a2 >> 2) & 0x03030303u) << 4);
    const uint32_t s2 = ((a0 >> 4) & 0x0f0f0f0fu) | (((a2 >> 4) & 0x03030303u) << 4);
    const uint32_t s3 = ((a1 >> 4) & 0x0f0f0f0fu) | (((a2 >> 6) & 0x03030303u) << 4);
    const __m128i s = _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32));
    o->cw = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(s), 2));
    scw8_from_bytes(s, o->scw);
    const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j;
            o->q[c] = _mm256_or_si256(_mm256_and_si256(shl16(q, -2 * j), m3), _mm256_and_si256(shl16(hm, 2 - c), b2));
        }
    }
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = 0;
}

/* Q2_K: u = 2 bits (0..3); 4-bit scale and min per 16. */
static inline DJ_ALWAYS_INLINE void q2_K_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_q2_K *x = (const void *)p;
    const __m128i sb = _mm_loadu_si128((const __m128i *)x->scales);
    const __m128i sc = _mm_and_si128(sb, _mm_set1_epi8(0x0F));
    o->mw = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
    scw8_from_bytes(sc, o->scw); /* 4-bit scales: the signed widening is the unsigned one */
    const __m256i m3 = _mm256_set1_epi8(3);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j;
            o->q[c] = _mm256_and_si256(shl16(q, -2 * j), m3);
        }
    }
    o->cw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = dj_q_f16(&x->dmin);
}

/* Q2_K for the prefill tiles (kt_core's PM): q[c] = u * scale (<= 3 * 15 = 45: a byte),
 * so two chunks' maddubs sum as words (<= 2 * 2 * 45 * 128 = 23040) before one madd by 1.
 * A lane's total is the same integer as q2_K_dec's madd by scw gives it (the scale is
 * one per 16 elements: 4 lanes), so the same bits.  The products by a table per group:
 * dword g = s_g * 0x03020100 (bytes 0, s, 2s, 3s: no carries), chunk c's table in its
 * lanes' byte 0-3 (low lane group 2c, high 2c + 1), looked up by the 2-bit values. */
static inline DJ_ALWAYS_INLINE void q2_K_decpm(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_q2_K *x = (const void *)p;
    const __m128i sb = _mm_loadu_si128((const __m128i *)x->scales);
    const __m128i sc = _mm_and_si128(sb, _mm_set1_epi8(0x0F));
    o->mw = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
    const __m256i k0123 = _mm256_set1_epi32(0x03020100);
    const __m256i lut[2] = {_mm256_mullo_epi32(_mm256_cvtepu8_epi32(sc), k0123),
                            _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8)), k0123)};
    const __m256i m3 = _mm256_set1_epi8(3);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j, g = (2 * c) % 8;
            const __m256i t = _mm256_permutevar8x32_epi32(lut[c / 4], _mm256_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1));
            o->q[c] = _mm256_shuffle_epi8(t, _mm256_and_si256(shl16(q, -2 * j), m3));
        }
    }
    o->cw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = dj_q_f16(&x->dmin);
}

/* IQ4_XS: signed values kvalues_iq4nl[nibble]; 6-bit scales - 32 per 32. */
static inline DJ_ALWAYS_INLINE void iq4_xs_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq4_xs *x = (const void *)p;
    const __m256i lut = dj_q_lut16(dj_kvalues_iq4nl);
    const unsigned sh = dj_load_u16(&x->scales_h);
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const int ls = ((x->scales_l[c / 2] >> 4 * (c % 2)) & 0xf) | (((sh >> 2 * c) & 3) << 4);
        o->q[c] = dj_q_nib_lut(x->qs + 16 * c, lut);
        o->scw[c] = _mm256_set1_epi16((short)(ls - 32));
    }
    o->cw = o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = 0;
}

/* ---- decoders: i-quants with sign bits and grids ---------------------------------- */

/* 4 grid entries of 8 bytes, signs from 4 byte masks: u = value + off */
static inline __m256i grid8_signed(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, __m256i neg, int off) {
    const __m256i g = _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
    return _mm256_add_epi8(_mm256_sub_epi8(_mm256_xor_si256(g, neg), neg), _mm256_set1_epi8((char)off));
}
static inline __m256i ksigns4(uint32_t s) { /* four 7-bit sign indices at bits 0, 7, 14, 21 */
    return _mm256_set_epi64x((long long)dj_ksigns64[(s >> 21) & 127], (long long)dj_ksigns64[(s >> 14) & 127],
                             (long long)dj_ksigns64[(s >> 7) & 127], (long long)dj_ksigns64[s & 127]);
}
static inline __m256i cw_load(const int16_t *cw) { return _mm256_loadu_si256((const __m256i *)cw); }

/* IQ2_XXS: grid {8,25,43} with 7-bit signs, u = value + 43; scale 2s+1 per 32; d/8. */
static inline DJ_ALWAYS_INLINE void iq2_xxs_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq2_xxs *x = (const void *)p;
    const uint8_t *qs = (const uint8_t *)x->qs;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const uint32_t a0 = dj_load_u32(qs + 8 * c), a1 = dj_load_u32(qs + 8 * c + 4);
        o->q[c] = grid8_signed(dj_iq2xxs_grid[a0 & 255], dj_iq2xxs_grid[(a0 >> 8) & 255],
                               dj_iq2xxs_grid[(a0 >> 16) & 255], dj_iq2xxs_grid[a0 >> 24], ksigns4(a1), 43);
        const int sc = 2 * (int)(a1 >> 28) + 1;
        o->scw[c] = _mm256_set1_epi16((short)sc);
        cw[2 * c] = cw[2 * c + 1] = (int16_t)(-43 * sc);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d) * 0.125f;
    o->dmin = 0;
}

/* IQ2_XS: 9-bit grid index + 7-bit signs per 8; 4-bit scales 2s+1 per 16; d/8. */
static inline DJ_ALWAYS_INLINE void iq2_xs_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq2_xs *x = (const void *)p;
    const uint8_t *qs = (const uint8_t *)x->qs;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        uint16_t q[4];
        memcpy(q, qs + 8 * c, 8);
        const uint32_t sg = (uint32_t)(q[0] >> 9) | (uint32_t)(q[1] >> 9) << 7 | (uint32_t)(q[2] >> 9) << 14 |
                            (uint32_t)(q[3] >> 9) << 21;
        o->q[c] = grid8_signed(dj_iq2xs_grid[q[0] & 511], dj_iq2xs_grid[q[1] & 511], dj_iq2xs_grid[q[2] & 511],
                               dj_iq2xs_grid[q[3] & 511], ksigns4(sg), 43);
        const int lo = 2 * (x->scales[c] & 0xF) + 1, hi = 2 * (x->scales[c] >> 4) + 1;
        o->scw[c] = words2(lo, hi);
        cw[2 * c] = (int16_t)(-43 * lo);
        cw[2 * c + 1] = (int16_t)(-43 * hi);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d) * 0.125f;
    o->dmin = 0;
}

/* IQ2_S: 10-bit grid index (qs + 2 bits of qh), explicit sign bytes; scales as IQ2_XS. */
static inline DJ_ALWAYS_INLINE void iq2_s_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq2_s *x = (const void *)p;
    const uint8_t *qs = x->qs, *signs = x->qs + DJ_QK_K / 8;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const unsigned h = x->qh[c];
        o->q[c] = grid8_signed(dj_iq2s_grid[qs[4 * c] | ((h << 8) & 0x300)],
                               dj_iq2s_grid[qs[4 * c + 1] | ((h << 6) & 0x300)],
                               dj_iq2s_grid[qs[4 * c + 2] | ((h << 4) & 0x300)],
                               dj_iq2s_grid[qs[4 * c + 3] | ((h << 2) & 0x300)], dj_q_bits32_mask(dj_load_u32(signs + 4 * c)),
                               43);
        const int lo = 2 * (x->scales[c] & 0xF) + 1, hi = 2 * (x->scales[c] >> 4) + 1;
        o->scw[c] = words2(lo, hi);
        cw[2 * c] = (int16_t)(-43 * lo);
        cw[2 * c + 1] = (int16_t)(-43 * hi);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d) * 0.125f;
    o->dmin = 0;
}

/* IQ3_XXS: 8 grid entries of 4 bytes {4..62} per 32, 7-bit signs, u = value + 62; scale
 * 2s+1 per 32; d/4. */
static inline DJ_ALWAYS_INLINE void iq3_xxs_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq3_xxs *x = (const void *)p;
    const uint8_t *qs = x->qs, *sas = x->qs + DJ_QK_K / 4;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const uint8_t *q = qs + 8 * c;
        const uint32_t a = dj_load_u32(sas + 4 * c);
        const __m256i g = _mm256_setr_epi32((int)dj_iq3xxs_grid[q[0]], (int)dj_iq3xxs_grid[q[1]],
                                            (int)dj_iq3xxs_grid[q[2]], (int)dj_iq3xxs_grid[q[3]],
                                            (int)dj_iq3xxs_grid[q[4]], (int)dj_iq3xxs_grid[q[5]],
                                            (int)dj_iq3xxs_grid[q[6]], (int)dj_iq3xxs_grid[q[7]]);
        const __m256i neg = ksigns4(a);
        o->q[c] = _mm256_add_epi8(_mm256_sub_epi8(_mm256_xor_si256(g, neg), neg), _mm256_set1_epi8(62));
        const int sc = 2 * (int)(a >> 28) + 1;
        o->scw[c] = _mm256_set1_epi16((short)sc);
        cw[2 * c] = cw[2 * c + 1] = (int16_t)(-62 * sc);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d) * 0.25f;
    o->dmin = 0;
}

/* IQ3_S: 9-bit grid index (qs + 1 bit of qh) of 4 bytes {1..15}, explicit sign bytes,
 * u = value + 15; 4-bit scale 2s+1 per 32; d. */
static inline DJ_ALWAYS_INLINE void iq3_s_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq3_s *x = (const void *)p;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const uint8_t *q = x->qs + 8 * c;
        const unsigned h = x->qh[c];
        int g[8];
        for (int i = 0; i < 8; i++) g[i] = (int)dj_iq3s_grid[q[i] | (((h >> i) & 1) << 8)];
        const __m256i gv = _mm256_setr_epi32(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
        const __m256i neg = dj_q_bits32_mask(dj_load_u32(x->signs + 4 * c));
        o->q[c] = _mm256_add_epi8(_mm256_sub_epi8(_mm256_xor_si256(gv, neg), neg), _mm256_set1_epi8(15));
        const int sc = 2 * ((x->scales[c / 2] >> 4 * (c % 2)) & 0xF) + 1;
        o->scw[c] = _mm256_set1_epi16((short)sc);
        cw[2 * c] = cw[2 * c + 1] = (int16_t)(-15 * sc);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d);
    o->dmin = 0;
}

/* IQ1_S / IQ1_M: value 8 * (grid + delta) = 8g +- 1 (g in {-1,0,1}), u = that + 9 =
 * 8 (g + 1) + (delta sign + 1); d/8. */
static inline __m256i iq1_u(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, __m256i dp1) {
    const __m256i g = _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
    return _mm256_add_epi8(_mm256_slli_epi16(_mm256_add_epi8(g, _mm256_set1_epi8(1)), 3), dp1);
}

/* IQ1_S: per 32 a 3-bit scale 2s+1, a delta sign and four 11-bit grid indices. */
static inline DJ_ALWAYS_INLINE void iq1_s_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq1_s *x = (const void *)p;
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const unsigned h = dj_load_u16(&x->qh[c]);
        const uint8_t *q = x->qs + 4 * c;
        o->q[c] = iq1_u(dj_iq1s_grid[q[0] | ((h << 8) & 0x700)], dj_iq1s_grid[q[1] | ((h << 5) & 0x700)],
                        dj_iq1s_grid[q[2] | ((h << 2) & 0x700)], dj_iq1s_grid[q[3] | ((h >> 1) & 0x700)],
                        _mm256_set1_epi8(h & 0x8000 ? 0 : 2));
        const int sc = 2 * (int)((h >> 12) & 7) + 1;
        o->scw[c] = _mm256_set1_epi16((short)sc);
        cw[2 * c] = cw[2 * c + 1] = (int16_t)(-9 * sc);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&x->d) * 0.125f;
    o->dmin = 0;
}

/* IQ1_M: per 16 a 3-bit scale 2s+1, per 8 a delta sign; the f16 super-scale in the top
 * nibbles of the four scale words. */
static inline DJ_ALWAYS_INLINE void iq1_m_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_iq1_m *x = (const void *)p;
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    int16_t cw[16];
    for (int c = 0; c < 8; c++) {
        const unsigned h0 = x->qh[2 * c], h1 = x->qh[2 * c + 1];
        const uint8_t *q = x->qs + 4 * c;
        const __m256i dp1 = _mm256_set_epi64x(h1 & 0x80 ? 0 : 0x0202020202020202ll, h1 & 0x08 ? 0 : 0x0202020202020202ll,
                                              h0 & 0x80 ? 0 : 0x0202020202020202ll, h0 & 0x08 ? 0 : 0x0202020202020202ll);
        o->q[c] = iq1_u(dj_iq1s_grid[q[0] | ((h0 << 8) & 0x700)], dj_iq1s_grid[q[1] | ((h0 << 4) & 0x700)],
                        dj_iq1s_grid[q[2] | ((h1 << 8) & 0x700)], dj_iq1s_grid[q[3] | ((h1 << 4) & 0x700)], dp1);
        const unsigned s = sc[c / 2] >> 6 * (c % 2);
        const int lo = 2 * (int)(s & 7) + 1, hi = 2 * (int)((s >> 3) & 7) + 1;
        o->scw[c] = words2(lo, hi);
        cw[2 * c] = (int16_t)(-9 * lo);
        cw[2 * c + 1] = (int16_t)(-9 * hi);
    }
    o->cw = cw_load(cw);
    o->mw = _mm256_setzero_si256();
    o->d = dj_q_f16(&dh) * 0.125f;
    o->dmin = 0;
}

/* ---- decoders: ternary --------------------------------------------------------------- */

static inline void kt_unit_scales(struct kt_sb *o, int off) {
    DJ_UNROLL for (int c = 0; c < 8; c++) o->scw[c] = _mm256_set1_epi16(1);
    o->cw = _mm256_set1_epi16((short)-off);
    o->mw = _mm256_setzero_si256();
    o->dmin = 0;
}

/* TQ2_0: u = 2 bits (value u - 1), scale d. */
static inline DJ_ALWAYS_INLINE void tq2_0_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_tq2_0 *x = (const void *)p;
    const __m256i m3 = _mm256_set1_epi8(3);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
        DJ_UNROLL for (int j = 0; j < 4; j++) o->q[4 * h + j] = _mm256_and_si256(shl16(q, -2 * j), m3);
    }
    kt_unit_scales(o, 1);
    o->d = dj_q_f16(&x->d);
}

/* bytes x times per-byte multipliers (words m: the multiplier of bytes 2i and 2i+1), mod 256 */
static inline __m256i mul_bytes(__m256i x, __m256i m) {
    const __m256i lo = _mm256_mullo_epi16(x, m), hi = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), m);
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi16(0xFF)), _mm256_slli_epi16(hi, 8));
}
/* a base-3 digit from its scaled byte q: (q * 3) >> 8, i.e. (q > 85) + (q > 170) */
static inline __m256i tq_digit(__m256i q) {
    const __m256i x = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
    return _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(_mm256_cmpgt_epi8(x, _mm256_set1_epi8(85 - 128)),
                                                                   _mm256_cmpgt_epi8(x, _mm256_set1_epi8(170 - 128))));
}

/* TQ1_0: 5 base-3 digits a byte of qs, 4 a byte of qh (value digit - 1), scale d. */
static inline DJ_ALWAYS_INLINE void tq1_0_dec(const uint8_t *p, struct kt_sb *o) {
    const struct dj_block_tq1_0 *x = (const void *)p;
    static const short pow3[5] = {1, 3, 9, 27, 81};
    const __m256i q0 = _mm256_loadu_si256((const __m256i *)x->qs);
    DJ_UNROLL for (int n = 0; n < 5; n++) o->q[n] = tq_digit(mul_bytes(q0, _mm256_set1_epi16(pow3[n])));
    const __m128i q1 = _mm_loadu_si128((const __m128i *)(x->qs + 32));
    const __m256i q11 = _mm256_broadcastsi128_si256(q1);
    o->q[5] = tq_digit(mul_bytes(q11, words2(1, 3)));
    o->q[6] = tq_digit(mul_bytes(q11, words2(9, 27)));
    const __m128i qh = _mm_set1_epi32((int)dj_load_u32(x->qh)); /* byte 4n + j = qh[j], times 3^n */
    o->q[7] = tq_digit(mul_bytes(_mm256_set_m128i(qh, q1),
                                 _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27)));
    kt_unit_scales(o, 1);
    o->d = dj_q_f16(&x->d);
}

/* ---- the shared cores ------------------------------------------------------------- */

/* A full 2 x 4 tile's multipliers x_i * d_a(j), pair (i, j) in lane 4i + j (x: the two
 * rows' d, or dmin; the tokens' d_a at a + j * as): one multiply for the 8 pairs, each
 * lane the product the pair's own scalar multiply gives. */
static inline DJ_ALWAYS_INLINE __m256 kt_da8(const uint8_t *a, size_t as) {
    const __m128 da4 = _mm_setr_ps(dj_q_load_f32(a), dj_q_load_f32(a + as), dj_q_load_f32(a + 2 * as),
                                   dj_q_load_f32(a + 3 * as));
    return _mm256_set_m128(da4, da4);
}
static inline DJ_ALWAYS_INLINE __m256 kt_pair8(float x0, float x1, __m256 da8) {
    return _mm256_mul_ps(_mm256_set_m128(_mm_set1_ps(x1), _mm_set1_ps(x0)), da8);
}

/* kt_core's float step on the integer sums is[i][j] (8 lanes: lane l holds bytes 4l .. 4l+3
 * of every 32-element chunk, times their scales; CR's offset terms are added here). */
static inline DJ_ALWAYS_INLINE void kt_fold(const int MR, const int NT, const int CR, const int MN, const int VEC,
                                            const struct kt_sb *const *D, const uint8_t *a, size_t as,
                                            __m256i is[2][4], float acc[2][4], __m256 *vacc, __m256 vc[2][4]) {
    const size_t bo = offsetof(struct dj_block_q8_K, bsums);
    if (!CR) { /* no offset: 8 lanes of natural partial sums, the pair's chain in 8 lanes */
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const uint8_t *ab = a + (size_t)j * as;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(ab + bo));
            const float da = dj_q_load_f32(ab);
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                vc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i][j]), _mm256_set1_ps(D[i]->d * da), vc[i][j]);
                if (MN)
                    vc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, D[i]->mw)),
                                                _mm256_set1_ps(D[i]->dmin * da), vc[i][j]);
            }
        }
        return;
    }
    if (VEC && MR == 2 && NT == 4) { /* the 8 pairs of a full tile at once, pair 4i + j in lane 4i + j */
        __m256i t[8], m[8];
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            const uint8_t *ab = a + (size_t)j * as;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(ab + bo));
            DJ_UNROLL for (int i = 0; i < 2; i++) {
                t[4 * i + j] = CR ? _mm256_add_epi32(is[i][j], _mm256_madd_epi16(bs, D[i]->cw)) : is[i][j];
                if (MN) m[4 * i + j] = _mm256_madd_epi16(bs, D[i]->mw);
            }
        }
        const __m256 da = kt_da8(a, as);
        *vacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dj_q_tree8(t)), kt_pair8(D[0]->d, D[1]->d, da), *vacc);
        if (MN) *vacc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(dj_q_tree8(m)), kt_pair8(D[0]->dmin, D[1]->dmin, da), *vacc);
        return;
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        const uint8_t *ab = a + (size_t)j * as;
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(ab + bo));
        const float da = dj_q_load_f32(ab);
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            __m256i t = is[i][j];
            if (CR) t = _mm256_add_epi32(t, _mm256_madd_epi16(bs, D[i]->cw));
            acc[i][j] = __builtin_fmaf((float)dj_q_hsum_i32(t), D[i]->d * da, acc[i][j]);
            if (MN) acc[i][j] = __builtin_fmaf(-(float)dj_q_hsum_i32(_mm256_madd_epi16(bs, D[i]->mw)), D[i]->dmin * da,
                                               acc[i][j]);
        }
    }
}

/* One super-block of MR decoded rows (D[i]) against NT q8_K tokens (their block at
 * a + j * as).  acc[i][j] is the pair's float chain, one fma per super-block on the
 * exact integer total (and one for the mins): the 8 lanes are summed in integers first,
 * because with an offset (OFF > 0) a lane's partial sum holds offset terms that cancel
 * only across lanes, and rounding it would scale the error with the offset rather than
 * with the dot's own terms.  SG: signed values (sign trick); CR: the offset correction
 * cw; MN: the mins; UN: every scale 1 (TQ: maddubs summed as words, one madd); PM: the
 * scales premultiplied into q (q2_K_decpm).  VEC, for a full 2 x 4 tile: the 8 pairs' chains in the 8 lanes of
 * *vacc (pair (i, j) in lane 4i + j) instead of acc — lane for lane the same float
 * operations on the same totals, so the same bits.  The float step is kt_fold's (above). */
static inline DJ_ALWAYS_INLINE void kt_core(const int MR, const int NT, const int SG, const int CR, const int MN,
                                            const int UN, const int PM, const int VEC, const struct kt_sb *const *D,
                                            const uint8_t *a, size_t as, float acc[2][4], __m256 *vacc, __m256 vc[2][4]) {
    const size_t qo = offsetof(struct dj_block_q8_K, qs);
    __m256i is[2][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) is[i][j] = _mm256_setzero_si256();
    if (PM) { /* scales premultiplied (q2_K_decpm): two chunks as words, one madd by 1 */
        const __m256i one = _mm256_set1_epi16(1);
#pragma GCC unroll 1
        for (int c = 0; c < 8; c += 2) {
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m256i q0 = D[i]->q[c], q1 = D[i]->q[c + 1];
                DJ_UNROLL for (int j = 0; j < NT; j++) {
                    const __m256i *av = (const __m256i *)(a + (size_t)j * as + qo + 32 * (size_t)c);
                    const __m256i w = _mm256_add_epi16(_mm256_maddubs_epi16(q0, _mm256_loadu_si256(av)),
                                                       _mm256_maddubs_epi16(q1, _mm256_loadu_si256(av + 1)));
                    is[i][j] = _mm256_add_epi32(is[i][j], _mm256_madd_epi16(w, one));
                    DJ_CHAIN(is[i][j]);
                }
            }
        }
    } else {
#define KT_STEP(c)                                                                                                   \
    do {                                                                                                             \
        DJ_UNROLL for (int i = 0; i < MR; i++) {                                                                     \
            const __m256i q = D[i]->q[c], s = UN ? q : D[i]->scw[c];                                                 \
            const __m256i qa = SG ? _mm256_sign_epi8(q, q) : q;                                                      \
            DJ_UNROLL for (int j = 0; j < NT; j++) {                                                                 \
                __m256i av = _mm256_loadu_si256((const __m256i *)(a + (size_t)j * as + qo + 32 * (size_t)(c)));      \
                if (SG) av = _mm256_sign_epi8(av, q);                                                                \
                if (UN) /* unit scales: word sums, <= 8 * 2 * 3 * 127 = 6096 */                                   \
                    is[i][j] = _mm256_add_epi16(is[i][j], _mm256_maddubs_epi16(qa, av));                             \
                else                                                                                                 \
                    is[i][j] = _mm256_add_epi32(is[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, av), s));      \
                DJ_CHAIN(is[i][j]);                                                                                  \
            }                                                                                                        \
        }                                                                                                            \
    } while (0)
    if (NT * MR <= 2) {
        DJ_UNROLL for (int c = 0; c < 8; c++) KT_STEP(c);
    } else {
#pragma GCC unroll 1
        for (int c = 0; c < 8; c++) KT_STEP(c);
    }
#undef KT_STEP
    }
    if (UN) DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        is[i][j] = _mm256_madd_epi16(is[i][j], _mm256_set1_epi16(1));
    kt_fold(MR, NT, CR, MN, VEC, D, a, as, is, acc, vacc, vc);
}

/* ---- one token, one super-block: a type's own integer dot ---------------------------
 *
 * The exact totals of kt_core for one (row, token) pair computed the cheapest way for
 * a single token (decode: nothing to amortize a decoded form over), e.g. the signs
 * put on the activations instead of the weights and no offset.  The integers are the
 * same exact numbers, and kt_epilogue is kt_core's float step, so the bits are too. */
struct kt_tot {
    int32_t isum, imin; /* sum of scale * value * a; sum of min * bsums */
    float d, dmin;      /* as struct kt_sb */
};
typedef struct kt_tot (*kt_sb1_fn)(const uint8_t *w, const uint8_t *a);
static inline DJ_ALWAYS_INLINE struct kt_tot kt_sb1_call(kt_sb1_fn f, const uint8_t *w, const uint8_t *a) {
    return f(w, a);
}
static inline DJ_ALWAYS_INLINE void kt_epilogue(const int MN, struct kt_tot t, const uint8_t *ab, float *acc) {
    const float da = dj_q_load_f32(ab);
    *acc = __builtin_fmaf((float)t.isum, t.d * da, *acc);
    if (MN) *acc = __builtin_fmaf(-(float)t.imin, t.dmin * da, *acc);
}

static inline struct kt_tot kt_no_sb1(const uint8_t *w, const uint8_t *a) {
    (void)w;
    (void)a;
    return (struct kt_tot){0, 0, 0, 0};
}

static inline struct kt_tot iq2_xs_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq2_xs *x = (const void *)p;
    const uint8_t *qs = (const uint8_t *)x->qs, *a = ab + offsetof(struct dj_block_q8_K, qs);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i acc = _mm256_setzero_si256();
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        uint16_t q[4];
        memcpy(q, qs + 8 * c, 8);
        const __m256i g = _mm256_set_epi64x((long long)dj_iq2xs_grid[q[3] & 511], (long long)dj_iq2xs_grid[q[2] & 511],
                                            (long long)dj_iq2xs_grid[q[1] & 511], (long long)dj_iq2xs_grid[q[0] & 511]);
        const __m256i neg = _mm256_set_epi64x((long long)dj_ksigns64[q[3] >> 9], (long long)dj_ksigns64[q[2] >> 9],
                                              (long long)dj_ksigns64[q[1] >> 9], (long long)dj_ksigns64[q[0] >> 9]);
        const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * c)), _mm256_or_si256(neg, one));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g, av),
                                                      words2(2 * (x->scales[c] & 0xF) + 1, 2 * (x->scales[c] >> 4) + 1)));
    }
    return (struct kt_tot){dj_q_hsum_i32(acc), 0, dj_q_f16(&x->d) * 0.125f, 0};
}

static inline struct kt_tot iq2_s_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq2_s *x = (const void *)p;
    const uint8_t *signs = x->qs + DJ_QK_K / 8, *a = ab + offsetof(struct dj_block_q8_K, qs);
    const __m256i one = _mm256_set1_epi8(1);
    /* the 32 grid indices at once: qs[i] | ((qh[i / 4] << (8 - 2 (i % 4))) & 0x300), the shifts by
     * multiplies, as 16-bit lanes */
    uint16_t ix[32];
    {
        const __m128i qh = _mm_loadl_epi64((const __m128i *)x->qh);
        const __m256i m = _mm256_setr_epi16(256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4);
        DJ_UNROLL for (int v = 0; v < 2; v++) {
            const int b = 4 * v;
            const __m128i ctl = _mm_setr_epi8((char)b, (char)b, (char)b, (char)b, (char)(b + 1), (char)(b + 1),
                                              (char)(b + 1), (char)(b + 1), (char)(b + 2), (char)(b + 2), (char)(b + 2),
                                              (char)(b + 2), (char)(b + 3), (char)(b + 3), (char)(b + 3), (char)(b + 3));
            const __m256i h = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(qh, ctl)), m);
            _mm256_storeu_si256((__m256i *)(ix + 16 * v),
                                _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(0x300)),
                                                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16 * v)))));
        }
    }
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int c = 0; c < 8; c++) {
        const uint16_t *i4 = ix + 4 * c;
        const __m256i g = _mm256_set_epi64x((long long)dj_iq2s_grid[i4[3]], (long long)dj_iq2s_grid[i4[2]],
                                            (long long)dj_iq2s_grid[i4[1]], (long long)dj_iq2s_grid[i4[0]]);
        const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * c)),
                                            _mm256_or_si256(dj_q_bits32_mask(dj_load_u32(signs + 4 * c)), one));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g, av),
                                                      words2(2 * (x->scales[c] & 0xF) + 1, 2 * (x->scales[c] >> 4) + 1)));
    }
    return (struct kt_tot){dj_q_hsum_i32(acc), 0, dj_q_f16(&x->d) * 0.125f, 0};
}

static inline struct kt_tot iq3_xxs_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq3_xxs *x = (const void *)p;
    const uint8_t *qs = x->qs, *sas = x->qs + DJ_QK_K / 4, *a = ab + offsetof(struct dj_block_q8_K, qs);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i acc = _mm256_setzero_si256();
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const uint8_t *q = qs + 8 * c;
        const uint32_t s = dj_load_u32(sas + 4 * c);
        const __m256i g = _mm256_setr_epi32((int)dj_iq3xxs_grid[q[0]], (int)dj_iq3xxs_grid[q[1]], (int)dj_iq3xxs_grid[q[2]],
                                            (int)dj_iq3xxs_grid[q[3]], (int)dj_iq3xxs_grid[q[4]], (int)dj_iq3xxs_grid[q[5]],
                                            (int)dj_iq3xxs_grid[q[6]], (int)dj_iq3xxs_grid[q[7]]);
        const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * c)), _mm256_or_si256(ksigns4(s), one));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g, av), _mm256_set1_epi16((short)(2 * (s >> 28) + 1))));
    }
    return (struct kt_tot){dj_q_hsum_i32(acc), 0, dj_q_f16(&x->d) * 0.25f, 0};
}

static inline struct kt_tot iq3_s_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq3_s *x = (const void *)p;
    const uint8_t *a = ab + offsetof(struct dj_block_q8_K, qs);
    const __m256i one = _mm256_set1_epi8(1);
    /* the 64 grid indices at once: qs[i] | (bit i % 8 of qh[i / 8]) << 8, as 16-bit lanes */
    uint16_t ix[64];
    {
        const __m128i qh = _mm_loadl_epi64((const __m128i *)x->qh);
        const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
        DJ_UNROLL for (int v = 0; v < 4; v++) {
            const __m128i ctl = _mm_setr_epi8((char)(2 * v), (char)(2 * v), (char)(2 * v), (char)(2 * v), (char)(2 * v),
                                              (char)(2 * v), (char)(2 * v), (char)(2 * v), (char)(2 * v + 1),
                                              (char)(2 * v + 1), (char)(2 * v + 1), (char)(2 * v + 1), (char)(2 * v + 1),
                                              (char)(2 * v + 1), (char)(2 * v + 1), (char)(2 * v + 1));
            const __m256i h = _mm256_and_si256(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(qh, ctl)), bit);
            const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi16(h, bit), _mm256_set1_epi16(0x100));
            _mm256_storeu_si256((__m256i *)(ix + 16 * v),
                                _mm256_or_si256(hi, _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16 * v)))));
        }
    }
    __m256i acc = _mm256_setzero_si256();
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const uint16_t *i8 = ix + 8 * c;
        const __m256i g = _mm256_setr_epi32((int)dj_iq3s_grid[i8[0]], (int)dj_iq3s_grid[i8[1]], (int)dj_iq3s_grid[i8[2]],
                                            (int)dj_iq3s_grid[i8[3]], (int)dj_iq3s_grid[i8[4]], (int)dj_iq3s_grid[i8[5]],
                                            (int)dj_iq3s_grid[i8[6]], (int)dj_iq3s_grid[i8[7]]);
        const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * c)),
                                            _mm256_or_si256(dj_q_bits32_mask(dj_load_u32(x->signs + 4 * c)), one));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g, av),
                                                      _mm256_set1_epi16((short)(2 * ((x->scales[c / 2] >> 4 * (c % 2)) & 0xF) + 1))));
    }
    return (struct kt_tot){dj_q_hsum_i32(acc), 0, dj_q_f16(&x->d), 0};
}

/* IQ1_S's 32 grid indices, as 16-bit lanes: qs[i] | ((qh[i/4] >> 3 (i%4)) & 7) << 8 (the
 * per-lane shifts by multiplies: << 8, 5, 2 by mullo, >> 1 by mulhi) — one vector pass
 * instead of four scalar operations an index. */
static inline void iq1_s_idx(const struct dj_block_iq1_s *x, __m256i idx[2]) {
    const __m128i q = _mm_loadu_si128((const __m128i *)x->qh);
    const __m256i m1 = _mm256_setr_epi16(256, 32, 4, 0, 256, 32, 4, 0, 256, 32, 4, 0, 256, 32, 4, 0);
    const __m256i m2 = _mm256_setr_epi16(0, 0, 0, -32768, 0, 0, 0, -32768, 0, 0, 0, -32768, 0, 0, 0, -32768);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        const __m128i qq = h ? _mm_unpackhi_epi16(q, q) : _mm_unpacklo_epi16(q, q);
        const __m256i H = _mm256_set_m128i(_mm_unpackhi_epi32(qq, qq), _mm_unpacklo_epi32(qq, qq));
        const __m256i sh = _mm256_or_si256(_mm256_mullo_epi16(H, m1), _mm256_mulhi_epu16(H, m2));
        idx[h] = _mm256_or_si256(_mm256_and_si256(sh, _mm256_set1_epi16(0x700)),
                                 _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16 * h))));
    }
}
/* 4 entries of a 64-bit grid at the 16-bit indices in lanes 4c..4c+3 of idx (c = 0..3) */
static inline __m256i gather4(const uint64_t *grid, __m256i idx, int c) {
    const __m128i half = c < 2 ? _mm256_castsi256_si128(idx) : _mm256_extracti128_si256(idx, 1);
    const __m128i i4 = _mm_cvtepu16_epi32(c % 2 ? _mm_srli_si128(half, 8) : half);
    return _mm256_i32gather_epi64((const long long *)grid, i4, 8);
}

/* IQ1_S: sum over 32 of (8g + delta) a = 8 sum (g + 1) a + (delta - 8) sum a, the sums of a
 * from the bsums */
static inline struct kt_tot iq1_s_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq1_s *x = (const void *)p;
    const uint8_t *a = ab + offsetof(struct dj_block_q8_K, qs);
    int16_t bs[16];
    memcpy(bs, ab + offsetof(struct dj_block_q8_K, bsums), sizeof bs);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i idx[2];
    iq1_s_idx(x, idx);
    uint16_t ix[32]; /* scalar loads of vector-made indices: measured faster than AVX2 gathers (Zen 3) */
    _mm256_storeu_si256((__m256i *)ix, idx[0]);
    _mm256_storeu_si256((__m256i *)(ix + 16), idx[1]);
    __m256i acc = _mm256_setzero_si256();
    int32_t corr = 0;
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const unsigned h = dj_load_u16(&x->qh[c]);
        const uint16_t *i4 = ix + 4 * c;
        const __m256i g1 = _mm256_add_epi8(_mm256_set_epi64x((long long)dj_iq1s_grid[i4[3]], (long long)dj_iq1s_grid[i4[2]],
                                                             (long long)dj_iq1s_grid[i4[1]], (long long)dj_iq1s_grid[i4[0]]),
                                           one);
        const int sc = 2 * (int)((h >> 12) & 7) + 1;
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g1, _mm256_loadu_si256((const __m256i *)(a + 32 * c))),
                                                      _mm256_set1_epi16((short)(8 * sc))));
        corr += sc * (h & 0x8000 ? -9 : -7) * (bs[2 * c] + bs[2 * c + 1]);
    }
    return (struct kt_tot){dj_q_hsum_i32(acc) + corr, 0, dj_q_f16(&x->d) * 0.125f, 0};
}

/* IQ1_M: u = 8 (g + 1) + delta + 1 per 8 (as iq1_m_dec), the -9 offset from the bsums in
 * scalar integers */
static inline struct kt_tot iq1_m_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq1_m *x = (const void *)p;
    const uint8_t *a = ab + offsetof(struct dj_block_q8_K, qs);
    int16_t bs[16];
    memcpy(bs, ab + offsetof(struct dj_block_q8_K, bsums), sizeof bs);
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    /* the 32 grid indices at once: qs[i] | ((qh[i/2] >> 4 (i%2)) & 7) << 8, the shifts by
     * multiplies (<< 8, << 4), as 16-bit lanes */
    uint16_t ix[32];
    {
        const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
        const __m256i m = _mm256_setr_epi16(256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16);
        DJ_UNROLL for (int h = 0; h < 2; h++) {
            const __m128i q8 = h ? _mm_unpackhi_epi8(qh, qh) : _mm_unpacklo_epi8(qh, qh); /* qh[i/2] */
            const __m256i sh = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(q8), m);
            _mm256_storeu_si256((__m256i *)(ix + 16 * h),
                                _mm256_or_si256(_mm256_and_si256(sh, _mm256_set1_epi16(0x700)),
                                                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16 * h)))));
        }
    }
    /* delta + 1 of group l: 0 where bit 3 (l even) or 7 (l odd) of qh[2c + l/2] is set, else 2 */
    const __m256i dbit = _mm256_setr_epi16(8, 8, 8, 8, 0x80, 0x80, 0x80, 0x80, 0x800, 0x800, 0x800, 0x800,
                                           (short)0x8000, (short)0x8000, (short)0x8000, (short)0x8000);
    __m256i acc = _mm256_setzero_si256();
    int32_t corr = 0;
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const uint16_t *i4 = ix + 4 * c;
        const __m256i h2 = _mm256_set1_epi16((short)dj_load_u16(x->qh + 2 * c));
        const __m256i dp1 = _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h2, dbit), _mm256_setzero_si256()),
                                             _mm256_set1_epi8(2));
        const __m256i u = iq1_u(dj_iq1s_grid[i4[0]], dj_iq1s_grid[i4[1]], dj_iq1s_grid[i4[2]], dj_iq1s_grid[i4[3]], dp1);
        const unsigned s = sc[c / 2] >> 6 * (c % 2);
        const int lo = 2 * (int)(s & 7) + 1, hi = 2 * (int)((s >> 3) & 7) + 1;
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(a + 32 * c))),
                                                      words2(lo, hi)));
        corr -= 9 * (lo * bs[2 * c] + hi * bs[2 * c + 1]);
    }
    return (struct kt_tot){dj_q_hsum_i32(acc) + corr, 0, dj_q_f16(&dh) * 0.125f, 0};
}

static inline struct kt_tot iq2_xxs_sb1(const uint8_t *p, const uint8_t *ab) {
    const struct dj_block_iq2_xxs *x = (const void *)p;
    const uint8_t *qs = (const uint8_t *)x->qs, *a = ab + offsetof(struct dj_block_q8_K, qs);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i acc = _mm256_setzero_si256();
    DJ_UNROLL for (int c = 0; c < 8; c++) {
        const uint8_t *q = qs + 8 * c; /* grid indices as byte loads: cheaper than shifting a word */
        const uint32_t a1 = dj_load_u32(q + 4);
        const __m256i g = _mm256_set_epi64x((long long)dj_iq2xxs_grid[q[3]], (long long)dj_iq2xxs_grid[q[2]],
                                            (long long)dj_iq2xxs_grid[q[1]], (long long)dj_iq2xxs_grid[q[0]]);
        const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * c)),
                                            _mm256_or_si256(ksigns4(a1), one));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(g, av),
                                                      _mm256_set1_epi16((short)(2 * (a1 >> 28) + 1))));
    }
    return (struct kt_tot){dj_q_hsum_i32(acc), 0, dj_q_f16(&x->d) * 0.125f, 0};
}

/* ---- tiles over a decoded buffer (prefill) ------------------------------------------- */

#define KT_MR 2     /* rows a decoded tile */
#define KT_NT 4     /* tokens a tile */
#define KT_SMALL 4  /* up to this many tokens: decode as we go, no buffer */

/* NAME(MR, NT, flags, D, nb, a, as, c, ldc): MR rows x NT tokens from the decoded rows D
 * (row i at D + i * nb), all nb super-blocks, through CORE (kt_core, or kt512_core on
 * AVX-512: the same integers and float steps) */
#define KT_TILE_BODY(NAME, CORE)                                                                                   \
    static inline DJ_ALWAYS_INLINE void NAME(const int MR, const int NT, const int SG, const int CR, const int MN,  \
                                             const int UN, const int PM, const struct kt_sb *D, int64_t nb,          \
                                             const uint8_t *a, size_t as, float *c, int64_t ldc) {                   \
        float acc[2][4];                                                                                           \
        __m256 vacc = _mm256_setzero_ps(), vc[2][4];                                                               \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) {                            \
            acc[i][j] = 0;                                                                                         \
            vc[i][j] = _mm256_setzero_ps();                                                                        \
        }                                                                                                          \
        for (int64_t b = 0; b < nb; b++) {                                                                         \
            const struct kt_sb *Db[2] = {D + b, D + nb + b};                                                       \
            CORE(MR, NT, SG, CR, MN, UN, PM, 1, Db, a + (size_t)b * sizeof(struct dj_block_q8_K), as, acc, &vacc, vc); \
        }                                                                                                          \
        if (!CR) {                                                                                                 \
            DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)                          \
                c[j * ldc + i] = dj_q_hsum8(vc[i][j]);                                                             \
            return;                                                                                                \
        }                                                                                                          \
        if (MR == 2 && NT == 4) {                                                                                  \
            float v[8];                                                                                            \
            _mm256_storeu_ps(v, vacc);                                                                             \
            DJ_UNROLL for (int i = 0; i < 2; i++) DJ_UNROLL for (int j = 0; j < 4; j++) c[j * ldc + i] = v[4 * i + j]; \
            return;                                                                                                \
        }                                                                                                          \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + i] = acc[i][j];  \
    }
KT_TILE_BODY(kt_tile_body, kt_core)

typedef void (*kt_tile_fn)(const struct kt_sb *D, int64_t nb, const uint8_t *a, size_t as, float *c, int64_t ldc);

#define KT_TILE_FN_OF(BODY, name, MR, NT, SG, CR, MN, UN, PM)                                                     \
    static void name##_##MR##x##NT(const struct kt_sb *D, int64_t nb, const uint8_t *a, size_t as, float *c,       \
                                   int64_t ldc) {                                                                  \
        BODY(MR, NT, SG, CR, MN, UN, PM, D, nb, a, as, c, ldc);                                                    \
    }
#define KT_TILE_FN(name, MR, NT, SG, CR, MN, UN, PM) KT_TILE_FN_OF(kt_tile_body, name, MR, NT, SG, CR, MN, UN, PM)
#define KT_TILE_SET(name, DEF, ...)                                                                                \
    DEF(name, 1, 1, __VA_ARGS__) DEF(name, 1, 2, __VA_ARGS__) DEF(name, 1, 3, __VA_ARGS__)                         \
    DEF(name, 1, 4, __VA_ARGS__) DEF(name, 2, 1, __VA_ARGS__) DEF(name, 2, 2, __VA_ARGS__)                         \
    DEF(name, 2, 3, __VA_ARGS__) DEF(name, 2, 4, __VA_ARGS__)                                                      \
    static const kt_tile_fn name[2][4] = {{name##_1x1, name##_1x2, name##_1x3, name##_1x4},                        \
                                          {name##_2x1, name##_2x2, name##_2x3, name##_2x4}};

/* the flag combinations the types use: (signed, correction, mins, unit scales, premultiplied) */
KT_TILE_SET(kt_tiles_min, KT_TILE_FN, 0, 0, 1, 0, 0) /* Q5_K */
KT_TILE_SET(kt_tiles_pm, KT_TILE_FN, 0, 0, 1, 0, 1)  /* Q2_K (decoded by q2_K_decpm) */
KT_TILE_SET(kt_tiles_off, KT_TILE_FN, 0, 1, 0, 0, 0) /* Q3_K, IQ1/IQ2/IQ3 */
KT_TILE_SET(kt_tiles_sgn, KT_TILE_FN, 1, 0, 0, 0, 0) /* IQ4_XS */
KT_TILE_SET(kt_tiles_unit, KT_TILE_FN, 0, 1, 0, 1, 0) /* TQ1_0, TQ2_0 */

/* ---- per type: decode-as-you-go rows, matmul, dot, dequantize ------------------------ */

/* The shared drive of the decoded-buffer path: token chunks, KT_MR-row tiles decoded
 * into the thread's scratch (dec(row, buf) decodes one whole row), KT_NT-token tiles.
 * false, and nothing done, without scratch. */
static bool kt_drive(const kt_tile_fn tiles[2][4], void (*dec_row)(const uint8_t *w, int64_t nb, struct kt_sb *dst),
                     int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc,
                     int64_t r0, int64_t r1, int64_t n_tok) {
    struct kt_sb *buf = dj_kernel_scratch((size_t)KT_MR * (size_t)nb * sizeof(struct kt_sb));
    if (!buf) return false;
    int64_t tok_chunk = (int64_t)(((size_t)256 << 10) / as);
    tok_chunk -= tok_chunk % KT_NT;
    if (tok_chunk < KT_NT) tok_chunk = KT_NT;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t t1 = t0 + tok_chunk < n_tok ? t0 + tok_chunk : n_tok;
        for (int64_t r = r0; r < r1; r += KT_MR) {
            const int mr = (int)(r1 - r < KT_MR ? r1 - r : KT_MR);
            for (int i = 0; i < mr; i++) dec_row(w + (size_t)(r + i) * ws, nb, buf + (size_t)i * (size_t)nb);
            for (int64_t t = t0; t < t1; t += KT_NT) {
                const int nt = (int)(t1 - t < KT_NT ? t1 - t : KT_NT);
                tiles[mr - 1][nt - 1](buf, nb, a + (size_t)t * as, as, c + t * ldc + r, ldc);
            }
        }
    }
    return true;
}

/* the prefetch of a weight block dj_avx2_pf bytes ahead (the rows are one stream: row r + 1
 * follows row r; without it, decode read ~60 % of the bandwidth) */
static inline DJ_ALWAYS_INLINE void kt_prefetch(const uint8_t *wb, size_t bs) {
    for (size_t l = 0; dj_avx2_pf && 64 * l < bs; l++) _mm_prefetch((const char *)wb + dj_avx2_pf + 64 * l, _MM_HINT_T0);
}
/* X_rows(NT, ...), an always-inline template over NT tokens, as functions of 1, 2 and 4 tokens;
 * and the loop that runs n_tok tokens through them (in a matmul: w, ws, a, as, c, ldc, r0, r1) */
#define KT_ROWS124(X)                                                                                              \
    static void X##_rows1(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c,          \
                          int64_t ldc, int64_t r0, int64_t r1) {                                                   \
        X##_rows(1, nb, w, ws, a, as, c, ldc, r0, r1);                                                             \
    }                                                                                                              \
    static void X##_rows2(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c,          \
                          int64_t ldc, int64_t r0, int64_t r1) {                                                   \
        X##_rows(2, nb, w, ws, a, as, c, ldc, r0, r1);                                                             \
    }                                                                                                              \
    static void X##_rows4(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c,          \
                          int64_t ldc, int64_t r0, int64_t r1) {                                                   \
        X##_rows(4, nb, w, ws, a, as, c, ldc, r0, r1);                                                             \
    }
#define KT_TOKENS(X, NB)                                                                                           \
    for (int64_t t = 0; t < n_tok;) {                                                                              \
        const int64_t n = n_tok - t;                                                                               \
        const uint8_t *at = a + (size_t)t * as;                                                                    \
        float *ct = c + t * ldc;                                                                                   \
        if (n >= 4) X##_rows4(NB, w, ws, at, as, ct, ldc, r0, r1), t += 4;                                         \
        else if (n >= 2) X##_rows2(NB, w, ws, at, as, ct, ldc, r0, r1), t += 2;                                    \
        else X##_rows1(NB, w, ws, at, as, ct, ldc, r0, r1), t += 1;                                                \
    }
/* K-type T (block struct dj_block_T, decoder T_dec; TD: the decoder of the prefill tiles, T_dec
 * or one for them): the rows path for NT tokens, the
 * matmul, the dot. */
#define KT_TYPE(T, SG, CR, MN, UN, TILES, TD, D1, SB1)                                                                   \
    static void T##_dec_row(const uint8_t *w, int64_t nb, struct kt_sb *o) {                                       \
        for (int64_t b = 0; b < nb; b++) TD(w + (size_t)b * sizeof(struct dj_block_##T), o + b);                  \
    }                                                                                                              \
    static inline DJ_ALWAYS_INLINE void T##_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws,           \
                                                 const uint8_t *a, size_t as, float *c, int64_t ldc, int64_t r0,   \
                                                 int64_t r1) {                                                     \
        for (int64_t r = r0; r < r1; r++) {                                                                        \
            float acc[2][4];                                                                                       \
            __m256 vc[2][4];                                                                                       \
            DJ_UNROLL for (int j = 0; j < NT; j++) {                                                               \
                acc[0][j] = 0;                                                                                     \
                vc[0][j] = _mm256_setzero_ps();                                                                    \
            }                                                                                                      \
            const uint8_t *wr = w + (size_t)r * ws;                                                                \
            for (int64_t b = 0; b < nb; b++) {                                                                     \
                const uint8_t *wb = wr + (size_t)b * sizeof(struct dj_block_##T);                                  \
                const uint8_t *ab = a + (size_t)b * sizeof(struct dj_block_q8_K);                                  \
                kt_prefetch(wb, sizeof(struct dj_block_##T));                                                      \
                if (NT == 1 && D1) { /* one token: the type's own integer dot, the same total */                   \
                    const struct kt_tot t = kt_sb1_call(SB1, wb, ab);                                              \
                    kt_epilogue(MN, t, ab, acc[0]);                                                                \
                    continue;                                                                                      \
                }                                                                                                  \
                struct kt_sb blk;                                                                                  \
                const struct kt_sb *D[2] = {&blk, &blk};                                                           \
                T##_dec(wb, &blk);                                                                                 \
                kt_core(1, NT, SG, CR, MN, UN, 0, 0, D, ab, as, acc, NULL, vc);                                       \
            }                                                                                                      \
            DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + r] = CR ? acc[0][j] : dj_q_hsum8(vc[0][j]);         \
        }                                                                                                          \
    }                                                                                                              \
    KT_ROWS124(T)                                                                                                  \
    /* the matmul on the prefill tiles `tiles` (TILES; the avx512 table: its kt512 ones) */                  \
    static inline DJ_ALWAYS_INLINE void T##_matmul_on(const kt_tile_fn tiles[2][4], int64_t k, const void *wv,       \
                                                      size_t ws, const void *av, size_t as, float *c, int64_t ldc,   \
                                                      int64_t r0, int64_t r1, int64_t n_tok) {                       \
        const uint8_t *w = wv, *a = av;                                                                            \
        const int64_t nb = k / DJ_QK_K;                                                                            \
        if (n_tok > KT_SMALL && kt_drive(tiles, T##_dec_row, nb, w, ws, a, as, c, ldc, r0, r1, n_tok)) return;     \
        KT_TOKENS(T, nb) /* few tokens, or no scratch: decode as we go */                                       \
    }                                                                                                              \
    static void T##_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc, \
                           int64_t r0, int64_t r1, int64_t n_tok) {                                                \
        T##_matmul_on(TILES, k, wv, ws, av, as, c, ldc, r0, r1, n_tok);                                            \
    }                                                                                                              \
    static float T##_dot(int64_t k, const void *w, const void *a) {                                                \
        float c;                                                                                                   \
        T##_rows1(k / DJ_QK_K, w, 0, a, 0, &c, 1, 0, 1);                                                           \
        return c;                                                                                                  \
    }

KT_TYPE(q5_K, 0, 0, 1, 0, kt_tiles_min, q5_K_dec, 0, kt_no_sb1)
KT_TYPE(q3_K, 0, 1, 0, 0, kt_tiles_off, q3_K_dec, 0, kt_no_sb1)
KT_TYPE(q2_K, 0, 0, 1, 0, kt_tiles_pm, q2_K_decpm, 0, kt_no_sb1)
KT_TYPE(iq4_xs, 1, 0, 0, 0, kt_tiles_sgn, iq4_xs_dec, 0, kt_no_sb1)
KT_TYPE(iq2_xxs, 0, 1, 0, 0, kt_tiles_off, iq2_xxs_dec, 1, iq2_xxs_sb1)
KT_TYPE(iq2_xs, 0, 1, 0, 0, kt_tiles_off, iq2_xs_dec, 1, iq2_xs_sb1)
KT_TYPE(iq2_s, 0, 1, 0, 0, kt_tiles_off, iq2_s_dec, 1, iq2_s_sb1)
KT_TYPE(iq3_xxs, 0, 1, 0, 0, kt_tiles_off, iq3_xxs_dec, 1, iq3_xxs_sb1)
KT_TYPE(iq3_s, 0, 1, 0, 0, kt_tiles_off, iq3_s_dec, 1, iq3_s_sb1)
KT_TYPE(iq1_s, 0, 1, 0, 0, kt_tiles_off, iq1_s_dec, 1, iq1_s_sb1)
KT_TYPE(iq1_m, 0, 1, 0, 0, kt_tiles_off, iq1_m_dec, 1, iq1_m_sb1)
KT_TYPE(tq1_0, 0, 1, 0, 1, kt_tiles_unit, tq1_0_dec, 0, kt_no_sb1)
KT_TYPE(tq2_0, 0, 1, 0, 1, kt_tiles_unit, tq2_0_dec, 0, kt_no_sb1)

/* ---- dequantizers ------------------------------------------------------------------
 *
 * From the decoded form: value v = u - off (or q, signed), sub-block factor A = d *
 * scale (d with the type's power of two), y = v * A, or for the types with mins y =
 * v * A - dmin * min (ggml's dl * q - ml).  v * A is exact for every type (at most
 * 11 + 6 + 7 significant bits), so only the subtraction rounds, as in ggml. */

static inline void store_v8(float *y, __m128i v8, int off, __m256 A, const int mins, __m256 B) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(v8), _mm256_set1_epi32(off)));
    __m256 r = _mm256_mul_ps(v, A);
    if (mins) r = _mm256_sub_ps(r, B);
    _mm256_storeu_ps(y, r);
}

static inline DJ_ALWAYS_INLINE void kt_dequant_sb(const struct kt_sb *D, int off, const int mins, float *y) {
    int16_t mw[16];
    _mm256_storeu_si256((__m256i *)mw, D->mw);
    for (int c = 0; c < 8; c++, y += 32) {
        int16_t s[16];
        _mm256_storeu_si256((__m256i *)s, D->scw[c]);
        uint8_t q[32];
        _mm256_storeu_si256((__m256i *)q, D->q[c]);
        for (int h = 0; h < 2; h++) {
            const __m256 A = _mm256_set1_ps(D->d * (float)s[8 * h]);
            const __m256 B = _mm256_set1_ps(D->dmin * (float)mw[2 * c + h]);
            store_v8(y + 16 * h, _mm_loadl_epi64((const __m128i *)(q + 16 * h)), off, A, mins, B);
            store_v8(y + 16 * h + 8, _mm_loadl_epi64((const __m128i *)(q + 16 * h + 8)), off, A, mins, B);
        }
    }
}

#define KT_DEQUANT(T, OFF, MN)                                                                                     \
    static void T##_dequant(const void *xv, float *y, int64_t n) {                                                 \
        const uint8_t *x = xv;                                                                                     \
        for (int64_t b = 0; b < n / DJ_QK_K; b++, y += DJ_QK_K) {                                                  \
            struct kt_sb blk;                                                                                      \
            T##_dec(x + (size_t)b * sizeof(struct dj_block_##T), &blk);                                            \
            kt_dequant_sb(&blk, OFF, MN, y);                                                                       \
        }                                                                                                          \
    }
KT_DEQUANT(q5_K, 0, 1)
KT_DEQUANT(q3_K, 4, 0)
KT_DEQUANT(q2_K, 0, 1)
KT_DEQUANT(iq4_xs, 0, 0)
KT_DEQUANT(iq2_xxs, 43, 0)
KT_DEQUANT(iq2_xs, 43, 0)
KT_DEQUANT(iq2_s, 43, 0)
KT_DEQUANT(iq3_xxs, 62, 0)
KT_DEQUANT(iq3_s, 15, 0)
KT_DEQUANT(iq1_s, 9, 0)
KT_DEQUANT(iq1_m, 9, 0)
KT_DEQUANT(tq1_0, 1, 0)
KT_DEQUANT(tq2_0, 1, 0)

/* ---- TQ1_0 decode on AVX-512 (the avx512 table and those above it) ---------------------
 *
 * TQ1_0's decode is compute-bound on AVX2 (its base-3 digits: 0.74-0.80x llama.cpp).  Here
 * one super-block's 256 digits are made in four 512-bit vectors in element order (as
 * tq1_0_dec's eight: qs[0..31] times 3^n, qs[32..47] times 3^n, qh times 3^n), each digit
 * ((q * 3) >> 8, ggml's) as two unsigned compares — q > 85 and q > 170 — and the total
 * sum(u * a) - sum(a) (u = digit = level + 1; sum(a) from the bsums) by vpdpbusd: the same
 * exact integer as kt_core's, and kt_epilogue's fma after it, so the bits are the avx2
 * table's (batches of more than 4 tokens run tq1_0_matmul itself). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,bmi2")
/* ---- prefill tiles on AVX-512 VNNI (the avx512 table; the amx table's batches of 5-16) ---
 *
 * kt_core's integers two chunks a 512-bit vector (q[2p], q[2p + 1] and the activations' 64
 * bytes are adjacent): the scaled types by vpmaddubsw then vpdpwssd against the scale words
 * (kt_core's madd and add in one instruction), the premultiplied (Q2_K) and unit-scale (TQ)
 * ones by vpdpbusd alone (exact int32: nothing to saturate), IQ4_XS's signs by abs and a
 * masked negation (vpsignb has no 512-bit form).  Lanes l and l + 8 (chunks 2p and 2p + 1)
 * are added at the end: lane l's integer is then the one kt_core's lane l holds, and
 * kt_fold's float steps follow — the avx2 table's bits. */
/* the integer part: z[i][j], 16 lanes (lane l + 8h: chunks 2p + h) */
static inline DJ_ALWAYS_INLINE void kt512_int(const int MR, const int NT, const int SG, const int UN, const int PM,
                                              const struct kt_sb *const *D, const uint8_t *a, size_t as,
                                              __m512i z[2][4]) {
    const size_t qo = offsetof(struct dj_block_q8_K, qs);
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++) z[i][j] = _mm512_setzero_si512();
    DJ_UNROLL for (int p = 0; p < 4; p++) {
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            const __m512i q = _mm512_loadu_si512(&D[i]->q[2 * p]);
            const __m512i qa = SG ? _mm512_abs_epi8(q) : q;
            const __mmask64 neg = SG ? _mm512_movepi8_mask(q) : 0;
            const __m512i sc = UN || PM ? _mm512_setzero_si512() : _mm512_loadu_si512(&D[i]->scw[2 * p]);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                __m512i av = _mm512_loadu_si512(a + (size_t)j * as + qo + 64 * (size_t)p);
                if (SG) av = _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av);
                z[i][j] = UN || PM ? _mm512_dpbusd_epi32(z[i][j], qa, av)
                                   : _mm512_dpwssd_epi32(z[i][j], _mm512_maddubs_epi16(qa, av), sc);
            }
        }
    }
}
static inline DJ_ALWAYS_INLINE void kt512_core(const int MR, const int NT, const int SG, const int CR, const int MN,
                                               const int UN, const int PM, const int VEC, const struct kt_sb *const *D,
                                               const uint8_t *a, size_t as, float acc[2][4], __m256 *vacc,
                                               __m256 vc[2][4]) {
    __m512i z[2][4];
    kt512_int(MR, NT, SG, UN, PM, D, a, as, z);
    __m256i is[2][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        is[i][j] = _mm256_add_epi32(_mm512_castsi512_si256(z[i][j]), _mm512_extracti64x4_epi64(z[i][j], 1));
    kt_fold(MR, NT, CR, MN, VEC, D, a, as, is, acc, vacc, vc);
}

/* A full 2 x 4 tile of a type without an offset (Q2_K, Q5_K, IQ4_XS): kt_fold's 8-lane
 * chains two pairs a 512-bit vector (tokens 2h and 2h + 1 of row i in its halves), so the
 * lane fold, the conversions, the fma and the mins' madd / fnmadd each serve two pairs; the
 * multipliers d_i * da_j (dmin_i * da_j) made for the 8 pairs by one multiply and spread
 * by a permute — the same float operations on the same values as kt_fold's, lane for lane. */
static inline DJ_ALWAYS_INLINE void kt512_lanes24(const int SG, const int MN, const int UN, const int PM,
                                                  const struct kt_sb *D, int64_t nb, const uint8_t *a, size_t as,
                                                  float *c, int64_t ldc) {
    const size_t bo = offsetof(struct dj_block_q8_K, bsums), abs_ = sizeof(struct dj_block_q8_K);
    __m512 vc[2][2];
    DJ_UNROLL for (int i = 0; i < 2; i++) DJ_UNROLL for (int h = 0; h < 2; h++) vc[i][h] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct kt_sb *Db[2] = {D + b, D + nb + b};
        const uint8_t *ab = a + (size_t)b * abs_;
        __m512i z[2][4];
        kt512_int(2, 4, SG, UN, PM, Db, ab, as, z);
        const __m256 da = kt_da8(ab, as);
        const __m512 P = _mm512_castps256_ps512(kt_pair8(Db[0]->d, Db[1]->d, da));
        const __m512 Pm = MN ? _mm512_castps256_ps512(kt_pair8(Db[0]->dmin, Db[1]->dmin, da)) : _mm512_setzero_ps();
        __m512i bs[2];
        DJ_UNROLL for (int h = 0; h < 2; h++)
            bs[h] = MN ? _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(
                                                (const __m256i *)(ab + (size_t)(2 * h) * as + bo))),
                                            _mm256_loadu_si256((const __m256i *)(ab + (size_t)(2 * h + 1) * as + bo)), 1)
                       : _mm512_setzero_si512();
        DJ_UNROLL for (int i = 0; i < 2; i++) {
            const __m512i mw = MN ? _mm512_broadcast_i64x4(Db[i]->mw) : _mm512_setzero_si512();
            DJ_UNROLL for (int h = 0; h < 2; h++) {
                const int k0 = 4 * i + 2 * h; /* pairs (i, 2h), (i, 2h + 1): lanes k0, k0 + 1 of P */
                const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi32(k0), _mm256_set1_epi32(k0 + 1), 1);
                const __m512i zs = _mm512_add_epi32(_mm512_shuffle_i64x2(z[i][2 * h], z[i][2 * h + 1], 0x44),
                                                    _mm512_shuffle_i64x2(z[i][2 * h], z[i][2 * h + 1], 0xEE));
                vc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(zs), _mm512_permutexvar_ps(idx, P), vc[i][h]);
                if (MN)
                    vc[i][h] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(bs[h], mw)),
                                                _mm512_permutexvar_ps(idx, Pm), vc[i][h]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < 2; i++) DJ_UNROLL for (int h = 0; h < 2; h++) {
        c[(2 * h) * ldc + i] = dj_q_hsum8(_mm512_castps512_ps256(vc[i][h]));
        c[(2 * h + 1) * ldc + i] = dj_q_hsum8(_mm512_extractf32x8_ps(vc[i][h], 1));
    }
}
KT_TILE_BODY(kt512_tile_core, kt512_core)
static inline DJ_ALWAYS_INLINE void kt512_tile_body(const int MR, const int NT, const int SG, const int CR,
                                                    const int MN, const int UN, const int PM, const struct kt_sb *D,
                                                    int64_t nb, const uint8_t *a, size_t as, float *c, int64_t ldc) {
    if (!CR && MR == 2 && NT == 4) kt512_lanes24(SG, MN, UN, PM, D, nb, a, as, c, ldc);
    else kt512_tile_core(MR, NT, SG, CR, MN, UN, PM, D, nb, a, as, c, ldc);
}
#define KT512_TILE_FN(name, MR, NT, SG, CR, MN, UN, PM) KT_TILE_FN_OF(kt512_tile_body, name, MR, NT, SG, CR, MN, UN, PM)
KT_TILE_SET(kt512_tiles_min, KT512_TILE_FN, 0, 0, 1, 0, 0)
KT_TILE_SET(kt512_tiles_pm, KT512_TILE_FN, 0, 0, 1, 0, 1)
KT_TILE_SET(kt512_tiles_off, KT512_TILE_FN, 0, 1, 0, 0, 0)
KT_TILE_SET(kt512_tiles_sgn, KT512_TILE_FN, 1, 0, 0, 0, 0)
KT_TILE_SET(kt512_tiles_unit, KT512_TILE_FN, 0, 1, 0, 1, 0)
#undef KT512_TILE_FN

/* T's avx512 matmul for the types without an avx512 decode (Q2_K, Q3_K, TQ2_0): the avx2
 * matmul on the kt512 tiles */
#define X512_PREFILL(T, TILES)                                                                                     \
    void dj_##T##_avx512_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,          \
                                int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                              \
        T##_matmul_on(TILES, k, w, ws, a, as, c, ldc, r0, r1, n_tok);                                              \
    }
X512_PREFILL(q2_K, kt512_tiles_pm)
X512_PREFILL(q3_K, kt512_tiles_off)
X512_PREFILL(tq2_0, kt512_tiles_unit)
#undef X512_PREFILL

/* X_rows(NT, ...), a type's rows of NT tokens (an always-inline template), as functions of
 * 1, 2 and 4 tokens; T's avx512 matmul over them (more than KT_SMALL tokens: the kt512
 * tiles TILES) and its dot */
#define X512_DRIVER(T, X, TILES)                                                                                   \
    KT_ROWS124(X)                                                                                                  \
    void dj_##T##_avx512_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c,        \
                                int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                              \
        const uint8_t *w = wv, *a = av;                                                                            \
        if (n_tok > KT_SMALL && kt_drive(TILES, T##_dec_row, k / DJ_QK_K, w, ws, a, as, c, ldc, r0, r1, n_tok))   \
            return;                                                                                                \
        KT_TOKENS(X, k / DJ_QK_K) /* few tokens, or no scratch */                                               \
    }                                                                                                              \
    float dj_##T##_avx512_dot(int64_t k, const void *w, const void *a) {                                           \
        float c;                                                                                                   \
        X##_rows1(k / DJ_QK_K, w, 0, a, 0, &c, 1, 0, 1);                                                           \
        return c;                                                                                                  \
    }
static inline DJ_ALWAYS_INLINE __m512i tq1x_tri(__m512i x) { return _mm512_add_epi8(_mm512_add_epi8(x, x), x); }
/* A block's digits u (0..2) in element order, 64 a vector. */
static inline DJ_ALWAYS_INLINE void tq1x_digits(const struct dj_block_tq1_0 *x, __m512i u[4]) {
    const __m512i X = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qs));
    const __m512i X3 = tq1x_tri(X), X9 = tq1x_tri(X3), X27 = tq1x_tri(X9), X81 = tq1x_tri(X27);
    const __m512i Y = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(x->qs + 32)));
    const __m512i Y3 = tq1x_tri(Y), Y9 = tq1x_tri(Y3), Y27 = tq1x_tri(Y9), Y81 = tq1x_tri(Y27);
    const __m128i H = _mm_set1_epi32((int)dj_load_u32(x->qh)), H3 = _mm_add_epi8(_mm_add_epi8(H, H), H);
    const __m128i H9 = _mm_add_epi8(_mm_add_epi8(H3, H3), H3), H27 = _mm_add_epi8(_mm_add_epi8(H9, H9), H9);
    /* byte 4n + j: qh[j] * 3^n */
    const __m128i Hn = _mm_blend_epi32(_mm_blend_epi32(H, H3, 0x2), _mm_blend_epi32(H9, H27, 0x8), 0xC);
    __m512i z[4];
    z[0] = _mm512_mask_blend_epi64(0xF0, X, X3);                                   /* q0, q0 * 3 */
    z[1] = _mm512_mask_blend_epi64(0xF0, X9, X27);                                 /* q0 * 9, * 27 */
    z[2] = _mm512_mask_blend_epi64(0xC0, _mm512_mask_blend_epi64(0x30, X81, Y), Y3); /* q0 * 81, q1, q1 * 3 */
    z[3] = _mm512_inserti32x4(_mm512_mask_blend_epi64(0x0C, Y9, Y27), _mm512_castsi512_si128(Y81), 2);
    z[3] = _mm512_inserti32x4(z[3], Hn, 3); /* q1 * 9, * 27, * 81, qh * 3^n */
    const __m512i one = _mm512_set1_epi8(1);
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        const __mmask64 m1 = _mm512_cmpgt_epu8_mask(z[v], _mm512_set1_epi8(85));
        const __mmask64 m2 = _mm512_cmpgt_epu8_mask(z[v], _mm512_set1_epi8((char)170));
        u[v] = _mm512_add_epi8(_mm512_maskz_mov_epi8(m1, one), _mm512_maskz_mov_epi8(m2, one));
    }
}
static inline DJ_ALWAYS_INLINE void tq1x_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1) {
    const size_t bs = sizeof(struct dj_block_tq1_0), abs_ = sizeof(struct dj_block_q8_K);
    const size_t qso = offsetof(struct dj_block_q8_K, qs), bso = offsetof(struct dj_block_q8_K, bsums);
    enum { SA_MAX = 64 };
    int32_t sa[4][SA_MAX]; /* each token's sum(a) per super-block, made once (k <= 16384) */
    const int pre = nb <= SA_MAX;
    DJ_UNROLL for (int j = 0; j < NT; j++)
        for (int64_t b = 0; pre && b < nb; b++) {
            const uint8_t *ab = a + (size_t)j * as + (size_t)b * abs_;
            sa[j][b] = dj_q_hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(ab + bso)), _mm256_set1_epi16(1)));
        }
    for (int64_t r = r0; r < r1; r++) {
        float acc[4] = {0, 0, 0, 0};
        const uint8_t *wr = w + (size_t)r * ws;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wr + (size_t)b * bs;
            kt_prefetch(wb, (size_t)bs);
            const struct dj_block_tq1_0 *x = (const void *)wb;
            __m512i u[4];
            tq1x_digits(x, u);
            const float d = dj_q_f16(&x->d);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const uint8_t *ab = a + (size_t)j * as + (size_t)b * abs_;
                __m512i s = _mm512_setzero_si512();
                DJ_UNROLL for (int v = 0; v < 4; v++) s = _mm512_dpbusd_epi32(s, u[v], _mm512_loadu_si512(ab + qso + 64 * v));
                const int32_t s_a = pre ? sa[j][b]
                                        : dj_q_hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(ab + bso)),
                                                                          _mm256_set1_epi16(1)));
                const int32_t isum = _mm512_reduce_add_epi32(s) - s_a;
                acc[j] = __builtin_fmaf((float)isum, d * dj_q_load_f32(ab), acc[j]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + r] = acc[j];
    }
}
X512_DRIVER(tq1_0, tq1x, kt512_tiles_unit)

/* IQ4_XS decode on AVX-512, the same way: kt_core keeps IQ4_XS's chain in 8 lanes of natural
 * partial sums (lane l: bytes 4l .. 4l+3 of each 32-element chunk, times the chunk's scale).
 * Here a vector holds two chunks (dword i: chunk 2p + i / 8, bytes 4 (i % 8) ..), the levels
 * + 128 (unsigned, through a shifted table) by vpdpbusd less 128 * sum(a) of the same 4
 * bytes (made once per call), times the chunk's scale; folding the two halves gives lane l
 * of kt_core's integer vector exactly, and its fma and dj_q_hsum8 follow. */
static inline DJ_ALWAYS_INLINE void iq4x_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1,
                                              const __m512i *corr) {
    const size_t bs = sizeof(struct dj_block_iq4_xs), abs_ = sizeof(struct dj_block_q8_K);
    const size_t qso = offsetof(struct dj_block_q8_K, qs);
    _Alignas(16) int8_t lut[16];
    for (int i = 0; i < 16; i++) lut[i] = (int8_t)(dj_kvalues_iq4nl[i] + 128);
    const __m512i lutv = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)lut)), m4 = _mm512_set1_epi8(0x0F);
    for (int64_t r = r0; r < r1; r++) {
        __m256 vc[4];
        DJ_UNROLL for (int j = 0; j < NT; j++) vc[j] = _mm256_setzero_ps();
        const uint8_t *wr = w + (size_t)r * ws;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wr + (size_t)b * bs;
            kt_prefetch(wb, (size_t)bs);
            const struct dj_block_iq4_xs *x = (const void *)wb;
            /* the 8 chunks' scales (as iq4_xs_dec: low 4 bits from scales_l, high 2 from
             * scales_h, less 32) in 8 dwords, then chunks 2p, 2p + 1 as halves of sc[p] */
            const __m256i sl = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)dj_load_u32(x->scales_l)),
                                                                  _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                                _mm256_set1_epi32(0xF));
            const __m256i shv = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)dj_load_u16(&x->scales_h)),
                                                                   _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                                 _mm256_set1_epi32(3));
            const __m512i s8 = _mm512_castsi256_si512(
                _mm256_sub_epi32(_mm256_or_si256(sl, _mm256_slli_epi32(shv, 4)), _mm256_set1_epi32(32)));
            __m512i u[4], sc[4];
            DJ_UNROLL for (int p = 0; p < 4; p++) {
                const __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * p)));
                const __m512i z = _mm512_shuffle_i64x2(q, q, 0x50); /* 128-bit lanes 0, 0, 1, 1 */
                const __m512i nib = _mm512_mask_blend_epi64(0xCC, _mm512_and_si512(z, m4),
                                                            _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
                u[p] = _mm512_shuffle_epi8(lutv, nib);
                sc[p] = _mm512_permutexvar_epi32(_mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * p),
                                                                         _mm512_set1_epi32(2 * p + 1)), s8);
            }
            const float d = dj_q_f16(&x->d);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const uint8_t *ab = a + (size_t)j * as + (size_t)b * abs_;
                __m512i is = _mm512_setzero_si512();
                DJ_UNROLL for (int p = 0; p < 4; p++) {
                    const __m512i t = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p],
                                                                           _mm512_loadu_si512(ab + qso + 64 * p)),
                                                       corr[((size_t)j * (size_t)nb + (size_t)b) * 4 + (size_t)p]);
                    is = _mm512_add_epi32(is, _mm512_mullo_epi32(t, sc[p]));
                }
                const __m256i is8 = _mm256_add_epi32(_mm512_castsi512_si256(is), _mm512_extracti64x4_epi64(is, 1));
                vc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is8), _mm256_set1_ps(d * dj_q_load_f32(ab)), vc[j]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + r] = dj_q_hsum8(vc[j]);
    }
}
static void iq4x_rows1(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, const __m512i *corr) {
    iq4x_rows(1, nb, w, ws, a, as, c, ldc, r0, r1, corr);
}
static void iq4x_rows2(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, const __m512i *corr) {
    iq4x_rows(2, nb, w, ws, a, as, c, ldc, r0, r1, corr);
}
static void iq4x_rows4(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, const __m512i *corr) {
    iq4x_rows(4, nb, w, ws, a, as, c, ldc, r0, r1, corr);
}
/* 128 * the sums of each 4 activation bytes, tokens [0, nt) (as apart), nb super-blocks:
 * corr[(j nb + b) 4 + p], dword i: bytes 64 p + 4 i .. +3 */
static void iq4x_corr(int64_t nt, int64_t nb, const uint8_t *a, size_t as, __m512i *corr) {
    const size_t abs_ = sizeof(struct dj_block_q8_K), qso = offsetof(struct dj_block_q8_K, qs);
    for (int64_t j = 0; j < nt; j++)
        for (int64_t b = 0; b < nb; b++)
            for (int p = 0; p < 4; p++)
                corr[((size_t)j * (size_t)nb + (size_t)b) * 4 + (size_t)p] =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80),
                                        _mm512_loadu_si512(a + (size_t)j * as + (size_t)b * abs_ + qso + 64 * p));
}
void dj_iq4_xs_avx512_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                             int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t nb = k / DJ_QK_K;
    __m512i *corr = n_tok <= KT_SMALL ? dj_kernel_scratch((size_t)n_tok * (size_t)nb * 4 * sizeof(__m512i)) : NULL;
    if (!corr) { /* more tokens (the kt512 tiles), or no scratch: the avx2 matmul, the same bits */
        iq4_xs_matmul_on(kt512_tiles_sgn, k, wv, ws, av, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *w = wv, *a = av;
    iq4x_corr(n_tok, nb, a, as, corr);
    for (int64_t t = 0; t < n_tok;) {
        const int64_t n = n_tok - t;
        const uint8_t *at = a + (size_t)t * as;
        const __m512i *ct_corr = corr + (size_t)t * (size_t)nb * 4;
        float *ct = c + t * ldc;
        if (n >= 4) iq4x_rows4(nb, w, ws, at, as, ct, ldc, r0, r1, ct_corr), t += 4;
        else if (n >= 2) iq4x_rows2(nb, w, ws, at, as, ct, ldc, r0, r1, ct_corr), t += 2;
        else iq4x_rows1(nb, w, ws, at, as, ct, ldc, r0, r1, ct_corr), t += 1;
    }
}
float dj_iq4_xs_avx512_dot(int64_t k, const void *w, const void *a) {
    /* (on the stack, not the thread's scratch, which a caller of a dot may hold) */
    const int64_t nb = k / DJ_QK_K;
    if (nb > 16) return iq4_xs_dot(k, w, a); /* the same bits */
    __m512i corr[16 * 4];
    float c;
    iq4x_corr(1, nb, a, 0, corr);
    iq4x_rows1(nb, w, 0, a, 0, &c, 1, 0, 1, corr);
    return c;
}

/* Q5_K decode on AVX-512, as IQ4_XS's: kt_core keeps Q5_K's chain in 8 lanes of natural partial
 * sums (lane l: bytes 4l .. 4l+3 of each chunk, times the chunk's scale) and its mins' in
 * lane l of madd(bsums, mw).  A vector holds chunks 2p (nibbles low) and 2p + 1 (high) of
 * qs[32p ..], the fifth bit by a mask test of qh (bit 2p, bit 2p + 1), vpdpbusd of the
 * levels (0..31) by the activations, and each dword (<= 4 * 31 * 127 < 2^15) times the
 * chunk's scale by vpmaddwd against (scale, 0) words; folding the two halves gives lane l of
 * kt_core's integer vector exactly, and its fma, fnmadd and dj_q_hsum8 follow. */
static inline DJ_ALWAYS_INLINE void q5kx_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1) {
    const size_t bs = sizeof(struct dj_block_q5_K), abs_ = sizeof(struct dj_block_q8_K);
    const size_t qso = offsetof(struct dj_block_q8_K, qs), bso = offsetof(struct dj_block_q8_K, bsums);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b5 = _mm512_set1_epi8(0x10);
    for (int64_t r = r0; r < r1; r++) {
        __m256 vc[4];
        DJ_UNROLL for (int j = 0; j < NT; j++) vc[j] = _mm256_setzero_ps();
        const uint8_t *wr = w + (size_t)r * ws;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wr + (size_t)b * bs;
            kt_prefetch(wb, (size_t)bs);
            const struct dj_block_q5_K *x = (const void *)wb;
            uint64_t sc, mn;
            dj_q4_K_unpack_scales(x->scales, &sc, &mn);
            const __m128i mnb = _mm_cvtsi64_si128((long long)mn);
            const __m256i mw = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mnb, mnb));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh));
            __m512i u[4], sw[4];
            DJ_UNROLL for (int p = 0; p < 4; p++) {
                const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * p)));
                const __m512i nib = _mm512_mask_blend_epi64(0xF0, _mm512_and_si512(q, m4),
                                                            _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
                const __m512i hb = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8((char)(1 << (2 * p))),
                                                           _mm512_set1_epi8((char)(1 << (2 * p + 1))));
                u[p] = _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(qh, hb), nib, b5);
                sw[p] = _mm512_inserti64x4(_mm512_set1_epi32((int)((sc >> (16 * p)) & 0xFF)),
                                           _mm256_set1_epi32((int)((sc >> (16 * p + 8)) & 0xFF)), 1);
            }
            const float d = dj_q_f16(&x->d), dmin = dj_q_f16(&x->dmin);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const uint8_t *ab = a + (size_t)j * as + (size_t)b * abs_;
                __m512i is = _mm512_setzero_si512();
                DJ_UNROLL for (int p = 0; p < 4; p++)
                    is = _mm512_add_epi32(is, _mm512_madd_epi16(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p],
                                                                                    _mm512_loadu_si512(ab + qso + 64 * p)),
                                                                sw[p]));
                const __m256i is8 = _mm256_add_epi32(_mm512_castsi512_si256(is), _mm512_extracti64x4_epi64(is, 1));
                const float da = dj_q_load_f32(ab);
                vc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is8), _mm256_set1_ps(d * da), vc[j]);
                vc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(ab + bso)), mw)),
                                         _mm256_set1_ps(dmin * da), vc[j]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + r] = dj_q_hsum8(vc[j]);
    }
}
X512_DRIVER(q5_K, q5kx, kt512_tiles_min)

/* The grid types' decode on AVX-512 (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S).  Their totals
 * are exact (kt_epilogue's one fma a super-block), so any integer route gives the avx2
 * table's bits.  A vector holds two chunks (64 elements): the grid entries by one gather
 * (16 dwords or 8 qwords; AVX2's T_sb1 builds each vector from scalar loads and inserts),
 * the signs as a 64-bit mask (explicit sign bytes, or the 7-bit sign indices through
 * dj_ksigns64 by a qword gather) that negates the activations (q8_K bytes are >= -127, so
 * negation is exact), vpdpbusd of the unsigned grid bytes by them, and each dword (|.| <=
 * 4 * 62 * 127 < 2^15) times its 4 elements' scale 2s+1 by vpmaddwd against (scale, 0)
 * words.  The T_gx functions make a super-block's four vectors, masks and scale vectors
 * once for up to 4 tokens. */
struct gx_sb {
    __m512i g[4], sw[4];
    __mmask64 sg[4];
    __m256i cw; /* IQ1: the offset's multipliers of the 16 bsums (kt_sb's cw) */
};
/* 8 sign indices of 7 bits (x: index g at bits 7g) -> 64 sign bits: byte g is index g with
 * its parity as bit 7 (dj_ksigns_iq2xs[s]), in scalar code (pdep and a parity fold per byte),
 * which runs beside the vector work; a qword gather of dj_ksigns64 was slower */
static inline DJ_ALWAYS_INLINE __mmask64 gx_ksigns56(uint64_t x) {
    const uint64_t y = _pdep_u64(x, 0x7F7F7F7F7F7F7F7FULL);
    uint64_t t = y ^ (y >> 4);
    t ^= t >> 2;
    t ^= t >> 1;
    return (__mmask64)(y | (t & 0x0101010101010101ULL) << 7);
}
/* the four 7-bit sign indices (bits 0 .. 27) of aux0 and of aux1 */
static inline DJ_ALWAYS_INLINE __mmask64 gx_ksigns_aux(uint32_t aux0, uint32_t aux1) {
    return gx_ksigns56((aux0 & 0x0FFFFFFFu) | (uint64_t)(aux1 & 0x0FFFFFFFu) << 28);
}
/* dword scales 2s+1: chunk 2v's s = (aux0 >> 28), chunk 2v+1's (aux1 >> 28) */
static inline DJ_ALWAYS_INLINE __m512i gx_sw32(uint32_t aux0, uint32_t aux1) {
    return _mm512_inserti64x4(_mm512_set1_epi32((int)(2 * (aux0 >> 28) + 1)),
                              _mm256_set1_epi32((int)(2 * (aux1 >> 28) + 1)), 1);
}
/* dword scales 2s+1 per 16 elements: the four nibbles of the 16-bit s (low first) */
static inline DJ_ALWAYS_INLINE __m512i gx_sw16(unsigned s) {
    const __m512i n = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)s),
                                                          _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)),
                                       _mm512_set1_epi32(0xF));
    return _mm512_add_epi32(_mm512_add_epi32(n, n), _mm512_set1_epi32(1));
}
static inline DJ_ALWAYS_INLINE float iq3_s_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq3_s *x = (const void *)p;
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m512i s4 = _mm512_set1_epi32((int)dj_load_u32(x->scales));
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        /* 9-bit indices: qs, and bit i of the chunk pair's qh bytes */
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * v)));
        idx = _mm512_mask_or_epi32(idx, (__mmask16)dj_load_u16(x->qh + 2 * v), idx, _mm512_set1_epi32(256));
        o->g[v] = _mm512_i32gather_epi32(idx, (const void *)dj_iq3s_grid, 4);
        const __m512i sc = _mm512_and_si512(_mm512_srlv_epi32(s4, _mm512_add_epi32(half, _mm512_set1_epi32(8 * v))),
                                            _mm512_set1_epi32(0xF));
        o->sw[v] = _mm512_add_epi32(_mm512_add_epi32(sc, sc), _mm512_set1_epi32(1));
        uint64_t sb;
        memcpy(&sb, x->signs + 8 * v, 8);
        o->sg[v] = (__mmask64)sb;
    }
    return dj_q_f16(&x->d);
}
static inline DJ_ALWAYS_INLINE float iq3_xxs_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq3_xxs *x = (const void *)p;
    const uint8_t *sas = x->qs + DJ_QK_K / 4;
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * v)));
        o->g[v] = _mm512_i32gather_epi32(idx, (const void *)dj_iq3xxs_grid, 4);
        const uint32_t a0 = dj_load_u32(sas + 8 * v), a1 = dj_load_u32(sas + 8 * v + 4);
        o->sg[v] = gx_ksigns_aux(a0, a1);
        o->sw[v] = gx_sw32(a0, a1);
    }
    return dj_q_f16(&x->d) * 0.25f;
}
static inline DJ_ALWAYS_INLINE float iq2_xxs_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq2_xxs *x = (const void *)p;
    const uint8_t *qs = (const uint8_t *)x->qs;
    const __m128i pick = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1);
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        /* chunk c: 4 grid index bytes, then its 32-bit signs-and-scale word */
        const __m128i q = _mm_loadu_si128((const __m128i *)(qs + 16 * v));
        const __m256i idx = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(q, pick));
        o->g[v] = _mm512_i32gather_epi64(idx, (const void *)dj_iq2xxs_grid, 8);
        const uint32_t a0 = dj_load_u32(qs + 16 * v + 4), a1 = dj_load_u32(qs + 16 * v + 12);
        o->sg[v] = gx_ksigns_aux(a0, a1);
        o->sw[v] = gx_sw32(a0, a1);
    }
    return dj_q_f16(&x->d) * 0.125f;
}
static inline DJ_ALWAYS_INLINE float iq2_xs_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq2_xs *x = (const void *)p;
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        /* 8 words: a 9-bit grid index and a 7-bit sign index each */
        const __m512i q = _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)(x->qs + 8 * v)));
        o->g[v] = _mm512_i64gather_epi64(_mm512_and_si512(q, _mm512_set1_epi64(511)), (const void *)dj_iq2xs_grid, 8);
        uint64_t q0, q1; /* the 7-bit sign indices: bits 9 .. 15 of each word */
        memcpy(&q0, x->qs + 8 * v, 8);
        memcpy(&q1, x->qs + 8 * v + 4, 8);
        o->sg[v] = gx_ksigns56(_pext_u64(q0, 0xFE00FE00FE00FE00ULL) | _pext_u64(q1, 0xFE00FE00FE00FE00ULL) << 28);
        o->sw[v] = gx_sw16(dj_load_u16(x->scales + 2 * v));
    }
    return dj_q_f16(&x->d) * 0.125f;
}
static inline DJ_ALWAYS_INLINE float iq2_s_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq2_s *x = (const void *)p;
    const uint8_t *signs = x->qs + DJ_QK_K / 8;
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        /* 10-bit indices: qs, and 2 bits of the group's qh byte (group i: bits 2 (i % 4)) */
        const __m512i lo = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * v)));
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64(dj_load_u16(x->qh + 2 * v)),
                                                              _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14)),
                                            _mm512_set1_epi64(3));
        o->g[v] = _mm512_i64gather_epi64(_mm512_or_si512(lo, _mm512_slli_epi64(hi, 8)), (const void *)dj_iq2s_grid, 8);
        uint64_t sb;
        memcpy(&sb, signs + 8 * v, 8);
        o->sg[v] = (__mmask64)sb;
        o->sw[v] = gx_sw16(dj_load_u16(x->scales + 2 * v));
    }
    return dj_q_f16(&x->d) * 0.125f;
}
/* IQ1_S: u = grid + 1 (0..2), times 8 (2s+1) per 32; the rest of (8 grid + delta) (2s+1),
 * (delta - 8) (2s+1) per 32 (delta = -1 where bit 15 of the chunk's qh word is set, else
 * +1), through the bsums, as iq1_s_sb1 */
static inline DJ_ALWAYS_INLINE float iq1_s_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq1_s *x = (const void *)p;
    {   /* word g: chunk g / 2's (2s+1) (delta - 8) */
        const __m256i q = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x->qh));
        const __m256i w2 = _mm256_or_si256(q, _mm256_slli_epi32(q, 16));
        const __m256i s = _mm256_and_si256(_mm256_srli_epi16(w2, 12), _mm256_set1_epi16(7));
        const __m256i off = _mm256_sub_epi16(_mm256_set1_epi16(-7), _mm256_slli_epi16(_mm256_srli_epi16(w2, 15), 1));
        o->cw = _mm256_mullo_epi16(_mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1)), off);
    }
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        const unsigned h0 = x->qh[2 * v], h1 = x->qh[2 * v + 1];
        /* 11-bit indices: qs, and 3 bits of the chunk's qh word (group i: bits 3 (i % 4)) */
        const __m512i lo = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * v)));
        const __m512i H = _mm512_inserti64x4(_mm512_set1_epi64(h0), _mm256_set1_epi64x(h1), 1);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(H, _mm512_setr_epi64(0, 3, 6, 9, 0, 3, 6, 9)), _mm512_set1_epi64(7));
        const __m512i g = _mm512_i64gather_epi64(_mm512_or_si512(lo, _mm512_slli_epi64(hi, 8)), (const void *)dj_iq1s_grid, 8);
        o->g[v] = _mm512_add_epi8(g, _mm512_set1_epi8(1));
        o->sg[v] = 0;
        const int s0 = 2 * (int)((h0 >> 12) & 7) + 1, s1 = 2 * (int)((h1 >> 12) & 7) + 1;
        o->sw[v] = _mm512_inserti64x4(_mm512_set1_epi32(8 * s0), _mm256_set1_epi32(8 * s1), 1);
    }
    return dj_q_f16(&x->d) * 0.125f;
}
/* IQ1_M: u = 8 (grid + 1) + delta + 1 per 8 (delta = -1 where bit 3 of the group's qh nibble
 * is set), times 2s+1 per 16 (3-bit scales); the -9 (2s+1) offset through the bsums, as
 * iq1_m_sb1 */
static inline DJ_ALWAYS_INLINE float iq1_m_gx(const uint8_t *p, struct gx_sb *o) {
    const struct dj_block_iq1_m *x = (const void *)p;
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    /* word g: 2s+1 of 16-element group g (bits 3 (g % 4) of scale word g / 4) */
    const __m256i sw16 = _mm256_permutexvar_epi16(_mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                  _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)x->scales)));
    const __m256i s16 = _mm256_and_si256(_mm256_srlv_epi16(sw16, _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)),
                                         _mm256_set1_epi16(7));
    const __m256i s2 = _mm256_add_epi16(_mm256_add_epi16(s16, s16), _mm256_set1_epi16(1));
    o->cw = _mm256_mullo_epi16(s2, _mm256_set1_epi16(-9));
    DJ_UNROLL for (int v = 0; v < 4; v++) {
        const uint32_t h = dj_load_u32(x->qh + 4 * v); /* groups 8v .. 8v+7: nibble i */
        const __m512i lo = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * v)));
        const __m512i H = _mm512_set1_epi64(h);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(H, _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28)), _mm512_set1_epi64(7));
        const __m512i g = _mm512_i64gather_epi64(_mm512_or_si512(lo, _mm512_slli_epi64(hi, 8)), (const void *)dj_iq1s_grid, 8);
        const __mmask8 neg = _mm512_test_epi64_mask(H, _mm512_setr_epi64(8, 0x80, 0x800, 0x8000, 0x80000, 0x800000, 0x8000000, 0x80000000));
        const __m512i dp1 = _mm512_maskz_mov_epi64((__mmask8)~neg, _mm512_set1_epi8(2));
        o->g[v] = _mm512_add_epi8(_mm512_slli_epi16(_mm512_add_epi8(g, _mm512_set1_epi8(1)), 3), dp1);
        o->sg[v] = 0;
        o->sw[v] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(sc[v]), _mm512_setr_epi32(0, 0, 0, 0, 3, 3, 3, 3, 6, 6, 6, 6, 9, 9, 9, 9)),
                                    _mm512_set1_epi32(7));
        o->sw[v] = _mm512_add_epi32(_mm512_add_epi32(o->sw[v], o->sw[v]), _mm512_set1_epi32(1));
    }
    const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    return dj_q_f16(&dh) * 0.125f;
}
static inline DJ_ALWAYS_INLINE void gx_rows(const int NT, const int BS, const int CW,
                                            float (*gx)(const uint8_t *, struct gx_sb *),
                                            int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                                            float *c, int64_t ldc, int64_t r0, int64_t r1) {
    const size_t abs_ = sizeof(struct dj_block_q8_K), qso = offsetof(struct dj_block_q8_K, qs);
    const size_t bso = offsetof(struct dj_block_q8_K, bsums);
    for (int64_t r = r0; r < r1; r++) {
        float acc[4] = {0, 0, 0, 0};
        const uint8_t *wr = w + (size_t)r * ws;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wr + (size_t)b * (size_t)BS;
            kt_prefetch(wb, (size_t)BS);
            struct gx_sb o;
            const float d = gx(wb, &o);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const uint8_t *ab = a + (size_t)j * as + (size_t)b * abs_;
                __m512i s = _mm512_setzero_si512();
                DJ_UNROLL for (int v = 0; v < 4; v++) {
                    const __m512i av = _mm512_loadu_si512(ab + qso + 64 * v);
                    const __m512i sa = _mm512_mask_sub_epi8(av, o.sg[v], _mm512_setzero_si512(), av);
                    s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_dpbusd_epi32(_mm512_setzero_si512(), o.g[v], sa), o.sw[v]));
                }
                if (CW)
                    s = _mm512_add_epi32(s, _mm512_zextsi256_si512(_mm256_madd_epi16(
                                                _mm256_loadu_si256((const __m256i *)(ab + bso)), o.cw)));
                acc[j] = __builtin_fmaf((float)_mm512_reduce_add_epi32(s), d * dj_q_load_f32(ab), acc[j]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc + r] = acc[j];
    }
}
#define GX_TYPE(T, CW)                                                                                               \
    static inline DJ_ALWAYS_INLINE void T##_gx_rows(const int NT, int64_t nb, const uint8_t *w, size_t ws,           \
                                                    const uint8_t *a, size_t as, float *c, int64_t ldc, int64_t r0,  \
                                                    int64_t r1) {                                                    \
        gx_rows(NT, sizeof(struct dj_block_##T), CW, T##_gx, nb, w, ws, a, as, c, ldc, r0, r1);                      \
    }                                                                                                                \
    X512_DRIVER(T, T##_gx, kt512_tiles_off)
GX_TYPE(iq2_xxs, 0)
GX_TYPE(iq2_xs, 0)
GX_TYPE(iq2_s, 0)
GX_TYPE(iq3_xxs, 0)
GX_TYPE(iq3_s, 0)
GX_TYPE(iq1_s, 1)
GX_TYPE(iq1_m, 1)
#undef GX_TYPE
#undef X512_DRIVER
#pragma GCC pop_options

/* ---- prefill by AMX-INT8 (the amx table: kernels_amx.c) ------------------------------
 *
 * kt_core's integers are sums of the products scale * u (u = level + OFF; the signed
 * level for IQ4_XS) times the activation bytes, plus bsums * cw (the offset) — exact in
 * any order.  Per 16-row group and super-block, each row is decoded by the type's own
 * T_dec, its 256 products (int16: at most 124 * 31 in magnitude) are split into the low
 * byte (unsigned) and the rest >> 8 (signed), and both are laid out as B tiles: dword g
 * (elements 4g .. 4g+3) of the 16 rows in one 64-byte tile row.  Per 16 tokens:
 *   - the types with an offset (CR: Q3_K, IQ1/IQ2/IQ3, TQ), whose float step takes the
 *     super-block's exact total: four K=64 TDPBSUD over the low bytes and four TDPBSSD
 *     over the high ones give lo + 256 * hi; the cw terms by vpdpwssd, then kt_core's fma
 *     in the row's lane;
 *   - the types without (Q2_K, Q5_K, IQ4_XS), whose chain runs in 8 lanes of natural
 *     partial sums (lane l: dwords 8c + l of the 8 chunks c): per lane one K=32 pair of
 *     tile products over those dwords, then kt_core's fma (and the mins' fnmadd, lane l of
 *     madd(bsums, mw)) on lane l's chain, and dj_q_hsum8's tree.
 * The tokens' q8_K bytes are rearranged once per call so that every A tile is one
 * contiguous run (16 tokens x 64 bytes, or x a lane's 32), and their scales gathered; where
 * a super-block's high parts are all zero (Q2_K's products fit a byte, TQ's too) its
 * high-part tile ops are skipped (a zero adds nothing).  Step s's sums (a super-block, or a
 * super-block's lane) are stored and folded into the chains while step s + 1's are made. 
 * The same exact integers and the same float operations in the same order: the bits of
 * the avx2 table's matmul and dot.  Batches of up to 16 tokens stay on T_matmul.  Compiled
 * for AVX-512 and AMX by a target pragma; reached only from the amx table. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
enum { KTX_MIN_TOK = 16 };

/* A super-block of a 16-row group: B tiles of the low bytes and high parts (T[g]: dword g
 * of the 16 rows; lanes layout: lane l's tile row c at 8 l + c), the cw / mw word pairs
 * (lane i: row i's words 2p, 2p+1) and the rows' d, dmin. */
struct ktx_blk {
    __m512i lo[64], hi[64];
    __m512i cwp[8], mwp[8];
    __m512 d, dmin;
    int hz; /* every high part 0 (Q2_K, TQ: the products fit a byte): no high-part tile op */
    uint8_t pad_[60];
};

typedef void (*ktx_dec_fn)(const uint8_t *p, struct kt_sb *o);

/* Rows row[0..15] (clamped to the matrix's range) of super-block b into o; tmp: the rows'
 * low bytes (16 x 256), high parts (16 x 256), cw and mw (16 x 32 bytes each). */
static inline DJ_ALWAYS_INLINE void ktx_decode(const int SG, const int CR, const int HZ, ktx_dec_fn dec, const uint8_t *const row[16],
                                               size_t bs, int64_t b, uint8_t *tmp, struct ktx_blk *o) {
    uint8_t *LO = tmp, *HI = tmp + 16 * 256, *CW = tmp + 32 * 256, *MW = CW + 16 * 32;
    _Alignas(64) float d[16], dmin[16];
    for (int i = 0; i < 16; i++) {
        struct kt_sb D;
        dec(row[i] + (size_t)b * bs, &D);
        DJ_UNROLL for (int c = 0; c < 8; c++) {
            const __m512i q16 = SG ? _mm512_cvtepi8_epi16(D.q[c]) : _mm512_cvtepu8_epi16(D.q[c]);
            const short s0 = (short)_mm256_extract_epi16(D.scw[c], 0), s1 = (short)_mm256_extract_epi16(D.scw[c], 8);
            const __m512i sc = _mm512_inserti64x4(_mm512_set1_epi16(s0), _mm256_set1_epi16(s1), 1);
            const __m512i p = _mm512_mullo_epi16(q16, sc);
            _mm256_storeu_si256((__m256i *)(LO + 256 * i + 32 * c), _mm512_cvtepi16_epi8(p));
            if (!HZ) _mm256_storeu_si256((__m256i *)(HI + 256 * i + 32 * c), _mm512_cvtepi16_epi8(_mm512_srai_epi16(p, 8)));
        }
        _mm256_storeu_si256((__m256i *)(CW + 32 * i), D.cw);
        _mm256_storeu_si256((__m256i *)(MW + 32 * i), D.mw);
        d[i] = D.d;
        dmin[i] = D.dmin;
    }
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(64)); /* dword index of row i's dword 0 */
    for (int g = 0; g < 64; g++) {
        const int at = CR ? g : 8 * (g % 8) + g / 8; /* lanes: dword g = 8c + l -> tile l, row c */
        const __m512i idx = _mm512_add_epi32(rows, _mm512_set1_epi32(g));
        _mm512_store_si512(&o->lo[at], _mm512_i32gather_epi32(idx, LO, 4));
        if (!HZ) _mm512_store_si512(&o->hi[at], _mm512_i32gather_epi32(idx, HI, 4));
    }
    const __m512i rows8 = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(8));
    for (int p = 0; p < 8; p++) {
        const __m512i idx = _mm512_add_epi32(rows8, _mm512_set1_epi32(p));
        _mm512_store_si512(&o->cwp[p], _mm512_i32gather_epi32(idx, CW, 4));
        _mm512_store_si512(&o->mwp[p], _mm512_i32gather_epi32(idx, MW, 4));
    }
    o->d = _mm512_load_ps(d);
    o->dmin = _mm512_load_ps(dmin);
    if (HZ) { /* the type's products always fit a byte */
        o->hz = 1;
        return;
    }
    __m512i any = _mm512_setzero_si512();
    for (int i = 0; i < 16 * 256; i += 64) any = _mm512_or_si512(any, _mm512_loadu_si512(HI + i));
    o->hz = _mm512_test_epi64_mask(any, any) == 0;
}

/* The lane form's steps without high parts (ktx_matmul's HZ): lane l of super-block b is
 * step 8 b + l; its sums go to C tile s % 4 (A and B tiles alternate 4/5 and 6/7) and are
 * stored and folded three steps later: v = fma(float(S), d da, acc) and, with mins,
 * fnmadd(float(madd(bsums pair l, mw pair l)), dmin da, v) — the fold of ktx_matmul,
 * the same operations. */
static inline DJ_ALWAYS_INLINE void ktx_lanes_hz(const int MN, int64_t nb, const struct ktx_blk *B, const uint8_t *apt,
                                                 const uint8_t *at, size_t as, const float *dab0, int nt, __m512 *acc,
                                                 int32_t (*xq)[16][16], __m512 *ddv) {
    const size_t bso = offsetof(struct dj_block_q8_K, bsums), abs_ = sizeof(struct dj_block_q8_K);
    const int64_t n_steps = 8 * nb;
    DJ_AMX_BARRIER();
    for (int64_t st = 0; st < n_steps + 3; st++) {
        if (st < n_steps) {
            const uint8_t *aq = apt + (size_t)(st / 8) * 4096 + 512 * (size_t)(st % 8);
            const void *bq = &B[st / 8].lo[8 * (st % 8)];
            switch (st % 4) {
            case 0: _tile_loadd(4, aq, 32); _tile_loadd(6, bq, 64); _tile_zero(0); _tile_dpbsud(0, 4, 6); break;
            case 1: _tile_loadd(5, aq, 32); _tile_loadd(7, bq, 64); _tile_zero(1); _tile_dpbsud(1, 5, 7); break;
            case 2: _tile_loadd(4, aq, 32); _tile_loadd(6, bq, 64); _tile_zero(2); _tile_dpbsud(2, 4, 6); break;
            default: _tile_loadd(5, aq, 32); _tile_loadd(7, bq, 64); _tile_zero(3); _tile_dpbsud(3, 5, 7); break;
            }
        }
        if (st < 3) continue;
        const int64_t ps = st - 3, b = ps / 8;
        const int l = (int)(ps % 8);
        switch (ps % 4) {
        case 0: _tile_stored(0, xq[0], 64); break;
        case 1: _tile_stored(1, xq[1], 64); break;
        case 2: _tile_stored(2, xq[2], 64); break;
        default: _tile_stored(3, xq[3], 64); break;
        }
        DJ_AMX_BARRIER();
        const struct ktx_blk *Bb = &B[b];
        const float *dab = dab0 + (size_t)b * 16;
        if (l == 0)
            for (int t = 0; t < nt; t++) {
                ddv[t] = _mm512_mul_ps(Bb->d, _mm512_set1_ps(dab[t]));
                if (MN) ddv[16 + t] = _mm512_mul_ps(Bb->dmin, _mm512_set1_ps(dab[t]));
            }
        const int32_t(*sl)[16] = xq[ps % 4];
        const uint8_t *bsum = at + (size_t)b * abs_ + bso + 4 * (size_t)l;
        const __m512i mw = Bb->mwp[l];
        __m512 *al = acc + 16 * l;
        for (int t = 0; t < nt; t++) {
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sl[t])), ddv[t], al[t]);
            if (MN) {
                const __m512i M = _mm512_madd_epi16(mw, _mm512_set1_epi32((int)dj_load_u32(bsum + (size_t)t * as)));
                v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), ddv[16 + t], v);
            }
            al[t] = v;
        }
        DJ_AMX_BARRIER();
    }
}

/* HZ: the type's products always fit a byte (Q2_K, TQ): no high parts at all; in the lane form
 * four C tiles then take turns, and a step is folded three steps after its tile op (the
 * store of a C tile right after its op waited for it: ~45 ns a step), with d * da (and
 * dmin * da) made once per super-block and token instead of once per lane.
 * False: a small batch or no scratch (the caller runs T_matmul: the same bits). */
static inline DJ_ALWAYS_INLINE bool ktx_matmul(const int SG, const int CR, const int MN, const int HZ, ktx_dec_fn dec, size_t bs,
                                              int64_t k, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                                              float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t nb = k / DJ_QK_K;
    const size_t qso = offsetof(struct dj_block_q8_K, qs), bso = offsetof(struct dj_block_q8_K, bsums);
    const size_t abs_ = sizeof(struct dj_block_q8_K);
    /* The activations' bytes rearranged once per call so that every A tile is one run of
     * 512 (lanes: 16 tokens x a lane's 32 bytes) or 1024 (CR: 16 tokens x 64 bytes) bytes:
     * token tile T, super-block b at ap + (T nb + b) 4096; there, lane l's (CR: the 64
     * values u's) bytes of token t at 512 l + 32 t (1024 u + 64 t). */
    const int64_t n_tt = (n_tok + 15) / 16;
    const size_t ap_bytes = (size_t)n_tt * (size_t)nb * 4096;
    const size_t blk_bytes = (size_t)nb * sizeof(struct ktx_blk), tmp_bytes = 32 * 256 + 2 * 16 * 32;
    const size_t acc_bytes = (CR ? 16 : 8 * 16) * sizeof(__m512), da_bytes = (size_t)n_tt * (size_t)nb * 64;
    uint8_t *scr = n_tok > KTX_MIN_TOK && nb > 0 && ap_bytes <= ((size_t)64 << 20) && as <= (size_t)INT32_MAX
                       ? dj_kernel_scratch(blk_bytes + ap_bytes + tmp_bytes + acc_bytes + da_bytes)
                       : NULL;
    if (!scr) return false;
    struct ktx_blk *B = (struct ktx_blk *)scr;
    __m512 *acc = (__m512 *)(scr + blk_bytes); /* CR: acc[t]; lanes: acc[16 l + t] */
    float *da = (float *)(scr + blk_bytes + acc_bytes); /* da[16 (T nb + b) + t]: the d of token 16 T + t, super-block b */
    uint8_t *tmp = scr + blk_bytes + acc_bytes + da_bytes, *ap = tmp + tmp_bytes;
    memset(da, 0, da_bytes); /* (0 past the last token) */
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            da[((t / 16) * nb + b) * 16 + t % 16] = dj_q_load_f32(a + (size_t)t * as + (size_t)b * abs_);
            const uint8_t *q = a + (size_t)t * as + (size_t)b * abs_ + qso;
            uint8_t *o = ap + ((size_t)(t / 16) * (size_t)nb + (size_t)b) * 4096;
            if (CR)
                for (int u = 0; u < 4; u++) memcpy(o + 1024 * u + 64 * (t % 16), q + 64 * u, 64);
            else
                for (int l = 0; l < 8; l++)
                    for (int cc = 0; cc < 8; cc++) memcpy(o + 512 * l + 32 * (t % 16) + 4 * cc, q + 32 * cc + 4 * l, 4);
        }
    _Alignas(64) int32_t xl[2][16][16], xh[3][16][16], xq[4][16][16];
    __m512 ddv[32];
    memset(xl, 0, sizeof xl);
    memset(xh, 0, sizeof xh);
    int cur_rows = -1;
    for (int64_t r = r0; r < r1;) {
        int64_t g0;
        const __mmask16 m = dj_group16(r, r1, &g0);
        const uint8_t *row[16];
        for (int i = 0; i < 16; i++) {
            int64_t ri = g0 + i < r ? r : g0 + i;
            if (ri >= r1) ri = r1 - 1;
            row[i] = w + (size_t)ri * ws;
        }
        for (int64_t b = 0; b < nb; b++) ktx_decode(SG, CR, HZ, dec, row, bs, b, tmp, &B[b]);
        r = g0 + 16;
        for (int64_t t0 = 0; t0 < n_tok; t0 += 16) {
            const int nt = (int)(n_tok - t0 < 16 ? n_tok - t0 : 16);
            dj_amx_int8_rows(nt, CR ? 64 : 32, &cur_rows);
            for (int j = 0; j < (CR ? 16 : 128); j++) acc[j] = _mm512_setzero_ps();
            const uint8_t *at = a + (size_t)t0 * as, *apt = ap + (size_t)(t0 / 16) * (size_t)nb * 4096;
            if (HZ && !CR) {
                ktx_lanes_hz(MN, nb, B, apt, at, as, da + (size_t)(t0 / 16) * (size_t)nb * 16, nt, acc, xq, ddv);
                for (int t = 0; t < nt; t++)
                    _mm512_mask_storeu_ps(c + (t0 + t) * ldc + g0, m, DJ_Q_HSUM8_512(acc + t, 16));
                continue;
            }
            /* Steps (CR: a super-block; else a super-block's lane): step s's sums go to the C
             * tiles 2 (s % 2), 2 (s % 2) + 1 and are stored, and folded into the chains, while
             * step s + 1's are made. */
            const int64_t n_steps = CR ? nb : 8 * nb;
            DJ_AMX_BARRIER();
            for (int64_t st = 0; st <= n_steps; st++) {
                if (st < n_steps) {
                    const int p2 = (int)(st % 2);
                    if (CR) {
                        const struct ktx_blk *Bb = &B[st];
                        const uint8_t *aq = apt + (size_t)st * 4096;
                        if (p2 == 0) {
                            _tile_zero(0);
                            _tile_zero(1);
                        } else {
                            _tile_zero(2);
                            _tile_zero(3);
                        }
                        for (int u = 0; u < 4; u++) {
                            _tile_loadd(4, aq + 1024 * u, 64);
                            _tile_loadd(6, &Bb->lo[16 * u], 64);
                            if (p2 == 0) _tile_dpbsud(0, 4, 6);
                            else _tile_dpbsud(2, 4, 6);
                            if (Bb->hz) continue;
                            _tile_loadd(7, &Bb->hi[16 * u], 64);
                            if (p2 == 0) _tile_dpbssd(1, 4, 7);
                            else _tile_dpbssd(3, 4, 7);
                        }
                    } else {
                        const int64_t b = st / 8;
                        const int l = (int)(st % 8);
                        const struct ktx_blk *Bb = &B[b];
                        if (p2 == 0) {
                            _tile_loadd(4, apt + (size_t)b * 4096 + 512 * l, 32);
                            _tile_loadd(6, &Bb->lo[8 * l], 64);
                            _tile_zero(0);
                            _tile_dpbsud(0, 4, 6);
                            if (!Bb->hz) {
                                _tile_loadd(7, &Bb->hi[8 * l], 64);
                                _tile_zero(1);
                                _tile_dpbssd(1, 4, 7);
                            }
                        } else {
                            _tile_loadd(5, apt + (size_t)b * 4096 + 512 * l, 32);
                            _tile_loadd(6, &Bb->lo[8 * l], 64);
                            _tile_zero(2);
                            _tile_dpbsud(2, 5, 6);
                            if (!Bb->hz) {
                                _tile_loadd(7, &Bb->hi[8 * l], 64);
                                _tile_zero(3);
                                _tile_dpbssd(3, 5, 7);
                            }
                        }
                    }
                }
                if (st == 0) continue;
                const int64_t ps = st - 1; /* the step to fold in */
                const int64_t b = CR ? ps : ps / 8;
                const struct ktx_blk *Bb = &B[b];
                if (ps % 2 == 0) {
                    _tile_stored(0, xl[0], 64);
                    if (!Bb->hz) _tile_stored(1, xh[0], 64);
                } else {
                    _tile_stored(2, xl[1], 64);
                    if (!Bb->hz) _tile_stored(3, xh[1], 64);
                }
                DJ_AMX_BARRIER();
                const int32_t(*sl)[16] = xl[ps % 2], (*sh)[16] = xh[Bb->hz ? 2 : ps % 2]; /* xh[2]: zeros */
                const uint8_t *ab = at + (size_t)b * abs_;
                const float *dab = da + (size_t)((t0 / 16) * nb + b) * 16;
                if (CR) {
                    for (int t = 0; t < nt; t++) {
                        const uint8_t *bsum = ab + (size_t)t * as + bso;
                        __m512i is = _mm512_load_si512(sl[t]);
                        if (!HZ) is = _mm512_add_epi32(is, _mm512_slli_epi32(_mm512_load_si512(sh[t]), 8));
                        DJ_UNROLL for (int q = 0; q < 8; q++)
                            is = _mm512_dpwssd_epi32(is, Bb->cwp[q], _mm512_set1_epi32((int)dj_load_u32(bsum + 4 * q)));
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(Bb->d, _mm512_set1_ps(dab[t])), acc[t]);
                    }
                } else {
                    const int l = (int)(ps % 8);
                    __m512 *al = acc + 16 * l;
                    for (int t = 0; t < nt; t++) {
                        const __m512i S = _mm512_add_epi32(_mm512_load_si512(sl[t]), _mm512_slli_epi32(_mm512_load_si512(sh[t]), 8));
                        const __m512 da_t = _mm512_set1_ps(dab[t]);
                        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(Bb->d, da_t), al[t]);
                        if (MN) {
                            const uint8_t *bsum = ab + (size_t)t * as + bso;
                            const __m512i M = _mm512_dpwssd_epi32(_mm512_setzero_si512(), Bb->mwp[l],
                                                                  _mm512_set1_epi32((int)dj_load_u32(bsum + 4 * l)));
                            v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(Bb->dmin, da_t), v);
                        }
                        al[t] = v;
                    }
                }
                DJ_AMX_BARRIER();
            }
            for (int t = 0; t < nt; t++) /* CR: the chain; else dj_q_hsum8's tree of the 8 lanes' */
                _mm512_mask_storeu_ps(c + (t0 + t) * ldc + g0, m, CR ? acc[t] : DJ_Q_HSUM8_512(acc + t, 16));
        }
    }
    _tile_release();
    return true;
}

/* (FALLBACK: the matmul below 17 tokens — the avx512 table's) */
#define KTX_AMX(T, SG, CR, MN, HZ, FALLBACK)                                                                         \
    void dj_##T##_amx_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc, \
                             int64_t r0, int64_t r1, int64_t n_tok) {                                              \
        if (!ktx_matmul(SG, CR, MN, HZ, T##_dec, sizeof(struct dj_block_##T), k, w, ws, a, as, c, ldc, r0, r1, n_tok)) \
            FALLBACK(k, w, ws, a, as, c, ldc, r0, r1, n_tok);                                                       \
    }
KTX_AMX(q5_K, 0, 0, 1, 0, dj_q5_K_avx512_matmul)
KTX_AMX(q3_K, 0, 1, 0, 0, dj_q3_K_avx512_matmul)
KTX_AMX(q2_K, 0, 0, 1, 1, dj_q2_K_avx512_matmul)
KTX_AMX(iq4_xs, 1, 0, 0, 0, dj_iq4_xs_avx512_matmul)
KTX_AMX(iq2_xxs, 0, 1, 0, 0, dj_iq2_xxs_avx512_matmul)
KTX_AMX(iq2_xs, 0, 1, 0, 0, dj_iq2_xs_avx512_matmul)
KTX_AMX(iq2_s, 0, 1, 0, 0, dj_iq2_s_avx512_matmul)
KTX_AMX(iq3_xxs, 0, 1, 0, 0, dj_iq3_xxs_avx512_matmul)
KTX_AMX(iq3_s, 0, 1, 0, 0, dj_iq3_s_avx512_matmul)
KTX_AMX(iq1_s, 0, 1, 0, 0, dj_iq1_s_avx512_matmul)
KTX_AMX(iq1_m, 0, 1, 0, 0, dj_iq1_m_avx512_matmul)
KTX_AMX(tq1_0, 0, 1, 0, 1, dj_tq1_0_avx512_matmul)
KTX_AMX(tq2_0, 0, 1, 0, 1, dj_tq2_0_avx512_matmul)
#pragma GCC pop_options

#define KT_SET(k, TYPE, T)                                                                                         \
    do {                                                                                                           \
        (k)->w[TYPE].act_type = dj_kernels_act_type(TYPE);                                                         \
        (k)->w[TYPE].matmul = T##_matmul;                                                                          \
        (k)->w[TYPE].dot = T##_dot;                                                                                \
        (k)->w[TYPE].dequantize_row = T##_dequant;                                                                 \
        (k)->w[TYPE].pack = NULL;                                                                                  \
        (k)->w[TYPE].matmul_packed = NULL;                                                                         \
    } while (0)

void dj_kernels_init_avx2_quants(struct dj_kernels *k) {
    KT_SET(k, DJ_TYPE_Q5_K, q5_K);
    KT_SET(k, DJ_TYPE_Q3_K, q3_K);
    KT_SET(k, DJ_TYPE_Q2_K, q2_K);
    KT_SET(k, DJ_TYPE_IQ4_XS, iq4_xs);
    KT_SET(k, DJ_TYPE_IQ2_XXS, iq2_xxs);
    KT_SET(k, DJ_TYPE_IQ2_XS, iq2_xs);
    KT_SET(k, DJ_TYPE_IQ2_S, iq2_s);
    KT_SET(k, DJ_TYPE_IQ3_XXS, iq3_xxs);
    KT_SET(k, DJ_TYPE_IQ3_S, iq3_s);
    KT_SET(k, DJ_TYPE_IQ1_S, iq1_s);
    KT_SET(k, DJ_TYPE_IQ1_M, iq1_m);
    KT_SET(k, DJ_TYPE_TQ1_0, tq1_0);
    KT_SET(k, DJ_TYPE_TQ2_0, tq2_0);
    dj_kernels_init_avx2_quants32(k);
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
void dj_kernels_init_avx2_quants(struct dj_kernels *k) { (void)k; }
#endif
