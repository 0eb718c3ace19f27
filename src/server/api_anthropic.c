/*
 * api_anthropic.c — Anthropic Messages (/v1/messages and
 * /v1/messages/count_tokens, as Claude Code speaks them): system, messages
 * with content blocks, tools and tool_choice into OpenAI chat messages; the
 * message object; the message_start / content_block_* / message_delta /
 * message_stop stream.
 *
 * Content blocks → chat messages:
 *   system (string | text blocks)    first {role: system, content: the texts joined with "\n"}
 *   user: text                       text parts of a user message
 *   user: tool_result {tool_use_id, content, is_error}
 *                                    {role: tool, tool_call_id, content: text (blocks joined with
 *                                    "\n")}; a user message with tool results and text becomes the
 *                                    tool messages, then a user message with the text
 *   assistant: text                  content (the texts joined, as one reply)
 *   assistant: thinking              reasoning_content (redacted_thinking is dropped)
 *   assistant: tool_use {id, name, input}
 *                                    tool_calls [{id, type: "function", function: {name,
 *                                    arguments: input as JSON text}}]; content null when no text
 *   image, document                  400: the models deja serves read text
 * is_error is not shown to the model (the text says what failed; OpenAI's tool message has no
 * such flag).  Tools with a `type` other than "custom" (Anthropic's server and built-in tools) are
 * dropped: deja cannot run them.
 *
 * Claude Code starts its system prompt with "x-anthropic-billing-header: ...; cch=XXXXX;" where
 * XXXXX changes every request; left alone it would end the reusable prefix at the first line of
 * every prompt.  Its value is replaced with zeros (as llama.cpp does since its PR 21793).
 *
 * Usage: Anthropic counts input_tokens without the cached part: input_tokens = prompt - cached,
 * cache_read_input_tokens = cached, cache_creation_input_tokens = 0 (deja keeps every prompt
 * without being asked, so no write is billed).  A stream's message_start can only say
 * input_tokens = the prompt's length (the cache is not known yet); message_delta carries the
 * final split, which the SDKs copy over the start's.
 *
 * Stream: a content block ends when the delta kind changes (text, thinking, another tool call);
 * a thinking block has no signature_delta (deja signs nothing; the signature is ""), except with
 * display "omitted": then it has no thinking_delta either, and one signature_delta carries the
 * reasoning back (see reasoning_signature).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/api_internal.h"

static const struct api_part_names result_parts = {{"text", NULL, NULL}, NULL, {"image", "document", NULL}};
static const struct api_part_names system_parts = {{"text", NULL, NULL}, NULL, {"image", "document", NULL}};

/* Thinking blocks with display "omitted" carry no text: their signature carries the reasoning,
 * "deja1." + base64 of its UTF-8, so that the block the client sends back next turn renders the
 * same prompt (and reuses the same KV) as the turn that produced it. */
static const char sig_prefix[] = "deja1.";
static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "deja1." + base64(s[0..n)) as a JSON string (NULL when out of memory). */
static json_t *reasoning_signature(const char *s, size_t n) {
    if (n > (SIZE_MAX - 16) / 4 * 3) return NULL;
    const size_t np = sizeof sig_prefix - 1, m = np + (n + 2) / 3 * 4;
    char *out = malloc(m + 1);
    if (!out) return NULL;
    memcpy(out, sig_prefix, np);
    size_t o = np;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned a = (unsigned char)s[i], b = i + 1 < n ? (unsigned char)s[i + 1] : 0,
                       c = i + 2 < n ? (unsigned char)s[i + 2] : 0;
        out[o++] = b64_alphabet[a >> 2];
        out[o++] = b64_alphabet[((a & 3) << 4) | (b >> 4)];
        out[o++] = i + 1 < n ? b64_alphabet[((b & 15) << 2) | (c >> 6)] : '=';
        out[o++] = i + 2 < n ? b64_alphabet[c & 63] : '=';
    }
    json_t *v = json_stringn(out, o);
    free(out);
    return v;
}

