/*
 * toolcall_xml.c — the parameters of an XML-like tool call as a grammar (the
 * rest of the call is toolcall.c's table), for the two families whose values
 * are typed by the same rule:
 *
 *   Qwen3-Coder / Qwen3.5:  <parameter=KEY>\nVALUE\n</parameter>\n
 *   GLM-4.5+ / Laguna:      <arg_key>KEY</arg_key>[\n]<arg_value>VALUE</arg_value>[\n]
 *
 * one per property, in the order of `properties`; required ones always, the
 * others optional; no other keys.
 *
 * The parser (src/chat/toolparse_build.c, OP_XPARAMS with x_qwen / x_glm)
 * reads VALUE (Qwen3-Coder: less the '\n' after <parameter=KEY> and before
 * </parameter>) as JSON when, whitespace trimmed, it is a complete JSON
 * number, true, false, object or array, and as a string of the raw text
 * otherwise (null, quoted text, anything else).  So that every value the
 * grammar allows reads back as what the schema asks for:
 *
 *   a string parameter (type "string", a type list with "string", or {}):
 *       raw text that the parser cannot take for JSON: optional leading
 *       whitespace, then nothing, or text that does not start with '{' or '['
 *       and is not a JSON number, true or false (an automaton: a text that
 *       starts like a number must leave the number syntax, "t"/"f" must not
 *       spell exactly true/false, before the end); never the value's end
 *       marker (</parameter>, </arg_value>).
 *       Not enforced for raw text: pattern, format, minLength, maxLength
 *       (the value is a string, but may break them), and a string that
 *       begins with '{' or '[' cannot be written.
 *   enum / const: each allowed value as the parser reads it back — a string
 *       raw (left out if the parser would misread it: it looks like JSON,
 *       starts or ends with whitespace, or holds the end marker), another
 *       value as its JSON text (null left out: it reads back as "null").
 *   integer, number, boolean, array, object (a type list without "string":
 *       "null" dropped from it): the JSON text of json_schema.c's rule.  A
 *       JSON string inside an array or object holding the end marker would
 *       end the value early: not excluded (json_schema has no such
 *       constraint); nor is a JSON value over 1 MiB, which the parser takes
 *       for a string (TP_VALUE_CAP).
 *   anything else (anyOf, oneOf, allOf, $ref, not, type "null" alone): not
 *       supported (DJ_ERR_UNSUPPORTED: the caller may fall back to free output).
 *
 * Keys: a key the parser cannot read back (Qwen3-Coder: one with '>', as it
 * reads the key up to '>'; GLM: one holding </arg_key>), empty or over 256
 * bytes: an optional one is left out, a required one is an error.  So is an
 * optional parameter whose schema is not supported (left out).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/toolcall.h"
#include "sample/toolcall_int.h"

const struct tc_xml_fmt tc_xml_qwen = {.what = "Qwen3-Coder XML", .key_open = "<parameter=", .key_close = ">\n",
                                       .key_forbid = ">", .mid_x = "", .val_open = "", .val_close = "\n</parameter>\n",
                                       .val_end = "</parameter>", .end_x = ""};
const struct tc_xml_fmt tc_xml_glm = {.what = "GLM XML", .key_open = "<arg_key>", .key_close = "</arg_key>",
                                      .key_forbid = "</arg_key>", .mid_x = "\"\\n\"?", .val_open = "<arg_value>",
                                      .val_close = "</arg_value>", .val_end = "</arg_value>", .end_x = "\"\\n\"?"};

/* The raw-string rules, made once per builder (names owned by the builder). */
struct xs_rules {
    const char *rest;    /* any text without </parameter> */
    const char *rest_lt; /* the same, after a '<' */
    const char *str;     /* a string value */
};

/* the alternatives that leave a state of the number / word automata for plain text */
#define ESC(cls) "[^" cls "<] %s | \"<\" %s"

