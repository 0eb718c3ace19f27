/*
 * api.c — the chat API's shared half (api.h): api_parse_chat's common fields
 * (model, sampling, logit bias, logprobs, template kwargs, cache_salt) around
 * the dialect translators, the error bodies, response ids, the SSE buffer,
 * and the dispatch of api_response / api_stream_* to the dialect files.
 *
 * Every JSON value this module builds is new; values from the request body
 * are shared by reference (jansson refcounts), never modified, so r->root
 * stays exactly the body that came in.  Failures leave nothing allocated.
 */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "server/api_internal.h"

/* ---- small shared helpers ------------------------------------------------------------- */

const char *api_path(struct api_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path, sizeof c->path, fmt, ap);
    va_end(ap);
    return c->path;
}

enum dj_status api_fail(struct api_ctx *c, int status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = status;
    snprintf(c->param, sizeof c->param, "%s", param ? param : "");
    return dj_fail(status == 500 ? DJ_ERR_NOMEM : DJ_ERR_INVALID, "%s", msg);
}

enum dj_status api_oom(struct api_ctx *c) { return api_fail(c, 500, NULL, "out of memory"); }

bool api_push(json_t *a, json_t *v) { return v && json_array_append_new(a, v) == 0; }
bool api_set(json_t *o, const char *k, json_t *v) { return v && json_object_set_new(o, k, v) == 0; }

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid (overlongs, surrogates and
 * code points past U+10FFFF are invalid, as jansson holds them). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len;
    unsigned cp;
    if ((s[0] & 0xE0) == 0xC0) len = 2, cp = s[0] & 0x1F;
    else if ((s[0] & 0xF0) == 0xE0) len = 3, cp = s[0] & 0x0F;
    else if ((s[0] & 0xF8) == 0xF0) len = 4, cp = s[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *api_jstr(const char *s, size_t n) {
    if (!s) return json_string("");
    json_t *v = json_stringn(s, n);
    if (v) return v;
    /* invalid UTF-8 (jansson accepts embedded NULs): each byte that starts no valid sequence
     * becomes U+FFFD; the engine emits whole characters, so this is rare */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *buf = malloc(n * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((const unsigned char *)s + i, n - i);
        if (l) {
            memcpy(buf + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    v = json_stringn(buf, o);
    free(buf);
    return v;
}

json_t *api_text_part(json_t *t) {
    if (!t) return NULL;
    json_t *p = json_object();
    if (!p || !api_set(p, "type", json_string("text"))) {
        json_decref(t);
        json_decref(p);
        return NULL;
    }
    if (!api_set(p, "text", t)) { /* (json_object_set_new took t) */
        json_decref(p);
        return NULL;
    }
    return p;
}

json_t *api_join_text(const json_t *parts, const char *sep) {
    size_t total = 0, ns = strlen(sep);
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) total += json_string_length(json_object_get(p, "text")) + ns;
    char *buf = malloc(total + 1);
    if (!buf) return NULL;
    size_t o = 0;
    json_array_foreach(parts, i, p) {
        json_t *t = json_object_get(p, "text");
        if (i) {
            memcpy(buf + o, sep, ns);
            o += ns;
        }
        memcpy(buf + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    json_t *v = json_stringn(buf, o);
    free(buf);
    return v;
}

bool api_opt(struct api_ctx *c, json_t *obj, const char *key, json_type want, const char *param, json_t **out) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return true;
    const bool ok = want == JSON_TRUE ? json_is_boolean(v)
                    : want == JSON_REAL ? json_is_number(v)
                                        : json_typeof(v) == want;
    if (!ok) {
        static const char *const names[] = {"an object", "an array", "a string", "an integer", "a number", "a boolean"};
        api_fail(c, 400, param, "%s must be %s", param, names[want <= JSON_TRUE ? want : JSON_TRUE]);
        return false;
    }
    *out = v;
    return true;
}

enum dj_status api_add_tool(struct api_ctx *c, const char *param, json_t *name, json_t *description,
                            json_t *parameters, json_t *strict) {
    if (!json_is_string(name) || json_string_length(name) == 0)
        return api_fail(c, 400, param, "%s: a tool needs a non-empty string name", param);
    struct dj_chat_req *r = c->r;
    if (!r->tools && !(r->tools = json_array())) return api_oom(c);
    if (!c->tool_names && !(c->tool_names = json_object())) return api_oom(c);
    /* a name with a NUL cannot be a key (nor a function name a template can print) */
    if (strlen(json_string_value(name)) != json_string_length(name))
        return api_fail(c, 400, param, "%s: a tool name cannot contain a NUL character", param);
    if (json_object_get(c->tool_names, json_string_value(name)))
        return api_fail(c, 400, param, "%s: a second tool named '%.80s'", param, json_string_value(name));
    if (json_object_set_new(c->tool_names, json_string_value(name), json_true())) return api_oom(c);
    json_t *fn = json_object();
    if (!fn) return api_oom(c);
    bool ok = api_set(fn, "name", json_incref(name));
    if (description) ok = ok && api_set(fn, "description", json_incref(description));
    if (parameters) ok = ok && api_set(fn, "parameters", json_incref(parameters));
    else ok = ok && api_set(fn, "parameters", json_pack("{s:s, s:{}}", "type", "object", "properties"));
    if (strict) ok = ok && api_set(fn, "strict", json_incref(strict));
    json_t *tool = ok ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
    if (!ok) json_decref(fn);
    return api_push(r->tools, tool) ? DJ_OK : api_oom(c);
}

enum dj_status api_add_function(struct api_ctx *c, json_t *fn, const char *p, json_t *name) {
    char q[176];
    json_t *desc, *params, *strict;
    snprintf(q, sizeof q, "%s.description", p);
    if (!api_opt(c, fn, "description", JSON_STRING, q, &desc)) return DJ_ERR_INVALID;
    snprintf(q, sizeof q, "%s.parameters", p);
    if (!api_opt(c, fn, "parameters", JSON_OBJECT, q, &params)) return DJ_ERR_INVALID;
    snprintf(q, sizeof q, "%s.strict", p);
    if (!api_opt(c, fn, "strict", JSON_TRUE, q, &strict)) return DJ_ERR_INVALID;
    snprintf(q, sizeof q, "%s.name", p);
    return api_add_tool(c, q, name, desc, params, strict);
}

enum dj_status api_named_tool(struct api_ctx *c, const char *param, json_t *name) {
    if (!json_is_string(name)) return api_fail(c, 400, param, "%s must be a string (the tool to call)", param);
    if (strlen(json_string_value(name)) == json_string_length(name) &&
        json_object_get(c->tool_names, json_string_value(name))) {
        c->r->tool_choice = DJ_TOOL_NAMED;
        c->r->tool_name = json_string_value(name);
        return DJ_OK;
    }
    return api_fail(c, 400, param, "%s: no tool named '%.80s' in tools", param, json_string_value(name));
}

enum dj_status api_kwarg(struct api_ctx *c, const char *key, json_t *v) {
    struct dj_chat_req *r = c->r;
    if (!v) return api_oom(c);
    if (!r->template_kwargs && !(r->template_kwargs = json_object())) {
        json_decref(v);
        return api_oom(c);
    }
    if (json_object_get(r->template_kwargs, key)) { /* chat_template_kwargs said it: that wins */
        json_decref(v);
        return DJ_OK;
    }
    return api_set(r->template_kwargs, key, v) ? DJ_OK : api_oom(c);
}

enum dj_status api_effort(struct api_ctx *c, json_t *effort) {
    const char *e = json_string_value(effort);
    if (!e) return DJ_OK;
    const bool on = strcmp(e, "none") && strcmp(e, "minimal");
    enum dj_status st = api_kwarg(c, "reasoning_effort", json_incref(effort));
    if (!st) st = api_kwarg(c, "enable_thinking", json_boolean(on));
    if (!st) st = api_kwarg(c, "thinking", json_boolean(on));
    return st;
}

static bool in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (list[i] && !strcmp(s, list[i])) return true;
    return false;
}

json_t *api_content(struct api_ctx *c, json_t *content, const char *base, const struct api_part_names *pn,
                    const char *join) {
    if (json_is_string(content)) return json_incref(content);
    if (!json_is_array(content)) {
        api_fail(c, 400, base, "%s must be a string or an array of content parts", base);
        return NULL;
    }
    json_t *parts = json_array();
    if (!parts) {
        api_oom(c);
        return NULL;
    }
    size_t j;
    json_t *p;
    json_array_foreach(content, j, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *param = api_path(c, "%s[%zu]", base, j);
        json_t *text = NULL;
        if (!type) {
            api_fail(c, 400, param, "%s must be an object with a string type", param);
        } else if (in_list(type, pn->text, 3)) {
            text = json_object_get(p, "text");
            if (!json_is_string(text)) api_fail(c, 400, param, "%s.text must be a string", param);
        } else if (pn->refusal && !strcmp(type, pn->refusal)) {
            text = json_object_get(p, "refusal");
            if (!json_is_string(text)) api_fail(c, 400, param, "%s.refusal must be a string", param);
        } else if (in_list(type, pn->media, 4)) {
            api_fail(c, 400, param, "%s: '%s' input is not supported: this server's model reads text only", param,
                     type);
        } else {
            api_fail(c, 400, param, "%s: unknown content part type '%.40s'", param, type);
        }
        if (!json_is_string(text)) {
            json_decref(parts);
            return NULL;
        }
        if (!api_push(parts, api_text_part(json_incref(text)))) {
            json_decref(parts);
            api_oom(c);
            return NULL;
        }
    }
    if (!join) return parts;
    json_t *s = api_join_text(parts, join);
    json_decref(parts);
    if (!s) api_oom(c);
    return s;
}

char *api_dump_args(const json_t *v) { return json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)); }

char *api_dumps(const json_t *j) { return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)); }

