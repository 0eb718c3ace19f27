/*
 * draft.c — the engine's side of speculative decoding (spec/spec.h;
 * docs/SPECULATIVE.md): what a completion drafts after each sampled token
 * (engine_spec_choose: prompt lookup, the output memo, or early exit, as the
 * policy decides; every lookup/memo proposal also becomes a shadow, compared
 * with the tokens generated later: engine_spec_note_token), the early-exit
 * passes that make exit drafts before a step (engine_exit_drafts) and the
 * start layers of the step's pass that verifies them (engine_exit_rows),
 * and the choice of the exit layer (engine_exit_calibrate).  sched.c calls
 * these; verification itself is sched.c's verify_drafts, shared with the
 * grammar's drafts.  Engine thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "engine/engine_internal.h"
#include "kv/hash.h"
#include "spec/spec.h"

enum { SPEC_EXIT_PROBE = 64 }; /* steps without an exit draft before a one-token probe */

static uint32_t lookup_bucket(uint32_t match) { return match >= 8 ? 3 : match >= 4 ? 2 : match >= 2 ? 1 : 0; }
static uint32_t memo_bucket(uint32_t match, float prob) {
    return prob >= 0.8f && match >= 4 ? 3 : match >= 4 ? 2 : match >= 2 ? 1 : 0;
}

void engine_feed_draft(struct dj_comp *c, enum dj_spec_src src, size_t nd) {
    c->draft_src = src;
    c->n_draft = nd;
    c->n_feed += nd;
    c->n_drafted += nd;
    c->sc.drafted[src] += nd;
    c->sc.rounds[src]++;
    for (size_t j = 0; j < nd; j++) c->sc.pos_drafted[j < DJ_SPEC_POS_MAX ? j : DJ_SPEC_POS_MAX - 1]++;
}

/* The token the sequence continues with at output position pos (tok, or the
 * forced one when teacher-forced) goes into the lookup context, and every
 * shadow proposal is compared with it. */
void engine_spec_note_token(struct dj_engine *e, struct dj_comp *c, size_t pos, dj_token tok) {
    if (spec_lookup_append(&c->lk, &tok, 1) != DJ_OK) {
        c->lk_on = false; /* speculation is an optimization: without memory it stops */
        return;
    }
    for (int s = 0; s < DJ_SPEC_N_SRC; s++) {
        struct spec_shadow *sh = &c->shadow[s];
        if (!sh->on || pos < sh->pos0) continue;
        const size_t j = pos - sh->pos0;
        if (j != sh->n_match) { /* not contiguous (cannot happen: tokens come in order) */
            sh->on = false;
            continue;
        }
        if (tok == sh->tok[j] && ++sh->n_match < sh->n) continue;
        spec_policy_observe(&e->pol, (enum dj_spec_src)s, sh->bucket, sh->n, sh->n_match);
        sh->on = false;
    }
}

/* Chooses the draft of completion c for the next step from the speculative
 * sources (prompt lookup and the output memo into out, at most cap tokens;
 * or early exit, whose tokens exist only after its passes: c->exit_k).
 * Every proposal, drafted or not, becomes its source's shadow (unless one is
 * pending): the policy learns each position's acceptance from the tokens
 * generated, including positions past what was drafted.  Returns the draft
 * length. */
