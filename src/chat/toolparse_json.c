/*
 * toolparse_json.c — the byte-at-a-time JSON validator the output parser
 * runs every tool-call argument byte through, and the TOOL_ARGS output
 * (staging, the held-back comma, completion of a cut value).
 *
 * The validator accepts exactly what jansson's json_loads(JSON_DECODE_ANY |
 * JSON_ALLOW_NUL) accepts, number range aside: RFC 8259 grammar (less
 * \u0000 in object keys, which jansson refuses), strings in
 * strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), \u
 * escapes with surrogates in pairs, nesting up to TP_JSON_DEPTH.  It keeps
 * O(depth/8) bytes of state and no text, so it can also say how to complete
 * a value cut anywhere (tp_json_closer).
 */
#include <string.h>

#include "chat/toolparse_int.h"

enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ES, N_EXP };
static const char *const lits[3] = {"true", "false", "null"};

void tp_json_init(struct tp_json *j) { memset(j, 0, sizeof *j); }

static bool is_obj(const struct tp_json *j, uint32_t d) { return (j->stk[d >> 3] >> (d & 7)) & 1; }

static enum tp_json_ret value_done(struct tp_json *j) {
    if (j->depth == 0) {
        j->st = J_DONE;
        return TJ_DONE;
    }
    j->st = J_AFTER;
    return TJ_OK;
}

static enum tp_json_ret bad(struct tp_json *j) {
    j->st = J_BAD;
    return TJ_BAD;
}

static enum tp_json_ret push(struct tp_json *j, bool obj) {
    if (j->depth >= TP_JSON_DEPTH) return bad(j);
    uint32_t d = j->depth++;
    if (obj)
        j->stk[d >> 3] |= (uint8_t)(1u << (d & 7));
    else
        j->stk[d >> 3] &= (uint8_t)~(1u << (d & 7));
    j->st = obj ? J_OBJ0 : J_ARR0;
    return TJ_OK;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A value starts with c (the state expects one). */
static enum tp_json_ret start_value(struct tp_json *j, unsigned char c) {
    if (j->depth == 0 && !j->first) j->first = c;
    switch (c) {
    case '{': return push(j, true);
    case '[': return push(j, false);
    case '"':
        j->st = J_STR;
        j->in_key = 0;
        return TJ_OK;
    case '-': j->st = J_NUM; j->num = N_SIGN; return TJ_OK;
    case '0': j->st = J_NUM; j->num = N_ZERO; return TJ_OK;
    case 't': case 'f': case 'n':
        j->st = J_LIT;
        j->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        j->lit_i = 1;
        return TJ_OK;
    default:
        if (c >= '1' && c <= '9') {
            j->st = J_NUM;
            j->num = N_INT;
            return TJ_OK;
        }
        return bad(j);
    }
}

/* c inside a string (not after a backslash). */
static enum tp_json_ret str_char(struct tp_json *j, unsigned char c) {
    if (j->utf_need) {
        if (c < j->utf_lo || c > j->utf_hi) return bad(j);
        j->utf_lo = 0x80;
        j->utf_hi = 0xBF;
        j->utf_need--;
        return TJ_OK;
    }
    if (j->surr && c != '\\') return bad(j);
    if (c == '"') {
        if (j->in_key) {
            j->st = J_COLON;
            return TJ_OK;
        }
        return value_done(j);
    }
    if (c == '\\') {
        j->st = J_ESC;
        return TJ_OK;
    }
    if (c < 0x20) return bad(j);
    if (c < 0x80) return TJ_OK;
    j->utf_lo = 0x80;
    j->utf_hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) j->utf_need = 1;
    else if (c == 0xE0) { j->utf_need = 2; j->utf_lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) j->utf_need = 2;
    else if (c == 0xED) { j->utf_need = 2; j->utf_hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) j->utf_need = 2;
    else if (c == 0xF0) { j->utf_need = 3; j->utf_lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) j->utf_need = 3;
    else if (c == 0xF4) { j->utf_need = 3; j->utf_hi = 0x8F; }
    else return bad(j);
    return TJ_OK;
}

