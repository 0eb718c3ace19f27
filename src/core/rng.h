/*
 * rng.h — a stateless, counter-based random number generator.
 *
 * deja never draws from a stream whose state depends on how many numbers were
 * drawn before (DESIGN.md §3): the draw for output position `pos` of a request
 * is a pure function of (seed, pos).  Grammar skips, speculative verification,
 * retries and batching then reproduce exactly the draws of plain decoding.
 *
 * The generator is SplitMix64 (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", OOPSLA 2014) read as a counter-based one:
 *
 *     key               = mix64(seed)
 *     dj_rng_u64(s, c)  = mix64(key + (c + 1) * GAMMA)     (mod 2^64)
 *     mix64(z)          = z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
 *                         z ^= z >> 27; z *= 0x94d049bb133111eb; z ^ (z >> 31)
 *     GAMMA             = 0x9e3779b97f4a7c15   (2^64 / golden ratio, odd)
 *
 * so dj_rng_u64(s, c) is the c-th output (counting from 0) of the standard
 * SplitMix64 stream whose state starts at mix64(s): seed 0 gives the well-known
 * SplitMix64(0) sequence 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, ...  For a fixed
 * seed the map c → output is a bijection of 2^64 values (GAMMA is odd and mix64
 * is invertible), so positions never repeat a draw; SplitMix64's output passes
 * BigCrush.  Hashing the seed first keeps nearby seeds (0, 1, 2, ...) from giving
 * overlapping, shifted streams.  tests/unit/test_sampler.c pins known answers:
 * the generator must never change silently, or every seeded output changes.
 */
#ifndef DJ_CORE_RNG_H
#define DJ_CORE_RNG_H

#include <stdint.h>

#define DJ_RNG_GAMMA 0x9e3779b97f4a7c15ULL

/* SplitMix64's finalizer (a bijection of uint64_t with full avalanche). */
static inline uint64_t dj_rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* 64 random bits for (seed, counter); see the top of this file. */
static inline uint64_t dj_rng_u64(uint64_t seed, uint64_t counter) {
    return dj_rng_mix64(dj_rng_mix64(seed) + (counter + 1) * DJ_RNG_GAMMA);
}

/* A uniform double in [0, 1): the top 53 bits of dj_rng_u64 times 2^-53
 * (every value is a multiple of 2^-53; 1.0 is never returned). */
static inline double dj_rng_uniform(uint64_t seed, uint64_t counter) {
    return (double)(dj_rng_u64(seed, counter) >> 11) * 0x1p-53;
}

#endif
