/*
 * test_kv_pool.c — the paged KV block pool and block tables:
 *  - sequences allocate blocks as positions grow, truncation unrefs whole
 *    blocks, and the accounting returns to zero when sequences end;
 *  - sealed blocks are found by chain hash only with the same tokens and the
 *    same parent (id and generation); a collision or another parent misses;
 *  - writing into a sealed or shared block copies it (copy on write) and the
 *    original rows stay as they were;
 *  - at the budget, the least recently used unpinned sealed block is
 *    evicted; when everything is pinned, allocation fails with a message;
 *  - evict_stale drops cached blocks older than a turn;
 *  - a K-only pool (MLA): no V rows (kv_pool_v / kv_seq_v NULL, V row bytes 0),
 *    blocks of K rows only, an unsupported V type not checked, copy on write
 *    keeps every K row of a shared block; a quantized K needs its block to
 *    divide the row.
 */
#include "core/ggml_type.h"
#include "kv/hash.h"
#include "kv/pool.h"
#include "test.h"

enum { BS = 4, NL = 2, W = 3 };

/* rows of this test's f32 pools */
static float *krow(const struct kv_seq *s, uint32_t il, size_t p) { return kv_seq_k(s, il, p, BS); }
static float *vrow(const struct kv_seq *s, uint32_t il, size_t p) { return kv_seq_v(s, il, p, BS); }

static void fill(struct kv_seq *s, size_t from, size_t to, float base) {
    for (size_t p = from; p < to; p++)
        for (uint32_t il = 0; il < NL; il++)
            for (int i = 0; i < W; i++) {
                krow(s, il, p)[i] = base + (float)(p * 100 + il * 10 + (size_t)i);
                vrow(s, il, p)[i] = -(base + (float)(p * 100 + il * 10 + (size_t)i));
            }
}

static bool rows_are(const struct kv_seq *s, size_t from, size_t to, float base) {
    for (size_t p = from; p < to; p++)
        for (uint32_t il = 0; il < NL; il++)
            for (int i = 0; i < W; i++)
                if (krow(s, il, p)[i] != base + (float)(p * 100 + il * 10 + (size_t)i) ||
                    vrow(s, il, p)[i] != -(base + (float)(p * 100 + il * 10 + (size_t)i)))
                    return false;
    return true;
}

/* Seals every full block of s not sealed yet, chaining hashes over toks. */
static void seal_all(struct kv_pool *pool, struct kv_seq *s, const dj_token *toks) {
    uint64_t chain = KV_CHAIN_ROOT;
    for (size_t b = 0; b < s->n_pos / BS; b++) {
        chain = kv_hash_chain(chain, toks + b * BS, BS);
        if (!kv_pool_is_sealed(pool, s->table[b]))
            CHECK(kv_pool_seal(pool, s->table[b], chain, b ? s->table[b - 1] : KV_BLOCK_NONE, toks + b * BS) == DJ_OK);
    }
}

