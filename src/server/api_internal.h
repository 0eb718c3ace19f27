/*
 * api_internal.h — what the dialect files of the chat API share (api.c,
 * api_openai.c, api_responses.c, api_anthropic.c); not for other modules.
 *
 * Parsing: each dialect turns its body into OpenAI chat messages + tools +
 * tool_choice in a struct api_ctx, reporting the first problem with
 * api_fail (status, param path, message).  Output: each dialect has a
 * response builder and four stream hooks behind struct api_stream_ops.
 */
#ifndef DJ_SERVER_API_INTERNAL_H
#define DJ_SERVER_API_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "server/api.h"

/* ---- parsing ------------------------------------------------------------------------ */

struct api_ctx {
    enum dj_api api;
    struct dj_chat_req *r;
    int status;        /* of the failure */
    char param[160];   /* of the failure ("" none) */
    char path[160];    /* scratch for api_path */
    json_t *tool_names; /* the tools' names as an object's keys (a hash set: a body may hold 10^5 tools) */
};

/* Formats a param path ("messages[2].content[0]") into c->path; returns it. */
const char *api_path(struct api_ctx *c, const char *fmt, ...) DJ_PRINTF(2, 3);
/* Records a failure: the message (dj_last_error), c->status and c->param
 * (param may be c->path or NULL); returns DJ_ERR_INVALID (DJ_ERR_NOMEM for 500). */
enum dj_status api_fail(struct api_ctx *c, int status, const char *param, const char *fmt, ...) DJ_PRINTF(4, 5);
enum dj_status api_oom(struct api_ctx *c);

/* Appends v to the array a / sets o[k] = v, taking v (false on NULL v or out of memory). */
bool api_push(json_t *a, json_t *v);
bool api_set(json_t *o, const char *k, json_t *v);

/* A JSON string of s[0..n); invalid UTF-8 sequences become U+FFFD (NULL only when out of memory). */
json_t *api_jstr(const char *s, size_t n);

/* {type: "text", text: t} (t: a JSON string, taken). */
json_t *api_text_part(json_t *t);

/* text parts (an array of {type: "text", text}) → one string, joined with sep; a new reference. */
json_t *api_join_text(const json_t *parts, const char *sep);

/* An optional field of type `want` (a json_type; JSON_TRUE for booleans); null counts as absent. */
bool api_opt(struct api_ctx *c, json_t *obj, const char *key, json_type want, const char *param, json_t **out);

/* One OpenAI-shaped tool {type: "function", function: {name, description?, parameters, strict?}} from
 * its fields (borrowed; parameters NULL → an empty object schema) appended to c->r->tools, rejecting a
 * duplicate or empty name. */
enum dj_status api_add_tool(struct api_ctx *c, const char *param, json_t *name, json_t *description,
                            json_t *parameters, json_t *strict);

/* api_add_tool from a function object fn (OpenAI's `function`, a Responses flat tool) at param
 * path p: its description, parameters and strict, checked, with the given name (borrowed). */
enum dj_status api_add_function(struct api_ctx *c, json_t *fn, const char *p, json_t *name);

/* Checks the name of a NAMED tool_choice against the tools and sets r->tool_choice / tool_name. */
enum dj_status api_named_tool(struct api_ctx *c, const char *param, json_t *name);

/* Sets template_kwargs[key] = v (taken) unless chat_template_kwargs gave key already. */
enum dj_status api_kwarg(struct api_ctx *c, const char *key, json_t *v);

/* A reasoning effort (OpenAI's none / minimal / low / medium / high / xhigh, or another string)
 * onto the template's switches: reasoning_effort = effort as given (gpt-oss, Solar Open and
 * DeepSeek V4 read it), and enable_thinking = thinking = false for none / minimal, true for any
 * other value (Qwen3, DeepSeek V3.1, Granite, Kimi-K3, ... read one of them).  api_kwarg's rule:
 * chat_template_kwargs win.  effort borrowed. */
enum dj_status api_effort(struct api_ctx *c, json_t *effort);

/* The part types of a dialect's content arrays. */
struct api_part_names {
    const char *text[3];  /* parts whose "text" is text ({type, text}) */
    const char *refusal;  /* a part whose "refusal" is text (OpenAI assistants), or NULL */
    const char *media[4]; /* parts rejected: media the model cannot read (images, audio, files) */
};

/* A message's content: a string (a new reference to it), or an array of parts → a new array of
 * {type: "text", text} (join NULL) or one string of the texts joined with `join`.  Rejects other
 * types and media parts (400 naming base[j]); NULL on failure with c set.  base is the content's
 * param path (not c->path). */
