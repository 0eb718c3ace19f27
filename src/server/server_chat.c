/*
 * server_chat.c — the chat endpoints of `deja serve`: /v1/chat/completions,
 * /v1/responses, /v1/messages, /v1/messages/count_tokens, /apply-template.
 *
 *   body ──api_parse_chat──▶ messages, tools, sampling
 *        ──chat_render (template) ──chat_tokenize──▶ prompt tokens
 *        ──grammar (tool_choice required/named, auto's lazy trigger, response_format)──▶ processor
 *        ──engine_submit──▶ on_token: toolparse_feed ──▶ deltas ──▶ SSE events / collected choice
 *                           on_done:  toolparse_finish ──▶ finish events / the response object
 *
 * Grammars: a small cache keyed by GBNF text (agents send the same tools every
 * turn: the mask cache and the draft memo carry over), shared by concurrent
 * requests; entries are freed on the engine thread only, between steps (the
 * engine alone touches masks).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/schema_skip.h"
#include "sample/think_budget.h"
#include "sample/toolcall.h"
#include "server/server_internal.h"

enum { GCACHE_MAX = 16 };

static void gent_free(struct gent *e) {
    gtok_free(e->gt);
    grammar_free(e->g);
    gdraft_memo_free(e->memo);
    free(e->gbnf);
    free(e);
}

/* A grammar for gbnf, from the cache or made now (a reference the caller releases). */
enum dj_status gcache_get(struct dj_server *s, const char *gbnf, struct gent **out) {
    enum dj_status st = DJ_OK;
    pthread_mutex_lock(&s->gmu);
    if (!s->gvocab && (st = gvocab_create(s->m->vocab, &s->gvocab)) != DJ_OK) goto done;
    size_t n = 0;
    for (struct gent *e = s->gcache; e; e = e->next, n++)
        if (!strcmp(e->gbnf, gbnf)) {
            e->refs++;
            e->used = ++s->gclock;
            *out = e;
            goto done;
        }
    struct gent *e = calloc(1, sizeof *e);
    if (!e || !(e->gbnf = strdup(gbnf)) || !(e->memo = gdraft_memo_create())) {
        if (e) gent_free(e);
        st = dj_fail(DJ_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = grammar_parse(gbnf, strlen(gbnf), NULL, s->m->vocab, &e->g)) != DJ_OK ||
        (st = gtok_create(e->g, s->gvocab, &e->gt)) != DJ_OK) {
        gent_free(e);
        goto done;
    }
    e->refs = 1;
    e->used = ++s->gclock;
    e->next = s->gcache;
    s->gcache = e;
    *out = e;
    if (n + 1 > GCACHE_MAX) { /* retire the least recently used idle grammar */
        struct gent **victim = NULL;
        for (struct gent **p = &s->gcache; *p; p = &(*p)->next)
            if ((*p)->refs == 0 && (!victim || (*p)->used < (*victim)->used)) victim = p;
        if (victim) {
            struct gent *v = *victim;
            *victim = v->next;
            v->next = s->graveyard;
            s->graveyard = v;
        }
    }
done:
    pthread_mutex_unlock(&s->gmu);
    return st;
}

void gcache_release(struct dj_server *s, struct gent *e) {
    pthread_mutex_lock(&s->gmu);
    e->refs--;
    pthread_mutex_unlock(&s->gmu);
}

void server_gcache_collect(struct dj_server *s) {
    pthread_mutex_lock(&s->gmu);
    struct gent *g = s->graveyard;
    s->graveyard = NULL;
    pthread_mutex_unlock(&s->gmu);
    while (g) {
        struct gent *nx = g->next;
        gent_free(g);
        g = nx;
    }
}

void server_gcache_free(struct dj_server *s) {
    server_gcache_collect(s);
    for (struct gent *e = s->gcache; e;) {
        struct gent *nx = e->next;
        gent_free(e);
        e = nx;
    }
    s->gcache = NULL;
    gvocab_free(s->gvocab);
    s->gvocab = NULL;
}

/* ---- per-request state ------------------------------------------------------------ */

