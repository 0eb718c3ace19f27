/*
 * test_perplexity.c — quantization quality against llama.cpp: codelm-15m
 * quantized by `deja quantize` to q8_0, q4_0 and q4_k_m (and the F16
 * original) scores a perplexity on the first N_CHUNKS chunks of golden/codelm's
 * text (-c 512) within ±0.5 % of llama.cpp's figure for the same type and chunks.
 * The reference values are llama.cpp's running estimates after chunk N_CHUNKS
 * ("[10]34.1935" in golden/codelm/ppl_*.txt, the output of llama-perplexity on
 * files made by llama-quantize; its "Final estimate" is the one after all 42).
 * Ten chunks run every step of the tool (tokenization, the chunk loop, each
 * chunk's fresh context, scoring its second half) over 5120 tokens; the 42 took
 * 41 s of make test, and deja's running figures track llama.cpp's to 1e-5 in
 * every chunk (f16: 34.1934 vs 34.1935 after ten).
 *
 * Under the sanitizers (make asan) the four full runs take over ten minutes,
 * so there the test scores 2 chunks per type and checks only that the runs
 * succeed and give a finite perplexity: memory safety of the path, not the
 * figure, which the Release run checks.
 */
#include <math.h>

#include "test.h"
#include "test_run.h"

#define N_CHUNKS 10

/* llama.cpp's running estimate after chunk N_CHUNKS ("[10]34.1935,"); 0 if absent. */
static double ref_ppl(const char *shared, const char *file) {
    char rel[256], key[16];
    snprintf(rel, sizeof rel, "golden/codelm/%s", file);
    snprintf(key, sizeof key, "[%d]", N_CHUNKS);
    char *doc = test_read_file(test_shared_path(shared, rel), NULL);
    if (!doc) return 0;
    const char *p = strstr(doc, key);
    double v = p ? atof(p + strlen(key)) : 0;
    free(doc);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *shared = argv[1];
    deja_bin = argv[2];
    char dir[] = "/tmp/deja_test_ppl_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    const char *f16 = test_shared_path(shared, "models/codelm-15m-f16.gguf");
    const char *text = test_shared_path(shared, "golden/codelm/codelm_ppl_text.txt");
    struct { const char *type, *ref; } cases[] = {
        {NULL, "ppl_codelm-15m-f16.txt"},
        {"q8_0", "ppl_codelm-Q8_0.txt"},
        {"q4_0", "ppl_codelm-Q4_0.txt"},
        {"q4_k_m", "ppl_codelm-Q4_K_M.txt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512], *out = NULL;
        snprintf(path, sizeof path, "%s", f16);
        if (cases[i].type) {
            snprintf(path, sizeof path, "%s/codelm-%s.gguf", dir, cases[i].type);
            int rc = RUN(&out, "quantize", (char *)f16, path, (char *)cases[i].type);
            CHECKF(rc == 0, "quantize: %s", out);
            free(out);
        }
#ifdef DJ_SANITIZE_BUILD
        {
            int src = RUN(&out, "perplexity", "-m", path, "-f", (char *)text, "-c", "512", "-t", "2", "--json",
                          "--chunks", "2");
            CHECKF(src == 0, "perplexity: %s", out);
            const char *sp = strstr(out, "\"ppl\": ");
            CHECK(sp && isfinite(atof(sp + 7)) && atof(sp + 7) > 1);
            free(out);
            continue;
        }
#endif
        char chunks[16];
        snprintf(chunks, sizeof chunks, "%d", N_CHUNKS);
        int rc = RUN(&out, "perplexity", "-m", path, "-f", (char *)text, "-c", "512", "-t", "2", "--json", "--chunks",
                     chunks);
        CHECKF(rc == 0, "perplexity: %s", out);
        const char *nc = strstr(out, "\"n_chunks\": ");
        CHECKF(nc && atoi(nc + strlen("\"n_chunks\": ")) == N_CHUNKS, "perplexity: not %d chunks: %s", N_CHUNKS, out);
        const char *p = strstr(out, "\"ppl\": ");
        double ppl = p ? atof(p + 7) : 0, ref = ref_ppl(shared, cases[i].ref);
        CHECK(ref > 1);
        double rel = ref > 0 ? (ppl - ref) / ref : 1;
        CHECKF(fabs(rel) <= 0.005, "%s: PPL %.4f vs llama.cpp %.4f (%+.3f%%)", cases[i].type ? cases[i].type : "f16", ppl,
               ref, 100 * rel);
        printf("codelm %-6s PPL %.4f after %d chunks, llama.cpp %.4f (%+.3f%%)\n", cases[i].type ? cases[i].type : "f16", ppl,
               N_CHUNKS, ref, 100 * rel);
        free(out);
    }
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);
    TEST_END();
}
