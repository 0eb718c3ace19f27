/*
 * server_completions.c — the text-completion endpoints of `deja serve`:
 * POST /v1/completions (OpenAI's legacy API, with llama-server's grammar
 * fields) and POST /infill (llama-server's fill-in-the-middle endpoint, in
 * its response shape).
 *
 *   body ──server_parse_completion / server_parse_infill (request.c)──▶ prompt tokens or FIM parts
 *        ──server_fim_prompt (suffix, /infill)──▶ prompt tokens
 *        ──the context check (OpenAI's context_length_exceeded 400)
 *        ──grammar / json_schema / response_format ──gcache (server_chat.c)──▶ processor
 *        ──engine_submit──▶ on_token: text, logprobs entries, SSE chunks or the choice's buffers
 *                           on_done:  the final chunk / event, or the response object
 *
 * Legacy logprobs ({tokens, token_logprobs, top_logprobs, text_offset}) must
 * describe the returned text, but the engine emits text later than tokens (a
 * UTF-8 character split over tokens, a possible stop string held back) and
 * never emits a stop string.  So each token's entry waits in its choice's
 * queue, at the byte offset its piece starts at, and is released when the
 * emitted text reaches past that offset — with the chunk that carries that
 * text when streaming; at the end, entries the text never reached (a stop
 * string's tokens) are dropped.  The pieces are those the engine's
 * detokenizer writes (control tokens render nothing; with a space-prefix
 * vocabulary the first token loses its leading space), so the entries'
 * tokens concatenate to the text whenever it is valid UTF-8 and no stop
 * string starts inside a token.  An ending end-of-generation token has no
 * text and no entry, as in OpenAI's responses.
 *
 * Threads: on_token / on_done run on the engine thread and hold r->mu; the
 * connection thread reads r's buffers after r->done (non-streaming) or
 * drains r->buf (streaming; stream_reader in server.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "sample/json_schema.h"
#include "sample/schema_skip.h"
#include "server/request.h"
#include "server/server_internal.h"

/* OpenAI's legacy-completions wording of the error, as its API sent it (the
 * "; or" included): max context, requested, prompt, completion. */
#define CONTEXT_ERROR_FMT                                                                                              \
    "This model's maximum context length is %zu tokens, however you requested %zu tokens (%zu in your prompt; %zu "   \
    "for the completion). Please reduce your prompt; or completion length."

/* One token's logprobs entry, waiting for its text to be emitted. */
struct lp_entry {
    size_t start;  /* byte offset of its piece in the completion's text */
    size_t n;      /* the piece's length */
    json_t *token; /* its text (OpenAI's "bytes:\xNN" form when not valid UTF-8) */
    double lp;
    json_t *top; /* {token: logprob} */
};

/* Per completion (choice). */
struct cmpl_choice {
    struct lp_entry *q; /* entries not released yet, oldest first (q[q_head..n_q)) */
    size_t q_head, n_q, cap_q;
    size_t n_pieces;  /* bytes of the pieces queued so far: the next entry's start */
    size_t n_emitted; /* bytes of text emitted so far */
    bool pushed;      /* a token reached the detokenizer (the first one's leading-space rule) */
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset; /* released, not sent yet */
    json_t *ids;      /* /infill return_tokens: the generated ids not sent yet */
    size_t n_tokens;  /* tokens generated */
    bool has_new_line; /* /infill: the text so far holds a '\n' */
};

struct cmpl_state {
    bool infill;        /* /infill: llama-server's response shape */
    int32_t logprobs;   /* -1: none */
    bool no_predict;    /* /infill n_predict 0: no text, no events but the last */
    bool return_tokens; /* /infill */
    bool ignore_eos;
    size_t n_prompt;
    char *prompt_text;  /* /infill's "prompt": the prompt's text, special tokens written */
    json_t *settings;   /* /infill's generation_settings */
    struct cmpl_choice *ch; /* r->n */
};

/* ---- logprobs entries ---------------------------------------------------------------------- */

/* The text of a token as OpenAI's legacy logprobs write it: the string when it is
 * valid UTF-8, else "bytes:" and a \xNN per byte. */
