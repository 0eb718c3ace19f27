/*
 * test_persist_cli.c — the persistent KV store through `deja replay` and
 * `deja run` (issue 13): --kv-dir, --kv-dir-max-gib and the
 * LLAMA_OPT_PERSIST_* environment, each in new processes, as after a restart.
 *
 * replay (codelm-15m, two real traces interleaved, 3 turns each, -n 4):
 *  - a cold reference with persistence off gives the logits and ids hashes;
 *  - run 1 on a fresh --kv-dir: the cold hashes, nothing from disk (the store
 *    was empty), blocks written; run 2, a new process on the same directory:
 *    its first turn reports n_reused_disk > 0 in --json (per turn and in the
 *    totals) and in the per-turn line's disk column, computes less, and still
 *    gives the cold hashes (restore == recompute);
 *  - the environment alone (LLAMA_OPT_PERSIST_ENABLED=1, LLAMA_OPT_PERSIST_DIR)
 *    does the same; --kv-dir wins over both variables (another directory in
 *    LLAMA_OPT_PERSIST_DIR gets nothing; LLAMA_OPT_PERSIST_ENABLED=0 is
 *    overridden);
 *  - --restart-each-turn: with persistence off every turn computes its whole
 *    prompt and the hashes are the cold ones; on a fresh --kv-dir every turn but
 *    each session's first reuses from disk, computes exactly the tool's modelled minimum,
 *    and the hashes are the cold ones.
 * run (codelm-15m, a ~1k-token prompt, -n 16 greedy):
 *  - run 1 on a fresh --kv-dir: nothing from disk; run 2: n_reused_disk > 0,
 *    the same text, ids and logits_hash as a run with persistence off; the
 *    stderr summary says how many positions came from --kv-dir; the environment
 *    route too; --kv-dir-max-gib smaller than one block: nothing is kept;
 *  - -ctk/-ctv q8_0: logits unlike the f32 cache's, the same in a second process
 *    restoring from a q8_0 store on the same directory (f32 blocks there are another
 *    key); a quantized type on stories260K (head size 8) and an unknown type: refused.
 * run on `deja synth --preset tiny` glm4moe, mistral3 and gpt-oss files (test_run_arch; the
 * same ~1k-token prompt, so mistral3's YaRN and query temperature scaling and gpt-oss's
 * windows of 16 act on every block):
 * run 2 on a --kv-dir restores blocks and gives the cold text, ids and logits_hash.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "test.h"
#include "test_kvdir.h"
#include "test_json.h"
#include "test_run.h"

static char tmpdir[256];
static const char *codelm;
static const char *traces[2];

/* The number after the first "key": at or after `from` in doc; ~0 when absent. */
static unsigned long long num_after(const char *doc, const char *from, const char *key) {
    const char *t = from ? strstr(doc, from) : doc;
    if (!t) return ~0ull;
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(t, pat);
    return p ? strtoull(p + strlen(pat), NULL, 10) : ~0ull;
}

/* Turns of a replay's JSON with turn index > 0 (a session's later turns) that reused
 * nothing from disk; ~0 when the array is missing. */
static size_t later_turns_without_disk(const char *doc) {
    const char *p = strstr(doc, "\"turns\": [");
    const char *end = p ? strstr(p, "\"totals\"") : NULL;
    if (!p || !end) return ~(size_t)0;
    size_t n = 0;
    while ((p = strstr(p, "\"turn\": ")) && p < end) {
        unsigned long long turn = strtoull(p + 8, NULL, 10);
        const char *d = strstr(p, "\"n_reused_disk\": ");
        if (!d || d > end) return ~(size_t)0;
        n += turn > 0 && strtoull(d + 17, NULL, 10) == 0;
        p = d;
    }
    return n;
}

/* Block files (*.kvb) under dir/<key>/, 0 when dir does not exist. */
static size_t count_blocks(const char *dir) { return test_kv_block_files(dir, NULL, 0); }

static void unset_persist_env(void) {
    unsetenv("LLAMA_OPT_PERSIST_ENABLED");
    unsetenv("LLAMA_OPT_PERSIST_DIR");
}

