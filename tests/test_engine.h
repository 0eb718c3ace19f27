/*
 * test_engine.h — helpers for tests that drive the engine (include test.h first).
 */
#ifndef DJ_TEST_ENGINE_H
#define DJ_TEST_ENGINE_H

#include "core/hash.h"
#include "core/status.h"
#include "engine/engine.h"

/* dj_logits_fn: folds each logits vector into the FNV-1a hash at ud. */
static inline void test_hash_logits(void *ud, const float *logits, size_t n) {
    uint64_t *h = ud;
    *h = test_hash_f32(*h, logits, n);
}

/* One turn of n_gen (<= 64) greedy tokens, checked to succeed; its logits are
 * folded into *h; ids: where the generated tokens go (NULL: dropped). */
static inline struct dj_turn_result test_turn(struct dj_engine *e, struct dj_session *s, const dj_token *p,
                                              size_t n, size_t n_gen, uint64_t *h, dj_token *ids) {
    struct dj_turn_params tp = {.n_gen = n_gen, .on_logits = test_hash_logits, .ud = h};
    struct dj_turn_result r;
    memset(&r, 0, sizeof r);
    dj_token local[64];
    CHECKF(n_gen <= 64 || ids, "n_gen %zu needs an ids buffer", n_gen);
    CHECKF(engine_turn(e, s, p, n, &tp, ids ? ids : local, &r) == DJ_OK, "%s", dj_last_error());
    return r;
}

/* Pairs each emitted token with the logits that chose it (request callbacks, one request's
 * completions at a time): the engine calls on_logits right before the on_token of the token
 * those logits chose, and computes none for a token emitted without a pass (forced). */
static struct {
    uint64_t pending;
    bool has;
} test_tap;

/* dj_request_params.on_logits: remembers the hash of the logits. */
static inline void test_tap_logits(void *ud, const float *l, size_t n) {
    (void)ud;
    test_tap.pending = test_hash_f32(DJ_FNV_OFFSET, l, n);
    test_tap.has = true;
}

/* From on_token: the hash of the logits that chose this token (checked present), or 0 for a
 * forced one (checked absent). */
static inline uint64_t test_tap_take(bool forced, size_t pos) {
    uint64_t h = 0;
    if (!forced) {
        CHECKF(test_tap.has, "pos %zu: a sampled token without logits", pos);
        h = test_tap.has ? test_tap.pending : 1;
    } else {
        CHECKF(!test_tap.has, "pos %zu: logits computed for a forced token", pos);
    }
    test_tap.has = false;
    return h;
}

#endif
