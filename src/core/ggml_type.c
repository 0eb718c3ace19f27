/*
 * ggml_type.c — the type size table (values from ggml's block definitions).
 */
#include "core/ggml_type.h"

#include <strings.h>

#include "core/checked.h"

static const struct dj_type_info table[DJ_TYPE_COUNT] = {
    [DJ_TYPE_F32] = {"f32", 1, 4},
    [DJ_TYPE_F16] = {"f16", 1, 2},
    [DJ_TYPE_Q4_0] = {"q4_0", 32, 18},
    [DJ_TYPE_Q4_1] = {"q4_1", 32, 20},
    [DJ_TYPE_Q5_0] = {"q5_0", 32, 22},
    [DJ_TYPE_Q5_1] = {"q5_1", 32, 24},
    [DJ_TYPE_Q8_0] = {"q8_0", 32, 34},
    [DJ_TYPE_Q8_1] = {"q8_1", 32, 36},
    [DJ_TYPE_Q2_K] = {"q2_K", 256, 84},
    [DJ_TYPE_Q3_K] = {"q3_K", 256, 110},
    [DJ_TYPE_Q4_K] = {"q4_K", 256, 144},
    [DJ_TYPE_Q5_K] = {"q5_K", 256, 176},
    [DJ_TYPE_Q6_K] = {"q6_K", 256, 210},
    [DJ_TYPE_Q8_K] = {"q8_K", 256, 292},
    [DJ_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [DJ_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [DJ_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [DJ_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [DJ_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [DJ_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [DJ_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [DJ_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [DJ_TYPE_I8] = {"i8", 1, 1},
    [DJ_TYPE_I16] = {"i16", 1, 2},
    [DJ_TYPE_I32] = {"i32", 1, 4},
    [DJ_TYPE_I64] = {"i64", 1, 8},
    [DJ_TYPE_F64] = {"f64", 1, 8},
    [DJ_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [DJ_TYPE_BF16] = {"bf16", 1, 2},
    [DJ_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [DJ_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [DJ_TYPE_MXFP4] = {"mxfp4", 32, 17},
    [DJ_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [DJ_TYPE_Q1_0] = {"q1_0", 128, 18},
    [DJ_TYPE_Q2_0] = {"q2_0", 64, 18},
};

const struct dj_type_info *dj_type_info(uint32_t type) {
    if (type >= DJ_TYPE_COUNT || table[type].name == NULL) return NULL;
    return &table[type];
}

const char *dj_type_name(uint32_t type) {
    const struct dj_type_info *ti = dj_type_info(type);
    return ti ? ti->name : "unknown";
}

bool dj_row_bytes(uint32_t type, int64_t n, size_t *out) {
    const struct dj_type_info *ti = dj_type_info(type);
    if (!ti || n < 0 || (uint64_t)n % ti->blck != 0) return false;
    return !dj_mul_overflow((size_t)((uint64_t)n / ti->blck), ti->bytes, out);
}

int dj_type_from_name(const char *name) {
    for (int i = 0; i < DJ_TYPE_COUNT; i++)
        if (table[i].name && strcasecmp(table[i].name, name) == 0) return i;
    return -1;
}
