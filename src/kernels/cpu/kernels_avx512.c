/*
 * kernels_avx512.c — AVX-512 (F, BW, VL, DQ) + VNNI kernels: Ice Lake,
 * Sapphire Rapids, Zen 4, Zen 5.
 *
 * Accumulation scheme, per (row, token) pair; tiles only share loads:
 *   - float types: one 16-lane accumulator, element i in lane i % 16,
 *     fma over k in order, masked loads for the tail, then the fixed tree
 *     of hsum16.
 *   - q8_0, q4_0 (x q8_0): two blocks (64 values) per step: the exact int32
 *     dot in 16 lanes (lanes 0-7 first block, 8-15 second) by one vpdpbusd,
 *     then acc = fma(float(lanes), [d_w*d_a]x8 | [d_w'*d_a']x8, acc).  An odd
 *     last block runs the same step with the second half zero.
 *     vpdpbusd multiplies unsigned by signed bytes, so the weight goes in as
 *     an unsigned byte — q8_0: w + 128 (w ^ 0x80); q4_0: the raw nibble
 *     (w + 8) — and the int accumulator starts at -128 (-8) times the
 *     activation's 4-byte sums, which cancels the offset exactly.  That
 *     correction depends on the token only, so a tile computes it once per
 *     token for all its rows.
 *   - q4_K, q6_K (x q8_K): the exact int32 dot of a super-block in 16 lanes
 *     (vpmaddubsw, then vpdpwssd with the sub-block scales as words), then
 *     one (q4_K: two) fma per super-block into the float accumulator.
 *
 * Tiles (rows x tokens): 6x4 for f16, 4x4 for the other float types, q8_0
 * and q4_0 (q4_0 on operands unpacked once per call: see q4_0_matmul), 2x4
 * for the k-quants (two accumulators per pair; 2x4 measured ~10-30% faster
 * than 4x2 there); up to 2 tokens, 1-row tiles (cpu/tile.h; f16 past
 * k = 4096: 6-row; f16 prefill visits its tiles in its own order, see
 * f16_matmul).  All fused/rounded float operations per pair are the same for every tile shape: that is the
 * batch-invariance contract.  The integer paths never
 * overflow: per lane and super-block at most |q6_K| 8*2*16002*128 and the
 * like, far below 2^31.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "core/fp16.h"
#include "core/status.h"
#include "kernels/cpu/tile.h"

static inline float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16_to_f32(const uint8_t *p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(dj_load_u16(p))));
}

/* [h0 as float] x 8 | [h1 as float] x 8, from two f16 scales (h1 == NULL: zeros). */
static inline __m512 scales2(const uint8_t *p0, const uint8_t *p1) {
    const uint32_t h = (uint32_t)dj_load_u16(p0) | (p1 ? (uint32_t)dj_load_u16(p1) << 16 : 0);
    const __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), f);
}

/* ---- float types: 16 elements per step, masked loads for the tail ------------------- */

static inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

static inline __m512 load16_f32(const uint8_t *row, int64_t e, int64_t n) {
    return _mm512_maskz_loadu_ps(tail_mask(n), (const float *)row + e);
}
static inline __m512 load16_f16(const uint8_t *row, int64_t e, int64_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), (const uint16_t *)row + e));
}
static inline __m512 load16_bf16(const uint8_t *row, int64_t e, int64_t n) {
    const __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), (const uint16_t *)row + e);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One step of 16 elements from e for an MR x NT tile; n = elements left (>= 16: plain loads). */
#define FLOAT_STEP(WLOAD, ALOAD, n_)                                                           \
    do {                                                                                       \
        __m512 wv[6];                                                                          \
        DJ_UNROLL for (int i = 0; i < MR; i++) wv[i] = WLOAD(w + (size_t)i * ws, e, n_);       \
        DJ_UNROLL for (int j = 0; j < NT; j++) {                                               \
            const __m512 av = ALOAD(a + (size_t)j * as, e, n_);                                \
            DJ_UNROLL for (int i = 0; i < MR; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], av, acc[i][j]); \
        }                                                                                      \
    } while (0)

