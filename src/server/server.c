/*
 * server.c — `deja serve` (server.h) over the HTTP layer of http.h (an I/O
 * thread, a worker thread per request answered), jansson for JSON, one engine
 * thread.  The server's side of HTTP (on_head: the key, the route and the
 * body type checked before any body is read; routing; responses and errors in
 * each dialect's shape; SSE streams; request records and their lifetime) and
 * the small endpoints (/health, /metrics, /v1/models, /tokenize,
 * /detokenize); the text completions are server_completions.c's, the chat
 * endpoints server_chat.c's.
 */
#include "server/server.h"

#include "core/ggml_type.h"
#include "server/request.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <jansson.h>
#include "server/http.h"
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "model/context.h"
#include "server/response_store.h"
#include "tokenizer/tokenizer.h"


struct dj_server_params server_default_params(void) {
    struct dj_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.queue_max = 64;
    p.responses_max = 256;
    p.responses_max_bytes = (size_t)64 << 20;
    p.engine = engine_default_params();
    return p;
}

/* The server the current connection thread serves (thread per connection): for
 * counting response codes where a response is queued. */
static __thread struct dj_server *tls_server;

/* ---- per-request queue ------------------------------------------------------ */

bool buf_append(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = (*n + len + 1) * 2;
        char *nb = realloc(*buf, c);
        if (!nb) return false;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *n, s, len);
    *n += len;
    (*buf)[*n] = 0;
    return true;
}

void sreq_unref(struct sreq *r) {
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0) return;
    struct dj_server *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (r->prev) r->prev->next = r->next;
    else if (s->live == r) s->live = r->next;
    if (r->next) r->next->prev = r->prev;
    s->n_live--;
    pthread_mutex_unlock(&s->mu);
    chat_sreq_free(r);
    cmpl_sreq_free(r);
    for (uint32_t i = 0; i < r->n; i++) free(r->text ? r->text[i] : NULL);
    free(r->text);
    free(r->n_text);
    free(r->cap_text);
    free(r->res);
    free(r->t_last_us);
    free(r->buf);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* A JSON string of s[0..n); invalid UTF-8 (never from the engine) becomes U+FFFD. */
json_t *jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("\xEF\xBF\xBD");
}

/* deja's extension: where the prompt's tokens came from. */
json_t *xdeja_json(const struct sreq *r) {
    const struct dj_turn_result *r0 = &r->res[0];
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "reused_own",
                     (json_int_t)r0->n_reused_own, "reused_pool", (json_int_t)r0->n_reused_pool, "reused_disk",
                     (json_int_t)r0->n_reused_disk, "reused_checkpoint", (json_int_t)r0->n_reused_ckpt, "kv_recomputed",
                     (json_int_t)r0->n_kv_recomputed, "computed", (json_int_t)r0->n_computed, "forced",
                     (json_int_t)r0->n_forced, "ctx_dropped", (json_int_t)r0->n_ctx_dropped, "attn_skipped",
                     (json_int_t)r0->n_attn_skipped, "ttft_ms", r0->t_ttft_ms, "queue_ms", r0->t_queue_ms);
}

void server_note_token(struct sreq *r, uint32_t i) {
    if (i >= r->n) return;
    const int64_t now = dj_time_us();
    if (r->t_last_us[i]) metrics_observe_itl(&r->s->metrics, (double)(now - r->t_last_us[i]) / 1e6);
    r->t_last_us[i] = now;
}

static const char *finish_name(enum dj_finish f) {
    return f == DJ_FINISH_LENGTH ? "length" : f == DJ_FINISH_STOP ? "stop" : engine_finish_name(f);
}

