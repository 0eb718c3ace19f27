/*
 * test_serve_tools.c — constrained tool calls through `deja serve` for the
 * families whose markers are not JSON: gpt-oss's harmony (the golden
 * template) and GLM's XML (a short GLM-4.5-style template written here, and
 * Laguna XS.2's, a real template in GLM's syntax with think markers).
 *
 * The model has random weights (test_synth.h), so nothing it writes is a
 * call unless the grammar makes it one: every request below must come back
 * as exactly one call of the asked-for tool with arguments valid under its
 * schema (enums and a bounded integer, so a call is a few dozen tokens and
 * always fits max_tokens), whatever the sampler draws, several seeds each.
 * Its vocabulary is codelm's with gpt-oss's harmony markers as gpt-oss's GGUF
 * types them (tests/test_harmony.h), so <|channel|> and friends are single
 * tokens and <|call|> ends generation, as with the real model.
 *
 * Reasoning: a random model that opens a think block (or harmony's analysis
 * message) never closes it, so the requests that allow one go through the
 * Anthropic Messages API with thinking.budget_tokens 0: the reasoning budget
 * forces the close marker at once and the grammar takes it from there.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_harmony.h"
#include "test_run.h"
#include "test_serve.h"
#include "test_synth.h"

static const char *TOOLS_OPENAI =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The forecast\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Oslo\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"wind\":{\"type\":\"boolean\"}},"
    "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"description\":\"Ping a host\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"host\":{\"type\":\"string\",\"enum\":[\"a.example\",\"b.example\"]}},"
    "\"required\":[\"host\"],\"additionalProperties\":false}}}]";

static const char *TOOLS_ANTHROPIC =
    "[{\"name\":\"get_weather\",\"description\":\"The forecast\",\"input_schema\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Oslo\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"wind\":{\"type\":\"boolean\"}},"
    "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}},"
    "{\"name\":\"ping\",\"description\":\"Ping a host\",\"input_schema\":"
    "{\"type\":\"object\",\"properties\":{\"host\":{\"type\":\"string\",\"enum\":[\"a.example\",\"b.example\"]}},"
    "\"required\":[\"host\"],\"additionalProperties\":false}}]";

/* A GLM-4.5-style template: its roles, its call syntax (newlines as GLM-4.5 writes them), no think markers. */
static const char *GLM_TEMPLATE =
    "[gMASK]<sop>{%- if tools -%}<|system|>\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n"
    "</tool_call>{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|user|>\n{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>\n{{ m.content }}"
    "{%- for tc in m.tool_calls or [] -%}\n<tool_call>{{ tc.function.name }}\n"
    "{%- for k, v in tc.function.arguments.items() -%}\n<arg_key>{{ k }}</arg_key>\n"
    "<arg_value>{{ v | tojson if v is not string else v }}</arg_value>{%- endfor -%}\n</tool_call>{%- endfor -%}"
    "{%- elif m.role == 'tool' -%}<|observation|>\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>\n{%- endif -%}";

/* Is args (JSON text or object) valid for the tool name?  The schemas above, by hand. */
static bool args_valid(const char *name, json_t *a) {
    if (!json_is_object(a)) return false;
    const char *k;
    json_t *v;
    if (!strcmp(name, "get_weather")) {
        json_t *city = json_object_get(a, "city"), *days = json_object_get(a, "days"), *wind = json_object_get(a, "wind");
        bool ok = json_is_string(city) && (!strcmp(json_string_value(city), "Paris") || !strcmp(json_string_value(city), "Oslo"));
        ok = ok && json_is_integer(days) && json_integer_value(days) >= 1 && json_integer_value(days) <= 7;
        ok = ok && (!wind || json_is_boolean(wind));
        json_object_foreach(a, k, v) ok = ok && (!strcmp(k, "city") || !strcmp(k, "days") || !strcmp(k, "wind"));
        return ok;
    }
    if (!strcmp(name, "ping")) {
        json_t *h = json_object_get(a, "host");
        return json_object_size(a) == 1 && json_is_string(h) &&
               (!strcmp(json_string_value(h), "a.example") || !strcmp(json_string_value(h), "b.example"));
    }
    return false;
}

