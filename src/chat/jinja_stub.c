/*
 * jinja_stub.c — the Jinja interpreter is NOT IMPLEMENTED yet (issue 11):
 * jinja_compile always fails with a message saying so, and chat.c then
 * renders with its C ChatML renderer instead of the model's template (the
 * server logs it at start).  This file goes away when src/chat/jinja*.c land.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

enum dj_status jinja_compile(const char *src, size_t n, struct dj_jinja **out) {
    (void)src;
    (void)n;
    *out = NULL;
    return dj_fail(DJ_ERR_INVALID, "template: the Jinja interpreter is not implemented yet");
}

void jinja_free(struct dj_jinja *t) { (void)t; }

bool jinja_reads_var(const struct dj_jinja *t, const char *name) {
    (void)t;
    (void)name;
    return false;
}

enum dj_status jinja_render(const struct dj_jinja *t, const json_t *ctx, int64_t now, struct dj_jinja_out *out) {
    (void)t;
    (void)ctx;
    (void)now;
    memset(out, 0, sizeof *out);
    return dj_fail(DJ_ERR_INVALID, "template: the Jinja interpreter is not implemented yet");
}

void jinja_out_free(struct dj_jinja_out *o) {
    free(o->text);
    free(o->from_input);
    memset(o, 0, sizeof *o);
}

bool jinja_last_error_raised(void) { return false; }