/* The reasoning a deja signature carries (a new JSON string), or NULL when sig is not one of
 * deja's or does not decode to UTF-8 text (then the block is taken as it stands). */
static json_t *signature_reasoning(json_t *sig) {
    const char *s = json_string_value(sig);
    const size_t np = sizeof sig_prefix - 1;
    if (!s || json_string_length(sig) < np || memcmp(s, sig_prefix, np)) return NULL;
    s += np;
    const size_t n = json_string_length(sig) - np;
    if (n % 4) return NULL;
    char *out = malloc(n / 4 * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0, pad = 0;
        for (size_t k = 0; k < 4; k++) {
            const char ch = s[i + k];
            const char *at = ch ? strchr(b64_alphabet, ch) : NULL;
            if (ch == '=' && i + 4 == n && k >= 2) {
                pad++;
                v <<= 6;
            } else if (at && !pad) {
                v = (v << 6) | (unsigned)(at - b64_alphabet);
            } else {
                free(out);
                return NULL;
            }
        }
        out[o++] = (char)(v >> 16);
        if (pad < 2) out[o++] = (char)(v >> 8 & 255);
        if (pad < 1) out[o++] = (char)(v & 255);
    }
    json_t *t = json_stringn(out, o); /* NULL for invalid UTF-8 */
    free(out);
    return t;
}

/* A system text with Claude Code's per-request billing stamp zeroed (a new reference). */
static json_t *system_text(json_t *text) {
    static const char hdr[] = "x-anthropic-billing-header:";
    const char *s = json_string_value(text);
    const size_t n = json_string_length(text);
    if (n < sizeof hdr - 1 || memcmp(s, hdr, sizeof hdr - 1)) return json_incref(text);
    char *copy = malloc(n + 1);
    if (!copy) return NULL;
    memcpy(copy, s, n + 1);
    for (size_t i = sizeof hdr - 1; i + 4 <= n; i++) {
        if (memcmp(copy + i, "cch=", 4)) continue;
        for (size_t j = i + 4; j < n && copy[j] != ';' && copy[j] != '\n' && copy[j] != ' '; j++) copy[j] = '0';
        break;
    }
    json_t *v = json_stringn(copy, n);
    free(copy);
    return v;
}

static enum dj_status parse_system(struct api_ctx *c, json_t *root) {
    json_t *sys = json_object_get(root, "system"), *t;
    if (!sys || json_is_null(sys)) return DJ_OK;
    if (json_is_string(sys)) {
        t = sys;
        json_incref(t);
    } else if (json_is_array(sys)) {
        if (!(t = api_content(c, sys, "system", &system_parts, "\n"))) return DJ_ERR_INVALID;
    } else {
        return api_fail(c, 400, "system", "system must be a string or an array of text blocks");
    }
    if (json_string_length(t) == 0) {
        json_decref(t);
        return DJ_OK;
    }
    json_t *norm = system_text(t);
    json_decref(t);
    if (!norm) return api_oom(c);
    return api_push(c->r->messages, json_pack("{s:s, s:o}", "role", "system", "content", norm)) ? DJ_OK : api_oom(c);
}

/* tool_result content: a string, or text blocks joined with "\n"; absent: "". */
static json_t *tool_result_text(struct api_ctx *c, json_t *content, const char *base) {
    if (!content || json_is_null(content)) {
        json_t *e = json_string("");
        if (!e) api_oom(c);
        return e;
    }
    return api_content(c, content, base, &result_parts, "\n");
}