/* POST /v1/chat/completions: exactly one call, of `want` (NULL: either tool), with valid arguments. */
static void chat_call(unsigned port, const char *what, const char *tool_choice, const char *want, int seed) {
    char body[4096], *out = NULL;
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"What is the weather in Paris?\"}], \"tools\": %s, "
             "\"tool_choice\": %s, \"parallel_tool_calls\": false, \"max_tokens\": 160, \"temperature\": 1.0, "
             "\"seed\": %d}",
             TOOLS_OPENAI, tool_choice, seed);
    int code = http(port, "POST", "/v1/chat/completions", body, NULL, &out);
    json_t *j = body_json(out);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
    json_t *calls = json_object_get(msg, "tool_calls"), *fn = json_object_get(json_array_get(calls, 0), "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *a = args ? json_loads(args, 0, NULL) : NULL;
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    CHECKF(code == 200 && json_array_size(calls) == 1 && name && (!want || !strcmp(name, want)) && args_valid(name, a) &&
               finish && !strcmp(finish, "tool_calls"),
           "%s, seed %d: not one valid call of %s: %s", what, seed, want ? want : "a tool", out ? out : "(no reply)");
    json_decref(a);
    json_decref(j);
    free(out);
}

/* POST /v1/messages with thinking on and a budget of 0: exactly one tool_use of `want`, valid input. */
static void messages_call(unsigned port, const char *what, const char *tool_choice, const char *want, int k) {
    char body[4096], *out = NULL;
    snprintf(body, sizeof body,
             "{\"model\": \"m\", \"max_tokens\": 160, \"messages\": [{\"role\": \"user\", \"content\": "
             "\"Weather in Paris, please (%d).\"}], \"tools\": %s, \"tool_choice\": %s, "
             "\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 0}, \"temperature\": 1.0}",
             k, TOOLS_ANTHROPIC, tool_choice);
    int code = http(port, "POST", "/v1/messages", body, NULL, &out);
    json_t *j = body_json(out), *content = json_object_get(j, "content"), *use = NULL, *b;
    size_t i, n_use = 0;
    json_array_foreach(content, i, b) if (!strcmp(json_string_value(json_object_get(b, "type")) ?: "", "tool_use")) {
        use = b;
        n_use++;
    }
    const char *name = json_string_value(json_object_get(use, "name"));
    const char *stop = json_string_value(json_object_get(j, "stop_reason"));
    CHECKF(code == 200 && n_use == 1 && name && !strcmp(name, want) && args_valid(name, json_object_get(use, "input")) &&
               stop && !strcmp(stop, "tool_use"),
           "%s, request %d: not one valid tool_use of %s: %s", what, k, want, out ? out : "(no reply)");
    json_decref(j);
    free(out);
}

