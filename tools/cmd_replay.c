/*
 * cmd_replay.c — `deja replay`: replays multi-turn agent traces
 * (../shared/traces/README.md) through the engine, one session per file,
 * files interleaved round-robin turn by turn (as a server with several
 * agents sees them), or --parallel N at once.  Every turn prefills its prompt (reusing what the
 * LLAMA_OPT_* configuration allows) and generates -n tokens greedily.
 *
 * Output per turn: n_prompt, n_reused (own prefix / pool, and of the pool's the
 * positions read from the persistent KV store: --kv-dir or LLAMA_OPT_PERSIST_*),
 * n_computed, prefill ms, TTFT; then a summary.  --json gives one object (DESIGN.md §5)
 * with per-turn entries, totals, logits_hash (FNV-1a 64 over the float32
 * bits of every logits vector, all turns in order) and ids_hash (FNV-1a 64
 * over every generated id as LE uint32), and `sessions`: each trace's own
 * logits_hash and ids_hash over its turns in order, which do not depend on
 * how the sessions were interleaved.
 *
 * --parallel N: N sessions in flight at once on the serving engine (each
 * submits its next turn as soon as its last is done; the engine batches
 * their decoding and chunks their prefills, --n-batch tokens a step), as
 * agents running side by side.  The session hashes must equal those of the
 * round-robin replay; the top-level logits_hash/ids_hash then fold the
 * session hashes in trace order (the interleaving is timing-dependent).
 * TTFT counts from submission, so it includes waiting for the others.
 *
 * Tier 2 (LLAMA_OPT_DIFF_MODE=approx): n_reused_approx counts positions after
 * an edit reused approximately.  --compare-exact runs a second engine with
 * the same configuration but exact reuse beside it, session for session:
 * the exact engine generates greedily, the approximate one is fed the same
 * tokens (teacher forcing), and every generated step's two next-token
 * distributions are compared — KL(exact || approx) and whether the top-1
 * tokens agree — over all turns and over the turns that reused anything
 * approximately.
 *
 * n_min_computed is an independent model of the exact minimum: the tokens
 * after the longest reusable prefix, i.e. max(own prefix L, pool prefix P)
 * where L = the common prefix with what the session's sequence holds (its
 * last prompt + generated tokens but the last; capped at n-1, 0 with diff
 * off) and P = the longest run of full blocks from position 0 whose chain
 * hashes some earlier sequence held (capped before the last token, 0 with
 * dedup off).  It does not look inside the engine; with enough budget (no
 * evictions, no parked sessions) the engine must compute exactly that.
 * P counts a block that ends at the prompt's end too (the engine takes it and
 * recomputes its last row), and is then capped at n-1 like L.  Blocks on disk
 * that an earlier process wrote are unknown to it: a run on a warm --kv-dir
 * computes less than its "minimum".
 *
 * --restart-each-turn: before every turn but the first, the engine and the
 * model are destroyed (the store's queued writes finish) and loaded again, and
 * every session is created again on the new engine, as if the process had been
 * restarted: no K/V in memory survives, so a turn reuses only what the store
 * gives back.  The model of the minimum follows: L = 0, and P counts only
 * blocks that went to the store (none when persistence is off).  Restart time
 * (destroy + load + create) is part of the wall time and reported alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/hash.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/trace.h"
#include "kv/diff.h"
#include "kv/hash.h"
#include "spec/spec.h"

static void replay_usage(FILE *f) {
    fprintf(f,
            "usage: deja replay -m MODEL --trace FILE.jsonl [--trace FILE2 ...] [options]\n"
            "  --max-turns N     replay at most N turns of each trace\n"
            "  --max-chars N     stop a trace at its first prompt longer than N characters (code points)\n"
            "  -n N              tokens generated greedily per turn (default 32)\n"
            "  -c N              context size (default: the model's training context; may exceed it)\n"
            "  -t N              threads (default 1)\n"
            "  --ubatch N        tokens per forward step during prefill (default 512)\n"
            "  --kv-budget MIB   KV block memory (default: LLAMA_OPT_DEDUP_POOL_MAX blocks)\n"
            "  --parallel N      N sessions in flight at once, each submitting its next turn when the last\n"
            "                    is done (default: round-robin, one turn at a time)\n"
            "  --n-batch N       tokens per engine step: decode tokens + prefill chunks (default: --ubatch)\n"
            "  --no-chunked-prefill  an admitted prompt is prefilled whole in one step\n"
            CLI_KV_TYPE_HELP
            CLI_DEVICE_HELP
            CLI_OVERFLOW_HELP
            CLI_KV_DIR_USAGE
            "  --restart-each-turn  destroy and re-create the engine and the model before every turn (but\n"
            "                    the first): nothing in memory survives, only what --kv-dir holds (round-robin only)\n"
            CLI_SPEC_HELP
            "  --teacher-force   generate each turn's recorded response (the trace's \"response\", tokenized;\n"
            "                    at most -n tokens, default then 1024) instead of the model's own tokens: a\n"
            "                    simulation of a model that writes what the recorded agent wrote, to measure\n"
            "                    speculative drafts against real outputs (turns without a response generate 1 token)\n"
            "  --json            one JSON object instead of the per-turn lines\n"
            "  --compare-exact   (with LLAMA_OPT_DIFF_MODE=approx or LLAMA_OPT_ATTN_PRUNE_ENABLED=1) also run\n"
            "                    the exact engine and report the KL divergence and top-1 agreement of every\n"
            "                    generated step\n"
            "Reuse is configured by LLAMA_OPT_DIFF_ENABLED, LLAMA_OPT_DEDUP_ENABLED, LLAMA_OPT_BLOCK_SIZE,\n"
            "LLAMA_OPT_PERSIST_ENABLED, LLAMA_OPT_PERSIST_DIR (docs/CONFIG.md); LLAMA_OPT_STATS=1 prints\n"
            "opt-stats lines on stderr.\n");
}

static bool parse_num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error("replay", "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* ---- a set of chain hashes (open addressing; 0 is the empty slot) -------------- */

struct hset {
    uint64_t *v;
    size_t cap, n;
};

