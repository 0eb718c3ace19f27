/*
 * memo.c — the output memo (spec §3.1, keyed by tokens as DESIGN.md §1
 * prescribes; the scoring follows SuffixDecoding): a suffix trie over the
 * outputs of earlier requests, shared by every session of an engine.
 *
 *   nodes[0] = root                      map: (parent, tok) -> node   (open addressing,
 *   node: tok, parent, count,                 linear probing, backward-shift deletion)
 *         child (first), next/prev (siblings)
 *   records: ring of the recorded outputs, oldest first (for eviction)
 *
 * Recording output t[0..n) inserts, for every i, the path t[i .. i+DEPTH)
 * and adds 1 to each node on it, so count(node) = number of recorded
 * suffixes starting with that node's path, and count(parent) >= the sum of
 * its children's counts (the rest ended there).  When a new node is needed
 * and none is free, the oldest record is taken back (its paths' counts
 * decremented; nodes reaching 0 freed, leaves first); if the record being
 * inserted is the only one left, its insertion stops there (and so does its
 * later eviction, which undoes exactly what was inserted).
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "spec/spec.h"

#define NIL UINT32_MAX

struct mnode {
    dj_token tok;
    uint32_t parent, count;
    uint32_t child, next, prev; /* first child; siblings (doubly linked) */
};

struct mrec {
    dj_token *tok;
    size_t n;
    size_t n_full;    /* suffixes inserted to their full depth */
    uint32_t d_part;  /* depth inserted of suffix n_full (0: none) */
};

struct spec_memo {
    struct mnode *nodes; /* (max_nodes + 1): node 0 is the root */
    uint32_t max_nodes, n_nodes;
    uint32_t free_head;  /* free list through .next */
    uint32_t *map;       /* (map_cap) node ids, NIL: empty */
    size_t map_cap;
    struct mrec *recs;   /* ring of rec_cap */
    size_t rec_cap, rec_first, n_recs;
};

static size_t key_slot(const struct spec_memo *m, uint32_t parent, dj_token tok) {
    uint64_t x = ((uint64_t)parent << 32 | (uint32_t)tok) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(x >> 29) & (m->map_cap - 1);
}

static uint32_t find(const struct spec_memo *m, uint32_t parent, dj_token tok) {
    for (size_t i = key_slot(m, parent, tok);; i = (i + 1) & (m->map_cap - 1)) {
        const uint32_t id = m->map[i];
        if (id == NIL) return NIL;
        if (m->nodes[id].parent == parent && m->nodes[id].tok == tok) return id;
    }
}

static void map_insert(struct spec_memo *m, uint32_t id) {
    size_t i = key_slot(m, m->nodes[id].parent, m->nodes[id].tok);
    while (m->map[i] != NIL) i = (i + 1) & (m->map_cap - 1);
    m->map[i] = id;
}

/* Backward-shift deletion (no tombstones: lookups stay short). */
static void map_remove(struct spec_memo *m, uint32_t id) {
    const size_t mask = m->map_cap - 1;
    size_t i = key_slot(m, m->nodes[id].parent, m->nodes[id].tok);
    while (m->map[i] != id) i = (i + 1) & mask;
    for (size_t j = i;;) {
        m->map[i] = NIL;
        for (;;) {
            j = (j + 1) & mask;
            if (m->map[j] == NIL) return;
            const size_t k = key_slot(m, m->nodes[m->map[j]].parent, m->nodes[m->map[j]].tok);
            /* j's entry may move to i iff its home k is not cyclically in (i, j] */
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
            break;
        }
        m->map[i] = m->map[j];
        i = j;
    }
}

struct spec_memo *spec_memo_create(uint32_t max_nodes) {
    if (max_nodes < 1 || max_nodes > (1u << 30)) return NULL;
    struct spec_memo *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->max_nodes = max_nodes;
    m->map_cap = 16;
    while (m->map_cap < (size_t)max_nodes * 2) m->map_cap *= 2;
    m->nodes = malloc(((size_t)max_nodes + 1) * sizeof *m->nodes);
    m->map = malloc(m->map_cap * sizeof *m->map);
    if (!m->nodes || !m->map) {
        spec_memo_destroy(m);
        return NULL;
    }
    for (size_t i = 0; i < m->map_cap; i++) m->map[i] = NIL;
    m->nodes[0] = (struct mnode){-1, NIL, 0, NIL, NIL, NIL};
    for (uint32_t i = 1; i <= max_nodes; i++) m->nodes[i].next = i < max_nodes ? i + 1 : NIL;
    m->free_head = 1;
    return m;
}

void spec_memo_destroy(struct spec_memo *m) {
    if (!m) return;
    for (size_t k = 0; k < m->n_recs; k++) free(m->recs[(m->rec_first + k) % m->rec_cap].tok);
    free(m->recs);
    free(m->nodes);
    free(m->map);
    free(m);
}

uint32_t spec_memo_n_nodes(const struct spec_memo *m) { return m ? m->n_nodes : 0; }
uint32_t spec_memo_n_records(const struct spec_memo *m) { return m ? (uint32_t)m->n_recs : 0; }

static void node_free(struct spec_memo *m, uint32_t id) {
    struct mnode *nd = &m->nodes[id];
    map_remove(m, id);
    if (nd->prev != NIL) m->nodes[nd->prev].next = nd->next;
    else m->nodes[nd->parent].child = nd->next;
    if (nd->next != NIL) m->nodes[nd->next].prev = nd->prev;
    nd->next = m->free_head;
    m->free_head = id;
    m->n_nodes--;
}

