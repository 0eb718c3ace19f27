/*
 * attn_prune.h — attention statistics per KV block and the Tier-2 pruning
 * policies built on them (spec/optimization-layer.md §4.1, H2O from
 * kv-cache-optimization.md; docs/ARCHITECTURE.md "Attention statistics and
 * pruning").
 *
 * A sequence that carries a `struct kv_attn` (kv_seq.attn) has the attention
 * kernel add, for every query row and head of every full-attention layer, the
 * softmax mass each of its KV blocks received: summed over the block's keys in
 * position order, then added as a fixed-point integer (KV_ATTN_ONE units per
 * unit of mass) with an atomic add.  Integer addition is associative, so the
 * totals are the same bits whatever the thread count, the order of the work
 * items or the batch — the policies below are as deterministic as the logits.
 * Nothing here changes what attention computes unless a block is in the skip
 * set; statistics alone leave every logit bitwise unchanged (tested).
 *
 * Skip set (the "attention set" is its complement): full blocks whose K/V rows
 * every query of the sequence ignores — scores not computed (the softmax sees
 * -inf), values not read — on the layers without a sliding window.  The rows
 * stay in the pool with their original rotation and positions; a query at p
 * still rotates with p and sees a gap.  One query per turn, the probe (the
 * prompt's last token, whose logits give the first generated token), scores
 * every block including the skipped ones, so that a skipped block the current
 * turn needs again shows up in its statistics and is restored; its output still
 * uses the attention set only.
 *
 * kv knows nothing of models: the per-head arrays are sized by the caller.
 */
#ifndef DJ_KV_ATTN_PRUNE_H
#define DJ_KV_ATTN_PRUNE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define KV_ATTN_ONE 4294967296.0 /* fixed-point units per unit of attention mass (2^32) */
#define KV_ATTN_NO_PROBE SIZE_MAX

enum kv_prune_policy {
    KV_PRUNE_THRESHOLD = 0, /* §4.1: below the threshold for `window` consecutive turns */
    KV_PRUNE_H2O,           /* heavy hitters: the highest rolling weights within a token budget */
};

struct kv_prune_params {
    bool prune;               /* false: statistics only */
    enum kv_prune_policy policy;
    float threshold;          /* a block's weight under which a turn counts as dead */
    uint32_t window;          /* dead turns before a block leaves the attention set */
    uint32_t keep_first;      /* tokens at the start never skipped (attention sinks, system prompt) */
    uint32_t keep_last;       /* tokens at the end never skipped */
    uint32_t budget;          /* h2o: tokens attended at most (protected ones included) */
};

struct kv_attn {
    uint32_t n_head;
    uint32_t block_size;
    size_t cap;                 /* blocks */
    _Atomic uint64_t *mass;     /* (cap, n_head): this turn's mass, every query, attention set only */
    _Atomic uint64_t *probe;    /* (cap, n_head): this turn's probe query, every block */
    float *weight;              /* (cap) the last turn's block weight (see kv_attn_turn) */
    float *avg;                 /* (cap) rolling weight: avg = (avg + weight) / 2 */
    uint32_t *dead;             /* (cap) consecutive turns below the threshold */
    uint8_t *skip;              /* (cap) 1: outside the attention set */
    size_t n_mask;              /* skip[] applies to blocks < n_mask (full blocks when it was set) */
    size_t n_skip;              /* blocks < n_mask with skip set */
    size_t n_known;             /* blocks with a weight (avg, dead valid) */
    size_t probe_pos;           /* position of this turn's probe query, or KV_ATTN_NO_PROBE */
    uint64_t *tot;              /* (2, n_head) scratch of kv_attn_turn_end */
    uint64_t *order;            /* (cap) scratch: the candidates of kv_attn_turn_end */
};

/* Allocates the arrays for cap blocks of n_head heads (zeroed, nothing skipped). */
enum dj_status kv_attn_init(struct kv_attn *a, uint32_t n_head, uint32_t block_size, size_t cap);
void kv_attn_free(struct kv_attn *a);

/* A new turn: this turn's mass and probe counters to zero, probe at probe_pos. */
void kv_attn_turn_begin(struct kv_attn *a, size_t probe_pos);

/* The sequence keeps only its first n_pos positions: skip entries and weights of
 * blocks not fully inside are dropped. */
void kv_attn_truncate(struct kv_attn *a, size_t n_pos);

/* dst's skip set and weights = src's (a fork of a sequence). */
void kv_attn_copy(struct kv_attn *dst, const struct kv_attn *src);

static inline bool kv_attn_skipped(const struct kv_attn *a, size_t block) {
    return a && block < a->n_mask && a->skip[block];
}

/* Within a turn, once its probe ran: skipped blocks whose probe weight (the largest over heads
 * of the block's share of the probe's full softmax) reaches threshold come back into the
 * attention set at once.  Returns how many. */
size_t kv_attn_probe_restore(struct kv_attn *a, float threshold);

/* What one turn's end changed. */
struct kv_prune_delta {
    size_t n_pruned;   /* blocks that left the attention set */
    size_t n_restored; /* blocks that came back */
};

/* The end of a turn of a sequence of n_pos positions: each full block's weight for
 * the turn — max over heads of its share of that head's mass (attended blocks:
 * every query's mass; skipped blocks: the probe's full softmax) — then the rolling
 * average, the dead-turn counts, and with p->prune the new skip set (guardrails:
 * the first keep_first and last keep_last tokens, the partial last block). */
void kv_attn_turn_end(struct kv_attn *a, size_t n_pos, const struct kv_prune_params *p, struct kv_prune_delta *d);

#endif
