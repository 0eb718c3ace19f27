/*
 * checked.h — overflow-checked size arithmetic.  Every length that comes from
 * a file goes through these before it is used to index or allocate.
 * Each returns true when the result overflowed (and leaves *out unspecified).
 */
#ifndef DJ_CORE_CHECKED_H
#define DJ_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool dj_mul_overflow(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline bool dj_add_overflow(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out); }
static inline bool dj_mul64_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }

/* Round x up to a multiple of align (align > 0); true on overflow. */
static inline bool dj_align_up(size_t x, size_t align, size_t *out) {
    size_t r = x % align;
    if (r == 0) { *out = x; return false; }
    return dj_add_overflow(x, align - r, out);
}

#endif
