/*
 * test_harmony.h — a vocabulary with gpt-oss's harmony markers for the tool-call
 * tests: codelm's tokenizer (deepseek-coder BPE, 32256 tokens) with its last
 * seven tokens, unused padding ([PAD32249] .. [PAD32255]), renamed to the markers
 * and typed CONTROL, as gpt-oss's own GGUF types its o200k_harmony specials.
 * The vocabulary then treats them as llama.cpp does (src/tokenizer/vocab.c):
 * <|start|> <|channel|> <|message|> <|constrain|> <|end|> are tokens rendered as
 * their text, <|return|> and <|call|> end generation.  Used by
 * tests/unit/test_toolcall_harmony.c (in memory) and tests/e2e/test_serve_tools.c
 * (a model written with test_synth.h's synth_write, this as its tweak).
 */
#ifndef DJ_TEST_HARMONY_H
#define DJ_TEST_HARMONY_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

#define HARMONY_N_MARKERS 7
static const char *const harmony_markers[HARMONY_N_MARKERS] = {
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
};

/* Sets tokenizer.ggml.tokens and tokenizer.ggml.token_type in w: src's (a
 * gguf_ctx *, codelm's) with the last HARMONY_N_MARKERS tokens replaced by the
 * markers, in that order, typed CONTROL (3).  The other tokenizer keys are the
 * caller's to copy.  Usable as a synth_write tweak. */
static inline void harmony_vocab_tweak(struct gguf_writer *w, void *src) {
    const struct gguf_ctx *c = src;
    struct gguf_arr toks, types;
    if (gguf_get_arr(c, "tokenizer.ggml.tokens", &toks) || gguf_get_arr(c, "tokenizer.ggml.token_type", &types) ||
        toks.n != types.n || toks.n < HARMONY_N_MARKERS)
        return; /* the vocabulary then lacks the markers: the test's checks of their ids fail */
    struct gguf_str *s = malloc(toks.n * sizeof *s);
    int32_t *t = malloc(toks.n * sizeof *t);
    if (s && t) {
        for (size_t i = 0; i < toks.n; i++) {
            s[i] = toks.strs[i];
            t[i] = (int32_t)gguf_arr_i64(&types, i);
        }
        for (size_t k = 0; k < HARMONY_N_MARKERS; k++) {
            size_t i = toks.n - HARMONY_N_MARKERS + k;
            s[i] = (struct gguf_str){harmony_markers[k], strlen(harmony_markers[k])};
            t[i] = 3;
        }
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", s, toks.n);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t, toks.n);
    }
    free(s);
    free(t);
}

#endif
