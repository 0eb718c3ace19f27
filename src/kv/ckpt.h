/*
 * ckpt.h — recurrent-state checkpoints (hybrid models: Qwen3.5's Gated DeltaNet
 * layers; DESIGN.md §1, "recurrent layers").
 *
 * A recurrent layer keeps no row per position: its state after position p depends
 * on every token up to p, so a prompt can reuse it only where a copy of it was
 * kept.  A checkpoint is that copy: the whole recurrent state of a sequence (every
 * recurrent layer's conv and delta state, kv_seq.rs) after the tokens tok[0, n) of
 * one cache namespace (the chain root: KV_CHAIN_ROOT, or a cache_salt's root).
 *
 * The key is the token prefix itself, stored with the checkpoint and compared in
 * full on lookup: a checkpoint is found only for the exact tokens it was computed
 * from, so a lookup can miss but never return the state of another prefix.
 *
 * Memory is bounded (max_bytes, counting the state and the token copy): a put
 * that does not fit evicts the least recently used checkpoints first; one larger
 * than the whole budget is not kept.  Not thread-safe: the engine thread owns it.
 */
#ifndef DJ_KV_CKPT_H
#define DJ_KV_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

struct kv_ckpt_store;

struct kv_ckpt_stats {
    size_t n;            /* checkpoints held */
    size_t bytes;        /* their bytes (states + token copies) */
    size_t max_bytes;
    uint64_t puts;       /* checkpoints stored (a put of a held key refreshes it: not counted) */
    uint64_t hits;       /* lookups that found one */
    uint64_t misses;
    uint64_t evicted;    /* dropped to make room */
};

/* A store for states of rs_floats floats (> 0), at most max_bytes (> 0). */
enum dj_status kv_ckpt_create(size_t rs_floats, size_t max_bytes, struct kv_ckpt_store **out);
void kv_ckpt_destroy(struct kv_ckpt_store *cs); /* accepts NULL */

/* Keeps a copy of rs (rs_floats floats): the state after tok[0, n) (n > 0) in
 * namespace root.  A held checkpoint of the same key is refreshed (most recently
 * used; the state is the same bits by construction, and is overwritten).  Returns
 * false when it is not kept (larger than the budget, or no memory): a checkpoint
 * is an optimization, its absence only costs recomputation. */
bool kv_ckpt_put(struct kv_ckpt_store *cs, uint64_t root, const dj_token *tok, size_t n, const float *rs);

/* The checkpoint of namespace root with the longest token prefix tok[0, m) with
 * lo <= m <= n: returns m and sets *rs to its state (valid until the next put or
 * destroy), or returns 0 (and leaves *rs) when there is none.  Marks it used. */
size_t kv_ckpt_find(struct kv_ckpt_store *cs, uint64_t root, const dj_token *tok, size_t n, size_t lo,
                    const float **rs);

void kv_ckpt_get_stats(const struct kv_ckpt_store *cs, struct kv_ckpt_stats *out);
/* Drops every checkpoint. */
void kv_ckpt_clear(struct kv_ckpt_store *cs);

#endif
