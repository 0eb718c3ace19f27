/*
 * vocab.c — builds a struct dj_vocab from a GGUF file's tokenizer.ggml.*
 * metadata, validates it, and answers the getters of tokenizer.h.
 *
 * Loading follows llama.cpp's llama_vocab::impl::load so that tokenization
 * matches it: the same default special ids per tokenizer kind, the same
 * add_bos defaults (SPM: yes; BPE: per pre type), the same auto-detection of
 * end-of-turn / FIM / end-of-generation tokens by their text (which also marks
 * them CONTROL, so they stop matching in text when parse_special is false),
 * the same special-token order for partitioning (longest text first) and the
 * phi-3 RSTRIP rule.  Where llama.cpp only warns about a malformed file, deja
 * refuses it with DJ_ERR_FORMAT and a message naming the key: a special id out
 * of range (except -1 / 0xFFFFFFFF, which converters write for "none"),
 * arrays whose lengths differ from tokenizer.ggml.tokens, duplicate tokens,
 * merges that are not "a b" with both parts tokens.
 *
 * The vocab owns copies of everything; the GGUF context may be closed after
 * vocab_load_gguf returns.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/hash.h"
#include "core/status.h"
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

/* ---- scratch helpers shared by the tokenizer files ----------------------- */

bool scratch_reserve(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (dj_mul_overflow(n, 2, &n)) return false;
    }
    size_t bytes;
    if (dj_mul_overflow(n, elem, &bytes)) return false;
    void *p = realloc(*buf, bytes);
    if (!p) return false;
    *buf = p;
    *cap = n;
    return true;
}

bool tok_out_push(struct tok_out *o, dj_token id) {
    if (o->n == o->cap && !scratch_reserve((void **)&o->ids, &o->cap, o->n + 1, sizeof *o->ids)) return false;
    o->ids[o->n++] = id;
    return true;
}

/* ---- text → id map ------------------------------------------------------- */

static inline uint64_t text_hash(const char *s, size_t len) { return dj_fnv1a(DJ_FNV_OFFSET, s, len); }

