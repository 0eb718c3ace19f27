/*
 * api_responses.c — OpenAI Responses (/v1/responses, as Codex CLI speaks it):
 * `input` items and `instructions` into OpenAI chat messages; function and
 * namespace tools into nested ones; the `response` object; the response.*
 * event stream; stored responses for previous_response_id (api.h).
 *
 * Input items → chat messages:
 *   instructions                      first {role: system}
 *   message {role, content}           {role, content}: user/system/developer keep text parts
 *                                     (input_text / output_text), an assistant's join into a string
 *   function_call {call_id, name, arguments[, namespace]}
 *                                     a tool call of the assistant message just before it (a text
 *                                     reply or other calls of the same turn), else of a new one;
 *                                     with a namespace, named as the flattened tool (below)
 *   function_call_output {call_id, output}
 *                                     {role: tool, tool_call_id, content}
 *   reasoning {content | summary}     reasoning_content of the next assistant message (dropped when
 *                                     none follows); it also starts a new assistant message
 * Other item types (item_reference, local_shell_call, custom_tool_call, ...) are refused:
 * deja offers no such tools, so a history holding them is not one it produced.
 *
 * Tools: {type: "function", name, ...} as is; {type: "namespace", name: NS, tools: [functions]}
 * flattened into functions named NS__NAME (Codex's own flat form: NS's trailing and NAME's
 * leading underscores trimmed, joined by "__"; characters every template and grammar family
 * accepts); the model's calls of them come back as function_call items {name: NAME, namespace:
 * NS}, and history items with a namespace render under the same flat name, so every turn renders
 * alike.  Hosted tools (web_search, file_search, image_generation, code_interpreter,
 * computer_use, local_shell, shell, apply_patch, mcp, custom, ...) are dropped: deja cannot run
 * them.
 *
 * Stored responses (api.h): r->items holds the conversation's input items; a request with
 * previous_response_id translates stored items + stored output + its own items as one input.
 *
 * Stream: response.created, response.in_progress, then per output item
 * output_item.added, [content_part.added], deltas, [*.done, content_part.done],
 * output_item.done, and response.completed (response.incomplete when
 * max_output_tokens cut it, as OpenAI does) with the whole response.  Every
 * event carries type and an increasing sequence_number from 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/api_internal.h"
#include "server/response_store.h"

static const struct api_part_names in_parts = {
    {"input_text", "output_text", "text"}, "refusal", {"input_image", "input_file", "input_audio", "image_url"}};

/* A namespace tool's flat name: NS__NAME with NS's trailing and NAME's leading '_' trimmed
 * (codex-rs protocol/src/tool_name.rs, canonical_flat_name); malloc'd, NULL when out of memory. */
static char *ns_join(const char *ns, const char *name) {
    size_t nn = strlen(ns);
    while (nn && ns[nn - 1] == '_') nn--;
    while (*name == '_') name++;
    const size_t nm = strlen(name);
    char *p = malloc(nn + 2 + nm + 1);
    if (!p) return NULL;
    memcpy(p, ns, nn);
    memcpy(p + nn, "__", 2);
    memcpy(p + nn + 2, name, nm + 1);
    return p;
}

/* The flat name's namespace and name, when it is a flattened namespace tool of meta. */
static bool ns_split(const json_t *meta, const char *flat, const char **ns, const char **name) {
    json_t *e = flat ? json_object_get(json_object_get(meta, "namespaces"), flat) : NULL;
    *ns = json_string_value(json_object_get(e, "namespace"));
    *name = json_string_value(json_object_get(e, "name"));
    return *ns && *name;
}

/* The last message of the translation if it is an assistant's. */
static json_t *last_assistant(struct api_ctx *c) {
    json_t *m = json_array_get(c->r->messages, json_array_size(c->r->messages) - 1);
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && !strcmp(role, "assistant") ? m : NULL;
}

/* Reasoning items' text waiting for the assistant message they precede. */
struct pending {
    struct api_text text;
    bool any;
};

/* A new assistant message (content given, taken), carrying the pending reasoning. */
static json_t *new_assistant(struct api_ctx *c, json_t *content, struct pending *rs) {
    json_t *m = json_object();
    if (!api_push(c->r->messages, m)) {
        json_decref(content);
        return NULL;
    }
    if (!api_set(m, "role", json_string("assistant"))) {
        json_decref(content);
        return NULL;
    }
    if (!api_set(m, "content", content)) return NULL;
    if (rs->any) {
        rs->any = false;
        if (!api_set(m, "reasoning_content", api_jstr(rs->text.p, rs->text.n))) return NULL;
        rs->text.n = 0;
    }
    return m;
}

/* The reasoning item's text: its reasoning_text content, else its summary texts (joined with a
 * blank line).  Encrypted content is ignored (deja never writes any).  NULL with c set on failure. */
