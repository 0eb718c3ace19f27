/*
 * jinja_methods.c — the Python methods templates call on values (str, dict,
 * list, tuple, the loop object), the globals (namespace, range,
 * raise_exception, strftime_now, dict), Python's printf-style "%" and
 * str.format.
 *
 * What the ImmutableSandboxedEnvironment forbids is reported by
 * jj_method_lookup as "unsafe" (list.append, dict.update, ...): the lookup
 * gives an undefined that raises SecurityError when used.
 *
 * Provenance: substrings (strip, split, slices, partition) keep their bytes'
 * provenance; replace and join keep it piece by piece; case changes and
 * padding mark the whole result as input if any input byte was involved.
 */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_internal.h"

enum jj_method_id {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_CASEFOLD, M_FIND, M_RFIND, M_INDEX, M_RINDEX,
    M_COUNT, M_JOIN, M_FORMAT, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISLOWER, M_ISUPPER,
    M_ISNUMERIC, M_ISDECIMAL, M_CENTER, M_LJUST, M_RJUST, M_ZFILL, M_REMOVEPREFIX, M_REMOVESUFFIX,
    M_PARTITION, M_RPARTITION, M_ENCODE,
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_COPY,
    M_CLEAR, M_POP, M_POPITEM, M_SETDEFAULT, M_UPDATE, M_APPEND, M_EXTEND, M_INSERT, M_REMOVE, M_REVERSE, M_SORT,
    M_CYCLE, M_CHANGED,
    M_COUNT_ID
};

#define T_STR 1
#define T_DICT 2
#define T_LIST 4
#define T_TUPLE 8
#define T_LOOP 16

static const struct {
    const char *name;
    uint8_t types;
    uint8_t unsafe_types; /* the sandbox refuses it on these */
} METHODS[M_COUNT_ID] = {
    [M_STRIP] = {"strip", T_STR, 0},
    [M_LSTRIP] = {"lstrip", T_STR, 0},
    [M_RSTRIP] = {"rstrip", T_STR, 0},
    [M_SPLIT] = {"split", T_STR, 0},
    [M_RSPLIT] = {"rsplit", T_STR, 0},
    [M_SPLITLINES] = {"splitlines", T_STR, 0},
    [M_STARTSWITH] = {"startswith", T_STR, 0},
    [M_ENDSWITH] = {"endswith", T_STR, 0},
    [M_REPLACE] = {"replace", T_STR, 0},
    [M_UPPER] = {"upper", T_STR, 0},
    [M_LOWER] = {"lower", T_STR, 0},
    [M_TITLE] = {"title", T_STR, 0},
    [M_CAPITALIZE] = {"capitalize", T_STR, 0},
    [M_SWAPCASE] = {"swapcase", T_STR, 0},
    [M_CASEFOLD] = {"casefold", T_STR, 0},
    [M_FIND] = {"find", T_STR, 0},
    [M_RFIND] = {"rfind", T_STR, 0},
    [M_INDEX] = {"index", T_STR | T_LIST | T_TUPLE, 0},
    [M_RINDEX] = {"rindex", T_STR, 0},
    [M_COUNT] = {"count", T_STR | T_LIST | T_TUPLE, 0},
    [M_JOIN] = {"join", T_STR, 0},
    [M_FORMAT] = {"format", T_STR, 0},
    [M_ISDIGIT] = {"isdigit", T_STR, 0},
    [M_ISALPHA] = {"isalpha", T_STR, 0},
    [M_ISALNUM] = {"isalnum", T_STR, 0},
    [M_ISSPACE] = {"isspace", T_STR, 0},
    [M_ISLOWER] = {"islower", T_STR, 0},
    [M_ISUPPER] = {"isupper", T_STR, 0},
    [M_ISNUMERIC] = {"isnumeric", T_STR, 0},
    [M_ISDECIMAL] = {"isdecimal", T_STR, 0},
    [M_CENTER] = {"center", T_STR, 0},
    [M_LJUST] = {"ljust", T_STR, 0},
    [M_RJUST] = {"rjust", T_STR, 0},
    [M_ZFILL] = {"zfill", T_STR, 0},
    [M_REMOVEPREFIX] = {"removeprefix", T_STR, 0},
    [M_REMOVESUFFIX] = {"removesuffix", T_STR, 0},
    [M_PARTITION] = {"partition", T_STR, 0},
    [M_RPARTITION] = {"rpartition", T_STR, 0},
    [M_ENCODE] = {"encode", T_STR, 0},
    [M_ITEMS] = {"items", T_DICT, 0},
    [M_KEYS] = {"keys", T_DICT, 0},
    [M_VALUES] = {"values", T_DICT, 0},
    [M_GET] = {"get", T_DICT, 0},
    [M_COPY] = {"copy", T_DICT | T_LIST, 0},
    [M_CLEAR] = {"clear", T_DICT | T_LIST, T_DICT | T_LIST},
    [M_POP] = {"pop", T_DICT | T_LIST, T_DICT | T_LIST},
    [M_POPITEM] = {"popitem", T_DICT, T_DICT},
    [M_SETDEFAULT] = {"setdefault", T_DICT, T_DICT},
    [M_UPDATE] = {"update", T_DICT, T_DICT},
    [M_APPEND] = {"append", T_LIST, T_LIST},
    [M_EXTEND] = {"extend", T_LIST, T_LIST},
    [M_INSERT] = {"insert", T_LIST, T_LIST},
    [M_REMOVE] = {"remove", T_LIST, T_LIST},
    [M_REVERSE] = {"reverse", T_LIST, T_LIST},
    [M_SORT] = {"sort", T_LIST, T_LIST},
    [M_CYCLE] = {"cycle", T_LOOP, 0},
    [M_CHANGED] = {"changed", T_LOOP, 0},
};

const char *jj_method_name(int id) { return id >= 0 && id < M_COUNT_ID ? METHODS[id].name : "?"; }

int jj_method_lookup(struct jv obj, const char *name, size_t n, bool *unsafe) {
    uint8_t t = 0;
    if (obj.t == JJ_STR) t = T_STR;
    else if (obj.t == JJ_DICT) t = T_DICT;
    else if (obj.t == JJ_LIST && obj.u.l->sub == JJ_LIST_LIST) t = T_LIST;
    else if (obj.t == JJ_LIST && obj.u.l->sub == JJ_LIST_TUPLE) t = T_TUPLE;
    else if (obj.t == JJ_LOOP) t = T_LOOP;
    *unsafe = false;
    if (!t) return -1;
    for (int i = 0; i < M_COUNT_ID; i++)
        if ((METHODS[i].types & t) && strlen(METHODS[i].name) == n && !memcmp(METHODS[i].name, name, n)) {
            *unsafe = (METHODS[i].unsafe_types & t) != 0;
            return i;
        }
    return -1;
}

/* ---- string helpers ---- */

int jj_substr(struct jj_render *r, const struct jj_str *s, size_t off, size_t n, struct jv *out) {
    struct jj_buf b = {0};
    jj_buf_put_range(&b, s, off, n);
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    res->markup = s->markup;
    *out = jv_str(res);
    return 0;
}

static bool in_chars(uint32_t c, const struct jj_str *chars) {
    if (!chars) return jj_is_space(c);
    size_t i = 0;
    while (i < chars->n) {
        size_t l;
        if (jj_utf8_decode(chars->s + i, chars->n - i, &l) == c) return true;
        i += l;
    }
    return false;
}

/* Byte offset of the start of the code point that ends at end (> 0). */
static size_t prev_cp(const char *s, size_t end) {
    size_t p = end - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80 && end - p < 4) p--;
    size_t l;
    jj_utf8_decode(s + p, end - p, &l);
    return p + l == end ? p : end - 1;
}

int jj_str_strip(struct jj_render *r, const struct jj_str *s, const struct jj_str *chars, int mode, struct jv *out) {
    size_t b = 0, e = s->n;
    if (mode != JJ_STRIP_RIGHT) {
        while (b < e) {
            size_t l;
            uint32_t c = jj_utf8_decode(s->s + b, e - b, &l);
            if (!in_chars(c, chars)) break;
            b += l;
        }
    }
    if (mode != JJ_STRIP_LEFT) {
        while (e > b) {
            size_t p = prev_cp(s->s, e), l;
            uint32_t c = jj_utf8_decode(s->s + p, e - p, &l);
            if (!in_chars(c, chars)) break;
            e = p;
        }
    }
    return jj_substr(r, s, b, e - b, out);
}