/* Takes back one path t[0..d) inserted earlier. */
static void path_remove(struct spec_memo *m, const dj_token *t, size_t d) {
    uint32_t path[SPEC_MEMO_DEPTH];
    uint32_t cur = 0;
    size_t k = 0;
    for (; k < d; k++) {
        cur = find(m, cur, t[k]);
        DJ_ASSERT(cur != NIL);
        path[k] = cur;
        DJ_ASSERT(m->nodes[cur].count > 0);
        m->nodes[cur].count--;
    }
    while (k-- > 0)
        if (m->nodes[path[k]].count == 0) node_free(m, path[k]);
}

static void rec_evict_oldest(struct spec_memo *m) {
    struct mrec *r = &m->recs[m->rec_first];
    for (size_t i = 0; i < r->n_full; i++) {
        const size_t d = r->n - i < SPEC_MEMO_DEPTH ? r->n - i : SPEC_MEMO_DEPTH;
        path_remove(m, r->tok + i, d);
    }
    if (r->d_part) path_remove(m, r->tok + r->n_full, r->d_part);
    free(r->tok);
    m->rec_first = (m->rec_first + 1) % m->rec_cap;
    m->n_recs--;
}

/* A node for (parent, tok): found, or made (evicting older records when
 * none is free).  NIL when only the record being inserted remains. */
static uint32_t child_get(struct spec_memo *m, uint32_t parent, dj_token tok) {
    uint32_t id = find(m, parent, tok);
    if (id != NIL) return id;
    while (m->free_head == NIL) {
        if (m->n_recs <= 1) return NIL; /* the newest record is the one being inserted */
        rec_evict_oldest(m);
    }
    id = m->free_head;
    m->free_head = m->nodes[id].next;
    const uint32_t first = m->nodes[parent].child;
    m->nodes[id] = (struct mnode){tok, parent, 0, NIL, first, NIL};
    if (first != NIL) m->nodes[first].prev = id;
    m->nodes[parent].child = id;
    map_insert(m, id);
    m->n_nodes++;
    return id;
}

enum dj_status spec_memo_record(struct spec_memo *m, const dj_token *tok, size_t n) {
    if (n == 0) return DJ_OK;
    if (m->n_recs == m->rec_cap) {
        const size_t cap = m->rec_cap ? m->rec_cap * 2 : 64;
        struct mrec *nr = malloc(cap * sizeof *nr);
        if (!nr) return dj_fail(DJ_ERR_NOMEM, "output memo: out of memory");
        for (size_t k = 0; k < m->n_recs; k++) nr[k] = m->recs[(m->rec_first + k) % m->rec_cap];
        free(m->recs);
        m->recs = nr;
        m->rec_cap = cap;
        m->rec_first = 0;
    }
    dj_token *copy = malloc(n * sizeof *copy);
    if (!copy) return dj_fail(DJ_ERR_NOMEM, "output memo: out of memory");
    memcpy(copy, tok, n * sizeof *copy);
    const size_t slot = (m->rec_first + m->n_recs) % m->rec_cap;
    m->recs[slot] = (struct mrec){copy, n, 0, 0};
    m->n_recs++;
    for (size_t i = 0; i < n; i++) {
        const size_t d = n - i < SPEC_MEMO_DEPTH ? n - i : SPEC_MEMO_DEPTH;
        uint32_t cur = 0;
        size_t k = 0;
        for (; k < d; k++) {
            const uint32_t next = child_get(m, cur, copy[i + k]);
            if (next == NIL) break;
            m->nodes[next].count++;
            cur = next;
        }
        /* eviction may have moved the ring: the record is still the newest */
        struct mrec *r = &m->recs[(m->rec_first + m->n_recs - 1) % m->rec_cap];
        if (k < d) {
            r->d_part = (uint32_t)k;
            break;
        }
        r->n_full = i + 1;
    }
    return DJ_OK;
}

size_t spec_memo_draft(const struct spec_memo *m, const dj_token *ctx, size_t n, dj_token *out, size_t cap,
                       uint32_t *match, float *prob) {
    *match = 0;
    *prob = 0.0f;
    if (!m || n == 0 || cap == 0 || m->n_nodes == 0) return 0;
    size_t mmax = n < SPEC_MEMO_DEPTH - 1 ? n : SPEC_MEMO_DEPTH - 1;
    for (size_t len = mmax; len >= 1; len--) {
        uint32_t cur = 0;
        size_t k = 0;
        for (; k < len && cur != NIL; k++) cur = find(m, cur, ctx[n - len + k]);
        if (cur == NIL) continue;
        float p = 1.0f;
        size_t nd = 0;
        while (nd < cap) {
            uint32_t best = NIL;
            for (uint32_t ch = m->nodes[cur].child; ch != NIL; ch = m->nodes[ch].next)
                if (best == NIL || m->nodes[ch].count > m->nodes[best].count ||
                    (m->nodes[ch].count == m->nodes[best].count && m->nodes[ch].tok < m->nodes[best].tok))
                    best = ch;
            if (best == NIL) break;
            const float pc = p * (float)m->nodes[best].count / (float)m->nodes[cur].count;
            if (pc < SPEC_MEMO_MIN_P) break;
            p = pc;
            out[nd++] = m->nodes[best].tok;
            cur = best;
        }
        if (nd > 0) {
            *match = (uint32_t)len;
            *prob = p;
            return nd;
        }
    }
    return 0;
}