dj_token vocab_find(const struct dj_vocab *v, const char *s, size_t len) {
    const struct tok_map *m = &v->map;
    size_t i = (size_t)text_hash(s, len) & m->mask;
    for (;;) {
        uint32_t slot = m->slots[i];
        if (slot == 0) return -1;
        dj_token id = (dj_token)(slot - 1);
        size_t tl;
        const char *t = vocab_text_of(v, id, &tl);
        if (tl == len && memcmp(t, s, len) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

/* Inserts every token; a duplicate text is a format error (llama.cpp throws too). */
static enum dj_status build_map(struct dj_vocab *v, const char *file) {
    size_t cap = 16, need;
    if (dj_mul_overflow(v->n_tokens, 2, &need)) return dj_fail(DJ_ERR_NOMEM, "%s: vocabulary too large", file);
    while (cap < need) cap *= 2;
    v->map.slots = calloc(cap, sizeof *v->map.slots);
    if (!v->map.slots) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for the token map", file);
    v->map.mask = cap - 1;
    for (size_t id = 0; id < v->n_tokens; id++) {
        size_t len;
        const char *s = vocab_text_of(v, (dj_token)id, &len);
        size_t i = (size_t)text_hash(s, len) & v->map.mask;
        for (;;) {
            uint32_t slot = v->map.slots[i];
            if (slot == 0) {
                v->map.slots[i] = (uint32_t)id + 1;
                break;
            }
            size_t ol;
            const char *o = vocab_text_of(v, (dj_token)(slot - 1), &ol);
            if (ol == len && memcmp(o, s, len) == 0)
                return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.tokens: duplicate token '%.*s' (ids %u and %zu)", file,
                               (int)(len > 64 ? 64 : len), s, slot - 1, id);
            i = (i + 1) & v->map.mask;
        }
    }
    return DJ_OK;
}

/* ---- metadata helpers ---------------------------------------------------- */

static enum dj_status type_error(const struct gguf_ctx *ctx, const char *file, const char *key, const char *want) {
    int64_t i = gguf_find_key(ctx, key);
    const char *have = i >= 0 ? gguf_type_name(gguf_kv_type(ctx, (size_t)i)) : "nothing";
    return dj_fail(DJ_ERR_FORMAT, "%s: %s has type %s, expected %s", file, key, have, want);
}

/* An optional string key; *out untouched when absent. */
static enum dj_status get_opt_str(const struct gguf_ctx *ctx, const char *file, const char *key, struct gguf_str *out,
                                  bool *found) {
    *found = false;
    if (gguf_find_key(ctx, key) < 0) return DJ_OK;
    enum dj_status st = gguf_get_str(ctx, key, out);
    if (st != DJ_OK) return type_error(ctx, file, key, "string");
    *found = true;
    return DJ_OK;
}

static enum dj_status get_opt_bool(const struct gguf_ctx *ctx, const char *file, const char *key, bool *out) {
    if (gguf_find_key(ctx, key) < 0) return DJ_OK;
    bool b;
    if (gguf_get_bool(ctx, key, &b) != DJ_OK) return type_error(ctx, file, key, "bool");
    *out = b;
    return DJ_OK;
}

/* A special token id: absent → keep *id; -1 or 0xFFFFFFFF → none; else must be < n. */
static enum dj_status get_opt_id(const struct gguf_ctx *ctx, const char *file, const char *key, size_t n,
                                 dj_token *id) {
    if (gguf_find_key(ctx, key) < 0) return DJ_OK;
    int64_t v;
    enum dj_status st = gguf_get_i64(ctx, key, &v);
    if (st != DJ_OK) {
        uint64_t u;
        if (gguf_get_u64(ctx, key, &u) == DJ_OK)
            return dj_fail(DJ_ERR_FORMAT, "%s: %s = %llu is out of range (the vocab has %zu tokens)", file, key,
                           (unsigned long long)u, n);
        return type_error(ctx, file, key, "an integer");
    }
    if (v == -1 || v == (int64_t)UINT32_MAX) {
        *id = -1;
        return DJ_OK;
    }
    if (v < 0 || (uint64_t)v >= n)
        return dj_fail(DJ_ERR_FORMAT, "%s: %s = %lld is out of range (the vocab has %zu tokens)", file, key,
                       (long long)v, n);
    *id = (dj_token)v;
    return DJ_OK;
}

static char *dup_str(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* ---- loading ------------------------------------------------------------- */

static enum dj_status load_tokens(struct dj_vocab *v, const struct gguf_ctx *ctx, const char *file) {
    struct gguf_arr toks;
    if (gguf_find_key(ctx, "tokenizer.ggml.tokens") < 0)
        return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing", file);
    if (gguf_get_arr(ctx, "tokenizer.ggml.tokens", &toks) != DJ_OK || toks.type != GGUF_TYPE_STRING)
        return type_error(ctx, file, "tokenizer.ggml.tokens", "array of strings");
    if (toks.n == 0) return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.tokens is empty", file);
    if (toks.n > (size_t)INT32_MAX - 1)
        return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %zu entries, more than a token id holds", file,
                       toks.n);
    size_t n = toks.n;
    v->n_tokens = n;

    /* blob size: each text + NUL; empty texts become "[EMPTY_<id>]" as in llama.cpp */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = toks.strs[i].len ? toks.strs[i].len : 32;
        if (dj_add_overflow(total, len + 1, &total)) return dj_fail(DJ_ERR_FORMAT, "%s: token texts too large", file);
    }
    size_t off_bytes;
    if (dj_mul_overflow(n + 1, sizeof(size_t), &off_bytes)) return dj_fail(DJ_ERR_NOMEM, "%s: vocab too large", file);
    v->text = malloc(total);
    v->text_off = malloc(off_bytes);
    v->scores = calloc(n, sizeof *v->scores);
    v->file_type = malloc(n);
    v->attr = malloc(n * sizeof *v->attr);
    if (!v->text || !v->text_off || !v->scores || !v->file_type || !v->attr)
        return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for %zu tokens", file, n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        v->text_off[i] = o;
        const struct gguf_str *s = &toks.strs[i];
        size_t len;
        if (s->len == 0) {
            len = (size_t)snprintf(v->text + o, 32, "[EMPTY_%zu]", i);
        } else {
            len = s->len;
            memcpy(v->text + o, s->ptr, len);
            v->text[o + len] = '\0';
        }
        o += len + 1;
        if (len > v->max_token_len) v->max_token_len = len;
    }
    v->text_off[n] = o;

    /* token types (any integer array); absent → all NORMAL */
    if (gguf_find_key(ctx, "tokenizer.ggml.token_type") >= 0) {
        struct gguf_arr tt;
        if (gguf_get_arr(ctx, "tokenizer.ggml.token_type", &tt) != DJ_OK || tt.type == GGUF_TYPE_STRING ||
            tt.type == GGUF_TYPE_ARRAY || tt.type == GGUF_TYPE_FLOAT32 || tt.type == GGUF_TYPE_FLOAT64)
            return type_error(ctx, file, "tokenizer.ggml.token_type", "array of integers");
        if (tt.n != n)
            return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %zu entries, tokenizer.ggml.tokens %zu",
                           file, tt.n, n);
        for (size_t i = 0; i < n; i++) {
            int64_t t = gguf_arr_i64(&tt, i);
            v->file_type[i] = (t >= DJ_TOKEN_UNDEFINED && t <= DJ_TOKEN_BYTE) ? (uint8_t)t : DJ_TOKEN_UNDEFINED;
        }
    } else {
        memset(v->file_type, DJ_TOKEN_NORMAL, n);
    }
    for (size_t i = 0; i < n; i++) {
        static const uint16_t attr_of_type[] = {
            [DJ_TOKEN_UNDEFINED] = TOK_ATTR_UNDEFINED, [DJ_TOKEN_NORMAL] = TOK_ATTR_NORMAL,
            [DJ_TOKEN_UNKNOWN] = TOK_ATTR_UNKNOWN,     [DJ_TOKEN_CONTROL] = TOK_ATTR_CONTROL,
            [DJ_TOKEN_USER_DEFINED] = TOK_ATTR_USER_DEFINED, [DJ_TOKEN_UNUSED] = TOK_ATTR_UNUSED,
            [DJ_TOKEN_BYTE] = TOK_ATTR_BYTE,
        };
        v->attr[i] = attr_of_type[v->file_type[i]];
    }

    /* scores (float32 or int32 in llama.cpp; any number here); absent → 0 */
    if (gguf_find_key(ctx, "tokenizer.ggml.scores") >= 0) {
        struct gguf_arr sc;
        if (gguf_get_arr(ctx, "tokenizer.ggml.scores", &sc) != DJ_OK || sc.type == GGUF_TYPE_STRING ||
            sc.type == GGUF_TYPE_ARRAY || sc.type == GGUF_TYPE_BOOL)
            return type_error(ctx, file, "tokenizer.ggml.scores", "array of numbers");
        if (sc.n != n)
            return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.scores has %zu entries, tokenizer.ggml.tokens %zu", file,
                           sc.n, n);
        for (size_t i = 0; i < n; i++) v->scores[i] = (float)gguf_arr_f64(&sc, i);
    }
    return build_map(v, file);
}

