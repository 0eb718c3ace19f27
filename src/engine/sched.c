/*
 * sched.c — requests and the step loop of the serving engine (engine.h has
 * the picture; engine_internal.h the types).
 *
 * A step:
 *   1. take the inbox (submitted requests, cancel ids) under the mutex;
 *   2. finish cancelled requests;
 *   3. admit waiting requests in order while their KV reservation fits:
 *      pick a sequence (named session, or the idle engine-owned one with
 *      the longest common prefix, or a new one), reuse its own prefix and
 *      pool blocks (engine_reuse_prompt);
 *   4. (draft.c) run the early-exit draft passes completions asked for;
 *      build one batch: every decoding completion's tokens to feed (the
 *      sampled one, any a logits processor forced, then its draft — the
 *      grammar's, prompt lookup's, the output memo's or early exit's, as
 *      draft.c chose), then prefill chunks
 *      of admitted prompts in admission order up to n_batch tokens; make the
 *      rows writable (parking idle sequences if memory runs short);
 *   5. ctx_forward; advance the sequences and their histories;
 *   6. for every row with logits: the first token of a request whose prompt
 *      is done (forking the sequence for n > 1), or the next token of a
 *      decoding completion: processor mask, sample at output position
 *      n_gen (the counter-based draw), logprobs, stop checks, on_token;
 *      a completion that fed a draft samples each draft position the same
 *      way and keeps the drafts the sampler confirms (verify_drafts);
 *   7. seal full blocks; finish what is done (on_done), release sequences.
 *
 * Exactness: a token's logits do not depend on the batch (ctx_forward's
 * invariant) and its draw depends only on (seed, output position), so every
 * request produces what it would alone, whatever runs beside it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/engine_internal.h"
#include "kv/ckpt.h"
#include "kv/diff.h"
#include "kv/hash.h"
#include "spec/spec.h"

const char *engine_finish_name(enum dj_finish f) {
    switch (f) {
    case DJ_FINISH_STOP: return "stop";
    case DJ_FINISH_LENGTH: return "length";
    case DJ_FINISH_CANCELLED: return "cancelled";
    case DJ_FINISH_ERROR: return "error";
    default: return "none";
    }
}

struct dj_request_params engine_default_request(void) {
    struct dj_request_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 16;
    p.n = 1;
    p.sampling = sampler_default_params();
    p.sampling.temp = 0.0f;
    return p;
}

static double ms_between(int64_t t0, int64_t t1) { return t0 && t1 ? (double)(t1 - t0) / 1000.0 : 0.0; }

static size_t blocks_for(const struct dj_engine *e, size_t n_pos) {
    return (n_pos + e->block_size - 1) / e->block_size;
}

/* ---- request memory ------------------------------------------------------ */

static void req_free(struct dj_engine *e, struct dj_req *q) {
    if (!q) return;
    for (uint32_t i = 0; q->comp && i < q->n_comp; i++) {
        struct dj_comp *c = &q->comp[i];
        sampler_free(c->smp);
        detok_destroy(c->detok);
        stop_free(&c->stop);
        spec_lookup_free(&c->lk);
        free(c->xh);
        if (i > 0 && c->proc_ud && q->proc.free) q->proc.free(c->proc_ud);
        free(c->gen);
    }
    free(q->comp);
    if (q->stop)
        for (size_t i = 0; i < q->p.n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->prompt);
    free(q->bias);
    ovf_free(&q->ovf);
    free(q);
    (void)e;
}

/* A copy of the caller's request, checked; the sampler and stop matcher of
 * completion 0 are made here (the others when the prompt is done). */
