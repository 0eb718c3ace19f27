/*
 * jinja_str.c — Python's str semantics for the template interpreter: strings
 * with provenance, the growable buffer, UTF-8, Unicode whitespace and
 * printability, str()/repr() of every value, float repr (shortest round
 * trip), json.dumps as transformers' tojson calls it, and MarkupSafe's escape.
 *
 * Unicode tables here are small approximations of Python's: whitespace is
 * exact (str.isspace), printability covers controls, separators, format
 * characters, surrogates and private use (not unassigned code points), case
 * mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- UTF-8 ---- */

uint32_t jj_utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) {
        *len = 0;
        return 0;
    }
    unsigned c = u[0];
    size_t need;
    uint32_t cp;
    if (c < 0x80) {
        *len = 1;
        return c;
    } else if (c >= 0xC0 && c < 0xE0) need = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c < 0xF0) need = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c < 0xF8) need = 3, cp = c & 0x07;
    else {
        *len = 1; /* a stray byte stands for itself */
        return c;
    }
    if (need >= n) {
        *len = 1;
        return c;
    }
    for (size_t i = 1; i <= need; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    *len = need + 1;
    return cp;
}

size_t jj_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    } else if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jj_utf8_count(const char *s, size_t n) {
    size_t count = 0, i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
        } else {
            size_t l;
            jj_utf8_decode(s + i, n - i, &l);
            i += l;
        }
        count++;
    }
    return count;
}

size_t jj_utf8_offset(const struct jj_str *s, size_t cp) {
    if (s->ncp == s->n) return cp < s->n ? cp : s->n;
    size_t i = 0;
    while (cp > 0 && i < s->n) {
        size_t l;
        jj_utf8_decode(s->s + i, s->n - i, &l);
        i += l;
        cp--;
    }
    return i;
}

bool jj_is_valid_utf8(const char *s, size_t n, size_t *bad_at) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t l;
        uint32_t cp = jj_utf8_decode(s + i, n - i, &l);
        bool ok = l > 1;
        if (ok && l == 2 && cp < 0x80) ok = false;
        if (ok && l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) ok = false;
        if (ok && l == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ok = false;
        if (!ok) {
            if (bad_at) *bad_at = i;
            return false;
        }
        i += l;
    }
    return true;
}

bool jj_is_space(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool jj_is_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
    if (c < 0x600) return true;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x890 || c == 0x891 ||
        c == 0x8E2 || c == 0x180E || c == 0x1680)
        return false;
    if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) ||
        (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
        return false;
    if ((c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF)
        return false;
    if (c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) || (c >= 0x1BCA0 && c <= 0x1BCA3) ||
        (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F) || c >= 0xF0000)
        return false;
    return true;
}

uint32_t jj_to_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x131) return 'I';
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
        if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
        if (c == 0x17F) return 'S';
        return (c & 1) ? c - 1 : c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

uint32_t jj_to_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x130) return 'i';
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
        if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
        return (c & 1) ? c : c + 1;
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

bool jj_is_alpha(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
    if (c < 0xC0 || c == 0xD7 || c == 0xF7) return false;
    if (jj_is_space(c) || !jj_is_printable(c)) return false;
    if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFF0F) ||
        (c >= 0x1F000 && c <= 0x1FAFF))
        return false; /* punctuation, symbols, arrows, emoji */
    return true;
}

bool jj_is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ---- strings ---- */

struct jj_str *jj_str_new(const char *s, size_t n, uint8_t prov) {
    if (n > JJ_MAX_OUTPUT) return NULL;
    struct jj_str *r = malloc(sizeof *r + n + 1);
    if (!r) return NULL;
    r->rc = 1;
    r->prov = n ? prov : JJ_PROV_NONE;
    r->markup = false;
    r->n = n;
    r->bits = NULL;
    if (n) memcpy(r->s, s, n);
    r->s[n] = '\0';
    r->ncp = jj_utf8_count(r->s, n);
    return r;
}

