/*
 * test_kv_hash.c — kv/hash: FNV-1a 64 against the published vectors, token
 * byte order, block / position / chain hashes against values computed by
 * hand (an independent Python implementation of the rules in kv/hash.h, shown
 * next to each constant), the incremental hasher, and chain hashes that
 * change when any earlier block changes.  Also kv/history's chain hashes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "kv/hash.h"
#include "kv/history.h"
#include "test.h"

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static void test_fnv_vectors(void) {
    /* Published FNV-1a 64 test vectors (Fowler/Noll/Vo reference). */
    CHECK(dj_fnv1a(DJ_FNV_OFFSET, "", 0) == 0xcbf29ce484222325ULL);
    CHECK(dj_fnv1a(DJ_FNV_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cULL);
    CHECK(dj_fnv1a(DJ_FNV_OFFSET, "foobar", 6) == 0x85944171f73967e8ULL);
    /* Tokens are 4 little-endian bytes: 0x64636261 is "abcd". */
    dj_token abcd = 0x64636261;
    CHECK(kv_hash_block(&abcd, 1) == dj_fnv1a(DJ_FNV_OFFSET, "abcd", 4));
    CHECK(kv_hash_block(&abcd, 1) == 0xfc179f83ee0724ddULL);
    /* "foobar\0\0" = tokens 0x626f6f66, 0x00007261 */
    dj_token fb[2] = {0x626f6f66, 0x00007261};
    CHECK(kv_hash_block(fb, 2) == 0x74c8e7eb4f245c28ULL);
    CHECK(kv_hash_block(NULL, 0) == DJ_FNV_OFFSET);
}

static void test_block_hashes(void) {
    /* python: fnv(b''.join(struct.pack('<I', t & 0xffffffff) for t in toks)) */
    dj_token t123[3] = {1, 2, 3}, m1 = -1, z = 0, seven = 7;
    CHECK(kv_hash_block(t123, 3) == 0xfd1f0f4381eb0395ULL);
    CHECK(kv_hash_block(&m1, 1) == 0x994f76653e2a3951ULL); /* ff ff ff ff */
    CHECK(kv_hash_block(&z, 1) == 0x4d25767f9dce13f5ULL);
    /* python: fnv(struct.pack('<q', pos) + tokens) */
    CHECK(kv_hash_block_pos(t123, 3, 0) == 0x973d59669a25a835ULL);
    CHECK(kv_hash_block_pos(t123, 3, 64) == 0x226c51f0a803dc75ULL);
    CHECK(kv_hash_block_pos(&seven, 1, -1) == 0x2f744e40e0acc0daULL);
    CHECK(kv_hash_block_pos(t123, 3, 0) != kv_hash_block(t123, 3));
    CHECK(kv_hash_block_pos(t123, 3, 0) != kv_hash_block_pos(t123, 3, 1));
    /* order matters */
    dj_token t321[3] = {3, 2, 1};
    CHECK(kv_hash_block(t321, 3) != kv_hash_block(t123, 3));
}

static void test_chain(void) {
    /* python: c0 = fnv(pack('<Q', 0xcbf29ce484222325) + le([1,2])); c1 = fnv(pack('<Q', c0) + le([3,4]));
     *         c2 = fnv(pack('<Q', c1) + le([5])) */
    dj_token t[5] = {1, 2, 3, 4, 5};
    uint64_t c[4] = {0};
    CHECK(kv_hash_chain_blocks(t, 5, 2, c, 4) == 3);
    CHECK(c[0] == 0x2b427e836b7b1a8fULL);
    CHECK(c[1] == 0xbba356fde7102c23ULL);
    CHECK(c[2] == 0x88f93632a39b4987ULL); /* final partial block, hashed with its 1 token */
    CHECK(c[0] == kv_hash_chain(KV_CHAIN_ROOT, t, 2));
    CHECK(c[1] == kv_hash_chain(c[0], t + 2, 2));
    CHECK(kv_hash_chain_blocks(t, 5, 2, c, 1) == 1);
    CHECK(kv_hash_chain_blocks(t, 0, 2, c, 4) == 0);
    CHECK(kv_hash_chain_blocks(t, 5, (size_t)-1, c, 4) == 1); /* a huge block size: one partial block */
    CHECK(c[0] == kv_hash_chain(KV_CHAIN_ROOT, t, 5));

    /* The chain hash of block i changes when any token of any block <= i changes,
     * and does not when only later blocks change. */
    enum { B = 16, NB = 8, N = B * NB };
    dj_token base[N], mod[N];
    uint64_t hb[NB], hm[NB];
    for (int i = 0; i < N; i++) base[i] = (dj_token)(rnd() % 50000);
    kv_hash_chain_blocks(base, N, B, hb, NB);
    int bad = 0;
    for (int pos = 0; pos < N; pos++) {
        memcpy(mod, base, sizeof mod);
        mod[pos] ^= 1 + (dj_token)(rnd() % 7);
        kv_hash_chain_blocks(mod, N, B, hm, NB);
        for (int b = 0; b < NB; b++) {
            bool changed = hm[b] != hb[b];
            if (changed != (b >= pos / B)) bad++;
        }
    }
    CHECKF(bad == 0, "%d chain hashes did not react as expected to a single-token change", bad);
    /* Same block content after different prefixes: block hashes equal, chain hashes differ. */
    memcpy(mod, base, sizeof mod);
    for (int i = 0; i < B; i++) mod[i] = base[i] + 1;
    kv_hash_chain_blocks(mod, N, B, hm, NB);
    CHECK(kv_hash_block(mod + B, B) == kv_hash_block(base + B, B));
    CHECK(hm[1] != hb[1]);
    /* Swapping two blocks changes the chain although the set of blocks is the same. */
    memcpy(mod, base, sizeof mod);
    memcpy(mod, base + B, B * sizeof *mod);
    memcpy(mod + B, base, B * sizeof *mod);
    kv_hash_chain_blocks(mod, N, B, hm, NB);
    CHECK(hm[1] != hb[1] && hm[NB - 1] != hb[NB - 1]);
}

