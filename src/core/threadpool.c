/*
 * threadpool.c — see threadpool.h.
 *
 * A job is published by the caller in this order: fn, arg, n_shares,
 * unfinished = n, left = n (the claim counter), then gen + 1 (and a futex wake
 * if a worker sleeps).  Every thread, the caller included, claims shares by
 * fetch_sub on `left`: an old value v > 0 is share n - v.  The caller writes
 * the next job only after `unfinished` reached 0, and a share counts as
 * unfinished until the thread that ran it has returned from fn and failed its
 * next claim, so a thread that claimed a share reads fn/arg/n_shares of the
 * very job it claimed from, whenever it got there.  A
 * late worker that decrements an exhausted counter (v <= 0) claims nothing;
 * the next publish overwrites `left`.  Sequentially consistent atomics
 * throughout: two sleep flags rely on the store-then-load (Dekker) order, and
 * a job is a few atomics, not worth relaxing.
 */
#include "core/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DJ_PAUSE() _mm_pause()
#else
#define DJ_PAUSE() ((void)0)
#endif

/* Waiting (threadpool.h has the measurements behind the numbers).  A waiting
 * thread checks its word between pauses and calls sched_yield every
 * SPIN_YIELD_EVERY pauses: with nothing else runnable that returns at once
 * (codelm decode unchanged), with a compiler or a second engine on the core it
 * hands the core over instead of burning the slice (the same decode under one
 * busy process: ~250 t/s spinning with pauses only, ~300-400 yielding). */
enum {
    THREADPOOL_WORKER_SPIN_US = 100, /* longer than the gaps between runs of a decode step */
    THREADPOOL_CALLER_SPIN_US = 50,  /* longer than a worker's last chunk, unless it was descheduled */
    SPIN_YIELD_EVERY = 8,
    SPIN_CLOCK_EVERY = 64, /* pauses between looks at the clock */
};

struct worker {
    struct dj_threadpool *pool;
    pthread_t thread;
};

struct dj_threadpool {
    int n_threads;
    struct worker *workers; /* n_threads - 1 */
    /* the job; written by the caller only while unfinished == 0 */
    _Atomic(dj_task_fn) fn;
    _Atomic(void *) arg;
    atomic_int n_shares;
    atomic_int left;        /* shares not yet claimed (may go below 0: claims that got nothing) */
    atomic_int unfinished;  /* shares whose fn has not returned; the caller's futex word */
    atomic_uint gen;        /* jobs published so far; the workers' futex word */
    atomic_int n_sleeping;  /* workers sleeping (or about to) on gen */
    atomic_int caller_sleeping;
    atomic_bool stop;
#if !defined(__linux__)
    pthread_mutex_t mu; /* stands in for the futex */
    pthread_cond_t cv;
#endif
};

/* ---- sleeping on a word --------------------------------------------------- */

