/*
 * model.h — a loaded model: hyperparameters, weights bound to the mapped GGUF
 * tensors, the vocabulary, and the forward pass over a batch of tokens.
 *
 * Architectures (one file each, sharing the blocks of blocks.c):
 *   llama  — Llama 2/3, TinyStories, SmolLM, codelm: GQA, normal (interleaved) RoPE,
 *            tied embeddings (output.weight falls back to token_embd.weight),
 *            llama3-style rope scaling when the metadata has it
 *   qwen2  — QKV biases, NeoX RoPE
 *   qwen3  — per-head q_norm / k_norm, NeoX RoPE
 *   qwen3moe — qwen3 attention with a Mixture-of-Experts FFN (Qwen3-30B-A3B)
 *   llama with expert_count > 0 — Mixtral: the llama decoder with an MoE FFN
 *   deepseek2 — Multi-head Latent Attention (absorbed; the K/V cache holds [c | k_pe]),
 *            YaRN rope, leading dense layers, MoE with shared experts (deepseek2.c)
 *   gemma2, gemma3 — sliding-window layers interleaved with global ones (each with its
 *            rope base), post-norms around attention and FFN, GELU-gated FFN, embeddings
 *            scaled by sqrt(n_embd), soft-capping; gemma3 adds q/k norms (gemma.c)
 *   glm4moe — GLM-4.5 / 4.6 / 4.7 (glm4moe.c): partial NeoX rope, q/k/v biases, optional
 *            q/k norms, leading dense layers, sigmoid-routed experts with a selection bias
 *            and shared experts (deepseek2's routing); NextN layers bound, not run
 *   mistral3 — Ministral 3, Devstral Small 2 (mistral3.c): llama with YaRN and llama4-style
 *            attention temperature scaling of the queries, optional attn_output bias
 *   gpt-oss — gpt-oss-20b/120b (gptoss.c): sliding windows on every other layer, QKV and
 *            output biases, attention sinks, YaRN, MoE of biased experts routed by a softmax
 *            over the top-k logits, clamped SwiGLU (swiglu_oai)
 *   qwen35, qwen35moe, qwen3next — Qwen3.5 / 3.6 and Qwen3-Next hybrids (qwen35.c): Gated
 *            DeltaNet linear-attention layers (a causal conv1d, then the gated delta rule over
 *            a per-head S x S state kept per sequence in kv_seq.rs, evaluated token by token:
 *            forward.c's deltanet_layer) beside gated full attention (q/k norms, partial NeoX
 *            rope — M-RoPE with text positions —, output times sigmoid(gate)); dense SwiGLU
 *            (qwen35) or routed experts plus a sigmoid-gated shared expert; NextN layers bound,
 *            not run
 *
 * Per-layer attention (any architecture): dj_layer.n_swa is the layer's sliding window
 * (a query at p sees keys p - n_swa < q <= p; 0 = all up to p) and dj_layer.rope_local
 * picks the second rope setting (hp.rope_base_local / rope_scale_local).
 *
 * MoE FFN (forward.c: moe_ffn): router ffn_gate_inp, softmax over all experts,
 * the expert_used_count most probable, weights renormalized to sum 1, their
 * SwiGLU outputs summed in selection order.
 *
 * Ownership: the model owns the GGUF mapping (weights point into it) and the
 * vocab (and rope_freqs_buf).  A dj_model is read-only after loading and may be shared by
 * contexts.  A dj_context owns its KV cache, scratch buffers and thread pool.
 */
#ifndef DJ_MODEL_H
#define DJ_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

enum dj_arch { DJ_ARCH_LLAMA, DJ_ARCH_QWEN2, DJ_ARCH_QWEN3, DJ_ARCH_QWEN3MOE, DJ_ARCH_DEEPSEEK2, DJ_ARCH_GEMMA2,
               DJ_ARCH_GEMMA3, DJ_ARCH_GLM4MOE, DJ_ARCH_MISTRAL3, DJ_ARCH_GPT_OSS, DJ_ARCH_QWEN35,
               DJ_ARCH_QWEN35MOE, DJ_ARCH_QWEN3NEXT };
