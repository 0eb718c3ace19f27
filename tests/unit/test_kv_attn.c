/*
 * test_kv_attn.c — kv/attn_prune: the turn's block weights from the
 * fixed-point masses, the threshold policy (dead turns, the window, restore
 * by the probe, the guardrails), the h2o policy (budget, order by rolling
 * weight, ties to the later block, protected blocks), truncation and copies.
 * No model: the masses are written as the attention kernel would.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/attn_prune.h"
#include "test.h"

enum { H = 2, BS = 4, CAP = 16 };

/* One turn: block b gets share[b] of head 0's mass (head 1: all on block 0); skipped blocks
 * get their share through the probe. */
static void turn(struct kv_attn *a, size_t n_pos, const float *share, const struct kv_prune_params *p,
                 struct kv_prune_delta *d) {
    kv_attn_turn_begin(a, n_pos - 1);
    const size_t nb = (n_pos + BS - 1) / BS;
    for (size_t b = 0; b < nb; b++) {
        _Atomic uint64_t *m = kv_attn_skipped(a, b) ? a->probe : a->mass;
        atomic_store(&m[b * H + 0], (uint64_t)(share[b] * KV_ATTN_ONE));
        atomic_store(&m[b * H + 1], b == 0 ? (uint64_t)KV_ATTN_ONE : 0); /* head 1: the sink only */
    }
    kv_attn_turn_end(a, n_pos, p, d);
}

static void test_threshold(void) {
    struct kv_attn a;
    CHECK(kv_attn_init(&a, H, BS, CAP) == DJ_OK);
    struct kv_prune_params p = {true, KV_PRUNE_THRESHOLD, 0.05f, 2, BS, 2 * BS, 0};
    struct kv_prune_delta d;
    /* 40 positions: 10 blocks; blocks 3 and 5 below the threshold */
    float sh[CAP];
    for (int b = 0; b < CAP; b++) sh[b] = 0.1f;
    sh[3] = 0.01f;
    sh[5] = 0.02f;
    turn(&a, 40, sh, &p, &d);
    CHECK(d.n_pruned == 0 && a.n_skip == 0); /* one dead turn, the window is 2 */
    CHECK(a.dead[3] == 1 && a.dead[5] == 1 && a.dead[4] == 0);
    /* weight: the larger of the heads' shares: block 1 head 0's (0.1 of 0.83), block 0 head 1's (all) */
    CHECKF(fabsf(a.weight[1] - 0.1f / 0.83f) < 1e-6f && a.weight[0] == 1.0f, "weights %g %g", (double)a.weight[0],
           (double)a.weight[1]);
    turn(&a, 40, sh, &p, &d);
    CHECKF(d.n_pruned == 2 && a.n_skip == 2 && a.skip[3] && a.skip[5], "pruned %zu skip %zu", d.n_pruned, a.n_skip);
    /* guardrails: block 0 (keep_first 4 tokens) and blocks ending after 40 - 8 (8, 9) never */
    for (int b = 0; b < CAP; b++) sh[b] = b == 0 || b >= 8 ? 0.0f : 0.1f;
    sh[3] = sh[5] = 0.0f;
    for (int t = 0; t < 3; t++) turn(&a, 40, sh, &p, &d);
    CHECK(!a.skip[0] && !a.skip[8] && !a.skip[9]);
    CHECK(a.skip[3] && a.skip[5]); /* their probe shares are 0 now: still skipped */
    /* the probe gives block 3 the threshold again: restored */
    sh[3] = 0.2f;
    turn(&a, 40, sh, &p, &d);
    CHECK(d.n_restored == 1 && !a.skip[3] && a.skip[5] && a.n_skip == 1);
    CHECK(a.dead[3] == 0);
    /* truncation drops the skip entries of blocks not fully kept */
    kv_attn_truncate(&a, 22); /* blocks 0..4 full */
    CHECK(a.n_mask == 5 && a.n_skip == 0 && !kv_attn_skipped(&a, 5));
    /* statistics only: weights, no skip set */
    struct kv_prune_params stats = p;
    stats.prune = false;
    sh[1] = 0.0f;
    for (int t = 0; t < 4; t++) turn(&a, 40, sh, &stats, &d);
    CHECK(a.n_skip == 0 && a.dead[1] >= 4 && d.n_pruned == 0);
    kv_attn_free(&a);
}

