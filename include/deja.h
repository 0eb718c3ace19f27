/*
 * deja.h — the public C API of deja, an LLM inference engine for agentic
 * workloads (see README.md).  Handles are opaque; parameters come from
 * *_default_params() returned by value.  Every fallible call returns an
 * enum dj_status; on failure dj_last_error() gives a one-line message that
 * names what was wrong and where (file, key, byte offset).
 *
 * This header grows with the engine: today it exposes the status codes and
 * the vocabulary/tokenizer; the model, context and session APIs arrive with
 * the forward pass.
 */
#ifndef DEJA_H
#define DEJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEJA_VERSION "0.1.0"

enum dj_status {
    DJ_OK = 0,
    DJ_ERR_IO,          /* open/read/write/mmap failed (errno in the message) */
    DJ_ERR_FORMAT,      /* malformed input: bad magic, truncated, lengths past EOF, ... */
    DJ_ERR_NOT_FOUND,   /* a key, tensor or token that was asked for is absent */
    DJ_ERR_TYPE,        /* a value exists but has another type */
    DJ_ERR_NOMEM,       /* an allocation failed */
    DJ_ERR_INVALID,     /* a bad argument from the caller */
    DJ_ERR_UNSUPPORTED, /* valid input we do not handle (an architecture, a tokenizer) */
};

/* The message of the last failure on this thread ("" if none). */
const char *dj_last_error(void);
/* A short name for a status ("bad format"). */
const char *dj_status_str(enum dj_status st);

/* ---- Vocabulary and tokenizer -------------------------------------------- */

typedef int32_t dj_token;
struct dj_vocab; /* opaque: tokens, scores, merges, special ids, pre-tokenizer */

/* Loads the tokenizer of a GGUF file (a model or a vocab-only file). */
enum dj_status dj_vocab_load_file(const char *path, struct dj_vocab **out);
void dj_vocab_free(struct dj_vocab *vocab);

#ifdef __cplusplus
}
#endif
#endif
