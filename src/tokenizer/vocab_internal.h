/*
 * vocab_internal.h — the layout of struct dj_vocab and the helpers shared by
 * the tokenizer's files (private to src/tokenizer; tests may include it).
 *
 *   vocab.c     loading from GGUF metadata, validation, getters, hash maps
 *   encode.c    vocab_tokenize: special-token partition, then SPM or BPE
 *   spm.c       SentencePiece-style score-driven merges (llama.cpp llm_tokenizer_spm)
 *   bpe.c       byte-level BPE merges by rank (llama.cpp llm_tokenizer_bpe)
 *   pretok.c    BPE pre-tokenizers: hand-written splitters and PCRE2 regexes
 *   detok.c     token → text, whole-sequence and streaming decoding
 *
 * Token texts live in one blob:
 *
 *   text:     "!\0\"\0#\0 ... <｜begin▁of▁sentence｜>\0"   (NUL after each)
 *   text_off: [0, 2, 4, ...]   n_tokens + 1 entries; len(tok) = off[tok+1] - off[tok] - 1
 *
 * and `piece`/`piece_off` hold, the same way, what each token decodes to
 * (vocab_token_to_piece with special = true), computed once at load.
 *
 * Token attributes mirror llama.cpp's llama_token_attr bits, because its
 * tokenizer decides on them (not on the raw token_type): a NORMAL token whose
 * text is "<|endoftext|>" gets CONTROL added at load, exactly as llama.cpp
 * does, and then only matches in the input when parse_special is true.
 */
#ifndef DJ_TOKENIZER_VOCAB_INTERNAL_H
#define DJ_TOKENIZER_VOCAB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

enum tok_attr {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7,
    TOK_ATTR_RSTRIP = 1 << 8,
    TOK_ATTR_EOG = 1 << 12, /* deja's own: in the end-of-generation set */
};

/* Open-addressing hash map from token text to id (slots hold id + 1, 0 = empty). */
struct tok_map {
    uint32_t *slots;
    size_t mask; /* capacity - 1, capacity a power of two >= 2 * n_tokens */
};

/* Open-addressing map from the pair (left id, right id) to the merge's rank
 * and the id of the merged text (-1 if the merged text is not a token). */
struct merge_map {
    uint64_t *keys; /* (left << 32) | right; MERGE_EMPTY if free */
    int32_t *rank;
    int32_t *result;
    size_t mask;
};
#define MERGE_EMPTY UINT64_MAX

struct pretok;        /* compiled pre-tokenizer (pretok.c) */
struct special_index; /* prefix index of the special tokens (encode.c) */

struct dj_vocab {
    enum dj_vocab_type type;
    char *pre_name; /* tokenizer.ggml.pre as given, or "default" */
    char *name;     /* general.name, or "" */

    size_t n_tokens;
    char *text;        /* token texts, each NUL-terminated */
    size_t *text_off;  /* n_tokens + 1 */
    float *scores;     /* n_tokens (0 where the file has none) */
    uint8_t *file_type; /* tokenizer.ggml.token_type as stored (NORMAL if absent) */
    uint16_t *attr;    /* enum tok_attr bits */
    char *piece;       /* decoded pieces (special = true), see above */
    size_t *piece_off; /* n_tokens + 1 */
    size_t max_token_len;

    struct tok_map map;
    struct merge_map merges; /* BPE only */
    size_t n_merges;

    /* byte_tok[b]: SPM: <0xNN> (or the one-byte token); BPE: the token of the
     * GPT-2 character of b.  -1 where the vocab has none. */
    int32_t byte_tok[256];

    dj_token bos, eos, eot, eom, unk, pad, sep, mask;
    dj_token fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges; /* BPE: a word that is a token is not merged (llama3 family) */
    bool spm_split_ok;  /* SPM: no token has a ▁ after another character (spm.c) */

    /* CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first (ties by id):
     * the order llama.cpp's tokenizer_st_partition tries them in. */
    dj_token *special;
    size_t n_special;
    struct special_index *special_index; /* encode.c: finds which occur in a text */

    struct pretok *pretok; /* BPE only */
};

static inline const char *vocab_text_of(const struct dj_vocab *v, dj_token tok, size_t *len) {
    size_t a = v->text_off[tok], b = v->text_off[tok + 1];
    *len = b - a - 1;
    return v->text + a;
}

/* Text → id, or -1. */
dj_token vocab_find(const struct dj_vocab *v, const char *s, size_t len);

/* (left, right) → rank (or -1) and the merged id. */
static inline uint64_t merge_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 32;
    return key;
}
static inline int32_t vocab_merge_rank(const struct dj_vocab *v, int32_t left, int32_t right, int32_t *result) {
    const struct merge_map *m = &v->merges;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = (size_t)merge_hash(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) {
            *result = m->result[i];
            return m->rank[i];
        }
        if (k == MERGE_EMPTY) return -1;
        i = (i + 1) & m->mask;
    }
}

/* ---- growable scratch arrays (per call; freed by the caller) ------------- */

/* Ensures *buf can hold `need` elements of `elem` bytes; doubles the capacity.
 * Returns false on overflow or allocation failure (the old buffer is kept). */
bool scratch_reserve(void **buf, size_t *cap, size_t need, size_t elem);

/* Output token list being built by vocab_tokenize. */
struct tok_out {
    dj_token *ids;
    size_t n, cap;
};
bool tok_out_push(struct tok_out *o, dj_token id);

/* ---- the tokenizers proper ---------------------------------------------- */

/* SPM on text[0..len) (already ▁-escaped and prefixed); appends to out. */
enum dj_status spm_encode(const struct dj_vocab *v, const char *text, size_t len, struct tok_out *out);

/* Byte-level BPE state reused across the fragments of one vocab_tokenize call. */
struct bpe_scratch;
struct bpe_scratch *bpe_scratch_create(void);
void bpe_scratch_destroy(struct bpe_scratch *s);
/* Pre-tokenizes and merges one raw fragment; appends to out. */
enum dj_status bpe_encode(const struct dj_vocab *v, struct bpe_scratch *s, const char *text, size_t len,
                          struct tok_out *out);

/* Test knob (bpe.c): words of up to this many bytes are merged by scanning,
 * longer ones with a heap; default 48. */
extern size_t bpe_scan_max;

/* Builds / frees v->special_index (encode.c); after the special list is final. */
enum dj_status special_index_build(struct dj_vocab *v);
void special_index_free(struct special_index *ix);

/* Builds piece/piece_off (detok.c); called at the end of loading. */
enum dj_status vocab_build_pieces(struct dj_vocab *v);

#endif
