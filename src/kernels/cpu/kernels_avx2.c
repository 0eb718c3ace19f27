/*
 * kernels_avx2.c — AVX2 + FMA + F16C kernels (x86-64-v3: Haswell, Zen 1+).
 *
 * Accumulation scheme, per (row, token) pair; tiles only share loads:
 *   - float types: one 8-lane accumulator, element i in lane i % 8,
 *     acc = fma(w, a, acc) over k in order, then the fixed tree of hsum8.
 *   - q8_0, q4_0 (x q8_0): 8 rows in the 8 lanes, one float chain per pair in
 *     one lane: the exact int32 dot of a block, then one fma per block (see
 *     the q4_0/q8_0 section; bitwise the AVX-512 table's results).
 *   - q4_K (x q8_K): 8 rows in the 8 lanes as for q4_0 (its section; bitwise
 *     the AVX-512 table's results).
 *   - q6_K (x q8_K): the exact int32 dot of a whole super-block in 8 lanes
 *     (sub-block scales applied in integers), then one fma per super-block
 *     into the float accumulator; hsum8 at the end.
 * Integer sums are exact and order-free; the float operations per pair are
 * the same whatever the tile shape, which is the batch-invariance contract.
 * Tiles (rows x tokens, 16 ymm registers): 4x2 for float, 2x2 for q6_K; up to
 * 2 tokens, 1-row tiles (cpu/tile.h); q4_0/q8_0/q4_K: 8 rows x 4 tokens.
 *
 * maddubs (u8 x s8 -> s16, saturating) never saturates here: q8_0 weights
 * go in as |w| (<= 128) against sign(a, w) (|a| <= 127, so < 32767 per
 * pair); q4_0/q4_K nibbles are <= 15, q6_K values <= 63 (2*63*127 = 16002).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>

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

/* 32 nibbles of a q4_0 block as bytes in element order (low nibbles, then high). */
static inline __m256i q4_0_unpack(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    const __m256i y = _mm256_insertf128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
    return _mm256_and_si256(y, _mm256_set1_epi8(0x0F));
}

/* ---- q4_0 and q8_0 x q8_0: 8 rows in the 8 lanes ----------------------------------------
 *
 * Per (row, token) pair, blocks b = 0 .. nb-1 in order:
 *
 *     acc = fma(float(isum_b), d_w[b] * d_a[b], acc)      (acc starts at 0; the result)
 *
 * isum_b, the block's integer dot, is exact in int32 (maddubs: unsigned x signed bytes
 * to saturating word pairs, madd: words to dwords):
 *   - q8_0: |w| x sign(a, w) (<= 128 * 127 a product, so a pair never saturates);
 *   - q4_0: the raw nibbles n = w + 8 (eight maddubs of <= 2 * 15 * 127 summed as words,
 *     <= 30480), and the sum starts at -8 * sum(a) (q8l_tok.ncorr).
 * These are the float operations of the AVX-512 table's q16_fma on the same exact
 * integers, so both tables give the same bits for these two types (tests/kernels check
 * it).  No lane tree: each pair's chain lives in one lane.  A group of 8 consecutive rows
 * puts row i in lane i: vector j of a block has row i's bytes 4j..4j+3 in lane i (q8_0:
 * elements 4j..4j+3, vectors 0-3 from the block's bytes 2..17, 4-7 from 18..33; q4_0: 4
 * vectors of bytes 2..17, whose low nibbles are elements 4j.. and high nibbles 16+4j..),
 * so one broadcast activation dword serves all 8 rows, and a token's 8 results are one
 * store into its row of c.
 *
 * pack (load time) writes each group in that order, blocks in pairs (the last alone when
 * nb is odd): the pair's quants (q8_0 2 x 256 bytes, q4_0 2 x 128), then each block's 8 f16
 * scales (16 bytes); a pair is 544 (288) bytes, a multiple of 32, so every load is aligned
 * in an aligned copy.  A 16-row group of kernels.h is two of these 8-row groups.  Without
 * the packed copy (DJ_REPACK=0, and the dot), a slab of blocks is transposed into the same
 * format in scratch (q8l_transpose), then read as the packed copy is: one kernel. */

struct q8l_tok { float d; int32_t ncorr; }; /* one token's block: d_a, the isum's start */

size_t dj_avx2_pf = 2048; /* cpu_internal.h: the decode kernels' prefetch distance (DJ_PK_PF) */

static inline DJ_ALWAYS_INLINE void q8l_prep_tok(const int q8, int64_t nb, const uint8_t *a, struct q8l_tok *o) {
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++, a += sizeof(struct dj_block_q8_0)) {
        o[b].d = f16_to_f32(a);
        o[b].ncorr = 0;
        if (!q8) { /* sum of the 32 signed bytes: sad of (a + 128) against 0, minus 32 * 128 */
            const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + 2)), x80),
                                              _mm256_setzero_si256());
            const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
            o[b].ncorr = (int32_t)(-8 * sum);
        }
    }
}

