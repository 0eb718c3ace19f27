/*
 * test_request.c — the completion request parsers of src/server/request.c
 * without a server: /v1/completions (logprobs, echo, suffix, the output
 * constraint: grammar / json_schema / response_format) and /infill
 * (input_prefix / input_suffix / input_extra / prompt, n_predict -1 / 0 / N,
 * return_tokens): what each field becomes, every refusal's status and param;
 * and server_fim_prompt's token layout, built here independently from
 * llama-server's format_prompt_infill (plain-text parts, the prompt with
 * special tokens, the repo-level form with REP/SEP tokens, the snippet
 * separator without them) and its budgets, token for token.
 *
 * Bodies are written with ` for " (Q()), so they read like JSON.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "gguf/gguf.h"
#include "server/request.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static const char *shared;
static char *allocs[256];
static size_t n_allocs;

/* s with every ` turned into " (freed at exit). */
static const char *Q(const char *s) {
    char *p = strdup(s);
    for (char *q = p; *q; q++)
        if (*q == '`') *q = '"';
    if (n_allocs < sizeof allocs / sizeof allocs[0]) allocs[n_allocs++] = p;
    return p;
}

static enum dj_status cmpl(const struct dj_vocab *v, const char *body, struct dj_completion_req *r, int *status,
                           const char **param) {
    const char *b = Q(body);
    return server_parse_completion(v, "m", b, strlen(b), r, status, param);
}

static enum dj_status infill(const struct dj_vocab *v, const char *body, struct dj_completion_req *r, int *status,
                             const char **param) {
    const char *b = Q(body);
    return server_parse_infill(v, "m", b, strlen(b), r, status, param);
}

/* The body is refused with status and param (NULL: none) and a message. */
static void refused(const struct dj_vocab *v, bool is_infill, const char *body, int want_status, const char *want_param) {
    struct dj_completion_req r = {0};
    int status = 0;
    const char *param = "unset";
    const enum dj_status st = is_infill ? infill(v, body, &r, &status, &param) : cmpl(v, body, &r, &status, &param);
    const bool pok = want_param ? param && !strcmp(param, want_param) : param == NULL;
    CHECKF(st != DJ_OK && status == want_status && pok && dj_last_error()[0], "%s: status %d, param %s (%s)", body, status,
           param ? param : "NULL", dj_last_error());
    CHECK(r.root == NULL && r.prompt == NULL); /* not set */
}

static void test_completion(const struct dj_vocab *ds, const struct dj_vocab *spm) {
    struct dj_completion_req r;
    int status;
    const char *param;
    CHECK(cmpl(ds, "{`prompt`: `def f():`}", &r, &status, &param) == DJ_OK);
    CHECK(r.logprobs == -1 && !r.fim && r.n_prompt > 1 && r.prompt[0] == vocab_bos(ds) && !r.cons.param &&
          !r.cons.grammar && !r.cons.json_schema && !r.cons.json_object && !r.no_predict);
    server_completion_req_free(&r);
    static const struct {
        const char *lp;
        int32_t want;
    } lps[] = {{"0", 0}, {"5", 5}, {"20", 20}, {"null", -1}};
    for (size_t i = 0; i < 4; i++) {
        char b[128];
        snprintf(b, sizeof b, "{`prompt`: [1, 2], `logprobs`: %s, `echo`: false}", lps[i].lp);
        CHECK(cmpl(ds, b, &r, &status, &param) == DJ_OK && r.logprobs == lps[i].want && r.n_prompt == 2);
        server_completion_req_free(&r);
    }
    static const char *const bad_lp[] = {"21", "-1", "2.5", "true", "`3`", "[1]"};
    for (size_t i = 0; i < 6; i++) {
        char b[128];
        snprintf(b, sizeof b, "{`prompt`: `x`, `logprobs`: %s}", bad_lp[i]);
        refused(ds, false, b, 400, "logprobs");
    }
    refused(ds, false, "{`prompt`: `x`, `echo`: true}", 400, "echo");
    refused(ds, false, "{`prompt`: `x`, `echo`: 1}", 400, "echo");
    refused(ds, false, "{`prompt`: `x`, `model`: `other`}", 404, "model");

    /* suffix: fill-in-the-middle, the prompt kept as text for server_fim_prompt */
    CHECK(cmpl(ds, "{`prompt`: `def f():\\n    `, `suffix`: `\\nf()\\n`, `max_tokens`: 9}", &r, &status, &param) == DJ_OK);
    CHECK(r.fim && r.prompt == NULL && r.n_prompt == 0 && r.max_tokens == 9 &&
          !strcmp(json_string_value(r.fr.prefix), "def f():\n    ") && !strcmp(json_string_value(r.fr.suffix), "\nf()\n") &&
          !r.fr.prompt && !r.fr.extra);
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `suffix`: ``}", &r, &status, &param) == DJ_OK && !r.fim && r.n_prompt == 2);
    server_completion_req_free(&r);
    refused(ds, false, "{`prompt`: [1, 2], `suffix`: `x`}", 400, "prompt");
    refused(ds, false, "{`prompt`: `x`, `suffix`: 5}", 400, "suffix");
    refused(spm, false, "{`prompt`: `x`, `suffix`: `y`}", 400, "suffix");
    CHECK(strstr(dj_last_error(), DJ_SERVER_NO_FIM) != NULL);
    CHECK(cmpl(spm, "{`prompt`: `x`, `suffix`: null}", &r, &status, &param) == DJ_OK && !r.fim);
    server_completion_req_free(&r);
}

