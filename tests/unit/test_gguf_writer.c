/*
 * test_gguf_writer.c — the GGUF writer: a round trip of every metadata type
 * (nested arrays, string arrays, empty strings and arrays) and of tensors of
 * several types and sizes through the reader; layout (alignment, zero
 * padding, llama.cpp's sequential offsets); copying the real files in
 * ../shared gives byte-identical files; argument errors; and I/O failures
 * (an unwritable path, a file-size limit hit mid-write in a child process)
 * return DJ_ERR_IO and leave neither a partial file nor a .tmp behind.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "test.h"

static const char *shared;

static bool str_is(struct gguf_str s, const void *want, size_t len) {
    return s.len == len && (len == 0 || memcmp(s.ptr, want, len) == 0);
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Tensor data of the round trip: distinct bytes per tensor. */
static uint8_t tdata[5][4096];

struct tspec {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    size_t nbytes;
};

static const struct tspec tensors[] = {
    {"a.f32", DJ_TYPE_F32, 1, {7, 1, 1, 1}, 28}, /* 28 bytes: the next tensor needs padding */
    {"b.f16", DJ_TYPE_F16, 2, {3, 5, 1, 1}, 30},
    {"c.q8_0", DJ_TYPE_Q8_0, 2, {64, 2, 1, 1}, 2 * 2 * 34},
    {"d.q4_K", DJ_TYPE_Q4_K, 1, {256, 1, 1, 1}, 144},
    {"e.i8.4d", DJ_TYPE_I8, 4, {3, 1, 2, 2}, 12},
    {"f.empty", DJ_TYPE_F32, 1, {0, 1, 1, 1}, 0},
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static struct gguf_writer *make_full_writer(void) {
    struct gguf_writer *w = gguf_writer_create();
    CHECK(w != NULL);
    if (!w) return NULL;
    CHECK(gguf_writer_set_u8(w, "t.u8", 250) == DJ_OK);
    CHECK(gguf_writer_set_i8(w, "t.i8", -120) == DJ_OK);
    CHECK(gguf_writer_set_u16(w, "t.u16", 65000) == DJ_OK);
    CHECK(gguf_writer_set_i16(w, "t.i16", -32000) == DJ_OK);
    CHECK(gguf_writer_set_u32(w, "t.u32", 4000000000u) == DJ_OK);
    CHECK(gguf_writer_set_i32(w, "t.i32", -2000000000) == DJ_OK);
    CHECK(gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 5) == DJ_OK);
    CHECK(gguf_writer_set_i64(w, "t.i64", INT64_MIN + 3) == DJ_OK);
    CHECK(gguf_writer_set_f32(w, "t.f32", 1.5f) == DJ_OK);
    CHECK(gguf_writer_set_f64(w, "t.f64", -2.25e300) == DJ_OK);
    CHECK(gguf_writer_set_bool(w, "t.true", true) == DJ_OK);
    CHECK(gguf_writer_set_bool(w, "t.false", false) == DJ_OK);
    CHECK(gguf_writer_set_str(w, "t.str", "hello", 5) == DJ_OK);
    CHECK(gguf_writer_set_str(w, "t.empty_str", NULL, 0) == DJ_OK);
    CHECK(gguf_writer_set_str(w, "t.nul_str", "a\0b", 3) == DJ_OK);

    const uint8_t au8[] = {1, 2, 255};
    const int16_t ai16[] = {-1, 2, -300};
    const uint32_t au32[] = {7, 8, 9, 10};
    const int64_t ai64[] = {INT64_MIN, 0, INT64_MAX};
    const float af32[] = {0.5f, -1.0f};
    const double af64[] = {3.25};
    const uint8_t abool[] = {1, 0, 1};
    CHECK(gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, au8, 3) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, ai16, 3) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, au32, 4) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, ai64, 3) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, af32, 2) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, af64, 1) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, abool, 3) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0) == DJ_OK);
    const struct gguf_str strs[] = {{"x", 1}, {"", 0}, {"long string \xe2\x96\x81", 15}};
    CHECK(gguf_writer_set_arr_str(w, "a.strs", strs, 3) == DJ_OK);
    CHECK(gguf_writer_set_arr_str(w, "a.no_strs", NULL, 0) == DJ_OK);

    /* nested: [[7,8,9,10], [], [["x","","long.."]], [[ ]]] */
    struct gguf_arr inner_strs = {.type = GGUF_TYPE_STRING, .n = 3, .strs = strs};
    struct gguf_arr inner_empty_arr = {.type = GGUF_TYPE_ARRAY, .n = 0};
    struct gguf_arr lvl2[] = {inner_strs};
    struct gguf_arr lvl2b[] = {inner_empty_arr};
    struct gguf_arr outer_elems[] = {
        {.type = GGUF_TYPE_UINT32, .n = 4, .data = au32},
        {.type = GGUF_TYPE_FLOAT32, .n = 0},
        {.type = GGUF_TYPE_ARRAY, .n = 1, .arrs = lvl2},
        {.type = GGUF_TYPE_ARRAY, .n = 1, .arrs = lvl2b},
    };
    struct gguf_arr outer = {.type = GGUF_TYPE_ARRAY, .n = 4, .arrs = outer_elems};
    CHECK(gguf_writer_set_arr_value(w, "a.nested", &outer) == DJ_OK);

    /* replace in place: the key keeps its position, the value and type change */
    CHECK(gguf_writer_set_str(w, "t.replace", "old", 3) == DJ_OK);
    CHECK(gguf_writer_set_u32(w, "t.after", 1) == DJ_OK);
    CHECK(gguf_writer_set_arr(w, "t.replace", GGUF_TYPE_UINT8, au8, 2) == DJ_OK);
    /* remove */
    CHECK(gguf_writer_set_u32(w, "t.removed", 1) == DJ_OK);
    CHECK(gguf_writer_remove_key(w, "t.removed") == DJ_OK);
    CHECK(gguf_writer_remove_key(w, "t.removed") == DJ_ERR_NOT_FOUND);

    for (size_t i = 0; i < N_TENSORS; i++) {
        const struct tspec *t = &tensors[i];
        uint8_t *d = tdata[i % 5];
        CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->nbytes ? d : NULL, t->nbytes) == DJ_OK);
    }
    return w;
}

