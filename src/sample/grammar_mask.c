/*
 * grammar_mask.c — token masks: which tokens of a vocabulary a matcher state
 * allows next, fast enough to run before every sampled token.
 *
 * The vocabulary (struct dj_gvocab) keeps the text tokens' pieces sorted by
 * bytes, each with the length of the prefix it shares with the one before:
 *
 *   sorted i:   0      1       2        3      ...
 *   piece:      "\"    "\",    "\",\n   "\"/   ...
 *   lcp:        0      2       3        2
 *
 * so a walk over the sorted pieces is a walk over their trie: the matcher
 * state after each byte of the current piece is kept per depth (levels), the
 * next piece restarts from depth lcp, and a prefix no stack survives rejects
 * every piece that shares it (skipped by scanning lcp, no matching).
 *
 * Masks are assembled from per-context results cached in the dj_gtok.  A
 * context is a suffix of a stack, [e_{n-k} .. e_top]: what a token does in
 * it depends only on those elements until it pops below them.  Walking a
 * context's tokens from its suffix alone sorts each into
 *   accepted    — consumed inside the suffix (or popping out of it exactly
 *                 at the token's end): allowed whatever lies below;
 *   rejected    — dies inside the suffix: forbidden whatever lies below;
 *   undecided   — pops out of the suffix with bytes left: depends on below.
 * Context k = 1 (the top element alone) walks the whole vocabulary; context
 * k + 1 walks only context k's undecided tokens.  A stack's share of the
 * mask is the union of the accepted sets down its suffixes until none is
 * undecided (or the bottom: what pops out of the whole stack with bytes
 * left is rejected).  Contexts are keyed by (parent context, element) and
 * computed lazily; in practice a stack needs 1-4 of them, all cached after
 * their first use, so a warm mask is a few ORs of bitsets or id lists.
 * On top, whole masks are cached by canonical state (the matcher's sorted
 * stack set + pending UTF-8; exact key compare) in a small LRU, so a state
 * seen again (inside a JSON string) is a memcpy.
 *
 * The walks run on interned stack nodes (struct gnode: element + parent,
 * hash-consed so equal stacks are equal ids), each caching its expansion
 * (the terminal-topped stacks it expands to, llama_grammar_advance_stack)
 * and its successor after its top matches, so a walk step is a few array
 * reads per live stack.  This is a second implementation of the matcher's
 * semantics; tests/unit/test_grammar_match.c checks every mask bit against
 * gmatch_accept_bytes.
 *
 * Tokens: EOG tokens are allowed exactly where gmatch_can_end; control
 * tokens and tokens with an empty piece never match grammar text; a token
 * element <[id]> matches its id (any type but EOG); !<[id]> matches every
 * text token but id.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar_internal.h"
#include "tokenizer/tokenizer.h"

/* Memory for cached contexts before they are all dropped (and recomputed
 * as needed): a JSON grammar on a 100k vocabulary uses a few MB. */
#define GTOK_CTX_BYTES_MAX ((size_t)256 << 20)
/* Interned nodes before the pool is reset between walks, and the hard cap
 * inside one walk (then the mask falls back to the plain matcher). */
#define GTOK_POOL_SOFT ((size_t)1 << 20)
#define GTOK_POOL_HARD ((size_t)1 << 23)
#define GTOK_LRU 64

enum { GV_NONE = 0, GV_TEXT, GV_EOG };