static enum dj_status load_merges(struct dj_vocab *v, const struct gguf_ctx *ctx, const char *file) {
    const char *key = "tokenizer.ggml.merges";
    if (gguf_find_key(ctx, key) < 0) return dj_fail(DJ_ERR_FORMAT, "%s: %s is missing (a gpt2 vocab needs it)", file, key);
    struct gguf_arr arr;
    if (gguf_get_arr(ctx, key, &arr) != DJ_OK || arr.type != GGUF_TYPE_STRING)
        return type_error(ctx, file, key, "array of strings");
    if (arr.n > (size_t)INT32_MAX) return dj_fail(DJ_ERR_FORMAT, "%s: %s has too many entries (%zu)", file, key, arr.n);
    size_t cap = 16, need;
    if (dj_mul_overflow(arr.n, 2, &need)) return dj_fail(DJ_ERR_NOMEM, "%s: too many merges", file);
    while (cap < need) cap *= 2;
    struct merge_map *m = &v->merges;
    m->keys = malloc(cap * sizeof *m->keys);
    m->rank = malloc(cap * sizeof *m->rank);
    m->result = malloc(cap * sizeof *m->result);
    char *buf = malloc(2 * v->max_token_len + 2);
    if (!m->keys || !m->rank || !m->result || !buf) {
        free(buf);
        return dj_fail(DJ_ERR_NOMEM, "%s: out of memory for %zu merges", file, arr.n);
    }
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    m->mask = cap - 1;
    enum dj_status st = DJ_OK;
    for (size_t r = 0; r < arr.n; r++) {
        const char *s = arr.strs[r].ptr;
        size_t len = arr.strs[r].len;
        /* split at the first space after the first byte, as llama.cpp does */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            st = dj_fail(DJ_ERR_FORMAT, "%s: %s[%zu] = '%.*s' is not two tokens separated by a space", file, key, r,
                         (int)(len > 64 ? 64 : len), s);
            break;
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        dj_token a = vocab_find(v, s, ll), b = vocab_find(v, sp + 1, rl);
        if (a < 0 || b < 0) {
            st = dj_fail(DJ_ERR_FORMAT, "%s: %s[%zu] = '%.*s': '%.*s' is not a token", file, key, r,
                         (int)(len > 64 ? 64 : len), s, a < 0 ? (int)ll : (int)rl, a < 0 ? s : sp + 1);
            break;
        }
        /* the merged text is a token in every sane vocab; if not, merging still
         * happens (as in llama.cpp) and the result falls back to bytes */
        dj_token res = -1;
        if (ll + rl <= 2 * v->max_token_len) {
            memcpy(buf, s, ll);
            memcpy(buf + ll, sp + 1, rl);
            res = vocab_find(v, buf, ll + rl);
        }
        uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t i = (size_t)merge_hash(k) & m->mask;
        while (m->keys[i] != MERGE_EMPTY && m->keys[i] != k) i = (i + 1) & m->mask;
        if (m->keys[i] == MERGE_EMPTY) { /* a repeated pair keeps its first (best) rank */
            m->keys[i] = k;
            m->rank[i] = (int32_t)r;
            m->result[i] = res;
            v->n_merges++;
        }
    }
    free(buf);
    return st;
}

