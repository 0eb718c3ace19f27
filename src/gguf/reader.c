/*
 * reader.c — the GGUF v2/v3 reader: maps a file read-only, parses and
 * validates everything once in gguf_open*, and serves metadata and tensor
 * infos from the parsed tables afterwards.  Getters never touch a byte that
 * open did not check, so a context that opened is safe to read from any
 * number of threads.
 *
 * Validation, in file order (each failure is DJ_ERR_FORMAT with a message
 * "<file>: [key '<k>': | tensor '<t>': ]<what> at byte <offset>"):
 *   magic "GGUF"; version 2 or 3; n_kv and n_tensors no more than the bytes
 *   after the header can hold (GGUF_MIN_*_BYTES each); every string length
 *   and array count against the bytes left; key and array element type ids;
 *   bools 0 or 1 (llama.cpp's spec: anything else is invalid); non-empty,
 *   unique keys; general.alignment a u32 and a nonzero power of two;
 *   tensor names unique; n_dims in 1..4; dims >= 0 with an element count and
 *   byte size that fit int64/size_t; known ggml type; row length a multiple
 *   of the block size; offset a multiple of the alignment; data
 *   [data_offset + offset, + nbytes) inside the file.
 *
 * Memory: the context owns a pool of blocks (kv table, tensor table, name
 * indexes, string and nested-array element tables).  Every allocation is
 * made only after the bytes it describes were found to be present, so the
 * total is a small constant times the metadata size, never a count taken on
 * faith from the file.  Scalar values, strings and scalar arrays point into
 * the image and are not copied.
 *
 *   gguf_ctx ─ name, image [base, base+size), version, alignment, data_offset
 *     ├─ kv[n_kv]            { key, type, at, value → image / pool }
 *     ├─ tensors[n_tensors]  { name, ne, type, offset, nbytes, data → image }
 *     ├─ kv_index, tensor_index: names sorted, for binary search
 *     └─ pool → block → block → ...   (freed together by gguf_close)
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian values in place: it needs a little-endian host"
#endif

struct kv_entry {
    struct gguf_str key;
    enum gguf_type type;
    size_t at; /* byte offset of the key in the file, for messages */
    union {
        const void *scalar;  /* scalar types: the value's bytes in the image */
        struct gguf_str str; /* GGUF_TYPE_STRING */
        struct gguf_arr arr; /* GGUF_TYPE_ARRAY */
    } v;
};

_Static_assert(offsetof(struct kv_entry, key) == 0, "index_build reads the name at the start of an entry");
_Static_assert(offsetof(struct gguf_tensor, name) == 0, "index_build reads the name at the start of an entry");

struct pool_block {
    struct pool_block *next;
    max_align_t data[];
};

/* Names sorted bytewise (then by position), for lookups by binary search and
 * duplicate detection in O(n log n) whatever the names are: a hash table
 * would let a crafted file with colliding names make open quadratic. */
struct name_ref {
    const char *ptr;
    size_t len;
    size_t i; /* index of the entry */
};

struct name_index {
    struct name_ref *refs;
    size_t n;
};

struct gguf_ctx {
    char *name;
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when the image is our mapping */
    size_t map_len;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    size_t n_kv;
    struct kv_entry *kv;
    size_t n_tensors;
    struct gguf_tensor *tensors;
    size_t *tensor_at; /* byte offset of each tensor info, for messages */
    struct name_index kv_index;
    struct name_index tensor_index;
    struct pool_block *pool;
};

/* ---- small helpers ------------------------------------------------------- */

