/*
 * test_spec_sources.c — the draft sources and the policy of spec/spec.h on
 * their own: prompt lookup against a brute-force search; the output memo's
 * drafts (longest suffix, most frequent continuation, the probability cut)
 * and its eviction (a bounded memo drafts exactly what a memo rebuilt from
 * the records it kept drafts, and never holds more nodes than allowed); the
 * policy's draft length from observed acceptance and its cost model.
 */
#include "core/status.h"
#include "spec/spec.h"
#include "test.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* The longest (>= 2, <= SPEC_LOOKUP_NGRAM_MAX) backward match of the end of t
 * at an earlier position, newest on ties; else the newest earlier occurrence
 * of the last token (within 4096).  Returns the position or -1; *m its length. */
static long brute_lookup(const dj_token *t, size_t n, size_t *m) {
    long best = -1;
    size_t bm = 0;
    for (size_t i = n - 1; i-- > 0;) {
        size_t k = 0;
        while (k < SPEC_LOOKUP_NGRAM_MAX && k <= i && t[i - k] == t[n - 1 - k]) k++;
        if (k >= 2 && k > bm) {
            bm = k;
            best = (long)i;
        }
    }
    if (best < 0)
        for (size_t i = n - 1; i-- > 0 && n - 1 - i <= 4096;)
            if (t[i] == t[n - 1]) {
                best = (long)i;
                bm = 1;
                break;
            }
    *m = bm;
    return best;
}

static void test_lookup(void) {
    for (int round = 0; round < 40; round++) {
        struct spec_lookup l;
        spec_lookup_init(&l);
        const uint32_t alpha = round < 20 ? 6 : 60;
        dj_token t[600];
        const size_t n = 50 + rnd(550);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            /* repeats: now and then copy an earlier stretch */
            t[i] = i > 20 && rnd(4) == 0 ? t[rnd((uint32_t)i)] : (dj_token)rnd(alpha);
            CHECK(spec_lookup_append(&l, &t[i], 1) == DJ_OK);
            dj_token d[16];
            uint32_t m;
            const size_t nd = spec_lookup_draft(&l, d, 16, &m);
            size_t bm;
            const long p = brute_lookup(t, i + 1, &bm);
            size_t want = p < 0 ? 0 : i - (size_t)p;
            if (want > 16) want = 16;
            if (nd != want || m != bm || (p >= 0 && memcmp(d, t + p + 1, nd * sizeof *d))) bad++;
        }
        CHECKF(bad == 0, "round %d (alphabet %u): %d drafts differ from the brute-force search", round, alpha, bad);
        spec_lookup_free(&l);
    }
    /* appending in bulk (the prompt) and then one by one gives the same index */
    struct spec_lookup a, b;
    spec_lookup_init(&a);
    spec_lookup_init(&b);
    dj_token t[3000];
    for (size_t i = 0; i < 3000; i++) t[i] = (dj_token)rnd(40);
    CHECK(spec_lookup_append(&a, t, 2000) == DJ_OK);
    for (size_t i = 0; i < 2000; i++) CHECK(spec_lookup_append(&b, t + i, 1) == DJ_OK);
    int diff = 0;
    for (size_t i = 2000; i < 3000; i++) {
        spec_lookup_append(&a, t + i, 1);
        spec_lookup_append(&b, t + i, 1);
        dj_token da[8], db[8];
        uint32_t ma, mb;
        const size_t na = spec_lookup_draft(&a, da, 8, &ma), nb = spec_lookup_draft(&b, db, 8, &mb);
        diff += na != nb || ma != mb || memcmp(da, db, na * sizeof *da);
    }
    CHECK(diff == 0);
    spec_lookup_free(&a);
    spec_lookup_free(&b);
}