static inline size_t q8l_wbs(const int q8) { return q8 ? sizeof(struct dj_block_q8_0) : sizeof(struct dj_block_q4_0); }
static inline size_t q8l_qbytes(const int q8) { return q8 ? 256 : 128; } /* a block's quants, 8 rows */
/* In an 8-row group G in the packed format (nb blocks a row): block b's vectors, its scales. */
static inline const uint8_t *q8l_q(const int q8, const uint8_t *G, int64_t b) {
    return G + (size_t)(b / 2) * 2 * 8 * q8l_wbs(q8) + (size_t)(b % 2) * q8l_qbytes(q8);
}
static inline const uint8_t *q8l_d(const int q8, const uint8_t *G, int64_t b, int64_t nb) {
    const size_t nq = (b | 1) < nb ? 2 : 1; /* blocks in b's pair */
    return G + (size_t)(b / 2) * 2 * 8 * q8l_wbs(q8) + nq * q8l_qbytes(q8) + (size_t)(b % 2) * 16;
}

/* 16 bytes of 8 rows (row i at p + i * ws), transposed: out[j] lane i = row i's bytes 4j..4j+3. */
static inline DJ_ALWAYS_INLINE void q8l_transpose(const uint8_t *p, size_t ws, __m256i out[4]) {
    __m256i v[4];
    DJ_UNROLL for (int i = 0; i < 4; i++)
        v[i] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p + (size_t)(i + 4) * ws)),
                                _mm_loadu_si128((const __m128i *)(p + (size_t)i * ws)));
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Blocks [b0, b1) of 8 rows (src[i]: row i) into dst in the packed format, as a group of
 * b1 - b0 blocks (the pair structure relative to b0). */
static inline DJ_ALWAYS_INLINE void q8l_pack_blocks(const int q8, const uint8_t *const src[8], int64_t b0, int64_t b1,
                                                    uint8_t *dst) {
    const size_t bs = q8l_wbs(q8);
    const int64_t n = b1 - b0;
    const size_t ws = (size_t)(src[1] - src[0]);
    const int even = src[7] == src[0] + 7 * ws; /* 8 rows ws apart (ws = 0: one row) */
    for (int64_t b = 0; b < n; b++) {
        __m256i *q = (__m256i *)q8l_q(q8, dst, b);
        uint8_t *d = (uint8_t *)q8l_d(q8, dst, b, n);
        const size_t o = (size_t)(b0 + b) * bs;
        for (int h = 0; h < (q8 ? 2 : 1); h++) {
            __m256i t[4];
            if (even) {
                q8l_transpose(src[0] + o + 2 + 16 * (size_t)h, ws, t);
            } else {
                uint8_t tmp[4][32];
                for (int j = 0; j < 4; j++)
                    for (int i = 0; i < 8; i++) memcpy(&tmp[j][4 * i], src[i] + o + 2 + 16 * (size_t)h + 4 * (size_t)j, 4);
                for (int j = 0; j < 4; j++) t[j] = _mm256_loadu_si256((const __m256i *)tmp[j]);
            }
            for (int j = 0; j < 4; j++) _mm256_storeu_si256(q + 4 * h + j, t[j]);
        }
        for (int i = 0; i < 8; i++) memcpy(d + 2 * i, src[i] + o, 2);
    }
}

/* The 8 rows of group g: rows past n_rows repeat the last. */
static inline void q8l_src(const uint8_t *w, size_t ws, int64_t n_rows, int64_t g, const uint8_t *src[8]) {
    for (int64_t i = 0; i < 8; i++) {
        const int64_t r = 8 * g + i;
        src[i] = w + (size_t)(r < n_rows ? r : n_rows - 1) * ws;
    }
}

static void q8l_pack(const int q8, int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                     void *dst) {
    for (int64_t g = 2 * g0; g < 2 * g1; g++) { /* kernels.h's 16-row groups: two of ours */
        const uint8_t *src[8];
        q8l_src(w, ws, n_rows, g, src);
        q8l_pack_blocks(q8, src, 0, k / 32, (uint8_t *)dst + (size_t)g * 8 * ws);
    }
}
static void q4_0_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    q8l_pack(0, k, w, ws, n_rows, g0, g1, dst);
}
static void q8_0_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    q8l_pack(1, k, w, ws, n_rows, g0, g1, dst);
}

/* Blocks [0, nbs) of a group G in the packed format (nbg blocks a row in it) for NT tokens
 * (a: their block 0, as apart; tp: their q8l_tok, tps apart).  The accumulators start at
 * zero (first) or from accb (token j at accb[j]), and go back there or, with last, to
 * c[j * ldc + lane] for the lanes in m.  pf: prefetch the stream dj_avx2_pf ahead. */