/* Python's full case mappings that expand to several code points (SpecialCasing.txt's
 * unconditional entries) within the ranges jj_to_upper/jj_to_lower cover, plus the Latin
 * ligatures: upper, title and lower forms, NULL where the simple mapping applies. */
static const struct {
    uint32_t c;
    const char *upper, *title, *lower;
} SPECIAL_CASE[] = {
    {0xDF, "SS", "Ss", NULL},      {0x130, NULL, NULL, "i\xcc\x87"}, {0x149, "\xca\xbcN", "\xca\xbcN", NULL},
    {0xFB00, "FF", "Ff", NULL},    {0xFB01, "FI", "Fi", NULL},       {0xFB02, "FL", "Fl", NULL},
    {0xFB03, "FFI", "Ffi", NULL},  {0xFB04, "FFL", "Ffl", NULL},     {0xFB05, "ST", "St", NULL},
    {0xFB06, "ST", "St", NULL},
};

/* The expansion of c under kind 'U', 'T' or 'L', or NULL. */
static const char *special_case(uint32_t c, char kind) {
    if (c < 0xDF) return NULL;
    for (size_t k = 0; k < sizeof SPECIAL_CASE / sizeof SPECIAL_CASE[0]; k++)
        if (SPECIAL_CASE[k].c == c)
            return kind == 'U' ? SPECIAL_CASE[k].upper : kind == 'T' ? SPECIAL_CASE[k].title : SPECIAL_CASE[k].lower;
    return NULL;
}

int jj_str_case(struct jj_render *r, const struct jj_str *s, int mode, struct jv *out) {
    struct jj_buf b = {0};
    bool prev_cased = false, first = true;
    size_t i = 0;
    while (i < s->n) {
        size_t l;
        uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &l);
        uint32_t o = c;
        bool cased = jj_is_alpha(c);
        char kind = 'L'; /* the full mapping applied: Upper, Title or Lower */
        switch (mode) {
        case JJ_CASE_UPPER: o = jj_to_upper(c), kind = 'U'; break;
        case JJ_CASE_LOWER: o = jj_to_lower(c), kind = 'L'; break;
        case JJ_CASE_SWAP:
            kind = jj_to_upper(c) != c || special_case(c, 'U') ? 'U' : 'L';
            o = kind == 'U' ? jj_to_upper(c) : jj_to_lower(c);
            break;
        case JJ_CASE_CAPITALIZE:
            kind = first ? 'T' : 'L';
            o = first ? jj_to_upper(c) : jj_to_lower(c);
            break;
        case JJ_CASE_TITLE:
            kind = prev_cased ? 'L' : 'T';
            o = prev_cased ? jj_to_lower(c) : jj_to_upper(c);
            break;
        case JJ_CASE_JINJA_TITLE: {
            /* jinja2's do_title: words begin after [-\s({\[<]; item[0].upper() + item[1:].lower() */
            kind = prev_cased ? 'L' : 'U';
            o = prev_cased ? jj_to_lower(c) : jj_to_upper(c);
            cased = !(jj_is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<');
            break;
        }
        }
        prev_cased = cased;
        first = false;
        char tmp[4];
        const char *sp = special_case(c, kind);
        if (sp) jj_buf_puts(&b, sp);
        else if (l == 1 && c >= 0x80) jj_buf_put(&b, s->s + i, 1, false);
        else jj_buf_put(&b, tmp, jj_utf8_encode(o, tmp), false);
        i += l;
    }
    if (jj_str_any_input(s)) jj_buf_mark_all(&b, 0);
    size_t n = b.n;
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    res->markup = s->markup;
    *out = jv_str(res);
    return jj_charge_out(r, n, out);
}

int jj_str_replace(struct jj_render *r, const struct jj_str *s, const struct jj_str *old, const struct jj_str *new_,
                   int64_t count, struct jv *out) {
    struct jj_buf b = {0};
    if (count < 0) count = INT64_MAX;
    if (old->n == 0) {
        /* Python inserts new before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (i <= s->n) {
            if (done < count) {
                jj_buf_put_str(&b, new_);
                done++;
            }
            if (i == s->n) break;
            size_t l;
            jj_utf8_decode(s->s + i, s->n - i, &l);
            jj_buf_put_range(&b, s, i, l);
            i += l;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (i < s->n && done < count) {
            const char *hit = memmem(s->s + i, s->n - i, old->s, old->n);
            if (!hit) break;
            size_t at = (size_t)(hit - s->s);
            jj_buf_put_range(&b, s, i, at - i);
            jj_buf_put_str(&b, new_);
            i = at + old->n;
            done++;
            if (b.oom) break;
        }
        jj_buf_put_range(&b, s, i, s->n - i);
    }
    size_t n = b.n;
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    *out = jv_str(res);
    return jj_charge_out(r, n, out);
}

/* ---- argument helpers ---- */

int jj_bind(struct jj_render *r, const char *what, const struct jj_args *a, const char *const *names, size_t n_names,
            struct jv *out) {
    if (a->n_pos > n_names)
        return jj_fail(r, "TypeError", "%s() takes at most %zu argument(s) (%zu given)", what, n_names, a->n_pos);
    for (size_t i = 0; i < n_names; i++) out[i] = i < a->n_pos ? a->pos[i] : jv_missing();
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t j = 0;
        for (; j < n_names; j++)
            if (strlen(names[j]) == a->kw_lens[k] && !memcmp(names[j], a->kw_names[k], a->kw_lens[k])) break;
        if (j == n_names)
            return jj_fail(r, "TypeError", "%s() got an unexpected keyword argument '%.*s'", what, (int)a->kw_lens[k],
                           a->kw_names[k]);
        if (j < a->n_pos) return jj_fail(r, "TypeError", "%s() got multiple values for argument '%s'", what, names[j]);
        out[j] = a->kw[k];
    }
    return 0;
}

static int need_str(struct jj_render *r, const char *what, struct jv v, const struct jj_str **out) {
    if (v.t != JJ_STR) return jj_fail(r, "TypeError", "%s must be str, not %s", what, jv_type_name(v));
    *out = v.u.s;
    return 0;
}

static int need_int(struct jj_render *r, const char *what, struct jv v, int64_t *out) {
    if (v.t == JJ_INT) *out = v.u.i;
    else if (v.t == JJ_BOOL) *out = v.u.b;
    else return jj_fail(r, "TypeError", "%s: '%s' object cannot be interpreted as an integer", what, jv_type_name(v));
    return 0;
}

/* Python's start/end clamping for find/count/startswith, in code points. */
static void clamp_range(struct jv start, struct jv end, int64_t n, int64_t *s, int64_t *e) {
    *s = 0, *e = n;
    if (start.t == JJ_INT || start.t == JJ_BOOL) *s = start.t == JJ_INT ? start.u.i : start.u.b;
    if (end.t == JJ_INT || end.t == JJ_BOOL) *e = end.t == JJ_INT ? end.u.i : end.u.b;
    if (*s < 0) *s = *s + n < 0 ? 0 : *s + n;
    if (*e < 0) *e = *e + n < 0 ? 0 : *e + n;
    if (*s > n) *s = n + 1; /* empty */
    if (*e > n) *e = n;
}

/* ---- str.split / rsplit / splitlines ---- */

static int push_sub(struct jj_render *r, struct jj_list *l, const struct jj_str *s, size_t off, size_t n) {
    struct jv v;
    if (jj_charge_items(r, 1)) return -1; /* 'x' * 10**7 splits into 10**7 strings */
    if (jj_substr(r, s, off, n, &v)) return -1;
    if (!jj_list_push(l, v)) return jj_fail_oom(r);
    return 0;
}

static int str_split(struct jj_render *r, const struct jj_str *s, const struct jj_str *sep, int64_t maxsplit, bool right,
                     struct jv *out) {
    struct jj_list *l = jj_list_new(JJ_LIST_LIST, 0);
    if (!l) return jj_fail_oom(r);
    int rc = 0;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep && sep->n == 0) {
        jv_decref(jv_list(l));
        return jj_fail(r, "ValueError", "empty separator");
    }
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (i < s->n) { /* skip whitespace */
                    size_t len;
                    uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &len);
                    if (!jj_is_space(c)) break;
                    i += len;
                }
                if (i >= s->n) break;
                if (splits >= maxsplit) {
                    /* the rest, trailing whitespace kept (Python strips only the left) */
                    rc = push_sub(r, l, s, i, s->n - i);
                    break;
                }
                size_t start = i;
                while (i < s->n) {
                    size_t len;
                    uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &len);
                    if (jj_is_space(c)) break;
                    i += len;
                }
                if ((rc = push_sub(r, l, s, start, i - start))) break;
                splits++;
            }
        } else {
            for (;;) {
                const char *hit = splits < maxsplit ? memmem(s->s + i, s->n - i, sep->s, sep->n) : NULL;
                if (!hit) {
                    rc = push_sub(r, l, s, i, s->n - i);
                    break;
                }
                size_t at = (size_t)(hit - s->s);
                if ((rc = push_sub(r, l, s, i, at - i))) break;
                i = at + sep->n;
                splits++;
            }
        }
    } else {
        /* right to left, then reversed */
        size_t e = s->n;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (e > 0) {
                    size_t p = prev_cp(s->s, e), len;
                    if (!jj_is_space(jj_utf8_decode(s->s + p, e - p, &len))) break;
                    e = p;
                }
                if (e == 0) break;
                if (splits >= maxsplit) {
                    rc = push_sub(r, l, s, 0, e);
                    break;
                }
                size_t end = e;
                while (e > 0) {
                    size_t p = prev_cp(s->s, e), len;
                    if (jj_is_space(jj_utf8_decode(s->s + p, e - p, &len))) break;
                    e = p;
                }
                if ((rc = push_sub(r, l, s, e, end - e))) break;
                splits++;
            }
        } else {
            for (;;) {
                size_t at = SIZE_MAX;
                if (splits < maxsplit && e >= sep->n)
                    for (size_t p = e - sep->n + 1; p-- > 0;)
                        if (!memcmp(s->s + p, sep->s, sep->n)) {
                            at = p;
                            break;
                        }
                if (at == SIZE_MAX) {
                    rc = push_sub(r, l, s, 0, e);
                    break;
                }
                if ((rc = push_sub(r, l, s, at + sep->n, e - at - sep->n))) break;
                e = at;
                splits++;
            }
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            struct jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    if (rc) {
        jv_decref(jv_list(l));
        return -1;
    }
    *out = jv_list(l);
    return 0;
}

