/*
 * engine.h — sessions and turns: the exact (Tier 1) multi-turn KV reuse of
 * DESIGN.md §4 on one model, one inference context and one shared block pool.
 *
 *   struct dj_engine                     struct dj_session (many alive at once)
 *     model (borrowed)                     seq:  block table in the pool (pins its blocks)
 *     ctx  (one dj_context, shared pool)   hist: the tokens whose K/V seq holds, with
 *     pool (budget: --kv-budget MiB or           the chain hashes of their full blocks
 *           LLAMA_OPT_DEDUP_POOL_MAX blocks)
 *     cfg  (llama_opt_config), stats
 *
 * A turn (engine_turn), for a prompt of n tokens:
 *
 *   prompt:  [ own prefix L ][ pool blocks ][ computed ............ ][gen…]
 *             reused from     found by chain  ctx_decode, in ubatches   greedy
 *             seq (diff)      hash (dedup)
 *
 *   1. own prefix: L = longest common prefix of hist and the prompt, token
 *      granularity (LLAMA_OPT_DIFF_ENABLED; off: L = 0, every turn starts
 *      from an empty sequence).  L < n: the last prompt token is always fed,
 *      its logits start the generation.
 *   2. pool: from the block that holds position L, full blocks of the prompt
 *      found in the pool by chain hash with the same parent block and tokens
 *      (LLAMA_OPT_DEDUP_ENABLED) replace the table's entries; a hit on the
 *      block L lies in drops the partially matching own block first.
 *   3. the rest is computed; 4. n_gen tokens are generated greedily (the
 *      last one is not fed, so the sequence ends with n + n_gen - 1 tokens);
 *   5. every full block not sealed yet is sealed into the pool — or, when an
 *      identical sealed block (same chain hash, parent, tokens) already
 *      exists, the table points at that one and ours is dropped
 *      (canonicalization), so other sessions' later blocks chain onto one
 *      shared block.  Only with dedup on: with it off nothing is sealed and
 *      the pool holds only the sessions' private blocks.
 *
 * Exactness: every reused row is the K/V of the same token at the same
 * position after the same prefix, and the forward pass is batch-invariant
 * (DESIGN.md §3), so logits and tokens are bitwise those of a cold run.
 * Nothing after the first difference is reused — unless Tier 2 is on
 * (LLAMA_OPT_DIFF_MODE=approx, off by default): then KEEP spans after the
 * edit of at least LLAMA_OPT_DIFF_MIN_UNCHANGED tokens are reused with
 * RoPE-corrected K, and the LLAMA_OPT_DIFF_RECOMPUTE fraction of them whose
 * layer-1 K deviates most from a fresh probe is recomputed (CacheBlend; see
 * approx_reuse in engine.c).  Approximate rows, and everything computed after
 * them, are never sealed into the shared pool: other sessions only ever
 * reuse exact blocks.
 *
 * Memory pressure: blocks of live sessions are pinned; cached (sealed,
 * unreferenced) blocks are evicted LRU when the budget is reached.  When
 * every block is pinned, the engine parks the other sessions (drops their
 * pins; their sealed blocks stay cached and are found again by chain hash)
 * and retries; if one sequence alone does not fit, the turn fails with a
 * message giving the budget and the need.
 *
 * Not thread-safe: one thread drives an engine.
 */
#ifndef DJ_ENGINE_ENGINE_H
#define DJ_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kv/pool.h"
#include "model/model.h"
#include "opt/opt.h"

struct dj_engine_params {
    uint32_t n_ctx;       /* most positions of one session; 0 = the model's training context */
    uint32_t n_ubatch;    /* tokens per forward step; 0 = 512 */
    int n_threads;        /* 0 = 1 */
    double kv_budget_mib; /* KV block memory; 0 = opt.dedup_pool_max blocks */
    struct llama_opt_config opt; /* block size, dedup/diff switches, stats */
    FILE *stats_out;      /* where opt-stats lines go when opt.stats_enabled; NULL = stderr */
};

/* n_ctx 0, n_ubatch 512, 1 thread, no MiB budget, opt = llama_opt_config_default(). */
struct dj_engine_params engine_default_params(void);

/* Called with every logits vector a turn produces, in order: the last prompt
 * position's, then one after feeding each generated token but the last. */
typedef void (*dj_logits_fn)(void *ud, const float *logits, size_t n_vocab);

struct dj_turn_params {
    size_t n_gen;          /* tokens to generate greedily (>= 1); end-of-generation does not stop */
    dj_logits_fn on_logits; /* NULL: none */
    void *ud;
    const dj_token *force; /* NULL, or n_gen tokens fed instead of the greedy choice (teacher
                              forcing, to compare two configurations on the same text); ids
                              still get the greedy choices */
};

struct dj_turn_result {
    size_t n_prompt;
    size_t n_reused_own;   /* positions kept from the session's own sequence */
    size_t n_reused_pool;  /* positions taken from pool blocks (dedup hits) */
    size_t n_computed;     /* prompt positions computed through every layer: n_prompt - own - pool
                              (- approx in Tier 2) */
    size_t n_reused_approx; /* Tier 2: positions after an edit reused with RoPE-corrected K */
    size_t n_blend;        /* Tier 2: candidates recomputed after the probe (in n_computed) */
    size_t n_probed;       /* Tier 2: candidates run through the probe (layer 0, layer-1 K/V) */
    size_t n_gen;
    size_t n_parked;       /* other sessions parked under memory pressure during the turn */
    double t_prefill_ms;   /* reuse + computing the prompt's K/V and logits */
    double t_ttft_ms;      /* turn start to the first generated token */
    double t_decode_ms;    /* the rest of the generation */
};

struct dj_engine;
struct dj_session;

/* The engine borrows m (it must outlive the engine).  Fails with
 * DJ_ERR_INVALID (a message) for a budget that holds no block. */
enum dj_status engine_create(const struct dj_model *m, const struct dj_engine_params *p, struct dj_engine **out);
/* Destroys the sessions still alive, then the engine.  Accepts NULL. */
void engine_destroy(struct dj_engine *e);

enum dj_status engine_session_create(struct dj_engine *e, struct dj_session **out);
/* Unrefs the session's blocks (sealed ones stay cached for other sessions).  Accepts NULL. */
void engine_session_destroy(struct dj_session *s);

/* One turn (see above).  ids gets tp->n_gen generated tokens.  On failure
 * (DJ_ERR_INVALID: empty prompt, token out of range, prompt + generation past
 * n_ctx; DJ_ERR_NOMEM: the budget cannot hold this sequence) the session is
 * left consistent (its sequence holds what was computed) and may be reused. */
enum dj_status engine_turn(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                           const struct dj_turn_params *tp, dj_token *ids, struct dj_turn_result *res);

/* Tokens whose K/V the session holds (valid until its next turn). */
const dj_token *engine_session_tokens(const struct dj_session *s, size_t *n);
size_t engine_session_n_blocks(const struct dj_session *s);

const struct llama_opt_config *engine_config(const struct dj_engine *e);
/* Running totals of every turn so far. */
void engine_get_stats(const struct dj_engine *e, struct llama_opt_stats *out);
void engine_pool_stats(const struct dj_engine *e, struct kv_pool_stats *out);
/* Most blocks allocated / pinned at the end of any turn so far. */
void engine_peak_blocks(const struct dj_engine *e, uint32_t *allocated, uint32_t *pinned);
uint32_t engine_block_size(const struct dj_engine *e);
uint32_t engine_n_ctx(const struct dj_engine *e);

#endif
