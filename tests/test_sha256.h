/*
 * test_sha256.h — SHA-256 (FIPS 180-4) for tests that compare files with
 * hashes of files made by another program (sha256sum's hex digest).  Small and
 * slow (about 200 MB/s), which is plenty for test files; test_quantize_types
 * checks it against the FIPS 180-2 example vectors before trusting it.
 */
#ifndef DJ_TEST_SHA256_H
#define DJ_TEST_SHA256_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct test_sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    size_t n_buf;
    uint64_t n_bytes;
};

static inline uint32_t test_sha256_ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline void test_sha256_block(uint32_t h[8], const uint8_t p[64]) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    };
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = test_sha256_ror(w[i - 15], 7) ^ test_sha256_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = test_sha256_ror(w[i - 2], 17) ^ test_sha256_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (test_sha256_ror(e, 6) ^ test_sha256_ror(e, 11) ^ test_sha256_ror(e, 25)) +
                      ((e & f) ^ (~e & g)) + k[i] + w[i];
        uint32_t t2 = (test_sha256_ror(a, 2) ^ test_sha256_ror(a, 13) ^ test_sha256_ror(a, 22)) +
                      ((a & b) ^ (a & c) ^ (b & c));
        hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

static inline void test_sha256_init(struct test_sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->n_buf = 0;
    s->n_bytes = 0;
}

static inline void test_sha256_update(struct test_sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->n_bytes += n;
    while (n > 0) {
        size_t take = 64 - s->n_buf < n ? 64 - s->n_buf : n;
        memcpy(s->buf + s->n_buf, p, take);
        s->n_buf += take, p += take, n -= take;
        if (s->n_buf == 64) {
            test_sha256_block(s->h, s->buf);
            s->n_buf = 0;
        }
    }
}

/* The digest as 64 lowercase hex digits and a NUL. */
static inline void test_sha256_hex(struct test_sha256 *s, char hex[65]) {
    const uint64_t bits = s->n_bytes * 8;
    const uint8_t one = 0x80, zero = 0;
    test_sha256_update(s, &one, 1);
    while (s->n_buf != 56) test_sha256_update(s, &zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    test_sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

/* sha256 of a whole file into hex; false if it cannot be read. */
static inline bool test_sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    struct test_sha256 s;
    test_sha256_init(&s);
    static uint8_t buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) test_sha256_update(&s, buf, got);
    const bool ok = !ferror(f);
    fclose(f);
    if (ok) test_sha256_hex(&s, hex);
    return ok;
}

#endif
