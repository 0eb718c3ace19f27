/*
 * tile.h — instantiating a tile body for every tile shape up to a maximum,
 * for the per-ISA kernel files.
 *
 * A kernel file writes one always-inline body
 *
 *     static inline DJ_ALWAYS_INLINE void NAME_body(const int MR, const int NT,
 *         int64_t k, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
 *         float *c, int64_t ldc);
 *
 * computing the MR x NT outputs c[j*ldc + i] = dot(w row i, a row j), with
 * its loops over i < MR and j < NT marked DJ_UNROLL so that each (i, j)
 * accumulator becomes its own register.  DJ_TILES_MxN(NAME) then defines
 * one function per shape (MR and NT compile-time constants) and
 * NAME_tile(mr, nt, ...) that picks the right one — the dj_tile_fn that
 * dj_matmul_drive (cpu_internal.h) calls.
 */
#ifndef DJ_KERNELS_CPU_TILE_H
#define DJ_KERNELS_CPU_TILE_H

#include "kernels/cpu/cpu_internal.h"

#define DJ_ALWAYS_INLINE __attribute__((always_inline))
/* Full unrolling of the i < MR, j < NT loops is what turns acc[i][j] into registers
 * (clang ignores the GCC spelling and left them in memory: GEMM 2-4x slower). */
#if defined(__clang__)
#define DJ_UNROLL _Pragma("clang loop unroll(full)")
#else
#define DJ_UNROLL _Pragma("GCC unroll 16")
#endif

/* An accumulator kept as one serial chain in a register.  Integer adds are associative,
 * so GCC's reassociation turns a few accumulators fed by many products into a tree of
 * the products, which then no longer fit the 16 ymm registers and spill (AVX2 q4_K
 * prefill: 42 stack accesses in its inner loop, half the speed).  An empty asm that
 * "changes" the register ends that: the value is the same, the order of the integer sum
 * is free anyway.  Use it on integer chains only (a float chain's order is fixed by
 * the source already). */
#define DJ_CHAIN(v) __asm__("" : "+x"(v))

typedef void (*dj_tile_shape_fn)(int64_t k, const uint8_t *w, size_t ws, const uint8_t *a,
                                 size_t as, float *c, int64_t ldc);

#define DJ_TILE_SHAPE(name, M, N)                                                            \
    static void name##_##M##x##N(int64_t k, const uint8_t *w, size_t ws, const uint8_t *a,   \
                                 size_t as, float *c, int64_t ldc) {                         \
        name##_body(M, N, k, w, ws, a, as, c, ldc);                                          \
    }

