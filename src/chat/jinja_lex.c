/*
 * jinja_lex.c — template source → tokens, as jinja2's lexer does it under
 * transformers' settings (trim_blocks, lstrip_blocks, keep_trailing_newline
 * off):
 *
 *   - newlines (\r\n, \r, \n) become \n, and one trailing newline is dropped;
 *   - "{%-" / "{{-" / "{#-" strip all whitespace (Python's, Unicode) before
 *     the tag; "-%}" / "-}}" / "-#}" strip all whitespace after it;
 *   - lstrip_blocks: spaces and tabs between the start of a line and a block
 *     or comment tag are removed ("{%+" keeps them; not for "{{");
 *   - trim_blocks: the first newline after a block or comment tag is removed
 *     ("+%}" keeps it; not after "}}");
 *   - inside a tag, "%}" / "}}" end it only when brackets are balanced.
 *
 * Tokens point into an arena-owned copy of the normalized source; string
 * literals are unescaped with Python's rules (\n \t \xhh \uXXXX \UXXXXXXXX
 * \ooo, unknown escapes kept with their backslash).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

struct lexer {
    struct jj_arena *a;
    const char *s; /* normalized source */
    size_t n, pos;
    uint32_t line;
    struct jj_token *toks;
    size_t n_toks, cap_toks;
    bool line_starting;
    char bal[JJ_MAX_PARSE_DEPTH];
    size_t n_bal;
};

static enum dj_status lex_fail(const struct lexer *L, size_t at, const char *fmt, const char *arg) {
    uint32_t line = 1;
    size_t col = 1;
    for (size_t i = 0; i < at && i < L->n; i++) {
        if (L->s[i] == '\n') line++, col = 1;
        else col++;
    }
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return dj_fail(DJ_ERR_INVALID, "template: line %u, column %zu: %s", line, col, msg);
}

static bool push_tok(struct lexer *L, uint8_t type, const char *text, size_t len, size_t off) {
    if (L->n_toks == L->cap_toks) {
        size_t cap = L->cap_toks ? L->cap_toks * 2 : 256;
        struct jj_token *t = realloc(L->toks, cap * sizeof *t);
        if (!t) return false;
        L->toks = t, L->cap_toks = cap;
    }
    struct jj_token *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = L->line;
    t->text = text;
    t->len = len;
    t->off = off;
    return true;
}

static size_t count_nl(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Length of the Python whitespace at s[0..n) (\s*). */
static size_t span_space(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t l;
        uint32_t c = jj_utf8_decode(s + i, n - i, &l);
        if (!jj_is_space(c)) break;
        i += l;
    }
    return i;
}

/* Length of text[0..n) after Python's rstrip(). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80 && end - start < 4) start--;
        size_t l;
        uint32_t c = jj_utf8_decode(s + start, end - start, &l);
        if (start + l != end || !jj_is_space(c)) {
            if ((unsigned char)s[end - 1] < 0x80 && jj_is_space((unsigned char)s[end - 1])) {
                end--;
                continue;
            }
            break;
        }
        end = start;
    }
    return end;
}

/* Emits the text before a tag, applying "-" / lstrip_blocks. */
static bool emit_text(struct lexer *L, size_t start, size_t end, char sign, bool lstrip_ok, uint8_t type) {
    const char *t = L->s + start;
    size_t n = end - start, keep = n;
    if (sign == '-') {
        keep = rstrip_len(t, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos > 0 && t[l_pos - 1] != '\n') l_pos--;
        if (l_pos > 0 || L->line_starting) {
            bool ws = true;
            for (size_t i = l_pos; i < n; i++)
                if (t[i] != ' ' && t[i] != '\t') ws = false;
            if (ws) keep = l_pos;
        }
    }
    if (keep && !push_tok(L, type, t, keep, start)) return false;
    L->line += (uint32_t)count_nl(t, n);
    return true;
}

/* Python's unicode-escape decoding of a string literal body. */
static enum dj_status unescape(struct lexer *L, const char *s, size_t n, size_t off, char **out, size_t *out_n) {
    char *o = jj_arena_alloc(L->a, n * 2 + 1); /* \ooo (4 bytes) → at most 2 */
    if (!o) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                int d = 0;
                while (d < 3 && i < n && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + (uint32_t)(s[i++] - '0'), d++;
                i--;
                k += jj_utf8_encode(cp, o + k);
                continue;
            }
            o[k++] = '\\';
            o[k++] = c;
            continue;
        }
        for (int d = 0; d < hex; d++) {
            char h = (i + 1 + (size_t)d < n) ? s[i + 1 + (size_t)d] : 0;
            int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (v < 0) return lex_fail(L, off + i, "truncated \\%s escape in a string", c == 'x' ? "xXX" : c == 'u' ? "uXXXX" : "UXXXXXXXX");
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) return lex_fail(L, off + i, "illegal Unicode character in a string%s", "");
        i += (size_t)hex;
        k += jj_utf8_encode(cp, o + k);
    }
    o[k] = '\0';
    *out = o;
    *out_n = k;
    return DJ_OK;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* End of (\d+_)*\d+ starting at s[i], or 0 when there is no digit there. */
