/*
 * toolcall.c — tool-call grammars (contract in toolcall.h).
 *
 * Every family is one or two rows of a table (struct tc_var): the literal
 * that opens the calls, the literal before each call, how the name and the
 * arguments are written (a JSON object with a name key and an arguments key,
 * or the name raw between two markers), what separates calls, what closes
 * them.  One function, calls_expr(), turns a row into GBNF:
 *
 *   call      ::= CALL_OPEN BODY_LIT body-rest CALL_CLOSE
 *   body-rest ::= (OBJ)  : ( "\"bash\"" , "\"arguments\"" : bash-args | ... ) }
 *                 (RAW)  PRE_X ( "bash" POST POST_X bash-args | ... )
 *   calls     ::= P tail            P = OPEN CALL_OPEN BODY_LIT (a literal)
 *   tail      ::= body-rest CALL_CLOSE ( SEP call )* CLOSE
 *
 * The trigger is a prefix of P, so the lazy grammar (what follows the
 * trigger) is the rest of P and the same tail.  The name comes first in a
 * call object so that the tool's rule is chosen by its name, as the
 * templates write it.  Free text (AUTO) and think text are "text without
 * these markers" automata (tc_text_rule), so text and calls split one way.
 */
#include "sample/toolcall.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/toolcall_int.h"

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

