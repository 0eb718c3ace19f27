/*
 * trace.c — the trace reader (trace.h): a strict JSON line parser, bounded to
 * the line, and prompt reconstruction by code points.
 *
 * The parser walks [p, end) with a cursor and never dereferences end; every
 * failure records the column (1-based byte offset in the line) and a reason.
 */
#include "engine/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status.h"

#define MAX_DEPTH 64

struct jp {
    const char *start, *p, *end;
    const char *where;
    size_t line_no;
};

static enum dj_status jp_fail(struct jp *j, const char *what) {
    return dj_fail(DJ_ERR_FORMAT, "%s:%zu: column %zu: %s", j->where, j->line_no, (size_t)(j->p - j->start) + 1,
                   what);
}

static void skip_ws(struct jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')) j->p++;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool hex4(const char *p, const char *end, uint32_t *out) {
    if (end - p < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return false;
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return true;
}

static char *put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | cp >> 12);
        *o++ = (char)(0x80 | ((cp >> 6) & 63));
        *o++ = (char)(0x80 | (cp & 63));
    } else {
        *o++ = (char)(0xf0 | cp >> 18);
        *o++ = (char)(0x80 | ((cp >> 12) & 63));
        *o++ = (char)(0x80 | ((cp >> 6) & 63));
        *o++ = (char)(0x80 | (cp & 63));
    }
    return o;
}

/* A string at the cursor (on its opening quote).  out NULL: validate and skip.
 * Otherwise *out is a malloc'd NUL-terminated decoding (an escape never
 * decodes to more bytes than it takes, so the raw length bounds it). */
static enum dj_status parse_string(struct jp *j, char **out, size_t *len) {
    if (j->p >= j->end || *j->p != '"') return jp_fail(j, "expected a string");
    const char *q = ++j->p;
    while (q < j->end && *q != '"') {
        if ((unsigned char)*q < 0x20) {
            j->p = q;
            return jp_fail(j, "control character in a string");
        }
        q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    }
    if (q >= j->end) return jp_fail(j, "unterminated string");
    char *buf = NULL, *o = NULL;
    if (out) {
        buf = malloc((size_t)(q - j->p) + 1);
        if (!buf) return dj_fail(DJ_ERR_NOMEM, "%s:%zu: out of memory", j->where, j->line_no);
        o = buf;
    }
    char tmp[4];
    while (j->p < q) {
        char c = *j->p;
        if (c != '\\') {
            if (o) *o++ = c;
            j->p++;
            continue;
        }
        char e = j->p[1];
        char *w = o ? o : tmp;
        switch (e) {
        case '"': case '\\': case '/': *w++ = e; j->p += 2; break;
        case 'b': *w++ = '\b'; j->p += 2; break;
        case 'f': *w++ = '\f'; j->p += 2; break;
        case 'n': *w++ = '\n'; j->p += 2; break;
        case 'r': *w++ = '\r'; j->p += 2; break;
        case 't': *w++ = '\t'; j->p += 2; break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(j->p + 2, q, &cp)) {
                free(buf);
                return jp_fail(j, "bad \\u escape");
            }
            j->p += 6;
            if (cp >= 0xd800 && cp < 0xdc00 && q - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' &&
                hex4(j->p + 2, q, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                j->p += 6;
            } else if (cp >= 0xd800 && cp < 0xe000) {
                cp = 0xfffd; /* a lone surrogate: one code point, as Python counts it */
            }
            w = put_utf8(w, cp);
            break;
        }
        default:
            free(buf);
            return jp_fail(j, "bad escape in a string");
        }
        if (o) o = w;
    }
    j->p = q + 1;
    if (out) {
        *o = '\0';
        *out = buf;
        *len = (size_t)(o - buf);
    }
    return DJ_OK;
}

/* A JSON number; *is_int and *v when it is an integer that fits. */
static enum dj_status parse_number(struct jp *j, bool *is_int, long long *v) {
    const char *s = j->p;
    bool neg = false, frac = false, big = false;
    unsigned long long u = 0;
    if (j->p < j->end && *j->p == '-') { neg = true; j->p++; }
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "bad number");
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9') return jp_fail(j, "leading zero in a number");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (u > (unsigned long long)INT64_MAX / 10) big = true;
        u = u * 10 + (unsigned long long)(*j->p - '0');
        if (u > (unsigned long long)INT64_MAX) big = true;
        j->p++;
    }
    if (j->p < j->end && *j->p == '.') {
        frac = true;
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "bad fraction");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        frac = true;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "bad exponent");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    (void)s;
    *is_int = !frac && !big;
    *v = neg ? -(long long)u : (long long)u;
    return DJ_OK;
}