static size_t digits_end(const char *s, size_t n, size_t i) {
    size_t ok = 0;
    while (i < n && is_digit(s[i])) {
        while (i < n && is_digit(s[i])) i++;
        ok = i;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) i++;
        else break;
    }
    return ok;
}

/* jinja2's float_re: digits ((\.digits)?e[+-]?digits | \.digits); length or 0. */
static size_t match_float(const char *s, size_t n) {
    size_t int_end = digits_end(s, n, 0);
    if (!int_end) return 0;
    size_t frac_end = 0;
    if (int_end + 1 < n && s[int_end] == '.' && is_digit(s[int_end + 1])) frac_end = digits_end(s, n, int_end + 1);
    size_t after = frac_end ? frac_end : int_end;
    if (after < n && (s[after] == 'e' || s[after] == 'E')) {
        size_t e = after + 1;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        size_t exp_end = digits_end(s, n, e);
        if (exp_end) return exp_end;
    }
    return frac_end;
}

/* jinja2's integer_re: 0b / 0o / 0x forms, [1-9](_?\d)*, 0(_?0)*; length or 0. */
static size_t match_int(const char *s, size_t n) {
    if (!n || !is_digit(s[0])) return 0;
    if (s[0] == '0' && n > 1 && strchr("bBoOxX", s[1]) && s[1]) {
        char k = (char)(s[1] | 0x20);
        size_t j = 2, last = 0;
        for (;;) {
            size_t q = j;
            if (q < n && s[q] == '_') q++;
            /* digits tested on the raw byte: "| 0x20" folds only letters ('\x10' | 0x20 is '0') */
            char raw = q < n ? s[q] : 0, c = (char)(raw | 0x20);
            bool ok = k == 'b' ? (raw == '0' || raw == '1')
                    : k == 'o' ? (raw >= '0' && raw <= '7')
                               : (is_digit(raw) || (c >= 'a' && c <= 'f'));
            if (!ok) break;
            j = q + 1;
            last = j;
        }
        if (last) return last;
    }
    size_t j = 1;
    if (s[0] == '0') {
        while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0'))) j += s[j] == '_' ? 2 : 1;
        return j;
    }
    while (j < n && (is_digit(s[j]) || (s[j] == '_' && j + 1 < n && is_digit(s[j + 1])))) j += s[j] == '_' ? 2 : 1;
    return j;
}

