/*
 * diff.c — the structural diff engine (spec §1.4): spans of diff.h from a
 * previous and a current token sequence.
 *
 * Algorithm, in the order the code runs:
 *
 *  1. Fast paths.  p = longest common prefix (memcmp speed).  p == n_prev:
 *     pure append; p == n_curr: truncation.  Otherwise s = longest common
 *     suffix of what is left; if one side's middle is empty it is a single
 *     splice (insertion or deletion); if there is no common suffix and
 *     prev's dropped tail is shorter than the smallest anchor, it is
 *     "prefix kept then appended" (the tail is aligned by a tiny DP).
 *  2. Block-level matching on the middle prev[p, n_prev-s) × curr[p, n_curr-s).
 *     prev's blocks (aligned at multiples of the block size B in prev, the
 *     KV blocks) are indexed by content; curr is scanned with a rolling hash
 *     over every window of B tokens, each hit verified token by token, then
 *     extended forward and backward into an anchor (a maximal equal run).
 *     A block-level LCS picks the heaviest chain of anchors that increase in
 *     both sequences (weighted, O(k log k) with a Fenwick tree of maxima).
 *  3. Token-level refinement.  Each gap between chosen anchors (or a middle
 *     with no anchor) gets an exact O(a·c) LCS DP when it fits (≤ 2^20 cells,
 *     within the budget below): anchors shorter than B would be chance matches
 *     of common tokens that pull the alignment off.  A gap too big for the DP
 *     is diffed again with blocks of B/4, B/16, … (down to 4 tokens); what is
 *     left at the end becomes REPLACE + DELETE|INSERT.
 *
 * The rolling hash (polynomial mod 2^64) only finds candidates: FNV-1a
 * (kv/hash.h) cannot slide over a window, and every candidate is verified, so
 * hash quality affects speed only, never the result.
 *
 * Complexity, n = n_prev, m = n_curr, counted in the result's `work`:
 *   - equal / append / truncate / splice / prefix-append: O(n + m);
 *   - otherwise O((n + m)·L) expected for hashing and scanning, L = the number
 *     of block-size levels (3 for B = 64), O(k log k) for k anchors, plus DP
 *     cells, which are capped by a budget of ⌈n/B⌉·m + 2^20 cells: O(n·m/B)
 *     worst case, as the spec says (the constant 2^20 cells, ~1.5 ms measured
 *     at ~1.5 ns/cell, makes small diffs exact).
 *   test_kv_diff checks `work` against these bounds on adversarial inputs.
 *
 * Quality: the result is an exact LCS when the DP covers the whole middle; in
 * general KEEP coverage is near the LCS (test_kv_diff measures the ratio).
 * All scratch is malloc'd per call; the only failure is DJ_ERR_NOMEM.
 */
#include "kv/diff.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"

#define DIFF_MIN_ANCHOR 4          /* smallest block size used for anchors */
#define DIFF_DP_SMALL ((size_t)1 << 14) /* a region this small goes straight to the DP */
#define DIFF_DP_FLOOR ((uint64_t)1 << 20) /* DP cells every diff may spend (~1 ms), whatever n·m/B */
#define DIFF_DP_MAX ((size_t)1 << 20)     /* DP cells of one region: 1 MiB of directions */

#define ROLL_MUL 0x9e3779b97f4a7c15ULL

struct anchor {
    size_t ci, pi, len; /* curr start, prev start, length of an equal run */
};

struct ctx {
    const dj_token *prev, *curr;
    struct diff_span *spans;
    size_t n_spans, cap;
    size_t cur_p, cur_c;      /* where the emitted spans end, in prev and curr */
    size_t pend_del, pend_ins; /* non-KEEP tokens since the last KEEP, not yet emitted */
    uint64_t work;
    uint64_t dp_budget;       /* DP cells left */
    size_t block_size;        /* the top-level block size B */
    enum dj_status st;        /* first failure; everything after it is a no-op */
};

const char *diff_op_name(enum diff_op op) {
    switch (op) {
    case DIFF_KEEP: return "KEEP";
    case DIFF_INSERT: return "INSERT";
    case DIFF_DELETE: return "DELETE";
    case DIFF_REPLACE: return "REPLACE";
    }
    return "?";
}

