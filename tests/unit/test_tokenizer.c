/*
 * test_tokenizer.c — unit tests of the tokenizer beyond the reference vectors
 * (those are in test_tokenizer_vectors.c):
 *
 *   - the code point class table agrees with PCRE2's Unicode properties;
 *   - the hand-written pre-tokenizer splitters agree with the PCRE2 regexes
 *     they stand for, on the vector inputs and on random text;
 *   - SPM segmentation and the BPE scan/heap merge paths change nothing;
 *   - special tokens: parse_special on/off, user-defined tokens, BOS/EOS,
 *     the SPM space prefix after a special token, phi-3 RSTRIP;
 *   - the streaming decoder: characters split across tokens, ill-formed
 *     UTF-8, random token sequences (pushes + flush == sanitize(detokenize),
 *     every chunk valid UTF-8);
 *   - invalid UTF-8 input (no crash; encoded as llama.cpp does);
 *   - malformed vocab metadata gives the documented status and names the key;
 *   - the models' own vocabs (stories260K, codelm-15m) load and tokenize.
 */
#include <stdbool.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gguf/gguf.h"
#include "test.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

static const char *shared;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static struct dj_vocab *load_vocab(const char *rel) {
    struct dj_vocab *v = NULL;
    enum dj_status st = dj_vocab_load_file(test_shared_path(shared, rel), &v);
    CHECKF(st == DJ_OK, "%s: %s", rel, dj_last_error());
    return st == DJ_OK ? v : NULL;
}

/* tokenize → ids (malloc'd) */
static dj_token *tok(const struct dj_vocab *v, const char *s, size_t len, bool add_special, bool parse_special,
                     size_t *n) {
    dj_token *ids = NULL;
    enum dj_status st = vocab_tokenize(v, s, len, add_special, parse_special, &ids, n);
    CHECKF(st == DJ_OK, "tokenize: %s", dj_last_error());
    return st == DJ_OK ? ids : NULL;
}

static bool contains(const dj_token *ids, size_t n, dj_token t) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == t) return true;
    return false;
}

/* ---- pre-tokenizer: fast splitters == PCRE2 ------------------------------ */

struct pieces {
    size_t *b;
    size_t n, cap;
};

static enum dj_status collect(void *ud, size_t begin, size_t end) {
    struct pieces *p = ud;
    if (!scratch_reserve((void **)&p->b, &p->cap, p->n + 2, sizeof *p->b)) return DJ_ERR_NOMEM;
    p->b[p->n++] = begin;
    p->b[p->n++] = end;
    return DJ_OK;
}

static const uint32_t alphabet[] = {
    'a', 'b', 'Z', 'x', 's', 't', 'r', 'e', 'v', 'l', 'm', 'd', 'S', 'T', 'R', 'E', 'L', 'D', ' ', ' ', ' ',
    '\t', '\n', '\r', '\v', '\f', '\'', '0', '1', '7', '9', '.', ',', '$', '+', '<', '=', '>', '^', '~', '|', '`',
    '_', '-', '(', ')', '"', '#', '%', '!', '?', '/', '\\', '{', '}', '[', ']', ';', ':', '@', '&', '*',
    0xA0, 0x3000, 0x85, 0x2009, 0x1680, 0x180E, 0xE9, 0xFC, 0x3A9, 0x2126, 0x4E2D, 0x6587, 0xAC00, 0x663, 0xBD,
    0x301, 0x1F600, 0x1F999, 0x200D, 0xFE0F, 0xFFFD, 0xE000, 0x378, 0x30FC, 0x3001, 0x3002, 0xFF01, 0x2018, 0x2026,
    0x964, 0x60C, 0x800, 0x9FA5, 0x9FA6, 0xD7FF, 0x2160, 0x10400, 0x1E900, 0x17B6, 0x430, 0x5D0,
};

static size_t random_text(char *buf, size_t max_cps) {
    size_t n = 1 + rnd() % max_cps, o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = alphabet[rnd() % (sizeof alphabet / sizeof alphabet[0])];
        size_t rep = (rnd() % 8 == 0) ? 1 + rnd() % 6 : 1; /* runs of the same character */
        for (size_t r = 0; r < rep; r++) o += utf8_encode(c, buf + o);
    }
    return o;
}

