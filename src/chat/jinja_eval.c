/*
 * jinja_eval.c — the tree walker: statements, expressions, scopes, lookups
 * and operators with jinja2's and Python's semantics, and the public entry
 * points jinja_compile / jinja_render.
 *
 * Scopes are frames chained to their parent: a for loop, a macro call, a
 * set-block / filter-block / generation body and a with block each get one
 * (so {% set %} inside a loop does not leak out, as in jinja2); an if does
 * not.  A macro's frame hangs off the template's root frame, so a macro sees
 * the template's variables at call time and the context.  Names not found in
 * the frames come from the context, then the globals, else they are
 * undefined.
 *
 * Every evaluation returns 0 with a new reference in *out, or -1 with the
 * error recorded in the render state (first error wins); nothing aborts.
 * Recursion is bounded (JJ_MAX_EVAL_DEPTH, JJ_MAX_MACRO_DEPTH), and so is
 * work (JJ_MAX_STEPS, with bytes built charged too).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_internal.h"

static _Thread_local bool last_raised;

bool jinja_last_error_raised(void) { return last_raised; }

/* ---- frames ---- */

struct jj_var {
    const char *name;
    struct jv v;
};

struct jj_frame {
    struct jj_frame *parent;
    struct jj_var *vars;
    size_t n, cap;
};

static void frame_free(struct jj_frame *f) {
    for (size_t i = 0; i < f->n; i++) jv_decref(f->vars[i].v);
    free(f->vars);
    f->vars = NULL;
    f->n = f->cap = 0;
}

static struct jv *frame_find(const struct jj_frame *f, const char *name) {
    for (size_t i = f->n; i-- > 0;)
        if (!strcmp(f->vars[i].name, name)) return &f->vars[i].v;
    return NULL;
}

/* Takes v. */
static int frame_set(struct jj_render *r, struct jj_frame *f, const char *name, struct jv v) {
    struct jv *old = frame_find(f, name);
    if (old) {
        jv_decref(*old);
        *old = v;
        return 0;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct jj_var *p = realloc(f->vars, cap * sizeof *p);
        if (!p) {
            jv_decref(v);
            return jj_fail_oom(r);
        }
        f->vars = p, f->cap = cap;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

/* ---- errors ---- */

int jj_fail(struct jj_render *r, const char *type, const char *fmt, ...) {
    if (r->failed) return -1;
    r->failed = true;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "template: line %u: %s: %s", r->line, type, msg);
    return -1;
}

int jj_fail_oom(struct jj_render *r) {
    return jj_fail(r, "MemoryError", "out of memory, or a value over the limits (64 MiB strings, %zu items)", JJ_MAX_ITEMS);
}

int jj_charge(struct jj_render *r, size_t bytes) {
    r->steps += bytes / 64;
    if (r->steps > r->max_steps) return jj_fail(r, "TemplateRuntimeError", "the template did too much work (step limit)");
    return 0;
}

int jj_charge_items(struct jj_render *r, size_t n) {
    r->steps += n;
    if (r->steps > r->max_steps) return jj_fail(r, "TemplateRuntimeError", "the template did too much work (step limit)");
    return 0;
}

int jj_charge_out(struct jj_render *r, size_t bytes, struct jv *out) {
    if (!jj_charge(r, bytes)) return 0;
    jv_decref(*out);
    *out = jv_none();
    return -1;
}

int jj_charge_items_out(struct jj_render *r, size_t n, struct jv *out) {
    if (!jj_charge_items(r, n)) return 0;
    jv_decref(*out);
    *out = jv_none();
    return -1;
}

int jj_charge_scan(struct jj_render *r, struct jv v, const struct jj_args *a) {
    size_t n = v.t == JJ_STR ? v.u.s->n : 0;
    for (size_t i = 0; a && i < a->n_pos; i++)
        if (a->pos[i].t == JJ_STR) n += a->pos[i].u.s->n;
    for (size_t i = 0; a && i < a->n_kw; i++)
        if (a->kw[i].t == JJ_STR) n += a->kw[i].u.s->n;
    return jj_charge_items(r, n / 16);
}

int jj_fail_undefined(struct jj_render *r, struct jv u) {
    if (u.sub == JJ_UNDEF_UNSAFE)
        return jj_fail(r, "SecurityError", "access to attribute '%s' of '%s' object is unsafe.", u.u.name ? u.u.name : "?",
                       jj_type_name(u.owner));
    if (u.owner == JJ_UNDEF && u.u.name) return jj_fail(r, "UndefinedError", "'%s' is undefined", u.u.name);
    if (u.u.name) {
        if (u.owner == JJ_NONE) return jj_fail(r, "UndefinedError", "'None' has no attribute '%s'", u.u.name);
        return jj_fail(r, "UndefinedError", "'%s object' has no attribute '%s'", jj_type_name(u.owner), u.u.name);
    }
    if (u.owner != JJ_UNDEF) return jj_fail(r, "UndefinedError", "'%s object' has no such element", jj_type_name(u.owner));
    return jj_fail(r, "UndefinedError", "the value is undefined");
}

struct jj_ns *jj_ns_new(struct jj_render *r) {
    if (r->n_ns >= JJ_MAX_NAMESPACES) {
        jj_fail(r, "TemplateRuntimeError", "too many namespaces");
        return NULL;
    }
    if (r->n_ns == r->cap_ns) {
        size_t cap = r->cap_ns ? r->cap_ns * 2 : 8;
        struct jj_ns **p = realloc(r->ns, cap * sizeof *p);
        if (!p) {
            jj_fail_oom(r);
            return NULL;
        }
        r->ns = p, r->cap_ns = cap;
    }
    struct jj_ns *ns = calloc(1, sizeof *ns);
    if (ns) ns->attrs = jj_dict_new(4);
    if (!ns || !ns->attrs) {
        free(ns);
        jj_fail_oom(r);
        return NULL;
    }
    r->ns[r->n_ns++] = ns;
    return ns;
}

/* ---- lookups ---- */

static struct jv make_method(struct jj_render *r, int id, struct jv self, bool *ok) {
    struct jj_method *m = malloc(sizeof *m);
    *ok = m != NULL;
    if (!m) {
        jj_fail_oom(r);
        return jv_none();
    }
    m->rc = 1;
    m->id = (uint16_t)id;
    m->self = jv_incref(self);
    struct jv v = {JJ_METHOD, 0, 0, {0}};
    v.u.m = m;
    return v;
}

static int loop_attr(struct jj_render *r, struct jj_loop *l, const char *name, struct jv self, struct jv *out) {
    size_t i = l->index0, n = l->length;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "depth")) *out = jv_int(1);
    else if (!strcmp(name, "depth0")) *out = jv_int(0);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_incref(l->items->v[i - 1]) : jv_undef_named("previtem", JJ_LOOP);
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jv_incref(l->items->v[i + 1]) : jv_undef_named("nextitem", JJ_LOOP);
    else {
        bool unsafe;
        int id = jj_method_lookup(self, name, strlen(name), &unsafe);
        if (id < 0) {
            *out = jv_undef_named(NULL, JJ_LOOP);
            return 0;
        }
        bool ok;
        *out = make_method(r, id, self, &ok);
        return ok ? 0 : -1;
    }
    return 0;
}

/* The Python attribute obj.name (a method), or -1 when there is none. */
static int py_attr(struct jj_render *r, struct jv obj, const char *name, size_t n, struct jv *out, bool *found) {
    bool unsafe = false;
    int id = jj_method_lookup(obj, name, n, &unsafe);
    *found = id >= 0;
    if (id < 0) return 0;
    if (unsafe) {
        *out = jv_undef_named(jj_method_name(id), obj.t);
        out->sub = JJ_UNDEF_UNSAFE;
        return 0;
    }
    bool ok;
    *out = make_method(r, id, obj, &ok);
    return ok ? 0 : -1;
}

