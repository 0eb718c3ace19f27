/*
 * fuzz_request.c — the server's request parser (src/server/request.c) on
 * arbitrary bodies: it returns a request or an error with an HTTP status and
 * a message, never crashes; a parsed request has a non-empty prompt of valid
 * ids, 1..16 completions and at most 16 stop strings.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dj_vocab *vocab;
static bool loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        loaded = true;
        const char *dir = getenv("DJ_SHARED_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-deepseek-coder.gguf", dir && *dir ? dir : "../shared");
        if (dj_vocab_load_file(path, &vocab) != DJ_OK) vocab = NULL;
    }
    if (!vocab) return 0;
    struct dj_completion_req r = {0};
    int status = 0;
    const char *param = NULL;
    if (server_parse_completion(vocab, "m", (const char *)data, size, &r, &status, &param) == DJ_OK) {
        if (r.n_prompt == 0 || r.n < 1 || r.n > DJ_SERVER_N_MAX || r.n_stop > DJ_SERVER_STOP_MAX) abort();
        for (size_t i = 0; i < r.n_prompt; i++)
            if (r.prompt[i] < 0 || (size_t)r.prompt[i] >= vocab_n_tokens(vocab)) abort();
        server_completion_req_free(&r);
    } else if (status != 400 && status != 404 && status != 500) {
        abort();
    }
    return 0;
}