static void test_pretok_differential(void) {
    static const char *const pres[] = {"default", "llama3", "deepseek-coder", "deepseek-llm", "falcon", "starcoder",
                                       "gpt-2",   "qwen2",  "poro-chat",      "tekken",       "gpt-4o", "seed-coder"};
    size_t inp_len = 0;
    char *inp = test_read_file(test_shared_path(shared, "vocab/ggml-vocab-gpt-2.gguf.inp"), &inp_len);
    CHECK(inp != NULL);
    for (size_t k = 0; k < sizeof pres / sizeof pres[0]; k++) {
        struct pretok *p = NULL;
        struct pretok_opts opts;
        enum dj_status st = pretok_create(pres[k], &p, &opts);
        CHECKF(st == DJ_OK, "%s: %s", pres[k], dj_last_error());
        if (st != DJ_OK) continue;
        struct pretok_scratch *s = pretok_scratch_create(p);
        CHECK(s != NULL);
        struct pieces fast = {0}, ref = {0};
        size_t n_bad = 0, n_texts = 0;
        char buf[4096];
        for (int it = 0; it < 3000 + 1; it++) {
            const char *text;
            size_t len;
            if (it == 0) { /* all the vector inputs in one text */
                text = inp ? inp : "";
                len = inp ? inp_len : 0;
            } else {
                len = random_text(buf, it % 10 == 0 ? 200 : 24);
                text = buf;
            }
            fast.n = ref.n = 0;
            enum dj_status a = pretok_run(p, s, text, len, false, collect, &fast);
            enum dj_status b = pretok_run(p, s, text, len, true, collect, &ref);
            n_texts++;
            if (a != DJ_OK || b != DJ_OK || fast.n != ref.n || memcmp(fast.b, ref.b, fast.n * sizeof *fast.b) != 0) {
                if (n_bad++ < 3) {
                    fprintf(stderr, "pre '%s': fast and PCRE2 pieces differ on (%zu bytes):", pres[k], len);
                    for (size_t i = 0; i < len && i < 120; i++) fprintf(stderr, " %02x", (unsigned char)text[i]);
                    fprintf(stderr, "\n  fast:");
                    for (size_t i = 0; i < fast.n; i += 2) fprintf(stderr, " [%zu,%zu)", fast.b[i], fast.b[i + 1]);
                    fprintf(stderr, "\n  pcre:");
                    for (size_t i = 0; i < ref.n; i += 2) fprintf(stderr, " [%zu,%zu)", ref.b[i], ref.b[i + 1]);
                    fprintf(stderr, "\n");
                }
            }
            /* the pieces tile the text */
            size_t at = 0;
            bool tiles = true;
            for (size_t i = 0; i < fast.n; i += 2) {
                tiles = tiles && fast.b[i] == at && fast.b[i + 1] > at;
                at = fast.b[i + 1];
            }
            if (!(tiles && at == len)) n_bad++;
        }
        CHECKF(n_bad == 0, "pre '%s': %zu of %zu texts split differently", pres[k], n_bad, n_texts);
        free(fast.b);
        free(ref.b);
        pretok_scratch_destroy(s);
        pretok_destroy(p);
    }
    free(inp);

    struct pretok *p = NULL;
    struct pretok_opts opts;
    CHECK(pretok_create("no-such-pre", &p, &opts) == DJ_ERR_UNSUPPORTED);
    CHECK(strstr(dj_last_error(), "no-such-pre") != NULL);
}

/* The class table (unicode_data.c) against PCRE2's Unicode properties, on a
 * sample of code points (a full sweep found no difference when written). */
static void test_unicode_table(void) {
    static const char *const pats[] = {"^\\p{L}$", "^\\p{N}$", "^\\p{P}$", "^\\p{S}$", "^\\p{M}$", "^\\p{Z}$", "^\\p{Cn}$"};
    static const int cls[] = {UCLASS_L, UCLASS_N, UCLASS_P, UCLASS_S, UCLASS_M, UCLASS_Z, UCLASS_UNDEF};
    size_t bad = 0, n = 0;
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        int err;
        PCRE2_SIZE off;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
        pcre2_match_data *md = code ? pcre2_match_data_create_from_pattern(code, NULL) : NULL;
        CHECK(code && md);
        if (!code || !md) continue;
        for (uint32_t cp = 0; cp <= UNICODE_MAX; cp += (cp < 0x3400 ? 1 : 13)) {
            if (cp >= 0xd800 && cp <= 0xdfff) continue;
            char b[4];
            size_t len = utf8_encode(cp, b);
            bool m = pcre2_match(code, (PCRE2_SPTR)b, len, 0, 0, md, NULL) >= 0;
            bool want = (int)(unicode_flags(cp) & UCLASS_MASK) == cls[i];
            if (m != want && bad++ < 5) fprintf(stderr, "U+%04X: class %d, PCRE2 %s says %d\n", cp,
                                                unicode_flags(cp) & UCLASS_MASK, pats[i], m);
            n++;
        }
        pcre2_match_data_free(md);
        pcre2_code_free(code);
    }
    CHECKF(bad == 0, "%zu of %zu code point classes differ from PCRE2", bad, n);
    /* White_Space: the set llama.cpp uses */
    static const uint32_t ws[] = {9, 10, 11, 12, 13, 32, 0x85, 0xa0, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f,
                                  0x205f, 0x3000};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) CHECK(unicode_is_space(ws[i]));
    CHECK(!unicode_is_space(0x180e) && !unicode_is_space(0x200b) && !unicode_is_space('a') && !unicode_is_space(0x110000));
    /* the GPT-2 byte map is a bijection onto its 256 code points */
    bool ok = true;
    for (int b = 0; b < 256; b++) ok = ok && gpt2_cp_to_byte(gpt2_byte_to_cp((uint8_t)b)) == b;
    CHECK(ok && gpt2_byte_to_cp(' ') == 0x120 && gpt2_byte_to_cp('a') == 'a' && gpt2_cp_to_byte(0x3000) == -1);
}

/* ---- merge-path equivalences ---------------------------------------------- */

