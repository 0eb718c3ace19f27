/*
 * schema_regex.c — code point sets, the parser of JSON Schema's `pattern`
 * regex subset (ECMA-262 meaning) into a tree, lengths of a tree's language,
 * and the formats written as regexes (contract in schema_regex.h, the subset
 * in json_schema.h).
 *
 * The tree is what both consumers read: json_schema.c writes one pattern as
 * GBNF directly (a GBNF expression per node, counts as counted repetitions),
 * and schema_dfa.c turns trees into automata when several constraints must
 * hold at once.  Because the search semantics are in the tree (pad nodes),
 * neither consumer needs to know about anchors.
 *
 * Error messages name the construct and the code point position where the
 * parser stopped, "an unbounded repetition of something that can be empty
 * (at character 5)" — the wording json_schema.c has always reported.
 */
#include "sample/schema_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- code point sets ------------------------------------------------------ */

void cpset_add(struct cpset *s, uint32_t lo, uint32_t hi) {
    if (s->oom) return;
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        uint32_t *r = realloc(s->r, cap * sizeof *r);
        if (!r) {
            s->oom = true;
            return;
        }
        s->r = r, s->cap = cap;
    }
    s->r[s->n++] = lo, s->r[s->n++] = hi;
}

static int cmp_pair(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void cpset_norm(struct cpset *s) {
    if (s->n < 4) return;
    qsort(s->r, s->n / 2, 2 * sizeof(uint32_t), cmp_pair);
    size_t w = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        if (w && s->r[i] <= s->r[w - 1] + 1) {
            if (s->r[i + 1] > s->r[w - 1]) s->r[w - 1] = s->r[i + 1];
        } else {
            s->r[w++] = s->r[i], s->r[w++] = s->r[i + 1];
        }
    }
    s->n = w;
}

void cpset_negate(struct cpset *s) {
    struct cpset t = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        if (s->r[i] > next) cpset_add(&t, next, s->r[i] - 1);
        next = s->r[i + 1] + 1;
    }
    if (next <= RX_MAX_CP) cpset_add(&t, next, RX_MAX_CP);
    t.oom |= s->oom;
    free(s->r);
    *s = t;
}

bool cpset_has(const struct cpset *s, uint32_t c) {
    for (size_t i = 0; i < s->n; i += 2)
        if (c >= s->r[i] && c <= s->r[i + 1]) return true;
    return false;
}

void cpset_free(struct cpset *s) {
    free(s->r);
    *s = (struct cpset){0};
}

void cpset_intersect(struct cpset *s, const struct cpset *t) {
    struct cpset o = {0};
    size_t i = 0, j = 0;
    while (i < s->n && j < t->n) {
        uint32_t lo = s->r[i] > t->r[j] ? s->r[i] : t->r[j];
        uint32_t hi = s->r[i + 1] < t->r[j + 1] ? s->r[i + 1] : t->r[j + 1];
        if (lo <= hi) cpset_add(&o, lo, hi);
        if (s->r[i + 1] < t->r[j + 1]) i += 2;
        else j += 2;
    }
    o.oom |= s->oom || t->oom;
    free(s->r);
    *s = o;
}

void cpset_drop_surrogates(struct cpset *s) {
    static const uint32_t all[4] = {0, 0xD7FF, 0xE000, RX_MAX_CP};
    const struct cpset u = {(uint32_t *)all, 4, 4, false};
    cpset_intersect(s, &u);
}

bool cpset_is_all(const struct cpset *s) {
    return s->n == 4 && s->r[0] == 0 && s->r[1] == 0xD7FF && s->r[2] == 0xE000 && s->r[3] == RX_MAX_CP;
}

/* ---- the parser ----------------------------------------------------------- */

struct rxp {
    const uint32_t *cp;
    size_t n, pos;
    int depth;
    char *err;
    size_t n_err;
    enum dj_status st; /* DJ_OK until the first failure */
};

static uint32_t peek(const struct rxp *x, size_t k) { return x->pos + k < x->n ? x->cp[x->pos + k] : 0xFFFFFFFF; }