enum dj_rope_type { DJ_ROPE_NORM, DJ_ROPE_NEOX };

struct dj_hparams {
    enum dj_arch arch;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;   /* attention.key_length, default n_embd / n_head */
    uint32_t n_ff;       /* dense FFN width (llama with experts: = n_ff_exp) */
    uint32_t n_expert;      /* expert_count; 0 = a dense model */
    uint32_t n_expert_used; /* expert_used_count: experts a token runs (1 .. n_expert) */
    uint32_t n_ff_exp;      /* width of one expert (qwen3moe: expert_feed_forward_length) */
    uint32_t n_rot;      /* rope.dimension_count, default head_dim */
    float rms_eps;
    float rope_freq_base;
    enum dj_rope_type rope_type;
    /* llama3-style rope scaling (rope.scaling.type "llama3"): rope.scaling.factor (8),
     * .low_freq_factor (1), .high_freq_factor (4), .original_context_length (8192) */
    bool rope_llama3;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    uint32_t rope_orig_ctx;
    float rope_linear_scale; /* rope.scaling.factor with type "linear"; 1 = none */
    /* YaRN (rope.scaling.type "yarn", deepseek2): rope_factor, rope_orig_ctx, corr dims */
    bool rope_yarn;
    float yarn_low, yarn_high; /* ggml_rope_yarn_corr_dims with beta_fast 32, beta_slow 1 */
    float yarn_log_mul;        /* rope.scaling.yarn_log_multiplier (= 0.1 mscale_all_dim) */
    /* deepseek2 (MLA).  head_dim = kv_lora + qk_rope (the K cache row), n_head_kv = 1 */
    bool mla;
    uint32_t q_lora, kv_lora, qk_nope, v_head; /* qk_rope = n_rot */
    float kq_scale;            /* mscale^2 / sqrt(qk_nope + qk_rope) */
    uint32_t n_layer_dense;    /* leading_dense_block_count */
    uint32_t n_expert_shared;  /* expert_shared_count */
    uint32_t gating;           /* 1 softmax, 2 sigmoid */
    bool exp_norm;             /* expert_weights_norm */
    float exp_scale;           /* expert_weights_scale; 0 = none */
    uint32_t n_group, n_group_used; /* expert_group_count / _used_count; 0/1 = no groups */
    /* Sliding-window attention and per-layer rope (gemma2/3; the per-layer values are in
     * dj_layer: n_swa, rope_local) */
    uint32_t n_swa;            /* attention.sliding_window of the windowed layers; 0 = no layer has one */
    uint32_t swa_period;       /* gemma: attention.sliding_window_pattern; layer il has the window iff
                                  il % period < period - 1 (0: every layer; 1: none) */
    bool rope_local;           /* some layer ropes with the second setting: */
    float rope_base_local;     /*   its base (gemma3: rope.freq_base_swa, default 10000) */
    float rope_scale_local;    /*   its linear scale (gemma3: 1; gemma2: rope_linear_scale) */
    /* gemma */
    float attn_q_scale;        /* queries times this before the dot products (llama.cpp's f_attention_scale);
                                  0 = scores times 1/sqrt(head_dim) (every other architecture) */
    float attn_softcap;        /* attention scores s -> c tanh(s / c) before the softmax; 0 = none */
    float final_softcap;       /* logits likewise; 0 = none */
    bool embd_scale;           /* embeddings times sqrt(n_embd) */
    bool ffn_gelu;             /* gate activation GELU (tanh form, through ggml's f16 table: dj_model.gelu_tab);
                                  false = SiLU */
    /* glm4moe: nextn_predict_layers (NextN / MTP blocks after the n_layer run ones: bound
     * into layers[n_layer ..], never run) */
    uint32_t n_layer_nextn;
    /* YaRN (any architecture with rope.scaling.type "yarn"): rope.scaling.yarn_beta_fast /
     * _beta_slow (32 / 1) give yarn_low / yarn_high; yarn_mscale multiplies cos and sin
     * (llama.cpp's attn_factor times its ext-factor magnitude: 1 for deepseek2 and for
     * mscale_all_dim 1, else 1 + 0.1 ln factor) */
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale;
    /* mistral3: attention.temperature_scale (llama4-style; 0 = none) and its floor (the
     * YaRN original context): q *= 1 + scale * ln(floor(pos / floor) + 1) after rope */
    float attn_temp_scale;
    uint32_t attn_temp_floor;
    /* Pool shape.  n_layer_kv: the layers that keep K/V rows in the paged pool (attention
     * layers; = n_layer except in hybrid models, whose recurrent layers keep none): layer il
     * writes pool layer layers[il].kv_il.  rs_floats: floats of one sequence's recurrent
     * state (kv_seq.rs: every recurrent layer's at layers[il].rs_off); 0 = no recurrent layer. */
    uint32_t n_layer_kv;
    size_t rs_floats;
    /* Hybrids (qwen35, qwen35moe, qwen3next: qwen35.c): Gated DeltaNet layers (dj_layer.recurrent)
     * beside gated full attention.  A recurrent layer's state in kv_seq.rs at rs_off:
     * conv (conv_dim, ssm_d_conv - 1) then delta (ssm_n_v_heads, S, S), f32, with
     * conv_dim = 2 ssm_n_k_heads S + ssm_n_v_heads S and S = ssm_d_state. */
    uint32_t ssm_d_conv;     /* ssm.conv_kernel: taps of the causal conv1d */
    uint32_t ssm_d_state;    /* ssm.state_size: S, the head size of q, k and v */
    uint32_t ssm_n_k_heads;  /* ssm.group_count: q/k heads */
    uint32_t ssm_n_v_heads;  /* ssm.time_step_rank: v heads, a multiple of ssm_n_k_heads */
    bool ssm_kv_interleave;  /* v head h reads k head h / (nv / nk) (qwen3next's repeat-interleave);
                                false: h % nk (qwen35's tiling) */
    bool attn_gated;         /* attn_q gives per head [q | gate] (2 head_dim); the attention output is
                                times sigmoid(gate) before attn_output */
    uint32_t n_ff_shexp;     /* expert_shared_feed_forward_length: the gated shared expert's width */
};

