/*
 * test_engine_canon.c — LLAMA_OPT_CANON_ENABLED (spec §2.1 at block level,
 * engine.c: seal_blocks) on stories260K with made-up token ids and 64-position
 * blocks.  Two sessions are submitted together with the same 200-token prompt,
 * so the scheduler prefills both in one step and both compute the prompt's 3
 * full blocks before either is sealed:
 *  - canon on: after sealing they share those 3 blocks (the same physical ids
 *    in both tables, 3 fewer blocks allocated, canon_entries_deduped 3,
 *    canon_bytes_saved 3 blocks);
 *  - canon off: each keeps its own copy, both sealed (6 sealed blocks, the
 *    canon_* counters stay 0);
 *  - either way, every logits vector of that turn, of a next turn of each
 *    session (its held tokens + new ones, over the shared or twin blocks) and of
 *    a third session that takes the 3 blocks from the pool, is bitwise that of a
 *    cold run (every optimization off, one request at a time);
 *  - canon off with the persistent store: both copies go to the store, which
 *    writes each chain once; a restarted engine restores them, still cold.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "kv/persist.h"
#include "test.h"
#include "test_engine.h"
#include "test_run.h"

static struct dj_model *model;
static char dir[64];

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }
static dj_token U(size_t i) { return (dj_token)(3 + (i * 104729 + 17) % 499); }

enum { N_PROMPT = 200, N_GEN = 4, N_MORE = 70, BS = 64, N_FULL = N_PROMPT / BS };

struct out {
    uint64_t h; /* FNV-1a over every logits vector */
    dj_token ids[N_GEN];
    size_t n_ids;
    struct dj_turn_result r;
    bool done;
};

static void on_logits(void *ud, const float *l, size_t n) {
    struct out *o = ud;
    o->h = test_hash_f32(o->h, l, n);
}
static void on_token(void *ud, const struct dj_token_event *ev) {
    struct out *o = ud;
    if (o->n_ids < N_GEN) o->ids[o->n_ids++] = ev->tok;
}
static void on_done(void *ud, const struct dj_turn_result *r) {
    struct out *o = ud;
    o->r = *r;
    o->done = true;
}

static void submit(struct dj_engine *e, struct dj_session *s, const dj_token *p, size_t n, struct out *o) {
    memset(o, 0, sizeof *o);
    o->h = DJ_FNV_OFFSET;
    struct dj_request_params rp = engine_default_request();
    rp.prompt = p;
    rp.n_prompt = n;
    rp.max_tokens = N_GEN;
    rp.ignore_eos = true;
    rp.session = s;
    rp.on_logits = on_logits;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.ud = o;
    uint64_t id;
    CHECKF(engine_submit(e, &rp, &id) == DJ_OK, "%s", dj_last_error());
}

static void finished(const struct out *o) {
    CHECKF(o->done && o->r.status == DJ_OK && o->n_ids == N_GEN, "done %d status %d ids %zu: %s", o->done,
           o->r.status, o->n_ids, o->r.error);
}

enum mode { COLD, CANON_ON, CANON_OFF };

static struct dj_engine *make(enum mode m, bool persist) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 1024;
    p.n_threads = 2;
    p.opt.block_size = BS;
    p.opt.diff_enabled = m != COLD;
    p.opt.dedup_enabled = m != COLD;
    p.opt.canon_enabled = m == CANON_ON;
    p.opt.persist_enabled = persist;
    snprintf(p.opt.persist_dir, sizeof p.opt.persist_dir, "%s", persist ? dir : "");
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* Logits hashes, per request, of one run of the scenario. */
struct result {
    uint64_t a1, b1, a2, b2, c;
    dj_token ids_a1[N_GEN];
};

/* Turn 1: A and B submitted together with prompt P (COLD: one after the
 * other).  Turn 2: each its held tokens + N_MORE of its own.  Then C: the
 * first N_FULL blocks of P + 20 tokens of its own.  restart: the disk store
 * holds the blocks already (A's admission loads them, B finds them in memory),
 * so the sharing checks do not apply. */
