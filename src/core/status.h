/*
 * status.h — status codes, the thread-local error message, assertions, logging.
 *
 * Two tiers of error handling (STYLE.md):
 *   - invariants of our own code: DJ_ASSERT, always on, prints file:line, aborts;
 *   - anything that comes from outside (files, arguments, text): a function
 *     returns an enum dj_status and leaves a one-line message naming what and
 *     where in a thread-local buffer, read with dj_last_error().
 * Library code never calls exit().
 */
#ifndef DJ_CORE_STATUS_H
#define DJ_CORE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#include "deja.h"

#if defined(__GNUC__)
#define DJ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define DJ_NORETURN __attribute__((noreturn))
#define DJ_UNUSED __attribute__((unused))
#else
#define DJ_PRINTF(a, b)
#define DJ_NORETURN
#define DJ_UNUSED
#endif

/* Records a formatted message for dj_last_error() and returns st, so that
 * callers can write `return dj_fail(DJ_ERR_FORMAT, "%s: ...", path);`. */
enum dj_status dj_fail(enum dj_status st, const char *fmt, ...) DJ_PRINTF(2, 3);
/* Prepends "prefix: " to the current message (for adding context on the way up). */
void dj_error_prefix(const char *fmt, ...) DJ_PRINTF(1, 2);
void dj_clear_error(void);

DJ_NORETURN void dj_assert_fail(const char *file, int line, const char *expr);
#define DJ_ASSERT(x) ((x) ? (void)0 : dj_assert_fail(__FILE__, __LINE__, #x))

enum dj_log_level { DJ_LOG_DEBUG = 0, DJ_LOG_INFO, DJ_LOG_WARN, DJ_LOG_ERROR };
void dj_log(enum dj_log_level lvl, const char *fmt, ...) DJ_PRINTF(2, 3);
void dj_log_set_level(enum dj_log_level lvl);

#endif
