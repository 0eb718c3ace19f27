/*
 * pool.h — the paged KV cache: a pool of fixed-size blocks of K and V rows,
 * reference-counted, with a dedup index of sealed blocks by chain hash and
 * LRU eviction of the unpinned ones; and per-sequence block tables (kv_seq).
 *
 * A block holds block_size consecutive positions of one sequence, for every
 * layer:
 *
 *   data: K[n_layer][block_size][k row] | V[n_layer][block_size][v row]
 *   K-only (k_only):  K[n_layer][block_size][k row]
 *
 * where a row is n_embd_kv elements of the pool's K (V) type: f32, f16, bf16,
 * q8_0 or q4_0 (-ctk/-ctv), a row's bytes as ggml lays them out.  A K-only
 * pool (Multi-head Latent Attention: the value is read from the K row, whose
 * first kv_lora elements are the latent c) has no V rows at all: its V row
 * bytes are 0, kv_pool_v and kv_seq_v return NULL and type_v is not used.
 *
 * Life of a block:
 *
 *   alloc (ref 1, writable) --rows written--> full --seal(chain, parent, tokens)-->
 *   sealed: immutable, findable by kv_pool_lookup; other sequences ref it
 *   ref 0 and sealed: cached (LRU list), evicted only under memory pressure
 *   ref 0 and not sealed: freed at once
 *
 * A block's K/V depend on every earlier token (DESIGN.md §1), so a sealed
 * block is keyed by its chain hash and found only when the tokens AND the
 * parent block (id and generation) match: a hash collision or a parent that
 * was evicted and recomputed elsewhere is a miss, never a wrong reuse.
 *
 * Sequences (struct kv_seq) map positions to blocks: position p lives in
 * table[p / block_size] at row p % block_size.  A sequence pins (refs) every
 * block of its table.  Writing into a block that is sealed or shared copies
 * it first (copy on write), so a sequence never changes K/V another one reads.
 *
 * Not thread-safe: one engine thread drives the pool; the forward pass only
 * reads and writes rows of blocks the sequence already holds.
 */
#ifndef DJ_KV_POOL_H
#define DJ_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

#define KV_BLOCK_NONE UINT32_MAX

struct kv_pool_params {
    uint32_t n_layer;
    uint32_t n_embd_kv;  /* n_head_kv * head_dim */
    uint32_t block_size; /* positions per block (LLAMA_OPT_BLOCK_SIZE, default 64) */
    uint32_t max_blocks; /* memory budget in blocks */
    uint32_t type_k;     /* element type of K rows (enum dj_ggml_type; 0 = f32) */
    uint32_t type_v;     /* element type of V rows (unused when k_only) */
    bool k_only;         /* no V rows: a block is n_layer * block_size K rows (MLA) */
    size_t rs_floats;    /* floats of one sequence's recurrent state (hybrid models: kv_seq.rs); 0 = none */
};

/* The K/V type of engines and contexts unless told otherwise (-ctk/-ctv). */
#define DJ_KV_TYPE_DEFAULT 1 /* f16 (DJ_TYPE_F16), as llama.cpp; docs/CONFIG.md says why */

/* The type engine_default_params and ctx_default_params give K and V:
 * DJ_KV_TYPE_DEFAULT, or DJ_KV_TYPE=f16|bf16|q8_0|q4_0|f32 from the environment (for
 * tests and comparisons: CTest runs the invariant tests once per type with it; a
 * name that is not a K/V type is a warning and the default).  Read once. */
uint32_t kv_type_default(void);
/* The K/V type named (case-insensitive), or -1 with an error message. */
int kv_type_parse(const char *name);

/* True for the K/V element types a pool can hold: f32, f16, bf16, q8_0, q4_0. */
bool kv_type_supported(uint32_t type);
/* K and V cache types for a model of this head size: DJ_OK, or DJ_ERR_UNSUPPORTED
 * with a message naming the type (not one a pool can hold, or a quantized type whose
 * blocks would straddle two heads). */
