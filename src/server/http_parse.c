/*
 * http_parse.c — request framing over llhttp (http_parse.h).  llhttp runs
 * strict (no lenient flag is ever set); its callbacks copy the request line
 * and headers into one growing buffer of NUL-terminated strings (kept as
 * offsets while it can move, turned into pointers once the head is complete),
 * and the body into another.  on_message_complete pauses the parser, so one
 * feed never runs past the end of a request: pipelined bytes wait for the
 * previous response.
 */
#include "server/http_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct http_parser *of(llhttp_t *ll) { return ll->data; }

/* Refuses the request: llhttp stops with HPE_USER and feed reports status. */
static int refuse(struct http_parser *hp, unsigned status, const char *fmt, const char *arg) {
    if (!hp->err_status) {
        hp->err_status = status;
        snprintf(hp->err_msg, sizeof hp->err_msg, fmt, arg ? arg : "");
    }
    return HPE_USER;
}

static bool hb_grow(struct http_parser *hp, size_t more) {
    if (hp->n_hb + more + 1 <= hp->cap_hb) return true;
    size_t cap = hp->cap_hb ? hp->cap_hb : 1024;
    while (cap < hp->n_hb + more + 1) cap *= 2;
    char *nb = realloc(hp->hb, cap);
    if (!nb) return false;
    hp->hb = nb;
    hp->cap_hb = cap;
    return true;
}

/* Appends to the head buffer (always NUL-terminated after n_hb). */
static int hb_add(struct http_parser *hp, const char *at, size_t n) {
    if (hp->n_hb + n > hp->head_max) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", hp->head_max);
        return refuse(hp, 431, "the request head is over the limit of %s bytes", lim);
    }
    if (!hb_grow(hp, n)) return refuse(hp, 503, "out of memory reading the request head%s", NULL);
    memcpy(hp->hb + hp->n_hb, at, n);
    hp->n_hb += n;
    hp->hb[hp->n_hb] = 0;
    return 0;
}

/* Ends the current string (its NUL is part of the buffer). */
static int hb_end(struct http_parser *hp) {
    if (!hb_grow(hp, 1)) return refuse(hp, 503, "out of memory reading the request head%s", NULL);
    hp->hb[hp->n_hb++] = 0;
    hp->hb[hp->n_hb] = 0;
    return 0;
}

static int on_message_begin(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    hp->method_off = hp->n_hb;
    return 0;
}

static int on_method(llhttp_t *ll, const char *at, size_t n) { return hb_add(of(ll), at, n); }
static int on_method_complete(llhttp_t *ll) { return hb_end(of(ll)); }

static int on_url(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *hp = of(ll);
    if (!hp->in_url) {
        hp->url_off = hp->n_hb;
        hp->in_url = true;
    }
    return hb_add(hp, at, n);
}

static int on_url_complete(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    if (!hp->in_url) hp->url_off = hp->n_hb;
    hp->in_url = false;
    return hb_end(hp);
}

static int on_header_field(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *hp = of(ll);
    if (hp->head_done) return 0; /* a trailer of a chunked body: ignored */
    if (!hp->in_name) {
        if (hp->n_hdr == HTTP_HDR_MAX) return refuse(hp, 431, "more than 100 header lines%s", NULL);
        hp->name_off[hp->n_hdr] = hp->n_hb;
        hp->in_name = true;
    }
    return hb_add(hp, at, n);
}

static int no_name(struct http_parser *hp) {
    return refuse(hp, 400, "a header line has no name (it starts with ':')%s", NULL);
}

static int on_header_field_complete(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    if (hp->head_done) return 0;
    if (!hp->in_name || hp->n_hb == hp->name_off[hp->n_hdr]) return no_name(hp); /* llhttp hands over 0 bytes */
    hp->in_name = false;
    hp->name_ok = true;
    return hb_end(hp);
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *hp = of(ll);
    if (hp->head_done) return 0;
    if (!hp->name_ok) return no_name(hp);
    if (!hp->in_value) {
        hp->value_off[hp->n_hdr] = hp->n_hb;
        hp->in_value = true;
    }
    return hb_add(hp, at, n);
}