struct dj_gvocab {
    const struct dj_vocab *v;
    size_t n_vocab;
    size_t n_words;     /* (n_vocab + 63) / 64 */
    size_t n_text;
    uint32_t *ids;      /* n_text: token ids in piece byte order */
    size_t *poff;       /* n_text + 1: piece i = bytes[poff[i] .. poff[i+1]) */
    uint8_t *bytes;
    uint16_t *lcp;      /* n_text: prefix shared with piece i - 1 (clamped to 65535) */
    uint8_t *cls;       /* n_vocab: GV_* */
    uint32_t *rank;     /* n_vocab: sorted index of a text token */
    uint32_t *eog;
    size_t n_eog;
    uint64_t *text_bits;
    size_t max_len;
};

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const size_t *o = ctx; /* [3 * tok]: offset, length in the unsorted blob; then blob pointer */
    const uint8_t *blob = (const uint8_t *)(uintptr_t)o[0];
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx = o[2 + 2 * (size_t)x], ly = o[2 + 2 * (size_t)y];
    int c = memcmp(blob + o[1 + 2 * (size_t)x], blob + o[1 + 2 * (size_t)y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

void gvocab_free(struct dj_gvocab *gv) {
    if (!gv) return;
    free(gv->ids);
    free(gv->poff);
    free(gv->bytes);
    free(gv->lcp);
    free(gv->cls);
    free(gv->rank);
    free(gv->eog);
    free(gv->text_bits);
    free(gv);
}

size_t gvocab_n_tokens(const struct dj_gvocab *gv) { return gv->n_vocab; }

enum dj_status gvocab_create(const struct dj_vocab *v, struct dj_gvocab **out) {
    size_t nv = vocab_n_tokens(v);
    if (nv == 0 || nv >= UINT32_MAX) return dj_fail(DJ_ERR_INVALID, "gvocab: vocabulary of %zu tokens", nv);
    struct dj_gvocab *gv = calloc(1, sizeof *gv);
    size_t *meta = NULL; /* blob pointer, then (offset, length) per token */
    uint8_t *blob = NULL;
    size_t blob_n = 0, blob_cap = 0;
    if (!gv) goto nomem;
    gv->v = v;
    gv->n_vocab = nv;
    gv->n_words = (nv + 63) / 64;
    gv->cls = calloc(nv, 1);
    gv->rank = malloc(nv * sizeof *gv->rank);
    gv->text_bits = calloc(gv->n_words, sizeof *gv->text_bits);
    meta = malloc((1 + 2 * nv) * sizeof *meta);
    if (!gv->cls || !gv->rank || !gv->text_bits || !meta) goto nomem;
    char small[256];
    for (size_t t = 0; t < nv; t++) {
        gv->rank[t] = UINT32_MAX;
        meta[1 + 2 * t] = blob_n;
        meta[2 + 2 * t] = 0;
        if (vocab_is_eog(v, (dj_token)t)) {
            gv->cls[t] = GV_EOG;
            gv->n_eog++;
            continue;
        }
        if (vocab_token_type(v, (dj_token)t) == DJ_TOKEN_CONTROL) continue;
        size_t len = vocab_token_to_piece(v, (dj_token)t, false, small, sizeof small);
        if (len == 0) continue;
        if (blob_n + len > blob_cap) {
            size_t cap = blob_cap ? 2 * blob_cap : 1 << 16;
            while (cap < blob_n + len) cap *= 2;
            uint8_t *nb = realloc(blob, cap);
            if (!nb) goto nomem;
            blob = nb;
            blob_cap = cap;
        }
        if (len <= sizeof small)
            memcpy(blob + blob_n, small, len);
        else
            vocab_token_to_piece(v, (dj_token)t, false, (char *)blob + blob_n, len);
        meta[2 + 2 * t] = len;
        blob_n += len;
        gv->cls[t] = GV_TEXT;
        gv->n_text++;
        gv->text_bits[t / 64] |= 1ull << (t % 64);
        if (len > gv->max_len) gv->max_len = len;
    }
    meta[0] = (size_t)(uintptr_t)blob;
    gv->ids = malloc((gv->n_text ? gv->n_text : 1) * sizeof *gv->ids);
    gv->poff = malloc((gv->n_text + 1) * sizeof *gv->poff);
    gv->bytes = malloc(blob_n ? blob_n : 1);
    gv->lcp = malloc((gv->n_text ? gv->n_text : 1) * sizeof *gv->lcp);
    gv->eog = malloc((gv->n_eog ? gv->n_eog : 1) * sizeof *gv->eog);
    if (!gv->ids || !gv->poff || !gv->bytes || !gv->lcp || !gv->eog) goto nomem;
    size_t k = 0, e = 0;
    for (size_t t = 0; t < nv; t++) {
        if (gv->cls[t] == GV_TEXT) gv->ids[k++] = (uint32_t)t;
        if (gv->cls[t] == GV_EOG) gv->eog[e++] = (uint32_t)t;
    }
    qsort_r(gv->ids, gv->n_text, sizeof *gv->ids, cmp_piece, meta);
    size_t o = 0;
    for (size_t i = 0; i < gv->n_text; i++) {
        uint32_t t = gv->ids[i];
        size_t len = meta[2 + 2 * (size_t)t];
        gv->rank[t] = (uint32_t)i;
        gv->poff[i] = o;
        memcpy(gv->bytes + o, blob + meta[1 + 2 * (size_t)t], len);
        size_t l = 0;
        if (i) {
            size_t pl = gv->poff[i] - gv->poff[i - 1];
            const uint8_t *p = gv->bytes + gv->poff[i - 1], *q = gv->bytes + o;
            while (l < pl && l < len && p[l] == q[l]) l++;
        }
        gv->lcp[i] = (uint16_t)(l > 65535 ? 65535 : l);
        o += len;
    }
    gv->poff[gv->n_text] = o;
    free(meta);
    free(blob);
    *out = gv;
    return DJ_OK;
nomem:
    free(meta);
    free(blob);
    gvocab_free(gv);
    return dj_fail(DJ_ERR_NOMEM, "gvocab: out of memory for %zu tokens", nv);
}

/* ---- interned stack nodes ------------------------------------------------------ */

#define NO_ID UINT32_MAX

struct gnode {
    uint32_t elem, parent; /* node 0 is the empty stack */
    uint32_t succ;         /* the stack once the top terminal matched (NO_ID: not computed) */
    uint32_t exp_off, exp_n; /* expansion: t->exp[exp_off ..]; exp_n NO_ID: not computed */
    uint32_t stamp;        /* dedupe within one walk step */
    uint32_t ustamp;       /* dedupe within one expansion union */
    uint8_t nil, tok;      /* the expansion reaches the empty stack / a token element */
};

struct gctx {
    uint32_t parent, elem;
    uint64_t *acc_bits;   /* n_words, or NULL: then acc_ids */
    uint32_t *acc_ids;
    size_t n_acc;
    uint32_t *unc;        /* undecided tokens, as sorted indices, in order */
    uint16_t *unc_lcp;
    size_t n_unc;
};

struct level {
    size_t begin, end;    /* live char-topped nodes: t->lv[begin .. end) */
    struct gutf8 u;
    uint8_t nil, tok, exited;
};

struct mentry {
    uint64_t hash, used;
    uint32_t *key;
    size_t key_n;
    uint64_t *mask;
    size_t count;
};

struct dj_gtok {
    const struct dj_grammar *g;
    const struct dj_gvocab *gv;
    struct gcomp *gc;
    /* node pool */
    struct gnode *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *nht;
    size_t nht_cap;
    uint32_t *exp;
    size_t n_exp, cap_exp;
    uint32_t *cs;         /* children scratch of expansions */
    size_t n_cs, cap_cs;
    uint32_t stamp, ustamp;
    bool failed;          /* a cap was hit in this walk */
    /* walk scratch */
    uint32_t *lv;
    size_t n_lv, cap_lv;
    struct level *levels; /* max_len + 2 */
    uint8_t *cls;         /* per token of the walked subset */
    size_t cap_cls;
    /* contexts */
    struct gctx *ctx;
    size_t n_ctx, cap_ctx;
    uint32_t *cht;        /* ctx index + 1; 0 free */
    size_t cht_cap;
    size_t ctx_bytes;
    /* whole-mask LRU */
    struct mentry lru[GTOK_LRU];
    uint64_t clock;
    uint32_t *key;
    size_t cap_key;
    struct dj_gtok_stats stats;
};

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static void pool_reset(struct dj_gtok *t) {
    t->n_nodes = 1;
    memset(&t->nodes[0], 0, sizeof t->nodes[0]);
    t->nodes[0].succ = NO_ID;
    t->nodes[0].exp_n = 0;
    t->nodes[0].nil = 1;
    memset(t->nht, 0, t->nht_cap * sizeof *t->nht);
    t->n_exp = 0;
    t->n_cs = 0;
    t->stamp = t->ustamp = 1;
}

static inline size_t node_hash(uint32_t elem, uint32_t parent) {
    uint64_t h = ((uint64_t)elem << 32 | parent) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29));
}

