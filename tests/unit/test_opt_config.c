/*
 * test_opt_config.c — src/opt: the spec's defaults (Tier 2 off), the
 * compile-time definitions, every LLAMA_OPT_* variable parsed through a fake
 * environment, invalid values rejected with a message naming variable and
 * value (config untouched), the real environment, the stats counters and the
 * `opt-stats {json}` line, docs/CONFIG.md listing every variable and
 * CMake option of the table and marking the ones not implemented yet; the
 * 16 variables without behaviour: listed when set to a non-default value
 * (through the getenv-callback loader), warned about once per process, and
 * `deja bench` / `deja perplexity` reading the environment (a warning for
 * those, exit 1 with the message for a bad value).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opt/opt.h"
#include "test.h"
#include "test_run.h"

static const char *shared;

struct fake_env {
    const char *names[32];
    const char *values[32];
    int n;
};

static const char *fake_get(const char *name, void *ud) {
    const struct fake_env *e = ud;
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->names[i], name) == 0) return e->values[i];
    return NULL;
}

static enum dj_status load1(struct llama_opt_config *c, const char *name, const char *value) {
    struct fake_env e = {{name}, {value}, 1};
    return llama_opt_config_load(c, fake_get, &e);
}

static void test_defaults(void) {
    struct llama_opt_config c = llama_opt_config_default();
    /* spec §1.1 defaults */
    CHECK(c.block_size == 64);
    CHECK(c.dedup_pool_max == 16384);
    CHECK(c.diff_min_unchanged == 8);
    CHECK(c.precompute_rope_max == 131072);
    CHECK(c.memo_trie_max == 65536);
    CHECK(c.attn_prune_window == 10);
    CHECK(fabsf(c.attn_prune_threshold - 0.001f) == 0.0f);
    CHECK(fabsf(c.sparse_relevance_threshold - 0.1f) == 0.0f);
    CHECK(c.persist_dir[0] == '\0');
    CHECK(c.stats_enabled == false);
    /* DESIGN.md additions */
    CHECK(c.diff_mode == LLAMA_OPT_DIFF_EXACT);
    CHECK(fabsf(c.diff_recompute - 0.15f) == 0.0f);
    /* flags follow the compile-time definitions (CMake options, spec defaults) */
    CHECK(c.dedup_enabled == (LLAMA_OPT_DEDUP != 0));
    CHECK(c.diff_enabled == (LLAMA_OPT_KV_DIFF != 0));
    CHECK(c.schema_skip_enabled == (LLAMA_OPT_SCHEMA_SKIP != 0));
    CHECK(c.canon_enabled == (LLAMA_OPT_KV_CANON != 0));
    CHECK(c.precompute_enabled == (LLAMA_OPT_PRECOMPUTE != 0));
    CHECK(c.persist_enabled == (LLAMA_OPT_KV_PERSIST != 0));
    CHECK(c.memo_enabled == (LLAMA_OPT_MEMO != 0));
    CHECK(c.attn_prune_enabled == (LLAMA_OPT_ATTN_PRUNE != 0));
    CHECK(c.sparse_attn_enabled == (LLAMA_OPT_SPARSE_ATTN != 0));
#if LLAMA_OPT_DEDUP && LLAMA_OPT_KV_DIFF && LLAMA_OPT_SCHEMA_SKIP && LLAMA_OPT_KV_CANON && LLAMA_OPT_PRECOMPUTE && \
    !LLAMA_OPT_KV_PERSIST && LLAMA_OPT_MEMO && !LLAMA_OPT_ATTN_PRUNE && !LLAMA_OPT_SPARSE_ATTN
    printf("compile-time defaults: the spec's\n");
#else
    printf("compile-time defaults: changed by CMake options\n");
