/*
 * sampler.h — turning logits into the next token: the serving engine's sampling chain.
 *
 * The chain, in llama.cpp's default order (common_sampler_init):
 *
 *     logit bias → penalties (repeat / frequency / presence over the last
 *     penalty_last_n accepted tokens) → [temp <= 0: greedy argmax, done] →
 *     top-k → typical-p → top-p → min-p → temperature → softmax → one draw
 *
 * Bias and penalties apply under greedy too (llama.cpp applies penalties before
 * greedy).  Every stage is a function of the candidate SET only, never of how a
 * previous stage ordered it, and the whole chain is defined below exactly, down to
 * the floating-point operations, so a slow full-sort implementation
 * (tests/unit/test_sampler.c) picks bit-for-bit the same token as the fast one.
 *
 * Randomness: the one random number of a call is r = dj_rng_uniform(seed, pos)
 * (core/rng.h, counter-based), so the token for output position `pos` depends on
 * (seed, pos, logits, accepted history) only — not on what was sampled before, in
 * what order, or by which sampler object (DESIGN.md §3).
 *
 * Definition.  n = n_vocab, x = the caller's logits.
 *   y_i      effective logits: x_i; + every bias entry for token i, in the order
 *            given (float adds); then, for a token seen c > 0 times in the penalty
 *            window: y = y <= 0 ? y * repeat : y / repeat;
 *                    y -= (float)c * freq_penalty + presence_penalty      (llama.cpp)
 *            A NaN produced by these steps becomes -INFINITY.
 *   S        the candidates: tokens with finite y (-INFINITY and NaN are never chosen).
 *            No candidate at all → token 0.  Some y = +INFINITY (a caller bug or an
 *            overflow) → the lowest such id, at any temperature.
 *   order    "by logit": y descending, then id ascending (a total order).
 *   m        max y over the current S.
 *   q_i(T)   a token's mass, an integer: sampler_mass((y_i - m) / T) (below; about
 *            2^51 * exp((y_i - m) / T)), T = 1 for the filters.  Masses are summed as
 *            exact unsigned 128-bit integers, so a sum never depends on the order it
 *            was taken in: Q(A) is the sum over A, Z = Q(S), frac(A) = (double)Q(A) /
 *            (double)Z.  A token below 2^-52 (2.2e-16) of the top token's weight
 *            has mass 0 (it is never drawn).
 *   greedy   the first token by logit: max y, lowest id on ties.
 *   top-k    (top_k > 0) the first top_k tokens of S by logit.
 *   typical  (typical_p < 1) llama.cpp's locally typical sampling.  Its score
 *            |-log p_i - H| equals |(m - y_i) - mu| in exact arithmetic (mu = the mean
 *            of m - y under p), computed here without a log per token and defined
 *            even where p_i underflows:
 *              mu   = (float)((double)SUM(q_i * u_i) / (double)Z * 0x1p-32), the sum
 *                     over tokens with q_i > 0, exact in 128 bits,
 *                     u_i = (uint64_t)((m - y_i) * 0x1p32f);
 *              key_i = fabsf((m - y_i) - mu).
 *            Keeps the shortest prefix A of S ordered by (key ascending, id ascending)
 *            with frac(A) > typical_p; all of S if there is none.
 *   top-p    (top_p < 1) the shortest prefix A of S by logit with frac(A) >= top_p;
 *            all of S if there is none (top_p 0 keeps one token).
 *   min-p    (min_p > 0) tokens with y >= m + logf(min_p) (llama.cpp's unsorted form).
 *   draw     weights q_i(temp); walking S in ascending id order, the first token whose
 *            prefix A (the tokens walked so far) has frac(A) > r.  It always exists
 *            (frac(S) = 1 > r) and never has weight 0.  (Any fixed order samples the
 *            same distribution; id order needs no sort: per-block sums of 256 ids.)
 *   A set of one token skips the remaining stages (each would keep it).
 * penalty_last_n = -1 counts every accepted token; tokens outside the vocabulary
 * passed to sampler_accept are ignored.
 *
 * Cost: no stage sorts the vocabulary.  Top-k is a bounded heap (one comparison
 * per token); top-p and typical-p bucket the candidates by their order key while
 * summing masses (one pass), then sort only the bucket where the cumulative mass
 * crosses the threshold; the draw sums masses per block of ids and rescans one
 * block.  A sampler holds 12 bytes of scratch per vocabulary entry (17 with
 * penalties on); one sampler per concurrent request.
 */
#ifndef DJ_SAMPLE_SAMPLER_H
#define DJ_SAMPLE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "deja.h"

/* The mass of a token whose (y - m) / T is x <= 0: about 2^51 * e^x, an integer
 * (sampler.h's q).  Pure double arithmetic, no libm, so it is the same on every
 * machine and compiler (ISO C: no contraction into FMA), and sampler.c's 4-lane
 * version performs exactly the same operations:
 *   t = (double)x * log2(e); t = t > -100 ? t : -100        (NaN, -inf → -100)
 *   big = t + 1.5 * 2^52; k = big - 1.5 * 2^52              (t rounded to an integer)
 *   g = (t - k) * ln 2                                       (|g| <= 0.347)
 *   p = e^g: Taylor polynomial of degree 7, Horner           (relative error < 1e-8)
 *   w = p * 2^(51 + k)                                       (< 2^52; the power of two
 *                                                             built from big's bits)
 *   q = bits(w + 2^52) - bits(2^52)                          (w rounded to an integer)
 * q(0) = 2^51; q is 0 below x = -36.04 (weight under 2^-52 of the top token's);
 * within 1e-8 of 2^51 * e^x where that is above 10^9.  Sums of up to 4096 masses
 * fit in 64 bits. */