static bool is_line_break(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

int jj_splitlines(struct jj_render *r, const struct jj_str *s, bool keepends, struct jv *out);
int jj_splitlines(struct jj_render *r, const struct jj_str *s, bool keepends, struct jv *out) {
    struct jj_list *l = jj_list_new(JJ_LIST_LIST, 0);
    if (!l) return jj_fail_oom(r);
    size_t i = 0, start = 0;
    while (i < s->n) {
        size_t len;
        uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &len);
        if (!is_line_break(c)) {
            i += len;
            continue;
        }
        size_t eol = i + len;
        if (c == '\r' && eol < s->n && s->s[eol] == '\n') eol++;
        if (push_sub(r, l, s, start, (keepends ? eol : i) - start)) {
            jv_decref(jv_list(l));
            return -1;
        }
        i = start = eol;
    }
    if (start < s->n && push_sub(r, l, s, start, s->n - start)) {
        jv_decref(jv_list(l));
        return -1;
    }
    *out = jv_list(l);
    return 0;
}

/* ---- printf-style formatting ---- */

static int fmt_arg_str(struct jj_render *r, struct jv v, bool repr, struct jj_buf *b) {
    if (repr) jj_repr_of(v, b);
    else jj_str_of(v, b);
    return b->oom ? jj_fail_oom(r) : 0;
}

/* Pads b from `from` to width code points (left or right). */
static void pad_to(struct jj_buf *b, size_t from, int64_t width, bool left, char fill) {
    size_t have = jj_utf8_count(b->p ? b->p + from : "", b->n - from);
    if (width <= 0 || (size_t)width <= have) return;
    size_t padn = (size_t)width - have;
    if (left) {
        for (size_t i = 0; i < padn; i++) jj_buf_putc(b, fill);
        return;
    }
    /* insert padding before [from, n) */
    size_t tail = b->n - from;
    for (size_t i = 0; i < padn; i++) jj_buf_putc(b, fill);
    if (b->oom) return;
    memmove(b->p + from + padn, b->p + from, tail);
    memset(b->p + from, fill, padn);
    if (b->bits) { /* the moved bytes' provenance: mark conservatively */
        if (jj_buf_any_input(b, from)) jj_buf_mark_all(b, from);
    }
}

static bool num_val(struct jv v, double *f, int64_t *i, bool *is_int) {
    if (v.t == JJ_INT) *i = v.u.i, *f = (double)v.u.i, *is_int = true;
    else if (v.t == JJ_BOOL) *i = v.u.b, *f = v.u.b, *is_int = true;
    else if (v.t == JJ_FLOAT) *f = v.u.f, *i = 0, *is_int = false;
    else return false;
    return true;
}

