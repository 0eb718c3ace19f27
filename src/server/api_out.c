/*
 * api_out.c — response objects and streamed events of the three chat
 * dialects (api.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

static json_t *js(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    return v ? v : json_string("\xEF\xBF\xBD");
}

static const char *oai_finish(const struct dj_chat_choice *c) {
    if (c->n_calls) return "tool_calls";
    return c->finish == DJ_FINISH_LENGTH ? "length" : "stop";
}

static json_t *args_object(const struct dj_chat_call *c) {
    json_t *v = c->args ? json_loadb(c->args, c->n_args, JSON_DECODE_ANY, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

/* "call_X" → "toolu_X" (Anthropic's id form); other ids unchanged. */
static void anth_id(const char *id, char *out, size_t n) {
    if (!strncmp(id, "call_", 5)) snprintf(out, n, "toolu_%s", id + 5);
    else snprintf(out, n, "%s", id);
}

static json_t *chat_message_json(const struct dj_chat_choice *c) {
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content", c->content && (c->n_content || !c->n_calls) ? js(c->content, c->n_content)
                                      : c->n_calls ? json_null() : json_string(""));
    if (c->n_reasoning) json_object_set_new(m, "reasoning_content", js(c->reasoning, c->n_reasoning));
    if (c->n_calls) {
        json_t *tc = json_array();
        for (size_t k = 0; k < c->n_calls; k++)
            json_array_append_new(tc, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", c->calls[k].id, "type", "function",
                                                "function", "name", c->calls[k].name ? c->calls[k].name : "",
                                                "arguments", js(c->calls[k].args, c->calls[k].n_args)));
        json_object_set_new(m, "tool_calls", tc);
    }
    return m;
}

static json_t *responses_usage(const struct dj_chat_usage *u) {
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->prompt, "input_tokens_details",
                     "cached_tokens", (json_int_t)u->cached, "output_tokens", (json_int_t)u->completion,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)0, "total_tokens",
                     (json_int_t)(u->prompt + u->completion));
}

static json_t *responses_output(const char *id, const struct dj_chat_choice *c) {
    json_t *out = json_array();
    char iid[96];
    if (c->n_reasoning) {
        snprintf(iid, sizeof iid, "rs_%s", id);
        json_array_append_new(out, json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}]}", "type", "reasoning", "id", iid,
                                             "summary", "content", "type", "reasoning_text", "text",
                                             js(c->reasoning, c->n_reasoning)));
    }
    if (c->n_content || !c->n_calls) {
        snprintf(iid, sizeof iid, "msg_%s", id);
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[]}]}", "type", "message", "id", iid,
                                             "status", "completed", "role", "assistant", "content", "type",
                                             "output_text", "text", js(c->content, c->n_content), "annotations"));
    }
    for (size_t k = 0; k < c->n_calls; k++) {
        snprintf(iid, sizeof iid, "fc_%s_%zu", id, k);
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "type", "function_call", "id", iid,
                                             "call_id", c->calls[k].id, "name", c->calls[k].name ? c->calls[k].name : "",
                                             "arguments", js(c->calls[k].args, c->calls[k].n_args), "status",
                                             "completed"));
    }
    return out;
}

static json_t *responses_object(const char *id, const char *model, time_t created, const struct dj_chat_choice *c,
                                const struct dj_chat_usage *u, const char *status) {
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", id, "object", "response", "created_at", (json_int_t)created,
                          "status", status, "model", model);
    json_object_set_new(r, "output", c ? responses_output(id, c) : json_array());
    json_object_set_new(r, "incomplete_details", c && c->finish == DJ_FINISH_LENGTH
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_set_new(r, "error", json_null());
    if (u) json_object_set_new(r, "usage", responses_usage(u));
    else json_object_set_new(r, "usage", json_null());
    if (u && u->x_deja) json_object_set(r, "x_deja", u->x_deja);
    return r;
}