/* Bounds of the hybrids' DeltaNet sizes (qwen35.c checks them; forward.c keeps one head's S
 * floats and a token's 2 nv gate values on the stack) */
#define DJ_SSM_STATE_MAX 512u
#define DJ_SSM_HEADS_MAX 4096u

/* A weight matrix: rows of ne0 elements (the reduction dimension K), ne1 rows. */
struct dj_weight {
    const void *data; /* (ne1, ne0) row-major in the file's type; NULL if absent */
    uint32_t type;    /* enum dj_ggml_type */
    int64_t ne0;      /* K: elements per row */
    int64_t ne1;      /* N: rows (output features) */
    size_t row_bytes;
    /* The kernel table's repacked copy (kernels.h: pack), owned by the model, or NULL:
     * matmuls read it through the table's matmul_packed — bitwise the same results. */
    void *packed;
};

struct dj_layer {
    struct dj_weight attn_norm;          /* (n_embd), f32 */
    struct dj_weight wq, wk, wv, wo;     /* (n_head*hd, n_embd), (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    struct dj_weight bq, bk, bv;         /* qwen2, gpt-oss biases, f32; data NULL otherwise */
    struct dj_weight attn_sinks;         /* gpt-oss (n_head) f32: a per-head logit joining each softmax */
    struct dj_weight q_norm, k_norm;     /* qwen3 per-head norms (hd), f32; NULL otherwise */
    struct dj_weight ffn_norm;           /* (n_embd), f32 */
    struct dj_weight w_gate, w_up;       /* (n_ff, n_embd) */
    struct dj_weight w_down;             /* (n_embd, n_ff) */
    /* MoE layers (n_expert > 0; the dense three above are then absent).  The expert
     * tensors are 3-D [ne0, ne1, n_expert] in the file: n_expert contiguous slabs of
     * ne1 rows, bound here as one matrix of ne1 * n_expert rows (ne1 of the weight);
     * model_expert gives expert e's slab as a matrix of its own.  Repacked (model_repack)
     * when a slab is whole 16-row groups, else read from the file mapping. */
    struct dj_weight ffn_gate_inp;       /* (n_expert, n_embd) router, usually f32 */
    struct dj_weight ffn_gate_exps;      /* (n_expert * n_ff_exp, n_embd); optional for llama */
    struct dj_weight ffn_up_exps;        /* (n_expert * n_ff_exp, n_embd) */
    struct dj_weight ffn_down_exps;      /* (n_expert * n_embd, n_ff_exp) */
    /* deepseek2 (MLA); wq is attn_q when there is no q LoRA */
    struct dj_weight wq_a;               /* (q_lora, n_embd) */
    struct dj_weight q_a_norm;           /* (q_lora) */
    struct dj_weight wq_b;               /* (n_head*(nope+rope), q_lora) */
    struct dj_weight wkv_a;              /* (kv_lora+rope, n_embd) attn_kv_a_mqa */
    struct dj_weight kv_a_norm;          /* (kv_lora) */
    struct dj_weight wk_b;               /* (n_head * kv_lora, nope): head h = slab h, model_expert */
    struct dj_weight wv_b;               /* (n_head * v_head, kv_lora) */
    struct dj_weight exp_probs_b;        /* (n_expert) selection bias, optional */
    /* gpt-oss: the router's bias (n_expert) and each expert's biases, (width, n_expert) f32 */
    struct dj_weight ffn_gate_inp_b, ffn_gate_exps_b, ffn_up_exps_b, ffn_down_exps_b;
    struct dj_weight ffn_gate_shexp, ffn_up_shexp; /* (n_ff_exp*n_shared, n_embd) */
    struct dj_weight ffn_down_shexp;     /* (n_embd, n_ff_exp*n_shared) */
    /* gemma: RMS norms of the attention output and the FFN output before their residual adds */
    struct dj_weight attn_post_norm, ffn_post_norm; /* (n_embd), f32; NULL otherwise */
    uint32_t n_swa;   /* sliding window: a query at p sees keys (p - n_swa, p]; 0 = every key up to p */
    bool rope_local;  /* rope with hp.rope_base_local / rope_scale_local (not rope_freq_base) */
    struct dj_weight bo;                 /* (n_embd) attn_output.bias, f32 (gpt-oss; optional: mistral3) */
    /* glm4moe NextN / MTP layers (il >= n_layer): bound and validated, not run */
    struct dj_weight nextn_eh_proj;      /* (n_embd, 2 n_embd) */
    struct dj_weight nextn_enorm, nextn_hnorm; /* (n_embd) */
    struct dj_weight nextn_embed, nextn_head;  /* (n_vocab, n_embd), optional */
    struct dj_weight nextn_head_norm;    /* (n_embd), optional */
    /* Where the layer keeps its sequence state: kv_il, its pool layer (attention layers;
     * hp.n_layer_kv of them, = il unless the model is hybrid); a recurrent layer (recurrent
     * true) keeps no K/V rows but floats [rs_off, rs_off + its size) of kv_seq.rs. */
    uint32_t kv_il;
    bool recurrent;
    size_t rs_off;
    /* Hybrids' Gated DeltaNet layers (recurrent; qwen35.c).  nk, nv: k and v heads of S */
    struct dj_weight ssm_qkv;            /* attn_qkv (conv_dim, n_embd): [q (nk S) | k (nk S) | v (nv S)] */
    struct dj_weight ssm_z;              /* attn_gate (nv S, n_embd): the output gate z */
    struct dj_weight ssm_in;             /* qwen3next's older fused ssm_in (2 nk S + 2 nv S, n_embd), per k
                                            head [q (S) | k (S) | v (r S) | z (r S)], r = nv / nk; or NULL */
    struct dj_weight ssm_beta, ssm_alpha; /* (nv, n_embd) qwen35 */
    struct dj_weight ssm_ba;             /* qwen3next (2 nv, n_embd): per k head [beta (r) | alpha (r)] */
    struct dj_weight ssm_conv1d;         /* (conv_dim rows of d_conv taps) f32 */
    struct dj_weight ssm_dt, ssm_a;      /* (nv) f32: alpha's bias, the decay's -exp(A_log) */
    struct dj_weight ssm_norm;           /* (S) f32: the gated RMS norm of each head's output */
    struct dj_weight ssm_out;            /* (n_embd, nv S) */
    struct dj_weight ffn_gate_inp_shexp; /* (n_embd) f32: the shared expert's gate (sigmoid of its dot) */
};