static json_t *token_json(const char *p, size_t n) {
    json_t *j = json_stringn(p, n);
    if (j) return j;
    char *b = malloc(6 + 4 * n + 1);
    if (!b) return json_string("");
    memcpy(b, "bytes:", 6);
    for (size_t i = 0; i < n; i++) snprintf(b + 6 + 4 * i, 5, "\\x%02x", (unsigned char)p[i]);
    j = json_string(b);
    free(b);
    return j;
}

/* The piece of tok (malloc'd, *n its length): special tokens written when `special`;
 * one leading space dropped when `strip` (the detokenizer's first-token rule). */
static char *piece_of(const struct dj_vocab *v, dj_token tok, bool special, bool strip, size_t *n) {
    char small[128];
    size_t len = vocab_token_to_piece(v, tok, special, small, sizeof small);
    char *p = malloc(len + 1);
    if (!p) return NULL;
    if (len <= sizeof small) memcpy(p, small, len);
    else vocab_token_to_piece(v, tok, special, p, len);
    p[len] = 0;
    if (strip && len > 0 && p[0] == ' ') memmove(p, p + 1, len--);
    *n = len;
    return p;
}

/* Adds k: lp to top unless a token of the same text is there (the likelier one, listed first). */
static void top_add(json_t *top, json_t *k, double lp) {
    const char *key = json_string_value(k);
    if (key && !json_object_get(top, key) && isfinite(lp)) json_object_set_new(top, key, json_real(lp));
    json_decref(k);
}

static bool q_push(struct cmpl_choice *c, struct lp_entry e) {
    if (c->n_q == c->cap_q) {
        if (c->q_head) { /* reuse the released front */
            memmove(c->q, c->q + c->q_head, (c->n_q - c->q_head) * sizeof *c->q);
            c->n_q -= c->q_head;
            c->q_head = 0;
        }
        if (c->n_q == c->cap_q) {
            size_t cap = c->cap_q ? 2 * c->cap_q : 16;
            struct lp_entry *nq = realloc(c->q, cap * sizeof *nq);
            if (!nq) return false;
            c->q = nq;
            c->cap_q = cap;
        }
    }
    c->q[c->n_q++] = e;
    return true;
}

/* Queues the entry of ev's token (engine thread, r->mu held). */
static void lp_record(struct sreq *r, struct cmpl_choice *c, const struct dj_token_event *ev) {
    const struct dj_vocab *v = r->s->m->vocab;
    const bool strip = !c->pushed && vocab_add_space_prefix(v);
    c->pushed = true;
    size_t n = 0;
    char *p = piece_of(v, ev->tok, false, strip, &n);
    json_t *top = json_object();
    bool in_top = false;
    for (size_t i = 0; p && top && i < ev->n_top; i++) {
        size_t nk = 0;
        char *k = piece_of(v, ev->top[i].tok, true, strip, &nk);
        if (!k) continue;
        /* the sampled token under its emitted text (a control token's is ""), the others as written */
        const bool me = ev->top[i].tok == ev->tok;
        in_top |= me;
        top_add(top, me ? token_json(p, n) : token_json(k, nk), ev->top[i].logprob);
        free(k);
    }
    if (p && top && !in_top) top_add(top, token_json(p, n), ev->logprob); /* OpenAI: up to logprobs + 1 */
    json_t *tj = p ? token_json(p, n) : NULL;
    free(p);
    if (!tj || !top || !q_push(c, (struct lp_entry){c->n_pieces, n, tj, ev->logprob, top})) {
        json_decref(tj);
        json_decref(top);
        return; /* out of memory: the entry is lost, the text is not */
    }
    c->n_pieces += n;
}

/* Moves the entries the emitted text has reached (all = at the end: every one that
 * starts inside the text) to the released arrays; the rest stay queued. */
