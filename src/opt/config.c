/*
 * config.c — struct llama_opt_config: built-in defaults, the variable table
 * and the LLAMA_OPT_* environment loader (spec §1.1, "Runtime Configuration").
 *
 * The table below is the single description of every variable; defaults live
 * in llama_opt_config_default().  The loader parses every variable into a
 * copy of the config and writes it back only when all of them were valid, so
 * a bad value never leaves a half-applied configuration.
 */
#include "opt/opt.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/status.h"

static const char *const diff_mode_names[] = {"exact", "approx", NULL};
static const char *const prune_policy_names[] = {"threshold", "h2o", NULL};

#define F(field) offsetof(struct llama_opt_config, field), sizeof(((struct llama_opt_config *)0)->field)
#define U32MAX 4294967295.0

/* Ranges: sizes that allocate memory are capped at 2^30 entries so that a typo
 * ("16384000000") fails here rather than in an allocation. */
static const struct llama_opt_var vars[] = {
    {"LLAMA_OPT_BLOCK_SIZE", LLAMA_OPT_VAR_UINT, F(block_size), 1, 65536, NULL, 0, NULL, "block_size",
     "tokens per KV block: the unit of hashing, dedup, persistence and block-level diff", true},
    {"LLAMA_OPT_DEDUP_ENABLED", LLAMA_OPT_VAR_BOOL, F(dedup_enabled), 0, 1, NULL, 1, "LLAMA_OPT_DEDUP", "dedup_enabled",
     "reuse full KV blocks found in the block pool by chain hash (verified token by token)", true},
    {"LLAMA_OPT_DEDUP_POOL_MAX", LLAMA_OPT_VAR_UINT, F(dedup_pool_max), 1, 1073741824.0, NULL, 1, NULL,
     "dedup_pool_max", "max blocks kept in the dedup pool (unpinned blocks are evicted LRU)", true},
    {"LLAMA_OPT_DIFF_ENABLED", LLAMA_OPT_VAR_BOOL, F(diff_enabled), 0, 1, NULL, 1, "LLAMA_OPT_KV_DIFF", "diff_enabled",
     "diff each turn's tokens against the session's previous tokens and reuse the unchanged KV", true},
    {"LLAMA_OPT_DIFF_MIN_UNCHANGED", LLAMA_OPT_VAR_UINT, F(diff_min_unchanged), 0, 1073741824.0, NULL, 2, NULL,
     "diff_min_unchanged", "approx mode: a KEEP span after an edit shorter than this is recomputed, not reused", true},
    {"LLAMA_OPT_DIFF_MODE", LLAMA_OPT_VAR_ENUM, F(diff_mode), 0, 1, diff_mode_names, 2, NULL, "diff_mode",
     "exact: reuse the longest common prefix only (Tier 1); approx: also reuse KEEP spans after an edit (Tier 2)",
     true},
    {"LLAMA_OPT_DIFF_RECOMPUTE", LLAMA_OPT_VAR_FLOAT, F(diff_recompute), 0, 1, NULL, 2, NULL, "diff_recompute",
     "approx mode: fraction of the reused tokens recomputed (the most deviating ones, CacheBlend-style)", true},
    {"LLAMA_OPT_SCHEMA_SKIP_ENABLED", LLAMA_OPT_VAR_BOOL, F(schema_skip_enabled), 0, 1, NULL, 1,
     "LLAMA_OPT_SCHEMA_SKIP", "schema_skip_enabled",
     "skip the forward pass when the grammar allows one token; draft and verify forced strings", true},
    {"LLAMA_OPT_CANON_ENABLED", LLAMA_OPT_VAR_BOOL, F(canon_enabled), 0, 1, NULL, 1, "LLAMA_OPT_KV_CANON",
     "canon_enabled",
     "store a sealed KV block once: a block identical to a sealed one (same prefix) is dropped for it", true},
    {"LLAMA_OPT_PRECOMPUTE_ENABLED", LLAMA_OPT_VAR_BOOL, F(precompute_enabled), 0, 1, NULL, 1,
     "LLAMA_OPT_PRECOMPUTE", "precompute_enabled",
     "compute RoPE cos/sin once per position (shared by q, k and every layer) instead of per rotation", true},
    {"LLAMA_OPT_PRECOMPUTE_ROPE_MAX", LLAMA_OPT_VAR_UINT, F(precompute_rope_max), 0, 1073741824.0, NULL, 1, NULL,
     "precompute_rope_max", "max positions in the RoPE table (4 x n_rot bytes each); later ones are computed on the fly",
     true},
    {"LLAMA_OPT_PERSIST_ENABLED", LLAMA_OPT_VAR_BOOL, F(persist_enabled), 0, 1, NULL, 1, "LLAMA_OPT_KV_PERSIST",
     "persist_enabled", "save sealed KV blocks to disk and restore them in later sessions (verified)", true},
    {"LLAMA_OPT_PERSIST_DIR", LLAMA_OPT_VAR_STRING, F(persist_dir), 0, 0, NULL, 1, NULL, "persist_dir",
     "directory for persisted KV blocks", true},
    {"LLAMA_OPT_RS_CKPT_INTERVAL", LLAMA_OPT_VAR_UINT, F(rs_ckpt_interval), 0, 1073741824.0, NULL, 1, NULL,
     "rs_ckpt_interval",
     "hybrid models: keep a recurrent-state checkpoint every this many KV blocks of a prompt (0: only at the ends "
     "of prompts and outputs)", true},
    {"LLAMA_OPT_RS_CKPT_MAX_MB", LLAMA_OPT_VAR_UINT, F(rs_ckpt_max_mb), 0, 1073741824.0, NULL, 1, NULL,
     "rs_ckpt_max_mb", "hybrid models: MiB of memory for recurrent-state checkpoints (LRU; 0: none kept)", true},
    {"LLAMA_OPT_MEMO_ENABLED", LLAMA_OPT_VAR_BOOL, F(memo_enabled), 0, 1, NULL, 1, "LLAMA_OPT_MEMO", "memo_enabled",
     "draft continuations from earlier outputs (keyed by the last n tokens) and verify them in one batch", true},
    {"LLAMA_OPT_MEMO_TRIE_MAX", LLAMA_OPT_VAR_UINT, F(memo_trie_max), 0, 1073741824.0, NULL, 1, NULL,
     "memo_trie_max", "max nodes of the memoization trie", true},
    {"LLAMA_OPT_ATTN_PRUNE_ENABLED", LLAMA_OPT_VAR_BOOL, F(attn_prune_enabled), 0, 1, NULL, 2,
     "LLAMA_OPT_ATTN_PRUNE", "attn_prune_enabled",
     "take KV blocks that receive little attention out of the attention set (kept, restorable)", true},
    {"LLAMA_OPT_ATTN_PRUNE_WINDOW", LLAMA_OPT_VAR_UINT, F(attn_prune_window), 1, 1048576, NULL, 2, NULL,
     "attn_prune_window", "threshold policy: consecutive turns below the threshold before a block is pruned", true},
    {"LLAMA_OPT_ATTN_PRUNE_THRESHOLD", LLAMA_OPT_VAR_FLOAT, F(attn_prune_threshold), 0, 1, NULL, 2, NULL,
     "attn_prune_threshold",
     "threshold policy: a block's weight (its share of a head's attention mass, max over heads) under which a turn "
     "counts as inactive, and over which the probe restores a pruned block", true},
    {"LLAMA_OPT_ATTN_PRUNE_POLICY", LLAMA_OPT_VAR_ENUM, F(attn_prune_policy), 0, 1, prune_policy_names, 2, NULL,
     "attn_prune_policy", "threshold (spec 4.1: inactive for WINDOW turns) or h2o (heavy hitters within BUDGET tokens)",
     true},
    {"LLAMA_OPT_ATTN_PRUNE_BUDGET", LLAMA_OPT_VAR_UINT, F(attn_prune_budget), 1, 1073741824.0, NULL, 2, NULL,
     "attn_prune_budget", "h2o policy: tokens in the attention set at most (protected ones included)", true},
    {"LLAMA_OPT_ATTN_PRUNE_KEEP_FIRST", LLAMA_OPT_VAR_UINT, F(attn_prune_keep_first), 0, 1073741824.0, NULL, 2, NULL,
     "attn_prune_keep_first", "tokens at the start of a sequence never pruned (attention sinks, system prompt)", true},
    {"LLAMA_OPT_ATTN_PRUNE_KEEP_LAST", LLAMA_OPT_VAR_UINT, F(attn_prune_keep_last), 0, 1073741824.0, NULL, 2, NULL,
     "attn_prune_keep_last", "tokens at the end of a sequence never pruned (the recent turns)", true},
    {"LLAMA_OPT_ATTN_STATS_ENABLED", LLAMA_OPT_VAR_BOOL, F(attn_stats_enabled), 0, 1, NULL, 0, NULL,
     "attn_stats_enabled",
     "collect per-block attention statistics (exact: results unchanged); pruning collects them anyway", true},
    {"LLAMA_OPT_SPARSE_ATTN_ENABLED", LLAMA_OPT_VAR_BOOL, F(sparse_attn_enabled), 0, 1, NULL, 2,
     "LLAMA_OPT_SPARSE_ATTN", "sparse_attn_enabled", "attend only to the relevant parts of tool results", false},
    {"LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD", LLAMA_OPT_VAR_FLOAT, F(sparse_relevance_threshold), 0, 1, NULL, 2, NULL,
     "sparse_relevance_threshold", "min relevance score of a tool-result block to be attended", false},
    {"LLAMA_OPT_STATS", LLAMA_OPT_VAR_BOOL, F(stats_enabled), 0, 1, NULL, 0, NULL, "stats_enabled",
     "print one line `opt-stats {json}` of per-turn counter deltas on stderr after every turn", true},
};

