/*
 * cpu_internal.h — what the per-ISA kernel files give the dispatcher, and
 * helpers they share.
 *
 * Each ISA file fills a table: the generic one sets every entry; the AVX2 and
 * AVX-512 ones start from the generic table and override what they speed up
 * (an entry they leave alone keeps the generic kernel, which is itself
 * batch-invariant).  The x86 files are compiled only for their ISA (see
 * CMakeLists.txt) and are called only after dispatch.c has checked the CPU.
 */
#ifndef DJ_KERNELS_CPU_INTERNAL_H
#define DJ_KERNELS_CPU_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "kernels/kernels.h"

void dj_kernels_init_generic(struct dj_kernels *k);
/* Return false when this build has no such kernels (non-x86 targets). */
bool dj_kernels_init_avx2(struct dj_kernels *k);
bool dj_kernels_init_avx512(struct dj_kernels *k);
bool dj_kernels_init_avx512bf16(struct dj_kernels *k);
/* False also when the CPU or Linux refuses AMX (kernels_amx.c). */
bool dj_kernels_init_amx(struct dj_kernels *k);
/* The avx512bf16 table's BF16 x BF16 kernels (vdpbf16ps), which the amx table runs for a
 * k that is not a multiple of 32. */
void dj_bf16x_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                     int64_t r0, int64_t r1, int64_t n_tok);
float dj_bf16x_dot(int64_t k, const void *w, const void *a);
/* AMX (kernels_amx.c, and the AMX-INT8 prefill in kernels_avx512.c): the tile
 * configuration ldtilecfg reads (palette 1), and a compiler barrier.  GCC's tile
 * intrinsics are asm statements without a memory clobber: the compiler does not know that
 * _tile_loadd reads memory or that _tile_stored writes it, and drops or moves the plain
 * stores and loads around them; DJ_AMX_BARRIER() goes on each side. */
struct dj_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
#define DJ_AMX_BARRIER() __asm__ volatile("" ::: "memory")
/* The block step of the AMX-INT8 kernels with q8_0 activations (kernels_avx512.c's q4_0 /
 * q8_0, quants32_avx2.c's 32-element block types): block i's 16 tokens' bytes (aq, as apart)
 * against its B tile (bq: 16 rows' signed levels), TDPBSSD into C tile i % 2 (A 4 + i % 2,
 * B 6 + i % 2); DJ_AMX_Q8_STORE stores C tile i % 2 to isum[i % 2] (int32 [2][16][16]).
 * Macros: the tile intrinsics take their tile numbers as literals. */
#define DJ_AMX_Q8_ISSUE(i, aq, as, bq)           \
    do {                                         \
        if ((i) % 2 == 0) {                      \
            _tile_loadd(4, (aq), (long)(as));    \
            _tile_loadd(6, (bq), 64);            \
            _tile_zero(0);                       \
            _tile_dpbssd(0, 4, 6);               \
        } else {                                 \
            _tile_loadd(5, (aq), (long)(as));    \
            _tile_loadd(7, (bq), 64);            \
            _tile_zero(1);                       \
            _tile_dpbssd(1, 5, 7);               \
        }                                        \
    } while (0)
#define DJ_AMX_Q8_STORE(i, isum)                                   \
    do {                                                           \
        if ((i) % 2 == 0) _tile_stored(0, (isum)[0], 64);          \
        else _tile_stored(1, (isum)[1], 64);                       \
    } while (0)
/* The avx512 table's packed q4_0 / q8_0 matmul with batches of more than 16 tokens on
 * AMX-INT8 (kernels_avx512.c: that file's packed layout and float step, so the same bits);
 * only for a table whose CPU and OS run AMX (kernels_amx.c). */
void dj_q4_0_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok);
void dj_q8_0_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok);
/* The avx512 table's packed q4_K matmul with batches of more than 16 tokens on AMX-INT8
 * (kernels_avx512.c: it runs that file's q4_K float steps, so the same bits); only for a
 * table whose CPU and OS run AMX (kernels_amx.c). */
void dj_q4_K_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                               int64_t r0, int64_t r1, int64_t n_tok);
/* The same for the avx512 table's q6_K matmul (the file's layout: q6_K has no packed one). */
void dj_q6_K_amx_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc,
                        int64_t r0, int64_t r1, int64_t n_tok);
/* Loads the AMX-INT8 kernels' tile configuration (kernels_avx512.c): C tiles 0-3 (rows x
 * 16 int32), A tiles 4-5 (rows x a_colsb bytes), B tiles 6-7 (a_colsb / 4 rows x 64 bytes). */
void dj_amx_int8_config(int rows, int a_colsb);
/* The configuration for rows token rows, loaded only when *cur_rows (the rows configured
 * now; -1 at first) differs. */
