/*
 * encode.c — vocab_tokenize: special tokens first, then SPM or BPE on the
 * text between them (llama.cpp's llama_vocab::impl::tokenize).
 *
 * Partition (tokenizer_st_partition): the special tokens are tried one after
 * the other, longest text first; each one splits every remaining raw-text
 * fragment at its leftmost non-overlapping occurrences.  Which tokens take
 * part: USER_DEFINED tokens always (HF's added tokens are matched before
 * pre-tokenization; the mpt and deepseek vectors depend on it), CONTROL and
 * UNKNOWN tokens only when parse_special is true.  A token with LSTRIP/RSTRIP
 * (phi-3) eats the white space on that side.
 *
 * Most special tokens never occur in a given text, and there can be
 * thousands of them (llama3 has 256 reserved ones; deepseek-coder 254
 * user-defined ones), so one pass over the text first finds which ones occur
 * at all (struct special_index, built at load); only those are searched for.
 * (Searching for each with memmem cost 40% of the time on 7.5 MB of C.)
 *
 * SPM adds the ▁ space prefix to the first raw fragment and to any raw
 * fragment that follows a special token, and escapes spaces as ▁.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "tokenizer/vocab_internal.h"

struct frag {
    size_t off, len;
    dj_token tok; /* -1: raw text */
};

struct frags {
    struct frag *a;
    size_t n, cap;
};

static bool frags_push(struct frags *f, size_t off, size_t len, dj_token tok) {
    if (!scratch_reserve((void **)&f->a, &f->cap, f->n + 1, sizeof *f->a)) return false;
    f->a[f->n++] = (struct frag){off, len, tok};
    return true;
}

static inline bool c_isspace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* ---- which special tokens occur in a text --------------------------------
 *
 * Entries are (prefix key, index into v->special) sorted by key; a key is the
 * first byte (1-byte tokens), the first 2 bytes (2-3 bytes) or a 16-bit hash
 * of the first 4 bytes (longer tokens), tagged with its kind.  Bitsets over the
 * three key spaces reject almost every text position with three bit tests.
 */
struct special_index {
    uint8_t p1[256 / 8];
    uint8_t p2[65536 / 8];
    uint8_t p4[65536 / 8];
    struct sp_entry {
        uint32_t key, k;
    } *e;
    size_t n;
};

static inline uint32_t h4(const unsigned char *p) {
    uint32_t w = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return (w * 2654435761u) >> 16;
}
static inline uint32_t h2(const unsigned char *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
#define BIT_SET(a, i) ((a)[(i) >> 3] |= (uint8_t)(1u << ((i) & 7)))
#define BIT_GET(a, i) (((a)[(i) >> 3] >> ((i) & 7)) & 1u)
#define KEY1(b) (b)
#define KEY2(h) (0x10000u | (h))
#define KEY4(h) (0x20000u | (h))

static int cmp_entry(const void *a, const void *b) {
    const struct sp_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->k < y->k ? -1 : (x->k > y->k);
}

enum dj_status special_index_build(struct dj_vocab *v) {
    struct special_index *ix = calloc(1, sizeof *ix);
    if (!ix) return dj_fail(DJ_ERR_NOMEM, "out of memory for the special-token index");
    ix->e = malloc((v->n_special ? v->n_special : 1) * sizeof *ix->e);
    if (!ix->e) {
        free(ix);
        return dj_fail(DJ_ERR_NOMEM, "out of memory for the special-token index");
    }
    for (size_t k = 0; k < v->n_special; k++) {
        size_t len;
        const unsigned char *t = (const unsigned char *)vocab_text_of(v, v->special[k], &len);
        uint32_t key;
        if (len == 0) continue;
        if (len == 1) {
            BIT_SET(ix->p1, t[0]);
            key = KEY1(t[0]);
        } else if (len < 4) {
            BIT_SET(ix->p2, h2(t));
            key = KEY2(h2(t));
        } else {
            BIT_SET(ix->p4, h4(t));
            key = KEY4(h4(t));
        }
        ix->e[ix->n++] = (struct sp_entry){key, (uint32_t)k};
    }
    qsort(ix->e, ix->n, sizeof *ix->e, cmp_entry);
    v->special_index = ix;
    return DJ_OK;
}

void special_index_free(struct special_index *ix) {
    if (!ix) return;
    free(ix->e);
    free(ix);
}

/* Marks in occurs[] the special tokens whose text starts at position i. */
static void check_key(const struct dj_vocab *v, const struct special_index *ix, uint32_t key, const char *text,
                      size_t len, size_t i, bool *occurs) {
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->e[mid].key < key) lo = mid + 1;
        else hi = mid;
    }
    for (; lo < ix->n && ix->e[lo].key == key; lo++) {
        uint32_t k = ix->e[lo].k;
        if (occurs[k]) continue;
        size_t tlen;
        const char *t = vocab_text_of(v, v->special[k], &tlen);
        if (tlen <= len - i && memcmp(text + i, t, tlen) == 0) occurs[k] = true;
    }
}

