/*
 * sampler.c — the sampling chain defined in sampler.h, without sorting the vocabulary.
 *
 * The candidate set S is kept in one of two forms:
 *
 *   explicit   a list of ids (s->ids, at most LIST_MAX), e.g. after a small top-k;
 *   implicit   every id 0..n_vocab-1, filtered by a predicate (struct pred):
 *                y-bound   (y > L) || (y == L && id <= I)   — "(y, id) no later than
 *                          (L, I) by logit": top-k, top-p and min-p all cut S to such a
 *                          prefix (L = -FLT_MAX, I = INT32_MAX: every finite y);
 *                band      (key < D) || (key == D && id <= bI) with the typical-p key.
 *
 * List entries pass the predicate too, so every stage reads S the same way.  A set
 * that shrinks to LIST_MAX tokens or fewer is made explicit (in id order), so later
 * stages touch only those.
 *
 * The hard operation is a CUT: walk S in some order (key ascending, id ascending)
 * summing a mass per token, and find the first token at which a predicate of the
 * cumulative mass becomes true (top-p: frac >= p; typical-p: frac > p; a large
 * top-k: count >= k).  Masses are integers (sampler_mass, summed in 128 bits), so
 * any summation order gives the same sums.  That allows:
 *
 *   1. one pass over S: a bucket index that is a monotone function of the key
 *      (1024 buckets over the useful key range), per-bucket mass and count;
 *   2. walk the buckets in key order to the bucket b* where the predicate first
 *      holds: everything before b* is exactly the prefix before it;
 *   3. gather b*'s tokens, sort them by (key, id), walk them — or, when b* is big
 *      (flat distributions), bucket b* again over its own key range (cut_cands).
 *
 * The result is the token a full sort would find, because the bucket walk and the
 * sorted walk add the same integers and test the same monotone predicate.  The
 * draw is a cut in id order: block sums over 256 consecutive ids, one block rescanned.
 */
#include "sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"

__extension__ typedef unsigned __int128 u128;

enum {
    NB = 1024,       /* buckets of a cut */
    DRAW_BLOCK = 256,/* ids per block sum of the draw */
    SMALL = 512,     /* a set this small is gathered and sorted directly */
    SORT_MAX = 2048, /* a gathered bucket this small is sorted, not re-bucketed */
    LIST_MAX = 4096, /* a set this small becomes an explicit id list */
    HEAP_K = 1024,   /* top-k up to this uses a bounded heap; larger k a count cut */
    MAX_DEPTH = 8,   /* re-bucketing levels before falling back to a sort */
};

/* A candidate: its order key (ascending; -y for "by logit") and id.  The order
 * (key, id) is total, so every correct selection or sort gives the same result. */
struct cand {
    float key;
    int32_t id;
};

struct dj_sampler {
    struct dj_sampler_params p; /* p.logit_bias points at bias */
    size_t n_vocab;
    struct dj_logit_bias *bias;
    bool pen_on;         /* penalties change logits and penalty_last_n != 0 */
    size_t win;          /* window (penalty_last_n), 0 for "all accepted" */
    dj_token *ring;      /* win entries: the last `win` accepted tokens */
    size_t ring_n, ring_pos;
    uint32_t *counts;    /* n_vocab: occurrences in the window */
    uint8_t *listed;     /* n_vocab: token is in list[] */
    dj_token *list;      /* tokens with counts > 0 (and some with 0, dropped lazily) */
    size_t n_list, list_cap;
    float *ys;           /* n_vocab: effective logits when bias/penalties change them */
    struct cand *cand;   /* n_vocab: heap, gathered buckets */
    int32_t *ids;        /* min(n_vocab, LIST_MAX): an explicit candidate set */
    uint64_t *blk;       /* ceil(n_vocab / DRAW_BLOCK): block sums of the draw */
    u128 bq[NB];         /* per-bucket mass of a cut */
    uint32_t bn[NB];     /* per-bucket count */
};

struct dj_sampler_params sampler_default_params(void) {
    struct dj_sampler_params p = {
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f, .repeat_penalty = 1.0f,
        .freq_penalty = 0.0f, .presence_penalty = 0.0f, .penalty_last_n = 64, .seed = 0,
        .logit_bias = NULL, .n_logit_bias = 0,
    };
    return p;
}

/* ---- parameters, history ---- */

static enum dj_status check_unit(const char *name, float v) {
    if (!(v >= 0.0f && v <= 1.0f)) return dj_fail(DJ_ERR_INVALID, "sampler: %s = %g is outside [0, 1]", name, (double)v);
    return DJ_OK;
}

static enum dj_status check_finite(const char *name, float v) {
    if (!isfinite(v)) return dj_fail(DJ_ERR_INVALID, "sampler: %s = %g is not a finite number", name, (double)v);
    return DJ_OK;
}

