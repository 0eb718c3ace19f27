/*
 * grammar_match.c — the code point matcher: a pushdown automaton over the
 * grammar IR with llama.cpp's semantics (src/llama-grammar.cpp:
 * llama_grammar_advance_stack, llama_grammar_accept, match_char,
 * match_partial_char), plus the compiled tables it and the token masks use.
 *
 * A state is a set of stacks.  A stack is a path of element indices, bottom
 * first; every entry below the top is where to continue once the entry
 * above it is done (a "return address"), and the top is a terminal: the
 * first element of a character set or a token element.  The empty stack
 * means the root rule is complete (the input may end there).
 *
 *   stack:  [ e_0 | e_1 | ... | e_top ]      e_top: GK_CHARS / GK_TOKEN*
 *   set:    el = e e e | e e | | e e e e      off = 0 3 5 5 9   (stack i = el[off[i] .. off[i+1]))
 *
 * Expanding a rule reference at the top replaces it by (the element after
 * it, unless the reference ends its alternative — the tail-call rule that
 * keeps `x ::= "a" x |` from growing the stack) and the first element of
 * each alternative of the rule, recursively, until terminals are on top.
 * After every code point the set is deduplicated and kept sorted, so equal
 * states are equal arrays (the masks key their caches on that).  A code
 * point split across calls is held in a strict UTF-8 decoder; while it is
 * pending the stacks are those before it, filtered to the ones whose top can
 * still take some completion of it.  Token elements are never matched by
 * bytes, only by gmatch_accept_token (from gtok_accept).
 *
 * Bounds: at most DJ_GMATCH_MAX_STACKS stacks, stacks at most
 * DJ_GMATCH_MAX_DEPTH deep, DJ_GMATCH_MAX_WORK expansions per code point;
 * beyond them the input is rejected (false), never an abort.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar_internal.h"
#include "tokenizer/unicode.h"

/* The recursion of an expansion can be as deep as the stack; this keeps it
 * far inside an 8 MB (even a 1 MB thread) C stack. */
#define DJ_GMATCH_MAX_DEPTH ((size_t)1 << 13)

/* ---- compiled grammar ------------------------------------------------------ */

struct u32vec {
    uint32_t *v;
    size_t n, cap;
};

