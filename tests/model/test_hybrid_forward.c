/*
 * test_hybrid_forward.c — DESIGN.md §3 on the hybrids' recurrent layers, at the forward
 * pass: a token's logits, its sequence's recurrent state after it (kv_seq.rs and the
 * dj_batch.rs_snap snapshots) and its K/V rows are bitwise the same whether its sequence
 * ran alone in one pass or batched with others, in prefill chunks of any size, in
 * ubatches of 1, 7 or 512 tokens, on 1 or 2 threads.
 *
 * Models: `deja synth --preset tiny` qwen35moe (Gated DeltaNet layers 0 and 2, gated
 * attention 1 and 3, experts + gated shared expert; 2 k / 4 v heads tiled) and qwen3next
 * (its older fused ssm_in and ssm_ba, v heads repeat-interleaved).  5 random sequences of
 * 5-80 tokens.  Reference: each alone, one ctx_forward of every token (ubatch 512, one
 * thread), every row's logits and every position's state snapshot hashed, the final state
 * kept.  Then schedules over one shared pool: each step takes 1-5 open sequences in random
 * order, each a chunk of 1-40 tokens, through a context of random ubatch size and thread
 * count, logits for every row and state snapshots for random rows.
 *
 * And the refusals: a sequence whose first token is not at its recurrent state's position
 * (rs_pos), positions with a gap, a sequence truncated inside (state unknown) —
 * DJ_ERR_INVALID; early exit, decode_at and the probe — DJ_ERR_UNSUPPORTED.  Truncating to
 * 0 restarts from the zero state: bitwise the reference again.
 *
 * Printed, not checked: the time in the recurrences against the whole forward pass
 * (dj_context.dn_us) for a 256-token prefill and 16 decode steps on one thread; with
 * DJ_HYBRID_TIMING=FILE also for that model (512 tokens, 1 and 2 threads), e.g. the
 * 35b-a3b preset cut to 4 layers (docs/ARCHITECTURE.md).
 *
 * With DJ_TEST_GPU=N (CTest's model/test_hybrid_forward_vulkan_f32: Vulkan device 0, lavapipe
 * in CI) every context runs on that device — the projections, attention and FFN there, the
 * conv and the delta rule on the host with the CPU's code — and the same checks run with 2
 * schedules (ubatch 1 and 7) on models with stories260K's 512-token vocabulary (lavapipe's
 * cost is the output product); exit 77 (SKIP) without a device.
 */
#include <stdint.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/timer.h"
#include "model/context.h"
#include "test.h"
#include "test_gpu.h"
#include "test_run.h"

enum { N_SEQ = 5, MAX_LEN = 80, MAX_CHUNK = 40 };

static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 33) % n;
}

static uint64_t hash(const float *row, size_t n) { return test_hash_f32(DJ_FNV_OFFSET, row, n); }

struct seqdata {
    dj_token tok[MAX_LEN];
    size_t n;
    uint64_t ref[MAX_LEN];  /* logits after each position */
    uint64_t snap[MAX_LEN]; /* recurrent state after each position */
    float *final;           /* the state after the last */
};

/* What the canonical recurrence costs: a prefill of n_prompt tokens in one ubatch, then 16
 * decode steps, on n_threads; the time in the recurrences (conv + delta rule, token by token)
 * and in the whole DeltaNet layers (dj_context.dn_us) against the whole pass.  Printed. */
static void timing(const struct dj_model *m, const char *what, int n_threads, int n_prompt) {
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n_prompt + 64;
    cp.n_threads = n_threads;
    struct dj_context *c = NULL;
    CHECKF(ctx_create(m, cp, &c) == DJ_OK, "%s: %s", what, dj_last_error());
    if (!c) return;
    dj_token *toks = malloc((size_t)n_prompt * sizeof *toks);
    float *lg = malloc(m->hp.n_vocab * sizeof(float));
    for (int i = 0; i < n_prompt; i++) toks[i] = (dj_token)((100 + 37 * (uint32_t)i) % m->hp.n_vocab);
    int64_t t0 = dj_time_us();
    CHECK(ctx_decode(c, toks, (size_t)n_prompt, lg, false) == DJ_OK);
    const double pre = (double)(dj_time_us() - t0), pre_rec = (double)c->dn_us[0], pre_lay = (double)c->dn_us[1];
    t0 = dj_time_us();
    for (int i = 0; i < 16; i++) CHECK(ctx_decode(c, toks + i, 1, lg, false) == DJ_OK);
    const double dec = (double)(dj_time_us() - t0), dec_rec = (double)c->dn_us[0] - pre_rec,
                 dec_lay = (double)c->dn_us[1] - pre_lay;
    CHECK(pre_rec > 0 && pre_lay >= pre_rec && dec_rec > 0);
    printf("%s timing (%d thread%s): prefill %d tokens %.1f ms, of which the recurrences (conv + delta rule, token by "
           "token) %.1f ms (%.0f%%), the whole DeltaNet layers %.1f ms (%.0f%%); decode %.2f ms a token, recurrences "
           "%.2f ms (%.0f%%), DeltaNet layers %.2f ms (%.0f%%)\n", what, n_threads, n_threads > 1 ? "s" : "", n_prompt,
           pre / 1e3, pre_rec / 1e3, 100 * pre_rec / pre, pre_lay / 1e3, 100 * pre_lay / pre, dec / 16e3,
           dec_rec / 16e3, 100 * dec_rec / dec, dec_lay / 16e3, 100 * dec_lay / dec);
    free(toks);
    free(lg);
    ctx_free(c);
}