#endif
    /* Tier 2 is off by default: every Tier-2 boolean, and diff_mode = exact. */
    int tier2_on = 0;
    for (size_t i = 0; llama_opt_config_var(i); i++) {
        const struct llama_opt_var *v = llama_opt_config_var(i);
        if (v->tier == 2 && v->type == LLAMA_OPT_VAR_BOOL) {
            bool b;
            memcpy(&b, (const char *)&c + v->offset, sizeof b);
            if (b) { tier2_on++; fprintf(stderr, "Tier-2 %s on by default\n", v->name); }
        }
    }
    CHECK(tier2_on == 0);
}

static void test_table(void) {
    size_t n = 0;
    int bad = 0;
    for (; llama_opt_config_var(n); n++) {
        const struct llama_opt_var *v = llama_opt_config_var(n);
        if (strncmp(v->name, "LLAMA_OPT_", 10) != 0) bad++;
        if (llama_opt_config_find_var(v->name) != v) bad++;
        if (v->offset + v->size > sizeof(struct llama_opt_config)) bad++;
        if (!v->doc || !*v->doc || !v->field) bad++;
        if (v->tier < 0 || v->tier > 2) bad++;
        for (size_t j = 0; j < n; j++)
            if (llama_opt_config_var(j)->offset == v->offset) bad++;
    }
    CHECKF(bad == 0, "%d bad table entries", bad);
    CHECK(n == 28); /* the spec's 24 - the 3 of Phase 5 + LLAMA_OPT_RS_CKPT_INTERVAL, _MAX_MB + the 5 of attention
                       statistics and pruning */
    CHECK(llama_opt_config_find_var("LLAMA_OPT_NOPE") == NULL);
    /* The spec's table: every variable is present. */
    static const char *const spec[] = {
        "LLAMA_OPT_BLOCK_SIZE", "LLAMA_OPT_DEDUP_ENABLED", "LLAMA_OPT_DEDUP_POOL_MAX", "LLAMA_OPT_DIFF_ENABLED",
        "LLAMA_OPT_DIFF_MIN_UNCHANGED", "LLAMA_OPT_SCHEMA_SKIP_ENABLED", "LLAMA_OPT_CANON_ENABLED",
        "LLAMA_OPT_PRECOMPUTE_ENABLED", "LLAMA_OPT_PERSIST_ENABLED", "LLAMA_OPT_PERSIST_DIR", "LLAMA_OPT_MEMO_ENABLED",
        "LLAMA_OPT_ATTN_PRUNE_ENABLED", "LLAMA_OPT_ATTN_PRUNE_WINDOW", "LLAMA_OPT_ATTN_PRUNE_THRESHOLD",
        "LLAMA_OPT_SPARSE_ATTN_ENABLED", "LLAMA_OPT_STATS", "LLAMA_OPT_DIFF_MODE", "LLAMA_OPT_DIFF_RECOMPUTE"};
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++)
        CHECKF(llama_opt_config_find_var(spec[i]) != NULL, "%s missing", spec[i]);
    /* the spec's Phase-5 switches: removed after the census, each with its reason */
    static const char *const gone[] = {"LLAMA_OPT_ACT_DEDUP_ENABLED", "LLAMA_OPT_NOOP_ENABLED",
                                       "LLAMA_OPT_ALGEBRAIC_ENABLED"};
    for (size_t i = 0; i < 3; i++)
        CHECKF(llama_opt_config_find_var(gone[i]) == NULL && llama_opt_config_removed(gone[i]) &&
                   strstr(llama_opt_config_removed(gone[i]), "found"),
               "%s", gone[i]);
    CHECK(llama_opt_config_removed("LLAMA_OPT_DEDUP_ENABLED") == NULL);
}

