/*
 * test_kv_diff.c — kv/diff: spans are valid and reproduce the current
 * sequence, KEEP coverage against an exact LCS oracle, the fast paths, and
 * the complexity bound (the result's `work` counter).
 *
 *   - hand-made cases (empty, equal, append, truncate, splice, prefix kept
 *     then appended, replace, block move, block sizes 1 and 100000);
 *   - random pairs, n ≤ 2,000 (insertions, deletions, replacements, appends,
 *     truncations, block moves, duplications) over vocabularies of 2 to
 *     50,000 ids: spans valid, applying them to prev gives curr, KEEP ≤ LCS;
 *     KEEP / LCS printed, ≥ 0.95 asserted for vocabularies ≥ 1,000;
 *   - large random pairs (~200k tokens): validity and time;
 *   - adversarial pairs: work ≤ 8·(n+m)·(L+1) + ⌈n/B⌉·m + 2^20 (diff.c);
 *   - every ../shared/traces file: prompts rebuilt by the trace reader
 *     (src/engine/trace.c: "keep" code points + "text", checked against
 *     "n_chars"), turned into ids without
 *     a tokenizer (word pieces → FNV-1a mod 100,000, or single bytes), every
 *     consecutive pair diffed; KEEP / LCS ≥ 0.95 asserted for every pair the
 *     oracle can take (the middle left after stripping the common prefix and
 *     suffix — which an LCS always contains — within 2^24 cells).  Families
 *     by file name; OpenHands prompts are edited mid-way;
 *   - windows of real trace text with agent-like edits (counter rewritten,
 *     span deleted, text from elsewhere inserted, block moved, tail replaced):
 *     KEEP / LCS printed, mean ≥ 0.98 and each ≥ 0.7 asserted (see there).
 *
 * DIFF_DEBUG=1 prints the pairs below the ratios, DIFF_DUMP=1 their spans.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>

#include "core/hash.h"
#include "core/status.h"
#include "engine/trace.h"
#include "kv/diff.h"
#include "test.h"

#define B 64 /* the default LLAMA_OPT_BLOCK_SIZE */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static size_t rnd_below(size_t n) { return n ? (size_t)(((uint64_t)rnd() << 32 | rnd()) % n) : 0; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Checking one diff ----------------------------------------------------- */

/* Applies the spans to prev: KEEP copies prev, REPLACE/INSERT take curr, DELETE drops. */
static bool apply_ok(const struct diff_result *r, const dj_token *prev, size_t n_prev, const dj_token *curr,
                     size_t n_curr) {
    dj_token *out = malloc((n_curr + 1) * sizeof *out);
    size_t n = 0;
    bool ok = true;
    for (size_t i = 0; i < r->n_spans && ok; i++) {
        const struct diff_span *s = &r->spans[i];
        if (s->op == DIFF_DELETE) continue;
        if (n + s->length > n_curr) { ok = false; break; }
        const dj_token *src = s->op == DIFF_KEEP ? prev + s->prev_start : curr + s->curr_start;
        if (s->op == DIFF_KEEP && s->prev_start + s->length > n_prev) { ok = false; break; }
        memcpy(out + n, src, s->length * sizeof *out);
        n += s->length;
    }
    ok = ok && n == n_curr && (n == 0 || memcmp(out, curr, n * sizeof *out) == 0);
    free(out);
    return ok;
}

static int n_bad;

/* diff_compute + every check; returns the result (caller frees). */
static struct diff_result run_diff(const dj_token *prev, size_t n_prev, const dj_token *curr, size_t n_curr,
                                   size_t bs, const char *what) {
    struct diff_result r;
    memset(&r, 0, sizeof r);
    enum dj_status st = diff_compute(prev, n_prev, curr, n_curr, bs, &r);
    if (st != DJ_OK) {
        n_bad++;
        fprintf(stderr, "%s: diff_compute: %s\n", what, dj_last_error());
        return r;
    }
    if (diff_validate(&r, prev, n_prev, curr, n_curr) != DJ_OK) {
        n_bad++;
        fprintf(stderr, "%s: %s\n", what, dj_last_error());
    } else if (!apply_ok(&r, prev, n_prev, curr, n_curr)) {
        n_bad++;
        fprintf(stderr, "%s: applying the spans does not give curr\n", what);
    }
    if (r.common_prefix != diff_common_prefix(prev, n_prev, curr, n_curr)) {
        n_bad++;
        fprintf(stderr, "%s: common_prefix %zu, expected %zu\n", what, r.common_prefix,
                diff_common_prefix(prev, n_prev, curr, n_curr));
    }
    return r;
}

/* ---- LCS oracle ------------------------------------------------------------ */

/* Exact LCS length, O(n·m) after stripping the common prefix and suffix (which
 * an LCS always contains).  Returns SIZE_MAX when the middle exceeds max_cells;
 * *p_out / *s_out get the stripped lengths. */
static size_t lcs_oracle(const dj_token *a, size_t na, const dj_token *b, size_t nb, size_t max_cells, size_t *p_out,
                         size_t *s_out) {
    size_t p = 0;
    while (p < na && p < nb && a[p] == b[p]) p++;
    size_t s = 0;
    while (s < na - p && s < nb - p && a[na - 1 - s] == b[nb - 1 - s]) s++;
    *p_out = p;
    *s_out = s;
    a += p;
    b += p;
    na -= p + s;
    nb -= p + s;
    if (na == 0 || nb == 0) return p + s;
    if (na > max_cells / nb) return SIZE_MAX;
    uint32_t *row = calloc(nb + 1, sizeof *row);
    for (size_t i = 1; i <= na; i++) {
        uint32_t diag = 0; /* row[j-1] of the previous row */
        for (size_t j = 1; j <= nb; j++) {
            uint32_t up = row[j];
            row[j] = a[i - 1] == b[j - 1] ? diag + 1 : (up > row[j - 1] ? up : row[j - 1]);
            diag = up;
        }
    }
    size_t l = row[nb];
    free(row);
    return p + s + l;
}

/* ---- Hand-made cases -------------------------------------------------------- */

static void expect_spans(const dj_token *prev, size_t np, const dj_token *curr, size_t nc, size_t bs,
                         enum diff_path path, const char *want, const char *what) {
    struct diff_result r = run_diff(prev, np, curr, nc, bs, what);
    char got[512] = "";
    for (size_t i = 0; i < r.n_spans; i++) {
        char one[64];
        snprintf(one, sizeof one, "%s%s %zu %zu %zu", i ? ", " : "", diff_op_name(r.spans[i].op),
                 r.spans[i].prev_start, r.spans[i].curr_start, r.spans[i].length);
        strncat(got, one, sizeof got - strlen(got) - 1);
    }
    CHECKF(strcmp(got, want) == 0, "%s: spans '%s', expected '%s'", what, got, want);
    CHECKF(r.path == path, "%s: path %d, expected %d", what, (int)r.path, (int)path);
    diff_result_free(&r);
}

static void test_cases(void) {
    dj_token a[300], b[400];
    for (int i = 0; i < 300; i++) a[i] = 1000 + i;
    struct diff_result r;
    CHECK(diff_compute(a, 3, a, 3, 0, &r) == DJ_ERR_INVALID);

    expect_spans(NULL, 0, NULL, 0, B, DIFF_PATH_EQUAL, "", "empty");
    expect_spans(NULL, 0, a, 5, B, DIFF_PATH_APPEND, "INSERT 0 0 5", "from empty");
    expect_spans(a, 5, NULL, 0, B, DIFF_PATH_TRUNCATE, "DELETE 0 0 5", "to empty");
    expect_spans(a, 300, a, 300, B, DIFF_PATH_EQUAL, "KEEP 0 0 300", "equal");
    expect_spans(a, 200, a, 300, B, DIFF_PATH_APPEND, "KEEP 0 0 200, INSERT 200 200 100", "append");
    expect_spans(a, 300, a, 120, B, DIFF_PATH_TRUNCATE, "KEEP 0 0 120, DELETE 120 120 180", "truncate");

    /* prefix kept then appended: prev's last token re-tokenized */
    memcpy(b, a, 100 * sizeof *b);
    b[100] = 7;
    for (int i = 101; i < 150; i++) b[i] = 5000 + i;
    expect_spans(a, 101, b, 150, B, DIFF_PATH_PREFIX_APPEND, "KEEP 0 0 100, REPLACE 100 100 1, INSERT 101 101 49",
                 "prefix kept, one token changed, then appended");
    /* the dropped tail reappears in the new text: the tiny DP keeps it */
    b[120] = a[100];
    expect_spans(a, 101, b, 150, B, DIFF_PATH_PREFIX_APPEND, "KEEP 0 0 100, INSERT 100 100 20, KEEP 100 120 1, INSERT 101 121 29",
                 "prefix kept, dropped token found again");

    /* one insertion / one deletion in the middle */
    memcpy(b, a, 100 * sizeof *b);
    for (int i = 0; i < 7; i++) b[100 + i] = 9000 + i;
    memcpy(b + 107, a + 100, 200 * sizeof *b);
    expect_spans(a, 300, b, 307, B, DIFF_PATH_SPLICE, "KEEP 0 0 100, INSERT 100 100 7, KEEP 100 107 200", "insertion");
    expect_spans(b, 307, a, 300, B, DIFF_PATH_SPLICE, "KEEP 0 0 100, DELETE 100 100 7, KEEP 107 100 200", "deletion");

    /* a replacement in the middle (a turn counter rewritten) */
    memcpy(b, a, 300 * sizeof *b);
    b[150] = 1;
    b[151] = 2;
    expect_spans(a, 300, b, 300, B, DIFF_PATH_BLOCK, "KEEP 0 0 150, REPLACE 150 150 2, KEEP 152 152 148", "replace");
    /* replace 2 by 3 tokens */
    memcpy(b, a, 150 * sizeof *b);
    b[150] = 1; b[151] = 2; b[152] = 3;
    memcpy(b + 153, a + 152, 148 * sizeof *b);
    expect_spans(a, 300, b, 301, B, DIFF_PATH_BLOCK,
                 "KEEP 0 0 150, REPLACE 150 150 2, INSERT 152 152 1, KEEP 152 153 148", "replace 2 by 3");

    /* block move: A B C → A C B with |C| > |B|: the LCS keeps A and C */
    memcpy(b, a, 50 * sizeof *b);        /* A = a[0,50) */
    memcpy(b + 50, a + 130, 170 * sizeof *b); /* C = a[130,300) */
    memcpy(b + 220, a + 50, 80 * sizeof *b);  /* B = a[50,130) */
    expect_spans(a, 300, b, 300, B, DIFF_PATH_BLOCK, "KEEP 0 0 50, DELETE 50 50 80, KEEP 130 50 170, INSERT 300 220 80",
                 "block move");
    /* block size 1 and a block size larger than everything */
    r = run_diff(a, 300, b, 300, 1, "block move, B=1");
    CHECK(r.n_keep == 220);
    diff_result_free(&r);
    r = run_diff(a, 300, b, 300, 100000, "block move, B=100000");
    CHECK(r.n_keep == 220);
    diff_result_free(&r);

    CHECK(diff_common_prefix(a, 300, b, 300) == 50);
    CHECK(diff_common_prefix(NULL, 0, b, 300) == 0);
    CHECK(diff_common_prefix(a, 300, a, 17) == 17);
    diff_result_free(NULL);

    /* diff_validate rejects broken span lists */
    r = run_diff(a, 300, b, 300, B, "validate");
    r.spans[1].length--;
    CHECK(diff_validate(&r, a, 300, b, 300) == DJ_ERR_INVALID);
    r.spans[1].length++;
    r.spans[0].length++; /* KEEP of unequal tokens / wrong cursor */
    CHECK(diff_validate(&r, a, 300, b, 300) == DJ_ERR_INVALID);
    r.spans[0].length--;
    r.n_keep++;
    CHECK(diff_validate(&r, a, 300, b, 300) == DJ_ERR_INVALID);
    r.n_keep--;
    CHECK(diff_validate(&r, a, 300, b, 300) == DJ_OK);
    diff_result_free(&r);
}

/* ---- Random pairs ------------------------------------------------------------ */

struct seq {
    dj_token *t;
    size_t n, cap;
};

static void seq_reserve(struct seq *s, size_t n) {
    if (n <= s->cap) return;
    s->cap = n * 2 + 16;
    s->t = realloc(s->t, s->cap * sizeof *s->t);
}

static void seq_insert(struct seq *s, size_t at, const dj_token *src, size_t n) {
    seq_reserve(s, s->n + n);
    memmove(s->t + at + n, s->t + at, (s->n - at) * sizeof *s->t);
    memcpy(s->t + at, src, n * sizeof *s->t);
    s->n += n;
}

static void seq_erase(struct seq *s, size_t at, size_t n) {
    memmove(s->t + at, s->t + at + n, (s->n - at - n) * sizeof *s->t);
    s->n -= n;
}

static void random_tokens(dj_token *t, size_t n, uint32_t vocab) {
    for (size_t i = 0; i < n; i++) t[i] = (dj_token)(rnd() % vocab);
}

/* Applies one random edit to s. */
static void random_edit(struct seq *s, uint32_t vocab, size_t max_run) {
    dj_token buf[4096];
    size_t run = 1 + rnd_below(max_run < 4096 ? max_run : 4096);
    switch (rnd() % 7) {
    case 0: /* insertion */
        random_tokens(buf, run, vocab);
        seq_insert(s, rnd_below(s->n + 1), buf, run);
        break;
    case 1: { /* deletion */
        if (!s->n) break;
        size_t at = rnd_below(s->n), n = run < s->n - at ? run : s->n - at;
        seq_erase(s, at, n);
        break;
    }
    case 2: { /* replacement, same or different length */
        if (!s->n) break;
        size_t at = rnd_below(s->n), n = run < s->n - at ? run : s->n - at;
        seq_erase(s, at, n);
        size_t m = rnd() % 2 ? n : 1 + rnd_below(max_run);
        if (m > 4096) m = 4096;
        random_tokens(buf, m, vocab);
        seq_insert(s, at, buf, m);
        break;
    }
    case 3: /* append */
        random_tokens(buf, run, vocab);
        seq_insert(s, s->n, buf, run);
        break;
    case 4: /* truncation */
        if (s->n) s->n = rnd_below(s->n);
        break;
    case 5: { /* block move */
        if (s->n < 2) break;
        size_t at = rnd_below(s->n), n = run < s->n - at ? run : s->n - at;
        memcpy(buf, s->t + at, n * sizeof *buf);
        seq_erase(s, at, n);
        seq_insert(s, rnd_below(s->n + 1), buf, n);
        break;
    }
    case 6: { /* duplication */
        if (!s->n) break;
        size_t at = rnd_below(s->n), n = run < s->n - at ? run : s->n - at;
        memcpy(buf, s->t + at, n * sizeof *buf);
        seq_insert(s, rnd_below(s->n + 1), buf, n);
        break;
    }
    }
}

static void test_random_small(void) {
    static const uint32_t vocabs[] = {2, 16, 1000, 50000};
    for (size_t v = 0; v < 4; v++) {
        double min_ratio = 1e9, sum_ratio = 0, t0 = now_s();
        int n_pairs = 0, n_exact = 0;
        for (int it = 0; it < 60; it++) {
            struct seq prev = {0}, curr = {0};
            size_t n = rnd_below(2001);
            seq_reserve(&prev, n + 1);
            random_tokens(prev.t, n, vocabs[v]);
            prev.n = n;
            seq_reserve(&curr, n + 1);
            memcpy(curr.t, prev.t, n * sizeof *curr.t);
            curr.n = n;
            int n_edits = (int)(rnd() % 9);
            for (int e = 0; e < n_edits; e++) random_edit(&curr, vocabs[v], 1 + rnd_below(300));
            if (curr.n > 2500) curr.n = 2500; /* keep the oracle small */
            size_t bs = it % 5 == 4 ? 1 + rnd_below(100) : B;
            char what[96];
            snprintf(what, sizeof what, "random vocab %u #%d (%zu → %zu, B=%zu)", vocabs[v], it, prev.n, curr.n, bs);
            struct diff_result r = run_diff(prev.t, prev.n, curr.t, curr.n, bs, what);
            size_t p, s, lcs = lcs_oracle(prev.t, prev.n, curr.t, curr.n, (size_t)1 << 23, &p, &s);
            CHECKF(r.n_keep <= lcs, "%s: KEEP %zu > LCS %zu", what, r.n_keep, lcs);
            double ratio = lcs ? (double)r.n_keep / (double)lcs : 1.0;
            if (ratio < min_ratio) min_ratio = ratio;
            if (getenv("DIFF_DEBUG") && ratio < (vocabs[v] >= 1000 ? 0.99 : 0.9))
                printf("  %s: KEEP %zu LCS %zu (prefix %zu suffix %zu) spans %zu\n", what, r.n_keep, lcs, p, s, r.n_spans);
            sum_ratio += ratio;
            n_exact += r.n_keep == lcs;
            n_pairs++;
            diff_result_free(&r);
            free(prev.t);
            free(curr.t);
        }
        printf("random pairs, vocab %5u: %d pairs, KEEP/LCS min %.3f mean %.3f, exact LCS in %d, %.2f s\n", vocabs[v],
               n_pairs, min_ratio, sum_ratio / n_pairs, n_exact, now_s() - t0);
        /* With a realistic vocabulary matches are real, not coincidences, and the
         * anchors + DP find nearly all of them. */
        if (vocabs[v] >= 1000) CHECKF(min_ratio >= 0.95, "vocab %u: KEEP/LCS min %.3f", vocabs[v], min_ratio);
    }
}

static void test_random_large(void) {
    double t0 = now_s();
    for (int it = 0; it < 6; it++) {
        struct seq prev = {0}, curr = {0};
        size_t n = 150000 + rnd_below(100000);
        seq_reserve(&prev, n);
        random_tokens(prev.t, n, 32000);
        prev.n = n;
        seq_reserve(&curr, n);
        memcpy(curr.t, prev.t, n * sizeof *curr.t);
        curr.n = n;
        for (int e = 0; e < 20; e++) random_edit(&curr, 32000, it < 3 ? 50 : 3000);
        double t1 = now_s();
        char what[64];
        snprintf(what, sizeof what, "large random #%d", it);
        struct diff_result r = run_diff(prev.t, prev.n, curr.t, curr.n, B, what);
        printf("large random #%d: %zu → %zu tokens, %zu spans, KEEP %zu, work %.1f/token, %.1f ms\n", it, prev.n,
               curr.n, r.n_spans, r.n_keep, (double)r.work / (double)(prev.n + curr.n), (now_s() - t1) * 1e3);
        diff_result_free(&r);
        free(prev.t);
        free(curr.t);
    }
    printf("large random pairs: %.2f s\n", now_s() - t0);
}

/* ---- Complexity ----------------------------------------------------------------- */

static int levels(size_t bs) {
    int l = 0;
    for (; bs; l++) bs = bs <= 4 ? 0 : (bs / 4 > 4 ? bs / 4 : 4);
    return l;
}

/* Runs one diff, checks work against the bound; returns KEEP tokens. */
static size_t check_bound(const dj_token *a, size_t n, const dj_token *b, size_t m, size_t bs, const char *what) {
    double t0 = now_s();
    struct diff_result r = run_diff(a, n, b, m, bs, what);
    double lin = (double)(n + m), bound = 8.0 * lin * (levels(bs) + 1) + (double)((n + bs - 1) / bs) * (double)m +
                                         1048576.0;
    printf("%-40s n=%zu m=%zu: work %.0f = %.2f·(n+m), bound %.0f, KEEP %zu, %.1f ms\n", what, n, m, (double)r.work,
           (double)r.work / lin, bound, r.n_keep, (now_s() - t0) * 1e3);
    CHECKF((double)r.work <= bound, "%s: work %.0f > bound %.0f", what, (double)r.work, bound);
    size_t keep = r.n_keep;
    diff_result_free(&r);
    return keep;
}

static void test_complexity(void) {
    enum { N = 60000 };
    dj_token *a = malloc(N * sizeof *a), *b = malloc((N + 100) * sizeof *b);
    random_tokens(a, N, 32000);
    /* the common case is linear with a small constant */
    memcpy(b, a, N * sizeof *b);
    struct diff_result r = run_diff(a, N - 100, b, N, B, "append");
    CHECK(r.path == DIFF_PATH_APPEND && r.work <= 2 * N);
    diff_result_free(&r);
    b[N - 50] = -5;
    r = run_diff(a, N - 49, b, N, B, "prefix-append");
    CHECK(r.path == DIFF_PATH_PREFIX_APPEND && r.work <= 2 * N + 4 * 49 + 64);
    diff_result_free(&r);
    b[N - 50] = a[N - 50];
    b[1000] = -1;
    r = run_diff(a, N, b, N, B, "one replaced token");
    CHECK(r.n_keep == N - 1 && r.work <= 3 * N);
    diff_result_free(&r);

    /* adversarial inputs */
    random_tokens(a, N, 2);
    random_tokens(b, N, 2);
    check_bound(a, 20000, b, 20000, B, "independent, vocab 2");
    random_tokens(a, N, 32000);
    random_tokens(b, N, 32000);
    check_bound(a, N, b, N, B, "independent, vocab 32000");
    for (size_t i = 0; i < N; i++) b[i] = a[N - 1 - i];
    check_bound(a, N, b, N, B, "reversed");
    for (size_t i = 0; i < N; i++) a[i] = 0;
    for (size_t i = 0; i < N; i++) b[i] = 0;
    b[0] = 1;
    b[N - 1] = 2;
    check_bound(a, N, b, N, B, "all equal tokens, ends changed");
    /* shuffled blocks of 100 tokens: many non-monotone anchors */
    random_tokens(a, N, 32000);
    size_t nblk = N / 100;
    for (size_t k = 0; k < nblk; k++) {
        size_t src = (k * 7919) % nblk;
        memcpy(b + k * 100, a + src * 100, 100 * sizeof *b);
    }
    /* block k of curr = block 119·k mod 600 of prev: the longest increasing
     * subsequence of that permutation is 10 blocks (computed apart), so the
     * heaviest anchor chain must keep 1000 tokens */
    CHECK(check_bound(a, N, b, N, B, "600 shuffled blocks") >= 1000);
    /* periodic with period 3 vs period 5 */
    for (size_t i = 0; i < N; i++) a[i] = (dj_token)(i % 3), b[i] = (dj_token)(i % 5);
    check_bound(a, 30000, b, 30000, B, "periods 3 and 5");
    check_bound(a, 30000, b, 30000, 8, "periods 3 and 5, B=8");
    free(a);
    free(b);
}

/* ---- Traces ------------------------------------------------------------------------ */

/* Tokenizer-free ids: a word (letters, digits, _, any non-ASCII byte) with an
 * optional leading space, a run of newlines, a run of other spaces, or one
 * punctuation byte; id = FNV-1a(piece) mod 100000. */
static size_t pseudo_tokenize(const char *s, size_t n, dj_token *out) {
    size_t k = 0, i = 0;
#define WORDCH(c) ((c) >= 0x80 || ((c) >= '0' && (c) <= '9') || ((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || (c) == '_')
    while (i < n) {
        size_t j = i;
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' && i + 1 < n && WORDCH((unsigned char)s[i + 1])) {
            j = i + 1;
            while (j < n && WORDCH((unsigned char)s[j])) j++;
        } else if (WORDCH(c)) {
            while (j < n && WORDCH((unsigned char)s[j])) j++;
        } else if (c == '\n') {
            while (j < n && s[j] == '\n') j++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r') &&
                   !(s[j] == ' ' && j + 1 < n && WORDCH((unsigned char)s[j + 1])))
                j++;
            if (j == i) j = i + 1;
        } else {
            j = i + 1;
        }
        out[k++] = (dj_token)(dj_fnv1a(DJ_FNV_OFFSET, s + i, j - i) % 100000);
        i = j;
    }
