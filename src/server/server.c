/*
 * server.c — `deja serve` (server.h): libmicrohttpd with a thread per
 * connection, jansson for JSON, one engine thread.  The HTTP side (bodies,
 * routing, responses, SSE streams, request records and their lifetime) and
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
#include <microhttpd.h>
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
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "reused_own", (json_int_t)r0->n_reused_own, "reused_pool",
                     (json_int_t)r0->n_reused_pool, "reused_disk", (json_int_t)r0->n_reused_disk, "computed",
                     (json_int_t)r0->n_computed, "forced",
                     (json_int_t)r0->n_forced, "ttft_ms", r0->t_ttft_ms, "queue_ms", r0->t_queue_ms);
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
            "deja serve: POST %s %s prompt %zu cached %zu (own %zu, pool %zu, disk %zu) computed %zu generated %zu "
            "finish %s ttft %.1f ms total %.1f ms\n",
            r->path ? r->path : "?", r->stream ? "stream" : "json", x->n_prompt, x->n_cached, x->n_reused_own,
            x->n_reused_pool, x->n_reused_disk, x->n_computed, gen, finish_name(x->finish), x->t_ttft_ms,
            x->t_queue_ms + x->t_prefill_ms + x->t_decode_ms);
}

/* ---- responses ----------------------------------------------------------------- */

/* Sends txt (malloc'd; freed by MHD) with one optional extra header (hname NULL: none). */
enum MHD_Result send_text_hdr(struct MHD_Connection *c, unsigned status, char *txt, const char *ctype,
                                     const char *hname, const char *hvalue) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(txt);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (hname) MHD_add_response_header(resp, hname, hvalue);
    if (tls_server) metrics_count_status(&tls_server->metrics, status);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *txt, const char *ctype) {
    return send_text_hdr(c, status, txt, ctype, NULL, NULL);
}

enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(j);
    if (!txt) return MHD_NO;
    return send_text(c, status, txt, "application/json");
}

/* OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. */
enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    return send_json(c, status,
                     json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", type, "param",
                               param ? json_string(param) : json_null(), "code", json_null()));
}

/* 503 + Retry-After: more requests in flight than --parallel + --queue-max. */
enum MHD_Result send_busy(struct MHD_Connection *c) {
    char *txt = strdup("{\"error\":{\"message\":\"the server is busy: too many requests in flight\","
                       "\"type\":\"server_busy\",\"param\":null,\"code\":null}}");
    return txt ? send_text_hdr(c, 503, txt, "application/json", "Retry-After", "1") : MHD_NO;
}

