/*
 * test_gguf_hardening.c — the GGUF reader on hostile input.
 *
 *   - forged files, each one change away from a valid baseline (built by
 *     hand here, so the reader is not checked against our own writer's
 *     idea of the format): huge string lengths and array counts, huge
 *     n_tensors/n_kv, data past EOF, duplicates, unknown types, misaligned
 *     offsets, bad n_dims and dims, bad alignment, bad bools, bad magic and
 *     versions.  Each must give DJ_ERR_FORMAT and a message with the file
 *     name, the expected words and a byte offset;
 *   - stories260K.gguf truncated at every byte up to the start of its data
 *     section (+64) and at 600 points spread over the rest: every cut fails
 *     cleanly;
 *   - seeded random byte flips in stories260K and a vocab file: open either
 *     fails with a message or succeeds and then every getter and every
 *     tensor byte range can be walked.
 * Every image is handed to the reader in a malloc'd buffer of exactly its
 * size, so under ASan a read one byte past the end is caught.
 */
#include <stdint.h>
#include <string.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "test.h"

static const char *shared;
static int verbose;

/* ---- a byte builder for forged files ---------------------------------------- */

struct fb {
    uint8_t *p;
    size_t len, cap;
};

static void fb_bytes(struct fb *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}
static void fb_u8(struct fb *b, uint8_t v) { fb_bytes(b, &v, 1); }
static void fb_u32(struct fb *b, uint32_t v) { fb_bytes(b, &v, 4); }
static void fb_u64(struct fb *b, uint64_t v) { fb_bytes(b, &v, 8); }
static void fb_str(struct fb *b, const char *s) {
    fb_u64(b, strlen(s));
    fb_bytes(b, s, strlen(s));
}
static void fb_hdr(struct fb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->len = 0;
    fb_bytes(b, "GGUF", 4);
    fb_u32(b, version);
    fb_u64(b, n_tensors);
    fb_u64(b, n_kv);
}
static void fb_kv_u32(struct fb *b, const char *k, uint32_t v) {
    fb_str(b, k);
    fb_u32(b, GGUF_TYPE_UINT32);
    fb_u32(b, v);
}
static void fb_kv_str(struct fb *b, const char *k, const char *v) {
    fb_str(b, k);
    fb_u32(b, GGUF_TYPE_STRING);
    fb_str(b, v);
}
static void fb_tensor(struct fb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off) {
    fb_str(b, name);
    fb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) fb_u64(b, (uint64_t)ne[i]);
    fb_u32(b, type);
    fb_u64(b, off);
}
static void fb_data(struct fb *b, size_t align, size_t n) {
    while (b->len % align) fb_u8(b, 0);
    for (size_t i = 0; i < n; i++) fb_u8(b, (uint8_t)(0x11 + i));
}

/* The baseline: one string, one bool, an f32 [4,2] tensor; valid. */
static const int64_t ne42[] = {4, 2};
static void fb_baseline_meta(struct fb *b, uint64_t n_tensors) {
    fb_hdr(b, 3, n_tensors, 2);
    fb_kv_str(b, "general.architecture", "llama");
    fb_str(b, "x.flag");
    fb_u32(b, GGUF_TYPE_BOOL);
    fb_u8(b, 1);
}

/* ---- walking an opened context: every getter, every byte range ---------------- */

static uint64_t sink;

static void walk_arr(const struct gguf_arr *a, int depth) {
    CHECK(depth < 64);
    for (size_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_TYPE_STRING) {
            if (a->strs[i].len) sink += (uint8_t)a->strs[i].ptr[0] + (uint8_t)a->strs[i].ptr[a->strs[i].len - 1];
        } else if (a->type == GGUF_TYPE_ARRAY) {
            walk_arr(&a->arrs[i], depth + 1);
        } else if (a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64) {
            sink += gguf_arr_f64(a, i) > 0;
        } else {
            sink += (uint64_t)gguf_arr_i64(a, i) + (gguf_arr_f64(a, i) > 0);
        }
    }
}

