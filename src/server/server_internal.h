/*
 * server_internal.h — what server.c (HTTP, routing, small endpoints),
 * server_completions.c (/v1/completions, /infill) and server_chat.c (the chat
 * endpoints, the grammar cache) share.
 */
#ifndef DJ_SERVER_INTERNAL_H
#define DJ_SERVER_INTERNAL_H

#include <jansson.h>
#include "server/http.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "chat/chat.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/server.h"

/* A cached grammar (server_chat.c's gcache): the parse, its masks over the vocabulary
 * and the draft memo, shared by the requests that hold a reference. */
struct gent {
    struct gent *next;
    char *gbnf;
    struct dj_grammar *g;
    struct dj_gtok *gt;
    struct dj_gdraft_memo *memo;
    int refs;
    uint64_t used;
};
struct cmpl_state; /* a text completion's own state (server_completions.c) */

struct dj_server {
    const struct dj_model *m;
    struct dj_engine *e;
    struct http_server *http;
    struct dj_server_params p;
    char *alias;
    pthread_t engine_thread;
    atomic_bool stop;
    atomic_bool ready; /* set once the model is attached and the engine thread runs: until then
                          every endpoint answers 503 (m, e and tmpl are not to be read) */
    bool engine_started; /* engine_thread was created (server_stop joins it) */
    atomic_ullong n_req;
    /* requests in flight (for shutdown) */
    pthread_mutex_t mu;
    struct sreq *live;
    size_t n_live;
    struct dj_metrics metrics;
    struct dj_chat_template *tmpl; /* NULL: the template failed to compile (chat endpoints answer 500) */
    char tmpl_error[256];
    /* the end-of-turn marker of a ChatML template when it is plain text in the
     * vocabulary (no <|im_end|> token, as codelm): chat requests also stop there; or NULL */
    const char *turn_end_stop;
    atomic_bool said_folded; /* the log said once that system messages are folded for this template */
    /* grammars (server_chat.c): a small cache keyed by GBNF text, and what waits to be
     * freed on the engine thread (which alone touches masks) */
    pthread_mutex_t gmu;
    struct dj_gvocab *gvocab; /* made on first use */
    struct gent *gcache, *graveyard;
    uint64_t gclock;
    struct dj_response_store *rstore; /* stored Responses (response_store.h); NULL: storing is off */
    uint32_t idle_blocks;   /* engine thread: engine_n_blocks_idle when last counted (snapshot) */
    int64_t idle_blocks_us; /* and when */
};

/* Per completion of a chat request: what the parser produced. */
struct chat_acc {
    struct dj_sbuf content, reasoning;
    struct dj_chat_call *calls;
    size_t n_calls;
    json_t *logprobs;   /* non-streaming: the entries so far; streaming: those not sent yet */
};

/* One HTTP request's generation: filled by the engine thread, drained by the
 * connection thread.  Two references: the engine's (until the last on_done)
 * and the connection's (until the response is sent or the client is gone). */