int jj_percent_format(struct jj_render *r, const struct jj_str *fmt, struct jv args, struct jv *out) {
    const struct jv *pos = &args;
    size_t n_pos = 1, used = 0;
    const struct jj_dict *map = NULL;
    if (args.t == JJ_LIST && args.u.l->sub == JJ_LIST_TUPLE) pos = args.u.l->v, n_pos = args.u.l->n;
    if (args.t == JJ_DICT) map = args.u.d;
    struct jj_buf b = {0};
    size_t i = 0, run = 0;
    const char *s = fmt->s;
    while (i < fmt->n) {
        if (s[i] != '%') {
            i++;
            continue;
        }
        jj_buf_put_range(&b, fmt, run, i - run);
        i++;
        struct jv arg = jv_none();
        bool have_key = false;
        if (i < fmt->n && s[i] == '(') {
            size_t k = i + 1, depth = 1;
            while (k < fmt->n && depth) {
                if (s[k] == '(') depth++;
                else if (s[k] == ')') depth--;
                k++;
            }
            if (depth) goto incomplete;
            if (!map) {
                jj_buf_free(&b);
                return jj_fail(r, "TypeError", "format requires a mapping");
            }
            struct jj_str *key = jj_str_new(s + i + 1, k - i - 2, JJ_PROV_NONE);
            if (!key) goto oom;
            struct jv *v = jj_dict_get(map, jv_str(key));
            if (!v) {
                int rc = jj_fail(r, "KeyError", "'%s'", key->s);
                jj_str_decref(key);
                jj_buf_free(&b);
                return rc;
            }
            jj_str_decref(key);
            arg = *v;
            have_key = true;
            i = k;
        }
        bool left = false, zero = false, plus = false, space = false, alt = false;
        for (; i < fmt->n && strchr("-0+ #", s[i]) && s[i]; i++) {
            if (s[i] == '-') left = true;
            else if (s[i] == '0') zero = true;
            else if (s[i] == '+') plus = true;
            else if (s[i] == ' ') space = true;
            else alt = true;
        }
        int64_t width = -1, prec = -1;
        if (i < fmt->n && s[i] == '*') goto unsupported;
        /* digits saturate past 10**9 (then fail below): a long run of them must not overflow */
        for (; i < fmt->n && s[i] >= '0' && s[i] <= '9'; i++)
            if (width < 1000000000) width = (width < 0 ? 0 : width) * 10 + (s[i] - '0');
        if (i < fmt->n && s[i] == '.') {
            i++;
            prec = 0;
            if (i < fmt->n && s[i] == '*') goto unsupported;
            for (; i < fmt->n && s[i] >= '0' && s[i] <= '9'; i++)
                if (prec < 1000000000) prec = prec * 10 + (s[i] - '0');
        }
        if (width > 100000 || prec > 100000) {
            jj_buf_free(&b);
            return jj_fail(r, "ValueError", "format width or precision too large (deja's limit is 100000)");
        }
        for (; i < fmt->n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L'); i++) {}
        if (i >= fmt->n) goto incomplete;
        char conv = s[i++];
        run = i;
        if (conv == '%') {
            jj_buf_putc(&b, '%');
            continue;
        }
        if (!have_key) {
            if (used >= n_pos) {
                jj_buf_free(&b);
                return jj_fail(r, "TypeError", "not enough arguments for format string");
            }
            arg = pos[used++];
        }
        size_t start = b.n;
        double f;
        int64_t iv;
        bool is_int;
        /* the C conversion with Python's flags; "*" width and ".*" precision when given */
        char spec[32];
        int k = 0;
        spec[k++] = '%';
        if (left) spec[k++] = '-';
        if (zero) spec[k++] = '0';
        if (plus) spec[k++] = '+';
        if (space) spec[k++] = ' ';
        if (alt && conv != 'o' && conv != 'x' && conv != 'X') spec[k++] = '#';
        spec[k++] = '*';
        if (prec >= 0) spec[k++] = '.', spec[k++] = '*';
        size_t tmp_n = (size_t)(width > 0 ? width : 0) + (size_t)(prec > 0 ? prec : 0) + 400;
        char *tmp = NULL;
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            if (fmt_arg_str(r, arg, conv != 's', &b)) {
                jj_buf_free(&b);
                return -1;
            }
            if (prec >= 0) { /* truncate to prec code points */
                size_t cut = start, cps = 0;
                while (cut < b.n && cps < (size_t)prec) {
                    size_t l;
                    jj_utf8_decode(b.p + cut, b.n - cut, &l);
                    cut += l;
                    cps++;
                }
                b.n = cut;
                if (b.p) b.p[b.n] = '\0';
            }
            pad_to(&b, start, width, left, ' ');
            continue;
        }
        case 'd':
        case 'i':
        case 'u':
            if (!num_val(arg, &f, &iv, &is_int)) {
                jj_buf_free(&b);
                return jj_fail(r, "TypeError", "%%%c format: a real number is required, not %s", conv, jv_type_name(arg));
            }
            if (!is_int) {
                if (!isfinite(f) || fabs(f) >= 9.2e18) {
                    jj_buf_free(&b);
                    return jj_fail(r, "OverflowError", "cannot convert float %s to integer", isfinite(f) ? "(too large)" : "infinity or NaN");
                }
                iv = (int64_t)f;
            }
            spec[k++] = 'l', spec[k++] = 'l', spec[k++] = 'd', spec[k] = 0;
            if (!(tmp = malloc(tmp_n))) goto oom;
            if (prec >= 0) snprintf(tmp, tmp_n, spec, (int)(width < 0 ? 0 : width), (int)prec, (long long)iv);
            else snprintf(tmp, tmp_n, spec, (int)(width < 0 ? 0 : width), (long long)iv);
            break;
        case 'o':
        case 'x':
        case 'X':
        case 'c':
            if (!num_val(arg, &f, &iv, &is_int) || !is_int) {
                if (conv == 'c' && arg.t == JJ_STR && arg.u.s->ncp == 1) {
                    jj_buf_put_str(&b, arg.u.s);
                    pad_to(&b, start, width, left, ' ');
                    continue;
                }
                jj_buf_free(&b);
                return jj_fail(r, "TypeError", "%%%c format: an integer is required, not %s", conv, jv_type_name(arg));
            }
            if (conv == 'c') {
                char enc[4];
                if (iv < 0 || iv > 0x10FFFF) {
                    jj_buf_free(&b);
                    return jj_fail(r, "OverflowError", "%%c arg not in range(0x110000)");
                }
                jj_buf_put(&b, enc, jj_utf8_encode((uint32_t)iv, enc), false);
                pad_to(&b, start, width, left, ' ');
                continue;
            }
            {
                bool negv = iv < 0;
                uint64_t mag = negv ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
                char digits[80];
                snprintf(digits, sizeof digits, conv == 'o' ? "%llo" : conv == 'x' ? "%llx" : "%llX", (unsigned long long)mag);
                char num[200];
                snprintf(num, sizeof num, "%s%s%s", negv ? "-" : plus ? "+" : space ? " " : "",
                         alt ? (conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X") : "", digits);
                jj_buf_puts(&b, num);
                pad_to(&b, start, width, left, ' ');
                continue;
            }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
            if (!num_val(arg, &f, &iv, &is_int)) {
                jj_buf_free(&b);
                return jj_fail(r, "TypeError", "must be real number, not %s", jv_type_name(arg));
            }
            spec[k++] = conv, spec[k] = 0;
            if (!(tmp = malloc(tmp_n))) goto oom;
            snprintf(tmp, tmp_n, spec, (int)(width < 0 ? 0 : width), prec < 0 ? 6 : (int)prec, f);
            if (prec < 0) { /* the spec has no ".*": redo with precision 6 given explicitly */
                spec[k - 1] = '.', spec[k] = '6', spec[k + 1] = conv, spec[k + 2] = 0;
                snprintf(tmp, tmp_n, spec, (int)(width < 0 ? 0 : width), f);
            }
            break;
        default:
            jj_buf_free(&b);
            return jj_fail(r, "ValueError", "unsupported format character '%c'", conv);
        }
        jj_buf_puts(&b, tmp);
        free(tmp);
        if (arg.t == JJ_STR && jj_str_any_input(arg.u.s)) jj_buf_mark_all(&b, start);
    }
    jj_buf_put_range(&b, fmt, run, fmt->n - run);
    if (!map && used < n_pos) {
        jj_buf_free(&b);
        return jj_fail(r, "TypeError", "not all arguments converted during string formatting");
    }
    {
        size_t n = b.n;
        struct jj_str *res = jj_buf_take(&b);
        if (!res) return jj_fail_oom(r);
        *out = jv_str(res);
        return jj_charge_out(r, n, out);
    }
incomplete:
    jj_buf_free(&b);
    return jj_fail(r, "ValueError", "incomplete format");
unsupported:
    jj_buf_free(&b);
    return jj_fail(r, "ValueError", "unsupported format (* width or precision)");
oom:
    jj_buf_free(&b);
    return jj_fail_oom(r);
}

/* ---- str.format ---- */

/* Applies a format spec ([[fill]align][sign][#][0][width][,][.prec][type]) to v. */
static int format_spec(struct jj_render *r, struct jv v, const char *spec, size_t n, struct jj_buf *b) {
    size_t i = 0;
    char fill = ' ', align = 0, sign = 0, type = 0;
    bool alt = false, comma = false;
    int64_t width = -1, prec = -1;
    if (n >= 2 && strchr("<>^=", spec[1]) && spec[1]) fill = spec[0], align = spec[1], i = 2;
    else if (n >= 1 && strchr("<>^=", spec[0]) && spec[0]) align = spec[0], i = 1;
    if (i < n && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
    if (i < n && spec[i] == '#') alt = true, i++;
    if (i < n && spec[i] == '0') {
        if (!align) fill = '0', align = '=';
        i++;
    }
    /* digits saturate past 10**9 (then fail below): a long run of them must not overflow */
    for (; i < n && spec[i] >= '0' && spec[i] <= '9'; i++)
        if (width < 1000000000) width = (width < 0 ? 0 : width) * 10 + (spec[i] - '0');
    if (i < n && (spec[i] == ',' || spec[i] == '_')) comma = true, i++;
    if (i < n && spec[i] == '.') {
        prec = 0;
        for (i++; i < n && spec[i] >= '0' && spec[i] <= '9'; i++)
            if (prec < 1000000000) prec = prec * 10 + (spec[i] - '0');
    }
    if (i < n) type = spec[i++];
    if (i != n) return jj_fail(r, "ValueError", "Invalid format specifier");
    if (width > 100000 || prec > 100000)
        return jj_fail(r, "ValueError", "format width or precision too large (deja's limit is 100000)");
    size_t start = b->n;
    char tmp[512];
    double f;
    int64_t iv;
    bool is_int;
    bool numeric = num_val(v, &f, &iv, &is_int) && v.t != JJ_BOOL;
    if (v.t == JJ_BOOL && type && type != 's') numeric = true;
    if (!numeric || type == 's') {
        if (type && type != 's') return jj_fail(r, "ValueError", "Unknown format code '%c' for object of type '%s'", type, jv_type_name(v));
        jj_str_of(v, b);
        if (prec >= 0) {
            size_t cut = start, cps = 0;
            while (cut < b->n && cps < (size_t)prec) {
                size_t l;
                jj_utf8_decode(b->p + cut, b->n - cut, &l);
                cut += l;
                cps++;
            }
            b->n = cut;
            if (b->p) b->p[b->n] = '\0';
        }
        if (!align) align = '<';
    } else {
        if (!align) align = '>';
        bool neg;
        char body[400];
        if (is_int && (!type || strchr("dnxXobc", type))) {
            neg = iv < 0;
            uint64_t mag = neg ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
            switch (type) {
            case 'x': snprintf(body, sizeof body, "%s%llx", alt ? "0x" : "", (unsigned long long)mag); break;
            case 'X': snprintf(body, sizeof body, "%s%llX", alt ? "0X" : "", (unsigned long long)mag); break;
            case 'o': snprintf(body, sizeof body, "%s%llo", alt ? "0o" : "", (unsigned long long)mag); break;
            case 'b': {
                char bits[70];
                int k = 0;
                do bits[k++] = (char)('0' + (mag & 1)), mag >>= 1;
                while (mag);
                int o = 0;
                if (alt) body[o++] = '0', body[o++] = 'b';
                while (k) body[o++] = bits[--k];
                body[o] = 0;
                break;
            }
            case 'c': {
                size_t l = jj_utf8_encode((uint32_t)(iv & 0x1FFFFF), body);
                body[l] = 0;
                neg = false;
                break;
            }
            default: snprintf(body, sizeof body, "%llu", (unsigned long long)mag); break;
            }
        } else {
            neg = signbit(f) && !isnan(f);
            double m = fabs(f);
            int p = prec < 0 ? 6 : (int)prec;
            switch (type) {
            case 'f':
            case 'F': snprintf(body, sizeof body, "%.*f", p, m); break;
            case 'e':
            case 'E': snprintf(body, sizeof body, type == 'e' ? "%.*e" : "%.*E", p, m); break;
            case 'g':
            case 'G': snprintf(body, sizeof body, type == 'g' ? "%.*g" : "%.*G", p ? p : 1, m); break;
            case '%': snprintf(body, sizeof body, "%.*f%%", p, m * 100); break;
            case 0:
                if (prec < 0) {
                    struct jj_buf t = {0};
                    jj_float_repr(m, &t);
                    snprintf(body, sizeof body, "%s", t.p ? t.p : "");
                    jj_buf_free(&t);
                } else {
                    snprintf(body, sizeof body, "%.*g", p ? p : 1, m);
                }
                break;
            default: return jj_fail(r, "ValueError", "Unknown format code '%c' for object of type 'float'", type);
            }
        }
        if (comma) { /* thousands separators on the integer part */
            char grouped[400];
            size_t len = strlen(body), intlen = 0;
            while (intlen < len && body[intlen] >= '0' && body[intlen] <= '9') intlen++;
            size_t o = 0;
            for (size_t k = 0; k < len && o + 3 < sizeof grouped; k++) {
                if (k > 0 && k < intlen && (intlen - k) % 3 == 0) grouped[o++] = ',';
                grouped[o++] = body[k];
            }
            grouped[o] = 0;
            memcpy(body, grouped, o + 1);
        }
        const char *sg = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
        if (align == '=') {
            jj_buf_puts(b, sg);
            size_t have = strlen(body) + strlen(sg);
            for (int64_t k = (int64_t)have; k < width; k++) jj_buf_putc(b, fill);
            jj_buf_puts(b, body);
            return 0;
        }
        snprintf(tmp, sizeof tmp, "%s%s", sg, body);
        jj_buf_puts(b, tmp);
    }
    size_t have = jj_utf8_count(b->p ? b->p + start : "", b->n - start);
    if (width > 0 && (size_t)width > have) {
        size_t padn = (size_t)width - have, lpad = 0;
        if (align == '>') lpad = padn;
        else if (align == '^') lpad = padn / 2;
        size_t rpad = padn - lpad;
        if (lpad) {
            size_t tail = b->n - start;
            for (size_t k = 0; k < lpad; k++) jj_buf_putc(b, fill);
            if (!b->oom) {
                memmove(b->p + start + lpad, b->p + start, tail);
                memset(b->p + start, fill, lpad);
                if (jj_buf_any_input(b, start)) jj_buf_mark_all(b, start);
            }
        }
        for (size_t k = 0; k < rpad; k++) jj_buf_putc(b, fill);
    }
    return b->oom ? jj_fail_oom(r) : 0;
}

static int str_format(struct jj_render *r, const struct jj_str *fmt, const struct jj_args *a, struct jv *out) {
    struct jj_buf b = {0};
    const char *s = fmt->s;
    size_t i = 0, run = 0, auto_idx = 0;
    bool manual = false, automatic = false;
    while (i < fmt->n) {
        char c = s[i];
        if (c == '}' ) {
            if (i + 1 < fmt->n && s[i + 1] == '}') {
                jj_buf_put_range(&b, fmt, run, i + 1 - run);
                i += 2;
                run = i;
                continue;
            }
            jj_buf_free(&b);
            return jj_fail(r, "ValueError", "Single '}' encountered in format string");
        }
        if (c != '{') {
            i++;
            continue;
        }
        if (i + 1 < fmt->n && s[i + 1] == '{') {
            jj_buf_put_range(&b, fmt, run, i + 1 - run);
            i += 2;
            run = i;
            continue;
        }
        jj_buf_put_range(&b, fmt, run, i - run);
        size_t k = i + 1;
        while (k < fmt->n && s[k] != '}' && s[k] != '{') k++;
        if (k >= fmt->n || s[k] == '{') {
            jj_buf_free(&b);
            return jj_fail(r, "ValueError", "unsupported or unmatched '{' in format string");
        }
        /* field [!conv] [:spec] */
        const char *field = s + i + 1;
        size_t flen = k - i - 1, name_len = 0;
        while (name_len < flen && field[name_len] != '!' && field[name_len] != ':' && field[name_len] != '.' &&
               field[name_len] != '[')
            name_len++;
        size_t rest = name_len;
        struct jv v;
        bool owned = false;
        if (name_len == 0 || (field[0] >= '0' && field[0] <= '9')) {
            size_t idx;
            if (name_len == 0) {
                automatic = true;
                idx = auto_idx++;
            } else {
                manual = true;
                idx = 0;
                for (size_t q = 0; q < name_len; q++) idx = idx * 10 + (size_t)(field[q] - '0');
            }
            if (manual && automatic) {
                jj_buf_free(&b);
                return jj_fail(r, "ValueError", "cannot switch between automatic field numbering and manual field specification");
            }
            if (idx >= a->n_pos) {
                jj_buf_free(&b);
                return jj_fail(r, "IndexError", "Replacement index %zu out of range for positional args tuple", idx);
            }
            v = a->pos[idx];
        } else {
            size_t q = 0;
            for (; q < a->n_kw; q++)
                if (a->kw_lens[q] == name_len && !memcmp(a->kw_names[q], field, name_len)) break;
            if (q == a->n_kw) {
                jj_buf_free(&b);
                return jj_fail(r, "KeyError", "'%.*s'", (int)name_len, field);
            }
            v = a->kw[q];
        }
        /* .attr and [key] */
        while (rest < flen && (field[rest] == '.' || field[rest] == '[')) {
            bool dot = field[rest] == '.';
            size_t st = rest + 1, en = st;
            if (dot) while (en < flen && field[en] != '.' && field[en] != '[' && field[en] != '!' && field[en] != ':') en++;
            else while (en < flen && field[en] != ']') en++;
            struct jv nv;
            int rc;
            if (dot) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(en - st), field + st);
                rc = jj_getattr(r, v, name, strlen(name), &nv);
                if (!rc && nv.t == JJ_UNDEF) { /* a name pointer into a stack buffer must not escape */
                    nv = jv_undef();
                }
            } else {
                bool digits = en > st;
                int64_t idx = 0;
                for (size_t q = st; q < en; q++) {
                    if (field[q] < '0' || field[q] > '9') digits = false;
                    else idx = idx * 10 + (field[q] - '0');
                }
                struct jj_str *key = NULL;
                struct jv kv = jv_int(idx);
                if (!digits) {
                    key = jj_str_new(field + st, en - st, JJ_PROV_NONE);
                    if (!key) rc = jj_fail_oom(r);
                    kv = jv_str(key);
                }
                rc = jj_getitem(r, v, kv, &nv);
                if (key) jj_str_decref(key);
                en++;
            }
            if (owned) jv_decref(v);
            if (rc) {
                jj_buf_free(&b);
                return -1;
            }
            v = nv, owned = true;
            rest = en;
        }
        char conv = 0;
        if (rest < flen && field[rest] == '!') {
            conv = rest + 1 < flen ? field[rest + 1] : 0;
            rest += 2;
        }
        const char *spec = "";
        size_t spec_n = 0;
        if (rest < flen && field[rest] == ':') spec = field + rest + 1, spec_n = flen - rest - 1;
        int rc = 0;
        size_t start = b.n;
        if (conv == 'r' || conv == 'a') {
            struct jj_buf t = {0};
            jj_repr_of(v, &t);
            struct jj_str *rs = jj_buf_take(&t);
            if (!rs) rc = jj_fail_oom(r);
            else {
                rc = format_spec(r, jv_str(rs), spec, spec_n, &b);
                jj_str_decref(rs);
            }
        } else if (spec_n == 0) {
            jj_str_of(v, &b);
        } else {
            rc = format_spec(r, v, spec, spec_n, &b);
        }
        if (!rc && v.t == JJ_STR && jj_str_any_input(v.u.s) && spec_n) jj_buf_mark_all(&b, start);
        if (owned) jv_decref(v);
        if (rc) {
            jj_buf_free(&b);
            return -1;
        }
        i = k + 1;
        run = i;
    }
    jj_buf_put_range(&b, fmt, run, fmt->n - run);
    size_t n = b.n;
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    *out = jv_str(res);
    return jj_charge_out(r, n, out);
}