char *tc_fmt(const char *f, ...) {
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

bool tc_cat(char **acc, const char *s) {
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

const char *tc_put(struct dj_gbnf_builder *b, const char *name, char *body) {
    if (!body) return NULL;
    const char *r = gbnf_builder_add_rule(b, name, body);
    free(body);
    if (!r) dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
    return r;
}

/* ---- the families ------------------------------------------------------------------- */

#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALLS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

enum { TB_OBJ, TB_RAW };     /* a call's body: a JSON object, or the name raw between markers */

#define ID9 "\"\\\"\" [A-Za-z0-9]{9} \"\\\"\"" /* a JSON string of 9 alphanumerics */
#define HARMONY_TO " to=functions." /* gpt-oss: the recipient in a call's header (the trigger) */

struct tc_var {
    const char *trigger;      /* chat_tool_trigger of the family: a prefix of open + call_open + the body's literal */
    const char *lead_x;       /* expression allowed before the calls in the grammars from the first byte */
    const char *open;         /* literal before the first call */
    bool open_ws;             /* JSON: the builder's whitespace after open ("[") */
    const char *call_open;    /* literal before every call */
    uint8_t body;
    const struct tc_xml_fmt *xml; /* the arguments: NULL JSON per the schema, else XML-like parameters */
    /* TB_OBJ: {"lead_key": lead_x_val, "name_key": "NAME", "args_key": ARGS[, "trail_key": trail_val]} */
    const char *lead_key, *lead_val, *name_key, *args_key, *trail_key, *trail_val;
    /* TB_RAW: pre PRE_X NAME post POST_X ARGS */
    const char *pre, *pre_x, *post, *post_x;
    const char *name_stop;    /* TB_RAW: the parser reads the name up to this */
    const char *name_set;     /* TB_RAW: ... or up to whitespace or one of these characters */
    bool strict;              /* TB_RAW: the parser takes only [A-Za-z0-9_.:-] names */
    const char *call_close;   /* literal after every call */
    const char *sep;          /* literal between calls */
    const char *sep_x, *close_x; /* or an expression between calls; an expression after close */
    bool sep_json, close_json; /* the builder's ',' between calls / ']' to close (JSON) */
    const char *close;        /* literal after the last call */
    bool single;              /* one call only, whatever parallel says */
    bool at_start;            /* AUTO: the parser sees calls only at the start of the output (Llama 3.x) */
    const char *forbid;       /* AUTO: another marker that starts a call in the parser */
};

struct tc_family {
    const char *name;
    struct tc_var v[2];
    int n;
};

#define OBJ(nk, ak) .body = TB_OBJ, .name_key = nk, .args_key = ak

static const struct tc_family families[DJ_TOOL_FORMAT_N] = {
    [DJ_TOOL_FORMAT_HERMES] = {"hermes", {{.trigger = "<tool_call>", .call_open = "<tool_call>\n", OBJ("name", "arguments"),
                                            .call_close = "\n</tool_call>", .sep = "\n"}}, 1},
    /* JSON: v[0] one call, v[1] parallel (chosen in build) */
    [DJ_TOOL_FORMAT_JSON] = {"json", {{.trigger = "{", OBJ("name", "arguments"), .single = true},
                                      {.trigger = "[", .open = "[", .open_ws = true, OBJ("name", "arguments"),
                                       .sep_json = true, .close_json = true}}, 1},
    [DJ_TOOL_FORMAT_LLAMA3] = {"llama3", {{.trigger = "{\"name\"", OBJ("name", "parameters"), .single = true,
                                           .at_start = true, .forbid = "<|python_tag|>"}}, 1},
    [DJ_TOOL_FORMAT_MISTRAL] = {"mistral", {{.trigger = "[TOOL_CALLS]", .call_open = "[TOOL_CALLS]", .body = TB_RAW,
                                             .post_x = "( \"[CALL_ID]\" [A-Za-z0-9]{9} )? \"[ARGS]\"", .name_stop = "[",
                                             .strict = true},
                                            {.trigger = "[TOOL_CALLS]", .open = "[TOOL_CALLS][", OBJ("name", "arguments"),
                                             .trail_key = "id", .trail_val = ID9, .sep_json = true, .close = "]"}}, 2},
    [DJ_TOOL_FORMAT_DEEPSEEK_V3] = {"deepseek-v3", {{.trigger = DS_CALLS, .open = DS_CALLS, .call_open = DS_CALL "function" DS_SEP,
                                                     .body = TB_RAW, .post = "\n```json\n", .name_stop = "\n",
                                                     .call_close = "\n```" DS_CALL_END, .sep = "\n", .close = DS_CALLS_END}}, 1},
    [DJ_TOOL_FORMAT_DEEPSEEK_V31] = {"deepseek-v3.1", {{.trigger = DS_CALLS, .open = DS_CALLS, .call_open = DS_CALL, .body = TB_RAW,
                                                        .post = DS_SEP, .name_stop = DS_SEP, .call_close = DS_CALL_END,
                                                        .close = DS_CALLS_END}}, 1},
    [DJ_TOOL_FORMAT_FUNCTIONARY_V31] = {"functionary-v3.1", {{.trigger = "<function=", .call_open = "<function=", .body = TB_RAW,
                                                              .post = ">", .name_stop = ">", .strict = true,
                                                              .call_close = "</function>", .forbid = "<|python_tag|>"}}, 1},
    [DJ_TOOL_FORMAT_COMMAND_R] = {"command-r7b", {{.trigger = "<|START_ACTION|>", .open = "<|START_ACTION|>[\n    ",
                                                   OBJ("tool_name", "parameters"), .lead_key = "tool_call_id",
                                                   .lead_val = "\"\\\"\" [0-9]{1,3} \"\\\"\"", .sep = ",\n    ",
                                                   .close = "\n]<|END_ACTION|>"}}, 1},
    [DJ_TOOL_FORMAT_GRANITE] = {"granite", {{.trigger = "<|tool_call|>", .open = "<|tool_call|>[", OBJ("name", "arguments"),
                                             .sep_json = true, .close = "]"}}, 1},
    [DJ_TOOL_FORMAT_KIMI_K2] = {"kimi-k2", {{.trigger = "<|tool_calls_section_begin|>", .open = "<|tool_calls_section_begin|>",
                                             .call_open = "<|tool_call_begin|>", .body = TB_RAW, .pre = "functions.",
                                             .post = ":", .post_x = "[0-9]{1,3} \"<|tool_call_argument_begin|>\"",
                                             .name_stop = "<|tool_call_argument_begin|>", .call_close = "<|tool_call_end|>",
                                             .close = "<|tool_calls_section_end|>"}}, 1},
    [DJ_TOOL_FORMAT_SOLAR] = {"solar", {{.trigger = "<|tool_calls|>", .open = "<|tool_calls|>", .call_open = "<|tool_call:begin|>",
                                         .body = TB_RAW, .pre_x = "[A-Za-z0-9]{9,10} \"<|tool_call:name|>\"",
                                         .post = "<|tool_call:args|>", .name_stop = "<|tool_call:args|>",
                                         .call_close = "<|tool_call:end|>", .close = "<|calls|>"}}, 1},
    [DJ_TOOL_FORMAT_NEMOTRON] = {"nemotron", {{.trigger = "<TOOLCALL>", .open = "<TOOLCALL>[", OBJ("name", "arguments"),
                                               .sep_json = true, .close = "]</TOOLCALL>"}}, 1},
    [DJ_TOOL_FORMAT_APRIEL] = {"apriel", {{.trigger = "<tool_calls>", .open = "<tool_calls>[", OBJ("name", "arguments"),
                                           .trail_key = "id", .trail_val = ID9, .sep_json = true, .close = "]</tool_calls>"}}, 1},
    [DJ_TOOL_FORMAT_MINIMAX_M1] = {"minimax-m1", {{.trigger = "<tool_calls>", .open = "<tool_calls>\n", OBJ("name", "arguments"),
                                                   .sep = "\n", .close = "\n</tool_calls>"}}, 1},
    [DJ_TOOL_FORMAT_FIREFUNCTION] = {"firefunction", {{.trigger = "functools", .lead_x = "\" \"?", .open = "functools[",
                                                       OBJ("name", "arguments"), .sep_json = true, .close = "]"}}, 1},
    [DJ_TOOL_FORMAT_GIGACHAT] = {"gigachat", {{.trigger = "<|function_call|>", .open = "<|function_call|>",
                                               OBJ("name", "arguments"), .single = true}}, 1},
    [DJ_TOOL_FORMAT_QWEN3_CODER] = {"qwen3-coder", {{.trigger = "<tool_call>", .call_open = "<tool_call>\n<function=",
                                                     .body = TB_RAW, .xml = &tc_xml_qwen, .post = ">\n", .name_stop = ">",
                                                     .call_close = "</function>\n</tool_call>", .sep = "\n"}}, 1},
    [DJ_TOOL_FORMAT_GLM] = {"glm", {{.trigger = "<tool_call>", .call_open = "<tool_call>", .body = TB_RAW, .xml = &tc_xml_glm,
                                     .post_x = "\"\\n\"?", .name_set = "<", .call_close = "</tool_call>", .sep_x = "\"\\n\"?",
                                     .close_x = "\"\\n\"?"}}, 1},
    /* harmony: built by harmony_calls(); the row gives the trigger and that one call is made */
    [DJ_TOOL_FORMAT_GPT_OSS] = {"gpt-oss", {{.trigger = HARMONY_TO, .body = TB_RAW, .single = true}}, 1},
};

const char *toolcall_format_name(enum dj_tool_format f) {
    return (unsigned)f < DJ_TOOL_FORMAT_N ? families[f].name : NULL;
}

const char *toolcall_format_trigger(enum dj_tool_format f, bool parallel) {
    if ((unsigned)f >= DJ_TOOL_FORMAT_N) return NULL;
    return families[f].v[f == DJ_TOOL_FORMAT_JSON && parallel].trigger;
}

/* ---- text without markers ----------------------------------------------------------- */

/* Decodes UTF-8 s into code points (at most cap); the count, or SIZE_MAX if too long. */
static size_t to_cps(const char *s, uint32_t *cp, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; u[i];) {
        uint32_t c = u[i];
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        c &= len == 1 ? 0x7F : len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
        size_t k = 1;
        for (; k < len && u[i + k]; k++) c = (c << 6) | (u[i + k] & 0x3F);
        i += k;
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

struct ac_state {
    const uint32_t *s; /* a prefix of a marker */
    size_t n;
};

/* Is a marker a suffix of w[0..n)? */
static bool ac_forbidden(const uint32_t pats[][TC_MAX_MARKER], const size_t *pl, size_t n_pats, const uint32_t *w, size_t n) {
    for (size_t p = 0; p < n_pats; p++)
        if (pl[p] <= n && !memcmp(w + n - pl[p], pats[p], pl[p] * sizeof *w)) return true;
    return false;
}

/* The state of w[0..n): its longest suffix that is a state. */
static size_t ac_state_of(const struct ac_state *st, size_t n_st, const uint32_t *w, size_t n) {
    size_t best = 0, best_n = 0;
    for (size_t i = 1; i < n_st; i++)
        if (st[i].n <= n && st[i].n > best_n && !memcmp(w + n - st[i].n, st[i].s, st[i].n * sizeof *w)) best = i, best_n = st[i].n;
    return best;
}

enum dj_status tc_text_rule(struct dj_gbnf_builder *b, const char *prefix, const char *const *pats_s, size_t n_pats,
                            const char *no_first, const char **states, const char **start_out) {
    enum dj_status st_ret = DJ_ERR_NOMEM;
    uint32_t(*P)[TC_MAX_MARKER] = malloc(TC_MAX_PATS * sizeof *P);
    size_t pl[TC_MAX_PATS];
    struct ac_state *st = malloc((TC_MAX_PATS * TC_MAX_MARKER + 1) * sizeof *st);
    const char **names = malloc((TC_MAX_PATS * TC_MAX_MARKER + 1) * sizeof *names);
    uint32_t *alpha = malloc(TC_MAX_PATS * TC_MAX_MARKER * sizeof *alpha);
    char *body = NULL, *other = NULL;
    const char *start = NULL;
    if (!P || !st || !names || !alpha) {
        dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
        goto done;
    }
    if (n_pats == 0 || n_pats > TC_MAX_PATS) {
        st_ret = dj_fail(DJ_ERR_INVALID, "tools: 1 to %d markers for free text, not %zu", TC_MAX_PATS, n_pats);
        goto done;
    }
    size_t n_alpha = 0, n_st = 1;
    st[0] = (struct ac_state){NULL, 0};
    for (size_t p = 0; p < n_pats; p++) {
        pl[p] = to_cps(pats_s[p], P[p], TC_MAX_MARKER);
        if (pl[p] == SIZE_MAX || pl[p] == 0) {
            st_ret = dj_fail(DJ_ERR_INVALID, "tools: a marker must be 1 to %d characters", TC_MAX_MARKER);
            goto done;
        }
        for (size_t i = 0; i < pl[p]; i++) {
            bool dup = false;
            for (size_t a = 0; a < n_alpha && !dup; a++) dup = alpha[a] == P[p][i];
            if (!dup) alpha[n_alpha++] = P[p][i];
        }
    }
    /* states: every proper prefix of a marker (pats[0]'s first, in length order) */
    for (size_t p = 0; p < n_pats; p++)
        for (size_t len = 1; len < pl[p]; len++) {
            bool dup = false;
            for (size_t i = 1; i < n_st && !dup; i++) dup = st[i].n == len && !memcmp(st[i].s, P[p], len * sizeof(uint32_t));
            if (!dup) st[n_st++] = (struct ac_state){P[p], len};
        }
    for (size_t i = 0; i < n_st; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s-%zu", prefix, i);
        if (!(names[i] = gbnf_builder_add_rule(b, nm, NULL))) {
            dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
            goto done;
        }
    }
    /* [^alphabet] */
    if (!(other = tc_fmt("[^"))) goto done;
    for (size_t a = 0; a < n_alpha; a++) {
        char cc[16];
        class_cp(cc, alpha[a]);
        if (!tc_cat(&other, cc)) goto done;
    }
    size_t n_rules = n_st + (no_first && *no_first ? 1 : 0);
    for (size_t i = 0; i < n_rules; i++) {
        bool first = i == n_st; /* the extra start rule: state 0 without no_first */
        size_t si = first ? 0 : i;
        uint32_t w[TC_MAX_MARKER + 1];
        if (st[si].n) memcpy(w, st[si].s, st[si].n * sizeof *w);
        free(body);
        body = NULL;
        for (size_t a = 0; a < n_alpha; a++) {
            if (first && alpha[a] < 0x80 && strchr(no_first, (int)alpha[a])) continue;
            w[st[si].n] = alpha[a];
            if (ac_forbidden((const uint32_t(*)[TC_MAX_MARKER])P, pl, n_pats, w, st[si].n + 1)) continue;
            size_t nx = ac_state_of(st, n_st, w, st[si].n + 1);
            char cc[16];
            class_cp(cc, alpha[a]);
            char *alt = tc_fmt("%s[%s] %s", body ? " | " : "", cc, names[nx]);
            bool ok = alt && tc_cat(&body, alt);
            free(alt);
            if (!ok) goto done;
        }
        char *extra = NULL;
        if (first) {
            for (const char *q = no_first; *q; q++) {
                bool in = false;
                for (size_t a = 0; a < n_alpha && !in; a++) in = alpha[a] == (unsigned char)*q;
                if (in) continue;
                char cc[16];
                class_cp(cc, (unsigned char)*q);
                if (!tc_cat(&extra, cc)) goto done;
            }
        }
        char *alt = tc_fmt("%s%s%s] %s | \"\"", body ? " | " : "", other, extra ? extra : "", names[0]);
        free(extra);
        bool ok = alt && tc_cat(&body, alt);
        free(alt);
        if (!ok) goto done;
        if (first) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s-start", prefix);
            start = tc_put(b, nm, body);
            body = NULL;
            if (!start) goto done;
        } else if (!gbnf_builder_define(b, names[i], body)) {
            dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
            goto done;
        }
    }
    if (!start) start = names[0];
    if (states)
        for (size_t i = 0; i < n_st; i++) states[i] = names[i];
    *start_out = start;
    st_ret = DJ_OK;
done:
    free(body), free(other), free(P), free(st), free(names), free(alpha);
    return st_ret;
}

/* ---- building ------------------------------------------------------------------------- */

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

/* Can the parser read name back when it is written raw in v? */
static bool raw_name_ok(const struct tc_var *v, const char *name) {
    if (strlen(name) > 256) return false; /* the parser's cap (TP_NAME_MAX) */
    if (v->name_stop && strstr(name, v->name_stop)) return false;
    if (v->name_set)
        for (const char *q = name; *q; q++)
            if ((unsigned char)*q <= ' ' || strchr(v->name_set, *q)) return false; /* whitespace, control characters */
    if (v->strict)
        for (const char *q = name; *q; q++) {
            char c = *q;
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                  c == ':' || c == '-'))
                return false;
        }
    return true;
}

