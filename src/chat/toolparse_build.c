/*
 * toolparse_build.c — the script ops that turn other notations into the
 * arguments' JSON as they stream: {"name": ..., "arguments": ...} call
 * objects (alone, several, or in a list; arguments raw, or as a JSON string),
 * XML-like parameters (Qwen3-Coder, GLM, DeepSeek V4 DSML, Kimi-K3, muse),
 * Python literals (LFM2) and Gemma 4's notation.  Everything they write goes
 * through tp_args_put, so the validator checks the builders too.
 *
 * XML parameter values are raw text.  A value is emitted as JSON as-is when
 * it is a complete JSON number, true/false, object or array (after trimming
 * whitespace); anything else, null and quoted text included, is a JSON string
 * of the text.  A type attribute decides instead where the format has one
 * (DeepSeek V4 string="true|false", Kimi-K3 type="string|...").  The decision
 * needs the whole value only when it starts like JSON; text that cannot be
 * JSON streams at once as a string.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolparse_int.h"

/* ---- OP_JCALLS: {"name": ..., "arguments": ...} objects ------------------------------------------- */

enum { JC_BEGIN, JC_ELEM, JC_OBJ0, JC_KEYX, JC_KEY, JC_COLON, JC_VAL, JC_SKIP, JC_ARGS_RAW, JC_ARGS_STR, JC_NAME_STR,
       JC_AFTER_VAL, JC_AFTER_OBJ, JC_AFTER_ARR };
enum { K_OTHER, K_NAME, K_ARGS };

bool tp_in_jcalls_object(const struct dj_toolparse *p) {
    return p->mode == TM_SCRIPT && p->script[p->ip].k == OP_JCALLS && p->jc_st >= JC_OBJ0 && p->jc_st <= JC_AFTER_VAL &&
           !p->jc_have_name;
}

static void args_sink(struct dj_toolparse *p, const char *s, size_t n) {
    if (p->call_open) {
        tp_args_put(p, s, n);
        return;
    }
    if (p->pend_n + n > TP_PEND_CAP) {
        tp_fail(p, "over %u bytes of tool-call arguments before the tool's name", TP_PEND_CAP);
        return;
    }
    if (p->pend_n + n > p->pend_cap) {
        size_t cap = p->pend_cap ? p->pend_cap : 256;
        while (cap < p->pend_n + n) cap *= 2;
        char *q = realloc(p->pend, cap);
        if (!q) {
            tp_fail(p, "out of memory");
            return;
        }
        p->pend = q;
        p->pend_cap = cap;
    }
    memcpy(p->pend + p->pend_n, s, n);
    p->pend_n += n;
}

static size_t utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Decodes one byte of a JSON string's inside; *o gets the bytes it stands
 * for (*on of them).  Returns 1 at the closing quote, -1 on an invalid
 * escape, 0 otherwise.  A lone surrogate becomes U+FFFD. */
static int sdec(struct dj_toolparse *p, unsigned char c, char *o, size_t *on) {
    *on = 0;
    if (p->jc_sdec == 0) {
        if (c == '"' || c == '\\' || p->jc_hi) {
            if (p->jc_hi && !(c == '\\')) {
                *on = utf8_put(0xFFFD, o);
                p->jc_hi = 0;
            }
        }
        if (c == '"') return 1;
        if (c == '\\') {
            p->jc_sdec = 1;
            return 0;
        }
        if (c < 0x20) return -1;
        o[(*on)++] = (char)c;
        return 0;
    }
    if (p->jc_sdec == 1) {
        char e = 0;
        switch (c) {
        case 'n': e = '\n'; break;
        case 't': e = '\t'; break;
        case 'r': e = '\r'; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case '/': e = '/'; break;
        case '\\': e = '\\'; break;
        case '"': e = '"'; break;
        case 'u':
            p->jc_sdec = 2;
            p->jc_un = 0;
            p->jc_u = 0;
            return 0;
        default:
            return -1;
        }
        if (p->jc_hi) {
            *on = utf8_put(0xFFFD, o);
            p->jc_hi = 0;
        }
        o[(*on)++] = e;
        p->jc_sdec = 0;
        return 0;
    }
    int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (h < 0) return -1;
    p->jc_u = p->jc_u << 4 | (uint32_t)h;
    if (++p->jc_un < 4) return 0;
    p->jc_sdec = 0;
    uint32_t u = p->jc_u;
    if (p->jc_hi) {
        uint32_t hi = p->jc_hi;
        p->jc_hi = 0;
        if (u >= 0xDC00 && u <= 0xDFFF) {
            *on = utf8_put(0x10000 + ((hi - 0xD800) << 10) + (u - 0xDC00), o);
            return 0;
        }
        *on = utf8_put(0xFFFD, o);
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
        p->jc_hi = u;
        return 0;
    }
    if (u >= 0xDC00 && u <= 0xDFFF) u = 0xFFFD;
    *on += utf8_put(u, o + *on);
    return 0;
}

