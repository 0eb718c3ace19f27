/*
 * test_sched.c — the serving engine's scheduler (src/engine/sched.c) on
 * codelm: requests batched together produce bitwise what they produce alone
 * (tokens and every logits vector), greedy and with seeded sampling, with
 * chunked prefill, staggered arrivals and a submitting thread; stop strings
 * across token boundaries; cancellation mid-prefill and mid-decode leaves no
 * pinned block; admission control by KV memory; n > 1 completions sharing
 * the prompt's blocks; logprobs; the logits-processor hook (mask, forced
 * tokens); end-of-generation; the context limit; prefix matching of
 * session-less requests; cache_salt namespaces.  Batched == alone again on
 * deepseek2-lite-tiny (Multi-head Latent Attention, a K-only pool).  Reuse == cold: a
 * prompt that extends an earlier one reuses its blocks and gives bitwise what a fresh
 * engine gives.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_sched_vulkan_*: N = 1, Vulkan device 0, lavapipe
 * in CI) the engines run their forward passes on that device (engine_params.gpu), on
 * stories260K — the model lavapipe runs fast enough for make test: batched == alone
 * (greedy and seeded, the four configurations) and reuse == cold, within the GPU backend;
 * without a Vulkan device the test exits 77 (SKIP).
 */
#include <math.h>
#include <pthread.h>

#include "core/hash.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "test.h"
#include "test_gpu.h"

enum { MAX_GEN = 64, MAX_REQ = 16 };

static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

struct out {
    dj_token tok[MAX_GEN];
    size_t n;
    uint64_t lhash;
    size_t n_logits;
    char text[4096];
    size_t n_text;
    struct dj_turn_result r;
    bool done;
    uint64_t done_step, first_step;
    struct dj_engine *e;
    float lp[MAX_GEN];
    struct dj_logprob top[MAX_GEN][5];
    size_t n_top[MAX_GEN];
};

static void on_token(void *ud, const struct dj_token_event *ev) {
    struct out *o = ud;
    if (o->n == 0) o->first_step = o->e ? engine_n_forward(o->e) : 0;
    if (o->n < MAX_GEN) {
        o->lp[o->n] = ev->logprob;
        o->n_top[o->n] = ev->n_top;
        for (size_t i = 0; i < ev->n_top && i < 5; i++) o->top[o->n][i] = ev->top[i];
        o->tok[o->n++] = ev->tok;
    }
    if (o->n_text + ev->n_text < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->n_text);
        o->n_text += ev->n_text;
    }
}
static void on_done(void *ud, const struct dj_turn_result *r) {
    struct out *o = ud;
    o->r = *r;
    o->done = true;
    o->done_step = o->e ? engine_n_forward(o->e) : 0;
}
static void on_logits(void *ud, const float *l, size_t n) {
    struct out *o = ud;
    o->lhash = test_hash_f32(o->lhash, l, n);
    o->n_logits++;
}

static struct dj_request_params req(const dj_token *p, size_t n, size_t max_tokens, struct out *o) {
    struct dj_request_params rp = engine_default_request();
    rp.prompt = p;
    rp.n_prompt = n;
    rp.max_tokens = max_tokens;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.on_logits = on_logits;
    rp.ud = o;
    memset(o, 0, sizeof *o);
    o->lhash = DJ_FNV_OFFSET;
    return rp;
}

static struct dj_engine *mk(const struct dj_model *m, uint32_t n_batch, uint32_t n_ubatch, int threads,
                            uint32_t pool_blocks, uint32_t n_ctx) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = n_ctx ? n_ctx : 1024;
    ep.n_batch = n_batch;
    ep.n_ubatch = n_ubatch;
    ep.n_threads = threads;
    ep.opt.block_size = 16;
    ep.opt.dedup_pool_max = pool_blocks ? pool_blocks : 4096;
    ep.gpu = g_gpu;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

static bool same(const struct out *a, const struct out *b) {
    return a->n == b->n && !memcmp(a->tok, b->tok, a->n * sizeof *a->tok) && a->lhash == b->lhash &&
           a->n_logits == b->n_logits && a->n_text == b->n_text && !memcmp(a->text, b->text, a->n_text) &&
           a->r.finish == b->r.finish;
}

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static size_t pinned(struct dj_engine *e) {
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    return ps.pinned;
}