static bool u32vec_push(struct u32vec *a, uint32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Reads the set starting at elems[s] exactly as llama_grammar_match_char
 * walks it; appends its positive ranges to rv (sorted, merged, complemented
 * when negated) and returns the index after the set. */
static size_t compile_set(const struct dj_grammar *g, size_t s, struct u32vec *rv, size_t r0, bool *ok) {
    const struct dj_gelem *el = g->elems;
    size_t n = g->n_elems, pos = s;
    bool neg = el[s].type == DJ_GE_CHAR_NOT;
    *ok = true;
    do {
        uint32_t lo, hi;
        if (pos + 1 < n && el[pos + 1].type == DJ_GE_CHAR_RNG_UPPER) {
            lo = el[pos].value;
            hi = el[pos + 1].value;
            pos += 2;
        } else if (el[pos].type == DJ_GE_CHAR_ANY) {
            lo = 0;
            hi = 0x10FFFF;
            pos += 1;
        } else {
            lo = hi = el[pos].value;
            pos += 1;
        }
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo <= hi && !(u32vec_push(rv, lo) && u32vec_push(rv, hi))) {
            *ok = false;
            return pos;
        }
    } while (pos < n && el[pos].type == DJ_GE_CHAR_ALT);

    uint32_t *r = rv->v ? rv->v + r0 : NULL;
    size_t k = (rv->n - r0) / 2, m = 0;
    if (k) qsort(r, k, 2 * sizeof *r, cmp_pair);
    for (size_t i = 0; i < k; i++) {
        if (m && r[2 * i] <= r[2 * m - 1] + 1) {
            if (r[2 * i + 1] > r[2 * m - 1]) r[2 * m - 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    rv->n = r0 + 2 * m;
    if (neg) {
        /* complement over 0..0x10FFFF: at most m + 1 gaps */
        uint32_t *tmp = malloc((2 * m + 2) * sizeof *tmp);
        if (!tmp) {
            *ok = false;
            return pos;
        }
        size_t t = 0;
        uint32_t next = 0;
        bool open = true; /* next <= 0x10FFFF */
        for (size_t i = 0; i < m; i++) {
            if (r[2 * i] > next) {
                tmp[t++] = next;
                tmp[t++] = r[2 * i] - 1;
            }
            if (r[2 * i + 1] >= 0x10FFFF) {
                open = false;
                break;
            }
            next = r[2 * i + 1] + 1;
        }
        if (open) {
            tmp[t++] = next;
            tmp[t++] = 0x10FFFF;
        }
        rv->n = r0;
        for (size_t i = 0; i < t && *ok; i++) *ok = u32vec_push(rv, tmp[i]);
        free(tmp);
    }
    return pos;
}

static void gcomp_destroy(struct gcomp *gc) {
    if (!gc) return;
    free(gc->kind);
    free(gc->term);
    free(gc->terms);
    free(gc->ranges);
    free(gc->alt_off);
    free(gc->alts);
    free(gc);
}

struct gcomp *gcomp_ref(struct gcomp *gc) {
    atomic_fetch_add(&gc->refs, 1);
    return gc;
}

void gcomp_unref(struct gcomp *gc) {
    if (gc && atomic_fetch_sub(&gc->refs, 1) == 1) gcomp_destroy(gc);
}

static const char *rule_name(const struct dj_grammar *g, size_t r) {
    return g->rule_names && g->rule_names[r] ? g->rule_names[r] : "?";
}

/* llama.cpp rejects left recursion at init; here it would recurse forever
 * in an expansion, so a hand-built IR is checked too.  Rule r "starts with"
 * rule s when s is referenced after only nullable references in some
 * alternative of r; a cycle in that relation is left recursion.  Kahn's
 * topological sort finds it without recursion. */
static enum dj_status check_left_recursion(const struct dj_grammar *g, const struct gcomp *gc) {
    size_t nr = g->n_rules;
    enum dj_status st = DJ_ERR_NOMEM;
    bool *nullable = calloc(nr, sizeof *nullable);
    size_t *indeg = calloc(nr, sizeof *indeg), *eoff = calloc(nr + 1, sizeof *eoff), *queue = NULL;
    struct u32vec src = {0}, dst = {0};
    uint32_t *adj = NULL;
    if (!nullable || !indeg || !eoff) goto done;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < nr; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = gc->alt_off[r]; a < gc->alt_off[r + 1] && !nullable[r]; a++) {
                size_t e = gc->alts[a];
                while (gc->kind[e] == GK_REF && nullable[g->elems[e].value]) e++;
                if (gc->kind[e] == GK_END) nullable[r] = changed = true;
            }
        }
    }
    for (size_t r = 0; r < nr; r++) {
        for (uint32_t a = gc->alt_off[r]; a < gc->alt_off[r + 1]; a++) {
            for (size_t e = gc->alts[a]; gc->kind[e] == GK_REF; e++) {
                if (!u32vec_push(&src, (uint32_t)r) || !u32vec_push(&dst, g->elems[e].value)) goto done;
                if (!nullable[g->elems[e].value]) break;
            }
        }
    }
    adj = malloc((src.n + 1) * sizeof *adj);
    queue = malloc(nr * sizeof *queue);
    if (!adj || !queue) goto done;
    for (size_t i = 0; i < src.n; i++) eoff[src.v[i] + 1]++, indeg[dst.v[i]]++;
    for (size_t r = 0; r < nr; r++) eoff[r + 1] += eoff[r];
    {
        size_t *fill = calloc(nr, sizeof *fill);
        if (!fill) goto done;
        for (size_t i = 0; i < src.n; i++) adj[eoff[src.v[i]] + fill[src.v[i]]++] = dst.v[i];
        free(fill);
    }
    size_t qh = 0, qt = 0;
    for (size_t r = 0; r < nr; r++)
        if (!indeg[r]) queue[qt++] = r;
    while (qh < qt) {
        size_t r = queue[qh++];
        for (size_t i = eoff[r]; i < eoff[r + 1]; i++)
            if (--indeg[adj[i]] == 0) queue[qt++] = adj[i];
    }
    st = DJ_OK;
    if (qt < nr) {
        for (size_t r = 0; r < nr; r++) {
            if (indeg[r]) {
                st = dj_fail(DJ_ERR_INVALID, "grammar: left recursion through rule '%s'", rule_name(g, r));
                break;
            }
        }
    }
done:
    if (st == DJ_ERR_NOMEM) dj_fail(DJ_ERR_NOMEM, "grammar: out of memory compiling the grammar");
    free(nullable);
    free(indeg);
    free(eoff);
    free(queue);
    free(adj);
    free(src.v);
    free(dst.v);
    return st;
}