static void jc_obj_begin(struct dj_toolparse *p) {
    p->jc_have_name = false;
    p->jc_have_args = false;
    p->pend_n = 0;
    p->name_n = 0;
    p->jc_st = JC_OBJ0;
}

/* The call object closed. */
static bool jc_obj_end(struct dj_toolparse *p) {
    if (!p->jc_have_name) {
        tp_fail(p, "a tool call object without a \"name\"");
        return false;
    }
    tp_call_end(p, true);
    p->jc_st = JC_AFTER_OBJ;
    return true;
}

static void jc_classify(struct dj_toolparse *p) {
    const char *k = p->key;
    size_t n = p->key_n;
#define IS(s) (n == sizeof(s) - 1 && memcmp(k, s, n) == 0)
    if (IS("name") || IS("tool_name") || IS("function")) p->jc_kind = K_NAME;
    else if (IS("arguments") || IS("parameters")) p->jc_kind = K_ARGS;
    else p->jc_kind = K_OTHER;
#undef IS
}

bool tp_op_jcalls(struct dj_toolparse *p, const struct tp_op *op) {
    const struct tp_jcfg *cfg = op->d;
    if (p->sub == 0) {
        p->sub = 1;
        p->jc_st = JC_BEGIN;
        p->jc_array = false;
        p->jc_sdec = 0;
        p->jc_hi = 0;
    }
    bool lim;
    size_t n = tp_avail(p, &lim);
    const char *b = p->buf + p->pos;
    char o[8];
    size_t on;
    enum tp_json_ret r;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        bool ws = tp_is_ws(c);
        switch (p->jc_st) {
        case JC_BEGIN:
            if (ws) continue;
            if (c == '[' && cfg->array) {
                p->jc_array = true;
                p->jc_st = JC_ELEM;
                continue;
            }
            if (c == '{') {
                jc_obj_begin(p);
                continue;
            }
            p->pos += i;
            return tp_op_mismatch(p, "expected a JSON tool call");
        case JC_ELEM:
            if (ws) continue;
            if (c == '{') {
                jc_obj_begin(p);
                continue;
            }
            if (c == ']' && p->committed) {
                p->jc_st = JC_AFTER_ARR;
                continue;
            }
            p->pos += i;
            return tp_op_mismatch(p, "expected a tool call object in the list");
        case JC_OBJ0:
        case JC_KEYX:
            if (ws) continue;
            if (c == '"') {
                p->key_n = 0;
                p->jc_sdec = 0;
                p->jc_st = JC_KEY;
                continue;
            }
            if (c == '}' && p->jc_st == JC_OBJ0) {
                if (!p->committed) {
                    p->pos += i;
                    return tp_op_mismatch(p, "");
                }
                if (!jc_obj_end(p)) {
                    p->pos += i;
                    return tp_op_abort(p);
                }
                continue;
            }
            p->pos += i;
            return tp_op_mismatch(p, "expected a key in a tool call object");
        case JC_KEY: {
            int d = sdec(p, c, o, &on);
            if (d < 0) {
                p->pos += i;
                return tp_op_mismatch(p, "an invalid escape in a key");
            }
            for (size_t k = 0; k < on; k++)
                if (p->key_n < TP_NAME_MAX) p->key[p->key_n++] = o[k];
            if (d == 0) continue;
            jc_classify(p);
            if (!p->committed) {
                /* a call only if its first key is one a call has ("{tag}" after a trigger is text;
                   Llama 3.x's bare JSON must start with "name" or "type") */
#define KEY(s) (p->key_n == sizeof(s) - 1 && memcmp(p->key, s, p->key_n) == 0)
                bool call = p->jc_kind == K_NAME || KEY("type") ||
                            (!cfg->tentative && (p->jc_kind == K_ARGS || KEY("id") || KEY("tool_call_id")));
#undef KEY
                if (!call) {
                    p->pos += i;
                    return tp_op_mismatch(p, "");
                }
                tp_commit(p);
            }
            p->jc_st = JC_COLON;
            continue;
        }
        case JC_COLON:
            if (ws) continue;
            if (c == ':') {
                p->jc_st = JC_VAL;
                continue;
            }
            p->pos += i;
            tp_fail(p, "expected ':' in a tool call object");
            return tp_op_abort(p);
        case JC_VAL:
            if (ws) continue;
            if (p->jc_kind == K_NAME && c == '"') {
                p->name_n = 0;
                p->jc_sdec = 0;
                p->jc_st = JC_NAME_STR;
                continue;
            }
            if (p->jc_kind == K_ARGS && !p->jc_have_args && (c == '{' || c == '"')) {
                p->jc_have_args = true;
                if (c == '"') {
                    p->jc_sdec = 0;
                    p->jc_sstarted = p->jc_sdrop = false;
                    p->jc_st = JC_ARGS_STR;
                    continue;
                }
                tp_json_init(&p->jv);
                tp_json_feed(&p->jv, c);
                args_sink(p, "{", 1);
                p->jc_st = JC_ARGS_RAW;
                continue;
            }
            tp_json_init(&p->jv);
            p->jc_st = JC_SKIP;
            /* fall through */
        case JC_SKIP:
            r = tp_json_feed(&p->jv, c);
            if (r == TJ_BAD) {
                p->pos += i;
                tp_fail(p, "invalid JSON in a tool call object");
                return tp_op_abort(p);
            }
            if (r == TJ_DONE) p->jc_st = JC_AFTER_VAL;
            if (r == TJ_DONE_BEFORE) {
                p->jc_st = JC_AFTER_VAL;
                i--;
            }
            continue;
        case JC_ARGS_RAW:
            r = tp_json_feed(&p->jv, c);
            if (r == TJ_BAD) {
                p->pos += i;
                tp_fail(p, "invalid JSON in the arguments of a tool call");
                return tp_op_abort(p);
            }
            args_sink(p, (const char *)b + i, 1);
            if (r == TJ_DONE) p->jc_st = JC_AFTER_VAL;
            continue;
        case JC_ARGS_STR:
        case JC_NAME_STR: {
            int d = sdec(p, c, o, &on);
            if (d < 0) {
                p->pos += i;
                tp_fail(p, "an invalid escape in a tool call object");
                return tp_op_abort(p);
            }
            if (p->jc_st == JC_ARGS_STR) {
                for (size_t k = 0; k < on && !p->jc_sdrop; k++) {
                    if (!p->jc_sstarted) {
                        if (tp_is_ws((unsigned char)o[k])) continue;
                        if (o[k] != '{') {
                            tp_fail(p, "tool call arguments given as a string that is not a JSON object");
                            p->jc_sdrop = true;
                            break;
                        }
                        p->jc_sstarted = true;
                    }
                    args_sink(p, o + k, 1);
                }
            } else {
                for (size_t k = 0; k < on; k++) {
                    if (p->name_n == TP_NAME_MAX) {
                        p->pos += i;
                        tp_fail(p, "a tool name longer than 256 bytes");
                        return tp_op_abort(p);
                    }
                    p->name[p->name_n++] = o[k];
                }
            }
            if (d == 0) continue;
            if (p->jc_st == JC_NAME_STR && !p->jc_have_name) {
                if (!p->name_n || !tp_utf8_valid(p->name, p->name_n)) {
                    p->pos += i;
                    tp_fail(p, "an empty or non-UTF-8 tool name");
                    return tp_op_abort(p);
                }
                p->jc_have_name = true;
                tp_call_begin(p, p->name, p->name_n);
                if (p->pend_n) tp_args_put(p, p->pend, p->pend_n);
                p->pend_n = 0;
            }
            p->jc_st = JC_AFTER_VAL;
            continue;
        }
        case JC_AFTER_VAL:
            if (ws) continue;
            if (c == ',') {
                p->jc_st = JC_KEYX;
                continue;
            }
            if (c == '}') {
                if (!jc_obj_end(p)) {
                    p->pos += i;
                    return tp_op_abort(p);
                }
                continue;
            }
            p->pos += i;
            tp_fail(p, "expected ',' or '}' in a tool call object");
            return tp_op_abort(p);
        case JC_AFTER_OBJ:
            if (p->jc_array) {
                if (ws) continue;
                if (c == ',') {
                    p->jc_st = JC_ELEM;
                    continue;
                }
                if (c == ']') {
                    p->jc_st = JC_AFTER_ARR;
                    continue;
                }
                p->pos += i;
                tp_fail(p, "expected ',' or ']' after a tool call");
                return tp_op_abort(p);
            }
            if (cfg->multi) {
                if (ws) continue;
                if (c == '{') {
                    jc_obj_begin(p);
                    continue;
                }
            }
            p->pos += i;
            tp_op_next(p);
            return true;
        case JC_AFTER_ARR:
            p->pos += i;
            tp_op_next(p);
            return true;
        }
    }
    p->pos += n;
    if (p->jc_st == JC_AFTER_ARR || (p->jc_st == JC_AFTER_OBJ && !p->jc_array && !cfg->multi)) {
        tp_op_next(p);
        return true;
    }
    if (p->eof && p->jc_st == JC_AFTER_OBJ && !p->jc_array) {
        tp_op_next(p);
        return true;
    }
    return tp_op_need(p, lim) || n > 0;
}