static void walk(const struct gguf_ctx *g) {
    CHECK(gguf_data_offset(g) <= gguf_file_size(g));
    for (size_t i = 0; i < gguf_n_kv(g); i++) {
        struct gguf_str k = gguf_kv_key(g, i), s;
        struct gguf_arr a;
        enum gguf_type t = gguf_kv_type(g, i);
        CHECK(t < GGUF_TYPE_COUNT && k.len > 0);
        if (t == GGUF_TYPE_STRING) {
            CHECK(gguf_kv_str(g, i, &s) == DJ_OK);
            if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        } else if (t == GGUF_TYPE_ARRAY) {
            CHECK(gguf_kv_arr(g, i, &a) == DJ_OK);
            walk_arr(&a, 0);
        } else {
            const uint8_t *p = gguf_kv_scalar(g, i);
            CHECK(p != NULL);
            if (p) sink += p[gguf_type_size(t) - 1];
        }
        if (memchr(k.ptr, 0, k.len) || k.len > 255) continue;
        char key[256];
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        CHECK(gguf_find_key(g, key) == (int64_t)i);
        uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b;
        sink += gguf_get_u32(g, key, &u32) + gguf_get_i32(g, key, &i32) + gguf_get_u64(g, key, &u64) +
                gguf_get_i64(g, key, &i64) + gguf_get_f32(g, key, &f32) + gguf_get_f64(g, key, &f64) +
                gguf_get_bool(g, key, &b) + gguf_get_str(g, key, &s) + gguf_get_arr(g, key, &a);
    }
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        CHECK(t->offset % gguf_alignment(g) == 0);
        CHECK(gguf_data_offset(g) + t->offset + t->nbytes <= gguf_file_size(g));
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        if (t->name.len < 256 && !memchr(t->name.ptr, 0, t->name.len)) {
            char nm[256];
            memcpy(nm, t->name.ptr, t->name.len);
            nm[t->name.len] = '\0';
            CHECK(gguf_find_tensor(g, nm) == t);
        }
    }
}

/* Opens a copy of p[0..n) in an exact-size buffer; walks it if it opened. */
static enum dj_status try_open(const uint8_t *p, size_t n, const char *name) {
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    if (n) memcpy(copy, p, n);
    struct gguf_ctx *g = NULL;
    enum dj_status st = gguf_open_memory(copy, n, name, &g);
    if (st == DJ_OK) {
        walk(g);
        gguf_close(g);
    } else {
        const char *m = dj_last_error();
        CHECKF(st == DJ_ERR_FORMAT, "status %d: %s", (int)st, m);
        CHECKF(strstr(m, name) == m && strstr(m, "at byte") && !strchr(m, '\n'), "bad message: %s", m);
    }
    free(copy);
    return st;
}

static void expect_ok(const struct fb *b, const char *what) {
    enum dj_status st = try_open(b->p, b->len, "forged.gguf");
    CHECKF(st == DJ_OK, "%s: %s", what, dj_last_error());
}

/* Fails with DJ_ERR_FORMAT and a message containing w1 and w2 (if given). */
static void expect_fail_(const struct fb *b, const char *w1, const char *w2, int line) {
    enum dj_status st = try_open(b->p, b->len, "forged.gguf");
    const char *m = dj_last_error();
    if (verbose) printf("line %d: %s\n", line, m);
    CHECKF(st == DJ_ERR_FORMAT, "line %d: status %d", line, (int)st);
    CHECKF(st != DJ_OK && strstr(m, w1), "line %d: '%s' not in: %s", line, w1, m);
    if (w2) CHECKF(st != DJ_OK && strstr(m, w2), "line %d: '%s' not in: %s", line, w2, m);
}
#define expect_fail(b, w1, w2) expect_fail_(b, w1, w2, __LINE__)

/* ---- forged files ------------------------------------------------------------------ */

