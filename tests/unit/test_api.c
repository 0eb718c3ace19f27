/*
 * test_api.c — the chat API dialects (src/server/api.h) without a server:
 * request translation of realistic OpenAI SDK, Codex (Responses) and Claude
 * Code (Messages) bodies into exact OpenAI chat messages / tools / settings;
 * every rejected input's status and param; the response objects field by
 * field; and the SSE streams, parsed back: every data line is JSON, the
 * events come in order, the deltas reassemble the text and arguments, and a
 * stream's reassembled reply equals the non-streamed response (the invariant).
 *
 * Bodies are written with ` for " (Q()), so they read like JSON.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/api.h"
#include "server/request.h"
#include "server/response_store.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static char *allocs[512];
static size_t n_allocs;

/* s with every ` turned into " (freed at exit). */
static const char *Q(const char *s) {
    char *p = strdup(s);
    for (char *q = p; *q; q++)
        if (*q == '`') *q = '"';
    if (n_allocs < sizeof allocs / sizeof allocs[0]) allocs[n_allocs++] = p;
    return p;
}

/* got equals the JSON text want (in Q form); prints both otherwise. */
static bool jeq_(const json_t *got, const char *want, const char *file, int line) {
    json_error_t e;
    json_t *w = json_loads(Q(want), JSON_DECODE_ANY, &e);
    if (!w) {
        fprintf(stderr, "%s:%d: bad expected JSON: %s\n", file, line, e.text);
        return false;
    }
    const bool ok = got && json_equal(got, w);
    if (!ok) {
        char *g = got ? json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        char *ws = json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "%s:%d:\n   got  %s\n   want %s\n", file, line, g ? g : "(null)", ws);
        free(g);
        free(ws);
    }
    json_decref(w);
    return ok;
}
#define JEQ(got, want) CHECK(jeq_((got), (want), __FILE__, __LINE__))

static enum dj_status parse(enum dj_api api, const char *body, struct dj_chat_req *r, int *status, const char **param) {
    memset(r, 0, sizeof *r);
    const char *b = Q(body);
    return api_parse_chat(api, "m", b, strlen(b), r, status, param);
}

/* The body is rejected with this status and param (NULL: none). */
static void expect_err_(enum dj_api api, const char *body, int want_status, const char *want_param, const char *file,
                        int line) {
    struct dj_chat_req r;
    int status = 0;
    const char *param = NULL;
    enum dj_status st = parse(api, body, &r, &status, &param);
    const bool ok = st != DJ_OK && status == want_status &&
                    ((!want_param && !param) || (want_param && param && !strcmp(param, want_param)));
    if (!ok) {
        test_failed++;
        fprintf(stderr, "FAIL %s:%d: body %s\n   got st %d status %d param %s (%s)\n   want status %d param %s\n", file,
                line, Q(body), st, status, param ? param : "(null)", dj_last_error(), want_status,
                want_param ? want_param : "(null)");
    } else {
        test_passed++;
        CHECKF(dj_last_error()[0] != 0, "no message for %s", Q(body));
    }
    if (st == DJ_OK) api_chat_req_free(&r);
    struct dj_chat_req zero;
    memset(&zero, 0, sizeof zero);
    CHECK(st == DJ_OK || !memcmp(&r, &zero, sizeof r)); /* *out untouched on failure */
}
#define EXPECT_ERR(api, body, status, param) expect_err_((api), (body), (status), (param), __FILE__, __LINE__)

/* ---- SSE parsing ---------------------------------------------------------------------------- */

struct ev {
    char name[64]; /* "" when the event has no event: line */
    json_t *data;  /* NULL for [DONE] */
    bool done;
};

struct evs {
    struct ev e[256];
    size_t n;
};

/* Splits SSE text into events; every event is `[event: X\n]data: Y\n\n` with Y JSON or [DONE]. */
static void sse_parse(const char *s, size_t n, struct evs *out) {
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        const char *end = strstr(s + i, "\n\n");
        CHECK(end != NULL);
        if (!end) return;
        const size_t len = (size_t)(end - (s + i));
        char *blk = strndup(s + i, len);
        i += len + 2;
        struct ev *e = &out->e[out->n < 256 ? out->n++ : 255];
        memset(e, 0, sizeof *e);
        char *data = blk;
        if (!strncmp(blk, "event: ", 7)) {
            char *nl = strchr(blk, '\n');
            CHECK(nl != NULL);
            if (!nl) {
                free(blk);
                return;
            }
            snprintf(e->name, sizeof e->name, "%.*s", (int)(nl - blk - 7), blk + 7);
            data = nl + 1;
        }
        CHECKF(!strncmp(data, "data: ", 6), "not a data line: %s", data);
        CHECKF(!strchr(data, '\n'), "a second line in one event: %s", data);
        if (!strcmp(data, "data: [DONE]")) {
            e->done = true;
        } else {
            json_error_t err;
            e->data = json_loads(data + 6, 0, &err);
            CHECKF(json_is_object(e->data), "data is not a JSON object: %s (%s)", data + 6, err.text);
        }
        free(blk);
    }
}

static void evs_free(struct evs *v) {
    for (size_t i = 0; i < v->n; i++) json_decref(v->e[i].data);
    v->n = 0;
}

static const char *sget(const json_t *o, const char *path) { /* "a.b.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) v = json_object_get(v, tok);
    return json_string_value(v);
}

/* The delta sequence every stream test feeds: reasoning, text, two tool calls with arguments in pieces. */
static const struct dj_chat_delta script[] = {
    {DJ_DELTA_REASONING, 0, NULL, NULL, "Let me ", 7},
    {DJ_DELTA_REASONING, 0, NULL, NULL, "think.", 6},
    {DJ_DELTA_CONTENT, 0, NULL, NULL, "Hello", 5},
    {DJ_DELTA_CONTENT, 0, NULL, NULL, " world", 6},
    {DJ_DELTA_TOOL_START, 0, "call_abc", "get_weather", NULL, 0},
    {DJ_DELTA_TOOL_ARGS, 0, NULL, NULL, "{\"city\"", 7},
    {DJ_DELTA_TOOL_ARGS, 0, NULL, NULL, ": \"Paris\"}", 10},
    {DJ_DELTA_TOOL_START, 1, "call_def", "get_time", NULL, 0},
    {DJ_DELTA_TOOL_ARGS, 1, NULL, NULL, "{", 1},
    {DJ_DELTA_TOOL_ARGS, 1, NULL, NULL, "}", 1},
};
enum { N_SCRIPT = sizeof script / sizeof script[0] };

/* The finished choice the script makes (what the integrator hands api_response). */
static struct dj_chat_call script_calls[2];
static struct dj_chat_choice script_choice(enum dj_finish f) {
    static char name0[] = "get_weather", name1[] = "get_time", args0[] = "{\"city\": \"Paris\"}", args1[] = "{}";
    snprintf(script_calls[0].id, sizeof script_calls[0].id, "call_abc");
    script_calls[0].name = name0;
    script_calls[0].args = args0;
    script_calls[0].n_args = strlen(args0);
    snprintf(script_calls[1].id, sizeof script_calls[1].id, "call_def");
    script_calls[1].name = name1;
    script_calls[1].args = args1;
    script_calls[1].n_args = 2;
    struct dj_chat_choice c = {0};
    c.content = (char *)"Hello world";
    c.n_content = 11;
    c.reasoning = (char *)"Let me think.";
    c.n_reasoning = 13;
    c.calls = script_calls;
    c.n_calls = 2;
    c.finish = f;
    return c;
}

static void run_stream(enum dj_api api, const char *id, uint32_t n, bool usage, const struct dj_chat_delta *d,
                       size_t nd, enum dj_finish f, const char *stop_seq, const struct dj_chat_usage *u, struct evs *out) {
    struct dj_api_stream *st = api_stream_new(api, id, "m", 1700000000, n, usage, 30);
    CHECK(st != NULL);
    struct dj_sbuf b = {0};
    api_stream_start(st, &b);
    for (size_t i = 0; i < nd; i++) api_stream_delta(st, 0, &d[i], NULL, &b);
    api_stream_finish_seq(st, 0, f, stop_seq, &b);
    api_stream_end(st, u, &b);
    CHECK(!b.oom);
    sse_parse(b.p ? b.p : "", b.n, out);
    sbuf_free(&b);
    api_stream_free(st);
}

/* ---- requests: Chat Completions ------------------------------------------------------------- */

static void test_chat_request(void) {
    struct dj_chat_req r;
    int status;
    const char *param;
    /* what the OpenAI Python SDK sends for an agent turn, plus llama.cpp's sampling extensions */
    const char *body =
        "{`model`: `m`, `messages`: ["
        "{`role`: `system`, `content`: `You are helpful.`},"
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `Weather in Paris?`}, {`type`: `text`, `text`: `Use C.`}]},"
        "{`role`: `assistant`, `content`: null, `tool_calls`: [{`id`: `call_1`, `type`: `function`, `function`: "
        "{`name`: `get_weather`, `arguments`: `{\\`city\\`: \\`Paris\\`}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `call_1`, `content`: `18C`},"
        "{`role`: `assistant`, `content`: [{`type`: `text`, `text`: `It is `}, {`type`: `text`, `text`: `18C.`}], "
        "`reasoning_content`: `looked it up`},"
        "{`role`: `developer`, `content`: `be brief`, `name`: `x`},"
        "{`role`: `function`, `name`: `get_weather`, `content`: `legacy`},"
        "{`role`: `assistant`, `content`: ``, `tool_calls`: [{`id`: `call_2`, `function`: {`name`: `get_weather`, "
        "`arguments`: {`city`: `Rome`}}}]}],"
        "`tools`: [{`type`: `function`, `function`: {`name`: `get_weather`, `description`: `Weather`, `parameters`: "
        "{`type`: `object`, `properties`: {`city`: {`type`: `string`}}, `required`: [`city`]}, `strict`: true}},"
        "{`type`: `custom`, `custom`: {`name`: `freeform`}}, {`type`: `function`, `function`: {`name`: `now`}}],"
        "`tool_choice`: {`type`: `function`, `function`: {`name`: `get_weather`}}, `parallel_tool_calls`: false,"
        "`temperature`: 0.25, `top_p`: 0.5, `top_k`: 20, `min_p`: 0.125, `repeat_penalty`: 1.5, `frequency_penalty`: 0.5,"
        "`presence_penalty`: -0.5, `seed`: 42, `n`: 2, `max_completion_tokens`: 100, `max_tokens`: 50,"
        "`stop`: [`\\n\\n`, `END`], `logprobs`: true, `top_logprobs`: 5, `logit_bias`: {`15`: -100, `7`: 2.5},"
        "`response_format`: {`type`: `json_schema`, `json_schema`: {`name`: `w`, `schema`: {`type`: `object`}, `strict`: true}},"
        "`stream`: true, `stream_options`: {`include_usage`: true}, `chat_template_kwargs`: {`enable_thinking`: false},"
        "`reasoning_effort`: `high`, `cache_salt`: `s1`, `ignore_eos`: true, `user`: `ignored`, `store`: false}";
    CHECK(parse(DJ_API_CHAT, body, &r, &status, &param) == DJ_OK);
    JEQ(r.messages,
        "[{`role`: `system`, `content`: `You are helpful.`},"
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `Weather in Paris?`}, {`type`: `text`, `text`: `Use C.`}]},"
        "{`role`: `assistant`, `content`: null, `tool_calls`: [{`id`: `call_1`, `type`: `function`, `function`: "
        "{`name`: `get_weather`, `arguments`: `{\\`city\\`: \\`Paris\\`}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `call_1`, `content`: `18C`},"
        "{`role`: `assistant`, `content`: `It is 18C.`, `reasoning_content`: `looked it up`},"
        "{`role`: `developer`, `content`: `be brief`},"
        "{`role`: `tool`, `tool_call_id`: `get_weather`, `content`: `legacy`},"
        "{`role`: `assistant`, `content`: ``, `tool_calls`: [{`id`: `call_2`, `type`: `function`, `function`: "
        "{`name`: `get_weather`, `arguments`: `{\\`city\\`: \\`Rome\\`}`}}]}]");
    JEQ(r.tools, "[{`type`: `function`, `function`: {`name`: `get_weather`, `description`: `Weather`, `parameters`: "
                 "{`type`: `object`, `properties`: {`city`: {`type`: `string`}}, `required`: [`city`]}, `strict`: true}},"
                 "{`type`: `function`, `function`: {`name`: `now`, `parameters`: {`type`: `object`, `properties`: {}}}}]");
    CHECK(r.api == DJ_API_CHAT);
    CHECK(r.tool_choice == DJ_TOOL_NAMED && r.tool_name && !strcmp(r.tool_name, "get_weather"));
    CHECK(!r.parallel_tool_calls);
    CHECK(r.sp.temp == 0.25f && r.sp.top_p == 0.5f && r.sp.top_k == 20 && r.sp.min_p == 0.125f);
    CHECK(r.sp.repeat_penalty == 1.5f && r.sp.freq_penalty == 0.5f && r.sp.presence_penalty == -0.5f);
    CHECK(r.has_seed && r.sp.seed == 42 && r.n == 2);
    CHECK(r.max_tokens == 100); /* max_completion_tokens wins over the older max_tokens */
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "\n\n") && !strcmp(r.stop[1], "END"));
    CHECK(r.logprobs && r.top_logprobs == 5);
    CHECK(r.n_bias == 2 && r.sp.logit_bias == r.bias && r.sp.n_logit_bias == 2);
    CHECK(r.n_bias == 2 && r.bias[0].tok == 15 && r.bias[0].bias == -100.0f && r.bias[1].tok == 7 && r.bias[1].bias == 2.5f);
    JEQ(r.json_schema, "{`type`: `object`}");
    CHECK(!r.json_object);
    CHECK(r.stream && r.include_usage && r.ignore_eos);
    CHECK(r.cache_salt && !strcmp(r.cache_salt, "s1"));
    JEQ(r.template_kwargs, "{`enable_thinking`: false, `reasoning_effort`: `high`}");
    api_chat_req_free(&r);
    api_chat_req_free(&r); /* a freed (zeroed) struct is fine */

    /* the minimal body: defaults */
    CHECK(parse(DJ_API_CHAT, "{`messages`: [{`role`: `user`, `content`: `hi`}]}", &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `user`, `content`: `hi`}]");
    CHECK(r.tools == NULL && r.tool_choice == DJ_TOOL_NONE && r.tool_name == NULL && r.parallel_tool_calls);
    CHECK(r.n == 1 && r.max_tokens == 0 && !r.has_seed && !r.stream && !r.logprobs && r.n_bias == 0);
    CHECK(r.json_schema == NULL && !r.json_object && r.template_kwargs == NULL && r.cache_salt == NULL);
    CHECK(r.sp.temp == 0.8f && r.sp.top_k == 40); /* llama-server's defaults, as /v1/completions */
    api_chat_req_free(&r);

    /* llama.cpp's [[id, bias]] logit bias (false bans); response_format json_object; chat_template_kwargs wins */
    CHECK(parse(DJ_API_CHAT,
                "{`messages`: [{`role`: `user`, `content`: `x`}], `logit_bias`: [[5, false], [6, -1]], `max_tokens`: 7,"
                "`response_format`: {`type`: `json_object`}, `reasoning_effort`: `low`,"
                "`chat_template_kwargs`: {`reasoning_effort`: `high`}, `tools`: [{`type`: `function`, `function`: "
                "{`name`: `f`}}], `tool_choice`: `required`, `stop`: `STOP`}",
                &r, &status, &param) == DJ_OK);
    CHECK(r.n_bias == 2 && r.bias[0].tok == 5 && isinf(r.bias[0].bias) && r.bias[0].bias < 0 && r.bias[1].bias == -1.0f);
    CHECK(r.json_object && r.json_schema == NULL && r.max_tokens == 7);
    JEQ(r.template_kwargs, "{`reasoning_effort`: `high`}");
    CHECK(r.tool_choice == DJ_TOOL_REQUIRED && r.n_stop == 1 && !strcmp(r.stop[0], "STOP"));
    api_chat_req_free(&r);

    /* tool_choice none with tools keeps the tools (the template still shows them) */
    CHECK(parse(DJ_API_CHAT,
                "{`messages`: [{`role`: `user`, `content`: `x`}], `tools`: [{`type`: `function`, `function`: {`name`: `f`}}],"
                "`tool_choice`: `none`}",
                &r, &status, &param) == DJ_OK);
    CHECK(r.tools && r.tool_choice == DJ_TOOL_NONE);
    api_chat_req_free(&r);
}