struct tc_tool {
    const char *name;
    const char *args; /* the arguments' rule */
};

struct tc_ctx {
    struct dj_gbnf_builder *b;
    const char *LB, *RB, *COMMA, *COLON, *LS, *RS;
    struct tc_tool *tools;
    size_t n_tools;
};

/* a GBNF literal, or "" for an empty or NULL string (malloc'd) */
static char *lit(const char *s) { return s && *s ? gbnf_quote(s, strlen(s)) : tc_fmt("%s", ""); }

/* The calls of one family row, as an expression (*res, malloc'd; NULL when
 * no tool can be written in this row). */
static enum dj_status calls_expr(struct tc_ctx *c, const struct tc_var *v, const struct dj_toolcall_opts *o, bool lazy,
                                 int vi, char **res) {
    enum dj_status st = DJ_OK;
    char *alts = NULL, *out = NULL, *body_lit = NULL, *rest_body = NULL, *p = NULL;
    char *q_callopen_lit = NULL, *q_close = NULL, *q_callclose = NULL, *q_sep = NULL, *q_p = NULL, *lit_tmp = NULL;
    size_t n_alts = 0;
    *res = NULL;
    for (size_t i = 0; i < c->n_tools; i++) {
        const struct tc_tool *t = &c->tools[i];
        char *alt;
        if (v->body == TB_OBJ) {
            char *nl = gbnf_json_string_literal(t->name, strlen(t->name)), *ak = tc_fmt("\"\\\"%s\\\"\"", v->args_key);
            char *tr = v->trail_key ? tc_fmt(" ( %s \"\\\"%s\\\"\" %s %s )?", c->COMMA, v->trail_key, c->COLON, v->trail_val)
                                    : tc_fmt("%s", "");
            alt = nl && ak && tr ? tc_fmt("%s %s %s %s %s%s", nl, c->COMMA, ak, c->COLON, t->args, tr) : NULL;
            free(nl), free(ak), free(tr);
        } else {
            if (!raw_name_ok(v, t->name)) continue;
            char *nl = gbnf_quote(t->name, strlen(t->name)), *pl = lit(v->post);
            alt = nl && pl ? tc_fmt("%s %s %s %s", nl, pl, v->post_x ? v->post_x : "", t->args) : NULL;
            free(nl), free(pl);
        }
        if (!alt) goto oom;
        char *a2 = tc_fmt("%s%s", n_alts ? " | " : "", alt);
        free(alt);
        if (!a2 || !tc_cat(&alts, a2)) {
            free(a2);
            goto oom;
        }
        free(a2);
        n_alts++;
    }
    if (!n_alts) goto done;
    /* body_lit: the call's literal start after call_open; rest_body: the rest of the body */
    if (v->body == TB_OBJ) {
        body_lit = tc_fmt("{\"%s\"", v->lead_key ? v->lead_key : v->name_key);
        if (v->lead_key)
            rest_body = tc_fmt("%s %s %s \"\\\"%s\\\"\" %s ( %s ) %s", c->COLON, v->lead_val, c->COMMA, v->name_key, c->COLON,
                               alts, c->RB);
        else rest_body = tc_fmt("%s ( %s ) %s", c->COLON, alts, c->RB);
    } else {
        body_lit = tc_fmt("%s", v->pre ? v->pre : "");
        rest_body = tc_fmt("%s ( %s )", v->pre_x ? v->pre_x : "", alts);
    }
    if (!body_lit || !rest_body) goto oom;
    char nm[48];
    snprintf(nm, sizeof nm, "call-body%d", vi);
    const char *rb = tc_put(c->b, nm, rest_body);
    rest_body = NULL;
    if (!rb) goto oom;
    char *col = tc_fmt("%s%s", v->call_open ? v->call_open : "", body_lit);
    q_callopen_lit = col ? lit(col) : NULL;
    free(col);
    q_callclose = lit(v->call_close);
    if (v->close_x) {
        lit_tmp = lit(v->close);
        q_close = lit_tmp ? tc_fmt("%s %s", lit_tmp, v->close_x) : NULL;
    } else {
        q_close = v->close_json ? tc_fmt("%s", c->RS) : lit(v->close);
    }
    q_sep = v->sep_json ? tc_fmt("%s", c->COMMA) : v->sep_x ? tc_fmt("%s", v->sep_x) : lit(v->sep);
    if (!q_callopen_lit || !q_callclose || !q_close || !q_sep) goto oom;
    snprintf(nm, sizeof nm, "call%d", vi);
    const char *call = tc_put(c->b, nm, tc_fmt("%s %s %s", q_callopen_lit, rb, q_callclose));
    if (!call) goto oom;
    char *more = !v->single && o->parallel ? tc_fmt(" ( %s %s )*", q_sep, call) : tc_fmt("%s", "");
    if (!more) goto oom;
    /* P, the literal start; tail, the rest */
    char *tail;
    if (v->open_ws) {
        p = tc_fmt("%s", v->open);
        tail = tc_fmt("%s %s%s %s", c->LS + 3, call, more, q_close); /* LS is "\"[\"" then, if any, " ws" */
    } else {
        p = tc_fmt("%s%s%s", v->open ? v->open : "", v->call_open ? v->call_open : "", body_lit);
        tail = tc_fmt("%s %s%s %s", rb, q_callclose, more, q_close);
    }
    free(more);
    if (!p || !tail) {
        free(tail);
        goto oom;
    }
    size_t nt = strlen(v->trigger);
    if (strncmp(p, v->trigger, nt)) { /* the table is wrong: a programming error, reported */
        free(tail);
        st = dj_fail(DJ_ERR_INVALID, "tools: %s: the trigger is not where the calls start", toolcall_format_name(o->format));
        goto done;
    }
    q_p = lit(lazy ? p + nt : p);
    out = q_p ? tc_fmt("%s %s", q_p, tail) : NULL;
    free(tail);
    if (!out) goto oom;
    *res = out;
    goto done;
oom:
    st = dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
done:
    free(alts), free(body_lit), free(rest_body), free(p), free(q_callopen_lit), free(q_close), free(q_callclose), free(q_sep),
        free(q_p), free(lit_tmp);
    return st;
}

