/*
 * jinja.h — a Jinja-subset interpreter for chat templates, rendering as
 * Hugging Face transformers' apply_chat_template does (an
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols
 * and the {% generation %} tag; transformers' tojson; raise_exception;
 * strftime_now).  The reference is ../shared/golden/chat_templates (README.md
 * there has the exact environment and the feature census).
 *
 * Inputs are jansson values: object key order is kept (templates iterate
 * .items() and tojson keeps it) and integers stay apart from reals (0.0 prints
 * as 0.0).  Knows nothing of models or tokenizers (DESIGN.md §2: core ←
 * chat).
 */
#ifndef DJ_CHAT_JINJA_H
#define DJ_CHAT_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct dj_jinja;

/* Compiles a template source src[0..n).  Syntax errors: DJ_ERR_INVALID with
 * "template: line L, column C: ..." (dj_last_error).  Never aborts. */
enum dj_status jinja_compile(const char *src, size_t n, struct dj_jinja **out);
void jinja_free(struct dj_jinja *t); /* accepts NULL */

/* Does the template read variable `name` anywhere (as a free variable, like
 * jinja2.meta.find_undeclared_variables)?  For kwargs such as enable_thinking
 * that are passed only to templates that read them. */
bool jinja_reads_var(const struct dj_jinja *t, const char *name);

struct dj_jinja_out {
    char *text;          /* malloc'd, NUL-terminated UTF-8 */
    size_t n;            /* bytes of text */
    uint8_t *from_input; /* malloc'd bitmap, bit i (from_input[i/8] >> (i%8) & 1) set where output
                            byte i came from a string of the context (message text, tool JSON...)
                            rather than from the template's own literals; NULL when no byte did */
};

/* Renders t with the variables of ctx (a JSON object; each key a variable)
 * plus the globals namespace(), range(), raise_exception(msg) and
 * strftime_now(fmt) reading the clock `now` (seconds since the epoch, shown as
 * naive UTC; the C locale).  On an exception: DJ_ERR_INVALID and
 * dj_last_error() is the message — for raise_exception exactly its argument,
 * otherwise "template: line L: ..." saying what failed (undefined attribute,
 * type error, ...).  out is left zeroed on failure. */
enum dj_status jinja_render(const struct dj_jinja *t, const json_t *ctx, int64_t now, struct dj_jinja_out *out);

/* What one render may use.  The defaults are the built-in limits (5e7 steps,
 * 64 MiB of output) and are also the ceilings: larger values are clamped to
 * them.  Lower limits are for callers that render untrusted templates in a
 * loop (the fuzzer). */
struct dj_jinja_params {
    int64_t now;        /* strftime_now's clock, seconds since the epoch (default: time(NULL)) */
    uint64_t max_steps; /* evaluation steps, plus one per 64 bytes built */
    size_t max_output;  /* bytes of output, and of the body of a macro, set block or filter block */
    /* NULL, or a NULL-terminated list of top-level context keys whose string values count as the
     * template's own text in from_input (a chat server's bos_token / eos_token: the vocabulary's
     * special-token texts, not the request's); every other context string is input */
    const char *const *template_owned;
};
struct dj_jinja_params jinja_default_params(void);
/* jinja_render with the clock and limits of p (NULL: the defaults). */
enum dj_status jinja_render_ex(const struct dj_jinja *t, const json_t *ctx, const struct dj_jinja_params *p,
                               struct dj_jinja_out *out);
void jinja_out_free(struct dj_jinja_out *o); /* accepts a zeroed struct */

/* Did the last failure come from the template's raise_exception (as opposed
 * to a type/undefined error)?  Set by jinja_render on failure, per thread. */
bool jinja_last_error_raised(void);

#endif
