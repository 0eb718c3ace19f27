/*
 * jinja_internal.h — the private types of the chat-template interpreter
 * (jinja.h): values, the syntax tree, the render state, and the functions
 * the jinja_*.c files share.
 *
 *   jinja_lex.c      source → tokens (trim_blocks, lstrip_blocks, "-" control)
 *   jinja_parse.c    tokens → syntax tree (jinja2's grammar and precedence)
 *   jinja_value.c    values: refcounted strings (with provenance), lists,
 *                    dicts; equality, ordering, truthiness; JSON → values
 *   jinja_str.c      Python's str semantics: UTF-8, whitespace, str()/repr(),
 *                    float repr, json.dumps (transformers' tojson)
 *   jinja_eval.c     the tree walker: statements, expressions, scopes, the
 *                    public jinja_compile / jinja_render
 *   jinja_filters.c  filters and tests
 *   jinja_methods.c  Python str/dict/list methods and the globals
 *
 * Values.  struct jv is a small tagged union passed by value.  Strings,
 * lists, dicts, bound methods and loop objects are heap objects with a
 * reference count; a reference count of JJ_IMMORTAL marks an object owned by
 * the compiled template (literals), never counted or freed, so that one
 * compiled template can be rendered by several threads at once.  Every other
 * value lives inside one render.  Lists and dicts are immutable once built
 * (the sandbox forbids mutation), so sharing them is safe; the only mutable
 * objects are namespaces, which the render owns (no count: they can form
 * cycles through their attributes) and frees at its end.
 *
 * Provenance.  A string knows which of its bytes came from the render
 * context (message text, tool JSON) rather than from template literals:
 * prov is JJ_PROV_NONE, JJ_PROV_ALL, or JJ_PROV_MIXED with a bitmap.
 *
 *     struct jj_str:  rc | n | ncp | prov | markup | bits* | s[n] '\0'
 *                                                   └─ (n+7)/8 bytes, MIXED only
 */
#ifndef DJ_CHAT_JINJA_INTERNAL_H
#define DJ_CHAT_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"

/* ---- limits: hostile templates end with an error, never a crash ---- */
#define JJ_MAX_PARSE_DEPTH 256           /* nested expressions / blocks in the source */
#define JJ_MAX_EVAL_DEPTH 600            /* nested evaluation incl. macro calls */
#define JJ_MAX_MACRO_DEPTH 200           /* nested macro calls (Python's recursion limit is near) */
#define JJ_MAX_OUTPUT ((size_t)64 << 20) /* bytes of output, and of any one string */
#define JJ_MAX_ITEMS ((size_t)16 << 20)  /* elements of one list or dict */
#define JJ_MAX_VALUE_DEPTH 400           /* nesting of lists/dicts */
#define JJ_MAX_STEPS ((uint64_t)50000000) /* evaluation steps, + 1 per loop iteration, per element
                                            iterated / compared / split off, per 16 bytes a string
                                            method or filter scans, per 64 bytes built */
#define JJ_MAX_NAMESPACES ((size_t)1 << 20)
#define JJ_MAX_RANGE 100000 /* jinja2's sandbox MAX_RANGE */
#define JJ_IMMORTAL UINT32_MAX

enum jj_type {
    JJ_UNDEF,  /* jinja2's Undefined (sub: enum jj_undef_kind) */
    JJ_NONE,
    JJ_BOOL,
    JJ_INT,
    JJ_FLOAT,
    JJ_STR,
    JJ_LIST,   /* list, tuple, iterator or dict view (jj_list.sub) */
    JJ_DICT,
    JJ_NS,     /* namespace() */
    JJ_MACRO,
    JJ_FUNC,   /* a global function (namespace, range, ...) */
    JJ_METHOD, /* a bound method: str.strip, dict.items, loop.cycle, ... */
    JJ_LOOP,
};

enum jj_undef_kind {
    JJ_UNDEF_PLAIN,    /* using it raises UndefinedError */
    JJ_UNDEF_UNSAFE,   /* a mutating method: using it raises SecurityError */
};

