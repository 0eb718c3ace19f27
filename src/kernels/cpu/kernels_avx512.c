/*
 * kernels_avx512.c — AVX-512 (F, BW, VL, DQ) + VNNI kernels: Ice Lake,
 * Sapphire Rapids, Zen 4, Zen 5.
 *
 * Accumulation scheme, per (row, token) pair; tiles only share loads:
 *   - float types: one 16-lane accumulator, element i in lane i % 16,
 *     fma over k in order, masked loads for the tail, then the fixed tree
 *     of hsum16.
 *   - q4_0 and q8_0 (x q8_0), q4_K and q6_K (x q8_K): the exact int32 dot of a
 *     block (k-quants: super-block), then one fma per block (q4_K: two per
 *     super-block) into each pair's float chain, no lane tree: 16 rows in the
 *     16 lanes (see the q4_0/q8_0, q4_K and q6_K sections); q6_K decode keeps
 *     one row's values along the lanes, sums the integer lanes and runs the
 *     same fma as a scalar.
 *
 * Tiles (rows x tokens): 6x4 for f16, 4x4 for the other float types,
 * 16 x 8 for q4_0, q8_0, q4_K and q6_K (see q16_matmul, q4_K_matmul,
 * q6_K_matmul); up to 2 tokens, 1-row tiles (cpu/tile.h; f16 past
 * k = 4096: 6-row; f16 prefill visits its tiles in its own order, see
 * f16_matmul and dj_matmul_kblocked in tile.h).  All fused/rounded float operations
 * per pair are the same for every tile shape: that is the batch-invariance
 * contract.  The integer paths never
 * overflow: per lane and super-block at most |q6_K| 8*2*16002*128 and the
 * like, far below 2^31.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/fp16.h"
#include "core/status.h"
#include "kernels/cpu/tile.h"
#include "kernels/ref/ref.h"

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
 * with this order (1.1B F16 pp512, Zen 5, 2 threads).  k > 4096: dj_matmul_kblocked
 * (k in chunks, the accumulators kept in scratch between them).  Only the order of
 * the tiles and of the chunks changes: every element is still f16_1x1's chain. */
/* Prefill with k in chunks: the 16-lane accumulators of a tile go to scratch between
 * chunks (a store and reload of the same 16 floats: the pair's chain is unchanged), so a
 * tile reads KC elements of its 6 weight rows (L2) and 4 token rows (L1) per visit. */
static inline DJ_ALWAYS_INLINE void f16_kbody(const int MR, const int NT, int64_t e, int64_t e1, int64_t k,
                                              const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                                              void *accv, int first, float *c, int64_t ldc) {
    __m512 *accp = accv, acc[6][4];
    DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
        acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&accp[i * 4 + j]);
    for (; e + 16 <= e1; e += 16) FLOAT_STEP(load16_f16, load16_f32, 16);
    if (e1 == k) {
        if (e < k) FLOAT_STEP(load16_f16, load16_f32, k - e); /* masked: zeros past the end */
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            c[j * ldc + i] = hsum16(acc[i][j]);
    } else {
        DJ_UNROLL for (int i = 0; i < MR; i++) DJ_UNROLL for (int j = 0; j < NT; j++)
            _mm512_store_ps((float *)&accp[i * 4 + j], acc[i][j]);
    }
}
DJ_KCHUNK_SHAPES(f16)

/* k > 4096 (the 1.1B model's down product, k = 8192): dj_matmul_kblocked (tile.h), token
 * blocks of NC = 128, row blocks of MC = 24, k chunks of KC = 4096.  Two copies of
 * bench_kernels at once (1024 x 8192, 512 tokens, the memory traffic of two threads),
 * GFLOP/s summed, alternated: 249-273 with dj_matmul_drive's order (512 KiB token chunks)
 * vs 317-329; KC = 1024 or 2048 and MC = 48 measured lower (234-313), and so did blocking
 * k <= 4096 as well in the model (pp512 110-126 vs 124-141).  In the model (1.1B F16
 * pp512, 2 threads, -r 3, alternated, quiet machine), this and the 4-chain attn_values
 * together: 136.8, 136.9 -> 159.8, 162.5 t/s (on a loaded VM the difference was within
 * the noise). */
static float f16_dot(int64_t k, const void *w, const void *a);

static void f16_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, int64_t n_tok) {
    if (n_tok <= DJ_SMALL_BATCH) {
        dj_matmul_drive(f16_tile, k <= 4096 ? 1 : f16_MR, f16_NT, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *wb = w, *ab = a;
    if (k <= 4096) {
        dj_matmul_wstationary(f16_tile, f16_MR, f16_NT, k, wb, ws, ab, as, c, ldc, r0, r1, n_tok);
        return;
    }
    dj_matmul_kblocked(f16_ktab, f16_dot, k, wb, ws, ab, as, c, ldc, r0, r1, n_tok);
}
static float f16_dot(int64_t k, const void *w, const void *a) {
    float c;
    f16_1x1(k, w, 0, a, 0, &c, 1);
    return c;
}
DJ_TILED_KERNEL(bf16, 4)

/* ---- q4_0 and q8_0 x q8_0: 16 rows in the 16 lanes --------------------------------------
 *
 * Per (row, token) pair, blocks b = 0 .. nb-1 in order:
 *
 *     acc = fma(float(isum_b), d_w[b] * d_a[b], acc)      (acc starts at 0; the result)
 *
 * isum_b = the block's integer dot, exact in int32 by vpdpbusd, which multiplies
 * unsigned by signed bytes: the weight goes in unsigned and the sum starts from a
 * correction that depends on the token's block only (q16_tok.ncorr):
 *   - q4_0: the raw nibbles n = w + 8, correction -8 * sum(a);
 *   - q8_0: w ^ 0x80 = w + 128, correction -128 * sum(a).
 * |isum| <= 32 * 255 * 128 + 128 * 32 * 128 < 2^21: no overflow.  No lane tree: each
 * pair's float chain lives in one lane.  A group of 16 consecutive rows puts row i in
 * lane i (q16_unpack transposes one block of the 16 rows: 4-byte groups of one row per
 * lane, so one activation dword, broadcast, serves all 16 rows), and a token's 16
 * results are one store into c's row.
 *
 * q4_0, compared with its former layout (two blocks of one row per vector, a 16-lane
 * tree per pair), Zen 5, 1 thread (bench_kernels, 2048 rows): decode from DRAM
 * k = 2048 16.5 -> 23-25 GB/s, k = 5632 16.9 -> 23-25 GB/s; from cache 35 -> 45-51
 * Gweights/s; prefill (512 tokens) k = 2048 186-231 -> 440-530 GFLOP/s.  q8_0 moved to
 * this layout from 4 x 4 tiles of two blocks per vector (a 16-lane tree per pair); see
 * docs/BENCHMARKS.md for what that measured.
 *
 * Every path (decode on the raw rows, prefill on a per-call transposed copy, the dot
 * with all 16 lanes on the same row, the groups at the end of a row range that overlap
 * the previous one and store only their new lanes) runs q16_fma per pair and block,
 * so matmul == dot bitwise whatever the batch, tile and row split. */

struct q16_tok { float d; int32_t ncorr; }; /* one token's block: d_a as float, the isum's start */

static inline DJ_ALWAYS_INLINE void q16_prep_tok(const int q8, int64_t nb, const uint8_t *a, struct q16_tok *o) {
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++, a += sizeof(struct dj_block_q8_0)) {
        /* sum of the 32 signed bytes: sad of (a + 128) against 0, minus 32 * 128 */
        const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + 2)), x80),
                                          _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
        o[b].d = f16_to_f32(a);
        o[b].ncorr = (int32_t)((q8 ? -128 : -8) * sum);
    }
}

/* The dwords at p + vidx[i].  vpgatherdd merges into its destination under a mask
 * that it clears: GCC's intrinsic re-arms the mask with kxnorw k,k,k, which waited on
 * the previous gather on Zen 5 (each gather serialized behind the last: ~30% of the
 * decode loop's samples sat on it).  Here the mask comes from k0 and the destination is
 * zeroed first, so consecutive gathers are independent.  The destination is early-clobber:
 * a gather whose destination is its index register is an invalid instruction (#UD), and
 * with ws = 0 both are the zero vector, which GCC at -O0 put in one register. */
static inline __m512i q16_gather(const uint8_t *p, __m512i vidx) {
    __m512i r = _mm512_setzero_si512();
    __mmask16 k;
    __asm__("kxnorw %%k0, %%k0, %[k]\n\t"
            "vpgatherdd (%[p],%[i],1), %[r]%{%[k]%}"
            : [r] "+&v"(r), [k] "=&Yk"(k)
            : [p] "r"(p), [i] "v"(vidx), "m"(*(const uint8_t(*)[1])p));
    return r;
}

/* 16 bytes of 16 rows (row i at p + i * ws), transposed: pj[j] lane i = row i's bytes
 * 4j..4j+3. */
static inline DJ_ALWAYS_INLINE void q16_transpose(const uint8_t *p, size_t ws, __m512i pj[4]) {
    /* from [rows 4g..4g+3 : dwords 0-3 each] x 2: dword j of 8 rows, then dword j + 1 */
    const __m512i i01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i i23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    __m512i r[4];
    DJ_UNROLL for (int g = 0; g < 4; g++) {
        const uint8_t *pg = p + (size_t)(4 * g) * ws;
        r[g] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pg));
        r[g] = _mm512_mask_broadcast_i32x4(r[g], 0x00F0, _mm_loadu_si128((const __m128i *)(pg + ws)));
        r[g] = _mm512_mask_broadcast_i32x4(r[g], 0x0F00, _mm_loadu_si128((const __m128i *)(pg + 2 * ws)));
        r[g] = _mm512_mask_broadcast_i32x4(r[g], 0xF000, _mm_loadu_si128((const __m128i *)(pg + 3 * ws)));
    }
    const __m512i t0 = _mm512_permutex2var_epi32(r[0], i01, r[1]), t1 = _mm512_permutex2var_epi32(r[0], i23, r[1]);
    const __m512i t2 = _mm512_permutex2var_epi32(r[2], i01, r[3]), t3 = _mm512_permutex2var_epi32(r[2], i23, r[3]);
    pj[0] = _mm512_shuffle_i64x2(t0, t2, 0x44);
    pj[1] = _mm512_shuffle_i64x2(t0, t2, 0xEE);
    pj[2] = _mm512_shuffle_i64x2(t1, t3, 0x44);
    pj[3] = _mm512_shuffle_i64x2(t1, t3, 0xEE);
}

/* One block of 16 rows (row i at p + i * ws, p = the block in row 0; ws = 0: the same row
 * in every lane), lanes = rows, as unsigned bytes: q[j] (j < 4) lane i = row i's
 * elements 4j..4j+3, q[4 + j] its elements 16+4j..16+4j+3 (q4_0: the low and the high
 * nibbles of bytes 4j..4j+3; q8_0: bytes 4j.. and 16+4j.., ^ 0x80); *d lane i = row i's
 * scale.  vidx = i * ws per lane. */
static inline DJ_ALWAYS_INLINE void q16_unpack(const int q8, const uint8_t *p, size_t ws, __m512i vidx,
                                               __m512i q[8], __m512 *d) {
    __m512i pj[4];
    q16_transpose(p + 2, ws, pj);
    if (q8) {
        const __m512i x80 = _mm512_set1_epi8((char)0x80);
        DJ_UNROLL for (int j = 0; j < 4; j++) q[j] = _mm512_xor_si512(pj[j], x80);
        q16_transpose(p + 18, ws, pj);
        DJ_UNROLL for (int j = 0; j < 4; j++) q[4 + j] = _mm512_xor_si512(pj[j], x80);
    } else {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            q[j] = _mm512_and_si512(pj[j], m4);
            q[4 + j] = _mm512_and_si512(_mm512_srli_epi32(pj[j], 4), m4);
        }
    }
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(q16_gather(p, vidx)));
}

/* ---- repacked weights (kernels.h: pack, matmul_packed) --------------------------------
 *
 * In the file's layout a decode step spends most of its time transposing: each block of
 * 16 rows is read 16 bytes a row and permuted into lanes (q16_transpose), the scales come
 * by a gather, and the 16 interleaved row streams need software prefetching.  pack does
 * the transposition once, at load: a group of 16 rows becomes the vectors the kernels
 * compute on, in the order they read them — one sequential stream.  The same vectors go
 * into the same q16_fma / q4k_fma, so the results are bitwise those of the file's
 * layout.  A group is as many bytes as its 16 rows (16 * ws):
 *   - q4_K: super-block b at 16 * 144 * b; its 16-byte chunk o (o = 0: d, dmin and the
 *     scales; 1..8: the quants) as q16_transpose gives it, 4 vectors at 16 * 16 * o;
 *   - q4_0 / q8_0: blocks in pairs (the last alone when nb is odd): the pair's quants
 *     (q4_0: bytes 2..17 transposed, 4 vectors a block, nibbles not yet split; q8_0:
 *     bytes 2..17 then 18..33, 8 vectors, already ^ 0x80), then each block's 16 f16
 *     scales (32 bytes).  A pair is 576 (1088) bytes, a multiple of 64, so every vector
 *     load is aligned in a 64-byte-aligned copy when a row has an even number of blocks
 *     (every real model; the loads are unaligned ones, which cost nothing extra on
 *     aligned data, so an odd number still works). */

/* How far ahead (bytes) the packed kernels prefetch their stream.  The hardware
 * prefetchers follow one sequential stream, but not far enough ahead to cover DRAM
 * latency at one row group's pace (q4_K decode ran at ~70% of the read bandwidth without
 * this); DJ_PK_PF overrides it (bench tuning). */
