/*
 * toolparse_int.h — the private side of the output parser (toolparse.h):
 * the parser object, the streaming JSON validator, and the little "scripts"
 * that describe each family's tool-call syntax.
 *
 * How the parser works.  Fed text is appended to an input buffer; a driver
 * runs "steps" until one can decide nothing more without more text.  A step
 * either consumes bytes (emitting deltas) or waits; it never looks at bytes
 * it has not been given, and a decision it takes depends only on the bytes
 * up to the point decided, so any split of the input gives the same
 * concatenated deltas.  Modes:
 *
 *   TM_TEXT    content; watches the markers that open reasoning or a call
 *   TM_THINK   reasoning; watches the close marker
 *   TM_SCRIPT  inside a tool-call block: a family's script of ops (below)
 *   TM_HDR     a harmony message header (gpt-oss, muse): decides the body
 *
 *   input buffer:  [ consumed | keep ........ pos ........ len ]
 *                              ^ trig_pos (only kept while a call is uncommitted)
 *
 * A script starts when a trigger marker is seen.  Until it commits (the
 * first TOOL_START, or a JSON call block's first '{' / '['), a mismatch
 * reverts: the trigger and what followed are content after all.  The bytes
 * from the trigger on are kept for that, and ops before the commit look at
 * most TP_WINDOW bytes past it (so the decision never depends on the split
 * and the kept text is bounded).  After the commit a mismatch is a parse
 * failure: the call is closed, the rest is content, finish() reports it.
 *
 * Every TOOL_ARGS byte goes through one validating JSON state machine
 * (tp_json): it tells when a raw JSON value ends, catches invalid arguments,
 * and completes a truncated value (close the string, the containers).  A
 * structural ',' (and the whitespace after it) is held back until the next
 * token, so that a cut after a comma can still be closed validly.
 */
#ifndef DJ_CHAT_TOOLPARSE_INT_H
#define DJ_CHAT_TOOLPARSE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/toolparse.h"

#define TP_NAME_MAX 256           /* bytes of a tool name, a parameter key, a header */
#define TP_WINDOW 1024            /* bytes an uncommitted script may look past its trigger */
#define TP_WS_CAP 4096            /* a whitespace run longer than this is never trimmed */
#define TP_JSON_DEPTH 512         /* nesting deeper than this is invalid */
#define TP_VALUE_CAP (1u << 20)   /* an XML parameter value longer than this is a string */
#define TP_PEND_CAP (1u << 20)    /* arguments buffered while the name is unknown */
#define TP_HOLD_CAP 256           /* a held-back ',' plus the whitespace after it */
#define TP_STAGE 4096             /* TOOL_ARGS bytes gathered before a delta */
#define TP_MAX_MARKERS 12

/* ---- the JSON validator ---------------------------------------------- */

enum tp_json_st { J_VAL, J_OBJ0, J_KEY, J_COLON, J_AFTER, J_ARR0, J_STR, J_ESC, J_U, J_NUM, J_LIT, J_DONE, J_BAD };
enum tp_json_ret { TJ_OK, TJ_DONE, TJ_DONE_BEFORE, TJ_BAD };

struct tp_json {
    uint8_t st;
    uint8_t in_key;   /* the string being read is an object key */
    uint8_t num;      /* number sub-state */
    uint8_t lit, lit_i; /* literal: 0 true, 1 false, 2 null; chars matched */
    uint8_t u_n;      /* \u hex digits read */
    uint16_t u_val;
    uint8_t surr;     /* a high surrogate was read: the next must be \u + a low one */
    uint8_t utf_need, utf_lo, utf_hi; /* UTF-8 continuation bytes still expected, range of the next */
    uint8_t first;    /* first char of the top-level value (0: none yet) */
    uint32_t depth;
    uint8_t stk[TP_JSON_DEPTH / 8]; /* bit set: the container at that depth is an object */
};