#define DEF_FLOAT_BODY(name, WLOAD, ALOAD)                                                     \
    static inline DJ_ALWAYS_INLINE void name##_body(const int MR, const int NT, int64_t k,     \
                                                    const uint8_t *w, size_t ws,               \
                                                    const uint8_t *a, size_t as, float *c,     \
                                                    int64_t ldc) {                             \
        __m512 acc[6][6];                                                                      \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)          \
            acc[i][j] = _mm512_setzero_ps();                                                   \
        int64_t e = 0;                                                                         \
        for (; e + 16 <= k; e += 16) FLOAT_STEP(WLOAD, ALOAD, 16);                             \
        if (e < k) FLOAT_STEP(WLOAD, ALOAD, k - e); /* masked: zeros past the end */           \
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)          \
            c[j * ldc + i] = hsum16(acc[i][j]);                                                \
    }

DEF_FLOAT_BODY(f32, load16_f32, load16_f32)
DEF_FLOAT_BODY(f16, load16_f16, load16_f32)
DEF_FLOAT_BODY(bf16, load16_bf16, load16_f32)
DJ_TILES_4x4(f32)
/* f16: 6x4 (24 accumulators, 6 converted weight vectors, 1 token vector of the
 * 32 zmm registers) measured 145-162 GFLOP/s vs 125-133 for 4x4 (2048 x 4096,
 * k = 2048, 128 tokens, 1 thread, Zen 5), ~+15% at k = 8192. */
DJ_TILES_6x4(f16)
DJ_TILES_4x4(bf16)
DJ_TILED_KERNEL(f32, 4)
/* Decode: one row per tile while the f32 activation row fits L1 comfortably
 * (k <= 4096: 27-31 GB/s vs 17-22 for 2-6 rows, k = 2048); beyond, every row
 * re-reads it from L2 and 6-row tiles share it (k = 8192: 22-23 GB/s vs 15-17).
 *
 * Prefill, k <= 4096: weight-stationary.  A block of ~512 KiB of weight rows stays
 * in L2 while every token tile passes over it (its 4 activation rows, <= 64 KiB,
 * from L1/L2 for all the block's row tiles), so the weights come from memory once
 * per call and the activations, shared by the threads, from L3 once per block.
 * dj_matmul_drive's order (256 KiB token chunks, weights re-streamed from DRAM
 * once per chunk, 16 times for 512 tokens) left the in-model 2-thread rate at
 * 115-144 GFLOP/s for the 4096 x 2048 per-thread gate/up products vs 145-173
 * with this order (1.1B F16 pp512, Zen 5, 2 threads).  k > 4096: dj_matmul_drive's
 * order with 512 KiB token chunks (16 tokens of k = 8192 instead of 8: the weights
 * stream from DRAM half as often), in the model 85-107 -> 115-129 GFLOP/s for the
 * 1024 x 8192 down product — although alone on the machine (bench_kernels, one
 * thread) 8 tokens is faster (~160 vs ~135): the memory traffic two threads share
 * is what decides.  Only the order of the tiles changes: every element is still
 * f16_1x1's. */
