/*
 * ckpt.c — recurrent-state checkpoints (ckpt.h): a list of entries in LRU order
 * (most recently used first).  The list is short (a checkpoint of a real hybrid
 * model is tens of MB, so a budget holds tens of them): a lookup scans it and
 * compares token prefixes with memcmp, longest candidates first.
 */
#include "kv/ckpt.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"

struct ckpt {
    uint64_t root;
    size_t n;        /* tokens */
    dj_token *tok;   /* (n) */
    float *rs;       /* (rs_floats) */
    size_t bytes;
    struct ckpt *prev, *next;
};

struct kv_ckpt_store {
    size_t rs_floats, max_bytes, bytes, n;
    struct ckpt *head, *tail; /* most / least recently used */
    struct kv_ckpt_stats st;
};

enum dj_status kv_ckpt_create(size_t rs_floats, size_t max_bytes, struct kv_ckpt_store **out) {
    if (rs_floats == 0 || max_bytes == 0)
        return dj_fail(DJ_ERR_INVALID, "checkpoint store: bad parameters (state %zu floats, budget %zu bytes)",
                       rs_floats, max_bytes);
    struct kv_ckpt_store *cs = calloc(1, sizeof *cs);
    if (!cs) return dj_fail(DJ_ERR_NOMEM, "checkpoint store: out of memory");
    cs->rs_floats = rs_floats;
    cs->max_bytes = max_bytes;
    *out = cs;
    return DJ_OK;
}

static void unlink_entry(struct kv_ckpt_store *cs, struct ckpt *c) {
    if (c->prev) c->prev->next = c->next;
    else cs->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else cs->tail = c->prev;
    c->prev = c->next = NULL;
}

static void push_front(struct kv_ckpt_store *cs, struct ckpt *c) {
    c->prev = NULL;
    c->next = cs->head;
    if (cs->head) cs->head->prev = c;
    cs->head = c;
    if (!cs->tail) cs->tail = c;
}

static void drop(struct kv_ckpt_store *cs, struct ckpt *c) {
    unlink_entry(cs, c);
    cs->bytes -= c->bytes;
    cs->n--;
    free(c->tok);
    free(c->rs);
    free(c);
}

void kv_ckpt_clear(struct kv_ckpt_store *cs) {
    while (cs && cs->head) drop(cs, cs->head);
}

void kv_ckpt_destroy(struct kv_ckpt_store *cs) {
    if (!cs) return;
    kv_ckpt_clear(cs);
    free(cs);
}

static struct ckpt *find_exact(struct kv_ckpt_store *cs, uint64_t root, const dj_token *tok, size_t n) {
    for (struct ckpt *c = cs->head; c; c = c->next)
        if (c->root == root && c->n == n && memcmp(c->tok, tok, n * sizeof *tok) == 0) return c;
    return NULL;
}

bool kv_ckpt_put(struct kv_ckpt_store *cs, uint64_t root, const dj_token *tok, size_t n, const float *rs) {
    if (!cs || n == 0) return false;
    const size_t rs_bytes = cs->rs_floats * sizeof(float);
    struct ckpt *c = find_exact(cs, root, tok, n);
    if (c) {
        memcpy(c->rs, rs, rs_bytes);
        unlink_entry(cs, c);
        push_front(cs, c);
        return true;
    }
    size_t tok_bytes, bytes;
    if (dj_mul_overflow(n, sizeof *tok, &tok_bytes) || dj_add_overflow(tok_bytes, rs_bytes, &bytes) ||
        bytes > cs->max_bytes)
        return false;
    while (cs->tail && cs->bytes + bytes > cs->max_bytes) {
        drop(cs, cs->tail);
        cs->st.evicted++;
    }
    c = calloc(1, sizeof *c);
    if (c) {
        c->tok = malloc(tok_bytes);
        c->rs = malloc(rs_bytes);
    }
    if (!c || !c->tok || !c->rs) {
        if (c) {
            free(c->tok);
            free(c->rs);
        }
        free(c);
        return false;
    }
    memcpy(c->tok, tok, tok_bytes);
    memcpy(c->rs, rs, rs_bytes);
    c->root = root;
    c->n = n;
    c->bytes = bytes;
    push_front(cs, c);
    cs->bytes += bytes;
    cs->n++;
    cs->st.puts++;
    return true;
}

size_t kv_ckpt_find(struct kv_ckpt_store *cs, uint64_t root, const dj_token *tok, size_t n, size_t lo,
                    const float **rs) {
    if (!cs) return 0;
    struct ckpt *best = NULL;
    for (struct ckpt *c = cs->head; c; c = c->next) {
        if (c->root != root || c->n > n || c->n < lo || (best && c->n <= best->n)) continue;
        /* the last token first: prefixes of one conversation share their start */
        if (c->tok[c->n - 1] != tok[c->n - 1] || memcmp(c->tok, tok, c->n * sizeof *tok) != 0) continue;
        best = c;
    }
    if (!best) {
        cs->st.misses++;
        return 0;
    }
    unlink_entry(cs, best);
    push_front(cs, best);
    cs->st.hits++;
    *rs = best->rs;
    return best->n;
}

void kv_ckpt_get_stats(const struct kv_ckpt_store *cs, struct kv_ckpt_stats *out) {
    *out = cs->st;
    out->n = cs->n;
    out->bytes = cs->bytes;
    out->max_bytes = cs->max_bytes;
}