static json_t *anthropic_usage(const struct dj_chat_usage *u) {
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(u->prompt - u->cached), "output_tokens",
                     (json_int_t)u->completion, "cache_read_input_tokens", (json_int_t)u->cached,
                     "cache_creation_input_tokens", (json_int_t)0);
}

static const char *anth_stop(const struct dj_chat_choice *c) {
    return c->n_calls ? "tool_use" : c->finish == DJ_FINISH_LENGTH ? "max_tokens" : "end_turn";
}

json_t *api_response(enum dj_api api, const char *id, const char *model, time_t created,
                     const struct dj_chat_choice *choices, uint32_t n, const struct dj_chat_usage *u) {
    if (api == DJ_API_RESPONSES)
        return responses_object(id, model, created, &choices[0], u,
                                choices[0].finish == DJ_FINISH_LENGTH ? "incomplete" : "completed");
    if (api == DJ_API_MESSAGES) {
        const struct dj_chat_choice *c = &choices[0];
        json_t *content = json_array();
        if (c->n_reasoning)
            json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                     js(c->reasoning, c->n_reasoning), "signature", ""));
        if (c->n_content || !c->n_calls)
            json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text", js(c->content, c->n_content)));
        for (size_t k = 0; k < c->n_calls; k++) {
            char tid[64];
            anth_id(c->calls[k].id, tid, sizeof tid);
            json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", tid, "name",
                                                     c->calls[k].name ? c->calls[k].name : "", "input",
                                                     args_object(&c->calls[k])));
        }
        json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:n, s:o}", "id", id, "type", "message", "role",
                              "assistant", "model", model, "content", content, "stop_reason", anth_stop(c),
                              "stop_sequence", "usage", anthropic_usage(u));
        if (u->x_deja) json_object_set(m, "x_deja", u->x_deja);
        return m;
    }
    json_t *ch = json_array();
    for (uint32_t i = 0; i < n; i++) {
        const struct dj_chat_choice *c = &choices[i];
        json_array_append_new(ch, json_pack("{s:I, s:o, s:s, s:O?}", "index", (json_int_t)i, "message",
                                            chat_message_json(c), "finish_reason", oai_finish(c), "logprobs",
                                            c->logprobs));
        if (!c->logprobs) json_object_set_new(json_array_get(ch, i), "logprobs", json_null());
    }
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:I, s:I, s:I, s:{s:I}}}", "id", id, "object",
                          "chat.completion", "created", (json_int_t)created, "model", model, "choices", ch, "usage",
                          "prompt_tokens", (json_int_t)u->prompt, "completion_tokens", (json_int_t)u->completion,
                          "total_tokens", (json_int_t)(u->prompt + u->completion), "prompt_tokens_details",
                          "cached_tokens", (json_int_t)u->cached);
    if (u->x_deja) json_object_set(r, "x_deja", u->x_deja);
    return r;
}

/* ---- streaming ---------------------------------------------------------------------- */

enum blk { BLK_NONE, BLK_TEXT, BLK_THINK, BLK_TOOL };

struct st_choice {
    struct dj_sbuf content, reasoning;
    struct dj_chat_call *calls;
    size_t n_calls;
    enum blk open;      /* the block / output item being written */
    uint32_t open_tool; /* its tool index when BLK_TOOL */
    int block;          /* Anthropic: index of the open content block; Responses: of the open output item */
    int n_blocks;
    enum dj_finish finish;
};

struct dj_api_stream {
    enum dj_api api;
    char id[64], model[128];
    time_t created;
    uint32_t n;
    bool include_usage;
    size_t prompt_tokens;
    uint64_t seq; /* Responses: sequence_number */
    struct st_choice *ch;
};

