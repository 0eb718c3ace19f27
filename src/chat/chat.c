/*
 * chat.c — messages → template render → tokens (chat.h).
 */
#include "chat/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* Hermes / Qwen 2.5 ChatML, the format of ../shared/traces: the system
 * message then the tools as <tools> JSON lines, calls as <tool_call> JSON,
 * tool results as <tool_response> blocks in a user turn. */
const char chat_builtin_chatml[] =
    "{%- if tools %}\n"
    "{{- '<|im_start|>system\\n' }}\n"
    "{%- if messages and messages[0].role in ['system', 'developer'] %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}\n"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}\n"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}\n"
    "{%- elif messages and messages[0].role in ['system', 'developer'] %}\n"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "{%- if loop.first and message.role in ['system', 'developer'] %}\n"
    "{%- elif message.role == 'tool' %}\n"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "{{- '\\n<tool_response>\\n' + (message.content | string) + '\\n</tool_response>' }}\n"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "{%- else %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' }}\n"
    "{%- if message.content %}{{- message.content }}{%- endif %}\n"
    "{%- if message.role == 'assistant' and message.tool_calls %}\n"
    "{%- for tc in message.tool_calls %}\n"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}\n"
    "{{- '<tool_call>\\n{\"name\": ' + (tc.function.name | tojson) + ', \"arguments\": ' + "
    "(tc.function.arguments | tojson) + '}\\n</tool_call>' }}\n"
    "{%- endfor %}\n"
    "{%- endif %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n";

/* Gemma's turns (Gemma 2 and 3 instruct models' own template, google/gemma-3-*-it): bos_token,
 * then <start_of_turn>ROLE\n CONTENT<end_of_turn>\n per message with assistant written as model,
 * the first system (or developer) message folded into the first turn as its text + a blank line
 * (Gemma has no system role), content trimmed, text parts of a content array joined; then
 * <start_of_turn>model\n to generate.  Unlike Google's template it does not raise on roles that
 * do not alternate (a server gets tool turns anywhere; other roles keep their name), only on a
 * system message after the first message, which chat_render_placed then folds into the user
 * turn beside it. */
const char chat_builtin_gemma[] =
    "{{- bos_token }}\n"
    "{%- if messages and messages[0].role in ['system', 'developer'] %}\n"
    "{%- set first_user_prefix = (messages[0].content | string | trim) + '\\n\\n' %}\n"
    "{%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "{%- set first_user_prefix = '' %}\n"
    "{%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- for message in loop_messages %}\n"
    "{%- if message.role in ['system', 'developer'] %}"
    "{{- raise_exception('Gemma has no system role: only a first system message is folded into the first turn') }}"
    "{%- endif %}\n"
    "{%- set role = 'model' if message.role == 'assistant' else message.role %}\n"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}\n"
    "{%- if message.content is string %}{{- message.content | trim }}\n"
    "{%- elif message.content is iterable %}\n"
    "{%- for item in message.content %}{%- if item.type == 'text' %}{{- item.text | trim }}{%- endif %}{%- endfor %}\n"
    "{%- endif %}\n"
    "{{- '<end_of_turn>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}\n";

enum dj_chat_builtin chat_builtin_for(const char *arch, const struct dj_vocab *v) {
    static const char *const gemmas[] = {"gemma", "gemma2", "gemma3", "gemma3n"};
    bool gemma = false;
    for (size_t i = 0; arch && i < sizeof gemmas / sizeof gemmas[0]; i++) gemma |= !strcmp(arch, gemmas[i]);
    if (!gemma || !v) return DJ_CHAT_BUILTIN_CHATML;
    /* the markers must be tokens of the vocabulary (a gemma-architecture file with another
     * tokenizer gets ChatML, as llama.cpp gives every model without a template) */
    static const char *const marks[] = {"<start_of_turn>", "<end_of_turn>"};
    for (int k = 0; k < 2; k++) {
        dj_token *t = NULL;
        size_t nt = 0;
        const bool one = vocab_tokenize(v, marks[k], strlen(marks[k]), false, true, &t, &nt) == DJ_OK && nt == 1;
        free(t);
        if (!one) return DJ_CHAT_BUILTIN_CHATML;
    }
    return DJ_CHAT_BUILTIN_GEMMA;
}

