/*
 * test_toolcall.c — the tool-call grammars of every constrained family
 * (src/sample/toolcall.h) against the family's real template and parser.
 *
 * For each family: a golden template (../shared/golden/chat_templates)
 * renders an assistant message with one call and with two; the call text is
 * cut from the render (from the family's trigger to its end-of-turn marker).
 * Checks: chat_syntax_detect gives the family and chat_tool_trigger equals the
 * grammar's trigger; the REQUIRED grammar accepts the rendered text and
 * toolparse reads it back into the same names and arguments; AUTO's lazy
 * grammar accepts the text after the trigger and its full grammar accepts
 * text then the calls; the grammar rejects a wrong name, a missing required
 * argument, a wrong type, a value outside an enum; NAMED restricts the name;
 * parallel false allows exactly one call; with the family's think markers a
 * reasoning block may (or, forced open, must) come first (gpt-oss: the
 * analysis message, then <|start|>assistant; never forced open).  GLM's
 * families (Laguna's templates, with and without GLM-4.5's newlines) get
 * their own bad calls; GLM's and Qwen3-Coder's raw string values are checked
 * to read back as strings.  Then random walks
 * through each grammar (gmatch_next_ranges): every sentence generated must
 * parse (toolparse) into calls whose arguments are valid for the schema.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/toolparse.h"
#include "core/status.h"
#include "sample/grammar.h"
#include "sample/toolcall.h"
#include "test.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The forecast\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"options\":{\"type\":\"object\",\"properties\":{\"wind\":{\"type\":\"boolean\"},\"detail\":{\"type\":\"string\"}},"
    "\"required\":[\"wind\"],\"additionalProperties\":false},"
    "\"note\":{\"type\":\"string\"}},"
    "\"required\":[\"location\",\"days\",\"unit\",\"options\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"description\":\"Ping a host\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"host\":{\"type\":\"string\"}},\"required\":[\"host\"],\"additionalProperties\":false}}}]";

static const char *ARGS1 = "{\"location\": \"Paris, France\", \"days\": 3, \"unit\": \"celsius\", \"options\": {\"wind\": true}}";
static const char *ARGS2 = "{\"host\": \"example.org\"}";

struct fam {
    enum dj_tool_format fmt;
    enum dj_tool_syntax syn;
    const char *tmpl;  /* golden template file; NULL: hand-written text */
    const char *end;   /* the end-of-turn marker after the calls */
    bool parallel;     /* the template renders two calls */
    const char *one, *two; /* hand-written call texts (when tmpl renders none) */
    const char *think_sep; /* between the reasoning block and the calls (NULL: "\n\n") */
};

