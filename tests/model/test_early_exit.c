/*
 * test_early_exit.c — early exit and resume (ctx_forward_exit, dj_batch's
 * start_layer/hidden: the model side of self-speculative decoding with the
 * draft's K/V shared) change no bit.
 *
 * Per model (stories260K, codelm-15m f16) and K/V type (the default, which
 * DJ_KV_TYPE sets, and f32): three sequences of random tokens.  Reference:
 * each sequence alone through ctx_decode, every position's logits hashed.
 * Then, on one shared pool, for exit layers L in {1, n_layer/2, n_layer-1}
 * and ubatches of 512 and 3 (the second splits every batch, so ubatches
 * mixing start layers, and ubatches all at L, both occur):
 *   - prefill A, B and C plainly (ctx_forward);
 *   - draft: ctx_forward_exit of K tokens of A at L and of K tokens of B at
 *     L2 (another layer), keeping their hidden rows; the early-exit logits
 *     must differ from the full model's (the test can fail);
 *   - verify: one ctx_forward of [C's next token at 0, A's K tokens resuming
 *     at L, A's next token at 0, B's K tokens resuming at L2, B's next at 0,
 *     C's token after that at 0]; every logits row must hash equal to the
 *     reference, and every K/V row of every layer of every position of the
 *     three sequences must equal the reference's, bitwise.
 * Also: with n_exit = n_layer the logits are ctx_forward's; a batch whose
 * tokens all resume at L runs only layers >= L (RoPE table hits: 2 per token
 * per layer run); bad n_exit and bad start layers give DJ_ERR_INVALID.
 * Last, `deja perplexity --exit-scan --json` (the measurement for choosing L)
 * runs and reports every exit layer, and its perplexity is unchanged by it.
 *
 * With DJ_TEST_GPU=N (CTest's model/test_early_exit_vulkan_f16: Vulkan device 0, lavapipe in
 * CI) the same cases run on that device for stories260K (its K/V type and f32): drafts that
 * exit early, verification batches mixing start layers in one ubatch (rows ordered by start
 * layer, as on the CPU), bitwise the GPU's plain run; exit 77 (SKIP) without a device.
 */
#include <stdint.h>

#include "core/ggml_type.h"
#include "core/hash.h"
#include "model/context.h"
#include "test.h"
#include "test_gpu.h"
#include "test_run.h"

enum { N_SEQ = 3, PRE = 21, K = 4, MAX_LEN = PRE + 2 * (K + 2) + 2, N_CTX = 128 };

static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 33) % n;
}

static uint64_t row_hash(const float *row, size_t n) { return test_hash_f32(DJ_FNV_OFFSET, row, n); }

struct seqdata {
    dj_token tok[MAX_LEN];
    uint64_t ref[MAX_LEN]; /* hash of the logits after each position */
    struct kv_seq ref_seq;
};

static size_t kv_rows_differ(const struct kv_pool *pool, const struct dj_model *m, const struct kv_seq *a,
                             const struct kv_seq *b, size_t n_pos, uint32_t bs) {
    size_t bad = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++)
        for (size_t p = 0; p < n_pos; p++)
            bad += memcmp(kv_seq_k(a, il, p, bs), kv_seq_k(b, il, p, bs), kv_pool_k_row_bytes(pool)) != 0 ||
                   memcmp(kv_seq_v(a, il, p, bs), kv_seq_v(b, il, p, bs), kv_pool_v_row_bytes(pool)) != 0;
    return bad;
}

/* The verification batch, built token by token. */
struct vbatch {
    dj_token tok[2 * K + 4];
    uint32_t pos[2 * K + 4], start[2 * K + 4], out[2 * K + 4];
    struct kv_seq *ts[2 * K + 4];
    int who[2 * K + 4];
    float *hb; /* (2K+4, E) hidden rows */
    size_t n, E;
};

/* Appends token p of sequence s starting at layer start from hidden row h (NULL: a row of NaNs, which must be unread). */
static void push(struct vbatch *vb, const struct seqdata *sd, struct kv_seq *seq, int s, uint32_t p, uint32_t start,
                 const float *h) {
    const size_t i = vb->n++;
    vb->tok[i] = sd[s].tok[p];
    vb->pos[i] = p;
    vb->start[i] = start;
    vb->ts[i] = &seq[s];
    vb->who[i] = s;
    vb->out[i] = (uint32_t)i;
    if (h) memcpy(vb->hb + i * vb->E, h, vb->E * sizeof(float));
    else memset(vb->hb + i * vb->E, 0xff, vb->E * sizeof(float));
}