static bool literal(struct jp *j, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return false;
    j->p += n;
    return true;
}

static enum dj_status skip_value(struct jp *j, int depth) {
    skip_ws(j);
    if (j->p >= j->end) return jp_fail(j, "expected a value");
    if (depth > MAX_DEPTH) return jp_fail(j, "nested more than 64 deep");
    enum dj_status st;
    char c = *j->p;
    if (c == '"') return parse_string(j, NULL, NULL);
    if (c == '{' || c == '[') {
        const char close = c == '{' ? '}' : ']';
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return DJ_OK;
        }
        for (;;) {
            if (c == '{') {
                skip_ws(j);
                if ((st = parse_string(j, NULL, NULL))) return st;
                skip_ws(j);
                if (j->p >= j->end || *j->p != ':') return jp_fail(j, "expected ':'");
                j->p++;
            }
            if ((st = skip_value(j, depth + 1))) return st;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == close) { j->p++; return DJ_OK; }
            return jp_fail(j, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (literal(j, "true") || literal(j, "false") || literal(j, "null")) return DJ_OK;
    bool is_int;
    long long v;
    return parse_number(j, &is_int, &v);
}

static enum dj_status int_field(struct jp *j, const char *key, long long *out) {
    bool is_int;
    long long v;
    enum dj_status st = parse_number(j, &is_int, &v);
    if (st) return st;
    if (!is_int || v < 0)
        return dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"%s\" is not a non-negative integer", j->where, j->line_no, key);
    *out = v;
    return DJ_OK;
}

void trace_turn_free(struct trace_turn *t) {
    free(t->session);
    free(t->text);
    free(t->response);
    memset(t, 0, sizeof *t);
}

enum dj_status trace_parse_line(const char *line, size_t len, const char *where, size_t line_no,
                                struct trace_turn *out) {
    struct jp j = {line, line, line + len, where, line_no};
    struct trace_turn t;
    memset(&t, 0, sizeof t);
    t.turn = t.keep = t.n_chars = -1;
    enum dj_status st;
    skip_ws(&j);
    if (j.p >= j.end || *j.p != '{') return jp_fail(&j, "expected '{' (one JSON object per line)");
    j.p++;
    skip_ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            skip_ws(&j);
            char *key = NULL;
            size_t kn;
            if ((st = parse_string(&j, &key, &kn))) goto fail;
            skip_ws(&j);
            if (j.p >= j.end || *j.p != ':') {
                free(key);
                st = jp_fail(&j, "expected ':'");
                goto fail;
            }
            j.p++;
            skip_ws(&j);
            if (!strcmp(key, "keep")) st = int_field(&j, "keep", &t.keep);
            else if (!strcmp(key, "turn")) st = int_field(&j, "turn", &t.turn);
            else if (!strcmp(key, "n_chars")) st = int_field(&j, "n_chars", &t.n_chars);
            else if (!strcmp(key, "response") && j.end - j.p >= 4 && !memcmp(j.p, "null", 4)) {
                if (t.response) st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"response\" appears twice", where, line_no);
                else st = skip_value(&j, 1);
            } else if (!strcmp(key, "response")) {
                if (t.response) st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"response\" appears twice", where, line_no);
                else if (j.p < j.end && *j.p != '"')
                    st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"response\" is not a string or null", where, line_no);
                else st = parse_string(&j, &t.response, &t.response_len);
            } else if (!strcmp(key, "text") || !strcmp(key, "session")) {
                char **dst = !strcmp(key, "text") ? &t.text : &t.session;
                size_t n;
                if (*dst) st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"%s\" appears twice", where, line_no, key);
                else if (j.p < j.end && *j.p != '"')
                    st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: \"%s\" is not a string", where, line_no, key);
                else st = parse_string(&j, dst, &n);
                if (!st && dst == &t.text) t.text_len = n;
            } else {
                st = skip_value(&j, 1);
            }
            free(key);
            if (st) goto fail;
            skip_ws(&j);
            if (j.p < j.end && *j.p == ',') { j.p++; continue; }
            if (j.p < j.end && *j.p == '}') { j.p++; break; }
            st = jp_fail(&j, "expected ',' or '}'");
            goto fail;
        }
    }
    skip_ws(&j);
    if (j.p != j.end) {
        st = jp_fail(&j, "text after the object");
        goto fail;
    }
    if (t.keep < 0 || !t.text) {
        st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: missing \"%s\"", where, line_no, t.keep < 0 ? "keep" : "text");
        goto fail;
    }
    *out = t;
    return DJ_OK;