enum jj_prov { JJ_PROV_NONE = 0, JJ_PROV_ALL, JJ_PROV_MIXED };

struct jj_str {
    uint32_t rc;
    uint8_t prov;   /* enum jj_prov */
    bool markup;    /* a MarkupSafe Markup (from |safe) */
    size_t n;       /* bytes */
    size_t ncp;     /* code points */
    uint8_t *bits;  /* JJ_PROV_MIXED: bit i set = byte i from input */
    char s[];       /* n bytes + NUL */
};

enum jj_list_sub {
    JJ_LIST_LIST,
    JJ_LIST_TUPLE,
    JJ_LIST_ITER,   /* a generator/iterator (|map, |select, ...): no len, no tojson */
    JJ_LIST_ITEMS,  /* dict_items view */
    JJ_LIST_KEYS,
    JJ_LIST_VALUES,
};

struct jv;
struct jj_list;
struct jj_dict;
struct jj_ns;
struct jj_method;
struct jj_loop;
struct jj_node;

struct jv {
    uint8_t t;   /* enum jj_type */
    uint8_t sub; /* JJ_UNDEF: enum jj_undef_kind; JJ_FUNC: global id */
    uint8_t owner; /* JJ_UNDEF: enum jj_type of the object a lookup failed on (JJ_UNDEF: a plain name) */
    union {
        bool b;
        int64_t i;
        double f;
        struct jj_str *s;
        struct jj_list *l;
        struct jj_dict *d;
        struct jj_ns *ns;
        const struct jj_node *macro;
        struct jj_method *m;
        struct jj_loop *loop;
        const char *name; /* JJ_UNDEF: the missing name (static or template-owned), or NULL */
    } u;
};

struct jj_list {
    uint32_t rc;
    uint8_t sub;    /* enum jj_list_sub */
    uint16_t depth; /* nesting: 1 + deepest element */
    size_t n, cap;
    struct jv *v;
};

struct jj_dict {
    uint32_t rc;
    uint16_t depth;
    size_t n, cap;
    struct jv *k, *v;   /* insertion order */
    uint32_t *index;    /* open addressing over k (slot = entry + 1), when n > 8 */
    size_t index_cap;
};

struct jj_ns {
    struct jj_dict *attrs;
    bool visiting; /* repr in progress (cycles print as {...}) */
};

struct jj_method {
    uint32_t rc;
    uint16_t id;    /* enum jj_method_id */
    struct jv self;
};

struct jj_loop {
    uint32_t rc;
    size_t index0, length;
    struct jj_list *items; /* what the loop iterates (after its if filter) */
};

/* ---- the syntax tree ---- */
enum jj_node_kind {
    /* expressions */
    JN_CONST,   /* lit */
    JN_NAME,    /* name */
    JN_LIST,    /* v[n] */
    JN_TUPLE,   /* v[n] */
    JN_DICT,    /* v[2i] key, v[2i+1] value */
    JN_ATTR,    /* a.name */
    JN_ITEM,    /* a[b] */
    JN_SLICE,   /* a[b:c:d], each of b c d may be NULL */
    JN_CALL,    /* a(v[n]); an argument is JN_KWARG / JN_STARARG / JN_DSTARARG or an expression */
    JN_KWARG,   /* name=a */
    JN_STARARG, /* *a */
    JN_DSTARARG,/* **a */
    JN_FILTER,  /* a|name(v[n]), id = filter id or -1; a NULL in a filter block */
    JN_TEST,    /* a is name(v[n]), id = test id or -1 */
    JN_NOT,     /* not a */
    JN_NEG,     /* -a */
    JN_POS,     /* +a */
    JN_BINOP,   /* a op b */
    JN_CONCAT,  /* v[0] ~ v[1] ~ ... */
    JN_AND,
    JN_OR,
    JN_COMPARE, /* a ops[0] v[0] ops[1] v[1] ... */
    JN_COND,    /* a if b else c (c may be NULL) */
    JN_NSREF,   /* name.attr as an assignment target (attr in name2) */
    /* statements */
    JN_BODY,    /* v[n] */
    JN_DATA,    /* lit (a string) */
    JN_OUTPUT,  /* {{ a }} */
    JN_IF,      /* if a: b (body) else c (body or another JN_IF) */
    JN_FOR,     /* for a (target) in b (iter) [if c] : d (body) else e (body) */
    JN_SET,     /* set a (target) = b */
    JN_SETBLOCK,/* set a (target) | b (filters) : c (body) */
    JN_MACRO,   /* macro name(v[n] params: JN_NAME or JN_KWARG with default) : a (body) */
    JN_FILTERBLOCK, /* filter b (filters) : a (body) */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION,  /* a (body) in its own scope */
    JN_WITH,        /* v[2i] target, v[2i+1] value; a (body) */
    JN_CALLBLOCK_UNSUPPORTED,
};