static int on_header_value_complete(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    if (hp->head_done) return 0;
    if (!hp->name_ok) return no_name(hp);
    hp->name_ok = false;
    if (!hp->in_value) hp->value_off[hp->n_hdr] = hp->n_hb; /* an empty value */
    hp->in_value = false;
    hp->n_hdr++;
    return hb_end(hp);
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The target into path and query, in the head buffer: origin-form ("/a?b"), or
 * absolute-form ("http://host/a", RFC 9112 §3.2.2: servers accept it), or "*". */
static size_t path_start(const char *t) {
    size_t skip = !strncasecmp(t, "http://", 7) ? 7 : !strncasecmp(t, "https://", 8) ? 8 : 0;
    if (!skip) return 0;
    const char *slash = strchr(t + skip, '/');
    return slash ? (size_t)(slash - t) : strlen(t); /* "http://host": the path is empty, read as "/" */
}

static int split_target(struct http_parser *hp) {
    const size_t p_off = hp->url_off + path_start(hp->hb + hp->url_off);
    const char *p = hp->hb + p_off;
    if (*p && *p != '/' && strcmp(p, "*")) return refuse(hp, 400, "the request target '%s' is not a path", p);
    const char *q = strchr(p, '?');
    const size_t n_path = q ? (size_t)(q - p) : strlen(p);
    const size_t n_query = q ? strlen(q + 1) : 0;
    const size_t q_off = q ? (size_t)(q - hp->hb) + 1 : 0;
    /* both copies are at most as long as the target: room first (hb may move), then pointers */
    if (!hb_grow(hp, n_path + n_query + 3)) return refuse(hp, 503, "out of memory%s", NULL);
    p = hp->hb + p_off;
    const char *t = hp->hb + hp->url_off;
    hp->path_off = hp->n_hb;
    char *o = hp->hb + hp->n_hb;
    if (n_path == 0) *o++ = '/';
    for (size_t i = 0; i < n_path; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '%') {
            const int hi = i + 2 < n_path ? hexval(p[i + 1]) : -1;
            const int lo = hi >= 0 ? hexval(p[i + 2]) : -1;
            if (hi < 0 || lo < 0) return refuse(hp, 400, "the path '%s' has a '%%' not followed by two hex digits", t);
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
            if (c == 0) return refuse(hp, 400, "the path '%s' holds an encoded NUL (%%00)", t);
        }
        if (c < 0x20 || c == 0x7f) return refuse(hp, 400, "the path '%s' holds a control character", t);
        *o++ = (char)c;
    }
    *o++ = 0;
    hp->query_off = (size_t)(o - hp->hb);
    if (q) memcpy(o, hp->hb + q_off, n_query);
    o[n_query] = 0;
    hp->n_hb = hp->query_off + n_query + 1;
    return 0;
}

/* Headers that decide who is asking and what the body is: a second copy is ambiguous
 * (two proxies may each read a different one), so it is an error. */
static const char *const single_headers[] = {"Authorization", "x-api-key", "Content-Type", "Host", "Expect"};