static bool same_ids(const dj_token *a, size_t na, const dj_token *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void test_merge_paths(struct dj_vocab *spm, struct dj_vocab *bpe) {
    char buf[8192];
    size_t n_diff_spm = 0, n_diff_bpe = 0;
    for (int it = 0; it < 400; it++) {
        size_t len = random_text(buf, it % 4 == 0 ? 600 : 60);
        /* SPM: segmented vs whole text */
        if (spm) {
            size_t na, nb;
            dj_token *a = tok(spm, buf, len, false, false, &na);
            spm->spm_split_ok = false;
            dj_token *b = tok(spm, buf, len, false, false, &nb);
            spm->spm_split_ok = true;
            if (!a || !b || !same_ids(a, na, b, nb)) n_diff_spm++;
            free(a);
            free(b);
        }
        /* BPE: scan vs heap (and long words: spaces and punctuation runs) */
        if (bpe) {
            if (it % 3 == 0) {
                size_t run = 20 + rnd() % 200;
                char c = " =-*/#"[rnd() % 6];
                memset(buf + len, c, run);
                len += run;
            }
            size_t na, nb;
            dj_token *a = tok(bpe, buf, len, false, false, &na);
            size_t save = bpe_scan_max;
            bpe_scan_max = 0;
            dj_token *b = tok(bpe, buf, len, false, false, &nb);
            bpe_scan_max = save;
            if (!a || !b || !same_ids(a, na, b, nb)) n_diff_bpe++;
            free(a);
            free(b);
        }
    }
    CHECKF(n_diff_spm == 0, "SPM: segmented and whole-text encodings differ on %zu texts", n_diff_spm);
    CHECKF(n_diff_bpe == 0, "BPE: scan and heap merges differ on %zu texts", n_diff_bpe);
}

/* ---- special tokens -------------------------------------------------------- */

static void test_special(struct dj_vocab *spm, struct dj_vocab *ds, struct dj_vocab *phi3, struct dj_vocab *gpt2) {
    size_t n, m;
    if (ds) {
        const char *bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>def f():";
        dj_token *a = tok(ds, bos, strlen(bos), false, true, &n);
        CHECK(a && n > 1 && a[0] == 32013);
        dj_token *b = tok(ds, bos, strlen(bos), false, false, &m);
        CHECK(b && m > 3 && !contains(b, m, 32013));
        /* the text after the special token is tokenized on its own */
        size_t k;
        dj_token *c = tok(ds, "def f():", 8, false, false, &k);
        CHECK(a && c && n == k + 1 && memcmp(a + 1, c, k * sizeof *c) == 0);
        free(a);
        free(b);
        free(c);
        /* user-defined tokens ("ü" = 32009) are split out in both modes */
        a = tok(ds, "F\xc3\xbchrer", 7, false, false, &n);
        b = tok(ds, "F\xc3\xbchrer", 7, false, true, &m);
        CHECK(a && b && contains(a, n, 32009) && contains(b, m, 32009));
        free(a);
        free(b);
        /* add_bos_token = true in the file */
        a = tok(ds, "x", 1, true, false, &n);
        CHECK(a && n == 2 && a[0] == 32013 && vocab_add_bos(ds) && !vocab_add_eos(ds));
        free(a);
        CHECK(vocab_bos(ds) == 32013 && vocab_eos(ds) == 32014 && vocab_is_eog(ds, 32014));
        CHECK(!vocab_is_eog(ds, 32013) && !vocab_is_eog(ds, -5) && !vocab_is_eog(ds, 1 << 30));
        CHECK(strcmp(vocab_pre_name(ds), "deepseek-coder") == 0 && strcmp(vocab_type_name(ds), "bpe") == 0);
        CHECK(vocab_type(ds) == DJ_VOCAB_BPE && vocab_n_tokens(ds) == 32256);
        CHECK(vocab_token_type(ds, 32013) == DJ_TOKEN_CONTROL && vocab_token_type(ds, 32009) == DJ_TOKEN_USER_DEFINED);
        CHECK(vocab_token_type(ds, 100) == DJ_TOKEN_NORMAL && vocab_token_type(ds, -1) == DJ_TOKEN_UNDEFINED);
        CHECK(vocab_token_text(ds, -1) == NULL && vocab_token_text(ds, 32256) == NULL);
        CHECK(vocab_token_text(ds, 0) && strcmp(vocab_token_text(ds, 0), "!") == 0);
        /* token_to_piece: snprintf-like; control tokens only with special */
        char piece[8];
        CHECK(vocab_token_to_piece(ds, 32013, false, piece, sizeof piece) == 0);
        size_t full = vocab_token_to_piece(ds, 32013, true, piece, sizeof piece);
        CHECK(full == strlen("<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>") &&
              memcmp(piece, "<\xef\xbd\x9c" "be", 6) == 0);
        CHECK(vocab_token_to_piece(ds, 99999, true, piece, sizeof piece) == 0);
        dj_token sp = vocab_find(ds, "\xc4\xa0", 2); /* "Ġ" = a space */
        CHECK(sp >= 0 && vocab_token_to_piece(ds, sp, false, piece, sizeof piece) == 1 && piece[0] == ' ');
    }
    if (spm) {
        CHECK(vocab_add_bos(spm) && vocab_add_space_prefix(spm) && strcmp(vocab_pre_name(spm), "default") == 0);
        dj_token *a = tok(spm, "<s>Hello", 8, false, true, &n);
        dj_token *b = tok(spm, "Hello", 5, false, false, &m);
        /* after a special token the text gets the ▁ prefix again */
        CHECK(a && b && n == m + 1 && a[0] == 1 && memcmp(a + 1, b, m * sizeof *b) == 0);
        free(a);
        a = tok(spm, "<s>Hello", 8, false, false, &n);
        CHECK(a && !contains(a, n, 1));
        free(a);
        a = tok(spm, "Hello", 5, true, false, &n);
        CHECK(a && b && n == m + 1 && a[0] == 1 && memcmp(a + 1, b, m * sizeof *b) == 0);
        free(a);
        free(b);
        a = tok(spm, "", 0, true, false, &n); /* empty text + BOS = [BOS] */
        CHECK(a && n == 1 && a[0] == 1);
        free(a);
        a = tok(spm, "", 0, false, false, &n);
        CHECK(a && n == 0);
        free(a);
        /* decoding: the leading space the encoder added goes, once */
        dj_token ids[3];
        char *s;
        size_t sl;
        b = tok(spm, " Hello world", 12, false, false, &m);
        CHECK(b && vocab_detokenize(spm, b, m, false, &s, &sl) == DJ_OK && strcmp(s, " Hello world") == 0);
        if (b) free(s);
        free(b);
        ids[0] = 1;
        CHECK(vocab_detokenize(spm, ids, 1, false, &s, &sl) == DJ_OK && sl == 0);
        free(s);
        CHECK(vocab_detokenize(spm, ids, 1, true, &s, &sl) == DJ_OK && strcmp(s, "<s>") == 0);
        free(s);
        ids[1] = 99999;
        CHECK(vocab_detokenize(spm, ids, 2, false, &s, &sl) == DJ_ERR_INVALID && strstr(dj_last_error(), "99999"));
    }
    if (phi3) {
        /* phi-3: special tokens eat the white space after them (RSTRIP) */
        dj_token *a = tok(phi3, "<|user|>\n  Hi", 13, false, true, &n);
        dj_token *b = tok(phi3, "Hi", 2, false, false, &m);
        CHECK(a && b && n == m + 1 && a[0] == 32010 && memcmp(a + 1, b, m * sizeof *b) == 0);
        free(a);
        free(b);
        CHECK(vocab_eos(phi3) == 32000 && vocab_is_eog(phi3, 32007)); /* <|end|> */
    }
    if (gpt2) {
        dj_token *a = tok(gpt2, "a<|endoftext|>b", 15, true, true, &n);
        CHECK(a && n == 3 && a[1] == 50256 && !vocab_add_bos(gpt2));
        free(a);
        a = tok(gpt2, "a<|endoftext|>b", 15, true, false, &n);
        CHECK(a && n > 3 && !contains(a, n, 50256));
        free(a);
    }
}

/* ---- streaming decoder ----------------------------------------------------- */

/* Streams ids through a decoder; checks every chunk is valid UTF-8 and the
 * whole equals sanitize(detokenize).  Returns the number of empty chunks. */
static size_t check_stream(const struct dj_vocab *v, const dj_token *ids, size_t n, bool special, const char *what) {
    char *whole, *san;
    size_t wl, sl, empty = 0;
    if (vocab_detokenize(v, ids, n, special, &whole, &wl) != DJ_OK) {
        CHECKF(0, "%s: detokenize failed: %s", what, dj_last_error());
        return 0;
    }
    CHECK(detok_sanitize(whole, wl, &san, &sl) == DJ_OK);
    struct dj_detok *d = detok_create(v, special);
    CHECK(d != NULL);
    char *acc = malloc(sl + 1);
    size_t o = 0;
    bool valid = true, fits = true;
    for (size_t i = 0; i <= n; i++) {
        size_t len;
        const char *p = i < n ? detok_push(d, ids[i], &len) : detok_flush(d, &len);
        if (!utf8_valid(p, len)) valid = false;
        if (len == 0 && i < n) empty++;
        if (o + len > sl) {
            fits = false;
            break;
        }
        memcpy(acc + o, p, len);
        o += len;
    }
    CHECKF(valid, "%s: a chunk is not valid UTF-8", what);
    CHECKF(fits && o == sl && memcmp(acc, san, sl) == 0, "%s: streamed text differs from sanitize(detokenize)", what);
    /* a decoder is reusable after flush */
    size_t len;
    if (n > 0) {
        detok_push(d, ids[0], &len);
        detok_flush(d, &len);
    }
    free(acc);
    free(san);
    free(whole);
    detok_destroy(d);
    return empty;
}

static void test_stream(struct dj_vocab *spm, struct dj_vocab *ds) {
    const char *text = "emoji \xf0\x9f\xa6\x99 and \xf0\x9f\x98\x80\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f"
                       " CJK \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97 \xe1\x9e\x80\xe1\x9e\xb6 done";
    struct dj_vocab *vs[2] = {spm, ds};
    for (int k = 0; k < 2; k++) {
        if (!vs[k]) continue;
        size_t n;
        dj_token *ids = tok(vs[k], text, strlen(text), false, false, &n);
        if (!ids) continue;
        size_t empty = check_stream(vs[k], ids, n, false, k ? "bpe emoji" : "spm emoji");
        CHECKF(empty > 0, "expected some tokens to hold back a partial character");
        char *s;
        size_t sl;
        CHECK(vocab_detokenize(vs[k], ids, n, false, &s, &sl) == DJ_OK && sl == strlen(text) && !memcmp(s, text, sl));
        free(s);
        free(ids);
    }
    if (spm) {
        /* byte tokens that do not form a character: U+FFFD per maximal subpart */
        dj_token e4 = vocab_find(spm, "<0xE4>", 6), b8 = vocab_find(spm, "<0xB8>", 6), a = vocab_find(spm, "A", 1);
        dj_token f0 = vocab_find(spm, "<0xF0>", 6), x9f = vocab_find(spm, "<0x9F>", 6);
        CHECK(e4 >= 0 && b8 >= 0 && a >= 0 && f0 >= 0 && x9f >= 0);
        struct dj_detok *d = detok_create(spm, false);
        size_t len;
        const char *p = detok_push(d, e4, &len);
        CHECK(len == 0);
        p = detok_push(d, a, &len);
        CHECK(len == 4 && memcmp(p, "\xef\xbf\xbd" "A", 4) == 0);
        detok_push(d, f0, &len);
        p = detok_push(d, x9f, &len);
        CHECK(len == 0);
        p = detok_flush(d, &len);
        CHECK(len == 3 && memcmp(p, "\xef\xbf\xbd", 3) == 0);
        p = detok_push(d, e4, &len);
        p = detok_push(d, b8, &len);
        p = detok_push(d, vocab_find(spm, "<0xAD>", 6), &len); /* 中 = E4 B8 AD */
        CHECK(len == 3 && memcmp(p, "\xe4\xb8\xad", 3) == 0);
        p = detok_push(d, -1, &len); /* out of range: ignored */
        CHECK(len == 0);
        detok_destroy(d);
        detok_destroy(NULL);
    }
    /* detok_sanitize on its own */
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"abc", 3, "abc"},
        {"\xe4\xb8", 2, "\xef\xbf\xbd"},
        {"\xc0\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
        {"\xf0\x9f\x98" "a", 4, "\xef\xbf\xbd" "a"},
        {"\xff" "a\x80", 3, "\xef\xbf\xbd" "a\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s;
        size_t sl;
        CHECK(detok_sanitize(cases[i].in, cases[i].n, &s, &sl) == DJ_OK);
        CHECKF(sl == strlen(cases[i].out) && memcmp(s, cases[i].out, sl) == 0, "sanitize case %zu", i);
        free(s);
    }
    /* random token sequences, special on and off */
    struct dj_vocab *all[2] = {spm, ds};
    for (int k = 0; k < 2; k++) {
        if (!all[k]) continue;
        dj_token ids[64];
        for (int it = 0; it < 300; it++) {
            size_t n = rnd() % 64;
            for (size_t i = 0; i < n; i++) {
                /* bias towards byte tokens, where characters get split */
                ids[i] = (rnd() % 2 && k == 0) ? (dj_token)(3 + rnd() % 256) : (dj_token)(rnd() % vocab_n_tokens(all[k]));
            }
            check_stream(all[k], ids, n, it % 2, "random ids");
        }
    }
}

/* ---- invalid UTF-8 input ----------------------------------------------------- */

static void test_invalid_utf8(struct dj_vocab *spm, struct dj_vocab *ds) {
    char buf[512];
    size_t n_bad_bpe = 0, n_bad_spm = 0;
    for (int it = 0; it < 1500; it++) {
        size_t len = rnd() % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            uint32_t r = rnd();
            buf[i] = (char)(r % 4 == 0 ? 0x80 + (r >> 8) % 0x80 : (r % 4 == 1 ? 0xc0 + (r >> 8) % 0x40 : (r >> 8) % 0x80));
        }
        for (int ps = 0; ps < 2; ps++) {
            if (ds) {
                size_t n;
                dj_token *ids = tok(ds, buf, len, false, ps, &n);
                char *s;
                size_t sl;
                if (ids && vocab_detokenize(ds, ids, n, true, &s, &sl) == DJ_OK) {
                    /* expected: llama.cpp's decode (bad byte → U+FFFD) and re-encode */
                    char want[3 * sizeof buf];
                    size_t o = 0;
                    for (size_t i = 0; i < len;) {
                        size_t l;
                        uint32_t cp = utf8_decode_lenient((const unsigned char *)buf + i, len - i, &l);
                        o += utf8_encode(cp, want + o);
                        i += l;
                    }
                    if (sl != o || memcmp(s, want, o) != 0) n_bad_bpe++;
                    free(s);
                } else {
                    n_bad_bpe++;
                }
                free(ids);
            }
            /* SPM: without spaces (an escaped space right after a bad lead byte
             * is swallowed into its byte-fallback symbol and comes back as
             * "\xe2\x96\x81", in llama.cpp too) and without literal U+2581 */
            for (size_t i = 0; i < len; i++)
                if (buf[i] == ' ') buf[i] = '_';
            if (spm && !memmem(buf, len, "\xe2\x96\x81", 3)) {
                size_t n;
                dj_token *ids = tok(spm, buf, len, false, ps, &n);
                char *s;
                size_t sl;
                /* byte fallback: SPM gives the bytes back exactly */
                if (ids && vocab_detokenize(spm, ids, n, true, &s, &sl) == DJ_OK) {
                    if (sl != len || memcmp(s, buf, len) != 0) n_bad_spm++;
                    free(s);
                } else {
                    n_bad_spm++;
                }
                free(ids);
            }
        }
    }
    CHECKF(n_bad_bpe == 0, "BPE: %zu invalid-UTF-8 texts did not decode to llama.cpp's U+FFFD form", n_bad_bpe);
    CHECKF(n_bad_spm == 0, "SPM: %zu invalid-UTF-8 texts did not round-trip", n_bad_spm);
}

