/*
 * bpe.c — byte-level BPE encoding as llama.cpp's llm_tokenizer_bpe_session:
 *
 *   raw fragment ──canonical UTF-8──► pre-tokenizer pieces ──► per piece:
 *     symbols = one per byte (the token of its GPT-2 character), then merge
 *     the adjacent pair with the lowest merge rank (ties: leftmost) until no
 *     adjacent pair has a merge; symbols that are not tokens fall back to the
 *     tokens of their single bytes, as llama.cpp does.
 *
 * Canonical text: llama.cpp decodes the input into code points (an invalid
 * byte becomes U+FFFD, overlong forms decode) and re-encodes every piece from
 * them, so the bytes that are merged are those of the re-encoded text.  Valid
 * UTF-8 (the normal case) is its own canonical form and is used in place;
 * otherwise the canonical text is built in scratch, together with the copy the
 * regexes see (identical but for surrogates, which become U+E000 — also class
 * C, same length — because PCRE2 only matches valid UTF-8).
 *
 * Merging works on token ids: a pair's rank comes from the (left id, right id)
 * merge map, and a merge is stale once either side changed id or died — the
 * same pairs in the same order as llama.cpp's text comparison.  Words of up to
 * SCAN_MAX symbols find the next merge by scanning (fewer cache misses than a
 * heap for the 2-10 byte words of code); longer ones use a min-heap.  Both pick
 * the minimum (rank, left position), so they agree.
 *
 * A per-call cache maps a piece's bytes to its tokens: source code repeats
 * the same identifiers and indentation, and a hit skips the merge loop.
 */
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/status.h"
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

#define NONE SIZE_MAX
#define SCAN_MAX 48

/* Words longer than this use the heap; tests set it to 0 to check that both
 * paths agree.  Not meant to be changed while another thread tokenizes. */
size_t bpe_scan_max = SCAN_MAX;

struct bpe_sym {
    dj_token id; /* -1: the text is not a token (never merges) */
    size_t start, len; /* bytes of the piece */
    size_t prev, next;
};

struct bpe_bigram {
    int32_t rank;
    dj_token lid, rid, result;
    size_t left, right;
};

/* piece cache: open addressing; entry → (piece bytes, token run) in arenas */
struct cache_entry {
    uint64_t hash;
    size_t key_off, key_len; /* into key arena */
    size_t tok_off, n_tok;   /* into token arena */
};

struct bpe_scratch {
    struct pretok_scratch *ps;
    /* canonical text and regex text (when the input is not valid UTF-8) */
    char *canon, *match;
    size_t cap_canon, cap_match;
    /* merge state */
    struct bpe_sym *sym;
    size_t cap_sym;
    struct bpe_bigram *heap;
    size_t n_heap, cap_heap;
    char *enc; /* a piece in GPT-2 characters (ignore_merges, fallback) */
    size_t cap_enc;
    /* cache */
    struct cache_entry *ce;
    size_t ce_mask, ce_used;
    char *keys;
    size_t n_keys, cap_keys;
    dj_token *toks;
    size_t n_toks, cap_toks;
    /* the current call */
    const struct dj_vocab *v;
    const char *word_text;
    struct tok_out *out;
};

struct bpe_scratch *bpe_scratch_create(void) { return calloc(1, sizeof(struct bpe_scratch)); }

void bpe_scratch_destroy(struct bpe_scratch *s) {
    if (!s) return;
    pretok_scratch_destroy(s->ps);
    free(s->canon);
    free(s->match);
    free(s->sym);
    free(s->heap);
    free(s->enc);
    free(s->ce);
    free(s->keys);
    free(s->toks);
    free(s);
}

/* ---- merging -------------------------------------------------------------- */

