/*
 * think_budget.c — the reasoning budget (think_budget.h).
 *
 * When the budget runs out while the text already ends with the start of the
 * close marker (the model was closing the block itself), only the rest of the
 * marker is forced, so the output never holds a broken marker: with an inner
 * grammar when it would not allow the whole marker next, without one when at
 * least two characters of it were written.
 *
 * Text is tracked through a small window: the last (longest marker − 1) bytes
 * before a token's piece plus the piece, enough to see a marker that spans
 * tokens without keeping the whole reasoning.  Before the block opens, the
 * text so far (leading whitespace skipped) must still be a prefix of the open
 * marker, else the reply has no think block and the processor steps aside.
 */
#include "sample/think_budget.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

enum tb_state { TB_PRE, TB_IN, TB_FORCING, TB_DONE };

struct dj_think_budget {
    const struct dj_vocab *vocab;
    char *open, *close;
    size_t n_open, n_close;
    dj_token *force; /* the close marker's tokens (shared by forks: owned by the root) */
    size_t n_force;
    dj_token *rest;  /* what is forced now: the marker's tokens, or (owned) those of its unwritten rest */
    size_t n_rest;
    bool own_rest;
    size_t budget;
    bool starts_open;
    struct dj_logits_processor inner;
    bool has_inner;
    enum tb_state st;
    size_t used; /* reasoning tokens accepted */
    size_t k;    /* next forced token */
    char *win;   /* the recent text (PRE: the text after leading whitespace) */
    size_t n_win, cap_win;
};

static enum dj_status win_add(struct dj_think_budget *b, const char *s, size_t n) {
    if (b->n_win + n > b->cap_win) {
        size_t cap = (b->n_win + n) * 2 + 64;
        char *p = realloc(b->win, cap);
        if (!p) return dj_fail(DJ_ERR_NOMEM, "out of memory");
        b->win = p;
        b->cap_win = cap;
    }
    memcpy(b->win + b->n_win, s, n);
    b->n_win += n;
    return DJ_OK;
}

/* Keeps the last `keep` bytes of the window. */
static void win_keep(struct dj_think_budget *b, size_t keep) {
    if (b->n_win <= keep) return;
    memmove(b->win, b->win + b->n_win - keep, keep);
    b->n_win = keep;
}

/* The budget is spent: force the close marker — only the part not written yet when the text
 * already ends with the start of it (the model was closing the block itself). */
static enum dj_status start_forcing(struct dj_think_budget *b) {
    b->st = TB_FORCING;
    b->k = 0;
    if (b->own_rest) free(b->rest);
    b->rest = b->force;
    b->n_rest = b->n_force;
    b->own_rest = false;
    size_t j = b->n_close - 1 < b->n_win ? b->n_close - 1 : b->n_win;
    for (; j > 0; j--)
        if (!memcmp(b->win + b->n_win - j, b->close, j)) break;
    if (j == 0) return DJ_OK;
    /* the text ends with the start of the marker: was the model closing the block?  A grammar
     * knows (the whole marker must be allowed next for it to be written in full); without one,
     * a single character ("<") is too weak a sign and the whole marker is forced */
    if (b->has_inner && b->inner.apply) {
        const size_t nv = vocab_n_tokens(b->vocab);
        float *l = calloc(nv, sizeof *l);
        if (!l) return dj_fail(DJ_ERR_NOMEM, "out of memory");
        enum dj_status st = b->inner.apply(b->inner.ud, l, nv);
        const bool whole_ok = st == DJ_OK && (size_t)b->force[0] < nv && l[b->force[0]] != -INFINITY;
        free(l);
        if (st) return st;
        if (whole_ok) return DJ_OK;
    } else if (j < 2) {
        return DJ_OK;
    }
    dj_token *t = NULL;
    size_t n = 0;
    enum dj_status st = vocab_tokenize(b->vocab, b->close + j, b->n_close - j, false, true, &t, &n);
    if (st) return st;
    if (n == 0) { /* cannot happen: j < n_close */
        free(t);
        b->st = TB_DONE;
        return DJ_OK;
    }
    b->rest = t;
    b->n_rest = n;
    b->own_rest = true;
    return DJ_OK;
}

static enum dj_status enter_in(struct dj_think_budget *b) {
    b->st = TB_IN;
    return b->budget == 0 ? start_forcing(b) : DJ_OK;
}

/* A token's text while the block is open: the close marker ends it, else it counts. */
static enum dj_status in_token(struct dj_think_budget *b) {
    if (memmem(b->win, b->n_win, b->close, b->n_close)) {
        b->st = TB_DONE;
        return DJ_OK;
    }
    win_keep(b, b->n_close - 1);
    return ++b->used >= b->budget ? start_forcing(b) : DJ_OK;
}

