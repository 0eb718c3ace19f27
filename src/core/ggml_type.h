/*
 * ggml_type.h — the tensor element types of the GGUF/ggml format: their ids as
 * stored in files, block size (elements per block) and block bytes.
 *
 * This is the size table only: enough for the GGUF reader to validate tensor
 * byte sizes and for the writer to lay them out.  Block layouts (struct
 * definitions) and kernels live in src/kernels.  Ids that ggml retired (4, 5,
 * 31-33, 36-38) are reported as unknown.
 */
#ifndef DJ_CORE_GGML_TYPE_H
#define DJ_CORE_GGML_TYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dj_ggml_type {
    DJ_TYPE_F32 = 0,
    DJ_TYPE_F16 = 1,
    DJ_TYPE_Q4_0 = 2,
    DJ_TYPE_Q4_1 = 3,
    DJ_TYPE_Q5_0 = 6,
    DJ_TYPE_Q5_1 = 7,
    DJ_TYPE_Q8_0 = 8,
    DJ_TYPE_Q8_1 = 9,
    DJ_TYPE_Q2_K = 10,
    DJ_TYPE_Q3_K = 11,
    DJ_TYPE_Q4_K = 12,
    DJ_TYPE_Q5_K = 13,
    DJ_TYPE_Q6_K = 14,
    DJ_TYPE_Q8_K = 15,
    DJ_TYPE_IQ2_XXS = 16,
    DJ_TYPE_IQ2_XS = 17,
    DJ_TYPE_IQ3_XXS = 18,
    DJ_TYPE_IQ1_S = 19,
    DJ_TYPE_IQ4_NL = 20,
    DJ_TYPE_IQ3_S = 21,
    DJ_TYPE_IQ2_S = 22,
    DJ_TYPE_IQ4_XS = 23,
    DJ_TYPE_I8 = 24,
    DJ_TYPE_I16 = 25,
    DJ_TYPE_I32 = 26,
    DJ_TYPE_I64 = 27,
    DJ_TYPE_F64 = 28,
    DJ_TYPE_IQ1_M = 29,
    DJ_TYPE_BF16 = 30,
    DJ_TYPE_TQ1_0 = 34,
    DJ_TYPE_TQ2_0 = 35,
    DJ_TYPE_MXFP4 = 39,
    DJ_TYPE_NVFP4 = 40,
    DJ_TYPE_Q1_0 = 41,
    DJ_TYPE_Q2_0 = 42,
    DJ_TYPE_COUNT = 43 /* one past the largest id */
};

struct dj_type_info {
    const char *name; /* as llama.cpp prints it: "f16", "q4_K", ... NULL for unknown ids */
    uint32_t blck;    /* elements per block */
    uint32_t bytes;   /* bytes per block */
};

/* Size info for a type id read from a file; NULL if the id is not a known type. */
const struct dj_type_info *dj_type_info(uint32_t type);
const char *dj_type_name(uint32_t type); /* "unknown" for unknown ids */
/* Bytes of a row of n elements; false if the type is unknown, n is not a
 * multiple of the block size, or the size overflows. */
bool dj_row_bytes(uint32_t type, int64_t n, size_t *out);
/* Type id from a case-insensitive name ("q4_k", "F16"); -1 if none. */
int dj_type_from_name(const char *name);

#endif
