/*
 * test_cli_model.c — end-to-end tests of the model commands: `deja run`
 * (greedy ids and dumped logits against golden/, logits_hash invariant
 * across ubatch sizes and thread counts; --spec leaves ids and logits
 * unchanged), `deja perplexity` against
 * llama.cpp's figure, `deja synth` for llama/qwen2/qwen3, and their errors;
 * `deja quantize` of the MoE golden models (deepseek2, qwen3moe) and their runs.
 */
#include <math.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "test.h"
#include "test_json.h"
#include "test_run.h"

static char tmpdir[] = "/tmp/deja_test_model_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

/* The value of "key": "..." or "key": number in a one-line JSON object, as text. */
static char *field(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    if (!p) return NULL;
    p += strlen(pat);
    if (*p == '"') p++;
    size_t n = strcspn(p, "\",}");
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void test_run_golden(const char *shared) {
    const char *model = test_shared_path(shared, "models/stories260K.gguf");
    char *doc = test_read_file(test_shared_path(shared, "golden/stories260K/p2.f32kv.json"), NULL);
    CHECK(doc != NULL);
    if (!doc) return;
    char *prompt = json_string(doc, "prompt");
    int *greedy = NULL;
    size_t ng = json_int_array(doc, "greedy", &greedy);
    CHECK(ng == 64);
    char *out = NULL;
    int rc = RUN(&out, "run", "-m", (char *)model, "-p", prompt, "-n", "32", "--ignore-eos", "--json", "--dump-logits",
                 (char *)tmp_path("steps.f32"));
    CHECKF(rc == 0, "%s", out);
    /* ids */
    int *ids = NULL;
    size_t n_ids = json_int_array(out, "ids", &ids);
    CHECK(n_ids == 32);
    CHECK(n_ids == 32 && !memcmp(ids, greedy, 32 * sizeof(int)));
    char *hash = field(out, "logits_hash");
    CHECK(hash && strlen(hash) == 16);
    /* dumped rows against the golden steps */
    size_t len = 0, glen = 0;
    float *rows = (float *)test_read_file(tmp_path("steps.f32"), &len);
    float *gold = (float *)test_read_file(test_shared_path(shared, "golden/stories260K/p2.f32kv.logits_steps.f32"), &glen);
    CHECK(rows && len == 32 * 512 * sizeof(float) && gold && glen == 64 * 512 * sizeof(float));
    if (rows && gold && len == 32 * 512 * sizeof(float)) {
        float worst = 0;
        for (size_t i = 0; i < 32 * 512; i++) worst = fmaxf(worst, fabsf(rows[i] - gold[i]));
        CHECKF(worst < 2e-3f, "dumped logits differ from golden by %g", worst);
    }
    free(rows);
    free(gold);
    free(out);
    /* the same hash for other batch shapes and thread counts */
    const char *cfg[][4] = {{"--ubatch", "1", "-t", "1"}, {"--ubatch", "3", "-t", "2"}, {"--ubatch", "7", "-t", "2"}};
    for (int k = 0; k < 3; k++) {
        rc = RUN(&out, "run", "-m", (char *)model, "-p", prompt, "-n", "32", "--ignore-eos", "--json",
                 (char *)cfg[k][0], (char *)cfg[k][1], (char *)cfg[k][2], (char *)cfg[k][3]);
        char *h = field(out, "logits_hash");
        CHECKF(rc == 0 && h && hash && !strcmp(h, hash), "%s %s %s %s: hash %s vs %s", cfg[k][0], cfg[k][1], cfg[k][2],
               cfg[k][3], h ? h : "?", hash ? hash : "?");
        free(h);
        free(out);
    }
    /* sampling: the same seed gives the same ids, with any ubatch */
    char *o1 = NULL, *o2 = NULL;
    RUN(&o1, "run", "-m", (char *)model, "-p", prompt, "-n", "24", "--temp", "0.9", "--seed", "7", "--json");
    RUN(&o2, "run", "-m", (char *)model, "-p", prompt, "-n", "24", "--temp", "0.9", "--seed", "7", "--json", "--ubatch",
        "2", "-t", "2");
    char *i1 = strstr(o1, "\"ids\""), *i2 = strstr(o2, "\"ids\"");
    CHECK(i1 && i2 && !strncmp(i1, i2, (size_t)(strstr(i1, "]") - i1)));
    free(o1);
    free(o2);
    /* finish reasons, stop strings, forward passes: the greedy text cut at a stop string that
     * spans two tokens is the text before it, and the stop string is not printed */
    rc = RUN(&o1, "run", "-m", (char *)model, "-p", prompt, "-n", "32", "--ignore-eos", "--json");
    char *fr = field(o1, "finish_reason"), *np = field(o1, "n_forward_passes"), *text = json_string(o1, "text");
    CHECKF(rc == 0 && fr && !strcmp(fr, "length") && np && atoi(np) == 31, "%s", o1);
    if (text && strlen(text) > 20) {
        char stop[8];
        memcpy(stop, text + 12, 5);
        stop[5] = 0;
        const char *at = strstr(text, stop);
        rc = RUN(&o2, "run", "-m", (char *)model, "-p", prompt, "-n", "32", "--ignore-eos", "--json", "--stop", "zzzq",
                 "--stop", stop);
        char *fr2 = field(o2, "finish_reason"), *t2 = json_string(o2, "text");
        CHECKF(rc == 0 && fr2 && !strcmp(fr2, "stop") && t2 && at && strlen(t2) == (size_t)(at - text) &&
                   !strncmp(t2, text, strlen(t2)),
               "stop '%s': %s", stop, o2);
        free(fr2);
        free(t2);
        free(o2);
        rc = RUN(&o2, "run", "-m", (char *)model, "-p", prompt, "-n", "32", "--ignore-eos", "--stop", stop);
        CHECKF(rc == 0 && !strstr(o2, stop) && strstr(o2, "deja run:"), "plain output with a stop string: %s", o2);
        free(o2);
    }
    free(fr);
    free(np);
    free(text);
    free(o1);
    /* a context that cannot fit in memory fails at start-up with the numbers */
    rc = RUN(&o1, "run", "-m", (char *)test_shared_path(shared, "models/codelm-15m-f16.gguf"), "-p", "x", "-n", "1",
             "-c", "10000000"); /* 8 KiB of K/V per position: 76 GiB */
    CHECKF(rc == 1 && strstr(o1, "not enough memory for one context") && strstr(o1, "available"), "%s", o1);
    free(o1);
    free(hash);
    free(ids);
    free(greedy);
    free(prompt);
    free(doc);
}

/* deja run --spec: the same ids and logits hash as plain decoding, greedy and seeded, fewer
 * forward passes, and the "spec" object with per-source and per-position counts; bad
 * speculation options are errors with a message. */
static void test_run_spec(const char *shared) {
    const char *model = test_shared_path(shared, "models/codelm-15m-f16.gguf");
    char prompt[2048];
    const char *code = "def parse(line):\n    key, value = line.split('=', 1)\n    return key.strip(), value.strip()\n\n";
    snprintf(prompt, sizeof prompt, "%s%s%s", code, code, code);
    const char *temps[2][4] = {{"--temp", "0", "--seed", "0"}, {"--temp", "0.7", "--seed", "11"}};
    for (int t = 0; t < 2; t++) {
        char *o1 = NULL, *o2 = NULL;
        int rc1 = RUN(&o1, "run", "-m", (char *)model, "-p", prompt, "-n", "40", "--ignore-eos", "--json",
                      (char *)temps[t][0], (char *)temps[t][1], (char *)temps[t][2], (char *)temps[t][3]);
        int rc2 = RUN(&o2, "run", "-m", (char *)model, "-p", prompt, "-n", "40", "--ignore-eos", "--json", "--spec",
                      "--spec-fixed", (char *)temps[t][0], (char *)temps[t][1], (char *)temps[t][2], (char *)temps[t][3]);
        char *h1 = field(o1, "logits_hash"), *h2 = field(o2, "logits_hash");
        const char *i1 = strstr(o1, "\"ids\""), *i2 = strstr(o2, "\"ids\"");
        char *p1 = field(o1, "n_forward_passes"), *p2 = field(o2, "n_forward_passes");
        char *acc = field(o2, "accepted");
        CHECKF(rc1 == 0 && rc2 == 0 && h1 && h2 && !strcmp(h1, h2) && i1 && i2 &&
                   !strncmp(i1, i2, (size_t)(strstr(i1, "]") - i1)),
               "temp %s: --spec changed the output:\n%s\n%s", temps[t][1], o1, o2);
        CHECKF(p1 && p2 && acc && atoi(acc) > 0 && atoi(p2) < atoi(p1) && strstr(o2, "\"sources\": \"lookup,memo\"") &&
                   strstr(o2, "\"by_position\": [[") && strstr(o2, "\"lookup\": {\"proposed\": "),
               "temp %s: %s", temps[t][1], o2);
        free(h1);
        free(h2);
        free(p1);
        free(p2);
        free(acc);
        free(o1);
        free(o2);
    }
    char *out = NULL;
    CHECK(RUN(&out, "run", "-m", (char *)model, "-p", "x", "--spec-sources", "lookup,bogus") == 1 &&
          strstr(out, "unknown draft source 'bogus'"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)model, "-p", "x", "--spec-sources", "exit", "--draft-exit-layer", "8") == 1 &&
          strstr(out, "--draft-exit-layer 8: the model has 8 layers"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)model, "-p", "x", "--draft-max", "0") == 1 && strstr(out, "--draft-max"));
    free(out);
}

