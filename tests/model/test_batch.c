/*
 * test_batch.c — DESIGN.md §3, multi-sequence batch invariance: a token's
 * logits are bitwise identical whether its sequence ran alone or batched with
 * 1-15 others, at any mix of prefill chunks and decode tokens, any ubatch
 * size, 1 or 2 threads (ctx_forward).
 *
 * Per model (stories260K F32, codelm F16, codelm quantized to q4_k_m by
 * `deja quantize`, which has Q4_K and Q6_K tensors, deepseek2-lite-tiny:
 * Multi-head Latent Attention over a K-only pool; `deja synth --arch gemma3 --preset
 * tiny`: five sliding-window layers of 16 keys, so most of these sequences pass the window
 * and their later tokens skip the first blocks; `deja synth --preset tiny`
 * glm4moe and mistral3 files: sigmoid-routed + shared experts, partial rope;
 * YaRN and the query temperature scaling; and a gpt-oss tiny model: windows of 16 on
 * every other layer, attention sinks, MXFP4 experts): 16 random token
 * sequences of 3-120 tokens.  Reference: each sequence alone, every
 * position's logits (ctx_decode, one call), hashed per row.  Then random
 * schedules over one shared pool: each step picks 1-16 of the unfinished
 * sequences in random order; each contributes either one token (decode) or a
 * random chunk of up to 40 (prefill); the step is one ctx_forward asking
 * logits for a random subset of its rows (always at least one), on a context
 * whose ubatch size (1, 3, 7, 16, 64, 512) and thread count (1, 2) the
 * schedule's index picks: every ubatch size in a model's 6 schedules (3 for
 * the K/V types other than f16: ubatch 1, 16, 512).  Every logits row must hash equal
 * to the reference row of the same (sequence, position), and each sequence's
 * K/V rows must equal the reference run's, bitwise.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_batch_vulkan*: N = 1, Vulkan device 0 — lavapipe in
 * CI) every context runs its forward pass on that device (ctx_params.gpu) and the same
 * schedules check the GPU backend's invariance on stories260K (2 schedules) and qwen3moe-tiny
 * (1: experts routed on the host, q/k head norms) — the models lavapipe runs fast enough for
 * make test (gemma's GPU invariance is test_gemma_golden's), and after each schedule every
 * block the device mirrors holds the pool's host bytes (the rows the device stored itself);
 * without a Vulkan device the test exits 77 (SKIP).  There
 * the GPU's logits are also compared with the CPU's (F32 K/V in both): the largest
 * |difference| over every position of 4 sequences must stay below 2e-3 of the largest
 * |logit| (the two sum in different orders and the CPU rounds some sums in double; what
 * the runs measured is printed), and the greedy token of every position must agree
 * where the CPU's top two logits are more than that bound apart.
 */
#include <stdint.h>

#include "core/hash.h"
#include "model/context.h"
#include "model/forward_gpu.h"
#include "test.h"
#include "test_gpu.h"
#include "test_run.h"

enum { N_SEQ = 16, MAX_LEN = 120, MAX_CHUNK = 40 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for schedules */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 33) % n;
}

static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