struct rep {
    char *out;
    char *logits, *ids; /* the top-level hashes (after "totals"; each turn has its own logits_hash) */
    unsigned long long first_disk, tot_disk, computed, min_computed, prompt, restarts;
    bool persist;
};

static void rep_free(struct rep *r) {
    free(r->out);
    free(r->logits);
    free(r->ids);
}

/* `deja replay --json` of both traces, 3 turns each, with extra args (NULL-terminated). */
static struct rep replay(const char *what, const char *a1, const char *a2, const char *a3) {
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)deja_bin;
    argv[a++] = "replay";
    argv[a++] = "-m";
    argv[a++] = (char *)codelm;
    for (int i = 0; i < 2; i++) {
        argv[a++] = "--trace";
        argv[a++] = (char *)traces[i];
    }
    const char *fixed[] = {"--max-turns", "3", "-n", "4", "-t", "2", "--json"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[a++] = (char *)fixed[i];
    if (a1) argv[a++] = (char *)a1;
    if (a2) argv[a++] = (char *)a2;
    if (a3) argv[a++] = (char *)a3;
    argv[a] = NULL;
    struct rep r;
    memset(&r, 0, sizeof r);
    int rc = run(argv, &r.out);
    CHECKF(rc == 0, "%s: replay failed:\n%s", what, r.out);
    const char *tot = strstr(r.out, "\"totals\"");
    r.logits = tot ? json_string(tot, "logits_hash") : NULL;
    r.ids = tot ? json_string(tot, "ids_hash") : NULL;
    if (!r.logits) r.logits = strdup("?");
    if (!r.ids) r.ids = strdup("?");
    r.first_disk = num_after(r.out, "\"turns\": [", "n_reused_disk");
    r.tot_disk = num_after(r.out, "\"totals\"", "n_reused_disk");
    r.computed = num_after(r.out, "\"totals\"", "n_computed");
    r.min_computed = num_after(r.out, "\"totals\"", "n_min_computed");
    r.prompt = num_after(r.out, "\"totals\"", "n_prompt");
    r.restarts = num_after(r.out, NULL, "restarts");
    r.persist = strstr(r.out, "\"persist\": true") != NULL;
    printf("  %-44s prompt %llu computed %llu (min %llu), disk first turn %llu total %llu, logits %s ids %s\n", what,
           r.prompt, r.computed, r.min_computed, r.first_disk, r.tot_disk, r.logits, r.ids);
    fflush(stdout);
    return r;
}

static void same(const struct rep *cold, const struct rep *r, const char *what) {
    CHECKF(!strcmp(cold->logits, r->logits), "%s: logits_hash %s != cold %s", what, r->logits, cold->logits);
    CHECKF(!strcmp(cold->ids, r->ids), "%s: ids_hash %s != cold %s", what, r->ids, cold->ids);
}