static void test_chat_errors(void) {
    const enum dj_api C = DJ_API_CHAT;
#define U "[{`role`: `user`, `content`: `x`}]"
    EXPECT_ERR(C, "{bad json", 400, NULL);
    EXPECT_ERR(C, "[1, 2]", 400, NULL);
    EXPECT_ERR(C, "{}", 400, "messages");
    EXPECT_ERR(C, "{`messages`: []}", 400, "messages");
    EXPECT_ERR(C, "{`messages`: {`role`: `user`}}", 400, "messages");
    EXPECT_ERR(C, "{`model`: `gpt-9`, `messages`: " U "}", 404, "model");
    EXPECT_ERR(C, "{`model`: 7, `messages`: " U "}", 400, "model");
    EXPECT_ERR(C, "{`messages`: [7]}", 400, "messages[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `wizard`, `content`: `x`}]}", 400, "messages[0].role");
    EXPECT_ERR(C, "{`messages`: [{`content`: `x`}]}", 400, "messages[0].role");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`}]}", 400, "messages[0].content");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: 5}]}", 400, "messages[0].content");
    EXPECT_ERR(C,
               "{`messages`: [{`role`: `user`, `content`: `x`}, {`role`: `user`, `content`: [{`type`: `text`, `text`: `a`},"
               "{`type`: `image_url`, `image_url`: {`url`: `data:image/png;base64,AAAA`}}]}]}",
               400, "messages[1].content[1]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: [{`type`: `input_audio`, `input_audio`: {}}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: [{`type`: `file`, `file`: {}}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: [{`type`: `text`}]}]}", 400, "messages[0].content[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: [{`type`: `hologram`}]}]}", 400, "messages[0].content[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `user`, `content`: [`x`]}]}", 400, "messages[0].content[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `tool`, `content`: `x`}]}", 400, "messages[0].tool_call_id");
    EXPECT_ERR(C, "{`messages`: [{`role`: `function`, `content`: `x`}]}", 400, "messages[0].name");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `content`: 5}]}", 400, "messages[0].content");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `reasoning_content`: 5}]}", 400, "messages[0].reasoning_content");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `tool_calls`: {}}]}", 400, "messages[0].tool_calls");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `tool_calls`: [{`function`: {`name`: `f`}}]}]}", 400,
               "messages[0].tool_calls[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `tool_calls`: [{`id`: `c`, `function`: {}}]}]}", 400,
               "messages[0].tool_calls[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `tool_calls`: [{`id`: `c`, `type`: `code`, `function`: {`name`: `f`}}]}]}",
               400, "messages[0].tool_calls[0]");
    EXPECT_ERR(C, "{`messages`: [{`role`: `assistant`, `tool_calls`: [{`id`: `c`, `function`: {`name`: `f`, `arguments`: 5}}]}]}",
               400, "messages[0].tool_calls[0]");
    EXPECT_ERR(C, "{`messages`: " U ", `temperature`: `hot`}", 400, "temperature");
    EXPECT_ERR(C, "{`messages`: " U ", `top_p`: 2}", 400, "top_p");
    EXPECT_ERR(C, "{`messages`: " U ", `max_tokens`: 0}", 400, "max_tokens");
    EXPECT_ERR(C, "{`messages`: " U ", `max_completion_tokens`: 0}", 400, "max_completion_tokens");
    EXPECT_ERR(C, "{`messages`: " U ", `max_completion_tokens`: 2.5}", 400, "max_completion_tokens");
    EXPECT_ERR(C, "{`messages`: " U ", `n`: 17}", 400, "n");
    EXPECT_ERR(C, "{`messages`: " U ", `seed`: `x`}", 400, "seed");
    EXPECT_ERR(C, "{`messages`: " U ", `stop`: 5}", 400, "stop");
    EXPECT_ERR(C, "{`messages`: " U ", `stop`: [`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`,`a`]}", 400,
               "stop");
    EXPECT_ERR(C, "{`messages`: " U ", `stream`: `yes`}", 400, "stream");
    EXPECT_ERR(C, "{`messages`: " U ", `stream_options`: {`include_usage`: 1}}", 400, "stream_options");
    EXPECT_ERR(C, "{`messages`: " U ", `logprobs`: 1}", 400, "logprobs");
    EXPECT_ERR(C, "{`messages`: " U ", `top_logprobs`: 21}", 400, "top_logprobs");
    EXPECT_ERR(C, "{`messages`: " U ", `top_logprobs`: 1.5}", 400, "top_logprobs");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: {`abc`: 1}}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: {`-5`: 1}}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: {`5`: 101}}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: {`99999999999`: 1}}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: [[5, `x`]]}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `logit_bias`: 3}", 400, "logit_bias");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: `x`}", 400, "tools");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [5]}", 400, "tools[0]");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`}]}", 400, "tools[0]");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: 5}]}", 400, "tools[0]");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: ``}}]}", 400,
               "tools[0].function.name");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`, `parameters`: `x`}}]}", 400,
               "tools[0].function.parameters");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`, `description`: 1}}]}", 400,
               "tools[0].function.description");
    EXPECT_ERR(C,
               "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`}}, {`type`: `function`, "
               "`function`: {`name`: `f`}}]}",
               400, "tools[1].function.name");
    EXPECT_ERR(C,
               "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`}}], `tool_choice`: {`type`: "
               "`function`, `function`: {`name`: `g`}}}",
               400, "tool_choice.function.name");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`}}], `tool_choice`: `sometimes`}",
               400, "tool_choice");
    EXPECT_ERR(C, "{`messages`: " U ", `tools`: [{`type`: `function`, `function`: {`name`: `f`}}], `tool_choice`: {`type`: `x`}}",
               400, "tool_choice");
    EXPECT_ERR(C, "{`messages`: " U ", `tool_choice`: `required`}", 400, "tool_choice");
    EXPECT_ERR(C, "{`messages`: " U ", `tool_choice`: {`type`: `function`, `function`: {`name`: `f`}}}", 400,
               "tool_choice.function.name");
    EXPECT_ERR(C, "{`messages`: " U ", `parallel_tool_calls`: `no`}", 400, "parallel_tool_calls");
    EXPECT_ERR(C, "{`messages`: " U ", `response_format`: {`type`: `xml`}}", 400, "response_format.type");
    EXPECT_ERR(C, "{`messages`: " U ", `response_format`: `json`}", 400, "response_format");
    EXPECT_ERR(C, "{`messages`: " U ", `response_format`: {`type`: `json_schema`}}", 400, "response_format.json_schema");
    EXPECT_ERR(C, "{`messages`: " U ", `response_format`: {`type`: `json_schema`, `json_schema`: {`schema`: 1}}}", 400,
               "response_format.json_schema.schema");
    EXPECT_ERR(C, "{`messages`: " U ", `reasoning_effort`: 3}", 400, "reasoning_effort");
    EXPECT_ERR(C, "{`messages`: " U ", `chat_template_kwargs`: `x`}", 400, "chat_template_kwargs");
    EXPECT_ERR(C, "{`messages`: " U ", `cache_salt`: 5}", 400, "cache_salt");
    EXPECT_ERR(C, "{`messages`: " U ", `ignore_eos`: 1}", 400, "ignore_eos");
#undef U
}

/* ---- requests: Responses ---------------------------------------------------------------------- */

static void test_responses_request(void) {
    struct dj_chat_req r;
    int status;
    const char *param;
    /* a Codex CLI turn: instructions, developer + user context, a reasoning item, a text reply with two
     * parallel calls, their outputs, a reasoning-only call turn, and the next user message */
    const char *body =
        "{`model`: `m`, `instructions`: `You are Codex.`, `input`: ["
        "{`type`: `message`, `role`: `developer`, `content`: [{`type`: `input_text`, `text`: `<permissions>`}]},"
        "{`type`: `message`, `role`: `user`, `content`: [{`type`: `input_text`, `text`: `<environment_context>`},"
        "{`type`: `input_text`, `text`: `list files`}]},"
        "{`type`: `reasoning`, `id`: `rs_1`, `summary`: [{`type`: `summary_text`, `text`: `sum`}], `content`: "
        "[{`type`: `reasoning_text`, `text`: `I should run ls`}], `encrypted_content`: null},"
        "{`type`: `message`, `role`: `assistant`, `id`: `msg_1`, `content`: [{`type`: `output_text`, `text`: `Running ls.`, "
        "`annotations`: []}]},"
        "{`type`: `function_call`, `id`: `fc_1`, `call_id`: `call_a`, `name`: `shell`, `arguments`: `{\\`command\\`:[\\`ls\\`]}`},"
        "{`type`: `function_call`, `call_id`: `call_b`, `name`: `shell`, `arguments`: `{\\`command\\`:[\\`pwd\\`]}`},"
        "{`type`: `function_call_output`, `call_id`: `call_a`, `output`: `a.txt`},"
        "{`type`: `function_call_output`, `call_id`: `call_b`, `output`: `/w`},"
        "{`type`: `reasoning`, `summary`: [{`type`: `summary_text`, `text`: `one`}, {`type`: `summary_text`, `text`: `two`}]},"
        "{`type`: `function_call`, `call_id`: `call_c`, `name`: `shell`, `arguments`: `{}`},"
        "{`type`: `function_call_output`, `call_id`: `call_c`, `output`: [{`type`: `input_text`, `text`: `ok`}]},"
        "{`role`: `user`, `content`: `thanks`}],"
        "`tools`: [{`type`: `function`, `name`: `shell`, `description`: `Runs a command`, `parameters`: {`type`: `object`, "
        "`properties`: {`command`: {`type`: `array`, `items`: {`type`: `string`}}}, `required`: [`command`]}, `strict`: false},"
        "{`type`: `web_search`}, {`type`: `custom`, `name`: `apply_patch`, `format`: {}}],"
        "`tool_choice`: `auto`, `parallel_tool_calls`: false, `reasoning`: {`effort`: `medium`, `summary`: `auto`},"
        "`store`: false, `stream`: true, `include`: [`reasoning.encrypted_content`], `prompt_cache_key`: `abc`,"
        "`max_output_tokens`: 256, `text`: {`verbosity`: `low`}, `metadata`: {`a`: `b`}, `user`: `u`}";
    CHECK(parse(DJ_API_RESPONSES, body, &r, &status, &param) == DJ_OK);
    JEQ(r.messages,
        "[{`role`: `system`, `content`: `You are Codex.`},"
        "{`role`: `developer`, `content`: [{`type`: `text`, `text`: `<permissions>`}]},"
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `<environment_context>`}, {`type`: `text`, `text`: `list files`}]},"
        "{`role`: `assistant`, `content`: `Running ls.`, `reasoning_content`: `I should run ls`, `tool_calls`: ["
        "{`id`: `call_a`, `type`: `function`, `function`: {`name`: `shell`, `arguments`: `{\\`command\\`:[\\`ls\\`]}`}},"
        "{`id`: `call_b`, `type`: `function`, `function`: {`name`: `shell`, `arguments`: `{\\`command\\`:[\\`pwd\\`]}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `call_a`, `content`: `a.txt`},"
        "{`role`: `tool`, `tool_call_id`: `call_b`, `content`: `/w`},"
        "{`role`: `assistant`, `content`: null, `reasoning_content`: `one\\n\\ntwo`, `tool_calls`: ["
        "{`id`: `call_c`, `type`: `function`, `function`: {`name`: `shell`, `arguments`: `{}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `call_c`, `content`: `ok`},"
        "{`role`: `user`, `content`: `thanks`}]");
    JEQ(r.tools, "[{`type`: `function`, `function`: {`name`: `shell`, `description`: `Runs a command`, `parameters`: "
                 "{`type`: `object`, `properties`: {`command`: {`type`: `array`, `items`: {`type`: `string`}}}, "
                 "`required`: [`command`]}, `strict`: false}}]");
    CHECK(r.api == DJ_API_RESPONSES && r.tool_choice == DJ_TOOL_AUTO && !r.parallel_tool_calls);
    CHECK(r.max_tokens == 256 && r.stream && r.n == 1 && !r.include_usage);
    JEQ(r.template_kwargs, "{`reasoning_effort`: `medium`, `enable_thinking`: true, `thinking`: true}");
    CHECK(!r.store && r.previous_response_id == NULL);
    CHECK(json_equal(r.items, json_object_get(r.root, "input"))); /* the items, as sent */
    api_chat_req_free(&r);

    /* a string input; text.format json_schema; a named function; a trailing reasoning item is dropped */
    CHECK(parse(DJ_API_RESPONSES,
                "{`input`: `hello`, `text`: {`format`: {`type`: `json_schema`, `name`: `x`, `schema`: {`type`: `array`}, "
                "`strict`: true}}, `tools`: [{`type`: `function`, `name`: `f`}], `tool_choice`: {`type`: `function`, "
                "`name`: `f`}, `reasoning`: {`effort`: null}}",
                &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `user`, `content`: `hello`}]");
    JEQ(r.items, "[{`type`: `message`, `role`: `user`, `content`: `hello`}]"); /* the same message as an item */
    CHECK(r.store); /* OpenAI's default */
    JEQ(r.json_schema, "{`type`: `array`}");
    CHECK(r.tool_choice == DJ_TOOL_NAMED && !strcmp(r.tool_name, "f") && r.template_kwargs == NULL);
    api_chat_req_free(&r);
    CHECK(parse(DJ_API_RESPONSES,
                "{`input`: [{`role`: `user`, `content`: `q`}, {`type`: `reasoning`, `content`: [{`type`: `reasoning_text`, "
                "`text`: `hmm`}]}], `text`: {`format`: {`type`: `json_object`}}}",
                &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `user`, `content`: `q`}]");
    CHECK(r.json_object && r.tools == NULL && r.tool_choice == DJ_TOOL_NONE);
    api_chat_req_free(&r);

    const enum dj_api R = DJ_API_RESPONSES;
    EXPECT_ERR(R, "{`input`: `x`, `previous_response_id`: 5}", 400, "previous_response_id");
    EXPECT_ERR(R, "{`input`: `x`, `conversation`: `conv_1`}", 400, "conversation");
    EXPECT_ERR(R, "{`input`: `x`, `conversation`: {`id`: `conv_1`}}", 400, "conversation");
    EXPECT_ERR(R, "{`input`: `x`, `prompt`: {`id`: `pmpt_1`}}", 400, "prompt");
    EXPECT_ERR(R, "{`input`: `x`, `background`: true}", 400, "background");
    EXPECT_ERR(R, "{`input`: `x`, `background`: 1}", 400, "background");
    EXPECT_ERR(R, "{`input`: `x`, `store`: `yes`}", 400, "store");
    EXPECT_ERR(R, "{`previous_response_id`: `resp_1`, `input`: 5}", 400, "input");
    EXPECT_ERR(R, "{`model`: `o3`, `input`: `x`}", 404, "model");
    EXPECT_ERR(R, "{}", 400, "input");
    EXPECT_ERR(R, "{`input`: 5}", 400, "input");
    EXPECT_ERR(R, "{`input`: []}", 400, "input");
    EXPECT_ERR(R, "{`input`: [5]}", 400, "input[0]");
    EXPECT_ERR(R, "{`instructions`: 5, `input`: `x`}", 400, "instructions");
    EXPECT_ERR(R, "{`input`: [{`type`: `message`, `role`: `user`, `content`: [{`type`: `input_image`, `image_url`: `x`}]}]}",
               400, "input[0].content[0]");
    EXPECT_ERR(R, "{`input`: [{`type`: `message`, `role`: `user`, `content`: [{`type`: `input_file`, `file_id`: `x`}]}]}",
               400, "input[0].content[0]");
    EXPECT_ERR(R, "{`input`: [{`type`: `message`, `role`: `tool`, `content`: `x`}]}", 400, "input[0].role");
    EXPECT_ERR(R, "{`input`: [{`type`: `message`, `role`: `user`}]}", 400, "input[0].content");
    EXPECT_ERR(R, "{`input`: [{`type`: `item_reference`, `id`: `x`}]}", 400, "input[0].type");
    EXPECT_ERR(R, "{`input`: [{`type`: 5}]}", 400, "input[0]");
    EXPECT_ERR(R, "{`input`: [{`type`: `function_call`, `name`: `f`, `arguments`: `{}`}]}", 400, "input[0]");
    EXPECT_ERR(R, "{`input`: [{`type`: `function_call_output`, `output`: `x`}]}", 400, "input[0].call_id");
    EXPECT_ERR(R, "{`input`: [{`type`: `function_call_output`, `call_id`: `c`, `output`: 5}]}", 400, "input[0].output");
    EXPECT_ERR(R, "{`input`: [{`type`: `reasoning`, `content`: 5}]}", 400, "input[0]");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`name`: `f`}]}", 400, "tools[0]");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `f`, `parameters`: []}]}", 400, "tools[0].parameters");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `f`}], `tool_choice`: {`type`: `function`, `name`: `g`}}",
               400, "tool_choice.name");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `f`}], `tool_choice`: {`type`: `web_search`}}", 400,
               "tool_choice");
    EXPECT_ERR(R, "{`input`: `x`, `max_output_tokens`: 0}", 400, "max_output_tokens");
    EXPECT_ERR(R, "{`input`: `x`, `text`: {`format`: {`type`: `yaml`}}}", 400, "text.format.type");
    EXPECT_ERR(R, "{`input`: `x`, `text`: 1}", 400, "text");
    EXPECT_ERR(R, "{`input`: `x`, `reasoning`: {`effort`: 1}}", 400, "reasoning.effort");
}