static bool hset_has(const struct hset *h, uint64_t x) {
    if (!h->cap) return false;
    x |= x == 0;
    for (size_t i = (size_t)(x * 0x9e3779b97f4a7c15ULL) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
        if (h->v[i] == x) return true;
        if (h->v[i] == 0) return false;
    }
}

static bool hset_add(struct hset *h, uint64_t x) {
    x |= x == 0;
    if ((h->n + 1) * 2 > h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        uint64_t *v = calloc(cap, sizeof *v);
        if (!v) return false;
        for (size_t k = 0; k < h->cap; k++) {
            uint64_t y = h->v[k];
            if (!y) continue;
            size_t i = (size_t)(y * 0x9e3779b97f4a7c15ULL) & (cap - 1);
            while (v[i]) i = (i + 1) & (cap - 1);
            v[i] = y;
        }
        free(h->v);
        h->v = v;
        h->cap = cap;
    }
    size_t i = (size_t)(x * 0x9e3779b97f4a7c15ULL) & (h->cap - 1);
    while (h->v[i] && h->v[i] != x) i = (i + 1) & (h->cap - 1);
    if (!h->v[i]) {
        h->v[i] = x;
        h->n++;
    }
    return true;
}

/* ---- engine counters, summed over the engines of a --restart-each-turn run ------ */

struct engine_totals {
    uint64_t evicted, cow_copies, n_forward, n_forward_prefill;
    uint32_t peak_alloc, peak_pinned; /* the largest of any engine */
    struct llama_opt_stats os;        /* the fields the report prints, summed */
};

/* Adds engine e's counters (call once per engine, before destroying it). */
static void engine_totals_add(struct engine_totals *t, const struct dj_engine *e) {
    struct kv_pool_stats ps;
    engine_pool_stats(e, &ps);
    uint32_t pa, pp;
    engine_peak_blocks(e, &pa, &pp);
    struct llama_opt_stats os;
    engine_get_stats(e, &os);
    t->evicted += ps.evicted;
    t->cow_copies += ps.cow_copies;
    t->n_forward += engine_n_forward(e);
    t->n_forward_prefill += engine_n_forward_prefill(e);
    if (pa > t->peak_alloc) t->peak_alloc = pa;
    if (pp > t->peak_pinned) t->peak_pinned = pp;
    t->os.dedup_blocks_total += os.dedup_blocks_total;
    t->os.dedup_blocks_hit += os.dedup_blocks_hit;
    t->os.canon_entries_deduped += os.canon_entries_deduped;
    t->os.persist_loads += os.persist_loads;
    t->os.persist_saves += os.persist_saves;
    t->os.persist_tokens_restored += os.persist_tokens_restored;
    t->os.rs_ckpt_saves += os.rs_ckpt_saves;
    t->os.rs_ckpt_hits += os.rs_ckpt_hits;
}

/* ---- sessions ---------------------------------------------------------------- */

struct rsess {
    struct trace *tr;
    struct dj_session *s;
    struct dj_session *sx; /* --compare-exact: the session in the exact engine */
    dj_token *held; /* what the model of the minimum thinks the sequence holds */
    size_t n_held;
    size_t n_turns;
    bool active;
    /* the turn in flight */
    bool busy, done;
    dj_token *toks;
    size_t n, n_min;
    dj_token *ids;
    size_t n_ids;
    struct dj_turn_result res;
    uint64_t lhash, ihash; /* this session's logits and ids, all its turns in order */
    uint64_t turn_lhash;   /* this turn's logits */
    size_t g;              /* tokens this turn generates */
    dj_token *resp;        /* --teacher-force: the recorded response's tokens (n_resp) */
    size_t n_resp;
};

struct turn_row {
    size_t sess, turn;
    struct dj_turn_result r;
    size_t n_min;
    double kl_sum, kl_max;  /* --compare-exact: over the turn's steps */
    size_t n_top1, n_steps;
    double t_exact_prefill_ms;
    uint64_t logits_hash; /* this turn's */
    char *attn;           /* attention statistics: each block's weight after the turn ("-" prefix: skipped) */
};

struct logits_acc {
    uint64_t hash;       /* every logits vector of every turn, in order (sequential replay) */
    struct rsess *sess;  /* the session whose turn runs: its own hashes too */
};

static void on_logits(void *ud, const float *logits, size_t n_vocab) {
    struct logits_acc *a = ud;
    const size_t nb = n_vocab * sizeof(float); /* x86-64: float bits are little-endian */
    a->hash = dj_fnv1a(a->hash, logits, nb);
    if (a->sess) {
        a->sess->lhash = dj_fnv1a(a->sess->lhash, logits, nb);
        a->sess->turn_lhash = dj_fnv1a(a->sess->turn_lhash, logits, nb);
    }
}

/* --parallel: the request of session r reports here. */
static void par_on_logits(void *ud, const float *logits, size_t n_vocab) {
    struct rsess *r = ud;
    r->lhash = dj_fnv1a(r->lhash, logits, n_vocab * sizeof(float));
    r->turn_lhash = dj_fnv1a(r->turn_lhash, logits, n_vocab * sizeof(float));
}
static void par_on_token(void *ud, const struct dj_token_event *ev) {
    struct rsess *r = ud;
    r->ids[r->n_ids++] = ev->tok;
}
static void par_on_done(void *ud, const struct dj_turn_result *res) {
    struct rsess *r = ud;
    r->res = *res;
    r->done = true;
}

/* The session's per-block attention weights as a JSON array (a skipped block's weight
 * negated), or NULL without statistics (or memory). */
static char *attn_json(const struct dj_session *s) {
    const float *w;
    const uint8_t *sk;
    const size_t nb = s ? engine_session_attn(s, &w, &sk) : 0;
    if (!nb) return NULL;
    char *out = malloc(nb * 16 + 3), *p = out;
    if (!out) return NULL;
    *p++ = '[';
    for (size_t b = 0; b < nb; b++) p += sprintf(p, "%s%.3g", b ? "," : "", sk[b] ? -(double)w[b] : (double)w[b]);
    *p++ = ']';
    *p = '\0';
    return out;
}