static void test_replay(void) {
    char kv[300], kv_env[300], kv_other[300], kv_restart[300];
    snprintf(kv, sizeof kv, "%s/kv", tmpdir);
    snprintf(kv_env, sizeof kv_env, "%s/kv_env", tmpdir);
    snprintf(kv_other, sizeof kv_other, "%s/kv_other", tmpdir);
    snprintf(kv_restart, sizeof kv_restart, "%s/kv_restart", tmpdir);
    printf("deja replay:\n");
    unset_persist_env();
    struct rep cold = replay("persistence off", NULL, NULL, NULL);
    CHECK(!cold.persist && cold.tot_disk == 0);

    struct rep r1 = replay("--kv-dir (fresh)", "--kv-dir", kv, NULL);
    same(&cold, &r1, "run 1");
    CHECKF(r1.persist && r1.tot_disk == 0, "run 1 on an empty directory reused %llu from disk", r1.tot_disk);
    CHECKF(r1.computed == cold.computed, "run 1 computed %llu, cold %llu", r1.computed, cold.computed);
    CHECKF(count_blocks(kv) > 0, "run 1 left no block in %s", kv);

    struct rep r2 = replay("--kv-dir (second process)", "--kv-dir", kv, NULL);
    same(&cold, &r2, "run 2 (restored)");
    CHECKF(r2.first_disk > 0 && r2.first_disk != ~0ull, "run 2's first turn reused nothing from disk:\n%s", r2.out);
    CHECKF(r2.tot_disk >= r2.first_disk && r2.tot_disk != ~0ull, "totals n_reused_disk %llu", r2.tot_disk);
    CHECKF(r2.computed < r1.computed, "run 2 computed %llu, run 1 %llu", r2.computed, r1.computed);

    /* the per-turn line: turn, session, n_prompt, own, pool, disk, ... */
    char *out = NULL;
    int rc = RUN(&out, "replay", "-m", (char *)codelm, "--trace", (char *)traces[0], "--max-turns", "1", "-n", "2", "-t",
                 "2", "--kv-dir", kv);
    const char *hdr = strstr(out, "own     pool     disk");
    const char *row = hdr ? strchr(hdr, '\n') : NULL;
    size_t turn = 99, np = 0, own = 0, pool = 0, disk = 0;
    char sess[128];
    int got = row ? sscanf(row + 1, "%zu %127s %zu %zu %zu %zu", &turn, sess, &np, &own, &pool, &disk) : 0;
    CHECKF(rc == 0 && got == 6 && turn == 0 && disk > 0 && disk <= pool && strstr(out, "from disk"),
           "text output without the disk column or its count:\n%s", out);
    free(out);

    /* the environment alone */
    setenv("LLAMA_OPT_PERSIST_ENABLED", "1", 1);
    setenv("LLAMA_OPT_PERSIST_DIR", kv_env, 1);
    struct rep e1 = replay("LLAMA_OPT_PERSIST_* (fresh)", NULL, NULL, NULL);
    struct rep e2 = replay("LLAMA_OPT_PERSIST_* (second process)", NULL, NULL, NULL);
    same(&cold, &e1, "env run 1");
    same(&cold, &e2, "env run 2");
    CHECK(e1.persist && e1.tot_disk == 0);
    CHECKF(e2.first_disk > 0 && e2.first_disk != ~0ull, "env run 2 reused nothing from disk:\n%s", e2.out);
    /* --kv-dir wins over both variables */
    setenv("LLAMA_OPT_PERSIST_ENABLED", "0", 1);
    setenv("LLAMA_OPT_PERSIST_DIR", kv_other, 1);
    struct rep f = replay("--kv-dir over the environment", "--kv-dir", kv, NULL);
    same(&cold, &f, "flag over env");
    CHECKF(f.first_disk == r2.first_disk, "flag over env: first turn's disk %llu, not %llu", f.first_disk,
           r2.first_disk);
    CHECKF(access(kv_other, F_OK) != 0, "%s (LLAMA_OPT_PERSIST_DIR) was created although --kv-dir was given", kv_other);
    unset_persist_env();

    /* --restart-each-turn: off = every prompt from scratch; on = what the disk gives */
    struct rep off = replay("--restart-each-turn, persistence off", "--restart-each-turn", NULL, NULL);
    same(&cold, &off, "restart, off");
    CHECKF(off.computed == off.prompt && off.tot_disk == 0, "restart off: computed %llu of %llu", off.computed,
           off.prompt);
    CHECKF(off.restarts == 5, "restarts %llu, not 5 (6 turns)", off.restarts);
    struct rep on = replay("--restart-each-turn, --kv-dir (fresh)", "--restart-each-turn", "--kv-dir", kv_restart);
    same(&cold, &on, "restart, on");
    CHECKF(on.computed == on.min_computed, "restart on: computed %llu != modelled minimum %llu", on.computed,
           on.min_computed);
    CHECKF(on.computed < off.computed && on.tot_disk > 0, "restart on: computed %llu (off %llu), disk %llu",
           on.computed, off.computed, on.tot_disk);
    CHECKF(later_turns_without_disk(on.out) == 0, "restart on: a later turn reused nothing from disk:\n%s", on.out);
    CHECKF(on.tot_disk + on.computed == on.prompt, "restart on: disk %llu + computed %llu != prompt %llu", on.tot_disk,
           on.computed, on.prompt);

    /* bad flags */
    rc = RUN(&out, "replay", "-m", (char *)codelm, "--trace", (char *)traces[0], "--restart-each-turn", "--parallel",
             "2");
    CHECKF(rc == 1 && strstr(out, "--restart-each-turn"), "%s", out);
    free(out);
    rc = RUN(&out, "replay", "-m", (char *)codelm, "--trace", (char *)traces[0], "--kv-dir-max-gib", "-1");
    CHECKF(rc == 1 && strstr(out, "--kv-dir-max-gib"), "%s", out);
    free(out);
    struct rep *all[] = {&cold, &r1, &r2, &e1, &e2, &f, &off, &on};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) rep_free(all[i]);
}