static enum tp_json_ret num_char(struct tp_json *j, unsigned char c) {
    bool digit = c >= '0' && c <= '9';
    switch (j->num) {
    case N_SIGN:
        if (c == '0') { j->num = N_ZERO; return TJ_OK; }
        if (digit) { j->num = N_INT; return TJ_OK; }
        return bad(j);
    case N_ZERO: case N_INT: case N_FRAC: case N_EXP:
        if (digit && j->num != N_ZERO) return TJ_OK;
        if (c == '.' && (j->num == N_ZERO || j->num == N_INT)) { j->num = N_DOT; return TJ_OK; }
        if ((c == 'e' || c == 'E') && j->num != N_EXP) { j->num = N_E; return TJ_OK; }
        if (digit) return bad(j); /* a digit after a leading 0 */
        /* the number ended before c */
        if (j->depth == 0) {
            j->st = J_DONE;
            if (tp_is_ws(c)) return TJ_DONE;
            return TJ_DONE_BEFORE;
        }
        j->st = J_AFTER;
        return tp_json_feed(j, c);
    case N_DOT:
        if (digit) { j->num = N_FRAC; return TJ_OK; }
        return bad(j);
    case N_E:
        if (c == '+' || c == '-') { j->num = N_ES; return TJ_OK; }
        if (digit) { j->num = N_EXP; return TJ_OK; }
        return bad(j);
    case N_ES:
        if (digit) { j->num = N_EXP; return TJ_OK; }
        return bad(j);
    default:
        return bad(j);
    }
}

enum tp_json_ret tp_json_feed(struct tp_json *j, unsigned char c) {
    switch (j->st) {
    case J_VAL:
        if (tp_is_ws(c)) return TJ_OK;
        return start_value(j, c);
    case J_ARR0:
        if (tp_is_ws(c)) return TJ_OK;
        if (c == ']') {
            j->depth--;
            return value_done(j);
        }
        return start_value(j, c);
    case J_OBJ0:
    case J_KEY:
        if (tp_is_ws(c)) return TJ_OK;
        if (c == '"') {
            j->st = J_STR;
            j->in_key = 1;
            return TJ_OK;
        }
        if (c == '}' && j->st == J_OBJ0) {
            j->depth--;
            return value_done(j);
        }
        return bad(j);
    case J_COLON:
        if (tp_is_ws(c)) return TJ_OK;
        if (c == ':') {
            j->st = J_VAL;
            return TJ_OK;
        }
        return bad(j);
    case J_AFTER: {
        if (tp_is_ws(c)) return TJ_OK;
        bool obj = is_obj(j, j->depth - 1);
        if (c == ',') {
            j->st = obj ? J_KEY : J_VAL;
            return TJ_OK;
        }
        if ((c == '}' && obj) || (c == ']' && !obj)) {
            j->depth--;
            return value_done(j);
        }
        return bad(j);
    }
    case J_STR:
        return str_char(j, c);
    case J_ESC:
        if (j->surr) {
            if (c != 'u') return bad(j);
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            j->st = J_STR;
            return TJ_OK;
        }
        if (c != 'u') return bad(j);
        j->st = J_U;
        j->u_n = 0;
        j->u_val = 0;
        return TJ_OK;
    case J_U: {
        int h = hexval(c);
        if (h < 0) return bad(j);
        j->u_val = (uint16_t)(j->u_val << 4 | (unsigned)h);
        j->u_n++;
        /* refuse a lone surrogate as soon as its digits show it */
        if (j->u_n == 2) {
            unsigned hi = j->u_val;
            bool low = hi >= 0xDC && hi <= 0xDF, high = hi >= 0xD8 && hi <= 0xDB;
            if (j->surr ? !low : low) return bad(j);
            (void)high;
        } else if (j->u_n == 1 && j->surr && h != 0xD) {
            return bad(j);
        }
        if (j->u_n < 4) return TJ_OK;
        if (j->u_val == 0 && j->in_key) return bad(j); /* jansson refuses NUL in keys */
        j->surr = !j->surr && j->u_val >= 0xD800 && j->u_val <= 0xDBFF;
        j->st = J_STR;
        return TJ_OK;
    }
    case J_NUM:
        return num_char(j, c);
    case J_LIT: {
        const char *l = lits[j->lit];
        if ((unsigned char)l[j->lit_i] != c) return bad(j);
        j->lit_i++;
        if (l[j->lit_i]) return TJ_OK;
        return value_done(j);
    }
    case J_DONE:
        if (tp_is_ws(c)) return TJ_OK;
        return bad(j);
    default:
        return TJ_BAD;
    }
}

bool tp_json_complete_here(const struct tp_json *j) {
    if (j->st == J_DONE) return true;
    return j->st == J_NUM && j->depth == 0 &&
           (j->num == N_ZERO || j->num == N_INT || j->num == N_FRAC || j->num == N_EXP);
}

