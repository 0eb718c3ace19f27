/*
 * main.c — the `deja` command: dispatches to subcommands (DESIGN.md §5).
 * Each subcommand lives in its own cmd_*.c file and returns the exit status.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/file.h"
#include "deja.h"
#include "kv/pool.h"
#include "opt/opt.h"

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct subcommand commands[] = {
    {"bench", cmd_bench, "prefill and decode throughput (like llama-bench), memory bandwidth"},
    {"grammar", cmd_grammar, "GBNF from a JSON schema or OpenAI tools; print it or check a text against it"},
    {"inspect", cmd_inspect, "print a GGUF model's architecture, hyperparameters, tensors and vocabulary"},
    {"quantize", cmd_quantize, "quantize a model to q8_0, q4_0 or q4_k_m (llama.cpp's type choices)"},
    {"replay", cmd_replay, "replay multi-turn agent traces with exact KV reuse: tokens reused/computed, TTFT, hashes"},
    {"serve", cmd_serve, "the HTTP server: OpenAI-compatible completions over the serving engine"},
    {"run", cmd_run, "generate text from a prompt (greedy or sampled), with speed, logits hash and dumps"},
    {"perplexity", cmd_perplexity, "perplexity of a text file, llama.cpp's method (chunks of -c tokens)"},
    {"synth", cmd_synth, "write a model with random weights at real shapes (tiny, 1b, 8b) for benchmarks"},
    {"template", cmd_template, "render a chat template (a model's or a file) for a case, as transformers does"},
    {"tokenize", cmd_tokenize, "tokenize text with a model's tokenizer (ids on one line), or benchmark it"},
};

static void usage(FILE *f) {
    fprintf(f, "deja %s — an LLM inference engine for agentic workloads\n\n", DEJA_VERSION);
    fprintf(f, "usage: deja <command> [options]   (deja <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "deja %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "option %s needs a value (see deja %s --help)", argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

bool cli_kv_type_opt(const char *cmd, int argc, char **argv, int *i, uint32_t *k, uint32_t *v, bool *ok) {
    const char *a = argv[*i];
    const bool is_k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k");
    if (!is_k && strcmp(a, "-ctv") && strcmp(a, "--cache-type-v")) return false;
    *ok = false;
    const char *val = cli_value(cmd, argc, argv, i);
    if (!val) return true;
    const int t = kv_type_parse(val);
    if (t < 0) {
        cli_error(cmd, "%s: %s", a, dj_last_error());
        return true;
    }
    *(is_k ? k : v) = (uint32_t)t;
    *ok = true;
    return true;
}

bool cli_device_opt(const char *cmd, int argc, char **argv, int *i, uint32_t *gpu, bool *ok) {
    if (strcmp(argv[*i], "--device")) return false;
    *ok = false;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return true;
    char *end = NULL;
    unsigned long n = 0;
    if (!strcmp(v, "cpu")) *gpu = 0;
    else if (!strcmp(v, "vulkan")) *gpu = 1;
    else if (!strncmp(v, "vulkan:", 7) && v[7] >= '0' && v[7] <= '9' && (n = strtoul(v + 7, &end, 10), !*end) &&
             n < 64)
        *gpu = (uint32_t)n + 1;
    else {
        cli_error(cmd, "--device: '%s' is not cpu, vulkan or vulkan:N", v);
        return true;
    }
    *ok = true;
    return true;
}

bool cli_overflow_opt(const char *cmd, int argc, char **argv, int *i, enum dj_ctx_overflow *out, bool *ok) {
    if (strcmp(argv[*i], "--context-overflow")) return false;
    *ok = false;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return true;
    if (!strcmp(v, "error")) *out = DJ_OVERFLOW_ERROR;
    else if (!strcmp(v, "prune")) *out = DJ_OVERFLOW_PRUNE;
    else if (!strcmp(v, "sparse")) {
        cli_error(cmd, "--context-overflow sparse: not implemented yet (sparse prefill of tool results; docs/CONFIG.md)");
        return true;
    } else {
        cli_error(cmd, "--context-overflow: '%s' is not error, prune or sparse", v);
        return true;
    }
    *ok = true;
    return true;
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
    char *buf = NULL;
    if (dj_read_file(path, &buf, len) != DJ_OK) {
        cli_error(cmd, "%s", dj_last_error());
        return NULL;
    }
    return buf;
}

int cli_kv_dir(const char *cmd, const char *kv_dir, struct llama_opt_config *opt) {
    if (!kv_dir) return 0;
    if (strlen(kv_dir) >= sizeof opt->persist_dir)
        return cli_error(cmd, "--kv-dir: the path is longer than %zu bytes", sizeof opt->persist_dir - 1);
    opt->persist_enabled = true;
    snprintf(opt->persist_dir, sizeof opt->persist_dir, "%s", kv_dir);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("deja %s\n", DEJA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "deja: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 1;
}