/* Records "<fmt with what> (at character pos)"; returns NULL/false for the caller. */
static void *fail(struct rxp *x, const char *fmt, const char *what) {
    if (x->st) return NULL;
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    snprintf(x->err, x->n_err, "%s (at character %zu)", msg, x->pos);
    x->st = DJ_ERR_INVALID;
    return NULL;
}
static void *oom(struct rxp *x) {
    if (!x->st) x->st = DJ_ERR_NOMEM;
    return NULL;
}

void rx_free(struct rx_node *x) {
    if (!x) return;
    for (size_t i = 0; i < x->n_kid; i++) rx_free(x->kid[i]);
    free(x->kid);
    cpset_free(&x->set);
    free(x);
}

static struct rx_node *node_new(enum rx_kind kind) {
    struct rx_node *x = calloc(1, sizeof *x);
    if (x) x->kind = kind, x->nullable = kind == RX_EMPTY;
    return x;
}

/* Appends k to x's kids (k NULL: OOM); false on OOM (k freed). */
static bool kid_add(struct rx_node *x, struct rx_node *k) {
    struct rx_node **v = k ? realloc(x->kid, (x->n_kid + 1) * sizeof *v) : NULL;
    if (!v) {
        rx_free(k);
        return false;
    }
    x->kid = v;
    x->kid[x->n_kid++] = k;
    return true;
}

/* A set node for s (taken over; normalized here, surrogates dropped). */
static struct rx_node *set_node(struct rxp *x, struct cpset *s) {
    cpset_norm(s);
    cpset_drop_surrogates(s);
    if (s->oom) {
        cpset_free(s);
        return oom(x);
    }
    if (!s->n) {
        cpset_free(s);
        return fail(x, "%s", "a character class that matches nothing");
    }
    struct rx_node *nd = node_new(RX_SET);
    if (!nd) {
        cpset_free(s);
        return oom(x);
    }
    nd->set = *s;
    *s = (struct cpset){0};
    return nd;
}

static struct rx_node *rep_node(struct rx_node *kid, size_t m, size_t n, bool pad) {
    struct rx_node *r = node_new(RX_REP);
    if (!r || !kid_add(r, kid)) {
        if (!r) rx_free(kid);
        free(r);
        return NULL;
    }
    r->m = m, r->n = n, r->pad = pad;
    r->nullable = m == 0 || kid->nullable;
    return r;
}

struct rx_node *rx_star_of(const struct cpset *s) {
    struct rx_node *k = node_new(RX_SET);
    if (!k) return NULL;
    for (size_t i = 0; i < s->n; i += 2) cpset_add(&k->set, s->r[i], s->r[i + 1]);
    cpset_norm(&k->set);
    cpset_drop_surrogates(&k->set);
    if (k->set.oom) {
        rx_free(k);
        return NULL;
    }
    return rep_node(k, 0, RX_INF, false);
}

static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int hexval(uint32_t c) {
    return c >= '0' && c <= '9' ? (int)(c - '0') : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10) : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
}

/* \d \w \s and their negations into s; false if c is none of them. */
static bool class_escape(struct cpset *s, uint32_t c) {
    struct cpset t = {0};
    switch (c | 0x20) {
    case 'd': cpset_add(&t, '0', '9'); break;
    case 'w': cpset_add(&t, '0', '9'), cpset_add(&t, 'A', 'Z'), cpset_add(&t, 'a', 'z'), cpset_add(&t, '_', '_'); break;
    case 's':
        cpset_add(&t, 9, 13), cpset_add(&t, ' ', ' '), cpset_add(&t, 0xA0, 0xA0), cpset_add(&t, 0x1680, 0x1680);
        cpset_add(&t, 0x2000, 0x200A), cpset_add(&t, 0x2028, 0x2029), cpset_add(&t, 0x202F, 0x202F);
        cpset_add(&t, 0x205F, 0x205F), cpset_add(&t, 0x3000, 0x3000), cpset_add(&t, 0xFEFF, 0xFEFF);
        break;
    default: return false;
    }
    cpset_norm(&t);
    if (c >= 'A' && c <= 'Z') cpset_negate(&t);
    for (size_t i = 0; i < t.n; i += 2) cpset_add(s, t.r[i], t.r[i + 1]);
    s->oom |= t.oom;
    free(t.r);
    return true;
}

