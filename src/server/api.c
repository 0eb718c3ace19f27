/*
 * api.c — request parsing for the three chat dialects (api.h); the response
 * objects and stream events are in api_out.c.
 */
#include "server/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

bool sbuf_append(struct dj_sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = (b->n + n + 1) * 2;
        char *np = realloc(b->p, c);
        if (!np) return false;
        b->p = np;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

void sbuf_free(struct dj_sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void api_chat_req_free(struct dj_chat_req *r) {
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    json_decref(r->root);
    free(r->bias);
    memset(r, 0, sizeof *r);
}

json_t *api_error_json(enum dj_api api, unsigned status, const char *param, const char *msg) {
    if (api == DJ_API_MESSAGES || api == DJ_API_MESSAGES_COUNT) {
        const char *type = status == 401   ? "authentication_error"
                           : status == 404 ? "not_found_error"
                           : status == 413 ? "request_too_large"
                           : status == 503 ? "overloaded_error"
                           : status >= 500 ? "api_error"
                                           : "invalid_request_error";
        return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", msg);
    }
    const char *type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", type, "param",
                     param ? json_string(param) : json_null(), "code", json_null());
}

/* ---- helpers --------------------------------------------------------------------- */

struct pctx {
    const char **param;
    char pbuf[96]; /* a param path built here ("messages[3].content") */
};

static enum dj_status fail_at(struct pctx *x, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum dj_status fail_at(struct pctx *x, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(x->pbuf, sizeof x->pbuf, "%s", param);
    *x->param = x->pbuf;
    return dj_fail(DJ_ERR_INVALID, "%s", msg);
}

static bool opt_bool(json_t *o, const char *k, bool *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return false;
    *out = json_is_true(v);
    return true;
}

/* Text of a content value: a string, or an array of text parts (types in `ok`,
 * joined by sep).  NULL with *bad_part set for another part type. */
static json_t *content_text(json_t *c, const char *sep, const char **bad_type) {
    *bad_type = NULL;
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) return NULL;
    struct dj_sbuf b = {0};
    size_t i;
    json_t *p;
    sbuf_append(&b, "", 0);
    json_array_foreach(c, i, p) {
        json_t *ty = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        const char *t = json_string_value(ty);
        if (!t || (strcmp(t, "text") && strcmp(t, "input_text") && strcmp(t, "output_text")) || !json_is_string(tx)) {
            *bad_type = t ? t : "?";
            sbuf_free(&b);
            return NULL;
        }
        if (i) sbuf_append(&b, sep, strlen(sep));
        sbuf_append(&b, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.n);
    sbuf_free(&b);
    return s;
}

static json_t *kwargs_of(struct dj_chat_req *r) {
    if (!r->template_kwargs) r->template_kwargs = json_object();
    return r->template_kwargs;
}

static enum dj_status check_model(struct pctx *x, json_t *req, const char *alias, int *status) {
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_null(model) && (!json_is_string(model) || strcmp(json_string_value(model), alias))) {
        *status = 404;
        return fail_at(x, "model", "model '%s' is not served here (this server has '%s')",
                       json_is_string(model) ? json_string_value(model) : "?", alias);
    }
    return DJ_OK;
}

/* An OpenAI tools array → validated copy (nested {type, function}). */
static enum dj_status take_tools(struct pctx *x, struct dj_chat_req *r, json_t *tools, bool flat) {
    if (!tools || json_is_null(tools)) return DJ_OK;
    if (!json_is_array(tools)) return fail_at(x, "tools", "tools must be an array");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48];
        snprintf(p, sizeof p, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t)) {
            json_decref(out);
            return fail_at(x, p, "%s must be an object", p);
        }
        json_t *fn = flat ? t : json_object_get(t, "function");
        if (type && strcmp(type, "function")) {
            if (flat && !strcmp(type, "custom") && json_is_string(json_object_get(t, "name"))) {
                /* a free-form tool: one string argument "input" */
                json_array_append_new(out, json_pack("{s:s, s:{s:O, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}", "type",
                                                     "function", "function", "name", json_object_get(t, "name"),
                                                     "description",
                                                     json_string_value(json_object_get(t, "description"))
                                                         ? json_string_value(json_object_get(t, "description"))
                                                         : "",
                                                     "parameters", "type", "object", "properties", "input", "type",
                                                     "string", "required", "input"));
                continue;
            }
            if (flat) continue; /* hosted tools (web_search, local_shell...): nothing the model can call here */
            json_decref(out);
            return fail_at(x, p, "%s: only function tools are supported (type '%s')", p, type);
        }
        json_t *name = json_object_get(fn, "name");
        if (!json_is_object(fn) || !json_is_string(name) || !json_string_length(name)) {
            json_decref(out);
            return fail_at(x, p, "%s needs a function name", p);
        }
        json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params) && !json_is_boolean(params)) {
            json_decref(out);
            return fail_at(x, p, "%s: parameters must be a JSON schema object", p);
        }
        json_t *f = json_pack("{s:O}", "name", name);
        json_t *desc = json_object_get(fn, "description");
        if (json_is_string(desc)) json_object_set(f, "description", desc);
        json_object_set_new(f, "parameters",
                            json_is_object(params) ? json_incref(params) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
    }
    r->tools = out;
    return DJ_OK;
}

