/*
 * test_rope_llama3.c — llama3 rope scaling from the metadata alone.
 *
 * Llama 3.1+ GGUFs converted by llama.cpp carry the per-frequency factors as a
 * rope_freqs.weight tensor; a file that only says rope.scaling.type = "llama3"
 * must get the same factors computed at load.  Checked here:
 *   - the factors model_load computes equal, bitwise, this file's own copy of
 *     llama.cpp's convert_hf_to_gguf.py formula (in double), cover all three
 *     bands (1, factor, smoothed) on the test model, and stay within 1e-6
 *     (relative) of the converter's float32 arithmetic for Llama 3.1 8B's
 *     parameters, where the first and last factors are 1 and 8;
 *   - a synthesized llama with that tensor and the same model with only the
 *     metadata give bitwise-identical logits at every position (model_load +
 *     ctx_decode), and both differ from the model without scaling;
 *   - when a file has both, the tensor wins (as in llama.cpp).
 */
#include <math.h>
#include <unistd.h>

#include "model/context.h"
#include "test.h"
#include "test_synth.h"

static const char *shared;
static char dir[64];

/* The converter's formula (convert_hf_to_gguf.py, LlamaModel, rope_type "llama3"), per pair i of n_rot. */
static float ref_factor(double base, uint32_t n_rot, uint32_t i, double factor, double low, double high, double orig) {
    const double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < orig / high) return 1.0f;
    if (wavelen > orig / low) return (float)factor;
    const double smooth = (orig / wavelen - low) / (high - low);
    return (float)(1.0 / ((1 - smooth) / factor + smooth));
}

/* The same in float32, as torch computes it in the converter. */
static float ref_factor_f32(float base, uint32_t n_rot, uint32_t i, float factor, float low, float high, float orig) {
    const float freq = 1.0f / powf(base, (float)(2 * i) / (float)n_rot);
    const float wavelen = (float)(2 * M_PI) / freq;
    if (wavelen < orig / high) return 1.0f;
    if (wavelen > orig / low) return factor;
    const float smooth = (orig / wavelen - low) / (high - low);
    return 1.0f / ((1 - smooth) / factor + smooth);
}

/* Llama 3.1 8B: base 500000, head 128, factor 8, low 1, high 4, original context 8192. */
static void test_llama31_factors(void) {
    struct dj_hparams hp = {0};
    hp.rope_freq_base = 500000.0f;
    hp.n_rot = 128;
    hp.rope_llama3 = true;
    hp.rope_factor = 8;
    hp.rope_low_freq_factor = 1;
    hp.rope_high_freq_factor = 4;
    hp.rope_orig_ctx = 8192;
    float f[64];
    model_llama3_rope_freqs(&hp, f);
    double worst = 0;
    int n1 = 0, n8 = 0;
    for (uint32_t i = 0; i < 64; i++) {
        const float r = ref_factor_f32(500000.0f, 128, i, 8, 1, 4, 8192);
        worst = fmax(worst, fabs((double)f[i] - r) / r);
        n1 += f[i] == 1.0f;
        n8 += f[i] == 8.0f;
        CHECK(f[i] == ref_factor(500000.0, 128, i, 8, 1, 4, 8192));
        if (i) CHECK(f[i] >= f[i - 1]); /* lower frequencies are stretched more */
    }
    CHECKF(worst <= 1e-6, "llama 3.1 factors differ from the converter's float32 ones by %.3g (relative)", worst);
    CHECK(f[0] == 1.0f && f[63] == 8.0f && n1 > 0 && n8 > 0 && n1 + n8 < 64);
    printf("llama 3.1 8B rope factors: %d x 1, %d x 8, %d smoothed; max relative difference to float32 %.3g\n", n1, n8,
           64 - n1 - n8, worst);
}

struct scaling {
    const char *type; /* NULL: no rope.scaling keys */
    float factor, low, high;
    uint32_t orig;
};

static void set_scaling(struct gguf_writer *w, void *ud) {
    const struct scaling *s = ud;
    if (!s || !s->type) return;
    CHECK(gguf_writer_set_str(w, "llama.rope.scaling.type", s->type, strlen(s->type)) == DJ_OK);
    CHECK(gguf_writer_set_f32(w, "llama.rope.scaling.factor", s->factor) == DJ_OK);
    CHECK(gguf_writer_set_f32(w, "llama.rope.scaling.low_freq_factor", s->low) == DJ_OK);
    CHECK(gguf_writer_set_f32(w, "llama.rope.scaling.high_freq_factor", s->high) == DJ_OK);
    CHECK(gguf_writer_set_u32(w, "llama.rope.scaling.original_context_length", s->orig) == DJ_OK);
}

/* Writes the test model (with `freqs` as rope_freqs.weight unless NULL, and the scaling
 * keys of s), loads it, returns the logits of every position of the prompt (malloc'd). */
