/*
 * kernels.h — the CPU compute kernels behind one small table of function
 * pointers, chosen once at start-up by CPU feature detection.
 *
 * The central operation is a matrix product of a weight matrix with a batch
 * of activation rows:
 *
 *     C[t][r] = dot(W row r, A row t)      r in [r0, r1), t in [0, n_tok)
 *
 *     w: (n_rows, k), dtype = weight type, rows w_row_bytes apart
 *     a: (n_tok, k),  dtype = dj_kernels_act_type(weight type), rows a_row_bytes apart
 *     c: (n_tok, ldc) float32; only columns [r0, r1) are written
 *
 * A thread pool splits the output rows: each thread calls matmul with its
 * own [r0, r1) (never a part of k).  The activation rows are quantized first,
 * one row at a time, with quantize_act[act_type].
 *
 * Batch invariance (DESIGN.md §3): for a given table, every output element
 * C[t][r] is bitwise identical to dot(w row r, a row t) — whatever n_tok,
 * whatever the position of (r, t) inside the kernel's tiles, whatever
 * [r0, r1).  Each kernel gives every (row, token) pair its own accumulator
 * with one fixed sequence of float operations; tiling only shares the loads
 * and unpacking of a row or a token between pairs.  Integer partial sums are
 * exact.  Different tables (ISAs) round differently; results are
 * reproducible per table, not across tables.
 *
 * Table entries never change after start-up, so the pointers can be cached.
 * DJ_ISA=generic|avx2|avx512|avx512bf16|amx in the environment caps the choice (for tests
 * and comparisons); a request the CPU cannot run falls back to the best it
 * can, with a warning.
 */
#ifndef DJ_KERNELS_KERNELS_H
#define DJ_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ggml_type.h"
#include "kernels/blocks.h"

enum dj_isa {
    DJ_ISA_GENERIC = 0, /* portable C */
    DJ_ISA_AVX2,        /* AVX2 + FMA + F16C (x86-64-v3) */
    DJ_ISA_AVX512,      /* AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4/5) */
    DJ_ISA_AVX512BF16,  /* the above + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4/5): BF16 weights
                           x BF16 activations by vdpbf16ps (kernels_avx512bf16.c) */
    DJ_ISA_AMX,         /* the above + AMX-TILE/AMX-BF16 (Sapphire Rapids and later Xeons): BF16 weights
                           by TDPBF16PS tiles (kernels_amx.c) */
    DJ_ISA_COUNT
};

/* float row x (n elements) -> row y of the table's type (n a multiple of its block). */
typedef void (*dj_quantize_fn)(const float *x, void *y, int64_t n);
/* row x of the table's type -> float row y (n elements). */
typedef void (*dj_dequantize_fn)(const void *x, float *y, int64_t n);
/* dot(weight row w, activation row a) of k elements. */
typedef float (*dj_dot_fn)(int64_t k, const void *w, const void *a);
/* The matrix product above.  k a multiple of the weight's block size. */
typedef void (*dj_matmul_fn)(int64_t k, const void *w, size_t w_row_bytes, const void *a,
                             size_t a_row_bytes, float *c, int64_t ldc, int64_t r0, int64_t r1,
                             int64_t n_tok);

/* Attention over cached keys/values (float32, rows `stride` floats apart):
 *   attn_scores: s[p] = scale * dot(q, K row p), p in [0, n)
 *   attn_values: out[0..hd) = sum over p in order of w[p] * V row p; with
 *                acc, the sum continues from out (a previous call over the
 *                preceding positions), bitwise as if made in one call
 * Each score is one fixed sequence of operations on (q, K row p) alone, and
 * each output lane accumulates positions in order, so a query's result does
 * not depend on which other queries or keys are processed with it, nor on how
 * the cached positions are cut into blocks. */
typedef void (*dj_attn_scores_fn)(int64_t hd, const float *q, const float *k, size_t stride, int64_t n,
                                  float scale, float *s);
typedef void (*dj_attn_values_fn)(int64_t hd, const float *w, const float *v, size_t stride, int64_t n,
                                  float *out, bool acc);
/* attn_values_n: attn_values for nr rows at once (row r: weights w[r], output out[r]),
 * over the same n positions of V: each row's result is bitwise its attn_values. */
typedef void (*dj_attn_values_n_fn)(int64_t hd, int nr, const float *const *w, const float *v, size_t stride,
                                    int64_t n, float *const *out, bool acc);
/* attn_softmax: s[p] = exp(s[p] - max) / sum over p of exp(s[q] - max), p in [0, n),
 * n >= 1: one fixed sequence of operations on the row alone (the generic table: expf
 * and a sum in double in position order; avx512: a 16-lane exp and 16 lanes of double
 * sums, p % 16, combined in a fixed tree).  sink (gpt-oss's attention sinks; -INFINITY:
 * none, bitwise the plain softmax) joins the softmax as one more logit whose
 * probability is dropped, as ggml's soft_max_ext: max = max(max, sink), then
 * exp(sink - max) (expf) added to the double sum after the row's. */