#define DJ_TILE_PICK(name, MMAX, NMAX)                                                       \
    static void name##_tile(int mr, int nt, int64_t k, const uint8_t *w, size_t ws,          \
                            const uint8_t *a, size_t as, float *c, int64_t ldc) {            \
        name##_tab[mr - 1][nt - 1](k, w, ws, a, as, c, ldc);                                 \
    }                                                                                        \
    enum { name##_MR = MMAX, name##_NT = NMAX };

#define DJ_TILES_2x2(name)                                                                   \
    DJ_TILE_SHAPE(name, 1, 1) DJ_TILE_SHAPE(name, 1, 2)                                      \
    DJ_TILE_SHAPE(name, 2, 1) DJ_TILE_SHAPE(name, 2, 2)                                      \
    static const dj_tile_shape_fn name##_tab[2][2] = {{name##_1x1, name##_1x2},              \
                                                      {name##_2x1, name##_2x2}};             \
    DJ_TILE_PICK(name, 2, 2)

#define DJ_TILES_2x4(name)                                                                   \
    DJ_TILE_SHAPE(name, 1, 1) DJ_TILE_SHAPE(name, 1, 2)                                      \
    DJ_TILE_SHAPE(name, 1, 3) DJ_TILE_SHAPE(name, 1, 4)                                      \
    DJ_TILE_SHAPE(name, 2, 1) DJ_TILE_SHAPE(name, 2, 2)                                      \
    DJ_TILE_SHAPE(name, 2, 3) DJ_TILE_SHAPE(name, 2, 4)                                      \
    static const dj_tile_shape_fn name##_tab[2][4] = {                                       \
        {name##_1x1, name##_1x2, name##_1x3, name##_1x4},                                    \
        {name##_2x1, name##_2x2, name##_2x3, name##_2x4}};                                   \
    DJ_TILE_PICK(name, 2, 4)

#define DJ_TILES_4x2(name)                                                                   \
    DJ_TILE_SHAPE(name, 1, 1) DJ_TILE_SHAPE(name, 1, 2)                                      \
    DJ_TILE_SHAPE(name, 2, 1) DJ_TILE_SHAPE(name, 2, 2)                                      \
    DJ_TILE_SHAPE(name, 3, 1) DJ_TILE_SHAPE(name, 3, 2)                                      \
    DJ_TILE_SHAPE(name, 4, 1) DJ_TILE_SHAPE(name, 4, 2)                                      \
    static const dj_tile_shape_fn name##_tab[4][2] = {                                       \
        {name##_1x1, name##_1x2}, {name##_2x1, name##_2x2},                                  \
        {name##_3x1, name##_3x2}, {name##_4x1, name##_4x2}};                                 \
    DJ_TILE_PICK(name, 4, 2)

#define DJ_TILES_4x4(name)                                                                   \
    DJ_TILE_SHAPE(name, 1, 1) DJ_TILE_SHAPE(name, 1, 2)                                      \
    DJ_TILE_SHAPE(name, 1, 3) DJ_TILE_SHAPE(name, 1, 4)                                      \
    DJ_TILE_SHAPE(name, 2, 1) DJ_TILE_SHAPE(name, 2, 2)                                      \
    DJ_TILE_SHAPE(name, 2, 3) DJ_TILE_SHAPE(name, 2, 4)                                      \
    DJ_TILE_SHAPE(name, 3, 1) DJ_TILE_SHAPE(name, 3, 2)                                      \
    DJ_TILE_SHAPE(name, 3, 3) DJ_TILE_SHAPE(name, 3, 4)                                      \
    DJ_TILE_SHAPE(name, 4, 1) DJ_TILE_SHAPE(name, 4, 2)                                      \
    DJ_TILE_SHAPE(name, 4, 3) DJ_TILE_SHAPE(name, 4, 4)                                      \
    static const dj_tile_shape_fn name##_tab[4][4] = {                                       \
        {name##_1x1, name##_1x2, name##_1x3, name##_1x4},                                    \
        {name##_2x1, name##_2x2, name##_2x3, name##_2x4},                                    \
        {name##_3x1, name##_3x2, name##_3x3, name##_3x4},                                    \
        {name##_4x1, name##_4x2, name##_4x3, name##_4x4}};                                   \
    DJ_TILE_PICK(name, 4, 4)

#define DJ_TILES_ROW4(name, M)                                                               \
    DJ_TILE_SHAPE(name, M, 1) DJ_TILE_SHAPE(name, M, 2) DJ_TILE_SHAPE(name, M, 3) DJ_TILE_SHAPE(name, M, 4)
#define DJ_TILES_ROW6(name, M) DJ_TILES_ROW4(name, M) DJ_TILE_SHAPE(name, M, 5) DJ_TILE_SHAPE(name, M, 6)
#define DJ_TAB_ROW4(name, M) {name##_##M##x1, name##_##M##x2, name##_##M##x3, name##_##M##x4}
#define DJ_TAB_ROW6(name, M)                                                                 \
    {name##_##M##x1, name##_##M##x2, name##_##M##x3, name##_##M##x4, name##_##M##x5, name##_##M##x6}

#define DJ_TILES_6x4(name)                                                                   \
    DJ_TILES_ROW4(name, 1) DJ_TILES_ROW4(name, 2) DJ_TILES_ROW4(name, 3)                     \
    DJ_TILES_ROW4(name, 4) DJ_TILES_ROW4(name, 5) DJ_TILES_ROW4(name, 6)                     \
    static const dj_tile_shape_fn name##_tab[6][4] = {                                       \
        DJ_TAB_ROW4(name, 1), DJ_TAB_ROW4(name, 2), DJ_TAB_ROW4(name, 3),                    \
        DJ_TAB_ROW4(name, 4), DJ_TAB_ROW4(name, 5), DJ_TAB_ROW4(name, 6)};                   \
    DJ_TILE_PICK(name, 6, 4)

#define DJ_TILES_4x6(name)                                                                   \
    DJ_TILES_ROW6(name, 1) DJ_TILES_ROW6(name, 2) DJ_TILES_ROW6(name, 3) DJ_TILES_ROW6(name, 4) \
    static const dj_tile_shape_fn name##_tab[4][6] = {                                       \
        DJ_TAB_ROW6(name, 1), DJ_TAB_ROW6(name, 2), DJ_TAB_ROW6(name, 3), DJ_TAB_ROW6(name, 4)}; \
    DJ_TILE_PICK(name, 4, 6)

/* The matmul and dot of a tiled kernel: dot is the 1x1 tile, so it runs the
 * very code of every element of the matmul.
 *
 * Up to DJ_SMALL_BATCH tokens, the row tiles are GEMV_MR rows high: decode
 * streams the weights from memory.  One row at a time reads them as one
 * sequential stream; measured on a Zen 5 VM, 2048 x 8192, one thread, from
 * 4 KiB pages: q4_0 24 GB/s with one row vs 10-16 GB/s with 4-row tiles (four
 * interleaved streams); q8_0 31 vs 17, q4_K 23 vs 9, q6_K 32 vs 11, f16 28 vs
 * 22.  Since the model copies its matrices into huge pages (model/loader.c),
 * the float types with one fma chain per row take 4 rows: the chain is
 * latency-bound, and 4-row tiles from huge pages measured (bench_kernels
 * --types f16,bf16 --rows 2048 --k 8192, two alternations, 2026-11-27) AVX2
 * f16 21.6-23.3 GB/s vs 10.2-11.6, AVX2 bf16 20.4-21.8 vs 9.8-10.6, AVX-512
 * bf16 23.5-24.7 vs 13.8-16.2 (f32: 31 vs 18, from 4 KiB pages already). */
#define DJ_SMALL_BATCH 2
#define DJ_TILED_KERNEL(name, GEMV_MR)                                                       \
    static void name##_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, \
                              float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) { \
        const int mr = n_tok <= DJ_SMALL_BATCH && GEMV_MR < name##_MR ? GEMV_MR : name##_MR;  \
        dj_matmul_drive(name##_tile, mr, name##_NT, k, w, ws, a, as, c, ldc, r0, r1, n_tok); \
    }                                                                                        \
    static float name##_dot(int64_t k, const void *w, const void *a) {                      \
        float c;                                                                             \
        name##_1x1(k, w, 0, a, 0, &c, 1);                                                    \
        return c;                                                                            \
    }

/* Prefill with k in chunks (the AVX-512 f16 and bf16 kernels past k = 4096): a 6 x 4 tile
 * body NAME_kbody(MR, NT, e, e1, k, w, ws, a, as, accp, first, c, ldc) computes elements
 * [e, e1) of k for its 24 pairs, its 16-lane accumulators coming from accp (64 bytes each,
 * pair (i, j) at accp + 64 * (4 i + j)) unless first, and going back there unless e1 == k,
 * where it stores the results.  A store and reload of the same lanes leaves each pair's
 * chain unchanged, so the results are the unchunked tile's.  DJ_KCHUNK_SHAPES(NAME) makes
 * NAME_ktab[6][4]; dj_matmul_kblocked runs it: token blocks of 128, row blocks of 24 (their
 * accumulators, 24 x 128 x 64 B = 192 KiB, in L2), k chunks of 4096 (measurements: the f16
 * kernel in kernels_avx512.c). */
typedef void (*dj_kchunk_fn)(int64_t e, int64_t e1, int64_t k, const uint8_t *w, size_t ws, const uint8_t *a,
                             size_t as, void *accp, int first, float *c, int64_t ldc);
#define DJ_KCHUNK_SHAPE_(name, M, N)                                                                        \
    static void name##_k##M##x##N(int64_t e, int64_t e1, int64_t k, const uint8_t *w, size_t ws,             \
                                  const uint8_t *a, size_t as, void *accp, int first, float *c, int64_t ldc) { \
        name##_kbody(M, N, e, e1, k, w, ws, a, as, accp, first, c, ldc);                                    \
    }
#define DJ_KCHUNK_ROW_(name, M)                                                                             \
    DJ_KCHUNK_SHAPE_(name, M, 1) DJ_KCHUNK_SHAPE_(name, M, 2) DJ_KCHUNK_SHAPE_(name, M, 3)                  \
    DJ_KCHUNK_SHAPE_(name, M, 4)
#define DJ_KCHUNK_TAB_(name, M) {name##_k##M##x1, name##_k##M##x2, name##_k##M##x3, name##_k##M##x4}
#define DJ_KCHUNK_SHAPES(name)                                                                              \
    DJ_KCHUNK_ROW_(name, 1) DJ_KCHUNK_ROW_(name, 2) DJ_KCHUNK_ROW_(name, 3) DJ_KCHUNK_ROW_(name, 4)          \
    DJ_KCHUNK_ROW_(name, 5) DJ_KCHUNK_ROW_(name, 6)                                                         \
    static const dj_kchunk_fn name##_ktab[6][4] = {DJ_KCHUNK_TAB_(name, 1), DJ_KCHUNK_TAB_(name, 2),        \
                                                   DJ_KCHUNK_TAB_(name, 3), DJ_KCHUNK_TAB_(name, 4),        \
                                                   DJ_KCHUNK_TAB_(name, 5), DJ_KCHUNK_TAB_(name, 6)};
enum { DJ_KBLK_KC = 4096, DJ_KBLK_MC = 24, DJ_KBLK_NC = 128 };
/* The driver; out of scratch memory, dot element by element (the same bits). */
static inline void dj_matmul_kblocked(const dj_kchunk_fn tab[6][4], dj_dot_fn dot, int64_t k, const uint8_t *w,
                                      size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc, int64_t r0,
                                      int64_t r1, int64_t n_tok) {
    const int64_t kc = DJ_KBLK_KC, mc = DJ_KBLK_MC, nc = DJ_KBLK_NC;
    uint8_t *accb = dj_kernel_scratch((size_t)mc * (size_t)nc * 64);
    if (!accb) {
        dj_matmul_by_dot(dot, k, w, ws, a, as, c, ldc, r0, r1, n_tok);
        return;
    }
    for (int64_t tb = 0; tb < n_tok; tb += nc) {
        const int64_t te = tb + nc < n_tok ? tb + nc : n_tok;
        for (int64_t rb = r0; rb < r1; rb += mc) {
            const int64_t re = rb + mc < r1 ? rb + mc : r1;
            for (int64_t e = 0; e < k; e += kc) {
                const int64_t e1 = k - e <= kc ? k : e + kc;
                for (int64_t t = tb; t < te; t += 4) {
                    const int nt = (int)(te - t < 4 ? te - t : 4);
                    for (int64_t r = rb; r < re; r += 6) {
                        const int mr = (int)(re - r < 6 ? re - r : 6);
                        uint8_t *accp = accb + (size_t)((r - rb) / 6 * (nc / 4) + (t - tb) / 4) * 24 * 64;
                        tab[mr - 1][nt - 1](e, e1, k, w + (size_t)r * ws, ws, a + (size_t)t * as, as, accp, e == 0,
                                            c + t * ldc + r, ldc);
                    }
                }
            }
        }
    }
}

/* Prefill with k <= 4096, weight-stationary: a block of ~512 KiB of weight rows stays in
 * L2 while every token tile passes over it (the AVX-512 f16 and bf16 kernels; measured in
 * kernels_avx512.c, f16_matmul).  Only the order of the tiles differs from dj_matmul_drive. */
static inline void dj_matmul_wstationary(dj_tile_fn tile, int mr_max, int nt_max, int64_t k, const uint8_t *w,
                                         size_t ws, const uint8_t *a, size_t as, float *c, int64_t ldc, int64_t r0,
                                         int64_t r1, int64_t n_tok) {
    int64_t mc = (int64_t)((512u << 10) / ws);
    mc -= mc % mr_max;
    if (mc < mr_max) mc = mr_max;
    for (int64_t rb = r0; rb < r1; rb += mc) {
        const int64_t re = rb + mc < r1 ? rb + mc : r1;
        for (int64_t t = 0; t < n_tok; t += nt_max) {
            const int nt = (int)(n_tok - t < nt_max ? n_tok - t : nt_max);
            for (int64_t r = rb; r < re; r += mr_max) {
                const int mr = (int)(re - r < mr_max ? re - r : mr_max);
                tile(mr, nt, k, w + (size_t)r * ws, ws, a + (size_t)t * as, as, c + t * ldc + r, ldc);
            }
        }
    }
}

#endif