static void build_byte_tokens(struct dj_vocab *v) {
    for (int b = 0; b < 256; b++) {
        dj_token id = -1;
        if (v->type == DJ_VOCAB_SPM) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            id = vocab_find(v, hex, 6);
            if (id < 0) {
                char c = (char)b;
                id = vocab_find(v, &c, 1);
            }
        } else {
            char u[4];
            size_t n = utf8_encode(gpt2_byte_to_cp((uint8_t)b), u);
            id = vocab_find(v, u, n);
        }
        v->byte_tok[b] = id;
    }
}

/* True if every ▁ inside every token follows another ▁ (see spm.c). */
static bool spm_can_split(const struct dj_vocab *v) {
    for (size_t i = 0; i < v->n_tokens; i++) {
        size_t len;
        const char *t = vocab_text_of(v, (dj_token)i, &len);
        for (size_t k = 1; k + 3 <= len; k++) {
            if (memcmp(t + k, "\xe2\x96\x81", 3) == 0 && (k < 3 || memcmp(t + k - 3, "\xe2\x96\x81", 3) != 0))
                return false;
        }
    }
    return true;
}

static dj_token find_cstr(const struct dj_vocab *v, const char *s) { return vocab_find(v, s, strlen(s)); }

/* If *id is unset, the first of `names` present in the vocab (llama.cpp scans
 * its hash map, in no defined order; deja takes the list's order).  The token
 * found is marked CONTROL, as llama.cpp does. */
static void detect_special(struct dj_vocab *v, dj_token *id, const char *const *names) {
    if (*id >= 0) return;
    for (; *names; names++) {
        dj_token t = find_cstr(v, *names);
        if (t >= 0) {
            *id = t;
            v->attr[t] |= TOK_ATTR_CONTROL;
            return;
        }
    }
}

static void mark_eog(struct dj_vocab *v, dj_token id) {
    if (id >= 0) v->attr[id] |= TOK_ATTR_EOG;
}