void server_log_request(const struct sreq *r) {
    const struct dj_turn_result *x = &r->res[0];
    size_t gen = 0;
    for (uint32_t i = 0; i < r->n; i++) gen += r->res[i].n_gen;
    fprintf(stderr,
            "deja serve: POST %s %s prompt %zu cached %zu (own %zu, pool %zu, disk %zu, checkpoint %zu) computed %zu "
            "(kv recomputed %zu) generated %zu finish %s ttft %.1f ms total %.1f ms\n",
            r->path ? r->path : "?", r->stream ? "stream" : "json", x->n_prompt, x->n_cached, x->n_reused_own,
            x->n_reused_pool, x->n_reused_disk, x->n_reused_ckpt, x->n_computed, x->n_kv_recomputed, gen, finish_name(x->finish), x->t_ttft_ms,
            x->t_queue_ms + x->t_prefill_ms + x->t_decode_ms);
}

/* ---- responses ----------------------------------------------------------------- */

/* Sends txt (malloc'd; freed here) with one optional extra header (hname NULL: none). */
bool send_text_hdr(struct http_req *c, unsigned status, char *txt, const char *ctype, const char *hname,
                   const char *hvalue) {
    const char *h[3] = {hname, hvalue, NULL};
    if (tls_server) metrics_count_status(&tls_server->metrics, status);
    const bool ret = http_respond(c, status, ctype, txt, strlen(txt), hname ? h : NULL);
    free(txt);
    return ret;
}

static bool send_text(struct http_req *c, unsigned status, char *txt, const char *ctype) {
    return send_text_hdr(c, status, txt, ctype, NULL, NULL);
}

bool send_json(struct http_req *c, unsigned status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(j);
    if (!txt) return false;
    return send_text(c, status, txt, "application/json");
}

/* The error dialect of a path: Anthropic's shape under /v1/messages, OpenAI's elsewhere. */
static enum dj_api path_dialect(const char *path) {
    return path && (!strncmp(path, "/v1/messages", 12) || !strncmp(path, "/messages", 9)) ? DJ_API_MESSAGES
                                                                                          : DJ_API_CHAT;
}

/* The error body of status for path, never with an empty message. */
static json_t *error_for(const char *path, unsigned status, const char *type, const char *param, const char *msg) {
    if (!msg || !*msg) msg = status >= 500 ? "internal error (no detail recorded)" : "invalid request (no detail recorded)";
    return api_error_json_ex(path_dialect(path), status, type, param, NULL, msg);
}

/* The error shape of the request's dialect (api_error_json): OpenAI's {"error": {"message",
 * "type", "param", "code"}}, or Anthropic's {"type": "error", "error": {...}} on /v1/messages. */
bool send_error(struct http_req *c, unsigned status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, error_for(http_req_msg(c)->path, status, NULL, param, msg));
}

/* 503 + Retry-After in the path's dialect (OpenAI's type given; Anthropic's is overloaded_error). */
static bool send_unavailable(struct http_req *c, const char *openai_type, const char *retry_after, const char *msg) {
    const char *path = http_req_msg(c)->path;
    json_t *j = error_for(path, 503, path_dialect(path) == DJ_API_MESSAGES ? NULL : openai_type, NULL, msg);
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return txt ? send_text_hdr(c, 503, txt, "application/json", "Retry-After", retry_after) : false;
}

/* More requests in flight than --parallel + --queue-max. */
bool send_busy(struct http_req *c) {
    return send_unavailable(c, "server_busy", "1", "the server is busy: too many requests in flight");
}

static bool send_loading(struct http_req *c) {
    return send_unavailable(c, "unavailable_error", "5", "the model is still loading");
}

/* ---- request plumbing (every generation endpoint) ------------------------------- */

/* Has the client of r hung up?  (A request that sends nothing while it waits or
 * computes would otherwise never learn it.) */
