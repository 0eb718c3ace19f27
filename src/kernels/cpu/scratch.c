/*
 * scratch.c — per-thread scratch memory for kernels that repack their
 * operands (see dj_kernel_scratch in cpu_internal.h).
 *
 * Each thread owns one 64-byte-aligned buffer that only grows; a thread
 * pool's workers keep theirs for the life of the thread (freed by the key's
 * destructor when the thread exits), so a matmul allocates only the first
 * time it sees a larger shape.  The kernel API has no scratch argument, and
 * a repacked operand never outlives the call that made it, so a buffer per
 * thread is all the state there is.
 *
 * Failure is not fatal: the kernel API returns void, so when memory runs out
 * this returns NULL and the caller takes a path that needs no scratch and
 * computes the same bits (every matmul element equals the table's dot of its
 * pair, kernels.h).  dj_kernel_scratch_fail_for_test makes every call fail so
 * that tests can check those paths on machines with plenty of memory.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

struct scratch {
    void *p;
    size_t n;
};

static pthread_key_t key;
static bool key_ok;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int fail_for_test;

static void scratch_free(void *v) {
    struct scratch *s = v;
    if (s) free(s->p);
    free(s);
}

static void make_key(void) { key_ok = pthread_key_create(&key, scratch_free) == 0; }

void dj_kernel_scratch_fail_for_test(int fail) { atomic_store(&fail_for_test, fail != 0); }

void *dj_kernel_scratch(size_t bytes) {
    if (atomic_load_explicit(&fail_for_test, memory_order_relaxed)) return NULL;
    pthread_once(&once, make_key);
    if (!key_ok) return NULL;
    struct scratch *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        if (pthread_setspecific(key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->n < bytes) {
        /* free first: the old contents are never needed, and the peak stays one buffer */
        free(s->p);
        s->p = NULL;
        s->n = 0;
        if (bytes > SIZE_MAX - 4095) return NULL;
        const size_t n = (bytes + 4095) & ~(size_t)4095;
        s->p = aligned_alloc(64, n);
        if (!s->p) return NULL;
        s->n = n;
    }
    return s->p;
}