/* ---- batched == alone ------------------------------------------------------- */

struct spec {
    dj_token prompt[300];
    size_t n;
    struct dj_sampler_params sp;
    size_t max_tokens;
};

struct submitter {
    struct dj_engine *e;
    struct spec *sp;
    struct out *o;
    int from, to;
};

static void *submit_thread(void *arg) {
    struct submitter *s = arg;
    for (int i = s->from; i < s->to; i++) {
        struct dj_request_params rp = req(s->sp[i].prompt, s->sp[i].n, s->sp[i].max_tokens, &s->o[i]);
        s->o[i].e = NULL;
        rp.sampling = s->sp[i].sp;
        if (engine_submit(s->e, &rp, NULL) != DJ_OK) return (void *)1;
    }
    return NULL;
}

static void test_batched_equals_alone(const struct dj_model *m) {
    const int N = 12;
    static struct spec sp[MAX_REQ];
    static struct out alone[MAX_REQ], batched[MAX_REQ];
    for (int i = 0; i < N; i++) {
        sp[i].n = 5 + rnd(250);
        for (size_t k = 0; k < sp[i].n; k++) sp[i].prompt[k] = (dj_token)rnd(m->hp.n_vocab);
        if (i % 3 == 1) sp[i].prompt[0] = sp[0].prompt[0]; /* a shared first token */
        sp[i].sp = sampler_default_params();
        sp[i].sp.temp = i % 4 == 0 ? 0.0f : 0.7f + 0.1f * (float)(i % 3);
        sp[i].sp.seed = 1000 + (uint64_t)i;
        sp[i].max_tokens = 8 + rnd(24);
    }
    uint64_t n_fwd_alone = 0;
    for (int i = 0; i < N; i++) {
        struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
        struct dj_request_params rp = req(sp[i].prompt, sp[i].n, sp[i].max_tokens, &alone[i]);
        rp.sampling = sp[i].sp;
        CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
        engine_run_all(e);
        CHECK(alone[i].done && alone[i].n > 0);
        n_fwd_alone += engine_n_forward(e);
        engine_destroy(e);
    }
    /* configurations: all at once; chunked prefill of 16 with ubatch 7 on 2 threads; staggered;
     * a second thread submitting while this one steps */
    for (int cfg = 0; cfg < 4; cfg++) {
        struct dj_engine *e = cfg == 0 ? mk(m, 0, 0, 1, 0, 0) : cfg == 1 ? mk(m, 16, 7, 2, 0, 0)
                              : cfg == 2 ? mk(m, 48, 32, 2, 0, 0) : mk(m, 64, 64, 1, 0, 0);
        if (cfg < 2) {
            for (int i = 0; i < N; i++) {
                struct dj_request_params rp = req(sp[i].prompt, sp[i].n, sp[i].max_tokens, &batched[i]);
                rp.sampling = sp[i].sp;
                CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
            }
            engine_run_all(e);
        } else if (cfg == 2) {
            int next = 0;
            while (next < N || engine_n_pending(e)) {
                if (next < N && rnd(3) == 0) {
                    struct dj_request_params rp = req(sp[next].prompt, sp[next].n, sp[next].max_tokens, &batched[next]);
                    rp.sampling = sp[next].sp;
                    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
                    next++;
                }
                engine_step(e);
            }
        } else {
            for (int i = 0; i < N; i++) batched[i].done = false;
            struct submitter sb = {e, sp, batched, 0, N};
            pthread_t th;
            CHECK(pthread_create(&th, NULL, submit_thread, &sb) == 0);
            int spins = 0;
            for (;;) {
                if (engine_n_pending(e) == 0) {
                    bool all = true;
                    for (int i = 0; i < N; i++) all = all && batched[i].done;
                    if (all || spins++ > 2000) break;
                    engine_wait_work(e, 5);
                }
                engine_step(e);
            }
            void *rv;
            pthread_join(th, &rv);
            CHECK(rv == NULL);
        }
        int n_same = 0;
        for (int i = 0; i < N; i++) {
            const bool ok = same(&alone[i], &batched[i]);
            n_same += ok;
            CHECKF(ok, "config %d request %d: %zu vs %zu tokens, logits %016llx vs %016llx", cfg, i, alone[i].n,
                   batched[i].n, (unsigned long long)alone[i].lhash, (unsigned long long)batched[i].lhash);
        }
        if (cfg == 0)
            CHECKF(engine_n_forward(e) < n_fwd_alone / 2, "batched %llu passes vs %llu alone: not batching",
                   (unsigned long long)engine_n_forward(e), (unsigned long long)n_fwd_alone);
        printf("batched config %d: %d/%d requests bitwise equal to alone, %llu forward passes (alone: %llu)\n", cfg,
               n_same, N, (unsigned long long)engine_n_forward(e), (unsigned long long)n_fwd_alone);
        engine_park_idle(e);
        CHECK(pinned(e) == 0);
        engine_destroy(e);
    }
}

