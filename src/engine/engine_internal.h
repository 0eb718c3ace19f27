/*
 * engine_internal.h — the engine's private types, shared by engine.c (the
 * engine, sessions, prefix reuse, sealing, Tier 2) and sched.c (requests and
 * the step loop).  Everything here is touched by the engine thread only,
 * except the inbox (guarded by mu).
 */
#ifndef DJ_ENGINE_INTERNAL_H
#define DJ_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/engine.h"
#include "engine/stop.h"
#include "kv/attn_prune.h"
#include "kv/history.h"
#include "model/context.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

enum { DJ_FEED_MAX = 64 }; /* tokens one completion feeds in one step (sampled + forced + drafts) */
/* Hybrid models: bytes of recurrent-state snapshots one completion's draft may need (one per draft) */
#define RS_SNAP_BUDGET ((size_t)256 << 20)
/* Hybrid models: bytes of live recurrent states idle engine-owned sequences may hold */
#define RS_IDLE_BUDGET ((size_t)1 << 30)
/* Checkpoints on disk: block sizes up to this (the padded last block is on the stack); a
 * resumed prompt probes its last KV_RS_PROBE positions, then the interval's boundaries */
#define KV_RS_PAD_MAX 1024
#define KV_RS_PROBE 1024

struct dj_req;

/* The context-overflow policy's memory (overflow.c): the original prompt a session was
 * last given and the original blocks dropped from it (increasing). */
struct ovf_state {
    dj_token *orig;
    size_t n_orig;
    uint32_t *drop;
    size_t n_drop;
};
void ovf_free(struct ovf_state *o);

/* A proposal that was not drafted, compared with the tokens generated after
 * it (the policy learns the source's acceptance without paying for it). */
struct spec_shadow {
    dj_token tok[DJ_FEED_MAX];
    size_t n, pos0;  /* tok[j] predicts output position pos0 + j */
    size_t n_match;  /* matched so far */
    uint32_t bucket;
    bool on;
};

struct dj_session {
    struct dj_engine *e;
    struct kv_seq seq;
    struct kv_history hist;
    size_t n_exact;      /* positions [0, n_exact) hold exact K/V (Tier 2 leaves approximate rows after) */
    size_t n_sealed;     /* blocks [0, n_sealed) are known sealed (a hint for seal_blocks) */
    uint64_t last_used;  /* engine step of its last use: parking goes oldest first */
    bool anon;           /* engine-owned: matched by prefix; destroyed when parked */
    struct dj_req *busy; /* the request running on it, or NULL (idle) */
    struct kv_attn *attn; /* attention statistics and skip set (engine.attn_on), or NULL; seq.attn points here */
    struct ovf_state ovf; /* --context-overflow prune: what its last prompt dropped (empty: nothing) */
    struct dj_session *prev, *next;
};

/* One completion of a request. */
struct dj_comp {
    struct dj_session *s;
    struct dj_sampler *smp;
    struct dj_detok *detok;
    struct dj_stop stop;
    void *proc_ud;           /* the processor's state: the request's ud (index 0) or a fork */
    dj_token *gen;           /* generated tokens (n_gen, cap) */
    size_t n_gen, cap;
    dj_token feed[DJ_FEED_MAX]; /* fed in the next step */
    size_t n_feed;
    size_t n_draft;          /* the last n_draft of feed are drafts, verified after the step */
    size_t n_forced;
    size_t n_drafted, n_draft_accepted;
    /* speculation (spec/spec.h): the completion's context for prompt lookup and the memo,
     * the source of the draft in flight, shadow proposals being compared with the output */
    struct spec_lookup lk;
    bool lk_on;
    enum dj_spec_src draft_src;
    struct spec_shadow shadow[DJ_SPEC_N_SRC];
    struct dj_spec_counts sc;
    uint32_t exit_k;         /* early-exit drafts to make before the next step (exit_drafts) */
    uint32_t exit_idle;      /* steps since the exit source last drafted (a probe after SPEC_EXIT_PROBE) */
    uint32_t mtp_k;          /* MTP drafts to make before the next step (engine_mtp_drafts) */
    uint32_t mtp_idle;       /* steps since the mtp source last drafted (a probe after SPEC_EXIT_PROBE) */
    float *xh;               /* (DJ_FEED_MAX, n_embd) hidden rows at the exit layer of the fed tokens */
    enum dj_finish finish;   /* DJ_FINISH_NONE while running */
    int stop_index;
    double t_done_ms;
    size_t snap0;            /* hybrid models: the step's rs_snap row of its first draft rollback state */
};

enum dj_req_state { REQ_WAITING, REQ_PREFILL, REQ_DECODE };