static bool write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, strlen(text), f) == strlen(text);
    return fclose(f) == 0 && ok;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *shared = argv[1];
    deja_bin = argv[2];
    signal(SIGPIPE, SIG_IGN);
    char model[128], glm_tmpl[128], codelm[512], oss_tmpl[512], laguna[512];
    snprintf(model, sizeof model, "/tmp/deja-test-serve-tools-%d.gguf", (int)getpid());
    snprintf(glm_tmpl, sizeof glm_tmpl, "/tmp/deja-test-serve-tools-%d.jinja", (int)getpid());
    snprintf(codelm, sizeof codelm, "%s", test_shared_path(shared, "models/codelm-15m-f16.gguf"));
    snprintf(oss_tmpl, sizeof oss_tmpl, "%s", test_shared_path(shared, "golden/chat_templates/templates/openai-gpt-oss-120b.jinja"));
    snprintf(laguna, sizeof laguna, "%s", test_shared_path(shared, "golden/chat_templates/templates/poolside-Laguna-XS.2.jinja"));
    struct gguf_ctx *src = NULL;
    CHECKF(gguf_open(codelm, &src) == DJ_OK, "%s: %s", codelm, dj_last_error());
    struct synth_model p = synth_default();
    p.n_ctx = 4096;
    CHECKF(src && synth_write(model, codelm, &p, harmony_vocab_tweak, src) == DJ_OK, "synth: %s", dj_last_error());
    gguf_close(src);
    CHECK(write_file(glm_tmpl, GLM_TEMPLATE));
    struct srv s;

    /* gpt-oss: the analysis message is allowed first (budget 0 closes it), then one call */
    const char *oss_args[] = {"-c", "4096", "--chat-template-file", oss_tmpl, NULL};
    if (srv_start(&s, model, oss_args)) {
        for (int k = 0; k < 4; k++) {
            messages_call(s.port, "gpt-oss named", "{\"type\": \"tool\", \"name\": \"get_weather\"}", "get_weather", k);
            messages_call(s.port, "gpt-oss named", "{\"type\": \"tool\", \"name\": \"ping\"}", "ping", k);
        }
        /* any tool: one of the two */
        char *out = NULL;
        const char *anyreq = "{\"model\": \"m\", \"max_tokens\": 160, \"messages\": [{\"role\": \"user\", \"content\": "
                             "\"Hi\"}], \"tools\": %s, \"tool_choice\": {\"type\": \"any\"}, "
                             "\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 0}}";
        char body[4096];
        snprintf(body, sizeof body, anyreq, TOOLS_ANTHROPIC);
        for (int k = 0; k < 4; k++) {
            CHECK(http(s.port, "POST", "/v1/messages", body, NULL, &out) == 200);
            json_t *j = body_json(out), *b;
            size_t i, n_use = 0;
            json_array_foreach(json_object_get(j, "content"), i, b) {
                if (strcmp(json_string_value(json_object_get(b, "type")) ?: "", "tool_use")) continue;
                n_use++;
                CHECKF(args_valid(json_string_value(json_object_get(b, "name")) ?: "", json_object_get(b, "input")),
                       "gpt-oss any: invalid call: %s", out);
            }
            CHECKF(n_use == 1, "gpt-oss any: %zu calls: %s", n_use, out);
            json_decref(j);
            free(out);
        }
        /* auto: free output until " to=functions.", served (a random model rarely gets there) */
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": %s, \"max_tokens\": 8, \"seed\": 1}",
                 TOOLS_OPENAI);
        CHECK(http(s.port, "POST", "/v1/chat/completions", body, NULL, &out) == 200);
        free(out);
        CHECK(srv_stop(&s) == 0);
    }

    /* GLM without think markers: required, named, through the OpenAI API */
    const char *glm_args[] = {"-c", "4096", "--chat-template-file", glm_tmpl, NULL};
    if (srv_start(&s, model, glm_args)) {
        for (int seed = 1; seed <= 4; seed++) {
            chat_call(s.port, "glm named", "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}",
                      "get_weather", seed);
            chat_call(s.port, "glm named", "{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}", "ping", seed);
            chat_call(s.port, "glm required", "\"required\"", NULL, seed);
        }
        CHECK(srv_stop(&s) == 0);
    }

    /* Laguna XS.2: GLM's syntax with <think>; thinking on, the prompt ends inside the think block */
    const char *lag_args[] = {"-c", "4096", "--chat-template-file", laguna, NULL};
    if (srv_start(&s, model, lag_args)) {
        for (int k = 0; k < 4; k++)
            messages_call(s.port, "laguna named", "{\"type\": \"tool\", \"name\": \"get_weather\", "
                                                  "\"disable_parallel_tool_use\": true}", "get_weather", k);
        CHECK(srv_stop(&s) == 0);
    }
    if (!getenv("KEEP")) unlink(model), unlink(glm_tmpl);
    TEST_END();
}