static void test_constraint(const struct dj_vocab *ds) {
    struct dj_completion_req r;
    int status;
    const char *param;
    CHECK(cmpl(ds, "{`prompt`: `x`, `grammar`: `root ::= [a-z]+`}", &r, &status, &param) == DJ_OK);
    CHECK(r.cons.grammar && !strcmp(r.cons.grammar, "root ::= [a-z]+") && !strcmp(r.cons.param, "grammar") &&
          !r.cons.json_schema && !r.cons.json_object);
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `grammar`: ``, `response_format`: {`type`: `text`}}", &r, &status, &param) == DJ_OK &&
          !r.cons.param && !r.cons.grammar);
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `json_schema`: {`type`: `array`}}", &r, &status, &param) == DJ_OK);
    CHECK(json_is_object(r.cons.json_schema) && !strcmp(json_string_value(json_object_get(r.cons.json_schema, "type")), "array") &&
          !strcmp(r.cons.param, "json_schema") && !r.cons.json_object);
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `response_format`: {`type`: `json_object`}}", &r, &status, &param) == DJ_OK);
    CHECK(r.cons.json_object && !r.cons.json_schema && !strcmp(r.cons.param, "response_format"));
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `response_format`: {`type`: `json_object`, `schema`: {`type`: `object`}}}", &r, &status,
               &param) == DJ_OK);
    CHECK(!r.cons.json_object && json_is_object(r.cons.json_schema));
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `response_format`: {`type`: `json_schema`, `json_schema`: {`name`: `n`, `schema`: "
                   "{`type`: `integer`}}}}", &r, &status, &param) == DJ_OK);
    CHECK(!r.cons.json_object && json_is_object(r.cons.json_schema) &&
          !strcmp(json_string_value(json_object_get(r.cons.json_schema, "type")), "integer"));
    server_completion_req_free(&r);
    CHECK(cmpl(ds, "{`prompt`: `x`, `response_format`: {`type`: `json_schema`, `json_schema`: {`name`: `n`}}}", &r, &status,
               &param) == DJ_OK && r.cons.json_object && !r.cons.json_schema);
    server_completion_req_free(&r);
    static const struct {
        const char *body, *param;
    } bads[] = {
        {"{`prompt`: `x`, `grammar`: 1}", "grammar"},
        {"{`prompt`: `x`, `json_schema`: `{}`}", "json_schema"},
        {"{`prompt`: `x`, `grammar`: `root ::= [a]`, `json_schema`: {}}", "json_schema"},
        {"{`prompt`: `x`, `grammar`: `root ::= [a]`, `response_format`: {`type`: `json_object`}}", "response_format"},
        {"{`prompt`: `x`, `json_schema`: {}, `response_format`: {`type`: `json_object`}}", "response_format"},
        {"{`prompt`: `x`, `response_format`: `json`}", "response_format"},
        {"{`prompt`: `x`, `response_format`: {}}", "response_format.type"},
        {"{`prompt`: `x`, `response_format`: {`type`: `json_schema`}}", "response_format.json_schema"},
        {"{`prompt`: `x`, `response_format`: {`type`: `json_schema`, `json_schema`: {`schema`: 3}}}",
         "response_format.json_schema.schema"},
        {"{`prompt`: `x`, `response_format`: {`type`: `json_object`, `schema`: []}}", "response_format.schema"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) refused(ds, false, bads[i].body, 400, bads[i].param);
    /* the same fields on /infill */
    CHECK(infill(ds, "{`input_prefix`: ``, `input_suffix`: ``, `json_schema`: {`type`: `string`}}", &r, &status, &param) ==
              DJ_OK && json_is_object(r.cons.json_schema));
    server_completion_req_free(&r);
}

