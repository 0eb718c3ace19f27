/*
 * fuzz_trace.c — libFuzzer target for the agent-trace reader
 * (src/engine/trace.c): each input is parsed as one JSON line, and then as
 * a whole trace file (split at newlines, prompts rebuilt turn by turn with
 * keep/text) so that the keep arithmetic and prompt growth are exercised
 * too.  Everything is checked by ASan/UBSan; a parse failure must come with
 * a message.  Seeds: the first lines of ../shared/traces (tests/fuzz/seed.sh).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "engine/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct trace_turn t;
    memset(&t, 0, sizeof t);
    dj_clear_error();
    if (trace_parse_line((const char *)data, size, "fuzz", 1, &t) == DJ_OK) {
        sink += t.text_len + (t.session ? strlen(t.session) : 0) + trace_count_cp(t.text, t.text_len);
        trace_turn_free(&t);
    } else if (dj_last_error()[0] == '\0') {
        abort(); /* a failure without a message */
    }
    /* the same bytes as a trace file */
    char path[] = "/tmp/deja_fuzz_trace_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    struct trace *tr = NULL;
    if (trace_open(path, &tr) == DJ_OK) {
        bool done = false;
        for (int turns = 0; turns < 1000 && !done; turns++) {
            if (trace_next(tr, &done) != DJ_OK) break;
            if (!done) sink += tr->prompt_len;
        }
        trace_close(tr);
    }
    unlink(path);
    return 0;
}