/* messages[i].reasoning_content of a parsed request ("?" when absent). */
static const char *reasoning_of(const struct dj_chat_req *r, size_t i) {
    const char *s = json_string_value(json_object_get(json_array_get(r->messages, i), "reasoning_content"));
    return s ? s : "?";
}

/* ---- requests: Anthropic Messages --------------------------------------------------------------- */

static void test_messages_request(void) {
    struct dj_chat_req r;
    int status;
    const char *param;
    /* a Claude Code turn: billing header + system blocks, reminders, thinking + text + two tool_use,
     * tool results (one as blocks, one an error) followed by text, and a string reply */
    const char *body =
        "{`model`: `claude-sonnet-4-5-20250929`, `max_tokens`: 32000,"
        "`system`: [{`type`: `text`, `text`: `x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=cli; cch=a5145;`},"
        "{`type`: `text`, `text`: `You are Claude Code.`, `cache_control`: {`type`: `ephemeral`}}],"
        "`messages`: ["
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `<system-reminder>ctx</system-reminder>`},"
        "{`type`: `text`, `text`: `fix the bug`, `cache_control`: {`type`: `ephemeral`}}]},"
        "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `Let me look.`, `signature`: `sig`},"
        "{`type`: `redacted_thinking`, `data`: `xx`}, {`type`: `text`, `text`: `I'll read it.`},"
        "{`type`: `tool_use`, `id`: `toolu_01`, `name`: `Read`, `input`: {`file_path`: `/a.py`}},"
        "{`type`: `tool_use`, `id`: `toolu_02`, `name`: `Bash`, `input`: {`command`: `ls`, `timeout`: 1.5, `n`: [1, true]}}]},"
        "{`role`: `user`, `content`: [{`type`: `tool_result`, `tool_use_id`: `toolu_01`, `content`: `print(1)`},"
        "{`type`: `tool_result`, `tool_use_id`: `toolu_02`, `content`: [{`type`: `text`, `text`: `a.py`}, "
        "{`type`: `text`, `text`: `b.py`}], `is_error`: true}, {`type`: `text`, `text`: `go on`}]},"
        "{`role`: `assistant`, `content`: [{`type`: `tool_use`, `id`: `toolu_03`, `name`: `Read`, `input`: {}}]},"
        "{`role`: `user`, `content`: [{`type`: `tool_result`, `tool_use_id`: `toolu_03`}]},"
        "{`role`: `assistant`, `content`: `Done.`}],"
        "`tools`: [{`name`: `Read`, `description`: `Reads a file`, `input_schema`: {`type`: `object`, `properties`: "
        "{`file_path`: {`type`: `string`}}, `required`: [`file_path`]}},"
        "{`name`: `Bash`, `input_schema`: {`type`: `object`}, `cache_control`: {`type`: `ephemeral`}},"
        "{`type`: `web_search_20250305`, `name`: `web_search`, `max_uses`: 5}],"
        "`tool_choice`: {`type`: `auto`, `disable_parallel_tool_use`: true},"
        "`temperature`: 1, `top_k`: 5, `top_p`: 0.5, `stop_sequences`: [`</answer>`], `stream`: true,"
        "`thinking`: {`type`: `enabled`, `budget_tokens`: 10000}, `metadata`: {`user_id`: `u1`}}";
    CHECK(parse(DJ_API_MESSAGES, body, &r, &status, &param) == DJ_OK);
    JEQ(r.messages,
        "[{`role`: `system`, `content`: `x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=cli; cch=00000;\\n"
        "You are Claude Code.`},"
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `<system-reminder>ctx</system-reminder>`}, {`type`: `text`, "
        "`text`: `fix the bug`}]},"
        "{`role`: `assistant`, `content`: `I'll read it.`, `reasoning_content`: `Let me look.`, `tool_calls`: ["
        "{`id`: `toolu_01`, `type`: `function`, `function`: {`name`: `Read`, `arguments`: `{\\`file_path\\`: \\`/a.py\\`}`}},"
        "{`id`: `toolu_02`, `type`: `function`, `function`: {`name`: `Bash`, `arguments`: "
        "`{\\`command\\`: \\`ls\\`, \\`timeout\\`: 1.5, \\`n\\`: [1, true]}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `toolu_01`, `content`: `print(1)`},"
        "{`role`: `tool`, `tool_call_id`: `toolu_02`, `content`: `a.py\\nb.py`},"
        "{`role`: `user`, `content`: [{`type`: `text`, `text`: `go on`}]},"
        "{`role`: `assistant`, `content`: null, `tool_calls`: [{`id`: `toolu_03`, `type`: `function`, `function`: "
        "{`name`: `Read`, `arguments`: `{}`}}]},"
        "{`role`: `tool`, `tool_call_id`: `toolu_03`, `content`: ``},"
        "{`role`: `assistant`, `content`: `Done.`}]");
    JEQ(r.tools, "[{`type`: `function`, `function`: {`name`: `Read`, `description`: `Reads a file`, `parameters`: "
                 "{`type`: `object`, `properties`: {`file_path`: {`type`: `string`}}, `required`: [`file_path`]}}},"
                 "{`type`: `function`, `function`: {`name`: `Bash`, `parameters`: {`type`: `object`}}}]");
    CHECK(r.api == DJ_API_MESSAGES && r.tool_choice == DJ_TOOL_AUTO && !r.parallel_tool_calls);
    CHECK(r.max_tokens == 32000 && r.stream && r.n == 1 && r.sp.temp == 1.0f && r.sp.top_k == 5 && r.sp.top_p == 0.5f);
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "</answer>"));
    JEQ(r.template_kwargs, "{`enable_thinking`: true}");
    CHECK(r.reasoning_budget == 10000 && !r.reasoning_omitted && r.cache_control);
    api_chat_req_free(&r);

    /* Claude Code 2.1 (captured from 2.1.332): a system message inside messages, after the user turn
     * (and another one mid-conversation, as the API allows), thinking adaptive with display omitted,
     * output_config effort, context_management, metadata, service_tier; no cache_control anywhere */
    CHECK(parse(DJ_API_MESSAGES,
                "{`model`: `claude-opus-5-5`, `max_tokens`: 128000, `stream`: true,"
                "`messages`: [{`role`: `user`, `content`: [{`type`: `text`, `text`: `list the files`}]},"
                "{`role`: `system`, `content`: [{`type`: `text`, `text`: `# Environment`}, {`type`: `text`, `text`: `cwd /p`}]},"
                "{`role`: `assistant`, `content`: `ok`}, {`role`: `system`, `content`: `be brief`},"
                "{`role`: `user`, `content`: `go`}],"
                "`thinking`: {`type`: `adaptive`, `display`: `omitted`}, `output_config`: {`effort`: `xhigh`},"
                "`context_management`: {`edits`: [{`type`: `clear_thinking_20251015`, `keep`: `all`},"
                "{`type`: `clear_tool_uses_20250919`, `trigger`: {`type`: `input_tokens`, `value`: 100}}]},"
                "`metadata`: {`user_id`: `{}`}, `service_tier`: `auto`, `container`: null}",
                &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `user`, `content`: [{`type`: `text`, `text`: `list the files`}]},"
                    "{`role`: `system`, `content`: `# Environment\\ncwd /p`}, {`role`: `assistant`, `content`: `ok`},"
                    "{`role`: `system`, `content`: `be brief`}, {`role`: `user`, `content`: `go`}]");
    JEQ(r.template_kwargs, "{`enable_thinking`: true, `reasoning_effort`: `high`}");
    CHECK(r.reasoning_budget == -1 && r.reasoning_omitted && !r.cache_control && !r.json_schema);
    api_chat_req_free(&r);

    /* a thinking block sent back with display omitted: its text comes from deja's signature
     * ("deja1." + base64 of "Hm, ok."); a foreign signature leaves the (empty) text alone;
     * clear_thinking keeps the last N turns' reasoning; output_config.format constrains the reply */
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 9, `messages`: [{`role`: `user`, `content`: `a`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: ``, `signature`: `deja1.SG0sIG9rLg==`},"
                "{`type`: `text`, `text`: `x`}]}, {`role`: `user`, `content`: `b`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: ``, `signature`: `EqQBCkYIBx`},"
                "{`type`: `text`, `text`: `y`}]}, {`role`: `user`, `content`: `c`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t3`, `signature`: ``},"
                "{`type`: `text`, `text`: `z`}]}, {`role`: `user`, `content`: `d`}],"
                "`output_config`: {`format`: {`type`: `json_schema`, `schema`: {`type`: `object`}}}}",
                &r, &status, &param) == DJ_OK);
    CHECK(!strcmp(reasoning_of(&r, 1), "Hm, ok."));
    CHECK(!strcmp(reasoning_of(&r, 3), ""));
    JEQ(r.json_schema, "{`type`: `object`}");
    api_chat_req_free(&r);
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 9, `messages`: [{`role`: `user`, `content`: `a`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t1`}, {`type`: `text`, `text`: `x`}]},"
                "{`role`: `user`, `content`: `b`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t2`}, {`type`: `text`, `text`: `y`}]},"
                "{`role`: `user`, `content`: `c`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t3`}, {`type`: `text`, `text`: `z`}]},"
                "{`role`: `user`, `content`: `d`}], `thinking`: {`type`: `enabled`, `budget_tokens`: 0},"
                "`context_management`: {`edits`: [{`type`: `clear_thinking_20251015`, `keep`: "
                "{`type`: `thinking_turns`, `value`: 2}}]}, `output_format`: {`type`: `json_schema`, `schema`: {}}}",
                &r, &status, &param) == DJ_OK);
    CHECK(!json_object_get(json_array_get(r.messages, 1), "reasoning_content"));
    CHECK(!strcmp(reasoning_of(&r, 3), "t2"));
    CHECK(!strcmp(reasoning_of(&r, 5), "t3"));
    CHECK(r.reasoning_budget == 0 && r.json_schema);
    api_chat_req_free(&r);
    /* the default keep is the last thinking turn */
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 9, `messages`: [{`role`: `user`, `content`: `a`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t1`}, {`type`: `text`, `text`: `x`}]},"
                "{`role`: `user`, `content`: `b`},"
                "{`role`: `assistant`, `content`: [{`type`: `thinking`, `thinking`: `t2`}, {`type`: `text`, `text`: `y`}]},"
                "{`role`: `user`, `content`: `c`}], `context_management`: {`edits`: [{`type`: `clear_thinking_20251015`}]}}",
                &r, &status, &param) == DJ_OK);
    CHECK(!json_object_get(json_array_get(r.messages, 1), "reasoning_content"));
    CHECK(!strcmp(reasoning_of(&r, 3), "t2"));
    api_chat_req_free(&r);

    /* tool_choice any / tool / none; thinking disabled; a string system */
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 5, `system`: `Be terse.`, `messages`: [{`role`: `user`, `content`: `hi`}], `tools`: "
                "[{`name`: `a`, `input_schema`: {`type`: `object`}}, {`type`: `custom`, `name`: `b`}], `tool_choice`: "
                "{`type`: `tool`, `name`: `b`}, `thinking`: {`type`: `disabled`}}",
                &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `system`, `content`: `Be terse.`}, {`role`: `user`, `content`: `hi`}]");
    CHECK(r.tool_choice == DJ_TOOL_NAMED && !strcmp(r.tool_name, "b") && r.parallel_tool_calls);
    CHECK(json_array_size(r.tools) == 2);
    JEQ(r.template_kwargs, "{`enable_thinking`: false}");
    api_chat_req_free(&r);
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 5, `messages`: [{`role`: `user`, `content`: `hi`}], `tools`: [{`name`: `a`}], "
                "`tool_choice`: {`type`: `any`}}",
                &r, &status, &param) == DJ_OK);
    CHECK(r.tool_choice == DJ_TOOL_REQUIRED);
    api_chat_req_free(&r);
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 5, `messages`: [{`role`: `user`, `content`: `hi`}], `tools`: [{`name`: `a`}], "
                "`tool_choice`: {`type`: `none`}}",
                &r, &status, &param) == DJ_OK);
    CHECK(r.tool_choice == DJ_TOOL_NONE && r.tools);
    api_chat_req_free(&r);

    /* count_tokens: the same body without max_tokens (and stream is never set) */
    CHECK(parse(DJ_API_MESSAGES_COUNT,
                "{`model`: `claude-opus-4-1`, `messages`: [{`role`: `user`, `content`: `hi`}], `stream`: true}", &r,
                &status, &param) == DJ_OK);
    CHECK(r.api == DJ_API_MESSAGES_COUNT && !r.stream && r.max_tokens == 0);
    api_chat_req_free(&r);

    const enum dj_api M = DJ_API_MESSAGES;
#define UM "[{`role`: `user`, `content`: `x`}]"
    EXPECT_ERR(M, "{`messages`: " UM "}", 400, "max_tokens");
    EXPECT_ERR(M, "{`max_tokens`: 0, `messages`: " UM "}", 400, "max_tokens");
    EXPECT_ERR(M, "{`max_tokens`: `10`, `messages`: " UM "}", 400, "max_tokens");
    EXPECT_ERR(M, "{`max_tokens`: 10, `model`: 5, `messages`: " UM "}", 400, "model");
    EXPECT_ERR(M, "{`max_tokens`: 10}", 400, "messages");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `developer`, `content`: `x`}]}", 400, "messages[0].role");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `system`, `content`: 5}]}", 400, "messages[0].content");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `system`, `content`: [{`type`: `image`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: {`type`: `sometimes`}}", 400, "thinking.type");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: {`type`: `enabled`, `budget_tokens`: -1}}", 400,
               "thinking.budget_tokens");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: {`type`: `enabled`, `budget_tokens`: `5`}}", 400,
               "thinking.budget_tokens");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `output_config`: {`effort`: `extreme`}}", 400,
               "output_config.effort");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `output_config`: {`format`: {`type`: `yaml`}}}", 400,
               "output_config.format");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `output_config`: 3}", 400, "output_config");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `context_management`: {`edits`: [{`type`: "
               "`clear_thinking_20251015`, `keep`: {`type`: `tool_uses`, `value`: 1}}]}}",
               400, "context_management.edits[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `context_management`: {`edits`: 1}}", 400,
               "context_management.edits");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `service_tier`: 1}", 400, "service_tier");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: 5}]}", 400, "messages[0].content");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `user`}]}", 400, "messages[0].content");
    EXPECT_ERR(M,
               "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: [{`type`: `image`, `source`: {`type`: `base64`, "
               "`media_type`: `image/png`, `data`: `AAAA`}}]}]}",
               400, "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: [{`type`: `document`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M,
               "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: [{`type`: `tool_result`, `tool_use_id`: `t`, "
               "`content`: [{`type`: `image`, `source`: {}}]}]}]}",
               400, "messages[0].content[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: [{`type`: `tool_result`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `user`, `content`: [{`type`: `tool_use`, `id`: `t`, `name`: `f`}]}]}",
               400, "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `assistant`, `content`: [{`type`: `tool_result`, `tool_use_id`: `t`}]}]}",
               400, "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `assistant`, `content`: [{`type`: `tool_use`, `name`: `f`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `assistant`, `content`: [{`type`: `tool_use`, `id`: `t`, `name`: `f`, "
                  "`input`: `x`}]}]}",
               400, "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `assistant`, `content`: [{`type`: `text`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: [{`role`: `assistant`, `content`: [{`type`: `server_tool_use`}]}]}", 400,
               "messages[0].content[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `system`: 5, `messages`: " UM "}", 400, "system");
    EXPECT_ERR(M, "{`max_tokens`: 10, `system`: [{`type`: `image`}], `messages`: " UM "}", 400, "system[0]");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`name`: `f`, `input_schema`: 5}]}", 400,
               "tools[0].input_schema");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`description`: `x`}]}", 400, "tools[0].name");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`name`: `f`}], `tool_choice`: {`type`: `tool`, `name`: `g`}}",
               400, "tool_choice.name");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`name`: `f`}], `tool_choice`: {`type`: `maybe`}}", 400,
               "tool_choice.type");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`name`: `f`}], `tool_choice`: `auto`}", 400, "tool_choice");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tool_choice`: {`type`: `any`}}", 400, "tool_choice");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `tools`: [{`name`: `f`}], `tool_choice`: {`type`: `auto`, "
                  "`disable_parallel_tool_use`: 1}}",
               400, "tool_choice.disable_parallel_tool_use");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: `on`}", 400, "thinking");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: {`budget_tokens`: 5}}", 400, "thinking.type");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `thinking`: {`type`: `enabled`, `budget_tokens`: `x`}}", 400,
               "thinking.budget_tokens");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `stop_sequences`: [1]}", 400, "stop_sequences");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `temperature`: -1}", 400, "temperature");
    EXPECT_ERR(M, "{`max_tokens`: 10, `messages`: " UM ", `metadata`: 5}", 400, "metadata");
    EXPECT_ERR(DJ_API_MESSAGES_COUNT, "{`messages`: []}", 400, "messages");
