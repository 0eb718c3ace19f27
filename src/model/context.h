/*
 * context.h — an inference context over a loaded model: scratch buffers, the
 * thread pool, the kernel table, and ctx_decode, the forward pass over a
 * batch of tokens appended to the current KV sequence.
 *
 * KV cache: paged (src/kv/pool.h).  Position p of the current sequence lives
 * in block table[p / block_size], row p % block_size, for every layer.  A
 * context creates its own pool and sequence unless given a shared pool
 * (ctx_params.pool), in which case the caller (the engine) owns the
 * sequences and switches between them with ctx_set_seq.
 *
 * Determinism (DESIGN.md §3): a token's logits depend only on the tokens and
 * their positions, never on how they were split into ubatches or threads or
 * on where their K/V rows live: matrix products give each output element one
 * fixed reduction order, threads split output rows, attention visits keys in
 * position order, block by block, with the same arithmetic as one pass.
 */
#ifndef DJ_MODEL_CONTEXT_H
#define DJ_MODEL_CONTEXT_H

#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kv/pool.h"
#include "model/model.h"

struct dj_ctx_params {
    uint32_t n_ctx;         /* most positions of one sequence; 0 = the model's training context */
    uint32_t n_ubatch;      /* tokens per forward step; 0 = 512 */
    int n_threads;          /* 0 = 1 */
    uint32_t block_size;    /* KV positions per block (own pool); 0 = 64 */
    struct kv_pool *pool;   /* NULL: the context makes its own, sized for n_ctx */
    uint32_t type_k, type_v; /* K/V element types of the own pool (enum dj_ggml_type: f32, f16,
                                bf16, q8_0, q4_0); with pool, the pool's */
    uint32_t rope_table_max; /* positions whose RoPE cos/sin are precomputed once and shared by q, k and
                                every layer (spec §2.2; LLAMA_OPT_PRECOMPUTE_ROPE_MAX); positions past it
                                and past n_ctx are computed on the fly; 0 = always on the fly
                                (LLAMA_OPT_PRECOMPUTE_ENABLED=0).  Same bits either way. */
    uint32_t gpu;           /* 0: the CPU; N > 0: Vulkan device N - 1 (`--device vulkan:N-1`) runs the forward
                               pass (forward_vk.c; the models model_gpu_check accepts, f32 or f16 K/V) */
    bool mtp;               /* drafting from the model's NextN / MTP block (model_mtp_check): the pool has
                               its K/V rows (one more layer, model_pool_shape), every forward pass writes
                               them, and a sequence's recurrent state also keeps its last final-normed
                               hidden row (the block's input for the next position): ctx_forward_mtp */
};

struct dj_ctx_params ctx_default_params(void);

/* A run of consecutive ubatch tokens [t0, t1) of one sequence (forward.c attn_task). */
struct ctx_att_tile {
    int64_t t0, t1;
};

/* Tokens of several sequences evaluated in one forward pass (ctx_forward):
 * token i is tok[i] at position pos[i] of sequence seq[i].
 *
 * Resume (early-exit self-speculation): a token whose layers [0, s) already
 * ran (ctx_forward_exit wrote their K/V rows and gave its hidden row) starts
 * at layer start_layer[i] = s from hidden row i and skips the layers below;
 * it gets bitwise the K/V rows and logits of a token that ran them all.  The
 * last two fields may be left out (zero): every token starts at layer 0. */
struct dj_batch {
    size_t n_tok;
    const dj_token *tok;        /* (n_tok) */
    const uint32_t *pos;        /* (n_tok) */
    struct kv_seq *const *seq;  /* (n_tok) sequences of the context's pool */
    size_t n_out;
    const uint32_t *out;        /* (n_out) batch indices whose logits are wanted, increasing */
    const uint32_t *start_layer; /* (n_tok) first layer each token runs, < n_layer; NULL: all 0 */
    const float *hidden;        /* (n_tok, n_embd) row i: the residual stream entering layer start_layer[i]
                                   (rows of tokens starting at 0 unread); needed when any start > 0 */
    float *const *rs_snap;      /* hybrid models: (n_tok) or NULL: when rs_snap[i] is not NULL, the recurrent
                                   state of token i's sequence after token i (rs_floats floats, kv_seq.rs's
                                   layout) is copied there: checkpoints inside a batch, draft rollback */
};

/* The Phase-5 census (spec §5.1-5.3; bench/census.c): what exact activation dedup and no-op
 * elision could skip, counted by the forward pass when ctx.census is set (dense attention
 * layers; nothing is skipped). */
