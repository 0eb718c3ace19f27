/*
 * test_spec.c — speculative decoding is exact (spec/spec.h, engine/sched.c):
 * on codelm, with every draft source alone and together (prompt lookup, the
 * output memo), with the adaptive policy and with fixed longest drafts,
 * greedy, seeded sampling, penalties and n = 2 completions, requests alone
 * and batched together (all the sources in each of those four modes, each
 * other set of sources in one or two of them): the tokens, the text and every logits vector the
 * request reports (the verified positions) are bitwise those of plain
 * decoding — and drafts were really fed and accepted (fewer forward passes),
 * so the comparison is not vacuous.  Also: teacher forcing with drafts
 * (the simulation mode of `replay --teacher-force`) reports what it reports
 * without them; a cache salt keeps a request away from the memo; the memo
 * stays within LLAMA_OPT_MEMO_TRIE_MAX nodes.
 * The same exactness on `deja synth --preset tiny` glm4moe (MoE with shared experts,
 * partial rope), mistral3 (YaRN, query temperature scaling) and gpt-oss (sliding windows,
 * sinks, biased experts) files (check_arch):
 * greedy, seeded n = 2 and penalized requests, lookup + memo drafts (fixed and
 * adaptive, alone and batched) and lookup + memo + early exit (adaptive).
 *
 * With DJ_TEST_GPU=N (CTest's model/test_spec_vulkan_f16: Vulkan device 0, lavapipe in CI)
 * the engines run on that device, on stories260K (lavapipe is slow) with a prompt that
 * repeats a story: lookup + memo drafts, fixed and adaptive, alone and batched, greedy and
 * seeded — speculative = plain on the GPU; exit 77 (SKIP) without a device.
 */
#include "core/hash.h"
#include "engine/engine.h"
#include "engine/trace.h"
#include "test.h"
#include "test_gpu.h"
#include "test_run.h"

enum { MAX_GEN = 64, N_REQ = 6 };

struct out {
    dj_token tok[2][MAX_GEN];
    size_t n[2];
    uint64_t lhash, lsum; /* ordered hash over every logits vector; order-free sum of their hashes */
    size_t n_logits;
    char text[2][4096];
    size_t n_text[2];
    struct dj_turn_result r[2];
    int n_done;
};

static void on_token(void *ud, const struct dj_token_event *ev) {
    struct out *o = ud;
    const uint32_t c = ev->index;
    if (c < 2 && o->n[c] < MAX_GEN) o->tok[c][o->n[c]++] = ev->tok;
    if (c < 2 && o->n_text[c] + ev->n_text < sizeof o->text[c]) {
        memcpy(o->text[c] + o->n_text[c], ev->text, ev->n_text);
        o->n_text[c] += ev->n_text;
    }
}
static void on_done(void *ud, const struct dj_turn_result *r) {
    struct out *o = ud;
    if (r->index < 2) o->r[r->index] = *r;
    o->n_done++;
}
/* With n = 2 the completions' vectors interleave step by step, and a draft moves one
 * completion several positions in one step: the order differs from plain decoding while
 * each completion's own vectors do not.  So: an ordered hash (compared for n = 1) and a
 * sum of per-vector hashes (compared always). */
static void on_logits(void *ud, const float *l, size_t n) {
    struct out *o = ud;
    o->lhash = test_hash_f32(o->lhash, l, n);
    o->lsum += test_hash_f32(DJ_FNV_OFFSET, l, n);
    o->n_logits++;
}

struct rq {
    const dj_token *prompt;
    size_t n;
    struct dj_sampler_params sp;
    size_t max_tokens;
    uint32_t n_comp;
    const char *salt;
};

static uint32_t exit_layer; /* 0: auto */
static uint32_t g_gpu;      /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

static struct dj_engine *mk(const struct dj_model *m, unsigned sources, bool adaptive) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 2048;
    ep.opt.block_size = 16;
    ep.opt.dedup_pool_max = 4096;
    ep.spec.sources = sources;
    ep.spec.adaptive = adaptive;
    ep.spec.draft_max = 12;
    ep.spec.exit_layer = exit_layer;
    ep.gpu = g_gpu;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

