/*
 * test_determinism.c — DESIGN.md §3: the logits of every position of a prompt
 * are bitwise identical whether it is evaluated in one batch, token by token,
 * or in ubatches of 3, 7 and 64 tokens, with 1 or 2 threads, and with KV
 * blocks of 1, 7, 16, 64 positions or one block for everything — on every model
 * in ../shared/models and on every weight type: codelm quantized by
 * `deja quantize` to q8_0, q4_0, q4_k_m (which has Q4_K and Q6_K
 * tensors), q4_1, q5_0, q5_1 and iq4_nl, a `deja synth` tiny model in bf16, and a tiny gpt-oss (sliding windows,
 * sinks, MXFP4 experts).  Where the kernel table
 * repacks a type (kernels.h: pack; q8_0, q4_0, q4_K on AVX-512 and AVX2; q4_1, q5_0,
 * q5_1, iq4_nl, mxfp4 on AVX2; bf16 in the amx table's tile layout), the
 * model loaded as usual holds the repacked copy and its logits equal those of the
 * same file loaded with DJ_REPACK=0 (the file's layout), in one batch and token
 * by token.  CTest runs it three times: with the default table, with DJ_ISA=avx2
 * (model/test_determinism_avx2) and with DJ_ISA=avx512bf16 (its vdpbf16ps BF16); and with
 * each other K/V type (model/test_determinism_kv_*), without codelm's quantized copies.
 */
#include <stdlib.h>

#include "kernels/kernels.h"
#include "model/context.h"
#include "test.h"
#include "test_model.h"
#include "test_run.h"

static const char *prompt =
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\nOnce upon a time, there was a little dog named Max. "
    "{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la /tmp\"}}";

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    char dir[] = "/tmp/deja_test_det_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    char models[12][512];
    size_t n_models = 0;
    snprintf(models[n_models++], 512, "%s", test_shared_path(argv[1], "models/stories260K.gguf"));
    snprintf(models[n_models++], 512, "%s", test_shared_path(argv[1], "models/aidreams260K.gguf"));
    snprintf(models[n_models++], 512, "%s", test_shared_path(argv[1], "models/codelm-15m-f16.gguf"));
    const char *qtypes[] = {"q8_0", "q4_0", "q4_k_m", "q4_1", "q5_0", "q5_1", "iq4_nl"};
    /* The K/V types other than the default f16 (CTest's model/test_determinism_kv_*) change how
     * K/V rows are stored and read back in attention, the same code for every weight type:
     * there the quantized copies of codelm, which differ from codelm in their weights only,
     * are left to the default run (and to DJ_ISA's runs, whose tables they are about). */
    const int n_qtypes = kv_type_default() != DJ_TYPE_F16 ? 0 : 7;
    for (int q = 0; q < n_qtypes; q++) {
        char *out = NULL;
        snprintf(models[n_models], 512, "%s/codelm-%s.gguf", dir, qtypes[q]);
        int rc = RUN(&out, "quantize", models[2], models[n_models], (char *)qtypes[q]);
        CHECKF(rc == 0, "quantize %s: %s", qtypes[q], out);
        free(out);
        n_models++;
    }
    char *out = NULL;
    snprintf(models[n_models], 512, "%s/tiny-bf16.gguf", dir);
    int rc = RUN(&out, "synth", "--arch", "qwen3", "--preset", "tiny", "--type", "bf16", "--vocab-from",
                 (char *)test_shared_path(argv[1], "vocab/ggml-vocab-deepseek-coder.gguf"), "-o", models[n_models]);
    CHECKF(rc == 0, "synth bf16: %s", out);
    free(out);
    n_models++;
    /* gpt-oss: windows of 16 on the even layers (the prompt's 64+ tokens and the KV blocks of
     * 1, 7, 16 and 64 put window starts everywhere in a block), sinks, MXFP4 experts */
    snprintf(models[n_models], 512, "%s/gpt-oss-tiny.gguf", dir);
    rc = RUN(&out, "synth", "--arch", "gpt-oss", "--preset", "tiny", "--type", "mxfp4", "--vocab-from", models[2], "-o",
             models[n_models]);
    CHECKF(rc == 0, "synth gpt-oss: %s", out);
    free(out);
    n_models++;
    for (size_t mi = 0; mi < n_models; mi++) {
        struct dj_model *m = NULL;
        CHECKF(model_load(models[mi], &m) == DJ_OK, "%s", dj_last_error());
        if (!m) continue;
        if (m->hp.head_dim % dj_type_info(kv_type_default())->blck) { /* DJ_KV_TYPE: a quantized K/V */
            printf("%s: K/V type %s does not fit head size %u: skipped\n", models[mi],
                   dj_type_info(kv_type_default())->name, m->hp.head_dim);
            model_free(m);
            continue;
        }
        dj_token *toks = NULL;
        size_t n = 0;
        CHECK(vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, &toks, &n) == DJ_OK);
        CHECK(n > 64);
        const size_t bytes = n * m->hp.n_vocab * sizeof(float);
        /* the baseline: one batch, one thread, the whole prompt in one KV block */
        float *base = test_eval_logits(m, toks, n, (uint32_t)n, 1, (uint32_t)n);
        CHECK(base != NULL);
        struct { uint32_t ub; int th; uint32_t bs; } cfg[] = {
            {1, 1, 64}, {3, 1, 64}, {7, 2, 64}, {64, 1, 64}, {64, 2, 16}, {(uint32_t)n, 2, 64}, {5, 2, 7}, {1, 1, 1}};
        const size_t n_cfg = sizeof cfg / sizeof cfg[0];
        for (size_t k = 0; k < n_cfg && base; k++) {
            float *o = test_eval_logits(m, toks, n, cfg[k].ub, cfg[k].th, cfg[k].bs);
            CHECKF(o && !memcmp(o, base, bytes), "%s: ubatch %u threads %d KV block %u differs from one batch",
                   models[mi], cfg[k].ub, cfg[k].th, cfg[k].bs);
            free(o);
        }
        /* repacked weights (kernels.h: pack) against the file's layout, decode and prefill */
        const struct dj_weight *wq = &m->layers[0].wq;
        CHECKF(!wq->packed == !dj_kernels()->w[wq->type].pack, "%s: %s weights %s", models[mi],
               dj_type_name(wq->type), wq->packed ? "packed by a table without pack" : "not packed");
        setenv("DJ_REPACK", "0", 1);
        struct dj_model *m0 = NULL;
        CHECKF(model_load(models[mi], &m0) == DJ_OK, "%s", dj_last_error());
        unsetenv("DJ_REPACK");
        if (m0 && base) {
            CHECK(m0->layers[0].wq.packed == NULL);
            float *o = test_eval_logits(m0, toks, n, (uint32_t)n, 2, 64), *o1 = test_eval_logits(m0, toks, n, 1, 1, 64);
            CHECKF(o && !memcmp(o, base, bytes), "%s: the file's layout (DJ_REPACK=0) differs in one batch", models[mi]);
            CHECKF(o1 && !memcmp(o1, base, bytes), "%s: the file's layout (DJ_REPACK=0) differs token by token",
                   models[mi]);
            free(o);
            free(o1);
        }
        model_free(m0);
        printf("%s: %zu tokens, %zu batch/thread/KV-block configurations bitwise equal to one batch%s\n", models[mi], n,
               n_cfg, wq->packed ? ", and to the file's layout (weights repacked)" : "");
        free(base);
        free(toks);
        model_free(m);
    }
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);
    TEST_END();
}