/* The node for stack parent + [elem]; NO_ID (t->failed) on a cap or OOM. */
static uint32_t intern(struct dj_gtok *t, uint32_t elem, uint32_t parent) {
    size_t mask = t->nht_cap - 1, j = node_hash(elem, parent) & mask;
    for (; t->nht[j]; j = (j + 1) & mask) {
        uint32_t x = t->nht[j];
        if (t->nodes[x].elem == elem && t->nodes[x].parent == parent) return x;
    }
    if (t->n_nodes >= GTOK_POOL_HARD ||
        !grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof *t->nodes)) {
        t->failed = true;
        return NO_ID;
    }
    uint32_t x = (uint32_t)t->n_nodes++;
    t->nodes[x] = (struct gnode){.elem = elem, .parent = parent, .succ = NO_ID, .exp_n = NO_ID};
    t->nht[j] = x;
    if (2 * t->n_nodes > t->nht_cap) {
        size_t cap = 2 * t->nht_cap;
        uint32_t *ht = calloc(cap, sizeof *ht);
        if (!ht) {
            t->failed = true;
            return NO_ID;
        }
        for (size_t i = 1; i < t->n_nodes; i++) {
            size_t k = node_hash(t->nodes[i].elem, t->nodes[i].parent) & (cap - 1);
            while (ht[k]) k = (k + 1) & (cap - 1);
            ht[k] = (uint32_t)i;
        }
        free(t->nht);
        t->nht = ht;
        t->nht_cap = cap;
    }
    return x;
}

/* Computes node y's expansion (llama_grammar_advance_stack) once: the
 * union of its children's, children being what each alternative of the
 * referenced rule pushes.  Recursion depth is bounded by the grammar's
 * nesting plus pops (no left recursion: gcomp_create checked). */