static inline void dj_amx_int8_rows(int rows, int a_colsb, int *cur_rows) {
    if (rows == *cur_rows) return;
    dj_amx_int8_config(rows, a_colsb);
    *cur_rows = rows;
}
/* The 16-row group that holds row r of [.., r1): *g0 (r rounded down to 16), and its rows
 * in [r, r1) as bits of the result. */
static inline uint16_t dj_group16(int64_t r, int64_t r1, int64_t *g0) {
    *g0 = r & ~(int64_t)15;
    const int64_t hi = r1 - *g0 < 16 ? r1 - *g0 : 16;
    return (uint16_t)(((1u << hi) - 1) & (0xFFFFu << (r - *g0)));
}
/* The packed matmul of the 32-element block types (quants32_avx2.c), both with that file's
 * packed layout and float steps, so the avx2 table's bits: the avx512 table's (T_b by
 * AVX512-VNNI, 16 rows a vector; also the amx table's batches of up to 16 tokens), and the
 * amx table's batches of more than 16 tokens on AMX-INT8 (only for a table whose CPU and OS
 * run AMX). */
#define DJ_K32_DECL(T)                                                                                            \
    void dj_##T##_avx512_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, \
                                       int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok);                    \
    void dj_##T##_amx_matmul_packed(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c,    \
                                    int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok);
DJ_K32_DECL(q4_1)
DJ_K32_DECL(q5_1)
DJ_K32_DECL(q5_0)
DJ_K32_DECL(iq4_nl)
DJ_K32_DECL(mxfp4)
#undef DJ_K32_DECL
/* The matmul of the super-block types of quants_avx2.c (which the avx512 table inherits)
 * with batches of more than 16 tokens on AMX-INT8: that file's decoders, exact integers and
 * float steps, so the same bits; only for a table whose CPU and OS run AMX. */
#define DJ_KTX_AMX_DECL(T)                                                                                      \
    void dj_##T##_amx_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc, \
                             int64_t r0, int64_t r1, int64_t n_tok);
DJ_KTX_AMX_DECL(q5_K)
DJ_KTX_AMX_DECL(q3_K)
DJ_KTX_AMX_DECL(q2_K)
DJ_KTX_AMX_DECL(iq4_xs)
DJ_KTX_AMX_DECL(iq2_xxs)
DJ_KTX_AMX_DECL(iq2_xs)
DJ_KTX_AMX_DECL(iq2_s)
DJ_KTX_AMX_DECL(iq3_xxs)
DJ_KTX_AMX_DECL(iq3_s)
DJ_KTX_AMX_DECL(iq1_s)
DJ_KTX_AMX_DECL(iq1_m)
DJ_KTX_AMX_DECL(tq1_0)
DJ_KTX_AMX_DECL(tq2_0)
#undef DJ_KTX_AMX_DECL
/* The avx512 table's matmul of super-block types (quants_avx2.c, bitwise the avx2 table's):
 * batches of more than 4 tokens on the AVX-512 VNNI prefill tiles; fewer on the type's
 * AVX-512 decode where it has one (TQ1_0, IQ4_XS, Q5_K and the grid types, which also have
 * an AVX-512 dot), else on the avx2 kernel (Q2_K, Q3_K, TQ2_0).  The tables above avx512
 * inherit them. */
#define DJ_AVX512_MATMUL_DECL(T)                                                                                     \
    void dj_##T##_avx512_matmul(int64_t k, const void *w, size_t ws, const void *a, size_t as, float *c, int64_t ldc, \
                                int64_t r0, int64_t r1, int64_t n_tok);
#define DJ_AVX512_DECODE_DECL(T)                                                                                     \
    DJ_AVX512_MATMUL_DECL(T)                                                                                         \
    float dj_##T##_avx512_dot(int64_t k, const void *w, const void *a);
DJ_AVX512_DECODE_DECL(tq1_0)
DJ_AVX512_DECODE_DECL(iq4_xs)
DJ_AVX512_DECODE_DECL(q5_K)
DJ_AVX512_DECODE_DECL(iq2_xxs)
DJ_AVX512_DECODE_DECL(iq2_xs)
DJ_AVX512_DECODE_DECL(iq2_s)
DJ_AVX512_DECODE_DECL(iq3_xxs)
DJ_AVX512_DECODE_DECL(iq3_s)
DJ_AVX512_DECODE_DECL(iq1_s)
DJ_AVX512_DECODE_DECL(iq1_m)
DJ_AVX512_MATMUL_DECL(q2_K)
DJ_AVX512_MATMUL_DECL(q3_K)
DJ_AVX512_MATMUL_DECL(tq2_0)
#undef DJ_AVX512_DECODE_DECL
#undef DJ_AVX512_MATMUL_DECL
/* The weight types beyond the seven of kernels_*.c (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
 * IQ*, TQ*, MXFP4, NVFP4, Q1_0, Q2_0): quants_generic.c sets their reference-path
 * kernels in the generic table (called by dj_kernels_init_generic); quants_avx2.c
 * overrides the ones it has fast kernels for (called last by dj_kernels_init_avx2, so
 * the AVX-512 table inherits them, less any packed layout). */