/* ---- malformed metadata ---------------------------------------------------------- */

enum edit_kind { SET_STR, SET_U32, SET_I32, SET_U64, REMOVE, SET_STRS, SET_I32S, SET_F32S };

struct edit {
    enum edit_kind kind;
    const char *key;
    const char *s;
    uint64_t u;
    size_t n; /* array length for SET_*S */
};

/* Copies vocab file `rel`, applies one edit, and loads the result. */
static enum dj_status load_edited(const char *rel, struct edit e, struct dj_vocab **out) {
    struct gguf_ctx *src = NULL;
    *out = NULL;
    if (gguf_open(test_shared_path(shared, rel), &src) != DJ_OK) return DJ_ERR_IO;
    struct gguf_writer *w = gguf_writer_create();
    for (size_t i = 0; i < gguf_n_kv(src); i++) gguf_writer_copy_kv(w, src, i);
    struct gguf_arr toks;
    gguf_get_arr(src, "tokenizer.ggml.tokens", &toks);
    switch (e.kind) {
    case SET_STR: gguf_writer_set_str(w, e.key, e.s, strlen(e.s)); break;
    case SET_U32: gguf_writer_set_u32(w, e.key, (uint32_t)e.u); break;
    case SET_I32: gguf_writer_set_i32(w, e.key, (int32_t)e.u); break;
    case SET_U64: gguf_writer_set_u64(w, e.key, e.u); break;
    case REMOVE: gguf_writer_remove_key(w, e.key); break;
    case SET_STRS: { /* the tokens array, first n entries, entry 1 replaced by e.s if given */
        struct gguf_str *strs = malloc(e.n * sizeof *strs);
        for (size_t i = 0; i < e.n; i++) strs[i] = i < toks.n ? toks.strs[i] : toks.strs[0];
        if (e.s) strs[1] = (struct gguf_str){e.s, strlen(e.s)};
        gguf_writer_set_arr_str(w, e.key, strs, e.n);
        free(strs);
        break;
    }
    case SET_I32S: {
        int32_t *a = calloc(e.n, sizeof *a);
        for (size_t i = 0; i < e.n; i++) a[i] = 1;
        gguf_writer_set_arr(w, e.key, GGUF_TYPE_INT32, a, e.n);
        free(a);
        break;
    }
    case SET_F32S: {
        float *a = calloc(e.n, sizeof *a);
        gguf_writer_set_arr(w, e.key, GGUF_TYPE_FLOAT32, a, e.n);
        free(a);
        break;
    }
    }
    void *mem = NULL;
    size_t size = 0;
    enum dj_status st = gguf_writer_write_memory(w, &mem, &size);
    gguf_writer_destroy(w);
    gguf_close(src);
    if (st != DJ_OK) return st;
    struct gguf_ctx *ctx = NULL;
    st = gguf_open_memory(mem, size, "edited.gguf", &ctx);
    if (st == DJ_OK) {
        st = vocab_load_gguf(ctx, out);
        gguf_close(ctx);
    }
    free(mem);
    return st;
}