enum dj_status gcomp_create(const struct dj_grammar *g, struct gcomp **out) {
    if (!g || !g->elems || !g->rule_start || g->n_elems == 0 || g->n_rules == 0 || g->root >= g->n_rules)
        return dj_fail(DJ_ERR_INVALID, "grammar: empty or without a start rule");
    if (g->n_elems >= UINT32_MAX - 1 || g->n_rules >= UINT32_MAX - 1)
        return dj_fail(DJ_ERR_INVALID, "grammar: too large (%zu elements)", g->n_elems);
    size_t n = g->n_elems;
    struct gcomp *gc = calloc(1, sizeof *gc);
    struct u32vec terms = {0}, ranges = {0}, alts = {0};
    if (!gc) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    atomic_init(&gc->refs, 1);
    gc->g = g;
    gc->n_elems = n;
    gc->kind = calloc(n, 1);
    gc->term = malloc(n * sizeof *gc->term);
    gc->alt_off = malloc((g->n_rules + 1) * sizeof *gc->alt_off);
    if (!gc->kind || !gc->term || !gc->alt_off) goto nomem;
    memset(gc->term, 0xff, n * sizeof *gc->term);

    /* terms collects (set start, range offset, range count, next) quadruples */
    for (size_t r = 0; r < g->n_rules; r++) {
        size_t e = g->rule_start[r];
        gc->alt_off[r] = (uint32_t)alts.n;
        bool alt_start = true;
        for (;;) {
            if (e >= n) {
                gcomp_destroy(gc);
                free(terms.v), free(ranges.v), free(alts.v);
                return dj_fail(DJ_ERR_INVALID, "grammar: rule '%s' runs past the last element", rule_name(g, r));
            }
            if (alt_start && !u32vec_push(&alts, (uint32_t)e)) goto nomem;
            alt_start = false;
            uint32_t type = g->elems[e].type;
            if (type == DJ_GE_END || type == DJ_GE_ALT) {
                gc->kind[e] = GK_END;
                e++;
                if (type == DJ_GE_END) break;
                alt_start = true;
            } else if (type == DJ_GE_RULE_REF) {
                if (g->elems[e].value >= g->n_rules) {
                    gcomp_destroy(gc);
                    free(terms.v), free(ranges.v), free(alts.v);
                    return dj_fail(DJ_ERR_INVALID, "grammar: rule '%s' refers to rule %u of %zu", rule_name(g, r),
                                   g->elems[e].value, g->n_rules);
                }
                gc->kind[e++] = GK_REF;
            } else if (type == DJ_GE_TOKEN || type == DJ_GE_TOKEN_NOT) {
                gc->kind[e] = type == DJ_GE_TOKEN ? GK_TOKEN : GK_TOKEN_NOT;
                e++;
            } else if (type == DJ_GE_CHAR || type == DJ_GE_CHAR_NOT || type == DJ_GE_CHAR_ANY) {
                size_t r0 = ranges.n;
                bool ok;
                size_t next = compile_set(g, e, &ranges, r0, &ok);
                if (!ok) goto nomem;
                if (gc->term[e] == UINT32_MAX) {
                    if (terms.n / 4 >= UINT32_MAX - 1 || ranges.n / 2 >= UINT32_MAX) goto nomem;
                    gc->term[e] = (uint32_t)(terms.n / 4);
                    if (!u32vec_push(&terms, (uint32_t)(r0 / 2)) || !u32vec_push(&terms, (uint32_t)((ranges.n - r0) / 2)) ||
                        !u32vec_push(&terms, (uint32_t)next) || !u32vec_push(&terms, 0))
                        goto nomem;
                } else {
                    ranges.n = r0; /* a rule sharing another's elements: compiled already */
                }
                gc->kind[e] = GK_CHARS;
                e = next;
            } else {
                gcomp_destroy(gc);
                free(terms.v), free(ranges.v), free(alts.v);
                return dj_fail(DJ_ERR_INVALID, "grammar: rule '%s': element %zu has type %u where an item must start",
                               rule_name(g, r), e, type);
            }
        }
    }
    gc->alt_off[g->n_rules] = (uint32_t)alts.n;
    gc->alts = alts.v;
    alts.v = NULL;
    gc->ranges = ranges.v;
    ranges.v = NULL;
    gc->n_ranges = ranges.n / 2;
    gc->n_terms = terms.n / 4;
    gc->terms = calloc(gc->n_terms ? gc->n_terms : 1, sizeof *gc->terms);
    if (!gc->terms) goto nomem;
    for (size_t t = 0; t < gc->n_terms; t++) {
        struct gterm *tm = &gc->terms[t];
        tm->r_off = terms.v[4 * t];
        tm->r_n = terms.v[4 * t + 1];
        tm->next = terms.v[4 * t + 2];
        const uint32_t *rr = gc->ranges + 2 * (size_t)tm->r_off;
        for (uint32_t i = 0; i < tm->r_n; i++)
            for (uint32_t c = rr[2 * i]; c <= rr[2 * i + 1] && c < 128; c++) tm->ascii[c >> 6] |= 1ull << (c & 63);
    }
    free(terms.v);
    enum dj_status st = check_left_recursion(g, gc);
    if (st != DJ_OK) {
        gcomp_destroy(gc);
        return st;
    }
    *out = gc;
    return DJ_OK;
nomem:
    gcomp_destroy(gc);
    free(terms.v);
    free(ranges.v);
    free(alts.v);
    return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory compiling the grammar");
}