static void test_load_valid(void) {
    struct llama_opt_config c = llama_opt_config_default();
    struct fake_env e = {{"LLAMA_OPT_BLOCK_SIZE", "LLAMA_OPT_DEDUP_ENABLED", "LLAMA_OPT_DIFF_MODE",
                          "LLAMA_OPT_DIFF_RECOMPUTE", "LLAMA_OPT_PERSIST_DIR", "LLAMA_OPT_STATS",
                          "LLAMA_OPT_ATTN_PRUNE_THRESHOLD", "LLAMA_OPT_DEDUP_POOL_MAX"},
                         {"32", "off", "APPROX", "0.25", "/tmp/kv", "1", "1e-4", "1073741824"},
                         8};
    CHECK(llama_opt_config_load(&c, fake_get, &e) == DJ_OK);
    CHECK(c.block_size == 32);
    CHECK(c.dedup_enabled == false);
    CHECK(c.diff_mode == LLAMA_OPT_DIFF_APPROX);
    CHECK(c.diff_recompute == 0.25f);
    CHECK(strcmp(c.persist_dir, "/tmp/kv") == 0);
    CHECK(c.stats_enabled == true);
    CHECK(c.attn_prune_threshold == 1e-4f);
    CHECK(c.dedup_pool_max == 1073741824u);
    /* the untouched fields keep their values */
    CHECK(c.diff_min_unchanged == 8 && c.memo_enabled == (LLAMA_OPT_MEMO != 0));

    /* every boolean spelling */
    static const char *const yes[] = {"1", "true", "TRUE", "on", "Yes"}, *const no[] = {"0", "false", "Off", "NO"};
    for (size_t i = 0; i < 5; i++) {
        c.attn_stats_enabled = false;
        CHECK(load1(&c, "LLAMA_OPT_ATTN_STATS_ENABLED", yes[i]) == DJ_OK && c.attn_stats_enabled);
    }
    for (size_t i = 0; i < 4; i++) {
        c.attn_stats_enabled = true;
        CHECK(load1(&c, "LLAMA_OPT_ATTN_STATS_ENABLED", no[i]) == DJ_OK && !c.attn_stats_enabled);
    }
    /* "" counts as unset */
    c.block_size = 64;
    CHECK(load1(&c, "LLAMA_OPT_BLOCK_SIZE", "") == DJ_OK && c.block_size == 64);
    /* range ends are accepted */
    CHECK(load1(&c, "LLAMA_OPT_BLOCK_SIZE", "1") == DJ_OK && c.block_size == 1);
    CHECK(load1(&c, "LLAMA_OPT_BLOCK_SIZE", "65536") == DJ_OK && c.block_size == 65536);
    CHECK(load1(&c, "LLAMA_OPT_DIFF_RECOMPUTE", "0") == DJ_OK && c.diff_recompute == 0.0f);
    CHECK(load1(&c, "LLAMA_OPT_DIFF_RECOMPUTE", "1") == DJ_OK && c.diff_recompute == 1.0f);
    CHECK(load1(&c, "LLAMA_OPT_DIFF_MODE", "exact") == DJ_OK && c.diff_mode == LLAMA_OPT_DIFF_EXACT);

    /* every variable of the table takes a valid value of its type */
    int bad = 0;
    for (size_t i = 0; llama_opt_config_var(i); i++) {
        const struct llama_opt_var *v = llama_opt_config_var(i);
        const char *val = v->type == LLAMA_OPT_VAR_BOOL     ? "1"
                          : v->type == LLAMA_OPT_VAR_UINT   ? "10"
                          : v->type == LLAMA_OPT_VAR_FLOAT  ? "0.5"
                          : v->type == LLAMA_OPT_VAR_STRING ? "x"
                                                            : v->choices[1]; /* approx, h2o */
        struct llama_opt_config d = llama_opt_config_default();
        if (load1(&d, v->name, val) != DJ_OK) { bad++; fprintf(stderr, "%s=%s: %s\n", v->name, val, dj_last_error()); }
        const char *field = (const char *)&d + v->offset;
        bool b; uint32_t u; float fl; enum llama_opt_diff_mode m;
        switch (v->type) {
        case LLAMA_OPT_VAR_BOOL: memcpy(&b, field, sizeof b); bad += !b; break;
        case LLAMA_OPT_VAR_UINT: memcpy(&u, field, sizeof u); bad += u != 10; break;
        case LLAMA_OPT_VAR_FLOAT: memcpy(&fl, field, sizeof fl); bad += fl != 0.5f; break;
        case LLAMA_OPT_VAR_STRING: bad += strcmp(field, "x") != 0; break;
        case LLAMA_OPT_VAR_ENUM: memcpy(&m, field, sizeof m); bad += (int)m != 1; break; /* approx, h2o */
        }
    }
    CHECK(bad == 0);
}