enum dj_status kv_type_check(uint32_t type_k, uint32_t type_v, uint32_t head_dim);
/* Bytes of a row of n elements of a K/V type (n a multiple of its block). */
size_t kv_row_bytes(uint32_t type, size_t n);

struct kv_pool_stats {
    uint32_t capacity;   /* max_blocks */
    uint32_t allocated;  /* blocks holding data (pinned + cached) */
    uint32_t pinned;     /* ref > 0 */
    uint32_t sealed;     /* in the dedup index */
    uint64_t evicted;    /* blocks evicted so far */
    uint64_t cow_copies; /* copy-on-write copies so far */
    size_t block_bytes;  /* bytes of K+V per block (K only in a k_only pool) */
};

struct kv_pool;

enum dj_status kv_pool_create(const struct kv_pool_params *p, struct kv_pool **out);
void kv_pool_destroy(struct kv_pool *pool); /* accepts NULL */
const struct kv_pool_params *kv_pool_params(const struct kv_pool *pool);
void kv_pool_get_stats(const struct kv_pool *pool, struct kv_pool_stats *out);

/* A fresh writable block with ref 1 and no rows.  At capacity, evicts the
 * least recently used cached block; DJ_ERR_NOMEM (with a message giving the
 * budget) if every block is pinned. */
enum dj_status kv_pool_alloc(struct kv_pool *pool, uint32_t *out);
void kv_pool_ref(struct kv_pool *pool, uint32_t id);
void kv_pool_unref(struct kv_pool *pool, uint32_t id);
uint32_t kv_pool_refcount(const struct kv_pool *pool, uint32_t id);
bool kv_pool_is_sealed(const struct kv_pool *pool, uint32_t id);

/* Rows of layer il: [block_size] rows of kv_pool_k_row_bytes (v: _v_) bytes.
 * kv_pool_v is NULL (and kv_pool_v_row_bytes 0) in a k_only pool. */
void *kv_pool_k(const struct kv_pool *pool, uint32_t id, uint32_t il);
void *kv_pool_v(const struct kv_pool *pool, uint32_t id, uint32_t il);
size_t kv_pool_k_row_bytes(const struct kv_pool *pool);
size_t kv_pool_v_row_bytes(const struct kv_pool *pool);
/* The block's generation: changes whenever the id is freed, so (id, generation) names one
 * incarnation of a block (a device's mirror of the pool knows when to upload it again). */
uint32_t kv_pool_gen(const struct kv_pool *pool, uint32_t id);
/* A block's whole K and V (block_bytes of kv_pool_get_stats), for copies to and from disk. */
void *kv_pool_data(const struct kv_pool *pool, uint32_t id);

/* ---- dedup (kv/dedup.c) --------------------------------------------------- */

/* Makes a full block immutable and findable: chain = its chain hash, parent
 * = the block before it in the sequence (KV_BLOCK_NONE for the first block),
 * tokens = its block_size tokens (copied, for verification). */
enum dj_status kv_pool_seal(struct kv_pool *pool, uint32_t id, uint64_t chain, uint32_t parent, const dj_token *tokens);
/* A sealed block with this chain hash, this parent and these tokens, or
 * KV_BLOCK_NONE.  Does not ref it; marks it used this turn. */
uint32_t kv_pool_lookup(struct kv_pool *pool, uint64_t chain, uint32_t parent, const dj_token *tokens);
/* Turn counter for LRU (the spec's turn_counter). */
void kv_pool_next_turn(struct kv_pool *pool);
uint64_t kv_pool_turn(const struct kv_pool *pool);
/* Evicts cached (unpinned, sealed) blocks last used before min_turn; returns how many. */
uint32_t kv_pool_evict_stale(struct kv_pool *pool, uint64_t min_turn);

/* ---- sequences ------------------------------------------------------------ */

