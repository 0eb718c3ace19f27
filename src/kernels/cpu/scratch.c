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
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/status.h"
#include "kernels/cpu/cpu_internal.h"

struct scratch {
    void *p;
    size_t n;
};

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
    struct scratch *s = v;
    if (s) free(s->p);
    free(s);
}

static void make_key(void) { DJ_ASSERT(pthread_key_create(&key, scratch_free) == 0); }

void *dj_kernel_scratch(size_t bytes) {
    pthread_once(&once, make_key);
    struct scratch *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof *s);
        DJ_ASSERT(s != NULL);
        DJ_ASSERT(pthread_setspecific(key, s) == 0);
    }
    if (s->n < bytes) {
        free(s->p);
        const size_t n = (bytes + 4095) & ~(size_t)4095;
        s->p = aligned_alloc(64, n);
        DJ_ASSERT(s->p != NULL);
        s->n = n;
    }
    return s->p;
}
