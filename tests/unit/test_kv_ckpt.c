/*
 * test_kv_ckpt.c — recurrent state of a sequence (kv_seq.rs) and the
 * checkpoint store (kv/ckpt.h):
 *  - a pool with rs_floats gives each sequence a zero state on first prepare;
 *    the state is valid while rs_pos == n_pos; truncating below it or appending
 *    a pool block makes it unknown, truncating to 0 zeros it again, rs_set
 *    restores one; a clone copies it (later writes to one leave the other);
 *  - a checkpoint is found only for its exact token prefix and namespace: the
 *    longest one at or below the asked length and at or above the floor; a
 *    prefix that differs in one middle token misses;
 *  - the byte budget: LRU eviction (a lookup refreshes), a checkpoint larger
 *    than the budget is not kept, a put of a held key refreshes it in place.
 */
#include <string.h>

#include "core/ggml_type.h"
#include "kv/ckpt.h"
#include "kv/pool.h"
#include "test.h"

enum { RS = 10, BS = 4 };

static void test_seq_state(void) {
    struct kv_pool_params pp = {2, 4, BS, 16, DJ_TYPE_F32, DJ_TYPE_F32, false, RS};
    struct kv_pool *pool;
    CHECK(kv_pool_create(&pp, &pool) == DJ_OK);
    struct kv_seq s;
    kv_seq_init(&s, pool);
    CHECK(kv_seq_rs_floats(&s) == RS);
    CHECK(kv_seq_rs_ok(&s)); /* position 0: the zero state */
    CHECK(kv_seq_prepare(&s, 6) == DJ_OK);
    CHECK(s.rs != NULL);
    for (int i = 0; i < RS; i++) CHECK(s.rs[i] == 0.0f);
    /* what a forward pass does: write the state, then advance */
    for (int i = 0; i < RS; i++) s.rs[i] = (float)i + 1.0f;
    s.rs_pos = 6;
    kv_seq_advance(&s, 6);
    CHECK(kv_seq_rs_ok(&s));

    struct kv_seq c;
    CHECK(kv_seq_clone(&c, &s) == DJ_OK);
    CHECK(kv_seq_rs_ok(&c) && c.rs != s.rs && memcmp(c.rs, s.rs, RS * sizeof(float)) == 0);
    c.rs[0] = 99.0f;
    CHECK(s.rs[0] == 1.0f);

    kv_seq_truncate(&s, 6); /* to where it is: still valid */
    CHECK(kv_seq_rs_ok(&s));
    kv_seq_truncate(&s, 5); /* below the state: unknown */
    CHECK(!kv_seq_rs_ok(&s) && s.rs_pos == KV_RS_NONE);
    float ck[RS];
    for (int i = 0; i < RS; i++) ck[i] = -(float)i;
    CHECK(kv_seq_rs_set(&s, ck) == DJ_OK);
    CHECK(kv_seq_rs_ok(&s) && s.rs_pos == 5 && s.rs[3] == -3.0f);
    kv_seq_truncate(&s, 0); /* the start: zeros, valid */
    CHECK(kv_seq_rs_ok(&s));
    for (int i = 0; i < RS; i++) CHECK(s.rs[i] == 0.0f);

    /* a pool block brings K/V rows but no state */
    struct kv_seq a;
    kv_seq_init(&a, pool);
    CHECK(kv_seq_prepare(&a, BS) == DJ_OK);
    kv_seq_advance(&a, BS);
    a.rs_pos = BS;
    const dj_token toks[BS] = {1, 2, 3, 4};
    CHECK(kv_pool_seal(pool, a.table[0], 7, KV_BLOCK_NONE, toks) == DJ_OK);
    struct kv_seq b;
    kv_seq_init(&b, pool);
    CHECK(kv_seq_append_block(&b, a.table[0]) == DJ_OK);
    CHECK(b.n_pos == BS && !kv_seq_rs_ok(&b));

    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_seq_free(&c);
    kv_seq_free(&s);
    kv_pool_destroy(pool);

    /* a pool without recurrent layers: always valid, no state */
    struct kv_pool_params p0 = {2, 4, BS, 4, DJ_TYPE_F32, DJ_TYPE_F32};
    CHECK(kv_pool_create(&p0, &pool) == DJ_OK);
    kv_seq_init(&s, pool);
    CHECK(kv_seq_prepare(&s, 3) == DJ_OK && s.rs == NULL);
    kv_seq_advance(&s, 3);
    kv_seq_truncate(&s, 1);
    CHECK(kv_seq_rs_ok(&s));
    kv_seq_free(&s);
    kv_pool_destroy(pool);
}

