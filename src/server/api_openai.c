/*
 * api_openai.c — OpenAI Chat Completions (/v1/chat/completions): the
 * request's messages, tools, tool_choice, response_format and
 * reasoning_effort into struct dj_chat_req; the chat.completion object; the
 * chat.completion.chunk stream.
 *
 * Messages keep their shape (api.h): user/system/developer/tool content stays
 * a string or becomes an array of {type: "text", text} parts; an assistant's
 * parts are joined into one string (they are pieces of one reply).  Media
 * parts (image_url, input_audio, file) are refused with a 400 naming the part:
 * the models deja serves read text.  Legacy role "function" becomes a tool
 * message whose tool_call_id is the function's name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/api_internal.h"

static const struct api_part_names user_parts = {{"text", NULL, NULL}, NULL, {"image_url", "input_audio", "file", NULL}};
static const struct api_part_names asst_parts = {{"text", NULL, NULL}, "refusal", {"image_url", "input_audio", "file", NULL}};

/* An assistant's tool_calls → [{id, type: "function", function: {name, arguments}}] on msg;
 * arguments given as a JSON value (some clients) become its JSON text. */
static enum dj_status parse_tool_calls(struct api_ctx *c, json_t *tcs, size_t i, json_t *msg) {
    char base[64];
    snprintf(base, sizeof base, "messages[%zu].tool_calls", i);
    if (!json_is_array(tcs)) return api_fail(c, 400, base, "%s must be an array", base);
    if (json_array_size(tcs) == 0) return DJ_OK;
    json_t *out = json_array();
    if (!out || json_object_set_new(msg, "tool_calls", out)) return api_oom(c);
    size_t j;
    json_t *tc;
    json_array_foreach(tcs, j, tc) {
        const char *p = api_path(c, "%s[%zu]", base, j);
        json_t *id = json_object_get(tc, "id"), *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
        if (!json_is_object(tc)) return api_fail(c, 400, p, "%s must be an object", p);
        if (!json_is_string(id)) return api_fail(c, 400, p, "%s.id must be a string", p);
        if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
            return api_fail(c, 400, p, "%s.type must be 'function'", p);
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return api_fail(c, 400, p, "%s.function must be an object with a string name", p);
        json_t *args = json_object_get(fn, "arguments"), *a;
        if (json_is_string(args)) {
            a = json_incref(args);
        } else if (!args || json_is_null(args)) {
            a = json_string("{}");
        } else if (json_is_object(args)) {
            char *txt = api_dump_args(args);
            a = txt ? json_string(txt) : NULL;
            free(txt);
        } else {
            return api_fail(c, 400, p, "%s.function.arguments must be a string (JSON text)", p);
        }
        if (!a) return api_oom(c);
        if (!api_push(out, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type", "function", "function", "name",
                                     json_object_get(fn, "name"), "arguments", a)))
            return api_oom(c);
    }
    return DJ_OK;
}