/* ---- api_parse_chat ------------------------------------------------------------------------ */

/* logit_bias: {"token id": bias in [-100, 100]} (OpenAI), or [[id, bias | false], ...]
 * (llama.cpp; false bans the token). */
static enum dj_status parse_logit_bias(struct api_ctx *c, json_t *lb) {
    struct dj_chat_req *r = c->r;
    const size_t n = json_is_object(lb) ? json_object_size(lb) : json_is_array(lb) ? json_array_size(lb) : 0;
    if (!json_is_object(lb) && !json_is_array(lb))
        return api_fail(c, 400, "logit_bias", "logit_bias must be an object of token id -> bias (or [[id, bias], ...])");
    if (n == 0) return DJ_OK;
    if (n > DJ_LOGIT_BIAS_MAX)
        return api_fail(c, 400, "logit_bias", "logit_bias has %zu entries, over the limit of %zu (no vocabulary has more "
                        "tokens)", n, DJ_LOGIT_BIAS_MAX);
    if (!(r->bias = calloc(n, sizeof *r->bias))) return api_oom(c);
    if (json_is_object(lb)) {
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            char *end = NULL;
            long long id = strtoll(key, &end, 10);
            if (!*key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id < 0 || id > INT32_MAX)
                return api_fail(c, 400, "logit_bias", "logit_bias: key '%.40s' is not a token id", key);
            if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
                return api_fail(c, 400, "logit_bias", "logit_bias['%s'] must be a number in [-100, 100]", key);
            r->bias[r->n_bias].tok = (dj_token)id;
            r->bias[r->n_bias++].bias = (float)json_number_value(v);
        }
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(lb, i, e) {
            json_t *id = json_array_get(e, 0), *b = json_array_get(e, 1);
            if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_integer(id) || json_integer_value(id) < 0 ||
                json_integer_value(id) > INT32_MAX || !(json_is_false(b) || json_is_number(b)) ||
                (json_is_number(b) && !(json_number_value(b) >= -100 && json_number_value(b) <= 100)))
                return api_fail(c, 400, "logit_bias",
                                "logit_bias[%zu] must be [token id, bias in [-100, 100] or false]", i);
            r->bias[r->n_bias].tok = (dj_token)json_integer_value(id);
            r->bias[r->n_bias++].bias = json_is_false(b) ? -INFINITY : (float)json_number_value(b);
        }
    }
    return DJ_OK;
}

