/*
 * toolparse_ops.c — the interpreter of the tool-call scripts
 * (toolparse_int.h): the ops that read markers, names, raw JSON arguments
 * and raw code, and the harmony header step (gpt-oss, muse).  The ops that
 * build arguments from other notations (JSON call objects, XML-like
 * parameters, Python and Gemma literals) are in toolparse_build.c.
 *
 * An op looks at buf[pos..len) (before the commit, at most TP_WINDOW bytes
 * past the trigger), consumes what it can decide and returns true, or returns
 * false to wait for more text.  When it cannot decide at the end of the
 * window or of the output, tp_op_need() reverts (before the commit) or
 * closes the call as truncated (after).  A decision never depends on how
 * much text happens to be there beyond what it looked at: caps are checked
 * at fixed offsets, so every split gives the same result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolparse_int.h"

/* Does s match b[0..n) fully, or is b a proper prefix of s? */
int tp_match(const char *s, const char *b, size_t n) {
    size_t l = strlen(s);
    if (n >= l) return memcmp(b, s, l) == 0 ? M_FULL : M_NO;
    return memcmp(b, s, n) == 0 ? M_PART : M_NO;
}

/* Where s first occurs in b[0..n) (n if not); *hold: the length of the
 * longest suffix of b that begins s (what must wait). */
size_t tp_find(const char *s, const char *b, size_t n, size_t *hold) {
    size_t l = strlen(s);
    *hold = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != s[0]) continue;
        if (n - i >= l) {
            if (memcmp(b + i, s, l) == 0) return i;
        } else if (memcmp(b + i, s, n - i) == 0) {
            *hold = n - i;
            return n;
        }
    }
    return n;
}

size_t tp_avail(const struct dj_toolparse *p, bool *lim) {
    size_t n = p->len - p->pos;
    *lim = false;
    if (!p->committed) {
        size_t end = p->trig_pos + p->trig_len + TP_WINDOW;
        if (p->len > end) {
            *lim = true;
            n = end > p->pos ? end - p->pos : 0;
        }
    }
    return n;
}

void tp_op_next(struct dj_toolparse *p) {
    p->ip++;
    p->sub = 0;
}

void tp_op_jump(struct dj_toolparse *p, int j) {
    p->ip += j;
    p->sub = 0;
}

/* After the commit, something unexpected: the call is closed, the rest is content. */
bool tp_op_abort(struct dj_toolparse *p) {
    if (p->call_open) tp_call_end(p, false);
    tp_to_text(p);
    return true;
}

/* A mismatch: before the commit the trigger was content after all. */
bool tp_op_mismatch(struct dj_toolparse *p, const char *what) {
    if (!p->committed) {
        tp_revert(p);
        return true;
    }
    tp_fail(p, "%s", what);
    return tp_op_abort(p);
}

/* The output ended inside the call block. */
void tp_op_truncated(struct dj_toolparse *p) {
    if (tp_in_jcalls_object(p) || p->script[p->ip].k == OP_NAME || p->dname_n)
        tp_fail(p, "the output ended inside a tool call before its name");
    tp_call_end(p, false);
    p->pos = p->len;
    tp_to_text(p);
}

/* The op needs bytes it does not have. */
bool tp_op_need(struct dj_toolparse *p, bool lim) {
    if (!p->committed) {
        if (lim || p->eof) {
            tp_revert(p);
            return true;
        }
        return false;
    }
    if (p->eof) {
        tp_op_truncated(p);
        return true;
    }
    return false;
}

void tp_script_start(struct dj_toolparse *p, const struct tp_op *script, size_t trig_pos, size_t trig_len) {
    p->dname_n = 0;
    p->mode = TM_SCRIPT;
    p->script = script;
    p->ip = 0;
    p->sub = 0;
    p->trig_pos = trig_pos;
    p->trig_len = trig_len;
    p->committed = false;
    p->name_n = 0;
}

void tp_script_eof(struct dj_toolparse *p) {
    if (p->mode != TM_SCRIPT) return;
    if (!p->committed) tp_revert(p);
    else tp_op_truncated(p);
}

bool tp_is_ident(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':';
}

bool tp_utf8_valid(const char *s, size_t n) {
    struct tp_json j;
    tp_json_init(&j);
    j.st = J_STR;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') c = 'a'; /* fine in a name; the JSON string machine would end or escape */
        if (tp_json_feed(&j, c) == TJ_BAD) return false;
    }
    return j.utf_need == 0;
}

