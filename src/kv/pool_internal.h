/*
 * pool_internal.h — the block pool's private layout, shared by kv/pool.c
 * (storage, references, eviction, sequences) and kv/dedup.c (the index).
 *
 *   blocks[max_blocks]      one entry per physical block id
 *   free_ids[n_free]        ids holding nothing (stack)
 *   LRU list (lru_head ..)  sealed blocks with ref 0, least recently used first
 *   buckets[chain & mask]   dedup index: singly linked through hnext
 */
#ifndef DJ_KV_POOL_INTERNAL_H
#define DJ_KV_POOL_INTERNAL_H

#include "kv/pool.h"

struct kv_block {
    uint8_t *data;      /* block_bytes: K rows of every layer, then V rows (none when k_only); kept for reuse */
    dj_token *tokens;   /* block_size tokens while sealed */
    uint64_t chain;     /* chain hash while sealed */
    uint64_t last_turn; /* pool turn of the last use */
    uint32_t ref;
    uint32_t gen;       /* bumped whenever the id is freed: identifies this incarnation */
    uint32_t parent, parent_gen;
    uint32_t lru_prev, lru_next;
    uint32_t hnext;
    bool in_use;        /* pinned or cached */
    bool sealed;
};

/* Block memory comes from slabs: anonymous mappings of several blocks with transparent
 * huge pages asked, carved in order and never returned before kv_pool_destroy.  With one
 * malloc per block, a fresh process touching its KV (a restore from disk, a first prefill)
 * took a page fault every 4 KiB — in a VM each one a trap: restoring 128 MiB of blocks cost
 * ~0.5 s of faults. */
struct kv_slab {
    void *mem;
    size_t bytes, used;
};

struct kv_pool {
    struct kv_pool_params p;
    size_t k_row, v_row;          /* bytes of a K (V) row; v_row 0 when k_only */
    size_t block_bytes;           /* n_layer * block_size * (k_row + v_row) */
    size_t block_stride;          /* bytes a block takes in a slab (64-byte aligned) */
    struct kv_slab *slabs;
    size_t n_slabs, cap_slabs;
    uint32_t n_carved;            /* blocks given memory so far */
    struct kv_block *b;
    uint32_t *free_ids;
    uint32_t n_free;
    uint32_t lru_head, lru_tail;
    uint32_t *buckets;
    uint32_t bucket_mask;
    uint64_t turn;
    uint32_t n_pinned, n_sealed, n_in_use;
    uint64_t n_evicted, n_cow;
};

/* LRU list maintenance and eviction (pool.c); index maintenance (dedup.c). */
void kv_lru_remove(struct kv_pool *pool, uint32_t id);
void kv_lru_push(struct kv_pool *pool, uint32_t id); /* as most recently used */
void kv_pool_evict(struct kv_pool *pool, uint32_t id);
void kv_index_remove(struct kv_pool *pool, uint32_t id);

#endif
