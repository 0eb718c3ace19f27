/*
 * cli.h — shared pieces of the `deja` command: subcommand entry points and
 * small argument/file helpers.  Only tools/ has main() and may exit().
 */
#ifndef DJ_TOOLS_CLI_H
#define DJ_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "engine/engine.h"

struct llama_opt_config;
struct dj_spec_params;
struct dj_spec_counts;

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
    "  -ctv, --cache-type-v T  V cache type (the same choices; MLA models keep no V rows: -ctk applies)\n"
/* --device cpu|vulkan|vulkan:N: true if argv[*i] is it, then *ok tells whether the value was
 * read into *gpu (0 the CPU, N + 1 Vulkan device N: ctx_params.gpu / engine_params.gpu). */
bool cli_device_opt(const char *cmd, int argc, char **argv, int *i, uint32_t *gpu, bool *ok);
/* --context-overflow error|prune|sparse: true if argv[*i] is it, then *ok tells whether the
 * value was read into *out (sparse: not implemented yet, refused with a message). */
bool cli_overflow_opt(const char *cmd, int argc, char **argv, int *i, enum dj_ctx_overflow *out, bool *ok);
#define CLI_OVERFLOW_HELP                                                                             \
    "  --context-overflow P  a prompt that does not fit -c: error (default; the API's 400) or prune\n" \
    "                    (whole blocks of its middle dropped, the least attended first: Tier 2;\n"     \
    "                    docs/CONFIG.md); sparse is not implemented yet\n"
#define CLI_DEVICE_HELP                                                                               \
    "  --device D        cpu (default) or vulkan[:N]: the forward pass on Vulkan device N (deja inspect\n" \
    "                    --devices; llama-family dense models, f32/f16 K/V: docs/ARCHITECTURE.md, GPU)\n"
/* llama-quantize's file types and quantization mix (quant_mix.c), shared by quantize and
 * synth.  quant_ftype_find: a file type by llama-quantize's name, case-insensitive
 * (aliases Q3_K, Q4_K, Q5_K included), NULL if unknown; refuse says why deja cannot write
 * it (NULL: it can).  quant_ftype_list prints the names deja writes (or refuses).
 * The mix: quant_mix_init, quant_mix_count for every tensor name, then quant_mix_type
 * for each tensor in llama-quantize's order (quant_mix_order, a strcmp-like comparator
 * of NUL-terminated names): *type is left alone for tensors the mix keeps (vectors,
 * norms, routers), else set; *fell_back (may be NULL) tells that the row length forced
 * a smaller block; an ffn_down of an MoE model without a layer in its name is an error. */
struct quant_ftype {
    const char *name;   /* as llama-quantize spells it: "Q4_K_M" */
    uint32_t ftype;     /* llama.h's LLAMA_FTYPE_*, written as general.file_type */
    uint32_t base;      /* the default tensor type (DJ_TYPE_*) */
    const char *refuse; /* NULL, or why deja quantize does not write this type */
};
const struct quant_ftype *quant_ftype_find(const char *name);
void quant_ftype_list(FILE *f, bool writable);
struct quant_mix {
    uint32_t ftype, base;       /* the file type and its default tensor type */
    bool has_output;            /* the file has output.weight (else token_embd is the output) */
    bool falcon, is_70b;        /* llama.cpp's LLM_ARCH_FALCON and LLM_TYPE_70B rules */
    uint32_t n_expert, n_layer; /* expert_count, block_count (0: absent) */
    uint32_t n_gqa;             /* head_count / head_count_kv of layer 0 (0: unknown) */
    int n_attn_v, i_attn_v, i_ffn_down;
};
void quant_mix_init(struct quant_mix *q, const struct quant_ftype *ft, const char *arch, uint32_t n_expert,
                    uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv);
void quant_mix_count(struct quant_mix *q, const char *name, size_t len);
enum dj_status quant_mix_type(struct quant_mix *q, const char *name, size_t len, const int64_t ne[4], uint32_t *type,
                              bool *fell_back);
int quant_mix_order(const char *a, const char *b);
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

/* Speculative decoding options, the same for run, replay and serve: --spec, --no-spec,
 * --spec-sources LIST, --draft-max N, --draft-exit-layer N|auto, --spec-fixed.  Returns
 * true if argv[*i] is one of them; *ok then tells whether it was read into *sp (else a
 * message was printed). */
bool cli_spec_opt(const char *cmd, int argc, char **argv, int *i, struct dj_spec_params *sp, bool *ok);
/* Warns about speculation options that have no effect in the final settings. */
void cli_spec_check(const char *cmd, const struct dj_spec_params *sp);
#define CLI_SPEC_HELP                                                                                        \
    "  --spec              speculative decoding, exact: drafts from prompt lookup and the output memo are\n"  \
    "                      verified in the batched pass (= --spec-sources lookup,memo; docs/SPECULATIVE.md)\n" \
    "  --spec-sources L    draft sources, comma-separated: lookup, memo, exit, mtp (the model's MTP block:\n" \
    "                      qwen35/qwen35moe), all (lookup, memo, exit), none\n"                               \
    "  --no-spec           no speculative drafts (grammar drafts follow LLAMA_OPT_SCHEMA_SKIP_ENABLED)\n"     \
    "  --draft-max N       tokens drafted per step at most (default 16)\n"                                    \
    "  --draft-exit-layer L  early-exit drafts from the first L layers (source exit; default auto)\n"         \
    "  --spec-fixed        always draft the longest proposal (no adaptive policy; for measurements)\n"
/* The draft counters as one JSON object (no newline): sources, totals, tokens per pass
 * ((n_gen - 1) / n_passes: the first token comes from the prompt pass), per source and by draft position. */
void cli_spec_json(FILE *f, const struct dj_spec_params *sp, const struct dj_spec_counts *c, size_t n_gen,
                   uint64_t n_passes);
/* One line for people: "spec: drafted D accepted A (x %); lookup a/d, memo a/d ...; T tokens/pass". */
void cli_spec_line(FILE *f, const struct dj_spec_counts *c, size_t n_gen, uint64_t n_passes);

#endif