/* ---- reuse == cold ------------------------------------------------------------- */

/* A prompt that extends an earlier request's (prompt + output) reuses its blocks: the
 * continuation is bitwise what a fresh engine computes for it (greedy and seeded). */
static void test_reuse_cold(const struct dj_model *m) {
    static dj_token p[400];
    static struct out first, warm, cold;
    for (int trial = 0; trial < 2; trial++) {
        const size_t n1 = 100 + rnd(60), n2 = n1 + 20 + rnd(60);
        for (size_t k = 0; k < n2; k++) p[k] = (dj_token)rnd(m->hp.n_vocab);
        struct dj_sampler_params sp = sampler_default_params();
        sp.temp = trial ? 0.8f : 0.0f;
        sp.seed = 77 + (uint64_t)trial;
        struct dj_engine *e = mk(m, 0, 0, 1, 0, 0), *f = mk(m, 0, 0, 1, 0, 0);
        if (!e || !f) {
            engine_destroy(e);
            engine_destroy(f);
            return;
        }
        struct dj_request_params rp = req(p, n1, 8, &first);
        rp.sampling = sp;
        CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
        engine_run_all(e);
        rp = req(p, n2, 16, &warm);
        rp.sampling = sp;
        CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
        engine_run_all(e);
        rp = req(p, n2, 16, &cold);
        rp.sampling = sp;
        CHECK(engine_submit(f, &rp, NULL) == DJ_OK);
        engine_run_all(f);
        CHECKF(warm.r.n_cached >= 16 && cold.r.n_cached == 0, "trial %d: %zu positions reused warm, %zu cold", trial,
               warm.r.n_cached, cold.r.n_cached);
        CHECKF(same(&warm, &cold), "trial %d: the reusing request differs from a fresh engine's (%zu vs %zu tokens)",
               trial, warm.n, cold.n);
        printf("reuse == cold (%s): %zu of %zu prompt positions reused, %zu tokens and their logits bitwise equal\n",
               trial ? "seeded" : "greedy", warm.r.n_cached, n2, warm.n);
        engine_destroy(e);
        engine_destroy(f);
    }
}

/* ---- stop strings ----------------------------------------------------------- */

static void test_stop_strings(const struct dj_model *m, const dj_token *p, size_t np) {
    struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
    static struct out ref, o;
    struct dj_request_params rp = req(p, np, 48, &ref);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    ref.text[ref.n_text] = 0;
    /* a stop string across the boundary of tokens k and k+1 (pieces of >= 2 bytes) */
    size_t found = 0;
    char stop[16] = {0};
    for (size_t k = 0; k + 1 < ref.n && !found; k++) {
        char a[64], b[64];
        const size_t la = vocab_token_to_piece(m->vocab, ref.tok[k], false, a, sizeof a);
        const size_t lb = vocab_token_to_piece(m->vocab, ref.tok[k + 1], false, b, sizeof b);
        if (k >= 3 && la >= 2 && lb >= 2 && la < 64 && lb < 64) {
            memcpy(stop, a + la - 2, 2);
            memcpy(stop + 2, b, 2);
            found = 1;
        }
    }
    CHECK(found);
    const char *hit = strstr(ref.text, stop);
    CHECK(hit != NULL);
    const char *stops[] = {"never-appears-xyz", stop};
    rp = req(p, np, 48, &o);
    rp.ignore_eos = true;
    rp.stop = stops;
    rp.n_stop = 2;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECKF(o.r.finish == DJ_FINISH_STOP && o.r.stop_index == 1, "finish %d stop %d", o.r.finish, o.r.stop_index);
    CHECKF(hit && o.n_text == (size_t)(hit - ref.text) && !memcmp(o.text, ref.text, o.n_text),
           "text before the stop: %zu bytes, expected %zu", o.n_text, hit ? (size_t)(hit - ref.text) : 0);
    CHECK(o.n < ref.n && !memcmp(o.tok, ref.tok, o.n * sizeof *o.tok));
    printf("stop string '%s' across tokens: %zu bytes emitted, %zu tokens\n", stop, o.n_text, o.n);
    engine_destroy(e);
}

