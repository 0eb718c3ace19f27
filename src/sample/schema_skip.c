/*
 * schema_skip.c — a grammar as the engine's logits processor (schema_skip.h).
 */
#include "sample/schema_skip.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

enum { GPROC_FORCED_BYTES_MAX = 1024 };

/* What the model wrote for a forced string before: the forced string's first
 * MEMO_BYTES bytes -> the tokens emitted while the output stayed inside it.
 * Canonical tokenizations lose to what a model was trained on (codelm writes
 * `":` + `"`, the tokenizer `":"`), and models repeat themselves. */
enum { MEMO_SLOTS = 512, MEMO_BYTES = 64, MEMO_TOK = 16 };

struct memo_slot {
    uint64_t h;
    uint16_t n_bytes;
    uint8_t n_tok;
    char bytes[MEMO_BYTES];
    dj_token tok[MEMO_TOK];
};

struct dj_gdraft_memo {
    struct memo_slot slot[MEMO_SLOTS];
};

struct dj_gdraft_memo *gdraft_memo_create(void) { return calloc(1, sizeof(struct dj_gdraft_memo)); }

void gdraft_memo_free(struct dj_gdraft_memo *memo) { free(memo); }

struct dj_gproc {
    const struct dj_grammar *g;
    struct dj_gtok *gtok;
    const struct dj_vocab *vocab;
    size_t n_vocab, n_words;
    size_t max_draft;
    struct dj_gmatch *m;  /* NULL while lazy and not triggered */
    uint64_t *mask;       /* n_words; valid when mask_ok */
    size_t n_allowed;
    bool mask_ok;
    char *trigger;        /* NULL: not lazy */
    size_t n_trigger;
    char *tail;           /* lazy: the last bytes of the output (a trigger may span tokens) */
    size_t n_tail, cap_tail;
    struct dj_gdraft_memo *memo;
    bool own_memo;
    /* learning: the forced string of the last draft and the tokens emitted inside it so far */
    bool learning;
    char learn_key[MEMO_BYTES];
    size_t learn_n, learn_used;
    dj_token learn_tok[MEMO_TOK];
    size_t learn_nt;
    /* draft length: doubled while whole drafts are confirmed, cut to what was confirmed
     * (+1) when one is rejected — rejected drafts cost forward-pass rows */
    size_t draft_cap;
    dj_token drafted[MEMO_TOK];
    size_t n_drafted, n_confirmed;
};

static void draft_check(struct dj_gproc *gp, dj_token tok) {
    if (gp->n_confirmed >= gp->n_drafted) return;
    if (tok == gp->drafted[gp->n_confirmed] && ++gp->n_confirmed < gp->n_drafted) return;
    if (gp->n_confirmed == gp->n_drafted) {
        gp->draft_cap = gp->draft_cap * 2 < gp->max_draft ? gp->draft_cap * 2 : gp->max_draft;
    } else {
        gp->draft_cap = gp->n_confirmed + 1 > 2 ? gp->n_confirmed + 1 : 2;
        gp->n_drafted = gp->n_confirmed; /* done */
    }
}

static struct memo_slot *memo_find(struct dj_gdraft_memo *memo, const char *key, size_t n, uint64_t *h_out) {
    const uint64_t h = dj_fnv1a(DJ_FNV_OFFSET, key, n);
    struct memo_slot *sl = &memo->slot[h % MEMO_SLOTS];
    *h_out = h;
    return sl->n_tok && sl->h == h && sl->n_bytes == n && !memcmp(sl->bytes, key, n) ? sl : NULL;
}

static void learn_finish(struct dj_gproc *gp) {
    if (gp->learning && gp->learn_nt > 0) {
        uint64_t h;
        memo_find(gp->memo, gp->learn_key, gp->learn_n, &h);
        struct memo_slot *sl = &gp->memo->slot[h % MEMO_SLOTS];
        sl->h = h;
        sl->n_bytes = (uint16_t)gp->learn_n;
        sl->n_tok = (uint8_t)gp->learn_nt;
        memcpy(sl->bytes, gp->learn_key, gp->learn_n);
        memcpy(sl->tok, gp->learn_tok, gp->learn_nt * sizeof *sl->tok);
    }
    gp->learning = false;
}