static bool bits_get(const uint8_t *bits, size_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

static void bits_set_range(uint8_t *bits, size_t from, size_t n) {
    size_t i = from, end = from + n;
    while (i < end && (i & 7)) bits[i >> 3] |= (uint8_t)(1u << (i & 7)), i++;
    while (i + 8 <= end) bits[i >> 3] = 0xFF, i += 8;
    while (i < end) bits[i >> 3] |= (uint8_t)(1u << (i & 7)), i++;
}

struct jj_str *jj_str_new_bits(const char *s, size_t n, const uint8_t *bits) {
    if (!bits) return jj_str_new(s, n, JJ_PROV_NONE);
    size_t set = 0;
    for (size_t i = 0; i < n; i++) set += bits_get(bits, i);
    if (set == 0) return jj_str_new(s, n, JJ_PROV_NONE);
    if (set == n) return jj_str_new(s, n, JJ_PROV_ALL);
    struct jj_str *r = jj_str_new(s, n, JJ_PROV_MIXED);
    if (!r) return NULL;
    r->bits = calloc((n + 7) / 8, 1);
    if (!r->bits) {
        free(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (bits_get(bits, i)) r->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    return r;
}

bool jj_str_byte_input(const struct jj_str *s, size_t i) {
    if (s->prov == JJ_PROV_ALL) return true;
    if (s->prov == JJ_PROV_MIXED) return bits_get(s->bits, i);
    return false;
}

bool jj_str_any_input(const struct jj_str *s) { return s->prov != JJ_PROV_NONE; }

void jj_str_decref(struct jj_str *s) {
    if (!s || s->rc == JJ_IMMORTAL) return;
    if (--s->rc == 0) {
        free(s->bits);
        free(s);
    }
}

/* ---- the buffer ---- */

static bool buf_reserve(struct jj_buf *b, size_t add) {
    if (b->oom) return false;
    size_t max = b->max ? b->max : JJ_MAX_OUTPUT;
    if (add > max || b->n + add > max) {
        b->oom = true;
        return false;
    }
    size_t need = b->n + add + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    if (b->bits) {
        uint8_t *bits = realloc(b->bits, (cap + 7) / 8);
        if (!bits) {
            b->oom = true;
            return false;
        }
        memset(bits + (b->cap + 7) / 8, 0, (cap + 7) / 8 - (b->cap + 7) / 8);
        b->bits = bits;
    }
    b->cap = cap;
    return true;
}

static bool buf_bits(struct jj_buf *b) {
    if (b->bits) return true;
    b->bits = calloc((b->cap + 7) / 8 + 1, 1);
    if (!b->bits) b->oom = true;
    return b->bits != NULL;
}

void jj_buf_put(struct jj_buf *b, const char *s, size_t n, bool input) {
    if (!buf_reserve(b, n)) return;
    if (input && n && !buf_bits(b)) return;
    if (n) memcpy(b->p + b->n, s, n);
    if (input && n) bits_set_range(b->bits, b->n, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jj_buf_putc(struct jj_buf *b, char c) { jj_buf_put(b, &c, 1, false); }
void jj_buf_puts(struct jj_buf *b, const char *s) { jj_buf_put(b, s, strlen(s), false); }

void jj_buf_printf(struct jj_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    jj_buf_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1, false);
}

void jj_buf_put_range(struct jj_buf *b, const struct jj_str *s, size_t off, size_t n) {
    if (s->prov != JJ_PROV_MIXED) {
        jj_buf_put(b, s->s + off, n, s->prov == JJ_PROV_ALL);
        return;
    }
    size_t start = b->n;
    jj_buf_put(b, s->s + off, n, false);
    if (b->oom || !buf_bits(b)) return;
    for (size_t i = 0; i < n; i++)
        if (bits_get(s->bits, off + i)) b->bits[(start + i) >> 3] |= (uint8_t)(1u << ((start + i) & 7));
}

void jj_buf_put_str(struct jj_buf *b, const struct jj_str *s) { jj_buf_put_range(b, s, 0, s->n); }

void jj_buf_mark_all(struct jj_buf *b, size_t from) {
    if (b->oom || from >= b->n || !buf_bits(b)) return;
    bits_set_range(b->bits, from, b->n - from);
}

bool jj_buf_any_input(const struct jj_buf *b, size_t from) {
    if (!b->bits) return false;
    for (size_t i = from; i < b->n; i++)
        if (bits_get(b->bits, i)) return true;
    return false;
}

struct jj_str *jj_buf_take(struct jj_buf *b) {
    struct jj_str *s = b->oom ? NULL : jj_str_new_bits(b->p ? b->p : "", b->n, b->bits);
    jj_buf_free(b);
    return s;
}

void jj_buf_free(struct jj_buf *b) {
    free(b->p);
    free(b->bits);
    memset(b, 0, sizeof *b);
}

/* ---- numbers ---- */

void jj_float_repr(double f, struct jj_buf *b) {
    if (isnan(f)) {
        jj_buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jj_buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        jj_buf_puts(b, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e±XX → digits and the decimal point position */
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') neg = true, q++;
    char digits[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 20) digits[nd++] = *q;
    int exp10 = (*q == 'e') ? atoi(q + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (decpt > 16 || decpt < -3) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -decpt; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else if (decpt >= nd) {
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
        for (int i = nd; i < decpt; i++) out[k++] = '0';
        out[k++] = '.';
        out[k++] = '0';
    } else {
        for (int i = 0; i < decpt; i++) out[k++] = digits[i];
        out[k++] = '.';
        for (int i = decpt; i < nd; i++) out[k++] = digits[i];
    }
    jj_buf_put(b, out, (size_t)k, false);
}

/* ---- str() and repr() ---- */

static void repr_string(const struct jj_str *s, struct jj_buf *b) {
    bool has_sq = memchr(s->s, '\'', s->n) != NULL, has_dq = memchr(s->s, '"', s->n) != NULL;
    char quote = (has_sq && !has_dq) ? '"' : '\'';
    if (s->markup) jj_buf_puts(b, "Markup(");
    jj_buf_putc(b, quote);
    size_t i = 0;
    while (i < s->n && !b->oom) {
        size_t l;
        uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &l);
        if (c == (uint32_t)quote || c == '\\') {
            char e[2] = {'\\', (char)c};
            jj_buf_put(b, e, 2, false);
        } else if (c == '\t') jj_buf_puts(b, "\\t");
        else if (c == '\n') jj_buf_puts(b, "\\n");
        else if (c == '\r') jj_buf_puts(b, "\\r");
        else if (c < 0x20 || c == 0x7F) jj_buf_printf(b, "\\x%02x", c);
        else if (c < 0x7F) jj_buf_putc(b, (char)c);
        else if (l == 1 && c >= 0x80) jj_buf_printf(b, "\\x%02x", c); /* a stray byte */
        else if (jj_is_printable(c)) jj_buf_put(b, s->s + i, l, false);
        else if (c <= 0xFF) jj_buf_printf(b, "\\x%02x", c);
        else if (c <= 0xFFFF) jj_buf_printf(b, "\\u%04x", c);
        else jj_buf_printf(b, "\\U%08x", c);
        i += l;
    }
    jj_buf_putc(b, quote);
    if (s->markup) jj_buf_putc(b, ')');
}

static const char *global_name(int id) {
    switch (id) {
    case JJ_G_NAMESPACE: return "<class 'jinja2.utils.Namespace'>";
    case JJ_G_RANGE: return "<class 'range'>";
    case JJ_G_DICT: return "<class 'dict'>";
    case JJ_G_RAISE: return "<function raise_exception>";
    case JJ_G_STRFTIME: return "<function strftime_now>";
    }
    return "<function>";
}

/* repr into b; *any set when an input string was written (the caller marks the whole text). */
static void repr_inner(struct jv v, struct jj_buf *b, bool *any, size_t depth);

static void repr_seq(const struct jj_list *l, struct jj_buf *b, bool *any, size_t depth, const char *open,
                     const char *close) {
    jj_buf_puts(b, open);
    for (size_t i = 0; i < l->n && !b->oom; i++) {
        if (i) jj_buf_puts(b, ", ");
        repr_inner(l->v[i], b, any, depth + 1);
    }
    if (l->sub == JJ_LIST_TUPLE && l->n == 1) jj_buf_putc(b, ',');
    jj_buf_puts(b, close);
}

static void repr_dict(const struct jj_dict *d, struct jj_buf *b, bool *any, size_t depth) {
    jj_buf_putc(b, '{');
    for (size_t i = 0; i < d->n && !b->oom; i++) {
        if (i) jj_buf_puts(b, ", ");
        repr_inner(d->k[i], b, any, depth + 1);
        jj_buf_puts(b, ": ");
        repr_inner(d->v[i], b, any, depth + 1);
    }
    jj_buf_putc(b, '}');
}

static void repr_inner(struct jv v, struct jj_buf *b, bool *any, size_t depth) {
    if (depth > JJ_MAX_VALUE_DEPTH + 8) {
        b->oom = true;
        return;
    }
    switch (v.t) {
    case JJ_UNDEF: jj_buf_puts(b, "Undefined"); return;
    case JJ_NONE: jj_buf_puts(b, "None"); return;
    case JJ_BOOL: jj_buf_puts(b, v.u.b ? "True" : "False"); return;
    case JJ_INT: jj_buf_printf(b, "%lld", (long long)v.u.i); return;
    case JJ_FLOAT: jj_float_repr(v.u.f, b); return;
    case JJ_STR:
        if (jj_str_any_input(v.u.s)) *any = true;
        repr_string(v.u.s, b);
        return;
    case JJ_LIST:
        switch (v.u.l->sub) {
        case JJ_LIST_LIST: repr_seq(v.u.l, b, any, depth, "[", "]"); return;
        case JJ_LIST_TUPLE: repr_seq(v.u.l, b, any, depth, "(", ")"); return;
        case JJ_LIST_ITER: jj_buf_puts(b, "<generator object>"); return;
        case JJ_LIST_ITEMS: repr_seq(v.u.l, b, any, depth, "dict_items([", "])"); return;
        case JJ_LIST_KEYS: repr_seq(v.u.l, b, any, depth, "dict_keys([", "])"); return;
        case JJ_LIST_VALUES: repr_seq(v.u.l, b, any, depth, "dict_values([", "])"); return;
        }
        return;
    case JJ_DICT: repr_dict(v.u.d, b, any, depth); return;
    case JJ_NS:
        jj_buf_puts(b, "<Namespace ");
        if (v.u.ns->visiting) {
            jj_buf_puts(b, "{...}");
        } else {
            v.u.ns->visiting = true;
            repr_dict(v.u.ns->attrs, b, any, depth);
            v.u.ns->visiting = false;
        }
        jj_buf_putc(b, '>');
        return;
    case JJ_MACRO: jj_buf_printf(b, "<Macro '%s'>", v.u.macro->name); return;
    case JJ_FUNC: jj_buf_puts(b, global_name(v.sub)); return;
    case JJ_METHOD:
        if (v.u.m->self.t == JJ_LOOP) jj_buf_printf(b, "<bound method LoopContext.%s>", jj_method_name(v.u.m->id));
        else jj_buf_printf(b, "<built-in method %s of %s object>", jj_method_name(v.u.m->id), jv_type_name(v.u.m->self));
        return;
    case JJ_LOOP: jj_buf_printf(b, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->length); return;
    }
}

void jj_repr_of(struct jv v, struct jj_buf *b) {
    size_t start = b->n;
    bool any = false;
    repr_inner(v, b, &any, 0);
    if (any) jj_buf_mark_all(b, start);
}

void jj_str_of(struct jv v, struct jj_buf *b) {
    switch (v.t) {
    case JJ_UNDEF: return;
    case JJ_STR: jj_buf_put_str(b, v.u.s); return;
    default: jj_repr_of(v, b); return;
    }
}

/* ---- json.dumps ---- */

static void json_write_string(const char *s, size_t n, bool ascii, struct jj_buf *b) {
    jj_buf_putc(b, '"');
    size_t i = 0, run = 0; /* run: start of bytes copied as they are */
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        size_t l = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7F)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (ascii && c >= 0x80) {
            uint32_t cp = jj_utf8_decode(s + i, n - i, &l);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            esc = tmp;
        }
        if (esc) {
            jj_buf_put(b, s + run, i - run, false);
            jj_buf_puts(b, esc);
            i += l;
            run = i;
        } else {
            i++;
        }
    }
    jj_buf_put(b, s + run, n - run, false);
    jj_buf_putc(b, '"');
}

static void json_newline(const struct jj_json_opts *o, size_t level, struct jj_buf *b) {
    jj_buf_putc(b, '\n');
    for (size_t i = 0; i < level && !b->oom; i++) jj_buf_put(b, o->indent, o->indent_len, false);
}

/* A dict key as json.dumps writes it; false when the key type is not allowed. */
static bool json_key(struct jv k, const struct jj_json_opts *o, struct jj_buf *b, bool *any) {
    switch (k.t) {
    case JJ_STR:
        if (jj_str_any_input(k.u.s)) *any = true;
        json_write_string(k.u.s->s, k.u.s->n, o->ensure_ascii, b);
        return true;
    case JJ_INT: jj_buf_printf(b, "\"%lld\"", (long long)k.u.i); return true;
    case JJ_BOOL: jj_buf_puts(b, k.u.b ? "\"true\"" : "\"false\""); return true;
    case JJ_NONE: jj_buf_puts(b, "\"null\""); return true;
    case JJ_FLOAT:
        jj_buf_putc(b, '"');
        if (isnan(k.u.f)) jj_buf_puts(b, "NaN");
        else if (isinf(k.u.f)) jj_buf_puts(b, k.u.f < 0 ? "-Infinity" : "Infinity");
        else jj_float_repr(k.u.f, b);
        jj_buf_putc(b, '"');
        return true;
    default: return false;
    }
}

static int key_cmp(const void *a, const void *b) {
    const struct jv *x = *(const struct jv *const *)a, *y = *(const struct jv *const *)b;
    int c = 0;
    jv_compare(*x, *y, &c);
    return c;
}

static bool json_inner(struct jv v, const struct jj_json_opts *o, struct jj_buf *b, const char **bad, size_t level,
                       bool *any) {
    if (level > JJ_MAX_VALUE_DEPTH + 8) {
        *bad = "recursion";
        return false;
    }
    switch (v.t) {
    case JJ_NONE: jj_buf_puts(b, "null"); return true;
    case JJ_BOOL: jj_buf_puts(b, v.u.b ? "true" : "false"); return true;
    case JJ_INT: jj_buf_printf(b, "%lld", (long long)v.u.i); return true;
    case JJ_FLOAT:
        if (isnan(v.u.f)) jj_buf_puts(b, "NaN");
        else if (isinf(v.u.f)) jj_buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jj_float_repr(v.u.f, b);
        return true;
    case JJ_STR:
        if (jj_str_any_input(v.u.s)) *any = true;
        json_write_string(v.u.s->s, v.u.s->n, o->ensure_ascii, b);
        return true;
    case JJ_LIST: {
        const struct jj_list *l = v.u.l;
        if (l->sub != JJ_LIST_LIST && l->sub != JJ_LIST_TUPLE) {
            *bad = l->sub == JJ_LIST_ITER    ? "generator"
                   : l->sub == JJ_LIST_ITEMS ? "dict_items"
                   : l->sub == JJ_LIST_KEYS  ? "dict_keys"
                                             : "dict_values";
            return false;
        }
        if (l->n == 0) {
            jj_buf_puts(b, "[]");
            return true;
        }
        jj_buf_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jj_buf_put(b, o->item_sep, o->item_sep_len, false);
            if (o->indent) json_newline(o, level + 1, b);
            if (!json_inner(l->v[i], o, b, bad, level + 1, any)) return false;
            if (b->oom) return true;
        }
        if (o->indent) json_newline(o, level, b);
        jj_buf_putc(b, ']');
        return true;
    }
    case JJ_DICT: {
        const struct jj_dict *d = v.u.d;
        if (d->n == 0) {
            jj_buf_puts(b, "{}");
            return true;
        }
        const struct jv **order = malloc(d->n * sizeof *order);
        if (!order) {
            b->oom = true;
            return true;
        }
        for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
        if (o->sort_keys) {
            for (size_t i = 1; i < d->n; i++) {
                int c;
                if (!jv_compare(d->k[0], d->k[i], &c)) {
                    free(order);
                    *bad = "mixed keys";
                    return false;
                }
            }
            qsort(order, d->n, sizeof *order, key_cmp);
        }
        jj_buf_putc(b, '{');
        bool ok = true;
        for (size_t i = 0; i < d->n && ok && !b->oom; i++) {
            size_t idx = (size_t)(order[i] - d->k);
            if (i) jj_buf_put(b, o->item_sep, o->item_sep_len, false);
            if (o->indent) json_newline(o, level + 1, b);
            if (!json_key(d->k[idx], o, b, any)) {
                *bad = "key";
                ok = false;
                break;
            }
            jj_buf_put(b, o->key_sep, o->key_sep_len, false);
            ok = json_inner(d->v[idx], o, b, bad, level + 1, any);
        }
        free(order);
        if (!ok) return false;
        if (o->indent) json_newline(o, level, b);
        jj_buf_putc(b, '}');
        return true;
    }
    case JJ_UNDEF: *bad = "Undefined"; return false;
    case JJ_NS: *bad = "Namespace"; return false;
    case JJ_MACRO: *bad = "Macro"; return false;
    case JJ_FUNC: *bad = "function"; return false;
    case JJ_METHOD: *bad = "builtin_function_or_method"; return false;
    case JJ_LOOP: *bad = "LoopContext"; return false;
    }
    *bad = "object";
    return false;
}

bool jj_json_dump(struct jv v, const struct jj_json_opts *o, struct jj_buf *b, const char **bad) {
    size_t start = b->n;
    bool any = false;
    if (!json_inner(v, o, b, bad, 0, &any)) return false;
    if (any) jj_buf_mark_all(b, start);
    return true;
}

void jj_html_escape(const struct jj_str *s, struct jj_buf *b) {
    bool input = jj_str_any_input(s);
    size_t run = 0;
    for (size_t i = 0; i < s->n; i++) {
        const char *e = NULL;
        switch (s->s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        default: break;
        }
        if (!e) continue;
        jj_buf_put_range(b, s, run, i - run);
        jj_buf_put(b, e, strlen(e), input);
        run = i + 1;
    }
    jj_buf_put_range(b, s, run, s->n - run);
}
