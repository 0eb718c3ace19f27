/*
 * gguf.h — GGUF v2/v3 reader and writer.
 *
 * Reader: the file is mapped read-only; the header, every metadata key/value
 * and every tensor info is parsed and validated once at open time, so later
 * getters never read outside the mapping.  Every count, string length, array
 * length, tensor dimension, type id and data offset is checked against the
 * file size and for overflow before use; allocations are bounded by what the
 * file size can justify.  A malformed file gives DJ_ERR_FORMAT and a one-line
 * message "<file>: <what> at byte <offset>".
 *
 * Layout of a GGUF file (all little-endian):
 *
 *   +--------------------------------------------------------------+
 *   | magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv         |
 *   | n_kv x { str key | u32 type | value }                         |
 *   | n_tensors x { str name | u32 n_dims | u64 ne[n_dims] |       |
 *   |               u32 ggml_type | u64 offset }                    |
 *   | padding to general.alignment (default 32)                     |
 *   | tensor data: each tensor at data_start + offset, offsets      |
 *   |              aligned, sizes = row bytes x rows                |
 *   +--------------------------------------------------------------+
 *   str = u64 len | len bytes (UTF-8, no NUL)
 *   array value = u32 elem_type | u64 n | n values (arrays may nest)
 *
 * Ownership: strings and arrays returned by getters point into the mapping
 * or into the context and live until gguf_close().
 */
#ifndef DJ_GGUF_H
#define DJ_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* A string: not NUL-terminated, may contain any bytes. */
struct gguf_str {
    const char *ptr;
    size_t len;
};

/* An array value.  For scalar element types `data` points at n packed
 * little-endian elements (possibly unaligned: read with the gguf_arr_* helpers
 * or memcpy).  For GGUF_TYPE_STRING, `strs` has n entries; for
 * GGUF_TYPE_ARRAY (nested), `arrs` has n entries. */
struct gguf_arr {
    enum gguf_type type;
    size_t n;
    const void *data;
    const struct gguf_str *strs;
    const struct gguf_arr *arrs;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1; ne[0] is the row length */
    uint32_t type;             /* enum dj_ggml_type */
    uint64_t offset;           /* relative to the data section */
    size_t nbytes;
    const void *data;          /* in the mapping; aligned to the file's alignment */
};

struct gguf_ctx; /* opaque */

/* Opens and validates a file (read-only mmap). */
enum dj_status gguf_open(const char *path, struct gguf_ctx **out);
/* Validates a GGUF image in memory; `name` is used in messages.  The buffer
 * must outlive the context (it is not copied).  Used by fuzz targets. */
enum dj_status gguf_open_memory(const void *data, size_t size, const char *name, struct gguf_ctx **out);
void gguf_close(struct gguf_ctx *ctx); /* accepts NULL */

const char *gguf_name(const struct gguf_ctx *ctx); /* the path given to open */
uint32_t gguf_version(const struct gguf_ctx *ctx);
size_t gguf_alignment(const struct gguf_ctx *ctx);
size_t gguf_file_size(const struct gguf_ctx *ctx);
size_t gguf_data_offset(const struct gguf_ctx *ctx); /* absolute offset of the data section */

/* Metadata.  Keys are unique (a duplicate key is a format error). */
size_t gguf_n_kv(const struct gguf_ctx *ctx);
int64_t gguf_find_key(const struct gguf_ctx *ctx, const char *key); /* index or -1 */
struct gguf_str gguf_kv_key(const struct gguf_ctx *ctx, size_t i);
enum gguf_type gguf_kv_type(const struct gguf_ctx *ctx, size_t i);
const char *gguf_type_name(enum gguf_type t); /* "u32", "string", "array", ... */

/* Typed getters by key: DJ_ERR_NOT_FOUND if absent, DJ_ERR_TYPE if the value
 * has another type (with a message naming key and both types).  The integer
 * getters accept any integer type whose value fits the requested type
 * (converters write uint32 or int32 for the same key), floats accept float32
 * or float64.  *out is written only on DJ_OK. */