const char *chat_builtin_name(enum dj_chat_builtin kind) {
    return kind == DJ_CHAT_BUILTIN_GEMMA ? "built-in Gemma" : "built-in ChatML";
}

enum dj_status chat_template_create_builtin(enum dj_chat_builtin kind, const char *bos, const char *eos,
                                            struct dj_chat_template **out) {
    if (kind == DJ_CHAT_BUILTIN_CHATML) return chat_template_create(NULL, 0, bos, eos, out);
    enum dj_status st = chat_template_create(chat_builtin_gemma, strlen(chat_builtin_gemma), bos, eos, out);
    if (st == DJ_OK) (*out)->builtin = true, (*out)->builtin_kind = kind;
    return st;
}

enum dj_status chat_template_create(const char *src, size_t n, const char *bos, const char *eos,
                                    struct dj_chat_template **out) {
    struct dj_chat_template *t = calloc(1, sizeof *t);
    if (!t) return dj_fail(DJ_ERR_NOMEM, "chat template: out of memory");
    t->builtin = src == NULL;
    if (!src) {
        src = chat_builtin_chatml;
        n = strlen(chat_builtin_chatml);
    }
    t->src = malloc(n + 1);
    t->bos = strdup(bos ? bos : "");
    t->eos = strdup(eos ? eos : "");
    if (!t->src || !t->bos || !t->eos) {
        chat_template_free(t);
        return dj_fail(DJ_ERR_NOMEM, "chat template: out of memory");
    }
    memcpy(t->src, src, n);
    t->src[n] = 0;
    t->n_src = n;
    enum dj_status st = jinja_compile(t->src, n, &t->j);
    if (st) {
        chat_template_free(t);
        return st;
    }
    t->syn = chat_syntax_detect(t->src, n);
    *out = t;
    return DJ_OK;
}

void chat_template_free(struct dj_chat_template *t) {
    if (!t) return;
    jinja_free(t->j);
    free(t->src);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* Text parts joined by "\n"; NULL when a part is not text (left for the template). */
static json_t *join_text_parts(const json_t *parts) {
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        json_t *ty = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        if (!json_is_string(ty) || !json_is_string(tx)) return NULL;
        const char *tys = json_string_value(ty);
        if (strcmp(tys, "text") && strcmp(tys, "input_text") && strcmp(tys, "output_text")) return NULL;
        total += json_string_length(tx) + 1;
    }
    char *buf = malloc(total + 1);
    if (!buf) return NULL;
    size_t n = 0;
    json_array_foreach(parts, i, p) {
        json_t *tx = json_object_get(p, "text");
        if (i) buf[n++] = '\n';
        memcpy(buf + n, json_string_value(tx), json_string_length(tx));
        n += json_string_length(tx);
    }
    json_t *s = json_stringn(buf, n);
    free(buf);
    return s;
}

json_t *chat_normalize_messages(const json_t *messages) {
    if (!json_is_array(messages)) {
        dj_fail(DJ_ERR_INVALID, "messages must be an array");
        return NULL;
    }
    json_t *out = json_deep_copy(messages);
    if (!out) {
        dj_fail(DJ_ERR_NOMEM, "out of memory");
        return NULL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m) {
        if (!json_is_object(m)) {
            json_decref(out);
            dj_fail(DJ_ERR_INVALID, "messages[%zu] must be an object", i);
            return NULL;
        }
        json_t *content = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(content) && json_array_size(content) > 0) {
            json_t *s = join_text_parts(content);
            if (s) json_object_set_new(m, "content", s);
        }
        if (json_is_array(calls) && json_array_size(calls) > 0) {
            if (!content || json_is_null(content)) json_object_set_new(m, "content", json_string(""));
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (!json_is_string(args)) continue;
                json_t *obj = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
                if (json_is_object(obj)) json_object_set_new(fn, "arguments", obj);
                else json_decref(obj);
            }
        }
    }
    return out;
}

