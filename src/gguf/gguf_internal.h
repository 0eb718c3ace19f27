/*
 * gguf_internal.h — what reader.c and writer.c share and nobody else needs:
 * format limits that are ours (not the file's) and the message helper that
 * turns bytes from a file into something safe to print on one line.
 *
 * Limits, and why:
 *   GGUF_MAX_ARRAY_DEPTH  arrays may nest (the spec allows it; llama.cpp
 *                         reads none).  Values are parsed recursively, so the
 *                         depth is bounded to keep a hostile file from
 *                         exhausting the stack.
 *   GGUF_MAX_TENSOR_NAME  llama.cpp keeps tensor names in a 64-byte buffer
 *                         (GGML_MAX_NAME) with a NUL, and rejects files with
 *                         longer names; the writer refuses to produce them.
 *                         The reader accepts any length.
 */
#ifndef DJ_GGUF_INTERNAL_H
#define DJ_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define GGUF_MAX_ARRAY_DEPTH 16
#define GGUF_MAX_TENSOR_NAME 63
#define GGUF_KEY_ALIGNMENT "general.alignment"

/* Bytes of the smallest possible entries, used to bound counts read from a
 * header against the bytes left in the file before anything is allocated:
 *   key/value:   u64 key length + 1 key byte (empty keys are invalid)
 *                + u32 type + 1 value byte (u8, i8, bool)
 *   tensor info: u64 name length + u32 n_dims + one i64 dim + u32 type + u64 offset
 *   array element, per element type: string = its u64 length,
 *                nested array = u32 type + u64 count, scalar = its size. */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_INFO_BYTES 32u
#define GGUF_MIN_STRING_BYTES 8u
#define GGUF_MIN_ARRAY_BYTES 12u

static inline bool gguf_is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* Writes p[0..len) into buf (cap >= 16) for a one-line message: printable
 * ASCII as is, anything else as \xNN, cut with "..." when longer than fits.
 * Returns buf. */
const char *gguf_fmt_bytes(char *buf, size_t cap, const void *p, size_t len);

#endif