static void expand(struct dj_gtok *t, uint32_t y) {
    if (t->failed || t->nodes[y].exp_n != NO_ID) return;
    const struct gcomp *gc = t->gc;
    uint32_t e = t->nodes[y].elem, parent = t->nodes[y].parent;
    uint8_t k = gc->kind[e];
    if (k != GK_REF) {
        t->nodes[y].exp_off = (uint32_t)t->n_exp;
        t->nodes[y].exp_n = 0;
        if (k == GK_CHARS) {
            if (!grow((void **)&t->exp, &t->cap_exp, t->n_exp + 1, sizeof *t->exp) || t->n_exp >= UINT32_MAX - 1) {
                t->failed = true;
                return;
            }
            t->exp[t->n_exp++] = y;
            t->nodes[y].exp_n = 1;
        } else {
            t->nodes[y].tok = 1;
        }
        return;
    }
    uint32_t r = gc->g->elems[e].value;
    uint32_t base = gc->kind[e + 1] == GK_END ? parent : intern(t, e + 1, parent);
    if (base == NO_ID) return;
    size_t cb = t->n_cs, na = gc->alt_off[r + 1] - gc->alt_off[r];
    if (!grow((void **)&t->cs, &t->cap_cs, cb + na, sizeof *t->cs)) {
        t->failed = true;
        return;
    }
    for (uint32_t a = gc->alt_off[r]; a < gc->alt_off[r + 1]; a++) {
        uint32_t s = gc->alts[a];
        uint32_t c = gc->kind[s] == GK_END ? base : intern(t, s, base);
        if (c == NO_ID) return;
        t->cs[t->n_cs++] = c;
    }
    for (size_t i = cb; i < cb + na; i++) {
        expand(t, t->cs[i]);
        if (t->failed) return;
    }
    uint32_t us = ++t->ustamp;
    size_t off = t->n_exp;
    uint8_t nil = 0, tok = 0;
    for (size_t i = cb; i < cb + na; i++) {
        const struct gnode *c = &t->nodes[t->cs[i]];
        nil |= c->nil;
        tok |= c->tok;
        if (!grow((void **)&t->exp, &t->cap_exp, t->n_exp + c->exp_n, sizeof *t->exp)) {
            t->failed = true;
            return;
        }
        for (uint32_t j = 0; j < c->exp_n; j++) {
            uint32_t z = t->exp[c->exp_off + j];
            if (t->nodes[z].ustamp != us) {
                t->nodes[z].ustamp = us;
                t->exp[t->n_exp++] = z;
            }
        }
    }
    t->n_cs = cb;
    if (t->n_exp - off > DJ_GMATCH_MAX_STACKS || t->n_exp >= UINT32_MAX - 1) {
        t->failed = true;
        return;
    }
    struct gnode *n = &t->nodes[y];
    n->exp_off = (uint32_t)off;
    n->exp_n = (uint32_t)(t->n_exp - off);
    n->nil = nil;
    n->tok = tok;
}

static uint32_t succ(struct dj_gtok *t, uint32_t x) {
    if (t->nodes[x].succ != NO_ID) return t->nodes[x].succ;
    uint32_t next = t->gc->terms[t->gc->term[t->nodes[x].elem]].next;
    uint32_t parent = t->nodes[x].parent;
    uint32_t y = t->gc->kind[next] == GK_END ? parent : intern(t, next, parent);
    if (y != NO_ID) t->nodes[x].succ = y;
    return y;
}

/* ---- the trie walk ----------------------------------------------------------------- */

enum { CLS_REJECT = 0, CLS_ACCEPT = 1, CLS_UNDECIDED = 2 };

static inline const uint8_t *piece_at(const struct dj_gvocab *gv, size_t i, size_t *len) {
    *len = gv->poff[i + 1] - gv->poff[i];
    return gv->bytes + gv->poff[i];
}