/* ---- Span output ----------------------------------------------------------- */

static void push(struct ctx *x, enum diff_op op, size_t len) {
    if (x->st || len == 0) return;
    if (x->n_spans && x->spans[x->n_spans - 1].op == op) {
        x->spans[x->n_spans - 1].length += len;
    } else {
        if (x->n_spans == x->cap) {
            size_t ncap = x->cap ? x->cap * 2 : 16, bytes;
            if (dj_mul_overflow(ncap, sizeof *x->spans, &bytes)) { x->st = DJ_ERR_NOMEM; return; }
            struct diff_span *s = realloc(x->spans, bytes);
            if (!s) { x->st = DJ_ERR_NOMEM; return; }
            x->spans = s;
            x->cap = ncap;
        }
        x->spans[x->n_spans++] = (struct diff_span){op, x->cur_p, x->cur_c, len};
    }
    if (op != DIFF_INSERT) x->cur_p += len;
    if (op != DIFF_DELETE) x->cur_c += len;
}

/* Writes the pending gap in normal form: REPLACE, then DELETE or INSERT. */
static void flush(struct ctx *x) {
    size_t r = x->pend_del < x->pend_ins ? x->pend_del : x->pend_ins;
    push(x, DIFF_REPLACE, r);
    push(x, DIFF_DELETE, x->pend_del - r);
    push(x, DIFF_INSERT, x->pend_ins - r);
    x->pend_del = x->pend_ins = 0;
}

static void emit_keep(struct ctx *x, size_t len) {
    if (len == 0) return;
    flush(x);
    push(x, DIFF_KEEP, len);
}

static void emit_gap(struct ctx *x, size_t n_del, size_t n_ins) {
    x->pend_del += n_del;
    x->pend_ins += n_ins;
}

/* ---- Small helpers --------------------------------------------------------- */

static size_t common_prefix(const dj_token *a, const dj_token *b, size_t n) {
    size_t i = 0;
    /* 8 tokens per step through memcmp: the append fast path runs at memory speed */
    while (i + 8 <= n && memcmp(a + i, b + i, 8 * sizeof *a) == 0) i += 8;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static size_t common_suffix(const dj_token *a, size_t na, const dj_token *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[na - 1 - i] == b[nb - 1 - i]) i++;
    return i;
}

size_t diff_common_prefix(const dj_token *prev, size_t n_prev, const dj_token *curr, size_t n_curr) {
    size_t n = n_prev < n_curr ? n_prev : n_curr;
    return n ? common_prefix(prev, curr, n) : 0;
}

static size_t next_bs(size_t bs) {
    if (bs <= DIFF_MIN_ANCHOR) return 0;
    return bs / 4 > DIFF_MIN_ANCHOR ? bs / 4 : DIFF_MIN_ANCHOR;
}

static inline uint64_t roll_val(dj_token t) { return (uint64_t)(uint32_t)t + 1; }

static uint64_t roll_hash(const dj_token *t, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * ROLL_MUL + roll_val(t[i]);
    return h;
}

static inline size_t bucket_of(uint64_t h, unsigned bits) {
    h ^= h >> 31;
    h *= 0xff51afd7ed558ccdULL;
    return (size_t)(h >> (64 - bits));
}

/* ---- Exact LCS by dynamic programming ------------------------------------- */

/* Diffs prev[ap, ap+an) × curr[cp, cp+cn) exactly; an·cn = cells ≤ DIFF_DP_MAX
 * (or a caller-checked bound).  Directions: 0 match, 1 skip prev, 2 skip curr. */