/* ---- OP_XPARAMS: XML-like parameters ---------------------------------------------------------- */

enum { X_NEXT, X_KEY, X_ATTR, X_VOPEN, X_VAL, X_JATTR, X_JSON, X_JCLOSE };
enum { XV_UND, XV_STR };
enum { HINT_NONE, HINT_STR, HINT_JSON };

static void xv_to_string(struct dj_toolparse *p, bool strip) {
    struct tp_xval *v = &p->xv;
    v->mode = XV_STR;
    tp_args_put(p, "\"", 1);
    size_t n = p->vbuf_n;
    if (strip && n && p->vbuf[n - 1] == '\n') {
        n--;
        v->nl_held = true;
    }
    tp_args_str(p, &v->esc, p->vbuf, n);
    p->vbuf_n = 0;
}

static bool xv_bytes(struct dj_toolparse *p, const char *s, size_t n, bool strip) {
    struct tp_xval *v = &p->xv;
    if (strip && !v->nl_checked && n) {
        v->nl_checked = true;
        if (s[0] == '\n') {
            s++;
            n--;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (v->mode == XV_STR) {
            if (v->nl_held) {
                tp_args_str(p, &v->esc, "\n", 1);
                v->nl_held = false;
            }
            size_t m = n - i;
            if (strip && s[n - 1] == '\n') {
                m--;
                v->nl_held = true;
            }
            tp_args_str(p, &v->esc, s + i, m);
            return true;
        }
        unsigned char c = (unsigned char)s[i];
        if (p->vbuf_n == p->vbuf_cap) {
            size_t cap = p->vbuf_cap ? p->vbuf_cap * 2 : 256;
            char *q = realloc(p->vbuf, cap);
            if (!q) {
                tp_fail(p, "out of memory");
                return false;
            }
            p->vbuf = q;
            p->vbuf_cap = cap;
        }
        p->vbuf[p->vbuf_n++] = (char)c;
        v->total++;
        bool to_str = v->total > TP_VALUE_CAP;
        if (!v->first && !tp_is_ws(c)) {
            v->first = c;
            if (c == '"' && v->hint != HINT_JSON) to_str = true;
        }
        if (!to_str) {
            enum tp_json_ret r = tp_json_feed(&v->j, c);
            if (r == TJ_DONE_BEFORE) r = tp_json_feed(&v->j, c);
            to_str = r == TJ_BAD;
        }
        if (to_str) xv_to_string(p, strip);
    }
    return true;
}

static void xv_begin(struct dj_toolparse *p, int hint) {
    memset(&p->xv, 0, sizeof p->xv);
    tp_json_init(&p->xv.j);
    p->xv.hint = (uint8_t)hint;
    p->vbuf_n = 0;
    if (hint == HINT_STR) {
        p->xv.mode = XV_STR;
        tp_args_put(p, "\"", 1);
    }
}

static void xv_end(struct dj_toolparse *p, bool strip) {
    struct tp_xval *v = &p->xv;
    if (v->mode == XV_UND) {
        size_t n = p->vbuf_n;
        if (strip && n && p->vbuf[n - 1] == '\n') n--;
        bool json = tp_json_complete_here(&v->j);
        if (json && v->hint != HINT_JSON) json = v->first != '"' && v->first != 'n';
        if (json) {
            size_t a = 0;
            while (a < n && tp_is_ws((unsigned char)p->vbuf[a])) a++;
            while (n > a && tp_is_ws((unsigned char)p->vbuf[n - 1])) n--;
            tp_args_put(p, p->vbuf + a, n - a);
        } else {
            tp_args_put(p, "\"", 1);
            tp_args_str(p, &v->esc, p->vbuf, n);
            tp_args_str_end(p, &v->esc);
            tp_args_put(p, "\"", 1);
        }
    } else {
        tp_args_str_end(p, &v->esc);
        tp_args_put(p, "\"", 1);
    }
    p->vbuf_n = 0;
}

/* Reads text up to the marker s (consumed) into dst (cap TP_NAME_MAX; the
 * marker must start within it, whatever the split).  Returns 1 when found, 0
 * to wait, -1 when the op stopped. */
static int read_to(struct dj_toolparse *p, const char *s, char *dst, size_t *dn, const char *what) {
    size_t n = p->len - p->pos, hold, room = TP_NAME_MAX - *dn, l = strlen(s);
    const char *b = p->buf + p->pos;
    size_t w = n < room + l ? n : room + l;
    size_t k = tp_find(s, b, w, &hold);
    size_t take = k < w ? k : w - hold;
    if (take > room) { /* the marker cannot start within the cap */
        take = room;
        memcpy(dst + *dn, b, take);
        *dn += take;
        p->pos += take;
        tp_fail(p, "%s longer than %d bytes", what, TP_NAME_MAX);
        tp_op_abort(p);
        return -1;
    }
    memcpy(dst + *dn, b, take);
    *dn += take;
    p->pos += take;
    if (k < w) {
        p->pos += l;
        return 1;
    }
    if (p->eof) {
        tp_op_truncated(p);
        return -1;
    }
    return take ? 2 : 0;
}

bool tp_op_xparams(struct dj_toolparse *p, const struct tp_op *op) {
    const struct tp_xcfg *x = op->d;
    size_t n = p->len - p->pos;
    const char *b = p->buf + p->pos;
    int r;
    switch (p->sub) {
    case X_NEXT: {
        bool lim; /* uncommitted while a deferred name (GLM) waits for its first parameter */
        n = tp_avail(p, &lim);
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        p->pos += i;
        b += i;
        n -= i;
        if (!n) return tp_op_need(p, lim) || i > 0;
        int mk = tp_match(x->key_open, b, n), mc = tp_match(x->call_close, b, n);
        int mj = x->json_open ? tp_match(x->json_open, b, n) : M_NO;
        if (p->dname_n && (mk == M_FULL || mc == M_FULL || mj == M_FULL)) {
            tp_call_begin(p, p->dname, p->dname_n);
            p->dname_n = 0;
        }
        if (mk == M_FULL) {
            p->pos += strlen(x->key_open);
            p->key_n = 0;
            p->hdr_n = 0;
            p->xv.hint = HINT_NONE;
            p->sub = X_KEY;
            return true;
        }
        if (mc == M_FULL) {
            p->pos += strlen(x->call_close);
            if (p->nparams) tp_args_put(p, "}", 1);
            tp_call_end(p, true);
            tp_op_next(p);
            return true;
        }
        if (mj == M_FULL && !p->nparams && !p->args_any) {
            p->pos += strlen(x->json_open);
            p->sub = X_JATTR;
            return true;
        }
        if (mk == M_PART || mc == M_PART || mj == M_PART) return tp_op_need(p, lim) || i > 0;
        return tp_op_mismatch(p, "expected a parameter or the end of a tool call");
    }
    case X_KEY:
        r = read_to(p, x->key_close, p->key, &p->key_n, "a parameter name");
        if (r != 1) return r != 0;
        if (x->unescape) p->key_n = tp_unescape_attr(p->key, p->key_n);
        p->sub = x->attr_end ? X_ATTR : X_VOPEN;
        return true;
    case X_ATTR: {
        r = read_to(p, x->attr_end, p->hdr, &p->hdr_n, "parameter attributes");
        if (r != 1) return r != 0;
        p->hdr[p->hdr_n] = '\0';
        int hint = HINT_NONE;
        if (strstr(p->hdr, "string=\"true\"") || strstr(p->hdr, "type=\"string\"")) hint = HINT_STR;
        else if (strstr(p->hdr, "string=\"false\"") || strstr(p->hdr, "type=\"")) hint = HINT_JSON;
        p->xv.hint = (uint8_t)hint;
        p->sub = X_VOPEN;
        return true;
    }
    case X_VOPEN: {
        int hint = p->xv.hint;
        if (x->val_open) {
            size_t i = 0;
            while (i < n && tp_is_ws((unsigned char)b[i])) i++;
            int m = tp_match(x->val_open, b + i, n - i);
            if (m == M_PART) {
                p->pos += i;
                return tp_op_need(p, false) || i > 0;
            }
            if (m == M_NO) {
                p->pos += i;
                tp_fail(p, "expected %s", x->val_open);
                return tp_op_abort(p);
            }
            p->pos += i + strlen(x->val_open);
        }
        tp_args_put(p, p->nparams ? ", \"" : "{\"", p->nparams ? 3 : 2);
        tp_put_key(p, p->key, p->key_n);
        tp_args_put(p, "\": ", 3);
        p->nparams = true;
        xv_begin(p, hint);
        p->sub = X_VAL;
        return true;
    }
    case X_VAL: {
        size_t hold, k = tp_find(x->val_close, b, n, &hold);
        if (p->eof) hold = 0;
        size_t e = k < n ? k : n - hold;
        if (!xv_bytes(p, b, e, x->strip_nl)) return tp_op_abort(p);
        p->pos += e;
        if (k < n) {
            p->pos += strlen(x->val_close);
            xv_end(p, x->strip_nl);
            p->sub = X_NEXT;
            return true;
        }
        if (p->eof) {
            xv_end(p, x->strip_nl);
            tp_op_truncated(p);
            return true;
        }
        return e > 0;
    }
    case X_JATTR: {
        size_t hold, k = tp_find(x->attr_end, b, n, &hold);
        if (k == n) {
            p->pos += n - hold;
            return tp_op_need(p, false) || n - hold > 0;
        }
        p->pos += k + strlen(x->attr_end);
        p->sub = X_JSON;
        p->jc_sdec = 0; /* raw_args sub-state */
        return true;
    }
    case X_JSON: {
        int s = p->jc_sdec;
        r = tp_raw_args(p, &s, x->json_close);
        p->jc_sdec = (uint8_t)s;
        if (r == 1) p->sub = X_JCLOSE;
        return r != 0;
    }
    case X_JCLOSE: {
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        int m = tp_match(x->json_close, b + i, n - i);
        p->pos += i;
        if (m == M_PART) return tp_op_need(p, false) || i > 0;
        if (m == M_NO) {
            tp_fail(p, "expected %s", x->json_close);
            return tp_op_abort(p);
        }
        p->pos += strlen(x->json_close);
        p->sub = X_NEXT;
        return true;
    }
    }
    return false;
}

/* ---- Python / Gemma literals → JSON -------------------------------------------------------------- */

enum { PS_VAL, PS_STR, PS_ESC, PS_HEX, PS_WORD, PS_AFTER };
enum { PY_MORE, PY_DONE, PY_BAD };
#define GQ "<|\"|>"

static bool is_word(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '+';
}

/* A ',' seen between items is written when the next item starts (a trailing
 * one before a closer is dropped). */
static void py_comma(struct dj_toolparse *p) {
    if (p->py.comma) tp_args_put(p, ",", 1);
    p->py.comma = false;
}

static void py_init(struct dj_toolparse *p, bool gemma) {
    memset(&p->py, 0, sizeof p->py);
    p->py.gemma = gemma;
}

static int py_top(const struct tp_py *y) { return y->depth ? (y->stk[(y->depth - 1) >> 2] >> (((y->depth - 1) & 3) * 2)) & 3 : 0; }

static int py_value_done(struct tp_py *y) {
    if (y->depth == 0) return PY_DONE;
    y->st = PS_AFTER;
    return PY_MORE;
}

static void py_word_end(struct dj_toolparse *p) {
    struct tp_py *y = &p->py;
    const char *w = y->word;
    size_t n = y->word_n;
#define IS(s) (n == sizeof(s) - 1 && memcmp(w, s, n) == 0)
    if (y->expect_key) {
        struct tp_esc e = {0};
        tp_args_put(p, "\"", 1);
        tp_args_str(p, &e, w, n);
        tp_args_str_end(p, &e);
        tp_args_put(p, "\"", 1);
        return;
    }
    if (IS("True") || IS("true")) tp_args_put(p, "true", 4);
    else if (IS("False") || IS("false")) tp_args_put(p, "false", 5);
    else if (IS("None") || IS("null")) tp_args_put(p, "null", 4);
    else {
        struct tp_json j;
        tp_json_init(&j);
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++) ok = tp_json_feed(&j, (unsigned char)w[i]) == TJ_OK;
        if (ok && tp_json_complete_here(&j) && j.first != 't' && j.first != 'f' && j.first != 'n') {
            tp_args_put(p, w, n);
        } else {
            struct tp_esc e = {0};
            tp_args_put(p, "\"", 1);
            tp_args_str(p, &e, w, n);
            tp_args_str_end(p, &e);
            tp_args_put(p, "\"", 1);
        }
    }
#undef IS
}