void tp_json_init(struct tp_json *j);
enum tp_json_ret tp_json_feed(struct tp_json *j, unsigned char c);
/* The value is complete if the input ended here (a finished value, or a
 * top-level number in a final state). */
bool tp_json_complete_here(const struct tp_json *j);
/* Writes the text that completes the value read so far into out (at least
 * TP_JSON_DEPTH + 32 bytes); comma_held: a structural ',' was fed but not
 * emitted (it is dropped).  Returns the length, or -1 when no completion is
 * valid (the value is already invalid). */
int tp_json_closer(const struct tp_json *j, bool comma_held, char *out);

/* Length of an incomplete (so far valid) UTF-8 sequence at the end of s. */
size_t tp_utf8_tail(const char *s, size_t n);

/* ---- JSON string escaping (stateful over split input) ------------------ */

struct tp_esc {
    unsigned char pend[4];
    uint8_t pend_n, need, lo, hi;
};

/* ---- scripts ------------------------------------------------------------ */

enum tp_opk {
    OP_WS,      /* skip whitespace */
    OP_LIT,     /* s must follow */
    OP_OPT,     /* s may follow (consumed) */
    OP_IFLIT,   /* s follows: consume, go on; else jump j */
    OP_IFPEEK,  /* s follows: jump j (not consumed); else go on */
    OP_IFJSON,  /* (after whitespace) '{' or '[' follows: jump j */
    OP_SKIPTO,  /* skip through s */
    OP_NAME,    /* the tool name, up to s (a marker, consumed; or with F_CHARSET a set of end chars, not consumed): TOOL_START */
    OP_ARGS,    /* a raw JSON object as the arguments; if invalid, raw text up to s */
    OP_JCALLS,  /* JSON call objects {"name": ..., "arguments": ...}, alone, several, or in an array (d: struct tp_jcfg) */
    OP_XPARAMS, /* XML-like key/value parameters up to the call's end (d: struct tp_xcfg) */
    OP_PYCALLS, /* [name(k=v, ...), ...] with Python literals */
    OP_GEMMA,   /* Gemma 4's {k:<|"|>v<|"|>,...} */
    OP_CODE,    /* raw code up to s (or the end) as {"code": "..."}; d: the tool name when not yet started */
    OP_END,     /* back to content */
    OP_HDR,     /* back to a harmony header */
};

enum {
    F_CHARSET = 1, /* OP_NAME: s is a set of end characters (not consumed); whitespace ends it too */
    F_STRICT = 2,  /* OP_NAME: only [A-Za-z0-9_.:-] */
    F_ALL = 4,     /* OP_NAME: "all" means content follows (Functionary v3.2) */
    F_KIMI = 8,    /* OP_NAME: strip "functions." and ":N" */
    F_UNESC = 16,  /* OP_NAME: undo &amp; &quot; (attribute values) */
    F_DEFER = 32,  /* OP_NAME: TOOL_START (the commit) waits for the arguments' op: prose after a weak trigger reverts */
};

struct tp_op {
    uint8_t k;
    int8_t j;
    uint16_t f;
    const char *s;
    const void *d;
};

struct tp_jcfg {
    bool array, multi, tentative;          /* [..] allowed; several objects in a row; Llama's bare JSON (stricter first key) */
};

struct tp_xcfg {
    const char *key_open, *key_close;     /* "<parameter=", ">" */
    const char *attr_end;                 /* NULL, or what ends attributes after key_close */
    const char *val_open, *val_close;     /* NULL / "<arg_value>", "</parameter>" */
    const char *call_close;               /* "</function>" */
    const char *json_open, *json_close;   /* a raw JSON arguments block instead (Kimi-K3), or NULL */
    bool strip_nl, unescape;              /* strip one '\n' around values; undo &amp; &quot; in keys */
};

struct tp_hcfg {
    const char *start;    /* "<|start|>assistant": skipped before a header */
    const char *channel;  /* "<|channel|>" or NULL */
    const char *message;  /* "<|message|>" */
    const char *ends[3];  /* end a message body */
    bool muse;            /* recipients: self = reasoning, user = content, a tool = content with triggers */
};

