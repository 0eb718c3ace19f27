/*
 * http.h — deja's HTTP/1.1 server: sockets, a connection budget, deadlines,
 * and a thread per request being answered.  Framing is http_parse.h's.
 *
 *   accept ──▶ I/O thread (epoll; every connection that is not being answered)
 *                │  head: must arrive within head_timeout of its first byte (or of the
 *                │        accept); body: within body_timeout of the head's end.  Neither
 *                │        deadline moves when a byte arrives, so a byte a second cannot
 *                │        hold a connection (slowloris).
 *                │  on_head (auth, route, Content-Type) runs before a byte of the body
 *                │        is kept: a refused request costs its head, never its body.
 *                ▼  a complete request
 *              worker thread: on_request answers (http_respond / http_respond_stream),
 *                then the connection goes back to the I/O thread (keep-alive) or closes
 *
 * The budget: at most conn_max open connections, conn_per_ip from one IPv4
 * address (0: no per-address cap).  When a new connection would pass either,
 * the one that has waited longest without a request being answered (idle
 * keep-alive since its last answer, or still sending its head or body) is
 * closed to make room; when every connection is busy answering, the new one
 * gets 503 and is closed.  So connections that send nothing useful never lock
 * out a client that sends a request at once (/health included), and a flood
 * of them evicts its own oldest members first.
 *
 * Errors the layer answers itself (framing 400, 405, 408 on a deadline, 413,
 * 417, 431, 503 over the budget, 505) carry a JSON body from error_body, then
 * the connection is closed after a short lingering drain (so the client reads
 * the answer instead of a reset).
 */
#ifndef DJ_SERVER_HTTP_H
#define DJ_SERVER_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http_parse.h"

struct http_server;
struct http_req; /* one request being answered (worker thread) */

/* What the layer counts (read by /metrics; any thread). */
struct http_stats {
    atomic_size_t open;           /* connections open now */
    atomic_ullong accepted;
    atomic_ullong evicted;        /* closed to make room for a new connection */
    atomic_ullong refused;        /* 503: over the budget with every connection busy */
    atomic_ullong head_timeouts;  /* 408: the head did not arrive in time */
    atomic_ullong body_timeouts;  /* 408: the body did not arrive in time */
    atomic_ullong idle_closed;    /* keep-alive connections closed after idle_timeout */
    atomic_ullong bad_requests;   /* framing errors and other refusals before a handler */
    atomic_ullong write_timeouts; /* a client that stopped reading its response */
    atomic_ullong aborted;        /* requests answered with nothing (the client went away) */
};

struct http_params {
    const char *host;           /* IPv4 address to bind */
    uint16_t port;              /* 0: any free port (http_port tells which) */
    size_t conn_max;            /* open connections in all (1024) */
    size_t conn_per_ip;         /* from one client address (0: no cap) */
    unsigned head_timeout_ms;   /* request line + headers, from the first byte (10 s) */
    unsigned body_timeout_ms;   /* the body, from the end of the head (60 s) */
    unsigned idle_timeout_ms;   /* a keep-alive connection between requests (600 s) */
    unsigned write_timeout_ms;  /* a response write that makes no progress (600 s) */
    size_t head_max;            /* bytes of request line + headers (32 KiB; 431 beyond) */
    size_t body_max;            /* bytes of body (8 MiB; 413 beyond) */
    http_head_fn on_head;       /* I/O thread, before the body: 0 or a refusal status */
    void (*on_request)(void *user, struct http_req *q); /* worker thread: answers q */
    /* The JSON body (malloc'd) of an error answered by the layer; path NULL when the
     * request line was not parsed.  Also told of every such status (for metrics). */
    char *(*error_body)(void *user, const char *path, unsigned status, const char *msg);
    void *user;
};

struct http_params http_default_params(void);

/* Binds and starts the I/O thread.  On failure a status with a message. */
int http_start(const struct http_params *p, struct http_server **out, char *err, size_t cap);
uint16_t http_port(const struct http_server *h);
struct http_stats *http_get_stats(struct http_server *h);
/* Stops accepting (the listening socket closes; new clients are refused by the kernel). */
void http_quiesce(struct http_server *h);
/* Closes every connection, waits for the workers (cutting off, after grace_ms, those
 * still writing to a client), frees everything.  Accepts NULL. */
void http_stop(struct http_server *h, int grace_ms);

/* ---- inside on_request ---------------------------------------------------------------- */
const struct http_msg *http_req_msg(const struct http_req *q);
int http_req_fd(const struct http_req *q); /* for poll (POLLRDHUP: the client went away) */
/* Answers with a complete body.  headers: name, value pairs, NULL-terminated (or NULL).
 * HEAD requests get the head only.  False when the client could not be written to. */
bool http_respond(struct http_req *q, unsigned status, const char *ctype, const char *body, size_t n,
                  const char *const *headers);
/* A stream (SSE): read(cls, buf, cap) returns bytes (> 0), 0 at the end, or -1 to cut
 * the response short (the client sees an unfinished chunked body).  Sent as chunked
 * transfer coding (HTTP/1.0: until the connection closes). */
bool http_respond_stream(struct http_req *q, unsigned status, const char *ctype, const char *const *headers,
                         long (*read)(void *cls, char *buf, size_t cap), void *cls);
/* Closes the connection without an answer (the client went away, or the answer
 * would be a lie: a request the client cancelled is not reported as finished). */
void http_abort(struct http_req *q);

#endif
