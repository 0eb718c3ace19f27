/*
 * test_quantize_types.c — `deja quantize` writes the very bytes llama.cpp's
 * llama-quantize writes, for every file type llama-quantize makes without an
 * importance matrix: same metadata, tensor order, per-tensor types (the mix,
 * its fallbacks for rows that are not whole blocks) and quantized blocks.
 *
 * The expected sha256 digests are of files written by llama.cpp's own
 * llama-quantize (commit d32676d7, a scratch Release CPU build of
 * tools/quantize; no --imatrix), so they come from an independent
 * implementation, not from deja:
 *   llama-quantize ../shared/models/codelm-15m-f16.gguf OUT.gguf TYPE 2
 *   llama-quantize ../shared/golden/moe/MODEL.gguf OUT.gguf TYPE 2
 * (2 = threads; llama-quantize's bytes do not depend on it; sha256sum OUT.gguf).
 * codelm (llama, 8 layers, rows of 256 and 768, tied embeddings) covers every
 * type's quantizer and the dense rules; the tiny MoE golden models (rows of 16 to
 * 64: K-quant blocks do not fit, so the fallbacks, F16 included, show; exactly
 * 8 experts bumps attn_k/attn_v/attn_kv_b to Q8_0 and attn_output to Q5_K;
 * MXFP4_MOE; untied and tied embeddings) cover the MoE rules.  Every type
 * llama-quantize writes without an importance matrix is here but F32.  deja runs codelm
 * with -t 2 and the MoE models with -t 1, so equal digests also say the bytes
 * do not depend on the thread count.
 *
 * Under ASan (DJ_SANITIZE_BUILD) the codelm rows whose quantizers another row
 * runs too (Q3_K_M/L, Q4_K_S, Q5_K_M, IQ3_M, F16) are skipped.
 *
 * Also: the type names are taken in any case and with llama-quantize's aliases
 * (Q3_K = Q3_K_M); the importance-matrix types are refused with the reason;
 * where llama-quantize has no fallback and refuses the model (Q8_0 of rows of
 * 16), deja writes those tensors F16.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "test.h"
#include "test_run.h"
#include "test_sha256.h"

static char dir[] = "/tmp/dj_qtypes_XXXXXX";

struct expect {
    const char *model; /* under the shared folder */
    const char *type;  /* as passed to deja quantize (the case varies on purpose) */
    const char *sha256;
    bool again;        /* its quantizers are another row's too: skipped under ASan (DJ_SANITIZE_BUILD) */
};