static void f16_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, int64_t n_tok) {
    if (n_tok <= DJ_SMALL_BATCH) {
        dj_matmul_drive(f16_tile, k <= 4096 ? 1 : f16_MR, f16_NT, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *wb = w, *ab = a;
    if (k <= 4096) {
        int64_t mc = (int64_t)((512u << 10) / ws);
        mc -= mc % f16_MR;
        if (mc < f16_MR) mc = f16_MR;
        for (int64_t rb = r0; rb < r1; rb += mc) {
            const int64_t re = rb + mc < r1 ? rb + mc : r1;
            for (int64_t t = 0; t < n_tok; t += f16_NT) {
                const int nt = (int)(n_tok - t < f16_NT ? n_tok - t : f16_NT);
                for (int64_t r = rb; r < re; r += f16_MR) {
                    const int mr = (int)(re - r < f16_MR ? re - r : f16_MR);
                    f16_tile(mr, nt, k, wb + (size_t)r * ws, ws, ab + (size_t)t * as, as, c + t * ldc + r, ldc);
                }
            }
        }
        return;
    }
    dj_matmul_drive_chunked(f16_tile, f16_MR, f16_NT, 512u << 10, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static float f16_dot(int64_t k, const void *w, const void *a) {
    float c;
    f16_1x1(k, w, 0, a, 0, &c, 1);
    return c;
}
DJ_TILED_KERNEL(bf16, 1)

/* ---- q8_0 x q8_0 and q4_0 x q8_0 ------------------------------------------------------ */

/* The 32 value bytes of two q8_0 blocks (the second NULL: zeros). */
static inline __m512i q8_0_load2(const uint8_t *b0, const uint8_t *b1) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(b0 + 2));
    if (!b1) return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
}

/* The nibbles of two q4_0 blocks as bytes in element order (the second NULL: zeros). */
static inline __m512i q4_0_load2(const uint8_t *b0, const uint8_t *b1) {
    const __m128i x0 = _mm_loadu_si128((const __m128i *)(b0 + 2));
    if (!b1) {
        const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(x0), _mm_srli_epi16(x0, 4), 1);
        return _mm512_zextsi256_si512(_mm256_and_si256(y, _mm256_set1_epi8(0x0F)));
    }
    const __m128i x1 = _mm_loadu_si128((const __m128i *)(b1 + 2));
    const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(x0), x1, 1);
    __m512i z = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(y));
    z = _mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* One step of two blocks (or one: `two` false) for an MR x NT tile.  Q4 selects
 * q4_0 weights (18-byte blocks, nibbles, offset 8) over q8_0 (34, w^0x80, 128). */
static inline DJ_ALWAYS_INLINE void q8_step(const int MR, const int NT, const int Q4, const int two,
                                            int64_t ib, const uint8_t *w, size_t ws,
                                            const uint8_t *a, size_t as, __m512 acc[4][4]) {
    const size_t wbs = Q4 ? sizeof(struct dj_block_q4_0) : sizeof(struct dj_block_q8_0);
    const size_t abs_ = sizeof(struct dj_block_q8_0);
    const __m512i off = _mm512_set1_epi8(Q4 ? 8 : (char)0x80);
    __m512i wq[4];
    __m512 wd[4];
    DJ_UNROLL for (int i = 0; i < MR; i++) {
        const uint8_t *p = w + (size_t)i * ws + (size_t)ib * wbs;
        const uint8_t *p1 = two ? p + wbs : NULL;
        wq[i] = Q4 ? q4_0_load2(p, p1) : _mm512_xor_si512(q8_0_load2(p, p1), off);
        wd[i] = scales2(p, p1);
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) {
        const uint8_t *q = a + (size_t)j * as + (size_t)ib * abs_;
        const uint8_t *q1 = two ? q + abs_ : NULL;
        const __m512i aq = q8_0_load2(q, q1);
        const __m512i zero = _mm512_setzero_si512();
        const __m512i ncorr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, aq));
        const __m512 ad = scales2(q, q1);
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            const __m512i x = _mm512_dpbusd_epi32(ncorr, wq[i], aq);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x), _mm512_mul_ps(wd[i], ad), acc[i][j]);
        }
    }
}

static inline DJ_ALWAYS_INLINE void q8_body(const int MR, const int NT, const int Q4, int64_t k,
                                            const uint8_t *w, size_t ws, const uint8_t *a,
                                            size_t as, float *c, int64_t ldc) {
    const int64_t nb = k / 32;
    __m512 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm512_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) q8_step(MR, NT, Q4, 1, ib, w, ws, a, as, acc);
    if (ib < nb) q8_step(MR, NT, Q4, 0, ib, w, ws, a, as, acc);
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum16(acc[i][j]);
}

static inline DJ_ALWAYS_INLINE void q8_0_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    q8_body(MR, NT, 0, k, w, ws, a, as, c, ldc);
}
static inline DJ_ALWAYS_INLINE void q4_0_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    q8_body(MR, NT, 1, k, w, ws, a, as, c, ldc);
}

DJ_TILES_4x4(q8_0)
DJ_TILED_KERNEL(q8_0, 1)