/* Level d + 1 from level d and byte b; false when nothing survives at all. */
static bool walk_step(struct dj_gtok *t, size_t d, uint8_t b) {
    struct level *L = &t->levels[d], *N = &t->levels[d + 1];
    const struct gcomp *gc = t->gc;
    N->u = L->u;
    N->nil = N->tok = 0;
    N->exited = L->exited | L->nil;
    N->begin = N->end = L->end;
    t->n_lv = L->end;
    uint32_t cp;
    int r = gutf8_push(&N->u, b, &cp);
    if (r < 0) return false;
    if (!grow((void **)&t->lv, &t->cap_lv, t->n_lv + (L->end - L->begin), sizeof *t->lv)) {
        t->failed = true;
        return false;
    }
    if (r == 0) {
        uint32_t lo, hi;
        gutf8_range(&N->u, &lo, &hi);
        for (size_t i = L->begin; i < L->end; i++) {
            uint32_t x = t->lv[i];
            if (gterm_meets(gc, &gc->terms[gc->term[t->nodes[x].elem]], lo, hi)) t->lv[t->n_lv++] = x;
        }
    } else {
        uint32_t st = ++t->stamp;
        for (size_t i = L->begin; i < L->end; i++) {
            uint32_t x = t->lv[i];
            if (!gterm_match(gc, &gc->terms[gc->term[t->nodes[x].elem]], cp)) continue;
            uint32_t y = succ(t, x);
            if (y == NO_ID) return false;
            expand(t, y);
            if (t->failed) return false;
            const struct gnode *ny = &t->nodes[y];
            N->nil |= ny->nil;
            N->tok |= ny->tok;
            if (!grow((void **)&t->lv, &t->cap_lv, t->n_lv + ny->exp_n, sizeof *t->lv)) {
                t->failed = true;
                return false;
            }
            ny = &t->nodes[y];
            for (uint32_t j = 0; j < ny->exp_n; j++) {
                uint32_t z = t->exp[ny->exp_off + j];
                if (t->nodes[z].stamp != st) {
                    t->nodes[z].stamp = st;
                    t->lv[t->n_lv++] = z;
                }
            }
        }
    }
    N->end = t->n_lv;
    return N->end > N->begin || N->nil || N->tok;
}

/* Sorts the tokens of a subset (sorted indices sub[0..n), NULL: all text
 * tokens; lcp[i] = prefix shared with the subset's previous token) into
 * t->cls[i], walking from the stacks roots[0..n_roots) with decoder u0
 * (sub NULL: the sorted tokens base .. base + n, lcp indexed from base).
 * relative: the empty stack is the bottom of a context (popping out with
 * bytes left: CLS_UNDECIDED); otherwise it is the end of the grammar
 * (bytes left: rejected).  false on a cap (t->failed). */
static bool walk(struct dj_gtok *t, const uint32_t *roots, size_t n_roots, struct gutf8 u0, const uint32_t *sub,
                 size_t base, const uint16_t *lcp, size_t n, bool relative) {
    const struct dj_gvocab *gv = t->gv;
    if (!grow((void **)&t->cls, &t->cap_cls, n ? n : 1, 1)) return t->failed = true, false;
    struct level *L0 = &t->levels[0];
    L0->u = u0;
    L0->nil = L0->tok = L0->exited = 0;
    L0->begin = 0;
    t->n_lv = 0;
    if (!grow((void **)&t->lv, &t->cap_lv, n_roots + 1, sizeof *t->lv)) return t->failed = true, false;
    for (size_t i = 0; i < n_roots; i++) {
        uint32_t x = roots[i];
        uint8_t k = x ? t->gc->kind[t->nodes[x].elem] : GK_END;
        if (!x)
            L0->nil = 1;
        else if (k == GK_CHARS)
            t->lv[t->n_lv++] = x;
        else
            L0->tok = 1;
    }
    L0->end = t->n_lv;
    size_t valid = 0; /* levels[0..valid] hold the previous token's prefix */
    for (size_t i = 0; i < n;) {
        size_t idx = sub ? sub[i] : base + i, len;
        const uint8_t *p = piece_at(gv, idx, &len);
        size_t d = i ? (lcp[i] < valid ? lcp[i] : valid) : 0;
        bool dead = false;
        while (d < len) {
            if (!walk_step(t, d, p[d])) {
                if (t->failed) return false;
                dead = true;
                break;
            }
            d++;
        }
        if (dead) {
            /* everything sharing p[0..d] dies at the same byte */
            uint8_t c = relative && (t->levels[d].exited || t->levels[d].nil) ? CLS_UNDECIDED : CLS_REJECT;
            t->cls[i++] = c;
            while (i < n && lcp[i] > d) t->cls[i++] = c;
            valid = d;
            continue;
        }
        const struct level *E = &t->levels[len];
        bool acc = E->u.n_remain ? E->end > E->begin : (E->end > E->begin || E->nil || E->tok);
        t->cls[i++] = acc ? CLS_ACCEPT : relative && E->exited ? CLS_UNDECIDED : CLS_REJECT;
        valid = len;
    }
    return true;
}

/* ---- contexts ---------------------------------------------------------------------- */

static inline size_t ctx_hash(uint32_t parent, uint32_t elem) {
    uint64_t h = ((uint64_t)parent << 32 | elem) * 0xff51afd7ed558ccdull;
    return (size_t)(h ^ (h >> 31));
}

