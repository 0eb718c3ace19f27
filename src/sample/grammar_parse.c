/*
 * grammar_parse.c — GBNF text to the grammar IR (struct dj_grammar), and back.
 *
 * The syntax and the meaning are llama.cpp's (src/llama-grammar.cpp,
 * llama_grammar_parser): a recursive-descent parser over rules
 * `name ::= alternatives`, with groups and repetitions rewritten into
 * generated rules exactly as llama.cpp's handle_repetitions does:
 *
 *   S{m,n}  ->  S .. S (m times) S'(n-m)     S'(k) ::= S S'(k-1) |   S'(1) ::= S |
 *   S{m,}   ->  S .. S (m times) S'          S'    ::= S S' |
 *   S*  = S{0,}    S+ = S{1,}    S? = S{0,1}
 *   ( ... ) ->  a generated rule holding the alternatives
 *
 * Where this file differs from llama.cpp, on purpose:
 *   - Rule indices follow the order in which rules are *defined* (a rule's
 *     `name ::=`, or the point where a generated rule is made), not the order
 *     of first mention.  grammar_to_gbnf prints rules in index order, one
 *     definition each, so re-parsing its output gives the same indices: the
 *     round trip is exact.
 *   - Generated rules are named "<rule>-<n>" (n: the generated rule's index,
 *     bumped until the name is unused).  `-` is a name character in GBNF, so a
 *     user may well write `root-1 ::= ...`; generated names are therefore
 *     chosen after parsing, and references in the text always mean user rules.
 *   - The input is (src, n): never read past n, and a NUL byte is an error
 *     (llama.cpp stops at it).  Raw UTF-8 in literals must be valid.
 *   - `[]` and `[^]` are errors (llama.cpp turns them into nothing at all),
 *     `{m,n}` with m > n is an error, counts over 1000 are errors, groups
 *     nest at most DJ_GRAMMAR_MAX_DEPTH deep, and expanded repetitions stop at
 *     DJ_GRAMMAR_MAX_ELEMS elements (so no input can ask for gigabytes).
 *   - Left recursion is found with full nullable tracking (a rule is nullable
 *     when any alternative is made only of nullable rules), over every rule.
 *
 * Errors: DJ_ERR_FORMAT with "grammar: line L, column C: expected X" (L and C
 * 1-based, C counted in bytes), or one of the whole-grammar messages.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"
#include "tokenizer/tokenizer.h"

#define DJ_GRAMMAR_MAX_DEPTH 256
#define DJ_GRAMMAR_MAX_REPEAT 1000
/* 4M elements = 32 MB of IR: far beyond any real grammar (json.gbnf is ~300). */
#define DJ_GRAMMAR_MAX_ELEMS ((size_t)1 << 22)

/* ---- growable arrays ---------------------------------------------------- */

struct elem_vec {
    struct dj_gelem *v;
    size_t n, cap;
};

struct sym {
    char *name;       /* user rules: as written; generated: NULL until finish() names it */
    size_t len;
    bool defined;
    bool generated;
    size_t parent;    /* generated: the user rule whose definition made it */
    size_t order;     /* final rule index (definition order) */
    size_t first_use; /* byte offset of the first mention (for "undefined rule") */
    struct elem_vec body;
};

struct parser {
    const char *src;
    size_t n, pos;
    const struct dj_vocab *vocab;
    struct sym *syms; /* by temporary id: order of first mention */
    size_t n_syms, cap_syms;
    size_t *ht;       /* open addressing: name -> sym id; SIZE_MAX = empty */
    size_t ht_cap;
    size_t n_defined;
    size_t n_elems_total; /* every element pushed so far, for the size cap */
    size_t depth;
    size_t item;      /* where the item being parsed starts: where "too large" points */
    bool has_tokens;
};

static void elem_vec_free(struct elem_vec *v) {
    free(v->v);
    v->v = NULL;
    v->n = v->cap = 0;
}

/* Grows to hold `extra` more; the element budget is charged here so that
 * every path that makes elements (copies for repetitions included) is capped. */
static enum dj_status elem_vec_reserve(struct parser *p, struct elem_vec *v, size_t extra) {
    if (extra > DJ_GRAMMAR_MAX_ELEMS - p->n_elems_total) return DJ_ERR_INVALID; /* caller words the message */
    if (v->n + extra > v->cap) {
        size_t cap = v->cap ? v->cap : 16;
        while (cap < v->n + extra) cap *= 2;
        struct dj_gelem *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        v->v = nv;
        v->cap = cap;
    }
    return DJ_OK;
}

/* ---- positions and errors ------------------------------------------------- */

static void line_col(const char *src, size_t n, size_t pos, size_t *line, size_t *col) {
    size_t l = 1, line_start = 0;
    if (pos > n) pos = n;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n' || (src[i] == '\r' && (i + 1 >= n || src[i + 1] != '\n'))) {
            l++;
            line_start = i + 1;
        }
    }
    *line = l;
    *col = pos - line_start + 1;
}

/* "grammar: line L, column C: expected <what>" at byte offset pos. */
DJ_PRINTF(3, 4)
static enum dj_status fail_at(const struct parser *p, size_t pos, const char *fmt, ...) {
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t line, col;
    line_col(p->src, p->n, pos, &line, &col);
    return dj_fail(DJ_ERR_FORMAT, "grammar: line %zu, column %zu: expected %s", line, col, what);
}