#undef UM
}

/* ---- errors ---------------------------------------------------------------------------------------- */

static void test_error_json(void) {
    json_t *j = api_error_json(DJ_API_CHAT, 400, "messages[0].role", "bad role");
    JEQ(j, "{`error`: {`message`: `bad role`, `type`: `invalid_request_error`, `param`: `messages[0].role`, `code`: null}}");
    json_decref(j);
    j = api_error_json(DJ_API_RESPONSES, 404, "model", "no such model");
    JEQ(j, "{`error`: {`message`: `no such model`, `type`: `not_found_error`, `param`: `model`, `code`: null}}");
    json_decref(j);
    j = api_error_json(DJ_API_CHAT, 500, NULL, "boom");
    JEQ(j, "{`error`: {`message`: `boom`, `type`: `server_error`, `param`: null, `code`: null}}");
    json_decref(j);
    j = api_error_json(DJ_API_CHAT, 401, NULL, "key");
    CHECK(!strcmp(sget(j, "error.type"), "authentication_error"));
    json_decref(j);
    j = api_error_json(DJ_API_MESSAGES, 400, "max_tokens", "max_tokens is required");
    JEQ(j, "{`type`: `error`, `error`: {`type`: `invalid_request_error`, `message`: `max_tokens is required`}}");
    json_decref(j);
    static const struct {
        unsigned status;
        const char *type;
    } at[] = {{401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
              {413, "request_too_large"},    {429, "rate_limit_error"},  {500, "api_error"},
              {503, "overloaded_error"},     {529, "overloaded_error"},  {405, "invalid_request_error"}};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        j = api_error_json(DJ_API_MESSAGES_COUNT, at[i].status, NULL, "x");
        CHECKF(j && !strcmp(sget(j, "error.type"), at[i].type), "status %u", at[i].status);
        json_decref(j);
    }
    /* invalid UTF-8 in a message still makes valid JSON */
    j = api_error_json(DJ_API_CHAT, 400, NULL, "bad \xff byte");
    CHECK(j && !strcmp(sget(j, "error.message"), "bad \xEF\xBF\xBD byte"));
    json_decref(j);
}

/* ---- response objects ------------------------------------------------------------------------------ */

static void test_chat_response(void) {
    struct dj_chat_choice ch[3];
    ch[0] = script_choice(DJ_FINISH_STOP);
    memset(&ch[1], 0, sizeof ch[1]);
    ch[1].calls = script_calls;
    ch[1].n_calls = 1;
    ch[1].finish = DJ_FINISH_STOP;
    memset(&ch[2], 0, sizeof ch[2]);
    ch[2].content = (char *)"trunc";
    ch[2].n_content = 5;
    ch[2].finish = DJ_FINISH_LENGTH;
    json_t *lp = json_loads(Q("{`content`: [{`token`: `trunc`, `logprob`: -0.125, `bytes`: [116], `top_logprobs`: []}]}"), 0,
                            NULL);
    ch[2].logprobs = lp;
    json_t *xd = json_loads(Q("{`reused_own`: 3}"), 0, NULL);
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9, .x_deja = xd};
    json_t *j = api_response(DJ_API_CHAT, "chatcmpl-1", "m", 1700000000, ch, 3, &u);
    JEQ(j, "{`id`: `chatcmpl-1`, `object`: `chat.completion`, `created`: 1700000000, `model`: `m`, `choices`: ["
           "{`index`: 0, `message`: {`role`: `assistant`, `content`: `Hello world`, `reasoning_content`: `Let me think.`, "
           "`tool_calls`: [{`id`: `call_abc`, `type`: `function`, `function`: {`name`: `get_weather`, `arguments`: "
           "`{\\`city\\`: \\`Paris\\`}`}}, {`id`: `call_def`, `type`: `function`, `function`: {`name`: `get_time`, "
           "`arguments`: `{}`}}]}, `logprobs`: null, `finish_reason`: `tool_calls`},"
           "{`index`: 1, `message`: {`role`: `assistant`, `content`: null, `tool_calls`: [{`id`: `call_abc`, `type`: "
           "`function`, `function`: {`name`: `get_weather`, `arguments`: `{\\`city\\`: \\`Paris\\`}`}}]}, `logprobs`: null, "
           "`finish_reason`: `tool_calls`},"
           "{`index`: 2, `message`: {`role`: `assistant`, `content`: `trunc`}, `logprobs`: {`content`: [{`token`: `trunc`, "
           "`logprob`: -0.125, `bytes`: [116], `top_logprobs`: []}]}, `finish_reason`: `length`}],"
           "`usage`: {`prompt_tokens`: 30, `completion_tokens`: 9, `total_tokens`: 39, `prompt_tokens_details`: "
           "{`cached_tokens`: 12}}, `x_deja`: {`reused_own`: 3}}");
    CHECK(json_is_integer(json_object_get(json_object_get(j, "usage"), "prompt_tokens")));
    json_decref(j);
    /* an empty reply: content "" (not null), finish stop; no usage given → zeros */
    struct dj_chat_choice e = {0};
    e.finish = DJ_FINISH_STOP;
    j = api_response(DJ_API_CHAT, "c", "m", 1, &e, 1, NULL);
    JEQ(json_object_get(j, "choices"),
        "[{`index`: 0, `message`: {`role`: `assistant`, `content`: ``}, `logprobs`: null, `finish_reason`: `stop`}]");
    JEQ(json_object_get(j, "usage"),
        "{`prompt_tokens`: 0, `completion_tokens`: 0, `total_tokens`: 0, `prompt_tokens_details`: {`cached_tokens`: 0}}");
    CHECK(json_object_get(j, "x_deja") == NULL);
    json_decref(j);
    /* logprobs stay exact through the 17-digit dump */
    json_t *lp2 = json_pack("{s:[{s:s, s:f}]}", "content", "token", "a", "logprob", -0.1234567891234567);
    e.logprobs = lp2;
    j = api_response(DJ_API_CHAT, "c", "m", 1, &e, 1, NULL);
    char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_t *back = json_loads(txt, 0, NULL);
    CHECK(json_equal(back, j));
    free(txt);
    json_decref(back);
    json_decref(j);
    json_decref(lp2);
    json_decref(lp);
    json_decref(xd);
}

static void test_responses_response(void) {
    struct dj_chat_choice c = script_choice(DJ_FINISH_STOP);
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9};
    json_t *j = api_response(DJ_API_RESPONSES, "resp_X", "m", 1700000000, &c, 1, &u);
    JEQ(json_object_get(j, "output"),
        "[{`type`: `reasoning`, `id`: `rs_X_0`, `summary`: [], `content`: [{`type`: `reasoning_text`, `text`: `Let me think.`}]},"
        "{`type`: `message`, `id`: `msg_X_1`, `status`: `completed`, `role`: `assistant`, `content`: [{`type`: `output_text`, "
        "`text`: `Hello world`, `annotations`: []}]},"
        "{`type`: `function_call`, `id`: `fc_X_2`, `call_id`: `call_abc`, `name`: `get_weather`, `arguments`: "
        "`{\\`city\\`: \\`Paris\\`}`, `status`: `completed`},"
        "{`type`: `function_call`, `id`: `fc_X_3`, `call_id`: `call_def`, `name`: `get_time`, `arguments`: `{}`, `status`: "
        "`completed`}]");
    JEQ(json_object_get(j, "usage"), "{`input_tokens`: 30, `input_tokens_details`: {`cached_tokens`: 12}, `output_tokens`: 9, "
                                     "`output_tokens_details`: {`reasoning_tokens`: 0}, `total_tokens`: 39}");
    CHECK(!strcmp(sget(j, "id"), "resp_X") && !strcmp(sget(j, "object"), "response") && !strcmp(sget(j, "status"), "completed"));
    CHECK(json_integer_value(json_object_get(j, "created_at")) == 1700000000 && !strcmp(sget(j, "model"), "m"));
    CHECK(json_is_null(json_object_get(j, "incomplete_details")) && json_is_null(json_object_get(j, "error")));
    json_decref(j);
    /* cut by max_output_tokens: incomplete; a reply that is only a call has no message item */
    struct dj_chat_choice t = {0};
    t.content = (char *)"par";
    t.n_content = 3;
    t.finish = DJ_FINISH_LENGTH;
    j = api_response(DJ_API_RESPONSES, "resp_Y", "m", 1, &t, 1, &u);
    CHECK(!strcmp(sget(j, "status"), "incomplete"));
    JEQ(json_object_get(j, "incomplete_details"), "{`reason`: `max_output_tokens`}");
    JEQ(json_object_get(j, "output"), "[{`type`: `message`, `id`: `msg_Y_0`, `status`: `incomplete`, `role`: `assistant`, "
                                      "`content`: [{`type`: `output_text`, `text`: `par`, `annotations`: []}]}]");
    json_decref(j);
    t = script_choice(DJ_FINISH_STOP);
    t.n_content = t.n_reasoning = 0;
    t.n_calls = 1;
    j = api_response(DJ_API_RESPONSES, "resp_Z", "m", 1, &t, 1, &u);
    CHECK(json_array_size(json_object_get(j, "output")) == 1 &&
          !strcmp(sget(json_array_get(json_object_get(j, "output"), 0), "type"), "function_call"));
    json_decref(j);
}

