/*
 * cli.h — shared pieces of the `deja` command: subcommand entry points and
 * small argument/file helpers.  Only tools/ has main() and may exit().
 */
#ifndef DJ_TOOLS_CLI_H
#define DJ_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llama_opt_config;

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_grammar(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* Prints "deja <cmd>: <message>" to stderr and returns 1 (the exit status). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The argument after argv[*i] for option `opt`; NULL (and a message) if missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* -ctk/--cache-type-k and -ctv/--cache-type-v (llama.cpp's): true if argv[*i] is one of
 * them, then *ok tells whether its value (f32, f16, bf16, q8_0, q4_0) was read into *k or
 * *v (else a message was printed). */
bool cli_kv_type_opt(const char *cmd, int argc, char **argv, int *i, uint32_t *k, uint32_t *v, bool *ok);
#define CLI_KV_TYPE_HELP                                                                              \
    "  -ctk, --cache-type-k T  K cache type: f32, f16, bf16, q8_0, q4_0 (default f16; docs/CONFIG.md)\n" \
    "  -ctv, --cache-type-v T  V cache type (the same choices)\n"
/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL + message on failure. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

/* --kv-dir and --kv-dir-max-gib, the same for serve, run and replay: the help lines, and
 * the flag applied over the LLAMA_OPT_PERSIST_* environment already in *opt (the flag wins:
 * persistence on, its directory).  kv_dir NULL leaves *opt alone.  Returns 0, or 1 after a
 * message when the path is too long. */
#define CLI_KV_DIR_USAGE                                                                                   \
    "  --kv-dir DIR        keep sealed KV blocks on disk in DIR and restore them in later sessions and\n"  \
    "                      after restarts (= LLAMA_OPT_PERSIST_ENABLED=1 LLAMA_OPT_PERSIST_DIR=DIR; off by default)\n" \
    "  --kv-dir-max-gib G  disk budget of --kv-dir, least recently used blocks evicted (default 0: none)\n"
int cli_kv_dir(const char *cmd, const char *kv_dir, struct llama_opt_config *opt);

#endif