struct ctx_census {
    uint64_t rows[2], dup_rows[2];       /* layer inputs of the ubatch, and those equal to an earlier
                                            row of it, bitwise: [0] layer 0, [1] deeper layers */
    uint64_t attn_rows, attn_zero_rows;  /* attention branch outputs (after wo), all exactly zero */
    uint64_t ffn_rows, ffn_zero_rows;    /* FFN branch outputs, all exactly zero */
    uint64_t act_elems, act_zero;        /* activated FFN gate elements (input of the down projection), exactly 0 */
    _Atomic uint64_t sm_rows, sm_onehot; /* softmax rows, rows with a weight of exactly 1 */
};

struct dj_context {
    const struct dj_model *model;
    struct dj_ctx_params p;
    struct kv_pool *pool;    /* p.pool, or own_pool */
    struct kv_pool *own_pool;
    struct kv_seq own_seq;   /* the sequence used until ctx_set_seq */
    struct kv_seq *seq;      /* the current sequence */
    uint32_t block_size;
    uint32_t n_embd_kv;
    struct dj_threadpool *tpool;
    /* scratch for one ubatch of up to n_ubatch tokens */
    float *x;      /* (ub, n_embd) residual stream */
    float *xn;     /* (ub, max(n_embd, n_head*hd)) normed input / attention output */
    float *q;      /* (ub, n_head*hd) */
    float *k;      /* (ub, n_kv*hd) */
    float *v;      /* (ub, n_kv*hd) */
    float *att;    /* (ub, n_head*hd) */
    float *ff_g;   /* (ub, max(n_ff, n_expert_used * n_ff_exp, shared experts width)) */
    float *ff_u;   /* as ff_g */
    /* MoE layers (forward.c moe_ffn; NULL for a dense model) */
    float *mla_a;  /* (ub, max(q_lora, kv_lora, v_head, nope)) MLA: the q LoRA rows (forward.c) */
    float *mla_g, *mla_y; /* MLA per-head products (mla_heads): gathered inputs (mla_rows, max(nope, kv_lora)), */
    void *mla_act;        /* their activations (as large), outputs (ub * n_head, max(kv_lora, v_head)) */
    size_t mla_rows;      /* head x token rows one grouped run takes */
    float *moe_z;     /* (ub, n_expert) router logits, then probabilities */
    int32_t *moe_sel; /* (ub, n_expert_used) the experts of each token, in selection order */
    float *moe_w;     /* (ub, n_expert_used) their weights */
    uint32_t *moe_pos;  /* (ub, n_expert_used) the moe_xin / moe_o row of each (token, slot) */
    float *moe_xin;   /* (ub * n_expert_used, n_embd) the normed rows grouped by expert */
    float *moe_y;     /* (ub, n_embd) the shared experts' output */
    float *moe_o;     /* (ub * n_expert_used, max(n_embd, n_ff_exp)) the experts' outputs, grouped by expert
                       * (before the downs: the up projections' activations when not the gate's) */
    void *moe_act;    /* as large: the experts' activations converted for the kernels */
    const float **moe_orow; /* (n_expert_used) one token's output rows, by slot */
    uint32_t *moe_ids;      /* (n_expert) the experts the ubatch uses, */
    int64_t *moe_off, *moe_cnt; /* their first row in moe_xin and their token counts */
    /* a grouped matmul (forward.c ctx_matmul_grouped: an MoE layer's experts, MLA's heads),
     * max(2 n_expert, MLA n_head) slots: weights (expert or head slabs), inputs, token
     * counts, outputs; and its chunk starts (one more) */
    struct dj_weight *grp_w;
    const void **grp_a;
    int64_t *grp_nt;
    float **grp_y;
    int *grp_first;
    struct ctx_census *census; /* bench/census.c: NULL, or exact duplicates and no-ops counted (spec §5) */
    int32_t *moe_trace; /* tests: NULL, or (n_layer, n_ubatch, n_expert_used) set by the caller; each
                           MoE layer writes the experts of ubatch row t there (the last ubatch's) */
    float *scores; /* (n_threads, att_tile, GQA group, n_ctx) attention scores per thread */
    float *att_probe; /* (n_threads, GQA group, n_ctx) the probe query's every score (kv/attn_prune.h) */
    size_t k_head, v_head;    /* bytes of one head's part of a K (V) row (types: p.type_k/v) */
    float *kvt;    /* (n_threads, 2, block_size, head_dim): one block of one head's K and V rows
                      as floats, for K/V types other than f32 */
    float *krow;   /* (n_kv*hd) a stored K row as floats (probe) */
    int64_t att_tile; /* tokens per attention work item (forward.c attn_task) */
    void *act;     /* (ub, act row bytes) activations converted for the kernels */
    uint32_t *pos; /* (ub) positions of the ubatch's tokens */
    uint32_t *out; /* (ub) ubatch rows whose logits are computed */
    struct kv_seq **tseq;       /* (ub) sequence of each token of the ubatch */
    struct ctx_att_tile *tiles; /* (ub) attention work tiles of the ubatch */
    /* a ubatch whose tokens start at different layers, sorted by start (forward.c ubatch_order) */
    uint32_t *perm;             /* (ub) slot -> ubatch index */
    uint32_t *inv;              /* (ub) ubatch index -> slot */
    uint32_t *ppos;             /* (ub) positions by slot */
    struct kv_seq **pseq;       /* (ub) sequences by slot */
    size_t wrow_stride; /* the largest K (row length) of any weight */
    const struct dj_kernels *kern; /* the CPU's kernel table, chosen once */
    struct dj_gpu *gpu;            /* p.gpu: the device's weights, K/V mirror and buffers (forward_vk.c); NULL */
    /* RoPE table (forward.c rope_row), filled lazily up to the highest position seen:
     *
     *   rope_tab  row p = [cos θ_0(p) .. cos θ_{n_rot/2-1}(p) | sin θ_0(p) .. sin θ_{n_rot/2-1}(p)]
     *             rows 0 .. rope_n-1 filled, room for rope_n_alloc rows, never more than rope_cap
     */
    float *rope_tab;       /* (rope_n_alloc, n_rot) */
    uint32_t rope_n;       /* positions filled */
    uint32_t rope_n_alloc; /* positions allocated */
    uint32_t rope_cap;     /* min(p.rope_table_max, p.n_ctx) */
    uint64_t rope_hits;    /* q or k rotations of one token at one layer served from the table
                              (llama_opt_stats.precompute_rope_hits): 2 x n_layer per token below rope_cap */
    /* hybrids (hp.attn_gated, hp.rs_floats; forward.c deltanet_layer); NULL otherwise */
    float *qg;       /* (ub, 2 n_head hd) the gated attention's [q | gate] rows */
    float *gate;     /* (ub, n_head hd) its gates */
    float *dn_qkv;   /* (ub, conv_dim) the DeltaNet's projected q, k, v; then their conv + SiLU */
    float *dn_conv;  /* (ub, conv_dim) the conv outputs (q, k L2-normed) */
    float *dn_z;     /* (ub, nv S) the output gates z */
    float *dn_bg;    /* (ub, 2 nv) beta, then g, per v head (qwen3next: the raw [beta | alpha] first) */
    float *dn_o;     /* (ub, nv S) the heads' outputs */
    float *dn_in;    /* (ub, 2 nk S + 2 nv S) qwen3next's ssm_in rows, or NULL */
    uint32_t *dn_tok;     /* (ub) ubatch rows grouped by sequence, in order within each */
    uint32_t *dn_off;     /* (ub + 1) sequence j's rows: dn_tok[dn_off[j] .. dn_off[j + 1]) */
    struct kv_seq **dn_seq; /* (ub) the ubatch's distinct sequences */
    /* the MTP block (p.mtp): its layer, where a sequence's state keeps the last hidden row */
    uint32_t mtp_il;        /* layers[mtp_il]: the NextN block (= n_layer) */
    size_t rs_h;            /* kv_seq.rs[rs_h .. rs_h + n_embd): the final-normed hidden row of the
                               sequence's last position (zeros before position 0, as llama.cpp's) */
    float *mtp_h;           /* (ub, n_embd) the ubatch's final-normed hidden rows */
    float *mtp_cat;         /* (ub, 2 n_embd) [enorm(embedding) | hnorm(hidden)], eh_proj's input */
    int64_t dn_us[2];       /* microseconds in the recurrences (conv + delta rule, token by token) and in
                               the whole recurrent layers (with their projections), summed over passes */
};