static void submit_forced(struct dj_engine *e, const struct rq *q, struct out *o, uint64_t seed_delta,
                          const dj_token *force) {
    memset(o, 0, sizeof *o);
    o->lhash = DJ_FNV_OFFSET;
    struct dj_request_params rp = engine_default_request();
    rp.prompt = q->prompt;
    rp.n_prompt = q->n;
    rp.max_tokens = q->max_tokens;
    rp.sampling = q->sp;
    rp.sampling.seed += seed_delta;
    rp.n = q->n_comp;
    rp.ignore_eos = true;
    rp.cache_salt = q->salt;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.on_logits = on_logits;
    rp.ud = o;
    rp.force = force;
    CHECKF(engine_submit(e, &rp, NULL) == DJ_OK, "%s", dj_last_error());
}

static void submit(struct dj_engine *e, const struct rq *q, struct out *o, uint64_t seed_delta) {
    submit_forced(e, q, o, seed_delta, NULL);
}

static bool same(const struct out *a, const struct out *b, uint32_t n_comp) {
    bool ok = a->lsum == b->lsum && (n_comp > 1 || a->lhash == b->lhash) && a->n_logits == b->n_logits;
    for (uint32_t c = 0; c < n_comp; c++)
        ok = ok && a->n[c] == b->n[c] && !memcmp(a->tok[c], b->tok[c], a->n[c] * sizeof(dj_token)) &&
             a->n_text[c] == b->n_text[c] && !memcmp(a->text[c], b->text[c], a->n_text[c]) &&
             a->r[c].finish == b->r[c].finish;
    return ok;
}

/* The reference: every request alone on a fresh engine, no speculation. */
static void run_plain(const struct dj_model *m, const struct rq *q, size_t nq, struct out *ref, uint64_t *passes) {
    for (size_t i = 0; i < nq; i++) {
        struct dj_engine *e = mk(m, 0, true);
        submit(e, &q[i], &ref[i], 0);
        engine_run_all(e);
        CHECK(ref[i].n_done == (int)q[i].n_comp && ref[i].n[0] == q[i].max_tokens);
        passes[i] = engine_n_forward(e);
        engine_destroy(e);
    }
}

/* Speculation with `sources`: warm-up requests first (the memo records their outputs; the
 * sampled ones with other seeds, so their outputs agree with the measured ones only in
 * part), then the measured requests, alone (one at a time) or all batched together. */