static inline DJ_ALWAYS_INLINE void q8l_run(const int q8, const int NT, const uint8_t *G, int64_t nbg, int64_t nbs,
                                            int first, int last, const uint8_t *a, size_t as,
                                            const struct q8l_tok *tp, int64_t tps, __m256 *accb, float *c,
                                            int64_t ldc, __m256i m, int pf) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    DJ_UNROLL for (int t = 0; t < NT; t++) acc[t] = first ? _mm256_setzero_ps() : accb[t];
    for (int64_t b = 0; b < nbs; b++) {
        const __m256i *v = (const __m256i *)q8l_q(q8, G, b);
        if (pf) {
            for (int l = 0; l < (q8 ? 5 : 3); l++) _mm_prefetch((const char *)v + dj_avx2_pf + 64 * l, _MM_HINT_T0);
        }
        __m256i is[4];
        DJ_UNROLL for (int t = 0; t < NT; t++) is[t] = _mm256_setzero_si256();
        /* Several tokens: a rolled loop over the block's vectors (fully unrolled, GCC 12 hoisted
         * the 32 broadcasts of 4 tokens and spilled ~50 vectors a block to the stack: q4_0
         * prefill 144 -> 208 GFLOP/s, 4-16 tokens 71-76 -> 101-108 Gw/s x M, bench_kernels 1
         * thread).  One token (decode): unrolled, which streams faster (24 vs 19 GB/s). */
        const uint8_t *ab0 = a + (size_t)b * sizeof(struct dj_block_q8_0) + 2;
        if (NT == 1) {
            DJ_UNROLL for (int j = 0; j < 8; j++) {
                const __m256i av = _mm256_set1_epi32((int)dj_load_u32(ab0 + 4 * j));
                if (q8) {
                    const __m256i wsg = _mm256_loadu_si256(v + j);
                    is[0] = _mm256_add_epi32(is[0], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wsg, wsg),
                                                                                          _mm256_sign_epi8(av, wsg)),
                                                                      ones));
                } else {
                    const __m256i x = _mm256_loadu_si256(v + (j & 3));
                    const __m256i wq = j < 4 ? _mm256_and_si256(x, m4) : _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
                    is[0] = _mm256_add_epi16(is[0], _mm256_maddubs_epi16(wq, av)); /* words, <= 8 * 3810 */
                }
            }
        } else if (q8) {
#pragma GCC unroll 1
            for (int j = 0; j < 8; j++) {
                const __m256i wsg = _mm256_loadu_si256(v + j), wq = _mm256_sign_epi8(wsg, wsg);
                DJ_UNROLL for (int t = 0; t < NT; t++) {
                    const __m256i av = _mm256_set1_epi32((int)dj_load_u32(ab0 + (size_t)t * as + 4 * (size_t)j));
                    is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(_mm256_maddubs_epi16(wq, _mm256_sign_epi8(av, wsg)), ones));
                }
            }
        } else {
#pragma GCC unroll 1
            for (int j = 0; j < 4; j++) { /* low nibbles: elements 4j.., high: 16 + 4j.. */
                const __m256i x = _mm256_loadu_si256(v + j);
                const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
                DJ_UNROLL for (int t = 0; t < NT; t++) {
                    const uint8_t *at = ab0 + (size_t)t * as + 4 * (size_t)j;
                    const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_set1_epi32((int)dj_load_u32(at)));
                    const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_set1_epi32((int)dj_load_u32(at + 16)));
                    is[t] = _mm256_add_epi16(is[t], _mm256_add_epi16(pl, ph)); /* words, <= 8 * 3810 */
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)q8l_d(q8, G, b, nbg)));
        DJ_UNROLL for (int t = 0; t < NT; t++) {
            const struct q8l_tok tk = tp[t * tps + b];
            __m256i s = is[t];
            if (!q8) s = _mm256_add_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(tk.ncorr));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(tk.d)), acc[t]);
        }
    }
    if (last) {
        DJ_UNROLL for (int t = 0; t < NT; t++) _mm256_maskstore_ps(c + t * ldc, m, acc[t]);
    } else {
        DJ_UNROLL for (int t = 0; t < NT; t++) accb[t] = acc[t];
    }
}
/* A run of one type and token count (tp: that type's prepared token blocks). */
typedef void (*q8l_run_fn)(const uint8_t *G, int64_t nbg, int64_t nbs, int first, int last, const uint8_t *a,
                           size_t as, const void *tp, int64_t tps, __m256 *accb, float *c, int64_t ldc,
                           const __m256i *m, int pf); /* m by pointer: a function with a 256-bit argument returns
                                                    * without vzeroupper (quants32_avx2.c) */
#define Q8L_RUN(T, Q8, N)                                                                                        \
    static void T##_run_##N(const uint8_t *G, int64_t nbg, int64_t nbs, int first, int last, const uint8_t *a,    \
                            size_t as, const void *tp, int64_t tps, __m256 *accb, float *c, int64_t ldc,          \
                            const __m256i *m, int pf) {                                                          \
        q8l_run(Q8, N, G, nbg, nbs, first, last, a, as, tp, tps, accb, c, ldc, *m, pf);                          \
    }
Q8L_RUN(q4_0, 0, 1) Q8L_RUN(q4_0, 0, 2) Q8L_RUN(q4_0, 0, 3) Q8L_RUN(q4_0, 0, 4)
Q8L_RUN(q8_0, 1, 1) Q8L_RUN(q8_0, 1, 2) Q8L_RUN(q8_0, 1, 3) Q8L_RUN(q8_0, 1, 4)
#define Q8L_NT 4      /* tokens per pass (16 ymm registers: 4 accumulators, 4 integer sums) */
#define Q8L_SLAB 32   /* blocks per slab in prefill: 8.5 KiB (q8_0) of weights, in L1 */
#define Q8L_SMALL 16  /* up to this many tokens (packed): whole rows per pass, no slabs */

