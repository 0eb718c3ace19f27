/*
 * opt.h — the optimization layer's configuration and statistics
 * (spec/optimization-layer.md §1.1, DESIGN.md §1 and §5).
 *
 * Configuration.  `struct llama_opt_config` carries the spec's fields with the
 * spec's names, types and defaults, plus DESIGN.md's additions (diff_mode,
 * diff_recompute).  A value comes from three places, later ones winning:
 *
 *     built-in default (the spec's)                       opt.h, below
 *       → compile-time definition LLAMA_OPT_<NAME>=0|1     CMake option(...) of the same name
 *         → environment variable LLAMA_OPT_<NAME>_…        llama_opt_config_load/_from_env
 *
 * The CMake options only choose the built-in default of an `*_enabled` flag;
 * nothing is compiled out, so the environment can turn on what CMake left off
 * (deja has no reason to drop code; the spec's "#ifdef LLAMA_OPT_<NAME>" guard
 * becomes `#if LLAMA_OPT_<NAME>` on a 0/1 definition).  Tier 2 (approximate)
 * options are off by default and stay off unless a variable turns them on.
 *
 * Every variable is described once, in a table (llama_opt_config_var): name,
 * type, range, tier, CMake option, one line of documentation, and whether
 * anything reads it yet (2 of the 28 are parsed ahead of their features; a
 * non-default value of one of them is warned about, docs/CONFIG.md lists them).  The loader, the
 * tests and docs/CONFIG.md are checked against that table.  An invalid value
 * (not a bool/number, out of range, unknown enum name, too long) is rejected
 * with DJ_ERR_INVALID and a message naming the variable and the value; the
 * config is then left untouched.  A variable set to "" counts as unset.
 *
 * Statistics.  `struct llama_opt_stats` holds the spec's monotonic counters.
 * The engine keeps one running total per context; after a turn it prints the
 * difference to the previous turn's snapshot as one line
 *     opt-stats {"dedup_blocks_total":…,…}
 * (DESIGN.md §5; LLAMA_OPT_STATS=1).  No global state: config and stats
 * belong to whoever creates them.
 */
#ifndef DJ_OPT_OPT_H
#define DJ_OPT_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deja.h"

/* Compile-time defaults, set by CMakeLists.txt's "optimization layer options"
 * block as 0/1.  A build without CMake gets the spec's defaults. */
#ifndef LLAMA_OPT_DEDUP
#define LLAMA_OPT_DEDUP 1
#endif
#ifndef LLAMA_OPT_KV_DIFF
#define LLAMA_OPT_KV_DIFF 1
#endif
#ifndef LLAMA_OPT_SCHEMA_SKIP
#define LLAMA_OPT_SCHEMA_SKIP 1
#endif
#ifndef LLAMA_OPT_KV_CANON
#define LLAMA_OPT_KV_CANON 1
#endif
#ifndef LLAMA_OPT_PRECOMPUTE
#define LLAMA_OPT_PRECOMPUTE 1
#endif
#ifndef LLAMA_OPT_KV_PERSIST
#define LLAMA_OPT_KV_PERSIST 0
#endif
#ifndef LLAMA_OPT_MEMO
#define LLAMA_OPT_MEMO 1
#endif
#ifndef LLAMA_OPT_ATTN_PRUNE
#define LLAMA_OPT_ATTN_PRUNE 0
#endif
#ifndef LLAMA_OPT_SPARSE_ATTN
#define LLAMA_OPT_SPARSE_ATTN 0
#endif

#define LLAMA_OPT_PERSIST_DIR_MAX 4096 /* bytes, including the terminating NUL */

/* LLAMA_OPT_DIFF_MODE (DESIGN.md §1): what is reused after the first edit. */
enum llama_opt_diff_mode {
    LLAMA_OPT_DIFF_EXACT = 0, /* Tier 1: reuse the longest common prefix only */
    LLAMA_OPT_DIFF_APPROX,    /* Tier 2: also KEEP spans after an edit (RoPE-corrected,
                                 with CacheBlend-style recompute of diff_recompute of them) */
};

