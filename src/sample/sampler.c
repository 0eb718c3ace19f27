/*
 * sampler.c — see sampler.h.  Random numbers: xoshiro256** seeded through
 * splitmix64; a uniform double in [0, 1) from the top 53 bits.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    dj_token id;
    float logit;
    float p;
};

struct dj_sampler {
    struct dj_sampler_params p;
    size_t n_vocab;
    uint64_t rng[4];
    dj_token *hist; /* ring of the last penalty_last_n tokens */
    size_t n_hist, hist_pos;
    struct cand *cands;
    int32_t *counts; /* occurrences of each token in the history window */
};

struct dj_sampler_params sampler_default_params(void) {
    struct dj_sampler_params p = {
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
        .freq_penalty = 0.0f, .presence_penalty = 0.0f, .penalty_last_n = 64, .seed = 0,
    };
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

void sampler_reset(struct dj_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->n_hist = s->hist_pos = 0;
    memset(s->counts, 0, s->n_vocab * sizeof *s->counts);
}

#include "core/rng.h"
enum dj_status sampler_create(const struct dj_sampler_params *pp, size_t n_vocab, struct dj_sampler **out) {
    struct dj_sampler_params p = *pp;
    struct dj_sampler *s = calloc(1, sizeof *s);
    if (!s) return DJ_ERR_NOMEM;
    if (p.penalty_last_n < 0) p.penalty_last_n = 0;
    s->p = p;
    s->n_vocab = n_vocab;
    s->hist = malloc(((size_t)p.penalty_last_n + 1) * sizeof *s->hist);
    s->cands = malloc(n_vocab * sizeof *s->cands);
    s->counts = calloc(n_vocab, sizeof *s->counts);
    if (!s->hist || !s->cands || !s->counts) {
        sampler_free(s);
        return DJ_ERR_NOMEM;
    }
    sampler_reset(s);
    *out = s;
    return DJ_OK;
}

void sampler_free(struct dj_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->cands);
    free(s->counts);
    free(s);
}

void sampler_accept(struct dj_sampler *s, dj_token tok) {
    size_t cap = (size_t)s->p.penalty_last_n;
    if (cap == 0 || tok < 0 || (size_t)tok >= s->n_vocab) return;
    if (s->n_hist == cap) {
        dj_token old = s->hist[s->hist_pos];
        s->counts[old]--;
    } else {
        s->n_hist++;
    }
    s->hist[s->hist_pos] = tok;
    s->counts[tok]++;
    s->hist_pos = (s->hist_pos + 1) % cap;
}

dj_token sampler_argmax(const float *logits, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (dj_token)best;
}

/* Descending by logit, ascending id on ties: a total order, so qsort's
 * instability cannot change results. */
static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

dj_token sampler_sample(struct dj_sampler *s, const float *logits, uint64_t pos) {
    const struct dj_sampler_params *p = &s->p;
    size_t n = s->n_vocab;
    struct cand *c = s->cands;
    for (size_t i = 0; i < n; i++) {
        float l = logits[i];
        int32_t cnt = s->counts[i];
        if (cnt > 0) { /* llama.cpp's penalties sampler */
            if (p->repeat_penalty != 1.0f) l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
            l -= (float)cnt * p->freq_penalty + p->presence_penalty;
        }
        c[i] = (struct cand){(dj_token)i, l, 0.0f};
    }
    if (p->temp <= 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return c[best].id;
    }
    qsort(c, n, sizeof *c, cand_cmp);
    if (p->top_k > 0 && (size_t)p->top_k < n) n = (size_t)p->top_k;
    /* probabilities at temperature 1 for top-p / min-p, as llama.cpp does */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - c[0].logit);
        sum += c[i].p;
    }
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (size_t i = 0; i < n; i++) {
            cum += c[i].p / sum;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        const float thr = p->min_p; /* relative to the top candidate (p = 1) */
        size_t keep = 1;
        while (keep < n && c[keep].p >= thr) keep++;
        n = keep;
    }
    sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / p->temp);
        sum += c[i].p;
    }
    double r = dj_rng_uniform(p->seed, pos) * sum;
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id;
}

float sampler_logprobs(const float *logits, size_t n_vocab, dj_token chosen, struct dj_logprob *top, size_t n_top, size_t *n_out) {
    float mx = -INFINITY;
    for (size_t i = 0; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (size_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const float lse = mx + (float)log(sum);
    size_t k = 0;
    for (size_t i = 0; i < n_vocab && n_top; i++) {
        /* insertion into top */
        if (logits[i] == -INFINITY) continue;
        if (k == n_top && !(logits[i] - lse > top[k - 1].logprob)) continue;
        size_t j = k < n_top ? k++ : k - 1;
        while (j > 0 && top[j - 1].logprob < logits[i] - lse) { top[j] = top[j - 1]; j--; }
        top[j] = (struct dj_logprob){(dj_token)i, logits[i] - lse};
    }
    *n_out = k;
    return logits[chosen] - lse;
}
