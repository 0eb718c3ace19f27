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
 * holds no tile state between calls (the AMX-INT8 kernels of kernels_avx512.c too).  The
 * process asks Linux for the tile data state
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

#define AMX_BARRIER DJ_AMX_BARRIER /* cpu_internal.h */

/* tiles 0-3: C[tb][rg] = tile tb * 2 + rg; 4, 5: A (token blocks); 6, 7: B (row groups).
 * Token tiles (A and C) get `rows` rows, the weight tiles 16. */
static void amx_config(int rows) {
    _Alignas(64) struct dj_tilecfg c;
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
        if (!b0 || (g + 1 < g1 && !b1)) break; /* cannot happen: group() of a packed copy */
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
    _tile_release();
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
        k->w[DJ_TYPE_Q4_0].matmul_packed && k->w[DJ_TYPE_Q8_0].matmul_packed && k->w[DJ_TYPE_Q4_K].matmul_packed) {
        /* kernels_avx512.c: the avx512 table's packed layouts and float steps, the same bits */
        k->w[DJ_TYPE_Q4_0].matmul_packed = dj_q4_0_amx_matmul_packed;
        k->w[DJ_TYPE_Q8_0].matmul_packed = dj_q8_0_amx_matmul_packed;
        k->w[DJ_TYPE_Q4_K].matmul_packed = dj_q4_K_amx_matmul_packed;
        k->w[DJ_TYPE_Q6_K].matmul = dj_q6_K_amx_matmul;
        /* quants32_avx2.c (inherited by the avx512 table): the same bits */
        if (k->w[DJ_TYPE_Q4_1].matmul_packed && k->w[DJ_TYPE_Q5_0].matmul_packed && k->w[DJ_TYPE_Q5_1].matmul_packed &&
            k->w[DJ_TYPE_IQ4_NL].matmul_packed && k->w[DJ_TYPE_MXFP4].matmul_packed) {
            k->w[DJ_TYPE_Q4_1].matmul_packed = dj_q4_1_amx_matmul_packed;
            k->w[DJ_TYPE_Q5_1].matmul_packed = dj_q5_1_amx_matmul_packed;
            k->w[DJ_TYPE_Q5_0].matmul_packed = dj_q5_0_amx_matmul_packed;
            k->w[DJ_TYPE_IQ4_NL].matmul_packed = dj_iq4_nl_amx_matmul_packed;
            k->w[DJ_TYPE_MXFP4].matmul_packed = dj_mxfp4_amx_matmul_packed;
        }
        /* quants_avx2.c's super-block types (inherited by the avx512 table): the same bits */
        if (k->w[DJ_TYPE_Q5_K].matmul && k->w[DJ_TYPE_TQ2_0].matmul && !k->w[DJ_TYPE_Q5_K].pack) {
            k->w[DJ_TYPE_Q5_K].matmul = dj_q5_K_amx_matmul;
            k->w[DJ_TYPE_Q3_K].matmul = dj_q3_K_amx_matmul;
            k->w[DJ_TYPE_Q2_K].matmul = dj_q2_K_amx_matmul;
            k->w[DJ_TYPE_IQ4_XS].matmul = dj_iq4_xs_amx_matmul;
            k->w[DJ_TYPE_IQ2_XXS].matmul = dj_iq2_xxs_amx_matmul;
            k->w[DJ_TYPE_IQ2_XS].matmul = dj_iq2_xs_amx_matmul;
            k->w[DJ_TYPE_IQ2_S].matmul = dj_iq2_s_amx_matmul;
            k->w[DJ_TYPE_IQ3_XXS].matmul = dj_iq3_xxs_amx_matmul;
            k->w[DJ_TYPE_IQ3_S].matmul = dj_iq3_s_amx_matmul;
            k->w[DJ_TYPE_IQ1_S].matmul = dj_iq1_s_amx_matmul;
            k->w[DJ_TYPE_IQ1_M].matmul = dj_iq1_m_amx_matmul;
            k->w[DJ_TYPE_TQ1_0].matmul = dj_tq1_0_amx_matmul;
            k->w[DJ_TYPE_TQ2_0].matmul = dj_tq2_0_amx_matmul;
        }
    }
    return true;
}

#else /* not x86 */
#include "kernels/cpu/cpu_internal.h"
bool dj_kernels_init_amx(struct dj_kernels *k) { (void)k; return false; }
#endif
