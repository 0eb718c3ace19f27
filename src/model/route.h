/*
 * route.h — Mixture-of-Experts routing of one token (route.c): the router's
 * logits in, the chosen experts and their weights out, in one routine.
 * Model-internal (forward.c and the unit tests).
 */
#ifndef DJ_MODEL_ROUTE_H
#define DJ_MODEL_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

/* How a layer routes (built from dj_hparams by forward.c's moe_ffn). */
struct moe_router {
    uint32_t n_expert;      /* 1 .. MOE_ROUTE_MAX */
    uint32_t n_used;        /* k: 1 .. n_expert */
    bool sigmoid;           /* gating: sigmoid(z) (deepseek2 gating 2), else softmax(z) */
    bool softmax_weight;    /* gpt-oss (llama.cpp SOFTMAX_WEIGHT): no gate; the top k of z, their
                               weights softmax(z_S) (overrides sigmoid) */
    const float *z_bias;    /* (n_expert) added to the router logits first (gpt-oss), or NULL */
    const float *bias;      /* (n_expert) added to the selection score only (exp_probs_b), or NULL */
    uint32_t n_group;       /* <= 1: no groups; else n_expert / n_group >= 2 experts per group (loader) */
    uint32_t n_group_used;  /* groups that compete (1 .. n_group), holding >= n_used experts */
    bool norm;              /* w /= max(sum w, norm_min) */
    float norm_min;         /* 0 for qwen3moe/Mixtral (no clamp), 6.103515625e-5 for deepseek2 */
    float scale;            /* w *= scale unless 0 or 1 (expert_weights_scale) */
};

enum { MOE_ROUTE_MAX = 512 }; /* the loader's limit on expert_count */

/* Routes one token: z (n_expert router logits; overwritten by the gate
 * probabilities p) → sel (n_used expert ids, in selection order) and w (their
 * weights, in the same order).  Never fails. */
void moe_route(const struct moe_router *r, float *z, int32_t *sel, float *w);

#endif