static void test_infill(const struct dj_vocab *ds, const struct dj_vocab *spm) {
    struct dj_completion_req r;
    int status;
    const char *param;
    CHECK(infill(ds, "{`input_prefix`: `a`, `input_suffix`: `b`, `prompt`: `c`, `input_extra`: [{`filename`: `f.py`, "
                     "`text`: `t`}, {`text`: `u`, `filename`: null}], `n_predict`: 7, `max_tokens`: 9, `n`: 3, "
                     "`return_tokens`: true, `temperature`: 0.1, `stream`: true, `cache_prompt`: true, `samplers`: [`top_k`]}",
               &r, &status, &param) == DJ_OK);
    CHECK(r.fim && !strcmp(json_string_value(r.fr.prefix), "a") && !strcmp(json_string_value(r.fr.suffix), "b") &&
          !strcmp(json_string_value(r.fr.prompt), "c") && json_array_size(r.fr.extra) == 2);
    CHECK(r.max_tokens == 7 && r.n == 1 && r.return_tokens && r.stream && !r.no_predict && r.sp.temp == 0.1f &&
          r.logprobs == -1 && r.prompt == NULL);
    server_completion_req_free(&r);
    CHECK(infill(ds, "{`input_prefix`: ``, `input_suffix`: ``, `n_predict`: -1, `max_tokens`: 5}", &r, &status, &param) == DJ_OK &&
          r.max_tokens == 5 && !r.no_predict && !r.fr.prompt && !r.fr.extra);
    server_completion_req_free(&r);
    CHECK(infill(ds, "{`input_prefix`: ``, `input_suffix`: ``, `n_predict`: -1}", &r, &status, &param) == DJ_OK &&
          r.max_tokens == 0 && !r.no_predict);
    server_completion_req_free(&r);
    CHECK(infill(ds, "{`input_prefix`: ``, `input_suffix`: ``, `n_predict`: 0}", &r, &status, &param) == DJ_OK &&
          r.no_predict && r.max_tokens == 0);
    server_completion_req_free(&r);
    static const struct {
        const char *body, *param;
    } bads[] = {
        {"{`input_suffix`: ``}", "input_prefix"},
        {"{`input_prefix`: ``}", "input_suffix"},
        {"{`input_prefix`: null, `input_suffix`: ``}", "input_prefix"},
        {"{`input_prefix`: ``, `input_suffix`: [1]}", "input_suffix"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `prompt`: 3}", "prompt"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `input_extra`: `x`}", "input_extra"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `input_extra`: [{`text`: 1}]}", "input_extra"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `input_extra`: [{`text`: ``, `filename`: 2}]}", "input_extra"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `input_extra`: [3]}", "input_extra"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `n_predict`: -2}", "n_predict"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `n_predict`: 1.5}", "n_predict"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `return_tokens`: 1}", "return_tokens"},
        {"{`input_prefix`: ``, `input_suffix`: ``, `top_k`: `x`}", "top_k"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) refused(ds, true, bads[i].body, 400, bads[i].param);
    refused(ds, true, "{bad", 400, NULL);
    refused(spm, true, "{`input_prefix`: ``, `input_suffix`: ``}", 400, NULL);
    CHECK(strstr(dj_last_error(), DJ_SERVER_NO_FIM) != NULL);
}

/* ---- server_fim_prompt ---------------------------------------------------------------------- */