static void lp_release(struct cmpl_choice *c) {
    while (c->q_head < c->n_q) {
        struct lp_entry *e = &c->q[c->q_head];
        if (!(e->start < c->n_emitted || (e->n == 0 && e->start <= c->n_emitted))) break;
        if (!c->tokens) {
            c->tokens = json_array();
            c->token_logprobs = json_array();
            c->top_logprobs = json_array();
            c->text_offset = json_array();
        }
        json_array_append_new(c->tokens, e->token);
        json_array_append_new(c->token_logprobs, json_real(isfinite(e->lp) ? e->lp : -9999.0));
        json_array_append_new(c->top_logprobs, e->top);
        json_array_append_new(c->text_offset, json_integer((json_int_t)e->start));
        c->q_head++;
    }
}

/* The released entries as OpenAI's logprobs object (taken: the arrays restart), or null. */
static json_t *lp_take(struct cmpl_state *cs, struct cmpl_choice *c) {
    if (cs->logprobs < 0) return json_null();
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", c->tokens ? c->tokens : json_array(), "token_logprobs",
                          c->token_logprobs ? c->token_logprobs : json_array(), "top_logprobs",
                          c->top_logprobs ? c->top_logprobs : json_array(), "text_offset",
                          c->text_offset ? c->text_offset : json_array());
    c->tokens = c->token_logprobs = c->top_logprobs = c->text_offset = NULL;
    return o ? o : json_null();
}

static void choice_free(struct cmpl_choice *c) {
    for (size_t i = c->q_head; i < c->n_q; i++) {
        json_decref(c->q[i].token);
        json_decref(c->q[i].top);
    }
    free(c->q);
    json_decref(c->tokens);
    json_decref(c->token_logprobs);
    json_decref(c->top_logprobs);
    json_decref(c->text_offset);
    json_decref(c->ids);
}

void cmpl_sreq_free(struct sreq *r) {
    if (r->is_chat) return;
    struct cmpl_state *cs = r->cmpl;
    if (cs) {
        for (uint32_t i = 0; cs->ch && i < r->n; i++) choice_free(&cs->ch[i]);
        free(cs->ch);
        free(cs->prompt_text);
        json_decref(cs->settings);
        free(cs);
    }
    for (size_t k = 0; k < r->n_stops; k++) free(r->stops[k]);
    /* the engine is done with r (its last on_done ran): the processor and grammar go back */
    gproc_free(r->gp);
    if (r->gent) gcache_release(r->s, r->gent);
}

/* ---- events ------------------------------------------------------------------------------ */

/* Appends `data: <json>\n\n` (takes j). r->mu held. */
static void sse_locked(struct sreq *r, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(j);
    if (!txt) return;
    buf_append(&r->buf, &r->n_buf, &r->cap_buf, "data: ", 6);
    buf_append(&r->buf, &r->n_buf, &r->cap_buf, txt, strlen(txt));
    buf_append(&r->buf, &r->n_buf, &r->cap_buf, "\n\n", 2);
    free(txt);
}

/* A text_completion chunk of one choice (takes text and logprobs). */
static json_t *chunk(const struct sreq *r, uint32_t index, json_t *text, const char *finish, json_t *logprobs) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:I, s:o, s:o, s:o}]}", "id", r->cmpl_id, "object", "text_completion",
                     "created", (json_int_t)r->created, "model", r->s->alias, "choices", "index", (json_int_t)index,
                     "text", text, "finish_reason", finish ? json_string(finish) : json_null(), "logprobs", logprobs);
}

static json_t *usage_json(const struct sreq *r) {
    size_t gen = 0;
    for (uint32_t i = 0; i < r->n; i++) gen += r->res[i].n_gen;
    const struct dj_turn_result *r0 = &r->res[0];
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r0->n_prompt, "completion_tokens",
                     (json_int_t)gen, "total_tokens", (json_int_t)(r0->n_prompt + gen), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)r0->n_cached);
}

/* /infill's stop_type (llama-server's names). */
static const char *stop_type(const struct cmpl_state *cs, const struct dj_turn_result *res) {
    if (cs->no_predict || res->finish == DJ_FINISH_LENGTH) return "limit";
    if (res->finish == DJ_FINISH_STOP) return res->stop_index >= 0 ? "word" : "eos";
    return "none";
}