static inline bool heap_above(const struct bpe_bigram *a, const struct bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(struct bpe_scratch *s, struct bpe_bigram bg) {
    if (!scratch_reserve((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap)) return false;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_above(&bg, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = bg;
    return true;
}

static struct bpe_bigram heap_pop(struct bpe_scratch *s) {
    struct bpe_bigram top = s->heap[0];
    struct bpe_bigram last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_above(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_above(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static bool heap_try_add(struct bpe_scratch *s, size_t left, size_t right) {
    if (left == NONE || right == NONE) return true;
    dj_token a = s->sym[left].id, b = s->sym[right].id;
    if (a < 0 || b < 0) return true;
    int32_t res;
    int32_t rank = vocab_merge_rank(s->v, a, b, &res);
    if (rank < 0) return true;
    return heap_push(s, (struct bpe_bigram){rank, a, b, res, left, right});
}

static inline void do_merge(struct bpe_sym *sym, size_t left, size_t right, dj_token result) {
    sym[left].id = result;
    sym[left].len += sym[right].len;
    sym[right].len = 0;
    sym[left].next = sym[right].next;
    if (sym[right].next != NONE) sym[sym[right].next].prev = left;
}

/* Merges s->sym[0..n) in place (linked through prev/next from 0). */
static bool merge_symbols(struct bpe_scratch *s, size_t n) {
    struct bpe_sym *sym = s->sym;
    const struct dj_vocab *v = s->v;
    if (n <= bpe_scan_max && n <= SCAN_MAX) {
        /* rank of the pair starting at each live symbol, recomputed only
         * around a merge */
        int32_t rank[SCAN_MAX] = {0}, res[SCAN_MAX];
        for (size_t i = 0; i < n; i++) {
            rank[i] = -1;
            if (i + 1 < n && sym[i].id >= 0 && sym[i + 1].id >= 0)
                rank[i] = vocab_merge_rank(v, sym[i].id, sym[i + 1].id, &res[i]);
        }
        for (;;) {
            size_t best = NONE;
            int32_t best_rank = INT32_MAX;
            for (size_t i = 0; i != NONE; i = sym[i].next) {
                if (rank[i] >= 0 && rank[i] < best_rank) {
                    best_rank = rank[i];
                    best = i;
                }
            }
            if (best == NONE) return true;
            size_t right = sym[best].next;
            do_merge(sym, best, right, res[best]);
            /* the pair now starting at best, and the one ending at best */
            size_t nx = sym[best].next;
            rank[best] = -1;
            if (nx != NONE && sym[best].id >= 0 && sym[nx].id >= 0)
                rank[best] = vocab_merge_rank(v, sym[best].id, sym[nx].id, &res[best]);
            size_t pv = sym[best].prev;
            if (pv != NONE) {
                rank[pv] = -1;
                if (sym[pv].id >= 0 && sym[best].id >= 0)
                    rank[pv] = vocab_merge_rank(v, sym[pv].id, sym[best].id, &res[pv]);
            }
        }
    }
    s->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if (!heap_try_add(s, i - 1, i)) return false;
    while (s->n_heap > 0) {
        struct bpe_bigram bg = heap_pop(s);
        struct bpe_sym *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->len == 0 || r->len == 0 || l->id != bg.lid || r->id != bg.rid) continue; /* stale */
        do_merge(sym, bg.left, bg.right, bg.result);
        if (!heap_try_add(s, sym[bg.left].prev, bg.left) || !heap_try_add(s, bg.left, sym[bg.left].next))
            return false;
    }
    return true;
}

/* The GPT-2 characters of bytes p[0..n) into s->enc; returns their length or SIZE_MAX. */
static size_t encode_bytes(struct bpe_scratch *s, const char *p, size_t n) {
    if (!scratch_reserve((void **)&s->enc, &s->cap_enc, 2 * n + 1, 1)) return SIZE_MAX;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += utf8_encode(gpt2_byte_to_cp((uint8_t)p[i]), s->enc + o);
    return o;
}

/* A symbol whose text is not a token: llama.cpp looks up each byte of its
 * GPT-2 form as a one-byte token and drops the bytes that are none. */
static bool emit_fallback(struct bpe_scratch *s, const char *p, size_t n, struct tok_out *out) {
    size_t m = encode_bytes(s, p, n);
    if (m == SIZE_MAX) return false;
    for (size_t i = 0; i < m; i++) {
        dj_token t = vocab_find(s->v, s->enc + i, 1);
        if (t >= 0 && !tok_out_push(out, t)) return false;
    }
    return true;
}

/* Encodes one piece p[0..n) (canonical bytes). */
static bool encode_word(struct bpe_scratch *s, const char *p, size_t n, struct tok_out *out) {
    const struct dj_vocab *v = s->v;
    if (v->ignore_merges) {
        size_t m = encode_bytes(s, p, n);
        if (m == SIZE_MAX) return false;
        dj_token t = vocab_find(v, s->enc, m);
        if (t >= 0) return tok_out_push(out, t);
    }
    if (!scratch_reserve((void **)&s->sym, &s->cap_sym, n, sizeof *s->sym)) return false;
    for (size_t i = 0; i < n; i++)
        s->sym[i] = (struct bpe_sym){v->byte_tok[(uint8_t)p[i]], i, 1, i == 0 ? NONE : i - 1, i + 1 == n ? NONE : i + 1};
    if (!merge_symbols(s, n)) return false;
    for (size_t i = 0; i != NONE; i = s->sym[i].next) {
        const struct bpe_sym *y = &s->sym[i];
        if (y->id >= 0) {
            if (!tok_out_push(out, y->id)) return false;
        } else if (!emit_fallback(s, p + y->start, y->len, out)) {
            return false;
        }
    }
    return true;
}

/* ---- the piece cache ------------------------------------------------------- */

#define CACHE_MAX_KEY 64 /* longer pieces are rare and not worth keeping */
#define CACHE_MAX_ENTRIES (1u << 15)

static struct cache_entry *cache_find(struct bpe_scratch *s, const char *p, size_t n, uint64_t h) {
    if (!s->ce) return NULL;
    size_t i = (size_t)h & s->ce_mask;
    for (;;) {
        struct cache_entry *e = &s->ce[i];
        if (e->key_len == 0) return e; /* free slot */
        if (e->hash == h && e->key_len == n && memcmp(s->keys + e->key_off, p, n) == 0) return e;
        i = (i + 1) & s->ce_mask;
    }
}

static bool cache_grow(struct bpe_scratch *s) {
    size_t cap = s->ce ? (s->ce_mask + 1) * 2 : 64;
    struct cache_entry *ce = calloc(cap, sizeof *ce);
    if (!ce) return false;
    if (s->ce) {
        for (size_t i = 0; i <= s->ce_mask; i++) {
            struct cache_entry *e = &s->ce[i];
            if (e->key_len == 0) continue;
            size_t j = (size_t)e->hash & (cap - 1);
            while (ce[j].key_len != 0) j = (j + 1) & (cap - 1);
            ce[j] = *e;
        }
        free(s->ce);
    }
    s->ce = ce;
    s->ce_mask = cap - 1;
    return true;
}

/* Encodes a piece through the cache. */
static bool encode_piece(struct bpe_scratch *s, const char *p, size_t n, struct tok_out *out) {
    if (n > CACHE_MAX_KEY) return encode_word(s, p, n, out);
    uint64_t h = dj_fnv1a(DJ_FNV_OFFSET, p, n);
    struct cache_entry *e = cache_find(s, p, n, h);
    if (e && e->key_len != 0) {
        if (out->n + e->n_tok > out->cap &&
            !scratch_reserve((void **)&out->ids, &out->cap, out->n + e->n_tok, sizeof *out->ids))
            return false;
        memcpy(out->ids + out->n, s->toks + e->tok_off, e->n_tok * sizeof *out->ids);
        out->n += e->n_tok;
        return true;
    }
    size_t first = out->n;
    if (!encode_word(s, p, n, out)) return false;
    size_t nt = out->n - first;
    /* keep it (load factor <= 1/2), up to CACHE_MAX_ENTRIES: a bigger table
     * misses the CPU caches and costs more than the merges it saves (7.5 MB
     * of C headers: 20 MB/s with an unbounded table, ... with this bound) */
    if (s->ce_used >= CACHE_MAX_ENTRIES) return true;
    if (!s->ce || 2 * (s->ce_used + 1) > s->ce_mask + 1) {
        if (!cache_grow(s)) return true; /* the cache is an optimization only */
        e = NULL;
    }
    if (!e || e->key_len != 0) e = cache_find(s, p, n, h);
    if (!scratch_reserve((void **)&s->keys, &s->cap_keys, s->n_keys + n, 1) ||
        !scratch_reserve((void **)&s->toks, &s->cap_toks, s->n_toks + nt, sizeof *s->toks))
        return true;
    memcpy(s->keys + s->n_keys, p, n);
    memcpy(s->toks + s->n_toks, out->ids + first, nt * sizeof *s->toks);
    *e = (struct cache_entry){h, s->n_keys, n, s->n_toks, nt};
    s->n_keys += n;
    s->n_toks += nt;
    s->ce_used++;
    return true;
}

/* ---- the fragment --------------------------------------------------------- */

static enum dj_status on_piece(void *ud, size_t begin, size_t end) {
    struct bpe_scratch *s = ud;
    if (!encode_piece(s, s->word_text + begin, end - begin, s->out))
        return dj_fail(DJ_ERR_NOMEM, "BPE tokenizer: out of memory");
    return DJ_OK;
}

enum dj_status bpe_encode(const struct dj_vocab *v, struct bpe_scratch *s, const char *text, size_t len,
                          struct tok_out *out) {
    if (len == 0) return DJ_OK;
    if (!s->ps) {
        s->ps = pretok_scratch_create(v->pretok);
        if (!s->ps) return dj_fail(DJ_ERR_NOMEM, "BPE tokenizer: out of memory");
    }
    s->v = v;
    s->out = out;
    const char *canon = text, *match = text;
    size_t n = len;
    if (!utf8_valid(text, len)) {
        /* at most 3 bytes per input byte (an invalid byte becomes U+FFFD) */
        if (len > SIZE_MAX / 3 || !scratch_reserve((void **)&s->canon, &s->cap_canon, 3 * len, 1) ||
            !scratch_reserve((void **)&s->match, &s->cap_match, 3 * len, 1))
            return dj_fail(DJ_ERR_NOMEM, "BPE tokenizer: out of memory for a %zu-byte text", len);
        const unsigned char *u = (const unsigned char *)text;
        size_t o = 0;
        for (size_t i = 0; i < len;) {
            size_t l;
            uint32_t cp = utf8_decode_lenient(u + i, len - i, &l);
            size_t k = utf8_encode(cp, s->canon + o);
            if (cp >= 0xd800 && cp <= 0xdfff) utf8_encode(0xe000, s->match + o);
            else memcpy(s->match + o, s->canon + o, k);
            o += k;
            i += l;
        }
        canon = s->canon;
        match = s->match;
        n = o;
    }
    s->word_text = canon;
    return pretok_run(v->pretok, s->ps, match, n, false, on_piece, s);
}