/* ---- cancellation ----------------------------------------------------------- */

static void test_cancel(const struct dj_model *m, const dj_token *p, size_t np) {
    struct dj_engine *e = mk(m, 16, 16, 1, 0, 0);
    static struct out o, o2;
    /* mid-prefill */
    uint64_t id;
    struct dj_request_params rp = req(p, np, 20, &o);
    CHECK(engine_submit(e, &rp, &id) == DJ_OK);
    engine_step(e);
    engine_step(e);
    CHECK(!o.done && o.n == 0 && pinned(e) > 0);
    engine_cancel(e, id);
    engine_step(e);
    CHECKF(o.done && o.r.finish == DJ_FINISH_CANCELLED, "finish %d", o.r.finish);
    CHECKF(pinned(e) == 0, "%zu blocks pinned after cancelling mid-prefill", pinned(e));
    CHECK(engine_n_pending(e) == 0);
    /* the blocks it filled stay cached: the same prompt reuses them */
    rp = req(p, np, 4, &o2);
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECKF(o2.r.n_reused_pool >= 16, "reused %zu positions after the cancel", o2.r.n_reused_pool);
    /* mid-decode */
    rp = req(p, np, 40, &o);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, &id) == DJ_OK);
    while (o.n < 5) engine_step(e);
    engine_cancel(e, id);
    engine_cancel(e, 999999); /* unknown: ignored */
    engine_step(e);
    CHECKF(o.done && o.r.finish == DJ_FINISH_CANCELLED && o.n < 40, "finish %d after %zu tokens", o.r.finish, o.n);
    engine_park_idle(e);
    CHECKF(pinned(e) == 0, "%zu blocks pinned after cancelling mid-decode", pinned(e));
    /* cancel while waiting in the queue (never admitted) */
    rp = req(p, np, 4, &o);
    CHECK(engine_submit(e, &rp, &id) == DJ_OK);
    engine_cancel(e, id);
    engine_step(e);
    CHECK(o.done && o.r.finish == DJ_FINISH_CANCELLED && o.n == 0);
    CHECK(pinned(e) == 0 && engine_n_pending(e) == 0);
    engine_destroy(e);
}

/* ---- admission ---------------------------------------------------------------- */

static void test_admission(const struct dj_model *m, const dj_token *p) {
    /* 16 blocks of 16 positions; a 100-token prompt + 40 generated reserves 10 */
    struct dj_engine *e = mk(m, 0, 0, 1, 16, 0);
    static struct out a, b, ra, rb;
    struct dj_request_params rp = req(p, 100, 40, &a);
    rp.ignore_eos = true;
    a.e = e;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    rp = req(p + 50, 100, 40, &b);
    rp.ignore_eos = true;
    b.e = e;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECK(a.done && b.done && a.r.finish == DJ_FINISH_LENGTH && b.r.finish == DJ_FINISH_LENGTH);
    CHECKF(b.first_step >= a.done_step, "b started at pass %llu before a finished at %llu",
           (unsigned long long)b.first_step, (unsigned long long)a.done_step);
    /* a request that can never fit fails at once */
    static struct out c;
    rp = req(p, 290, 10, &c);
    CHECK(engine_submit(e, &rp, NULL) == DJ_ERR_NOMEM && strstr(dj_last_error(), "KV budget"));
    CHECK(!c.done);
    engine_destroy(e);
    /* the same requests on a big engine, alone: same tokens */
    e = mk(m, 0, 0, 1, 0, 0);
    rp = req(p, 100, 40, &ra);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    rp = req(p + 50, 100, 40, &rb);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECK(same(&a, &ra) && same(&b, &rb));
    engine_destroy(e);
    printf("admission: the second request waited for the first (passes %llu >= %llu)\n",
           (unsigned long long)b.first_step, (unsigned long long)a.done_step);
}