/* --compare-exact: the exact engine's logits of one turn, then the approximate
 * engine's compared with them step by step. */
struct compare {
    struct logits_acc *acc; /* the approximate engine's logits_hash */
    float *ref;             /* n_gen x n_vocab */
    size_t i;
    double kl_sum, kl_max;
    size_t n_top1, n_steps;
};

static void on_ref_logits(void *ud, const float *logits, size_t n_vocab) {
    struct compare *c = ud;
    memcpy(c->ref + c->i++ * n_vocab, logits, n_vocab * sizeof *logits);
}

static size_t argmax(const float *x, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double log_sum_exp(const float *x, size_t n, size_t imax) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)x[i] - (double)x[imax]);
    return (double)x[imax] + log(sum);
}

static void on_cmp_logits(void *ud, const float *logits, size_t n_vocab) {
    struct compare *c = ud;
    on_logits(c->acc, logits, n_vocab);
    const float *ref = c->ref + c->i++ * n_vocab;
    const size_t ar = argmax(ref, n_vocab), aq = argmax(logits, n_vocab);
    const double lr = log_sum_exp(ref, n_vocab, ar), lq = log_sum_exp(logits, n_vocab, aq);
    double kl = 0.0; /* sum p (log p - log q), p the exact distribution */
    for (size_t i = 0; i < n_vocab; i++) {
        const double lp = (double)ref[i] - lr;
        kl += exp(lp) * (lp - ((double)logits[i] - lq));
    }
    if (kl < 0) kl = 0; /* rounding of identical distributions */
    c->kl_sum += kl;
    if (kl > c->kl_max) c->kl_max = kl;
    c->n_top1 += ar == aq;
    c->n_steps++;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p) {
    if (!n) return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return v[k < n ? k : n - 1];
}

/* A turn of session r is done (ids: the G generated tokens; fed: what the
 * sequence was fed, the same unless teacher-forced): its ids hash, what the
 * model of the minimum thinks the sequence holds, the row and its line.
 * Returns non-zero (after a message) on failure. */
static int finish_turn(struct rsess *r, size_t i, const dj_token *fed, size_t G, size_t bs, bool dedup_on,
                       struct hset *chains, struct turn_row **rows, size_t *n_rows, size_t *cap_rows, bool json,
                       const struct compare *cmp, const struct dj_turn_result *trx) {
    for (size_t k = 0; k < G; k++) r->ihash = dj_fnv1a_u32(r->ihash, (uint32_t)r->ids[k]);
    /* what the sequence now holds: the prompt and the generated tokens but the last */
    const size_t n = r->n, nh = n + G - 1;
    dj_token *held = realloc(r->held, nh * sizeof *held);
    if (!held) return cli_error("replay", "out of memory");
    memcpy(held, r->toks, n * sizeof *held);
    memcpy(held + n, fed, (G - 1) * sizeof *held);
    r->held = held;
    r->n_held = nh;
    uint64_t c = KV_CHAIN_ROOT;
    for (size_t b = 0; dedup_on && (b + 1) * bs <= nh; b++)
        if (!hset_add(chains, c = kv_hash_chain(c, held + b * bs, bs))) return cli_error("replay", "out of memory");
    if (*n_rows == *cap_rows) {
        *cap_rows = *cap_rows ? *cap_rows * 2 : 64;
        struct turn_row *nr = realloc(*rows, *cap_rows * sizeof *nr);
        if (!nr) return cli_error("replay", "out of memory");
        *rows = nr;
    }
    const struct dj_turn_result *tr = &r->res;
    (*rows)[(*n_rows)++] = (struct turn_row){i,
                                             r->n_turns,
                                             *tr,
                                             r->n_min,
                                             cmp ? cmp->kl_sum : 0,
                                             cmp ? cmp->kl_max : 0,
                                             cmp ? cmp->n_top1 : 0,
                                             cmp ? cmp->n_steps : 0,
                                             trx ? trx->t_prefill_ms : 0.0,
                                             r->turn_lhash,
                                             attn_json(r->s)};
    if (!json) {
        printf("%-5zu %-44.44s %8zu %8zu %8zu %8zu %8zu %8zu %8zu %10.1f %10.1f", r->n_turns,
               r->tr->session ? r->tr->session : r->tr->path, n, tr->n_reused_own, tr->n_reused_pool,
               tr->n_reused_disk, tr->n_reused_approx, tr->n_computed, r->n_min, tr->t_prefill_ms, tr->t_ttft_ms);
        if (cmp)
            printf(" %9.1f %9.2e %2zu/%zu", trx->t_prefill_ms, cmp->kl_sum / (double)cmp->n_steps, cmp->n_top1,
                   cmp->n_steps);
        printf("\n");
        fflush(stdout);
    }
    r->n_turns++;
    return 0;
}

/* --restart-each-turn: the sessions, the engine and the model go, as when a process
 * exits (engine_destroy finishes the store's queued writes); then the model is loaded,
 * the engine and every active session created again.  *e's counters are added to tot
 * first.  Returns non-zero after a message (*e and *m may then be NULL). */
static int restart(const char *model_path, const struct dj_engine_params *ep, struct dj_model **m,
                   struct dj_engine **e, struct rsess *rs, size_t n_paths, struct engine_totals *tot) {
    engine_totals_add(tot, *e);
    for (size_t i = 0; i < n_paths; i++) {
        engine_session_destroy(rs[i].s);
        rs[i].s = NULL;
        rs[i].n_held = 0; /* the model of the minimum: no sequence survives */
    }
    engine_destroy(*e);
    *e = NULL;
    model_free(*m);
    *m = NULL;
    if (model_load(model_path, m) != DJ_OK || engine_create(*m, ep, e) != DJ_OK)
        return cli_error("replay", "restart: %s", dj_last_error());
    for (size_t i = 0; i < n_paths; i++)
        if (rs[i].active && engine_session_create(*e, &rs[i].s) != DJ_OK)
            return cli_error("replay", "restart: %s", dj_last_error());
    return 0;
}

