/*
 * grammar_internal.h — what the matcher (grammar_match.c) and the token
 * masks (grammar_mask.c) share: the compiled grammar tables, the strict
 * UTF-8 decoder, and a few matcher internals the masks read.  Not part of
 * the public interface (grammar.h).
 *
 * A compiled grammar (struct gcomp) is derived from an immutable dj_grammar:
 *
 *   elems (the IR)   kind[e]   term[e] -----> terms[t] { ascii[2], ranges r_off..r_off+r_n, next }
 *   rule r --------> alts[alt_off[r] .. alt_off[r+1])  (first element of each alternative)
 *
 * A character set is reduced to sorted, disjoint, positive code point ranges
 * (negated sets complemented over 0..0x10FFFF) plus a bitmap of its ASCII
 * members, so matching one code point is one bit test on the common path.
 * `next` is the element after the set: END/ALT means the alternative is done.
 * It is reference-counted so that a matcher's clones share it.
 */
#ifndef DJ_SAMPLE_GRAMMAR_INTERNAL_H
#define DJ_SAMPLE_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sample/grammar.h"

/* The most stacks a matcher state may hold; a step that would need more
 * fails (the input is rejected) instead of growing without bound. */
#define DJ_GMATCH_MAX_STACKS 4096
/* Expansion calls allowed in one code point step (ambiguous grammars can
 * derive the same stack exponentially many ways before dedupe sees it). */
#define DJ_GMATCH_MAX_WORK ((size_t)1 << 20)

enum gkind {
    GK_NONE = 0, /* not reached by any rule (or inside a set: CHAR_ALT / RNG_UPPER) */
    GK_END,      /* END or ALT: the alternative is over */
    GK_REF,      /* RULE_REF */
    GK_CHARS,    /* first element of a character set */
    GK_TOKEN,    /* DJ_GE_TOKEN */
    GK_TOKEN_NOT /* DJ_GE_TOKEN_NOT */
};

struct gterm {
    uint64_t ascii[2]; /* bit c: code point c < 128 is in the set */
    uint32_t r_off;    /* ranges[2*r_off ..]: lo, hi pairs, sorted, disjoint */
    uint32_t r_n;
    uint32_t next;     /* element after the set */
};

struct gcomp {
    const struct dj_grammar *g;
    atomic_size_t refs;
    size_t n_elems;
    uint8_t *kind;     /* n_elems: enum gkind */
    uint32_t *term;    /* n_elems: index into terms for GK_CHARS, else UINT32_MAX */
    struct gterm *terms;
    size_t n_terms;
    uint32_t *ranges;  /* pairs */
    size_t n_ranges;
    uint32_t *alt_off; /* n_rules + 1 */
    uint32_t *alts;
};

/* Builds the tables, validating the IR (rule refs in range, every rule
 * ended by END inside elems, well-formed sets, no left recursion):
 * DJ_ERR_INVALID with a message otherwise; DJ_ERR_NOMEM. */
enum dj_status gcomp_create(const struct dj_grammar *g, struct gcomp **out);
struct gcomp *gcomp_ref(struct gcomp *gc);
void gcomp_unref(struct gcomp *gc); /* accepts NULL */

static inline bool gterm_match(const struct gcomp *gc, const struct gterm *t, uint32_t cp) {
    if (cp < 128) return (t->ascii[cp >> 6] >> (cp & 63)) & 1;
    const uint32_t *r = gc->ranges + 2 * (size_t)t->r_off;
    for (uint32_t i = 0; i < t->r_n; i++) {
        if (cp < r[2 * i]) return false;
        if (cp <= r[2 * i + 1]) return true;
    }
    return false;
}

/* Some code point in [lo, hi] is in the set. */
static inline bool gterm_meets(const struct gcomp *gc, const struct gterm *t, uint32_t lo, uint32_t hi) {
    const uint32_t *r = gc->ranges + 2 * (size_t)t->r_off;
    for (uint32_t i = 0; i < t->r_n; i++)
        if (r[2 * i] <= hi && lo <= r[2 * i + 1]) return true;
    return false;
}

/* ---- strict UTF-8 (Unicode table 3-7: no overlongs, surrogates, > U+10FFFF) ---- */

struct gutf8 {
    uint32_t value;   /* bits gathered so far */
    uint8_t n_remain; /* continuation bytes still to come; 0 = between code points */
    uint8_t lo, hi;   /* allowed range of the next continuation byte */
};

/* Feeds one byte: -1 invalid, 0 code point incomplete, 1 complete (*cp set;
 * the decoder is back between code points). */
static inline int gutf8_push(struct gutf8 *u, uint8_t b, uint32_t *cp) {
    if (u->n_remain == 0) {
        if (b < 0x80) {
            *cp = b;
            return 1;
        }
        if (b < 0xC2 || b > 0xF4) return -1;
        u->lo = 0x80;
        u->hi = 0xBF;
        if (b < 0xE0) {
            u->n_remain = 1;
            u->value = b & 0x1F;
        } else if (b < 0xF0) {
            u->n_remain = 2;
            u->value = b & 0x0F;
            if (b == 0xE0) u->lo = 0xA0;
            if (b == 0xED) u->hi = 0x9F;
        } else {
            u->n_remain = 3;
            u->value = b & 0x07;
            if (b == 0xF0) u->lo = 0x90;
            if (b == 0xF4) u->hi = 0x8F;
        }
        return 0;
    }
    if (b < u->lo || b > u->hi) return -1;
    u->value = (u->value << 6) | (b & 0x3Fu);
    u->lo = 0x80;
    u->hi = 0xBF;
    if (--u->n_remain) return 0;
    *cp = u->value;
    u->value = 0;
    return 1;
}

/* The code points a pending partial sequence can still complete to: exactly
 * [*lo, *hi] (the byte ranges of table 3-7 make it one interval). */
static inline void gutf8_range(const struct gutf8 *u, uint32_t *lo, uint32_t *hi) {
    unsigned rest = 6u * (unsigned)(u->n_remain - 1);
    *lo = ((u->value << 6) | (u->lo & 0x3Fu)) << rest;
    *hi = (((u->value << 6) | (u->hi & 0x3Fu)) << rest) | ((1u << rest) - 1);
}

/* ---- matcher internals read by the masks ---- */

const struct gcomp *gmatch_comp(const struct dj_gmatch *m);
size_t gmatch_n_stacks(const struct dj_gmatch *m);
/* Stack i, bottom first; its top (last) is a GK_CHARS / GK_TOKEN* element;
 * length 0 = the grammar may end.  Stacks are kept sorted and distinct. */
const uint32_t *gmatch_stack(const struct dj_gmatch *m, size_t i, size_t *len);
const struct gutf8 *gmatch_utf8(const struct dj_gmatch *m);
/* A hash of the canonical state (stacks + pending UTF-8); equal states hash equal. */
uint64_t gmatch_hash(const struct dj_gmatch *m);
/* The canonical state as words (for exact cache keys): writes up to cap words
 * and returns the full count. */
size_t gmatch_key(const struct dj_gmatch *m, uint32_t *out, size_t cap);
/* Advances by one token: stacks whose top is a token element take it by id
 * (TOKEN_NOT only takes text tokens, text_ok); when text_ok, the others read
 * piece[0..n) as bytes.  false (m unchanged) if no stack survives. */
bool gmatch_accept_token(struct dj_gmatch *m, dj_token tok, bool text_ok, const char *piece, size_t n);

#endif