static int on_headers_complete(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    hp->head_done = true;
    if (ll->http_major != 1)
        return refuse(hp, 505, "HTTP/%s is not supported: use HTTP/1.1", ll->http_major == 2 ? "2" : "0.9 or 3");
    if (ll->method == HTTP_CONNECT) return refuse(hp, 405, "CONNECT is not supported%s", NULL);
    int err = split_target(hp);
    if (err) return err;
    /* offsets become pointers: the head buffer no longer grows for this request */
    struct http_msg *m = &hp->msg;
    m->method = hp->hb + hp->method_off;
    m->path = hp->hb + hp->path_off;
    m->query = hp->hb + hp->query_off;
    m->n_hdr = hp->n_hdr;
    for (size_t i = 0; i < hp->n_hdr; i++) {
        m->hname[i] = hp->hb + hp->name_off[i];
        m->hvalue[i] = hp->hb + hp->value_off[i];
    }
    for (size_t k = 0; k < sizeof single_headers / sizeof single_headers[0]; k++) {
        int seen = 0;
        for (size_t i = 0; i < m->n_hdr; i++) seen += !strcasecmp(m->hname[i], single_headers[k]);
        if (seen > 1) return refuse(hp, 400, "the header %s is sent more than once", single_headers[k]);
    }
    m->http_minor = ll->http_minor;
    m->body = "";
    m->n_body = 0;
    const char *expect = http_msg_header(m, "Expect");
    if (expect && strcasecmp(expect, "100-continue"))
        return refuse(hp, 417, "Expect: %s is not supported (only 100-continue)", expect);
    m->expect_continue = expect && m->http_minor >= 1;
    /* a protocol upgrade (h2c, websocket) is declined by ignoring it (RFC 9110 §7.8) */
    ll->upgrade = 0;
    if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > hp->body_max) {
        char n[32];
        snprintf(n, sizeof n, "%zu", hp->body_max);
        return refuse(hp, 413, "the request body is over the limit of %s bytes", n);
    }
    if (hp->on_head) {
        char msg[sizeof hp->err_msg];
        msg[0] = 0;
        const unsigned st = hp->on_head(hp->user, m, msg, sizeof msg);
        if (st) return refuse(hp, st, "%s", msg[0] ? msg : "the request is refused");
    }
    return 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *hp = of(ll);
    if (hp->n_body + n > hp->body_max) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", hp->body_max);
        return refuse(hp, 413, "the request body is over the limit of %s bytes", lim);
    }
    if (hp->n_body + n + 1 > hp->cap_body) {
        size_t cap = hp->cap_body ? hp->cap_body : 4096;
        while (cap < hp->n_body + n + 1) cap *= 2;
        char *nb = realloc(hp->body, cap);
        if (!nb) return refuse(hp, 503, "out of memory reading the request body%s", NULL);
        hp->body = nb;
        hp->cap_body = cap;
    }
    memcpy(hp->body + hp->n_body, at, n);
    hp->n_body += n;
    hp->body[hp->n_body] = 0;
    return 0;
}

/* A chunk announces its size first: one that cannot fit is refused now, not after its
 * bytes (a size of 2^64-1 would otherwise keep the connection reading forever). */
static int on_chunk_header(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    if (ll->content_length > hp->body_max - hp->n_body) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", hp->body_max);
        return refuse(hp, 413, "the request body is over the limit of %s bytes", lim);
    }
    return 0;
}

static int on_message_complete(llhttp_t *ll) {
    struct http_parser *hp = of(ll);
    hp->msg_done = true;
    hp->msg.body = hp->body && hp->n_body ? hp->body : ""; /* the buffer may hold an earlier request's */
    hp->msg.n_body = hp->n_body;
    hp->msg.keep_alive = llhttp_should_keep_alive(ll);
    return HPE_PAUSED; /* one request per feed: what follows waits for this one's response */
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_method_complete = on_method_complete,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_message_complete = on_message_complete,
};

void http_parse_init(struct http_parser *hp, size_t head_max, size_t body_max, http_head_fn on_head, void *user) {
    memset(hp, 0, sizeof *hp);
    hp->head_max = head_max;
    hp->body_max = body_max;
    hp->on_head = on_head;
    hp->user = user;
    llhttp_init(&hp->ll, HTTP_REQUEST, &settings);
    hp->ll.data = hp;
}

void http_parse_free(struct http_parser *hp) {
    if (!hp) return;
    free(hp->hb);
    free(hp->body);
    hp->hb = hp->body = NULL;
}

