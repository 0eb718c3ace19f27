/* rng.h — counter-based random numbers (DESIGN.md §3).  TEMPORARY: replaced by the sampler work. */
#ifndef DJ_CORE_RNG_H
#define DJ_CORE_RNG_H
#include <stdint.h>
static inline uint64_t dj_rng_u64(uint64_t seed, uint64_t counter) {
    uint64_t z = seed ^ (counter * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double dj_rng_uniform(uint64_t seed, uint64_t counter) {
    return (double)(dj_rng_u64(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}
#endif