static void run_spec(const struct dj_model *m, const struct rq *q, size_t nq, const struct out *ref,
                     const uint64_t *ref_passes, unsigned sources, bool adaptive, bool batched) {
    static struct out warm[N_REQ], o[N_REQ];
    struct dj_engine *e = mk(m, sources, adaptive);
    for (size_t i = 0; i < nq; i++) submit(e, &q[i], &warm[i], q[i].sp.temp > 0 ? 100 : 0);
    engine_run_all(e);
    struct dj_spec_counts before;
    engine_spec_counts(e, &before, NULL, NULL);
    const uint64_t f0 = engine_n_forward(e);
    uint64_t passes = 0, plain = 0;
    for (size_t i = 0; i < nq; i++) {
        submit(e, &q[i], &o[i], 0);
        if (!batched) {
            const uint64_t f = engine_n_forward(e);
            engine_run_all(e);
            passes += engine_n_forward(e) - f;
            plain += ref_passes[i];
        }
    }
    if (batched) engine_run_all(e);
    struct dj_spec_counts after;
    uint32_t nodes = 0;
    engine_spec_counts(e, &after, &nodes, NULL);
    uint64_t acc[DJ_SPEC_N_SRC], drafted = 0;
    for (int s = 0; s < DJ_SPEC_N_SRC; s++) {
        acc[s] = after.accepted[s] - before.accepted[s];
        drafted += after.drafted[s] - before.drafted[s];
    }
    int n_same = 0;
    for (size_t i = 0; i < nq; i++) {
        const bool ok = same(&ref[i], &o[i], q[i].n_comp);
        n_same += ok;
        CHECKF(ok, "sources %#x adaptive %d batched %d request %zu: %zu vs %zu tokens, logits %016llx vs %016llx (%zu vs "
               "%zu vectors)",
               sources, adaptive, batched, i, ref[i].n[0], o[i].n[0], (unsigned long long)ref[i].lhash,
               (unsigned long long)o[i].lhash, ref[i].n_logits, o[i].n_logits);
    }
    /* the drafts were real: each source asked for accepted some, and alone they saved passes */
    if (sources & DJ_SPEC_BIT(DJ_SPEC_LOOKUP))
        CHECKF(acc[DJ_SPEC_LOOKUP] > 0, "sources %#x: no lookup draft accepted", sources);
    if (sources & DJ_SPEC_BIT(DJ_SPEC_MEMO))
        CHECKF(acc[DJ_SPEC_MEMO] > 0, "sources %#x: no memo draft accepted", sources);
    /* early exit drafts on codelm do not pay (docs/SPECULATIVE.md): the adaptive policy only probes */
    if ((sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)) && !adaptive)
        CHECKF(acc[DJ_SPEC_EXIT] > 0, "sources %#x: no early-exit draft accepted", sources);
    if (!batched) CHECKF(passes < plain, "sources %#x: %llu passes, plain %llu", sources, (unsigned long long)passes,
                         (unsigned long long)plain);
    printf("sources %-16s %-8s %-7s: %d/%zu requests bitwise equal to plain; drafted %llu, accepted lookup %llu memo "
           "%llu exit %llu; %llu passes (all %llu)%s\n",
           sources == 6 ? "lookup,memo" : sources == 2 ? "lookup" : sources == 4 ? "memo" : sources == 8 ? "exit" : "lookup,memo,exit",
           adaptive ? "adaptive" : "fixed", batched ? "batched" : "alone", n_same, nq, (unsigned long long)drafted,
           (unsigned long long)acc[DJ_SPEC_LOOKUP], (unsigned long long)acc[DJ_SPEC_MEMO], (unsigned long long)acc[DJ_SPEC_EXIT],
           (unsigned long long)passes, (unsigned long long)(engine_n_forward(e) - f0), batched ? "" : " alone");
    engine_destroy(e);
}

/* Teacher forcing (replay --teacher-force): the forced tokens are what the sequence
 * continues with; drafts are checked against them.  Events (the sampled tokens) and
 * logits are those of the same forced run without drafts. */
static void test_forced(const struct dj_model *m, const struct rq *q, const struct out *ref) {
    dj_token force[MAX_GEN];
    memcpy(force, ref->tok[0], q->max_tokens * sizeof *force);
    for (size_t i = 7; i < q->max_tokens; i += 9) force[i] = ref->tok[0][i / 2]; /* the forced text is not the model's */
    static struct out a, b;
    for (int pass = 0; pass < 2; pass++) {
        struct dj_engine *e = mk(m, pass ? DJ_SPEC_BIT(DJ_SPEC_LOOKUP) : 0, false);
        submit_forced(e, q, pass ? &b : &a, 0, force);
        engine_run_all(e);
        engine_destroy(e);
    }
    CHECKF(same(&a, &b, 1), "teacher-forced: logits %016llx vs %016llx", (unsigned long long)a.lhash,
           (unsigned long long)b.lhash);
    CHECKF(b.r[0].spec.accepted[DJ_SPEC_LOOKUP] > 0 && b.r[0].n_drafted > b.r[0].n_draft_accepted,
           "teacher-forced: %zu drafted, %zu accepted (some must be, and some rejected)", b.r[0].n_drafted,
           b.r[0].n_draft_accepted);
    printf("teacher-forced: equal with drafts (%zu drafted, %zu accepted)\n", b.r[0].n_drafted,
           b.r[0].n_draft_accepted);
}