#undef F

#define N_VARS (sizeof vars / sizeof vars[0])

const struct llama_opt_var *llama_opt_config_var(size_t i) { return i < N_VARS ? &vars[i] : NULL; }

const struct llama_opt_var *llama_opt_config_find_var(const char *name) {
    for (size_t i = 0; i < N_VARS; i++)
        if (strcmp(vars[i].name, name) == 0) return &vars[i];
    return NULL;
}

/* Removed after the census (bench/census.c; docs/BENCHMARKS.md "Phase 5 census"). */
static const char *const removed[][2] = {
    {"LLAMA_OPT_ACT_DEDUP_ENABLED",
     "activation dedup (spec 5.1): the census found no duplicate row past layer 0 on real models; layer 0's "
     "(repeated tokens) would spare 0.3-1.3% of prefill's matrix work"},
    {"LLAMA_OPT_NOOP_ENABLED",
     "no-op elision (spec 5.2): the census found no all-ones norm, all-zero bias, zero branch output or zero "
     "matrix row; exact zeros in <= 0.05% of FFN activations, one-hot softmax rows in <= 0.07%"},
    {"LLAMA_OPT_ALGEBRAIC_ENABLED",
     "algebraic rewriting (spec 5.3): the census found no equal heads; q/k/v and gate/up already share one "
     "activation pass"},
};

