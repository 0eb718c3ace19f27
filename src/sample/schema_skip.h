/*
 * schema_skip.h — a grammar as the engine's logits processor (spec §1.5):
 * the mask that constrains sampling, the tokens the grammar forces (emitted
 * without a forward pass for their position) and the drafts of a forced
 * string (its canonical tokenization, verified in one batched pass).
 *
 *   struct dj_gproc (one per completion; forks for n > 1)
 *     gtok   grammar x vocabulary mask cache (shared by every request using
 *            the grammar; engine thread only)
 *     m      the matcher state after the completion's output so far
 *     mask   the allowed tokens in state m (computed once per state: forced()
 *            and the next apply() share it)
 *
 * Lazy grammars (tool calls in `auto` mode, as llama.cpp's lazy grammars):
 * with a trigger the processor lets the model write freely until its output
 * contains the trigger text; from there the grammar constrains what follows
 * the trigger (the grammar's root matches the text after it).  Bytes of the
 * token that completed the trigger past the trigger's end are fed to the
 * grammar; if it rejects them the request fails with a message.
 *
 * Forced tokens: where the mask allows exactly one token the sampler could
 * only draw that one, so forced() returns it and the engine emits it without
 * computing logits for it; an end-of-generation token forced this way ends
 * the completion.  Drafts: where the grammar forces a byte string but more
 * than one token can start it (`"`, `":`, `": "`), draft() returns the tokens
 * the model wrote for that string before (the draft memo), else the string's
 * canonical tokenization (the tokenizer's), cut where the grammar would
 * reject a token; the engine verifies them against the sampler.
 */
#ifndef DJ_SAMPLE_SCHEMA_SKIP_H
#define DJ_SAMPLE_SCHEMA_SKIP_H

#include <stdbool.h>
#include <stddef.h>

#include "sample/grammar.h"
#include "sample/processor.h"

struct dj_vocab;

/* Draft memo: for a forced string, the tokens the model wrote for it last
 * time (drafted instead of the canonical tokenization when known).  Shared by
 * the requests of one grammar and vocabulary (a server keeps one per
 * grammar); bounded (512 slots, ~100 KiB); engine thread only.  Drafts never
 * change the output, so a stale or colliding entry only costs a rejection. */
struct dj_gdraft_memo;
struct dj_gdraft_memo *gdraft_memo_create(void); /* NULL on OOM */
void gdraft_memo_free(struct dj_gdraft_memo *memo);

struct dj_gproc_params {
    const struct dj_grammar *g;    /* borrowed; its root is the constraint */
    struct dj_gtok *gtok;          /* borrowed; made for g and vocab */
    const struct dj_vocab *vocab;  /* borrowed: token pieces, draft tokenization */
    const char *trigger;           /* NULL or "": constrain from the first token; else lazy (copied) */
    size_t max_draft;              /* drafts per step at most; 0 = 16 */
    struct dj_gdraft_memo *memo;   /* borrowed; NULL: the processor keeps its own */
};

struct dj_gproc;

enum dj_status gproc_create(const struct dj_gproc_params *p, struct dj_gproc **out);
void gproc_free(struct dj_gproc *gp); /* accepts NULL */
/* The processor for engine requests: ud = gp, fork/free create and release
 * copies for further completions (gp itself stays the caller's). */
struct dj_logits_processor gproc_processor(struct dj_gproc *gp);
/* The grammar is constraining (always, unless lazy and not triggered yet). */
bool gproc_active(const struct dj_gproc *gp);
/* The output so far is a complete sentence of the grammar (not lazy-waiting). */
bool gproc_complete(const struct dj_gproc *gp);

/* Sets logits[t] = -INFINITY for every token t whose bit in mask is clear
 * (grammar.h's bitset; n entries).  Whole forbidden words are filled 64 at a
 * time, mixed words bit by bit over their clear bits only. */
void grammar_mask_apply(const uint64_t *mask, float *logits, size_t n);

#endif