struct tp_trigger {
    const char *marker;
    const struct tp_op *script;
};

struct tp_family {
    enum dj_tool_syntax id;
    const char *name;
    const char *trigger_text;     /* chat_tool_trigger */
    struct tp_trigger trig[3];
    const char *drops[3];         /* content wrappers removed (when reasoning is on) */
    const struct tp_op *start_script; /* runs at the start of output (Functionary v3.2), or NULL */
    const struct tp_op *bare_script;  /* runs when output starts with '{' (Llama 3.x), or NULL */
    const struct tp_hcfg *harmony;
    const struct tp_op *hcall_script; /* harmony: a call's body */
};

const struct tp_family *tp_family_of(enum dj_tool_syntax s);

/* ---- the parser ------------------------------------------------------------ */

enum tp_mode { TM_TEXT, TM_THINK, TM_SCRIPT, TM_HDR };
enum tp_act { A_THINK, A_UNTHINK, A_TRIGGER, A_DROP, A_HEND };

struct tp_marker {
    const char *s;
    size_t n;
    uint8_t act, arg;
};

struct tp_markset {
    struct tp_marker m[TP_MAX_MARKERS];
    int n;
    size_t maxlen;
    bool first[256];
};

struct tp_seg { /* whitespace trimming of a content or reasoning segment */
    int kind;
    bool at_start, ws_over;
    size_t ws_n;
    char ws[TP_WS_CAP];
};

struct tp_py { /* the Python-literal / Gemma value transducer */
    uint8_t st, quote, hex_n, word_n;
    bool gemma, expect_key, comma;
    uint32_t hex;
    uint32_t depth;
    uint8_t stk[TP_JSON_DEPTH / 4]; /* 2 bits a level: 1 object, 2 list, 3 tuple */
    char word[64];
    struct tp_esc esc;
};

struct tp_xval { /* an XML parameter value being read */
    uint8_t mode, hint, first;
    bool nl_checked, nl_held;
    size_t total;
    struct tp_json j;
    struct tp_esc esc;
};

struct dj_toolparse {
    struct dj_chat_syntax syn;
    const struct tp_family *fam;
    bool parse_tools, reasoning;
    uint64_t id_seed;

    dj_chat_emit_fn emit;
    void *ud;

    char *buf;
    size_t len, cap, pos;
    uint64_t base;       /* stream offset of buf[0] */
    bool eof;

    enum tp_mode mode;
    struct tp_markset text_ms, think_ms;
    struct tp_seg seg;
    bool bare_pending;   /* Llama 3.x: output start not decided yet */
    uint64_t skip_trig;  /* stream offset + 1 of a trigger that reverted (content now) */
    bool harmony_off;    /* output is not in harmony format after all */

    /* script */
    const struct tp_op *script;
    int ip, sub;
    size_t trig_pos, trig_len;
    bool committed;
    int hend_verbatim;   /* harmony body kept verbatim: its end marker is content too */

    /* the current call */
    uint32_t n_calls;
    bool call_open, args_any, av_bad, comma_held;
    struct tp_json av;   /* validates the emitted arguments */
    char hold[TP_HOLD_CAP];
    size_t hold_n;
    char stage[TP_STAGE];
    size_t stage_n;
    char name[TP_NAME_MAX + 1];
    size_t name_n;
    char dname[TP_NAME_MAX + 1]; /* F_DEFER: the name read, TOOL_START not yet sent */
    size_t dname_n;
    char key[TP_NAME_MAX + 1];
    size_t key_n;
    bool nparams;        /* XPARAMS/PYCALLS: a parameter was emitted */