/* ---- n > 1 --------------------------------------------------------------------- */

static struct out multi[4];
static void multi_token(void *ud, const struct dj_token_event *ev) { on_token(&multi[ev->index], ev); }
static void multi_done(void *ud, const struct dj_turn_result *r) { on_done(&multi[r->index], r); }

static void test_n_completions(const struct dj_model *m, const dj_token *p, size_t np) {
    struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
    struct dj_request_params rp = engine_default_request();
    memset(multi, 0, sizeof multi);
    rp.prompt = p;
    rp.n_prompt = np;
    rp.max_tokens = 12;
    rp.n = 3;
    rp.ignore_eos = true;
    rp.sampling.temp = 1.0f;
    rp.sampling.seed = 7;
    rp.on_token = multi_token;
    rp.on_done = multi_done;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    CHECKF(ps.cow_copies >= 2, "%llu copies on write: the completions did not share the prompt",
           (unsigned long long)ps.cow_copies);
    uint32_t peak_alloc, peak_pin;
    engine_peak_blocks(e, &peak_alloc, &peak_pin);
    const uint32_t prompt_blocks = (uint32_t)(np / 16);
    CHECKF(peak_alloc < 3 * prompt_blocks, "peak %u blocks for 3 completions of %u prompt blocks", peak_alloc,
           prompt_blocks);
    engine_destroy(e);
    for (uint32_t i = 0; i < 3; i++) {
        static struct out one;
        e = mk(m, 0, 0, 1, 0, 0);
        struct dj_request_params r1 = req(p, np, 12, &one);
        r1.ignore_eos = true;
        r1.sampling.temp = 1.0f;
        r1.sampling.seed = i ? dj_rng_u64(7, i) : 7;
        CHECK(engine_submit(e, &r1, NULL) == DJ_OK);
        engine_run_all(e);
        CHECKF(one.n == multi[i].n && !memcmp(one.tok, multi[i].tok, one.n * sizeof(dj_token)),
               "completion %u differs from a single request with its seed", i);
        engine_destroy(e);
    }
    CHECK(memcmp(multi[0].tok, multi[1].tok, 12 * sizeof(dj_token)) ||
          memcmp(multi[0].tok, multi[2].tok, 12 * sizeof(dj_token)));
}

/* ---- logits processors ------------------------------------------------------ */

struct proc_state {
    const dj_token *allow; /* NULL: no mask */
    size_t n_allow;
    const dj_token *force; /* forced after the first accepted token */
    size_t n_force;
    size_t n_accepted;
    bool forced_done;
    dj_token only_at3; /* >= 0: at output position 3 only this token is allowed */
};

static enum dj_status proc_apply(void *ud, float *l, size_t n) {
    struct proc_state *s = ud;
    if (s->only_at3 >= 0 && s->n_accepted == 3) {
        for (size_t i = 0; i < n; i++)
            if ((dj_token)i != s->only_at3) l[i] = -INFINITY;
        return DJ_OK;
    }
    if (!s->allow) return DJ_OK;
    for (size_t i = 0; i < n; i++) {
        bool ok = false;
        for (size_t k = 0; k < s->n_allow; k++) ok = ok || s->allow[k] == (dj_token)i;
        if (!ok) l[i] = -INFINITY;
    }
    return DJ_OK;
}
static enum dj_status proc_accept(void *ud, dj_token t) {
    struct proc_state *s = ud;
    s->n_accepted++;
    return DJ_OK;
}
static size_t proc_forced(void *ud, dj_token *buf, size_t cap) {
    struct proc_state *s = ud;
    if (!s->force || s->forced_done || s->n_accepted != 1) return 0;
    s->forced_done = true;
    const size_t n = s->n_force < cap ? s->n_force : cap;
    memcpy(buf, s->force, n * sizeof *buf);
    return n;
}