static json_t *reasoning_text(struct api_ctx *c, json_t *item, size_t i) {
    static const struct api_part_names content_parts = {{"reasoning_text", "text", NULL}, NULL, {NULL}};
    static const struct api_part_names summary_parts = {{"summary_text", "text", NULL}, NULL, {NULL}};
    char base[48];
    json_t *content = json_object_get(item, "content"), *summary = json_object_get(item, "summary");
    if (json_is_array(content) && json_array_size(content)) {
        snprintf(base, sizeof base, "input[%zu].content", i);
        return api_content(c, content, base, &content_parts, "");
    }
    if (json_is_array(summary)) {
        snprintf(base, sizeof base, "input[%zu].summary", i);
        return api_content(c, summary, base, &summary_parts, "\n\n");
    }
    if ((content && !json_is_null(content)) || (summary && !json_is_null(summary))) {
        api_fail(c, 400, api_path(c, "input[%zu]", i), "input[%zu]: reasoning content and summary must be arrays", i);
        return NULL;
    }
    json_t *empty = json_string("");
    if (!empty) api_oom(c);
    return empty;
}

/* A function_call item's name as the model sees it: with a namespace, the flattened name (a new
 * string); NULL with c set on failure. */
static json_t *call_name_of(struct api_ctx *c, json_t *item, const char *p) {
    json_t *name = json_object_get(item, "name"), *ns = json_object_get(item, "namespace");
    if (!ns || json_is_null(ns)) return json_incref(name);
    if (!json_is_string(ns) || strlen(json_string_value(ns)) != json_string_length(ns) ||
        strlen(json_string_value(name)) != json_string_length(name)) {
        api_fail(c, 400, p, "%s: a function_call's namespace must be a string (and no name may hold a NUL)", p);
        return NULL;
    }
    char *flat = ns_join(json_string_value(ns), json_string_value(name));
    json_t *v = flat ? json_string(flat) : NULL;
    free(flat);
    if (!v) api_oom(c);
    return v;
}

static enum dj_status parse_item(struct api_ctx *c, json_t *item, size_t i, struct pending *rs) {
    char base[48];
    const char *p = api_path(c, "input[%zu]", i);
    if (!json_is_object(item)) return api_fail(c, 400, p, "%s must be an object", p);
    json_t *jt = json_object_get(item, "type");
    if (jt && !json_is_string(jt)) return api_fail(c, 400, p, "%s.type must be a string", p);
    const char *type = jt ? json_string_value(jt) : json_object_get(item, "role") ? "message" : "";
    if (!strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(item, "role"));
        snprintf(base, sizeof base, "input[%zu].content", i);
        json_t *content = json_object_get(item, "content");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            p = api_path(c, "input[%zu].role", i);
            return api_fail(c, 400, p, "%s must be user, assistant, system or developer", p);
        }
        if (!content || json_is_null(content)) return api_fail(c, 400, base, "%s is required", base);
        const bool asst = !strcmp(role, "assistant");
        json_t *cv = api_content(c, content, base, &in_parts, asst ? "" : NULL);
        if (!cv) return DJ_ERR_INVALID;
        if (asst) return new_assistant(c, cv, rs) ? DJ_OK : api_oom(c);
        json_t *m = json_object();
        if (!api_push(c->r->messages, m) || !api_set(m, "role", json_string(role))) {
            json_decref(cv);
            return api_oom(c);
        }
        return api_set(m, "content", cv) ? DJ_OK : api_oom(c);
    }
    if (!strcmp(type, "function_call")) {
        json_t *id = json_object_get(item, "call_id"), *args = json_object_get(item, "arguments");
        if (!json_is_string(id) || !json_is_string(json_object_get(item, "name")) ||
            !(json_is_string(args) || json_is_object(args)))
            return api_fail(c, 400, p, "%s: a function_call needs string call_id, name and arguments", p);
        json_t *name = call_name_of(c, item, p);
        if (!name) return c->status == 500 ? DJ_ERR_NOMEM : DJ_ERR_INVALID;
        json_t *a = json_incref(args);
        if (json_is_object(args)) {
            char *txt = api_dump_args(args);
            json_decref(a);
            a = txt ? json_string(txt) : NULL;
            free(txt);
        }
        json_t *call = a ? json_pack("{s:O, s:s, s:{s:o, s:o}}", "id", id, "type", "function", "function", "name", name,
                                     "arguments", a)
                         : NULL;
        if (!a) json_decref(name);
        if (!call) return api_oom(c);
        json_t *m = rs->any ? NULL : last_assistant(c);
        if (!m && !(m = new_assistant(c, json_null(), rs))) {
            json_decref(call);
            return api_oom(c);
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls && (!(calls = json_array()) || json_object_set_new(m, "tool_calls", calls))) {
            json_decref(call);
            return api_oom(c);
        }
        return api_push(calls, call) ? DJ_OK : api_oom(c);
    }
    if (!strcmp(type, "function_call_output")) {
        json_t *id = json_object_get(item, "call_id"), *out = json_object_get(item, "output");
        if (!json_is_string(id)) {
            p = api_path(c, "input[%zu].call_id", i);
            return api_fail(c, 400, p, "%s must be a string", p);
        }
        snprintf(base, sizeof base, "input[%zu].output", i);
        json_t *cv;
        if (!out || json_is_null(out)) {
            if (!(cv = json_string(""))) return api_oom(c);
        } else if (!(cv = api_content(c, out, base, &in_parts, "\n"))) {
            return DJ_ERR_INVALID;
        }
        json_t *m = json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", cv);
        return api_push(c->r->messages, m) ? DJ_OK : api_oom(c);
    }
    if (!strcmp(type, "reasoning")) {
        json_t *t = reasoning_text(c, item, i);
        if (!t) return DJ_ERR_INVALID;
        bool ok = true;
        if (json_string_length(t)) { /* several reasoning items in a row: one text, a blank line between */
            if (rs->any) ok = api_text_add(&rs->text, "\n\n", 2);
            ok = ok && api_text_add(&rs->text, json_string_value(t), json_string_length(t));
            rs->any = true;
        }
        json_decref(t);
        return ok ? DJ_OK : api_oom(c);
    }
    p = api_path(c, "input[%zu].type", i);
    return api_fail(c, 400, p, "%s: input item type '%.40s' is not supported", p, type);
}

