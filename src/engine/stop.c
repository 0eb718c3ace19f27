/*
 * stop.c — see stop.h.  The held tail is at most max_len - 1 bytes, so a feed
 * costs O((held + n) * total stop bytes) in the worst case: stop strings are
 * short and few (the HTTP layer caps them), pieces are a token's text.
 */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

enum dj_status stop_init(struct dj_stop *s, const char *const *strs, size_t n) {
    memset(s, 0, sizeof *s);
    if (n == 0) return DJ_OK;
    s->str = calloc(n, sizeof *s->str);
    s->len = calloc(n, sizeof *s->len);
    if (!s->str || !s->len) goto oom;
    for (size_t i = 0; i < n; i++) {
        const size_t l = strs[i] ? strlen(strs[i]) : 0;
        if (l == 0) continue;
        if (!(s->str[s->n_str] = malloc(l + 1))) goto oom;
        memcpy(s->str[s->n_str], strs[i], l + 1);
        s->len[s->n_str++] = l;
        if (l > s->max_len) s->max_len = l;
    }
    return DJ_OK;
oom:
    stop_free(s);
    return dj_fail(DJ_ERR_NOMEM, "out of memory copying %zu stop strings", n);
}

void stop_free(struct dj_stop *s) {
    if (!s) return;
    if (s->str)
        for (size_t i = 0; i < s->n_str; i++) free(s->str[i]);
    free(s->str);
    free(s->len);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* Is text[0..n) a proper prefix of some stop string? */
static bool is_prefix(const struct dj_stop *s, const char *text, size_t n) {
    for (size_t i = 0; i < s->n_str; i++)
        if (n < s->len[i] && memcmp(s->str[i], text, n) == 0) return true;
    return false;
}

bool stop_feed(struct dj_stop *s, const char *piece, size_t n, const char **out, size_t *n_out) {
    *out = piece;
    *n_out = 0;
    if (s->hit) return true;
    if (s->n_str == 0) {
        *n_out = n;
        return false;
    }
    /* text = held + piece, in buf */
    const size_t total = s->n_held + n;
    if (total > s->cap) {
        size_t cap = total * 2 + 64;
        char *nb = realloc(s->buf, cap);
        if (!nb) { /* emit the piece unmatched; the held bytes stay held */
            *n_out = n;
            return false;
        }
        s->buf = nb;
        s->cap = cap;
    }
    if (n) memcpy(s->buf + s->n_held, piece, n);
    /* the first position where a stop string occurs completely */
    size_t first = total, which = 0;
    for (size_t i = 0; i < s->n_str; i++) {
        const size_t l = s->len[i];
        for (size_t p = 0; p + l <= total && p < first; p++)
            if (memcmp(s->buf + p, s->str[i], l) == 0) {
                first = p;
                which = i;
                break;
            }
    }
    *out = s->buf;
    if (first < total) {
        s->hit = true;
        s->which = which;
        *n_out = first;
        s->n_held = 0;
        return true;
    }
    /* hold the longest tail that could still become a stop string */
    size_t keep = total < s->max_len ? total : s->max_len - 1;
    while (keep > 0 && !is_prefix(s, s->buf + total - keep, keep)) keep--;
    *n_out = total - keep;
    /* The output is buf[0..total-keep), the tail must start the next call's
     * text: copy the output after the text, then move the tail to the front. */
    if (keep) {
        if (s->cap < total + (total - keep)) {
            size_t cap = (total + (total - keep)) * 2 + 64;
            char *nb = realloc(s->buf, cap);
            if (!nb) { /* cannot keep both: emit everything (a stop may be missed only under OOM) */
                *out = s->buf;
                *n_out = total;
                s->n_held = 0;
                return false;
            }
            s->buf = nb;
            s->cap = cap;
        }
        memcpy(s->buf + total, s->buf, total - keep); /* output copy after the text */
        memmove(s->buf, s->buf + total - keep, keep);  /* held tail to the front */
        *out = s->buf + total;
        s->n_held = keep;
        return false;
    }
    s->n_held = 0;
    return false;
}

const char *stop_flush(struct dj_stop *s, size_t *n_out) {
    *n_out = s->hit ? 0 : s->n_held;
    s->n_held = 0;
    return s->buf ? s->buf : "";
}
