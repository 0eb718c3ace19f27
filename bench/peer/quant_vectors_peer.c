/*
 * quant_vectors_peer.c — llama.cpp's own dequantization of raw blocks, for
 * tests/kernels/vectors (gen_vectors.py runs it; see bench/peer/README.md).
 *
 *   quant_vectors_peer --info TYPE          prints "name blck_size type_size" of ggml type id TYPE
 *   quant_vectors_peer TYPE IN OUT          IN: whole blocks of TYPE; OUT: their float32 values,
 *                                           little-endian, from ggml_get_type_traits(TYPE)->to_float
 *                                           (ggml-base's reference dequantize_row_*)
 *
 * Links libggml-base of a llama.cpp build (none of its code is in this repository).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

int main(int argc, char **argv) {
    if (argc == 3 && argv[1][0] == '-') {
        const int t = atoi(argv[2]);
        if (t < 0 || t >= GGML_TYPE_COUNT) return 1;
        const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)t);
        if (!tr->type_name || !tr->to_float) return 1;
        printf("%s %lld %zu\n", tr->type_name, (long long)tr->blck_size, tr->type_size);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s --info TYPE | TYPE IN OUT\n", argv[0]);
        return 2;
    }
    const int t = atoi(argv[1]);
    if (t < 0 || t >= GGML_TYPE_COUNT) return 1;
    const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)t);
    if (!tr->to_float) {
        fprintf(stderr, "type %d: no to_float\n", t);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n <= 0 || n % (long)tr->type_size) {
        fprintf(stderr, "%s: %ld bytes is not a whole number of %zu-byte blocks\n", argv[2], n, tr->type_size);
        return 1;
    }
    void *in = malloc((size_t)n);
    if (!in || fread(in, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    const int64_t k = (int64_t)(n / (long)tr->type_size) * tr->blck_size;
    float *out = malloc(sizeof(float) * (size_t)k);
    if (!out) return 1;
    tr->to_float(in, out, k);
    f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof(float), (size_t)k, f) != (size_t)k || fclose(f)) return 1;
    free(in);
    free(out);
    return 0;
}