#undef WORDCH
    return k;
}

static size_t byte_tokenize(const char *s, size_t n, dj_token *out) {
    for (size_t i = 0; i < n; i++) out[i] = (unsigned char)s[i];
    return n;
}

struct family {
    const char *name;
    double min_full, sum_full, min_mid, sum_mid;
    int n_pairs, n_oracle, n_mid;
    size_t max_tokens;
    double seconds;
    int bytes; /* granularity: 0 word pieces, 1 bytes */
    int n_files;
    int n_path[DIFF_PATH_BLOCK + 1]; /* pairs per diff path */
    dj_token *last; /* when want_last: the final prompt's ids (caller frees) */
    size_t n_last;
    bool want_last;
};

static void trace_file(const char *shared, const char *file, struct family *fam) {
    char rel[512];
    snprintf(rel, sizeof rel, "traces/%s", file);
    struct trace *tr = NULL;
    CHECKF(trace_open(test_shared_path(shared, rel), &tr) == DJ_OK, "%s", dj_last_error());
    if (!tr) return;
    double t0 = now_s();
    dj_token *prev = NULL, *curr = NULL;
    size_t n_prev = 0;
    for (int turn = 0;; turn++) {
        /* prompt = prompt[:keep code points] + text, checked against n_chars */
        bool done = false;
        enum dj_status st = trace_next(tr, &done);
        CHECKF(st == DJ_OK, "%s", dj_last_error());
        if (st || done) break;
        const char *prompt = tr->prompt;
        const size_t plen = tr->prompt_len;
        curr = malloc((plen + 1) * sizeof *curr);
        size_t n_curr = fam->bytes ? byte_tokenize(prompt, plen, curr) : pseudo_tokenize(prompt, plen, curr);
        if (n_curr > fam->max_tokens) fam->max_tokens = n_curr;
        if (turn > 0) {
            char what[160];
            snprintf(what, sizeof what, "%s turn %d (%s)", file, turn, fam->bytes ? "bytes" : "words");
            struct diff_result r = run_diff(prev, n_prev, curr, n_curr, B, what);
            size_t p, s, lcs = lcs_oracle(prev, n_prev, curr, n_curr, (size_t)1 << 24, &p, &s);
            fam->n_pairs++;
            fam->n_path[r.path]++;
            if (lcs != SIZE_MAX) {
                CHECKF(r.n_keep <= lcs, "%s: KEEP %zu > LCS %zu", what, r.n_keep, lcs);
                double full = lcs ? (double)r.n_keep / (double)lcs : 1.0;
                CHECKF(full >= 0.95, "%s: KEEP/LCS = %zu/%zu = %.3f < 0.95", what, r.n_keep, lcs, full);
                if (full < fam->min_full) fam->min_full = full;
                fam->sum_full += full;
                fam->n_oracle++;
                size_t lmid = lcs - p - s;
                if (lmid > 0) {
                    double mid = (double)(r.n_keep - p - s) / (double)lmid;
                    if (mid < fam->min_mid) fam->min_mid = mid;
                    fam->sum_mid += mid;
                    fam->n_mid++;
                }
            }
            diff_result_free(&r);
        }
        free(prev);
        prev = curr;
        n_prev = n_curr;
    }
    if (fam->want_last) {
        fam->last = prev;
        fam->n_last = n_prev;
    } else {
        free(prev);
    }
    trace_close(tr);
    fam->seconds += now_s() - t0;
}