/* End-of-generation set and the special-token auto-detection of llama.cpp. */
static void detect_specials(struct dj_vocab *v) {
    static const char *const eot[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                      "<|end_of_text|>", "<EOT>",      "_<EOT>",  "[EOT]",
                                      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                      "<end_of_utterance>", NULL};
    static const char *const eom[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                          "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                          "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
                                          "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

    detect_special(v, &v->eot, eot);
    detect_special(v, &v->eom, eom);
    detect_special(v, &v->fim_pre, fim_pre);
    detect_special(v, &v->fim_suf, fim_suf);
    detect_special(v, &v->fim_mid, fim_mid);
    detect_special(v, &v->fim_pad, fim_pad);
    detect_special(v, &v->fim_rep, fim_rep);
    detect_special(v, &v->fim_sep, fim_sep);

    mark_eog(v, v->fim_pad);
    mark_eog(v, v->fim_rep);
    mark_eog(v, v->fim_sep);
    for (const char *const *s = eog; *s; s++) {
        dj_token t = find_cstr(v, *s);
        if (t >= 0) {
            v->attr[t] |= TOK_ATTR_EOG | TOK_ATTR_CONTROL;
        }
    }
    /* gpt-oss: always rendered */
    static const char *const user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *s = user; *s; s++) {
        dj_token t = find_cstr(v, *s);
        if (t >= 0) v->attr[t] = (uint16_t)((v->attr[t] & TOK_ATTR_EOG) | TOK_ATTR_USER_DEFINED);
    }
    mark_eog(v, v->eos);
    mark_eog(v, v->eot);
    mark_eog(v, v->eom);

    /* o200k_harmony / solar-open: <|end|> is not end-of-generation there */
    dj_token ret = find_cstr(v, "<|return|>"), call = find_cstr(v, "<|call|>"), calls = find_cstr(v, "<|calls|>"),
             flush = find_cstr(v, "<|flush|>"), end = find_cstr(v, "<|end|>");
    bool has_call = (call >= 0 && (v->attr[call] & TOK_ATTR_EOG)) || (calls >= 0 && (v->attr[calls] & TOK_ATTR_EOG));
    bool has_ret = ret >= 0 && (v->attr[ret] & TOK_ATTR_EOG);
    bool has_flush = flush >= 0 && (v->attr[flush] & TOK_ATTR_EOG);
    if (end >= 0 && (v->attr[end] & TOK_ATTR_EOG) && has_call && (has_ret || has_flush))
        v->attr[end] = TOK_ATTR_USER_DEFINED;
    /* gemma4 / paddleocr: </s> is not end-of-generation next to <|tool_response> */
    dj_token tr = find_cstr(v, "<|tool_response>"), es = find_cstr(v, "</s>");
    if (tr >= 0 && es >= 0 && (v->attr[tr] & TOK_ATTR_EOG) && (v->attr[es] & TOK_ATTR_EOG))
        v->attr[es] = TOK_ATTR_NORMAL;
}

/* Partition order: longer text first, then lower id. */
static bool special_before(const struct dj_vocab *v, dj_token x, dj_token y) {
    size_t lx = v->text_off[x + 1] - v->text_off[x], ly = v->text_off[y + 1] - v->text_off[y];
    return lx != ly ? lx > ly : x < y;
}

static enum dj_status build_special_cache(struct dj_vocab *v, const char *file) {
    size_t n = 0;
    for (size_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) n++;
    v->special = malloc((n ? n : 1) * sizeof *v->special);
    if (!v->special) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory", file);
    n = 0;
    for (size_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) v->special[n++] = (dj_token)i;
    v->n_special = n;
    /* insertion sort: the lists are short (tens to a few thousand) */
    for (size_t i = 1; i < n; i++) {
        dj_token t = v->special[i];
        size_t j = i;
        while (j > 0 && special_before(v, t, v->special[j - 1])) {
            v->special[j] = v->special[j - 1];
            j--;
        }
        v->special[j] = t;
    }
    return DJ_OK;
}

/* llama.cpp's per-model attribute fixes that change tokenization. */
static void apply_model_quirks(struct dj_vocab *v) {
    char lname[256];
    size_t n = strlen(v->name);
    if (n >= sizeof lname) n = sizeof lname - 1;
    for (size_t i = 0; i < n; i++) lname[i] = (char)tolower((unsigned char)v->name[i]);
    lname[n] = '\0';
    if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") || strstr(v->pre_name, "jina-v2-code")) {
        dj_token t = find_cstr(v, "<mask>");
        if (t >= 0) v->attr[t] |= TOK_ATTR_LSTRIP;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (size_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= TOK_ATTR_RSTRIP;
        dj_token t = find_cstr(v, "</s>");
        if (t >= 0) v->attr[t] |= TOK_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < 3; i++) {
            t = find_cstr(v, keep[i]);
            if (t >= 0) v->attr[t] &= (uint16_t)~TOK_ATTR_RSTRIP;
        }
    } else if (strstr(lname, "modern-bert")) {
        dj_token t = find_cstr(v, "[MASK]");
        if (t >= 0) v->attr[t] |= TOK_ATTR_LSTRIP;
    }
}