static enum dj_status parse_user(struct api_ctx *c, json_t *blocks, size_t i) {
    json_t *parts = json_array();
    if (!parts) return api_oom(c);
    size_t j, n_results = 0;
    json_t *b;
    enum dj_status st = DJ_OK;
    json_array_foreach(blocks, j, b) {
        char base[64];
        snprintf(base, sizeof base, "messages[%zu].content[%zu]", i, j);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) {
            st = api_fail(c, 400, base, "%s must be an object with a string type", base);
        } else if (!strcmp(type, "text")) {
            json_t *text = json_object_get(b, "text");
            if (!json_is_string(text)) st = api_fail(c, 400, base, "%s.text must be a string", base);
            else if (!api_push(parts, api_text_part(json_incref(text)))) st = api_oom(c);
        } else if (!strcmp(type, "tool_result")) {
            json_t *id = json_object_get(b, "tool_use_id"), *content;
            char cbase[80];
            snprintf(cbase, sizeof cbase, "%s.content", base);
            if (!json_is_string(id)) {
                st = api_fail(c, 400, base, "%s.tool_use_id must be a string", base);
            } else if (!(content = tool_result_text(c, json_object_get(b, "content"), cbase))) {
                st = DJ_ERR_INVALID;
            } else if (!api_push(c->r->messages,
                                 json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", content))) {
                st = api_oom(c);
            }
            n_results++;
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            st = api_fail(c, 400, base, "%s: '%s' input is not supported: this server's model reads text only", base,
                          type);
        } else if (!strcmp(type, "tool_use") || !strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            st = api_fail(c, 400, base, "%s: a '%s' block belongs in an assistant message", base, type);
        } else {
            st = api_fail(c, 400, base, "%s: content block type '%.40s' is not supported", base, type);
        }
        if (st) break;
    }
    if (!st && (json_array_size(parts) || !n_results) &&
        !api_push(c->r->messages, json_pack("{s:s, s:O}", "role", "user", "content", parts)))
        st = api_oom(c);
    json_decref(parts);
    return st;
}

static enum dj_status parse_assistant(struct api_ctx *c, json_t *blocks, size_t i) {
    json_t *parts = json_array(), *reasoning = json_array(), *calls = json_array(), *msg = NULL;
    enum dj_status st = parts && reasoning && calls ? DJ_OK : api_oom(c);
    size_t j;
    json_t *b;
    json_array_foreach(blocks, j, b) {
        if (st) break;
        char base[64];
        snprintf(base, sizeof base, "messages[%zu].content[%zu]", i, j);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) {
            st = api_fail(c, 400, base, "%s must be an object with a string type", base);
        } else if (!strcmp(type, "text") || !strcmp(type, "thinking")) {
            const bool think = !strcmp(type, "thinking");
            json_t *text = json_object_get(b, think ? "thinking" : "text");
            json_t *carried = think && json_string_length(text) == 0 ? signature_reasoning(json_object_get(b, "signature"))
                                                                     : NULL;
            if (!json_is_string(text)) {
                json_decref(carried);
                st = api_fail(c, 400, base, "%s.%s must be a string", base, type);
            } else if (!api_push(think ? reasoning : parts, api_text_part(carried ? carried : json_incref(text)))) {
                st = api_oom(c); /* (the part, carried text included, was freed) */
            }
        } else if (!strcmp(type, "redacted_thinking")) {
            continue;
        } else if (!strcmp(type, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || (input && !json_is_null(input) && !json_is_object(input))) {
                st = api_fail(c, 400, base, "%s: tool_use needs a string id and name and an object input", base);
                break;
            }
            json_t *empty = input && !json_is_null(input) ? NULL : json_object();
            char *args = api_dump_args(empty ? empty : input);
            json_decref(empty);
            json_t *a = args ? json_string(args) : NULL;
            free(args);
            if (!a || !api_push(calls, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type", "function", "function",
                                                 "name", name, "arguments", a)))
                st = api_oom(c);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            st = api_fail(c, 400, base, "%s: '%s' input is not supported: this server's model reads text only", base,
                          type);
        } else if (!strcmp(type, "tool_result")) {
            st = api_fail(c, 400, base, "%s: a tool_result block belongs in a user message", base);
        } else {
            st = api_fail(c, 400, base, "%s: content block type '%.40s' is not supported", base, type);
        }
    }
    if (!st) {
        json_t *content = json_array_size(parts) ? api_join_text(parts, "")
                          : json_array_size(calls) ? json_null()
                                                   : json_string("");
        msg = content ? json_pack("{s:s, s:o}", "role", "assistant", "content", content) : NULL;
        bool ok = api_push(c->r->messages, msg);
        if (ok && json_array_size(reasoning)) ok = api_set(msg, "reasoning_content", api_join_text(reasoning, ""));
        if (ok && json_array_size(calls)) ok = api_set(msg, "tool_calls", json_incref(calls));
        if (!ok) st = api_oom(c);
    }
    json_decref(parts);
    json_decref(reasoning);
    json_decref(calls);
    return st;
}