void chat_sreq_free(struct sreq *r) {
    if (!r->is_chat) return;
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->tp) toolparse_free(r->tp[i]);
        if (!r->acc) continue;
        struct chat_acc *a = &r->acc[i];
        sbuf_free(&a->content);
        sbuf_free(&a->reasoning);
        for (size_t k = 0; k < a->n_calls; k++) {
            free(a->calls[k].name);
            free(a->calls[k].args);
        }
        free(a->calls);
        json_decref(a->logprobs);
    }
    free(r->tp);
    free(r->acc);
    for (size_t k = 0; k < r->n_stops; k++) free(r->stops[k]);
    free(r->model);
    json_decref(r->resp_meta);
    json_decref(r->resp_items);
    api_stream_free(r->st);
    /* the engine is done with the request (its last on_done ran): the processor
     * is the caller's again; the grammar goes back to the cache */
    think_budget_free(r->tb);
    gproc_free(r->gp);
    if (r->gent) gcache_release(r->s, r->gent);
}

struct emit_ctx {
    struct sreq *r;
    uint32_t index;
};

/* r->mu held. */
static void flush_sse(struct sreq *r, struct dj_sbuf *b) {
    if (b->n) buf_append(&r->buf, &r->n_buf, &r->cap_buf, b->p, b->n);
    sbuf_free(b);
}

static void on_delta(void *ud, const struct dj_chat_delta *d) {
    struct emit_ctx *x = ud;
    struct sreq *r = x->r;
    struct chat_acc *a = &r->acc[x->index];
    if (r->stream) {
        struct dj_sbuf b = {0};
        json_t *lp = NULL;
        if (a->logprobs && json_array_size(a->logprobs) && d->kind == DJ_DELTA_CONTENT) {
            lp = a->logprobs;
            a->logprobs = json_array();
        }
        api_stream_delta(r->st, x->index, d, lp, &b);
        json_decref(lp);
        flush_sse(r, &b);
        return;
    }
    switch (d->kind) {
    case DJ_DELTA_CONTENT: sbuf_append(&a->content, d->text, d->n); break;
    case DJ_DELTA_REASONING: sbuf_append(&a->reasoning, d->text, d->n); break;
    case DJ_DELTA_TOOL_START: {
        struct dj_chat_call *nc = realloc(a->calls, (a->n_calls + 1) * sizeof *nc);
        if (!nc) break;
        a->calls = nc;
        struct dj_chat_call *c = &a->calls[a->n_calls++];
        memset(c, 0, sizeof *c);
        snprintf(c->id, sizeof c->id, "%s", d->id ? d->id : "");
        c->name = strdup(d->name ? d->name : "");
        break;
    }
    case DJ_DELTA_TOOL_ARGS: {
        if (!a->n_calls) break;
        struct dj_chat_call *c = &a->calls[d->tool_index < a->n_calls ? d->tool_index : a->n_calls - 1];
        char *na = realloc(c->args, c->n_args + d->n + 1);
        if (!na) break;
        memcpy(na + c->n_args, d->text, d->n);
        c->n_args += d->n;
        na[c->n_args] = 0;
        c->args = na;
        break;
    }
    }
}

/* The OpenAI logprobs entry of a token. */
static json_t *logprob_entry(const struct dj_vocab *v, dj_token tok, float lp) {
    char piece[256];
    size_t n = vocab_token_to_piece(v, tok, false, piece, sizeof piece);
    if (n > sizeof piece) n = sizeof piece;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:o, s:f, s:o}", "token", jstr(piece, n), "logprob", (double)lp, "bytes", bytes);
}

