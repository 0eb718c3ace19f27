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
};

/* Parses body[0..n) for a server of model `alias` with vocabulary v.  On
 * failure: a message (dj_last_error), *http_status (400, or 404 for another
 * model) and *param (the offending field, or NULL); *out is left empty. */
enum dj_status server_parse_completion(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                       struct dj_completion_req *out, int *http_status, const char **param);
void server_completion_req_free(struct dj_completion_req *r); /* accepts a zeroed struct */

/* The sampling fields every generation endpoint shares (temperature, top_p,
 * min_p, top_k, penalties, n, seed, stop, and the generation cap under the name
 * max_key), llama-server's defaults for what is absent.  On a wrong type or
 * range: DJ_ERR_INVALID, a message and *param. */
enum dj_status server_parse_sampling(json_t *req, const char *max_key, struct dj_sampler_params *sp, bool *has_seed,
                                     size_t *max_out, uint32_t *n_out, const char **stop, size_t *n_stop,
                                     const char **param);

/* The body as a JSON object: NULL with a message ("malformed JSON at line L,
 * column C: ..." or "the body must be a JSON object") otherwise. */
json_t *server_parse_body(const char *body, size_t n);

#endif