/* ---- q4_0 x q8_0: the same arithmetic on operands prepared once per call ----------------
 *
 * Per pair and per step of two blocks, q8_step above does one vpdpbusd, one
 * cvt, one mul and one fma; unpacking the nibbles and f16 scales of a weight
 * row (~13 instructions) and of a token (~12) cost as much again and were
 * redone for every tile.  q4_0_matmul instead unpacks each token of a chunk
 * once into its q4_0_astep form (aq, the -8 correction, [d_a]x8|[d_a']x8),
 * and for GEMM each 4-row weight tile once into q4_0_wstep form (nibbles as
 * bytes, [d_w]x8|[d_w']x8), then runs the tiles on those — the very values
 * q8_step computes, so every pair's float operations are unchanged and
 * q4_0_dot (the raw q8_step, 1x1) stays bitwise equal to every element.
 * The k loop runs in slabs of Q4_0_SLAB steps so that a 4-row tile's prepared
 * weights stay in L1 while the chunk's tokens pass (accumulators parked in
 * memory between slabs, exactly).  Decode (<= DJ_SMALL_BATCH tokens) keeps
 * the raw tiles: see q4_0_matmul. */
struct q4_0_wstep { __m512i q; __m512 d; };                /* one weight row, one step */
struct q4_0_astep { __m512i q; __m512i ncorr; __m512 d; }; /* one token, one step */

/* The nibbles and scales of two raw q4_0 blocks at p (two == 0: one, the rest zeros) —
 * q4_0_load2 and scales2 with one load and two word permutes.  `room`: at least 64
 * bytes are readable at p (a plain load; else a masked one, which measured ~10x
 * slower on Zen 5, so only a row's last steps take it). */
static inline DJ_ALWAYS_INLINE void q4_0_unpack2(const uint8_t *p, const int two, const int room, __m512i *q,
                                                 __m512 *d) {
    /* words of the 36 bytes: 0 = d, 1-8 = qs (block 0), 9 = d', 10-17 = qs' */
    static const uint16_t qidx[32] = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8,
                                      10, 11, 12, 13, 14, 15, 16, 17, 10, 11, 12, 13, 14, 15, 16, 17};
    static const uint16_t didx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9};
    const __mmask64 m = two ? (__mmask64)0xFFFFFFFFFull : (__mmask64)0x3FFFFull;
    const __m512i l = room ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(m, p);
    const __m512i z = _mm512_permutexvar_epi16(_mm512_loadu_si512(qidx), l);
    *q = _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(didx), l)));
}

static void q4_0_prep_a(int64_t nb, const uint8_t *a, struct q4_0_astep *o) {
    const __m512i off = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
    for (int64_t ib = 0; ib < nb; ib += 2, o++) {
        const uint8_t *q = a + (size_t)ib * sizeof(struct dj_block_q8_0);
        const uint8_t *q1 = ib + 1 < nb ? q + sizeof(struct dj_block_q8_0) : NULL;
        const __m512i aq = q8_0_load2(q, q1);
        o->q = aq;
        o->ncorr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, aq));
        o->d = scales2(q, q1);
    }
}

static void q4_0_prep_w(int64_t nb, const uint8_t *w, struct q4_0_wstep *o) {
    const int64_t bs = sizeof(struct dj_block_q4_0), safe = nb * bs - 64; /* plain loads up to here */
    int64_t ib = 0;
    for (; ib + 2 <= nb && ib * bs <= safe; ib += 2, o++) q4_0_unpack2(w + ib * bs, 1, 1, &o->q, &o->d);
    for (; ib + 2 <= nb; ib += 2, o++) q4_0_unpack2(w + ib * bs, 1, 0, &o->q, &o->d);
    if (ib < nb) q4_0_unpack2(w + ib * bs, 0, 0, &o->q, &o->d);
}

/* GEMM tile on prepared operands, steps [s0, s1) of the pairs' accumulation:
 * w/a = q4_0_wstep/q4_0_astep rows ws/as bytes apart (indexed from step 0 of
 * the slab, s0 only says which slab this is); the accumulators come from and
 * go back to accb (token j, row i at accb[4 * j + i]) between slabs, exactly,
 * and the last slab reduces them into c. */