static void test_messages_response(void) {
    struct dj_chat_choice c = script_choice(DJ_FINISH_STOP);
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9};
    json_t *j = api_response(DJ_API_MESSAGES, "msg_1", "claude-x", 1, &c, 1, &u);
    JEQ(j, "{`id`: `msg_1`, `type`: `message`, `role`: `assistant`, `model`: `claude-x`, `content`: ["
           "{`type`: `thinking`, `thinking`: `Let me think.`, `signature`: ``},"
           "{`type`: `text`, `text`: `Hello world`},"
           "{`type`: `tool_use`, `id`: `toolu_abc`, `name`: `get_weather`, `input`: {`city`: `Paris`}},"
           "{`type`: `tool_use`, `id`: `toolu_def`, `name`: `get_time`, `input`: {}}],"
           "`stop_reason`: `tool_use`, `stop_sequence`: null, `usage`: {`input_tokens`: 18, `cache_creation_input_tokens`: 0, "
           "`cache_read_input_tokens`: 12, `output_tokens`: 9}}");
    json_decref(j);
    /* arguments that are not a JSON object: input {} and the reply goes on */
    static char bad[] = "{\"city\": ";
    script_calls[0].args = bad;
    script_calls[0].n_args = strlen(bad);
    c.n_calls = 1;
    j = api_response(DJ_API_MESSAGES, "msg_2", "m", 1, &c, 1, &u);
    JEQ(json_array_get(json_object_get(j, "content"), 2),
        "{`type`: `tool_use`, `id`: `toolu_abc`, `name`: `get_weather`, `input`: {}}");
    json_decref(j);
    /* stop_sequence / max_tokens / end_turn */
    struct dj_chat_choice s = {0};
    s.content = (char *)"42";
    s.n_content = 2;
    s.finish = DJ_FINISH_STOP;
    s.stop_sequence = "</answer>";
    j = api_response(DJ_API_MESSAGES, "msg_3", "m", 1, &s, 1, NULL);
    CHECK(!strcmp(sget(j, "stop_reason"), "stop_sequence") && !strcmp(sget(j, "stop_sequence"), "</answer>"));
    JEQ(json_object_get(j, "content"), "[{`type`: `text`, `text`: `42`}]");
    json_decref(j);
    s.stop_sequence = NULL;
    j = api_response(DJ_API_MESSAGES, "msg_3", "m", 1, &s, 1, NULL);
    CHECK(!strcmp(sget(j, "stop_reason"), "end_turn") && json_is_null(json_object_get(j, "stop_sequence")));
    json_decref(j);
    s.finish = DJ_FINISH_LENGTH;
    s.n_content = 0;
    j = api_response(DJ_API_MESSAGES, "msg_3", "m", 1, &s, 1, NULL);
    CHECK(!strcmp(sget(j, "stop_reason"), "max_tokens"));
    JEQ(json_object_get(j, "content"), "[{`type`: `text`, `text`: ``}]");
    json_decref(j);
    /* display omitted: the thinking block has no text, its signature carries it; a request that asked
     * for caching reports what it computed as written to the cache */
    c = script_choice(DJ_FINISH_STOP);
    c.reasoning_omitted = true;
    struct dj_chat_usage w = {.prompt = 30, .cached = 12, .completion = 9, .cache_write = 18};
    j = api_response(DJ_API_MESSAGES, "msg_4", "m", 1, &c, 1, &w);
    JEQ(json_array_get(json_object_get(j, "content"), 0),
        "{`type`: `thinking`, `thinking`: ``, `signature`: `deja1.TGV0IG1lIHRoaW5rLg==`}");
    JEQ(json_object_get(j, "usage"), "{`input_tokens`: 0, `cache_creation_input_tokens`: 18, "
                                     "`cache_read_input_tokens`: 12, `output_tokens`: 9}");
    json_decref(j);
    /* the block sent back as Claude Code does parses to the same reasoning */
    struct dj_chat_req r;
    int status;
    const char *param;
    CHECK(parse(DJ_API_MESSAGES,
                "{`max_tokens`: 9, `messages`: [{`role`: `user`, `content`: `a`}, {`role`: `assistant`, `content`: "
                "[{`type`: `thinking`, `thinking`: ``, `signature`: `deja1.TGV0IG1lIHRoaW5rLg==`}]}]}",
                &r, &status, &param) == DJ_OK);
    CHECK(!strcmp(reasoning_of(&r, 1), "Let me think."));
    api_chat_req_free(&r);
    /* a malformed deja signature (bad padding, not base64, not UTF-8) is left alone: the text stays "" */
    static const char *const bad_sigs[] = {"deja1.TGV0=IG1l", "deja1.TG?0", "deja1.TGV", "deja1./w==", "deja1."};
    for (size_t i = 0; i < sizeof bad_sigs / sizeof bad_sigs[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
                 "\"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"\", \"signature\": \"%s\"}]}]}",
                 bad_sigs[i]);
        int st2;
        const char *p2;
        CHECK(api_parse_chat(DJ_API_MESSAGES, "m", body, strlen(body), &r, &st2, &p2) == DJ_OK);
        CHECK(!strcmp(reasoning_of(&r, 1), ""));
        api_chat_req_free(&r);
    }
}

/* ---- streams -------------------------------------------------------------------------------------- */

static void test_chat_stream(void) {
    struct evs v;
    json_t *xd = json_loads(Q("{`computed`: 18}"), 0, NULL);
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9, .x_deja = xd};
    run_stream(DJ_API_CHAT, "chatcmpl-S", 1, true, script, N_SCRIPT, DJ_FINISH_STOP, NULL, &u, &v);
    CHECK(v.n == 1 + N_SCRIPT + 1 + 1 + 1); /* role, deltas, finish, usage, [DONE] */
    CHECK(v.n > 3 && v.e[v.n - 1].done);
    JEQ(json_object_get(json_array_get(json_object_get(v.e[0].data, "choices"), 0), "delta"),
        "{`role`: `assistant`, `content`: ``}");
    /* reassemble the message from the chunks, as an SDK does */
    char content[64] = "", reasoning[64] = "", args[2][64] = {"", ""}, ids[2][32] = {"", ""}, names[2][32] = {"", ""};
    const char *finish = NULL;
    for (size_t i = 0; i + 2 < v.n; i++) {
        json_t *d = v.e[i].data;
        CHECK(v.e[i].name[0] == 0 && !strcmp(sget(d, "object"), "chat.completion.chunk") && !strcmp(sget(d, "id"), "chatcmpl-S"));
        CHECK(json_integer_value(json_object_get(d, "created")) == 1700000000 && !strcmp(sget(d, "model"), "m"));
        json_t *ch = json_array_get(json_object_get(d, "choices"), 0), *delta = json_object_get(ch, "delta");
        CHECK(json_integer_value(json_object_get(ch, "index")) == 0 && json_object_get(ch, "logprobs") != NULL);
        if (sget(delta, "content")) strcat(content, sget(delta, "content"));
        if (sget(delta, "reasoning_content")) strcat(reasoning, sget(delta, "reasoning_content"));
        json_t *tc = json_array_get(json_object_get(delta, "tool_calls"), 0);
        if (tc) {
            const json_int_t k = json_integer_value(json_object_get(tc, "index"));
            CHECK(k == 0 || k == 1);
            if (k < 0 || k > 1) continue;
            if (sget(tc, "id")) {
                snprintf(ids[k], sizeof ids[k], "%s", sget(tc, "id"));
                snprintf(names[k], sizeof names[k], "%s", sget(tc, "function.name"));
                CHECK(!strcmp(sget(tc, "type"), "function"));
            }
            if (sget(tc, "function.arguments")) strcat(args[k], sget(tc, "function.arguments"));
        }
        if (sget(ch, "finish_reason")) finish = sget(ch, "finish_reason");
        else CHECK(json_is_null(json_object_get(ch, "finish_reason")));
    }
    CHECK(!strcmp(content, "Hello world") && !strcmp(reasoning, "Let me think."));
    CHECK(!strcmp(ids[0], "call_abc") && !strcmp(names[0], "get_weather") && !strcmp(args[0], "{\"city\": \"Paris\"}"));
    CHECK(!strcmp(ids[1], "call_def") && !strcmp(names[1], "get_time") && !strcmp(args[1], "{}"));
    CHECK(finish && !strcmp(finish, "tool_calls"));
    json_t *last = v.e[v.n - 2].data;
    JEQ(json_object_get(last, "choices"), "[]");
    JEQ(json_object_get(last, "usage"), "{`prompt_tokens`: 30, `completion_tokens`: 9, `total_tokens`: 39, "
                                        "`prompt_tokens_details`: {`cached_tokens`: 12}}");
    JEQ(json_object_get(last, "x_deja"), "{`computed`: 18}");
    evs_free(&v);

    /* no include_usage: no usage chunk; two completions interleaved, one cut by length */
    struct dj_api_stream *st = api_stream_new(DJ_API_CHAT, "c2", "m", 5, 2, false, 3);
    struct dj_sbuf b = {0};
    api_stream_start(st, &b);
    const struct dj_chat_delta a = {DJ_DELTA_CONTENT, 0, NULL, NULL, "A", 1}, z = {DJ_DELTA_CONTENT, 0, NULL, NULL, "Z", 1};
    json_t *lp = json_loads(Q("[{`token`: `Z`, `logprob`: -0.5, `bytes`: [90], `top_logprobs`: []}]"), 0, NULL);
    api_stream_delta(st, 1, &z, lp, &b);
    api_stream_delta(st, 0, &a, NULL, &b);
    api_stream_delta(st, 7, &a, NULL, &b); /* no such completion: ignored */
    api_stream_finish(st, 1, DJ_FINISH_LENGTH, &b);
    api_stream_delta(st, 1, &z, NULL, &b); /* after its finish: ignored */
    api_stream_finish(st, 0, DJ_FINISH_STOP, &b);
    api_stream_end(st, &u, &b);
    api_stream_end(st, &u, &b); /* twice: nothing more */
    sse_parse(b.p, b.n, &v);
    CHECK(v.n == 7 && v.e[6].done);
    if (v.n == 7) {
        CHECK(json_integer_value(json_object_get(json_array_get(json_object_get(v.e[1].data, "choices"), 0), "index")) == 1);
        JEQ(json_array_get(json_object_get(v.e[2].data, "choices"), 0),
            "{`index`: 1, `delta`: {`content`: `Z`}, `logprobs`: {`content`: [{`token`: `Z`, `logprob`: -0.5, `bytes`: [90], "
            "`top_logprobs`: []}]}, `finish_reason`: null}");
        JEQ(json_array_get(json_object_get(v.e[4].data, "choices"), 0),
            "{`index`: 1, `delta`: {}, `logprobs`: null, `finish_reason`: `length`}");
        CHECK(!strcmp(sget(json_array_get(json_object_get(v.e[5].data, "choices"), 0), "finish_reason"), "stop"));
    }
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);
    json_decref(lp);

    /* an error mid-stream: a data line with the error, nothing after it */
    st = api_stream_new(DJ_API_CHAT, "c3", "m", 5, 1, true, 3);
    api_stream_start(st, &b);
    api_stream_delta(st, 0, &a, NULL, &b);
    api_stream_error(st, "engine failed", &b);
    api_stream_finish(st, 0, DJ_FINISH_STOP, &b);
    api_stream_end(st, &u, &b);
    sse_parse(b.p, b.n, &v);
    CHECK(v.n == 3 && v.n > 0 && !strcmp(sget(v.e[v.n - 1].data, "error.message"), "engine failed"));
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);
    json_decref(xd);
}

static void test_responses_stream(void) {
    struct evs v;
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9};
    run_stream(DJ_API_RESPONSES, "resp_X", 1, false, script, N_SCRIPT, DJ_FINISH_STOP, NULL, &u, &v);
    static const char *const want[] = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"};
    const size_t nw = sizeof want / sizeof want[0];
    CHECKF(v.n == nw, "%zu events", v.n);
    char text[64] = "", reasoning[64] = "", args[64] = "";
    json_t *done_items = json_array();
    for (size_t i = 0; i < v.n && i < nw; i++) {
        json_t *d = v.e[i].data;
        CHECKF(!strcmp(v.e[i].name, want[i]), "event %zu: %s, want %s", i, v.e[i].name, want[i]);
        CHECK(d && sget(d, "type") && !strcmp(sget(d, "type"), v.e[i].name));
        CHECK(json_integer_value(json_object_get(d, "sequence_number")) == (json_int_t)i);
        if (!strcmp(v.e[i].name, "response.output_text.delta")) {
            strcat(text, sget(d, "delta"));
            CHECK(!strcmp(sget(d, "item_id"), "msg_X_1") && json_integer_value(json_object_get(d, "output_index")) == 1);
        }
        if (!strcmp(v.e[i].name, "response.reasoning_text.delta")) strcat(reasoning, sget(d, "delta"));
        if (!strcmp(v.e[i].name, "response.function_call_arguments.delta")) strcat(args, sget(d, "delta"));
        if (!strcmp(v.e[i].name, "response.output_text.done")) CHECK(!strcmp(sget(d, "text"), "Hello world"));
        if (!strcmp(v.e[i].name, "response.reasoning_text.done")) CHECK(!strcmp(sget(d, "text"), "Let me think."));
        if (!strcmp(v.e[i].name, "response.output_item.done"))
            json_array_append(done_items, json_object_get(d, "item"));
    }
    CHECK(!strcmp(text, "Hello world") && !strcmp(reasoning, "Let me think.") && !strcmp(args, "{\"city\": \"Paris\"}{}"));
    if (v.n >= 1) {
        JEQ(json_object_get(v.e[0].data, "response") ? json_object_get(json_object_get(v.e[0].data, "response"), "output")
                                                     : NULL,
            "[]");
        CHECK(!strcmp(sget(v.e[0].data, "response.status"), "in_progress"));
        json_t *fin = json_object_get(v.e[v.n - 1].data, "response");
        CHECK(!strcmp(sget(fin, "status"), "completed"));
        CHECK(json_equal(json_object_get(fin, "output"), done_items));
        /* the invariant: the streamed response's output is the non-streamed one's */
        struct dj_chat_choice c = script_choice(DJ_FINISH_STOP);
        json_t *j = api_response(DJ_API_RESPONSES, "resp_X", "m", 1700000000, &c, 1, &u);
        CHECK(json_equal(json_object_get(fin, "output"), json_object_get(j, "output")));
        CHECK(json_equal(json_object_get(fin, "usage"), json_object_get(j, "usage")));
        json_decref(j);
    }
    json_decref(done_items);
    evs_free(&v);

    /* an empty reply cut by max_output_tokens: one empty incomplete message, response.incomplete */
    run_stream(DJ_API_RESPONSES, "resp_E", 1, false, NULL, 0, DJ_FINISH_LENGTH, NULL, &u, &v);
    CHECK(v.n == 8 && v.n > 0 && !strcmp(v.e[v.n - 1].name, "response.incomplete"));
    if (v.n == 8) {
        json_t *fin = json_object_get(v.e[7].data, "response");
        CHECK(!strcmp(sget(fin, "status"), "incomplete") && !strcmp(sget(fin, "incomplete_details.reason"), "max_output_tokens"));
        JEQ(json_object_get(fin, "output"), "[{`type`: `message`, `id`: `msg_E_0`, `status`: `incomplete`, `role`: "
                                            "`assistant`, `content`: [{`type`: `output_text`, `text`: ``, `annotations`: []}]}]");
    }
    evs_free(&v);

    /* a failure after some text: response.failed with the error, sequence numbers still in order */
    struct dj_api_stream *st = api_stream_new(DJ_API_RESPONSES, "resp_F", "m", 1, 1, false, 3);
    struct dj_sbuf b = {0};
    api_stream_start(st, &b);
    api_stream_delta(st, 0, &script[2], NULL, &b);
    api_stream_error(st, "out of KV memory", &b);
    api_stream_end(st, &u, &b);
    sse_parse(b.p, b.n, &v);
    CHECK(v.n == 6 && v.n > 0 && !strcmp(v.e[v.n - 1].name, "response.failed"));
    if (v.n == 6) {
        CHECK(json_integer_value(json_object_get(v.e[5].data, "sequence_number")) == 5);
        CHECK(!strcmp(sget(v.e[5].data, "response.status"), "failed"));
        CHECK(!strcmp(sget(v.e[5].data, "response.error.message"), "out of KV memory"));
    }
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);
}

/* ---- Responses: Codex's fields, namespace tools, effort, stored conversations ------------------ */

/* Every field Codex 0.171 and the OpenAI SDK send is accepted (ignored where deja has no use for
 * it); hosted tools are dropped; a namespace tool becomes NS__NAME functions. */
