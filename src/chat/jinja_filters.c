/*
 * jinja_filters.c — jinja2's built-in filters and tests as the templates use
 * them, plus transformers' tojson (json.dumps with ensure_ascii=False by
 * default, no HTML escaping).
 *
 * Filters that jinja2 implements as generators (map, select, reject,
 * selectattr, rejectattr, unique, batch, items, reverse of a sequence) return
 * JJ_LIST_ITER values: iterable, but without len() and not JSON-serializable,
 * as under Python (tools|map(attribute='function')|tojson raises TypeError).
 * jinja2 filters that exist but are not implemented here (groupby, wordwrap,
 * urlize, ...) are known names, so templates compile as under jinja2, and
 * fail when they run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

int jj_splitlines(struct jj_render *r, const struct jj_str *s, bool keepends, struct jv *out);
int jj_str_center(struct jj_render *r, const struct jj_str *s, int64_t width, struct jv *out);

enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST, F_FLOAT,
    F_FORCEESCAPE, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP,
    F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR,
    F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_UNIMPLEMENTED,
};

static const struct {
    const char *name;
    int id;
} FILTERS[] = {
    {"abs", F_ABS}, {"attr", F_ATTR}, {"batch", F_BATCH}, {"capitalize", F_CAPITALIZE}, {"center", F_CENTER},
    {"count", F_LENGTH}, {"d", F_DEFAULT}, {"default", F_DEFAULT}, {"dictsort", F_DICTSORT}, {"e", F_ESCAPE},
    {"escape", F_ESCAPE}, {"first", F_FIRST}, {"float", F_FLOAT}, {"forceescape", F_FORCEESCAPE},
    {"format", F_FORMAT}, {"indent", F_INDENT}, {"int", F_INT}, {"items", F_ITEMS}, {"join", F_JOIN},
    {"last", F_LAST}, {"length", F_LENGTH}, {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP}, {"max", F_MAX},
    {"min", F_MIN}, {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
    {"reverse", F_REVERSE}, {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT},
    {"selectattr", F_SELECTATTR}, {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM}, {"title", F_TITLE},
    {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE}, {"upper", F_UPPER}, {"wordcount", F_WORDCOUNT},
    /* jinja2 built-ins not implemented: known, so that templates compile as under jinja2 */
    {"filesizeformat", F_UNIMPLEMENTED}, {"groupby", F_UNIMPLEMENTED}, {"pprint", F_UNIMPLEMENTED},
    {"random", F_UNIMPLEMENTED}, {"slice", F_UNIMPLEMENTED}, {"striptags", F_UNIMPLEMENTED},
    {"truncate", F_UNIMPLEMENTED}, {"urlencode", F_UNIMPLEMENTED}, {"urlize", F_UNIMPLEMENTED},
    {"wordwrap", F_UNIMPLEMENTED}, {"xmlattr", F_UNIMPLEMENTED},
};

#define N_FILTERS (sizeof FILTERS / sizeof FILTERS[0])

int jj_filter_id(const char *name) {
    for (size_t i = 0; i < N_FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return (int)i;
    return -1;
}

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_NUMBER, T_INTEGER, T_FLOAT,
    T_BOOLEAN, T_TRUE, T_FALSE, T_CALLABLE, T_ODD, T_EVEN, T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE,
    T_IN, T_SAMEAS, T_LOWER, T_UPPER, T_ESCAPED, T_FILTER, T_TEST,
};

static const struct {
    const char *name;
    int id;
} TESTS[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"string", T_STRING},
    {"mapping", T_MAPPING}, {"iterable", T_ITERABLE}, {"sequence", T_SEQUENCE}, {"number", T_NUMBER},
    {"integer", T_INTEGER}, {"float", T_FLOAT}, {"boolean", T_BOOLEAN}, {"true", T_TRUE}, {"false", T_FALSE},
    {"callable", T_CALLABLE}, {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY},
    {"equalto", T_EQ}, {"eq", T_EQ}, {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT}, {"<", T_LT},
    {"lessthan", T_LT}, {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {">", T_GT}, {"greaterthan", T_GT},
    {"ge", T_GE}, {">=", T_GE}, {"in", T_IN}, {"sameas", T_SAMEAS}, {"lower", T_LOWER}, {"upper", T_UPPER},
    {"escaped", T_ESCAPED}, {"filter", T_FILTER}, {"test", T_TEST},
};

#define N_TESTS (sizeof TESTS / sizeof TESTS[0])

