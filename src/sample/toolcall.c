/*
 * toolcall.c — tool-call grammars (contract in toolcall.h).
 *
 * Both grammars are made by one function, build(), from one list of tools:
 *
 *   call      ::= "{" "\"name\"" : ( bash-call | think-call | ... ) "}"
 *   bash-call ::= "\"bash\"" , "\"arguments\"" : bash-args      (per tool)
 *   HERMES:  one ::= "<tool_call>\n" call "\n</tool_call>"   calls ::= one ("\n" one)*
 *   JSON:    calls ::= call  |  "[" call ("," call)* "]"
 *   AUTO:    root ::= text calls?   (text: anything without the trigger)
 *
 * The name comes first in the call object so that the tool's rule is chosen
 * by its name, as the traces write it.  `text` is the automaton of "strings
 * that do not contain the trigger" (KMP states as rules, one character a
 * step), so free text and calls split one way only.
 */
#include "sample/toolcall.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRIGGER 64

struct dj_toolcall_opts toolcall_default_opts(void) {
    struct dj_toolcall_opts o = {.choice = DJ_TOOL_AUTO, .parallel = true, .format = DJ_TOOL_FORMAT_HERMES};
    o.schema = json_schema_default_opts();
    o.schema.whitespace = DJ_JSON_WS_SPACED;
    return o;
}

void toolcall_grammar_free(struct dj_toolcall_grammar *g) {
    if (!g) return;
    free(g->gbnf), free(g->trigger), free(g->lazy_gbnf);
    g->gbnf = g->trigger = g->lazy_gbnf = NULL;
}

/* A small printf-to-malloc (NULL on OOM, message set). */
static char *fmt(const char *f, ...) DJ_PRINTF(1, 2);
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!p) {
        dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        return NULL;
    }
    va_start(ap, f);
    vsnprintf(p, (size_t)n + 1, f, ap);
    va_end(ap);
    return p;
}

/* Appends s to *acc (malloc'd, may be NULL); false on OOM. */
static bool cat(char **acc, const char *s) {
    size_t a = *acc ? strlen(*acc) : 0, n = strlen(s);
    char *p = realloc(*acc, a + n + 1);
    if (!p) {
        dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        return false;
    }
    memcpy(p + a, s, n + 1);
    *acc = p;
    return true;
}

static const char *put(struct dj_gbnf_builder *b, const char *name, char *body) {
    if (!body) return NULL;
    const char *r = gbnf_builder_add_rule(b, name, body);
    free(body);
    if (!r) dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
    return r;
}

/* The function object of tools[i] ({"type":"function","function":{...}} or a
 * bare {"name":...}), its name and parameters. */
static enum dj_status tool_at(json_t *tools, size_t i, const char **name, json_t **params) {
    json_t *t = json_array_get(tools, i);
    if (!json_is_object(t)) return dj_fail(DJ_ERR_INVALID, "tools: tools[%zu] is not an object", i);
    json_t *type = json_object_get(t, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return dj_fail(DJ_ERR_INVALID, "tools: tools[%zu] has a type other than \"function\"", i);
    json_t *f = json_object_get(t, "function");
    if (!f) f = t;
    json_t *nm = json_object_get(f, "name");
    if (!json_is_object(f) || !json_is_string(nm) || !json_string_length(nm))
        return dj_fail(DJ_ERR_INVALID, "tools: tools[%zu] has no function name", i);
    if (strlen(json_string_value(nm)) != json_string_length(nm))
        return dj_fail(DJ_ERR_INVALID, "tools: tools[%zu]: a function name with a NUL byte", i);
    *name = json_string_value(nm);
    *params = json_object_get(f, "parameters");
    return DJ_OK;
}

/* Decodes UTF-8 s into code points (at most cap); the count, or SIZE_MAX if too long. */
static size_t to_cps(const char *s, uint32_t *cp, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; u[i];) {
        uint32_t c = u[i];
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        c &= len == 1 ? 0x7F : len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
        for (size_t k = 1; k < len && u[i + k]; k++) c = (c << 6) | (u[i + k] & 0x3F);
        i += len;
        if (n == cap) return SIZE_MAX;
        cp[n++] = c;
    }
    return n;
}

static void class_cp(char *out, uint32_t c) {
    if (c >= 0x20 && c < 0x7F && c != ']' && c != '\\' && c != '-' && c != '^' && c != '[' && c != '"')
        snprintf(out, 16, "%c", (char)c);
    else if (c < 0x10000) snprintf(out, 16, "\\u%04X", c);
    else snprintf(out, 16, "\\U%08X", c);
}

