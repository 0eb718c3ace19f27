/*
 * test_sampler.c — the sampler chain: greedy is argmax (lowest id on ties),
 * a seed fixes the draws, top-k 1 is greedy, top-p / min-p cut the tail,
 * penalties lower repeated tokens, and draws follow the softmax.
 */
#include <math.h>

#include "sample/sampler.h"
#include "test.h"

enum { V = 100 };

static void fill(float *l, uint64_t seed) {
    for (int i = 0; i < V; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        l[i] = (float)(seed % 1000) / 100.0f;
    }
}

int main(void) {
    float l[V];
    fill(l, 7);
    dj_token am = sampler_argmax(l, V);
    for (int i = 0; i < V; i++) CHECK(l[i] <= l[am]);
    float tie[4] = {1, 3, 3, 2};
    CHECK(sampler_argmax(tie, 4) == 1);

    struct dj_sampler_params p = sampler_default_params();
    p.temp = 0;
    struct dj_sampler *g = sampler_create(p, V);
    CHECK(sampler_sample(g, l) == am);
    sampler_free(g);

    /* top-k 1 == greedy at any temperature */
    p = sampler_default_params();
    p.top_k = 1;
    p.temp = 5;
    g = sampler_create(p, V);
    for (int i = 0; i < 20; i++) CHECK(sampler_sample(g, l) == am);
    sampler_free(g);

    /* same seed → same draws; another seed → another sequence */
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 3, p.seed = 1234;
    struct dj_sampler *a = sampler_create(p, V), *b = sampler_create(p, V);
    p.seed = 99;
    struct dj_sampler *c = sampler_create(p, V);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 200; i++) {
        dj_token x = sampler_sample(a, l), y = sampler_sample(b, l), z = sampler_sample(c, l);
        same_ab += x == y;
        same_ac += x == z;
    }
    CHECK(same_ab == 200);
    CHECK(same_ac < 150);
    sampler_reset(a);
    sampler_reset(b);
    CHECK(sampler_sample(a, l) == sampler_sample(b, l));
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);

    /* frequencies follow softmax(l / T): two tokens, logits 0 and ln 3 at T=1 → 1:3 */
    float two[2] = {0.0f, logf(3.0f)};
    p = sampler_default_params();
    p.top_k = 0, p.top_p = 1, p.min_p = 0, p.temp = 1, p.seed = 5;
    a = sampler_create(p, 2);
    int ones = 0;
    for (int i = 0; i < 20000; i++) ones += sampler_sample(a, two) == 1;
    CHECKF(fabs(ones / 20000.0 - 0.75) < 0.02, "P(token 1) = %.3f, want 0.75", ones / 20000.0);
    sampler_free(a);

    /* min-p 0.5: only tokens with p >= 0.5 * p_max survive */
    float mp[3] = {0.0f, -0.5f, -5.0f}; /* relative probabilities 1, 0.61, 0.0067 */
    p.min_p = 0.5f, p.temp = 1;
    a = sampler_create(p, 3);
    int seen2 = 0;
    for (int i = 0; i < 2000; i++) seen2 += sampler_sample(a, mp) == 2;
    CHECK(seen2 == 0);
    sampler_free(a);

    /* top-p 0.5 with probabilities 0.6 / 0.3 / 0.1: only the first */
    float tp[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
    p.min_p = 0, p.top_p = 0.5f;
    a = sampler_create(p, 3);
    int others = 0;
    for (int i = 0; i < 2000; i++) others += sampler_sample(a, tp) != 0;
    CHECK(others == 0);
    sampler_free(a);

    /* penalties: a repeated greedy winner loses to the runner-up */
    float pen[3] = {2.0f, 1.9f, 0.0f};
    p = sampler_default_params();
    p.temp = 0, p.repeat_penalty = 1.5f, p.penalty_last_n = 4;
    a = sampler_create(p, 3);
    CHECK(sampler_sample(a, pen) == 0);
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, pen) == 1);
    for (int i = 0; i < 4; i++) sampler_accept(a, 2); /* pushes token 0 out of the window */
    CHECK(sampler_sample(a, pen) == 0);
    sampler_free(a);
    p = sampler_default_params();
    p.temp = 0, p.presence_penalty = 0.2f, p.penalty_last_n = 8;
    a = sampler_create(p, 3);
    sampler_accept(a, 0);
    CHECK(sampler_sample(a, pen) == 1);
    sampler_free(a);
    TEST_END();
}