struct dj_api_stream *api_stream_new(enum dj_api api, const char *id, const char *model, time_t created, uint32_t n,
                                     bool include_usage, size_t prompt_tokens) {
    struct dj_api_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->ch = calloc(n ? n : 1, sizeof *st->ch);
    if (!st->ch) {
        free(st);
        return NULL;
    }
    st->api = api;
    snprintf(st->id, sizeof st->id, "%s", id);
    snprintf(st->model, sizeof st->model, "%s", model);
    st->created = created;
    st->n = n ? n : 1;
    st->include_usage = include_usage;
    st->prompt_tokens = prompt_tokens;
    return st;
}

void api_stream_free(struct dj_api_stream *st) {
    if (!st) return;
    for (uint32_t i = 0; i < st->n; i++) {
        struct st_choice *c = &st->ch[i];
        sbuf_free(&c->content);
        sbuf_free(&c->reasoning);
        for (size_t k = 0; k < c->n_calls; k++) {
            free(c->calls[k].name);
            free(c->calls[k].args);
        }
        free(c->calls);
    }
    free(st->ch);
    free(st);
}

/* `event: NAME` (when given) and `data: JSON`; takes j. */
static void emit(struct dj_sbuf *out, const char *event, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!t) return;
    if (event) {
        sbuf_append(out, "event: ", 7);
        sbuf_append(out, event, strlen(event));
        sbuf_append(out, "\n", 1);
    }
    sbuf_append(out, "data: ", 6);
    sbuf_append(out, t, strlen(t));
    sbuf_append(out, "\n\n", 2);
    free(t);
}

/* Responses: every event carries its type and a sequence number. */
static void rev(struct dj_api_stream *st, struct dj_sbuf *out, const char *type, json_t *j) {
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer((json_int_t)st->seq++));
    emit(out, type, j);
}

static json_t *chat_chunk(const struct dj_api_stream *st, uint32_t index, json_t *delta, const char *finish,
                          const json_t *logprobs) {
    json_t *c = json_pack("{s:I, s:o, s:o}", "index", (json_int_t)index, "delta", delta, "finish_reason",
                          finish ? json_string(finish) : json_null());
    json_object_set_new(c, "logprobs", logprobs ? json_pack("{s:O}", "content", logprobs) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", st->id, "object", "chat.completion.chunk", "created",
                     (json_int_t)st->created, "model", st->model, "choices", c);
}