static float *run_model(const char *name, const float *freqs, const struct scaling *s, struct dj_model **out_m,
                        size_t *n_out) {
    struct synth_model p = synth_default();
    p.rope_freqs = freqs;
    char path[128];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    CHECKF(synth_write(path, test_shared_path(shared, "models/stories260K.gguf"), &p, set_scaling, (void *)s) == DJ_OK,
           "%s: %s", name, dj_last_error());
    struct dj_model *m = NULL;
    CHECKF(model_load(path, &m) == DJ_OK, "%s: %s", name, dj_last_error());
    unlink(path);
    if (!m) return NULL;
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun "
                       "with her dog, and every day they went to the park near the big old tree.";
    dj_token *toks = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(m->vocab, text, strlen(text), true, false, &toks, &n) == DJ_OK && n > 30);
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = 256;
    cp.n_ubatch = 16; /* several ubatches: positions past the first block too */
    struct dj_context *c = NULL;
    float *lg = malloc(n * m->hp.n_vocab * sizeof(float));
    CHECK(ctx_create(m, cp, &c) == DJ_OK);
    if (c) CHECK(ctx_decode(c, toks, n, lg, true) == DJ_OK);
    ctx_free(c);
    free(toks);
    *out_m = m;
    *n_out = n * m->hp.n_vocab;
    return lg;
}

static void test_metadata_equals_tensor(void) {
    const struct synth_model p = synth_default();
    /* original context 512: wavelengths of the 8 pairs (base 10000, n_rot 16) run from 6 to 19869,
     * so pairs 0-2 keep factor 1 (< 128), pair 3 (199) is smoothed, pairs 4-7 get the factor (> 512) */
    const struct scaling l3 = {"llama3", 8.0f, 1.0f, 4.0f, 512};
    float want[8];
    for (uint32_t i = 0; i < p.n_rot / 2; i++)
        want[i] = ref_factor(p.rope_base, p.n_rot, i, l3.factor, l3.low, l3.high, l3.orig);
    CHECK(want[0] == 1.0f && want[2] == 1.0f && want[3] > 1.0f && want[3] < 8.0f && want[4] == 8.0f && want[7] == 8.0f);

    struct dj_model *ma = NULL, *mb = NULL, *mc = NULL, *md = NULL, *me = NULL;
    size_t na = 0, nb = 0, nc = 0, nd = 0, ne = 0;
    float *a = run_model("tensor", want, NULL, &ma, &na);       /* converter style: the tensor, no keys */
    float *b = run_model("metadata", NULL, &l3, &mb, &nb);      /* only rope.scaling.* */
    float *c = run_model("unscaled", NULL, NULL, &mc, &nc);     /* neither */
    static const float twos[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    float *d = run_model("both", twos, &l3, &md, &nd);          /* tensor and keys: the tensor wins */
    float *e = run_model("twos", twos, NULL, &me, &ne);
    if (mb) {
        CHECK(mb->rope_freqs.data != NULL && mb->rope_freqs.data == mb->rope_freqs_buf && mb->rope_freqs.ne0 == 8);
        if (mb->rope_freqs.data) CHECK(memcmp(mb->rope_freqs.data, want, sizeof want) == 0);
        CHECK(mb->hp.rope_llama3 && mb->hp.rope_orig_ctx == 512);
    }
    if (ma) CHECK(ma->rope_freqs_buf == NULL && ma->rope_freqs.data != NULL);
    if (mc) CHECK(mc->rope_freqs.data == NULL);
    if (md) CHECK(md->rope_freqs_buf == NULL);
    CHECK(a && b && c && d && e && na == nb && na == nc && na == nd && na == ne);
    if (a && b && c && d && e && na == nb && na == nc && na == nd && na == ne) {
        CHECKF(memcmp(a, b, na * sizeof(float)) == 0, "llama3 from the metadata differs from the rope_freqs tensor");
        CHECKF(memcmp(a, c, na * sizeof(float)) != 0, "llama3 scaling changed nothing");
        CHECKF(memcmp(d, e, na * sizeof(float)) == 0, "with tensor and keys, the keys were used");
        double dmax = 0;
        for (size_t i = 0; i < na; i++) dmax = fmax(dmax, fabs((double)a[i] - c[i]));
        printf("logits with llama3 scaling (tensor == metadata, %zu floats) vs none: max |diff| %.3g\n", na, dmax);
    }
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    model_free(ma);
    model_free(mb);
    model_free(mc);
    model_free(md);
    model_free(me);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SHARED_DIR [DEJA_BINARY]\n", argv[0]);
        return 2;
    }
    shared = argv[1];
    snprintf(dir, sizeof dir, "/tmp/dj_rope_llama3_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_llama31_factors();
    test_metadata_equals_tensor();
    rmdir(dir);
    TEST_END();
}