/* The GPU's logits against the CPU's for the first 4 sequences (every position). */
static void gpu_vs_cpu(const struct dj_model *m, struct kv_pool *pool, const dj_token *const *toks, const size_t *lens) {
    const size_t V = m->hp.n_vocab;
    float *lg[2];
    double worst = 0, amax = 0;
    size_t n_pos = 0, n_argmax_bad = 0, n_argmax_close = 0;
    for (int s = 0; s < 4; s++) {
        for (int d = 0; d < 2; d++) {
            struct dj_ctx_params cp = ctx_default_params();
            cp.n_ctx = 256;
            cp.pool = pool;
            cp.gpu = d ? g_gpu : 0;
            struct dj_context *c = NULL;
            struct kv_seq q;
            kv_seq_init(&q, pool);
            lg[d] = malloc(lens[s] * V * sizeof(float));
            CHECK(ctx_create(m, cp, &c) == DJ_OK);
            if (c) {
                ctx_set_seq(c, &q);
                CHECK(ctx_decode(c, toks[s], lens[s], lg[d], true) == DJ_OK);
                ctx_set_seq(c, NULL);
            }
            ctx_free(c);
            kv_seq_free(&q);
        }
        for (size_t i = 0; i < lens[s]; i++) {
            const float *a = lg[0] + i * V, *b = lg[1] + i * V;
            size_t ia = 0, ib = 0, i2 = 0;
            for (size_t v = 0; v < V; v++) {
                const double d = fabs((double)a[v] - b[v]);
                if (d > worst) worst = d;
                if (fabs(a[v]) > amax) amax = fabs(a[v]);
                if (a[v] > a[ia]) ia = v;
                if (b[v] > b[ib]) ib = v;
            }
            for (size_t v = 0; v < V; v++)
                if (v != ia && (i2 == ia || a[v] > a[i2])) i2 = v;
            n_pos++;
            if (a[ia] - a[i2] > 2e-3 * (amax > 1 ? amax : 1)) n_argmax_bad += ia != ib;
            else n_argmax_close++;
        }
        free(lg[0]);
        free(lg[1]);
    }
    CHECKF(worst <= 2e-3 * (amax > 1 ? amax : 1), "GPU vs CPU: max |logit diff| %.3g over %zu positions (max |logit| %.3g)",
           worst, n_pos, amax);
    CHECKF(n_argmax_bad == 0, "GPU vs CPU: %zu of %zu greedy tokens differ", n_argmax_bad, n_pos);
    printf("GPU vs CPU: %zu positions, max |logit diff| %.3g (max |logit| %.3g), greedy tokens equal (%zu near ties "
           "not compared)\n", n_pos, worst, amax, n_argmax_close);
}

static uint64_t row_hash(const float *row, size_t n) { return test_hash_f32(DJ_FNV_OFFSET, row, n); }

struct seqdata {
    dj_token tok[MAX_LEN];
    size_t n;
    uint64_t ref[MAX_LEN]; /* hash of the logits after each position */
};

