/*
 * server.h — the HTTP server over the serving engine (`deja serve`).
 *
 *   client ── HTTP (http.h: an I/O thread, a thread per request answered) ──▶ handler
 *       parse JSON (jansson) → tokenize → engine_submit ──▶ engine thread
 *       ◀── SSE chunks / one JSON body ◀── per-request queue ◀── on_token/on_done
 *
 * One engine thread runs engine_step while work is pending (engine_wait_work
 * otherwise).  A connection thread submits and then either waits for the
 * request to finish (non-streaming) or streams the queue as Server-Sent
 * Events; when a streaming client goes away its request is cancelled.
 *
 * Chat endpoints (server_chat.c): the request in any dialect (api.h) →
 * messages rendered by the chat template (chat/chat.h) → tokens → the engine,
 * with a grammar for tool_choice / response_format; the output parsed into
 * content, reasoning and tool calls (chat/toolparse.h) → the dialect's
 * response or events.
 */
#ifndef DJ_SERVER_SERVER_H
#define DJ_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "model/model.h"

struct dj_server_params {
    const char *host;       /* "127.0.0.1" */
    uint16_t port;          /* 0: any free port (dj_server_port tells which) */
    const char *api_key;    /* NULL: no authentication */
    const char *alias;      /* the model id /v1/models reports; NULL: the file name */
    size_t n_predict;       /* tokens generated when a request sets no limit; 0: up to the context */
    size_t body_max;        /* request body limit in bytes; 0: 8 MiB */
    unsigned timeout_s;     /* keep-alive idle and stalled-write timeout; 0: 600 */
    unsigned header_timeout_s; /* a request's head must arrive within this of its first byte; 0: 10 */
    unsigned body_timeout_s;   /* and its body within this of the head's end; 0: 60 */
    size_t conn_max;        /* open connections in all; 0: 1024 (http.h: waiting ones make room) */
    size_t conn_per_ip;     /* open connections from one address; 0: no cap */
    const char *chat_template; /* template source (--chat-template-file); NULL: the model's
                                  tokenizer.chat_template, or the built-in ChatML when it has none */
    size_t queue_max;       /* with engine.n_running_max: completions beyond running + queue_max
                               get 503 + Retry-After; 0: no cap (they wait in order) */
    size_t responses_max;   /* /v1/responses with store: responses kept for previous_response_id and
                               GET, oldest evicted first (256); 0: none are kept */
    size_t responses_max_bytes; /* and the bytes they may hold (64 MiB) */
    struct dj_engine_params engine;
};

struct dj_server_params server_default_params(void);

struct dj_server;

/* Starts the HTTP daemon without a model: GET /health answers 503 {"status": "loading model"}
 * and every other endpoint 503 + Retry-After until server_attach (load balancers and
 * agents' launchers poll /health while a large model loads). */
enum dj_status server_listen(const char *model_path, const struct dj_server_params *p, struct dj_server **out);
/* Gives the listening server its model: compiles the chat template, starts the engine
 * thread; from then on it serves.  m must outlive the server.  On failure the server
 * keeps answering 503 (stop it with server_stop). */
enum dj_status server_attach(struct dj_server *s, const struct dj_model *m);
uint16_t server_port(const struct dj_server *s);
/* Stops accepting, cancels what is in flight (waiting at most deadline_ms for
 * streams to end), stops the engine thread, frees everything.  Accepts NULL. */
void server_stop(struct dj_server *s, int deadline_ms);

#endif