static enum dj_status check_params(const struct dj_sampler_params *p, size_t n_vocab) {
    enum dj_status st;
    if (n_vocab == 0 || n_vocab > INT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "sampler: n_vocab = %zu is outside [1, %d]", n_vocab, INT32_MAX);
    if ((st = check_finite("temp", p->temp)) || (st = check_unit("top_p", p->top_p)) ||
        (st = check_unit("min_p", p->min_p)) || (st = check_unit("typical_p", p->typical_p)) ||
        (st = check_finite("repeat_penalty", p->repeat_penalty)) || (st = check_finite("freq_penalty", p->freq_penalty)) ||
        (st = check_finite("presence_penalty", p->presence_penalty)))
        return st;
    if (!(p->repeat_penalty > 0.0f))
        return dj_fail(DJ_ERR_INVALID, "sampler: repeat_penalty = %g must be > 0 (1 turns it off; 0 would divide by zero)",
                       (double)p->repeat_penalty);
    if (p->penalty_last_n < -1)
        return dj_fail(DJ_ERR_INVALID, "sampler: penalty_last_n = %d must be >= -1 (-1: all accepted tokens)",
                       (int)p->penalty_last_n);
    if (p->n_logit_bias && !p->logit_bias)
        return dj_fail(DJ_ERR_INVALID, "sampler: n_logit_bias = %zu but logit_bias is NULL", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct dj_logit_bias *b = &p->logit_bias[i];
        if (b->tok < 0 || (size_t)b->tok >= n_vocab)
            return dj_fail(DJ_ERR_INVALID, "sampler: logit_bias[%zu].tok = %d is outside the vocabulary [0, %zu)", i,
                           (int)b->tok, n_vocab);
        if (isnan(b->bias) || b->bias == INFINITY)
            return dj_fail(DJ_ERR_INVALID, "sampler: logit_bias[%zu].bias = %g (token %d) must be a number or -inf", i,
                           (double)b->bias, (int)b->tok);
    }
    return DJ_OK;
}

enum dj_status sampler_create(const struct dj_sampler_params *p, size_t n_vocab, struct dj_sampler **out) {
    if (!p || !out) return dj_fail(DJ_ERR_INVALID, "sampler_create: NULL %s", p ? "out" : "params");
    enum dj_status st = check_params(p, n_vocab);
    if (st) return st;
    struct dj_sampler *s = calloc(1, sizeof *s);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->pen_on = p->penalty_last_n != 0 &&
                (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f);
    bool ok = true;
    if (p->n_logit_bias) {
        ok = (s->bias = malloc(p->n_logit_bias * sizeof *s->bias)) != NULL;
        if (ok) memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    if (ok && s->pen_on) {
        s->win = p->penalty_last_n > 0 ? (size_t)p->penalty_last_n : 0;
        s->list_cap = s->win && s->win < n_vocab ? s->win : n_vocab;
        ok = (s->counts = calloc(n_vocab, sizeof *s->counts)) && (s->listed = calloc(n_vocab, 1)) &&
             (s->list = malloc(s->list_cap * sizeof *s->list)) && (!s->win || (s->ring = malloc(s->win * sizeof *s->ring)));
    }
    size_t n_ids = n_vocab < LIST_MAX ? n_vocab : LIST_MAX;
    ok = ok && (s->ys = malloc(n_vocab * sizeof *s->ys)) && (s->cand = malloc(n_vocab * sizeof *s->cand)) &&
         (s->ids = malloc(n_ids * sizeof *s->ids)) &&
         (s->blk = malloc((n_vocab / DRAW_BLOCK + 1) * sizeof *s->blk));
    if (!ok) {
        sampler_free(s);
        return dj_fail(DJ_ERR_NOMEM, "sampler: out of memory for a %zu-token vocabulary", n_vocab);
    }
    *out = s;
    return DJ_OK;
}

void sampler_free(struct dj_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->ring);
    free(s->counts);
    free(s->listed);
    free(s->list);
    free(s->ys);
    free(s->cand);
    free(s->ids);
    free(s->blk);
    free(s);
}

void sampler_reset(struct dj_sampler *s) {
    if (!s || !s->pen_on) return;
    for (size_t i = 0; i < s->n_list; i++) {
        s->counts[s->list[i]] = 0;
        s->listed[s->list[i]] = 0;
    }
    s->n_list = s->ring_n = s->ring_pos = 0;
}

/* Drops listed tokens whose count fell to 0 (they left the window). */
static void list_compact(struct dj_sampler *s) {
    size_t w = 0;
    for (size_t i = 0; i < s->n_list; i++) {
        dj_token t = s->list[i];
        if (s->counts[t]) s->list[w++] = t;
        else s->listed[t] = 0;
    }
    s->n_list = w;
}

void sampler_accept(struct dj_sampler *s, dj_token tok) {
    if (!s || !s->pen_on || tok < 0 || (size_t)tok >= s->n_vocab) return;
    if (s->win) {
        if (s->ring_n == s->win) s->counts[s->ring[s->ring_pos]]--;
        else s->ring_n++;
        s->ring[s->ring_pos] = tok;
        s->ring_pos = (s->ring_pos + 1) % s->win;
    }
    if (s->counts[tok] < UINT32_MAX) s->counts[tok]++;
    if (!s->listed[tok]) {
        /* Room after compaction: the window holds <= list_cap tokens, tok among them. */
        if (s->n_list == s->list_cap) list_compact(s);
        s->list[s->n_list++] = tok;
        s->listed[tok] = 1;
    }
}

/* The effective logits y (sampler.h): the caller's array when nothing changes it. */
static const float *effective_logits(struct dj_sampler *s, const float *x) {
    const struct dj_sampler_params *p = &s->p;
    bool pen = s->pen_on && s->n_list > 0;
    if (!p->n_logit_bias && !pen) return x;
    float *y = s->ys;
    memcpy(y, x, s->n_vocab * sizeof *y);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        float v = y[s->bias[i].tok] + s->bias[i].bias;
        y[s->bias[i].tok] = isnan(v) ? -INFINITY : v;
    }
    if (pen) {
        list_compact(s);
        for (size_t i = 0; i < s->n_list; i++) {
            dj_token t = s->list[i];
            float v = y[t];
            v = v <= 0 ? v * p->repeat_penalty : v / p->repeat_penalty;
            v -= (float)s->counts[t] * p->freq_penalty + p->presence_penalty;
            y[t] = isnan(v) ? -INFINITY : v;
        }
    }
    return y;
}