static bool has_tool(const struct dj_chat_req *r, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(r->tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name)) return true;
    }
    return false;
}

/* tool_choice: "auto" | "none" | "required" | {type: "function", name} or {..., function: {name}}. */
static enum dj_status take_tool_choice(struct pctx *x, struct dj_chat_req *r, json_t *tc) {
    r->tool_choice = DJ_TOOL_AUTO;
    if (!tc || json_is_null(tc)) return DJ_OK;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) r->tool_choice = DJ_TOOL_AUTO;
        else if (!strcmp(s, "none")) r->tool_choice = DJ_TOOL_NONE;
        else if (!strcmp(s, "required")) r->tool_choice = DJ_TOOL_REQUIRED;
        else return fail_at(x, "tool_choice", "tool_choice must be auto, none, required or a function");
    } else if (json_is_object(tc)) {
        json_t *name = json_object_get(json_object_get(tc, "function"), "name");
        if (!name) name = json_object_get(tc, "name");
        if (!json_is_string(name)) return fail_at(x, "tool_choice", "tool_choice names no function");
        r->tool_choice = DJ_TOOL_NAMED;
        r->tool_name = json_string_value(name);
    } else {
        return fail_at(x, "tool_choice", "tool_choice must be a string or an object");
    }
    if (r->tool_choice == DJ_TOOL_REQUIRED || r->tool_choice == DJ_TOOL_NAMED) {
        if (!r->tools || !json_array_size(r->tools)) return fail_at(x, "tool_choice", "tool_choice needs tools");
        if (r->tool_choice == DJ_TOOL_NAMED && !has_tool(r, r->tool_name))
            return fail_at(x, "tool_choice", "tool_choice names '%s', which is not one of the tools", r->tool_name);
    }
    return DJ_OK;
}

/* response_format (chat) / text.format (responses). */
static enum dj_status take_format(struct pctx *x, struct dj_chat_req *r, json_t *rf, bool flat, const char *pname) {
    if (!rf || json_is_null(rf)) return DJ_OK;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type) return fail_at(x, pname, "%s must be an object with a type", pname);
    if (!strcmp(type, "text")) return DJ_OK;
    if (!strcmp(type, "json_object")) {
        r->json_object = true;
        return DJ_OK;
    }
    if (strcmp(type, "json_schema")) return fail_at(x, pname, "%s: unknown type '%s'", pname, type);
    json_t *js = flat ? rf : json_object_get(rf, "json_schema");
    json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return fail_at(x, pname, "%s: json_schema needs a schema object", pname);
    r->json_schema = schema;
    return DJ_OK;
}