static void check_full(const struct gguf_ctx *g) {
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    struct gguf_str s;
    struct gguf_arr a;
    const void *p;

    CHECK(gguf_n_kv(g) == 28);
    int64_t k = gguf_find_key(g, "t.u8");
    CHECK(k == 0 && gguf_kv_type(g, 0) == GGUF_TYPE_UINT8);
    CHECK((p = gguf_kv_scalar(g, 0)) && *(const uint8_t *)p == 250);
    CHECK(gguf_get_u32(g, "t.u8", &u32) == DJ_OK && u32 == 250);
    CHECK(gguf_get_i32(g, "t.i8", &i32) == DJ_OK && i32 == -120);
    CHECK(gguf_get_u32(g, "t.i8", &u32) == DJ_ERR_TYPE);
    CHECK(gguf_get_u32(g, "t.u16", &u32) == DJ_OK && u32 == 65000);
    CHECK(gguf_get_i32(g, "t.i16", &i32) == DJ_OK && i32 == -32000);
    CHECK(gguf_get_u32(g, "t.u32", &u32) == DJ_OK && u32 == 4000000000u);
    CHECK(gguf_get_i32(g, "t.u32", &i32) == DJ_ERR_TYPE);
    CHECK(gguf_get_i32(g, "t.i32", &i32) == DJ_OK && i32 == -2000000000);
    CHECK(gguf_get_i64(g, "t.i32", &i64) == DJ_OK && i64 == -2000000000);
    CHECK(gguf_get_u64(g, "t.u64", &u64) == DJ_OK && u64 == UINT64_MAX - 5);
    CHECK(gguf_get_i64(g, "t.u64", &i64) == DJ_ERR_TYPE);
    CHECK(gguf_get_i64(g, "t.i64", &i64) == DJ_OK && i64 == INT64_MIN + 3);
    CHECK(gguf_get_u64(g, "t.i64", &u64) == DJ_ERR_TYPE);
    CHECK(gguf_get_f32(g, "t.f32", &f32) == DJ_OK && f32 == 1.5f);
    CHECK(gguf_get_f64(g, "t.f32", &f64) == DJ_OK && f64 == 1.5);
    CHECK(gguf_get_f64(g, "t.f64", &f64) == DJ_OK && f64 == -2.25e300);
    CHECK(gguf_get_bool(g, "t.true", &b) == DJ_OK && b);
    CHECK(gguf_get_bool(g, "t.false", &b) == DJ_OK && !b);
    CHECK(gguf_get_str(g, "t.str", &s) == DJ_OK && str_is(s, "hello", 5));
    CHECK(gguf_get_str(g, "t.empty_str", &s) == DJ_OK && s.len == 0);
    CHECK(gguf_get_str(g, "t.nul_str", &s) == DJ_OK && str_is(s, "a\0b", 3));

    CHECK(gguf_get_arr(g, "a.u8", &a) == DJ_OK && a.type == GGUF_TYPE_UINT8 && a.n == 3 && gguf_arr_i64(&a, 2) == 255);
    CHECK(gguf_get_arr(g, "a.i16", &a) == DJ_OK && a.n == 3 && gguf_arr_i64(&a, 2) == -300 && gguf_arr_f64(&a, 0) == -1.0);
    CHECK(gguf_get_arr(g, "a.u32", &a) == DJ_OK && a.n == 4 && gguf_arr_i64(&a, 3) == 10);
    CHECK(gguf_get_arr(g, "a.i64", &a) == DJ_OK && a.n == 3 && gguf_arr_i64(&a, 0) == INT64_MIN &&
          gguf_arr_i64(&a, 2) == INT64_MAX);
    CHECK(gguf_get_arr(g, "a.f32", &a) == DJ_OK && a.n == 2 && gguf_arr_f64(&a, 1) == -1.0);
    CHECK(gguf_get_arr(g, "a.f64", &a) == DJ_OK && a.n == 1 && gguf_arr_f64(&a, 0) == 3.25);
    CHECK(gguf_get_arr(g, "a.bool", &a) == DJ_OK && a.type == GGUF_TYPE_BOOL && a.n == 3 && gguf_arr_i64(&a, 0) == 1 &&
          gguf_arr_i64(&a, 1) == 0);
    CHECK(gguf_get_arr(g, "a.empty", &a) == DJ_OK && a.type == GGUF_TYPE_UINT32 && a.n == 0);
    CHECK(gguf_get_arr(g, "a.strs", &a) == DJ_OK && a.type == GGUF_TYPE_STRING && a.n == 3);
    if (a.n == 3) {
        CHECK(str_is(a.strs[0], "x", 1) && a.strs[1].len == 0 && str_is(a.strs[2], "long string \xe2\x96\x81", 15));
    }
    CHECK(gguf_get_arr(g, "a.no_strs", &a) == DJ_OK && a.type == GGUF_TYPE_STRING && a.n == 0);
    CHECK(gguf_get_arr(g, "a.nested", &a) == DJ_OK && a.type == GGUF_TYPE_ARRAY && a.n == 4);
    if (a.type == GGUF_TYPE_ARRAY && a.n == 4) {
        const struct gguf_arr *e = a.arrs;
        CHECK(e[0].type == GGUF_TYPE_UINT32 && e[0].n == 4 && gguf_arr_i64(&e[0], 0) == 7);
        CHECK(e[1].type == GGUF_TYPE_FLOAT32 && e[1].n == 0);
        CHECK(e[2].type == GGUF_TYPE_ARRAY && e[2].n == 1);
        if (e[2].n == 1) {
            const struct gguf_arr *x = &e[2].arrs[0];
            CHECK(x->type == GGUF_TYPE_STRING && x->n == 3 && x->n == 3 && str_is(x->strs[2], "long string \xe2\x96\x81", 15));
        }
        CHECK(e[3].type == GGUF_TYPE_ARRAY && e[3].n == 1);
        if (e[3].n == 1) CHECK(e[3].arrs[0].type == GGUF_TYPE_ARRAY && e[3].arrs[0].n == 0);
    }
    /* replaced in place: t.replace comes before t.after, with the new type */
    int64_t ir = gguf_find_key(g, "t.replace"), ia = gguf_find_key(g, "t.after");
    CHECK(ir >= 0 && ia == ir + 1);
    CHECK(gguf_get_arr(g, "t.replace", &a) == DJ_OK && a.type == GGUF_TYPE_UINT8 && a.n == 2);
    CHECK(gguf_find_key(g, "t.removed") == -1);

    CHECK(gguf_n_tensors(g) == N_TENSORS);
    size_t align = gguf_alignment(g), expect_off = 0;
    for (size_t i = 0; i < N_TENSORS && i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        const struct tspec *ts = &tensors[i];
        CHECK(str_is(t->name, ts->name, strlen(ts->name)));
        CHECK(t->type == ts->type && t->n_dims == ts->n_dims && t->nbytes == ts->nbytes);
        CHECK(memcmp(t->ne, ts->ne, sizeof t->ne) == 0);
        CHECK(t->nbytes == 0 || memcmp(t->data, tdata[i % 5], t->nbytes) == 0);
        /* llama.cpp's layout: each tensor where the previous ended, rounded up */
        CHECKF(t->offset == expect_off, "tensor %zu offset %llu, expected %zu", i, (unsigned long long)t->offset, expect_off);
        CHECK(t->offset % align == 0);
        expect_off = (t->offset + t->nbytes + align - 1) / align * align;
    }
}

