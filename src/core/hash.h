/*
 * hash.h — FNV-1a 64-bit, the one hash deja uses for logits hashes, id hashes
 * and (later) KV block chain hashes.  Platform-independent: callers feed bytes
 * in a defined order (little-endian for integers and float bits).
 */
#ifndef DJ_CORE_HASH_H
#define DJ_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DJ_FNV_OFFSET 0xcbf29ce484222325ULL
#define DJ_FNV_PRIME 0x100000001b3ULL

static inline uint64_t dj_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= DJ_FNV_PRIME;
    }
    return h;
}

/* Feeds v as 4 little-endian bytes, whatever the host byte order. */
static inline uint64_t dj_fnv1a_u32(uint64_t h, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= DJ_FNV_PRIME;
    }
    return h;
}

#endif
