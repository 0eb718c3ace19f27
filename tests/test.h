/*
 * test.h — a minimal test harness shared by the test programs.
 *
 * Each test program gets the shared data folder as argv[1] (../shared) and
 * the deja binary as argv[2] (see CMakeLists.txt).  CHECK records a failure
 * with file:line and goes on; TEST_END prints "N passed, N failed" and returns
 * the exit status.
 */
#ifndef DJ_TEST_H
#define DJ_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            test_passed++;                                                       \
        } else {                                                                 \
            test_failed++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                        \
    } while (0)

#define CHECKF(cond, ...)                                                        \
    do {                                                                         \
        if (cond) {                                                              \
            test_passed++;                                                       \
        } else {                                                                 \
            test_failed++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

#define TEST_END()                                                               \
    do {                                                                         \
        printf("%d passed, %d failed\n", test_passed, test_failed);              \
        return test_failed ? 1 : 0;                                              \
    } while (0)

/* A 64-bit hash of the bits of n floats, for the "bitwise equal" checks over logits rows
 * (seed: DJ_FNV_OFFSET, or the hash so far to fold vectors in order).  A 32k vocabulary's row
 * is 128 KiB, and byte-wise FNV-1a (one multiply a byte) took 14 % of test_batch and 8 % of
 * test_spec; this takes 64-bit words in four chains.  Each step h = rotl(h ^ w, 29) * K is a
 * bijection of h for a fixed w and of w for a fixed h, so two inputs of the same length that
 * differ in one word always hash apart (in more: by chance, 2^-64).  Not streaming: a vector
 * hashed in two calls hashes otherwise than in one (callers hash whole rows). */
static inline uint64_t test_hash_step(uint64_t h, uint64_t w) {
    h ^= w;
    return ((h << 29) | (h >> 35)) * 0x9e3779b97f4a7c15ull;
}
static inline uint64_t test_hash_f32(uint64_t h, const float *x, size_t n) {
    uint64_t l[4] = {h, h + 0x9e3779b97f4a7c15ull, h + 0x3c6ef372fe94f82aull, h + 0xdaa66d2c7ddf743full};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 4; j++) {
            uint64_t w;
            memcpy(&w, x + i + 2 * j, sizeof w);
            l[j] = test_hash_step(l[j], w);
        }
    for (; i < n; i++) {
        uint32_t w;
        memcpy(&w, x + i, sizeof w);
        l[0] = test_hash_step(l[0], w);
    }
    uint64_t r = test_hash_step(h, (uint64_t)n);
    for (int j = 0; j < 4; j++) r = test_hash_step(r, l[j]);
    return r;
}

/* Path of a file in the shared folder: test_shared(argv, "models/x.gguf"). */
static inline const char *test_shared_path(const char *shared, const char *rel) {
    static char buf[8][4096];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, 4096, "%s/%s", shared, rel);
    return b;
}

/* Reads a whole file into a malloc'd, NUL-terminated buffer; NULL on failure. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[n] = '\0'; if (len) *len = (size_t)n; }
    return p;
}

/* The value for `name` in DIR/FILE, a "<hex>  <name>" list (sha256sum's format: SHA256SUMS,
 * DIGESTS), malloc'd; NULL if the file or the name is absent. */
static inline char *test_list_lookup(const char *dir, const char *file, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *doc = test_read_file(path, NULL);
    if (!doc) return NULL;
    char *res = NULL, *save = NULL;
    for (char *line = strtok_r(doc, "\n", &save); line && !res; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strstr(line, "  ");
        if (sp && !strcmp(sp + 2, name)) res = strndup(line, (size_t)(sp - line));
    }
    free(doc);
    return res;
}

/* n_expect float32 values of a golden logits file (little-endian, as written on x86-64),
 * malloc'd; NULL when the file is missing or has another size. */
static inline float *test_read_f32(const char *path, size_t n_expect) {
    size_t len = 0;
    char *b = test_read_file(path, &len);
    if (!b || len != n_expect * sizeof(float)) {
        free(b);
        return NULL;
    }
    return (float *)b;
}

/* max |a[i] - b[i]|; a NaN on either side gives NaN. */
static inline float test_max_abs_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
    }
    return d;
}

#endif