static void expect_load(const char *rel, struct edit e, enum dj_status want, const char *in_msg) {
    struct dj_vocab *v = NULL;
    enum dj_status st = load_edited(rel, e, &v);
    CHECKF(st == want, "%s with %s edited: got %s (%s), want %s", rel, e.key, dj_status_str(st), dj_last_error(),
           dj_status_str(want));
    if (st != DJ_OK && in_msg) CHECKF(strstr(dj_last_error(), in_msg) != NULL, "message '%s' lacks '%s'",
                                      dj_last_error(), in_msg);
    dj_vocab_free(v);
}

static void test_errors(void) {
    const char *ds = "vocab/ggml-vocab-deepseek-coder.gguf", *spm = "vocab/ggml-vocab-llama-spm.gguf";
    const char *g2 = "vocab/ggml-vocab-gpt-2.gguf";
    struct dj_vocab *v = NULL;
    CHECK(dj_vocab_load_file(test_shared_path(shared, "vocab/no-such-file.gguf"), &v) != DJ_OK && v == NULL);
    CHECK(dj_last_error()[0] != '\0');
    CHECK(dj_vocab_load_file(NULL, &v) == DJ_ERR_INVALID);
    dj_vocab_free(NULL);

    expect_load(ds, (struct edit){SET_STR, "tokenizer.ggml.model", "bert", 0, 0}, DJ_ERR_UNSUPPORTED, "'bert'");
    expect_load(ds, (struct edit){SET_U32, "tokenizer.ggml.model", NULL, 3, 0}, DJ_ERR_FORMAT, "tokenizer.ggml.model");
    expect_load(ds, (struct edit){REMOVE, "tokenizer.ggml.model", NULL, 0, 0}, DJ_ERR_FORMAT, "tokenizer.ggml.model");
    expect_load(ds, (struct edit){SET_STR, "tokenizer.ggml.pre", "brand-new-pre", 0, 0}, DJ_ERR_UNSUPPORTED,
                "brand-new-pre");
    expect_load(ds, (struct edit){REMOVE, "tokenizer.ggml.pre", NULL, 0, 0}, DJ_OK, NULL); /* → "default" */
    expect_load(ds, (struct edit){SET_U32, "tokenizer.ggml.bos_token_id", NULL, 99999, 0}, DJ_ERR_FORMAT,
                "tokenizer.ggml.bos_token_id");
    expect_load(ds, (struct edit){SET_I32, "tokenizer.ggml.eos_token_id", NULL, (uint64_t)-7, 0}, DJ_ERR_FORMAT,
                "tokenizer.ggml.eos_token_id");
    expect_load(ds, (struct edit){SET_U64, "tokenizer.ggml.padding_token_id", NULL, UINT64_MAX, 0}, DJ_ERR_FORMAT,
                "tokenizer.ggml.padding_token_id");
    expect_load(ds, (struct edit){SET_STR, "tokenizer.ggml.unknown_token_id", "0", 0, 0}, DJ_ERR_FORMAT,
                "tokenizer.ggml.unknown_token_id");
    /* -1 written as u32 means "none" (stories260K has it) ... */
    expect_load(g2, (struct edit){SET_U32, "tokenizer.ggml.bos_token_id", NULL, 0xffffffffu, 0}, DJ_OK, NULL);
    /* ... but not when add_bos_token asks for a BOS */
    expect_load(ds, (struct edit){SET_U32, "tokenizer.ggml.bos_token_id", NULL, 0xffffffffu, 0}, DJ_ERR_FORMAT,
                "add_bos_token");
    expect_load(ds, (struct edit){SET_STR, "tokenizer.ggml.add_bos_token", "yes", 0, 0}, DJ_ERR_FORMAT,
                "tokenizer.ggml.add_bos_token");
    expect_load(ds, (struct edit){SET_I32S, "tokenizer.ggml.token_type", NULL, 0, 100}, DJ_ERR_FORMAT,
                "tokenizer.ggml.token_type");
    expect_load(spm, (struct edit){SET_F32S, "tokenizer.ggml.scores", NULL, 0, 31999}, DJ_ERR_FORMAT,
                "tokenizer.ggml.scores");
    expect_load(ds, (struct edit){REMOVE, "tokenizer.ggml.tokens", NULL, 0, 0}, DJ_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_load(ds, (struct edit){REMOVE, "tokenizer.ggml.merges", NULL, 0, 0}, DJ_ERR_FORMAT, "tokenizer.ggml.merges");
    expect_load(ds, (struct edit){SET_STR, "tokenizer.ggml.merges", "x", 0, 0}, DJ_ERR_FORMAT, "tokenizer.ggml.merges");
    /* a duplicate token text (entry 1 = entry 0 = "!") */
    expect_load(ds, (struct edit){SET_STRS, "tokenizer.ggml.tokens", "!", 0, 32256}, DJ_ERR_FORMAT, "duplicate token");
    /* merges that name a token that is not there: entry 1 ('"') replaced */
    expect_load(g2, (struct edit){SET_STRS, "tokenizer.ggml.tokens", "quote-gone", 0, 50257}, DJ_ERR_FORMAT,
                "is not a token");
    /* arrays of unequal length */
    expect_load(spm, (struct edit){SET_STRS, "tokenizer.ggml.tokens", NULL, 0, 31000}, DJ_ERR_FORMAT,
                "tokenizer.ggml.token_type");

    /* bad arguments */
    dj_token *ids;
    size_t n;
    CHECK(vocab_tokenize(NULL, "a", 1, false, false, &ids, &n) == DJ_ERR_INVALID);
    CHECK(detok_sanitize(NULL, 1, NULL, NULL) == DJ_ERR_INVALID);
    CHECK(detok_create(NULL, false) == NULL);
}

/* ---- the models' own vocabs ---------------------------------------------------------- */

static void test_models(struct dj_vocab *ds) {
    struct dj_vocab *st = load_vocab("models/stories260K.gguf");
    if (st) {
        CHECK(vocab_type(st) == DJ_VOCAB_SPM && vocab_n_tokens(st) == 512 && vocab_bos(st) == 1 && vocab_eos(st) == 2);
        CHECK(vocab_pad(st) == -1 && vocab_unk(st) == 0 && vocab_eot(st) == -1);
        static const char *const texts[] = {"Once upon a time, there was a little girl named Lily.",
                                            "\"Hello!\" said the cat. 123 \xe4\xb8\xad", ""};
        for (size_t i = 0; i < 3; i++) {
            size_t n;
            dj_token *ids = tok(st, texts[i], strlen(texts[i]), true, false, &n);
            CHECK(ids && n >= 1 && ids[0] == 1);
            char *s;
            size_t sl;
            CHECK(ids && vocab_detokenize(st, ids, n, false, &s, &sl) == DJ_OK);
            /* a BOS first keeps the prefix space (llama.cpp): " " + text */
            CHECKF(ids && (texts[i][0] == '\0' ? sl == 0 : (s[0] == ' ' && strcmp(s + 1, texts[i]) == 0)),
                   "stories260K round trip of '%s'", texts[i]);
            if (ids) free(s);
            if (ids && n > 1) CHECK(vocab_detokenize(st, ids + 1, n - 1, false, &s, &sl) == DJ_OK &&
                                    strcmp(s, texts[i]) == 0);
            if (ids && n > 1) free(s);
            free(ids);
        }
        dj_vocab_free(st);
    }
    struct dj_vocab *cl = load_vocab("models/codelm-15m-f16.gguf");
    if (cl && ds) {
        CHECK(vocab_n_tokens(cl) == 32256 && strcmp(vocab_pre_name(cl), "deepseek-coder") == 0);
        CHECK(vocab_bos(cl) == 32013 && vocab_eos(cl) == 32014 && vocab_add_bos(cl));
        static const char *const texts[] = {
            "def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)",
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"/etc/hosts\", \"lines\": [1, 20]}}",
            "<|im_start|>user\nFix the bug in main.c\n<|im_end|>\n<|im_start|>assistant\n",
            "    for (size_t i = 0; i < n; i++) {\n\t\tx[i] *= 2.5e-3f; // caf\xc3\xa9 \xe2\x80\x94 \xe4\xb8\xad\n    }\n",
        };
        for (size_t i = 0; i < 4; i++) {
            for (int sp = 0; sp < 2; sp++) {
                size_t na, nb;
                dj_token *a = tok(cl, texts[i], strlen(texts[i]), sp, sp, &na);
                dj_token *b = tok(ds, texts[i], strlen(texts[i]), sp, sp, &nb);
                CHECKF(a && b && same_ids(a, na, b, nb), "codelm and deepseek-coder differ on text %zu", i);
                char *s;
                size_t sl;
                CHECK(a && vocab_detokenize(cl, a, na, false, &s, &sl) == DJ_OK && strcmp(s, texts[i]) == 0);
                if (a) free(s);
                free(a);
                free(b);
            }
        }
    }
    dj_vocab_free(cl);
}

/* ---- fill-in-the-middle tokens ---------------------------------------------------------- */

static bool text_is(const struct dj_vocab *v, dj_token t, const char *want) {
    const char *got = vocab_token_text(v, t);
    return got && !strcmp(got, want);
}

/* vocab_fim_tokens: by text (DeepSeek's <｜fim▁begin｜>, StarCoder's <fim_prefix>), by the
 * GGUF ids first when they are set, none in a vocabulary without them. */
static void test_fim(struct dj_vocab *ds) {
    struct dj_fim_tokens f;
    if (ds) {
        CHECK(vocab_fim_tokens(ds, &f));
        CHECK(text_is(ds, f.pre, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>") &&
              text_is(ds, f.suf, "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>") &&
              text_is(ds, f.mid, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"));
        CHECK(f.pad == -1 && f.rep == -1 && f.sep == -1);
        /* a control token: one id with parse_special, plain text without */
        size_t n = 0;
        dj_token *ids = tok(ds, vocab_token_text(ds, f.pre), strlen(vocab_token_text(ds, f.pre)), false, true, &n);
        CHECK(ids && n == 1 && ids[0] == f.pre);
        free(ids);
        ids = tok(ds, vocab_token_text(ds, f.pre), strlen(vocab_token_text(ds, f.pre)), false, false, &n);
        CHECK(ids && n > 1);
        free(ids);
    }
    struct dj_vocab *sc = load_vocab("vocab/ggml-vocab-starcoder.gguf");
    if (sc) {
        CHECK(vocab_fim_tokens(sc, &f));
        CHECK(text_is(sc, f.pre, "<fim_prefix>") && text_is(sc, f.suf, "<fim_suffix>") && text_is(sc, f.mid, "<fim_middle>"));
        CHECK(text_is(sc, f.pad, "<fim_pad>") && vocab_is_eog(sc, f.pad)); /* pad ends generation, as llama.cpp */
        CHECK(!vocab_is_eog(sc, f.pre) && !vocab_is_eog(sc, f.mid));
        dj_vocab_free(sc);
    }
    struct dj_vocab *st = load_vocab("models/stories260K.gguf");
    if (st) {
        CHECK(!vocab_fim_tokens(st, &f) && f.pre == -1 && f.suf == -1 && f.mid == -1 && f.pad == -1 && f.sep == -1);
        dj_vocab_free(st);
    }
    /* a GGUF id wins over the texts; the older prefix/suffix/middle keys too */
    static const char *const keys[] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"};
    for (size_t k = 0; k < 2; k++) {
        struct dj_vocab *ed = NULL;
        CHECK(load_edited("vocab/ggml-vocab-deepseek-coder.gguf", (struct edit){SET_U32, keys[k], NULL, 100, 0}, &ed) ==
              DJ_OK);
        struct dj_fim_tokens d = {0};
        CHECKF(ed && ds && vocab_fim_tokens(ed, &f) && vocab_fim_tokens(ds, &d) && f.pre == 100 && d.pre != 100 &&
                   f.suf == d.suf && f.mid == d.mid,
               "%s = 100: pre %d", keys[k], ed ? f.pre : -2);
        dj_vocab_free(ed);
    }
    /* the sep key makes a file separator (an end-of-generation token) */
    struct dj_vocab *ed = NULL;
    CHECK(load_edited("vocab/ggml-vocab-deepseek-coder.gguf",
                      (struct edit){SET_U32, "tokenizer.ggml.fim_sep_token_id", NULL, 101, 0}, &ed) == DJ_OK);
    CHECK(ed && vocab_fim_tokens(ed, &f) && f.sep == 101 && vocab_is_eog(ed, 101) && ds && !vocab_is_eog(ds, 101));
    dj_vocab_free(ed);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    struct dj_vocab *spm = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    struct dj_vocab *ds = load_vocab("vocab/ggml-vocab-deepseek-coder.gguf");
    struct dj_vocab *phi3 = load_vocab("vocab/ggml-vocab-phi-3.gguf");
    struct dj_vocab *gpt2 = load_vocab("vocab/ggml-vocab-gpt-2.gguf");

    test_unicode_table();
    test_pretok_differential();
    test_merge_paths(spm, ds);
    test_special(spm, ds, phi3, gpt2);
    test_stream(spm, ds);
    test_invalid_utf8(spm, ds);
    test_errors();
    test_models(ds);
    test_fim(ds);

    dj_vocab_free(spm);
    dj_vocab_free(ds);
    dj_vocab_free(phi3);
    dj_vocab_free(gpt2);
    TEST_END();
}
