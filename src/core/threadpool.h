/*
 * threadpool.h — a persistent pool of worker threads for the forward pass.
 *
 * threadpool_run_n(pool, fn, arg, n) calls fn(arg, i, n) exactly once for
 * every share i in [0, n) and returns when all have finished.  The shares are
 * handed out in increasing order from one atomic counter to whichever thread
 * asks next — the caller takes part — so i names a piece of work, not a
 * thread: a thread that is descheduled (another process took its core) simply
 * takes fewer shares, and the others do the rest.  Two shares may run at the
 * same time on different threads; one share never runs twice, and a thread
 * runs its shares one after the other, so scratch indexed by a share of
 * threadpool_run (i < nth) is used by one thread at a time.
 *
 * threadpool_run(pool, fn, arg) is threadpool_run_n with n = nth, the thread
 * count.  Work is split by the callee from (i, n) — a matrix product gives
 * each share a fixed range of output rows, never a part of a reduction, so
 * results do not depend on n, nth, or which thread ran which share
 * (DESIGN.md §3).
 *
 * Waiting is bounded, then sleeps.  The budgets come from the gaps between
 * runs (the old pool, -t 2; docs/BENCHMARKS.md): codelm decode runs 41 jobs
 * a token of mostly 2-64 us (the output matrix 0.5-1 ms), 99.5% of the gaps
 * between them under 8 us, the longest 64-128 us; 1.1B q4_0 decode: jobs of
 * mostly 0.13-2 ms, 99.5% of the gaps under 64 us, the longest 64-128 us;
 * prefill gaps reach ms, where a wake is cheap next to the job.  An idle
 * worker spins on the job generation for up to 100 us, then sleeps on a
 * futex; the caller, once no share is left to take, spins on the count of
 * unfinished shares for up to 50 us, then sleeps on a futex until the last
 * share is done — so it never spins on a worker that the scheduler put aside,
 * it gives up the core that worker needs.  Spinning calls sched_yield every 8 pauses: free when nothing
 * else is runnable, and it hands the core to a compiler or test run when one
 * is (codelm -t 2 decode under one busy process: ~250 t/s with pauses only,
 * ~300-400 yielding; docs/BENCHMARKS.md).  Wakes cost a syscall only when
 * someone sleeps.  One run at a time: the pool is driven by one caller thread.
 */
#ifndef DJ_CORE_THREADPOOL_H
#define DJ_CORE_THREADPOOL_H

typedef void (*dj_task_fn)(void *arg, int ith, int nth);

struct dj_threadpool;

/* n_threads >= 1 (1 = no workers, everything runs on the caller).  NULL on failure. */
struct dj_threadpool *threadpool_create(int n_threads);
void threadpool_destroy(struct dj_threadpool *pool); /* accepts NULL */
int threadpool_n_threads(const struct dj_threadpool *pool);
/* fn(arg, i, n) for every i in [0, n), each exactly once; n <= 0 runs nothing. */
void threadpool_run_n(struct dj_threadpool *pool, dj_task_fn fn, void *arg, int n);
/* threadpool_run_n with n = threadpool_n_threads(pool). */
void threadpool_run(struct dj_threadpool *pool, dj_task_fn fn, void *arg);

/* Rows [*r0, *r1) of n for share ith of nth, in blocks of `align` rows. */
static inline void threadpool_split(long n, long align, int ith, int nth, long *r0, long *r1) {
    long blocks = (n + align - 1) / align;
    long per = blocks / nth, extra = blocks % nth;
    long b0 = ith * per + (ith < extra ? ith : extra);
    long b1 = b0 + per + (ith < extra ? 1 : 0);
    *r0 = b0 * align < n ? b0 * align : n;
    *r1 = b1 * align < n ? b1 * align : n;
}

#endif