/* LLAMA_OPT_ATTN_PRUNE_POLICY (DESIGN.md addition): which blocks leave the attention set. */
enum llama_opt_prune_policy {
    LLAMA_OPT_PRUNE_THRESHOLD = 0, /* §4.1: below the threshold for attn_prune_window turns */
    LLAMA_OPT_PRUNE_H2O,           /* heavy hitters within attn_prune_budget tokens */
};

struct llama_opt_config {
    /* Block hashing */
    uint32_t block_size;          /* tokens per KV block / hash block (64) */

    /* Phase 1 — context block deduplication */
    bool     dedup_enabled;       /* (true) */
    uint32_t dedup_pool_max;      /* max blocks in the pool (16384) */

    /* Phase 1 — structural KV cache diffing */
    bool     diff_enabled;        /* (true) */
    uint32_t diff_min_unchanged;  /* min KEEP span worth reusing after an edit (8) */
    enum llama_opt_diff_mode diff_mode; /* DESIGN.md addition (exact) */
    float    diff_recompute;      /* DESIGN.md addition: fraction of reused tokens
                                     recomputed in approx mode (0.15) */

    /* Phase 1 — schema-aware token skipping */
    bool     schema_skip_enabled; /* (true) */

    /* Phase 2 — KV cache canonicalization */
    bool     canon_enabled;       /* (true) */

    /* Phase 2 — deterministic precomputation */
    bool     precompute_enabled;  /* (true) */
    uint32_t precompute_rope_max; /* max RoPE cache entries (131072) */

    /* Phase 2 — persistent cross-session KV cache */
    bool     persist_enabled;     /* (false) */
    char     persist_dir[LLAMA_OPT_PERSIST_DIR_MAX]; /* ("") */

    /* DESIGN.md addition — recurrent-state checkpoints of hybrid models (kv/ckpt.h) */
    uint32_t rs_ckpt_interval;    /* a checkpoint every this many blocks of a prompt; 0: ends only (16) */
    uint32_t rs_ckpt_max_mb;      /* MiB of checkpoints kept, LRU (2048) */

    /* Phase 3 — token-level output memoization */
    bool     memo_enabled;        /* (true) */
    uint32_t memo_trie_max;       /* max trie nodes (65536) */

    /* Phase 4 — attention sink pruning (Tier 2) */
    bool     attn_prune_enabled;  /* (false) */
    uint32_t attn_prune_window;   /* turns of inactivity before eviction (10) */
    float    attn_prune_threshold;/* attention weight threshold (0.001) */
    /* DESIGN.md additions (kv/attn_prune.h) */
    bool     attn_stats_enabled;  /* per-block attention statistics without pruning (false; exact) */
    enum llama_opt_prune_policy attn_prune_policy; /* threshold (§4.1) or h2o (threshold) */
    uint32_t attn_prune_budget;   /* h2o: tokens attended at most (4096) */
    uint32_t attn_prune_keep_first; /* tokens at the start never pruned (256) */
    uint32_t attn_prune_keep_last;  /* tokens at the end never pruned (1024) */

    /* Phase 4 — sparse attention over tool results (Tier 2) */
    bool     sparse_attn_enabled; /* (false) */
    float    sparse_relevance_threshold; /* min relevance score (0.1) */

    /* Phase 5 (activation dedup, no-op elision, algebraic rewriting): removed, decided by the
     * census (bench/census.c, docs/BENCHMARKS.md "Phase 5 census"); llama_opt_config_removed. */

    /* Statistics */
    bool     stats_enabled;       /* print "opt-stats {json}" after every turn (false) */
};

/* The compile-time defaults (no environment). */
struct llama_opt_config llama_opt_config_default(void);

/* A getenv-like lookup: returns the value of `name` or NULL when unset.
 * The returned string must stay valid until the loader returns. */
typedef const char *(*llama_opt_getenv_fn)(const char *name, void *ud);

