/*
 * test_synth.c — `deja synth` end to end: every architecture's tiny preset is
 * written, loads and generates; the bytes do not depend on the thread count;
 * q4_k_m gives the same per-tensor types as `deja quantize` of the f16 file (one
 * mix, tools/quant_mix.c), with the routers in f32; MoE/MLA files carry the keys
 * and tensor shapes llama.cpp reads; `deja bench` counts an MoE model's decode
 * bytes with the used experts only; bad presets and layer counts are refused
 * with a message.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "test.h"
#include "test_run.h"

static char dir[] = "/tmp/dj_synth_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s.gguf", dir, name);
    return buf[k];
}

/* The type of tensor `name` in `path` (-1 if absent or unreadable). */
static int tensor_type(const char *path, const char *name, int64_t *ne) {
    struct gguf_ctx *g = NULL;
    if (gguf_open(path, &g) != DJ_OK) return -1;
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    int type = t ? (int)t->type : -1;
    if (t && ne)
        for (int d = 0; d < 3; d++) ne[d] = d < (int)t->n_dims ? t->ne[d] : 1;
    gguf_close(g);
    return type;
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *pa = test_read_file(a, &na), *pb = test_read_file(b, &nb);
    bool same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

/* Every tensor of `a` has the type it has in `b`. */
static void check_same_types(const char *a, const char *b) {
    struct gguf_ctx *ga = NULL, *gb = NULL;
    CHECK(gguf_open(a, &ga) == DJ_OK && gguf_open(b, &gb) == DJ_OK);
    if (ga && gb) {
        CHECK(gguf_n_tensors(ga) == gguf_n_tensors(gb));
        for (size_t i = 0; i < gguf_n_tensors(ga); i++) {
            const struct gguf_tensor *t = gguf_tensor(ga, i);
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
            const struct gguf_tensor *u = gguf_find_tensor(gb, nm);
            CHECKF(u && u->type == t->type, "%s: %s in %s, %s in %s", nm, dj_type_name(t->type), a,
                   u ? dj_type_name(u->type) : "absent", b);
        }
    }
    gguf_close(ga);
    gguf_close(gb);
}

struct arch_case {
    const char *arch, *preset, *tag;
};

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *shared = argv[1];
    deja_bin = argv[2];
    CHECK(mkdtemp(dir) != NULL);
    const char *vocab = test_shared_path(shared, "vocab/ggml-vocab-deepseek-coder.gguf");
    char *out = NULL;
    const struct arch_case cases[] = {
        {"llama", "tiny", "llama"},
        {"llama", "tiny-moe", "mixtral"},
        {"qwen3moe", "tiny", "qwen3moe"},
        {"deepseek2", "tiny", "deepseek2"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct arch_case *k = &cases[c];
        char n1[64], n2[64], nq[64], nquant[64];
        snprintf(n1, sizeof n1, "%s-f16-t1", k->tag);
        snprintf(n2, sizeof n2, "%s-f16-t2", k->tag);
        snprintf(nq, sizeof nq, "%s-q4_k_m", k->tag);
        snprintf(nquant, sizeof nquant, "%s-quantized", k->tag);
        const char *f1 = path_of(n1), *f2 = path_of(n2), *fq = path_of(nq), *fquant = path_of(nquant);
        int rc = RUN(&out, "synth", "--arch", (char *)k->arch, "--preset", (char *)k->preset, "--vocab-from",
                     (char *)vocab, "-o", (char *)f1, "-t", "1");
        CHECKF(rc == 0 && strstr(out, "wrote"), "%s: synth exit %d: %s", k->tag, rc, out);
        free(out);
        rc = RUN(&out, "synth", "--arch", (char *)k->arch, "--preset", (char *)k->preset, "--vocab-from",
                 (char *)vocab, "-o", (char *)f2, "-t", "2");
        CHECKF(rc == 0, "%s: synth -t 2 exit %d: %s", k->tag, rc, out);
        free(out);
        CHECKF(same_file(f1, f2), "%s: the bytes depend on the thread count", k->tag);
        rc = RUN(&out, "synth", "--arch", (char *)k->arch, "--preset", (char *)k->preset, "--type", "q4_k_m",
                 "--vocab-from", (char *)vocab, "-o", (char *)fq);
        CHECKF(rc == 0, "%s: synth q4_k_m exit %d: %s", k->tag, rc, out);
        free(out);
        /* the q4_k_m mix is the one deja quantize applies to the f16 file */
        rc = RUN(&out, "quantize", (char *)f1, (char *)fquant, "q4_k_m");
        CHECKF(rc == 0, "%s: quantize exit %d: %s", k->tag, rc, out);
        free(out);
        check_same_types(fq, fquant);
        CHECK(tensor_type(fq, "output.weight", NULL) == DJ_TYPE_Q6_K);
        CHECK(tensor_type(fq, "blk.0.attn_norm.weight", NULL) == DJ_TYPE_F32);
        /* every file loads and generates */
        const char *files[] = {f1, fq};
        for (int i = 0; i < 2; i++) {
            rc = RUN(&out, "run", "-m", (char *)files[i], "-p", "def main():", "-n", "6", "--json");
            CHECKF(rc == 0 && strstr(out, "\"n_gen\": 6"), "%s: run %s exit %d: %s", k->tag, files[i], rc, out);
            free(out);
        }
        unlink(f2);
        unlink(fquant);
    }

    /* MoE and MLA layouts: the shapes llama.cpp's loader asks for; use_more_bits of 4 layers: 2 and 3 */
    int64_t ne[3];
    const char *mix = path_of("mixtral-f16-t1"), *q3 = path_of("qwen3moe-q4_k_m"), *ds = path_of("deepseek2-q4_k_m");
    CHECK(tensor_type(mix, "blk.0.ffn_gate_exps.weight", ne) == DJ_TYPE_F16 && ne[0] == 256 && ne[1] == 256 && ne[2] == 8);
    CHECK(tensor_type(mix, "blk.0.ffn_gate_inp.weight", ne) == DJ_TYPE_F32 && ne[0] == 256 && ne[1] == 8);
    CHECK(tensor_type(q3, "blk.3.ffn_down_exps.weight", ne) == DJ_TYPE_Q6_K && ne[0] == 256 && ne[2] == 8);
    CHECK(tensor_type(q3, "blk.1.ffn_down_exps.weight", NULL) == DJ_TYPE_Q4_K);
    CHECK(tensor_type(q3, "blk.1.attn_output.weight", NULL) == DJ_TYPE_Q5_K); /* 8 experts: llama.cpp's Q5_K */
    CHECK(tensor_type(q3, "blk.0.ffn_gate_inp.weight", NULL) == DJ_TYPE_F32);
    CHECK(tensor_type(q3, "blk.0.attn_q_norm.weight", ne) == DJ_TYPE_F32 && ne[0] == 32);
    CHECK(tensor_type(ds, "blk.0.ffn_gate.weight", NULL) == DJ_TYPE_Q4_K); /* the leading dense layer */
    CHECK(tensor_type(ds, "blk.0.ffn_gate_exps.weight", NULL) == -1);
    CHECK(tensor_type(ds, "blk.1.ffn_up_shexp.weight", ne) == DJ_TYPE_Q4_K && ne[1] == 256);
    CHECK(tensor_type(ds, "blk.1.attn_kv_a_mqa.weight", ne) == DJ_TYPE_Q4_K && ne[1] == 256 + 32);
    /* attn_k_b rows are qk_nope = 64 long: no 256-block fits; llama.cpp's fallback for Q4_K is Q5_0 */
    CHECK(tensor_type(ds, "blk.1.attn_k_b.weight", ne) == DJ_TYPE_Q5_0 && ne[0] == 64 && ne[1] == 256 && ne[2] == 8);
    CHECK(tensor_type(ds, "blk.1.attn_v_b.weight", ne) == DJ_TYPE_Q4_K && ne[0] == 256 && ne[1] == 64 && ne[2] == 8);
    CHECK(RUN(&out, "inspect", (char *)ds) == 0 && strstr(out, "kv_lora_rank") && strstr(out, "key_length_mla") &&
          strstr(out, "leading_dense_block_count") && strstr(out, "\"yarn\""));
    free(out);

    /* deja bench's decode bytes: every weight but the token embedding, of the *_exps tensors
     * the n_used / n_expert a token reads (2 of 8 here) */
    {
        const char *mf = path_of("mixtral-f16-t1");
        struct gguf_ctx *g = NULL;
        double want = 0;
        CHECK(gguf_open(mf, &g) == DJ_OK);
        for (size_t i = 0; g && i < gguf_n_tensors(g); i++) {
            const struct gguf_tensor *t = gguf_tensor(g, i);
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
            if (strstr(nm, "_exps.weight")) want += (double)t->nbytes * 2.0 / 8.0;
            else if (strcmp(nm, "token_embd.weight")) want += (double)t->nbytes;
        }
        gguf_close(g);
        CHECK(RUN(&out, "bench", "-m", (char *)mf, "-p", "0", "-n", "2", "-r", "1", "--json") == 0);
        const char *wb = strstr(out, "\"weight_bytes\": ");
        const double got = wb ? atof(wb + 16) : -1;
        CHECKF(want > 0 && got == (double)(size_t)want, "bench weight_bytes %.0f, expected %.0f", got, want);
        free(out);
    }

    /* --layers, and what is refused */
    const char *fl = path_of("layers");
    CHECK(RUN(&out, "synth", "--arch", "qwen3moe", "--preset", "tiny", "--layers", "2", "--vocab-from", (char *)vocab,
              "-o", (char *)fl) == 0 && strstr(out, "2 layers"));
    free(out);
    CHECK(RUN(&out, "inspect", (char *)fl) == 0 && strstr(out, "block_count                              2"));
    free(out);
    unlink(fl);
    CHECK(RUN(&out, "synth", "--arch", "qwen3moe", "--preset", "1b", "--vocab-from", (char *)vocab, "-o", (char *)fl) != 0 &&
          strstr(out, "not a preset of qwen3moe") && strstr(out, "30b-a3b"));
    free(out);
    CHECK(RUN(&out, "synth", "--arch", "deepseek2", "--preset", "tiny", "--layers", "1", "--vocab-from", (char *)vocab,
              "-o", (char *)fl) != 0 && strstr(out, "needs more than 1"));
    free(out);
    CHECK(RUN(&out, "synth", "--arch", "gpt2", "--preset", "tiny", "--vocab-from", (char *)vocab, "-o", (char *)fl) != 0 &&
          strstr(out, "not one of"));
    free(out);
    CHECK(access(fl, F_OK) != 0);

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char n[64];
        snprintf(n, sizeof n, "%s-f16-t1", cases[c].tag);
        unlink(path_of(n));
        snprintf(n, sizeof n, "%s-q4_k_m", cases[c].tag);
        unlink(path_of(n));
    }
    rmdir(dir);
    TEST_END();
}