/* A single-character escape after '\' (the '\' consumed); false with the
 * message set for the unsupported ones. */
static bool char_escape(struct rxp *x, uint32_t *out, bool in_class) {
    uint32_t c = peek(x, 0);
    if (c == 0xFFFFFFFF) return fail(x, "%s", "'\\' at the end"), false;
    x->pos++;
    switch (c) {
    case 't': *out = 9; return true;
    case 'n': *out = 10; return true;
    case 'r': *out = 13; return true;
    case 'f': *out = 12; return true;
    case 'v': *out = 11; return true;
    case '0':
        if (is_digit(peek(x, 0))) break;
        *out = 0;
        return true;
    case 'b':
        if (in_class) {
            *out = 8;
            return true;
        }
        x->pos--;
        return fail(x, "%s is not supported", "word boundary \\b"), false;
    case 'x':
    case 'u': {
        int nd = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < nd; i++) {
            int h = hexval(peek(x, (size_t)i));
            if (h < 0) return fail(x, "%s needs hex digits", c == 'x' ? "\\x" : "\\u"), false;
            v = v * 16 + (uint32_t)h;
        }
        x->pos += (size_t)nd;
        if (v >= 0xD800 && v <= 0xDFFF) return fail(x, "%s", "surrogate \\u escapes are not supported"), false;
        *out = v;
        return true;
    }
    }
    if ((c < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c)))) {
        x->pos--;
        char what[8];
        snprintf(what, sizeof what, "\\%c", (char)c);
        return fail(x, "escape %s is not supported", what), false;
    }
    *out = c; /* escaped punctuation (and any non-ASCII): itself */
    return true;
}

static bool parse_class(struct rxp *x, struct cpset *s) {
    /* '[' consumed */
    bool neg = false;
    if (peek(x, 0) == '^') neg = true, x->pos++;
    for (;;) {
        uint32_t c = peek(x, 0);
        if (c == 0xFFFFFFFF) return fail(x, "%s", "unterminated '['"), false;
        if (c == ']') { /* ECMA-262: [] matches nothing, [^] anything */
            x->pos++;
            break;
        }
        x->pos++;
        uint32_t lo;
        if (c == '\\') {
            if (class_escape(s, peek(x, 0))) {
                x->pos++;
                continue;
            }
            if (!char_escape(x, &lo, true)) return false;
        } else if (c == '[' && peek(x, 0) == ':') {
            return fail(x, "%s", "POSIX classes [:name:] are not ECMA-262"), false;
        } else {
            lo = c;
        }
        if (peek(x, 0) == '-' && peek(x, 1) != ']' && peek(x, 1) != 0xFFFFFFFF) {
            x->pos++;
            uint32_t hi = peek(x, 0);
            x->pos++;
            if (hi == '\\') {
                if (class_escape(s, peek(x, 0))) return fail(x, "%s", "a class escape as a range end"), false;
                if (!char_escape(x, &hi, true)) return false;
            }
            if (hi < lo) return fail(x, "%s", "range out of order in a class"), false;
            cpset_add(s, lo, hi);
        } else {
            cpset_add(s, lo, lo);
        }
    }
    cpset_norm(s);
    if (neg) cpset_negate(s);
    return true;
}

/* Parses {m}, {m,}, {m,n} at pos ('{' not consumed); false (pos unchanged) if
 * it is not one (then '{' is a literal, as ECMA-262 Annex B has it). */
static bool parse_braces(struct rxp *x, size_t *m, size_t *n) {
    size_t p = x->pos + 1, a = 0, b;
    bool any = false;
    while (p < x->n && is_digit(x->cp[p])) a = a > RX_MAX_COUNT ? a : a * 10 + (x->cp[p] - '0'), p++, any = true;
    if (!any) return false;
    if (p < x->n && x->cp[p] == '}') {
        *m = *n = a;
        x->pos = p + 1;
        return true;
    }
    if (p >= x->n || x->cp[p] != ',') return false;
    p++;
    if (p < x->n && x->cp[p] == '}') {
        *m = a, *n = RX_INF;
        x->pos = p + 1;
        return true;
    }
    b = 0, any = false;
    while (p < x->n && is_digit(x->cp[p])) b = b > RX_MAX_COUNT ? b : b * 10 + (x->cp[p] - '0'), p++, any = true;
    if (!any || p >= x->n || x->cp[p] != '}') return false;
    *m = a, *n = b;
    x->pos = p + 1;
    return true;
}