static enum dj_status parse_messages(struct api_ctx *c, json_t *root) {
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return api_fail(c, 400, "messages", "messages must be a non-empty array of messages");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *p = api_path(c, "messages[%zu]", i);
        if (!json_is_object(m)) return api_fail(c, 400, p, "%s must be an object", p);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))) {
            p = api_path(c, "messages[%zu].role", i);
            return api_fail(c, 400, p, "%s must be 'user', 'assistant' or 'system'", p);
        }
        enum dj_status st = DJ_OK;
        if (!strcmp(role, "system")) { /* a system message where it stands: its text, blocks joined as `system`'s */
            char base[48];
            snprintf(base, sizeof base, "messages[%zu].content", i);
            json_t *t = api_content(c, content, base, &system_parts, "\n");
            if (!t) return DJ_ERR_INVALID;
            if (!api_push(c->r->messages, json_pack("{s:s, s:o}", "role", "system", "content", t))) return api_oom(c);
        } else if (json_is_string(content)) {
            if (!api_push(c->r->messages, json_pack("{s:s, s:O}", "role", role, "content", content))) return api_oom(c);
        } else if (json_is_array(content)) {
            st = !strcmp(role, "user") ? parse_user(c, content, i) : parse_assistant(c, content, i);
        } else {
            p = api_path(c, "messages[%zu].content", i);
            return api_fail(c, 400, p, "%s must be a string or an array of content blocks", p);
        }
        if (st) return st;
    }
    return DJ_OK;
}

static enum dj_status parse_tools(struct api_ctx *c, json_t *root) {
    json_t *tools;
    if (!api_opt(c, root, "tools", JSON_ARRAY, "tools", &tools)) return DJ_ERR_INVALID;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48], q[80];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return api_fail(c, 400, p, "%s must be an object", p);
        json_t *type = json_object_get(t, "type");
        if (type && !json_is_null(type) && !json_is_string(type)) return api_fail(c, 400, p, "%s.type must be a string", p);
        if (json_is_string(type) && strcmp(json_string_value(type), "custom")) continue;
        json_t *desc, *schema;
        snprintf(q, sizeof q, "%s.description", p);
        if (!api_opt(c, t, "description", JSON_STRING, q, &desc)) return DJ_ERR_INVALID;
        snprintf(q, sizeof q, "%s.input_schema", p);
        if (!api_opt(c, t, "input_schema", JSON_OBJECT, q, &schema)) return DJ_ERR_INVALID;
        snprintf(q, sizeof q, "%s.name", p);
        enum dj_status st = api_add_tool(c, q, json_object_get(t, "name"), desc, schema, NULL);
        if (st) return st;
    }
    json_t *tc;
    if (!api_opt(c, root, "tool_choice", JSON_OBJECT, "tool_choice", &tc)) return DJ_ERR_INVALID;
    if (!tc) return DJ_OK;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (type && !strcmp(type, "auto")) c->r->tool_choice = DJ_TOOL_AUTO;
    else if (type && !strcmp(type, "any")) c->r->tool_choice = DJ_TOOL_REQUIRED;
    else if (type && !strcmp(type, "none")) c->r->tool_choice = DJ_TOOL_NONE;
    else if (type && !strcmp(type, "tool")) {
        enum dj_status st = api_named_tool(c, "tool_choice.name", json_object_get(tc, "name"));
        if (st) return st;
    } else {
        return api_fail(c, 400, "tool_choice.type", "tool_choice.type must be 'auto', 'any', 'tool' or 'none'");
    }
    json_t *dis;
    if (!api_opt(c, tc, "disable_parallel_tool_use", JSON_TRUE, "tool_choice.disable_parallel_tool_use", &dis))
        return DJ_ERR_INVALID;
    if (dis) c->r->parallel_tool_calls = !json_is_true(dis);
    return DJ_OK;
}

