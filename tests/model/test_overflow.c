/*
 * test_overflow.c — the context-overflow policy (engine/overflow.c) on stories260K:
 *  - error (the default): a prompt past the context is refused with a message;
 *  - prune: the same prompt runs; the tokens dropped are whole blocks of its middle,
 *    the oldest after the protected start (no statistics): its logits are bitwise those
 *    of a cold engine given that shortened prompt by hand; the drop goes a quarter of
 *    the context below what fits;
 *  - the next turn extends the conversation: the same blocks are dropped, nothing more
 *    while it fits, and the session's KV is reused (only the new tokens computed);
 *  - a conversation whose protected ends alone do not fit is refused;
 *  - with attention statistics the choice follows the weights, and is deterministic.
 */
#include <math.h>

#include "core/hash.h"
#include "engine/engine.h"
#include "test.h"
#include "test_engine.h"

static struct dj_model *model;

enum { BS = 16, CTX = 256, N0 = 300 };

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }

static struct dj_engine *make(enum dj_ctx_overflow ov, uint32_t keep_first, bool stats) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = CTX;
    p.n_threads = 2;
    p.opt.block_size = BS;
    p.overflow = ov;
    p.opt.attn_prune_keep_first = keep_first;
    p.opt.attn_prune_keep_last = 64;
    p.opt.attn_stats_enabled = stats;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

static enum dj_status turn(struct dj_engine *e, struct dj_session *s, const dj_token *p, size_t n, uint64_t *h,
                           dj_token *ids, struct dj_turn_result *r) {
    struct dj_turn_params tp = {.n_gen = 8, .on_logits = test_hash_logits, .ud = h};
    memset(r, 0, sizeof *r);
    return engine_turn(e, s, p, n, &tp, ids, r);
}

