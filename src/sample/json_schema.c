/*
 * json_schema.c — JSON Schema to GBNF (contract and supported subset in
 * json_schema.h).  The techniques are llama.cpp's (common/json-schema-to-
 * grammar.cpp): one rule per schema, shared primitive rules, property lists
 * as chains of optional members, integer ranges by digit-prefix
 * decomposition, regexes rewritten into grammar expressions; the code and
 * several meanings are our own, chosen so that the grammar is exact:
 *
 *   - A schema without `type` is the union over all seven types, each built
 *     from the keywords that apply to it (llama.cpp guesses one type).
 *   - Members follow the order of `properties`, required or not (llama.cpp
 *     puts the required ones first).
 *   - Additional-property keys exclude the declared names with a trie that
 *     also accepts proper prefixes of them (llama.cpp's rejects "a" next to a
 *     declared "ab"); inside the trie only canonical spellings are allowed, so
 *     "\u0061" cannot smuggle in a declared "a".
 *   - Strings accept every JSON escape but only valid surrogate pairs (what a
 *     JSON parser such as jansson accepts), and 0x7F unescaped.
 *   - `pattern` has search semantics (no anchor: any text around it), and the
 *     regex's characters are matched through their JSON encoding.  Patterns
 *     are parsed into a tree (schema_regex.c); one pattern alone is that tree
 *     written as GBNF, and so is one format (each format is a regex there).
 *   - Strings under several constraints (pattern with minLength/maxLength,
 *     allOf patterns, pattern with format, format with lengths) are the exact
 *     intersection: minimal DFAs over code points multiplied together and
 *     with a length counter (schema_dfa.c), one rule per state and counted
 *     length, a self-loop at the end as one counted repetition; past the
 *     size limits an error names the constraints and the pointer.
 *   - allOf, and the siblings of anyOf/oneOf/$ref, are merged into one schema
 *     (merge()); differing patterns or formats are kept as a list under an
 *     internal keyword, and a $ref cycle that consumes nothing (left
 *     recursion) is an error instead of a grammar the parser would reject.
 *
 * Every function that builds text returns a malloc'd string or NULL with the
 * message set (dj_fail); rule names come back owned by the builder.
 */
#include "sample/json_schema.h"
#include "sample/schema_regex.h"
#include "tokenizer/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_REPEAT 1000          /* the GBNF parser's largest count */
#define MAX_BRANCH_PRODUCT 256   /* anyOf x anyOf combinations merge() may make */
#define INF SIZE_MAX

/* Size limits on one grammar (one schema, or every tool of a request), so
 * that converting outside input is bounded in time and memory; past one the
 * schema is refused with the limit and the JSON pointer in the message.
 * Agents' tool schemas are far inside them (Claude Code's and Codex's tools:
 * tens of KB, a few hundred schemas, enums of at most a few hundred values).
 *   MAX_ENUM_VALUES  values of one enum: each is an alternative the grammar
 *                    matcher keeps a stack for where the value starts, and it
 *                    holds at most 4096 (DJ_GMATCH_MAX_STACKS), whitespace
 *                    and sibling alternatives included: an enum of 4097
 *                    strings converted, then failed generation midway.
 *   MAX_SCHEMAS      schemas converted (visit()): properties, items, anyOf
 *                    branches, $ref targets, and the copies that merging
 *                    allOf / anyOf siblings makes, so a small schema cannot
 *                    multiply into a huge grammar (100 properties merged
 *                    into each of 1000 anyOf branches: 23 KB became 22 MB).
 *   MAX_GRAMMAR_TEXT bytes of rule bodies, as MAX_PLAN_TEXT below for one
 *                    string; the largest grammar the tests make is 1.1 MB,
 *                    and writing 4 MB of rules costs about 0.2-0.3 s.
 * (MAX_DFA_STATES and the others below bound each string's automata, and
 * MAX_AUTOMATA_TOTAL all of them together.) */
#define MAX_ENUM_VALUES 1024
#define MAX_SCHEMAS 10000
#define MAX_GRAMMAR_TEXT ((size_t)4 << 20)

/* Internal keywords of merged schemas (merge()): the patterns, or formats,
 * of allOf components that differ, all of which must hold.  Their first byte
 * is not UTF-8, so no parsed schema has them; messages call them by their
 * public names (kw_name). */
#define K_PATTERNS "\xff" "patterns"
#define K_FORMATS "\xff" "formats"

/* ---- growable strings ------------------------------------------------------ */

struct sb {
    char *p;
    size_t n, cap;
    bool oom;
};

static void sb_putn(struct sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(struct sb *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_printf(struct sb *b, const char *fmt, ...) DJ_PRINTF(2, 3);
static void sb_printf(struct sb *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_putn(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_putn(b, big, (size_t)n);
    free(big);
}
/* The string (never NULL for an empty one), or NULL with the message set on OOM. */
static char *sb_take(struct sb *b) {
    if (!b->oom && !b->p) sb_putn(b, "", 0);
    if (b->oom) {
        free(b->p);
        b->p = NULL;
        dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
        return NULL;
    }
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}
static void sb_free(struct sb *b) {
    free(b->p);
    b->p = NULL;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (!p) {
        dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
        return NULL;
    }
    memcpy(p, s, n + 1);
    return p;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Decodes one code point at s[*i] (input is jansson's: valid UTF-8). */
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[*i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (*i + len > n) len = 1;
    if (len == 1) {
        (*i)++;
        return c;
    }
    c &= len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
    for (size_t k = 1; k < len; k++) c = (c << 6) | (u[*i + k] & 0x3F);
    *i += len;
    return c;
}

static void utf8_put(struct sb *b, uint32_t c) {
    char t[4];
    sb_putn(b, t, utf8_encode(c, t));
}

/* ---- literals ---------------------------------------------------------------- */

static void quote_into(struct sb *b, const char *s, size_t n) {
    sb_putn(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') sb_puts(b, "\\\"");
        else if (c == '\\') sb_puts(b, "\\\\");
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F) sb_printf(b, "\\x%02X", c);
        else sb_putn(b, (const char *)&c, 1);
    }
    sb_putn(b, "\"", 1);
}

char *gbnf_quote(const char *s, size_t n) {
    struct sb b = {0};
    quote_into(&b, s, n);
    return sb_take(&b);
}

/* The JSON encoding of one code point inside a string, as json.dumps(ensure_ascii=False). */
static void json_char_into(struct sb *b, uint32_t c) {
    switch (c) {
    case '"': sb_puts(b, "\\\""); return;
    case '\\': sb_puts(b, "\\\\"); return;
    case '\b': sb_puts(b, "\\b"); return;
    case '\f': sb_puts(b, "\\f"); return;
    case '\n': sb_puts(b, "\\n"); return;
    case '\r': sb_puts(b, "\\r"); return;
    case '\t': sb_puts(b, "\\t"); return;
    }
    if (c < 0x20) sb_printf(b, "\\u%04x", c);
    else utf8_put(b, c);
}

static char *json_string_text(const char *s, size_t n) {
    struct sb b = {0};
    sb_putn(&b, "\"", 1);
    for (size_t i = 0; i < n;) json_char_into(&b, utf8_next(s, n, &i));
    sb_putn(&b, "\"", 1);
    return sb_take(&b);
}

char *gbnf_json_string_literal(const char *s, size_t n) {
    char *t = json_string_text(s, n);
    if (!t) return NULL;
    char *q = gbnf_quote(t, strlen(t));
    free(t);
    return q;
}

char *gbnf_sanitize_name(const char *s) {
    struct sb b = {0};
    bool dash = false;
    for (; *s; s++) {
        char c = *s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
            if (dash && b.n) sb_putn(&b, "-", 1);
            dash = false;
            sb_putn(&b, &c, 1);
        } else {
            dash = true;
        }
    }
    if (!b.n) sb_puts(&b, "x");
    return sb_take(&b);
}

/* ---- the rule builder ---------------------------------------------------------- */

struct rule {
    char *name;
    char *body;   /* NULL: reserved, defined later (a $ref target being converted) */
    size_t n_sfx; /* rules name1 .. name<n_sfx - 1> exist (0: none tried yet), see builder_put */
};

struct dj_gbnf_builder {
    struct dj_json_schema_opts opts;
    struct rule *rules;
    size_t n_rules, cap_rules;
    size_t *slot, n_slot; /* names -> rules: rule index + 1, 0 empty (open addressing) */
    char *punct[6]; /* { } [ ] , :  with the whitespace policy */
    const char *prim[16];
    size_t n_text;    /* bytes of all rule bodies (MAX_GRAMMAR_TEXT) */
    size_t n_schemas; /* schemas converted into this builder's rules (MAX_SCHEMAS) */
    size_t n_states;  /* string automaton states and plan nodes made for them (MAX_AUTOMATA_TOTAL) */
};

enum prim_id { P_CHAR, P_STRING, P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT, P_ARRAY, P_WS, P_N };

static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h ^ (h >> 32));
}

/* (A hash index: the string automata make thousands of rules, and a linear
 * search per new rule made converting them quadratic.) */
static struct rule *rule_find(struct dj_gbnf_builder *b, const char *name) {
    if (!b->n_slot) return NULL;
    for (size_t j = name_hash(name) & (b->n_slot - 1); b->slot[j]; j = (j + 1) & (b->n_slot - 1))
        if (!strcmp(b->rules[b->slot[j] - 1].name, name)) return &b->rules[b->slot[j] - 1];
    return NULL;
}

/* Indexes rule i (its name new); false on OOM. */
static bool rule_index(struct dj_gbnf_builder *b, size_t i) {
    if (2 * (i + 1) > b->n_slot) {
        size_t ns = b->n_slot ? 2 * b->n_slot : 64;
        size_t *slot = calloc(ns, sizeof *slot);
        if (!slot) return false;
        for (size_t r = 0; r < i; r++) {
            size_t j = name_hash(b->rules[r].name) & (ns - 1);
            while (slot[j]) j = (j + 1) & (ns - 1);
            slot[j] = r + 1;
        }
        free(b->slot);
        b->slot = slot, b->n_slot = ns;
    }
    size_t j = name_hash(b->rules[i].name) & (b->n_slot - 1);
    while (b->slot[j]) j = (j + 1) & (b->n_slot - 1);
    b->slot[j] = i + 1;
    return true;
}

/* Adds a rule (body NULL: reserved) under name or the first free name<k>; a
 * rule of that name with the same body is reused.  The numbered names taken
 * are remembered on the rule `name` (n_sfx), so the search for a free one
 * starts past them: an object's tail rules all ask for "<hint>-rest", and
 * trying rest, rest1, rest2, ... every time made 4000 optional properties
 * cost 1.4 s (quadratic).  A numbered rule skipped so is not reused when its
 * body comes again (the grammar then has two equal rules: the same language). */
static const char *builder_put(struct dj_gbnf_builder *b, const char *name, const char *body) {
    struct sb nm = {0};
    size_t base = SIZE_MAX; /* index of the rule `name`, when it exists */
    for (size_t k = 0;; k = k ? k + 1 : b->rules[base].n_sfx ? b->rules[base].n_sfx : 1) {
        nm.n = 0;
        if (k) sb_printf(&nm, "%s%zu", name, k);
        else sb_puts(&nm, name);
        if (nm.oom) break;
        struct rule *r = rule_find(b, nm.p);
        if (!r) {
            if (k) b->rules[base].n_sfx = k + 1; /* name1 .. name<k> will exist */
            break;
        }
        if (body && r->body && !strcmp(r->body, body)) {
            sb_free(&nm);
            return r->name;
        }
        if (!k) base = (size_t)(r - b->rules);
    }
    char *n = sb_take(&nm);
    if (!n) return NULL;
    char *bd = NULL;
    if (body && !(bd = xstrdup(body))) {
        free(n);
        return NULL;
    }
    if (b->n_rules == b->cap_rules) {
        size_t cap = b->cap_rules ? 2 * b->cap_rules : 32;
        struct rule *r = realloc(b->rules, cap * sizeof *r);
        if (!r) {
            free(n), free(bd);
            dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
            return NULL;
        }
        b->rules = r, b->cap_rules = cap;
    }
    b->rules[b->n_rules] = (struct rule){n, bd, 0};
    if (!rule_index(b, b->n_rules)) {
        free(n), free(bd);
        dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
        return NULL;
    }
    b->n_rules++;
    b->n_text += bd ? strlen(bd) : 0;
    return n;
}

const char *gbnf_builder_add_rule(struct dj_gbnf_builder *b, const char *name, const char *body) {
    return builder_put(b, name, body);
}

bool gbnf_builder_define(struct dj_gbnf_builder *b, const char *name, const char *body) {
    struct rule *r = rule_find(b, name);
    char *bd = xstrdup(body);
    if (!r || !bd) {
        free(bd);
        return false;
    }
    b->n_text -= r->body ? strlen(r->body) : 0;
    b->n_text += strlen(bd);
    free(r->body);
    r->body = bd;
    return true;
}

static const char *prim(struct dj_gbnf_builder *b, enum prim_id id);

enum dj_status gbnf_builder_create(const struct dj_json_schema_opts *opts, struct dj_gbnf_builder **out) {
    struct dj_gbnf_builder *b = calloc(1, sizeof *b);
    if (!b) return dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
    b->opts = opts ? *opts : json_schema_default_opts();
    if ((unsigned)b->opts.whitespace > DJ_JSON_WS_FLEXIBLE) {
        unsigned w = (unsigned)b->opts.whitespace;
        free(b);
        return dj_fail(DJ_ERR_INVALID, "json schema: unknown whitespace mode %u", w);
    }
    static const char chars[6] = {'{', '}', '[', ']', ',', ':'};
    for (int i = 0; i < 6; i++) {
        struct sb s = {0};
        bool flex = b->opts.whitespace == DJ_JSON_WS_FLEXIBLE;
        bool spaced = b->opts.whitespace == DJ_JSON_WS_SPACED && (chars[i] == ',' || chars[i] == ':');
        const char *ws = NULL;
        if (flex && !(ws = prim(b, P_WS))) {
            gbnf_builder_free(b);
            return DJ_ERR_NOMEM;
        }
        /* One ws between any two tokens: after an opener, before a closer, around , and :. */
        if (flex && (chars[i] == '}' || chars[i] == ']' || chars[i] == ',' || chars[i] == ':')) sb_printf(&s, "%s ", ws);
        sb_printf(&s, "\"%c%s\"", chars[i], spaced ? " " : "");
        if (flex && (chars[i] == '{' || chars[i] == '[' || chars[i] == ',' || chars[i] == ':')) sb_printf(&s, " %s", ws);
        if (!(b->punct[i] = sb_take(&s))) {
            gbnf_builder_free(b);
            return DJ_ERR_NOMEM;
        }
    }
    *out = b;
    return DJ_OK;
}

void gbnf_builder_free(struct dj_gbnf_builder *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_rules; i++) free(b->rules[i].name), free(b->rules[i].body);
    free(b->rules), free(b->slot);
    for (int i = 0; i < 6; i++) free(b->punct[i]);
    free(b);
}

