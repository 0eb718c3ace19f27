/*
 * lookup.c — prompt lookup (spec.h): drafts what followed the longest
 * earlier occurrence of the completion's last tokens in its own prompt and
 * output.  Coding agents echo what they read (file contents, JSON keys, code
 * they edit and write back), so the continuation of an earlier occurrence is
 * often the model's next tokens.
 *
 * Index: 2-gram hash chains (zlib's deflate keeps its matches the same way):
 * head[h] is the newest position i whose 2-gram (tok[i-1], tok[i]) hashes to
 * h, prev[i] the next older one.  Without a 2-gram match the newest earlier
 * occurrence of the last token alone (within 4096 tokens) is the 1-gram
 * fallback.  A draft
 * visits at most SPEC_LOOKUP_CHAIN candidates, newest first, and measures each
 * one's backward match with the end of the sequence (up to
 * SPEC_LOOKUP_NGRAM_MAX tokens).  Cost per draft: O(chain x ngram); per token
 * appended: O(1) amortized.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "spec/spec.h"

enum { SPEC_LOOKUP_CHAIN = 64 };
#define NONE UINT32_MAX

static size_t hash2(dj_token a, dj_token b, size_t n_head) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(x >> 32) & (n_head - 1);
}

void spec_lookup_init(struct spec_lookup *l) { memset(l, 0, sizeof *l); }

void spec_lookup_free(struct spec_lookup *l) {
    if (!l) return;
    free(l->tok);
    free(l->prev);
    free(l->head);
    memset(l, 0, sizeof *l);
}

/* Rebuilds the chains into a table of n_head slots (a power of two). */
static void rehash(struct spec_lookup *l, uint32_t *head, size_t n_head) {
    for (size_t h = 0; h < n_head; h++) head[h] = NONE;
    for (size_t i = 1; i < l->n; i++) {
        const size_t h = hash2(l->tok[i - 1], l->tok[i], n_head);
        l->prev[i] = head[h];
        head[h] = (uint32_t)i;
    }
}

enum dj_status spec_lookup_append(struct spec_lookup *l, const dj_token *tok, size_t n) {
    if (n == 0) return DJ_OK;
    if (l->n + n > (size_t)NONE - 1) return dj_fail(DJ_ERR_INVALID, "prompt lookup: more than 2^32 tokens");
    if (l->n + n > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        while (cap < l->n + n) cap *= 2;
        dj_token *nt = realloc(l->tok, cap * sizeof *nt);
        if (!nt) return dj_fail(DJ_ERR_NOMEM, "prompt lookup: out of memory");
        l->tok = nt;
        uint32_t *np = realloc(l->prev, cap * sizeof *np);
        if (!np) return dj_fail(DJ_ERR_NOMEM, "prompt lookup: out of memory");
        l->prev = np;
        l->cap = cap;
    }
    /* the head table: about 2 slots per token (rebuilt when the sequence doubles) */
    if ((l->n + n) * 2 > l->n_head) {
        size_t n_head = l->n_head ? l->n_head : 512;
        while (n_head < (l->n + n) * 2) n_head *= 2;
        uint32_t *nh = malloc(n_head * sizeof *nh);
        if (!nh) return dj_fail(DJ_ERR_NOMEM, "prompt lookup: out of memory");
        free(l->head);
        l->head = nh;
        l->n_head = n_head;
        rehash(l, l->head, l->n_head);
    }
    for (size_t k = 0; k < n; k++) {
        const size_t i = l->n++;
        l->tok[i] = tok[k];
        l->prev[i] = NONE;
        if (i == 0) continue;
        const size_t h = hash2(l->tok[i - 1], l->tok[i], l->n_head);
        l->prev[i] = l->head[h];
        l->head[h] = (uint32_t)i;
    }
    return DJ_OK;
}

/* How many tokens before and at i equal those at the end (i < n - 1). */
static size_t match_back(const struct spec_lookup *l, size_t i) {
    const size_t end = l->n - 1;
    size_t m = 0;
    while (m < SPEC_LOOKUP_NGRAM_MAX && m <= i && l->tok[i - m] == l->tok[end - m]) m++;
    return m;
}

size_t spec_lookup_draft(const struct spec_lookup *l, dj_token *out, size_t cap, uint32_t *match) {
    *match = 0;
    if (l->n < 2 || cap == 0) return 0;
    const size_t end = l->n - 1;
    size_t best = NONE, best_m = 0;
    /* 2-gram chain: candidates i < end whose 2-gram hashes like the last one */
    size_t visited = 0;
    for (uint32_t i = l->prev[end]; i != NONE && visited < SPEC_LOOKUP_CHAIN; i = l->prev[i], visited++) {
        const size_t m = match_back(l, i);
        if (m >= 2 && m > best_m) {
            best_m = m;
            best = i;
            if (m == SPEC_LOOKUP_NGRAM_MAX) break;
        }
    }
    /* 1-gram: the newest earlier occurrence of the last token */
    if (best == NONE)
        for (size_t i = end; i-- > 0 && end - i <= 4096;)
            if (l->tok[i] == l->tok[end]) {
                best = i;
                best_m = 1;
                break;
            }
    if (best == NONE) return 0;
    size_t n = l->n - 1 - best; /* tokens after the match, up to the end */
    if (n > cap) n = cap;
    memcpy(out, l->tok + best + 1, n * sizeof *out);
    *match = (uint32_t)best_m;
    return n;
}
