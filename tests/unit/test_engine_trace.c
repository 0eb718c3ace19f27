/*
 * test_engine_trace.c — the trace reader (src/engine/trace.c):
 *  - a line with every escape, surrogate pairs and a lone surrogate decodes
 *    as Python's json module would; unknown keys and nested values are skipped;
 *  - malformed lines fail with "FILE:LINE: ..." and never read past the line:
 *    every prefix and 2,000 byte flips of a real line (run under ASan);
 *  - every file in ../shared/traces rebuilds its prompts (keep in code points)
 *    and matches n_chars on every line.
 */
#include <dirent.h>

#include "core/status.h"
#include "engine/trace.h"
#include "test.h"

static bool parses(const char *s) {
    struct trace_turn t;
    enum dj_status st = trace_parse_line(s, strlen(s), "x.jsonl", 7, &t);
    if (st == DJ_OK) trace_turn_free(&t);
    return st == DJ_OK;
}

static void test_line(void) {
    const char *line = "{\"session\": \"s\", \"turn\": 1, \"keep\": 3, \"extra\": {\"a\": [1, 2.5e3, true, null, \"}\"]},"
                       " \"text\": \"a\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\\udc00x\", \"response\": null,"
                       " \"n_chars\": 9}";
    struct trace_turn t;
    CHECKF(trace_parse_line(line, strlen(line), "x.jsonl", 1, &t) == DJ_OK, "%s", dj_last_error());
    CHECK(t.keep == 3 && t.n_chars == 9 && t.turn == 1 && t.session && !strcmp(t.session, "s"));
    const char want[] = "a\xc3\xa9\xf0\x9f\x98\x80\"\\/\b\f\n\r\t\xef\xbf\xbdx";
    CHECK(t.text_len == sizeof want - 1 && memcmp(t.text, want, sizeof want - 1) == 0);
    CHECK(trace_count_cp(t.text, t.text_len) == 13);
    CHECK(trace_cp_offset(t.text, t.text_len, 3) == 7); /* past a, é (2 bytes), 😀 (4 bytes) */
    CHECK(trace_cp_offset(t.text, t.text_len, 13) == t.text_len && trace_cp_offset(t.text, t.text_len, 99) == t.text_len);
    trace_turn_free(&t);

    CHECK(!parses("{\"keep\": 1, \"text\": \"unterminated}"));
    CHECKF(strstr(dj_last_error(), "x.jsonl:7: column"), "%s", dj_last_error());
    CHECK(!parses("{\"text\": \"a\"}") && strstr(dj_last_error(), "missing \"keep\""));
    CHECK(!parses("{\"keep\": 0}") && strstr(dj_last_error(), "missing \"text\""));
    CHECK(!parses("{\"keep\": -1, \"text\": \"\"}"));
    CHECK(!parses("{\"keep\": 1.5, \"text\": \"\"}"));
    CHECK(!parses("{\"keep\": 0, \"text\": 5}"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\\x\"}"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\\u12\"}"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"a\nb\"}"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\"} x"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\", }"));
    CHECK(!parses("{\"keep\": 0 \"text\": \"\"}"));
    CHECK(!parses("[1]"));
    CHECK(!parses(""));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\", \"text\": \"b\"}"));
    CHECK(!parses("{\"keep\": 99999999999999999999, \"text\": \"\"}"));
    char deep[400] = "{\"keep\": 0, \"text\": \"\", \"d\": ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    CHECK(!parses(deep) && strstr(dj_last_error(), "deep"));
    CHECK(parses("  {\"keep\": 0, \"text\": \"\"}  \r"));
    /* the recorded response (replay --teacher-force): a string, or null / absent = unknown */
    const char *rl = "{\"keep\": 0, \"text\": \"a\", \"response\": \"x\\ny\"}";
    CHECK(trace_parse_line(rl, strlen(rl), "x.jsonl", 1, &t) == DJ_OK && t.response && t.response_len == 3 &&
          !memcmp(t.response, "x\ny", 3));
    trace_turn_free(&t);
    CHECK(trace_parse_line(line, strlen(line), "x.jsonl", 1, &t) == DJ_OK && t.response == NULL);
    trace_turn_free(&t);
    CHECK(!parses("{\"keep\": 0, \"text\": \"\", \"response\": 5}") && strstr(dj_last_error(), "response"));
    CHECK(!parses("{\"keep\": 0, \"text\": \"\", \"response\": \"a\", \"response\": null}"));
}

/* Every prefix and many byte flips of a real line: no crash, no read past it. */
static void test_mutations(const char *shared) {
    char *data = test_read_file(test_shared_path(shared, "traces/openhands_mock__DelegatorAgent_test_edits.jsonl"), NULL);
    CHECK(data != NULL);
    if (!data) return;
    char *nl = strchr(data, '\n');
    size_t n = nl ? (size_t)(nl - data) : strlen(data);
    size_t ok = 0;
    for (size_t k = 0; k <= n; k++) {
        char *cut = malloc(k ? k : 1); /* exactly k bytes: ASan sees any overread */
        memcpy(cut, data, k);
        struct trace_turn t;
        if (trace_parse_line(cut, k, "m", 1, &t) == DJ_OK) {
            ok++;
            trace_turn_free(&t);
        }
        free(cut);
    }
    CHECK(ok == 1); /* only the whole line */
    uint64_t rng = 88172645463325252ull;
    char *buf = malloc(n);
    for (int i = 0; i < 2000; i++) {
        memcpy(buf, data, n);
        for (int f = 0; f < 3; f++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            buf[rng % n] = (char)(rng >> 32);
        }
        struct trace_turn t;
        if (trace_parse_line(buf, n, "m", 1, &t) == DJ_OK) trace_turn_free(&t);
    }
    free(buf);
    free(data);
}

static void test_all_traces(const char *shared) {
    const char *dir = test_shared_path(shared, "traces");
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int n_files = 0;
    size_t n_turns = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".jsonl")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct trace *t = NULL;
        CHECK(trace_open(path, &t) == DJ_OK);
        size_t no_n_chars = 0;
        for (bool done = false; t && !done;) {
            enum dj_status st = trace_next(t, &done);
            CHECKF(st == DJ_OK, "%s", dj_last_error());
            if (st) break;
            no_n_chars += !done && t->n_chars < 0;
        }
        CHECKF(no_n_chars == 0, "%s: %zu lines without n_chars", de->d_name, no_n_chars);
        CHECK(t && t->n_turns > 0 && t->session);
        n_turns += t ? t->n_turns : 0;
        trace_close(t);
        n_files++;
    }
    closedir(d);
    printf("  %d trace files, %zu turns rebuilt, n_chars checked on each\n", n_files, n_turns);
    CHECK(n_files >= 30);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    test_line();
    test_mutations(shared);
    test_all_traces(shared);
    TEST_END();
}
