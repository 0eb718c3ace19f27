/*
 * test_threadpool.c — every share of every job runs exactly once, never twice at
 * the same time, with the job's own (fn, arg), and all of it before run
 * returns; that holds with shares that sleep at random (a thread the scheduler
 * put aside), with more threads than cores, and with jobs of 0 .. 200 shares
 * back to back.  A job whose share 0 blocks until another share has started
 * elsewhere proves the workers take part.  threadpool_split partitions [0, n)
 * exactly.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "test.h"

enum { MAX_SHARES = 200 };

struct job {
    int id;             /* which job this is: a share must see its own */
    int n;              /* shares */
    int sleep_per_mille; /* chance that a share sleeps 1-300 us */
    unsigned seed;
    atomic_int calls[MAX_SHARES];
    atomic_int running[MAX_SHARES];
    atomic_int bad; /* wrong job, wrong n, share out of range, or a share twice at once */
};

static atomic_int current_job; /* id of the job threadpool_run_n is running */

static unsigned mix(unsigned x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

static void share_fn(void *arg, int i, int n) {
    struct job *j = arg;
    if (j->id != atomic_load(&current_job) || n != j->n || i < 0 || i >= n) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    if (atomic_fetch_add(&j->running[i], 1) != 0) atomic_fetch_add(&j->bad, 1);
    if (j->sleep_per_mille && mix(j->seed * 7919u + (unsigned)i) % 1000 < (unsigned)j->sleep_per_mille)
        usleep(1 + mix(j->seed + (unsigned)i) % 300);
    atomic_fetch_sub(&j->running[i], 1);
    atomic_fetch_add(&j->calls[i], 1);
}

/* Runs `runs` jobs of varying share counts on a pool of nth threads; returns the
 * number of shares that did not run exactly once, or ran wrongly. */
static int run_jobs(int nth, int runs, int max_n, int sleep_per_mille) {
    struct dj_threadpool *pool = threadpool_create(nth);
    if (!pool) return -1;
    struct job *j = calloc(1, sizeof *j);
    int errors = 0;
    for (int r = 0; r < runs; r++) {
        j->id = r + 1;
        j->n = r % 4 == 0 ? nth : (int)(mix((unsigned)r) % (unsigned)(max_n + 1));
        j->sleep_per_mille = sleep_per_mille;
        j->seed = (unsigned)r;
        for (int i = 0; i < MAX_SHARES; i++) atomic_store(&j->calls[i], 0);
        atomic_store(&current_job, j->id);
        if (r % 4 == 0) threadpool_run(pool, share_fn, j);
        else threadpool_run_n(pool, share_fn, j, j->n);
        atomic_store(&current_job, 0); /* a share running after the return would see a wrong job */
        for (int i = 0; i < MAX_SHARES; i++) errors += atomic_load(&j->calls[i]) != (i < j->n ? 1 : 0);
        errors += atomic_load(&j->bad);
        atomic_store(&j->bad, 0);
    }
    threadpool_destroy(pool);
    free(j);
    return errors;
}

/* share 0 waits (up to 10 s) until share 1 has started on another thread */
struct meet {
    atomic_int started1;
    pthread_t t1;
    atomic_int met;
};

static void meet_fn(void *arg, int i, int n) {
    struct meet *m = arg;
    if (i == 1) {
        m->t1 = pthread_self();
        atomic_store(&m->started1, 1);
        return;
    }
    if (i != 0) return;
    const struct timespec ms = {0, 1000000};
    for (int k = 0; k < 10000 && !atomic_load(&m->started1); k++) nanosleep(&ms, NULL);
    atomic_store(&m->met, atomic_load(&m->started1) && !pthread_equal(m->t1, pthread_self()));
}

int main(void) {
    const int n_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int nth = 1; nth <= 4; nth++) {
        struct dj_threadpool *pool = threadpool_create(nth);
        CHECK(pool != NULL);
        CHECK(threadpool_n_threads(pool) == nth);
        threadpool_destroy(pool);
        CHECKF(run_jobs(nth, 20000, 40, 0) == 0, "nth %d: back-to-back jobs", nth);
    }
    /* shares that sleep at random (about 1 in 20), and more threads than cores */
    CHECKF(run_jobs(2, 2000, 40, 50) == 0, "nth 2: sleeping shares");
    CHECKF(run_jobs(3, 2000, MAX_SHARES, 50) == 0, "nth 3: sleeping shares");
    CHECKF(run_jobs(2 * n_cores + 2, 3000, 64, 20) == 0, "nth %d on %d cores: sleeping shares", 2 * n_cores + 2,
           n_cores);
    CHECKF(run_jobs(2 * n_cores + 2, 5000, MAX_SHARES, 0) == 0, "nth %d on %d cores", 2 * n_cores + 2, n_cores);

    /* workers take part: share 0 cannot finish unless another thread runs share 1.
     * Also after the workers have gone to sleep (a pause longer than their spin). */
    for (int nth = 2; nth <= 3; nth++) {
        struct dj_threadpool *pool = threadpool_create(nth);
        for (int k = 0; k < 3; k++) {
            if (k == 2) usleep(20000);
            struct meet m = {0};
            threadpool_run_n(pool, meet_fn, &m, 2);
            CHECKF(atomic_load(&m.met), "nth %d, try %d: share 1 ran on another thread", nth, k);
        }
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