static enum dj_status load(struct dj_vocab *v, const struct gguf_ctx *ctx) {
    const char *file = gguf_name(ctx);
    if (!file) file = "(gguf)";
    enum dj_status st;

    struct gguf_str model;
    bool found;
    if ((st = get_opt_str(ctx, file, "tokenizer.ggml.model", &model, &found)) != DJ_OK) return st;
    if (!found) return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.model is missing", file);
    if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) v->type = DJ_VOCAB_SPM;
    else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) v->type = DJ_VOCAB_BPE;
    else
        return dj_fail(DJ_ERR_UNSUPPORTED, "%s: tokenizer model '%.*s' (tokenizer.ggml.model) is not supported; deja "
                       "has 'llama' (SentencePiece) and 'gpt2' (byte-level BPE)", file,
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);

    struct gguf_str s;
    if ((st = get_opt_str(ctx, file, "tokenizer.ggml.pre", &s, &found)) != DJ_OK) return st;
    v->pre_name = found ? dup_str(s.ptr, s.len) : dup_str("default", 7);
    if ((st = get_opt_str(ctx, file, "general.name", &s, &found)) != DJ_OK) return st;
    v->name = found ? dup_str(s.ptr, s.len) : dup_str("", 0);
    if (!v->pre_name || !v->name) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory", file);

    if ((st = load_tokens(v, ctx, file)) != DJ_OK) return st;
    size_t n = v->n_tokens;

    struct pretok_opts opts = {0};
    if (v->type == DJ_VOCAB_BPE) {
        if ((st = pretok_create(v->pre_name, &v->pretok, &opts)) != DJ_OK) {
            dj_error_prefix("%s", file);
            return st;
        }
        if ((st = load_merges(v, ctx, file)) != DJ_OK) return st;
    }
    build_byte_tokens(v);
    if (v->type == DJ_VOCAB_SPM) v->spm_split_ok = spm_can_split(v);

    /* defaults as llama.cpp; a default past the vocab is "none" */
    dj_token none = -1;
    v->eot = v->eom = v->pad = v->sep = v->mask = none;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = none;
    if (v->type == DJ_VOCAB_SPM) {
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else {
        v->bos = opts.bos_none ? none : 11;
        v->eos = 11;
        v->unk = none;
        v->add_bos = opts.add_bos;
        v->add_space_prefix = false;
        v->ignore_merges = opts.ignore_merges;
    }
    v->add_eos = false;
    dj_token *defaults[] = {&v->bos, &v->eos, &v->unk};
    for (size_t i = 0; i < 3; i++)
        if (*defaults[i] >= 0 && (size_t)*defaults[i] >= n) *defaults[i] = none;

    if ((st = get_opt_bool(ctx, file, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix)) != DJ_OK) return st;

    const struct {
        const char *key;
        dj_token *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},          {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},          {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},      {"tokenizer.ggml.seperator_token_id", &v->sep},
        {"tokenizer.ggml.padding_token_id", &v->pad},      {"tokenizer.ggml.mask_token_id", &v->mask},
        {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre},  {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid},  {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep},  {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep},
        {"tokenizer.ggml.prefix_token_id", &v->fim_pre},   {"tokenizer.ggml.suffix_token_id", &v->fim_suf},
        {"tokenizer.ggml.middle_token_id", &v->fim_mid},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if ((st = get_opt_id(ctx, file, ids[i].key, n, ids[i].id)) != DJ_OK) return st;

    if ((st = get_opt_bool(ctx, file, "tokenizer.ggml.add_bos_token", &v->add_bos)) != DJ_OK) return st;
    if ((st = get_opt_bool(ctx, file, "tokenizer.ggml.add_eos_token", &v->add_eos)) != DJ_OK) return st;
    if (v->add_bos && v->bos < 0)
        return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is "
                       "not set", file);
    if (v->add_eos && v->eos < 0)
        return dj_fail(DJ_ERR_FORMAT, "%s: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is "
                       "not set", file);

    detect_specials(v);
    if ((st = build_special_cache(v, file)) != DJ_OK) return st;
    apply_model_quirks(v);
    if ((st = special_index_build(v)) != DJ_OK) return st;
    return vocab_build_pieces(v);
}