/* An invalid value: DJ_ERR_INVALID, a message naming the variable and the
 * value, and the config left exactly as it was. */
static void expect_invalid(const char *name, const char *value, const char *show) {
    struct llama_opt_config c = llama_opt_config_default(), before;
    c.block_size = 48; /* something not default, to see it survive */
    before = c;
    /* a valid variable in the same load must not be applied either */
    struct fake_env e = {{"LLAMA_OPT_BLOCK_SIZE", name}, {"16", value}, 2};
    if (strcmp(name, "LLAMA_OPT_BLOCK_SIZE") == 0) e.n = 1, e.values[0] = value;
    enum dj_status st = llama_opt_config_load(&c, fake_get, &e);
    const char *msg = dj_last_error();
    CHECKF(st == DJ_ERR_INVALID, "%s=%s accepted", name, value);
    CHECKF(strstr(msg, name) != NULL && strstr(msg, show) != NULL, "%s=%s: message '%s'", name, value, msg);
    CHECKF(memcmp(&c, &before, sizeof c) == 0, "%s=%s: config changed on failure", name, value);
}

static void test_load_invalid(void) {
    expect_invalid("LLAMA_OPT_DEDUP_ENABLED", "maybe", "'maybe'");
    expect_invalid("LLAMA_OPT_DEDUP_ENABLED", "2", "'2'");
    expect_invalid("LLAMA_OPT_STATS", " 1", "' 1'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "0", "'0'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "65537", "'65537'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "-1", "'-1'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "64k", "'64k'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "0x40", "'0x40'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "1.5", "'1.5'");
    expect_invalid("LLAMA_OPT_BLOCK_SIZE", "+64", "'+64'");
    expect_invalid("LLAMA_OPT_DEDUP_POOL_MAX", "99999999999999999999999", "'99999999999999999999999'");
    expect_invalid("LLAMA_OPT_DEDUP_POOL_MAX", "4294967296", "'4294967296'");
    expect_invalid("LLAMA_OPT_ATTN_PRUNE_WINDOW", "0", "'0'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "1.01", "'1.01'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "-0.1", "'-0.1'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "nan", "'nan'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "inf", "'inf'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "0.1x", "'0.1x'");
    expect_invalid("LLAMA_OPT_DIFF_RECOMPUTE", "1e999", "'1e999'");
    expect_invalid("LLAMA_OPT_ATTN_PRUNE_THRESHOLD", "abc", "'abc'");
    expect_invalid("LLAMA_OPT_DIFF_MODE", "fuzzy", "'fuzzy'");
    expect_invalid("LLAMA_OPT_DIFF_MODE", "exactly", "'exactly'");
    /* too long a directory; the message shows a bounded prefix */
    char *longdir = malloc(LLAMA_OPT_PERSIST_DIR_MAX + 10);
    memset(longdir, 'd', LLAMA_OPT_PERSIST_DIR_MAX + 9);
    longdir[LLAMA_OPT_PERSIST_DIR_MAX + 9] = '\0';
    expect_invalid("LLAMA_OPT_PERSIST_DIR", longdir, "dddd...");
    free(longdir);
    /* the enum message lists the choices */
    struct llama_opt_config c = llama_opt_config_default();
    load1(&c, "LLAMA_OPT_DIFF_MODE", "fuzzy");
    CHECK(strstr(dj_last_error(), "exact|approx") != NULL);
}

static void test_real_env(void) {
    struct llama_opt_config c;
    memset(&c, 0xab, sizeof c);
    unsetenv("LLAMA_OPT_BLOCK_SIZE");
    unsetenv("LLAMA_OPT_DIFF_MODE");
    CHECK(llama_opt_config_from_env(&c) == DJ_OK);
    struct llama_opt_config d = llama_opt_config_default();
    /* ctest runs with a clean LLAMA_OPT_* environment unless a developer set one */
    if (!getenv("LLAMA_OPT_STATS")) CHECK(c.stats_enabled == d.stats_enabled);
    setenv("LLAMA_OPT_BLOCK_SIZE", "128", 1);
    setenv("LLAMA_OPT_DIFF_MODE", "approx", 1);
    setenv("LLAMA_OPT_DEDUP_ENABLE", "1", 1); /* a typo: warned about, not an error */
    CHECK(llama_opt_config_from_env(&c) == DJ_OK);
    CHECK(c.block_size == 128 && c.diff_mode == LLAMA_OPT_DIFF_APPROX);
    setenv("LLAMA_OPT_BLOCK_SIZE", "huge", 1);
    struct llama_opt_config before = c;
    CHECK(llama_opt_config_from_env(&c) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "LLAMA_OPT_BLOCK_SIZE") && strstr(dj_last_error(), "huge"));
    CHECK(memcmp(&c, &before, sizeof c) == 0); /* out-param untouched on failure */
    unsetenv("LLAMA_OPT_BLOCK_SIZE");
    unsetenv("LLAMA_OPT_DIFF_MODE");
    unsetenv("LLAMA_OPT_DEDUP_ENABLE");
}

