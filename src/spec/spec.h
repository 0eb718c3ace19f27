/*
 * spec.h — draft sources for exact speculative decoding without a draft
 * model (spec §3.1 output memoization, DESIGN.md §1: drafts are keyed by the
 * last tokens, never by hidden states), and the policy that picks a source
 * and a length per step.  The engine (engine/sched.c) feeds the chosen draft
 * after the sampled token, computes logits for every draft position in the
 * same batched forward pass as everything else, and keeps a draft token only
 * where the sampler — same logits, same mask, same counter-based draw for
 * that output position — picks it (verify_drafts).  A draft never changes
 * the output; it changes only how many forward passes produce it.
 *
 * Sources (enum dj_spec_src):
 *   grammar  a forced string's tokens (sample/schema_skip.c, the logits
 *            processor's draft hook); needs a grammar, not --spec
 *   lookup   prompt lookup: the longest earlier occurrence (n >= 1 tokens, up to
 *            SPEC_LOOKUP_NGRAM_MAX) of the completion's last tokens in its
 *            own prompt and output, drafting what followed it (lookup.c)
 *   memo     the output memo: a suffix trie over the outputs of earlier
 *            requests of every session, drafting the most frequent
 *            continuation of the longest matching suffix (memo.c; SuffixDecoding)
 *   exit     early exit: the first L layers + final norm + output matrix of
 *            the model itself, sharing those layers' K/V rows with the full
 *            model (engine/sched.c; model/forward.c ctx_forward_exit)
 *   mtp      the model's own NextN / MTP block (Qwen3.5 / 3.6 hybrids), run as a draft
 *            model on the last hidden row: k passes of that one block and the output
 *            matrix (engine/draft.c engine_mtp_drafts; model/forward.c ctx_forward_mtp);
 *            named explicitly (not part of "all")
 *
 * The policy (policy.c) estimates, per source and confidence bucket, the
 * probability that draft position j is accepted given j-1 were, from every
 * verification and from "shadow" proposals that were not drafted (compared
 * with the tokens that were then generated: free for lookup and memo), and
 * drafts the length k that maximizes expected tokens per unit of step time,
 * (1 + E_k) / (1 + beta k), beta being the measured marginal cost of one
 * more row in a forward pass (engine step timings, a running regression).
 * When nothing is accepted E_k -> 0 and it stops drafting.
 */
#ifndef DJ_SPEC_SPEC_H
#define DJ_SPEC_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

enum dj_spec_src { DJ_SPEC_GRAMMAR = 0, DJ_SPEC_LOOKUP, DJ_SPEC_MEMO, DJ_SPEC_EXIT, DJ_SPEC_MTP, DJ_SPEC_N_SRC };
enum {
    DJ_SPEC_POS_MAX = 32,     /* acceptance statistics per draft position (longer drafts share the last) */
    DJ_SPEC_BUCKETS = 4,      /* confidence buckets per source */
    SPEC_LOOKUP_NGRAM_MAX = 8 /* longest n-gram prompt lookup matches on */
};
/* Source bits for dj_spec_params.sources. */
#define DJ_SPEC_BIT(src) (1u << (src))

const char *spec_src_name(enum dj_spec_src src); /* "grammar", "lookup", "memo", "exit", "mtp" */
/* Parses a comma-separated list of source names ("lookup,memo", "all", "none")
 * into bits; false (and a message) for an unknown name. */
bool spec_parse_sources(const char *s, unsigned *bits);

struct dj_spec_params {
    unsigned sources;     /* DJ_SPEC_BIT(LOOKUP|MEMO|EXIT); 0 = speculation off (grammar drafts
                             are governed by LLAMA_OPT_SCHEMA_SKIP_ENABLED, not by this) */
    uint32_t draft_max;   /* tokens drafted per step at most (16) */
    uint32_t exit_layer;  /* early exit after this many layers; 0 = auto */
    bool adaptive;        /* true: the policy picks source and length; false: always the longest
                             proposal up to draft_max (tests, and to measure the policy) */
};
struct dj_spec_params spec_default_params(void); /* off, 16, auto, adaptive */

/* Counters of one completion (and, summed, of an engine). */
struct dj_spec_counts {
    uint64_t drafted[DJ_SPEC_N_SRC];   /* draft tokens fed for verification */
    uint64_t accepted[DJ_SPEC_N_SRC];  /* of those, confirmed by the sampler (each saved a pass) */
    uint64_t rounds[DJ_SPEC_N_SRC];    /* steps that fed a draft of that source */
    uint64_t proposed[DJ_SPEC_N_SRC];  /* proposals made (drafted or shadowed) */
    uint64_t pos_drafted[DJ_SPEC_POS_MAX];  /* draft tokens at position j of their draft */
    uint64_t pos_accepted[DJ_SPEC_POS_MAX]; /* of those, accepted */
};
void spec_counts_add(struct dj_spec_counts *to, const struct dj_spec_counts *from);

/* ---- prompt lookup (lookup.c) ---------------------------------------------
 *
 *   tok:  [ prompt ........................ | output ...... ]  n tokens
 *   head: hash of the 1-gram ending at i -> latest such i      (open table)
 *   prev: i -> the previous i' with the same 1-gram hash       (a chain, as zlib's)
 *
 * A draft: walk the chain of the last token back from the newest occurrence
 * (at most SPEC_LOOKUP_CHAIN candidates), measure each candidate's backward
 * match with the end of tok (up to SPEC_LOOKUP_NGRAM_MAX), keep the longest
 * (newest on ties), and propose what followed it.  Appending is O(1). */