/* llama-server's timings object of a completion. */
static json_t *timings_json(const struct dj_turn_result *res, size_t n_gen) {
    const size_t prompt_n = res->n_prompt > res->n_cached ? res->n_prompt - res->n_cached : 0;
    const double pms = res->t_prefill_ms, dms = res->t_decode_ms;
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f}", "cache_n", (json_int_t)res->n_cached, "prompt_n",
                     (json_int_t)prompt_n, "prompt_ms", pms, "prompt_per_token_ms", prompt_n ? pms / (double)prompt_n : 0.0,
                     "prompt_per_second", pms > 0 ? 1e3 * (double)prompt_n / pms : 0.0, "predicted_n", (json_int_t)n_gen,
                     "predicted_ms", dms, "predicted_per_token_ms", n_gen ? dms / (double)n_gen : 0.0,
                     "predicted_per_second", dms > 0 ? 1e3 * (double)n_gen / dms : 0.0);
}

/* /infill's final object (llama-server's to_json_non_oaicompat); content and tokens taken. */
static json_t *infill_final(struct sreq *r, json_t *content, json_t *tokens) {
    struct cmpl_state *cs = r->cmpl;
    const struct dj_turn_result *res = &r->res[0];
    const size_t n_gen = cs->no_predict ? 0 : res->n_gen;
    const char *word = res->finish == DJ_FINISH_STOP && res->stop_index >= 0 && (size_t)res->stop_index < r->n_stops
                           ? r->stops[res->stop_index]
                           : "";
    const bool nl = !cs->no_predict && cs->ch[0].has_new_line;
    return json_pack("{s:I, s:o, s:o, s:I, s:b, s:s, s:I, s:I, s:O, s:o, s:b, s:b, s:s, s:s, s:I, s:o, s:o, s:o}",
                     "index", (json_int_t)0, "content", content, "tokens", tokens, "id_slot", (json_int_t)0, "stop", 1,
                     "model", r->s->alias, "tokens_predicted", (json_int_t)n_gen, "tokens_evaluated",
                     (json_int_t)res->n_prompt, "generation_settings", cs->settings, "prompt",
                     jstr(cs->prompt_text ? cs->prompt_text : "", cs->prompt_text ? strlen(cs->prompt_text) : 0),
                     "has_new_line", (int)nl, "truncated", 0, "stop_type",
                     stop_type(cs, res), "stopping_word", word, "tokens_cached", (json_int_t)(res->n_prompt + n_gen),
                     "timings", timings_json(res, n_gen), "usage", usage_json(r), "x_deja", xdeja_json(r));
}

