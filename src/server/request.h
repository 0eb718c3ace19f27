/*
 * request.h — an HTTP request body (JSON) to an engine request: every field
 * checked, nothing trusted.  Separate from the HTTP layer so it can be fuzzed
 * (tests/fuzz/fuzz_request.c).
 */
#ifndef DJ_SERVER_REQUEST_H
#define DJ_SERVER_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

enum { DJ_SERVER_STOP_MAX = 16, DJ_SERVER_N_MAX = 16 };

/* Which body fields carry an endpoint's sampling settings (server_parse_sampling). */
struct dj_sampling_keys {
    const char *max_tokens[2]; /* names of the token limit, the first one present wins (NULL: unused) */
    const char *stop;          /* "stop" / "stop_sequences": a string or an array of strings; NULL: none */
    bool n;                    /* "n" is read (else n = 1) */
    bool stream_options;       /* "stream_options": {include_usage} is read */
};

/* The sampling fields every endpoint shares: temperature, top_p, min_p, top_k,
 * frequency_penalty, presence_penalty, repeat_penalty, seed, n, the token
 * limit, stop, stream, ignore_eos, stream_options.include_usage. */
struct dj_sampling_req {
    struct dj_sampler_params sp; /* sampler_default_params() where not given */
    bool has_seed;               /* false: the caller picks a fresh seed */
    size_t max_tokens;           /* 0: not given */
    uint32_t n;
    const char *stop[DJ_SERVER_STOP_MAX]; /* point into req */
    size_t n_stop;
    bool stream, include_usage, ignore_eos;
};

/* Reads the fields named by k from the object req.  On a wrong type or range:
 * DJ_ERR_INVALID with a message, *http_status 400 and *param the field (a
 * string literal); *out is set on success only. */
enum dj_status server_parse_sampling(json_t *req, const struct dj_sampling_keys *k, struct dj_sampling_req *out,
                                     int *http_status, const char **param);

/* POST /v1/completions, parsed. */
struct dj_completion_req {
    dj_token *prompt; /* malloc'd */
    size_t n_prompt;
    struct dj_sampler_params sp;
    bool has_seed;        /* false: the caller picks a fresh seed */
    size_t max_tokens;    /* 0: not given */
    uint32_t n;
    bool stream, include_usage, ignore_eos;
    const char *stop[DJ_SERVER_STOP_MAX]; /* point into root */
    size_t n_stop;
    json_t *root;         /* the parsed body (owned) */
    const char *cache_salt; /* points into root, or NULL */
};

/* Parses body[0..n) for a server of model `alias` with vocabulary v.  On
 * failure: a message (dj_last_error), *http_status (400, or 404 for another
 * model) and *param (the offending field, or NULL); *out is left empty. */
enum dj_status server_parse_completion(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                       struct dj_completion_req *out, int *http_status, const char **param);
void server_completion_req_free(struct dj_completion_req *r); /* accepts a zeroed struct */

/* The body as a JSON object: NULL with a message ("malformed JSON at line L,
 * column C: ..." or "the body must be a JSON object") otherwise. */
json_t *server_parse_body(const char *body, size_t n);

#endif