struct dj_model {
    struct gguf_ctx *gguf;
    struct dj_vocab *vocab;
    struct dj_hparams hp;
    struct dj_weight tok_embd;    /* (n_vocab, n_embd) */
    struct dj_weight output_norm; /* (n_embd), f32 */
    struct dj_weight output;      /* (n_vocab, n_embd); = tok_embd when tied */
    struct dj_weight rope_freqs;  /* (n_rot/2) f32 divisors of theta, optional (llama3): the
                                     rope_freqs.weight tensor, else rope_freqs_buf */
    bool output_tied;             /* output is tok_embd's matrix (no output.weight) */
    void *packed_arena;           /* the copies of the matrices (loader.c, model_repack): one
                                     anonymous mapping, transparent huge pages asked; NULL: none */
    size_t packed_arena_bytes;
    float *rope_freqs_buf;        /* (n_rot/2) owned: llama3 factors computed from the metadata
                                     when the file has no rope_freqs tensor; NULL otherwise */
    struct dj_layer *layers;      /* n_layer (+ n_layer_nextn, glm4moe) */
    char arch_name[32];
    float *mla_buf;               /* owned: legacy attn_kv_b split into wk_b / wv_b (f32), or NULL */
    char *path;                   /* owned: the file it was loaded from (the persistent KV
                                     store keys its blocks by the file's content hash) */
    float *gelu_tab;              /* owned (65536) when hp.ffn_gelu: GELU of every f16 value x, rounded to
                                     f16 (ggml's table: gemma.c); NULL otherwise */
};

