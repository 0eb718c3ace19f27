/*
 * test_http_parse.c — request framing without a socket (src/server/http_parse.h):
 * what a strict server accepts and what it refuses, each request smuggling shape
 * of issue 28 included (two Content-Lengths, Content-Length with
 * Transfer-Encoding, whitespace before a colon, an unknown transfer coding, an
 * overflowing chunk size, an encoded NUL in the path), the head and body
 * limits, on_head refusing before a byte of the body is kept, pipelining, and
 * that the same bytes give the same requests however they are split.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_parse.h"
#include "test.h"

struct got {
    enum http_event ev;
    unsigned status;
    char msg[200];
    char method[16], path[256], query[64], body[512];
    size_t n_body, consumed, n_hdr;
    bool keep, cont;
};

/* Feeds s (n bytes) in pieces of `step` bytes (0: at once) until the first event other than
 * NEED_MORE; records it. */
static struct got run_split(const char *s, size_t n, size_t step, size_t body_max, http_head_fn on_head) {
    struct http_parser hp;
    http_parse_init(&hp, 1024, body_max, on_head, NULL);
    struct got g = {HTTP_NEED_MORE};
    size_t off = 0;
    while (off < n) {
        size_t k = step && n - off > step ? step : n - off, used = 0;
        g.ev = http_parse_feed(&hp, s + off, k, &used);
        off += used;
        if (g.ev != HTTP_NEED_MORE) break;
        if (used == 0) break;
    }
    g.consumed = off;
    if (g.ev == HTTP_ERROR) {
        g.status = hp.err_status;
        snprintf(g.msg, sizeof g.msg, "%s", hp.err_msg);
    }
    if (g.ev == HTTP_DONE) {
        snprintf(g.method, sizeof g.method, "%s", hp.msg.method);
        snprintf(g.path, sizeof g.path, "%s", hp.msg.path);
        snprintf(g.query, sizeof g.query, "%s", hp.msg.query);
        snprintf(g.body, sizeof g.body, "%s", hp.msg.body);
        g.n_body = hp.msg.n_body;
        g.n_hdr = hp.msg.n_hdr;
        g.keep = hp.msg.keep_alive;
        g.cont = hp.msg.expect_continue;
    }
    http_parse_free(&hp);
    return g;
}

static struct got run(const char *s) { return run_split(s, strlen(s), 0, 4096, NULL); }

static void expect_error(const char *what, const char *req, unsigned status) {
    struct got g = run(req);
    CHECKF(g.ev == HTTP_ERROR && g.status == status, "%s: event %d status %u (want error %u) %s", what, g.ev, g.status,
           status, g.msg);
    CHECKF(g.ev != HTTP_ERROR || g.msg[0], "%s: an error without a message", what);
    /* split byte by byte: the same verdict */
    struct got b = run_split(req, strlen(req), 1, 4096, NULL);
    CHECKF(b.ev == g.ev && b.status == g.status, "%s: byte by byte gives event %d status %u", what, b.ev, b.status);
}

static unsigned refuse_all(void *user, const struct http_msg *m, char *msg, size_t cap) {
    (void)user;
    snprintf(msg, cap, "no key for %s", m->path);
    return 401;
}