/* Zero padding between the metadata and the data and between tensors. */
static void check_padding(const uint8_t *p, size_t size, const struct gguf_ctx *g) {
    size_t pos = gguf_data_offset(g), bad = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        size_t start = gguf_data_offset(g) + t->offset;
        for (size_t j = pos; j < start; j++) bad += p[j] != 0;
        pos = start + t->nbytes;
    }
    for (size_t j = pos; j < size; j++) bad += p[j] != 0;
    CHECK(bad == 0);
    CHECK(size % gguf_alignment(g) == 0); /* the last tensor is padded too, like llama.cpp */
}

static void test_round_trip(void) {
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < sizeof tdata[i]; j++) tdata[i][j] = (uint8_t)(i * 37 + j * 11 + 1);
    for (int variant = 0; variant < 3; variant++) {
        struct gguf_writer *w = make_full_writer();
        if (!w) return;
        if (variant == 1) CHECK(gguf_writer_set_u32(w, "general.alignment", 64) == DJ_OK);
        if (variant == 2) CHECK(gguf_writer_set_version(w, 2) == DJ_OK);
        void *buf = NULL;
        size_t size = 0;
        CHECK(gguf_writer_write_memory(w, &buf, &size) == DJ_OK);
        struct gguf_ctx *g = NULL;
        enum dj_status st = gguf_open_memory(buf, size, "roundtrip", &g);
        CHECKF(st == DJ_OK, "%s", dj_last_error());
        if (g) {
            if (variant == 1) {
                CHECK(gguf_alignment(g) == 64);
                /* general.alignment was appended last: remove it from the count */
                CHECK(gguf_n_kv(g) == 29);
            } else {
                check_full(g);
                CHECK(gguf_alignment(g) == 32);
            }
            CHECK(gguf_version(g) == (variant == 2 ? 2u : 3u));
            CHECK(gguf_data_offset(g) % gguf_alignment(g) == 0);
            for (size_t i = 0; i < gguf_n_tensors(g); i++) {
                const struct gguf_tensor *t = gguf_tensor(g, i);
                CHECK(((const uint8_t *)t->data - (const uint8_t *)buf) % gguf_alignment(g) == 0);
                CHECK(t->nbytes == 0 || memcmp(t->data, tdata[i % 5], t->nbytes) == 0);
            }
            check_padding(buf, size, g);
            gguf_close(g);
        }
        free(buf);
        gguf_writer_destroy(w);
    }
}