static enum dj_status req_create(struct dj_engine *e, const struct dj_request_params *p, struct dj_req **out) {
    const struct dj_hparams *hp = &e->model->hp;
    const size_t n_ctx = e->ctx->p.n_ctx;
    if (p->n_prompt == 0 || !p->prompt) return dj_fail(DJ_ERR_INVALID, "request: empty prompt");
    if (p->n_prompt >= n_ctx && e->p.overflow != DJ_OVERFLOW_PRUNE)
        return dj_fail(DJ_ERR_INVALID, "request: prompt of %zu tokens does not fit the context size %zu (it must leave room for one generated token)",
                       p->n_prompt, n_ctx);
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= hp->n_vocab)
            return dj_fail(DJ_ERR_INVALID, "request: token %d at index %zu is outside the vocabulary (%u)",
                           p->prompt[i], i, hp->n_vocab);
    if (p->max_tokens == 0) return dj_fail(DJ_ERR_INVALID, "request: max_tokens must be at least 1");
    const uint32_t n = p->n ? p->n : 1;
    if (n > 64) return dj_fail(DJ_ERR_INVALID, "request: n = %u completions (at most 64)", n);
    if (n > 1 && p->session) return dj_fail(DJ_ERR_INVALID, "request: n > 1 on a named session");
    if (n > 1 && p->force) return dj_fail(DJ_ERR_INVALID, "request: n > 1 with forced tokens");
    if (p->cache_salt && p->session) return dj_fail(DJ_ERR_INVALID, "request: cache_salt on a named session");
    if (n > 1 && p->proc && !p->proc->fork)
        return dj_fail(DJ_ERR_INVALID, "request: n > 1 with a logits processor that cannot fork");
    if (p->n_probs > 100) return dj_fail(DJ_ERR_INVALID, "request: %u logprobs alternatives (at most 100)", p->n_probs);
    for (size_t i = 0; i < p->sampling.n_logit_bias; i++) {
        const dj_token t = p->sampling.logit_bias[i].tok;
        if (t < 0 || (uint32_t)t >= hp->n_vocab)
            return dj_fail(DJ_ERR_INVALID, "request: logit bias for token %d outside the vocabulary (%u)", t,
                           hp->n_vocab);
    }

    /* --context-overflow prune: the prompt without whole blocks of its middle (overflow.c) */
    const uint64_t root = p->cache_salt ? kv_hash_salt_root(p->cache_salt, strlen(p->cache_salt)) : KV_CHAIN_ROOT;
    struct ovf_state ov = {0};
    dj_token *shortp = NULL;
    size_t n_short = p->n_prompt;
    struct dj_request_params ps;
    if (e->p.overflow == DJ_OVERFLOW_PRUNE) {
        if (p->force) return dj_fail(DJ_ERR_INVALID, "request: forced tokens with --context-overflow prune");
        enum dj_status st = engine_overflow_shorten(e, p, root, &ov, &shortp, &n_short);
        if (st) return st;
        if (shortp) {
            ps = *p;
            ps.prompt = shortp;
            ps.n_prompt = n_short;
            p = &ps;
        }
    }
    struct dj_req *q = calloc(1, sizeof *q);
    if (!q) {
        free(shortp);
        ovf_free(&ov);
        return dj_fail(DJ_ERR_NOMEM, "out of memory queuing a request");
    }
    q->ovf = ov;
    q->r.n_ctx_dropped = ov.n_orig ? ov.n_orig - n_short : 0;
    q->p = *p;
    q->p.n = n;
    q->root = root;
    q->p.cache_salt = NULL; /* the caller's string is not kept */
    q->n_comp = n;
    q->max_gen = p->max_tokens;
    if (q->max_gen > n_ctx - p->n_prompt + 1) q->max_gen = n_ctx - p->n_prompt + 1; /* the last token is not fed */
    q->prompt = shortp ? shortp : malloc(p->n_prompt * sizeof *q->prompt); /* the shortened one: taken */
    q->comp = calloc(n, sizeof *q->comp);
    if (!q->prompt || !q->comp) goto oom;
    if (!shortp) memcpy(q->prompt, p->prompt, p->n_prompt * sizeof *q->prompt);
    q->p.prompt = q->prompt;
    if (p->n_stop) {
        if (!(q->stop = calloc(p->n_stop, sizeof *q->stop))) goto oom;
        for (size_t i = 0; i < p->n_stop; i++) {
            const char *src = p->stop[i] ? p->stop[i] : "";
            if (!(q->stop[i] = malloc(strlen(src) + 1))) goto oom;
            strcpy(q->stop[i], src);
        }
    }
    q->p.stop = (const char *const *)q->stop;
    if (p->sampling.n_logit_bias) {
        if (!(q->bias = malloc(p->sampling.n_logit_bias * sizeof *q->bias))) goto oom;
        memcpy(q->bias, p->sampling.logit_bias, p->sampling.n_logit_bias * sizeof *q->bias);
    }
    q->p.sampling.logit_bias = q->bias;
    if (p->proc) {
        q->proc = *p->proc;
        q->has_proc = true;
    }
    q->p.proc = NULL;
    for (uint32_t i = 0; i < n; i++) {
        q->comp[i].stop_index = -1;
        struct dj_sampler_params sp = q->p.sampling;
        if (i > 0) sp.seed = dj_rng_u64(sp.seed, i);
        enum dj_status st = sampler_create(&sp, hp->n_vocab, &q->comp[i].smp);
        if (st) {
            req_free(e, q);
            return st == DJ_ERR_NOMEM ? dj_fail(st, "out of memory creating a sampler") : st;
        }
        if (!(q->comp[i].detok = detok_create(e->model->vocab, false))) goto oom;
        if (stop_init(&q->comp[i].stop, q->p.stop, q->p.n_stop)) goto oom;
    }
    q->comp[0].proc_ud = q->proc.ud;
    /* KV reservation: prompt + generation (+1 block for a copy on write), and per
     * further completion its generation, its copy of the last prompt block and one spare */
    const size_t gen_pos = q->max_gen - 1;
    q->reserve = blocks_for(e, p->n_prompt + gen_pos) + 1 + (size_t)(n - 1) * (blocks_for(e, gen_pos) + 2);
    const uint32_t capacity = kv_pool_params(e->pool)->max_blocks; /* constant: safe from any thread */
    if (q->reserve > capacity) {
        const size_t reserve = q->reserve;
        req_free(e, q);
        return dj_fail(DJ_ERR_NOMEM,
                       "KV budget too small: %u blocks of %zu KiB (%.1f MiB) cannot hold this request (%zu prompt + %zu "
                       "generated positions x %u completions = %zu blocks of %u); raise --kv-budget or lower max tokens",
                       capacity, e->block_bytes / 1024, (double)capacity * (double)e->block_bytes / 1048576.0,
                       p->n_prompt, gen_pos, n, reserve, e->block_size);
    }
    *out = q;
    return DJ_OK;
oom:
    req_free(e, q);
    return dj_fail(DJ_ERR_NOMEM, "out of memory queuing a request");
}

/* ---- the thread-safe side ------------------------------------------------ */

enum dj_status engine_submit(struct dj_engine *e, const struct dj_request_params *p, uint64_t *id) {
    struct dj_req *q = NULL;
    enum dj_status st = req_create(e, p, &q);
    if (st) return st;
    q->t_submit = dj_time_us();
    pthread_mutex_lock(&e->mu);
    q->id = e->next_id++;
    if (e->inbox_tail) e->inbox_tail->next = q;
    else e->inbox = q;
    e->inbox_tail = q;
    atomic_fetch_add(&e->n_pending, 1);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (id) *id = q->id;
    return DJ_OK;
}