enum dj_status vocab_load_gguf(const struct gguf_ctx *ctx, struct dj_vocab **out) {
    if (!ctx || !out) return dj_fail(DJ_ERR_INVALID, "vocab_load_gguf: NULL argument");
    struct dj_vocab *v = calloc(1, sizeof *v);
    if (!v) return dj_fail(DJ_ERR_NOMEM, "out of memory loading a vocabulary");
    enum dj_status st = load(v, ctx);
    if (st != DJ_OK) {
        dj_vocab_free(v);
        return st;
    }
    *out = v;
    return DJ_OK;
}

void dj_vocab_free(struct dj_vocab *v) {
    if (!v) return;
    pretok_destroy(v->pretok);
    free(v->pre_name);
    free(v->name);
    free(v->text);
    free(v->text_off);
    free(v->scores);
    free(v->file_type);
    free(v->attr);
    free(v->piece);
    free(v->piece_off);
    free(v->map.slots);
    free(v->merges.keys);
    free(v->merges.rank);
    free(v->merges.result);
    free(v->special);
    special_index_free(v->special_index);
    free(v);
}

enum dj_status dj_vocab_load_file(const char *path, struct dj_vocab **out) {
    if (!path || !out) return dj_fail(DJ_ERR_INVALID, "dj_vocab_load_file: NULL argument");
    struct gguf_ctx *ctx = NULL;
    enum dj_status st = gguf_open(path, &ctx);
    if (st != DJ_OK) return st;
    st = vocab_load_gguf(ctx, out);
    gguf_close(ctx);
    return st;
}

/* ---- getters -------------------------------------------------------------- */

enum dj_vocab_type vocab_type(const struct dj_vocab *v) { return v->type; }
const char *vocab_type_name(const struct dj_vocab *v) { return v->type == DJ_VOCAB_SPM ? "spm" : "bpe"; }
const char *vocab_pre_name(const struct dj_vocab *v) { return v->pre_name; }
size_t vocab_n_tokens(const struct dj_vocab *v) { return v->n_tokens; }
dj_token vocab_bos(const struct dj_vocab *v) { return v->bos; }
dj_token vocab_eos(const struct dj_vocab *v) { return v->eos; }
dj_token vocab_eot(const struct dj_vocab *v) { return v->eot; }
dj_token vocab_unk(const struct dj_vocab *v) { return v->unk; }
dj_token vocab_pad(const struct dj_vocab *v) { return v->pad; }
bool vocab_add_bos(const struct dj_vocab *v) { return v->add_bos; }
bool vocab_add_eos(const struct dj_vocab *v) { return v->add_eos; }
bool vocab_add_space_prefix(const struct dj_vocab *v) { return v->add_space_prefix; }

const char *vocab_token_text(const struct dj_vocab *v, dj_token tok) {
    if (tok < 0 || (size_t)tok >= v->n_tokens) return NULL;
    return v->text + v->text_off[tok];
}

enum dj_token_type vocab_token_type(const struct dj_vocab *v, dj_token tok) {
    if (tok < 0 || (size_t)tok >= v->n_tokens) return DJ_TOKEN_UNDEFINED;
    uint16_t a = v->attr[tok];
    /* what the tokenizer acts on: a token llama.cpp promoted to CONTROL reads as CONTROL */
    if (a & TOK_ATTR_CONTROL) return DJ_TOKEN_CONTROL;
    if (a & TOK_ATTR_USER_DEFINED) return DJ_TOKEN_USER_DEFINED;
    if (a == TOK_ATTR_NORMAL && v->file_type[tok] != DJ_TOKEN_NORMAL) return DJ_TOKEN_NORMAL;
    return (enum dj_token_type)v->file_type[tok];
}

bool vocab_is_eog(const struct dj_vocab *v, dj_token tok) {
    if (tok < 0 || (size_t)tok >= v->n_tokens) return false;
    return (v->attr[tok] & TOK_ATTR_EOG) != 0;
}

bool vocab_fim_tokens(const struct dj_vocab *v, struct dj_fim_tokens *out) {
    out->pre = v->fim_pre;
    out->suf = v->fim_suf;
    out->mid = v->fim_mid;
    out->pad = v->fim_pad;
    out->rep = v->fim_rep;
    out->sep = v->fim_sep;
    return out->pre >= 0 && out->suf >= 0 && out->mid >= 0;
}