void dj_kernels_init_generic_quants(struct dj_kernels *k);
void dj_kernels_init_avx2_quants(struct dj_kernels *k);

/* In an ISA file's init: points the matmul and dot of every weight type at
 * that file's <type>_matmul / <type>_dot; the rest of the table stays what
 * dispatch.c copied in (the table of the ISA below). */
#define DJ_KERNELS_SET_MATMUL_DOT(k)                                                          \
    do {                                                                                      \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_F32, f32);                                             \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_F16, f16);                                             \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_BF16, bf16);                                           \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_Q8_0, q8_0);                                           \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_Q4_0, q4_0);                                           \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_Q4_K, q4_K);                                           \
        DJ_KERNELS_SET_ONE_(k, DJ_TYPE_Q6_K, q6_K);                                           \
    } while (0)
#define DJ_KERNELS_SET_ONE_(k, T, name)                                                       \
    do {                                                                                      \
        (k)->w[T].matmul = name##_matmul;                                                     \
        (k)->w[T].dot = name##_dot;                                                           \
    } while (0)

/* Defines fname, a kv_rows_to_f32 (kernels.h) that converts each row with the ISA file's
 * f16fn / bf16fn / q8fn / q4fn dequantizers (called directly: no table lookup per row), f32
 * by a copy. */
#define DJ_KV_ROWS_TO_F32(fname, f16fn, bf16fn, q8fn, q4fn)                                    \
    static void fname(uint32_t type, const void *src, size_t stride, int64_t nr, int64_t n, float *dst) { \
        const uint8_t *s_ = src;                                                              \
        const size_t row_ = (size_t)n * dj_type_info(type)->bytes / dj_type_info(type)->blck; \
        /* the rows are one head's slices, stride apart: converted one by one, their cache      \
         * misses came one after another; prefetched 8 rows ahead they overlap */               \
        for (int64_t r_ = 0; r_ < nr && r_ < 8; r_++)                                         \
            for (size_t b_ = 0; b_ < row_; b_ += 64) __builtin_prefetch(s_ + (size_t)r_ * stride + b_); \
        for (int64_t r_ = 0; r_ < nr; r_++, s_ += stride, dst += n) {                         \
            if (r_ + 8 < nr)                                                                  \
                for (size_t b_ = 0; b_ < row_; b_ += 64) __builtin_prefetch(s_ + 8 * stride + b_); \
            switch (type) {                                                                   \
            case DJ_TYPE_F16: f16fn(s_, dst, n); break;                                       \
            case DJ_TYPE_BF16: bf16fn(s_, dst, n); break;                                     \
            case DJ_TYPE_Q8_0: q8fn(s_, dst, n); break;                                       \
            case DJ_TYPE_Q4_0: q4fn(s_, dst, n); break;                                       \
            default: memcpy(dst, s_, (size_t)n * sizeof(float)); break;                       \
            }                                                                                 \
        }                                                                                     \
    }

/* In an ISA file's init: q4_0, q8_0 and q4_K get that file's <type>_pack and
 * <type>_matmul_packed (each table's own layout).  The other types keep the pair of the
 * table below, which goes with the matmul and dot they inherit from it too (the avx512
 * table runs quants32_avx2.c's 32-block types, packed layout included). */
#define DJ_KERNELS_SET_PACKED(k)                                                              \
    do {                                                                                      \
        DJ_KERNELS_SET_PACKED_ONE_(k, DJ_TYPE_Q4_0, q4_0);                                    \
        DJ_KERNELS_SET_PACKED_ONE_(k, DJ_TYPE_Q8_0, q8_0);                                    \
        DJ_KERNELS_SET_PACKED_ONE_(k, DJ_TYPE_Q4_K, q4_K);                                    \
    } while (0)
#define DJ_KERNELS_SET_PACKED_ONE_(k, T, name)                                                \
    do {                                                                                      \
        (k)->w[T].pack = name##_pack;                                                         \
        (k)->w[T].matmul_packed = name##_matmul_packed;                                       \
    } while (0)

/* How far ahead (bytes) the AVX2 table's decode kernels prefetch their weight stream
 * (kernels_avx2.c, quants_avx2.c, quants32_avx2.c; set once by dj_kernels_init_avx2). */
extern size_t dj_avx2_pf;

/* How far ahead (bytes) the packed kernels prefetch their stream: DJ_PK_PF from the
 * environment (bench tuning; docs/CONFIG.md), else def. */