void http_parse_next(struct http_parser *hp) {
    hp->n_hb = hp->n_hdr = hp->n_body = hp->n_raw = 0;
    hp->in_name = hp->name_ok = hp->in_value = hp->in_url = hp->head_done = hp->msg_done = false;
    hp->err_status = 0;
    hp->err_msg[0] = 0;
    memset(&hp->msg, 0, sizeof hp->msg);
    /* a big body's buffer is not kept for the next request */
    if (hp->cap_body > (size_t)1 << 20) {
        free(hp->body);
        hp->body = NULL;
        hp->cap_body = 0;
    }
    if (llhttp_get_errno(&hp->ll) == HPE_PAUSED) llhttp_resume(&hp->ll);
}

bool http_parse_started(const struct http_parser *hp) { return hp->n_raw > 0 && !hp->msg_done; }

enum http_event http_parse_feed(struct http_parser *hp, const char *data, size_t n, size_t *used) {
    *used = 0;
    if (hp->err_status) return HTTP_ERROR;
    if (hp->msg_done) return HTTP_DONE;
    if (n == 0) return HTTP_NEED_MORE;
    /* the head's raw bytes are bounded too: llhttp skips some (blank lines before a request,
     * the CRLFs) without a callback */
    const size_t raw_max = hp->head_max + 2 * HTTP_HDR_MAX + 64;
    bool clamped = false;
    if (!hp->head_done && hp->n_raw + n > raw_max) {
        n = raw_max - hp->n_raw;
        clamped = true;
    }
    const llhttp_errno_t e = n ? llhttp_execute(&hp->ll, data, n) : HPE_OK;
    size_t k = n;
    if (e != HPE_OK) {
        const char *pos = llhttp_get_error_pos(&hp->ll);
        k = pos && pos >= data && pos <= data + n ? (size_t)(pos - data) : n;
    }
    hp->n_raw += k;
    *used = k;
    if (e == HPE_PAUSED && hp->msg_done) return HTTP_DONE;
    if (e == HPE_OK && clamped && !hp->head_done) { /* the raw bytes of the head ran out of room */
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", hp->head_max);
        refuse(hp, 431, "the request head is over the limit of %s bytes", lim);
        return HTTP_ERROR;
    }
    if (e == HPE_OK) return HTTP_NEED_MORE;
    if (!hp->err_status) {
        if (e == HPE_PAUSED_H2_UPGRADE) {
            hp->err_status = 505;
            snprintf(hp->err_msg, sizeof hp->err_msg, "HTTP/2 with prior knowledge is not supported: use HTTP/1.1");
        } else {
            hp->err_status = 400;
            const char *why = llhttp_get_error_reason(&hp->ll);
            snprintf(hp->err_msg, sizeof hp->err_msg, "malformed HTTP request at byte %zu: %s (%s)", hp->n_raw,
                     why && *why ? why : "unexpected bytes", llhttp_errno_name(e));
        }
    }
    return HTTP_ERROR;
}

const char *http_msg_header(const struct http_msg *m, const char *name) {
    for (size_t i = 0; i < m->n_hdr; i++)
        if (!strcasecmp(m->hname[i], name)) return m->hvalue[i];
    return NULL;
}

const char *http_status_text(unsigned status) {
    static const struct {
        unsigned status;
        const char *text;
    } t[] = {{100, "Continue"}, {200, "OK"}, {400, "Bad Request"}, {401, "Unauthorized"}, {403, "Forbidden"},
             {404, "Not Found"}, {405, "Method Not Allowed"}, {408, "Request Timeout"}, {413, "Content Too Large"},
             {415, "Unsupported Media Type"}, {417, "Expectation Failed"}, {429, "Too Many Requests"},
             {431, "Request Header Fields Too Large"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
             {503, "Service Unavailable"}, {505, "HTTP Version Not Supported"}, {507, "Insufficient Storage"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].status == status) return t[i].text;
    return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
}
