/*
 * jinja_value.c — template values: reference counting, lists, dicts
 * (insertion-ordered, with a hash index once they grow), Python's equality,
 * ordering and truthiness, type names, and the conversion of the render
 * context from JSON (every string, keys included, marked as input).
 *
 * Lists and dicts are built by one owner and then only read (the sandbox has
 * no mutating method), so they are shared by reference count.  A container
 * records its nesting depth; building one deeper than JJ_MAX_VALUE_DEPTH
 * fails, which keeps every recursive walk (repr, ==, free) bounded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

struct jv jv_incref(struct jv v) {
    switch (v.t) {
    case JJ_STR:
        if (v.u.s->rc != JJ_IMMORTAL) v.u.s->rc++;
        break;
    case JJ_LIST: v.u.l->rc++; break;
    case JJ_DICT: v.u.d->rc++; break;
    case JJ_METHOD: v.u.m->rc++; break;
    case JJ_LOOP: v.u.loop->rc++; break;
    default: break;
    }
    return v;
}

static void list_free(struct jj_list *l) {
    for (size_t i = 0; i < l->n; i++) jv_decref(l->v[i]);
    free(l->v);
    free(l);
}

static void dict_free(struct jj_dict *d) {
    for (size_t i = 0; i < d->n; i++) {
        jv_decref(d->k[i]);
        jv_decref(d->v[i]);
    }
    free(d->k);
    free(d->v);
    free(d->index);
    free(d);
}

void jv_decref(struct jv v) {
    switch (v.t) {
    case JJ_STR: jj_str_decref(v.u.s); break;
    case JJ_LIST:
        if (--v.u.l->rc == 0) list_free(v.u.l);
        break;
    case JJ_DICT:
        if (--v.u.d->rc == 0) dict_free(v.u.d);
        break;
    case JJ_METHOD:
        if (--v.u.m->rc == 0) {
            jv_decref(v.u.m->self);
            free(v.u.m);
        }
        break;
    case JJ_LOOP:
        if (--v.u.loop->rc == 0) {
            if (v.u.loop->items) jv_decref(jv_list(v.u.loop->items));
            free(v.u.loop);
        }
        break;
    default: break;
    }
}

size_t jv_depth(struct jv v) {
    if (v.t == JJ_LIST) return v.u.l->depth;
    if (v.t == JJ_DICT) return v.u.d->depth;
    if (v.t == JJ_METHOD) return jv_depth(v.u.m->self);
    return 0;
}

struct jj_list *jj_list_new(uint8_t sub, size_t cap) {
    struct jj_list *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->rc = 1;
    l->sub = sub;
    l->depth = 1;
    if (cap > JJ_MAX_ITEMS) cap = JJ_MAX_ITEMS;
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

bool jj_list_push(struct jj_list *l, struct jv v) {
    size_t d = jv_depth(v) + 1;
    if (d > JJ_MAX_VALUE_DEPTH || l->n >= JJ_MAX_ITEMS) {
        jv_decref(v);
        return false;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *p = realloc(l->v, cap * sizeof *p);
        if (!p) {
            jv_decref(v);
            return false;
        }
        l->v = p, l->cap = cap;
    }
    l->v[l->n++] = v;
    if (d > l->depth) l->depth = (uint16_t)d;
    return true;
}

/* ---- dicts ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Python's rule that equal keys hash equally: 1, 1.0 and True are one key. */
static uint64_t key_hash(struct jv k) {
    switch (k.t) {
    case JJ_STR: {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < k.u.s->n; i++) h = (h ^ (unsigned char)k.u.s->s[i]) * 1099511628211ULL;
        return h;
    }
    case JJ_BOOL: return mix64((uint64_t)k.u.b);
    case JJ_INT: return mix64((uint64_t)k.u.i);
    case JJ_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18) return mix64((uint64_t)(int64_t)k.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &k.u.f, sizeof bits);
            return mix64(bits);
        }
    case JJ_NONE: return 0x9e3779b97f4a7c15ULL;
    case JJ_LIST: {
        uint64_t h = 0x12345;
        for (size_t i = 0; i < k.u.l->n; i++) h = mix64(h ^ key_hash(k.u.l->v[i]));
        return h;
    }
    default: return mix64((uint64_t)(uintptr_t)k.u.name ^ k.t);
    }
}

bool jv_hashable(struct jv v) {
    if (v.t == JJ_DICT) return false;
    if (v.t == JJ_LIST) {
        if (v.u.l->sub != JJ_LIST_TUPLE) return false;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!jv_hashable(v.u.l->v[i])) return false;
    }
    return true;
}

struct jj_dict *jj_dict_new(size_t cap) {
    struct jj_dict *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->rc = 1;
    d->depth = 1;
    if (cap > JJ_MAX_ITEMS) cap = JJ_MAX_ITEMS;
    if (cap) {
        d->k = malloc(cap * sizeof *d->k);
        d->v = malloc(cap * sizeof *d->v);
        if (!d->k || !d->v) {
            free(d->k);
            free(d->v);
            free(d);
            return NULL;
        }
        d->cap = cap;
    }
    return d;
}