/* ---- method calls ---- */

static int str_find(struct jj_render *r, const struct jj_str *s, const struct jv *args, bool right, int64_t *out) {
    const struct jj_str *sub = NULL;
    if (need_str(r, "argument", args[0], &sub)) return -1;
    int64_t st, en;
    clamp_range(args[1], args[2], (int64_t)s->ncp, &st, &en);
    *out = -1;
    if (st > en || en - st < (int64_t)sub->ncp) return 0;
    size_t b0 = jj_utf8_offset(s, (size_t)st), b1 = jj_utf8_offset(s, (size_t)en);
    const char *hit = NULL;
    if (!right) {
        hit = sub->n ? memmem(s->s + b0, b1 - b0, sub->s, sub->n) : s->s + b0;
    } else if (b1 - b0 >= sub->n) {
        for (size_t p = b1 - sub->n + 1; p-- > b0;)
            if (!memcmp(s->s + p, sub->s, sub->n)) {
                hit = s->s + p;
                break;
            }
    }
    if (hit) *out = (int64_t)jj_utf8_count(s->s, (size_t)(hit - s->s));
    return 0;
}

static int affix_match(struct jj_render *r, const struct jj_str *s, struct jv pat, struct jv start, struct jv end,
                       bool suffix, bool *out) {
    int64_t st, en;
    clamp_range(start, end, (int64_t)s->ncp, &st, &en);
    const struct jv *pats = &pat;
    size_t n = 1;
    if (pat.t == JJ_LIST && pat.u.l->sub == JJ_LIST_TUPLE) pats = pat.u.l->v, n = pat.u.l->n;
    *out = false;
    for (size_t i = 0; i < n; i++) {
        if (pats[i].t != JJ_STR)
            return jj_fail(r, "TypeError", "%s first arg must be str or a tuple of str, not %s",
                           suffix ? "endswith" : "startswith", jv_type_name(pats[i]));
        if (st > en) continue;
        size_t b0 = jj_utf8_offset(s, (size_t)st), b1 = jj_utf8_offset(s, (size_t)en);
        const struct jj_str *p = pats[i].u.s;
        if (p->n > b1 - b0) continue;
        if (!memcmp(suffix ? s->s + b1 - p->n : s->s + b0, p->s, p->n)) *out = true;
    }
    return 0;
}