static void check_model(const char *path, int n_schedules, const int *pick) {
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s", path);
    if (!m) return;
    if (m->hp.head_dim % dj_type_info(kv_type_default())->blck) { /* DJ_KV_TYPE: a quantized K/V */
        CHECK(model_kv_check(m, kv_type_default(), kv_type_default()) == DJ_ERR_UNSUPPORTED);
        printf("%s: K/V type %s does not fit head size %u: skipped\n", path, dj_type_info(kv_type_default())->name,
               m->hp.head_dim);
        model_free(m);
        return;
    }
    if (g_gpu && model_gpu_check(m, kv_type_default(), kv_type_default()) != DJ_OK) {
        printf("%s: %s: skipped\n", path, dj_last_error());
        model_free(m);
        return;
    }
    const size_t V = m->hp.n_vocab;
    static struct seqdata sd[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        sd[s].n = 3 + rnd(MAX_LEN - 2);
        for (size_t i = 0; i < sd[s].n; i++) sd[s].tok[i] = (dj_token)rnd((uint32_t)V);
    }
    const uint32_t bs = 16;
    /* the GPU mirrors the pool in one buffer: 1024 blocks fit lavapipe's 128 MiB */
    struct kv_pool_params pp = {m->hp.n_layer, m->hp.n_head_kv * m->hp.head_dim, bs, g_gpu ? 1024 : 4096,
                                kv_type_default(), kv_type_default(), model_kv_k_only(m)};
    struct kv_pool *pool = NULL;
    CHECK(kv_pool_create(&pp, &pool) == DJ_OK);
    struct kv_seq ref_seq[N_SEQ];

    /* references: each sequence alone */
    {
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 256;
        cp.pool = pool;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        if (!c) fprintf(stderr, "ctx_create: %s\n", dj_last_error());
        float *lg = malloc(MAX_LEN * V * sizeof(float));
        for (int s = 0; s < N_SEQ; s++) {
            kv_seq_init(&ref_seq[s], pool);
            ctx_set_seq(c, &ref_seq[s]);
            CHECK(ctx_decode(c, sd[s].tok, sd[s].n, lg, true) == DJ_OK);
            for (size_t i = 0; i < sd[s].n; i++) sd[s].ref[i] = row_hash(lg + i * V, V);
        }
        ctx_set_seq(c, NULL);
        free(lg);
        ctx_free(c);
    }

    /* schedule i's ubatch size and thread count: sched[i % 12], so every ubatch size within 6
     * schedules (the first six alternate 2 and 1 threads), every pair within 12; a list of
     * schedules picks its own (kv_sched) */
    static const struct { uint32_t ubatch; int threads; } sched[12] = {
        {1, 2}, {3, 1}, {7, 2}, {16, 1}, {64, 2}, {512, 1}, {1, 1}, {3, 2}, {7, 1}, {16, 2}, {64, 1}, {512, 2},
    };
    size_t n_rows = 0, n_bad = 0, n_kv_bad = 0, n_mixed = 0;
    for (int sch = 0; sch < n_schedules; sch++) {
        struct dj_ctx_params cp = ctx_default_params();
        const int si = pick ? pick[sch] : sch % 12;
        cp.n_ctx = 256;
        cp.n_ubatch = sched[si].ubatch;
        cp.n_threads = sched[si].threads;
        cp.pool = pool;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        if (!c) break;
        struct kv_seq seq[N_SEQ];
        size_t done[N_SEQ] = {0};
        for (int s = 0; s < N_SEQ; s++) kv_seq_init(&seq[s], pool);
        /* the prefix each sequence prefills before switching to one token per step */
        size_t prefill_to[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) prefill_to[s] = rnd((uint32_t)sd[s].n + 1);
        dj_token tok[N_SEQ * MAX_CHUNK];
        uint32_t pos[N_SEQ * MAX_CHUNK], out[N_SEQ * MAX_CHUNK];
        struct kv_seq *tseq[N_SEQ * MAX_CHUNK];
        int who[N_SEQ * MAX_CHUNK];
        float *lg = malloc((size_t)N_SEQ * MAX_CHUNK * V * sizeof(float));
        for (;;) {
            int order[N_SEQ], n_open = 0;
            for (int s = 0; s < N_SEQ; s++)
                if (done[s] < sd[s].n) order[n_open++] = s;
            if (n_open == 0) break;
            for (int i = n_open - 1; i > 0; i--) { /* shuffle */
                int k = (int)rnd((uint32_t)i + 1), t = order[i];
                order[i] = order[k];
                order[k] = t;
            }
            const int n_pick = 1 + (int)rnd((uint32_t)n_open);
            size_t nt = 0, n_out = 0;
            for (int k = 0; k < n_pick; k++) {
                const int s = order[k];
                size_t len = 1;
                if (done[s] < prefill_to[s]) len = 1 + rnd(MAX_CHUNK);
                if (len > sd[s].n - done[s]) len = sd[s].n - done[s];
                CHECK(kv_seq_prepare(&seq[s], len) == DJ_OK);
                for (size_t i = 0; i < len; i++) {
                    tok[nt] = sd[s].tok[done[s] + i];
                    pos[nt] = (uint32_t)(done[s] + i);
                    tseq[nt] = &seq[s];
                    who[nt] = s;
                    if (rnd(3) == 0 || i + 1 == len) out[n_out++] = (uint32_t)nt;
                    nt++;
                }
            }
            if (n_pick > 1) n_mixed++;
            struct dj_batch b = {nt, tok, pos, tseq, n_out, out};
            CHECK(ctx_forward(c, &b, lg) == DJ_OK);
            for (size_t r = 0; r < n_out; r++) {
                const int s = who[out[r]];
                n_rows++;
                if (row_hash(lg + r * V, V) != sd[s].ref[pos[out[r]]]) n_bad++;
            }
            for (int k = 0; k < n_pick; k++) {
                const int s = order[k];
                size_t len = 0;
                for (size_t i = 0; i < nt; i++) len += who[i] == s;
                kv_seq_advance(&seq[s], len);
                done[s] += len;
            }
        }
        /* every K/V row equals the reference's */
        for (int s = 0; s < N_SEQ; s++)
            for (uint32_t il = 0; il < m->hp.n_layer; il++)
                for (size_t p = 0; p < sd[s].n; p++)
                    if (memcmp(kv_seq_k(&seq[s], il, p, bs), kv_seq_k(&ref_seq[s], il, p, bs),
                               kv_pool_k_row_bytes(pool)) ||
                        (!pp.k_only && memcmp(kv_seq_v(&seq[s], il, p, bs), kv_seq_v(&ref_seq[s], il, p, bs),
                                              kv_pool_v_row_bytes(pool))))
                        n_kv_bad++;
        if (g_gpu) { /* the device's mirror of every block = the pool's host bytes */
            size_t n_chk = 0;
            const size_t n_diff = gpu_mirror_diff(c, &n_chk);
            CHECKF(n_diff == 0 && n_chk > 0, "%s: %zu of %zu mirrored blocks differ from the pool's bytes", path, n_diff,
                   n_chk);
        }
        free(lg);
        for (int s = 0; s < N_SEQ; s++) kv_seq_free(&seq[s]);
        ctx_free(c);
    }
    CHECKF(n_bad == 0, "%s: %zu of %zu logits rows differ from the sequence run alone", path, n_bad, n_rows);
    CHECKF(n_kv_bad == 0, "%s: %zu K/V rows differ", path, n_kv_bad);
    CHECKF(n_mixed > 10, "%s: only %zu batches mixed sequences", path, n_mixed);
    if (g_gpu && kv_type_default() == DJ_TYPE_F32) {
        const dj_token *toks[4] = {sd[0].tok, sd[1].tok, sd[2].tok, sd[3].tok};
        const size_t lens[4] = {sd[0].n, sd[1].n, sd[2].n, sd[3].n};
        gpu_vs_cpu(m, pool, toks, lens);
    }
    printf("%s: %d schedules, %zu logits rows, %zu multi-sequence batches, all bitwise equal\n", path, n_schedules,
           n_rows, n_mixed);

    /* malformed batches are refused with a message */
    {
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 256;
        cp.pool = pool;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        struct kv_seq a;
        kv_seq_init(&a, pool);
        CHECK(kv_seq_prepare(&a, 2) == DJ_OK);
        dj_token t2[2] = {1, 2};
        uint32_t p_bad[2] = {1, 0}, p_far[2] = {0, 200}, o1[1] = {5};
        struct kv_seq *s2[2] = {&a, &a};
        struct dj_batch b1 = {2, t2, p_bad, s2, 0, NULL};
        CHECK(ctx_forward(c, &b1, NULL) == DJ_ERR_INVALID);
        struct dj_batch b2 = {2, t2, p_far, s2, 0, NULL};
        CHECK(ctx_forward(c, &b2, NULL) == DJ_ERR_INVALID);
        uint32_t p_ok[2] = {0, 1};
        struct dj_batch b3 = {2, t2, p_ok, s2, 1, o1};
        CHECK(ctx_forward(c, &b3, NULL) == DJ_ERR_INVALID);
        dj_token t_bad[2] = {1, (dj_token)V};
        struct dj_batch b4 = {2, t_bad, p_ok, s2, 0, NULL};
        CHECK(ctx_forward(c, &b4, NULL) == DJ_ERR_INVALID);
        kv_seq_free(&a);
        ctx_free(c);
    }
    for (int s = 0; s < N_SEQ; s++) kv_seq_free(&ref_seq[s]);
    struct kv_pool_stats ps;
    kv_pool_get_stats(pool, &ps);
    CHECK(ps.pinned == 0);
    kv_pool_destroy(pool);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    char dir[] = "/tmp/deja_test_batch_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    if (g_gpu) { /* lavapipe runs codelm's 32k-row output product at ~40 M MAC/s: the tiny models only */
        check_model(test_shared_path(argv[1], "models/stories260K.gguf"), 2, NULL);
        check_model(test_shared_path(argv[1], "golden/moe/qwen3moe-tiny.gguf"), 1, NULL); /* experts, q/k norms */
        rmdir(dir);
        TEST_END();
    }
    const char *codelm = test_shared_path(argv[1], "models/codelm-15m-f16.gguf");
    /* The default (f16) K/V: every ubatch size in each model's 6 schedules, every (ubatch, threads)
     * pair in stories260K's 12.  The other K/V types (CTest's model/test_batch_kv_*): what the type
     * changes is how rows are stored and read back in attention, the same code at any ubatch size
     * and for any weight type, so 3 schedules per model — ubatch 1 (2 threads), 16 (1 thread) and
     * 512 (2 threads) — and not codelm-q4_k_m, which differs from codelm in its weights only. */
    const bool kv_other = kv_type_default() != DJ_TYPE_F16;
    static const int kv_pick[3] = {0, 3, 11};
    const int *pick = kv_other ? kv_pick : NULL;
