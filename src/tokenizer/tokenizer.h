/*
 * tokenizer.h — the vocabulary and tokenizers (internal header; the public
 * subset is declared in include/deja.h).
 *
 * A struct dj_vocab is built from a GGUF file's tokenizer.ggml.* metadata and
 * owns copies of everything it needs (the GGUF context may be closed after
 * vocab_load_gguf returns).  Tokenizer kind from tokenizer.ggml.model:
 *   "llama" → SentencePiece-style (score-driven merges, byte fallback <0xNN>, ▁ spaces)
 *   "gpt2"  → byte-level BPE (GPT-2 byte↔unicode map, merges by rank, pre-tokenizer
 *             regexes chosen by tokenizer.ggml.pre, matched with PCRE2 UTF+UCP)
 * Anything else → DJ_ERR_UNSUPPORTED naming the model.
 *
 * Encoding results match llama.cpp's llama_tokenize() exactly (tests/unit/
 * test_tokenizer_vectors.c checks every vector in ../shared/vocab).
 */
#ifndef DJ_TOKENIZER_H
#define DJ_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"
#include "gguf/gguf.h"

enum dj_vocab_type {
    DJ_VOCAB_SPM = 1, /* "llama" */
    DJ_VOCAB_BPE = 2, /* "gpt2" */
};

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum dj_token_type {
    DJ_TOKEN_UNDEFINED = 0,
    DJ_TOKEN_NORMAL = 1,
    DJ_TOKEN_UNKNOWN = 2,
    DJ_TOKEN_CONTROL = 3,
    DJ_TOKEN_USER_DEFINED = 4,
    DJ_TOKEN_UNUSED = 5,
    DJ_TOKEN_BYTE = 6,
};

/* Loads from an open GGUF context.  `ctx` may be closed afterwards. */
enum dj_status vocab_load_gguf(const struct gguf_ctx *ctx, struct dj_vocab **out);

enum dj_vocab_type vocab_type(const struct dj_vocab *v);
const char *vocab_type_name(const struct dj_vocab *v); /* "spm" / "bpe" */
const char *vocab_pre_name(const struct dj_vocab *v);  /* tokenizer.ggml.pre, or "default" */
size_t vocab_n_tokens(const struct dj_vocab *v);
/* Special ids; -1 where the vocab has none. */
dj_token vocab_bos(const struct dj_vocab *v);
dj_token vocab_eos(const struct dj_vocab *v);
dj_token vocab_eot(const struct dj_vocab *v);
dj_token vocab_unk(const struct dj_vocab *v);
dj_token vocab_pad(const struct dj_vocab *v);
bool vocab_add_bos(const struct dj_vocab *v);
bool vocab_add_eos(const struct dj_vocab *v);
bool vocab_add_space_prefix(const struct dj_vocab *v);
/* The token's stored text (NUL-terminated) and type; NULL / UNDEFINED if out of range. */
const char *vocab_token_text(const struct dj_vocab *v, dj_token tok);
enum dj_token_type vocab_token_type(const struct dj_vocab *v, dj_token tok);
bool vocab_is_eog(const struct dj_vocab *v, dj_token tok); /* eos, eot, or another end-of-generation token */

/* Fill-in-the-middle tokens, as llama.cpp's llama_vocab_fim_*() finds them at load:
 * the GGUF ids first (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id, or the
 * older prefix/suffix/middle_token_id), else by text: <|fim_prefix|>, <fim-prefix>,
 * <fim_prefix>, <｜fim▁begin｜>, <PRE>, ▁<PRE>, <|code_prefix|>, <|prefix|> (and the
 * matching suffix / middle / pad / repo texts; <|file_sep|> for sep).  -1 where the
 * vocabulary has none.  pad, rep and sep are end-of-generation tokens (vocab_is_eog). */