#if defined(__linux__)
/* Sleeps while *w == v (returns at once if it is not, and may return spuriously). */
static void word_wait(struct dj_threadpool *pool, void *w, int v) {
    (void)pool;
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void word_wake(struct dj_threadpool *pool, void *w) {
    (void)pool;
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void word_wait(struct dj_threadpool *pool, void *w, int v) {
    pthread_mutex_lock(&pool->mu);
    if (atomic_load((atomic_int *)w) == v) pthread_cond_wait(&pool->cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
static void word_wake(struct dj_threadpool *pool, void *w) {
    (void)w;
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}
#endif

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One step of a bounded wait that began at t0: false once budget_us have passed. */
static bool spin_step(unsigned spins, int64_t t0, int64_t budget_us) {
    if (spins % SPIN_YIELD_EVERY == 0) sched_yield();
    else DJ_PAUSE();
    return spins % SPIN_CLOCK_EVERY != 0 || now_ns() - t0 <= budget_us * 1000;
}

/* ---- shares ----------------------------------------------------------------- */

/* Claims and runs shares of the current job until none is left.  The thread's
 * finished shares are subtracted from `unfinished` once, when its claim fails
 * (one contended atomic a share instead of two; a thread that got another
 * share must be waited for anyway). */
static void run_shares(struct dj_threadpool *pool) {
    int done = 0;
    for (;;) {
        const int v = atomic_fetch_sub(&pool->left, 1);
        if (v <= 0) break;
        const int n = atomic_load(&pool->n_shares);
        atomic_load(&pool->fn)(atomic_load(&pool->arg), n - v, n);
        done++;
    }
    if (done && atomic_fetch_sub(&pool->unfinished, done) == done && atomic_load(&pool->caller_sleeping))
        word_wake(pool, &pool->unfinished);
}

static void *worker_main(void *p) {
    struct worker *w = p;
    struct dj_threadpool *pool = w->pool;
    for (;;) {
        /* gen before the claims: a job published after this load changes gen, so it is never missed */
        const unsigned g = atomic_load(&pool->gen);
        if (atomic_load(&pool->stop)) return NULL;
        run_shares(pool);
        /* wait for the next job: spin for the budget, then sleep */
        const int64_t t0 = now_ns();
        for (unsigned spins = 1; atomic_load(&pool->gen) == g; spins++) {
            if (!spin_step(spins, t0, THREADPOOL_WORKER_SPIN_US)) {
                atomic_fetch_add(&pool->n_sleeping, 1);
                while (atomic_load(&pool->gen) == g) word_wait(pool, &pool->gen, (int)g);
                atomic_fetch_sub(&pool->n_sleeping, 1);
                break;
            }
        }
    }
}

struct dj_threadpool *threadpool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    struct dj_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->fn, NULL);
    atomic_init(&pool->arg, NULL);
    atomic_init(&pool->n_shares, 0);
    atomic_init(&pool->left, 0);
    atomic_init(&pool->unfinished, 0);
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->caller_sleeping, 0);
    atomic_init(&pool->stop, false);
#if !defined(__linux__)
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
#endif
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            free(pool);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0) {
                pool->n_threads = i + 1; /* join the ones that started */
                threadpool_destroy(pool);
                return NULL;
            }
        }
    }
    return pool;
}

void threadpool_destroy(struct dj_threadpool *pool) {
    if (!pool) return;
    atomic_store(&pool->stop, true);
    atomic_fetch_add(&pool->gen, 1);
    word_wake(pool, &pool->gen);
    for (int i = 0; i < pool->n_threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
#if !defined(__linux__)
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
#endif
    free(pool->workers);
    free(pool);
}

int threadpool_n_threads(const struct dj_threadpool *pool) { return pool->n_threads; }

void threadpool_run_n(struct dj_threadpool *pool, dj_task_fn fn, void *arg, int n) {
    if (n <= 0) return;
    if (pool->n_threads == 1 || n == 1) {
        for (int i = 0; i < n; i++) fn(arg, i, n);
        return;
    }
    atomic_store(&pool->fn, fn);
    atomic_store(&pool->arg, arg);
    atomic_store(&pool->n_shares, n);
    atomic_store(&pool->unfinished, n);
    atomic_store(&pool->left, n);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->n_sleeping) > 0) word_wake(pool, &pool->gen);
    run_shares(pool);
    /* Shares still running on workers: spin for the budget, then sleep until
     * the last one ends — a descheduled worker needs this core more than we do. */
    const int64_t t0 = now_ns();
    for (unsigned spins = 1; atomic_load(&pool->unfinished) != 0; spins++) {
        if (!spin_step(spins, t0, THREADPOOL_CALLER_SPIN_US)) {
            atomic_store(&pool->caller_sleeping, 1);
            for (int v; (v = atomic_load(&pool->unfinished)) != 0;) word_wait(pool, &pool->unfinished, v);
            atomic_store(&pool->caller_sleeping, 0);
            break;
        }
    }
}

void threadpool_run(struct dj_threadpool *pool, dj_task_fn fn, void *arg) {
    threadpool_run_n(pool, fn, arg, pool->n_threads);
}