int jj_test_id(const char *name) {
    for (size_t i = 0; i < N_TESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return (int)i;
    return -1;
}

/* ---- helpers ---- */

static int test_by_value(struct jj_render *r, struct jv name, struct jv item, const struct jj_args *extra, bool *res) {
    if (name.t != JJ_STR) return jj_fail(r, "TemplateRuntimeError", "a test name must be a string");
    int id = jj_test_id(name.u.s->s);
    if (id < 0) return jj_fail(r, "TemplateRuntimeError", "No test named '%s'.", name.u.s->s);
    return jj_apply_test(r, id, item, extra, res);
}

/* jinja2's make_attrgetter: "a.b.0" looked up item-first, each part in turn;
 * with a default (not None), an undefined part becomes the default and the
 * lookup goes on from it, as jinja2 does (map(attribute='a.b', default='-')). */
static int attr_path_def(struct jj_render *r, struct jv item, struct jv attr, struct jv def, struct jv *out) {
    bool has_def = def.t != JJ_NONE && !jv_is_missing(def);
    if (attr.t != JJ_STR) {
        if (jj_getitem(r, item, attr, out)) return -1;
        if (has_def && out->t == JJ_UNDEF) jv_decref(*out), *out = jv_incref(def);
        return 0;
    }
    const struct jj_str *s = attr.u.s;
    struct jv cur = jv_incref(item);
    size_t i = 0;
    for (;;) {
        const char *dot = memchr(s->s + i, '.', s->n - i);
        size_t end = dot ? (size_t)(dot - s->s) : s->n;
        bool digits = end > i;
        int64_t idx = 0;
        for (size_t k = i; k < end; k++) {
            if (s->s[k] < '0' || s->s[k] > '9' || idx > INT64_MAX / 10 - 10) digits = false;
            else idx = idx * 10 + (s->s[k] - '0');
        }
        struct jv key;
        if (digits) key = jv_int(idx);
        else {
            struct jj_str *k = jj_str_new(s->s + i, end - i, JJ_PROV_NONE);
            if (!k) {
                jv_decref(cur);
                return jj_fail_oom(r);
            }
            key = jv_str(k);
        }
        struct jv next;
        int rc = jj_getitem(r, cur, key, &next);
        jv_decref(key);
        jv_decref(cur);
        if (rc) return -1;
        cur = next;
        if (has_def && cur.t == JJ_UNDEF) jv_decref(cur), cur = jv_incref(def);
        if (!dot) break;
        i = end + 1;
    }
    *out = cur;
    return 0;
}

static int attr_path(struct jj_render *r, struct jv item, struct jv attr, struct jv *out) {
    return attr_path_def(r, item, attr, jv_none(), out);
}

/* The sort / unique / min / max key of item: attribute(s) then lowercase strings. */
static int sort_key(struct jj_render *r, struct jv item, struct jv attr, bool case_sensitive, struct jv *out) {
    struct jv k;
    if (jv_is_missing(attr) || attr.t == JJ_NONE) k = jv_incref(item);
    else if (attr.t == JJ_STR && memchr(attr.u.s->s, ',', attr.u.s->n)) {
        /* make_multi_attrgetter: "a,b" → a tuple */
        struct jj_list *t = jj_list_new(JJ_LIST_TUPLE, 2);
        if (!t) return jj_fail_oom(r);
        const struct jj_str *s = attr.u.s;
        size_t i = 0;
        for (;;) {
            const char *comma = memchr(s->s + i, ',', s->n - i);
            size_t end = comma ? (size_t)(comma - s->s) : s->n;
            struct jj_str *part = jj_str_new(s->s + i, end - i, JJ_PROV_NONE);
            struct jv v;
            if (!part) {
                jv_decref(jv_list(t));
                return jj_fail_oom(r);
            }
            int rc = attr_path(r, item, jv_str(part), &v);
            jj_str_decref(part);
            if (rc) {
                jv_decref(jv_list(t));
                return -1;
            }
            if (!case_sensitive && v.t == JJ_STR) {
                struct jv low;
                rc = jj_str_case(r, v.u.s, JJ_CASE_LOWER, &low);
                jv_decref(v);
                if (rc) {
                    jv_decref(jv_list(t));
                    return -1;
                }
                v = low;
            }
            jj_list_push(t, v);
            if (!comma) break;
            i = end + 1;
        }
        *out = jv_list(t);
        return 0;
    } else if (attr_path(r, item, attr, &k)) {
        return -1;
    }
    if (!case_sensitive && k.t == JJ_STR) {
        struct jv low;
        int rc = jj_str_case(r, k.u.s, JJ_CASE_LOWER, &low);
        jv_decref(k);
        if (rc) return -1;
        k = low;
    }
    *out = k;
    return 0;
}

/* Stable merge sort of idx[] by keys[] (Python's sorted, reverse keeping stability). */
struct sorter {
    struct jj_render *r;
    const struct jv *keys;
    bool reverse, failed;
};

static bool sort_less(struct sorter *s, size_t a, size_t b) {
    int c;
    struct jv x = s->keys[a], y = s->keys[b];
    if (s->reverse) {
        struct jv t = x;
        x = y, y = t;
    }
    if (!jv_compare(x, y, &c)) {
        if (!s->failed)
            jj_fail(s->r, "TypeError", "'<' not supported between instances of '%s' and '%s'", jv_type_name(x), jv_type_name(y));
        s->failed = true;
        return false;
    }
    return c < 0;
}

static void merge_sort(struct sorter *s, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2 || s->failed) return;
    size_t h = n / 2;
    merge_sort(s, idx, tmp, h);
    merge_sort(s, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_less(s, idx[j], idx[i]) ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Sorts items by keys into a new list of sub type `sub`. */
static int sorted_list(struct jj_render *r, const struct jj_list *items, const struct jv *keys, bool reverse, struct jv *out) {
    size_t n = items->n;
    size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx), free(tmp);
        return jj_fail_oom(r);
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    size_t log2n = 1;
    while (log2n < 64 && ((size_t)1 << log2n) < n) log2n++;
    if (jj_charge_items(r, n * log2n)) { /* a merge sort's comparisons */
        free(idx), free(tmp);
        return -1;
    }
    struct sorter s = {r, keys, reverse, false};
    merge_sort(&s, idx, tmp, n);
    free(tmp);
    if (s.failed) {
        free(idx);
        return -1;
    }
    struct jj_list *l = jj_list_new(JJ_LIST_LIST, n);
    if (!l) {
        free(idx);
        return jj_fail_oom(r);
    }
    for (size_t i = 0; i < n; i++) jj_list_push(l, jv_incref(items->v[idx[i]]));
    free(idx);
    *out = jv_list(l);
    return jj_charge_out(r, n * 16, out);
}

static void free_keys(struct jv *keys, size_t n) {
    for (size_t i = 0; i < n; i++) jv_decref(keys[i]);
    free(keys);
}

static int to_str(struct jj_render *r, struct jv v, struct jj_str **out) { return jj_to_str(r, v, out); }

static bool is_int_like(struct jv v) { return v.t == JJ_INT || v.t == JJ_BOOL; }
static int64_t int_of(struct jv v) { return v.t == JJ_INT ? v.u.i : v.u.b; }

/* Python int(str, base) for base 10 (and 2/8/16 with an optional prefix); false when invalid. */
static bool parse_int(const struct jj_str *s, int64_t base, int64_t *out) {
    size_t i = 0, n = s->n;
    while (i < n && jj_is_space((unsigned char)s->s[i])) i++;
    while (n > i && jj_is_space((unsigned char)s->s[n - 1])) n--;
    bool neg = false;
    if (i < n && (s->s[i] == '+' || s->s[i] == '-')) neg = s->s[i++] == '-';
    if (base == 16 && n - i > 2 && s->s[i] == '0' && (s->s[i + 1] | 0x20) == 'x') i += 2;
    if (base == 8 && n - i > 2 && s->s[i] == '0' && (s->s[i + 1] | 0x20) == 'o') i += 2;
    if (base == 2 && n - i > 2 && s->s[i] == '0' && (s->s[i + 1] | 0x20) == 'b') i += 2;
    if (i >= n || base < 2 || base > 36) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char c = s->s[i];
        if (c == '_' && prev_digit && i + 1 < n && s->s[i + 1] != '_') {
            prev_digit = false;
            continue;
        }
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
        if (d >= base) return false;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* Python float(str); false when invalid. */
static bool parse_float(const struct jj_str *s, double *out) {
    size_t i = 0, n = s->n;
    while (i < n && jj_is_space((unsigned char)s->s[i])) i++;
    while (n > i && jj_is_space((unsigned char)s->s[n - 1])) n--;
    if (i >= n || n - i > 400) return false;
    char buf[512];
    size_t k = 0;
    for (size_t j = i; j < n; j++) {
        char c = s->s[j];
        if (c == '_') continue;
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || (c | 0x20) == 'i' ||
              (c | 0x20) == 'n' || (c | 0x20) == 'f' || (c | 0x20) == 't' || (c | 0x20) == 'y' || (c | 0x20) == 'a'))
            return false;
        buf[k++] = c;
    }
    buf[k] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return end == buf + k && k > 0;
}

