/*
 * trace.h — reading multi-turn agent traces (../shared/traces/README.md):
 * JSON Lines, one model call per line,
 *
 *   {"session": "tau_airline__0", "turn": 3, "keep": 17012, "text": "…", "response": "…", "n_chars": 18231}
 *
 * and the prompts they describe: prompt k = prompt k-1 [:keep] + text, where
 * keep counts Unicode code points (prompt -1 = "").  n_chars, when present,
 * is checked against the rebuilt prompt.
 *
 * The line parser is a strict little JSON reader (RFC 8259 values, nesting at
 * most 64 deep, string escapes with surrogate pairs; a lone surrogate becomes
 * U+FFFD, one code point, as Python counts it).  It never reads past the
 * line it is given, so any byte string is safe input.  Every failure is
 * DJ_ERR_FORMAT with a message "FILE:LINE: what" (column included for syntax).
 */
#ifndef DJ_ENGINE_TRACE_H
#define DJ_ENGINE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

struct trace_turn {
    char *session;      /* "session", or NULL if absent */
    long long turn;     /* "turn", or -1 */
    long long keep;     /* "keep" (required, >= 0) */
    long long n_chars;  /* "n_chars", or -1 */
    char *text;         /* "text" (required), UTF-8, text_len bytes + NUL */
    size_t text_len;
    char *response;     /* "response": the recorded reply, response_len bytes + NUL; NULL when null or absent */
    size_t response_len;
};

/* Parses one line (len bytes, no newline needed).  where/line_no name it in
 * messages.  On success *out owns its strings (trace_turn_free). */
enum dj_status trace_parse_line(const char *line, size_t len, const char *where, size_t line_no,
                                struct trace_turn *out);
void trace_turn_free(struct trace_turn *t); /* accepts a zeroed struct */

/* Code points in s[0, n) (bytes that are not UTF-8 continuation bytes). */
size_t trace_count_cp(const char *s, size_t n);
/* Byte offset of code point k in s[0, n) (n when k is past the end). */
size_t trace_cp_offset(const char *s, size_t n, size_t k);

/* A trace file being replayed: its lines, and the current prompt. */
struct trace {
    char *path;
    char *data;         /* the whole file, NUL-terminated */
    size_t len, pos;    /* bytes; the next line starts at pos */
    size_t line_no;     /* of the last line read */
    char *session;      /* the first line's "session", or the file name */
    char *prompt;       /* the current prompt, prompt_len bytes + NUL */
    size_t prompt_len, prompt_cap, prompt_cp;
    long long n_chars;  /* the last line's "n_chars" (checked), or -1 when it had none */
    size_t n_turns;     /* turns read so far */
    char *response;     /* the current turn's recorded reply (NULL: unknown), response_len bytes + NUL */
    size_t response_len;
};

/* Reads the whole file.  DJ_ERR_IO with the path and errno text on failure. */
enum dj_status trace_open(const char *path, struct trace **out);
void trace_close(struct trace *t); /* accepts NULL */

/* Advances to the next turn's prompt.  *done = true (and DJ_OK) at the end of
 * the file; otherwise t->prompt / t->prompt_len hold the new prompt. */
enum dj_status trace_next(struct trace *t, bool *done);

#endif