static enum dj_status reserve(struct parser *p, struct elem_vec *v, size_t extra) {
    enum dj_status st = elem_vec_reserve(p, v, extra);
    if (st == DJ_ERR_INVALID)
        return fail_at(p, p->item, "a smaller grammar (repetitions expand to more than %zu elements)",
                       DJ_GRAMMAR_MAX_ELEMS);
    return st;
}

static enum dj_status push(struct parser *p, struct elem_vec *v, uint32_t type, uint32_t value) {
    enum dj_status st = reserve(p, v, 1);
    if (st != DJ_OK) return st;
    v->v[v->n++] = (struct dj_gelem){type, value};
    p->n_elems_total++;
    return DJ_OK;
}

#define TRY(x)                               \
    do {                                     \
        enum dj_status st_ = (x);            \
        if (st_ != DJ_OK) return st_;        \
    } while (0)

/* ---- symbols -------------------------------------------------------------- */

static uint64_t hash_name(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static size_t ht_find(const struct parser *p, const char *s, size_t len) {
    if (!p->ht_cap) return SIZE_MAX;
    size_t mask = p->ht_cap - 1;
    for (size_t i = (size_t)hash_name(s, len) & mask;; i = (i + 1) & mask) {
        size_t id = p->ht[i];
        if (id == SIZE_MAX) return SIZE_MAX;
        if (p->syms[id].len == len && memcmp(p->syms[id].name, s, len) == 0) return id;
    }
}

static void ht_put(struct parser *p, size_t id) {
    size_t mask = p->ht_cap - 1;
    size_t i = (size_t)hash_name(p->syms[id].name, p->syms[id].len) & mask;
    while (p->ht[i] != SIZE_MAX) i = (i + 1) & mask;
    p->ht[i] = id;
}

/* Keeps the table at most half full; every named sym is in it. */
static enum dj_status ht_grow(struct parser *p, size_t n_named) {
    if (2 * (n_named + 1) <= p->ht_cap) return DJ_OK;
    size_t cap = p->ht_cap ? p->ht_cap * 2 : 64;
    size_t *nt = malloc(cap * sizeof *nt);
    if (!nt) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    for (size_t i = 0; i < cap; i++) nt[i] = SIZE_MAX;
    size_t *old = p->ht, old_cap = p->ht_cap;
    p->ht = nt;
    p->ht_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] != SIZE_MAX) ht_put(p, old[i]);
    free(old);
    return DJ_OK;
}

static enum dj_status new_sym(struct parser *p, size_t *id) {
    if (p->n_syms == p->cap_syms) {
        size_t cap = p->cap_syms ? p->cap_syms * 2 : 32;
        struct sym *ns = realloc(p->syms, cap * sizeof *ns);
        if (!ns) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        p->syms = ns;
        p->cap_syms = cap;
    }
    memset(&p->syms[p->n_syms], 0, sizeof p->syms[p->n_syms]);
    *id = p->n_syms++;
    return DJ_OK;
}

/* The user rule named src[pos..pos+len), made on first mention. */
static enum dj_status get_sym(struct parser *p, size_t pos, size_t len, size_t *id) {
    size_t found = ht_find(p, p->src + pos, len);
    if (found != SIZE_MAX) {
        *id = found;
        return DJ_OK;
    }
    TRY(ht_grow(p, p->n_syms));
    char *name = malloc(len + 1);
    if (!name) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    memcpy(name, p->src + pos, len);
    name[len] = '\0';
    enum dj_status st = new_sym(p, id);
    if (st != DJ_OK) {
        free(name);
        return st;
    }
    struct sym *s = &p->syms[*id];
    s->name = name;
    s->len = len;
    s->first_use = pos;
    ht_put(p, *id);
    return DJ_OK;
}

/* A generated rule, defined now (its index is fixed here). */
static enum dj_status gen_sym(struct parser *p, size_t parent, size_t *id) {
    TRY(new_sym(p, id));
    struct sym *s = &p->syms[*id];
    s->generated = true;
    s->defined = true;
    s->parent = parent;
    s->order = p->n_defined++;
    s->first_use = p->pos;
    return DJ_OK;
}

/* ---- lexing --------------------------------------------------------------- */

static int at(const struct parser *p, size_t pos) { return pos < p->n ? (unsigned char)p->src[pos] : -1; }

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_word(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit(c); }

static void skip_space(struct parser *p, bool newline_ok) {
    for (;;) {
        int c = at(p, p->pos);
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->src[p->pos] != '\r' && p->src[p->pos] != '\n') p->pos++;
        } else {
            return;
        }
    }
}

/* Decimal digits at p->pos, saturating (the caller rejects anything over its bound). */
static uint64_t parse_int(struct parser *p) {
    uint64_t v = 0;
    while (is_digit(at(p, p->pos))) {
        if (v < UINT64_MAX / 16) v = v * 10 + (uint64_t)(at(p, p->pos) - '0');
        p->pos++;
    }
    return v;
}

