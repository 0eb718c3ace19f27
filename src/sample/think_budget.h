/*
 * think_budget.h — a reasoning budget as a logits processor: after the model
 * has written `budget` tokens inside its think block, the end-of-thinking
 * text (the template family's close marker, "</think>" and the like) is
 * forced token by token, so the answer still comes (Anthropic's
 * `thinking.budget_tokens`, llama.cpp's --reasoning-budget).
 *
 *   output:  [ws] <think> r1 r2 … rB  </think> answer…      (or the prompt already opened it)
 *   state:   PRE   IN ─ counts B reasoning tokens ─▶ FORCING ─▶ DONE
 *
 * The model may close the block itself before the budget (then nothing is
 * forced) or never open one (then DONE at its first other text).  An inner
 * processor (a tool-call or response grammar) sees every token in order and
 * constrains the rest of the output as without the budget; while forcing,
 * only the forced token is allowed (processor.h's exactness contract holds:
 * `forced` returns tokens only where `apply` leaves exactly one).
 *
 * Markers are found in the detokenized text (special tokens rendered), so a
 * marker split over several tokens is seen, and one the user's model writes
 * as plain text is too.
 */
#ifndef DJ_SAMPLE_THINK_BUDGET_H
#define DJ_SAMPLE_THINK_BUDGET_H

#include <stdbool.h>
#include <stddef.h>

#include "sample/processor.h"
#include "tokenizer/tokenizer.h"

struct dj_think_budget_params {
    const struct dj_vocab *vocab;
    const char *open, *close; /* the think markers (close is what gets forced); both required */
    bool starts_open;         /* the prompt ends inside the think block */
    size_t budget;            /* reasoning tokens allowed before the close is forced */
    const struct dj_logits_processor *inner; /* copied; may be NULL */
};

struct dj_think_budget;

/* DJ_ERR_INVALID when a marker is missing or the close marker does not
 * tokenize; the processor does not own `inner`'s state. */
enum dj_status think_budget_create(const struct dj_think_budget_params *p, struct dj_think_budget **out);
void think_budget_free(struct dj_think_budget *b); /* accepts NULL */
/* The processor (ud = b; forks made by it are freed by the engine through its free hook). */
struct dj_logits_processor think_budget_processor(struct dj_think_budget *b);
/* Reasoning tokens counted so far (tests). */
size_t think_budget_used(const struct dj_think_budget *b);

#endif
