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