static void ctx_free_all(struct dj_gtok *t) {
    for (size_t i = 0; i < t->n_ctx; i++) {
        free(t->ctx[i].acc_bits);
        free(t->ctx[i].acc_ids);
        free(t->ctx[i].unc);
        free(t->ctx[i].unc_lcp);
    }
    t->n_ctx = 0;
    t->ctx_bytes = 0;
    if (t->cht) memset(t->cht, 0, t->cht_cap * sizeof *t->cht);
}

static bool ctx_insert(struct dj_gtok *t, struct gctx *c) {
    if (!grow((void **)&t->ctx, &t->cap_ctx, t->n_ctx + 1, sizeof *t->ctx)) return false;
    if (2 * (t->n_ctx + 1) > t->cht_cap) {
        size_t cap = t->cht_cap ? 2 * t->cht_cap : 256;
        uint32_t *ht = calloc(cap, sizeof *ht);
        if (!ht) return false;
        for (size_t i = 0; i < t->n_ctx; i++) {
            size_t j = ctx_hash(t->ctx[i].parent, t->ctx[i].elem) & (cap - 1);
            while (ht[j]) j = (j + 1) & (cap - 1);
            ht[j] = (uint32_t)(i + 1);
        }
        free(t->cht);
        t->cht = ht;
        t->cht_cap = cap;
    }
    size_t j = ctx_hash(c->parent, c->elem) & (t->cht_cap - 1);
    while (t->cht[j]) j = (j + 1) & (t->cht_cap - 1);
    t->ctx[t->n_ctx] = *c;
    t->cht[j] = (uint32_t)(++t->n_ctx);
    return true;
}

/* The context of suffix s[len-k .. len) whose parent (suffix of length
 * k - 1) is context `parent` (NO_ID for k == 1).  NO_ID on failure. */
static uint32_t ctx_get(struct dj_gtok *t, uint32_t parent, const uint32_t *s, size_t len, size_t k) {
    uint32_t elem = s[len - k];
    if (t->cht_cap) {
        for (size_t j = ctx_hash(parent, elem) & (t->cht_cap - 1); t->cht[j]; j = (j + 1) & (t->cht_cap - 1)) {
            const struct gctx *c = &t->ctx[t->cht[j] - 1];
            if (c->parent == parent && c->elem == elem) return t->cht[j] - 1;
        }
    }
    const struct dj_gvocab *gv = t->gv;
    if (t->n_nodes > GTOK_POOL_SOFT || t->stamp > UINT32_MAX / 2 || t->ustamp > UINT32_MAX / 2) pool_reset(t);
    t->failed = false;
    uint32_t x = 0;
    for (size_t i = len - k; i < len && x != NO_ID; i++) x = intern(t, s[i], x);
    if (x == NO_ID) return NO_ID;
    const uint32_t *sub = NULL;
    const uint16_t *lcp = gv->lcp;
    size_t n = gv->n_text;
    if (parent != NO_ID) {
        sub = t->ctx[parent].unc;
        lcp = t->ctx[parent].unc_lcp;
        n = t->ctx[parent].n_unc;
        t->stats.n_checked += n;
    }
    struct gutf8 u0 = {0};
    if (!walk(t, &x, 1, u0, sub, 0, lcp, n, true)) return NO_ID;

    struct gctx c = {.parent = parent, .elem = elem};
    size_t n_acc = 0, n_unc = 0;
    for (size_t i = 0; i < n; i++) n_acc += t->cls[i] == CLS_ACCEPT, n_unc += t->cls[i] == CLS_UNDECIDED;
    bool bits = n_acc > gv->n_words;
    if (bits)
        c.acc_bits = calloc(gv->n_words, sizeof *c.acc_bits);
    else
        c.acc_ids = malloc((n_acc ? n_acc : 1) * sizeof *c.acc_ids);
    c.unc = malloc((n_unc ? n_unc : 1) * sizeof *c.unc);
    c.unc_lcp = malloc((n_unc ? n_unc : 1) * sizeof *c.unc_lcp);
    if ((bits ? !c.acc_bits : !c.acc_ids) || !c.unc || !c.unc_lcp) goto nomem;
    size_t prev = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t idx = sub ? sub[i] : i;
        if (t->cls[i] == CLS_ACCEPT) {
            uint32_t tok = gv->ids[idx];
            if (bits)
                c.acc_bits[tok / 64] |= 1ull << (tok % 64);
            else
                c.acc_ids[c.n_acc++] = tok;
        } else if (t->cls[i] == CLS_UNDECIDED) {
            size_t l = 0;
            if (prev != SIZE_MAX) {
                size_t la, lb;
                const uint8_t *a = piece_at(gv, prev, &la), *b = piece_at(gv, idx, &lb);
                while (l < la && l < lb && l < 65535 && a[l] == b[l]) l++;
            }
            c.unc[c.n_unc] = (uint32_t)idx;
            c.unc_lcp[c.n_unc++] = (uint16_t)l;
            prev = idx;
        }
    }
    c.n_acc = bits ? n_acc : c.n_acc;
    if (!ctx_insert(t, &c)) goto nomem;
    t->ctx_bytes += sizeof c + (bits ? gv->n_words * 8 : n_acc * 4) + n_unc * 6;
    return (uint32_t)(t->n_ctx - 1);