static void test_processor(const struct dj_model *m, const dj_token *p, size_t np) {
    struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
    static struct out ref, o;
    struct dj_request_params rp = req(p, np, 20, &ref);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    const uint64_t f0 = engine_n_forward(e);
    /* forcing exactly what greedy decoding produces at positions 1..5: the same tokens, 5 passes fewer */
    struct proc_state st = {NULL, 0, ref.tok + 1, 5, 0, false, -1};
    struct dj_logits_processor proc = {&st, proc_apply, proc_accept, proc_forced, NULL, NULL, NULL, NULL};
    rp = req(p, np, 20, &o);
    rp.ignore_eos = true;
    rp.proc = &proc;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECK(o.n == ref.n && !memcmp(o.tok, ref.tok, ref.n * sizeof(dj_token)));
    CHECKF(o.r.n_forced == 5 && o.n_logits == ref.n_logits - 5, "forced %zu, %zu logits vs %zu", o.r.n_forced,
           o.n_logits, ref.n_logits);
    CHECKF(engine_n_forward(e) - f0 < f0, "%llu passes with forcing vs %llu", (unsigned long long)(engine_n_forward(e) - f0),
           (unsigned long long)f0);
    CHECK(o.n_text == ref.n_text && !memcmp(o.text, ref.text, o.n_text));
    /* the same with seeded sampling: the draws after the forced tokens are those of plain
     * decoding (the draw of output position i depends on (seed, i) only) */
    static struct out sref;
    rp = req(p, np, 20, &sref);
    rp.ignore_eos = true;
    rp.sampling.temp = 1.0f;
    rp.sampling.seed = 99;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    struct proc_state ss = {NULL, 0, sref.tok + 1, 5, 0, false, -1};
    proc.ud = &ss;
    rp = req(p, np, 20, &o);
    rp.ignore_eos = true;
    rp.sampling.temp = 1.0f;
    rp.sampling.seed = 99;
    rp.proc = &proc;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECK(o.n == sref.n && !memcmp(o.tok, sref.tok, sref.n * sizeof(dj_token)) && o.r.n_forced == 5);
    /* a mask: only these tokens */
    const dj_token allow[3] = {ref.tok[3], 185, 207};
    struct proc_state sm = {allow, 3, NULL, 0, 0, false, -1};
    proc.ud = &sm;
    rp = req(p, np, 10, &o);
    rp.ignore_eos = true;
    rp.proc = &proc;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    bool in = o.n == 10;
    for (size_t i = 0; i < o.n; i++) in = in && (o.tok[i] == allow[0] || o.tok[i] == allow[1] || o.tok[i] == allow[2]);
    CHECK(in);
    /* end of generation: EOS forced by the mask at position 3 stops, its text is not emitted */
    const dj_token eos = vocab_eos(m->vocab);
    struct proc_state se = {NULL, 0, NULL, 0, 0, false, eos};
    proc.ud = &se;
    rp = req(p, np, 20, &o);
    rp.proc = &proc;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECKF(o.r.finish == DJ_FINISH_STOP && o.n == 4 && o.tok[3] == eos && o.r.stop_index == -1, "finish %d n %zu",
           o.r.finish, o.n);
    CHECK(!strstr(o.text, "end"));
    /* ... unless ignore_eos */
    se.n_accepted = 0;
    rp = req(p, np, 8, &o);
    rp.proc = &proc;
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECK(o.r.finish == DJ_FINISH_LENGTH && o.n == 8 && o.tok[3] == eos);
    /* a processor failure fails the request with its message */
    engine_destroy(e);
}

/* ---- logprobs, context limit, prefix matching ------------------------------- */

