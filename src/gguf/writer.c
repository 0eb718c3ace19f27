/*
 * writer.c — the GGUF writer: collects metadata and tensor references,
 * then lays out and writes a file that deja's reader and llama.cpp both load.
 *
 * Layout produced (offsets are what llama.cpp's reader requires: each tensor
 * starts where the previous one ended, rounded up to the alignment):
 *
 *   header | kv in set order | tensor infos in add order | zero pad to A
 *   | tensor 0 | zero pad to A | tensor 1 | zero pad to A | ... | last | pad
 *
 * With no tensors there is no padding after the metadata (llama.cpp's
 * vocab-only files end there, and copying one gives the same bytes).  The
 * alignment A is general.alignment if set (a u32 power of two, checked when
 * it is set), else 32.
 *
 * Ownership: keys, values and names are copied when set; tensor data is only
 * referenced and must stay alive until gguf_writer_write* returns.  A failed
 * call leaves the writer as it was.  Files are written to "<path>.tmp",
 * fsync'ed and renamed over <path>, so a reader never sees a partial file and
 * a failed write (a full disk) removes the temporary and leaves <path> as it
 * was.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf_internal.h"

/* An owned value.  Arrays are deep copies: the const pointers of struct
 * gguf_arr point at memory this module allocated (freed by value_free). */
struct wvalue {
    enum gguf_type type;
    uint8_t scalar[8];
    struct gguf_str str;
    struct gguf_arr arr;
};

struct wkv {
    char *key;
    size_t key_len;
    struct wvalue v;
};

struct wtensor {
    char *name;
    size_t name_len;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    size_t nbytes;
    gguf_fill_fn fill; /* non-NULL: data is produced at write time */
    void *fill_arg;
};

struct gguf_writer {
    uint32_t version;
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
};

/* ---- owned values ------------------------------------------------------- */

static void arr_free(struct gguf_arr *a) {
    if (a->strs)
        for (size_t i = 0; i < a->n; i++) free((void *)a->strs[i].ptr);
    if (a->arrs)
        for (size_t i = 0; i < a->n; i++) arr_free((struct gguf_arr *)&a->arrs[i]);
    free((void *)a->data);
    free((void *)a->strs);
    free((void *)a->arrs);
    memset(a, 0, sizeof *a);
}

static void value_free(struct wvalue *v) {
    free((void *)v->str.ptr);
    arr_free(&v->arr);
}

static bool copy_bytes(const void *p, size_t len, const char **out) {
    char *c = malloc(len ? len : 1);
    if (!c) return false;
    if (len) memcpy(c, p, len);
    *out = c;
    return true;
}

/* Checks a caller's array (types, bool values, depth, pointers) before copying it. */
static enum dj_status arr_check(const struct gguf_arr *a, int depth, const char *key) {
    if ((unsigned)a->type >= GGUF_TYPE_COUNT)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': unknown array element type %d", key, (int)a->type);
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': arrays nested more than %d deep", key, GGUF_MAX_ARRAY_DEPTH);
    if (a->n == 0) return DJ_OK;
    if (a->type == GGUF_TYPE_STRING) {
        if (!a->strs) return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': string array without strings", key);
        for (size_t i = 0; i < a->n; i++)
            if (!a->strs[i].ptr && a->strs[i].len)
                return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': string %zu is NULL", key, i);
    } else if (a->type == GGUF_TYPE_ARRAY) {
        if (!a->arrs) return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': nested array without elements", key);
        for (size_t i = 0; i < a->n; i++) {
            enum dj_status st = arr_check(&a->arrs[i], depth + 1, key);
            if (st) return st;
        }
    } else {
        size_t bytes;
        if (!a->data) return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': array without data", key);
        if (dj_mul_overflow(a->n, gguf_type_size(a->type), &bytes))
            return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': array of %zu elements is too large", key, a->n);
        if (a->type == GGUF_TYPE_BOOL)
            for (size_t i = 0; i < a->n; i++)
                if (((const uint8_t *)a->data)[i] > 1)
                    return dj_fail(DJ_ERR_INVALID, "gguf writer: key '%s': bool element %zu is %u, not 0 or 1", key, i,
                                   ((const uint8_t *)a->data)[i]);
    }
    return DJ_OK;
}