struct runres {
    char *out, *text, *ids, *logits;
    unsigned long long disk, reused, computed;
};

static void runres_free(struct runres *r) {
    free(r->out);
    free(r->text);
    free(r->ids);
    free(r->logits);
}

static const char *prompt_file;

static struct runres run_json(const char *what, const char *a1, const char *a2, const char *a3, const char *a4) {
    struct runres r;
    memset(&r, 0, sizeof r);
    char *argv[24];
    int a = 0;
    const char *fixed[] = {deja_bin, "run", "-m", codelm, "-f", prompt_file, "-n", "16", "-t", "2", "--json"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[a++] = (char *)fixed[i];
    const char *extra[] = {a1, a2, a3, a4};
    for (int i = 0; i < 4; i++)
        if (extra[i]) argv[a++] = (char *)extra[i];
    argv[a] = NULL;
    int rc = run(argv, &r.out);
    CHECKF(rc == 0, "%s: run failed:\n%s", what, r.out);
    const char *obj = strstr(r.out, "{\"prompt_ids\"");
    r.text = obj ? json_string(obj, "text") : NULL;
    r.ids = obj ? json_ids(obj, "ids") : NULL;
    r.logits = obj ? json_string(obj, "logits_hash") : NULL;
    if (!r.text) r.text = strdup("?");
    if (!r.ids) r.ids = strdup("?");
    if (!r.logits) r.logits = strdup("?");
    r.disk = num_after(r.out, "{\"prompt_ids\"", "n_reused_disk");
    r.reused = num_after(r.out, "{\"prompt_ids\"", "n_reused");
    r.computed = num_after(r.out, "{\"prompt_ids\"", "n_computed");
    printf("  %-44s reused %llu (disk %llu) computed %llu, logits %s\n", what, r.reused, r.disk, r.computed, r.logits);
    fflush(stdout);
    return r;
}

static void same_run(const struct runres *cold, const struct runres *r, const char *what) {
    CHECKF(!strcmp(cold->text, r->text), "%s: text differs:\n%s\nvs cold\n%s", what, r->text, cold->text);
    CHECKF(!strcmp(cold->ids, r->ids), "%s: ids differ", what);
    CHECKF(!strcmp(cold->logits, r->logits), "%s: logits_hash %s != cold %s", what, r->logits, cold->logits);
}

static void test_run(const char *shared) {
    char kv[300], kv_env[300], kv_small[300], pf[300];
    snprintf(kv, sizeof kv, "%s/run_kv", tmpdir);
    snprintf(kv_env, sizeof kv_env, "%s/run_kv_env", tmpdir);
    snprintf(kv_small, sizeof kv_small, "%s/run_kv_small", tmpdir);
    snprintf(pf, sizeof pf, "%s/prompt.txt", tmpdir);
    prompt_file = pf;
    /* ~1k tokens: the first 3,000 characters of a trace's first prompt (text, not special tokens) */
    size_t len = 0;
    char *src = test_read_file(traces[0], &len);
    const char *t = src ? strstr(src, "\"text\": \"") : NULL;
    FILE *f = fopen(pf, "w");
    CHECK(t && f);
    if (!t || !f) return;
    size_t n = 3000;
    while (n > 0 && ((unsigned char)t[9 + n] & 0xc0) == 0x80) n--; /* whole UTF-8 characters */
    fwrite(t + 9, 1, n, f);
    fclose(f);
    free(src);
    printf("deja run:\n");
    unset_persist_env();
    struct runres cold = run_json("persistence off", NULL, NULL, NULL, NULL);
    CHECK(cold.disk == 0 && cold.reused == 0);
    struct runres r1 = run_json("--kv-dir (fresh)", "--kv-dir", kv, NULL, NULL);
    same_run(&cold, &r1, "run 1");
    CHECK(r1.disk == 0);
    struct runres r2 = run_json("--kv-dir (second process)", "--kv-dir", kv, NULL, NULL);
    same_run(&cold, &r2, "run 2 (restored)");
    CHECKF(r2.disk > 0 && r2.disk != ~0ull && r2.disk == r2.reused && r2.computed < cold.computed,
           "run 2: disk %llu reused %llu computed %llu (cold %llu)", r2.disk, r2.reused, r2.computed, cold.computed);
    /* the summary line on stderr, without --json */
    char *out = NULL;
    int rc = RUN(&out, "run", "-m", (char *)codelm, "-f", pf, "-n", "16", "-t", "2", "--kv-dir", kv);
    char want[96];
    snprintf(want, sizeof want, "%llu reused, %llu of them from --kv-dir", r2.reused, r2.disk);
    CHECKF(rc == 0 && strstr(out, want), "no '%s' in:\n%s", want, out);
    CHECKF(strstr(out, cold.text) != NULL, "run 3's text differs from the cold one:\n%s", out);
    free(out);
    /* the environment alone */
    setenv("LLAMA_OPT_PERSIST_ENABLED", "1", 1);
    setenv("LLAMA_OPT_PERSIST_DIR", kv_env, 1);
    struct runres e1 = run_json("LLAMA_OPT_PERSIST_* (fresh)", NULL, NULL, NULL, NULL);
    struct runres e2 = run_json("LLAMA_OPT_PERSIST_* (second process)", NULL, NULL, NULL, NULL);
    same_run(&cold, &e2, "env run 2");
    CHECKF(e1.disk == 0 && e2.disk == r2.disk, "env: disk %llu then %llu (flag: %llu)", e1.disk, e2.disk, r2.disk);
    unset_persist_env();
    /* a budget below one block (codelm: 512 KiB): every write is dropped, nothing comes back */
    struct runres s1 = run_json("--kv-dir-max-gib 0.0001 (fresh)", "--kv-dir", kv_small, "--kv-dir-max-gib", "0.0001");
    struct runres s2 = run_json("--kv-dir-max-gib 0.0001 (second)", "--kv-dir", kv_small, "--kv-dir-max-gib", "0.0001");
    same_run(&cold, &s2, "tiny budget");
    CHECKF(s2.disk == 0 && count_blocks(kv_small) == 0, "a budget below one block kept %zu blocks, reused %llu",
           count_blocks(kv_small), s2.disk);
    /* -ctk/-ctv q8_0: its own cold result (not f32's), restored bitwise from a q8_0 --kv-dir; the
     * f32 blocks of the first directory are not taken (another key) */
    struct runres q_cold = run_json("-ctk q8_0 -ctv q8_0 (no --kv-dir)", "-ctk", "q8_0", "-ctv", "q8_0");
    CHECKF(strcmp(q_cold.logits, cold.logits) != 0, "q8_0 cache: logits_hash equals the f32 cache's");
    char *qa[] = {(char *)deja_bin, "run", "-m", (char *)codelm, "-f", pf, "-n", "16", "-t", "2", "--json", "-ctk", "q8_0",
                  "-ctv", "q8_0", "--kv-dir", kv, NULL};
    struct runres q[2];
    for (int i = 0; i < 2; i++) {
        memset(&q[i], 0, sizeof q[i]);
        CHECK(run(qa, &q[i].out) == 0);
        const char *obj = strstr(q[i].out, "{\"prompt_ids\"");
        q[i].logits = obj ? json_string(obj, "logits_hash") : strdup("?");
        q[i].disk = num_after(q[i].out, "{\"prompt_ids\"", "n_reused_disk");
        CHECKF(q[i].logits && !strcmp(q[i].logits, q_cold.logits), "q8_0 run %d: logits_hash %s != %s", i,
               q[i].logits, q_cold.logits);
    }
    CHECKF(q[0].disk == 0 && q[1].disk == r2.disk, "q8_0 runs on the f32 runs' directory: disk %llu then %llu",
           q[0].disk, q[1].disk);
    free(q[0].out);
    free(q[0].logits);
    free(q[1].out);
    free(q[1].logits);
    rc = RUN(&out, "run", "-m", (char *)test_shared_path(shared, "models/stories260K.gguf"), "-p", "x", "-ctk", "q4_0");
    CHECKF(rc != 0 && strstr(out, "q4_0") && strstr(out, "head size"), "q4_0 on stories260K: rc %d:\n%s", rc, out);
    free(out);
    rc = RUN(&out, "run", "-m", (char *)codelm, "-p", "x", "-ctv", "q5_1");
    CHECKF(rc != 0 && strstr(out, "not a K/V cache type"), "-ctv q5_1: rc %d:\n%s", rc, out);
    free(out);
    struct runres *all[] = {&cold, &r1, &r2, &e1, &e2, &s1, &s2, &q_cold};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) runres_free(all[i]);
}