static void check_model(const char *path, const char *what) {
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s: %s", what, dj_last_error());
    if (!m) return;
    const struct dj_hparams *hp = &m->hp;
    const size_t V = hp->n_vocab, RS = hp->rs_floats;
    CHECKF(RS > 0 && hp->n_layer_kv > 0 && hp->n_layer_kv < hp->n_layer, "%s: not hybrid (%zu state floats, %u of %u "
           "layers attend)", what, RS, hp->n_layer_kv, hp->n_layer);
    static struct seqdata sd[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        sd[s].n = 5 + rnd(MAX_LEN - 4);
        for (size_t i = 0; i < sd[s].n; i++) sd[s].tok[i] = (dj_token)rnd((uint32_t)V);
        sd[s].final = malloc(RS * sizeof(float));
    }
    const uint32_t bs = 16;
    struct kv_pool_params pp = {hp->n_layer_kv, hp->n_head_kv * hp->head_dim, bs, 2048, kv_type_default(),
                                kv_type_default(), model_kv_k_only(m), RS};
    struct kv_pool *pool = NULL;
    CHECK(kv_pool_create(&pp, &pool) == DJ_OK);
    if (!pool) return;
    struct kv_seq ref_seq[N_SEQ];
    float *lg = malloc((size_t)N_SEQ * MAX_LEN * V * sizeof(float));
    float *snapbuf = malloc((size_t)N_SEQ * MAX_LEN * RS * sizeof(float));
    float *snaps[N_SEQ * MAX_LEN];
    dj_token tok[N_SEQ * MAX_LEN];
    uint32_t pos[N_SEQ * MAX_LEN], out[N_SEQ * MAX_LEN];
    struct kv_seq *tseq[N_SEQ * MAX_LEN];
    int who[N_SEQ * MAX_LEN];

    { /* references: each sequence alone, one pass */
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 256;
        cp.pool = pool;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        for (int s = 0; c && s < N_SEQ; s++) {
            kv_seq_init(&ref_seq[s], pool);
            CHECK(kv_seq_prepare(&ref_seq[s], sd[s].n) == DJ_OK);
            for (size_t i = 0; i < sd[s].n; i++) {
                pos[i] = (uint32_t)i, out[i] = (uint32_t)i, tseq[i] = &ref_seq[s];
                snaps[i] = snapbuf + i * RS;
            }
            struct dj_batch b = {sd[s].n, sd[s].tok, pos, tseq, sd[s].n, out, NULL, NULL, snaps};
            CHECKF(ctx_forward(c, &b, lg) == DJ_OK, "%s: %s", what, dj_last_error());
            kv_seq_advance(&ref_seq[s], sd[s].n);
            CHECK(ref_seq[s].rs_pos == sd[s].n);
            for (size_t i = 0; i < sd[s].n; i++) {
                sd[s].ref[i] = hash(lg + i * V, V);
                sd[s].snap[i] = hash(snaps[i], RS);
            }
            memcpy(sd[s].final, ref_seq[s].rs, RS * sizeof(float));
            CHECKF(!memcmp(snaps[sd[s].n - 1], sd[s].final, RS * sizeof(float)), "%s: the last snapshot is not the state",
                   what);
        }
        /* the state matters: a sequence's logits at a position differ from those of its suffix run from scratch */
        if (c) {
            struct kv_seq t;
            kv_seq_init(&t, pool);
            const size_t n = sd[0].n - 2;
            CHECK(kv_seq_prepare(&t, n) == DJ_OK);
            for (size_t i = 0; i < n; i++) pos[i] = (uint32_t)i, tseq[i] = &t;
            uint32_t last = (uint32_t)(n - 1);
            struct dj_batch b = {n, sd[0].tok + 2, pos, tseq, 1, &last, NULL, NULL, NULL};
            CHECK(ctx_forward(c, &b, lg) == DJ_OK);
            CHECKF(hash(lg, V) != sd[0].ref[sd[0].n - 1], "%s: the first two tokens did not change the logits", what);
            kv_seq_free(&t);
        }
        ctx_free(c);
    }

#ifdef DJ_SANITIZE_BUILD /* the sanitizer build: ubatch 7 on one thread and 512 on two only */
    static const uint32_t ubatches[] = {7, 512};
    int n_sched = 2;
#else
    static const uint32_t ubatches[] = {1, 7, 512, 1, 7, 512};
    int n_sched = 6;
#endif
    if (g_gpu) n_sched = 2; /* lavapipe: ubatches of 1 and 7 (the GPU ignores the thread count) */
    size_t n_rows = 0, n_bad = 0, n_snap = 0, n_snap_bad = 0, n_state_bad = 0, n_kv_bad = 0, n_mixed = 0;
    for (int sch = 0; sch < n_sched; sch++) {
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 256;
        cp.n_ubatch = ubatches[sch];
        cp.n_threads = 1 + sch * 2 / n_sched;
        cp.pool = pool;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        if (!c) break;
        struct kv_seq seq[N_SEQ];
        size_t done[N_SEQ] = {0};
        for (int s = 0; s < N_SEQ; s++) kv_seq_init(&seq[s], pool);
        for (;;) {
            int order[N_SEQ], n_open = 0;
            for (int s = 0; s < N_SEQ; s++)
                if (done[s] < sd[s].n) order[n_open++] = s;
            if (n_open == 0) break;
            for (int i = n_open - 1; i > 0; i--) {
                int k = (int)rnd((uint32_t)i + 1), t = order[i];
                order[i] = order[k];
                order[k] = t;
            }
            const int n_pick = 1 + (int)rnd((uint32_t)n_open);
            size_t nt = 0;
            for (int k = 0; k < n_pick; k++) {
                const int s = order[k];
                size_t len = 1 + rnd(MAX_CHUNK);
                if (len > sd[s].n - done[s]) len = sd[s].n - done[s];
                CHECK(kv_seq_prepare(&seq[s], len) == DJ_OK);
                for (size_t i = 0; i < len; i++) {
                    tok[nt] = sd[s].tok[done[s] + i];
                    pos[nt] = (uint32_t)(done[s] + i);
                    tseq[nt] = &seq[s];
                    who[nt] = s;
                    out[nt] = (uint32_t)nt;
                    snaps[nt] = rnd(4) == 0 ? snapbuf + nt * RS : NULL;
                    nt++;
                }
            }
            if (n_pick > 1) n_mixed++;
            struct dj_batch b = {nt, tok, pos, tseq, nt, out, NULL, NULL, snaps};
            CHECKF(ctx_forward(c, &b, lg) == DJ_OK, "%s: %s", what, dj_last_error());
            for (size_t r = 0; r < nt; r++) {
                const int s = who[r];
                n_rows++;
                n_bad += hash(lg + r * V, V) != sd[s].ref[pos[r]];
                if (snaps[r]) {
                    n_snap++;
                    n_snap_bad += hash(snaps[r], RS) != sd[s].snap[pos[r]];
                }
            }
            for (int k = 0; k < n_pick; k++) {
                const int s = order[k];
                size_t len = 0;
                for (size_t i = 0; i < nt; i++) len += who[i] == s;
                kv_seq_advance(&seq[s], len);
                done[s] += len;
                CHECK(seq[s].rs_pos == done[s]);
            }
        }
        for (int s = 0; s < N_SEQ; s++) {
            n_state_bad += memcmp(seq[s].rs, sd[s].final, RS * sizeof(float)) != 0;
            for (uint32_t il = 0; il < hp->n_layer_kv; il++)
                for (size_t p = 0; p < sd[s].n; p++)
                    n_kv_bad += memcmp(kv_seq_k(&seq[s], il, p, bs), kv_seq_k(&ref_seq[s], il, p, bs),
                                       kv_pool_k_row_bytes(pool)) ||
                                memcmp(kv_seq_v(&seq[s], il, p, bs), kv_seq_v(&ref_seq[s], il, p, bs),
                                       kv_pool_v_row_bytes(pool));
        }
        for (int s = 0; s < N_SEQ; s++) kv_seq_free(&seq[s]);
        ctx_free(c);
    }
    CHECKF(n_bad == 0, "%s: %zu of %zu logits rows differ from the sequence run alone", what, n_bad, n_rows);
    CHECKF(n_snap_bad == 0, "%s: %zu of %zu state snapshots differ", what, n_snap_bad, n_snap);
    CHECKF(n_state_bad == 0, "%s: %zu final states differ", what, n_state_bad);
    CHECKF(n_kv_bad == 0, "%s: %zu K/V rows differ", what, n_kv_bad);
    CHECKF(n_mixed > (size_t)n_sched && n_snap > 10 * (size_t)n_sched, "%s: only %zu mixed batches, %zu snapshots",
           what, n_mixed, n_snap);
    printf("%s%s: %d schedules (ubatch %u, %u%s, 1-2 threads), %zu logits rows, %zu snapshots, %zu multi-sequence "
           "batches: all bitwise equal to each sequence alone\n", g_gpu ? "GPU " : "", what, n_sched, ubatches[0],
           ubatches[1], n_sched > 2 ? ", 512" : "", n_rows, n_snap, n_mixed);

    { /* refusals, and a restart from 0 */
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 256;
        cp.pool = pool;
        cp.gpu = g_gpu;
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        struct kv_seq a;
        kv_seq_init(&a, pool);
        CHECK(kv_seq_prepare(&a, 8) == DJ_OK);
        struct kv_seq *s8[8];
        for (int i = 0; i < 8; i++) s8[i] = &a, pos[i] = (uint32_t)i;
        uint32_t p_gap[2] = {0, 2}, p_late[2] = {1, 2};
        struct dj_batch gap = {2, sd[0].tok, p_gap, s8, 0, NULL, NULL, NULL, NULL};
        CHECK(ctx_forward(c, &gap, NULL) == DJ_ERR_INVALID);
        struct dj_batch late = {2, sd[0].tok, p_late, s8, 0, NULL, NULL, NULL, NULL};
        CHECK(ctx_forward(c, &late, NULL) == DJ_ERR_INVALID);
        struct dj_batch ok = {4, sd[0].tok, pos, s8, 0, NULL, NULL, NULL, NULL};
        CHECK(ctx_forward(c, &ok, NULL) == DJ_OK);
        kv_seq_advance(&a, 4);
        CHECK(a.rs_pos == 4);
        CHECK(ctx_forward(c, &ok, NULL) == DJ_ERR_INVALID); /* positions 0.. again: the state is at 4 */
        CHECK(ctx_forward_exit(c, &ok, 1, NULL, NULL) == DJ_ERR_UNSUPPORTED);
        ctx_set_seq(c, &a);
        CHECK(ctx_decode_at(c, sd[0].tok, pos, 2, NULL) == DJ_ERR_UNSUPPORTED);
        double dev[2];
        CHECK(ctx_probe_k(c, sd[0].tok, pos, 2, 0, dev) == DJ_ERR_UNSUPPORTED);
        ctx_truncate(c, 2); /* inside: the state at 2 is not kept */
        CHECK(a.rs_pos == KV_RS_NONE);
        CHECK(ctx_decode(c, sd[0].tok + 2, 1, NULL, false) == DJ_ERR_INVALID);
        ctx_truncate(c, 0); /* the zero state: runs again, bitwise the reference */
        CHECK(ctx_decode(c, sd[0].tok, sd[0].n, lg, false) == DJ_OK);
        CHECKF(hash(lg, V) == sd[0].ref[sd[0].n - 1] && !memcmp(a.rs, sd[0].final, RS * sizeof(float)),
               "%s: a restart from 0 differs from the reference", what);
        ctx_set_seq(c, NULL);
        kv_seq_free(&a);
        ctx_free(c);
    }
#ifdef DJ_SANITIZE_BUILD
    timing(m, what, 1, 32);
#else
    if (!g_gpu) timing(m, what, 1, 256); /* the CPU's recurrences */
#endif
    for (int s = 0; s < N_SEQ; s++) {
        kv_seq_free(&ref_seq[s]);
        free(sd[s].final);
    }
    free(lg);
    free(snapbuf);
    kv_pool_destroy(pool);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    char dir[] = "/tmp/deja_test_hybrid_forward_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    const char *tm = getenv("DJ_HYBRID_TIMING"); /* a hybrid model file to time as well (1 and 2 threads, 512 tokens) */
    if (tm && *tm) {
        struct dj_model *m = NULL;
        CHECKF(model_load(tm, &m) == DJ_OK, "%s: %s", tm, dj_last_error());
        for (int t = 1; m && t <= 2; t++) timing(m, tm, t, 512);
        model_free(m);
    }
    static const char *const archs[] = {"qwen35moe", "qwen3next"};
    for (int i = 0; i < 2; i++) {
        char path[600], *out = NULL;
        snprintf(path, sizeof path, "%s/%s-tiny.gguf", dir, archs[i]);
        /* on the GPU stories260K's 512-token vocabulary: lavapipe's output product is the cost */
        int rc = RUN(&out, "synth", "--arch", (char *)archs[i], "--preset", "tiny", "--vocab-from",
                     (char *)test_shared_path(argv[1], g_gpu ? "models/stories260K.gguf" : "vocab/ggml-vocab-llama-spm.gguf"),
                     "-o", path, "-t", "2");
        CHECKF(rc == 0, "synth %s: %s", archs[i], out);
        free(out);
        if (rc == 0) check_model(path, archs[i]);
        unlink(path);
    }
    rmdir(dir);
    TEST_END();
}