static inline DJ_ALWAYS_INLINE void q4_0p_body(const int MR, const int NT, int64_t ns, const int first,
                                               const int last, const uint8_t *w, size_t ws, const uint8_t *a,
                                               size_t as, __m512 *accb, float *c, int64_t ldc) {
    __m512 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = first ? _mm512_setzero_ps() : accb[4 * j + i];
    for (int64_t s = 0; s < ns; s++) {
        __m512i wq[4];
        __m512 wd[4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            const struct q4_0_wstep *p = (const struct q4_0_wstep *)(w + (size_t)i * ws) + s;
            wq[i] = p->q;
            wd[i] = p->d;
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const struct q4_0_astep *q = (const struct q4_0_astep *)(a + (size_t)j * as) + s;
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m512i x = _mm512_dpbusd_epi32(q->ncorr, wq[i], q->q);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x), _mm512_mul_ps(wd[i], q->d), acc[i][j]);
            }
        }
    }
    if (last) {
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            c[j * ldc + i] = hsum16(acc[i][j]);
    } else {
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            accb[4 * j + i] = acc[i][j];
    }
}

typedef void (*q4_0p_fn)(int64_t ns, int first, int last, const uint8_t *w, size_t ws, const uint8_t *a,
                         size_t as, __m512 *accb, float *c, int64_t ldc);
#define Q4_0P_SHAPE(M, N)                                                                                   \
    static void q4_0p_##M##x##N(int64_t ns, int first, int last, const uint8_t *w, size_t ws,               \
                                const uint8_t *a, size_t as, __m512 *accb, float *c, int64_t ldc) {         \
        q4_0p_body(M, N, ns, first, last, w, ws, a, as, accb, c, ldc);                                      \
    }
Q4_0P_SHAPE(1, 1) Q4_0P_SHAPE(1, 2) Q4_0P_SHAPE(1, 3) Q4_0P_SHAPE(1, 4)
Q4_0P_SHAPE(2, 1) Q4_0P_SHAPE(2, 2) Q4_0P_SHAPE(2, 3) Q4_0P_SHAPE(2, 4)
Q4_0P_SHAPE(3, 1) Q4_0P_SHAPE(3, 2) Q4_0P_SHAPE(3, 3) Q4_0P_SHAPE(3, 4)
Q4_0P_SHAPE(4, 1) Q4_0P_SHAPE(4, 2) Q4_0P_SHAPE(4, 3) Q4_0P_SHAPE(4, 4)
static const q4_0p_fn q4_0p_tab[4][4] = {{q4_0p_1x1, q4_0p_1x2, q4_0p_1x3, q4_0p_1x4},
                                         {q4_0p_2x1, q4_0p_2x2, q4_0p_2x3, q4_0p_2x4},
                                         {q4_0p_3x1, q4_0p_3x2, q4_0p_3x3, q4_0p_3x4},
                                         {q4_0p_4x1, q4_0p_4x2, q4_0p_4x3, q4_0p_4x4}};

/* Decode keeps the raw tiles (q8_step on the rows as stored; also GEMM past
 * k = 4096, see q4_0_matmul): a prepared token
 * is 2.8x the bytes of a raw one, and with the weights streaming from DRAM it
 * measured ~2x slower (11 vs 22 GB/s, k = 8192, 1 thread), though faster
 * from cache (29 vs 23 GB/s). */
DJ_TILES_4x4(q4_0)

#define Q4_0_SLAB 32 /* steps (2048 weights) per slab: a 4-row slab of prepared weights is 16 KiB */

