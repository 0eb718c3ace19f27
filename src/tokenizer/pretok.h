/*
 * pretok.h — byte-level BPE pre-tokenizers (private to src/tokenizer; tests
 * include it for the fast-vs-PCRE2 differential check).
 *
 * A pre-tokenizer is llama.cpp's list of regexes for a tokenizer.ggml.pre
 * value, applied one after the other: regex k splits every piece that regex
 * k-1 produced into its matches and the gaps between them (both become
 * pieces).  Each regex is compiled with PCRE2 (UTF mode, JIT); the patterns
 * that llama.cpp itself runs with hand-written code (the GPT-2 and llama3
 * patterns) and a few plain character-class patterns also have a hand-written
 * splitter here, which is what normal tokenization uses; `reference` mode runs
 * PCRE2 for every step, and the unit test checks the two agree.
 *
 * Regex semantics follow llama.cpp (std::regex, ECMAScript): \s is the Unicode
 * White_Space set (llama.cpp maps non-ASCII spaces to \v before matching),
 * while \d, \w and \b are ASCII-only — so patterns are compiled WITHOUT
 * PCRE2_UCP and \s/\S are rewritten to the explicit White_Space class.  \p{L},
 * \p{N}, \p{P} ... are Unicode properties in UTF mode either way.  $ matches
 * only at the very end of a piece (PCRE2_DOLLAR_ENDONLY), as in ECMAScript.
 *
 * Input to pretok_run is valid UTF-8 (bpe.c guarantees it); pieces are
 * reported as byte ranges of that text, in order, covering it exactly.
 */
#ifndef DJ_TOKENIZER_PRETOK_H
#define DJ_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "deja.h"

struct pretok;
struct pretok_scratch;

/* Pre-tokenizer options that come with the pre type (llama.cpp's load()). */
struct pretok_opts {
    bool ignore_merges; /* a word that is itself a token is not merged */
    bool add_bos;       /* default for add_bos_token */
    bool bos_none;      /* default bos id is "none" (chatglm) */
};

/* Compiles the pre-tokenizer named `pre` ("default" for a missing key).  An
 * unknown name is DJ_ERR_UNSUPPORTED with a message naming it. */
enum dj_status pretok_create(const char *pre, struct pretok **out, struct pretok_opts *opts);
void pretok_destroy(struct pretok *p);

/* Per-call state (decoded code points, PCRE2 match data). */
struct pretok_scratch *pretok_scratch_create(const struct pretok *p);
void pretok_scratch_destroy(struct pretok_scratch *s);

/* Called once per piece, in order: [begin, end) are byte offsets into the text. */
typedef enum dj_status (*pretok_piece_fn)(void *ud, size_t begin, size_t end);

/* Splits text[0..len) (valid UTF-8).  reference = true runs every step with
 * PCRE2.  Returns the first non-OK status of `fn`, or a PCRE2 failure. */
enum dj_status pretok_run(const struct pretok *p, struct pretok_scratch *s, const char *text, size_t len,
                          bool reference, pretok_piece_fn fn, void *ud);

/* The number of regex steps and whether step i has a hand-written splitter. */
size_t pretok_n_steps(const struct pretok *p);
bool pretok_step_is_fast(const struct pretok *p, size_t i);

#endif