static enum dj_status parse_messages(struct api_ctx *c, json_t *msgs) {
    struct dj_chat_req *r = c->r;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return api_fail(c, 400, "messages", "messages must be a non-empty array of messages");
    if (!(r->messages = json_array())) return api_oom(c);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char base[64];
        snprintf(base, sizeof base, "messages[%zu].content", i);
        const char *p = api_path(c, "messages[%zu]", i);
        if (!json_is_object(m)) return api_fail(c, 400, p, "%s must be an object", p);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content"), *msg = json_object(), *cv = NULL;
        if (!api_push(r->messages, msg)) return api_oom(c);
        if (!role) {
            p = api_path(c, "messages[%zu].role", i);
            return api_fail(c, 400, p, "%s must be a string", p);
        }
        if (!strcmp(role, "system") || !strcmp(role, "developer") || !strcmp(role, "user")) {
            if (!content || json_is_null(content)) return api_fail(c, 400, base, "%s is required", base);
            if (!(cv = api_content(c, content, base, &user_parts, NULL))) return DJ_ERR_INVALID;
            if (!api_set(msg, "role", json_string(role)) || !api_set(msg, "content", cv)) return api_oom(c);
        } else if (!strcmp(role, "assistant")) {
            cv = !content || json_is_null(content) ? json_null() : api_content(c, content, base, &asst_parts, "");
            if (!cv) return DJ_ERR_INVALID;
            if (!api_set(msg, "role", json_string(role)) || !api_set(msg, "content", cv)) return api_oom(c);
            json_t *rc, *tcs = json_object_get(m, "tool_calls");
            /* reasoning_content (llama.cpp, DeepSeek); "reasoning" (vLLM) when it is absent */
            if (!api_opt(c, m, "reasoning_content", JSON_STRING, api_path(c, "messages[%zu].reasoning_content", i), &rc))
                return DJ_ERR_INVALID;
            if (!rc && !api_opt(c, m, "reasoning", JSON_STRING, api_path(c, "messages[%zu].reasoning", i), &rc))
                return DJ_ERR_INVALID;
            if (rc && json_string_length(rc) && !api_set(msg, "reasoning_content", json_incref(rc))) return api_oom(c);
            if (tcs && !json_is_null(tcs)) {
                enum dj_status st = parse_tool_calls(c, tcs, i, msg);
                if (st) return st;
            }
        } else if (!strcmp(role, "tool") || !strcmp(role, "function")) {
            const bool legacy = !strcmp(role, "function");
            json_t *id = json_object_get(m, legacy ? "name" : "tool_call_id");
            if (!json_is_string(id)) {
                p = api_path(c, "messages[%zu].%s", i, legacy ? "name" : "tool_call_id");
                return api_fail(c, 400, p, "%s must be a string", p);
            }
            if (!content || json_is_null(content)) cv = json_string("");
            else if (!(cv = api_content(c, content, base, &user_parts, NULL))) return DJ_ERR_INVALID;
            if (!api_set(msg, "role", json_string("tool")) || !api_set(msg, "tool_call_id", json_incref(id)) ||
                !api_set(msg, "content", cv))
                return api_oom(c);
        } else {
            p = api_path(c, "messages[%zu].role", i);
            return api_fail(c, 400, p, "%s: unknown role '%.40s' (system, developer, user, assistant, tool, function)", p,
                            role);
        }
    }
    return DJ_OK;
}

/* tools: [{type: "function", function: {name, description?, parameters?, strict?}}]; tools of
 * other types (custom, hosted) are dropped: deja cannot call them. */
static enum dj_status parse_tools(struct api_ctx *c, json_t *root) {
    json_t *tools;
    if (!api_opt(c, root, "tools", JSON_ARRAY, "tools", &tools)) return DJ_ERR_INVALID;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return api_fail(c, 400, p, "%s must be an object", p);
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (type && !json_is_string(type)) return api_fail(c, 400, p, "%s.type must be a string", p);
        if (type && strcmp(json_string_value(type), "function")) continue;
        if (!json_is_object(fn)) return api_fail(c, 400, p, "%s.function must be an object", p);
        char q[64];
        snprintf(q, sizeof q, "%s.function", p);
        enum dj_status st = api_add_function(c, fn, q, json_object_get(fn, "name"));
        if (st) return st;
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) c->r->tool_choice = DJ_TOOL_AUTO;
        else if (!strcmp(s, "none")) c->r->tool_choice = DJ_TOOL_NONE;
        else if (!strcmp(s, "required")) c->r->tool_choice = DJ_TOOL_REQUIRED;
        else return api_fail(c, 400, "tool_choice", "tool_choice must be 'auto', 'none', 'required' or a function");
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return api_fail(c, 400, "tool_choice", "tool_choice must be {type: 'function', function: {name}}");
        enum dj_status st = api_named_tool(c, "tool_choice.function.name", json_object_get(fn, "name"));
        if (st) return st;
    } else if (tc && !json_is_null(tc)) {
        return api_fail(c, 400, "tool_choice", "tool_choice must be a string or an object");
    }
    json_t *par;
    if (!api_opt(c, root, "parallel_tool_calls", JSON_TRUE, "parallel_tool_calls", &par)) return DJ_ERR_INVALID;
    if (par) c->r->parallel_tool_calls = json_is_true(par);
    return DJ_OK;
}