enum dj_status chat_render(const struct dj_chat_template *t, const json_t *messages, const json_t *tools,
                           const json_t *kwargs, bool add_generation_prompt, int64_t now, struct dj_jinja_out *out) {
    json_t *ctx = json_object();
    if (!ctx) return dj_fail(DJ_ERR_NOMEM, "out of memory");
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set_new(ctx, "tools", tools && json_array_size(tools) ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_set_new(ctx, "bos_token", json_string(t->bos));
    json_object_set_new(ctx, "eos_token", json_string(t->eos));
    if (json_is_object(kwargs)) json_object_update(ctx, (json_t *)kwargs);
    /* bos_token / eos_token are the vocabulary's special-token texts, the template's own markup
     * (chat_tokenize matches them as tokens) — unless the request's kwargs replaced them */
    const char *owned[3] = {NULL, NULL, NULL};
    size_t n_owned = 0;
    if (!json_object_get(kwargs, "bos_token")) owned[n_owned++] = "bos_token";
    if (!json_object_get(kwargs, "eos_token")) owned[n_owned++] = "eos_token";
    struct dj_jinja_params p = jinja_default_params();
    p.now = now;
    p.template_owned = owned;
    enum dj_status st = jinja_render_ex(t->j, ctx, &p, out);
    json_decref(ctx);
    return st;
}

/* ---- system messages where they stand ----------------------------------------------------- */

/* The text of a system message (content a string after normalisation), trimmed of the
 * whitespace templates often strip; NULL when it has none. */
static const char *system_text(const json_t *m, size_t *n) {
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *c = json_object_get(m, "content");
    if (!role || strcmp(role, "system") || !json_is_string(c)) return NULL;
    const char *s = json_string_value(c);
    size_t len = json_string_length(c);
    while (len && strchr(" \t\r\n", *s)) s++, len--;
    while (len && strchr(" \t\r\n", s[len - 1])) len--;
    *n = len;
    return len ? s : NULL;
}

/* Every system message has its text in the render. */
static bool systems_shown(const json_t *messages, const struct dj_jinja_out *o) {
    for (size_t i = 0; i < json_array_size(messages); i++) {
        size_t n = 0;
        const char *s = system_text(json_array_get(messages, i), &n);
        if (s && !memmem(o->text, o->n, s, n)) return false;
    }
    return true;
}

/* content of a user message as a string, or NULL (parts not joined: leave it alone). */
static const char *user_text(const json_t *m) {
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *c = json_object_get(m, "content");
    return role && !strcmp(role, "user") && json_is_string(c) ? json_string_value(c) : NULL;
}

/* A copy of messages with every system message at index >= from folded into the user turn
 * beside it: appended to the user message just before it, else prepended to the one just
 * after it (a blank line between), else made a user message itself.  NULL when out of memory. */
static json_t *fold_systems(const json_t *messages, size_t from) {
    json_t *in = json_deep_copy(messages), *out = json_array();
    if (!in || !out) goto oom;
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *m = json_array_get(in, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *c = json_object_get(m, "content");
        if (i < from || !role || strcmp(role, "system") || !json_is_string(c)) {
            if (json_array_append(out, m)) goto oom;
            continue;
        }
        json_t *prev = json_array_get(out, json_array_size(out) - 1), *next = json_array_get(in, i + 1);
        const char *pt = prev ? user_text(prev) : NULL, *nt = next ? user_text(next) : NULL;
        const size_t ns = json_string_length(c);
        if (pt || nt) {
            json_t *target = pt ? prev : next;
            const json_t *tc = json_object_get(target, "content");
            const size_t nu = json_string_length(tc);
            char *buf = malloc(nu + ns + 3);
            if (!buf) goto oom;
            if (pt) {
                memcpy(buf, json_string_value(tc), nu);
                memcpy(buf + nu, "\n\n", 2);
                memcpy(buf + nu + 2, json_string_value(c), ns);
            } else {
                memcpy(buf, json_string_value(c), ns);
                memcpy(buf + ns, "\n\n", 2);
                memcpy(buf + ns + 2, json_string_value(tc), nu);
            }
            json_t *v = json_stringn(buf, nu + ns + 2);
            free(buf);
            if (!v || json_object_set_new(target, "content", v)) goto oom;
        } else {
            json_t *u = json_pack("{s:s, s:O}", "role", "user", "content", c);
            if (!u || json_array_append_new(out, u)) goto oom;
        }
    }
    json_decref(in);
    return out;
oom:
    json_decref(in);
    json_decref(out);
    return NULL;
}

enum dj_status chat_render_placed(const struct dj_chat_template *t, const json_t *messages, const json_t *tools,
                                  const json_t *kwargs, bool add_generation_prompt, int64_t now, struct dj_jinja_out *out,
                                  enum dj_system_placement *how) {
    struct dj_jinja_out first = {0};
    *how = DJ_SYSTEM_AS_IS;
    const enum dj_status first_st = chat_render(t, messages, tools, kwargs, add_generation_prompt, now, &first);
    if (first_st == DJ_OK && systems_shown(messages, &first)) {
        *out = first;
        return DJ_OK;
    }
    char first_error[512];
    snprintf(first_error, sizeof first_error, "%s", first_st ? dj_last_error() : "");
    bool any_system = false;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
        any_system |= role && !strcmp(role, "system");
    }
    /* the system messages after the first message, then all of them (with none, nothing to place
     * differently: the template's own verdict stands) */
    for (size_t from = 1; any_system; from = 0) {
        json_t *folded = fold_systems(messages, from);
        if (!folded) {
            jinja_out_free(&first);
            return dj_fail(DJ_ERR_NOMEM, "out of memory");
        }
        struct dj_jinja_out o = {0};
        const enum dj_status st = chat_render(t, folded, tools, kwargs, add_generation_prompt, now, &o);
        const bool shown = st == DJ_OK && systems_shown(folded, &o);
        json_decref(folded);
        if (shown) {
            jinja_out_free(&first);
            *how = from ? DJ_SYSTEM_FOLDED_LATER : DJ_SYSTEM_FOLDED_ALL;
            *out = o;
            return DJ_OK;
        }
        jinja_out_free(&o);
        if (from == 0) break;
    }
    /* no placement shows every system text: the first render as the template made it (its error,
     * or its output without the texts it leaves out) */
    if (first_st) return dj_fail(first_st, "%s", first_error);
    *out = first;
    return DJ_OK;
}