const char *gbnf_builder_punct(struct dj_gbnf_builder *b, char c) {
    const char *p = strchr("{}[],:", c);
    return c && p ? b->punct[p - "{}[],:"] : NULL;
}

enum dj_status gbnf_builder_finish(struct dj_gbnf_builder *b, const char *root, char **gbnf_out) {
    struct sb s = {0};
    struct rule *r = rule_find(b, root);
    if (!r) return dj_fail(DJ_ERR_INVALID, "json schema: no rule '%s'", root);
    for (size_t i = 0; i < b->n_rules; i++)
        if (!b->rules[i].body) return dj_fail(DJ_ERR_INVALID, "json schema: rule '%s' never defined", b->rules[i].name);
    if (b->n_text > MAX_GRAMMAR_TEXT)
        return dj_fail(DJ_ERR_INVALID, "json schema: the grammar would be over the limit of %zu MB", MAX_GRAMMAR_TEXT >> 20);
    sb_printf(&s, "%s ::= %s\n", r->name, r->body);
    for (size_t i = 0; i < b->n_rules; i++)
        if (&b->rules[i] != r) sb_printf(&s, "%s ::= %s\n", b->rules[i].name, b->rules[i].body);
    char *t = sb_take(&s);
    if (!t) return DJ_ERR_NOMEM;
    *gbnf_out = t;
    return DJ_OK;
}

/* ---- primitives -------------------------------------------------------------------- */

#define HEX "[0-9a-fA-F]"

static const char *prim(struct dj_gbnf_builder *b, enum prim_id id) {
    if (b->prim[id]) return b->prim[id];
    struct sb s = {0};
    const char *name = NULL;
    switch (id) {
    case P_WS: name = "ws", sb_puts(&s, "[ \\t\\n]{0,20}"); break;
    case P_CHAR:
        /* Any JSON string character; \u escapes only as valid UTF-16 (a lone
         * surrogate is rejected by jansson and most parsers). */
        name = "char";
        sb_puts(&s, "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] " HEX "{3} | [dD] [0-7] " HEX
                    "{2} | [dD] [89abAB] " HEX "{2} \"\\\\u\" [dD] [c-fC-F] " HEX "{2} ) )");
        break;
    case P_STRING: {
        const char *c = prim(b, P_CHAR);
        if (!c) return NULL;
        name = "string", sb_printf(&s, "\"\\\"\" %s* \"\\\"\"", c);
        break;
    }
    case P_NUMBER:
        name = "number", sb_puts(&s, "\"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?");
        break;
    case P_INTEGER: name = "integer", sb_puts(&s, "\"-\"? ( \"0\" | [1-9] [0-9]* )"); break;
    case P_BOOLEAN: name = "boolean", sb_puts(&s, "\"true\" | \"false\""); break;
    case P_NULL: name = "null", sb_puts(&s, "\"null\""); break;
    case P_VALUE: {
        /* value, object and array refer to each other: reserve value first. */
        const char *v = builder_put(b, "value", NULL);
        if (!v) return NULL;
        b->prim[P_VALUE] = v;
        const char *o = prim(b, P_OBJECT), *a = prim(b, P_ARRAY), *st = prim(b, P_STRING), *nu = prim(b, P_NUMBER),
                   *bo = prim(b, P_BOOLEAN), *nl = prim(b, P_NULL);
        if (!o || !a || !st || !nu || !bo || !nl) return NULL;
        sb_printf(&s, "%s | %s | %s | %s | %s | %s", o, a, st, nu, bo, nl);
        char *body = sb_take(&s);
        bool ok = body && gbnf_builder_define(b, v, body);
        free(body);
        return ok ? v : NULL;
    }
    case P_OBJECT: {
        const char *v = prim(b, P_VALUE), *st = prim(b, P_STRING);
        if (!v || !st) return NULL;
        const char *W = b->opts.whitespace == DJ_JSON_WS_FLEXIBLE ? prim(b, P_WS) : "";
        if (!W) return NULL;
        name = "object";
        sb_printf(&s, "\"{\" %s ( %s %s %s ( %s %s %s %s )* %s )? \"}\"", W, st, b->punct[5], v, b->punct[4], st,
                  b->punct[5], v, W);
        break;
    }
    case P_ARRAY: {
        const char *v = prim(b, P_VALUE);
        if (!v) return NULL;
        const char *W = b->opts.whitespace == DJ_JSON_WS_FLEXIBLE ? prim(b, P_WS) : "";
        if (!W) return NULL;
        name = "array", sb_printf(&s, "\"[\" %s ( %s ( %s %s )* %s )? \"]\"", W, v, b->punct[4], v, W);
        break;
    }
    case P_N: break;
    }
    char *body = sb_take(&s);
    if (!body) return NULL;
    const char *r = builder_put(b, name, body);
    free(body);
    b->prim[id] = r;
    return r;
}

/* The whitespace between an opener and what follows (flexible mode only). */
static const char *ws_or_empty(struct dj_gbnf_builder *b) {
    return b->opts.whitespace == DJ_JSON_WS_FLEXIBLE ? prim(b, P_WS) : "";
}

/* ---- repetition with counts past the parser's 1000 ------------------------------------- */

static void quant_into(struct sb *s, const char *item, size_t m, size_t n) {
    if (m == 0 && n == 1) sb_printf(s, "%s?", item);
    else if (m == 0 && n == INF) sb_printf(s, "%s*", item);
    else if (m == 1 && n == INF) sb_printf(s, "%s+", item);
    else if (m == 1 && n == 1) sb_puts(s, item);
    else if (m == n) sb_printf(s, "%s{%zu}", item, m);
    else if (n == INF) sb_printf(s, "%s{%zu,}", item, m);
    else sb_printf(s, "%s{%zu,%zu}", item, m, n);
}

/* item{m,n} (n INF: unbounded) for any counts: past 1000, chunks of 1000 as
 * their own rule.  item: one GBNF primary (a name, literal, class or group).
 * m == n == 0 gives "" (the caller must not write an empty group). */
static bool rep_into(struct dj_gbnf_builder *b, struct sb *s, const char *item, size_t m, size_t n, int depth) {
    if (depth > 8) return false;
    if (m == 0 && n == 0) return true;
    if (m <= MAX_REPEAT && (n == INF || n <= MAX_REPEAT)) {
        quant_into(s, item, m, n);
        return true;
    }
    struct sb cb = {0};
    sb_printf(&cb, "%s{%d}", item, MAX_REPEAT);
    char *chunk_body = sb_take(&cb);
    if (!chunk_body) return false;
    const char *chunk = builder_put(b, "rep", chunk_body);
    free(chunk_body);
    if (!chunk) return false;
    if (n == INF) { /* m > 1000 */
        if (!rep_into(b, s, item, m, m, depth + 1)) return false;
        sb_printf(s, " %s*", item);
        return true;
    }
    if (m == n) { /* m > 1000 */
        if (!rep_into(b, s, chunk, m / MAX_REPEAT, m / MAX_REPEAT, depth + 1)) return false;
        if (m % MAX_REPEAT) sb_puts(s, " "), quant_into(s, item, m % MAX_REPEAT, m % MAX_REPEAT);
        return true;
    }
    if (m) {
        if (!rep_into(b, s, item, m, m, depth + 1)) return false;
        sb_puts(s, " ");
    }
    /* item{0,k}, k > 1000: lengths 0..1000a-1 as chunk{0,a-1} item{0,999}, the
     * rest as chunk{a} item{0,r}: one way to split each length. */
    size_t k = n - m, a = k / MAX_REPEAT, r = k % MAX_REPEAT;
    sb_puts(s, "( ");
    if (a > 1) {
        if (!rep_into(b, s, chunk, 0, a - 1, depth + 1)) return false;
        sb_puts(s, " ");
    }
    quant_into(s, item, 0, MAX_REPEAT - 1);
    sb_puts(s, " | ");
    if (!rep_into(b, s, chunk, a, a, depth + 1)) return false;
    if (r) sb_puts(s, " "), quant_into(s, item, 0, r);
    sb_puts(s, " )");
    return true;
}

/* ---- code point sets as GBNF (struct cpset: schema_regex.h) ----------------------------------- */

static void class_cp_into(struct sb *b, uint32_t c) {
    if (c == ']' || c == '\\' || c == '[') sb_printf(b, "\\%c", (char)c);
    else if (c < 0x20 || c == 0x7F || c == '-' || c == '^') sb_printf(b, "\\x%02X", c);
    else if (c < 0x80) sb_printf(b, "%c", (char)c);
    else if (c < 0x10000) sb_printf(b, "\\u%04X", c);
    else sb_printf(b, "\\U%08X", c);
}

/* The grammar for "one JSON string character whose decoded value is in s":
 * raw characters where JSON allows them, the canonical escape otherwise
 * (\" \\ \b \f \n \r \t, \u00xx for the other controls).  Surrogates never
 * match.  NULL for an empty set (after removing surrogates). */
static char *set_json_expr(const struct cpset *s) {
    struct sb b = {0}, raw = {0};
    size_t n_alt = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        uint32_t lo = s->r[i], hi = s->r[i + 1];
        /* cut out controls, '"', '\\', surrogates */
        const uint32_t cut[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
        uint32_t a = lo;
        while (a <= hi) {
            uint32_t e = hi;
            bool skip = false;
            for (size_t k = 0; k < 4; k++) {
                if (a >= cut[k][0] && a <= cut[k][1]) {
                    a = cut[k][1] + 1;
                    skip = true;
                    break;
                }
                if (cut[k][0] > a && cut[k][0] - 1 < e) e = cut[k][0] - 1;
            }
            if (skip) continue;
            class_cp_into(&raw, a);
            if (e > a) sb_puts(&raw, "-"), class_cp_into(&raw, e);
            if (e == 0x10FFFF) break;
            a = e + 1;
        }
    }
    if (raw.n && s->n == 2 && s->r[0] == s->r[1]) { /* one character: a literal reads better */
        struct sb one = {0};
        utf8_put(&one, s->r[0]);
        if (one.p) quote_into(&b, one.p, one.n);
        b.oom |= one.oom;
        sb_free(&one);
        n_alt++;
    } else if (raw.n) sb_printf(&b, "[%s]", raw.p), n_alt++;
    sb_free(&raw);
    if (cpset_has(s, '"')) sb_printf(&b, "%s\"\\\\\\\"\"", n_alt++ ? " | " : "");
    if (cpset_has(s, '\\')) sb_printf(&b, "%s\"\\\\\\\\\"", n_alt++ ? " | " : "");
    struct sb sh = {0}, u0 = {0}, u1 = {0};
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!cpset_has(s, c)) continue;
        const char *shortc = c == 8 ? "b" : c == 12 ? "f" : c == 10 ? "n" : c == 13 ? "r" : c == 9 ? "t" : NULL;
        if (shortc) sb_puts(&sh, shortc);
        else sb_printf(c < 16 ? &u0 : &u1, "%x", c & 15);
    }
    if (sh.n) sb_printf(&b, "%s\"\\\\\" [%s]", n_alt++ ? " | " : "", sh.p);
    if (u0.n) sb_printf(&b, "%s\"\\\\u000\" [%s]", n_alt++ ? " | " : "", u0.p);
    if (u1.n) sb_printf(&b, "%s\"\\\\u001\" [%s]", n_alt++ ? " | " : "", u1.p);
    sb_free(&sh), sb_free(&u0), sb_free(&u1);
    if (s->oom) b.oom = true;
    if (!n_alt) {
        sb_free(&b);
        return NULL;
    }
    char *e = sb_take(&b);
    if (e && n_alt > 1) {
        struct sb w = {0};
        sb_printf(&w, "( %s )", e);
        free(e);
        e = sb_take(&w);
    }
    return e;
}

/* ---- the converter ------------------------------------------------------------------------- */

struct refent {
    char *ref;
    const char *rule;
};

struct conv {
    struct dj_gbnf_builder *b;
    json_t *doc;      /* refs resolve against it */
    struct sb path;   /* JSON pointer of the schema being converted, for messages */
    struct refent *refs;
    size_t n_refs, cap_refs;
    const char **open; /* refs entered since the last token the grammar consumes */
    size_t n_open, cap_open, guard; /* open[guard..n_open) are the unguarded ones */
    int depth;
    enum dj_status st;
};

static const char *cpath(struct conv *c) { return c->path.n ? c->path.p : "/"; }

static void *conv_fail(struct conv *c, enum dj_status st, const char *fmt, ...) DJ_PRINTF(3, 4);
static void *conv_fail(struct conv *c, enum dj_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = dj_fail(st, "json schema: %s at %s", msg, cpath(c));
    return NULL;
}

static void *conv_oom(struct conv *c) {
    c->st = dj_fail(DJ_ERR_NOMEM, "json schema: out of memory");
    return NULL;
}

/* Appends "/seg" (JSON pointer escaped); returns the old length for path_pop. */
static size_t path_push(struct conv *c, const char *seg) {
    size_t old = c->path.n;
    sb_putn(&c->path, "/", 1);
    for (const char *p = seg; *p; p++) {
        if (*p == '~') sb_puts(&c->path, "~0");
        else if (*p == '/') sb_puts(&c->path, "~1");
        else sb_putn(&c->path, p, 1);
    }
    return old;
}
static size_t path_push_idx(struct conv *c, const char *seg, size_t i) {
    char t[32];
    snprintf(t, sizeof t, "%zu", i);
    size_t old = path_push(c, seg);
    path_push(c, t);
    return old;
}
static void path_pop(struct conv *c, size_t old) {
    c->path.n = old;
    if (c->path.p) c->path.p[old] = 0;
}