json_t *api_content(struct api_ctx *c, json_t *content, const char *base, const struct api_part_names *pn,
                    const char *join);

/* JSON text of v in json.dumps' default form (", " and ": "; what Hermes-style models write);
 * malloc'd, NULL when out of memory. */
char *api_dump_args(const json_t *v);

/* The dialects' request translators: fill c->r (messages, tools, tool_choice, ...) from root. */
enum dj_status api_openai_parse(struct api_ctx *c, json_t *root);
enum dj_status api_responses_parse(struct api_ctx *c, json_t *root);
enum dj_status api_anthropic_parse(struct api_ctx *c, json_t *root);

/* ---- output ------------------------------------------------------------------------- */

/* Appends `[event: NAME\n]data: JSON\n\n` (takes j; name NULL: no event line).  The whole
 * event or nothing (b->oom set). */
void api_sse(struct dj_sbuf *b, const char *event, json_t *j);
/* JSON text with the precision that keeps logprobs exact (17 digits); malloc'd. */
char *api_dumps(const json_t *j);

json_t *api_usage_openai(const struct dj_chat_usage *u);

/* Tool-call id for Anthropic: "call_X" → "toolu_X", anything else → "toolu_" + id. */
void api_toolu_id(const char *call_id, char *out, size_t cap);

/* A growable text accumulator for stream items. */
struct api_text {
    char *p;
    size_t n, cap;
};
bool api_text_add(struct api_text *t, const char *s, size_t n);
void api_text_free(struct api_text *t);

enum api_block { API_BLOCK_NONE, API_BLOCK_TEXT, API_BLOCK_REASONING, API_BLOCK_TOOL };

/* Per-completion state of a stream. */
struct api_choice_state {
    bool finished;
    bool had_calls;
    uint32_t n_calls;
    enum dj_finish finish;
    const char *stop_sequence; /* copied into stop_buf */
    char stop_buf[256];
    /* the open block/item (Responses, Messages) */
    enum api_block open;
    uint32_t open_tool;     /* tool_index of the open TOOL block */
    uint32_t n_blocks;      /* Messages: content blocks started; Responses: output items */
    struct api_text text;   /* the open item's text or arguments (Responses) */
    char item_id[80];       /* the open item's id (Responses) */
    char call_id[64], call_name[256];
    char *call_name_big;    /* a name longer than call_name (malloc'd) */
    bool any_message;       /* Responses: a message item was output */
};

struct dj_api_stream {
    enum dj_api api;
    char id[64];
    char *model;
    time_t created;
    uint32_t n;
    bool include_usage;
    size_t prompt_tokens;
    uint64_t seq;              /* Responses: sequence_number of the next event */
    json_t *output;            /* Responses: the finished output items, for response.completed */
    json_t *meta;              /* Responses: the request echo and namespace names (api_stream_set_meta), or NULL */
    json_t *final;             /* Responses: the response object of response.completed / .incomplete */
    bool ended;                /* end or error was written */
    bool reasoning_omitted;    /* Messages: thinking display "omitted" */
    struct api_choice_state *ch; /* n of them */
};

/* Dialect hooks. */
void api_openai_start(struct dj_api_stream *st, struct dj_sbuf *out);
void api_openai_delta(struct dj_api_stream *st, uint32_t index, const struct dj_chat_delta *d, const json_t *lp,
                      struct dj_sbuf *out);
void api_openai_finish(struct dj_api_stream *st, uint32_t index, struct dj_sbuf *out);
void api_openai_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out);
void api_openai_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out);
json_t *api_openai_response(const char *id, const char *model, time_t created, const struct dj_chat_choice *choices,
                            uint32_t n, const struct dj_chat_usage *u);

void api_responses_start(struct dj_api_stream *st, struct dj_sbuf *out);
void api_responses_delta(struct dj_api_stream *st, const struct dj_chat_delta *d, struct dj_sbuf *out);
void api_responses_finish(struct dj_api_stream *st, struct dj_sbuf *out);
void api_responses_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out);
void api_responses_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out);
json_t *api_responses_response(const char *id, const char *model, time_t created, const struct dj_chat_choice *c,
                               const struct dj_chat_usage *u);

void api_anthropic_start(struct dj_api_stream *st, struct dj_sbuf *out);
void api_anthropic_delta(struct dj_api_stream *st, const struct dj_chat_delta *d, struct dj_sbuf *out);
void api_anthropic_finish(struct dj_api_stream *st, struct dj_sbuf *out);
void api_anthropic_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out);
void api_anthropic_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out);
json_t *api_anthropic_response(const char *id, const char *model, const struct dj_chat_choice *c,
                               const struct dj_chat_usage *u);

#endif