/* c->r->messages (replaced) = instructions (a string, or NULL) as a system message + the items,
 * translated one by one. */
static enum dj_status translate(struct api_ctx *c, json_t *instructions, json_t *items) {
    struct dj_chat_req *r = c->r;
    json_decref(r->messages);
    if (!(r->messages = json_array())) return api_oom(c);
    if (instructions && !api_push(r->messages, json_pack("{s:s, s:O}", "role", "system", "content", instructions)))
        return api_oom(c);
    struct pending rs = {0};
    size_t i;
    json_t *item;
    enum dj_status st = DJ_OK;
    json_array_foreach(items, i, item) {
        if ((st = parse_item(c, item, i, &rs))) break;
    }
    api_text_free(&rs.text); /* reasoning with no reply after it: nothing to attach it to */
    return st;
}

/* r->items: the input as items (a string becomes one user message item; an array is shared item
 * by item), then its translation. */
static enum dj_status parse_input(struct api_ctx *c, json_t *root) {
    struct dj_chat_req *r = c->r;
    json_t *instructions;
    if (!api_opt(c, root, "instructions", JSON_STRING, "instructions", &instructions)) return DJ_ERR_INVALID;
    json_t *in = json_object_get(root, "input");
    if (json_is_string(in)) {
        r->items = json_pack("[{s:s, s:s, s:O}]", "type", "message", "role", "user", "content", in);
    } else if (json_is_array(in)) {
        r->items = json_array();
        if (r->items && json_array_extend(r->items, in)) return api_oom(c);
    } else if ((!in || json_is_null(in)) && r->previous_response_id) {
        r->items = json_array(); /* the stored conversation goes on without new input */
    } else {
        return api_fail(c, 400, "input", "input must be a string or an array of input items");
    }
    if (!r->items) return api_oom(c);
    return translate(c, instructions, r->items);
}

/* The meta object, made on first use. */
static json_t *meta_get(struct api_ctx *c, const char *key) {
    struct dj_chat_req *r = c->r;
    if (!r->resp_meta && !(r->resp_meta = json_object())) return NULL;
    json_t *v = json_object_get(r->resp_meta, key);
    if (!v && (!(v = json_object()) || json_object_set_new(r->resp_meta, key, v))) return NULL;
    return v;
}

/* A namespace tool {type: "namespace", name, description, tools: [...]} at tools[i]: its functions
 * as NS__NAME, each recorded in meta.namespaces; its other tools (custom) dropped. */
static enum dj_status add_namespace(struct api_ctx *c, json_t *t, size_t i) {
    char p[64], q[96];
    snprintf(p, sizeof p, "tools[%zu]", i);
    json_t *ns = json_object_get(t, "name"), *sub = json_object_get(t, "tools");
    snprintf(q, sizeof q, "%s.name", p);
    if (!json_is_string(ns) || !json_string_length(ns) || strlen(json_string_value(ns)) != json_string_length(ns))
        return api_fail(c, 400, q, "%s: a namespace needs a non-empty string name (without NUL)", q);
    snprintf(q, sizeof q, "%s.tools", p);
    if (!json_is_array(sub)) return api_fail(c, 400, q, "%s must be an array of tools", q);
    size_t j;
    json_t *f;
    json_array_foreach(sub, j, f) {
        snprintf(q, sizeof q, "%s.tools[%zu]", p, j);
        const char *type = json_string_value(json_object_get(f, "type"));
        if (!json_is_object(f) || !type) return api_fail(c, 400, q, "%s must be an object with a string type", q);
        if (strcmp(type, "function")) continue;
        json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || !json_string_length(name) ||
            strlen(json_string_value(name)) != json_string_length(name)) {
            char qn[112];
            snprintf(qn, sizeof qn, "%s.name", q);
            return api_fail(c, 400, qn, "%s: a tool needs a non-empty string name (without NUL)", qn);
        }
        char *flat = ns_join(json_string_value(ns), json_string_value(name));
        json_t *fl = flat ? json_string(flat) : NULL;
        json_t *names = meta_get(c, "namespaces");
        enum dj_status st = fl && names ? api_add_function(c, f, q, fl) : api_oom(c);
        if (!st && !api_set(names, flat, json_pack("{s:O, s:O}", "namespace", ns, "name", name))) st = api_oom(c);
        json_decref(fl);
        free(flat);
        if (st) return st;
    }
    return DJ_OK;
}

/* tools: [{type: "function", name, description?, parameters?, strict?}] (flat) and namespaces of
 * them; hosted tools (web_search, file_search, local_shell, custom, mcp, ...) are dropped: deja
 * cannot run them.  tool_choice: auto / none / required, {type: "function", name[, namespace]},
 * {type: "allowed_tools", mode} (the mode; the list is not enforced: every tool stays visible, as
 * the prompt — and its cached KV — would otherwise change). */