static void test_hasher(void) {
    enum { N = 1000 };
    dj_token t[N];
    for (int i = 0; i < N; i++) t[i] = (dj_token)rnd();
    uint64_t whole = kv_hash_block(t, N);
    struct kv_hasher h;
    kv_hasher_init(&h);
    CHECK(kv_hasher_finalize(&h) == DJ_FNV_OFFSET);
    for (int i = 0; i < N; i++) kv_hasher_feed(&h, t[i]);
    CHECK(kv_hasher_finalize(&h) == whole);
    int bad = 0;
    for (int split = 0; split <= N; split += 37) {
        kv_hasher_reset(&h);
        kv_hasher_feed_n(&h, t, (size_t)split);
        struct kv_hasher fork = h; /* a plain value: copying forks the prefix */
        kv_hasher_feed_n(&h, t + split, (size_t)(N - split));
        if (kv_hasher_finalize(&h) != whole) bad++;
        if (kv_hasher_finalize(&fork) != kv_hash_block(t, (size_t)split)) bad++;
    }
    CHECK(bad == 0);
}

/* kv_history keeps chain hashes equal to a fresh computation across record/append/truncate. */
static int history_consistent(const struct kv_history *h) {
    size_t nb;
    const uint64_t *c = kv_history_chain(h, &nb);
    if (nb != kv_history_prev_n_tokens(h) / h->block_size) return 0;
    if (nb == 0) return 1;
    uint64_t *ref = malloc(nb * sizeof *ref);
    kv_hash_chain_blocks(kv_history_prev_tokens(h), nb * h->block_size, h->block_size, ref, nb);
    int ok = memcmp(ref, c, nb * sizeof *ref) == 0;
    free(ref);
    return ok;
}

static void test_history(void) {
    struct kv_history h;
    kv_history_init(&h, 8);
    CHECK(!kv_history_has_prev(&h));
    CHECK(kv_history_prev_n_tokens(&h) == 0);
    enum { N = 5000 };
    dj_token *seq = malloc(N * sizeof *seq), *cur = malloc(2 * N * sizeof *cur);
    for (int i = 0; i < N; i++) seq[i] = (dj_token)(rnd() % 1000);
    CHECK(kv_history_record(&h, seq, 100) == DJ_OK);
    CHECK(kv_history_has_prev(&h));
    CHECK(kv_history_prev_n_tokens(&h) == 100 && memcmp(kv_history_prev_tokens(&h), seq, 100 * sizeof *seq) == 0);
    CHECK(history_consistent(&h));
    int bad = 0;
    size_t n = 100;
    memcpy(cur, seq, 100 * sizeof *cur);
    for (int turn = 0; turn < 300; turn++) {
        int kind = (int)(rnd() % 4);
        if (kind == 0) { /* append generated tokens */
            size_t k = rnd() % 50;
            if (n + k > 2 * N) k = 0;
            for (size_t i = 0; i < k; i++) cur[n + i] = (dj_token)(rnd() % 1000);
            if (kv_history_append(&h, cur + n, k) != DJ_OK) bad++;
            n += k;
        } else if (kind == 1) { /* truncate (rejected drafts) */
            size_t k = n ? rnd() % (n + 1) : 0;
            kv_history_truncate(&h, k);
            n = k;
        } else if (kind == 2) { /* record an edited sequence: keep a prefix, new tail */
            size_t keep = n ? rnd() % (n + 1) : 0, add = rnd() % 200;
            if (keep + add > 2 * N) add = 0;
            for (size_t i = 0; i < add; i++) cur[keep + i] = (dj_token)(rnd() % 1000);
            n = keep + add;
            if (kv_history_record(&h, cur, n) != DJ_OK) bad++;
        } else { /* record a prefix of its own buffer */
            size_t k = n ? rnd() % (n + 1) : 0;
            if (kv_history_record(&h, kv_history_prev_tokens(&h), k) != DJ_OK) bad++;
            n = k;
        }
        if (kv_history_prev_n_tokens(&h) != n || (n && memcmp(kv_history_prev_tokens(&h), cur, n * sizeof *cur) != 0))
            bad++;
        if (!history_consistent(&h)) bad++;
    }
    CHECKF(bad == 0, "%d history steps went wrong", bad);
    /* kv_history_diff diffs against the stored sequence. */
    struct diff_result r;
    memcpy(cur, kv_history_prev_tokens(&h), n * sizeof *cur);
    cur[n] = 7;
    CHECK(kv_history_diff(&h, cur, n + 1, &r) == DJ_OK);
    CHECK(r.n_keep == n && r.n_insert == 1 && r.path == DIFF_PATH_APPEND);
    diff_result_free(&r);
    kv_history_clear(&h);
    CHECK(!kv_history_has_prev(&h) && kv_history_prev_n_tokens(&h) == 0);
    kv_history_free(&h);
    kv_history_free(&h); /* idempotent */
    kv_history_free(NULL);
    free(seq);
    free(cur);
}

int main(void) {
    test_fnv_vectors();
    test_block_hashes();
    test_chain();
    test_hasher();
    test_history();
    TEST_END();
}