static void q4_0_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    const uint8_t *w = wv, *a = av;
    /* Past k = 4096 the prepared path measured slower (k = 8192, 256 tokens: 160-190
     * vs 200-208 GFLOP/s; a chunk then holds only ~20 prepared tokens, so each 4-row
     * tile is unpacked for few of them): the raw tiles there. */
    if (n_tok <= DJ_SMALL_BATCH || k > 4096) {
        dj_matmul_drive(q4_0_tile, n_tok <= DJ_SMALL_BATCH ? 1 : q4_0_MR, q4_0_NT, k, w, ws, a, as, c, ldc, r0, r1,
                        n_tok);
        return;
    }
    const int64_t nb = k / DJ_QK4_0, ns = (nb + 1) / 2;
    const size_t aps = (size_t)ns * sizeof(struct q4_0_astep), wps = (size_t)ns * sizeof(struct q4_0_wstep);
    /* prepared tokens of a chunk: ~512 KiB, half of a Zen 5 L2 */
    int64_t tok_chunk = (int64_t)(((size_t)512 << 10) / aps);
    tok_chunk -= tok_chunk % 4;
    if (tok_chunk < 4) tok_chunk = 4;
    if (tok_chunk > n_tok) tok_chunk = (n_tok + 3) & ~(int64_t)3;
    uint8_t *ap = dj_kernel_scratch((size_t)tok_chunk * (aps + 4 * sizeof(__m512)) + 4 * wps);
    uint8_t *wp = ap + (size_t)tok_chunk * aps;
    __m512 *accb = (__m512 *)(wp + 4 * wps);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        for (int64_t t = 0; t < nt_c; t++)
            q4_0_prep_a(nb, a + (size_t)(t0 + t) * as, (struct q4_0_astep *)(ap + (size_t)t * aps));
        for (int64_t r = r0; r < r1; r += 4) {
            const int mr = (int)(r1 - r < 4 ? r1 - r : 4);
            for (int i = 0; i < mr; i++)
                q4_0_prep_w(nb, w + (size_t)(r + i) * ws, (struct q4_0_wstep *)(wp + (size_t)i * wps));
            for (int64_t s0 = 0; s0 < ns; s0 += Q4_0_SLAB) {
                const int64_t s1 = ns - s0 < Q4_0_SLAB ? ns : s0 + Q4_0_SLAB;
                for (int64_t t = 0; t < nt_c; t += 4) {
                    const int nt = (int)(nt_c - t < 4 ? nt_c - t : 4);
                    q4_0p_tab[mr - 1][nt - 1](s1 - s0, s0 == 0, s1 == ns, wp + (size_t)s0 * sizeof(struct q4_0_wstep),
                                              wps, ap + (size_t)t * aps + (size_t)s0 * sizeof(struct q4_0_astep), aps,
                                              accb + 4 * t, c + (t0 + t) * ldc + r, ldc);
                }
            }
        }
    }
}

static float q4_0_dot(int64_t k, const void *w, const void *a) {
    float c;
    q4_0_1x1(k, w, 0, a, 0, &c, 1);
    return c;
}

/* ---- q4_K x q8_K ---------------------------------------------------------------------- */

static inline DJ_ALWAYS_INLINE void q4_K_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* words 0-15 shift 0 (low nibbles), words 16-31 shift 4 (high nibbles) */
    const __m512i nshift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    /* [m0 m0 m1 m1 .. m7 m7] from words [sc0..sc7 m0..m7] */
    const __m256i midx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m512 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q4_K *wb[4];
        const struct dj_block_q8_K *ab[4];
        __m512i smw[4], isum[4][4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            wb[i] = (const struct dj_block_q4_K *)(w + (size_t)i * ws) + ib;
            uint64_t sc, m;
            dj_q4_K_unpack_scales(wb[i]->scales, &sc, &m);
            smw[i] = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x((int64_t)m, (int64_t)sc)));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ab[j] = (const struct dj_block_q8_K *)(a + (size_t)j * as) + ib;
            DJ_UNROLL for (int i = 0; i < MR; i++) isum[i][j] = _mm512_setzero_si512();
        }
        DJ_UNROLL for (int ch = 0; ch < 4; ch++) { /* 64 elements: sub-blocks 2ch (low nibbles), 2ch+1 */
            const __m512i sidx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * ch))),
                                                    _mm256_set1_epi16((short)(2 * ch + 1)), 1);
            __m512i q[4], sc[4];
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb[i]->qs + 32 * ch)));
                q[i] = _mm512_and_si512(_mm512_srlv_epi16(b, nshift), m4);
                sc[i] = _mm512_permutexvar_epi16(sidx, smw[i]);
            }
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const __m512i av = _mm512_loadu_si512(ab[j]->qs + 64 * ch);
                DJ_UNROLL for (int i = 0; i < MR; i++)
                    isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(q[i], av), sc[i]);
            }
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)ab[j]->bsums);
            const __m512 d8 = _mm512_set1_ps(ab[j]->d);
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m512 d = _mm512_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->d));
                const __m512 dmin = _mm512_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->dmin));
                const __m256i mins = _mm256_permutexvar_epi16(midx, _mm512_castsi512_si256(smw[i]));
                const __m512i imin = _mm512_zextsi256_si512(_mm256_madd_epi16(bs, mins));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_mul_ps(d, d8), acc[i][j]);
                acc[i][j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, d8), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum16(acc[i][j]);
}