static enum dj_status parse_tools(struct api_ctx *c, json_t *root) {
    json_t *tools;
    if (!api_opt(c, root, "tools", JSON_ARRAY, "tools", &tools)) return DJ_ERR_INVALID;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48];
        snprintf(p, sizeof p, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type) return api_fail(c, 400, p, "%s must be an object with a string type", p);
        enum dj_status st = DJ_OK;
        if (!strcmp(type, "function")) st = api_add_function(c, t, p, json_object_get(t, "name"));
        else if (!strcmp(type, "namespace")) st = add_namespace(c, t, i);
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
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (type && !strcmp(type, "allowed_tools")) {
            const char *mode = json_string_value(json_object_get(tc, "mode"));
            if (!mode || (strcmp(mode, "auto") && strcmp(mode, "required")))
                return api_fail(c, 400, "tool_choice.mode", "tool_choice.mode must be 'auto' or 'required'");
            c->r->tool_choice = !strcmp(mode, "auto") ? DJ_TOOL_AUTO : DJ_TOOL_REQUIRED;
        } else if (!type || strcmp(type, "function")) {
            return api_fail(c, 400, "tool_choice",
                            "tool_choice must be {type: 'function', name} or {type: 'allowed_tools', mode} (hosted "
                            "tools are not run by deja)");
        } else {
            json_t *nm = json_object_get(tc, "name");
            if (!json_is_string(nm)) return api_named_tool(c, "tool_choice.name", nm); /* (its error) */
            json_t *name = call_name_of(c, tc, "tool_choice");
            if (!name) return c->status == 500 ? DJ_ERR_NOMEM : DJ_ERR_INVALID;
            /* tool_name must outlive the call: keep the (maybe flattened) name in meta */
            json_t *m = meta_get(c, "request");
            if (!m || json_object_set_new(m, "tool_choice_name", name)) return api_oom(c);
            enum dj_status st = api_named_tool(c, "tool_choice.name", json_object_get(m, "tool_choice_name"));
            if (st) return st;
        }
    } else if (tc && !json_is_null(tc)) {
        return api_fail(c, 400, "tool_choice", "tool_choice must be a string or an object");
    }
    json_t *par;
    if (!api_opt(c, root, "parallel_tool_calls", JSON_TRUE, "parallel_tool_calls", &par)) return DJ_ERR_INVALID;
    if (par) c->r->parallel_tool_calls = json_is_true(par);
    return DJ_OK;
}

/* A float setting as the request would have written it (6 significant digits: 0.8f is 0.8). */
static json_t *num6(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)f);
    return json_real(strtod(b, NULL));
}

/* meta.echo: the request's settings as OpenAI's response object repeats them (defaults where
 * absent; temperature and top_p as used). */
static enum dj_status make_echo(struct api_ctx *c, json_t *root) {
    struct dj_chat_req *r = c->r;
    json_t *e = meta_get(c, "echo");
    if (!e) return api_oom(c);
    static const char *const given[] = {"instructions", "max_output_tokens", "previous_response_id", "max_tool_calls"};
    bool ok = true;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        json_t *v = json_object_get(root, given[i]);
        ok = ok && api_set(e, given[i], v ? json_incref(v) : json_null());
    }
    static const char *const if_given[] = {"user", "prompt_cache_key", "safety_identifier", "top_logprobs"};
    for (size_t i = 0; i < sizeof if_given / sizeof if_given[0]; i++) {
        json_t *v = json_object_get(root, if_given[i]);
        if (v && !json_is_null(v)) ok = ok && api_set(e, if_given[i], json_incref(v));
    }
    static const struct {
        const char *key, *dflt; /* a JSON default */
    } with_default[] = {{"metadata", "{}"},
                        {"tools", "[]"},
                        {"tool_choice", "\"auto\""},
                        {"text", "{\"format\": {\"type\": \"text\"}}"},
                        {"truncation", "\"disabled\""},
                        {"service_tier", "\"default\""},
                        {"reasoning", "{\"effort\": null, \"summary\": null}"}};
    for (size_t i = 0; i < sizeof with_default / sizeof with_default[0]; i++) {
        json_t *v = json_object_get(root, with_default[i].key);
        ok = ok && api_set(e, with_default[i].key,
                           v && !json_is_null(v) ? json_incref(v) : json_loads(with_default[i].dflt, JSON_DECODE_ANY, NULL));
    }
    ok = ok && api_set(e, "parallel_tool_calls", json_boolean(r->parallel_tool_calls)) &&
         api_set(e, "temperature", num6(r->sp.temp)) && api_set(e, "top_p", num6(r->sp.top_p)) &&
         api_set(e, "store", json_boolean(r->store)) && api_set(e, "background", json_false());
    return ok ? DJ_OK : api_oom(c);
}