static bool client_gone(const struct sreq *r) {
    struct pollfd pf = {r->fd, POLLRDHUP, 0};
    return r->fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* r->mu held: waits up to 100 ms for news. */
static void wait_a_little(struct sreq *r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

bool server_wait_done(struct sreq *r, struct http_req *c) {
    bool gone = false;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        if (!gone && client_gone(r)) { /* the client hung up (or half-closed): stop computing for it */
            gone = true;
            engine_cancel(r->s->e, r->id);
        }
        wait_a_little(r);
    }
    pthread_mutex_unlock(&r->mu);
    bool cancelled = false;
    for (uint32_t i = 0; i < r->n; i++) cancelled |= r->res[i].finish == DJ_FINISH_CANCELLED;
    if (!cancelled) return true;
    /* a cancelled request is never reported as finished: a client that left gets nothing (it
     * cannot read it; a half-closed one sees the connection close), one still there (the
     * server is stopping) gets 503 */
    if (gone || client_gone(r)) http_abort(c);
    else send_error(c, 503, NULL, "the request was cancelled: the server is shutting down");
    return false;
}

/* The SSE bytes of r as they come: > 0 bytes, 0 at the end, -1 when the client left. */
static long stream_reader(void *cls, char *out, size_t max) {
    struct sreq *r = cls;
    pthread_mutex_lock(&r->mu);
    while (r->off == r->n_buf && !r->done) {
        /* a request waiting for its turn sends nothing, so a write would never notice the
         * client leaving: look for the hang-up ourselves */
        if (client_gone(r)) {
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
        wait_a_little(r);
    }
    size_t n = r->n_buf - r->off;
    if (n > max) n = max;
    memcpy(out, r->buf + r->off, n);
    r->off += n;
    pthread_mutex_unlock(&r->mu);
    return (long)n;
}

bool server_full(struct dj_server *s) {
    if (!s->p.queue_max) return false;
    pthread_mutex_lock(&s->mu);
    const bool full = s->n_live >= (size_t)s->p.engine.n_running_max + s->p.queue_max;
    pthread_mutex_unlock(&s->mu);
    if (full) metrics_count_busy(&s->metrics);
    return full;
}

uint64_t server_fresh_seed(struct dj_server *s) {
    return dj_rng_u64((uint64_t)dj_time_us(), atomic_fetch_add(&s->n_req, 1));
}

size_t server_gen_cap(const struct dj_server *s, size_t n_prompt, size_t max_tokens) {
    const size_t n_ctx = s->p.engine.n_ctx ? s->p.engine.n_ctx : s->m->hp.n_ctx_train;
    size_t gen = max_tokens ? max_tokens : s->p.n_predict;
    /* a prompt that does not fit (--context-overflow prune shortens it): a quarter of the context */
    if (gen == 0) gen = n_ctx > n_prompt ? n_ctx - n_prompt : n_ctx / 4 ? n_ctx / 4 : 1;
    return gen;
}

struct sreq *sreq_new(struct dj_server *s, struct http_req *c, uint32_t n) {
    struct sreq *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->s = s;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2;
    r->fd = http_req_fd(c);
    r->n = n;
    r->created = time(NULL);
    r->text = calloc(n, sizeof *r->text);
    r->n_text = calloc(n, sizeof *r->n_text);
    r->cap_text = calloc(n, sizeof *r->cap_text);
    r->res = calloc(n, sizeof *r->res);
    r->t_last_us = calloc(n, sizeof *r->t_last_us);
    pthread_mutex_lock(&s->mu);
    r->next = s->live;
    if (s->live) s->live->prev = r;
    s->live = r;
    s->n_live++;
    pthread_mutex_unlock(&s->mu);
    if (!r->text || !r->n_text || !r->cap_text || !r->res || !r->t_last_us) {
        r->refs = 1;
        sreq_unref(r);
        return NULL;
    }
    return r;
}

bool send_stream(struct http_req *c, struct sreq *r) {
    static const char *const h[] = {"Cache-Control", "no-cache", NULL};
    if (tls_server) metrics_count_status(&tls_server->metrics, 200);
    const bool ret = http_respond_stream(c, 200, "text/event-stream", h, stream_reader, r);
    /* sent, or the client went away: cancel what still runs */
    pthread_mutex_lock(&r->mu);
    const bool running = !r->done;
    pthread_mutex_unlock(&r->mu);
    if (running) engine_cancel(r->s->e, r->id);
    sreq_unref(r);
    return ret;
}

/* ---- small endpoints --------------------------------------------------------------- */

static bool tokenize(struct dj_server *s, struct http_req *c, json_t *req) {
    json_t *content = json_object_get(req, "content");
    if (!json_is_string(content)) return send_error(c, 400, "content", "content must be a string");
    json_t *as = json_object_get(req, "add_special");
    dj_token *t = NULL;
    size_t n = 0;
    if (vocab_tokenize(s->m->vocab, json_string_value(content), json_string_length(content), json_is_true(as), true, &t,
                       &n) != DJ_OK)
        return send_error(c, 400, "content", "%s", dj_last_error());
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(t[i]));
    free(t);
    return send_json(c, 200, json_pack("{s:o}", "tokens", arr));
}

static bool detokenize(struct dj_server *s, struct http_req *c, json_t *req) {
    json_t *toks = json_object_get(req, "tokens");
    if (!json_is_array(toks)) return send_error(c, 400, "tokens", "tokens must be an array of token ids");
    const size_t n = json_array_size(toks);
    dj_token *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return send_error(c, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(toks, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || (size_t)json_integer_value(x) >= vocab_n_tokens(s->m->vocab)) {
            free(t);
            return send_error(c, 400, "tokens", "tokens[%zu] is not a token id of this model", i);
        }
        t[i] = (dj_token)json_integer_value(x);
    }
    char *out = NULL;
    size_t len = 0;
    enum dj_status st = vocab_detokenize(s->m->vocab, t, n, false, &out, &len);
    free(t);
    if (st) return send_error(c, 400, "tokens", "%s", dj_last_error());
    json_t *j = json_pack("{s:o}", "content", jstr(out, len));
    free(out);
    return send_json(c, 200, j);
}

/* GET / DELETE /v1/responses/{id}: a response kept with store (api.h). */
static bool stored_response(struct dj_server *s, struct http_req *c, const char *id,
                                       const char *method) {
    const bool get = !strcmp(method, "GET");
    if (!get && strcmp(method, "DELETE")) return send_error(c, 405, NULL, "use GET or DELETE for /v1/responses/{id}");
    metrics_count_request(&s->metrics, DJ_MK_OTHER);
    json_t *err = NULL;
    json_t *j = get ? api_responses_get(s->rstore, id, &err) : api_responses_delete(s->rstore, id, &err);
    if (!j) {
        const char *type = json_string_value(json_object_get(json_object_get(err, "error"), "type"));
        return send_json(c, type && !strcmp(type, "server_error") ? 500 : 404, err);
    }
    return send_json(c, 200, j);
}

/* ---- dispatch -------------------------------------------------------------------------- */

enum route_kind { R_COMPLETIONS = -1, R_APPLY_TEMPLATE = -2, R_TOKENIZE = -3, R_DETOKENIZE = -4, R_INFILL = -5,
                  R_NONE = -100 };

/* The POST endpoints: a dialect (enum dj_api, >= 0) or one of enum route_kind. */
static int route_of(const char *path) {
    static const struct {
        const char *path;
        int api;
    } routes[] = {{"/v1/completions", R_COMPLETIONS}, {"/completions", R_COMPLETIONS}, {"/infill", R_INFILL},
                  {"/v1/chat/completions", DJ_API_CHAT}, {"/chat/completions", DJ_API_CHAT},
                  {"/v1/responses", DJ_API_RESPONSES}, {"/responses", DJ_API_RESPONSES},
                  {"/v1/messages", DJ_API_MESSAGES}, {"/v1/messages/count_tokens", DJ_API_MESSAGES_COUNT},
                  {"/apply-template", R_APPLY_TEMPLATE}, {"/apply_template", R_APPLY_TEMPLATE},
                  {"/tokenize", R_TOKENIZE}, {"/detokenize", R_DETOKENIZE}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(path, routes[i].path)) return routes[i].api;
    return R_NONE;
}

/* What answers without a key: probes (load balancers, Claude Code's HEAD /api/hello). */
static bool is_public(const char *path) {
    return !strcmp(path, "/health") || !strcmp(path, "/") || !strcmp(path, "/api/hello");
}

/* OpenAI clients send "Authorization: Bearer KEY" (the scheme is case-insensitive, RFC 9110
 * §11.1), Anthropic's "x-api-key: KEY".  Constant time in the key's bytes. */
static bool authorized(const struct dj_server *s, const struct http_msg *m) {
    if (!s->p.api_key) return true;
    const char *h = http_msg_header(m, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ') h++;
    } else {
        h = http_msg_header(m, "x-api-key");
    }
    if (!h || !*h) return false;
    const char *want = s->p.api_key;
    const size_t nh = strlen(h), nw = strlen(want);
    unsigned diff = (unsigned)(nh ^ nw);
    for (size_t i = 0; i < nh; i++) diff |= (unsigned char)h[i] ^ (unsigned char)want[i % nw];
    return diff == 0;
}

/* A JSON body's media type: application/json or any +json type.  Others are refused (415),
 * as FastAPI (vLLM) does: a browser page may POST text/plain, form and multipart bodies
 * cross-site without a CORS preflight, so a local server must not read them as requests.
 * None given is taken as JSON (scripts, curl without -H) unless the request comes from a
 * browser (an Origin header): a page can send a typeless Blob body without a preflight too. */
static bool json_media_type(const struct http_msg *m) {
    const char *ct = http_msg_header(m, "Content-Type");
    if (!ct) return http_msg_header(m, "Origin") == NULL;
    while (*ct == ' ') ct++;
    const size_t n = strcspn(ct, "; \t");
    if (n == 16 && !strncasecmp(ct, "application/json", 16)) return true;
    return n > 17 && !strncasecmp(ct, "application/", 12) && !strncasecmp(ct + n - 5, "+json", 5);
}

/* The head is complete, no byte of the body is kept yet: refuse here what needs no body. */
static unsigned on_head(void *user, const struct http_msg *m, char *msg, size_t cap) {
    struct dj_server *s = user;
    if (is_public(m->path)) return 0;
    if (!authorized(s, m)) {
        snprintf(msg, cap, "invalid or missing API key (Authorization: Bearer KEY, or x-api-key: KEY)");
        return 401;
    }
    if (!strcmp(m->method, "POST") && route_of(m->path) != R_NONE && !json_media_type(m)) {
        const char *ct = http_msg_header(m, "Content-Type");
        snprintf(msg, cap, "Content-Type %s%.120s%s is not JSON: send Content-Type: application/json", ct ? "'" : "",
                 ct ? ct : "(none, from a browser)", ct ? "'" : "");
        return 415;
    }
    return 0;
}

/* The layer's own errors (framing, limits, deadlines, on_head refusals) in the dialect of the path. */
static char *error_body(void *user, const char *path, unsigned status, const char *msg) {
    struct dj_server *s = user;
    metrics_count_status(&s->metrics, status);
    json_t *j = error_for(path, status, NULL, NULL, msg);
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return txt;
}

static bool serve(struct dj_server *s, struct http_req *c) {
    const struct http_msg *m = http_req_msg(c);
    const char *url = m->path, *method = m->method;
    if (!atomic_load(&s->ready)) { /* as llama-server while it loads */
        if (!strcmp(url, "/health"))
            return send_json(c, 503, json_pack("{s:s, s:{s:s, s:s, s:I}}", "status", "loading model", "error",
                                               "message", "Loading model", "type", "unavailable_error", "code",
                                               (json_int_t)503));
        return send_loading(c);
    }
    if (!strcmp(url, "/health")) return send_json(c, 200, json_pack("{s:s}", "status", "ok"));
    /* GET or HEAD / and /api/hello: what clients probe before their first request (Claude Code sends
     * HEAD /api/hello, without a key, to warm the connection); no key needed, nothing revealed */
    if ((!strcmp(url, "/") || !strcmp(url, "/api/hello")) && (!strcmp(method, "GET") || !strcmp(method, "HEAD")))
        return send_json(c, 200, json_pack("{s:s, s:s}", "status", "ok", "server", "deja"));
    /* past here the key was checked: on_head runs on every request's headers before this */
    if (!strcmp(url, "/metrics")) {
        if (strcmp(method, "GET")) return send_error(c, 405, NULL, "use GET for %s", url);
        char *txt = metrics_render(&s->metrics);
        return txt ? send_text(c, 200, txt, "text/plain; version=0.0.4; charset=utf-8")
                   : send_error(c, 500, NULL, "out of memory");
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        if (strcmp(method, "GET")) return send_error(c, 405, NULL, "use GET for %s", url);
        return send_json(c, 200,
                         json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", s->alias, "object",
                                   "model", "created", (json_int_t)time(NULL), "owned_by", "deja"));
    }
    if (!strncmp(url, "/v1/responses/", 14) && url[14]) return stored_response(s, c, url + 14, method);
    if (!strncmp(url, "/responses/", 11) && url[11]) return stored_response(s, c, url + 11, method);
    const int api = route_of(url);
    if (api == R_NONE) return send_error(c, 404, NULL, "no endpoint %s %s (not implemented or unknown)", method, url);
    if (strcmp(method, "POST")) return send_error(c, 405, NULL, "use POST for %s", url);
    const char *body = m->body;
    const size_t n_body = m->n_body;
    if (api == R_COMPLETIONS || api == R_INFILL) {
        metrics_count_request(&s->metrics, DJ_MK_COMPLETIONS);
        return api == R_COMPLETIONS ? completions_endpoint(s, c, body, n_body) : infill_endpoint(s, c, body, n_body);
    }
    if (api >= 0) {
        metrics_count_request(&s->metrics, api == DJ_API_CHAT        ? DJ_MK_CHAT
                                           : api == DJ_API_RESPONSES ? DJ_MK_RESPONSES
                                           : api == DJ_API_MESSAGES  ? DJ_MK_MESSAGES
                                                                     : DJ_MK_OTHER);
        return chat_endpoint(s, c, (enum dj_api)api, body, n_body);
    }
    metrics_count_request(&s->metrics, DJ_MK_OTHER);
    if (api == R_APPLY_TEMPLATE) return apply_template_endpoint(s, c, body, n_body);
    json_t *req = server_parse_body(body, n_body);
    if (!req) return send_error(c, 400, NULL, "%s", dj_last_error());
    bool ret = api == R_TOKENIZE ? tokenize(s, c, req) : detokenize(s, c, req);
    json_decref(req);
    return ret;
}

