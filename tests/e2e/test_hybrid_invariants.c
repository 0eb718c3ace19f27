/*
 * test_hybrid_invariants.c — the exactness contracts (DESIGN.md §1, §3) on a hybrid model
 * (`deja synth --arch qwen35moe --preset tiny`: Gated DeltaNet layers beside gated attention
 * ones, routed and shared experts), replaying agent traces through `deja replay`.
 *
 * A recurrent layer keeps one state per sequence, not rows per position: a prompt resumes
 * only where a recurrent-state checkpoint holds that state (kv/ckpt.h).  Each run below must
 * give the cold run's per-session logits and ids hashes, bitwise:
 *  - reference: reuse and dedup off (LLAMA_OPT_DIFF_ENABLED=0, LLAMA_OPT_DEDUP_ENABLED=0);
 *  - reuse on (the default): turns resume from checkpoints (n_reused_ckpt > 0) or from the
 *    session's live state; LLAMA_OPT_RS_CKPT_INTERVAL=1 (a checkpoint every block) as well;
 *  - no checkpoints (LLAMA_OPT_RS_CKPT_MAX_MB=0): K/V rows found are computed again
 *    (n_kv_recomputed > 0), nothing resumes from a checkpoint;
 *  - --parallel 3 (sessions batched together: several recurrent states advance in one
 *    pass) and --ubatch 7 --n-batch 13 (every prefill split differently);
 *  - --spec-sources all, teacher-forced (against a teacher-forced cold run): drafts verified
 *    and rolled back through the forward pass's state snapshots (accepted > 0, some rejected);
 *  - --spec-sources mtp,lookup teacher-forced (the MTP block drafted), and mtp with --parallel 3
 *    against the plain cold run;
 *  - two tau-bench sessions sharing ~4,400 tokens of system prompt: the second resumes from
 *    the first's in-prompt checkpoints (n_reused_pool > 1,000, n_reused_ckpt > 1,000);
 *  - --kv-dir: a fresh store, then a new process on it resumes from checkpoints read from
 *    disk (n_reused_ckpt_disk > 0) and K/V blocks (n_reused_disk > 0);
 *  - kill -9 of a replay writing to a --kv-dir at several moments, then a new process on
 *    that directory: the cold hashes (no torn record is ever read).
 * And the refusals: Tier 2 (LLAMA_OPT_DIFF_MODE=approx) fails with a message saying why.
 */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_replay_inv.h"

