/*
 * history.h — a session's context history (spec §1.4 "Context History"): the
 * token sequence its KV cache holds after the last turn, with the chain
 * hashes of that sequence's full blocks, so the next turn can be diffed
 * against it (kv/diff.h) and its blocks looked up by chain hash (kv/hash.h)
 * without rehashing what did not change.
 *
 *   tok:    [t0 … t(B-1)] [tB … t(2B-1)] … [partial]   n_tok tokens
 *   chain:  [ chain(0)  ] [  chain(1)   ] …             n_tok / B entries
 *
 * Invariant: chain[i] == kv_hash_chain(chain[i-1], tok + i·B, B) with
 * chain[-1] = root (KV_CHAIN_ROOT unless a cache salt set another), for every full block; the final partial block has
 * no entry.  Updating keeps the chain hashes of blocks that lie entirely in
 * the common prefix of the old and new sequence, and rehashes the rest.
 *
 * One kv_history per session; not thread-safe (a session runs one turn at a
 * time).  Owns its buffers: kv_history_init / kv_history_free.
 */
#ifndef DJ_KV_HISTORY_H
#define DJ_KV_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"
#include "kv/diff.h"

struct kv_history {
    dj_token *tok;       /* n_tok tokens (cap allocated) */
    size_t n_tok, cap;
    uint64_t *chain;     /* n_tok / block_size chain hashes (chain_cap allocated) */
    size_t chain_cap;
    size_t block_size;
    uint64_t n_records;  /* sequences recorded since init/clear; 0 = no previous turn */
    uint64_t root;       /* chain(-1): KV_CHAIN_ROOT, or a cache salt's root (kv_hash_salt_root) */
};

/* An empty history for blocks of block_size (> 0) tokens. */
void kv_history_init(struct kv_history *h, size_t block_size);
/* Frees the buffers; accepts NULL and a zeroed struct; leaves h empty (re-init to reuse). */
void kv_history_free(struct kv_history *h);

/* Replaces the stored sequence with tok[0, n) (the context at the end of a
 * turn).  tok may be the history's own buffer only as a prefix of it
 * (tok == kv_history_prev_tokens(h), n <= n_tok): that truncates.
 * DJ_ERR_NOMEM leaves h unchanged. */
enum dj_status kv_history_record(struct kv_history *h, const dj_token *tok, size_t n);

/* Appends tok[0, n) (generated tokens) to the stored sequence; counts as
 * recorded.  tok must not point into the history's buffer.  DJ_ERR_NOMEM
 * leaves h unchanged. */
enum dj_status kv_history_append(struct kv_history *h, const dj_token *tok, size_t n);

/* Drops the tokens past n (n <= n_tok), e.g. rejected draft tokens. */
void kv_history_truncate(struct kv_history *h, size_t n);

/* Sets the chain root (empty history only: the hashes of held blocks would be stale). */
void kv_history_set_root(struct kv_history *h, uint64_t root);

/* Forgets everything (has_prev becomes false); keeps the buffers. */
void kv_history_clear(struct kv_history *h);

bool kv_history_has_prev(const struct kv_history *h);
const dj_token *kv_history_prev_tokens(const struct kv_history *h); /* valid until the next update */
size_t kv_history_prev_n_tokens(const struct kv_history *h);

/* Chain hashes of the stored sequence's full blocks; *n_blocks = n_tok / block_size. */
const uint64_t *kv_history_chain(const struct kv_history *h, size_t *n_blocks);

/* diff_compute(stored sequence, curr) with the history's block size. */
enum dj_status kv_history_diff(const struct kv_history *h, const dj_token *curr, size_t n_curr,
                               struct diff_result *out);

#endif