static void test_memo_basic(void) {
    struct spec_memo *m = spec_memo_create(1000);
    CHECK(m != NULL);
    const dj_token o1[] = {1, 2, 3, 4, 5}, o2[] = {1, 2, 3, 9}, ctx[] = {7, 7, 1, 2, 3};
    dj_token d[16];
    uint32_t match;
    float p;
    CHECK(spec_memo_draft(m, ctx, 5, d, 16, &match, &p) == 0); /* empty */
    CHECK(spec_memo_record(m, o1, 5) == DJ_OK);
    const dj_token ctx2[] = {9, 1, 2};
    CHECK(spec_memo_draft(m, ctx2, 3, d, 16, &match, &p) == 3 && d[0] == 3 && d[2] == 5 && match == 2);
    CHECK(spec_memo_record(m, o2, 4) == DJ_OK);
    CHECK(spec_memo_record(m, o2, 4) == DJ_OK);
    /* after 1 2 3: 9 twice, 4 once -> 9 (p 2/3), and 9 ends both outputs */
    size_t n = spec_memo_draft(m, ctx, 5, d, 16, &match, &p);
    CHECKF(n == 1 && d[0] == 9 && match == 3 && p > 0.66f && p < 0.67f, "n %zu d0 %d match %u p %f", n, d[0], match, p);
    /* no suffix of the context in the trie */
    const dj_token none[] = {42, 43};
    CHECK(spec_memo_draft(m, none, 2, d, 16, &match, &p) == 0);
    /* the probability cut: 20 different continuations after 5 6 */
    for (int i = 0; i < 20; i++) {
        const dj_token o[] = {5, 6, (dj_token)(100 + i), 8};
        spec_memo_record(m, o, 4);
    }
    const dj_token c56[] = {5, 6};
    CHECK(spec_memo_draft(m, c56, 2, d, 16, &match, &p) == 0 || match < 2);
    CHECK(spec_memo_n_records(m) == 23);
    spec_memo_destroy(m);
}

/* A memo bounded to `cap` nodes drafts what an unbounded one built from the records it
 * kept (the newest n_records) drafts. */
static void test_memo_evict(void) {
    enum { N_OUT = 60 };
    static dj_token outs[N_OUT][40];
    size_t lens[N_OUT];
    for (int cap_i = 0; cap_i < 3; cap_i++) {
        /* an output of 35 tokens needs up to 35 x 24 nodes: every cap here holds one whole */
        const uint32_t cap = cap_i == 0 ? 900 : cap_i == 1 ? 1500 : 4000;
        struct spec_memo *m = spec_memo_create(cap);
        int bad = 0, over = 0;
        for (int k = 0; k < N_OUT; k++) {
            lens[k] = 5 + rnd(30);
            for (size_t i = 0; i < lens[k]; i++) outs[k][i] = (dj_token)rnd(12);
            CHECK(spec_memo_record(m, outs[k], lens[k]) == DJ_OK);
            over += spec_memo_n_nodes(m) > cap;
            if (k % 7 != 6) continue;
            const uint32_t kept = spec_memo_n_records(m);
            struct spec_memo *ref = spec_memo_create(1u << 20);
            for (int j = k + 1 - (int)kept; j <= k; j++) spec_memo_record(ref, outs[j], lens[j]);
            for (int q = 0; q < 200; q++) {
                dj_token ctx[6], d1[16], d2[16];
                for (int i = 0; i < 6; i++) ctx[i] = (dj_token)rnd(12);
                uint32_t m1, m2;
                float p1, p2;
                const size_t n1 = spec_memo_draft(m, ctx, 6, d1, 16, &m1, &p1);
                const size_t n2 = spec_memo_draft(ref, ctx, 6, d2, 16, &m2, &p2);
                bad += n1 != n2 || m1 != m2 || p1 != p2 || memcmp(d1, d2, n1 * sizeof *d1);
            }
            CHECKF(spec_memo_n_nodes(ref) == spec_memo_n_nodes(m), "cap %u: %u nodes, rebuilt %u", cap,
                   spec_memo_n_nodes(m), spec_memo_n_nodes(ref));
            spec_memo_destroy(ref);
        }
        CHECKF(bad == 0 && over == 0, "cap %u: %d drafts differ from a rebuilt memo, %d times over the bound", cap, bad,
               over);
        spec_memo_destroy(m);
    }
    /* one output larger than the whole memo: recorded in part, evicted cleanly later */
    struct spec_memo *m = spec_memo_create(50);
    dj_token big[400];
    for (int i = 0; i < 400; i++) big[i] = (dj_token)i;
    CHECK(spec_memo_record(m, big, 400) == DJ_OK && spec_memo_n_nodes(m) <= 50);
    const dj_token small[] = {1000, 1001, 1002};
    CHECK(spec_memo_record(m, small, 3) == DJ_OK && spec_memo_n_records(m) == 1 && spec_memo_n_nodes(m) == 6);
    spec_memo_destroy(m);
    CHECK(spec_memo_create(0) == NULL);
}