static void test_stats(void) {
    struct llama_opt_stats last, now;
    llama_opt_stats_reset(&last);
    llama_opt_stats_reset(&now);
    CHECK(llama_opt_stats_n_fields() == 33); /* the spec's 26 + 3 Tier-2 diff counters + 4 recurrent-state ones
                                                + attn_blocks_restored, attn_tokens_skipped, ctx_tokens_dropped
                                                - the 3 of Phase 5 */
    CHECK(strcmp(llama_opt_stats_field_name(0), "dedup_blocks_total") == 0);
    CHECK(strcmp(llama_opt_stats_field_name(6), "diff_tokens_approx") == 0);
    CHECK(strcmp(llama_opt_stats_field_name(21), "rs_ckpt_saves") == 0);
    CHECK(strcmp(llama_opt_stats_field_name(32), "ctx_tokens_dropped") == 0);
    CHECK(llama_opt_stats_field_name(33) == NULL);

    now.dedup_blocks_total = 10;
    now.dedup_blocks_hit = 7;
    now.diff_tokens_total = 5000;
    now.ctx_tokens_dropped = UINT64_MAX; /* the largest value prints in full */
    FILE *f = tmpfile();
    CHECK(f != NULL);
    CHECK(llama_opt_stats_print_turn(f, &last, &now) == 0);
    CHECK(memcmp(&last, &now, sizeof now) == 0); /* the baseline moved */
    now.dedup_blocks_total = 13;                 /* next turn: +3 */
    CHECK(llama_opt_stats_print_turn(f, &last, &now) == 0);
    rewind(f);
    char line1[4096], line2[4096];
    CHECK(fgets(line1, sizeof line1, f) != NULL);
    CHECK(fgets(line2, sizeof line2, f) != NULL);
    fclose(f);
    const char *want1 = "opt-stats {\"dedup_blocks_total\":10,\"dedup_blocks_hit\":7,\"dedup_tokens_saved\":0,"
                        "\"diff_tokens_total\":5000,";
    CHECK(strncmp(line1, want1, strlen(want1)) == 0);
    CHECK(strstr(line1, ",\"ctx_tokens_dropped\":18446744073709551615}\n") != NULL);
    CHECK(strstr(line2, "\"dedup_blocks_total\":3,\"dedup_blocks_hit\":0,") != NULL);
    CHECK(strstr(line2, "\"ctx_tokens_dropped\":0}\n") != NULL);
    /* every counter appears exactly once, in declaration order */
    const char *p = line1;
    int bad = 0;
    for (size_t i = 0; i < llama_opt_stats_n_fields(); i++) {
        char key[64];
        snprintf(key, sizeof key, "\"%s\":", llama_opt_stats_field_name(i));
        const char *q = strstr(p, key);
        if (!q) bad++;
        else p = q + 1;
    }
    CHECK(bad == 0);

    /* format: snprintf semantics, truncated output still terminated */
    char small[16];
    size_t need = llama_opt_stats_format(&now, small, sizeof small);
    CHECK(need > sizeof small && strlen(small) == sizeof small - 1 && strncmp(small, "{\"dedup_blocks_t", 15) == 0);
    char *big = malloc(need + 1);
    CHECK(llama_opt_stats_format(&now, big, need + 1) == need && strlen(big) == need);
    free(big);

    struct llama_opt_stats d;
    now.memo_hits = 4;
    last.memo_hits = 1;
    llama_opt_stats_delta(&now, &last, &d);
    CHECK(d.memo_hits == 3 && d.dedup_blocks_total == 0);
}

