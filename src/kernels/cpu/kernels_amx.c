/*
 * kernels_amx.c — the amx table: the avx512bf16 table with BF16 weights multiplied
 * by Intel AMX tiles (AMX-TILE + AMX-BF16: Sapphire Rapids and later Xeons).
 *
 * BF16 weights pair with BF16 activations (quantize_act[BF16] of kernels_avx512bf16.c,
 * rounded to nearest even as ggml).  For k a multiple of 32, every (row, token) output
 * is one TDPBF16PS accumulator element carried over the k / 32 tiles of k in order:
 *
 *     C (16 tokens x 16 rows, f32) = 0
 *     for t = 0 .. k/32 - 1:  C += A[tokens][32 t .. 32 t + 32) x B_t
 *
 * where B_t holds the 16 rows' elements 32 t .. 32 t + 32 as 16 pairs per row (the
 * "VNNI" layout TDPBF16PS reads: tile row p = the pairs (2p, 2p + 1) of the 16 weight
 * rows).  How the hardware rounds inside one TDPBF16PS is not what Intel's pseudocode
 * shows (two round-to-nearest-even adds per pair: measured on this Xeon, 82 % of the
 * outputs differ from it, and from one rounding per pair or per tile), so the result
 * is defined by the instruction itself, and the only way to reproduce it is to run
 * it.  What makes this batch-invariant is measured too and tested
 * (tests/kernels/test_kernels.c, test_kernels_packed.c): an element depends only on
 * its token's row of A and its weight row's column of B — not on the other rows and
 * columns of the tiles, nor on the number of tile rows configured (a 1-row tile gives
 * the bits of row m of a 16-row one).  So decode, prefill, any token split and the
 * 1 x 1 dot all run TDPBF16PS over the same tiles of k in the same order.
 *
 * k not a multiple of 32 (no released model has such a BF16 row): the avx512bf16
 * table's vdpbf16ps kernel, for decode and prefill alike.
 *
 * Layout (pack): a 16-row group is k / 32 tiles of 1 KiB, tile t = 16 pairs x 16 rows x
 * 2 bf16: the group's 16 * 2k bytes, as the rows themselves (kernels.h).  The engine
 * keeps its weights in this layout (model/loader.c); matmul on the file's rows packs
 * one group pair at a time into scratch (or, out of memory, runs dot per element).
 *
 * Per call: ldtilecfg (tiles 0-3 the 16 x 16 f32 accumulators of 2 token blocks x 2
 * row groups, 4-5 the token blocks, 6-7 the row groups; a last block of fewer than 16
 * tokens gets a config with that many rows) and tilerelease at the end, so a thread
 * holds no tile state between calls.  The process asks Linux for the tile data state
 * once (arch_prctl ARCH_REQ_XCOMP_PERM); if refused, there is no amx table.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/tile.h"

/* GCC's tile intrinsics are asm statements without a memory clobber: the compiler does
 * not know that _tile_loadd reads memory or that _tile_stored writes it, and drops or
 * moves the plain stores and loads around them.  A barrier on each side. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")

struct tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* tiles 0-3: C[tb][rg] = tile tb * 2 + rg; 4, 5: A (token blocks); 6, 7: B (row groups).
 * Token tiles (A and C) get `rows` rows, the weight tiles 16. */
static void amx_config(int rows) {
    _Alignas(64) struct tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = (uint8_t)(t < 6 ? rows : 16);
    }
    AMX_BARRIER();
    _tile_loadconfig(&c);
}

/* One group of 16 weight rows (rows past n_rows: the last one again) -> the tile layout. */
static void pack_group(int64_t k, const uint8_t *w, size_t ws, int64_t n_rows, int64_t g, uint8_t *dst) {
    const uint16_t *row[16];
    for (int i = 0; i < 16; i++) {
        const int64_t r = 16 * g + i < n_rows ? 16 * g + i : n_rows - 1;
        row[i] = (const uint16_t *)(w + (size_t)r * ws);
    }
    uint32_t *o = (uint32_t *)dst;
    for (int64_t p = 0; p < k / 2; p++)
        for (int i = 0; i < 16; i++) {
            uint32_t v;
            memcpy(&v, row[i] + 2 * p, 4);
            *o++ = v;
        }
}

