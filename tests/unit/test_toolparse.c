/*
 * test_toolparse.c — the tool-call / reasoning output parser (src/chat/toolparse.h).
 *
 * 1. Every family: calls written in the family's syntax by a small writer
 *    (write_calls below, one branch a family, following the templates), with
 *    content before and after, two parallel calls, reasoning first; fed whole,
 *    a byte at a time and in random pieces: the concatenated deltas must be
 *    identical, the arguments valid JSON equal to what was written.
 * 2. Truncation: every prefix of such an output parses, split or not, to the
 *    same deltas, and a finished call's arguments are valid JSON whenever
 *    finish returns DJ_OK; a cut inside the arguments keeps what came.
 * 3. Marker-like text ("<tool" then the end, a trigger followed by prose),
 *    parse_tools=false, reasoning=false: content.
 * 4. The golden renders (../shared/golden/chat_templates): the assistant
 *    tool-call turns the templates wrote for tool_loop, parallel_tool_calls
 *    and reasoning_tool_loop parse back to the conversation's tool names and
 *    arguments (conversations.json) — the parser reads what the template writes.
 * 5. chat_syntax_detect on all 50 templates gives the family in a table, and
 *    think_forced_open matches the golden renders' generation prompts.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "chat/toolparse.h"
#include "core/rng.h"
#include "test.h"

/* ---- a growable string ---------------------------------------------------------- */

struct buf {
    char *p;
    size_t n, cap;
};

static void bput(struct buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void bstr(struct buf *b, const char *s) { bput(b, s, strlen(s)); }
static void bfree(struct buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
static const char *bget(const struct buf *b) { return b->p ? b->p : ""; }

/* ---- collecting deltas -------------------------------------------------------------- */

#define MAX_CALLS 16

struct out {
    struct buf content, reasoning;
    int n_calls;
    char id[MAX_CALLS][40], name[MAX_CALLS][300];
    struct buf args[MAX_CALLS];
    int bad; /* deltas out of order, empty, or cut inside a UTF-8 sequence */
};

static bool utf8_cut(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > k;
    }
    return false;
}

static bool check_utf8;

static void on_delta(void *ud, const struct dj_chat_delta *d) {
    struct out *o = ud;
    switch (d->kind) {
    case DJ_DELTA_CONTENT:
    case DJ_DELTA_REASONING:
        if (!d->n || (check_utf8 && utf8_cut(d->text, d->n))) o->bad++;
        bput(d->kind == DJ_DELTA_CONTENT ? &o->content : &o->reasoning, d->text, d->n);
        break;
    case DJ_DELTA_TOOL_START: {
        if ((int)d->tool_index != o->n_calls || o->n_calls == MAX_CALLS) {
            o->bad++;
            return;
        }
        bool id_ok = strlen(d->id) == 29 && memcmp(d->id, "call_", 5) == 0;
        for (int i = 5; i < 29 && id_ok; i++) {
            char c = d->id[i];
            id_ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        }
        if (!id_ok || !d->name[0]) o->bad++;
        snprintf(o->id[o->n_calls], sizeof o->id[0], "%s", d->id);
        snprintf(o->name[o->n_calls], sizeof o->name[0], "%s", d->name);
        o->n_calls++;
        break;
    }
    case DJ_DELTA_TOOL_ARGS:
        if ((int)d->tool_index != o->n_calls - 1 || !d->n || (check_utf8 && utf8_cut(d->text, d->n))) {
            o->bad++;
            return;
        }
        if (o->args[o->n_calls - 1].n == 0 && d->text[0] != '{') o->bad++;
        bput(&o->args[o->n_calls - 1], d->text, d->n);
        break;
    }
}

static void out_free(struct out *o) {
    bfree(&o->content);
    bfree(&o->reasoning);
    for (int i = 0; i < MAX_CALLS; i++) bfree(&o->args[i]);
    memset(o, 0, sizeof *o);
}

static bool out_same(const struct out *a, const struct out *b) {
    if (strcmp(bget(&a->content), bget(&b->content)) || strcmp(bget(&a->reasoning), bget(&b->reasoning))) return false;
    if (a->n_calls != b->n_calls || a->bad != b->bad) return false;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->id[i], b->id[i]) || strcmp(a->name[i], b->name[i]) || strcmp(bget(&a->args[i]), bget(&b->args[i])))
            return false;
    return true;
}

enum { FEED_WHOLE, FEED_BYTES, FEED_RANDOM };

static enum dj_status parse(const struct dj_chat_syntax *syn, bool tools, bool reasoning, const char *text, size_t n,
                            int mode, uint64_t seed, struct out *o) {
    memset(o, 0, sizeof *o);
    struct dj_toolparse *p = toolparse_new(syn, tools, reasoning, 42);
    if (!p) abort();
    if (mode == FEED_WHOLE) {
        toolparse_feed(p, text, n, on_delta, o);
    } else {
        size_t i = 0;
        for (uint64_t k = 0; i < n; k++) {
            size_t m = mode == FEED_BYTES ? 1 : (size_t)(dj_rng_u64(seed, k) % 19);
            if (m > n - i) m = n - i;
            toolparse_feed(p, text + i, m, on_delta, o);
            i += m;
        }
    }
    enum dj_status st = toolparse_finish(p, on_delta, o);
    toolparse_free(p);
    return st;
}

static bool json_same(const char *text, const char *expect) {
    json_error_t e;
    json_t *a = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e), *b = json_loads(expect, JSON_DECODE_ANY, &e);
    bool same = a && b && json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return same;
}

static bool json_valid(const char *text) {
    json_error_t e;
    json_t *a = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &e);
    json_decref(a);
    return a != NULL;
}

/* Parses three ways; checks they agree; returns the whole-fed result in *o. */
static enum dj_status parse3(const struct dj_chat_syntax *syn, bool tools, bool reasoning, const char *text, struct out *o,
                             const char *label) {
    size_t n = strlen(text);
    struct out b, r;
    enum dj_status st = parse(syn, tools, reasoning, text, n, FEED_WHOLE, 0, o);
    enum dj_status st1 = parse(syn, tools, reasoning, text, n, FEED_BYTES, 0, &b);
    CHECKF(st1 == st && out_same(o, &b), "%s: byte-at-a-time differs (content '%s' vs '%s')", label, bget(&o->content),
           bget(&b.content));
    for (uint64_t s = 1; s <= 3; s++) {
        enum dj_status st2 = parse(syn, tools, reasoning, text, n, FEED_RANDOM, s, &r);
        CHECKF(st2 == st && out_same(o, &r), "%s: random split %llu differs", label, (unsigned long long)s);
        out_free(&r);
    }
    out_free(&b);
    CHECKF(o->bad == 0, "%s: %d malformed deltas", label, o->bad);
    return st;
}

/* ---- writing calls in each family's syntax --------------------------------------------- */

struct tcall {
    const char *name, *args; /* args: a JSON object */
};

static const struct tcall CALLS[2] = {
    {"get_weather", "{\"location\": \"Paris, France\", \"unit\": \"celsius\", \"days\": 3, \"include\": [\"wind\", \"rain\"]}"},
    {"edit_file", "{\"path\": \"src/main.c\", \"edits\": [{\"old\": \"printf(\\\"Helo\\\\n\\\");\", \"new\": \"caf\xc3\xa9 <x> & 'y'\"}], "
                  "\"options\": {\"dry_run\": false, \"ratio\": 0.85, \"n\": null}}"},
};