    /* op scratch */
    struct tp_json jv;   /* JCALLS: extent of the value being skipped/streamed */
    uint8_t jc_st, jc_kind, jc_sdec;
    bool jc_array, jc_have_name, jc_have_args;
    bool jc_sstarted, jc_sdrop; /* arguments as a JSON string: its '{' seen; not an object, dropped */
    uint32_t jc_u, jc_hi;
    uint8_t jc_un;
    char *pend;
    size_t pend_n, pend_cap;
    struct tp_py py;
    struct tp_xval xv;
    char *vbuf;
    size_t vbuf_n, vbuf_cap;
    struct tp_esc esc;
    char hdr[2 * TP_NAME_MAX + 1];
    size_t hdr_n;

    bool failed;
    char err[256];
};

/* driver services (toolparse.c) */
void tp_emit(struct dj_toolparse *p, int kind, const char *s, size_t n);
void tp_text(struct dj_toolparse *p, int kind, const char *s, size_t n);
void tp_seg_end(struct dj_toolparse *p);
void tp_fail(struct dj_toolparse *p, const char *fmt, ...) DJ_PRINTF(2, 3);
void tp_revert(struct dj_toolparse *p);
void tp_commit(struct dj_toolparse *p);
void tp_call_begin(struct dj_toolparse *p, const char *name, size_t n);
void tp_call_end(struct dj_toolparse *p, bool clean);
void tp_to_text(struct dj_toolparse *p);
void tp_harmony_off(struct dj_toolparse *p);

/* arguments output (toolparse_json.c) */
void tp_args_reset(struct dj_toolparse *p);
enum tp_json_ret tp_args_put(struct dj_toolparse *p, const char *s, size_t n);
void tp_args_str(struct dj_toolparse *p, struct tp_esc *e, const char *s, size_t n); /* JSON-escaped */
void tp_args_str_end(struct dj_toolparse *p, struct tp_esc *e);
bool tp_args_close(struct dj_toolparse *p);
void tp_stage_flush(struct dj_toolparse *p, bool all);

/* the script interpreter (toolparse_ops.c) */
bool tp_step_script(struct dj_toolparse *p);
bool tp_step_hdr(struct dj_toolparse *p);
void tp_script_start(struct dj_toolparse *p, const struct tp_op *script, size_t trig_pos, size_t trig_len);
void tp_script_eof(struct dj_toolparse *p);

enum { M_NO, M_PART, M_FULL };
int tp_match(const char *s, const char *b, size_t n);                   /* s matches b fully, b is a proper prefix of s, or no */
size_t tp_find(const char *s, const char *b, size_t n, size_t *hold);   /* first s in b (n if none); *hold: a suffix that begins s */
size_t tp_avail(const struct dj_toolparse *p, bool *lim);               /* bytes an op may look at; *lim: cut by the window */
void tp_op_next(struct dj_toolparse *p);
void tp_op_jump(struct dj_toolparse *p, int j);
bool tp_op_abort(struct dj_toolparse *p);                               /* after a failure: close the call, back to content */
bool tp_op_mismatch(struct dj_toolparse *p, const char *what);          /* revert before the commit, fail after */
bool tp_op_need(struct dj_toolparse *p, bool lim);                      /* wait, or decide at the window's / output's end */
void tp_op_truncated(struct dj_toolparse *p);
bool tp_is_ident(unsigned char c);
bool tp_utf8_valid(const char *s, size_t n);
size_t tp_unescape_attr(char *s, size_t n);
void tp_put_key(struct dj_toolparse *p, const char *s, size_t n);
int tp_raw_args(struct dj_toolparse *p, int *sub, const char *recover);

/* the argument builders (toolparse_build.c) */
bool tp_op_jcalls(struct dj_toolparse *p, const struct tp_op *op);
bool tp_op_xparams(struct dj_toolparse *p, const struct tp_op *op);
bool tp_op_pycalls(struct dj_toolparse *p);
bool tp_op_gemma(struct dj_toolparse *p);
bool tp_in_jcalls_object(const struct dj_toolparse *p);

static inline bool tp_is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

#endif