static void test_responses_codex_fields(void) {
    struct dj_chat_req r;
    int status;
    const char *param;
    const char *body =
        "{`model`: `m`, `stream`: true, `input`: [{`type`: `message`, `id`: `msg_1`, `role`: `developer`, `content`: "
        "[{`type`: `input_text`, `text`: `You are a coding agent.`}]}, {`type`: `message`, `role`: `user`, `content`: "
        "[{`type`: `input_text`, `text`: `list the files`}]}],"
        "`tools`: [{`type`: `function`, `name`: `exec_command`, `description`: `Runs a command.`, `strict`: false, "
        "`parameters`: {`type`: `object`, `properties`: {`cmd`: {`type`: `string`}}, `required`: [`cmd`]}},"
        "{`type`: `namespace`, `name`: `multi_agent_v1`, `description`: `Tools for sub-agents.`, `tools`: ["
        "{`type`: `function`, `name`: `close_agent`, `description`: `Close an agent.`, `strict`: false, `parameters`: "
        "{`type`: `object`, `properties`: {`id`: {`type`: `string`}}}},"
        "{`type`: `function`, `name`: `spawn_agent`, `defer_loading`: true},"
        "{`type`: `custom`, `name`: `freeform`, `format`: {`type`: `grammar`}}]},"
        "{`type`: `namespace`, `name`: `mcp__fs_`, `description`: `x`, `tools`: [{`type`: `function`, `name`: `_read`}]},"
        "{`type`: `web_search`, `external_web_access`: false}, {`type`: `image_generation`}, {`type`: `file_search`, "
        "`vector_store_ids`: []}, {`type`: `local_shell`}, {`type`: `mcp`, `server_label`: `s`}, {`type`: `custom`, `name`: `c`}],"
        "`tool_choice`: `auto`, `parallel_tool_calls`: true, `reasoning`: {`summary`: `auto`}, `store`: false, "
        "`include`: [`reasoning.encrypted_content`], `prompt_cache_key`: `01a2206a`, `client_metadata`: {`turn_id`: `t`}, "
        "`metadata`: {`k`: `v`}, `service_tier`: `auto`, `safety_identifier`: `h`, `truncation`: `auto`, `user`: `u`, "
        "`text`: {`verbosity`: `low`}, `top_logprobs`: 2, `background`: false, `max_tool_calls`: 5, "
        "`stream_options`: {`include_obfuscation`: false}, `context_management`: [{`type`: `compaction`}], "
        "`prompt_cache_retention`: `24h`, `prompt`: null, `conversation`: null, `previous_response_id`: null}";
    CHECK(parse(DJ_API_RESPONSES, body, &r, &status, &param) == DJ_OK);
    JEQ(r.tools,
        "[{`type`: `function`, `function`: {`name`: `exec_command`, `description`: `Runs a command.`, `parameters`: "
        "{`type`: `object`, `properties`: {`cmd`: {`type`: `string`}}, `required`: [`cmd`]}, `strict`: false}},"
        "{`type`: `function`, `function`: {`name`: `multi_agent_v1__close_agent`, `description`: `Close an agent.`, "
        "`parameters`: {`type`: `object`, `properties`: {`id`: {`type`: `string`}}}, `strict`: false}},"
        "{`type`: `function`, `function`: {`name`: `multi_agent_v1__spawn_agent`, `parameters`: {`type`: `object`, "
        "`properties`: {}}}},"
        "{`type`: `function`, `function`: {`name`: `mcp__fs__read`, `parameters`: {`type`: `object`, `properties`: {}}}}]");
    JEQ(json_object_get(r.resp_meta, "namespaces"),
        "{`multi_agent_v1__close_agent`: {`namespace`: `multi_agent_v1`, `name`: `close_agent`},"
        "`multi_agent_v1__spawn_agent`: {`namespace`: `multi_agent_v1`, `name`: `spawn_agent`},"
        "`mcp__fs__read`: {`namespace`: `mcp__fs_`, `name`: `_read`}}");
    CHECK(r.stream && !r.store && r.tool_choice == DJ_TOOL_AUTO && r.parallel_tool_calls && r.template_kwargs == NULL);
    CHECK(r.previous_response_id == NULL && json_array_size(r.messages) == 2);
    json_t *echo = json_object_get(r.resp_meta, "echo");
    JEQ(json_object_get(echo, "metadata"), "{`k`: `v`}");
    JEQ(json_object_get(echo, "store"), "false");
    JEQ(json_object_get(echo, "truncation"), "`auto`");
    JEQ(json_object_get(echo, "reasoning"), "{`summary`: `auto`}");
    JEQ(json_object_get(echo, "temperature"), "0.8"); /* deja's default, as used */
    CHECK(json_array_size(json_object_get(echo, "tools")) == 9); /* as the request gave them */
    api_chat_req_free(&r);

    /* the captured Codex 0.171.0 request, when this machine has it */
    size_t n = 0;
    char *cap = test_read_file("/tmp/cap/codex1/000_req.txt", &n);
    const char *cbody = cap ? strstr(cap, "\n\n{") : NULL;
    if (cbody) {
        cbody += 2;
        memset(&r, 0, sizeof r);
        CHECKF(api_parse_chat(DJ_API_RESPONSES, "local", cbody, strlen(cbody), &r, &status, &param) == DJ_OK,
               "the captured Codex body: %s", dj_last_error());
        size_t nt = json_array_size(r.tools);
        CHECKF(nt >= 8, "%zu tools", nt);
        bool has_ns = false;
        for (size_t i = 0; i < nt; i++)
            has_ns |= !strcmp(sget(json_array_get(r.tools, i), "function.name"), "multi_agent_v1__spawn_agent");
        CHECK(has_ns && !r.store);
        api_chat_req_free(&r);
    }
    free(cap);

    const enum dj_api R = DJ_API_RESPONSES;
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `tools`: []}]}", 400, "tools[0].name");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `name`: ``, `tools`: []}]}", 400, "tools[0].name");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `name`: `n`}]}", 400, "tools[0].tools");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `name`: `n`, `tools`: [5]}]}", 400, "tools[0].tools[0]");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `name`: `n`, `tools`: [{`type`: `function`}]}]}", 400,
               "tools[0].tools[0].name");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `namespace`, `name`: `n`, `tools`: [{`type`: `function`, `name`: `f`, "
                  "`parameters`: 1}]}]}",
               400, "tools[0].tools[0].parameters");
    /* a flat function and a namespace function that flatten to the same name cannot both be shown */
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `n__f`}, {`type`: `namespace`, `name`: `n`, "
                  "`tools`: [{`type`: `function`, `name`: `f`}]}]}",
               400, "tools[1].tools[0].name");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `f`}], `tool_choice`: {`type`: `allowed_tools`, "
                  "`mode`: `never`, `tools`: []}}",
               400, "tool_choice.mode");
    EXPECT_ERR(R, "{`input`: `x`, `tools`: [{`type`: `function`, `name`: `f`}], `tool_choice`: {`type`: `function`}}", 400,
               "tool_choice.name");
    EXPECT_ERR(R, "{`input`: [{`type`: `function_call`, `call_id`: `c`, `name`: `f`, `namespace`: 5, `arguments`: `{}`}]}",
               400, "input[0]");
}

/* Namespace calls both ways: history items with a namespace render under the flat name; the
 * model's call of a flat name comes back as {name, namespace}, streamed and not. */
static void test_responses_namespaces(void) {
    struct dj_chat_req r;
    int status;
    const char *param;
    const char *tools = "`tools`: [{`type`: `namespace`, `name`: `crm`, `description`: `CRM`, `tools`: [{`type`: `function`, "
                        "`name`: `lookup`, `parameters`: {`type`: `object`, `properties`: {`q`: {`type`: `string`}}}}]}, "
                        "{`type`: `function`, `name`: `plain`}]";
    char body[2048];
    snprintf(body, sizeof body,
             "{`input`: [{`role`: `user`, `content`: `find bob`}, {`type`: `function_call`, `call_id`: `c1`, `name`: "
             "`lookup`, `namespace`: `crm`, `arguments`: `{}`}, {`type`: `function_call`, `call_id`: `c2`, `name`: "
             "`plain`, `arguments`: `{}`}, {`type`: `function_call_output`, `call_id`: `c1`, `output`: `bob`}], %s, "
             "`tool_choice`: {`type`: `function`, `name`: `lookup`, `namespace`: `crm`}}",
             tools);
    CHECK(parse(DJ_API_RESPONSES, body, &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `user`, `content`: `find bob`}, {`role`: `assistant`, `content`: null, `tool_calls`: ["
                    "{`id`: `c1`, `type`: `function`, `function`: {`name`: `crm__lookup`, `arguments`: `{}`}},"
                    "{`id`: `c2`, `type`: `function`, `function`: {`name`: `plain`, `arguments`: `{}`}}]},"
                    "{`role`: `tool`, `tool_call_id`: `c1`, `content`: `bob`}]");
    CHECK(r.tool_choice == DJ_TOOL_NAMED && r.tool_name && !strcmp(r.tool_name, "crm__lookup"));
    /* allowed_tools: its mode; the list is not enforced */
    json_t *meta = json_incref(r.resp_meta);
    api_chat_req_free(&r);
    snprintf(body, sizeof body,
             "{`input`: `x`, %s, `tool_choice`: {`type`: `allowed_tools`, `mode`: `required`, `tools`: [{`type`: "
             "`function`, `name`: `plain`}]}}",
             tools);
    CHECK(parse(DJ_API_RESPONSES, body, &r, &status, &param) == DJ_OK);
    CHECK(r.tool_choice == DJ_TOOL_REQUIRED && json_array_size(r.tools) == 2);
    api_chat_req_free(&r);

    /* the model calls crm__lookup and plain: streamed */
    const struct dj_chat_delta d[] = {
        {DJ_DELTA_CONTENT, 0, NULL, NULL, "ok", 2},
        {DJ_DELTA_TOOL_START, 0, "call_1", "crm__lookup", NULL, 0},
        {DJ_DELTA_TOOL_ARGS, 0, NULL, NULL, "{\"q\": \"bob\"}", 12},
        {DJ_DELTA_TOOL_START, 1, "call_2", "plain", NULL, 0},
        {DJ_DELTA_TOOL_ARGS, 1, NULL, NULL, "{}", 2},
    };
    struct dj_api_stream *st = api_stream_new(DJ_API_RESPONSES, "resp_N", "m", 5, 1, false, 3);
    api_stream_set_meta(st, meta);
    struct dj_sbuf b = {0};
    api_stream_start(st, &b);
    CHECK(api_stream_response(st) == NULL); /* not before the end */
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) api_stream_delta(st, 0, &d[i], NULL, &b);
    api_stream_finish(st, 0, DJ_FINISH_STOP, &b);
    struct dj_chat_usage u = {.prompt = 10, .cached = 4, .completion = 6};
    api_stream_end(st, &u, &b);
    struct evs v;
    sse_parse(b.p, b.n, &v);
    json_t *added = NULL, *done = NULL, *fin = NULL;
    for (size_t i = 0; i < v.n; i++) {
        json_t *it = json_object_get(v.e[i].data, "item");
        if (!strcmp(v.e[i].name, "response.output_item.added") && !strcmp(sget(it, "type"), "function_call") && !added)
            added = it;
        if (!strcmp(v.e[i].name, "response.output_item.done") && !strcmp(sget(it, "type"), "function_call") && !done)
            done = it;
        if (!strcmp(v.e[i].name, "response.function_call_arguments.done") && !strcmp(sget(v.e[i].data, "item_id"), "fc_N_1"))
            CHECK(!strcmp(sget(v.e[i].data, "name"), "lookup"));
        if (!strcmp(v.e[i].name, "response.completed")) fin = json_object_get(v.e[i].data, "response");
    }
    JEQ(added, "{`type`: `function_call`, `id`: `fc_N_1`, `call_id`: `call_1`, `name`: `lookup`, `namespace`: `crm`, "
               "`arguments`: ``, `status`: `in_progress`}");
    JEQ(done, "{`type`: `function_call`, `id`: `fc_N_1`, `call_id`: `call_1`, `name`: `lookup`, `namespace`: `crm`, "
              "`arguments`: `{\\`q\\`: \\`bob\\`}`, `status`: `completed`}");
    json_t *final = api_stream_response(st);
    CHECK(final && fin && json_equal(final, fin)); /* what the server stores is what the client got */
    JEQ(json_object_get(fin, "tools"), "[{`type`: `namespace`, `name`: `crm`, `description`: `CRM`, `tools`: [{`type`: "
                                       "`function`, `name`: `lookup`, `parameters`: {`type`: `object`, `properties`: "
                                       "{`q`: {`type`: `string`}}}}]}, {`type`: `function`, `name`: `plain`}]");
    /* not streamed: the same output once the meta is applied */
    static char n0[] = "crm__lookup", n1[] = "plain", a0[] = "{\"q\": \"bob\"}", a1[] = "{}";
    struct dj_chat_call calls[2] = {{"call_1", n0, a0, 12}, {"call_2", n1, a1, 2}};
    struct dj_chat_choice c = {.content = (char *)"ok", .n_content = 2, .calls = calls, .n_calls = 2};
    json_t *j = api_response(DJ_API_RESPONSES, "resp_N", "m", 5, &c, 1, &u);
    api_responses_apply_meta(j, meta);
    CHECK(fin && json_equal(json_object_get(j, "output"), json_object_get(fin, "output")));
    CHECK(json_equal(json_object_get(j, "tools"), json_object_get(fin, "tools")));
    JEQ(json_array_get(json_object_get(j, "output"), 2),
        "{`type`: `function_call`, `id`: `fc_N_2`, `call_id`: `call_2`, `name`: `plain`, `arguments`: `{}`, `status`: "
        "`completed`}");
    /* and sent back as input, those items render under the flat names again */
    json_t *next = json_pack("{s:O, s:O}", "input", json_object_get(j, "output"), "tools", json_object_get(fin, "tools"));
    char *txt = json_dumps(next, JSON_COMPACT);
    memset(&r, 0, sizeof r);
    CHECK(txt && api_parse_chat(DJ_API_RESPONSES, "m", txt, strlen(txt), &r, &status, &param) == DJ_OK);
    JEQ(r.messages, "[{`role`: `assistant`, `content`: `ok`, `tool_calls`: ["
                    "{`id`: `call_1`, `type`: `function`, `function`: {`name`: `crm__lookup`, `arguments`: `{\\`q\\`: \\`bob\\`}`}},"
                    "{`id`: `call_2`, `type`: `function`, `function`: {`name`: `plain`, `arguments`: `{}`}}]}]");
    api_chat_req_free(&r);
    free(txt);
    json_decref(next);
    json_decref(j);
    json_decref(final);
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);
    json_decref(meta);
}

/* reasoning.effort onto the template's switches. */
static void test_responses_effort(void) {
    static const struct {
        const char *effort;
        bool on;
    } cases[] = {{"none", false}, {"minimal", false}, {"low", true}, {"medium", true}, {"high", true}, {"xhigh", true}};
    struct dj_chat_req r;
    int status;
    const char *param;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256], want[160];
        snprintf(body, sizeof body, "{`input`: `x`, `reasoning`: {`effort`: `%s`, `summary`: `auto`}}", cases[i].effort);
        snprintf(want, sizeof want, "{`reasoning_effort`: `%s`, `enable_thinking`: %s, `thinking`: %s}", cases[i].effort,
                 cases[i].on ? "true" : "false", cases[i].on ? "true" : "false");
        CHECK(parse(DJ_API_RESPONSES, body, &r, &status, &param) == DJ_OK);
        JEQ(r.template_kwargs, want);
        api_chat_req_free(&r);
    }
    /* chat_template_kwargs win over the mapping */
    CHECK(parse(DJ_API_RESPONSES,
                "{`input`: `x`, `reasoning`: {`effort`: `none`}, `chat_template_kwargs`: {`enable_thinking`: true}}", &r,
                &status, &param) == DJ_OK);
    JEQ(r.template_kwargs, "{`enable_thinking`: true, `reasoning_effort`: `none`, `thinking`: false}");
    api_chat_req_free(&r);
    /* summary only (Codex's default): the template's own default */
    CHECK(parse(DJ_API_RESPONSES, "{`input`: `x`, `reasoning`: {`summary`: `auto`}}", &r, &status, &param) == DJ_OK);
    CHECK(r.template_kwargs == NULL);
    api_chat_req_free(&r);
}

