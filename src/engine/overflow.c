/*
 * overflow.c — the context-overflow policy (issue 33 item 4; --context-overflow,
 * dj_engine_params.overflow).  `error` (the default) refuses a prompt that does not
 * fit, as the APIs do, so an agent compacts its own history.  `prune` keeps the
 * session going: whole KV blocks of the prompt's middle are dropped from the token
 * stream until the prompt and room to generate (min(max_tokens, n_ctx / 4)) fit.
 *
 * Which blocks: never the first LLAMA_OPT_ATTN_PRUNE_KEEP_FIRST tokens (rounded up to
 * a block) nor the last LLAMA_OPT_ATTN_PRUNE_KEEP_LAST (at most half the target); of the others, the lowest
 * rolling attention weight first when the session has attention statistics
 * (LLAMA_OPT_ATTN_STATS_ENABLED or _PRUNE_ENABLED), blocks without one (new tokens)
 * last; without statistics, the oldest first (llama.cpp's context shift keeps the
 * first n_keep tokens and drops the oldest after them).
 *
 * Stable across turns: a session remembers the original prompt it was given and the
 * original blocks it dropped; a later prompt that extends it drops the same blocks
 * first (and more only if it still does not fit), so the shortened prompt extends
 * the last one and its KV is reused.  When it must drop more, it drops down to a
 * quarter of the context below what fits, so that the next turns fit as they are (each
 * new drop changes the prompt from that block on: llama.cpp's context shift likewise
 * discards half of what it may).  The shortened prompt is an ordinary prompt:
 * positions are renumbered, and the turn after new drops recomputes from the first
 * of them (or, with LLAMA_OPT_DIFF_MODE=approx, reuses the rest RoPE-shifted).  This
 * is Tier 2: the model no longer sees the dropped tokens.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kv/diff.h"

void ovf_free(struct ovf_state *o) {
    free(o->orig);
    free(o->drop);
    memset(o, 0, sizeof *o);
}


/* The idle session whose remembered prompt shares the longest prefix with prompt. */
static const struct dj_session *find_state(const struct dj_engine *e, const struct dj_request_params *p,
                                           uint64_t root) {
    if (p->session) return p->session;
    const struct dj_session *best = NULL;
    size_t best_n = 0;
    for (const struct dj_session *s = e->sessions; s; s = s->next) {
        if (!s->anon || s->busy || !s->ovf.n_orig || s->hist.root != root) continue;
        const size_t l = diff_common_prefix(s->ovf.orig, s->ovf.n_orig, p->prompt, p->n_prompt);
        if (l > best_n) {
            best = s;
            best_n = l;
        }
    }
    return best;
}