/* Recurrent state (a pool with rs_floats > 0: hybrid models).  A recurrent layer
 * has no rows per position: its state after position p depends on every token up
 * to p and is kept once per sequence, in rs.  rs_pos says which position it is at:
 * rs holds the state after the first rs_pos positions, valid for the sequence only
 * while rs_pos == n_pos.  Truncating below rs_pos or appending a pool block makes it
 * unknown (KV_RS_NONE) until kv_seq_rs_set restores one (a checkpoint) or the
 * sequence is truncated to 0 (the zero state).  The forward pass reads and writes rs
 * and sets rs_pos after the positions it ran. */
#define KV_RS_NONE SIZE_MAX

struct kv_attn;

struct kv_seq {
    struct kv_pool *pool;
    uint32_t *table;  /* physical block of each logical block */
    size_t n_blocks;  /* entries in table */
    size_t cap;
    size_t n_pos;     /* positions filled */
    float *rs;        /* (pool rs_floats) owned, allocated (zeros) by kv_seq_prepare; NULL before */
    size_t rs_pos;    /* positions rs has absorbed, or KV_RS_NONE */
    struct kv_attn *attn; /* attention statistics and skip set (kv/attn_prune.h), not owned; NULL: none */
};

void kv_seq_init(struct kv_seq *s, struct kv_pool *pool);
void kv_seq_free(struct kv_seq *s); /* unrefs every block */
/* dst (uninitialized) = a second table of the same blocks (each ref'd once
 * more): a snapshot of src that later writes to src do not change (they copy
 * on write).  DJ_ERR_NOMEM leaves dst empty. */
enum dj_status kv_seq_clone(struct kv_seq *dst, const struct kv_seq *src);
/* Makes positions [n_pos, n_pos + n) writable: allocates blocks, copies a
 * shared or sealed block that would be written (copy on write).  Does not
 * advance n_pos (kv_seq_advance does, once the rows are written). */
enum dj_status kv_seq_prepare(struct kv_seq *s, size_t n);
void kv_seq_advance(struct kv_seq *s, size_t n);
/* Forgets positions >= n_pos (n_pos <= s->n_pos), unreffing whole blocks past it. */
void kv_seq_truncate(struct kv_seq *s, size_t n_pos);
/* Appends an existing full block (from kv_pool_lookup) at a block boundary:
 * refs it and advances n_pos by block_size. */
enum dj_status kv_seq_append_block(struct kv_seq *s, uint32_t id);
/* Points logical block b at block id instead (canonicalization: an identical
 * sealed block replaces the sequence's own copy): refs id, unrefs the old. */
void kv_seq_replace_block(struct kv_seq *s, size_t b, uint32_t id);

/* Floats of a sequence's recurrent state (the pool's rs_floats; 0: none). */
size_t kv_seq_rs_floats(const struct kv_seq *s);
/* True when the sequence has no recurrent state or its state is at n_pos. */
bool kv_seq_rs_ok(const struct kv_seq *s);
/* Makes rs the state at n_pos: a copy of rs_floats floats (a checkpoint).  DJ_ERR_NOMEM
 * if the state could not be allocated. */
enum dj_status kv_seq_rs_set(struct kv_seq *s, const float *rs);

/* The K (V) row of position pos at layer il, in the pool's K (V) type. */
static inline void *kv_seq_k(const struct kv_seq *s, uint32_t il, size_t pos, uint32_t block_size) {
    return (uint8_t *)kv_pool_k(s->pool, s->table[pos / block_size], il) + (pos % block_size) * kv_pool_k_row_bytes(s->pool);
}
/* NULL in a k_only pool. */
static inline void *kv_seq_v(const struct kv_seq *s, uint32_t il, size_t pos, uint32_t block_size) {
    uint8_t *v = kv_pool_v(s->pool, s->table[pos / block_size], il);
    return v ? v + (pos % block_size) * kv_pool_v_row_bytes(s->pool) : NULL;
}

#endif