static char *hint_join(const char *a, const char *b) {
    char *s = gbnf_sanitize_name(b);
    if (!s) return NULL;
    struct sb h = {0};
    sb_printf(&h, "%s-%s", a, s);
    free(s);
    return sb_take(&h);
}

/* ---- keywords ---- */

enum kw_kind { KW_ANNOT, KW_OK };
static const struct {
    const char *name;
    enum kw_kind kind;
} keywords[] = {
    {"description", KW_ANNOT}, {"title", KW_ANNOT}, {"examples", KW_ANNOT}, {"default", KW_ANNOT},
    {"$schema", KW_ANNOT}, {"$id", KW_ANNOT}, {"$comment", KW_ANNOT}, {"deprecated", KW_ANNOT},
    {"readOnly", KW_ANNOT}, {"writeOnly", KW_ANNOT}, {"contentEncoding", KW_ANNOT}, {"contentMediaType", KW_ANNOT},
    {"$defs", KW_ANNOT}, {"definitions", KW_ANNOT},
    {"type", KW_OK}, {"enum", KW_OK}, {"const", KW_OK}, {"properties", KW_OK}, {"required", KW_OK},
    {"additionalProperties", KW_OK}, {"items", KW_OK}, {"prefixItems", KW_OK}, {"additionalItems", KW_OK},
    {"minItems", KW_OK}, {"maxItems", KW_OK}, {"minLength", KW_OK}, {"maxLength", KW_OK}, {"pattern", KW_OK},
    {"format", KW_OK}, {"minimum", KW_OK}, {"maximum", KW_OK}, {"exclusiveMinimum", KW_OK},
    {"exclusiveMaximum", KW_OK}, {"anyOf", KW_OK}, {"oneOf", KW_OK}, {"allOf", KW_OK}, {"$ref", KW_OK},
    {"uniqueItems", KW_OK}, {"minProperties", KW_OK}, {"maxProperties", KW_OK}, {"propertyNames", KW_OK}, {K_PATTERNS, KW_OK},
    {K_FORMATS, KW_OK},
};

static const char *kw_name(const char *k) {
    return !strcmp(k, K_PATTERNS) ? "pattern" : !strcmp(k, K_FORMATS) ? "format" : k;
}

static int kw_lookup(const char *k) {
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (!strcmp(keywords[i].name, k)) return (int)keywords[i].kind;
    return -1;
}

/* Every key known, and the shapes the converter relies on (so that later code
 * can use json_* getters without checking). */
static bool check_keywords(struct conv *c, json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        int kind = kw_lookup(k);
        if (kind < 0 || (!strcmp(k, "uniqueItems") && json_is_true(v))) {
            char kq[128];
            snprintf(kq, sizeof kq, "%s", k);
            conv_fail(c, DJ_ERR_INVALID, "unsupported keyword '%s'%s", kq, kind < 0 ? "" : " (true)");
            return false;
        }
        bool ok = true;
        const char *want = NULL;
        if (!strcmp(k, "properties") || !strcmp(k, "$defs") || !strcmp(k, "definitions"))
            ok = json_is_object(v), want = "an object";
        else if (!strcmp(k, "required")) {
            ok = json_is_array(v), want = "an array of strings";
            for (size_t i = 0; ok && i < json_array_size(v); i++) ok = json_is_string(json_array_get(v, i));
        } else if (!strcmp(k, "enum")) {
            ok = json_is_array(v), want = "an array";
            if (ok && json_array_size(v) > MAX_ENUM_VALUES) {
                conv_fail(c, DJ_ERR_INVALID, "'enum' has %zu values, over the limit of %d", json_array_size(v),
                          MAX_ENUM_VALUES);
                return false;
            }
        }
        else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf"))
            ok = json_is_array(v) && json_array_size(v) > 0, want = "a non-empty array";
        else if (!strcmp(k, "prefixItems")) ok = json_is_array(v), want = "an array";
        else if (!strcmp(k, "items")) ok = json_is_array(v) || json_is_object(v) || json_is_boolean(v), want = "a schema";
        else if (!strcmp(k, "additionalProperties") || !strcmp(k, "additionalItems"))
            ok = json_is_object(v) || json_is_boolean(v), want = "a schema";
        else if (!strcmp(k, "minItems") || !strcmp(k, "maxItems") || !strcmp(k, "minLength") ||
                 !strcmp(k, "maxLength") || !strcmp(k, "minProperties") || !strcmp(k, "maxProperties"))
            ok = json_is_integer(v) && json_integer_value(v) >= 0, want = "a non-negative integer";
        else if (!strcmp(k, "pattern") || !strcmp(k, "format") || !strcmp(k, "$ref"))
            ok = json_is_string(v), want = "a string";
        else if (!strcmp(k, K_PATTERNS) || !strcmp(k, K_FORMATS)) {
            ok = json_is_array(v), want = "an array of strings";
            for (size_t i = 0; ok && i < json_array_size(v); i++) ok = json_is_string(json_array_get(v, i));
        }
        else if (!strcmp(k, "minimum") || !strcmp(k, "maximum")) ok = json_is_number(v), want = "a number";
        else if (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum"))
            ok = json_is_number(v) || json_is_boolean(v), want = "a number";
        else if (!strcmp(k, "uniqueItems")) ok = json_is_boolean(v), want = "a boolean";
        else if (!strcmp(k, "propertyNames")) ok = json_is_object(v) || json_is_boolean(v), want = "a schema";
        else if (!strcmp(k, "type")) {
            ok = json_is_string(v) || (json_is_array(v) && json_array_size(v) > 0), want = "a type name or an array of them";
            static const char *types[] = {"null", "boolean", "object", "array", "number", "integer", "string"};
            for (size_t i = 0; ok && i < (json_is_array(v) ? json_array_size(v) : 1); i++) {
                json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
                ok = false;
                for (size_t j = 0; json_is_string(t) && j < 7; j++) ok |= !strcmp(json_string_value(t), types[j]);
            }
        }
        if (!ok) {
            conv_fail(c, DJ_ERR_INVALID, "'%s' must be %s", kw_name(k), want);
            return false;
        }
    }
    return true;
}

/* Constraint keywords other than those listed (NULL-terminated) present in s. */
static const char *other_constraint(json_t *s, const char *const *allowed) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (kw_lookup(k) != KW_OK) continue;
        if (!strcmp(k, "uniqueItems")) continue; /* only false gets here */
        bool ok = false;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, k);
        if (!ok) return k;
    }
    return NULL;
}

/* ---- types ---- */

enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_INTEGER = 32, T_STRING = 64, T_ALL = 127 };
static const char *const type_names[] = {"null", "boolean", "object", "array", "number", "integer", "string"};

static unsigned type_bit(const char *t) {
    for (unsigned i = 0; i < 7; i++)
        if (!strcmp(t, type_names[i])) return 1u << i;
    return 0;
}

static unsigned type_mask(json_t *s) {
    json_t *t = json_object_get(s, "type");
    if (!t) return T_ALL;
    if (json_is_string(t)) return type_bit(json_string_value(t));
    unsigned m = 0;
    for (size_t i = 0; i < json_array_size(t); i++) m |= type_bit(json_string_value(json_array_get(t, i)));
    return m;
}

static bool value_has_type(json_t *v, unsigned mask) {
    switch (json_typeof(v)) {
    case JSON_NULL: return mask & T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return mask & T_BOOLEAN;
    case JSON_OBJECT: return mask & T_OBJECT;
    case JSON_ARRAY: return mask & T_ARRAY;
    case JSON_STRING: return mask & T_STRING;
    case JSON_INTEGER: return mask & (T_NUMBER | T_INTEGER);
    case JSON_REAL: {
        double d = json_real_value(v);
        return (mask & T_NUMBER) || ((mask & T_INTEGER) && d == floor(d));
    }
    }
    return false;
}

/* ---- literal JSON values (enum, const) ---- */

static bool value_literal_into(struct conv *c, struct sb *s, json_t *v, int depth) {
    struct dj_gbnf_builder *b = c->b;
    if (depth > MAX_DEPTH) {
        conv_fail(c, DJ_ERR_INVALID, "enum/const value nested deeper than %d", MAX_DEPTH);
        return false;
    }
    const char *W = ws_or_empty(b);
    if (!W) return conv_oom(c), false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (!json_object_size(v)) {
            sb_printf(s, "\"{\" %s \"}\"", W);
            return true;
        }
        sb_puts(s, b->punct[0]);
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!first) sb_printf(s, " %s", b->punct[4]);
            first = false;
            char *kl = gbnf_json_string_literal(k, strlen(k));
            if (!kl) return conv_oom(c), false;
            sb_printf(s, " %s %s ", kl, b->punct[5]);
            free(kl);
            if (!value_literal_into(c, s, x, depth + 1)) return false;
        }
        sb_printf(s, " %s", b->punct[1]);
        return true;
    }
    case JSON_ARRAY: {
        if (!json_array_size(v)) {
            sb_printf(s, "\"[\" %s \"]\"", W);
            return true;
        }
        sb_puts(s, b->punct[2]);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_printf(s, " %s", b->punct[4]);
            sb_puts(s, " ");
            if (!value_literal_into(c, s, json_array_get(v, i), depth + 1)) return false;
        }
        sb_printf(s, " %s", b->punct[3]);
        return true;
    }
    case JSON_STRING: {
        char *l = gbnf_json_string_literal(json_string_value(v), json_string_length(v));
        if (!l) return conv_oom(c), false;
        sb_puts(s, l);
        free(l);
        return true;
    }
    default: {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        if (!t) return conv_oom(c), false;
        sb_printf(s, "\"%s\"", t);
        free(t);
        return true;
    }
    }
}

/* A hash of v consistent with json_equal (equal values, equal hashes: the
 * type, then the content; object members in any order; 0.0 and -0.0 alike).
 * Below MAX_DEPTH levels only the type counts, which stays consistent. */
static uint64_t value_hash(json_t *v, int depth) {
    uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(json_typeof(v) + 1);
    if (depth > MAX_DEPTH) return h;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        uint64_t sum = 0;
        json_object_foreach(v, k, x) sum += (name_hash(k) * 0xBF58476D1CE4E5B9ull) ^ value_hash(x, depth + 1);
        return h ^ sum;
    }
    case JSON_ARRAY:
        for (size_t i = 0; i < json_array_size(v); i++) h = (h ^ value_hash(json_array_get(v, i), depth + 1)) * 0x100000001B3ull;
        return h;
    case JSON_STRING: {
        const unsigned char *p = (const unsigned char *)json_string_value(v);
        for (size_t i = 0; i < json_string_length(v); i++) h = (h ^ p[i]) * 0x100000001B3ull;
        return h;
    }
    case JSON_INTEGER: return h ^ (uint64_t)json_integer_value(v) * 0x94D049BB133111EBull;
    case JSON_REAL: {
        double d = json_real_value(v);
        if (d == 0) d = 0; /* -0.0 equals 0.0 */
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return h ^ bits * 0x94D049BB133111EBull;
    }
    default: return h;
    }
}

/* ---- integer ranges ---- */

static void digits_into(struct sb *s, char lo, char hi) {
    if (lo == '0' && hi == '9') sb_puts(s, "[0-9]");
    else if (lo == hi) sb_printf(s, "\"%c\"", lo);
    else sb_printf(s, "[%c-%c]", lo, hi);
}

static bool all_of(const char *s, size_t n, char d) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != d) return false;
    return true;
}

/* Digit strings of length n between a and b inclusive (a <= b, same length). */
static void same_len_into(struct sb *s, const char *a, const char *b, size_t n) {
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    if (i) sb_printf(s, "\"%.*s\"", (int)i, a);
    if (i == n) return;
    if (i) sb_puts(s, " ");
    size_t rest = n - i - 1;
    if (!rest) {
        digits_into(s, a[i], b[i]);
        return;
    }
    bool low_full = all_of(a + i + 1, rest, '0'), high_full = all_of(b + i + 1, rest, '9');
    char mid_lo = low_full ? a[i] : (char)(a[i] + 1), mid_hi = high_full ? b[i] : (char)(b[i] - 1);
    size_t n_alt = 0;
    sb_puts(s, "( ");
    if (!low_full) {
        sb_printf(s, "\"%c\" ", a[i]);
        char nines[24];
        memset(nines, '9', rest);
        sb_puts(s, "( ");
        same_len_into(s, a + i + 1, nines, rest);
        sb_puts(s, " )");
        n_alt++;
    }
    if (mid_lo <= mid_hi) {
        if (n_alt++) sb_puts(s, " | ");
        digits_into(s, mid_lo, mid_hi);
        sb_puts(s, " ");
        quant_into(s, "[0-9]", rest, rest);
    }
    if (!high_full) {
        if (n_alt++) sb_puts(s, " | ");
        sb_printf(s, "\"%c\" ", b[i]);
        char zeros[24];
        memset(zeros, '0', rest);
        sb_puts(s, "( ");
        same_len_into(s, zeros, b + i + 1, rest);
        sb_puts(s, " )");
    }
    sb_puts(s, " )");
}

/* Decimal numbers (no leading zeros) in [lo, hi]; hi == UINT64_MAX with
 * unbounded: no upper bound. */
static void uint_range_into(struct sb *s, uint64_t lo, uint64_t hi, bool unbounded) {
    char a[24], bb[24];
    int la = snprintf(a, sizeof a, "%llu", (unsigned long long)lo);
    int lb = unbounded ? la : snprintf(bb, sizeof bb, "%llu", (unsigned long long)hi);
    sb_puts(s, "( ");
    for (int len = la; len <= lb; len++) {
        char from[24], to[24];
        if (len == la) memcpy(from, a, (size_t)len);
        else from[0] = '1', memset(from + 1, '0', (size_t)len - 1);
        if (len == lb && !unbounded) memcpy(to, bb, (size_t)len);
        else memset(to, '9', (size_t)len);
        if (len > la) sb_puts(s, " | ");
        same_len_into(s, from, to, (size_t)len);
    }
    if (unbounded) {
        sb_puts(s, " | [1-9] ");
        quant_into(s, "[0-9]", (size_t)la, INF);
    }
    sb_puts(s, " )");
}