nomem:
    free(c.acc_bits);
    free(c.acc_ids);
    free(c.unc);
    free(c.unc_lcp);
    return NO_ID;
}

static inline void or_ctx(const struct dj_gtok *t, const struct gctx *c, uint64_t *mask) {
    if (c->acc_bits) {
        for (size_t w = 0; w < t->gv->n_words; w++) mask[w] |= c->acc_bits[w];
    } else {
        for (size_t i = 0; i < c->n_acc; i++) mask[c->acc_ids[i] / 64] |= 1ull << (c->acc_ids[i] % 64);
    }
}

/* ---- masks ------------------------------------------------------------------------------- */

enum dj_status gtok_create(const struct dj_grammar *g, const struct dj_gvocab *gv, struct dj_gtok **out) {
    struct gcomp *gc;
    enum dj_status st = gcomp_create(g, &gc);
    if (st != DJ_OK) return st;
    struct dj_gtok *t = calloc(1, sizeof *t);
    if (!t) {
        gcomp_unref(gc);
        return dj_fail(DJ_ERR_NOMEM, "gtok: out of memory");
    }
    t->g = g;
    t->gv = gv;
    t->gc = gc;
    t->cap_nodes = 1024;
    t->nodes = malloc(t->cap_nodes * sizeof *t->nodes);
    t->nht_cap = 2048;
    t->nht = calloc(t->nht_cap, sizeof *t->nht);
    t->levels = malloc((gv->max_len + 2) * sizeof *t->levels);
    if (!t->nodes || !t->nht || !t->levels) {
        gtok_free(t);
        return dj_fail(DJ_ERR_NOMEM, "gtok: out of memory");
    }
    pool_reset(t);
    *out = t;
    return DJ_OK;
}

void gtok_free(struct dj_gtok *t) {
    if (!t) return;
    ctx_free_all(t);
    free(t->ctx);
    free(t->cht);
    for (size_t i = 0; i < GTOK_LRU; i++) {
        free(t->lru[i].key);
        free(t->lru[i].mask);
    }
    gcomp_unref(t->gc);
    free(t->nodes);
    free(t->nht);
    free(t->exp);
    free(t->cs);
    free(t->lv);
    free(t->levels);
    free(t->cls);
    free(t->key);
    free(t);
}

/* The plain way, for states the fast path cannot take (a cap was hit):
 * every token through a clone of the matcher. */
static void mask_brute(struct dj_gtok *t, const struct dj_gmatch *m, uint64_t *mask) {
    const struct dj_gvocab *gv = t->gv;
    memset(mask, 0, gv->n_words * sizeof *mask);
    for (size_t tok = 0; tok < gv->n_vocab; tok++) {
        struct dj_gmatch *c = gmatch_clone(m);
        if (!c) return;
        if (gtok_accept(t, c, (dj_token)tok)) mask[tok / 64] |= 1ull << (tok % 64);
        gmatch_free(c);
    }
}