static enum dj_status tb_accept(void *ud, dj_token tok) {
    struct dj_think_budget *b = ud;
    if (b->has_inner && b->inner.accept) {
        enum dj_status st = b->inner.accept(b->inner.ud, tok);
        if (st) return st;
    }
    if (b->st == TB_DONE) return DJ_OK;
    if (b->st == TB_FORCING) {
        if (b->k < b->n_rest && tok == b->rest[b->k]) b->k++;
        else b->k = b->n_rest; /* another token came (cannot under the mask): stop forcing */
        if (b->k == b->n_rest) b->st = TB_DONE;
        return DJ_OK;
    }
    char piece[512];
    size_t n = vocab_token_to_piece(b->vocab, tok, true, piece, sizeof piece);
    if (n > sizeof piece) n = sizeof piece;
    if (b->st == TB_IN) {
        if (win_add(b, piece, n)) return DJ_ERR_NOMEM;
        return in_token(b);
    }
    /* TB_PRE: skip leading whitespace, then the text must be (a prefix of) the open marker */
    size_t i = 0;
    while (b->n_win == 0 && i < n && strchr(" \t\r\n", piece[i])) i++;
    if (win_add(b, piece + i, n - i)) return DJ_ERR_NOMEM;
    const size_t m = b->n_win < b->n_open ? b->n_win : b->n_open;
    if (memcmp(b->win, b->open, m)) {
        b->st = TB_DONE; /* no think block in this reply */
        return DJ_OK;
    }
    if (b->n_win < b->n_open) return DJ_OK;
    /* opened: what follows the marker in this piece is reasoning */
    memmove(b->win, b->win + b->n_open, b->n_win - b->n_open);
    b->n_win -= b->n_open;
    if (b->n_win && memmem(b->win, b->n_win, b->close, b->n_close)) {
        b->st = TB_DONE;
        return DJ_OK;
    }
    return enter_in(b);
}

static enum dj_status tb_apply(void *ud, float *logits, size_t n_vocab) {
    struct dj_think_budget *b = ud;
    if (b->st == TB_FORCING && b->k < b->n_rest) {
        const dj_token want = b->rest[b->k];
        for (size_t i = 0; i < n_vocab; i++)
            if ((dj_token)i != want) logits[i] = -INFINITY;
        return DJ_OK;
    }
    return b->has_inner && b->inner.apply ? b->inner.apply(b->inner.ud, logits, n_vocab) : DJ_OK;
}

static size_t tb_forced(void *ud, dj_token *buf, size_t cap) {
    struct dj_think_budget *b = ud;
    if (b->st == TB_FORCING) {
        size_t n = b->n_rest - b->k;
        if (n > cap) n = cap;
        memcpy(buf, b->rest + b->k, n * sizeof *buf);
        return n;
    }
    return b->has_inner && b->inner.forced ? b->inner.forced(b->inner.ud, buf, cap) : 0;
}

static size_t tb_draft(void *ud, dj_token *buf, size_t cap) {
    struct dj_think_budget *b = ud;
    if (b->st == TB_FORCING) return 0;
    return b->has_inner && b->inner.draft ? b->inner.draft(b->inner.ud, buf, cap) : 0;
}

static bool tb_active(void *ud) {
    struct dj_think_budget *b = ud;
    if (b->st == TB_FORCING) return true;
    if (!b->has_inner) return false;
    return !b->inner.active || b->inner.active(b->inner.ud);
}

static void tb_free_fork(void *ud) {
    struct dj_think_budget *b = ud;
    if (!b) return;
    if (b->has_inner && b->inner.free && b->inner.ud) b->inner.free(b->inner.ud);
    if (b->own_rest) free(b->rest);
    free(b->win);
    free(b);
}

static void *tb_fork(void *ud, uint32_t index) {
    const struct dj_think_budget *b = ud;
    struct dj_think_budget *f = malloc(sizeof *f);
    if (!f) return NULL;
    *f = *b;
    f->win = NULL;
    f->n_win = f->cap_win = 0;
    f->used = 0;
    f->own_rest = false; /* (the parent's rest is the parent's) */
    f->st = TB_PRE;
    /* the state think_budget_create starts in (with no text, no tokenization can fail) */
    if (b->starts_open) enter_in(f);
    if (b->has_inner) {
        if (!b->inner.fork || !(f->inner.ud = b->inner.fork(b->inner.ud, index))) {
            free(f);
            return NULL;
        }
    }
    return f;
}

enum dj_status think_budget_create(const struct dj_think_budget_params *p, struct dj_think_budget **out) {
    if (!p->vocab || !p->open || !p->close || !*p->open || !*p->close)
        return dj_fail(DJ_ERR_INVALID, "a reasoning budget needs the template's think markers");
    struct dj_think_budget *b = calloc(1, sizeof *b);
    if (!b) return dj_fail(DJ_ERR_NOMEM, "out of memory");
    b->vocab = p->vocab;
    b->open = strdup(p->open);
    b->close = strdup(p->close);
    if (!b->open || !b->close) {
        think_budget_free(b);
        return dj_fail(DJ_ERR_NOMEM, "out of memory");
    }
    b->n_open = strlen(b->open);
    b->n_close = strlen(b->close);
    enum dj_status st = vocab_tokenize(p->vocab, b->close, b->n_close, false, true, &b->force, &b->n_force);
    if (st || b->n_force == 0) {
        think_budget_free(b);
        return st ? st : dj_fail(DJ_ERR_INVALID, "the end-of-thinking marker '%s' has no tokens", p->close);
    }
    b->budget = p->budget;
    b->starts_open = p->starts_open;
    if (p->inner) {
        b->inner = *p->inner;
        b->has_inner = true;
    }
    b->st = TB_PRE;
    if (p->starts_open && (st = enter_in(b)) != DJ_OK) {
        think_budget_free(b);
        return st;
    }
    *out = b;
    return DJ_OK;
}

void think_budget_free(struct dj_think_budget *b) {
    if (!b) return;
    free(b->open);
    free(b->close);
    if (b->own_rest) free(b->rest);
    free(b->force);
    free(b->win);
    free(b);
}

struct dj_logits_processor think_budget_processor(struct dj_think_budget *b) {
    struct dj_logits_processor p = {0};
    p.ud = b;
    p.apply = tb_apply;
    p.accept = tb_accept;
    p.forced = tb_forced;
    p.fork = tb_fork;
    p.free = tb_free_fork;
    p.draft = tb_draft;
    p.active = tb_active;
    return p;
}

size_t think_budget_used(const struct dj_think_budget *b) { return b ? b->used : 0; }