static enum dj_status take_sampling(struct pctx *x, struct dj_chat_req *r, json_t *req, const char *max_key) {
    const char *param = NULL;
    if (server_parse_sampling(req, max_key, &r->sp, &r->has_seed, &r->max_tokens, &r->n, r->stop, &r->n_stop,
                              &param) != DJ_OK) {
        snprintf(x->pbuf, sizeof x->pbuf, "%s", param ? param : "");
        *x->param = x->pbuf;
        return DJ_ERR_INVALID;
    }
    bool ok = opt_bool(req, "stream", &r->stream) && opt_bool(req, "ignore_eos", &r->ignore_eos);
    if (!ok) return fail_at(x, "stream", "'stream' and 'ignore_eos' must be booleans");
    r->parallel_tool_calls = true;
    if (!opt_bool(req, "parallel_tool_calls", &r->parallel_tool_calls))
        return fail_at(x, "parallel_tool_calls", "parallel_tool_calls must be a boolean");
    json_t *salt = json_object_get(req, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt)) return fail_at(x, "cache_salt", "cache_salt must be a string");
        r->cache_salt = json_string_value(salt);
    }
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return fail_at(x, "chat_template_kwargs", "chat_template_kwargs must be an object");
        json_object_update(kwargs_of(r), kw);
    }
    return DJ_OK;
}

/* ---- OpenAI chat completions ------------------------------------------------------ */

static enum dj_status chat_message(struct pctx *x, json_t *m, size_t i, json_t *out) {
    char p[64];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m)) return fail_at(x, p, "%s must be an object", p);
    const char *role = json_string_value(json_object_get(m, "role"));
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    bool known = false;
    for (size_t k = 0; role && k < sizeof roles / sizeof roles[0]; k++) known |= !strcmp(role, roles[k]);
    if (!known) return fail_at(x, p, "%s.role must be system, developer, user, assistant or tool", p);
    json_t *o = json_pack("{s:s}", "role", !strcmp(role, "function") ? "tool" : role);
    json_t *c = json_object_get(m, "content");
    if (!c || json_is_null(c)) {
        json_object_set_new(o, "content", json_null());
    } else if (json_is_string(c)) {
        json_object_set(o, "content", c);
    } else if (json_is_array(c)) {
        size_t k;
        json_t *part;
        json_array_foreach(c, k, part) {
            const char *t = json_string_value(json_object_get(part, "type"));
            if (!t || (strcmp(t, "text") && strcmp(t, "input_text")) || !json_is_string(json_object_get(part, "text"))) {
                json_decref(o);
                snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, k);
                return fail_at(x, p, "%s: only text content parts are supported (got '%s')", p, t ? t : "?");
            }
        }
        json_object_set(o, "content", c);
    } else {
        json_decref(o);
        return fail_at(x, p, "%s.content must be a string, an array of parts or null", p);
    }
    json_t *rc = json_object_get(m, "reasoning_content");
    if (json_is_string(rc)) json_object_set(o, "reasoning_content", rc);
    json_t *tcid = json_object_get(m, "tool_call_id");
    if (json_is_string(tcid)) json_object_set(o, "tool_call_id", tcid);
    json_t *name = json_object_get(m, "name");
    if (json_is_string(name)) json_object_set(o, "name", name);
    json_t *calls = json_object_get(m, "tool_calls");
    if (calls && !json_is_null(calls)) {
        if (!json_is_array(calls)) {
            json_decref(o);
            return fail_at(x, p, "%s.tool_calls must be an array", p);
        }
        json_t *oc = json_array();
        size_t k;
        json_t *tc;
        json_array_foreach(calls, k, tc) {
            json_t *fn = json_object_get(tc, "function");
            json_t *fname = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
            if (!json_is_string(fname)) {
                json_decref(o);
                json_decref(oc);
                snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, k);
                return fail_at(x, p, "%s needs function.name", p);
            }
            char *astr = json_is_string(args) ? strdup(json_string_value(args))
                         : args && !json_is_null(args) ? json_dumps(args, JSON_COMPACT)
                                                        : strdup("{}");
            json_t *id = json_object_get(tc, "id");
            json_array_append_new(oc, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", json_is_string(id) ? json_string_value(id) : "",
                                                "type", "function", "function", "name", fname, "arguments",
                                                astr ? astr : "{}"));
            free(astr);
        }
        json_object_set_new(o, "tool_calls", oc);
    }
    json_array_append_new(out, o);
    return DJ_OK;
}