/* Overrides the fields of *cfg with every variable `get` returns.  On failure
 * returns DJ_ERR_INVALID with a message naming the variable and its value, and
 * leaves *cfg unchanged. */
enum dj_status llama_opt_config_load(struct llama_opt_config *cfg, llama_opt_getenv_fn get, void *ud);

/* *cfg = defaults overridden by the process environment (getenv).  Unknown
 * LLAMA_OPT_* variables in the environment are reported with a warning (they
 * are usually typos) but are not an error, and so is a variable of a feature
 * that does not exist yet set to a non-default value
 * (llama_opt_config_warn_not_implemented).  *cfg is set only on success.
 * Every command that runs the model calls this once at start-up. */
enum dj_status llama_opt_config_from_env(struct llama_opt_config *cfg);

/* ---- The variable table ------------------------------------------------- */

enum llama_opt_var_type {
    LLAMA_OPT_VAR_BOOL,   /* 1/0, true/false, on/off, yes/no (any case) */
    LLAMA_OPT_VAR_UINT,   /* decimal digits, within [min, max] */
    LLAMA_OPT_VAR_FLOAT,  /* strtod syntax, finite, within [min, max] */
    LLAMA_OPT_VAR_STRING, /* shorter than the field */
    LLAMA_OPT_VAR_ENUM,   /* one of choices (any case) */
};

struct llama_opt_var {
    const char *name;            /* "LLAMA_OPT_BLOCK_SIZE" */
    enum llama_opt_var_type type;
    size_t offset;               /* offsetof(struct llama_opt_config, field) */
    size_t size;                 /* sizeof the field */
    double min, max;             /* UINT, FLOAT: inclusive range */
    const char *const *choices;  /* ENUM: NULL-terminated; index == enum value */
    int tier;                    /* 1 exact, 2 approximate, 0 infrastructure (no effect on results) */
    const char *cmake;           /* CMake option giving its built-in default, or NULL */
    const char *field;           /* "block_size" */
    const char *doc;             /* one line */
    bool implemented;            /* false: parsed and validated, but nothing reads the field yet */
};

/* The i-th variable, or NULL past the end. */
const struct llama_opt_var *llama_opt_config_var(size_t i);
/* The variable named `name`, or NULL. */
const struct llama_opt_var *llama_opt_config_find_var(const char *name);

/* The variables of cfg whose feature is not implemented yet (llama_opt_var.implemented
 * false) and whose value differs from llama_opt_config_default(): the first `cap` of
 * them go to out[] in table order (out may be NULL when cap is 0); returns how many
 * there are.  Such a setting has no effect, which the user should be told. */
size_t llama_opt_config_not_implemented(const struct llama_opt_config *cfg, const struct llama_opt_var **out,
                                        size_t cap);

/* Prints, as a warning on stderr, one line per variable llama_opt_config_not_implemented
 * lists, e.g. "LLAMA_OPT_MEMO_ENABLED=0: not implemented yet, has no effect (docs/CONFIG.md)";
 * each variable at most once per process, however often a configuration is loaded.
 * Returns the number of lines printed by this call. */
size_t llama_opt_config_warn_not_implemented(const struct llama_opt_config *cfg);

/* The spec's variables deja removed after measuring (the Phase-5 switches): the reason, or
 * NULL when name is not one of them.  Setting one warns and is otherwise ignored. */
const char *llama_opt_config_removed(const char *name);

/* Variable v's value in cfg as the environment spells it ("0", "64", "0.25", "approx",
 * "/tmp/kv"): into buf, snprintf-style (returns the length it needed). */
size_t llama_opt_config_format_value(const struct llama_opt_config *cfg, const struct llama_opt_var *v, char *buf,
                                     size_t cap);

/* ---- Statistics ---------------------------------------------------------- */

struct llama_opt_stats {
    /* Phase 1 — context block dedup */
    uint64_t dedup_blocks_total;
    uint64_t dedup_blocks_hit;
    uint64_t dedup_tokens_saved;