struct sreq {
    struct dj_server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    uint64_t id;
    bool stream, include_usage, done, cancelled;
    uint32_t n, n_done;
    char cmpl_id[48];
    time_t created;
    char *buf; /* streaming: SSE bytes not read yet from off */
    size_t n_buf, cap_buf, off;
    char **text; /* non-streaming: per completion */
    size_t *n_text, *cap_text;
    struct dj_turn_result *res;
    int64_t *t_last_us;       /* per completion: the last token's time (inter-token latency) */
    struct sreq *prev, *next; /* s->live */
    int fd;                   /* the client's socket (streaming: watched for a hang-up while waiting) */
    const char *path;         /* for the log line */
    /* chat endpoints (server_chat.c) */
    bool is_chat;
    enum dj_api api;
    bool logprobs;
    uint32_t top_logprobs;
    struct dj_api_stream *st;
    struct dj_toolparse **tp; /* per completion */
    struct chat_acc *acc;     /* per completion */
    struct gent *gent;        /* the grammar in use, or NULL */
    struct dj_gproc *gp;
    struct dj_think_budget *tb; /* the reasoning budget (wrapping gp), or NULL */
    bool reasoning_omitted;   /* Anthropic thinking.display "omitted" */
    bool cache_control;       /* Anthropic: the request asked for caching (usage.cache_creation_input_tokens) */
    char *stops[DJ_SERVER_STOP_MAX + 1]; /* copies: the request's stop strings, then turn_end_stop */
    size_t n_stops, n_user_stops;
    char *model; /* /v1/messages: the request's model, echoed in the response (malloc'd) */
    /* text completions (server_completions.c; gent, gp and stops above serve them too) */
    struct cmpl_state *cmpl;
    json_t *resp_meta;  /* /v1/responses: the request echo and namespace names (api.h), or NULL */
    json_t *resp_items; /* /v1/responses with store: the conversation's input items, kept with the response
                           (both read-only once set; their nodes are shared with the parsed body, which
                           the connection thread frees meanwhile: jansson's refcounts are atomic) */
};

bool buf_append(char **buf, size_t *n, size_t *cap, const char *s, size_t len);
json_t *jstr(const char *s, size_t n);
void sreq_unref(struct sreq *r);
/* A new request record with two references, registered in s->live; NULL when out of memory. */
struct sreq *sreq_new(struct dj_server *s, struct http_req *c, uint32_t n);
bool send_text_hdr(struct http_req *c, unsigned status, char *txt, const char *ctype,
                              const char *hname, const char *hvalue);
bool send_json(struct http_req *c, unsigned status, json_t *j);
/* OpenAI's error shape: {"error": {"message", "type", "param", "code": null}}; param NULL: null. */
bool send_error(struct http_req *c, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool send_busy(struct http_req *c);
bool server_full(struct dj_server *s);
/* One line per request on stderr (method, path, tokens, TTFT, total) and the metrics. */
void server_log_request(const struct sreq *r);
/* deja's x_deja object: where the prompt's tokens came from. */
json_t *xdeja_json(const struct sreq *r);
/* Inter-token latency of completion i (engine thread, on each token). */
void server_note_token(struct sreq *r, uint32_t i);
/* Non-streaming: blocks until r is done; cancels it if the client hangs up (or half-closes)
 * meanwhile.  True when r finished; false when it was cancelled, and then c is answered
 * already: with nothing (http_abort) if the client left, 503 if the server is stopping. */
bool server_wait_done(struct sreq *r, struct http_req *c);
/* Queues an SSE response reading r (stream_reader / stream_free of server.c). */
bool send_stream(struct http_req *c, struct sreq *r);
/* The seed for a request that gives none: a fresh one per request, as OpenAI. */
uint64_t server_fresh_seed(struct dj_server *s);
/* The generation cap for a request that sets none (or sets more than fits). */
size_t server_gen_cap(const struct dj_server *s, size_t n_prompt, size_t max_tokens);

/* server_chat.c */
bool chat_endpoint(struct dj_server *s, struct http_req *c, enum dj_api api, const char *body,
                              size_t n_body);
bool apply_template_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body);
void chat_sreq_free(struct sreq *r);     /* the chat parts of r (any thread) */
void server_gcache_collect(struct dj_server *s); /* engine thread: frees grammars no request uses */
void server_gcache_free(struct dj_server *s);
/* A grammar for gbnf, from the cache or compiled now: a reference the caller gives back
 * with gcache_release (once the engine is done with the request).  A bad grammar:
 * grammar_parse's status and message. */
enum dj_status gcache_get(struct dj_server *s, const char *gbnf, struct gent **out);
void gcache_release(struct dj_server *s, struct gent *e);

/* server_completions.c */
bool completions_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body);
bool infill_endpoint(struct dj_server *s, struct http_req *c, const char *body, size_t n_body);
void cmpl_sreq_free(struct sreq *r); /* the text-completion parts of r (any thread) */

#endif