/* ---- ordering helpers ---- */

static inline bool cand_lt(struct cand a, struct cand b) { return a.key < b.key || (a.key == b.key && a.id < b.id); }

/* Max-heap by (key, id): the root is the LAST candidate in the order. */
static void heap_down(struct cand *h, size_t n, size_t i) {
    struct cand x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_lt(h[c], h[c + 1])) c++;
        if (!cand_lt(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void heap_up(struct cand *h, size_t i) {
    struct cand x = h[i];
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!cand_lt(h[par], x)) break;
        h[i] = h[par];
        i = par;
    }
    h[i] = x;
}

static void insertion_sort(struct cand *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        struct cand x = a[i];
        size_t j = i;
        while (j > 0 && cand_lt(x, a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

static void heap_sort(struct cand *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) heap_down(a, n, i);
    for (size_t i = n; i-- > 1;) {
        struct cand t = a[0];
        a[0] = a[i];
        a[i] = t;
        heap_down(a, i, 0);
    }
}

/* Introsort: median-of-three quicksort, heapsort past the depth limit. */
static void intro_sort(struct cand *a, size_t n, int depth) {
    while (n > 24) {
        if (depth-- <= 0) {
            heap_sort(a, n);
            return;
        }
        size_t mid = n / 2;
        if (cand_lt(a[mid], a[0])) { struct cand t = a[mid]; a[mid] = a[0]; a[0] = t; }
        if (cand_lt(a[n - 1], a[mid])) { struct cand t = a[mid]; a[mid] = a[n - 1]; a[n - 1] = t; }
        if (cand_lt(a[mid], a[0])) { struct cand t = a[mid]; a[mid] = a[0]; a[0] = t; }
        struct cand pv = a[mid];
        size_t i = 0, j = n - 1; /* Hoare: a[0] <= pv <= a[n-1] act as sentinels */
        for (;;) {
            while (cand_lt(a[i], pv)) i++;
            while (cand_lt(pv, a[j])) j--;
            if (i >= j) break;
            struct cand t = a[i];
            a[i] = a[j];
            a[j] = t;
            i++;
            j--;
        }
        /* [0, j] <= pv <= [j+1, n) */
        size_t nl = j + 1, nr = n - nl;
        if (nl < nr) {
            intro_sort(a, nl, depth);
            a += nl;
            n = nr;
        } else {
            intro_sort(a + nl, nr, depth);
            n = nl;
        }
    }
    insertion_sort(a, n);
}

static void cand_sort(struct cand *a, size_t n) {
    size_t i = 1;
    while (i < n && !cand_lt(a[i], a[i - 1])) i++;
    if (i >= n) return; /* already in order (gathered ties come in id order) */
    int depth = 0;
    for (size_t m = n; m > 1; m >>= 1) depth += 2;
    intro_sort(a, n, depth);
}

/* ---- masses, 2 at a time ---- */

/* GCC/Clang generic vectors of 16 bytes: one SSE2 register on the baseline x86-64
 * build (NEON elsewhere).  mass2 performs sampler_mass's operations in the same
 * order, lane by lane, so its results are bit-identical (the draws compared in
 * tests/unit/test_sampler.c go through both paths). */
typedef float v2f __attribute__((vector_size(8)));
typedef double v2d __attribute__((vector_size(16)));
typedef int64_t v2l __attribute__((vector_size(16)));
typedef uint64_t v2u __attribute__((vector_size(16)));

static inline v2u mass2(v2f x) {
    const v2d lim = {-100.0, -100.0};
    v2d t = __builtin_convertvector(x, v2d) * 1.4426950408889634;
    v2l keep = t > lim; /* NaN: false → -100, as in sampler_mass */
    t = (v2d)(((v2l)t & keep) | ((v2l)lim & ~keep));
    v2d big = t + 0x1.8p52;
    v2d k = big - 0x1.8p52;
    v2d g = (t - k) * 0.6931471805599453;
    v2d p = g * (1.0 / 5040);
    p = p + 1.0 / 720;
    p = p * g;
    p = p + 1.0 / 120;
    p = p * g;
    p = p + 1.0 / 24;
    p = p * g;
    p = p + 1.0 / 6;
    p = p * g;
    p = p + 0.5;
    p = p * g;
    p = p + 1.0;
    p = p * g;
    p = p + 1.0;
    v2u sc = ((v2u)big - 0x4338000000000000ULL + 1074) << 52;
    v2d w = p * (v2d)sc;
    v2d r = w + 0x1p52;
    return (v2u)r - 0x4330000000000000ULL;
}

/* q[i] = sampler_mass((y[i] - m) / temp), i < n.  -INFINITY and NaN give 0. */
static void mass_n(const float *y, size_t n, float m, float temp, uint64_t *q) {
    const v2f mv = {m, m}, tv = {temp, temp};
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        v2f v;
        memcpy(&v, y + i, sizeof v);
        v2u r = mass2((v - mv) / tv);
        memcpy(q + i, &r, sizeof r);
    }
    for (; i < n; i++) q[i] = sampler_mass((y[i] - m) / temp);
}

/* The sum of sampler_mass((y[i] - m) / temp), i < n <= 4096 (fits 64 bits). */
static uint64_t mass_sum(const float *y, size_t n, float m, float temp) {
    const v2f mv = {m, m}, tv = {temp, temp};
    v2u acc0 = {0, 0}, acc1 = {0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v2f v0, v1;
        memcpy(&v0, y + i, sizeof v0);
        memcpy(&v1, y + i + 2, sizeof v1);
        acc0 += mass2((v0 - mv) / tv);
        acc1 += mass2((v1 - mv) / tv);
    }
    acc0 += acc1;
    uint64_t sum = acc0[0] + acc0[1];
    for (; i < n; i++) sum += sampler_mass((y[i] - m) / temp);
    return sum;
}

dj_token sampler_argmax(const float *logits, size_t n) {
    /* Blocks of 16: one "is any above the best so far" test per block (vectorizable
     * compares OR-ed together), a sequential rescan of the rare block that has one.
     * Strict > keeps the first index on ties; NaN fails every comparison. */
    float best = -INFINITY;
    size_t bi = SIZE_MAX, i = 0;
    for (; i + 16 <= n; i += 16) {
        const float *b = logits + i;
        int any = 0;
        for (int l = 0; l < 16; l++) any |= b[l] > best;
        if (!any) continue;
        for (int l = 0; l < 16; l++)
            if (b[l] > best) best = b[l], bi = i + (size_t)l;
    }
    for (; i < n; i++)
        if (logits[i] > best) best = logits[i], bi = i;
    return bi == SIZE_MAX ? 0 : (dj_token)bi;
}

/* ---- candidate sets ---- */

/* Membership beyond "is a list entry / is an id" (see the top of the file). */
struct pred {
    float L; /* y-bound */
    int32_t I;
    bool band; /* typical-p band: key = fabsf((bm - y) - bmu) */
    float bm, bmu, bD;
    int32_t bI;
};

static const struct pred PRED_ALL = {.L = -FLT_MAX, .I = INT32_MAX};

static inline bool pred_ok(const struct pred *P, int32_t i, float v) {
    if (!(v > P->L || (v == P->L && i <= P->I))) return false;
    if (P->band) {
        float k = fabsf((P->bm - v) - P->bmu);
        if (!(k < P->bD || (k == P->bD && i <= P->bI))) return false;
    }
    return true;
}

static inline bool pred_all(const struct pred *P) {
    return !P->band && P->L == -FLT_MAX && P->I == INT32_MAX;
}

struct cset {
    const float *y;      /* effective logits, n_vocab */
    const int32_t *list; /* explicit ids, or NULL: 0..n-1 */
    size_t n;            /* list length or n_vocab */
    struct pred pr;
    size_t count;        /* members */
    float m, ymin;       /* max / min y over members */
};

static inline int32_t cs_id(const struct cset *S, size_t j) { return S->list ? S->list[j] : (int32_t)j; }

/* Rewrites S as an explicit list (count <= LIST_MAX, in the order of S: id order
 * when S was implicit); s->ids may be S->list (the writes stay behind the reads). */
static void materialize(struct dj_sampler *s, struct cset *S) {
    const struct pred P = S->pr;
    const float *y = S->y;
    size_t w = 0;
    for (size_t j = 0; j < S->n; j++) {
        int32_t i = cs_id(S, j);
        if (pred_ok(&P, i, y[i])) {
            DJ_ASSERT(w < LIST_MAX);
            s->ids[w++] = i;
        }
    }
    S->list = s->ids;
    S->n = S->count = w;
    S->pr = PRED_ALL;
}

/* max / min / count over S; makes S explicit when it is small. */
static void stats(struct dj_sampler *s, struct cset *S) {
    float m = -INFINITY, lo = INFINITY;
    size_t cnt = 0;
    const float *y = S->y;
    if (!S->list && pred_all(&S->pr)) {
        /* every finite y: the common start.  Branch-free so it vectorizes. */
        for (size_t i = 0; i < S->n; i++) {
            float v = y[i];
            bool ok = v >= -FLT_MAX;
            cnt += ok;
            m = v > m ? v : m;
            float w = ok ? v : INFINITY;
            lo = w < lo ? w : lo;
        }
    } else {
        const struct pred P = S->pr;
        for (size_t j = 0; j < S->n; j++) {
            int32_t i = cs_id(S, j);
            float v = y[i];
            if (!pred_ok(&P, i, v)) continue;
            cnt++;
            m = v > m ? v : m;
            lo = v < lo ? v : lo;
        }
    }
    S->m = m, S->ymin = lo, S->count = cnt;
    if (cnt <= LIST_MAX && (!S->list || S->n != cnt)) materialize(s, S);
}

/* ---- cuts (top-p, typical-p, a large top-k) ---- */

enum cut_key { KEY_NEG_Y, KEY_TYPICAL };
enum cut_pred { PRED_FRAC_GE, PRED_FRAC_GT, PRED_COUNT_GE };

struct cut {
    enum cut_key key; /* KEY_NEG_Y: -y (by logit); KEY_TYPICAL: fabsf((m - y) - mu) */
    float m, mu;      /* mass q = sampler_mass(y - m), or 1 with count_mass */
    bool count_mass;
    enum cut_pred pred;
    double thr;       /* PRED_FRAC_*: frac >= / > thr */
    uint64_t kcount;  /* PRED_COUNT_GE */
    double zd;        /* (double)Z, set by cut_set */
    /* result */
    float ckey;
    int32_t cid;
};

static inline float cut_key_of(const struct cut *c, float v) {
    return c->key == KEY_NEG_Y ? -v : fabsf((c->m - v) - c->mu);
}

static inline uint64_t cut_mass(const struct cut *c, float v) {
    return c->count_mass ? 1 : sampler_mass(v - c->m);
}

static inline bool cut_holds(const struct cut *c, u128 cum) {
    switch (c->pred) {
    case PRED_FRAC_GE: return (double)cum / c->zd >= c->thr;
    case PRED_FRAC_GT: return (double)cum / c->zd > c->thr;
    case PRED_COUNT_GE: return cum >= c->kcount;
    }
    return true;
}

static inline unsigned bucket_of(float off, float scale) {
    float t = off * scale;
    return t < (float)NB ? (unsigned)t : NB - 1; /* off >= 0; +inf and NaN land last */
}

/* The cut inside a gathered array a[0..n) of S's members, starting from the
 * cumulative mass cum0 of everything before them.  Returns how many of a's
 * candidates, in order, are kept (up to and including the cut), or 0 if the
 * predicate never holds.  Reorders a. */
static size_t cut_cands(struct dj_sampler *s, const float *y, struct cut *c, struct cand *a, size_t n, u128 cum0,
                        int depth) {
    const struct cut C = *c;
    float kmin = INFINITY, kmax = -INFINITY;
    for (size_t j = 0; j < n; j++) {
        kmin = a[j].key < kmin ? a[j].key : kmin;
        kmax = a[j].key > kmax ? a[j].key : kmax;
    }
    float range = kmax - kmin;
    if (n > SORT_MAX && depth < MAX_DEPTH && range > 0 && range < INFINITY) {
        float scale = (float)NB / range;
        memset(s->bq, 0, sizeof s->bq);
        memset(s->bn, 0, sizeof s->bn);
        for (size_t j = 0; j < n; j++) {
            unsigned b = bucket_of(a[j].key - kmin, scale);
            s->bq[b] += cut_mass(&C, y[a[j].id]);
            s->bn[b]++;
        }
        u128 cum = cum0;
        size_t before = 0;
        unsigned b = 0;
        for (; b < NB; b++) {
            if (cut_holds(&C, cum + s->bq[b])) break;
            cum += s->bq[b];
            before += s->bn[b];
        }
        if (b == NB) return 0;
        size_t w = 0; /* stable compaction of bucket b to the front */
        for (size_t j = 0; j < n; j++)
            if (bucket_of(a[j].key - kmin, scale) == b) a[w++] = a[j];
        size_t k = cut_cands(s, y, c, a, w, cum, depth + 1);
        return k ? before + k : 0;
    }
    cand_sort(a, n);
    u128 cum = cum0;
    for (size_t j = 0; j < n; j++) {
        cum += cut_mass(&C, y[a[j].id]);
        if (cut_holds(&C, cum)) {
            c->ckey = a[j].key;
            c->cid = a[j].id;
            return j + 1;
        }
    }
    return 0;
}

/* The cut over S (sampler.h's definitions of top-p, typical-p, a large top-k).
 * Returns the number of members kept (up to and including the cut token c->cid),
 * 0 if the predicate never holds. */
static size_t cut_set(struct dj_sampler *s, const struct cset *S, struct cut *c) {
    const float *y = S->y;
    const struct pred P = S->pr;
    const struct cut C = *c;
    if (S->count <= SMALL) {
        size_t n = 0;
        u128 z = 0;
        for (size_t j = 0; j < S->n; j++) {
            int32_t i = cs_id(S, j);
            float v = y[i];
            if (!pred_ok(&P, i, v)) continue;
            s->cand[n++] = (struct cand){cut_key_of(&C, v), i};
            z += cut_mass(&C, v);
        }
        c->zd = (double)z;
        return cut_cands(s, y, c, s->cand, n, 0, 0);
    }
    /* Bucket pass.  Key offsets are >= 0: -y - (-m) = m - y, or the typical key.
     * Masses are 0 beyond m - y > 36.05, and a typical key of a token with mass
     * is < 36.05: past 48 one last bucket is enough (for the count of a large
     * top-k the whole range m - ymin is bucketed). */
    float kmin, range;
    if (C.key == KEY_NEG_Y) {
        kmin = -S->m;
        range = S->m - S->ymin;
        if (!C.count_mass) range = range < 48.0f ? range : 48.0f;
    } else {
        kmin = 0.0f;
        range = 48.0f;
    }
    float scale = range > 0 && range < INFINITY ? (float)NB / range : 1.0f;
    u128 *bq = s->bq;
    uint32_t *bn = s->bn;
    memset(bq, 0, sizeof s->bq);
    memset(bn, 0, sizeof s->bn);
    uint64_t q[DRAW_BLOCK];
    for (size_t j0 = 0; j0 < S->n; j0 += DRAW_BLOCK) {
        size_t j1 = j0 + DRAW_BLOCK < S->n ? j0 + DRAW_BLOCK : S->n;
        if (!S->list && !C.count_mass) mass_n(y + j0, j1 - j0, C.m, 1.0f, q); /* (y - m) / 1 = y - m */
        for (size_t j = j0; j < j1; j++) {
            int32_t i = cs_id(S, j);
            float v = y[i];
            if (!pred_ok(&P, i, v)) continue;
            unsigned b = bucket_of(cut_key_of(&C, v) - kmin, scale);
            bq[b] += S->list || C.count_mass ? cut_mass(&C, v) : q[j - j0];
            bn[b]++;
        }
    }
    u128 z = 0;
    for (unsigned b = 0; b < NB; b++) z += bq[b];
    c->zd = (double)z;
    u128 cum = 0;
    size_t before = 0;
    unsigned bs = 0;
    for (; bs < NB; bs++) {
        if (cut_holds(c, cum + bq[bs])) break;
        cum += bq[bs];
        before += bn[bs];
    }
    if (bs == NB) return 0;
    size_t n = 0;
    for (size_t j = 0; j < S->n; j++) {
        int32_t i = cs_id(S, j);
        float v = y[i];
        if (!pred_ok(&P, i, v)) continue;
        float k = cut_key_of(&C, v);
        if (bucket_of(k - kmin, scale) == bs) s->cand[n++] = (struct cand){k, i};
    }
    size_t k = cut_cands(s, y, c, s->cand, n, cum, 0);
    return k ? before + k : 0;
}

/* ---- the draw ---- */

/* The draw (sampler.h): weights sampler_mass((y - m) / temp), walked in ascending
 * id order to the first prefix with frac > r.  An explicit set is sorted by id (a
 * list made from an implicit set already is); an implicit one is summed per block
 * of DRAW_BLOCK ids, and only the block where the walk crosses r is rescanned. */
static dj_token draw(struct dj_sampler *s, const struct cset *S, float temp, double r) {
    const float *y = S->y;
    const struct pred P = S->pr;
    const float m = S->m;
    if (S->list) {
        size_t n = 0;
        u128 z = 0;
        for (size_t j = 0; j < S->n; j++) {
            int32_t i = S->list[j];
            if (!pred_ok(&P, i, y[i])) continue;
            s->cand[n++] = (struct cand){0.0f, i}; /* equal keys: ordered by id */
            z += sampler_mass((y[i] - m) / temp);
        }
        cand_sort(s->cand, n);
        double zd = (double)z;
        u128 cum = 0;
        for (size_t j = 0; j < n; j++) {
            int32_t i = s->cand[j].id;
            cum += sampler_mass((y[i] - m) / temp);
            if ((double)cum / zd > r) return i;
        }
        return n ? s->cand[n - 1].id : 0; /* not reached: frac(S) = 1 > r */
    }
    const size_t n = S->n, nb = (n + DRAW_BLOCK - 1) / DRAW_BLOCK;
    const bool all = pred_all(&P);
    u128 z = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * DRAW_BLOCK, i1 = i0 + DRAW_BLOCK < n ? i0 + DRAW_BLOCK : n;
        uint64_t sum = 0; /* <= 256 masses of <= 2^51 */
        if (all) {
            sum = mass_sum(y + i0, i1 - i0, m, temp); /* non-members (-inf, NaN) weigh 0 */
        } else {
            uint64_t q[DRAW_BLOCK];
            mass_n(y + i0, i1 - i0, m, temp, q);
            for (size_t i = i0; i < i1; i++)
                if (pred_ok(&P, (int32_t)i, y[i])) sum += q[i - i0];
        }
        s->blk[b] = sum;
        z += sum;
    }
    double zd = (double)z;
    u128 cum = 0;
    for (size_t b = 0; b < nb; b++) {
        if (!((double)(cum + s->blk[b]) / zd > r)) {
            cum += s->blk[b];
            continue;
        }
        size_t i0 = b * DRAW_BLOCK, i1 = i0 + DRAW_BLOCK < n ? i0 + DRAW_BLOCK : n;
        for (size_t i = i0; i < i1; i++) {
            if (!pred_ok(&P, (int32_t)i, y[i])) continue;
            cum += sampler_mass((y[i] - m) / temp);
            if ((double)cum / zd > r) return (dj_token)i;
        }
    }
    return 0; /* not reached: frac(S) = 1 > r */
}