enum dj_status api_responses_parse(struct api_ctx *c, json_t *root) {
    struct dj_chat_req *r = c->r;
    /* what deja cannot do is refused by name; a field that is null or false is always accepted */
    static const struct {
        const char *key, *why;
    } refused[] = {
        {"conversation", "conversation is not supported (deja has no Conversations API): send previous_response_id or the "
                         "whole input"},
        {"prompt", "prompt (a stored prompt template) is not supported: send instructions and input"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        json_t *v = json_object_get(root, refused[i].key);
        if (v && !json_is_null(v)) return api_fail(c, 400, refused[i].key, "%s", refused[i].why);
    }
    json_t *v;
    if (!api_opt(c, root, "background", JSON_TRUE, "background", &v)) return DJ_ERR_INVALID;
    if (json_is_true(v))
        return api_fail(c, 400, "background",
                        "background: true is not supported (deja answers in the foreground; stream for progress)");
    if (!api_opt(c, root, "store", JSON_TRUE, "store", &v)) return DJ_ERR_INVALID;
    r->store = v ? json_is_true(v) : true;
    if (!api_opt(c, root, "previous_response_id", JSON_STRING, "previous_response_id", &v)) return DJ_ERR_INVALID;
    r->previous_response_id = json_string_value(v);
    enum dj_status st;
    if ((st = parse_input(c, root))) return st;
    if ((st = parse_tools(c, root))) return st;
    json_t *text, *fmt, *reasoning, *effort;
    if (!api_opt(c, root, "text", JSON_OBJECT, "text", &text)) return DJ_ERR_INVALID;
    if (text && !api_opt(c, text, "format", JSON_OBJECT, "text.format", &fmt)) return DJ_ERR_INVALID;
    if (text && fmt) {
        const char *type = json_string_value(json_object_get(fmt, "type"));
        json_t *schema;
        if (type && !strcmp(type, "json_schema")) {
            if (!api_opt(c, fmt, "schema", JSON_OBJECT, "text.format.schema", &schema)) return DJ_ERR_INVALID;
            c->r->json_schema = schema;
            c->r->json_object = !schema;
        } else if (type && !strcmp(type, "json_object")) {
            c->r->json_object = true;
        } else if (!type || strcmp(type, "text")) {
            return api_fail(c, 400, "text.format.type", "text.format.type must be 'text', 'json_object' or 'json_schema'");
        }
    }
    if (!api_opt(c, root, "reasoning", JSON_OBJECT, "reasoning", &reasoning)) return DJ_ERR_INVALID;
    if (reasoning && !api_opt(c, reasoning, "effort", JSON_STRING, "reasoning.effort", &effort)) return DJ_ERR_INVALID;
    if (reasoning && effort && (st = api_effort(c, effort))) return st;
    return make_echo(c, root);
}

/* ---- the response object ------------------------------------------------------------------ */

/* "resp_X" → "X": the suffix item ids are made from. */
static const char *id_suffix(const char *id) { return !strncmp(id, "resp_", 5) ? id + 5 : id; }

static json_t *usage_json(const struct dj_chat_usage *u) {
    const struct dj_chat_usage z = {0};
    if (!u) u = &z;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->prompt,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cached, "output_tokens",
                     (json_int_t)u->completion, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                     "total_tokens", (json_int_t)(u->prompt + u->completion));
}

/* The response object (takes output).  status: in_progress / completed / incomplete / failed;
 * usage NULL: null.  The request-echo fields (tools, tool_choice, store, ...) come from meta's
 * echo (api_stream_set_meta / api_responses_apply_meta); without one they are placeholders. */
static json_t *response_json(const char *id, const char *model, time_t created, const char *status, json_t *output,
                             const struct dj_chat_usage *u, bool with_usage, const char *error, const json_t *meta) {
    const bool incomplete = !strcmp(status, "incomplete");
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:n, s:s, s:o, s:b, s:n, s:n, s:s, s:[], s:b, s:{}, s:o}",
                          "id", id, "object", "response", "created_at", (json_int_t)created, "status", status, "error",
                          error ? json_pack("{s:s, s:o}", "code", "server_error", "message",
                                            api_jstr(error, strlen(error)))
                                : json_null(),
                          "incomplete_details",
                          incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
                          "instructions", "model", model, "output", output, "parallel_tool_calls", 1, "temperature",
                          "top_p", "tool_choice", "auto", "tools", "store", 0, "metadata", "usage",
                          with_usage ? usage_json(u) : json_null());
    if (r && with_usage && u && u->x_deja && !api_set(r, "x_deja", json_incref(u->x_deja))) {
        json_decref(r);
        return NULL;
    }
    json_t *echo = json_object_get(meta, "echo");
    if (r && echo && json_object_update(r, echo)) {
        json_decref(r);
        return NULL;
    }
    return r;
}

static json_t *reasoning_item(const char *item_id, json_t *text) {
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}]}", "type", "reasoning", "id", item_id, "summary", "content",
                     "type", "reasoning_text", "text", text);
}

static json_t *message_item(const char *item_id, const char *status, json_t *text) {
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[]}]}", "type", "message", "id", item_id, "status", status,
                     "role", "assistant", "content", "type", "output_text", "text", text, "annotations");
}

/* A function_call item; a call of a flattened namespace tool of meta is named {name, namespace}. */
static json_t *call_item(const char *item_id, const char *call_id, const char *name, json_t *args, const char *status,
                         const json_t *meta) {
    const char *ns = NULL, *bare = NULL;
    if (ns_split(meta, name, &ns, &bare)) name = bare;
    json_t *it = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s}", "type", "function_call", "id", item_id, "call_id", call_id,
                           "name", api_jstr(name, strlen(name)), "arguments", args, "status", status);
    if (it && ns && !api_set(it, "namespace", json_string(ns))) {
        json_decref(it);
        return NULL;
    }
    return it;
}