/* name is NUL-terminated at [n] for template names; a key's string otherwise. */
int jj_getattr(struct jj_render *r, struct jv obj, const char *name, size_t n, struct jv *out) {
    bool found;
    switch (obj.t) {
    case JJ_UNDEF: return jj_fail_undefined(r, obj);
    case JJ_NS: {
        struct jv *v = jj_dict_get_cstr(obj.u.ns->attrs, name);
        *out = v ? jv_incref(*v) : jv_undef_named(name, JJ_NS);
        return 0;
    }
    case JJ_LOOP: return loop_attr(r, obj.u.loop, name, obj, out);
    case JJ_DICT: {
        if (py_attr(r, obj, name, n, out, &found)) return -1;
        if (found) return 0;
        struct jv *v = jj_dict_get_cstr(obj.u.d, name);
        *out = v ? jv_incref(*v) : jv_undef_named(name, JJ_DICT);
        return 0;
    }
    case JJ_STR:
    case JJ_LIST:
    case JJ_INT:
    case JJ_FLOAT:
        if (py_attr(r, obj, name, n, out, &found)) return -1;
        if (!found) *out = jv_undef_named(name, obj.t);
        return 0;
    default: *out = jv_undef_named(name, obj.t); return 0;
    }
}

static bool as_index(struct jv k, int64_t *i) {
    if (k.t == JJ_INT) *i = k.u.i;
    else if (k.t == JJ_BOOL) *i = k.u.b;
    else return false;
    return true;
}

static int str_char(struct jj_render *r, const struct jj_str *s, int64_t i, struct jv *out) {
    int64_t n = (int64_t)s->ncp;
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
        *out = jv_undef_named(NULL, JJ_STR);
        return 0;
    }
    size_t off = jj_utf8_offset(s, (size_t)i), end = jj_utf8_offset(s, (size_t)i + 1);
    struct jj_buf b = {0};
    jj_buf_put_range(&b, s, off, end - off);
    struct jj_str *c = jj_buf_take(&b);
    if (!c) return jj_fail_oom(r);
    *out = jv_str(c);
    return 0;
}

int jj_getitem(struct jj_render *r, struct jv obj, struct jv key, struct jv *out) {
    int64_t i;
    bool found;
    switch (obj.t) {
    case JJ_UNDEF: return jj_fail_undefined(r, obj);
    case JJ_DICT:
        if (jv_hashable(key)) {
            struct jv *v = jj_dict_get(obj.u.d, key);
            if (v) {
                *out = jv_incref(*v);
                return 0;
            }
        }
        break;
    case JJ_LIST:
        if ((obj.u.l->sub == JJ_LIST_LIST || obj.u.l->sub == JJ_LIST_TUPLE) && as_index(key, &i)) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                *out = jv_incref(obj.u.l->v[i]);
                return 0;
            }
        }
        break;
    case JJ_STR:
        if (as_index(key, &i)) return str_char(r, obj.u.s, i, out);
        break;
    case JJ_NS:
    case JJ_LOOP:
        if (key.t == JJ_STR) return jj_getattr(r, obj, key.u.s->s, key.u.s->n, out);
        break;
    default: break;
    }
    if (key.t == JJ_STR && (obj.t == JJ_DICT || obj.t == JJ_LIST || obj.t == JJ_STR)) {
        if (py_attr(r, obj, key.u.s->s, key.u.s->n, out, &found)) return -1;
        if (found) return 0;
    }
    *out = jv_undef_named(NULL, obj.t);
    return 0;
}

/* Python's slice.indices for a sequence of length n. */
static int slice_indices(struct jj_render *r, struct jv a, struct jv b, struct jv c, int64_t n, int64_t *start,
                         int64_t *stop, int64_t *step, bool *bad) {
    int64_t st = 1;
    *bad = false;
    if (c.t != JJ_NONE) {
        if (!as_index(c, &st)) return *bad = true, 0;
        if (st == 0) return jj_fail(r, "ValueError", "slice step cannot be zero");
    }
    int64_t lo, hi;
    if (st < 0) lo = -1, hi = n - 1;
    else lo = 0, hi = n;
    int64_t s, e;
    if (a.t == JJ_NONE) s = st < 0 ? hi : lo;
    else {
        if (!as_index(a, &s)) return *bad = true, 0;
        if (s < 0) {
            s += n;
            if (s < lo) s = lo;
        } else if (s > hi) s = hi;
    }
    if (b.t == JJ_NONE) e = st < 0 ? lo : hi;
    else {
        if (!as_index(b, &e)) return *bad = true, 0;
        if (e < 0) {
            e += n;
            if (e < lo) e = lo;
        } else if (e > hi) e = hi;
    }
    *start = s, *stop = e, *step = st;
    return 0;
}

static int do_slice(struct jj_render *r, struct jv obj, struct jv a, struct jv b, struct jv c, struct jv *out) {
    if (obj.t == JJ_UNDEF) return jj_fail_undefined(r, obj);
    bool is_str = obj.t == JJ_STR;
    bool is_seq = obj.t == JJ_LIST && (obj.u.l->sub == JJ_LIST_LIST || obj.u.l->sub == JJ_LIST_TUPLE);
    if (obj.t == JJ_DICT) return jj_fail(r, "TypeError", "unhashable type: 'slice'");
    if (!is_str && !is_seq) {
        *out = jv_undef_named(NULL, obj.t);
        return 0;
    }
    int64_t n = is_str ? (int64_t)obj.u.s->ncp : (int64_t)obj.u.l->n;
    int64_t s = 0, e = 0, st = 1;
    bool bad;
    if (slice_indices(r, a, b, c, n, &s, &e, &st, &bad)) return -1;
    if (bad) return jj_fail(r, "TypeError", "slice indices must be integers or None or have an __index__ method");
    /* how many elements: counted without forming s + k*st past the end (a step near 2**63 would overflow) */
    uint64_t count = 0;
    if (st > 0 && e > s) count = ((uint64_t)e - (uint64_t)s - 1) / (uint64_t)st + 1;
    if (st < 0 && s > e) count = ((uint64_t)s - (uint64_t)e - 1) / (0 - (uint64_t)st) + 1;
    if (jj_charge(r, (size_t)count * sizeof(struct jv))) return -1;
    if (is_seq) {
        struct jj_list *l = jj_list_new(obj.u.l->sub, (size_t)count);
        if (!l) return jj_fail_oom(r);
        for (uint64_t k = 0; k < count; k++)
            if (!jj_list_push(l, jv_incref(obj.u.l->v[s + (int64_t)k * st]))) {
                jv_decref(jv_list(l));
                return jj_fail_oom(r);
            }
        *out = jv_list(l);
        return 0;
    }
    const struct jj_str *str = obj.u.s;
    struct jj_buf buf = {0};
    if (st == 1) {
        if (e > s) {
            size_t off = jj_utf8_offset(str, (size_t)s), end = jj_utf8_offset(str, (size_t)e);
            jj_buf_put_range(&buf, str, off, end - off);
        }
    } else {
        /* code point offsets, then pick */
        size_t *offs = malloc(((size_t)n + 1) * sizeof *offs);
        if (!offs) return jj_fail_oom(r);
        size_t p = 0;
        for (int64_t i = 0; i < n; i++) {
            offs[i] = p;
            size_t l;
            jj_utf8_decode(str->s + p, str->n - p, &l);
            p += l;
        }
        offs[n] = str->n;
        for (uint64_t k = 0; k < count; k++) {
            int64_t i = s + (int64_t)k * st;
            jj_buf_put_range(&buf, str, offs[i], offs[i + 1] - offs[i]);
        }
        free(offs);
    }
    struct jj_str *res = jj_buf_take(&buf);
    if (!res) return jj_fail_oom(r);
    res->markup = str->markup;
    *out = jv_str(res);
    return 0;
}