struct ids {
    dj_token p[4096];
    size_t n;
};

static void add_id(struct ids *x, dj_token t) {
    if (x->n < 4096) x->p[x->n++] = t;
}

/* Appends text's tokens (no BOS), or only its first (head) / last `keep` ones. */
static void add_text(struct ids *x, const struct dj_vocab *v, const char *text, bool special, size_t keep, bool head) {
    dj_token *t = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(v, text, strlen(text), false, special, &t, &n) == DJ_OK);
    const size_t k = keep < n ? keep : n;
    for (size_t i = head ? 0 : n - k; i < (head ? k : n); i++) add_id(x, t[i]);
    free(t);
}

static size_t count(const struct dj_vocab *v, const char *text) {
    struct ids x = {.n = 0};
    add_text(&x, v, text, false, 100000, true);
    return x.n;
}

/* server_fim_prompt of body's parts equals want. */
static void fim_is(const struct dj_vocab *v, const char *body, size_t n_ctx, size_t n_predict, const struct ids *want,
                   const char *what) {
    struct dj_completion_req r;
    int status;
    const char *param;
    CHECK(infill(v, body, &r, &status, &param) == DJ_OK);
    dj_token *got = NULL;
    size_t n = 0;
    CHECK(server_fim_prompt(v, &r.fr, n_ctx, n_predict, &got, &n) == DJ_OK);
    bool same = got && n == want->n;
    for (size_t i = 0; same && i < n; i++) same = got[i] == want->p[i];
    CHECKF(same, "%s: %zu tokens, want %zu", what, n, want->n);
    free(got);
    server_completion_req_free(&r);
}

/* The deepseek-coder vocabulary with REP and SEP ids set (it has no such tokens). */
static struct dj_vocab *with_rep_sep(dj_token rep, dj_token sep) {
    struct gguf_ctx *src = NULL;
    if (gguf_open(test_shared_path(shared, "vocab/ggml-vocab-deepseek-coder.gguf"), &src) != DJ_OK) return NULL;
    struct gguf_writer *w = gguf_writer_create();
    for (size_t i = 0; i < gguf_n_kv(src); i++) gguf_writer_copy_kv(w, src, i);
    gguf_writer_set_u32(w, "tokenizer.ggml.fim_rep_token_id", (uint32_t)rep);
    gguf_writer_set_u32(w, "tokenizer.ggml.fim_sep_token_id", (uint32_t)sep);
    void *mem = NULL;
    size_t size = 0;
    enum dj_status st = gguf_writer_write_memory(w, &mem, &size);
    gguf_writer_destroy(w);
    gguf_close(src);
    struct dj_vocab *v = NULL;
    struct gguf_ctx *ctx = NULL;
    if (st == DJ_OK && gguf_open_memory(mem, size, "rep-sep.gguf", &ctx) == DJ_OK) {
        if (vocab_load_gguf(ctx, &v) != DJ_OK) v = NULL;
        gguf_close(ctx);
    }
    free(mem);
    return v;
}