/* thinking {type: enabled, budget_tokens, display} | {type: adaptive, display} | {type: disabled}:
 * the template's switch (enable_thinking, which Qwen3-style templates read) on or off, the
 * budget enforced (reasoning_budget), display "omitted" honoured. */
static enum dj_status parse_thinking(struct api_ctx *c, json_t *root) {
    json_t *th, *budget, *display;
    if (!api_opt(c, root, "thinking", JSON_OBJECT, "thinking", &th)) return DJ_ERR_INVALID;
    if (!th) return DJ_OK;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!type || (strcmp(type, "enabled") && strcmp(type, "adaptive") && strcmp(type, "disabled")))
        return api_fail(c, 400, "thinking.type", "thinking.type must be 'enabled', 'adaptive' or 'disabled'");
    if (!api_opt(c, th, "budget_tokens", JSON_INTEGER, "thinking.budget_tokens", &budget)) return DJ_ERR_INVALID;
    if (!api_opt(c, th, "display", JSON_STRING, "thinking.display", &display)) return DJ_ERR_INVALID;
    if (!strcmp(type, "disabled")) return api_kwarg(c, "enable_thinking", json_false());
    if (budget && !strcmp(type, "enabled")) {
        if (json_integer_value(budget) < 0)
            return api_fail(c, 400, "thinking.budget_tokens", "thinking.budget_tokens must be >= 0");
        c->r->reasoning_budget = json_integer_value(budget);
    }
    if (display && !strcmp(json_string_value(display), "omitted")) c->r->reasoning_omitted = true;
    return api_kwarg(c, "enable_thinking", json_true());
}

/* output_config {effort, format}: effort → the template's reasoning_effort (gpt-oss-style
 * templates read low / medium / high; xhigh and max read as high); format {type: json_schema,
 * schema} constrains the reply as OpenAI's response_format does.  output_format (the earlier
 * structured-outputs beta) is the same format. */
static enum dj_status parse_output_config(struct api_ctx *c, json_t *root) {
    json_t *oc, *effort = NULL, *format = NULL, *legacy;
    if (!api_opt(c, root, "output_config", JSON_OBJECT, "output_config", &oc)) return DJ_ERR_INVALID;
    if (oc && !api_opt(c, oc, "effort", JSON_STRING, "output_config.effort", &effort)) return DJ_ERR_INVALID;
    if (oc && !api_opt(c, oc, "format", JSON_OBJECT, "output_config.format", &format)) return DJ_ERR_INVALID;
    if (!api_opt(c, root, "output_format", JSON_OBJECT, "output_format", &legacy)) return DJ_ERR_INVALID;
    if (!format) format = legacy;
    if (effort) {
        static const char *const names[][2] = {{"low", "low"}, {"medium", "medium"}, {"high", "high"},
                                               {"xhigh", "high"}, {"max", "high"}};
        const char *e = json_string_value(effort), *as = NULL;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(e, names[i][0])) as = names[i][1];
        if (!as)
            return api_fail(c, 400, "output_config.effort",
                            "output_config.effort must be 'low', 'medium', 'high', 'xhigh' or 'max'");
        enum dj_status st = api_kwarg(c, "reasoning_effort", json_string(as));
        if (st) return st;
    }
    if (format) {
        const char *type = json_string_value(json_object_get(format, "type"));
        json_t *schema = json_object_get(format, "schema");
        if (!type || strcmp(type, "json_schema") || !json_is_object(schema))
            return api_fail(c, 400, "output_config.format",
                            "output_config.format must be {type: 'json_schema', schema: {...}}");
        c->r->json_schema = schema;
    }
    return DJ_OK;
}

/* context_management {edits: [...]}: clear_thinking_20251015 is applied (the reasoning of all but
 * the last `keep` assistant turns that have any is dropped before rendering; keep "all" keeps
 * everything); clear_tool_uses_20250919 is accepted and not applied (documented: deja renders
 * the tool results it is sent). */