size_t engine_spec_choose(struct dj_engine *e, struct dj_req *q, struct dj_comp *c, dj_token *out, size_t cap) {
    const struct dj_spec_params *sp = &e->p.spec;
    if (cap > sp->draft_max) cap = sp->draft_max;
    if (cap == 0) return 0;
    dj_token buf[2][DJ_FEED_MAX];
    struct spec_proposal pr[2];
    size_t n_pr = 0;
    uint32_t match;
    if (c->lk_on && (sp->sources & DJ_SPEC_BIT(DJ_SPEC_LOOKUP))) {
        size_t n = spec_lookup_draft(&c->lk, buf[n_pr], cap, &match);
        if (n) {
            pr[n_pr] = (struct spec_proposal){DJ_SPEC_LOOKUP, lookup_bucket(match), buf[n_pr], n};
            n_pr++;
        }
    }
    if (c->lk_on && e->memo && q->root == KV_CHAIN_ROOT) {
        float prob;
        e->stats.memo_lookups++;
        size_t n = spec_memo_draft(e->memo, c->lk.tok, c->lk.n, buf[n_pr], cap, &match, &prob);
        if (n) {
            e->stats.memo_hits++;
            pr[n_pr] = (struct spec_proposal){DJ_SPEC_MEMO, memo_bucket(match, prob), buf[n_pr], n};
            n_pr++;
        }
    }
    size_t best = SIZE_MAX, best_k = 0;
    double best_gain = 1.0;
    for (size_t i = 0; i < n_pr; i++) {
        c->sc.proposed[pr[i].src]++;
        size_t k;
        double gain;
        if (sp->adaptive) {
            k = spec_policy_length(&e->pol, &pr[i], e->n_rows_last ? e->n_rows_last : 1, cap, &gain);
        } else {
            k = pr[i].n;
            gain = (double)k; /* the longest */
        }
        if (k > 0 && (best == SIZE_MAX || gain > best_gain)) {
            best = i;
            best_k = k;
            best_gain = gain;
        }
    }
    for (size_t i = 0; i < n_pr; i++) {
        struct spec_shadow *sh = &c->shadow[pr[i].src];
        if (sh->on) continue; /* the drafted one too: its positions past the draft are measured */
        memcpy(sh->tok, pr[i].tok, pr[i].n * sizeof *sh->tok);
        sh->n = pr[i].n;
        sh->pos0 = c->n_gen;
        sh->n_match = 0;
        sh->bucket = pr[i].bucket;
        sh->on = true;
    }
    /* early exit: proposes no tokens until its passes run (exit_drafts, next step); only for a
     * plain sampled token (no forced ones fed with it) and without a logits processor, whose
     * mask holds for the current position only */
    if ((sp->sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)) && e->exit_layer && !q->has_proc && c->n_feed == 1) {
        double gain;
        size_t k = sp->adaptive ? spec_policy_length_exit(&e->pol, e->n_rows_last ? e->n_rows_last : 1, cap,
                                                          e->exit_a, e->exit_h, &gain)
                                : cap;
        if (!sp->adaptive) gain = (double)cap - 0.5; /* the longest: a token proposal of full length wins */
        if (k == 0 && ++c->exit_idle >= SPEC_EXIT_PROBE) { /* keep measuring a source that stopped */
            k = 1;
            gain = 1e9;
        }
        if (k > 0 && (best == SIZE_MAX || gain > best_gain)) {
            c->exit_k = (uint32_t)k;
            c->exit_idle = 0;
            return 0;
        }
    }
    /* the MTP block: the same conditions (its drafts too exist only after its passes) */
    if ((sp->sources & DJ_SPEC_BIT(DJ_SPEC_MTP)) && e->mtp && !q->has_proc && c->n_feed == 1) {
        double gain;
        size_t k = sp->adaptive ? spec_policy_length_mtp(&e->pol, e->n_rows_last ? e->n_rows_last : 1, cap, e->mtp_a,
                                                         e->mtp_h, &gain)
                                : cap;
        if (!sp->adaptive) gain = (double)cap - 0.5;
        if (k == 0 && ++c->mtp_idle >= SPEC_EXIT_PROBE) {
            k = 1;
            gain = 1e9;
        }
        if (k > 0 && (best == SIZE_MAX || gain > best_gain)) {
            c->exit_k = 0;
            c->mtp_k = (uint32_t)k;
            c->mtp_idle = 0;
            return 0;
        }
    }
    if (best == SIZE_MAX) return 0;
    memcpy(out, pr[best].tok, best_k * sizeof *out);
    engine_feed_draft(c, pr[best].src, best_k);
    return best_k;
}

/* --draft-exit-layer auto: the exit layer is chosen once per engine, by
 * measurement on the first prompt that reaches it: its last (up to 32)
 * positions are run again in a scratch copy of the sequence (copy on write:
 * the session's rows are not touched), through the full model and through
 * the first L layers for L = n_layer/4, /2, 3/4; the agreement of each early
 * exit's argmax with the full model's is the acceptance estimate, and the
 * layer with the best expected gain at that acceptance and its cost
 * (spec_exit_gain) is kept.  Failing that (a short prompt, no memory): n_layer/2. */