static struct rx_node *parse_alt(struct rxp *x, bool top);

static struct rx_node *parse_atom(struct rxp *x) {
    uint32_t c = peek(x, 0);
    struct cpset s = {0};
    switch (c) {
    case '(': {
        x->pos++;
        if (peek(x, 0) == '?') {
            if (peek(x, 1) == ':') x->pos += 2;
            else if (peek(x, 1) == '<' && peek(x, 2) != '=' && peek(x, 2) != '!') {
                x->pos += 2;
                while (x->pos < x->n && x->cp[x->pos] != '>') x->pos++;
                if (x->pos >= x->n) return fail(x, "%s", "unterminated group name");
                x->pos++;
            } else {
                return fail(x, "%s is not supported", "lookaround or '(?' group");
            }
        }
        if (++x->depth > RX_MAX_DEPTH) return fail(x, "groups nested deeper than %s", "64");
        struct rx_node *in = parse_alt(x, false);
        if (!in) return NULL;
        x->depth--;
        if (peek(x, 0) != ')') {
            rx_free(in);
            return fail(x, "%s", "missing ')'");
        }
        x->pos++;
        return in;
    }
    case '[':
        x->pos++;
        if (!parse_class(x, &s)) {
            cpset_free(&s);
            return NULL;
        }
        return set_node(x, &s);
    case '.':
        x->pos++;
        cpset_add(&s, 0, 9), cpset_add(&s, 11, 12), cpset_add(&s, 14, 0x2027), cpset_add(&s, 0x202A, RX_MAX_CP);
        return set_node(x, &s);
    case '\\': {
        x->pos++;
        uint32_t e = peek(x, 0);
        if (class_escape(&s, e)) {
            x->pos++;
            return set_node(x, &s);
        }
        if (e == 'B') return fail(x, "%s is not supported", "\\B");
        if (is_digit(e) && e != '0') return fail(x, "%s are not supported", "backreferences");
        if (e == 'k' || e == 'c' || e == 'p' || e == 'P')
            return fail(x, "%s is not supported", e == 'k' ? "\\k" : e == 'c' ? "\\c" : "\\p");
        uint32_t v;
        if (!char_escape(x, &v, false)) return NULL;
        cpset_add(&s, v, v);
        return set_node(x, &s);
    }
    case '*':
    case '+':
    case '?': return fail(x, "%s", "nothing to repeat");
    case '{': {
        size_t m, n, save = x->pos;
        if (parse_braces(x, &m, &n)) {
            x->pos = save;
            return fail(x, "%s", "nothing to repeat");
        }
    }
        /* fall through - a literal '{' */
    default:
        x->pos++;
        cpset_add(&s, c, c);
        return set_node(x, &s);
    }
}

