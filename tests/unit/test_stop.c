/*
 * test_stop.c — stop strings over streamed text (src/engine/stop.h): every
 * split of a text into pieces gives the same emitted text and the same
 * match as the whole text at once; the stop string and what follows are
 * never emitted; held text comes back on flush.
 */
#include "engine/stop.h"
#include "test.h"

/* Feeds text in pieces cut at cuts[0..n_cuts) and collects the output. */
static bool feed_split(const char *const *stops, size_t n_stops, const char *text, const size_t *cuts, size_t n_cuts,
                       char *out, size_t *n_out, int *which) {
    struct dj_stop s;
    CHECK(stop_init(&s, stops, n_stops) == DJ_OK);
    *n_out = 0;
    *which = -1;
    size_t prev = 0, len = strlen(text);
    bool hit = false;
    for (size_t i = 0; i <= n_cuts && !hit; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        const char *o;
        size_t no;
        hit = stop_feed(&s, text + prev, end - prev, &o, &no);
        memcpy(out + *n_out, o, no);
        *n_out += no;
        prev = end;
    }
    if (hit) *which = (int)s.which;
    else {
        size_t no;
        const char *o = stop_flush(&s, &no);
        memcpy(out + *n_out, o, no);
        *n_out += no;
    }
    out[*n_out] = 0;
    stop_free(&s);
    return hit;
}

/* The expected result: text up to the earliest occurrence of any stop string. */
static size_t expect(const char *const *stops, size_t n_stops, const char *text, int *which) {
    size_t first = strlen(text);
    *which = -1;
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i][0]) continue;
        const char *p = strstr(text, stops[i]);
        if (p && (size_t)(p - text) < first) {
            first = (size_t)(p - text);
            *which = (int)i;
        } else if (p && (size_t)(p - text) == first && *which >= 0 && (int)i < *which) {
            *which = (int)i;
        }
    }
    return first;
}

int main(void) {
    const char *stops1[] = {"</tool_call>", "\n\n", "STOP"};
    const char *texts[] = {
        "hello world",
        "call <tool_call>{\"a\": 1}</tool_call> and more",
        "para one\n\npara two",
        "<</tool_cal</tool_call>",
        "ST STO STOP STOP",
        "\n \n\n",
        "no stop at the end </tool_ca",
        "héllo wörld → 𝄞 STOP after",
    };
    unsigned seed = 12345;
    size_t n_cases = 0;
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int wexp;
        const char *text = texts[t];
        const size_t len = strlen(text);
        const size_t n_exp = expect(stops1, 3, text, &wexp);
        /* every single cut position, plus random multi-cuts, plus byte by byte */
        for (int trial = 0; trial < 200; trial++) {
            size_t cuts[64], n_cuts = 0;
            if (trial == 0) {
                for (size_t i = 1; i < len && n_cuts < 64; i++) cuts[n_cuts++] = i;
            } else if (trial <= (int)len) {
                cuts[n_cuts++] = (size_t)trial;
            } else {
                size_t k = 0;
                while (n_cuts < 8) {
                    seed = seed * 1103515245u + 12345u;
                    k += 1 + (seed >> 16) % 5;
                    if (k >= len) break;
                    cuts[n_cuts++] = k;
                }
            }
            char out[256];
            size_t n_out;
            int which;
            const bool hit = feed_split(stops1, 3, text, cuts, n_cuts, out, &n_out, &which);
            CHECKF(hit == (wexp >= 0), "case %zu trial %d: hit %d", t, trial, hit);
            CHECKF(n_out == n_exp && memcmp(out, text, n_exp) == 0, "case %zu trial %d: got '%s'", t, trial, out);
            CHECKF(which == wexp, "case %zu trial %d: which %d expected %d", t, trial, which, wexp);
            n_cases++;
        }
    }
    /* held text is released as soon as it cannot start a stop string */
    {
        struct dj_stop s;
        const char *st[] = {"abc"};
        CHECK(stop_init(&s, st, 1) == DJ_OK);
        const char *o;
        size_t n;
        CHECK(!stop_feed(&s, "xxab", 4, &o, &n) && n == 2 && memcmp(o, "xx", 2) == 0);
        CHECK(!stop_feed(&s, "x", 1, &o, &n) && n == 3 && memcmp(o, "abx", 3) == 0);
        CHECK(!stop_feed(&s, "a", 1, &o, &n) && n == 0);
        CHECK(stop_feed(&s, "bcdef", 5, &o, &n) && n == 0 && s.which == 0);
        CHECK(stop_feed(&s, "more", 4, &o, &n) && n == 0); /* after a hit: nothing */
        stop_free(&s);
    }
    /* no stop strings: everything passes at once; empty strings are ignored */
    {
        struct dj_stop s;
        const char *st[] = {"", NULL};
        CHECK(stop_init(&s, st, 2) == DJ_OK && s.n_str == 0);
        const char *o;
        size_t n;
        CHECK(!stop_feed(&s, "abc", 3, &o, &n) && n == 3);
        stop_free(&s);
        stop_free(NULL);
    }
    printf("%zu split cases\n", n_cases);
    TEST_END();
}