static void test_forged_header(struct fb *b) {
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_ok(b, "baseline");
    uint8_t *base = malloc(b->len);
    size_t base_len = b->len;
    memcpy(base, b->p, b->len);

    for (size_t n = 0; n < 24; n++) { /* every truncated header */
        b->len = n;
        expect_fail(b, n < 4 ? "too small" : "past end of file", NULL);
    }
    b->len = base_len;
    memcpy(b->p, "GGUX", 4);
    expect_fail(b, "bad magic", "GGUX");
    memcpy(b->p, "\x00\x01\xff\n", 4);
    expect_fail(b, "bad magic", "\\x00\\x01\\xff\\x0a");
    memcpy(b->p, base, base_len);

    const uint32_t versions[] = {0, 1, 4, 0x03000000u, 0xffffffffu};
    const char *words[] = {"version 0", "version 1", "version 4", "big-endian", "version 4294967295"};
    for (int i = 0; i < 5; i++) {
        memcpy(b->p + 4, &versions[i], 4);
        expect_fail(b, "unsupported version", words[i]);
    }
    uint32_t v2 = 2;
    memcpy(b->p + 4, &v2, 4);
    expect_ok(b, "version 2");
    memcpy(b->p, base, base_len);

    const uint64_t huge[] = {UINT64_C(1) << 62, UINT64_MAX, UINT64_C(1) << 32, 1000};
    for (int i = 0; i < 4; i++) {
        memcpy(b->p + 8, &huge[i], 8);
        expect_fail(b, "n_tensors", "cannot fit");
        memcpy(b->p, base, base_len);
        memcpy(b->p + 16, &huge[i], 8);
        expect_fail(b, "n_kv", "cannot fit");
        memcpy(b->p, base, base_len);
    }
    free(base);
}