static size_t pk_pf = 2048;

/* src[i]: row i of a group; the 16 bytes at offset o of each as 4 vectors (vector j
 * lane i = row i's bytes o + 4j .. o + 4j + 3), each byte ^ x. */
static void q16_pack_chunk(const uint8_t *const src[16], size_t o, uint8_t x, uint8_t *dst) {
    const size_t ws = (size_t)(src[1] - src[0]);
    if (src[15] == src[0] + 15 * ws) { /* 16 rows ws apart (all but a matrix's padded last group) */
        __m512i pj[4];
        q16_transpose(src[0] + o, ws, pj);
        DJ_UNROLL for (int j = 0; j < 4; j++)
            _mm512_storeu_si512((__m512i *)dst + j, _mm512_xor_si512(pj[j], _mm512_set1_epi8((char)x)));
        return;
    }
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 16; i++)
            for (int e = 0; e < 4; e++) dst[64 * j + 4 * i + e] = (uint8_t)(src[i][o + 4 * (size_t)j + (size_t)e] ^ x);
}
/* The 16 source rows of group g: rows past n_rows repeat the last. */
static void q16_pack_src(const uint8_t *w, size_t ws, int64_t n_rows, int64_t g, const uint8_t *src[16]) {
    for (int64_t i = 0; i < 16; i++) {
        const int64_t r = 16 * g + i;
        src[i] = w + (size_t)(r < n_rows ? r : n_rows - 1) * ws;
    }
}
static inline size_t q16_wbs(const int q8) { return q8 ? sizeof(struct dj_block_q8_0) : sizeof(struct dj_block_q4_0); }
static inline size_t q16p_qbytes(const int q8) { return q8 ? 512 : 256; } /* a block's quants, 16 rows */
static inline const uint8_t *q16p_q(const int q8, const uint8_t *g, int64_t b) {
    return g + (size_t)(b / 2) * 2 * 16 * q16_wbs(q8) + (size_t)(b % 2) * q16p_qbytes(q8);
}
static inline const uint8_t *q16p_d(const int q8, const uint8_t *g, int64_t b, int64_t nb) {
    const size_t nq = (b | 1) < nb ? 2 : 1; /* blocks in b's pair */
    return g + (size_t)(b / 2) * 2 * 16 * q16_wbs(q8) + nq * q16p_qbytes(q8) + (size_t)(b % 2) * 32;
}
static void q16_pack(const int q8, int64_t k, const void *wv, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                     void *dst) {
    const int64_t nb = k / 32;
    const size_t bs = q16_wbs(q8);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *src[16];
        q16_pack_src(wv, ws, n_rows, g, src);
        uint8_t *G = (uint8_t *)dst + (size_t)g * 16 * ws;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = (uint8_t *)q16p_q(q8, G, b), *d = (uint8_t *)q16p_d(q8, G, b, nb);
            q16_pack_chunk(src, (size_t)b * bs + 2, q8 ? 0x80 : 0, q);
            if (q8) q16_pack_chunk(src, (size_t)b * bs + 18, 0x80, q + 256);
            for (int i = 0; i < 16; i++) memcpy(d + 2 * i, src[i] + (size_t)b * bs, 2);
        }
    }
}
static void q4_0_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    q16_pack(0, k, w, ws, n_rows, g0, g1, dst);
}
static void q8_0_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    q16_pack(1, k, w, ws, n_rows, g0, g1, dst);
}

/* q16_unpack from a packed group g (block b of nb). */
static inline DJ_ALWAYS_INLINE void q16p_unpack(const int q8, const uint8_t *g, int64_t b, int64_t nb, __m512i q[8],
                                                __m512 *d) {
    const __m512i *v = (const __m512i *)q16p_q(q8, g, b);
    if (pk_pf) { /* a block's share of the stream, pk_pf ahead */
        for (int l = 0; l < (q8 ? 9 : 5); l++) _mm_prefetch((const char *)v + pk_pf + 64 * l, _MM_HINT_T0);
    }
    if (q8) {
        DJ_UNROLL for (int j = 0; j < 8; j++) q[j] = _mm512_loadu_si512(v + j);
    } else {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        DJ_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i x = _mm512_loadu_si512(v + j);
            q[j] = _mm512_and_si512(x, m4);
            q[4 + j] = _mm512_and_si512(_mm512_srli_epi32(x, 4), m4);
        }
    }
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)q16p_d(q8, g, b, nb)));
}

/* The 16-row group serving rows r.. of [.., r1) in a packed copy w (groups 16 * ws
 * apart): *g0 its first row, *m the lanes of [r, r1) in it. */
static inline const uint8_t *q16p_group(const uint8_t *w, size_t ws, int64_t r, int64_t r1, int64_t *g0,
                                        __mmask16 *m) {
    *m = dj_group16(r, r1, g0);
    return w + (size_t)*g0 * ws;
}

/* acc + one block's term for 16 rows and one token (ab: its q8_0 block): the float
 * operations of every pair, on every path. */
static inline DJ_ALWAYS_INLINE __m512 q16_fma(const __m512i q[8], __m512 dw, const uint8_t *ab, struct q16_tok t,
                                              __m512 acc) {
    __m512i s0 = _mm512_set1_epi32(t.ncorr), s1 = _mm512_setzero_si512();
    DJ_UNROLL for (int j = 0; j < 4; j++) {
        s0 = _mm512_dpbusd_epi32(s0, q[j], _mm512_set1_epi32((int)dj_load_u32(ab + 2 + 4 * j)));
        s1 = _mm512_dpbusd_epi32(s1, q[4 + j], _mm512_set1_epi32((int)dj_load_u32(ab + 18 + 4 * j)));
    }
    const __m512 x = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
    return _mm512_fmadd_ps(x, _mm512_mul_ps(dw, _mm512_set1_ps(t.d)), acc);
}

static inline __m512i q16_vidx(size_t ws) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)ws));
}


/* Decode: 16 rows from w (ws apart) x NT tokens (a, as apart; tp: their q16_tok rows,
 * nb apart) on the raw blocks; lanes in m stored to c[j * ldc + i].  prep (a constant):
 * tp is NULL and each token block's q16_tok is made as it is used (the dot, which has no
 * scratch to hold tp): the same values, so the same bits. */
static inline DJ_ALWAYS_INLINE void q16_gemv_body(const int q8, const int pk, const int NT, const int prep, int64_t nb,
                                                  const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                                                  const struct q16_tok *tp, float *c, int64_t ldc, __mmask16 m,
                                                  const uint8_t *pf) {
    const __m512i vidx = q16_vidx(ws);
    /* pf (unless NULL): the next group, prefetched at the pace this one is read (the
     * group's 16 blocks: 288 bytes for q4_0, 544 for q8_0).  The 16 interleaved row
     * streams defeat the hardware prefetchers: without it q4_0 decode from DRAM ran at
     * 5.6 GB/s (2048 x 2048, 1 thread), with it 23-25 GB/s. */
    const size_t pstep = 16 * ws / (size_t)nb;
    const int plines = q8 ? 9 : 5;
    __m512 acc[8];
    DJ_UNROLL for (int j = 0; j < NT; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i q[8];
        __m512 dw;
        if (pf) {
            const uint8_t *pb = pf + (size_t)b * pstep;
            DJ_UNROLL for (int l = 0; l < plines; l++) _mm_prefetch((const char *)(pb + 64 * l), _MM_HINT_T0);
        }
        if (pk) q16p_unpack(q8, w, b, nb, q, &dw); /* w: the packed group */
        else q16_unpack(q8, w + (size_t)b * q16_wbs(q8), ws, vidx, q, &dw);
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const uint8_t *ab = a + (size_t)j * as + (size_t)b * sizeof(struct dj_block_q8_0);
            struct q16_tok tk;
            if (prep) q16_prep_tok(q8, 1, ab, &tk);
            else tk = tp[j * nb + b];
            acc[j] = q16_fma(q, dw, ab, tk, acc[j]);
        }
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) _mm512_mask_storeu_ps(c + j * ldc, m, acc[j]);
}
typedef void (*q16_gemv_fn)(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                            const struct q16_tok *tp, float *c, int64_t ldc, __mmask16 m, const uint8_t *pf);
#define Q16_GEMV(T, Q8, PK, N)                                                                          \
    static void T##_gemv16_##N(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,      \
                               const struct q16_tok *tp, float *c, int64_t ldc, __mmask16 m,              \
                               const uint8_t *pf) {                                                       \
        q16_gemv_body(Q8, PK, N, 0, nb, w, ws, a, as, tp, c, ldc, m, pf);                                 \
    }
Q16_GEMV(q4_0, 0, 0, 1) Q16_GEMV(q4_0, 0, 0, 2) Q16_GEMV(q8_0, 1, 0, 1) Q16_GEMV(q8_0, 1, 0, 2)
Q16_GEMV(q4_0p, 0, 1, 1) Q16_GEMV(q4_0p, 0, 1, 2) Q16_GEMV(q4_0p, 0, 1, 3) Q16_GEMV(q4_0p, 0, 1, 4)
Q16_GEMV(q4_0p, 0, 1, 5) Q16_GEMV(q4_0p, 0, 1, 6) Q16_GEMV(q4_0p, 0, 1, 7) Q16_GEMV(q4_0p, 0, 1, 8)
Q16_GEMV(q8_0p, 1, 1, 1) Q16_GEMV(q8_0p, 1, 1, 2) Q16_GEMV(q8_0p, 1, 1, 3) Q16_GEMV(q8_0p, 1, 1, 4)
Q16_GEMV(q8_0p, 1, 1, 5) Q16_GEMV(q8_0p, 1, 1, 6) Q16_GEMV(q8_0p, 1, 1, 7) Q16_GEMV(q8_0p, 1, 1, 8)
/* Packed small batches (up to Q16P_SMALL tokens): straight from the packed stream, 8 tokens at
 * a time per group (the group, nb * 16 blocks, is re-read from L1/L2 for the next 8), no slab
 * copy and no accumulator spills. */
#define Q16P_SMALL 16
static const q16_gemv_fn q4_0p_gemv_tab[8] = {q4_0p_gemv16_1, q4_0p_gemv16_2, q4_0p_gemv16_3, q4_0p_gemv16_4,
                                              q4_0p_gemv16_5, q4_0p_gemv16_6, q4_0p_gemv16_7, q4_0p_gemv16_8};
static const q16_gemv_fn q8_0p_gemv_tab[8] = {q8_0p_gemv16_1, q8_0p_gemv16_2, q8_0p_gemv16_3, q8_0p_gemv16_4,
                                              q8_0p_gemv16_5, q8_0p_gemv16_6, q8_0p_gemv16_7, q8_0p_gemv16_8};

/* Prefill: a slab of nbs blocks of 16 rows, transposed once per call (q16_wblk) and
 * used by all the tokens of a chunk, NT at a time; a (the tokens' block at the slab's
 * start, as apart) and tp likewise (tps apart).  The accumulators come from and go back
 * to accb (token j at accb[j]) between slabs, exactly; the last slab stores them. */
struct q16_wblk { __m512i q[8]; __m512 d; };
#define Q16_NT 8 /* tokens per tile of every 16-row kernel (q4_0/q8_0, q4_K, q6_K) */
#define Q16_SLAB 32 /* blocks per slab: 18 KiB of transposed weights, in L1 */

static inline DJ_ALWAYS_INLINE void q16_gemm_body(const int NT, int64_t nbs, int first, int last,
                                                  const struct q16_wblk *wp, const uint8_t *a, size_t as,
                                                  const struct q16_tok *tp, int64_t tps, __m512 *accb, float *c,
                                                  int64_t ldc, __mmask16 m) {
    __m512 acc[Q16_NT];
    DJ_UNROLL for (int j = 0; j < NT; j++) acc[j] = first ? _mm512_setzero_ps() : accb[j];
    for (int64_t b = 0; b < nbs; b++) {
        const struct q16_wblk *wb = wp + b;
        DJ_UNROLL for (int j = 0; j < NT; j++)
            acc[j] = q16_fma(wb->q, wb->d, a + (size_t)j * as + (size_t)b * sizeof(struct dj_block_q8_0),
                             tp[j * tps + b], acc[j]);
    }
    if (last) {
        DJ_UNROLL for (int j = 0; j < NT; j++) _mm512_mask_storeu_ps(c + j * ldc, m, acc[j]);
    } else {
        DJ_UNROLL for (int j = 0; j < NT; j++) accb[j] = acc[j];
    }
}

typedef void (*q16_gemm_fn)(int64_t nbs, int first, int last, const struct q16_wblk *wp, const uint8_t *a,
                            size_t as, const struct q16_tok *tp, int64_t tps, __m512 *accb, float *c, int64_t ldc,
                            __mmask16 m);
#define Q16_GEMM(N)                                                                                         \
    static void q16_gemm_##N(int64_t nbs, int first, int last, const struct q16_wblk *wp, const uint8_t *a, \
                             size_t as, const struct q16_tok *tp, int64_t tps, __m512 *accb, float *c,       \
                             int64_t ldc, __mmask16 m) {                                                     \
        q16_gemm_body(N, nbs, first, last, wp, a, as, tp, tps, accb, c, ldc, m);                             \
    }