int cmd_replay(int argc, char **argv) {
    const char *model_path = NULL, *kv_dir = NULL;
    const char **paths = NULL;
    size_t n_paths = 0;
    double n_gen = 32, n_ctx = 0, n_threads = 1, ubatch = 512, max_turns = 0, max_chars = 0, budget = 0;
    double parallel = 0, n_batch = 0, kv_dir_gib = 0;
    bool json = false, compare = false, no_chunk = false, restart_each = false, teacher = false, n_gen_set = false;
    struct dj_spec_params spec = spec_default_params();
    int rc = 1;
    paths = calloc((size_t)argc, sizeof *paths);
    if (!paths) return cli_error("replay", "out of memory");
    uint32_t ctk = kv_type_default(), ctv = kv_type_default(), gpu = 0;
    enum dj_ctx_overflow overflow = DJ_OVERFLOW_ERROR;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        bool ok;
        if (cli_kv_type_opt("replay", argc, argv, &i, &ctk, &ctv, &ok) ||
            cli_spec_opt("replay", argc, argv, &i, &spec, &ok) || cli_device_opt("replay", argc, argv, &i, &gpu, &ok) ||
            cli_overflow_opt("replay", argc, argv, &i, &overflow, &ok)) {
            if (!ok) goto out_args;
            continue;
        }
#define NUM(name, lo, hi, dst)                                                            \
    else if (!strcmp(a, name)) {                                                          \
        const char *s = cli_value("replay", argc, argv, &i);                              \
        if (!s || !parse_num(name, s, lo, hi, &v)) goto out_args;                         \
        dst = v;                                                                          \
    }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            replay_usage(stdout);
            free(paths);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_value("replay", argc, argv, &i))) goto out_args;
        } else if (!strcmp(a, "--trace")) {
            if (!(paths[n_paths] = cli_value("replay", argc, argv, &i))) goto out_args;
            n_paths++;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--teacher-force")) {
            teacher = true;
        } else if (!strcmp(a, "-n")) {
            const char *s = cli_value("replay", argc, argv, &i);
            if (!s || !parse_num("-n", s, 1, 1e7, &n_gen)) goto out_args;
            n_gen_set = true;
        } else if (!strcmp(a, "--compare-exact")) {
            compare = true;
        } else if (!strcmp(a, "--no-chunked-prefill")) {
            no_chunk = true;
        } else if (!strcmp(a, "--restart-each-turn")) {
            restart_each = true;
        } else if (!strcmp(a, "--kv-dir")) {
            if (!(kv_dir = cli_value("replay", argc, argv, &i))) goto out_args;
        }
        NUM("--parallel", 1, 1e6, parallel)
        NUM("--n-batch", 1, 1e6, n_batch)
        NUM("-c", 1, 1e8, n_ctx)
        NUM("-t", 1, 1024, n_threads)
        NUM("--ubatch", 1, 1e6, ubatch)
        NUM("--max-turns", 0, 1e9, max_turns)
        NUM("--max-chars", 0, 1e12, max_chars)
        NUM("--kv-budget", 1e-6, 1e9, budget)
        NUM("--kv-dir-max-gib", 0, 1 << 20, kv_dir_gib)
        else {
            replay_usage(stderr);
            cli_error("replay", "unknown argument '%s'", a);
            goto out_args;
        }