/* Copies every kv and tensor of a file and compares the bytes. */
static void copy_file(const char *rel) {
    const char *path = test_shared_path(shared, rel);
    size_t size = 0;
    uint8_t *orig = (uint8_t *)test_read_file(path, &size);
    CHECKF(orig != NULL, "%s", path);
    if (!orig) return;
    struct gguf_ctx *src = NULL;
    CHECK(gguf_open_memory(orig, size, rel, &src) == DJ_OK);
    struct gguf_writer *w = gguf_writer_create();
    if (src && w) {
        for (size_t i = 0; i < gguf_n_kv(src); i++) CHECK(gguf_writer_copy_kv(w, src, i) == DJ_OK);
        for (size_t i = 0; i < gguf_n_tensors(src); i++) {
            const struct gguf_tensor *t = gguf_tensor(src, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes) == DJ_OK);
        }
        void *buf = NULL;
        size_t n = 0;
        CHECK(gguf_writer_write_memory(w, &buf, &n) == DJ_OK);
        CHECKF(n == size && memcmp(buf, orig, size) == 0, "%s: copy is not byte-identical (%zu vs %zu bytes)", rel, n, size);
        /* and through a real file */
        char out[] = "/tmp/dj_gguf_copy_XXXXXX";
        int fd = mkstemp(out);
        CHECK(fd >= 0);
        if (fd >= 0) {
            close(fd);
            CHECK(gguf_writer_write(w, out) == DJ_OK); /* replaces the empty file */
            size_t n2 = 0;
            char *again = test_read_file(out, &n2);
            CHECK(again && n2 == size && memcmp(again, orig, size) == 0);
            free(again);
            struct gguf_ctx *g = NULL;
            CHECK(gguf_open(out, &g) == DJ_OK);
            if (g) CHECK(gguf_n_kv(g) == gguf_n_kv(src) && gguf_n_tensors(g) == gguf_n_tensors(src));
            gguf_close(g);
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%s.tmp", out);
            CHECK(!file_exists(tmp));
            unlink(out);
        }
        free(buf);
    }
    gguf_writer_destroy(w);
    gguf_close(src);
    free(orig);
}