static enum dj_status parse_openai_chat(struct pctx *x, struct dj_chat_req *r, json_t *req, const char *alias,
                                        int *status) {
    enum dj_status st;
    if ((st = check_model(x, req, alias, status))) return st;
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return fail_at(x, "messages", "messages must be a non-empty array");
    r->messages = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if ((st = chat_message(x, m, i, r->messages))) return st;
    if ((st = take_sampling(x, r, req, "max_tokens"))) return st;
    json_t *mct = json_object_get(req, "max_completion_tokens");
    if (mct && !json_is_null(mct)) {
        if (!json_is_integer(mct) || json_integer_value(mct) < 1)
            return fail_at(x, "max_completion_tokens", "max_completion_tokens must be an integer >= 1");
        r->max_tokens = (size_t)json_integer_value(mct);
    }
    if ((st = take_tools(x, r, json_object_get(req, "tools"), false))) return st;
    if ((st = take_tool_choice(x, r, json_object_get(req, "tool_choice")))) return st;
    if ((st = take_format(x, r, json_object_get(req, "response_format"), false, "response_format"))) return st;
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so) && (!json_is_object(so) || !opt_bool(so, "include_usage", &r->include_usage)))
        return fail_at(x, "stream_options", "stream_options must be an object with a boolean include_usage");
    if (!opt_bool(req, "logprobs", &r->logprobs)) return fail_at(x, "logprobs", "logprobs must be a boolean");
    json_t *tl = json_object_get(req, "top_logprobs");
    if (tl && !json_is_null(tl)) {
        if (!json_is_integer(tl) || json_integer_value(tl) < 0 || json_integer_value(tl) > 20)
            return fail_at(x, "top_logprobs", "top_logprobs must be an integer in [0, 20]");
        r->top_logprobs = (uint32_t)json_integer_value(tl);
    }
    json_t *lb = json_object_get(req, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) return fail_at(x, "logit_bias", "logit_bias must be an object of token id -> bias");
        r->bias = calloc(json_object_size(lb) + 1, sizeof *r->bias);
        if (!r->bias) return dj_fail(DJ_ERR_NOMEM, "out of memory");
        const char *k;
        json_t *v;
        json_object_foreach(lb, k, v) {
            char *end;
            long id = strtol(k, &end, 10);
            if (*end || end == k || id < 0 || id > INT32_MAX || !json_is_number(v) || json_number_value(v) < -100 ||
                json_number_value(v) > 100)
                return fail_at(x, "logit_bias", "logit_bias: '%s' must be a token id with a bias in [-100, 100]", k);
            r->bias[r->n_bias++] = (struct dj_logit_bias){(dj_token)id, (float)json_number_value(v)};
        }
        r->sp.logit_bias = r->bias;
        r->sp.n_logit_bias = r->n_bias;
    }
    json_t *re = json_object_get(req, "reasoning_effort");
    if (json_is_string(re)) json_object_set(kwargs_of(r), "reasoning_effort", re);
    return DJ_OK;
}

/* ---- OpenAI Responses ----------------------------------------------------------------- */

/* The last message if it is an assistant message to attach tool calls to, else a new one. */
static json_t *assistant_for_calls(json_t *msgs, json_t **pending_reasoning) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) ? json_array_size(msgs) - 1 : 0);
    if (last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) return last;
    json_t *a = json_pack("{s:s, s:n}", "role", "assistant", "content");
    if (*pending_reasoning) {
        json_object_set_new(a, "reasoning_content", *pending_reasoning);
        *pending_reasoning = NULL;
    }
    json_array_append_new(msgs, a);
    return a;
}

