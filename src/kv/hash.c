/*
 * hash.c — FNV-1a 64 over token blocks, position hashes and chain hashes; the
 * byte strings hashed are defined in hash.h.  No SIMD: hashing a block costs
 * 4·B multiplies, nothing next to computing its K/V (spec §1.2).
 */
#include "kv/hash.h"

#include "core/status.h"

static uint64_t feed_tokens(uint64_t h, const dj_token *tok, size_t n) {
    for (size_t i = 0; i < n; i++) h = dj_fnv1a_u32(h, (uint32_t)tok[i]);
    return h;
}

static uint64_t feed_u64(uint64_t h, uint64_t v) {
    h = dj_fnv1a_u32(h, (uint32_t)(v & 0xffffffffu));
    return dj_fnv1a_u32(h, (uint32_t)(v >> 32));
}

uint64_t kv_hash_block(const dj_token *tok, size_t n) { return feed_tokens(DJ_FNV_OFFSET, tok, n); }

uint64_t kv_hash_block_pos(const dj_token *tok, size_t n, int64_t pos_start) {
    return feed_tokens(feed_u64(DJ_FNV_OFFSET, (uint64_t)pos_start), tok, n);
}

uint64_t kv_hash_salt_root(const char *salt, size_t n) {
    static const char tag[] = "deja cache_salt"; /* with its NUL */
    return dj_fnv1a(dj_fnv1a(DJ_FNV_OFFSET, tag, sizeof tag), salt, n);
}

uint64_t kv_hash_chain(uint64_t parent, const dj_token *tok, size_t n) {
    return feed_tokens(feed_u64(DJ_FNV_OFFSET, parent), tok, n);
}

size_t kv_hash_chain_blocks(const dj_token *tok, size_t n_tok, size_t block_size, uint64_t *out, size_t n_out) {
    DJ_ASSERT(block_size > 0);
    uint64_t parent = KV_CHAIN_ROOT;
    size_t i = 0, start = 0;
    while (start < n_tok && i < n_out) {
        size_t left = n_tok - start, n = left < block_size ? left : block_size;
        parent = kv_hash_chain(parent, tok + start, n);
        out[i++] = parent;
        start += n; /* never past n_tok, so no overflow whatever block_size is */
    }
    return i;
}

void kv_hasher_init(struct kv_hasher *h) { h->state = DJ_FNV_OFFSET; }
void kv_hasher_reset(struct kv_hasher *h) { h->state = DJ_FNV_OFFSET; }
void kv_hasher_feed(struct kv_hasher *h, dj_token tok) { h->state = dj_fnv1a_u32(h->state, (uint32_t)tok); }
void kv_hasher_feed_n(struct kv_hasher *h, const dj_token *tok, size_t n) { h->state = feed_tokens(h->state, tok, n); }
uint64_t kv_hasher_finalize(const struct kv_hasher *h) { return h->state; }