static void on_request(void *user, struct http_req *c) {
    struct dj_server *s = user;
    tls_server = s;
    serve(s, c);
}

/* Copies what /metrics shows of the engine (only this thread may read it). */
static void snapshot(struct dj_server *s) {
    struct dj_engine_snapshot sn;
    sn.running = engine_n_running(s->e);
    const size_t pending = engine_n_pending(s->e);
    sn.waiting = pending > sn.running ? pending - sn.running : 0;
    engine_pool_stats(s->e, &sn.pool);
    /* the idle sessions' blocks walk every idle session's table: not after every step of a busy
     * engine, only every 100 ms and whenever it comes to rest (so the figure at rest is exact) */
    const int64_t now = dj_time_us();
    if (pending == 0 || now - s->idle_blocks_us >= 100000) {
        s->idle_blocks = engine_n_blocks_idle(s->e);
        s->idle_blocks_us = now;
    }
    sn.idle_blocks = s->idle_blocks;
    engine_get_stats(s->e, &sn.opt);
    sn.n_forward = engine_n_forward(s->e);
    metrics_set_snapshot(&s->metrics, &sn);
}

static void *engine_main(void *arg) {
    struct dj_server *s = arg;
    snapshot(s);
    while (!atomic_load(&s->stop)) {
        if (engine_n_pending(s->e) == 0) {
            engine_wait_work(s->e, 100);
        } else {
            engine_step(s->e);
            snapshot(s);
        }
        server_gcache_collect(s);
    }
    return NULL;
}