/* ---- the chain ---- */

/* The lowest id among S's members with y = +INFINITY (sampler.h: such a token wins). */
static dj_token lowest_inf(const struct cset *S) {
    int32_t best = INT32_MAX;
    for (size_t j = 0; j < S->n; j++) {
        int32_t i = cs_id(S, j);
        if (S->y[i] == INFINITY && pred_ok(&S->pr, i, S->y[i]) && i < best) best = i;
    }
    return best;
}

/* The member of a one-token set. */
static dj_token only_member(const struct cset *S) {
    for (size_t j = 0; j < S->n; j++) {
        int32_t i = cs_id(S, j);
        if (pred_ok(&S->pr, i, S->y[i])) return i;
    }
    return 0;
}

/* The first k tokens by logit with a bounded heap (unordered in h[0..return)): one
 * comparison per token against the current k-th best, 16 at a time.  Scanning ids in
 * ascending order, a later token with an equal logit never displaces an earlier one,
 * as the order requires. */
static size_t topk_heap(const float *y, size_t n, size_t k, struct cand *h) {
    size_t i = 0, cnt = 0;
    for (; i < n && cnt < k; i++) {
        if (y[i] >= -FLT_MAX) {
            h[cnt] = (struct cand){-y[i], (int32_t)i};
            heap_up(h, cnt++);
        }
    }
    if (cnt < k) return cnt;
    float thr = -h[0].key;
    for (; i + 16 <= n; i += 16) {
        const float *b = y + i;
        int any = 0;
        for (int l = 0; l < 16; l++) any |= b[l] > thr;
        if (!any) continue;
        for (int l = 0; l < 16; l++) {
            if (b[l] > thr) {
                h[0] = (struct cand){-b[l], (int32_t)(i + (size_t)l)};
                heap_down(h, k, 0);
                thr = -h[0].key;
            }
        }
    }
    for (; i < n; i++) {
        if (y[i] > thr) {
            h[0] = (struct cand){-y[i], (int32_t)i};
            heap_down(h, k, 0);
            thr = -h[0].key;
        }
    }
    return cnt;
}