/* ---- q6_K x q8_K ---------------------------------------------------------------------- */

static inline DJ_ALWAYS_INLINE void q6_K_body(const int MR, const int NT, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* high bits to bits 4-5: elements 0-31 of a 64 take qh bits 0-1 (<< 4), 32-63 bits 2-3
     * (<< 2); for the next 64, bits 4-5 (as they are) and bits 6-7 (>> 2). */
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512 acc[4][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q6_K *wb[4];
        const struct dj_block_q8_K *ab[4];
        __m512i scw[4], isum[4][4];
        DJ_UNROLL for (int i = 0; i < MR; i++) {
            wb[i] = (const struct dj_block_q6_K *)(w + (size_t)i * ws) + ib;
            scw[i] = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb[i]->scales)));
        }
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ab[j] = (const struct dj_block_q8_K *)(a + (size_t)j * as) + ib;
            DJ_UNROLL for (int i = 0; i < MR; i++) isum[i][j] = _mm512_setzero_si512();
        }
        DJ_UNROLL for (int h = 0; h < 2; h++) {
            /* words of a 64-value chunk k take sub-block scale 4k + word/8 */
            const __m512i sidx0 = _mm512_add_epi16(_mm512_srli_epi16(_mm512_set_epi16(
                31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3), _mm512_set1_epi16((short)(8 * h)));
            const __m512i sidx1 = _mm512_add_epi16(sidx0, _mm512_set1_epi16(4));
            __m512i q0[4], q1[4], s0[4], s1[4];
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m512i ql = _mm512_loadu_si512(wb[i]->ql + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb[i]->qh + 32 * h)));
                q0[i] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
                q1[i] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                        _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
                s0[i] = _mm512_permutexvar_epi16(sidx0, scw[i]);
                s1[i] = _mm512_permutexvar_epi16(sidx1, scw[i]);
            }
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const __m512i a0 = _mm512_loadu_si512(ab[j]->qs + 128 * h);
                const __m512i a1 = _mm512_loadu_si512(ab[j]->qs + 128 * h + 64);
                DJ_UNROLL for (int i = 0; i < MR; i++) {
                    isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(q0[i], a0), s0[i]);
                    isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(q1[i], a1), s1[i]);
                }
            }
        }
        /* the -32 offset of every value: lanes += bsum * (-32 sc), pairwise */
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)ab[j]->bsums));
            const __m512 d8 = _mm512_set1_ps(ab[j]->d);
            DJ_UNROLL for (int i = 0; i < MR; i++) {
                const __m512i nsc = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(scw[i], 5));
                const __m512i tot = _mm512_dpwssd_epi32(isum[i][j], bs, nsc);
                const __m512 d = _mm512_set1_ps(f16_to_f32((const uint8_t *)&wb[i]->d));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, d8), acc[i][j]);
            }
        }
    }
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        c[j * ldc + i] = hsum16(acc[i][j]);
}

DJ_TILES_2x4(q4_K)
DJ_TILES_2x4(q6_K)
DJ_TILED_KERNEL(q4_K, 1)
DJ_TILED_KERNEL(q6_K, 1)

/* ---- activation quantizers (bitwise equal to the reference: see ref.h) ---------------- */

static inline __m512 abs16(__m512 v) { return _mm512_abs_ps(v); }

static void quant_q8_0(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_0 *y = yv;
    DJ_ASSERT(n % DJ_QK8_0 == 0);
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++, x += DJ_QK8_0) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs16(v0), abs16(v1)));
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        y[ib].d = dj_f32_to_fp16(amax / 127.f);
        const __m128i q0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)));
        const __m128i q1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)));
        _mm_storeu_si128((__m128i *)y[ib].qs, q0);
        _mm_storeu_si128((__m128i *)(y[ib].qs + 16), q1);
    }
}

