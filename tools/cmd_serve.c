/*
 * cmd_serve.c — `deja serve`: the HTTP server (src/server/server.h).
 * Runs until SIGINT or SIGTERM, then stops accepting, cancels what is in
 * flight (streams end within --shutdown-ms) and exits 0.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "spec/spec.h"
#include "core/status.h"
#include "model/model.h"
#include "opt/opt.h"
#include "server/server.h"

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: deja serve -m MODEL [options]\n"
            "  -m, --model F       GGUF model\n"
            "  --host H            IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port P            TCP port (default 8080; 0: any free port, printed at start)\n"
            "  -t, --threads N     threads for the forward pass (default 1)\n"
            "  -c, --ctx-size N    context per sequence (default: the model's training context)\n"
            "  -n, --n-predict N   tokens generated when a request sets no max_tokens (default: up to the context)\n"
            "  --parallel N        requests generating at once (default: as many as the KV budget holds)\n"
            "  --kv-budget MIB     KV cache memory (default: half the available memory)\n"
            CLI_KV_TYPE_HELP
            CLI_DEVICE_HELP
            CLI_OVERFLOW_HELP
            CLI_KV_DIR_USAGE
            CLI_SPEC_HELP
            "                      (serve: --spec is the default; --no-spec turns it off)\n"
            "  --api-key KEY       require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (all endpoints but\n"
            "                      /health, / and /api/hello; checked on the headers, before any body is read)\n"
            "  --alias NAME        the model id reported by /v1/models (default: the file name)\n"
            "  --body-max BYTES    request body limit (default 8 MiB; larger: HTTP 413)\n"
            "  --timeout S         keep-alive idle and stalled-write timeout in seconds (default 600)\n"
            "  --header-timeout S  a request's headers must arrive within S s of its first byte (default 10)\n"
            "  --body-timeout S    and its body within S s of the headers (default 60); neither moves as bytes arrive\n"
            "  --conn-max N        open connections in all (default 1024); past it, the longest-waiting\n"
            "                      connection without a request being answered is closed to make room\n"
            "  --conn-per-ip N     open connections from one client address (default 0: no cap)\n"
            "  --queue-max N       with --parallel: requests waiting beyond N get 503 + Retry-After (default 64)\n"
            "  --responses-max N   /v1/responses kept for previous_response_id and GET /v1/responses/{id}\n"
            "                      (store: true, OpenAI's default), oldest evicted first (default 256; 0: none)\n"
            "  --responses-max-mib M  the memory those may hold (default 64)\n"
            "  --shutdown-ms MS    on SIGINT/SIGTERM, how long in-flight streams get to end (default 5000)\n"
            "  --chat-template-file F  the chat template (Jinja) instead of the model's tokenizer.chat_template\n"
            "                      (a model without one gets a built-in one: Gemma's turns for the gemma\n"
            "                      family, else ChatML / Hermes; docs/SERVER.md)\n"
            "Endpoints (docs/SERVER.md): POST /v1/chat/completions, /v1/completions, /v1/responses,\n"
            "/v1/messages, /v1/messages/count_tokens, /apply-template, /tokenize, /detokenize;\n"
            "GET /v1/models, /health, /metrics; GET and DELETE /v1/responses/{id}.\n");
}

static bool num(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int cmd_serve(int argc, char **argv) {
    struct dj_server_params p = server_default_params();
    /* speculation on by default (docs/BENCHMARKS.md: it pays on agent traces; the adaptive
     * policy stops drafting where nothing is accepted) */
    p.engine.spec.sources = DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO);
    const char *model = NULL, *kv_dir = NULL;
    char *tmpl = NULL;
    double v, shutdown_ms = 5000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