/* ---- stack sets ------------------------------------------------------------ */

struct gset {
    uint32_t *el;    /* the stacks' elements, one stack after another */
    size_t n_el, cap_el;
    size_t *off;     /* n + 1 offsets into el */
    uint64_t *hs;    /* n: each stack's hash */
    size_t n, cap;
    uint32_t *ht;    /* dedupe while building: stack index + 1, 0 = free; ht_cap a power of 2 */
    size_t ht_cap;
};

static uint64_t hash_stack(const uint32_t *e, size_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ e[i]) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return h;
}

static void gset_free(struct gset *s) {
    free(s->el);
    free(s->off);
    free(s->hs);
    free(s->ht);
    memset(s, 0, sizeof *s);
}

static void gset_clear(struct gset *s) {
    s->n = s->n_el = 0;
    if (s->ht) memset(s->ht, 0, s->ht_cap * sizeof *s->ht);
}

static bool gset_reserve(struct gset *s, size_t n_stacks, size_t n_el) {
    if (n_el > s->cap_el || !s->el) { /* never NULL: gset_stack adds offsets to it */
        size_t cap = s->cap_el ? s->cap_el : 64;
        while (cap < n_el) cap *= 2;
        uint32_t *el = realloc(s->el, cap * sizeof *el);
        if (!el) return false;
        s->el = el;
        s->cap_el = cap;
    }
    if (n_stacks + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 8;
        while (cap < n_stacks + 1) cap *= 2;
        size_t *off = realloc(s->off, cap * sizeof *off);
        if (!off) return false;
        s->off = off;
        uint64_t *hs = realloc(s->hs, cap * sizeof *hs);
        if (!hs) return false;
        s->hs = hs;
        s->cap = cap;
    }
    return true;
}

static bool gset_append(struct gset *s, const uint32_t *e, size_t len, uint64_t h) {
    if (!gset_reserve(s, s->n + 1, s->n_el + len)) return false;
    if (s->n == 0) s->off[0] = 0;
    if (len) memcpy(s->el + s->n_el, e, len * sizeof *e);
    s->n_el += len;
    s->hs[s->n] = h;
    s->off[++s->n] = s->n_el;
    return true;
}

static inline const uint32_t *gset_stack(const struct gset *s, size_t i, size_t *len) {
    *len = s->off[i + 1] - s->off[i];
    return s->el + s->off[i];
}

/* 1 added, 0 already there, -1 out of memory or over the stack cap. */
static int gset_add(struct gset *s, const uint32_t *e, size_t len) {
    uint64_t h = hash_stack(e, len);
    if (2 * (s->n + 1) > s->ht_cap) {
        size_t cap = s->ht_cap ? 2 * s->ht_cap : 32;
        uint32_t *ht = calloc(cap, sizeof *ht);
        if (!ht) return -1;
        for (size_t i = 0; i < s->n; i++) {
            size_t j = (size_t)s->hs[i] & (cap - 1);
            while (ht[j]) j = (j + 1) & (cap - 1);
            ht[j] = (uint32_t)(i + 1);
        }
        free(s->ht);
        s->ht = ht;
        s->ht_cap = cap;
    }
    size_t j = (size_t)h & (s->ht_cap - 1);
    for (; s->ht[j]; j = (j + 1) & (s->ht_cap - 1)) {
        size_t i = s->ht[j] - 1, l;
        const uint32_t *o = gset_stack(s, i, &l);
        if (s->hs[i] == h && l == len && !memcmp(o, e, len * sizeof *e)) return 0;
    }
    if (s->n >= DJ_GMATCH_MAX_STACKS || len > DJ_GMATCH_MAX_DEPTH) return -1;
    if (!gset_append(s, e, len, h)) return -1;
    s->ht[j] = (uint32_t)s->n;
    return 1;
}