/* Integers in [lo, hi] (has_lo / has_hi false: unbounded on that side). */
static void int_range_into(struct sb *s, int64_t lo, bool has_lo, int64_t hi, bool has_hi) {
    /* magnitude of a negative int64 without overflow */
#define NEG_MAG(x) ((uint64_t)(-((x) + 1)) + 1)
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    size_t n = 0;
    sb_puts(s, "( ");
    if (neg) {
        /* "-" then magnitudes in [max(1, -hi), -lo] */
        uint64_t mlo = has_hi && hi < 0 ? NEG_MAG(hi) : 1;
        sb_puts(s, "\"-\" ");
        if (has_lo) uint_range_into(s, mlo, NEG_MAG(lo), false);
        else uint_range_into(s, mlo, UINT64_MAX, true);
        n++;
    }
    if (pos) {
        if (n) sb_puts(s, " | ");
        uint64_t plo = has_lo && lo > 0 ? (uint64_t)lo : 0;
        if (has_hi) uint_range_into(s, plo, (uint64_t)hi, false);
        else uint_range_into(s, plo, UINT64_MAX, true);
    }
    sb_puts(s, " )");
#undef NEG_MAG
}

/* Integer bounds from minimum / maximum / exclusive* (draft 6+ numbers, or
 * draft-4 booleans that make minimum / maximum exclusive). */
static bool int_bounds(struct conv *c, json_t *s, int64_t *lo, bool *has_lo, int64_t *hi, bool *has_hi) {
    *has_lo = *has_hi = false;
    *lo = *hi = 0;
    static const char *const names[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, names[i]);
        if (!v || json_is_boolean(v)) continue;
        bool lower = i < 2, excl = (i & 1) || json_is_true(json_object_get(s, names[i + 1]));
        int64_t bound;
        if (json_is_integer(v)) {
            bound = json_integer_value(v);
            if (excl && (lower ? bound == INT64_MAX : bound == INT64_MIN)) {
                conv_fail(c, DJ_ERR_INVALID, "no integer lies beyond '%s'", names[i]);
                return false;
            }
            if (excl) bound += lower ? 1 : -1;
        } else {
            double d = json_real_value(v);
            if (!(d > -9.2e18 && d < 9.2e18)) {
                conv_fail(c, DJ_ERR_INVALID, "'%s' %g is out of the supported integer range", names[i], d);
                return false;
            }
            bound = (int64_t)(lower ? (excl ? floor(d) + 1 : ceil(d)) : (excl ? ceil(d) - 1 : floor(d)));
        }
        if (lower && (!*has_lo || bound > *lo)) *lo = bound, *has_lo = true;
        if (!lower && (!*has_hi || bound < *hi)) *hi = bound, *has_hi = true;
    }
    if (*has_lo && *has_hi && *lo > *hi) {
        conv_fail(c, DJ_ERR_INVALID, "no integer lies between the minimum %lld and the maximum %lld", (long long)*lo,
                  (long long)*hi);
        return false;
    }
    return true;
}

/* A bound of a number range: integral, inclusive or not. */
struct nbound {
    bool has, excl;
    int64_t v;
};

/* Bounds of type "number" (integral values only: a fractional bound would
 * need digit-by-digit fraction comparisons, not done). */
static bool num_bounds(struct conv *c, json_t *s, struct nbound *lo, struct nbound *hi) {
    *lo = *hi = (struct nbound){false, false, 0};
    static const char *const names[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, names[i]);
        if (!v || json_is_boolean(v)) continue;
        bool lower = i < 2, excl = (i & 1) || json_is_true(json_object_get(s, names[i + 1]));
        double d = json_number_value(v);
        if (!(d > -9.2e18 && d < 9.2e18) || (json_is_integer(v) && json_integer_value(v) == INT64_MIN)) {
            conv_fail(c, DJ_ERR_INVALID, "'%s' %g is out of the supported range", names[i], d);
            return false;
        }
        if (json_is_real(v) && d != floor(d)) {
            conv_fail(c, DJ_ERR_INVALID, "'%s' %g on type 'number': only integral bounds are supported", names[i], d);
            return false;
        }
        int64_t b = json_is_integer(v) ? json_integer_value(v) : (int64_t)d;
        struct nbound *t = lower ? lo : hi;
        bool tighter = !t->has || (lower ? b > t->v : b < t->v) || (b == t->v && excl);
        if (tighter) *t = (struct nbound){true, excl, b};
    }
    return true;
}

/* Unsigned decimals M(.F)? with value y in (ylo, yhi) (ylo.has always,
 * ylo.v >= 0): M in a range with any fraction, M = ylo with a non-zero
 * fraction when ylo is exclusive, M = yhi with a zero fraction when yhi is
 * inclusive.  Returns the number of alternatives written. */
static int magnitude_into(struct sb *s, struct nbound ylo, struct nbound yhi) {
    int n = 0;
    uint64_t a = (uint64_t)ylo.v + (ylo.excl ? 1 : 0);
    if (!yhi.has || (yhi.v >= 1 && a <= (uint64_t)yhi.v - 1)) {
        if (yhi.has) uint_range_into(s, a, (uint64_t)yhi.v - 1, false);
        else uint_range_into(s, a, UINT64_MAX, true);
        sb_puts(s, " ( \".\" [0-9]+ )?");
        n++;
    }
    if (ylo.excl && (!yhi.has || ylo.v < yhi.v))
        sb_printf(s, "%s\"%lld.\" [0-9]* [1-9] [0-9]*", n++ ? " | " : "", (long long)ylo.v);
    if (yhi.has && !yhi.excl && (yhi.v > ylo.v || (yhi.v == ylo.v && !ylo.excl)))
        sb_printf(s, "%s\"%lld\" ( \".\" \"0\"+ )?", n++ ? " | " : "", (long long)yhi.v);
    return n;
}

/* Numbers between integral bounds, written without exponent (every JSON
 * number has a finite decimal expansion, so each value keeps a spelling). */
static char *number_range_body(struct conv *c, json_t *s) {
    struct nbound lo, hi;
    if (!num_bounds(c, s, &lo, &hi)) return NULL;
    struct sb b = {0};
    int n = 0;
    /* no sign: y = x >= max(lo, 0) */
    if (!hi.has || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
        struct nbound ylo = lo.has && lo.v >= 0 ? lo : (struct nbound){true, false, 0};
        sb_puts(&b, "( ");
        int k = magnitude_into(&b, ylo, hi);
        sb_puts(&b, " )");
        if (!k) b.n = 0, b.p[0] = 0;
        n += k;
    }
    /* "-": y = -x > 0, y <= -lo, y >= -hi */
    if (!lo.has || lo.v < 0) {
        struct nbound ylo = hi.has && hi.v < 0 ? (struct nbound){true, hi.excl, -hi.v} : (struct nbound){true, true, 0};
        struct nbound yhi = lo.has ? (struct nbound){true, lo.excl, -lo.v} : (struct nbound){false, false, 0};
        struct sb neg = {0};
        int k = magnitude_into(&neg, ylo, yhi);
        if (k) sb_printf(&b, "%s\"-\" ( %s )", n ? " | " : "", neg.p);
        b.oom |= neg.oom;
        sb_free(&neg);
        n += k;
    }
    if (!n) {
        sb_free(&b);
        return conv_fail(c, DJ_ERR_INVALID, "no number lies between the bounds");
    }
    char *r = sb_take(&b);
    return r ? r : conv_oom(c);
}

/* ---- patterns and formats as GBNF (one regex: the tree written out) ---- */

/* x as a GBNF expression (malloc'd, "" for the empty string; NULL with the
 * message set); *primary: the text is one primary, usable before a quantifier. */
static char *rx_gbnf(struct conv *c, const struct rx_node *x, bool *primary) {
    struct sb s = {0};
    *primary = false;
    switch (x->kind) {
    case RX_EMPTY: break;
    case RX_SET: {
        char *e = set_json_expr(&x->set);
        if (!e) return conv_oom(c); /* sets in a tree are never empty */
        *primary = true;
        return e;
    }
    case RX_CAT:
        for (size_t i = 0; i < x->n_kid; i++) {
            bool p;
            char *k = rx_gbnf(c, x->kid[i], &p);
            if (!k) {
                sb_free(&s);
                return NULL;
            }
            if (k[0]) sb_printf(&s, "%s%s", s.n ? " " : "", k);
            free(k);
        }
        break;
    case RX_ALT: {
        bool has_empty = false;
        size_t n_alt = 0;
        for (size_t i = 0; i < x->n_kid; i++) {
            bool p;
            char *k = rx_gbnf(c, x->kid[i], &p);
            if (!k) {
                sb_free(&s);
                return NULL;
            }
            if (!k[0]) has_empty = true;
            else sb_printf(&s, "%s%s", n_alt++ ? " | " : "( ", k);
            free(k);
        }
        /* an explicit empty alternative: a bare trailing | would run into the next line */
        if (n_alt) sb_puts(&s, has_empty ? " | \"\" )" : " )"), *primary = true;
        break;
    }
    case RX_REP: {
        if (x->pad) {
            const char *ch = prim(c->b, P_CHAR);
            if (!ch) return conv_oom(c);
            sb_printf(&s, "%s*", ch);
            break;
        }
        bool p;
        char *k = rx_gbnf(c, x->kid[0], &p);
        if (!k) return NULL;
        if (k[0]) {
            struct sb item = {0};
            if (p) sb_puts(&item, k);
            else sb_printf(&item, "( %s )", k);
            char *it = sb_take(&item);
            if (!it || !rep_into(c->b, &s, it, x->m, x->n, 0)) s.oom = true;
            free(it);
        }
        free(k);
        break;
    }
    }
    char *r = sb_take(&s);
    return r ? r : conv_oom(c);
}

/* The tree of pattern p[0..n); NULL with the message set.  own: the schema's
 * own `pattern` (the message points at it), else one from allOf or a
 * format's regex (the message quotes it). */
static struct rx_node *parse_pattern(struct conv *c, const char *p, size_t n, bool own) {
    uint32_t *cp = malloc((n + 1) * sizeof *cp);
    if (!cp) return conv_oom(c);
    size_t ncp = 0;
    for (size_t i = 0; i < n;) cp[ncp++] = utf8_next(p, n, &i);
    char err[320];
    struct rx_node *x = NULL;
    enum dj_status st = rx_parse(cp, ncp, &x, err, sizeof err);
    free(cp);
    if (st == DJ_ERR_NOMEM) return conv_oom(c);
    if (st) {
        if (!own) return conv_fail(c, DJ_ERR_INVALID, "pattern '%.80s': %s", p, err);
        size_t old = path_push(c, "pattern");
        conv_fail(c, DJ_ERR_INVALID, "pattern: %s", err);
        path_pop(c, old);
        return NULL;
    }
    return x;
}

/* The string rule body for one pattern's tree. */
static char *pattern_body(struct conv *c, const struct rx_node *x) {
    bool p;
    char *e = rx_gbnf(c, x, &p);
    if (!e) return NULL;
    struct sb s = {0};
    if (e[0]) sb_printf(&s, "\"\\\"\" ( %s ) \"\\\"\"", e);
    else sb_puts(&s, "\"\\\"\\\"\"");
    free(e);
    char *r = sb_take(&s);
    return r ? r : conv_oom(c);
}

/* The rule named after a format (its regex written out); NULL for a format
 * without a regex (message not set) or on OOM (message set). */
static const char *format_rule(struct conv *c, const char *fmt) {
    const char *rx = rx_format_regex(fmt);
    if (!rx) return NULL;
    struct rx_node *x = parse_pattern(c, rx, strlen(rx), false);
    if (!x) return NULL;
    bool p;
    char *e = rx_gbnf(c, x, &p);
    rx_free(x);
    if (!e) return NULL;
    const char *r = builder_put(c->b, fmt, e);
    free(e);
    return r ? r : conv_oom(c);
}

/* ---- merging (allOf, siblings of anyOf/oneOf/$ref) ---- */

static json_t *resolve_ref(struct conv *c, const char *ref);
static const char *visit(struct conv *c, json_t *s, const char *hint);

/* Flattens component s into list (plain objects: no allOf, no $ref). */
static bool flatten(struct conv *c, json_t *s, json_t *list, int depth) {
    if (depth > MAX_DEPTH) return conv_fail(c, DJ_ERR_INVALID, "allOf/$ref nested deeper than %d", MAX_DEPTH), false;
    if (json_is_true(s)) return true;
    if (json_is_false(s)) return conv_fail(c, DJ_ERR_INVALID, "allOf contains the schema false (matches nothing)"), false;
    if (!json_is_object(s)) return conv_fail(c, DJ_ERR_INVALID, "a schema must be an object or a boolean"), false;
    if (!check_keywords(c, s)) return false;
    json_t *copy = json_copy(s);
    if (!copy) return conv_oom(c), false;
    json_object_del(copy, "allOf");
    json_object_del(copy, "$ref");
    if (json_array_append_new(list, copy)) return conv_oom(c), false;
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        json_t *t = resolve_ref(c, json_string_value(ref));
        if (!t || !flatten(c, t, list, depth + 1)) return false;
    }
    json_t *all = json_object_get(s, "allOf");
    for (size_t i = 0; i < json_array_size(all); i++)
        if (!flatten(c, json_array_get(all, i), list, depth + 1)) return false;
    return true;
}

static bool set_new(struct conv *c, json_t *o, const char *k, json_t *v) {
    if (!v || json_object_set_new(o, k, v)) return conv_oom(c), false;
    return true;
}

static json_t *all_of2(json_t *a, json_t *b) {
    if (!a) return json_incref(b);
    json_t *all = json_object(), *arr = json_array();
    if (!all || !arr || json_array_append(arr, a) || json_array_append(arr, b) || json_object_set_new(all, "allOf", arr)) {
        json_decref(all), json_decref(arr);
        return NULL;
    }
    return all;
}