/* Top-p over the whole vocabulary when the model is confident: Z in one vectorized
 * pass, then the 64 best tokens by logit (a heap pass, one comparison per token);
 * if their prefix reaches top_p, the cut is found without bucketing the
 * vocabulary.  The 64 are a prefix of S's logit order, so this is the same cut.
 * Returns the number kept (the prefix is s->cand[0..return)), 0 to fall back. */
static size_t topp_top64(struct dj_sampler *s, const struct cset *S, struct cut *c) {
    enum { TOP = 64 };
    if (!pred_all(&S->pr) || S->count <= TOP) return 0;
    const float *y = S->y;
    size_t cnt = topk_heap(y, S->n, TOP, s->cand);
    cand_sort(s->cand, cnt);
    /* A flat distribution cannot put top_p of its mass on 64 tokens: the other
     * count - 64 weigh at least exp(ymin - m) each.  Estimated in double — this
     * only chooses the path; the cut itself is exact either way. */
    double w64 = 0;
    for (size_t j = 0; j < cnt; j++) w64 += exp((double)y[s->cand[j].id] - (double)c->m);
    if (w64 + (double)(S->count - cnt) * exp((double)S->ymin - (double)c->m) > 1.001 * w64 / c->thr) return 0;
    u128 z = 0;
    for (size_t j = 0; j < S->n; j += 4096) /* -inf and NaN weigh 0: exactly S's masses */
        z += mass_sum(y + j, S->n - j < 4096 ? S->n - j : 4096, c->m, 1.0f);
    c->zd = (double)z;
    u128 cum = 0;
    for (size_t j = 0; j < cnt; j++) {
        cum += sampler_mass(y[s->cand[j].id] - c->m);
        if (cut_holds(c, cum)) {
            c->ckey = s->cand[j].key;
            c->cid = s->cand[j].id;
            return j + 1;
        }
    }
    return 0;
}