static void dp_region(struct ctx *x, size_t ap, size_t an, size_t cp, size_t cn, size_t cells) {
    size_t w = cn + 1, rows_bytes;
    uint8_t *dir = malloc(cells ? cells : 1);
    uint32_t *row;
    if (dj_mul_overflow(2 * w, sizeof *row, &rows_bytes)) { free(dir); x->st = DJ_ERR_NOMEM; return; }
    row = malloc(rows_bytes);
    if (!dir || !row) {
        free(dir);
        free(row);
        x->st = DJ_ERR_NOMEM;
        return;
    }
    uint32_t *up = row, *cur = row + w;
    memset(up, 0, w * sizeof *up);
    const dj_token *a = x->prev + ap, *b = x->curr + cp;
    for (size_t i = 1; i <= an; i++) {
        cur[0] = 0;
        uint8_t *d = dir + (i - 1) * cn;
        dj_token ai = a[i - 1];
        for (size_t j = 1; j <= cn; j++) {
            if (ai == b[j - 1]) {
                cur[j] = up[j - 1] + 1;
                d[j - 1] = 0;
            } else if (up[j] >= cur[j - 1]) {
                cur[j] = up[j];
                d[j - 1] = 1;
            } else {
                cur[j] = cur[j - 1];
                d[j - 1] = 2;
            }
        }
        uint32_t *t = up; up = cur; cur = t;
    }
    x->work += cells;
    x->dp_budget = x->dp_budget > cells ? x->dp_budget - cells : 0;
    /* Trace back from the end into a step list, then emit it forwards. */
    free(row);
    uint8_t *steps = malloc(an + cn + 1);
    if (!steps) { free(dir); x->st = DJ_ERR_NOMEM; return; }
    size_t n_steps = 0, i = an, j = cn;
    while (i > 0 || j > 0) {
        uint8_t s = i == 0 ? 2 : j == 0 ? 1 : dir[(i - 1) * cn + (j - 1)];
        steps[n_steps++] = s;
        if (s == 0) { i--; j--; }
        else if (s == 1) i--;
        else j--;
    }
    free(dir);
    while (n_steps > 0) {
        uint8_t s = steps[--n_steps];
        size_t run = 1;
        while (n_steps > 0 && steps[n_steps - 1] == s) { run++; n_steps--; }
        if (s == 0) emit_keep(x, run);
        else if (s == 1) emit_gap(x, run, 0);
        else emit_gap(x, 0, run);
    }
    free(steps);
}

/* ---- Block-level matching -------------------------------------------------- */

static void region(struct ctx *x, size_t ap, size_t an, size_t cp, size_t cn, size_t bs);

struct group {
    uint64_t h;
    size_t rep;           /* prev position of its first block */
    size_t first, count;  /* its block positions: pos[first .. first+count), increasing */
};

/* Fenwick tree of (best, anchor) maxima over compressed prev end positions. */
struct fen {
    uint64_t best;
    size_t idx; /* anchor index + 1; 0 = none */
};

static void fen_update(struct fen *f, size_t n, size_t i, uint64_t best, size_t idx) {
    for (i++; i <= n; i += i & (~i + 1))
        if (best > f[i - 1].best) f[i - 1] = (struct fen){best, idx};
}

static struct fen fen_query(const struct fen *f, size_t i_incl) { /* max over [0, i_incl) */
    struct fen r = {0, 0};
    for (size_t i = i_incl; i > 0; i -= i & (~i + 1))
        if (f[i - 1].best > r.best) r = f[i - 1];
    return r;
}