static void test_misc(const struct dj_model *m, const dj_token *p, size_t np) {
    struct dj_engine *e = mk(m, 0, 0, 1, 0, 64);
    static struct out o, o2;
    struct dj_request_params rp = req(p, 60, 100, &o);
    rp.ignore_eos = true;
    rp.logprobs = true;
    rp.n_probs = 5;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECKF(o.r.finish == DJ_FINISH_LENGTH && o.n == 5, "context limit: %zu tokens, finish %d", o.n, o.r.finish);
    bool lp_ok = true;
    for (size_t i = 0; i < o.n; i++) {
        lp_ok = lp_ok && o.n_top[i] == 5 && o.top[i][0].tok == o.tok[i] && o.lp[i] == o.top[i][0].logprob &&
                o.lp[i] <= 0.0f;
        for (size_t k = 1; k < 5; k++) lp_ok = lp_ok && o.top[i][k].logprob <= o.top[i][k - 1].logprob;
    }
    CHECK(lp_ok);
    /* prompt too long for the context: refused at submit */
    rp = req(p, 64, 4, &o2);
    CHECK(engine_submit(e, &rp, NULL) == DJ_ERR_INVALID && strstr(dj_last_error(), "context"));
    engine_destroy(e);

    /* a session-less request finds the idle sequence that shares its prefix */
    e = mk(m, 0, 0, 1, 0, 0);
    dj_token p2[400];
    memcpy(p2, p, np * sizeof *p2);
    rp = req(p, 40, 6, &o);
    rp.ignore_eos = true;
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    memcpy(p2 + 40, o.tok, 5 * sizeof *p2); /* the previous turn and its answer, then more */
    rp = req(p2, 40 + 5 + 20, 4, &o2);
    p2[45] = p[200]; /* something new */
    CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    engine_run_all(e);
    CHECKF(o2.r.n_reused_own == 45 && o2.r.n_computed == 20, "own %zu computed %zu", o2.r.n_reused_own,
           o2.r.n_computed);
    engine_destroy(e);
}

/* ---- cache_salt: namespaces that share no KV ---------------------------------- */

/* The same prompt under no salt, salt "a", "a" again, "b", and none again: a salted request
 * reuses nothing from another namespace (own sequences or pool blocks), reuses its own
 * namespace's as usual, and every run gives bitwise the tokens and logits of the cold one —
 * greedy and with seeded sampling. */
static void test_cache_salt(const struct dj_model *m, const dj_token *p) {
    for (int sampled = 0; sampled < 2; sampled++) {
        struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
        static struct out o[6];
        const char *salt[6] = {NULL, "a", "a", "b", NULL, "b"};
        for (int i = 0; i < 6; i++) {
            struct dj_request_params rp = req(p, 100, 6, &o[i]);
            rp.ignore_eos = true;
            rp.cache_salt = salt[i];
            if (sampled) {
                rp.sampling.temp = 0.9f;
                rp.sampling.seed = 1234;
            }
            if (i == 5) rp.n = 2; /* two completions (one record: only its reuse is checked) */
            CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
            engine_run_all(e);
            CHECKF(i == 5 || same(&o[i], &o[0]), "run %d (salt %s, sampled %d) differs from the cold run", i,
                   salt[i] ? salt[i] : "-", sampled);
        }
        const size_t r1 = o[1].r.n_reused_own + o[1].r.n_reused_pool, r2 = o[2].r.n_reused_own + o[2].r.n_reused_pool;
        const size_t r3 = o[3].r.n_reused_own + o[3].r.n_reused_pool, r4 = o[4].r.n_reused_own + o[4].r.n_reused_pool;
        const size_t r5 = o[5].r.n_reused_own + o[5].r.n_reused_pool;
        CHECKF(r1 == 0 && r3 == 0, "a new salt reused %zu / %zu tokens of another namespace", r1, r3);
        CHECKF(r2 == 99 && r4 == 99 && r5 == 99, "same namespace reused %zu, %zu, %zu of 99", r2, r4, r5);
        engine_destroy(e);
    }
    /* a salt on a named session is refused */
    struct dj_engine *e = mk(m, 0, 0, 1, 0, 0);
    struct dj_session *ses = NULL;
    CHECK(engine_session_create(e, &ses) == DJ_OK);
    static struct out x;
    struct dj_request_params rp = req(p, 10, 2, &x);
    rp.session = ses;
    rp.cache_salt = "a";
    CHECK(engine_submit(e, &rp, NULL) == DJ_ERR_INVALID && strstr(dj_last_error(), "cache_salt"));
    engine_destroy(e);
}

/* ---- a cap on running requests ----------------------------------------------- */

static int n_live, n_live_max;
static struct out capped[4];
static void cap_token(void *ud, const struct dj_token_event *ev) {
    if (ev->pos == 0 && ++n_live > n_live_max) n_live_max = n_live;
    on_token(ud, ev);
}
static void cap_done(void *ud, const struct dj_turn_result *r) {
    n_live--;
    on_done(ud, r);
}