enum jj_binop { JB_ADD, JB_SUB, JB_MUL, JB_DIV, JB_FLOORDIV, JB_MOD, JB_POW };
enum jj_cmpop { JC_EQ, JC_NE, JC_LT, JC_LE, JC_GT, JC_GE, JC_IN, JC_NOTIN };

struct jj_node {
    uint8_t kind;
    uint8_t op;       /* enum jj_binop for JN_BINOP */
    uint8_t flags;    /* JN_MACRO: JJ_MACRO_* ; JN_FILTER/JN_TEST: JJ_SOFT_UNKNOWN */
    int32_t id;       /* filter / test id */
    uint32_t line;
    struct jj_node *a, *b, *c, *d, *e;
    struct jj_node **v;
    size_t n;
    uint8_t *ops;     /* JN_COMPARE: n operators */
    const char *name; /* NUL-terminated, owned by the template's arena */
    const char *name2;
    struct jv lit;    /* JN_CONST / JN_DATA: immortal */
};

#define JJ_MACRO_VARARGS 1
#define JJ_MACRO_KWARGS 2

/* ---- the arena of a compiled template ---- */
struct jj_arena {
    struct jj_arena_chunk *head;
};
void *jj_arena_alloc(struct jj_arena *a, size_t n); /* zeroed; NULL on failure */
void jj_arena_free(struct jj_arena *a);

struct dj_jinja {
    struct jj_arena arena;
    struct jj_node *root; /* JN_BODY */
    struct jj_str **lits; /* immortal strings to free with the template */
    size_t n_lits, cap_lits;
    char **free_vars;     /* names read before any assignment (jinja_reads_var) */
    size_t n_free_vars;
};

/* ---- the lexer ---- */
enum jj_tok {
    JT_EOF,
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_RAW,    /* the text of a {% raw %} block */
    JT_NAME,
    JT_STRING, /* text already unescaped */
    JT_INT,
    JT_FLOAT,
    JT_OP,     /* op: the operator's characters in text */
};

struct jj_token {
    uint8_t type;
    uint32_t line;
    const char *text; /* into the normalized source (JT_STRING: unescaped, arena-owned) */
    size_t len;
    size_t off;       /* byte offset in the normalized source */
    int64_t ival;
    double fval;
};

/* Tokenizes src into tokens (arena-owned).  Syntax errors: DJ_ERR_INVALID with
 * "template: line L: ...". */
enum dj_status jj_lex(struct jj_arena *a, const char *src, size_t n, struct jj_token **out, size_t *n_out, const char **norm,
                      size_t *norm_n);
/* Builds t->root from the tokens; norm is the normalized source (for columns in messages). */
enum dj_status jj_parse(struct dj_jinja *t, const struct jj_token *toks, size_t n, const char *norm, size_t norm_n);

/* ---- strings ---- */
struct jj_str *jj_str_new(const char *s, size_t n, uint8_t prov); /* NULL on allocation failure */
/* A string with the provenance of bits (per byte; NULL = none). */
struct jj_str *jj_str_new_bits(const char *s, size_t n, const uint8_t *bits);
bool jj_str_byte_input(const struct jj_str *s, size_t i);
bool jj_str_any_input(const struct jj_str *s);