/* llama-quantize's output digests (see the header for the commands). */
#define CODELM "models/codelm-15m-f16.gguf"
#define MOE(m) "golden/moe/" m ".gguf"
static const struct expect expected[] = {
    {CODELM, "Q8_0", "e78cec8dee1a783af0afba063afe8a6021996095675adee062e4ba7ed8e711c1"},
    {CODELM, "q4_0", "61009f11cca8c242091e4e53b7b466f8502561501b765ed2a20cbb478e6d5679"},
    {CODELM, "Q4_K_M", "09474af1d672d4cc12e9c34ebf6db689bb2ba675f5d9f598e5322cb858a26326"},
    {CODELM, "q4_1", "8d05602863bf6a1f09e2e69ad4eecc8ce99e717a30e9085ca6618795ab016cb7"},
    {CODELM, "Q5_0", "70cee7c398e9c0dda7dee3fb15cb26ac725cb74891087d624352b9d334ba8787"},
    {CODELM, "q5_1", "18468b486a1fecd9b5839db58ed39982e8dab21068d509b090fd13c07a165228"},
    {CODELM, "Q2_K", "293347f36eb90f062c2a21344a24cf09da5a2b10e20552a2d37e2bd705c15541"},
    {CODELM, "q3_k_s", "64c59692197ccb10023ada16d05ae538db1be915c251e43de69b1af7e6c222b7"},
    {CODELM, "Q3_K_M", "fa3afd56a65ef2a93ed072b34d42411bfd58585cd749e0d544ee307a310b0e73", true},
    {CODELM, "q3_k_l", "312257fe2024a810c29909158c413b42add0ec61e3806c84b483aa4e4ca27f2c", true},
    {CODELM, "Q4_K_S", "96eff46114874f3933b4f408eebf3ebd10f07657439d45e89a24b8df3876efde", true},
    {CODELM, "q5_k_s", "27756c6fb79a788267686325748b383a1bd1b39c40d13ad06259598f6f81cdde"},
    {CODELM, "Q5_K_M", "036695bdd2dc9040ce17bc78e1fe0ca34e201e58745692ef13520c1a02aad8e6", true},
    {CODELM, "q6_k", "67ab0da61d8663c8c17962bfcff1d489fb474e6d6bac0e8f9146874b92b46b19"},
    {CODELM, "IQ4_NL", "45b66a7818e8a79436f572cab2ca6a4252399df6ee682274b9e843ea6be03b2d"},
    {CODELM, "iq4_xs", "4736e496204238cf9ed54a80a97cff66a3202231b148f5ffd517e32b7b0e7da0"},
    {CODELM, "MXFP4_MOE", "5fecf0cc6265f422926cbbfc94a7775b03bc53ea0002da07baac21997993da02"},
    {CODELM, "tq1_0", "f8cde103d1cf52777b1e1c954a023a669c84848ac1cf089896ae124aeee987b7"},
    {CODELM, "TQ2_0", "fc46123cd38a1d1306e0a6801964d3e043e1753374d39b45639cc719bc5729ac"},
    {CODELM, "q1_0", "fb6bb0aa627863481b289b99438195faf3f01fa19b24573244fd0f3ecfd2388e"},
    {CODELM, "Q2_0", "f16750525b7561d51dabdfa844155d53ddc564d140159ad1b5ba76049488bea5"},
    {CODELM, "bf16", "d066e0f35b9cdc3233e89accd0f00787e9ee44ceaaeaa50843661cdb3cf1cff2"},
    {CODELM, "F16", "d767dc1321b53d19b66fb18572249e8562b867a9553fded0ac11443097885f22", true},
    {CODELM, "IQ3_S", "0c7d9fac9dee119ae2979adfad5b13ef0b493ce76e5a49d9f58d4dee244ad343"},
    {CODELM, "iq3_m", "3bf25c8356df848040311850e6adb54cde0e0639f37217c2c1e9b627a663dd29", true},
    {MOE("qwen3moe-tiny-f16"), "Q4_K_M", "e22428a034ae9d67a81f2107c1791f9c1244eb3f549e86270973fd493fa7820d"},
    {MOE("qwen3moe-tiny-f16"), "q3_k", "53d9516675d04dfe122f3fff63c5c7639a462fa08c46a761867e5fa0d87f6d28"},
    {MOE("qwen3moe-tiny-f16"), "IQ4_XS", "eb030b13a58fc5a28e23ad59ba72a574101cb84b2bcdd63b3a4fe56d22620c0a"},
    {MOE("qwen3moe-tiny-f16"), "mxfp4_moe", "3a5c3e29c36973e6b09284d87ac80bf9ded969fd137e0aa5931090ac12ff75fc"},
    {MOE("qwen3moe-tiny-f16"), "Q2_K", "044a8f25f3b86f4ab4fc56804c940af21efd491aa8982b124afe51528a50fdf8"},
    {MOE("qwen3moe-tiny-f16"), "IQ3_M", "385e02fcbf276bf50103641071a358381c83b08ea9a5233f67dee0a3ae506449"},
    {MOE("deepseek2-lite-tiny-wkvb"), "iq3_s", "30cdf07d73ed88a583f478fa68c2bda2f6b0ae5dcf671f6a1790ad0af96a21d4"},
    {MOE("mixtral-tiny"), "Q6_K", "131321a057886116bb9ab2d21b548a8a84e07e92ec26e7e5cc266be2676f7a53"},
    {MOE("mixtral-tiny"), "Q3_K_L", "626c9ff7f4fea524b2fa30291d16dc65f78d2c35dc624f4ee08e590396e03a2d"},
    {MOE("mixtral-tiny"), "q4_k_s", "cc1433e2acf109bff40f1f336bd1b83aafc8d9fbaeea05ffa59522c64aa26fe5"},
    {MOE("deepseek2-lite-tiny-wkvb"), "Q2_K", "842fb58d435183867a518c9c90710439f87b5f45b1c1afcf5684914b7079034b"},
    {MOE("deepseek2-lite-tiny-wkvb"), "q5_k_m", "8fbfd0235e8238926d8797664a9271d5c7fb646270e382d4632b277998399ad0"},
    {MOE("deepseek2-lite-tiny-wkvb"), "IQ4_NL", "bffd106d11d0419069b2da14dd2cf92aaa07213309f3c1a5b18e7159f2124e99"},
    {MOE("deepseek2-lite-tiny-wkvb"), "TQ1_0", "138a2f7f09a62e22bdf35635776a1998c978d2863347fb8c4c7e31feab986961"},
    {MOE("deepseek2-v3-tiny"), "Q4_K_M", "0507fa750d2cec9952e1b24b5ae4b884af8ec21a9d0342b37a4e84dcd7f6ba7d"},
    {MOE("deepseek2-v3-tiny"), "Q5_K_S", "159a36537e2f814797ff92e0ba9a90893c440d1b44e6fe4ad917490b940551c3"},
    {MOE("deepseek2-lite-tiny"), "Q3_K_S", "07acedf856ed74cad05e66da59032ef41496bd39dea0eccc612e92f3052a990f"},
    {MOE("deepseek2-lite-tiny"), "tq2_0", "8d6102d834703dc4ffad8a4d0eb9d3e0945858994bc03a1e04d2da32f6d6602e"},
};
#undef CODELM
#undef MOE