/* Items up to '|', ')' or the end; a top-level one may end with '$'. */
static struct rx_node *parse_seq(struct rxp *x, bool top, bool *anchored_end) {
    struct rx_node *cat = node_new(RX_CAT);
    if (!cat) return oom(x);
    cat->nullable = true;
    *anchored_end = false;
    for (;;) {
        uint32_t c = peek(x, 0);
        if (c == 0xFFFFFFFF || c == '|' || c == ')') break;
        if (c == '^') {
            rx_free(cat);
            return fail(x, "%s", "'^' only at the start of the pattern or of a top-level alternative");
        }
        if (c == '$') {
            uint32_t d = peek(x, 1);
            if (top && (d == 0xFFFFFFFF || d == '|')) {
                x->pos++;
                *anchored_end = true;
                break;
            }
            rx_free(cat);
            return fail(x, "%s", "'$' only at the end of the pattern or of a top-level alternative");
        }
        struct rx_node *a = parse_atom(x);
        if (!a) {
            rx_free(cat);
            return NULL;
        }
        size_t m = 1, n = 1;
        uint32_t q = peek(x, 0);
        bool quant = true;
        if (q == '*') m = 0, n = RX_INF, x->pos++;
        else if (q == '+') m = 1, n = RX_INF, x->pos++;
        else if (q == '?') m = 0, n = 1, x->pos++;
        else if (q == '{' && parse_braces(x, &m, &n)) {
            if (m > RX_MAX_COUNT || (n != RX_INF && n > RX_MAX_COUNT)) {
                rx_free(a), rx_free(cat);
                return fail(x, "repetition count over %s", "1000000");
            }
            if (n < m) {
                rx_free(a), rx_free(cat);
                return fail(x, "%s", "repetition {m,n} with n < m");
            }
        } else quant = false;
        if (quant) {
            if (peek(x, 0) == '?') x->pos++; /* lazy: the same language */
            uint32_t q2 = peek(x, 0);
            size_t m2, n2, save = x->pos;
            if (q2 == '*' || q2 == '+' || q2 == '?' || (q2 == '{' && parse_braces(x, &m2, &n2))) {
                x->pos = save;
                rx_free(a), rx_free(cat);
                return fail(x, "%s", "nothing to repeat");
            }
            if (a->kind == RX_EMPTY) { /* an empty group repeated is still empty */
            } else if (a->nullable && n == RX_INF) {
                /* refused although the language is fine: as GBNF it would loop without consuming */
                rx_free(a), rx_free(cat);
                return fail(x, "%s", "an unbounded repetition of something that can be empty");
            } else if (!(m == 1 && n == 1) && !(a = rep_node(a, m, n, false))) {
                rx_free(cat);
                return oom(x);
            }
        }
        if (a->kind == RX_EMPTY) {
            rx_free(a);
            continue;
        }
        cat->nullable = cat->nullable && a->nullable;
        if (!kid_add(cat, a)) {
            rx_free(cat);
            return oom(x);
        }
    }
    if (cat->n_kid <= 1) { /* no CAT of fewer than two */
        struct rx_node *one = cat->n_kid ? cat->kid[0] : node_new(RX_EMPTY);
        if (cat->n_kid) cat->n_kid = 0;
        rx_free(cat);
        return one ? one : oom(x);
    }
    return cat;
}

/* A pad node: any text (search semantics). */
static struct rx_node *pad_node(void) {
    struct rx_node *k = node_new(RX_SET);
    if (!k) return NULL;
    cpset_add(&k->set, 0, 0xD7FF), cpset_add(&k->set, 0xE000, RX_MAX_CP);
    if (k->set.oom) {
        rx_free(k);
        return NULL;
    }
    return rep_node(k, 0, RX_INF, true);
}

/* Alternatives; at the top level each may carry its own ^ and $ and gets a
 * pad on a side without one. */
static struct rx_node *parse_alt(struct rxp *x, bool top) {
    struct rx_node *alt = node_new(RX_ALT);
    if (!alt) return oom(x);
    for (;;) {
        bool anc_start = false, anc_end = false;
        if (top && peek(x, 0) == '^') anc_start = true, x->pos++;
        struct rx_node *q = parse_seq(x, top, &anc_end);
        if (!q) {
            rx_free(alt);
            return NULL;
        }
        if (top && (!anc_start || !anc_end)) {
            struct rx_node *cat = node_new(RX_CAT);
            bool ok = cat != NULL;
            if (ok && !anc_start) ok = kid_add(cat, pad_node());
            if (ok && q->kind == RX_CAT) { /* flatten */
                for (size_t i = 0; ok && i < q->n_kid; i++) ok = kid_add(cat, q->kid[i]), q->kid[i] = NULL;
                q->n_kid = ok ? 0 : q->n_kid;
                rx_free(q);
            } else if (ok && q->kind != RX_EMPTY) {
                ok = kid_add(cat, q);
            } else {
                rx_free(q);
            }
            if (ok && !anc_end) ok = kid_add(cat, pad_node());
            if (!ok) {
                rx_free(cat), rx_free(alt);
                return oom(x);
            }
            cat->nullable = true;
            for (size_t i = 0; i < cat->n_kid; i++) cat->nullable = cat->nullable && cat->kid[i]->nullable;
            q = cat;
            if (cat->n_kid == 1) { /* a pad alone */
                q = cat->kid[0];
                cat->n_kid = 0;
                rx_free(cat);
            }
        }
        alt->nullable = alt->nullable || q->nullable;
        if (!kid_add(alt, q)) {
            rx_free(alt);
            return oom(x);
        }
        if (peek(x, 0) != '|') break;
        x->pos++;
    }
    bool all_empty = true;
    for (size_t i = 0; i < alt->n_kid; i++) all_empty = all_empty && alt->kid[i]->kind == RX_EMPTY;
    if (all_empty && alt->n_kid > 1) { /* (|): as empty as () */
        rx_free(alt);
        struct rx_node *e = node_new(RX_EMPTY);
        return e ? e : oom(x);
    }
    if (alt->n_kid == 1) {
        struct rx_node *one = alt->kid[0];
        alt->n_kid = 0;
        rx_free(alt);
        return one;
    }
    return alt;
}