static void cmpl_on_token(void *ud, const struct dj_token_event *ev) {
    struct sreq *r = ud;
    struct cmpl_state *cs = r->cmpl;
    if (ev->index >= r->n) return;
    pthread_mutex_lock(&r->mu);
    server_note_token(r, ev->index);
    struct cmpl_choice *c = &cs->ch[ev->index];
    c->n_tokens++;
    const bool ending_eog = !cs->ignore_eos && vocab_is_eog(r->s->m->vocab, ev->tok);
    if (cs->logprobs >= 0 && !ending_eog) lp_record(r, c, ev);
    if (cs->return_tokens && !cs->no_predict && !ending_eog) {
        if (!c->ids) c->ids = json_array();
        json_array_append_new(c->ids, json_integer(ev->tok));
    }
    c->n_emitted += ev->n_text;
    c->has_new_line |= memchr(ev->text, '\n', ev->n_text) != NULL;
    lp_release(c);
    if (cs->no_predict || (ev->n_text == 0 && !(r->stream && cs->infill && c->ids))) {
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (r->stream && cs->infill) {
        json_t *ids = c->ids ? c->ids : json_array();
        c->ids = NULL;
        sse_locked(r, json_pack("{s:I, s:o, s:o, s:b, s:I, s:I, s:I}", "index", (json_int_t)0, "content",
                                jstr(ev->text, ev->n_text), "tokens", ids, "stop", 0, "id_slot", (json_int_t)0,
                                "tokens_predicted", (json_int_t)c->n_tokens, "tokens_evaluated",
                                (json_int_t)cs->n_prompt));
    } else if (r->stream) {
        sse_locked(r, chunk(r, ev->index, jstr(ev->text, ev->n_text), NULL, lp_take(cs, c)));
    } else {
        buf_append(&r->text[ev->index], &r->n_text[ev->index], &r->cap_text[ev->index], ev->text, ev->n_text);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void cmpl_on_done(void *ud, const struct dj_turn_result *res) {
    struct sreq *r = ud;
    struct cmpl_state *cs = r->cmpl;
    metrics_observe_done(&r->s->metrics, res);
    pthread_mutex_lock(&r->mu);
    if (res->index < r->n) {
        r->res[res->index] = *res;
        struct cmpl_choice *c = &cs->ch[res->index];
        lp_release(c); /* what the text never reached (a stop string's tokens) stays queued: dropped */
        if (r->stream && !cs->infill)
            sse_locked(r, chunk(r, res->index, json_string(""), engine_finish_name(res->finish),
                                c->tokens ? lp_take(cs, c) : json_null()));
    }
    const bool last = ++r->n_done == r->n;
    if (last) {
        server_log_request(r);
        if (r->stream && cs->infill) {
            sse_locked(r, infill_final(r, json_string(""), json_array())); /* llama-server: no [DONE] */
        } else if (r->stream) {
            if (r->include_usage)
                sse_locked(r, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o, s:o}", "id", r->cmpl_id, "object",
                                        "text_completion", "created", (json_int_t)r->created, "model", r->s->alias,
                                        "choices", "usage", usage_json(r), "x_deja", xdeja_json(r)));
            buf_append(&r->buf, &r->n_buf, &r->cap_buf, "data: [DONE]\n\n", 14);
        }
        r->done = true;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (last) sreq_unref(r);
}

/* ---- requests ----------------------------------------------------------------------------- */

/* OpenAI's 400 for a prompt that does not fit: the engine needs room for one generated token. */
static bool send_context_error(struct http_req *c, size_t n_ctx, size_t n_prompt) {
    const size_t gen = n_prompt >= n_ctx + 1 ? 0 : 1; /* n_prompt == n_ctx: the one token is what does not fit */
    char msg[512];
    snprintf(msg, sizeof msg, CONTEXT_ERROR_FMT, n_ctx, n_prompt + gen, n_prompt, gen);
    return send_json(c, 400, api_error_json_ex(DJ_API_CHAT, 400, NULL, "prompt", "context_length_exceeded", msg));
}

/* The request's grammar as GBNF (NULL: none), a message naming the field on failure. */
static enum dj_status constraint_gbnf(const struct dj_constraint_req *k, char **gbnf) {
    *gbnf = NULL;
    if (k->grammar) {
        *gbnf = strdup(k->grammar);
        return *gbnf ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "out of memory");
    }
    if (!k->json_schema && !k->json_object) return DJ_OK;
    struct dj_json_schema_opts o = json_schema_default_opts();
    o.whitespace = DJ_JSON_WS_FLEXIBLE; /* as chat's response_format */
    json_t *any = k->json_schema ? NULL : json_pack("{s:s}", "type", "object");
    enum dj_status st = json_schema_to_gbnf_value(k->json_schema ? k->json_schema : any, &o, gbnf);
    json_decref(any);
    return st ? dj_fail(st, "%s: %s", k->param, dj_last_error()) : DJ_OK;
}

/* /infill's generation_settings (a subset of llama-server's). */
static json_t *settings_json(const struct dj_completion_req *cr, const struct dj_request_params *rp) {
    json_t *stop = json_array();
    for (size_t i = 0; i < cr->n_stop; i++) json_array_append_new(stop, json_string(cr->stop[i]));
    const struct dj_sampler_params *sp = &rp->sampling;
    return json_pack("{s:I, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:b, s:b, s:o}", "n_predict",
                     cr->no_predict ? (json_int_t)0 : cr->max_tokens ? (json_int_t)cr->max_tokens : (json_int_t)-1,
                     "max_tokens", (json_int_t)rp->max_tokens, "temperature", (double)sp->temp, "top_k",
                     (json_int_t)sp->top_k, "top_p", (double)sp->top_p, "min_p", (double)sp->min_p, "repeat_penalty",
                     (double)sp->repeat_penalty, "presence_penalty", (double)sp->presence_penalty,
                     "frequency_penalty", (double)sp->freq_penalty, "seed", (json_int_t)sp->seed, "ignore_eos",
                     (int)cr->ignore_eos, "stream", (int)cr->stream, "stop", stop);
}

static bool send_completion(struct http_req *c, struct sreq *r) {
    struct cmpl_state *cs = r->cmpl;
    if (cs->infill) {
        json_t *ids = cs->ch[0].ids ? json_incref(cs->ch[0].ids) : json_array();
        return send_json(c, 200, infill_final(r, cs->no_predict ? json_string("") : jstr(r->text[0] ? r->text[0] : "", r->n_text[0]), ids));
    }
    json_t *choices = json_array();
    for (uint32_t i = 0; i < r->n; i++)
        json_array_append_new(choices, json_pack("{s:I, s:o, s:s, s:o}", "index", (json_int_t)i, "text",
                                                 jstr(r->text[i] ? r->text[i] : "", r->n_text[i]), "finish_reason",
                                                 engine_finish_name(r->res[i].finish), "logprobs",
                                                 lp_take(cs, &cs->ch[i])));
    return send_json(c, 200,
                     json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o}", "id", r->cmpl_id, "object", "text_completion",
                               "created", (json_int_t)r->created, "model", r->s->alias, "choices", choices, "usage",
                               usage_json(r), "x_deja", xdeja_json(r)));
}