/* The reasoning block the grammars from the first byte start with ("" when none). */
static enum dj_status think_expr(struct dj_gbnf_builder *b, const struct dj_toolcall_opts *o, char **res) {
    *res = NULL;
    if (!o->think_open || !o->think_close || !*o->think_open || !*o->think_close)
        return (*res = tc_fmt("%s", "")) ? DJ_OK : DJ_ERR_NOMEM;
    const bool harmony = o->format == DJ_TOOL_FORMAT_GPT_OSS;
    const char *pats[3] = {o->think_close, "<|call|>", "<|return|>"};
    size_t n_pats = 1;
    if (harmony) /* the parser ends a message at any of its end markers */
        for (size_t i = 1; i < 3; i++)
            if (strcmp(pats[i], o->think_close)) pats[n_pats++] = pats[i];
    const char *text;
    enum dj_status st = tc_text_rule(b, "think", pats, n_pats, NULL, NULL, &text);
    if (st) return st;
    char *qo = lit(o->think_open), *qc = lit(o->think_close);
    if (qo && qc) {
        if (harmony) *res = tc_fmt("( %s %s %s \"<|start|>assistant\" )? ", qo, text, qc);
        else if (o->think_forced_open) *res = tc_fmt("%s %s [ \\t\\r\\n]{0,8} ", text, qc);
        else *res = tc_fmt("( %s %s %s [ \\t\\r\\n]{0,8} )? ", qo, text, qc);
    }
    free(qo), free(qc);
    return *res ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
}