static struct result scenario(enum mode m, bool persist, bool restart, uint64_t *persist_loads) {
    struct result res;
    memset(&res, 0, sizeof res);
    struct dj_engine *e = make(m, persist);
    if (!e) return res;
    struct dj_session *a, *b, *c;
    CHECK(engine_session_create(e, &a) == DJ_OK && engine_session_create(e, &b) == DJ_OK &&
          engine_session_create(e, &c) == DJ_OK);
    dj_token p[N_PROMPT];
    for (size_t i = 0; i < N_PROMPT; i++) p[i] = T(i);
    struct out oa, ob, oc;
    submit(e, a, p, N_PROMPT, &oa);
    if (m == COLD) engine_run_all(e);
    submit(e, b, p, N_PROMPT, &ob);
    engine_run_all(e);
    finished(&oa);
    finished(&ob);
    res.a1 = oa.h;
    res.b1 = ob.h;
    memcpy(res.ids_a1, oa.ids, sizeof oa.ids);
    if (m != COLD && !restart) /* both computed the whole prompt: the same blocks, in one step */
        CHECKF(oa.r.n_computed == N_PROMPT && ob.r.n_computed == N_PROMPT, "computed %zu and %zu",
               oa.r.n_computed, ob.r.n_computed);

    struct kv_pool_stats ps;
    struct llama_opt_stats st;
    engine_pool_stats(e, &ps);
    engine_get_stats(e, &st);
    if (m != COLD && !restart) {
        /* each session holds 203 positions: 3 full blocks + 1 private partial one */
        CHECK(a->seq.n_blocks == N_FULL + 1 && b->seq.n_blocks == N_FULL + 1);
        size_t shared = 0;
        for (size_t k = 0; k < N_FULL; k++) shared += a->seq.table[k] == b->seq.table[k];
        const uint64_t bb = ps.block_bytes;
        if (m == CANON_ON) {
            CHECKF(shared == N_FULL, "%zu of %d blocks shared", shared, N_FULL);
            CHECKF(ps.allocated == N_FULL + 2 && ps.sealed == N_FULL, "allocated %u sealed %u", ps.allocated,
                   ps.sealed);
            CHECKF(st.canon_entries_total == 2 * N_FULL && st.canon_entries_deduped == N_FULL &&
                       st.canon_bytes_saved == N_FULL * bb,
                   "canon total %llu deduped %llu saved %llu", (unsigned long long)st.canon_entries_total,
                   (unsigned long long)st.canon_entries_deduped, (unsigned long long)st.canon_bytes_saved);
        } else {
            CHECKF(shared == 0, "%zu of %d blocks shared with canon off", shared, N_FULL);
            CHECKF(ps.allocated == 2 * N_FULL + 2 && ps.sealed == 2 * N_FULL, "allocated %u sealed %u",
                   ps.allocated, ps.sealed);
            CHECKF(st.canon_entries_total == 0 && st.canon_entries_deduped == 0 && st.canon_bytes_saved == 0,
                   "canon counters %llu %llu %llu with canon off", (unsigned long long)st.canon_entries_total,
                   (unsigned long long)st.canon_entries_deduped, (unsigned long long)st.canon_bytes_saved);
        }
    }
    if (m == COLD) CHECK(st.canon_entries_total == 0 && ps.sealed == 0);

