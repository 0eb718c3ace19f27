/*
 * stop.h — stop strings over streamed text: a generation stops at the first
 * occurrence of any of several strings, matched across token boundaries, and
 * the stop string itself (and anything after it) is never emitted.
 *
 *   text so far:  ...emitted......|held|      held = the longest tail that is
 *                                             a proper prefix of some stop string
 *
 * stop_feed appends a piece (whole UTF-8 characters, as the streaming
 * detokenizer gives them) and returns the bytes that can no longer be part
 * of a stop string; those never come back.  A piece may complete a match: the
 * bytes before the match are returned and the matcher reports the hit.
 * Held bytes start at a character boundary whenever the stop strings start
 * with a whole character, so emitted text never splits a character.
 * Owns copies of the strings.  Not thread-safe (one per completion).
 */
#ifndef DJ_ENGINE_STOP_H
#define DJ_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "deja.h"

struct dj_stop {
    char **str;      /* n_str stop strings (non-empty) */
    size_t *len;
    size_t n_str;
    size_t max_len;
    char *buf;       /* held bytes, then room for the emitted output of one call */
    size_t n_held, cap;
    bool hit;        /* a stop string matched; later feeds return nothing */
    size_t which;    /* index of the string that matched */
};

/* Copies n strings; empty strings are ignored.  DJ_ERR_NOMEM on allocation
 * failure (s left empty, stop_free safe). */
enum dj_status stop_init(struct dj_stop *s, const char *const *strs, size_t n);
void stop_free(struct dj_stop *s);

/* Appends piece[0..n); *out / *n_out: the bytes now safe to emit (valid until
 * the next call).  Returns true when a stop string completed (then *out holds
 * the text before it; later calls return true and nothing).  Never fails: if
 * memory runs out, the text is emitted unheld (a stop string spanning that
 * piece could then be missed — the only degradation). */
bool stop_feed(struct dj_stop *s, const char *piece, size_t n, const char **out, size_t *n_out);
/* The held bytes at the end of the generation (no stop matched): emitted. */
const char *stop_flush(struct dj_stop *s, size_t *n_out);

#endif