/* Parses body (Q form) into r and binds it to store; returns attach's status. */
static enum dj_status parse_attach(const char *body, struct dj_response_store *store, struct dj_chat_req *r,
                                   json_t **err, unsigned *http) {
    int status;
    const char *param;
    if (parse(DJ_API_RESPONSES, body, r, &status, &param) != DJ_OK) {
        fprintf(stderr, "parse: %s\n", dj_last_error());
        *err = NULL;
        return DJ_ERR_INVALID;
    }
    enum dj_status st = api_responses_attach(r, store, err, http);
    return st;
}

/* previous_response_id: the stored conversation + its output + the new input, translated exactly
 * as the same items sent explicitly; instructions not carried over; 404 for unknown, deleted or
 * evicted ids; GET and DELETE. */
static void test_responses_previous(void) {
    struct dj_response_store *store = NULL;
    CHECK(response_store_create(2, 1 << 20, &store) == DJ_OK);
    struct dj_chat_req r1, r2, rx;
    json_t *err = NULL;
    unsigned http = 0;
    const char *ns = "`tools`: [{`type`: `namespace`, `name`: `crm`, `description`: `d`, `tools`: [{`type`: `function`, "
                     "`name`: `lookup`}]}]";
    char body[2048];
    snprintf(body, sizeof body, "{`instructions`: `Be brief.`, `input`: `find bob`, %s, `temperature`: 0}", ns);
    CHECK(parse_attach(body, store, &r1, &err, &http) == DJ_OK && err == NULL && r1.store);
    /* turn 1's output: reasoning, text, a namespace call (what the server would send and keep) */
    static char n0[] = "crm__lookup", a0[] = "{\"q\": \"bob\"}";
    struct dj_chat_call call = {"call_1", n0, a0, 12};
    struct dj_chat_choice c = {.content = (char *)"Looking.", .n_content = 8, .reasoning = (char *)"hm", .n_reasoning = 2,
                               .calls = &call, .n_calls = 1};
    struct dj_chat_usage u = {.prompt = 20, .completion = 5};
    json_t *resp1 = api_response(DJ_API_RESPONSES, "resp_one", "m", 5, &c, 1, &u);
    api_responses_apply_meta(resp1, r1.resp_meta);
    JEQ(json_object_get(resp1, "store"), "true");
    JEQ(json_object_get(resp1, "instructions"), "`Be brief.`");
    JEQ(json_object_get(resp1, "temperature"), "0.0");
    CHECK(api_responses_keep(store, r1.items, resp1) == DJ_OK);

    /* turn 2 by reference: new instructions, the call's output and a question */
    snprintf(body, sizeof body,
             "{`instructions`: `Be terse.`, `previous_response_id`: `resp_one`, `input`: [{`type`: "
             "`function_call_output`, `call_id`: `call_1`, `output`: `bob is 42`}, {`role`: `user`, `content`: `age?`}], %s}",
             ns);
    CHECK(parse_attach(body, store, &r2, &err, &http) == DJ_OK && err == NULL);
    JEQ(r2.messages, "[{`role`: `system`, `content`: `Be terse.`}, {`role`: `user`, `content`: `find bob`},"
                     "{`role`: `assistant`, `content`: `Looking.`, `reasoning_content`: `hm`, `tool_calls`: [{`id`: `call_1`, "
                     "`type`: `function`, `function`: {`name`: `crm__lookup`, `arguments`: `{\\`q\\`: \\`bob\\`}`}}]},"
                     "{`role`: `tool`, `tool_call_id`: `call_1`, `content`: `bob is 42`}, {`role`: `user`, `content`: `age?`}]");
    /* the same conversation sent explicitly translates identically */
    json_t *explicit_in = json_deep_copy(r1.items);
    json_array_extend(explicit_in, json_object_get(resp1, "output"));
    json_t *own = json_loads(Q("[{`type`: `function_call_output`, `call_id`: `call_1`, `output`: `bob is 42`}, "
                               "{`role`: `user`, `content`: `age?`}]"),
                             0, NULL);
    json_array_extend(explicit_in, own);
    json_t *xb = json_pack("{s:s, s:o}", "instructions", "Be terse.", "input", explicit_in);
    char *xt = json_dumps(xb, JSON_COMPACT);
    int status;
    const char *param;
    memset(&rx, 0, sizeof rx);
    CHECK(api_parse_chat(DJ_API_RESPONSES, "m", xt, strlen(xt), &rx, &status, &param) == DJ_OK);
    CHECK(json_equal(rx.messages, r2.messages));
    CHECK(json_equal(rx.items, r2.items)); /* what turn 2 will store: the whole conversation's items */
    free(xt);
    json_decref(xb);
    json_decref(own);
    api_chat_req_free(&rx);
    JEQ(json_object_get(json_object_get(r2.resp_meta, "echo"), "previous_response_id"), "`resp_one`");

    /* a chain: turn 2's response stored, turn 3 continues it with no instructions (none carried) */
    struct dj_chat_choice c2 = {.content = (char *)"42.", .n_content = 3};
    json_t *resp2 = api_response(DJ_API_RESPONSES, "resp_two", "m", 6, &c2, 1, &u);
    api_responses_apply_meta(resp2, r2.resp_meta);
    CHECK(api_responses_keep(store, r2.items, resp2) == DJ_OK);
    struct dj_chat_req r3;
    CHECK(parse_attach("{`previous_response_id`: `resp_two`, `input`: `thanks`}", store, &r3, &err, &http) == DJ_OK);
    CHECK(json_array_size(r3.messages) == 6);
    JEQ(json_array_get(r3.messages, 0), "{`role`: `user`, `content`: `find bob`}");
    JEQ(json_array_get(r3.messages, 4), "{`role`: `assistant`, `content`: `42.`}");
    JEQ(json_array_get(r3.messages, 5), "{`role`: `user`, `content`: `thanks`}");
    api_chat_req_free(&r3);
    /* no new input: the stored conversation alone */
    CHECK(parse_attach("{`previous_response_id`: `resp_two`}", store, &r3, &err, &http) == DJ_OK);
    CHECK(json_array_size(r3.messages) == 5);
    api_chat_req_free(&r3);

    /* GET returns the stored object; a failed response is not kept */
    json_t *got = api_responses_get(store, "resp_one", &err);
    CHECK(got && json_equal(got, resp1) && err == NULL);
    json_decref(got);
    json_t *failed = json_pack("{s:s, s:s, s:[]}", "id", "resp_bad", "status", "failed", "output");
    CHECK(api_responses_keep(store, r1.items, failed) == DJ_OK);
    CHECK(api_responses_get(store, "resp_bad", &err) == NULL && err);
    json_decref(err);
    json_decref(failed);

    /* 404: unknown id, in OpenAI's shape */
    CHECK(parse_attach("{`previous_response_id`: `resp_nope`, `input`: `x`}", store, &rx, &err, &http) == DJ_ERR_NOT_FOUND);
    CHECK(http == 404);
    JEQ(err, "{`error`: {`message`: `Previous response with id 'resp_nope' not found.`, `type`: `invalid_request_error`, "
             "`param`: `previous_response_id`, `code`: `previous_response_not_found`}}");
    json_decref(err);
    api_chat_req_free(&rx);
    /* evicted (the store holds 2): a third response pushes resp_one out */
    json_t *resp3 = api_response(DJ_API_RESPONSES, "resp_three", "m", 7, &c2, 1, &u);
    CHECK(api_responses_keep(store, r2.items, resp3) == DJ_OK);
    CHECK(parse_attach("{`previous_response_id`: `resp_one`, `input`: `x`}", store, &rx, &err, &http) == DJ_ERR_NOT_FOUND &&
          http == 404 && err);
    json_decref(err);
    api_chat_req_free(&rx);
    /* DELETE, then GET and previous_response_id find nothing */
    json_t *del = api_responses_delete(store, "resp_two", &err);
    JEQ(del, "{`id`: `resp_two`, `object`: `response`, `deleted`: true}");
    json_decref(del);
    CHECK(api_responses_delete(store, "resp_two", &err) == NULL && err);
    json_decref(err);
    CHECK(api_responses_get(store, "resp_two", &err) == NULL);
    JEQ(err, "{`error`: {`message`: `Response with id 'resp_two' not found.`, `type`: `invalid_request_error`, `param`: "
             "null, `code`: null}}");
    json_decref(err);
    CHECK(parse_attach("{`previous_response_id`: `resp_two`, `input`: `x`}", store, &rx, &err, &http) == DJ_ERR_NOT_FOUND);
    json_decref(err);
    api_chat_req_free(&rx);

    /* storing off (no store): store false in the echo, every previous id unknown */
    CHECK(parse_attach("{`input`: `x`, `store`: true}", NULL, &rx, &err, &http) == DJ_OK && !rx.store);
    JEQ(json_object_get(json_object_get(rx.resp_meta, "echo"), "store"), "false");
    api_chat_req_free(&rx);
    CHECK(parse_attach("{`previous_response_id`: `resp_three`, `input`: `x`}", NULL, &rx, &err, &http) == DJ_ERR_NOT_FOUND &&
          http == 404 && err);
    json_decref(err);
    api_chat_req_free(&rx);
    CHECK(api_responses_get(NULL, "resp_three", &err) == NULL && err);
    json_decref(err);
    /* other dialects: a no-op */
    memset(&rx, 0, sizeof rx);
    rx.api = DJ_API_CHAT;
    CHECK(api_responses_attach(&rx, store, &err, &http) == DJ_OK && err == NULL);

    json_decref(resp1);
    json_decref(resp2);
    json_decref(resp3);
    api_chat_req_free(&r1);
    api_chat_req_free(&r2);
    response_store_destroy(store);
}

static void test_messages_stream(void) {
    struct evs v;
    struct dj_chat_usage u = {.prompt = 30, .cached = 12, .completion = 9};
    run_stream(DJ_API_MESSAGES, "msg_S", 1, false, script, N_SCRIPT, DJ_FINISH_STOP, NULL, &u, &v);
    static const char *const want[] = {
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"};
    const size_t nw = sizeof want / sizeof want[0];
    CHECKF(v.n == nw, "%zu events", v.n);
    /* rebuild the content blocks as the SDK's MessageStream does */
    json_t *blocks = json_array();
    char partial[4][64] = {"", "", "", ""};
    int open = -1;
    for (size_t i = 0; i < v.n && i < nw; i++) {
        json_t *d = v.e[i].data;
        CHECKF(!strcmp(v.e[i].name, want[i]), "event %zu: %s, want %s", i, v.e[i].name, want[i]);
        CHECK(d && sget(d, "type") && !strcmp(sget(d, "type"), v.e[i].name));
        const json_int_t index = json_integer_value(json_object_get(d, "index"));
        if (!strcmp(v.e[i].name, "content_block_start")) {
            CHECK(open == -1 && index == (json_int_t)json_array_size(blocks));
            open = (int)index;
            json_array_append_new(blocks, json_deep_copy(json_object_get(d, "content_block")));
        } else if (!strcmp(v.e[i].name, "content_block_delta")) {
            CHECK(open >= 0 && index == open);
            json_t *b = json_array_get(blocks, (size_t)index), *delta = json_object_get(d, "delta");
            const char *dt = sget(delta, "type");
            if (!b || !dt) continue;
            if (!strcmp(dt, "text_delta") || !strcmp(dt, "thinking_delta")) {
                const char *key = !strcmp(dt, "text_delta") ? "text" : "thinking";
                CHECK(!strcmp(sget(b, "type"), key));
                char buf[128];
                snprintf(buf, sizeof buf, "%s%s", sget(b, key), sget(delta, key));
                json_object_set_new(b, key, json_string(buf));
            } else {
                CHECK(!strcmp(dt, "input_json_delta") && !strcmp(sget(b, "type"), "tool_use") && index < 4);
                if (index < 4) strcat(partial[index], sget(delta, "partial_json"));
            }
        } else if (!strcmp(v.e[i].name, "content_block_stop")) {
            CHECK(open == index);
            json_t *b = json_array_get(blocks, (size_t)index);
            if (b && !strcmp(sget(b, "type"), "tool_use") && index < 4)
                json_object_set_new(b, "input", json_loads(partial[index], 0, NULL));
            open = -1;
        }
    }
    CHECK(open == -1);
    if (v.n == nw) {
        JEQ(json_object_get(v.e[0].data, "message"),
            "{`id`: `msg_S`, `type`: `message`, `role`: `assistant`, `model`: `m`, `content`: [], `stop_reason`: null, "
            "`stop_sequence`: null, `usage`: {`input_tokens`: 30, `cache_creation_input_tokens`: 0, "
            "`cache_read_input_tokens`: 0, `output_tokens`: 0}}");
        JEQ(v.e[18].data, "{`type`: `message_delta`, `delta`: {`stop_reason`: `tool_use`, `stop_sequence`: null}, `usage`: "
                          "{`input_tokens`: 18, `cache_creation_input_tokens`: 0, `cache_read_input_tokens`: 12, "
                          "`output_tokens`: 9}}");
        JEQ(v.e[19].data, "{`type`: `message_stop`}");
        /* the invariant: the streamed blocks are the non-streamed message's content */
        struct dj_chat_choice c = script_choice(DJ_FINISH_STOP);
        json_t *j = api_response(DJ_API_MESSAGES, "msg_S", "m", 1, &c, 1, &u);
        JEQ(blocks, "[{`type`: `thinking`, `thinking`: `Let me think.`, `signature`: ``}, {`type`: `text`, `text`: "
                    "`Hello world`}, {`type`: `tool_use`, `id`: `toolu_abc`, `name`: `get_weather`, `input`: {`city`: "
                    "`Paris`}}, {`type`: `tool_use`, `id`: `toolu_def`, `name`: `get_time`, `input`: {}}]");
        CHECK(json_equal(blocks, json_object_get(j, "content")));
        json_decref(j);
    }
    json_decref(blocks);
    evs_free(&v);

    /* a stop sequence: stop_reason stop_sequence; an empty reply is one empty text block */
    run_stream(DJ_API_MESSAGES, "msg_T", 1, false, &script[2], 1, DJ_FINISH_STOP, "</answer>", &u, &v);
    CHECK(v.n == 7);
    if (v.n == 7) CHECK(!strcmp(sget(v.e[5].data, "delta.stop_reason"), "stop_sequence") &&
                        !strcmp(sget(v.e[5].data, "delta.stop_sequence"), "</answer>"));
    evs_free(&v);
    run_stream(DJ_API_MESSAGES, "msg_U", 1, false, NULL, 0, DJ_FINISH_LENGTH, NULL, &u, &v);
    CHECK(v.n == 6);
    if (v.n == 6) {
        JEQ(v.e[2].data, "{`type`: `content_block_start`, `index`: 0, `content_block`: {`type`: `text`, `text`: ``}}");
        JEQ(v.e[3].data, "{`type`: `content_block_stop`, `index`: 0}");
        CHECK(!strcmp(sget(v.e[4].data, "delta.stop_reason"), "max_tokens"));
    }
    evs_free(&v);

    /* a block ends when the kind changes: text, thinking, text again are three blocks; args of a
     * call after its block closed are dropped, never put in another block */
    const struct dj_chat_delta mix[] = {
        {DJ_DELTA_CONTENT, 0, NULL, NULL, "a", 1},       {DJ_DELTA_REASONING, 0, NULL, NULL, "b", 1},
        {DJ_DELTA_CONTENT, 0, NULL, NULL, "c", 1},       {DJ_DELTA_TOOL_START, 0, "call_1", "f", NULL, 0},
        {DJ_DELTA_CONTENT, 0, NULL, NULL, "", 0},        {DJ_DELTA_TOOL_ARGS, 0, NULL, NULL, "{}", 2},
        {DJ_DELTA_TOOL_ARGS, 3, NULL, NULL, "{}", 2},    {DJ_DELTA_CONTENT, 0, NULL, NULL, "\xff", 1}};
    run_stream(DJ_API_MESSAGES, "msg_V", 1, false, mix, sizeof mix / sizeof mix[0], DJ_FINISH_STOP, NULL, &u, &v);
    size_t starts = 0, stops = 0, deltas = 0;
    for (size_t i = 0; i < v.n; i++) {
        starts += !strcmp(v.e[i].name, "content_block_start");
        stops += !strcmp(v.e[i].name, "content_block_stop");
        deltas += !strcmp(v.e[i].name, "content_block_delta");
        if (!strcmp(v.e[i].name, "content_block_delta") && json_integer_value(json_object_get(v.e[i].data, "index")) == 4)
            CHECK(!strcmp(sget(v.e[i].data, "delta.text"), "\xEF\xBF\xBD")); /* invalid UTF-8 → U+FFFD */
    }
    CHECK(starts == 5 && stops == 5 && deltas == 5);
    evs_free(&v);

    /* display omitted: the thinking block streams no thinking_delta, one signature_delta before its
     * stop carries the whole reasoning (the same signature as the non-streamed message) */
    struct dj_api_stream *st = api_stream_new(DJ_API_MESSAGES, "msg_O", "m", 1, 1, false, 3);
    struct dj_sbuf b = {0};
    api_stream_set_reasoning_omitted(st, true);
    api_stream_start(st, &b);
    const struct dj_chat_delta th[] = {{DJ_DELTA_REASONING, 0, NULL, NULL, "Let me ", 7},
                                       {DJ_DELTA_REASONING, 0, NULL, NULL, "think.", 6},
                                       {DJ_DELTA_CONTENT, 0, NULL, NULL, "ok", 2}};
    for (size_t i = 0; i < 3; i++) api_stream_delta(st, 0, &th[i], NULL, &b);
    api_stream_finish(st, 0, DJ_FINISH_STOP, &b);
    api_stream_end(st, &u, &b);
    sse_parse(b.p, b.n, &v);
    CHECKF(v.n == 10, "%zu events", v.n);
    if (v.n == 10) {
        JEQ(v.e[2].data, "{`type`: `content_block_start`, `index`: 0, `content_block`: {`type`: `thinking`, `thinking`: ``, "
                         "`signature`: ``}}");
        JEQ(v.e[3].data, "{`type`: `content_block_delta`, `index`: 0, `delta`: {`type`: `signature_delta`, `signature`: "
                         "`deja1.TGV0IG1lIHRoaW5rLg==`}}");
        JEQ(v.e[4].data, "{`type`: `content_block_stop`, `index`: 0}");
        CHECK(!strcmp(sget(v.e[6].data, "delta.text"), "ok"));
    }
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);

    /* an error: event: error in Anthropic's shape */
    st = api_stream_new(DJ_API_MESSAGES, "msg_W", "m", 1, 1, false, 3);
    api_stream_start(st, &b);
    api_stream_error(st, "overloaded", &b);
    sse_parse(b.p, b.n, &v);
    CHECK(v.n == 3 && v.n > 0 && !strcmp(v.e[v.n - 1].name, "error"));
    if (v.n == 3) JEQ(v.e[2].data, "{`type`: `error`, `error`: {`type`: `api_error`, `message`: `overloaded`}}");
    evs_free(&v);
    sbuf_free(&b);
    api_stream_free(st);
}