enum dj_status engine_overflow_shorten(struct dj_engine *e, const struct dj_request_params *p, uint64_t root,
                                       struct ovf_state *out, dj_token **short_prompt, size_t *n_short) {
    memset(out, 0, sizeof *out);
    *short_prompt = NULL;
    *n_short = p->n_prompt;
    const size_t n = p->n_prompt, n_ctx = e->ctx->p.n_ctx, bs = e->block_size;
    const size_t room = p->max_tokens < n_ctx / 4 ? p->max_tokens : n_ctx / 4;
    if (n + (room ? room : 1) <= n_ctx) return DJ_OK; /* fits: nothing dropped */
    const size_t target = n_ctx - (room ? room : 1);
    const size_t first = (e->cfg.attn_prune_keep_first + bs - 1) / bs;
    const size_t keep_last = e->cfg.attn_prune_keep_last < target ? e->cfg.attn_prune_keep_last : target / 2;
    const size_t limit = n > keep_last ? (n - keep_last) / bs : 0; /* original blocks [first, limit) may go */
    const size_t nb = (n + bs - 1) / bs;
    out->orig = malloc(n * sizeof *out->orig);
    out->drop = malloc((nb ? nb : 1) * sizeof *out->drop);
    float *w = malloc((nb ? nb : 1) * sizeof *w);
    uint8_t *gone = calloc(nb ? nb : 1, 1), *was = calloc(nb ? nb : 1, 1); /* dropped now / last time */
    if (!out->orig || !out->drop || !w || !gone || !was) {
        free(gone);
        free(was);
        free(w);
        ovf_free(out);
        return dj_fail(DJ_ERR_NOMEM, "out of memory shortening a prompt");
    }
    memcpy(out->orig, p->prompt, n * sizeof *out->orig);
    out->n_orig = n;
    /* the blocks the session dropped before, where the prompt still extends what it was given;
     * cp: the prompt's common prefix with that (with a named session's history when it dropped
     * nothing: find_state finds anon sessions by what they dropped only) */
    const struct dj_session *s = find_state(e, p, root);
    const struct ovf_state *old = s ? &s->ovf : NULL;
    const size_t cp = old && old->n_orig ? diff_common_prefix(old->orig, old->n_orig, p->prompt, n)
                      : s ? diff_common_prefix(s->hist.tok, s->hist.n_tok, p->prompt, n) : 0;
    size_t n_gone = 0;
    for (size_t i = 0; old && i < old->n_drop; i++) {
        if (old->drop[i] < nb) was[old->drop[i]] = 1;
        if ((old->drop[i] + 1) * bs <= cp && old->drop[i] >= first && old->drop[i] < limit) {
            gone[old->drop[i]] = 1;
            n_gone++;
        }
    }
    /* weights of the original blocks: the session's rolling weight of the block that held
     * them in its last turn (the j-th block it kept), +inf where unknown (kept longest) */
    for (size_t k = 0, j = 0; k < nb; k++) {
        w[k] = INFINITY;
        if (was[k]) continue;
        if (s && s->attn && (k + 1) * bs <= cp && j < s->attn->n_known) w[k] = s->attn->avg[j];
        j++;
    }
    size_t len = n - n_gone * bs;
    /* new drops go down to a quarter of the context under the target (when the protected
     * tokens allow), so that the next turns fit without dropping again: each new drop
     * changes the prompt from its block on, and what follows is computed again */
    const size_t goal = len > target ? (target > n_ctx / 4 + first * bs ? target - n_ctx / 4 : target) : target;
    while (len > goal) {
        size_t best = SIZE_MAX;
        for (size_t k = first; k < limit; k++) {
            if (gone[k]) continue;
            if (best == SIZE_MAX || w[k] < w[best]) best = k; /* equal: the older (the first found) */
        }
        if (best == SIZE_MAX && len <= target) break; /* the goal's slack is not there: the target is enough */
        if (best == SIZE_MAX) {
            free(gone);
            free(was);
            free(w);
            ovf_free(out);
            return dj_fail(DJ_ERR_INVALID,
                           "request: prompt of %zu tokens does not fit the context size %zu even with its middle "
                           "dropped (--context-overflow prune keeps the first %u and last %zu tokens)",
                           n, n_ctx, e->cfg.attn_prune_keep_first, keep_last);
        }
        gone[best] = 1;
        len -= bs;
    }
    free(was);
    free(w);
    /* the dropped blocks in increasing order, and the shortened prompt */
    dj_token *sp = malloc(len * sizeof *sp);
    if (!sp) {
        free(gone);
        ovf_free(out);
        return dj_fail(DJ_ERR_NOMEM, "out of memory shortening a prompt");
    }
    size_t m = 0;
    for (size_t k = 0; k < nb; k++) {
        if (gone[k]) {
            out->drop[out->n_drop++] = (uint32_t)k;
            continue;
        }
        const size_t e0 = (k + 1) * bs < n ? (k + 1) * bs : n;
        memcpy(sp + m, p->prompt + k * bs, (e0 - k * bs) * sizeof *sp);
        m += e0 - k * bs;
    }
    free(gone);
    DJ_ASSERT(m == len);
    *short_prompt = sp;
    *n_short = len;
    return DJ_OK;
}