enum dj_status rx_parse(const uint32_t *cp, size_t n, struct rx_node **out, char *err, size_t n_err) {
    struct rxp x = {.cp = cp, .n = n, .err = err, .n_err = n_err};
    if (n_err) err[0] = 0;
    struct rx_node *r = parse_alt(&x, true);
    if (r && x.pos < x.n) {
        rx_free(r);
        r = fail(&x, "%s", "unbalanced ')'");
    }
    if (!r) return x.st ? x.st : DJ_ERR_NOMEM;
    *out = r;
    return DJ_OK;
}

/* ---- lengths ---------------------------------------------------------------- */

static size_t sat_add(size_t a, size_t b) { return a == RX_INF || b == RX_INF || a > RX_INF - b ? RX_INF : a + b; }
static size_t sat_mul(size_t a, size_t b) {
    if (!a || !b) return 0;
    return a == RX_INF || b == RX_INF || a > RX_INF / b ? RX_INF : a * b;
}

size_t rx_min_len(const struct rx_node *x) {
    size_t r = 0;
    switch (x->kind) {
    case RX_EMPTY: return 0;
    case RX_SET: return 1;
    case RX_CAT:
        for (size_t i = 0; i < x->n_kid; i++) r = sat_add(r, rx_min_len(x->kid[i]));
        return r;
    case RX_ALT:
        r = RX_INF;
        for (size_t i = 0; i < x->n_kid; i++) {
            size_t k = rx_min_len(x->kid[i]);
            if (k < r) r = k;
        }
        return r;
    case RX_REP: return sat_mul(x->m, rx_min_len(x->kid[0]));
    }
    return 0;
}

size_t rx_max_len(const struct rx_node *x) {
    size_t r = 0;
    switch (x->kind) {
    case RX_EMPTY: return 0;
    case RX_SET: return 1;
    case RX_CAT:
        for (size_t i = 0; i < x->n_kid; i++) r = sat_add(r, rx_max_len(x->kid[i]));
        return r;
    case RX_ALT:
        for (size_t i = 0; i < x->n_kid; i++) {
            size_t k = rx_max_len(x->kid[i]);
            if (k > r) r = k;
        }
        return r;
    case RX_REP: return sat_mul(x->n, rx_max_len(x->kid[0]));
    }
    return 0;
}

bool rx_is_counted_set(const struct rx_node *x, const struct cpset **s, size_t *m, size_t *n) {
    if (x->kind == RX_SET) {
        *s = &x->set, *m = *n = 1;
        return true;
    }
    if (x->kind == RX_REP && x->kid[0]->kind == RX_SET) {
        *s = &x->kid[0]->set, *m = x->m, *n = x->n;
        return true;
    }
    return false;
}

/* ---- formats ------------------------------------------------------------------ */

/* Pieces of the format regexes (ECMA-262 syntax, the subset above). */
#define RX_DATE                                                                                                      \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|" \
    "1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29)"
