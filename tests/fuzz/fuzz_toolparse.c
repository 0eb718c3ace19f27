/*
 * fuzz_toolparse.c — libFuzzer target for the tool-call / reasoning output
 * parser (src/chat/toolparse*.c).  Input: byte 0 picks the family (low 5
 * bits; the family's think markers from a table here), parse_tools (bit 5),
 * reasoning (bit 6) and think_forced_open (bit 7); byte 1 seeds the split;
 * the rest is the model's output.  It is parsed three times — whole, a byte
 * at a time, and in pieces of 0..31 bytes — and the concatenated deltas
 * (content, reasoning, each call's id, name and arguments) and the status
 * must agree.  Every delta must be non-empty and in order (TOOL_ARGS of the
 * open call, its first byte '{'); when finish returns DJ_OK every call's
 * arguments must load with jansson (a number past a double's range aside:
 * valid JSON that jansson refuses).  Anything else aborts so that libFuzzer
 * keeps the input.  Seeds: a few outputs per family (tests/fuzz/seed.sh).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolparse.h"
#include "core/rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sbuf {
    char *p;
    size_t n, cap;
};

static void sput(struct sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) abort();
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

#define MAXC 64

struct out {
    struct sbuf content, reasoning, meta; /* meta: "index id name\n" per call */
    struct sbuf args[MAXC];
    int n_calls, overflow;
};

static void on_delta(void *ud, const struct dj_chat_delta *d) {
    struct out *o = ud;
    if (d->kind != DJ_DELTA_TOOL_START && !d->n) abort();
    switch (d->kind) {
    case DJ_DELTA_CONTENT: sput(&o->content, d->text, d->n); break;
    case DJ_DELTA_REASONING: sput(&o->reasoning, d->text, d->n); break;
    case DJ_DELTA_TOOL_START:
        if ((int)d->tool_index != o->n_calls + o->overflow || !d->id || !d->name || !d->name[0]) abort();
        if (strlen(d->id) != 29 || memcmp(d->id, "call_", 5) != 0) abort();
        sput(&o->meta, d->id, strlen(d->id));
        sput(&o->meta, " ", 1);
        sput(&o->meta, d->name, strlen(d->name));
        sput(&o->meta, "\n", 1);
        if (o->n_calls < MAXC) o->n_calls++;
        else o->overflow++;
        break;
    case DJ_DELTA_TOOL_ARGS:
        if ((int)d->tool_index != o->n_calls + o->overflow - 1) abort();
        if (o->overflow) break;
        if (!o->args[o->n_calls - 1].n && d->text[0] != '{') abort();
        sput(&o->args[o->n_calls - 1], d->text, d->n);
        break;
    }
}

static void out_free(struct out *o) {
    free(o->content.p);
    free(o->reasoning.p);
    free(o->meta.p);
    for (int i = 0; i < MAXC; i++) free(o->args[i].p);
}

static bool sb_eq(const struct sbuf *a, const struct sbuf *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

static bool out_eq(const struct out *a, const struct out *b) {
    if (!sb_eq(&a->content, &b->content) || !sb_eq(&a->reasoning, &b->reasoning) || !sb_eq(&a->meta, &b->meta)) return false;
    if (a->n_calls != b->n_calls || a->overflow != b->overflow) return false;
    for (int i = 0; i < a->n_calls; i++)
        if (!sb_eq(&a->args[i], &b->args[i])) return false;
    return true;
}

static const char *const think[DJ_TOOLS_N][2] = {
    [DJ_TOOLS_MISTRAL] = {"[THINK]", "[/THINK]"},
    [DJ_TOOLS_COMMAND_R] = {"<|START_THINKING|>", "<|END_THINKING|>"},
    [DJ_TOOLS_GPT_OSS] = {"<|channel|>analysis<|message|>", "<|end|>"},
    [DJ_TOOLS_KIMI_K3] = {"<|open|>think<|sep|>", "<|close|>think<|sep|>"},
    [DJ_TOOLS_MUSE] = {" to=self<|message|>", "<|eom|>"},
    [DJ_TOOLS_GEMMA4] = {"<|channel>thought", "<channel|>"},
    [DJ_TOOLS_SOLAR] = {"<|think|>", "<|end|>"},
    [DJ_TOOLS_APRIEL] = {"Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"},
};

static enum dj_status run(const struct dj_chat_syntax *syn, bool tools, bool reasoning, const char *text, size_t n,
                          size_t piece, uint64_t seed, struct out *o) {
    memset(o, 0, sizeof *o);
    struct dj_toolparse *p = toolparse_new(syn, tools, reasoning, 1234);
    if (!p) abort();
    size_t i = 0;
    for (uint64_t k = 0; i < n; k++) {
        size_t m = piece ? piece : (size_t)(dj_rng_u64(seed, k) % 32);
        if (m > n - i) m = n - i;
        toolparse_feed(p, text + i, m, on_delta, o);
        i += m;
    }
    enum dj_status st = toolparse_finish(p, on_delta, o);
    toolparse_free(p);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned t = (unsigned)(data[0] & 31) % DJ_TOOLS_N;
    struct dj_chat_syntax syn = {(enum dj_tool_syntax)t, "<think>", "</think>", (data[0] & 128) != 0};
    if (think[t][0]) {
        syn.think_open = think[t][0];
        syn.think_close = think[t][1];
    }
    bool tools = data[0] & 32, reasoning = data[0] & 64;
    uint64_t seed = data[1];
    /* a heap copy of exactly the text, so ASan sees any read past its end */
    size_t n = size - 2;
    char *text = malloc(n ? n : 1);
    if (!text) return 0;
    if (n) memcpy(text, data + 2, n);

    struct out a, b, c;
    enum dj_status sa = run(&syn, tools, reasoning, text, n, n ? n : 1, 0, &a);
    enum dj_status sb = run(&syn, tools, reasoning, text, n, 1, 0, &b);
    enum dj_status sc = run(&syn, tools, reasoning, text, n, 0, seed, &c);
    if (sa != sb || sa != sc || !out_eq(&a, &b) || !out_eq(&a, &c)) abort();
    if (sa == DJ_OK) {
        for (int i = 0; i < a.n_calls; i++) {
            json_error_t e;
            json_t *j = json_loadb(a.args[i].p ? a.args[i].p : "", a.args[i].n,
                                   JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &e);
            if (!j && !strstr(e.text, "overflow")) abort();
            json_decref(j);
        }
    }
    out_free(&a);
    out_free(&b);
    out_free(&c);
    free(text);
    return 0;
}