int tp_json_closer(const struct tp_json *j, bool comma_held, char *out) {
    size_t n = 0;
    uint8_t st = j->st;
    if (comma_held && (st == J_KEY || st == J_VAL)) st = J_AFTER;
    switch (st) {
    case J_BAD:
        return -1;
    case J_DONE:
        return 0;
    case J_VAL:
        if (j->depth == 0) return -1; /* nothing to complete */
        memcpy(out + n, "null", 4);
        n += 4;
        break;
    case J_KEY:
        memcpy(out + n, "\"\":null", 7);
        n += 7;
        break;
    case J_COLON:
        memcpy(out + n, ":null", 5);
        n += 5;
        break;
    case J_STR: case J_ESC: case J_U:
        if (j->utf_need) return -1; /* a cut UTF-8 sequence cannot be completed */
        if (st == J_ESC) {
            if (j->surr) {
                memcpy(out + n, "udc00", 5);
                n += 5;
            } else {
                out[n++] = '\\';
            }
        } else if (st == J_U) {
            uint32_t v = j->u_val;
            if (j->surr) {
                static const char *const low_pad[4] = {"dc00", "c00", "00", "0"};
                const char *pad = low_pad[j->u_n];
                memcpy(out + n, pad, strlen(pad));
                n += strlen(pad);
            } else {
                for (unsigned k = j->u_n; k < 4; k++) {
                    out[n++] = '0';
                    v <<= 4;
                }
                if (v >= 0xD800 && v <= 0xDBFF) {
                    memcpy(out + n, "\\udc00", 6);
                    n += 6;
                }
            }
        } else if (j->surr) {
            memcpy(out + n, "\\udc00", 6);
            n += 6;
        }
        out[n++] = '"';
        if (j->in_key) {
            memcpy(out + n, ":null", 5);
            n += 5;
        }
        break;
    case J_NUM:
        if (j->num == N_SIGN || j->num == N_DOT || j->num == N_E || j->num == N_ES) out[n++] = '0';
        break;
    case J_LIT: {
        const char *l = lits[j->lit] + j->lit_i;
        memcpy(out + n, l, strlen(l));
        n += strlen(l);
        break;
    }
    default: /* J_OBJ0, J_ARR0, J_AFTER */
        break;
    }
    for (uint32_t d = j->depth; d > 0; d--) out[n++] = is_obj(j, d - 1) ? '}' : ']';
    return (int)n;
}

size_t tp_utf8_tail(const char *s, size_t n) {
    /* look back at most 3 bytes for a lead byte whose sequence is cut */
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation */
        size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > k ? k : 0;
    }
    return 0;
}

/* ---- TOOL_ARGS output ----------------------------------------------------- */

void tp_stage_flush(struct dj_toolparse *p, bool all) {
    size_t n = p->stage_n;
    if (!n) return;
    if (!all) n -= tp_utf8_tail(p->stage, n);
    if (n) {
        struct dj_chat_delta d = {.kind = DJ_DELTA_TOOL_ARGS, .tool_index = p->n_calls - 1, .text = p->stage, .n = n};
        p->emit(p->ud, &d);
    }
    memmove(p->stage, p->stage + n, p->stage_n - n);
    p->stage_n -= n;
}

static void stage_put(struct dj_toolparse *p, const char *s, size_t n) {
    while (n) {
        if (p->stage_n == TP_STAGE) tp_stage_flush(p, false);
        if (p->stage_n == TP_STAGE) tp_stage_flush(p, true); /* only a cut sequence left: cannot happen */
        size_t k = TP_STAGE - p->stage_n;
        if (k > n) k = n;
        memcpy(p->stage + p->stage_n, s, k);
        p->stage_n += k;
        s += k;
        n -= k;
    }
}

void tp_args_reset(struct dj_toolparse *p) {
    tp_json_init(&p->av);
    p->args_any = false;
    p->av_bad = false;
    p->hold_n = 0;
    p->comma_held = false;
}

static void hold_flush(struct dj_toolparse *p) {
    if (p->hold_n) stage_put(p, p->hold, p->hold_n);
    p->hold_n = 0;
    p->comma_held = false;
}

/* Emits argument bytes through the validator; returns its verdict on the last
 * byte (TJ_DONE: the arguments value is complete). */