Q16_GEMM(1) Q16_GEMM(2) Q16_GEMM(3) Q16_GEMM(4) Q16_GEMM(5) Q16_GEMM(6) Q16_GEMM(7) Q16_GEMM(8)
static const q16_gemm_fn q16_gemm_tab[Q16_NT] = {q16_gemm_1, q16_gemm_2, q16_gemm_3, q16_gemm_4,
                                                 q16_gemm_5, q16_gemm_6, q16_gemm_7, q16_gemm_8};

/* Blocks [s0, s1) of 16 rows from w (ws apart, bs bytes a block) towards L1/L2.  Always
 * inlined: as a function of its own, GCC 12 finds it "looping const" (prefetches have no
 * effect it models) and deletes the calls. */
static inline DJ_ALWAYS_INLINE void q16_prefetch_slab(const uint8_t *w, size_t ws, size_t bs, int64_t s0, int64_t s1) {
    for (int i = 0; i < 16; i++) {
        const uint8_t *p = w + (size_t)i * ws;
        for (size_t o = (size_t)s0 * bs & ~(size_t)63; o < (size_t)s1 * bs; o += 64)
            _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
    }
}

/* Prefill token chunks: ~1 MiB of activations (as bytes a row), whole Q16_NT tiles, at
 * most n_tok.  Every 16-row group of the thread reads a chunk from L2/L3, and each chunk
 * transposes the weights again: 256 KiB chunks left that at 13-16% of the in-model q4_0
 * pp512 profile vs ~8% (1.1B, 2 threads). */
static inline int64_t q16_tok_chunk(size_t as, int64_t n_tok) {
    int64_t tc = (int64_t)(((size_t)1024 << 10) / as);
    tc -= tc % Q16_NT;
    if (tc < Q16_NT) tc = Q16_NT;
    return tc < n_tok ? tc : n_tok;
}

/* The prefetch of block bp of the 16-row group at wg (nb blocks a row), paced with the
 * reads of the block a slab before it: past the group's end, that block of the next
 * group (if next).  The whole next slab at once (144 lines for q4_K) left decode from
 * DRAM at 6-8 GB/s, 1 thread. */
static inline DJ_ALWAYS_INLINE void q16_prefetch_ahead(const uint8_t *wg, size_t ws, size_t bs, int64_t bp,
                                                       int64_t nb, int next) {
    if (bp < nb) q16_prefetch_slab(wg, ws, bs, bp, bp + 1);
    else if (next) q16_prefetch_slab(wg + 16 * ws, ws, bs, bp - nb, bp - nb + 1);
}

/* The 16-row group that serves rows r.. of [.., r1) (w: ws bytes a row): from *g0, lanes
 * *m stored.  Past the last full group, the 16 rows ending at r1 (the rows before r are
 * in the matrix: recomputed, not stored); a matrix of fewer than 16 rows is copied into
 * rows (16 * ws bytes), its last row repeated. */
static inline const uint8_t *q16_group(const uint8_t *w, size_t ws, int64_t r, int64_t r1, uint8_t *rows,
                                       int64_t *g0, __mmask16 *m) {
    *g0 = r;
    *m = 0xFFFF;
    if (r1 - r >= 16) return w + (size_t)r * ws;
    if (r1 >= 16) {
        *g0 = r1 - 16;
        *m = (__mmask16)(0xFFFFu << (r - *g0));
        return w + (size_t)*g0 * ws;
    }
    for (int64_t i = 0; i < 16; i++) memcpy(rows + (size_t)i * ws, w + (size_t)(i < r1 ? i : r1 - 1) * ws, ws);
    *g0 = 0;
    *m = (__mmask16)(((1u << r1) - 1) & (0xFFFFu << r));
    return rows;
}

static float q4_0_dot(int64_t k, const void *w, const void *a);
static float q8_0_dot(int64_t k, const void *w, const void *a);

/* matmul_packed with no scratch: group by group, token by token, each token's blocks
 * prepared as they are used (as the dot does): the same q16_fma chains, so the same bits. */
static __attribute__((noinline)) void q16p_matmul_noscratch(const int q8, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                                              size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1,
                                              int64_t n_tok) {
    for (int64_t r = r0; r < r1;) {
        int64_t g0;
        __mmask16 m;
        const uint8_t *wg = q16p_group(w, ws, r, r1, &g0, &m);
        r = g0 + 16;
        for (int64_t t = 0; t < n_tok; t++) {
            if (q8) q16_gemv_body(1, 1, 1, 1, nb, wg, ws, a + (size_t)t * as, 0, NULL, c + t * ldc + g0, 0, m, NULL);
            else q16_gemv_body(0, 1, 1, 1, nb, wg, ws, a + (size_t)t * as, 0, NULL, c + t * ldc + g0, 0, m, NULL);
        }
    }
}

static inline DJ_ALWAYS_INLINE void q16_matmul(const int q8, const int pk, int64_t k, const void *wv, size_t ws,
                                               const void *av, size_t as, float *c, int64_t ldc, int64_t r0,
                                               int64_t r1, int64_t n_tok) {
    const uint8_t *w = wv, *a = av;
    const int64_t nb = k / 32;
    const size_t wbs = q16_wbs(q8), abs_ = sizeof(struct dj_block_q8_0);
    const q16_gemv_fn gemv1 = q8 ? q8_0_gemv16_1 : q4_0_gemv16_1, gemv2 = q8 ? q8_0_gemv16_2 : q4_0_gemv16_2;
    const q16_gemv_fn *gemvp = q8 ? q8_0p_gemv_tab : q4_0p_gemv_tab;
    DJ_ASSERT(ws <= (size_t)INT32_MAX / 16); /* gather offsets */
    const int gemv = n_tok <= (pk ? Q16P_SMALL : DJ_SMALL_BATCH);
    const int64_t tok_chunk = gemv ? n_tok : q16_tok_chunk(as, n_tok);
    const size_t wp_bytes = gemv ? 0 : Q16_SLAB * sizeof(struct q16_wblk);
    const size_t accb_bytes = gemv ? 0 : (size_t)tok_chunk * sizeof(__m512);
    const size_t tp_bytes = (size_t)tok_chunk * (size_t)nb * sizeof(struct q16_tok);
    uint8_t *scr = dj_kernel_scratch(wp_bytes + accb_bytes + tp_bytes + (pk ? 0 : 16 * ws)); /* packed: groups padded */
    if (!scr) { /* out of memory: the same bits, element by element */
        if (pk) q16p_matmul_noscratch(q8, nb, w, ws, a, as, c, ldc, r0, r1, n_tok);
        else dj_matmul_by_dot(q8 ? q8_0_dot : q4_0_dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    struct q16_wblk *wp = (struct q16_wblk *)scr;
    __m512 *accb = (__m512 *)(scr + wp_bytes);
    struct q16_tok *tp = (struct q16_tok *)(scr + wp_bytes + accb_bytes);
    uint8_t *rows = scr + wp_bytes + accb_bytes + tp_bytes; /* a matrix of fewer than 16 rows, padded */
    const __m512i vidx = q16_vidx(ws);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        for (int64_t t = 0; t < nt_c; t++) q16_prep_tok(q8, nb, at + (size_t)t * as, tp + t * nb);
        for (int64_t r = r0; r < r1;) {
            int64_t g0;
            __mmask16 m;
            const uint8_t *wg = pk ? q16p_group(w, ws, r, r1, &g0, &m) : q16_group(w, ws, r, r1, rows, &g0, &m);
            const int more = r + 16 < r1, next_full = r + 32 <= r1; /* (file's layout) another group follows */
            r = pk ? g0 + 16 : r + 16;
            float *cg = c + t0 * ldc + g0;
            if (gemv && pk) {
                for (int64_t t = 0; t < nt_c; t += 8) {
                    const int nt = (int)(nt_c - t < 8 ? nt_c - t : 8);
                    if (nt < 1) break; /* never: t < nt_c */
                    gemvp[nt - 1](nb, wg, ws, at + (size_t)t * as, as, tp + t * nb, cg + t * ldc, ldc, m, NULL);
                }
                continue;
            }
            if (gemv) {
                const uint8_t *pf = more ? wg + 16 * ws : NULL;
                (nt_c == 1 ? gemv1 : gemv2)(nb, wg, ws, at, as, tp, cg, ldc, m, pf);
                continue;
            }
            for (int64_t s0 = 0; s0 < nb; s0 += Q16_SLAB) {
                const int64_t s1 = nb - s0 < Q16_SLAB ? nb : s0 + Q16_SLAB;
                /* the next slab in this order (of this group, else the first of the next
                 * group): 16 interleaved row streams defeat the hardware prefetchers */
                if (pk) {
                    for (int64_t b = s0; b < s1; b++) q16p_unpack(q8, wg, b, nb, wp[b - s0].q, &wp[b - s0].d);
                } else {
                    if (s1 < nb) q16_prefetch_slab(wg, ws, wbs, s1, nb - s1 < Q16_SLAB ? nb : s1 + Q16_SLAB);
                    else if (next_full) q16_prefetch_slab(wg + 16 * ws, ws, wbs, 0, nb < Q16_SLAB ? nb : Q16_SLAB);
                    for (int64_t b = s0; b < s1; b++)
                        q16_unpack(q8, wg + (size_t)b * wbs, ws, vidx, wp[b - s0].q, &wp[b - s0].d);
                }
                for (int64_t t = 0; t < nt_c; t += Q16_NT) {
                    const int nt = (int)(nt_c - t < Q16_NT ? nt_c - t : Q16_NT);
                    q16_gemm_tab[nt - 1](s1 - s0, s0 == 0, s1 == nb, wp, at + (size_t)t * as + (size_t)s0 * abs_, as,
                                         tp + t * nb + s0, nb, accb + t, cg + t * ldc, ldc, m);
                }
            }
        }
    }
}
static void q4_0_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    q16_matmul(0, 0, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static void q4_0_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    q16_matmul(0, 1, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static void q8_0_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    q16_matmul(1, 0, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static void q8_0_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    q16_matmul(1, 1, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}

/* The pair's q16_fma chain with the row in all 16 lanes; lane 0 stored.  No scratch:
 * the token's blocks are prepared as they are used (q16_gemv_body's prep), so the dot
 * is also the out-of-memory path of q16_matmul. */
static float q4_0_dot(int64_t k, const void *w, const void *a) {
    float c = 0;
    q16_gemv_body(0, 0, 1, 1, k / 32, w, 0, a, 0, NULL, &c, 0, 1, NULL);
    return c;
}
static float q8_0_dot(int64_t k, const void *w, const void *a) {
    float c = 0;
    q16_gemv_body(1, 0, 1, 1, k / 32, w, 0, a, 0, NULL, &c, 0, 1, NULL);
    return c;
}


/* ---- q4_K x q8_K: 16 rows in the 16 lanes ---------------------------------------------
 *
 * Per (row, token) pair, super-blocks b = 0 .. nb-1 in order:
 *
 *     isum = sum over sub-blocks s of sc_s * (sum over s of q * a)       exact in int32
 *     imin = sum over s of m_s * (bsums[2s] + bsums[2s+1])                exact in int32
 *     acc  = fma(float(isum), d_w * d_a, acc)
 *     acc  = fnmadd(float(imin), dmin_w * d_a, acc)      (acc starts at 0; the result)
 *
 * |isum| <= 8 * 63 * 32 * 15 * 128 < 2^25, |imin| <= 8 * 63 * 4096 < 2^22.  As in the
 * q4_0/q8_0 section, 16 consecutive rows sit in the 16 lanes: q4k_unpack transposes a
 * slab of super-blocks of the 16 rows once (nibbles as bytes, 4 elements of one row per
 * lane: one vpdpbusd per 4 elements of 16 rows and a broadcast activation dword), the
 * sub-block sums take their scale by one vpmulld, the mins go in as word pairs by
 * vpdpwssd, and every token of the chunk runs over the slab (q4k_gemm_body).  Decode and
 * the dot (all lanes on one row) transpose as they go (q4k_gemv_body).  The integer sums
 * are exact in any order and both end in q4k_fma, so matmul == dot bitwise.  Compared
 * with 2 x 4 tiles of one row's 64 elements per vector (vpmaddubsw + vpdpwssd per 64
 * values and pair, a lane tree per pair): see docs/BENCHMARKS.md. */

struct q4k_wblk { __m512i q[8][8]; __m512i sc[8]; __m512i m[4]; __m512 d, dmin; };
#define Q4K_SLAB 4 /* super-blocks per slab: 20 KiB of transposed weights, in L1 */


/* From the first 16 bytes of 16 rows' super-block, transposed (pj: d | dmin << 16,
 * scales 0-3, 4-7, 8-11): the q4k_wblk fields other than q. */
static inline DJ_ALWAYS_INLINE void q4k_scales(const __m512i pj[4], __m512i sc[8], __m512i m[4], __m512 *d,
                                               __m512 *dmin) {
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pj[0]));
    *dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pj[0], 16)));
    /* dj_q4_K_unpack_scales, lane-wise: the scales (mins) of sub-blocks 0-3 and 4-7 as bytes */
    const __m512i c3f = _mm512_set1_epi8(0x3F), c0f = _mm512_set1_epi8(0x0F), c30 = _mm512_set1_epi8(0x30);
    const __m512i u0 = pj[1], u1 = pj[2], u2 = pj[3];
    const __m512i sc4[2] = {_mm512_and_si512(u0, c3f),
                            _mm512_or_si512(_mm512_and_si512(u2, c0f),
                                            _mm512_and_si512(_mm512_srli_epi32(u0, 2), c30))};
    const __m512i m4b[2] = {_mm512_and_si512(u1, c3f),
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), c0f),
                                            _mm512_and_si512(_mm512_srli_epi32(u1, 2), c30))};
    DJ_UNROLL for (int s = 0; s < 8; s++) {
        const int b = s % 4; /* byte b of each dword to its low byte, the rest zero */
        const __m512i ctl = _mm512_broadcast_i32x4(_mm_setr_epi32((int)(0x80808000u | (unsigned)b),
                                                                   (int)(0x80808000u | (unsigned)(4 + b)),
                                                                   (int)(0x80808000u | (unsigned)(8 + b)),
                                                                   (int)(0x80808000u | (unsigned)(12 + b))));
        sc[s] = _mm512_shuffle_epi8(sc4[s / 4], ctl);
    }
    DJ_UNROLL for (int t = 0; t < 4; t++) {
        const unsigned b = 2u * (unsigned)(t % 2); /* bytes b, b + 1 of each dword to words 0, 1 */
        unsigned v[4];
        for (unsigned l = 0; l < 4; l++) v[l] = (4 * l + b) | 0x8000u | (4 * l + b + 1) << 16 | 0x80000000u;
        const __m512i ctl = _mm512_broadcast_i32x4(_mm_setr_epi32((int)v[0], (int)v[1], (int)v[2], (int)v[3]));
        m[t] = _mm512_shuffle_epi8(m4b[t / 2], ctl);
    }
}