enum dj_status api_chat_check_vocab(const struct dj_chat_req *r, size_t n_vocab, int *http_status, const char **param) {
    for (size_t i = 0; i < r->n_bias; i++)
        if (r->bias[i].tok < 0 || (size_t)r->bias[i].tok >= n_vocab) {
            *http_status = 400;
            *param = "logit_bias";
            return dj_fail(DJ_ERR_INVALID, "logit_bias: token %d is outside the vocabulary (%zu tokens, ids 0..%zu)",
                           (int)r->bias[i].tok, n_vocab, n_vocab ? n_vocab - 1 : 0);
        }
    return DJ_OK;
}

/* The model field: Chat and Responses serve only `alias` (404 otherwise); Messages accepts any
 * name (Claude Code sends its own model names). */
static enum dj_status parse_model(struct api_ctx *c, json_t *root, const char *alias) {
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return DJ_OK;
    if (!json_is_string(m)) return api_fail(c, 400, "model", "model must be a string");
    if (c->api == DJ_API_MESSAGES || c->api == DJ_API_MESSAGES_COUNT || !strcmp(json_string_value(m), alias))
        return DJ_OK;
    return api_fail(c, 404, "model", "model '%s' is not served here (this server has '%s')", json_string_value(m),
                    alias);
}

static enum dj_status parse_sampling(struct api_ctx *c, json_t *root) {
    static const struct dj_sampling_keys keys[] = {
        [DJ_API_CHAT] = {{"max_completion_tokens", "max_tokens"}, "stop", true, true},
        [DJ_API_RESPONSES] = {{"max_output_tokens", NULL}, NULL, false, false},
        [DJ_API_MESSAGES] = {{"max_tokens", NULL}, "stop_sequences", false, false},
        [DJ_API_MESSAGES_COUNT] = {{NULL, NULL}, "stop_sequences", false, false},
    };
    struct dj_sampling_req s;
    int status = 400;
    const char *param = NULL;
    if (server_parse_sampling(root, &keys[c->api], &s, &status, &param) != DJ_OK) {
        c->status = status;
        snprintf(c->param, sizeof c->param, "%s", param ? param : "");
        return DJ_ERR_INVALID;
    }
    struct dj_chat_req *r = c->r;
    r->sp = s.sp;
    r->has_seed = s.has_seed;
    r->max_tokens = s.max_tokens;
    r->n = s.n;
    memcpy(r->stop, s.stop, sizeof r->stop);
    r->n_stop = s.n_stop;
    r->stream = s.stream;
    r->include_usage = s.include_usage;
    r->ignore_eos = s.ignore_eos;
    if (c->api == DJ_API_MESSAGES && r->max_tokens == 0)
        return api_fail(c, 400, "max_tokens", "max_tokens is required (an integer >= 1)");
    if (c->api == DJ_API_MESSAGES_COUNT) r->stream = false;
    return DJ_OK;
}