/* ---- the matcher ------------------------------------------------------------- */

struct dj_gmatch {
    const struct dj_grammar *g;
    struct gcomp *gc;
    struct gset cur; /* sorted, distinct */
    struct gutf8 u;
    uint64_t hash;
    /* scratch, not part of the state (a clone starts without it) */
    struct gset tmp[2];
    uint32_t *buf;
    size_t buf_cap;
    size_t work;
};

static bool buf_reserve(struct dj_gmatch *m, size_t n) {
    if (n <= m->buf_cap) return true;
    size_t cap = m->buf_cap ? m->buf_cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *b = realloc(m->buf, cap * sizeof *b);
    if (!b) return false;
    m->buf = b;
    m->buf_cap = cap;
    return true;
}

/* llama_grammar_advance_stack on m->buf[0..len): adds every stack it
 * expands to (terminal on top, or empty) to out.  The buffer is shared by
 * the recursion: a call writes only at indices >= len - 1 and puts back its
 * own top before returning, so the caller's stack is intact.  0, or -1
 * (out of memory, over a cap). */
static int advance(struct dj_gmatch *m, struct gset *out, size_t len) {
    if (++m->work > DJ_GMATCH_MAX_WORK || len > DJ_GMATCH_MAX_DEPTH) return -1;
    if (len == 0) return gset_add(out, m->buf, 0) < 0 ? -1 : 0;
    const struct gcomp *gc = m->gc;
    uint32_t top = m->buf[len - 1];
    if (gc->kind[top] != GK_REF) return gset_add(out, m->buf, len) < 0 ? -1 : 0;
    uint32_t r = gc->g->elems[top].value;
    bool has_next = gc->kind[top + 1] != GK_END;
    for (uint32_t a = gc->alt_off[r]; a < gc->alt_off[r + 1]; a++) {
        uint32_t start = gc->alts[a];
        size_t n = len - 1;
        if (!buf_reserve(m, len + 1)) return -1;
        if (has_next) m->buf[n++] = top + 1;
        if (gc->kind[start] != GK_END) m->buf[n++] = start;
        int rc = advance(m, out, n);
        if (rc) return rc;
    }
    m->buf[len - 1] = top;
    return 0;
}

/* Pops the matched terminal at the top of s and expands what follows into out. */
static int advance_after(struct dj_gmatch *m, struct gset *out, const uint32_t *s, size_t len, uint32_t next) {
    if (!buf_reserve(m, len + 1)) return -1;
    memcpy(m->buf, s, (len - 1) * sizeof *s);
    size_t n = len - 1;
    if (m->gc->kind[next] != GK_END) m->buf[n++] = next;
    return advance(m, out, n);
}

static int step_cp(struct dj_gmatch *m, const struct gset *from, struct gset *to, uint32_t cp) {
    const struct gcomp *gc = m->gc;
    gset_clear(to);
    m->work = 0;
    for (size_t i = 0; i < from->n; i++) {
        size_t len;
        const uint32_t *s = gset_stack(from, i, &len);
        if (!len || gc->kind[s[len - 1]] != GK_CHARS) continue;
        const struct gterm *t = &gc->terms[gc->term[s[len - 1]]];
        if (gterm_match(gc, t, cp) && advance_after(m, to, s, len, t->next)) return -1;
    }
    return to->n ? 0 : -1;
}

static int cmp_stacks(const void *a, const void *b, void *ctx) {
    const struct gset *s = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (s->hs[i] != s->hs[j]) return s->hs[i] < s->hs[j] ? -1 : 1;
    size_t li, lj;
    const uint32_t *x = gset_stack(s, i, &li), *y = gset_stack(s, j, &lj);
    if (li != lj) return li < lj ? -1 : 1;
    for (size_t k = 0; k < li; k++)
        if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
    return 0;
}