static void test_running_cap(const struct dj_model *m, const dj_token *p) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 512;
    ep.n_running_max = 2;
    struct dj_engine *e = NULL;
    CHECK(engine_create(m, &ep, &e) == DJ_OK);
    for (int i = 0; i < 4; i++) {
        struct dj_request_params rp = req(p + 10 * i, 30, 6, &capped[i]);
        rp.ignore_eos = true;
        rp.on_token = cap_token;
        rp.on_done = cap_done;
        CHECK(engine_submit(e, &rp, NULL) == DJ_OK);
    }
    engine_run_all(e);
    CHECKF(n_live_max == 2, "%d requests ran at once with n_running_max 2", n_live_max);
    for (int i = 0; i < 4; i++) CHECK(capped[i].done && capped[i].n == 6);
    engine_destroy(e);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    struct dj_model *m = NULL;
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    if (g_gpu) { /* the engine on a Vulkan device: stories260K (lavapipe is slow) */
        CHECKF(model_load(test_shared_path(argv[1], "models/stories260K.gguf"), &m) == DJ_OK, "%s", dj_last_error());
        if (!m) TEST_END();
        test_batched_equals_alone(m);
        test_reuse_cold(m);
        /* what the GPU path does not run yet is refused, not run on the CPU */
        struct dj_engine_params ep = engine_default_params();
        ep.gpu = g_gpu;
        ep.spec.sources = DJ_SPEC_BIT(DJ_SPEC_MTP);
        struct dj_engine *e = NULL;
        CHECKF(engine_create(m, &ep, &e) == DJ_ERR_UNSUPPORTED && !e && strstr(dj_last_error(), "MTP"), "%s",
               dj_last_error());
        model_free(m);
        TEST_END();
    }
    const char *path = test_shared_path(argv[1], "models/codelm-15m-f16.gguf");
    CHECKF(model_load(path, &m) == DJ_OK, "%s", dj_last_error());
    if (!m) TEST_END();
    static const char *code =
        "import json\nimport os\n\n\ndef load_config(path):\n    \"\"\"Load a JSON config file.\"\"\"\n"
        "    with open(path) as f:\n        return json.load(f)\n\n\nclass Server:\n    def __init__(self, host, port):\n"
        "        self.host = host\n        self.port = port\n        self.routes = {}\n\n    def route(self, path):\n"
        "        def wrap(fn):\n            self.routes[path] = fn\n            return fn\n        return wrap\n\n"
        "    def handle(self, request):\n        fn = self.routes.get(request.path)\n        if fn is None:\n"
        "            return 404, 'not found'\n        return 200, fn(request)\n\n\ndef main():\n    cfg = load_config('x')\n";
    dj_token *p = NULL;
    size_t np = 0;
    char two[4096];
    snprintf(two, sizeof two, "%s%s", code, code);
    CHECK(vocab_tokenize(m->vocab, two, strlen(two), true, false, &p, &np) == DJ_OK);
    CHECKF(np >= 300, "%zu prompt tokens", np);
    if (np > 300) np = 300;
    test_batched_equals_alone(m);
    test_reuse_cold(m);
    test_stop_strings(m, p, 120);
    test_cancel(m, p, np);
    test_admission(m, p);
    test_n_completions(m, p, 100);
    test_processor(m, p, 80);
    test_misc(m, p, np);
    test_running_cap(m, p);
    test_cache_salt(m, p);
    free(p);
    model_free(m);
    /* Multi-head Latent Attention (a K-only pool): batched == alone, greedy and seeded, in every
     * K/V type its 40-wide row takes (q8_0 / q4_0 are refused: checked in test_mla_golden) */
    m = NULL;
    CHECKF(model_load(test_shared_path(argv[1], "golden/moe/deepseek2-lite-tiny.gguf"), &m) == DJ_OK, "%s",
           dj_last_error());
    if (m && model_kv_check(m, kv_type_default(), kv_type_default()) == DJ_OK) {
        test_batched_equals_alone(m);
        printf("deepseek2-lite-tiny: batched == alone\n");
    } else if (m) {
        printf("deepseek2-lite-tiny: K/V type %s does not fit its 40-wide row: skipped\n", dj_type_name(kv_type_default()));
    }
    model_free(m);
    TEST_END();
}