/* Rules for "any text without trig": returns the start rule's name. */
static const char *text_rule(struct dj_gbnf_builder *b, const char *trig) {
    uint32_t t[MAX_TRIGGER];
    size_t k = to_cps(trig, t, MAX_TRIGGER);
    if (k == SIZE_MAX || k == 0) {
        dj_fail(DJ_ERR_INVALID, "tools: trigger must be 1 to %d characters", MAX_TRIGGER);
        return NULL;
    }
    /* next[i][c]: the longest prefix of t that is a suffix of t[0..i) + c */
    char names[MAX_TRIGGER][32];
    for (size_t i = 0; i < k; i++) snprintf(names[i], sizeof names[i], "text%zu", i);
    const char *rule_names[MAX_TRIGGER];
    /* reserve all state names first: the rules refer to each other */
    for (size_t i = 0; i < k; i++) {
        rule_names[i] = gbnf_builder_add_rule(b, names[i], NULL);
        if (!rule_names[i]) return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        /* distinct trigger characters, each with its next state */
        char *body = NULL;
        char other[MAX_TRIGGER * 16 + 8] = "[^";
        for (size_t a = 0; a < k; a++) {
            bool dup = false;
            for (size_t z = 0; z < a; z++) dup |= t[z] == t[a];
            if (dup) continue;
            char cc[16];
            class_cp(cc, t[a]);
            strcat(other, cc);
            size_t nx = 0;
            for (size_t len = i + 1; len > 0; len--) { /* candidate prefix length */
                bool ok = t[len - 1] == t[a];
                for (size_t z = 0; ok && z + 1 < len; z++) ok = t[z] == t[i + 1 - len + z];
                if (ok) {
                    nx = len;
                    break;
                }
            }
            if (nx == k) continue; /* completes the trigger: not allowed */
            char *alt = fmt("%s[%s] %s", body ? " | " : "", cc, rule_names[nx]);
            if (!alt || !cat(&body, alt)) {
                free(alt), free(body);
                return NULL;
            }
            free(alt);
        }
        strcat(other, "]");
        char *alt = fmt("%s%s %s | \"\"", body ? " | " : "", other, rule_names[0]);
        if (!alt || !cat(&body, alt)) {
            free(alt), free(body);
            return NULL;
        }
        free(alt);
        bool ok = gbnf_builder_define(b, rule_names[i], body);
        free(body);
        if (!ok) return NULL;
    }
    return rule_names[0];
}

static enum dj_status build(json_t *tools, const struct dj_toolcall_opts *o, bool lazy, const char *trigger,
                            char **out) {
    struct dj_json_schema_opts so = o->schema;
    so.root_name = so.rule_prefix = NULL;
    struct dj_gbnf_builder *b;
    enum dj_status st = gbnf_builder_create(&so, &b);
    if (st) return st;
    const char *LB = gbnf_builder_punct(b, '{'), *RB = gbnf_builder_punct(b, '}'), *COMMA = gbnf_builder_punct(b, ','),
               *COLON = gbnf_builder_punct(b, ':'), *LS = gbnf_builder_punct(b, '['), *RS = gbnf_builder_punct(b, ']');
    char *alts = NULL;
    size_t n_used = 0;
    json_t *empty = NULL;
    st = DJ_ERR_NOMEM;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *name;
        json_t *params;
        if ((st = tool_at(tools, i, &name, &params))) goto done;
        if (o->choice == DJ_TOOL_NAMED && strcmp(name, o->name)) continue;
        if (!params) {
            if (!empty && !(empty = json_pack("{s:s, s:{}, s:b}", "type", "object", "properties", "additionalProperties", 0)))
                goto oom;
            params = empty;
        }
        char *san = gbnf_sanitize_name(name), *hint = san ? fmt("%s-args", san) : NULL;
        if (!hint) {
            free(san);
            goto oom;
        }
        const char *args;
        st = gbnf_builder_add_schema(b, params, hint, &args);
        free(hint);
        if (st) {
            free(san);
            dj_error_prefix("tools: %s", name);
            goto done;
        }
        char *lit = gbnf_json_string_literal(name, strlen(name)), *cn = fmt("%s-call", san);
        free(san);
        const char *call = lit && cn ? put(b, cn, fmt("%s %s \"\\\"arguments\\\"\" %s %s", lit, COMMA, COLON, args)) : NULL;
        free(lit), free(cn);
        if (!call) goto oom;
        char *alt = fmt("%s%s", n_used ? " | " : "", call);
        if (!alt || !cat(&alts, alt)) {
            free(alt);
            goto oom;
        }
        free(alt);
        n_used++;
    }
    if (!n_used) {
        st = o->choice == DJ_TOOL_NAMED
                 ? dj_fail(DJ_ERR_INVALID, "tools: tool_choice names '%.100s', which is not among the tools", o->name)
                 : dj_fail(DJ_ERR_INVALID, "tools: no tools");
        goto done;
    }
    /* the call object; callrest is what follows its "{" (the JSON trigger).
     * The builder's '{' is "\"{\"" then, in flexible mode, " ws": LB + 3 is
     * that whitespace (the same for LS below). */
    const char *callrest = put(b, "call-rest", fmt("%s \"\\\"name\\\"\" %s ( %s ) %s", LB + 3, COLON, alts, RB));
    if (!callrest) goto oom;
    const char *call = put(b, "call", fmt("\"{\" %s", callrest));
    if (!call) goto oom;
    const char *root_body_rule = NULL; /* the calls */
    char *rb = NULL;
    if (o->format == DJ_TOOL_FORMAT_HERMES) {
        const char *one = put(b, "tool-call", fmt("\"<tool_call>\\n\" %s \"\\n</tool_call>\"", call));
        if (!one) goto oom;
        if (lazy) rb = fmt("\"\\n\" %s \"\\n</tool_call>\"%s%s%s", call, o->parallel ? " ( \"\\n\" " : "",
                           o->parallel ? one : "", o->parallel ? " )*" : "");
        else rb = o->parallel ? fmt("%s ( \"\\n\" %s )*", one, one) : fmt("%s", one);
    } else if (o->parallel) {
        /* LS is "\"[\"" possibly followed by " ws": what follows the trigger is that ws */
        if (lazy) rb = fmt("%s %s ( %s %s )* %s", LS + 3, call, COMMA, call, RS);
        else rb = fmt("%s %s ( %s %s )* %s", LS, call, COMMA, call, RS);
    } else {
        rb = lazy ? fmt("%s", callrest) : fmt("%s", call);
    }
    if (!(root_body_rule = put(b, "calls", rb))) goto oom;
    char *root = NULL;
    if (!lazy && o->choice == DJ_TOOL_AUTO) {
        const char *text = text_rule(b, trigger);
        if (!text) {
            st = DJ_ERR_NOMEM;
            goto done;
        }
        root = fmt("%s %s?", text, root_body_rule);
    } else {
        root = fmt("%s", root_body_rule);
    }
    if (!put(b, "root", root)) goto oom;
    st = gbnf_builder_finish(b, "root", out);
    goto done;
