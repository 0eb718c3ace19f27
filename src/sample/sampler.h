/*
 * sampler.h — turning logits into the next token.
 *
 * The chain, in llama.cpp's default order: repetition / frequency / presence
 * penalties over the last `penalty_last_n` tokens → (temperature <= 0: greedy
 * argmax, lowest id on ties) → top-k → top-p → min-p → temperature →
 * softmax → a draw from the sampler's own seeded generator.  The same seed
 * and logits give the same token on any machine; no global state.
 */
#ifndef DJ_SAMPLE_SAMPLER_H
#define DJ_SAMPLE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "deja.h"

struct dj_sampler_params {
    float temp;            /* <= 0: greedy */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off */
    float freq_penalty;    /* 0: off */
    float presence_penalty;/* 0: off */
    int32_t penalty_last_n;/* tokens of history the penalties look at */
    uint64_t seed;
    float typical_p;
    const struct dj_logit_bias *logit_bias;
    size_t n_logit_bias;
};
struct dj_logit_bias { dj_token tok; float bias; };
struct dj_logprob { dj_token tok; float logprob; };

struct dj_sampler_params sampler_default_params(void);

struct dj_sampler;
enum dj_status sampler_create(const struct dj_sampler_params *p, size_t n_vocab, struct dj_sampler **out);
void sampler_free(struct dj_sampler *s);
/* Picks a token from logits (n_vocab floats; not modified). */
dj_token sampler_sample(struct dj_sampler *s, const float *logits, uint64_t pos);
float sampler_logprobs(const float *logits, size_t n_vocab, dj_token chosen, struct dj_logprob *top, size_t n_top, size_t *n_out);
/* Records a token in the penalty history (prompt and generated tokens). */
void sampler_accept(struct dj_sampler *s, dj_token tok);
void sampler_reset(struct dj_sampler *s);

/* argmax, lowest index on ties */
dj_token sampler_argmax(const float *logits, size_t n);

#endif