enum dj_status ctx_create(const struct dj_model *m, struct dj_ctx_params p, struct dj_context **out);
/* The most pool blocks of block_bytes a context on Vulkan device gpu - 1 (ctx_params.gpu) can
 * mirror: its K/V mirror is one storage buffer, within the device's range and half of its
 * device-local memory.  DJ_ERR_NOT_FOUND (a message) without that device. */
enum dj_status ctx_gpu_blocks_max(uint32_t gpu, size_t block_bytes, uint64_t *out);
/* What computes the context's K/V rows, for keys that must tell results apart (the persistent
 * store's): "cpu", or "vulkan NAME VENDOR:DEVICE driver VERSION" — another device or driver
 * version rounds differently. */
void ctx_device_id(const struct dj_context *c, char *buf, size_t n);
void ctx_free(struct dj_context *c); /* accepts NULL */
void ctx_reset(struct dj_context *c); /* forget the current sequence's positions */
/* Truncates the current sequence to its first n_pos positions (n_pos <= current). */
void ctx_truncate(struct dj_context *c, uint32_t n_pos);
static inline uint32_t ctx_n_pos(const struct dj_context *c) { return (uint32_t)c->seq->n_pos; }
/* Makes seq (of the context's pool) the current sequence; NULL: the context's own. */
void ctx_set_seq(struct dj_context *c, struct kv_seq *seq);