/* Lanes [lo, hi) of 8, as a maskstore mask. */
static inline __m256i q8l_lanes(int64_t lo, int64_t hi) {
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32((int)lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), i));
}

/* The 8 rows serving row r of [.., r1): packed, r's group (*g0 = r rounded down to 8, lanes
 * from r); the file's layout, src = rows r..r+7, or past the last full group the 8 ending at
 * r1 (the rows before r recomputed, not stored), or with fewer than 8 rows before r1 the last
 * one repeated.  *m: the lanes to store.  Returns the next r. */
static inline int64_t q8l_rows(const int pk, const uint8_t *w, size_t ws, int64_t r, int64_t r1, const uint8_t *src[8],
                               int64_t *g0, __m256i *m) {
    if (pk) {
        *g0 = r & ~(int64_t)7;
    } else {
        *g0 = r1 - r >= 8 || r1 < 8 ? r : r1 - 8;
        for (int64_t i = 0; i < 8; i++) src[i] = w + (size_t)(*g0 + i < r1 ? *g0 + i : r1 - 1) * ws;
    }
    const int64_t hi = r1 - *g0 < 8 ? r1 - *g0 : 8;
    *m = q8l_lanes(r - *g0, hi);
    return *g0 + hi;
}

/* ---- q4_K x q8_K: 8 rows in the 8 lanes ------------------------------------------------
 *
 * Per (row, token) pair, super-blocks b = 0 .. nb-1 in order:
 *
 *     isum = sum over sub-blocks s of sc_s * (sum over s of q * a)       exact in int32
 *     imin = sum over s of m_s * (bsums[2s] + bsums[2s+1])                exact in int32
 *     acc  = fma(float(isum), d_w * d_a, acc)
 *     acc  = fnmadd(float(imin), dmin_w * d_a, acc)      (acc starts at 0; the result)
 *
 * the AVX-512 table's q4_K chain on the same integers, so the two tables agree bitwise.
 * As for q4_0/q8_0, 8 consecutive rows sit in the 8 lanes: every 16-byte chunk of a
 * super-block (chunk 0: d, dmin and the 12 scale bytes; 1..8: the quants) is transposed
 * into 4 vectors (vector j lane i = row i's bytes 4j..4j+3); the 8 maddubs of a sub-block
 * half (nibbles <= 15 against a broadcast activation dword) sum as words (<= 30480), one
 * madd by the sub-block's scale (a word pair per lane) takes them to int32, the mins go
 * in as word pairs by madd.  The packed copy is those vectors in that order (super-block
 * b of a group at 8 * 144 * b, chunk o at 128 * o); without it a slab of super-blocks is
 * transposed into the same format in scratch. */

#define Q4KL_SB (8 * sizeof(struct dj_block_q4_K)) /* a super-block of 8 rows, 1152 bytes */


/* Super-blocks [b0, b1) of 8 rows (src[i]: row i) into dst in the packed format. */
static inline DJ_ALWAYS_INLINE void q4kl_pack_blocks(const uint8_t *const src[8], int64_t b0, int64_t b1,
                                                     uint8_t *dst) {
    const size_t bs = sizeof(struct dj_block_q4_K), ws = (size_t)(src[1] - src[0]);
    const int even = src[7] == src[0] + 7 * ws;
    for (int64_t b = b0; b < b1; b++)
        for (size_t o = 0; o < bs / 16; o++) {
            __m256i t[4];
            const size_t off = (size_t)b * bs + 16 * o;
            if (even) {
                q8l_transpose(src[0] + off, ws, t);
            } else {
                uint8_t tmp[4][32];
                for (int j = 0; j < 4; j++)
                    for (int i = 0; i < 8; i++) memcpy(&tmp[j][4 * i], src[i] + off + 4 * (size_t)j, 4);
                for (int j = 0; j < 4; j++) t[j] = _mm256_loadu_si256((const __m256i *)tmp[j]);
            }
            for (int j = 0; j < 4; j++)
                _mm256_storeu_si256((__m256i *)(dst + (size_t)(b - b0) * Q4KL_SB + 128 * o) + j, t[j]);
        }
}

static void q4_K_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    for (int64_t g = 2 * g0; g < 2 * g1; g++) {
        const uint8_t *src[8];
        q8l_src(w, ws, n_rows, g, src);
        q4kl_pack_blocks(src, 0, k / DJ_QK_K, (uint8_t *)dst + (size_t)g * 8 * ws);
    }
}