/* malloc(n * size) with the multiplication checked; NULL on overflow. */
static void *alloc_n(size_t n, size_t size) {
    size_t bytes;
    if (dj_mul_overflow(n, size, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Keeps the heaviest chain of anchors (most tokens) that increase in both
 * sequences, in place; returns its length (0 and x->st set on NOMEM).
 * Anchors come in curr order and are disjoint in curr, so a may precede b iff
 * a.pi + a.len <= b.pi: best[b] = len(b) + max{best[a] : end(a) <= b.pi},
 * a prefix maximum over prev end positions (compressed) in a Fenwick tree. */
static size_t best_chain(struct ctx *x, struct anchor *anc, size_t n_anc) {
    bool monotone = true;
    for (size_t k = 1; k < n_anc && monotone; k++) monotone = anc[k - 1].pi + anc[k - 1].len <= anc[k].pi;
    if (monotone) return n_anc; /* the usual case: nothing moved */
    size_t *ends = alloc_n(n_anc, sizeof *ends); /* sorted distinct prev end positions */
    struct fen *fen = calloc(n_anc, sizeof *fen);
    size_t *link = alloc_n(n_anc, sizeof *link); /* predecessor index + 1; 0 = chain start */
    if (!ends || !fen || !link) {
        free(ends); free(fen); free(link);
        x->st = DJ_ERR_NOMEM;
        return 0;
    }
    for (size_t k = 0; k < n_anc; k++) ends[k] = anc[k].pi + anc[k].len;
    qsort(ends, n_anc, sizeof *ends, cmp_size);
    size_t n_ends = 0;
    for (size_t k = 0; k < n_anc; k++)
        if (n_ends == 0 || ends[n_ends - 1] != ends[k]) ends[n_ends++] = ends[k];
    struct fen best_all = {0, 0};
    uint64_t log_k = 64 - (uint64_t)__builtin_clzll((unsigned long long)n_anc | 1);
    for (size_t k = 0; k < n_anc; k++) {
        size_t lo = 0, hi = n_ends; /* lo = number of ends <= anc[k].pi */
        while (lo < hi) { size_t mid = lo + (hi - lo) / 2; if (ends[mid] <= anc[k].pi) lo = mid + 1; else hi = mid; }
        struct fen pr = fen_query(fen, lo);
        uint64_t b = pr.best + anc[k].len;
        link[k] = pr.idx;
        size_t e = anc[k].pi + anc[k].len;
        lo = 0; hi = n_ends; /* lo = index of e */
        while (lo < hi) { size_t mid = lo + (hi - lo) / 2; if (ends[mid] < e) lo = mid + 1; else hi = mid; }
        fen_update(fen, n_ends, lo, b, k + 1);
        if (b > best_all.best) best_all = (struct fen){b, k + 1};
        x->work += 4 * log_k;
    }
    /* Mark the chain walking the links backwards (reusing ends as flags), then compact in order. */
    for (size_t k = 0; k < n_anc; k++) ends[k] = 0;
    for (size_t k = best_all.idx; k; k = link[k - 1]) ends[k - 1] = 1;
    size_t m = 0;
    for (size_t k = 0; k < n_anc; k++)
        if (ends[k]) anc[m++] = anc[k];
    free(ends); free(fen); free(link);
    return m;
}

/* Finds anchors of at least bs tokens, keeps the heaviest increasing chain,
 * emits it with the gaps refined at the next block size.  Returns false (and
 * emits nothing) when no anchor exists. */
static bool anchor_region(struct ctx *x, size_t ap, size_t an, size_t cp, size_t cn, size_t bs) {
    const dj_token *prev = x->prev, *curr = x->curr;
    size_t aend = ap + an, cend = cp + cn;
    size_t first = (ap + bs - 1) / bs * bs; /* first aligned block start ≥ ap */
    if (first < ap || first >= aend || aend - first < bs) return false;
    size_t n_blocks = (aend - first) / bs;

    /* Index prev's blocks by content: hash → group of equal blocks. */
    unsigned bits = 4;
    while (((size_t)1 << bits) < 2 * n_blocks) bits++;
    size_t n_slots = (size_t)1 << bits;
    size_t *slot = calloc(n_slots, sizeof *slot); /* group index + 1 */
    struct group *groups = alloc_n(n_blocks, sizeof *groups);
    size_t *blk_group = alloc_n(n_blocks, sizeof *blk_group);
    size_t *pos = alloc_n(n_blocks, sizeof *pos);
    struct anchor *anc = NULL;
    size_t n_anc = 0, cap_anc = 0;
    bool found = false;
    if (!slot || !groups || !blk_group || !pos) { x->st = DJ_ERR_NOMEM; goto out; }
    size_t n_groups = 0;
    for (size_t k = 0; k < n_blocks; k++) {
        size_t q = first + k * bs;
        uint64_t h = roll_hash(prev + q, bs);
        x->work += bs;
        size_t b = bucket_of(h, bits), g = SIZE_MAX;
        for (;; b = (b + 1) & (n_slots - 1)) {
            if (!slot[b]) break;
            struct group *gr = &groups[slot[b] - 1];
            if (gr->h == h) {
                x->work += bs;
                if (memcmp(prev + gr->rep, prev + q, bs * sizeof *prev) == 0) { g = slot[b] - 1; break; }
            }
        }
        if (g == SIZE_MAX) {
            g = n_groups++;
            groups[g] = (struct group){h, q, 0, 0};
            slot[b] = g + 1;
        }
        groups[g].count++;
        blk_group[k] = g;
    }
    for (size_t g = 0, acc = 0; g < n_groups; g++) { groups[g].first = acc; acc += groups[g].count; groups[g].count = 0; }
    for (size_t k = 0; k < n_blocks; k++) {
        struct group *gr = &groups[blk_group[k]];
        pos[gr->first + gr->count++] = first + k * bs;
    }

    /* Scan curr with a rolling window hash. */
    uint64_t top = 1; /* ROLL_MUL^(bs-1) */
    for (size_t k = 1; k < bs; k++) top *= ROLL_MUL;
    size_t i = cp, floor_c = cp, last_pe = ap;
    uint64_t h = 0;
    bool fresh = true;
    while (i + bs <= cend) {
        if (fresh) { h = roll_hash(curr + i, bs); x->work += bs; fresh = false; }
        size_t q = SIZE_MAX;
        for (size_t b = bucket_of(h, bits); slot[b]; b = (b + 1) & (n_slots - 1)) {
            struct group *gr = &groups[slot[b] - 1];
            x->work++;
            if (gr->h != h) continue;
            x->work += bs;
            if (memcmp(prev + gr->rep, curr + i, bs * sizeof *curr) != 0) continue;
            /* Equal blocks: prefer the first at or after the last anchor's end. */
            const size_t *ps = pos + gr->first;
            size_t lo = 0, hi = gr->count;
            while (lo < hi) { size_t mid = lo + (hi - lo) / 2; if (ps[mid] < last_pe) lo = mid + 1; else hi = mid; }
            q = lo < gr->count ? ps[lo] : ps[gr->count - 1];
            break;
        }
        if (q == SIZE_MAX) {
            x->work++;
            if (i + bs >= cend) break;
            h = (h - roll_val(curr[i]) * top) * ROLL_MUL + roll_val(curr[i + bs]);
            i++;
            continue;
        }
        size_t len = bs;
        while (i > floor_c && q > ap && prev[q - 1] == curr[i - 1]) { i--; q--; len++; }
        while (i + len < cend && q + len < aend && prev[q + len] == curr[i + len]) len++;
        x->work += len;
        if (n_anc == cap_anc) {
            size_t nc = cap_anc ? 2 * cap_anc : 64;
            struct anchor *t = nc < SIZE_MAX / sizeof *anc ? realloc(anc, nc * sizeof *anc) : NULL;
            if (!t) { x->st = DJ_ERR_NOMEM; goto out; }
            anc = t;
            cap_anc = nc;
        }
        anc[n_anc++] = (struct anchor){i, q, len};
        i += len;
        floor_c = i;
        last_pe = q + len;
        fresh = true;
    }
    free(slot); slot = NULL;
    free(groups); groups = NULL;
    free(blk_group); blk_group = NULL;
    if (n_anc == 0) goto out;
    found = true;

    n_anc = best_chain(x, anc, n_anc);
    if (x->st) goto out;

    /* Emit: gaps refined at the next block size, anchors kept. */
    size_t nbs = next_bs(bs), p = ap, c = cp;
    for (size_t k = 0; k < n_anc && !x->st; k++) {
        region(x, p, anc[k].pi - p, c, anc[k].ci - c, nbs);
        emit_keep(x, anc[k].len);
        p = anc[k].pi + anc[k].len;
        c = anc[k].ci + anc[k].len;
    }
    region(x, p, aend - p, c, cend - c, nbs);

out:
    free(slot);
    free(groups);
    free(blk_group);
    free(pos);
    free(anc);
    return found;
}

/* Diffs prev[ap, ap+an) × curr[cp, cp+cn), starting with anchors of bs tokens
 * (0: DP or a plain gap only).  Emits exactly the tokens of the region. */
static void region(struct ctx *x, size_t ap, size_t an, size_t cp, size_t cn, size_t bs) {
    if (x->st) return;
    size_t k = an < cn ? an : cn;
    k = k ? common_prefix(x->prev + ap, x->curr + cp, k) : 0;
    x->work += k + 1;
    emit_keep(x, k);
    ap += k; an -= k; cp += k; cn -= k;
    size_t s = common_suffix(x->prev + ap, an, x->curr + cp, cn);
    x->work += s;
    an -= s;
    cn -= s;
    if (an == 0 || cn == 0) {
        emit_gap(x, an, cn);
    } else {
        size_t cells;
        bool big = dj_mul_overflow(an, cn, &cells);
        if (!big && cells <= DIFF_DP_SMALL && cells <= x->dp_budget) {
            dp_region(x, ap, an, cp, cn, cells);
        } else {
            bool fits = !big && cells <= DIFF_DP_MAX && cells <= x->dp_budget, done = false;
            for (; bs && !done && !x->st; bs = next_bs(bs)) {
                /* Below the block size, anchors are short enough to be chance
                 * matches of common tokens ("\n", " the") that pull the whole
                 * alignment off; where the exact DP is affordable, use it. */
                if (bs < x->block_size && fits) break;
                if (an >= bs && cn >= bs) done = anchor_region(x, ap, an, cp, cn, bs);
            }
            if (!done && !x->st) {
                if (fits) dp_region(x, ap, an, cp, cn, cells);
                else emit_gap(x, an, cn);
            }
        }
    }
    emit_keep(x, s);
}

/* ---- Entry points ---------------------------------------------------------- */

static void finish(struct ctx *x, struct diff_result *r) {
    flush(x);
    memset(r, 0, sizeof *r);
    r->spans = x->spans;
    r->n_spans = x->n_spans;
    for (size_t i = 0; i < x->n_spans; i++) {
        size_t len = x->spans[i].length;
        switch (x->spans[i].op) {
        case DIFF_KEEP: r->n_keep += len; break;
        case DIFF_REPLACE: r->n_replace += len; break;
        case DIFF_DELETE: r->n_delete += len; break;
        case DIFF_INSERT: r->n_insert += len; break;
        }
    }
    r->common_prefix = x->n_spans && x->spans[0].op == DIFF_KEEP ? x->spans[0].length : 0;
    r->work = x->work;
}

enum dj_status diff_compute(const dj_token *prev, size_t n_prev, const dj_token *curr, size_t n_curr,
                            size_t block_size, struct diff_result *out) {
    if (block_size == 0) return dj_fail(DJ_ERR_INVALID, "diff: block size 0");
    struct ctx x;
    memset(&x, 0, sizeof x);
    x.prev = prev;
    x.curr = curr;
    /* DP budget ⌈n/B⌉·m + DIFF_DP_FLOOR, saturating. */
    uint64_t nb = n_prev / block_size + (n_prev % block_size != 0), bud;
    if (__builtin_mul_overflow(nb, (uint64_t)n_curr, &bud) || __builtin_add_overflow(bud, DIFF_DP_FLOOR, &bud))
        bud = UINT64_MAX;
    x.dp_budget = bud;
    x.block_size = block_size;

    enum diff_path path;
    size_t p = diff_common_prefix(prev, n_prev, curr, n_curr);
    x.work = p + 1;
    emit_keep(&x, p);
    if (p == n_prev && p == n_curr) {
        path = DIFF_PATH_EQUAL;
    } else if (p == n_prev) {
        path = DIFF_PATH_APPEND;
        emit_gap(&x, 0, n_curr - p);
    } else if (p == n_curr) {
        path = DIFF_PATH_TRUNCATE;
        emit_gap(&x, n_prev - p, 0);
    } else {
        size_t s = common_suffix(prev + p, n_prev - p, curr + p, n_curr - p);
        size_t gp = n_prev - p - s, gc = n_curr - p - s;
        x.work += s;
        if (gp == 0 || gc == 0) {
            path = DIFF_PATH_SPLICE;
            emit_gap(&x, gp, gc);
        } else if (s == 0 && gp < DIFF_MIN_ANCHOR && gp < block_size) {
            /* prefix kept then appended: prev's tail (a few tokens, e.g. a last
             * token that BPE merged differently) is aligned by a gp×gc DP. */
            path = DIFF_PATH_PREFIX_APPEND;
            size_t cells = gp * gc; /* gp < 4: no overflow */
            if (cells <= DIFF_DP_MAX) dp_region(&x, p, gp, p, gc, cells);
            else emit_gap(&x, gp, gc);
        } else {
            path = DIFF_PATH_BLOCK;
            region(&x, p, gp, p, gc, block_size);
        }
        emit_keep(&x, s);
    }
    if (x.st == DJ_OK) flush(&x);
    if (x.st != DJ_OK) {
        free(x.spans);
        return dj_fail(x.st, "diff: out of memory (%zu × %zu tokens)", n_prev, n_curr);
    }
    DJ_ASSERT(x.cur_p == n_prev && x.cur_c == n_curr);
    finish(&x, out);
    out->path = path;
    return DJ_OK;
}

void diff_result_free(struct diff_result *r) {
    if (!r) return;
    free(r->spans);
    memset(r, 0, sizeof *r);
}

enum dj_status diff_validate(const struct diff_result *r, const dj_token *prev, size_t n_prev, const dj_token *curr,
                             size_t n_curr) {
    size_t p = 0, c = 0, tot[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < r->n_spans; i++) {
        const struct diff_span *s = &r->spans[i];
        const char *name = diff_op_name(s->op);
        if ((unsigned)s->op > DIFF_REPLACE) return dj_fail(DJ_ERR_INVALID, "diff: span %zu: bad op %d", i, (int)s->op);
        if (s->length == 0) return dj_fail(DJ_ERR_INVALID, "diff: span %zu (%s): length 0", i, name);
        if (s->prev_start != p || s->curr_start != c)
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu (%s) starts at prev %zu, curr %zu; expected %zu, %zu", i,
                           name, s->prev_start, s->curr_start, p, c);
        if (i > 0 && r->spans[i - 1].op == s->op)
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu (%s) follows a span of the same op", i, name);
        if (i > 0 && s->op != DIFF_KEEP) {
            enum diff_op before = r->spans[i - 1].op;
            bool ok = s->op == DIFF_REPLACE ? before == DIFF_KEEP : (before == DIFF_KEEP || before == DIFF_REPLACE);
            if (!ok)
                return dj_fail(DJ_ERR_INVALID, "diff: span %zu (%s) after %s: not in normal form", i, name,
                               diff_op_name(before));
        }
        size_t np = p, nc = c;
        if (s->op != DIFF_INSERT && dj_add_overflow(p, s->length, &np))
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu: length overflows", i);
        if (s->op != DIFF_DELETE && dj_add_overflow(c, s->length, &nc))
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu: length overflows", i);
        if (np > n_prev || nc > n_curr)
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu (%s) ends past the sequences (prev %zu/%zu, curr %zu/%zu)",
                           i, name, np, n_prev, nc, n_curr);
        if (s->op == DIFF_KEEP && memcmp(prev + p, curr + c, s->length * sizeof *prev) != 0)
            return dj_fail(DJ_ERR_INVALID, "diff: span %zu (KEEP prev %zu, curr %zu, %zu tokens): tokens differ", i, p,
                           c, s->length);
        tot[s->op] += s->length;
        p = np;
        c = nc;
    }
    if (p != n_prev || c != n_curr)
        return dj_fail(DJ_ERR_INVALID, "diff: spans cover prev %zu/%zu, curr %zu/%zu tokens", p, n_prev, c, n_curr);
    if (tot[DIFF_KEEP] != r->n_keep || tot[DIFF_REPLACE] != r->n_replace || tot[DIFF_DELETE] != r->n_delete ||
        tot[DIFF_INSERT] != r->n_insert)
        return dj_fail(DJ_ERR_INVALID, "diff: per-op totals disagree with the spans");
    size_t lead = r->n_spans && r->spans[0].op == DIFF_KEEP ? r->spans[0].length : 0;
    if (lead != r->common_prefix) return dj_fail(DJ_ERR_INVALID, "diff: common_prefix disagrees with the spans");
    return DJ_OK;
}