int jj_iterate(struct jj_render *r, struct jv v, struct jj_list **out) {
    /* every caller visits the elements: that is what the steps pay for */
    size_t n = v.t == JJ_LIST ? v.u.l->n : v.t == JJ_DICT ? v.u.d->n : v.t == JJ_STR ? v.u.s->ncp : 0;
    if (jj_charge_items(r, n)) return -1;
    switch (v.t) {
    case JJ_LIST:
        v.u.l->rc++;
        *out = v.u.l;
        return 0;
    case JJ_UNDEF:
        *out = jj_list_new(JJ_LIST_LIST, 0);
        return *out ? 0 : jj_fail_oom(r);
    case JJ_DICT: {
        struct jj_list *l = jj_list_new(JJ_LIST_LIST, v.u.d->n);
        if (!l) return jj_fail_oom(r);
        for (size_t i = 0; i < v.u.d->n; i++) jj_list_push(l, jv_incref(v.u.d->k[i]));
        *out = l;
        return 0;
    }
    case JJ_STR: {
        const struct jj_str *s = v.u.s;
        struct jj_list *l = jj_list_new(JJ_LIST_LIST, s->ncp);
        if (!l) return jj_fail_oom(r);
        size_t p = 0;
        while (p < s->n) {
            size_t len;
            jj_utf8_decode(s->s + p, s->n - p, &len);
            struct jj_buf b = {0};
            jj_buf_put_range(&b, s, p, len);
            struct jj_str *c = jj_buf_take(&b);
            if (!c || !jj_list_push(l, jv_str(c))) {
                jv_decref(jv_list(l));
                return jj_fail_oom(r);
            }
            p += len;
        }
        *out = l;
        return 0;
    }
    default: return jj_fail(r, "TypeError", "'%s' object is not iterable", jv_type_name(v));
    }
}

int jj_len(struct jj_render *r, struct jv v, int64_t *out) {
    switch (v.t) {
    case JJ_UNDEF: *out = 0; return 0;
    case JJ_STR: *out = (int64_t)v.u.s->ncp; return 0;
    case JJ_DICT: *out = (int64_t)v.u.d->n; return 0;
    case JJ_LIST:
        if (v.u.l->sub != JJ_LIST_ITER) {
            *out = (int64_t)v.u.l->n;
            return 0;
        }
        break;
    case JJ_LOOP: *out = (int64_t)v.u.loop->length; return 0;
    default: break;
    }
    return jj_fail(r, "TypeError", "object of type '%s' has no len()", jv_type_name(v));
}