static inline size_t dj_kernels_prefetch_distance(size_t def) {
    const char *pf = getenv("DJ_PK_PF");
    return pf ? (size_t)strtoul(pf, NULL, 10) : def;
}

/* A 64-byte-aligned buffer of at least `bytes`, owned by the calling thread
 * (scratch.c): valid until this thread's next call, contents not kept.
 * For kernels that repack an operand once per call and reuse it across a
 * tile loop.  NULL when memory is out (or dj_kernel_scratch_fail_for_test is
 * on): the caller then computes without it, e.g. by dj_matmul_by_dot. */
void *dj_kernel_scratch(size_t bytes);

/* A matmul with no memory of its own: each element by the table's dot of its
 * (row, token) pair, which the batch-invariance contract makes bitwise what the
 * tiled kernel computes (kernels.h; tests/kernels check it).  The dot must need
 * no scratch itself.  Slow (no tiling, no repacking): for when dj_kernel_scratch
 * failed, so that running out of memory costs speed, not the process. */
static inline void dj_matmul_by_dot(dj_dot_fn dot, int64_t k, const void *w, size_t ws, const void *a, size_t as,
                                    float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++)
            c[t * ldc + r] = dot(k, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

/* Unaligned little-endian loads (blocks are 2-byte aligned at best). */
static inline uint16_t dj_load_u16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t dj_load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* A q8_K activation block as the rows-in-lanes q4_K kernels (AVX2, AVX-512) take it: d, and
 * per t the sums of sub-blocks 2t and 2t + 1 as a word pair (bsums of 16 elements summed in
 * pairs; |sum| <= 32 * 127 fits a word). */
struct dj_q8K_tok { float d; int32_t bs2[4]; };
static inline void dj_q8K_prep_tok(int64_t nb, const uint8_t *a, struct dj_q8K_tok *o) {
    for (int64_t b = 0; b < nb; b++) {
        const struct dj_block_q8_K *ab = (const struct dj_block_q8_K *)a + b;
        o[b].d = ab->d;
        for (int t = 0; t < 4; t++) {
            const int s0 = ab->bsums[4 * t] + ab->bsums[4 * t + 1], s1 = ab->bsums[4 * t + 2] + ab->bsums[4 * t + 3];
            o[b].bs2[t] = (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16);
        }
    }
}

/* The 8 scales and 8 mins of a q4_K block as bytes: *sc = sc0..sc7 (byte i =
 * sub-block i), *m likewise (ggml's get_scale_min_k4 for all 8 at once). */
static inline void dj_q4_K_unpack_scales(const uint8_t *scales, uint64_t *sc, uint64_t *m) {
    const uint32_t u0 = dj_load_u32(scales), u1 = dj_load_u32(scales + 4), u2 = dj_load_u32(scales + 8);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *m = (uint64_t)m_lo | ((uint64_t)m_hi << 32);
}

/*
 * The driver every matmul shares: walks tokens in chunks (so a chunk of
 * activations stays in L2 while the weights stream once per chunk), row
 * tiles of up to mr_max rows, then token tiles of up to nt_max tokens, and
 * calls tile(mr, nt, ...) for each.  The tile function must compute each
 * (row, token) element independently of mr and nt — that is the kernel's
 * half of the batch-invariance contract; this loop only decides which
 * elements go together.
 */
typedef void (*dj_tile_fn)(int mr, int nt, int64_t k, const uint8_t *w, size_t ws,
                           const uint8_t *a, size_t as, float *c, int64_t ldc);

/* The drive loop: token chunks of ~256 KiB of activations (half of a
 * 512 KiB..2 MiB L2), and per chunk every row tile over every token tile. */
static inline void dj_matmul_drive(dj_tile_fn tile, int mr_max, int nt_max, int64_t k, const void *w, size_t ws,
                                   const void *a, size_t as, float *c, int64_t ldc, int64_t r0, int64_t r1,
                                   int64_t n_tok) {
    int64_t tok_chunk = (int64_t)((256u << 10) / (as ? as : 1));
    tok_chunk -= tok_chunk % nt_max;
    if (tok_chunk < nt_max) tok_chunk = nt_max;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_chunk) {
        const int64_t t1 = t0 + tok_chunk < n_tok ? t0 + tok_chunk : n_tok;
        for (int64_t r = r0; r < r1; r += mr_max) {
            const int mr = (int)(r1 - r < mr_max ? r1 - r : mr_max);
            for (int64_t t = t0; t < t1; t += nt_max) {
                const int nt = (int)(t1 - t < nt_max ? t1 - t : nt_max);
                tile(mr, nt, k, (const uint8_t *)w + (size_t)r * ws, ws,
                     (const uint8_t *)a + (size_t)t * as, as, c + t * ldc + r, ldc);
            }
        }
    }
}

#endif