static void test_perplexity(const char *shared) {
    char *out = NULL;
    int rc = RUN(&out, "perplexity", "-m", (char *)test_shared_path(shared, "models/stories260K.gguf"), "-f",
                 (char *)test_shared_path(shared, "golden/tinystories_sample.txt"), "-c", "128", "-t", "2", "--json");
    CHECKF(rc == 0, "%s", out);
    char *ppl = field(out, "ppl"), *nch = field(out, "n_chunks"), *err = field(out, "ppl_err");
    /* golden/README.md: llama-perplexity -c 128 → PPL = 5.7252 ± 0.17151 over 68 chunks */
    CHECKF(ppl && fabs(atof(ppl) - 5.7252) / 5.7252 < 0.001, "ppl %s, llama.cpp 5.7252", ppl ? ppl : "?");
    CHECKF(err && fabs(atof(err) - 0.17151) < 0.002, "ppl_err %s, llama.cpp 0.17151", err ? err : "?");
    CHECK(nch && atoi(nch) == 68);
    printf("stories260K perplexity -c 128: %s ± %s over %s chunks (llama.cpp: 5.7252 ± 0.17151, 68)\n", ppl, err, nch);
    free(ppl);
    free(nch);
    free(err);
    free(out);
}

static void test_synth(const char *shared) {
    const char *vocab = test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf");
    const char *archs[] = {"llama", "qwen2", "qwen3"};
    for (int a = 0; a < 3; a++) {
        char name[64];
        snprintf(name, sizeof name, "synth-%s.gguf", archs[a]);
        const char *path = tmp_path(name);
        char *out = NULL;
        int rc = RUN(&out, "synth", "--arch", (char *)archs[a], "--preset", "tiny", "--vocab-from", (char *)vocab, "-o",
                     (char *)path);
        CHECKF(rc == 0, "synth %s: %s", archs[a], out);
        free(out);
        rc = RUN(&out, "inspect", (char *)path);
        CHECKF(rc == 0 && strstr(out, archs[a]) && strstr(out, "32000 tokens"), "%s", out);
        free(out);
        /* runs, and is batch-invariant on every architecture's code path */
        char *h1 = NULL, *h2 = NULL;
        rc = RUN(&h1, "run", "-m", (char *)path, "-p", "Hello world, this is a test of", "-n", "8", "--ignore-eos",
                 "--json");
        CHECKF(rc == 0, "run %s: %s", archs[a], h1);
        rc = RUN(&h2, "run", "-m", (char *)path, "-p", "Hello world, this is a test of", "-n", "8", "--ignore-eos",
                 "--json", "--ubatch", "1", "-t", "2");
        char *x = field(h1, "logits_hash"), *y = field(h2, "logits_hash");
        CHECKF(x && y && !strcmp(x, y), "%s: %s vs %s", archs[a], x ? x : "?", y ? y : "?");
        free(x);
        free(y);
        free(h1);
        free(h2);
    }
    /* the same seed writes the same bytes */
    char *out = NULL;
    RUN(&out, "synth", "--arch", "llama", "--preset", "tiny", "--vocab-from", (char *)vocab, "-o",
        (char *)tmp_path("again.gguf"), "-t", "1");
    free(out);
    size_t l1, l2;
    char *b1 = test_read_file(tmp_path("synth-llama.gguf"), &l1), *b2 = test_read_file(tmp_path("again.gguf"), &l2);
    CHECK(b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1));
    free(b1);
    free(b2);
    CHECK(RUN(&out, "synth", "--arch", "gpt9", "--preset", "tiny", "--vocab-from", (char *)vocab, "-o",
              (char *)tmp_path("x.gguf")) == 1 && strstr(out, "gpt9"));
    free(out);
}

