/*
 * ref.h — the scalar reference kernels: the oracle every fast kernel is
 * tested against.  Straightforward loops, never optimized; clarity and
 * exactness over speed.
 *
 * Three families:
 *
 *  - Weight quantizers (float -> F16/BF16 and every type llama-quantize
 *    writes without an importance matrix) that produce the same bytes as
 *    llama-quantize: ggml's quantize_row_*_ref (quantize_iq4_{nl,xs} for
 *    the iq4 types; quantize_ref.c says which per type).  Same float
 *    operations in the same order, same rounding helpers; this is what
 *    lets `deja quantize` reproduce llama.cpp's files and perplexities.
 *  - Dequantizers (type -> float), the same float formulas as ggml's
 *    dequantize_row_* (so a fast dequantizer must match them bit for bit).
 *  - Activation quantizers and dot products.  Each weight type is paired
 *    with one activation type (DJ_KERNELS_ACT_TYPE below); the reference dot
 *    computes the exact mathematical dot product of the dequantized weight
 *    row with the dequantized activation row, accumulated in double.
 *
 * Activation quantization (deja's definition; both are per row, so a token's
 * quantized activations never depend on the rest of the batch):
 *   q8_0: amax = max|x|, d = amax/127, q = round-half-even(x * (127/amax)),
 *         d stored as f16 — the formula of ggml's x86 quantize_row_q8_0.
 *   q8_K: ggml's quantize_row_q8_K_ref (scale -127/max where max is the
 *         first element of largest magnitude, round-half-even, clamp 127),
 *         except that an all-zero block also gets zero bsums.
 *
 * Sizes: n (elements per row) must be a multiple of the type's block size;
 * callers assert it.
 */
#ifndef DJ_KERNELS_REF_H
#define DJ_KERNELS_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/blocks.h"

/* ---- weight quantizers (llama.cpp-identical bytes) ------------------------ */
void dj_ref_quantize_row_f16(const float *x, uint16_t *y, int64_t n);
void dj_ref_quantize_row_bf16(const float *x, uint16_t *y, int64_t n);
void dj_ref_quantize_row_q8_0(const float *x, struct dj_block_q8_0 *y, int64_t n);
void dj_ref_quantize_row_q4_0(const float *x, struct dj_block_q4_0 *y, int64_t n);
void dj_ref_quantize_row_q4_K(const float *x, struct dj_block_q4_K *y, int64_t n);
void dj_ref_quantize_row_q6_K(const float *x, struct dj_block_q6_K *y, int64_t n);
void dj_ref_quantize_row_q4_1(const float *x, struct dj_block_q4_1 *y, int64_t n);
void dj_ref_quantize_row_q5_0(const float *x, struct dj_block_q5_0 *y, int64_t n);
void dj_ref_quantize_row_q5_1(const float *x, struct dj_block_q5_1 *y, int64_t n);
void dj_ref_quantize_row_q1_0(const float *x, struct dj_block_q1_0 *y, int64_t n);
void dj_ref_quantize_row_q2_0(const float *x, struct dj_block_q2_0 *y, int64_t n);
void dj_ref_quantize_row_mxfp4(const float *x, struct dj_block_mxfp4 *y, int64_t n);
void dj_ref_quantize_row_q2_K(const float *x, struct dj_block_q2_K *y, int64_t n);
void dj_ref_quantize_row_q3_K(const float *x, struct dj_block_q3_K *y, int64_t n);
void dj_ref_quantize_row_q5_K(const float *x, struct dj_block_q5_K *y, int64_t n);
void dj_ref_quantize_row_tq1_0(const float *x, struct dj_block_tq1_0 *y, int64_t n);
void dj_ref_quantize_row_tq2_0(const float *x, struct dj_block_tq2_0 *y, int64_t n);
void dj_ref_quantize_row_iq4_nl(const float *x, struct dj_block_iq4_nl *y, int64_t n);
void dj_ref_quantize_row_iq4_xs(const float *x, struct dj_block_iq4_xs *y, int64_t n);
void dj_ref_quantize_row_iq3_s(const float *x, struct dj_block_iq3_s *y, int64_t n);
/* By type id: F32 (copy), F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q1_0,
 * Q2_0, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ1_0, TQ2_0, IQ4_NL, IQ4_XS,
 * IQ3_S.  False for any other type (the importance-matrix IQ1/IQ2/IQ3_XXS
 * types) or an
 * n that is not a multiple of the block size. */
bool dj_ref_quantize_row(uint32_t type, const float *x, void *y, int64_t n);

/* ---- activation quantizers ------------------------------------------------ */
void dj_ref_quantize_act_q8_0(const float *x, struct dj_block_q8_0 *y, int64_t n);
void dj_ref_quantize_act_q8_K(const float *x, struct dj_block_q8_K *y, int64_t n);
/* F32 -> activation type of `act_type` (F32 copy, F16, BF16 (dj_f32_to_bf16), Q8_0, Q8_K). */
bool dj_ref_quantize_act(uint32_t act_type, const float *x, void *y, int64_t n);

/* ---- dequantizers --------------------------------------------------------- */
/* F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K and the types of ref_quants.c (below).
 * False for other types. */
bool dj_ref_dequantize_row(uint32_t type, const void *x, float *y, int64_t n);

/* ---- dot products --------------------------------------------------------- */
/* Exact dot product (in double) of weight row w (n elements of wtype) and
 * activation row a (n elements of dj_kernels_act_type(wtype)).  Also returns,
 * in *mag if not NULL, the sum of the magnitudes of the terms a float kernel
 * adds up (|w_i a_i| for plain types; |d sc q a| + |dmin m a| for q4_K), the
 * scale of its rounding error (the other types with a min or an IQ1 delta
 * likewise: ref_quants.c). */
double dj_ref_dot(uint32_t wtype, int64_t n, const void *w, const void *a, double *mag);
/* dj_ref_dot with the activation type given: a table's own pairing (kernels.h act_type):
 * dj_kernels_act_type(wtype), or BF16 for BF16 weights (the avx512bf16 and amx tables). */
double dj_ref_dot_act(uint32_t wtype, uint32_t act_type, int64_t n, const void *w, const void *a, double *mag);

/* ---- the other weight types (ref_quants.c: formulas and provenance there) --------- */
/* Row dequantizers (n a multiple of the type's block), bitwise ggml's dequantize_row_*;
 * dj_ref_dequantize_row calls them for these types. */
typedef void (*dj_ref_dequantize_fn)(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q4_1(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q5_0(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q5_1(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q2_K(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q3_K(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q5_K(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq1_s(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq1_m(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq2_xxs(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq2_xs(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq2_s(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq3_xxs(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq3_s(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq4_nl(const void *x, float *y, int64_t n);
void dj_ref_dequantize_iq4_xs(const void *x, float *y, int64_t n);
void dj_ref_dequantize_mxfp4(const void *x, float *y, int64_t n);
void dj_ref_dequantize_nvfp4(const void *x, float *y, int64_t n);
void dj_ref_dequantize_tq1_0(const void *x, float *y, int64_t n);
void dj_ref_dequantize_tq2_0(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q1_0(const void *x, float *y, int64_t n);
void dj_ref_dequantize_q2_0(const void *x, float *y, int64_t n);
/* The dequantizer of one of these types; NULL for any other type. */
dj_ref_dequantize_fn dj_ref_quants_dequantizer(uint32_t type);
/* dj_ref_dot for these types (asserts on any other). */
double dj_ref_dot_quants(uint32_t wtype, int64_t n, const void *w, const void *a, double *mag);

#endif