/* The chat template: --chat-template-file, the model's, or the built-in one.  A
 * template that does not compile leaves s->tmpl NULL: the server still serves
 * /v1/completions, and the chat endpoints say why they cannot. */
static void load_template(struct dj_server *s) {
    const struct dj_vocab *v = s->m->vocab;
    const char *bos = vocab_bos(v) >= 0 ? vocab_token_text(v, vocab_bos(v)) : NULL;
    const char *eos = vocab_eos(v) >= 0 ? vocab_token_text(v, vocab_eos(v)) : NULL;
    const char *src = s->p.chat_template;
    size_t n = src ? strlen(src) : 0;
    struct gguf_str gs;
    if (!src && s->m->gguf && gguf_get_str(s->m->gguf, "tokenizer.chat_template", &gs) == DJ_OK && gs.len) {
        src = gs.ptr;
        n = gs.len;
    }
    /* a model without a template: ChatML, or Gemma's turns for the gemma family (chat.h) */
    const enum dj_status cst = src ? chat_template_create(src, n, bos, eos, &s->tmpl)
                                   : chat_template_create_builtin(chat_builtin_for(s->m->arch_name, v), bos, eos, &s->tmpl);
    if (cst != DJ_OK) {
        snprintf(s->tmpl_error, sizeof s->tmpl_error, "the chat template does not compile: %s", dj_last_error());
        fprintf(stderr, "deja serve: %s (chat endpoints disabled; use --chat-template-file)\n", s->tmpl_error);
        s->tmpl = NULL;
        return;
    }
    if (memmem(s->tmpl->src, s->tmpl->n_src, "<|im_end|>", 10)) {
        /* a ChatML template over a vocabulary without an <|im_end|> token (codelm): the model
         * writes the marker as text, so the turn ends at the string */
        dj_token *t = NULL;
        size_t nt = 0;
        if (vocab_tokenize(v, "<|im_end|>", 10, false, true, &t, &nt) == DJ_OK && nt != 1) s->turn_end_stop = "<|im_end|>";
        free(t);
    }
    fprintf(stderr, "deja serve: chat template: %s%s%s%s (tool calls: %s%s%s)\n",
            s->p.chat_template ? "from --chat-template-file"
            : s->tmpl->builtin ? chat_builtin_name(s->tmpl->builtin_kind)
                               : "the model's",
            s->tmpl->builtin ? " (the model has none; architecture " : "", s->tmpl->builtin ? s->m->arch_name : "",
            s->tmpl->builtin ? ")" : "",
            chat_tool_syntax_name(s->tmpl->syn.tools), s->tmpl->syn.think_open ? ", reasoning markers" : "",
            s->turn_end_stop ? "; <|im_end|> is text in this vocabulary: chat turns also stop at that string" : "");
}