/* Fields of Chat Completions only: logprobs, top_logprobs, logit_bias. */
static enum dj_status parse_openai_extras(struct api_ctx *c, json_t *root) {
    struct dj_chat_req *r = c->r;
    json_t *v;
    if (!api_opt(c, root, "logprobs", JSON_TRUE, "logprobs", &v)) return DJ_ERR_INVALID;
    r->logprobs = json_is_true(v);
    v = json_object_get(root, "top_logprobs");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 20)
            return api_fail(c, 400, "top_logprobs", "top_logprobs must be an integer in [0, 20]");
        r->top_logprobs = (uint32_t)json_integer_value(v);
    }
    v = json_object_get(root, "logit_bias");
    if (v && !json_is_null(v)) {
        enum dj_status st = parse_logit_bias(c, v);
        if (st) return st;
        r->sp.logit_bias = r->bias;
        r->sp.n_logit_bias = r->n_bias;
    }
    return DJ_OK;
}

static enum dj_status parse_chat(struct api_ctx *c, const char *alias) {
    struct dj_chat_req *r = c->r;
    json_t *root = r->root, *v;
    enum dj_status st;
    if ((st = parse_model(c, root, alias))) return st;
    if ((st = parse_sampling(c, root))) return st;
    if (c->api == DJ_API_CHAT && (st = parse_openai_extras(c, root))) return st;
    if (!api_opt(c, root, "cache_salt", JSON_STRING, "cache_salt", &v)) return DJ_ERR_INVALID;
    r->cache_salt = json_string_value(v);
    /* chat_template_kwargs (llama.cpp's extension, any dialect): copied, as the dialects add
     * keys (reasoning_effort, enable_thinking) that a key given here overrides */
    if (!api_opt(c, root, "chat_template_kwargs", JSON_OBJECT, "chat_template_kwargs", &v)) return DJ_ERR_INVALID;
    if (v && !(r->template_kwargs = json_deep_copy(v))) return api_oom(c);
    r->parallel_tool_calls = true;
    r->tool_choice = DJ_TOOL_AUTO;
    r->reasoning_budget = -1;
    st = c->api == DJ_API_CHAT        ? api_openai_parse(c, root)
         : c->api == DJ_API_RESPONSES ? api_responses_parse(c, root)
                                      : api_anthropic_parse(c, root);
    if (st) return st;
    /* (a Responses turn continuing a stored one may add no input: api_responses_attach checks) */
    if (!r->messages || (json_array_size(r->messages) == 0 && !r->previous_response_id)) {
        const char *p = c->api == DJ_API_RESPONSES ? "input" : "messages";
        return api_fail(c, 400, p, "%s: no messages to answer", p);
    }
    if (r->tools && json_array_size(r->tools) == 0) {
        json_decref(r->tools);
        r->tools = NULL;
    }
    if (!r->tools) {
        if (r->tool_choice == DJ_TOOL_REQUIRED || r->tool_choice == DJ_TOOL_NAMED)
            return api_fail(c, 400, "tool_choice", "tool_choice asks for a tool call but the request has no tools");
        r->tool_choice = DJ_TOOL_NONE;
        r->tool_name = NULL;
    }
    return DJ_OK;
}

