/*
 * api.h — the three chat dialects the server speaks, to and from one internal
 * shape: OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses
 * (/v1/responses, as Codex CLI uses it) and Anthropic Messages (/v1/messages,
 * as Claude Code uses it).
 *
 *   request body ──api_parse_chat──▶ struct dj_chat_req (OpenAI chat messages + tools + sampling)
 *   generation deltas (chat/toolparse.h) ──api_stream_*──▶ SSE bytes in the dialect's events
 *   finished choices ──api_response──▶ the dialect's response object
 *
 * Pure functions of their inputs (no HTTP, no engine), so they are unit-tested
 * and fuzzed on their own.  Split by dialect: api.c (shared parsing, errors,
 * dispatch), api_openai.c, api_responses.c, api_anthropic.c.
 *
 * Streaming call sequence (one struct dj_api_stream per HTTP response):
 *   st = api_stream_new(...); api_stream_start(st, out);
 *   api_stream_delta(st, i, d, lp, out)   for every toolparse delta of completion i, in order
 *   api_stream_finish[_seq](st, i, f, out) once per completion i, after its last delta
 *   api_stream_end(st, usage, out)         once, after every completion finished
 *   (or api_stream_error(st, msg, out) instead of finish/end when generation failed: it ends the stream)
 *   api_stream_free(st)
 * Each call appends whole SSE events to *out (never half of one).
 */
#ifndef DJ_SERVER_API_H
#define DJ_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "chat/toolparse.h"
#include "engine/engine.h"
#include "sample/sampler.h"
#include "sample/toolcall.h"
#include "server/request.h"

enum dj_api { DJ_API_CHAT, DJ_API_RESPONSES, DJ_API_MESSAGES, DJ_API_MESSAGES_COUNT };

/* tool_choice: enum dj_tool_choice of sample/toolcall.h (DJ_TOOL_AUTO, DJ_TOOL_REQUIRED,
 * DJ_TOOL_NAMED, DJ_TOOL_NONE) — one enum for the grammar builder and the parser. */

/* A chat request in any dialect, as OpenAI Chat Completions would say it. */
struct dj_chat_req {
    enum dj_api api;
    json_t *root;     /* the parsed body (owned) */
    json_t *messages; /* owned: OpenAI chat messages, normalised for templates:
                         {role: system|developer|user|assistant|tool, content: string | null |
                          [{type: "text", text}...]}; assistant: optional reasoning_content (string)
                         and tool_calls [{id, type: "function", function: {name, arguments}}]
                         with arguments a JSON *string* as on the wire; tool: {role, tool_call_id,
                         content}.  Anthropic's system / Responses' instructions become a first
                         system message. */
    json_t *tools;    /* owned: [{type: "function", function: {name, description?, parameters, strict?}}],
                         non-empty, names unique; or NULL (no tools, or only tool kinds deja cannot
                         run: hosted/server tools are dropped) */
    enum dj_tool_choice tool_choice; /* DJ_TOOL_NONE whenever tools is NULL */
    const char *tool_name; /* NAMED: one of tools' names (points into root) */
    bool parallel_tool_calls;
    json_t *json_schema;   /* borrowed: response_format json_schema.schema (or Responses text.format) */
    bool json_object;      /* response_format {type: json_object}: any JSON object */
    json_t *template_kwargs; /* owned: object of extra template variables (chat_template_kwargs;
                                reasoning_effort; Anthropic thinking → enable_thinking), or NULL */
    struct dj_sampler_params sp;
    struct dj_logit_bias *bias; /* owned, n_bias entries (sp.logit_bias points here) */
    size_t n_bias;
    bool has_seed;
    size_t max_tokens; /* 0: not given */
    uint32_t n;
    const char *stop[DJ_SERVER_STOP_MAX]; /* point into root */
    size_t n_stop;
    bool stream, include_usage, ignore_eos, logprobs; /* stream: never for MESSAGES_COUNT */
    uint32_t top_logprobs; /* 0..20, as given (independent of logprobs) */
    const char *cache_salt; /* points into root, or NULL */
    int64_t reasoning_budget; /* -1: none; else reasoning tokens after which the end-of-thinking text is
                                 forced (Anthropic thinking.budget_tokens) */
    bool reasoning_omitted;   /* Anthropic thinking.display "omitted": thinking blocks carry no text, their
                                 signature carries it (back to deja on the next turn) */
    bool cache_control;       /* Anthropic: a block or tool asked for caching (usage then reports the
                                 prompt computed and kept as cache_creation_input_tokens) */
    /* Responses only (zero elsewhere): */
    const char *previous_response_id; /* points into root, or NULL (api_responses_attach resolves it) */
    bool store;      /* keep the finished response for previous_response_id / GET (the request's
                        `store`; true when absent, as OpenAI) */
    json_t *items;   /* owned: the conversation's input items in Responses form (a string input
                        becomes one user message item); after api_responses_attach with a
                        previous_response_id, the stored conversation's items first */
    json_t *resp_meta; /* owned: what the response object echoes of the request and the names of
                          flattened namespace tools (api_stream_set_meta, api_responses_apply_meta) */
};