static void test_argument_errors(void) {
    struct gguf_writer *w = gguf_writer_create();
    if (!w) return;
    uint8_t d[64] = {0};
    const int64_t ne7[] = {7}, ne33[] = {33}, ne_neg[] = {-1}, ne_big[] = {INT64_C(1) << 40, INT64_C(1) << 40};
    const uint8_t bad_bool[] = {0, 2};

    CHECK(gguf_writer_set_u32(w, "general.alignment", 3) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "power of two") != NULL);
    CHECK(gguf_writer_set_u32(w, "general.alignment", 0) == DJ_ERR_INVALID);
    CHECK(gguf_writer_set_i32(w, "general.alignment", 32) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "u32") != NULL);
    CHECK(gguf_writer_set_u32(w, "", 1) == DJ_ERR_INVALID);
    CHECK(gguf_writer_set_u32(w, NULL, 1) == DJ_ERR_INVALID);
    CHECK(gguf_writer_set_arr(w, "b", GGUF_TYPE_BOOL, bad_bool, 2) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "bool") != NULL);
    CHECK(gguf_writer_set_arr(w, "s", GGUF_TYPE_STRING, d, 1) == DJ_ERR_INVALID);
    CHECK(gguf_writer_set_arr(w, "x", (enum gguf_type)13, d, 1) == DJ_ERR_INVALID);
    CHECK(gguf_writer_set_version(w, 1) == DJ_ERR_INVALID && gguf_writer_set_version(w, 4) == DJ_ERR_INVALID);

    /* nesting deeper than the reader accepts is refused */
    struct gguf_arr chain[20];
    for (int i = 0; i < 20; i++)
        chain[i] = i == 19 ? (struct gguf_arr){.type = GGUF_TYPE_UINT8, .n = 0}
                           : (struct gguf_arr){.type = GGUF_TYPE_ARRAY, .n = 1, .arrs = &chain[i + 1]};
    CHECK(gguf_writer_set_arr_value(w, "deep", &chain[0]) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "nested") != NULL);
    CHECK(gguf_writer_set_arr_value(w, "deep", &chain[3]) == DJ_ERR_INVALID); /* 17 levels */
    CHECK(gguf_writer_set_arr_value(w, "ok", &chain[4]) == DJ_OK);          /* 16 levels: the reader's limit */

    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 1, ne7, d, 27) == DJ_ERR_INVALID); /* wrong nbytes */
    CHECK(strstr(dj_last_error(), "nbytes") != NULL);
    CHECK(gguf_writer_add_tensor(w, "t", 4, 1, ne7, d, 28) == DJ_ERR_INVALID); /* retired type id */
    CHECK(strstr(dj_last_error(), "unknown") != NULL);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_Q8_0, 1, ne33, d, 34) == DJ_ERR_INVALID); /* not a block multiple */
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 0, ne7, d, 28) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 5, ne7, d, 28) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 1, ne_neg, d, 0) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 2, ne_big, d, 0) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 1, ne7, NULL, 28) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123", DJ_TYPE_F32, 1,
                                 ne7, d, 28) == DJ_ERR_INVALID); /* 64 bytes: llama.cpp's limit is 63 */
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 1, ne7, d, 28) == DJ_OK);
    CHECK(gguf_writer_add_tensor(w, "t", DJ_TYPE_F32, 1, ne7, d, 28) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "duplicate") != NULL);

    /* failed calls left the writer as it was: one kv ("ok"), one tensor */
    void *buf = NULL;
    size_t n = 0;
    CHECK(gguf_writer_write_memory(w, &buf, &n) == DJ_OK);
    struct gguf_ctx *g = NULL;
    CHECK(gguf_open_memory(buf, n, "args", &g) == DJ_OK);
    if (g) CHECK(gguf_n_kv(g) == 1 && gguf_n_tensors(g) == 1 && gguf_version(g) == 3);
    gguf_close(g);
    free(buf);
    gguf_writer_destroy(w);
    gguf_writer_destroy(NULL); /* accepts NULL */
}