struct spec_lookup {
    dj_token *tok;   /* (cap) */
    uint32_t *prev;  /* (cap) */
    uint32_t *head;  /* (n_head) UINT32_MAX: empty */
    size_t n, cap, n_head;
};
void spec_lookup_init(struct spec_lookup *l);
void spec_lookup_free(struct spec_lookup *l); /* accepts a zeroed struct */
/* Appends tokens; DJ_ERR_NOMEM leaves l unchanged. */
enum dj_status spec_lookup_append(struct spec_lookup *l, const dj_token *tok, size_t n);
/* Up to cap tokens into out; *match = the n-gram length matched (0: none). */
size_t spec_lookup_draft(const struct spec_lookup *l, dj_token *out, size_t cap, uint32_t *match);

/* ---- the output memo (memo.c) ---------------------------------------------
 *
 * A suffix trie of depth SPEC_MEMO_DEPTH over recorded outputs: every
 * suffix of every output, cut at the depth, is a path from the root; a
 * node's count is how many recorded suffixes pass through it.  A draft
 * matches the longest suffix of the current context (at most depth - 1
 * tokens) as a path, then follows the most frequent child while the product
 * of count(child)/count(node) stays >= SPEC_MEMO_MIN_P.  Bounded by max_nodes:
 * recording evicts the oldest recorded outputs first (their suffixes'
 * counts are taken back; nodes that reach 0 are freed).  Not thread-safe
 * (the engine thread owns it). */
enum { SPEC_MEMO_DEPTH = 24 };
#define SPEC_MEMO_MIN_P 0.1f
struct spec_memo;
/* max_nodes >= 1.  NULL on OOM. */
struct spec_memo *spec_memo_create(uint32_t max_nodes);
void spec_memo_destroy(struct spec_memo *m); /* accepts NULL */
/* Records an output (copied).  DJ_ERR_NOMEM leaves the memo consistent (the
 * output may be recorded in part). */
enum dj_status spec_memo_record(struct spec_memo *m, const dj_token *tok, size_t n);
/* Draft for a context ending in ctx[n-1]: up to cap tokens into out;
 * *match = suffix length matched, *prob = the path's estimated probability. */
size_t spec_memo_draft(const struct spec_memo *m, const dj_token *ctx, size_t n, dj_token *out, size_t cap,
                       uint32_t *match, float *prob);
uint32_t spec_memo_n_nodes(const struct spec_memo *m);
uint32_t spec_memo_n_records(const struct spec_memo *m);

/* ---- the policy (policy.c) ------------------------------------------------- */

/* What a source proposes for one step. */
struct spec_proposal {
    enum dj_spec_src src;
    uint32_t bucket;       /* confidence bucket (< DJ_SPEC_BUCKETS) */
    const dj_token *tok;
    size_t n;
};

/* Acceptance estimates per (source, bucket, position) and the step cost
 * model; one per engine (shared by its requests: they learn together). */
struct spec_policy {
    float reach[DJ_SPEC_N_SRC][DJ_SPEC_BUCKETS][DJ_SPEC_POS_MAX]; /* decayed counts: position reached */
    float acc[DJ_SPEC_N_SRC][DJ_SPEC_BUCKETS][DJ_SPEC_POS_MAX];   /* ... and accepted there */
    /* step time t(n) = a + b n (n rows in the forward pass): decayed sums of a regression */
    double s_w, s_n, s_t, s_nn, s_nt;
    double beta_default;   /* b / a before there are measurements */
};
void spec_policy_init(struct spec_policy *p);
/* Records a verified (or shadow) outcome: positions [0, n_acc) accepted and,
 * if n_acc < n_tried, position n_acc rejected. */
void spec_policy_observe(struct spec_policy *p, enum dj_spec_src src, uint32_t bucket, size_t n_tried, size_t n_acc);
/* Records one forward pass of n_rows rows that took t_ms. */
void spec_policy_time(struct spec_policy *p, size_t n_rows, double t_ms);
/* The draft length worth feeding for proposal pr in a step whose forward
 * pass already holds n_rows rows: 0 (do not draft) .. min(pr->n, cap).
 * Its expected gain: *gain = (1 + E_k) / (1 + beta k) (1 at k = 0). */
size_t spec_policy_length(const struct spec_policy *p, const struct spec_proposal *pr, size_t n_rows, size_t cap,
                          double *gain);
/* The same for an MTP draft (source mtp): k passes of the block (fraction a of a full
 * pass's weights) and the output matrix (h) each, then a plain verification pass: the cost
 * model of spec_policy_length_exit, with the mtp source's acceptance. */
size_t spec_policy_length_mtp(const struct spec_policy *p, size_t n_rows, size_t cap, double a, double h,
                              double *gain);
/* The same for an early-exit draft (source exit, which has no tokens before
 * it runs): its cost is the k + 1 exit passes through the first L layers
 * (fraction a of a full pass's weights) with the output matrix for k of them
 * (fraction h), then the verification pass resuming at layer L (1 - a, plus
 * beta per extra row).  Returns 0 when it does not pay. */
size_t spec_policy_length_exit(const struct spec_policy *p, size_t n_rows, size_t cap, double a, double h,
                               double *gain);
/* The best expected gain of drafting 1 .. cap tokens with a constant
 * per-token acceptance alpha at those costs (for choosing the exit layer;
 * below 1 when drafting does not pay); *k its length. */
double spec_exit_gain(double alpha, double beta, double a, double h, size_t cap, size_t *k);
/* P(position j accepted | j - 1 were), as the policy estimates it now. */
double spec_policy_alpha(const struct spec_policy *p, enum dj_spec_src src, uint32_t bucket, size_t j);
/* The marginal cost of one row relative to a pass of n_rows rows. */
double spec_policy_beta(const struct spec_policy *p, size_t n_rows);

#endif