/* A growable byte buffer with a lazily allocated provenance bitmap. */
struct jj_buf {
    char *p;
    size_t n, cap;
    uint8_t *bits; /* NULL until an input byte is written */
    bool oom;      /* an allocation failed or the cap was passed */
    size_t max;    /* the cap in bytes; 0: JJ_MAX_OUTPUT */
};
void jj_buf_put(struct jj_buf *b, const char *s, size_t n, bool input);
void jj_buf_putc(struct jj_buf *b, char c);
void jj_buf_puts(struct jj_buf *b, const char *s);
void jj_buf_printf(struct jj_buf *b, const char *fmt, ...) DJ_PRINTF(2, 3);
void jj_buf_put_str(struct jj_buf *b, const struct jj_str *s); /* keeps per-byte provenance */
void jj_buf_put_range(struct jj_buf *b, const struct jj_str *s, size_t off, size_t n);
void jj_buf_mark_all(struct jj_buf *b, size_t from); /* bytes from..n become input */
bool jj_buf_any_input(const struct jj_buf *b, size_t from);
struct jj_str *jj_buf_take(struct jj_buf *b); /* the buffer as a string; frees the buffer; NULL on failure */
void jj_buf_free(struct jj_buf *b);

/* ---- values ---- */
static inline struct jv jv_undef(void) { struct jv v = {JJ_UNDEF, 0, JJ_UNDEF, {0}}; return v; }
static inline struct jv jv_undef_named(const char *name, uint8_t owner) {
    struct jv v = {JJ_UNDEF, JJ_UNDEF_PLAIN, owner, {0}};
    v.u.name = name;
    return v;
}
static inline struct jv jv_none(void) { struct jv v = {JJ_NONE, 0, 0, {0}}; return v; }
static inline struct jv jv_bool(bool b) { struct jv v = {JJ_BOOL, 0, 0, {0}}; v.u.b = b; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {JJ_INT, 0, 0, {0}}; v.u.i = i; return v; }
static inline struct jv jv_float(double f) { struct jv v = {JJ_FLOAT, 0, 0, {0}}; v.u.f = f; return v; }
static inline struct jv jv_str(struct jj_str *s) { struct jv v = {JJ_STR, 0, 0, {0}}; v.u.s = s; return v; }
static inline struct jv jv_list(struct jj_list *l) { struct jv v = {JJ_LIST, 0, 0, {0}}; v.u.l = l; return v; }
static inline struct jv jv_dict(struct jj_dict *d) { struct jv v = {JJ_DICT, 0, 0, {0}}; v.u.d = d; return v; }

struct jv jv_incref(struct jv v); /* returns v */
void jv_decref(struct jv v);
void jj_str_decref(struct jj_str *s);

struct jj_list *jj_list_new(uint8_t sub, size_t cap);   /* NULL on failure */
bool jj_list_push(struct jj_list *l, struct jv v);       /* takes v; false (v released) on failure */
struct jj_dict *jj_dict_new(size_t cap);
bool jj_dict_set(struct jj_dict *d, struct jv k, struct jv v); /* takes k and v; replaces */
/* Borrowed value for key k, or NULL. */
struct jv *jj_dict_get(const struct jj_dict *d, struct jv k);
struct jv *jj_dict_get_cstr(const struct jj_dict *d, const char *k);

bool jv_truthy(struct jv v);
bool jv_equal(struct jv a, struct jv b);
/* Python ordering: -1/0/1 in *out; false when the types do not compare. */
bool jv_compare(struct jv a, struct jv b, int *out);
bool jv_hashable(struct jv v);
const char *jv_type_name(struct jv v); /* Python's type name: 'str', 'NoneType', ... */
const char *jj_type_name(uint8_t t);
size_t jv_depth(struct jv v);

/* The context: a JSON value as a template value (strings marked input). */
enum dj_status jv_from_json(const json_t *j, struct jv *out, size_t depth);