/* The type of tensor `name` in the GGUF at path; -1 if absent or unreadable. */
static int tensor_type(const char *path, const char *name) {
    struct gguf_ctx *g = NULL;
    if (gguf_open(path, &g) != DJ_OK) return -1;
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    int type = t ? (int)t->type : -1;
    gguf_close(g);
    return type;
}

/* `deja quantize` on the MoE golden models (deepseek2 lite and V3: MLA, shared
 * experts, a selection bias, groups; qwen3moe): each type quantizes, keeps the
 * router and the bias F32 (llama.cpp's rules), quantizes the experts (to the type
 * or, where the block does not divide a row, llama.cpp's fallback: Q5_0 for Q4_K,
 * F16 for the 32-blocks, which llama-quantize refuses), and the result runs:
 * finite logits, the same logits_hash and ids in one batch and token by token
 * with 2 threads.  q8_0's logits at the last prompt position are within 0.5 of
 * the F32 model's (measured 0.17 lite, 0.24 V3, 0.17 qwen3moe; q4_0 is 1.6-5.3:
 * not checked).  Golden 8-expert models get Q8_0 attn_k/attn_v in every type. */
static void test_quantize_moe(const char *shared) {
    static const char *const models[] = {"deepseek2-lite-tiny", "deepseek2-v3-tiny", "qwen3moe-tiny"};
    static const char *const types[] = {"q8_0", "q4_0", "q4_k_m"};
    const char *prompt = "Hello, world. Once upon a time";
    for (int mi = 0; mi < 3; mi++) {
        char rel[128], src[512], *out = NULL;
        snprintf(rel, sizeof rel, "golden/moe/%s.gguf", models[mi]);
        snprintf(src, sizeof src, "%s", test_shared_path(shared, rel));
        const bool ds = models[mi][0] == 'd', v3 = strstr(models[mi], "v3") != NULL;
        int rc = RUN(&out, "run", "-m", src, "-p", (char *)prompt, "-n", "1", "--json", "--dump-logits",
                     (char *)tmp_path("moe_f32.f32"));
        CHECKF(rc == 0, "%s: %s", models[mi], out);
        free(out);
        for (int ti = 0; ti < 3; ti++) {
            const char *q = tmp_path("moe_q.gguf");
            rc = RUN(&out, "quantize", src, (char *)q, (char *)types[ti]);
            CHECKF(rc == 0, "quantize %s %s: %s", models[mi], types[ti], out);
            free(out);
            if (rc) continue;
            const int base = ti == 0 ? DJ_TYPE_Q8_0 : ti == 1 ? DJ_TYPE_Q4_0 : DJ_TYPE_Q4_K;
            const int router = tensor_type(q, "blk.1.ffn_gate_inp.weight"), up = tensor_type(q, "blk.1.ffn_up_exps.weight"),
                      norm = tensor_type(q, "blk.1.ffn_norm.weight");
            CHECKF(router == DJ_TYPE_F32 && norm == DJ_TYPE_F32, "%s %s: router %d, norm %d, expected F32", models[mi],
                   types[ti], router, norm);
            CHECKF(up == base || (base == DJ_TYPE_Q4_K && up == DJ_TYPE_Q5_0) || up == DJ_TYPE_F16, "%s %s: experts are %s",
                   models[mi], types[ti], dj_type_name((uint32_t)up));
            CHECKF(up != DJ_TYPE_F32, "%s %s: experts left F32", models[mi], types[ti]);
            if (v3) CHECK(tensor_type(q, "blk.1.exp_probs_b.bias") == DJ_TYPE_F32);
            if (ds) CHECK(tensor_type(q, "blk.1.ffn_up_shexp.weight") != DJ_TYPE_F32);
            if (!ds) CHECKF(tensor_type(q, "blk.0.attn_k.weight") == DJ_TYPE_Q8_0 &&
                                tensor_type(q, "blk.0.attn_v.weight") == DJ_TYPE_Q8_0,
                            "%s %s: 8 experts: attn_k/attn_v not Q8_0", models[mi], types[ti]);
            char *hash[2] = {0}, *ids[2] = {0};
            for (int k = 0; k < 2; k++) {
                rc = k ? RUN(&out, "run", "-m", (char *)q, "-p", (char *)prompt, "-n", "8", "--ignore-eos", "--json",
                             "--ubatch", "1", "-t", "2")
                       : RUN(&out, "run", "-m", (char *)q, "-p", (char *)prompt, "-n", "8", "--ignore-eos", "--json",
                             "--dump-logits", (char *)tmp_path("moe_q.f32"));
                CHECKF(rc == 0, "run %s %s: %s", models[mi], types[ti], out);
                hash[k] = out ? field(out, "logits_hash") : NULL;
                const char *p = out ? strstr(out, "\"ids\": [") : NULL;
                ids[k] = p ? strndup(p, strcspn(p, "]")) : NULL;
                free(out);
            }
            CHECKF(hash[0] && hash[1] && !strcmp(hash[0], hash[1]) && ids[0] && ids[1] && !strcmp(ids[0], ids[1]),
                   "%s %s: token by token differs from one batch", models[mi], types[ti]);
            size_t la = 0, lb = 0;
            float *a = (float *)test_read_file(tmp_path("moe_f32.f32"), &la), *b = (float *)test_read_file(tmp_path("moe_q.f32"), &lb);
            const size_t V = 2012;
            CHECK(a && b && la >= V * sizeof(float) && lb >= V * sizeof(float));
            if (a && b && la >= V * sizeof(float) && lb >= V * sizeof(float)) {
                float worst = 0;
                bool finite = true;
                for (size_t i = 0; i < lb / sizeof(float); i++) finite &= isfinite(b[i]) != 0;
                for (size_t i = 0; i < V; i++) worst = fmaxf(worst, fabsf(a[i] - b[i]));
                CHECKF(finite, "%s %s: logits not finite", models[mi], types[ti]);
                if (ti == 0) CHECKF(worst <= 0.5f, "%s q8_0: max |logit diff| to F32 %g > 0.5", models[mi], worst);
                printf("quantize %s %s: experts %s, runs, batch invariant; last prompt row max |diff| to F32 %.3g\n",
                       models[mi], types[ti], dj_type_name((uint32_t)up), worst);
            }
            free(a), free(b);
            for (int k = 0; k < 2; k++) free(hash[k]), free(ids[k]);
        }
    }
}

