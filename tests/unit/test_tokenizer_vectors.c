/*
 * test_tokenizer_vectors.c — llama.cpp's tokenizer test vectors: for every
 * ../shared/vocab/ggml-vocab-*.gguf with .inp/.out files, each case must
 * encode (no BOS, parse_special off — as llama.cpp's test-tokenizer-0) to
 * exactly the ids in .out; decoding those ids should give the input back
 * where the tokenizer is lossless (reported, not required: SPM drops the
 * space it adds and cannot tell "a" from " a" at the start).  The streaming
 * decoder must reproduce vocab_detokenize for every case.
 *
 * Framing (test-tokenizer-0.cpp): .inp is the cases joined and terminated by
 * "\n__ggml_vocab_test__\n" (a trailing empty remainder is not a case); .out
 * has one line of space-separated ids per case, in the same order.
 *
 * Prints "<vocab>: N/M encode, K/M roundtrip" per vocab.
 */
#include <stdbool.h>
#include <stdint.h>

#include "test.h"
#include "tokenizer/tokenizer.h"

static const char *const vocabs[] = {"deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm",
                                     "mpt",            "phi-3",        "refact", "starcoder"};

static void print_escaped(FILE *f, const char *s, size_t n) {
    fputc('\'', f);
    for (size_t i = 0; i < n && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    if (n > 80) fputs("...", f);
    fputc('\'', f);
}

/* Parses one .out line into ids; returns the count. */
static size_t parse_ids(const char *line, size_t len, dj_token *ids, size_t cap) {
    size_t n = 0, i = 0;
    while (i < len) {
        while (i < len && line[i] == ' ') i++;
        if (i >= len) break;
        long v = 0;
        while (i < len && line[i] >= '0' && line[i] <= '9') v = v * 10 + (line[i++] - '0');
        if (n < cap) ids[n] = (dj_token)v;
        n++;
        while (i < len && line[i] != ' ') i++;
    }
    return n;
}

static bool stream_matches(const struct dj_vocab *v, const dj_token *ids, size_t n, const char *whole,
                           size_t whole_len) {
    struct dj_detok *d = detok_create(v, false);
    if (!d) return false;
    char *acc = malloc(whole_len * 3 + 16);
    size_t o = 0;
    bool ok = acc != NULL;
    for (size_t i = 0; ok && i <= n; i++) {
        size_t len;
        const char *p = i < n ? detok_push(d, ids[i], &len) : detok_flush(d, &len);
        if (o + len > whole_len * 3 + 16) {
            ok = false;
            break;
        }
        memcpy(acc + o, p, len);
        o += len;
    }
    char *san = NULL;
    size_t san_len = 0;
    if (ok && detok_sanitize(whole, whole_len, &san, &san_len) != DJ_OK) ok = false;
    if (ok) ok = o == san_len && memcmp(acc, san, o) == 0;
    free(san);
    free(acc);
    detok_destroy(d);
    return ok;
}

static void run_vocab(const char *shared, const char *name, int *n_encode_fail) {
    char path[4096], inp_path[4200], out_path[4200];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    struct dj_vocab *v = NULL;
    enum dj_status st = dj_vocab_load_file(path, &v);
    CHECKF(st == DJ_OK, "%s: %s", name, dj_last_error());
    if (st != DJ_OK) {
        (*n_encode_fail)++;
        return;
    }
    size_t inp_len = 0, out_len = 0;
    char *inp = test_read_file(inp_path, &inp_len);
    char *out = test_read_file(out_path, &out_len);
    CHECKF(inp && out, "%s: cannot read the .inp/.out files", name);
    if (!inp || !out) {
        free(inp);
        free(out);
        dj_vocab_free(v);
        (*n_encode_fail)++;
        return;
    }

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    size_t pos = 0, opos = 0, n_cases = 0, n_enc_ok = 0, n_rt_ok = 0, n_stream_ok = 0;
    while (pos < inp_len) {
        const char *next = memmem(inp + pos, inp_len - pos, sep, sep_len);
        size_t case_len = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
        const char *text = inp + pos;
        pos = next ? pos + case_len + sep_len : inp_len;

        /* the matching .out line */
        const char *line = out + opos;
        const char *nl = memchr(line, '\n', out_len - opos);
        size_t line_len = nl ? (size_t)(nl - line) : out_len - opos;
        opos = nl ? opos + line_len + 1 : out_len;

        dj_token want[4096];
        size_t n_want = parse_ids(line, line_len, want, 4096);
        dj_token *got = NULL;
        size_t n_got = 0;
        st = vocab_tokenize(v, text, case_len, false, false, &got, &n_got);
        bool enc_ok = st == DJ_OK && n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0;
        if (enc_ok) {
            n_enc_ok++;
        } else {
            fprintf(stderr, "%s case %zu: encode mismatch for ", name, n_cases);
            print_escaped(stderr, text, case_len);
            fprintf(stderr, "\n  want:");
            for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  got: ");
            for (size_t i = 0; st == DJ_OK && i < n_got; i++) fprintf(stderr, " %d", got[i]);
            if (st != DJ_OK) fprintf(stderr, " error: %s", dj_last_error());
            fprintf(stderr, "\n");
        }
        /* decode the reference ids */
        char *dec = NULL;
        size_t dec_len = 0;
        if (vocab_detokenize(v, want, n_want, false, &dec, &dec_len) == DJ_OK) {
            if (dec_len == case_len && memcmp(dec, text, case_len) == 0) {
                n_rt_ok++;
            } else {
                fprintf(stderr, "%s case %zu: not lossless: ", name, n_cases);
                print_escaped(stderr, text, case_len);
                fprintf(stderr, " decodes to ");
                print_escaped(stderr, dec, dec_len);
                fprintf(stderr, "\n");
            }
            if (stream_matches(v, want, n_want, dec, dec_len)) n_stream_ok++;
            else fprintf(stderr, "%s case %zu: streaming decoder differs from vocab_detokenize\n", name, n_cases);
            free(dec);
        }
        free(got);
        n_cases++;
    }
    printf("%s: %zu/%zu encode, %zu/%zu roundtrip, %zu/%zu streaming\n", name, n_enc_ok, n_cases, n_rt_ok, n_cases,
           n_stream_ok, n_cases);
    CHECKF(n_cases > 0, "%s: no cases", name);
    CHECKF(n_enc_ok == n_cases, "%s: %zu of %zu cases encode differently", name, n_cases - n_enc_ok, n_cases);
    CHECKF(n_stream_ok == n_cases, "%s: streaming decoder differs in %zu cases", name, n_cases - n_stream_ok);
    CHECKF(opos == out_len, "%s: .out has more lines than .inp has cases", name);
    if (n_enc_ok != n_cases) (*n_encode_fail)++;
    free(inp);
    free(out);
    dj_vocab_free(v);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    int n_fail = 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) run_vocab(shared, vocabs[i], &n_fail);
    TEST_END();
}