/* The schema equivalent to all of comps[0..n) together, without allOf at its
 * top (nested allOf remain inside properties/items, handled when visited).
 * New reference; NULL with the message set. */
static json_t *merge(struct conv *c, json_t *const *comps, size_t n) {
    json_t *list = json_array(), *m = json_object();
    if (!list || !m) {
        json_decref(list), json_decref(m);
        return conv_oom(c);
    }
    for (size_t i = 0; i < n; i++)
        if (!flatten(c, comps[i], list, 0)) goto fail;
    unsigned types = T_ALL;
    json_t *props = json_object(), *req = json_array(), *unions = json_array(), *pats = json_array(), *fmts = json_array();
    if (!pats || !fmts) {
        json_decref(props), json_decref(req), json_decref(unions), json_decref(pats), json_decref(fmts);
        goto oom;
    }
    if (!set_new(c, m, "properties", props) || !set_new(c, m, "required", req)) goto fail_unions;
    if (!unions) goto oom_unions;
    json_t *addl = NULL; /* allOf of the components' additionalProperties */
    bool any_props = false;
    size_t idx;
    json_t *x;
    /* properties: the union of names; each name's schema is allOf over the
     * components of their schema for it, or their additionalProperties. */
    json_array_foreach(list, idx, x) {
        json_t *p = json_object_get(x, "properties");
        const char *k;
        json_t *v;
        json_object_foreach(p, k, v) {
            any_props = true;
            if (json_object_get(props, k)) continue;
            json_t *acc = NULL;
            size_t j;
            json_t *y;
            json_array_foreach(list, j, y) {
                json_t *py = json_object_get(json_object_get(y, "properties"), k);
                if (!py) py = json_object_get(y, "additionalProperties");
                if (!py || json_is_true(py)) continue;
                json_t *nacc = all_of2(acc, py);
                json_decref(acc);
                if (!(acc = nacc)) goto oom_unions;
            }
            if (!acc) acc = json_true();
            if (json_object_set_new(props, k, acc)) goto oom_unions;
        }
    }
    json_array_foreach(list, idx, x) {
        json_t *a = json_object_get(x, "additionalProperties");
        if (a && !json_is_true(a)) {
            json_t *na = all_of2(addl, a);
            json_decref(addl);
            if (!(addl = na)) goto oom_unions;
        }
    }
    if (addl && json_object_set_new(m, "additionalProperties", addl)) goto oom_unions;
    if (!any_props) json_object_del(m, "properties");
    json_array_foreach(list, idx, x) {
        const char *k;
        json_t *v;
        json_object_foreach(x, k, v) {
            if (kw_lookup(k) != KW_OK || !strcmp(k, "properties") || !strcmp(k, "additionalProperties")) continue;
            json_t *cur = json_object_get(m, k);
            if (!strcmp(k, "type")) {
                types &= type_mask(x);
            } else if (!strcmp(k, "required")) {
                for (size_t i = 0; i < json_array_size(v); i++) {
                    json_t *r = json_array_get(v, i);
                    bool dup = false;
                    for (size_t j = 0; j < json_array_size(req); j++) dup |= json_equal(r, json_array_get(req, j));
                    if (!dup && json_array_append(req, r)) goto oom_unions;
                }
            } else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
                if (json_array_append(unions, v)) goto oom_unions;
            } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
                json_t *vals = !strcmp(k, "const") ? json_pack("[O]", v) : json_incref(v);
                json_t *old = json_object_get(m, "enum");
                if (!vals) goto oom_unions;
                if (old) {
                    json_t *keep = json_array();
                    if (!keep) {
                        json_decref(vals);
                        goto oom_unions;
                    }
                    for (size_t i = 0; i < json_array_size(old); i++)
                        for (size_t j = 0; j < json_array_size(vals); j++)
                            if (json_equal(json_array_get(old, i), json_array_get(vals, j))) {
                                json_array_append(keep, json_array_get(old, i));
                                break;
                            }
                    json_decref(vals);
                    vals = keep;
                }
                if (json_object_set_new(m, "enum", vals)) goto oom_unions;
            } else if (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
                       !strcmp(k, "minProperties") || (!strcmp(k, "exclusiveMinimum") && json_is_number(v))) {
                if (!cur || json_number_value(v) > json_number_value(cur))
                    if (json_object_set(m, k, v)) goto oom_unions;
            } else if (!strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") ||
                       !strcmp(k, "maxProperties") || (!strcmp(k, "exclusiveMaximum") && json_is_number(v))) {
                if (!cur || json_number_value(v) < json_number_value(cur))
                    if (json_object_set(m, k, v)) goto oom_unions;
            } else if (!strcmp(k, "items") && !json_is_array(v)) {
                json_t *it = cur ? all_of2(cur, v) : json_incref(v);
                if (!it || json_object_set_new(m, k, it)) goto oom_unions;
            } else if (!strcmp(k, "pattern") || !strcmp(k, K_PATTERNS) || !strcmp(k, "format") || !strcmp(k, K_FORMATS)) {
                /* all must hold: collected, and intersected when the string is converted */
                bool is_pat = !strcmp(k, "pattern") || !strcmp(k, K_PATTERNS);
                json_t *to = is_pat ? pats : fmts;
                for (size_t i = 0; i < (json_is_array(v) ? json_array_size(v) : 1); i++) {
                    json_t *one = json_is_array(v) ? json_array_get(v, i) : v;
                    bool dup = false;
                    for (size_t j = 0; j < json_array_size(to); j++) dup |= json_equal(one, json_array_get(to, j));
                    if (!dup && json_array_append(to, one)) goto oom_unions;
                }
            } else if (!strcmp(k, "uniqueItems")) {
                /* only false reaches here */
            } else if (cur && !json_equal(cur, v)) {
                char kq[64];
                snprintf(kq, sizeof kq, "%s", k);
                conv_fail(c, DJ_ERR_INVALID, "allOf: components with different '%s' cannot be merged", kq);
                goto fail_unions;
            } else if (json_is_boolean(v) && (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum"))) {
                conv_fail(c, DJ_ERR_INVALID, "allOf: draft-4 boolean '%s' cannot be merged", k);
                goto fail_unions;
            } else if (json_object_set(m, k, v)) {
                goto oom_unions;
            }
        }
    }
    if (!types) {
        conv_fail(c, DJ_ERR_INVALID, "allOf: the components' types have nothing in common");
        goto fail_unions;
    }
    if (types != T_ALL) {
        if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER;
        json_t *ta = json_array();
        if (!ta) goto oom_unions;
        for (unsigned i = 0; i < 7; i++)
            if (types & (1u << i)) json_array_append_new(ta, json_string(type_names[i]));
        if (json_object_set_new(m, "type", ta)) goto oom_unions;
    }
    if (!json_array_size(req)) json_object_del(m, "required");
    for (int i = 0; i < 2; i++) {
        json_t *all = i ? fmts : pats;
        if (json_array_size(all) == 1 && json_object_set(m, i ? "format" : "pattern", json_array_get(all, 0)))
            goto oom_unions;
        if (json_array_size(all) > 1 && json_object_set_new_nocheck(m, i ? K_FORMATS : K_PATTERNS, json_incref(all)))
            goto oom_unions;
    }
    /* several anyOf/oneOf: their product, as one anyOf of allOf pairs */
    if (json_array_size(unions)) {
        json_t *acc = json_copy(json_array_get(unions, 0));
        if (!acc) goto oom_unions;
        for (size_t u = 1; u < json_array_size(unions); u++) {
            json_t *b = json_array_get(unions, u), *prod = json_array();
            if (!prod) {
                json_decref(acc);
                goto oom_unions;
            }
            if (json_array_size(acc) * json_array_size(b) > MAX_BRANCH_PRODUCT) {
                json_decref(acc), json_decref(prod);
                conv_fail(c, DJ_ERR_INVALID, "anyOf/oneOf combined make over %d branches", MAX_BRANCH_PRODUCT);
                goto fail_unions;
            }
            for (size_t i = 0; i < json_array_size(acc); i++)
                for (size_t j = 0; j < json_array_size(b); j++)
                    json_array_append_new(prod, all_of2(json_array_get(acc, i), json_array_get(b, j)));
            json_decref(acc);
            acc = prod;
        }
        if (json_object_set_new(m, "anyOf", acc)) goto oom_unions;
    }
    json_decref(unions), json_decref(pats), json_decref(fmts);
    json_decref(list);
    return m;
oom_unions:
    conv_oom(c);
fail_unions:
    json_decref(unions), json_decref(pats), json_decref(fmts);
    goto fail;
oom:
    conv_oom(c);
fail:
    json_decref(list);
    json_decref(m);
    return NULL;
}

/* ---- $ref ---- */

static json_t *resolve_ref(struct conv *c, const char *ref) {
    if (ref[0] != '#') return conv_fail(c, DJ_ERR_INVALID, "only local $ref (\"#...\") are supported, not '%.200s'", ref);
    json_t *t = c->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') return conv_fail(c, DJ_ERR_INVALID, "$ref '%.200s' is not a JSON pointer", ref);
    while (*p == '/') {
        p++;
        struct sb tok = {0};
        while (*p && *p != '/') {
            if (p[0] == '~' && p[1] == '0') sb_putn(&tok, "~", 1), p += 2;
            else if (p[0] == '~' && p[1] == '1') sb_putn(&tok, "/", 1), p += 2;
            else sb_putn(&tok, p, 1), p++;
        }
        char *k = sb_take(&tok);
        if (!k) return conv_oom(c);
        json_t *next = NULL;
        if (json_is_object(t)) next = json_object_get(t, k);
        else if (json_is_array(t)) {
            char *end;
            unsigned long i = strtoul(k, &end, 10);
            if (*k && !*end) next = json_array_get(t, i);
        }
        free(k);
        if (!next) return conv_fail(c, DJ_ERR_INVALID, "$ref '%.200s' does not resolve", ref);
        t = next;
    }
    return t;
}

static const char *visit_ref(struct conv *c, const char *ref) {
    for (size_t i = c->guard; i < c->n_open; i++)
        if (!strcmp(c->open[i], ref))
            return conv_fail(c, DJ_ERR_INVALID, "$ref '%.200s' refers to itself before any text (left recursion)", ref);
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return c->refs[i].rule;
    json_t *target = resolve_ref(c, ref);
    if (!target) return NULL;
    const char *tail = strrchr(ref, '/');
    char *hint = hint_join(c->b->opts.rule_prefix ? c->b->opts.rule_prefix : "ref", tail ? tail + 1 : "root");
    if (!hint) return conv_oom(c);
    const char *name = builder_put(c->b, hint, NULL);
    free(hint);
    if (!name) return conv_oom(c);
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 8;
        struct refent *r = realloc(c->refs, cap * sizeof *r);
        if (!r) return conv_oom(c);
        c->refs = r, c->cap_refs = cap;
    }
    char *rc = xstrdup(ref);
    if (!rc) return conv_oom(c);
    c->refs[c->n_refs++] = (struct refent){rc, name};
    if (c->n_open == c->cap_open) {
        size_t cap = c->cap_open ? 2 * c->cap_open : 8;
        const char **o = realloc(c->open, cap * sizeof *o);
        if (!o) return conv_oom(c);
        c->open = o, c->cap_open = cap;
    }
    c->open[c->n_open++] = rc;
    /* messages inside point at the target: its pointer is the ref minus '#' */
    char *saved = c->path.p ? xstrdup(c->path.p) : NULL;
    if (c->path.p && !saved) return conv_oom(c);
    path_pop(c, 0);
    sb_puts(&c->path, ref + 1);
    const char *r = visit(c, target, name);
    path_pop(c, 0);
    if (saved) sb_puts(&c->path, saved);
    free(saved);
    c->n_open--;
    if (!r) return NULL;
    if (!gbnf_builder_define(c->b, name, r)) return conv_oom(c);
    return name;
}

/* ---- objects and arrays ---- */

/* A value inside an object or array: a token has been consumed before it,
 * so refs open so far cannot recur without text. */
static const char *visit_guarded(struct conv *c, json_t *s, const char *hint) {
    size_t g = c->guard;
    c->guard = c->n_open;
    const char *r = visit(c, s, hint);
    c->guard = g;
    return r;
}

struct trie {
    uint32_t cp;
    bool end;
    struct trie *kids;
    size_t n_kids;
};

static void trie_free(struct trie *t) {
    for (size_t i = 0; i < t->n_kids; i++) trie_free(&t->kids[i]);
    free(t->kids);
}

static bool trie_add(struct trie *t, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp = utf8_next(s, n, &i);
        struct trie *k = NULL;
        for (size_t j = 0; j < t->n_kids; j++)
            if (t->kids[j].cp == cp) k = &t->kids[j];
        if (!k) {
            struct trie *nk = realloc(t->kids, (t->n_kids + 1) * sizeof *nk);
            if (!nk) return false;
            t->kids = nk;
            k = &t->kids[t->n_kids++];
            *k = (struct trie){cp, false, NULL, 0};
        }
        t = k;
    }
    t->end = true;
    return true;
}

/* Key characters after trie node t: the declared names' continuations,
 * any other character then anything, or the end where t is no name. */
static bool trie_expr(struct conv *c, struct sb *s, const struct trie *t, const char *charr, const char *hint, int nest) {
    struct cpset kids = {0};
    size_t n_alt = 0;
    if (nest > 48) { /* the parser nests groups at most 256 deep: continue in a rule */
        struct sb sub = {0};
        if (!trie_expr(c, &sub, t, charr, hint, 0)) {
            sb_free(&sub);
            return false;
        }
        char *body = sb_take(&sub);
        const char *r = body ? builder_put(c->b, hint, body) : NULL;
        free(body);
        if (!r) return conv_oom(c), false;
        sb_puts(s, r);
        return true;
    }
    for (size_t i = 0; i < t->n_kids; i++) {
        const struct trie *k = &t->kids[i];
        cpset_add(&kids, k->cp, k->cp);
        struct sb lit = {0};
        json_char_into(&lit, k->cp);
        char *l = sb_take(&lit);
        char *q = l ? gbnf_quote(l, strlen(l)) : NULL;
        free(l);
        if (!q) {
            free(kids.r);
            return conv_oom(c), false;
        }
        sb_printf(s, "%s%s ", n_alt++ ? " | " : "", q);
        free(q);
        if (k->n_kids) {
            sb_puts(s, "( ");
            if (!trie_expr(c, s, k, charr, hint, nest + 1)) {
                free(kids.r);
                return false;
            }
            sb_puts(s, " )");
        } else {
            sb_printf(s, "%s+", charr); /* exactly a declared name: must go on */
        }
    }
    cpset_norm(&kids);
    cpset_negate(&kids);
    char *other = set_json_expr(&kids);
    bool oom = kids.oom;
    free(kids.r);
    if (oom) return conv_oom(c), false;
    if (other) sb_printf(s, "%s%s %s*", n_alt++ ? " | " : "", other, charr);
    free(other);
    if (!t->end) sb_puts(s, n_alt ? " | \"\"" : "\"\""); /* the key may end here */
    return true;
}