static enum dj_status xs_make(struct dj_gbnf_builder *b, const char *val_end, struct xs_rules *x) {
    const char *pats[1] = {val_end}, *states[TC_MAX_PATS * TC_MAX_MARKER + 1];
    enum dj_status st = tc_text_rule(b, "xval", pats, 1, NULL, states, &x->rest);
    if (st) return st;
    x->rest_lt = states[1];
    const char *R = x->rest, *L = x->rest_lt;
    struct {
        const char *name;
        char *body;
    } r[16];
    size_t n = 0;
#define RULE(nm, ...) r[n].name = nm, r[n++].body = tc_fmt(__VA_ARGS__)
    /* a JSON number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? then whitespace.  Each state
     * lists what keeps the text a number and leaves by any other character; the end is allowed only
     * where the text so far is not a complete number. */
    RULE("xnum-minus", "\"\" | \"0\" xnum-zero | [1-9] xnum-int | " ESC("0-9"), R, L);
    RULE("xnum-zero", "\".\" xnum-dot | [eE] xnum-e | [ \\t\\r\\n] xnum-ws | " ESC(".eE \\t\\r\\n"), R, L);
    RULE("xnum-int", "[0-9] xnum-int | \".\" xnum-dot | [eE] xnum-e | [ \\t\\r\\n] xnum-ws | " ESC("0-9.eE \\t\\r\\n"), R, L);
    RULE("xnum-dot", "\"\" | [0-9] xnum-frac | " ESC("0-9"), R, L);
    RULE("xnum-frac", "[0-9] xnum-frac | [eE] xnum-e | [ \\t\\r\\n] xnum-ws | " ESC("0-9eE \\t\\r\\n"), R, L);
    RULE("xnum-e", "\"\" | [+\\x2D] xnum-esign | [0-9] xnum-exp | " ESC("0-9+\\x2D"), R, L);
    RULE("xnum-esign", "\"\" | [0-9] xnum-exp | " ESC("0-9"), R, L);
    RULE("xnum-exp", "[0-9] xnum-exp | [ \\t\\r\\n] xnum-ws | " ESC("0-9 \\t\\r\\n"), R, L);
    RULE("xnum-ws", "[ \\t\\r\\n] xnum-ws | " ESC(" \\t\\r\\n"), R, L);
    /* true / false: any text but exactly the word (plus whitespace) */
    RULE("xw-t1", "\"\" | \"r\" xw-t2 | " ESC("r"), R, L);
    RULE("xw-t2", "\"\" | \"u\" xw-t3 | " ESC("u"), R, L);
    RULE("xw-t3", "\"\" | \"e\" xw-word | " ESC("e"), R, L);
    RULE("xw-f1", "\"\" | \"a\" xw-f2 | " ESC("a"), R, L);
    RULE("xw-f2", "\"\" | \"l\" xw-f3 | " ESC("l"), R, L);
    RULE("xw-f3", "\"\" | \"s\" xw-f4 | " ESC("s"), R, L);
    RULE("xw-f4", "\"\" | \"e\" xw-word | " ESC("e"), R, L);
#undef RULE
    const char *extra[2] = {"xw-word", "xstr-body"};
    char *eb[2] = {tc_fmt("[ \\t\\r\\n] xw-word | " ESC(" \\t\\r\\n"), R, L),
                   tc_fmt("[^ \\t\\r\\n{[tf0-9<\\x2D] %s | \"<\" %s | \"t\" xw-t1 | \"f\" xw-f1 | \"-\" xnum-minus | "
                          "\"0\" xnum-zero | [1-9] xnum-int",
                          R, L)};
    st = DJ_OK;
    for (size_t i = 0; i < n; i++)
        if (!st && !tc_put(b, r[i].name, r[i].body)) st = DJ_ERR_NOMEM;
        else if (st) free(r[i].body);
    for (size_t i = 0; i < 2; i++)
        if (!st && !tc_put(b, extra[i], eb[i])) st = DJ_ERR_NOMEM;
        else if (st) free(eb[i]);
    if (st) return dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
    x->str = tc_put(b, "xstr", tc_fmt("[ \\t\\r\\n]* xstr-body?"));
    return x->str ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Would the parser read the raw text s as this string?  Not if it looks like
 * JSON (a number, true, false, '{' or '[' first), has whitespace at either
 * end (trimmed before the JSON test, and one '\n' is stripped), or holds the
 * value's end marker. */
static bool raw_string_safe(const char *s, size_t n, const char *val_end) {
    if (n == 0) return true;
    if (strlen(s) != n || strstr(s, val_end) || is_ws(s[0]) || is_ws(s[n - 1])) return false;
    if (s[0] == '{' || s[0] == '[') return false;
    if (!strcmp(s, "true") || !strcmp(s, "false")) return false;
    /* a JSON number? */
    size_t i = 0;
    if (s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return true;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return true;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return true;
    }
    return i < n;
}

static bool has_type(json_t *type, const char *t) {
    if (json_is_string(type)) return !strcmp(json_string_value(type), t);
    size_t i;
    json_t *v;
    json_array_foreach(type, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), t)) return true;
    return false;
}