/* The rest of the chain (min-p, the draw) after top-p kept s->cand[0..kept). */
static dj_token finish_from_cands(struct dj_sampler *s, struct cset *S, size_t kept,
                                  const struct dj_sampler_params *p, uint64_t pos) {
    for (size_t j = 0; j < kept; j++) s->ids[j] = s->cand[j].id;
    S->list = s->ids, S->n = S->count = kept;
    S->pr = PRED_ALL;
    S->ymin = -s->cand[kept - 1].key;
    if (S->count > 1 && p->min_p > 0.0f) {
        float t = S->m + logf(p->min_p);
        if (t > S->pr.L) {
            S->pr.L = t, S->pr.I = INT32_MAX;
            stats(s, S);
        }
    }
    if (S->count == 1) return only_member(S);
    return draw(s, S, p->temp, dj_rng_uniform(p->seed, pos));
}

dj_token sampler_sample(struct dj_sampler *s, const float *logits, uint64_t pos) {
    if (!s || !logits) return 0;
    const struct dj_sampler_params *p = &s->p;
    const size_t n = s->n_vocab;
    const float *y = effective_logits(s, logits);
    if (p->temp <= 0.0f) return sampler_argmax(y, n);

    struct cset S = {.y = y, .list = NULL, .n = n, .pr = PRED_ALL};
    if (p->top_k > 0 && (size_t)p->top_k < n && (size_t)p->top_k <= HEAP_K) {
        size_t cnt = topk_heap(y, n, (size_t)p->top_k, s->cand);
        float m = -INFINITY, lo = INFINITY;
        for (size_t j = 0; j < cnt; j++) {
            s->ids[j] = s->cand[j].id;
            float v = -s->cand[j].key;
            m = v > m ? v : m;
            lo = v < lo ? v : lo;
        }
        S.list = s->ids, S.n = S.count = cnt;
        S.m = m, S.ymin = lo;
    } else {
        stats(s, &S);
    }
    if (S.count == 0) return 0;
    if (S.m == INFINITY) return lowest_inf(&S);
    if (p->top_k > HEAP_K && (size_t)p->top_k < S.count) {
        struct cut c = {.key = KEY_NEG_Y, .m = S.m, .count_mass = true, .pred = PRED_COUNT_GE,
                        .kcount = (uint64_t)p->top_k};
        if (cut_set(s, &S, &c)) {
            S.pr.L = -c.ckey, S.pr.I = c.cid;
            S.count = (size_t)p->top_k;
            S.ymin = -c.ckey;
            if (S.count <= LIST_MAX) materialize(s, &S);
        }
    }
    if (S.count > 1 && p->typical_p < 1.0f) {
        /* mu: the mass-weighted mean of m - y, exact sums (sampler.h) */
        u128 z = 0, m1 = 0;
        const struct pred P = S.pr;
        for (size_t j = 0; j < S.n; j++) {
            int32_t i = cs_id(&S, j);
            float v = y[i];
            if (!pred_ok(&P, i, v)) continue;
            uint64_t q = sampler_mass(v - S.m);
            if (!q) continue;
            z += q;
            m1 += (u128)q * (uint64_t)((S.m - v) * 0x1p32f);
        }
        struct cut c = {.key = KEY_TYPICAL, .m = S.m, .mu = (float)((double)m1 / (double)z * 0x1p-32),
                        .pred = PRED_FRAC_GT, .thr = p->typical_p};
        size_t kept = cut_set(s, &S, &c);
        if (kept) {
            S.pr.band = true, S.pr.bm = S.m, S.pr.bmu = c.mu, S.pr.bD = c.ckey, S.pr.bI = c.cid;
            stats(s, &S); /* the band may drop the top token: new m */
        }
    }
    if (S.count > 1 && p->top_p < 1.0f) {
        struct cut c = {.key = KEY_NEG_Y, .m = S.m, .pred = PRED_FRAC_GE, .thr = p->top_p};
        size_t kept = S.list ? 0 : topp_top64(s, &S, &c);
        if (kept) return finish_from_cands(s, &S, kept, p, pos);
        kept = cut_set(s, &S, &c);
        if (kept) {
            S.pr.L = -c.ckey, S.pr.I = c.cid;
            S.count = kept;
            S.ymin = -c.ckey;
            if (S.count <= LIST_MAX) materialize(s, &S);
        }
    }
    if (S.count > 1 && p->min_p > 0.0f) {
        float t = S.m + logf(p->min_p);
        if (t > S.pr.L) {
            S.pr.L = t, S.pr.I = INT32_MAX;
            stats(s, &S);
        }
    }
    if (S.count == 1) return only_member(&S);
    return draw(s, &S, p->temp, dj_rng_uniform(p->seed, pos));
}