/* Agent-like edits on real text: windows of a trace's final prompt (word
 * ids, so a realistic, Zipf-like vocabulary) edited the way agents edit
 * prompts: a counter rewritten, a span deleted, a span of text from elsewhere
 * inserted, a block moved, the tail cut and new text appended. */
static void trace_edit(struct seq *s, const dj_token *text, size_t n_text) {
    size_t at = rnd_below(s->n + 1), run = 10 + rnd_below(300);
    switch (rnd() % 5) {
    case 0: { /* a counter or id rewritten: 1-3 tokens */
        if (!s->n) break;
        size_t k = 1 + rnd_below(3);
        for (size_t i = 0; i < k && at + i < s->n; i++) s->t[at + i] = (dj_token)(rnd() % 100000);
        break;
    }
    case 1: /* a span deleted */
        if (at < s->n) seq_erase(s, at, run < s->n - at ? run : s->n - at);
        break;
    case 2: { /* text from elsewhere inserted (re-serialized state, a tool result) */
        size_t from = rnd_below(n_text > run ? n_text - run : 1), k = run < n_text ? run : n_text;
        seq_insert(s, at, text + from, k);
        break;
    }
    case 3: { /* a block moved */
        if (at >= s->n) break;
        size_t k = run < s->n - at ? run : s->n - at;
        dj_token *tmp = malloc(k * sizeof *tmp);
        memcpy(tmp, s->t + at, k * sizeof *tmp);
        seq_erase(s, at, k);
        seq_insert(s, rnd_below(s->n + 1), tmp, k);
        free(tmp);
        break;
    }
    case 4: { /* tail cut, new text appended */
        s->n = at;
        size_t from = rnd_below(n_text > run ? n_text - run : 1), k = run < n_text ? run : n_text;
        seq_insert(s, s->n, text + from, k);
        break;
    }
    }
}