/* Deep copy of a checked array; false on allocation failure (dst freed). */
static bool arr_copy(struct gguf_arr *dst, const struct gguf_arr *src) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    if (src->type == GGUF_TYPE_STRING) {
        struct gguf_str *s = calloc(src->n ? src->n : 1, sizeof *s);
        if (!s) return false;
        dst->strs = s;
        for (size_t i = 0; i < src->n; i++, dst->n++) {
            s[i].len = src->strs[i].len;
            if (!copy_bytes(src->strs[i].ptr, src->strs[i].len, &s[i].ptr)) goto fail;
        }
    } else if (src->type == GGUF_TYPE_ARRAY) {
        struct gguf_arr *a = calloc(src->n ? src->n : 1, sizeof *a);
        if (!a) return false;
        dst->arrs = a;
        for (size_t i = 0; i < src->n; i++, dst->n++)
            if (!arr_copy(&a[i], &src->arrs[i])) goto fail;
    } else {
        const char *d;
        if (!copy_bytes(src->data, src->n * gguf_type_size(src->type), &d)) return false;
        dst->data = d;
        dst->n = src->n;
    }
    return true;
fail:
    arr_free(dst);
    return false;
}

/* ---- the writer object ---------------------------------------------------- */

struct gguf_writer *gguf_writer_create(void) {
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->version = 3;
    return w;
}

void gguf_writer_destroy(struct gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        value_free(&w->kv[i].v);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static size_t find_kv(const struct gguf_writer *w, const char *key, size_t len) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && memcmp(w->kv[i].key, key, len) == 0) return i;
    return SIZE_MAX;
}

static bool grow(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : 16, bytes;
    if (dj_mul_overflow(nc, elem, &bytes)) return false;
    void *q = realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* Stores v under key (replacing an existing value in place).  Takes
 * ownership of v's memory: on failure it is freed. */
static enum dj_status put(struct gguf_writer *w, const char *key, size_t key_len, struct wvalue *v) {
    char k[100];
    enum dj_status st = DJ_OK;
    if (!w || !key) {
        st = dj_fail(DJ_ERR_INVALID, "gguf writer: NULL writer or key");
        goto fail;
    }
    if (key_len == 0) {
        st = dj_fail(DJ_ERR_INVALID, "gguf writer: empty key");
        goto fail;
    }
    if (key_len == strlen(GGUF_KEY_ALIGNMENT) && memcmp(key, GGUF_KEY_ALIGNMENT, key_len) == 0) {
        uint32_t a;
        memcpy(&a, v->scalar, 4);
        if (v->type != GGUF_TYPE_UINT32) {
            st = dj_fail(DJ_ERR_INVALID, "gguf writer: general.alignment must be a u32, not %s", gguf_type_name(v->type));
            goto fail;
        }
        if (!gguf_is_pow2(a)) {
            st = dj_fail(DJ_ERR_INVALID, "gguf writer: general.alignment %" PRIu32 " is not a nonzero power of two", a);
            goto fail;
        }
    }
    size_t i = find_kv(w, key, key_len);
    if (i != SIZE_MAX) {
        value_free(&w->kv[i].v);
        w->kv[i].v = *v;
        return DJ_OK;
    }
    const char *kc;
    if (!grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv) || !copy_bytes(key, key_len, &kc)) {
        st = dj_fail(DJ_ERR_NOMEM, "gguf writer: out of memory for key '%s'", gguf_fmt_bytes(k, sizeof k, key, key_len));
        goto fail;
    }
    w->kv[w->n_kv++] = (struct wkv){.key = (char *)kc, .key_len = key_len, .v = *v};
    return DJ_OK;
fail:
    value_free(v);
    return st;
}

