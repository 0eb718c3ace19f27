/*
 * bench_rng.h — the benchmarks' random numbers: one xorshift64 stream per program, fixed
 * seed, so every run times the same data (bench_kernels.c, isa_probe.c).
 */
#ifndef DJ_BENCH_RNG_H
#define DJ_BENCH_RNG_H

#include <stdint.h>

static uint64_t rs = 88172645463325252ull;
static inline uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

#endif