/* The 16 bytes at offset o (a multiple of 16) of a block of 16 rows, transposed: from
 * the file's layout (p the block in row 0, rows ws apart), or packed (pk: p the block's
 * 16 * bs bytes in the group; the chunk is 4 vectors at 16 * o). */
static inline DJ_ALWAYS_INLINE void q16_chunk(const int pk, const uint8_t *p, size_t ws, size_t o, __m512i pj[4]) {
    if (pk) {
        if (pk_pf) {
            DJ_UNROLL for (int l = 0; l < 4; l++) _mm_prefetch((const char *)p + 16 * o + pk_pf + 64 * l, _MM_HINT_T0);
        }
        DJ_UNROLL for (int j = 0; j < 4; j++) pj[j] = _mm512_loadu_si512((const __m512i *)(p + 16 * o) + j);
    } else {
        q16_transpose(p + o, ws, pj);
    }
}

static void q4_K_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    const size_t bs = sizeof(struct dj_block_q4_K);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *src[16];
        q16_pack_src(w, ws, n_rows, g, src);
        uint8_t *G = (uint8_t *)dst + (size_t)g * 16 * ws;
        for (int64_t b = 0; b < k / DJ_QK_K; b++)
            for (size_t o = 0; o < bs; o += 16) q16_pack_chunk(src, (size_t)b * bs + o, 0, G + (size_t)b * 16 * bs + 16 * o);
    }
}

/* One super-block of 16 rows (row i at p + i * ws; ws = 0: one row in every lane; pk:
 * packed, see q16_chunk): q[s][j] lane i = row i's elements 4j..4j+3 of sub-block s as
 * bytes, sc[s] its scale (int32), m[t] its mins of s = 2t, 2t + 1 (words), d and dmin
 * as floats. */
static inline DJ_ALWAYS_INLINE void q4k_unpack(const int pk, const uint8_t *p, size_t ws, struct q4k_wblk *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i pj[4];
    DJ_UNROLL for (int ch = 0; ch < 4; ch++) {
        DJ_UNROLL for (int h = 0; h < 2; h++) {
            /* qs byte 32ch + e: low nibble element e of sub-block 2ch, high nibble of 2ch + 1 */
            q16_chunk(pk, p, ws, offsetof(struct dj_block_q4_K, qs) + 32 * ch + 16 * h, pj);
            DJ_UNROLL for (int j = 0; j < 4; j++) {
                o->q[2 * ch][4 * h + j] = _mm512_and_si512(pj[j], m4);
                o->q[2 * ch + 1][4 * h + j] = _mm512_and_si512(_mm512_srli_epi32(pj[j], 4), m4);
            }
        }
    }
    q16_chunk(pk, p, ws, 0, pj);
    q4k_scales(pj, o->sc, o->m, &o->d, &o->dmin);
}

/* acc + one super-block's terms for 16 rows and one token, from its exact isum: the
 * float operations of every pair, on every path. */
static inline DJ_ALWAYS_INLINE __m512 q4k_fma(__m512i isum, const __m512i m[4], __m512 d, __m512 dmin,
                                              const struct dj_q8K_tok *tk, __m512 acc) {
    __m512i imin = _mm512_setzero_si512();
    DJ_UNROLL for (int u = 0; u < 4; u++) imin = _mm512_dpwssd_epi32(imin, m[u], _mm512_set1_epi32(tk->bs2[u]));
    const __m512 ad = _mm512_set1_ps(tk->d);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, ad), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, ad), acc);
}

/* Decode: 16 rows from w (ws apart) x NT tokens on the raw super-blocks, each transposed
 * 16 bytes at a time straight into the dot products (no q4k_wblk); pf (unless NULL): the
 * next group, prefetched at the pace this one is read (2304 bytes a super-block).  prep (a
 * constant): tp is NULL and each token super-block's dj_q8K_tok is made as it is used (the
 * dot, which has no scratch for tp): the same values, so the same bits. */
static inline DJ_ALWAYS_INLINE void q4k_gemv_body(const int NT, const int prep, const int pk, int64_t nb, const uint8_t *w,
                                                  size_t ws, const uint8_t *a, size_t as, const struct dj_q8K_tok *tp,
                                                  float *c, int64_t ldc, __mmask16 msk, const uint8_t *pf) {
    const size_t qso = offsetof(struct dj_block_q8_K, qs), abs_ = sizeof(struct dj_block_q8_K);
    const size_t wbs = sizeof(struct dj_block_q4_K), pstep = 16 * ws / (size_t)nb;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[4];
    DJ_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * wbs * (pk ? 16 : 1), *ab = a + (size_t)b * abs_ + qso;
        __m512i pj[4], sc[8], m[4], isum[4];
        __m512 d, dmin;
        q16_chunk(pk, p, ws, 0, pj);
        q4k_scales(pj, sc, m, &d, &dmin);
        DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        DJ_UNROLL for (int ch = 0; ch < 4; ch++) {
            __m512i xl[4], xh[4];
            DJ_UNROLL for (int t = 0; t < NT; t++) xl[t] = xh[t] = _mm512_setzero_si512();
            DJ_UNROLL for (int h = 0; h < 2; h++) {
                if (pf) { /* an eighth of the super-block's 36 lines per step: in one burst, 15-19 GB/s */
                    const uint8_t *pb = pf + (size_t)b * pstep + (size_t)(2 * ch + h) * (pstep / 8);
                    DJ_UNROLL for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(pb + 64 * l), _MM_HINT_T0);
                }
                q16_chunk(pk, p, ws, offsetof(struct dj_block_q4_K, qs) + 32 * ch + 16 * h, pj);
                DJ_UNROLL for (int j = 0; j < 4; j++) {
                    const __m512i lo = _mm512_and_si512(pj[j], m4), hi = _mm512_and_si512(_mm512_srli_epi32(pj[j], 4), m4);
                    DJ_UNROLL for (int t = 0; t < NT; t++) {
                        const uint8_t *at = ab + (size_t)t * as + 64 * ch + 16 * h + 4 * j;
                        xl[t] = _mm512_dpbusd_epi32(xl[t], lo, _mm512_set1_epi32((int)dj_load_u32(at)));
                        xh[t] = _mm512_dpbusd_epi32(xh[t], hi, _mm512_set1_epi32((int)dj_load_u32(at + 32)));
                    }
                }
            }
            DJ_UNROLL for (int t = 0; t < NT; t++)
                isum[t] = _mm512_add_epi32(_mm512_add_epi32(isum[t], _mm512_mullo_epi32(xl[t], sc[2 * ch])),
                                           _mm512_mullo_epi32(xh[t], sc[2 * ch + 1]));
        }
        DJ_UNROLL for (int t = 0; t < NT; t++) {
            struct dj_q8K_tok tk;
            if (prep) dj_q8K_prep_tok(1, a + (size_t)t * as + (size_t)b * abs_, &tk);
            else tk = tp[t * nb + b];
            acc[t] = q4k_fma(isum[t], m, d, dmin, &tk, acc[t]);
        }
    }
    DJ_UNROLL for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(c + t * ldc, msk, acc[t]);
}
typedef void (*q4k_gemv_fn)(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                            const struct dj_q8K_tok *tp, float *c, int64_t ldc, __mmask16 m, const uint8_t *pf);
#define Q4K_GEMV(NAME, PK, N)                                                                             \
    static void NAME(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,                 \
                     const struct dj_q8K_tok *tp, float *c, int64_t ldc, __mmask16 m, const uint8_t *pf) {    \
        q4k_gemv_body(N, 0, PK, nb, w, ws, a, as, tp, c, ldc, m, pf);                                      \
    }
Q4K_GEMV(q4k_gemv_1, 0, 1) Q4K_GEMV(q4k_gemv_2, 0, 2) Q4K_GEMV(q4kp_gemv_1, 1, 1) Q4K_GEMV(q4kp_gemv_2, 1, 2)
Q4K_GEMV(q4kp_gemv_3, 1, 3) Q4K_GEMV(q4kp_gemv_4, 1, 4)
/* Packed small batches (up to Q4KP_SMALL tokens): straight from the packed stream, 4 tokens a
 * pass over a group (bench_kernels --small: faster than the slab copy up to 8 tokens). */
#define Q4KP_SMALL 8
static const q4k_gemv_fn q4kp_gemv_tab[4] = {q4kp_gemv_1, q4kp_gemv_2, q4kp_gemv_3, q4kp_gemv_4};

/* NT tokens (a: their q8_K block at the slab's start, as apart; tp: dj_q8K_tok, tps apart)
 * over nbs super-blocks of a slab; accumulators from/to accb between slabs (exact), the
 * last slab stores lanes m to c[j * ldc + i]. */
static inline DJ_ALWAYS_INLINE void q4k_gemm_body(const int NT, int64_t nbs, int first, int last,
                                                  const struct q4k_wblk *wp, const uint8_t *a, size_t as,
                                                  const struct dj_q8K_tok *tp, int64_t tps, __m512 *accb, float *c,
                                                  int64_t ldc, __mmask16 m) {
    const size_t qso = offsetof(struct dj_block_q8_K, qs), abs_ = sizeof(struct dj_block_q8_K);
    __m512 acc[Q16_NT];
    DJ_UNROLL for (int t = 0; t < NT; t++) acc[t] = first ? _mm512_setzero_ps() : accb[t];
    for (int64_t b = 0; b < nbs; b++) {
        const struct q4k_wblk *wb = wp + b;
        const uint8_t *ab = a + (size_t)b * abs_ + qso;
        __m512i isum[Q16_NT];
        DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            __m512i x[Q16_NT];
            DJ_UNROLL for (int t = 0; t < NT; t++) x[t] = _mm512_setzero_si512();
            DJ_UNROLL for (int j = 0; j < 8; j++) {
                const __m512i w = wb->q[s][j];
                DJ_UNROLL for (int t = 0; t < NT; t++)
                    x[t] = _mm512_dpbusd_epi32(x[t], w,
                                               _mm512_set1_epi32((int)dj_load_u32(ab + (size_t)t * as + 32 * s + 4 * j)));
            }
            DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(x[t], wb->sc[s]));
        }
        DJ_UNROLL for (int t = 0; t < NT; t++)
            acc[t] = q4k_fma(isum[t], wb->m, wb->d, wb->dmin, &tp[t * tps + b], acc[t]);
    }
    if (last) {
        DJ_UNROLL for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(c + t * ldc, m, acc[t]);
    } else {
        DJ_UNROLL for (int t = 0; t < NT; t++) accb[t] = acc[t];
    }
}
typedef void (*q4k_gemm_fn)(int64_t nbs, int first, int last, const struct q4k_wblk *wp, const uint8_t *a,
                            size_t as, const struct dj_q8K_tok *tp, int64_t tps, __m512 *accb, float *c, int64_t ldc,
                            __mmask16 m);
#define Q4K_GEMM(N)                                                                                         \
    static void q4k_gemm_##N(int64_t nbs, int first, int last, const struct q4k_wblk *wp, const uint8_t *a, \
                             size_t as, const struct dj_q8K_tok *tp, int64_t tps, __m512 *accb, float *c,       \
                             int64_t ldc, __mmask16 m) {                                                     \
        q4k_gemm_body(N, nbs, first, last, wp, a, as, tp, tps, accb, c, ldc, m);                             \
    }
Q4K_GEMM(1) Q4K_GEMM(2) Q4K_GEMM(3) Q4K_GEMM(4) Q4K_GEMM(5) Q4K_GEMM(6) Q4K_GEMM(7) Q4K_GEMM(8)
static const q4k_gemm_fn q4k_gemm_tab[Q16_NT] = {q4k_gemm_1, q4k_gemm_2, q4k_gemm_3, q4k_gemm_4,
                                                 q4k_gemm_5, q4k_gemm_6, q4k_gemm_7, q4k_gemm_8};

static float q4_K_dot(int64_t k, const void *w, const void *a);

/* q4_K matmul_packed with no scratch (see q16p_matmul_noscratch). */
static __attribute__((noinline)) void q4kp_matmul_noscratch(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                                                             size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1,
                                                             int64_t n_tok) {
    for (int64_t r = r0; r < r1;) {
        int64_t g0;
        __mmask16 m;
        const uint8_t *wg = q16p_group(w, ws, r, r1, &g0, &m);
        r = g0 + 16;
        for (int64_t t = 0; t < n_tok; t++)
            q4k_gemv_body(1, 1, 1, nb, wg, ws, a + (size_t)t * as, 0, NULL, c + t * ldc + g0, 0, m, NULL);
    }
}

