/*
 * processor.h — the logits-processor hook the engine calls around sampling
 * (the grammar engine plugs in here: sample/schema_skip.c).
 *
 * Exactness contract (what lets the engine skip forward passes, spec §1.5):
 *   - `forced` may return a token only where `apply` would leave exactly that
 *     one token allowed: the engine then emits it without computing logits
 *     for its position (its K/V are computed in the next batched pass).  The
 *     sampler would have drawn it anyway, so the output is unchanged.
 *   - `draft` proposes tokens the processor expects (a forced string's
 *     canonical tokenization): the engine feeds them speculatively and keeps
 *     each only where the sampler, run on that position's logits with the
 *     processor's mask and the same counter-based draw (seed, position),
 *     chooses it; the first mismatch is replaced by the sampled token and
 *     the rest is rolled back.  Drafts never change the output, only how
 *     many passes produce it.
 * Both are consulted only when schema skipping is on
 * (LLAMA_OPT_SCHEMA_SKIP_ENABLED); with it off every token is sampled.
 */
#ifndef DJ_SAMPLE_PROCESSOR_H
#define DJ_SAMPLE_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>

#include "deja.h"

/* All functions run on the engine thread; a non-DJ_OK status fails the
 * request with the processor's message (dj_fail). */
struct dj_logits_processor {
    void *ud;
    /* Before each sampled token: may set entries of logits (n_vocab floats, a
     * copy) to -INFINITY to forbid tokens. */
    enum dj_status (*apply)(void *ud, float *logits, size_t n_vocab);
    /* Told every token the completion emits, sampled or forced, in order. */
    enum dj_status (*accept)(void *ud, dj_token tok);
    /* After accept: tokens that must follow (at most cap, into buf); they are
     * emitted without sampling and fed with the sampled token in one step.
     * The engine calls it again after accepting them, until it returns 0.
     * NULL: none. */
    size_t (*forced)(void *ud, dj_token *buf, size_t cap);
    /* For n > 1: a processor for completion `index` (>= 1) with the state of
     * ud before the first token; NULL: the request fails.  free releases it. */
    void *(*fork)(void *ud, uint32_t index);
    void (*free)(void *ud); /* for forks only; the caller owns ud itself */
    /* After the forced tokens: up to cap tokens expected next (not accepted
     * yet; must not change the state).  NULL: none. */
    size_t (*draft)(void *ud, dj_token *buf, size_t cap);
    /* Whether the processor constrains the next token (a lazy grammar before
     * its trigger does not); for the schema_tokens_total counter.  NULL: always. */
    bool (*active)(void *ud);
};

#endif