json_t *api_responses_response(const char *id, const char *model, time_t created, const struct dj_chat_choice *c,
                               const struct dj_chat_usage *u) {
    const bool incomplete = c->finish == DJ_FINISH_LENGTH;
    const char *sfx = id_suffix(id);
    char item_id[128];
    json_t *out = json_array();
    bool ok = out != NULL;
    size_t k = 0;
    if (ok && c->n_reasoning) {
        snprintf(item_id, sizeof item_id, "rs_%s_%zu", sfx, k++);
        ok = api_push(out, reasoning_item(item_id, api_jstr(c->reasoning, c->n_reasoning)));
    }
    if (ok && (c->n_content || !c->n_calls)) { /* a message item unless the reply is only calls */
        snprintf(item_id, sizeof item_id, "msg_%s_%zu", sfx, k++);
        ok = api_push(out, message_item(item_id, incomplete ? "incomplete" : "completed",
                                        api_jstr(c->content, c->n_content)));
    }
    for (size_t j = 0; ok && j < c->n_calls; j++) {
        const struct dj_chat_call *call = &c->calls[j];
        snprintf(item_id, sizeof item_id, "fc_%s_%zu", sfx, k++);
        ok = api_push(out, call_item(item_id, call->id, call->name ? call->name : "",
                                     api_jstr(call->args, call->args ? call->n_args : 0), "completed", NULL));
    }
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return response_json(id, model, created, incomplete ? "incomplete" : "completed", out, u, true, NULL, NULL);
}

/* ---- the event stream --------------------------------------------------------------------- */

/* Appends event `type` (takes j, an object of the event's other fields; adds type and
 * sequence_number first). */
static void event(struct dj_api_stream *st, struct dj_sbuf *out, const char *type, json_t *j) {
    json_t *e = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)st->seq++);
    if (!e || !j || json_object_update(e, j)) {
        json_decref(e);
        json_decref(j);
        out->oom = true;
        return;
    }
    json_decref(j);
    api_sse(out, type, e);
}

void api_responses_start(struct dj_api_stream *st, struct dj_sbuf *out) {
    event(st, out, "response.created",
          json_pack("{s:o}", "response", response_json(st->id, st->model, st->created, "in_progress", json_array(),
                                                       NULL, false, NULL, st->meta)));
    event(st, out, "response.in_progress",
          json_pack("{s:o}", "response", response_json(st->id, st->model, st->created, "in_progress", json_array(),
                                                       NULL, false, NULL, st->meta)));
}

static const char *call_name(const struct api_choice_state *c) { return c->call_name_big ? c->call_name_big : c->call_name; }