/* Item (key or value) finished at the current level. */
static int py_item_done(struct tp_py *y) {
    if (y->expect_key) {
        y->st = PS_AFTER;
        return PY_MORE; /* a ':' must follow */
    }
    return py_value_done(y);
}

/* Converts a Python (or Gemma) literal to JSON; *used: bytes consumed. */
static int py_run(struct dj_toolparse *p, const char *b, size_t n, size_t *used) {
    struct tp_py *y = &p->py;
    size_t i = 0;
    int r = PY_MORE;
    while (i < n) {
        unsigned char c = (unsigned char)b[i];
        switch (y->st) {
        case PS_VAL:
            if (tp_is_ws(c)) {
                i++;
                continue;
            }
            if (y->gemma && c == '<') {
                int m = tp_match(GQ, b + i, n - i);
                if (m == M_PART && !p->eof) goto wait;
                if (m != M_FULL) goto bad;
                i += 5;
                py_comma(p);
                tp_args_put(p, "\"", 1);
                y->st = PS_STR;
                continue;
            }
            if (!y->gemma && (c == '\'' || c == '"')) {
                y->quote = c;
                py_comma(p);
                tp_args_put(p, "\"", 1);
                y->st = PS_STR;
                i++;
                continue;
            }
            if (c == '{' || c == '[' || c == '(') {
                if (y->expect_key || y->depth >= TP_JSON_DEPTH) goto bad;
                int t = c == '{' ? 1 : c == '[' ? 2 : 3;
                py_comma(p);
                uint32_t d = y->depth++;
                y->stk[d >> 2] = (uint8_t)((y->stk[d >> 2] & ~(3u << ((d & 3) * 2))) | (unsigned)t << ((d & 3) * 2));
                tp_args_put(p, c == '{' ? "{" : "[", 1);
                y->expect_key = t == 1;
                i++;
                continue;
            }
            if (c == '}' || c == ']' || c == ')') {
                int t = py_top(y);
                if (!t || (c == '}') != (t == 1) || (c == ']' && t != 2) || (c == ')' && t != 3)) goto bad;
                y->comma = false;
                tp_args_put(p, t == 1 ? "}" : "]", 1);
                y->depth--;
                y->expect_key = false;
                i++;
                r = py_value_done(y);
                if (r == PY_DONE) goto done;
                continue;
            }
            if (is_word(c)) {
                py_comma(p);
                y->word_n = 0;
                y->st = PS_WORD;
                continue;
            }
            goto bad;
        case PS_WORD:
            if (is_word(c)) {
                if (y->word_n == sizeof y->word) goto bad;
                y->word[y->word_n++] = (char)c;
                i++;
                continue;
            }
            py_word_end(p);
            r = py_item_done(y);
            if (r == PY_DONE) goto done;
            continue;
        case PS_STR:
            if (y->gemma) {
                if (c == '<') {
                    int m = tp_match(GQ, b + i, n - i);
                    if (m == M_PART && !p->eof) goto wait;
                    if (m == M_FULL) {
                        i += 5;
                        goto str_end;
                    }
                }
            } else if (c == y->quote) {
                i++;
                goto str_end;
            } else if (c == '\\') {
                y->st = PS_ESC;
                i++;
                continue;
            }
            tp_args_str(p, &y->esc, (const char *)b + i, 1);
            i++;
            continue;
        str_end:
            tp_args_str_end(p, &y->esc);
            tp_args_put(p, "\"", 1);
            r = py_item_done(y);
            if (r == PY_DONE) goto done;
            continue;
        case PS_ESC: {
            char e = 0;
            i++;
            y->st = PS_STR;
            switch (c) {
            case 'n': e = '\n'; break;
            case 't': e = '\t'; break;
            case 'r': e = '\r'; break;
            case 'b': e = '\b'; break;
            case 'f': e = '\f'; break;
            case '0': e = 0; break;
            case '\n': continue;
            case 'x': case 'u': case 'U':
                y->hex = 0;
                y->hex_n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
                y->st = PS_HEX;
                continue;
            case '\\': case '\'': case '"': e = (char)c; break;
            default:
                tp_args_str(p, &y->esc, "\\", 1);
                e = (char)c;
            }
            tp_args_str(p, &y->esc, &e, 1);
            continue;
        }
        case PS_HEX: {
            int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (h < 0) goto bad;
            y->hex = y->hex << 4 | (uint32_t)h;
            i++;
            if (--y->hex_n) continue;
            uint32_t cp = y->hex;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
            char o[4];
            tp_args_str(p, &y->esc, o, utf8_put(cp, o));
            y->st = PS_STR;
            continue;
        }
        case PS_AFTER:
            if (tp_is_ws(c)) {
                i++;
                continue;
            }
            if (y->expect_key) {
                if (c != ':' && c != '=') goto bad;
                tp_args_put(p, ":", 1);
                y->expect_key = false;
                y->st = PS_VAL;
                i++;
                continue;
            }
            if (c == ',') {
                y->comma = true;
                y->expect_key = py_top(y) == 1;
                y->st = PS_VAL;
                i++;
                continue;
            }
            if (c == '}' || c == ']' || c == ')') {
                y->st = PS_VAL; /* the closer is handled there */
                continue;
            }
            goto bad;
        }
    }
    if (p->eof && y->st == PS_WORD) {
        py_word_end(p);
        r = py_item_done(y);
        if (r == PY_DONE) goto done;
    }
wait:
    *used = i;
    return PY_MORE;
done:
    *used = i;
    return PY_DONE;
bad:
    *used = i;
    return PY_BAD;
}