/* ---- log-probabilities ---- */

/* top[] as a max-heap by (-logit, id): the root is the worst kept entry.  The
 * logit is kept in .logprob until the end. */
static inline bool lp_lt(struct dj_logprob a, struct dj_logprob b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.tok < b.tok);
}

static void lp_down(struct dj_logprob *h, size_t n, size_t i) {
    struct dj_logprob x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && lp_lt(h[c], h[c + 1])) c++;
        if (!lp_lt(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void lp_up(struct dj_logprob *h, size_t i) {
    struct dj_logprob x = h[i];
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!lp_lt(h[par], x)) break;
        h[i] = h[par];
        i = par;
    }
    h[i] = x;
}

float sampler_logprobs(const float *logits, size_t n_vocab, dj_token chosen, struct dj_logprob *top, size_t n_top,
                       size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!logits || n_vocab == 0) return -INFINITY;
    if (!top) n_top = 0;
    /* pass 1: the n_top best (heap in top[], one comparison per token) and the max */
    size_t cnt = 0, i = 0;
    for (; i < n_vocab && cnt < n_top; i++) {
        float v = logits[i];
        if (!(v >= -FLT_MAX)) continue;
        top[cnt] = (struct dj_logprob){(dj_token)i, v};
        lp_up(top, cnt++);
    }
    float m = -INFINITY;
    for (size_t k = 0; k < cnt; k++) m = top[k].logprob > m ? top[k].logprob : m;
    if (cnt == n_top && n_top) {
        float thr = top[0].logprob;
        for (; i < n_vocab; i++) {
            float v = logits[i];
            if (v > thr) {
                top[0] = (struct dj_logprob){(dj_token)i, v};
                lp_down(top, n_top, 0);
                thr = top[0].logprob;
                m = v > m ? v : m;
            }
        }
    } else {
        for (; i < n_vocab; i++) m = logits[i] > m ? logits[i] : m;
    }
    if (!(m >= -FLT_MAX)) return -INFINITY; /* nothing finite */
    /* heap → descending order */
    for (size_t k = cnt; k-- > 1;) {
        struct dj_logprob t = top[0];
        top[0] = top[k];
        top[k] = t;
        lp_down(top, k, 0);
    }
    bool valid = chosen >= 0 && (size_t)chosen < n_vocab;
    if (m == INFINITY) {
        /* +INFINITY entries share all the probability (the limit of softmax) */
        size_t n_inf = 0;
        for (size_t j = 0; j < n_vocab; j++) n_inf += logits[j] == INFINITY;
        float lp = -logf((float)n_inf);
        size_t k = 0;
        while (k < cnt && top[k].logprob == INFINITY) top[k].logprob = lp, k++;
        if (n_out) *n_out = k;
        return valid && logits[chosen] == INFINITY ? lp : -INFINITY;
    }
    /* the normalizer: exact integer sum of the masses (sampler.h), any order */
    u128 z = 0;
    for (size_t j = 0; j < n_vocab; j += 4096) /* -inf and NaN weigh 0 */
        z += mass_sum(logits + j, n_vocab - j < 4096 ? n_vocab - j : 4096, m, 1.0f);
    double lz = log((double)z) - 51 * 0.6931471805599453;
    for (size_t k = 0; k < cnt; k++) top[k].logprob = (float)(((double)top[k].logprob - (double)m) - lz);
    if (n_out) *n_out = cnt;
    if (!valid || !(logits[chosen] >= -FLT_MAX)) return -INFINITY;
    return (float)(((double)logits[chosen] - (double)m) - lz);
}