enum dj_status server_listen(const char *model_path, const struct dj_server_params *p, struct dj_server **out) {
    if (p->api_key && !*p->api_key) /* it would let in a request with an empty key */
        return dj_fail(DJ_ERR_INVALID, "serve: --api-key is empty: give a key, or leave the option out to serve without one");
    struct dj_server *s = calloc(1, sizeof *s);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "serve: out of memory");
    s->p = *p;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    metrics_init(&s->metrics);
    const char *base = strrchr(model_path, '/');
    s->alias = strdup(p->alias ? p->alias : base ? base + 1 : model_path);
    if (!s->alias) {
        server_stop(s, 0);
        return dj_fail(DJ_ERR_NOMEM, "serve: out of memory");
    }
    struct http_params hp = http_default_params();
    hp.host = p->host;
    hp.port = p->port;
    if (p->conn_max) hp.conn_max = p->conn_max;
    hp.conn_per_ip = p->conn_per_ip;
    if (p->header_timeout_s) hp.head_timeout_ms = p->header_timeout_s * 1000u;
    if (p->body_timeout_s) hp.body_timeout_ms = p->body_timeout_s * 1000u;
    if (p->timeout_s) hp.idle_timeout_ms = hp.write_timeout_ms = p->timeout_s * 1000u;
    if (p->body_max) hp.body_max = p->body_max;
    hp.on_head = on_head;
    hp.on_request = on_request;
    hp.error_body = error_body;
    hp.user = s;
    char err[256];
    if (http_start(&hp, &s->http, err, sizeof err) != 0) {
        server_stop(s, 0);
        return dj_fail(DJ_ERR_IO, "serve: %s", err);
    }
    metrics_set_http(&s->metrics, http_get_stats(s->http));
    if (p->responses_max && p->responses_max_bytes &&
        response_store_create(p->responses_max, p->responses_max_bytes, &s->rstore) != DJ_OK) {
        server_stop(s, 0);
        return dj_fail(DJ_ERR_NOMEM, "serve: out of memory");
    }
    *out = s;
    return DJ_OK;
}

