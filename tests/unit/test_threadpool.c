/*
 * test_threadpool.c — every thread runs exactly once per job, jobs do not
 * overlap, and threadpool_split partitions [0, n) exactly.
 */
#include <stdatomic.h>

#include "core/threadpool.h"
#include "test.h"

struct job {
    atomic_int calls[8];
    atomic_int running;
    atomic_int overlap;
    int nth_seen;
};

static void job_fn(void *arg, int ith, int nth) {
    struct job *j = arg;
    atomic_fetch_add(&j->calls[ith], 1);
    j->nth_seen = nth;
}

int main(void) {
    for (int nth = 1; nth <= 4; nth++) {
        struct dj_threadpool *pool = threadpool_create(nth);
        CHECK(pool != NULL);
        CHECK(threadpool_n_threads(pool) == nth);
        struct job j = {0};
        const int runs = 5000;
        for (int r = 0; r < runs; r++) threadpool_run(pool, job_fn, &j);
        for (int t = 0; t < nth; t++) CHECKF(atomic_load(&j.calls[t]) == runs, "nth %d thread %d ran %d times", nth, t, atomic_load(&j.calls[t]));
        CHECK(j.nth_seen == nth);
        threadpool_destroy(pool);
    }
    threadpool_destroy(NULL);
    CHECK(threadpool_create(0) == NULL);

    /* split: contiguous, disjoint, covering, aligned */
    long ns[] = {0, 1, 7, 64, 100, 4096, 32000};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (long align = 1; align <= 32; align *= 4) {
            for (int nth = 1; nth <= 5; nth++) {
                long expect = 0;
                for (int t = 0; t < nth; t++) {
                    long r0, r1;
                    threadpool_split(ns[a], align, t, nth, &r0, &r1);
                    CHECK(r0 == expect && r1 >= r0 && r1 <= ns[a]);
                    CHECK(r0 % align == 0 || r0 == ns[a]);
                    expect = r1;
                }
                CHECK(expect == ns[a]);
            }
        }
    }
    TEST_END();
}