/* The rule `"key": value` of one object member, named after its hint; NULL on OOM. */
static const char *member_rule(struct dj_gbnf_builder *b, const char *key, const char *value_rule, const char *hint) {
    char *kl = gbnf_json_string_literal(key, strlen(key));
    struct sb kb = {0}, hn = {0};
    if (kl) sb_printf(&kb, "%s %s %s", kl, b->punct[5], value_rule), sb_printf(&hn, "%s-kv", hint);
    free(kl);
    char *kvb = sb_take(&kb), *kvn = sb_take(&hn);
    const char *rule = kvb && kvn ? builder_put(b, kvn, kvb) : NULL;
    free(kvb), free(kvn);
    return rule;
}

static char *object_body(struct conv *c, json_t *s, const char *hint) {
    struct dj_gbnf_builder *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    bool addl_allowed = addl ? !json_is_false(addl) : !b->opts.strict;
    const char *W = ws_or_empty(b), *COMMA = b->punct[4], *COLON = b->punct[5];
    if (!W) return conv_oom(c);
    /* members in order; required names missing from properties follow, with
     * the additionalProperties schema */
    size_t n_decl = json_object_size(props), n_extra = 0;
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        json_t *ps = json_object_get(props, r);
        if (ps && json_is_false(ps)) return conv_fail(c, DJ_ERR_INVALID, "required property '%.100s' has the schema false", r);
        if (!ps) {
            if (!addl_allowed)
                return conv_fail(c, DJ_ERR_INVALID,
                                 "required property '%.100s' is not in properties and additionalProperties is false", r);
            n_extra++;
        }
    }
    size_t cap = n_decl + n_extra;
    const char **kv = calloc(cap ? cap : 1, sizeof *kv);
    bool *is_req = calloc(cap ? cap : 1, sizeof *is_req);
    char *result = NULL;
    struct sb body = {0};
    struct trie trie = {0};
    /* the required names as a set (a pairwise search was quadratic in the properties) */
    json_t *req_set = json_object();
    if (!kv || !is_req || !req_set) goto oom;
    for (size_t i = 0; i < json_array_size(req); i++)
        if (json_object_set_new(req_set, json_string_value(json_array_get(req, i)), json_null())) goto oom;
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) {
        if (json_is_false(v)) continue;
        bool r = json_object_get(req_set, k) != NULL;
        char *h = hint_join(hint, k);
        if (!h) goto oom;
        size_t old = path_push(c, "properties");
        path_push(c, k);
        const char *vr = visit_guarded(c, v, h);
        path_pop(c, old);
        if (!vr) {
            free(h);
            goto fail;
        }
        kv[n] = member_rule(b, k, vr, h);
        free(h);
        if (!kv[n]) goto oom;
        is_req[n++] = r;
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (json_object_get(props, r)) continue;
        json_t *once = json_object_get(req_set, r); /* null until its member is written, then true */
        if (json_is_true(once)) continue;
        if (json_object_set_new(req_set, r, json_true())) goto oom;
        char *h = hint_join(hint, r);
        if (!h) goto oom;
        size_t old = path_push(c, "additionalProperties");
        const char *vr = addl ? visit_guarded(c, addl, h) : prim(b, P_VALUE);
        path_pop(c, old);
        if (!vr) {
            free(h);
            if (!c->st) conv_oom(c);
            goto fail;
        }
        kv[n] = member_rule(b, r, vr, h);
        free(h);
        if (!kv[n]) goto oom;
        is_req[n++] = true;
    }
    size_t n_req = 0;
    for (size_t i = 0; i < n; i++) n_req += is_req[i];
    json_t *minp = json_object_get(s, "minProperties"), *maxp = json_object_get(s, "maxProperties");
    if (minp && (size_t)json_integer_value(minp) > n_req) {
        conv_fail(c, DJ_ERR_INVALID, "'minProperties' is supported only where the required properties imply it");
        goto fail;
    }
    if (maxp && (addl_allowed || (size_t)json_integer_value(maxp) < n)) {
        conv_fail(c, DJ_ERR_INVALID, "'maxProperties' is supported only where the declared properties imply it");
        goto fail;
    }
    /* the additional member */
    const char *akv = NULL;
    if (addl_allowed) {
        const char *charr = prim(b, P_CHAR);
        if (!charr) goto oom;
        char *h = hint_join(hint, "additional");
        if (!h) goto oom;
        const char *vr;
        if (addl && !json_is_true(addl)) {
            size_t old = path_push(c, "additionalProperties");
            vr = visit_guarded(c, addl, h);
            path_pop(c, old);
        } else {
            vr = prim(b, P_VALUE);
            if (!vr) conv_oom(c);
        }
        const char *key = NULL;
        if (vr && (n || json_object_size(props))) {
            bool ok = true;
            json_object_foreach(props, k, v) ok = ok && trie_add(&trie, k, strlen(k));
            for (size_t i = 0; i < json_array_size(req); i++) {
                const char *r = json_string_value(json_array_get(req, i));
                ok = ok && trie_add(&trie, r, strlen(r));
            }
            if (!ok) {
                free(h);
                goto oom;
            }
            struct sb kb = {0}, hn = {0};
            sb_printf(&hn, "%s-key", h);
            sb_puts(&kb, "\"\\\"\" ( ");
            char *hk = sb_take(&hn);
            if (!hk || !trie_expr(c, &kb, &trie, charr, hk, 0)) {
                free(hk), sb_free(&kb), free(h);
                if (!c->st) conv_oom(c);
                goto fail;
            }
            sb_puts(&kb, " ) \"\\\"\"");
            char *kbody = sb_take(&kb);
            if (kbody) key = builder_put(b, hk, kbody);
            free(kbody), free(hk);
            if (!key) {
                free(h);
                goto oom;
            }
        } else if (vr) {
            if (!(key = prim(b, P_STRING))) {
                free(h);
                goto oom;
            }
        }
        if (!vr) {
            free(h);
            goto fail;
        }
        struct sb kb = {0}, hn = {0};
        sb_printf(&kb, "%s %s %s", key, COLON, vr);
        sb_printf(&hn, "%s-kv", h);
        free(h);
        char *kvb = sb_take(&kb), *kvn = sb_take(&hn);
        if (kvb && kvn) akv = builder_put(b, kvn, kvb);
        free(kvb), free(kvn);
        if (!akv) goto oom;
    }
    /* Members: a subsequence of kv[] containing every required one, then any
     * number of additional members.  Alternatives by the first member present
     * (any optional one before the first required, or that required one); the
     * rest after member i is tail(i+1), a chain of rules when shared. */
    size_t first_req = n;
    for (size_t i = 0; i < n; i++)
        if (is_req[i]) {
            first_req = i;
            break;
        }
    size_t n_starts = first_req + (first_req < n ? 1 : 0) + (first_req == n && akv ? 1 : 0);
    struct sb tail = {0};
    if (n_starts == 0) { /* no member possible */
        sb_printf(&body, "\"{\" %s \"}\"", W);
        goto done;
    }
    /* tail(i): members i.. each after a comma, then the additional ones.
     * With several possible first members each tail is a rule naming the
     * next (the grammar stays linear in the number of properties); with one,
     * the one tail needed is written inline. */
    bool chain = n_starts > 1;
    const char **tails = calloc(n + 2, sizeof *tails); /* chain: rule names, NULL where empty */
    if (!tails) goto oom;
    for (size_t i = n + 1; i-- > 1;) {
        tail.n = 0;
        if (tail.p) tail.p[0] = 0;
        if (!chain && i != 1) continue;
        for (size_t j = i; j < n && (chain ? j == i : true); j++)
            sb_printf(&tail, is_req[j] ? "%s%s %s" : "%s( %s %s )?", tail.n ? " " : "", COMMA, kv[j]);
        if (chain && i < n && tails[i + 1]) sb_printf(&tail, " %s", tails[i + 1]);
        if (akv && (!chain || i == n)) sb_printf(&tail, "%s( %s %s )*", tail.n ? " " : "", COMMA, akv);
        if (tail.oom) {
            free(tails);
            goto oom;
        }
        if (chain && tail.n) {
            struct sb hn = {0};
            sb_printf(&hn, "%s-rest", hint);
            char *hs = sb_take(&hn);
            tails[i] = hs ? builder_put(b, hs, tail.p) : NULL;
            free(hs);
            if (!tails[i]) {
                free(tails);
                goto oom;
            }
        }
    }
    struct sb mem = {0};
    size_t n_alt = 0;
    for (size_t i = 0; i < n && i <= first_req; i++) {
        sb_printf(&mem, "%s%s", n_alt++ ? " | " : "", kv[i]);
        if (chain && tails[i + 1]) sb_printf(&mem, " %s", tails[i + 1]);
        else if (!chain && tail.n) sb_printf(&mem, " %s", tail.p);
    }
    if (first_req == n && akv) sb_printf(&mem, "%s%s ( %s %s )*", n_alt++ ? " | " : "", akv, COMMA, akv);
    free(tails);
    char *members = sb_take(&mem);
    if (!members) goto oom;
    if (first_req < n)
        sb_printf(&body, "\"{\" %s %s%s%s %s \"}\"", W, n_alt > 1 ? "( " : "", members, n_alt > 1 ? " )" : "", W);
    else sb_printf(&body, "\"{\" %s ( %s%s%s %s )? \"}\"", W, n_alt > 1 ? "( " : "", members, n_alt > 1 ? " )" : "", W);
    free(members);
done:
    sb_free(&tail);
    result = sb_take(&body);
    if (!result) conv_oom(c);
    goto out;
oom:
    conv_oom(c);
fail:
    sb_free(&body);
out:
    trie_free(&trie);
    json_decref(req_set);
    free(kv), free(is_req);
    return result;
}

static char *array_body(struct conv *c, json_t *s, const char *hint) {
    struct dj_gbnf_builder *b = c->b;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems"), *rest;
    const char *rest_kw = "items";
    if (prefix) {
        if (json_is_array(items)) return conv_fail(c, DJ_ERR_INVALID, "'items' must be a schema next to 'prefixItems'");
        rest = items;
    } else if (json_is_array(items)) {
        prefix = items, rest = json_object_get(s, "additionalItems"), rest_kw = "additionalItems";
    } else {
        rest = items;
    }
    if (!prefix && json_object_get(s, "additionalItems") && !json_is_array(items)) {
        /* additionalItems without a tuple has no effect */
    }
    size_t k = json_array_size(prefix);
    if (k > 100) return conv_fail(c, DJ_ERR_INVALID, "more than 100 tuple items");
    size_t m = json_object_get(s, "minItems") ? (size_t)json_integer_value(json_object_get(s, "minItems")) : 0;
    size_t n = json_object_get(s, "maxItems") ? (size_t)json_integer_value(json_object_get(s, "maxItems")) : INF;
    bool rest_false = rest && json_is_false(rest);
    /* a prefix item with the schema false ends the array before it */
    const char **pr = calloc(k ? k : 1, sizeof *pr);
    if (!pr) return conv_oom(c);
    size_t k_eff = k;
    for (size_t i = 0; i < k; i++) {
        json_t *it = json_array_get(prefix, i);
        if (json_is_false(it)) {
            k_eff = i;
            rest_false = true;
            break;
        }
        struct sb h = {0};
        sb_printf(&h, "%s-%zu", hint, i);
        char *hs = sb_take(&h);
        if (!hs) {
            free(pr);
            return conv_oom(c);
        }
        size_t old = path_push_idx(c, json_is_array(json_object_get(s, "prefixItems")) ? "prefixItems" : "items", i);
        pr[i] = visit_guarded(c, it, hs);
        path_pop(c, old);
        free(hs);
        if (!pr[i]) {
            free(pr);
            return NULL;
        }
    }
    size_t n_eff = rest_false ? (n < k_eff ? n : k_eff) : n;
    if (m > n_eff) {
        free(pr);
        return conv_fail(c, DJ_ERR_INVALID, "minItems %zu exceeds the items possible", m);
    }
    const char *rr = NULL;
    if (!rest_false && n_eff > k_eff) {
        if (rest && !json_is_true(rest)) {
            char *h = hint_join(hint, "item");
            if (!h) {
                free(pr);
                return conv_oom(c);
            }
            size_t old = path_push(c, rest_kw);
            rr = visit_guarded(c, rest, h);
            path_pop(c, old);
            free(h);
        } else {
            rr = prim(b, P_VALUE);
            if (!rr) conv_oom(c);
        }
        if (!rr) {
            free(pr);
            return NULL;
        }
    }
    const char *W = ws_or_empty(b), *COMMA = b->punct[4];
    struct sb s2 = {0};
    if (!W) s2.oom = true;
    if (n_eff == 0) {
        sb_printf(&s2, "\"[\" %s \"]\"", W);
    } else {
        /* element i (0-based) is optional when i >= m; nested so that
         * element i+1 needs element i */
        struct sb body = {0};
        size_t opened = 0;
        for (size_t i = 0; i < k_eff && i < n_eff; i++) {
            if (i) {
                if (i >= m) sb_puts(&body, "( "), opened++;
                sb_printf(&body, "%s ", COMMA);
            }
            sb_printf(&body, "%s", pr[i]);
            if (i + 1 < k_eff && i + 1 < n_eff) sb_puts(&body, " ");
        }
        if (n_eff > k_eff) {
            size_t lo = m > k_eff ? m - k_eff : 0, hi = n_eff == INF ? INF : n_eff - k_eff;
            if (k_eff == 0) { /* first element then (comma element){lo-1, hi-1} */
                sb_puts(&body, rr);
                lo = lo ? lo - 1 : 0;
                hi = hi == INF ? INF : hi - 1;
            }
            if (hi) {
                struct sb item = {0};
                sb_printf(&item, "( %s %s )", COMMA, rr);
                char *it = sb_take(&item);
                if (!it) body.oom = true;
                else {
                    sb_puts(&body, " ");
                    if (!rep_into(b, &body, it, lo, hi, 0)) body.oom = true;
                }
                free(it);
            }
        }
        for (size_t i = 0; i < opened; i++) sb_puts(&body, " )?");
        char *bd = sb_take(&body);
        if (!bd) s2.oom = true;
        else if (m == 0) sb_printf(&s2, "\"[\" %s ( %s %s )? \"]\"", W, bd, W);
        else sb_printf(&s2, "\"[\" %s %s %s \"]\"", W, bd, W);
        free(bd);
    }
    free(pr);
    char *r = sb_take(&s2);
    return r ? r : conv_oom(c);
}