/* One pass over the text: which special tokens occur in it at all. */
static void find_specials(const struct dj_vocab *v, const char *text, size_t len, bool *occurs) {
    const struct special_index *ix = v->special_index;
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) {
        if (BIT_GET(ix->p1, u[i])) check_key(v, ix, KEY1(u[i]), text, len, i, occurs);
        if (i + 2 <= len && BIT_GET(ix->p2, h2(u + i))) check_key(v, ix, KEY2(h2(u + i)), text, len, i, occurs);
        if (i + 4 <= len && BIT_GET(ix->p4, h4(u + i))) check_key(v, ix, KEY4(h4(u + i)), text, len, i, occurs);
    }
}

/* Splits every raw fragment of `in` at the occurrences of token `tok` into `out`. */
static bool masked(const uint8_t *lit, size_t off, size_t n) {
    for (size_t i = off; i < off + n; i++)
        if (lit[i / 8] >> (i % 8) & 1) return true;
    return false;
}

/* Splits every raw fragment of `in` at the occurrences of token `tok` into `out`;
 * with lit (a bitmap), occurrences touching a set bit are not split on. */
static bool split_on(const struct dj_vocab *v, const char *text, dj_token tok, const uint8_t *lit,
                     const struct frags *in, struct frags *out) {
    size_t tlen;
    const char *t = vocab_text_of(v, tok, &tlen);
    uint16_t attr = v->attr[tok];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct frag *f = &in->a[i];
        if (f->tok >= 0) {
            if (!frags_push(out, f->off, f->len, f->tok)) return false;
            continue;
        }
        size_t base = f->off, blen = f->len, from = 0;
        while (blen > 0) {
            const char *m = from < blen ? memmem(text + base + from, blen - from, t, tlen) : NULL;
            if (!m) {
                if (!frags_push(out, base, blen, -1)) return false;
                break;
            }
            size_t mpos = (size_t)(m - text);
            if (lit && masked(lit, mpos, tlen)) { /* written by the user: plain text */
                from = mpos + 1 - base;
                continue;
            }
            from = 0;
            size_t left = mpos - base;
            if (attr & TOK_ATTR_LSTRIP)
                while (left > 0 && c_isspace(text[base + left - 1])) left--;
            if (left > 0 && !frags_push(out, base, left, -1)) return false;
            if (!frags_push(out, mpos, tlen, tok)) return false;
            size_t roff = mpos + tlen, rlen = base + blen - roff;
            if (attr & TOK_ATTR_RSTRIP) {
                while (rlen > 0 && c_isspace(text[roff])) {
                    roff++;
                    rlen--;
                }
            }
            base = roff;
            blen = rlen;
        }
    }
    return true;
}