static long long top(json_t *doc, const char *key) { return json_integer_value(json_object_get(doc, key)); }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    if (!inv_setup(argv[1], "qwen35moe", "hybrid")) TEST_END();

    json_t *ref = inv_cold("cold", NULL, NULL);
    if (!ref) TEST_END();
    CHECKF(inv_total(ref, "n_reused") == 0, "cold run reused %lld", inv_total(ref, "n_reused"));
    CHECKF(inv_total(ref, "n_prompt") > 2000, "the traces gave only %lld prompt tokens", inv_total(ref, "n_prompt"));

    json_t *d = inv_replay("reuse", NULL, NULL, NULL, NULL, NULL);
    if (d) {
        inv_same_hashes(ref, d, "reuse");
        CHECKF(inv_total(d, "n_reused") > 0, "reuse: nothing reused");
        CHECKF(top(d, "n_reused_ckpt") > 0 && top(d, "rs_ckpt_hits") > 0, "reuse: no turn resumed from a checkpoint");
        printf("reuse: %lld of %lld prompt positions reused, %lld from checkpoints (%lld hits, %lld saved), %lld K/V "
               "positions recomputed, hashes equal\n",
               inv_total(d, "n_reused"), inv_total(d, "n_prompt"), top(d, "n_reused_ckpt"), top(d, "rs_ckpt_hits"),
               top(d, "rs_ckpt_saves"), top(d, "n_kv_recomputed"));
        json_decref(d);
    }
    setenv("LLAMA_OPT_RS_CKPT_INTERVAL", "1", 1);
    d = inv_replay("interval 1", NULL, NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_RS_CKPT_INTERVAL");
    if (d) {
        inv_same_hashes(ref, d, "LLAMA_OPT_RS_CKPT_INTERVAL=1");
        CHECK(top(d, "rs_ckpt_saves") > 0);
        json_decref(d);
    }
    setenv("LLAMA_OPT_RS_CKPT_MAX_MB", "0", 1);
    d = inv_replay("no checkpoints", NULL, NULL, NULL, NULL, NULL);
    unsetenv("LLAMA_OPT_RS_CKPT_MAX_MB");
    if (d) {
        inv_same_hashes(ref, d, "LLAMA_OPT_RS_CKPT_MAX_MB=0");
        CHECKF(top(d, "n_reused_ckpt") == 0 && top(d, "rs_ckpt_saves") == 0, "no checkpoints: %lld resumed",
               top(d, "n_reused_ckpt"));
        CHECKF(top(d, "n_kv_recomputed") > 0, "no checkpoints: no cached K/V position was computed again");
        json_decref(d);
    }
    if ((d = inv_replay("parallel", "--parallel", "3", NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--parallel 3");
        json_decref(d);
    }
    if ((d = inv_replay("chunks", "--ubatch", "7", "--n-batch", "13", NULL))) {
        inv_same_hashes(ref, d, "--ubatch 7 --n-batch 13");
        json_decref(d);
    }
    /* speculation: teacher-forced (the traces' recorded responses), so that prompt lookup finds
     * drafts in a random model's output; against a teacher-forced cold run */
    json_t *tf = inv_cold("teacher-forced cold", "--teacher-force", NULL);
    if (tf && (d = inv_replay("spec", "--teacher-force", "--spec-sources", "all", "--spec-fixed", NULL))) {
        inv_same_hashes(tf, d, "--teacher-force --spec-sources all");
        json_t *sp = json_object_get(d, "spec");
        const long long acc = json_integer_value(json_object_get(sp, "accepted")),
                        dr = json_integer_value(json_object_get(sp, "drafted"));
        CHECKF(acc > 0 && dr > acc, "spec: %lld drafted, %lld accepted (both rollback and acceptance wanted)", dr, acc);
        printf("spec: %lld drafted, %lld accepted (the rest rolled back), hashes equal\n", dr, acc);
        json_decref(d);
    }
    /* drafts from the model's own MTP block (one more pool layer, the hidden row in every state and
     * checkpoint), with prompt lookup beside it */
    if (tf && (d = inv_replay("spec mtp", "--teacher-force", "--spec-sources", "mtp,lookup", "--spec-fixed", NULL))) {
        inv_same_hashes(tf, d, "--teacher-force --spec-sources mtp,lookup");
        json_t *by = json_object_get(json_object_get(d, "spec"), "by_source");
        const long long dm = json_integer_value(json_object_get(json_object_get(by, "mtp"), "drafted"));
        CHECKF(dm > 0, "spec mtp: the MTP block drafted %lld tokens", dm);
        printf("spec mtp: %lld tokens drafted by the MTP block, hashes equal\n", dm);
        json_decref(d);
    }
    if ((d = inv_replay("mtp plain", "--spec-sources", "mtp", "--parallel", "3", NULL))) {
        inv_same_hashes(ref, d, "--spec-sources mtp --parallel 3");
        json_decref(d);
    }
    json_decref(tf);
    char kvdir[300];
    snprintf(kvdir, sizeof kvdir, "%s/kv", inv_tmpdir);
    if ((d = inv_replay("kv-dir 1", "--kv-dir", kvdir, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--kv-dir (fresh)");
        CHECK(top(d, "n_reused_ckpt_disk") == 0);
        json_decref(d);
    }
    if ((d = inv_replay("kv-dir 2", "--kv-dir", kvdir, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--kv-dir (restored)");
        CHECKF(top(d, "n_reused_ckpt_disk") > 0 && inv_total(d, "n_reused_disk") > 0,
               "kv-dir: %lld positions resumed from checkpoints on disk, %lld K/V positions from disk",
               top(d, "n_reused_ckpt_disk"), inv_total(d, "n_reused_disk"));
        printf("kv-dir: %lld positions resumed from checkpoints on disk, %lld K/V positions from disk, hashes equal\n",
               top(d, "n_reused_ckpt_disk"), inv_total(d, "n_reused_disk"));
        json_decref(d);
    }
    /* kill -9 while checkpoints and blocks are being written, then a clean run on what is left */
    char kvkill[300];
    snprintf(kvkill, sizeof kvkill, "%s/kvkill", inv_tmpdir);
    const int delays_ms[3] = {400, 900, 1700};
    for (int k = 0; k < 3; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execl(deja_bin, deja_bin, "replay", "-m", inv_model, "--trace", inv_traces[0], "--trace", inv_traces[1], "--trace",
                  inv_traces[2], "--max-turns", "3", "--max-chars", "7000", "-n", "12", "-c", "8192", "-t", "2",
                  "--kv-dir", kvkill, (char *)NULL);
            _exit(127);
        }
        CHECK(pid > 0);
        if (pid <= 0) break;
        struct timespec ts = {delays_ms[k] / 1000, (long)(delays_ms[k] % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
    }
    if ((d = inv_replay("after kill -9", "--kv-dir", kvkill, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "--kv-dir after kill -9");
        printf("kill -9: 3 writers killed; the next run resumed %lld positions from checkpoints on disk, hashes "
               "equal\n", top(d, "n_reused_ckpt_disk"));
        json_decref(d);
    }
    /* Tier 2 is refused, with the reason */
    setenv("LLAMA_OPT_DIFF_MODE", "approx", 1);
    char *out = NULL;
    const int rc = RUN(&out, "replay", "-m", inv_model, "--trace", (char *)inv_traces[0], "--max-turns", "1", "-n", "2", "--json");
    unsetenv("LLAMA_OPT_DIFF_MODE");
    CHECKF(rc != 0 && out && strstr(out, "LLAMA_OPT_DIFF_MODE=approx") && strstr(out, "recurrent"),
           "approx on a hybrid model: exit %d: %.500s", rc, out ? out : "");
    free(out);
    json_decref(ref);

    /* two sessions whose first prompts share a long system prompt: the second resumes from the
     * first's checkpoints inside it */
    inv_use_tau = true;
    ref = inv_cold("tau cold", NULL, NULL);
    if (ref && (d = inv_replay("tau dedup", NULL, NULL, NULL, NULL, NULL))) {
        inv_same_hashes(ref, d, "dedup");
        CHECKF(inv_total(d, "n_reused_pool") > 1000 && top(d, "n_reused_ckpt") > 1000,
               "dedup: %lld positions from the pool, %lld from checkpoints", inv_total(d, "n_reused_pool"),
               top(d, "n_reused_ckpt"));
        printf("dedup: %lld of %lld prompt positions from the pool (%lld resumed from checkpoints), hashes equal\n",
               inv_total(d, "n_reused_pool"), inv_total(d, "n_prompt"), top(d, "n_reused_ckpt"));
        json_decref(d);
    }
    json_decref(ref);
    inv_cleanup();
    TEST_END();
}
