/*
 * history.c — a session's previous token sequence and its chain hashes
 * (see history.h for the layout and the invariant).  Updates cost one memcmp
 * over the common prefix plus hashing of the blocks from the first changed
 * one on; buffers grow geometrically and are never shrunk.
 */
#include "kv/history.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "kv/hash.h"

void kv_history_init(struct kv_history *h, size_t block_size) {
    DJ_ASSERT(block_size > 0);
    memset(h, 0, sizeof *h);
    h->block_size = block_size;
    h->root = KV_CHAIN_ROOT;
}

void kv_history_set_root(struct kv_history *h, uint64_t root) {
    DJ_ASSERT(h->n_tok == 0);
    h->root = root;
}

void kv_history_free(struct kv_history *h) {
    if (!h) return;
    free(h->tok);
    free(h->chain);
    size_t bs = h->block_size;
    uint64_t root = h->root;
    memset(h, 0, sizeof *h);
    h->block_size = bs;
    h->root = root;
}

/* Grows the buffers to hold n tokens; on failure nothing observable changes. */
static enum dj_status reserve(struct kv_history *h, size_t n) {
    if (n > h->cap) {
        size_t cap = h->cap > 1024 ? h->cap : 1024, bytes;
        while (cap < n)
            if (dj_mul_overflow(cap, 2, &cap)) return dj_fail(DJ_ERR_NOMEM, "history: %zu tokens: too many", n);
        if (dj_mul_overflow(cap, sizeof *h->tok, &bytes))
            return dj_fail(DJ_ERR_NOMEM, "history: %zu tokens: too many", n);
        dj_token *t = realloc(h->tok, bytes);
        if (!t) return dj_fail(DJ_ERR_NOMEM, "history: out of memory for %zu tokens", n);
        h->tok = t;
        h->cap = cap;
    }
    size_t nb = n / h->block_size;
    if (nb > h->chain_cap) {
        size_t cap = h->chain_cap > 64 ? h->chain_cap : 64, bytes;
        while (cap < nb) cap *= 2; /* nb ≤ n/1, and n·4 bytes fit: no overflow */
        if (dj_mul_overflow(cap, sizeof *h->chain, &bytes))
            return dj_fail(DJ_ERR_NOMEM, "history: %zu blocks: too many", nb);
        uint64_t *c = realloc(h->chain, bytes);
        if (!c) return dj_fail(DJ_ERR_NOMEM, "history: out of memory for %zu blocks", nb);
        h->chain = c;
        h->chain_cap = cap;
    }
    return DJ_OK;
}

/* Recomputes chain hashes of the full blocks from block `from` on. */
static void rehash_from(struct kv_history *h, size_t from) {
    size_t bs = h->block_size, nb = h->n_tok / bs;
    uint64_t parent = from ? h->chain[from - 1] : h->root;
    for (size_t b = from; b < nb; b++) {
        parent = kv_hash_chain(parent, h->tok + b * bs, bs);
        h->chain[b] = parent;
    }
}

enum dj_status kv_history_record(struct kv_history *h, const dj_token *tok, size_t n) {
    DJ_ASSERT(n == 0 || tok);
    if (n && h->tok && tok >= h->tok && tok < h->tok + h->cap) {
        /* Its own buffer: only "keep the first n" makes sense. */
        DJ_ASSERT(tok == h->tok && n <= h->n_tok);
        kv_history_truncate(h, n);
        h->n_records++;
        return DJ_OK;
    }
    enum dj_status st = reserve(h, n);
    if (st != DJ_OK) return st;
    size_t p = h->n_records ? diff_common_prefix(h->tok, h->n_tok, tok, n) : 0;
    if (n > p) memcpy(h->tok + p, tok + p, (n - p) * sizeof *tok);
    h->n_tok = n;
    rehash_from(h, p / h->block_size); /* blocks wholly inside the common prefix keep their hashes */
    h->n_records++;
    return DJ_OK;
}

enum dj_status kv_history_append(struct kv_history *h, const dj_token *tok, size_t n) {
    DJ_ASSERT(n == 0 || tok);
    DJ_ASSERT(n == 0 || !h->tok || tok + n <= h->tok || tok >= h->tok + h->cap);
    size_t total;
    if (dj_add_overflow(h->n_tok, n, &total)) return dj_fail(DJ_ERR_NOMEM, "history: too many tokens");
    enum dj_status st = reserve(h, total);
    if (st != DJ_OK) return st;
    size_t from = h->n_tok / h->block_size; /* the first block not yet complete */
    if (n) memcpy(h->tok + h->n_tok, tok, n * sizeof *tok);
    h->n_tok = total;
    rehash_from(h, from);
    if (h->n_records == 0) h->n_records = 1;
    return DJ_OK;
}

void kv_history_truncate(struct kv_history *h, size_t n) {
    DJ_ASSERT(n <= h->n_tok);
    h->n_tok = n; /* chain[0, n/B) is still valid: those blocks are unchanged */
}

void kv_history_clear(struct kv_history *h) {
    h->n_tok = 0;
    h->n_records = 0;
}

bool kv_history_has_prev(const struct kv_history *h) { return h->n_records > 0; }

const dj_token *kv_history_prev_tokens(const struct kv_history *h) { return h->tok; }

size_t kv_history_prev_n_tokens(const struct kv_history *h) { return h->n_tok; }

const uint64_t *kv_history_chain(const struct kv_history *h, size_t *n_blocks) {
    *n_blocks = h->n_tok / h->block_size;
    return h->chain;
}

enum dj_status kv_history_diff(const struct kv_history *h, const dj_token *curr, size_t n_curr,
                               struct diff_result *out) {
    return diff_compute(h->tok, h->n_tok, curr, n_curr, h->block_size, out);
}