/* A salted request neither reads nor feeds the memo; a small trie stays within its bound. */
static void test_memo_salt_bound(const struct dj_model *m, const struct rq *q) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 2048;
    ep.opt.block_size = 16;
    ep.opt.memo_trie_max = 300;
    ep.spec.sources = DJ_SPEC_BIT(DJ_SPEC_MEMO);
    ep.spec.adaptive = false;
    struct dj_engine *e = NULL;
    CHECK(engine_create(m, &ep, &e) == DJ_OK);
    if (!e) return;
    static struct out o;
    struct rq s = *q;
    s.salt = "tenant-a";
    submit(e, &s, &o, 0);
    engine_run_all(e);
    uint32_t nodes = 1, recs = 1;
    engine_spec_counts(e, NULL, &nodes, &recs);
    CHECKF(nodes == 0 && recs == 0, "a salted output went into the memo (%u nodes)", nodes);
    submit(e, q, &o, 0);
    engine_run_all(e);
    submit(e, &s, &o, 0); /* salted again: the memo holds the same text but must not draft it */
    engine_run_all(e);
    CHECKF(o.r[0].spec.proposed[DJ_SPEC_MEMO] == 0, "a salted request drafted from the memo");
    for (int i = 0; i < 6; i++) {
        struct rq v = *q;
        v.sp.temp = 1.0f;
        v.sp.seed = 50 + (uint64_t)i;
        submit(e, &v, &o, 0);
        engine_run_all(e);
        engine_spec_counts(e, NULL, &nodes, &recs);
        CHECKF(nodes <= 300, "memo: %u nodes, bound 300", nodes);
    }
    CHECKF(recs >= 1 && recs < 7, "memo: %u records after 7 outputs of %zu tokens in 300 nodes", recs, q->max_tokens);
    engine_destroy(e);
}

/* The exactness checks on a tiny synth model of `arch` (random weights: its greedy text
 * repeats itself, so lookup and memo drafts are accepted). */
/* seed: deja synth's (the default is 42); a random model's drafts must be accepted now and
 * then for the check not to be vacuous, which depends on its weights: gpt-oss's tiny
 * model with seed 42 accepts no lookup draft next to the memo's, and the adaptive policy's
 * choices vary between runs (seed 3 accepted 0-4 per configuration); seed 14 accepted 6-11
 * in each of the five configurations (seeds 8-19 tried; the exactness held with every one) */