/* Both endpoints, after their parser. */
static bool run_completion(struct dj_server *s, struct http_req *c, struct dj_completion_req *cr,
                                      bool infill) {
    const size_t n_ctx = engine_n_ctx(s->e);
    if (cr->fim) {
        free(cr->prompt);
        cr->prompt = NULL;
        if (server_fim_prompt(s->m->vocab, &cr->fr, n_ctx, cr->max_tokens ? cr->max_tokens : s->p.n_predict,
                              &cr->prompt, &cr->n_prompt) != DJ_OK) {
            server_completion_req_free(cr);
            return send_error(c, 400, infill ? NULL : "suffix", "%s", dj_last_error());
        }
    }
    if (cr->n_prompt >= n_ctx && engine_overflow(s->e) != DJ_OVERFLOW_PRUNE) { /* prune: the engine drops its middle */
        const size_t np = cr->n_prompt;
        server_completion_req_free(cr);
        return send_context_error(c, n_ctx, np);
    }
    char *gbnf = NULL;
    struct gent *ge = NULL;
    struct dj_gproc *gp = NULL;
    enum dj_status st = constraint_gbnf(&cr->cons, &gbnf);
    if (!st && gbnf) st = gcache_get(s, gbnf, &ge); /* a bad grammar: the parser's "grammar: ..." message */
    free(gbnf);
    if (!st && ge) {
        struct dj_gproc_params gpp = {.g = ge->g, .gtok = ge->gt, .vocab = s->m->vocab, .memo = ge->memo};
        st = gproc_create(&gpp, &gp);
    }
    if (st) {
        if (ge) gcache_release(s, ge);
        const char *param = cr->cons.param;
        server_completion_req_free(cr);
        return send_error(c, st == DJ_ERR_NOMEM ? 500 : 400, param, "%s", dj_last_error());
    }
    struct sreq *r = sreq_new(s, c, infill ? 1 : cr->n);
    struct cmpl_state *cs = r ? calloc(1, sizeof *cs) : NULL;
    if (r) r->cmpl = cs; /* freed with r (cmpl_sreq_free), whatever happens next */
    if (r) {
        r->gent = ge;
        r->gp = gp;
    } else {
        gproc_free(gp);
        if (ge) gcache_release(s, ge);
    }
    bool ok = cs && (cs->ch = calloc(r->n, sizeof *cs->ch)) != NULL;
    for (size_t k = 0; ok && k < cr->n_stop; k++) ok = (r->stops[r->n_stops++] = strdup(cr->stop[k])) != NULL;
    struct dj_request_params rp = engine_default_request();
    rp.sampling = cr->sp;
    if (!cr->has_seed) rp.sampling.seed = server_fresh_seed(s);
    rp.ignore_eos = cr->ignore_eos;
    rp.prompt = cr->prompt;
    rp.n_prompt = cr->n_prompt;
    rp.max_tokens = cr->no_predict ? 1 : server_gen_cap(s, cr->n_prompt, cr->max_tokens);
    if (ok) {
        r->path = infill ? "/infill" : "/v1/completions";
        r->stream = cr->stream;
        r->include_usage = cr->include_usage;
        snprintf(r->cmpl_id, sizeof r->cmpl_id, "cmpl-%016llx", (unsigned long long)dj_rng_u64(rp.sampling.seed, 7));
        cs->infill = infill;
        cs->logprobs = infill ? -1 : cr->logprobs;
        cs->no_predict = cr->no_predict;
        cs->return_tokens = cr->return_tokens;
        cs->ignore_eos = cr->ignore_eos;
        cs->n_prompt = cr->n_prompt;
        if (infill) {
            size_t n_txt = 0;
            ok = vocab_detokenize(s->m->vocab, cr->prompt, cr->n_prompt, true, &cs->prompt_text, &n_txt) == DJ_OK &&
                 (cs->settings = settings_json(cr, &rp)) != NULL;
        }
    }
    if (!ok) {
        server_completion_req_free(cr);
        if (r) {
            r->refs = 1;
            sreq_unref(r);
        }
        return send_error(c, 500, NULL, "out of memory");
    }
    struct dj_logits_processor proc;
    rp.n = r->n;
    rp.cache_salt = cr->cache_salt && *cr->cache_salt ? cr->cache_salt : NULL;
    rp.stop = (const char *const *)r->stops;
    rp.n_stop = r->n_stops;
    rp.logprobs = cs->logprobs >= 0;
    rp.n_probs = cs->logprobs > 0 ? (uint32_t)cs->logprobs : 0;
    if (gp) {
        proc = gproc_processor(gp);
        rp.proc = &proc;
    }
    rp.on_token = cmpl_on_token;
    rp.on_done = cmpl_on_done;
    rp.ud = r;
    st = engine_submit(s->e, &rp, &r->id);
    server_completion_req_free(cr);
    if (st) {
        r->refs = 1;
        sreq_unref(r);
        return send_error(c, st == DJ_ERR_NOMEM ? 503 : 400, NULL, "%s", dj_last_error());
    }
    if (r->stream) return send_stream(c, r);
    bool ret;
    const bool finished = server_wait_done(r, c); /* false: cancelled, answered with nothing or a 503 */
    uint32_t failed = r->n;
    for (uint32_t i = 0; i < r->n; i++)
        if (r->res[i].finish == DJ_FINISH_ERROR) failed = i;
    if (!finished) ret = false;
    else if (failed < r->n) ret = send_error(c, 500, NULL, "generation failed: %s", r->res[failed].error);
    else ret = send_completion(c, r);
    sreq_unref(r);
    return ret;
}

bool completions_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body) {
    struct dj_completion_req cr = {0};
    if (server_full(s)) return send_busy(c);
    int code = 400;
    const char *param = NULL;
    if (server_parse_completion(s->m->vocab, s->alias, body, n_body, &cr, &code, &param) != DJ_OK)
        return send_error(c, (unsigned)code, param, "%s", dj_last_error());
    return run_completion(s, c, &cr, false);
}

bool infill_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body) {
    struct dj_completion_req cr = {0};
    if (server_full(s)) return send_busy(c);
    int code = 400;
    const char *param = NULL;
    if (server_parse_infill(s->m->vocab, s->alias, body, n_body, &cr, &code, &param) != DJ_OK)
        return send_error(c, (unsigned)code, param, "%s", dj_last_error());
    return run_completion(s, c, &cr, true);
}