/* Undoes &amp; and &quot; (attribute values), in place. */
size_t tp_unescape_attr(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&' && n - i >= 5 && memcmp(s + i, "&amp;", 5) == 0) {
            s[o++] = '&';
            i += 4;
        } else if (s[i] == '&' && n - i >= 6 && memcmp(s + i, "&quot;", 6) == 0) {
            s[o++] = '"';
            i += 5;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

/* A parameter name as a JSON key's inside (a NUL, which jansson refuses in
 * keys, becomes U+FFFD). */
void tp_put_key(struct dj_toolparse *p, const char *s, size_t n) {
    struct tp_esc e = {0};
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        while (k < n && s[k]) k++;
        tp_args_str(p, &e, s + i, k - i);
        if (k < n) tp_args_put(p, "\\ufffd", 6);
        i = k;
    }
    tp_args_str_end(p, &e);
}

/* ---- OP_NAME ---------------------------------------------------------------------------- */

static bool op_name(struct dj_toolparse *p, const struct tp_op *op) {
    bool lim;
    size_t n = tp_avail(p, &lim);
    const char *b = p->buf + p->pos;
    size_t i = 0, skip = 0;
    bool end = false;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        if (op->f & F_CHARSET) {
            if (tp_is_ws(c) && p->name_n == 0) continue;
            if (tp_is_ws(c) || strchr(op->s, c)) {
                end = true;
                break;
            }
        } else if (c == (unsigned char)op->s[0]) {
            int m = tp_match(op->s, b + i, n - i);
            if (m == M_FULL) {
                end = true;
                skip = strlen(op->s);
                break;
            }
            if (m == M_PART) break;
        }
        if ((op->f & F_STRICT) && !tp_is_ident(c)) {
            p->pos += i;
            return tp_op_mismatch(p, "a tool name with a character that cannot be in one");
        }
        if (c < 0x20 && !tp_is_ws(c)) {
            p->pos += i;
            return tp_op_mismatch(p, "a control character in a tool name");
        }
        if (p->name_n == TP_NAME_MAX) {
            p->pos += i;
            return tp_op_mismatch(p, "a tool name longer than 256 bytes");
        }
        p->name[p->name_n++] = (char)c;
    }
    p->pos += i;
    if (!end) return tp_op_need(p, lim) || i > 0;
    p->pos += skip;
    char *s = p->name;
    size_t len = p->name_n;
    p->name_n = 0;
    while (len && tp_is_ws((unsigned char)s[len - 1])) len--;
    while (len && tp_is_ws((unsigned char)s[0])) {
        s++;
        len--;
    }
    if (op->f & F_KIMI) {
        if (len > 10 && memcmp(s, "functions.", 10) == 0) {
            s += 10;
            len -= 10;
        }
        size_t k = len;
        while (k && s[k - 1] >= '0' && s[k - 1] <= '9') k--;
        if (k && k < len && s[k - 1] == ':') len = k - 1;
    }
    if (op->f & F_UNESC) len = tp_unescape_attr(s, len);
    if (!len) return tp_op_mismatch(p, "an empty tool name");
    if (!tp_utf8_valid(s, len)) return tp_op_mismatch(p, "a tool name that is not UTF-8");
    if ((op->f & F_ALL) && len == 3 && memcmp(s, "all", 3) == 0) {
        tp_to_text(p); /* Functionary v3.2: ">>>all\n" is text */
        return true;
    }
    if (op->f & F_DEFER) {
        memmove(p->dname, s, len);
        p->dname_n = len;
    } else {
        tp_call_begin(p, s, len);
    }
    tp_op_next(p);
    return true;
}

/* ---- raw JSON arguments ------------------------------------------------------------------- */

/* Streams a raw JSON object as the arguments; on invalid JSON, the raw text
 * up to recover (not consumed; or the end).  *sub: 0 before '{', 1 in the
 * value, 2 invalid.  Returns 1 when the value is over, 0 to wait, -1 when the
 * op must stop (aborted / truncated), 2 progress. */
