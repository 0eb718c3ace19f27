/*
 * test_engine_persist.c — the persistent KV store inside the engine
 * (LLAMA_OPT_PERSIST_*, engine.c: engine_open_store, load_block, seal_blocks),
 * on stories260K (codelm under DJ_KV_TYPE=q8_0 or q4_0) with made-up token ids and
 * 16-position blocks:
 *  - restore == cold: a turn of an engine that found the prompt's blocks on disk
 *    (written by an earlier engine, as after a restart) gives logits and ids
 *    bitwise those of a cold engine with persistence off, and reports them as
 *    persist loads;
 *  - a restored prefix that continues (the prompt extended past the stored
 *    blocks) and a second session on the same blocks: still bitwise cold;
 *  - damage: a bit flipped in one block file, another truncated, a foreign file
 *    under a block's name, a stray temporary file: the damaged blocks are
 *    detected (the store's corrupt count), recomputed, and the results are still
 *    bitwise the cold run's; the damaged files are gone afterwards;
 *  - a key mismatch (another block size) restores nothing and is still exact;
 *  - a disk that refuses every block (RLIMIT_FSIZE, in a child): the failed
 *    writes are counted by the store, not as the engine's persist_saves, and
 *    leave no file;
 *  - persistence without a directory, or with dedup off: a warning, no store,
 *    the same results;
 *  - Multi-head Latent Attention (deepseek2-lite-tiny, in the K/V types its 40-wide
 *    row takes): its K-only blocks are written (records marked K-only, payload
 *    of K rows only) and restored after a restart, bitwise the cold run.
 * With DJ_TEST_GPU=N (CTest's unit/test_engine_persist_vulkan_f16: Vulkan device 0, lavapipe
 * in CI) the engines run on that device: restart, continuation and damage as above, bitwise
 * the GPU's cold run — and the device is part of the store's key, so a CPU engine restores
 * nothing a GPU engine wrote and the GPU engine nothing the CPU wrote (each still exact).
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "core/hash.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "kv/persist.h"
#include "model/context.h"
#include "test.h"
#include "test_kvdir.h"
#include "test_engine.h"
#include "test_gpu.h"
#include "test_run.h"


static struct dj_model *model;
static char dir[64];
static uint32_t g_gpu; /* DJ_TEST_GPU: 0 the CPU, N Vulkan device N - 1 */

static dj_token T(size_t i) { return (dj_token)(3 + (i * 7919 + i / 5) % 500); }