/* Super-blocks [0, nbs) at G (packed format) for NT tokens; the rest as q8l_run. */
static inline DJ_ALWAYS_INLINE void q4kl_run(const int NT, const uint8_t *G, int64_t nbs, int first, int last,
                                             const uint8_t *a, size_t as, const struct dj_q8K_tok *tp, int64_t tps,
                                             __m256 *accb, float *c, int64_t ldc, __m256i msk, int pf) {
    const size_t qso = offsetof(struct dj_block_q8_K, qs), abs_ = sizeof(struct dj_block_q8_K);
    const __m256i m4 = _mm256_set1_epi8(0x0F), c3f = _mm256_set1_epi8(0x3F), c30 = _mm256_set1_epi8(0x30);
    __m256 acc[4];
    DJ_UNROLL for (int t = 0; t < NT; t++) acc[t] = first ? _mm256_setzero_ps() : accb[t];
    for (int64_t b = 0; b < nbs; b++) {
        const __m256i *v = (const __m256i *)(G + (size_t)b * Q4KL_SB);
        if (pf) {
            for (int l = 0; l < 18; l++) _mm_prefetch((const char *)v + dj_avx2_pf + 64 * l, _MM_HINT_T0);
        }
        /* chunk 0: dword 0 = d | dmin << 16, dwords 1-3 = the scale bytes (lane = row) */
        const __m256i u0 = _mm256_loadu_si256(v + 1), u1 = _mm256_loadu_si256(v + 2), u2 = _mm256_loadu_si256(v + 3);
        const __m256i sc4[2] = {_mm256_and_si256(u0, c3f),
                                _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(u0, 2), c30))};
        __m256i isum[4];
        DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        DJ_UNROLL for (int ch = 0; ch < 4; ch++) {
            /* vector i of chunks 1 + 2ch, 2 + 2ch: elements 4i..4i+3 of sub-blocks 2ch (low
             * nibbles) and 2ch + 1 (high).  One pass per sub-block, so only NT word sums
             * are live besides isum (16 ymm registers: no spills at NT = 4) */
            const __m256i *q = v + 4 * (1 + 2 * ch);
            const uint8_t *ac = a + (size_t)b * abs_ + qso + 64 * ch;
            DJ_UNROLL for (int h = 0; h < 2; h++) {
                const int s = 2 * ch + h, bb = s % 4;
                __m256i xs[4];
                DJ_UNROLL for (int t = 0; t < NT; t++) xs[t] = _mm256_setzero_si256();
                DJ_UNROLL for (int i = 0; i < 8; i++) {
                    const __m256i x = _mm256_loadu_si256(q + i);
                    const __m256i n = _mm256_and_si256(h ? _mm256_srli_epi16(x, 4) : x, m4);
                    DJ_UNROLL for (int t = 0; t < NT; t++) {
                        const uint8_t *at = ac + (size_t)t * as + 4 * (size_t)i + 32 * (size_t)h;
                        xs[t] = _mm256_add_epi16(xs[t], _mm256_maddubs_epi16(n, _mm256_set1_epi32((int)dj_load_u32(at))));
                        DJ_CHAIN(xs[t]);
                    }
                }
                /* the sub-block's scale as a word pair in each lane */
                const __m256i ctl = _mm256_setr_epi8(bb, -1, bb, -1, 4 + bb, -1, 4 + bb, -1, 8 + bb, -1, 8 + bb, -1,
                                                     12 + bb, -1, 12 + bb, -1, bb, -1, bb, -1, 4 + bb, -1, 4 + bb, -1,
                                                     8 + bb, -1, 8 + bb, -1, 12 + bb, -1, 12 + bb, -1);
                const __m256i scw = _mm256_shuffle_epi8(sc4[s / 4], ctl);
                DJ_UNROLL for (int t = 0; t < NT; t++) {
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(xs[t], scw));
                    DJ_CHAIN(isum[t]);
                }
            }
        }
        /* the mins as word pairs (m_{2t}, m_{2t+1}); d and dmin */
        const __m256i m4b[2] = {_mm256_and_si256(u1, c3f),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
                                                _mm256_and_si256(_mm256_srli_epi32(u1, 2), c30))};
        __m256i mw[4];
        DJ_UNROLL for (int u = 0; u < 4; u++) {
            const int bb = 2 * (u % 2);
            const __m256i ctl = _mm256_setr_epi8(bb, -1, bb + 1, -1, 4 + bb, -1, 5 + bb, -1, 8 + bb, -1, 9 + bb, -1,
                                                 12 + bb, -1, 13 + bb, -1, bb, -1, bb + 1, -1, 4 + bb, -1, 5 + bb, -1,
                                                 8 + bb, -1, 9 + bb, -1, 12 + bb, -1, 13 + bb, -1);
            mw[u] = _mm256_shuffle_epi8(m4b[u / 2], ctl);
        }
        const __m256i u0d = _mm256_loadu_si256(v);
        const __m256i dd = _mm256_permute4x64_epi64(
            _mm256_shuffle_epi8(u0d, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8,
                                                      9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15)),
            0xD8); /* [d of rows 0-7 | dmin of rows 0-7] */
        const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(dd)), dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(dd, 1));
        DJ_UNROLL for (int t = 0; t < NT; t++) {
            const struct dj_q8K_tok *tk = &tp[t * tps + b];
            __m256i imin = _mm256_setzero_si256();
            DJ_UNROLL for (int u = 0; u < 4; u++)
                imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mw[u], _mm256_set1_epi32(tk->bs2[u])));
            const __m256 ad = _mm256_set1_ps(tk->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, ad), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, ad), acc[t]);
        }
    }
    if (last) {
        DJ_UNROLL for (int t = 0; t < NT; t++) _mm256_maskstore_ps(c + t * ldc, msk, acc[t]);
    } else {
        DJ_UNROLL for (int t = 0; t < NT; t++) accb[t] = acc[t];
    }
}
#define Q4KL_RUN(N)                                                                                             \
    static void q4_K_run_##N(const uint8_t *G, int64_t nbg, int64_t nbs, int first, int last, const uint8_t *a,  \
                             size_t as, const void *tp, int64_t tps, __m256 *accb, float *c, int64_t ldc,         \
                             const __m256i *m, int pf) {                                                         \
        (void)nbg; /* super-blocks are whole in a group: no pairs */                                            \
        q4kl_run(N, G, nbs, first, last, a, as, tp, tps, accb, c, ldc, *m, pf);                                  \
    }