/* The FIPS 180-2 examples, before any file digest is trusted. */
static void check_sha256(void) {
    static const struct { const char *msg, *hex; } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct test_sha256 s;
        char hex[65];
        test_sha256_init(&s);
        test_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        test_sha256_hex(&s, hex);
        CHECKF(!strcmp(hex, v[i].hex), "sha256('%s') = %s", v[i].msg, hex);
    }
    /* a million 'a's, fed in uneven pieces (the block boundary handling) */
    struct test_sha256 s;
    char hex[65], a[997];
    memset(a, 'a', sizeof a);
    test_sha256_init(&s);
    for (size_t n = 0; n < 1000000;) {
        size_t k = 1000000 - n < sizeof a ? 1000000 - n : sizeof a;
        test_sha256_update(&s, a, k);
        n += k;
    }
    test_sha256_hex(&s, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void check_hashes(const char *shared) {
    char out_path[128];
    snprintf(out_path, sizeof out_path, "%s/out.gguf", dir);
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        const struct expect *e = &expected[i];
#ifdef DJ_SANITIZE_BUILD
        if (e->again) continue;
#endif
        const bool codelm = strstr(e->model, "codelm") != NULL;
        char *out = NULL;
        const double t0 = now_s();
        int rc = RUN(&out, "quantize", (char *)test_shared_path(shared, e->model), out_path, (char *)e->type, "-t",
                     codelm ? "2" : "1");
        const double dt = now_s() - t0;
        CHECKF(rc == 0, "quantize %s %s: exit %d: %s", e->model, e->type, rc, out);
        free(out);
        char hex[65] = "";
        CHECKF(rc == 0 && test_sha256_file(out_path, hex) && !strcmp(hex, e->sha256),
               "%s %s: sha256 %s, llama-quantize's %s", e->model, e->type, hex, e->sha256);
        printf("%-40s %-9s %5.2f s  %s\n", e->model, e->type, dt,
               strcmp(hex, e->sha256) ? "DIFFERS" : "= llama-quantize");
        unlink(out_path);
    }
}

/* The type of tensor `name` in `path` (-1 if absent or unreadable). */
static int tensor_type(const char *path, const char *name) {
    struct gguf_ctx *g = NULL;
    if (gguf_open(path, &g) != DJ_OK) return -1;
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    int type = t ? (int)t->type : -1;
    gguf_close(g);
    return type;
}

static void check_refusals(const char *shared) {
    const char *codelm = test_shared_path(shared, "models/codelm-15m-f16.gguf");
    char out_path[128];
    snprintf(out_path, sizeof out_path, "%s/refused.gguf", dir);
    /* llama-quantize refuses these without --imatrix ("this quantization requires an imatrix!") */
    static const char *const imatrix[] = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "iq3_xxs", "IQ3_XS",
                                          "Q2_K_S"};
    char *out = NULL;
    for (size_t i = 0; i < sizeof imatrix / sizeof imatrix[0]; i++) {
        int rc = RUN(&out, "quantize", (char *)codelm, out_path, (char *)imatrix[i]);
        CHECKF(rc == 1 && strstr(out, "importance matrix") && access(out_path, F_OK) != 0, "%s: exit %d: %s",
               imatrix[i], rc, out);
        free(out);
    }
    int rc = RUN(&out, "quantize", (char *)codelm, out_path, "q7_k");
    CHECKF(rc == 1 && strstr(out, "'q7_k'") && strstr(out, "Q5_K_M"), "q7_k: exit %d: %s", rc, out);
    free(out);
    rc = RUN(&out, "quantize", "--help");
    CHECKF(rc == 0 && strstr(out, "IQ4_XS") && strstr(out, "MXFP4_MOE") && strstr(out, "load-only"), "%s", out);
    free(out);

    /* llama-quantize has no fallback for Q8_0 and refuses deepseek2-v3-tiny (attn_k_b
     * rows of 16); deja writes those F16 and the rest Q8_0 */
    rc = RUN(&out, "quantize", (char *)test_shared_path(shared, "golden/moe/deepseek2-v3-tiny.gguf"), out_path, "Q8_0");
    CHECKF(rc == 0, "v3 Q8_0: exit %d: %s", rc, out);
    free(out);
    CHECK(tensor_type(out_path, "blk.1.attn_k_b.weight") == DJ_TYPE_F16);
    CHECK(tensor_type(out_path, "blk.1.ffn_up_exps.weight") == DJ_TYPE_Q8_0);
    CHECK(tensor_type(out_path, "blk.1.ffn_gate_inp.weight") == DJ_TYPE_F32);
    unlink(out_path);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    if (!mkdtemp(dir)) return 2;
    const double t0 = now_s();
    check_sha256();
    check_hashes(argv[1]);
    check_refusals(argv[1]);
    printf("total %.1f s\n", now_s() - t0);
    rmdir(dir);
    TEST_END();
}