static struct dj_engine *make(bool persist, const char *pdir, uint32_t block_size, bool dedup) {
    struct dj_engine_params p = engine_default_params();
    p.n_ctx = 1024;
    p.n_threads = 2;
    p.opt.block_size = block_size;
    p.opt.dedup_enabled = dedup;
    p.opt.persist_enabled = persist;
    snprintf(p.opt.persist_dir, sizeof p.opt.persist_dir, "%s", pdir ? pdir : "");
    p.gpu = g_gpu;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(model, &p, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* Turn 1: prompt p[0..n), 6 tokens; turn 2 on the same session: the prompt
 * extended by 40 more; then a second session with the first prompt.  All logits
 * folded into one hash; *loads: the engine's persist loads. */
static uint64_t scenario(bool persist, uint32_t block_size, bool dedup, uint64_t *loads, dj_token *ids_out) {
    struct dj_engine *e = make(persist, dir, block_size, dedup);
    if (!e) return 0;
    struct dj_session *a, *b;
    CHECK(engine_session_create(e, &a) == DJ_OK && engine_session_create(e, &b) == DJ_OK);
    uint64_t h = DJ_FNV_OFFSET;
    dj_token p[400], ids[6];
    for (size_t i = 0; i < 300; i++) p[i] = T(i);
    test_turn(e, a, p, 150, 6, &h, ids);
    if (ids_out) memcpy(ids_out, ids, sizeof ids);
    size_t held;
    const dj_token *held_tok = engine_session_tokens(a, &held);
    dj_token q[400];
    memcpy(q, held_tok, held * sizeof *q);
    for (size_t i = 0; i < 40; i++) q[held + i] = T(1000 + i);
    test_turn(e, a, q, held + 40, 6, &h, ids);
    test_turn(e, b, p, 150, 6, &h, ids);
    struct llama_opt_stats st;
    engine_get_stats(e, &st);
    *loads = st.persist_loads;
    engine_destroy(e); /* writes what the store has queued */
    return h;
}

/* The block files (<dir>/<key>/<chain>.kvb) under dir, in paths[]. */
static size_t block_files(char paths[][512], size_t max) { return test_kv_block_files(dir, paths, max); }

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    CHECKF(f != NULL, "%s", path);
    if (!f) return;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* The restart scenario on an MLA model: K-only blocks to disk and back, bitwise cold. */
static void check_mla(const char *shared) {
    struct dj_model *dense = model;
    model = NULL;
    CHECKF(model_load(test_shared_path(shared, "golden/moe/deepseek2-lite-tiny.gguf"), &model) == DJ_OK, "%s",
           dj_last_error());
    const uint32_t kt = kv_type_default();
    if (!model || model_kv_check(model, kt, kt) != DJ_OK) {
        if (model) printf("deepseek2-lite-tiny: K/V type %s does not fit its 40-wide row: skipped\n", dj_type_name(kt));
        model_free(model);
        model = dense;
        return;
    }
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out); /* only this model's blocks below */
    free(out);
    CHECK(mkdir(dir, 0700) == 0);
    uint64_t loads = 0;
    dj_token ids_cold[6], ids[6];
    const uint64_t cold = scenario(false, 16, true, &loads, ids_cold);
    CHECK(scenario(true, 16, true, &loads, ids) == cold && loads == 0);
    char paths[64][512];
    const size_t n_files = block_files(paths, 64);
    CHECKF(n_files >= 9, "deepseek2: %zu block files written", n_files);
    /* a record: K-only geometry in kv_type, a payload of K rows only */
    size_t len = 0;
    char *rec = n_files ? test_read_file(paths[0], &len) : NULL;
    struct kv_store_record r;
    CHECK(rec && kv_store_parse_record((const uint8_t *)rec, len, &r) == DJ_OK);
    if (rec) {
        const size_t k_bytes = (size_t)model->hp.n_layer * 16 * kv_row_bytes(kt, model->hp.head_dim);
        CHECKF(r.kv_type == (kt | kt << 8 | 1u << 16) && r.n_embd_kv == model->hp.head_dim && r.payload_bytes == k_bytes,
               "deepseek2 record: kv_type %#x, width %u, payload %llu bytes (K rows: %zu)", r.kv_type, r.n_embd_kv,
               (unsigned long long)r.payload_bytes, k_bytes);
    }
    free(rec);
    /* restart: restored from disk, bitwise the cold run */
    CHECK(scenario(true, 16, true, &loads, ids) == cold);
    CHECK(memcmp(ids, ids_cold, sizeof ids) == 0);
    CHECKF(loads >= 9, "deepseek2: %llu blocks restored", (unsigned long long)loads);
    printf("deepseek2-lite-tiny, %s K/V: %llu K-only blocks restored from %zu files, logits bitwise the cold run's\n",
           dj_type_name(kt), (unsigned long long)loads, n_files);
    model_free(model);
    model = dense;
}

/* A disk that refuses every block: in a child, RLIMIT_FSIZE of 1 KiB (smaller
 * than any record here, larger than the model id cache's lines) makes each
 * block write fail with EFBIG — a real error from the kernel, as ENOSPC would
 * be, that root gets too.  The engine's persist_saves (deja_opt_persist_saves_total)
 * must stay 0: a failed write is not a save; the store counts it
 * (write_errors, deja_persist_save_failures_total); no block or temporary file
 * is left. */
static void check_failed_writes(void) {
    char fdir[64];
    snprintf(fdir, sizeof fdir, "/tmp/deja_test_persist_full_XXXXXX");
    CHECK(mkdtemp(fdir) != NULL);
    fflush(stdout);
    fflush(stderr);
    pid_t c = fork();
    if (c == 0) {
        signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of death */
        struct rlimit rl;
        getrlimit(RLIMIT_FSIZE, &rl);
        rl.rlim_cur = 1024;
        setrlimit(RLIMIT_FSIZE, &rl);
        struct kv_store_totals t0, t1;
        kv_store_get_totals(&t0);
        struct dj_engine *e = make(true, fdir, 16, true);
        if (!e || !e->store) _exit(100);
        struct dj_session *a;
        if (engine_session_create(e, &a) != DJ_OK) _exit(101);
        uint64_t h = DJ_FNV_OFFSET;
        dj_token p[150], ids[6];
        for (size_t i = 0; i < 150; i++) p[i] = T(i);
        test_turn(e, a, p, 150, 6, &h, ids);
        kv_store_flush(e->store);
        struct llama_opt_stats st;
        engine_get_stats(e, &st);
        struct kv_store_stats ks;
        kv_store_get_stats(e->store, &ks);
        kv_store_get_totals(&t1);
        printf("full disk: %llu puts, %llu failed, %llu written, persist_saves %llu\n", (unsigned long long)ks.put,
               (unsigned long long)ks.write_errors, (unsigned long long)ks.written,
               (unsigned long long)st.persist_saves);
        fflush(stdout);
        int bad = 0;
        bad |= !(ks.put >= 9 && ks.write_errors >= 1 && ks.written == 0);
        bad |= 2 * !(st.persist_saves == 0);
        bad |= 4 * !(t1.write_failures == t0.write_failures + ks.write_errors && t1.written == t0.written);
        char kdir[512];
        snprintf(kdir, sizeof kdir, "%s", kv_store_key_dir(e->store));
        engine_session_destroy(a);
        engine_destroy(e);
        bad |= 8 * (test_kv_block_files(fdir, NULL, 0) != 0);
        DIR *d = opendir(kdir); /* nor a temporary file */
        for (struct dirent *de; d && (de = readdir(d));) bad |= 16 * (strncmp(de->d_name, ".tmp-", 5) == 0);
        if (d) closedir(d);
        _exit(bad);
    }
    int status = -1;
    waitpid(c, &status, 0);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "full-disk child: status %d (exit %d)", status,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", fdir, NULL}, &out);
    free(out);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    deja_bin = argc > 2 ? argv[2] : NULL; /* (test_run.h's; only its run() is used here) */
    const int grc = test_gpu_begin(&g_gpu);
    if (grc) return grc;
    /* under DJ_KV_TYPE=q8_0|q4_0 (CTest's per-type runs) codelm, whose heads fit their 32-element blocks */
    const bool small_heads_ok = dj_type_info(kv_type_default())->blck == 1;
    if (model_load(test_shared_path(shared, small_heads_ok ? "models/stories260K.gguf" : "models/codelm-15m-f16.gguf"),
                   &model) != DJ_OK) {
        fprintf(stderr, "%s\n", dj_last_error());
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/deja_test_persist_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);

    uint64_t loads = 0;
    dj_token ids_cold[6], ids[6];
    const uint64_t cold = scenario(false, 16, true, &loads, ids_cold);
    CHECK(loads == 0);
    /* first engine on an empty directory: writes its sealed blocks, same results */
    CHECK(scenario(true, 16, true, &loads, ids) == cold);
    CHECK(loads == 0);
    char paths[256][512];
    const size_t n_files = block_files(paths, 256);
    CHECKF(n_files >= 9, "%zu block files written", n_files);
    /* "restart": a new engine restores the prompt's blocks from disk, bitwise the cold run */
    CHECK(scenario(true, 16, true, &loads, ids) == cold);
    CHECK(memcmp(ids, ids_cold, sizeof ids) == 0);
    CHECKF(loads >= 9, "%llu blocks restored (expected the 9 full blocks of the first prompt)",
           (unsigned long long)loads);
    printf("restart: %llu blocks restored from %zu files, logits bitwise the cold run's\n", (unsigned long long)loads,
           n_files);

    /* damage: one bit flipped, one truncated, one replaced by foreign bytes, a stray temp file */
    if (n_files >= 3) {
        struct stat sb;
        CHECK(stat(paths[0], &sb) == 0);
        flip_byte(paths[0], (long)sb.st_size / 2);
        CHECK(truncate(paths[1], sb.st_size / 3) == 0);
        FILE *f = fopen(paths[2], "wb");
        if (f) {
            fputs("not a block at all", f);
            fclose(f);
        }
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%.*s/.tmp-junk", (int)(strrchr(paths[0], '/') - paths[0]), paths[0]);
        f = fopen(tmp, "wb");
        if (f) {
            fputs("DJKVBLK", f);
            fclose(f);
        }
    }
    const uint64_t h = scenario(true, 16, true, &loads, ids);
    CHECK(h == cold);
    printf("after damaging 3 files: %llu blocks restored, logits bitwise the cold run's\n", (unsigned long long)loads);
    CHECK(memcmp(ids, ids_cold, sizeof ids) == 0);
    for (int i = 0; i < 3 && n_files >= 3; i++) { /* detected and dropped, or rewritten whole by the run */
        struct stat sb, sb0;
        if (stat(paths[i], &sb) == 0 && stat(paths[3], &sb0) == 0)
            CHECKF(sb.st_size == sb0.st_size, "%s: a damaged file of %lld bytes is still there", paths[i],
                   (long long)sb.st_size);
    }
    /* and the next restart restores everything again (the run rewrote the damaged blocks) */
    CHECK(scenario(true, 16, true, &loads, ids) == cold);
    CHECKF(loads >= 9, "%llu blocks restored after the damage", (unsigned long long)loads);

    /* another block size is another key: nothing restored, still exact */
    const uint64_t cold32 = scenario(false, 32, true, &loads, NULL);
    CHECK(scenario(true, 32, true, &loads, NULL) == cold32);
    CHECK(loads == 0);
    CHECK(scenario(true, 32, true, &loads, NULL) == cold32 && loads >= 4);

    /* persistence with dedup off, or without a directory: no store, the same results */
    const uint64_t cold_nodedup = scenario(false, 16, false, &loads, NULL);
    CHECK(scenario(true, 16, false, &loads, NULL) == cold_nodedup && loads == 0);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", dir);
    dir[0] = '\0';
    CHECK(scenario(true, 16, true, &loads, NULL) == cold && loads == 0);
    snprintf(dir, sizeof dir, "%s", saved);

    if (g_gpu) {
        /* the device is in the key: the CPU restores none of the GPU's blocks (and computes its own
         * cold results), and the GPU none of the CPU's */
        g_gpu = 0;
        const uint64_t cpu_cold = scenario(false, 16, true, &loads, NULL);
        CHECK(scenario(true, 16, true, &loads, NULL) == cpu_cold);
        CHECKF(loads == 0, "a CPU engine restored %llu blocks a GPU engine wrote", (unsigned long long)loads);
        CHECK(scenario(true, 16, true, &loads, NULL) == cpu_cold && loads >= 9); /* its own, after a restart */
        const char *env = getenv("DJ_TEST_GPU");
        g_gpu = (uint32_t)atoi(env);
        CHECK(scenario(true, 16, true, &loads, NULL) == cold && loads >= 9); /* the GPU's own blocks still */
        printf("the device is in the key: CPU and GPU blocks kept apart, each bitwise its own cold run\n");
    } else {
        check_failed_writes();
        check_mla(shared);
    }
    char *out = NULL;
    run((char *const[]){"/bin/rm", "-rf", dir, NULL}, &out);
    free(out);
    model_free(model);
    TEST_END();
}