static enum dj_status put_scalar(struct gguf_writer *w, const char *key, enum gguf_type t, const void *p) {
    struct wvalue v = {.type = t};
    memcpy(v.scalar, p, gguf_type_size(t));
    return put(w, key, key ? strlen(key) : 0, &v);
}

enum dj_status gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v) { return put_scalar(w, key, GGUF_TYPE_UINT8, &v); }
enum dj_status gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v) { return put_scalar(w, key, GGUF_TYPE_INT8, &v); }
enum dj_status gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v) { return put_scalar(w, key, GGUF_TYPE_UINT16, &v); }
enum dj_status gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v) { return put_scalar(w, key, GGUF_TYPE_INT16, &v); }
enum dj_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) { return put_scalar(w, key, GGUF_TYPE_UINT32, &v); }
enum dj_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) { return put_scalar(w, key, GGUF_TYPE_INT32, &v); }
enum dj_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) { return put_scalar(w, key, GGUF_TYPE_UINT64, &v); }
enum dj_status gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v) { return put_scalar(w, key, GGUF_TYPE_INT64, &v); }
enum dj_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) { return put_scalar(w, key, GGUF_TYPE_FLOAT32, &v); }
enum dj_status gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v) { return put_scalar(w, key, GGUF_TYPE_FLOAT64, &v); }

enum dj_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

static enum dj_status put_str(struct gguf_writer *w, const char *key, size_t key_len, const char *s, size_t len) {
    struct wvalue v = {.type = GGUF_TYPE_STRING};
    if (!s && len) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL string");
    if (!copy_bytes(s, len, &v.str.ptr)) return dj_fail(DJ_ERR_NOMEM, "gguf writer: out of memory for a %zu-byte string", len);
    v.str.len = len;
    return put(w, key, key_len, &v);
}

enum dj_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s, size_t len) {
    return put_str(w, key, key ? strlen(key) : 0, s, len);
}

static enum dj_status put_arr(struct gguf_writer *w, const char *key, size_t key_len, const struct gguf_arr *arr) {
    char k[100];
    if (!key) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL key");
    gguf_fmt_bytes(k, sizeof k, key, key_len);
    enum dj_status st = arr_check(arr, 0, k);
    if (st) return st;
    struct wvalue v = {.type = GGUF_TYPE_ARRAY};
    if (!arr_copy(&v.arr, arr)) return dj_fail(DJ_ERR_NOMEM, "gguf writer: key '%s': out of memory for the array", k);
    return put(w, key, key_len, &v);
}

enum dj_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type type, const void *data, size_t n) {
    if (type == GGUF_TYPE_STRING || type == GGUF_TYPE_ARRAY || (unsigned)type >= GGUF_TYPE_COUNT)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: gguf_writer_set_arr takes scalar element types, not %s",
                       gguf_type_name(type));
    struct gguf_arr a = {.type = type, .n = n, .data = data};
    return put_arr(w, key, key ? strlen(key) : 0, &a);
}

enum dj_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs, size_t n) {
    struct gguf_arr a = {.type = GGUF_TYPE_STRING, .n = n, .strs = strs};
    return put_arr(w, key, key ? strlen(key) : 0, &a);
}

enum dj_status gguf_writer_set_arr_value(struct gguf_writer *w, const char *key, const struct gguf_arr *arr) {
    if (!arr) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL array");
    return put_arr(w, key, key ? strlen(key) : 0, arr);
}

enum dj_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_ctx *src, size_t i) {
    if (!src || i >= gguf_n_kv(src)) return dj_fail(DJ_ERR_INVALID, "gguf writer: copy_kv: no key %zu in the source", i);
    struct gguf_str key = gguf_kv_key(src, i);
    enum gguf_type t = gguf_kv_type(src, i);
    if (t == GGUF_TYPE_STRING) {
        struct gguf_str s;
        gguf_kv_str(src, i, &s);
        return put_str(w, key.ptr, key.len, s.ptr, s.len);
    }
    if (t == GGUF_TYPE_ARRAY) {
        struct gguf_arr a;
        gguf_kv_arr(src, i, &a);
        return put_arr(w, key.ptr, key.len, &a);
    }
    struct wvalue v = {.type = t};
    memcpy(v.scalar, gguf_kv_scalar(src, i), gguf_type_size(t));
    return put(w, key.ptr, key.len, &v);
}

