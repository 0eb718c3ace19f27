/*
 * dedup.c — the dedup index of the block pool (spec §1.3, corrected by
 * DESIGN.md §1): sealed blocks by chain hash, verified on lookup by their
 * tokens and their parent block (id and generation), so a hit always means
 * "the same tokens after the same prefix" and the K/V are bitwise those a
 * recomputation would give.  A hash collision is a miss.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kv/pool_internal.h"

enum dj_status kv_pool_seal(struct kv_pool *pool, uint32_t id, uint64_t chain, uint32_t parent, const dj_token *tokens) {
    struct kv_block *b = &pool->b[id];
    DJ_ASSERT(b->in_use && !b->sealed && b->ref > 0);
    DJ_ASSERT(parent == KV_BLOCK_NONE || pool->b[parent].in_use);
    if (!b->tokens) {
        b->tokens = malloc((size_t)pool->p.block_size * sizeof *b->tokens);
        if (!b->tokens) return dj_fail(DJ_ERR_NOMEM, "KV cache: out of memory sealing a block");
    }
    memcpy(b->tokens, tokens, (size_t)pool->p.block_size * sizeof *tokens);
    b->chain = chain;
    b->parent = parent;
    b->parent_gen = parent == KV_BLOCK_NONE ? 0 : pool->b[parent].gen;
    b->sealed = true;
    uint32_t *head = &pool->buckets[chain & pool->bucket_mask];
    b->hnext = *head;
    *head = id;
    pool->n_sealed++;
    return DJ_OK;
}

void kv_index_remove(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    uint32_t *link = &pool->buckets[b->chain & pool->bucket_mask];
    while (*link != id) {
        DJ_ASSERT(*link != KV_BLOCK_NONE);
        link = &pool->b[*link].hnext;
    }
    *link = b->hnext;
    b->hnext = KV_BLOCK_NONE;
    b->sealed = false;
    pool->n_sealed--;
}

uint32_t kv_pool_lookup(struct kv_pool *pool, uint64_t chain, uint32_t parent, const dj_token *tokens) {
    const uint32_t parent_gen = parent == KV_BLOCK_NONE ? 0 : pool->b[parent].gen;
    for (uint32_t id = pool->buckets[chain & pool->bucket_mask]; id != KV_BLOCK_NONE; id = pool->b[id].hnext) {
        struct kv_block *b = &pool->b[id];
        if (b->chain != chain || b->parent != parent || b->parent_gen != parent_gen) continue;
        if (memcmp(b->tokens, tokens, (size_t)pool->p.block_size * sizeof *tokens) != 0) continue;
        b->last_turn = pool->turn;
        if (b->ref == 0) { /* most recently used now */
            kv_lru_remove(pool, id);
            kv_lru_push(pool, id);
        }
        return id;
    }
    return KV_BLOCK_NONE;
}

void kv_pool_next_turn(struct kv_pool *pool) { pool->turn++; }
uint64_t kv_pool_turn(const struct kv_pool *pool) { return pool->turn; }

uint32_t kv_pool_evict_stale(struct kv_pool *pool, uint64_t min_turn) {
    uint32_t n = 0;
    /* the LRU list is in order of last use, so stale blocks are at its head */
    while (pool->lru_head != KV_BLOCK_NONE && pool->b[pool->lru_head].last_turn < min_turn) {
        kv_pool_evict(pool, pool->lru_head);
        n++;
    }
    return n;
}