#ifdef DJ_SANITIZE_BUILD
    const int n_sched = 2, n_stories = kv_other ? 3 : 6; /* (pick has 3 entries) */
#else
    const int n_sched = kv_other ? 3 : 6, n_stories = kv_other ? 3 : 12;
#endif
    char q[600];
    char *out = NULL;
    int rc = 0;
    check_model(test_shared_path(argv[1], "models/stories260K.gguf"), n_stories, pick);
    check_model(codelm, n_sched, pick);
    if (!kv_other) {
        snprintf(q, sizeof q, "%s/codelm-q4_k_m.gguf", dir);
        rc = RUN(&out, "quantize", (char *)codelm, q, "q4_k_m");
        CHECKF(rc == 0, "quantize: %s", out);
        free(out);
        if (rc == 0) check_model(q, n_sched, pick);
        unlink(q);
    }
    check_model(test_shared_path(argv[1], "golden/moe/deepseek2-lite-tiny.gguf"), n_sched, pick);
    char g3[600];
    snprintf(g3, sizeof g3, "%s/gemma3-tiny.gguf", dir);
    rc = RUN(&out, "synth", "--arch", "gemma3", "--preset", "tiny", "--vocab-from",
             (char *)test_shared_path(argv[1], "vocab/ggml-vocab-llama-spm.gguf"), "-o", g3, "-t", "2");
    CHECKF(rc == 0, "synth gemma3: %s", out);
    free(out);
    if (rc == 0) check_model(g3, n_sched, pick);
    unlink(g3);
    /* gpt-oss: sliding windows of 16 on even layers (the sequences run to 120 tokens),
     * attention sinks, biased MXFP4 experts */
    char oss[600];
    snprintf(oss, sizeof oss, "%s/gpt-oss-tiny.gguf", dir);
    rc = RUN(&out, "synth", "--arch", "gpt-oss", "--preset", "tiny", "--type", "mxfp4", "--vocab-from",
             (char *)codelm, "-o", oss);
    CHECKF(rc == 0, "synth gpt-oss: %s", out);
    free(out);
    if (rc == 0) check_model(oss, n_sched, pick);
    unlink(oss);
    static const char *const archs[] = {"glm4moe", "mistral3"};
    for (int i = 0; i < 2; i++) {
        snprintf(q, sizeof q, "%s/%s-tiny.gguf", dir, archs[i]);
        rc = RUN(&out, "synth", "--arch", (char *)archs[i], "--preset", "tiny", "--vocab-from", (char *)codelm, "-o",
                 q, "-t", "2");
        CHECKF(rc == 0, "synth %s: %s", archs[i], out);
        free(out);
        if (rc == 0) check_model(q, n_sched, pick);
        unlink(q);
    }
    rmdir(dir);
    TEST_END();
}
