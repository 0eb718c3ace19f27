/*
 * test_toolcall_harmony.c — gpt-oss's tool-call grammar (src/sample/toolcall.h,
 * GPT_OSS) token by token, on a vocabulary where the harmony markers are
 * tokens as in gpt-oss's own (tests/test_harmony.h: <|channel|> <|message|>
 * <|start|> <|constrain|> <|end|> rendered as text, <|call|> <|return|> end of
 * generation).  The outputs are tokenized with the markers as those single
 * tokens, as the model writes them, and fed through the masks and the token
 * matcher (gtok_mask / gtok_accept):
 *   accepted: a call in either header order, with and without the analysis
 *     message and <|constrain|>; each token is in the mask before it is
 *     accepted; at the end of the arguments the mask holds the end tokens
 *     (<|call|>, <|return|>) and nothing else, so the model's <|call|> ends it;
 *   rejected (the first token the grammar refuses, checked against the mask
 *     too): a final message, another tool's name, a second <|channel|> after
 *     the analysis (the <|start|>assistant is required), <|call|> before the
 *     arguments are complete, a wrong argument type, text after the analysis;
 *   the masks at the start allow the <|channel|> token and not <|call|>;
 *   NAMED restricts the name; the lazy grammar (after " to=functions.")
 *     accepts the rest of either header order.
 * And the vocabulary is checked to be what the test relies on.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "gguf/gguf.h"
#include "sample/grammar.h"
#include "sample/toolcall.h"
#include "test.h"
#include "test_harmony.h"
#include "tokenizer/tokenizer.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"days\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"host\":{\"type\":\"string\"}},\"required\":[\"host\"],\"additionalProperties\":false}}}]";

static struct dj_vocab *vocab;
static struct dj_gvocab *gvocab;
static dj_token tok_of[HARMONY_N_MARKERS]; /* harmony_markers[k]'s id */
enum { M_START, M_END, M_MESSAGE, M_CHANNEL, M_CONSTRAIN, M_RETURN, M_CALL };

/* codelm's tokenizer keys with the markers, loaded from memory. */
static bool load_vocab(const char *shared) {
    struct gguf_ctx *src = NULL;
    if (gguf_open(test_shared_path(shared, "models/codelm-15m-f16.gguf"), &src) != DJ_OK) {
        CHECKF(0, "codelm: %s", dj_last_error());
        return false;
    }
    struct gguf_writer *w = gguf_writer_create();
    void *mem = NULL;
    size_t n_mem = 0;
    bool ok = w != NULL;
    for (size_t i = 0; ok && i < gguf_n_kv(src); i++) {
        struct gguf_str k = gguf_kv_key(src, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10) && !(k.len == 23 && !memcmp(k.ptr, "tokenizer.chat_template", 23)))
            ok = gguf_writer_copy_kv(w, src, i) == DJ_OK;
    }
    if (ok) harmony_vocab_tweak(w, src);
    ok = ok && gguf_writer_write_memory(w, &mem, &n_mem) == DJ_OK;
    gguf_writer_destroy(w);
    gguf_close(src);
    struct gguf_ctx *c = NULL;
    ok = ok && gguf_open_memory(mem, n_mem, "harmony-vocab", &c) == DJ_OK && vocab_load_gguf(c, &vocab) == DJ_OK;
    gguf_close(c);
    free(mem);
    CHECKF(ok, "harmony vocabulary: %s", dj_last_error());
    if (!ok) return false;
    CHECK(gvocab_create(vocab, &gvocab) == DJ_OK);
    /* the vocabulary treats the markers as gpt-oss's does */
    for (int k = 0; k < HARMONY_N_MARKERS; k++) {
        dj_token *ids = NULL;
        size_t n = 0;
        CHECK(vocab_tokenize(vocab, harmony_markers[k], strlen(harmony_markers[k]), false, true, &ids, &n) == DJ_OK);
        CHECKF(n == 1, "%s is %zu tokens", harmony_markers[k], n);
        tok_of[k] = n == 1 ? ids[0] : -1;
        free(ids);
        bool eog = k == M_RETURN || k == M_CALL;
        CHECKF(tok_of[k] >= 0 && vocab_is_eog(vocab, tok_of[k]) == eog, "%s: end of generation %d, want %d",
               harmony_markers[k], tok_of[k] >= 0 && vocab_is_eog(vocab, tok_of[k]), eog);
        char piece[32];
        size_t pn = tok_of[k] >= 0 ? vocab_token_to_piece(vocab, tok_of[k], false, piece, sizeof piece) : 0;
        CHECKF(eog || (pn == strlen(harmony_markers[k]) && !memcmp(piece, harmony_markers[k], pn)),
               "%s is not rendered as its text", harmony_markers[k]);
    }
    return gvocab != NULL;
}