static void dump(struct buf *b, json_t *v) {
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    bstr(b, s);
    free(s);
}

/* A value as text for the XML-like families: strings raw, the rest JSON. */
static void xml_value(struct buf *b, json_t *v) {
    if (json_is_string(v)) bput(b, json_string_value(v), json_string_length(v));
    else dump(b, v);
}

static void py_string(struct buf *b, const char *s, bool gemma) {
    if (gemma) {
        bstr(b, "<|\"|>");
        bstr(b, s);
        bstr(b, "<|\"|>");
        return;
    }
    bstr(b, "'");
    for (; *s; s++) {
        if (*s == '\'' || *s == '\\') bstr(b, "\\");
        if (*s == '\n') {
            bstr(b, "\\n");
            continue;
        }
        bput(b, s, 1);
    }
    bstr(b, "'");
}

/* A value as a Python literal (LFM2) or in Gemma 4's notation. */
static void py_value(struct buf *b, json_t *v, bool gemma) {
    if (json_is_string(v)) {
        py_string(b, json_string_value(v), gemma);
    } else if (json_is_true(v)) {
        bstr(b, gemma ? "true" : "True");
    } else if (json_is_false(v)) {
        bstr(b, gemma ? "false" : "False");
    } else if (json_is_null(v)) {
        bstr(b, gemma ? "null" : "None");
    } else if (json_is_array(v)) {
        bstr(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) bstr(b, gemma ? "," : ", ");
            py_value(b, json_array_get(v, i), gemma);
        }
        bstr(b, "]");
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        bool first = true;
        bstr(b, "{");
        json_object_foreach(v, k, x) {
            if (!first) bstr(b, gemma ? "," : ", ");
            first = false;
            if (gemma) bstr(b, k);
            else py_string(b, k, false);
            bstr(b, gemma ? ":" : ": ");
            py_value(b, x, gemma);
        }
        bstr(b, "}");
    } else {
        dump(b, v);
    }
}

#define DSB "<\xef\xbd\x9ctool\xe2\x96\x81"
#define DSE "\xef\xbd\x9c>"
#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