/* Parses body[0..n) as dialect `api` for a server of model `alias` (any
 * "model" is accepted for DJ_API_MESSAGES*: Claude Code sends its own names).
 * Unknown fields are ignored, wrong types rejected.  On failure: message
 * (dj_last_error), *http_status (400; 404 for another model; 500 out of
 * memory) and *param (the offending field with its path, e.g.
 * "messages[2].content[0]", in thread-local storage valid until the next
 * call on this thread; or NULL); *out is left zeroed.  Logit-bias token ids
 * are checked against [0, INT32_MAX] only (no vocabulary here; then
 * api_chat_check_vocab), and at most DJ_LOGIT_BIAS_MAX entries. */
enum dj_status api_parse_chat(enum dj_api api, const char *alias, const char *body, size_t n,
                              struct dj_chat_req *out, int *http_status, const char **param);
/* logit_bias entries a request may give: as many as the largest vocabularies have tokens (Gemma 3:
 * 262,144), so a list past it repeats ids or names tokens no model has.  (OpenAI allows 300;
 * llama-server has no limit and drops ids past the vocabulary, deja refuses them: see below.) */
#define DJ_LOGIT_BIAS_MAX ((size_t)1 << 18)
/* The parts of a parsed request that depend on the model: every logit_bias token id below
 * n_vocab.  Failure: DJ_ERR_INVALID, message ("logit_bias: token 512 is outside the vocabulary
 * (512 tokens, ids 0..511)"), *http_status 400, *param "logit_bias" (static). */
enum dj_status api_chat_check_vocab(const struct dj_chat_req *r, size_t n_vocab, int *http_status, const char **param);
void api_chat_req_free(struct dj_chat_req *r); /* accepts a zeroed struct */

/* An error body in the dialect's shape (OpenAI: {error: {message, type, param,
 * code}}; Anthropic: {type: "error", error: {type, message}}). */
json_t *api_error_json(enum dj_api api, unsigned http_status, const char *param, const char *msg);
/* The same with OpenAI's type and code given (NULL: the type the status implies / code null);
 * Anthropic bodies have no code. */
json_t *api_error_json_ex(enum dj_api api, unsigned http_status, const char *type, const char *param, const char *code,
                          const char *msg);

struct dj_chat_call {
    char id[48];
    char *name; /* malloc'd */
    char *args; /* malloc'd JSON text */
    size_t n_args;
};

/* One finished completion. */
struct dj_chat_choice {
    char *content;     /* may be NULL */
    size_t n_content;
    char *reasoning;   /* may be NULL */
    size_t n_reasoning;
    struct dj_chat_call *calls;
    size_t n_calls;
    enum dj_finish finish;
    json_t *logprobs;  /* borrowed: OpenAI chat {content: [{token, logprob, bytes, top_logprobs}]} or NULL */
    const char *stop_sequence; /* borrowed: the stop string that ended it (Anthropic's stop_sequence), or NULL */
    bool reasoning_omitted;    /* Anthropic: thinking blocks without text, the reasoning in their signature */
};

struct dj_chat_usage {
    size_t prompt, cached, completion;
    size_t cache_write; /* Anthropic's cache_creation_input_tokens (0 unless the request asked for caching) */
    json_t *x_deja; /* borrowed: deja's extension object, or NULL */
};

/* The response object (takes nothing; returns a new reference, NULL when out
 * of memory).  id: the dialect's id (api_make_id); Responses and Messages
 * show only choices[0] (their n is 1). */
json_t *api_response(enum dj_api api, const char *id, const char *model, time_t created,
                     const struct dj_chat_choice *choices, uint32_t n, const struct dj_chat_usage *u);

/* A dialect's response id from a seed: "chatcmpl-" / "resp_" / "msg_" + 24
 * alphanumerics (deterministic for a seed).  cap >= 40. */
void api_make_id(enum dj_api api, uint64_t seed, char *out, size_t cap);

/* A growable byte buffer for SSE output (p NUL-terminated once non-empty). */
struct dj_sbuf {
    char *p;
    size_t n, cap;
    bool oom; /* an append failed (that event is missing from p): end the response */
};
bool sbuf_append(struct dj_sbuf *b, const char *s, size_t n);
void sbuf_free(struct dj_sbuf *b);