enum dj_status chat_tokenize(const struct dj_vocab *v, const struct dj_chat_template *t, const struct dj_jinja_out *o,
                             bool add_bos, dj_token **out, size_t *n_out) {
    size_t skip = 0;
    const size_t nb = strlen(t->bos);
    /* the template wrote the BOS text and the tokenizer adds BOS too: keep one */
    if (add_bos && vocab_add_bos(v) && nb && o->n >= nb && !memcmp(o->text, t->bos, nb)) {
        bool lit = false;
        for (size_t i = 0; i < nb && o->from_input; i++) lit |= o->from_input[i / 8] >> (i % 8) & 1;
        if (!lit) skip = nb;
    }
    if (!skip || !o->from_input)
        return vocab_tokenize_masked(v, o->text + skip, o->n - skip, add_bos, true, o->from_input, out, n_out);
    /* the bitmap must start at the first byte tokenized: shift it */
    const size_t n = o->n - skip;
    uint8_t *m = calloc(n / 8 + 1, 1);
    if (!m) return dj_fail(DJ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (o->from_input[(i + skip) / 8] >> ((i + skip) % 8) & 1) m[i / 8] |= (uint8_t)(1u << (i % 8));
    enum dj_status st = vocab_tokenize_masked(v, o->text + skip, n, add_bos, true, m, out, n_out);
    free(m);
    return st;
}