/* ---- Python str semantics (jinja_str.c) ---- */
uint32_t jj_utf8_decode(const char *s, size_t n, size_t *len); /* one code point; bad bytes decode as themselves */
size_t jj_utf8_encode(uint32_t cp, char *out);                /* 1..4 bytes */
size_t jj_utf8_count(const char *s, size_t n);
size_t jj_utf8_offset(const struct jj_str *s, size_t cp); /* byte offset of code point cp (<= ncp) */
bool jj_is_space(uint32_t cp); /* Python str.isspace */
bool jj_is_printable(uint32_t cp);
uint32_t jj_to_upper(uint32_t cp);
uint32_t jj_to_lower(uint32_t cp);
bool jj_is_alpha(uint32_t cp);
bool jj_is_digit(uint32_t cp);
bool jj_is_valid_utf8(const char *s, size_t n, size_t *bad_at);

void jj_float_repr(double f, struct jj_buf *b); /* Python repr(float) */
/* Python str(v) / repr(v) appended to b; false only when a cap was passed. */
void jj_str_of(struct jv v, struct jj_buf *b);
void jj_repr_of(struct jv v, struct jj_buf *b);
/* json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys) into b;
 * false with *bad = the type that is not serializable. */
struct jj_json_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: no indent; else the indent unit */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
};
bool jj_json_dump(struct jv v, const struct jj_json_opts *o, struct jj_buf *b, const char **bad);
void jj_html_escape(const struct jj_str *s, struct jj_buf *b); /* MarkupSafe escape */

/* ---- the render (jinja_eval.c) ---- */
struct jj_frame;

struct jj_render {
    const struct dj_jinja *t;
    struct jj_frame *root;
    struct jj_dict *ctx;
    int64_t now;
    uint32_t line;      /* the line being evaluated, for messages */
    size_t depth;       /* nested evaluation */
    size_t macro_depth;
    uint64_t steps;
    uint64_t max_steps; /* <= JJ_MAX_STEPS */
    size_t max_output;  /* <= JJ_MAX_OUTPUT: the output and every capture buffer */
    struct jj_ns **ns;  /* every namespace of this render */
    size_t n_ns, cap_ns;
    bool failed;
    bool raised;        /* the failure came from raise_exception */
    char err[1024];
    int loop_ctl;       /* 0, JN_BREAK or JN_CONTINUE while unwinding */
    struct jj_buf *out; /* where statements write (a capture buffer inside macros and blocks) */
};

/* Records an error "template: line L: TYPE: message" (once: the first error wins); returns -1. */
int jj_fail(struct jj_render *r, const char *type, const char *fmt, ...) DJ_PRINTF(3, 4);
int jj_fail_oom(struct jj_render *r);
int jj_charge(struct jj_render *r, size_t bytes); /* step budget for building bytes; -1 when spent */
/* One step per element visited (iterating, comparing, searching): the step limit must
 * bound a template that applies an O(n) filter to a big list in a loop. */
int jj_charge_items(struct jj_render *r, size_t n);
/* jj_charge / jj_charge_items for a result already stored in *out: on -1 the result is
 * released (a caller owns *out only when 0 is returned). */
int jj_charge_out(struct jj_render *r, size_t bytes, struct jv *out);
int jj_charge_items_out(struct jj_render *r, size_t n, struct jv *out);
/* Undefined used where a value is needed: the right error (UndefinedError / SecurityError). */
int jj_fail_undefined(struct jj_render *r, struct jv u);
struct jj_ns *jj_ns_new(struct jj_render *r); /* render-owned; NULL (and an error) on failure */