/* enum / const: the values' texts as alternatives. */
static enum dj_status enum_rule(struct dj_gbnf_builder *b, const struct tc_xml_fmt *f, json_t *vals, const char *tool,
                                const char *key, const char *hint, const char **rule) {
    char *body = NULL;
    size_t i, n_alts = 0;
    json_t *v;
    json_array_foreach(vals, i, v) {
        char *text = NULL;
        if (json_is_string(v)) {
            if (!raw_string_safe(json_string_value(v), json_string_length(v), f->val_end)) continue;
            text = strdup(json_string_value(v));
        } else if (!json_is_null(v)) {
            text = json_dumps(v, JSON_ENCODE_ANY);
        } else {
            continue;
        }
        char *q = text && *text ? gbnf_quote(text, strlen(text)) : text ? strdup("\"\"") : NULL;
        char *alt = q ? tc_fmt("%s%s", n_alts ? " | " : "", q) : NULL;
        free(text), free(q);
        if (!alt || !tc_cat(&body, alt)) {
            free(alt), free(body);
            return dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        }
        free(alt);
        n_alts++;
    }
    if (!n_alts)
        return dj_fail(DJ_ERR_UNSUPPORTED,
                       "tools: %s: parameter '%s': none of its enum values can be written as a %s value "
                       "that reads back as itself",
                       tool, key, f->what);
    *rule = tc_put(b, hint, body);
    return *rule ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
}

/* The value rule of one parameter. */
static enum dj_status value_rule(struct dj_gbnf_builder *b, const struct tc_xml_fmt *f, const char **str_cache, json_t *s,
                                 const char *tool, const char *key, const char *hint, const char **rule) {
    enum dj_status st;
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s))) goto string; /* anything: a string is valid */
    if (!json_is_object(s))
        return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: parameter '%s': a schema that is not an object", tool, key);
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (json_is_array(en)) return enum_rule(b, f, en, tool, key, hint, rule);
    if (cn) {
        json_t *a = json_pack("[O]", cn);
        st = a ? enum_rule(b, f, a, tool, key, hint, rule) : dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        json_decref(a);
        return st;
    }
    json_t *type = json_object_get(s, "type");
    static const char *const composite[] = {"anyOf", "oneOf", "allOf", "$ref", "not"};
    for (size_t i = 0; i < sizeof composite / sizeof composite[0]; i++)
        if (json_object_get(s, composite[i]))
            return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: parameter '%s': '%s' has no %s grammar", tool, key,
                           composite[i], f->what);
    if (!type || has_type(type, "string")) goto string;
    /* a JSON value: drop "null" (it would read back as the string "null") */
    json_t *copy = json_deep_copy(s);
    if (!copy) return dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
    if (json_is_array(type)) {
        json_t *t2 = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(type, i, v) if (!(json_is_string(v) && !strcmp(json_string_value(v), "null")))
            json_array_append(t2, v);
        if (!json_array_size(t2)) {
            json_decref(t2), json_decref(copy);
            return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: parameter '%s': type null has no %s value", tool, key, f->what);
        }
        json_object_set_new(copy, "type", t2);
    } else if (has_type(type, "null")) {
        json_decref(copy);
        return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: parameter '%s': type null has no %s value", tool, key, f->what);
    }
    st = gbnf_builder_add_schema(b, copy, hint, rule);
    json_decref(copy);
    return st;
