/*
 * hash.h — token block hashing (spec §1.2) and the chain hash that keys KV
 * blocks (DESIGN.md §1).  Knows nothing of models.
 *
 * Every hash here is FNV-1a 64 (core/hash.h) over a byte string defined
 * below, so values are the same on every platform and can be written to disk:
 *
 *   token        a dj_token t is fed as the 4 bytes of (uint32_t)t, little-endian
 *                (t = -1 → ff ff ff ff).
 *   block hash   kv_hash_block(t, n)       = FNV-1a( LE32(t[0]) ‖ … ‖ LE32(t[n-1]) )
 *                position-independent: the same tokens anywhere hash the same.
 *   pos hash     kv_hash_block_pos(t, n, p) = FNV-1a( LE64((uint64_t)p) ‖ LE32(t[0]) ‖ … )
 *                the same tokens at another start position hash differently.
 *   chain hash   chain(-1) = 0xcbf29ce484222325 (the FNV-1a offset basis)
 *                chain(i)  = FNV-1a( LE64(chain(i-1)) ‖ LE32 tokens of block i )
 *                          = kv_hash_chain(chain(i-1), block i)
 *                with blocks [i·B, (i+1)·B) for the block size B.
 *
 *   "FNV-1a(bytes)" always starts from the offset basis 0xcbf29ce484222325 and,
 *   per byte, does h ^= byte; h *= 0x100000001b3 (mod 2^64).
 *
 * Why a chain: K/V at layer ≥ 1 depend on every earlier token, so a block's K/V
 * can be reused only where its whole prefix matches.  chain(i) covers blocks
 * 0..i, so equal chain hashes mean (up to a 2^-64 collision) equal prefixes; the
 * pool still verifies tokens on every hit (DESIGN.md §1, spec §1.3).  A final
 * partial block is hashed with its actual tokens; only full blocks are sealed
 * into the pool, so a partial block's chain hash is never a pool key.
 */
#ifndef DJ_KV_HASH_H
#define DJ_KV_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"
#include "deja.h"

#define KV_CHAIN_ROOT DJ_FNV_OFFSET /* chain(-1): the parent of block 0 */

/* FNV-1a over n tokens (position-independent). kv_hash_block(NULL, 0) = the offset basis. */
uint64_t kv_hash_block(const dj_token *tok, size_t n);

/* FNV-1a over the start position (8 bytes LE, two's complement) then the tokens. */
uint64_t kv_hash_block_pos(const dj_token *tok, size_t n, int64_t pos_start);

/* The chain root of a cache namespace (vLLM's cache_salt): FNV-1a over "deja cache_salt\0" then
 * salt[0, n).  Blocks chained from another root never match the shared root's (nor each
 * other's, up to a 2^-64 collision), so tenants with different salts share no KV. */
uint64_t kv_hash_salt_root(const char *salt, size_t n);

/* chain hash of a block whose parent chain hash is `parent` (KV_CHAIN_ROOT for block 0). */
uint64_t kv_hash_chain(uint64_t parent, const dj_token *tok, size_t n);

/* Chain hashes of the first n_out blocks of tok[0..n_tok): out[i] = chain(i) over
 * blocks of block_size tokens; a final partial block counts when n_out reaches it.
 * Returns the number of hashes written: min(n_out, ceil(n_tok / block_size)).
 * block_size > 0. */
size_t kv_hash_chain_blocks(const dj_token *tok, size_t n_tok, size_t block_size, uint64_t *out, size_t n_out);

/* Incremental FNV-1a over tokens: feeding t[0..n) in any number of pieces and
 * finalizing gives kv_hash_block(t, n).  A plain value: copy it to fork a prefix. */
struct kv_hasher {
    uint64_t state;
};

void kv_hasher_init(struct kv_hasher *h); /* same as reset */
void kv_hasher_reset(struct kv_hasher *h);
void kv_hasher_feed(struct kv_hasher *h, dj_token tok);
void kv_hasher_feed_n(struct kv_hasher *h, const dj_token *tok, size_t n);
uint64_t kv_hasher_finalize(const struct kv_hasher *h);

#endif