struct dj_req {
    uint64_t id;
    struct dj_request_params p; /* pointers below replace the caller's */
    dj_token *prompt;
    char **stop;
    struct dj_logit_bias *bias;
    struct dj_logits_processor proc;
    bool has_proc;
    enum dj_req_state state;
    uint32_t n_comp;
    struct dj_comp *comp;
    size_t max_gen;            /* max_tokens capped by the context */
    size_t reserve;            /* KV blocks reserved while admitted */
    bool cancel;
    enum dj_status err;        /* a request-wide failure */
    char errmsg[256];
    struct dj_turn_result r;   /* the shared counters (reuse, timings) */
    struct ovf_state ovf;      /* --context-overflow prune: the original prompt and its dropped blocks */
    uint64_t root;             /* the chain root of its cache namespace (KV_CHAIN_ROOT: shared) */
    int64_t t_submit, t_admit, t_first;
    struct dj_req *next;
};

struct dj_engine {
    const struct dj_model *model;
    struct dj_context *ctx;
    struct kv_pool *pool;
    struct kv_store *store; /* persistent KV blocks (opt.persist_enabled), NULL when off */
    struct llama_opt_config cfg;
    struct dj_engine_params p;
    struct llama_opt_stats stats, stats_last;
    bool attn_on;                  /* attention statistics on (LLAMA_OPT_ATTN_STATS / _PRUNE) */
    struct kv_prune_params prune;  /* their policy (prune.prune: Tier 2 pruning) */
    FILE *stats_out;
    float *logits;      /* n_vocab (single-sequence paths: Tier 2) */
    float *work;        /* n_vocab: a processor's masked copy */
    uint32_t block_size;
    size_t block_bytes;
    uint32_t peak_allocated, peak_pinned;
    uint16_t *idle_refs; /* engine_n_blocks_idle's scratch: references per block (capacity entries) */
    uint32_t *idle_ids;  /* and the blocks it touched */
    struct dj_session *sessions; /* doubly linked list */
    uint64_t n_step, n_forward, n_forward_tok;
    uint64_t n_forward_prefill; /* passes that held a prompt chunk */
    /* speculation */
    struct spec_memo *memo;        /* the output memo (NULL: the memo source is off) */
    struct spec_policy pol;
    struct dj_spec_counts spec_tot;
    size_t n_rows_last;            /* rows of the last decode pass (the policy's cost model) */
    uint32_t exit_layer;           /* early-exit drafts run layers [0, exit_layer); 0: not chosen yet (auto) */
    double exit_a, exit_h;         /* weight bytes of layers < exit_layer, of the output matrix: fractions of all */
    uint64_t n_forward_exit;       /* early-exit draft passes */
    struct {                       /* early-exit draft passes' batch (x_cap rows: completions drafting) */
        struct dj_comp **cs;
        dj_token *tok;
        uint32_t *pos, *out;
        struct kv_seq **seq;
        float *hid, *lg;           /* (x_cap, n_embd), (x_cap, n_vocab) */
        size_t cap;
    } xs;
    uint32_t *b_start;             /* (b_xcap) the step's start layers, when drafts resume at the exit layer */
    float *b_hidden;               /* (b_xcap, n_embd) their hidden rows */
    size_t b_xcap;

    /* drafting from the MTP block (source mtp; ctx_params.mtp) */
    bool mtp;
    double mtp_a, mtp_h;           /* weight bytes of the block, of its head: fractions of a full pass's */
    uint64_t n_forward_mtp;        /* MTP draft passes */
    size_t rs_floats;              /* floats of a sequence's state (the pool's: hp.rs_floats, + n_embd with mtp) */

    /* hybrid models (hp.rs_floats > 0; kv/ckpt.h, DESIGN.md §1 "recurrent layers") */
    struct kv_ckpt_store *ckpt;    /* recurrent-state checkpoints; NULL: none kept (LLAMA_OPT_RS_CKPT_MAX_MB=0) */
    struct kv_store *rs_store;     /* the same on disk (--kv-dir), or NULL */
    float *rs_snap;                /* (rs_snap_cap, rs_floats) the step's state snapshots */
    size_t rs_snap_cap;
    float **b_snap;                /* (b_cap) the batch rows' snapshot targets, or NULL */
    size_t b_snap_cap;
    size_t rs_draft_max;           /* most drafts a completion feeds: their rollback states must fit */
    struct rs_put { struct dj_req *q; size_t n; size_t row; } *rs_puts; /* prompt checkpoints of the step */
    size_t n_rs_puts, rs_puts_cap;

    /* requests (engine thread) */
    struct dj_req *waiting, *running; /* singly linked, in order */
    size_t reserved;                  /* blocks reserved by running requests */
    /* the step's batch (grown as needed) */
    dj_token *b_tok;
    uint32_t *b_pos, *b_out;
    struct kv_seq **b_seq;
    size_t b_cap;
    float *b_logits;
    size_t b_logits_rows;
    struct step_ent *ent;
    size_t ent_cap;
    char *text;                       /* an event's text */
    size_t text_cap;
    struct dj_logprob *top;           /* n_probs alternatives */