static enum dj_status parse_responses(struct pctx *x, struct dj_chat_req *r, json_t *req, const char *alias,
                                      int *status) {
    enum dj_status st;
    if ((st = check_model(x, req, alias, status))) return st;
    json_t *prev = json_object_get(req, "previous_response_id");
    if (prev && !json_is_null(prev))
        return fail_at(x, "previous_response_id",
                       "previous_response_id is not supported: deja stores no responses, send the whole input");
    r->messages = json_array();
    json_t *ins = json_object_get(req, "instructions");
    if (json_is_string(ins) && json_string_length(ins))
        json_array_append_new(r->messages, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    json_t *input = json_object_get(req, "input");
    json_t *reasoning = NULL; /* a reasoning item waiting for its assistant message */
    if (json_is_string(input)) {
        json_array_append_new(r->messages, json_pack("{s:s, s:O}", "role", "user", "content", input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it) {
            char p[48];
            snprintf(p, sizeof p, "input[%zu]", i);
            const char *type = json_string_value(json_object_get(it, "type"));
            const char *role = json_string_value(json_object_get(it, "role"));
            if (!json_is_object(it)) {
                json_decref(reasoning);
                return fail_at(x, p, "%s must be an object", p);
            }
            if ((!type || !strcmp(type, "message")) && role) {
                const char *bad = NULL;
                json_t *text = content_text(json_object_get(it, "content"), "\n", &bad);
                if (!text) {
                    json_decref(reasoning);
                    return fail_at(x, p, "%s.content: only text is supported%s%s", p, bad ? ", got " : "", bad ? bad : "");
                }
                if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")) {
                    json_decref(text);
                    json_decref(reasoning);
                    return fail_at(x, p, "%s.role must be user, assistant, system or developer", p);
                }
                json_t *m = json_pack("{s:s, s:o}", "role", role, "content", text);
                if (!strcmp(role, "assistant") && reasoning) {
                    json_object_set_new(m, "reasoning_content", reasoning);
                    reasoning = NULL;
                }
                json_array_append_new(r->messages, m);
            } else if (type && (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call"))) {
                json_t *name = json_object_get(it, "name"), *cid = json_object_get(it, "call_id");
                json_t *args = json_object_get(it, !strcmp(type, "function_call") ? "arguments" : "input");
                if (!json_is_string(name) || !json_is_string(args)) {
                    json_decref(reasoning);
                    return fail_at(x, p, "%s: a %s needs a name and string arguments", p, type);
                }
                char *astr = NULL;
                if (!strcmp(type, "custom_tool_call")) {
                    json_t *w = json_pack("{s:O}", "input", args);
                    astr = json_dumps(w, JSON_COMPACT);
                    json_decref(w);
                }
                json_t *a = assistant_for_calls(r->messages, &reasoning);
                json_t *calls = json_object_get(a, "tool_calls");
                if (!calls) {
                    calls = json_array();
                    json_object_set_new(a, "tool_calls", calls);
                }
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id",
                                                       json_is_string(cid) ? json_string_value(cid) : "", "type",
                                                       "function", "function", "name", name, "arguments",
                                                       astr ? astr : json_string_value(args)));
                free(astr);
            } else if (type && (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output"))) {
                const char *bad = NULL;
                json_t *out = content_text(json_object_get(it, "output"), "\n", &bad);
                json_t *cid = json_object_get(it, "call_id");
                if (!out) {
                    json_decref(reasoning);
                    return fail_at(x, p, "%s.output must be a string or text parts", p);
                }
                json_array_append_new(r->messages, json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id",
                                                             json_is_string(cid) ? json_string_value(cid) : "",
                                                             "content", out));
            } else if (type && !strcmp(type, "reasoning")) {
                const char *bad = NULL;
                json_t *t = content_text(json_object_get(it, "content"), "\n", &bad);
                if (!t || !json_string_length(t)) {
                    json_decref(t);
                    t = content_text(json_object_get(it, "summary"), "\n", &bad);
                }
                json_decref(reasoning);
                reasoning = t;
            } else {
                json_decref(reasoning);
                return fail_at(x, p, "%s: input items of type '%s' are not supported", p, type ? type : "?");
            }
        }
    } else {
        return fail_at(x, "input", "input must be a string or an array of items");
    }
    json_decref(reasoning);
    if (!json_array_size(r->messages)) return fail_at(x, "input", "input is empty");
    if ((st = take_sampling(x, r, req, "max_output_tokens"))) return st;
    if ((st = take_tools(x, r, json_object_get(req, "tools"), true))) return st;
    if ((st = take_tool_choice(x, r, json_object_get(req, "tool_choice")))) return st;
    if ((st = take_format(x, r, json_object_get(json_object_get(req, "text"), "format"), true, "text.format")))
        return st;
    json_t *effort = json_object_get(json_object_get(req, "reasoning"), "effort");
    if (json_is_string(effort)) json_object_set(kwargs_of(r), "reasoning_effort", effort);
    r->n = 1;
    r->include_usage = true;
    return DJ_OK;
}

