/*
 * jinja_parse.c — tokens → syntax tree, following jinja2's parser (grammar,
 * precedence and its quirks) so that a template means here what it means
 * under transformers:
 *
 *   expression := or ("if" or ["else" expression])*       (a if b else c)
 *   or := and ("or" and)*      and := not ("and" not)*     not := "not" not | compare
 *   compare := math1 (("=="|"!="|"<"|...|"in"|"not in") math1)*
 *   math1 := concat (("+"|"-") concat)*    concat := math2 ("~" math2)*
 *   math2 := pow (("*"|"/"|"//"|"%") pow)*  pow := unary ("**" unary)*
 *   unary := ("-"|"+") unary_nofilter | primary postfix* (filter | test | call)*
 *
 * so filters bind tighter than every binary operator ("a + b|length" is
 * a + (b|length)) and "-x|abs" is abs(-x).
 *
 * Unknown filters and tests: jinja2 refuses the template at compile time,
 * except inside an {% if %} (a "soft" frame), where the error is raised only
 * if that code runs (TemplateRuntimeError) — deepseek's from_json relies on it.
 *
 * While parsing, names read before any assignment in their scope are
 * collected for jinja_reads_var (an approximation of jinja2.meta's
 * find_undeclared_variables).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- the arena ---- */

struct jj_arena_chunk {
    struct jj_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jj_arena_alloc(struct jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct jj_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(struct jj_arena *a) {
    struct jj_arena_chunk *c = a->head;
    while (c) {
        struct jj_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- the parser ---- */

struct scope_name {
    const char *name;
    size_t scope; /* nesting level it was declared at */
};

struct parser {
    struct dj_jinja *t;
    const struct jj_token *tk;
    size_t n, i;
    const char *src;
    size_t src_n;
    size_t depth;
    int soft;            /* inside an {% if %}: unknown filters fail at run time */
    int loops;           /* enclosing for loops (break/continue allowed) */
    struct jj_node *macro; /* the macro being parsed (varargs / kwargs use) */
    struct scope_name *decl;
    size_t n_decl, cap_decl, level;
    bool failed;
};

struct nvec {
    struct jj_node **v;
    size_t n, cap;
};

static enum dj_status pfail(struct parser *P, const struct jj_token *t, const char *fmt, ...) DJ_PRINTF(3, 4);
static enum dj_status pfail(struct parser *P, const struct jj_token *t, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t off = t ? t->off : P->src_n;
    uint32_t line = 1;
    size_t col = 1;
    for (size_t i = 0; i < off && i < P->src_n; i++) {
        if (P->src[i] == '\n') line++, col = 1;
        else col++;
    }
    P->failed = true;
    return dj_fail(DJ_ERR_INVALID, "template: line %u, column %zu: %s", line, col, msg);
}

static enum dj_status oom(struct parser *P) {
    P->failed = true;
    return dj_fail(DJ_ERR_NOMEM, "template: out of memory");
}

static const struct jj_token *cur(const struct parser *P) { return &P->tk[P->i]; }
static const struct jj_token *look(const struct parser *P) { return &P->tk[P->i + 1 < P->n ? P->i + 1 : P->i]; }
static void adv(struct parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static bool tok_is(const struct jj_token *t, uint8_t type, const char *text) {
    if (t->type != type) return false;
    if (!text) return true;
    size_t n = strlen(text);
    return t->len == n && !memcmp(t->text, text, n);
}
static bool is_op(const struct parser *P, const char *op) { return tok_is(cur(P), JT_OP, op); }
static bool is_name(const struct parser *P, const char *name) { return tok_is(cur(P), JT_NAME, name); }

static const char *describe(const struct jj_token *t, char *buf, size_t n) {
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_DATA:
    case JT_RAW: return "template data";
    case JT_STRING: return "string";
    default: snprintf(buf, n, "%.*s", (int)(t->len < 40 ? t->len : 40), t->text); return buf;
    }
}

static enum dj_status expect_op(struct parser *P, const char *op) {
    if (is_op(P, op)) {
        adv(P);
        return DJ_OK;
    }
    char b[64];
    return pfail(P, cur(P), "expected token '%s', got '%s'", op, describe(cur(P), b, sizeof b));
}

static enum dj_status expect_type(struct parser *P, uint8_t type, const char *what) {
    if (cur(P)->type == type) {
        adv(P);
        return DJ_OK;
    }
    char b[64];
    return pfail(P, cur(P), "expected %s, got '%s'", what, describe(cur(P), b, sizeof b));
}

static struct jj_node *node(struct parser *P, uint8_t kind, const struct jj_token *at) {
    struct jj_node *n = jj_arena_alloc(&P->t->arena, sizeof *n);
    if (!n) {
        oom(P);
        return NULL;
    }
    n->kind = kind;
    n->line = at->line;
    n->id = -1;
    return n;
}

static char *dup_name(struct parser *P, const char *s, size_t n) {
    char *d = jj_arena_alloc(&P->t->arena, n + 1);
    if (!d) {
        oom(P);
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool nvec_push(struct parser *P, struct nvec *v, struct jj_node *x) {
    if (!x) return false;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        struct jj_node **p = realloc(v->v, cap * sizeof *p);
        if (!p) {
            oom(P);
            return false;
        }
        v->v = p, v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

/* Moves the vector's items into the arena as n->v / n->n. */
static bool nvec_finish(struct parser *P, struct nvec *v, struct jj_node *n) {
    if (v->n) {
        n->v = jj_arena_alloc(&P->t->arena, v->n * sizeof *n->v);
        if (!n->v) {
            free(v->v);
            oom(P);
            return false;
        }
        memcpy(n->v, v->v, v->n * sizeof *n->v);
    }
    n->n = v->n;
    free(v->v);
    memset(v, 0, sizeof *v);
    return true;
}

static struct jv lit_str(struct parser *P, const char *s, size_t n) {
    struct dj_jinja *t = P->t;
    if (t->n_lits == t->cap_lits) {
        size_t cap = t->cap_lits ? t->cap_lits * 2 : 32;
        struct jj_str **p = realloc(t->lits, cap * sizeof *p);
        if (!p) {
            oom(P);
            return jv_none();
        }
        t->lits = p, t->cap_lits = cap;
    }
    struct jj_str *str = jj_str_new(s, n, JJ_PROV_NONE);
    if (!str) {
        oom(P);
        return jv_none();
    }
    str->rc = JJ_IMMORTAL;
    t->lits[t->n_lits++] = str;
    return jv_str(str);
}

/* ---- scopes (free-variable tracking) ---- */

static void declare(struct parser *P, const char *name) {
    if (!name) return;
    if (P->n_decl == P->cap_decl) {
        size_t cap = P->cap_decl ? P->cap_decl * 2 : 32;
        struct scope_name *p = realloc(P->decl, cap * sizeof *p);
        if (!p) {
            oom(P);
            return;
        }
        P->decl = p, P->cap_decl = cap;
    }
    P->decl[P->n_decl].name = name;
    P->decl[P->n_decl].scope = P->level;
    P->n_decl++;
}

static void declare_target(struct parser *P, const struct jj_node *t) {
    if (t->kind == JN_NAME) declare(P, t->name);
    else if (t->kind == JN_TUPLE)
        for (size_t i = 0; i < t->n; i++) declare_target(P, t->v[i]);
}

static void push_scope(struct parser *P) { P->level++; }
static void pop_scope(struct parser *P) {
    while (P->n_decl && P->decl[P->n_decl - 1].scope == P->level) P->n_decl--;
    P->level--;
}

static void note_load(struct parser *P, const char *name) {
    for (size_t i = 0; i < P->n_decl; i++)
        if (!strcmp(P->decl[i].name, name)) return;
    struct dj_jinja *t = P->t;
    for (size_t i = 0; i < t->n_free_vars; i++)
        if (!strcmp(t->free_vars[i], name)) return;
    char **p = realloc(t->free_vars, (t->n_free_vars + 1) * sizeof *p);
    if (!p) {
        oom(P);
        return;
    }
    t->free_vars = p;
    t->free_vars[t->n_free_vars++] = (char *)name; /* arena-owned */
}

/* ---- expressions ---- */

static struct jj_node *parse_expression(struct parser *P, bool with_condexpr);
static struct jj_node *parse_tuple(struct parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                                   bool explicit_parens);
static struct jj_node *parse_unary(struct parser *P, bool with_filter);
static struct jj_node *parse_primary(struct parser *P);
static struct jj_node *parse_postfix(struct parser *P, struct jj_node *n);
static struct jj_node *parse_filter(struct parser *P, struct jj_node *n, bool start_inline);
static struct jj_node *parse_or(struct parser *P);

static bool enter(struct parser *P) {
    if (++P->depth > JJ_MAX_PARSE_DEPTH) {
        pfail(P, cur(P), "expression nested too deeply (more than %d levels)", JJ_MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}
static void leave(struct parser *P) { P->depth--; }

/* Chains of postfix operators and binary operators are built in loops; this
 * bounds the tree they make, which the evaluator walks recursively. */
static bool chain_ok(struct parser *P, size_t *len) {
    if (++*len > JJ_MAX_PARSE_DEPTH) {
        pfail(P, cur(P), "expression chain too long (more than %d operations)", JJ_MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}

static struct jj_node *parse_condexpr(struct parser *P) {
    if (!enter(P)) return NULL;
    const struct jj_token *at = cur(P);
    struct jj_node *expr1 = parse_or(P);
    size_t chain = 0;
    while (expr1 && is_name(P, "if")) {
        if (!chain_ok(P, &chain)) return NULL;
        adv(P);
        struct jj_node *c = node(P, JN_COND, at);
        if (!c) return NULL;
        c->a = expr1;
        c->b = parse_or(P);
        if (!c->b) return NULL;
        if (is_name(P, "else")) {
            adv(P);
            c->c = parse_condexpr(P);
            if (!c->c) return NULL;
        }
        expr1 = c;
        at = cur(P);
    }
    leave(P);
    return expr1;
}

static struct jj_node *parse_expression(struct parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static struct jj_node *parse_not(struct parser *P);

static struct jj_node *parse_and(struct parser *P) {
    struct jj_node *left = parse_not(P);
    size_t chain = 0;
    while (left && is_name(P, "and")) {
        if (!chain_ok(P, &chain)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        struct jj_node *n = node(P, JN_AND, at);
        if (!n) return NULL;
        n->a = left;
        n->b = parse_not(P);
        if (!n->b) return NULL;
        left = n;
    }
    return left;
}

static struct jj_node *parse_or(struct parser *P) {
    struct jj_node *left = parse_and(P);
    size_t chain = 0;
    while (left && is_name(P, "or")) {
        if (!chain_ok(P, &chain)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        struct jj_node *n = node(P, JN_OR, at);
        if (!n) return NULL;
        n->a = left;
        n->b = parse_and(P);
        if (!n->b) return NULL;
        left = n;
    }
    return left;
}

static struct jj_node *parse_math1(struct parser *P);

static struct jj_node *parse_compare(struct parser *P) {
    const struct jj_token *at = cur(P);
    struct jj_node *expr = parse_math1(P);
    if (!expr) return NULL;
    uint8_t ops[JJ_MAX_PARSE_DEPTH];
    struct nvec operands = {0};
    for (;;) {
        int op = -1;
        const struct jj_token *t = cur(P);
        if (t->type == JT_OP) {
            if (tok_is(t, JT_OP, "==")) op = JC_EQ;
            else if (tok_is(t, JT_OP, "!=")) op = JC_NE;
            else if (tok_is(t, JT_OP, "<")) op = JC_LT;
            else if (tok_is(t, JT_OP, "<=")) op = JC_LE;
            else if (tok_is(t, JT_OP, ">")) op = JC_GT;
            else if (tok_is(t, JT_OP, ">=")) op = JC_GE;
            if (op >= 0) adv(P);
        } else if (is_name(P, "in")) {
            op = JC_IN;
            adv(P);
        } else if (is_name(P, "not") && tok_is(look(P), JT_NAME, "in")) {
            op = JC_NOTIN;
            adv(P);
            adv(P);
        }
        if (op < 0) break;
        if (operands.n >= JJ_MAX_PARSE_DEPTH) {
            free(operands.v);
            pfail(P, t, "comparison chain too long");
            return NULL;
        }
        ops[operands.n] = (uint8_t)op;
        if (!nvec_push(P, &operands, parse_math1(P))) {
            free(operands.v);
            return NULL;
        }
    }
    if (!operands.n) return expr;
    struct jj_node *n = node(P, JN_COMPARE, at);
    if (!n) {
        free(operands.v);
        return NULL;
    }
    n->a = expr;
    n->ops = jj_arena_alloc(&P->t->arena, operands.n);
    if (!n->ops) {
        free(operands.v);
        oom(P);
        return NULL;
    }
    memcpy(n->ops, ops, operands.n);
    if (!nvec_finish(P, &operands, n)) return NULL;
    return n;
}

static struct jj_node *parse_not(struct parser *P) {
    if (is_name(P, "not")) {
        if (!enter(P)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        struct jj_node *n = node(P, JN_NOT, at);
        if (!n) return NULL;
        n->a = parse_not(P);
        leave(P);
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static struct jj_node *binop(struct parser *P, const struct jj_token *at, uint8_t op, struct jj_node *l, struct jj_node *r) {
    if (!l || !r) return NULL;
    struct jj_node *n = node(P, JN_BINOP, at);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static struct jj_node *parse_pow(struct parser *P) {
    struct jj_node *left = parse_unary(P, true);
    size_t chain = 0;
    while (left && is_op(P, "**")) {
        if (!chain_ok(P, &chain)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        left = binop(P, at, JB_POW, left, parse_unary(P, true));
    }
    return left;
}

static struct jj_node *parse_math2(struct parser *P) {
    struct jj_node *left = parse_pow(P);
    size_t chain = 0;
    for (;;) {
        if (!left) return NULL;
        uint8_t op;
        if (is_op(P, "*")) op = JB_MUL;
        else if (is_op(P, "/")) op = JB_DIV;
        else if (is_op(P, "//")) op = JB_FLOORDIV;
        else if (is_op(P, "%")) op = JB_MOD;
        else break;
        if (!chain_ok(P, &chain)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        left = binop(P, at, op, left, parse_pow(P));
    }
    return left;
}

static struct jj_node *parse_concat(struct parser *P) {
    const struct jj_token *at = cur(P);
    struct jj_node *first = parse_math2(P);
    if (!first || !is_op(P, "~")) return first;
    struct nvec args = {0};
    nvec_push(P, &args, first);
    while (is_op(P, "~")) {
        if (args.n > JJ_MAX_PARSE_DEPTH * 16) {
            free(args.v);
            pfail(P, cur(P), "concatenation too long");
            return NULL;
        }
        adv(P);
        if (!nvec_push(P, &args, parse_math2(P))) {
            free(args.v);
            return NULL;
        }
    }
    struct jj_node *n = node(P, JN_CONCAT, at);
    if (!n) {
        free(args.v);
        return NULL;
    }
    return nvec_finish(P, &args, n) ? n : NULL;
}

static struct jj_node *parse_math1(struct parser *P) {
    struct jj_node *left = parse_concat(P);
    size_t chain = 0;
    for (;;) {
        if (!left) return NULL;
        uint8_t op;
        if (is_op(P, "+")) op = JB_ADD;
        else if (is_op(P, "-")) op = JB_SUB;
        else break;
        if (!chain_ok(P, &chain)) return NULL;
        const struct jj_token *at = cur(P);
        adv(P);
        left = binop(P, at, op, left, parse_concat(P));
    }
    return left;
}

/* Call arguments "(...)" into n->v (positional, JN_KWARG, JN_STARARG, JN_DSTARARG). */
static bool parse_call_args(struct parser *P, struct jj_node *n) {
    const struct jj_token *open = cur(P);
    if (expect_op(P, "(")) return false;
    struct nvec args = {0};
    bool require_comma = false, seen_kw = false, seen_star = false, seen_dstar = false;
    while (!is_op(P, ")")) {
        if (require_comma) {
            if (expect_op(P, ",")) goto fail;
            if (is_op(P, ")")) break;
        }
        const struct jj_token *at = cur(P);
        struct jj_node *a;
        if (is_op(P, "*") || is_op(P, "**")) {
            bool dstar = is_op(P, "**");
            if (seen_dstar || (!dstar && seen_star)) {
                pfail(P, open, "invalid syntax for function call expression");
                goto fail;
            }
            adv(P);
            a = node(P, dstar ? JN_DSTARARG : JN_STARARG, at);
            if (!a || !(a->a = parse_expression(P, true))) goto fail;
            if (dstar) seen_dstar = true;
            else seen_star = true;
        } else if (cur(P)->type == JT_NAME && tok_is(look(P), JT_OP, "=")) {
            if (seen_dstar) {
                pfail(P, open, "invalid syntax for function call expression");
                goto fail;
            }
            a = node(P, JN_KWARG, at);
            if (!a || !(a->name = dup_name(P, at->text, at->len))) goto fail;
            adv(P);
            adv(P);
            if (!(a->a = parse_expression(P, true))) goto fail;
            seen_kw = true;
        } else {
            if (seen_kw || seen_star || seen_dstar) {
                pfail(P, open, "invalid syntax for function call expression");
                goto fail;
            }
            a = parse_expression(P, true);
        }
        if (!nvec_push(P, &args, a)) goto fail;
        require_comma = true;
    }
    if (expect_op(P, ")")) goto fail;
    return nvec_finish(P, &args, n);
fail:
    free(args.v);
    return false;
}

static struct jj_node *parse_call(struct parser *P, struct jj_node *callee) {
    struct jj_node *n = node(P, JN_CALL, cur(P));
    if (!n) return NULL;
    n->a = callee;
    return parse_call_args(P, n) ? n : NULL;
}

/* A filter or test name (dotted names allowed, as jinja2 does). */
static const char *parse_dotted_name(struct parser *P) {
    const struct jj_token *t = cur(P);
    if (t->type != JT_NAME) {
        char b[64];
        pfail(P, t, "expected name, got '%s'", describe(t, b, sizeof b));
        return NULL;
    }
    size_t start = t->off, end = t->off + t->len;
    adv(P);
    while (is_op(P, ".") && look(P)->type == JT_NAME) {
        adv(P);
        end = cur(P)->off + cur(P)->len;
        adv(P);
    }
    return dup_name(P, P->src + start, end - start);
}

static struct jj_node *parse_filter(struct parser *P, struct jj_node *n, bool start_inline) {
    size_t chain = 0;
    while (is_op(P, "|") || start_inline) {
        if (!chain_ok(P, &chain)) return NULL;
        if (!start_inline) adv(P);
        start_inline = false;
        const struct jj_token *at = cur(P);
        struct jj_node *f = node(P, JN_FILTER, at);
        if (!f || !(f->name = parse_dotted_name(P))) return NULL;
        f->a = n;
        f->id = jj_filter_id(f->name);
        if (f->id < 0) {
            if (!P->soft) {
                pfail(P, at, "no filter named '%s'", f->name);
                return NULL;
            }
        }
        if (is_op(P, "(") && !parse_call_args(P, f)) return NULL;
        n = f;
    }
    return n;
}

static struct jj_node *parse_test(struct parser *P, struct jj_node *n) {
    const struct jj_token *at = cur(P);
    adv(P); /* is */
    bool negated = false;
    if (is_name(P, "not")) {
        negated = true;
        adv(P);
    }
    struct jj_node *t = node(P, JN_TEST, at);
    if (!t || !(t->name = parse_dotted_name(P))) return NULL;
    t->a = n;
    t->id = jj_test_id(t->name);
    if (t->id < 0 && !P->soft) {
        pfail(P, at, "no test named '%s'", t->name);
        return NULL;
    }
    const struct jj_token *c = cur(P);
    if (is_op(P, "(")) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT ||
                tok_is(c, JT_OP, "(") || tok_is(c, JT_OP, "[") || tok_is(c, JT_OP, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) {
            pfail(P, c, "You cannot chain multiple tests with is");
            return NULL;
        }
        if (!enter(P)) return NULL;
        struct jj_node *arg = parse_primary(P);
        arg = arg ? parse_postfix(P, arg) : NULL;
        leave(P);
        if (!arg) return NULL;
        t->v = jj_arena_alloc(&P->t->arena, sizeof *t->v);
        if (!t->v) {
            oom(P);
            return NULL;
        }
        t->v[0] = arg;
        t->n = 1;
    }
    if (!negated) return t;
    struct jj_node *nn = node(P, JN_NOT, at);
    if (!nn) return NULL;
    nn->a = t;
    return nn;
}

static struct jj_node *parse_subscribed(struct parser *P) {
    const struct jj_token *at = cur(P);
    struct jj_node *args[3] = {NULL, NULL, NULL};
    if (is_op(P, ":")) {
        adv(P);
    } else {
        struct jj_node *e = parse_expression(P, true);
        if (!e || !is_op(P, ":")) return e;
        adv(P);
        args[0] = e;
    }
    if (!is_op(P, ":") && !is_op(P, "]") && !is_op(P, ",")) {
        if (!(args[1] = parse_expression(P, true))) return NULL;
    }
    if (is_op(P, ":")) {
        adv(P);
        if (!is_op(P, "]") && !is_op(P, ",")) {
            if (!(args[2] = parse_expression(P, true))) return NULL;
        }
    }
    struct jj_node *s = node(P, JN_SLICE, at);
    if (!s) return NULL;
    s->b = args[0], s->c = args[1], s->d = args[2];
    return s;
}

static struct jj_node *parse_subscript(struct parser *P, struct jj_node *n) {
    const struct jj_token *at = cur(P);
    if (is_op(P, ".")) {
        adv(P);
        const struct jj_token *t = cur(P);
        if (t->type == JT_NAME) {
            adv(P);
            struct jj_node *a = node(P, JN_ATTR, at);
            if (!a || !(a->name = dup_name(P, t->text, t->len))) return NULL;
            a->a = n;
            return a;
        }
        if (t->type != JT_INT) {
            pfail(P, t, "expected name or number");
            return NULL;
        }
        adv(P);
        struct jj_node *k = node(P, JN_CONST, t), *g = node(P, JN_ITEM, at);
        if (!k || !g) return NULL;
        k->lit = jv_int(t->ival);
        g->a = n, g->b = k;
        return g;
    }
    /* "[" */
    adv(P);
    struct nvec args = {0};
    while (!is_op(P, "]")) {
        if (args.n && expect_op(P, ",")) {
            free(args.v);
            return NULL;
        }
        if (!nvec_push(P, &args, parse_subscribed(P))) {
            free(args.v);
            return NULL;
        }
    }
    if (expect_op(P, "]")) {
        free(args.v);
        return NULL;
    }
    if (args.n == 0) {
        pfail(P, at, "expected subscript expression");
        return NULL;
    }
    struct jj_node *key;
    if (args.n == 1) {
        key = args.v[0];
        free(args.v);
    } else {
        key = node(P, JN_TUPLE, at);
        if (!key || !nvec_finish(P, &args, key)) {
            free(args.v);
            return NULL;
        }
    }
    if (key->kind == JN_SLICE) {
        key->a = n;
        return key;
    }
    struct jj_node *g = node(P, JN_ITEM, at);
    if (!g) return NULL;
    g->a = n, g->b = key;
    return g;
}

static struct jj_node *parse_postfix(struct parser *P, struct jj_node *n) {
    size_t chain = 0;
    while (n) {
        if (is_op(P, ".") || is_op(P, "[")) {
            if (!chain_ok(P, &chain)) return NULL;
            n = parse_subscript(P, n);
        } else if (is_op(P, "(")) {
            if (!chain_ok(P, &chain)) return NULL;
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static struct jj_node *parse_filter_expr(struct parser *P, struct jj_node *n) {
    size_t chain = 0;
    while (n) {
        if (is_op(P, "|")) {
            n = parse_filter(P, n, false);
        } else if (is_name(P, "is")) {
            if (!chain_ok(P, &chain)) return NULL;
            n = parse_test(P, n);
        } else if (is_op(P, "(")) {
            if (!chain_ok(P, &chain)) return NULL;
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static struct jj_node *parse_unary(struct parser *P, bool with_filter) {
    if (!enter(P)) return NULL;
    const struct jj_token *at = cur(P);
    struct jj_node *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        bool neg = is_op(P, "-");
        adv(P);
        n = node(P, neg ? JN_NEG : JN_POS, at);
        if (n && !(n->a = parse_unary(P, false))) n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    leave(P);
    return n;
}

static struct jj_node *parse_list_or_dict(struct parser *P, bool dict) {
    const struct jj_token *at = cur(P);
    adv(P);
    struct jj_node *n = node(P, dict ? JN_DICT : JN_LIST, at);
    if (!n) return NULL;
    struct nvec items = {0};
    const char *close = dict ? "}" : "]";
    while (!is_op(P, close)) {
        if (items.n && expect_op(P, ",")) goto fail;
        if (is_op(P, close)) break;
        if (!nvec_push(P, &items, parse_expression(P, true))) goto fail;
        if (dict) {
            if (expect_op(P, ":")) goto fail;
            if (!nvec_push(P, &items, parse_expression(P, true))) goto fail;
        }
    }
    if (expect_op(P, close)) goto fail;
    return nvec_finish(P, &items, n) ? n : NULL;
fail:
    free(items.v);
    return NULL;
}

static struct jj_node *parse_primary(struct parser *P) {
    const struct jj_token *t = cur(P);
    struct jj_node *n;
    switch (t->type) {
    case JT_NAME:
        adv(P);
        n = node(P, JN_CONST, t);
        if (!n) return NULL;
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->lit = jv_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->lit = jv_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->lit = jv_none();
        else {
            n->kind = JN_NAME;
            if (!(n->name = dup_name(P, t->text, t->len))) return NULL;
            if (P->macro && (!strcmp(n->name, "varargs") || !strcmp(n->name, "kwargs")))
                P->macro->flags |= n->name[0] == 'v' ? JJ_MACRO_VARARGS : JJ_MACRO_KWARGS;
            note_load(P, n->name);
        }
        return n;
    case JT_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, j = P->i;
        while (P->tk[j].type == JT_STRING) total += P->tk[j++].len;
        char *buf = jj_arena_alloc(&P->t->arena, total + 1);
        if (!buf) {
            oom(P);
            return NULL;
        }
        size_t k = 0;
        while (cur(P)->type == JT_STRING) {
            memcpy(buf + k, cur(P)->text, cur(P)->len);
            k += cur(P)->len;
            adv(P);
        }
        n = node(P, JN_CONST, t);
        if (!n) return NULL;
        n->lit = lit_str(P, buf, total);
        return P->failed ? NULL : n;
    }
    case JT_INT:
    case JT_FLOAT:
        adv(P);
        n = node(P, JN_CONST, t);
        if (!n) return NULL;
        n->lit = t->type == JT_INT ? jv_int(t->ival) : jv_float(t->fval);
        return n;
    case JT_OP:
        if (is_op(P, "(")) {
            adv(P);
            n = parse_tuple(P, false, true, NULL, true);
            if (!n || expect_op(P, ")")) return NULL;
            return n;
        }
        if (is_op(P, "[")) return parse_list_or_dict(P, false);
        if (is_op(P, "{")) return parse_list_or_dict(P, true);
        break;
    default: break;
    }
    char b[64];
    pfail(P, t, "unexpected '%s'", describe(t, b, sizeof b));
    return NULL;
}

static bool is_tuple_end(const struct parser *P, const char *extra_end) {
    const struct jj_token *t = cur(P);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || tok_is(t, JT_OP, ")")) return true;
    return extra_end && tok_is(t, JT_NAME, extra_end);
}

static struct jj_node *parse_tuple(struct parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                                   bool explicit_parens) {
    if (!enter(P)) return NULL;
    const struct jj_token *at = cur(P);
    struct nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && expect_op(P, ",")) goto fail;
        if (is_tuple_end(P, extra_end)) break;
        struct jj_node *e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!nvec_push(P, &args, e)) goto fail;
        if (is_op(P, ",")) is_tuple = true;
        else break;
    }
    leave(P);
    if (!is_tuple) {
        if (args.n) {
            struct jj_node *r = args.v[0];
            free(args.v);
            return r;
        }
        if (!explicit_parens) {
            char b[64];
            pfail(P, cur(P), "Expected an expression, got '%s'", describe(cur(P), b, sizeof b));
            return NULL;
        }
    }
    struct jj_node *n = node(P, JN_TUPLE, at);
    if (!n) goto fail;
    return nvec_finish(P, &args, n) ? n : NULL;
fail:
    free(args.v);
    return NULL;
}

/* ---- statements ---- */

static struct jj_node *subparse(struct parser *P, const char *const *end_tokens);

static bool at_end_token(const struct parser *P, const char *const *end) {
    for (; end && *end; end++)
        if (is_name(P, *end)) return true;
    return false;
}

/* After a statement's header: optional ":", "%}", the body up to an end token
 * (left current, or consumed with drop_needle). */
static struct jj_node *parse_statements(struct parser *P, const char *const *end, bool drop_needle) {
    if (is_op(P, ":")) adv(P);
    if (expect_type(P, JT_BLOCK_END, "end of statement block")) return NULL;
    struct jj_node *body = subparse(P, end);
    if (!body) return NULL;
    if (cur(P)->type == JT_EOF) {
        char want[128] = "";
        for (const char *const *e = end; *e; e++) {
            strncat(want, e == end ? "'" : " or '", sizeof want - strlen(want) - 1);
            strncat(want, *e, sizeof want - strlen(want) - 1);
            strncat(want, "'", sizeof want - strlen(want) - 1);
        }
        pfail(P, cur(P), "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
        return NULL;
    }
    if (drop_needle) adv(P);
    return body;
}

static struct jj_node *parse_assign_target(struct parser *P, bool with_namespace, bool name_only, const char *extra_end) {
    const struct jj_token *t = cur(P);
    if (with_namespace && t->type == JT_NAME && tok_is(look(P), JT_OP, ".")) {
        adv(P);
        adv(P);
        const struct jj_token *attr = cur(P);
        if (attr->type != JT_NAME) {
            pfail(P, attr, "expected name");
            return NULL;
        }
        adv(P);
        struct jj_node *n = node(P, JN_NSREF, t);
        if (!n || !(n->name = dup_name(P, t->text, t->len)) || !(n->name2 = dup_name(P, attr->text, attr->len)))
            return NULL;
        note_load(P, n->name);
        return n;
    }
    if (name_only) {
        if (t->type != JT_NAME) {
            pfail(P, t, "expected name");
            return NULL;
        }
        adv(P);
        struct jj_node *n = node(P, JN_NAME, t);
        if (!n || !(n->name = dup_name(P, t->text, t->len))) return NULL;
        return n;
    }
    /* a name or a tuple of names: parsed as primaries; loads were noted, undo by checking shape */
    size_t saved_free = P->t->n_free_vars;
    struct jj_node *target = parse_tuple(P, true, true, extra_end, false);
    P->t->n_free_vars = saved_free; /* a store is not a read */
    if (!target) return NULL;
    bool ok = target->kind == JN_NAME;
    if (target->kind == JN_TUPLE) {
        ok = true;
        for (size_t i = 0; i < target->n; i++)
            if (target->v[i]->kind != JN_NAME) ok = false;
    }
    if (!ok) {
        pfail(P, t, "can't assign to '%s'", target->kind == JN_CONST ? "const" : "expression");
        return NULL;
    }
    return target;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const END_WITH[] = {"endwith", NULL};

static struct jj_node *parse_for(struct parser *P) {
    const struct jj_token *at = cur(P);
    adv(P);
    struct jj_node *n = node(P, JN_FOR, at);
    if (!n) return NULL;
    if (!(n->a = parse_assign_target(P, false, false, "in"))) return NULL;
    if (!is_name(P, "in")) {
        char b[64];
        pfail(P, cur(P), "expected 'in', got '%s'", describe(cur(P), b, sizeof b));
        return NULL;
    }
    adv(P);
    if (!(n->b = parse_tuple(P, false, false, "recursive", false))) return NULL;
    int saved_soft = P->soft;
    P->soft = 0;
    push_scope(P);
    declare_target(P, n->a);
    declare(P, "loop");
    if (is_name(P, "if")) {
        adv(P);
        if (!(n->c = parse_expression(P, true))) return NULL;
    }
    if (is_name(P, "recursive")) {
        pfail(P, cur(P), "recursive for loops are not supported");
        return NULL;
    }
    P->loops++;
    n->d = parse_statements(P, END_FOR, false);
    P->loops--;
    pop_scope(P);
    if (!n->d) return NULL;
    if (is_name(P, "else")) {
        adv(P);
        push_scope(P);
        n->e = parse_statements(P, END_FOR2, true);
        pop_scope(P);
        if (!n->e) return NULL;
    } else {
        adv(P); /* endfor */
    }
    P->soft = saved_soft;
    return n;
}

static struct jj_node *parse_if(struct parser *P) {
    const struct jj_token *at = cur(P);
    adv(P);
    struct jj_node *result = node(P, JN_IF, at), *n = result;
    if (!n) return NULL;
    P->soft++;
    for (;;) {
        if (!(n->a = parse_tuple(P, false, false, NULL, false))) return NULL;
        if (!(n->b = parse_statements(P, END_IF, false))) return NULL;
        const struct jj_token *t = cur(P);
        adv(P);
        if (tok_is(t, JT_NAME, "elif")) {
            struct jj_node *e = node(P, JN_IF, t);
            if (!e) return NULL;
            n->c = e;
            n = e;
            continue;
        }
        if (tok_is(t, JT_NAME, "else")) {
            if (!(n->c = parse_statements(P, END_IF2, true))) return NULL;
        }
        break;
    }
    P->soft--;
    return result;
}

static struct jj_node *parse_set(struct parser *P) {
    const struct jj_token *at = cur(P);
    adv(P);
    struct jj_node *target = parse_assign_target(P, true, false, NULL);
    if (!target) return NULL;
    if (is_op(P, "=")) {
        adv(P);
        struct jj_node *n = node(P, JN_SET, at);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(P, false, true, NULL, false))) return NULL;
        declare_target(P, target);
        return n;
    }
    struct jj_node *n = node(P, JN_SETBLOCK, at);
    if (!n) return NULL;
    n->a = target;
    int saved_soft = P->soft;
    P->soft = 0;
    if (is_op(P, "|") && !(n->b = parse_filter(P, NULL, false))) return NULL;
    push_scope(P);
    n->c = parse_statements(P, END_SET, true);
    pop_scope(P);
    P->soft = saved_soft;
    if (!n->c) return NULL;
    declare_target(P, target);
    return n;
}

static struct jj_node *parse_macro(struct parser *P) {
    const struct jj_token *at = cur(P);
    adv(P);
    struct jj_node *n = node(P, JN_MACRO, at);
    if (!n) return NULL;
    struct jj_node *name = parse_assign_target(P, false, true, NULL);
    if (!name) return NULL;
    n->name = name->name;
    declare(P, n->name);
    if (expect_op(P, "(")) return NULL;
    struct jj_node *saved_macro = P->macro;
    int saved_soft = P->soft, saved_loops = P->loops;
    P->macro = n;
    P->soft = 0;
    P->loops = 0;
    push_scope(P);
    declare(P, "varargs");
    declare(P, "kwargs");
    declare(P, "caller");
    struct nvec params = {0};
    bool seen_default = false;
    while (!is_op(P, ")")) {
        if (params.n && expect_op(P, ",")) goto fail;
        const struct jj_token *t = cur(P);
        if (t->type != JT_NAME) {
            pfail(P, t, "expected name");
            goto fail;
        }
        adv(P);
        struct jj_node *p = node(P, JN_NAME, t);
        if (!p || !(p->name = dup_name(P, t->text, t->len))) goto fail;
        if (is_op(P, "=")) {
            adv(P);
            p->kind = JN_KWARG;
            if (!(p->a = parse_expression(P, true))) goto fail;
            seen_default = true;
        } else if (seen_default) {
            pfail(P, t, "non-default argument follows default argument");
            goto fail;
        }
        declare(P, p->name);
        if (!nvec_push(P, &params, p)) goto fail;
    }
    adv(P);
    if (!nvec_finish(P, &params, n)) goto fail;
    n->a = parse_statements(P, END_MACRO, true);
    pop_scope(P);
    P->macro = saved_macro;
    P->soft = saved_soft;
    P->loops = saved_loops;
    return n->a ? n : NULL;
fail:
    free(params.v);
    return NULL;
}

static struct jj_node *parse_statement(struct parser *P) {
    const struct jj_token *t = cur(P);
    if (t->type != JT_NAME) {
        pfail(P, t, "tag name expected");
        return NULL;
    }
    if (!enter(P)) return NULL;
    struct jj_node *n = NULL;
    if (is_name(P, "for")) n = parse_for(P);
    else if (is_name(P, "if")) n = parse_if(P);
    else if (is_name(P, "set")) n = parse_set(P);
    else if (is_name(P, "macro")) n = parse_macro(P);
    else if (is_name(P, "print")) {
        adv(P);
        n = node(P, JN_OUTPUT, t);
        if (n && !(n->a = parse_tuple(P, false, true, NULL, false))) n = NULL;
    } else if (is_name(P, "break") || is_name(P, "continue")) {
        if (!P->loops) {
            pfail(P, t, "'%s' outside loop", is_name(P, "break") ? "break" : "continue");
            return NULL;
        }
        n = node(P, is_name(P, "break") ? JN_BREAK : JN_CONTINUE, t);
        adv(P);
    } else if (is_name(P, "filter")) {
        adv(P);
        n = node(P, JN_FILTERBLOCK, t);
        int saved_soft = P->soft;
        P->soft = 0;
        if (n && !(n->b = parse_filter(P, NULL, true))) n = NULL;
        if (n) {
            push_scope(P);
            if (!(n->a = parse_statements(P, END_FILTER, true))) n = NULL;
            pop_scope(P);
        }
        P->soft = saved_soft;
    } else if (is_name(P, "generation")) {
        adv(P);
        n = node(P, JN_GENERATION, t);
        int saved_soft = P->soft, saved_loops = P->loops;
        P->soft = 0;
        P->loops = 0;
        if (n) {
            push_scope(P);
            if (!(n->a = parse_statements(P, END_GEN, true))) n = NULL;
            pop_scope(P);
        }
        P->soft = saved_soft;
        P->loops = saved_loops;
    } else if (is_name(P, "with")) {
        adv(P);
        n = node(P, JN_WITH, t);
        struct nvec items = {0};
        struct nvec targets = {0};
        while (n && cur(P)->type != JT_BLOCK_END) {
            if (items.n && expect_op(P, ",")) n = NULL;
            struct jj_node *target = n ? parse_assign_target(P, false, false, NULL) : NULL;
            if (!target || expect_op(P, "=")) {
                n = NULL;
                break;
            }
            if (!nvec_push(P, &items, target) || !nvec_push(P, &items, parse_expression(P, true))) n = NULL;
            if (n) nvec_push(P, &targets, target);
        }
        if (n && !nvec_finish(P, &items, n)) n = NULL;
        free(items.v);
        int saved_soft = P->soft;
        P->soft = 0;
        push_scope(P);
        for (size_t i = 0; i < targets.n; i++) declare_target(P, targets.v[i]);
        free(targets.v);
        if (n && !(n->a = parse_statements(P, END_WITH, true))) n = NULL;
        pop_scope(P);
        P->soft = saved_soft;
    } else {
        static const char *const unsupported[] = {"call", "block", "extends", "include", "import", "from", "autoescape", "raw", NULL};
        for (const char *const *u = unsupported; *u; u++)
            if (is_name(P, *u)) {
                pfail(P, t, "the '%s' tag is not supported", *u);
                return NULL;
            }
        char b[64];
        pfail(P, t, "Encountered unknown tag '%s'.", describe(t, b, sizeof b));
        return NULL;
    }
    leave(P);
    return n;
}

static struct jj_node *subparse(struct parser *P, const char *const *end_tokens) {
    struct jj_node *body = node(P, JN_BODY, cur(P));
    if (!body) return NULL;
    struct nvec items = {0};
    for (;;) {
        const struct jj_token *t = cur(P);
        if (t->type == JT_EOF) break;
        if (t->type == JT_DATA || t->type == JT_RAW) {
            struct jj_node *d = node(P, JN_DATA, t);
            if (!d) goto fail;
            d->lit = lit_str(P, t->text, t->len);
            if (P->failed || !nvec_push(P, &items, d)) goto fail;
            adv(P);
        } else if (t->type == JT_VAR_BEGIN) {
            adv(P);
            struct jj_node *o = node(P, JN_OUTPUT, t);
            if (!o || !(o->a = parse_tuple(P, false, true, NULL, false))) goto fail;
            if (expect_type(P, JT_VAR_END, "end of print statement")) goto fail;
            if (!nvec_push(P, &items, o)) goto fail;
        } else if (t->type == JT_BLOCK_BEGIN) {
            adv(P);
            if (end_tokens && at_end_token(P, end_tokens)) break;
            struct jj_node *s = parse_statement(P);
            if (!s) goto fail;
            if (!nvec_push(P, &items, s)) goto fail;
            if (expect_type(P, JT_BLOCK_END, "end of statement block")) goto fail;
        } else {
            pfail(P, t, "internal parser error");
            goto fail;
        }
    }
    if (!end_tokens && cur(P)->type != JT_EOF) {
        pfail(P, cur(P), "unexpected token");
        goto fail;
    }
    return nvec_finish(P, &items, body) ? body : NULL;
fail:
    free(items.v);
    return NULL;
}

enum dj_status jj_parse(struct dj_jinja *t, const struct jj_token *toks, size_t n, const char *norm, size_t norm_n) {
    struct parser P = {.t = t, .tk = toks, .n = n, .src = norm, .src_n = norm_n};
    struct jj_node *root = subparse(&P, NULL);
    if (root && cur(&P)->type != JT_EOF) {
        /* an end tag with no block: jinja2's wording */
        char b[64];
        pfail(&P, cur(&P), "Encountered unknown tag '%s'.", describe(cur(&P), b, sizeof b));
        root = NULL;
    }
    free(P.decl);
    if (!root) {
        if (!P.failed) return dj_fail(DJ_ERR_INVALID, "template: syntax error");
        return DJ_ERR_INVALID;
    }
    t->root = root;
    return DJ_OK;
}