enum dj_status gguf_writer_remove_key(struct gguf_writer *w, const char *key) {
    if (!w || !key) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL writer or key");
    size_t i = find_kv(w, key, strlen(key));
    if (i == SIZE_MAX) {
        char k[100];
        return dj_fail(DJ_ERR_NOT_FOUND, "gguf writer: key '%s' not found", gguf_fmt_bytes(k, sizeof k, key, strlen(key)));
    }
    free(w->kv[i].key);
    value_free(&w->kv[i].v);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    return DJ_OK;
}

static enum dj_status add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                 const int64_t *ne, const void *data, size_t nbytes, gguf_fill_fn fill, void *fill_arg) {
    char nm[100];
    if (!w || !name || !ne) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL writer, tensor name or shape");
    size_t len = strlen(name);
    gguf_fmt_bytes(nm, sizeof nm, name, len);
    if (len > GGUF_MAX_TENSOR_NAME)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor name '%s' is %zu bytes; llama.cpp allows at most %d", nm, len,
                       GGUF_MAX_TENSOR_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == len && memcmp(w->t[i].name, name, len) == 0)
            return dj_fail(DJ_ERR_INVALID, "gguf writer: duplicate tensor name '%s'", nm);
    const struct dj_type_info *ti = dj_type_info(type);
    if (!ti) return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': unknown ggml type %" PRIu32, nm, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': n_dims %" PRIu32 " is not in 1..%d", nm, n_dims, GGUF_MAX_DIMS);
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data, .nbytes = nbytes, .fill = fill, .fill_arg = fill_arg};
    int64_t nelem = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0 || dj_mul64_overflow(nelem, t.ne[d], &nelem))
            return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': bad dimension %" PRId64, nm, t.ne[d]);
    }
    size_t want;
    if (!dj_row_bytes(type, t.ne[0], &want) || dj_mul_overflow(want, (size_t)t.ne[1], &want) ||
        dj_mul_overflow(want, (size_t)t.ne[2], &want) || dj_mul_overflow(want, (size_t)t.ne[3], &want))
        return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': row length %" PRId64 " is not a multiple of %s's block size %" PRIu32 " or the size overflows",
                       nm, t.ne[0], ti->name, ti->blck);
    if (want != nbytes)
        return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': nbytes %zu, but its shape and type need %zu", nm, nbytes, want);
    if (!data && !fill && nbytes) return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': NULL data", nm);
    const char *nc;
    if (!grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t) || !copy_bytes(name, len, &nc))
        return dj_fail(DJ_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", nm);
    t.name = (char *)nc;
    t.name_len = len;
    w->t[w->n_t++] = t;
    return DJ_OK;
}

enum dj_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                      const int64_t *ne, const void *data, size_t nbytes) {
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, NULL, NULL);
}

enum dj_status gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                           const int64_t *ne, size_t nbytes, gguf_fill_fn fill, void *arg) {
    if (!fill) return dj_fail(DJ_ERR_INVALID, "gguf writer: tensor '%s': NULL fill function", name ? name : "(null)");
    return add_tensor(w, name, type, n_dims, ne, NULL, nbytes, fill, arg);
}

enum dj_status gguf_writer_set_version(struct gguf_writer *w, uint32_t version) {
    if (!w || (version != 2 && version != 3))
        return dj_fail(DJ_ERR_INVALID, "gguf writer: version %" PRIu32 " is not 2 or 3", version);
    w->version = version;
    return DJ_OK;
}

/* ---- serialization ------------------------------------------------------------ */

struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

static void put_bytes(struct wbuf *b, const void *p, size_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->len) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc - b->len < n) {
            if (dj_mul_overflow(nc, 2, &nc)) {
                b->oom = true;
                return;
            }
        }
        uint8_t *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_u32(struct wbuf *b, uint32_t v) { put_bytes(b, &v, 4); }
