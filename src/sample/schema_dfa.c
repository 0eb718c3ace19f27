/*
 * schema_dfa.c — finite automata over code points for JSON Schema strings
 * (contract in schema_regex.h): regex tree -> NFA -> DFA, minimization,
 * intersection, and the plan of grammar rules for "the DFA's language with
 * lengths m..n".
 *
 *   alphabet   the code point line cut at every boundary of every set the
 *              trees use (surrogates left out): a symbol is an interval all
 *              of whose code points behave alike, so tables are n x k.
 *   NFA        Thompson's construction (one set edge or epsilon edges per
 *              state); {m,n} copies its operand, so the state limit also
 *              bounds how much a count can expand.
 *   DFA        subset construction over "important" NFA states (those with a
 *              set edge, and the final one); per DFA state the symbols are
 *              swept in segments where the set of NFA edges taken is constant.
 *   minimize   Valmari & Lehtinen's partition refinement ("Efficient
 *              minimization of DFAs with partial transition functions", 2008):
 *              O(m log n) for m transitions, works on partial automata, and
 *              drops states that are unreachable or cannot reach acceptance.
 *   intersect  the product of two DFAs over the same alphabet, reachable
 *              pairs only, then minimized.
 *   plan       the product of a DFA with a length counter, see schema_regex.h.
 *
 * Every construction has a size limit (states, table cells, steps of work):
 * a schema is outside input, and a pattern like (a|b)*a.{40} has an
 * exponential DFA.  Past a limit the result is DJ_ERR_UNSUPPORTED and the
 * caller names what it was converting.
 */
#include "sample/schema_regex.h"

#include <stdlib.h>
#include <string.h>

/* ---- alphabet --------------------------------------------------------------- */

struct u32v {
    uint32_t *v;
    size_t n, cap;
    bool oom;
};

