/*
 * test_precompute.c — the RoPE table (spec §2.2 precomputation,
 * LLAMA_OPT_PRECOMPUTE_ENABLED / _ROPE_MAX) changes no bit.
 *
 * For each model the same prompt (past the table's first allocation of 1,024
 * positions, so the table grows while the prompt is evaluated) runs with the
 * table off (every rotation computed on the fly: the code before the table),
 * with the default capacity, with a tiny capacity (positions past it computed
 * on the fly, beside table rows) and with the table evaluated in odd ubatches
 * (codelm, the slowest, only the first three);
 * every logit of every position and every layer's K row of every position
 * must be bitwise the same.  The rotation of q is checked through the logits
 * (it feeds the attention of every layer), that of k also directly.
 *
 * Models: stories260K and codelm-15m (the bundled llamas, normal RoPE; neither
 * has rope_freqs), and synthesized ones for what they lack: a llama with a
 * rope_freqs tensor of uneven factors and linear scaling (both terms of the
 * angle), a qwen2 and a qwen3 (NeoX RoPE, qwen3 with its q/k head norms).
 *
 * Also: hits are counted as documented (2 x n_layer per token whose position
 * is in the table), the table holds what was asked, and the check can fail:
 * one table entry moved by one ulp changes the logits.  Last, through the
 * deja binary: `deja run` gives the same logits_hash with the table on and
 * off, and its opt-stats line carries precompute_rope_hits.
 */
#include <math.h>
#include <unistd.h>

#include "core/hash.h"
#include "model/context.h"
#include "test.h"
#include "test_run.h"
#include "test_synth.h"

enum { N_TOK = 1100, CHUNK = 128 };

struct result {
    uint64_t logits_hash; /* FNV-1a over every logit of every position, in order */
    uint64_t k_hash;      /* FNV-1a over every layer's K row of every position */
    float first[8];       /* a few logits of the last position, for messages */
    uint64_t hits;
    uint32_t rope_n;
};

static void tokens(const struct dj_model *m, dj_token *toks) {
    uint64_t x = 0x9E3779B97F4A7C15ull; /* a fixed stream of ids: the text does not matter, the positions do */
    for (size_t i = 0; i < N_TOK; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[i] = (dj_token)(x % m->hp.n_vocab);
    }
}

/* Evaluates the prompt in ubatches of `ubatch` tokens (CHUNK tokens per ctx_decode call)
 * with a RoPE table of rope_max positions; perturb >= 0: first fills the table by one run,
 * moves table float `perturb` up by one ulp, and runs again on the same context. */
static struct result run_ctx(const struct dj_model *m, uint32_t rope_max, uint32_t ubatch, long perturb) {
    struct result r = {0};
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = N_TOK + 8;
    cp.n_ubatch = ubatch;
    cp.rope_table_max = rope_max;
    struct dj_context *c = NULL;
    CHECKF(ctx_create(m, cp, &c) == DJ_OK, "%s", dj_last_error());
    if (!c) return r;
    dj_token *toks = malloc(N_TOK * sizeof *toks);
    const size_t V = m->hp.n_vocab, KV = c->n_embd_kv;
    float *lg = malloc(CHUNK * V * sizeof(float));
    tokens(m, toks);
    for (int pass = 0; pass < (perturb >= 0 ? 2 : 1); pass++) {
        if (pass == 1) {
            CHECK(c->rope_tab != NULL && (size_t)perturb < (size_t)c->rope_n * m->hp.n_rot);
            if (!c->rope_tab) break;
            c->rope_tab[perturb] = nextafterf(c->rope_tab[perturb], INFINITY);
            ctx_reset(c);
        }
        r.logits_hash = r.k_hash = DJ_FNV_OFFSET;
        for (size_t done = 0; done < N_TOK; done += CHUNK) {
            const size_t nb = N_TOK - done < CHUNK ? N_TOK - done : CHUNK;
            CHECKF(ctx_decode(c, toks + done, nb, lg, true) == DJ_OK, "%s", dj_last_error());
            r.logits_hash = dj_fnv1a(r.logits_hash, lg, nb * V * sizeof(float));
            if (done + nb == N_TOK) memcpy(r.first, lg + (nb - 1) * V, sizeof r.first);
        }
        for (uint32_t il = 0; il < m->hp.n_layer; il++)
            for (uint32_t p = 0; p < N_TOK; p++)
                r.k_hash = dj_fnv1a(r.k_hash, kv_seq_k(c->seq, il, p, c->block_size), KV * sizeof(float));
    }
    r.hits = c->rope_hits;
    r.rope_n = c->rope_n;
    free(lg);
    free(toks);
    ctx_free(c);
    return r;
}