static void put_u64(struct wbuf *b, uint64_t v) { put_bytes(b, &v, 8); }
static void put_str_(struct wbuf *b, const void *p, size_t n) {
    put_u64(b, n);
    put_bytes(b, p, n);
}

static void put_arr_(struct wbuf *b, const struct gguf_arr *a) {
    put_u32(b, (uint32_t)a->type);
    put_u64(b, a->n);
    if (a->type == GGUF_TYPE_STRING)
        for (size_t i = 0; i < a->n; i++) put_str_(b, a->strs[i].ptr, a->strs[i].len);
    else if (a->type == GGUF_TYPE_ARRAY)
        for (size_t i = 0; i < a->n; i++) put_arr_(b, &a->arrs[i]);
    else
        put_bytes(b, a->data, a->n * gguf_type_size(a->type));
}

static size_t writer_alignment(const struct gguf_writer *w) {
    size_t i = find_kv(w, GGUF_KEY_ALIGNMENT, strlen(GGUF_KEY_ALIGNMENT));
    uint32_t a = GGUF_DEFAULT_ALIGNMENT;
    if (i != SIZE_MAX) memcpy(&a, w->kv[i].v.scalar, 4); /* checked by put(): a u32 power of two */
    return a;
}

/* The layout: the metadata bytes (header, kv, tensor infos) in *meta, the
 * offset of the data section and the total file size. */
struct layout {
    struct wbuf meta;
    size_t align;
    size_t data_offset;
    size_t total;
};

static enum dj_status lay_out(const struct gguf_writer *w, struct layout *lo) {
    memset(lo, 0, sizeof *lo);
    lo->align = writer_alignment(w);
    struct wbuf *b = &lo->meta;
    put_bytes(b, GGUF_MAGIC, 4);
    put_u32(b, w->version);
    put_u64(b, w->n_t);
    put_u64(b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kv[i];
        put_str_(b, kv->key, kv->key_len);
        put_u32(b, (uint32_t)kv->v.type);
        if (kv->v.type == GGUF_TYPE_STRING)
            put_str_(b, kv->v.str.ptr, kv->v.str.len);
        else if (kv->v.type == GGUF_TYPE_ARRAY)
            put_arr_(b, &kv->v.arr);
        else
            put_bytes(b, kv->v.scalar, gguf_type_size(kv->v.type));
    }
    size_t off = 0;
    bool overflow = false;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        put_str_(b, t->name, t->name_len);
        put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(b, (uint64_t)t->ne[d]);
        put_u32(b, t->type);
        put_u64(b, off);
        overflow = overflow || dj_add_overflow(off, t->nbytes, &off) || dj_align_up(off, lo->align, &off);
    }
    if (b->oom) {
        free(b->p);
        return dj_fail(DJ_ERR_NOMEM, "gguf writer: out of memory for %zu bytes of metadata", b->len);
    }
    if (w->n_t == 0) {
        lo->data_offset = lo->total = b->len;
    } else if (overflow || dj_align_up(b->len, lo->align, &lo->data_offset) ||
               dj_add_overflow(lo->data_offset, off, &lo->total)) {
        free(b->p);
        return dj_fail(DJ_ERR_INVALID, "gguf writer: file size overflows");
    }
    return DJ_OK;
}

enum dj_status gguf_writer_write_memory(struct gguf_writer *w, void **out, size_t *out_size) {
    struct layout lo;
    if (!w || !out || !out_size) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL argument");
    enum dj_status st = lay_out(w, &lo);
    if (st) return st;
    uint8_t *p = calloc(1, lo.total);
    if (!p) {
        free(lo.meta.p);
        return dj_fail(DJ_ERR_NOMEM, "gguf writer: out of memory for a %zu-byte file", lo.total);
    }
    memcpy(p, lo.meta.p, lo.meta.len);
    size_t off = lo.data_offset;
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].fill && w->t[i].nbytes) {
            if ((st = w->t[i].fill(w->t[i].fill_arg, p + off, w->t[i].nbytes))) {
                free(p);
                free(lo.meta.p);
                return st;
            }
        } else if (w->t[i].nbytes) {
            memcpy(p + off, w->t[i].data, w->t[i].nbytes);
        }
        off += w->t[i].nbytes;
        dj_align_up(off, lo.align, &off); /* cannot overflow: lay_out checked the total */
    }
    free(lo.meta.p);
    *out = p;
    *out_size = lo.total;
    return DJ_OK;
}