static void test_forged_metadata(struct fb *b) {
    /* a key whose string length is 2^63 */
    fb_hdr(b, 3, 0, 1);
    fb_u64(b, UINT64_C(1) << 63);
    fb_bytes(b, "abcdefghijklmnop", 16);
    expect_fail(b, "past end of file", "9223372036854775808");
    /* a value string of length 2^63 and 2^64-1 */
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "k.str");
    fb_u32(b, GGUF_TYPE_STRING);
    fb_u64(b, UINT64_C(1) << 63);
    fb_bytes(b, "abcdefghijklmnop", 16);
    expect_fail(b, "past end of file", "'k.str'");
    /* array counts of 2^63 for every element kind, and 2^61 u64s (2^64 bytes) */
    const uint32_t kinds[] = {GGUF_TYPE_UINT8, GGUF_TYPE_UINT64, GGUF_TYPE_STRING, GGUF_TYPE_ARRAY, GGUF_TYPE_BOOL};
    const uint64_t counts[] = {UINT64_C(1) << 63, UINT64_C(1) << 61, UINT64_MAX};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            fb_hdr(b, 3, 0, 1);
            fb_str(b, "k.arr");
            fb_u32(b, GGUF_TYPE_ARRAY);
            fb_u32(b, kinds[i]);
            fb_u64(b, counts[j]);
            fb_bytes(b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
            expect_fail(b, "past end of file", "'k.arr'");
        }
    /* a string array whose count fits but whose strings do not */
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "k.strs");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_STRING);
    fb_u64(b, 2);
    fb_str(b, "ok");
    fb_u64(b, 100);
    fb_bytes(b, "short", 5);
    expect_fail(b, "past end of file", "length 100");

    /* duplicate keys */
    fb_hdr(b, 3, 0, 2);
    fb_kv_u32(b, "k.dup", 1);
    fb_kv_u32(b, "k.dup", 2);
    expect_fail(b, "duplicate key", "'k.dup'");
    /* several duplicates: the first repeat in file order is reported (key 3, 'b', first at key 1) */
    fb_hdr(b, 3, 0, 5);
    fb_kv_u32(b, "a", 1);                       /* byte 24 */
    fb_kv_u32(b, "b", 1);                       /* byte 41 */
    fb_kv_u32(b, "c", 1);                       /* byte 58 */
    fb_kv_u32(b, "b", 1);                       /* byte 75 */
    fb_kv_u32(b, "a", 1);                       /* byte 92 */
    expect_fail(b, "key 'b': duplicate key (first at byte 41) at byte 75", NULL);
    /* an empty key */
    fb_hdr(b, 3, 0, 1);
    fb_kv_u32(b, "", 1);
    expect_fail(b, "empty key", NULL);
    /* unknown value types, unknown array element types */
    const uint32_t bad_types[] = {13, 100, 0xffffffffu};
    for (int i = 0; i < 3; i++) {
        fb_hdr(b, 3, 0, 1);
        fb_str(b, "k.t");
        fb_u32(b, bad_types[i]);
        fb_u64(b, 0);
        expect_fail(b, "unknown value type", "'k.t'");
        fb_hdr(b, 3, 0, 1);
        fb_str(b, "k.t");
        fb_u32(b, GGUF_TYPE_ARRAY);
        fb_u32(b, bad_types[i]);
        fb_u64(b, 0);
        expect_fail(b, "unknown array element type", "'k.t'");
    }
    /* bools other than 0/1, as a value and in an array */
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "k.b");
    fb_u32(b, GGUF_TYPE_BOOL);
    fb_u8(b, 2);
    expect_fail(b, "bool value 2", "'k.b'");
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "k.b");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_BOOL);
    fb_u64(b, 3);
    fb_bytes(b, "\x01\x00\xff", 3);
    expect_fail(b, "bool value 255", "'k.b'");
    /* arrays nested 16 levels deep: fine; 17 or 18: refused */
    for (int depth = 16; depth <= 18; depth++) {
        fb_hdr(b, 3, 0, 1);
        fb_str(b, "k.deep");
        fb_u32(b, GGUF_TYPE_ARRAY);
        for (int i = 0; i < depth - 1; i++) {
            fb_u32(b, GGUF_TYPE_ARRAY);
            fb_u64(b, 1);
        }
        fb_u32(b, GGUF_TYPE_UINT8);
        fb_u64(b, 0);
        if (depth == 16)
            expect_ok(b, "16 levels");
        else
            expect_fail(b, "nested", "'k.deep'");
    }
    /* general.alignment: not a power of two, zero, wrong type */
    const uint32_t aligns[] = {0, 3, 48, 0x80000001u};
    for (int i = 0; i < 4; i++) {
        fb_hdr(b, 3, 0, 1);
        fb_kv_u32(b, "general.alignment", aligns[i]);
        expect_fail(b, "alignment", "power of two");
    }
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "general.alignment");
    fb_u32(b, GGUF_TYPE_INT32);
    fb_u32(b, 32);
    expect_fail(b, "alignment", "expected u32");
    fb_hdr(b, 3, 0, 1);
    fb_kv_str(b, "general.alignment", "32");
    expect_fail(b, "alignment", "expected u32");
    fb_hdr(b, 3, 0, 1);
    fb_kv_u32(b, "general.alignment", 64);
    expect_ok(b, "alignment 64");
}