/* response_format: {type: text | json_object | json_schema, json_schema: {name, schema, strict}};
 * json_object may carry a schema (llama.cpp's extension). */
static enum dj_status parse_response_format(struct api_ctx *c, json_t *root) {
    json_t *rf;
    if (!api_opt(c, root, "response_format", JSON_OBJECT, "response_format", &rf)) return DJ_ERR_INVALID;
    if (!rf) return DJ_OK;
    const char *type = json_string_value(json_object_get(rf, "type"));
    json_t *schema;
    if (type && !strcmp(type, "text")) return DJ_OK;
    if (type && !strcmp(type, "json_object")) {
        c->r->json_object = true;
        if (!api_opt(c, rf, "schema", JSON_OBJECT, "response_format.schema", &schema)) return DJ_ERR_INVALID;
        c->r->json_schema = schema;
        return DJ_OK;
    }
    if (type && !strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return api_fail(c, 400, "response_format.json_schema", "response_format.json_schema must be an object");
        if (!api_opt(c, js, "schema", JSON_OBJECT, "response_format.json_schema.schema", &schema)) return DJ_ERR_INVALID;
        c->r->json_schema = schema;
        c->r->json_object = !schema; /* a json_schema without a schema: any JSON object */
        return DJ_OK;
    }
    return api_fail(c, 400, "response_format.type", "response_format.type must be 'text', 'json_object' or 'json_schema'");
}

enum dj_status api_openai_parse(struct api_ctx *c, json_t *root) {
    enum dj_status st;
    if ((st = parse_messages(c, json_object_get(root, "messages")))) return st;
    if ((st = parse_tools(c, root))) return st;
    if ((st = parse_response_format(c, root))) return st;
    json_t *effort;
    if (!api_opt(c, root, "reasoning_effort", JSON_STRING, "reasoning_effort", &effort)) return DJ_ERR_INVALID;
    if (effort && (st = api_kwarg(c, "reasoning_effort", json_incref(effort)))) return st;
    return DJ_OK;
}

/* ---- the chat.completion object -------------------------------------------------------- */

static const char *finish_reason(enum dj_finish f, bool calls) {
    return f == DJ_FINISH_LENGTH ? "length" : calls ? "tool_calls" : "stop";
}

static json_t *tool_call_json(const struct dj_chat_call *k) {
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", k->id, "type", "function", "function", "name",
                     api_jstr(k->name, k->name ? strlen(k->name) : 0), "arguments",
                     api_jstr(k->args, k->args ? k->n_args : 0));
}

static json_t *choice_json(const struct dj_chat_choice *ch, uint32_t i) {
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                            ch->n_content || !ch->n_calls ? api_jstr(ch->content, ch->n_content) : json_null());
    if (!msg) return NULL;
    bool ok = true;
    if (ch->n_reasoning) ok = api_set(msg, "reasoning_content", api_jstr(ch->reasoning, ch->n_reasoning));
    if (ch->n_calls) {
        json_t *calls = json_array();
        ok = ok && api_set(msg, "tool_calls", calls);
        for (size_t k = 0; ok && k < ch->n_calls; k++) ok = api_push(calls, tool_call_json(&ch->calls[k]));
    }
    if (!ok) {
        json_decref(msg);
        return NULL;
    }
    return json_pack("{s:I, s:o, s:O?, s:s}", "index", (json_int_t)i, "message", msg, "logprobs", ch->logprobs,
                     "finish_reason", finish_reason(ch->finish, ch->n_calls > 0));
}