/* ---- small pieces ------------------------------------------------------------------------------- */

static void test_misc(void) {
    char id[64];
    api_make_id(DJ_API_CHAT, 7, id, sizeof id);
    CHECK(!strncmp(id, "chatcmpl-", 9) && strlen(id) == 9 + 24);
    char id2[64];
    api_make_id(DJ_API_CHAT, 7, id2, sizeof id2);
    CHECK(!strcmp(id, id2));
    api_make_id(DJ_API_CHAT, 8, id2, sizeof id2);
    CHECK(strcmp(id, id2) != 0);
    api_make_id(DJ_API_RESPONSES, 7, id, sizeof id);
    CHECK(!strncmp(id, "resp_", 5) && strlen(id) == 5 + 24);
    api_make_id(DJ_API_MESSAGES, 7, id, sizeof id);
    CHECK(!strncmp(id, "msg_", 4) && strlen(id) == 4 + 24);

    struct dj_sbuf b = {0};
    CHECK(sbuf_append(&b, "ab", 2) && sbuf_append(&b, "", 0) && sbuf_append(&b, "cd", 2));
    CHECK(b.n == 4 && !strcmp(b.p, "abcd") && !b.oom);
    for (int i = 0; i < 1000; i++) sbuf_append(&b, "0123456789", 10);
    CHECK(b.n == 10004 && b.p[b.n] == 0);
    sbuf_free(&b);
    sbuf_free(&b);
    CHECK(b.p == NULL && b.n == 0);

    api_stream_free(NULL);
    api_chat_req_free(NULL);
    CHECK(api_stream_new((enum dj_api)9, "x", "m", 0, 1, false, 0) == NULL);

    /* the shared sampling parser with Anthropic's names */
    json_t *req = json_loads(Q("{`max_tokens`: 9, `stop_sequences`: [`a`, `b`], `n`: 3, `top_k`: 2}"), 0, NULL);
    struct dj_sampling_req s;
    int status = 0;
    const char *param = NULL;
    const struct dj_sampling_keys k = {{"max_tokens", NULL}, "stop_sequences", false, false};
    CHECK(server_parse_sampling(req, &k, &s, &status, &param) == DJ_OK);
    CHECK(s.max_tokens == 9 && s.n_stop == 2 && s.n == 1 && s.sp.top_k == 2);
    json_decref(req);
    req = json_loads(Q("{`stop_sequences`: 5}"), 0, NULL);
    CHECK(server_parse_sampling(req, &k, &s, &status, &param) != DJ_OK && status == 400 && !strcmp(param, "stop_sequences"));
    json_decref(req);

    struct dj_chat_req r;
    /* big bodies stay linear: 50k tools (names checked through a hash set), 50k reasoning items in
     * a row (one accumulated text), 50k parallel calls merged into one message (a quadratic pass: tens of seconds) */
    {
        const size_t N = 50000;
        struct dj_sbuf big = {0};
        sbuf_append(&big, "{`input`: `x`, `tools`: [", 25);
        char item[160];
        for (size_t i = 0; i < N; i++) {
            int len = snprintf(item, sizeof item, "%s{`type`: `function`, `name`: `t%zu`}", i ? ", " : "", i);
            sbuf_append(&big, item, (size_t)len);
        }
        sbuf_append(&big, ", {`type`: `function`, `name`: `t5`}]}", 38);
        for (size_t i = 0; i < big.n; i++)
            if (big.p[i] == '`') big.p[i] = '"';
        CHECK(api_parse_chat(DJ_API_RESPONSES, "m", big.p, big.n, &r, &status, &param) != DJ_OK && status == 400 &&
              param && !strcmp(param, "tools[50000].name"));
        big.n = 0;
        sbuf_append(&big, "{`input`: [", 11);
        for (size_t i = 0; i < N; i++) {
            int len = snprintf(item, sizeof item, "{`type`: `reasoning`, `summary`: [{`type`: `summary_text`, `text`: `r`}]}, ");
            sbuf_append(&big, item, (size_t)len);
        }
        for (size_t i = 0; i < N; i++) {
            int len = snprintf(item, sizeof item, "{`type`: `function_call`, `call_id`: `c%zu`, `name`: `f`, `arguments`: `{}`}, ", i);
            sbuf_append(&big, item, (size_t)len);
        }
        sbuf_append(&big, "{`role`: `user`, `content`: `go`}]}", 35);
        for (size_t i = 0; i < big.n; i++)
            if (big.p[i] == '`') big.p[i] = '"';
        CHECK(api_parse_chat(DJ_API_RESPONSES, "m", big.p, big.n, &r, &status, &param) == DJ_OK);
        json_t *m0 = json_array_get(r.messages, 0);
        CHECK(json_array_size(r.messages) == 2 && json_array_size(json_object_get(m0, "tool_calls")) == N);
        CHECK(json_string_length(json_object_get(m0, "reasoning_content")) == N * 3 - 2); /* "r" joined by blank lines */
        api_chat_req_free(&r);
        sbuf_free(&big);
    }

    /* an unknown dialect is refused, never crashes */
    CHECK(api_parse_chat((enum dj_api)42, "m", "{}", 2, &r, &status, &param) != DJ_OK);
}

/* A body {"messages": [user "x"], "logit_bias": {"0": -1, ..., "<n-1>": -1}} (malloc'd). */
static char *bias_body(size_t n) {
    char *b = malloc(n * 16 + 128), *p = b;
    p += sprintf(p, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logit_bias\": {");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "%s\"%zu\": -1", i ? ", " : "", i);
    sprintf(p, "}}");
    return b;
}

/* logit_bias at scale: up to DJ_LOGIT_BIAS_MAX entries are read (linear: 100,000 take milliseconds),
 * more are refused; ids past the model's vocabulary are a 400 naming logit_bias (it was the
 * engine's message with param null, found only when the request was submitted). */
static void test_logit_bias_scale(void) {
    struct dj_chat_req r;
    int status = 0;
    const char *param = NULL;
    char *b = bias_body(100000);
    CHECK(api_parse_chat(DJ_API_CHAT, "m", b, strlen(b), &r, &status, &param) == DJ_OK);
    CHECK(r.n_bias == 100000 && r.sp.n_logit_bias == 100000 && r.bias[99999].tok == 99999);
    /* a vocabulary of 151,936 (Qwen) takes them all; one of 512 (stories260K) does not */
    status = 0, param = NULL;
    CHECK(api_chat_check_vocab(&r, 151936, &status, &param) == DJ_OK && !param);
    CHECK(api_chat_check_vocab(&r, 512, &status, &param) == DJ_ERR_INVALID);
    CHECK(status == 400 && param && !strcmp(param, "logit_bias"));
    CHECKF(!strcmp(dj_last_error(), "logit_bias: token 512 is outside the vocabulary (512 tokens, ids 0..511)"), "%s",
           dj_last_error());
    api_chat_req_free(&r);
    free(b);
    /* the array form, and a request without logit_bias */
    const char *arr = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logit_bias\": [[3, false], [9, 1]]}";
    CHECK(api_parse_chat(DJ_API_CHAT, "m", arr, strlen(arr), &r, &status, &param) == DJ_OK);
    param = NULL;
    CHECK(api_chat_check_vocab(&r, 10, &status, &param) == DJ_OK && !param);
    CHECK(api_chat_check_vocab(&r, 9, &status, &param) == DJ_ERR_INVALID && param && !strcmp(param, "logit_bias"));
    CHECKF(!strcmp(dj_last_error(), "logit_bias: token 9 is outside the vocabulary (9 tokens, ids 0..8)"), "%s",
           dj_last_error());
    api_chat_req_free(&r);
    const char *none = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    CHECK(api_parse_chat(DJ_API_CHAT, "m", none, strlen(none), &r, &status, &param) == DJ_OK);
    CHECK(api_chat_check_vocab(&r, 1, &status, &param) == DJ_OK);
    api_chat_req_free(&r);
    /* past the cap: refused while parsing, before a sampler copy is made */
    b = bias_body(DJ_LOGIT_BIAS_MAX + 1);
    status = 0, param = NULL;
    CHECK(api_parse_chat(DJ_API_CHAT, "m", b, strlen(b), &r, &status, &param) == DJ_ERR_INVALID);
    CHECK(status == 400 && param && !strcmp(param, "logit_bias"));
    CHECKF(!strcmp(dj_last_error(), "logit_bias has 262145 entries, over the limit of 262144 (no vocabulary has more "
                                    "tokens)"),
           "%s", dj_last_error());
    free(b);
}

/* A message wrapped in a prefix, with dj_last_error() itself as the argument (the server wraps the
 * converter's and the template's messages so): the whole message survives. */
static void test_error_wrapping(void) {
    dj_fail(DJ_ERR_INVALID, "json schema: 'not' is not supported at /properties/x");
    CHECK(dj_fail(DJ_ERR_INVALID, "tools: %s", dj_last_error()) == DJ_ERR_INVALID);
    CHECK(!strcmp(dj_last_error(), "tools: json schema: 'not' is not supported at /properties/x"));
    dj_fail(DJ_ERR_INVALID, "%s", dj_last_error());
    CHECK(!strcmp(dj_last_error(), "tools: json schema: 'not' is not supported at /properties/x"));
    /* nested prefixes, each around the message before it */
    dj_fail(DJ_ERR_INVALID, "json schema: pattern: missing ')' (at character 4) at /pattern");
    dj_fail(DJ_ERR_INVALID, "tools: f: %s", dj_last_error());
    dj_fail(DJ_ERR_INVALID, "response_format: %s", dj_last_error());
    CHECKF(!strcmp(dj_last_error(), "response_format: tools: f: json schema: pattern: missing ')' (at character 4) at "
                                    "/pattern"),
           "%s", dj_last_error());
    /* a message as long as the buffer (1023 characters and the NUL): the wrapped one is the prefix
     * and the first 1023 - 17 characters of it, every byte where it belongs */
    char lng[1200], want[1100];
    for (size_t i = 0; i < sizeof lng - 1; i++) lng[i] = (char)('a' + i % 26);
    lng[sizeof lng - 1] = 0;
    dj_fail(DJ_ERR_INVALID, "%s", lng);
    CHECK(strlen(dj_last_error()) == 1023 && !strncmp(dj_last_error(), lng, 1023));
    dj_fail(DJ_ERR_INVALID, "response_format: %s", dj_last_error());
    memcpy(want, "response_format: ", 17);
    memcpy(want + 17, lng, 1023 - 17);
    want[1023] = 0;
    CHECKF(!strcmp(dj_last_error(), want), "%.80s... (%zu bytes)", dj_last_error(), strlen(dj_last_error()));
    /* dj_error_prefix keeps 600 characters of the message under a prefix of at most 400 */
    dj_fail(DJ_ERR_INVALID, "%s", lng);
    dj_error_prefix("tools: %s", "f");
    memcpy(want, "tools: f: ", 10);
    memcpy(want + 10, lng, 600);
    want[610] = 0;
    CHECKF(!strcmp(dj_last_error(), want), "%.80s... (%zu bytes)", dj_last_error(), strlen(dj_last_error()));
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_error_wrapping();
    test_logit_bias_scale();
    test_chat_request();
    test_chat_errors();
    test_responses_request();
    test_messages_request();
    test_error_json();
    test_chat_response();
    test_responses_response();
    test_messages_response();
    test_chat_stream();
    test_responses_stream();
    test_responses_codex_fields();
    test_responses_namespaces();
    test_responses_effort();
    test_responses_previous();
    test_messages_stream();
    test_misc();
    for (size_t i = 0; i < n_allocs; i++) free(allocs[i]);
    TEST_END();
}