void api_stream_start(struct dj_api_stream *st, struct dj_sbuf *out) {
    if (st->api == DJ_API_CHAT) {
        for (uint32_t i = 0; i < st->n; i++)
            emit(out, NULL, chat_chunk(st, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL));
    } else if (st->api == DJ_API_RESPONSES) {
        rev(st, out, "response.created", json_pack("{s:o}", "response", responses_object(st->id, st->model, st->created, NULL, NULL, "in_progress")));
        rev(st, out, "response.in_progress", json_pack("{s:o}", "response", responses_object(st->id, st->model, st->created, NULL, NULL, "in_progress")));
    } else {
        json_t *msg = json_pack("{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:I}}", "id", st->id, "type", "message",
                                "role", "assistant", "model", st->model, "content", "stop_reason", "stop_sequence",
                                "usage", "input_tokens", (json_int_t)st->prompt_tokens, "output_tokens", (json_int_t)0);
        emit(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
    }
}

/* Closes the open block / output item of choice c. */
static void close_block(struct dj_api_stream *st, struct st_choice *c, struct dj_sbuf *out) {
    if (c->open == BLK_NONE) return;
    if (st->api == DJ_API_MESSAGES) {
        emit(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", c->block));
    } else if (st->api == DJ_API_RESPONSES) {
        char iid[96];
        const int oi = c->block;
        if (c->open == BLK_THINK) {
            snprintf(iid, sizeof iid, "rs_%s", st->id);
            json_t *t = js(c->reasoning.p, c->reasoning.n);
            rev(st, out, "response.reasoning_text.done",
                json_pack("{s:s, s:i, s:i, s:O}", "item_id", iid, "output_index", oi, "content_index", 0, "text", t));
            rev(st, out, "response.output_item.done",
                json_pack("{s:i, s:{s:s, s:s, s:[], s:[{s:s, s:o}]}}", "output_index", oi, "item", "type", "reasoning",
                          "id", iid, "summary", "content", "type", "reasoning_text", "text", t));
        } else if (c->open == BLK_TEXT) {
            snprintf(iid, sizeof iid, "msg_%s", st->id);
            json_t *t = js(c->content.p, c->content.n);
            rev(st, out, "response.output_text.done",
                json_pack("{s:s, s:i, s:i, s:O}", "item_id", iid, "output_index", oi, "content_index", 0, "text", t));
            rev(st, out, "response.content_part.done",
                json_pack("{s:s, s:i, s:i, s:{s:s, s:O, s:[]}}", "item_id", iid, "output_index", oi, "content_index", 0,
                          "part", "type", "output_text", "text", t, "annotations"));
            rev(st, out, "response.output_item.done",
                json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[]}]}}", "output_index", oi, "item", "type",
                          "message", "id", iid, "status", "completed", "role", "assistant", "content", "type",
                          "output_text", "text", t, "annotations"));
        } else {
            const struct dj_chat_call *k = &c->calls[c->open_tool];
            snprintf(iid, sizeof iid, "fc_%s_%u", st->id, c->open_tool);
            rev(st, out, "response.function_call_arguments.done",
                json_pack("{s:s, s:i, s:o}", "item_id", iid, "output_index", oi, "arguments", js(k->args, k->n_args)));
            rev(st, out, "response.output_item.done",
                json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:o, s:s}}", "output_index", oi, "item", "type", "function_call",
                          "id", iid, "call_id", k->id, "name", k->name ? k->name : "", "arguments", js(k->args, k->n_args),
                          "status", "completed"));
        }
    }
    c->open = BLK_NONE;
}

/* Opens a block / output item of kind b for choice c. */
static void open_block(struct dj_api_stream *st, struct st_choice *c, enum blk b, struct dj_sbuf *out) {
    c->open = b;
    c->block = c->n_blocks++;
    char iid[96];
    if (st->api == DJ_API_MESSAGES) {
        json_t *cb;
        if (b == BLK_TEXT) {
            cb = json_pack("{s:s, s:s}", "type", "text", "text", "");
        } else if (b == BLK_THINK) {
            cb = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
        } else {
            char tid[64];
            anth_id(c->calls[c->open_tool].id, tid, sizeof tid);
            cb = json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", tid, "name",
                           c->calls[c->open_tool].name ? c->calls[c->open_tool].name : "", "input");
        }
        emit(out, "content_block_start",
             json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", c->block, "content_block", cb));
    } else if (st->api == DJ_API_RESPONSES) {
        json_t *item;
        if (b == BLK_THINK) {
            snprintf(iid, sizeof iid, "rs_%s", st->id);
            item = json_pack("{s:s, s:s, s:[], s:[]}", "type", "reasoning", "id", iid, "summary", "content");
        } else if (b == BLK_TEXT) {
            snprintf(iid, sizeof iid, "msg_%s", st->id);
            item = json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", iid, "status", "in_progress", "role",
                             "assistant", "content");
        } else {
            snprintf(iid, sizeof iid, "fc_%s_%u", st->id, c->open_tool);
            item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", iid, "call_id",
                             c->calls[c->open_tool].id, "name",
                             c->calls[c->open_tool].name ? c->calls[c->open_tool].name : "", "arguments", "", "status",
                             "in_progress");
        }
        rev(st, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", c->block, "item", item));
        if (b == BLK_TEXT)
            rev(st, out, "response.content_part.added",
                json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", iid, "output_index", c->block,
                          "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
    }
}