static void test_unwritable_path(void) {
    struct gguf_writer *w = gguf_writer_create();
    if (!w) return;
    CHECK(gguf_writer_set_u32(w, "k", 1) == DJ_OK);
    CHECK(gguf_writer_write(w, "/nonexistent/dir/x.gguf") == DJ_ERR_IO);
    CHECK(strstr(dj_last_error(), "/nonexistent/dir/x.gguf") != NULL);
    CHECK(!file_exists("/nonexistent/dir/x.gguf.tmp"));
    gguf_writer_destroy(w);
}

/* A full disk, simulated with RLIMIT_FSIZE (SIGXFSZ ignored, so write()
 * fails with EFBIG) in a child process.  The target already holds an old
 * file: a failed write must leave it untouched and remove the .tmp. */
static void test_disk_full(void) {
    char dir[] = "/tmp/dj_gguf_full_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128], tmp[160];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("old contents", f);
    fclose(f);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        static uint8_t big[256 * 1024];
        const int64_t ne[] = {(int64_t)sizeof big};
        struct rlimit rl = {.rlim_cur = 64 * 1024, .rlim_max = 64 * 1024};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        struct gguf_writer *w = gguf_writer_create();
        if (!w || gguf_writer_add_tensor(w, "big", DJ_TYPE_I8, 1, ne, big, sizeof big) != DJ_OK) _exit(11);
        enum dj_status st = gguf_writer_write(w, path);
        int code = st != DJ_ERR_IO ? 12 : !strstr(dj_last_error(), path) ? 13 : 0;
        if (code) fprintf(stderr, "child: status %d, message: %s\n", (int)st, dj_last_error());
        else fprintf(stderr, "disk full message: %s\n", dj_last_error());
        gguf_writer_destroy(w);
        _exit(code);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    size_t n = 0;
    char *old = test_read_file(path, &n);
    CHECK(old && n == 12 && memcmp(old, "old contents", 12) == 0);
    free(old);
    CHECK(!file_exists(tmp));
    unlink(path);
    rmdir(dir);
}

