/*
 * http_parse.h — one connection's HTTP/1.x request framing, without a socket:
 * bytes in, requests out.  llhttp (the parser Node.js uses; Debian's
 * node-llhttp ships its C sources) does the grammar, strictly: a second
 * Content-Length, Content-Length with Transfer-Encoding, a transfer coding
 * other than chunked, a chunk size that overflows, whitespace before a
 * header's colon are errors, not guesses.  This module adds what llhttp
 * leaves to its user: limits on the head and the body, the request target
 * decoded into a path (a %00 or a control byte is an error), security-relevant
 * headers that may appear only once, and an `on_head` hook run once the head
 * is complete and before a byte of the body is kept (the server checks the
 * API key and the route there).
 *
 *   bytes ──▶ http_parse_feed ──▶ HTTP_NEED_MORE   (all consumed)
 *                             ├─▶ HTTP_DONE        (one request complete; the rest of
 *                             │                     the bytes belong to the next one)
 *                             └─▶ HTTP_ERROR       (status + message; close after answering)
 *
 * One request at a time: after HTTP_DONE the message (struct http_msg) stays
 * valid until http_parse_next.  Error statuses: 400 (framing), 405 (CONNECT),
 * 413 (body over the limit), 431 (head over the limit), 505 (not HTTP/1.x),
 * or whatever on_head returns.
 */
#ifndef DJ_SERVER_HTTP_PARSE_H
#define DJ_SERVER_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llhttp.h"

enum { HTTP_HDR_MAX = 100 }; /* header lines per request head; more: 431 */

struct http_msg {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* the target's path, percent-decoded, without the query */
    const char *query;  /* the raw query (after '?'), or "" */
    size_t n_hdr;
    const char *hname[HTTP_HDR_MAX], *hvalue[HTTP_HDR_MAX]; /* as sent (values trimmed by llhttp) */
    const char *body;   /* NUL-terminated; "" when there is none */
    size_t n_body;
    uint8_t http_minor; /* 1.0 or 1.1 */
    bool keep_alive;    /* the connection may carry another request after this one */
    bool expect_continue;
};

struct http_parser;
/* Called once the head is complete (m->body still empty): 0 to go on, or an HTTP status
 * to refuse the request with msg (cap bytes); the parser then reports HTTP_ERROR. */
typedef unsigned (*http_head_fn)(void *user, const struct http_msg *m, char *msg, size_t cap);

struct http_parser {
    llhttp_t ll;
    size_t head_max, body_max;
    http_head_fn on_head;
    void *user;
    /* the head: NUL-terminated strings at offsets in hb (hb moves as it grows) */
    char *hb;
    size_t n_hb, cap_hb;
    size_t url_off, method_off, path_off, query_off;
    size_t name_off[HTTP_HDR_MAX], value_off[HTTP_HDR_MAX];
    size_t n_hdr;
    bool in_name, in_value, in_url;
    bool name_ok;      /* the current header line's name is complete (a value may follow) */
    size_t n_raw;      /* bytes of this request fed so far (its head, then its body) */
    bool head_done;    /* on_headers_complete ran: header callbacks now are trailers */
    bool msg_done;
    char *body;
    size_t n_body, cap_body;
    unsigned err_status;
    char err_msg[200];
    struct http_msg msg;
};

enum http_event { HTTP_NEED_MORE, HTTP_DONE, HTTP_ERROR };

/* head_max: bytes of the request line and headers (431 beyond); body_max: of the body
 * (413 beyond).  on_head may be NULL. */
void http_parse_init(struct http_parser *hp, size_t head_max, size_t body_max, http_head_fn on_head, void *user);
void http_parse_free(struct http_parser *hp);
/* Feeds n bytes; stops at the first complete request or error.  *used: the bytes consumed
 * (on HTTP_DONE the rest are the next request's; feed them after http_parse_next). */
enum http_event http_parse_feed(struct http_parser *hp, const char *data, size_t n, size_t *used);
/* After HTTP_DONE: forget that request, ready for the next on the same connection. */
void http_parse_next(struct http_parser *hp);
/* Whether part of a request has been fed (a close now would cut it short). */
bool http_parse_started(const struct http_parser *hp);
/* The value of header name (case-insensitive), the first if repeated; NULL if absent. */
const char *http_msg_header(const struct http_msg *m, const char *name);
/* The reason phrase of a status ("Bad Request"). */
const char *http_status_text(unsigned status);

#endif