static void chat_on_token(void *ud, const struct dj_token_event *ev) {
    struct sreq *r = ud;
    if (ev->index >= r->n) return;
    pthread_mutex_lock(&r->mu);
    server_note_token(r, ev->index);
    struct chat_acc *a = &r->acc[ev->index];
    if (r->logprobs) {
        json_t *e = logprob_entry(r->s->m->vocab, ev->tok, ev->logprob);
        if (e && r->top_logprobs) {
            json_t *top = json_array();
            for (size_t i = 0; i < ev->n_top; i++)
                json_array_append_new(top, logprob_entry(r->s->m->vocab, ev->top[i].tok, ev->top[i].logprob));
            json_object_set_new(e, "top_logprobs", top);
        } else if (e) {
            json_object_set_new(e, "top_logprobs", json_array());
        }
        if (!a->logprobs) a->logprobs = json_array();
        json_array_append_new(a->logprobs, e);
    }
    if (ev->n_text) {
        struct emit_ctx x = {r, ev->index};
        toolparse_feed(r->tp[ev->index], ev->text, ev->n_text, on_delta, &x);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void chat_usage(const struct sreq *r, struct dj_chat_usage *u) {
    u->prompt = r->res[0].n_prompt;
    u->cached = r->res[0].n_cached;
    u->completion = 0;
    for (uint32_t i = 0; i < r->n; i++) u->completion += r->res[i].n_gen;
    u->x_deja = NULL;
    /* asked to cache (Anthropic cache_control): what this request computed of the prompt is kept
     * for the next one — reported as written to the cache */
    u->cache_write = r->cache_control && u->prompt > u->cached ? u->prompt - u->cached : 0;
}

/* The request's own stop string that ended a completion (not the implicit turn end), or NULL. */
static const char *user_stop(const struct sreq *r, const struct dj_turn_result *res) {
    return res->finish == DJ_FINISH_STOP && res->stop_index >= 0 && (size_t)res->stop_index < r->n_user_stops
               ? r->stops[res->stop_index]
               : NULL;
}

/* /v1/responses with store: keeps the response object (a new reference, taken) with its
 * conversation's items for previous_response_id and GET.  Called before the response reaches the
 * client, so a follow-up it sends at once finds it. */
static void keep_response(struct sreq *r, json_t *resp) {
    if (r->resp_items && api_responses_keep(r->s->rstore, r->resp_items, resp) != DJ_OK)
        fprintf(stderr, "deja serve: %s: %s: not stored: %s\n", r->path, r->cmpl_id, dj_last_error());
    json_decref(resp);
}

static void chat_on_done(void *ud, const struct dj_turn_result *res) {
    struct sreq *r = ud;
    metrics_observe_done(&r->s->metrics, res);
    pthread_mutex_lock(&r->mu);
    const uint32_t i = res->index;
    if (i < r->n) {
        r->res[i] = *res;
        struct emit_ctx x = {r, i};
        if (toolparse_finish(r->tp[i], on_delta, &x) != DJ_OK)
            fprintf(stderr, "deja serve: %s: completion %u: %s\n", r->path, i, dj_last_error());
        if (r->stream) {
            struct dj_sbuf b = {0};
            struct chat_acc *a = &r->acc[i];
            if (a->logprobs && json_array_size(a->logprobs)) { /* tokens whose text was held back */
                const struct dj_chat_delta d = {.kind = DJ_DELTA_CONTENT, .text = "", .n = 0};
                api_stream_delta(r->st, i, &d, a->logprobs, &b);
            }
            /* a cancelled completion did not finish: its stream ends in an error event, never in
             * a finish_reason / stop_reason a client would take for the whole answer */
            if (res->finish == DJ_FINISH_ERROR) api_stream_error(r->st, res->error, &b);
            else if (res->finish == DJ_FINISH_CANCELLED)
                api_stream_error(r->st, "the request was cancelled (the client left, or the server is stopping)", &b);
            else api_stream_finish_seq(r->st, i, res->finish, user_stop(r, res), &b);
            flush_sse(r, &b);
        }
    }
    const bool last = ++r->n_done == r->n;
    if (last) {
        server_log_request(r);
        if (r->stream) {
            struct dj_chat_usage u;
            chat_usage(r, &u);
            json_t *xd = xdeja_json(r);
            u.x_deja = xd;
            struct dj_sbuf b = {0};
            api_stream_end(r->st, &u, &b);
            json_decref(xd);
            keep_response(r, api_stream_response(r->st)); /* before the last event is readable */
            flush_sse(r, &b);
        }
        r->done = true;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (last) sreq_unref(r);
}

/* ---- replies ------------------------------------------------------------------------ */

static bool send_api_error(struct http_req *c, enum dj_api api, unsigned status, const char *param,
                                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool send_api_error(struct http_req *c, enum dj_api api, unsigned status, const char *param,
                                      const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, api_error_json(api, status, param, msg));
}

/* 400 for a prompt longer than the context, in the shape each API's clients read (Claude Code
 * compacts its conversation on Anthropic's "prompt is too long" message). */
static bool send_too_long(struct http_req *c, enum dj_api api, size_t n_prompt, size_t n_ctx) {
    char msg[256];
    if (api == DJ_API_MESSAGES || api == DJ_API_MESSAGES_COUNT) /* a prompt must leave room for one token */
        snprintf(msg, sizeof msg, "prompt is too long: %zu tokens > %zu maximum", n_prompt, n_ctx - 1);
    else if (api == DJ_API_RESPONSES)
        snprintf(msg, sizeof msg, "Your input exceeds the context window of this model (%zu tokens; the input "
                 "has %zu). Please adjust your input and try again.", n_ctx, n_prompt);
    else
        snprintf(msg, sizeof msg, "This model's maximum context length is %zu tokens. However, your messages "
                 "resulted in %zu tokens. Please reduce the length of the messages.", n_ctx, n_prompt);
    return send_json(c, 400, api_error_json_ex(api, 400, NULL, api == DJ_API_RESPONSES ? "input" : "messages",
                                               "context_length_exceeded", msg));
}

/* Renders and tokenizes the request's messages. */
static enum dj_status build_prompt(struct dj_server *s, const struct dj_chat_req *cr, struct dj_jinja_out *o,
                                   dj_token **toks, size_t *n) {
    json_t *msgs = chat_normalize_messages(cr->messages);
    if (!msgs) return DJ_ERR_INVALID;
    enum dj_system_placement how;
    enum dj_status st =
        chat_render_placed(s->tmpl, msgs, cr->tools, cr->template_kwargs, true, (int64_t)time(NULL), o, &how);
    json_decref(msgs);
    if (!st && how != DJ_SYSTEM_AS_IS && !atomic_exchange(&s->said_folded, true))
        fprintf(stderr, "deja serve: this chat template %s: system messages it does not render where they stand "
                        "are folded into the user turn beside them (said once)\n",
                how == DJ_SYSTEM_FOLDED_ALL ? "has no system role" : "renders a system message only first");
    if (st) return dj_fail(DJ_ERR_INVALID, "the chat template failed on these messages: %s", dj_last_error());
    if (toks && (st = chat_tokenize(s->m->vocab, s->tmpl, o, true, toks, n)) != DJ_OK) jinja_out_free(o);
    return st;
}

/* The grammar format of a template family's tool calls; false for the
 * families whose calls are parsed from free output (toolcall.h says why). */
static bool tool_format_of(enum dj_tool_syntax t, enum dj_tool_format *f) {
    static const struct {
        enum dj_tool_syntax syn;
        enum dj_tool_format fmt;
    } map[] = {
        {DJ_TOOLS_HERMES, DJ_TOOL_FORMAT_HERMES},           {DJ_TOOLS_QWEN3_CODER, DJ_TOOL_FORMAT_QWEN3_CODER},
        {DJ_TOOLS_LLAMA3, DJ_TOOL_FORMAT_LLAMA3},           {DJ_TOOLS_MISTRAL, DJ_TOOL_FORMAT_MISTRAL},
        {DJ_TOOLS_DEEPSEEK_V3, DJ_TOOL_FORMAT_DEEPSEEK_V3}, {DJ_TOOLS_DEEPSEEK_V31, DJ_TOOL_FORMAT_DEEPSEEK_V31},
        {DJ_TOOLS_FUNCTIONARY_V31, DJ_TOOL_FORMAT_FUNCTIONARY_V31}, {DJ_TOOLS_COMMAND_R, DJ_TOOL_FORMAT_COMMAND_R},
        {DJ_TOOLS_GRANITE, DJ_TOOL_FORMAT_GRANITE},         {DJ_TOOLS_KIMI_K2, DJ_TOOL_FORMAT_KIMI_K2},
        {DJ_TOOLS_SOLAR, DJ_TOOL_FORMAT_SOLAR},             {DJ_TOOLS_NEMOTRON, DJ_TOOL_FORMAT_NEMOTRON},
        {DJ_TOOLS_APRIEL, DJ_TOOL_FORMAT_APRIEL},           {DJ_TOOLS_MINIMAX_M1, DJ_TOOL_FORMAT_MINIMAX_M1},
        {DJ_TOOLS_FIREFUNCTION, DJ_TOOL_FORMAT_FIREFUNCTION}, {DJ_TOOLS_GIGACHAT, DJ_TOOL_FORMAT_GIGACHAT},
        {DJ_TOOLS_GLM, DJ_TOOL_FORMAT_GLM},                 {DJ_TOOLS_GPT_OSS, DJ_TOOL_FORMAT_GPT_OSS},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].syn == t) {
            *f = map[i].fmt;
            return true;
        }
    return false;
}

/* The grammar a request needs, as GBNF (NULL: none); *trigger for lazy ones
 * (static: the family's chat_tool_trigger).  syn: the template's syntax with
 * think_forced_open for this prompt. */
static enum dj_status request_grammar(struct dj_server *s, const struct dj_chat_req *cr, const struct dj_chat_syntax *syn,
                                      char **gbnf, const char **trigger) {
    *gbnf = NULL;
    *trigger = NULL;
    if (cr->json_schema || cr->json_object) {
        struct dj_json_schema_opts o = json_schema_default_opts();
        o.whitespace = DJ_JSON_WS_FLEXIBLE;
        json_t *any = cr->json_schema ? NULL : json_pack("{s:s}", "type", "object");
        enum dj_status st = json_schema_to_gbnf_value(cr->json_schema ? cr->json_schema : any, &o, gbnf);
        json_decref(any);
        return st ? dj_fail(st, "response_format: %s", dj_last_error()) : DJ_OK;
    }
    if (!cr->tools || !json_array_size(cr->tools) || cr->tool_choice == DJ_TOOL_NONE) return DJ_OK;
    struct dj_toolcall_opts to = toolcall_default_opts();
    if (!tool_format_of(s->tmpl->syn.tools, &to.format)) return DJ_OK; /* parsed from free output */
    to.choice = cr->tool_choice;
    to.name = cr->tool_name;
    to.parallel = cr->parallel_tool_calls;
    to.think_open = syn->think_open;
    to.think_close = syn->think_close;
    to.think_forced_open = syn->think_forced_open;
    struct dj_toolcall_grammar tg = {0};
    enum dj_status st = toolcall_grammar_build_value(cr->tools, &to, &tg);
    /* a schema one syntax cannot express (Qwen3-Coder / GLM XML values, tool names a raw-name syntax
     * cannot carry): free output, parsed as before */
    if (st == DJ_ERR_UNSUPPORTED) return DJ_OK;
    /* a tool schema the converter refuses (docs/SERVER.md "JSON Schema coverage"): with tool_choice
     * auto the calls are parsed from free output, as for the families without grammars, rather than
     * failing a request whose tools the model may never call; required / named still fail (the
     * client asked for a call deja cannot guarantee) */
    if (st && st != DJ_ERR_NOMEM && cr->tool_choice == DJ_TOOL_AUTO) {
        fprintf(stderr, "deja serve: %s: tool calls are parsed from free output for this request\n",
                dj_last_error()); /* the message starts with "tools: " */
        return DJ_OK;
    }
    if (st) return dj_fail(st, "%s", dj_last_error());
    const bool lazy = cr->tool_choice == DJ_TOOL_AUTO;
    *gbnf = strdup(lazy ? tg.lazy_gbnf : tg.gbnf);
    if (lazy) *trigger = chat_tool_trigger(s->tmpl->syn.tools);
    toolcall_grammar_free(&tg);
    return *gbnf ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "out of memory");
}

/* deja's reuse counts as response headers (name, value pairs; vals holds the numbers). */
static void deja_headers(const struct sreq *r, char vals[4][24], const char *h[9]) {
    const struct dj_turn_result *x = &r->res[0];
    snprintf(vals[0], 24, "%zu", x->n_cached);
    snprintf(vals[1], 24, "%zu", x->n_reused_own);
    snprintf(vals[2], 24, "%zu", x->n_reused_pool);
    snprintf(vals[3], 24, "%zu", x->n_computed);
    const char *names[4] = {"X-Deja-Cached-Tokens", "X-Deja-Reused-Own", "X-Deja-Reused-Pool", "X-Deja-Computed-Tokens"};
    for (int i = 0; i < 4; i++) {
        h[2 * i] = names[i];
        h[2 * i + 1] = vals[i];
    }
    h[8] = NULL;
}

static bool send_final(struct http_req *c, struct sreq *r) {
    struct dj_chat_choice *ch = calloc(r->n, sizeof *ch);
    if (!ch) return send_api_error(c, r->api, 500, NULL, "out of memory");
    for (uint32_t i = 0; i < r->n; i++) {
        struct chat_acc *a = &r->acc[i];
        ch[i].content = a->content.p;
        ch[i].n_content = a->content.n;
        ch[i].reasoning = a->reasoning.p;
        ch[i].n_reasoning = a->reasoning.n;
        ch[i].calls = a->calls;
        ch[i].n_calls = a->n_calls;
        ch[i].finish = r->res[i].finish;
        ch[i].stop_sequence = user_stop(r, &r->res[i]);
        ch[i].reasoning_omitted = r->reasoning_omitted;
        ch[i].logprobs = NULL;
        if (r->logprobs) ch[i].logprobs = json_pack("{s:O}", "content", a->logprobs ? a->logprobs : json_array());
    }
    struct dj_chat_usage u;
    chat_usage(r, &u);
    json_t *xd = xdeja_json(r);
    u.x_deja = xd;
    json_t *j = api_response(r->api, r->cmpl_id, r->model ? r->model : r->s->alias, r->created, ch, r->n, &u);
    json_decref(xd);
    api_responses_apply_meta(j, r->resp_meta);
    keep_response(r, json_incref(j));
    for (uint32_t i = 0; i < r->n; i++) json_decref(ch[i].logprobs);
    free(ch);
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) return send_api_error(c, r->api, 500, NULL, "out of memory");
    char vals[4][24];
    const char *h[9];
    deja_headers(r, vals, h);
    metrics_count_status(&r->s->metrics, 200);
    const bool ret = http_respond(c, 200, "application/json", txt, strlen(txt), h);
    free(txt);
    return ret;
}

