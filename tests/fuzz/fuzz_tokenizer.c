/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizer.  The deepseek-coder
 * (byte-level BPE) and llama-spm (SentencePiece) vocabs are loaded once from
 * $DJ_SHARED_DIR/vocab (default ../shared, the target runs from the repo root
 * under `make fuzz`); if they are missing every input is accepted untested.
 *
 * Each input is tokenized with both vocabs (add_special, parse_special) =
 * off/off, off/on and on/on, then decoded whole and through the streaming
 * decoder.
 * Checked, besides ASan/UBSan:
 *   - every streamed chunk is valid UTF-8 and the chunks + flush equal
 *     detok_sanitize(vocab_detokenize(...));
 *   - BPE on valid UTF-8 is lossless: decoding (special = true) gives the
 *     input back exactly.
 * Seeds: tests/fuzz/seed.sh (the vocab test inputs).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dj_vocab *bpe, *spm;
static bool loaded;

static void load(void) {
    loaded = true;
    const char *dir = getenv("DJ_SHARED_DIR");
    if (!dir || !*dir) dir = "../shared";
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-deepseek-coder.gguf", dir);
    if (dj_vocab_load_file(path, &bpe) != DJ_OK) bpe = NULL;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", dir);
    if (dj_vocab_load_file(path, &spm) != DJ_OK) spm = NULL;
    if (!bpe || !spm) fprintf(stderr, "fuzz_tokenizer: vocabs not found under %s/vocab; nothing is tested\n", dir);
}

#define FUZZ_CHECK(c)                                                                                              \
    do {                                                                                                           \
        if (!(c)) {                                                                                                \
            fprintf(stderr, "fuzz_tokenizer: check failed at line %d: %s\n", __LINE__, #c);                        \
            abort();                                                                                               \
        }                                                                                                          \
    } while (0)

static void check_one(const struct dj_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                      bool lossless) {
    dj_token *ids = NULL;
    size_t n = 0;
    if (vocab_tokenize(v, text, len, add_special, parse_special, &ids, &n) != DJ_OK) return; /* out of memory */
    char *whole = NULL, *san = NULL;
    size_t wl = 0, sl = 0;
    FUZZ_CHECK(vocab_detokenize(v, ids, n, true, &whole, &wl) == DJ_OK);
    FUZZ_CHECK(detok_sanitize(whole, wl, &san, &sl) == DJ_OK);
    if (lossless) FUZZ_CHECK(wl == len && memcmp(whole, text, len) == 0);

    struct dj_detok *d = detok_create(v, true);
    FUZZ_CHECK(d != NULL);
    size_t o = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t cl;
        const char *c = i < n ? detok_push(d, ids[i], &cl) : detok_flush(d, &cl);
        FUZZ_CHECK(utf8_valid(c, cl));
        FUZZ_CHECK(o + cl <= sl && memcmp(san + o, c, cl) == 0);
        o += cl;
    }
    FUZZ_CHECK(o == sl);
    detok_destroy(d);
    free(san);
    free(whole);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) load();
    if (!bpe || !spm) return 0;
    const char *text = (const char *)data;
    bool valid = utf8_valid(text, size);
    /* (add_special, parse_special): off/off, off/on, on/on; a BOS is not lossless */
    for (int mode = 0; mode < 3; mode++) {
        bool add = mode == 2, parse = mode >= 1;
        check_one(bpe, text, size, add, parse, valid && !add);
        check_one(spm, text, size, add, parse, false);
    }
    return 0;
}