static int str_pad(struct jj_render *r, const struct jj_str *s, int64_t width, struct jv fillv, int mode, struct jv *out) {
    char fill[4] = {' '};
    size_t fill_n = 1;
    if (!jv_is_missing(fillv)) {
        if (fillv.t != JJ_STR || fillv.u.s->ncp != 1)
            return jj_fail(r, "TypeError", "The fill character must be exactly one character long");
        memcpy(fill, fillv.u.s->s, fillv.u.s->n);
        fill_n = fillv.u.s->n;
    }
    if (width <= (int64_t)s->ncp) return jj_substr(r, s, 0, s->n, out);
    if (width > (int64_t)JJ_MAX_OUTPUT) return jj_fail_oom(r);
    size_t padn = (size_t)width - s->ncp, left;
    if (mode == 'l') left = 0;             /* ljust */
    else if (mode == 'r') left = padn;     /* rjust */
    else left = padn / 2 + (padn & (size_t)width & 1); /* Python's center */
    struct jj_buf b = {0};
    for (size_t i = 0; i < left; i++) jj_buf_put(&b, fill, fill_n, false);
    jj_buf_put_str(&b, s);
    for (size_t i = left; i < padn; i++) jj_buf_put(&b, fill, fill_n, false);
    size_t n = b.n;
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    res->markup = s->markup;
    *out = jv_str(res);
    return jj_charge_out(r, n, out);
}

int jj_str_center(struct jj_render *r, const struct jj_str *s, int64_t width, struct jv *out);
int jj_str_center(struct jj_render *r, const struct jj_str *s, int64_t width, struct jv *out) {
    return str_pad(r, s, width, jv_missing(), 'c', out);
}

static bool all_cp(const struct jj_str *s, bool (*pred)(uint32_t)) {
    if (s->n == 0) return false;
    size_t i = 0;
    while (i < s->n) {
        size_t l;
        if (!pred(jj_utf8_decode(s->s + i, s->n - i, &l))) return false;
        i += l;
    }
    return true;
}
static bool is_alnum_cp(uint32_t c) { return jj_is_alpha(c) || jj_is_digit(c); }

static int cased_test(const struct jj_str *s, bool upper) {
    bool any = false;
    size_t i = 0;
    while (i < s->n) {
        size_t l;
        uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &l);
        if (jj_to_upper(c) != c || jj_to_lower(c) != c) {
            bool is_up = jj_to_lower(c) != c;
            if (is_up != upper) return 0;
            any = true;
        }
        i += l;
    }
    return any;
}