enum dj_status gguf_get_u32(const struct gguf_ctx *ctx, const char *key, uint32_t *out);
enum dj_status gguf_get_i32(const struct gguf_ctx *ctx, const char *key, int32_t *out);
enum dj_status gguf_get_u64(const struct gguf_ctx *ctx, const char *key, uint64_t *out);
enum dj_status gguf_get_i64(const struct gguf_ctx *ctx, const char *key, int64_t *out);
enum dj_status gguf_get_f32(const struct gguf_ctx *ctx, const char *key, float *out);
enum dj_status gguf_get_f64(const struct gguf_ctx *ctx, const char *key, double *out);
enum dj_status gguf_get_bool(const struct gguf_ctx *ctx, const char *key, bool *out);
enum dj_status gguf_get_str(const struct gguf_ctx *ctx, const char *key, struct gguf_str *out);
enum dj_status gguf_get_arr(const struct gguf_ctx *ctx, const char *key, struct gguf_arr *out);
/* Same by index (for listing all metadata).  For scalar values, `*out` of the
 * matching C type is filled; gguf_get_value_* give a generic view. */
enum dj_status gguf_kv_arr(const struct gguf_ctx *ctx, size_t i, struct gguf_arr *out);
enum dj_status gguf_kv_str(const struct gguf_ctx *ctx, size_t i, struct gguf_str *out);
/* Raw pointer to a scalar value's little-endian bytes (size from its type). */
const void *gguf_kv_scalar(const struct gguf_ctx *ctx, size_t i);

/* Element access for scalar arrays (bounds are the caller's to check: i < arr->n). */
int64_t gguf_arr_i64(const struct gguf_arr *arr, size_t i);  /* any integer or bool element type */
double gguf_arr_f64(const struct gguf_arr *arr, size_t i);   /* any numeric element type */
size_t gguf_type_size(enum gguf_type t); /* bytes of a scalar type; 0 for string/array */

/* Tensors. */
size_t gguf_n_tensors(const struct gguf_ctx *ctx);
const struct gguf_tensor *gguf_tensor(const struct gguf_ctx *ctx, size_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_ctx *ctx, const char *name); /* NULL if absent */

/* ---- Writer ------------------------------------------------------------------
 * Builds a file in memory order: metadata in the order set (setting an existing
 * key replaces its value in place), tensors in the order added.  Tensor data is
 * referenced, not copied: the caller keeps it alive until gguf_writer_write()
 * returns (or produced then: gguf_writer_add_tensor_fill).  gguf_writer_write() writes "<path>.tmp" then renames, so a failure
 * (a full disk) never leaves a partial file at `path`.  general.alignment, if
 * set, must be a power of two and is used for the layout.
 */
struct gguf_writer;

struct gguf_writer *gguf_writer_create(void); /* NULL on allocation failure */
void gguf_writer_destroy(struct gguf_writer *w);

enum dj_status gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
enum dj_status gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
enum dj_status gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
enum dj_status gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
enum dj_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
enum dj_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
enum dj_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
enum dj_status gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
enum dj_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
enum dj_status gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
enum dj_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
enum dj_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s, size_t len);
/* A scalar array: n elements of `type`, packed little-endian, copied. */
enum dj_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type type, const void *data, size_t n);
enum dj_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs, size_t n);
/* Any array value, nested arrays included (copied deeply). */
enum dj_status gguf_writer_set_arr_value(struct gguf_writer *w, const char *key, const struct gguf_arr *arr);
/* Copies key/value i of a reader context (any type). */
enum dj_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_ctx *src, size_t i);
enum dj_status gguf_writer_remove_key(struct gguf_writer *w, const char *key); /* NOT_FOUND if absent */

/* ne: n_dims sizes, ne[0] the row length; nbytes must equal the computed size. */
enum dj_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                      const int64_t *ne, const void *data, size_t nbytes);

/* A tensor whose bytes are produced while the file is written, so a file larger
 * than memory can be written: fill(arg, buf, nbytes) writes exactly nbytes into buf
 * (the writer's buffer, reused between tensors) and returns DJ_OK or an error that
 * stops the write.  arg must stay valid until gguf_writer_write() returns. */
typedef enum dj_status (*gguf_fill_fn)(void *arg, void *buf, size_t nbytes);
enum dj_status gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                           const int64_t *ne, size_t nbytes, gguf_fill_fn fill, void *arg);

/* version 3 unless set with gguf_writer_set_version (2 or 3). */
enum dj_status gguf_writer_set_version(struct gguf_writer *w, uint32_t version);
enum dj_status gguf_writer_write(struct gguf_writer *w, const char *path);
/* Serializes into a malloc'd buffer (caller frees); for tests and fuzzing. */
enum dj_status gguf_writer_write_memory(struct gguf_writer *w, void **out, size_t *out_size);

#endif