#define NUMOPT(name1, name2, lo, hi, dst)                                                     \
    if (!strcmp(a, name1) || !strcmp(a, name2)) {                                                \
        if (!(val = cli_value("serve", argc, argv, &i))) return 1;                             \
        if (!num(val, lo, hi, &v)) return cli_error("serve", "%s: '%s' is not a number in [%g, %g]", a, val, \
                                                    (double)(lo), (double)(hi));               \
        dst;                                                                                    \
        continue;                                                                               \
    }
        bool ok;
        if (cli_kv_type_opt("serve", argc, argv, &i, &p.engine.kv_type_k, &p.engine.kv_type_v, &ok) ||
            cli_spec_opt("serve", argc, argv, &i, &p.engine.spec, &ok) ||
            cli_device_opt("serve", argc, argv, &i, &p.engine.gpu, &ok) ||
            cli_overflow_opt("serve", argc, argv, &i, &p.engine.overflow, &ok)) {
            if (!ok) {
                free(tmpl);
                return 1;
            }
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("serve", argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--host")) {
            if (!(p.host = cli_value("serve", argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--api-key")) {
            if (!(p.api_key = cli_value("serve", argc, argv, &i))) return 1;
            if (!*p.api_key) /* it would admit requests that send an empty key */
                return cli_error("serve", "--api-key is empty: give a key, or leave the option out to serve without one");
            continue;
        }
        if (!strcmp(a, "--chat-template-file")) {
            if (!(val = cli_value("serve", argc, argv, &i))) return 1;
            free(tmpl);
            size_t n = 0;
            if (!(tmpl = cli_read_file("serve", val, &n))) return 1;
            p.chat_template = tmpl;
            continue;
        }
        if (!strcmp(a, "--kv-dir")) {
            if (!(kv_dir = cli_value("serve", argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--alias")) {
            if (!(p.alias = cli_value("serve", argc, argv, &i))) return 1;
            continue;
        }
        NUMOPT("--port", "--port", 0, 65535, p.port = (uint16_t)v)
        NUMOPT("-t", "--threads", 1, 1024, p.engine.n_threads = (int)v)
        NUMOPT("-c", "--ctx-size", 0, 1 << 24, p.engine.n_ctx = (uint32_t)v)
        NUMOPT("-n", "--n-predict", 0, 1 << 24, p.n_predict = (size_t)v)
        NUMOPT("--parallel", "--parallel", 0, 4096, p.engine.n_running_max = (uint32_t)v)
        NUMOPT("--kv-budget", "--kv-budget", 0, 1 << 30, p.engine.kv_budget_mib = v)
        NUMOPT("--kv-dir-max-gib", "--kv-dir-max-gib", 0, 1 << 20, p.engine.persist_max_bytes = (uint64_t)(v * 1073741824.0))
        NUMOPT("--body-max", "--body-max", 1024, 1 << 30, p.body_max = (size_t)v)
        NUMOPT("--timeout", "--timeout", 1, 86400, p.timeout_s = (unsigned)v)
        NUMOPT("--header-timeout", "--header-timeout", 1, 3600, p.header_timeout_s = (unsigned)v)
        NUMOPT("--body-timeout", "--body-timeout", 1, 86400, p.body_timeout_s = (unsigned)v)
        NUMOPT("--conn-max", "--conn-max", 4, 1 << 20, p.conn_max = (size_t)v)
        NUMOPT("--conn-per-ip", "--conn-per-ip", 0, 1 << 20, p.conn_per_ip = (size_t)v)
        NUMOPT("--queue-max", "--queue-max", 0, 1 << 20, p.queue_max = (size_t)v)
        NUMOPT("--responses-max", "--responses-max", 0, 1 << 24, p.responses_max = (size_t)v)
        NUMOPT("--responses-max-mib", "--responses-max-mib", 0, 1 << 20, p.responses_max_bytes = (size_t)(v * 1048576.0))
        NUMOPT("--shutdown-ms", "--shutdown-ms", 0, 600000, shutdown_ms = v)
#undef NUMOPT
        serve_usage(stderr);
        return cli_error("serve", "unknown argument '%s'", a);
    }
    if (!model) {
        serve_usage(stderr);
        free(tmpl);
        return cli_error("serve", "no model given (-m MODEL)");
    }
    cli_spec_check("serve", &p.engine.spec);
    if (p.engine.n_running_max == 0) p.queue_max = 0; /* no --parallel: the KV budget is the only limit */
    if (llama_opt_config_from_env(&p.engine.opt) != DJ_OK) {
        free(tmpl);
        return cli_error("serve", "%s", dj_last_error());
    }
    if (cli_kv_dir("serve", kv_dir, &p.engine.opt)) { /* --kv-dir wins over the environment */
        free(tmpl);
        return 1;
    }
    p.engine.kv_budget_auto = p.engine.kv_budget_mib == 0 && getenv("LLAMA_OPT_DEDUP_POOL_MAX") == NULL;
    struct dj_server *s = NULL;
    if (server_listen(model, &p, &s) != DJ_OK) {
        free(tmpl);
        return cli_error("serve", "%s", dj_last_error());
    }
    fprintf(stderr, "deja serve: listening on http://%s:%u (loading %s)\n", p.host, (unsigned)server_port(s), model);
    struct dj_model *m = NULL;
    if (model_load(model, &m) != DJ_OK || server_attach(s, m) != DJ_OK) {
        cli_error("serve", "%s", dj_last_error());
        server_stop(s, 0);
        model_free(m);
        free(tmpl);
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "deja serve: ready on http://%s:%u\n", p.host, (unsigned)server_port(s));
    while (!got_signal) pause();
    fprintf(stderr, "deja serve: signal %d, stopping\n", (int)got_signal);
    server_stop(s, (int)shutdown_ms);
    model_free(m);
    free(tmpl);
    return 0;
}