static void test_trace_edits(const char *shared) {
    static const char *const files[] = {
        "claude_code__cctrace_f33cdb42.jsonl",
        "mini_swe_agent__deepseek_chat_test_1-100__astropy__astropy-12907.jsonl",
        "openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_0.jsonl",
        "swe_agent__gpt4__pydicom__pydicom-1458.jsonl",
        "tau_airline__7.jsonl",
    };
    double t0 = now_s(), min_full = 1e9, sum_full = 0, min_mid = 1e9, sum_mid = 0;
    int n = 0, n_mid = 0;
    size_t long_keep = 0, all_keep = 0; /* KEEP tokens in spans of >= 8 (reusable in approx mode) */
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct family fam = {"edits", 1e9, 0, 1e9, 0, 0, 0, 0, 0, 0, 0, 0, {0}, NULL, 0, true};
        trace_file(shared, files[f], &fam);
        if (!fam.last || fam.n_last < 2000) { free(fam.last); continue; }
        for (int it = 0; it < 40; it++) {
            size_t len = 200 + rnd_below(1801), start = rnd_below(fam.n_last - len + 1);
            struct seq curr = {0};
            seq_insert(&curr, 0, fam.last + start, len);
            int n_edits = 1 + (int)(rnd() % 6);
            for (int e = 0; e < n_edits; e++) trace_edit(&curr, fam.last, fam.n_last);
            char what[160];
            snprintf(what, sizeof what, "%s window %zu+%zu, %d edits", files[f], start, len, n_edits);
            struct diff_result r = run_diff(fam.last + start, len, curr.t, curr.n, B, what);
            size_t p, s, lcs = lcs_oracle(fam.last + start, len, curr.t, curr.n, (size_t)1 << 24, &p, &s);
            for (size_t k = 0; k < r.n_spans; k++)
                if (r.spans[k].op == DIFF_KEEP && r.spans[k].length >= 8) long_keep += r.spans[k].length;
            all_keep += r.n_keep;
            if (lcs != SIZE_MAX) {
                double full = lcs ? (double)r.n_keep / (double)lcs : 1.0;
                if (getenv("DIFF_DEBUG") && full < 0.97) {
                    printf("  %s: KEEP %zu LCS %zu (prefix %zu suffix %zu) n=%zu m=%zu\n", what, r.n_keep, lcs, p, s, len, curr.n);
                    if (getenv("DIFF_DUMP"))
                        for (size_t k = 0; k < r.n_spans; k++)
                            printf("     %s %zu %zu %zu\n", diff_op_name(r.spans[k].op), r.spans[k].prev_start, r.spans[k].curr_start, r.spans[k].length);
                }
                CHECKF(full >= 0.7, "%s: KEEP/LCS = %zu/%zu = %.3f < 0.7", what, r.n_keep, lcs, full);
                min_full = full < min_full ? full : min_full;
                sum_full += full;
                n++;
                if (lcs > p + s) {
                    double mid = (double)(r.n_keep - p - s) / (double)(lcs - p - s);
                    min_mid = mid < min_mid ? mid : min_mid;
                    sum_mid += mid;
                    n_mid++;
                }
            }
            diff_result_free(&r);
            free(curr.t);
        }
        free(fam.last);
    }
    printf("trace text with agent-like edits: %d pairs, KEEP/LCS min %.4f mean %.4f; edited middles %d: min %.3f "
           "mean %.3f; KEEP in spans >= 8: %zu of %zu; %.2f s\n",
           n, n ? min_full : 1.0, n ? sum_full / n : 1.0, n_mid, n_mid ? min_mid : 1.0, n_mid ? sum_mid / n_mid : 1.0,
           long_keep, all_keep, now_s() - t0);
    CHECK(n >= 100);
    /* Below 0.95 are pairs where text inserted from elsewhere in the prompt also
     * occurs in prev: the LCS trades a verbatim run for many scattered chance
     * matches of common tokens that cross it; the diff keeps the run (what KV
     * reuse wants), so the family is held to its mean. */
    CHECKF(n == 0 || sum_full / n >= 0.98, "agent-like edits: mean KEEP/LCS %.4f < 0.98", n ? sum_full / n : 1.0);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every traces/<name>.jsonl, grouped into families by the part of the name before
 * "__"; diffed at two granularities: word pieces (BPE-like, asserted) and
 * single bytes (a 256-id vocabulary: many coincidental matches, reported). */
