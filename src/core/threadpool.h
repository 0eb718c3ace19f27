/*
 * threadpool.h — a persistent pool of worker threads for the forward pass.
 *
 * threadpool_run(pool, fn, arg) calls fn(arg, ith, nth) once on each of the
 * nth threads (the caller is thread 0) and returns when all have finished.
 * Work is split by the callee from (ith, nth) — e.g. a matrix product gives
 * each thread a fixed range of output rows, never a part of a reduction, so
 * results do not depend on nth (DESIGN.md §3).
 *
 * Workers spin briefly on a generation counter (a decode step issues hundreds
 * of small jobs; waking a sleeping thread costs tens of microseconds), then
 * sleep on a condition variable.  One run at a time: the pool is driven by
 * one caller thread.
 */
#ifndef DJ_CORE_THREADPOOL_H
#define DJ_CORE_THREADPOOL_H

typedef void (*dj_task_fn)(void *arg, int ith, int nth);

struct dj_threadpool;

/* n_threads >= 1 (1 = no workers, everything runs on the caller).  NULL on failure. */
struct dj_threadpool *threadpool_create(int n_threads);
void threadpool_destroy(struct dj_threadpool *pool); /* accepts NULL */
int threadpool_n_threads(const struct dj_threadpool *pool);
void threadpool_run(struct dj_threadpool *pool, dj_task_fn fn, void *arg);

/* Rows [*r0, *r1) of n for thread ith of nth, in blocks of `align` rows. */
static inline void threadpool_split(long n, long align, int ith, int nth, long *r0, long *r1) {
    long blocks = (n + align - 1) / align;
    long per = blocks / nth, extra = blocks % nth;
    long b0 = ith * per + (ith < extra ? ith : extra);
    long b1 = b0 + per + (ith < extra ? 1 : 0);
    *r0 = b0 * align < n ? b0 * align : n;
    *r1 = b1 * align < n ? b1 * align : n;
}

#endif