/* all_cases false (the larger codelm): only the default and the 100-position capacity. */
static void check_model(const char *name, const char *path, bool all_cases) {
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s: %s", name, dj_last_error());
    if (!m) return;
    const int failed_before = test_failed;
    const uint64_t per_tok = 2 * (uint64_t)m->hp.n_layer; /* q and k, every layer */
    const struct result off = run_ctx(m, 0, 64, -1);
    CHECKF(off.hits == 0 && off.rope_n == 0, "%s off: %llu hits, %u rows", name, (unsigned long long)off.hits,
           off.rope_n);
    const struct { const char *what; uint32_t max, ubatch, want_n; } cases[] = {
        {"default capacity", ctx_default_params().rope_table_max, 64, N_TOK},
        {"capacity 100 (positions 100.. on the fly)", 100, 64, 100},
        {"capacity 1 (position 0 only)", 1, 64, 1},
        {"capacity past n_ctx, ubatches of 7", 1u << 30, 7, N_TOK},
    };
    CHECK(cases[0].max == 131072); /* the spec's default, the build's default on */
    for (size_t i = 0; i < (all_cases ? sizeof cases / sizeof cases[0] : 2); i++) {
        const struct result on = run_ctx(m, cases[i].max, cases[i].ubatch, -1);
        CHECKF(on.logits_hash == off.logits_hash && on.k_hash == off.k_hash,
               "%s, %s: logits %016llx vs %016llx off, K %016llx vs %016llx (last logits %.9g %.9g vs %.9g %.9g)", name,
               cases[i].what, (unsigned long long)on.logits_hash, (unsigned long long)off.logits_hash,
               (unsigned long long)on.k_hash, (unsigned long long)off.k_hash, on.first[0], on.first[1], off.first[0],
               off.first[1]);
        CHECKF(on.rope_n == cases[i].want_n && on.hits == per_tok * cases[i].want_n,
               "%s, %s: %u table rows, %llu hits (want %u, %llu)", name, cases[i].what, on.rope_n,
               (unsigned long long)on.hits, cases[i].want_n, (unsigned long long)(per_tok * cases[i].want_n));
    }
    /* the check can fail: the sine of pair 0 at position 5 one ulp up (every model has n_rot >= 2) */
    const long at = 5L * (long)m->hp.n_rot + (long)m->hp.n_rot / 2;
    const struct result bad = run_ctx(m, 131072, 64, at);
    CHECKF(bad.logits_hash != off.logits_hash && bad.k_hash != off.k_hash,
           "%s: a table entry one ulp off went unnoticed", name);
    if (test_failed == failed_before)
        printf("%s: %u layers, n_rot %u: logits and K bitwise equal with the table off, on, of capacity 100%s; "
               "one ulp off in the table changes them\n",
               name, m->hp.n_layer, m->hp.n_rot, all_cases ? ", of capacity 1, in ubatches of 7" : "");
    model_free(m);
}

static void set_linear(struct gguf_writer *w, void *ud) {
    const char *arch = ud;
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    CHECK(gguf_writer_set_str(w, key, "linear", 6) == DJ_OK);
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    CHECK(gguf_writer_set_f32(w, key, 3.0f) == DJ_OK);
}

/* Writes a synthesized model to dir/name.gguf; returns its path (static storage per call). */
static const char *synth(const char *shared, const char *dir, const char *name, struct synth_model *p, bool linear) {
    static char paths[4][512];
    static int slot;
    char *path = paths[slot++ & 3];
    snprintf(path, 512, "%s/%s.gguf", dir, name);
    p->n_ctx = 2048;
    CHECKF(synth_write(path, test_shared_path(shared, "vocab/ggml-vocab-deepseek-coder.gguf"), p,
                       linear ? set_linear : NULL, (void *)p->arch) == DJ_OK,
           "%s: %s", name, dj_last_error());
    return path;
}