static uint64_t state_hash(const struct gset *s, const struct gutf8 *u) {
    uint64_t h = 0xcbf29ce484222325ull ^ s->n;
    for (size_t i = 0; i < s->n; i++) h = (h ^ s->hs[i]) * 0x100000001b3ull, h ^= h >> 31;
    h ^= ((uint64_t)u->value << 24) ^ ((uint64_t)u->n_remain << 16) ^ ((uint64_t)u->lo << 8) ^ u->hi;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* Makes src (distinct stacks) m's state, sorted; src may be a scratch set.
 * Sorting by (hash, length, elements) is an arbitrary but total order: it
 * only has to make equal sets equal arrays. */
static bool commit(struct dj_gmatch *m, const struct gset *src, const struct gutf8 *u) {
    struct gset *dst = src == &m->tmp[0] ? &m->tmp[1] : &m->tmp[0];
    size_t *ord = malloc((src->n ? src->n : 1) * sizeof *ord);
    if (!ord) return false;
    for (size_t i = 0; i < src->n; i++) ord[i] = i;
    qsort_r(ord, src->n, sizeof *ord, cmp_stacks, (void *)src);
    gset_clear(dst);
    for (size_t i = 0; i < src->n; i++) {
        size_t len;
        const uint32_t *s = gset_stack(src, ord[i], &len);
        if (!gset_append(dst, s, len, src->hs[ord[i]])) {
            free(ord);
            return false;
        }
    }
    free(ord);
    struct gset t = m->cur;
    m->cur = *dst;
    *dst = t;
    m->u = *u;
    m->hash = state_hash(&m->cur, &m->u);
    return true;
}

/* Keeps the stacks whose top set can take some completion of the pending
 * code point (llama_grammar_match_partial_char, but exact for negated sets). */
static bool filter_partial(struct dj_gmatch *m, const struct gset *from, struct gset *to, const struct gutf8 *u) {
    uint32_t lo, hi;
    gutf8_range(u, &lo, &hi);
    gset_clear(to);
    for (size_t i = 0; i < from->n; i++) {
        size_t len;
        const uint32_t *s = gset_stack(from, i, &len);
        if (!len || m->gc->kind[s[len - 1]] != GK_CHARS) continue;
        if (gterm_meets(m->gc, &m->gc->terms[m->gc->term[s[len - 1]]], lo, hi) && !gset_append(to, s, len, from->hs[i]))
            return false;
    }
    return to->n > 0;
}

/* The bytes from state (from, u); commits on success. */
static bool run_bytes(struct dj_gmatch *m, const struct gset *from, struct gutf8 u, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = gutf8_push(&u, s[i], &cp);
        if (r < 0) return false;
        if (r == 0) continue;
        struct gset *to = from == &m->tmp[0] ? &m->tmp[1] : &m->tmp[0];
        if (step_cp(m, from, to, cp)) return false;
        from = to;
    }
    if (u.n_remain) {
        struct gset *to = from == &m->tmp[0] ? &m->tmp[1] : &m->tmp[0];
        if (!filter_partial(m, from, to, &u)) return false;
        from = to;
    }
    if (from == &m->cur) { /* only reached with n == 0 */
        return true;
    }
    return commit(m, from, &u);
}

enum dj_status gmatch_create(const struct dj_grammar *g, struct dj_gmatch **out) {
    struct gcomp *gc;
    enum dj_status st = gcomp_create(g, &gc);
    if (st != DJ_OK) return st;
    struct dj_gmatch *m = calloc(1, sizeof *m);
    if (!m) {
        gcomp_unref(gc);
        return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
    }
    m->g = g;
    m->gc = gc;
    struct gutf8 u = {0};
    gset_clear(&m->tmp[0]);
    m->work = 0;
    for (uint32_t a = gc->alt_off[g->root]; a < gc->alt_off[g->root + 1]; a++) {
        uint32_t start = gc->alts[a];
        size_t n = 0;
        if (!buf_reserve(m, 1)) goto fail;
        if (gc->kind[start] != GK_END) m->buf[n++] = start;
        if (advance(m, &m->tmp[0], n)) goto fail;
    }
    if (!commit(m, &m->tmp[0], &u)) goto fail;
    *out = m;
    return DJ_OK;
fail:
    gmatch_free(m);
    return dj_fail(DJ_ERR_INVALID, "grammar: the start rule expands to more than %d stacks (or out of memory)",
                   DJ_GMATCH_MAX_STACKS);
}