static void test_forged_tensors(struct fb *b) {
    /* tensor data past EOF: 32 bytes needed, 16 present */
    fb_baseline_meta(b, 1);
    fb_tensor(b, "blk.0.attn_q.weight", 2, ne42, DJ_TYPE_F32, 0);
    fb_data(b, 32, 16);
    expect_fail(b, "past end of file", "tensor 'blk.0.attn_q.weight' data [");
    /* an offset so large that data_offset + offset wraps */
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, UINT64_MAX - 31);
    fb_data(b, 32, 32);
    expect_fail(b, "past end of file", "'w'");
    /* the second tensor starts past the end */
    fb_baseline_meta(b, 2);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 0);
    fb_tensor(b, "w2", 2, ne42, DJ_TYPE_F32, 64);
    fb_data(b, 32, 64);
    expect_fail(b, "past end of file", "'w2'");
    /* tensor infos truncated: the data section cannot start */
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 1, ne42, DJ_TYPE_F32, 0);
    expect_fail(b, "past end of file", NULL);
    /* duplicate names */
    fb_baseline_meta(b, 2);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 0);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 32);
    fb_data(b, 32, 64);
    expect_fail(b, "duplicate tensor name", "'w'");
    /* a name with control bytes is escaped, the message stays on one line */
    fb_baseline_meta(b, 2);
    fb_tensor(b, "a\nb", 2, ne42, DJ_TYPE_F32, 0);
    fb_tensor(b, "a\nb", 2, ne42, DJ_TYPE_F32, 32);
    fb_data(b, 32, 64);
    expect_fail(b, "duplicate", "'a\\x0ab'");
    /* unknown ggml types: retired ids, one past the last, far out */
    const uint32_t bad[] = {4, 5, 31, 36, DJ_TYPE_COUNT, 200, 0xffffffffu};
    for (int i = 0; i < 7; i++) {
        char want[32];
        snprintf(want, sizeof want, "unknown ggml type %u", bad[i]);
        fb_baseline_meta(b, 1);
        fb_tensor(b, "blk.0.attn_k.weight", 2, ne42, bad[i], 0);
        fb_data(b, 32, 32);
        expect_fail(b, want, "'blk.0.attn_k.weight'");
    }
    /* misaligned offsets */
    const uint64_t offs[] = {8, 1, 31, 33};
    for (int i = 0; i < 4; i++) {
        fb_baseline_meta(b, 1);
        fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, offs[i]);
        fb_data(b, 32, 128);
        expect_fail(b, "not a multiple of the alignment", "'w'");
    }
    /* n_dims 0 and 5 */
    const uint32_t nd[] = {0, 5, 1000};
    for (int i = 0; i < 3; i++) {
        fb_baseline_meta(b, 1);
        int64_t ne[5] = {4, 2, 1, 1, 1};
        fb_tensor(b, "w", nd[i] <= 5 ? nd[i] : 5, ne, DJ_TYPE_F32, 0);
        memcpy(b->p + b->len - 8 - 4 - 8 * (nd[i] <= 5 ? nd[i] : 5) - 4, &nd[i], 4);
        fb_data(b, 32, 32);
        expect_fail(b, "n_dims", "'w'");
    }
    /* negative dims, element counts and byte sizes that overflow */
    const int64_t neg[] = {4, -1};
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 2, neg, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "negative", "'w'");
    const int64_t big2[] = {INT64_C(1) << 32, INT64_C(1) << 32};
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 2, big2, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "overflows", "'w'");
    const int64_t big4[] = {INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 20};
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 4, big4, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "overflows", "'w'");
    const int64_t bytes_ovf[] = {INT64_C(1) << 62}; /* 2^62 elements fit int64, 2^64 bytes do not fit size_t */
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 1, bytes_ovf, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "overflows", "'w'");
    const int64_t huge_ok[] = {INT64_C(1) << 40}; /* representable, but not in this file */
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 1, huge_ok, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "past end of file", "'w'");
    /* a zero-sized tensor at the end of the data section is fine */
    const int64_t zero[] = {0, 7};
    fb_baseline_meta(b, 2);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 0);
    fb_tensor(b, "z", 2, zero, DJ_TYPE_F32, 32);
    fb_data(b, 32, 32);
    expect_ok(b, "zero-sized tensor");
    /* row length not a multiple of the block size */
    const int64_t ne33[] = {33, 1};
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 2, ne33, DJ_TYPE_Q4_0, 0);
    fb_data(b, 32, 64);
    expect_fail(b, "block size", "'w'");
    /* the data section itself must fit: alignment 2^31 pushes it past EOF */
    fb_hdr(b, 3, 1, 1);
    fb_kv_u32(b, "general.alignment", UINT32_C(1) << 31);
    fb_tensor(b, "w", 2, ne42, DJ_TYPE_F32, 0);
    fb_data(b, 32, 32);
    expect_fail(b, "data section", "past end of file");
    /* no padding after the last tensor is fine (llama.cpp files may end so) */
    const int64_t ne3[] = {3};
    fb_baseline_meta(b, 1);
    fb_tensor(b, "w", 1, ne3, DJ_TYPE_F32, 0);
    fb_data(b, 32, 12);
    expect_ok(b, "unpadded end");
    /* without tensors the file may end right after the metadata */
    fb_baseline_meta(b, 0);
    expect_ok(b, "no tensors, no padding");
}