/* Can the harmony parser read name back from " to=functions.NAME"?  It takes
 * [A-Za-z0-9_./-] after "to=" (toolparse_ops.c, hdr_word), the header up to
 * 512 bytes. */
static bool harmony_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n > 256) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
              ch == '-' || ch == '/'))
            return false;
    }
    return true;
}

/* gpt-oss (harmony, toolcall.h): the call as an expression (*res, malloc'd;
 * NULL when no tool name can be written).  after_to: what follows
 * HARMONY_TO (the lazy grammar's, and AUTO's after its free text), the
 * channel after the name optional; else the whole call from the first byte,
 * in either header order. */
static enum dj_status harmony_calls(struct tc_ctx *c, bool after_to, char **res) {
    char *alts = NULL, *alts2 = NULL;
    size_t n_alts = 0;
    *res = NULL;
    const char *chan = tc_put(c->b, "h-channel", tc_fmt("\"<|channel|>\" ( \"commentary\" | \"analysis\" )"));
    const char *tail = chan ? tc_put(c->b, "h-tail", tc_fmt("( \" \" \"<|constrain|>\"? \"json\" )? \"<|message|>\"")) : NULL;
    if (!tail) goto oom;
    for (size_t i = 0; i < c->n_tools; i++) {
        const struct tc_tool *t = &c->tools[i];
        if (!harmony_name_ok(t->name)) continue;
        char *nl = gbnf_quote(t->name, strlen(t->name));
        /* after_to: NAME CHANNEL? TAIL ARGS; else channel first (A) and channel after the name (B) */
        char *a = nl ? tc_fmt("%s%s %s%s%s %s %s", n_alts ? " | " : "", nl, after_to ? "( " : "", after_to ? chan : "",
                              after_to ? " )?" : "", tail, t->args)
                     : NULL;
        char *b2 = nl && !after_to ? tc_fmt("%s%s %s %s %s", n_alts ? " | " : "", nl, chan, tail, t->args) : NULL;
        free(nl);
        bool ok = a && tc_cat(&alts, a) && (after_to || (b2 && tc_cat(&alts2, b2)));
        free(a), free(b2);
        if (!ok) goto oom;
        n_alts++;
    }
    if (!n_alts) goto done;
    *res = after_to ? tc_fmt("( %s )", alts)
                    : tc_fmt("%s \"%s\" ( %s ) | \"%s\" ( %s )", chan, HARMONY_TO, alts, HARMONY_TO, alts2);
    if (!*res) goto oom;
done:
    free(alts), free(alts2);
    return DJ_OK;
oom:
    free(alts), free(alts2);
    return dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
}