/* ---- Anthropic Messages ---------------------------------------------------------------- */

static enum dj_status anthropic_message(struct pctx *x, json_t *m, size_t i, json_t *out) {
    char p[64];
    snprintf(p, sizeof p, "messages[%zu]", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return fail_at(x, p, "%s.role must be user or assistant", p);
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
        return DJ_OK;
    }
    if (!json_is_array(c)) return fail_at(x, p, "%s.content must be a string or an array of blocks", p);
    struct dj_sbuf text = {0}, think = {0};
    json_t *calls = NULL;
    size_t k;
    json_t *b;
    sbuf_append(&text, "", 0);
    json_array_foreach(c, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, k);
        if (!type) {
            sbuf_free(&text);
            sbuf_free(&think);
            json_decref(calls);
            return fail_at(x, p, "%s needs a type", p);
        }
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (json_is_string(t)) {
                if (text.n) sbuf_append(&text, "\n", 1);
                sbuf_append(&text, json_string_value(t), json_string_length(t));
            }
        } else if (!strcmp(type, "thinking")) {
            json_t *t = json_object_get(b, "thinking");
            if (json_is_string(t)) sbuf_append(&think, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "redacted_thinking")) {
            /* opaque: nothing a local model can use */
        } else if (!strcmp(type, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!json_is_string(name)) {
                sbuf_free(&text);
                sbuf_free(&think);
                json_decref(calls);
                return fail_at(x, p, "%s: tool_use needs a name", p);
            }
            char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
            if (!calls) calls = json_array();
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id",
                                                   json_is_string(id) ? json_string_value(id) : "", "type", "function",
                                                   "function", "name", name, "arguments", args ? args : "{}"));
            free(args);
        } else if (!strcmp(type, "tool_result")) {
            const char *bad = NULL;
            json_t *rc = json_object_get(b, "content");
            json_t *t = rc ? content_text(rc, "\n", &bad) : json_string("");
            if (!t) {
                sbuf_free(&text);
                sbuf_free(&think);
                json_decref(calls);
                return fail_at(x, p, "%s: tool_result content must be text (got %s)", p, bad ? bad : "?");
            }
            json_t *id = json_object_get(b, "tool_use_id");
            json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id",
                                                 json_is_string(id) ? json_string_value(id) : "", "content", t));
        } else {
            sbuf_free(&text);
            sbuf_free(&think);
            json_decref(calls);
            return fail_at(x, p, "%s: content blocks of type '%s' are not supported", p, type);
        }
    }
    if (text.n || calls || think.n || !strcmp(role, "assistant")) {
        json_t *o = json_pack("{s:s, s:s%}", "role", role, "content", text.p ? text.p : "", text.n);
        if (calls) json_object_set_new(o, "tool_calls", calls);
        if (think.n) json_object_set_new(o, "reasoning_content", json_stringn(think.p, think.n));
        json_array_append_new(out, o);
    }
    sbuf_free(&text);
    sbuf_free(&think);
    return DJ_OK;
}