/* Lookups as jinja2's sandbox does them (results are new references). */
int jj_getattr(struct jj_render *r, struct jv obj, const char *name, size_t n, struct jv *out);
int jj_getitem(struct jj_render *r, struct jv obj, struct jv key, struct jv *out);
/* Iterates v into a new list (strings by code point, dicts by key); -1 when not iterable. */
int jj_iterate(struct jj_render *r, struct jv v, struct jj_list **out);
int jj_len(struct jj_render *r, struct jv v, int64_t *out);
/* str(v) as a string value (Markup stays Markup). */
int jj_to_str(struct jj_render *r, struct jv v, struct jj_str **out);
int jj_contains(struct jj_render *r, struct jv container, struct jv item, bool *out);
int jj_binop(struct jj_render *r, int op, struct jv a, struct jv b, struct jv *out);
/* Calls a callable value; args[0..n_pos) positional, then kw names/values. */
struct jj_args {
    struct jv *pos;
    size_t n_pos;
    const char **kw_names;
    size_t *kw_lens;
    struct jv *kw;
    size_t n_kw;
};
int jj_call(struct jj_render *r, struct jv fn, const struct jj_args *a, struct jv *out);
/* One step per 16 bytes of the strings among v and the arguments: what a string method,
 * filter or test may scan (case mapping, search, strip, split...). */
int jj_charge_scan(struct jj_render *r, struct jv v, const struct jj_args *a);

/* Python's "fmt % args" (printf-style); result keeps the provenance of fmt's literal parts. */
int jj_percent_format(struct jj_render *r, const struct jj_str *fmt, struct jv args, struct jv *out);

/* A "missing argument" marker for jj_bind (an undefined with owner 0xFF). */
static inline struct jv jv_missing(void) { struct jv v = {JJ_UNDEF, 0, 0xFF, {0}}; return v; }
static inline bool jv_is_missing(struct jv v) { return v.t == JJ_UNDEF && v.owner == 0xFF; }

/* Python str helpers shared by methods and filters (results are new strings). */
enum jj_strip_mode { JJ_STRIP_BOTH, JJ_STRIP_LEFT, JJ_STRIP_RIGHT };
int jj_str_strip(struct jj_render *r, const struct jj_str *s, const struct jj_str *chars, int mode, struct jv *out);
enum jj_case_mode { JJ_CASE_UPPER, JJ_CASE_LOWER, JJ_CASE_TITLE, JJ_CASE_CAPITALIZE, JJ_CASE_SWAP, JJ_CASE_JINJA_TITLE };
int jj_str_case(struct jj_render *r, const struct jj_str *s, int mode, struct jv *out);
int jj_str_replace(struct jj_render *r, const struct jj_str *s, const struct jj_str *old, const struct jj_str *new_,
                   int64_t count, struct jv *out);
/* A substring [off, off+n) in bytes, keeping provenance and the Markup flag. */
int jj_substr(struct jj_render *r, const struct jj_str *s, size_t off, size_t n, struct jv *out);

/* ---- filters, tests, methods, globals ---- */
int jj_filter_id(const char *name);
int jj_test_id(const char *name);
int jj_apply_filter(struct jj_render *r, int id, struct jv v, const struct jj_args *a, struct jv *out);
int jj_apply_test(struct jj_render *r, int id, struct jv v, const struct jj_args *a, bool *out);
/* A Python attribute of a str/dict/list/tuple/loop: a method, -1 when there is none. */
int jj_method_lookup(struct jv obj, const char *name, size_t n, bool *unsafe);
int jj_call_method(struct jj_render *r, const struct jj_method *m, const struct jj_args *a, struct jv *out);
const char *jj_method_name(int id);
enum jj_global { JJ_G_NAMESPACE = 1, JJ_G_RANGE, JJ_G_RAISE, JJ_G_STRFTIME, JJ_G_DICT, JJ_G_COUNT };
int jj_global_lookup(const char *name); /* enum jj_global or 0 */
int jj_call_global(struct jj_render *r, int id, const struct jj_args *a, struct jv *out);
int jj_call_macro(struct jj_render *r, const struct jj_node *m, const struct jj_args *a, struct jv *out);

/* Binds call arguments to named parameters (Python's rules); out[i] borrowed or
 * undefined when missing. -1 (TypeError) on an unknown keyword or too many. */
int jj_bind(struct jj_render *r, const char *what, const struct jj_args *a, const char *const *names, size_t n_names,
            struct jv *out);

#endif
