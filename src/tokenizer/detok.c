/*
 * detok.c — from tokens back to text: the per-token piece table, whole
 * sequence decoding, and the streaming decoder.
 *
 * Pieces follow llama.cpp's token_to_piece: CONTROL, UNKNOWN and USER_DEFINED
 * tokens are their text (CONTROL/UNKNOWN only when `special`), NORMAL tokens
 * are their text with ▁ → ' ' (SPM) or with every GPT-2 character mapped back
 * to its byte (BPE), BYTE tokens (<0xNN>) are that byte, UNUSED/UNDEFINED
 * tokens are empty.  Two deliberate differences: a BPE character outside the
 * GPT-2 map is copied as is (llama.cpp writes "[UNK_BYTE_0x...]"), and
 * llama.cpp's clean_spaces post-pass (" ," → ",", " 's" → "'s" for gpt2-style
 * vocabs) is not applied — it changes source code, and the agent text deja
 * serves must come back byte for byte.
 *
 * Leading space: with add_space_prefix (SPM) the first token of a sequence
 * loses one leading ' ' — the one the encoder added — whether or not that
 * token renders anything (llama.cpp's rule: a BOS first means the space stays).
 *
 * Streaming: detok_push returns only complete, well-formed UTF-8; the bytes
 * of a character that spans tokens wait in `pend`.  Ill-formed input becomes
 * U+FFFD per maximal ill-formed subpart (Unicode §3.9 / WHATWG), decided one
 * byte at a time with one byte of look-ahead, so cutting the byte stream
 * anywhere gives the same output: pushes + flush == detok_sanitize(detokenize).
 */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

/* ---- pieces ------------------------------------------------------------------ */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Writes the piece of `tok` (special = true) into out (room for the token's
 * text length) and returns its length. */
static size_t make_piece(const struct dj_vocab *v, dj_token tok, char *out) {
    size_t len;
    const char *t = vocab_text_of(v, tok, &len);
    uint16_t a = v->attr[tok];
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        memcpy(out, t, len);
        return len;
    }
    if (a & TOK_ATTR_NORMAL) {
        size_t o = 0;
        if (v->type == DJ_VOCAB_SPM) {
            for (size_t i = 0; i < len; i++) {
                if (i + 2 < len && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                    out[o++] = ' ';
                    i += 2;
                } else {
                    out[o++] = t[i];
                }
            }
            return o;
        }
        const unsigned char *u = (const unsigned char *)t;
        for (size_t i = 0; i < len;) {
            size_t l;
            uint32_t cp = utf8_decode_lenient(u + i, len - i, &l);
            int b = gpt2_cp_to_byte(cp);
            if (b >= 0) {
                out[o++] = (char)b;
            } else {
                memcpy(out + o, t + i, l);
                o += l;
            }
            i += l;
        }
        return o;
    }
    if (a & TOK_ATTR_BYTE) {
        int hi, lo;
        if (len == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && (hi = hexval(t[3])) >= 0 && (lo = hexval(t[4])) >= 0) {
            out[0] = (char)(hi * 16 + lo);
            return 1;
        }
        memcpy(out, t, len); /* not in <0xNN> form: its text */
        return len;
    }
    return 0; /* UNUSED, UNDEFINED */
}

enum dj_status vocab_build_pieces(struct dj_vocab *v) {
    size_t n = v->n_tokens;
    size_t cap = v->text_off[n], bytes; /* pieces are never longer than texts... */
    if (dj_mul_overflow(n + 1, sizeof *v->piece_off, &bytes)) return dj_fail(DJ_ERR_NOMEM, "vocab too large");
    v->piece_off = malloc(bytes);
    v->piece = malloc(cap + 1);
    char *tmp = malloc(v->max_token_len + 1);
    if (!v->piece_off || !v->piece || !tmp) {
        free(tmp);
        return dj_fail(DJ_ERR_NOMEM, "out of memory for the piece table");
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        v->piece_off[i] = o;
        size_t len = make_piece(v, (dj_token)i, tmp);
        /* ...since every rule above maps a text to at most as many bytes */
        DJ_ASSERT(o + len <= cap);
        memcpy(v->piece + o, tmp, len);
        o += len;
    }
    v->piece_off[n] = o;
    free(tmp);
    return DJ_OK;
}

/* The piece of tok honouring `special`; NULL for an id out of range. */
static const char *piece_of(const struct dj_vocab *v, dj_token tok, bool special, size_t *len) {
    if (tok < 0 || (size_t)tok >= v->n_tokens) return NULL;
    if (!special && (v->attr[tok] & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) {
        *len = 0;
        return v->piece;
    }
    *len = v->piece_off[tok + 1] - v->piece_off[tok];
    return v->piece + v->piece_off[tok];
}

size_t vocab_token_to_piece(const struct dj_vocab *v, dj_token tok, bool special, char *buf, size_t size) {
    size_t len;
    const char *p = piece_of(v, tok, special, &len);
    if (!p) return 0;
    if (buf && size) memcpy(buf, p, len < size ? len : size);
    return len;
}

enum dj_status vocab_detokenize(const struct dj_vocab *v, const dj_token *toks, size_t n, bool special, char **out,
                                size_t *out_len) {
    if (!v || !out || !out_len || (!toks && n)) return dj_fail(DJ_ERR_INVALID, "vocab_detokenize: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        if (!piece_of(v, toks[i], special, &len))
            return dj_fail(DJ_ERR_INVALID, "vocab_detokenize: token %zu is %d, outside the vocabulary (0..%zu)", i,
                           (int)toks[i], v->n_tokens - 1);
        if (dj_add_overflow(total, len, &total)) return dj_fail(DJ_ERR_NOMEM, "vocab_detokenize: text too long");
    }
    char *s = malloc(total + 1);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "vocab_detokenize: out of memory for %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_of(v, toks[i], special, &len);
        if (i == 0 && v->add_space_prefix && len > 0 && p[0] == ' ') {
            p++;
            len--;
        }
        memcpy(s + o, p, len);
        o += len;
    }
    s[o] = '\0';
    *out = s;
    *out_len = o;
    return DJ_OK;
}