static bool dict_reindex(struct jj_dict *d, size_t cap) {
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    for (size_t i = 0; i < d->n; i++) {
        size_t s = key_hash(d->k[i]) & (cap - 1);
        while (idx[s]) s = (s + 1) & (cap - 1);
        idx[s] = (uint32_t)(i + 1);
    }
    free(d->index);
    d->index = idx;
    d->index_cap = cap;
    return true;
}

static size_t dict_find(const struct jj_dict *d, struct jv k) {
    if (d->index) {
        size_t s = key_hash(k) & (d->index_cap - 1);
        while (d->index[s]) {
            size_t i = d->index[s] - 1;
            if (jv_equal(d->k[i], k)) return i;
            s = (s + 1) & (d->index_cap - 1);
        }
        return SIZE_MAX;
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return i;
    return SIZE_MAX;
}

struct jv *jj_dict_get(const struct jj_dict *d, struct jv k) {
    size_t i = dict_find(d, k);
    return i == SIZE_MAX ? NULL : &d->v[i];
}

struct jv *jj_dict_get_cstr(const struct jj_dict *d, const char *k) {
    size_t n = strlen(k);
    if (d->index) {
        struct jj_str *s = jj_str_new(k, n, JJ_PROV_NONE);
        if (!s) return NULL;
        struct jv *r = jj_dict_get(d, jv_str(s));
        jj_str_decref(s);
        return r;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JJ_STR && d->k[i].u.s->n == n && !memcmp(d->k[i].u.s->s, k, n)) return &d->v[i];
    return NULL;
}

bool jj_dict_set(struct jj_dict *d, struct jv k, struct jv v) {
    size_t i = dict_find(d, k);
    size_t depth = (jv_depth(v) > jv_depth(k) ? jv_depth(v) : jv_depth(k)) + 1;
    if (depth > JJ_MAX_VALUE_DEPTH) goto fail;
    if (i != SIZE_MAX) {
        jv_decref(k);
        jv_decref(d->v[i]);
        d->v[i] = v;
        if (depth > d->depth) d->depth = (uint16_t)depth;
        return true;
    }
    if (d->n >= JJ_MAX_ITEMS) goto fail;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *nk = realloc(d->k, cap * sizeof *nk);
        if (!nk) goto fail;
        d->k = nk;
        struct jv *nv = realloc(d->v, cap * sizeof *nv);
        if (!nv) goto fail;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (depth > d->depth) d->depth = (uint16_t)depth;
    if (d->n > 8 && d->n * 2 > d->index_cap) {
        size_t cap = 32;
        while (cap < d->n * 4) cap *= 2;
        if (!dict_reindex(d, cap)) {
            d->n--;
            goto fail;
        }
    } else if (d->index) {
        size_t s = key_hash(k) & (d->index_cap - 1);
        while (d->index[s]) s = (s + 1) & (d->index_cap - 1);
        d->index[s] = (uint32_t)d->n;
    }
    return true;
fail:
    jv_decref(k);
    jv_decref(v);
    return false;
}

/* ---- Python semantics ---- */

bool jv_truthy(struct jv v) {
    switch (v.t) {
    case JJ_UNDEF:
    case JJ_NONE: return false;
    case JJ_BOOL: return v.u.b;
    case JJ_INT: return v.u.i != 0;
    case JJ_FLOAT: return v.u.f != 0;
    case JJ_STR: return v.u.s->n != 0;
    case JJ_LIST: return v.u.l->sub == JJ_LIST_ITER || v.u.l->n != 0;
    case JJ_DICT: return v.u.d->n != 0;
    case JJ_LOOP: return v.u.loop->length != 0;
    default: return true;
    }
}

static bool is_num(struct jv v) { return v.t == JJ_BOOL || v.t == JJ_INT || v.t == JJ_FLOAT; }
static double num_f(struct jv v) {
    return v.t == JJ_FLOAT ? v.u.f : v.t == JJ_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct jv v) { return v.t == JJ_INT ? v.u.i : (int64_t)v.u.b; }

bool jv_equal(struct jv a, struct jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == JJ_FLOAT || b.t == JJ_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JJ_UNDEF:
    case JJ_NONE: return true;
    case JJ_STR: return a.u.s == b.u.s || (a.u.s->n == b.u.s->n && !memcmp(a.u.s->s, b.u.s->s, a.u.s->n));
    case JJ_LIST:
        if (a.u.l == b.u.l) return true;
        if (a.u.l->sub != b.u.l->sub || a.u.l->n != b.u.l->n) return false;
        if (a.u.l->sub != JJ_LIST_LIST && a.u.l->sub != JJ_LIST_TUPLE && a.u.l->sub != JJ_LIST_VALUES &&
            a.u.l->sub != JJ_LIST_ITEMS && a.u.l->sub != JJ_LIST_KEYS)
            return false;
        if (a.u.l->sub == JJ_LIST_VALUES) return false; /* dict_values compare by identity */
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JJ_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jj_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JJ_NS: return a.u.ns == b.u.ns;
    case JJ_MACRO: return a.u.macro == b.u.macro;
    case JJ_FUNC: return a.sub == b.sub;
    case JJ_METHOD: return a.u.m == b.u.m;
    case JJ_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

bool jv_compare(struct jv a, struct jv b, int *out) {
    if (is_num(a) && is_num(b)) {
        if (a.t == JJ_FLOAT || b.t == JJ_FLOAT) {
            double x = num_f(a), y = num_f(b);
            *out = x < y ? -1 : x > y ? 1 : 0; /* NaN compares as neither */
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *out = x < y ? -1 : x > y ? 1 : 0;
        }
        return true;
    }
    if (a.t == JJ_STR && b.t == JJ_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c == 0) c = a.u.s->n < b.u.s->n ? -1 : a.u.s->n > b.u.s->n ? 1 : 0;
        *out = c < 0 ? -1 : c > 0 ? 1 : 0;
        return true;
    }
    if (a.t == JJ_LIST && b.t == JJ_LIST && a.u.l->sub == b.u.l->sub &&
        (a.u.l->sub == JJ_LIST_LIST || a.u.l->sub == JJ_LIST_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
        return true;
    }
    return false;
}

const char *jj_type_name(uint8_t t) {
    switch (t) {
    case JJ_UNDEF: return "Undefined";
    case JJ_NONE: return "NoneType";
    case JJ_BOOL: return "bool";
    case JJ_INT: return "int";
    case JJ_FLOAT: return "float";
    case JJ_STR: return "str";
    case JJ_LIST: return "list";
    case JJ_DICT: return "dict";
    case JJ_NS: return "Namespace";
    case JJ_MACRO: return "Macro";
    case JJ_FUNC: return "function";
    case JJ_METHOD: return "builtin_function_or_method";
    case JJ_LOOP: return "LoopContext";
    }
    return "object";
}

const char *jv_type_name(struct jv v) {
    if (v.t == JJ_STR && v.u.s->markup) return "Markup";
    if (v.t == JJ_LIST) {
        switch (v.u.l->sub) {
        case JJ_LIST_TUPLE: return "tuple";
        case JJ_LIST_ITER: return "generator";
        case JJ_LIST_ITEMS: return "dict_items";
        case JJ_LIST_KEYS: return "dict_keys";
        case JJ_LIST_VALUES: return "dict_values";
        default: return "list";
        }
    }
    return jj_type_name(v.t);
}

enum dj_status jv_from_json(const json_t *j, struct jv *out, size_t depth) {
    if (depth > JJ_MAX_VALUE_DEPTH - 2) return dj_fail(DJ_ERR_INVALID, "template context: nested deeper than %d", JJ_MAX_VALUE_DEPTH - 2);
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return DJ_OK;
    case JSON_TRUE: *out = jv_bool(true); return DJ_OK;
    case JSON_FALSE: *out = jv_bool(false); return DJ_OK;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return DJ_OK;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return DJ_OK;
    case JSON_STRING: {
        struct jj_str *s = jj_str_new(json_string_value(j), json_string_length(j), JJ_PROV_ALL);
        if (!s) return dj_fail(DJ_ERR_NOMEM, "template context: out of memory");
        *out = jv_str(s);
        return DJ_OK;
    }
    case JSON_ARRAY: {
        struct jj_list *l = jj_list_new(JJ_LIST_LIST, json_array_size(j));
        if (!l) return dj_fail(DJ_ERR_NOMEM, "template context: out of memory");
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) {
            struct jv v;
            enum dj_status st = jv_from_json(e, &v, depth + 1);
            if (st == DJ_OK && !jj_list_push(l, v)) st = dj_fail(DJ_ERR_NOMEM, "template context: too large");
            if (st != DJ_OK) {
                jv_decref(jv_list(l));
                return st;
            }
        }
        *out = jv_list(l);
        return DJ_OK;
    }
    case JSON_OBJECT: {
        struct jj_dict *d = jj_dict_new(json_object_size(j));
        if (!d) return dj_fail(DJ_ERR_NOMEM, "template context: out of memory");
        const char *key;
        json_t *e;
        /* jansson keeps insertion order; keys may hold NUL bytes (json_object_foreach gives C strings) */
        void *it = json_object_iter((json_t *)j);
        for (; it; it = json_object_iter_next((json_t *)j, it)) {
            key = json_object_iter_key(it);
            e = json_object_iter_value(it);
            struct jv v;
            enum dj_status st = jv_from_json(e, &v, depth + 1);
            if (st != DJ_OK) {
                jv_decref(jv_dict(d));
                return st;
            }
            struct jj_str *k = jj_str_new(key, json_object_iter_key_len(it), JJ_PROV_ALL);
            if (!k || !jj_dict_set(d, jv_str(k), v)) {
                if (!k) jv_decref(v);
                jv_decref(jv_dict(d));
                return dj_fail(DJ_ERR_NOMEM, "template context: out of memory");
            }
        }
        *out = jv_dict(d);
        return DJ_OK;
    }
    }
    return dj_fail(DJ_ERR_INVALID, "template context: unknown JSON type");
}