static enum dj_status partition(const struct dj_vocab *v, const char *text, size_t len, bool parse_special,
                                const uint8_t *lit, struct frags *f) {
    struct frags other = {0};
    enum dj_status st = DJ_OK;
    bool *occurs = NULL;
    f->n = 0;
    if (!frags_push(f, 0, len, -1)) goto nomem;
    if (v->n_special == 0) goto done;
    occurs = calloc(v->n_special, sizeof *occurs);
    if (!occurs) goto nomem;
    find_specials(v, text, len, occurs);
    for (size_t k = 0; k < v->n_special; k++) {
        if (!occurs[k]) continue;
        dj_token tok = v->special[k];
        if (!parse_special && (v->attr[tok] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        if (!split_on(v, text, tok, (v->attr[tok] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) ? lit : NULL, f, &other))
            goto nomem;
        struct frags tmp = *f;
        *f = other;
        other = tmp;
    }
    goto done;
nomem:
    st = dj_fail(DJ_ERR_NOMEM, "tokenizer: out of memory partitioning a %zu-byte text", len);
done:
    free(other.a);
    free(occurs);
    return st;
}

/* SPM text of a raw fragment: optional leading ▁, spaces as ▁. */
static char *spm_escape(const char *s, size_t n, bool prefix, size_t *out_len) {
    size_t cap;
    if (dj_mul_overflow(n + 1, 3, &cap)) return NULL;
    char *e = malloc(cap);
    if (!e) return NULL;
    size_t o = 0;
    if (prefix) {
        memcpy(e, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(e + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            e[o++] = s[i];
        }
    }
    *out_len = o;
    return e;
}

enum dj_status vocab_tokenize(const struct dj_vocab *v, const char *text, size_t len, bool add_special,
                              bool parse_special, dj_token **out, size_t *n_out) {
    return vocab_tokenize_masked(v, text, len, add_special, parse_special, NULL, out, n_out);
}

enum dj_status vocab_tokenize_masked(const struct dj_vocab *v, const char *text, size_t len, bool add_special,
                                     bool parse_special, const uint8_t *literal, dj_token **out, size_t *n_out) {
    if (!v || !out || !n_out || (!text && len)) return dj_fail(DJ_ERR_INVALID, "vocab_tokenize: NULL argument");
    struct tok_out o = {0};
    struct frags f = {0};
    struct bpe_scratch *bs = NULL;
    enum dj_status st = DJ_OK;

    if (len > 0 && (st = partition(v, text, len, parse_special, literal, &f)) != DJ_OK) goto done;
    if (add_special && v->add_bos && !tok_out_push(&o, v->bos)) goto nomem;

    if (v->type == DJ_VOCAB_SPM) {
        bool prev_special = true; /* the first fragment gets the space prefix */
        for (size_t i = 0; i < f.n; i++) {
            if (f.a[i].tok >= 0) {
                if (!tok_out_push(&o, f.a[i].tok)) goto nomem;
                prev_special = true;
                continue;
            }
            size_t elen;
            char *esc = spm_escape(text + f.a[i].off, f.a[i].len, v->add_space_prefix && prev_special, &elen);
            if (!esc) goto nomem;
            st = spm_encode(v, esc, elen, &o);
            free(esc);
            if (st != DJ_OK) goto done;
            prev_special = false;
        }
    } else {
        bs = bpe_scratch_create();
        if (!bs) goto nomem;
        for (size_t i = 0; i < f.n; i++) {
            if (f.a[i].tok >= 0) {
                if (!tok_out_push(&o, f.a[i].tok)) goto nomem;
                continue;
            }
            if ((st = bpe_encode(v, bs, text + f.a[i].off, f.a[i].len, &o)) != DJ_OK) goto done;
        }
    }
    if (add_special && v->add_eos && !tok_out_push(&o, v->eos)) goto nomem;
    if (!o.ids) { /* callers always get something to free */
        o.ids = malloc(sizeof *o.ids);
        if (!o.ids) goto nomem;
    }
    *out = o.ids;
    *n_out = o.n;
    o.ids = NULL;
    goto done;
nomem:
    st = dj_fail(DJ_ERR_NOMEM, "tokenizer: out of memory for a %zu-byte text", len);
done:
    free(o.ids);
    free(f.a);
    bpe_scratch_destroy(bs);
    return st;
}