typedef void (*dj_attn_softmax_fn)(float *s, int64_t n, float sink);

/* The kernels of one weight type; all NULL if the table has none for it. */
struct dj_wtype_kernels {
    int act_type;                    /* dj_kernels_act_type(weight type) (the avx512bf16 and
                                        amx tables: BF16 for BF16 weights), or -1 */
    dj_matmul_fn matmul;
    dj_dot_fn dot;                   /* == one element of matmul, bitwise */
    dj_dequantize_fn dequantize_row; /* bitwise equal to dj_ref_dequantize_row */
    /* Repacked weights, for the types whose decode reads faster in a layout of the
     * table's own (NULL where the table keeps the file's layout).  pack writes the
     * 16-row groups [g0, g1) of w (n_rows rows of k elements, ws bytes apart; rows past
     * n_rows repeat the last) to dst + g * 16 * ws, each group 16 * ws bytes: the whole
     * copy is dj_packed_bytes(n_rows, ws), the same bytes as the rows rounded up to 16.
     * It is the table's layout: only this table's matmul_packed reads it.
     * matmul_packed is matmul on that copy (w = its start, w_row_bytes = ws, the
     * original row's bytes; any [r0, r1) and n_tok): bitwise the same results, so
     * bitwise dot (tests/kernels check it).  dst 64-byte aligned. */
    void (*pack)(int64_t k, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, void *dst);
    dj_matmul_fn matmul_packed;
};

/* Bytes of a packed copy of n_rows rows of ws bytes: whole 16-row groups. */
static inline size_t dj_packed_bytes(int64_t n_rows, size_t ws) { return (size_t)((n_rows + 15) / 16) * 16 * ws; }

struct dj_kernels {
    const char *name; /* "generic", "avx2", "avx512-vnni", "avx512-vnni-bf16",
                         "avx512-vnni-amx" */
    enum dj_isa isa;
    struct dj_wtype_kernels w[DJ_TYPE_COUNT];     /* indexed by weight type */
    dj_quantize_fn quantize_act[DJ_TYPE_COUNT];   /* indexed by activation type: F32 (copy),
                                                     F16, BF16, Q8_0, Q8_K; bitwise equal to
                                                     dj_ref_quantize_act */
    dj_attn_scores_fn attn_scores;
    dj_attn_values_fn attn_values;
    dj_attn_values_n_fn attn_values_n;
    dj_attn_softmax_fn attn_softmax;
    /* K/V cache rows to floats: n_rows rows of n elements of a cache type (f32, f16, bf16,
     * q8_0, q4_0), src_stride bytes apart, into dst[n_rows][n]; each row bitwise its
     * dj_ref_dequantize_row (the conversions are exact or one float product per element). */
    void (*kv_rows_to_f32)(uint32_t type, const void *src, size_t src_stride, int64_t n_rows, int64_t n, float *dst);
};

/* The table for this CPU (best ISA it supports, capped by DJ_ISA).  Never NULL. */
const struct dj_kernels *dj_kernels(void);
/* The table of one ISA, or NULL if this CPU (or this build) cannot run it. */
const struct dj_kernels *dj_kernels_for_isa(enum dj_isa isa);
const char *dj_isa_name(enum dj_isa isa); /* "generic", "avx2", "avx512", "avx512bf16", "amx" */

/* How table k runs weight type `type`:
 *   DJ_WPATH_FAST       a kernel of k's own ISA (vectorized for that CPU);
 *   DJ_WPATH_REFERENCE  the generic table's portable C (any CPU; for a type no
 *                       faster table has a kernel for, or when k is the generic table);
 *   DJ_WPATH_NONE       no kernel at all: deja cannot run weights of this type. */
enum dj_wpath { DJ_WPATH_NONE = 0, DJ_WPATH_REFERENCE, DJ_WPATH_FAST };
enum dj_wpath dj_kernels_wpath(const struct dj_kernels *k, uint32_t type);
const char *dj_wpath_name(enum dj_wpath p); /* "fast", "reference", "none" */
/* Why deja cannot run weights of `type` (DJ_WPATH_NONE): one phrase for a message,
 * e.g. "an activation-only type, not a weight type" or "unknown type id". */
const char *dj_kernels_why_not(uint32_t type);

/* Bytes of an activation row of k elements of act_type (k a multiple of its block). */
size_t dj_kernels_act_row_bytes(int act_type, int64_t k);

/* Test hook: with fail != 0, every kernel scratch allocation fails (as when
 * memory is out), in every thread, until called again with 0.  Kernels that
 * repack their operands then take their no-scratch path, which must give the
 * same bits (tests/kernels/test_kernels_scratch.c). */
void dj_kernel_scratch_fail_for_test(int fail);

#endif