int main(void) {
    struct kv_pool_params pp = {NL, W, BS, 8, DJ_TYPE_F32, DJ_TYPE_F32};
    struct kv_pool *pool = NULL;
    CHECK(kv_pool_create(&pp, &pool) == DJ_OK);
    struct kv_pool_stats st;
    struct kv_pool_params bad = {NL, W, 0, 8, DJ_TYPE_F32, DJ_TYPE_F32};
    struct kv_pool *nope = NULL;
    CHECK(kv_pool_create(&bad, &nope) == DJ_ERR_INVALID && nope == NULL && strstr(dj_last_error(), "block size 0"));

    dj_token toks[32];
    for (int i = 0; i < 32; i++) toks[i] = 1000 + i;

    /* growth and rows */
    struct kv_seq a;
    kv_seq_init(&a, pool);
    CHECK(kv_seq_prepare(&a, 10) == DJ_OK);
    CHECK(a.n_blocks == 3 && a.n_pos == 0);
    fill(&a, 0, 10, 0);
    kv_seq_advance(&a, 10);
    CHECK(rows_are(&a, 0, 10, 0));
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 3 && st.pinned == 3 && st.sealed == 0);

    /* seal the two full blocks; a second sequence with the same prefix finds them */
    seal_all(pool, &a, toks);
    kv_pool_get_stats(pool, &st);
    CHECK(st.sealed == 2);
    uint64_t c0 = kv_hash_chain(KV_CHAIN_ROOT, toks, BS), c1 = kv_hash_chain(c0, toks + BS, BS);
    uint32_t b0 = kv_pool_lookup(pool, c0, KV_BLOCK_NONE, toks);
    CHECK(b0 == a.table[0]);
    uint32_t b1 = kv_pool_lookup(pool, c1, b0, toks + BS);
    CHECK(b1 == a.table[1]);
    /* same tokens, wrong parent: miss; collision (same hash, other tokens): miss */
    CHECK(kv_pool_lookup(pool, c1, KV_BLOCK_NONE, toks + BS) == KV_BLOCK_NONE);
    dj_token other[BS] = {1, 2, 3, 4};
    CHECK(kv_pool_lookup(pool, c0, KV_BLOCK_NONE, other) == KV_BLOCK_NONE);

    struct kv_seq b;
    kv_seq_init(&b, pool);
    CHECK(kv_seq_append_block(&b, b0) == DJ_OK && kv_seq_append_block(&b, b1) == DJ_OK);
    CHECK(b.n_pos == 8 && kv_pool_refcount(pool, b0) == 2);
    CHECK(rows_are(&b, 0, 8, 0));
    /* b diverges after 6 positions: truncating into block 1 and writing copies it */
    kv_seq_truncate(&b, 6);
    CHECK(kv_seq_prepare(&b, 3) == DJ_OK);
    CHECK(b.table[1] != b1 && b.table[0] == b0);
    fill(&b, 6, 9, 5000);
    kv_seq_advance(&b, 3);
    CHECK(rows_are(&b, 0, 6, 0) && rows_are(&b, 6, 9, 5000));
    CHECK(rows_are(&a, 0, 10, 0)); /* a's rows untouched */
    kv_pool_get_stats(pool, &st);
    CHECK(st.cow_copies == 1);

    /* budget: 8 blocks.  a: 3, b: 3 (b0 shared) → 5 distinct in use */
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 5 && st.pinned == 5);
    kv_seq_free(&b);
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 3 && st.pinned == 3); /* b's private blocks freed, shared ones still a's */
    kv_seq_free(&a);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 0 && st.allocated == 2 && st.sealed == 2); /* sealed blocks stay cached */

    /* cached blocks are reused by a later sequence, then evicted under pressure, LRU first */
    struct kv_seq c;
    kv_seq_init(&c, pool);
    CHECK(kv_seq_append_block(&c, kv_pool_lookup(pool, c0, KV_BLOCK_NONE, toks)) == DJ_OK);
    CHECK(rows_are(&c, 0, 4, 0));
    CHECK(kv_seq_prepare(&c, 28) == DJ_OK); /* 4 + 28 = 32 positions = 8 blocks: evicts cached block 1 */
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 8 && st.pinned == 8 && st.evicted == 1 && st.sealed == 1);
    CHECK(kv_pool_lookup(pool, c1, b0, toks + BS) == KV_BLOCK_NONE);
    /* everything pinned: a clear failure, nothing changed */
    struct kv_seq d;
    kv_seq_init(&d, pool);
    CHECK(kv_seq_prepare(&d, 1) == DJ_ERR_NOMEM && strstr(dj_last_error(), "budget"));
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 8 && d.n_blocks == 0);
    kv_seq_free(&d);

    /* parent identity: evict and reuse the parent's id; the child no longer matches */
    fill(&c, 4, 32, 0);
    kv_seq_advance(&c, 28);
    seal_all(pool, &c, toks);
    kv_pool_get_stats(pool, &st);
    CHECK(st.sealed == 8);
    kv_seq_free(&c);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 0 && st.allocated == 8);
    /* stale eviction: everything was last used before the next turn */
    kv_pool_next_turn(pool);
    uint32_t p0 = kv_pool_lookup(pool, c0, KV_BLOCK_NONE, toks); /* touched this turn */
    CHECK(p0 != KV_BLOCK_NONE);
    CHECK(kv_pool_evict_stale(pool, kv_pool_turn(pool)) == 7);
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 1 && st.sealed == 1);
    CHECK(kv_pool_lookup(pool, c1, p0, toks + BS) == KV_BLOCK_NONE);
    /* evict block 0 too, then recompute a block 1 whose parent is a new incarnation */
    kv_pool_next_turn(pool);
    CHECK(kv_pool_evict_stale(pool, kv_pool_turn(pool)) == 1);
    kv_pool_get_stats(pool, &st);
    CHECK(st.allocated == 0 && st.sealed == 0 && st.pinned == 0);

    struct kv_seq e;
    kv_seq_init(&e, pool);
    CHECK(kv_seq_prepare(&e, 8) == DJ_OK);
    fill(&e, 0, 8, 7);
    kv_seq_advance(&e, 8);
    seal_all(pool, &e, toks);
    uint32_t e0 = e.table[0], e1 = e.table[1];
    kv_seq_free(&e);
    /* evict e0 only (touch e1 this turn), reuse its id for something else */
    kv_pool_next_turn(pool);
    CHECK(kv_pool_lookup(pool, c1, e0, toks + BS) == e1);
    CHECK(kv_pool_evict_stale(pool, kv_pool_turn(pool)) == 1);
    struct kv_seq f;
    kv_seq_init(&f, pool);
    CHECK(kv_seq_prepare(&f, 1) == DJ_OK);
    /* the new block may reuse e0's id: e1's parent identity must not match it */
    CHECK(kv_pool_lookup(pool, c1, f.table[0], toks + BS) == KV_BLOCK_NONE);
    kv_seq_free(&f);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 0);

    /* clone: a snapshot that refs the same blocks; writes to the original copy on write */
    struct kv_seq g, snap;
    kv_seq_init(&g, pool);
    CHECK(kv_seq_prepare(&g, 6) == DJ_OK);
    fill(&g, 0, 6, 300);
    kv_seq_advance(&g, 6);
    CHECK(kv_seq_clone(&snap, &g) == DJ_OK);
    CHECK(snap.n_pos == 6 && snap.n_blocks == 2 && snap.table[0] == g.table[0] && snap.table[1] == g.table[1]);
    CHECK(kv_pool_refcount(pool, g.table[0]) == 2 && kv_pool_refcount(pool, g.table[1]) == 2);
    kv_seq_truncate(&g, 5);
    CHECK(kv_seq_prepare(&g, 3) == DJ_OK); /* block 1 is shared with snap: copied */
    CHECK(g.table[1] != snap.table[1] && kv_pool_refcount(pool, snap.table[1]) == 1);
    fill(&g, 5, 8, 900);
    kv_seq_advance(&g, 3);
    CHECK(rows_are(&snap, 0, 6, 300) && rows_are(&g, 0, 5, 300) && rows_are(&g, 5, 8, 900));
    kv_seq_free(&snap);
    kv_seq_free(&g);
    struct kv_seq empty;
    kv_seq_init(&empty, pool);
    CHECK(kv_seq_clone(&snap, &empty) == DJ_OK && snap.n_blocks == 0 && snap.n_pos == 0);
    kv_seq_free(&snap);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 0 && st.allocated == st.sealed);
    kv_pool_destroy(pool);

    /* K-only: V's type is not looked at (here one a pool cannot hold) */
    struct kv_pool_params kp = {NL, W, BS, 8, DJ_TYPE_F32, DJ_TYPE_Q4_K, true};
    pool = NULL;
    CHECKF(kv_pool_create(&kp, &pool) == DJ_OK, "%s", dj_last_error());
    if (pool) {
        kv_pool_get_stats(pool, &st);
        CHECK(st.block_bytes == (size_t)NL * BS * W * sizeof(float)); /* K rows only */
        CHECK(kv_pool_k_row_bytes(pool) == W * sizeof(float) && kv_pool_v_row_bytes(pool) == 0);
        struct kv_seq k1, k2;
        kv_seq_init(&k1, pool);
        CHECK(kv_seq_prepare(&k1, 6) == DJ_OK);
        CHECK(kv_pool_v(pool, k1.table[0], 0) == NULL && kv_seq_v(&k1, 1, 5, BS) == NULL);
        for (size_t p = 0; p < 6; p++)
            for (uint32_t il = 0; il < NL; il++)
                for (int i = 0; i < W; i++) krow(&k1, il, p)[i] = (float)(p * 100 + il * 10 + (size_t)i);
        kv_seq_advance(&k1, 6);
        CHECK(kv_seq_clone(&k2, &k1) == DJ_OK);
        kv_seq_truncate(&k2, 5);
        CHECK(kv_seq_prepare(&k2, 1) == DJ_OK && k2.table[1] != k1.table[1]); /* copied on write */
        krow(&k2, 1, 5)[2] = -1.0f;
        kv_seq_advance(&k2, 1);
        bool same = true;
        for (size_t p = 0; p < 6; p++)
            for (uint32_t il = 0; il < NL; il++)
                for (int i = 0; i < W; i++) {
                    const float want = (float)(p * 100 + il * 10 + (size_t)i);
                    same = same && krow(&k1, il, p)[i] == want &&
                           krow(&k2, il, p)[i] == (p == 5 && il == 1 && i == 2 ? -1.0f : want);
                }
        CHECK(same);
        kv_seq_free(&k1);
        kv_seq_free(&k2);
        kv_pool_destroy(pool);
    }
    struct kv_pool_params kq = {NL, 40, BS, 8, DJ_TYPE_Q8_0, DJ_TYPE_Q8_0, true};
    pool = NULL;
    CHECK(kv_pool_create(&kq, &pool) == DJ_ERR_UNSUPPORTED && pool == NULL &&
          strstr(dj_last_error(), "multiple of 32, not 40"));
    TEST_END();
}