static void test_policy(void) {
    struct spec_policy p;
    spec_policy_init(&p);
    dj_token t[16] = {0};
    struct spec_proposal pr = {DJ_SPEC_LOOKUP, 1, t, 16};
    double g;
    /* unmeasured: the uniform prior drafts a little */
    const size_t k0 = spec_policy_length(&p, &pr, 1, 16, &g);
    CHECK(k0 >= 1 && k0 < 16);
    for (int i = 0; i < 300; i++) spec_policy_observe(&p, DJ_SPEC_LOOKUP, 1, 16, 0);
    CHECK(spec_policy_length(&p, &pr, 1, 16, &g) == 0 && g == 1.0);
    /* another bucket and source learn separately */
    for (int i = 0; i < 300; i++) spec_policy_observe(&p, DJ_SPEC_MEMO, 2, 16, 16);
    struct spec_proposal pm = {DJ_SPEC_MEMO, 2, t, 16};
    CHECK(spec_policy_length(&p, &pm, 1, 16, &g) == 16 && g > 2.0);
    CHECK(spec_policy_length(&p, &pm, 1, 5, &g) == 5);
    CHECK(spec_policy_alpha(&p, DJ_SPEC_MEMO, 2, 3) > 0.95 && spec_policy_alpha(&p, DJ_SPEC_LOOKUP, 1, 0) < 0.05);
    /* the cost model: t(n) = 2 + 0.5 n ms -> beta at one row 0.5 / 2.5 */
    CHECK(spec_policy_beta(&p, 1) == p.beta_default);
    for (int i = 0; i < 200; i++) {
        const size_t n = 1 + (size_t)(i % 9);
        spec_policy_time(&p, n, 2.0 + 0.5 * (double)n);
    }
    const double b1 = spec_policy_beta(&p, 1);
    CHECKF(b1 > 0.199 && b1 < 0.201, "beta %f, want 0.2", b1);
    spec_policy_time(&p, 500, 1e6); /* prefill-sized passes are not fitted */
    CHECK(spec_policy_beta(&p, 1) == b1);
    /* expensive rows: a 0.6 acceptance no longer pays */
    for (int i = 0; i < 300; i++) spec_policy_observe(&p, DJ_SPEC_LOOKUP, 3, 4, i % 5 < 3 ? 4 : 0);
    struct spec_proposal p3 = {DJ_SPEC_LOOKUP, 3, t, 4};
    const size_t k_cheap = spec_policy_length(&p, &p3, 1, 16, &g);
    for (int i = 0; i < 2000; i++) spec_policy_time(&p, 1 + (size_t)(i % 9), 0.1 + 2.0 * (double)(1 + i % 9));
    CHECKF(spec_policy_length(&p, &p3, 1, 16, &g) == 0 && k_cheap > 0, "k %zu with cheap rows, beta now %f", k_cheap,
           spec_policy_beta(&p, 1));
}

static void test_sources_parse(void) {
    unsigned b = 99;
    CHECK(spec_parse_sources("lookup,memo", &b) && b == (DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO)));
    CHECK(spec_parse_sources("none", &b) && b == 0);
    CHECK(spec_parse_sources("all", &b) && (b & DJ_SPEC_BIT(DJ_SPEC_EXIT)));
    b = 5;
    CHECK(!spec_parse_sources("lookup,bogus", &b) && b == 5 && strstr(dj_last_error(), "bogus"));
    CHECK(!spec_parse_sources("grammar", &b));
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_lookup();
    test_memo_basic();
    test_memo_evict();
    test_policy();
    test_sources_parse();
    TEST_END();
}