    /* turn 2: each session's held tokens (prompt + generated but the last) + N_MORE of its own */
    dj_token qa[N_PROMPT + N_GEN + N_MORE], qb[N_PROMPT + N_GEN + N_MORE];
    const size_t nq = N_PROMPT + N_GEN - 1 + N_MORE;
    memcpy(qa, p, sizeof p);
    memcpy(qb, p, sizeof p);
    memcpy(qa + N_PROMPT, oa.ids, (N_GEN - 1) * sizeof *qa);
    memcpy(qb + N_PROMPT, ob.ids, (N_GEN - 1) * sizeof *qb);
    for (size_t i = 0; i < N_MORE; i++) {
        qa[N_PROMPT + N_GEN - 1 + i] = T(1000 + i);
        qb[N_PROMPT + N_GEN - 1 + i] = U(i);
    }
    submit(e, a, qa, nq, &oa);
    if (m == COLD) engine_run_all(e);
    submit(e, b, qb, nq, &ob);
    engine_run_all(e);
    finished(&oa);
    finished(&ob);
    if (m != COLD && !restart) /* (after a restart, block 3 comes whole from the disk instead) */
        CHECKF(oa.r.n_reused_own == N_PROMPT + N_GEN - 1 && ob.r.n_reused_own == N_PROMPT + N_GEN - 1,
               "own %zu %zu", oa.r.n_reused_own, ob.r.n_reused_own);
    res.a2 = oa.h;
    res.b2 = ob.h;

    /* C: the pool's first N_FULL blocks of P, then its own tokens */
    dj_token pc[N_FULL * BS + 20];
    memcpy(pc, p, N_FULL * BS * sizeof *pc);
    for (size_t i = 0; i < 20; i++) pc[N_FULL * BS + i] = U(500 + i);
    submit(e, c, pc, N_FULL * BS + 20, &oc);
    engine_run_all(e);
    finished(&oc);
    if (m != COLD)
        CHECKF(oc.r.n_reused_pool == N_FULL * BS && oc.r.n_computed == 20, "pool %zu computed %zu",
               oc.r.n_reused_pool, oc.r.n_computed);
    res.c = oc.h;

    engine_session_destroy(a);
    engine_session_destroy(b);
    engine_session_destroy(c);
    engine_pool_stats(e, &ps);
    CHECKF(ps.pinned == 0 && ps.allocated == ps.sealed, "pinned %u, allocated %u, sealed %u", ps.pinned,
           ps.allocated, ps.sealed);
    engine_get_stats(e, &st);
    if (persist_loads) *persist_loads = st.persist_loads;
    if (persist && e->store && !restart) {
        /* canon off: both copies of the 3 shared blocks were handed to the store; it wrote
         * each chain once (the second put of a chain finds the file present) */
        kv_store_flush(e->store);
        engine_get_stats(e, &st); /* persist_saves: the blocks the writer has finished */
        struct kv_store_stats ks;
        kv_store_get_stats(e->store, &ks);
        CHECKF(st.persist_saves == ks.put && ks.written + ks.present == ks.put && ks.present >= N_FULL,
               "saves %llu put %llu written %llu present %llu", (unsigned long long)st.persist_saves,
               (unsigned long long)ks.put, (unsigned long long)ks.written, (unsigned long long)ks.present);
    }
    engine_destroy(e);
    return res;
}

static bool same(const struct result *x, const struct result *y) {
    return x->a1 == y->a1 && x->b1 == y->b1 && x->a2 == y->a2 && x->b2 == y->b2 && x->c == y->c &&
           memcmp(x->ids_a1, y->ids_a1, sizeof x->ids_a1) == 0;
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    deja_bin = argc > 2 ? argv[2] : NULL; /* (test_run.h's; only its run() is used here) */
    if (model_load(test_shared_path(shared, "models/stories260K.gguf"), &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    const struct result cold = scenario(COLD, false, false, NULL);
    CHECK(cold.a1 == cold.b1); /* the same prompt alone: the same logits */
    const struct result on = scenario(CANON_ON, false, false, NULL);
    CHECK(same(&on, &cold));
    const struct result off = scenario(CANON_OFF, false, false, NULL);
    CHECK(same(&off, &cold));

    /* canon off with the disk store, then a restart that restores the blocks */
    snprintf(dir, sizeof dir, "/tmp/deja_test_canon_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    uint64_t loads = 0;
    struct result r = scenario(CANON_OFF, true, false, &loads);
    CHECK(same(&r, &cold) && loads == 0);
    r = scenario(CANON_OFF, true, true, &loads);
    CHECK(same(&r, &cold));
    CHECKF(loads >= N_FULL, "%llu blocks restored", (unsigned long long)loads);
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);

    model_free(model);
    TEST_END();
}