string:
    if (!*str_cache) {
        struct xs_rules x = {0};
        if ((st = xs_make(b, f->val_end, &x))) return st;
        *str_cache = x.str;
    }
    *rule = *str_cache;
    return DJ_OK;
}

/* Can the parser read key back? */
static bool key_ok(const struct tc_xml_fmt *f, const char *key) {
    return *key && strlen(key) <= 256 && !strstr(key, f->key_forbid);
}

enum dj_status tc_xml_args(struct dj_gbnf_builder *b, const struct tc_xml_fmt *f, json_t *params, const char *tool,
                           const char *hint, const char **str_cache, const char **rule) {
    json_t *props = json_is_object(params) ? json_object_get(params, "properties") : NULL;
    json_t *req = json_is_object(params) ? json_object_get(params, "required") : NULL;
    if (params && !json_is_object(params))
        return dj_fail(DJ_ERR_INVALID, "tools: %s: parameters is not a JSON object", tool);
    if (props && !json_is_object(props))
        return dj_fail(DJ_ERR_INVALID, "tools: %s: properties is not a JSON object", tool);
    static const char *const composite[] = {"anyOf", "oneOf", "allOf", "$ref", "not"};
    for (size_t i = 0; params && i < sizeof composite / sizeof composite[0]; i++)
        if (json_object_get(params, composite[i]))
            return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: parameters with '%s' have no %s grammar", tool, composite[i],
                           f->what);
    /* every required key must be a property that can be written */
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) {
        const char *k = json_string_value(r);
        if (!k || !json_object_get(props, k))
            return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: required parameter '%s' is not among the properties", tool,
                           k ? k : "?");
        if (!key_ok(f, k))
            return dj_fail(DJ_ERR_UNSUPPORTED, "tools: %s: required parameter '%.256s' cannot be written in %s", tool, k,
                           f->what);
    }
    char *body = NULL;
    const char *key;
    json_t *ps;
    size_t n_items = 0, k_i = 0;
    json_object_foreach(props, key, ps) {
        k_i++;
        if (!key_ok(f, key)) continue;
        bool required = false;
        json_array_foreach(req, i, r) required |= json_is_string(r) && !strcmp(json_string_value(r), key);
        char *vh = tc_fmt("%s-%zu", hint, k_i);
        if (!vh) {
            free(body);
            return DJ_ERR_NOMEM;
        }
        const char *vr;
        enum dj_status st = value_rule(b, f, str_cache, ps, tool, key, vh, &vr);
        free(vh);
        if (st == DJ_ERR_UNSUPPORTED && !required) continue; /* an optional parameter left out */
        if (st) {
            free(body);
            return st;
        }
        char *open = tc_fmt("%s%s%s", f->key_open, key, f->key_close);
        char *qo = open ? gbnf_quote(open, strlen(open)) : NULL;
        char *qvo = *f->val_open ? gbnf_quote(f->val_open, strlen(f->val_open)) : strdup("");
        char *qvc = gbnf_quote(f->val_close, strlen(f->val_close));
        char *item = qo && qvo && qvc ? tc_fmt("%s%s %s %s %s %s %s %s%s", n_items ? " " : "", required ? "" : "(", qo,
                                               f->mid_x, qvo, vr, qvc, f->end_x, required ? "" : " )?")
                                      : NULL;
        free(open), free(qo), free(qvo), free(qvc);
        if (!item || !tc_cat(&body, item)) {
            free(item), free(body);
            return dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        }
        free(item);
        n_items++;
    }
    if (!n_items) {
        *rule = tc_put(b, hint, tc_fmt("\"\""));
    } else {
        *rule = tc_put(b, hint, body);
        body = NULL;
    }
    free(body);
    return *rule ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
}
