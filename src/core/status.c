/*
 * status.c — the thread-local last-error buffer, assertions and stderr logging.
 */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DJ_ERRBUF 1024

static _Thread_local char errbuf[DJ_ERRBUF];
static enum dj_log_level log_level = DJ_LOG_INFO;

enum dj_status dj_fail(enum dj_status st, const char *fmt, ...) {
    /* formatted aside first: an argument may be dj_last_error() itself (a message wrapped with a
     * prefix), and vsnprintf's output must not overlap its input */
    char msg[DJ_ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(errbuf, msg, sizeof errbuf);
    return st;
}

void dj_error_prefix(const char *fmt, ...) {
    char prefix[DJ_ERRBUF], old[DJ_ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errbuf, sizeof old);
    /* Both parts bounded so the result always fits (no silent truncation warning). */
    snprintf(errbuf, sizeof errbuf, "%.400s: %.600s", prefix, old);
}

void dj_clear_error(void) { errbuf[0] = '\0'; }

const char *dj_last_error(void) { return errbuf; }

const char *dj_status_str(enum dj_status st) {
    switch (st) {
    case DJ_OK: return "ok";
    case DJ_ERR_IO: return "I/O error";
    case DJ_ERR_FORMAT: return "bad format";
    case DJ_ERR_NOT_FOUND: return "not found";
    case DJ_ERR_TYPE: return "wrong type";
    case DJ_ERR_NOMEM: return "out of memory";
    case DJ_ERR_INVALID: return "invalid argument";
    case DJ_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

void dj_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "deja: assertion failed at %s:%d: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

void dj_log_set_level(enum dj_log_level lvl) { log_level = lvl; }

void dj_log(enum dj_log_level lvl, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (lvl < log_level) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "deja: %s: ", names[lvl]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
