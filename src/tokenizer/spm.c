/*
 * spm.c — SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm does
 * it: split the (▁-escaped) text into UTF-8 characters, then repeatedly merge
 * the adjacent pair whose concatenation is the token with the highest score
 * (ties: the leftmost pair), until no adjacent pair forms a token.  Symbols
 * that are not tokens at the end are written as byte tokens (<0xNN>).
 *
 * The candidate pairs live in a binary max-heap keyed by (score, -left).  A
 * merge makes older entries stale; they are recognised when popped because
 * one side is gone or their sizes no longer add up — the same test
 * llama.cpp uses, so the merge order (and the result) is identical.
 *
 * Long texts are cut into segments no token can span (before a ▁ that
 * follows another character, when the vocab allows it — see spm_encode), so
 * the heap stays small: 300 KB of text went from 2 MB/s to >10 MB/s.
 *
 *   symbols:  start/len into the text, prev/next links (NONE = SIZE_MAX)
 *   heap:     {score, left, right, size}, size = bytes of the merged text
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

#define NONE SIZE_MAX

struct spm_sym {
    size_t start, len;
    size_t prev, next;
};

struct spm_bigram {
    float score;
    size_t left, right, size;
};

struct spm_state {
    const struct dj_vocab *v;
    const char *text;
    struct spm_sym *sym;
    struct spm_bigram *heap;
    size_t n_heap, cap_heap;
};

/* a above b in the heap: higher score, then smaller left index */
static inline bool above(const struct spm_bigram *a, const struct spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(struct spm_state *s, struct spm_bigram bg) {
    if (!scratch_reserve((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap)) return false;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!above(&bg, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = bg;
    return true;
}

static struct spm_bigram heap_pop(struct spm_state *s) {
    struct spm_bigram top = s->heap[0];
    struct spm_bigram last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(&s->heap[c + 1], &s->heap[c])) c++;
        if (!above(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Queues (left, right) if their concatenation is a token. */
static bool try_add(struct spm_state *s, size_t left, size_t right) {
    if (left == NONE || right == NONE) return true;
    const struct spm_sym *l = &s->sym[left], *r = &s->sym[right];
    size_t size = l->len + r->len;
    dj_token id = vocab_find(s->v, s->text + l->start, size);
    if (id < 0) return true;
    struct spm_bigram bg = {s->v->scores[id], left, right, size};
    return heap_push(s, bg);
}

/* A final symbol: its token, or its bytes as byte tokens. */
static bool emit_symbol(const struct dj_vocab *v, const char *text, const struct spm_sym *sym, struct tok_out *out) {
    dj_token id = vocab_find(v, text + sym->start, sym->len);
    if (id >= 0) return tok_out_push(out, id);
    for (size_t j = 0; j < sym->len; j++) {
        dj_token b = v->byte_tok[(unsigned char)text[sym->start + j]];
        /* a vocab without byte tokens: llama.cpp would throw; deja writes <unk> */
        if (b < 0) b = v->unk;
        if (b >= 0 && !tok_out_push(out, b)) return false;
    }
    return true;
}

static inline bool is_space_sym(const char *text, const struct spm_sym *y) {
    return y->len == 3 && memcmp(text + y->start, "\xe2\x96\x81", 3) == 0;
}

/* A well-formed character other than ▁. */
static inline bool is_plain_char(const char *text, const struct spm_sym *y) {
    uint32_t cp;
    size_t l;
    return !is_space_sym(text, y) && utf8_decode_strict((const unsigned char *)text + y->start, y->len, &cp, &l) &&
           l == y->len;
}

/* Merges and emits the symbols [b, e), which no token can span out of. */
static bool encode_segment(struct spm_state *s, size_t b, size_t e, struct tok_out *out) {
    struct spm_sym *sym = s->sym;
    for (size_t i = b; i < e; i++) {
        sym[i].prev = i == b ? NONE : i - 1;
        sym[i].next = i + 1 == e ? NONE : i + 1;
    }
    s->n_heap = 0;
    for (size_t i = b + 1; i < e; i++)
        if (!try_add(s, i - 1, i)) return false;
    while (s->n_heap > 0) {
        struct spm_bigram bg = heap_pop(s);
        struct spm_sym *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != bg.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next != NONE) sym[r->next].prev = bg.left;
        if (!try_add(s, l->prev, bg.left) || !try_add(s, bg.left, sym[bg.left].next)) return false;
    }
    for (size_t i = b; i != NONE; i = sym[i].next)
        if (!emit_symbol(s->v, s->text, &sym[i], out)) return false;
    return true;
}

enum dj_status spm_encode(const struct dj_vocab *v, const char *text, size_t len, struct tok_out *out) {
    if (len == 0) return DJ_OK;
    struct spm_state s = {.v = v, .text = text};
    size_t cap_sym = 0;
    enum dj_status st = DJ_OK;
    if (!scratch_reserve((void **)&s.sym, &cap_sym, len, sizeof *s.sym)) goto nomem;

    size_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t l = utf8_len_from_lead((unsigned char)text[off]);
        if (l > len - off) l = len - off;
        s.sym[n++] = (struct spm_sym){off, l, NONE, NONE};
        off += l;
    }
    /* Cut before every ▁ that follows another character when no token has
     * "c▁" inside it (vocab->spm_split_ok): no pair can then be merged across
     * the cut, so the segments are independent and the result is the same as
     * for the whole text — with small heaps instead of one huge one. */
    size_t seg = 0;
    for (size_t i = 1; i <= n; i++) {
        if (i < n && !(v->spm_split_ok && is_space_sym(text, &s.sym[i]) && is_plain_char(text, &s.sym[i - 1])))
            continue;
        if (!encode_segment(&s, seg, i, out)) goto nomem;
        seg = i;
    }
    goto done;
nomem:
    st = dj_fail(DJ_ERR_NOMEM, "SPM tokenizer: out of memory for a %zu-byte text", len);
done:
    free(s.sym);
    free(s.heap);
    return st;
}