void engine_exit_calibrate(struct dj_engine *e, struct dj_session *s) {
    const uint32_t N = e->model->hp.n_layer;
    const size_t V = e->model->hp.n_vocab, n = s->seq.n_pos;
    const size_t m = n > 33 ? 32 : n > 1 ? n - 1 : 0;
    uint32_t best = N / 2 ? N / 2 : 1;
    double best_gain = -1.0, best_agree = 0.0;
    struct kv_seq tmp;
    kv_seq_init(&tmp, e->pool);
    float *lg = m >= 4 ? malloc(m * V * sizeof *lg) : NULL;
    dj_token *am = m >= 4 ? malloc(m * sizeof *am) : NULL;
    uint32_t *pos = m >= 4 ? malloc(m * sizeof *pos) : NULL, *out = m >= 4 ? malloc(m * sizeof *out) : NULL;
    struct kv_seq **seq = m >= 4 ? malloc(m * sizeof *seq) : NULL;
    if (lg && am && pos && out && seq && n <= s->hist.n_tok && kv_seq_clone(&tmp, &s->seq) == DJ_OK) {
        kv_seq_truncate(&tmp, n - m);
        if (kv_seq_prepare(&tmp, m) == DJ_OK) {
            for (size_t t = 0; t < m; t++) {
                pos[t] = (uint32_t)(n - m + t);
                out[t] = (uint32_t)t;
                seq[t] = &tmp;
            }
            struct dj_batch b = {m, s->hist.tok + n - m, pos, seq, m, out, NULL, NULL};
            bool ok = ctx_forward(e->ctx, &b, lg) == DJ_OK;
            for (size_t t = 0; ok && t < m; t++) am[t] = sampler_argmax(lg + t * V, V);
            const uint32_t cand[3] = {N / 4, N / 2, 3 * N / 4};
            for (int ci = 0; ok && ci < 3; ci++) {
                const uint32_t L = cand[ci];
                if (L < 1 || L >= N || (ci > 0 && L == cand[ci - 1])) continue;
                if (ctx_forward_exit(e->ctx, &b, L, NULL, lg) != DJ_OK) break;
                size_t agree = 0;
                for (size_t t = 0; t < m; t++) agree += sampler_argmax(lg + t * V, V) == am[t];
                double a, h;
                engine_exit_fracs(e, L, &a, &h);
                size_t k;
                const double alpha = (double)agree / (double)m;
                const double g = spec_exit_gain(alpha, e->pol.beta_default, a, h, e->p.spec.draft_max, &k);
                dj_log(DJ_LOG_INFO, "early exit: layer %u of %u agrees with the full model on %zu of %zu positions; "
                       "expected gain %.3f (k = %zu)", L, N, agree, m, g, k);
                if (g > best_gain) {
                    best_gain = g;
                    best = L;
                    best_agree = alpha;
                }
            }
        }
    }
    kv_seq_free(&tmp);
    free(lg);
    free(am);
    free(pos);
    free(out);
    free(seq);
    e->exit_layer = best;
    engine_exit_fracs(e, best, &e->exit_a, &e->exit_h);
    dj_log(DJ_LOG_INFO, "early exit: drafts from the first %u of %u layers (agreement %.2f on the calibration prompt)",
           best, N, best_agree);
}


/* ---- early-exit drafts ------------------------------------------------------ */

/* Room for n rows in the early-exit batch arrays (kept by the engine: no allocation
 * per step once grown).  false on OOM (the arrays stay as they were). */
static bool exit_scratch_reserve(struct dj_engine *e, size_t n) {
    if (n <= e->xs.cap) return true;
    const size_t E = e->model->hp.n_embd, V = e->model->hp.n_vocab;
#define GROW(f, per)                                                         \
    do {                                                                     \
        void *p_ = realloc(e->xs.f, n * (per) * sizeof *e->xs.f);            \
        if (!p_) return false;                                               \
        e->xs.f = p_;                                                        \
    } while (0)
    GROW(cs, 1);
    GROW(tok, 1);
    GROW(pos, 1);
    GROW(out, 1);
    GROW(seq, 1);
    GROW(hid, E);
    GROW(lg, V);
#undef GROW
    e->xs.cap = n;
    return true;
}

/* The completions that asked for early-exit (mtp false) or MTP (true) drafts in the last
 * step and can have them now (decoding, one token fed, no drafts yet, the rows prepared,
 * and for exit the hidden rows, for MTP the recurrent state); the others' request is
 * dropped.  Sets *kmax to the most drafts asked for; returns how many completions. */
static size_t drafts_select(struct dj_engine *e, bool mtp, size_t *kmax) {
    size_t n_x = 0;
    *kmax = 0;
    for (struct dj_req *q = e->running; q; q = q->next)
        for (uint32_t i = 0; q->state == REQ_DECODE && !q->err && i < q->n_comp; i++) {
            struct dj_comp *c = &q->comp[i];
            uint32_t *k = mtp ? &c->mtp_k : &c->exit_k;
            if (!*k) continue;
            if (c->finish != DJ_FINISH_NONE || c->n_feed != 1 || c->n_draft ||
                engine_prepare_rows(e, q, c->s, (size_t)*k + 1) != DJ_OK ||
                (mtp ? !c->s->seq.rs
                     : !c->xh && !(c->xh = malloc((size_t)DJ_FEED_MAX * e->model->hp.n_embd * sizeof *c->xh)))) {
                *k = 0;
                continue;
            }
            n_x++;
            if (*k > *kmax) *kmax = *k;
        }
    return n_x;
}