static void write_calls(struct buf *b, enum dj_tool_syntax t, const struct tcall *c, int n) {
    const char *k;
    json_t *v;
    switch (t) {
    case DJ_TOOLS_DEEPSEEK_V3:
    case DJ_TOOLS_DEEPSEEK_V31:
        bstr(b, DSB "calls\xe2\x96\x81" "begin" DSE);
        break;
    case DJ_TOOLS_GRANITE: bstr(b, "<|tool_call|>["); break;
    case DJ_TOOLS_NEMOTRON: bstr(b, "<TOOLCALL>["); break;
    case DJ_TOOLS_APRIEL: bstr(b, "<tool_calls>["); break;
    case DJ_TOOLS_MINIMAX_M1: bstr(b, "<tool_calls>\n"); break;
    case DJ_TOOLS_FIREFUNCTION: bstr(b, " functools["); break;
    case DJ_TOOLS_COMMAND_R: bstr(b, "<|START_ACTION|>[\n"); break;
    case DJ_TOOLS_KIMI_K2: bstr(b, "<|tool_calls_section_begin|>"); break;
    case DJ_TOOLS_DEEPSEEK_V4: bstr(b, "\n\n<" DSML "tool_calls>\n"); break;
    case DJ_TOOLS_KIMI_K3: bstr(b, "<|open|>tools<|sep|>"); break;
    case DJ_TOOLS_LFM2: bstr(b, "<|tool_call_start|>["); break;
    case DJ_TOOLS_SOLAR: bstr(b, "<|tool_calls|>"); break;
    default: break;
    }
    for (int i = 0; i < n; i++) {
        json_error_t e;
        json_t *a = json_loads(c[i].args, 0, &e);
        if (!a) abort();
        char *args = json_dumps(a, 0);
        const char *nm = c[i].name;
        switch (t) {
        case DJ_TOOLS_HERMES:
            bstr(b, i ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"");
            bstr(b, nm);
            bstr(b, "\", \"arguments\": ");
            bstr(b, args);
            bstr(b, "}\n</tool_call>");
            break;
        case DJ_TOOLS_QWEN3_CODER:
            bstr(b, i ? "\n<tool_call>\n<function=" : "<tool_call>\n<function=");
            bstr(b, nm);
            bstr(b, ">\n");
            json_object_foreach(a, k, v) {
                bstr(b, "<parameter=");
                bstr(b, k);
                bstr(b, ">\n");
                xml_value(b, v);
                bstr(b, "\n</parameter>\n");
            }
            bstr(b, "</function>\n</tool_call>");
            break;
        case DJ_TOOLS_LLAMA3:
            bstr(b, i ? "<|python_tag|>{\"name\": \"" : "{\"name\": \"");
            bstr(b, nm);
            bstr(b, "\", \"parameters\": ");
            bstr(b, args);
            bstr(b, "}");
            break;
        case DJ_TOOLS_MISTRAL:
            bstr(b, "[TOOL_CALLS]");
            bstr(b, nm);
            bstr(b, i ? "[CALL_ID]b7TzL0mW4[ARGS]" : "[ARGS]");
            bstr(b, args);
            break;
        case DJ_TOOLS_DEEPSEEK_V3:
            bstr(b, i ? "\n" DSB "call\xe2\x96\x81" "begin" DSE "function" DSB "sep" DSE : DSB "call\xe2\x96\x81" "begin" DSE "function" DSB "sep" DSE);
            bstr(b, nm);
            bstr(b, "\n```json\n");
            bstr(b, args);
            bstr(b, "\n```" DSB "call\xe2\x96\x81" "end" DSE);
            break;
        case DJ_TOOLS_DEEPSEEK_V31:
            bstr(b, DSB "call\xe2\x96\x81" "begin" DSE);
            bstr(b, nm);
            bstr(b, DSB "sep" DSE);
            bstr(b, args);
            bstr(b, DSB "call\xe2\x96\x81" "end" DSE);
            break;
        case DJ_TOOLS_FUNCTIONARY_V31:
            bstr(b, "<function=");
            bstr(b, nm);
            bstr(b, ">");
            bstr(b, args);
            bstr(b, "</function>");
            break;
        case DJ_TOOLS_FUNCTIONARY_V32:
            bstr(b, ">>>");
            bstr(b, nm);
            bstr(b, "\n");
            bstr(b, args);
            break;
        case DJ_TOOLS_COMMAND_R:
            bstr(b, i ? ",\n    {\"tool_call_id\": \"1\", \"tool_name\": \"" : "    {\"tool_call_id\": \"0\", \"tool_name\": \"");
            bstr(b, nm);
            bstr(b, "\", \"parameters\": ");
            bstr(b, args);
            bstr(b, "}");
            break;
        case DJ_TOOLS_GRANITE:
        case DJ_TOOLS_NEMOTRON:
        case DJ_TOOLS_APRIEL:
        case DJ_TOOLS_FIREFUNCTION:
            bstr(b, i ? ", {\"name\": \"" : "{\"name\": \"");
            bstr(b, nm);
            bstr(b, "\", \"arguments\": ");
            bstr(b, args);
            bstr(b, t == DJ_TOOLS_APRIEL ? ", \"id\": \"Xk3P9aQ2z\"}" : "}");
            break;
        case DJ_TOOLS_MINIMAX_M1:
        case DJ_TOOLS_GIGACHAT:
            bstr(b, t == DJ_TOOLS_GIGACHAT ? "<|function_call|>{\"name\": \"" : "{\"name\": \"");
            bstr(b, nm);
            bstr(b, "\", \"arguments\": ");
            bstr(b, args);
            bstr(b, "}\n");
            break;
        case DJ_TOOLS_GPT_OSS:
            bstr(b, "<|start|>assistant<|channel|>commentary to=functions.");
            bstr(b, nm);
            bstr(b, " <|constrain|>json<|message|>");
            bstr(b, args);
            bstr(b, "<|call|>");
            break;
        case DJ_TOOLS_KIMI_K2: {
            char idx[32];
            snprintf(idx, sizeof idx, ":%d", i);
            bstr(b, "<|tool_call_begin|>functions.");
            bstr(b, nm);
            bstr(b, idx);
            bstr(b, "<|tool_call_argument_begin|>");
            bstr(b, args);
            bstr(b, "<|tool_call_end|>");
            break;
        }
        case DJ_TOOLS_GLM:
            bstr(b, "<tool_call>");
            bstr(b, nm);
            json_object_foreach(a, k, v) {
                bstr(b, "\n<arg_key>");
                bstr(b, k);
                bstr(b, "</arg_key>\n<arg_value>");
                xml_value(b, v);
                bstr(b, "</arg_value>");
            }
            bstr(b, "\n</tool_call>");
            break;
        case DJ_TOOLS_DEEPSEEK_V4:
            bstr(b, "<" DSML "invoke name=\"");
            bstr(b, nm);
            bstr(b, "\">\n");
            json_object_foreach(a, k, v) {
                bstr(b, "<" DSML "parameter name=\"");
                bstr(b, k);
                bstr(b, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
                xml_value(b, v);
                bstr(b, "</" DSML "parameter>\n");
            }
            bstr(b, "</" DSML "invoke>\n");
            break;
        case DJ_TOOLS_KIMI_K3:
            bstr(b, "<|open|>call tool=\"");
            bstr(b, nm);
            bstr(b, "\" index=\"1\"<|sep|>");
            json_object_foreach(a, k, v) {
                bstr(b, "<|open|>argument key=\"");
                bstr(b, k);
                bstr(b, json_is_string(v) ? "\" type=\"string\"<|sep|>" : "\" type=\"object\"<|sep|>");
                xml_value(b, v);
                bstr(b, "<|close|>argument<|sep|>");
            }
            bstr(b, "<|close|>call<|sep|>");
            break;
        case DJ_TOOLS_MUSE:
            bstr(b, "<|start|>assistant to=");
            bstr(b, nm);
            bstr(b, "<|message|><atem:function_calls>\n<atem:invoke name=\"");
            bstr(b, nm);
            bstr(b, "\">\n");
            json_object_foreach(a, k, v) {
                bstr(b, "<atem:parameter name=\"");
                bstr(b, k);
                bstr(b, "\">");
                xml_value(b, v);
                bstr(b, "</atem:parameter>\n");
            }
            bstr(b, "</atem:invoke>\n</atem:function_calls><|eom|>");
            break;
        case DJ_TOOLS_LFM2: {
            bool first = true;
            bstr(b, i ? ", " : "");
            bstr(b, nm);
            bstr(b, "(");
            json_object_foreach(a, k, v) {
                bstr(b, first ? "" : ", ");
                first = false;
                bstr(b, k);
                bstr(b, "=");
                py_value(b, v, false);
            }
            bstr(b, ")");
            break;
        }
        case DJ_TOOLS_GEMMA4: {
            bool first = true;
            bstr(b, "<|tool_call>call:");
            bstr(b, nm);
            bstr(b, "{");
            json_object_foreach(a, k, v) {
                bstr(b, first ? "" : ",");
                first = false;
                bstr(b, k);
                bstr(b, ":");
                py_value(b, v, true);
            }
            bstr(b, "}<tool_call|>");
            break;
        }
        case DJ_TOOLS_SOLAR:
            bstr(b, "<|tool_call:begin|>Xk3P9aQ2z<|tool_call:name|>");
            bstr(b, nm);
            bstr(b, "<|tool_call:args|>");
            bstr(b, args);
            bstr(b, "<|tool_call:end|>");
            break;
        default:
            break;
        }
        free(args);
        json_decref(a);
    }
    switch (t) {
    case DJ_TOOLS_DEEPSEEK_V3:
    case DJ_TOOLS_DEEPSEEK_V31:
        bstr(b, DSB "calls\xe2\x96\x81" "end" DSE);
        break;
    case DJ_TOOLS_GRANITE:
    case DJ_TOOLS_FIREFUNCTION: bstr(b, "]"); break;
    case DJ_TOOLS_NEMOTRON: bstr(b, "]</TOOLCALL>"); break;
    case DJ_TOOLS_APRIEL: bstr(b, "]</tool_calls>"); break;
    case DJ_TOOLS_MINIMAX_M1: bstr(b, "</tool_calls>"); break;
    case DJ_TOOLS_COMMAND_R: bstr(b, "\n]<|END_ACTION|>"); break;
    case DJ_TOOLS_KIMI_K2: bstr(b, "<|tool_calls_section_end|>"); break;
    case DJ_TOOLS_DEEPSEEK_V4: bstr(b, "</" DSML "tool_calls>"); break;
    case DJ_TOOLS_KIMI_K3: bstr(b, "<|close|>tools<|sep|>"); break;
    case DJ_TOOLS_LFM2: bstr(b, "]<|tool_call_end|>"); break;
    case DJ_TOOLS_SOLAR: bstr(b, "<|calls|>"); break;
    default: break;
    }
}

/* ---- the families as tests see them ------------------------------------------------------ */

struct fam {
    enum dj_tool_syntax t;
    const char *open, *close;
    bool forced;
};

static const struct fam FAMS[] = {
    {DJ_TOOLS_HERMES, "<think>", "</think>", false},
    {DJ_TOOLS_QWEN3_CODER, "<think>", "</think>", true},
    {DJ_TOOLS_LLAMA3, NULL, NULL, false},
    {DJ_TOOLS_MISTRAL, "[THINK]", "[/THINK]", false},
    {DJ_TOOLS_DEEPSEEK_V3, "<think>", "</think>", true},
    {DJ_TOOLS_DEEPSEEK_V31, "<think>", "</think>", false},
    {DJ_TOOLS_FUNCTIONARY_V31, NULL, NULL, false},
    {DJ_TOOLS_FUNCTIONARY_V32, NULL, NULL, false},
    {DJ_TOOLS_COMMAND_R, "<|START_THINKING|>", "<|END_THINKING|>", false},
    {DJ_TOOLS_GRANITE, "<think>", "</think>", false},
    {DJ_TOOLS_GPT_OSS, "<|channel|>analysis<|message|>", "<|end|>", false},
    {DJ_TOOLS_KIMI_K2, "<think>", "</think>", false},
    {DJ_TOOLS_GLM, "<think>", "</think>", true},
    {DJ_TOOLS_DEEPSEEK_V4, "<think>", "</think>", true},
    {DJ_TOOLS_KIMI_K3, "<|open|>think<|sep|>", "<|close|>think<|sep|>", false},
    {DJ_TOOLS_MUSE, " to=self<|message|>", "<|eom|>", false},
    {DJ_TOOLS_LFM2, "<think>", "</think>", false},
    {DJ_TOOLS_GEMMA4, "<|channel>thought", "<channel|>", false},
    {DJ_TOOLS_SOLAR, "<|think|>", "<|end|>", false},
    {DJ_TOOLS_NEMOTRON, "<think>", "</think>", true},
    {DJ_TOOLS_APRIEL, "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]", true},
    {DJ_TOOLS_MINIMAX_M1, NULL, NULL, false},
    {DJ_TOOLS_FIREFUNCTION, NULL, NULL, false},
    {DJ_TOOLS_GIGACHAT, NULL, NULL, false},
};
#define N_FAMS (sizeof FAMS / sizeof FAMS[0])

static struct dj_chat_syntax syn_of(const struct fam *f) {
    struct dj_chat_syntax s = {f->t, f->open, f->close, f->forced};
    return s;
}

static const char *REASON = "The user wants the weather. 17 * 23 = 391 < 400 & \"ok\".";
static const char *BEFORE = "Let me check the weather \xe2\x80\x94 and fix the file.";
static const char *AFTER = "Done: both calls sent.";

/* reasoning? + content before? + n calls + content after?, as the family writes them */
static void compose(struct buf *b, const struct fam *f, bool reason, bool before, int n, bool after) {
    enum dj_tool_syntax t = f->t;
    if (reason && f->open) {
        if (t == DJ_TOOLS_GPT_OSS) {
            bstr(b, "<|channel|>analysis<|message|>");
            bstr(b, REASON);
            bstr(b, "<|end|>");
        } else if (t == DJ_TOOLS_MUSE) {
            bstr(b, " to=self<|message|>");
            bstr(b, REASON);
            bstr(b, "<|eom|>");
        } else {
            if (!f->forced) bstr(b, f->open);
            bstr(b, "\n");
            bstr(b, REASON);
            bstr(b, "\n");
            bstr(b, f->close);
            bstr(b, "\n\n");
        }
    }
    if (before) {
        switch (t) {
        case DJ_TOOLS_GPT_OSS: bstr(b, "<|start|>assistant<|channel|>commentary<|message|>"); bstr(b, BEFORE); bstr(b, "<|end|>"); break;
        case DJ_TOOLS_MUSE: bstr(b, "<|start|>assistant to=user<|message|>"); bstr(b, BEFORE); bstr(b, "<|eom|>"); break;
        case DJ_TOOLS_FUNCTIONARY_V32: bstr(b, "all\n"); bstr(b, BEFORE); break;
        case DJ_TOOLS_COMMAND_R: bstr(b, "<|START_RESPONSE|>"); bstr(b, BEFORE); bstr(b, "<|END_RESPONSE|>"); break;
        case DJ_TOOLS_KIMI_K3: bstr(b, "<|open|>response<|sep|>"); bstr(b, BEFORE); bstr(b, "<|close|>response<|sep|>"); break;
        default: bstr(b, BEFORE); bstr(b, "\n"); break;
        }
    }
    struct buf c = {0};
    write_calls(&c, t, CALLS, n);
    const char *cs = bget(&c);
    if (t == DJ_TOOLS_FUNCTIONARY_V32 && !before && c.n >= 3) cs = c.p + 3; /* the prompt ends in ">>>" */
    if (t == DJ_TOOLS_LLAMA3 && before) bstr(b, "<|python_tag|>");
    bstr(b, cs);
    bfree(&c);
    if (after) {
        switch (t) {
        case DJ_TOOLS_GPT_OSS: bstr(b, "<|start|>assistant<|channel|>final<|message|>"); bstr(b, AFTER); break;
        case DJ_TOOLS_MUSE: bstr(b, "<|start|>assistant to=user<|message|>"); bstr(b, AFTER); bstr(b, "<|eot|>"); break;
        case DJ_TOOLS_FUNCTIONARY_V32: bstr(b, ">>>all\n"); bstr(b, AFTER); break;
        case DJ_TOOLS_COMMAND_R: bstr(b, "<|START_RESPONSE|>"); bstr(b, AFTER); bstr(b, "<|END_RESPONSE|>"); break;
        case DJ_TOOLS_KIMI_K3: bstr(b, "<|open|>response<|sep|>"); bstr(b, AFTER); bstr(b, "<|close|>response<|sep|>"); break;
        default: bstr(b, "\n\n"); bstr(b, AFTER); bstr(b, "\n"); break;
        }
    }
}

static void check_calls(const struct out *o, int n, const char *label) {
    CHECKF(o->n_calls == n, "%s: %d calls, expected %d", label, o->n_calls, n);
    for (int i = 0; i < n && i < o->n_calls; i++) {
        CHECKF(strcmp(o->name[i], CALLS[i].name) == 0, "%s: call %d name '%s'", label, i, o->name[i]);
        CHECKF(json_same(bget(&o->args[i]), CALLS[i].args), "%s: call %d args %s", label, i, bget(&o->args[i]));
    }
    for (int i = 1; i < o->n_calls; i++) CHECKF(strcmp(o->id[i], o->id[0]) != 0, "%s: ids repeat", label);
}

static void test_family(const struct fam *f) {
    const char *fname = chat_tool_syntax_name(f->t);
    struct dj_chat_syntax syn = syn_of(f);
    char label[128];
    struct out o;
    enum dj_status st;

    /* the full turn: reasoning, content, two calls, content */
    struct buf t = {0};
    compose(&t, f, true, true, 2, true);
    snprintf(label, sizeof label, "%s full", fname);
    st = parse3(&syn, true, true, bget(&t), &o, label);
    CHECKF(st == DJ_OK, "%s: status %d (%s)", label, st, dj_last_error());
    check_calls(&o, 2, label);
    char want[256];
    snprintf(want, sizeof want, "%s%s", BEFORE, AFTER);
    CHECKF(strcmp(bget(&o.content), want) == 0, "%s: content '%s'", label, bget(&o.content));
    if (f->open) CHECKF(strcmp(bget(&o.reasoning), REASON) == 0, "%s: reasoning '%s'", label, bget(&o.reasoning));
    out_free(&o);

    /* parse_tools false: the calls are text */
    snprintf(label, sizeof label, "%s no tools", fname);
    st = parse3(&syn, false, true, bget(&t), &o, label);
    CHECKF(st == DJ_OK && o.n_calls == 0 && strstr(bget(&o.content), "edit_file"), "%s: %d calls", label, o.n_calls);
    out_free(&o);

    /* reasoning false: the think markers stay in the content */
    snprintf(label, sizeof label, "%s no reasoning", fname);
    st = parse3(&syn, true, false, bget(&t), &o, label);
    CHECKF(st == DJ_OK && o.reasoning.n == 0, "%s: reasoning '%s'", label, bget(&o.reasoning));
    if (f->open) CHECKF(strstr(bget(&o.content), REASON) != NULL, "%s: content '%s'", label, bget(&o.content));
    check_calls(&o, 2, label);
    out_free(&o);

    /* every cut of the turn: split == whole, arguments valid when finish says OK
       (a cut may fall inside a UTF-8 sequence: the last delta then ends cut too) */
    check_utf8 = false;
    for (size_t cut = 0; cut <= t.n; cut++) {
        struct out a, b;
        enum dj_status s1 = parse(&syn, true, true, t.p, cut, FEED_WHOLE, 0, &a);
        enum dj_status s2 = parse(&syn, true, true, t.p, cut, FEED_BYTES, 0, &b);
        bool same = s1 == s2 && out_same(&a, &b);
        bool valid = a.bad == 0;
        for (int i = 0; i < a.n_calls && s1 == DJ_OK; i++) valid = valid && json_valid(bget(&a.args[i]));
        if (!same || !valid) {
            CHECKF(same && valid, "%s: cut at %zu: same %d, valid %d (%s)", fname, cut, same, valid, dj_last_error());
            out_free(&a);
            out_free(&b);
            break;
        }
        test_passed++;
        out_free(&a);
        out_free(&b);
    }
    check_utf8 = true;
    bfree(&t);
    syn.think_forced_open = false; /* below: output that does not start in reasoning */

    /* one call alone (Llama 3.x: bare JSON; Functionary v3.2: right after the prompt's ">>>") */
    compose(&t, f, false, false, 1, false);
    snprintf(label, sizeof label, "%s single", fname);
    st = parse3(&syn, true, true, bget(&t), &o, label);
    CHECKF(st == DJ_OK, "%s: status %d (%s)", label, st, dj_last_error());
    check_calls(&o, 1, label);
    CHECKF(o.content.n == 0, "%s: content '%s'", label, bget(&o.content));
    out_free(&o);

    /* cut inside the arguments, after "cel" of "celsius": the call is closed, what came kept */
    const char *cel = strstr(bget(&t), "cel");
    if (cel) {
        size_t cut = (size_t)(cel - t.p) + 3;
        snprintf(label, sizeof label, "%s cut", fname);
        struct out a;
        st = parse(&syn, true, true, t.p, cut, FEED_BYTES, 0, &a);
        CHECKF(st == DJ_OK && a.n_calls == 1, "%s: status %d, %d calls (%s)", label, st, a.n_calls, dj_last_error());
        json_error_t e;
        json_t *j = a.n_calls ? json_loads(bget(&a.args[0]), 0, &e) : NULL;
        CHECKF(j && json_is_object(j), "%s: args '%s'", label, a.n_calls ? bget(&a.args[0]) : "");
        const char *loc = json_string_value(json_object_get(j, "location"));
        CHECKF(loc && strcmp(loc, "Paris, France") == 0, "%s: location", label);
        json_decref(j);
        out_free(&a);
    }
    bfree(&t);

    /* text that only looks like a call is content */
    const char *trig = chat_tool_trigger(f->t);
    if (trig) {
        for (size_t k = 1; k < strlen(trig); k++) {
            if ((trig[k] & 0xC0) == 0x80) continue; /* not inside a UTF-8 sequence */
            struct buf x = {0};
            bstr(&x, "Hello ");
            bput(&x, trig, k);
            snprintf(label, sizeof label, "%s prefix %zu", fname, k);
            st = parse3(&syn, true, true, x.p, &o, label);
            while (x.n && x.p[x.n - 1] == ' ') x.p[--x.n] = '\0'; /* content is trimmed at the end */
            CHECKF(st == DJ_OK && o.n_calls == 0 && strcmp(bget(&o.content), x.p) == 0, "%s: content '%s'", label,
                   bget(&o.content));
            out_free(&o);
            bfree(&x);
        }
        struct buf x = {0};
        bstr(&x, "Use the ");
        bstr(&x, trig);
        bstr(&x, " [tag] when it helps.");
        snprintf(label, sizeof label, "%s prose", fname);
        st = parse3(&syn, true, true, x.p, &o, label);
        if (f->t != DJ_TOOLS_LLAMA3 && f->t != DJ_TOOLS_GPT_OSS)
            CHECKF(st == DJ_OK && o.n_calls == 0 && strcmp(bget(&o.content), x.p) == 0, "%s: %d calls, content '%s'", label,
                   o.n_calls, bget(&o.content));
        out_free(&o);
        bfree(&x);
    }
}

/* ---- specific behaviours ---------------------------------------------------------------- */

static void test_specifics(void) {
    struct dj_chat_syntax hermes = {DJ_TOOLS_HERMES, "<think>", "</think>", false};
    struct out o;
    enum dj_status st;

    st = parse3(&hermes, true, true, "Hello <tool", &o, "eos in marker");
    CHECK(st == DJ_OK && strcmp(bget(&o.content), "Hello <tool") == 0 && o.n_calls == 0);
    out_free(&o);

    st = parse3(&hermes, true, true, "<think>\nhmm\n</think>\n\nHi there.\n", &o, "think trim");
    CHECK(st == DJ_OK && strcmp(bget(&o.reasoning), "hmm") == 0 && strcmp(bget(&o.content), "Hi there.") == 0);
    out_free(&o);

    /* invalid JSON in the arguments: reported, the call still closed */
    st = parse3(&hermes, true, true, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>", &o, "bad json");
    CHECK(st == DJ_ERR_INVALID && o.n_calls == 1);
    CHECK(strstr(dj_last_error(), "tool") != NULL);
    out_free(&o);

    /* no name */
    st = parse3(&hermes, true, true, "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>", &o, "no name");
    CHECK(st == DJ_ERR_INVALID && o.n_calls == 0);
    out_free(&o);

    /* arguments before the name, and arguments as a JSON string (the OpenAI wire shape) */
    st = parse3(&hermes, true, true,
                "<tool_call>{\"arguments\": {\"x\": [1, {\"y\": \"z\"}]}, \"name\": \"late\"}</tool_call>"
                "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": \\\"\\\\u00e9\\\\n\\\"}\"}</tool_call>",
                &o, "late name, string args");
    CHECK(st == DJ_OK && o.n_calls == 2);
    CHECK(o.n_calls == 2 && strcmp(o.name[0], "late") == 0 && json_same(bget(&o.args[0]), "{\"x\": [1, {\"y\": \"z\"}]}"));
    CHECK(o.n_calls == 2 && json_same(bget(&o.args[1]), "{\"q\": \"\xc3\xa9\\n\"}"));
    out_free(&o);

    /* the comma before a cut is dropped; a cut key gets null */
    const char *cutcomma = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, ";
    st = parse(&hermes, true, true, cutcomma, strlen(cutcomma), FEED_WHOLE, 0, &o);
    CHECK(st == DJ_OK && o.n_calls == 1 && strcmp(bget(&o.args[0]), "{\"a\": 1}") == 0);
    out_free(&o);
    const char *cutkey = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2], \"bb";
    st = parse(&hermes, true, true, cutkey, strlen(cutkey), FEED_BYTES, 0, &o);
    CHECK(st == DJ_OK && o.n_calls == 1 && json_same(bget(&o.args[0]), "{\"a\": [1, 2], \"bb\": null}"));
    out_free(&o);
    const char *cutsur = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\\ud83d";
    st = parse(&hermes, true, true, cutsur, strlen(cutsur), FEED_BYTES, 0, &o);
    CHECK(st == DJ_OK && o.n_calls == 1 && json_valid(bget(&o.args[0])));
    out_free(&o);

    /* a cut before the name is an error, and nothing is emitted */
    const char *cutname = "<tool_call>{\"name\": \"get_wea";
    st = parse(&hermes, true, true, cutname, strlen(cutname), FEED_WHOLE, 0, &o);
    CHECK(st == DJ_ERR_INVALID && o.n_calls == 0);
    out_free(&o);

    /* Llama 3.x: JSON at the start that is not a call is content */
    struct dj_chat_syntax llama = {DJ_TOOLS_LLAMA3, NULL, NULL, false};
    st = parse3(&llama, true, true, "{\"answer\": 42}", &o, "llama json answer");
    CHECK(st == DJ_OK && o.n_calls == 0 && strcmp(bget(&o.content), "{\"answer\": 42}") == 0);
    out_free(&o);
    st = parse3(&llama, true, true, "<|python_tag|>print(\"hi\")<|eom_id|>", &o, "llama code");
    CHECK(st == DJ_OK && o.n_calls == 1 && strcmp(o.name[0], "python") == 0 &&
          json_same(bget(&o.args[0]), "{\"code\": \"print(\\\"hi\\\")\"}"));
    out_free(&o);

    /* Mistral's older JSON list */
    struct dj_chat_syntax mistral = {DJ_TOOLS_MISTRAL, NULL, NULL, false};
    st = parse3(&mistral, true, true,
                "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"Xk3P9aQ2z\"}, {\"name\": \"b\", \"arguments\": {}}]",
                &o, "mistral list");
    CHECK(st == DJ_OK && o.n_calls == 2 && strcmp(o.name[1], "b") == 0 && json_same(bget(&o.args[0]), "{\"x\": 1}"));
    out_free(&o);

    /* Qwen3-Coder values: numbers/objects as JSON, text (even "null", quoted text) as strings */
    struct dj_chat_syntax qc = {DJ_TOOLS_QWEN3_CODER, NULL, NULL, false};
    st = parse3(&qc, true, true,
                "<tool_call>\n<function=f>\n<parameter=a>\n-1.5e3\n</parameter>\n<parameter=b>\nnull\n</parameter>\n"
                "<parameter=c>\n\"q\"\n</parameter>\n<parameter=d>\n{\"k\": [true]}\n</parameter>\n<parameter=e>\n12 apples\n"
                "</parameter>\n<parameter=f>\nline1\n\nline3\n\n</parameter>\n</function>\n</tool_call>",
                &o, "qwen3-coder values");
    CHECK(st == DJ_OK && o.n_calls == 1 &&
          json_same(bget(&o.args[0]), "{\"a\": -1.5e3, \"b\": \"null\", \"c\": \"\\\"q\\\"\", \"d\": {\"k\": [true]}, "
                                      "\"e\": \"12 apples\", \"f\": \"line1\\n\\nline3\\n\"}"));
    out_free(&o);

    /* Functionary v3.2 python code, and text without a name */
    struct dj_chat_syntax f32 = {DJ_TOOLS_FUNCTIONARY_V32, NULL, NULL, false};
    st = parse3(&f32, true, true, "python\nimport os\nprint(1)", &o, "fv32 code");
    CHECK(st == DJ_OK && o.n_calls == 1 && json_same(bget(&o.args[0]), "{\"code\": \"import os\\nprint(1)\"}"));
    out_free(&o);
    st = parse3(&f32, true, true, "Sure, here it is.", &o, "fv32 text");
    CHECK(st == DJ_OK && o.n_calls == 0 && strcmp(bget(&o.content), "Sure, here it is.") == 0);
    out_free(&o);

    /* gpt-oss: output that is not harmony is content */
    struct dj_chat_syntax oss = {DJ_TOOLS_GPT_OSS, "<|channel|>analysis<|message|>", "<|end|>", false};
    st = parse3(&oss, true, true, "Plain answer.", &o, "oss plain");
    CHECK(st == DJ_OK && strcmp(bget(&o.content), "Plain answer.") == 0);
    out_free(&o);

    /* ids: deterministic for a seed, different across seeds */
    struct dj_toolparse *p1 = toolparse_new(&hermes, true, true, 7), *p2 = toolparse_new(&hermes, true, true, 8);
    struct out a = {0}, b = {0};
    const char *one = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    toolparse_feed(p1, one, strlen(one), on_delta, &a);
    toolparse_feed(p2, one, strlen(one), on_delta, &b);
    CHECK(toolparse_finish(p1, on_delta, &a) == DJ_OK && toolparse_finish(p2, on_delta, &b) == DJ_OK);
    CHECK(a.n_calls == 1 && b.n_calls == 1 && strcmp(a.id[0], b.id[0]) != 0);
    toolparse_free(p1);
    toolparse_free(p2);
    out_free(&a);
    out_free(&b);
    toolparse_free(NULL);
}

/* Hostile output: megabytes without a closing marker, deep nesting. */
static void test_hostile(void) {
    struct dj_chat_syntax hermes = {DJ_TOOLS_HERMES, "<think>", "</think>", false};
    size_t n = 2u << 20;
    char *big = malloc(n + 64);
    if (!big) abort();
    struct out o;

    memset(big, '<', n);
    enum dj_status st = parse(&hermes, true, true, big, n, FEED_RANDOM, 1, &o);
    CHECK(st == DJ_OK && o.content.n == n && o.n_calls == 0);
    out_free(&o);

    memcpy(big, "<think>", 7);
    memset(big + 7, 'x', n - 7);
    st = parse(&hermes, true, true, big, n, FEED_RANDOM, 2, &o);
    CHECK(st == DJ_OK && o.reasoning.n == n - 7);
    out_free(&o);

    const char *head = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ";
    size_t h = strlen(head);
    memcpy(big, head, h);
    memset(big + h, '[', n - h);
    st = parse(&hermes, true, true, big, n, FEED_RANDOM, 3, &o);
    CHECK(st == DJ_ERR_INVALID && o.n_calls == 1);
    out_free(&o);

    memcpy(big, head, h);
    big[h] = '"';
    memset(big + h + 1, 'y', n - h - 1);
    st = parse(&hermes, true, true, big, n, FEED_RANDOM, 4, &o);
    CHECK(st == DJ_OK && o.n_calls == 1 && json_valid(bget(&o.args[0])) && o.args[0].n > n - h);
    out_free(&o);

    memcpy(big, "<tool_call>", 11);
    memset(big + 11, ' ', n - 11);
    st = parse(&hermes, true, true, big, n, FEED_RANDOM, 5, &o);
    CHECK(st == DJ_OK && o.n_calls == 0 && o.content.n == n); /* a run past TP_WS_CAP is not trimmed */
    out_free(&o);

    struct dj_chat_syntax glm = {DJ_TOOLS_GLM, NULL, NULL, false}; /* a name waiting for its first parameter */
    memcpy(big, "<tool_call>get_weather", 22);
    memset(big + 22, ' ', n - 22);
    st = parse(&glm, true, true, big, n, FEED_RANDOM, 7, &o);
    CHECK(st == DJ_OK && o.n_calls == 0 && o.content.n == n);
    out_free(&o);

    struct dj_chat_syntax qc = {DJ_TOOLS_QWEN3_CODER, NULL, NULL, false};
    const char *qh = "<tool_call>\n<function=write>\n<parameter=text>\n[";
    size_t qn = strlen(qh);
    memcpy(big, qh, qn);
    memset(big + qn, '1', n - qn);
    st = parse(&qc, true, true, big, n, FEED_RANDOM, 6, &o);
    CHECK(st == DJ_OK && o.n_calls == 1 && json_valid(bget(&o.args[0])));
    out_free(&o);
    free(big);
}

/* ---- the golden renders --------------------------------------------------------------------- */

struct tmpl {
    const char *file;
    enum dj_tool_syntax t;
    const char *start, *end; /* the assistant turn: after start, up to end (NULL: no tool-call turn rendered) */
};

#define CHATML "<|im_start|>assistant\n", "<|im_end|>"
#define L3HDR "<|start_header_id|>assistant<|end_header_id|>\n\n"
#define DSA "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>"

static const struct tmpl TEMPLATES[] = {
    {"Apriel-1.6-15b-Thinker-fixed", DJ_TOOLS_APRIEL, "<|begin_assistant|>\n", "<|end|>"},
    {"Bielik-11B-v3.0-Instruct", DJ_TOOLS_HERMES, CHATML},
    {"CohereForAI-c4ai-command-r-plus-tool_use", DJ_TOOLS_NONE, NULL, NULL},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", DJ_TOOLS_COMMAND_R, "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
    {"GigaChat3-10B-A1.8B", DJ_TOOLS_NONE, NULL, NULL},
    {"GigaChat3.1-10B-A1.8B", DJ_TOOLS_GIGACHAT, "assistant<|role_sep|>\n", "<|message_sep|>"},
    {"HuggingFaceTB-SmolLM3-3B", DJ_TOOLS_NONE, NULL, NULL},
    {"Kimi-K3", DJ_TOOLS_KIMI_K3, "message role=\"assistant\"<|sep|>", "<|close|>message<|sep|>"},
    {"LFM2-8B-A1B", DJ_TOOLS_LFM2, CHATML},
    {"LFM2.5-8B-A1B", DJ_TOOLS_LFM2, CHATML},
    {"LFM2.5-Instruct", DJ_TOOLS_NONE, NULL, NULL},
    {"MiMo-VL", DJ_TOOLS_HERMES, CHATML},
    {"MiniMax-M1", DJ_TOOLS_MINIMAX_M1, "ai name=assistant\n", "<end_of_sentence>"},
    {"MiniMax-M3", DJ_TOOLS_NONE, NULL, NULL},
    {"Mistral-Small-3.2-24B-Instruct-2506", DJ_TOOLS_MISTRAL, "[/INST]", "<|eos|>"},
    {"NVIDIA-Nemotron-Nano-v2", DJ_TOOLS_NEMOTRON, "<SPECIAL_11>Assistant\n", "<SPECIAL_12>"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", DJ_TOOLS_HERMES, CHATML},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", DJ_TOOLS_HERMES, CHATML},
    {"Qwen-QwQ-32B", DJ_TOOLS_HERMES, CHATML},
    {"Qwen-Qwen2.5-7B-Instruct", DJ_TOOLS_HERMES, CHATML},
    {"Qwen-Qwen3-0.6B", DJ_TOOLS_HERMES, CHATML},
    {"Qwen3.5-4B", DJ_TOOLS_QWEN3_CODER, CHATML},
    {"Reka-Edge", DJ_TOOLS_HERMES, "<sep>assistant: ", "<sep>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", DJ_TOOLS_DEEPSEEK_V3, DSA},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", DJ_TOOLS_DEEPSEEK_V3, DSA},
    {"deepseek-ai-DeepSeek-V3.1", DJ_TOOLS_DEEPSEEK_V31, DSA},
    {"deepseek-ai-DeepSeek-V4-Flash-0731", DJ_TOOLS_DEEPSEEK_V4, DSA},
    {"fireworks-ai-llama-3-firefunction-v2", DJ_TOOLS_FIREFUNCTION, L3HDR, "<|eot_id|>"},
    {"google-gemma-2-2b-it", DJ_TOOLS_NONE, NULL, NULL},
    {"google-gemma-4-31B-it-interleaved", DJ_TOOLS_GEMMA4, "<|turn>model\n", "<turn|>"},
    {"ibm-granite-granite-3.3-2B-Instruct", DJ_TOOLS_GRANITE, "assistant<|end_of_role|>", "<|end_of_text|>"},
    {"ibm-granite-granite-4.0", DJ_TOOLS_HERMES, "assistant<|end_of_role|>", "<|end_of_text|>"},
    {"llama-cpp-deepseek-r1", DJ_TOOLS_DEEPSEEK_V3, DSA},
    {"llama-cpp-rwkv-world", DJ_TOOLS_NONE, NULL, NULL},
    {"meetkai-functionary-medium-v3.1", DJ_TOOLS_FUNCTIONARY_V31, L3HDR, "<|eom_id|>"},
    {"meetkai-functionary-medium-v3.2", DJ_TOOLS_FUNCTIONARY_V32, L3HDR, "<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", DJ_TOOLS_LLAMA3, L3HDR, "<|eot_id|>"},
    {"meta-llama-Llama-3.2-3B-Instruct", DJ_TOOLS_LLAMA3, L3HDR, "<|eot_id|>"},
    {"meta-llama-Llama-3.3-70B-Instruct", DJ_TOOLS_LLAMA3, L3HDR, "<|eot_id|>"},
    {"microsoft-Phi-3.5-mini-instruct", DJ_TOOLS_NONE, NULL, NULL},
    {"mistralai-Ministral-3-14B-Reasoning-2512", DJ_TOOLS_MISTRAL, "[/INST]", "<|eos|>"},
    {"mistralai-Mistral-Nemo-Instruct-2407", DJ_TOOLS_MISTRAL, "[/INST]", "<|eos|>"},
    {"moonshotai-Kimi-K2", DJ_TOOLS_KIMI_K2, "<|im_middle|>", "<|im_end|>"},
    {"muse-glimmer", DJ_TOOLS_MUSE, "<|start|>assistant", "<|eot|>"},
    {"openai-gpt-oss-120b", DJ_TOOLS_GPT_OSS, "<|start|>assistant", "<|start|>functions."},
    {"poolside-Laguna-S-2.1", DJ_TOOLS_GLM, "<assistant>", "</assistant>"},
    {"poolside-Laguna-XS-2.1", DJ_TOOLS_GLM, "<assistant>", "</assistant>"},
    {"poolside-Laguna-XS.2", DJ_TOOLS_GLM, "<assistant>", "</assistant>"},
    {"unsloth-Apriel-1.5", DJ_TOOLS_APRIEL, "<|assistant|>\n", "<|end|>"},
    {"upstage-Solar-Open-100B", DJ_TOOLS_SOLAR, "<|begin|>assistant", "<|begin|>tool"},
};
#define N_TEMPLATES (sizeof TEMPLATES / sizeof TEMPLATES[0])

/* the user message that precedes the tool-call turn, per case */
static const struct {
    const char *name, *user;
} TURN_CASES[] = {
    {"tool_loop", "with wind?"},
    {"parallel_tool_calls", "src/main.c."},
    {"reasoning_tool_loop", "for a walk?"},
};

static json_t *case_of(json_t *expected, const char *name) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(expected, "cases"), i, c) {
        if (strcmp(json_string_value(json_object_get(c, "case")), name) == 0) return c;
    }
    return NULL;
}