static void test_run_arch(const char *shared) {
    static const char *const archs[] = {"glm4moe", "mistral3", "gpt-oss"};
    const char *keep = codelm;
    static char pf[300]; /* test_run's prompt file (its path was a local of test_run) */
    snprintf(pf, sizeof pf, "%s/prompt.txt", tmpdir);
    prompt_file = pf;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        char model[300], kv[300];
        snprintf(model, sizeof model, "%s/%s-tiny.gguf", tmpdir, archs[i]);
        snprintf(kv, sizeof kv, "%s/run_kv_%s", tmpdir, archs[i]);
        char *out = NULL;
        int rc = RUN(&out, "synth", "--arch", (char *)archs[i], "--preset", "tiny", "--vocab-from", (char *)keep, "-o",
                     model, "-t", "2");
        CHECKF(rc == 0, "synth %s: %s", archs[i], out);
        free(out);
        if (rc) continue;
        printf("deja run, %s tiny:\n", archs[i]);
        codelm = model; /* run_json's model */
        struct runres cold = run_json("persistence off", NULL, NULL, NULL, NULL);
        struct runres r1 = run_json("--kv-dir (fresh)", "--kv-dir", kv, NULL, NULL);
        struct runres r2 = run_json("--kv-dir (second process)", "--kv-dir", kv, NULL, NULL);
        same_run(&cold, &r1, "run 1");
        same_run(&cold, &r2, "run 2 (restored)");
        CHECKF(r1.disk == 0 && r2.disk > 0 && r2.disk != ~0ull && r2.computed < cold.computed,
               "%s run 2: disk %llu computed %llu (cold %llu)", archs[i], r2.disk, r2.computed, cold.computed);
        runres_free(&cold);
        runres_free(&r1);
        runres_free(&r2);
        unlink(model);
    }
    codelm = keep;
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    deja_bin = argc > 2 ? argv[2] : "build/bin/deja";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dj_persist_cli_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create a temporary folder\n");
        return 1;
    }
    unsetenv("LLAMA_OPT_STATS");
    unsetenv("LLAMA_OPT_DEDUP_POOL_MAX");
    unsetenv("LLAMA_OPT_DIFF_MODE");
    setenv("LLAMA_OPT_DIFF_ENABLED", "1", 1);
    setenv("LLAMA_OPT_DEDUP_ENABLED", "1", 1);
    setenv("LLAMA_OPT_BLOCK_SIZE", "64", 1);
    codelm = test_shared_path(shared, "models/codelm-15m-f16.gguf");
    /* two short real sessions (~1k tokens a turn); DelegatorAgent rewrites the middle of its prompt */
    traces[0] = test_shared_path(shared, "traces/openhands_mock__BrowsingAgent_test_browse_internet.jsonl");
    traces[1] = test_shared_path(shared, "traces/openhands_mock__DelegatorAgent_test_edits.jsonl");
    test_replay();
    test_run(shared);
    test_run_arch(shared);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_END();
}