enum tp_json_ret tp_args_put(struct dj_toolparse *p, const char *s, size_t n) {
    enum tp_json_ret r = TJ_OK;
    if (n) p->args_any = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (p->av_bad) {
            stage_put(p, s + i, n - i);
            return TJ_BAD;
        }
        r = tp_json_feed(&p->av, c);
        if (r == TJ_BAD) {
            p->av_bad = true;
            if (!p->failed) tp_fail(p, "tool call %u: arguments are not valid JSON", p->n_calls - 1);
            hold_flush(p);
            stage_put(p, s + i, n - i);
            return TJ_BAD;
        }
        if (r == TJ_DONE_BEFORE) {
            /* a top-level number ended before c (only text after a complete value follows) */
            r = tp_json_feed(&p->av, c);
            if (r == TJ_BAD) {
                p->av_bad = true;
                if (!p->failed) tp_fail(p, "tool call %u: arguments are not valid JSON", p->n_calls - 1);
                hold_flush(p);
                stage_put(p, s + i, n - i);
                return TJ_BAD;
            }
        }
        if (p->comma_held) {
            if (tp_is_ws(c) && p->hold_n < TP_HOLD_CAP) {
                p->hold[p->hold_n++] = (char)c;
                continue;
            }
            hold_flush(p);
        }
        if (c == ',' && (p->av.st == J_KEY || p->av.st == J_VAL)) {
            p->hold[0] = ',';
            p->hold_n = 1;
            p->comma_held = true;
            continue;
        }
        stage_put(p, (const char *)&s[i], 1);
    }
    return r;
}

/* Completes the arguments (a cut value closed, or "{}" when none came); false
 * when they cannot be made valid. */
bool tp_args_close(struct dj_toolparse *p) {
    if (!p->args_any) {
        tp_args_put(p, "{}", 2);
        return true;
    }
    if (p->av_bad) return false;
    char out[TP_JSON_DEPTH + 32];
    int n = tp_json_closer(&p->av, p->comma_held, out);
    p->hold_n = 0;
    p->comma_held = false;
    if (n < 0) return false;
    if (n) stage_put(p, out, (size_t)n);
    return true;
}

/* ---- JSON string escaping -------------------------------------------------- */

static void esc_byte(struct dj_toolparse *p, unsigned char c) {
    char b[8];
    switch (c) {
    case '"': tp_args_put(p, "\\\"", 2); return;
    case '\\': tp_args_put(p, "\\\\", 2); return;
    case '\n': tp_args_put(p, "\\n", 2); return;
    case '\r': tp_args_put(p, "\\r", 2); return;
    case '\t': tp_args_put(p, "\\t", 2); return;
    case '\b': tp_args_put(p, "\\b", 2); return;
    case '\f': tp_args_put(p, "\\f", 2); return;
    default:
        if (c < 0x20) {
            static const char hx[] = "0123456789abcdef";
            memcpy(b, "\\u00", 4);
            b[4] = hx[c >> 4];
            b[5] = hx[c & 15];
            tp_args_put(p, b, 6);
            return;
        }
        b[0] = (char)c;
        tp_args_put(p, b, 1);
    }
}

/* Appends s as the inside of a JSON string: specials escaped, bytes that are
 * not valid UTF-8 replaced by U+FFFD (a sequence cut by the split waits in e). */
void tp_args_str(struct dj_toolparse *p, struct tp_esc *e, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (e->need) {
            if (c >= e->lo && c <= e->hi) {
                e->pend[e->pend_n++] = c;
                e->lo = 0x80;
                e->hi = 0xBF;
                if (--e->need == 0) {
                    tp_args_put(p, (const char *)e->pend, e->pend_n);
                    e->pend_n = 0;
                }
                continue;
            }
            tp_args_put(p, "\\ufffd", 6);
            e->need = 0;
            e->pend_n = 0;
        }
        if (c < 0x80) {
            esc_byte(p, c);
            continue;
        }
        e->lo = 0x80;
        e->hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) e->need = 1;
        else if (c == 0xE0) { e->need = 2; e->lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) e->need = 2;
        else if (c == 0xED) { e->need = 2; e->hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) e->need = 2;
        else if (c == 0xF0) { e->need = 3; e->lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) e->need = 3;
        else if (c == 0xF4) { e->need = 3; e->hi = 0x8F; }
        else {
            tp_args_put(p, "\\ufffd", 6);
            continue;
        }
        e->pend[0] = c;
        e->pend_n = 1;
    }
}

/* The string ends: a cut UTF-8 sequence becomes U+FFFD. */
void tp_args_str_end(struct dj_toolparse *p, struct tp_esc *e) {
    if (e->need) tp_args_put(p, "\\ufffd", 6);
    memset(e, 0, sizeof *e);
}