int main(void) {
    /* a plain request, its parts */
    struct got g = run("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
    CHECK(g.ev == HTTP_DONE && !strcmp(g.method, "POST") && !strcmp(g.path, "/v1/chat/completions"));
    CHECK(!strcmp(g.query, "x=1") && g.n_body == 5 && !strcmp(g.body, "hello") && g.keep && g.n_hdr == 2);
    /* chunked */
    g = run("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    CHECK(g.ev == HTTP_DONE && !strcmp(g.body, "abcde"));
    /* percent-decoding, absolute-form, HTTP/1.0 (no keep-alive), Expect: 100-continue */
    g = run("GET /v1/mod%65ls HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(g.ev == HTTP_DONE && !strcmp(g.path, "/v1/models"));
    g = run("GET http://example.com/health HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(g.ev == HTTP_DONE && !strcmp(g.path, "/health"));
    g = run("GET /health HTTP/1.0\r\n\r\n");
    CHECK(g.ev == HTTP_DONE && !g.keep);
    g = run("POST /a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok");
    CHECK(g.ev == HTTP_DONE && g.cont);
    /* an h2c upgrade offer is ignored: the request is answered over HTTP/1.1 */
    g = run("GET /health HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n");
    CHECK(g.ev == HTTP_DONE && !strcmp(g.path, "/health"));

    /* issue 28's framing findings: each is an error now, not a guess */
    expect_error("two Content-Lengths", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400);
    expect_error("Content-Length and Transfer-Encoding",
                 "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                 "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
                 400);
    expect_error("space before the colon", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400);
    expect_error("unknown transfer coding", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400);
    expect_error("chunk size past 64 bits", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nx", 400);
    /* 2^64-1 fits in 64 bits: it is refused as over the body limit, at once */
    expect_error("chunk of 2^64-1 bytes", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx", 413);
    expect_error("encoded NUL in the path", "POST /v1/chat/completions%00x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 400);
    expect_error("bad percent escape", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("encoded control byte", "GET /a%0d%0aX HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("two Authorization headers", "GET /a HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\nAuthorization: Bearer y\r\n\r\n", 400);
    expect_error("a header without a name", "GET /a HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400);
    expect_error("a header line starting with ':'", "POST /a HTTP/1.1\r\n:Htso x\r\nContent-Length: 0\r\n\r\n", 400);
    expect_error("a bare LF line ending", "GET /a HTTP/1.1\nHost: a\n\n", 400);
    expect_error("CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", 405);
    expect_error("HTTP/2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505);
    expect_error("Expect other than 100-continue", "POST /a HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n", 417);

    /* limits: a head over 1024 bytes is 431 (also when it is all one header, or many lines) */
    char big[4096];
    snprintf(big, sizeof big, "GET /a HTTP/1.1\r\nHost: a\r\nX-Big: %01500d\r\n\r\n", 0);
    expect_error("head over the limit", big, 431);
    size_t o = (size_t)snprintf(big, sizeof big, "GET /a HTTP/1.1\r\n");
    for (int i = 0; i < 120; i++) o += (size_t)snprintf(big + o, sizeof big - o, "A%d: b\r\n", i);
    snprintf(big + o, sizeof big - o, "\r\n");
    expect_error("too many header lines", big, 431);
    /* a body over the limit: refused on its Content-Length, before any of it arrives */
    g = run("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n");
    CHECK(g.ev == HTTP_ERROR && g.status == 413 && strstr(g.msg, "4096"));
    /* ... and a chunked one once it passes the limit */
    char chunked[8192];
    o = (size_t)snprintf(chunked, sizeof chunked, "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        o += (size_t)snprintf(chunked + o, sizeof chunked - o, "400\r\n");
        memset(chunked + o, 'x', 1024);
        o += 1024;
        o += (size_t)snprintf(chunked + o, sizeof chunked - o, "\r\n");
    }
    g = run_split(chunked, o, 0, 4096, NULL);
    CHECK(g.ev == HTTP_ERROR && g.status == 413);

    /* on_head refuses before the body: the parser stops at the end of the head */
    const char *req = "POST /v1/messages HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789";
    g = run_split(req, strlen(req), 0, 4096, refuse_all);
    CHECK(g.ev == HTTP_ERROR && g.status == 401 && !strcmp(g.msg, "no key for /v1/messages"));
    CHECKF(g.consumed <= strlen(req) - 10, "on_head refused after %zu bytes (the body starts at %zu)", g.consumed,
           strlen(req) - 10);

    /* pipelining: the first request ends where the second begins */
    {
        const char *two = "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n";
        struct http_parser hp;
        http_parse_init(&hp, 1024, 4096, NULL, NULL);
        size_t used = 0;
        CHECK(http_parse_feed(&hp, two, strlen(two), &used) == HTTP_DONE && !strcmp(hp.msg.path, "/one"));
        CHECK(used == strlen(two) / 2);
        http_parse_next(&hp);
        size_t used2 = 0;
        CHECK(http_parse_feed(&hp, two + used, strlen(two) - used, &used2) == HTTP_DONE && !strcmp(hp.msg.path, "/two"));
        CHECK(used + used2 == strlen(two));
        http_parse_free(&hp);
    }

    /* the same bytes, any split: the same request */
    const char *r = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
    struct got whole = run(r);
    CHECK(whole.ev == HTTP_DONE && !strcmp(whole.body, "{\"a\":1}"));
    for (size_t step = 1; step < 20; step++) {
        struct got part = run_split(r, strlen(r), step, 4096, NULL);
        CHECKF(part.ev == HTTP_DONE && !strcmp(part.body, whole.body) && !strcmp(part.path, whole.path) &&
                   part.n_hdr == whole.n_hdr,
               "split every %zu bytes: event %d body '%s'", step, part.ev, part.body);
    }
    CHECK(!strcmp(http_status_text(431), "Request Header Fields Too Large"));
    TEST_END();
}