/* drafts_select's completions into e->xs.cs in request order; returns how many. */
static size_t drafts_gather(struct dj_engine *e, bool mtp) {
    size_t n = 0;
    for (struct dj_req *q = e->running; q; q = q->next)
        for (uint32_t i = 0; q->state == REQ_DECODE && !q->err && i < q->n_comp; i++)
            if (mtp ? q->comp[i].mtp_k : q->comp[i].exit_k) e->xs.cs[n++] = &q->comp[i];
    return n;
}

/* After the rounds: when they all ran (ok), each selected completion feeds its drafts
 * (c->feed[1..k]) for the step to verify; every request for drafts is then cleared. */
static void drafts_finish(struct dj_engine *e, bool mtp, bool ok) {
    const enum dj_spec_src src = mtp ? DJ_SPEC_MTP : DJ_SPEC_EXIT;
    for (struct dj_req *q = e->running; q; q = q->next)
        for (uint32_t i = 0; i < q->n_comp; i++) {
            struct dj_comp *c = &q->comp[i];
            uint32_t *k = mtp ? &c->mtp_k : &c->exit_k;
            const size_t nd = *k;
            *k = 0;
            if (!ok || !nd || q->state != REQ_DECODE || q->err) continue;
            c->sc.proposed[src]++;
            engine_feed_draft(c, src, nd);
        }
}

/* Runs the early-exit drafts asked for in the last step (exit_k of a
 * completion): round r feeds every such completion's token r (round 0 the
 * sampled token, then the drafts) through layers [0, exit_layer) at its
 * position — writing those layers' K/V rows into the completion's own
 * sequence, shared with the full model — and samples the next draft from the
 * early-exit logits with the completion's sampler at that output position
 * (greedy: the argmax; sampled: the same counter-based draw plain decoding
 * will make there, so a close distribution gives the same token).  The last
 * round (the last draft's own rows) needs no logits.  The step's batched
 * pass then verifies the drafts, every fed token resuming at exit_layer from
 * the hidden row kept here (c->xh).  Any failure drops the drafts: the step
 * decodes the sampled token plainly. */
void engine_exit_drafts(struct dj_engine *e) {
    size_t kmax;
    const size_t n_x = drafts_select(e, false, &kmax);
    if (n_x == 0) return;
    const size_t E = e->model->hp.n_embd, V = e->model->hp.n_vocab;
    bool ok = exit_scratch_reserve(e, n_x);
    struct dj_comp **cs = e->xs.cs;
    dj_token *tok = e->xs.tok;
    uint32_t *pos = e->xs.pos, *out = e->xs.out;
    struct kv_seq **seq = e->xs.seq;
    float *hid = e->xs.hid, *lg = e->xs.lg;
    if (ok) drafts_gather(e, false);
    for (size_t r = 0; ok && r <= kmax; r++) {
        size_t nb = 0, n_out = 0;
        for (size_t k = 0; k < n_x; k++) {
            struct dj_comp *c = cs[k];
            if (c->exit_k < r) continue;
            tok[nb] = c->feed[r];
            pos[nb] = (uint32_t)(c->s->seq.n_pos + r);
            seq[nb] = &c->s->seq;
            if (r < c->exit_k) out[n_out++] = (uint32_t)nb;
            nb++;
        }
        struct dj_batch b = {nb, tok, pos, seq, n_out, out, NULL, NULL};
        if (ctx_forward_exit(e->ctx, &b, e->exit_layer, hid, n_out ? lg : NULL) != DJ_OK) {
            dj_log(DJ_LOG_WARN, "early-exit draft pass failed (%s); decoding without drafts", dj_last_error());
            ok = false;
            break;
        }
        e->n_forward_exit++;
        size_t row = 0, o = 0;
        for (size_t k = 0; k < n_x; k++) {
            struct dj_comp *c = cs[k];
            if (c->exit_k < r) continue;
            memcpy(c->xh + r * E, hid + row * E, E * sizeof *hid);
            if (r < c->exit_k) c->feed[1 + r] = sampler_sample(c->smp, lg + (o++) * V, c->n_gen + r);
            row++;
        }
    }
    drafts_finish(e, false, ok);
}

/* ---- MTP drafts ---------------------------------------------------------------- */