static inline DJ_ALWAYS_INLINE void q4k_matmul(const int pk, int64_t k, const void *wv, size_t ws, const void *av,
                                               size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1,
                                               int64_t n_tok) {
    const uint8_t *w = wv, *a = av;
    const int64_t nb = k / DJ_QK_K;
    const size_t wbs = sizeof(struct dj_block_q4_K), abs_ = sizeof(struct dj_block_q8_K);
    const int64_t tok_chunk = q16_tok_chunk(as, n_tok);
    const size_t wp_bytes = Q4K_SLAB * sizeof(struct q4k_wblk), accb_bytes = (size_t)tok_chunk * sizeof(__m512);
    const size_t tp_bytes = (size_t)tok_chunk * (size_t)nb * sizeof(struct dj_q8K_tok);
    uint8_t *scr = dj_kernel_scratch(wp_bytes + accb_bytes + tp_bytes + (pk ? 0 : 16 * ws)); /* packed: groups padded */
    if (!scr) { /* out of memory: the same bits, element by element */
        if (pk) q4kp_matmul_noscratch(nb, w, ws, a, as, c, ldc, r0, r1, n_tok);
        else dj_matmul_by_dot(q4_K_dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    struct q4k_wblk *wp = (struct q4k_wblk *)scr;
    __m512 *accb = (__m512 *)(scr + wp_bytes);
    struct dj_q8K_tok *tp = (struct dj_q8K_tok *)(scr + wp_bytes + accb_bytes);
    uint8_t *rows = scr + wp_bytes + accb_bytes + tp_bytes; /* a matrix of fewer than 16 rows, padded */
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        for (int64_t t = 0; t < nt_c; t++) dj_q8K_prep_tok(nb, at + (size_t)t * as, tp + t * nb);
        for (int64_t r = r0; r < r1;) {
            int64_t g0;
            __mmask16 m;
            const uint8_t *wg = pk ? q16p_group(w, ws, r, r1, &g0, &m) : q16_group(w, ws, r, r1, rows, &g0, &m);
            const int more = r + 16 < r1, next_full = r + 32 <= r1; /* (file's layout) another group follows */
            r = pk ? g0 + 16 : r + 16;
            float *cg = c + t0 * ldc + g0;
            if (pk && n_tok <= Q4KP_SMALL) {
                for (int64_t t = 0; t < nt_c; t += 4) {
                    const int nt = (int)(nt_c - t < 4 ? nt_c - t : 4);
                    if (nt < 1) break; /* never: t < nt_c */
                    q4kp_gemv_tab[nt - 1](nb, wg, ws, at + (size_t)t * as, as, tp + t * nb, cg + t * ldc, ldc, m, NULL);
                }
                continue;
            }
            if (n_tok <= DJ_SMALL_BATCH) {
                const uint8_t *pf = more ? wg + 16 * ws : NULL;
                (nt_c == 1 ? q4k_gemv_1 : q4k_gemv_2)(nb, wg, ws, at, as, tp, cg, ldc, m, pf);
                continue;
            }
            for (int64_t s0 = 0; s0 < nb; s0 += Q4K_SLAB) {
                const int64_t s1 = nb - s0 < Q4K_SLAB ? nb : s0 + Q4K_SLAB;
                for (int64_t b = s0; b < s1; b++) {
                    if (pk) {
                        q4k_unpack(1, wg + (size_t)b * 16 * wbs, ws, &wp[b - s0]);
                    } else {
                        q16_prefetch_ahead(wg, ws, wbs, b + Q4K_SLAB, nb, next_full);
                        q4k_unpack(0, wg + (size_t)b * wbs, ws, &wp[b - s0]);
                    }
                }
                for (int64_t t = 0; t < nt_c; t += Q16_NT) {
                    const int nt = (int)(nt_c - t < Q16_NT ? nt_c - t : Q16_NT);
                    q4k_gemm_tab[nt - 1](s1 - s0, s0 == 0, s1 == nb, wp, at + (size_t)t * as + (size_t)s0 * abs_, as,
                                         tp + t * nb + s0, nb, accb + t, cg + t * ldc, ldc, m);
                }
            }
        }
    }
}
static void q4_K_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    q4k_matmul(0, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static void q4_K_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    q4k_matmul(1, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
/* The pair's chain with the row in all 16 lanes; lane 0 stored.  No scratch: the token's
 * super-blocks are prepared as they are used (q4k_gemv_body's prep), so the dot is also
 * the out-of-memory path of q4_K_matmul. */
static float q4_K_dot(int64_t k, const void *w, const void *a) {
    float c = 0;
    q4k_gemv_body(1, 1, 0, k / DJ_QK_K, w, 0, a, 0, NULL, &c, 0, 1, NULL);
    return c;
}

/* ---- q4_0, q8_0, q4_K (and below q6_K) prefill by AMX-INT8 (the amx table: kernels_amx.c)
 *
 * Here because they run this file's packed layouts and float steps (q16p_q, q16_fma;
 * q4k_unpack, q4k_fma): the amx table points its matmuls at them.  For q4_K, q4k_gemm_body's
 *
 *     isum = sum over sub-blocks s of sc_s * (sum over s of q * a)
 *
 * is one integer, exact in any order.  Per 16-row group and super-block, the products
 * sc_s * q (<= 63 * 15 = 945) are made once, split into their low byte and their high
 * bits (0..3), and laid out as TDPBSUD B tiles (16 rows of 4-byte groups x 16 weight
 * rows, 64 elements a tile); per 16 tokens, four TDPBSUD of the tokens' signed q8_K
 * bytes (the A tile, straight from the activation rows) over the low bytes and four over
 * the high ones give, in int32 and exactly, isum = lo + 256 * hi for 16 tokens x 16
 * rows; q4k_fma follows as there.  So the bits are this table's.  Compiled for AMX by a
 * target pragma; called only where the amx table exists (its CPU, OS and permission
 * checks). */
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")
#define AMX_BARRIER DJ_AMX_BARRIER /* cpu_internal.h */
/* Batches up to AMX_MIN_TOK tokens stay on the avx512 kernels (decode, small batches). */
enum { AMX_MIN_TOK = 16 };
/* The AMX-INT8 kernels' tiles (cpu_internal.h; also quants*_avx2.c's): C 0-3 (tokens x 16
 * int32), A 4-5 (tokens x a_colsb bytes), B 6-7 (a_colsb / 4 rows of 4-byte groups x 16
 * weight rows). */
void dj_amx_int8_config(int rows, int a_colsb) {
    _Alignas(64) struct dj_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) {
        c.rows[t] = c.rows[2 + t] = (uint8_t)rows;
        c.colsb[t] = c.colsb[2 + t] = 64;
        c.rows[4 + t] = (uint8_t)rows;
        c.colsb[4 + t] = (uint16_t)a_colsb;
        c.rows[6 + t] = (uint8_t)(a_colsb / 4);
        c.colsb[6 + t] = 64;
    }
    AMX_BARRIER();
    _tile_loadconfig(&c);
}
/* Row i's scale (sc lane i, int32) as words: *s_lo for the 32 bytes of rows 0-7 widened
 * to words, *s_hi for rows 8-15. */
static inline DJ_ALWAYS_INLINE void amx_scale_words(__m512i sc, __m512i *s_lo, __m512i *s_hi) {
    const __m512i idx_lo = _mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 1,
                                            1, 1, 1, 0, 0, 0, 0);
    const __m512i sc16 = _mm512_castsi256_si512(_mm512_cvtepi32_epi16(sc));
    *s_lo = _mm512_permutexvar_epi16(idx_lo, sc16);
    *s_hi = _mm512_permutexvar_epi16(_mm512_add_epi16(idx_lo, _mm512_set1_epi16(8)), sc16);
}
/* v's unsigned bytes (byte 4i + e: row i) times their row's scale, exactly in 16 bits,
 * split into the low byte (*lo) and the rest >> 8 (*hi: logical for q4_K's unsigned
 * products, arithmetic for q6_K's signed ones). */
static inline DJ_ALWAYS_INLINE void amx_split_vec(const int sgn, __m512i v, __m512i s_lo, __m512i s_hi, __m512i *lo,
                                                  __m512i *hi) {
    const __m512i p0 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)), s_lo);
    const __m512i p1 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1)), s_hi);
    *lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(p0)), _mm512_cvtepi16_epi8(p1), 1);
    const __m512i h0 = sgn ? _mm512_srai_epi16(p0, 8) : _mm512_srli_epi16(p0, 8);
    const __m512i h1 = sgn ? _mm512_srai_epi16(p1, 8) : _mm512_srli_epi16(p1, 8);
    *hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(h0)), _mm512_cvtepi16_epi8(h1), 1);
}
/* One super-block for the configured tokens (A: their q8_K values, as apart): the 16 x 16
 * int32 sums over the 4 tiles of 64 values of the low bytes (xl, TDPBSUD) and of the high
 * parts (xh: TDPBSUD, or TDPBSSD when sgn). */
static inline DJ_ALWAYS_INLINE void amx_lohi_sums(const int sgn, const uint8_t *aq, size_t as,
                                                  const __m512i lo[4][16], const __m512i hi[4][16], int32_t xl[16][16],
                                                  int32_t xh[16][16]) {
    _tile_zero(0);
    _tile_zero(1);
    for (int u = 0; u < 4; u++) {
        _tile_loadd(4, aq + 64 * u, (long)as);
        _tile_loadd(6, lo[u], 64);
        _tile_loadd(7, hi[u], 64);
        _tile_dpbsud(0, 4, 6);
        if (sgn) _tile_dpbssd(1, 4, 7);
        else _tile_dpbsud(1, 4, 7);
    }
    _tile_stored(0, xl, 64);
    _tile_stored(1, xh, 64);
    AMX_BARRIER();
}
/* q4_0 and q8_0 prefill (batches of more than 16 tokens) by AMX-INT8.  The packed
 * q4_0 / q8_0 kernels above compute, per (row, token) pair and block b in order,
 * acc = fma(float(isum_b), d_w[b] * d_a[b], acc), isum_b the block's exact integer dot.
 * A block's packed quants (q16p_q) are vectors whose vector j holds, in lane i, row i's
 * elements 4j .. 4j + 3: the B tile layout.  Per 16-row group the blocks are turned back
 * into signed bytes once (q4_0 nibble - 8, q8_0 ^ 0x80); with the tokens' q8_0 bytes as
 * the A tile (16 tokens x 32 bytes, straight from the activation rows), one TDPBSSD gives
 * the 16 x 16 integer dots of a block, exact in int32 whatever the hardware's order; the
 * float step is q16_fma's.  Block b's operands go to tiles 4 + b % 2 and 6 + b % 2 and its
 * sums to tile b % 2, stored while the next block's are made. */