int tp_raw_args(struct dj_toolparse *p, int *sub, const char *recover) {
    bool lim;
    size_t n = tp_avail(p, &lim);
    const char *b = p->buf + p->pos;
    if (*sub == 0) {
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        p->pos += i;
        if (i == n) return tp_op_need(p, lim) ? -1 : i ? 2 : 0;
        if (b[i] != '{') {
            tp_fail(p, "tool call %u: the arguments are not a JSON object", p->n_calls - 1);
            tp_op_abort(p);
            return -1;
        }
        *sub = 1;
        return 2;
    }
    if (*sub == 1) {
        for (size_t i = 0; i < n; i++) {
            enum tp_json_ret r = tp_args_put(p, b + i, 1);
            if (r == TJ_DONE) {
                p->pos += i + 1;
                return 1;
            }
            if (r == TJ_BAD) {
                p->pos += i + 1;
                *sub = 2;
                return 2;
            }
        }
        p->pos += n;
        if (p->eof) {
            tp_op_truncated(p);
            return -1;
        }
        return n ? 2 : 0;
    }
    size_t hold = 0, k = recover ? tp_find(recover, b, n, &hold) : n;
    if (p->eof) hold = 0;
    if (k < n) {
        tp_args_put(p, b, k);
        p->pos += k;
        return 1;
    }
    tp_args_put(p, b, n - hold);
    p->pos += n - hold;
    if (p->eof) {
        tp_op_truncated(p);
        return -1;
    }
    return n - hold ? 2 : 0;
}

static bool op_args(struct dj_toolparse *p, const struct tp_op *op) {
    int r = tp_raw_args(p, &p->sub, op->s);
    if (r == 1) {
        tp_call_end(p, true);
        tp_op_next(p);
        return true;
    }
    return r != 0;
}

/* ---- OP_CODE -------------------------------------------------------------------------------- */

static bool op_code(struct dj_toolparse *p, const struct tp_op *op) {
    if (p->sub == 0) {
        if (!p->call_open) tp_call_begin(p, (const char *)op->d, strlen((const char *)op->d));
        memset(&p->esc, 0, sizeof p->esc);
        tp_args_put(p, "{\"code\": \"", 10);
        p->sub = 1;
        return true;
    }
    size_t n = p->len - p->pos, hold = 0;
    const char *b = p->buf + p->pos;
    size_t k = op->s ? tp_find(op->s, b, n, &hold) : n;
    if (p->eof) hold = 0;
    size_t e = k < n ? k : n - hold;
    tp_args_str(p, &p->esc, b, e);
    p->pos += e;
    if (k < n || p->eof) {
        tp_args_str_end(p, &p->esc);
        tp_args_put(p, "\"}", 2);
        tp_call_end(p, true);
        tp_op_next(p);
        return true;
    }
    return e > 0;
}

/* ---- the interpreter ------------------------------------------------------------------------ */

bool tp_step_script(struct dj_toolparse *p) {
    const struct tp_op *op = &p->script[p->ip];
    /* a deferred name commits when its arguments' op starts (XPARAMS: once a parameter or the end shows) */
    if (p->dname_n && op->k >= OP_ARGS && op->k <= OP_CODE && op->k != OP_XPARAMS) {
        tp_call_begin(p, p->dname, p->dname_n);
        p->dname_n = 0;
    }
    bool lim;
    size_t n = tp_avail(p, &lim);
    const char *b = p->buf + p->pos;
    switch (op->k) {
    case OP_WS: {
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        p->pos += i;
        if (i < n) {
            tp_op_next(p);
            return true;
        }
        if (lim) return tp_op_need(p, true);
        if (p->eof) {
            tp_op_next(p);
            return true;
        }
        return i > 0;
    }
    case OP_LIT:
    case OP_OPT:
    case OP_IFLIT:
    case OP_IFPEEK: {
        int m = tp_match(op->s, b, n);
        if (m == M_PART) return tp_op_need(p, lim);
        if (m == M_FULL) {
            if (op->k == OP_IFPEEK) {
                tp_op_jump(p, op->j);
                return true;
            }
            p->pos += strlen(op->s);
            tp_op_next(p);
            return true;
        }
        if (op->k == OP_LIT) {
            char what[80];
            snprintf(what, sizeof what, "expected \"%s\"", op->s);
            return tp_op_mismatch(p, what);
        }
        if (op->k == OP_IFLIT) tp_op_jump(p, op->j);
        else tp_op_next(p);
        return true;
    }
    case OP_IFJSON: {
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        p->pos += i;
        if (i == n) return tp_op_need(p, lim) || i > 0;
        if (b[i] == '{' || b[i] == '[') tp_op_jump(p, op->j);
        else tp_op_next(p);
        return true;
    }
    case OP_SKIPTO: {
        size_t hold, k = tp_find(op->s, b, n, &hold);
        if (k < n) {
            p->pos += k + strlen(op->s);
            tp_op_next(p);
            return true;
        }
        p->pos += n - hold;
        return tp_op_need(p, lim) || n - hold > 0;
    }
    case OP_NAME: return op_name(p, op);
    case OP_ARGS: return op_args(p, op);
    case OP_CODE: return op_code(p, op);
    case OP_JCALLS: return tp_op_jcalls(p, op);
    case OP_XPARAMS: return tp_op_xparams(p, op);
    case OP_PYCALLS: return tp_op_pycalls(p);
    case OP_GEMMA: return tp_op_gemma(p);
    case OP_END:
        if (!p->committed) {
            tp_revert(p);
            return true;
        }
        tp_to_text(p);
        return true;
    case OP_HDR:
        p->mode = TM_HDR;
        tp_seg_end(p);
        return true;
    }
    return false;
}