/* Tokens [t, t + nt) (nt <= 32, the tiles' rows configured: min(nt, 16) for the first
 * block) against the packed groups b0 and b1 (b1 NULL: one group); outputs of the
 * columns [c0, c1) of each group (0 <= c0 < c1 <= 16) go to c + tok * ldc + col0 + col. */
enum { PF_TILES = 4 };
static void amx_tile_pair(int64_t k, const uint8_t *a, size_t as, int nt, const uint8_t *b0, const uint8_t *b1,
                          float *c, int64_t ldc, int c0[2], int c1[2]) {
    float out[4][16][16];
    const int nb = nt > 16 ? 2 : 1;
    const int64_t nk = k / 32;
    AMX_BARRIER();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint8_t *a1 = a + 16 * as;
    if (nb == 2 && b1) {
        for (int64_t t = 0; t < nk; t++) {
            _tile_loadd(4, a + 64 * t, (long)as);
            _tile_loadd(5, a1 + 64 * t, (long)as);
            _tile_loadd(6, b0 + 1024 * t, 64);
            _tile_loadd(7, b1 + 1024 * t, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else if (nb == 2) {
        for (int64_t t = 0; t < nk; t++) {
            _tile_loadd(4, a + 64 * t, (long)as);
            _tile_loadd(5, a1 + 64 * t, (long)as);
            _tile_loadd(6, b0 + 1024 * t, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(2, 5, 6);
        }
    } else if (b1) { /* decode: the weights stream from memory, prefetched ahead */
        for (int64_t t = 0; t < nk; t++) {
            for (int l = 0; l < 1024; l += 64) {
                _mm_prefetch((const char *)b0 + 1024 * (t + PF_TILES) + l, _MM_HINT_T0);
                _mm_prefetch((const char *)b1 + 1024 * (t + PF_TILES) + l, _MM_HINT_T0);
            }
            _tile_loadd(4, a + 64 * t, (long)as);
            _tile_loadd(6, b0 + 1024 * t, 64);
            _tile_loadd(7, b1 + 1024 * t, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
    } else {
        for (int64_t t = 0; t < nk; t++) {
            _tile_loadd(4, a + 64 * t, (long)as);
            _tile_loadd(6, b0 + 1024 * t, 64);
            _tile_dpbf16ps(0, 4, 6);
        }
    }
    _tile_stored(0, out[0], 64);
    if (b1) _tile_stored(1, out[1], 64);
    if (nb == 2) {
        _tile_stored(2, out[2], 64);
        if (b1) _tile_stored(3, out[3], 64);
    }
    AMX_BARRIER();
    for (int tb = 0; tb < nb; tb++) {
        const int rows = tb == 0 ? (nt < 16 ? nt : 16) : nt - 16;
        for (int rg = 0; rg < (b1 ? 2 : 1); rg++)
            for (int m = 0; m < rows; m++)
                memcpy(c + (16 * tb + m) * ldc + 16 * rg + c0[rg], &out[tb * 2 + rg][m][c0[rg]],
                       sizeof(float) * (size_t)(c1[rg] - c0[rg]));
    }
}

/* Rows [r0, r1) x n_tok tokens, the weights' groups from group(g) (packed, 16 * ws bytes). */
typedef const uint8_t *(*group_fn)(void *ctx, int64_t g);
static void amx_matmul_groups(int64_t k, group_fn group, void *gctx, const uint8_t *a, size_t as, float *c,
                              int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    const int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16;
    int cur_rows = -1;
    for (int64_t g = g0; g < g1; g += 2) {
        const uint8_t *b0 = group(gctx, g), *b1 = g + 1 < g1 ? group(gctx, g + 1) : NULL;
        if (!b0 || (g + 1 < g1 && !b1)) return; /* cannot happen: group() of a packed copy */
        int c0[2], c1[2];
        for (int rg = 0; rg < 2; rg++) {
            const int64_t lo = 16 * (g + rg), hi = lo + 16;
            c0[rg] = (int)((r0 > lo ? r0 : lo) - lo);
            c1[rg] = (int)((r1 < hi ? r1 : hi) - lo);
        }
        for (int64_t t = 0; t < n_tok; t += 32) {
            const int nt = (int)(n_tok - t < 32 ? n_tok - t : 32);
            const int rows = nt < 16 ? nt : 16;
            if (rows != cur_rows) {
                amx_config(rows);
                cur_rows = rows;
            }
            if (nt > 16 && nt < 32) { /* the second block has fewer rows: one block at a time */
                amx_tile_pair(k, a + (size_t)t * as, as, 16, b0, b1, c + t * ldc + 16 * g, ldc, c0, c1);
                amx_config(nt - 16);
                cur_rows = nt - 16;
                amx_tile_pair(k, a + (size_t)(t + 16) * as, as, nt - 16, b0, b1, c + (t + 16) * ldc + 16 * g, ldc,
                              c0, c1);
            } else {
                amx_tile_pair(k, a + (size_t)t * as, as, nt, b0, b1, c + t * ldc + 16 * g, ldc, c0, c1);
            }
        }
    }
}

struct packed_ctx {
    const uint8_t *w;
    size_t gbytes;
};
static const uint8_t *packed_group(void *ctx, int64_t g) {
    const struct packed_ctx *p = ctx;
    return p->w + (size_t)g * p->gbytes;
}

struct file_ctx {
    int64_t k, n_rows, slot_g[2];
    const uint8_t *w;
    size_t ws;
    uint8_t *buf; /* two groups */
};
static const uint8_t *file_group(void *ctx, int64_t g) { /* packs groups g, g + 1 as they are asked for */
    struct file_ctx *f = ctx;
    const int s = (int)(g & 1);
    uint8_t *dst = f->buf + (size_t)s * 16 * f->ws;
    if (f->slot_g[s] != g) {
        pack_group(f->k, f->w, f->ws, f->n_rows, g, dst);
        f->slot_g[s] = g;
    }
    return dst;
}

static float amx_dot(int64_t k, const void *w, const void *a);

/* The matmul on the packed copy.  n_rows of the whole matrix is not known here: the
 * copy has whole groups (rows past the matrix: the last one again), so every group
 * asked for exists. */
static void amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                              int64_t r0, int64_t r1, int64_t n_tok) {
    if (k % 32) { /* packed = the rows as they are (amx_pack) */
        dj_bf16x_matmul(k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    struct packed_ctx p = {w, 16 * ws};
    amx_matmul_groups(k, packed_group, &p, a, as, c, ldc, r0, r1, n_tok);
}

/* The matmul on the file's rows: groups packed into scratch on the way. */
static void amx_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                       int64_t r0, int64_t r1, int64_t n_tok) {
    if (k % 32) {
        dj_bf16x_matmul(k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    uint8_t *buf = dj_kernel_scratch(2 * 16 * ws);
    if (!buf) { /* out of memory: the same bits, element by element */
        dj_matmul_by_dot(amx_dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    /* rows past r1 only fill the tiles' columns that are not written: any row will do */
    struct file_ctx f = {k, r1, {-1, -1}, w, ws, buf};
    amx_matmul_groups(k, file_group, &f, a, as, c, ldc, r0, r1, n_tok);
}

/* One row x one token: a 1-row token tile, the weight row in column 0 of each B tile
 * (the other columns zero: they only make outputs that are not read). */
static float amx_dot(int64_t k, const void *w, const void *a) {
    if (k % 32) return dj_bf16x_dot(k, w, a);
    _Alignas(64) uint32_t b[16][16];
    float out[16][16];
    memset(b, 0, sizeof b);
    amx_config(1);
    _tile_zero(0);
    for (int64_t t = 0; t < k / 32; t++) {
        for (int p = 0; p < 16; p++) memcpy(&b[p][0], (const uint8_t *)w + 2 * (32 * t + 2 * p), 4);
        AMX_BARRIER();
        _tile_loadd(4, (const uint8_t *)a + 64 * t, 64);
        _tile_loadd(6, b, 64);
        _tile_dpbf16ps(0, 4, 6);
        AMX_BARRIER(); /* b is rewritten only after the load */
    }
    _tile_stored(0, out, 64);
    AMX_BARRIER();
    _tile_release();
    return out[0][0];
}

static void amx_pack(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst) {
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * 16 * ws;
        if (k % 32 == 0) {
            pack_group(k, w, ws, n_rows, g, o);
        } else { /* the rows as they are, the last one repeated */
            for (int i = 0; i < 16; i++) {
                const int64_t r = 16 * g + i < n_rows ? 16 * g + i : n_rows - 1;
                memcpy(o + (size_t)i * ws, (const uint8_t *)w + (size_t)r * ws, ws);
            }
        }
    }
}

/* ---- q4_0 and q8_0 prefill by AMX-INT8: bitwise the avx512 table's ------------------
 *
 * The avx512 table's packed q4_0 / q8_0 (kernels_avx512.c) computes, per (row, token)
 * pair and block b in order,
 *
 *     acc = fma(float(isum_b), d_w[b] * d_a[b], acc)
 *
 * with isum_b the exact integer dot of the block — made by vpdpbusd from unsigned weight
 * bytes (q4_0: the nibbles, w + 8; q8_0: w ^ 0x80 = w + 128) and a start of
 * -8 (-128) * sum(a).  A block's packed quants of 16 rows are 8 vectors whose vector j
 * holds, in lane i, row i's elements 4j .. 4j + 3 (q4_0: 4 vectors of both nibbles):
 * the B tile layout (8 rows of 16 columns x 4 bytes).  Per 16-row group the blocks are
 * turned back into signed bytes once (q4_0 nibble - 8, q8_0 ^ 0x80) for all the
 * tokens; with the tokens' q8_0 bytes as the A tile (16 tokens x 32 bytes, straight
 * from the activation rows), one TDPBSSD gives the 16 x 16 integer dots of the block,
 * exact in int32 whatever the hardware's order — the avx512 kernel's corrected sums;
 * the epilogue then runs the same float operations as its q16_fma.  So the results are the avx512 table's bits, and the
 * amx table uses this for prefill batches only (more than AMXQ_MIN tokens), the avx512
 * kernels for the rest. */
enum { AMXQ_MIN = 16 };

static dj_matmul_fn q4_0_packed_avx512, q8_0_packed_avx512; /* the table's own below AMXQ_MIN */

static void amxq_config(int rows) {
    _Alignas(64) struct tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) { /* C: tokens x 16 int32 */
        c.rows[t] = (uint8_t)rows;
        c.colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) { /* A: tokens x 32 bytes (one block); even blocks 4, odd 5 */
        c.rows[t] = (uint8_t)rows;
        c.colsb[t] = 32;
    }
    for (int t = 6; t < 8; t++) { /* B: 8 rows of 4-byte groups x 16 weight rows; even 6, odd 7 */
        c.rows[t] = 8;
        c.colsb[t] = 64;
    }
    AMX_BARRIER();
    _tile_loadconfig(&c);
}

/* Packed group layout of kernels_avx512.c (q16p_q, q16p_d): blocks in pairs, the pair's
 * quants (q4_0 256, q8_0 512 bytes a block) then each block's 16 f16 scales. */
static inline size_t amxq_wbs(int q8) { return q8 ? 34 : 18; }
static inline size_t amxq_qbytes(int q8) { return q8 ? 512 : 256; }
static inline const uint8_t *amxq_q(int q8, const uint8_t *g, int64_t b) {
    return g + (size_t)(b / 2) * 2 * 16 * amxq_wbs(q8) + (size_t)(b % 2) * amxq_qbytes(q8);
}
static inline const uint8_t *amxq_d(int q8, const uint8_t *g, int64_t b, int64_t nb) {
    const size_t nq = (b | 1) < nb ? 2 : 1;
    return g + (size_t)(b / 2) * 2 * 16 * amxq_wbs(q8) + nq * amxq_qbytes(q8) + (size_t)(b % 2) * 32;
}

/* One block's float step for 16 tokens (lanes: the 16 rows), as q16_fma. */
static inline DJ_ALWAYS_INLINE void amxq_epilogue(const int32_t isum[16][16], __m512 dw, const float *td, int64_t nb,
                                                   __m512 acc[16]) {
    DJ_UNROLL for (int t = 0; t < 16; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[t])),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(td[t * nb])), acc[t]);
}

static void amxq_matmul(const int q8, int64_t k, const void *wv, size_t ws, const void *av, size_t as, float *c,
                        int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    const dj_matmul_fn own = q8 ? q8_0_packed_avx512 : q4_0_packed_avx512;
    const int64_t nb = k / 32, ntp = (n_tok + 15) / 16 * 16;
    const size_t td_bytes = ((size_t)ntp * (size_t)nb * sizeof(float) + 63) & ~(size_t)63;
    uint8_t *scr = n_tok > AMXQ_MIN ? dj_kernel_scratch(td_bytes + (size_t)nb * 512) : NULL;
    if (!scr) { /* a small batch, or out of memory: the avx512 kernel, the same bits */
        own(k, wv, ws, av, as, c, ldc, r0, r1, n_tok);
        return;
    }
    const uint8_t *w = wv, *a = av;
    float *td = (float *)scr;  /* the tokens' block scales (0 past n_tok) */
    uint8_t *ub = scr + td_bytes; /* a group's blocks as signed bytes, in the B tile layout */
    for (int64_t t = 0; t < ntp; t++)
        for (int64_t b = 0; b < nb; b++)
            td[t * nb + b] = t < n_tok ? _cvtsh_ss(((const struct dj_block_q8_0 *)(a + (size_t)t * as) + b)->d) : 0.0f;
    _Alignas(64) int32_t isum[2][16][16];
    int cur_rows = -1;
    for (int64_t r = r0; r < r1;) {
        const int64_t g0 = r & ~(int64_t)15, hi = r1 - g0 < 16 ? r1 - g0 : 16;
        const __mmask16 m = (__mmask16)(((1u << hi) - 1) & (0xFFFFu << (r - g0)));
        const uint8_t *wg = w + (size_t)g0 * ws;
        r = g0 + 16;
        /* the signed weights: q4_0 nibble - 8, q8_0 (w ^ 0x80) ^ 0x80; TDPBSSD then sums the
         * block's products directly, the same integer as the avx512 kernel's corrected sum */
        if (q8) {
            const __m512i x80 = _mm512_set1_epi8((char)0x80);
            for (int64_t b = 0; b < nb; b++) {
                const __m512i *v = (const __m512i *)amxq_q(1, wg, b);
                __m512i *o = (__m512i *)(ub + (size_t)b * 512);
                for (int j = 0; j < 8; j++) _mm512_store_si512(o + j, _mm512_xor_si512(_mm512_loadu_si512(v + j), x80));
            }
        } else {
            const __m512i m4 = _mm512_set1_epi8(0x0F), e8 = _mm512_set1_epi8(8);
            for (int64_t b = 0; b < nb; b++) {
                const __m512i *v = (const __m512i *)amxq_q(0, wg, b);
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
            if (nt != cur_rows) {
                amxq_config(nt);
                cur_rows = nt;
            }
            const uint8_t *at = a + (size_t)t * as + 2;
            const float *tt = td + t * nb;
            __m512 acc[16];
            DJ_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            AMX_BARRIER();
            /* block b's sums into tile b % 2 (its operands in tiles 4 + b % 2, 6 + b % 2, so the
             * loads of b + 1 do not wait for b's product), stored while the next block's are made */
            for (int64_t b = 0; b <= nb; b++) {
                if (b < nb) {
                    const uint8_t *bq = ub + (size_t)b * 512, *aq = at + (size_t)b * sizeof(struct dj_block_q8_0);
                    if (b % 2 == 0) {
                        _tile_loadd(4, aq, (long)as);
                        _tile_loadd(6, bq, 64);
                        _tile_zero(0);
                        _tile_dpbssd(0, 4, 6);
                    } else {
                        _tile_loadd(5, aq, (long)as);
                        _tile_loadd(7, bq, 64);
                        _tile_zero(1);
                        _tile_dpbssd(1, 5, 7);
                    }
                }
                if (b > 0) {
                    const int64_t pb = b - 1;
                    if (pb % 2 == 0) _tile_stored(0, isum[0], 64);
                    else _tile_stored(1, isum[1], 64);
                    AMX_BARRIER();
                    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)amxq_d(q8, wg, pb, nb)));
                    amxq_epilogue((const int32_t(*)[16])isum[pb % 2], dw, tt + pb, nb, acc);
                }
            }
            for (int j = 0; j < nt; j++) _mm512_mask_storeu_ps(c + (t + j) * ldc + g0, m, acc[j]);
        }
    }
}
static void amx_q4_0_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,
                                   int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    amxq_matmul(0, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}
static void amx_q8_0_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,
                                   int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    amxq_matmul(1, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
}

/* AMX-TILE and AMX-BF16 (CPUID.7.0:EDX bits 24, 22), the tile state enabled by the OS
 * (XCR0 bits 17-18), and Linux's permission to use it. */
static bool amx_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1) || !((d >> 22) & 1)) return false;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
    if ((xcr0 & (3u << 17)) != (3u << 17)) return false;
#ifdef SYS_arch_prctl
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false;
#endif
}