struct gt {
    struct dj_grammar *g;
    struct dj_gtok *t;
    uint64_t *mask;
};

static bool gt_build(enum dj_tool_choice choice, const char *name, bool think, bool lazy, struct gt *out) {
    memset(out, 0, sizeof *out);
    struct dj_toolcall_opts o = toolcall_default_opts();
    o.format = DJ_TOOL_FORMAT_GPT_OSS;
    o.choice = choice;
    o.name = name;
    if (think) o.think_open = "<|channel|>analysis<|message|>", o.think_close = "<|end|>";
    struct dj_toolcall_grammar tg = {0};
    enum dj_status st = toolcall_grammar_build(TOOLS, strlen(TOOLS), &o, &tg);
    CHECKF(st == DJ_OK, "build: %s", dj_last_error());
    if (st) return false;
    CHECK(!strcmp(tg.trigger, " to=functions."));
    const char *src = lazy ? tg.lazy_gbnf : tg.gbnf;
    st = grammar_parse(src, strlen(src), NULL, vocab, &out->g);
    CHECKF(st == DJ_OK, "parse: %s", dj_last_error());
    toolcall_grammar_free(&tg);
    if (st) return false;
    CHECK(gtok_create(out->g, gvocab, &out->t) == DJ_OK);
    out->mask = calloc((vocab_n_tokens(vocab) + 63) / 64, sizeof *out->mask);
    return out->t && out->mask;
}

static void gt_free(struct gt *g) {
    gtok_free(g->t), grammar_free(g->g), free(g->mask);
    memset(g, 0, sizeof *g);
}

static bool in_mask(const uint64_t *mask, dj_token t) { return mask[(size_t)t / 64] >> ((size_t)t % 64) & 1; }

/* Feeds text (markers as their tokens) token by token.  Returns the index of
 * the first token refused (by the mask or the matcher; the two must agree), or
 * the token count when all were taken; *m_out (if not NULL) the state after. */
static size_t feed(struct gt *g, const char *text, size_t *n_tok, struct dj_gmatch **m_out) {
    dj_token *ids = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(vocab, text, strlen(text), false, true, &ids, &n) == DJ_OK);
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g->g, &m) == DJ_OK);
    size_t i = 0;
    for (; m && i < n; i++) {
        gtok_mask(g->t, m, g->mask);
        bool allowed = in_mask(g->mask, ids[i]);
        struct dj_gmatch *probe = gmatch_clone(m);
        bool took = probe && gtok_accept(g->t, probe, ids[i]);
        gmatch_free(probe);
        CHECKF(allowed == took, "token %zu (%d) of '%s': mask %d, matcher %d", i, ids[i], text, allowed, took);
        if (!took) break;
        gtok_accept(g->t, m, ids[i]);
    }
    free(ids);
    if (n_tok) *n_tok = n;
    if (m_out) *m_out = m;
    else gmatch_free(m);
    return i;
}

/* The whole text is taken and the grammar ends there: only end-of-generation tokens next. */
static void accepts(struct gt *g, const char *text) {
    size_t n;
    struct dj_gmatch *m;
    size_t i = feed(g, text, &n, &m);
    CHECKF(i == n, "refused at token %zu of %zu: %s", i, n, text);
    if (i == n && m) {
        size_t allowed = gtok_mask(g->t, m, g->mask);
        CHECKF(gmatch_can_end(m) && in_mask(g->mask, tok_of[M_CALL]) && in_mask(g->mask, tok_of[M_RETURN]),
               "cannot end after: %s", text);
        size_t n_eog = 0;
        for (size_t t = 0; t < vocab_n_tokens(vocab); t++) n_eog += vocab_is_eog(vocab, (dj_token)t);
        CHECKF(allowed == n_eog, "%zu tokens allowed after the call, want the %zu end tokens: %s", allowed, n_eog, text);
    }
    gmatch_free(m);
}

/* Some token is refused, at or after the token where text first differs from good. */
static void rejects(struct gt *g, const char *text) {
    size_t n;
    size_t i = feed(g, text, &n, NULL);
    CHECKF(i < n, "accepted: %s", text);
}

static const char *ARGS = "{\"city\": \"Paris\", \"days\": 3}";