void engine_cancel(struct dj_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (e->n_cancels == e->cap_cancels) {
        size_t cap = e->cap_cancels ? e->cap_cancels * 2 : 16;
        uint64_t *nc = realloc(e->cancels, cap * sizeof *nc);
        if (!nc) { /* cannot queue it: the request runs on (a cancel is a request, not a guarantee) */
            pthread_mutex_unlock(&e->mu);
            dj_log(DJ_LOG_WARN, "out of memory queuing the cancellation of request %llu", (unsigned long long)id);
            return;
        }
        e->cancels = nc;
        e->cap_cancels = cap;
    }
    e->cancels[e->n_cancels++] = id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

size_t engine_n_pending(struct dj_engine *e) { return atomic_load(&e->n_pending); }

size_t engine_n_running(const struct dj_engine *e) {
    size_t n = 0;
    for (const struct dj_req *r = e->running; r; r = r->next) n++;
    return n;
}

void engine_wait_work(struct dj_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (!e->inbox && !e->n_cancels && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- finishing ----------------------------------------------------------- */

static void list_remove(struct dj_req **head, struct dj_req *q) {
    for (struct dj_req **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            q->next = NULL;
            return;
        }
}

/* Gives a completion's sequence back: with dedup its full exact blocks are
 * sealed (cached for others); a failed or cancelled one drops every pin, a
 * finished one stays idle with its pins (for the next turn's own prefix). */
static void release_session(struct dj_engine *e, struct dj_session *s, bool drop) {
    if (!s) return;
    if (e->cfg.dedup_enabled) seal_blocks(e, s);
    s->busy = NULL;
    s->last_used = e->n_step;
    if (drop) {
        if (s->anon) engine_session_destroy(s);
        else session_truncate(s, 0);
    }
}

static void req_finish(struct dj_engine *e, struct dj_req *q) {
    const int64_t now = dj_time_us();
    const bool admitted = q->state != REQ_WAITING;
    if (admitted) {
        DJ_ASSERT(e->reserved >= q->reserve);
        e->reserved -= q->reserve;
    }
    /* the turn's attention statistics: the policy decides on completion 0's sequence */
    if (q->n_comp && q->comp[0].s && q->comp[0].s->attn && q->comp[0].finish != DJ_FINISH_NONE &&
        q->comp[0].finish != DJ_FINISH_CANCELLED && q->comp[0].finish != DJ_FINISH_ERROR && q->state == REQ_DECODE)
        engine_attn_end(e, q->comp[0].s, &q->r);
    for (uint32_t i = 0; i < q->n_comp; i++) {
        struct dj_comp *c = &q->comp[i];
        if (c->finish == DJ_FINISH_NONE) {
            c->finish = q->cancel ? DJ_FINISH_CANCELLED : DJ_FINISH_ERROR;
            c->t_done_ms = ms_between(q->t_first ? q->t_first : now, now);
        }
        struct dj_turn_result r = q->r;
        r.id = q->id;
        r.index = i;
        r.finish = c->finish;
        r.status = c->finish == DJ_FINISH_ERROR ? (q->err ? q->err : DJ_ERR_INVALID) : DJ_OK;
        if (c->finish == DJ_FINISH_ERROR) snprintf(r.error, sizeof r.error, "%s", q->errmsg);
        r.stop_index = c->stop_index;
        r.n_prompt = q->p.n_prompt;
        r.n_cached = r.n_reused_own + r.n_reused_pool + r.n_reused_approx;
        r.n_gen = c->n_gen;
        r.n_forced = c->n_forced;
        r.n_drafted = c->n_drafted;
        r.n_draft_accepted = c->n_draft_accepted;
        r.spec = c->sc;
        spec_counts_add(&e->spec_tot, &c->sc);
        /* the output memo learns what finished completions wrote (the sequence's tokens:
         * the forced ones when teacher-forced); a cache salt keeps its outputs private */
        if (e->memo && q->root == KV_CHAIN_ROOT && c->n_gen > 0 &&
            (c->finish == DJ_FINISH_STOP || c->finish == DJ_FINISH_LENGTH))
            spec_memo_record(e->memo, q->p.force ? q->p.force : c->gen, c->n_gen);
        r.t_queue_ms = ms_between(q->t_submit, q->t_admit ? q->t_admit : now);
        r.t_ttft_ms = ms_between(q->t_submit, q->t_first);
        r.t_decode_ms = c->t_done_ms;
        const bool drop = c->finish == DJ_FINISH_CANCELLED || c->finish == DJ_FINISH_ERROR;
        struct dj_session *s = c->s;
        if (s && !drop && e->model->hp.rs_floats) engine_rs_checkpoint(e, s); /* where an appending next turn starts */
        c->s = NULL;
        /* completion 0 of an unfinished prefill shares nothing yet */
        release_session(e, s, drop);
        if (q->p.on_done) q->p.on_done(q->p.ud, &r);
    }
    e->stats.precompute_rope_hits = e->ctx->rope_hits; /* counted by the forward pass */
    if (e->cfg.stats_enabled) llama_opt_stats_print_turn(e->stats_out, &e->stats_last, &e->stats);
    list_remove(admitted ? &e->running : &e->waiting, q);
    req_free(e, q);
    atomic_fetch_sub(&e->n_pending, 1);
}

/* A request-wide failure: every unfinished completion ends with it. */
static void req_fail(struct dj_req *q, enum dj_status st, const char *msg) {
    if (!q->err) {
        q->err = st ? st : DJ_ERR_INVALID;
        snprintf(q->errmsg, sizeof q->errmsg, "%s", msg && *msg ? msg : "request failed");
    }
    for (uint32_t i = 0; i < q->n_comp; i++)
        if (q->comp[i].finish == DJ_FINISH_NONE) q->comp[i].finish = DJ_FINISH_ERROR;
}

static bool req_done(const struct dj_req *q) {
    for (uint32_t i = 0; i < q->n_comp; i++)
        if (q->comp[i].finish == DJ_FINISH_NONE) return false;
    return true;
}

void engine_drop_requests(struct dj_engine *e) {
    struct dj_req *lists[3] = {e->inbox, e->waiting, e->running};
    for (int l = 0; l < 3; l++)
        for (struct dj_req *q = lists[l]; q;) {
            struct dj_req *next = q->next;
            for (uint32_t i = 0; i < q->n_comp; i++)
                if (q->comp[i].s) {
                    q->comp[i].s->busy = NULL;
                    q->comp[i].s = NULL;
                }
            req_free(e, q);
            q = next;
        }
    e->inbox = e->inbox_tail = e->waiting = e->running = NULL;
}

/* ---- tokens out ---------------------------------------------------------- */

static bool text_append(struct dj_engine *e, size_t *n, const char *s, size_t len) {
    if (*n + len + 1 > e->text_cap) {
        size_t cap = (*n + len + 1) * 2;
        char *nt = realloc(e->text, cap);
        if (!nt) return false;
        e->text = nt;
        e->text_cap = cap;
    }
    memcpy(e->text + *n, s, len);
    *n += len;
    e->text[*n] = 0;
    return true;
}

/* Records one generated token of completion c: processor and sampler
 * history, stop conditions, the text, the on_token event.  Returns false
 * when the completion is finished (or failed). */
static bool emit(struct dj_engine *e, struct dj_req *q, uint32_t ci, dj_token tok, bool forced, float logprob,
                 size_t n_top) {
    struct dj_comp *c = &q->comp[ci];
    if (c->n_gen == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        dj_token *ng = realloc(c->gen, cap * sizeof *ng);
        if (!ng) {
            req_fail(q, DJ_ERR_NOMEM, "out of memory recording generated tokens");
            return false;
        }
        c->gen = ng;
        c->cap = cap;
    }
    const size_t pos = c->n_gen;
    c->gen[c->n_gen++] = tok;
    if (forced) c->n_forced++;
    if (c->lk_on) engine_spec_note_token(e, c, pos, q->p.force ? q->p.force[pos] : tok);
    if (q->has_proc && (!q->proc.active || q->proc.active(c->proc_ud))) e->stats.schema_tokens_total++;
    if (!q->t_first) q->t_first = dj_time_us();
    if (q->has_proc && q->proc.accept && q->proc.accept(c->proc_ud, tok) != DJ_OK) {
        req_fail(q, DJ_ERR_INVALID, dj_last_error());
        return false;
    }
    sampler_accept(c->smp, tok);

    size_t n_text = 0;
    bool ok = true;
    const bool eog = !q->p.ignore_eos && vocab_is_eog(e->model->vocab, tok);
    if (eog) {
        c->finish = DJ_FINISH_STOP;
    } else {
        size_t n_piece, n_out;
        const char *piece = detok_push(c->detok, tok, &n_piece), *out;
        if (stop_feed(&c->stop, piece, n_piece, &out, &n_out)) {
            c->finish = DJ_FINISH_STOP;
            c->stop_index = (int)c->stop.which;
        }
        ok = text_append(e, &n_text, out, n_out);
        if (c->finish == DJ_FINISH_NONE && c->n_gen >= q->max_gen) c->finish = DJ_FINISH_LENGTH;
    }
    /* the end (an end token or the length limit, not a stop string): what the detokenizer and
     * the stop matcher hold is text — unless the detokenizer's tail completes a stop string */
    if (c->finish == DJ_FINISH_LENGTH || (c->finish == DJ_FINISH_STOP && c->stop_index < 0)) {
        size_t n_flush, n_out;
        const char *fl = detok_flush(c->detok, &n_flush), *out;
        if (stop_feed(&c->stop, fl, n_flush, &out, &n_out)) {
            c->finish = DJ_FINISH_STOP;
            c->stop_index = (int)c->stop.which;
        }
        ok = ok && text_append(e, &n_text, out, n_out);
        if (c->stop_index < 0) {
            out = stop_flush(&c->stop, &n_out);
            ok = ok && text_append(e, &n_text, out, n_out);
        }
    }
    if (!ok) {
        req_fail(q, DJ_ERR_NOMEM, "out of memory assembling streamed text");
        return false;
    }
    if (c->finish != DJ_FINISH_NONE) c->t_done_ms = ms_between(q->t_first, dj_time_us());
    if (q->p.on_token) {
        struct dj_token_event ev = {q->id, ci, pos, tok, forced, e->text ? e->text : "", n_text,
                                    forced ? 0.0f : logprob, n_top ? e->top : NULL, forced ? 0 : n_top};
        q->p.on_token(q->p.ud, &ev);
    }
    return c->finish == DJ_FINISH_NONE;
}

/* Samples the token at output position n_gen of completion ci from a logits
 * row (the processor's mask, the counter-based draw, logprobs) and emits it.
 * Returns false when the completion ended or failed. */
static bool sample_emit(struct dj_engine *e, struct dj_req *q, uint32_t ci, const float *logits, dj_token *out) {
    struct dj_comp *c = &q->comp[ci];
    const size_t V = e->model->hp.n_vocab;
    if (q->p.on_logits) q->p.on_logits(q->p.logits_ud ? q->p.logits_ud : q->p.ud, logits, V);
    const float *l = logits;
    if (q->has_proc && q->proc.apply) {
        memcpy(e->work, logits, V * sizeof *e->work);
        if (q->proc.apply(c->proc_ud, e->work, V) != DJ_OK) {
            req_fail(q, DJ_ERR_INVALID, dj_last_error());
            return false;
        }
        l = e->work;
    }
    const dj_token tok = sampler_sample(c->smp, l, c->n_gen);
    float lp = 0.0f;
    size_t n_top = 0;
    if (q->p.logprobs || q->p.n_probs) lp = sampler_logprobs(l, V, tok, e->top, q->p.n_probs, &n_top);
    *out = tok;
    return emit(e, q, ci, tok, false, lp, n_top);
}

/* Queues what completion ci feeds next: tok (just emitted), then — with
 * schema skipping on — the tokens the processor forces after it (emitted
 * now: no logits are computed for their positions) and its drafts (emitted
 * only once verified, see verify_drafts).  Drafts never run past the
 * request's last position (its KV reservation). */
static void queue_feed(struct dj_engine *e, struct dj_req *q, uint32_t ci, dj_token tok) {
    struct dj_comp *c = &q->comp[ci];
    const size_t V = e->model->hp.n_vocab;
    c->n_feed = 0;
    c->n_draft = 0;
    c->feed[c->n_feed++] = q->p.force ? q->p.force[c->n_gen - 1] : tok;
    c->exit_k = 0;
    c->mtp_k = 0;
    if (q->has_proc && e->cfg.schema_skip_enabled && q->proc.forced) {
        dj_token f[DJ_FEED_MAX];
        size_t nf;
        while (c->n_feed < DJ_FEED_MAX && (nf = q->proc.forced(c->proc_ud, f, DJ_FEED_MAX - c->n_feed)) > 0) {
            for (size_t i = 0; i < nf && c->n_feed < DJ_FEED_MAX; i++) {
                if (f[i] < 0 || (uint32_t)f[i] >= V) {
                    req_fail(q, DJ_ERR_INVALID, "logits processor forced a token outside the vocabulary");
                    return;
                }
                e->stats.schema_tokens_skipped++;
                if (!emit(e, q, ci, f[i], true, 0.0f, 0)) return;
                c->feed[c->n_feed++] = f[i];
            }
        }
    }
    /* fed positions after this step: every generated token but none past max_gen - 1 */
    const size_t room = q->max_gen - 1 > c->n_gen ? q->max_gen - 1 - c->n_gen : 0;
    if (room == 0 || c->n_feed >= DJ_FEED_MAX) return;
    size_t cap = DJ_FEED_MAX - c->n_feed;
    if (cap > room) cap = room;
    if (e->rs_draft_max && cap > e->rs_draft_max) cap = e->rs_draft_max; /* hybrid: rollback states */
    size_t nd = 0;
    if (q->has_proc && e->cfg.schema_skip_enabled && q->proc.draft && !q->p.force) {
        nd = q->proc.draft(c->proc_ud, c->feed + c->n_feed, cap);
        if (nd > cap) nd = cap;
        for (size_t i = 0; i < nd; i++)
            if (c->feed[c->n_feed + i] < 0 || (uint32_t)c->feed[c->n_feed + i] >= V) {
                req_fail(q, DJ_ERR_INVALID, "logits processor drafted a token outside the vocabulary");
                return;
            }
        if (nd) {
            engine_feed_draft(c, DJ_SPEC_GRAMMAR, nd);
            return;
        }
    }
    /* a forced string's tokens are the strongest evidence there is; else the speculative sources */
    if (e->p.spec.sources) engine_spec_choose(e, q, c, c->feed + c->n_feed, cap);
}

/* Samples the next token of completion ci from its logits row and queues
 * what it feeds next. */
static void next_token(struct dj_engine *e, struct dj_req *q, uint32_t ci, const float *logits) {
    dj_token tok;
    q->comp[ci].n_feed = 0;
    q->comp[ci].n_draft = 0;
    if (sample_emit(e, q, ci, logits, &tok)) queue_feed(e, q, ci, tok);
}

/* The step fed completion ci's drafts d[0..nd) after its last real token and
 * computed logits for the nd + 1 positions from that token on (rows).  Row j
 * is the distribution after d[0..j): sample it exactly as without drafts
 * (same mask, same draw for that output position); while the sample equals
 * d[j] the draft stands (its K/V are already in place) and row j + 1 is
 * valid; at the first difference, or after the last row, the sampled token
 * is the real next token and the fed drafts after it are rolled back. */
static void verify_drafts(struct dj_engine *e, struct dj_req *q, uint32_t ci, const float *rows) {
    struct dj_comp *c = &q->comp[ci];
    const size_t V = e->model->hp.n_vocab;
    const size_t nd = c->n_draft;
    dj_token d[DJ_FEED_MAX];
    memcpy(d, c->feed + c->n_feed - nd, nd * sizeof *d);
    struct dj_session *s = c->s;
    const size_t pos0 = s->seq.n_pos - nd; /* where d[0] was written */
    c->n_feed = 0;
    c->n_draft = 0;
    const enum dj_spec_src src = c->draft_src;
    for (size_t j = 0; j <= nd; j++) {
        dj_token tok;
        const bool live = sample_emit(e, q, ci, rows + j * V, &tok);
        /* teacher forcing (the simulation of a model that writes the forced text): the
         * sequence continues with the forced token, so that is what a draft must match */
        const dj_token next = q->p.force && live ? q->p.force[c->n_gen - 1] : tok;
        if (live && j < nd && next == d[j]) {
            c->n_draft_accepted++;
            c->sc.accepted[src]++;
            c->sc.pos_accepted[j < DJ_SPEC_POS_MAX ? j : DJ_SPEC_POS_MAX - 1]++;
            if (src == DJ_SPEC_GRAMMAR) e->stats.schema_tokens_inferred++;
            if (src == DJ_SPEC_MEMO) e->stats.memo_tokens_skipped++;
            continue;
        }
        if (src == DJ_SPEC_EXIT || src == DJ_SPEC_MTP) /* no shadows: not free */
            spec_policy_observe(&e->pol, src, 0, nd, j);
        if (pos0 + j < s->seq.n_pos) {
            kv_seq_truncate(&s->seq, pos0 + j);
            kv_history_truncate(&s->hist, pos0 + j);
            if (s->n_exact > pos0 + j) s->n_exact = pos0 + j;
            /* hybrid: the recurrent state after position pos0 + j - 1, kept by the forward pass */
            if (e->rs_snap && kv_seq_rs_set(&s->seq, e->rs_snap + (c->snap0 + j) * e->rs_floats)) {
                req_fail(q, DJ_ERR_NOMEM, dj_last_error());
                return;
            }
        }
        if (live) queue_feed(e, q, ci, tok);
        return;
    }
}

/* The prompt's logits are ready: fork the further completions (their
 * sequences share the prompt's blocks, copy on write), then every
 * completion samples its first token. */
static void prompt_done(struct dj_engine *e, struct dj_req *q, const float *logits) {
    q->r.t_prefill_ms = ms_between(q->t_admit, dj_time_us());
    q->state = REQ_DECODE;
    struct dj_session *s0 = q->comp[0].s;
    /* Tier 2: skipped blocks the probe found this prompt needs come back now, and the prompt's
     * last position is computed again with them: its logits choose the first token (not on
     * hybrid models: their recurrent state has absorbed the position already) */
    if (s0 && s0->attn && e->prune.prune && s0->attn->n_skip && !e->model->hp.rs_floats &&
        s0->seq.n_pos == q->p.n_prompt) {
        const size_t nr = kv_attn_probe_restore(s0->attn, e->prune.threshold);
        if (nr) {
            e->stats.attn_blocks_restored += nr;
            q->r.n_attn_restored += nr * e->block_size;
            s0->attn->probe_pos = KV_ATTN_NO_PROBE; /* its statistics are in */
            const dj_token tok = q->prompt[q->p.n_prompt - 1];
            const uint32_t pos = (uint32_t)(q->p.n_prompt - 1);
            ctx_set_seq(e->ctx, &s0->seq);
            if (ctx_decode_at(e->ctx, &tok, &pos, 1, e->logits) == DJ_OK) logits = e->logits;
            ctx_set_seq(e->ctx, NULL);
        }
    }
    for (uint32_t i = 1; i < q->n_comp; i++) {
        struct dj_comp *c = &q->comp[i];
        struct dj_session *s = NULL;
        enum dj_status st = engine_new_session(e, true, &s);
        if (!st) kv_history_set_root(&s->hist, s0->hist.root);
        if (!st && (st = kv_seq_clone(&s->seq, &s0->seq)) != DJ_OK) kv_seq_init(&s->seq, e->pool);
        if (!st) st = engine_attn_fork(e, s0, s);
        if (!st) st = kv_history_append(&s->hist, s0->hist.tok, s0->hist.n_tok);
        if (st) {
            if (s) engine_session_destroy(s);
            req_fail(q, st, dj_last_error());
            return;
        }
        s->n_exact = s0->n_exact;
        s->busy = q;
        c->s = s;
        if (q->has_proc && !(c->proc_ud = q->proc.fork(q->proc.ud, i))) {
            req_fail(q, DJ_ERR_NOMEM, "logits processor: fork failed");
            return;
        }
    }
    if ((e->p.spec.sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)) && !e->exit_layer && e->model->hp.n_layer > 1)
        engine_exit_calibrate(e, s0);
    /* the speculative sources read the completion's context: prompt, then output */
    if (e->p.spec.sources & (DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO)))
        for (uint32_t i = 0; i < q->n_comp; i++) {
            struct dj_comp *c = &q->comp[i];
            c->lk_on = spec_lookup_append(&c->lk, q->prompt, q->p.n_prompt) == DJ_OK;
        }
    for (uint32_t i = 0; i < q->n_comp; i++) next_token(e, q, i, logits);
}

/* ---- admission ----------------------------------------------------------- */

/* The idle engine-owned sequence of the cache namespace `root` with the
 * longest common prefix with the prompt (most recently used on ties), or NULL
 * if none shares a token. */
static struct dj_session *match_session(struct dj_engine *e, uint64_t root, const dj_token *prompt, size_t n) {
    struct dj_session *best = NULL;
    size_t best_n = 0;
    for (struct dj_session *s = e->sessions; s; s = s->next) {
        if (!s->anon || s->busy || s->hist.n_tok == 0 || s->hist.root != root) continue;
        const size_t l = diff_common_prefix(s->hist.tok, s->hist.n_tok, prompt, n);
        if (l > best_n || (l == best_n && l > 0 && best && s->last_used > best->last_used)) {
            best = s;
            best_n = l;
        }
    }
    return best;
}

/* Returns false when q must keep waiting. */
static bool admit(struct dj_engine *e, struct dj_req *q) {
    struct kv_pool_stats ps;
    kv_pool_get_stats(e->pool, &ps);
    if (e->reserved + q->reserve > ps.capacity) return false;
    if (e->p.n_running_max) {
        size_t n_run = 0;
        for (struct dj_req *r = e->running; r; r = r->next) n_run++;
        if (n_run >= e->p.n_running_max) return false;
    }
    struct dj_session *s = q->p.session;
    if (s && s->busy) return false;
    if (!s && e->cfg.diff_enabled) s = match_session(e, q->root, q->prompt, q->p.n_prompt);
    if (!s) {
        enum dj_status st = engine_new_session(e, true, &s);
        if (st) {
            req_fail(q, st, dj_last_error());
            return true;
        }
        kv_history_set_root(&s->hist, q->root);
    }
    list_remove(&e->waiting, q);
    q->next = NULL;
    struct dj_req **tail = &e->running;
    while (*tail) tail = &(*tail)->next;
    *tail = q;
    q->state = REQ_PREFILL;
    q->t_admit = dj_time_us();
    e->reserved += q->reserve;
    s->busy = q;
    s->last_used = e->n_step;
    q->comp[0].s = s;
    kv_pool_next_turn(e->pool);
    bool prefilled = false;
    enum dj_status st = e->attn_on ? engine_attn_begin(e, s, q->p.n_prompt) : DJ_OK;
    if (!st) st = engine_reuse_prompt(e, s, q->prompt, q->p.n_prompt, &q->r, &prefilled);
    if (st) {
        req_fail(q, st, dj_last_error());
        return true;
    }
    ovf_free(&s->ovf); /* what this prompt dropped (nothing: it fit) is the session's memory now */
    s->ovf = q->ovf;
    memset(&q->ovf, 0, sizeof q->ovf);
    e->stats.ctx_tokens_dropped += q->r.n_ctx_dropped;
    if (s->attn) { /* what this turn does not attend to (the prefix kept its skip set) */
        q->r.n_attn_skipped = s->attn->n_skip * e->block_size;
        e->stats.attn_tokens_skipped += q->r.n_attn_skipped;
    }
    if (prefilled) prompt_done(e, q, e->logits);
    return true;
}

/* ---- the step ------------------------------------------------------------- */

static bool batch_reserve(struct dj_engine *e, size_t n_tok, size_t n_ent) {
    if (n_tok > e->b_cap) {
        size_t cap = n_tok * 2;
        dj_token *t = realloc(e->b_tok, cap * sizeof *t);
        if (t) e->b_tok = t;
        uint32_t *p = realloc(e->b_pos, cap * sizeof *p);
        if (p) e->b_pos = p;
        uint32_t *o = realloc(e->b_out, cap * sizeof *o);
        if (o) e->b_out = o;
        struct kv_seq **s = realloc(e->b_seq, cap * sizeof *s);
        if (s) e->b_seq = s;
        if (!t || !p || !o || !s) return false;
        e->b_cap = cap;
    }
    if (n_ent > e->ent_cap) {
        size_t cap = n_ent * 2;
        struct step_ent *ne = realloc(e->ent, cap * sizeof *ne);
        if (!ne) return false;
        e->ent = ne;
        e->ent_cap = cap;
    }
    return true;
}

/* Makes n more positions of s writable, parking idle sequences while memory
 * is short. */
enum dj_status engine_prepare_rows(struct dj_engine *e, struct dj_req *q, struct dj_session *s, size_t n) {
    enum dj_status st;
    while ((st = kv_seq_prepare(&s->seq, n)) == DJ_ERR_NOMEM && engine_park_one(e, s)) q->r.n_parked++;
    return st;
}

static void add_rows(struct dj_engine *e, size_t *nt, struct dj_session *s, const dj_token *tok, size_t n) {
    for (size_t i = 0; i < n; i++) {
        e->b_tok[*nt] = tok[i];
        e->b_pos[*nt] = (uint32_t)(s->seq.n_pos + i);
        e->b_seq[*nt] = &s->seq;
        (*nt)++;
    }
}

/* Hybrid models: the batch rows after which the forward pass keeps the sequence's
 * recurrent state (dj_batch.rs_snap): every fed token but the last of a completion
 * verifying drafts (the state a rejection rolls back to: verify_drafts), and in prompt
 * chunks the positions that get a checkpoint: every rs_ckpt_interval blocks, and one
 * token before the prompt's end (a prompt sent again computes its last token from
 * there; the end itself is the state the step leaves).  Returns false when there is no
 * memory for the drafts' states (their requests fail); prompt checkpoints are
 * optional and dropped instead. */
/* Whether the state after prompt position p (of a prompt of n) is a checkpoint inside the
 * prompt: the interval's (every positions; 0 = none) before the end, and n - 1. */
static inline bool ckpt_at(size_t p, size_t n, size_t every) {
    return p + 2 == n || (every && (p + 1) % every == 0 && p + 1 < n);
}

static bool step_snapshots(struct dj_engine *e, size_t nt, size_t n_ent) {
    const size_t RS = e->rs_floats, bs = e->block_size;
    const size_t every = (size_t)e->cfg.rs_ckpt_interval * bs;
    e->n_rs_puts = 0;
    if (nt > e->b_snap_cap) {
        float **ns = realloc(e->b_snap, nt * sizeof *ns);
        if (!ns) return false;
        e->b_snap = ns;
        e->b_snap_cap = nt;
    }
    for (size_t i = 0; i < nt; i++) e->b_snap[i] = NULL;
    size_t n_draft_rows = 0, n_rows = 0;
    for (size_t k = 0; k < n_ent; k++) {
        const struct step_ent *en = &e->ent[k];
        if (!en->prefill) {
            n_draft_rows += en->req->comp[en->comp].n_draft;
            continue;
        }
        if (!e->ckpt && !e->rs_store) continue;
        const size_t n = en->req->p.n_prompt, p0 = e->b_pos[en->i0];
        for (size_t p = p0; p < p0 + en->n; p++) n_rows += ckpt_at(p, n, every);
    }
    n_rows += n_draft_rows;
    if (n_rows > e->rs_snap_cap) {
        float *nr = realloc(e->rs_snap, n_rows * RS * sizeof *nr);
        if (nr) {
            e->rs_snap = nr;
            e->rs_snap_cap = n_rows;
        } else if (n_draft_rows > e->rs_snap_cap) {
            return false;
        } else {
            n_rows = n_draft_rows; /* the drafts' states fit: no prompt checkpoints this step */
        }
    }
    size_t row = 0;
    for (size_t k = 0; k < n_ent; k++) { /* drafts: row snap0 + j = the state after fed token n_feed - nd - 1 + j */
        const struct step_ent *en = &e->ent[k];
        if (en->prefill) continue;
        struct dj_comp *c = &en->req->comp[en->comp];
        c->snap0 = row;
        for (size_t j = 0; j < c->n_draft; j++) e->b_snap[en->i0 + en->n - c->n_draft - 1 + j] = e->rs_snap + (row++) * RS;
    }
    if (row == n_rows) return true;
    if (n_rows - row > e->rs_puts_cap) {
        struct rs_put *np = realloc(e->rs_puts, (n_rows - row) * sizeof *np);
        if (!np) return true;
        e->rs_puts = np;
        e->rs_puts_cap = n_rows - row;
    }
    for (size_t k = 0; k < n_ent; k++) {
        const struct step_ent *en = &e->ent[k];
        if (!en->prefill) continue;
        const size_t n = en->req->p.n_prompt, p0 = e->b_pos[en->i0];
        for (size_t p = p0; p < p0 + en->n; p++)
            if (ckpt_at(p, n, every)) {
                e->b_snap[en->i0 + (p - p0)] = e->rs_snap + row * RS;
                e->rs_puts[e->n_rs_puts++] = (struct rs_put){en->req, p + 1, row++};
            }
    }
    return true;
}

size_t engine_step(struct dj_engine *e) {
    e->n_step++;
    /* 1. the inbox */
    pthread_mutex_lock(&e->mu);
    struct dj_req *in = e->inbox;
    e->inbox = e->inbox_tail = NULL;
    for (size_t i = 0; i < e->n_cancels; i++) {
        struct dj_req *lists[3] = {in, e->waiting, e->running};
        for (int l = 0; l < 3; l++)
            for (struct dj_req *q = lists[l]; q; q = q->next)
                if (q->id == e->cancels[i]) q->cancel = true;
    }
    e->n_cancels = 0;
    pthread_mutex_unlock(&e->mu);
    struct dj_req **tail = &e->waiting;
    while (*tail) tail = &(*tail)->next;
    *tail = in;

    /* 2. cancelled and failed requests */
    for (int l = 0; l < 2; l++)
        for (struct dj_req *q = l ? e->running : e->waiting, *next; q; q = next) {
            next = q->next;
            if (q->cancel || q->err) req_finish(e, q);
        }

    /* 3. admission, in order */
    for (struct dj_req *q = e->waiting, *next; q; q = next) {
        next = q->next;
        if (!admit(e, q)) {
            if (!q->p.session) break; /* FIFO: later ones wait behind it (a busy named session does not block) */
            continue;
        }
        if (q->err || req_done(q)) req_finish(e, q);
    }

    /* early-exit drafts first: the batch below verifies them */
    if (e->exit_layer) engine_exit_drafts(e);
    if (e->mtp) engine_mtp_drafts(e);

    /* 4. the batch: decode tokens first, then prefill chunks */
    size_t nt = 0, n_ent = 0, n_out = 0;
    size_t n_dec = 0;
    for (struct dj_req *q = e->running; q; q = q->next)
        if (q->state == REQ_DECODE)
            for (uint32_t i = 0; i < q->n_comp; i++) n_dec += q->comp[i].finish == DJ_FINISH_NONE ? q->comp[i].n_feed : 0;
    /* prompts get what the decode tokens leave of n_batch, but at least a quarter of it: many
     * decoding sequences must not starve a waiting prompt */
    size_t budget = e->p.n_batch > n_dec ? e->p.n_batch - n_dec : 0;
    if (budget < e->p.n_batch / 4) budget = e->p.n_batch / 4 ? e->p.n_batch / 4 : 1;
    for (struct dj_req *q = e->running; q; q = q->next) {
        if (q->err) continue;
        if (q->state == REQ_DECODE) {
            for (uint32_t i = 0; i < q->n_comp; i++) {
                struct dj_comp *c = &q->comp[i];
                if (c->finish != DJ_FINISH_NONE || c->n_feed == 0) continue;
                if (!batch_reserve(e, nt + c->n_feed, n_ent + 1)) {
                    req_fail(q, DJ_ERR_NOMEM, "out of memory building a batch");
                    break;
                }
                enum dj_status st = engine_prepare_rows(e, q, c->s, c->n_feed);
                if (st) {
                    req_fail(q, st, dj_last_error());
                    break;
                }
                /* logits for the last real token and every draft */
                e->ent[n_ent++] = (struct step_ent){q, i, nt, c->n_feed, false, (int64_t)n_out};
                for (size_t j = c->n_feed - c->n_draft - 1; j < c->n_feed; j++) e->b_out[n_out++] = (uint32_t)(nt + j);
                add_rows(e, &nt, c->s, c->feed, c->n_feed);
            }
        }
    }
    for (struct dj_req *q = e->running; q; q = q->next) {
        if (q->err || q->state != REQ_PREFILL) continue;
        struct dj_session *s = q->comp[0].s;
        const size_t rem = q->p.n_prompt - s->seq.n_pos;
        size_t chunk = e->p.chunked_prefill ? (rem < budget ? rem : budget) : rem;
        if (chunk == 0) continue;
        if (!batch_reserve(e, nt + chunk, n_ent + 1)) {
            req_fail(q, DJ_ERR_NOMEM, "out of memory building a batch");
            continue;
        }
        enum dj_status st = engine_prepare_rows(e, q, s, chunk);
        if (st) {
            req_fail(q, st, dj_last_error());
            continue;
        }
        const bool last = chunk == rem;
        e->ent[n_ent++] = (struct step_ent){q, 0, nt, chunk, true, last ? (int64_t)n_out : -1};
        if (last) e->b_out[n_out++] = (uint32_t)(nt + chunk - 1);
        add_rows(e, &nt, s, q->prompt + s->seq.n_pos, chunk);
        budget = budget > chunk ? budget - chunk : 0;
        if (!e->p.chunked_prefill) budget = 0;
    }

    /* 5. the forward pass */
    if (nt > 0) {
        const size_t V = e->model->hp.n_vocab;
        if (n_out > e->b_logits_rows) {
            float *nl = realloc(e->b_logits, n_out * V * sizeof *nl);
            if (nl) {
                e->b_logits = nl;
                e->b_logits_rows = n_out;
            }
        }
        struct dj_batch b = {nt, e->b_tok, e->b_pos, e->b_seq, n_out, e->b_out, NULL, NULL, NULL};
        if (e->model->hp.rs_floats) {
            if (step_snapshots(e, nt, n_ent)) {
                b.rs_snap = e->b_snap;
            } else {
                for (size_t k = 0; k < n_ent; k++)
                    if (!e->ent[k].prefill && e->ent[k].req->comp[e->ent[k].comp].n_draft)
                        req_fail(e->ent[k].req, DJ_ERR_NOMEM, "out of memory for the recurrent states of a draft");
                b.rs_snap = NULL;
                e->n_rs_puts = 0;
            }
        }
        bool x_oom = false;
        if (e->exit_layer && engine_exit_rows(e, nt, n_ent, &x_oom)) {
            b.start_layer = e->b_start;
            b.hidden = e->b_hidden;
        }
        const int64_t t0 = dj_time_us();
        enum dj_status st = n_out > e->b_logits_rows ? dj_fail(DJ_ERR_NOMEM, "out of memory for %zu logits rows", n_out)
                             : x_oom ? dj_fail(DJ_ERR_NOMEM, "out of memory for the early-exit rows of %zu tokens", nt)
                                     : ctx_forward(e->ctx, &b, e->b_logits);
        /* the speculation policy's cost model: passes of decode rows (and drafts) only */
        size_t n_plain = 0;
        bool any_prefill = false;
        for (size_t k = 0; k < n_ent; k++) {
            const struct step_ent *en = &e->ent[k];
            if (en->prefill) any_prefill = true;
            else n_plain += en->n - en->req->comp[en->comp].n_draft;
        }
        e->n_forward_prefill += any_prefill;
        if (!st && !any_prefill) {
            spec_policy_time(&e->pol, nt, (double)(dj_time_us() - t0) / 1000.0);
            e->n_rows_last = n_plain;
        }
        e->n_forward++;
        e->n_forward_tok += nt;
        for (size_t k = 0; k < n_ent; k++) {
            struct step_ent *en = &e->ent[k];
            struct dj_req *q = en->req;
            struct dj_session *s = q->comp[en->comp].s;
            if (st) {
                s->seq.rs_pos = KV_RS_NONE; /* a recurrent layer may have run part of the batch */
                req_fail(q, st, dj_last_error());
                continue;
            }
            const size_t base = s->seq.n_pos;
            kv_seq_advance(&s->seq, en->n);
            enum dj_status hs = kv_history_append(&s->hist, e->b_tok + en->i0, en->n);
            if (hs) {
                kv_seq_truncate(&s->seq, base);
                req_fail(q, hs, dj_last_error());
                continue;
            }
            /* computed after exact rows only, and with every row in the attention set */
            if (s->n_exact == base && !(s->attn && s->attn->n_skip)) s->n_exact = base + en->n;
            if (en->prefill && en->out >= 0 && e->model->hp.rs_floats) engine_rs_checkpoint(e, s); /* the prompt's end */
        }
        for (size_t i = 0; !st && i < e->n_rs_puts; i++) { /* checkpoints inside prompts */
            const struct rs_put *pu = &e->rs_puts[i];
            if (pu->q->err) continue;
            engine_rs_save(e, pu->q->comp[0].s, pu->n, e->rs_snap + pu->row * e->rs_floats);
        }
        e->n_rs_puts = 0;
        /* 6. tokens out */
        if (!st)
            for (size_t k = 0; k < n_ent; k++) {
                struct step_ent *en = &e->ent[k];
                struct dj_req *q = en->req;
                if (q->err || en->out < 0) continue;
                const float *row = e->b_logits + (size_t)en->out * V;
                if (en->prefill) prompt_done(e, q, row);
                else if (q->comp[en->comp].n_draft) verify_drafts(e, q, en->comp, row);
                else next_token(e, q, en->comp, row);
            }
        /* 7. seal what filled up (other sequences chain onto it at once) */
        if (e->cfg.dedup_enabled)
            for (size_t k = 0; k < n_ent; k++) {
                struct dj_session *s = e->ent[k].req->comp[e->ent[k].comp].s;
                if (s) seal_blocks(e, s);
            }
    }
    for (struct dj_req *q = e->running, *next; q; q = next) {
        next = q->next;
        if (q->err || req_done(q)) req_finish(e, q);
    }

    /* idle engine-owned sequences beyond the limit are parked, oldest first */
    size_t n_idle = 0;
    for (struct dj_session *s = e->sessions; s; s = s->next) n_idle += s->anon && !s->busy;
    while (n_idle > e->p.n_seq_idle_max) {
        struct dj_session *victim = NULL;
        for (struct dj_session *s = e->sessions; s; s = s->next)
            if (s->anon && !s->busy && (!victim || s->last_used < victim->last_used)) victim = s;
        engine_session_destroy(victim);
        n_idle--;
    }
    struct kv_pool_stats ps;
    kv_pool_get_stats(e->pool, &ps);
    if (ps.allocated > e->peak_allocated) e->peak_allocated = ps.allocated;
    if (ps.pinned > e->peak_pinned) e->peak_pinned = ps.pinned;
    return nt;
}

/* Terminates: with nothing running the first waiting request is always
 * admitted (engine_submit refused any that cannot fit alone), and every step
 * moves each running request forward by at least one token. */
void engine_run_all(struct dj_engine *e) {
    while (engine_n_pending(e) > 0) engine_step(e);
}

/* ---- the single-turn API ---------------------------------------------------- */

struct turn_state {
    dj_token *ids;
    size_t n_ids, cap;
    struct dj_turn_result r;
    bool done;
};

static void turn_on_token(void *ud, const struct dj_token_event *ev) {
    struct turn_state *t = ud;
    if (t->n_ids < t->cap) t->ids[t->n_ids++] = ev->tok;
}

static void turn_on_done(void *ud, const struct dj_turn_result *r) {
    struct turn_state *t = ud;
    t->r = *r;
    t->done = true;
}

enum dj_status engine_turn(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                           const struct dj_turn_params *tp, dj_token *ids, struct dj_turn_result *res) {
    const size_t n_ctx = e->ctx->p.n_ctx;
    if (n == 0) return dj_fail(DJ_ERR_INVALID, "turn: empty prompt");
    if (tp->n_gen == 0) return dj_fail(DJ_ERR_INVALID, "turn: n_gen must be at least 1");
    if ((n > n_ctx || tp->n_gen - 1 > n_ctx - n) && e->p.overflow != DJ_OVERFLOW_PRUNE)
        return dj_fail(DJ_ERR_INVALID, "turn: prompt of %zu tokens + %zu generated exceed the context size %zu", n,
                       tp->n_gen, n_ctx);
    if (s->busy) return dj_fail(DJ_ERR_INVALID, "turn: the session is running a request");
    struct turn_state t = {ids, 0, tp->n_gen, {0}, false};
    struct dj_request_params rp = engine_default_request();
    rp.prompt = prompt;
    rp.n_prompt = n;
    rp.max_tokens = tp->n_gen;
    rp.ignore_eos = true;
    rp.session = s;
    rp.on_token = turn_on_token;
    rp.on_done = turn_on_done;
    rp.ud = &t;
    rp.on_logits = tp->on_logits;
    rp.logits_ud = tp->ud;
    rp.force = tp->force;
    uint64_t id;
    enum dj_status st = engine_submit(e, &rp, &id);
    if (st) return st;
    while (!t.done) engine_step(e);
    if (t.r.finish == DJ_FINISH_ERROR) return dj_fail(t.r.status, "%s", t.r.error);
    if (res) *res = t.r;
    return DJ_OK;
}