const char *llama_opt_config_removed(const char *name) {
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
        if (strcmp(name, removed[i][0]) == 0) return removed[i][1];
    return NULL;
}

struct llama_opt_config llama_opt_config_default(void) {
    struct llama_opt_config c;
    memset(&c, 0, sizeof c);
    c.block_size = 64;
    c.dedup_enabled = LLAMA_OPT_DEDUP != 0;
    c.dedup_pool_max = 16384;
    c.diff_enabled = LLAMA_OPT_KV_DIFF != 0;
    c.diff_min_unchanged = 8;
    c.diff_mode = LLAMA_OPT_DIFF_EXACT;
    c.diff_recompute = 0.15f;
    c.schema_skip_enabled = LLAMA_OPT_SCHEMA_SKIP != 0;
    c.canon_enabled = LLAMA_OPT_KV_CANON != 0;
    c.precompute_enabled = LLAMA_OPT_PRECOMPUTE != 0;
    c.precompute_rope_max = 131072;
    c.persist_enabled = LLAMA_OPT_KV_PERSIST != 0;
    c.persist_dir[0] = '\0';
    c.rs_ckpt_interval = 16;
    c.rs_ckpt_max_mb = 2048;
    c.memo_enabled = LLAMA_OPT_MEMO != 0;
    c.memo_trie_max = 65536;
    c.attn_prune_enabled = LLAMA_OPT_ATTN_PRUNE != 0;
    c.attn_prune_window = 10;
    c.attn_prune_threshold = 0.001f;
    c.attn_stats_enabled = false;
    c.attn_prune_policy = LLAMA_OPT_PRUNE_THRESHOLD;
    c.attn_prune_budget = 4096;
    c.attn_prune_keep_first = 256;
    c.attn_prune_keep_last = 1024;
    c.sparse_attn_enabled = LLAMA_OPT_SPARSE_ATTN != 0;
    c.sparse_relevance_threshold = 0.1f;
    c.stats_enabled = false;
    return c;
}