static inline DJ_ALWAYS_INLINE void amxq_epilogue(const int32_t isum[16][16], __m512 dw, const float *td, int64_t nb,
                                                   __m512 acc[16]) {
    DJ_UNROLL for (int t = 0; t < 16; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[t])),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(td[t * nb])), acc[t]);
}
static void amxq_matmul(const int q8, int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c,
                        int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t nb = k / 32, ntp = (n_tok + 15) / 16 * 16;
    const size_t td_bytes = ((size_t)ntp * (size_t)nb * sizeof(float) + 63) & ~(size_t)63;
    uint8_t *scr = n_tok > AMX_MIN_TOK ? dj_kernel_scratch(td_bytes + (size_t)nb * 512) : NULL;
    if (!scr) { /* a small batch, or out of memory: the avx512 kernel, the same bits */
        (q8 ? q8_0_matmul_packed : q4_0_matmul_packed)(k, wv, ws, av, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *w = wv, *a = av;
    float *td = (float *)scr;     /* the tokens' block scales (0 past n_tok) */
    uint8_t *ub = scr + td_bytes; /* a group's blocks as signed bytes, in the B tile layout */
    for (int64_t t = 0; t < ntp; t++)
        for (int64_t b = 0; b < nb; b++)
            td[t * nb + b] = t < n_tok ? _cvtsh_ss(((const struct dj_block_q8_0 *)(a + (size_t)t * as) + b)->d) : 0.0f;
    _Alignas(64) int32_t isum[2][16][16];
    int cur_rows = -1;
    for (int64_t r = r0; r < r1;) {
        int64_t g0;
        __mmask16 m;
        const uint8_t *wg = q16p_group(w, ws, r, r1, &g0, &m);
        r = g0 + 16;
        if (q8) {
            const __m512i x80 = _mm512_set1_epi8((char)0x80);
            for (int64_t b = 0; b < nb; b++) {
                const __m512i *v = (const __m512i *)q16p_q(1, wg, b);
                __m512i *o = (__m512i *)(ub + (size_t)b * 512);
                for (int j = 0; j < 8; j++) _mm512_store_si512(o + j, _mm512_xor_si512(_mm512_loadu_si512(v + j), x80));
            }
        } else {
            const __m512i m4 = _mm512_set1_epi8(0x0F), e8 = _mm512_set1_epi8(8);
            for (int64_t b = 0; b < nb; b++) {
                const __m512i *v = (const __m512i *)q16p_q(0, wg, b);
                __m512i *o = (__m512i *)(ub + (size_t)b * 512);
                for (int j = 0; j < 4; j++) {
                    const __m512i x = _mm512_loadu_si512(v + j);
                    _mm512_store_si512(o + j, _mm512_sub_epi8(_mm512_and_si512(x, m4), e8));
                    _mm512_store_si512(o + 4 + j, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(x, 4), m4), e8));
                }
            }
        }
        for (int64_t t = 0; t < n_tok; t += 16) {
            const int nt = (int)(n_tok - t < 16 ? n_tok - t : 16);
            dj_amx_int8_rows(nt, 32, &cur_rows);
            const uint8_t *at = a + (size_t)t * as + 2;
            const float *tt = td + t * nb;
            __m512 acc[16];
            DJ_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            AMX_BARRIER();
            for (int64_t b = 0; b <= nb; b++) {
                if (b < nb) DJ_AMX_Q8_ISSUE(b, at + (size_t)b * sizeof(struct dj_block_q8_0), as, ub + (size_t)b * 512);
                if (b > 0) {
                    const int64_t pb = b - 1;
                    DJ_AMX_Q8_STORE(pb, isum);
                    AMX_BARRIER();
                    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)q16p_d(q8, wg, pb, nb)));
                    amxq_epilogue((const int32_t(*)[16])isum[pb % 2], dw, tt + pb, nb, acc);
                }
            }
            for (int j = 0; j < nt; j++) _mm512_mask_storeu_ps(c + (t + j) * ldc + g0, m, acc[j]);
        }
    }
    _tile_release();
}
void dj_q4_0_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    amxq_matmul(0, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
void dj_q8_0_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    amxq_matmul(1, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
/* A super-block of a group as B tiles: lo[u] / hi[u] (u = 0..3: elements 64u..64u+63) are
 * the low bytes and the high parts of sc * q, vector j of a tile = elements 4j.. of 16 rows. */
struct amx_lohi_blk { __m512i lo[4][16], hi[4][16]; }; /* q4_K and q6_K */
/* A super-block's 64 vectors of unsigned values (vector v lane i: row i's values 4v ..
 * 4v + 3 of the super-block, as bytes), vpg vectors a scale group (sc[g] lane i: row i's
 * scale), as B tiles: lo[v / 16][v % 16] / hi[...] the low bytes and the high parts of
 * sc * q (sgn: signed scales, q6_K). */
static void amx_split_blk(const int sgn, const __m512i *q, const __m512i *sc, int vpg, struct amx_lohi_blk *o) {
    for (int g = 0; g < 64 / vpg; g++) {
        __m512i s_lo, s_hi;
        amx_scale_words(sc[g], &s_lo, &s_hi);
        for (int j = 0; j < vpg; j++) {
            const int v = g * vpg + j;
            amx_split_vec(sgn, q[v], s_lo, s_hi, &o->lo[v / 16][v % 16], &o->hi[v / 16][v % 16]);
        }
    }
}
void dj_q4_K_amx_matmul_packed(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t nb = k / DJ_QK_K;
    const size_t bl_bytes = (size_t)nb * sizeof(struct amx_lohi_blk), wp_bytes = (size_t)nb * sizeof(struct q4k_wblk);
    const size_t tp_bytes = (size_t)(n_tok + 15) / 16 * 16 * (size_t)nb * sizeof(struct dj_q8K_tok);
    uint8_t *scr = n_tok > AMX_MIN_TOK ? dj_kernel_scratch(bl_bytes + wp_bytes + tp_bytes) : NULL;
    if (!scr) { /* a small batch, or out of memory: the avx512 kernel, the same bits */
        q4_K_matmul_packed(k, wv, ws, av, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *w = wv, *a = av;
    const size_t wbs = sizeof(struct dj_block_q4_K), abs_ = sizeof(struct dj_block_q8_K);
    const size_t qso = offsetof(struct dj_block_q8_K, qs);
    struct amx_lohi_blk *bl = (struct amx_lohi_blk *)scr;
    struct q4k_wblk *wp = (struct q4k_wblk *)(scr + bl_bytes);
    struct dj_q8K_tok *tp = (struct dj_q8K_tok *)(scr + bl_bytes + wp_bytes);
    for (int64_t t = 0; t < n_tok; t++) dj_q8K_prep_tok(nb, a + (size_t)t * as, tp + t * nb);
    memset(tp + n_tok * nb, 0, tp_bytes - (size_t)n_tok * (size_t)nb * sizeof *tp);
    _Alignas(64) int32_t xl[16][16], xh[16][16];
    _Alignas(64) float accm[16][16];
    int cur_rows = -1;
    for (int64_t r = r0; r < r1;) {
        int64_t g0;
        __mmask16 m;
        const uint8_t *wg = q16p_group(w, ws, r, r1, &g0, &m);
        r = g0 + 16;
        for (int64_t b = 0; b < nb; b++) {
            q4k_unpack(1, wg + (size_t)b * 16 * wbs, ws, &wp[b]);
            amx_split_blk(0, (const __m512i *)wp[b].q, wp[b].sc, 8, &bl[b]);
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += 16) {
            const int nt = (int)(n_tok - t0 < 16 ? n_tok - t0 : 16);
            dj_amx_int8_rows(nt, 64, &cur_rows);
            const uint8_t *at = a + (size_t)t0 * as + qso;
            memset(accm, 0, sizeof accm);
            AMX_BARRIER();
            for (int64_t b = 0; b < nb; b++) {
                amx_lohi_sums(0, at + (size_t)b * abs_, as, (const __m512i(*)[16])bl[b].lo,
                              (const __m512i(*)[16])bl[b].hi, xl, xh);
                const struct q4k_wblk *wb = &wp[b];
                for (int t = 0; t < 16; t++) {
                    const __m512i isum = _mm512_add_epi32(_mm512_load_si512(xl[t]),
                                                          _mm512_slli_epi32(_mm512_load_si512(xh[t]), 8));
                    _mm512_store_ps(accm[t], q4k_fma(isum, wb->m, wb->d, wb->dmin, &tp[(t0 + t) * nb + b],
                                                     _mm512_load_ps(accm[t])));
                }
            }
            for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(c + (t0 + t) * ldc + g0, m, _mm512_load_ps(accm[t]));
        }
    }
    _tile_release();
}
#pragma GCC pop_options

/* ---- q6_K x q8_K ----------------------------------------------------------------------
 *
 * Per (row, token) pair, super-blocks b = 0 .. nb-1 in order:
 *
 *     tot = sum over the 16 groups g of 16 values of sc_g * (sum over g of (q - 32) * a)
 *                                                             exact in int32
 *     acc = fma(float(tot), d_w * d_a, acc)              (acc starts at 0; the result)
 *
 * (q the unsigned 6-bit value; the -32 goes in as -32 * sc_g * bsum_g.)  The integer is
 * exact whatever the order of its terms, so two layouts compute it:
 *   - decode and the dot (up to 2 tokens), one row at a time, the row's values along the
 *     lanes (vpmaddubsw, vpdpwssd with the group scales as words), then an integer sum
 *     of the lanes and the pair's fma as a scalar: the weights are read as one sequential
 *     stream, which the hardware prefetchers follow;
 *   - prefill, 16 rows in the 16 lanes as for q4_K (q6k_unpack: one vpdpbusd per 4
 *     values of 16 rows, vpmulld by the group scale, the -32 terms by vpdpwssd with the
 *     token's bsums), the fma in the pair's lane.
 * Both end in the same fma on the same two floats, so matmul == dot bitwise. */

/* One row (w) x NT tokens (a, as apart) -> c[j * ldc]. */
static inline DJ_ALWAYS_INLINE void q6k_row(const int NT, int64_t k, const uint8_t *w, const uint8_t *a, size_t as,
                                            float *c, int64_t ldc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* high bits to bits 4-5: elements 0-31 of a 64 take qh bits 0-1 (<< 4), 32-63 bits 2-3
     * (<< 2); for the next 64, bits 4-5 (as they are) and bits 6-7 (>> 2). */
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m128 acc[2];
    DJ_UNROLL for (int j = 0; j < NT; j++) acc[j] = _mm_setzero_ps();
    for (int64_t ib = 0; ib < k / DJ_QK_K; ib++) {
        const struct dj_block_q6_K *wb = (const struct dj_block_q6_K *)w + ib;
        const struct dj_block_q8_K *ab[2];
        if (pk_pf) /* the rows are one stream (row r + 1 follows row r): pk_pf ahead of it */
            for (int l = 0; l < 4; l++) _mm_prefetch((const char *)wb + pk_pf + 64 * l, _MM_HINT_T0);
        const __m512i scw = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales)));
        __m512i isum[2];
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            ab[j] = (const struct dj_block_q8_K *)(a + (size_t)j * as) + ib;
            isum[j] = _mm512_setzero_si512();
        }
        DJ_UNROLL for (int h = 0; h < 2; h++) {
            /* words of a 64-value chunk k take group scale 4k + word/8 */
            const __m512i sidx0 = _mm512_add_epi16(_mm512_srli_epi16(_mm512_set_epi16(
                31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3), _mm512_set1_epi16((short)(8 * h)));
            const __m512i sidx1 = _mm512_add_epi16(sidx0, _mm512_set1_epi16(4));
            const __m512i ql = _mm512_loadu_si512(wb->ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h)));
            const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
            const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
            const __m512i s0 = _mm512_permutexvar_epi16(sidx0, scw), s1 = _mm512_permutexvar_epi16(sidx1, scw);
            DJ_UNROLL for (int j = 0; j < NT; j++) {
                const __m512i a0 = _mm512_loadu_si512(ab[j]->qs + 128 * h);
                const __m512i a1 = _mm512_loadu_si512(ab[j]->qs + 128 * h + 64);
                isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_maddubs_epi16(q0, a0), s0);
                isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_maddubs_epi16(q1, a1), s1);
            }
        }
        /* the -32 offset of every value: lanes += bsum * (-32 sc), pairwise */
        const __m512i nsc = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(scw, 5));
        const float dw = f16_to_f32((const uint8_t *)&wb->d);
        DJ_UNROLL for (int j = 0; j < NT; j++) {
            const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)ab[j]->bsums));
            const int32_t tot = _mm512_reduce_add_epi32(_mm512_dpwssd_epi32(isum[j], bs, nsc));
            acc[j] = _mm_fmadd_ss(_mm_set_ss((float)tot), _mm_set_ss(dw * ab[j]->d), acc[j]);
        }
    }
    DJ_UNROLL for (int j = 0; j < NT; j++) c[j * ldc] = _mm_cvtss_f32(acc[j]);
}

struct q6k_wblk { __m512i q[16][4]; __m512i sc[16]; __m512i nsc[8]; __m512 d; };
#define Q6K_SLAB 4 /* super-blocks per slab: 22 KiB of transposed weights */

/* One super-block of 16 rows (row i at p + i * ws): q[g][j] lane i = row i's values
 * 16g + 4j .. +3 (unsigned 6-bit, as bytes), sc[g] its group scale (int32), nsc[u]
 * -32 times the scales of groups 2u, 2u + 1 (words), d as float. */
static inline DJ_ALWAYS_INLINE void q6k_unpack(const uint8_t *p, size_t ws, __m512i vidx, struct q6k_wblk *o) {
    const __m512i c0f = _mm512_set1_epi8(0x0F), c30 = _mm512_set1_epi8(0x30);
    const size_t qlo = offsetof(struct dj_block_q6_K, ql), qho = offsetof(struct dj_block_q6_K, qh);
    DJ_UNROLL for (int h = 0; h < 2; h++) {
        DJ_UNROLL for (int c2 = 0; c2 < 2; c2++) {
            /* bytes l = 16 c2 .. +15 of ql[64h..], ql[64h + 32..], qh[32h..]: values
             * 128h + l (+32, +64, +96), groups 8h + c2 (+2, +4, +6) */
            __m512i A[4], B[4], H[4];
            q16_transpose(p + qlo + 64 * h + 16 * c2, ws, A);
            q16_transpose(p + qlo + 64 * h + 32 + 16 * c2, ws, B);
            q16_transpose(p + qho + 32 * h + 16 * c2, ws, H);
            const int g = 8 * h + c2;
            DJ_UNROLL for (int j = 0; j < 4; j++) {
                o->q[g][j] = _mm512_or_si512(_mm512_and_si512(A[j], c0f), _mm512_and_si512(_mm512_slli_epi32(H[j], 4), c30));
                o->q[g + 2][j] =
                    _mm512_or_si512(_mm512_and_si512(B[j], c0f), _mm512_and_si512(_mm512_slli_epi32(H[j], 2), c30));
                o->q[g + 4][j] =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(A[j], 4), c0f), _mm512_and_si512(H[j], c30));
                o->q[g + 6][j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(B[j], 4), c0f),
                                                 _mm512_and_si512(_mm512_srli_epi32(H[j], 2), c30));
            }
        }
    }
    __m512i S[4]; /* S[u] lane i = row i's scales 4u .. 4u+3 (int8) */
    q16_transpose(p + offsetof(struct dj_block_q6_K, scales), ws, S);
    DJ_UNROLL for (int g = 0; g < 16; g++) {
        const unsigned b = (unsigned)(g % 4); /* byte b of each dword to its top byte, then >> 24 */
        const __m512i ctl = _mm512_broadcast_i32x4(_mm_setr_epi32((int)(0x808080u | b << 24), (int)(0x808080u | (4 + b) << 24),
                                                                   (int)(0x808080u | (8 + b) << 24),
                                                                   (int)(0x808080u | (12 + b) << 24)));
        o->sc[g] = _mm512_srai_epi32(_mm512_shuffle_epi8(S[g / 4], ctl), 24);
    }
    DJ_UNROLL for (int u = 0; u < 8; u++) {
        const unsigned b = 2u * (unsigned)(u % 2); /* bytes b, b + 1 to the high bytes of words 0, 1 */
        unsigned v[4];
        for (unsigned l = 0; l < 4; l++) v[l] = 0x80u | (4 * l + b) << 8 | 0x800000u | (4 * l + b + 1) << 24;
        const __m512i ctl = _mm512_broadcast_i32x4(_mm_setr_epi32((int)v[0], (int)v[1], (int)v[2], (int)v[3]));
        const __m512i sw = _mm512_srai_epi16(_mm512_shuffle_epi8(S[u / 2], ctl), 8);
        o->nsc[u] = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(sw, 5));
    }
    /* d is the block's last 2 bytes: the dword ending there, high half */
    o->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
        _mm512_srli_epi32(q16_gather(p + offsetof(struct dj_block_q6_K, d) - 2, vidx), 16)));
}