static int hex_val(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One strictly valid UTF-8 sequence (RFC 3629: no overlongs, no surrogates,
 * at most U+10FFFF) at p->pos. */
static enum dj_status parse_utf8(struct parser *p, uint32_t *cp) {
    size_t start = p->pos;
    int c = at(p, start);
    uint32_t v;
    size_t len;
    uint32_t min;
    if (c < 0x80) {
        *cp = (uint32_t)c;
        p->pos++;
        return DJ_OK;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = (uint32_t)c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = (uint32_t)c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = (uint32_t)c & 0x07, min = 0x10000;
    } else {
        return fail_at(p, start, "valid UTF-8 (found the byte 0x%02X)", (unsigned)c);
    }
    for (size_t i = 1; i < len; i++) {
        int b = at(p, start + i);
        if (b < 0 || (b & 0xC0) != 0x80) return fail_at(p, start, "valid UTF-8 (truncated sequence)");
        v = (v << 6) | ((uint32_t)b & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail_at(p, start, "valid UTF-8 (overlong, surrogate or past U+10FFFF)");
    *cp = v;
    p->pos = start + len;
    return DJ_OK;
}

/* One character of a string literal or a class: an escape or a UTF-8 sequence.
 * The escapes are llama.cpp's parse_char set, no more. */
static enum dj_status parse_char(struct parser *p, uint32_t *cp) {
    size_t start = p->pos;
    int c = at(p, start);
    if (c != '\\') return parse_utf8(p, cp);
    int e = at(p, start + 1);
    size_t n_hex = 0;
    switch (e) {
    case 'x': n_hex = 2; break;
    case 'u': n_hex = 4; break;
    case 'U': n_hex = 8; break;
    case 't': *cp = '\t'; break;
    case 'r': *cp = '\r'; break;
    case 'n': *cp = '\n'; break;
    case '\\':
    case '"':
    case '[':
    case ']': *cp = (uint32_t)e; break;
    default:
        return fail_at(p, start, "an escape: \\xHH \\uHHHH \\UHHHHHHHH \\t \\n \\r \\\\ \\\" \\[ or \\]");
    }
    if (!n_hex) {
        p->pos = start + 2;
        return DJ_OK;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n_hex; i++) {
        int h = hex_val(at(p, start + 2 + i));
        if (h < 0) return fail_at(p, start + 2 + i, "%zu hex digits after \\%c", n_hex, e);
        v = v * 16 + (uint64_t)h;
    }
    if (v > 0x10FFFF) return fail_at(p, start, "a code point up to \\U0010FFFF (found 0x%llX)", (unsigned long long)v);
    *cp = (uint32_t)v;
    p->pos = start + 2 + n_hex;
    return DJ_OK;
}

/* ---- the grammar proper ----------------------------------------------------- */

static enum dj_status parse_alternates(struct parser *p, size_t parent, bool nested, struct elem_vec *rule);

/* The repetition rewrite of llama.cpp's handle_repetitions, applied to
 * rule[last_start..n).  max == SIZE_MAX: unbounded. */
static enum dj_status repeat(struct parser *p, struct elem_vec *rule, size_t last_start, size_t min, size_t max,
                             size_t parent) {
    size_t n_prev = rule->n - last_start;
    struct elem_vec prev = {0};
    enum dj_status st = DJ_OK;
    prev.v = malloc(n_prev * sizeof *prev.v);
    if (!prev.v) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    memcpy(prev.v, rule->v + last_start, n_prev * sizeof *prev.v);
    prev.n = prev.cap = n_prev;

    if (min == 0) {
        rule->n = last_start;
    } else {
        for (size_t i = 1; i < min && st == DJ_OK; i++) {
            st = reserve(p, rule, n_prev);
            if (st != DJ_OK) break;
            memcpy(rule->v + rule->n, prev.v, n_prev * sizeof *prev.v);
            rule->n += n_prev;
            p->n_elems_total += n_prev;
        }
    }
    bool no_max = max == SIZE_MAX;
    size_t n_opt = no_max ? 1 : max - min;
    size_t last_rec = 0;
    for (size_t i = 0; i < n_opt && st == DJ_OK; i++) {
        size_t id;
        st = gen_sym(p, parent, &id);
        if (st != DJ_OK) break;
        struct elem_vec rec = {0};
        st = reserve(p, &rec, n_prev + 3);
        if (st != DJ_OK) break;
        memcpy(rec.v, prev.v, n_prev * sizeof *prev.v);
        rec.n = n_prev;
        p->n_elems_total += n_prev;
        if (i > 0 || no_max) rec.v[rec.n++] = (struct dj_gelem){DJ_GE_RULE_REF, (uint32_t)(no_max ? id : last_rec)};
        rec.v[rec.n++] = (struct dj_gelem){DJ_GE_ALT, 0};
        rec.v[rec.n++] = (struct dj_gelem){DJ_GE_END, 0};
        p->n_elems_total += 3;
        p->syms[id].body = rec;
        last_rec = id;
    }
    if (st == DJ_OK && n_opt > 0) st = push(p, rule, DJ_GE_RULE_REF, (uint32_t)last_rec);
    elem_vec_free(&prev);
    return st;
}

static enum dj_status parse_token(struct parser *p, struct elem_vec *rule) {
    uint32_t type = DJ_GE_TOKEN;
    if (at(p, p->pos) == '!') {
        type = DJ_GE_TOKEN_NOT;
        p->pos++;
        if (at(p, p->pos) != '<') return fail_at(p, p->pos, "'<' after '!' (a token: !<[id]>)");
    }
    size_t lt = p->pos;
    p->pos++;
    uint32_t tok;
    if (at(p, p->pos) == '[') {
        p->pos++;
        size_t num = p->pos;
        if (!is_digit(at(p, num))) return fail_at(p, num, "a token id");
        uint64_t v = parse_int(p);
        if (v > INT32_MAX) return fail_at(p, num, "a token id up to %d", INT32_MAX);
        if (p->vocab && v >= vocab_n_tokens(p->vocab))
            return fail_at(p, num, "a token id below %zu (the vocabulary's size)", vocab_n_tokens(p->vocab));
        if (at(p, p->pos) != ']') return fail_at(p, p->pos, "']' after the token id");
        p->pos++;
        if (at(p, p->pos) != '>') return fail_at(p, p->pos, "'>' after ']'");
        p->pos++;
        tok = (uint32_t)v;
    } else {
        while (p->pos < p->n && p->src[p->pos] != '>') p->pos++;
        if (p->pos >= p->n) {
            size_t line, col;
            line_col(p->src, p->n, lt, &line, &col);
            return fail_at(p, p->pos, "'>' to close the token that starts at line %zu, column %zu", line, col);
        }
        p->pos++;
        const char *text = p->src + lt;
        size_t len = p->pos - lt;
        int shown = len > 64 ? 64 : (int)len;
        if (!p->vocab)
            return fail_at(p, lt, "a token id like <[123]> (no vocabulary to look up '%.*s')", shown, text);
        size_t n_tok = vocab_n_tokens(p->vocab), found = SIZE_MAX;
        for (size_t t = 0; t < n_tok && found == SIZE_MAX; t++) {
            const char *tt = vocab_token_text(p->vocab, (dj_token)t);
            if (tt && strlen(tt) == len && memcmp(tt, text, len) == 0) found = t;
        }
        if (found == SIZE_MAX || found > INT32_MAX)
            return fail_at(p, lt, "a token of the vocabulary (none is '%.*s')", shown, text);
        tok = (uint32_t)found;
    }
    p->has_tokens = true;
    return push(p, rule, type, tok);
}

static enum dj_status parse_sequence(struct parser *p, size_t parent, bool nested, struct elem_vec *rule) {
    size_t last_start = rule->n;
    while (p->pos < p->n) {
        size_t start = p->pos;
        int c = at(p, start);
        p->item = start;
        if (c == '"') {
            p->pos++;
            last_start = rule->n;
            for (;;) {
                if (p->pos >= p->n) {
                    size_t line, col;
                    line_col(p->src, p->n, start, &line, &col);
                    return fail_at(p, p->pos, "'\"' to close the string that starts at line %zu, column %zu", line,
                                   col);
                }
                if (p->src[p->pos] == '"') break;
                uint32_t cp;
                TRY(parse_char(p, &cp));
                TRY(push(p, rule, DJ_GE_CHAR, cp));
            }
            p->pos++;
            skip_space(p, nested);
        } else if (c == '[') {
            p->pos++;
            uint32_t first = DJ_GE_CHAR;
            if (at(p, p->pos) == '^') {
                first = DJ_GE_CHAR_NOT;
                p->pos++;
            }
            last_start = rule->n;
            if (at(p, p->pos) == ']') return fail_at(p, p->pos, "a character or a range before ']'");
            for (;;) {
                if (p->pos >= p->n) {
                    size_t line, col;
                    line_col(p->src, p->n, start, &line, &col);
                    return fail_at(p, p->pos, "']' to close the class that starts at line %zu, column %zu", line, col);
                }
                if (p->src[p->pos] == ']') break;
                uint32_t cp;
                TRY(parse_char(p, &cp));
                TRY(push(p, rule, rule->n > last_start ? DJ_GE_CHAR_ALT : first, cp));
                /* As llama.cpp: `-` before `]` is a plain `-`. */
                if (at(p, p->pos) == '-' && at(p, p->pos + 1) != ']') {
                    p->pos++;
                    if (p->pos >= p->n) continue; /* reported as the unclosed class */
                    TRY(parse_char(p, &cp));
                    TRY(push(p, rule, DJ_GE_CHAR_RNG_UPPER, cp));
                }
            }
            p->pos++;
            skip_space(p, nested);
        } else if (c == '<' || c == '!') {
            last_start = rule->n;
            TRY(parse_token(p, rule));
            skip_space(p, nested);
        } else if (is_word(c)) {
            while (is_word(at(p, p->pos))) p->pos++;
            size_t id;
            TRY(get_sym(p, start, p->pos - start, &id));
            skip_space(p, nested);
            last_start = rule->n;
            TRY(push(p, rule, DJ_GE_RULE_REF, (uint32_t)id));
        } else if (c == '(') {
            if (p->depth >= DJ_GRAMMAR_MAX_DEPTH)
                return fail_at(p, start, "at most %d nested groups", DJ_GRAMMAR_MAX_DEPTH);
            p->pos++;
            skip_space(p, true);
            size_t id;
            TRY(gen_sym(p, parent, &id));
            struct elem_vec sub = {0};
            p->depth++;
            enum dj_status st = parse_alternates(p, parent, true, &sub);
            p->depth--;
            if (st != DJ_OK) {
                elem_vec_free(&sub);
                return st;
            }
            p->syms[id].body = sub;
            last_start = rule->n;
            TRY(push(p, rule, DJ_GE_RULE_REF, (uint32_t)id));
            if (at(p, p->pos) != ')') {
                size_t line, col;
                line_col(p->src, p->n, start, &line, &col);
                return fail_at(p, p->pos, "')' to close the group that opens at line %zu, column %zu", line, col);
            }
            p->pos++;
            skip_space(p, nested);
        } else if (c == '.') {
            last_start = rule->n;
            TRY(push(p, rule, DJ_GE_CHAR_ANY, 0));
            p->pos++;
            skip_space(p, nested);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            size_t min, max;
            p->pos++;
            skip_space(p, nested);
            if (c == '*') {
                min = 0, max = SIZE_MAX;
            } else if (c == '+') {
                min = 1, max = SIZE_MAX;
            } else if (c == '?') {
                min = 0, max = 1;
            } else {
                size_t num = p->pos;
                if (!is_digit(at(p, num))) return fail_at(p, num, "a number after '{'");
                uint64_t m = parse_int(p);
                if (m > DJ_GRAMMAR_MAX_REPEAT) return fail_at(p, num, "a count up to %d", DJ_GRAMMAR_MAX_REPEAT);
                min = (size_t)m;
                max = SIZE_MAX;
                skip_space(p, nested);
                if (at(p, p->pos) == '}') {
                    max = min;
                } else if (at(p, p->pos) == ',') {
                    p->pos++;
                    skip_space(p, nested);
                    num = p->pos;
                    if (is_digit(at(p, num))) {
                        uint64_t x = parse_int(p);
                        if (x > DJ_GRAMMAR_MAX_REPEAT)
                            return fail_at(p, num, "a count up to %d", DJ_GRAMMAR_MAX_REPEAT);
                        if (x < m) return fail_at(p, num, "a maximum count >= the minimum (%zu)", min);
                        max = (size_t)x;
                        skip_space(p, nested);
                    }
                    if (at(p, p->pos) != '}') return fail_at(p, p->pos, "'}'");
                } else {
                    return fail_at(p, p->pos, "',' or '}'");
                }
                p->pos++;
                skip_space(p, nested);
            }
            if (last_start == rule->n) return fail_at(p, start, "an item before '%c'", c);
            p->item = start;
            TRY(repeat(p, rule, last_start, min, max, parent));
        } else {
            break;
        }
    }
    return DJ_OK;
}

static enum dj_status parse_alternates(struct parser *p, size_t parent, bool nested, struct elem_vec *rule) {
    TRY(parse_sequence(p, parent, nested, rule));
    while (at(p, p->pos) == '|') {
        TRY(push(p, rule, DJ_GE_ALT, 0));
        p->pos++;
        skip_space(p, true);
        TRY(parse_sequence(p, parent, nested, rule));
    }
    return push(p, rule, DJ_GE_END, 0);
}

static enum dj_status parse_rule(struct parser *p) {
    size_t start = p->pos;
    while (is_word(at(p, p->pos))) p->pos++;
    if (p->pos == start) return fail_at(p, start, "a rule name");
    size_t len = p->pos - start;
    skip_space(p, false);
    if (!(at(p, p->pos) == ':' && at(p, p->pos + 1) == ':' && at(p, p->pos + 2) == '='))
        return fail_at(p, p->pos, "'::=' after the rule name");
    p->pos += 3;
    skip_space(p, true);
    size_t id;
    TRY(get_sym(p, start, len, &id));
    if (!p->syms[id].defined) {
        p->syms[id].defined = true;
        p->syms[id].order = p->n_defined++;
    }
    /* A second definition replaces the first, as in llama.cpp; the first
     * one's generated rules stay (unreferenced). */
    struct elem_vec body = {0};
    enum dj_status st = parse_alternates(p, id, false, &body);
    if (st != DJ_OK) {
        elem_vec_free(&body);
        return st;
    }
    elem_vec_free(&p->syms[id].body);
    p->syms[id].body = body;

    int c = at(p, p->pos);
    if (c == '\r') {
        p->pos += at(p, p->pos + 1) == '\n' ? 2 : 1;
    } else if (c == '\n') {
        p->pos++;
    } else if (c >= 0) {
        return fail_at(p, p->pos, "a newline or the end of the input");
    }
    skip_space(p, true);
    return DJ_OK;
}

/* ---- whole-grammar checks --------------------------------------------------- */

static bool is_term(uint32_t type) { return type != DJ_GE_RULE_REF && type != DJ_GE_ALT && type != DJ_GE_END; }

/* Finds a rule that can derive itself at its left edge (through nullable
 * prefixes).  On a cycle, writes "a -> b -> a" into msg and returns true. */
static enum dj_status find_left_recursion(const struct dj_grammar *g, char *msg, size_t cap, bool *found) {
    size_t nr = g->n_rules, ne = g->n_elems;
    enum dj_status st = DJ_ERR_NOMEM;
    *found = false;
    /* alternatives: one per ALT/END element */
    bool *nullable = calloc(nr ? nr : 1, sizeof *nullable);
    size_t *alt_rule = malloc((ne ? ne : 1) * sizeof *alt_rule); /* by the alternative's first element */
    size_t *pending = calloc(ne ? ne : 1, sizeof *pending);      /* refs not yet known nullable, by alt start */
    size_t *occ_start = calloc(nr + 1, sizeof *occ_start);
    size_t *occ = malloc((ne ? ne : 1) * sizeof *occ);
    size_t *work = malloc((nr ? nr : 1) * sizeof *work);
    size_t *edge_start = calloc(nr + 1, sizeof *edge_start);
    size_t *edges = malloc((ne ? ne : 1) * sizeof *edges);
    uint8_t *color = calloc(nr ? nr : 1, 1);
    size_t *stk = malloc((nr ? nr : 1) * sizeof *stk);
    size_t *stk_edge = malloc((nr ? nr : 1) * sizeof *stk_edge);
    size_t *stk_pos = malloc((nr ? nr : 1) * sizeof *stk_pos);
    if (!nullable || !alt_rule || !pending || !occ_start || !occ || !work || !edge_start || !edges || !color || !stk ||
        !stk_edge || !stk_pos) {
        dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }

    /* Nullable rules, by a worklist: an alternative with no terminal becomes
     * nullable when its last pending reference does. */
    size_t n_work = 0;
    for (size_t r = 0; r < nr; r++) {
        size_t i = g->rule_start[r];
        while (i < ne) {
            size_t a = i, refs = 0;
            bool term = false;
            for (; i < ne && g->elems[i].type != DJ_GE_ALT && g->elems[i].type != DJ_GE_END; i++) {
                if (g->elems[i].type == DJ_GE_RULE_REF) refs++;
                else term = true;
            }
            alt_rule[a] = r;
            pending[a] = term ? SIZE_MAX : refs;
            if (!term) {
                for (size_t j = a; j < i; j++) occ_start[g->elems[j].value + 1]++;
            }
            if (!term && refs == 0 && !nullable[r]) {
                nullable[r] = true;
                work[n_work++] = r;
            }
            if (i >= ne || g->elems[i].type == DJ_GE_END) break;
            i++;
        }
    }
    for (size_t r = 0; r < nr; r++) occ_start[r + 1] += occ_start[r];
    {
        size_t *fill = edge_start; /* borrowed as a cursor; reset below */
        memcpy(fill, occ_start, (nr + 1) * sizeof *fill);
        for (size_t r = 0; r < nr; r++) {
            size_t i = g->rule_start[r];
            while (i < ne) {
                size_t a = i;
                for (; i < ne && g->elems[i].type != DJ_GE_ALT && g->elems[i].type != DJ_GE_END; i++) {}
                if (pending[a] != SIZE_MAX)
                    for (size_t j = a; j < i; j++) occ[fill[g->elems[j].value]++] = a;
                if (i >= ne || g->elems[i].type == DJ_GE_END) break;
                i++;
            }
        }
        memset(edge_start, 0, (nr + 1) * sizeof *edge_start);
    }
    while (n_work) {
        size_t r = work[--n_work];
        for (size_t k = occ_start[r]; k < occ_start[r + 1]; k++) {
            size_t a = occ[k];
            if (--pending[a] == 0 && !nullable[alt_rule[a]]) {
                nullable[alt_rule[a]] = true;
                work[n_work++] = alt_rule[a];
            }
        }
    }

    /* Left-edge graph: r -> t when t can come first in r. */
    for (int pass = 0; pass < 2; pass++) {
        size_t n_edges = 0;
        for (size_t r = 0; r < nr; r++) {
            if (pass == 1) edge_start[r] = n_edges;
            bool at_left = true;
            for (size_t i = g->rule_start[r]; i < ne; i++) {
                uint32_t t = g->elems[i].type;
                if (t == DJ_GE_END) break;
                if (t == DJ_GE_ALT) {
                    at_left = true;
                } else if (t == DJ_GE_RULE_REF) {
                    if (at_left) {
                        if (pass == 1) edges[n_edges] = g->elems[i].value;
                        n_edges++;
                        at_left = nullable[g->elems[i].value];
                    }
                } else if (is_term(t)) {
                    at_left = false;
                }
            }
        }
        if (pass == 1) edge_start[nr] = n_edges;
    }

    /* Iterative DFS (a grammar may have thousands of rules): a gray target is a cycle. */
    for (size_t s = 0; s < nr && !*found; s++) {
        if (color[s]) continue;
        size_t depth = 0;
        stk[depth] = s;
        stk_edge[depth] = edge_start[s];
        stk_pos[s] = depth;
        color[s] = 1;
        depth++;
        while (depth && !*found) {
            size_t r = stk[depth - 1];
            if (stk_edge[depth - 1] == edge_start[r + 1]) {
                color[r] = 2;
                depth--;
                continue;
            }
            size_t t = edges[stk_edge[depth - 1]++];
            if (color[t] == 1) {
                size_t len = 0;
                msg[0] = '\0';
                for (size_t k = stk_pos[t]; k < depth && len + 8 < cap; k++) {
                    int w = snprintf(msg + len, cap - len, "%s -> ", g->rule_names[stk[k]]);
                    if (w < 0) break;
                    len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
                }
                if (len + 1 < cap) snprintf(msg + len, cap - len, "%s", g->rule_names[t]);
                *found = true;
            } else if (color[t] == 0) {
                color[t] = 1;
                stk[depth] = t;
                stk_edge[depth] = edge_start[t];
                stk_pos[t] = depth;
                depth++;
            }
        }
    }
    st = DJ_OK;
done:
    free(nullable);
    free(alt_rule);
    free(pending);
    free(occ_start);
    free(occ);
    free(work);
    free(edge_start);
    free(edges);
    free(color);
    free(stk);
    free(stk_edge);
    free(stk_pos);
    return st;
}

/* Names the generated rules "<parent>-<index>", skipping names in use. */
static enum dj_status name_generated(struct parser *p, const size_t *by_order, size_t nr) {
    for (size_t r = 0; r < nr; r++) {
        struct sym *s = &p->syms[by_order[r]];
        if (!s->generated) continue;
        const struct sym *par = &p->syms[s->parent];
        size_t cap = par->len + 24;
        char *name = malloc(cap);
        if (!name) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        for (size_t k = r;; k++) {
            int w = snprintf(name, cap, "%s-%zu", par->name, k);
            if (ht_find(p, name, (size_t)w) == SIZE_MAX) {
                s->len = (size_t)w;
                break;
            }
        }
        enum dj_status st = ht_grow(p, p->n_syms);
        if (st != DJ_OK) {
            free(name);
            return st;
        }
        s->name = name;
        ht_put(p, by_order[r]);
    }
    return DJ_OK;
}

static enum dj_status finish(struct parser *p, const char *root, struct dj_grammar **out) {
    size_t nr = p->n_defined;
    for (size_t i = 0; i < p->n_syms; i++) {
        const struct sym *s = &p->syms[i];
        if (!s->defined) {
            size_t line, col;
            line_col(p->src, p->n, s->first_use, &line, &col);
            return dj_fail(DJ_ERR_FORMAT, "grammar: undefined rule '%.200s' (used at line %zu, column %zu)", s->name,
                           line, col);
        }
    }
    size_t root_id = ht_find(p, root, strlen(root));
    if (root_id == SIZE_MAX) return dj_fail(DJ_ERR_FORMAT, "grammar: no '%.200s' rule", root);

    size_t *by_order = malloc((nr ? nr : 1) * sizeof *by_order);
    if (!by_order) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    size_t n_elems = 0;
    for (size_t i = 0; i < p->n_syms; i++) {
        by_order[p->syms[i].order] = i;
        n_elems += p->syms[i].body.n;
    }
    enum dj_status st = name_generated(p, by_order, nr);
    struct dj_grammar *g = NULL;
    if (st == DJ_OK) {
        g = calloc(1, sizeof *g);
        if (g) {
            g->elems = malloc((n_elems ? n_elems : 1) * sizeof *g->elems);
            g->rule_start = malloc((nr ? nr : 1) * sizeof *g->rule_start);
            g->rule_names = calloc(nr ? nr : 1, sizeof *g->rule_names);
        }
        if (!g || !g->elems || !g->rule_start || !g->rule_names) st = dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    }
    if (st == DJ_OK) {
        size_t k = 0;
        for (size_t r = 0; r < nr; r++) {
            struct sym *s = &p->syms[by_order[r]];
            g->rule_start[r] = k;
            for (size_t i = 0; i < s->body.n; i++) {
                struct dj_gelem e = s->body.v[i];
                if (e.type == DJ_GE_RULE_REF) e.value = (uint32_t)p->syms[e.value].order;
                g->elems[k++] = e;
            }
            g->rule_names[r] = s->name; /* ownership moves to g */
            s->name = NULL;
        }
        g->n_elems = k;
        g->n_rules = nr;
        g->root = p->syms[root_id].order;
        g->has_tokens = p->has_tokens;
        char msg[800];
        bool found;
        st = find_left_recursion(g, msg, sizeof msg, &found);
        if (st == DJ_OK && found) st = dj_fail(DJ_ERR_FORMAT, "grammar: left recursion: %s", msg);
    }
    free(by_order);
    if (st != DJ_OK) {
        grammar_free(g);
        return st;
    }
    *out = g;
    return DJ_OK;
}

static void parser_free(struct parser *p) {
    for (size_t i = 0; i < p->n_syms; i++) {
        free(p->syms[i].name);
        elem_vec_free(&p->syms[i].body);
    }
    free(p->syms);
    free(p->ht);
}

enum dj_status grammar_parse(const char *src, size_t n, const char *root, const struct dj_vocab *vocab,
                             struct dj_grammar **out) {
    if (!out || (!src && n)) return dj_fail(DJ_ERR_INVALID, "grammar_parse: NULL argument");
    if (!root) root = "root";
    struct parser p = {.src = src ? src : "", .n = n, .vocab = vocab};
    const char *nul = n ? memchr(p.src, '\0', n) : NULL;
    if (nul) return fail_at(&p, (size_t)(nul - p.src), "a character other than NUL (write \\x00 in a string)");
    skip_space(&p, true);
    if (p.pos >= p.n) return dj_fail(DJ_ERR_FORMAT, "grammar: empty grammar");
    enum dj_status st = DJ_OK;
    while (st == DJ_OK && p.pos < p.n) st = parse_rule(&p);
    if (st == DJ_OK) st = finish(&p, root, out);
    parser_free(&p);
    return st;
}

void grammar_free(struct dj_grammar *g) {
    if (!g) return;
    if (g->rule_names)
        for (size_t i = 0; i < g->n_rules; i++) free(g->rule_names[i]);
    free(g->rule_names);
    free(g->rule_start);
    free(g->elems);
    free(g);
}

/* ---- printing ------------------------------------------------------------- */

struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, len);
    b->n += len;
    b->s[b->n] = '\0';
}

static void sb_str(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* One code point as parse_char reads it back: raw when printable and not
 * special where it stands; an escape otherwise. */
static void sb_char(struct sbuf *b, uint32_t c, bool in_class) {
    char tmp[16];
    if (c == '\\') return sb_str(b, "\\\\");
    if (c == '\t') return sb_str(b, "\\t");
    if (c == '\n') return sb_str(b, "\\n");
    if (c == '\r') return sb_str(b, "\\r");
    if (!in_class && c == '"') return sb_str(b, "\\\"");
    if (in_class && (c == ']' || c == '[')) {
        tmp[0] = '\\', tmp[1] = (char)c;
        return sb_put(b, tmp, 2);
    }
    /* `-` could make a range and `^` a negation inside a class */
    if (in_class && (c == '-' || c == '^')) {
        snprintf(tmp, sizeof tmp, "\\x%02X", (unsigned)c);
        return sb_str(b, tmp);
    }
    if (c >= 0x20 && c < 0x7F) {
        tmp[0] = (char)c;
        return sb_put(b, tmp, 1);
    }
    if (c < 0xA0) { /* C0, DEL, C1 controls */
        snprintf(tmp, sizeof tmp, c < 0x80 ? "\\x%02X" : "\\u%04X", (unsigned)c);
        return sb_str(b, tmp);
    }
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
        snprintf(tmp, sizeof tmp, c <= 0xFFFF ? "\\u%04X" : "\\U%08X", (unsigned)c);
        return sb_str(b, tmp);
    }
    size_t n;
    if (c < 0x800) {
        tmp[0] = (char)(0xC0 | (c >> 6)), tmp[1] = (char)(0x80 | (c & 0x3F)), n = 2;
    } else if (c < 0x10000) {
        tmp[0] = (char)(0xE0 | (c >> 12)), tmp[1] = (char)(0x80 | ((c >> 6) & 0x3F)),
        tmp[2] = (char)(0x80 | (c & 0x3F)), n = 3;
    } else {
        tmp[0] = (char)(0xF0 | (c >> 18)), tmp[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
        tmp[2] = (char)(0x80 | ((c >> 6) & 0x3F)), tmp[3] = (char)(0x80 | (c & 0x3F)), n = 4;
    }
    sb_put(b, tmp, n);
}

static bool set_continues(const struct dj_grammar *g, size_t i) {
    return i < g->n_elems && (g->elems[i].type == DJ_GE_CHAR_ALT || g->elems[i].type == DJ_GE_CHAR_RNG_UPPER);
}

char *grammar_to_gbnf(const struct dj_grammar *g) {
    struct sbuf b = {0};
    sb_str(&b, "");
    if (!g) return b.s;
    char tmp[32];
    for (size_t r = 0; r < g->n_rules; r++) {
        sb_str(&b, g->rule_names[r]);
        sb_str(&b, " ::=");
        bool empty_alt = true, in_lit = false;
        size_t i = g->rule_start[r];
        for (; i < g->n_elems; i++) {
            struct dj_gelem e = g->elems[i];
            bool single = e.type == DJ_GE_CHAR && !set_continues(g, i + 1);
            if (in_lit && !single) {
                sb_str(&b, "\"");
                in_lit = false;
            }
            if (e.type == DJ_GE_END || e.type == DJ_GE_ALT) {
                /* `""` keeps an empty alternative visible: after a bare `|`
                 * the parser would run on into the next line */
                if (empty_alt) sb_str(&b, " \"\"");
                if (e.type == DJ_GE_END) break;
                sb_str(&b, " |");
                empty_alt = true;
                continue;
            }
            empty_alt = false;
            if (single) {
                if (!in_lit) sb_str(&b, " \"");
                in_lit = true;
                sb_char(&b, e.value, false);
                continue;
            }
            sb_str(&b, " ");
            switch (e.type) {
            case DJ_GE_RULE_REF:
                sb_str(&b, e.value < g->n_rules ? g->rule_names[e.value] : "undefined-rule");
                break;
            case DJ_GE_CHAR_ANY: sb_str(&b, "."); break;
            case DJ_GE_TOKEN:
            case DJ_GE_TOKEN_NOT:
                snprintf(tmp, sizeof tmp, "%s<[%u]>", e.type == DJ_GE_TOKEN_NOT ? "!" : "", (unsigned)e.value);
                sb_str(&b, tmp);
                break;
            default: /* a set; a stray CHAR_ALT / RNG_UPPER prints as a set of its own */
                sb_str(&b, e.type == DJ_GE_CHAR_NOT ? "[^" : "[");
                sb_char(&b, e.value, true);
                while (set_continues(g, i + 1)) {
                    i++;
                    if (g->elems[i].type == DJ_GE_CHAR_RNG_UPPER) sb_str(&b, "-");
                    sb_char(&b, g->elems[i].value, true);
                }
                sb_str(&b, "]");
                break;
            }
        }
        if (in_lit) sb_str(&b, "\"");
        sb_str(&b, "\n");
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

bool grammar_equal(const struct dj_grammar *a, const struct dj_grammar *b) {
    if (a->n_rules != b->n_rules || a->n_elems != b->n_elems || a->root != b->root || a->has_tokens != b->has_tokens)
        return false;
    for (size_t r = 0; r < a->n_rules; r++)
        if (a->rule_start[r] != b->rule_start[r] || strcmp(a->rule_names[r], b->rule_names[r]) != 0) return false;
    for (size_t i = 0; i < a->n_elems; i++)
        if (a->elems[i].type != b->elems[i].type || a->elems[i].value != b->elems[i].value) return false;
    return true;
}