/* ---- Parsing --------------------------------------------------------------- */

/* Value text for messages: bounded, so a huge variable cannot flood the log. */
#define SHOW(s) (int)(strlen(s) > 64 ? 64 : strlen(s)), (s), (strlen(s) > 64 ? "..." : "")

static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"1", "true", "on", "yes"};
    static const char *const no[] = {"0", "false", "off", "no"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) { *out = true; return true; }
        if (strcasecmp(s, no[i]) == 0) { *out = false; return true; }
    }
    return false;
}

/* Decimal digits only: no sign, no spaces, no hex; overflow-checked. */
static bool parse_uint(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v)) return false;
    }
    *out = v;
    return true;
}

static bool parse_float(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

static enum dj_status set_var(struct llama_opt_config *c, const struct llama_opt_var *v, const char *s) {
    char *field = (char *)c + v->offset;
    switch (v->type) {
    case LLAMA_OPT_VAR_BOOL: {
        bool b;
        if (!parse_bool(s, &b))
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': not a boolean (use 1/0, true/false, on/off, yes/no)",
                           v->name, SHOW(s));
        DJ_ASSERT(v->size == sizeof(bool));
        memcpy(field, &b, sizeof b);
        return DJ_OK;
    }
    case LLAMA_OPT_VAR_UINT: {
        uint64_t u;
        if (!parse_uint(s, &u))
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': not a non-negative decimal integer", v->name, SHOW(s));
        if ((double)u < v->min || (double)u > v->max)
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': out of range [%.0f, %.0f]", v->name, SHOW(s), v->min,
                           v->max);
        DJ_ASSERT(v->size == sizeof(uint32_t) && v->max <= U32MAX);
        uint32_t u32 = (uint32_t)u;
        memcpy(field, &u32, sizeof u32);
        return DJ_OK;
    }
    case LLAMA_OPT_VAR_FLOAT: {
        double d;
        if (!parse_float(s, &d))
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': not a finite number", v->name, SHOW(s));
        if (d < v->min || d > v->max)
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': out of range [%g, %g]", v->name, SHOW(s), v->min, v->max);
        DJ_ASSERT(v->size == sizeof(float));
        float f = (float)d;
        memcpy(field, &f, sizeof f);
        return DJ_OK;
    }
    case LLAMA_OPT_VAR_STRING: {
        size_t n = strlen(s);
        if (n >= v->size)
            return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': too long (%zu bytes, at most %zu)", v->name, SHOW(s), n,
                           v->size - 1);
        memcpy(field, s, n + 1);
        return DJ_OK;
    }
    case LLAMA_OPT_VAR_ENUM: {
        for (size_t i = 0; v->choices[i]; i++) {
            if (strcasecmp(s, v->choices[i]) == 0) {
                /* enum fields (diff_mode, attn_prune_policy) have int's size; the assert keeps it honest */
                DJ_ASSERT(v->size == sizeof(int));
                const int m = (int)i;
                memcpy(field, &m, sizeof m);
                return DJ_OK;
            }
        }
        char list[128] = "";
        for (size_t i = 0; v->choices[i]; i++) {
            strncat(list, i ? "|" : "", sizeof list - strlen(list) - 1);
            strncat(list, v->choices[i], sizeof list - strlen(list) - 1);
        }
        return dj_fail(DJ_ERR_INVALID, "%s='%.*s%s': unknown value (expected %s)", v->name, SHOW(s), list);
    }
    }
    DJ_ASSERT(0 && "unknown variable type");
    return DJ_ERR_INVALID;
}

enum dj_status llama_opt_config_load(struct llama_opt_config *cfg, llama_opt_getenv_fn get, void *ud) {
    DJ_ASSERT(cfg && get);
    struct llama_opt_config c = *cfg;
    for (size_t i = 0; i < N_VARS; i++) {
        const char *s = get(vars[i].name, ud);
        if (!s || !*s) continue; /* unset, or set to "" (the shell's way to unset for one command) */
        enum dj_status st = set_var(&c, &vars[i], s);
        if (st != DJ_OK) return st;
    }
    *cfg = c;
    return DJ_OK;
}

/* ---- Variables without behaviour yet ------------------------------------------ */