/* Runs the MTP drafts asked for in the last step (mtp_k of a completion):
 * round r feeds every such completion's token r (round 0 the sampled token,
 * paired with the hidden row its sequence's state keeps: the main model's at
 * the position before; then each draft, paired with the block's own hidden row
 * of the round before) through the MTP block at its position — writing the
 * block's K/V rows there, which the step's pass rewrites from the main model's
 * rows — and samples the next draft from the block's logits with the
 * completion's sampler at that output position (as early exit does).  The
 * step's batched pass then verifies the drafts as any other (a plain pass).
 * Any failure drops the drafts: the step decodes the sampled token plainly. */
void engine_mtp_drafts(struct dj_engine *e) {
    size_t kmax;
    size_t n_x = drafts_select(e, true, &kmax);
    if (n_x == 0) return;
    const size_t E = e->model->hp.n_embd, V = e->model->hp.n_vocab;
    bool ok = exit_scratch_reserve(e, n_x);
    struct dj_comp **cs = e->xs.cs;
    dj_token *tok = e->xs.tok;
    uint32_t *pos = e->xs.pos, *out = e->xs.out;
    struct kv_seq **seq = e->xs.seq;
    float *hid = e->xs.hid, *lg = e->xs.lg;
    if (ok) {
        drafts_gather(e, true);
        for (size_t k = 0; k < n_x; k++) memcpy(hid + k * E, cs[k]->s->seq.rs + e->ctx->rs_h, E * sizeof *hid);
    }
    /* round r: the completions still drafting, in the order of cs; hid row k is cs[k]'s */
    for (size_t r = 0; ok && r < kmax; r++) {
        size_t nb = 0;
        for (size_t k = 0; k < n_x; k++) {
            struct dj_comp *c = cs[k];
            if (c->mtp_k <= r) continue;
            tok[nb] = c->feed[r];
            pos[nb] = (uint32_t)(c->s->seq.n_pos + r);
            seq[nb] = &c->s->seq;
            out[nb] = (uint32_t)nb;
            if (nb != k) memmove(hid + nb * E, hid + k * E, E * sizeof *hid);
            cs[nb++] = c; /* the drafting ones first, in order */
        }
        n_x = nb;
        struct dj_batch b = {nb, tok, pos, seq, nb, out, NULL, NULL, NULL};
        if (ctx_forward_mtp(e->ctx, &b, hid, hid, lg) != DJ_OK) {
            dj_log(DJ_LOG_WARN, "MTP draft pass failed (%s); decoding without drafts", dj_last_error());
            ok = false;
            break;
        }
        e->n_forward_mtp++;
        for (size_t k = 0; k < nb; k++) cs[k]->feed[1 + r] = sampler_sample(cs[k]->smp, lg + k * V, cs[k]->n_gen + r);
    }
    drafts_finish(e, true, ok);
}

/* Fills the step's start layers and hidden rows when a completion verifies
 * early-exit drafts (its fed tokens resume at the exit layer).  Returns false
 * when there are none (the batch then has no start layers), or with *oom set
 * when the arrays cannot grow (the caller fails the step's requests). */
bool engine_exit_rows(struct dj_engine *e, size_t nt, size_t n_ent, bool *oom) {
    bool any = false;
    *oom = false;
    for (size_t k = 0; k < n_ent && !any; k++) {
        const struct step_ent *en = &e->ent[k];
        const struct dj_comp *c = &en->req->comp[en->comp];
        any = !en->prefill && c->n_draft && c->draft_src == DJ_SPEC_EXIT;
    }
    if (!any) return false;
    const size_t E = e->model->hp.n_embd;
    if (nt > e->b_xcap) {
        uint32_t *st = realloc(e->b_start, nt * 2 * sizeof *st);
        if (st) e->b_start = st;
        float *h = st ? realloc(e->b_hidden, nt * 2 * E * sizeof *h) : NULL;
        if (!h) {
            *oom = true;
            return false;
        }
        e->b_hidden = h;
        e->b_xcap = nt * 2;
    }
    memset(e->b_start, 0, nt * sizeof *e->b_start);
    for (size_t k = 0; k < n_ent; k++) {
        const struct step_ent *en = &e->ent[k];
        const struct dj_comp *c = &en->req->comp[en->comp];
        if (en->prefill || !c->n_draft || c->draft_src != DJ_SPEC_EXIT) continue;
        for (size_t j = 0; j < en->n; j++) e->b_start[en->i0 + j] = e->exit_layer;
        memcpy(e->b_hidden + en->i0 * E, c->xh, en->n * E * sizeof *e->b_hidden);
    }
    return true;
}