bool dj_kernels_init_amx(struct dj_kernels *k) {
    if (!amx_available()) return false;
    k->name = "avx512-vnni-amx";
    k->isa = DJ_ISA_AMX;
    k->w[DJ_TYPE_BF16].act_type = DJ_TYPE_BF16;
    k->w[DJ_TYPE_BF16].matmul = amx_matmul;
    k->w[DJ_TYPE_BF16].dot = amx_dot;
    k->w[DJ_TYPE_BF16].pack = amx_pack;
    k->w[DJ_TYPE_BF16].matmul_packed = amx_matmul_packed;
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 25) & 1) /* AMX-INT8 */ &&
        k->w[DJ_TYPE_Q4_0].matmul_packed && k->w[DJ_TYPE_Q8_0].matmul_packed) {
        q4_0_packed_avx512 = k->w[DJ_TYPE_Q4_0].matmul_packed;
        q8_0_packed_avx512 = k->w[DJ_TYPE_Q8_0].matmul_packed;
        k->w[DJ_TYPE_Q4_0].matmul_packed = amx_q4_0_matmul_packed;
        k->w[DJ_TYPE_Q8_0].matmul_packed = amx_q8_0_matmul_packed;
        if (k->w[DJ_TYPE_Q4_K].matmul_packed) k->w[DJ_TYPE_Q4_K].matmul_packed = dj_q4_K_amx_matmul_packed;
        k->w[DJ_TYPE_Q6_K].matmul = dj_q6_K_amx_matmul;
    }
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_amx(struct dj_kernels *k) { (void)k; return false; }
#endif