/* Floats by value, strings up to their NUL, the rest by bytes (bools and the enum are
 * stored whole by the loader). */
static bool differs_from_default(const struct llama_opt_config *cfg, const struct llama_opt_var *v) {
    const struct llama_opt_config d = llama_opt_config_default();
    const char *a = (const char *)cfg + v->offset, *b = (const char *)&d + v->offset;
    switch (v->type) {
    case LLAMA_OPT_VAR_FLOAT: {
        float x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return x != y;
    }
    case LLAMA_OPT_VAR_STRING: return strncmp(a, b, v->size) != 0;
    default: return memcmp(a, b, v->size) != 0;
    }
}

size_t llama_opt_config_not_implemented(const struct llama_opt_config *cfg, const struct llama_opt_var **out,
                                        size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < N_VARS; i++) {
        if (vars[i].implemented || !differs_from_default(cfg, &vars[i])) continue;
        if (n < cap) out[n] = &vars[i];
        n++;
    }
    return n;
}

size_t llama_opt_config_format_value(const struct llama_opt_config *cfg, const struct llama_opt_var *v, char *buf,
                                     size_t cap) {
    const char *field = (const char *)cfg + v->offset;
    int n = 0;
    switch (v->type) {
    case LLAMA_OPT_VAR_BOOL: {
        bool b;
        memcpy(&b, field, sizeof b);
        n = snprintf(buf, cap, "%d", b ? 1 : 0);
        break;
    }
    case LLAMA_OPT_VAR_UINT: {
        uint32_t u;
        memcpy(&u, field, sizeof u);
        n = snprintf(buf, cap, "%u", u);
        break;
    }
    case LLAMA_OPT_VAR_FLOAT: {
        float f;
        memcpy(&f, field, sizeof f);
        n = snprintf(buf, cap, "%g", (double)f);
        break;
    }
    case LLAMA_OPT_VAR_STRING: n = snprintf(buf, cap, "%.*s", (int)strnlen(field, v->size), field); break;
    case LLAMA_OPT_VAR_ENUM: {
        int m;
        memcpy(&m, field, sizeof m);
        size_t nc = 0;
        while (v->choices[nc]) nc++;
        n = snprintf(buf, cap, "%s", m >= 0 && (size_t)m < nc ? v->choices[m] : "?");
        break;
    }
    }
    return n < 0 ? 0 : (size_t)n;
}

/* Bit i: variable i was warned about in this process (the table has fewer than 64). */
static atomic_uint_fast64_t warned;

size_t llama_opt_config_warn_not_implemented(const struct llama_opt_config *cfg) {
    _Static_assert(sizeof vars / sizeof vars[0] <= 64, "one bit per variable in `warned`");
    size_t printed = 0;
    for (size_t i = 0; i < N_VARS; i++) {
        if (vars[i].implemented || !differs_from_default(cfg, &vars[i])) continue;
        const uint_fast64_t bit = (uint_fast64_t)1 << i;
        if (atomic_fetch_or(&warned, bit) & bit) continue;
        char val[80];
        llama_opt_config_format_value(cfg, &vars[i], val, sizeof val);
        dj_log(DJ_LOG_WARN, "%s=%s: not implemented yet, has no effect (docs/CONFIG.md)", vars[i].name, val);
        printed++;
    }
    return printed;
}

static const char *process_getenv(const char *name, void *ud) {
    (void)ud;
    return getenv(name);
}

extern char **environ;

enum dj_status llama_opt_config_from_env(struct llama_opt_config *cfg) {
    struct llama_opt_config c = llama_opt_config_default();
    enum dj_status st = llama_opt_config_load(&c, process_getenv, NULL);
    if (st != DJ_OK) return st;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "LLAMA_OPT_", 10) != 0) continue;
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;
        for (size_t i = 0; i < N_VARS && !known; i++)
            known = strlen(vars[i].name) == n && memcmp(vars[i].name, *e, n) == 0;
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(n > 80 ? 80 : n), *e);
        const char *why = known ? NULL : llama_opt_config_removed(name);
        if (why) dj_log(DJ_LOG_WARN, "%s was removed: %s; ignored (docs/CONFIG.md)", name, why);
        else if (!known) dj_log(DJ_LOG_WARN, "unknown variable %s ignored (see docs/CONFIG.md)", name);
    }
    llama_opt_config_warn_not_implemented(&c);
    *cfg = c;
    return DJ_OK;
}