static void test_h2o(void) {
    struct kv_attn a, b;
    CHECK(kv_attn_init(&a, H, BS, CAP) == DJ_OK && kv_attn_init(&b, H, BS, CAP) == DJ_OK);
    /* 48 positions, 12 blocks; protected: block 0 (keep_first 4) and the last 2 (keep_last 8):
     * 12 tokens; budget 28: room for 4 more blocks */
    struct kv_prune_params p = {true, KV_PRUNE_H2O, 0.0f, 1, BS, 2 * BS, 28};
    struct kv_prune_delta d;
    float sh[CAP] = {0};
    const float w[12] = {0.5f, 0.01f, 0.2f, 0.02f, 0.03f, 0.2f, 0.05f, 0.01f, 0.04f, 0.1f, 0.0f, 0.0f};
    memcpy(sh, w, sizeof w);
    turn(&a, 48, sh, &p, &d);
    /* kept: 0, 10, 11 protected; the four heaviest of 1..9: 2 and 5 (0.2), 9 (0.1), 6 (0.05) */
    const int keep[] = {0, 2, 5, 6, 9, 10, 11};
    for (int i = 0; i < 12; i++) {
        bool k = false;
        for (size_t j = 0; j < sizeof keep / sizeof *keep; j++) k |= keep[j] == i;
        CHECKF(a.skip[i] == !k, "block %d skip %d", i, a.skip[i]);
    }
    CHECK(d.n_pruned == 5 && a.n_skip == 5);
    /* ties go to the later block: blocks 3 and 4 equal, room for one */
    float t2[CAP] = {0};
    t2[0] = 0.5f;
    t2[3] = t2[4] = 0.1f;
    struct kv_prune_params q = p;
    q.budget = 12 + BS + 3; /* protected 12 + one block (+3: not a whole block) */
    turn(&b, 48, t2, &q, &d);
    CHECK(!b.skip[4] && b.skip[3]);
    /* rolling weight: a block heavy in one turn stays above one light in both */
    kv_attn_copy(&b, &a);
    CHECK(b.n_skip == a.n_skip && memcmp(b.skip, a.skip, CAP) == 0 && b.avg[2] == a.avg[2]);
    /* a budget over the sequence: nothing skipped, everything back */
    q.budget = 1000;
    turn(&a, 48, sh, &q, &d);
    CHECK(a.n_skip == 0 && d.n_restored == 5);
    kv_attn_free(&a);
    kv_attn_free(&b);
    CHECK(kv_attn_init(&a, 0, BS, CAP) == DJ_ERR_INVALID);
}

/* Within a turn: skipped blocks whose probe share reaches the threshold come back at once. */
static void test_probe_restore(void) {
    struct kv_attn a;
    CHECK(kv_attn_init(&a, H, BS, CAP) == DJ_OK);
    a.skip[2] = a.skip[3] = a.skip[5] = 1;
    a.n_mask = 8;
    a.n_skip = 3;
    a.dead[3] = 7;
    kv_attn_turn_begin(&a, 31);
    for (size_t b = 0; b < 8; b++) atomic_store(&a.probe[b * H + 0], (uint64_t)(KV_ATTN_ONE / 16)); /* 1/8 each */
    atomic_store(&a.probe[3 * H + 1], (uint64_t)KV_ATTN_ONE); /* head 1: all on block 3 */
    CHECK(kv_attn_probe_restore(&a, 0.5f) == 1 && !a.skip[3] && a.skip[2] && a.skip[5] && a.n_skip == 2 &&
          a.dead[3] == 0);
    CHECK(kv_attn_probe_restore(&a, 0.1f) == 2 && a.n_skip == 0); /* 1/8 >= 0.1: the others too */
    kv_attn_free(&a);
}

int main(void) {
    test_probe_restore();
    test_threshold();
    test_h2o();
    TEST_END();
}