static const char *id_prefix(enum dj_api api) {
    return api == DJ_API_RESPONSES ? "resp_" : api == DJ_API_MESSAGES ? "msg_" : "chatcmpl-";
}

bool chat_endpoint(struct dj_server *s, struct http_req *c, enum dj_api api, const char *body,
                              size_t n_body) {
    if (!s->tmpl) return send_api_error(c, api, 500, NULL, "%s", s->tmpl_error);
    if (api != DJ_API_MESSAGES_COUNT && server_full(s)) return send_busy(c);
    struct dj_chat_req cr = {0};
    int code = 400;
    const char *param = NULL;
    if (api_parse_chat(api, s->alias, body, n_body, &cr, &code, &param) != DJ_OK)
        return send_api_error(c, api, (unsigned)code, param, "%s", dj_last_error());
    if (api_chat_check_vocab(&cr, vocab_n_tokens(s->m->vocab), &code, &param) != DJ_OK) { /* logit_bias ids */
        api_chat_req_free(&cr);
        return send_api_error(c, api, (unsigned)code, param, "%s", dj_last_error());
    }
    json_t *err = NULL;
    unsigned err_status = 0;
    if (api_responses_attach(&cr, s->rstore, &err, &err_status) != DJ_OK) { /* previous_response_id */
        api_chat_req_free(&cr);
        return send_json(c, err_status, err);
    }
    struct dj_jinja_out o = {0};
    dj_token *toks = NULL;
    size_t n_toks = 0;
    if (build_prompt(s, &cr, &o, &toks, &n_toks) != DJ_OK) {
        api_chat_req_free(&cr);
        return send_api_error(c, api, 400, "messages", "%s", dj_last_error());
    }
    /* reasoning starts open when the generation prompt ends inside a think block */
    struct dj_chat_syntax syn = s->tmpl->syn;
    syn.think_forced_open = chat_syntax_prompt_opens_think(&syn, o.text, o.n);
    jinja_out_free(&o);
    if (api == DJ_API_MESSAGES_COUNT) {
        api_chat_req_free(&cr);
        free(toks);
        return send_json(c, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n_toks));
    }
    const size_t n_ctx = engine_n_ctx(s->e);
    if (n_toks >= n_ctx && engine_overflow(s->e) != DJ_OVERFLOW_PRUNE) { /* prune: the engine drops its middle */
        api_chat_req_free(&cr);
        free(toks);
        return send_too_long(c, api, n_toks, n_ctx);
    }
    char *gbnf = NULL;
    const char *trigger = NULL;
    struct gent *ge = NULL;
    struct dj_gproc *gp = NULL;
    enum dj_status st = request_grammar(s, &cr, &syn, &gbnf, &trigger);
    if (!st && gbnf) st = gcache_get(s, gbnf, &ge);
    free(gbnf);
    if (!st && ge) {
        struct dj_gproc_params gpp = {.g = ge->g, .gtok = ge->gt, .vocab = s->m->vocab, .trigger = trigger,
                                      .memo = ge->memo};
        st = gproc_create(&gpp, &gp);
    }
    /* a reasoning budget wraps the grammar (if any): the grammar sees every token, the budget forces
     * the end of thinking; without think markers in the template there is nothing to budget */
    struct dj_think_budget *tb = NULL;
    const char *what = cr.json_schema || cr.json_object ? "response_format" : "tools";
    if (!st && cr.reasoning_budget >= 0 && syn.think_open && syn.think_close) {
        what = "thinking";
        struct dj_logits_processor inner;
        if (gp) inner = gproc_processor(gp);
        struct dj_think_budget_params tp = {.vocab = s->m->vocab, .open = syn.think_open, .close = syn.think_close,
                                            .starts_open = syn.think_forced_open,
                                            .budget = (size_t)cr.reasoning_budget, .inner = gp ? &inner : NULL};
        st = think_budget_create(&tp, &tb);
    }
    if (st) {
        if (ge) gcache_release(s, ge);
        api_chat_req_free(&cr);
        free(toks);
        return send_api_error(c, api, 400, what, "%s", dj_last_error());
    }
    struct sreq *r = sreq_new(s, c, cr.n ? cr.n : 1);
    if (!r) {
        think_budget_free(tb);
        gproc_free(gp);
        if (ge) gcache_release(s, ge);
        api_chat_req_free(&cr);
        free(toks);
        return send_api_error(c, api, 500, NULL, "out of memory");
    }
    r->is_chat = true;
    r->api = api;
    r->gent = ge;
    r->gp = gp;
    r->tb = tb;
    r->reasoning_omitted = cr.reasoning_omitted;
    r->cache_control = cr.cache_control;
    r->path = api == DJ_API_CHAT ? "/v1/chat/completions" : api == DJ_API_RESPONSES ? "/v1/responses" : "/v1/messages";
    r->stream = cr.stream;
    r->include_usage = cr.include_usage;
    r->logprobs = cr.logprobs;
    r->top_logprobs = cr.top_logprobs;
    struct dj_request_params rp = engine_default_request();
    rp.sampling = cr.sp;
    if (!cr.has_seed) rp.sampling.seed = server_fresh_seed(s);
    snprintf(r->cmpl_id, sizeof r->cmpl_id, "%s%016llx", id_prefix(api),
             (unsigned long long)dj_rng_u64(rp.sampling.seed ^ (uint64_t)dj_time_us(), 11));
    r->tp = calloc(r->n, sizeof *r->tp);
    r->acc = calloc(r->n, sizeof *r->acc);
    bool ok = r->tp && r->acc;
    for (size_t k = 0; ok && k < cr.n_stop; k++) ok = (r->stops[r->n_stops++] = strdup(cr.stop[k])) != NULL;
    r->n_user_stops = r->n_stops;
    if (ok && s->turn_end_stop) ok = (r->stops[r->n_stops++] = strdup(s->turn_end_stop)) != NULL;
    const char *model = json_string_value(json_object_get(cr.root, "model"));
    if (ok && api == DJ_API_MESSAGES && model) ok = (r->model = strdup(model)) != NULL;
    r->resp_meta = json_incref(cr.resp_meta);
    r->resp_items = cr.store ? json_incref(cr.items) : NULL;
    const bool parse_tools = cr.tools && json_array_size(cr.tools) && cr.tool_choice != DJ_TOOL_NONE;
    for (uint32_t i = 0; ok && i < r->n; i++)
        ok = (r->tp[i] = toolparse_new(&syn, parse_tools, true, dj_rng_u64(rp.sampling.seed, 100 + i))) != NULL;
    if (ok && r->stream) {
        ok = (r->st = api_stream_new(api, r->cmpl_id, r->model ? r->model : s->alias, r->created, r->n, r->include_usage, n_toks)) != NULL;
        if (ok) {
            api_stream_set_reasoning_omitted(r->st, r->reasoning_omitted);
            api_stream_set_meta(r->st, r->resp_meta);
            struct dj_sbuf b = {0};
            api_stream_start(r->st, &b);
            flush_sse(r, &b);
        }
    }
    if (!ok) {
        api_chat_req_free(&cr);
        free(toks);
        r->refs = 1;
        sreq_unref(r);
        return send_api_error(c, api, 500, NULL, "out of memory");
    }
    struct dj_logits_processor proc;
    rp.ignore_eos = cr.ignore_eos;
    rp.prompt = toks;
    rp.n_prompt = n_toks;
    rp.max_tokens = server_gen_cap(s, n_toks, cr.max_tokens);
    rp.n = r->n;
    rp.cache_salt = cr.cache_salt && *cr.cache_salt ? cr.cache_salt : NULL;
    rp.stop = (const char *const *)r->stops;
    rp.n_stop = r->n_stops;
    rp.logprobs = cr.logprobs;
    rp.n_probs = cr.top_logprobs;
    if (tb) {
        proc = think_budget_processor(tb);
        rp.proc = &proc;
    } else if (gp) {
        proc = gproc_processor(gp);
        rp.proc = &proc;
    }
    rp.on_token = chat_on_token;
    rp.on_done = chat_on_done;
    rp.ud = r;
    st = engine_submit(s->e, &rp, &r->id);
    free(toks);
    api_chat_req_free(&cr);
    if (st) {
        r->refs = 1;
        sreq_unref(r);
        return send_api_error(c, api, st == DJ_ERR_NOMEM ? 503 : 400, NULL, "%s", dj_last_error());
    }
    if (r->stream) return send_stream(c, r);
    bool ret;
    if (!server_wait_done(r, c)) ret = false; /* cancelled: answered with nothing or a 503 */
    else if (r->res[0].finish == DJ_FINISH_ERROR) ret = send_api_error(c, api, 500, NULL, "generation failed: %s", r->res[0].error);
    else ret = send_final(c, r);
    sreq_unref(r);
    return ret;
}

/* POST /apply-template (llama-server): a chat-completions body → {"prompt": the rendered text}. */
bool apply_template_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body) {
    if (!s->tmpl) return send_api_error(c, DJ_API_CHAT, 500, NULL, "%s", s->tmpl_error);
    struct dj_chat_req cr = {0};
    int code = 400;
    const char *param = NULL;
    if (api_parse_chat(DJ_API_CHAT, s->alias, body, n_body, &cr, &code, &param) != DJ_OK)
        return send_api_error(c, DJ_API_CHAT, (unsigned)code, param, "%s", dj_last_error());
    struct dj_jinja_out o = {0};
    enum dj_status st = build_prompt(s, &cr, &o, NULL, NULL);
    api_chat_req_free(&cr);
    if (st) return send_api_error(c, DJ_API_CHAT, 400, "messages", "%s", dj_last_error());
    json_t *j = json_pack("{s:o}", "prompt", jstr(o.text, o.n));
    jinja_out_free(&o);
    return send_json(c, 200, j);
}