/* ---- harmony headers ---------------------------------------------------------------------------- */

/* Could b[0..n) begin a header? */
static bool hdr_plausible(const struct tp_hcfg *h, const char *b, size_t n) {
    const char *starts[4] = {h->channel, " to=", "to=", "<|constrain|>"};
    for (int i = 0; i < 4; i++)
        if (starts[i] && tp_match(starts[i], b, n) != M_NO) return true;
    return false;
}

/* The word after key in the header (letters, digits, _ . -), or empty. */
static size_t hdr_word(const char *h, const char *key, const char **w) {
    const char *q = strstr(h, key);
    if (!q) return 0;
    q += strlen(key);
    size_t n = 0;
    while (q[n] && (tp_is_ident((unsigned char)q[n]) || q[n] == '/') && q[n] != ':') n++;
    *w = q;
    return n;
}

bool tp_step_hdr(struct dj_toolparse *p) {
    const struct tp_hcfg *h = p->fam->harmony;
    size_t n = p->len - p->pos;
    const char *b = p->buf + p->pos;
    if (!n) return false;
    int m = tp_match(h->start, b, n);
    if (m == M_FULL) {
        p->pos += strlen(h->start);
        return true;
    }
    if (m == M_PART) {
        if (!p->eof) return false;
        p->pos = p->len; /* a cut header */
        return true;
    }
    if (!hdr_plausible(h, b, n)) {
        tp_harmony_off(p);
        return true;
    }
    size_t hold, ml = strlen(h->message), k = tp_find(h->message, b, n, &hold);
    if (k == n) {
        if (n > 2 * TP_NAME_MAX + ml) { /* no marker can start within the cap */
            tp_harmony_off(p);
            return true;
        }
        if (p->eof) p->pos = p->len;
        return p->eof;
    }
    if (k > 2 * TP_NAME_MAX) {
        tp_harmony_off(p);
        return true;
    }
    memcpy(p->hdr, b, k);
    p->hdr[k] = '\0';
    p->hdr_n = k;
    p->pos += k + ml;
    const char *ch = "", *to = "";
    size_t chn = h->channel ? hdr_word(p->hdr, h->channel, &ch) : 0, ton = hdr_word(p->hdr, "to=", &to);
    tp_seg_end(p);
    p->hend_verbatim = 0;
    bool verbatim = false;
    if (h->muse) {
        if (ton == 4 && memcmp(to, "self", 4) == 0) {
            if (p->reasoning) {
                p->mode = TM_THINK;
                return true;
            }
            verbatim = true;
        }
        /* user, or a tool: content (an <atem:function_calls> block in it is a call) */
    } else if (ton && !(ton == 4 && memcmp(to, "user", 4) == 0)) {
        if (p->parse_tools) {
            if (ton > 10 && memcmp(to, "functions.", 10) == 0) {
                to += 10;
                ton -= 10;
            }
            tp_script_start(p, p->fam->hcall_script, p->pos, 0);
            tp_call_begin(p, to, ton);
            return true;
        }
        verbatim = true;
    } else if (chn == 8 && memcmp(ch, "analysis", 8) == 0) {
        if (p->reasoning) {
            p->mode = TM_THINK;
            return true;
        }
        verbatim = true;
    }
    p->mode = TM_TEXT;
    if (verbatim) {
        tp_text(p, DJ_DELTA_CONTENT, p->hdr, p->hdr_n);
        tp_text(p, DJ_DELTA_CONTENT, h->message, ml);
        p->hend_verbatim = 1;
    }
    return true;
}