json_t *api_openai_response(const char *id, const char *model, time_t created, const struct dj_chat_choice *choices,
                            uint32_t n, const struct dj_chat_usage *u) {
    json_t *arr = json_array();
    bool ok = arr != NULL;
    for (uint32_t i = 0; ok && i < n; i++) ok = api_push(arr, choice_json(&choices[i], i));
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    json_t *root = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "chat.completion", "created",
                             (json_int_t)created, "model", model, "choices", arr, "usage", api_usage_openai(u));
    if (root && u && u->x_deja && !api_set(root, "x_deja", json_incref(u->x_deja))) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- the chunk stream ------------------------------------------------------------------- */

/* One chunk of completion `index` (takes delta).  lp: the tokens' logprobs entries (an array,
 * wrapped as {content: [...]}) or already an object, or NULL. */
static json_t *chunk(const struct dj_api_stream *st, uint32_t index, json_t *delta, const json_t *lp,
                     const char *finish) {
    json_t *lpv = !lp ? json_null() : json_is_array(lp) ? json_pack("{s:O}", "content", (json_t *)lp)
                                                        : json_incref((json_t *)lp);
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:I, s:o, s:o, s:o}]}", "id", st->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)st->created, "model", st->model, "choices", "index",
                     (json_int_t)index, "delta", delta, "logprobs", lpv, "finish_reason",
                     finish ? json_string(finish) : json_null());
}

void api_openai_start(struct dj_api_stream *st, struct dj_sbuf *out) {
    for (uint32_t i = 0; i < st->n; i++)
        api_sse(out, NULL, chunk(st, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL));
}

void api_openai_delta(struct dj_api_stream *st, uint32_t index, const struct dj_chat_delta *d, const json_t *lp,
                      struct dj_sbuf *out) {
    json_t *delta = NULL;
    const char *id = d->id ? d->id : "", *name = d->name ? d->name : "";
    switch (d->kind) {
    case DJ_DELTA_CONTENT:
    case DJ_DELTA_REASONING:
        if (d->n == 0 && !lp) return;
        delta = json_pack("{s:o}", d->kind == DJ_DELTA_CONTENT ? "content" : "reasoning_content",
                          api_jstr(d->text, d->n));
        break;
    case DJ_DELTA_TOOL_START:
        st->ch[index].n_calls++;
        delta = json_pack("{s:[{s:I, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", (json_int_t)d->tool_index, "id",
                          id, "type", "function", "function", "name", name, "arguments", "");
        break;
    case DJ_DELTA_TOOL_ARGS:
        if (d->n == 0) return;
        delta = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)d->tool_index, "function",
                          "arguments", api_jstr(d->text, d->n));
        break;
    default:
        return;
    }
    if (!delta) {
        out->oom = true;
        return;
    }
    api_sse(out, NULL, chunk(st, index, delta, lp, NULL));
}

void api_openai_finish(struct dj_api_stream *st, uint32_t index, struct dj_sbuf *out) {
    const struct api_choice_state *c = &st->ch[index];
    api_sse(out, NULL, chunk(st, index, json_object(), NULL, finish_reason(c->finish, c->had_calls)));
}

void api_openai_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out) {
    if (st->include_usage) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", st->id, "object", "chat.completion.chunk",
                              "created", (json_int_t)st->created, "model", st->model, "choices", "usage",
                              api_usage_openai(u));
        if (j && u && u->x_deja) api_set(j, "x_deja", json_incref(u->x_deja));
        api_sse(out, NULL, j);
    }
    sbuf_append(out, "data: [DONE]\n\n", 14);
}

void api_openai_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out) {
    (void)st;
    api_sse(out, NULL, api_error_json(DJ_API_CHAT, 500, NULL, msg));
}