static enum dj_status build(json_t *tools, const struct dj_toolcall_opts *o, bool lazy, char **out) {
    struct dj_json_schema_opts so = o->schema;
    so.root_name = so.rule_prefix = NULL;
    struct tc_ctx c = {0};
    enum dj_status st = gbnf_builder_create(&so, &c.b);
    if (st) return st;
    struct dj_gbnf_builder *b = c.b;
    c.LB = gbnf_builder_punct(b, '{'), c.RB = gbnf_builder_punct(b, '}'), c.COMMA = gbnf_builder_punct(b, ',');
    c.COLON = gbnf_builder_punct(b, ':'), c.LS = gbnf_builder_punct(b, '['), c.RS = gbnf_builder_punct(b, ']');
    const struct tc_family *fam = &families[o->format];
    const struct tc_var *vars = fam->v;
    int n_vars = fam->n;
    if (o->format == DJ_TOOL_FORMAT_JSON) vars = &fam->v[o->parallel ? 1 : 0];
    char *calls = NULL, *root = NULL, *think = NULL;
    const char *xml_str = NULL;
    json_t *empty = NULL;
    st = DJ_ERR_NOMEM;
    if (!c.LB || !c.RB || !c.COMMA || !c.COLON || !c.LS || !c.RS) goto oom;
    c.tools = calloc(json_array_size(tools) + 1, sizeof *c.tools);
    if (!c.tools) goto oom;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *name;
        json_t *params;
        if ((st = tool_at(tools, i, &name, &params))) goto done;
        if (o->choice == DJ_TOOL_NAMED && strcmp(name, o->name)) continue;
        char *san = gbnf_sanitize_name(name), *hint = san ? tc_fmt("%s-args", san) : NULL;
        free(san);
        if (!hint) goto oom;
        const char *args;
        if (vars[0].xml) {
            st = tc_xml_args(b, vars[0].xml, params, name, hint, &xml_str, &args);
        } else {
            if (!params) {
                if (!empty && !(empty = json_pack("{s:s, s:{}, s:b}", "type", "object", "properties", "additionalProperties", 0))) {
                    free(hint);
                    goto oom;
                }
                params = empty;
            }
            st = gbnf_builder_add_schema(b, params, hint, &args);
        }
        free(hint);
        if (st) {
            dj_error_prefix("tools: %s", name);
            goto done;
        }
        c.tools[c.n_tools++] = (struct tc_tool){name, args};
    }
    if (!c.n_tools) {
        st = o->choice == DJ_TOOL_NAMED
                 ? dj_fail(DJ_ERR_INVALID, "tools: tool_choice names '%.100s', which is not among the tools", o->name)
                 : dj_fail(DJ_ERR_INVALID, "tools: no tools");
        goto done;
    }
    const bool harmony = o->format == DJ_TOOL_FORMAT_GPT_OSS;
    size_t n_forms = 0;
    if (harmony) {
        if ((st = harmony_calls(&c, lazy || o->choice == DJ_TOOL_AUTO, &calls))) goto done;
        n_forms = calls != NULL;
    }
    for (int k = 0; k < n_vars && !harmony; k++) {
        char *e;
        if ((st = calls_expr(&c, &vars[k], o, lazy, k, &e))) goto done;
        if (!e) continue;
        char *a = tc_fmt("%s( %s )", n_forms ? " | " : "", e);
        free(e);
        if (!a || !tc_cat(&calls, a)) {
            free(a);
            goto oom;
        }
        free(a);
        n_forms++;
    }
    if (!n_forms) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "tools: no tool name can be written in the %s tool-call syntax (names the parser "
                     "could not read back)", fam->name);
        goto done;
    }
    const char *calls_rule = tc_put(b, "calls", calls);
    calls = NULL;
    if (!calls_rule) goto oom;
    /* harmony's AUTO calls are the text after the trigger (harmony_calls) */
    const char *lead = harmony && o->choice == DJ_TOOL_AUTO ? "\"" HARMONY_TO "\"" : vars[0].lead_x ? vars[0].lead_x : "";
    if (lazy) {
        root = tc_fmt("%s", calls_rule);
    } else {
        if ((st = think_expr(b, o, &think))) goto done;
        if (o->choice == DJ_TOOL_AUTO) {
            const char *pats[TC_MAX_PATS];
            size_t n_pats = 0;
            pats[n_pats++] = vars[0].trigger;
            if (vars[0].forbid) pats[n_pats++] = vars[0].forbid;
            if (o->think_open && *o->think_open && o->think_close && *o->think_close) pats[n_pats++] = o->think_open;
            const char *text;
            if ((st = tc_text_rule(b, "text", pats, n_pats, vars[0].at_start ? "{ \t\r\n" : NULL, NULL, &text))) goto done;
            root = vars[0].at_start ? tc_fmt("%s( %s %s | %s )", think, lead, calls_rule, text)
                                    : tc_fmt("%s%s ( %s %s )?", think, text, lead, calls_rule);
        } else {
            root = tc_fmt("%s%s %s", think, lead, calls_rule);
        }
    }
    if (!tc_put(b, "root", root)) goto oom;
    root = NULL;
    st = gbnf_builder_finish(b, "root", out);
    goto done;
oom:
    st = dj_fail(DJ_ERR_NOMEM, "tools: out of memory");
done:
    free(calls), free(root), free(think), free(c.tools);
    json_decref(empty);
    gbnf_builder_free(b);
    return st;
}

enum dj_status toolcall_grammar_build_value(json_t *tools, const struct dj_toolcall_opts *opts,
                                            struct dj_toolcall_grammar *out) {
    struct dj_toolcall_opts o = opts ? *opts : toolcall_default_opts();
    if (!json_is_array(tools)) return dj_fail(DJ_ERR_INVALID, "tools: not a JSON array");
    if ((unsigned)o.choice > DJ_TOOL_NONE || (unsigned)o.format >= DJ_TOOL_FORMAT_N)
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
    enum dj_status st = DJ_OK;
    if (!(g.trigger = tc_fmt("%s", toolcall_format_trigger(o.format, o.parallel)))) st = DJ_ERR_NOMEM;
    if (!st) st = build(tools, &o, false, &g.gbnf);
    if (!st) st = build(tools, &o, true, &g.lazy_gbnf);
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