static enum dj_status parse_anthropic(struct pctx *x, struct dj_chat_req *r, json_t *req, bool count) {
    enum dj_status st;
    r->messages = json_array();
    json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        const char *bad = NULL;
        json_t *t = content_text(sys, "\n", &bad);
        if (!t) return fail_at(x, "system", "system must be a string or text blocks");
        json_array_append_new(r->messages, json_pack("{s:s, s:o}", "role", "system", "content", t));
    }
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return fail_at(x, "messages", "messages must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if ((st = anthropic_message(x, m, i, r->messages))) return st;
    json_t *mt = json_object_get(req, "max_tokens");
    if (!count && !json_is_integer(mt)) return fail_at(x, "max_tokens", "max_tokens is required (an integer >= 1)");
    if ((st = take_sampling(x, r, req, "max_tokens"))) return st;
    json_t *ss = json_object_get(req, "stop_sequences");
    if (ss && !json_is_null(ss)) {
        size_t k;
        json_t *s;
        if (!json_is_array(ss)) return fail_at(x, "stop_sequences", "stop_sequences must be an array of strings");
        json_array_foreach(ss, k, s) {
            if (!json_is_string(s) || r->n_stop == DJ_SERVER_STOP_MAX)
                return fail_at(x, "stop_sequences", "stop_sequences: at most %d strings", DJ_SERVER_STOP_MAX);
            r->stop[r->n_stop++] = json_string_value(s);
        }
    }
    json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return fail_at(x, "tools", "tools must be an array");
        json_t *conv = json_array();
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (type && strcmp(type, "custom")) continue; /* server tools (web search...): not callable here */
            json_t *name = json_object_get(t, "name");
            if (!json_is_string(name)) {
                json_decref(conv);
                return fail_at(x, "tools", "tools[%zu] needs a name", k);
            }
            json_t *f = json_pack("{s:O}", "name", name);
            if (json_is_string(json_object_get(t, "description"))) json_object_set(f, "description", json_object_get(t, "description"));
            json_t *schema = json_object_get(t, "input_schema");
            json_object_set_new(f, "parameters",
                                json_is_object(schema) ? json_incref(schema) : json_pack("{s:s}", "type", "object"));
            json_array_append_new(conv, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        st = take_tools(x, r, conv, false);
        json_decref(conv);
        if (st) return st;
    }
    json_t *tc = json_object_get(req, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type) return fail_at(x, "tool_choice", "tool_choice needs a type");
        json_t *choice = !strcmp(type, "any")    ? json_string("required")
                         : !strcmp(type, "none") ? json_string("none")
                         : !strcmp(type, "tool") ? json_pack("{s:O}", "name", json_object_get(tc, "name"))
                                                 : json_string("auto");
        st = take_tool_choice(x, r, choice);
        if (r->tool_choice == DJ_TOOL_NAMED) r->tool_name = json_string_value(json_object_get(tc, "name"));
        json_decref(choice);
        if (st) return st;
        bool dp = false;
        opt_bool(tc, "disable_parallel_tool_use", &dp);
        if (dp) r->parallel_tool_calls = false;
    }
    json_t *th = json_object_get(req, "thinking");
    const char *tht = json_string_value(json_object_get(th, "type"));
    if (tht) json_object_set_new(kwargs_of(r), "enable_thinking", json_boolean(!strcmp(tht, "enabled")));
    r->n = 1;
    r->include_usage = true;
    return DJ_OK;
}

enum dj_status api_parse_chat(enum dj_api api, const char *alias, const char *body, size_t n,
                              struct dj_chat_req *out, int *http_status, const char **param) {
    static _Thread_local struct pctx x;
    memset(&x, 0, sizeof x);
    x.param = param;
    *param = NULL;
    *http_status = 400;
    struct dj_chat_req r = {0};
    r.api = api;
    if (!(r.root = server_parse_body(body, n))) return DJ_ERR_INVALID;
    enum dj_status st;
    switch (api) {
    case DJ_API_CHAT: st = parse_openai_chat(&x, &r, r.root, alias, http_status); break;
    case DJ_API_RESPONSES: st = parse_responses(&x, &r, r.root, alias, http_status); break;
    default: st = parse_anthropic(&x, &r, r.root, api == DJ_API_MESSAGES_COUNT); break;
    }
    if (st) {
        api_chat_req_free(&r);
        return st;
    }
    if (r.n == 0) r.n = 1;
    *out = r;
    return DJ_OK;
}