static void test_errors(const char *shared) {
    const char *model = test_shared_path(shared, "models/stories260K.gguf");
    char *out = NULL;
    CHECK(RUN(&out, "run", "-m", (char *)model, "-p", "x", "-n", "abc") == 1 && strstr(out, "-n"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)model, "-p", "Once upon a time", "-n", "100", "-c", "16") == 1 &&
          strstr(out, "context size"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)test_shared_path(shared, "vocab/ggml-vocab-gpt-2.gguf"), "-p", "x") == 1 &&
          strstr(out, "gpt2") != NULL);
    free(out);
    CHECK(RUN(&out, "perplexity", "-m", (char *)model, "-f", (char *)test_shared_path(shared, "golden/README.md"), "-c",
              "4096") == 1 &&
          strstr(out, "2*CTX"));
    free(out);
    CHECK(RUN(&out, "run", "--help") == 0 && strstr(out, "usage"));
    free(out);
    CHECK(RUN(&out, "bench", "--help") == 0 && strstr(out, "usage") && strstr(out, "--batch"));
    free(out);
    /* --batch: one row per sequence count, llama-batched-bench's columns; a bad list is an error */
    CHECKF(RUN(&out, "bench", "-m", (char *)model, "--batch", "1,3", "-p", "16", "-n", "4", "-t", "2") == 0 && out &&
               strstr(out, "S_TG t/s") && strstr(out, "|    16 |     4 |   1 |") && strstr(out, "|    16 |     4 |   3 |"),
           "%s", out ? out : "");
    free(out);
    CHECK(RUN(&out, "bench", "-m", (char *)model, "--batch", "2,0", "-p", "16", "-n", "4") == 1 && strstr(out, "--batch"));
    free(out);
    CHECK(RUN(&out, "quantize", "--help") == 0 && strstr(out, "usage"));
    free(out);
    CHECK(RUN(&out, "synth", "--help") == 0 && strstr(out, "usage"));
    free(out);
    CHECK(RUN(&out, "perplexity", "--help") == 0 && strstr(out, "usage"));
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    if (!mkdtemp(tmpdir)) return 2;
    test_run_golden(argv[1]);
    test_run_spec(argv[1]);
    test_perplexity(argv[1]);
    test_synth(argv[1]);
    test_errors(argv[1]);
    test_quantize_moe(argv[1]);
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", tmpdir, NULL}, &out);
    free(out);
    TEST_END();
}