    /* inbox (any thread) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct dj_req *inbox, *inbox_tail;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    uint64_t next_id;
    atomic_size_t n_pending;
};

/* One sequence's tokens in the step's batch. */
struct step_ent {
    struct dj_req *req;
    uint32_t comp;   /* completion index (prefill: 0) */
    size_t i0, n;    /* batch rows */
    bool prefill;
    int64_t out;     /* logits row, or -1 */
};

/* sched.c: frees every queued and running request without callbacks. */
void engine_drop_requests(struct dj_engine *e);
/* Makes n more positions of s writable, parking idle sequences while memory is short. */
enum dj_status engine_prepare_rows(struct dj_engine *e, struct dj_req *q, struct dj_session *s, size_t n);

/* draft.c (speculative decoding; docs/SPECULATIVE.md) */
/* The token the completion's sequence continues with at output position pos: into its
 * lookup context; every shadow proposal is compared with it. */
void engine_spec_note_token(struct dj_engine *e, struct dj_comp *c, size_t pos, dj_token tok);
/* Appends nd draft tokens of source src (already in c->feed after the real ones) to
 * what c feeds this step, and counts them. */
void engine_feed_draft(struct dj_comp *c, enum dj_spec_src src, size_t nd);
/* The draft after the completion's sampled (and forced) tokens, into out (at most cap),
 * fed (engine_feed_draft): returns its length; or 0 with c->exit_k set when early exit
 * is to draft next step. */
size_t engine_spec_choose(struct dj_engine *e, struct dj_req *q, struct dj_comp *c, dj_token *out, size_t cap);
/* Runs the MTP drafts the completions asked for (mtp_k; before a step's batch). */
void engine_mtp_drafts(struct dj_engine *e);
/* Runs the early-exit drafts the completions asked for (before a step's batch). */
void engine_exit_drafts(struct dj_engine *e);
/* The step's start layers and hidden rows for completions verifying exit drafts: false
 * when there are none (or *oom). */
bool engine_exit_rows(struct dj_engine *e, size_t nt, size_t n_ent, bool *oom);
/* --draft-exit-layer auto: picks e->exit_layer by measurement on session s's prompt. */
void engine_exit_calibrate(struct dj_engine *e, struct dj_session *s);

/* engine.c */
/* Hybrid models, after a prompt's reuse (steps 1-2) left s at a position its recurrent
 * state is not at: back to the latest checkpoint at or before it (or 0), counted in r. */
enum dj_status engine_rs_resume(struct dj_engine *e, struct dj_session *s, const dj_token *prompt,
                                struct dj_turn_result *r);
/* Keeps a checkpoint of s's recurrent state at its end (n_pos), when valid. */
void engine_rs_checkpoint(struct dj_engine *e, struct dj_session *s);
/* Keeps rs as the checkpoint after the first p tokens of s's history (p <= hist.n_tok):
 * in memory and, with --kv-dir, on disk. */
void engine_rs_save(struct dj_engine *e, struct dj_session *s, size_t p, const float *rs);
/* Weight bytes of layers < L and of the output matrix, as fractions of every layer's and
 * the output matrix's (the early-exit cost model, spec_policy_length_exit). */
void engine_exit_fracs(const struct dj_engine *e, uint32_t L, double *a, double *h);
/* The MTP block's weight bytes and its head's, as fractions of a full pass's (source mtp). */
void engine_mtp_fracs(const struct dj_engine *e, double *a, double *h);
void session_truncate(struct dj_session *s, size_t n);
bool engine_park_one(struct dj_engine *e, const struct dj_session *keep);
enum dj_status engine_new_session(struct dj_engine *e, bool anon, struct dj_session **out);
void seal_blocks(struct dj_engine *e, struct dj_session *s);
/* Steps 1-2 (and Tier 2) of a prompt on session s: reuses the own prefix and
 * pool blocks; with Tier 2 may compute the whole prompt (*prefilled: the
 * last position's logits are in e->logits).  Fills r's reuse counters. */
enum dj_status engine_reuse_prompt(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                                   struct dj_turn_result *r, bool *prefilled);

/* Attention statistics and pruning (kv/attn_prune.h; engine.c), with e->attn_on:
 * a turn of s begins (its prompt of n tokens: the probe is its last), ends (the
 * policy decides; r gets the tokens pruned and restored), a fork copies s0's set. */
enum dj_status engine_attn_begin(struct dj_engine *e, struct dj_session *s, size_t n_prompt);
void engine_attn_end(struct dj_engine *e, struct dj_session *s, struct dj_turn_result *r);
enum dj_status engine_attn_fork(struct dj_engine *e, const struct dj_session *s0, struct dj_session *s);

/* --context-overflow prune (overflow.c): when p's prompt and room to generate do not fit,
 * *short_prompt (malloc'd) = the prompt without whole blocks of its middle, *out = what was
 * dropped (for the session that runs it); else *short_prompt NULL.  DJ_ERR_INVALID when even
 * that cannot fit. */
enum dj_status engine_overflow_shorten(struct dj_engine *e, const struct dj_request_params *p, uint64_t root,
                                       struct ovf_state *out, dj_token **short_prompt, size_t *n_short);

#endif