Q4KL_RUN(1) Q4KL_RUN(2) Q4KL_RUN(3) Q4KL_RUN(4)

/* ---- the driver of the rows-in-lanes types (q4_0, q8_0, q4_K) -------------------------
 *
 * What differs between the three: their block, token preparation, packing and runs; the
 * walk over tokens, row groups and slabs, and the paths without scratch, are one. */

struct q8l_kind {
    int64_t qk;           /* weights a block: 32, or 256 (q4_K's super-block) */
    size_t abs;           /* an activation block's bytes (q8_0, q8_K) */
    size_t tok_bytes;     /* a prepared token block (struct q8l_tok, struct dj_q8K_tok) */
    int64_t slab;         /* blocks a prefill slab (even: q4_0/q8_0 pair their blocks) */
    size_t group_block;   /* the largest block of an 8-row group, in bytes (the stack copies) */
    void (*prep)(int64_t nb, const uint8_t *a, void *tp);
    void (*pack)(const uint8_t *const src[8], int64_t b0, int64_t b1, uint8_t *dst);
    const uint8_t *(*block)(const uint8_t *G, int64_t b); /* block b of a group, as block 0 of the rest */
    const uint8_t *(*one)(const uint8_t *G, int64_t b, int64_t nb, uint8_t *buf); /* block b, as a group of one */
    q8l_run_fn run[Q8L_NT];
};

static void q4_0_prep(int64_t nb, const uint8_t *a, void *tp) { q8l_prep_tok(0, nb, a, tp); }
static void q8_0_prep(int64_t nb, const uint8_t *a, void *tp) { q8l_prep_tok(1, nb, a, tp); }
static void q4_K_prep(int64_t nb, const uint8_t *a, void *tp) { dj_q8K_prep_tok(nb, a, tp); }
static void q4_0_pack_blocks(const uint8_t *const src[8], int64_t b0, int64_t b1, uint8_t *dst) {
    q8l_pack_blocks(0, src, b0, b1, dst);
}
static void q8_0_pack_blocks(const uint8_t *const src[8], int64_t b0, int64_t b1, uint8_t *dst) {
    q8l_pack_blocks(1, src, b0, b1, dst);
}
static const uint8_t *q4_0_block(const uint8_t *G, int64_t b) { return q8l_q(0, G, b); }
static const uint8_t *q8_0_block(const uint8_t *G, int64_t b) { return q8l_q(1, G, b); }
static const uint8_t *q4_K_block(const uint8_t *G, int64_t b) { return G + (size_t)b * Q4KL_SB; }
/* q4_0/q8_0: the block's quants and scales side by side (in the group they sit in a pair) */
static inline const uint8_t *q8l_one(const int q8, const uint8_t *G, int64_t b, int64_t nb, uint8_t *buf) {
    memcpy(buf, q8l_q(q8, G, b), q8l_qbytes(q8));
    memcpy(buf + q8l_qbytes(q8), q8l_d(q8, G, b, nb), 16);
    return buf;
}
static const uint8_t *q4_0_one(const uint8_t *G, int64_t b, int64_t nb, uint8_t *buf) { return q8l_one(0, G, b, nb, buf); }
static const uint8_t *q8_0_one(const uint8_t *G, int64_t b, int64_t nb, uint8_t *buf) { return q8l_one(1, G, b, nb, buf); }
static const uint8_t *q4_K_one(const uint8_t *G, int64_t b, int64_t nb, uint8_t *buf) {
    (void)nb;
    (void)buf;
    return G + (size_t)b * Q4KL_SB;
}

#define Q4KL_SLAB 8 /* super-blocks per prefill slab: 9 KiB, in L1 */
static const struct q8l_kind q4_0_kind = {32, sizeof(struct dj_block_q8_0), sizeof(struct q8l_tok), Q8L_SLAB,
                                          8 * sizeof(struct dj_block_q4_0), q4_0_prep, q4_0_pack_blocks, q4_0_block,
                                          q4_0_one, {q4_0_run_1, q4_0_run_2, q4_0_run_3, q4_0_run_4}};
static const struct q8l_kind q8_0_kind = {32, sizeof(struct dj_block_q8_0), sizeof(struct q8l_tok), Q8L_SLAB,
                                          8 * sizeof(struct dj_block_q8_0), q8_0_prep, q8_0_pack_blocks, q8_0_block,
                                          q8_0_one, {q8_0_run_1, q8_0_run_2, q8_0_run_3, q8_0_run_4}};