#define RX_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define RX_HEX "[0-9A-Fa-f]"
#define RX_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
#define RX_IPV4 RX_OCTET "\\." RX_OCTET "\\." RX_OCTET "\\." RX_OCTET
#define RX_H16 RX_HEX "{1,4}"
#define RX_H16C "(?:" RX_H16 ":)"
#define RX_LS32 "(?:" RX_H16 ":" RX_H16 "|" RX_IPV4 ")"
/* RFC 3986 IPv6address, alternative by alternative */
#define RX_IPV6                                                                                                      \
    "(?:" RX_H16C "{6}" RX_LS32 "|::" RX_H16C "{5}" RX_LS32 "|(?:" RX_H16 ")?::" RX_H16C "{4}" RX_LS32 "|(?:" RX_H16C  \
    "{0,1}" RX_H16 ")?::" RX_H16C "{3}" RX_LS32 "|(?:" RX_H16C "{0,2}" RX_H16 ")?::" RX_H16C "{2}" RX_LS32             \
    "|(?:" RX_H16C "{0,3}" RX_H16 ")?::" RX_H16C RX_LS32 "|(?:" RX_H16C "{0,4}" RX_H16 ")?::" RX_LS32 "|(?:" RX_H16C  \
    "{0,5}" RX_H16 ")?::" RX_H16 "|(?:" RX_H16C "{0,6}" RX_H16 ")?::)"
#define RX_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
/* RFC 3986: unreserved and sub-delims, pct-encoded, pchar */
#define RX_US "A-Za-z0-9\\-._~!$&'()*+,;="
#define RX_PCT "%" RX_HEX "{2}"
#define RX_PCHAR "(?:[" RX_US ":@]|" RX_PCT ")"
#define RX_AUTHORITY                                                                                                 \
    "(?:(?:[" RX_US ":]|" RX_PCT ")*@)?(?:\\[(?:" RX_IPV6 "|v" RX_HEX "+\\.[" RX_US ":]+)\\]|(?:[" RX_US "]|" RX_PCT   \
    ")*)(?::[0-9]*)?"
#define RX_SEGMENTS "(?:/" RX_PCHAR "*)*"
#define RX_QUERY_FRAG "(?:\\?(?:" RX_PCHAR "|[/?])*)?(?:#(?:" RX_PCHAR "|[/?])*)?"
/* scheme ":" hier-part [ "?" query ] [ "#" fragment ] */
#define RX_URI                                                                                                       \
    "[A-Za-z][A-Za-z0-9+\\-.]*:(?://" RX_AUTHORITY RX_SEGMENTS "|/(?:" RX_PCHAR "+" RX_SEGMENTS ")?|" RX_PCHAR        \
    "+" RX_SEGMENTS "|)" RX_QUERY_FRAG
/* relative-ref: relative-part [ "?" query ] [ "#" fragment ] (a first segment without ':') */
#define RX_RELREF                                                                                                    \
    "(?://" RX_AUTHORITY RX_SEGMENTS "|/(?:" RX_PCHAR "+" RX_SEGMENTS ")?|(?:[" RX_US "@]|" RX_PCT ")+" RX_SEGMENTS  \
    "|)" RX_QUERY_FRAG

static const struct {
    const char *name, *rx;
} formats[] = {
    {"date", "^" RX_DATE "$"},
    {"time", "^" RX_TIME "$"},
    {"date-time", "^" RX_DATE "T" RX_TIME "$"},
    {"uuid", "^" RX_HEX "{8}-" RX_HEX "{4}-" RX_HEX "{4}-" RX_HEX "{4}-" RX_HEX "{12}$"},
    {"ipv4", "^" RX_IPV4 "$"},
    {"ipv6", "^" RX_IPV6 "$"},
    /* RFC 5321 dot-atom "@" letter-digit-hyphen labels (no quoted local
     * parts, no address literals, lengths unchecked) */
    {"email", "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]*"
              "[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"},
    /* RFC 1123 labels of 1-63 (the total of 253 unchecked), no trailing dot */
    {"hostname", "^" RX_LABEL "(?:\\." RX_LABEL ")*$"},
    {"uri", "^" RX_URI "$"},
    {"uri-reference", "^(?:" RX_URI "|" RX_RELREF ")$"},
};

const char *rx_format_regex(const char *name) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(formats[i].name, name)) return formats[i].rx;
    return NULL;
}