static int golden_turns;

static void test_golden_template(const char *shared, const struct tmpl *tm, json_t *convs) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/chat_templates/templates/%s.jinja", tm->file);
    size_t n;
    char *src = test_read_file(test_shared_path(shared, rel), &n);
    CHECKF(src != NULL, "%s: cannot read", rel);
    if (!src) return;
    struct dj_chat_syntax syn = chat_syntax_detect(src, n);
    free(src);
    CHECKF(syn.tools == tm->t, "%s: detected %s, expected %s", tm->file, chat_tool_syntax_name(syn.tools),
           chat_tool_syntax_name(tm->t));

    snprintf(rel, sizeof rel, "golden/chat_templates/expected/%s.json", tm->file);
    json_error_t e;
    json_t *exp = json_load_file(test_shared_path(shared, rel), 0, &e);
    CHECKF(exp != NULL, "%s: %s", rel, e.text);
    if (!exp) return;

    /* think_forced_open: as the generation prompt rendered with thinking on */
    if (syn.think_open) {
        json_t *c = case_of(exp, "reasoning_history.enable_thinking_true");
        if (!c) c = case_of(exp, "reasoning_history.thinking_true");
        if (!c) c = case_of(exp, "reasoning_history");
        const char *outp = c ? json_string_value(json_object_get(c, "output")) : NULL;
        if (outp) {
            bool opens = chat_syntax_prompt_opens_think(&syn, outp, strlen(outp));
            CHECKF(syn.think_forced_open == opens, "%s: think_forced_open %d, the prompt %s in '%s'", tm->file,
                   syn.think_forced_open, opens ? "ends" : "does not end", syn.think_open);
        }
    }

    for (size_t k = 0; tm->start && k < sizeof TURN_CASES / sizeof TURN_CASES[0]; k++) {
        json_t *c = case_of(exp, TURN_CASES[k].name);
        const char *outp = c ? json_string_value(json_object_get(c, "output")) : NULL;
        if (!outp) continue; /* the template fails this case */
        const char *u = strstr(outp, TURN_CASES[k].user);
        const char *s = u ? strstr(u, tm->start) : NULL;
        CHECKF(s != NULL, "%s %s: no assistant turn", tm->file, TURN_CASES[k].name);
        if (!s) continue;
        s += strlen(tm->start);
        const char *end = strstr(s, tm->end);
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char *turn = strndup(s, len);
        if (!turn) abort();
        const char *trig = chat_tool_trigger(syn.tools);
        if (!trig || !strstr(turn, trig)) { /* this template renders no tool calls */
            free(turn);
            continue;
        }
        /* the expected calls: the conversation's assistant message with tool_calls */
        json_t *msgs = json_object_get(json_object_get(json_object_get(convs, "conversations"), TURN_CASES[k].name), "messages");
        json_t *calls = NULL, *m;
        const char *content = NULL, *reasoning = NULL;
        size_t i;
        json_array_foreach(msgs, i, m) {
            if ((calls = json_object_get(m, "tool_calls"))) {
                content = json_string_value(json_object_get(m, "content"));
                reasoning = json_string_value(json_object_get(m, "reasoning_content"));
                break;
            }
        }
        size_t n_calls = json_array_size(calls);
        if (syn.tools == DJ_TOOLS_GPT_OSS || syn.tools == DJ_TOOLS_GIGACHAT)
            n_calls = 1; /* these templates write only the first call of a message */

        /* the turn continues the prompt: if it closes reasoning it did not open, the prompt opened it */
        struct dj_chat_syntax ts = syn;
        if (syn.think_open && syn.think_close) {
            const char *o = strstr(turn, syn.think_open), *cl = strstr(turn, syn.think_close);
            ts.think_forced_open = cl && (!o || cl < o);
        }
        char label[200];
        snprintf(label, sizeof label, "golden %s %s", tm->file, TURN_CASES[k].name);
        struct out o;
        enum dj_status st = parse3(&ts, true, true, turn, &o, label);
        CHECKF(st == DJ_OK, "%s: status %d (%s)", label, st, dj_last_error());
        CHECKF((size_t)o.n_calls == n_calls, "%s: %d calls, expected %zu", label, o.n_calls, n_calls);
        for (size_t j = 0; j < n_calls && (int)j < o.n_calls; j++) {
            json_t *fn = json_object_get(json_array_get(calls, j), "function");
            const char *nm = json_string_value(json_object_get(fn, "name"));
            json_t *want = json_object_get(fn, "arguments");
            json_t *got = json_loads(bget(&o.args[j]), 0, &e);
            CHECKF(strcmp(o.name[j], nm) == 0, "%s: call %zu name '%s'", label, j, o.name[j]);
            CHECKF(got && json_equal(got, want), "%s: call %zu args %s", label, j, bget(&o.args[j]));
            json_decref(got);
        }
        if (content && *content && strstr(turn, content))
            CHECKF(strcmp(bget(&o.content), content) == 0 || strcmp(bget(&o.reasoning), content) == 0,
                   "%s: content '%s'", label, bget(&o.content));
        if (reasoning && strstr(turn, reasoning) && syn.think_open)
            CHECKF(strcmp(bget(&o.reasoning), reasoning) == 0, "%s: reasoning '%s'", label, bget(&o.reasoning));
        golden_turns++;
        out_free(&o);
        free(turn);
    }
    json_decref(exp);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    check_utf8 = true;
    for (size_t i = 0; i < N_FAMS; i++) test_family(&FAMS[i]);
    test_specifics();
    test_hostile();

    json_error_t e;
    json_t *convs = json_load_file(test_shared_path(shared, "golden/chat_templates/conversations.json"), 0, &e);
    CHECKF(convs != NULL, "conversations.json: %s", e.text);
    if (convs) {
        for (size_t i = 0; i < N_TEMPLATES; i++) test_golden_template(shared, &TEMPLATES[i], convs);
        /* the table covers every template there is */
        DIR *d = opendir(test_shared_path(shared, "golden/chat_templates/templates"));
        size_t n_files = 0;
        for (struct dirent *de; d && (de = readdir(d));) {
            size_t l = strlen(de->d_name);
            if (l < 7 || strcmp(de->d_name + l - 6, ".jinja") != 0) continue;
            n_files++;
            bool listed = false;
            for (size_t i = 0; i < N_TEMPLATES && !listed; i++)
                listed = strlen(TEMPLATES[i].file) == l - 6 && memcmp(TEMPLATES[i].file, de->d_name, l - 6) == 0;
            CHECKF(listed, "%s: not in the test's table", de->d_name);
        }
        if (d) closedir(d);
        CHECKF(n_files == N_TEMPLATES, "%zu templates, %zu in the table", n_files, N_TEMPLATES);
        json_decref(convs);
        printf("golden: %d assistant tool-call turns parsed back\n", golden_turns);
        CHECK(golden_turns >= 60);
    }
    TEST_END();
}