void api_stream_delta(struct dj_api_stream *st, uint32_t index, const struct dj_chat_delta *d, const json_t *logprobs,
                      struct dj_sbuf *out) {
    if (index >= st->n) return;
    struct st_choice *c = &st->ch[index];
    /* keep what the final objects need */
    if (d->kind == DJ_DELTA_CONTENT) sbuf_append(&c->content, d->text, d->n);
    else if (d->kind == DJ_DELTA_REASONING) sbuf_append(&c->reasoning, d->text, d->n);
    else if (d->kind == DJ_DELTA_TOOL_START) {
        struct dj_chat_call *nc = realloc(c->calls, (c->n_calls + 1) * sizeof *nc);
        if (!nc) return;
        c->calls = nc;
        struct dj_chat_call *k = &c->calls[c->n_calls++];
        memset(k, 0, sizeof *k);
        snprintf(k->id, sizeof k->id, "%s", d->id ? d->id : "");
        k->name = strdup(d->name ? d->name : "");
    } else if (d->tool_index < c->n_calls) {
        struct dj_chat_call *k = &c->calls[d->tool_index];
        char *na = realloc(k->args, k->n_args + d->n + 1);
        if (!na) return;
        memcpy(na + k->n_args, d->text, d->n);
        k->n_args += d->n;
        na[k->n_args] = 0;
        k->args = na;
    }
    if (st->api == DJ_API_CHAT) {
        json_t *delta;
        switch (d->kind) {
        case DJ_DELTA_CONTENT: delta = json_pack("{s:o}", "content", js(d->text, d->n)); break;
        case DJ_DELTA_REASONING: delta = json_pack("{s:o}", "reasoning_content", js(d->text, d->n)); break;
        case DJ_DELTA_TOOL_START:
            delta = json_pack("{s:[{s:I, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", (json_int_t)d->tool_index, "id",
                              d->id ? d->id : "", "type", "function", "function", "name", d->name ? d->name : "",
                              "arguments", "");
            break;
        default:
            delta = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)d->tool_index, "function",
                              "arguments", js(d->text, d->n));
        }
        emit(out, NULL, chat_chunk(st, index, delta, NULL, logprobs));
        return;
    }
    if (index != 0) return; /* Responses and Messages have one choice */
    const enum blk want = d->kind == DJ_DELTA_CONTENT ? BLK_TEXT : d->kind == DJ_DELTA_REASONING ? BLK_THINK : BLK_TOOL;
    if (d->kind == DJ_DELTA_TOOL_START || c->open != want ||
        (want == BLK_TOOL && c->open_tool != d->tool_index)) {
        if (d->n == 0 && d->kind != DJ_DELTA_TOOL_START) return; /* nothing to open a block for */
        close_block(st, c, out);
        if (want == BLK_TOOL) c->open_tool = d->tool_index < c->n_calls ? d->tool_index : (uint32_t)c->n_calls - 1;
        open_block(st, c, want, out);
        if (d->kind == DJ_DELTA_TOOL_START) return;
    }
    if (d->n == 0) return;
    char iid[96];
    if (st->api == DJ_API_MESSAGES) {
        json_t *delta = want == BLK_TEXT    ? json_pack("{s:s, s:o}", "type", "text_delta", "text", js(d->text, d->n))
                        : want == BLK_THINK ? json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", js(d->text, d->n))
                                            : json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json",
                                                        js(d->text, d->n));
        emit(out, "content_block_delta",
             json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", c->block, "delta", delta));
    } else if (want == BLK_TEXT) {
        snprintf(iid, sizeof iid, "msg_%s", st->id);
        rev(st, out, "response.output_text.delta",
            json_pack("{s:s, s:i, s:i, s:o}", "item_id", iid, "output_index", c->block, "content_index", 0, "delta",
                      js(d->text, d->n)));
    } else if (want == BLK_THINK) {
        snprintf(iid, sizeof iid, "rs_%s", st->id);
        rev(st, out, "response.reasoning_text.delta",
            json_pack("{s:s, s:i, s:i, s:o}", "item_id", iid, "output_index", c->block, "content_index", 0, "delta",
                      js(d->text, d->n)));
    } else {
        snprintf(iid, sizeof iid, "fc_%s_%u", st->id, c->open_tool);
        rev(st, out, "response.function_call_arguments.delta",
            json_pack("{s:s, s:i, s:o}", "item_id", iid, "output_index", c->block, "delta", js(d->text, d->n)));
    }
}