/* Plain ctx_forward of tokens [from, to) of one sequence, advancing it. */
static void run_plain(struct dj_context *c, struct kv_seq *s, const dj_token *tok, uint32_t from, uint32_t to) {
    uint32_t pos[MAX_LEN];
    struct kv_seq *ts[MAX_LEN];
    for (uint32_t i = from; i < to; i++) {
        pos[i - from] = i;
        ts[i - from] = s;
    }
    CHECK(kv_seq_prepare(s, to - from) == DJ_OK);
    struct dj_batch b = {to - from, tok + from, pos, ts, 0, NULL};
    CHECK(ctx_forward(c, &b, NULL) == DJ_OK);
    kv_seq_advance(s, to - from);
}

static void check_model(const char *path, uint32_t kv_type) {
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s", path);
    if (!m) return;
    const char *tname = dj_type_info(kv_type)->name;
    if (m->hp.head_dim % dj_type_info(kv_type)->blck) {
        printf("%s: K/V type %s does not fit head size %u: skipped\n", path, tname, m->hp.head_dim);
        model_free(m);
        return;
    }
    const size_t V = m->hp.n_vocab, E = m->hp.n_embd;
    const uint32_t NL = m->hp.n_layer, bs = 16;
    static struct seqdata sd[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        for (size_t i = 0; i < MAX_LEN; i++) sd[s].tok[i] = (dj_token)rnd((uint32_t)V);
    struct kv_pool_params pp = {NL, m->hp.n_head_kv * m->hp.head_dim, bs, 256, kv_type, kv_type};
    struct kv_pool *pool = NULL;
    CHECK(kv_pool_create(&pp, &pool) == DJ_OK);
    if (!pool) {
        model_free(m);
        return;
    }
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = N_CTX;
    cp.pool = pool;
    cp.gpu = g_gpu;
    cp.rope_table_max = N_CTX; /* every rotation a table hit: counts the layers run */
    float *lg = malloc(MAX_LEN * 2 * V * sizeof(float));
    float *hid = malloc(MAX_LEN * E * sizeof(float));

    /* references: each sequence alone, plainly */
    {
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        for (int s = 0; s < N_SEQ; s++) {
            kv_seq_init(&sd[s].ref_seq, pool);
            ctx_set_seq(c, &sd[s].ref_seq);
            CHECK(ctx_decode(c, sd[s].tok, MAX_LEN, lg, true) == DJ_OK);
            for (size_t i = 0; i < MAX_LEN; i++) sd[s].ref[i] = row_hash(lg + i * V, V);
        }
        ctx_set_seq(c, NULL);
        ctx_free(c);
    }

    /* n_exit = n_layer: ctx_forward's logits, bit for bit, and the hidden rows of every token */
    {
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        struct kv_seq s;
        kv_seq_init(&s, pool);
        run_plain(c, &s, sd[0].tok, 0, PRE);
        CHECK(kv_seq_prepare(&s, K) == DJ_OK);
        uint32_t pos[K], out[K];
        struct kv_seq *ts[K];
        for (uint32_t i = 0; i < K; i++) pos[i] = PRE + i, ts[i] = &s, out[i] = i;
        struct dj_batch b = {K, sd[0].tok + PRE, pos, ts, K, out};
        for (int pass = 0; pass < 2; pass++) { /* with and without hidden rows */
            CHECK(ctx_forward_exit(c, &b, NL, pass ? hid : NULL, lg) == DJ_OK);
            size_t bad = 0;
            for (uint32_t i = 0; i < K; i++) bad += row_hash(lg + i * V, V) != sd[0].ref[PRE + i];
            CHECKF(bad == 0, "%s (%s): n_exit = n_layer: %zu of %d logits rows differ from ctx_forward's", path, tname,
                   bad, K);
        }
        kv_seq_advance(&s, K);
        CHECKF(kv_rows_differ(pool, m, &s, &sd[0].ref_seq, PRE + K, bs) == 0, "%s (%s): n_exit = n_layer: K/V differ",
               path, tname);
        kv_seq_free(&s);
        ctx_free(c);
    }

    uint32_t exits[3] = {1, NL / 2, NL - 1};
    const uint32_t ubatches[2] = {512, 3};
    size_t n_cases = 0;
    for (int ie = 0; ie < 3; ie++) {
        const uint32_t L = exits[ie];
        if (L < 1 || (ie > 0 && L == exits[ie - 1])) continue;
        const uint32_t L2 = NL - L > 0 ? NL - L : 1; /* B drafts at another layer (the same when NL = 2L) */
        for (int iu = 0; iu < 2; iu++) {
            struct dj_ctx_params cpu = cp;
            cpu.n_ubatch = ubatches[iu];
            struct dj_context *c = NULL;
            CHECK(ctx_create(m, cpu, &c) == DJ_OK);
            if (!c) continue;
            struct kv_seq seq[N_SEQ];
            for (int s = 0; s < N_SEQ; s++) {
                kv_seq_init(&seq[s], pool);
                run_plain(c, &seq[s], sd[s].tok, 0, PRE + (uint32_t)s); /* different lengths */
            }
            /* drafts: K tokens of A at L, of B at L2, one ctx_forward_exit each */
            float *hid_a = hid, *hid_b = hid + K * E;
            const uint32_t lay[2] = {L, L2};
            for (int s = 0; s < 2; s++) {
                const uint32_t p0 = PRE + (uint32_t)s;
                CHECK(kv_seq_prepare(&seq[s], K + 1) == DJ_OK);
                uint32_t pos[K], out[K];
                struct kv_seq *ts[K];
                for (uint32_t i = 0; i < K; i++) pos[i] = p0 + i, ts[i] = &seq[s], out[i] = i;
                struct dj_batch b = {K, sd[s].tok + p0, pos, ts, K, out};
                CHECK(ctx_forward_exit(c, &b, lay[s], s ? hid_b : hid_a, lg) == DJ_OK);
                size_t same = 0;
                for (uint32_t i = 0; i < K; i++) same += row_hash(lg + i * V, V) == sd[s].ref[p0 + i];
                CHECKF(same == 0, "%s (%s): exit at layer %u of %u: %zu of %d logits rows equal the full model's",
                       path, tname, lay[s], NL, same, K);
            }
            /* verification: one batch mixing resumed and plain tokens of three sequences */
            struct vbatch vb = {.E = E, .hb = malloc((2 * K + 4) * E * sizeof(float))};
            const uint32_t pc = PRE + 2;
            CHECK(kv_seq_prepare(&seq[2], 2) == DJ_OK);
            push(&vb, sd, seq, 2, pc, 0, NULL);
            for (uint32_t i = 0; i < K; i++) push(&vb, sd, seq, 0, PRE + i, L, hid_a + i * E);
            push(&vb, sd, seq, 0, PRE + K, 0, NULL);
            for (uint32_t i = 0; i < K; i++) push(&vb, sd, seq, 1, PRE + 1 + i, L2, hid_b + i * E);
            push(&vb, sd, seq, 1, PRE + 1 + K, 0, NULL);
            push(&vb, sd, seq, 2, pc + 1, 0, NULL);
            const size_t nt = vb.n;
            struct dj_batch b = {nt, vb.tok, vb.pos, vb.ts, nt, vb.out, vb.start, vb.hb};
            CHECK(ctx_forward(c, &b, lg) == DJ_OK);
            size_t bad = 0;
            for (size_t r = 0; r < nt; r++) bad += row_hash(lg + r * V, V) != sd[vb.who[r]].ref[vb.pos[r]];
            CHECKF(bad == 0, "%s (%s): resume at %u/%u, ubatch %u: %zu of %zu logits rows differ", path, tname, L, L2,
                   ubatches[iu], bad, nt);
            kv_seq_advance(&seq[0], K + 1);
            kv_seq_advance(&seq[1], K + 1);
            kv_seq_advance(&seq[2], 2);
            for (int s = 0; s < N_SEQ; s++) {
                const size_t n_pos = seq[s].n_pos;
                CHECKF(kv_rows_differ(pool, m, &seq[s], &sd[s].ref_seq, n_pos, bs) == 0,
                       "%s (%s): resume at %u/%u, ubatch %u: sequence %d's K/V rows differ", path, tname, L, L2,
                       ubatches[iu], s);
            }
            /* a batch whose tokens all resume at L runs layers L.. only: draft and verify one more of A */
            {
                const uint32_t p0 = (uint32_t)seq[0].n_pos;
                CHECK(kv_seq_prepare(&seq[0], 2) == DJ_OK);
                uint32_t pp2[2] = {p0, p0 + 1}, o2[2] = {0, 1}, st2[2] = {L, L};
                struct kv_seq *ts2[2] = {&seq[0], &seq[0]};
                struct dj_batch d = {2, sd[0].tok + p0, pp2, ts2, 0, NULL};
                const uint64_t h0 = c->rope_hits;
                CHECK(ctx_forward_exit(c, &d, L, hid, NULL) == DJ_OK);
                const uint64_t h1 = c->rope_hits;
                struct dj_batch v = {2, sd[0].tok + p0, pp2, ts2, 2, o2, st2, hid};
                CHECK(ctx_forward(c, &v, lg) == DJ_OK);
                const uint64_t h2 = c->rope_hits;
                CHECKF(h1 - h0 == 2ull * 2 * L && h2 - h1 == 2ull * 2 * (NL - L),
                       "%s: rope hits %llu (draft), %llu (verify) for 2 tokens at %u of %u layers", path,
                       (unsigned long long)(h1 - h0), (unsigned long long)(h2 - h1), L, NL);
                CHECK(row_hash(lg, V) == sd[0].ref[p0] && row_hash(lg + V, V) == sd[0].ref[p0 + 1]);
                kv_seq_advance(&seq[0], 2);
                CHECK(kv_rows_differ(pool, m, &seq[0], &sd[0].ref_seq, p0 + 2, bs) == 0);
            }
            n_cases++;
            free(vb.hb);
            for (int s = 0; s < N_SEQ; s++) kv_seq_free(&seq[s]);
            ctx_free(c);
        }
    }
    printf("%s (K/V %s): %zu exit/resume cases checked\n", path, tname, n_cases);

    /* bad arguments: refused with a message, nothing crashes */
    {
        struct dj_context *c = NULL;
        CHECK(ctx_create(m, cp, &c) == DJ_OK);
        struct kv_seq s;
        kv_seq_init(&s, pool);
        CHECK(kv_seq_prepare(&s, 2) == DJ_OK);
        dj_token t2[2] = {1, 2};
        uint32_t p2[2] = {0, 1}, o1[1] = {1};
        struct kv_seq *s2[2] = {&s, &s};
        struct dj_batch b = {2, t2, p2, s2, 1, o1};
        CHECK(ctx_forward_exit(c, &b, 0, hid, lg) == DJ_ERR_INVALID);
        CHECK(ctx_forward_exit(c, &b, NL + 1, hid, lg) == DJ_ERR_INVALID);
        uint32_t st_far[2] = {0, NL}, st_one[2] = {0, 1}, st_ok[2] = {1, 1};
        struct dj_batch b_far = {2, t2, p2, s2, 1, o1, st_far, hid};
        CHECK(ctx_forward(c, &b_far, lg) == DJ_ERR_INVALID);
        struct dj_batch b_nohid = {2, t2, p2, s2, 1, o1, st_one, NULL};
        CHECK(ctx_forward(c, &b_nohid, lg) == DJ_ERR_INVALID);
        struct dj_batch b_exit = {2, t2, p2, s2, 1, o1, st_ok, hid};
        CHECK(ctx_forward_exit(c, &b_exit, 1, hid, lg) == DJ_ERR_INVALID); /* starts at the exit layer */
        uint32_t p_bad[2] = {1, 0};
        struct dj_batch b_pos = {2, t2, p_bad, s2, 1, o1};
        CHECK(ctx_forward_exit(c, &b_pos, 1, hid, lg) == DJ_ERR_INVALID);
        kv_seq_free(&s);
        ctx_free(c);
    }

    for (int s = 0; s < N_SEQ; s++) kv_seq_free(&sd[s].ref_seq);
    struct kv_pool_stats ps;
    kv_pool_get_stats(pool, &ps);
    CHECK(ps.pinned == 0);
    kv_pool_destroy(pool);
    free(lg);
    free(hid);
    model_free(m);
}

/* The count of non-overlapping occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* `deja perplexity --exit-scan` on stories260K (5 layers): a row per exit layer 1..4, the same PPL as without. */
static void check_exit_scan_cli(const char *shared) {
    const char *model = test_shared_path(shared, "models/stories260K.gguf");
    const char *text = test_shared_path(shared, "golden/codelm/codelm_ppl_text.txt");
    char *plain = NULL, *scan = NULL;
    int rc = RUN(&plain, "perplexity", "-m", (char *)model, "-f", (char *)text, "-c", "64", "--chunks", "2", "--json");
    CHECKF(rc == 0, "perplexity: %s", plain);
    rc = RUN(&scan, "perplexity", "-m", (char *)model, "-f", (char *)text, "-c", "64", "--chunks", "2", "--json",
             "--exit-scan", "--exit-k", "3");
    CHECKF(rc == 0 && strstr(scan, "\"exit_scan\": {\"k\": 3, \"n_layer\": 5") && count_of(scan, "\"L\": ") == 4,
           "perplexity --exit-scan: %s", scan);
    const char *p0 = strstr(plain, "{\"ppl\": "), *p1 = strstr(scan, "{\"ppl\": ");
    CHECKF(p0 && p1 && !strncmp(p0, p1, 20), "--exit-scan changed the perplexity: %s / %s", plain, scan);
    free(plain);
    free(scan);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    const char *models[2] = {test_shared_path(argv[1], "models/stories260K.gguf"),
                             test_shared_path(argv[1], "models/codelm-15m-f16.gguf")};
    if (g_gpu) { /* lavapipe: stories260K; the CLI's scan runs on the CPU */
        check_model(models[0], kv_type_default());
        if (kv_type_default() != DJ_TYPE_F32) check_model(models[0], DJ_TYPE_F32);
        TEST_END();
    }
    for (int i = 0; i < 2; i++) {
        check_model(models[i], kv_type_default());
        if (kv_type_default() != DJ_TYPE_F32) check_model(models[i], DJ_TYPE_F32);
    }
    check_exit_scan_cli(argv[1]);
    TEST_END();
}