static enum dj_status parse_context_management(struct api_ctx *c, json_t *root) {
    json_t *cm, *edits;
    if (!api_opt(c, root, "context_management", JSON_OBJECT, "context_management", &cm)) return DJ_ERR_INVALID;
    if (!cm) return DJ_OK;
    if (!api_opt(c, cm, "edits", JSON_ARRAY, "context_management.edits", &edits)) return DJ_ERR_INVALID;
    size_t i;
    json_t *e;
    json_array_foreach(edits, i, e) {
        const char *p = api_path(c, "context_management.edits[%zu]", i);
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!type) return api_fail(c, 400, p, "%s must be an object with a string type", p);
        if (strcmp(type, "clear_thinking_20251015")) continue;
        json_t *keep = json_object_get(e, "keep");
        size_t n_keep = 1; /* the API's default: the last thinking turn */
        if (json_is_string(keep) && !strcmp(json_string_value(keep), "all")) continue;
        if (keep && !json_is_null(keep)) {
            json_t *v = json_object_get(keep, "value");
            const char *kt = json_string_value(json_object_get(keep, "type"));
            if (!kt || strcmp(kt, "thinking_turns") || !json_is_integer(v) || json_integer_value(v) < 0)
                return api_fail(c, 400, p, "%s.keep must be 'all' or {type: 'thinking_turns', value: N}", p);
            n_keep = (size_t)json_integer_value(v);
        }
        for (size_t k = json_array_size(c->r->messages); k-- > 0;) {
            json_t *m = json_array_get(c->r->messages, k);
            if (!json_object_get(m, "reasoning_content")) continue;
            if (n_keep) n_keep--;
            else json_object_del(m, "reasoning_content");
        }
    }
    return DJ_OK;
}

/* Whether any block, system block or tool of the request carries cache_control. */
static bool wants_cache(json_t *root) {
    static const char *const keys[] = {"system", "messages", "tools"};
    for (size_t k = 0; k < 3; k++) {
        json_t *a = json_object_get(root, keys[k]);
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) {
            if (json_object_get(x, "cache_control")) return true;
            json_t *content = json_object_get(x, "content");
            size_t j;
            json_t *b;
            json_array_foreach(content, j, b) if (json_object_get(b, "cache_control")) return true;
        }
    }
    return json_object_get(root, "cache_control") != NULL; /* automatic caching, top level */
}

enum dj_status api_anthropic_parse(struct api_ctx *c, json_t *root) {
    enum dj_status st;
    if (!(c->r->messages = json_array())) return api_oom(c);
    if ((st = parse_system(c, root))) return st;
    if ((st = parse_messages(c, root))) return st;
    if ((st = parse_tools(c, root))) return st;
    if ((st = parse_thinking(c, root))) return st;
    if ((st = parse_output_config(c, root))) return st;
    if ((st = parse_context_management(c, root))) return st;
    /* accepted and not acted on (docs/SERVER.md): metadata, service_tier, container, mcp_servers,
     * inference_geo; the type is still checked where the API documents one */
    json_t *v;
    if (!api_opt(c, root, "metadata", JSON_OBJECT, "metadata", &v)) return DJ_ERR_INVALID;
    if (!api_opt(c, root, "service_tier", JSON_STRING, "service_tier", &v)) return DJ_ERR_INVALID;
    c->r->cache_control = wants_cache(root);
    return DJ_OK;
}

/* ---- the message object -------------------------------------------------------------------- */

static const char *stop_reason(enum dj_finish f, bool calls, const char *stop_sequence) {
    return f == DJ_FINISH_LENGTH ? "max_tokens" : calls ? "tool_use" : stop_sequence ? "stop_sequence" : "end_turn";
}