static int call_str_method(struct jj_render *r, int id, const struct jj_str *s, const struct jj_args *a, struct jv *out) {
    struct jv p[4];
    static const char *const n_strip[] = {"chars"};
    static const char *const n_split[] = {"sep", "maxsplit"};
    static const char *const n_find[] = {"sub", "start", "end"};
    static const char *const n_repl[] = {"old", "new", "count"};
    static const char *const n_lines[] = {"keepends"};
    static const char *const n_pad[] = {"width", "fillchar"};
    static const char *const n_one[] = {"x"};
    const char *what = METHODS[id].name;
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        if (jj_bind(r, what, a, n_strip, 1, p)) return -1;
        const struct jj_str *chars = NULL;
        if (!jv_is_missing(p[0]) && p[0].t != JJ_NONE && need_str(r, "strip arg", p[0], &chars)) return -1;
        return jj_str_strip(r, s, chars, id == M_STRIP ? JJ_STRIP_BOTH : id == M_LSTRIP ? JJ_STRIP_LEFT : JJ_STRIP_RIGHT, out);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        if (jj_bind(r, what, a, n_split, 2, p)) return -1;
        const struct jj_str *sep = NULL;
        int64_t maxsplit = -1;
        if (!jv_is_missing(p[0]) && p[0].t != JJ_NONE && need_str(r, "sep", p[0], &sep)) return -1;
        if (!jv_is_missing(p[1]) && need_int(r, what, p[1], &maxsplit)) return -1;
        return str_split(r, s, sep, maxsplit, id == M_RSPLIT, out);
    }
    case M_SPLITLINES:
        if (jj_bind(r, what, a, n_lines, 1, p)) return -1;
        return jj_splitlines(r, s, !jv_is_missing(p[0]) && jv_truthy(p[0]), out);
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if (jj_bind(r, what, a, n_find, 3, p)) return -1;
        if (jv_is_missing(p[0])) return jj_fail(r, "TypeError", "%s() takes at least 1 argument (0 given)", what);
        bool res;
        if (affix_match(r, s, p[0], p[1], p[2], id == M_ENDSWITH, &res)) return -1;
        *out = jv_bool(res);
        return 0;
    }
    case M_REPLACE: {
        if (jj_bind(r, what, a, n_repl, 3, p)) return -1;
        const struct jj_str *o = NULL, *nw = NULL;
        int64_t count = -1;
        if (need_str(r, "replace() argument 1", p[0], &o) || need_str(r, "replace() argument 2", p[1], &nw)) return -1;
        if (!jv_is_missing(p[2]) && need_int(r, what, p[2], &count)) return -1;
        return jj_str_replace(r, s, o, nw, count, out);
    }
    case M_UPPER: return jj_str_case(r, s, JJ_CASE_UPPER, out);
    case M_LOWER:
    case M_CASEFOLD: return jj_str_case(r, s, JJ_CASE_LOWER, out);
    case M_TITLE: return jj_str_case(r, s, JJ_CASE_TITLE, out);
    case M_CAPITALIZE: return jj_str_case(r, s, JJ_CASE_CAPITALIZE, out);
    case M_SWAPCASE: return jj_str_case(r, s, JJ_CASE_SWAP, out);
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX: {
        if (jj_bind(r, what, a, n_find, 3, p)) return -1;
        int64_t pos;
        if (str_find(r, s, p, id == M_RFIND || id == M_RINDEX, &pos)) return -1;
        if (pos < 0 && (id == M_INDEX || id == M_RINDEX)) return jj_fail(r, "ValueError", "substring not found");
        *out = jv_int(pos);
        return 0;
    }
    case M_COUNT: {
        if (jj_bind(r, what, a, n_find, 3, p)) return -1;
        const struct jj_str *sub = NULL;
        if (need_str(r, "argument", p[0], &sub)) return -1;
        int64_t st, en;
        clamp_range(p[1], p[2], (int64_t)s->ncp, &st, &en);
        int64_t count = 0;
        if (st <= en) {
            size_t b0 = jj_utf8_offset(s, (size_t)st), b1 = jj_utf8_offset(s, (size_t)en);
            if (sub->n == 0) count = (int64_t)jj_utf8_count(s->s + b0, b1 - b0) + 1;
            else
                for (const char *q = s->s + b0; (q = memmem(q, (size_t)(s->s + b1 - q), sub->s, sub->n)); q += sub->n) count++;
        }
        *out = jv_int(count);
        return 0;
    }
    case M_JOIN: {
        if (jj_bind(r, what, a, n_one, 1, p)) return -1;
        if (jv_is_missing(p[0])) return jj_fail(r, "TypeError", "join() takes exactly one argument (0 given)");
        struct jj_list *items;
        if (jj_iterate(r, p[0], &items)) return -1;
        struct jj_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            struct jv it = items->v[i];
            if (it.t != JJ_STR) {
                jj_buf_free(&b);
                jv_decref(jv_list(items));
                return jj_fail(r, "TypeError", "sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            }
            if (i) jj_buf_put_str(&b, s);
            if (s->markup && !it.u.s->markup) jj_html_escape(it.u.s, &b);
            else jj_buf_put_str(&b, it.u.s);
        }
        jv_decref(jv_list(items));
        size_t n = b.n;
        struct jj_str *res = jj_buf_take(&b);
        if (!res) return jj_fail_oom(r);
        res->markup = s->markup;
        *out = jv_str(res);
        return jj_charge_out(r, n, out);
    }
    case M_FORMAT: return str_format(r, s, a, out);
    case M_ISDIGIT:
    case M_ISNUMERIC:
    case M_ISDECIMAL: *out = jv_bool(all_cp(s, jj_is_digit)); return 0;
    case M_ISALPHA: *out = jv_bool(all_cp(s, jj_is_alpha)); return 0;
    case M_ISALNUM: *out = jv_bool(all_cp(s, is_alnum_cp)); return 0;
    case M_ISSPACE: *out = jv_bool(all_cp(s, jj_is_space)); return 0;
    case M_ISLOWER: *out = jv_bool(cased_test(s, false)); return 0;
    case M_ISUPPER: *out = jv_bool(cased_test(s, true)); return 0;
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        if (jj_bind(r, what, a, n_pad, 2, p)) return -1;
        int64_t w = 0;
        if (need_int(r, what, p[0], &w)) return -1;
        return str_pad(r, s, w, p[1], id == M_CENTER ? 'c' : id == M_LJUST ? 'l' : 'r', out);
    }
    case M_ZFILL: {
        if (jj_bind(r, what, a, n_pad, 1, p)) return -1;
        int64_t w = 0;
        if (need_int(r, what, p[0], &w)) return -1;
        if (w <= (int64_t)s->ncp) return jj_substr(r, s, 0, s->n, out);
        if (w > (int64_t)JJ_MAX_OUTPUT) return jj_fail_oom(r);
        struct jj_buf b = {0};
        size_t off = 0;
        if (s->n && (s->s[0] == '-' || s->s[0] == '+')) jj_buf_put_range(&b, s, 0, 1), off = 1;
        for (int64_t i = (int64_t)s->ncp; i < w; i++) jj_buf_putc(&b, '0');
        jj_buf_put_range(&b, s, off, s->n - off);
        struct jj_str *res = jj_buf_take(&b);
        if (!res) return jj_fail_oom(r);
        *out = jv_str(res);
        return 0;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (jj_bind(r, what, a, n_one, 1, p)) return -1;
        const struct jj_str *x = NULL;
        if (need_str(r, what, p[0], &x)) return -1;
        if (x->n <= s->n && !memcmp(id == M_REMOVEPREFIX ? s->s : s->s + s->n - x->n, x->s, x->n))
            return jj_substr(r, s, id == M_REMOVEPREFIX ? x->n : 0, s->n - x->n, out);
        return jj_substr(r, s, 0, s->n, out);
    }
    case M_PARTITION:
    case M_RPARTITION: {
        if (jj_bind(r, what, a, n_one, 1, p)) return -1;
        const struct jj_str *sep = NULL;
        if (need_str(r, what, p[0], &sep)) return -1;
        if (sep->n == 0) return jj_fail(r, "ValueError", "empty separator");
        size_t at = SIZE_MAX;
        if (id == M_PARTITION) {
            const char *hit = memmem(s->s, s->n, sep->s, sep->n);
            if (hit) at = (size_t)(hit - s->s);
        } else if (s->n >= sep->n) {
            for (size_t q = s->n - sep->n + 1; q-- > 0;)
                if (!memcmp(s->s + q, sep->s, sep->n)) {
                    at = q;
                    break;
                }
        }
        struct jj_list *l = jj_list_new(JJ_LIST_TUPLE, 3);
        if (!l) return jj_fail_oom(r);
        int rc;
        if (at == SIZE_MAX) {
            if (id == M_PARTITION) rc = push_sub(r, l, s, 0, s->n) || push_sub(r, l, s, 0, 0) || push_sub(r, l, s, 0, 0);
            else rc = push_sub(r, l, s, 0, 0) || push_sub(r, l, s, 0, 0) || push_sub(r, l, s, 0, s->n);
        } else {
            rc = push_sub(r, l, s, 0, at) || push_sub(r, l, s, at, sep->n) || push_sub(r, l, s, at + sep->n, s->n - at - sep->n);
        }
        if (rc) {
            jv_decref(jv_list(l));
            return -1;
        }
        *out = jv_list(l);
        return 0;
    }
    default: return jj_fail(r, "TemplateRuntimeError", "str.%s() is not supported", what);
    }
}

int jj_call_method(struct jj_render *r, const struct jj_method *m, const struct jj_args *a, struct jv *out) {
    struct jv self = m->self;
    struct jv p[3];
    if (jj_charge_scan(r, self, a)) return -1;
    static const char *const n_get[] = {"key", "default"};
    static const char *const n_one[] = {"x"};
    static const char *const n_none[] = {NULL};
    const char *what = METHODS[m->id].name;
    if (self.t == JJ_STR) return call_str_method(r, m->id, self.u.s, a, out);
    switch (m->id) {
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        if (jj_bind(r, what, a, n_none, 0, p)) return -1;
        const struct jj_dict *d = self.u.d;
        uint8_t sub = m->id == M_ITEMS ? JJ_LIST_ITEMS : m->id == M_KEYS ? JJ_LIST_KEYS : JJ_LIST_VALUES;
        struct jj_list *l = jj_list_new(sub, d->n);
        if (!l) return jj_fail_oom(r);
        for (size_t i = 0; i < d->n; i++) {
            struct jv v;
            if (m->id == M_ITEMS) {
                struct jj_list *t = jj_list_new(JJ_LIST_TUPLE, 2);
                if (!t) goto items_oom;
                jj_list_push(t, jv_incref(d->k[i]));
                jj_list_push(t, jv_incref(d->v[i]));
                v = jv_list(t);
            } else {
                v = jv_incref(m->id == M_KEYS ? d->k[i] : d->v[i]);
            }
            if (!jj_list_push(l, v)) goto items_oom;
        }
        *out = jv_list(l);
        return 0;
    items_oom:
        jv_decref(jv_list(l));
        return jj_fail_oom(r);
    }
    case M_GET: {
        if (jj_bind(r, what, a, n_get, 2, p)) return -1;
        if (jv_is_missing(p[0])) return jj_fail(r, "TypeError", "get expected at least 1 argument, got 0");
        if (!jv_hashable(p[0])) return jj_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(p[0]));
        struct jv *v = jj_dict_get(self.u.d, p[0]);
        if (v) *out = jv_incref(*v);
        else *out = jv_is_missing(p[1]) ? jv_none() : jv_incref(p[1]);
        return 0;
    }
    case M_COPY:
        if (jj_bind(r, what, a, n_none, 0, p)) return -1;
        if (self.t == JJ_DICT) {
            struct jj_dict *d = jj_dict_new(self.u.d->n);
            if (!d) return jj_fail_oom(r);
            for (size_t i = 0; i < self.u.d->n; i++)
                if (!jj_dict_set(d, jv_incref(self.u.d->k[i]), jv_incref(self.u.d->v[i]))) {
                    jv_decref(jv_dict(d));
                    return jj_fail_oom(r);
                }
            *out = jv_dict(d);
        } else {
            struct jj_list *l = jj_list_new(JJ_LIST_LIST, self.u.l->n);
            if (!l) return jj_fail_oom(r);
            for (size_t i = 0; i < self.u.l->n; i++) jj_list_push(l, jv_incref(self.u.l->v[i]));
            *out = jv_list(l);
        }
        return 0;
    case M_INDEX:
    case M_COUNT: {
        if (jj_bind(r, what, a, n_one, 1, p)) return -1;
        if (jv_is_missing(p[0])) return jj_fail(r, "TypeError", "%s() takes exactly one argument (0 given)", what);
        int64_t count = 0, first = -1;
        if (jj_charge_items(r, self.u.l->n)) return -1;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (jv_equal(self.u.l->v[i], p[0])) {
                if (first < 0) first = (int64_t)i;
                count++;
            }
        if (m->id == M_INDEX && first < 0) return jj_fail(r, "ValueError", "value is not in list");
        *out = jv_int(m->id == M_INDEX ? first : count);
        return 0;
    }
    case M_CYCLE: {
        if (a->n_kw) return jj_fail(r, "TypeError", "cycle() takes no keyword arguments");
        if (!a->n_pos) return jj_fail(r, "TypeError", "no items for cycling given");
        *out = jv_incref(a->pos[self.u.loop->index0 % a->n_pos]);
        return 0;
    }
    default: return jj_fail(r, "TemplateRuntimeError", "%s.%s() is not supported", jv_type_name(self), what);
    }
}