/* ---- strings: pattern, format, minLength and maxLength together ---- */

/* Past these a string's constraints are refused (the message says which):
 * the automaton of one constraint or of an intersection, and the rules of
 * the final grammar (one per automaton state and counted length). */
#define MAX_DFA_STATES 4096
#define MAX_PLAN_NODES 8192
#define MAX_PLAN_TEXT ((size_t)4 << 20) /* bytes of those rules */
/* All the automata of one grammar together: the states their constructions
 * made (before minimizing) and the plans' nodes.  One automaton near its
 * limit costs about 5 ms and can leave a rule of 1 KB, so without a total
 * 500 copies of one such string cost 2.3 s; this is 32 automata at their
 * limit (about 0.3 s). */
#define MAX_AUTOMATA_TOTAL 131072

/* One regular constraint on a string: a pattern or a format. */
struct scon {
    struct rx_node *x;
    const char *fmt; /* a format (its rule is named after it), or NULL */
};

/* The GBNF for "one character of s": the shared any-character rule when s is
 * everything, else the set's expression.  malloc'd; NULL with the message set. */
static char *charset_expr(struct conv *c, const struct cpset *s) {
    if (cpset_is_all(s)) {
        const char *ch = prim(c->b, P_CHAR);
        char *r = ch ? xstrdup(ch) : NULL;
        return r ? r : conv_oom(c);
    }
    char *e = set_json_expr(s);
    return e ? e : conv_oom(c);
}

/* `"` body `"` (body "" for the empty string). */
static char *quoted_body(struct conv *c, char *body) {
    if (!body) return NULL;
    struct sb s = {0};
    if (body[0]) sb_printf(&s, "\"\\\"\" %s \"\\\"\"", body);
    else sb_puts(&s, "\"\\\"\\\"\"");
    free(body);
    char *r = sb_take(&s);
    return r ? r : conv_oom(c);
}

/* The string rule body of one constraint alone: its pattern written out, or its format's rule
 * between quotes.  malloc'd; NULL with the message set. */
static char *one_constraint_body(struct conv *c, const struct scon *k) {
    if (!k->fmt) return pattern_body(c, k->x);
    const char *f = format_rule(c, k->fmt);
    if (!f) return NULL;
    char *d = xstrdup(f);
    return d ? quoted_body(c, d) : conv_oom(c);
}

/* The GBNF of plan node i's language (what follows it): "" for none, a
 * counted repetition for a loop node, else the node's rule. */
static char *plan_ref(struct conv *c, const struct sdfa *d, const struct rx_alphabet *ab, const struct sdfa_plan *p,
                      const char **names, size_t i) {
    const struct sdfa_pnode *nd = &p->node[i];
    if (!nd->loop) {
        char *r = xstrdup(nd->ne ? names[i] : "");
        return r ? r : conv_oom(c);
    }
    struct sb s = {0};
    if (nd->hi) {
        struct cpset ls = {0};
        sdfa_loop_set(d, ab, nd->q, &ls);
        cpset_drop_surrogates(&ls);
        char *item = ls.oom ? conv_oom(c) : charset_expr(c, &ls);
        cpset_free(&ls);
        if (!item) return NULL;
        if (!rep_into(c->b, &s, item, nd->lo, nd->hi, 0)) s.oom = true;
        free(item);
    }
    char *r = sb_take(&s);
    return r ? r : conv_oom(c);
}

/* Rules for plan p of automaton d: node i a rule "<hint>-s<i>" (loop nodes and
 * nodes that only end are written where they are used).  Returns the string
 * body. */
static char *plan_body(struct conv *c, const struct sdfa *d, const struct rx_alphabet *ab, const struct sdfa_plan *p,
                       const char *hint, const char *what) {
    const char **names = calloc(p->n, sizeof *names);
    char *result = NULL;
    size_t text = 0;
    if (!names) return conv_oom(c);
    for (size_t i = 0; i < p->n; i++) {
        if (p->node[i].loop || !p->node[i].ne) continue;
        struct sb nm = {0};
        sb_printf(&nm, "%s-s%zu", hint, i);
        char *n = sb_take(&nm);
        names[i] = n ? builder_put(c->b, n, NULL) : NULL;
        free(n);
        if (!names[i]) goto oom;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (!names[i]) continue;
        const struct sdfa_pnode *nd = &p->node[i];
        struct sb body = {0};
        for (size_t e = nd->e0; e < nd->e0 + nd->ne;) {
            uint32_t to = p->edge[e].to;
            struct cpset set = {0};
            for (; e < nd->e0 + nd->ne && p->edge[e].to == to; e++)
                cpset_add(&set, ab->lo[p->edge[e].sym_lo], ab->hi[p->edge[e].sym_hi]);
            cpset_norm(&set);
            cpset_drop_surrogates(&set);
            char *se = set.oom ? conv_oom(c) : charset_expr(c, &set);
            cpset_free(&set);
            char *rest = se ? plan_ref(c, d, ab, p, names, to) : NULL;
            if (!rest) {
                free(se), sb_free(&body);
                goto fail;
            }
            sb_printf(&body, "%s%s%s%s", body.n ? " | " : "", se, rest[0] ? " " : "", rest);
            free(se), free(rest);
        }
        if (nd->acc) sb_puts(&body, " | \"\"");
        if ((text += body.n) > MAX_PLAN_TEXT) {
            sb_free(&body);
            conv_fail(c, DJ_ERR_INVALID, "%s: the exact grammar would be over %zu MB", what, MAX_PLAN_TEXT >> 20);
            goto fail;
        }
        char *bd = sb_take(&body);
        bool ok = bd && gbnf_builder_define(c->b, names[i], bd);
        free(bd);
        if (!ok) goto oom;
    }
    result = quoted_body(c, plan_ref(c, d, ab, p, names, 0));
    free(names);
    return result;
oom:
    conv_oom(c);
fail:
    free(names);
    return NULL;
}

/* The string body for cons[0..n) (n >= 1) together with lengths lo..hi; what:
 * the constraints in words, for messages.  Frees the trees. */
static char *intersection_body(struct conv *c, struct scon *cons, size_t n, size_t lo, size_t hi, const char *what,
                               const char *hint) {
    struct rx_node **xs = calloc(n + 1, sizeof *xs), *star = NULL;
    struct rx_alphabet ab = {0};
    struct sdfa acc = {0}, one = {0}, both = {0};
    struct sdfa_plan plan = {0};
    struct cpset only = {0}; /* the characters allowed by every ^[set]{m,n}$ */
    char *r = NULL;
    enum dj_status st = DJ_OK;
    size_t nc = 0, nx = 0;
    if (!xs) {
        conv_oom(c);
        goto done;
    }
    cpset_add(&only, 0, RX_MAX_CP);
    cpset_drop_surrogates(&only);
    /* ^[s]{m,n}$ is "characters of s" and "length m..n": no automaton for those */
    for (size_t i = 0; i < n; i++) {
        const struct cpset *s;
        size_t m, mx;
        if (rx_is_counted_set(cons[i].x, &s, &m, &mx)) {
            cpset_intersect(&only, s);
            if (m > lo) lo = m;
            if (mx < hi) hi = mx;
            rx_free(cons[i].x);
            cons[i].x = NULL;
        } else {
            struct scon keep = cons[i];
            cons[i].x = NULL;
            cons[nc++] = keep;
        }
    }
    if (only.oom) {
        conv_oom(c);
        goto done;
    }
    bool empty = hi < lo || (!only.n && lo > 0);
    for (size_t i = 0; i < nc; i++) /* lengths alone rule a regex out: no automaton needed to say so */
        empty = empty || rx_min_len(cons[i].x) > hi || rx_max_len(cons[i].x) < lo;
    if (empty) {
        conv_fail(c, DJ_ERR_INVALID, "no string satisfies %s", what);
        goto done;
    }
    if (!nc) { /* characters of a set, a counted number of times */
        struct sb s = {0};
        char *item = only.n ? charset_expr(c, &only) : NULL;
        if (only.n && !item) goto done;
        if (item && !rep_into(c->b, &s, item, lo, hi, 0)) s.oom = true;
        free(item);
        char *b = sb_take(&s);
        r = quoted_body(c, b ? b : conv_oom(c));
        goto done;
    }
    if (nc == 1 && cpset_is_all(&only) && lo <= rx_min_len(cons[0].x) && rx_max_len(cons[0].x) <= hi) {
        /* the lengths add nothing: the constraint alone */
        r = one_constraint_body(c, &cons[0]);
        goto done;
    }
    for (size_t i = 0; i < nc; i++) xs[nx++] = cons[i].x;
    if (!cpset_is_all(&only)) {
        if (!(star = rx_star_of(&only))) {
            conv_oom(c);
            goto done;
        }
        xs[nx++] = star;
    }
    if ((st = rx_alphabet_build(xs, nx, &ab))) goto fail;
    for (size_t i = 0; i < nx; i++) {
        if ((st = sdfa_from_rx(xs[i], &ab, MAX_DFA_STATES, i ? &one : &acc))) goto fail;
        c->b->n_states += (i ? &one : &acc)->n_made;
        if (i) {
            st = sdfa_intersect(&acc, &one, MAX_DFA_STATES, &both);
            sdfa_free(&one), sdfa_free(&acc);
            if (st) goto fail;
            acc = both, both = (struct sdfa){0};
            c->b->n_states += acc.n_made;
        }
        if (c->b->n_states > MAX_AUTOMATA_TOTAL) goto too_many;
    }
    if ((st = sdfa_plan_build(&acc, lo, hi, MAX_PLAN_NODES, &plan))) {
        if (st == DJ_ERR_UNSUPPORTED) {
            conv_fail(c, DJ_ERR_INVALID,
                      "%s: the exact grammar would need more than %d rules (an automaton of %zu states, lengths "
                      "counted one by one)",
                      what, MAX_PLAN_NODES, acc.n);
            goto done;
        }
        goto fail;
    }
    if (!plan.n) {
        conv_fail(c, DJ_ERR_INVALID, "no string satisfies %s", what);
        goto done;
    }
    if ((c->b->n_states += plan.n) > MAX_AUTOMATA_TOTAL) goto too_many;
    r = plan_body(c, &acc, &ab, &plan, hint, what);
    goto done;
too_many:
    conv_fail(c, DJ_ERR_INVALID,
              "%s: the string automata of this grammar would be over the limit of %d states and rules in all", what,
              MAX_AUTOMATA_TOTAL);
    goto done;
fail:
    if (st == DJ_ERR_UNSUPPORTED)
        conv_fail(c, DJ_ERR_INVALID, "%s: the automaton would need more than %d states", what, MAX_DFA_STATES);
    else if (st == DJ_ERR_NOMEM) conv_oom(c);
    else conv_fail(c, st, "%s: the automata could not be built (%s)", what, dj_status_str(st));
done:
    for (size_t i = 0; i < n; i++) rx_free(cons[i].x);
    rx_free(star);
    free(xs);
    cpset_free(&only);
    rx_alphabet_free(&ab);
    sdfa_free(&acc), sdfa_free(&one), sdfa_free(&both);
    sdfa_plan_free(&plan);
    return r;
}

static char *string_body(struct conv *c, json_t *s, const char *hint) {
    struct dj_gbnf_builder *b = c->b;
    json_t *minl = json_object_get(s, "minLength"), *maxl = json_object_get(s, "maxLength");
    size_t lo = minl ? (size_t)json_integer_value(minl) : 0, hi = maxl ? (size_t)json_integer_value(maxl) : INF;
    if (hi < lo) return conv_fail(c, DJ_ERR_INVALID, "'maxLength' is below 'minLength'");
    /* the regular constraints: patterns (allOf may bring several), formats */
    json_t *pat = json_object_get(s, "pattern"), *pats = json_object_get(s, K_PATTERNS);
    json_t *fmt = json_object_get(s, "format"), *fmts = json_object_get(s, K_FORMATS);
    size_t n_pat = (pat ? 1 : 0) + json_array_size(pats), n_fmt = (fmt ? 1 : 0) + json_array_size(fmts), n = 0;
    struct scon *cons = calloc(n_pat + n_fmt + 1, sizeof *cons);
    struct sb what = {0};
    char *r = NULL;
    if (!cons) return conv_oom(c);
    for (size_t i = 0; i < n_pat + n_fmt; i++) {
        bool is_pat = i < n_pat;
        json_t *v = is_pat ? (pat && i == 0 ? pat : json_array_get(pats, i - (pat ? 1 : 0)))
                           : (fmt && i == n_pat ? fmt : json_array_get(fmts, i - n_pat - (fmt ? 1 : 0)));
        const char *t = json_string_value(v);
        if (is_pat) {
            cons[n].x = parse_pattern(c, t, json_string_length(v), v == pat);
        } else {
            const char *rx = rx_format_regex(t);
            if (!rx) {
                if (b->opts.ignore_unknown_formats) continue;
                conv_fail(c, DJ_ERR_INVALID, "unsupported format '%.100s'", t);
                goto done;
            }
            cons[n].fmt = t;
            cons[n].x = parse_pattern(c, rx, strlen(rx), false);
        }
        if (!cons[n].x) goto done;
        n++;
        sb_printf(&what, "%s%s '%.80s'", what.n ? ", " : "", is_pat ? "pattern" : "format", t);
    }
    if (n && minl) sb_printf(&what, ", minLength %zu", lo);
    if (n && maxl) sb_printf(&what, ", maxLength %zu", hi);
    if (n && what.oom) {
        conv_oom(c);
        goto done;
    }
    if (n == 1 && lo == 0 && hi == INF) { /* one regex: written out as it is */
        r = one_constraint_body(c, &cons[0]);
        goto done;
    }
    if (n) {
        r = intersection_body(c, cons, n, lo, hi, what.p, hint);
        n = 0; /* the trees are freed */
        goto done;
    }
    /* no regex: any characters, lo..hi of them (cheap at any count) */
    const char *ch = prim(b, P_CHAR);
    if (!ch) {
        conv_oom(c);
        goto done;
    }
    struct sb q = {0};
    sb_puts(&q, "\"\\\"\" ");
    if (!rep_into(b, &q, ch, lo, hi, 0)) q.oom = true;
    sb_puts(&q, " \"\\\"\"");
    r = sb_take(&q);
    if (!r) conv_oom(c);
done:
    for (size_t i = 0; i < n; i++) rx_free(cons[i].x);
    free(cons);
    sb_free(&what);
    return r;
}