static void state(float *rs, float v) {
    for (int i = 0; i < RS; i++) rs[i] = v + (float)i;
}

static void test_store(void) {
    struct kv_ckpt_store *cs;
    CHECK(kv_ckpt_create(0, 100, &cs) == DJ_ERR_INVALID);
    CHECK(kv_ckpt_create(RS, 0, &cs) == DJ_ERR_INVALID);
    /* room for three checkpoints of 8 tokens (40 + 32 bytes each) */
    CHECK(kv_ckpt_create(RS, 3 * (RS * sizeof(float) + 8 * sizeof(dj_token)), &cs) == DJ_OK);
    dj_token t[64];
    for (int i = 0; i < 64; i++) t[i] = 100 + i;
    float rs[RS];
    const float *got = NULL;
    CHECK(kv_ckpt_find(cs, 1, t, 32, 0, &got) == 0 && got == NULL);

    state(rs, 4.0f);
    CHECK(kv_ckpt_put(cs, 1, t, 4, rs));
    state(rs, 8.0f);
    CHECK(kv_ckpt_put(cs, 1, t, 8, rs));
    CHECK(kv_ckpt_find(cs, 1, t, 32, 0, &got) == 8 && got[0] == 8.0f);
    CHECK(kv_ckpt_find(cs, 1, t, 7, 0, &got) == 4 && got[0] == 4.0f); /* at or below the asked length */
    CHECK(kv_ckpt_find(cs, 1, t, 32, 5, &got) == 8);
    CHECK(kv_ckpt_find(cs, 1, t, 7, 5, &got) == 0);                     /* nothing at or above the floor */
    CHECK(kv_ckpt_find(cs, 2, t, 32, 0, &got) == 0);                    /* another namespace */
    dj_token u[64];
    memcpy(u, t, sizeof u);
    u[2] = 7; /* differs in the middle, same last token */
    CHECK(kv_ckpt_find(cs, 1, u, 32, 0, &got) == 0);
    u[2] = t[2];
    u[6] = 7;
    CHECK(kv_ckpt_find(cs, 1, u, 32, 0, &got) == 4);

    /* refresh in place: same key, no new entry */
    struct kv_ckpt_stats st;
    kv_ckpt_get_stats(cs, &st);
    const size_t n0 = st.n, puts0 = (size_t)st.puts;
    state(rs, 4.0f);
    CHECK(kv_ckpt_put(cs, 1, t, 4, rs));
    kv_ckpt_get_stats(cs, &st);
    CHECK(st.n == n0 && st.puts == puts0);

    /* budget: a third fits, a fourth evicts the least recently used (8, since 4 was just used) */
    state(rs, 2.0f);
    CHECK(kv_ckpt_put(cs, 1, t, 2, rs));
    CHECK(kv_ckpt_find(cs, 1, t, 32, 0, &got) == 8); /* 8 is used now: 4 is the oldest, then 2 */
    state(rs, 6.0f);
    CHECK(kv_ckpt_put(cs, 1, t, 6, rs));
    kv_ckpt_get_stats(cs, &st);
    CHECK(st.n == 3 && st.evicted == 1 && st.bytes <= st.max_bytes);
    CHECK(kv_ckpt_find(cs, 1, t, 5, 0, &got) == 2); /* 4 was evicted */
    CHECK(kv_ckpt_find(cs, 1, t, 7, 0, &got) == 6 && got[0] == 6.0f);

    /* larger than the whole budget: not kept, nothing evicted for it */
    CHECK(!kv_ckpt_put(cs, 1, t, 64, rs));
    kv_ckpt_get_stats(cs, &st);
    CHECK(st.n == 3 && st.evicted == 1);
    CHECK(!kv_ckpt_put(cs, 1, t, 0, rs));

    kv_ckpt_clear(cs);
    kv_ckpt_get_stats(cs, &st);
    CHECK(st.n == 0 && st.bytes == 0);
    CHECK(kv_ckpt_find(cs, 1, t, 32, 0, &got) == 0);
    kv_ckpt_destroy(cs);
    kv_ckpt_destroy(NULL);
}

int main(void) {
    test_seq_state();
    test_store();
    TEST_END();
}
