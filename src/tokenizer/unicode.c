/*
 * unicode.c — code point classes, UTF-8 decoding (strict and llama.cpp-lenient)
 * and the GPT-2 byte map.  See unicode.h for the contracts.
 *
 * unicode_flags() answers ASCII from a 128-entry table and everything else by
 * binary search over the ~2,200 ranges of unicode_data.c (12 probes); code
 * text is almost all ASCII, so the search is rarely reached.
 */
#include "tokenizer/unicode.h"

#include <string.h>

/* Flags of U+0000..U+007F (the first entries of unicode_ranges, unrolled). */
const uint8_t unicode_ascii_flags[128] = {
    7,  7, 7, 7, 7, 7, 7, 7, 7, 15, 15, 15, 15, 15, 7, 7, /* \t..\r are Cc + White_Space */
    7,  7, 7, 7, 7, 7, 7, 7, 7, 7,  7,  7,  7,  7,  7, 7, /*  */
    11, 5, 5, 5, 6, 5, 5, 5, 5, 5,  5,  6,  5,  5,  5, 5, /* ' ' is Zs + White_Space */
    1,  1, 1, 1, 1, 1, 1, 1, 1, 1,  5,  5,  6,  6,  6, 5, /*  */
    5,  2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  2,  2,  2,  2, 2, /*  */
    2,  2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  5,  5,  5,  6, 5, /*  */
    6,  2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  2,  2,  2,  2, 2, /*  */
    2,  2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  5,  6,  5,  6, 7, /*  */
};

uint8_t unicode_flags_slow(uint32_t cp) {
    if (cp > UNICODE_MAX) return UCLASS_UNDEF;
    /* last entry whose first code point is <= cp (entry 0 starts at 0) */
    size_t lo = 0, hi = unicode_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((unicode_ranges[mid] >> 8) <= cp) lo = mid;
        else hi = mid;
    }
    return (uint8_t)(unicode_ranges[lo] & 0xffu);
}

static inline bool is_cont(unsigned char c) { return (c & 0xc0) == 0x80; }

uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *len) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if ((c & 0x40) == 0) goto invalid; /* a continuation byte */
    if ((c & 0x20) == 0) {
        if (n < 2 || !is_cont(s[1])) goto invalid;
        *len = 2;
        return ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
    }
    if ((c & 0x10) == 0) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) goto invalid;
        *len = 3;
        return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    }
    if ((c & 0x08) == 0) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) goto invalid;
        uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
                      ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
        if (cp > UNICODE_MAX) goto invalid;
        *len = 4;
        return cp;
    }
invalid:
    *len = 1;
    return UNICODE_REPLACEMENT;
}

bool utf8_decode_strict(const unsigned char *s, size_t n, uint32_t *cp, size_t *len) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        *len = 1;
        return true;
    }
    if (c < 0xc2 || c > 0xf4) return false; /* continuation, overlong 2-byte lead, or > U+10FFFF */
    if (c < 0xe0) {
        if (n < 2 || !is_cont(s[1])) return false;
        *cp = ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
        *len = 2;
        return true;
    }
    if (c < 0xf0) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return false;
        uint32_t v = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        if (v < 0x800 || (v >= 0xd800 && v <= 0xdfff)) return false;
        *cp = v;
        *len = 3;
        return true;
    }
    if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return false;
    uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) | ((uint32_t)(s[2] & 0x3f) << 6) |
                 (s[3] & 0x3f);
    if (v < 0x10000 || v > UNICODE_MAX) return false;
    *cp = v;
    *len = 4;
    return true;
}

bool utf8_valid(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len;
        if (!utf8_decode_strict(s + i, n - i, &cp, &len)) return false;
        i += len;
    }
    return true;
}

size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static inline bool gpt2_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t gpt2_byte_to_cp(uint8_t b) {
    if (gpt2_is_self(b)) return b;
    /* the bytes that are not printable take 256, 257, ... in byte order */
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!gpt2_is_self(c)) n++;
    return 256 + n;
}

int gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256) return gpt2_is_self(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    for (unsigned c = 0; c < 256; c++) {
        if (gpt2_is_self(c)) continue;
        if (n == 0) return (int)c;
        n--;
    }
    return -1;
}