/* The first sorted piece whose first byte is >= b (n_text if none). */
static size_t first_byte_at_least(const struct dj_gvocab *gv, unsigned b) {
    size_t lo = 0, hi = gv->n_text;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (gv->bytes[gv->poff[mid]] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool mask_fast(struct dj_gtok *t, const struct dj_gmatch *m, uint64_t *mask) {
    const struct dj_gvocab *gv = t->gv;
    const struct gcomp *gc = t->gc;
    const struct gutf8 *u = gmatch_utf8(m);
    size_t ns = gmatch_n_stacks(m);
    memset(mask, 0, gv->n_words * sizeof *mask);
    if (u->n_remain) {
        /* after a token that ended inside a code point: rare, one walk of
         * the whole vocabulary from the whole state */
        if (t->n_nodes > GTOK_POOL_SOFT) pool_reset(t);
        t->failed = false;
        t->n_cs = 0;
        uint32_t *roots = malloc(ns * sizeof *roots);
        if (!roots) return false;
        for (size_t i = 0; i < ns; i++) {
            size_t len;
            const uint32_t *s = gmatch_stack(m, i, &len);
            uint32_t x = 0;
            for (size_t j = 0; j < len && x != NO_ID; j++) x = intern(t, s[j], x);
            roots[i] = x;
            if (x == NO_ID) {
                free(roots);
                return false;
            }
        }
        /* only pieces whose first byte continues the sequence can pass:
         * in byte order they are one run */
        size_t lo = first_byte_at_least(gv, u->lo), hi = first_byte_at_least(gv, u->hi + 1u);
        t->stats.n_checked += hi - lo;
        bool ok = walk(t, roots, ns, *u, NULL, lo, gv->lcp + lo, hi - lo, false);
        free(roots);
        if (!ok) return false;
        for (size_t i = 0; i < hi - lo; i++)
            if (t->cls[i] == CLS_ACCEPT) mask[gv->ids[lo + i] / 64] |= 1ull << (gv->ids[lo + i] % 64);
        return true;
    }
    if (t->ctx_bytes > GTOK_CTX_BYTES_MAX) ctx_free_all(t);
    bool can_end = false;
    for (size_t i = 0; i < ns; i++) {
        size_t len;
        const uint32_t *s = gmatch_stack(m, i, &len);
        if (!len) {
            can_end = true;
            continue;
        }
        uint32_t top = s[len - 1], v = gc->g->elems[top].value;
        uint8_t k = gc->kind[top];
        if (k == GK_TOKEN) {
            if (v < gv->n_vocab && gv->cls[v] != GV_EOG) mask[v / 64] |= 1ull << (v % 64);
            continue;
        }
        if (k == GK_TOKEN_NOT) {
            for (size_t w = 0; w < gv->n_words; w++)
                mask[w] |= gv->text_bits[w] & (w == v / 64 ? ~(1ull << (v % 64)) : ~0ull);
            continue;
        }
        uint32_t c = NO_ID;
        for (size_t kk = 1; kk <= len; kk++) {
            c = ctx_get(t, c, s, len, kk);
            if (c == NO_ID) return false;
            or_ctx(t, &t->ctx[c], mask);
            if (!t->ctx[c].n_unc) break;
        }
    }
    if (can_end)
        for (size_t i = 0; i < gv->n_eog; i++) mask[gv->eog[i] / 64] |= 1ull << (gv->eog[i] % 64);
    return true;
}

size_t gtok_mask(struct dj_gtok *t, const struct dj_gmatch *m, uint64_t *mask) {
    const struct dj_gvocab *gv = t->gv;
    t->stats.n_mask++;
    uint64_t h = gmatch_hash(m);
    size_t key_n = gmatch_key(m, t->key, t->cap_key);
    if (key_n > t->cap_key) {
        if (grow((void **)&t->key, &t->cap_key, key_n, sizeof *t->key))
            gmatch_key(m, t->key, t->cap_key);
        else
            key_n = 0; /* no key: no caching */
    }
    t->clock++;
    if (key_n) {
        for (size_t i = 0; i < GTOK_LRU; i++) {
            struct mentry *e = &t->lru[i];
            if (e->mask && e->hash == h && e->key_n == key_n && !memcmp(e->key, t->key, key_n * sizeof *t->key)) {
                memcpy(mask, e->mask, gv->n_words * sizeof *mask);
                e->used = t->clock;
                t->stats.n_mask_cached++;
                return e->count;
            }
        }
    }
    if (!mask_fast(t, m, mask)) mask_brute(t, m, mask);
    size_t count = 0;
    for (size_t w = 0; w < gv->n_words; w++) count += (size_t)__builtin_popcountll(mask[w]);
    if (key_n) {
        struct mentry *e = &t->lru[0];
        for (size_t i = 1; i < GTOK_LRU && e->mask; i++)
            if (!t->lru[i].mask || t->lru[i].used < e->used) e = &t->lru[i];
        if (!e->mask) e->mask = malloc(gv->n_words * sizeof *e->mask);
        uint32_t *key = realloc(e->key, key_n * sizeof *key);
        if (e->mask && key) {
            e->key = key;
            memcpy(e->key, t->key, key_n * sizeof *key);
            memcpy(e->mask, mask, gv->n_words * sizeof *mask);
            e->key_n = key_n;
            e->hash = h;
            e->count = count;
            e->used = t->clock;
        } else {
            if (key) e->key = key;
            free(e->mask);
            e->mask = NULL;
        }
    }
    return count;
}

bool gtok_accept(struct dj_gtok *t, struct dj_gmatch *m, dj_token tok) {
    const struct dj_gvocab *gv = t->gv;
    if (tok < 0 || (size_t)tok >= gv->n_vocab) return false;
    uint8_t c = gv->cls[tok];
    if (c == GV_EOG) return gmatch_can_end(m);
    size_t len = 0;
    const uint8_t *p = NULL;
    if (c == GV_TEXT) p = piece_at(gv, gv->rank[tok], &len);
    return gmatch_accept_token(m, tok, c == GV_TEXT, (const char *)p, len);
}

void gtok_get_stats(const struct dj_gtok *t, struct dj_gtok_stats *out) { *out = t->stats; }