static inline uint64_t sampler_mass(float x) {
    union bits {
        double d;
        uint64_t u;
    };
    double t = (double)x * 1.4426950408889634;
    t = t > -100.0 ? t : -100.0;
    union bits big = {.d = t + 0x1.8p52};
    double k = big.d - 0x1.8p52;
    double g = (t - k) * 0.6931471805599453;
    double p = 1.0 / 5040;
    p = p * g;
    p = p + 1.0 / 720;
    p = p * g;
    p = p + 1.0 / 120;
    p = p * g;
    p = p + 1.0 / 24;
    p = p * g;
    p = p + 1.0 / 6;
    p = p * g;
    p = p + 0.5;
    p = p * g;
    p = p + 1.0;
    p = p * g;
    p = p + 1.0;
    union bits sc = {.u = (big.u - 0x4338000000000000ULL + 1074) << 52}; /* 2^(51 + k) */
    double w = p * sc.d;
    union bits r = {.d = w + 0x1p52};
    return r.u - 0x4330000000000000ULL;
}

struct dj_logit_bias {
    dj_token tok;
    float bias; /* added to the logit; -INFINITY bans the token */
};

struct dj_sampler_params {
    float temp;             /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float typical_p;        /* >= 1: off (locally typical sampling, llama.cpp's algorithm) */
    float repeat_penalty;   /* 1: off; must be > 0 */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    int32_t penalty_last_n; /* tokens of history the penalties look at; 0: none; -1: all accepted */
    uint64_t seed;
    const struct dj_logit_bias *logit_bias; /* copied by sampler_create */
    size_t n_logit_bias;
};

/* temp 0.8, top_k 40, top_p 0.95, min_p 0.05, typical_p 1, penalties off
 * (repeat 1, freq 0, presence 0), penalty_last_n 64, seed 0, no bias. */
struct dj_sampler_params sampler_default_params(void);

struct dj_sampler;

/* Validates p and allocates a sampler for an n_vocab-token vocabulary.
 * DJ_ERR_INVALID (message naming the field and its value): NaN or infinity in any
 * float (a bias may be -INFINITY), top_p / min_p / typical_p outside [0, 1],
 * repeat_penalty <= 0, penalty_last_n < -1, a bias token outside [0, n_vocab),
 * n_vocab 0 or over INT32_MAX, NULL arguments.  DJ_ERR_NOMEM.  *out is set on
 * success only; the caller frees it with sampler_free. */
enum dj_status sampler_create(const struct dj_sampler_params *p, size_t n_vocab, struct dj_sampler **out);
void sampler_free(struct dj_sampler *s); /* accepts NULL */

/* The token for output position `pos` (0 = the first generated token of the
 * request).  logits: n_vocab floats, not modified; a token masked by the caller is
 * -INFINITY and is never chosen unless all are.  The one random draw is
 * dj_rng_uniform(seed, pos): the same (seed, pos, logits, accepted history) gives
 * the same token whatever was sampled before or elsewhere.  Not thread-safe on one
 * sampler (it uses the sampler's scratch); distinct samplers are independent. */
dj_token sampler_sample(struct dj_sampler *s, const float *logits, uint64_t pos);

/* Records a token in the penalty history (the engine feeds the prompt's tokens and
 * every generated one).  A no-op when the penalties are off. */
void sampler_accept(struct dj_sampler *s, dj_token tok);
/* Forgets the penalty history (for a new request with the same parameters). */
void sampler_reset(struct dj_sampler *s);

/* argmax, lowest index on ties; NaN and -INFINITY are never chosen unless all
 * entries are (then 0); 0 for n == 0. */
dj_token sampler_argmax(const float *logits, size_t n);

struct dj_logprob {
    dj_token tok;
    float logprob;
};

/* Log-softmax of logits (the model's distribution, before penalties and
 * temperature; -INFINITY and NaN entries have probability 0): returns the
 * log-probability of `chosen` (-INFINITY for a token outside [0, n_vocab)), and
 * writes the n_top most likely tokens into top[0..n_top) (descending, ties: lower
 * id first; fewer if fewer are finite — that count goes to *n_out, which may be
 * NULL).  Partial selection (a bounded heap kept in `top`), never a full sort.
 * The normalizer is the exact integer sum of sampler_mass(x_i - max) (so log Z is
 * within ~1e-8 of the true value, and independent of summation order).  Several
 * +INFINITY entries share the probability equally; then nothing else is listed. */
float sampler_logprobs(const float *logits, size_t n_vocab, dj_token chosen, struct dj_logprob *top, size_t n_top,
                       size_t *n_out);

#endif