void api_stream_finish(struct dj_api_stream *st, uint32_t index, enum dj_finish f, struct dj_sbuf *out) {
    if (index >= st->n) return;
    struct st_choice *c = &st->ch[index];
    c->finish = f;
    if (st->api == DJ_API_CHAT) {
        const char *fin = c->n_calls ? "tool_calls" : f == DJ_FINISH_LENGTH ? "length" : "stop";
        emit(out, NULL, chat_chunk(st, index, json_object(), fin, NULL));
        return;
    }
    if (index == 0 && st->api == DJ_API_RESPONSES && c->n_blocks == 0) { /* an empty answer is still a message */
        open_block(st, c, BLK_TEXT, out);
    }
    if (index == 0) close_block(st, c, out);
}

/* The finished choice as api_response wants it (borrowing the stream's buffers). */
static struct dj_chat_choice as_choice(const struct st_choice *c) {
    struct dj_chat_choice ch = {0};
    ch.content = c->content.p;
    ch.n_content = c->content.n;
    ch.reasoning = c->reasoning.p;
    ch.n_reasoning = c->reasoning.n;
    ch.calls = c->calls;
    ch.n_calls = c->n_calls;
    ch.finish = c->finish;
    return ch;
}

void api_stream_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out) {
    if (st->api == DJ_API_CHAT) {
        if (st->include_usage) {
            json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[], s:{s:I, s:I, s:I, s:{s:I}}}", "id", st->id, "object",
                                  "chat.completion.chunk", "created", (json_int_t)st->created, "model", st->model,
                                  "choices", "usage", "prompt_tokens", (json_int_t)u->prompt, "completion_tokens",
                                  (json_int_t)u->completion, "total_tokens", (json_int_t)(u->prompt + u->completion),
                                  "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached);
            if (u->x_deja) json_object_set(j, "x_deja", u->x_deja);
            emit(out, NULL, j);
        }
        sbuf_append(out, "data: [DONE]\n\n", 14);
        return;
    }
    const struct dj_chat_choice ch = as_choice(&st->ch[0]);
    if (st->api == DJ_API_RESPONSES) {
        rev(st, out, "response.completed",
            json_pack("{s:o}", "response",
                      responses_object(st->id, st->model, st->created, &ch, u,
                                       ch.finish == DJ_FINISH_LENGTH ? "incomplete" : "completed")));
        return;
    }
    json_t *usage = json_pack("{s:I, s:I, s:I}", "output_tokens", (json_int_t)u->completion, "input_tokens",
                              (json_int_t)(u->prompt - u->cached), "cache_read_input_tokens", (json_int_t)u->cached);
    emit(out, "message_delta",
         json_pack("{s:s, s:{s:s, s:n}, s:o}", "type", "message_delta", "delta", "stop_reason", anth_stop(&ch),
                   "stop_sequence", "usage", usage));
    emit(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

void api_stream_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out) {
    if (st->api == DJ_API_CHAT) {
        emit(out, NULL, api_error_json(DJ_API_CHAT, 500, NULL, msg));
    } else if (st->api == DJ_API_RESPONSES) {
        json_t *r = responses_object(st->id, st->model, st->created, NULL, NULL, "failed");
        json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", msg));
        rev(st, out, "response.failed", json_pack("{s:o}", "response", r));
    } else {
        emit(out, "error", api_error_json(DJ_API_MESSAGES, 500, NULL, msg));
    }
}
