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
 *      block L lies in drops the partially matching own block first; then
 *      (LLAMA_OPT_PERSIST_ENABLED) the next blocks from the disk store, verified
 *      the same way.  A block ending at the prompt's end is taken too and its
 *      last row given back (the last token is computed into a copy on write).
 *   3. the rest is computed; 4. n_gen tokens are generated greedily (the
 *      last one is not fed, so the sequence ends with n + n_gen - 1 tokens);
 *   5. every full block not sealed yet is sealed into the pool — or, when an
 *      identical sealed block (same chain hash, parent, tokens) already
 *      exists, the table points at that one and ours is dropped
 *      (canonicalization, LLAMA_OPT_CANON_ENABLED; off: ours is sealed
 *      beside it), so other sessions' later blocks chain onto one shared
 *      block.  Only with dedup on: with it off nothing is sealed and the pool
 *      holds only the sessions' private blocks.
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
 * The scheduler (sched.c): requests, not turns.
 *
 *   any thread                      engine thread (one)
 *   engine_submit(params) -> id --> inbox --> waiting --admit--> running --> done
 *   engine_cancel(id)       ------> inbox      (FIFO)   (KV reserve)  |  callbacks:
 *                                                                     |  on_token, on_done
 *   engine_step(): one batched forward pass (ctx_forward) over every
 *   running request's next decode token(s) plus prefill chunks of admitted
 *   prompts, up to n_batch tokens a step (chunked prefill: a long prompt
 *   takes several steps and the others keep decoding meanwhile).
 *
 * Speculative decoding (dj_engine_params.spec; docs/SPECULATIVE.md): after a
 * sampled token a completion may feed a draft (prompt lookup, the output
 * memo, early exit; a grammar's forced strings) in the same step; each
 * draft position's logits are sampled exactly as without drafts and the
 * drafts the sampler confirms are kept, the rest rolled back before any
 * block is sealed — tokens and logits are bitwise those of plain decoding.
 *
 * A request without a session is matched to the idle engine-owned sequence
 * with the longest common prefix (agents send no session id), or a fresh
 * one; then steps 1-2 above (own prefix, pool blocks) and Tier 2 apply as
 * for a turn.  A request may name a session (engine_session_create): it then
 * runs on that session's sequence (replay and tests use this).
 *
 * Admission by KV memory: a request reserves the blocks its prompt and its
 * largest generation can need (per completion for n > 1, which share the
 * prompt's blocks copy-on-write); it is admitted when the reservations of
 * the running requests and its own fit the budget, and waits otherwise (in
 * order).  One that can never fit fails at once with the numbers.  Idle
 * sequences keep their blocks pinned (exact reuse at token granularity) until
 * memory is needed: then the least recently used are parked (pins dropped;
 * sealed blocks stay cached, found again by chain hash).  A running request
 * is never parked or preempted.
 *
 * Threading: engine_submit, engine_cancel, engine_wait_work and
 * engine_n_pending may be called from any thread; everything else, and every
 * callback, runs on the one thread that calls engine_step.
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
#include "sample/processor.h"
#include "sample/sampler.h"
#include "spec/spec.h"

/* What a prompt that does not fit the context gets (--context-overflow; issue 33). */
enum dj_ctx_overflow {
    DJ_OVERFLOW_ERROR = 0, /* refused, as the APIs do (the agent compacts its history) */
    DJ_OVERFLOW_PRUNE,     /* whole blocks of its middle dropped (engine/overflow.c; Tier 2) */
};

struct dj_engine_params {
    uint32_t n_ctx;       /* most positions of one sequence; 0 = the model's training context */
    uint32_t n_ubatch;    /* tokens per forward pass; 0 = 512 */
    uint32_t n_batch;     /* tokens per engine_step (decode tokens + prefill chunks); 0 = n_ubatch.
                             Smaller: long prompts stall the decoding of others for less time */
    bool chunked_prefill; /* false: an admitted prompt is prefilled whole in its first step */
    int n_threads;        /* 0 = 1 */
    double kv_budget_mib; /* KV block memory in MiB; 0 = kv_budget_auto or opt.dedup_pool_max blocks */
    bool kv_budget_auto;  /* with kv_budget_mib 0: half the machine's available memory (MemAvailable),
                             at least one context; fails at creation if not even one context fits */
    uint32_t n_seq_idle_max; /* idle engine-owned sequences kept for prefix matching; 0 = 64 */
    uint32_t n_running_max;  /* requests admitted at once (the server's --parallel); 0 = no limit
                                but the KV budget */
    uint64_t persist_max_bytes; /* disk budget of the persistent KV store (opt.persist_*); 0 = none */
    uint32_t kv_type_k, kv_type_v; /* K/V cache element types (enum dj_ggml_type: f32, f16, bf16, q8_0,
                                      q4_0; -ctk/-ctv); engine_default_params: kv_type_default() */
    uint32_t gpu;                /* 0: the CPU; N > 0: the forward pass on Vulkan device N - 1 (--device;
                                    ctx_params.gpu).  Not with drafts of source exit or mtp or approximate
                                    reuse yet; the persistent store keys its blocks by the device
                                    (ctx_device_id); the KV budget is capped to what the device's K/V mirror
                                    can hold (ctx_gpu_blocks_max) */
    struct llama_opt_config opt; /* block size, dedup/diff switches, stats */
    struct dj_spec_params spec;  /* speculative decoding (draft sources, spec/spec.h); default off.
                                    The memo source also needs opt.memo_enabled (bounded by
                                    opt.memo_trie_max nodes) */
    FILE *stats_out;      /* where opt-stats lines go when opt.stats_enabled; NULL = stderr */
    enum dj_ctx_overflow overflow; /* a prompt that does not fit: refused (default) or shortened */
};

/* n_ctx 0, n_ubatch 512, n_batch 0, chunked prefill on, 1 thread, no MiB
 * budget (opt.dedup_pool_max blocks), opt = llama_opt_config_default(). */
struct dj_engine_params engine_default_params(void);

/* Called with every logits vector a request produces, in order (tests and
 * replay hash them): the last prompt position's, then one after feeding each
 * generated token but the last (skipped forced tokens produce none). */
typedef void (*dj_logits_fn)(void *ud, const float *logits, size_t n_vocab);


enum dj_finish {
    DJ_FINISH_NONE = 0,
    DJ_FINISH_STOP,      /* an end-of-generation token or a stop string */
    DJ_FINISH_LENGTH,    /* max_tokens or the context size */
    DJ_FINISH_CANCELLED, /* engine_cancel */
    DJ_FINISH_ERROR,     /* see status / error */
};
const char *engine_finish_name(enum dj_finish f); /* "stop", "length", "cancelled", "error" */

/* One generated token, as the on_token callback sees it. */
struct dj_token_event {
    uint64_t id;         /* the request */
    uint32_t index;      /* the completion (0 .. n-1) */
    size_t pos;          /* output position (0 = first generated token) */
    dj_token tok;
    bool forced;         /* emitted by the processor without sampling */
    const char *text;    /* the text now safe to emit: whole UTF-8 characters, never part of a
                            stop string; may be empty (held back) or hold earlier tokens' text */
    size_t n_text;
    float logprob;       /* with logprobs: log-probability of tok under the (masked) model
                            distribution; 0 for forced tokens */
    const struct dj_logprob *top; /* with n_probs: the most likely alternatives */
    size_t n_top;
};

struct dj_turn_result {
    uint64_t id;
    uint32_t index;
    enum dj_finish finish;
    enum dj_status status; /* DJ_OK unless finish is DJ_FINISH_ERROR */
    char error[256];
    int stop_index;        /* the stop string that matched, or -1 */
    size_t n_prompt;
    size_t n_cached;       /* prompt positions reused: own + pool (+ approx) */
    size_t n_reused_own;   /* positions kept from the sequence's own earlier tokens */
    size_t n_reused_pool;  /* positions taken from pool blocks (dedup hits), disk ones included */
    size_t n_reused_disk;  /* of n_reused_pool: blocks read from the persistent store (--kv-dir) */
    size_t n_computed;     /* prompt positions computed through every layer */
    size_t n_reused_ckpt;  /* hybrid models: of the reused positions, those resumed from a recurrent-state
                              checkpoint (the rest, from the sequence's own live state) */
    size_t n_reused_ckpt_disk; /* of n_reused_ckpt: a checkpoint read from --kv-dir (its length; 0: none) */
    size_t n_kv_recomputed; /* hybrid models: positions whose K/V rows were cached (own or pool) but that were
                              computed again (in n_computed): no checkpoint held the recurrent state there */
    size_t n_reused_approx; /* Tier 2: positions after an edit reused with RoPE-corrected K */
    size_t n_blend;        /* Tier 2: candidates recomputed after the probe (in n_computed) */
    size_t n_probed;       /* Tier 2: candidates run through the probe (layer 0, layer-1 K/V) */
    size_t n_ctx_dropped;  /* Tier 2 (--context-overflow prune): prompt tokens dropped so that it fits */
    size_t n_attn_skipped; /* Tier 2 (LLAMA_OPT_ATTN_PRUNE): tokens outside the attention set during the turn */
    size_t n_attn_pruned;  /* Tier 2: tokens that left the attention set at the turn's end */
    size_t n_attn_restored; /* Tier 2: tokens the probe brought back (at once, and at the turn's end) */
    size_t n_gen;          /* tokens generated (sampled + forced, the end token included) */
    size_t n_forced;       /* emitted without a forward pass for their position (the processor forced them) */
    size_t n_drafted;      /* draft tokens fed for verification (every source) */
    size_t n_draft_accepted; /* drafts the sampler confirmed (each saved a pass) */
    struct dj_spec_counts spec; /* the same per draft source, and by draft position */
    size_t n_parked;       /* idle sequences parked under memory pressure while it ran */
    double t_queue_ms;     /* submit to admission */
    double t_prefill_ms;   /* admission to the prompt's logits */
    double t_ttft_ms;      /* submit to the first generated token */
    double t_decode_ms;    /* first token to the end */
};

typedef void (*dj_token_fn)(void *ud, const struct dj_token_event *ev);
/* Once per completion, last; the request's memory is released after the last. */
typedef void (*dj_done_fn)(void *ud, const struct dj_turn_result *r);

struct dj_session;

struct dj_request_params {
    const dj_token *prompt; /* copied */
    size_t n_prompt;
    size_t max_tokens;      /* >= 1; capped by the context size (finish "length") */
    uint32_t n;             /* completions; 0 = 1 */
    struct dj_sampler_params sampling; /* completion i > 0 uses seed dj_rng_u64(seed, i) */
    const char *const *stop; /* n_stop stop strings (copied) */
    size_t n_stop;
    bool ignore_eos;        /* end-of-generation tokens do not stop */
    bool logprobs;
    uint32_t n_probs;       /* alternatives per token (<= 20 is sensible; capped at 100) */
    const struct dj_logits_processor *proc; /* NULL: none; copied (not ud) */
    struct dj_session *session; /* NULL: matched by prefix among the engine's idle sequences */
    const char *cache_salt; /* NULL: the shared cache; else a namespace (vLLM's cache_salt): the
                               prompt reuses only blocks and sequences of requests with the same
                               salt (copied as a hash; not for a named session) */
    dj_token_fn on_token;   /* NULL: none */
    dj_done_fn on_done;     /* NULL: none */
    dj_logits_fn on_logits; /* NULL: none */
    void *ud;
    void *logits_ud;        /* on_logits' argument; NULL: ud */
    const dj_token *force;  /* tests: max_tokens tokens fed instead of the sampled ones (teacher
                               forcing); events still report the sampled ones */
};
struct dj_request_params engine_default_request(void); /* max_tokens 16, greedy, n 1 */

struct dj_engine;

/* The engine borrows m (it must outlive the engine).  Fails with
 * DJ_ERR_INVALID (a message) for a budget that holds no block, or
 * DJ_ERR_NOMEM when the automatic budget cannot hold one context. */
enum dj_status engine_create(const struct dj_model *m, const struct dj_engine_params *p, struct dj_engine **out);
/* Fails every request still queued or running (no callbacks), destroys the
 * sessions, then the engine.  Accepts NULL. */
void engine_destroy(struct dj_engine *e);

/* Queues a request; thread-safe.  Checks what can be checked at once
 * (prompt empty or out of the vocabulary, prompt not shorter than the
 * context, bad sampling parameters, a request that can never fit the KV
 * budget): DJ_ERR_INVALID / DJ_ERR_NOMEM and a message, no callbacks.
 * *id: the request's handle for engine_cancel. */
enum dj_status engine_submit(struct dj_engine *e, const struct dj_request_params *p, uint64_t *id);
/* Asks to stop a request (thread-safe; unknown or finished ids are ignored):
 * at its next step it finishes with DJ_FINISH_CANCELLED, its full exact
 * blocks stay cached, and its sequence holds no pins. */
void engine_cancel(struct dj_engine *e, uint64_t id);
/* One scheduling step and at most one batched forward pass (engine thread).
 * Returns the tokens computed (0: nothing to do).  Failures are per request
 * (on_done with DJ_FINISH_ERROR); the engine goes on. */
size_t engine_step(struct dj_engine *e);
/* Requests queued, waiting or running (thread-safe). */
size_t engine_n_pending(struct dj_engine *e);
/* Requests admitted and running (engine thread; requests per completion as
 * admitted, so n > 1 counts once). */
size_t engine_n_running(const struct dj_engine *e);
/* Blocks until a request or cancel is submitted, or timeout_ms passes
 * (thread-safe; for the engine thread when engine_n_pending is 0). */
void engine_wait_work(struct dj_engine *e, int timeout_ms);
/* Runs engine_step until no request is pending (engine thread). */
void engine_run_all(struct dj_engine *e);

/* ---- sessions: a named sequence, for replay and tests ------------------ */

enum dj_status engine_session_create(struct dj_engine *e, struct dj_session **out);
/* Unrefs the session's blocks (sealed ones stay cached).  Not while a request runs on it.  Accepts NULL. */
void engine_session_destroy(struct dj_session *s);

/* ---- the old single-turn API (a request on a session, run to the end) ---- */

struct dj_turn_params {
    size_t n_gen;          /* tokens to generate greedily (>= 1); end-of-generation does not stop */
    dj_logits_fn on_logits; /* NULL: none */
    void *ud;
    const dj_token *force; /* NULL, or n_gen tokens fed instead of the greedy choice (teacher
                              forcing, to compare two configurations on the same text); ids
                              still get the greedy choices */
};

/* Submits a greedy request on session s and steps the engine until it is
 * done (other queued requests run alongside).  ids gets tp->n_gen tokens.
 * Fails (DJ_ERR_INVALID / DJ_ERR_NOMEM, message) as engine_submit does, or
 * with the request's error; the session is left consistent. */
enum dj_status engine_turn(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                           const struct dj_turn_params *tp, dj_token *ids, struct dj_turn_result *res);

/* Tokens whose K/V the session holds (valid until its next request). */
const dj_token *engine_session_tokens(const struct dj_session *s, size_t *n);
size_t engine_session_n_blocks(const struct dj_session *s);
enum dj_ctx_overflow engine_overflow(const struct dj_engine *e);
/* Attention statistics of s (LLAMA_OPT_ATTN_STATS_ENABLED / _PRUNE_ENABLED): the number of
 * full blocks with a weight after its last turn; *weight: each block's weight (its largest
 * share of a head's attention mass in that turn), *skip: 1 where the block is outside the
 * attention set (Tier 2).  0 (pointers NULL) without statistics. */
size_t engine_session_attn(const struct dj_session *s, const float **weight, const uint8_t **skip);

const struct llama_opt_config *engine_config(const struct dj_engine *e);
/* Running totals of every request so far. */
void engine_get_stats(const struct dj_engine *e, struct llama_opt_stats *out);
void engine_pool_stats(const struct dj_engine *e, struct kv_pool_stats *out);
/* Most blocks allocated / pinned at the end of any step so far. */
/* Pinned blocks that only idle sessions hold (kept for their next turn; released when
 * memory is needed): of kv_pool_stats.pinned, the part no running request uses. */
uint32_t engine_n_blocks_idle(struct dj_engine *e);
void engine_peak_blocks(const struct dj_engine *e, uint32_t *allocated, uint32_t *pinned);
/* true when the persistent KV store is open (opt.persist_enabled with a directory, the
 * pool on, and the store opened: engine_create only warns when it cannot be). */
bool engine_persist_on(const struct dj_engine *e);
uint32_t engine_block_size(const struct dj_engine *e);
uint32_t engine_n_ctx(const struct dj_engine *e);
/* Batched forward passes run so far, and the tokens they held. */
uint64_t engine_n_forward(const struct dj_engine *e);
/* Of those, the passes that held a prompt chunk (the rest only decoded). */
uint64_t engine_n_forward_prefill(const struct dj_engine *e);
/* Draft counters of every request so far (spec/spec.h), the output memo's
 * size, and the policy's cost model: one more row in a pass of n_rows rows
 * costs *beta of it (measured). */
void engine_spec_counts(const struct dj_engine *e, struct dj_spec_counts *out, uint32_t *memo_nodes,
                        uint32_t *memo_records);
double engine_spec_beta(const struct dj_engine *e, size_t n_rows);
/* Parks every idle sequence (drops their pins; sealed blocks stay cached). */
void engine_park_idle(struct dj_engine *e);
/* KV bytes per position (K and V, every layer, in the types given) of a model; an MLA
 * model's K-only pool has no V rows: n_layer K rows of kv_lora + rope elements of type_k. */
size_t engine_kv_bytes_per_token(const struct dj_model *m, uint32_t type_k, uint32_t type_v);

#endif