/* A token emitted after a draft: still inside the forced string? */
static void learn_push(struct dj_gproc *gp, dj_token tok) {
    if (!gp->learning) return;
    char piece[MEMO_BYTES];
    const size_t n = vocab_token_to_piece(gp->vocab, tok, false, piece, sizeof piece);
    if (n == 0 || gp->learn_nt == MEMO_TOK || gp->learn_used + n > gp->learn_n ||
        memcmp(gp->learn_key + gp->learn_used, piece, n) != 0) {
        learn_finish(gp);
        return;
    }
    gp->learn_tok[gp->learn_nt++] = tok;
    gp->learn_used += n;
    if (gp->learn_used == gp->learn_n) learn_finish(gp);
}

static enum dj_status refresh_mask(struct dj_gproc *gp) {
    if (gp->mask_ok) return DJ_OK;
    gp->n_allowed = gtok_mask(gp->gtok, gp->m, gp->mask);
    gp->mask_ok = true;
    return DJ_OK;
}

static enum dj_status gp_apply(void *ud, float *logits, size_t n_vocab) {
    struct dj_gproc *gp = ud;
    if (!gp->m) return DJ_OK;
    if (n_vocab != gp->n_vocab)
        return dj_fail(DJ_ERR_INVALID, "grammar: logits of %zu entries for a vocabulary of %zu", n_vocab, gp->n_vocab);
    refresh_mask(gp);
    if (gp->n_allowed == 0)
        return dj_fail(DJ_ERR_INVALID, "grammar: no token can continue the output (the grammar allows no "
                                       "continuation the vocabulary can spell, and cannot end here)");
    grammar_mask_apply(gp->mask, logits, n_vocab);
    return DJ_OK;
}

void grammar_mask_apply(const uint64_t *mask, float *logits, size_t n) {
    const size_t full = n / 64;
    for (size_t w = 0; w < full; w++) {
        const uint64_t bits = mask[w];
        float *l = logits + w * 64;
        if (bits == ~(uint64_t)0) continue;
        if (bits == 0) {
            for (size_t k = 0; k < 64; k++) l[k] = -INFINITY;
            continue;
        }
        for (uint64_t z = ~bits; z; z &= z - 1) l[__builtin_ctzll(z)] = -INFINITY;
    }
    for (size_t t = full * 64; t < n; t++)
        if (!(mask[t / 64] >> (t % 64) & 1)) logits[t] = -INFINITY;
}

/* Activates the grammar once the output contains the trigger: the grammar
 * then reads the bytes that follow the trigger. */
static enum dj_status lazy_push(struct dj_gproc *gp, dj_token tok) {
    char piece[256];
    size_t n = vocab_token_to_piece(gp->vocab, tok, false, piece, sizeof piece);
    char *big = NULL;
    const char *src = piece;
    if (n > sizeof piece) {
        if (!(big = malloc(n))) return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        vocab_token_to_piece(gp->vocab, tok, false, big, n);
        src = big;
    }
    if (gp->n_tail + n > gp->cap_tail) {
        size_t cap = (gp->n_tail + n) * 2;
        char *nt = realloc(gp->tail, cap);
        if (!nt) {
            free(big);
            return dj_fail(DJ_ERR_NOMEM, "grammar: out of memory");
        }
        gp->tail = nt;
        gp->cap_tail = cap;
    }
    memcpy(gp->tail + gp->n_tail, src, n);
    gp->n_tail += n;
    free(big);
    const char *hit = NULL;
    for (size_t i = 0; i + gp->n_trigger <= gp->n_tail; i++)
        if (!memcmp(gp->tail + i, gp->trigger, gp->n_trigger)) {
            hit = gp->tail + i;
            break;
        }
    if (!hit) {
        /* keep only what could still be the start of a trigger */
        const size_t keep = gp->n_trigger - 1;
        if (gp->n_tail > keep) {
            memmove(gp->tail, gp->tail + gp->n_tail - keep, keep);
            gp->n_tail = keep;
        }
        return DJ_OK;
    }
    enum dj_status st = gmatch_create(gp->g, &gp->m);
    if (st) return st;
    const char *rest = hit + gp->n_trigger;
    const size_t n_rest = (size_t)(gp->tail + gp->n_tail - rest);
    if (!gmatch_accept_bytes(gp->m, rest, n_rest))
        return dj_fail(DJ_ERR_INVALID, "grammar: the text after the trigger '%s' does not match the grammar",
                       gp->trigger);
    gp->mask_ok = false;
    return DJ_OK;
}

