/*
 * fuzz_http.c — the server's HTTP framing (src/server/http_parse.h) on
 * arbitrary bytes, without a socket.  The first byte picks how the rest is
 * split into reads (1..255 bytes per feed; 0: all at once) and the limits;
 * the rest is what a client sent on one connection, fed as the server feeds
 * it: requests one after another (pipelining), each answered before the next.
 * Checked:
 *   - never a crash, a hang (every feed consumes bytes or ends in an event),
 *     or a read past the input (ASan);
 *   - a complete request has a method, a path that starts with '/' (or is
 *     "*") with no control byte or NUL before its end, a NUL-terminated body
 *     within the body limit, at most HTTP_HDR_MAX headers;
 *   - an error has a status in 400..505 and a non-empty message;
 *   - the same bytes fed at once give the same sequence of requests (method,
 *     path, body) and the same final verdict as the chosen split (the same
 *     error status too, unless a size limit is involved: see below): framing
 *     never depends on how TCP cut the stream.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_REQ = 16 };

struct trace {
    int n;
    unsigned long sig[MAX_REQ]; /* a hash of each request's method, path, body */
    int last;                   /* the final event */
    unsigned status;
};

static unsigned long mix(unsigned long h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ul;
    return h * 31 + n;
}

static void check_msg(const struct http_msg *m, size_t body_max) {
    if (!m->method || !m->method[0] || !m->path || !m->body || !m->query) abort();
    if (m->path[0] != '/' && strcmp(m->path, "*")) abort();
    for (const char *p = m->path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) abort();
    if (m->n_body > body_max || m->body[m->n_body] != 0 || m->n_hdr > HTTP_HDR_MAX) abort();
    for (size_t i = 0; i < m->n_hdr; i++)
        if (!m->hname[i] || !m->hvalue[i] || !m->hname[i][0]) abort();
}

static struct trace run(const uint8_t *d, size_t n, size_t step, size_t head_max, size_t body_max) {
    struct trace t = {0};
    struct http_parser hp;
    http_parse_init(&hp, head_max, body_max, NULL, NULL);
    size_t off = 0;
    t.last = HTTP_NEED_MORE;
    while (off < n && t.n < MAX_REQ) {
        const size_t k = step && n - off > step ? step : n - off;
        size_t used = 0;
        const enum http_event ev = http_parse_feed(&hp, (const char *)d + off, k, &used);
        if (used > k) abort();
        off += used;
        t.last = ev;
        if (ev == HTTP_ERROR) {
            if (hp.err_status < 400 || hp.err_status > 505 || !hp.err_msg[0]) abort();
            t.status = hp.err_status;
            break;
        }
        if (ev == HTTP_DONE) {
            check_msg(&hp.msg, body_max);
            unsigned long h = mix(1469598103934665603ul, hp.msg.method, strlen(hp.msg.method));
            h = mix(h, hp.msg.path, strlen(hp.msg.path));
            t.sig[t.n++] = mix(h, hp.msg.body, hp.msg.n_body);
            http_parse_next(&hp);
            continue;
        }
        /* NEED_MORE makes progress (all it was given, or up to the head's raw limit when the
         * head ended inside it: the rest is fed next) */
        if (used == 0 || (used != k && !hp.head_done)) abort();
    }
    http_parse_free(&hp);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t sel = data[0];
    const size_t step = sel & 0x7f ? (size_t)(sel & 0x7f) : 0;
    const size_t head_max = sel & 0x80 ? 256 : 8192, body_max = sel & 0x80 ? 64 : 65536;
    const struct trace a = run(data + 1, size - 1, step, head_max, body_max);
    const struct trace b = run(data + 1, size - 1, 0, head_max, body_max);
    /* the verdict may differ only where a split run stopped early for lack of bytes: the
     * requests both completed must agree, and an error must be the same error */
    const int n = a.n < b.n ? a.n : b.n;
    for (int i = 0; i < n; i++)
        if (a.sig[i] != b.sig[i]) abort();
    /* limits (413, 431) are checked as llhttp hands over spans, and it hands a span over when
     * the span ends or the read does: with a limit in play, a split read may meet the limit
     * before a framing error the whole read meets first (both refuse the request) */
    const bool limit = a.status == 413 || a.status == 431 || b.status == 413 || b.status == 431;
    if (a.n != b.n || a.last != b.last || (a.status != b.status && !limit)) abort();
    return 0;
}