static enum dj_status number_token(struct lexer *L, size_t len, bool is_float) {
    char tmp[128];
    size_t k = 0;
    const char *s = L->s + L->pos;
    for (size_t i = 0; i < len && k + 1 < sizeof tmp; i++)
        if (s[i] != '_') tmp[k++] = s[i];
    tmp[k] = '\0';
    if (len >= sizeof tmp) return lex_fail(L, L->pos, "number literal too long%s", "");
    if (!push_tok(L, is_float ? JT_FLOAT : JT_INT, s, len, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
    struct jj_token *t = &L->toks[L->n_toks - 1];
    if (is_float) {
        t->fval = strtod(tmp, NULL);
        return DJ_OK;
    }
    int base = 10;
    const char *digits = tmp;
    if (tmp[0] == '0' && (tmp[1] | 0x20) == 'b') base = 2, digits = tmp + 2;
    else if (tmp[0] == '0' && (tmp[1] | 0x20) == 'o') base = 8, digits = tmp + 2;
    else if (tmp[0] == '0' && (tmp[1] | 0x20) == 'x') base = 16, digits = tmp + 2;
    uint64_t v = 0;
    for (const char *p = digits; *p; p++) {
        int d = is_digit(*p) ? *p - '0' : (*p | 0x20) - 'a' + 10;
        if (d < 0 || d >= base) return lex_fail(L, L->pos, "invalid digit in an integer literal%s", ""); /* match_int forbids it */
        if (v > (uint64_t)(INT64_MAX - d) / (uint64_t)base) return lex_fail(L, L->pos, "integer literal too large%s", "");
        v = v * (uint64_t)base + (uint64_t)d;
    }
    t->ival = (int64_t)v;
    return DJ_OK;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {% %} or {{ }} up to the end tag. */
static enum dj_status lex_tag(struct lexer *L, bool block) {
    L->n_bal = 0;
    for (;;) {
        const char *s = L->s + L->pos;
        size_t rest = L->n - L->pos;
        if (rest == 0) return lex_fail(L, L->pos, "unexpected end of template, expected '%s'", block ? "end of statement block" : "end of print statement");
        if (L->n_bal == 0) {
            size_t m = 0;
            if (block) {
                if (rest >= 3 && !memcmp(s, "+%}", 3)) m = 3;
                else if (rest >= 3 && !memcmp(s, "-%}", 3)) m = 3 + span_space(s + 3, rest - 3);
                else if (rest >= 2 && !memcmp(s, "%}", 2)) m = (rest >= 3 && s[2] == '\n') ? 3 : 2;
            } else {
                if (rest >= 3 && !memcmp(s, "-}}", 3)) m = 3 + span_space(s + 3, rest - 3);
                else if (rest >= 2 && !memcmp(s, "}}", 2)) m = 2;
            }
            if (m) {
                if (!push_tok(L, block ? JT_BLOCK_END : JT_VAR_END, s, m, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
                L->line += (uint32_t)count_nl(s, m);
                L->line_starting = s[m - 1] == '\n';
                L->pos += m;
                return DJ_OK;
            }
        }
        size_t sp = span_space(s, rest);
        if (sp) {
            L->line += (uint32_t)count_nl(s, sp);
            L->pos += sp;
            continue;
        }
        size_t m = (L->pos > 0 && L->s[L->pos - 1] == '.') ? 0 : match_float(s, rest);
        bool is_float = m != 0;
        if (!m) m = match_int(s, rest);
        if (m) {
            enum dj_status st = number_token(L, m, is_float);
            if (st) return st;
            L->pos += m;
            continue;
        }
        char c = s[0];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = 1;
            while (j < rest && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') || s[j] == '_' || is_digit(s[j]))) j++;
            if (!push_tok(L, JT_NAME, s, j, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
            L->pos += j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = 1;
            while (j < rest && s[j] != c) j += (s[j] == '\\' && j + 1 < rest) ? 2 : 1;
            if (j >= rest) return lex_fail(L, L->pos, "unexpected char %s", c == '\'' ? "\"'\"" : "'\"'");
            char *body = NULL;
            size_t blen = 0;
            enum dj_status st = unescape(L, s + 1, j - 1, L->pos + 1, &body, &blen);
            if (st) return st;
            if (!push_tok(L, JT_STRING, body, blen, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
            L->line += (uint32_t)count_nl(s, j + 1);
            L->pos += j + 1;
            continue;
        }
        size_t olen = 0;
        for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++)
            if (rest >= 2 && !memcmp(s, OPS2[k], 2)) olen = 2;
        if (!olen && c && strchr(OPS1, c)) olen = 1;
        if (!olen) {
            char ch[8] = {0};
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7F) snprintf(ch, sizeof ch, "'%c'", c);
            else snprintf(ch, sizeof ch, "\\x%02x", (unsigned char)c);
            return lex_fail(L, L->pos, "unexpected char %s", ch);
        }
        if (olen == 1 && (c == '(' || c == '[' || c == '{')) {
            if (L->n_bal >= sizeof L->bal) return lex_fail(L, L->pos, "brackets nested too deeply%s", "");
            L->bal[L->n_bal++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (olen == 1 && (c == ')' || c == ']' || c == '}')) {
            char msg[8] = {c, 0};
            if (!L->n_bal) return lex_fail(L, L->pos, "unexpected '%s'", msg);
            if (L->bal[L->n_bal - 1] != c) return lex_fail(L, L->pos, "unexpected '%s'", msg);
            L->n_bal--;
        }
        if (!push_tok(L, JT_OP, s, olen, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
        L->pos += olen;
    }
}

/* At s ("{%"), a raw-begin tag "{%[-+]?\s*raw\s*(-%}\s*|%})": its length, or 0. */
static size_t match_raw_begin(const char *s, size_t n, char *sign) {
    size_t i = 2;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    i += span_space(s + i, n - i);
    if (n - i < 3 || memcmp(s + i, "raw", 3)) return 0;
    i += 3;
    i += span_space(s + i, n - i);
    if (n - i >= 3 && !memcmp(s + i, "-%}", 3)) return i + 3 + span_space(s + i + 3, n - i - 3);
    if (n - i >= 2 && !memcmp(s + i, "%}", 2)) return i + 2;
    return 0;
}

/* From pos, the end of a raw block "{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)". */
static bool find_endraw(const struct lexer *L, size_t from, size_t *at, size_t *len, char *sign) {
    for (size_t p = from; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%') continue;
        const char *s = L->s + p;
        size_t n = L->n - p, i = 2;
        *sign = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
        i += span_space(s + i, n - i);
        if (n - i < 6 || memcmp(s + i, "endraw", 6)) continue;
        i += 6;
        i += span_space(s + i, n - i);
        size_t m = 0;
        if (n - i >= 3 && !memcmp(s + i, "+%}", 3)) m = i + 3;
        else if (n - i >= 3 && !memcmp(s + i, "-%}", 3)) m = i + 3 + span_space(s + i + 3, n - i - 3);
        else if (n - i >= 2 && !memcmp(s + i, "%}", 2)) m = i + 2 + ((n - i >= 3 && s[i + 2] == '\n') ? 1 : 0);
        if (!m) continue;
        *at = p;
        *len = m;
        return true;
    }
    return false;
}

static enum dj_status lex_all(struct lexer *L) {
    L->line = 1;
    L->line_starting = true;
    while (L->pos < L->n) {
        /* the next tag opening */
        const char *tag = NULL;
        size_t p = L->pos;
        for (; p + 1 < L->n; p++) {
            if (L->s[p] == '{' && (L->s[p + 1] == '{' || L->s[p + 1] == '%' || L->s[p + 1] == '#')) {
                tag = L->s + p;
                break;
            }
        }
        if (!tag) {
            if (!push_tok(L, JT_DATA, L->s + L->pos, L->n - L->pos, L->pos)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
            L->line += (uint32_t)count_nl(L->s + L->pos, L->n - L->pos);
            L->pos = L->n;
            break;
        }
        char kind = tag[1];
        char sign = (p + 2 < L->n && (tag[2] == '-' || tag[2] == '+')) ? tag[2] : 0;
        char raw_sign;
        size_t raw_len = kind == '%' ? match_raw_begin(tag, L->n - p, &raw_sign) : 0;
        if (raw_len) sign = raw_sign;
        if (!emit_text(L, L->pos, p, sign, kind != '{', JT_DATA)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
        if (raw_len) {
            size_t at, len;
            char esign;
            L->line += (uint32_t)count_nl(tag, raw_len);
            L->line_starting = tag[raw_len - 1] == '\n';
            if (!find_endraw(L, p + raw_len, &at, &len, &esign)) return lex_fail(L, p, "missing end of raw directive%s", "");
            if (!emit_text(L, p + raw_len, at, esign, true, JT_RAW)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
            L->line += (uint32_t)count_nl(L->s + at, len);
            L->line_starting = L->s[at + len - 1] == '\n';
            L->pos = at + len;
            continue;
        }
        size_t open = 2 + (sign ? 1 : 0);
        L->pos = p + open;
        L->line_starting = false;
        if (kind == '#') {
            size_t q = L->pos, m = 0;
            for (; q + 1 < L->n; q++) {
                const char *s = L->s + q;
                size_t rest = L->n - q;
                if (rest >= 3 && s[0] == '+' && s[1] == '#' && s[2] == '}') m = 3;
                else if (rest >= 3 && s[0] == '-' && s[1] == '#' && s[2] == '}') m = 3 + span_space(s + 3, rest - 3);
                else if (s[0] == '#' && s[1] == '}') m = (rest >= 3 && s[2] == '\n') ? 3 : 2;
                if (m) break;
            }
            if (!m) return lex_fail(L, p, "missing end of comment tag%s", "");
            L->line += (uint32_t)count_nl(L->s + L->pos, q + m - L->pos);
            L->line_starting = L->s[q + m - 1] == '\n';
            L->pos = q + m;
            continue;
        }
        bool block = kind == '%';
        if (!push_tok(L, block ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, tag, open, p)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
        enum dj_status st = lex_tag(L, block);
        if (st) return st;
    }
    if (!push_tok(L, JT_EOF, L->s + L->n, 0, L->n)) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
    return DJ_OK;
}

enum dj_status jj_lex(struct jj_arena *a, const char *src, size_t n, struct jj_token **out, size_t *n_out, const char **norm,
                      size_t *norm_n) {
    char *s = jj_arena_alloc(a, n + 1);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n') k--; /* keep_trailing_newline=False */
    s[k] = '\0';
    struct lexer L = {.a = a, .s = s, .n = k};
    enum dj_status st = lex_all(&L);
    if (st) {
        free(L.toks);
        return st;
    }
    /* the tokens move into the arena so that the template owns them */
    struct jj_token *t = jj_arena_alloc(a, L.n_toks * sizeof *t);
    if (!t) {
        free(L.toks);
        return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
    }
    memcpy(t, L.toks, L.n_toks * sizeof *t);
    free(L.toks);
    *out = t;
    *n_out = L.n_toks;
    *norm = s;
    *norm_n = k;
    return DJ_OK;
}