static void test_traces(const char *shared) {
    DIR *d = opendir(test_shared_path(shared, "traces"));
    CHECKF(d != NULL, "cannot list %s/traces", shared);
    if (!d) return;
    char *files[256];
    size_t n_files = 0;
    for (struct dirent *e; (e = readdir(d)) && n_files < 256;) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".jsonl") == 0) files[n_files++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(files, n_files, sizeof *files, cmp_str);
    CHECK(n_files > 0);
    bool saw_openhands = false;
    for (int gran = 0; gran < 2; gran++) {
        for (size_t i = 0; i < n_files;) {
            size_t fl = strstr(files[i], "__") ? (size_t)(strstr(files[i], "__") - files[i]) : strlen(files[i]);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)fl, files[i]);
            struct family fam = {name, 1e9, 0, 1e9, 0, 0, 0, 0, 0, 0, gran, 0, {0}, NULL, 0, false};
            size_t j = i;
            for (; j < n_files && strncmp(files[j], files[i], fl) == 0 && strncmp(files[j] + fl, "__", 2) == 0; j++) {
                trace_file(shared, files[j], &fam);
                fam.n_files++;
            }
            if (strncmp(name, "openhands", 9) == 0 && fam.n_mid > 0) saw_openhands = true;
            printf("traces %-5s %-16s %2d files %4d pairs (<= %6zu ids), oracle on %4d: KEEP/LCS min %.4f mean %.4f;"
                   " edited middles %3d: min %.3f mean %.3f; %.2f s\n"
                   "      paths: equal %d, append %d, truncate %d, prefix-append %d, splice %d, block %d\n",
                   gran ? "bytes" : "words", name, fam.n_files, fam.n_pairs, fam.max_tokens, fam.n_oracle,
                   fam.n_oracle ? fam.min_full : 1.0, fam.n_oracle ? fam.sum_full / fam.n_oracle : 1.0, fam.n_mid,
                   fam.n_mid ? fam.min_mid : 1.0, fam.n_mid ? fam.sum_mid / fam.n_mid : 1.0, fam.seconds,
                   fam.n_path[DIFF_PATH_EQUAL], fam.n_path[DIFF_PATH_APPEND], fam.n_path[DIFF_PATH_TRUNCATE],
                   fam.n_path[DIFF_PATH_PREFIX_APPEND], fam.n_path[DIFF_PATH_SPLICE], fam.n_path[DIFF_PATH_BLOCK]);
            CHECKF(fam.n_pairs > 0 && fam.n_oracle > 0, "%s: no pair was checked against the oracle", name);
            i = j;
        }
    }
    CHECKF(saw_openhands, "no OpenHands pair with a mid-prompt edit was checked against the oracle");
    for (size_t i = 0; i < n_files; i++) free(files[i]);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    double t0 = now_s();
    test_cases();
    test_random_small();
    test_random_large();
    test_complexity();
    test_traces(shared);
    test_trace_edits(shared);
    CHECKF(n_bad == 0, "%d diffs failed validation (see above)", n_bad);
    printf("total %.2f s\n", now_s() - t0);
    TEST_END();
}