/* ---- globals ---- */

int jj_global_lookup(const char *name) {
    if (!strcmp(name, "namespace")) return JJ_G_NAMESPACE;
    if (!strcmp(name, "range")) return JJ_G_RANGE;
    if (!strcmp(name, "raise_exception")) return JJ_G_RAISE;
    if (!strcmp(name, "strftime_now")) return JJ_G_STRFTIME;
    if (!strcmp(name, "dict")) return JJ_G_DICT;
    return 0;
}

/* dict(mapping_or_pairs, **kw) into d. */
static int fill_dict(struct jj_render *r, struct jj_dict *d, const struct jj_args *a, const char *what) {
    if (a->n_pos > 1) return jj_fail(r, "TypeError", "%s expected at most 1 argument, got %zu", what, a->n_pos);
    if (a->n_pos == 1) {
        struct jv src = a->pos[0];
        if (src.t == JJ_DICT) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (!jj_dict_set(d, jv_incref(src.u.d->k[i]), jv_incref(src.u.d->v[i]))) return jj_fail_oom(r);
        } else {
            struct jj_list *l;
            if (jj_iterate(r, src, &l)) return -1;
            for (size_t i = 0; i < l->n; i++) {
                struct jv pair = l->v[i];
                if (pair.t != JJ_LIST || pair.u.l->n != 2 || pair.u.l->sub == JJ_LIST_ITER) {
                    jv_decref(jv_list(l));
                    return jj_fail(r, "TypeError", "dictionary update sequence element #%zu has the wrong shape", i);
                }
                if (!jv_hashable(pair.u.l->v[0])) {
                    jv_decref(jv_list(l));
                    return jj_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(pair.u.l->v[0]));
                }
                if (!jj_dict_set(d, jv_incref(pair.u.l->v[0]), jv_incref(pair.u.l->v[1]))) {
                    jv_decref(jv_list(l));
                    return jj_fail_oom(r);
                }
            }
            jv_decref(jv_list(l));
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        struct jj_str *key = jj_str_new(a->kw_names[k], a->kw_lens[k], JJ_PROV_NONE);
        if (!key || !jj_dict_set(d, jv_str(key), jv_incref(a->kw[k]))) return jj_fail_oom(r);
    }
    return 0;
}

int jj_call_global(struct jj_render *r, int id, const struct jj_args *a, struct jv *out) {
    switch (id) {
    case JJ_G_NAMESPACE: {
        struct jj_ns *ns = jj_ns_new(r);
        if (!ns) return -1;
        if (fill_dict(r, ns->attrs, a, "Namespace")) return -1;
        struct jv v = {JJ_NS, 0, 0, {0}};
        v.u.ns = ns;
        *out = v;
        return 0;
    }
    case JJ_G_DICT: {
        struct jj_dict *d = jj_dict_new(a->n_kw);
        if (!d) return jj_fail_oom(r);
        if (fill_dict(r, d, a, "dict")) {
            jv_decref(jv_dict(d));
            return -1;
        }
        *out = jv_dict(d);
        return 0;
    }
    case JJ_G_RANGE: {
        if (a->n_kw) return jj_fail(r, "TypeError", "range() takes no keyword arguments");
        if (a->n_pos < 1 || a->n_pos > 3) return jj_fail(r, "TypeError", "range expected 1 to 3 arguments, got %zu", a->n_pos);
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->n_pos; i++)
            if (need_int(r, "range", a->pos[i], &v[a->n_pos == 1 ? 1 : i])) return -1;
        if (v[2] == 0) return jj_fail(r, "ValueError", "range() arg 3 must not be zero");
        /* in uint64_t: the span of range(-2**63, 2**63-1) does not fit an int64_t */
        uint64_t n = 0;
        if (v[2] > 0 && v[1] > v[0]) n = ((uint64_t)v[1] - (uint64_t)v[0] - 1) / (uint64_t)v[2] + 1;
        if (v[2] < 0 && v[1] < v[0]) n = ((uint64_t)v[0] - (uint64_t)v[1] - 1) / (0 - (uint64_t)v[2]) + 1;
        if (n > JJ_MAX_RANGE)
            return jj_fail(r, "OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JJ_MAX_RANGE);
        if (jj_charge(r, (size_t)n * sizeof(struct jv))) return -1;
        struct jj_list *l = jj_list_new(JJ_LIST_LIST, (size_t)n);
        if (!l) return jj_fail_oom(r);
        /* each element lies between start and stop, so start + i*step does not overflow (as uint64_t: no UB) */
        for (uint64_t i = 0; i < n; i++) jj_list_push(l, jv_int((int64_t)((uint64_t)v[0] + i * (uint64_t)v[2])));
        *out = jv_list(l);
        return 0;
    }
    case JJ_G_RAISE: {
        struct jj_buf b = {0};
        if (a->n_pos) jj_str_of(a->pos[0], &b);
        if (!r->failed) {
            r->failed = true;
            r->raised = true;
            snprintf(r->err, sizeof r->err, "%s", b.p ? b.p : "");
        }
        jj_buf_free(&b);
        return -1;
    }
    case JJ_G_STRFTIME: {
        if (a->n_pos != 1 || a->n_kw) return jj_fail(r, "TypeError", "strftime_now() takes exactly one argument");
        if (a->pos[0].t != JJ_STR) return jj_fail(r, "TypeError", "strftime() argument 1 must be str, not %s", jv_type_name(a->pos[0]));
        const struct jj_str *fmt = a->pos[0].u.s;
        if (memchr(fmt->s, '\0', fmt->n)) return jj_fail(r, "ValueError", "embedded null character");
        time_t t = (time_t)r->now;
        struct tm tm;
        if (!gmtime_r(&t, &tm)) return jj_fail(r, "OverflowError", "timestamp out of range");
        locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        if (!c) return jj_fail_oom(r);
        size_t cap = fmt->n * 4 + 64;
        char *buf = NULL;
        size_t len = 0;
        for (int tries = 0; tries < 6; tries++, cap *= 4) {
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
            len = strftime_l(buf, cap, fmt->s, &tm, c);
            if (len > 0 || fmt->n == 0) break;
        }
        freelocale(c);
        if (!buf) return jj_fail_oom(r);
        struct jj_str *s = jj_str_new(buf, len, JJ_PROV_NONE);
        free(buf);
        if (!s) return jj_fail_oom(r);
        *out = jv_str(s);
        return 0;
    }
    }
    return jj_fail(r, "TypeError", "not callable");
}