/* gguf_writer_add_tensor_fill: the bytes a fill function produces at write time
 * land exactly where referenced data would (file and memory), the buffer is
 * reused between tensors, and a fill that fails stops the write, names its
 * error and leaves no file. */
struct fill_arg {
    uint8_t seed;
    int calls;
    bool fail;
};

static enum dj_status fill_pattern(void *arg, void *buf, size_t n) {
    struct fill_arg *a = arg;
    a->calls++;
    if (a->fail) return dj_fail(DJ_ERR_IO, "fill %u failed", (unsigned)a->seed);
    for (size_t i = 0; i < n; i++) ((uint8_t *)buf)[i] = (uint8_t)(a->seed + i * 7);
    return DJ_OK;
}

static void test_fill(void) {
    static uint8_t d0[96], d1[40], d2[200];
    uint8_t *datas[3] = {d0, d1, d2};
    const size_t sizes[3] = {sizeof d0, sizeof d1, sizeof d2};
    struct fill_arg args[3] = {{1, 0, false}, {2, 0, false}, {3, 0, false}};
    struct gguf_writer *a = gguf_writer_create(), *b = gguf_writer_create();
    CHECK(a && b);
    if (!a || !b) return;
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "t%d", i);
        const int64_t ne[] = {(int64_t)sizes[i]};
        for (size_t k = 0; k < sizes[i]; k++) datas[i][k] = (uint8_t)(args[i].seed + k * 7);
        CHECK(gguf_writer_add_tensor(a, nm, DJ_TYPE_I8, 1, ne, datas[i], sizes[i]) == DJ_OK);
        /* i = 1 fills into the buffer grown for tensor 0: it must not see stale bytes */
        CHECK(gguf_writer_add_tensor_fill(b, nm, DJ_TYPE_I8, 1, ne, sizes[i], fill_pattern, &args[i]) == DJ_OK);
    }
    const int64_t ne1[] = {4};
    CHECK(gguf_writer_add_tensor_fill(b, "nofn", DJ_TYPE_I8, 1, ne1, 4, NULL, NULL) == DJ_ERR_INVALID);
    CHECK(gguf_writer_add_tensor_fill(b, "badsize", DJ_TYPE_I8, 1, ne1, 5, fill_pattern, &args[0]) == DJ_ERR_INVALID);
    void *ma = NULL, *mb = NULL;
    size_t na = 0, nb = 0;
    CHECK(gguf_writer_write_memory(a, &ma, &na) == DJ_OK && gguf_writer_write_memory(b, &mb, &nb) == DJ_OK);
    CHECK(ma && mb && na == nb && memcmp(ma, mb, na) == 0);
    free(mb);
    mb = NULL;
    char dir[] = "/tmp/dj_gguf_fill_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/f.gguf", dir);
    CHECK(gguf_writer_write(b, path) == DJ_OK);
    size_t nf = 0;
    char *f = test_read_file(path, &nf);
    CHECK(f && nf == na && memcmp(f, ma, na) == 0);
    CHECK(args[0].calls == 2 && args[1].calls == 2 && args[2].calls == 2);
    free(f);
    unlink(path);
    args[1].fail = true;
    CHECK(gguf_writer_write(b, path) == DJ_ERR_IO && strstr(dj_last_error(), "fill 2 failed"));
    CHECK(!file_exists(path));
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!file_exists(tmp));
    CHECK(gguf_writer_write_memory(b, &mb, &nb) == DJ_ERR_IO && mb == NULL);
    rmdir(dir);
    free(ma);
    gguf_writer_destroy(a);
    gguf_writer_destroy(b);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    test_fill();
    test_round_trip();
    test_argument_errors();
    test_unwritable_path();
    test_disk_full();
    copy_file("models/stories260K.gguf");
    copy_file("models/aidreams260K.gguf");
    copy_file("models/codelm-15m-f16.gguf");
    copy_file("vocab/ggml-vocab-llama-spm.gguf");
    copy_file("vocab/ggml-vocab-gpt-2.gguf");
    TEST_END();
}
