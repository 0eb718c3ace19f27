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
    *h = dj_fnv1a(*h, logits, n * sizeof(float));
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

#endif