/* Evaluates n tokens at positions n_pos .. n_pos+n-1 of the current sequence, in ubatches.
 * logits: NULL, or room for n_vocab floats (all_logits false: the last token's
 * logits) or n * n_vocab floats (all_logits true: every token's, in order).
 * Fails with DJ_ERR_INVALID if the sequence would pass n_ctx or a token is out
 * of range, DJ_ERR_NOMEM if the KV budget is exhausted; positions computed
 * before a failure stay in the sequence. */
enum dj_status ctx_decode(struct dj_context *c, const dj_token *toks, size_t n, float *logits, bool all_logits);

/* The multi-sequence forward pass: evaluates the batch's tokens in ubatches
 * of n_ubatch (in batch order), writing each token's K/V into its own
 * sequence's rows and attending over its own sequence's block table.  The
 * caller has made the rows writable (kv_seq_prepare) and advances the
 * sequences afterwards (kv_seq_advance); a sequence's tokens come in
 * increasing positions, each attending to every position up to its own
 * (rows before the batch, or written earlier in the batch).  logits: NULL,
 * or room for n_out * n_vocab floats, the rows of b->out in order.
 * Invariant (DESIGN.md §3): a token's logits and K/V are bitwise the same
 * whatever else shares its batch or ubatch (tests/model/test_batch.c).
 * DJ_ERR_INVALID (a message) for a malformed batch; nothing is computed then.
 * With b->start_layer, a token starting at layer s > 0 runs layers [s, n_layer)
 * from b->hidden's row (its K/V rows of layers < s must hold what those layers
 * write: ctx_forward_exit wrote them); tokens of any start may share a batch.
 * A ubatch whose tokens all start at s reads no weights of layers < s; one
 * without start layers costs what it did before they existed. */
enum dj_status ctx_forward(struct dj_context *c, const struct dj_batch *b, float *logits);

/* Early exit (the draft of self-speculative decoding, sharing the model's K/V):
 * ctx_forward's batch rules and checks, but only layers [0, n_exit) run,
 * writing those layers' K/V rows at the tokens' positions (rows of layers
 * >= n_exit untouched; the caller prepared the rows and advances nothing).
 * hidden: NULL, or room for n_tok * n_embd floats: every token's residual
 * stream after layer n_exit-1, in batch order (what a later ctx_forward
 * resuming at start_layer n_exit takes).  logits: NULL, or room for n_out *
 * n_vocab: output(output_norm(hidden row)) of the b->out rows — the early-exit
 * logits; with n_exit == n_layer bitwise ctx_forward's.  b->start_layer may
 * be given (each < n_exit).  DJ_ERR_INVALID (a message) unless 1 <= n_exit <=
 * n_layer or for a malformed batch; nothing is computed then. */
enum dj_status ctx_forward_exit(struct dj_context *c, const struct dj_batch *b, uint32_t n_exit, float *hidden,
                                float *logits);

/* The MTP block as a draft model (ctx_params.mtp; llama.cpp's qwen35 graph_mtp): for
 * token i at pos[i] of seq[i], with h_in row i the final-normed hidden row of the
 * position before (the main model's: kv_seq.rs at c->rs_h; or this function's h_out
 * of the previous draft), x = eh_proj [enorm(embed(tok)) | hnorm(h_in)] runs the
 * block (gated attention over the block's own K/V rows, writing row pos[i]; its FFN),
 * then h_out row i = shared_head_norm (or output_norm) of the result (NULL: not kept)
 * and logits of the b->out rows = the shared head (or the output matrix) of it.  Only
 * the block's K/V rows at those positions are written (the caller prepared them):
 * nothing of the main model's rows or recurrent state.  ctx_forward (and every pass)
 * writes the block's rows of every position it computes from the main model's hidden
 * rows, so a position drafted over is rewritten exactly once it is verified.
 * DJ_ERR_UNSUPPORTED without ctx_params.mtp; DJ_ERR_INVALID for a malformed batch. */