static void check_arch(const char *shared, const char *arch, const char *code, const char *seed) {
    char path[] = "/tmp/deja_test_spec_arch_XXXXXX.gguf";
    const int fd = mkstemps(path, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    char *out = NULL;
    int rc = RUN(&out, "synth", "--arch", (char *)arch, "--preset", "tiny", "--vocab-from",
                 (char *)test_shared_path(shared, "models/codelm-15m-f16.gguf"), "-o", path, "-t", "2", "--seed",
                 (char *)seed);
    CHECKF(rc == 0, "synth %s: %s", arch, out);
    free(out);
    struct dj_model *m = NULL;
    if (rc == 0) CHECKF(model_load(path, &m) == DJ_OK, "%s: %s", arch, dj_last_error());
    unlink(path);
    if (!m) return;
    dj_token *tb = NULL;
    size_t nb = 0;
    CHECK(vocab_tokenize(m->vocab, code, strlen(code), true, false, &tb, &nb) == DJ_OK);
    struct dj_sampler_params greedy = sampler_default_params(), hot = sampler_default_params(),
                             pen = sampler_default_params();
    greedy.temp = 0.0f;
    hot.temp = 0.8f;
    hot.seed = 7;
    pen.temp = 0.0f;
    pen.repeat_penalty = 1.1f;
    pen.penalty_last_n = 32;
    const struct rq q[3] = {{tb, nb, greedy, 48, 1, NULL}, {tb, nb, hot, 40, 2, NULL}, {tb, nb, pen, 32, 1, NULL}};
    static struct out ref[3];
    uint64_t ref_passes[3];
    printf("%s:\n", arch);
    run_plain(m, q, 3, ref, ref_passes);
    const unsigned L = DJ_SPEC_BIT(DJ_SPEC_LOOKUP), M = DJ_SPEC_BIT(DJ_SPEC_MEMO), X = DJ_SPEC_BIT(DJ_SPEC_EXIT);
    for (int adaptive = 0; adaptive < 2; adaptive++)
        for (int batched = 0; batched < 2; batched++) run_spec(m, q, 3, ref, ref_passes, L | M, adaptive, batched);
    exit_layer = 0;
    run_spec(m, q, 3, ref, ref_passes, L | M | X, true, false);
    free(tb);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    struct dj_model *m = NULL;
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    if (g_gpu) {
        CHECKF(model_load(test_shared_path(argv[1], "models/stories260K.gguf"), &m) == DJ_OK, "%s", dj_last_error());
        if (!m) TEST_END();
        static const char *story = "Once upon a time, there was a little girl named Lily. She loved to play outside in "
                                   "the park. One day, she saw a big tree with a red ball in it.\nOnce upon a time, "
                                   "there was a little girl named Lily. She loved to play";
        dj_token *ts = NULL;
        size_t ns = 0;
        CHECK(vocab_tokenize(m->vocab, story, strlen(story), true, false, &ts, &ns) == DJ_OK);
        struct dj_sampler_params greedy = sampler_default_params(), hot = sampler_default_params();
        greedy.temp = 0.0f;
        hot.temp = 0.8f;
        hot.seed = 7;
        const struct rq gq[3] = {{ts, ns, greedy, 40, 1, NULL}, {ts, ns, hot, 32, 1, NULL}, {ts, ns, hot, 24, 2, NULL}};
        static struct out gref[3];
        uint64_t gpasses[3];
        run_plain(m, gq, 3, gref, gpasses);
        /* both sources together (each alone: the CPU runs; lavapipe is slow) */
        const unsigned LM = DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO);
        for (int adaptive = 0; adaptive < 2; adaptive++)
            for (int batched = 0; batched < 2; batched++) run_spec(m, gq, 3, gref, gpasses, LM, adaptive, batched);
        /* early-exit drafts on the GPU: at layer 3 of 5 (fixed: some must be accepted), and with
         * lookup and memo, adaptive, the exit layer calibrated, batched */
        exit_layer = 3;
        run_spec(m, gq, 3, gref, gpasses, DJ_SPEC_BIT(DJ_SPEC_EXIT), false, false);
        exit_layer = 0;
        run_spec(m, gq, 3, gref, gpasses, LM | DJ_SPEC_BIT(DJ_SPEC_EXIT), true, true);
        free(ts);
        model_free(m);
        TEST_END();
    }
    CHECKF(model_load(test_shared_path(argv[1], "models/codelm-15m-f16.gguf"), &m) == DJ_OK, "%s", dj_last_error());
    if (!m) TEST_END();
    /* prompt A: an agent turn of a real trace (an edit task: the model echoes what it read) */
    struct trace *t = NULL;
    CHECKF(trace_open(test_shared_path(argv[1], "traces/openhands_mock__CodeActSWEAgent_test_edits.jsonl"), &t) ==
               DJ_OK, "%s", dj_last_error());
    if (!t) TEST_END();
    bool done = false;
    for (int k = 0; k < 4 && !done; k++) CHECK(trace_next(t, &done) == DJ_OK);
    CHECK(!done);
    const char *tail = t->prompt + (t->prompt_len > 3000 ? t->prompt_len - 3000 : 0);
    const char *start = strstr(tail, "<|im_start|>");
    char *pa = NULL;
    size_t la = 0;
    CHECK(start != NULL);
    if (!start) TEST_END();
    la = strlen(start);
    CHECK((pa = malloc(la + 32)) != NULL);
    memcpy(pa, start, la);
    memcpy(pa + la, "<|im_start|>assistant\n", 23);
    la += 22;
    trace_close(t);
    /* prompt B: code written twice (the second copy repeats the first) */
    static const char *code =
        "import json\nimport os\n\n\ndef load_config(path):\n    \"\"\"Load a JSON config file.\"\"\"\n"
        "    with open(path) as f:\n        return json.load(f)\n\n\nclass Server:\n    def __init__(self, host, port):\n"
        "        self.host = host\n        self.port = port\n        self.routes = {}\n\n    def route(self, path):\n"
        "        def wrap(fn):\n            self.routes[path] = fn\n            return fn\n        return wrap\n\n";
    char two[4096];
    snprintf(two, sizeof two, "%s\n%s\n%s", code, code, "import json\nimport os\n\n\ndef load_config(path):\n");
    dj_token *ta = NULL, *tb = NULL;
    size_t na = 0, nb = 0;
    CHECK(vocab_tokenize(m->vocab, pa, la, true, true, &ta, &na) == DJ_OK);
    CHECK(vocab_tokenize(m->vocab, two, strlen(two), true, false, &tb, &nb) == DJ_OK);
    CHECKF(na > 200 && na < 1500 && nb > 100, "%zu and %zu prompt tokens", na, nb);

    struct dj_sampler_params greedy = sampler_default_params(), hot = sampler_default_params(),
                             pen = sampler_default_params();
    greedy.temp = 0.0f;
    hot.temp = 0.8f;
    hot.seed = 7;
    pen.temp = 0.0f;
    pen.repeat_penalty = 1.1f;
    pen.penalty_last_n = 32;
    const struct rq q[N_REQ] = {
        {ta, na, greedy, 48, 1, NULL},    {tb, nb, greedy, 48, 1, NULL}, {ta, na, hot, 40, 1, NULL},
        {tb, nb, hot, 40, 2, NULL},       {tb, nb, pen, 32, 1, NULL},
        {ta, na, (struct dj_sampler_params){0}, 40, 1, NULL},
    };
    struct rq qq[N_REQ];
    memcpy(qq, q, sizeof q);
    qq[5].sp = sampler_default_params(); /* top-k/top-p/min-p sampling, another seed */
    qq[5].sp.seed = 12345;
    qq[5].sp.temp = 0.6f;

    static struct out ref[N_REQ];
    uint64_t ref_passes[N_REQ];
    run_plain(m, qq, N_REQ, ref, ref_passes);
    const unsigned L = DJ_SPEC_BIT(DJ_SPEC_LOOKUP), M = DJ_SPEC_BIT(DJ_SPEC_MEMO), X = DJ_SPEC_BIT(DJ_SPEC_EXIT);
    /* All the sources together with each policy, alone and batched: every source's drafts are
     * accepted in them (exit's with the fixed policy; engine_spec_choose picks among the
     * proposals).  Then each other set once (engine_spec_choose with one proposal, the memo
     * or lookup off), its policy and composition rotated; early exit alone twice: fixed (every
     * step an exit draft: the resumed verification far more often than next to lookup and
     * memo) and adaptive (the calibration and the probes).  Each set in every one of the four
     * modes took 20 runs here, 82 of test_spec's 105 s. */
    static const struct {
        unsigned sources;
        bool adaptive, batched;
    } runs[] = {
        {L | M | X, false, false}, {L | M | X, false, true}, {L | M | X, true, false}, {L | M | X, true, true},
        {L, false, false},         {M, false, true},         {L | M, true, false},    {X, false, false},
        {X, true, true},
    };
    /* under AddressSanitizer (~20x slower) only all the sources together, which still runs
     * every source's code */
#if defined(__SANITIZE_ADDRESS__)
    const size_t n_runs = 4;
#else
    const size_t n_runs = sizeof runs / sizeof runs[0];
#endif
    for (size_t r = 0; r < n_runs; r++) {
        /* early exit: an explicit layer (fixed), and auto (the calibration) */
        exit_layer = runs[r].adaptive ? 0 : 5;
        run_spec(m, qq, N_REQ, ref, ref_passes, runs[r].sources, runs[r].adaptive, runs[r].batched);
    }
    test_forced(m, &qq[0], &ref[0]);
    test_memo_salt_bound(m, &qq[1]);
    check_arch(argv[1], "glm4moe", two, "42");
    check_arch(argv[1], "mistral3", two, "42");
    check_arch(argv[1], "gpt-oss", two, "14");
    free(ta);
    free(tb);
    free(pa);
    model_free(m);
    TEST_END();
}
