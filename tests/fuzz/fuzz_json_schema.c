/*
 * fuzz_json_schema.c — libFuzzer target for the JSON Schema converter
 * (src/sample/json_schema.c) and the tool-call grammars (toolcall.c): the
 * first byte picks the options (whitespace mode, strict, format policy), the
 * rest is a schema (and, when it is an array, a tools list).  Whatever the
 * input: no crash, no leak (ASan/UBSan); a failure comes with a message; a
 * success is a grammar that grammar_parse accepts (abort otherwise).  The
 * string automata (schema_dfa.c) are reached through patterns with lengths,
 * allOf patterns and formats; their size limits keep every input fast.
 * Seeds: hand-written schemas covering every keyword and those shapes
 * (tests/fuzz/seed.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_parse(const char *gbnf, const char *what) {
    struct dj_grammar *g = NULL;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, NULL, &g) != DJ_OK) {
        fprintf(stderr, "%s: the grammar does not parse: %s\n%s\n", what, dj_last_error(), gbnf);
        abort();
    }
    grammar_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    struct dj_json_schema_opts o = json_schema_default_opts();
    o.whitespace = (enum dj_json_ws)(flags % 3);
    o.strict = (flags >> 2) & 1;
    o.ignore_unknown_formats = (flags >> 3) & 1;
    char *gbnf = NULL;
    dj_clear_error();
    if (json_schema_to_gbnf(src, n, &o, &gbnf) == DJ_OK) {
        must_parse(gbnf, "json_schema_to_gbnf");
        free(gbnf);
    } else if (!dj_last_error()[0]) {
        abort(); /* a failure without a message */
    }
    if (n && src[0] == '[') {
        struct dj_toolcall_opts to = toolcall_default_opts();
        to.schema = o;
        to.format = (enum dj_tool_format)((flags >> 4) & 1);
        to.choice = (enum dj_tool_choice)((flags >> 5) & 3);
        to.parallel = (flags >> 7) & 1;
        to.name = "f";
        struct dj_toolcall_grammar g = {0};
        dj_clear_error();
        if (toolcall_grammar_build(src, n, &to, &g) == DJ_OK) {
            if (g.gbnf) must_parse(g.gbnf, "toolcall gbnf");
            if (g.lazy_gbnf) must_parse(g.lazy_gbnf, "toolcall lazy_gbnf");
            toolcall_grammar_free(&g);
        } else if (!dj_last_error()[0]) {
            abort();
        }
    }
    return 0;
}
