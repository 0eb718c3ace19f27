/*
 * fuzz_toolcall.c — libFuzzer target for the tool-call grammars of every
 * family (src/sample/toolcall.c, toolcall_xml.c).  The first byte picks the
 * family (its value mod DJ_TOOL_FORMAT_N), the second the options (bits 0-1
 * tool_choice, 2 parallel, 3-4 whitespace mode, 5 strict, 6 think markers
 * (gpt-oss: its analysis message's), 7 think forced open), the rest is a
 * tools array (JSON).  Whatever the
 * input: no crash, no leak (ASan/UBSan); a failure comes with a message; a
 * success is a pair of grammars that grammar_parse accepts (abort otherwise).
 * Seeds: tools arrays with every parameter shape toolcall_xml.c classifies
 * (tests/fuzz/seed.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar.h"
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
    if (size < 2) return 0;
    struct dj_toolcall_opts o = toolcall_default_opts();
    o.format = (enum dj_tool_format)(data[0] % DJ_TOOL_FORMAT_N);
    uint8_t f = data[1];
    o.choice = (enum dj_tool_choice)(f & 3);
    o.parallel = (f >> 2) & 1;
    o.schema.whitespace = (enum dj_json_ws)(((f >> 3) & 3) % 3);
    o.schema.strict = (f >> 5) & 1;
    if ((f >> 6) & 1) o.think_open = "<think>", o.think_close = "</think>";
    if (((f >> 6) & 1) && o.format == DJ_TOOL_FORMAT_GPT_OSS) /* harmony's analysis message */
        o.think_open = "<|channel|>analysis<|message|>", o.think_close = "<|end|>";
    o.think_forced_open = (f >> 7) & 1;
    o.name = "f";
    struct dj_toolcall_grammar g = {0};
    dj_clear_error();
    if (toolcall_grammar_build((const char *)data + 2, size - 2, &o, &g) == DJ_OK) {
        if (o.choice == DJ_TOOL_NONE) {
            if (g.gbnf || g.lazy_gbnf || g.trigger) abort();
        } else {
            if (!g.gbnf || !g.lazy_gbnf || !g.trigger) abort();
            must_parse(g.gbnf, "toolcall gbnf");
            must_parse(g.lazy_gbnf, "toolcall lazy_gbnf");
        }
        toolcall_grammar_free(&g);
    } else if (!dj_last_error()[0]) {
        abort(); /* a failure without a message */
    }
    return 0;
}