static const struct fam fams[] = {
    {DJ_TOOL_FORMAT_HERMES, DJ_TOOLS_HERMES, "Qwen-Qwen2.5-7B-Instruct", "<|im_end|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_HERMES, DJ_TOOLS_HERMES, "Qwen-QwQ-32B", "<|im_end|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_LLAMA3, DJ_TOOLS_LLAMA3, "meta-llama-Llama-3.2-3B-Instruct", "<|eot_id|>", false, NULL, NULL},
    {DJ_TOOL_FORMAT_LLAMA3, DJ_TOOLS_LLAMA3, "meta-llama-Llama-3.1-8B-Instruct", "<|eot_id|>", false, NULL, NULL},
    {DJ_TOOL_FORMAT_MISTRAL, DJ_TOOLS_MISTRAL, "Mistral-Small-3.2-24B-Instruct-2506", "<|eos|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_MISTRAL, DJ_TOOLS_MISTRAL, "mistralai-Ministral-3-14B-Reasoning-2512", "<|eos|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_MISTRAL, DJ_TOOLS_MISTRAL, "mistralai-Mistral-Nemo-Instruct-2407", "<|eos|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_DEEPSEEK_V3, DJ_TOOLS_DEEPSEEK_V3, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
     "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_DEEPSEEK_V31, DJ_TOOLS_DEEPSEEK_V31, "deepseek-ai-DeepSeek-V3.1",
     "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_FUNCTIONARY_V31, DJ_TOOLS_FUNCTIONARY_V31, "meetkai-functionary-medium-v3.1", "<|eom_id|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_COMMAND_R, DJ_TOOLS_COMMAND_R, "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|END_OF_TURN_TOKEN|>",
     true, NULL, NULL},
    /* Granite 3.3's template does not render calls: the parser's syntax, written by hand */
    {DJ_TOOL_FORMAT_GRANITE, DJ_TOOLS_GRANITE, NULL, NULL, true,
     "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"days\": 3, \"unit\": "
     "\"celsius\", \"options\": {\"wind\": true}}}]",
     "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"days\": 3, \"unit\": "
     "\"celsius\", \"options\": {\"wind\": true}}}, {\"name\": \"ping\", \"arguments\": {\"host\": \"example.org\"}}]"},
    {DJ_TOOL_FORMAT_KIMI_K2, DJ_TOOLS_KIMI_K2, "moonshotai-Kimi-K2", "<|im_end|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_SOLAR, DJ_TOOLS_SOLAR, "upstage-Solar-Open-100B", "", true, NULL, NULL},
    {DJ_TOOL_FORMAT_NEMOTRON, DJ_TOOLS_NEMOTRON, "NVIDIA-Nemotron-Nano-v2", "<SPECIAL_12>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_APRIEL, DJ_TOOLS_APRIEL, "unsloth-Apriel-1.5", "\n<|end|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_APRIEL, DJ_TOOLS_APRIEL, "Apriel-1.6-15b-Thinker-fixed", "", true, NULL, NULL},
    {DJ_TOOL_FORMAT_MINIMAX_M1, DJ_TOOLS_MINIMAX_M1, "MiniMax-M1", "<end_of_sentence>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_FIREFUNCTION, DJ_TOOLS_FIREFUNCTION, "fireworks-ai-llama-3-firefunction-v2", "<|eot_id|>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_GIGACHAT, DJ_TOOLS_GIGACHAT, "GigaChat3.1-10B-A1.8B", "<|message_sep|>", false, NULL, NULL},
    {DJ_TOOL_FORMAT_QWEN3_CODER, DJ_TOOLS_QWEN3_CODER, "Qwen3.5-4B", "<|im_end|>", true, NULL, NULL},
    /* GLM's syntax: Laguna XS.2 writes GLM-4.5's newlines, S-2.1 none */
    {DJ_TOOL_FORMAT_GLM, DJ_TOOLS_GLM, "poolside-Laguna-XS.2", "</assistant>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_GLM, DJ_TOOLS_GLM, "poolside-Laguna-S-2.1", "</assistant>", true, NULL, NULL},
    {DJ_TOOL_FORMAT_GLM, DJ_TOOLS_GLM, "poolside-Laguna-XS-2.1", "</assistant>", true, NULL, NULL},
    /* harmony: the template renders one call a message (its " to=functions." header first) */
    {DJ_TOOL_FORMAT_GPT_OSS, DJ_TOOLS_GPT_OSS, "openai-gpt-oss-120b", "<|call|>", false, NULL, NULL, "<|start|>assistant"},
};
#define N_FAMS (sizeof fams / sizeof fams[0])

static const char *shared;

/* ---- helpers ---- */

static char *slurp(const char *rel) {
    size_t n;
    return test_read_file(test_shared_path(shared, rel), &n);
}

static struct dj_grammar *parse_gbnf(const char *src) {
    struct dj_grammar *g = NULL;
    if (!src) return NULL;
    enum dj_status st = grammar_parse(src, strlen(src), NULL, NULL, &g);
    CHECKF(st == DJ_OK, "grammar_parse: %s\n%s", dj_last_error(), src);
    return g;
}

static bool match(const struct dj_grammar *g, const char *s) { return g && grammar_match(g, s, strlen(s)); }

/* s with the first occurrence of a replaced by b (malloc'd), NULL if a is absent */
static char *subst(const char *s, const char *a, const char *b) {
    const char *p = strstr(s, a);
    if (!p) return NULL;
    size_t na = strlen(a), nb = strlen(b), n = strlen(s);
    char *r = malloc(n - na + nb + 1);
    memcpy(r, s, (size_t)(p - s));
    memcpy(r + (p - s), b, nb);
    memcpy(r + (p - s) + nb, p + na, n - (size_t)(p - s) - na + 1);
    return r;
}

static char *cat2(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *r = malloc(na + nb + 1);
    memcpy(r, a, na), memcpy(r + na, b, nb + 1);
    return r;
}

/* ---- parsing back ---- */

struct calls {
    json_t *list; /* [[name, args text], ...] */
    char args[64][4096];
    size_t n_args[64];
    char names[64][64];
    size_t n;
    bool overflow;
};

static void on_delta(void *ud, const struct dj_chat_delta *d) {
    struct calls *c = ud;
    if (d->kind == DJ_DELTA_TOOL_START) {
        if (c->n == 64) {
            c->overflow = true;
            return;
        }
        snprintf(c->names[c->n], sizeof c->names[0], "%s", d->name);
        c->n_args[c->n] = 0;
        c->n++;
    } else if (d->kind == DJ_DELTA_TOOL_ARGS && c->n && !c->overflow) {
        size_t k = c->n - 1;
        if (c->n_args[k] + d->n < sizeof c->args[0]) {
            memcpy(c->args[k] + c->n_args[k], d->text, d->n);
            c->n_args[k] += d->n;
            c->args[k][c->n_args[k]] = '\0';
        } else {
            c->overflow = true;
        }
    }
}

static enum dj_status parse_back(const struct dj_chat_syntax *syn, const char *text, struct calls *c) {
    memset(c, 0, sizeof *c);
    struct dj_toolparse *p = toolparse_new(syn, true, true, 7);
    toolparse_feed(p, text, strlen(text), on_delta, c);
    enum dj_status st = toolparse_finish(p, on_delta, c);
    toolparse_free(p);
    return st;
}

static bool same_json(const char *a, const char *b) {
    json_t *x = json_loads(a, 0, NULL), *y = json_loads(b, 0, NULL);
    bool ok = x && y && json_equal(x, y);
    json_decref(x), json_decref(y);
    return ok;
}

/* Are args valid for the tool's schema (the TOOLS above, checked by hand)? */
static bool args_valid(const char *name, const char *text) {
    json_t *a = json_loads(text, 0, NULL);
    bool ok = json_is_object(a);
    const char *k;
    json_t *v;
    if (ok && !strcmp(name, "get_weather")) {
        json_t *unit = json_object_get(a, "unit"), *opt = json_object_get(a, "options");
        ok = json_is_string(json_object_get(a, "location")) && json_is_integer(json_object_get(a, "days")) &&
             json_is_string(unit) && json_is_object(opt);
        ok = ok && (!strcmp(json_string_value(unit), "celsius") || !strcmp(json_string_value(unit), "fahrenheit"));
        ok = ok && json_is_boolean(json_object_get(opt, "wind"));
        json_t *det = opt ? json_object_get(opt, "detail") : NULL, *note = json_object_get(a, "note");
        ok = ok && (!det || json_is_string(det)) && (!note || json_is_string(note));
        json_object_foreach(a, k, v) ok = ok && (!strcmp(k, "location") || !strcmp(k, "days") || !strcmp(k, "unit") ||
                                                 !strcmp(k, "options") || !strcmp(k, "note"));
        json_object_foreach(opt, k, v) ok = ok && (!strcmp(k, "wind") || !strcmp(k, "detail"));
    } else if (ok && !strcmp(name, "ping")) {
        ok = json_is_string(json_object_get(a, "host")) && json_object_size(a) == 1;
    } else {
        ok = false;
    }
    json_decref(a);
    return ok;
}

/* ---- rendering ---- */

/* The assistant's call text for n_calls calls, cut from a render of the
 * family's template (malloc'd; NULL on failure). */
static char *render_calls(const struct fam *f, struct dj_chat_template *t, json_t *tools, int n_calls) {
    char buf[2048];
    snprintf(buf, sizeof buf,
             "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"Xk3P9aQ2z\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"arguments\":%s}}%s%s%s]}]",
             ARGS1, n_calls == 2 ? ",{\"id\":\"b7TzL0mW4\",\"type\":\"function\",\"function\":{\"name\":\"ping\",\"arguments\":" : "",
             n_calls == 2 ? ARGS2 : "", n_calls == 2 ? "}}" : "");
    json_t *raw = json_loads(buf, 0, NULL), *msgs = chat_normalize_messages(raw);
    json_decref(raw);
    json_t *kw = json_pack("{s:s, s:s}", "datetime", "2026-01-15", "functions", "[]"); /* firefunction reads these */
    struct dj_jinja_out o = {0};
    enum dj_status st = chat_render(t, msgs, tools, kw, false, 1768471200, &o);
    json_decref(msgs), json_decref(kw);
    CHECKF(st == DJ_OK, "%s: render: %s", f->tmpl, dj_last_error());
    if (st) return NULL;
    const char *trig = toolcall_format_trigger(f->fmt, true);
    const char *u = strstr(o.text, "Weather in Paris?");
    const char *s = u ? strstr(u, trig) : NULL;
    const char *e = s ? (*f->end ? strstr(s, f->end) : s + strlen(s)) : NULL;
    CHECKF(s && e, "%s: no call text in the render: %s", f->tmpl, o.text);
    char *r = NULL;
    if (s && e) {
        r = malloc((size_t)(e - s) + 1);
        memcpy(r, s, (size_t)(e - s));
        r[e - s] = '\0';
    }
    jinja_out_free(&o);
    return r;
}

/* ---- grammars ---- */

struct gset {
    struct dj_grammar *full, *lazy;
    char *trigger;
};

static bool build(const struct fam *f, enum dj_tool_choice choice, const char *name, bool parallel,
                  const struct dj_chat_syntax *syn, bool think, bool forced, struct gset *gs) {
    struct dj_toolcall_opts o = toolcall_default_opts();
    o.format = f->fmt;
    o.choice = choice;
    o.name = name;
    o.parallel = parallel;
    if (think) {
        o.think_open = syn->think_open;
        o.think_close = syn->think_close;
        o.think_forced_open = forced;
    }
    struct dj_toolcall_grammar tg = {0};
    enum dj_status st = toolcall_grammar_build(TOOLS, strlen(TOOLS), &o, &tg);
    CHECKF(st == DJ_OK, "%s: build: %s", toolcall_format_name(f->fmt), dj_last_error());
    memset(gs, 0, sizeof *gs);
    if (st) return false;
    gs->full = parse_gbnf(tg.gbnf);
    gs->lazy = parse_gbnf(tg.lazy_gbnf);
    gs->trigger = tg.trigger;
    tg.trigger = NULL;
    toolcall_grammar_free(&tg);
    return gs->full && gs->lazy;
}

static void gset_free(struct gset *g) {
    grammar_free(g->full), grammar_free(g->lazy), free(g->trigger);
    memset(g, 0, sizeof *g);
}

/* ---- random sentences ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000) return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | ((c >> 6) & 63)), o[2] = (char)(0x80 | (c & 63)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | ((c >> 12) & 63)), o[2] = (char)(0x80 | ((c >> 6) & 63));
    o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static const char *walk_think_close; /* the marker that ends the reasoning, for the walks to find */

/* A random sentence of g (malloc'd), or NULL when the walk ran too long. */
static char *random_sentence(const struct dj_grammar *g) {
    struct dj_gmatch *m = NULL;
    if (gmatch_create(g, &m) != DJ_OK) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    uint32_t r[2 * 256];
    for (int steps = 0; steps < 20000; steps++) {
        bool late = n > 200;
        size_t k = gmatch_next_ranges(m, r, 256);
        if (gmatch_can_end(m) && (rnd() % 16 == 0 || late || !k)) {
            out[n] = '\0';
            gmatch_free(m);
            return out;
        }
        /* or close what is open: a string, a container, a value (with a newline, which a JSON string cannot
         * hold: an XML end marker inside a JSON string ends the value early, a known limit), the reasoning */
        if (late && rnd() % 2) {
            const char *cand[] = {"\"", "}", "]", "\n</parameter>\n", "\n</arg_value>", walk_think_close ? walk_think_close : "\""};
            size_t j0 = rnd() % 6;
            bool took = false;
            for (size_t j = 0; j < 6 && !took; j++) {
                const char *cs = cand[(j0 + j) % 6];
                size_t nc = strlen(cs);
                if (n + nc + 1 < cap && gmatch_accept_bytes(m, cs, nc)) memcpy(out + n, cs, nc), n += nc, took = true;
            }
            if (took) continue;
        }
        if (k > 256) k = 256;
        if (!k) break;
        uint32_t c = 0;
        bool chosen = false;
        if (late && rnd() % 4) { /* steer towards an end: the structure (one-character ranges: quotes, brackets, markers) */
            size_t narrow[256], nn = 0;
            for (size_t i = 0; i < k; i++)
                if (r[2 * i + 1] - r[2 * i] < 2) narrow[nn++] = i;
            if (nn) {
                size_t i = narrow[rnd() % nn];
                c = r[2 * i] + (uint32_t)(rnd() % (r[2 * i + 1] - r[2 * i] + 1));
                chosen = true;
            }
        }
        for (int tries = 0; tries < 8 && !chosen; tries++) {
            size_t i = rnd() % k;
            uint32_t lo = r[2 * i], hi = r[2 * i + 1];
            if (lo < 0x80 && rnd() % 8) hi = hi < 0x7F ? hi : 0x7F; /* mostly ASCII */
            else if (hi > 0x2FFF && rnd() % 2) hi = lo > 0x2FFF ? lo : 0x2FFF;
            c = lo + (uint32_t)(rnd() % ((uint64_t)hi - lo + 1));
            if ((c >= 0xD800 && c <= 0xDFFF) || c == 0) continue; /* NUL: no token writes it, and strings end there */
            chosen = true;
        }
        if (!chosen) continue;
        char b[4];
        size_t nb = put_utf8(c, b);
        if (n + nb + 1 >= cap) break;
        if (gmatch_accept_bytes(m, b, nb)) memcpy(out + n, b, nb), n += nb;
    }
    gmatch_free(m);
    if (getenv("TC_DEBUG")) fprintf(stderr, "walk did not end (%zu bytes): ...%.200s\n", n, out + (n > 200 ? n - 200 : 0));
    free(out);
    return NULL;
}

/* ---- the checks ---- */

static void check_parse(const struct fam *f, const struct dj_chat_syntax *syn, const char *text, int n_calls) {
    struct calls c;
    enum dj_status st = parse_back(syn, text, &c);
    CHECKF(st == DJ_OK, "%s: toolparse: %s on %s", toolcall_format_name(f->fmt), dj_last_error(), text);
    CHECKF(c.n == (size_t)n_calls, "%s: %zu calls parsed, want %d: %s", toolcall_format_name(f->fmt), c.n, n_calls, text);
    if (c.n >= 1) CHECKF(!strcmp(c.names[0], "get_weather") && same_json(c.args[0], ARGS1), "%s: call 0: %s %s",
                         toolcall_format_name(f->fmt), c.names[0], c.args[0]);
    if (c.n >= 2) CHECKF(!strcmp(c.names[1], "ping") && same_json(c.args[1], ARGS2), "%s: call 1: %s %s",
                         toolcall_format_name(f->fmt), c.names[1], c.args[1]);
}

static size_t n_walks_total, n_walks_parsed;

static void check_walks(const struct fam *f, const struct dj_chat_syntax *syn, const struct dj_grammar *g, int n, bool auto_mode) {
    size_t done = 0;
    walk_think_close = syn->think_close;
    for (int i = 0; i < n; i++) {
        char *s = random_sentence(g);
        if (!s) continue;
        done++;
        struct calls c;
        enum dj_status st = parse_back(syn, s, &c);
        bool ok = st == DJ_OK && !c.overflow && (auto_mode || c.n >= 1);
        for (size_t k = 0; ok && k < c.n; k++) ok = args_valid(c.names[k], c.args[k]);
        CHECKF(ok, "%s: a sentence of the grammar does not parse to valid calls (%s, %zu calls, args %s): %s",
               toolcall_format_name(f->fmt), st ? dj_last_error() : "ok", c.n, c.n ? c.args[0] : "-", s);
        n_walks_parsed += ok;
        if (!ok && getenv("TC_DEBUG")) {
            FILE *fp = fopen("/tmp/tc_fail.txt", "ab");
            if (fp) fprintf(fp, "\n=== %s %s\n%s\n", toolcall_format_name(f->fmt), auto_mode ? "auto" : "req", s), fclose(fp);
        }
        free(s);
    }
    n_walks_total += done;
    CHECKF(done >= (size_t)n / 2, "%s: only %zu of %d random walks ended", toolcall_format_name(f->fmt), done, n);
}

static void test_family(const struct fam *f) {
    const char *fname = toolcall_format_name(f->fmt);
    struct dj_chat_template *t = NULL;
    struct dj_chat_syntax syn = {0};
    char *one = NULL, *two = NULL;
    json_t *tools = json_loads(TOOLS, 0, NULL);
    if (f->tmpl) {
        char rel[256];
        snprintf(rel, sizeof rel, "golden/chat_templates/templates/%s.jinja", f->tmpl);
        size_t n = 0;
        char *src = test_read_file(test_shared_path(shared, rel), &n);
        CHECKF(src != NULL, "%s: cannot read", rel);
        if (!src) return;
        if (n && src[n - 1] == '\n') n--; /* keep_trailing_newline=False */
        CHECKF(chat_template_create(src, n, "<|bos|>", "<|eos|>", &t) == DJ_OK, "%s: %s", f->tmpl, dj_last_error());
        free(src);
        if (!t) return;
        syn = t->syn;
        one = render_calls(f, t, tools, 1);
        two = f->parallel ? render_calls(f, t, tools, 2) : NULL;
    } else {
        char rel[] = "golden/chat_templates/templates/ibm-granite-granite-3.3-2B-Instruct.jinja";
        char *src = slurp(rel);
        syn = chat_syntax_detect(src, src ? strlen(src) : 0);
        free(src);
        one = strdup(f->one);
        two = strdup(f->two);
    }
    json_decref(tools);
    CHECKF(syn.tools == f->syn, "%s: detected %s", f->tmpl ? f->tmpl : fname, chat_tool_syntax_name(syn.tools));
    CHECKF(!strcmp(toolcall_format_trigger(f->fmt, true), chat_tool_trigger(f->syn)), "%s: trigger %s vs parser %s", fname,
           toolcall_format_trigger(f->fmt, true), chat_tool_trigger(f->syn));
    if (!one) goto out;
    struct dj_chat_syntax nothink = syn;
    nothink.think_forced_open = false;
    /* the rendered text parses back */
    check_parse(f, &nothink, one, 1);
    if (two) check_parse(f, &nothink, two, 2);
    /* REQUIRED, parallel */
    struct gset g;
    if (build(f, DJ_TOOL_REQUIRED, NULL, true, &syn, false, false, &g)) {
        CHECKF(match(g.full, one), "%s (%s): REQUIRED rejects the rendered call:\n%s", fname, f->tmpl, one);
        if (two) CHECKF(match(g.full, two), "%s (%s): REQUIRED rejects the rendered calls:\n%s", fname, f->tmpl, two);
        CHECK(!match(g.full, ""));
        CHECKF(!match(g.full, "Sure, let me call it."), "%s", fname);
        /* the wrong name, a missing argument, a wrong type, a value not in the enum, an unknown key */
        bool xml = f->fmt == DJ_TOOL_FORMAT_QWEN3_CODER, glm = f->fmt == DJ_TOOL_FORMAT_GLM;
        const char *subs[][2] = {
            {"get_weather", "get_wether"},
            {xml ? "<parameter=location>\nParis, France\n</parameter>\n" : "\"location\": \"Paris, France\", ", ""},
            {xml ? "<parameter=days>\n3\n" : "\"days\": 3", xml ? "<parameter=days>\nthree\n" : "\"days\": \"3\""},
            {xml ? "\ncelsius\n" : "\"celsius\"", xml ? "\nkelvin\n" : "\"kelvin\""},
            {"true", "1"},
            {xml ? "</parameter>\n</function>" : "{\"wind\": true}}", xml ? "</parameter>\n<parameter=x>\n1\n</parameter>\n</function>" : "{\"wind\": true}, \"x\": 1}"},
        };
        const char *glm_subs[][2] = {
            {"get_weather", "get_wether"},
            {"<arg_key>location</arg_key>", "<arg_key>place</arg_key>"},
            {"<arg_value>3<", "<arg_value>three<"},
            {">celsius<", ">kelvin<"},
            {"true", "1"},
            {"<arg_key>days", "<arg_key>x</arg_key><arg_value>1</arg_value><arg_key>days"},
            {"<arg_key>unit", "<arg_key>days</arg_key><arg_value>4</arg_value><arg_key>unit"}, /* a key twice */
            {"Paris, France", "42"},                                                            /* reads back as a number */
        };
        const size_t n_subs = glm ? sizeof glm_subs / sizeof glm_subs[0] : sizeof subs / sizeof subs[0];
        for (size_t i = 0; i < n_subs; i++) {
            const char *from = glm ? glm_subs[i][0] : subs[i][0], *to = glm ? glm_subs[i][1] : subs[i][1];
            char *bad = subst(one, from, to);
            CHECKF(bad != NULL, "%s: '%s' not in the rendered text %s", fname, from, one);
            if (bad) CHECKF(!match(g.full, bad), "%s: REQUIRED accepts a bad call:\n%s", fname, bad);
            free(bad);
        }
        if (glm) { /* a missing required argument: location's pair cut */
            const char *a = strstr(one, "<arg_key>location"), *z = a ? strstr(a, "<arg_key>days") : NULL;
            CHECK(a && z);
            if (a && z) {
                char *bad = malloc(strlen(one) + 1);
                memcpy(bad, one, (size_t)(a - one));
                strcpy(bad + (a - one), z);
                CHECKF(!match(g.full, bad), "%s: REQUIRED accepts a call without location:\n%s", fname, bad);
                free(bad);
            }
        }
        /* trailing text after the calls */
        char *trail = cat2(one, " and more");
        CHECKF(!match(g.full, trail), "%s: accepts text after the calls", fname);
        free(trail);
        /* AUTO's lazy grammar is the same calls after the trigger */
        const char *after = one + strlen(g.trigger);
        CHECKF(!strncmp(one, g.trigger, strlen(g.trigger)) && match(g.lazy, after), "%s: lazy rejects %s", fname, after);
        check_walks(f, &nothink, g.full, 40, false);
        gset_free(&g);
    }
    /* parallel false: exactly one call */
    if (build(f, DJ_TOOL_REQUIRED, NULL, false, &syn, false, false, &g)) {
        CHECKF(match(g.full, one), "%s: parallel false rejects one call", fname);
        if (two) CHECKF(!match(g.full, two), "%s: parallel false accepts two calls", fname);
        gset_free(&g);
    }
    /* NAMED */
    if (build(f, DJ_TOOL_NAMED, "ping", true, &syn, false, false, &g)) {
        CHECKF(!match(g.full, one), "%s: NAMED ping accepts get_weather", fname);
        gset_free(&g);
    }
    if (build(f, DJ_TOOL_NAMED, "get_weather", false, &syn, false, false, &g)) {
        CHECKF(match(g.full, one), "%s: NAMED get_weather rejects it", fname);
        gset_free(&g);
    }
    /* AUTO, full grammar: text then calls; text alone; calls alone */
    if (build(f, DJ_TOOL_AUTO, NULL, true, &syn, false, false, &g)) {
        bool at_start = f->fmt == DJ_TOOL_FORMAT_LLAMA3;
        char *tc = cat2("Let me check that. ", one);
        CHECKF(match(g.full, one), "%s: AUTO rejects the calls alone", fname);
        CHECKF(match(g.full, "Just an answer."), "%s: AUTO rejects text", fname);
        CHECKF(match(g.full, tc) == !at_start, "%s: AUTO text then calls", fname);
        char *tt = cat2("text ", g.trigger);
        char *tt2 = cat2(tt, " more text");
        CHECKF(!match(g.full, tt2), "%s: AUTO free text contains the trigger", fname);
        free(tc), free(tt), free(tt2);
        check_walks(f, &nothink, g.full, 20, true);
        gset_free(&g);
    }
    /* reasoning first */
    if (syn.think_open && syn.think_close) {
        char pre[512];
        const char *sep = f->think_sep ? f->think_sep : "\n\n";
        snprintf(pre, sizeof pre, "%sThe user wants the weather; call get_weather.%s%s", syn.think_open, syn.think_close, sep);
        char *with = cat2(pre, one), *inside = NULL;
        if (build(f, DJ_TOOL_REQUIRED, NULL, true, &syn, true, false, &g)) {
            CHECKF(match(g.full, with), "%s: a reasoning block before the calls is rejected:\n%s", fname, with);
            CHECKF(match(g.full, one), "%s: calls without reasoning are rejected", fname);
            check_parse(f, &nothink, with, 1);
            check_walks(f, &nothink, g.full, 20, false);
            gset_free(&g);
        }
        /* the prompt ends inside the think block: think text, close, calls */
        snprintf(pre, sizeof pre, "The user wants the weather.%s\n", syn.think_close);
        char *forced = cat2(pre, one);
        inside = cat2("The user wants the weather. ", one);
        struct dj_chat_syntax fo = syn;
        fo.think_forced_open = true;
        /* harmony: the prompt never ends inside a message (the option is ignored) */
        if (f->fmt != DJ_TOOL_FORMAT_GPT_OSS && build(f, DJ_TOOL_REQUIRED, NULL, true, &syn, true, true, &g)) {
            CHECKF(match(g.full, forced), "%s: forced-open reasoning then calls rejected:\n%s", fname, forced);
            CHECKF(!match(g.full, one), "%s: forced-open accepts calls inside the reasoning", fname);
            CHECKF(!match(g.full, inside), "%s: forced-open accepts calls with no think close", fname);
            struct calls c;
            CHECKF(parse_back(&fo, forced, &c) == DJ_OK && c.n == 1, "%s: forced-open text does not parse: %s", fname,
                   dj_last_error());
            check_walks(f, &fo, g.full, 20, false);
            gset_free(&g);
        }
        free(with), free(forced), free(inside);
    }
out:
    free(one), free(two);
    chat_template_free(t);
}

/* Errors and families without a JSON-argument syntax. */
static void test_errors(void) {
    struct dj_toolcall_opts o = toolcall_default_opts();
    struct dj_toolcall_grammar tg = {0};
    o.format = DJ_TOOL_FORMAT_N;
    CHECK(toolcall_grammar_build(TOOLS, strlen(TOOLS), &o, &tg) == DJ_ERR_INVALID);
    CHECK(toolcall_format_name(DJ_TOOL_FORMAT_N) == NULL && toolcall_format_trigger(DJ_TOOL_FORMAT_N, true) == NULL);
    /* a name the raw-name syntaxes cannot carry: Functionary v3.1 wants [A-Za-z0-9_.:-] */
    const char *odd = "[{\"type\":\"function\",\"function\":{\"name\":\"get weather\"}}]";
    o.format = DJ_TOOL_FORMAT_FUNCTIONARY_V31;
    CHECK(toolcall_grammar_build(odd, strlen(odd), &o, &tg) == DJ_ERR_UNSUPPORTED);
    /* Mistral falls back to its JSON-list form for it */
    o.format = DJ_TOOL_FORMAT_MISTRAL;
    o.choice = DJ_TOOL_REQUIRED;
    CHECK(toolcall_grammar_build(odd, strlen(odd), &o, &tg) == DJ_OK);
    struct dj_grammar *g = parse_gbnf(tg.gbnf);
    CHECK(match(g, "[TOOL_CALLS][{\"name\": \"get weather\", \"arguments\": {}}]"));
    CHECK(!match(g, "[TOOL_CALLS]get weather[ARGS]{}"));
    grammar_free(g);
    toolcall_grammar_free(&tg);
    /* Qwen3-Coder: a schema with no XML grammar is UNSUPPORTED (the server then leaves output free) */
    const char *any = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                      "{\"x\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},\"required\":[\"x\"]}}}]";
    o.format = DJ_TOOL_FORMAT_QWEN3_CODER;
    CHECK(toolcall_grammar_build(any, strlen(any), &o, &tg) == DJ_ERR_UNSUPPORTED);
    CHECK(strstr(dj_last_error(), "anyOf") != NULL);
    /* GLM: the same limits, named for GLM; a name with whitespace or '<' cannot be read back */
    o.format = DJ_TOOL_FORMAT_GLM;
    CHECK(toolcall_grammar_build(any, strlen(any), &o, &tg) == DJ_ERR_UNSUPPORTED);
    CHECK(strstr(dj_last_error(), "anyOf") != NULL && strstr(dj_last_error(), "GLM") != NULL);
    CHECK(toolcall_grammar_build(odd, strlen(odd), &o, &tg) == DJ_ERR_UNSUPPORTED);
    const char *lt = "[{\"type\":\"function\",\"function\":{\"name\":\"a<b\"}}]";
    CHECK(toolcall_grammar_build(lt, strlen(lt), &o, &tg) == DJ_ERR_UNSUPPORTED);
    /* GLM: a required key holding </arg_key> cannot be written; an optional one is left out */
    const char *keys = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                       "{\"a</arg_key>\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}}}]";
    CHECK(toolcall_grammar_build(keys, strlen(keys), &o, &tg) == DJ_OK);
    g = parse_gbnf(tg.gbnf);
    CHECK(match(g, "<tool_call>f\n<arg_key>b</arg_key>\n<arg_value>7</arg_value>\n</tool_call>"));
    CHECK(match(g, "<tool_call>f<arg_key>b</arg_key><arg_value>7</arg_value></tool_call>"));
    CHECK(!match(g, "<tool_call>f\n<arg_key>a</arg_key></arg_key>\n<arg_value>x</arg_value>\n<arg_key>b</arg_key>\n"
                    "<arg_value>7</arg_value>\n</tool_call>"));
    CHECK(!match(g, "<tool_call>f\n</tool_call>")); /* b is required */
    grammar_free(g);
    toolcall_grammar_free(&tg);
    const char *keys_req = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                           "{\"a</arg_key>\":{\"type\":\"string\"}},\"required\":[\"a</arg_key>\"]}}}]";
    CHECK(toolcall_grammar_build(keys_req, strlen(keys_req), &o, &tg) == DJ_ERR_UNSUPPORTED);
    /* a tool without parameters: the bare call, which reads back as {} */
    const char *bare = "[{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";
    CHECK(toolcall_grammar_build(bare, strlen(bare), &o, &tg) == DJ_OK);
    g = parse_gbnf(tg.gbnf);
    CHECK(match(g, "<tool_call>now\n</tool_call>") && !match(g, "<tool_call>now\n<arg_key>x</arg_key>\n"
                                                              "<arg_value>1</arg_value>\n</tool_call>"));
    struct dj_chat_syntax gsyn = {.tools = DJ_TOOLS_GLM};
    struct calls c;
    CHECK(parse_back(&gsyn, "<tool_call>now\n</tool_call>", &c) == DJ_OK && c.n == 1 && same_json(c.args[0], "{}"));
    grammar_free(g);
    toolcall_grammar_free(&tg);
    /* gpt-oss: the header's name is [A-Za-z0-9_./-]; others are left out, none left is UNSUPPORTED */
    o.format = DJ_TOOL_FORMAT_GPT_OSS;
    CHECK(toolcall_grammar_build(odd, strlen(odd), &o, &tg) == DJ_ERR_UNSUPPORTED);
    const char *two = "[{\"type\":\"function\",\"function\":{\"name\":\"a:b\"}},{\"type\":\"function\",\"function\":"
                      "{\"name\":\"fs/read\",\"parameters\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\"}},"
                      "\"required\":[\"p\"],\"additionalProperties\":false}}}]";
    CHECK(toolcall_grammar_build(two, strlen(two), &o, &tg) == DJ_OK);
    g = parse_gbnf(tg.gbnf);
    const char *fs = "<|channel|>commentary to=functions.fs/read <|constrain|>json<|message|>{\"p\": \"x\"}";
    CHECK(match(g, fs) && !match(g, "<|channel|>commentary to=functions.a:b <|constrain|>json<|message|>{}"));
    struct dj_chat_syntax hsyn = {.tools = DJ_TOOLS_GPT_OSS};
    CHECK(parse_back(&hsyn, fs, &c) == DJ_OK && c.n == 1 && !strcmp(c.names[0], "fs/read") && same_json(c.args[0], "{\"p\": \"x\"}"));
    /* harmony: no text between the messages, no final message, no second call */
    CHECK(!match(g, "<|channel|>final<|message|>Hi"));
    CHECK(!match(g, " to=functions.fs/read<|channel|>commentary json<|message|>{\"p\": \"x\"}<|call|>"));
    CHECK(!match(g, "<|channel|>commentary to=functions.fs/read<|channel|>commentary json<|message|>{\"p\": \"x\"}"));
    CHECK(!match(g, "<|channel|>commentary to=functions.fs/read json<|message|>{\"p\": \"x\"}"
                    "<|start|>assistant<|channel|>commentary to=functions.fs/read json<|message|>{\"p\": \"y\"}"));
    grammar_free(g);
    toolcall_grammar_free(&tg);
}

/* Qwen3-Coder and GLM string values: text the parser would read as JSON is not allowed. */
static void test_xml_strings(enum dj_tool_format fmt) {
    const bool glm = fmt == DJ_TOOL_FORMAT_GLM;
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                        "{\"s\":{\"type\":\"string\"},\"n\":{\"type\":[\"integer\",\"null\"]},"
                        "\"e\":{\"enum\":[\"a b\",\"42\",\"true\",7,null,\" x\"]}},\"required\":[\"s\"]}}}]";
    struct dj_toolcall_opts o = toolcall_default_opts();
    o.format = fmt;
    o.choice = DJ_TOOL_REQUIRED;
    struct dj_toolcall_grammar tg = {0};
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK);
    struct dj_grammar *g = parse_gbnf(tg.gbnf);
    static const char *const ok[] = {"hello", "", "  spaced", "12abc", "1.", "-", "1e", "true story", "t", "fals", "null",
                                     "\"quoted\"", "x</paramete", "3 4", "-0x", "2026-01-15", "x</arg_valu"};
    static const char *const bad[] = {"12", "-3.5e+7", "0", "true", "false", " 42", "true  ", "{\"a\": 1}", "[1]",
                                      "a</parameter>b", "1.5\n", "a</arg_value>b"};
    /* the value's end marker of the other family is plain text */
    const char *other_end = glm ? "</parameter>" : "</arg_value>";
    const char *wrap = glm ? "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>%s</arg_value>\n</tool_call>"
                           : "<tool_call>\n<function=f>\n<parameter=s>\n%s\n</parameter>\n</function>\n</tool_call>";
    struct dj_chat_syntax syn = {.tools = glm ? DJ_TOOLS_GLM : DJ_TOOLS_QWEN3_CODER};
    char buf[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(buf, sizeof buf, wrap, ok[i]);
        CHECKF(match(g, buf), "%s: string value '%s' rejected", toolcall_format_name(fmt), ok[i]);
        struct calls c;
        CHECK(parse_back(&syn, buf, &c) == DJ_OK && c.n == 1);
        json_t *a = json_loads(c.args[0], 0, NULL);
        CHECKF(json_is_string(json_object_get(a, "s")) && !strcmp(json_string_value(json_object_get(a, "s")), ok[i]),
               "%s: '%s' reads back as %s", toolcall_format_name(fmt), ok[i], c.args[0]);
        json_decref(a);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(buf, sizeof buf, wrap, bad[i]);
        bool plain = strstr(bad[i], other_end) != NULL;
        CHECKF(match(g, buf) == plain, "%s: string value '%s' %s", toolcall_format_name(fmt), bad[i],
               plain ? "rejected" : "accepted");
    }
    /* integer-or-null: only integers; enum: the safe values only */
    const char *n_ok = glm ? "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>x</arg_value>\n<arg_key>n</arg_key>\n"
                             "<arg_value>-5</arg_value>\n<arg_key>e</arg_key>\n<arg_value>a b</arg_value>\n</tool_call>"
                           : "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n<parameter=n>\n-5\n</parameter>\n"
                             "<parameter=e>\na b\n</parameter>\n</function>\n</tool_call>";
    CHECK(match(g, n_ok));
    const char *l = glm ? ">" : "\n", *r = glm ? "<" : "\n";
    char f5[16], fnull[16], fab[16], f42[16], f7[16];
    snprintf(f5, sizeof f5, "%s-5%s", l, r), snprintf(fnull, sizeof fnull, "%snull%s", l, r);
    snprintf(fab, sizeof fab, "%sa b%s", l, r), snprintf(f42, sizeof f42, "%s42%s", l, r), snprintf(f7, sizeof f7, "%s7%s", l, r);
    char *n_null = subst(n_ok, f5, fnull), *e42 = subst(n_ok, fab, f42), *e7 = subst(n_ok, fab, f7);
    CHECK(n_null && e42 && e7 && !match(g, n_null) && !match(g, e42) && match(g, e7));
    free(n_null), free(e42), free(e7);
    grammar_free(g);
    toolcall_grammar_free(&tg);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    for (size_t i = 0; i < N_FAMS; i++) test_family(&fams[i]);
    test_errors();
    test_xml_strings(DJ_TOOL_FORMAT_QWEN3_CODER);
    test_xml_strings(DJ_TOOL_FORMAT_GLM);
    printf("families: %zu templates checked; random walks: %zu sentences, %zu parsed to valid calls\n", N_FAMS,
           n_walks_total, n_walks_parsed);
    TEST_END();
}