static enum dj_status gp_accept(void *ud, dj_token tok) {
    struct dj_gproc *gp = ud;
    if (!gp->m) return gp->trigger ? lazy_push(gp, tok) : DJ_OK;
    if (tok < 0 || (size_t)tok >= gp->n_vocab) return dj_fail(DJ_ERR_INVALID, "grammar: token %d outside the vocabulary", tok);
    if (gp->mask_ok && !(gp->mask[(size_t)tok / 64] >> ((size_t)tok % 64) & 1))
        return dj_fail(DJ_ERR_INVALID, "grammar: token %d is not allowed here", tok);
    if (!gtok_accept(gp->gtok, gp->m, tok)) return dj_fail(DJ_ERR_INVALID, "grammar: token %d is not allowed here", tok);
    gp->mask_ok = false;
    learn_push(gp, tok);
    draft_check(gp, tok);
    return DJ_OK;
}

static size_t gp_forced(void *ud, dj_token *buf, size_t cap) {
    struct dj_gproc *gp = ud;
    if (!gp->m || cap == 0) return 0;
    refresh_mask(gp);
    if (gp->n_allowed != 1) return 0;
    for (size_t w = 0; w < gp->n_words; w++)
        if (gp->mask[w]) {
            buf[0] = (dj_token)(w * 64 + (size_t)__builtin_ctzll(gp->mask[w]));
            return 1;
        }
    return 0;
}

static size_t gp_draft(void *ud, dj_token *buf, size_t cap) {
    struct dj_gproc *gp = ud;
    if (!gp->m || cap == 0) return 0;
    char bytes[GPROC_FORCED_BYTES_MAX];
    const size_t nb = gmatch_forced_bytes(gp->m, bytes, sizeof bytes);
    learn_finish(gp);
    if (nb == 0) return 0;
    if (cap > gp->draft_cap) cap = gp->draft_cap;
    if (cap > MEMO_TOK) cap = MEMO_TOK;
    /* learn what the model writes for this forced string; draft what it wrote last time,
     * else the tokenizer's canonical tokens */
    const size_t nk = nb < MEMO_BYTES ? nb : MEMO_BYTES;
    gp->learning = true;
    memcpy(gp->learn_key, bytes, nk);
    gp->learn_n = nk;
    gp->learn_used = gp->learn_nt = 0;
    uint64_t h;
    const struct memo_slot *sl = memo_find(gp->memo, bytes, nk, &h);
    dj_token *tok = NULL, memo_tok[MEMO_TOK];
    size_t n_tok = 0;
    if (sl) {
        n_tok = sl->n_tok;
        memcpy(memo_tok, sl->tok, n_tok * sizeof *memo_tok);
    } else if (vocab_tokenize(gp->vocab, bytes, nb, false, false, &tok, &n_tok) != DJ_OK) {
        return 0;
    }
    const dj_token *cand = sl ? memo_tok : tok;
    /* keep the prefix the grammar accepts (an SPM space prefix, a token that
     * runs past the forced bytes into a branch, is cut) */
    struct dj_gmatch *probe = gmatch_clone(gp->m);
    size_t n = 0;
    if (probe)
        while (n < n_tok && n < cap && gtok_accept(gp->gtok, probe, cand[n])) {
            buf[n] = cand[n];
            n++;
        }
    gmatch_free(probe);
    free(tok);
    memcpy(gp->drafted, buf, n * sizeof *buf);
    gp->n_drafted = n;
    gp->n_confirmed = 0;
    return n;
}