struct dj_gmatch *gmatch_clone(const struct dj_gmatch *m) {
    struct dj_gmatch *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->g = m->g;
    c->gc = gcomp_ref(m->gc);
    c->u = m->u;
    c->hash = m->hash;
    if (!gset_reserve(&c->cur, m->cur.n, m->cur.n_el)) {
        gmatch_free(c);
        return NULL;
    }
    c->cur.n = m->cur.n;
    c->cur.n_el = m->cur.n_el;
    if (m->cur.n_el) memcpy(c->cur.el, m->cur.el, m->cur.n_el * sizeof *c->cur.el);
    memcpy(c->cur.off, m->cur.off, (m->cur.n + 1) * sizeof *c->cur.off);
    if (m->cur.n) memcpy(c->cur.hs, m->cur.hs, m->cur.n * sizeof *c->cur.hs);
    return c;
}

void gmatch_free(struct dj_gmatch *m) {
    if (!m) return;
    gcomp_unref(m->gc);
    gset_free(&m->cur);
    gset_free(&m->tmp[0]);
    gset_free(&m->tmp[1]);
    free(m->buf);
    free(m);
}

bool gmatch_accept_bytes(struct dj_gmatch *m, const char *s, size_t n) {
    if (n == 0) return true;
    return run_bytes(m, &m->cur, m->u, (const uint8_t *)s, n);
}

bool gmatch_accept_token(struct dj_gmatch *m, dj_token tok, bool text_ok, const char *piece, size_t n) {
    const struct gcomp *gc = m->gc;
    bool any_tok = false;
    if (m->u.n_remain == 0) {
        struct gset *to = &m->tmp[0];
        gset_clear(to);
        m->work = 0;
        for (size_t i = 0; i < m->cur.n; i++) {
            size_t len;
            const uint32_t *s = gset_stack(&m->cur, i, &len);
            if (!len) continue;
            uint32_t top = s[len - 1];
            uint8_t k = gc->kind[top];
            uint32_t v = gc->g->elems[top].value;
            bool hit = (k == GK_TOKEN && (dj_token)v == tok) || (k == GK_TOKEN_NOT && text_ok && (dj_token)v != tok);
            if (hit) {
                if (advance_after(m, to, s, len, top + 1)) return false;
                any_tok = true;
            }
        }
    }
    if (!any_tok) return text_ok && n > 0 && gmatch_accept_bytes(m, piece, n);
    struct gutf8 u0 = {0};
    if (!text_ok || n == 0) return commit(m, &m->tmp[0], &u0);
    /* Both ways may work: the token-element results (in tmp[0]) are united
     * with the text results, computed on a clone so that tmp[0] survives. */
    struct dj_gmatch *c = gmatch_clone(m);
    if (!c) return false;
    bool ok;
    if (!gmatch_accept_bytes(c, piece, n)) {
        ok = commit(m, &m->tmp[0], &u0);
    } else if (c->u.n_remain) {
        /* The text path ends inside a code point and a state has one decoder:
         * the text path is kept, the token paths are dropped.  Only a grammar
         * naming a token whose own text ends mid-character gets here. */
        ok = commit(m, &c->cur, &c->u);
    } else {
        ok = true;
        for (size_t i = 0; i < c->cur.n && ok; i++) {
            size_t len;
            const uint32_t *s = gset_stack(&c->cur, i, &len);
            ok = gset_add(&m->tmp[0], s, len) >= 0;
        }
        ok = ok && commit(m, &m->tmp[0], &u0);
    }
    gmatch_free(c);
    return ok;
}

bool gmatch_can_end(const struct dj_gmatch *m) {
    if (m->u.n_remain) return false;
    for (size_t i = 0; i < m->cur.n; i++)
        if (m->cur.off[i + 1] == m->cur.off[i]) return true;
    return false;
}

bool gmatch_can_continue(const struct dj_gmatch *m) {
    for (size_t i = 0; i < m->cur.n; i++)
        if (m->cur.off[i + 1] != m->cur.off[i]) return true;
    return false;
}