static void test_policy(void) {
    dj_token p[N0 + 64], ids[8], sh[CTX];
    for (size_t i = 0; i < N0; i++) p[i] = T(i);
    struct dj_engine *err = make(DJ_OVERFLOW_ERROR, 32, false), *pr = make(DJ_OVERFLOW_PRUNE, 32, false),
                     *cold = make(DJ_OVERFLOW_ERROR, 32, false);
    struct dj_session *s = NULL, *c = NULL;
    if (!err || !pr || !cold) goto out;
    struct dj_turn_result r;
    uint64_t h = DJ_FNV_OFFSET;
    CHECK(engine_session_create(err, &s) == DJ_OK);
    CHECK(turn(err, s, p, N0, &h, ids, &r) == DJ_ERR_INVALID && strstr(dj_last_error(), "context size"));
    engine_session_destroy(s);

    /* prune: 300 tokens and 8 to generate in 256: the goal is 256 - 8 - 64 = 184 tokens, so
     * 8 blocks go (300 - 128 = 172): blocks 2..9, the oldest after the protected 32 tokens */
    CHECK(engine_session_create(pr, &s) == DJ_OK);
    h = DJ_FNV_OFFSET;
    CHECKF(turn(pr, s, p, N0, &h, ids, &r) == DJ_OK, "%s", dj_last_error());
    CHECKF(r.n_ctx_dropped == 8 * BS && r.n_prompt == N0 - 8 * BS, "dropped %zu, prompt %zu", r.n_ctx_dropped,
           r.n_prompt);
    size_t n = 0;
    for (size_t i = 0; i < N0; i++)
        if (i < 2 * BS || i >= 10 * BS) sh[n++] = p[i];
    uint64_t hc = DJ_FNV_OFFSET;
    dj_token idc[8];
    CHECK(engine_session_create(cold, &c) == DJ_OK);
    CHECK(turn(cold, c, sh, n, &hc, idc, &r) == DJ_OK);
    CHECK(hc == h && memcmp(ids, idc, sizeof ids) == 0);

    /* the next turn: the conversation + 7 generated + 20 new tokens = 327: the same blocks
     * dropped (199 tokens fit with 8 to generate), only the new tokens computed */
    size_t n1 = N0;
    memcpy(p + n1, ids, 7 * sizeof *ids);
    n1 += 7;
    for (size_t i = 0; i < 20; i++, n1++) p[n1] = T(5000 + i);
    h = DJ_FNV_OFFSET;
    CHECKF(turn(pr, s, p, n1, &h, ids, &r) == DJ_OK, "%s", dj_last_error());
    CHECKF(r.n_ctx_dropped == 8 * BS && r.n_computed == 20 && r.n_reused_own == n1 - 8 * BS - 20,
           "dropped %zu computed %zu own %zu", r.n_ctx_dropped, r.n_computed, r.n_reused_own);
    struct llama_opt_stats os;
    engine_get_stats(pr, &os);
    CHECK(os.ctx_tokens_dropped == 16 * BS);
    engine_session_destroy(s);
    s = NULL;

    /* the protected ends alone do not fit: refused */
    struct dj_engine *big = make(DJ_OVERFLOW_PRUNE, 240, false);
    if (big) {
        CHECK(engine_session_create(big, &s) == DJ_OK);
        CHECK(turn(big, s, p, N0, &h, ids, &r) == DJ_ERR_INVALID && strstr(dj_last_error(), "even with its middle"));
        engine_session_destroy(s);
        s = NULL;
        engine_destroy(big);
    }

    /* with statistics: the least attended blocks go (their weights after a first turn of 200
     * tokens, which fits), bitwise a cold run of the prompt without them; deterministic */
    uint64_t hs[2];
    for (int k = 0; k < 2; k++) {
        struct dj_engine *st = make(DJ_OVERFLOW_PRUNE, 32, true);
        if (!st) break;
        CHECK(engine_session_create(st, &s) == DJ_OK);
        hs[k] = DJ_FNV_OFFSET;
        CHECK(turn(st, s, p, 200, &hs[k], ids, &r) == DJ_OK && r.n_ctx_dropped == 0);
        const float *wt;
        const uint8_t *sk;
        const size_t nk = engine_session_attn(s, &wt, &sk);
        CHECK(nk == 12);
        float w[16];
        for (size_t b = 0; b < 16; b++) w[b] = b < nk && (b + 1) * BS <= 200 ? wt[b] : INFINITY;
        /* the 8 lowest of blocks 2..13 (equal weights: the older) */
        bool drop[(N0 + BS - 1) / BS] = {false};
        for (int d = 0; d < 8; d++) {
            int best = -1;
            for (int b = 2; b < 14; b++)
                if (!drop[b] && (best < 0 || w[b] < w[best])) best = b;
            drop[best] = true;
        }
        uint64_t h2 = DJ_FNV_OFFSET;
        CHECK(turn(st, s, p, N0, &h2, ids, &r) == DJ_OK && r.n_ctx_dropped == 8 * BS);
        if (k == 0) {
            n = 0;
            for (size_t i = 0; i < N0; i++)
                if (!drop[i / BS]) sh[n++] = p[i];
            struct dj_session *c2;
            CHECK(engine_session_create(cold, &c2) == DJ_OK);
            uint64_t hc2 = DJ_FNV_OFFSET;
            CHECK(turn(cold, c2, sh, n, &hc2, idc, &r) == DJ_OK);
            CHECKF(hc2 == h2, "the weights' choice is not what was dropped");
            engine_session_destroy(c2);
        }
        hs[k] = h2;
        engine_session_destroy(s);
        s = NULL;
        engine_destroy(st);
    }
    CHECK(hs[0] == hs[1]);
out:
    if (s) engine_session_destroy(s);
    if (c) engine_session_destroy(c);
    engine_destroy(err);
    engine_destroy(pr);
    engine_destroy(cold);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    if (model_load(test_shared_path(shared, "models/stories260K.gguf"), &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    test_policy();
    model_free(model);
    TEST_END();
}