static const struct q8l_kind q4_K_kind = {DJ_QK_K, sizeof(struct dj_block_q8_K), sizeof(struct dj_q8K_tok), Q4KL_SLAB,
                                          Q4KL_SB, q4_K_prep, q4kl_pack_blocks, q4_K_block,
                                          q4_K_one, {q4_K_run_1, q4_K_run_2, q4_K_run_3, q4_K_run_4}};
#define Q8L_GROUP_BLOCK_MAX Q4KL_SB /* the largest group_block above */
#define Q8L_TOK_MAX sizeof(struct dj_q8K_tok)

/* The dot: the pair's chain with the row in all 8 lanes (ws = 0), lane 0 stored, a block
 * at a time through a one-block group on the stack: no scratch. */
static float q8l_dot(const struct q8l_kind *K, int64_t k, const uint8_t *w, const uint8_t *a) {
    _Alignas(32) uint8_t blk[Q8L_GROUP_BLOCK_MAX];
    _Alignas(8) uint8_t tk[Q8L_TOK_MAX];
    const uint8_t *src[8] = {w, w, w, w, w, w, w, w};
    float c = 0;
    __m256 acc = _mm256_setzero_ps();
    const __m256i zero_m = _mm256_setzero_si256();
    for (int64_t b = 0; b < k / K->qk; b++) {
        const uint8_t *ab = a + (size_t)b * K->abs;
        K->prep(1, ab, tk);
        K->pack(src, b, b + 1, blk);
        K->run[0](blk, 1, 1, b == 0, 0, ab, 0, tk, 0, &acc, NULL, 0, &zero_m, 0);
    }
    _mm256_maskstore_ps(&c, q8l_lanes(0, 1), acc);
    return c;
}
static float q4_0_dot(int64_t k, const void *w, const void *a) { return q8l_dot(&q4_0_kind, k, w, a); }
static float q8_0_dot(int64_t k, const void *w, const void *a) { return q8l_dot(&q8_0_kind, k, w, a); }
static float q4_K_dot(int64_t k, const void *w, const void *a) { return q8l_dot(&q4_K_kind, k, w, a); }

/* Prefill token chunks: ~1 MiB of activations, whole passes, at most n_tok. */
static inline int64_t q8l_tok_chunk(size_t as, int64_t n_tok) {
    int64_t tc = (int64_t)(((size_t)1024 << 10) / as);
    tc -= tc % Q8L_NT;
    if (tc < Q8L_NT) tc = Q8L_NT;
    return tc < n_tok ? tc : n_tok;
}