static void quant_q8_K(const float *x, void *yv, int64_t n) {
    struct dj_block_q8_K *y = yv;
    DJ_ASSERT(n % DJ_QK_K == 0);
    for (int64_t ib = 0; ib < n / DJ_QK_K; ib++, x += DJ_QK_K) {
        struct dj_block_q8_K *b = &y[ib];
        __m512 mx = _mm512_setzero_ps();
        for (int g = 0; g < 16; g++) mx = _mm512_max_ps(mx, abs16(_mm512_loadu_ps(x + 16 * g)));
        const float amax = _mm512_reduce_max_ps(mx);
        if (amax == 0) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float max = 0; /* the first element of largest magnitude */
        const __m512 vamax = _mm512_set1_ps(amax);
        for (int g = 0; g < 16; g++) {
            const __mmask16 m = _mm512_cmp_ps_mask(abs16(_mm512_loadu_ps(x + 16 * g)), vamax, _CMP_EQ_OQ);
            if (m) {
                max = x[16 * g + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i lim = _mm512_set1_epi32(127);
        for (int g = 0; g < 16; g++) {
            const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), vs)), lim);
            _mm_storeu_si128((__m128i *)(b->qs + 16 * g), _mm512_cvtepi32_epi8(q));
            b->bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        b->d = 1 / iscale;
    }
}

/* ---- dequantizers (bitwise equal to the reference formulas) --------------------------- */

static void dequant_f16(const void *xv, float *y, int64_t n) {
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

static void dequant_q8_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q8_0 *x = xv;
    for (int64_t ib = 0; ib < n / DJ_QK8_0; ib++, y += DJ_QK8_0) {
        const __m512 d = _mm512_set1_ps(f16_to_f32((const uint8_t *)&x[ib].d));
        for (int g = 0; g < 2; g++) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[ib].qs + 16 * g)));
            _mm512_storeu_ps(y + 16 * g, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
        }
    }
}

/* ---- attention: 16 lanes, element i in lane i % 16, a masked tail -------------------- */

static void attn_scores_avx512(int64_t hd, const float *q, const float *k, size_t stride, int64_t n, float scale,
                               float *s) {
    const int64_t full = hd & ~(int64_t)15;
    const __mmask16 m = (__mmask16)((1u << (hd - full)) - 1);
    for (int64_t p = 0; p < n; p++, k += stride) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), acc);
        if (full < hd) acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + full), _mm512_maskz_loadu_ps(m, k + full), acc);
        s[p] = hsum16(acc) * scale;
    }
}

static void attn_values_avx512(int64_t hd, const float *w, const float *v, size_t stride, int64_t n, float *out,
                               bool accumulate) {
    for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = hd - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - d)) - 1);
        __m512 acc = accumulate ? _mm512_maskz_loadu_ps(m, out + d) : _mm512_setzero_ps();
        const float *vp = v + d;
        for (int64_t p = 0; p < n; p++, vp += stride)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(w[p]), _mm512_maskz_loadu_ps(m, vp), acc);
        _mm512_mask_storeu_ps(out + d, m, acc);
    }
}

bool dj_kernels_init_avx512(struct dj_kernels *k) {
    k->name = "avx512-vnni";
    k->isa = DJ_ISA_AVX512;
#define SET(T, name)                                                                          \
    do {                                                                                      \
        k->w[T].matmul = name##_matmul;                                                       \
        k->w[T].dot = name##_dot;                                                             \
    } while (0)
    SET(DJ_TYPE_F32, f32);
    SET(DJ_TYPE_F16, f16);
    SET(DJ_TYPE_BF16, bf16);
    SET(DJ_TYPE_Q8_0, q8_0);
    SET(DJ_TYPE_Q4_0, q4_0);
    SET(DJ_TYPE_Q4_K, q4_K);
    SET(DJ_TYPE_Q6_K, q6_K);
#undef SET
    k->w[DJ_TYPE_F16].dequantize_row = dequant_f16;
    k->w[DJ_TYPE_Q8_0].dequantize_row = dequant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_0] = quant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_K] = quant_q8_K;
    k->attn_scores = attn_scores_avx512;
    k->attn_values = attn_values_avx512;
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_avx512(struct dj_kernels *k) { (void)k; return false; }
#endif