enum dj_status api_parse_chat(enum dj_api api, const char *alias, const char *body, size_t n,
                              struct dj_chat_req *out, int *http_status, const char **param) {
    static _Thread_local char tl_param[160];
    struct dj_chat_req r = {0};
    struct api_ctx c = {.api = api, .r = &r, .status = 400};
    *param = NULL;
    *http_status = 400;
    if ((unsigned)api > DJ_API_MESSAGES_COUNT) return dj_fail(DJ_ERR_INVALID, "api_parse_chat: unknown dialect");
    r.api = api;
    if (!(r.root = server_parse_body(body ? body : "", body ? n : 0))) return DJ_ERR_INVALID;
    enum dj_status st = parse_chat(&c, alias ? alias : "");
    json_decref(c.tool_names);
    if (st) {
        *http_status = c.status;
        if (c.param[0]) {
            memcpy(tl_param, c.param, sizeof tl_param);
            *param = tl_param;
        }
        api_chat_req_free(&r);
        return st;
    }
    *out = r;
    return DJ_OK;
}

void api_chat_req_free(struct dj_chat_req *r) {
    if (!r) return;
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    json_decref(r->items);
    json_decref(r->resp_meta);
    free(r->bias);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

/* ---- errors and ids --------------------------------------------------------------------- */

json_t *api_error_json(enum dj_api api, unsigned http_status, const char *param, const char *msg) {
    return api_error_json_ex(api, http_status, NULL, param, NULL, msg);
}

json_t *api_error_json_ex(enum dj_api api, unsigned http_status, const char *type_given, const char *param,
                          const char *code, const char *msg) {
    const unsigned s = http_status;
    if (!msg) msg = "";
    json_t *m = api_jstr(msg, strlen(msg));
    if (api == DJ_API_MESSAGES || api == DJ_API_MESSAGES_COUNT) {
        /* Anthropic's error types (docs "Errors"); 503 is not among its codes: overloaded as 529 */
        const char *type = s == 401   ? "authentication_error"
                           : s == 403 ? "permission_error"
                           : s == 404 ? "not_found_error"
                           : s == 413 ? "request_too_large"
                           : s == 429 ? "rate_limit_error"
                           : s == 503 || s == 529 ? "overloaded_error"
                           : s >= 500 ? "api_error"
                                      : "invalid_request_error";
        return json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type_given ? type_given : type,
                         "message", m);
    }
    const char *type = type_given ? type_given
                       : s == 401 ? "authentication_error"
                       : s == 403 ? "permission_error"
                       : s == 404 ? "not_found_error"
                       : s == 413 ? "request_too_large"
                       : s == 429 ? "rate_limit_error"
                       : s >= 500 ? "server_error"
                                  : "invalid_request_error";
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m, "type", type, "param",
                     param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
}

