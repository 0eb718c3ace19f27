/*
 * fuzz_grammar.c — libFuzzer target for the GBNF parser
 * (src/sample/grammar_parse.c).  Each input is parsed as a grammar (not
 * NUL-terminated: the bytes exactly).  A failure must be DJ_ERR_FORMAT with
 * a "grammar: " message; a success must survive the round trip:
 * grammar_to_gbnf, parse again, the identical IR, and the same text when
 * printed again.  Anything else aborts so that libFuzzer keeps the input.
 * Seeds: the .gbnf files in ../shared/golden/grammars (tests/fuzz/seed.sh).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a heap copy of exactly size bytes, so ASan sees any read past the end */
    char *src = malloc(size ? size : 1);
    if (!src) return 0;
    if (size) memcpy(src, data, size);
    struct dj_grammar *g = NULL;
    dj_clear_error();
    enum dj_status st = grammar_parse(src, size, NULL, NULL, &g);
    free(src);
    if (st != DJ_OK) {
        if (st != DJ_ERR_FORMAT || strncmp(dj_last_error(), "grammar: ", 9) != 0) abort();
        return 0;
    }
    char *text = grammar_to_gbnf(g);
    if (!text) abort();
    struct dj_grammar *g2 = NULL;
    if (grammar_parse(text, strlen(text), NULL, NULL, &g2) != DJ_OK) abort();
    if (!grammar_equal(g, g2)) abort();
    char *text2 = grammar_to_gbnf(g2);
    if (!text2 || strcmp(text, text2) != 0) abort();
    free(text2);
    free(text);
    grammar_free(g2);
    grammar_free(g);
    return 0;
}