#undef NUM
    }
    if (!model_path || n_paths == 0) {
        replay_usage(stderr);
        cli_error("replay", "%s", !model_path ? "no model given (-m MODEL)" : "no trace given (--trace FILE.jsonl)");
        goto out_args;
    }

    struct dj_model *m = NULL;
    struct dj_engine *e = NULL, *ex = NULL;
    struct rsess *rs = NULL;
    float *ref = NULL;
    dj_token *ids_x = NULL;
    struct turn_row *rows = NULL;
    size_t n_rows = 0, cap_rows = 0;
    struct hset chains = {0};
    struct engine_totals etot = {0};
    size_t n_restarts = 0, rows_at_restart = 0;
    int64_t t_restart_us = 0;
    struct dj_engine_params ep = engine_default_params();
    ep.kv_type_k = ctk;
    ep.gpu = gpu;
    ep.overflow = overflow;
    ep.kv_type_v = ctv;
    ep.spec = spec;
    cli_spec_check("replay", &spec);
    if (teacher && !n_gen_set) n_gen = 1024;
    if (llama_opt_config_from_env(&ep.opt) != DJ_OK) {
        cli_error("replay", "%s", dj_last_error());
        goto done;
    }
    if (cli_kv_dir("replay", kv_dir, &ep.opt)) goto done; /* --kv-dir wins over the environment */
    ep.persist_max_bytes = (uint64_t)(kv_dir_gib * 1073741824.0);
    if (model_load(model_path, &m) != DJ_OK) {
        cli_error("replay", "%s", dj_last_error());
        goto done;
    }
    ep.n_ctx = n_ctx > 0 ? (uint32_t)n_ctx : m->hp.n_ctx_train;
    if (ep.n_ctx > m->hp.n_ctx_train)
        dj_log(DJ_LOG_WARN, "context size %u exceeds the model's training context %u: results past it are "
               "mechanically exact but not meaningful text", ep.n_ctx, m->hp.n_ctx_train);
    ep.n_threads = (int)n_threads;
    ep.n_ubatch = (uint32_t)ubatch;
    ep.kv_budget_mib = budget;
    ep.n_batch = (uint32_t)n_batch;
    ep.chunked_prefill = !no_chunk;
    if (compare && parallel > 0) {
        cli_error("replay", "--compare-exact runs the sessions round-robin; drop --parallel");
        goto done;
    }
    if (teacher && compare) {
        cli_error("replay", "--teacher-force and --compare-exact both choose the generated tokens; give one");
        goto done;
    }
    if (restart_each && (parallel > 0 || compare)) {
        cli_error("replay", "--restart-each-turn restarts between round-robin turns; drop --parallel and --compare-exact");
        goto done;
    }
    if (engine_create(m, &ep, &e) != DJ_OK) {
        cli_error("replay", "%s", dj_last_error());
        goto done;
    }
    if (compare) {
        if ((ep.opt.diff_mode != LLAMA_OPT_DIFF_APPROX || !ep.opt.diff_enabled) && !ep.opt.attn_prune_enabled) {
            cli_error("replay", "--compare-exact compares a Tier-2 option with the exact engine: set "
                      "LLAMA_OPT_DIFF_MODE=approx (and leave LLAMA_OPT_DIFF_ENABLED on) or LLAMA_OPT_ATTN_PRUNE_ENABLED=1");
            goto done;
        }
        struct dj_engine_params xp = ep;
        xp.opt.diff_mode = LLAMA_OPT_DIFF_EXACT;
        xp.opt.attn_prune_enabled = false;
        xp.opt.attn_stats_enabled = false;
        xp.opt.stats_enabled = false;
        ref = malloc((size_t)n_gen * m->hp.n_vocab * sizeof *ref);
        ids_x = malloc((size_t)n_gen * sizeof *ids_x);
        if (!ref || !ids_x) {
            cli_error("replay", "out of memory");
            goto done;
        }
        if (engine_create(m, &xp, &ex) != DJ_OK) {
            cli_error("replay", "%s", dj_last_error());
            goto done;
        }
    }
    const size_t bs = engine_block_size(e);
    const bool diff_on = ep.opt.diff_enabled, dedup_on = ep.opt.dedup_enabled, persist_on = engine_persist_on(e);
    rs = calloc(n_paths, sizeof *rs);
    if (!rs) {
        cli_error("replay", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_paths; i++) {
        if (trace_open(paths[i], &rs[i].tr) != DJ_OK || engine_session_create(e, &rs[i].s) != DJ_OK ||
            (ex && engine_session_create(ex, &rs[i].sx) != DJ_OK)) {
            cli_error("replay", "%s", dj_last_error());
            goto done;
        }
        rs[i].active = true;
    }
    if (!json)
        printf("%-5s %-44s %8s %8s %8s %8s %8s %8s %8s %10s %10s%s\n", "turn", "session", "n_prompt", "own", "pool",
               "disk", "approx", "computed", "minimum", "prefill_ms", "ttft_ms", compare ? "  exact_ms   mean_kl top1" : "");

    struct logits_acc acc = {DJ_FNV_OFFSET, NULL};
    uint64_t ids_hash = DJ_FNV_OFFSET;
    const size_t G = (size_t)n_gen;
    struct dj_turn_params tp = {.n_gen = G, .on_logits = on_logits, .ud = &acc};
    for (size_t i = 0; i < n_paths; i++) {
        rs[i].lhash = rs[i].ihash = DJ_FNV_OFFSET;
        if (!(rs[i].ids = malloc(G * sizeof *rs[i].ids))) {
            cli_error("replay", "out of memory");
            goto done;
        }
    }
    const int64_t t_start = dj_time_us();
    size_t n_active = n_paths, n_inflight = 0;
    while (n_active > 0) {
        /* start turns: every active session in turn (sequential), or until N are in flight */
        for (size_t i = 0; i < n_paths; i++) {
            struct rsess *r = &rs[i];
            if (!r->active || r->busy) continue;
            if (parallel > 0 && n_inflight >= (size_t)parallel) break;
            bool end = max_turns > 0 && (double)r->n_turns >= max_turns;
            if (!end && trace_next(r->tr, &end) != DJ_OK) {
                cli_error("replay", "%s", dj_last_error());
                goto done;
            }
            if (!end && max_chars > 0 && (double)r->tr->prompt_cp > max_chars) end = true;
            if (end) { /* the session ends: its blocks are unpinned */
                engine_session_destroy(r->s);
                engine_session_destroy(r->sx);
                r->s = r->sx = NULL;
                r->active = false;
                n_active--;
                continue;
            }
            if (restart_each && n_rows > rows_at_restart) { /* a turn ran since the last (re)start */
                const int64_t t0 = dj_time_us();
                if (restart(model_path, &ep, &m, &e, rs, n_paths, &etot)) goto done;
                t_restart_us += dj_time_us() - t0;
                n_restarts++;
                rows_at_restart = n_rows;
                if (!persist_on) { /* the pool's blocks are gone and none went to disk */
                    free(chains.v);
                    chains = (struct hset){0};
                }
            }
            free(r->toks);
            r->toks = NULL;
            if (vocab_tokenize(m->vocab, r->tr->prompt, r->tr->prompt_len, true, true, &r->toks, &r->n) != DJ_OK) {
                cli_error("replay", "%s:%zu: %s", r->tr->path, r->tr->line_no, dj_last_error());
                goto done;
            }
            const dj_token *toks = r->toks;
            const size_t n = r->n;
            const dj_token *force = NULL;
            r->g = G;
            if (teacher) {
                free(r->resp);
                r->resp = NULL;
                r->n_resp = 0;
                if (r->tr->response && vocab_tokenize(m->vocab, r->tr->response, r->tr->response_len, false, true,
                                                      &r->resp, &r->n_resp) != DJ_OK) {
                    cli_error("replay", "%s:%zu: response: %s", r->tr->path, r->tr->line_no, dj_last_error());
                    goto done;
                }
                r->g = r->n_resp == 0 ? 1 : r->n_resp < G ? r->n_resp : G;
                if (r->n_resp) force = r->resp;
            }
            /* the exact minimum (see the top of the file) */
            size_t L = diff_on ? diff_common_prefix(r->held, r->n_held, toks, n) : 0, P = 0;
            if (L >= n && n > 0) L = n - 1;
            if (dedup_on) {
                uint64_t c = KV_CHAIN_ROOT;
                while ((P / bs + 1) * bs <= n && hset_has(&chains, c = kv_hash_chain(c, toks + P, bs))) P += bs;
                if (P >= n && n > 0) P = n - 1; /* the last block is taken, its last row computed */
            }
            r->n_min = n - (L > P ? L : P);
            r->turn_lhash = DJ_FNV_OFFSET;
            r->n_ids = 0;
            r->done = false;
            if (parallel > 0) {
                struct dj_request_params rp = engine_default_request();
                rp.prompt = toks;
                rp.n_prompt = n;
                rp.max_tokens = r->g;
                rp.force = force;
                rp.ignore_eos = true;
                rp.session = r->s;
                rp.on_token = par_on_token;
                rp.on_done = par_on_done;
                rp.on_logits = par_on_logits;
                rp.ud = r;
                if (engine_submit(e, &rp, NULL) != DJ_OK) {
                    cli_error("replay", "%s:%zu: turn of %zu tokens: %s", r->tr->path, r->tr->line_no, n,
                              dj_last_error());
                    goto done;
                }
                r->busy = true;
                n_inflight++;
                continue;
            }
            struct dj_turn_result trx;
            struct compare cmp = {&acc, ref, 0, 0, 0, 0, 0};
            struct dj_turn_params tpa = tp;
            tpa.n_gen = r->g;
            tpa.force = force;
            acc.sess = r;
            if (ex) { /* the exact twin first; the approximate engine is fed its tokens */
                struct dj_turn_params tpx = {.n_gen = tp.n_gen, .on_logits = on_ref_logits, .ud = &cmp};
                if (engine_turn(ex, r->sx, toks, n, &tpx, ids_x, &trx) != DJ_OK) {
                    cli_error("replay", "%s:%zu: exact turn of %zu tokens: %s", r->tr->path, r->tr->line_no, n,
                              dj_last_error());
                    goto done;
                }
                cmp.i = 0;
                tpa.on_logits = on_cmp_logits;
                tpa.ud = &cmp;
                tpa.force = ids_x;
            }
            if (engine_turn(e, r->s, toks, n, &tpa, r->ids, &r->res) != DJ_OK) {
                cli_error("replay", "%s:%zu: turn of %zu tokens: %s", r->tr->path, r->tr->line_no, n, dj_last_error());
                goto done;
            }
            r->n_ids = r->g;
            for (size_t k = 0; k < r->g; k++) ids_hash = dj_fnv1a_u32(ids_hash, (uint32_t)r->ids[k]);
            if (finish_turn(r, i, ex ? ids_x : force ? force : r->ids, r->g, bs, dedup_on, &chains, &rows, &n_rows, &cap_rows, json,
                            ex ? &cmp : NULL, ex ? &trx : NULL))
                goto done;
        }
        if (parallel > 0) {
            engine_step(e);
            for (size_t i = 0; i < n_paths; i++) {
                struct rsess *r = &rs[i];
                if (!r->busy || !r->done) continue;
                r->busy = false;
                n_inflight--;
                if (r->res.finish == DJ_FINISH_ERROR || r->n_ids != r->g) {
                    cli_error("replay", "%s:%zu: turn of %zu tokens: %s", r->tr->path, r->tr->line_no, r->n,
                              r->res.error[0] ? r->res.error : "ended early");
                    goto done;
                }
                if (finish_turn(r, i, teacher && r->n_resp ? r->resp : r->ids, r->g, bs, dedup_on, &chains, &rows,
                                &n_rows, &cap_rows, json, NULL, NULL))
                    goto done;
            }
        }
    }
    if (parallel > 0) { /* per-session hashes, folded in trace order (see the top of the file) */
        acc.hash = ids_hash = DJ_FNV_OFFSET;
        for (size_t i = 0; i < n_paths; i++) {
            acc.hash = dj_fnv1a(acc.hash, &rs[i].lhash, sizeof rs[i].lhash);
            ids_hash = dj_fnv1a(ids_hash, &rs[i].ihash, sizeof rs[i].ihash);
        }
    }
    const double wall_ms = (double)(dj_time_us() - t_start) / 1000.0;

    /* ---- totals ---- */
    size_t tot_prompt = 0, tot_own = 0, tot_pool = 0, tot_disk = 0, tot_ckpt = 0, tot_ckpt_disk = 0, tot_kv_re = 0, tot_comp = 0, tot_min = 0, tot_gen = 0, tot_parked = 0;
    size_t tot_approx = 0, tot_blend = 0, tot_probed = 0, tot_skipped = 0;
    double tot_prefill = 0, tot_decode = 0, tot_prefill_x = 0;
    struct dj_spec_counts tot_spec = {0};
    /* --compare-exact: [0] every turn, [1] the turns that reused something approximately */
    double q_kl[2] = {0, 0}, q_kl_max[2] = {0, 0};
    size_t q_top1[2] = {0, 0}, q_steps[2] = {0, 0}, q_turns[2] = {0, 0};
    double *ttft = malloc((n_rows ? n_rows : 1) * sizeof *ttft);
    if (!ttft) {
        cli_error("replay", "out of memory");
        goto done;
    }
    for (size_t k = 0; k < n_rows; k++) {
        const struct dj_turn_result *t = &rows[k].r;
        tot_prompt += t->n_prompt;
        tot_own += t->n_reused_own;
        tot_pool += t->n_reused_pool;
        tot_disk += t->n_reused_disk;
        tot_ckpt += t->n_reused_ckpt;
        tot_ckpt_disk += t->n_reused_ckpt_disk;
        tot_kv_re += t->n_kv_recomputed;
        tot_comp += t->n_computed;
        tot_min += rows[k].n_min;
        tot_gen += t->n_gen;
        spec_counts_add(&tot_spec, &t->spec);
        tot_parked += t->n_parked;
        tot_prefill += t->t_prefill_ms;
        tot_decode += t->t_decode_ms;
        tot_approx += t->n_reused_approx;
        tot_skipped += t->n_attn_skipped;
        tot_blend += t->n_blend;
        tot_probed += t->n_probed;
        tot_prefill_x += rows[k].t_exact_prefill_ms;
        for (int g = 0; g < 2; g++) {
            if (g == 1 && t->n_reused_approx == 0 && t->n_attn_skipped == 0) continue;
            q_kl[g] += rows[k].kl_sum;
            if (rows[k].kl_max > q_kl_max[g]) q_kl_max[g] = rows[k].kl_max;
            q_top1[g] += rows[k].n_top1;
            q_steps[g] += rows[k].n_steps;
            q_turns[g]++;
        }
        ttft[k] = t->t_ttft_ms;
    }
    double ttft_med = percentile(ttft, n_rows, 0.5), ttft_p90 = percentile(ttft, n_rows, 0.9);
    free(ttft);
    struct kv_pool_stats ps; /* capacity, block bytes, pins at the end: the last engine's */
    engine_pool_stats(e, &ps);
    engine_totals_add(&etot, e);
    const uint32_t peak_alloc = etot.peak_alloc, peak_pinned = etot.peak_pinned;
    const struct llama_opt_stats os = etot.os;
    /* passes that only decoded (--parallel mixes prompt chunks into decode passes: those count as prefill) */
    const uint64_t n_prefill_passes = etot.n_forward_prefill;
    /* the spec counters' tokens-per-pass: every turn's first token comes from its prompt pass */
    const size_t spec_n_gen = tot_gen > n_rows ? tot_gen - n_rows + 1 : 1;
    ps.evicted = etot.evicted;
    ps.cow_copies = etot.cow_copies;
    if (json) {
        printf("{\"model\": ");
        json_str(stdout, model_path);
        printf(", \"n_ctx\": %u, \"block_size\": %zu, \"n_gen\": %zu, \"diff_enabled\": %s, \"dedup_enabled\": %s, "
               "\"turns\": [",
               engine_n_ctx(e), bs, (size_t)n_gen, diff_on ? "true" : "false", dedup_on ? "true" : "false");
        for (size_t k = 0; k < n_rows; k++) {
            const struct dj_turn_result *t = &rows[k].r;
            printf("%s\n  {\"session\": ", k ? "," : "");
            json_str(stdout, rs[rows[k].sess].tr->session);
            printf(", \"turn\": %zu, \"n_prompt\": %zu, \"n_reused\": %zu, \"n_reused_own\": %zu, "
                   "\"n_reused_pool\": %zu, \"n_reused_disk\": %zu, \"n_reused_approx\": %zu, \"n_blend\": %zu, "
                   "\"n_probed\": %zu, \"n_computed\": %zu, \"n_min_computed\": %zu, "
                   "\"n_gen\": %zu, \"t_prefill_ms\": %.3f, \"ttft_ms\": %.3f, \"t_decode_ms\": %.3f",
                   rows[k].turn, t->n_prompt, t->n_reused_own + t->n_reused_pool + t->n_reused_approx,
                   t->n_reused_own, t->n_reused_pool, t->n_reused_disk, t->n_reused_approx, t->n_blend, t->n_probed, t->n_computed,
                   rows[k].n_min, t->n_gen, t->t_prefill_ms, t->t_ttft_ms, t->t_decode_ms);
            printf(", \"t_queue_ms\": %.3f, \"logits_hash\": \"%016" PRIx64 "\"", t->t_queue_ms, rows[k].logits_hash);
            if (t->n_reused_ckpt || t->n_kv_recomputed) /* hybrid models */
                printf(", \"n_reused_ckpt\": %zu, \"n_reused_ckpt_disk\": %zu, \"n_kv_recomputed\": %zu",
                       t->n_reused_ckpt, t->n_reused_ckpt_disk, t->n_kv_recomputed);
            if (spec.sources || t->n_drafted)
                printf(", \"n_drafted\": %zu, \"n_draft_accepted\": %zu", t->n_drafted, t->n_draft_accepted);
            if (t->n_ctx_dropped) printf(", \"n_ctx_dropped\": %zu", t->n_ctx_dropped);
            if (rows[k].attn)
                printf(", \"n_attn_skipped\": %zu, \"n_attn_pruned\": %zu, \"n_attn_restored\": %zu, "
                       "\"attn_weight\": %s",
                       t->n_attn_skipped, t->n_attn_pruned, t->n_attn_restored, rows[k].attn);
            if (ex)
                printf(", \"exact_prefill_ms\": %.3f, \"kl_mean\": %.6e, \"kl_max\": %.6e, \"top1_agree\": %zu",
                       rows[k].t_exact_prefill_ms, rows[k].n_steps ? rows[k].kl_sum / (double)rows[k].n_steps : 0.0,
                       rows[k].kl_max, rows[k].n_top1);
            printf("}");
        }
        printf("],\n \"totals\": {\"sessions\": %zu, \"turns\": %zu, \"n_prompt\": %zu, \"n_reused\": %zu, "
               "\"n_reused_own\": %zu, \"n_reused_pool\": %zu, \"n_reused_disk\": %zu, \"n_reused_approx\": %zu, "
               "\"n_blend\": %zu, \"n_probed\": %zu, \"n_computed\": %zu, \"n_min_computed\": %zu, "
               "\"n_gen\": %zu, \"t_prefill_ms\": %.3f, \"t_decode_ms\": %.3f, \"t_wall_ms\": %.3f, "
               "\"ttft_median_ms\": %.3f, \"ttft_p90_ms\": %.3f, \"kv_block_bytes\": %zu, \"kv_blocks_capacity\": %u, "
               "\"kv_blocks_peak\": %u, \"kv_blocks_pinned_peak\": %u, \"kv_blocks_pinned_end\": %u, "
               "\"kv_blocks_evicted\": %" PRIu64 ", \"kv_cow_copies\": %" PRIu64 ", \"sessions_parked\": %zu, "
               "\"dedup_blocks_total\": %" PRIu64 ", \"dedup_blocks_hit\": %" PRIu64 ", \"canon_entries_total\": %"
               PRIu64 ", \"canon_entries_deduped\": %" PRIu64 ", \"canon_bytes_saved\": %" PRIu64
               "},\n \"logits_hash\": \"%016" PRIx64 "\", \"ids_hash\": \"%016" PRIx64 "\"",
               n_paths, n_rows, tot_prompt, tot_own + tot_pool + tot_approx, tot_own, tot_pool, tot_disk, tot_approx,
               tot_blend, tot_probed, tot_comp, tot_min, tot_gen,
               tot_prefill, tot_decode, wall_ms, ttft_med, ttft_p90, ps.block_bytes, ps.capacity, peak_alloc,
               peak_pinned, ps.pinned, ps.evicted, ps.cow_copies, tot_parked, os.dedup_blocks_total,
               os.dedup_blocks_hit, os.canon_entries_total, os.canon_entries_deduped, os.canon_bytes_saved, acc.hash,
               ids_hash);
        printf(",\n \"n_reused_ckpt\": %zu, \"n_reused_ckpt_disk\": %zu, \"n_kv_recomputed\": %zu, "
               "\"rs_ckpt_saves\": %" PRIu64 ", \"rs_ckpt_hits\": %" PRIu64,
               tot_ckpt, tot_ckpt_disk, tot_kv_re, os.rs_ckpt_saves, os.rs_ckpt_hits);
        printf(",\n \"persist\": %s, \"persist_loads\": %" PRIu64 ", \"persist_saves\": %" PRIu64
               ", \"restart_each_turn\": %s, \"restarts\": %zu, \"t_restart_ms\": %.3f",
               persist_on ? "true" : "false", os.persist_loads, os.persist_saves, restart_each ? "true" : "false",
               n_restarts, (double)t_restart_us / 1000.0);
        printf(",\n \"n_attn_skipped\": %zu, \"attn_blocks_pruned\": %" PRIu64 ", \"attn_blocks_restored\": %" PRIu64,
               tot_skipped, os.attn_blocks_pruned, os.attn_blocks_restored);
        printf(",\n \"teacher_force\": %s, \"spec\": ", teacher ? "true" : "false");
        cli_spec_json(stdout, &spec, &tot_spec, spec_n_gen, etot.n_forward - n_prefill_passes);
        printf(",\n \"parallel\": %zu, \"n_forward_passes\": %llu, \"n_decode_passes\": %llu, \"sessions\": [",
               (size_t)parallel, (unsigned long long)etot.n_forward,
               (unsigned long long)(etot.n_forward - n_prefill_passes));
        for (size_t i = 0; i < n_paths; i++) {
            printf("%s\n  {\"session\": ", i ? "," : "");
            json_str(stdout, rs[i].tr->session);
            printf(", \"trace\": ");
            json_str(stdout, paths[i]);
            printf(", \"turns\": %zu, \"logits_hash\": \"%016" PRIx64 "\", \"ids_hash\": \"%016" PRIx64 "\"}",
                   rs[i].n_turns, rs[i].lhash, rs[i].ihash);
        }
        printf("]");
        if (ex) {
            printf(",\n \"approx_quality\": {\"exact_prefill_ms\": %.3f", tot_prefill_x);
            const char *scope[2] = {"all_turns", "approx_turns"};
            for (int g = 0; g < 2; g++)
                printf(", \"%s\": {\"turns\": %zu, \"steps\": %zu, \"kl_mean\": %.6e, \"kl_max\": %.6e, "
                       "\"top1_agree\": %.6f}",
                       scope[g], q_turns[g], q_steps[g], q_steps[g] ? q_kl[g] / (double)q_steps[g] : 0.0, q_kl_max[g],
                       q_steps[g] ? (double)q_top1[g] / (double)q_steps[g] : 1.0);
            printf("}");
        }
        printf("}\n");
    } else {
        printf("\n%zu sessions, %zu turns: %zu prompt tokens, reused %zu (own %zu, pool %zu of which %zu from disk, "
               "approx %zu), computed %zu (exact minimum %zu)\n",
               n_paths, n_rows, tot_prompt, tot_own + tot_pool + tot_approx, tot_own, tot_pool, tot_disk, tot_approx,
               tot_comp, tot_min);
        if (restart_each)
            printf("%zu restarts (engine and model destroyed and loaded again) took %.1f ms in all\n", n_restarts,
                   (double)t_restart_us / 1000.0);
        if (tot_probed)
            printf("Tier 2: %zu positions probed, %zu candidates recomputed after the probe\n", tot_probed, tot_blend);
        printf("prefill %.1f ms, decode %.1f ms, wall %.1f ms; TTFT median %.1f ms, p90 %.1f ms\n", tot_prefill,
               tot_decode, wall_ms, ttft_med, ttft_p90);
        printf("KV blocks of %zu KiB: peak %u allocated (%.1f MiB), %u pinned; %" PRIu64 " evicted, %zu sessions "
               "parked; budget %u blocks\n",
               ps.block_bytes / 1024, peak_alloc, (double)peak_alloc * (double)ps.block_bytes / 1048576.0,
               peak_pinned, ps.evicted, tot_parked, ps.capacity);
        printf("decode: %zu tokens in %.1f ms (%.1f t/s)%s\n", tot_gen, tot_decode,
               tot_decode > 0 ? (double)tot_gen * 1000.0 / tot_decode : 0.0,
               teacher ? ", teacher-forced to the recorded responses (a simulation)" : "");
        if (spec.sources || tot_spec.drafted[DJ_SPEC_GRAMMAR])
            cli_spec_line(stdout, &tot_spec, spec_n_gen, etot.n_forward - n_prefill_passes);
        printf("logits_hash %016" PRIx64 "  ids_hash %016" PRIx64 "\n", acc.hash, ids_hash);
        if (ex) {
            printf("approx vs exact (teacher-forced): prefill %.1f ms vs %.1f ms\n", tot_prefill, tot_prefill_x);
            const char *scope[2] = {"all turns", "turns with approximate reuse"};
            for (int g = 0; g < 2; g++)
                printf("  %s: %zu turns, %zu steps, mean KL %.3e, max KL %.3e, top-1 agreement %.4f\n", scope[g],
                       q_turns[g], q_steps[g], q_steps[g] ? q_kl[g] / (double)q_steps[g] : 0.0, q_kl_max[g],
                       q_steps[g] ? (double)q_top1[g] / (double)q_steps[g] : 1.0);
        }
    }
    rc = 0;
done:
    if (rs)
        for (size_t i = 0; i < n_paths; i++) {
            engine_session_destroy(rs[i].s);
            engine_session_destroy(rs[i].sx);
            trace_close(rs[i].tr);
            free(rs[i].held);
            free(rs[i].toks);
            free(rs[i].ids);
            free(rs[i].resp);
        }
    free(rs);
    for (size_t k = 0; k < n_rows; k++) free(rows[k].attn);
    free(rows);
    free(chains.v);
    free(ref);
    free(ids_x);
    engine_destroy(ex);
    engine_destroy(e);
    model_free(m);
out_args:
    free(paths);
    return rc;
}
