/*
 * fuzz_jinja.c — libFuzzer target for the chat-template interpreter
 * (src/chat/jinja*.c).  Input: byte 0 picks the context (low 2 bits: none,
 * a plain chat, a tool loop with tools and reasoning, odd values — 64-bit
 * edges, unicode, nesting, NUL) and add_generation_prompt (bit 2); the rest
 * is the template source.  It is compiled, asked jinja_reads_var, and
 * rendered with small limits (jinja_render_ex: 200,000 steps, 1 MiB of
 * output) so that one input takes milliseconds, not the seconds the default
 * 5e7 steps allow.  A render must end with DJ_OK and a NUL-terminated text of
 * at most the output limit, or with an error message that is not empty and,
 * unless it is raise_exception's own, starts with "template: "; a failed
 * compile likewise.  Anything else aborts so that libFuzzer keeps the input.
 * Seeds: the 50 golden chat templates (tests/fuzz/seed.sh).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "core/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STEPS 200000
#define MAX_OUTPUT ((size_t)1 << 20)

/* The contexts, as JSON. */
static const char *const CONTEXTS[4] = {
    "{}",
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"Bye\"}],"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": null, \"documents\": null}",
    "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather in Paris?\"}]},"
    " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"I should call it\", \"tool_calls\":"
    " [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\":"
    " {\"city\": \"Paris\", \"days\": 3, \"units\": [\"C\"]}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\","
    " \"content\": \"18C\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\":"
    " \"string\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": [\"city\"]}}}],"
    " \"enable_thinking\": true, \"bos_token\": \"<|bos|>\", \"eos_token\": \"<|eos|>\", \"documents\": null}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9llo \\u65e5\\u672c \\ud83d\\ude00 \\u0000 <&>\\\"'\"}],"
    " \"big\": 9223372036854775807, \"small\": -9223372036854775808, \"f\": 1e308, \"tiny\": 5e-324,"
    " \"neg0\": -0.0, \"deep\": [[[[[[[[[[{\"a\": [1]}]]]]]]]]]], \"empty\": {}, \"list\": [], \"t\": true,"
    " \"s\": \"\", \"dup\": {\"k\": 1, \"K\": 2}}",
};

static json_t *ctx[4][2];

static void init(void) {
    for (int i = 0; i < 4; i++) {
        json_error_t e;
        json_t *j = json_loads(CONTEXTS[i], JSON_ALLOW_NUL, &e);
        if (!j) abort();
        ctx[i][0] = j;
        ctx[i][1] = json_deep_copy(j);
        json_object_set_new(ctx[i][0], "add_generation_prompt", json_false());
        json_object_set_new(ctx[i][1], "add_generation_prompt", json_true());
    }
}

static void check_error(bool raised) {
    const char *e = dj_last_error();
    if (!e) abort();
    if (!raised && strncmp(e, "template", 8) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!ctx[0][0]) init();
    const json_t *c = ctx[data[0] & 3][(data[0] >> 2) & 1];
    /* a heap copy of exactly the source, so ASan sees any read past its end */
    size_t n = size - 1;
    char *src = malloc(n ? n : 1);
    if (!src) return 0;
    if (n) memcpy(src, data + 1, n);

    struct dj_jinja *t = NULL;
    if (jinja_compile(src, n, &t) != DJ_OK) {
        if (t) abort(); /* out-params are set only on success */
        check_error(false);
        free(src);
        return 0;
    }
    (void)jinja_reads_var(t, "messages");
    (void)jinja_reads_var(t, "enable_thinking");
    struct dj_jinja_params p = jinja_default_params();
    p.now = 1768471200; /* 2026-01-15T10:00:00 */
    p.max_steps = MAX_STEPS;
    p.max_output = MAX_OUTPUT;
    struct dj_jinja_out out;
    if (jinja_render_ex(t, c, &p, &out) == DJ_OK) {
        if (!out.text || out.n > MAX_OUTPUT || out.text[out.n] != '\0') abort();
    } else {
        if (out.text || out.n || out.from_input) abort(); /* left zeroed on failure */
        check_error(jinja_last_error_raised());
    }
    jinja_out_free(&out);
    jinja_free(t);
    free(src);
    return 0;
}