static inline DJ_ALWAYS_INLINE void q6k_gemm_body(const int NT, int64_t nbs, int first, int last,
                                                  const struct q6k_wblk *wp, const uint8_t *a, size_t as,
                                                  __m512 *accb, float *c, int64_t ldc, __mmask16 m) {
    const size_t qso = offsetof(struct dj_block_q8_K, qs), bso = offsetof(struct dj_block_q8_K, bsums);
    const size_t abs_ = sizeof(struct dj_block_q8_K);
    __m512 acc[Q16_NT];
    DJ_UNROLL for (int t = 0; t < NT; t++) acc[t] = first ? _mm512_setzero_ps() : accb[t];
    for (int64_t b = 0; b < nbs; b++) {
        const struct q6k_wblk *wb = wp + b;
        const uint8_t *ab = a + (size_t)b * abs_;
        __m512i isum[Q16_NT];
        DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int g = 0; g < 16; g++) {
            __m512i x[Q16_NT];
            DJ_UNROLL for (int t = 0; t < NT; t++) x[t] = _mm512_setzero_si512();
            DJ_UNROLL for (int j = 0; j < 4; j++) {
                const __m512i w = wb->q[g][j];
                DJ_UNROLL for (int t = 0; t < NT; t++)
                    x[t] = _mm512_dpbusd_epi32(
                        x[t], w, _mm512_set1_epi32((int)dj_load_u32(ab + (size_t)t * as + qso + 16 * g + 4 * j)));
            }
            DJ_UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(x[t], wb->sc[g]));
        }
        DJ_UNROLL for (int t = 0; t < NT; t++) {
            const uint8_t *at = ab + (size_t)t * as;
            DJ_UNROLL for (int u = 0; u < 8; u++)
                isum[t] = _mm512_dpwssd_epi32(isum[t], wb->nsc[u], _mm512_set1_epi32((int)dj_load_u32(at + bso + 4 * u)));
            float ad;
            memcpy(&ad, at, sizeof ad);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wb->d, _mm512_set1_ps(ad)), acc[t]);
        }
    }
    if (last) {
        DJ_UNROLL for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(c + t * ldc, m, acc[t]);
    } else {
        DJ_UNROLL for (int t = 0; t < NT; t++) accb[t] = acc[t];
    }
}
typedef void (*q6k_gemm_fn)(int64_t nbs, int first, int last, const struct q6k_wblk *wp, const uint8_t *a,
                            size_t as, __m512 *accb, float *c, int64_t ldc, __mmask16 m);
#define Q6K_GEMM(N)                                                                                         \
    static void q6k_gemm_##N(int64_t nbs, int first, int last, const struct q6k_wblk *wp, const uint8_t *a, \
                             size_t as, __m512 *accb, float *c, int64_t ldc, __mmask16 m) {                  \
        q6k_gemm_body(N, nbs, first, last, wp, a, as, accb, c, ldc, m);                                      \
    }
Q6K_GEMM(1) Q6K_GEMM(2) Q6K_GEMM(3) Q6K_GEMM(4) Q6K_GEMM(5) Q6K_GEMM(6) Q6K_GEMM(7) Q6K_GEMM(8)
static const q6k_gemm_fn q6k_gemm_tab[Q16_NT] = {q6k_gemm_1, q6k_gemm_2, q6k_gemm_3, q6k_gemm_4,
                                                 q6k_gemm_5, q6k_gemm_6, q6k_gemm_7, q6k_gemm_8};
static void q6k_row_1(int64_t k, const uint8_t *w, const uint8_t *a, size_t as, float *c, int64_t ldc) {
    q6k_row(1, k, w, a, as, c, ldc);
}
static void q6k_row_2(int64_t k, const uint8_t *w, const uint8_t *a, size_t as, float *c, int64_t ldc) {
    q6k_row(2, k, w, a, as, c, ldc);
}

static float q6_K_dot(int64_t k, const void *w, const void *a);
static void q6_K_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    const uint8_t *w = wv, *a = av;
    if (n_tok <= DJ_SMALL_BATCH) {
        for (int64_t r = r0; r < r1; r++)
            (n_tok == 1 ? q6k_row_1 : q6k_row_2)(k, w + (size_t)r * ws, a, as, c + r, ldc);
        return;
    }
    const int64_t nb = k / DJ_QK_K;
    const size_t wbs = sizeof(struct dj_block_q6_K), abs_ = sizeof(struct dj_block_q8_K);
    DJ_ASSERT(ws <= (size_t)INT32_MAX / 16); /* gather offsets */
    const int64_t tok_chunk = q16_tok_chunk(as, n_tok);
    const size_t wp_bytes = Q6K_SLAB * sizeof(struct q6k_wblk), accb_bytes = (size_t)tok_chunk * sizeof(__m512);
    uint8_t *scr = dj_kernel_scratch(wp_bytes + accb_bytes + 16 * ws);
    if (!scr) { /* out of memory: the same bits, element by element */
        dj_matmul_by_dot(q6_K_dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    struct q6k_wblk *wp = (struct q6k_wblk *)scr;
    __m512 *accb = (__m512 *)(scr + wp_bytes);
    uint8_t *rows = scr + wp_bytes + accb_bytes; /* a matrix of fewer than 16 rows, padded */
    const __m512i vidx = q16_vidx(ws);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t nt_c = n_tok - t0 < tok_chunk ? n_tok - t0 : tok_chunk;
        const uint8_t *at = a + (size_t)t0 * as;
        for (int64_t r = r0; r < r1; r += 16) {
            int64_t g0;
            __mmask16 m;
            const uint8_t *wg = q16_group(w, ws, r, r1, rows, &g0, &m);
            float *cg = c + t0 * ldc + g0;
            for (int64_t s0 = 0; s0 < nb; s0 += Q6K_SLAB) {
                const int64_t s1 = nb - s0 < Q6K_SLAB ? nb : s0 + Q6K_SLAB;
                for (int64_t b = s0; b < s1; b++) {
                    q16_prefetch_ahead(wg, ws, wbs, b + Q6K_SLAB, nb, r + 32 <= r1);
                    q6k_unpack(wg + (size_t)b * wbs, ws, vidx, &wp[b - s0]);
                }
                for (int64_t t = 0; t < nt_c; t += Q16_NT) {
                    const int nt = (int)(nt_c - t < Q16_NT ? nt_c - t : Q16_NT);
                    q6k_gemm_tab[nt - 1](s1 - s0, s0 == 0, s1 == nb, wp, at + (size_t)t * as + (size_t)s0 * abs_, as,
                                         accb + t, cg + t * ldc, ldc, m);
                }
            }
        }
    }
}
static float q6_K_dot(int64_t k, const void *w, const void *a) {
    float c;
    q6k_row_1(k, w, a, 0, &c, 0);
    return c;
}

/* q6_K prefill by AMX-INT8 (the amx table), as q4_K's above: tot's sum over the groups of
 * sc_g * q (sc_g signed, q 0..63: |sc_g * q| <= 8064) is split per 16-row group into its
 * low byte (unsigned) and the rest (>> 8, signed: -32..31); per 16 tokens, four TDPBSUD
 * over the low bytes and four TDPBSSD over the high ones give lo + 256 * hi exactly; the
 * -32 terms and the fma follow as in q6k_gemm_body.  So the bits are this table's. */
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")
void dj_q6_K_amx_matmul(int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t nb = k / DJ_QK_K;
    const size_t bl_bytes = (size_t)nb * sizeof(struct amx_lohi_blk), wp_bytes = (size_t)nb * sizeof(struct q6k_wblk);
    uint8_t *scr = n_tok > AMX_MIN_TOK && ws <= (size_t)INT32_MAX / 16
                       ? dj_kernel_scratch(bl_bytes + wp_bytes + ((16 * ws + 63) & ~(size_t)63))
                       : NULL;
    if (!scr) { /* a small batch, or out of memory: the avx512 kernel, the same bits */
        q6_K_matmul(k, wv, ws, av, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *w = wv, *a = av;
    const size_t wbs = sizeof(struct dj_block_q6_K), abs_ = sizeof(struct dj_block_q8_K);
    const size_t qso = offsetof(struct dj_block_q8_K, qs), bso = offsetof(struct dj_block_q8_K, bsums);
    struct amx_lohi_blk *bl = (struct amx_lohi_blk *)scr;
    struct q6k_wblk *wp = (struct q6k_wblk *)(scr + bl_bytes);
    uint8_t *rows = scr + bl_bytes + wp_bytes; /* a matrix of fewer than 16 rows, padded */
    const __m512i vidx = q16_vidx(ws);
    _Alignas(64) int32_t xl[16][16], xh[16][16];
    _Alignas(64) float accm[16][16];
    int cur_rows = -1;
    for (int64_t r = r0; r < r1; r += 16) {
        int64_t g0;
        __mmask16 m;
        const uint8_t *wg = q16_group(w, ws, r, r1, rows, &g0, &m);
        for (int64_t b = 0; b < nb; b++) {
            q6k_unpack(wg + (size_t)b * wbs, ws, vidx, &wp[b]);
            amx_split_blk(1, (const __m512i *)wp[b].q, wp[b].sc, 4, &bl[b]);
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += 16) {
            const int nt = (int)(n_tok - t0 < 16 ? n_tok - t0 : 16);
            dj_amx_int8_rows(nt, 64, &cur_rows);
            const uint8_t *at = a + (size_t)t0 * as;
            memset(accm, 0, sizeof accm);
            AMX_BARRIER();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *ab = at + (size_t)b * abs_;
                amx_lohi_sums(1, ab + qso, as, (const __m512i(*)[16])bl[b].lo, (const __m512i(*)[16])bl[b].hi, xl, xh);
                const struct q6k_wblk *wb = &wp[b];
                for (int t = 0; t < nt; t++) {
                    const uint8_t *att = ab + (size_t)t * as;
                    __m512i isum = _mm512_add_epi32(_mm512_load_si512(xl[t]), _mm512_slli_epi32(_mm512_load_si512(xh[t]), 8));
                    for (int u = 0; u < 8; u++)
                        isum = _mm512_dpwssd_epi32(isum, wb->nsc[u], _mm512_set1_epi32((int)dj_load_u32(att + bso + 4 * u)));
                    float ad;
                    memcpy(&ad, att, sizeof ad);
                    _mm512_store_ps(accm[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wb->d, _mm512_set1_ps(ad)),
                                                             _mm512_load_ps(accm[t])));
                }
            }
            for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(c + (t0 + t) * ldc + g0, m, _mm512_load_ps(accm[t]));
        }
    }
    _tile_release();
}
#pragma GCC pop_options


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

/* hsum16 of 16 vectors at once: lane j = hsum16(a[j]), bitwise — the same pairs are
 * added at every level of the tree (v[l] + v[l+8], then + 4, + 2, + 1), only 16 sums
 * share each shuffle and add.  The tree's last two levels pair lanes within 128-bit
 * quarters and leave key j in lane 4 * (j % 4) + j / 4, so the vectors go in in that
 * (self-inverse) order. */
static inline DJ_ALWAYS_INLINE __m512 hsum16x16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    DJ_UNROLL for (int i = 0; i < 8; i++) {
        const __m512 x = a[4 * (2 * i % 4) + 2 * i / 4], y = a[4 * ((2 * i + 1) % 4) + (2 * i + 1) / 4];
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    DJ_UNROLL for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    DJ_UNROLL for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
}

/* Per key: the 16-lane fma chain over q . k in order (masked tail), hsum16, times
 * scale.  16 keys at a time share hsum16x16's tree (hd = 32, codelm at 4,096 positions:
 * the per-key tree was most of the scoring time). */
static void attn_scores_avx512(int64_t hd, const float *q, const float *k, size_t stride, int64_t n, float scale,
                               float *s) {
    const int64_t full = hd & ~(int64_t)15;
    const __mmask16 m = (__mmask16)((1u << (hd - full)) - 1);
    int64_t p = 0;
    for (; p + 16 <= n; p += 16, k += 16 * stride) {
        __m512 acc[16];
        DJ_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) {
            const __m512 qv = _mm512_loadu_ps(q + i);
            DJ_UNROLL for (int j = 0; j < 16; j++)
                acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + (size_t)j * stride + i), acc[j]);
        }
        if (full < hd) {
            const __m512 qv = _mm512_maskz_loadu_ps(m, q + full);
            DJ_UNROLL for (int j = 0; j < 16; j++)
                acc[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + (size_t)j * stride + full), acc[j]);
        }
        _mm512_storeu_ps(s + p, _mm512_mul_ps(hsum16x16(acc), _mm512_set1_ps(scale)));
    }
    for (; p < n; p++, k += stride) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), acc);
        if (full < hd) acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + full), _mm512_maskz_loadu_ps(m, k + full), acc);
        s[p] = hsum16(acc) * scale;
    }
}