/* `deja run` with the table on and off: the same logits_hash; precompute_rope_hits in opt-stats. */
static void check_cli(const char *model, uint32_t n_layer) {
    const char *prompt = "Once upon a time, there was a little girl named Lily.";
    char *out[3] = {NULL};
    setenv("LLAMA_OPT_STATS", "1", 1);
    const char *settings[3][2] = {{"1", ""}, {"0", ""}, {"1", "4"}}; /* ENABLED, ROPE_MAX */
    char hash[3][32] = {{0}};
    unsigned long long hits[3] = {0}, n_prompt = 0, n_gen = 0;
    for (int i = 0; i < 3; i++) {
        setenv("LLAMA_OPT_PRECOMPUTE_ENABLED", settings[i][0], 1);
        setenv("LLAMA_OPT_PRECOMPUTE_ROPE_MAX", settings[i][1], 1); /* "" counts as unset */
        CHECK(RUN(&out[i], "run", "-m", (char *)model, "-p", (char *)prompt, "-n", "12", "--json") == 0);
        const char *h = strstr(out[i], "\"logits_hash\":");
        const char *s = strstr(out[i], "\"precompute_rope_hits\":");
        CHECKF(h && s, "no logits_hash or precompute_rope_hits in: %s", out[i]);
        if (h) sscanf(h, "\"logits_hash\": \"%31[0-9a-f]\"", hash[i]);
        if (h && !hash[i][0]) sscanf(h, "\"logits_hash\":\"%31[0-9a-f]\"", hash[i]);
        if (s) sscanf(s, "\"precompute_rope_hits\":%llu", &hits[i]);
        const char *np = strstr(out[i], "\"n_prompt\":"), *ng = strstr(out[i], "\"n_gen\":");
        if (np && ng && i == 0) {
            sscanf(np, "\"n_prompt\":%llu", &n_prompt);
            if (!n_prompt) sscanf(np, "\"n_prompt\": %llu", &n_prompt);
            sscanf(ng, "\"n_gen\":%llu", &n_gen);
            if (!n_gen) sscanf(ng, "\"n_gen\": %llu", &n_gen);
        }
    }
    unsetenv("LLAMA_OPT_STATS");
    unsetenv("LLAMA_OPT_PRECOMPUTE_ENABLED");
    unsetenv("LLAMA_OPT_PRECOMPUTE_ROPE_MAX");
    CHECKF(hash[0][0] && !strcmp(hash[0], hash[1]) && !strcmp(hash[0], hash[2]), "logits_hash on %s, off %s, max 4 %s",
           hash[0], hash[1], hash[2]);
    /* every token fed: the prompt and all generated tokens but the last */
    const unsigned long long n_fed = n_prompt + n_gen - 1, per_tok = 2ull * n_layer;
    CHECKF(n_prompt > 4 && n_gen == 12 && hits[0] == per_tok * n_fed && hits[1] == 0 && hits[2] == per_tok * 4,
           "precompute_rope_hits %llu / %llu / %llu for %llu + %llu tokens", hits[0], hits[1], hits[2], n_prompt,
           n_gen);
    if (hash[0][0] && !strcmp(hash[0], hash[1]))
        printf("deja run: logits_hash %s with the table on, off and of 4 positions; "
               "precompute_rope_hits %llu / %llu / %llu\n",
               hash[0], hits[0], hits[1], hits[2]);
    for (int i = 0; i < 3; i++) free(out[i]);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *shared = argv[1];
    deja_bin = argv[2];
    char dir[] = "/tmp/deja_test_precompute_XXXXXX";
    if (!mkdtemp(dir)) return 2;

    check_model("stories260K", test_shared_path(shared, "models/stories260K.gguf"), true);
    check_model("codelm-15m-f16", test_shared_path(shared, "models/codelm-15m-f16.gguf"), false);

    /* rope_freqs of uneven factors (as llama3 scaling writes them) and linear scaling 1/3 */
    static const float freqs[8] = {1.0f, 1.0f, 1.3f, 2.7f, 4.1f, 8.0f, 8.0f, 8.0f};
    struct synth_model p = synth_default();
    p.rope_freqs = freqs;
    const char *path = synth(shared, dir, "llama-freqs", &p, true);
    struct dj_model *m = NULL;
    if (model_load(path, &m) == DJ_OK) { /* the file has what the case is about */
        CHECK(m->rope_freqs.data != NULL && m->hp.rope_linear_scale == 1.0f / 3.0f && m->hp.rope_type != DJ_ROPE_NEOX);
        model_free(m);
    }
    check_model("llama + rope_freqs + linear", path, true);
    unlink(path);

    p = synth_default();
    p.arch = "qwen2";
    path = synth(shared, dir, "qwen2", &p, false);
    if (model_load(path, &m) == DJ_OK) {
        CHECK(m->hp.rope_type == DJ_ROPE_NEOX);
        model_free(m);
    }
    check_model("qwen2 (NeoX)", path, true);
    unlink(path);

    p = synth_default();
    p.arch = "qwen3";
    path = synth(shared, dir, "qwen3", &p, false);
    check_model("qwen3 (NeoX, q/k norms)", path, true);
    unlink(path);

    check_cli(test_shared_path(shared, "models/stories260K.gguf"), 5);
    rmdir(dir);
    TEST_END();
}