/* Does schema pn accept every string?  (propertyNames: {"type": "string"},
 * what zod writes for a record with string keys, says nothing about keys.) */
static bool all_strings(json_t *pn) {
    if (json_is_true(pn)) return true;
    if (!json_is_object(pn)) return false;
    const char *k;
    json_t *v;
    json_object_foreach(pn, k, v) {
        if (kw_lookup(k) == KW_ANNOT) continue;
        if (strcmp(k, "type") || !(type_mask(pn) & T_STRING)) return false;
        if (!json_is_string(v) && !json_is_array(v)) return false;
    }
    return true;
}

/* The body for s restricted to one type (bit t); keywords of other types ignored. */
static char *typed_body(struct conv *c, json_t *s, unsigned t, const char *hint) {
    struct dj_gbnf_builder *b = c->b;
    const char *p = NULL;
    switch (t) {
    case T_NULL: p = prim(b, P_NULL); break;
    case T_BOOLEAN: p = prim(b, P_BOOLEAN); break;
    case T_STRING:
        if (json_object_get(s, "pattern") || json_object_get(s, "format") || json_object_get(s, "minLength") ||
            json_object_get(s, "maxLength") || json_object_get(s, K_PATTERNS) || json_object_get(s, K_FORMATS))
            return string_body(c, s, hint);
        p = prim(b, P_STRING);
        break;
    case T_NUMBER:
    case T_INTEGER: {
        bool bounded = json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                       json_is_number(json_object_get(s, "exclusiveMinimum")) ||
                       json_is_number(json_object_get(s, "exclusiveMaximum"));
        if (!bounded) {
            p = prim(b, t == T_NUMBER ? P_NUMBER : P_INTEGER);
            break;
        }
        if (t == T_NUMBER) return number_range_body(c, s);
        int64_t lo, hi;
        bool has_lo, has_hi;
        if (!int_bounds(c, s, &lo, &has_lo, &hi, &has_hi)) return NULL;
        struct sb r = {0};
        int_range_into(&r, lo, has_lo, hi, has_hi);
        char *tx = sb_take(&r);
        return tx ? tx : conv_oom(c);
    }
    case T_OBJECT:
        if (json_object_get(s, "propertyNames") && !all_strings(json_object_get(s, "propertyNames")))
            return conv_fail(c, DJ_ERR_INVALID, "unsupported keyword 'propertyNames' (only one that every key satisfies)");
        if (json_object_get(s, "properties") || json_object_get(s, "required") ||
            json_object_get(s, "additionalProperties") || b->opts.strict || json_object_get(s, "minProperties") ||
            json_object_get(s, "maxProperties"))
            return object_body(c, s, hint);
        p = prim(b, P_OBJECT);
        break;
    case T_ARRAY:
        if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "minItems") ||
            json_object_get(s, "maxItems"))
            return array_body(c, s, hint);
        p = prim(b, P_ARRAY);
        break;
    }
    if (!p) return conv_oom(c);
    char *r = xstrdup(p);
    return r ? r : conv_oom(c);
}

static const char *add_body(struct conv *c, const char *hint, char *body) {
    if (!body) return NULL;
    const char *r = builder_put(c->b, hint, body);
    free(body);
    return r ? r : conv_oom(c);
}

static const char *union_rule(struct conv *c, const char *hint, const char **names, size_t n) {
    struct sb s = {0};
    for (size_t i = 0; i < n; i++) sb_printf(&s, "%s%s", i ? " | " : "", names[i]);
    return add_body(c, hint, sb_take(&s));
}

static const char *visit_inner(struct conv *c, json_t *s, const char *hint) {
    if (json_is_true(s)) return add_body(c, hint, prim(c->b, P_VALUE) ? xstrdup(prim(c->b, P_VALUE)) : NULL);
    if (json_is_false(s)) return conv_fail(c, DJ_ERR_INVALID, "the schema false matches nothing");
    if (!json_is_object(s)) return conv_fail(c, DJ_ERR_INVALID, "a schema must be an object or a boolean");
    if (!check_keywords(c, s)) return NULL;
    json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    static const char *const only_ref[] = {"$ref", NULL};
    static const char *const only_unions[] = {"anyOf", "oneOf", NULL};
    if (json_object_get(s, "allOf") || (ref && other_constraint(s, only_ref))) {
        json_t *m = merge(c, &s, 1);
        if (!m) return NULL;
        const char *r = visit(c, m, hint);
        json_decref(m);
        return r;
    }
    if (ref) return visit_ref(c, json_string_value(ref));
    if (any || one) {
        /* oneOf is treated as anyOf: a grammar cannot require that exactly one
         * branch matches (that needs the complement of the others). */
        if (any && one) {
            json_t *m = merge(c, &s, 1); /* makes their product */
            if (!m) return NULL;
            const char *r = visit(c, m, hint);
            json_decref(m);
            return r;
        }
        json_t *alts = any ? any : one;
        bool siblings = other_constraint(s, only_unions) != NULL;
        json_t *rest = NULL;
        if (siblings) {
            if (!(rest = json_copy(s))) return conv_oom(c);
            json_object_del(rest, any ? "anyOf" : "oneOf");
        }
        size_t n = json_array_size(alts);
        const char **names = calloc(n, sizeof *names);
        if (!names) {
            json_decref(rest);
            return conv_oom(c);
        }
        const char *r = NULL;
        size_t i;
        for (i = 0; i < n; i++) {
            struct sb h = {0};
            sb_printf(&h, "%s-%zu", hint, i);
            char *hs = sb_take(&h);
            if (!hs) {
                conv_oom(c);
                break;
            }
            size_t old = path_push_idx(c, any ? "anyOf" : "oneOf", i);
            if (siblings) {
                json_t *pair[2] = {rest, json_array_get(alts, i)};
                json_t *m = merge(c, pair, 2);
                names[i] = m ? visit(c, m, hs) : NULL;
                json_decref(m);
            } else {
                names[i] = visit(c, json_array_get(alts, i), hs);
            }
            path_pop(c, old);
            free(hs);
            if (!names[i]) break;
        }
        if (i == n) r = n == 1 ? names[0] : union_rule(c, hint, names, n);
        free(names);
        json_decref(rest);
        return r;
    }
    unsigned types = type_mask(s);
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER; /* integers are numbers */
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        static const char *const only_enum[] = {"enum", "const", "type", NULL};
        const char *o = other_constraint(s, only_enum);
        if (o)
            return conv_fail(c, DJ_ERR_INVALID, "'%s' together with '%s' is not supported", en ? "enum" : "const",
                             kw_name(o));
        struct sb body = {0};
        size_t n_alt = 0, n_vals = en ? json_array_size(en) : 1, n_seen = 1;
        while (n_seen < 2 * n_vals) n_seen *= 2;
        /* the values kept so far (index + 1, 0 empty), open addressing on value_hash: a
         * pairwise search for repeats made a 50,000-value enum cost 10 s */
        size_t *seen = calloc(n_seen, sizeof *seen);
        if (!seen) return conv_oom(c);
        for (size_t i = 0; i < n_vals; i++) {
            json_t *v = en ? json_array_get(en, i) : cn;
            if (en && cn && !json_equal(v, cn)) continue;
            if (!value_has_type(v, types)) continue;
            size_t j = (size_t)value_hash(v, 0) & (n_seen - 1);
            while (seen[j] && !json_equal(v, en ? json_array_get(en, seen[j] - 1) : cn)) j = (j + 1) & (n_seen - 1);
            if (seen[j]) continue; /* a repeat */
            seen[j] = i + 1;
            if (n_alt++) sb_puts(&body, " | ");
            if (!value_literal_into(c, &body, v, 0)) {
                sb_free(&body);
                free(seen);
                return NULL;
            }
        }
        free(seen);
        if (!n_alt) {
            sb_free(&body);
            return conv_fail(c, DJ_ERR_INVALID, "no value of '%s' is allowed by the rest of the schema", en ? "enum" : "const");
        }
        char *bd = sb_take(&body);
        return bd ? add_body(c, hint, bd) : conv_oom(c);
    }
    if (!json_object_get(s, "type") && !other_constraint(s, (const char *const[]){NULL}))
        return add_body(c, hint, prim(c->b, P_VALUE) ? xstrdup(prim(c->b, P_VALUE)) : NULL);
    /* one body per type, in the order written (all seven when untyped) */
    unsigned order[7], n_types = 0;
    json_t *tj = json_object_get(s, "type");
    if (json_is_array(tj)) {
        for (size_t i = 0; i < json_array_size(tj); i++) {
            unsigned bit = type_bit(json_string_value(json_array_get(tj, i)));
            bool seen = false;
            for (unsigned j = 0; j < n_types; j++) seen |= order[j] == bit;
            if (!seen && (bit & types)) order[n_types++] = bit;
        }
    } else {
        static const unsigned all[7] = {T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_INTEGER, T_BOOLEAN, T_NULL};
        for (unsigned i = 0; i < 7; i++)
            if (all[i] & types) order[n_types++] = all[i];
    }
    if (n_types == 1) return add_body(c, hint, typed_body(c, s, order[0], hint));
    const char *names[7];
    for (unsigned i = 0; i < n_types; i++) {
        char *h = hint_join(hint, type_names[__builtin_ctz(order[i])]);
        if (!h) return conv_oom(c);
        names[i] = add_body(c, h, typed_body(c, s, order[i], h));
        free(h);
        if (!names[i]) return NULL;
    }
    return union_rule(c, hint, names, n_types);
}

static const char *visit(struct conv *c, json_t *s, const char *hint) {
    if (c->depth >= MAX_DEPTH) return conv_fail(c, DJ_ERR_INVALID, "schemas nested deeper than %d", MAX_DEPTH);
    if (++c->b->n_schemas > MAX_SCHEMAS)
        return conv_fail(c, DJ_ERR_INVALID,
                         "over the limit of %d schemas converted into one grammar (each property, item, anyOf "
                         "branch and $ref target counts, and each copy that merging allOf or anyOf siblings makes)",
                         MAX_SCHEMAS);
    c->depth++;
    const char *r = visit_inner(c, s, hint);
    c->depth--;
    if (r && c->b->n_text > MAX_GRAMMAR_TEXT)
        return conv_fail(c, DJ_ERR_INVALID, "the grammar would be over the limit of %zu MB", MAX_GRAMMAR_TEXT >> 20);
    if (!r && !c->st) conv_oom(c);
    return r;
}

/* ---- public API ------------------------------------------------------------------ */

struct dj_json_schema_opts json_schema_default_opts(void) {
    return (struct dj_json_schema_opts){.whitespace = DJ_JSON_WS_COMPACT};
}

enum dj_status gbnf_builder_add_schema(struct dj_gbnf_builder *b, json_t *schema, const char *name, const char **rule) {
    struct conv c = {.b = b, .doc = schema};
    const char *saved_prefix = b->opts.rule_prefix;
    char *prefix = NULL;
    if (!saved_prefix) {
        struct sb p = {0};
        sb_printf(&p, "%s", name);
        if (!(prefix = sb_take(&p))) return DJ_ERR_NOMEM;
        b->opts.rule_prefix = prefix;
    }
    const char *r = visit(&c, schema, name);
    b->opts.rule_prefix = saved_prefix;
    free(prefix);
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    free(c.open);
    sb_free(&c.path);
    if (!r) return c.st ? c.st : DJ_ERR_NOMEM;
    *rule = r;
    return DJ_OK;
}

enum dj_status json_schema_to_gbnf_value(json_t *schema, const struct dj_json_schema_opts *opts, char **gbnf_out) {
    struct dj_gbnf_builder *b;
    enum dj_status st = gbnf_builder_create(opts, &b);
    if (st) return st;
    const char *root = b->opts.root_name ? b->opts.root_name : "root";
    const char *r;
    st = gbnf_builder_add_schema(b, schema, root, &r);
    if (!st && strcmp(r, root)) {
        /* the value's rule got another name (a $ref alias, a clash): alias it */
        if (!builder_put(b, root, r)) st = DJ_ERR_NOMEM;
    }
    if (!st) st = gbnf_builder_finish(b, root, gbnf_out);
    gbnf_builder_free(b);
    return st;
}

enum dj_status json_schema_to_gbnf(const char *schema_json, size_t n, const struct dj_json_schema_opts *opts,
                                   char **gbnf_out) {
    json_error_t err;
    json_t *s = json_loadb(schema_json, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!s)
        return dj_fail(DJ_ERR_FORMAT, "json schema: line %d, column %d: %s", err.line, err.column, err.text);
    enum dj_status st = json_schema_to_gbnf_value(s, opts, gbnf_out);
    json_decref(s);
    return st;
}