/* Opens an output item of kind b (for TOOL: the call of d). */
static void open_item(struct dj_api_stream *st, enum api_block b, const struct dj_chat_delta *d, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    const uint32_t k = c->n_blocks++;
    const json_int_t oi = (json_int_t)k;
    c->open = b;
    c->text.n = 0;
    if (c->text.p) c->text.p[0] = 0;
    const char *sfx = id_suffix(st->id);
    if (b == API_BLOCK_TEXT) {
        c->any_message = true;
        snprintf(c->item_id, sizeof c->item_id, "msg_%s_%u", sfx, k);
        event(st, out, "response.output_item.added",
              json_pack("{s:I, s:{s:s, s:s, s:s, s:s, s:[]}}", "output_index", oi, "item", "type", "message", "id",
                        c->item_id, "status", "in_progress", "role", "assistant", "content"));
        event(st, out, "response.content_part.added",
              json_pack("{s:s, s:I, s:I, s:{s:s, s:s, s:[]}}", "item_id", c->item_id, "output_index", oi,
                        "content_index", (json_int_t)0, "part", "type", "output_text", "text", "", "annotations"));
    } else if (b == API_BLOCK_REASONING) {
        snprintf(c->item_id, sizeof c->item_id, "rs_%s_%u", sfx, k);
        event(st, out, "response.output_item.added",
              json_pack("{s:I, s:{s:s, s:s, s:[], s:[]}}", "output_index", oi, "item", "type", "reasoning", "id",
                        c->item_id, "summary", "content"));
        event(st, out, "response.content_part.added",
              json_pack("{s:s, s:I, s:I, s:{s:s, s:s}}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "part", "type", "reasoning_text", "text", ""));
    } else {
        snprintf(c->item_id, sizeof c->item_id, "fc_%s_%u", sfx, k);
        snprintf(c->call_id, sizeof c->call_id, "%s", d->id ? d->id : "");
        const char *name = d->name ? d->name : "";
        free(c->call_name_big);
        c->call_name_big = NULL;
        if (strlen(name) >= sizeof c->call_name) c->call_name_big = strdup(name);
        snprintf(c->call_name, sizeof c->call_name, "%s", name);
        c->open_tool = d->tool_index;
        event(st, out, "response.output_item.added",
              json_pack("{s:I, s:o}", "output_index", oi, "item",
                        call_item(c->item_id, c->call_id, call_name(c), json_string(""), "in_progress", st->meta)));
    }
}

/* Closes the open item: its done events; the finished item joins st->output. */
static void close_item(struct dj_api_stream *st, bool incomplete, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    const json_int_t oi = (json_int_t)(c->n_blocks - 1);
    const char *txt = c->text.p ? c->text.p : "";
    json_t *item = NULL;
    if (c->open == API_BLOCK_TEXT) {
        event(st, out, "response.output_text.done",
              json_pack("{s:s, s:I, s:I, s:o, s:[]}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "text", api_jstr(txt, c->text.n), "logprobs"));
        event(st, out, "response.content_part.done",
              json_pack("{s:s, s:I, s:I, s:{s:s, s:o, s:[]}}", "item_id", c->item_id, "output_index", oi,
                        "content_index", (json_int_t)0, "part", "type", "output_text", "text",
                        api_jstr(txt, c->text.n), "annotations"));
        item = message_item(c->item_id, incomplete ? "incomplete" : "completed", api_jstr(txt, c->text.n));
    } else if (c->open == API_BLOCK_REASONING) {
        event(st, out, "response.reasoning_text.done",
              json_pack("{s:s, s:I, s:I, s:o}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "text", api_jstr(txt, c->text.n)));
        event(st, out, "response.content_part.done",
              json_pack("{s:s, s:I, s:I, s:{s:s, s:o}}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "part", "type", "reasoning_text", "text", api_jstr(txt, c->text.n)));
        item = reasoning_item(c->item_id, api_jstr(txt, c->text.n));
    } else if (c->open == API_BLOCK_TOOL) {
        const char *ns, *name = call_name(c);
        if (!ns_split(st->meta, name, &ns, &name)) name = call_name(c);
        event(st, out, "response.function_call_arguments.done",
              json_pack("{s:s, s:I, s:o, s:o}", "item_id", c->item_id, "output_index", oi, "name",
                        api_jstr(name, strlen(name)), "arguments", api_jstr(txt, c->text.n)));
        item = call_item(c->item_id, c->call_id, call_name(c), api_jstr(txt, c->text.n), "completed", st->meta);
    } else {
        return;
    }
    c->open = API_BLOCK_NONE;
    if (!item) {
        out->oom = true;
        return;
    }
    event(st, out, "response.output_item.done", json_pack("{s:I, s:O}", "output_index", oi, "item", item));
    if (!api_push(st->output, item)) out->oom = true;
}

void api_responses_delta(struct dj_api_stream *st, const struct dj_chat_delta *d, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    const char *type;
    enum api_block b;
    switch (d->kind) {
    case DJ_DELTA_CONTENT:
        b = API_BLOCK_TEXT, type = "response.output_text.delta";
        break;
    case DJ_DELTA_REASONING:
        b = API_BLOCK_REASONING, type = "response.reasoning_text.delta";
        break;
    case DJ_DELTA_TOOL_START:
        close_item(st, false, out);
        open_item(st, API_BLOCK_TOOL, d, out);
        return;
    case DJ_DELTA_TOOL_ARGS:
        /* a call's arguments follow its start (toolparse.h); arguments of a call already
         * closed could not be placed in its item and are dropped */
        if (c->open != API_BLOCK_TOOL || c->open_tool != d->tool_index) return;
        b = API_BLOCK_TOOL, type = "response.function_call_arguments.delta";
        break;
    default:
        return;
    }
    if (d->n == 0) return;
    if (c->open != b) {
        close_item(st, false, out);
        open_item(st, b, d, out);
    }
    if (!api_text_add(&c->text, d->text, d->n)) {
        out->oom = true;
        return;
    }
    const json_int_t oi = (json_int_t)(c->n_blocks - 1);
    if (b == API_BLOCK_TOOL)
        event(st, out, type,
              json_pack("{s:s, s:I, s:o}", "item_id", c->item_id, "output_index", oi, "delta", api_jstr(d->text, d->n)));
    else if (b == API_BLOCK_TEXT)
        event(st, out, type,
              json_pack("{s:s, s:I, s:I, s:o, s:[]}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "delta", api_jstr(d->text, d->n), "logprobs"));
    else
        event(st, out, type,
              json_pack("{s:s, s:I, s:I, s:o}", "item_id", c->item_id, "output_index", oi, "content_index",
                        (json_int_t)0, "delta", api_jstr(d->text, d->n)));
}

void api_responses_finish(struct dj_api_stream *st, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    const bool incomplete = c->finish == DJ_FINISH_LENGTH;
    close_item(st, incomplete, out);
    if (!c->any_message && !c->had_calls) { /* as api_response: a reply that is not only calls has a message */
        open_item(st, API_BLOCK_TEXT, NULL, out);
        close_item(st, incomplete, out);
    }
}

void api_responses_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out) {
    const bool incomplete = st->ch[0].finish == DJ_FINISH_LENGTH;
    json_t *resp = response_json(st->id, st->model, st->created, incomplete ? "incomplete" : "completed",
                                 json_incref(st->output), u, true, NULL, st->meta);
    json_decref(st->final);
    st->final = json_incref(resp); /* api_stream_response */
    event(st, out, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", resp));
}

void api_responses_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out) {
    event(st, out, "response.failed",
          json_pack("{s:o}", "response",
                    response_json(st->id, st->model, st->created, "failed", json_incref(st->output), NULL, false, msg,
                                  st->meta)));
}

/* ---- request echo, stored responses ---------------------------------------------------------- */

void api_stream_set_meta(struct dj_api_stream *st, const json_t *meta) {
    if (!st || st->api != DJ_API_RESPONSES || !meta) return;
    json_decref(st->meta);
    st->meta = json_incref((json_t *)meta);
}

json_t *api_stream_response(const struct dj_api_stream *st) {
    return st && st->api == DJ_API_RESPONSES && st->final ? json_incref(st->final) : NULL;
}

void api_responses_apply_meta(json_t *resp, const json_t *meta) {
    if (!resp || !meta) return;
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(resp, "output"), i, it) {
        const char *type = json_string_value(json_object_get(it, "type")), *ns, *name;
        if (type && !strcmp(type, "function_call") &&
            ns_split(meta, json_string_value(json_object_get(it, "name")), &ns, &name)) {
            json_t *nv = json_string(name), *nsv = json_string(ns); /* before "name" is replaced */
            json_object_set_new(it, "name", nv);
            json_object_set_new(it, "namespace", nsv);
        }
    }
    json_t *echo = json_object_get(meta, "echo");
    if (echo) json_object_update(resp, echo);
}

/* OpenAI's 404 for a response id: {message, type: invalid_request_error, param, code}. */
static json_t *not_found(const char *id, bool previous) {
    char msg[200];
    snprintf(msg, sizeof msg, previous ? "Previous response with id '%.100s' not found." : "Response with id '%.100s' not found.",
             id);
    return api_error_json_ex(DJ_API_RESPONSES, 404, "invalid_request_error", previous ? "previous_response_id" : NULL,
                             previous ? "previous_response_not_found" : NULL, msg);
}

static json_t *server_error(const char *msg) {
    return api_error_json_ex(DJ_API_RESPONSES, 500, NULL, NULL, NULL, msg);
}

enum dj_status api_responses_attach(struct dj_chat_req *r, struct dj_response_store *store, json_t **err,
                                    unsigned *http_status) {
    *err = NULL;
    *http_status = 200;
    if (r->api != DJ_API_RESPONSES) return DJ_OK;
    if (!store) { /* storing is off: say so in the echo */
        r->store = false;
        json_t *echo = json_object_get(r->resp_meta, "echo");
        if (echo) json_object_set_new(echo, "store", json_false());
    }
    const char *id = r->previous_response_id;
    if (!id) return DJ_OK;
    char *in = NULL, *resp = NULL;
    size_t n_in = 0, n_resp = 0;
    enum dj_status st = store ? response_store_get(store, id, &in, &n_in, &resp, &n_resp) : DJ_ERR_NOT_FOUND;
    if (st) {
        *http_status = st == DJ_ERR_NOT_FOUND ? 404 : 500;
        *err = st == DJ_ERR_NOT_FOUND ? not_found(id, true) : server_error("out of memory");
        return st;
    }
    json_t *items = json_loadb(in, n_in, 0, NULL), *prev = json_loadb(resp, n_resp, 0, NULL);
    free(in);
    free(resp);
    json_t *output = json_object_get(prev, "output");
    json_t *all = json_array();
    if (!json_is_array(items) || !json_is_array(output) || !all || json_array_extend(all, items) ||
        json_array_extend(all, output) || json_array_extend(all, r->items)) {
        json_decref(items);
        json_decref(prev);
        json_decref(all);
        *http_status = 500;
        *err = server_error("the stored response could not be read back (out of memory?)");
        return dj_fail(DJ_ERR_NOMEM, "previous_response_id '%.64s': the stored response could not be read", id);
    }
    json_decref(items);
    json_decref(prev);
    /* one translation of the whole conversation, as if the client had sent it all */
    struct api_ctx c = {.api = DJ_API_RESPONSES, .r = r, .status = 400};
    st = translate(&c, json_object_get(r->root, "instructions"), all);
    json_decref(r->items);
    r->items = all;
    if (!st && json_array_size(r->messages) == 0) st = api_fail(&c, 400, "input", "input: no messages to answer");
    if (st) {
        *http_status = (unsigned)c.status;
        *err = api_error_json(DJ_API_RESPONSES, *http_status, c.param[0] ? c.param : NULL, dj_last_error());
    }
    return st;
}

enum dj_status api_responses_keep(struct dj_response_store *store, const json_t *items, const json_t *response) {
    const char *id = json_string_value(json_object_get(response, "id"));
    const char *status = json_string_value(json_object_get(response, "status"));
    if (!store || !id || !status || (strcmp(status, "completed") && strcmp(status, "incomplete"))) return DJ_OK;
    json_t *empty = items ? NULL : json_array();
    char *in = api_dumps(items ? items : empty), *resp = api_dumps(response);
    json_decref(empty);
    enum dj_status st = in && resp ? response_store_put(store, id, in, strlen(in), resp, strlen(resp))
                                   : dj_fail(DJ_ERR_NOMEM, "response '%.64s': out of memory storing it", id);
    free(in);
    free(resp);
    return st;
}

json_t *api_responses_get(struct dj_response_store *store, const char *id, json_t **err) {
    char *txt = NULL;
    size_t n = 0;
    *err = NULL;
    enum dj_status st = store ? response_store_get(store, id, NULL, NULL, &txt, &n) : DJ_ERR_NOT_FOUND;
    json_t *j = st ? NULL : json_loadb(txt, n, 0, NULL);
    free(txt);
    if (!j) *err = st == DJ_ERR_NOT_FOUND ? not_found(id, false) : server_error("out of memory");
    return j;
}

json_t *api_responses_delete(struct dj_response_store *store, const char *id, json_t **err) {
    *err = NULL;
    if (!store || !response_store_delete(store, id)) {
        *err = not_found(id, false);
        return NULL;
    }
    json_t *j = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1);
    if (!j) *err = server_error("out of memory");
    return j;
}