/* ---- stories260K: truncations and flips ------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) { /* xorshift64*, seeded: the run is reproducible */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

static void test_truncations(const uint8_t *file, size_t size, size_t data_offset) {
    size_t n_cuts = 0, n_fail = 0;
    size_t dense = data_offset + 64 < size ? data_offset + 64 : size;
    for (size_t cut = 0; cut < dense; cut++, n_cuts++) n_fail += try_open(file, cut, "cut.gguf") == DJ_ERR_FORMAT;
    for (int i = 0; i < 600; i++, n_cuts++) {
        size_t cut = dense + (size - dense) * (size_t)i / 600;
        n_fail += try_open(file, cut, "cut.gguf") == DJ_ERR_FORMAT;
    }
    /* the last tensor ends at the last byte, so every cut is an error */
    CHECKF(n_fail == n_cuts, "%zu of %zu cuts failed", n_fail, n_cuts);
    CHECK(try_open(file, size, "whole.gguf") == DJ_OK);
    if (verbose) printf("truncations: %zu cuts, all rejected\n", n_cuts);
}

static void test_flips(uint8_t *file, size_t size, size_t region, int iters, const char *what) {
    int n_ok = 0, n_fail = 0;
    for (int it = 0; it < iters; it++) {
        size_t pos[8];
        uint8_t old[8];
        int n = 1 + (int)(rng() % 8);
        for (int j = 0; j < n; j++) {
            /* mostly the metadata, sometimes anywhere */
            size_t span = rng() % 4 ? region : size;
            pos[j] = (size_t)(rng() % span);
            old[j] = file[pos[j]];
            uint64_t r = rng();
            file[pos[j]] = r & 0x100 ? (uint8_t)r : (uint8_t)(file[pos[j]] ^ (1u << (r % 8)));
        }
        if (try_open(file, size, what) == DJ_OK)
            n_ok++;
        else
            n_fail++;
        for (int j = n - 1; j >= 0; j--) file[pos[j]] = old[j];
    }
    CHECK(n_ok + n_fail == iters);
    CHECK(n_fail > 0); /* flips in the header region break something */
    if (verbose) printf("flips in %s: %d opened, %d rejected\n", what, n_ok, n_fail);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    verbose = getenv("DJ_TEST_VERBOSE") != NULL;
    struct fb b = {0};
    test_forged_header(&b);
    test_forged_metadata(&b);
    test_forged_tensors(&b);
    free(b.p);

    size_t size = 0;
    uint8_t *file = (uint8_t *)test_read_file(test_shared_path(shared, "models/stories260K.gguf"), &size);
    CHECK(file != NULL && size == 1185376);
    if (file) {
        struct gguf_ctx *g = NULL;
        CHECK(gguf_open_memory(file, size, "stories260K.gguf", &g) == DJ_OK);
        size_t data_offset = g ? gguf_data_offset(g) : 0;
        gguf_close(g);
        test_truncations(file, size, data_offset);
        test_flips(file, size, data_offset, 3000, "stories260K.gguf");
        free(file);
    }
    file = (uint8_t *)test_read_file(test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf"), &size);
    CHECK(file != NULL);
    if (file) {
        test_flips(file, size, size, 200, "ggml-vocab-llama-spm.gguf");
        free(file);
    }
    printf("(sink %llu)\n", (unsigned long long)(sink & 1));
    TEST_END();
}