struct dj_fim_tokens {
    dj_token pre, suf, mid; /* prefix, suffix (the hole), middle (generate from here) */
    dj_token pad, rep, sep; /* padding, repository name, file separator */
};
/* Fills *out; true when pre, suf and mid all exist (a FIM prompt can be built). */
bool vocab_fim_tokens(const struct dj_vocab *v, struct dj_fim_tokens *out);

/* Encodes text[0..len).  add_special: BOS/EOS as the vocab's add_bos/add_eos
 * say.  parse_special: control (and unknown) tokens written literally in the
 * text are matched as those tokens; otherwise they are plain text.
 * User-defined tokens are matched in either case, as llama.cpp and HF
 * tokenizers do (HF "added tokens"; the deepseek and mpt vectors rely on it).
 * *out is malloc'd (caller frees; never NULL on DJ_OK, even for 0 tokens),
 * set only on DJ_OK.  Invalid UTF-8 in the input is not an error: it is
 * encoded as llama.cpp does (SPM: byte tokens; BPE: U+FFFD per bad byte). */
enum dj_status vocab_tokenize(const struct dj_vocab *v, const char *text, size_t len, bool add_special,
                              bool parse_special, dj_token **out, size_t *n_out);

/* vocab_tokenize with parse_special, except that a control or unknown token
 * whose text overlaps a byte set in `literal` (a bitmap: bit i of
 * literal[i / 8], i % 8) is not matched there: those bytes are plain text.
 * For chat prompts: the template's markup is special, the user's text never
 * is.  literal NULL: vocab_tokenize. */
enum dj_status vocab_tokenize_masked(const struct dj_vocab *v, const char *text, size_t len, bool add_special,
                                     bool parse_special, const uint8_t *literal, dj_token **out, size_t *n_out);

/* The text a token stands for: ▁ → space, <0xNN> → that byte, GPT-2 byte
 * characters → raw bytes; control tokens give "" unless `special`.  Writes at
 * most `size` bytes (no NUL) and returns the full length, like snprintf. */
size_t vocab_token_to_piece(const struct dj_vocab *v, dj_token tok, bool special, char *buf, size_t size);

/* Decodes a whole sequence; for vocabs with add_space_prefix (SPM by default)
 * one leading space of the first token's piece is removed, the one the encoder
 * added (llama.cpp's rule: only the first token, even if it renders nothing,
 * so [BOS, ▁Hello] gives " Hello").  llama.cpp's clean_spaces pass (" ," → ",")
 * is not applied: the text comes back byte for byte.  An id outside the vocab
 * is DJ_ERR_INVALID.  *out is malloc'd and NUL-terminated; set only on DJ_OK. */
enum dj_status vocab_detokenize(const struct dj_vocab *v, const dj_token *toks, size_t n, bool special, char **out,
                                size_t *out_len);

/* Streaming decoder: feed ids one at a time, get back only complete UTF-8
 * characters; bytes of a character that spans tokens are held until the
 * character is complete.  Behaves like vocab_detokenize on the concatenation
 * (same leading-space rule).  Invalid sequences become U+FFFD. */
struct dj_detok;
struct dj_detok *detok_create(const struct dj_vocab *v, bool special); /* NULL on OOM */
void detok_destroy(struct dj_detok *d);
/* Returns a pointer to the newly completed bytes (valid until the next call) and their length.
 * An id outside the vocab is ignored. */
const char *detok_push(struct dj_detok *d, dj_token tok, size_t *len);
/* Emits what is held (an incomplete tail becomes U+FFFD) and resets. */
const char *detok_flush(struct dj_detok *d, size_t *len);

/* The streaming decoder's UTF-8 rule applied to a whole string: each maximal
 * ill-formed subpart becomes U+FFFD (Unicode §3.9).  For any token sequence,
 * the pushes + flush of a detok equal detok_sanitize(vocab_detokenize(...)),
 * which is vocab_detokenize's output itself whenever that is valid UTF-8.
 * *out is malloc'd and NUL-terminated; set only on DJ_OK. */
enum dj_status detok_sanitize(const char *s, size_t n, char **out, size_t *out_len);

#endif