void api_make_id(enum dj_api api, uint64_t seed, char *out, size_t cap) {
    static const char alnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    const char *prefix = api == DJ_API_CHAT ? "chatcmpl-" : api == DJ_API_RESPONSES ? "resp_" : "msg_";
    char tail[25];
    for (int i = 0; i < 24; i++) tail[i] = alnum[dj_rng_u64(seed, (uint64_t)i + 1000) % 62];
    tail[24] = 0;
    if (cap) snprintf(out, cap, "%s%s", prefix, tail);
}

void api_toolu_id(const char *call_id, char *out, size_t cap) {
    if (!strncmp(call_id, "call_", 5)) call_id += 5;
    snprintf(out, cap, "toolu_%s", call_id);
}

/* ---- SSE buffer ------------------------------------------------------------------------ */

bool sbuf_append(struct dj_sbuf *b, const char *s, size_t n) {
    if (n > SIZE_MAX - b->n - 1) {
        b->oom = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap = cap > SIZE_MAX / 2 ? b->n + n + 1 : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

void sbuf_free(struct dj_sbuf *b) {
    if (!b) return;
    free(b->p);
    memset(b, 0, sizeof *b);
}

void api_sse(struct dj_sbuf *b, const char *event, json_t *j) {
    char *txt = j ? api_dumps(j) : NULL;
    json_decref(j);
    if (!txt) {
        b->oom = true;
        return;
    }
    const size_t ne = event ? strlen(event) : 0, nt = strlen(txt);
    /* one append per event, so a failure never leaves half an event behind */
    const size_t len = (event ? 8 + ne : 0) + 6 + nt + 2;
    char *ev = malloc(len + 1);
    if (!ev) {
        free(txt);
        b->oom = true;
        return;
    }
    size_t o = 0;
    if (event) {
        memcpy(ev, "event: ", 7);
        memcpy(ev + 7, event, ne);
        ev[7 + ne] = '\n';
        o = 8 + ne;
    }
    memcpy(ev + o, "data: ", 6);
    memcpy(ev + o + 6, txt, nt);
    memcpy(ev + o + 6 + nt, "\n\n", 2);
    sbuf_append(b, ev, len);
    free(ev);
    free(txt);
}

bool api_text_add(struct api_text *t, const char *s, size_t n) {
    if (n > SIZE_MAX - t->n - 1) return false;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + n + 1) cap = cap > SIZE_MAX / 2 ? t->n + n + 1 : cap * 2;
        char *p = realloc(t->p, cap);
        if (!p) return false;
        t->p = p;
        t->cap = cap;
    }
    if (n) memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
    return true;
}

void api_text_free(struct api_text *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

/* ---- responses and streams: dispatch --------------------------------------------------- */

json_t *api_usage_openai(const struct dj_chat_usage *u) {
    const struct dj_chat_usage z = {0};
    if (!u) u = &z;
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt, "completion_tokens",
                     (json_int_t)u->completion, "total_tokens", (json_int_t)(u->prompt + u->completion),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached);
}

json_t *api_response(enum dj_api api, const char *id, const char *model, time_t created,
                     const struct dj_chat_choice *choices, uint32_t n, const struct dj_chat_usage *u) {
    if (!id) id = "";
    if (!model) model = "";
    if (api == DJ_API_CHAT) return api_openai_response(id, model, created, choices, n, u);
    const struct dj_chat_choice none = {0};
    const struct dj_chat_choice *c0 = n && choices ? &choices[0] : &none;
    if (api == DJ_API_RESPONSES) return api_responses_response(id, model, created, c0, u);
    return api_anthropic_response(id, model, c0, u);
}

