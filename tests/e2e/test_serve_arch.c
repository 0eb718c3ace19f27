/*
 * test_serve_arch.c — glm4moe, mistral3, gpt-oss and qwen35moe through `deja serve`: a `deja synth
 * --preset tiny` model of each family, started with a chat template of the family
 * (--chat-template-file), and
 *  - the server's start-up line names the tool-call format it detected in the
 *    template: glm (<arg_key> markers) for GLM's, mistral ([TOOL_CALLS]) for Mistral's;
 *  - POST /apply-template with a system + user message and one tool renders the
 *    template's markers, the messages and the tool;
 *  - POST /v1/chat/completions with the tool (greedy, 8 tokens) answers 200 with an
 *    assistant message and 8 completion tokens (or a tool call), streamed the same.
 * Templates: Mistral-Small-3.2-24B-Instruct-2506 and Ministral-3-14B-Reasoning-2512
 * from ../shared/golden/chat_templates; GLM-4.5's is not there, so a short one written
 * here with GLM-4.5's roles ([gMASK]<sop>, <|system|>, <|user|>, <|assistant|>) and
 * tool-call markers (<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>).
 * Random weights: the text itself is not checked, only that the server serves it.
 */
#include "test_serve.h"

static const char glm_template[] =
    "[gMASK]<sop>{%- if tools -%}<|system|>\n# Tools\n{% for t in tools %}{{ t.function | tojson }}\n{% endfor %}"
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value></tool_call>"
    "{%- endif -%}{%- for m in messages -%}{%- if m.role == 'system' -%}<|system|>\n{{ m.content }}"
    "{%- elif m.role == 'user' -%}<|user|>\n{{ m.content }}{%- elif m.role == 'assistant' -%}<|assistant|>\n"
    "{{ m.content }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>\n{%- endif -%}";

static const char req_body[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a coding agent.\"}, {\"role\": \"user\", "
    "\"content\": \"List the files here.\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
    "\"list_files\", \"description\": \"List a directory\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"]}}}], \"max_tokens\": 8, \"temperature\": 0%s}";

/* srv_start, keeping the start-up lines (the chat template's) in `log`. */
static bool start_logged(struct srv *s, const char *model, const char *tmpl, char *log, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    char *argv[] = {(char *)deja_bin, "serve", "-m", (char *)model, "--port", "0", "--kv-budget", "64",
                    "--chat-template-file", (char *)tmpl, NULL};
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    s->err_fd = fd[0];
    size_t n = 0;
    const char *p = NULL;
    log[0] = 0;
    for (int lines = 0; lines < 32 && !p; lines++) {
        const size_t k0 = n;
        while (n + 1 < cap && read(fd[0], log + n, 1) == 1 && log[n] != '\n') n++;
        if (n == k0) break;
        if (n + 1 < cap) n++; /* keep the newline */
        log[n] = 0;
        p = strstr(log + k0, "ready on http://127.0.0.1:");
        if (p) p += strlen("ready on http://127.0.0.1:");
    }
    s->port = p ? (unsigned)atoi(p) : 0;
    CHECKF(s->port > 0, "server did not start:\n%s", log);
    return s->port > 0;
}

static void check_family(const char *shared, const char *arch, const char *tmpl, const char *syntax,
                         const char *marker) {
    char model[] = "/tmp/deja_test_serve_arch_XXXXXX.gguf";
    const int fd = mkstemps(model, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    char *out = NULL;
    int rc = RUN(&out, "synth", "--arch", (char *)arch, "--preset", "tiny", "--vocab-from",
                 (char *)test_shared_path(shared, "models/codelm-15m-f16.gguf"), "-o", model, "-t", "2");
    CHECKF(rc == 0, "synth %s: %s", arch, out);
    free(out);
    struct srv s;
    char log[8192];
    if (rc || !start_logged(&s, model, tmpl, log, sizeof log)) {
        unlink(model);
        return;
    }
    char want[64];
    snprintf(want, sizeof want, "(tool calls: %s", syntax);
    CHECKF(strstr(log, want) != NULL, "%s: no '%s' in the start-up lines:\n%s", arch, want, log);
    char body[2048];
    snprintf(body, sizeof body, req_body, "");
    CHECK(http(s.port, "POST", "/apply-template", body, NULL, &out) == 200);
    json_t *j = body_json(out);
    const char *prompt = json_string_value(json_object_get(j, "prompt"));
    CHECKF(prompt && strstr(prompt, marker) && strstr(prompt, "List the files here.") && strstr(prompt, "list_files"),
           "%s: rendered prompt: %s", arch, out);
    json_decref(j);
    free(out);
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, req_body, stream ? ", \"stream\": true" : "");
        rc = http(s.port, "POST", "/v1/chat/completions", body, NULL, &out);
        CHECKF(rc == 200, "%s chat (stream %d): %d %s", arch, stream, rc, out);
        if (!stream) {
            j = body_json(out);
            json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
            const long long n_tok =
                json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
            CHECKF(json_is_object(msg) && !strcmp(json_string_value(json_object_get(msg, "role")), "assistant") &&
                   n_tok > 0 && n_tok <= 8, "%s chat: %s", arch, out);
            printf("%s (%s template): %lld completion tokens, finish %s\n", arch, syntax, n_tok,
                   json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                     "finish_reason")));
            json_decref(j);
        } else {
            CHECKF(strstr(out, "data: [DONE]") != NULL, "%s stream: %s", arch, out);
        }
        free(out);
    }
    CHECK(srv_stop(&s) == 0);
    unlink(model);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    signal(SIGPIPE, SIG_IGN);
    char glm[] = "/tmp/deja_test_serve_glm_XXXXXX.jinja";
    const int fd = mkstemps(glm, 6);
    CHECK(fd >= 0 && write(fd, glm_template, sizeof glm_template - 1) == (ssize_t)(sizeof glm_template - 1));
    if (fd >= 0) close(fd);
    check_family(argv[1], "glm4moe", glm, "glm", "<|user|>\nList the files here.");
    unlink(glm);
    char t1[1024], t2[1024];
    snprintf(t1, sizeof t1, "%s",
             test_shared_path(argv[1], "golden/chat_templates/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja"));
    snprintf(t2, sizeof t2, "%s",
             test_shared_path(argv[1], "golden/chat_templates/templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja"));
    check_family(argv[1], "mistral3", t1, "mistral", "[INST]List the files here.[/INST]");
    check_family(argv[1], "mistral3", t2, "mistral", "[INST]List the files here.[/INST]");
    /* gpt-oss: its own template (harmony; the tool-call grammar on harmony's markers is
     * test_serve_tools's, this is the architecture behind the server) */
    snprintf(t1, sizeof t1, "%s", test_shared_path(argv[1], "golden/chat_templates/templates/openai-gpt-oss-120b.jinja"));
    check_family(argv[1], "gpt-oss", t1, "gpt-oss", "<|start|>user<|message|>List the files here.");
    /* a Qwen3.5 hybrid (Gated DeltaNet + gated attention, shared-expert MoE) with Qwen3.5's
     * template (qwen3-coder XML tool calls) */
    snprintf(t1, sizeof t1, "%s", test_shared_path(argv[1], "golden/chat_templates/templates/Qwen3.5-4B.jinja"));
    check_family(argv[1], "qwen35moe", t1, "qwen3-coder", "<|im_start|>user\nList the files here.");
    TEST_END();
}