static int new_iter(struct jj_render *r, struct jj_list **out) {
    *out = jj_list_new(JJ_LIST_ITER, 0);
    return *out ? 0 : jj_fail_oom(r);
}

/* ---- tojson ---- */

static int do_tojson(struct jj_render *r, struct jv v, const struct jv *p, struct jv *out) {
    struct jj_json_opts o = {.ensure_ascii = !jv_is_missing(p[0]) && jv_truthy(p[0]),
                             .sort_keys = !jv_is_missing(p[3]) && jv_truthy(p[3])};
    char spaces[64];
    struct jv indent = p[1], seps = p[2];
    if (!jv_is_missing(indent) && indent.t != JJ_NONE) {
        if (is_int_like(indent)) {
            int64_t w = int_of(indent);
            if (w < 0) w = 0;
            if (w > (int64_t)sizeof spaces) return jj_fail(r, "ValueError", "tojson: indent too large");
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else if (indent.t == JJ_STR) {
            o.indent = indent.u.s->s;
            o.indent_len = indent.u.s->n;
        } else {
            return jj_fail(r, "TypeError", "tojson: indent must be an integer or a string");
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.item_sep_len = o.indent ? 1 : 2;
    o.key_sep = ": ";
    o.key_sep_len = 2;
    if (!jv_is_missing(seps) && seps.t != JJ_NONE) {
        if (seps.t != JJ_LIST || seps.u.l->n != 2 || seps.u.l->v[0].t != JJ_STR || seps.u.l->v[1].t != JJ_STR)
            return jj_fail(r, "ValueError", "tojson: separators must be a pair of strings");
        o.item_sep = seps.u.l->v[0].u.s->s;
        o.item_sep_len = seps.u.l->v[0].u.s->n;
        o.key_sep = seps.u.l->v[1].u.s->s;
        o.key_sep_len = seps.u.l->v[1].u.s->n;
    }
    struct jj_buf b = {0};
    const char *bad = NULL;
    if (!jj_json_dump(v, &o, &b, &bad)) {
        jj_buf_free(&b);
        if (bad && !strcmp(bad, "key")) return jj_fail(r, "TypeError", "keys must be str, int, float, bool or None");
        if (bad && !strcmp(bad, "mixed keys")) return jj_fail(r, "TypeError", "'<' not supported between the dict's keys");
        if (bad && !strcmp(bad, "recursion")) return jj_fail(r, "RecursionError", "maximum recursion depth exceeded");
        return jj_fail(r, "TypeError", "Object of type %s is not JSON serializable", bad ? bad : "object");
    }
    size_t n = b.n;
    struct jj_str *s = jj_buf_take(&b);
    if (!s) return jj_fail_oom(r);
    *out = jv_str(s);
    /* the values walked: about one per 8 bytes written (a list of small ints) */
    return jj_charge_items_out(r, n / 8, out);
}

/* ---- indent ---- */

static int do_indent(struct jj_render *r, struct jv v, const struct jv *p, struct jv *out) {
    struct jj_str *s;
    if (to_str(r, v, &s)) return -1;
    struct jj_str *ind = NULL;
    char spaces[256];
    size_t ind_n = 4;
    const char *ind_p = "    ";
    if (!jv_is_missing(p[0])) {
        if (p[0].t == JJ_STR) ind = p[0].u.s, ind_p = ind->s, ind_n = ind->n;
        else if (is_int_like(p[0])) {
            int64_t w = int_of(p[0]);
            if (w < 0) w = 0;
            if (w > (int64_t)sizeof spaces) {
                jj_str_decref(s);
                return jj_fail(r, "ValueError", "indent: width too large");
            }
            memset(spaces, ' ', (size_t)w);
            ind_p = spaces, ind_n = (size_t)w;
        } else {
            jj_str_decref(s);
            return jj_fail(r, "TypeError", "indent: width must be an integer or a string");
        }
    }
    bool first = !jv_is_missing(p[1]) && jv_truthy(p[1]);
    bool blank = !jv_is_missing(p[2]) && jv_truthy(p[2]);
    /* s += "\n"; lines = s.splitlines() */
    struct jj_buf sb = {0};
    jj_buf_put_str(&sb, s);
    jj_buf_putc(&sb, '\n');
    bool markup = s->markup;
    jj_str_decref(s);
    struct jj_str *s2 = jj_buf_take(&sb);
    if (!s2) return jj_fail_oom(r);
    struct jv lines;
    int rc = jj_splitlines(r, s2, false, &lines);
    jj_str_decref(s2);
    if (rc) return -1;
    struct jj_buf b = {0};
    bool ind_input = ind && jj_str_any_input(ind);
    if (first) jj_buf_put(&b, ind_p, ind_n, ind_input);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        const struct jj_str *line = lines.u.l->v[i].u.s;
        if (i) {
            jj_buf_putc(&b, '\n');
            if (blank || line->n) jj_buf_put(&b, ind_p, ind_n, ind_input);
        }
        jj_buf_put_str(&b, line);
    }
    jv_decref(lines);
    size_t n = b.n;
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    res->markup = markup;
    *out = jv_str(res);
    return jj_charge_out(r, n, out);
}

/* ---- select / reject / map ---- */

static int do_select(struct jj_render *r, struct jv v, const struct jj_args *a, bool attr, bool reject, struct jv *out) {
    size_t off = attr ? 1 : 0;
    struct jj_list *items, *res;
    if (!jv_truthy(v)) /* jinja2: "if value:" before anything else, so none|select(...) is empty */
        return new_iter(r, &res) ? -1 : (*out = jv_list(res), 0);
    if (attr && a->n_pos < 1) return jj_fail(r, "TypeError", "selectattr/rejectattr need an attribute");
    if (jj_iterate(r, v, &items)) return -1;
    if (new_iter(r, &res)) {
        jv_decref(jv_list(items));
        return -1;
    }
    struct jj_args extra = *a;
    bool have_test = a->n_pos > off;
    if (have_test) {
        extra.pos = a->pos + off + 1;
        extra.n_pos = a->n_pos - off - 1;
    }
    int rc = 0;
    for (size_t i = 0; i < items->n && !rc; i++) {
        struct jv x = items->v[i], key;
        if (attr) rc = attr_path(r, x, a->pos[0], &key);
        else key = jv_incref(x);
        if (rc) break;
        bool t;
        if (have_test) rc = test_by_value(r, a->pos[off], key, &extra, &t);
        else t = jv_truthy(key);
        jv_decref(key);
        if (!rc && t != reject && !jj_list_push(res, jv_incref(x))) rc = jj_fail_oom(r);
    }
    jv_decref(jv_list(items));
    if (rc) {
        jv_decref(jv_list(res));
        return -1;
    }
    *out = jv_list(res);
    return 0;
}

static int do_map(struct jj_render *r, struct jv v, const struct jj_args *a, struct jv *out) {
    struct jv attribute = jv_missing(), def = jv_none();
    struct jj_list *items, *res;
    if (!jv_truthy(v)) return new_iter(r, &res) ? -1 : (*out = jv_list(res), 0); /* jinja2: "if value:" */
    int fid = -1;
    struct jj_args extra = *a;
    if (a->n_pos == 0) {
        bool have_attr = false;
        for (size_t k = 0; k < a->n_kw; k++) {
            if (a->kw_lens[k] == 9 && !memcmp(a->kw_names[k], "attribute", 9)) attribute = a->kw[k], have_attr = true;
            else if (a->kw_lens[k] == 7 && !memcmp(a->kw_names[k], "default", 7)) def = a->kw[k];
            else
                return jj_fail(r, "FilterArgumentError", "Unexpected keyword argument '%.*s'", (int)a->kw_lens[k], a->kw_names[k]);
        }
        if (!have_attr) return jj_fail(r, "FilterArgumentError", "map requires a filter argument");
    } else {
        if (a->pos[0].t != JJ_STR) return jj_fail(r, "FilterArgumentError", "map: the filter name must be a string");
        fid = jj_filter_id(a->pos[0].u.s->s);
        if (fid < 0) return jj_fail(r, "TemplateRuntimeError", "No filter named '%s'.", a->pos[0].u.s->s);
        extra.pos = a->pos + 1;
        extra.n_pos = a->n_pos - 1;
    }
    if (jj_iterate(r, v, &items)) return -1;
    if (new_iter(r, &res)) {
        jv_decref(jv_list(items));
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < items->n && !rc; i++) {
        struct jv y;
        if (fid >= 0) rc = jj_apply_filter(r, fid, items->v[i], &extra, &y);
        else {
            rc = attr_path_def(r, items->v[i], attribute, def, &y);
        }
        if (!rc && !jj_list_push(res, y)) rc = jj_fail_oom(r);
    }
    jv_decref(jv_list(items));
    if (rc) {
        jv_decref(jv_list(res));
        return -1;
    }
    *out = jv_list(res);
    return 0;
}

/* ---- the filter table ---- */

static int str_filter_case(struct jj_render *r, struct jv v, int mode, struct jv *out) {
    struct jj_str *s;
    if (to_str(r, v, &s)) return -1;
    int rc = jj_str_case(r, s, mode, out);
    jj_str_decref(s);
    return rc;
}

static int escape_value(struct jj_render *r, struct jv v, bool force, struct jv *out) {
    if (!force && v.t == JJ_STR && v.u.s->markup) {
        *out = jv_incref(v);
        return 0;
    }
    struct jj_str *s;
    if (to_str(r, v, &s)) return -1;
    struct jj_buf b = {0};
    jj_html_escape(s, &b);
    jj_str_decref(s);
    struct jj_str *res = jj_buf_take(&b);
    if (!res) return jj_fail_oom(r);
    res->markup = true;
    *out = jv_str(res);
    return 0;
}

int jj_apply_filter(struct jj_render *r, int fi, struct jv v, const struct jj_args *a, struct jv *out) {
    if (fi < 0 || (size_t)fi >= N_FILTERS) return jj_fail(r, "TemplateRuntimeError", "no such filter");
    const char *name = FILTERS[fi].name;
    struct jv p[6];
    int64_t n64;
    if (jj_charge_scan(r, v, a)) return -1;
    switch (FILTERS[fi].id) {
    case F_TOJSON: {
        static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
        if (jj_bind(r, "tojson", a, names, 4, p)) return -1;
        return do_tojson(r, v, p, out);
    }
    case F_LENGTH:
        if (jj_bind(r, name, a, NULL, 0, p) || jj_len(r, v, &n64)) return -1;
        *out = jv_int(n64);
        return 0;
    case F_TRIM: {
        static const char *const names[] = {"chars"};
        if (jj_bind(r, name, a, names, 1, p)) return -1;
        const struct jj_str *chars = NULL;
        if (!jv_is_missing(p[0]) && p[0].t != JJ_NONE) {
            if (p[0].t != JJ_STR) return jj_fail(r, "TypeError", "strip arg must be None or str");
            chars = p[0].u.s;
        }
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        int rc = jj_str_strip(r, s, chars, JJ_STRIP_BOTH, out);
        jj_str_decref(s);
        return rc;
    }
    case F_STRING: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        *out = jv_str(s);
        return 0;
    }
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        bool boolean = !jv_is_missing(p[1]) && jv_truthy(p[1]);
        if ((v.t == JJ_UNDEF) || (boolean && !jv_truthy(v))) {
            if (jv_is_missing(p[0])) {
                struct jj_str *e = jj_str_new("", 0, JJ_PROV_NONE);
                if (!e) return jj_fail_oom(r);
                *out = jv_str(e);
            } else {
                *out = jv_incref(p[0]);
            }
        } else {
            *out = jv_incref(v);
        }
        return 0;
    }
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        struct jj_str *sep = NULL;
        if (!jv_is_missing(p[0]) && to_str(r, p[0], &sep)) {
            jv_decref(jv_list(items));
            return -1;
        }
        struct jj_buf b = {0};
        int rc = 0;
        for (size_t i = 0; i < items->n && !rc; i++) {
            if (i && sep) jj_buf_put_str(&b, sep);
            if (!jv_is_missing(p[1]) && p[1].t != JJ_NONE) {
                struct jv x;
                rc = attr_path(r, items->v[i], p[1], &x);
                if (!rc) {
                    jj_str_of(x, &b);
                    jv_decref(x);
                }
            } else {
                jj_str_of(items->v[i], &b);
            }
        }
        jv_decref(jv_list(items));
        if (sep) jj_str_decref(sep);
        if (rc) {
            jj_buf_free(&b);
            return -1;
        }
        size_t n = b.n;
        struct jj_str *res = jj_buf_take(&b);
        if (!res) return jj_fail_oom(r);
        *out = jv_str(res);
        return jj_charge_out(r, n, out);
    }
    case F_ITEMS: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        struct jj_list *l;
        if (new_iter(r, &l)) return -1;
        if (v.t == JJ_UNDEF) {
            *out = jv_list(l);
            return 0;
        }
        if (v.t != JJ_DICT) {
            jv_decref(jv_list(l));
            return jj_fail(r, "TypeError", "Can only get item pairs from a mapping.");
        }
        for (size_t i = 0; i < v.u.d->n; i++) {
            struct jj_list *t = jj_list_new(JJ_LIST_TUPLE, 2);
            if (!t) {
                jv_decref(jv_list(l));
                return jj_fail_oom(r);
            }
            jj_list_push(t, jv_incref(v.u.d->k[i]));
            jj_list_push(t, jv_incref(v.u.d->v[i]));
            if (!jj_list_push(l, jv_list(t))) {
                jv_decref(jv_list(l));
                return jj_fail_oom(r);
            }
        }
        *out = jv_list(l);
        return 0;
    }
    case F_LIST: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        struct jj_list *l = jj_list_new(JJ_LIST_LIST, items->n);
        if (!l) {
            jv_decref(jv_list(items));
            return jj_fail_oom(r);
        }
        for (size_t i = 0; i < items->n; i++) jj_list_push(l, jv_incref(items->v[i]));
        jv_decref(jv_list(items));
        *out = jv_list(l);
        return 0;
    }
    case F_SELECT: return do_select(r, v, a, false, false, out);
    case F_REJECT: return do_select(r, v, a, false, true, out);
    case F_SELECTATTR: return do_select(r, v, a, true, false, out);
    case F_REJECTATTR: return do_select(r, v, a, true, true, out);
    case F_MAP: return do_map(r, v, a, out);
    case F_LOWER: return jj_bind(r, name, a, NULL, 0, p) ? -1 : str_filter_case(r, v, JJ_CASE_LOWER, out);
    case F_UPPER: return jj_bind(r, name, a, NULL, 0, p) ? -1 : str_filter_case(r, v, JJ_CASE_UPPER, out);
    case F_CAPITALIZE: return jj_bind(r, name, a, NULL, 0, p) ? -1 : str_filter_case(r, v, JJ_CASE_CAPITALIZE, out);
    case F_TITLE: return jj_bind(r, name, a, NULL, 0, p) ? -1 : str_filter_case(r, v, JJ_CASE_JINJA_TITLE, out);
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count"};
        if (jj_bind(r, name, a, names, 3, p)) return -1;
        if (jv_is_missing(p[0]) || jv_is_missing(p[1])) return jj_fail(r, "TypeError", "replace() needs old and new");
        struct jj_str *s = NULL, *o = NULL, *nw = NULL;
        int64_t count = -1;
        if (!jv_is_missing(p[2]) && p[2].t != JJ_NONE) {
            if (!is_int_like(p[2])) return jj_fail(r, "TypeError", "replace() count must be an integer");
            count = int_of(p[2]);
        }
        int rc = to_str(r, v, &s);
        if (!rc) rc = to_str(r, p[0], &o);
        if (!rc) rc = to_str(r, p[1], &nw);
        if (!rc) rc = jj_str_replace(r, s, o, nw, count, out);
        if (s) jj_str_decref(s);
        if (o) jj_str_decref(o);
        if (nw) jj_str_decref(nw);
        return rc;
    }
    case F_SAFE: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        if (v.t == JJ_STR && v.u.s->markup) {
            *out = jv_incref(v);
            return 0;
        }
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        struct jv copy;
        int rc = jj_substr(r, s, 0, s->n, &copy);
        jj_str_decref(s);
        if (rc) return -1;
        copy.u.s->markup = true;
        *out = copy;
        return 0;
    }
    case F_ESCAPE: return jj_bind(r, name, a, NULL, 0, p) ? -1 : escape_value(r, v, false, out);
    case F_FORCEESCAPE: return jj_bind(r, name, a, NULL, 0, p) ? -1 : escape_value(r, v, true, out);
    case F_DICTSORT: {
        static const char *const names[] = {"case_sensitive", "by", "reverse"};
        if (jj_bind(r, name, a, names, 3, p)) return -1;
        if (v.t != JJ_DICT) return jj_fail(r, "AttributeError", "'%s' object has no attribute 'items'", jv_type_name(v));
        bool cs = !jv_is_missing(p[0]) && jv_truthy(p[0]);
        size_t pos = 0;
        if (!jv_is_missing(p[1])) {
            if (p[1].t == JJ_STR && !strcmp(p[1].u.s->s, "value")) pos = 1;
            else if (!(p[1].t == JJ_STR && !strcmp(p[1].u.s->s, "key")))
                return jj_fail(r, "FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
        }
        const struct jj_dict *d = v.u.d;
        struct jj_list *pairs = jj_list_new(JJ_LIST_LIST, d->n);
        struct jv *keys = calloc(d->n + 1, sizeof *keys);
        if (!pairs || !keys) {
            if (pairs) jv_decref(jv_list(pairs));
            free(keys);
            return jj_fail_oom(r);
        }
        int rc = 0;
        for (size_t i = 0; i < d->n && !rc; i++) {
            struct jj_list *t = jj_list_new(JJ_LIST_TUPLE, 2);
            if (!t) {
                rc = jj_fail_oom(r);
                break;
            }
            jj_list_push(t, jv_incref(d->k[i]));
            jj_list_push(t, jv_incref(d->v[i]));
            jj_list_push(pairs, jv_list(t));
            rc = sort_key(r, pos ? d->v[i] : d->k[i], jv_missing(), cs, &keys[i]);
        }
        if (!rc) rc = sorted_list(r, pairs, keys, !jv_is_missing(p[2]) && jv_truthy(p[2]), out);
        free_keys(keys, d->n);
        jv_decref(jv_list(pairs));
        return rc;
    }
    case F_SORT: {
        static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
        if (jj_bind(r, name, a, names, 3, p)) return -1;
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        struct jv *keys = calloc(items->n + 1, sizeof *keys);
        if (!keys) {
            jv_decref(jv_list(items));
            return jj_fail_oom(r);
        }
        bool cs = !jv_is_missing(p[1]) && jv_truthy(p[1]);
        int rc = 0;
        for (size_t i = 0; i < items->n && !rc; i++) rc = sort_key(r, items->v[i], p[2], cs, &keys[i]);
        if (!rc) rc = sorted_list(r, items, keys, !jv_is_missing(p[0]) && jv_truthy(p[0]), out);
        free_keys(keys, items->n);
        jv_decref(jv_list(items));
        return rc;
    }
    case F_UNIQUE: {
        static const char *const names[] = {"case_sensitive", "attribute"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        struct jj_list *items, *res;
        if (jj_iterate(r, v, &items)) return -1;
        struct jj_list *seen = jj_list_new(JJ_LIST_LIST, 0);
        if (!seen || new_iter(r, &res)) {
            if (seen) jv_decref(jv_list(seen));
            jv_decref(jv_list(items));
            return seen ? -1 : jj_fail_oom(r);
        }
        bool cs = !jv_is_missing(p[0]) && jv_truthy(p[0]);
        int rc = 0;
        for (size_t i = 0; i < items->n && !rc; i++) {
            struct jv k;
            rc = sort_key(r, items->v[i], p[1], cs, &k);
            if (rc) break;
            if (jj_charge_items(r, seen->n)) { /* the comparisons about to be made: O(n^2) in all */
                jv_decref(k);
                rc = -1;
                break;
            }
            bool dup = false;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_equal(seen->v[j], k);
            if (!dup) {
                if (!jj_list_push(seen, k) || !jj_list_push(res, jv_incref(items->v[i]))) rc = jj_fail_oom(r);
            } else {
                jv_decref(k);
            }
        }
        jv_decref(jv_list(seen));
        jv_decref(jv_list(items));
        if (rc) {
            jv_decref(jv_list(res));
            return -1;
        }
        *out = jv_list(res);
        return 0;
    }
    case F_FIRST:
    case F_LAST: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        if (FILTERS[fi].id == F_LAST && v.t == JJ_LIST && v.u.l->sub == JJ_LIST_ITER)
            return jj_fail(r, "TypeError", "'generator' object is not reversible");
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        if (items->n == 0) *out = jv_undef();
        else *out = jv_incref(items->v[FILTERS[fi].id == F_FIRST ? 0 : items->n - 1]);
        jv_decref(jv_list(items));
        return 0;
    }
    case F_REVERSE: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        if (v.t == JJ_STR) {
            struct jj_list *chars;
            if (jj_iterate(r, v, &chars)) return -1;
            struct jj_buf b = {0};
            for (size_t i = chars->n; i-- > 0;) jj_buf_put_str(&b, chars->v[i].u.s);
            jv_decref(jv_list(chars));
            struct jj_str *res = jj_buf_take(&b);
            if (!res) return jj_fail_oom(r);
            *out = jv_str(res);
            return 0;
        }
        if (v.t == JJ_LIST && v.u.l->sub == JJ_LIST_ITER) return jj_fail(r, "TypeError", "'generator' object is not reversible");
        struct jj_list *items, *res;
        if (jj_iterate(r, v, &items)) return -1;
        if (new_iter(r, &res)) {
            jv_decref(jv_list(items));
            return -1;
        }
        for (size_t i = items->n; i-- > 0;)
            if (!jj_list_push(res, jv_incref(items->v[i]))) {
                jv_decref(jv_list(items));
                jv_decref(jv_list(res));
                return jj_fail_oom(r);
            }
        jv_decref(jv_list(items));
        *out = jv_list(res);
        return 0;
    }
    case F_INT: {
        static const char *const names[] = {"default", "base"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        int64_t base = 10;
        if (!jv_is_missing(p[1])) {
            if (!is_int_like(p[1])) return jj_fail(r, "TypeError", "int: base must be an integer");
            base = int_of(p[1]);
        }
        int64_t iv;
        double f;
        bool is_f = false;
        if (is_int_like(v)) {
            *out = jv_int(int_of(v));
            return 0;
        }
        if (v.t == JJ_FLOAT) f = v.u.f, is_f = true;
        else if (v.t == JJ_STR && parse_int(v.u.s, base, &iv)) {
            *out = jv_int(iv);
            return 0;
        } else if (v.t == JJ_STR && parse_float(v.u.s, &f)) is_f = true;
        /* jinja2: int(x), then int(float(x)); ValueError (NaN) gives the default, OverflowError
         * (infinity) propagates; finite values past int64_t are where deja's ints end */
        if (is_f && !isnan(f)) {
            if (isinf(f)) return jj_fail(r, "OverflowError", "cannot convert float infinity to integer");
            if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
                return jj_fail(r, "OverflowError", "int too large: %g is outside the 64-bit range", f);
            *out = jv_int((int64_t)f);
            return 0;
        }
        *out = jv_is_missing(p[0]) ? jv_int(0) : jv_incref(p[0]);
        return 0;
    }
    case F_FLOAT: {
        static const char *const names[] = {"default"};
        if (jj_bind(r, name, a, names, 1, p)) return -1;
        double f;
        if (v.t == JJ_FLOAT) *out = jv_float(v.u.f);
        else if (is_int_like(v)) *out = jv_float((double)int_of(v));
        else if (v.t == JJ_STR && parse_float(v.u.s, &f)) *out = jv_float(f);
        else *out = jv_is_missing(p[0]) ? jv_float(0.0) : jv_incref(p[0]);
        return 0;
    }
    case F_ABS:
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        if (v.t == JJ_FLOAT) *out = jv_float(fabs(v.u.f));
        else if (is_int_like(v)) {
            if (int_of(v) == INT64_MIN) return jj_fail(r, "OverflowError", "integer result out of the 64-bit range");
            *out = jv_int(int_of(v) < 0 ? -int_of(v) : int_of(v));
        } else return jj_fail(r, "TypeError", "bad operand type for abs(): '%s'", jv_type_name(v));
        return 0;
    case F_ROUND: {
        static const char *const names[] = {"precision", "method"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        int64_t prec = 0;
        if (!jv_is_missing(p[0])) {
            if (!is_int_like(p[0])) return jj_fail(r, "TypeError", "round: precision must be an integer");
            prec = int_of(p[0]);
        }
        const char *method = "common";
        if (!jv_is_missing(p[1])) {
            if (p[1].t != JJ_STR) return jj_fail(r, "FilterArgumentError", "method must be common, ceil or floor");
            method = p[1].u.s->s;
        }
        if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
            return jj_fail(r, "FilterArgumentError", "method must be common, ceil or floor");
        if (v.t == JJ_UNDEF) return jj_fail_undefined(r, v);
        if (!is_int_like(v) && v.t != JJ_FLOAT) return jj_fail(r, "TypeError", "type %s doesn't define __round__ method", jv_type_name(v));
        if (!strcmp(method, "common")) {
            if (is_int_like(v)) { /* Python's round(int, ndigits): an int, half to even below 10**-ndigits */
                int64_t x = int_of(v);
                if (prec >= 0) {
                    *out = jv_int(x);
                    return 0;
                }
                if (prec < -19) {
                    *out = jv_int(0);
                    return 0;
                }
                uint64_t m = 1;
                for (int64_t k = 0; k < -prec; k++) m *= 10; /* <= 10**19 < 2**64 */
                uint64_t ax = x < 0 ? 0 - (uint64_t)x : (uint64_t)x, q = ax / m, rem = ax % m;
                if (rem > m - rem || (rem == m - rem && (q & 1))) q++;
                uint64_t y = q * m; /* <= |x| + m < 2**64 */
                if (y > (uint64_t)INT64_MAX + (x < 0)) return jj_fail(r, "OverflowError", "integer result out of the 64-bit range");
                *out = jv_int(x < 0 ? (int64_t)(0 - y) : (int64_t)y);
                return 0;
            }
            double x = v.u.f;
            if (!isfinite(x) || prec > 20) {
                *out = jv_float(x);
                return 0;
            }
            if (prec < -330) { /* Python: 0.0 with x's sign */
                *out = jv_float(copysign(0.0, x));
                return 0;
            }
            char tmp[400];
            if (prec >= 0) {
                snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
                *out = jv_float(strtod(tmp, NULL));
            } else {
                double m = pow(10.0, (double)-prec);
                double y = x / m, fl = floor(y);
                double diff = y - fl;
                double rd = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
                *out = jv_float(rd * m);
            }
            return 0;
        }
        if (prec < -300 || prec > 300) return jj_fail(r, "OverflowError", "round: precision out of range");
        double x = is_int_like(v) ? (double)int_of(v) : v.u.f, m = pow(10.0, (double)prec);
        *out = jv_float((!strcmp(method, "ceil") ? ceil(x * m) : floor(x * m)) / m);
        return 0;
    }
    case F_WORDCOUNT: {
        if (jj_bind(r, name, a, NULL, 0, p)) return -1;
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        int64_t words = 0;
        bool in_word = false;
        size_t i = 0;
        while (i < s->n) {
            size_t l;
            uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &l);
            bool w = jj_is_alpha(c) || jj_is_digit(c) || c == '_';
            if (w && !in_word) words++;
            in_word = w;
            i += l;
        }
        jj_str_decref(s);
        *out = jv_int(words);
        return 0;
    }
    case F_CENTER: {
        static const char *const names[] = {"width"};
        if (jj_bind(r, name, a, names, 1, p)) return -1;
        int64_t w = 80;
        if (!jv_is_missing(p[0])) {
            if (!is_int_like(p[0])) return jj_fail(r, "TypeError", "center: width must be an integer");
            w = int_of(p[0]);
        }
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        int rc = jj_str_center(r, s, w, out);
        jj_str_decref(s);
        return rc;
    }
    case F_INDENT: {
        static const char *const names[] = {"width", "first", "blank"};
        if (jj_bind(r, name, a, names, 3, p)) return -1;
        return do_indent(r, v, p, out);
    }
    case F_ATTR: {
        static const char *const names[] = {"name"};
        if (jj_bind(r, name, a, names, 1, p)) return -1;
        if (p[0].t != JJ_STR) return jj_fail(r, "TypeError", "attribute name must be string");
        if (v.t == JJ_UNDEF) return jj_fail_undefined(r, v);
        bool unsafe;
        if (v.t == JJ_DICT && jj_method_lookup(v, p[0].u.s->s, p[0].u.s->n, &unsafe) < 0 && !unsafe) {
            /* Python's getattr only: a dict's keys are items, not attributes */
            *out = jv_undef_named(NULL, v.t);
            return 0;
        }
        int rc = jj_getattr(r, v, p[0].u.s->s, p[0].u.s->n, out);
        if (!rc && out->t == JJ_UNDEF && out->sub != JJ_UNDEF_UNSAFE) *out = jv_undef_named(NULL, v.t);
        return rc;
    }
    case F_FORMAT: {
        if (a->n_pos && a->n_kw) return jj_fail(r, "FilterArgumentError", "can't handle positional and keyword arguments at the same time");
        struct jj_str *s;
        if (to_str(r, v, &s)) return -1;
        struct jv args;
        if (a->n_kw) {
            struct jj_dict *d = jj_dict_new(a->n_kw);
            if (!d) {
                jj_str_decref(s);
                return jj_fail_oom(r);
            }
            for (size_t k = 0; k < a->n_kw; k++) {
                struct jj_str *key = jj_str_new(a->kw_names[k], a->kw_lens[k], JJ_PROV_NONE);
                if (!key || !jj_dict_set(d, jv_str(key), jv_incref(a->kw[k]))) {
                    jv_decref(jv_dict(d));
                    jj_str_decref(s);
                    return jj_fail_oom(r);
                }
            }
            args = jv_dict(d);
        } else {
            struct jj_list *t = jj_list_new(JJ_LIST_TUPLE, a->n_pos);
            if (!t) {
                jj_str_decref(s);
                return jj_fail_oom(r);
            }
            for (size_t i = 0; i < a->n_pos; i++) jj_list_push(t, jv_incref(a->pos[i]));
            args = jv_list(t);
        }
        int rc = jj_percent_format(r, s, args, out);
        jv_decref(args);
        jj_str_decref(s);
        return rc;
    }
    case F_SUM: {
        static const char *const names[] = {"attribute", "start"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        struct jv acc = jv_is_missing(p[1]) ? jv_int(0) : jv_incref(p[1]);
        int rc = 0;
        for (size_t i = 0; i < items->n && !rc; i++) {
            struct jv x, sum;
            if (!jv_is_missing(p[0]) && p[0].t != JJ_NONE) rc = attr_path(r, items->v[i], p[0], &x);
            else x = jv_incref(items->v[i]);
            if (rc) break;
            rc = jj_binop(r, JB_ADD, acc, x, &sum);
            jv_decref(x);
            if (!rc) {
                jv_decref(acc);
                acc = sum;
            }
        }
        jv_decref(jv_list(items));
        if (rc) {
            jv_decref(acc);
            return -1;
        }
        *out = acc;
        return 0;
    }
    case F_MAX:
    case F_MIN: {
        static const char *const names[] = {"case_sensitive", "attribute"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        struct jj_list *items;
        if (jj_iterate(r, v, &items)) return -1;
        if (items->n == 0) {
            jv_decref(jv_list(items));
            *out = jv_undef();
            return 0;
        }
        bool cs = !jv_is_missing(p[0]) && jv_truthy(p[0]);
        bool want_max = FILTERS[fi].id == F_MAX;
        size_t best = 0;
        struct jv best_key;
        int rc = sort_key(r, items->v[0], p[1], cs, &best_key);
        for (size_t i = 1; i < items->n && !rc; i++) {
            struct jv k;
            int c;
            rc = sort_key(r, items->v[i], p[1], cs, &k);
            if (rc) break;
            if (!jv_compare(k, best_key, &c)) {
                rc = jj_fail(r, "TypeError", "'%s' not supported between instances of '%s' and '%s'", want_max ? ">" : "<",
                             jv_type_name(k), jv_type_name(best_key));
                jv_decref(k);
                break;
            }
            if (want_max ? c > 0 : c < 0) {
                jv_decref(best_key);
                best_key = k;
                best = i;
            } else {
                jv_decref(k);
            }
        }
        jv_decref(best_key);
        if (!rc) *out = jv_incref(items->v[best]);
        jv_decref(jv_list(items));
        return rc;
    }
    case F_BATCH: {
        static const char *const names[] = {"linecount", "fill_with"};
        if (jj_bind(r, name, a, names, 2, p)) return -1;
        if (!is_int_like(p[0])) return jj_fail(r, "TypeError", "batch: linecount must be an integer");
        /* jinja2's loop: a batch is emitted when it holds linecount items before the next one is
         * added, so linecount 0 gives [[], rest] and a negative one a single batch */
        int64_t lc = int_of(p[0]);
        size_t per = lc < 0 ? SIZE_MAX : (size_t)lc;
        struct jj_list *items, *res, *cur = NULL;
        if (jj_iterate(r, v, &items)) return -1;
        if (new_iter(r, &res)) {
            jv_decref(jv_list(items));
            return -1;
        }
        int rc = 0;
        for (size_t i = 0; i < items->n && !rc; i++) {
            if (!cur && !(cur = jj_list_new(JJ_LIST_LIST, 0))) rc = jj_fail_oom(r);
            if (!rc && cur->n == per) {
                if (!jj_list_push(res, jv_list(cur))) rc = jj_fail_oom(r);
                if (!rc && !(cur = jj_list_new(JJ_LIST_LIST, 0))) rc = jj_fail_oom(r);
            }
            if (!rc && !jj_list_push(cur, jv_incref(items->v[i]))) rc = jj_fail_oom(r);
        }
        if (!rc && cur) {
            bool fill = !jv_is_missing(p[1]) && p[1].t != JJ_NONE;
            if (fill && per != SIZE_MAX && per > cur->n && (per - cur->n > JJ_MAX_ITEMS || jj_charge(r, (per - cur->n) * sizeof(struct jv))))
                rc = r->failed ? -1 : jj_fail_oom(r);
            while (fill && cur->n < per && !rc)
                if (!jj_list_push(cur, jv_incref(p[1]))) rc = jj_fail_oom(r);
            if (!jj_list_push(res, jv_list(cur))) rc = jj_fail_oom(r);
            cur = NULL;
        }
        if (cur) jv_decref(jv_list(cur));
        jv_decref(jv_list(items));
        if (rc) {
            jv_decref(jv_list(res));
            return -1;
        }
        *out = jv_list(res);
        return 0;
    }
    case F_UNIMPLEMENTED: return jj_fail(r, "TemplateRuntimeError", "the filter '%s' is not implemented", name);
    }
    return jj_fail(r, "TemplateRuntimeError", "no such filter");
}

/* ---- tests ---- */

int jj_apply_test(struct jj_render *r, int ti, struct jv v, const struct jj_args *a, bool *out) {
    if (ti < 0 || (size_t)ti >= N_TESTS) return jj_fail(r, "TemplateRuntimeError", "no such test");
    int id = TESTS[ti].id;
    if (jj_charge_scan(r, v, a)) return -1;
    static const char *const one[] = {"other"};
    struct jv p[1] = {jv_missing()};
    if (id >= T_DIVISIBLEBY && id <= T_SAMEAS) {
        if (jj_bind(r, TESTS[ti].name, a, one, 1, p)) return -1;
        if (jv_is_missing(p[0])) return jj_fail(r, "TypeError", "the test '%s' needs an argument", TESTS[ti].name);
    } else if (id != T_FILTER && id != T_TEST && jj_bind(r, TESTS[ti].name, a, NULL, 0, p)) {
        return -1;
    }
    struct jv o = p[0];
    switch (id) {
    case T_DEFINED: *out = v.t != JJ_UNDEF; return 0;
    case T_UNDEFINED: *out = v.t == JJ_UNDEF; return 0;
    case T_NONE: *out = v.t == JJ_NONE; return 0;
    case T_STRING: *out = v.t == JJ_STR; return 0;
    case T_MAPPING: *out = v.t == JJ_DICT; return 0;
    case T_ITERABLE: *out = v.t == JJ_STR || v.t == JJ_LIST || v.t == JJ_DICT || v.t == JJ_UNDEF || v.t == JJ_LOOP; return 0;
    case T_SEQUENCE:
        *out = v.t == JJ_STR || v.t == JJ_DICT || v.t == JJ_UNDEF ||
               (v.t == JJ_LIST && (v.u.l->sub == JJ_LIST_LIST || v.u.l->sub == JJ_LIST_TUPLE));
        return 0;
    case T_NUMBER: *out = v.t == JJ_INT || v.t == JJ_FLOAT || v.t == JJ_BOOL; return 0;
    case T_INTEGER: *out = v.t == JJ_INT; return 0;
    case T_FLOAT: *out = v.t == JJ_FLOAT; return 0;
    case T_BOOLEAN: *out = v.t == JJ_BOOL; return 0;
    case T_TRUE: *out = v.t == JJ_BOOL && v.u.b; return 0;
    case T_FALSE: *out = v.t == JJ_BOOL && !v.u.b; return 0;
    case T_CALLABLE:
        *out = v.t == JJ_MACRO || v.t == JJ_FUNC || v.t == JJ_METHOD || (v.t == JJ_UNDEF && v.sub == JJ_UNDEF_UNSAFE);
        return 0;
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        struct jv m;
        struct jv two = jv_int(2);
        if (jj_binop(r, JB_MOD, v, id == T_DIVISIBLEBY ? o : two, &m)) return -1;
        *out = jv_equal(m, jv_int(id == T_ODD ? 1 : 0));
        jv_decref(m);
        return 0;
    }
    case T_EQ: *out = jv_equal(v, o); return 0;
    case T_NE: *out = !jv_equal(v, o); return 0;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        int c;
        if (v.t == JJ_UNDEF) return jj_fail_undefined(r, v);
        if (o.t == JJ_UNDEF) return jj_fail_undefined(r, o);
        if (!jv_compare(v, o, &c))
            return jj_fail(r, "TypeError", "comparison not supported between instances of '%s' and '%s'", jv_type_name(v),
                           jv_type_name(o));
        *out = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
        return 0;
    }
    case T_IN: return jj_contains(r, o, v, out);
    case T_SAMEAS:
        if (v.t != o.t) *out = false;
        else if (v.t == JJ_NONE || v.t == JJ_UNDEF) *out = true;
        else if (v.t == JJ_BOOL) *out = v.u.b == o.u.b;
        else if (v.t == JJ_INT) *out = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
        else if (v.t == JJ_STR) *out = v.u.s == o.u.s;
        else if (v.t == JJ_LIST) *out = v.u.l == o.u.l;
        else if (v.t == JJ_DICT) *out = v.u.d == o.u.d;
        else *out = jv_equal(v, o);
        return 0;
    case T_LOWER:
    case T_UPPER: {
        struct jj_str *s;
        if (jj_to_str(r, v, &s)) return -1;
        bool any = false, ok = true;
        size_t i = 0;
        while (i < s->n) {
            size_t l;
            uint32_t c = jj_utf8_decode(s->s + i, s->n - i, &l);
            if (jj_to_upper(c) != c || jj_to_lower(c) != c) {
                any = true;
                if ((jj_to_lower(c) != c) != (id == T_UPPER)) ok = false;
            }
            i += l;
        }
        jj_str_decref(s);
        *out = any && ok;
        return 0;
    }
    case T_ESCAPED: *out = v.t == JJ_STR && v.u.s->markup; return 0;
    case T_FILTER:
    case T_TEST:
        *out = v.t == JJ_STR && (id == T_FILTER ? jj_filter_id(v.u.s->s) >= 0 : jj_test_id(v.u.s->s) >= 0);
        return 0;
    }
    return jj_fail(r, "TemplateRuntimeError", "no such test");
}