fail:
    trace_turn_free(&t);
    return st;
}

size_t trace_count_cp(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

size_t trace_cp_offset(const char *s, size_t n, size_t k) {
    size_t c = 0, i = 0;
    for (; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) {
            if (c == k) break;
            c++;
        }
    return i;
}

/* ---- files ------------------------------------------------------------------- */

enum dj_status trace_open(const char *path, struct trace **out) {
    char *buf = NULL;
    size_t n = 0;
    enum dj_status st = dj_read_file(path, &buf, &n);
    if (st) return st;
    struct trace *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(buf);
        trace_close(t);
        return dj_fail(DJ_ERR_NOMEM, "%s: out of memory reading the trace", path);
    }
    t->data = buf; /* NUL-terminated by dj_read_file */
    t->len = n;
    *out = t;
    return DJ_OK;
}

void trace_close(struct trace *t) {
    if (!t) return;
    free(t->path);
    free(t->data);
    free(t->session);
    free(t->response);
    free(t->prompt);
    free(t);
}

enum dj_status trace_next(struct trace *t, bool *done) {
    /* the next line that is not blank */
    const char *line = NULL;
    size_t len = 0;
    while (t->pos < t->len) {
        const char *s = t->data + t->pos;
        const char *nl = memchr(s, '\n', t->len - t->pos);
        size_t n = nl ? (size_t)(nl - s) : t->len - t->pos;
        t->pos += n + (nl ? 1 : 0);
        t->line_no++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k < n) {
            line = s;
            len = n;
            break;
        }
    }
    if (!line) {
        *done = true;
        return DJ_OK;
    }
    struct trace_turn tt;
    enum dj_status st = trace_parse_line(line, len, t->path, t->line_no, &tt);
    if (st) return st;
    if ((size_t)tt.keep > t->prompt_cp) {
        st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: keep %lld exceeds the previous prompt's %zu code points", t->path,
                     t->line_no, tt.keep, t->prompt_cp);
        trace_turn_free(&tt);
        return st;
    }
    size_t cut = trace_cp_offset(t->prompt, t->prompt_len, (size_t)tt.keep);
    size_t need = cut + tt.text_len + 1;
    if (need > t->prompt_cap) {
        size_t cap = need * 2;
        char *np = realloc(t->prompt, cap);
        if (!np) {
            trace_turn_free(&tt);
            return dj_fail(DJ_ERR_NOMEM, "%s:%zu: out of memory for a prompt of %zu bytes", t->path, t->line_no, need);
        }
        t->prompt = np;
        t->prompt_cap = cap;
    }
    memcpy(t->prompt + cut, tt.text, tt.text_len);
    t->prompt_len = cut + tt.text_len;
    t->prompt[t->prompt_len] = '\0';
    t->prompt_cp = (size_t)tt.keep + trace_count_cp(tt.text, tt.text_len);
    t->n_chars = tt.n_chars;
    if (tt.n_chars >= 0 && (size_t)tt.n_chars != t->prompt_cp) {
        st = dj_fail(DJ_ERR_FORMAT, "%s:%zu: the rebuilt prompt has %zu code points, n_chars says %lld", t->path,
                     t->line_no, t->prompt_cp, tt.n_chars);
        trace_turn_free(&tt);
        return st;
    }
    if (!t->session) {
        if (tt.session) {
            t->session = tt.session;
            tt.session = NULL;
        } else {
            const char *b = strrchr(t->path, '/');
            t->session = strdup(b ? b + 1 : t->path);
        }
    }
    free(t->response);
    t->response = tt.response; /* NULL when null or absent */
    t->response_len = tt.response_len;
    tt.response = NULL;
    trace_turn_free(&tt);
    t->n_turns++;
    *done = false;
    return DJ_OK;
}