oom:
    st = dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
done:
    free(alts);
    json_decref(empty);
    gbnf_builder_free(b);
    return st;
}

enum dj_status toolcall_grammar_build_value(json_t *tools, const struct dj_toolcall_opts *opts,
                                            struct dj_toolcall_grammar *out) {
    struct dj_toolcall_opts o = opts ? *opts : toolcall_default_opts();
    if (!json_is_array(tools)) return dj_fail(DJ_ERR_INVALID, "tools: not a JSON array");
    if ((unsigned)o.choice > DJ_TOOL_NONE || (unsigned)o.format > DJ_TOOL_FORMAT_JSON)
        return dj_fail(DJ_ERR_INVALID, "tools: unknown tool_choice or format");
    if (o.choice == DJ_TOOL_NAMED && !o.name) return dj_fail(DJ_ERR_INVALID, "tools: tool_choice NAMED without a name");
    /* names must be unique: a call's name picks its arguments' schema */
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *a;
        json_t *p;
        enum dj_status st = tool_at(tools, i, &a, &p);
        if (st) return st;
        for (size_t j = 0; j < i; j++) {
            const char *bn;
            tool_at(tools, j, &bn, &p);
            if (!strcmp(a, bn)) return dj_fail(DJ_ERR_INVALID, "tools: two tools are named '%.100s'", a);
        }
    }
    struct dj_toolcall_grammar g = {0};
    if (o.choice == DJ_TOOL_NONE) {
        *out = g;
        return DJ_OK;
    }
    const char *trig = o.format == DJ_TOOL_FORMAT_HERMES ? "<tool_call>" : o.parallel ? "[" : "{";
    enum dj_status st = DJ_OK;
    if (!(g.trigger = fmt("%s", trig))) st = DJ_ERR_NOMEM;
    if (!st) st = build(tools, &o, false, trig, &g.gbnf);
    if (!st) st = build(tools, &o, true, trig, &g.lazy_gbnf);
    if (st) {
        toolcall_grammar_free(&g);
        return st;
    }
    *out = g;
    return DJ_OK;
}

enum dj_status toolcall_grammar_build(const char *tools_json, size_t n, const struct dj_toolcall_opts *opts,
                                      struct dj_toolcall_grammar *out) {
    json_error_t err;
    json_t *t = json_loadb(tools_json, n, JSON_REJECT_DUPLICATES, &err);
    if (!t) return dj_fail(DJ_ERR_FORMAT, "tools: line %d, column %d: %s", err.line, err.column, err.text);
    enum dj_status st = toolcall_grammar_build_value(t, opts, out);
    json_decref(t);
    return st;
}