enum dj_status ctx_forward_mtp(struct dj_context *c, const struct dj_batch *b, const float *h_in, float *h_out,
                               float *logits);
/* Whether the model can draft from its NextN / MTP block: DJ_OK, or DJ_ERR_UNSUPPORTED and
 * why (qwen35 and qwen35moe with one NextN block, as llama.cpp d32676d7 runs them). */
enum dj_status model_mtp_check(const struct dj_model *m);
/* The pool shape a context of the model needs: the layers with K/V rows and the floats of
 * a sequence's recurrent state; with mtp, the NextN block's layer and the hidden row more. */
void model_pool_shape(const struct dj_model *m, bool mtp, uint32_t *n_layer_kv, size_t *rs_floats);

/* Recomputes n tokens at positions pos[0..n) (strictly increasing) that the
 * current sequence already holds (Tier-2 reuse after an edit: the rows were
 * filled with approximate K/V and some are recomputed): every layer's K/V
 * rows of those positions are overwritten; a token attends to every position
 * up to its own, whatever those rows hold.  logits: NULL, or room for n_vocab
 * floats (the last token's).  The positions must lie in blocks only this
 * sequence holds, unsealed (DJ_ERR_INVALID otherwise).  Same arithmetic per
 * token as ctx_decode: with the same rows before, the same bits. */
enum dj_status ctx_decode_at(struct dj_context *c, const dj_token *toks, const uint32_t *pos, size_t n,
                             float *logits);

/* The CacheBlend probe: runs layers < il whole for the n tokens at pos[0..n)
 * (as ctx_decode_at, writing their K/V), then at layer il computes their K
 * and V, stores dev[t] = squared L2 distance between the fresh K row and the
 * row the sequence held, and writes the fresh rows.  Layers > il untouched. */
enum dj_status ctx_probe_k(struct dj_context *c, const dj_token *toks, const uint32_t *pos, size_t n, uint32_t il,
                           double *dev);

/* RoPE position correction (spec §1.4 llama_opt_rope_correction; for the
 * Tier-2 approximate reuse of K after an edit): rotates the n_heads heads of
 * a K row computed at position p so that it is the K of position p + delta.
 * Exact in real arithmetic; in float it agrees with computing K at p + delta
 * to ~1e-6 (tests/model/test_rope_shift.c).  Only layer 0's K is fully
 * corrected by this: deeper layers also depend on the earlier tokens. */
void model_rope_shift(const struct dj_model *m, float *k, int n_heads, int64_t delta);
/* model_rope_shift for a K row of layer il: a model whose layers rope differently
 * (hp.rope_local: gemma's sliding layers have their own base) rotates each layer's
 * rows with that layer's setting; model_rope_shift is layer 0's. */
void model_rope_shift_layer(const struct dj_model *m, uint32_t il, float *k, int n_heads, int64_t delta);

/* A row of n K/V elements: f32 -> the pool type (f32 copies; f16/bf16 round to nearest
 * even; q8_0/q4_0 ggml's reference quantizers) and back (exact).  The same bytes and
 * floats on every kernel table. */
/* The K/V cache types a model runs with when asked for *type_k / *type_v: the same,
 * except that an MLA model (deepseek2) keeps one K row per token and no V: its cache
 * type is *type_k, and *type_v is set to it (an info note when it differed, so
 * `-ctk q8_0` alone, or with `-ctv q8_0`, just works).  ctx_create (own pool) and
 * engine_create apply it. */
void model_kv_types(const struct dj_model *m, uint32_t *type_k, uint32_t *type_v);
/* True when the model's KV pool has no V rows (MLA: values are read from the K row). */
bool model_kv_k_only(const struct dj_model *m);
/* kv_type_check for this model's rows: dense, head_dim for K and V; MLA, the one K row
 * of kv_lora + rope elements (type_v unused).  DJ_OK or DJ_ERR_UNSUPPORTED + message. */
enum dj_status model_kv_check(const struct dj_model *m, uint32_t type_k, uint32_t type_v);

void kv_row_from_f32(uint32_t type, const float *x, void *y, size_t n);
void kv_row_to_f32(uint32_t type, const void *x, float *y, size_t n);

/* One matrix product y = W x for n_tok activation rows, on the context's pool:
 * y[t][r] = dot(W row r, x row t).  Exposed for tests. */
void ctx_matmul(struct dj_context *c, const struct dj_weight *w, const float *x, int64_t n_tok, float *y);

#endif
