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

enum { DJ_SERVER_LOGPROBS_MAX = 20 }; /* /v1/completions logprobs: OpenAI allows 0-5, llama-server 20 */

/* How a completion's output is constrained: at most one of llama.cpp's `grammar`
 * (GBNF text), llama.cpp's `json_schema` (a schema object) and OpenAI's
 * `response_format` (json_object, optionally with llama.cpp's `schema`, or
 * json_schema.schema); all NULL / false: free text. */
struct dj_constraint_req {
    const char *grammar;  /* GBNF (points into root), or NULL */
    json_t *json_schema;  /* borrowed from root, or NULL */
    bool json_object;     /* any JSON object */
    const char *param;    /* the field that set it (a literal), for the error of a bad grammar or schema */
};

/* A fill-in-the-middle prompt's parts, as llama-server's /infill takes them (all
 * strings borrowed from root; NULL: absent, the empty string). */
struct dj_fim_req {
    json_t *prefix;  /* the text before the hole (input_prefix; /v1/completions: prompt) */
    json_t *suffix;  /* the text after it (input_suffix; /v1/completions: suffix) */
    json_t *prompt;  /* /infill's prompt: text after the prefix, special tokens parsed */
    json_t *extra;   /* /infill's input_extra: an array of {text, filename?} (checked), or NULL */
};

/* POST /v1/completions and POST /infill, parsed. */
struct dj_completion_req {
    dj_token *prompt; /* malloc'd; empty (NULL, 0) when fim: server_fim_prompt builds it */
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
    int32_t logprobs;     /* /v1/completions logprobs: alternatives per token, 0..DJ_SERVER_LOGPROBS_MAX; -1: none */
    struct dj_constraint_req cons;
    bool fim;             /* fill-in-the-middle: suffix given (/v1/completions) or /infill */
    struct dj_fim_req fr;
    bool no_predict;      /* /infill n_predict 0: evaluate the prompt (a cache warm-up), return no text */
    bool return_tokens;   /* /infill: the generated token ids in "tokens" */
};

/* Parses body[0..n) for a server of model `alias` with vocabulary v.  On
 * failure: a message (dj_last_error), *http_status (400, or 404 for another
 * model) and *param (the offending field, or NULL); *out is left empty.
 * A suffix (fill-in-the-middle) with a vocabulary without FIM tokens is a 400
 * (param "suffix"), as is echo: true (not implemented). */
enum dj_status server_parse_completion(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                       struct dj_completion_req *out, int *http_status, const char **param);
/* POST /infill (llama-server's): input_prefix and input_suffix (strings, required),
 * input_extra, prompt, n_predict (-1: no limit, 0: no text) or max_tokens, the
 * sampling fields, stream, grammar / json_schema / response_format, return_tokens.
 * Fails as server_parse_completion; a vocabulary without FIM tokens is a 400. */
enum dj_status server_parse_infill(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                   struct dj_completion_req *out, int *http_status, const char **param);
void server_completion_req_free(struct dj_completion_req *r); /* accepts a zeroed struct */

/* The FIM budget of llama-server (n_batch 2048), at most half the context. */
size_t server_fim_batch(size_t n_ctx);

/* The prompt of a fill-in-the-middle request, laid out as llama-server's
 * format_prompt_infill (tools/server/server-common.cpp) does it:
 *
 *   [extra] [BOS] PRE prefix prompt SUF suffix MID
 *   extra = [REP "myproject\n"] then per input_extra chunk: SEP "filename\n" text
 *           (without a SEP token: "\n\n--- snippet ---\n\n" text), then SEP "filename\n"
 *
 * prefix, suffix, extra texts and file names are plain text (special tokens not
 * parsed); the prompt is parsed for them.  Budgets, with B = server_fim_batch(n_ctx):
 * the prefix keeps its last 3B/4 tokens, the suffix its first B/4 - (2 + prompt
 * tokens), the extra context its last n_ctx - B - 2 n_predict - 2 (never less than 0).
 * *out malloc'd, set on success only; DJ_ERR_UNSUPPORTED (a message) for a
 * vocabulary without FIM tokens. */
enum dj_status server_fim_prompt(const struct dj_vocab *v, const struct dj_fim_req *f, size_t n_ctx, size_t n_predict,
                                 dj_token **out, size_t *n_out);

/* The message of a FIM request to a model without FIM tokens. */
#define DJ_SERVER_NO_FIM "this model's vocabulary has no fill-in-the-middle tokens"

/* The body as a JSON object: NULL with a message ("malformed JSON at line L,
 * column C: ..." or "the body must be a JSON object") otherwise. */
json_t *server_parse_body(const char *body, size_t n);

#endif