/* matmul (pk 0: the file's layout) and matmul_packed (pk 1) of a rows-in-lanes type. */
static void q8l_matmul(const struct q8l_kind *K, const int pk, int64_t k, const void *wv, size_t ws, const void *av,
                       size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok,
                       float (*dot)(int64_t, const void *, const void *)) {
    const uint8_t *w = wv, *a = av;
    const int64_t nb = k / K->qk;
    /* packed, few tokens: whole rows from the stream, Q8L_NT tokens a pass; otherwise
     * slabs (file's layout: transposed into scratch), the accumulators kept in accb
     * between slabs */
    const int whole = pk && n_tok <= Q8L_SMALL;
    const int64_t tok_chunk = whole ? n_tok : q8l_tok_chunk(as, n_tok);
    const size_t slab_bytes = pk ? 0 : (size_t)K->slab * K->group_block;
    const size_t accb_bytes = whole ? 0 : (size_t)tok_chunk * sizeof(__m256);
    const size_t tp_bytes = (size_t)tok_chunk * (size_t)nb * K->tok_bytes;
    uint8_t *scr = dj_kernel_scratch(slab_bytes + accb_bytes + tp_bytes);
    if (!scr) { /* out of memory: the same bits, element by element (the file's layout) */
        if (!pk) {
            dj_matmul_by_dot(dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
            return;
        }
        /* packed: one token, one 8-row group and one block at a time, on the stack */
        for (int64_t r = r0; r < r1;) {
            const int64_t g0 = r & ~(int64_t)7, hi = r1 - g0 < 8 ? r1 - g0 : 8;
            const __m256i m = q8l_lanes(r - g0, hi);
            const uint8_t *G = w + (size_t)g0 * ws;
            for (int64_t t = 0; t < n_tok; t++) {
                __m256 acc = _mm256_setzero_ps();
                for (int64_t b = 0; b < nb; b++) {
                    _Alignas(32) uint8_t blk[Q8L_GROUP_BLOCK_MAX];
                    _Alignas(8) uint8_t tk[Q8L_TOK_MAX];
                    const uint8_t *ab = a + (size_t)t * as + (size_t)b * K->abs;
                    K->prep(1, ab, tk);
                    K->run[0](K->one(G, b, nb, blk), 1, 1, b == 0, b == nb - 1, ab, 0, tk, 0, &acc, c + t * ldc + g0,
                              0, &m, 0);
                }
            }
            r = g0 + 8;
        }
        return;
    }
    uint8_t *slab = scr;
    __m256 *accb = (__m256 *)(scr + slab_bytes);
    uint8_t *tp = scr + slab_bytes + accb_bytes; /* token t's block b at tp + (t * nb + b) * tok_bytes */
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        for (int64_t t = 0; t < nt_c; t++) K->prep(nb, at + (size_t)t * as, tp + (size_t)(t * nb) * K->tok_bytes);
        for (int64_t r = r0; r < r1;) {
            int64_t g0;
            const uint8_t *src[8];
            __m256i m;
            r = q8l_rows(pk, w, ws, r, r1, src, &g0, &m);
            float *cg = c + t0 * ldc + g0;
            if (whole) {
                const uint8_t *G = w + (size_t)g0 * ws;
                for (int64_t t = 0; t < nt_c; t += Q8L_NT) {
                    const int nt = (int)(nt_c - t < Q8L_NT ? nt_c - t : Q8L_NT);
                    K->run[nt - 1](G, nb, nb, 1, 1, at + (size_t)t * as, as, tp + (size_t)(t * nb) * K->tok_bytes, nb,
                                   NULL, cg + t * ldc, ldc, &m, t == 0 && dj_avx2_pf);
                }
                continue;
            }
            for (int64_t s0 = 0; s0 < nb; s0 += K->slab) {
                const int64_t s1 = nb - s0 < K->slab ? nb : s0 + K->slab;
                /* packed: the slab in place (q4_0/q8_0 pairs start at even blocks, and the
                 * slab is even); the file's layout: the slab transposed into scratch.  Either
                 * way block s0 is block 0 of a group of nbg blocks. */
                const uint8_t *Gs;
                int64_t nbg;
                if (pk) {
                    Gs = K->block(w + (size_t)g0 * ws, s0);
                    nbg = nb - s0;
                } else {
                    K->pack(src, s0, s1, slab);
                    Gs = slab;
                    nbg = s1 - s0;
                }
                for (int64_t t = 0; t < nt_c; t += Q8L_NT) {
                    const int nt = (int)(nt_c - t < Q8L_NT ? nt_c - t : Q8L_NT);
                    K->run[nt - 1](Gs, nbg, s1 - s0, s0 == 0, s1 == nb, at + (size_t)t * as + (size_t)s0 * K->abs, as,
                                   tp + (size_t)(t * nb + s0) * K->tok_bytes, nb, accb + t, cg + t * ldc, ldc, &m,
                                   pk && t == 0 && dj_avx2_pf);
                }
            }
        }
    }
}
#define Q8L_MATMULS(T)                                                                                            \
    static void T##_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,  \
                           int64_t r0, int64_t r1, int64_t n_tok) {                                               \
        q8l_matmul(&T##_kind, 0, k, w, ws, a, as, c, ldc, r0, r1, n_tok, T##_dot);                                \
    }                                                                                                             \
    static void T##_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,        \
                                  int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {                           \
        q8l_matmul(&T##_kind, 1, k, w, ws, a, as, c, ldc, r0, r1, n_tok, T##_dot);                                \
    }
Q8L_MATMULS(q4_0)
Q8L_MATMULS(q8_0)
Q8L_MATMULS(q4_K)

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
            if (NT <= 2 && dj_avx2_pf) /* decode: the row's stream (rows follow each other), ahead */
                for (int l = 0; l < 4; l++) _mm_prefetch((const char *)wb[i] + dj_avx2_pf + 64 * l, _MM_HINT_T0);
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

DJ_TILES_2x2(q6_K)
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

static void dequant_bf16(const void *xv, float *y, int64_t n) { /* bf16 -> f32: the bits shifted up */
    const uint16_t *x = xv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16));
    for (; i < n; i++) y[i] = dj_bf16_to_f32(x[i]);
}

DJ_KV_ROWS_TO_F32(kv_rows_to_f32_avx2, dequant_f16, dequant_bf16, dequant_q8_0, dequant_q4_0)

bool dj_kernels_init_avx2(struct dj_kernels *k) {
    k->name = "avx2";
    k->isa = DJ_ISA_AVX2;
    DJ_KERNELS_SET_MATMUL_DOT(k);
    k->w[DJ_TYPE_F16].dequantize_row = dequant_f16;
    k->w[DJ_TYPE_Q8_0].dequantize_row = dequant_q8_0;
    k->w[DJ_TYPE_Q4_0].dequantize_row = dequant_q4_0;
    DJ_KERNELS_SET_PACKED(k);
    dj_avx2_pf = dj_kernels_prefetch_distance(dj_avx2_pf);
    k->quantize_act[DJ_TYPE_F16] = quant_f16;
    k->quantize_act[DJ_TYPE_Q8_0] = quant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_K] = quant_q8_K;
    k->attn_scores = attn_scores_avx2;
    k->attn_values = attn_values_avx2;
    k->attn_values_n = attn_values_avx2_n;
    k->kv_rows_to_f32 = kv_rows_to_f32_avx2;
    dj_kernels_init_avx2_quants(k);
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_avx2(struct dj_kernels *k) { (void)k; return false; }
#endif