/* ---- writing a file -------------------------------------------------------------- */

struct out_file {
    int fd;
    size_t pos;
    const char *path, *tmp;
};

static enum dj_status out_write(struct out_file *f, const void *p, size_t n) {
    const uint8_t *s = p;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = write(f->fd, s, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return dj_fail(DJ_ERR_IO, "%s: writing %s failed at byte %zu: %s", f->path, f->tmp, f->pos,
                           r < 0 ? strerror(errno) : "no progress (disk full?)");
        s += r;
        n -= (size_t)r;
        f->pos += (size_t)r;
    }
    return DJ_OK;
}

static enum dj_status out_pad(struct out_file *f, size_t align) {
    static const uint8_t zeros[4096];
    size_t target;
    dj_align_up(f->pos, align, &target); /* within the checked total */
    while (f->pos < target) {
        size_t n = target - f->pos < sizeof zeros ? target - f->pos : sizeof zeros;
        enum dj_status st = out_write(f, zeros, n);
        if (st) return st;
    }
    return DJ_OK;
}

/* Makes the rename durable: fsync the directory holding path (best effort:
 * some file systems refuse fsync on directories). */
static void sync_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(copy);
}

enum dj_status gguf_writer_write(struct gguf_writer *w, const char *path) {
    if (!w || !path) return dj_fail(DJ_ERR_INVALID, "gguf writer: NULL argument");
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    struct layout lo;
    enum dj_status st = lay_out(w, &lo);
    if (st) {
        free(tmp);
        return st;
    }
    struct out_file f = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), .path = path, .tmp = tmp};
    if (f.fd < 0) {
        st = dj_fail(DJ_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(lo.meta.p);
        free(tmp);
        return st;
    }
    st = out_write(&f, lo.meta.p, lo.meta.len);
    if (!st && w->n_t) st = out_pad(&f, lo.align);
    void *buf = NULL; /* one buffer for the filled tensors, grown to the largest */
    size_t buf_cap = 0;
    for (size_t i = 0; !st && i < w->n_t; i++) {
        const void *data = w->t[i].data;
        if (w->t[i].fill && w->t[i].nbytes) {
            if (w->t[i].nbytes > buf_cap) {
                free(buf);
                buf_cap = 0;
                if (!(buf = malloc(w->t[i].nbytes))) {
                    st = dj_fail(DJ_ERR_NOMEM, "%s: out of memory for a %zu-byte tensor", path, w->t[i].nbytes);
                    break;
                }
                buf_cap = w->t[i].nbytes;
            }
            if ((st = w->t[i].fill(w->t[i].fill_arg, buf, w->t[i].nbytes))) break;
            data = buf;
        }
        st = out_write(&f, data, w->t[i].nbytes);
        if (!st) st = out_pad(&f, lo.align);
    }
    free(buf);
    if (!st && fsync(f.fd) != 0) st = dj_fail(DJ_ERR_IO, "%s: fsync of %s failed: %s", path, tmp, strerror(errno));
    if (close(f.fd) != 0 && !st) st = dj_fail(DJ_ERR_IO, "%s: closing %s failed: %s", path, tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = dj_fail(DJ_ERR_IO, "%s: renaming %s failed: %s", path, tmp, strerror(errno));
    if (st)
        unlink(tmp);
    else
        sync_dir(path);
    DJ_ASSERT(st || f.pos == lo.total);
    free(lo.meta.p);
    free(tmp);
    return st;
}