/* NB blocks of 16 output lanes from d in one pass over the positions: NB independent
 * fma chains instead of one (each lane still adds the positions in order). */
static inline DJ_ALWAYS_INLINE void attn_values_blocks(const int NB, int64_t hd, int64_t d, const float *w,
                                                       const float *v, size_t stride, int64_t n, float *out,
                                                       bool accumulate) {
    __m512 acc[8];
    __mmask16 m[8];
    DJ_UNROLL for (int b = 0; b < NB; b++) {
        const int64_t db = d + 16 * b;
        m[b] = hd - db >= 16 ? (__mmask16)0xffff : hd <= db ? (__mmask16)0 : (__mmask16)((1u << (hd - db)) - 1);
        acc[b] = accumulate ? _mm512_maskz_loadu_ps(m[b], out + db) : _mm512_setzero_ps();
    }
    const float *vp = v + d;
    for (int64_t p = 0; p < n; p++, vp += stride) {
        const __m512 wp = _mm512_set1_ps(w[p]);
        DJ_UNROLL for (int b = 0; b < NB; b++)
            acc[b] = _mm512_fmadd_ps(wp, _mm512_maskz_loadu_ps(m[b], vp + 16 * b), acc[b]);
    }
    DJ_UNROLL for (int b = 0; b < NB; b++) _mm512_mask_storeu_ps(out + d + 16 * b, m[b], acc[b]);
}

static void attn_values_avx512(int64_t hd, const float *w, const float *v, size_t stride, int64_t n, float *out,
                               bool accumulate) {
    /* every 16-lane block of the head in one pass where possible: at hd = 32 (codelm)
     * one block at a time was one latency-bound fma chain */
    for (int64_t d0 = 0; d0 < hd; d0 += 128) {
        switch ((hd - d0 >= 128 ? 128 : hd - d0 + 15) / 16) {
        case 1: attn_values_blocks(1, hd, d0, w, v, stride, n, out, accumulate); break;
        case 2: attn_values_blocks(2, hd, d0, w, v, stride, n, out, accumulate); break;
        case 3: attn_values_blocks(3, hd, d0, w, v, stride, n, out, accumulate); break;
        case 4: attn_values_blocks(4, hd, d0, w, v, stride, n, out, accumulate); break;
        case 5: attn_values_blocks(5, hd, d0, w, v, stride, n, out, accumulate); break;
        case 6: attn_values_blocks(6, hd, d0, w, v, stride, n, out, accumulate); break;
        case 7: attn_values_blocks(7, hd, d0, w, v, stride, n, out, accumulate); break;
        default: attn_values_blocks(8, hd, d0, w, v, stride, n, out, accumulate); break;
        }
    }
}

/* nr rows over the same positions: per position the NB blocks of V are loaded once and
 * each of R rows adds its weight times them into its own accumulators, so R * NB fma
 * chains run side by side (one row of a 32-wide head had 2: latency-bound).  Each lane
 * of each row still adds the positions in order with attn_values_blocks' operations.
 * Fewer than R rows left: the missing ones repeat the last row into a discarded out. */
static inline DJ_ALWAYS_INLINE void attn_values_rows(const int NB, const int R, int64_t hd, int nr,
                                                     const float *const *w, const float *v, size_t stride, int64_t n,
                                                     float *const *out, bool accumulate) {
    __mmask16 m[8];
    DJ_UNROLL for (int b = 0; b < NB; b++) {
        const int64_t db = 16 * b;
        m[b] = hd - db >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - db)) - 1);
    }
    float junk[128];
    for (int r0 = 0; r0 < nr; r0 += R) {
        const float *wr[8];
        float *orow[8];
        DJ_UNROLL for (int r = 0; r < R; r++) {
            wr[r] = r0 + r < nr ? w[r0 + r] : w[nr - 1];
            orow[r] = r0 + r < nr ? out[r0 + r] : junk;
        }
        __m512 acc[8][8];
        DJ_UNROLL for (int r = 0; r < R; r++) DJ_UNROLL for (int b = 0; b < NB; b++)
            acc[r][b] = accumulate && r0 + r < nr ? _mm512_maskz_loadu_ps(m[b], orow[r] + 16 * b) : _mm512_setzero_ps();
        const float *vp = v;
        for (int64_t p = 0; p < n; p++, vp += stride) {
            __m512 vv[8];
            DJ_UNROLL for (int b = 0; b < NB; b++) vv[b] = _mm512_maskz_loadu_ps(m[b], vp + 16 * b);
            DJ_UNROLL for (int r = 0; r < R; r++) {
                const __m512 wp = _mm512_set1_ps(wr[r][p]);
                DJ_UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_fmadd_ps(wp, vv[b], acc[r][b]);
            }
        }
        DJ_UNROLL for (int r = 0; r < R; r++) DJ_UNROLL for (int b = 0; b < NB; b++)
            _mm512_mask_storeu_ps(orow[r] + 16 * b, m[b], acc[r][b]);
    }
}

static void attn_values_n_avx512(int64_t hd, int nr, const float *const *w, const float *v, size_t stride, int64_t n,
                                 float *const *out, bool accumulate) {
    switch ((hd + 15) / 16) {
    case 1: attn_values_rows(1, 8, hd, nr, w, v, stride, n, out, accumulate); return;
    case 2: attn_values_rows(2, 8, hd, nr, w, v, stride, n, out, accumulate); return;
    case 3: attn_values_rows(3, 5, hd, nr, w, v, stride, n, out, accumulate); return;
    case 4: attn_values_rows(4, 4, hd, nr, w, v, stride, n, out, accumulate); return;
    case 5: attn_values_rows(5, 3, hd, nr, w, v, stride, n, out, accumulate); return;
    case 6: attn_values_rows(6, 2, hd, nr, w, v, stride, n, out, accumulate); return;
    case 7: attn_values_rows(7, 2, hd, nr, w, v, stride, n, out, accumulate); return;
    case 8: attn_values_rows(8, 2, hd, nr, w, v, stride, n, out, accumulate); return;
    default:
        for (int r = 0; r < nr; r++) attn_values_avx512(hd, w[r], v, stride, n, out[r], accumulate);
    }
}

/* exp(x) for 16 lanes, x <= 88: x = n ln2 + r (Cody-Waite, ln2 in two parts), e^r by
 * Cephes' degree-6 polynomial, times 2^n by vscalef (below -104: 0).  Measured against
 * exp in double over every 8th float in [-104, 0] (all of [-1e-3, 0]): relative error
 * <= 8.3e-8 in the normal range; exp(0) = 1 exactly. */
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* Softmax of one score row: the max (exact in any order), exp16 of s - max, the sum in
 * 16 double lanes (p % 16; masked lanes add +0.0) reduced by a fixed tree, then times
 * (float)(1 / sum).  The scalar loop with glibc's expf was ~40% of codelm's pp4096. */
static void attn_softmax_avx512(float *s, int64_t n, float sink) {
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(s + p));
    if (p < n) vmx = _mm512_mask_max_ps(vmx, tail_mask(n - p), vmx, _mm512_maskz_loadu_ps(tail_mask(n - p), s + p));
    float mxs = _mm512_reduce_max_ps(vmx);
    if (sink > mxs) mxs = sink;
    const __m512 mx = _mm512_set1_ps(mxs);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (p = 0; p < n; p += 16) {
        const __mmask16 m = tail_mask(n - p);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), mx)));
        _mm512_mask_storeu_ps(s + p, m, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    const __m512d t8 = _mm512_add_pd(lo, hi);
    const __m256d t4 = _mm256_add_pd(_mm512_castpd512_pd256(t8), _mm512_extractf64x4_pd(t8, 1));
    const __m128d t2 = _mm_add_pd(_mm256_castpd256_pd128(t4), _mm256_extractf128_pd(t4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(t2, _mm_unpackhi_pd(t2, t2)));
    if (sink > -INFINITY) sum += (double)expf(sink - mxs);
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (p = 0; p < n; p += 16) {
        const __mmask16 m = tail_mask(n - p);
        _mm512_mask_storeu_ps(s + p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + p), inv));
    }
}

/* q4_0: element j < 16 of a block is the low nibble of qs[j], element 16 + j the high one;
 * (q - 8) * d, one float product per element as the reference */
static void dequant_q4_0(const void *xv, float *y, int64_t n) {
    const struct dj_block_q4_0 *x = xv;
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t ib = 0; ib < n / DJ_QK4_0; ib++, y += DJ_QK4_0) {
        const __m512 d = _mm512_set1_ps(f16_to_f32((const uint8_t *)&x[ib].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)x[ib].qs);
        const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight)), d));
    }
}
static void dequant_bf16(const void *xv, float *y, int64_t n) { /* bf16 -> f32: the bits shifted up */
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_epi32(y + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i)), 16));
    }
}

DJ_KV_ROWS_TO_F32(kv_rows_to_f32_avx512, dequant_f16, dequant_bf16, dequant_q8_0, dequant_q4_0)

bool dj_kernels_init_avx512(struct dj_kernels *k) {
    k->name = "avx512-vnni";
    k->isa = DJ_ISA_AVX512;
    DJ_KERNELS_SET_MATMUL_DOT(k);
    k->w[DJ_TYPE_F16].dequantize_row = dequant_f16;
    k->w[DJ_TYPE_Q8_0].dequantize_row = dequant_q8_0;
    k->w[DJ_TYPE_Q4_0].dequantize_row = dequant_q4_0;
    k->w[DJ_TYPE_TQ1_0].matmul = dj_tq1_0_avx512_matmul; /* quants_avx2.c: the avx2 table's bits */
    k->w[DJ_TYPE_TQ1_0].dot = dj_tq1_0_avx512_dot;
    k->w[DJ_TYPE_IQ4_XS].matmul = dj_iq4_xs_avx512_matmul;
    k->w[DJ_TYPE_IQ4_XS].dot = dj_iq4_xs_avx512_dot;
    k->w[DJ_TYPE_Q5_K].matmul = dj_q5_K_avx512_matmul;
    k->w[DJ_TYPE_Q5_K].dot = dj_q5_K_avx512_dot;
    k->w[DJ_TYPE_Q2_K].matmul = dj_q2_K_avx512_matmul; /* prefill on the VNNI tiles (quants_avx2.c) */
    k->w[DJ_TYPE_Q3_K].matmul = dj_q3_K_avx512_matmul;
    k->w[DJ_TYPE_TQ2_0].matmul = dj_tq2_0_avx512_matmul;
    k->w[DJ_TYPE_IQ2_XXS].matmul = dj_iq2_xxs_avx512_matmul; /* the grid types' decode: gathers */
    k->w[DJ_TYPE_IQ2_XXS].dot = dj_iq2_xxs_avx512_dot;
    k->w[DJ_TYPE_IQ2_XS].matmul = dj_iq2_xs_avx512_matmul;
    k->w[DJ_TYPE_IQ2_XS].dot = dj_iq2_xs_avx512_dot;
    k->w[DJ_TYPE_IQ2_S].matmul = dj_iq2_s_avx512_matmul;
    k->w[DJ_TYPE_IQ2_S].dot = dj_iq2_s_avx512_dot;
    k->w[DJ_TYPE_IQ3_XXS].matmul = dj_iq3_xxs_avx512_matmul;
    k->w[DJ_TYPE_IQ3_XXS].dot = dj_iq3_xxs_avx512_dot;
    k->w[DJ_TYPE_IQ3_S].matmul = dj_iq3_s_avx512_matmul;
    k->w[DJ_TYPE_IQ3_S].dot = dj_iq3_s_avx512_dot;
    k->w[DJ_TYPE_IQ1_S].matmul = dj_iq1_s_avx512_matmul;
    k->w[DJ_TYPE_IQ1_S].dot = dj_iq1_s_avx512_dot;
    k->w[DJ_TYPE_IQ1_M].matmul = dj_iq1_m_avx512_matmul;
    k->w[DJ_TYPE_IQ1_M].dot = dj_iq1_m_avx512_dot;
    DJ_KERNELS_SET_PACKED(k);
    if (k->w[DJ_TYPE_Q4_1].matmul_packed) { /* quants32_avx2.c's packed layout, T_b by VNNI: the same bits */
        k->w[DJ_TYPE_Q4_1].matmul_packed = dj_q4_1_avx512_matmul_packed;
        k->w[DJ_TYPE_Q5_1].matmul_packed = dj_q5_1_avx512_matmul_packed;
        k->w[DJ_TYPE_Q5_0].matmul_packed = dj_q5_0_avx512_matmul_packed;
        k->w[DJ_TYPE_IQ4_NL].matmul_packed = dj_iq4_nl_avx512_matmul_packed;
        k->w[DJ_TYPE_MXFP4].matmul_packed = dj_mxfp4_avx512_matmul_packed;
    }
    pk_pf = dj_kernels_prefetch_distance(pk_pf);
    k->quantize_act[DJ_TYPE_Q8_0] = quant_q8_0;
    k->quantize_act[DJ_TYPE_Q8_K] = quant_q8_K;
    k->attn_scores = attn_scores_avx512;
    k->attn_values = attn_values_avx512;
    k->attn_values_n = attn_values_n_avx512;
    k->attn_softmax = attn_softmax_avx512;
    k->kv_rows_to_f32 = kv_rows_to_f32_avx512;
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_avx512(struct dj_kernels *k) { (void)k; return false; }
#endif