static void test_fim_prompt(const struct dj_vocab *ds, const struct dj_vocab *spm) {
    struct dj_fim_tokens f;
    CHECK(vocab_fim_tokens(ds, &f));
    const dj_token bos = vocab_bos(ds);
    /* [BOS] PRE prefix prompt SUF suffix MID; FIM markup in the user's text is text, in the prompt a token */
    const char *marker = "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>";
    struct ids w = {.n = 0};
    add_id(&w, bos);
    add_id(&w, f.pre);
    add_text(&w, ds, "def f(x):\n    ", false, 100000, true);
    add_text(&w, ds, "return <\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", true, 100000, true);
    add_id(&w, f.suf);
    add_text(&w, ds, marker, false, 100000, true);
    add_text(&w, ds, "\nprint(f(2))\n", false, 100000, true);
    add_id(&w, f.mid);
    CHECK(count(ds, marker) > 1); /* not the suffix token */
    char body[1024];
    snprintf(body, sizeof body, "{`input_prefix`: `def f(x):\\n    `, `prompt`: `return %s`, `input_suffix`: `%s\\nprint(f(2))\\n`}",
             marker, marker);
    fim_is(ds, body, 4096, 16, &w, "plain");
    /* the snippet separator without REP/SEP tokens, extra context first */
    struct ids w2 = {.n = 0};
    add_text(&w2, ds, "\n\n--- snippet ---\n\n", false, 100000, true);
    add_text(&w2, ds, "A = 1\n", false, 100000, true);
    add_text(&w2, ds, "\n\n--- snippet ---\n\n", false, 100000, true);
    add_text(&w2, ds, "B = 2\n", false, 100000, true);
    add_id(&w2, bos);
    add_id(&w2, f.pre);
    add_text(&w2, ds, "x = ", false, 100000, true);
    add_id(&w2, f.suf);
    add_id(&w2, f.mid);
    fim_is(ds, "{`input_prefix`: `x = `, `input_suffix`: ``, `input_extra`: [{`filename`: `a.py`, `text`: `A = 1\\n`}, "
               "{`text`: `B = 2\\n`}]}", 4096, 16, &w2, "snippets");
    /* the repo-level form: REP myproject, SEP file name per chunk (tmp without one), SEP filename */
    const dj_token rep = 300, sep = 301;
    struct dj_vocab *rs = with_rep_sep(rep, sep);
    CHECK(rs != NULL);
    if (rs) {
        struct ids w3 = {.n = 0};
        add_id(&w3, rep);
        add_text(&w3, rs, "myproject\n", false, 100000, true);
        add_id(&w3, sep);
        add_text(&w3, rs, "a.py\n", false, 100000, true);
        add_text(&w3, rs, "A = 1\n", false, 100000, true);
        add_id(&w3, sep);
        add_text(&w3, rs, "tmp\n", false, 100000, true);
        add_text(&w3, rs, "B = 2\n", false, 100000, true);
        add_id(&w3, sep);
        add_text(&w3, rs, "filename\n", false, 100000, true);
        add_id(&w3, bos);
        add_id(&w3, f.pre);
        add_text(&w3, rs, "x = ", false, 100000, true);
        add_id(&w3, f.suf);
        add_id(&w3, f.mid);
        fim_is(rs, "{`input_prefix`: `x = `, `input_suffix`: ``, `input_extra`: [{`filename`: `a.py`, `text`: `A = 1\\n`}, "
                   "{`text`: `B = 2\\n`}]}", 4096, 16, &w3, "repo-level");
        /* no chunks: still REP and the trailing SEP */
        struct ids w4 = {.n = 0};
        add_id(&w4, rep);
        add_text(&w4, rs, "myproject\n", false, 100000, true);
        add_id(&w4, sep);
        add_text(&w4, rs, "filename\n", false, 100000, true);
        add_id(&w4, bos);
        add_id(&w4, f.pre);
        add_id(&w4, f.suf);
        add_id(&w4, f.mid);
        fim_is(rs, "{`input_prefix`: ``, `input_suffix`: ``}", 4096, 16, &w4, "repo-level, no chunks");
        dj_vocab_free(rs);
    }
    /* budgets, n_ctx 96: B = 48; prefix: its last 36 tokens; suffix: its first 12 - 2 - 3 = 7
     * (a 3-token prompt); extra: its last 96 - 48 - 2 - 2*4 = 38 */
    char pre[2048] = "", suf[2048] = "", ext[2048] = "";
    for (int i = 0; i < 40; i++) {
        char line[32];
        snprintf(line, sizeof line, "a%d = %d\\n", i, i);
        strcat(pre, line);
        line[0] = 'b';
        strcat(suf, line);
        line[0] = 'c';
        strcat(ext, line);
    }
    char unq[3][2048]; /* the same texts unescaped, for the expectation */
    const char *src[3] = {pre, suf, ext};
    for (int k = 0; k < 3; k++) {
        size_t o = 0;
        for (const char *p = src[k]; *p; p++) {
            if (p[0] == '\\' && p[1] == 'n') {
                unq[k][o++] = '\n';
                p++;
            } else {
                unq[k][o++] = *p;
            }
        }
        unq[k][o] = 0;
    }
    const char *prompt = "zzz yy";
    const size_t n_prompt = count(ds, prompt);
    CHECK(n_prompt >= 1 && n_prompt <= 4 && count(ds, unq[0]) > 36 && count(ds, unq[1]) > 12 && count(ds, unq[2]) > 40);
    struct ids all_ex = {.n = 0};
    add_text(&all_ex, ds, "\n\n--- snippet ---\n\n", false, 100000, true);
    add_text(&all_ex, ds, unq[2], false, 100000, true);
    struct ids w5 = {.n = 0};
    const size_t room = 96 - 48 - 2 - 2 * 4;
    for (size_t i = all_ex.n - room; i < all_ex.n; i++) add_id(&w5, all_ex.p[i]);
    add_id(&w5, bos);
    add_id(&w5, f.pre);
    add_text(&w5, ds, unq[0], false, 36, false);
    add_text(&w5, ds, prompt, true, 100000, true);
    add_id(&w5, f.suf);
    add_text(&w5, ds, unq[1], false, 12 - 2 - n_prompt, true);
    add_id(&w5, f.mid);
    char big[8192];
    snprintf(big, sizeof big, "{`input_prefix`: `%s`, `input_suffix`: `%s`, `prompt`: `%s`, `input_extra`: [{`text`: `%s`}]}",
             pre, suf, prompt, ext);
    fim_is(ds, big, 96, 4, &w5, "budgets");
    CHECK(w5.n == room + 2 + 36 + n_prompt + 1 + (12 - 2 - n_prompt) + 1 && w5.n <= 96 - 2 * 4);
    /* no room for extra context (n_predict too large), none for the suffix (a long prompt) */
    struct ids w6 = {.n = 0};
    add_id(&w6, bos);
    add_id(&w6, f.pre);
    add_text(&w6, ds, unq[0], false, 36, false);
    add_text(&w6, ds, unq[1], true, 100000, true); /* the prompt: never cut */
    add_id(&w6, f.suf);
    add_id(&w6, f.mid);
    snprintf(big, sizeof big, "{`input_prefix`: `%s`, `input_suffix`: `%s`, `prompt`: `%s`, `input_extra`: [{`text`: `%s`}]}",
             pre, suf, suf, ext);
    fim_is(ds, big, 96, 40, &w6, "no room");

    /* a vocabulary without FIM tokens */
    struct dj_fim_req fr = {0};
    dj_token *out = NULL;
    size_t n = 0;
    CHECK(server_fim_prompt(spm, &fr, 4096, 16, &out, &n) == DJ_ERR_UNSUPPORTED && out == NULL &&
          strstr(dj_last_error(), DJ_SERVER_NO_FIM));
    CHECK(server_fim_batch(4096) == 2048 && server_fim_batch(100000) == 2048 && server_fim_batch(2048) == 1024);
}

