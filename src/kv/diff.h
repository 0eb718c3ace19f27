/*
 * diff.h — structural diff between a session's previous and current token
 * sequences (spec §1.4): KEEP / INSERT / DELETE / REPLACE spans.  Knows
 * nothing of models; the engine decides what a span means for the KV cache.
 *
 * A diff is a list of spans that walks both sequences from start to end:
 *
 *   prev:  [ KEEP ][REPLACE][DELETE][ KEEP   ][INSERT]
 *   curr:  [ KEEP ][REPLACE]        [ KEEP   ][INSERT][INSERT…]
 *
 *   op       prev tokens              curr tokens              meaning
 *   KEEP     [prev_start, +length)    [curr_start, +length)    equal tokens
 *   REPLACE  [prev_start, +length)    [curr_start, +length)    different tokens, same count
 *   DELETE   [prev_start, +length)    none (curr_start = cursor) dropped from prev
 *   INSERT   none (prev_start = cursor) [curr_start, +length)  new in curr
 *
 * Invariants (diff_validate checks them): spans are in order and contiguous
 * (each starts at the prev and curr cursors the previous one left), cover
 * prev[0, n_prev) and curr[0, n_curr) exactly, have length > 0, and KEEP
 * spans hold equal tokens.  Normal form: no two adjacent spans have the same
 * op, and the spans between two KEEPs are REPLACE, then DELETE or INSERT (at
 * most one of each, in that order).  Applying the spans to prev (copy KEEP
 * from prev, take REPLACE/INSERT from curr, drop DELETE) gives curr.
 *
 * Exactness (DESIGN.md §1): only the KEEP span that starts at 0 (the longest
 * common prefix, diff_common_prefix) may reuse K/V in the exact tier; KEEP
 * spans after the first edit are reusable only in Tier 2 (approx mode).
 */
#ifndef DJ_KV_DIFF_H
#define DJ_KV_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "deja.h"

enum diff_op { DIFF_KEEP, DIFF_INSERT, DIFF_DELETE, DIFF_REPLACE };

struct diff_span {
    enum diff_op op;
    size_t prev_start, curr_start, length;
};

/* Which path diff_compute took (statistics and tests). */
enum diff_path {
    DIFF_PATH_EQUAL,         /* prev == curr */
    DIFF_PATH_APPEND,        /* curr = prev + new tokens */
    DIFF_PATH_TRUNCATE,      /* curr = a prefix of prev */
    DIFF_PATH_PREFIX_APPEND, /* curr = prev[:p] + new tokens, prev's dropped tail short */
    DIFF_PATH_SPLICE,        /* one insertion or one deletion between a common prefix and suffix */
    DIFF_PATH_BLOCK,         /* block-level matching + token-level refinement */
};

struct diff_result {
    struct diff_span *spans; /* n_spans, owned: free with diff_result_free */
    size_t n_spans;
    size_t n_keep, n_replace, n_delete, n_insert; /* tokens per op */
    size_t common_prefix;    /* length of the leading KEEP span (0 if none) */
    enum diff_path path;
    uint64_t work;           /* token comparisons + hash steps + DP cells: the cost
                                the complexity bound is about (see diff.c) */
};

/* Diffs prev[0, n_prev) against curr[0, n_curr) with blocks of block_size
 * tokens (> 0; the configured LLAMA_OPT_BLOCK_SIZE).  On success fills *out
 * (release with diff_result_free); on failure (DJ_ERR_NOMEM, or DJ_ERR_INVALID
 * for block_size 0) leaves *out untouched.  prev/curr may be NULL when their
 * length is 0. */
enum dj_status diff_compute(const dj_token *prev, size_t n_prev, const dj_token *curr, size_t n_curr,
                            size_t block_size, struct diff_result *out);

/* Releases r's spans and zeroes it; accepts a zeroed result. */
void diff_result_free(struct diff_result *r);

/* Length of the longest common prefix: what the exact tier reuses. */
size_t diff_common_prefix(const dj_token *prev, size_t n_prev, const dj_token *curr, size_t n_curr);

/* Checks r against every invariant above (including the normal form and the
 * per-op totals); DJ_OK, or DJ_ERR_INVALID naming the first bad span. */
enum dj_status diff_validate(const struct diff_result *r, const dj_token *prev, size_t n_prev, const dj_token *curr,
                             size_t n_curr);

const char *diff_op_name(enum diff_op op);

#endif