enum dj_status server_attach(struct dj_server *s, const struct dj_model *m) {
    s->m = m;
    load_template(s);
    enum dj_status st = engine_create(m, &s->p.engine, &s->e);
    if (!st && pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        engine_destroy(s->e);
        s->e = NULL;
        st = dj_fail(DJ_ERR_NOMEM, "serve: cannot start the engine thread");
    }
    if (st) return st;
    struct kv_pool_stats ps;
    engine_pool_stats(s->e, &ps);
    /* MLA: one K row per position and layer, no V rows (model_kv_types) */
    fprintf(stderr, "deja serve: KV cache: K %s, V %s, %.2f KiB per position; %u blocks of %u positions (%.1f MiB)\n",
            dj_type_name(s->p.engine.kv_type_k),
            model_kv_k_only(m) ? "none (Multi-head Latent Attention: values from the K row)"
                               : dj_type_name(s->p.engine.kv_type_v),
            (double)ps.block_bytes / s->p.engine.opt.block_size / 1024.0, ps.capacity, /* the pool's: an MTP layer counts */
            s->p.engine.opt.block_size, (double)ps.capacity * (double)ps.block_bytes / 1048576.0);
    s->engine_started = true;
    atomic_store(&s->ready, true); /* publishes m, e and tmpl to the connection threads */
    return DJ_OK;
}

uint16_t server_port(const struct dj_server *s) {
    return http_port(s->http);
}

void server_stop(struct dj_server *s, int deadline_ms) {
    if (!s) return;
    http_quiesce(s->http);
    /* cancel what runs; streams end once their requests finish */
    pthread_mutex_lock(&s->mu);
    for (struct sreq *r = s->live; r; r = r->next) engine_cancel(s->e, r->id);
    pthread_mutex_unlock(&s->mu);
    const int64_t t0 = dj_time_us();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const bool empty = s->live == NULL;
        pthread_mutex_unlock(&s->mu);
        if (empty || dj_time_us() - t0 > (int64_t)deadline_ms * 1000) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    http_stop(s->http, 1000);
    s->http = NULL;
    atomic_store(&s->stop, true);
    if (s->engine_started) pthread_join(s->engine_thread, NULL);
    engine_destroy(s->e);
    server_gcache_free(s);
    response_store_destroy(s->rstore);
    chat_template_free(s->tmpl);
    metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->gmu);
    pthread_mutex_destroy(&s->mu);
    free(s->alias);
    free(s);
}