/* Loads and validates a model: every hyperparameter is range-checked (a bad one
 * gives DJ_ERR_FORMAT naming the file and the key), every tensor bound with its
 * shape and type checked.  *out is set only on success; free with model_free. */
enum dj_status model_load(const char *path, struct dj_model **out);
void model_free(struct dj_model *m); /* accepts NULL */
const char *model_arch_name(enum dj_arch a);

/* The n_rot/2 llama3 rope factors of hp (rope_freq_base, n_rot and the rope_*
 * scaling fields) into out, as llama.cpp's converter writes rope_freqs.weight;
 * model_load uses it when a "llama3" model has no such tensor. */
void model_llama3_rope_freqs(const struct dj_hparams *hp, float *out);

/* Architecture hooks (model/llama.c, qwen2.c, qwen3.c): read the hparams that
 * differ and bind the extra tensors. */
enum dj_status llama_load_hparams(struct dj_model *m);
enum dj_status qwen2_load_hparams(struct dj_model *m);
enum dj_status qwen3_load_hparams(struct dj_model *m);
enum dj_status qwen3moe_load_hparams(struct dj_model *m);
enum dj_status deepseek2_load_hparams(struct dj_model *m);
enum dj_status gptoss_load_hparams(struct dj_model *m);
/* gptoss.c: each layer's tensors (after the common ones) */
enum dj_status gptoss_bind_layers(struct dj_model *m);
/* deepseek2.c: after the common hparams: MLA, YaRN and MoE keys; then each layer's tensors */
enum dj_status deepseek2_load_mla(struct dj_model *m);
enum dj_status deepseek2_bind_layers(struct dj_model *m);
/* gemma.c: gemma2 / gemma3 hparams, after the common ones (windows, rope, scales), and tensors */
enum dj_status gemma2_load_hparams(struct dj_model *m);
enum dj_status gemma3_load_hparams(struct dj_model *m);
enum dj_status gemma_load_swa(struct dj_model *m);
enum dj_status gemma_bind_layers(struct dj_model *m);
/* deepseek2.c: the MoE keys (leading dense layers, experts, shared experts, gating, weight
 * norm and scale; groups when `groups`), range-checked; shared with glm4moe */