static struct dj_gproc *gproc_copy(const struct dj_gproc *src) {
    struct dj_gproc *gp = calloc(1, sizeof *gp);
    if (!gp) return NULL;
    *gp = *src;
    gp->m = NULL;
    gp->trigger = gp->tail = NULL;
    gp->own_memo = false; /* forks share the memo; the original outlives them */
    gp->mask = malloc(src->n_words * sizeof *gp->mask);
    if (!gp->mask) goto fail;
    memcpy(gp->mask, src->mask, src->n_words * sizeof *gp->mask);
    if (src->m && !(gp->m = gmatch_clone(src->m))) goto fail;
    if (src->trigger) {
        if (!(gp->trigger = malloc(src->n_trigger + 1))) goto fail;
        memcpy(gp->trigger, src->trigger, src->n_trigger + 1);
        if (src->cap_tail && !(gp->tail = malloc(src->cap_tail))) goto fail;
        if (src->n_tail) memcpy(gp->tail, src->tail, src->n_tail);
    }
    return gp;
fail:
    gproc_free(gp);
    return NULL;
}

static void *gp_fork(void *ud, uint32_t index) {
    (void)index;
    return gproc_copy(ud);
}

static void gp_free(void *ud) { gproc_free(ud); }

static bool gp_active(void *ud) { return ((struct dj_gproc *)ud)->m != NULL; }

enum dj_status gproc_create(const struct dj_gproc_params *p, struct dj_gproc **out) {
    if (!p || !p->g || !p->gtok || !p->vocab || !out) return dj_fail(DJ_ERR_INVALID, "grammar processor: missing argument");
    struct dj_gproc *gp = calloc(1, sizeof *gp);
    if (!gp) return dj_fail(DJ_ERR_NOMEM, "grammar processor: out of memory");
    gp->g = p->g;
    gp->gtok = p->gtok;
    gp->vocab = p->vocab;
    gp->n_vocab = vocab_n_tokens(p->vocab);
    gp->n_words = (gp->n_vocab + 63) / 64;
    gp->max_draft = p->max_draft ? p->max_draft : 16;
    gp->draft_cap = 4;
    gp->memo = p->memo;
    enum dj_status st = DJ_OK;
    if (!gp->memo && (gp->memo = gdraft_memo_create())) gp->own_memo = true;
    if (!gp->memo || !(gp->mask = calloc(gp->n_words, sizeof *gp->mask))) {
        st = dj_fail(DJ_ERR_NOMEM, "grammar processor: out of memory");
    } else if (p->trigger && p->trigger[0]) {
        gp->n_trigger = strlen(p->trigger);
        if (!(gp->trigger = malloc(gp->n_trigger + 1))) st = dj_fail(DJ_ERR_NOMEM, "grammar processor: out of memory");
        else memcpy(gp->trigger, p->trigger, gp->n_trigger + 1);
    } else {
        st = gmatch_create(p->g, &gp->m);
    }
    if (st) {
        gproc_free(gp);
        return st;
    }
    *out = gp;
    return DJ_OK;
}

void gproc_free(struct dj_gproc *gp) {
    if (!gp) return;
    gmatch_free(gp->m);
    if (gp->own_memo) gdraft_memo_free(gp->memo);
    free(gp->mask);
    free(gp->trigger);
    free(gp->tail);
    free(gp);
}

struct dj_logits_processor gproc_processor(struct dj_gproc *gp) {
    return (struct dj_logits_processor){gp, gp_apply, gp_accept, gp_forced, gp_fork, gp_free, gp_draft, gp_active};
}

bool gproc_active(const struct dj_gproc *gp) { return gp->m != NULL; }

bool gproc_complete(const struct dj_gproc *gp) { return gp->m && gmatch_can_end(gp->m); }