struct dj_api_stream *api_stream_new(enum dj_api api, const char *id, const char *model, time_t created, uint32_t n,
                                     bool include_usage, size_t prompt_tokens) {
    if ((unsigned)api > DJ_API_MESSAGES_COUNT) return NULL;
    struct dj_api_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->api = api;
    snprintf(st->id, sizeof st->id, "%s", id ? id : "");
    st->model = strdup(model ? model : "");
    st->created = created;
    /* Responses and Messages have one completion: deltas of any other are dropped */
    st->n = api == DJ_API_CHAT ? (n ? n : 1) : 1;
    st->include_usage = include_usage;
    st->prompt_tokens = prompt_tokens;
    st->ch = calloc(st->n, sizeof *st->ch);
    st->output = json_array();
    if (!st->model || !st->ch || !st->output) {
        api_stream_free(st);
        return NULL;
    }
    return st;
}

void api_stream_set_reasoning_omitted(struct dj_api_stream *st, bool omitted) {
    if (st) st->reasoning_omitted = omitted;
}

void api_stream_free(struct dj_api_stream *st) {
    if (!st) return;
    for (uint32_t i = 0; st->ch && i < st->n; i++) {
        api_text_free(&st->ch[i].text);
        free(st->ch[i].call_name_big);
    }
    free(st->ch);
    json_decref(st->output);
    json_decref(st->meta);
    json_decref(st->final);
    free(st->model);
    free(st);
}

void api_stream_start(struct dj_api_stream *st, struct dj_sbuf *out) {
    if (!st || st->ended) return;
    if (st->api == DJ_API_CHAT) api_openai_start(st, out);
    else if (st->api == DJ_API_RESPONSES) api_responses_start(st, out);
    else api_anthropic_start(st, out);
}

void api_stream_delta(struct dj_api_stream *st, uint32_t index, const struct dj_chat_delta *d, const json_t *logprobs,
                      struct dj_sbuf *out) {
    if (!st || !d || st->ended || index >= st->n || st->ch[index].finished) return;
    if (d->kind == DJ_DELTA_TOOL_START) st->ch[index].had_calls = true;
    if (st->api == DJ_API_CHAT) api_openai_delta(st, index, d, logprobs, out);
    else if (st->api == DJ_API_RESPONSES) api_responses_delta(st, d, out);
    else api_anthropic_delta(st, d, out);
}

void api_stream_finish_seq(struct dj_api_stream *st, uint32_t index, enum dj_finish f, const char *stop_sequence,
                           struct dj_sbuf *out) {
    if (!st || st->ended || index >= st->n || st->ch[index].finished) return;
    struct api_choice_state *c = &st->ch[index];
    c->finished = true;
    c->finish = f;
    if (stop_sequence) {
        snprintf(c->stop_buf, sizeof c->stop_buf, "%s", stop_sequence);
        c->stop_sequence = c->stop_buf;
    }
    if (st->api == DJ_API_CHAT) api_openai_finish(st, index, out);
    else if (st->api == DJ_API_RESPONSES) api_responses_finish(st, out);
    else api_anthropic_finish(st, out);
}

void api_stream_finish(struct dj_api_stream *st, uint32_t index, enum dj_finish f, struct dj_sbuf *out) {
    api_stream_finish_seq(st, index, f, NULL, out);
}

void api_stream_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out) {
    if (!st || st->ended) return;
    /* a completion the caller never finished is finished here (as stopped), so the events pair up */
    for (uint32_t i = 0; i < st->n; i++)
        if (!st->ch[i].finished) api_stream_finish(st, i, DJ_FINISH_STOP, out);
    st->ended = true;
    if (st->api == DJ_API_CHAT) api_openai_end(st, u, out);
    else if (st->api == DJ_API_RESPONSES) api_responses_end(st, u, out);
    else api_anthropic_end(st, u, out);
}

void api_stream_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out) {
    if (!st || st->ended) return;
    st->ended = true;
    if (!msg) msg = "generation failed";
    if (st->api == DJ_API_CHAT) api_openai_error(st, msg, out);
    else if (st->api == DJ_API_RESPONSES) api_responses_error(st, msg, out);
    else api_anthropic_error(st, msg, out);
}