static json_t *usage_json(const struct dj_chat_usage *u) {
    const struct dj_chat_usage z = {0};
    if (!u) u = &z;
    const size_t cached = u->cached < u->prompt ? u->cached : u->prompt;
    const size_t written = u->cache_write < u->prompt - cached ? u->cache_write : u->prompt - cached;
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(u->prompt - cached - written),
                     "cache_creation_input_tokens", (json_int_t)written, "cache_read_input_tokens", (json_int_t)cached,
                     "output_tokens", (json_int_t)u->completion);
}

/* tool_use input: the arguments parsed; {} when they are not a JSON object (the reply goes on). */
static json_t *tool_input(const char *args, size_t n) {
    json_t *v = args ? json_loadb(args, n, 0, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

json_t *api_anthropic_response(const char *id, const char *model, const struct dj_chat_choice *c,
                               const struct dj_chat_usage *u) {
    json_t *content = json_array();
    bool ok = content != NULL;
    if (ok && c->n_reasoning)
        ok = api_push(content, c->reasoning_omitted
                                   ? json_pack("{s:s, s:s, s:o}", "type", "thinking", "thinking", "", "signature",
                                               reasoning_signature(c->reasoning, c->n_reasoning))
                                   : json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                               api_jstr(c->reasoning, c->n_reasoning), "signature", ""));
    if (ok && (c->n_content || (!c->n_calls && !c->n_reasoning)))
        ok = api_push(content, json_pack("{s:s, s:o}", "type", "text", "text", api_jstr(c->content, c->n_content)));
    for (size_t k = 0; ok && k < c->n_calls; k++) {
        char tid[96];
        api_toolu_id(c->calls[k].id, tid, sizeof tid);
        const char *name = c->calls[k].name ? c->calls[k].name : "";
        ok = api_push(content, json_pack("{s:s, s:s, s:o, s:o}", "type", "tool_use", "id", tid, "name",
                                         api_jstr(name, strlen(name)), "input",
                                         tool_input(c->calls[k].args, c->calls[k].n_args)));
    }
    if (!ok) {
        json_decref(content);
        return NULL;
    }
    json_t *r = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", id, "type", "message", "role", "assistant",
                          "model", model, "content", content, "stop_reason",
                          stop_reason(c->finish, c->n_calls > 0, c->stop_sequence), "stop_sequence",
                          c->stop_sequence && c->finish != DJ_FINISH_LENGTH && !c->n_calls
                              ? api_jstr(c->stop_sequence, strlen(c->stop_sequence))
                              : json_null(),
                          "usage", usage_json(u));
    if (r && u && u->x_deja && !api_set(r, "x_deja", json_incref(u->x_deja))) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* ---- the event stream ------------------------------------------------------------------------- */

/* Appends event `type` (takes j, the event's other fields; "type" goes first, as Anthropic
 * writes it). */
static void event(struct dj_sbuf *out, const char *type, json_t *j) {
    json_t *e = j ? json_pack("{s:s}", "type", type) : NULL;
    if (!e || json_object_update(e, j)) {
        json_decref(e);
        json_decref(j);
        out->oom = true;
        return;
    }
    json_decref(j);
    api_sse(out, type, e);
}

void api_anthropic_start(struct dj_api_stream *st, struct dj_sbuf *out) {
    event(out, "message_start",
          json_pack("{s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:I, s:I, s:I}}}", "message", "id", st->id, "type",
                    "message", "role", "assistant", "model", st->model, "content", "stop_reason", "stop_sequence",
                    "usage", "input_tokens", (json_int_t)st->prompt_tokens, "cache_creation_input_tokens",
                    (json_int_t)0, "cache_read_input_tokens", (json_int_t)0, "output_tokens", (json_int_t)0));
    event(out, "ping", json_object());
}

static void close_block(struct dj_api_stream *st, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    if (c->open == API_BLOCK_NONE) return;
    if (c->open == API_BLOCK_REASONING && st->reasoning_omitted) { /* the text travels in the signature */
        json_t *sig = reasoning_signature(c->text.p ? c->text.p : "", c->text.n);
        event(out, "content_block_delta",
              sig ? json_pack("{s:I, s:{s:s, s:o}}", "index", (json_int_t)(c->n_blocks - 1), "delta", "type",
                              "signature_delta", "signature", sig)
                  : NULL);
        c->text.n = 0;
    }
    event(out, "content_block_stop", json_pack("{s:I}", "index", (json_int_t)(c->n_blocks - 1)));
    c->open = API_BLOCK_NONE;
}

static void open_block(struct dj_api_stream *st, enum api_block b, const struct dj_chat_delta *d, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    close_block(st, out);
    const json_int_t index = (json_int_t)c->n_blocks++;
    json_t *block;
    if (b == API_BLOCK_TEXT) {
        block = json_pack("{s:s, s:s}", "type", "text", "text", "");
    } else if (b == API_BLOCK_REASONING) {
        block = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
    } else {
        char tid[96];
        api_toolu_id(d->id ? d->id : "", tid, sizeof tid);
        const char *name = d->name ? d->name : "";
        block = json_pack("{s:s, s:s, s:o, s:{}}", "type", "tool_use", "id", tid, "name", api_jstr(name, strlen(name)),
                          "input");
        c->open_tool = d->tool_index;
    }
    c->open = b;
    event(out, "content_block_start", json_pack("{s:I, s:o}", "index", index, "content_block", block));
}

void api_anthropic_delta(struct dj_api_stream *st, const struct dj_chat_delta *d, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    json_t *delta;
    switch (d->kind) {
    case DJ_DELTA_CONTENT:
    case DJ_DELTA_REASONING: {
        const bool think = d->kind == DJ_DELTA_REASONING;
        if (d->n == 0) return;
        if (c->open != (think ? API_BLOCK_REASONING : API_BLOCK_TEXT))
            open_block(st, think ? API_BLOCK_REASONING : API_BLOCK_TEXT, d, out);
        if (think && st->reasoning_omitted) { /* no thinking_delta: kept for the block's signature */
            if (!api_text_add(&c->text, d->text, d->n)) out->oom = true;
            return;
        }
        delta = json_pack("{s:s, s:o}", "type", think ? "thinking_delta" : "text_delta", think ? "thinking" : "text",
                          api_jstr(d->text, d->n));
        break;
    }
    case DJ_DELTA_TOOL_START:
        open_block(st, API_BLOCK_TOOL, d, out);
        return;
    case DJ_DELTA_TOOL_ARGS:
        /* a call's arguments follow its start (toolparse.h); those of a closed block are dropped */
        if (d->n == 0 || c->open != API_BLOCK_TOOL || c->open_tool != d->tool_index) return;
        delta = json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json", api_jstr(d->text, d->n));
        break;
    default:
        return;
    }
    event(out, "content_block_delta",
          delta ? json_pack("{s:I, s:o}", "index", (json_int_t)(c->n_blocks - 1), "delta", delta) : NULL);
}

void api_anthropic_finish(struct dj_api_stream *st, struct dj_sbuf *out) {
    struct api_choice_state *c = &st->ch[0];
    close_block(st, out);
    if (c->n_blocks == 0) { /* as api_response: an empty reply is one empty text block */
        open_block(st, API_BLOCK_TEXT, NULL, out);
        close_block(st, out);
    }
}

void api_anthropic_end(struct dj_api_stream *st, const struct dj_chat_usage *u, struct dj_sbuf *out) {
    const struct api_choice_state *c = &st->ch[0];
    const char *seq = c->finish != DJ_FINISH_LENGTH && !c->had_calls ? c->stop_sequence : NULL;
    json_t *j = json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(c->finish, c->had_calls, seq),
                          "stop_sequence", seq ? api_jstr(seq, strlen(seq)) : json_null(), "usage", usage_json(u));
    if (j && u && u->x_deja) api_set(j, "x_deja", json_incref(u->x_deja));
    event(out, "message_delta", j);
    event(out, "message_stop", json_object());
}

void api_anthropic_error(struct dj_api_stream *st, const char *msg, struct dj_sbuf *out) {
    (void)st;
    api_sse(out, "error", api_error_json(DJ_API_MESSAGES, 500, NULL, msg));
}