size_t gmatch_next_ranges(const struct dj_gmatch *m, uint32_t *out, size_t cap_pairs) {
    const struct gcomp *gc = m->gc;
    struct u32vec all = {0};
    uint32_t plo = 0, phi = 0x10FFFF;
    if (m->u.n_remain) gutf8_range(&m->u, &plo, &phi);
    for (size_t i = 0; i < m->cur.n; i++) {
        size_t len;
        const uint32_t *s = gset_stack(&m->cur, i, &len);
        if (!len || gc->kind[s[len - 1]] != GK_CHARS) continue;
        const struct gterm *t = &gc->terms[gc->term[s[len - 1]]];
        const uint32_t *r = gc->ranges + 2 * (size_t)t->r_off;
        for (uint32_t k = 0; k < t->r_n; k++) {
            uint32_t lo = r[2 * k] > plo ? r[2 * k] : plo, hi = r[2 * k + 1] < phi ? r[2 * k + 1] : phi;
            if (lo <= hi && !(u32vec_push(&all, lo) && u32vec_push(&all, hi))) {
                free(all.v);
                return 0;
            }
        }
    }
    size_t k = all.n / 2, n = 0;
    if (k) qsort(all.v, k, 2 * sizeof *all.v, cmp_pair);
    for (size_t i = 0; i < k; i++) {
        if (n && all.v[2 * i] <= all.v[2 * n - 1] + 1) {
            if (all.v[2 * i + 1] > all.v[2 * n - 1]) all.v[2 * n - 1] = all.v[2 * i + 1];
        } else {
            all.v[2 * n] = all.v[2 * i];
            all.v[2 * n + 1] = all.v[2 * i + 1];
            n++;
        }
    }
    for (size_t i = 0; i < n && i < cap_pairs; i++) {
        out[2 * i] = all.v[2 * i];
        out[2 * i + 1] = all.v[2 * i + 1];
    }
    free(all.v);
    return n;
}

size_t gmatch_forced_bytes(const struct dj_gmatch *m, char *buf, size_t cap) {
    struct dj_gmatch *c = gmatch_clone(m);
    if (!c) return 0;
    size_t n = 0;
    while (n < cap && !gmatch_can_end(c)) {
        bool tok_top = false;
        for (size_t i = 0; i < c->cur.n && !tok_top; i++) {
            size_t len;
            const uint32_t *s = gset_stack(&c->cur, i, &len);
            tok_top = len && c->gc->kind[s[len - 1]] != GK_CHARS;
        }
        uint32_t r[4];
        if (tok_top || gmatch_next_ranges(c, r, 2) != 1 || r[0] != r[1]) break;
        char b[4];
        size_t len = utf8_encode(r[0], b), done = 0;
        if (c->u.n_remain) done = len - c->u.n_remain; /* the bytes of it already read */
        if (n + (len - done) > cap) break;
        if (!gmatch_accept_bytes(c, b + done, len - done)) break;
        memcpy(buf + n, b + done, len - done);
        n += len - done;
    }
    gmatch_free(c);
    return n;
}

bool grammar_match(const struct dj_grammar *g, const char *s, size_t n) {
    struct dj_gmatch *m;
    if (gmatch_create(g, &m) != DJ_OK) return false;
    bool ok = gmatch_accept_bytes(m, s, n) && gmatch_can_end(m);
    gmatch_free(m);
    return ok;
}

/* ---- internals for the masks ---------------------------------------------------- */

const struct gcomp *gmatch_comp(const struct dj_gmatch *m) { return m->gc; }
size_t gmatch_n_stacks(const struct dj_gmatch *m) { return m->cur.n; }
const uint32_t *gmatch_stack(const struct dj_gmatch *m, size_t i, size_t *len) { return gset_stack(&m->cur, i, len); }
const struct gutf8 *gmatch_utf8(const struct dj_gmatch *m) { return &m->u; }
uint64_t gmatch_hash(const struct dj_gmatch *m) { return m->hash; }

size_t gmatch_key(const struct dj_gmatch *m, uint32_t *out, size_t cap) {
    size_t need = 3 + m->cur.n + m->cur.n_el;
    if (need > cap) return need;
    size_t k = 0;
    out[k++] = (uint32_t)m->cur.n;
    out[k++] = m->u.value;
    out[k++] = (uint32_t)m->u.n_remain | (uint32_t)m->u.lo << 8 | (uint32_t)m->u.hi << 16;
    for (size_t i = 0; i < m->cur.n; i++) {
        size_t len;
        const uint32_t *s = gset_stack(&m->cur, i, &len);
        out[k++] = (uint32_t)len;
        if (len) memcpy(out + k, s, len * sizeof *s);
        k += len;
    }
    return need;
}