static void test_required(void) {
    struct gt g;
    if (!gt_build(DJ_TOOL_REQUIRED, NULL, true, false, &g)) return;
    char buf[512];
    /* channel first (how gpt-oss writes it), with <|constrain|> */
    snprintf(buf, sizeof buf, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>%s", ARGS);
    accepts(&g, buf);
    /* the recipient first (how the template renders a past call), without <|constrain|> */
    snprintf(buf, sizeof buf, " to=functions.get_weather<|channel|>commentary json<|message|>%s", ARGS);
    accepts(&g, buf);
    snprintf(buf, sizeof buf, " to=functions.ping<|channel|>analysis<|message|>{\"host\": \"a.b\"}");
    accepts(&g, buf);
    /* the analysis message first */
    snprintf(buf, sizeof buf,
             "<|channel|>analysis<|message|>The user wants the weather in Paris. <|channel|> is fine here.<|end|>"
             "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>%s", ARGS);
    accepts(&g, buf);
    /* refused */
    rejects(&g, "<|channel|>final<|message|>It is sunny.");
    rejects(&g, "<|channel|>commentary<|message|>Let me check.<|end|>");
    snprintf(buf, sizeof buf, "<|channel|>commentary to=functions.get_wether <|constrain|>json<|message|>%s", ARGS);
    rejects(&g, buf);
    snprintf(buf, sizeof buf, "<|channel|>analysis<|message|>Think.<|end|><|channel|>commentary to=functions.ping"
                              "<|message|>{\"host\": \"x\"}");
    rejects(&g, buf);
    rejects(&g, "<|channel|>analysis<|message|>Think.<|end|>Sure.");
    rejects(&g, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"<|call|>");
    rejects(&g, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": \"3\"}");
    rejects(&g, "<|call|>");
    /* the first mask: the <|channel|> token and the " to=" text, not the end tokens nor <|start|> */
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g.g, &m) == DJ_OK);
    gtok_mask(g.t, m, g.mask);
    CHECK(in_mask(g.mask, tok_of[M_CHANNEL]) && !in_mask(g.mask, tok_of[M_CALL]) && !in_mask(g.mask, tok_of[M_RETURN]) &&
          !in_mask(g.mask, tok_of[M_START]) && !in_mask(g.mask, tok_of[M_END]));
    gmatch_free(m);
    /* after the analysis's <|end|>: only <|start|> (or its text) */
    size_t n;
    CHECK(feed(&g, "<|channel|>analysis<|message|>Hm.<|end|>", &n, &m) == n && m);
    if (m) {
        gtok_mask(g.t, m, g.mask);
        CHECK(in_mask(g.mask, tok_of[M_START]) && !in_mask(g.mask, tok_of[M_CHANNEL]) && !in_mask(g.mask, tok_of[M_END]) &&
              !in_mask(g.mask, tok_of[M_CALL]));
    }
    gmatch_free(m);
    gt_free(&g);
    /* without think markers the analysis message is not allowed */
    if (gt_build(DJ_TOOL_REQUIRED, NULL, false, false, &g)) {
        snprintf(buf, sizeof buf, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant to=functions.ping"
                                  "<|channel|>commentary<|message|>{\"host\": \"x\"}");
        rejects(&g, buf);
        gt_free(&g);
    }
}

static void test_named_lazy(void) {
    struct gt g;
    char buf[512];
    if (gt_build(DJ_TOOL_NAMED, "ping", true, false, &g)) {
        snprintf(buf, sizeof buf, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>%s", ARGS);
        rejects(&g, buf);
        accepts(&g, "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{\"host\": \"x\"}");
        gt_free(&g);
    }
    /* AUTO's lazy grammar: what follows " to=functions.", in either header order */
    if (gt_build(DJ_TOOL_AUTO, NULL, true, true, &g)) {
        snprintf(buf, sizeof buf, "get_weather <|constrain|>json<|message|>%s", ARGS);
        accepts(&g, buf);
        snprintf(buf, sizeof buf, "get_weather<|channel|>commentary json<|message|>%s", ARGS);
        accepts(&g, buf);
        rejects(&g, "get_weather<|message|>{\"city\": 1}");
        rejects(&g, "nope<|message|>{}");
        gt_free(&g);
    }
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    if (load_vocab(shared)) {
        test_required();
        test_named_lazy();
    }
    gvocab_free(gvocab);
    dj_vocab_free(vocab);
    TEST_END();
}