static enum MHD_Result send_loading(struct MHD_Connection *c) {
    char *txt = strdup("{\"error\":{\"message\":\"the model is still loading\","
                       "\"type\":\"unavailable_error\",\"param\":null,\"code\":503}}");
    return txt ? send_text_hdr(c, 503, txt, "application/json", "Retry-After", "5") : MHD_NO;
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

void server_wait_done(struct sreq *r) {
    bool cancelled = false;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        if (!cancelled && client_gone(r)) { /* non-streaming client gone: stop computing for it */
            cancelled = true;
            engine_cancel(r->s->e, r->id);
        }
        wait_a_little(r);
    }
    pthread_mutex_unlock(&r->mu);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    struct sreq *r = cls;
    pthread_mutex_lock(&r->mu);
    while (r->off == r->n_buf && !r->done) {
        /* a request waiting for its turn sends nothing, so MHD would never notice the client
         * leaving: look for the hang-up ourselves */
        if (client_gone(r)) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        wait_a_little(r);
    }
    size_t n = r->n_buf - r->off;
    if (n > max) n = max;
    memcpy(out, r->buf + r->off, n);
    r->off += n;
    const bool end = n == 0 && r->done;
    pthread_mutex_unlock(&r->mu);
    return end ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

/* The connection is finished (sent, or the client went away): cancel what still runs. */
static void stream_free(void *cls) {
    struct sreq *r = cls;
    pthread_mutex_lock(&r->mu);
    const bool running = !r->done;
    pthread_mutex_unlock(&r->mu);
    if (running) engine_cancel(r->s->e, r->id);
    sreq_unref(r);
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
    if (gen == 0) gen = n_ctx > n_prompt ? n_ctx - n_prompt : 1;
    return gen;
}

struct sreq *sreq_new(struct dj_server *s, struct MHD_Connection *c, uint32_t n) {
    struct sreq *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->s = s;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2;
    r->fd = -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
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

enum MHD_Result send_stream(struct MHD_Connection *c, struct sreq *r) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, r, stream_free);
    if (!resp) {
        stream_free(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (tls_server) metrics_count_status(&tls_server->metrics, 200);
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- small endpoints --------------------------------------------------------------- */

static enum MHD_Result tokenize(struct dj_server *s, struct MHD_Connection *c, json_t *req) {
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

static enum MHD_Result detokenize(struct dj_server *s, struct MHD_Connection *c, json_t *req) {
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
static enum MHD_Result stored_response(struct dj_server *s, struct MHD_Connection *c, const char *id,
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

static bool authorized(struct dj_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return true;
    /* OpenAI clients send "Authorization: Bearer KEY", Anthropic's "x-api-key: KEY" */
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *want = s->p.api_key;
    if (h && strncmp(h, "Bearer ", 7) == 0) h += 7;
    else h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (!h) return false;
    const size_t nh = strlen(h), nw = strlen(want);
    unsigned diff = (unsigned)(nh ^ nw);
    for (size_t i = 0; i < nh; i++) diff |= (unsigned char)h[i] ^ (unsigned char)want[i % (nw ? nw : 1)]; /* constant time */
    return diff == 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    struct dj_server *s = cls;
    struct body *b = *con_cls;
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return MHD_NO;
        *con_cls = b;
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t max = s->p.body_max ? s->p.body_max : (size_t)8 << 20;
        if (!b->too_big && b->n + *upload_size <= max) {
            if (!buf_append(&b->buf, &b->n, &b->cap, upload, *upload_size)) b->too_big = true;
        } else {
            b->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    tls_server = s;
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
    if (!authorized(s, c)) return send_error(c, 401, NULL, "invalid or missing API key (Authorization: Bearer KEY, or x-api-key: KEY)");
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
    static const struct {
        const char *path;
        int api; /* enum dj_api; -1: completions; -2: apply-template; -3 tokenize; -4 detokenize; -5 infill */
    } routes[] = {{"/v1/completions", -1}, {"/completions", -1}, {"/infill", -5}, {"/v1/chat/completions", DJ_API_CHAT},
                  {"/chat/completions", DJ_API_CHAT}, {"/v1/responses", DJ_API_RESPONSES},
                  {"/responses", DJ_API_RESPONSES}, {"/v1/messages", DJ_API_MESSAGES},
                  {"/v1/messages/count_tokens", DJ_API_MESSAGES_COUNT}, {"/apply-template", -2},
                  {"/apply_template", -2}, {"/tokenize", -3}, {"/detokenize", -4}};
    int api = -100;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) api = routes[i].api;
    if (api == -100) return send_error(c, 404, NULL, "no endpoint %s %s (not implemented or unknown)", method, url);
    if (strcmp(method, "POST")) return send_error(c, 405, NULL, "use POST for %s", url);
    if (b->too_big) return send_error(c, 413, NULL, "request body over the limit");
    const char *body = b->buf ? b->buf : "";
    if (api == -1 || api == -5) {
        metrics_count_request(&s->metrics, DJ_MK_COMPLETIONS);
        return api == -1 ? completions_endpoint(s, c, body, b->n) : infill_endpoint(s, c, body, b->n);
    }
    if (api >= 0) {
        metrics_count_request(&s->metrics, api == DJ_API_CHAT        ? DJ_MK_CHAT
                                           : api == DJ_API_RESPONSES ? DJ_MK_RESPONSES
                                           : api == DJ_API_MESSAGES  ? DJ_MK_MESSAGES
                                                                     : DJ_MK_OTHER);
        return chat_endpoint(s, c, (enum dj_api)api, body, b->n);
    }
    metrics_count_request(&s->metrics, DJ_MK_OTHER);
    if (api == -2) return apply_template_endpoint(s, c, body, b->n);
    json_t *req = server_parse_body(body, b->n);
    if (!req) return send_error(c, 400, NULL, "%s", dj_last_error());
    enum MHD_Result ret = api == -3 ? tokenize(s, c, req) : detokenize(s, c, req);
    json_decref(req);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)c;
    (void)code;
    struct body *b = *con_cls;
    if (b) free(b->buf);
    free(b);
    *con_cls = NULL;
}

/* Copies what /metrics shows of the engine (only this thread may read it). */
static void snapshot(struct dj_server *s) {
    struct dj_engine_snapshot sn;
    sn.running = engine_n_running(s->e);
    const size_t pending = engine_n_pending(s->e);
    sn.waiting = pending > sn.running ? pending - sn.running : 0;
    engine_pool_stats(s->e, &sn.pool);
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
    if (chat_template_create(src, n, bos, eos, &s->tmpl) != DJ_OK) {
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
    fprintf(stderr, "deja serve: chat template: %s (tool calls: %s%s%s)\n",
            s->p.chat_template ? "from --chat-template-file" : s->tmpl->builtin ? "built-in ChatML" : "the model's",
            chat_tool_syntax_name(s->tmpl->syn.tools), s->tmpl->syn.think_open ? ", reasoning markers" : "",
            s->turn_end_stop ? "; <|im_end|> is text in this vocabulary: chat turns also stop at that string" : "");
}

enum dj_status server_listen(const char *model_path, const struct dj_server_params *p, struct dj_server **out) {
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
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(p->port);
    if (inet_pton(AF_INET, p->host, &addr.sin_addr) != 1) {
        server_stop(s, 0);
        return dj_fail(DJ_ERR_INVALID, "serve: --host '%s' is not an IPv4 address", p->host);
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                            NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(p->timeout_s ? p->timeout_s : 600), MHD_OPTION_END);
    if (!s->d) {
        server_stop(s, 0);
        return dj_fail(DJ_ERR_IO, "serve: cannot listen on %s:%u (in use, or not allowed)", p->host, p->port);
    }
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
    fprintf(stderr, "deja serve: KV cache: K %s, V %s, %zu KiB per position; %u blocks of %u positions (%.1f MiB)\n",
            dj_type_name(s->p.engine.kv_type_k),
            model_kv_k_only(m) ? "none (Multi-head Latent Attention: values from the K row)"
                               : dj_type_name(s->p.engine.kv_type_v),
            engine_kv_bytes_per_token(m, s->p.engine.kv_type_k, s->p.engine.kv_type_v) / 1024, ps.capacity,
            s->p.engine.opt.block_size, (double)ps.capacity * (double)ps.block_bytes / 1048576.0);
    s->engine_started = true;
    atomic_store(&s->ready, true); /* publishes m, e and tmpl to the connection threads */
    return DJ_OK;
}

uint16_t server_port(const struct dj_server *s) {
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}

void server_stop(struct dj_server *s, int deadline_ms) {
    if (!s) return;
    if (s->d) MHD_quiesce_daemon(s->d);
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
    if (s->d) MHD_stop_daemon(s->d);
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