/* A body with "\u0000" in a string is valid JSON: parsed, the string's length kept. */
static void test_body_nul(void) {
    static const char body[] = "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\\u0000b\"}]}";
    json_t *j = server_parse_body(body, sizeof body - 1);
    CHECKF(j != NULL, "a body with \\u0000 in a string refused: %s", dj_last_error());
    if (!j) return;
    const json_t *c = json_object_get(json_array_get(json_object_get(j, "messages"), 0), "content");
    CHECK(json_is_string(c) && json_string_length(c) == 3 && memcmp(json_string_value(c), "a\0b", 3) == 0);
    json_decref(j);
    static const char bad_body[] = "{\"a\":\"\\u0000\""; /* no closing brace */
    CHECK(server_parse_body(bad_body, sizeof bad_body - 1) == NULL);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    test_body_nul();
    struct dj_vocab *ds = NULL, *spm = NULL;
    CHECK(dj_vocab_load_file(test_shared_path(shared, "vocab/ggml-vocab-deepseek-coder.gguf"), &ds) == DJ_OK);
    CHECK(dj_vocab_load_file(test_shared_path(shared, "models/stories260K.gguf"), &spm) == DJ_OK);
    if (ds && spm) {
        test_completion(ds, spm);
        test_constraint(ds);
        test_infill(ds, spm);
        test_fim_prompt(ds, spm);
    }
    dj_vocab_free(ds);
    dj_vocab_free(spm);
    for (size_t i = 0; i < n_allocs; i++) free(allocs[i]);
    TEST_END();
}