static void u32v_push(struct u32v *a, uint32_t x) {
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void bounds_of(const struct rx_node *x, struct u32v *b) {
    if (x->kind == RX_SET)
        for (size_t i = 0; i < x->set.n; i += 2) u32v_push(b, x->set.r[i]), u32v_push(b, x->set.r[i + 1] + 1);
    for (size_t i = 0; i < x->n_kid; i++) bounds_of(x->kid[i], b);
}

enum dj_status rx_alphabet_build(struct rx_node *const *xs, size_t n, struct rx_alphabet *out) {
    struct u32v b = {0};
    u32v_push(&b, 0), u32v_push(&b, 0xD800), u32v_push(&b, 0xE000), u32v_push(&b, RX_MAX_CP + 1);
    for (size_t i = 0; i < n; i++) bounds_of(xs[i], &b);
    if (b.oom) {
        free(b.v);
        return DJ_ERR_NOMEM;
    }
    qsort(b.v, b.n, sizeof *b.v, cmp_u32);
    size_t w = 0;
    for (size_t i = 0; i < b.n; i++)
        if (!w || b.v[i] != b.v[w - 1]) b.v[w++] = b.v[i];
    struct rx_alphabet a = {malloc(w * sizeof *a.lo), malloc(w * sizeof *a.hi), 0};
    if (!a.lo || !a.hi) {
        free(a.lo), free(a.hi), free(b.v);
        return DJ_ERR_NOMEM;
    }
    for (size_t i = 0; i + 1 < w; i++) {
        if (b.v[i] == 0xD800) continue; /* the surrogates: in no set */
        a.lo[a.n] = b.v[i], a.hi[a.n] = b.v[i + 1] - 1, a.n++;
    }
    free(b.v);
    *out = a;
    return DJ_OK;
}

void rx_alphabet_free(struct rx_alphabet *a) {
    free(a->lo), free(a->hi);
    *a = (struct rx_alphabet){0};
}

/* The symbol whose interval holds code point cp (the one starting at a range's lo, or ending at
 * its hi: both exist by construction). */
static uint32_t sym_of(const struct rx_alphabet *a, uint32_t cp) {
    size_t l = 0, h = a->n;
    while (l + 1 < h) {
        size_t mid = (l + h) / 2;
        if (a->lo[mid] <= cp) l = mid;
        else h = mid;
    }
    return (uint32_t)l;
}

/* ---- NFA ---------------------------------------------------------------------- */

struct eps {
    int32_t to, next;
};

struct nfa {
    size_t n, cap, max;
    int32_t *set_to;   /* per state: the set edge's target, -1 none */
    uint32_t *set_id;  /* per state: its set (index into sets) */
    int32_t *eps_head; /* per state: first epsilon edge, -1 none */
    struct eps *eps;
    size_t n_eps, cap_eps;
    /* the trees' set nodes (sorted by address) and their symbol ranges */
    const struct rx_node **set_node;
    size_t *set_off, *set_len, n_sets;
    struct u32v ranges; /* pairs sym_lo, sym_hi */
    enum dj_status st;
};

static int32_t nfa_state(struct nfa *a) {
    if (a->st) return -1;
    if (a->n >= a->max) {
        a->st = DJ_ERR_UNSUPPORTED;
        return -1;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        int32_t *t = realloc(a->set_to, cap * sizeof *t);
        if (t) a->set_to = t;
        uint32_t *s = realloc(a->set_id, cap * sizeof *s);
        if (s) a->set_id = s;
        int32_t *e = realloc(a->eps_head, cap * sizeof *e);
        if (e) a->eps_head = e;
        if (!t || !s || !e) {
            a->st = DJ_ERR_NOMEM;
            return -1;
        }
        a->cap = cap;
    }
    a->set_to[a->n] = -1, a->set_id[a->n] = 0, a->eps_head[a->n] = -1;
    return (int32_t)a->n++;
}

static void nfa_eps(struct nfa *a, int32_t from, int32_t to) {
    if (a->st) return;
    if (a->n_eps == a->cap_eps) {
        size_t cap = a->cap_eps ? 2 * a->cap_eps : 256;
        struct eps *e = realloc(a->eps, cap * sizeof *e);
        if (!e) {
            a->st = DJ_ERR_NOMEM;
            return;
        }
        a->eps = e, a->cap_eps = cap;
    }
    a->eps[a->n_eps] = (struct eps){to, a->eps_head[from]};
    a->eps_head[from] = (int32_t)a->n_eps++;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

static void collect_sets(const struct rx_node *x, const struct rx_node ***v, size_t *n, size_t *cap, bool *oom) {
    if (*oom) return;
    if (x->kind == RX_SET) {
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 32;
            const struct rx_node **nv = realloc(*v, c * sizeof *nv);
            if (!nv) {
                *oom = true;
                return;
            }
            *v = nv, *cap = c;
        }
        (*v)[(*n)++] = x;
    }
    for (size_t i = 0; i < x->n_kid; i++) collect_sets(x->kid[i], v, n, cap, oom);
}

static bool nfa_sets(struct nfa *a, const struct rx_node *x, const struct rx_alphabet *ab) {
    size_t cap = 0;
    bool oom = false;
    collect_sets(x, &a->set_node, &a->n_sets, &cap, &oom);
    a->set_off = malloc((a->n_sets + 1) * sizeof *a->set_off);
    a->set_len = malloc((a->n_sets + 1) * sizeof *a->set_len);
    if (oom || !a->set_off || !a->set_len) return false;
    qsort(a->set_node, a->n_sets, sizeof *a->set_node, cmp_ptr);
    for (size_t i = 0; i < a->n_sets; i++) {
        const struct cpset *s = &a->set_node[i]->set;
        a->set_off[i] = a->ranges.n / 2;
        for (size_t j = 0; j < s->n; j += 2) u32v_push(&a->ranges, sym_of(ab, s->r[j])), u32v_push(&a->ranges, sym_of(ab, s->r[j + 1]));
        a->set_len[i] = s->n / 2;
    }
    return !a->ranges.oom;
}

static uint32_t set_index(const struct nfa *a, const struct rx_node *x) {
    size_t l = 0, h = a->n_sets;
    while (l + 1 < h) {
        size_t mid = (l + h) / 2;
        if ((uintptr_t)a->set_node[mid] <= (uintptr_t)x) l = mid;
        else h = mid;
    }
    return (uint32_t)l;
}

/* Thompson fragment of x: *s its start, *e its end (no edge out yet). */
static void frag(struct nfa *a, const struct rx_node *x, int32_t *s, int32_t *e) {
    *s = *e = -1;
    if (a->st) return;
    switch (x->kind) {
    case RX_EMPTY: *s = *e = nfa_state(a); return;
    case RX_SET:
        *s = nfa_state(a), *e = nfa_state(a);
        if (a->st) return;
        a->set_to[*s] = *e, a->set_id[*s] = set_index(a, x);
        return;
    case RX_CAT:
        for (size_t i = 0; i < x->n_kid && !a->st; i++) {
            int32_t ks, ke;
            frag(a, x->kid[i], &ks, &ke);
            if (a->st) return;
            if (i) nfa_eps(a, *e, ks);
            else *s = ks;
            *e = ke;
        }
        return;
    case RX_ALT:
        *s = nfa_state(a), *e = nfa_state(a);
        for (size_t i = 0; i < x->n_kid && !a->st; i++) {
            int32_t ks, ke;
            frag(a, x->kid[i], &ks, &ke);
            nfa_eps(a, *s, ks), nfa_eps(a, ke, *e);
        }
        return;
    case RX_REP: {
        int32_t cur = *s = nfa_state(a);
        for (size_t i = 0; i < x->m && !a->st; i++) {
            int32_t ks, ke;
            frag(a, x->kid[0], &ks, &ke);
            nfa_eps(a, cur, ks);
            cur = ke;
        }
        *e = nfa_state(a);
        if (x->n == RX_INF) {
            int32_t ks, ke;
            frag(a, x->kid[0], &ks, &ke);
            nfa_eps(a, cur, ks), nfa_eps(a, ke, cur);
        } else {
            for (size_t i = x->m; i < x->n && !a->st; i++) {
                int32_t ks, ke;
                frag(a, x->kid[0], &ks, &ke);
                nfa_eps(a, cur, *e), nfa_eps(a, cur, ks);
                cur = ke;
            }
        }
        nfa_eps(a, cur, *e);
        return;
    }
    }
}

static void nfa_free(struct nfa *a) {
    free(a->set_to), free(a->set_id), free(a->eps_head), free(a->eps);
    free(a->set_node), free(a->set_off), free(a->set_len), free(a->ranges.v);
}

/* ---- subset construction ------------------------------------------------------ */

struct subsets {
    struct u32v keys;   /* the DFA states' NFA state lists, back to back */
    size_t *off;        /* n + 1 */
    size_t n, cap;
    uint32_t *slot;     /* hash table: DFA state + 1, 0 empty */
    size_t n_slot;
};

static uint64_t hash_u32s(const uint32_t *v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ v[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The DFA state for key v[0..n) (sorted), made if new (*made); -1 with
 * *st set on OOM or past max. */
static int32_t subset_get(struct subsets *S, const uint32_t *v, size_t n, size_t max, bool *made, enum dj_status *st) {
    *made = false;
    if (S->n_slot < 2 * (S->n + 1)) { /* grow the table (and rehash) */
        size_t ns = S->n_slot ? 2 * S->n_slot : 1024;
        uint32_t *slot = calloc(ns, sizeof *slot);
        if (!slot) return *st = DJ_ERR_NOMEM, -1;
        for (size_t i = 0; i < S->n; i++) {
            uint64_t h = hash_u32s(S->keys.v + S->off[i], S->off[i + 1] - S->off[i]);
            size_t j = (size_t)h & (ns - 1);
            while (slot[j]) j = (j + 1) & (ns - 1);
            slot[j] = (uint32_t)i + 1;
        }
        free(S->slot);
        S->slot = slot, S->n_slot = ns;
    }
    uint64_t h = hash_u32s(v, n);
    size_t j = (size_t)h & (S->n_slot - 1);
    for (; S->slot[j]; j = (j + 1) & (S->n_slot - 1)) {
        size_t i = S->slot[j] - 1, len = S->off[i + 1] - S->off[i];
        if (len == n && !memcmp(S->keys.v + S->off[i], v, n * sizeof *v)) return (int32_t)i;
    }
    if (S->n >= max) return *st = DJ_ERR_UNSUPPORTED, -1;
    if (S->n + 2 > S->cap) {
        size_t cap = S->cap ? 2 * S->cap : 64;
        size_t *o = realloc(S->off, cap * sizeof *o);
        if (!o) return *st = DJ_ERR_NOMEM, -1;
        S->off = o, S->cap = cap;
    }
    if (!S->n) S->off[0] = 0;
    for (size_t i = 0; i < n; i++) u32v_push(&S->keys, v[i]);
    if (S->keys.oom) return *st = DJ_ERR_NOMEM, -1;
    S->off[S->n + 1] = S->keys.n;
    S->slot[j] = (uint32_t)S->n + 1;
    *made = true;
    return (int32_t)S->n++;
}

struct closure {
    uint32_t *mark; /* per NFA state: the stamp of the last closure that saw it */
    uint32_t stamp;
    int32_t *stack;
    struct u32v out;
};

/* The important states reachable by epsilon edges from seeds[0..n), sorted, in c->out. */
static void closure_of(const struct nfa *a, int32_t final, struct closure *c, const int32_t *seeds, size_t n, size_t *work) {
    c->stamp++;
    c->out.n = 0;
    size_t sp = 0;
    for (size_t i = 0; i < n; i++)
        if (c->mark[seeds[i]] != c->stamp) c->mark[seeds[i]] = c->stamp, c->stack[sp++] = seeds[i];
    while (sp) {
        int32_t u = c->stack[--sp];
        (*work)++;
        if (a->set_to[u] >= 0 || u == final) u32v_push(&c->out, (uint32_t)u);
        for (int32_t e = a->eps_head[u]; e >= 0; e = a->eps[e].next) {
            int32_t t = a->eps[e].to;
            if (c->mark[t] != c->stamp) c->mark[t] = c->stamp, c->stack[sp++] = t;
        }
    }
    qsort(c->out.v, c->out.n, sizeof *c->out.v, cmp_u32);
}

/* Does some range of set si contain symbol k? */
static bool set_covers(const struct nfa *a, uint32_t si, uint32_t k) {
    const uint32_t *r = a->ranges.v + 2 * a->set_off[si];
    size_t l = 0, h = a->set_len[si];
    while (l < h) { /* first range with hi >= k */
        size_t mid = (l + h) / 2;
        if (r[2 * mid + 1] < k) l = mid + 1;
        else h = mid;
    }
    return l < a->set_len[si] && r[2 * l] <= k;
}

static enum dj_status table_grow(struct sdfa *d, size_t n_states) {
    if (n_states > SDFA_MAX_CELLS / (d->k ? d->k : 1)) return DJ_ERR_UNSUPPORTED;
    int32_t *t = realloc(d->delta, n_states * d->k * sizeof *t);
    if (t) d->delta = t;
    bool *acc = realloc(d->acc, n_states * sizeof *acc);
    if (acc) d->acc = acc;
    return t && acc ? DJ_OK : DJ_ERR_NOMEM;
}

/* Room in d's tables for n states (the subset constructions' states so far): doubles *cap,
 * never past max_states. */
static enum dj_status table_reserve(struct sdfa *d, size_t *cap, size_t n, size_t max_states) {
    if (n <= *cap) return DJ_OK;
    size_t nc = *cap ? 2 * *cap : 64;
    if (nc > max_states) nc = max_states;
    if (nc < n) nc = n;
    enum dj_status st = table_grow(d, nc);
    if (!st) *cap = nc;
    return st;
}

enum dj_status sdfa_from_rx(const struct rx_node *x, const struct rx_alphabet *ab, size_t max_states, struct sdfa *out) {
    struct nfa a = {.max = 1u << 20};
    struct subsets S = {0};
    struct closure c = {0};
    struct sdfa d = {.k = ab->n};
    struct u32v bp = {0};
    int32_t *seeds = NULL;
    uint32_t *key = NULL;
    size_t cap_states = 0, work = 0;
    enum dj_status st = DJ_OK;
    int32_t start, final;
    if (!nfa_sets(&a, x, ab)) {
        st = DJ_ERR_NOMEM;
        goto done;
    }
    frag(&a, x, &start, &final);
    if ((st = a.st)) goto done;
    c.mark = calloc(a.n, sizeof *c.mark);
    c.stack = malloc(a.n * sizeof *c.stack);
    seeds = malloc(a.n * sizeof *seeds);
    key = malloc(a.n * sizeof *key);
    if (!c.mark || !c.stack || !seeds || !key) {
        st = DJ_ERR_NOMEM;
        goto done;
    }
    bool made;
    closure_of(&a, final, &c, &start, 1, &work);
    if (c.out.oom || subset_get(&S, c.out.v, c.out.n, max_states, &made, &st) < 0) {
        if (!st) st = DJ_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < S.n; i++) {
        if ((st = table_reserve(&d, &cap_states, S.n, max_states))) goto done;
        int32_t *row = d.delta + i * d.k;
        for (size_t k = 0; k < d.k; k++) row[k] = -1;
        size_t n_key = S.off[i + 1] - S.off[i];
        memcpy(key, S.keys.v + S.off[i], n_key * sizeof *key); /* (S.keys moves as states are made) */
        d.acc[i] = false;
        bp.n = 0;
        for (size_t j = 0; j < n_key; j++) {
            int32_t u = (int32_t)key[j];
            if (u == final) d.acc[i] = true;
            if (a.set_to[u] < 0) continue;
            uint32_t si = a.set_id[u];
            const uint32_t *r = a.ranges.v + 2 * a.set_off[si];
            for (size_t q = 0; q < a.set_len[si]; q++) u32v_push(&bp, r[2 * q]), u32v_push(&bp, r[2 * q + 1] + 1);
        }
        if (bp.oom) {
            st = DJ_ERR_NOMEM;
            goto done;
        }
        qsort(bp.v, bp.n, sizeof *bp.v, cmp_u32);
        for (size_t b = 0; b + 1 < bp.n; b++) {
            if (bp.v[b] == bp.v[b + 1]) continue;
            uint32_t k0 = bp.v[b], k1 = bp.v[b + 1]; /* symbols k0..k1-1 take the same edges */
            size_t n_seed = 0;
            for (size_t j = 0; j < n_key; j++) {
                int32_t u = (int32_t)key[j];
                work++;
                if (a.set_to[u] >= 0 && set_covers(&a, a.set_id[u], k0)) seeds[n_seed++] = a.set_to[u];
            }
            if (!n_seed) continue;
            closure_of(&a, final, &c, seeds, n_seed, &work);
            if (c.out.oom) {
                st = DJ_ERR_NOMEM;
                goto done;
            }
            int32_t t = subset_get(&S, c.out.v, c.out.n, max_states, &made, &st);
            if (t < 0) goto done;
            row = d.delta + i * d.k; /* (the table did not move: rows are filled in order) */
            for (uint32_t k = k0; k < k1; k++) row[k] = t;
        }
        if (work > SDFA_MAX_WORK) {
            st = DJ_ERR_UNSUPPORTED;
            goto done;
        }
    }
    d.n = S.n;
    st = sdfa_minimize(&d);
    d.n_made = S.n;
done:
    if (st) sdfa_free(&d);
    else *out = d;
    nfa_free(&a);
    free(S.keys.v), free(S.off), free(S.slot);
    free(c.mark), free(c.stack), free(c.out.v);
    free(seeds), free(key), free(bp.v);
    return st;
}

void sdfa_free(struct sdfa *d) {
    free(d->delta), free(d->acc);
    *d = (struct sdfa){0};
}

/* ---- minimization (Valmari & Lehtinen 2008) -------------------------------------- */

struct part {
    size_t z;                   /* sets */
    size_t *E, *L, *S, *F, *P;  /* elements in set order, element -> location, element -> set, set -> first, set -> past */
};

struct vmin {
    struct part B, C;
    size_t *M, *W, w;          /* marked count per set, touched sets */
    size_t nn, mm, rr;
    size_t *T, *Lb, *H;         /* transitions: tail, label, head */
    size_t *A, *AF;             /* transitions adjacent to a state: A[AF[q] .. AF[q+1]) */
};

static bool part_init(struct part *p, size_t n) {
    p->z = n ? 1 : 0;
    p->E = malloc((n + 1) * sizeof *p->E), p->L = malloc((n + 1) * sizeof *p->L);
    p->S = malloc((n + 1) * sizeof *p->S), p->F = malloc((n + 1) * sizeof *p->F), p->P = malloc((n + 1) * sizeof *p->P);
    if (!p->E || !p->L || !p->S || !p->F || !p->P) return false;
    for (size_t i = 0; i < n; i++) p->E[i] = p->L[i] = i, p->S[i] = 0;
    if (n) p->F[0] = 0, p->P[0] = n;
    return true;
}

static void part_free(struct part *p) { free(p->E), free(p->L), free(p->S), free(p->F), free(p->P); }

static void part_mark(struct vmin *v, struct part *p, size_t e) {
    size_t s = p->S[e], i = p->L[e], j = p->F[s] + v->M[s];
    p->E[i] = p->E[j], p->L[p->E[i]] = i;
    p->E[j] = e, p->L[e] = j;
    if (!v->M[s]++) v->W[v->w++] = s;
}

static void part_split(struct vmin *v, struct part *p) {
    while (v->w) {
        size_t s = v->W[--v->w], j = p->F[s] + v->M[s];
        if (j == p->P[s]) {
            v->M[s] = 0;
            continue;
        }
        size_t z = p->z;
        if (v->M[s] <= p->P[s] - j) p->F[z] = p->F[s], p->P[z] = p->F[s] = j;
        else p->P[z] = p->P[s], p->F[z] = p->P[s] = j;
        for (size_t i = p->F[z]; i < p->P[z]; i++) p->S[p->E[i]] = z;
        v->M[s] = v->M[z] = 0;
        p->z++;
    }
}

static void make_adjacent(struct vmin *v, const size_t *K) {
    for (size_t q = 0; q <= v->nn; q++) v->AF[q] = 0;
    for (size_t t = 0; t < v->mm; t++) v->AF[K[t]]++;
    for (size_t q = 0; q < v->nn; q++) v->AF[q + 1] += v->AF[q];
    for (size_t t = v->mm; t--;) v->A[--v->AF[K[t]]] = t;
}

static void reach(struct vmin *v, size_t q) {
    struct part *B = &v->B;
    size_t i = B->L[q];
    if (i >= v->rr) {
        B->E[i] = B->E[v->rr], B->L[B->E[i]] = i;
        B->E[v->rr] = q, B->L[q] = v->rr++;
    }
}

/* Keeps the states reachable from those reached so far along K -> H, and the transitions between them. */
static void rem_unreachable(struct vmin *v, size_t *K, size_t *H) {
    make_adjacent(v, K);
    for (size_t i = 0; i < v->rr; i++)
        for (size_t j = v->AF[v->B.E[i]]; j < v->AF[v->B.E[i] + 1]; j++) reach(v, H[v->A[j]]);
    size_t j = 0;
    for (size_t t = 0; t < v->mm; t++)
        if (v->B.L[K[t]] < v->rr) H[j] = H[t], v->Lb[j] = v->Lb[t], K[j] = K[t], j++;
    v->mm = j;
    v->B.P[0] = v->rr;
    v->rr = 0;
}

enum dj_status sdfa_minimize(struct sdfa *d) {
    struct vmin v = {.nn = d->n};
    enum dj_status st = DJ_ERR_NOMEM;
    struct sdfa r = {.k = d->k};
    size_t *blk_new = NULL, *queue = NULL;
    if (!d->n) return DJ_OK;
    for (size_t i = 0; i < d->n * d->k; i++) v.mm += d->delta[i] >= 0;
    size_t mx = (v.mm > v.nn ? v.mm : v.nn) + 1;
    v.T = malloc(mx * sizeof *v.T), v.Lb = malloc(mx * sizeof *v.Lb), v.H = malloc(mx * sizeof *v.H);
    v.A = malloc(mx * sizeof *v.A), v.AF = malloc((v.nn + 1) * sizeof *v.AF);
    v.M = calloc(mx, sizeof *v.M), v.W = malloc(mx * sizeof *v.W);
    if (!v.T || !v.Lb || !v.H || !v.A || !v.AF || !v.M || !v.W || !part_init(&v.B, v.nn)) goto done;
    size_t t = 0;
    for (size_t q = 0; q < d->n; q++)
        for (size_t k = 0; k < d->k; k++)
            if (d->delta[q * d->k + k] >= 0) v.T[t] = q, v.Lb[t] = k, v.H[t] = (size_t)d->delta[q * d->k + k], t++;
    /* trim: reachable from 0, then able to reach acceptance */
    reach(&v, 0);
    rem_unreachable(&v, v.T, v.H);
    for (size_t q = 0; q < d->n; q++)
        if (d->acc[q] && v.B.L[q] < v.B.P[0]) reach(&v, q);
    size_t ff = v.rr;
    rem_unreachable(&v, v.H, v.T);
    size_t useful = v.B.P[0]; /* the states kept are those at locations 0..useful-1 */
    if (v.B.L[0] >= useful) { /* the start cannot reach acceptance: the empty language */
        sdfa_free(d);
        *d = (struct sdfa){.k = r.k};
        st = DJ_OK;
        goto done;
    }
    /* initial partition: accepting / not */
    v.M[0] = ff;
    if (ff) {
        v.W[v.w++] = 0;
        part_split(&v, &v.B);
    }
    /* transitions partitioned by label */
    if (!part_init(&v.C, v.mm)) goto done;
    if (v.mm) {
        /* counting sort of the transitions by label */
        size_t *cnt = calloc(d->k + 1, sizeof *cnt);
        if (!cnt) goto done;
        for (size_t i = 0; i < v.mm; i++) cnt[v.Lb[i] + 1]++;
        for (size_t k = 0; k < d->k; k++) cnt[k + 1] += cnt[k];
        for (size_t i = 0; i < v.mm; i++) v.C.E[cnt[v.Lb[i]]++] = i;
        free(cnt);
        v.C.z = 0, v.M[0] = 0;
        size_t a = v.Lb[v.C.E[0]];
        v.C.F[0] = 0;
        for (size_t i = 0; i < v.mm; i++) {
            size_t tt = v.C.E[i];
            if (v.Lb[tt] != a) {
                a = v.Lb[tt];
                v.C.P[v.C.z++] = i;
                v.C.F[v.C.z] = i;
                v.M[v.C.z] = 0;
            }
            v.C.S[tt] = v.C.z, v.C.L[tt] = i;
        }
        v.C.P[v.C.z++] = v.mm;
    }
    /* split blocks and cords */
    make_adjacent(&v, v.H);
    size_t b = 1, c = 0;
    while (c < v.C.z) {
        for (size_t i = v.C.F[c]; i < v.C.P[c]; i++) part_mark(&v, &v.B, v.T[v.C.E[i]]);
        part_split(&v, &v.B);
        c++;
        while (b < v.B.z) {
            for (size_t i = v.B.F[b]; i < v.B.P[b]; i++)
                for (size_t j = v.AF[v.B.E[i]]; j < v.AF[v.B.E[i] + 1]; j++) part_mark(&v, &v.C, v.A[j]);
            part_split(&v, &v.C);
            b++;
        }
    }
    /* the result: blocks numbered in breadth-first order from the start's */
    size_t nb = v.B.z;
    blk_new = malloc(nb * sizeof *blk_new), queue = malloc(nb * sizeof *queue);
    r.delta = malloc(nb * d->k * sizeof *r.delta), r.acc = malloc(nb * sizeof *r.acc);
    if (!blk_new || !queue || !r.delta || !r.acc) goto done;
    for (size_t i = 0; i < nb; i++) blk_new[i] = SIZE_MAX;
    for (size_t i = 0; i < nb * d->k; i++) r.delta[i] = -1;
    size_t qh = 0, qt = 0;
    blk_new[v.B.S[0]] = 0, queue[qt++] = v.B.S[0];
    while (qh < qt) {
        size_t blk = queue[qh++], q = v.B.E[v.B.F[blk]], nq = blk_new[blk];
        r.acc[nq] = d->acc[q];
        for (size_t k = 0; k < d->k; k++) {
            int32_t to = d->delta[q * d->k + k];
            if (to < 0 || v.B.L[to] >= useful) continue; /* a dead state */
            size_t tb = v.B.S[to];
            if (blk_new[tb] == SIZE_MAX) blk_new[tb] = qt, queue[qt++] = tb;
            r.delta[nq * d->k + k] = (int32_t)blk_new[tb];
        }
    }
    r.n = qt;
    sdfa_free(d);
    *d = r;
    r = (struct sdfa){0};
    st = DJ_OK;
done:
    sdfa_free(&r);
    free(blk_new), free(queue);
    free(v.T), free(v.Lb), free(v.H), free(v.A), free(v.AF), free(v.M), free(v.W);
    part_free(&v.B), part_free(&v.C);
    return st;
}

/* ---- intersection ---------------------------------------------------------------- */

enum dj_status sdfa_intersect(const struct sdfa *x, const struct sdfa *y, size_t max_states, struct sdfa *out) {
    struct sdfa d = {.k = x->k};
    struct subsets S = {0};
    size_t cap_states = 0;
    enum dj_status st = DJ_OK;
    bool made;
    if (x->k != y->k) return DJ_ERR_INVALID;
    if (!x->n || !y->n) {
        *out = d;
        return DJ_OK;
    }
    uint32_t key[2] = {0, 0};
    if (subset_get(&S, key, 2, max_states, &made, &st) < 0) goto done;
    for (size_t i = 0; i < S.n; i++) {
        if ((st = table_reserve(&d, &cap_states, S.n, max_states))) goto done;
        uint32_t p = S.keys.v[S.off[i]], q = S.keys.v[S.off[i] + 1];
        d.acc[i] = x->acc[p] && y->acc[q];
        for (size_t k = 0; k < d.k; k++) {
            int32_t a = x->delta[p * x->k + k], b = y->delta[q * y->k + k], t = -1;
            if (a >= 0 && b >= 0) {
                key[0] = (uint32_t)a, key[1] = (uint32_t)b;
                if ((t = subset_get(&S, key, 2, max_states, &made, &st)) < 0) goto done;
            }
            d.delta[i * d.k + k] = t;
        }
    }
    d.n = S.n;
    st = sdfa_minimize(&d);
    d.n_made = S.n;
done:
    if (st) sdfa_free(&d);
    else *out = d;
    free(S.keys.v), free(S.off), free(S.slot);
    return st;
}

/* ---- the plan ---------------------------------------------------------------------- */

struct pkey {
    uint32_t q;
    size_t l;
};

struct pmap {
    struct pkey *key; /* per node */
    uint32_t *slot;   /* node + 1, 0 empty */
    size_t n_slot;
};

static uint64_t pkey_hash(struct pkey k) {
    uint64_t h = ((uint64_t)k.q * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)k.l * 0xC2B2AE3D27D4EB4Full);
    return h ^ (h >> 31);
}

static void plan_node_init(struct sdfa_pnode *nd, const struct sdfa *d, const bool *free_loop, uint32_t q, size_t l,
                           size_t m, size_t n) {
    *nd = (struct sdfa_pnode){.q = q};
    if (free_loop[q]) {
        bool any = false;
        for (size_t k = 0; k < d->k; k++) any |= d->delta[(size_t)q * d->k + k] == (int32_t)q;
        nd->loop = true;
        nd->lo = l >= m ? 0 : m - l;
        nd->hi = !any ? 0 : n == RX_INF ? RX_INF : n - l;
    } else {
        nd->acc = d->acc[q] && l >= m;
    }
}

enum dj_status sdfa_plan_build(const struct sdfa *d, size_t m, size_t n, size_t max_nodes, struct sdfa_plan *out) {
    struct sdfa_plan p = {0};
    struct pmap map = {0};
    bool *free_loop = NULL, *live = NULL;
    size_t *dist = NULL, *queue = NULL, *order = NULL, *pred_off = NULL, *pred = NULL, *newid = NULL;
    uint8_t *color = NULL;
    size_t cap_nodes = 0, cap_edges = 0;
    enum dj_status st = DJ_ERR_NOMEM;
    *out = p;
    if (!d->n || (n != RX_INF && m > n)) return DJ_OK;
    free_loop = calloc(d->n, sizeof *free_loop);
    dist = malloc(d->n * sizeof *dist), queue = malloc(d->n * sizeof *queue), color = calloc(d->n, 1);
    order = malloc(d->n * sizeof *order);
    if (!free_loop || !dist || !queue || !color || !order) goto done;
    /* loops that only loop, shortest and longest lengths */
    for (size_t q = 0; q < d->n; q++) {
        bool only = d->acc[q];
        for (size_t k = 0; k < d->k && only; k++) only = d->delta[q * d->k + k] < 0 || d->delta[q * d->k + k] == (int32_t)q;
        free_loop[q] = only;
    }
    size_t minlen = RX_INF, maxlen = 0, qh = 0, qt = 0;
    for (size_t q = 0; q < d->n; q++) dist[q] = RX_INF;
    dist[0] = 0, queue[qt++] = 0;
    while (qh < qt) {
        size_t q = queue[qh++];
        if (d->acc[q] && dist[q] < minlen) minlen = dist[q];
        for (size_t k = 0; k < d->k; k++) {
            int32_t t = d->delta[q * d->k + k];
            if (t >= 0 && dist[t] == RX_INF) dist[t] = dist[q] + 1, queue[qt++] = (size_t)t;
        }
    }
    /* longest: RX_INF with a cycle (every state is live), else over a topological order (iterative DFS) */
    {
        size_t n_order = 0, sp = 0;
        bool cyclic = false;
        size_t *next_k = dist; /* reuse: dist no longer needed */
        for (size_t q = 0; q < d->n; q++) next_k[q] = 0;
        queue[sp++] = 0, color[0] = 1;
        while (sp && !cyclic) {
            size_t q = queue[sp - 1];
            if (next_k[q] == d->k) {
                color[q] = 2, order[n_order++] = q, sp--;
                continue;
            }
            int32_t t = d->delta[q * d->k + next_k[q]++];
            if (t < 0) continue;
            if (color[t] == 1) cyclic = true;
            else if (!color[t]) color[t] = 1, queue[sp++] = (size_t)t;
        }
        if (cyclic) maxlen = RX_INF;
        else {
            size_t *lp = next_k; /* longest path to acceptance from q; order is reverse topological */
            for (size_t i = 0; i < n_order; i++) {
                size_t q = order[i], best = 0;
                for (size_t k = 0; k < d->k; k++) {
                    int32_t t = d->delta[q * d->k + k];
                    if (t >= 0 && lp[t] + 1 > best) best = lp[t] + 1;
                }
                lp[q] = best;
            }
            maxlen = lp[0];
        }
    }
    if (m <= minlen) m = 0;
    if (n != RX_INF && maxlen <= n) n = RX_INF;
    /* nodes breadth-first; (q, l) with l saturating at m when there is no maximum */
    map.n_slot = 1024;
    map.slot = calloc(map.n_slot, sizeof *map.slot);
    if (!map.slot) goto done;
    struct pkey k0 = {0, 0};
    for (size_t i = 0;; i++) {
        if (i == 0) { /* the start node */
            p.node = malloc(64 * sizeof *p.node), map.key = malloc(64 * sizeof *map.key);
            if (!p.node || !map.key) goto done;
            cap_nodes = 64;
            plan_node_init(&p.node[0], d, free_loop, 0, 0, m, n);
            map.key[0] = k0;
            map.slot[pkey_hash(k0) & (map.n_slot - 1)] = 1;
            p.n = 1;
        }
        if (i >= p.n) break;
        struct sdfa_pnode *nd = &p.node[i];
        nd->e0 = p.n_edge, nd->ne = 0;
        if (nd->loop) continue;
        size_t l = map.key[i].l;
        if (n != RX_INF && l + 1 > n) continue;
        size_t l2 = n == RX_INF ? (l + 1 < m ? l + 1 : m) : l + 1;
        uint32_t q = map.key[i].q;
        for (size_t k = 0; k < d->k; k++) {
            int32_t t = d->delta[(size_t)q * d->k + k];
            if (t < 0) continue;
            struct pkey key = {(uint32_t)t, l2};
            /* find or make the node */
            size_t j = pkey_hash(key) & (map.n_slot - 1);
            uint32_t id = 0;
            for (; map.slot[j]; j = (j + 1) & (map.n_slot - 1))
                if (map.key[map.slot[j] - 1].q == key.q && map.key[map.slot[j] - 1].l == key.l) {
                    id = map.slot[j];
                    break;
                }
            if (!id) {
                if (p.n >= max_nodes) {
                    st = DJ_ERR_UNSUPPORTED;
                    goto done;
                }
                if (p.n == cap_nodes) {
                    struct sdfa_pnode *nn = realloc(p.node, 2 * cap_nodes * sizeof *nn);
                    if (nn) p.node = nn;
                    struct pkey *nk = realloc(map.key, 2 * cap_nodes * sizeof *nk);
                    if (nk) map.key = nk;
                    if (!nn || !nk) goto done;
                    cap_nodes *= 2;
                    nd = &p.node[i];
                }
                plan_node_init(&p.node[p.n], d, free_loop, key.q, key.l, m, n);
                map.key[p.n] = key;
                map.slot[j] = id = (uint32_t)++p.n;
                if (2 * p.n > map.n_slot) { /* rehash */
                    size_t ns = 2 * map.n_slot;
                    uint32_t *slot = calloc(ns, sizeof *slot);
                    if (!slot) goto done;
                    for (size_t r = 0; r < p.n; r++) {
                        size_t s = pkey_hash(map.key[r]) & (ns - 1);
                        while (slot[s]) s = (s + 1) & (ns - 1);
                        slot[s] = (uint32_t)r + 1;
                    }
                    free(map.slot);
                    map.slot = slot, map.n_slot = ns;
                }
            }
            uint32_t to = id - 1;
            if (nd->ne && p.edge[p.n_edge - 1].to == to && p.edge[p.n_edge - 1].sym_hi + 1 == k) {
                p.edge[p.n_edge - 1].sym_hi = (uint32_t)k;
                continue;
            }
            if (p.n_edge == cap_edges) {
                size_t ce = cap_edges ? 2 * cap_edges : 256;
                if (ce > SDFA_MAX_CELLS) {
                    st = DJ_ERR_UNSUPPORTED;
                    goto done;
                }
                struct sdfa_pedge *ne = realloc(p.edge, ce * sizeof *ne);
                if (!ne) goto done;
                p.edge = ne, cap_edges = ce;
            }
            p.edge[p.n_edge++] = (struct sdfa_pedge){(uint32_t)k, (uint32_t)k, to};
            nd->ne++;
        }
    }
    /* liveness: backwards from the nodes where a text may end */
    live = calloc(p.n, sizeof *live);
    pred_off = calloc(p.n + 1, sizeof *pred_off);
    pred = malloc((p.n_edge + 1) * sizeof *pred);
    newid = malloc(p.n * sizeof *newid);
    size_t *lq = malloc(p.n * sizeof *lq);
    if (!live || !pred_off || !pred || !newid || !lq) {
        free(lq);
        goto done;
    }
    for (size_t e = 0; e < p.n_edge; e++) pred_off[p.edge[e].to + 1]++;
    for (size_t i = 0; i < p.n; i++) pred_off[i + 1] += pred_off[i];
    for (size_t i = 0; i < p.n; i++)
        for (size_t e = p.node[i].e0; e < p.node[i].e0 + p.node[i].ne; e++) pred[pred_off[p.edge[e].to]++] = i;
    for (size_t i = p.n; i > 0; i--) pred_off[i] = pred_off[i - 1];
    pred_off[0] = 0;
    qh = qt = 0;
    for (size_t i = 0; i < p.n; i++) {
        const struct sdfa_pnode *nd = &p.node[i];
        if (nd->loop ? nd->lo <= nd->hi : nd->acc) live[i] = true, lq[qt++] = i;
    }
    while (qh < qt) {
        size_t i = lq[qh++];
        for (size_t j = pred_off[i]; j < pred_off[i + 1]; j++)
            if (!live[pred[j]]) live[pred[j]] = true, lq[qt++] = pred[j];
    }
    free(lq);
    if (!live[0]) {
        sdfa_plan_free(&p);
        st = DJ_OK;
        goto done;
    }
    /* drop the dead nodes and the edges to them; edges sorted by target */
    size_t nn = 0, ne = 0;
    for (size_t i = 0; i < p.n; i++) newid[i] = live[i] ? nn++ : SIZE_MAX;
    for (size_t i = 0; i < p.n; i++) {
        if (!live[i]) continue;
        struct sdfa_pnode nd = p.node[i];
        size_t e0 = ne;
        for (size_t e = nd.e0; e < nd.e0 + nd.ne; e++)
            if (live[p.edge[e].to]) p.edge[ne] = p.edge[e], p.edge[ne].to = (uint32_t)newid[p.edge[e].to], ne++;
        /* insertion sort by target, stable (few edges per node) */
        for (size_t a = e0 + 1; a < ne; a++) {
            struct sdfa_pedge x = p.edge[a];
            size_t b = a;
            while (b > e0 && p.edge[b - 1].to > x.to) p.edge[b] = p.edge[b - 1], b--;
            p.edge[b] = x;
        }
        nd.e0 = e0, nd.ne = ne - e0;
        p.node[newid[i]] = nd;
    }
    p.n = nn, p.n_edge = ne;
    st = DJ_OK;
    *out = p;
    p = (struct sdfa_plan){0};
done:
    sdfa_plan_free(&p);
    free(map.key), free(map.slot);
    free(free_loop), free(live), free(dist), free(queue), free(order), free(pred_off), free(pred), free(newid), free(color);
    return st;
}

void sdfa_plan_free(struct sdfa_plan *p) {
    free(p->node), free(p->edge);
    *p = (struct sdfa_plan){0};
}

void sdfa_loop_set(const struct sdfa *d, const struct rx_alphabet *a, uint32_t q, struct cpset *out) {
    for (size_t k = 0; k < d->k; k++)
        if (d->delta[(size_t)q * d->k + k] == (int32_t)q) cpset_add(out, a->lo[k], a->hi[k]);
    cpset_norm(out);
}
