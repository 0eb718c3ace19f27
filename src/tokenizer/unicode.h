/*
 * unicode.h — the little Unicode the tokenizers need (private to src/tokenizer).
 *
 *   - code point classes (letter, number, punctuation, ...) and White_Space,
 *     from the generated range table in unicode_data.c (Unicode 14.0);
 *   - UTF-8 decoding in two flavours: strict (RFC 3629, used to decide whether
 *     a text can be matched as is) and lenient, which reproduces llama.cpp's
 *     unicode_cpt_from_utf8 exactly (overlong forms and surrogates decode,
 *     anything else invalid is one byte → U+FFFD), because byte-level BPE
 *     re-encodes the text from those code points before merging;
 *   - the GPT-2 byte ↔ code point map of byte-level BPE vocabularies.
 *
 * Nothing here allocates.
 */
#ifndef DJ_TOKENIZER_UNICODE_H
#define DJ_TOKENIZER_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Classes (low 3 bits of the flags) and the White_Space bit. */
enum {
    UCLASS_UNDEF = 0, /* Cn: unassigned */
    UCLASS_N = 1,     /* Nd Nl No */
    UCLASS_L = 2,     /* Lu Ll Lt Lm Lo */
    UCLASS_Z = 3,     /* Zs Zl Zp */
    UCLASS_M = 4,     /* Mn Mc Me */
    UCLASS_P = 5,     /* Pc Pd Ps Pe Pi Pf Po */
    UCLASS_S = 6,     /* Sm Sc Sk So */
    UCLASS_C = 7,     /* Cc Cf Co Cs */
};
#define UCLASS_MASK 7u
#define UFLAG_SPACE 8u

#define UNICODE_MAX 0x10FFFFu
#define UNICODE_REPLACEMENT 0xFFFDu

extern const uint32_t unicode_ranges[]; /* (first << 8) | flags, sorted */
extern const size_t unicode_n_ranges;
extern const uint8_t unicode_ascii_flags[128];

/* Flags of a code point (0 = unassigned for anything past U+10FFFF). */
uint8_t unicode_flags_slow(uint32_t cp);
static inline uint8_t unicode_flags(uint32_t cp) {
    return cp < 128 ? unicode_ascii_flags[cp] : unicode_flags_slow(cp);
}
static inline bool unicode_is_letter(uint32_t cp) { return (unicode_flags(cp) & UCLASS_MASK) == UCLASS_L; }
static inline bool unicode_is_number(uint32_t cp) { return (unicode_flags(cp) & UCLASS_MASK) == UCLASS_N; }
static inline bool unicode_is_space(uint32_t cp) { return (unicode_flags(cp) & UFLAG_SPACE) != 0; }

/* Length of a UTF-8 sequence from its first byte, as llama.cpp's
 * unicode_len_utf8 computes it (high nibble: 0-B → 1, C-D → 2, E → 3, F → 4). */
static inline size_t utf8_len_from_lead(unsigned char c) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

/* Lenient decode of the sequence at s[0..n) (n >= 1), as llama.cpp: returns
 * the code point and its length in *len; an invalid sequence is one byte that
 * decodes to U+FFFD.  Overlong forms and surrogates decode to their value;
 * values past U+10FFFF are invalid (llama.cpp would throw on re-encoding). */
uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *len);

/* Strict decode (RFC 3629): returns false for overlong forms, surrogates,
 * values past U+10FFFF, bad or missing continuation bytes. */
bool utf8_decode_strict(const unsigned char *s, size_t n, uint32_t *cp, size_t *len);

/* True if all of s[0..n) is strictly valid UTF-8. */
bool utf8_valid(const char *s, size_t n);

/* Writes the UTF-8 form of cp (<= 0x10FFFF; surrogates are encoded as their
 * 3-byte form, like llama.cpp's unicode_cpt_to_utf8) into out[0..4); returns
 * its length. */
size_t utf8_encode(uint32_t cp, char *out);

/* GPT-2 byte-level map: byte b ↔ a printable code point (b itself for
 * '!'..'~', '¡'..'¬', '®'..'ÿ'; 256 + n for the n-th other byte). */
uint32_t gpt2_byte_to_cp(uint8_t b);
/* The byte a code point stands for, or -1 if it is not one of the 256. */
int gpt2_cp_to_byte(uint32_t cp);

#endif