    /* Phase 1 — KV cache diffing */
    uint64_t diff_tokens_total;
    uint64_t diff_tokens_unchanged;
    uint64_t diff_tokens_recomputed;
    /* DESIGN.md additions, Tier 2 (LLAMA_OPT_DIFF_MODE=approx) only */
    uint64_t diff_tokens_approx;   /* KEEP tokens after an edit reused with RoPE-corrected K */
    uint64_t diff_tokens_blend;    /* of the candidates, recomputed after the CacheBlend probe */
    uint64_t diff_tokens_probed;   /* tokens run through the probe (layer 0 + layer-1 K/V) */

    /* Phase 1 — schema-aware skipping */
    uint64_t schema_tokens_total;
    uint64_t schema_tokens_skipped;
    uint64_t schema_tokens_inferred;

    /* Phase 2 — KV canonicalization */
    uint64_t canon_entries_total;
    uint64_t canon_entries_deduped;
    uint64_t canon_bytes_saved;

    /* Phase 2 — precomputation */
    uint64_t precompute_rope_hits;
    uint64_t precompute_norm_hits;
    uint64_t precompute_mask_hits;

    /* Phase 2 — persistent KV */
    uint64_t persist_loads;
    uint64_t persist_saves; /* blocks the store's writer thread wrote, or found already on disk
                               (counted as it finishes them; failed and dropped writes are not saves:
                               kv/persist.h stats, deja_persist_* in /metrics) */
    uint64_t persist_tokens_restored;

    /* DESIGN.md addition — recurrent-state checkpoints (hybrid models, kv/ckpt.h) */
    uint64_t rs_ckpt_saves;        /* checkpoints stored */
    uint64_t rs_ckpt_hits;         /* prompts that resumed from one */
    uint64_t rs_tokens_restored;   /* prompt positions whose recurrent state came from a checkpoint */
    uint64_t rs_tokens_recomputed; /* prompt positions whose K/V rows were cached but were computed again:
                                      no checkpoint held the recurrent state there */

    /* Phase 3 — output memoization */
    uint64_t memo_lookups;
    uint64_t memo_hits;
    uint64_t memo_tokens_skipped;

    /* Phase 4 — attention pruning */
    uint64_t attn_blocks_pruned;   /* blocks that left a sequence's attention set */
    uint64_t attn_tokens_pruned;   /* their tokens */
    /* DESIGN.md additions */
    uint64_t attn_blocks_restored; /* skipped blocks the probe brought back */
    uint64_t attn_tokens_skipped;  /* per turn, tokens outside the attention set, summed */
    uint64_t ctx_tokens_dropped;   /* --context-overflow prune: prompt tokens dropped to fit */
};

void llama_opt_stats_reset(struct llama_opt_stats *s);

/* Number of counters, and the name of the i-th (in declaration order; NULL past the end). */
size_t llama_opt_stats_n_fields(void);
const char *llama_opt_stats_field_name(size_t i);
/* The i-th counter of s (i < llama_opt_stats_n_fields()). */
uint64_t llama_opt_stats_get(const struct llama_opt_stats *s, size_t i);

/* *out = now - before, counter by counter.  Counters only grow, so before <= now
 * for every counter (asserted: a violation is a bug in the caller). */
void llama_opt_stats_delta(const struct llama_opt_stats *now, const struct llama_opt_stats *before,
                           struct llama_opt_stats *out);

/* Writes s as one JSON object {"dedup_blocks_total":N,...} (every counter, in
 * declaration order) to buf; returns the length it needed, like snprintf
 * (the output is complete iff the result < cap). */
size_t llama_opt_stats_format(const struct llama_opt_stats *s, char *buf, size_t cap);

/* Prints "opt-stats {json}\n" for the per-turn delta now - *last to f in one
 * write, then sets *last = *now (the next turn's baseline).  Returns 0, or -1
 * when the write failed. */
int llama_opt_stats_print_turn(FILE *f, struct llama_opt_stats *last, const struct llama_opt_stats *now);

#endif
