/*
 * threadpool.c — see threadpool.h.  Synchronization: the caller publishes a
 * job (fn, arg) and bumps `generation`; each worker runs its share and
 * increments `n_done`; the caller runs share 0 and waits until n_done equals
 * the number of workers.  Sequentially consistent atomics throughout: the
 * job is tiny and correctness beats shaving fences.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DJ_PAUSE() _mm_pause()
#else
#define DJ_PAUSE() ((void)0)
#endif

enum { SPIN_ITERS = 20000 };

struct worker {
    struct dj_threadpool *pool;
    pthread_t thread;
    int ith;
};

struct dj_threadpool {
    int n_threads;
    struct worker *workers; /* n_threads - 1 */
    dj_task_fn fn;
    void *arg;
    atomic_uint generation;
    atomic_int n_done;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p) {
    struct worker *w = p;
    struct dj_threadpool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop)) {
            if (++spins < SPIN_ITERS) {
                if (spins % 64 == 0) sched_yield(); /* let an oversubscribed core run the caller */
                else DJ_PAUSE();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_add(&pool->n_done, 1);
    }
}

struct dj_threadpool *threadpool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    struct dj_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->stop, false);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            free(pool);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].ith = i + 1;
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
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->workers);
    free(pool);
}

int threadpool_n_threads(const struct dj_threadpool *pool) { return pool->n_threads; }

void threadpool_run(struct dj_threadpool *pool, dj_task_fn fn, void *arg) {
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->n_done, 0);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n_threads);
    /* Spin briefly, then yield: with more threads than free cores a worker
     * may be descheduled, and spinning would only delay it. */
    for (int spins = 0; atomic_load(&pool->n_done) != pool->n_threads - 1; spins++) {
        if (spins < 2000) DJ_PAUSE();
        else sched_yield();
    }
}