/* ---- UTF-8 sanitizing ------------------------------------------------------------ */

struct utf8_state {
    unsigned char pend[4];
    size_t n_pend, need;   /* bytes held; continuation bytes still expected */
    unsigned char lo, hi;  /* range of the next continuation byte */
};

struct outbuf {
    char *p;
    size_t n, cap;
};

static bool out_put(struct outbuf *o, const void *s, size_t n) {
    if (!scratch_reserve((void **)&o->p, &o->cap, o->n + n + 1, 1)) return false;
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
    return true;
}

static const char replacement[3] = {'\xef', '\xbf', '\xbd'};

/* Well-formed sequences (Unicode Table 3-7): lead → length and second-byte range. */
static bool lead_info(unsigned char c, size_t *need, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) *need = 1;
    else if (c == 0xe0) *need = 2, *lo = 0xa0;
    else if (c == 0xed) *need = 2, *hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef) *need = 2;
    else if (c == 0xf0) *need = 3, *lo = 0x90;
    else if (c == 0xf4) *need = 3, *hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3) *need = 3;
    else return false;
    return true;
}

static bool utf8_feed(struct utf8_state *st, const char *in, size_t n, struct outbuf *o) {
    const unsigned char *u = (const unsigned char *)in;
    size_t i = 0, run = 0; /* run: start of pending plain bytes copied in one go */
    while (i < n) {
        unsigned char c = u[i];
        if (st->n_pend == 0) {
            if (c < 0x80) {
                i++;
                continue;
            }
            if (i > run && !out_put(o, in + run, i - run)) return false;
            if (lead_info(c, &st->need, &st->lo, &st->hi)) {
                st->pend[0] = c;
                st->n_pend = 1;
            } else if (!out_put(o, replacement, 3)) {
                return false;
            }
            run = ++i;
            continue;
        }
        if (c >= st->lo && c <= st->hi) {
            st->pend[st->n_pend++] = c;
            st->lo = 0x80;
            st->hi = 0xbf;
            if (--st->need == 0) {
                if (!out_put(o, st->pend, st->n_pend)) return false;
                st->n_pend = 0;
            }
            run = ++i;
            continue;
        }
        /* the held bytes are a maximal ill-formed subpart; c starts afresh */
        st->n_pend = 0;
        if (!out_put(o, replacement, 3)) return false;
        run = i;
    }
    if (n > run && st->n_pend == 0 && !out_put(o, in + run, n - run)) return false;
    return true;
}

static bool utf8_finish(struct utf8_state *st, struct outbuf *o) {
    if (st->n_pend == 0) return true;
    st->n_pend = 0;
    return out_put(o, replacement, 3);
}

enum dj_status detok_sanitize(const char *s, size_t n, char **out, size_t *out_len) {
    if (!out || !out_len || (!s && n)) return dj_fail(DJ_ERR_INVALID, "detok_sanitize: NULL argument");
    struct utf8_state st = {0};
    struct outbuf o = {0};
    if (!out_put(&o, "", 0) || !utf8_feed(&st, s, n, &o) || !utf8_finish(&st, &o)) {
        free(o.p);
        return dj_fail(DJ_ERR_NOMEM, "detok_sanitize: out of memory for %zu bytes", n);
    }
    *out = o.p;
    *out_len = o.n;
    return DJ_OK;
}

/* ---- streaming decoder ------------------------------------------------------- */

struct dj_detok {
    const struct dj_vocab *v;
    bool special;
    bool first; /* the next token starts a sequence */
    struct utf8_state st;
    struct outbuf out;
};

struct dj_detok *detok_create(const struct dj_vocab *v, bool special) {
    if (!v) return NULL;
    struct dj_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->v = v;
    d->special = special;
    d->first = true;
    if (!out_put(&d->out, "", 0)) {
        free(d);
        return NULL;
    }
    return d;
}

void detok_destroy(struct dj_detok *d) {
    if (!d) return;
    free(d->out.p);
    free(d);
}

const char *detok_push(struct dj_detok *d, dj_token tok, size_t *len) {
    d->out.n = 0;
    d->out.p[0] = '\0';
    size_t n;
    const char *p = piece_of(d->v, tok, d->special, &n);
    if (p) {
        if (d->first && d->v->add_space_prefix && n > 0 && p[0] == ' ') {
            p++;
            n--;
        }
        d->first = false;
        if (!utf8_feed(&d->st, p, n, &d->out)) d->out.n = 0; /* out of memory: nothing this time */
    }
    *len = d->out.n;
    return d->out.p;
}

const char *detok_flush(struct dj_detok *d, size_t *len) {
    d->out.n = 0;
    d->out.p[0] = '\0';
    if (!utf8_finish(&d->st, &d->out)) d->out.n = 0;
    d->first = true;
    *len = d->out.n;
    return d->out.p;
}