enum dj_status model_load_moe_keys(struct dj_model *m, uint32_t gating_default, bool groups);
/* glm4moe.c: hparams hook, then (after the common hparams) the MoE and NextN keys, then
 * each layer's tensors (NextN layers included) */
enum dj_status glm4moe_load_hparams(struct dj_model *m);
enum dj_status glm4moe_load_moe(struct dj_model *m);
enum dj_status glm4moe_bind_layers(struct dj_model *m);
/* mistral3.c: hparams hook; mistral3_load_temp after the rope scaling keys */
enum dj_status mistral3_load_hparams(struct dj_model *m);
enum dj_status mistral3_load_temp(struct dj_model *m);
/* qwen35.c: hparams hook (arch, rope type), then (after the common hparams) the ssm, MoE,
 * NextN and layer-pattern keys, then each layer's tensors with the pool shape (n_layer_kv,
 * kv_il, recurrent, rs_off, rs_floats) */
enum dj_status qwen35_load_hparams(struct dj_model *m);
enum dj_status qwen35_load_ssm(struct dj_model *m);
enum dj_status qwen35_bind_layers(struct dj_model *m);

/* loader.c's helpers for "<arch>.<key>" hyperparameters (architecture files) */
enum dj_status model_hp_u32(struct dj_model *m, const char *key, uint32_t *out, bool has_default, uint32_t def);
enum dj_status model_hp_f32(struct dj_model *m, const char *key, float *out, float def);
bool model_hp_has(const struct dj_model *m, const char *key);
enum dj_status model_hp_range(const struct dj_model *m, const char *key, uint32_t v, uint32_t lo, uint32_t hi);

/* Expert e (< n_expert) of a bound 3-D expert tensor w as a matrix of its own:
 * rows [e * w->ne1 / n_expert, (e + 1) * w->ne1 / n_expert) of w, with its part
 * of w's packed copy when w has one. */
struct dj_weight model_expert(const struct dj_weight *w, uint32_t n_expert, uint32_t e);

/* Layer il's routed experts, blk.il.ffn_{gate,up,down}_exps.weight: hp.n_expert slabs of
 * (FE, n_embd), (FE, n_embd), (n_embd, FE), the gate optional unless gate_required (llama);
 * then, when FS > 0, the shared experts blk.il.ffn_{gate,up,down}_shexp.weight of width FS. */
enum dj_status model_bind_experts(struct dj_model *m, struct dj_layer *L, uint32_t il, int64_t FE, int64_t FS,
                                  bool gate_required);
/* A NextN / MTP block's own tensors, blk.il.nextn.*: eh_proj, enorm, hnorm; the optional
 * embed_tokens, shared_head_head and shared_head_norm. */
enum dj_status model_bind_nextn(struct dj_model *m, struct dj_layer *L, uint32_t il);

/* Binds tensor `name` (expected ne0 x ne1; ne1 = 1 for vectors) into *w.
 * Absent + required → DJ_ERR_NOT_FOUND naming the tensor; wrong shape or an
 * unsupported type → DJ_ERR_FORMAT / DJ_ERR_UNSUPPORTED. */
enum dj_status model_bind(struct dj_model *m, struct dj_weight *w, const char *name, int64_t ne0, int64_t ne1,
                          bool required);
/* model_bind for a 3-D tensor [ne0, ne1, ne2] (exactly three dimensions), bound as
 * a matrix of ne1 * ne2 rows of ne0. */
enum dj_status model_bind_3d(struct dj_model *m, struct dj_weight *w, const char *name, int64_t ne0, int64_t ne1,
                             int64_t ne2, bool required);

#endif