const char *gguf_fmt_bytes(char *buf, size_t cap, const void *p, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = p;
    size_t o = 0;
    DJ_ASSERT(cap >= 16);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        size_t w = (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : 4;
        if (o + w + 4 > cap) { /* room for "..." and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (w == 1) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}

static void *pool_alloc(struct gguf_ctx *ctx, size_t n, size_t size) {
    size_t bytes, total;
    if (dj_mul_overflow(n, size, &bytes) || dj_add_overflow(bytes, sizeof(struct pool_block), &total)) return NULL;
    struct pool_block *b = calloc(1, total);
    if (!b) return NULL;
    b->next = ctx->pool;
    ctx->pool = b;
    return b->data;
}

/* Orders names bytewise, shorter first on a common prefix; equal names by
 * position in the file, so the first of a group is the original. */
static int name_cmp(const void *pa, const void *pb) {
    const struct name_ref *a = pa, *b = pb;
    int c = memcmp(a->ptr, b->ptr, a->len < b->len ? a->len : b->len);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static bool same_name(const struct name_ref *a, const struct name_ref *b) {
    return a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0;
}

/* Builds the sorted index of n names (a struct gguf_str at the start of each
 * stride-sized entry).  Returns false on allocation failure.  *dup is the
 * entry that repeats an earlier name, the earliest such in file order, and
 * *first that earlier entry; SIZE_MAX when all names are distinct. */
static bool index_build(struct gguf_ctx *ctx, struct name_index *ix, const void *names, size_t stride, size_t n,
                        size_t *dup, size_t *first) {
    *dup = *first = SIZE_MAX;
    ix->refs = pool_alloc(ctx, n + 1, sizeof *ix->refs);
    if (!ix->refs) return false;
    ix->n = n;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_str *nm = (const struct gguf_str *)((const char *)names + i * stride);
        ix->refs[i] = (struct name_ref){nm->ptr, nm->len, i};
    }
    qsort(ix->refs, n, sizeof *ix->refs, name_cmp);
    for (size_t k = 1; k < n; k++)
        if (same_name(&ix->refs[k - 1], &ix->refs[k]) && (*dup == SIZE_MAX || ix->refs[k].i < *dup)) {
            size_t g = k - 1;
            while (g > 0 && same_name(&ix->refs[g - 1], &ix->refs[k])) g--;
            *dup = ix->refs[k].i;
            *first = ix->refs[g].i;
        }
    return true;
}

/* Index of the entry named p[0..len), or SIZE_MAX. */
static size_t index_find(const struct name_index *ix, const void *p, size_t len) {
    struct name_ref key = {p, len, 0};
    size_t lo = 0, hi = ix->n;
    while (lo < hi) { /* first ref >= (p, len, i = 0) */
        size_t mid = lo + (hi - lo) / 2;
        if (name_cmp(&ix->refs[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ix->n && same_name(&ix->refs[lo], &key) ? ix->refs[lo].i : SIZE_MAX;
}

/* ---- the parser ----------------------------------------------------------- */

struct parser {
    struct gguf_ctx *ctx;
    size_t pos;
    const char *item;          /* "key", "tensor" or NULL: what is being parsed */
    size_t item_i;             /* its index */
    struct gguf_str item_name; /* its name once known (ptr NULL before) */
};

/* Fails with "<file>: <item>: <what> at byte <at>". */
static enum dj_status perr(const struct parser *ps, size_t at, const char *fmt, ...) DJ_PRINTF(3, 4);
static enum dj_status perr(const struct parser *ps, size_t at, const char *fmt, ...) {
    char what[512], item[160] = "", nm[100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (ps->item && ps->item_name.ptr)
        snprintf(item, sizeof item, "%s '%s': ", ps->item,
                 gguf_fmt_bytes(nm, sizeof nm, ps->item_name.ptr, ps->item_name.len));
    else if (ps->item)
        snprintf(item, sizeof item, "%s %zu: ", ps->item, ps->item_i);
    return dj_fail(DJ_ERR_FORMAT, "%s: %s%s at byte %zu", ps->ctx->name, item, what, at);
}

static size_t left(const struct parser *ps) { return ps->ctx->size - ps->pos; }

static enum dj_status need(const struct parser *ps, uint64_t n, const char *what) {
    if (n > left(ps))
        return perr(ps, ps->pos, "%s (%" PRIu64 " bytes) extends past end of file (%zu bytes)", what, n,
                    ps->ctx->size);
    return DJ_OK;
}

static enum dj_status rd_u32(struct parser *ps, uint32_t *v, const char *what) {
    enum dj_status st = need(ps, 4, what);
    if (st) return st;
    memcpy(v, ps->ctx->base + ps->pos, 4);
    ps->pos += 4;
    return DJ_OK;
}

static enum dj_status rd_u64(struct parser *ps, uint64_t *v, const char *what) {
    enum dj_status st = need(ps, 8, what);
    if (st) return st;
    memcpy(v, ps->ctx->base + ps->pos, 8);
    ps->pos += 8;
    return DJ_OK;
}

static enum dj_status rd_str(struct parser *ps, struct gguf_str *s, const char *what) {
    uint64_t len;
    size_t at = ps->pos;
    enum dj_status st = rd_u64(ps, &len, what);
    if (st) return st;
    if (len > left(ps))
        return perr(ps, at, "%s length %" PRIu64 " extends past end of file (%zu bytes)", what, len, ps->ctx->size);
    s->ptr = (const char *)ps->ctx->base + ps->pos;
    s->len = (size_t)len;
    ps->pos += (size_t)len;
    return DJ_OK;
}

const char *gguf_type_name(enum gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

size_t gguf_type_size(enum gguf_type t) {
    static const unsigned char sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < GGUF_TYPE_COUNT ? sizes[t] : 0;
}

static enum dj_status parse_array(struct parser *ps, struct gguf_arr *out, int depth);

/* A scalar array or scalar value of n elements of type t at the cursor. */
static enum dj_status parse_scalars(struct parser *ps, enum gguf_type t, uint64_t n, const void **data,
                                    const char *what) {
    size_t esz = gguf_type_size(t), at = ps->pos;
    if (n > left(ps) / esz)
        return perr(ps, at, "%s: %" PRIu64 " x %zu-byte %s extends past end of file (%zu bytes)", what, n, esz,
                    gguf_type_name(t), ps->ctx->size);
    const uint8_t *p = ps->ctx->base + ps->pos;
    if (t == GGUF_TYPE_BOOL) {
        for (size_t i = 0; i < (size_t)n; i++)
            if (p[i] > 1) return perr(ps, at + i, "%s: bool value %u is not 0 or 1", what, p[i]);
    }
    *data = p;
    ps->pos += (size_t)n * esz;
    return DJ_OK;
}

static enum dj_status parse_array(struct parser *ps, struct gguf_arr *out, int depth) {
    size_t at = ps->pos;
    uint32_t et;
    uint64_t n;
    enum dj_status st = rd_u32(ps, &et, "array element type");
    if (st) return st;
    if (et >= GGUF_TYPE_COUNT) return perr(ps, at, "unknown array element type %" PRIu32, et);
    if (et == GGUF_TYPE_ARRAY && depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
        return perr(ps, at, "arrays nested more than %d deep", GGUF_MAX_ARRAY_DEPTH);
    if ((st = rd_u64(ps, &n, "array count"))) return st;
    memset(out, 0, sizeof *out);
    out->type = (enum gguf_type)et;
    if (et == GGUF_TYPE_STRING) {
        if (n > left(ps) / GGUF_MIN_STRING_BYTES)
            return perr(ps, at + 4, "array count %" PRIu64 " of strings extends past end of file (%zu bytes)", n,
                        ps->ctx->size);
        struct gguf_str *strs = pool_alloc(ps->ctx, (size_t)n, sizeof *strs);
        if (!strs && n) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for %" PRIu64 " strings", ps->ctx->name, n);
        for (size_t i = 0; i < (size_t)n; i++)
            if ((st = rd_str(ps, &strs[i], "array string"))) return st;
        out->strs = strs;
    } else if (et == GGUF_TYPE_ARRAY) {
        if (n > left(ps) / GGUF_MIN_ARRAY_BYTES)
            return perr(ps, at + 4, "array count %" PRIu64 " of arrays extends past end of file (%zu bytes)", n,
                        ps->ctx->size);
        struct gguf_arr *arrs = pool_alloc(ps->ctx, (size_t)n, sizeof *arrs);
        if (!arrs && n) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for %" PRIu64 " arrays", ps->ctx->name, n);
        for (size_t i = 0; i < (size_t)n; i++)
            if ((st = parse_array(ps, &arrs[i], depth + 1))) return st;
        out->arrs = arrs;
    } else {
        if ((st = parse_scalars(ps, out->type, n, &out->data, "array"))) return st;
    }
    out->n = (size_t)n;
    return DJ_OK;
}

static enum dj_status parse_kv(struct parser *ps, size_t i) {
    struct gguf_ctx *ctx = ps->ctx;
    struct kv_entry *e = &ctx->kv[i];
    enum dj_status st;
    uint32_t type;

    ps->item = "key";
    ps->item_i = i;
    ps->item_name.ptr = NULL;
    e->at = ps->pos;
    if ((st = rd_str(ps, &e->key, "key"))) return st;
    if (e->key.len == 0) return perr(ps, e->at, "empty key");
    ps->item_name = e->key;

    size_t at = ps->pos;
    if ((st = rd_u32(ps, &type, "value type"))) return st;
    if (type >= GGUF_TYPE_COUNT) return perr(ps, at, "unknown value type %" PRIu32, type);
    e->type = (enum gguf_type)type;
    if (type == GGUF_TYPE_STRING) return rd_str(ps, &e->v.str, "value string");
    if (type == GGUF_TYPE_ARRAY) return parse_array(ps, &e->v.arr, 0);
    return parse_scalars(ps, e->type, 1, &e->v.scalar, "value");
}

static enum dj_status parse_alignment(struct parser *ps) {
    struct gguf_ctx *ctx = ps->ctx;
    ctx->alignment = GGUF_DEFAULT_ALIGNMENT;
    size_t i = index_find(&ctx->kv_index, GGUF_KEY_ALIGNMENT, strlen(GGUF_KEY_ALIGNMENT));
    if (i == SIZE_MAX) return DJ_OK;
    const struct kv_entry *e = &ctx->kv[i];
    ps->item = "key";
    ps->item_name = e->key;
    if (e->type != GGUF_TYPE_UINT32)
        return perr(ps, e->at, "alignment has type %s, expected u32", gguf_type_name(e->type));
    uint32_t a;
    memcpy(&a, e->v.scalar, 4);
    if (!gguf_is_pow2(a)) return perr(ps, e->at, "alignment %" PRIu32 " is not a nonzero power of two", a);
    ctx->alignment = a;
    return DJ_OK;
}

static enum dj_status parse_tensor_info(struct parser *ps, size_t i) {
    struct gguf_ctx *ctx = ps->ctx;
    struct gguf_tensor *t = &ctx->tensors[i];
    enum dj_status st;
    size_t at;

    ps->item = "tensor";
    ps->item_i = i;
    ps->item_name.ptr = NULL;
    ctx->tensor_at[i] = ps->pos;
    if ((st = rd_str(ps, &t->name, "tensor name"))) return st;
    ps->item_name = t->name;

    at = ps->pos;
    if ((st = rd_u32(ps, &t->n_dims, "n_dims"))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return perr(ps, at, "n_dims %" PRIu32 " is not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
    int64_t nelem = 1;
    bool overflow = false;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        uint64_t v;
        at = ps->pos;
        if ((st = rd_u64(ps, &v, "dimension"))) return st;
        if (v > (uint64_t)INT64_MAX) return perr(ps, at, "dimension %d is negative (%" PRId64 ")", d, (int64_t)v);
        t->ne[d] = (int64_t)v;
        overflow = overflow || dj_mul64_overflow(nelem, t->ne[d], &nelem);
    }
    if (overflow)
        return perr(ps, at, "element count of shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] overflows int64",
                    t->ne[0], t->ne[1], t->ne[2], t->ne[3]);

    at = ps->pos;
    if ((st = rd_u32(ps, &t->type, "ggml type"))) return st;
    const struct dj_type_info *ti = dj_type_info(t->type);
    if (!ti) return perr(ps, at, "unknown ggml type %" PRIu32, t->type);
    if (t->ne[0] % ti->blck != 0)
        return perr(ps, at, "row length %" PRId64 " is not a multiple of the block size %" PRIu32 " of type %s",
                    t->ne[0], ti->blck, ti->name);
    size_t nb;
    if (!dj_row_bytes(t->type, t->ne[0], &nb) || dj_mul_overflow(nb, (size_t)t->ne[1], &nb) ||
        dj_mul_overflow(nb, (size_t)t->ne[2], &nb) || dj_mul_overflow(nb, (size_t)t->ne[3], &nb))
        return perr(ps, at, "size in bytes of shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] of type %s overflows",
                    t->ne[0], t->ne[1], t->ne[2], t->ne[3], ti->name);
    t->nbytes = nb;

    at = ps->pos;
    if ((st = rd_u64(ps, &t->offset, "data offset"))) return st;
    if (t->offset % ctx->alignment != 0)
        return perr(ps, at, "data offset %" PRIu64 " is not a multiple of the alignment %zu", t->offset, ctx->alignment);
    return DJ_OK;
}

/* Places every tensor's data once the data section's start is known. */
static enum dj_status place_tensors(struct parser *ps) {
    struct gguf_ctx *ctx = ps->ctx;
    size_t header_end = ps->pos;
    ps->item = NULL;
    if (dj_align_up(header_end, ctx->alignment, &ctx->data_offset) || ctx->data_offset > ctx->size) {
        /* A file without tensors may end right after its metadata (vocab files do). */
        if (ctx->n_tensors == 0) {
            ctx->data_offset = ctx->size;
            return DJ_OK;
        }
        return perr(ps, header_end, "data section (header end aligned to %zu) starts past end of file (%zu bytes)",
                    ctx->alignment, ctx->size);
    }
    size_t avail = ctx->size - ctx->data_offset;
    for (size_t i = 0; i < ctx->n_tensors; i++) {
        struct gguf_tensor *t = &ctx->tensors[i];
        if (t->offset > avail || t->nbytes > avail - (size_t)t->offset) {
            char nm[100];
            uint64_t start, end;
            gguf_fmt_bytes(nm, sizeof nm, t->name.ptr, t->name.len);
            if (__builtin_add_overflow((uint64_t)ctx->data_offset, t->offset, &start) ||
                __builtin_add_overflow(start, (uint64_t)t->nbytes, &end))
                return dj_fail(DJ_ERR_FORMAT,
                               "%s: tensor '%s' data (offset %" PRIu64 ", %zu bytes) extends past end of file (%zu bytes); info at byte %zu",
                               ctx->name, nm, t->offset, t->nbytes, ctx->size, ctx->tensor_at[i]);
            return dj_fail(DJ_ERR_FORMAT,
                           "%s: tensor '%s' data [%" PRIu64 ", %" PRIu64 ") extends past end of file (%zu bytes); info at byte %zu",
                           ctx->name, nm, start, end, ctx->size, ctx->tensor_at[i]);
        }
        t->data = ctx->base + ctx->data_offset + (size_t)t->offset;
    }
    return DJ_OK;
}

static enum dj_status parse(struct gguf_ctx *ctx) {
    struct parser ps = {.ctx = ctx};
    enum dj_status st;
    uint64_t n_tensors, n_kv;

    if (ctx->size < 4)
        return perr(&ps, 0, "file too small (%zu bytes) for a GGUF header: past end of file", ctx->size);
    if (memcmp(ctx->base, GGUF_MAGIC, 4) != 0) {
        char m[32];
        return perr(&ps, 0, "bad magic '%s', expected 'GGUF'", gguf_fmt_bytes(m, sizeof m, ctx->base, 4));
    }
    ps.pos = 4;
    if ((st = rd_u32(&ps, &ctx->version, "version"))) return st;
    if (ctx->version != 2 && ctx->version != 3) {
        const char *hint = ctx->version == 1 ? " (GGUF v1 is obsolete)"
                           : ctx->version != 0 && (ctx->version & 0xffffu) == 0 ? " (a big-endian file?)"
                                                            : "";
        return perr(&ps, 4, "unsupported version %" PRIu32 "%s; only versions 2 and 3 are read", ctx->version, hint);
    }
    if ((st = rd_u64(&ps, &n_tensors, "n_tensors"))) return st;
    if ((st = rd_u64(&ps, &n_kv, "n_kv"))) return st;
    /* Bound both counts by the bytes after the header before allocating anything. */
    size_t rest = left(&ps);
    if (n_kv > rest / GGUF_MIN_KV_BYTES)
        return perr(&ps, 16, "n_kv %" PRIu64 " cannot fit in the %zu bytes after the header (at least %u bytes each)", n_kv,
                    rest, GGUF_MIN_KV_BYTES);
    rest -= (size_t)n_kv * GGUF_MIN_KV_BYTES;
    if (n_tensors > rest / GGUF_MIN_TENSOR_INFO_BYTES)
        return perr(&ps, 8, "n_tensors %" PRIu64 " cannot fit in the %zu bytes after the header and metadata (at least %u bytes each)",
                    n_tensors, rest, GGUF_MIN_TENSOR_INFO_BYTES);
    ctx->n_kv = (size_t)n_kv;
    ctx->n_tensors = (size_t)n_tensors;
    ctx->kv = pool_alloc(ctx, ctx->n_kv + 1, sizeof *ctx->kv);
    ctx->tensors = pool_alloc(ctx, ctx->n_tensors + 1, sizeof *ctx->tensors);
    ctx->tensor_at = pool_alloc(ctx, ctx->n_tensors + 1, sizeof *ctx->tensor_at);
    if (!ctx->kv || !ctx->tensors || !ctx->tensor_at) goto nomem;

    size_t dup, first;
    for (size_t i = 0; i < ctx->n_kv; i++)
        if ((st = parse_kv(&ps, i))) return st;
    if (!index_build(ctx, &ctx->kv_index, ctx->kv, sizeof *ctx->kv, ctx->n_kv, &dup, &first)) goto nomem;
    if (dup != SIZE_MAX) {
        ps.item = "key";
        ps.item_name = ctx->kv[dup].key;
        return perr(&ps, ctx->kv[dup].at, "duplicate key (first at byte %zu)", ctx->kv[first].at);
    }
    if ((st = parse_alignment(&ps))) return st;
    for (size_t i = 0; i < ctx->n_tensors; i++)
        if ((st = parse_tensor_info(&ps, i))) return st;
    if (!index_build(ctx, &ctx->tensor_index, ctx->tensors, sizeof *ctx->tensors, ctx->n_tensors, &dup, &first))
        goto nomem;
    if (dup != SIZE_MAX) {
        ps.item = "tensor";
        ps.item_name = ctx->tensors[dup].name;
        return perr(&ps, ctx->tensor_at[dup], "duplicate tensor name (first at byte %zu)", ctx->tensor_at[first]);
    }
    return place_tensors(&ps);
nomem:
    return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for %zu keys and %zu tensors", ctx->name, ctx->n_kv, ctx->n_tensors);
}

/* ---- open / close ------------------------------------------------------------ */

static enum dj_status open_image(const void *data, size_t size, const char *name, void *map, size_t map_len,
                                 struct gguf_ctx **out) {
    struct gguf_ctx *ctx = calloc(1, sizeof *ctx);
    char *nm = strdup(name ? name : "<memory>");
    if (!ctx || !nm) {
        free(ctx);
        free(nm);
        if (map) munmap(map, map_len);
        return dj_fail(DJ_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    }
    ctx->name = nm;
    ctx->base = data;
    ctx->size = size;
    ctx->map = map;
    ctx->map_len = map_len;
    enum dj_status st = parse(ctx);
    if (st != DJ_OK) {
        gguf_close(ctx);
        return st;
    }
    *out = ctx;
    return DJ_OK;
}

enum dj_status gguf_open_memory(const void *data, size_t size, const char *name, struct gguf_ctx **out) {
    static const uint8_t empty[1];
    if (!out || (!data && size)) return dj_fail(DJ_ERR_INVALID, "gguf_open_memory: NULL argument");
    return open_image(data ? data : empty, size, name, NULL, 0, out);
}

enum dj_status gguf_open(const char *path, struct gguf_ctx **out) {
    if (!path || !out) return dj_fail(DJ_ERR_INVALID, "gguf_open: NULL argument");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dj_fail(DJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dj_fail(DJ_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dj_fail(DJ_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return dj_fail(DJ_ERR_IO, "%s: file size %lld does not fit in memory", path, (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) { /* mmap refuses length 0; the parser reports the empty file */
        close(fd);
        return gguf_open_memory(NULL, 0, path, out);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED) return dj_fail(DJ_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    return open_image(map, size, path, map, size, out);
}

void gguf_close(struct gguf_ctx *ctx) {
    if (!ctx) return;
    for (struct pool_block *b = ctx->pool, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    if (ctx->map) munmap(ctx->map, ctx->map_len);
    free(ctx->name);
    free(ctx);
}

/* ---- accessors ------------------------------------------------------------------ */

const char *gguf_name(const struct gguf_ctx *ctx) { return ctx->name; }
uint32_t gguf_version(const struct gguf_ctx *ctx) { return ctx->version; }
size_t gguf_alignment(const struct gguf_ctx *ctx) { return ctx->alignment; }
size_t gguf_file_size(const struct gguf_ctx *ctx) { return ctx->size; }
size_t gguf_data_offset(const struct gguf_ctx *ctx) { return ctx->data_offset; }
size_t gguf_n_kv(const struct gguf_ctx *ctx) { return ctx->n_kv; }

int64_t gguf_find_key(const struct gguf_ctx *ctx, const char *key) {
    size_t i = index_find(&ctx->kv_index, key, strlen(key));
    return i == SIZE_MAX ? -1 : (int64_t)i;
}

struct gguf_str gguf_kv_key(const struct gguf_ctx *ctx, size_t i) {
    DJ_ASSERT(i < ctx->n_kv);
    return ctx->kv[i].key;
}

enum gguf_type gguf_kv_type(const struct gguf_ctx *ctx, size_t i) {
    DJ_ASSERT(i < ctx->n_kv);
    return ctx->kv[i].type;
}

const void *gguf_kv_scalar(const struct gguf_ctx *ctx, size_t i) {
    DJ_ASSERT(i < ctx->n_kv);
    const struct kv_entry *e = &ctx->kv[i];
    return e->type == GGUF_TYPE_STRING || e->type == GGUF_TYPE_ARRAY ? NULL : e->v.scalar;
}

static enum dj_status wrong_type(const struct gguf_ctx *ctx, const struct kv_entry *e, const char *want) {
    char k[100];
    return dj_fail(DJ_ERR_TYPE, "%s: key '%s' has type %s, expected %s", ctx->name,
                   gguf_fmt_bytes(k, sizeof k, e->key.ptr, e->key.len), gguf_type_name(e->type), want);
}

static enum dj_status bad_index(const struct gguf_ctx *ctx, size_t i) {
    return dj_fail(DJ_ERR_INVALID, "%s: key index %zu out of range (%zu keys)", ctx->name, i, ctx->n_kv);
}

enum dj_status gguf_kv_arr(const struct gguf_ctx *ctx, size_t i, struct gguf_arr *out) {
    if (i >= ctx->n_kv) return bad_index(ctx, i);
    if (ctx->kv[i].type != GGUF_TYPE_ARRAY) return wrong_type(ctx, &ctx->kv[i], "array");
    *out = ctx->kv[i].v.arr;
    return DJ_OK;
}

enum dj_status gguf_kv_str(const struct gguf_ctx *ctx, size_t i, struct gguf_str *out) {
    if (i >= ctx->n_kv) return bad_index(ctx, i);
    if (ctx->kv[i].type != GGUF_TYPE_STRING) return wrong_type(ctx, &ctx->kv[i], "string");
    *out = ctx->kv[i].v.str;
    return DJ_OK;
}

static const struct kv_entry *lookup(const struct gguf_ctx *ctx, const char *key, enum dj_status *st) {
    int64_t i = gguf_find_key(ctx, key);
    if (i < 0) {
        char k[100];
        *st = dj_fail(DJ_ERR_NOT_FOUND, "%s: key '%s' not found", ctx->name, gguf_fmt_bytes(k, sizeof k, key, strlen(key)));
        return NULL;
    }
    *st = DJ_OK;
    return &ctx->kv[i];
}

/* An integer value as (negative?, magnitude bits): false if not an integer type. */
static bool int_value(const struct kv_entry *e, bool *neg, uint64_t *u, int64_t *s) {
    const void *p = e->v.scalar;
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    *neg = false;
    switch (e->type) {
    case GGUF_TYPE_UINT8: memcpy(&u8, p, 1); *u = u8; break;
    case GGUF_TYPE_UINT16: memcpy(&u16, p, 2); *u = u16; break;
    case GGUF_TYPE_UINT32: memcpy(&u32, p, 4); *u = u32; break;
    case GGUF_TYPE_UINT64: memcpy(u, p, 8); break;
    case GGUF_TYPE_INT8: memcpy(&i8, p, 1); *s = i8; break;
    case GGUF_TYPE_INT16: memcpy(&i16, p, 2); *s = i16; break;
    case GGUF_TYPE_INT32: memcpy(&i32, p, 4); *s = i32; break;
    case GGUF_TYPE_INT64: memcpy(s, p, 8); break;
    default: return false;
    }
    if (e->type == GGUF_TYPE_INT8 || e->type == GGUF_TYPE_INT16 || e->type == GGUF_TYPE_INT32 ||
        e->type == GGUF_TYPE_INT64) {
        *neg = *s < 0;
        *u = (uint64_t)*s;
    } else {
        *s = (int64_t)*u;
    }
    return true;
}

/* Fetches an integer that must lie in [lo, hi] (lo <= 0 <= hi). */
static enum dj_status get_int(const struct gguf_ctx *ctx, const char *key, int64_t lo, uint64_t hi, const char *want,
                              bool *neg, uint64_t *u, int64_t *s) {
    enum dj_status st;
    const struct kv_entry *e = lookup(ctx, key, &st);
    if (!e) return st;
    if (!int_value(e, neg, u, s)) return wrong_type(ctx, e, want);
    if ((*neg && *s < lo) || (!*neg && *u > hi)) {
        char k[100];
        if (*neg)
            return dj_fail(DJ_ERR_TYPE, "%s: key '%s' value %" PRId64 " (%s) does not fit in %s", ctx->name,
                           gguf_fmt_bytes(k, sizeof k, key, strlen(key)), *s, gguf_type_name(e->type), want);
        return dj_fail(DJ_ERR_TYPE, "%s: key '%s' value %" PRIu64 " (%s) does not fit in %s", ctx->name,
                       gguf_fmt_bytes(k, sizeof k, key, strlen(key)), *u, gguf_type_name(e->type), want);
    }
    return DJ_OK;
}

enum dj_status gguf_get_u32(const struct gguf_ctx *ctx, const char *key, uint32_t *out) {
    bool neg; uint64_t u; int64_t s;
    enum dj_status st = get_int(ctx, key, 0, UINT32_MAX, "u32", &neg, &u, &s);
    if (st == DJ_OK) *out = (uint32_t)u;
    return st;
}

enum dj_status gguf_get_i32(const struct gguf_ctx *ctx, const char *key, int32_t *out) {
    bool neg; uint64_t u; int64_t s;
    enum dj_status st = get_int(ctx, key, INT32_MIN, INT32_MAX, "i32", &neg, &u, &s);
    if (st == DJ_OK) *out = (int32_t)s;
    return st;
}

enum dj_status gguf_get_u64(const struct gguf_ctx *ctx, const char *key, uint64_t *out) {
    bool neg; uint64_t u; int64_t s;
    enum dj_status st = get_int(ctx, key, 0, UINT64_MAX, "u64", &neg, &u, &s);
    if (st == DJ_OK) *out = u;
    return st;
}

enum dj_status gguf_get_i64(const struct gguf_ctx *ctx, const char *key, int64_t *out) {
    bool neg; uint64_t u; int64_t s;
    enum dj_status st = get_int(ctx, key, INT64_MIN, INT64_MAX, "i64", &neg, &u, &s);
    if (st == DJ_OK) *out = s;
    return st;
}

static enum dj_status get_float(const struct gguf_ctx *ctx, const char *key, const char *want, double *out) {
    enum dj_status st;
    const struct kv_entry *e = lookup(ctx, key, &st);
    if (!e) return st;
    if (e->type == GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, e->v.scalar, 4);
        *out = f;
    } else if (e->type == GGUF_TYPE_FLOAT64) {
        memcpy(out, e->v.scalar, 8);
    } else {
        return wrong_type(ctx, e, want);
    }
    return DJ_OK;
}

enum dj_status gguf_get_f32(const struct gguf_ctx *ctx, const char *key, float *out) {
    double d;
    enum dj_status st = get_float(ctx, key, "f32", &d);
    if (st == DJ_OK) *out = (float)d;
    return st;
}

enum dj_status gguf_get_f64(const struct gguf_ctx *ctx, const char *key, double *out) {
    double d;
    enum dj_status st = get_float(ctx, key, "f64", &d);
    if (st == DJ_OK) *out = d;
    return st;
}

enum dj_status gguf_get_bool(const struct gguf_ctx *ctx, const char *key, bool *out) {
    enum dj_status st;
    const struct kv_entry *e = lookup(ctx, key, &st);
    if (!e) return st;
    if (e->type != GGUF_TYPE_BOOL) return wrong_type(ctx, e, "bool");
    *out = *(const uint8_t *)e->v.scalar != 0;
    return DJ_OK;
}

enum dj_status gguf_get_str(const struct gguf_ctx *ctx, const char *key, struct gguf_str *out) {
    enum dj_status st;
    const struct kv_entry *e = lookup(ctx, key, &st);
    if (!e) return st;
    if (e->type != GGUF_TYPE_STRING) return wrong_type(ctx, e, "string");
    *out = e->v.str;
    return DJ_OK;
}

enum dj_status gguf_get_arr(const struct gguf_ctx *ctx, const char *key, struct gguf_arr *out) {
    enum dj_status st;
    const struct kv_entry *e = lookup(ctx, key, &st);
    if (!e) return st;
    if (e->type != GGUF_TYPE_ARRAY) return wrong_type(ctx, e, "array");
    *out = e->v.arr;
    return DJ_OK;
}

int64_t gguf_arr_i64(const struct gguf_arr *arr, size_t i) {
    const uint8_t *p = (const uint8_t *)arr->data + i * gguf_type_size(arr->type);
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64;
    switch (arr->type) {
    case GGUF_TYPE_BOOL:
    case GGUF_TYPE_UINT8: memcpy(&u8, p, 1); return u8;
    case GGUF_TYPE_INT8: memcpy(&i8, p, 1); return i8;
    case GGUF_TYPE_UINT16: memcpy(&u16, p, 2); return u16;
    case GGUF_TYPE_INT16: memcpy(&i16, p, 2); return i16;
    case GGUF_TYPE_UINT32: memcpy(&u32, p, 4); return u32;
    case GGUF_TYPE_INT32: memcpy(&i32, p, 4); return i32;
    case GGUF_TYPE_UINT64: memcpy(&u64, p, 8); return (int64_t)u64; /* values >= 2^63 wrap */
    case GGUF_TYPE_INT64: memcpy(&i64, p, 8); return i64;
    default: break;
    }
    DJ_ASSERT(!"gguf_arr_i64 on a non-integer array");
    return 0;
}

double gguf_arr_f64(const struct gguf_arr *arr, size_t i) {
    const uint8_t *p = (const uint8_t *)arr->data + i * gguf_type_size(arr->type);
    float f;
    double d;
    uint64_t u64;
    switch (arr->type) {
    case GGUF_TYPE_FLOAT32: memcpy(&f, p, 4); return f;
    case GGUF_TYPE_FLOAT64: memcpy(&d, p, 8); return d;
    case GGUF_TYPE_UINT64: memcpy(&u64, p, 8); return (double)u64;
    default: return (double)gguf_arr_i64(arr, i);
    }
}

size_t gguf_n_tensors(const struct gguf_ctx *ctx) { return ctx->n_tensors; }

const struct gguf_tensor *gguf_tensor(const struct gguf_ctx *ctx, size_t i) {
    DJ_ASSERT(i < ctx->n_tensors);
    return &ctx->tensors[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_ctx *ctx, const char *name) {
    size_t i = index_find(&ctx->tensor_index, name, strlen(name));
    return i == SIZE_MAX ? NULL : &ctx->tensors[i];
}