/* ---- variables that have no behaviour yet ---------------------------------------- */

/* The 10 that src/ does not read yet (grep for the fields: only src/opt touches them). */
static const char *const not_impl[] = {
    "LLAMA_OPT_SPARSE_ATTN_ENABLED",
    "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD"};
#define N_NOT_IMPL (sizeof not_impl / sizeof not_impl[0])

/* A value of v's type that differs from its default. */
static const char *non_default(const struct llama_opt_var *v) {
    const struct llama_opt_config d = llama_opt_config_default();
    bool b;
    switch (v->type) {
    case LLAMA_OPT_VAR_BOOL: memcpy(&b, (const char *)&d + v->offset, sizeof b); return b ? "0" : "1";
    case LLAMA_OPT_VAR_UINT: return "7";
    case LLAMA_OPT_VAR_FLOAT: return "0.5";
    case LLAMA_OPT_VAR_STRING: return "/tmp/kv";
    case LLAMA_OPT_VAR_ENUM: return "approx";
    }
    return NULL;
}

/* Runs fn with stderr going to a temp file; returns what it wrote (malloc'd). */
static char *capture_stderr(size_t (*fn)(const struct llama_opt_config *), const struct llama_opt_config *c,
                            size_t *ret) {
    fflush(stderr);
    const int saved = dup(2);
    FILE *tmp = tmpfile();
    if (saved < 0 || !tmp) abort();
    dup2(fileno(tmp), 2);
    *ret = fn(c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long n = ftell(tmp);
    char *buf = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(tmp);
    if (n > 0 && fread(buf, 1, (size_t)n, tmp) != (size_t)n) buf[0] = '\0';
    fclose(tmp);
    return buf;
}

static size_t count_lines(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_not_implemented(void) {
    /* the table says exactly these 2 are not implemented */
    size_t n_false = 0;
    for (size_t i = 0; llama_opt_config_var(i); i++) {
        const struct llama_opt_var *v = llama_opt_config_var(i);
        bool listed = false;
        for (size_t j = 0; j < N_NOT_IMPL; j++) listed |= strcmp(not_impl[j], v->name) == 0;
        CHECKF(listed == !v->implemented, "%s: implemented = %d", v->name, v->implemented);
        n_false += !v->implemented;
    }
    CHECK(n_false == 2 && N_NOT_IMPL == 2);

    /* defaults: nothing to warn about */
    struct llama_opt_config c = llama_opt_config_default();
    CHECK(llama_opt_config_not_implemented(&c, NULL, 0) == 0);

    /* each one alone, at a non-default value through the getenv-callback loader: listed, alone */
    for (size_t j = 0; j < N_NOT_IMPL; j++) {
        const struct llama_opt_var *v = llama_opt_config_find_var(not_impl[j]), *out[4] = {NULL};
        if (!v) continue;
        c = llama_opt_config_default();
        CHECK(load1(&c, v->name, non_default(v)) == DJ_OK);
        CHECKF(llama_opt_config_not_implemented(&c, out, 4) == 1 && out[0] == v, "%s=%s not listed", v->name,
               non_default(v));
    }
    /* implemented variables and default values are never listed; the list is in table order */
    struct fake_env e = {{"LLAMA_OPT_BLOCK_SIZE", "LLAMA_OPT_DEDUP_ENABLED", "LLAMA_OPT_DIFF_MODE", "LLAMA_OPT_STATS",
                          "LLAMA_OPT_MEMO_ENABLED", "LLAMA_OPT_CANON_ENABLED", "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD",
                          "LLAMA_OPT_ATTN_STATS_ENABLED", "LLAMA_OPT_PERSIST_DIR", "LLAMA_OPT_SPARSE_ATTN_ENABLED"},
                         {"32", "0", "approx", "1", LLAMA_OPT_MEMO ? "on" : "off", LLAMA_OPT_KV_CANON ? "0" : "1",
                          "0.7", "1", "/tmp/kv", LLAMA_OPT_SPARSE_ATTN ? "0" : "1"},
                         10};
    c = llama_opt_config_default();
    CHECK(llama_opt_config_load(&c, fake_get, &e) == DJ_OK);
    const struct llama_opt_var *out[8] = {NULL};
    const size_t n = llama_opt_config_not_implemented(&c, out, 8);
    CHECKF(n == 2, "%zu listed", n);
    if (n == 2) {
        CHECK(strcmp(out[0]->name, "LLAMA_OPT_SPARSE_ATTN_ENABLED") == 0);
        CHECK(strcmp(out[1]->name, "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD") == 0);
    }
    CHECK(llama_opt_config_not_implemented(&c, out, 1) == 2); /* the count, whatever the room */

    /* values as the environment spells them */
    char buf[64];
    CHECK(llama_opt_config_format_value(&c, llama_opt_config_find_var("LLAMA_OPT_PERSIST_DIR"), buf, sizeof buf) == 7 &&
          strcmp(buf, "/tmp/kv") == 0);
    llama_opt_config_format_value(&c, llama_opt_config_find_var("LLAMA_OPT_ATTN_STATS_ENABLED"), buf, sizeof buf);
    CHECK(strcmp(buf, "1") == 0);
    llama_opt_config_format_value(&c, llama_opt_config_find_var("LLAMA_OPT_DIFF_MODE"), buf, sizeof buf);
    CHECK(strcmp(buf, "approx") == 0);
    llama_opt_config_format_value(&c, llama_opt_config_find_var("LLAMA_OPT_BLOCK_SIZE"), buf, sizeof buf);
    CHECK(strcmp(buf, "32") == 0);
    llama_opt_config_format_value(&c, llama_opt_config_find_var("LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD"), buf, sizeof buf);
    CHECK(strcmp(buf, "0.7") == 0);

    /* the warning: one line per variable, once per process */
    size_t printed = 0;
    char *err = capture_stderr(llama_opt_config_warn_not_implemented, &c, &printed);
    CHECKF(printed == 2 && count_lines(err, "not implemented yet, has no effect") == 2, "first warning: %s", err);
    CHECKF(strstr(err, "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD=") && strstr(err, "LLAMA_OPT_SPARSE_ATTN_ENABLED=") &&
               !strstr(err, "LLAMA_OPT_PERSIST_DIR"),
           "first warning: %s", err);
    free(err);
    err = capture_stderr(llama_opt_config_warn_not_implemented, &c, &printed);
    CHECKF(printed == 0 && err[0] == '\0', "warned again: %s", err);
    free(err);

    /* llama_opt_config_from_env: a removed variable is named with its reason, each call */
    setenv("LLAMA_OPT_NOOP_ENABLED", "1", 1);
    fflush(stderr);
    const int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    CHECK(llama_opt_config_from_env(&c) == DJ_OK);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    rewind(tmp);
    size_t got = fread(text, 1, sizeof text - 1, tmp);
    text[got] = '\0';
    fclose(tmp);
    CHECKF(count_lines(text, "LLAMA_OPT_NOOP_ENABLED was removed: no-op elision") == 1 && !strstr(text, "unknown"),
           "from_env: %s", text);
    unsetenv("LLAMA_OPT_NOOP_ENABLED");
}

/* deja bench and deja perplexity read the environment: a setting without behaviour is
 * warned about once, a bad value stops the command with the message and exit 1. */
static void test_commands(void) {
    if (!shared || !deja_bin) {
        printf("command checks skipped: no shared dir / deja binary given\n");
        return;
    }
    char model[4096], text[4096];
    snprintf(model, sizeof model, "%s", test_shared_path(shared, "models/stories260K.gguf"));
    snprintf(text, sizeof text, "%s", test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf.inp"));
    char *out = NULL;
    setenv("LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD", "0.7", 1);
    int rc = RUN(&out, "bench", "-m", model, "-p", "8", "-n", "2", "-r", "1");
    CHECKF(rc == 0 && count_lines(out, "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD=0.7: not implemented yet, has no effect") == 1,
           "bench: rc %d: %s", rc, out);
    free(out);
    rc = RUN(&out, "perplexity", "-m", model, "-f", text, "-c", "32", "--chunks", "1");
    CHECKF(rc == 0 && count_lines(out, "LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD=0.7: not implemented yet, has no effect") == 1,
           "perplexity: rc %d: %s", rc, out);
    free(out);
    unsetenv("LLAMA_OPT_SPARSE_RELEVANCE_THRESHOLD");
    setenv("LLAMA_OPT_DEDUP_POOL_MAX", "lots", 1);
    rc = RUN(&out, "bench", "-m", model, "-p", "8", "-n", "2", "-r", "1");
    CHECKF(rc == 1 && strstr(out, "LLAMA_OPT_DEDUP_POOL_MAX='lots'"), "bench: rc %d: %s", rc, out);
    free(out);
    rc = RUN(&out, "perplexity", "-m", model, "-f", text, "-c", "32", "--chunks", "1");
    CHECKF(rc == 1 && strstr(out, "LLAMA_OPT_DEDUP_POOL_MAX='lots'"), "perplexity: rc %d: %s", rc, out);
    free(out);
    unsetenv("LLAMA_OPT_DEDUP_POOL_MAX");
}

/* docs/CONFIG.md (found from this file's path) names every variable and every CMake option. */
static void test_docs(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *cut = strstr(path, "tests/unit/test_opt_config.c");
    if (!cut) { printf("docs check skipped: __FILE__ is relative (%s)\n", __FILE__); return; }
    strcpy(cut, "docs/CONFIG.md");
    char *doc = test_read_file(path, NULL);
    CHECKF(doc != NULL, "cannot read %s", path);
    if (!doc) return;
    int missing = 0;
    for (size_t i = 0; llama_opt_config_var(i); i++) {
        const struct llama_opt_var *v = llama_opt_config_var(i);
        char key[128];
        snprintf(key, sizeof key, "`%s`", v->name);
        if (!strstr(doc, key)) { missing++; fprintf(stderr, "CONFIG.md lacks %s\n", key); }
        if (v->cmake) {
            snprintf(key, sizeof key, "`%s`", v->cmake);
            if (!strstr(doc, key)) { missing++; fprintf(stderr, "CONFIG.md lacks %s\n", key); }
        }
        /* its row in the variables table says whether it is implemented */
        snprintf(key, sizeof key, "\n| `%s` |", v->name);
        const char *row = strstr(doc, key), *end = row ? strchr(row + 1, '\n') : NULL;
        if (!row || !end) {
            missing++;
            fprintf(stderr, "CONFIG.md has no table row for %s\n", v->name);
            continue;
        }
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(end - row), row);
        if ((strstr(line, "Not implemented yet") != NULL) == v->implemented) {
            missing++;
            fprintf(stderr, "CONFIG.md's row for %s %s 'Not implemented yet'\n", v->name,
                    v->implemented ? "says" : "does not say");
        }
    }
    CHECK(missing == 0);
    free(doc);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : NULL;
    deja_bin = argc > 2 ? argv[2] : NULL;
    test_defaults();
    test_table();
    test_load_valid();
    test_load_invalid();
    test_real_env();
    test_stats();
    test_not_implemented();
    test_commands();
    test_docs();
    TEST_END();
}