enum { P_OPEN, P_CALL, P_KEY, P_VAL, P_AARG, P_ACALL };

bool tp_op_pycalls(struct dj_toolparse *p) {
    bool lim;
    size_t n = tp_avail(p, &lim);
    const char *b = p->buf + p->pos;
    size_t i = 0;
    if (p->sub != P_VAL)
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
    p->pos += i;
    b += i;
    n -= i;
    if (!n) return tp_op_need(p, lim) || i > 0;
    unsigned char c = (unsigned char)b[0];
    switch (p->sub) {
    case P_OPEN:
        if (c != '[') return tp_op_mismatch(p, "expected '[' after <|tool_call_start|>");
        p->pos++;
        p->sub = P_CALL;
        p->name_n = 0;
        return true;
    case P_CALL:
    case P_KEY: {
        bool key = p->sub == P_KEY;
        if (key && c == ')') {
            p->pos++;
            if (p->nparams) tp_args_put(p, "}", 1);
            tp_call_end(p, true);
            p->sub = P_ACALL;
            return true;
        }
        size_t k = 0;
        while (k < n && tp_is_ident((unsigned char)b[k])) k++;
        if (k == n) {
            if (k > TP_NAME_MAX) return tp_op_mismatch(p, "a tool name or parameter longer than 256 bytes");
            return tp_op_need(p, lim);
        }
        size_t e = k;
        while (e < n && tp_is_ws((unsigned char)b[e])) e++;
        if (e == n) return tp_op_need(p, lim);
        if (!k || k > TP_NAME_MAX || b[e] != (key ? '=' : '(')) return tp_op_mismatch(p, key ? "expected name=value" : "expected a call");
        p->pos += e + 1;
        if (!key) {
            tp_call_begin(p, b, k);
            p->nparams = false;
            p->sub = P_KEY;
            return true;
        }
        tp_args_put(p, p->nparams ? ", \"" : "{\"", p->nparams ? 3 : 2);
        tp_put_key(p, b, k);
        tp_args_put(p, "\": ", 3);
        p->nparams = true;
        py_init(p, false);
        p->sub = P_VAL;
        return true;
    }
    case P_VAL: {
        size_t used = 0;
        int r = py_run(p, b, n, &used);
        p->pos += used;
        if (r == PY_BAD) {
            tp_fail(p, "a value that is not a Python literal in tool call %u", p->n_calls - 1);
            return tp_op_abort(p);
        }
        if (r == PY_DONE) {
            p->sub = P_AARG;
            return true;
        }
        if (p->eof) {
            tp_op_truncated(p);
            return true;
        }
        return used > 0;
    }
    case P_AARG:
        if (c == ',') p->sub = P_KEY;
        else if (c == ')') {
            if (p->nparams) tp_args_put(p, "}", 1);
            tp_call_end(p, true);
            p->sub = P_ACALL;
        } else {
            tp_fail(p, "expected ',' or ')' in tool call %u", p->n_calls - 1);
            return tp_op_abort(p);
        }
        p->pos++;
        return true;
    case P_ACALL:
        if (c == ',') p->sub = P_CALL;
        else if (c == ']') tp_op_next(p);
        else {
            tp_fail(p, "expected ',' or ']' after a tool call");
            return tp_op_abort(p);
        }
        p->pos++;
        return true;
    }
    return false;
}

bool tp_op_gemma(struct dj_toolparse *p) {
    size_t n = p->len - p->pos;
    const char *b = p->buf + p->pos;
    if (p->sub == 0) {
        if (!n) return tp_op_need(p, false);
        if (b[0] != '{') {
            tp_fail(p, "expected '{' after the tool name");
            return tp_op_abort(p);
        }
        py_init(p, true);
        p->sub = 1;
    }
    size_t used = 0;
    int r = py_run(p, b, n, &used);
    p->pos += used;
    if (r == PY_BAD) {
        tp_fail(p, "invalid arguments in tool call %u", p->n_calls - 1);
        return tp_op_abort(p);
    }
    if (r == PY_DONE) {
        tp_call_end(p, true);
        tp_op_next(p);
        return true;
    }
    if (p->eof) {
        tp_op_truncated(p);
        return true;
    }
    return used > 0;
}