int jj_to_str(struct jj_render *r, struct jv v, struct jj_str **out) {
    if (v.t == JJ_STR) {
        *out = v.u.s;
        if (v.u.s->rc != JJ_IMMORTAL) v.u.s->rc++;
        return 0;
    }
    struct jj_buf b = {0};
    jj_str_of(v, &b);
    size_t n = b.n;
    *out = jj_buf_take(&b);
    if (!*out) return jj_fail_oom(r);
    /* str() of a container walked its values: about one per 8 bytes written */
    if (jj_charge_items(r, v.t == JJ_LIST || v.t == JJ_DICT || v.t == JJ_NS ? n / 8 : n / 64)) {
        jj_str_decref(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int jj_contains(struct jj_render *r, struct jv c, struct jv item, bool *out) {
    switch (c.t) {
    case JJ_UNDEF: *out = false; return 0;
    case JJ_STR:
        if (item.t != JJ_STR)
            return jj_fail(r, "TypeError", "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (jj_charge_items(r, c.u.s->n / 16)) return -1;
        *out = item.u.s->n == 0 || memmem(c.u.s->s, c.u.s->n, item.u.s->s, item.u.s->n) != NULL;
        return 0;
    case JJ_LIST:
        *out = false;
        if (jj_charge_items(r, c.u.l->n)) return -1;
        for (size_t i = 0; i < c.u.l->n && !*out; i++) *out = jv_equal(c.u.l->v[i], item);
        return 0;
    case JJ_DICT:
        if (!jv_hashable(item)) return jj_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(item));
        *out = jj_dict_get(c.u.d, item) != NULL;
        return 0;
    default: return jj_fail(r, "TypeError", "argument of type '%s' is not iterable", jv_type_name(c));
    }
}

/* ---- operators ---- */

static bool is_num(struct jv v) { return v.t == JJ_BOOL || v.t == JJ_INT || v.t == JJ_FLOAT; }
static bool is_intlike(struct jv v) { return v.t == JJ_BOOL || v.t == JJ_INT; }
static int64_t ival(struct jv v) { return v.t == JJ_INT ? v.u.i : (int64_t)v.u.b; }
static double fval(struct jv v) { return v.t == JJ_FLOAT ? v.u.f : (double)ival(v); }

static const char *OPSYM[] = {"+", "-", "*", "/", "//", "%", "**"};

static int unsupported(struct jj_render *r, int op, struct jv a, struct jv b) {
    return jj_fail(r, "TypeError", "unsupported operand type(s) for %s: '%s' and '%s'", OPSYM[op], jv_type_name(a),
                   jv_type_name(b));
}

/* str + str with MarkupSafe's rule: a Markup operand escapes the other one. */
static int str_add(struct jj_render *r, const struct jj_str *a, const struct jj_str *b, struct jv *out) {
    bool markup = a->markup || b->markup;
    struct jj_buf buf = {0};
    if (markup && !a->markup) jj_html_escape(a, &buf);
    else jj_buf_put_str(&buf, a);
    if (markup && !b->markup) jj_html_escape(b, &buf);
    else jj_buf_put_str(&buf, b);
    size_t n = buf.n;
    struct jj_str *s = jj_buf_take(&buf);
    if (!s) return jj_fail_oom(r);
    s->markup = markup;
    *out = jv_str(s);
    return jj_charge_out(r, n, out);
}

static int seq_repeat(struct jj_render *r, struct jv seq, int64_t times, struct jv *out) {
    if (times < 0) times = 0;
    if (seq.t == JJ_STR) {
        const struct jj_str *s = seq.u.s;
        if (s->n && (uint64_t)times > JJ_MAX_OUTPUT / s->n) return jj_fail_oom(r);
        struct jj_buf b = {0};
        for (int64_t i = 0; i < times && !b.oom; i++) jj_buf_put_str(&b, s);
        size_t n = b.n;
        struct jj_str *res = jj_buf_take(&b);
        if (!res) return jj_fail_oom(r);
        res->markup = s->markup;
        *out = jv_str(res);
        return jj_charge_out(r, n, out);
    }
    const struct jj_list *l = seq.u.l;
    if (l->n && (uint64_t)times > JJ_MAX_ITEMS / l->n) return jj_fail_oom(r);
    struct jj_list *res = jj_list_new(l->sub, l->n * (size_t)times);
    if (!res) return jj_fail_oom(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < l->n; j++)
            if (!jj_list_push(res, jv_incref(l->v[j]))) {
                jv_decref(jv_list(res));
                return jj_fail_oom(r);
            }
    *out = jv_list(res);
    return jj_charge_out(r, l->n * (size_t)times * 8, out);
}

/* Python's float modulo and floor division. */
static void py_divmod(double x, double y, double *div, double *mod) {
    double m = fmod(x, y);
    double d = (x - m) / y;
    if (m != 0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    double fd;
    if (d != 0) {
        fd = floor(d);
        if (d - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, x / y);
    }
    *div = fd;
    *mod = m;
}

int jj_binop(struct jj_render *r, int op, struct jv a, struct jv b, struct jv *out) {
    if (a.t == JJ_UNDEF) return jj_fail_undefined(r, a);
    if (b.t == JJ_UNDEF) return jj_fail_undefined(r, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a.t == JJ_FLOAT || b.t == JJ_FLOAT;
        if (!fl) {
            int64_t x = ival(a), y = ival(b), z;
            switch (op) {
            case JB_ADD:
                if (__builtin_add_overflow(x, y, &z)) goto overflow;
                *out = jv_int(z);
                return 0;
            case JB_SUB:
                if (__builtin_sub_overflow(x, y, &z)) goto overflow;
                *out = jv_int(z);
                return 0;
            case JB_MUL:
                if (__builtin_mul_overflow(x, y, &z)) goto overflow;
                *out = jv_int(z);
                return 0;
            case JB_DIV:
                if (y == 0) return jj_fail(r, "ZeroDivisionError", "division by zero");
                *out = jv_float((double)x / (double)y);
                return 0;
            case JB_FLOORDIV:
            case JB_MOD: {
                if (y == 0) return jj_fail(r, "ZeroDivisionError", "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) { /* C's x / y and x % y trap here */
                    if (op == JB_FLOORDIV) goto overflow;
                    *out = jv_int(0);
                    return 0;
                }
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y, q -= 1;
                *out = jv_int(op == JB_MOD ? m : q);
                return 0;
            }
            case JB_POW:
                if (y < 0) {
                    if (x == 0) return jj_fail(r, "ZeroDivisionError", "0.0 cannot be raised to a negative power");
                    *out = jv_float(pow((double)x, (double)y));
                    return 0;
                }
                z = 1;
                for (int64_t base = x, e = y; e; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(z, base, &z)) goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                *out = jv_int(z);
                return 0;
            }
        }
        double x = fval(a), y = fval(b), d, m;
        switch (op) {
        case JB_ADD: *out = jv_float(x + y); return 0;
        case JB_SUB: *out = jv_float(x - y); return 0;
        case JB_MUL: *out = jv_float(x * y); return 0;
        case JB_DIV:
            if (y == 0) return jj_fail(r, "ZeroDivisionError", "float division by zero");
            *out = jv_float(x / y);
            return 0;
        case JB_FLOORDIV:
        case JB_MOD:
            if (y == 0) return jj_fail(r, "ZeroDivisionError", op == JB_MOD ? "float modulo" : "float floor division by zero");
            py_divmod(x, y, &d, &m);
            *out = jv_float(op == JB_MOD ? m : d);
            return 0;
        case JB_POW:
            if (x == 0 && y < 0) return jj_fail(r, "ZeroDivisionError", "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y)) return jj_fail(r, "TypeError", "complex results are not supported");
            *out = jv_float(pow(x, y));
            return 0;
        }
    }
    switch (op) {
    case JB_ADD:
        if (a.t == JJ_STR && b.t == JJ_STR) return str_add(r, a.u.s, b.u.s, out);
        if (a.t == JJ_LIST && b.t == JJ_LIST && a.u.l->sub == b.u.l->sub &&
            (a.u.l->sub == JJ_LIST_LIST || a.u.l->sub == JJ_LIST_TUPLE)) {
            struct jj_list *l = jj_list_new(a.u.l->sub, a.u.l->n + b.u.l->n);
            if (!l) return jj_fail_oom(r);
            for (size_t i = 0; i < a.u.l->n; i++)
                if (!jj_list_push(l, jv_incref(a.u.l->v[i]))) goto list_oom;
            for (size_t i = 0; i < b.u.l->n; i++)
                if (!jj_list_push(l, jv_incref(b.u.l->v[i]))) goto list_oom;
            *out = jv_list(l);
            return jj_charge_out(r, l->n * 8, out);
        list_oom:
            jv_decref(jv_list(l));
            return jj_fail_oom(r);
        }
        if (a.t == JJ_STR)
            return jj_fail(r, "TypeError", "can only concatenate str (not \"%s\") to str", jv_type_name(b));
        if (a.t == JJ_LIST && (a.u.l->sub == JJ_LIST_LIST || a.u.l->sub == JJ_LIST_TUPLE))
            return jj_fail(r, "TypeError", "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                           jv_type_name(b), jv_type_name(a));
        return unsupported(r, op, a, b);
    case JB_MUL:
        if ((a.t == JJ_STR || (a.t == JJ_LIST && (a.u.l->sub <= JJ_LIST_TUPLE))) && is_intlike(b))
            return seq_repeat(r, a, ival(b), out);
        if ((b.t == JJ_STR || (b.t == JJ_LIST && (b.u.l->sub <= JJ_LIST_TUPLE))) && is_intlike(a))
            return seq_repeat(r, b, ival(a), out);
        if ((a.t == JJ_STR || b.t == JJ_STR) && (a.t == JJ_FLOAT || b.t == JJ_FLOAT))
            return jj_fail(r, "TypeError", "can't multiply sequence by non-int of type 'float'");
        return unsupported(r, op, a, b);
    case JB_MOD:
        if (a.t == JJ_STR) return jj_percent_format(r, a.u.s, b, out);
        return unsupported(r, op, a, b);
    default: return unsupported(r, op, a, b);
    }
overflow:
    return jj_fail(r, "OverflowError", "integer result out of the 64-bit range");
}

/* ---- evaluation ---- */

static int eval(struct jj_render *r, struct jj_frame *f, const struct jj_node *e, struct jv *out);
static int exec_node(struct jj_render *r, struct jj_frame *f, const struct jj_node *s);

/* Evaluates call arguments (positional, name=value, *seq, **dict) into a. */
struct argbuf {
    struct jj_args a;
    struct jv pos_small[8], kw_small[8];
    const char *names_small[8];
    size_t lens_small[8];
    size_t cap_pos, cap_kw;
};

static void args_free(struct argbuf *ab) {
    for (size_t i = 0; i < ab->a.n_pos; i++) jv_decref(ab->a.pos[i]);
    for (size_t i = 0; i < ab->a.n_kw; i++) jv_decref(ab->a.kw[i]);
    if (ab->a.pos != ab->pos_small) free(ab->a.pos);
    if (ab->a.kw != ab->kw_small) {
        free(ab->a.kw);
        free(ab->a.kw_names);
        free(ab->a.kw_lens);
    }
}

static bool args_push_pos(struct argbuf *ab, struct jv v) {
    if (ab->a.n_pos == ab->cap_pos) {
        size_t cap = ab->cap_pos * 2;
        struct jv *p = malloc(cap * sizeof *p);
        if (!p) {
            jv_decref(v);
            return false;
        }
        memcpy(p, ab->a.pos, ab->a.n_pos * sizeof *p);
        if (ab->a.pos != ab->pos_small) free(ab->a.pos);
        ab->a.pos = p, ab->cap_pos = cap;
    }
    ab->a.pos[ab->a.n_pos++] = v;
    return true;
}

static bool args_push_kw(struct argbuf *ab, const char *name, size_t len, struct jv v) {
    if (ab->a.n_kw == ab->cap_kw) {
        size_t cap = ab->cap_kw * 2;
        struct jv *p = malloc(cap * sizeof *p);
        const char **nm = malloc(cap * sizeof *nm);
        size_t *ln = malloc(cap * sizeof *ln);
        if (!p || !nm || !ln) {
            free(p), free(nm), free(ln);
            jv_decref(v);
            return false;
        }
        memcpy(p, ab->a.kw, ab->a.n_kw * sizeof *p);
        memcpy(nm, ab->a.kw_names, ab->a.n_kw * sizeof *nm);
        memcpy(ln, ab->a.kw_lens, ab->a.n_kw * sizeof *ln);
        if (ab->a.kw != ab->kw_small) {
            free(ab->a.kw);
            free(ab->a.kw_names);
            free(ab->a.kw_lens);
        }
        ab->a.kw = p, ab->a.kw_names = nm, ab->a.kw_lens = ln, ab->cap_kw = cap;
    }
    ab->a.kw_names[ab->a.n_kw] = name;
    ab->a.kw_lens[ab->a.n_kw] = len;
    ab->a.kw[ab->a.n_kw++] = v;
    return true;
}

/* Arguments of a call node; dict keys of **kw stay alive through *hold. */
static int eval_args(struct jj_render *r, struct jj_frame *f, const struct jj_node *call, struct argbuf *ab,
                     struct jv *hold) {
    memset(ab, 0, sizeof *ab);
    ab->a.pos = ab->pos_small;
    ab->a.kw = ab->kw_small;
    ab->a.kw_names = ab->names_small;
    ab->a.kw_lens = ab->lens_small;
    ab->cap_pos = ab->cap_kw = 8;
    *hold = jv_none();
    for (size_t i = 0; i < call->n; i++) {
        const struct jj_node *x = call->v[i];
        struct jv v;
        if (x->kind == JN_KWARG) {
            if (eval(r, f, x->a, &v)) return -1;
            if (!args_push_kw(ab, x->name, strlen(x->name), v)) return jj_fail_oom(r);
        } else if (x->kind == JN_STARARG) {
            if (eval(r, f, x->a, &v)) return -1;
            struct jj_list *l;
            int rc = jj_iterate(r, v, &l);
            jv_decref(v);
            if (rc) return -1;
            for (size_t k = 0; k < l->n; k++)
                if (!args_push_pos(ab, jv_incref(l->v[k]))) {
                    jv_decref(jv_list(l));
                    return jj_fail_oom(r);
                }
            jv_decref(jv_list(l));
        } else if (x->kind == JN_DSTARARG) {
            if (eval(r, f, x->a, &v)) return -1;
            if (v.t != JJ_DICT) {
                jv_decref(v);
                return jj_fail(r, "TypeError", "argument after ** must be a mapping");
            }
            jv_decref(*hold);
            *hold = v;
            for (size_t k = 0; k < v.u.d->n; k++) {
                if (v.u.d->k[k].t != JJ_STR) return jj_fail(r, "TypeError", "keywords must be strings");
                if (!args_push_kw(ab, v.u.d->k[k].u.s->s, v.u.d->k[k].u.s->n, jv_incref(v.u.d->v[k])))
                    return jj_fail_oom(r);
            }
        } else {
            if (eval(r, f, x, &v)) return -1;
            if (!args_push_pos(ab, v)) return jj_fail_oom(r);
        }
    }
    return 0;
}

int jj_call(struct jj_render *r, struct jv fn, const struct jj_args *a, struct jv *out) {
    switch (fn.t) {
    case JJ_MACRO: return jj_call_macro(r, fn.u.macro, a, out);
    case JJ_FUNC: return jj_call_global(r, fn.sub, a, out);
    case JJ_METHOD: return jj_call_method(r, fn.u.m, a, out);
    case JJ_UNDEF: return jj_fail_undefined(r, fn);
    default: return jj_fail(r, "TypeError", "'%s' object is not callable", jv_type_name(fn));
    }
}

static int eval_name(struct jj_render *r, struct jj_frame *f, const char *name, struct jv *out) {
    for (; f; f = f->parent) {
        struct jv *v = frame_find(f, name);
        if (v) {
            *out = jv_incref(*v);
            return 0;
        }
    }
    struct jv *v = jj_dict_get_cstr(r->ctx, name);
    if (v) {
        *out = jv_incref(*v);
        return 0;
    }
    int g = jj_global_lookup(name);
    if (g) {
        struct jv fn = {JJ_FUNC, (uint8_t)g, 0, {0}};
        *out = fn;
        return 0;
    }
    *out = jv_undef_named(name, JJ_UNDEF);
    return 0;
}

static int eval_filter(struct jj_render *r, struct jj_frame *f, const struct jj_node *e, struct jv input, struct jv *out);

/* A filter chain whose innermost value is input (filter blocks, set blocks). */
static int apply_chain(struct jj_render *r, struct jj_frame *f, const struct jj_node *chain, struct jv input, struct jv *out) {
    return eval_filter(r, f, chain, input, out);
}

static int eval_filter(struct jj_render *r, struct jj_frame *f, const struct jj_node *e, struct jv input, struct jv *out) {
    struct jv v;
    if (e->a) {
        if (e->a->kind == JN_FILTER) {
            if (eval_filter(r, f, e->a, input, &v)) return -1;
        } else if (eval(r, f, e->a, &v)) {
            return -1;
        }
    } else {
        v = jv_incref(input);
    }
    r->line = e->line;
    if (e->id < 0) {
        jv_decref(v);
        return jj_fail(r, "TemplateRuntimeError", "No filter named '%s' found.", e->name);
    }
    struct argbuf ab;
    struct jv hold;
    int rc = eval_args(r, f, e, &ab, &hold);
    r->line = e->line;
    if (!rc) rc = jj_apply_filter(r, e->id, v, &ab.a, out);
    args_free(&ab);
    jv_decref(hold);
    jv_decref(v);
    return rc;
}

/* What comparing v element by element costs, at its top level (nested containers
 * are not walked here: building them was charged). */
static size_t compare_cost(struct jv v) {
    if (v.t == JJ_LIST) return v.u.l->n;
    if (v.t == JJ_DICT) return v.u.d->n;
    if (v.t == JJ_STR) return v.u.s->n / 16;
    return 0;
}

static int compare_op(struct jj_render *r, int op, struct jv a, struct jv b, bool *res) {
    int c;
    if (op != JC_IN && op != JC_NOTIN && jj_charge_items(r, compare_cost(a) < compare_cost(b) ? compare_cost(a) : compare_cost(b)))
        return -1;
    switch (op) {
    case JC_EQ: *res = jv_equal(a, b); return 0;
    case JC_NE: *res = !jv_equal(a, b); return 0;
    case JC_IN:
    case JC_NOTIN:
        if (jj_contains(r, b, a, res)) return -1;
        if (op == JC_NOTIN) *res = !*res;
        return 0;
    default: break;
    }
    if (a.t == JJ_UNDEF) return jj_fail_undefined(r, a);
    if (b.t == JJ_UNDEF) return jj_fail_undefined(r, b);
    static const char *sym[] = {"==", "!=", "<", "<=", ">", ">="};
    if (!jv_compare(a, b, &c))
        return jj_fail(r, "TypeError", "'%s' not supported between instances of '%s' and '%s'", sym[op], jv_type_name(a),
                       jv_type_name(b));
    bool nan = (a.t == JJ_FLOAT && isnan(a.u.f)) || (b.t == JJ_FLOAT && isnan(b.u.f));
    switch (op) {
    case JC_LT: *res = !nan && c < 0; break;
    case JC_LE: *res = !nan && c <= 0; break;
    case JC_GT: *res = !nan && c > 0; break;
    default: *res = !nan && c >= 0; break;
    }
    return 0;
}

static int eval_inner(struct jj_render *r, struct jj_frame *f, const struct jj_node *e, struct jv *out) {
    struct jv a, b, c;
    switch (e->kind) {
    case JN_CONST: *out = jv_incref(e->lit); return 0;
    case JN_NAME: return eval_name(r, f, e->name, out);
    case JN_LIST:
    case JN_TUPLE: {
        struct jj_list *l = jj_list_new(e->kind == JN_LIST ? JJ_LIST_LIST : JJ_LIST_TUPLE, e->n);
        if (!l) return jj_fail_oom(r);
        for (size_t i = 0; i < e->n; i++) {
            if (eval(r, f, e->v[i], &a)) {
                jv_decref(jv_list(l));
                return -1;
            }
            if (!jj_list_push(l, a)) {
                jv_decref(jv_list(l));
                return jj_fail_oom(r);
            }
        }
        *out = jv_list(l);
        return 0;
    }
    case JN_DICT: {
        struct jj_dict *d = jj_dict_new(e->n / 2);
        if (!d) return jj_fail_oom(r);
        for (size_t i = 0; i + 1 < e->n; i += 2) {
            if (eval(r, f, e->v[i], &a)) goto dict_fail;
            if (!jv_hashable(a)) {
                jj_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(a));
                jv_decref(a);
                goto dict_fail;
            }
            if (eval(r, f, e->v[i + 1], &b)) {
                jv_decref(a);
                goto dict_fail;
            }
            if (!jj_dict_set(d, a, b)) {
                jj_fail_oom(r);
                goto dict_fail;
            }
        }
        *out = jv_dict(d);
        return 0;
    dict_fail:
        jv_decref(jv_dict(d));
        return -1;
    }
    case JN_ATTR: {
        if (eval(r, f, e->a, &a)) return -1;
        r->line = e->line;
        int rc = jj_getattr(r, a, e->name, strlen(e->name), out);
        jv_decref(a);
        return rc;
    }
    case JN_ITEM: {
        if (eval(r, f, e->a, &a)) return -1;
        if (eval(r, f, e->b, &b)) {
            jv_decref(a);
            return -1;
        }
        r->line = e->line;
        int rc = jj_getitem(r, a, b, out);
        jv_decref(a);
        jv_decref(b);
        return rc;
    }
    case JN_SLICE: {
        struct jv s[3] = {jv_none(), jv_none(), jv_none()};
        const struct jj_node *parts[3] = {e->b, e->c, e->d};
        if (eval(r, f, e->a, &a)) return -1;
        int rc = 0;
        for (int i = 0; i < 3 && !rc; i++)
            if (parts[i]) rc = eval(r, f, parts[i], &s[i]);
        r->line = e->line;
        if (!rc) rc = do_slice(r, a, s[0], s[1], s[2], out);
        for (int i = 0; i < 3; i++) jv_decref(s[i]);
        jv_decref(a);
        return rc;
    }
    case JN_CALL: {
        if (eval(r, f, e->a, &a)) return -1;
        struct argbuf ab;
        struct jv hold;
        int rc = eval_args(r, f, e, &ab, &hold);
        r->line = e->line;
        if (!rc) rc = jj_call(r, a, &ab.a, out);
        args_free(&ab);
        jv_decref(hold);
        jv_decref(a);
        return rc;
    }
    case JN_FILTER: return eval_filter(r, f, e, jv_undef(), out);
    case JN_TEST: {
        if (eval(r, f, e->a, &a)) return -1;
        r->line = e->line;
        if (e->id < 0) {
            jv_decref(a);
            return jj_fail(r, "TemplateRuntimeError", "No test named '%s' found.", e->name);
        }
        struct argbuf ab;
        struct jv hold;
        int rc = eval_args(r, f, e, &ab, &hold);
        bool res = false;
        r->line = e->line;
        if (!rc) rc = jj_apply_test(r, e->id, a, &ab.a, &res);
        args_free(&ab);
        jv_decref(hold);
        jv_decref(a);
        if (!rc) *out = jv_bool(res);
        return rc;
    }
    case JN_NOT:
        if (eval(r, f, e->a, &a)) return -1;
        *out = jv_bool(!jv_truthy(a));
        jv_decref(a);
        return 0;
    case JN_NEG:
    case JN_POS:
        if (eval(r, f, e->a, &a)) return -1;
        r->line = e->line;
        if (a.t == JJ_UNDEF) return jj_fail_undefined(r, a);
        if (a.t == JJ_FLOAT) *out = jv_float(e->kind == JN_NEG ? -a.u.f : a.u.f);
        else if (is_intlike(a)) {
            if (e->kind == JN_NEG && ival(a) == INT64_MIN) return jj_fail(r, "OverflowError", "integer result out of the 64-bit range");
            *out = jv_int(e->kind == JN_NEG ? -ival(a) : ival(a));
        } else {
            int rc = jj_fail(r, "TypeError", "bad operand type for unary %s: '%s'", e->kind == JN_NEG ? "-" : "+", jv_type_name(a));
            jv_decref(a);
            return rc;
        }
        return 0;
    case JN_BINOP: {
        if (eval(r, f, e->a, &a)) return -1;
        if (eval(r, f, e->b, &b)) {
            jv_decref(a);
            return -1;
        }
        r->line = e->line;
        int rc = jj_binop(r, e->op, a, b, out);
        jv_decref(a);
        jv_decref(b);
        return rc;
    }
    case JN_CONCAT: {
        struct jj_buf buf = {0};
        for (size_t i = 0; i < e->n; i++) {
            if (eval(r, f, e->v[i], &a)) {
                jj_buf_free(&buf);
                return -1;
            }
            jj_str_of(a, &buf);
            jv_decref(a);
        }
        size_t n = buf.n;
        struct jj_str *s = jj_buf_take(&buf);
        if (!s) return jj_fail_oom(r);
        *out = jv_str(s);
        return jj_charge_out(r, n, out);
    }
    case JN_AND:
    case JN_OR:
        if (eval(r, f, e->a, &a)) return -1;
        if (jv_truthy(a) == (e->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        jv_decref(a);
        return eval(r, f, e->b, out);
    case JN_COMPARE: {
        if (eval(r, f, e->a, &a)) return -1;
        bool res = true;
        for (size_t i = 0; i < e->n && res; i++) {
            if (eval(r, f, e->v[i], &b)) {
                jv_decref(a);
                return -1;
            }
            r->line = e->line;
            int rc = compare_op(r, e->ops[i], a, b, &res);
            jv_decref(a);
            a = b;
            if (rc) {
                jv_decref(a);
                return -1;
            }
        }
        jv_decref(a);
        *out = jv_bool(res);
        return 0;
    }
    case JN_COND:
        if (eval(r, f, e->b, &c)) return -1;
        {
            bool t = jv_truthy(c);
            jv_decref(c);
            if (t) return eval(r, f, e->a, out);
        }
        if (e->c) return eval(r, f, e->c, out);
        *out = jv_undef();
        return 0;
    default: return jj_fail(r, "TemplateRuntimeError", "cannot evaluate this node (%d)", e->kind);
    }
}

static int eval(struct jj_render *r, struct jj_frame *f, const struct jj_node *e, struct jv *out) {
    if (r->failed) return -1;
    if (++r->steps > r->max_steps) return jj_fail(r, "TemplateRuntimeError", "the template did too much work (step limit)");
    if (r->depth >= JJ_MAX_EVAL_DEPTH) return jj_fail(r, "RecursionError", "maximum recursion depth exceeded");
    r->depth++;
    r->line = e->line;
    int rc = eval_inner(r, f, e, out);
    r->depth--;
    if (rc && !r->failed) jj_fail(r, "TemplateRuntimeError", "evaluation failed");
    return rc;
}

/* ---- statements ---- */

static int assign(struct jj_render *r, struct jj_frame *f, const struct jj_node *target, struct jv v) {
    if (target->kind == JN_NAME) return frame_set(r, f, target->name, v);
    if (target->kind == JN_NSREF) {
        struct jv ns;
        eval_name(r, f, target->name, &ns);
        if (ns.t != JJ_NS) {
            jv_decref(ns);
            jv_decref(v);
            return jj_fail(r, "TemplateRuntimeError", "cannot assign attribute on non-namespace object");
        }
        struct jj_str *k = jj_str_new(target->name2, strlen(target->name2), JJ_PROV_NONE);
        if (!k) {
            jv_decref(v);
            return jj_fail_oom(r);
        }
        if (!jj_dict_set(ns.u.ns->attrs, jv_str(k), v)) return jj_fail_oom(r);
        return 0;
    }
    /* a tuple of names: unpack */
    struct jj_list *l;
    if (v.t == JJ_STR || v.t == JJ_DICT || v.t == JJ_LIST) {
        if (jj_iterate(r, v, &l)) {
            jv_decref(v);
            return -1;
        }
    } else {
        int rc = jj_fail(r, "TypeError", "cannot unpack non-iterable %s object", jv_type_name(v));
        jv_decref(v);
        return rc;
    }
    jv_decref(v);
    int rc = 0;
    if (l->n != target->n) {
        if (l->n > target->n) rc = jj_fail(r, "ValueError", "too many values to unpack (expected %zu)", target->n);
        else rc = jj_fail(r, "ValueError", "not enough values to unpack (expected %zu, got %zu)", target->n, l->n);
    }
    for (size_t i = 0; i < target->n && !rc; i++) rc = assign(r, f, target->v[i], jv_incref(l->v[i]));
    jv_decref(jv_list(l));
    return rc;
}

static int exec_body(struct jj_render *r, struct jj_frame *f, const struct jj_node *body) {
    for (size_t i = 0; i < body->n; i++) {
        if (exec_node(r, f, body->v[i])) return -1;
        if (r->loop_ctl) return 0;
    }
    return 0;
}

/* Renders body in a new frame (child of parent) into a string. */
static int render_capture(struct jj_render *r, struct jj_frame *parent, const struct jj_node *body, struct jj_str **out) {
    struct jj_frame f = {.parent = parent};
    struct jj_buf buf = {.max = r->max_output};
    struct jj_buf *saved = r->out;
    r->out = &buf;
    int rc = exec_body(r, &f, body);
    r->out = saved;
    frame_free(&f);
    if (!rc && buf.oom) rc = jj_fail(r, "MemoryError", "output over %zu bytes, or out of memory", r->max_output);
    if (rc) {
        jj_buf_free(&buf);
        return -1;
    }
    *out = jj_buf_take(&buf);
    return *out ? 0 : jj_fail_oom(r);
}

static int exec_for(struct jj_render *r, struct jj_frame *f, const struct jj_node *s) {
    struct jv it;
    if (eval(r, f, s->b, &it)) return -1;
    r->line = s->line;
    struct jj_list *items;
    int rc = jj_iterate(r, it, &items);
    jv_decref(it);
    if (rc) return -1;
    struct jj_frame lf = {.parent = f};
    if (s->c) { /* for x in y if cond: filter first (the condition cannot see loop) */
        struct jj_list *kept = jj_list_new(JJ_LIST_LIST, items->n);
        if (!kept) rc = jj_fail_oom(r);
        for (size_t i = 0; !rc && i < items->n; i++) {
            struct jv t;
            rc = assign(r, &lf, s->a, jv_incref(items->v[i]));
            if (!rc) rc = eval(r, &lf, s->c, &t);
            if (!rc) {
                if (jv_truthy(t) && !jj_list_push(kept, jv_incref(items->v[i]))) rc = jj_fail_oom(r);
                jv_decref(t);
            }
        }
        jv_decref(jv_list(items));
        items = kept;
        if (rc) {
            if (items) jv_decref(jv_list(items));
            frame_free(&lf);
            return -1;
        }
    }
    struct jj_loop *loop = calloc(1, sizeof *loop);
    if (!loop) {
        jv_decref(jv_list(items));
        frame_free(&lf);
        return jj_fail_oom(r);
    }
    loop->rc = 1;
    loop->items = items; /* the loop owns the list now */
    loop->length = items->n;
    struct jv lv = {JJ_LOOP, 0, 0, {0}};
    lv.u.loop = loop;
    rc = frame_set(r, &lf, "loop", lv);
    size_t n = items->n;
    for (size_t i = 0; !rc && i < n; i++) {
        loop->index0 = i;
        /* an iteration is a step even when its body is empty (nested empty loops would be free) */
        if (++r->steps > r->max_steps) {
            rc = jj_fail(r, "TemplateRuntimeError", "the template did too much work (step limit)");
            break;
        }
        rc = assign(r, &lf, s->a, jv_incref(items->v[i]));
        if (rc) break;
        struct jv *lp = frame_find(&lf, "loop");
        if (!lp || lp->t != JJ_LOOP || lp->u.loop != loop) { /* the body rebound "loop": put it back */
            rc = frame_set(r, &lf, "loop", jv_incref(lv));
            if (rc) break;
        }
        rc = exec_body(r, &lf, s->d);
        if (r->loop_ctl == JN_BREAK) {
            r->loop_ctl = 0;
            break;
        }
        r->loop_ctl = 0;
    }
    frame_free(&lf);
    if (!rc && n == 0 && s->e) {
        struct jj_frame ef = {.parent = f};
        rc = exec_body(r, &ef, s->e);
        frame_free(&ef);
    }
    return rc;
}

static int call_macro_body(struct jj_render *r, const struct jj_node *m, struct jj_frame *mf, struct jv *out);

static int exec_inner(struct jj_render *r, struct jj_frame *f, const struct jj_node *s) {
    struct jv v;
    switch (s->kind) {
    case JN_BODY: return exec_body(r, f, s);
    case JN_DATA:
        jj_buf_put_str(r->out, s->lit.u.s);
        break;
    case JN_OUTPUT:
        if (eval(r, f, s->a, &v)) return -1;
        jj_str_of(v, r->out);
        jv_decref(v);
        break;
    case JN_IF:
        for (const struct jj_node *n = s; n;) {
            if (eval(r, f, n->a, &v)) return -1;
            bool t = jv_truthy(v);
            jv_decref(v);
            if (t) return exec_body(r, f, n->b);
            if (n->c && n->c->kind == JN_IF) {
                n = n->c;
                continue;
            }
            if (n->c) return exec_body(r, f, n->c);
            break;
        }
        return 0;
    case JN_FOR: return exec_for(r, f, s);
    case JN_SET:
        if (eval(r, f, s->b, &v)) return -1;
        r->line = s->line;
        return assign(r, f, s->a, v);
    case JN_SETBLOCK: {
        struct jj_str *body;
        if (render_capture(r, f, s->c, &body)) return -1;
        v = jv_str(body);
        if (s->b) {
            struct jv filtered;
            int rc = apply_chain(r, f, s->b, v, &filtered);
            jv_decref(v);
            if (rc) return -1;
            v = filtered;
        }
        return assign(r, f, s->a, v);
    }
    case JN_MACRO: {
        struct jv m = {JJ_MACRO, 0, 0, {0}};
        m.u.macro = s;
        return frame_set(r, f, s->name, m);
    }
    case JN_FILTERBLOCK: {
        struct jj_str *body;
        if (render_capture(r, f, s->a, &body)) return -1;
        struct jv res;
        int rc = apply_chain(r, f, s->b, jv_str(body), &res);
        jj_str_decref(body);
        if (rc) return -1;
        jj_str_of(res, r->out);
        jv_decref(res);
        break;
    }
    case JN_BREAK:
    case JN_CONTINUE: r->loop_ctl = s->kind; return 0;
    case JN_GENERATION: {
        struct jj_frame gf = {.parent = f};
        int rc = exec_body(r, &gf, s->a);
        frame_free(&gf);
        return rc;
    }
    case JN_WITH: {
        struct jj_frame wf = {.parent = f};
        int rc = 0;
        for (size_t i = 0; i + 1 < s->n && !rc; i += 2) {
            rc = eval(r, f, s->v[i + 1], &v);
            if (!rc) rc = assign(r, &wf, s->v[i], v);
        }
        if (!rc) rc = exec_body(r, &wf, s->a);
        frame_free(&wf);
        return rc;
    }
    default: return jj_fail(r, "TemplateRuntimeError", "cannot execute this node (%d)", s->kind);
    }
    if (r->out->oom) return jj_fail(r, "MemoryError", "output over %zu bytes, or out of memory", r->max_output);
    return 0;
}

static int exec_node(struct jj_render *r, struct jj_frame *f, const struct jj_node *s) {
    if (r->failed) return -1;
    if (++r->steps > r->max_steps) return jj_fail(r, "TemplateRuntimeError", "the template did too much work (step limit)");
    if (r->depth >= JJ_MAX_EVAL_DEPTH) return jj_fail(r, "RecursionError", "maximum recursion depth exceeded");
    r->depth++;
    r->line = s->line;
    int rc = exec_inner(r, f, s);
    r->depth--;
    if (rc && !r->failed) jj_fail(r, "TemplateRuntimeError", "execution failed");
    return rc;
}

/* ---- macros ---- */

int jj_call_macro(struct jj_render *r, const struct jj_node *m, const struct jj_args *a, struct jv *out) {
    if (r->macro_depth >= JJ_MAX_MACRO_DEPTH) return jj_fail(r, "RecursionError", "maximum recursion depth exceeded (macro calls)");
    size_t n_params = m->n;
    if (a->n_pos > n_params && !(m->flags & JJ_MACRO_VARARGS))
        return jj_fail(r, "TypeError", "macro '%s' takes not more than %zu argument(s)", m->name, n_params);
    struct jj_frame mf = {.parent = r->root};
    int rc = 0;
    bool *used = a->n_kw ? calloc(a->n_kw, sizeof *used) : NULL;
    if (a->n_kw && !used) return jj_fail_oom(r);
    for (size_t i = 0; i < n_params && !rc; i++) {
        const struct jj_node *p = m->v[i];
        struct jv v;
        bool have = false;
        if (i < a->n_pos) {
            v = jv_incref(a->pos[i]);
            have = true;
        } else {
            for (size_t k = 0; k < a->n_kw; k++)
                if (!used[k] && strlen(p->name) == a->kw_lens[k] && !memcmp(p->name, a->kw_names[k], a->kw_lens[k])) {
                    v = jv_incref(a->kw[k]);
                    used[k] = true;
                    have = true;
                    break;
                }
        }
        if (!have) {
            if (p->kind == JN_KWARG) {
                rc = eval(r, &mf, p->a, &v);
                if (rc) break;
            } else {
                v = jv_undef_named(p->name, JJ_UNDEF);
            }
        }
        rc = frame_set(r, &mf, p->name, v);
    }
    if (!rc && (m->flags & JJ_MACRO_KWARGS)) {
        struct jj_dict *kw = jj_dict_new(a->n_kw);
        if (!kw) rc = jj_fail_oom(r);
        for (size_t k = 0; !rc && k < a->n_kw; k++) {
            if (used[k]) continue;
            struct jj_str *key = jj_str_new(a->kw_names[k], a->kw_lens[k], JJ_PROV_NONE);
            if (!key || !jj_dict_set(kw, jv_str(key), jv_incref(a->kw[k]))) rc = jj_fail_oom(r);
            else used[k] = true;
        }
        if (kw) rc = rc ? (jv_decref(jv_dict(kw)), rc) : frame_set(r, &mf, "kwargs", jv_dict(kw));
    }
    for (size_t k = 0; !rc && k < a->n_kw; k++)
        if (!used[k])
            rc = jj_fail(r, "TypeError", "macro '%s' takes no keyword argument '%.*s'", m->name, (int)a->kw_lens[k],
                         a->kw_names[k]);
    if (!rc && (m->flags & JJ_MACRO_VARARGS)) {
        struct jj_list *va = jj_list_new(JJ_LIST_TUPLE, 0);
        if (!va) rc = jj_fail_oom(r);
        for (size_t i = n_params; !rc && i < a->n_pos; i++)
            if (!jj_list_push(va, jv_incref(a->pos[i]))) rc = jj_fail_oom(r);
        if (va) rc = rc ? (jv_decref(jv_list(va)), rc) : frame_set(r, &mf, "varargs", jv_list(va));
    }
    free(used);
    if (!rc) rc = call_macro_body(r, m, &mf, out);
    frame_free(&mf);
    return rc;
}

static int call_macro_body(struct jj_render *r, const struct jj_node *m, struct jj_frame *mf, struct jv *out) {
    struct jj_buf buf = {.max = r->max_output};
    struct jj_buf *saved = r->out;
    int saved_ctl = r->loop_ctl;
    r->out = &buf;
    r->macro_depth++;
    int rc = exec_body(r, mf, m->a);
    r->macro_depth--;
    r->out = saved;
    r->loop_ctl = saved_ctl;
    if (!rc && buf.oom) rc = jj_fail(r, "MemoryError", "output over %zu bytes, or out of memory", r->max_output);
    if (rc) {
        jj_buf_free(&buf);
        return -1;
    }
    struct jj_str *s = jj_buf_take(&buf);
    if (!s) return jj_fail_oom(r);
    *out = jv_str(s);
    return 0;
}

/* ---- the public entry points ---- */

enum dj_status jinja_compile(const char *src, size_t n, struct dj_jinja **out) {
    size_t bad;
    if (!src && n) return dj_fail(DJ_ERR_INVALID, "template: no source");
    if (!jj_is_valid_utf8(src ? src : "", n, &bad)) {
        uint32_t line = 1;
        size_t col = 1;
        for (size_t i = 0; i < bad; i++) {
            if (src[i] == '\n') line++, col = 1;
            else col++;
        }
        return dj_fail(DJ_ERR_INVALID, "template: line %u, column %zu: invalid UTF-8", line, col);
    }
    struct dj_jinja *t = calloc(1, sizeof *t);
    if (!t) return dj_fail(DJ_ERR_INVALID, "template: out of memory");
    struct jj_token *toks;
    size_t n_toks;
    const char *norm;
    size_t norm_n;
    enum dj_status st = jj_lex(&t->arena, src ? src : "", n, &toks, &n_toks, &norm, &norm_n);
    if (!st) st = jj_parse(t, toks, n_toks, norm, norm_n);
    if (st) {
        jinja_free(t);
        return DJ_ERR_INVALID;
    }
    *out = t;
    return DJ_OK;
}

void jinja_free(struct dj_jinja *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_lits; i++) {
        t->lits[i]->rc = 1;
        jj_str_decref(t->lits[i]);
    }
    free(t->lits);
    free(t->free_vars);
    jj_arena_free(&t->arena);
    free(t);
}

bool jinja_reads_var(const struct dj_jinja *t, const char *name) {
    if (!t || !name) return false;
    for (size_t i = 0; i < t->n_free_vars; i++)
        if (!strcmp(t->free_vars[i], name)) return true;
    return false;
}

struct dj_jinja_params jinja_default_params(void) {
    struct dj_jinja_params p = {.now = (int64_t)time(NULL), .max_steps = JJ_MAX_STEPS, .max_output = JJ_MAX_OUTPUT};
    return p;
}

enum dj_status jinja_render(const struct dj_jinja *t, const json_t *ctx, int64_t now, struct dj_jinja_out *out) {
    struct dj_jinja_params p = {.now = now, .max_steps = JJ_MAX_STEPS, .max_output = JJ_MAX_OUTPUT};
    return jinja_render_ex(t, ctx, &p, out);
}

enum dj_status jinja_render_ex(const struct dj_jinja *t, const json_t *ctx, const struct dj_jinja_params *p,
                               struct dj_jinja_out *out) {
    memset(out, 0, sizeof *out);
    last_raised = false;
    if (!t) return dj_fail(DJ_ERR_INVALID, "template: no template");
    if (ctx && !json_is_object(ctx)) return dj_fail(DJ_ERR_INVALID, "template: the context must be a JSON object");
    struct dj_jinja_params def;
    if (!p) def = jinja_default_params(), p = &def;
    struct jj_render r = {.t = t,
                          .now = p->now,
                          .max_steps = p->max_steps < JJ_MAX_STEPS ? p->max_steps : JJ_MAX_STEPS,
                          .max_output = p->max_output < JJ_MAX_OUTPUT ? p->max_output : JJ_MAX_OUTPUT};
    struct jv ctxv;
    if (ctx) {
        if (jv_from_json(ctx, &ctxv, 0)) return DJ_ERR_INVALID;
    } else {
        struct jj_dict *d = jj_dict_new(0);
        if (!d) return dj_fail(DJ_ERR_INVALID, "template: out of memory");
        ctxv = jv_dict(d);
    }
    r.ctx = ctxv.u.d;
    for (const char *const *k = p->template_owned; k && *k; k++) {
        struct jv *v = jj_dict_get_cstr(r.ctx, *k);
        if (!v || v->t != JJ_STR) continue;
        struct jj_str *own = jj_str_new(v->u.s->s, v->u.s->n, JJ_PROV_NONE);
        if (!own) {
            jv_decref(ctxv);
            return dj_fail(DJ_ERR_INVALID, "template: out of memory");
        }
        jv_decref(*v);
        *v = jv_str(own);
    }
    struct jj_frame root = {0};
    struct jj_buf buf = {.max = r.max_output};
    r.root = &root;
    r.out = &buf;
    int rc = exec_body(&r, &root, t->root);
    if (!rc && buf.oom) rc = jj_fail(&r, "MemoryError", "output over %zu bytes, or out of memory", r.max_output);
    frame_free(&root);
    for (size_t i = 0; i < r.n_ns; i++) {
        jv_decref(jv_dict(r.ns[i]->attrs));
        free(r.ns[i]);
    }
    free(r.ns);
    jv_decref(ctxv);
    if (rc) {
        jj_buf_free(&buf);
        last_raised = r.raised;
        return dj_fail(DJ_ERR_INVALID, "%s", r.err);
    }
    if (!buf.p) {
        buf.p = malloc(1);
        if (!buf.p) return dj_fail(DJ_ERR_INVALID, "template: out of memory");
        buf.p[0] = '\0';
    }
    out->text = buf.p;
    out->n = buf.n;
    if (jj_buf_any_input(&buf, 0)) {
        out->from_input = buf.bits; /* (cap+7)/8 >= (n+7)/8 bytes, zero past n */
    } else {
        free(buf.bits);
    }
    return DJ_OK;
}

void jinja_out_free(struct dj_jinja_out *o) {
    if (!o) return;
    free(o->text);
    free(o->from_input);
    memset(o, 0, sizeof *o);
}