/* Streaming: events in the dialect's form (chat: `data: {chunk}` lines and
 * `data: [DONE]`; Responses: `event: response.* / data:`; Messages:
 * `event: message_start / content_block_* / message_delta / message_stop`).
 * Finish mapping: DJ_FINISH_LENGTH → length / incomplete (event
 * response.incomplete, as OpenAI) / max_tokens; a completion with tool calls →
 * tool_calls / completed / tool_use; a stop string (finish_seq) → Messages'
 * stop_sequence; anything else → stop / completed / end_turn (report
 * DJ_FINISH_ERROR with api_stream_error instead).  Responses and Messages show
 * completion 0 only.  prompt_tokens: Messages' message_start usage (the final
 * split into cached / uncached comes in message_delta).  NULL when out of
 * memory. */
struct dj_api_stream;
struct dj_api_stream *api_stream_new(enum dj_api api, const char *id, const char *model, time_t created, uint32_t n,
                                     bool include_usage, size_t prompt_tokens);
void api_stream_free(struct dj_api_stream *st);
/* Messages: thinking blocks stream without text, one signature_delta carries it (display "omitted"). */
void api_stream_set_reasoning_omitted(struct dj_api_stream *st, bool omitted);
void api_stream_start(struct dj_api_stream *st, struct dj_sbuf *out);
/* A delta of completion `index` (text in whole UTF-8 characters; invalid bytes
 * become U+FFFD); logprobs (borrowed, may be NULL; chat only): the OpenAI chat
 * logprobs entries of the tokens in this delta, an array [{token, logprob,
 * bytes, top_logprobs}] (sent as {content: [...]}) or that object itself. */
void api_stream_delta(struct dj_api_stream *st, uint32_t index, const struct dj_chat_delta *d, const json_t *logprobs,
                      struct dj_sbuf *out);
void api_stream_finish(struct dj_api_stream *st, uint32_t index, enum dj_finish f, struct dj_sbuf *out);
/* The same, naming the stop string that ended it (Anthropic: stop_reason "stop_sequence"). */
void api_stream_finish_seq(struct dj_api_stream *st, uint32_t index, enum dj_finish f, const char *stop_sequence,
                           struct dj_sbuf *out);
/* After every completion finished: usage (chat: only with include_usage) and the end. */
void api_stream_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out);
/* An error after the stream began (the engine failed): the dialect's error event
 * (chat: `data: {"error": ...}`, no [DONE]; Responses: response.failed;
 * Messages: `event: error`).  The stream is over: nothing may follow. */
void api_stream_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out);

/* ---- Responses: stored conversations, namespace tools, the request echo -------------------
 *
 * With `store` (true unless the request says false) a finished response is kept
 * (response_store.h) as two JSON texts: the conversation's input items up to it
 * (r->items) and the response object.  A request with previous_response_id then
 * translates  stored input items + stored response's output items + its own input
 * as ONE input array — exactly what the client would send to say it all again — so
 * the prompt renders byte for byte as the full conversation sent explicitly (and
 * reuses the previous turn's KV).  Its `instructions` replace the previous ones
 * (OpenAI: instructions are not carried over). */
struct dj_response_store;

/* Binds a parsed Responses request to the server's store (NULL: storing is off): resolves
 * previous_response_id (its conversation goes before r's input: r->messages and r->items are
 * rebuilt) and settles r->store (false without a store).  On failure: *err (a new reference) is
 * the error body for *http_status — 404 {type: invalid_request_error, param:
 * previous_response_id, code: previous_response_not_found} for an id never stored, deleted or
 * evicted; 500 when out of memory or the stored texts do not parse.  A no-op for other dialects. */
enum dj_status api_responses_attach(struct dj_chat_req *r, struct dj_response_store *store, json_t **err,
                                    unsigned *http_status);

/* Stores a finished response object (as sent to the client) with its conversation's input items
 * under the response's id.  Failed (status failed / in_progress) responses are not kept; a store
 * error (the entry over the byte bound) is returned but leaves the response valid. */
enum dj_status api_responses_keep(struct dj_response_store *store, const json_t *items, const json_t *response);

/* A Responses stream's request echo and namespace names (r->resp_meta; a reference is taken):
 * call before api_stream_start.  Ignored for other dialects and for NULL. */
void api_stream_set_meta(struct dj_api_stream *st, const json_t *meta);
/* A non-streamed response object (api_response) made to say what the stream says with the same
 * meta: the request echo, and function calls of flattened namespace tools named back {name,
 * namespace}.  Modifies resp in place; NULL meta: nothing. */
void api_responses_apply_meta(json_t *resp, const json_t *meta);
/* The final response object of an ended Responses stream (what response.completed / .incomplete
 * carried), a new reference; NULL before the end, after an error, or for other dialects. */
json_t *api_stream_response(const struct dj_api_stream *st);

/* GET /v1/responses/{id}: the stored response object (a new reference) or NULL with *err the 404
 * body; DELETE: {id, object: "response", deleted: true} or the 404.  store may be NULL. */
json_t *api_responses_get(struct dj_response_store *store, const char *id, json_t **err);
json_t *api_responses_delete(struct dj_response_store *store, const char *id, json_t **err);

#endif
