/*
 * test_serve_completions.c — the text-completion endpoints of `deja serve`
 * over HTTP against codelm-15m (src/server/server_completions.c):
 *
 *   legacy logprobs   the four arrays have one entry per token; the tokens
 *                     concatenate to the text; text_offset advances by each
 *                     token's bytes; greedy: top_logprobs has N entries and the
 *                     chosen token is the likeliest; sampled: the chosen token is
 *                     listed with its logprob, and when it is not among the N
 *                     likeliest it is below all of them; streamed == not
 *                     streamed (n = 2, one seed); a stop string at a token
 *                     boundary or inside a token; logprobs change no text;
 *   fill-in-the-middle  /v1/completions with suffix and /infill give the text of
 *                     /v1/completions on the token ids of llama-server's layout
 *                     built here from /tokenize ([BOS] PRE prefix prompt SUF suffix
 *                     MID, input_extra before it); the prefix, suffix and extra
 *                     budgets; /infill streamed == not; n_predict 0 caches the
 *                     prompt; return_tokens; stories260K (no FIM tokens) refused;
 *   grammars          grammar, json_schema, response_format: the output is in
 *                     the language (parsed); bad ones are 400s naming the field;
 *   the context       a prompt that does not fit: OpenAI's body, byte for byte;
 *                     a max_tokens past the context is clamped;
 *   --device vulkan   (where Vulkan has a device: lavapipe in CI) stories260K served from
 *                     the GPU: greedy text equal to the CPU server's; a seeded sampled
 *                     request, sent twice (the second reusing the cached prompt), gives
 *                     the same text and logprobs both times, streamed and not.
 */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kernels/vulkan/vk.h"

#include "test.h"
#include "test_run.h"
#include "test_serve.h"

static unsigned port;

/* POSTs body (taken) to path; the response as JSON (NULL if it is not), *status its code. */
static json_t *post(const char *path, json_t *body, int *status) {
    char *txt = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *out = NULL;
    *status = http(port, "POST", path, txt, NULL, &out);
    json_t *j = body_json(out);
    free(txt);
    free(out);
    return j;
}

/* The same, the raw body (streams). */
static char *post_raw(const char *path, json_t *body, int *status) {
    char *txt = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *out = NULL;
    *status = http(port, "POST", path, txt, NULL, &out);
    free(txt);
    return out;
}

static json_t *choice(json_t *j, size_t i) { return json_array_get(json_object_get(j, "choices"), i); }
static const char *sget(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static json_int_t iget(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* The ids of text (POST /tokenize). */
static json_t *tokenize(const char *text, bool add_special) {
    int st;
    json_t *j = post("/tokenize", json_pack("{s:s, s:b}", "content", text, "add_special", add_special), &st);
    json_t *t = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    CHECKF(st == 200 && json_is_array(t), "/tokenize '%s': %d", text, st);
    return t ? t : json_array();
}

/* The one id of a special token's text. */
static json_int_t special_id(const char *text) {
    json_t *t = tokenize(text, false);
    const json_int_t id = json_array_size(t) == 1 ? json_integer_value(json_array_get(t, 0)) : -1;
    CHECKF(id >= 0, "'%s' is not one token", text);
    json_decref(t);
    return id;
}

/* ---- legacy logprobs ---------------------------------------------------------------------- */

enum lp_mode { LP_GREEDY, LP_SAMPLED, LP_GRAMMAR };

/* Checks choice ch's logprobs against its text (see the top); returns the entry count.
 * n: the request's logprobs.  concat_is_text: no stop string cut a token. */
static size_t check_lp(json_t *ch, int n, enum lp_mode mode, bool concat_is_text, const char *what) {
    json_t *lp = json_object_get(ch, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    const size_t k = json_array_size(toks);
    CHECKF(json_is_object(lp) && json_array_size(lps) == k && json_array_size(tops) == k && json_array_size(offs) == k,
           "%s: arrays %zu/%zu/%zu/%zu", what, k, json_array_size(lps), json_array_size(tops), json_array_size(offs));
    const char *text = sget(ch, "text");
    char cat[8192];
    size_t n_cat = 0, bad = 0;
    for (size_t i = 0; i < k; i++) {
        const char *t = json_string_value(json_array_get(toks, i));
        const size_t nt = t ? strlen(t) : 0;
        if (!t || n_cat + nt >= sizeof cat) {
            bad++;
            break;
        }
        if (json_integer_value(json_array_get(offs, i)) != (json_int_t)n_cat)
            bad++; /* each offset is where the token's bytes start in the text */
        memcpy(cat + n_cat, t, nt);
        n_cat += nt;
        const double l = json_number_value(json_array_get(lps, i));
        json_t *top = json_array_get(tops, i);
        json_t *mine = json_object_get(top, t);
        double best = -INFINITY, worst_other = INFINITY;
        const char *key;
        json_t *v;
        json_object_foreach(top, key, v) {
            if (json_number_value(v) > best) best = json_number_value(v);
            if (strcmp(key, t) && json_number_value(v) < worst_other) worst_other = json_number_value(v);
        }
        const size_t nk = json_object_size(top);
        bool ok = json_is_number(json_array_get(lps, i)) && l <= 0 && mine && json_number_value(mine) == l;
        if (mode == LP_GREEDY) ok = ok && nk == (size_t)(n ? n : 1) && l == best;
        if (mode == LP_SAMPLED) ok = ok && (nk == (size_t)(n ? n : 1) || (nk == (size_t)n + 1 && l <= worst_other));
        if (mode == LP_GRAMMAR) ok = ok && nk >= 1 && nk <= (size_t)n + 1 && l == best; /* greedy, masked */
        if (!ok) {
            char *d = json_dumps(top, JSON_COMPACT);
            fprintf(stderr, "%s: entry %zu '%s' logprob %g, top %s\n", what, i, t, l, d);
            free(d);
            bad++;
        }
    }
    cat[n_cat] = 0;
    if (concat_is_text) CHECKF(text && !strcmp(cat, text), "%s: tokens '%s' vs text '%s'", what, cat, text ? text : "-");
    else CHECKF(text && !strncmp(cat, text, strlen(text)) && n_cat > strlen(text), "%s: tokens '%s' vs cut text '%s'",
                what, cat, text ? text : "-");
    CHECKF(bad == 0, "%s: %zu bad entries", what, bad);
    return k;
}

/* The arrays of a stream's chunks of choice i, joined; *text its text. */
static json_t *joined_lp(json_t *events, size_t i, char **text) {
    json_t *lp = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    size_t cap = 1, n = 0;
    char *t = calloc(1, cap);
    size_t k;
    json_t *ev;
    json_array_foreach(events, k, ev) {
        json_t *ch = choice(ev, 0);
        if (!ch || iget(ch, "index") != (json_int_t)i) continue;
        const char *s = sget(ch, "text");
        if (s) {
            t = realloc(t, cap = n + strlen(s) + 1);
            memcpy(t + n, s, strlen(s) + 1);
            n += strlen(s);
        }
        json_t *l = json_object_get(ch, "logprobs");
        const char *key;
        json_t *arr;
        json_object_foreach(l, key, arr) json_array_extend(json_object_get(lp, key), arr);
    }
    *text = t;
    return lp;
}

static void test_logprobs(void) {
    int st;
    /* greedy, N = 5: the chosen token is the likeliest of exactly 5 */
    json_t *j = post("/v1/completions",
                     json_pack("{s:s, s:i, s:i, s:i}", "prompt", "def fib(n):", "max_tokens", 24, "temperature", 0,
                               "logprobs", 5),
                     &st);
    CHECK(st == 200);
    json_t *ch = choice(j, 0);
    const size_t k = check_lp(ch, 5, LP_GREEDY, true, "greedy");
    CHECKF(k == 24 && !strcmp(sget(ch, "finish_reason"), "length") &&
               iget(json_object_get(j, "usage"), "completion_tokens") == 24,
           "greedy: %zu entries for 24 tokens", k);
    const char *g = sget(ch, "text");
    char *greedy = strdup(g ? g : "");
    json_t *offs = json_incref(json_object_get(json_object_get(ch, "logprobs"), "text_offset"));
    json_t *toks = json_incref(json_object_get(json_object_get(ch, "logprobs"), "tokens"));
    json_decref(j);
    /* logprobs change no text; without them, logprobs is null */
    j = post("/v1/completions", json_pack("{s:s, s:i, s:i}", "prompt", "def fib(n):", "max_tokens", 24, "temperature", 0),
             &st);
    CHECK(st == 200 && sget(choice(j, 0), "text") && !strcmp(sget(choice(j, 0), "text"), greedy) &&
          json_is_null(json_object_get(choice(j, 0), "logprobs")));
    json_decref(j);
    /* logprobs 0: the chosen token alone */
    j = post("/v1/completions",
             json_pack("{s:s, s:i, s:i, s:i}", "prompt", "def fib(n):", "max_tokens", 8, "temperature", 0, "logprobs", 0),
             &st);
    CHECK(st == 200 && check_lp(choice(j, 0), 0, LP_GREEDY, true, "logprobs 0") == 8);
    json_decref(j);

    /* a stop string at a token boundary: the tokens before it, exactly; inside a token:
     * that token too (its bytes reach past the text) */
    const size_t nt = json_array_size(offs);
    for (size_t cut = 0; cut < 2; cut++) {
        size_t at = 0;
        for (size_t i = 4; i < nt && !at; i++) { /* a token whose rest of the text occurs only there */
            const size_t o = (size_t)json_integer_value(json_array_get(offs, i));
            const size_t tl = strlen(json_string_value(json_array_get(toks, i)));
            if (cut && tl < 2) continue;
            if (strstr(greedy, greedy + o + cut) == greedy + o + cut && o + cut < strlen(greedy)) at = i;
        }
        CHECKF(at > 0, "no stop position in '%s'", greedy);
        if (!at) break;
        const size_t o = (size_t)json_integer_value(json_array_get(offs, at));
        j = post("/v1/completions",
                 json_pack("{s:s, s:i, s:i, s:i, s:s}", "prompt", "def fib(n):", "max_tokens", 24, "temperature", 0,
                           "logprobs", 2, "stop", greedy + o + cut),
                 &st);
        ch = choice(j, 0);
        CHECKF(st == 200 && sget(ch, "text") && strlen(sget(ch, "text")) == o + cut &&
                   !strncmp(sget(ch, "text"), greedy, o + cut) && !strcmp(sget(ch, "finish_reason"), "stop"),
               "stop at %zu: '%s'", o + cut, sget(ch, "text") ? sget(ch, "text") : "-");
        const size_t ks = check_lp(ch, 2, LP_GREEDY, !cut, cut ? "stop inside a token" : "stop at a token");
        CHECKF(ks == at + cut, "stop: %zu entries, want %zu", ks, at + cut);
        json_decref(j);
    }
    json_decref(offs);
    json_decref(toks);
    free(greedy);

    /* sampled, n = 2, streamed == not streamed */
    const char *body = "{\"prompt\": \"import os\\n\", \"max_tokens\": 20, \"temperature\": 1.2, \"seed\": 9, \"n\": 2, "
                       "\"logprobs\": 3%s}";
    char b[256];
    snprintf(b, sizeof b, body, "");
    json_t *nj = post("/v1/completions", json_loads(b, 0, NULL), &st);
    CHECK(st == 200 && json_array_size(json_object_get(nj, "choices")) == 2);
    snprintf(b, sizeof b, body, ", \"stream\": true");
    char *raw = post_raw("/v1/completions", json_loads(b, 0, NULL), &st);
    json_t *events = sse_events(raw ? raw : "");
    CHECK(st == 200 && raw && strstr(raw, "data: [DONE]"));
    for (size_t i = 0; i < 2; i++) {
        char what[32];
        snprintf(what, sizeof what, "sampled %zu", i);
        check_lp(choice(nj, i), 3, LP_SAMPLED, true, what);
        char *text = NULL;
        json_t *lp = joined_lp(events, i, &text);
        CHECKF(json_equal(lp, json_object_get(choice(nj, i), "logprobs")) && !strcmp(text, sget(choice(nj, i), "text")),
               "choice %zu: the stream's logprobs or text differ ('%s' vs '%s')", i, text, sget(choice(nj, i), "text"));
        json_decref(lp);
        free(text);
    }
    /* every chunk carries the entries of its own text: offsets start where the text so far ends */
    size_t seen[2] = {0, 0}, bad = 0, k2;
    json_t *ev;
    json_array_foreach(events, k2, ev) {
        json_t *c0 = choice(ev, 0);
        const json_int_t ix = iget(c0, "index");
        if (!c0 || ix < 0 || ix > 1) continue;
        json_t *of = json_object_get(json_object_get(c0, "logprobs"), "text_offset");
        if (json_array_size(of) && json_integer_value(json_array_get(of, 0)) != (json_int_t)seen[ix]) bad++;
        seen[ix] += strlen(sget(c0, "text") ? sget(c0, "text") : "");
    }
    CHECKF(bad == 0, "%zu chunks whose first offset is not where their text starts", bad);
    json_decref(events);
    free(raw);
    json_decref(nj);

    /* bad values */
    static const char *const bads[] = {"21", "-1", "2.5", "true", "\"3\""};
    for (size_t i = 0; i < 5; i++) {
        char *out = NULL;
        snprintf(b, sizeof b, "{\"prompt\": \"x\", \"logprobs\": %s}", bads[i]);
        CHECKF(http(port, "POST", "/v1/completions", b, NULL, &out) == 400 && is_error(out, "logprobs"), "logprobs %s: %s",
               bads[i], out ? out : "");
        free(out);
    }
    char *out = NULL;
    CHECK(http(port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"echo\": true}", NULL, &out) == 400 &&
          is_error(out, "echo") && strstr(out, "echo is not supported"));
    free(out);
    CHECK(http(port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"echo\": false, \"max_tokens\": 1}", NULL, &out) ==
          200);
    free(out);
}

/* ---- fill-in-the-middle ------------------------------------------------------------------- */

/* The text of /v1/completions on the token ids (temperature 0); *n_prompt its prompt_tokens. */
static char *text_of_ids(json_t *ids, int max_tokens, json_int_t *n_prompt) {
    int st;
    json_t *j = post("/v1/completions", json_pack("{s:O, s:i, s:i}", "prompt", ids, "max_tokens", max_tokens, "temperature", 0), &st);
    CHECK(st == 200);
    char *t = strdup(sget(choice(j, 0), "text") ? sget(choice(j, 0), "text") : "(none)");
    *n_prompt = iget(json_object_get(j, "usage"), "prompt_tokens");
    json_decref(j);
    return t;
}

static void push_id(json_t *ids, json_int_t id) { json_array_append_new(ids, json_integer(id)); }

/* Appends the first (head) or last (!head) `keep` ids of text's tokens. */
static void push_text(json_t *ids, const char *text, size_t keep, bool head) {
    json_t *t = tokenize(text, false);
    const size_t n = json_array_size(t), k = keep < n ? keep : n;
    for (size_t i = head ? 0 : n - k; i < (head ? k : n); i++) json_array_append(ids, json_array_get(t, i));
    json_decref(t);
}

static size_t n_tokens(const char *text) {
    json_t *t = tokenize(text, false);
    const size_t n = json_array_size(t);
    json_decref(t);
    return n;
}

static char *repeat_lines(const char *fmt, int n) {
    char *s = calloc(1, (size_t)n * 64 + 1);
    size_t len = 0;
    for (int i = 0; i < n; i++) len += (size_t)sprintf(s + len, fmt, i, i * 7);
    return s;
}

static void test_fim(void) {
    const json_int_t pre = special_id("<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>"),
                     suf = special_id("<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>"),
                     mid = special_id("<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>");
    json_t *bos_arr = tokenize("", true);
    CHECK(json_array_size(bos_arr) == 1);
    const json_int_t bos = json_integer_value(json_array_get(bos_arr, 0));
    json_decref(bos_arr);
    const char *prefix = "def add(a, b):\n    ", *suffix = "\n\nprint(add(1, 2))\n", *prompt = "return";
    int st;

    /* [BOS] PRE prefix SUF suffix MID */
    json_t *ids = json_array();
    push_id(ids, bos);
    push_id(ids, pre);
    push_text(ids, prefix, 100000, true);
    push_id(ids, suf);
    push_text(ids, suffix, 100000, true);
    push_id(ids, mid);
    json_int_t np = 0;
    char *want = text_of_ids(ids, 12, &np);
    CHECK(np == (json_int_t)json_array_size(ids));
    json_t *j = post("/v1/completions",
                     json_pack("{s:s, s:s, s:i, s:i}", "prompt", prefix, "suffix", suffix, "max_tokens", 12, "temperature", 0),
                     &st);
    CHECKF(st == 200 && sget(choice(j, 0), "text") && !strcmp(sget(choice(j, 0), "text"), want) &&
               iget(json_object_get(j, "usage"), "prompt_tokens") == np,
           "suffix: '%s' vs ids '%s'", sget(choice(j, 0), "text") ? sget(choice(j, 0), "text") : "-", want);
    json_decref(j);
    j = post("/infill", json_pack("{s:s, s:s, s:i, s:i}", "input_prefix", prefix, "input_suffix", suffix, "n_predict", 12,
                                  "temperature", 0),
             &st);
    CHECKF(st == 200 && sget(j, "content") && !strcmp(sget(j, "content"), want) && iget(j, "tokens_evaluated") == np &&
               iget(j, "tokens_predicted") == 12 && json_is_true(json_object_get(j, "stop")) &&
               !strcmp(sget(j, "stop_type"), "limit") && json_is_object(json_object_get(j, "timings")),
           "/infill: %d '%s' vs '%s'", st, sget(j, "content") ? sget(j, "content") : "-", want);
    json_decref(j);
    free(want);
    json_decref(ids);
    /* an empty suffix is a plain completion (BOS + the prompt's tokens) */
    j = post("/v1/completions", json_pack("{s:s, s:s, s:i}", "prompt", prefix, "suffix", "", "max_tokens", 1), &st);
    CHECK(st == 200 && iget(json_object_get(j, "usage"), "prompt_tokens") == (json_int_t)n_tokens(prefix) + 1);
    json_decref(j);

    /* /infill's prompt goes after the prefix; input_extra (no repo / file-separator tokens in this
     * vocabulary: llama-server's snippet separator) before everything */
    json_t *ids2 = json_array();
    const char *sep = "\n\n--- snippet ---\n\n";
    push_text(ids2, sep, 100000, true);
    push_text(ids2, "def sub(a, b):\n    return a - b\n", 100000, true);
    push_text(ids2, sep, 100000, true);
    push_text(ids2, "MAX = 10\n", 100000, true);
    push_id(ids2, bos);
    push_id(ids2, pre);
    push_text(ids2, prefix, 100000, true);
    push_text(ids2, prompt, 100000, true);
    push_id(ids2, suf);
    push_text(ids2, suffix, 100000, true);
    push_id(ids2, mid);
    want = text_of_ids(ids2, 12, &np);
    const char *infill2 = "{\"input_prefix\": \"def add(a, b):\\n    \", \"input_suffix\": \"\\n\\nprint(add(1, 2))\\n\", "
                          "\"prompt\": \"return\", \"input_extra\": [{\"filename\": \"sub.py\", \"text\": \"def sub(a, b):"
                          "\\n    return a - b\\n\"}, {\"text\": \"MAX = 10\\n\"}], \"n_predict\": 12, \"temperature\": 0%s}";
    char b[1024];
    snprintf(b, sizeof b, infill2, "");
    j = post("/infill", json_loads(b, 0, NULL), &st);
    CHECKF(st == 200 && sget(j, "content") && !strcmp(sget(j, "content"), want) && iget(j, "tokens_evaluated") == np,
           "/infill with extra: %d '%s' vs '%s' (%lld vs %lld tokens)", st, sget(j, "content") ? sget(j, "content") : "-",
           want, (long long)iget(j, "tokens_evaluated"), (long long)np);
    /* streamed: the same text in llama-server's events, the last one stop: true, no [DONE] */
    snprintf(b, sizeof b, infill2, ", \"stream\": true");
    char *raw = post_raw("/infill", json_loads(b, 0, NULL), &st);
    json_t *events = sse_events(raw ? raw : "");
    char cat[4096] = "";
    size_t k;
    json_t *ev;
    bool stops_ok = json_array_size(events) >= 2;
    json_array_foreach(events, k, ev) {
        if (sget(ev, "content")) strncat(cat, sget(ev, "content"), sizeof cat - strlen(cat) - 1);
        stops_ok &= json_is_true(json_object_get(ev, "stop")) == (k + 1 == json_array_size(events));
    }
    CHECKF(st == 200 && stops_ok && !strcmp(cat, sget(j, "content") ? sget(j, "content") : "") && raw &&
               !strstr(raw, "[DONE]"),
           "/infill stream: '%s' vs '%s'", cat, sget(j, "content") ? sget(j, "content") : "-");
    /* has_new_line: whether the content holds a newline, streamed or not */
    json_t *last = json_array_get(events, json_array_size(events) - 1);
    const bool nl = strchr(cat, '\n') != NULL;
    CHECK(json_is_boolean(json_object_get(j, "has_new_line")) && json_is_true(json_object_get(j, "has_new_line")) == nl &&
          json_is_true(json_object_get(last, "has_new_line")) == nl);
    free(raw);
    json_decref(events);
    json_decref(j);
    free(want);
    json_decref(ids2);

    /* n_predict 0 (llama.vscode's warm-up): no text, and the next request finds the prompt cached */
    const char *warm = "{\"input_prefix\": \"class Stack:\\n    def __init__(self):\\n        \", \"input_suffix\": "
                       "\"\\n\", \"n_predict\": %d, \"temperature\": 0, \"return_tokens\": true, \"ignore_eos\": true}";
    snprintf(b, sizeof b, warm, 0);
    j = post("/infill", json_loads(b, 0, NULL), &st);
    CHECK(st == 200 && sget(j, "content") && !strcmp(sget(j, "content"), "") && iget(j, "tokens_predicted") == 0 &&
          json_array_size(json_object_get(j, "tokens")) == 0);
    const json_int_t n_warm = iget(j, "tokens_evaluated");
    json_decref(j);
    snprintf(b, sizeof b, warm, 8);
    j = post("/infill", json_loads(b, 0, NULL), &st);
    const json_int_t cached = iget(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens");
    CHECKF(st == 200 && n_warm > 4 && iget(j, "tokens_evaluated") == n_warm && cached == n_warm - 1,
           "after the warm-up: cached %lld of %lld", (long long)cached, (long long)n_warm);
    /* return_tokens: the generated ids, which decode to the content */
    json_t *rt = json_object_get(j, "tokens");
    CHECK(json_array_size(rt) == 8 && iget(j, "tokens_predicted") == 8);
    json_t *d = post("/detokenize", json_pack("{s:O}", "tokens", rt), &st);
    CHECKF(st == 200 && sget(d, "content") && sget(j, "content") && !strcmp(sget(d, "content"), sget(j, "content")),
           "return_tokens decode to '%s', content '%s'", sget(d, "content") ? sget(d, "content") : "-",
           sget(j, "content") ? sget(j, "content") : "-");
    json_decref(d);
    json_decref(j);

    /* budgets (n_ctx 2048: B = 1024): the prefix keeps its last 3B/4 = 768 tokens, the suffix its first
     * B/4 - 2 = 254, the extra context its last n_ctx - B - 2 n_predict - 2 */
    char *long_pre = repeat_lines("x%d = %d\n", 400), *long_suf = repeat_lines("y%d = %d\n", 300),
         *long_extra = repeat_lines("z%d = %d\n", 400);
    CHECK(n_tokens(long_pre) > 768 && n_tokens(long_suf) > 254);
    const int n_predict = 4;
    const size_t extra_room = 2048 - 1024 - 2 * n_predict - 2;
    CHECK(n_tokens(long_extra) + n_tokens(sep) > extra_room);
    json_t *ids3 = json_array(), *ex = json_array();
    push_text(ex, sep, 100000, true);
    push_text(ex, long_extra, 100000, true);
    for (size_t i = json_array_size(ex) - extra_room; i < json_array_size(ex); i++) json_array_append(ids3, json_array_get(ex, i));
    json_decref(ex);
    push_id(ids3, bos);
    push_id(ids3, pre);
    push_text(ids3, long_pre, 768, false);
    push_id(ids3, suf);
    push_text(ids3, long_suf, 254, true);
    push_id(ids3, mid);
    CHECK(json_array_size(ids3) == extra_room + 4 + 768 + 254 && json_array_size(ids3) < 2048);
    want = text_of_ids(ids3, n_predict, &np);
    j = post("/infill",
             json_pack("{s:s, s:s, s:[{s:s}], s:i, s:i}", "input_prefix", long_pre, "input_suffix", long_suf, "input_extra",
                       "text", long_extra, "n_predict", n_predict, "temperature", 0),
             &st);
    CHECKF(st == 200 && iget(j, "tokens_evaluated") == np && sget(j, "content") && !strcmp(sget(j, "content"), want),
           "budgets: %lld tokens, want %lld; '%s' vs '%s'", (long long)iget(j, "tokens_evaluated"), (long long)np,
           sget(j, "content") ? sget(j, "content") : "-", want);
    json_decref(j);
    free(want);
    json_decref(ids3);
    free(long_pre);
    free(long_suf);
    free(long_extra);

    /* bad bodies */
    static const struct {
        const char *body, *param;
    } bads[] = {
        {"{\"input_suffix\": \"\"}", "input_prefix"},
        {"{\"input_prefix\": \"\", \"input_suffix\": 3}", "input_suffix"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"input_extra\": {}}", "input_extra"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"input_extra\": [{\"filename\": \"a\"}]}", "input_extra"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"n_predict\": -2}", "n_predict"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"prompt\": [1]}", "prompt"},
        {"{\"prompt\": [1, 2], \"suffix\": \"x\"}", "prompt"},
        {"{\"prompt\": \"x\", \"suffix\": 5}", "suffix"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        char *out = NULL;
        const char *path = strstr(bads[i].body, "input_") ? "/infill" : "/v1/completions";
        CHECKF(http(port, "POST", path, bads[i].body, NULL, &out) == 400 && is_error(out, bads[i].param), "%s %s: %s", path,
               bads[i].body, out ? out : "");
        free(out);
    }
}

/* A model without FIM tokens: both forms are refused, saying why. */
static void test_no_fim(const char *model) {
    struct srv s;
    const char *extra[] = {NULL};
    if (!srv_start(&s, model, extra)) return;
    char *out = NULL;
    CHECKF(http(s.port, "POST", "/infill", "{\"input_prefix\": \"a\", \"input_suffix\": \"b\"}", NULL, &out) == 400 &&
               is_error(out, NULL) && strstr(out, "this model's vocabulary has no fill-in-the-middle tokens"),
           "%s", out ? out : "");
    free(out);
    CHECKF(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"a\", \"suffix\": \"b\"}", NULL, &out) == 400 &&
               is_error(out, "suffix") && strstr(out, "no fill-in-the-middle tokens"),
           "%s", out ? out : "");
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 2}", NULL, &out) == 200);
    free(out);
    CHECK(srv_stop(&s) == 0);
}

/* ---- the server on a GPU -------------------------------------------------------------------- */

static char *completion_text(unsigned p, const char *body, json_t **lp) {
    char *out = NULL;
    char *text = NULL;
    if (http(p, "POST", "/v1/completions", body, NULL, &out) == 200) {
        json_t *j = json_loads(out, 0, NULL);
        json_t *ch = j ? choice(j, 0) : NULL;
        if (ch && sget(ch, "text")) text = strdup(sget(ch, "text"));
        if (lp && ch) *lp = json_incref(json_object_get(ch, "logprobs"));
        json_decref(j);
    }
    free(out);
    return text;
}

static void test_gpu_serve(const char *model) {
    struct dj_vk_device_info dev[4];
    size_t n = 0;
    if (dj_vk_devices(dev, 4, &n) != DJ_OK || !n) {
        printf("no Vulkan device (%s): serve --device vulkan not tested\n", dj_vk_why_none());
        return;
    }
    struct srv cpu, gpu;
    const char *none[] = {NULL}, *vk[] = {"--device", "vulkan", NULL};
    if (!srv_start(&cpu, model, none)) return;
    static const char greedy[] = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 0}";
    char *t_cpu = completion_text(cpu.port, greedy, NULL);
    CHECK(srv_stop(&cpu) == 0);
    CHECK(srv_start(&gpu, model, vk));
    if (!t_cpu) return;
    char *t_gpu = completion_text(gpu.port, greedy, NULL);
    CHECKF(t_gpu && !strcmp(t_cpu, t_gpu), "serve --device vulkan: greedy text\n%s\nvs the CPU's\n%s",
           t_gpu ? t_gpu : "(none)", t_cpu);
    static const char seeded[] = "{\"prompt\": \"The little dog ran to the park and\", \"max_tokens\": 20, "
                                 "\"temperature\": 0.8, \"seed\": 5, \"logprobs\": 2}";
    json_t *lp1 = NULL, *lp2 = NULL;
    char *a = completion_text(gpu.port, seeded, &lp1), *b = completion_text(gpu.port, seeded, &lp2);
    CHECKF(a && b && !strcmp(a, b) && lp1 && lp2 && json_equal(lp1, lp2),
           "serve --device vulkan: a seeded request differs when its prompt is reused: %s / %s", a ? a : "", b ? b : "");
    /* streamed: the same text */
    char *out = NULL;
    CHECK(http(gpu.port, "POST", "/v1/completions",
               "{\"prompt\": \"The little dog ran to the park and\", \"max_tokens\": 20, \"temperature\": 0.8, "
               "\"seed\": 5, \"stream\": true}", NULL, &out) == 200);
    size_t got = 0;
    char joined[2048] = "";
    for (const char *q = out ? strstr(out, "data: {") : NULL; q; q = strstr(q + 6, "data: {")) {
        json_t *ev = json_loadb(q + 6, strcspn(q + 6, "\n"), 0, NULL);
        const char *piece = ev ? sget(choice(ev, 0), "text") : NULL;
        if (piece && got + strlen(piece) < sizeof joined) {
            memcpy(joined + got, piece, strlen(piece) + 1);
            got += strlen(piece);
        }
        json_decref(ev);
    }
    CHECKF(a && !strcmp(joined, a), "serve --device vulkan: streamed %s, not streamed %s", joined, a ? a : "");
    printf("serve --device vulkan (%s): greedy text equal to the CPU's; seeded sampling reused == cold, streamed == "
           "not\n", dev[0].name);
    free(out);
    json_decref(lp1);
    json_decref(lp2);
    free(a);
    free(b);
    free(t_gpu);
    free(t_cpu);
    CHECK(srv_stop(&gpu) == 0);
}

/* ---- grammars ----------------------------------------------------------------------------- */

static void test_grammar(void) {
    int st;
    /* GBNF: one of two sentences, finished by the model's end token once complete */
    for (int seed = 1; seed <= 3; seed++) {
        json_t *j = post("/v1/completions",
                         json_pack("{s:s, s:s, s:i, s:f, s:i}", "prompt", "Answer:", "grammar",
                                   "root ::= (\"yes\" | \"no\") \".\"", "max_tokens", 10, "temperature", 1.0, "seed", seed),
                         &st);
        const char *t = sget(choice(j, 0), "text");
        CHECKF(st == 200 && t && (!strcmp(t, "yes.") || !strcmp(t, "no.")) && !strcmp(sget(choice(j, 0), "finish_reason"), "stop"),
               "grammar, seed %d: '%s'", seed, t ? t : "-");
        json_decref(j);
    }
    /* json_schema (llama-server's field), response_format json_schema: a JSON object of the schema */
    const char *schema = "{\"type\": \"object\", \"properties\": {\"lang\": {\"enum\": [\"c\", \"python\", \"rust\"]}, "
                         "\"stars\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 99}}, \"required\": [\"lang\", "
                         "\"stars\"], \"additionalProperties\": false}";
    for (int form = 0; form < 3; form++) {
        json_t *sc = json_loads(schema, 0, NULL);
        json_t *body = json_pack("{s:s, s:i, s:i, s:i}", "prompt", "# project metadata\n", "max_tokens", 120, "temperature", 0,
                                 "logprobs", 3);
        if (form == 0) json_object_set_new(body, "json_schema", sc);
        else if (form == 1)
            json_object_set_new(body, "response_format",
                                json_pack("{s:s, s:{s:s, s:o}}", "type", "json_schema", "json_schema", "name", "meta", "schema", sc));
        else json_object_set_new(body, "response_format", json_pack("{s:s, s:o}", "type", "json_object", "schema", sc));
        json_t *j = post("/v1/completions", body, &st);
        json_t *ch = choice(j, 0);
        const char *t = sget(ch, "text");
        json_t *v = json_loads(t ? t : "", 0, NULL);
        const char *lang = sget(v, "lang");
        CHECKF(st == 200 && json_is_object(v) && json_object_size(v) == 2 && lang &&
                   (!strcmp(lang, "c") || !strcmp(lang, "python") || !strcmp(lang, "rust")) &&
                   json_is_integer(json_object_get(v, "stars")) && iget(v, "stars") >= 0 && iget(v, "stars") <= 99 &&
                   !strcmp(sget(ch, "finish_reason"), "stop"),
               "schema form %d: '%s'", form, t ? t : "-");
        check_lp(ch, 3, LP_GRAMMAR, true, "grammar logprobs");
        json_decref(v);
        json_decref(j);
    }
    /* response_format json_object: any object */
    json_t *j = post("/v1/completions",
                     json_pack("{s:s, s:{s:s}, s:i, s:i}", "prompt", "{\"a\": 1}\n", "response_format", "type", "json_object",
                               "max_tokens", 200, "temperature", 0),
                     &st);
    json_t *v = json_loads(sget(choice(j, 0), "text") ? sget(choice(j, 0), "text") : "", 0, NULL);
    CHECKF(st == 200 && json_is_object(v) && !strcmp(sget(choice(j, 0), "finish_reason"), "stop"), "json_object: '%s'",
           sget(choice(j, 0), "text") ? sget(choice(j, 0), "text") : "-");
    json_decref(v);
    json_decref(j);
    /* /infill with a grammar */
    j = post("/infill",
             json_pack("{s:s, s:s, s:s, s:i, s:i}", "input_prefix", "x = ", "input_suffix", "\n", "grammar",
                       "root ::= [0-9] [0-9]", "n_predict", 5, "temperature", 0),
             &st);
    const char *c = sget(j, "content");
    CHECKF(st == 200 && c && strlen(c) == 2 && c[0] >= '0' && c[0] <= '9' && c[1] >= '0' && c[1] <= '9' &&
               !strcmp(sget(j, "stop_type"), "eos"),
           "/infill grammar: '%s'", c ? c : "-");
    json_decref(j);
    /* bad ones: 400 naming the field, with the parser's message */
    static const struct {
        const char *body, *param, *msg;
    } bads[] = {
        {"{\"prompt\": \"x\", \"grammar\": \"root ::= foo\"}", "grammar", "undefined rule 'foo'"},
        {"{\"prompt\": \"x\", \"grammar\": 5}", "grammar", "GBNF"},
        {"{\"prompt\": \"x\", \"json_schema\": {\"type\": \"string\", \"pattern\": \"(?=a)\"}}", "json_schema", "json_schema: "},
        {"{\"prompt\": \"x\", \"json_schema\": [1]}", "json_schema", "JSON Schema object"},
        {"{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {}}", "json_schema", "not both"},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"yaml\"}}", "response_format.type", "json_schema"},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": "
         "\"string\", \"format\": \"x\", \"pattern\": \"a\"}}}}", "response_format", "response_format: "},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"grammar\": \"root ::= (\"}", "grammar", "grammar"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        char *out = NULL;
        const char *path = strstr(bads[i].body, "input_") ? "/infill" : "/v1/completions";
        CHECKF(http(port, "POST", path, bads[i].body, NULL, &out) == 400 && is_error(out, bads[i].param) &&
                   strstr(out, bads[i].msg),
               "%s: %s", bads[i].body, out ? out : "");
        free(out);
    }
}

/* ---- the context ---------------------------------------------------------------------------- */

static char *ids_body(size_t n, const char *more) {
    char *b = malloc(n * 5 + 128);
    size_t len = (size_t)sprintf(b, "{\"prompt\": [");
    for (size_t i = 0; i < n; i++) len += (size_t)sprintf(b + len, i ? ", 100" : "100");
    sprintf(b + len, "]%s}", more);
    return b;
}

static void test_context(void) {
    static const struct {
        size_t n;
        const char *want;
    } cases[] = {
        {2500, "{\"error\":{\"message\":\"This model's maximum context length is 2048 tokens, however you requested 2500 "
               "tokens (2500 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.\","
               "\"type\":\"invalid_request_error\",\"param\":\"prompt\",\"code\":\"context_length_exceeded\"}}"},
        {2048, "{\"error\":{\"message\":\"This model's maximum context length is 2048 tokens, however you requested 2049 "
               "tokens (2048 in your prompt; 1 for the completion). Please reduce your prompt; or completion length.\","
               "\"type\":\"invalid_request_error\",\"param\":\"prompt\",\"code\":\"context_length_exceeded\"}}"},
    };
    for (size_t i = 0; i < 2; i++) {
        char *b = ids_body(cases[i].n, ", \"max_tokens\": 16"), *out = NULL;
        CHECKF(http(port, "POST", "/v1/completions", b, NULL, &out) == 400 && out && !strcmp(out, cases[i].want),
               "%zu tokens:\n   got  %s\n   want %s", cases[i].n, out ? out : "", cases[i].want);
        free(out);
        free(b);
    }
    /* /infill: its prompt (after the prefix) is never cut */
    char *lp = repeat_lines("p%d%d ", 1500);
    int st;
    json_t *j = post("/infill", json_pack("{s:s, s:s, s:s}", "input_prefix", "", "input_suffix", "", "prompt", lp), &st);
    json_t *e = json_object_get(j, "error");
    CHECKF(st == 400 && !strcmp(sget(e, "code") ? sget(e, "code") : "", "context_length_exceeded") &&
               !strcmp(sget(e, "param") ? sget(e, "param") : "", "prompt") &&
               strstr(sget(e, "message") ? sget(e, "message") : "", "maximum context length is 2048 tokens"),
           "/infill long prompt: %d", st);
    json_decref(j);
    free(lp);
    /* only the prompt must fit: a max_tokens past the context is clamped to what is left (the
     * last token needs no position: n_ctx - n_prompt + 1) */
    char *b = ids_body(2040, ", \"max_tokens\": 5000, \"ignore_eos\": true, \"temperature\": 0"), *out = NULL;
    CHECK(http(port, "POST", "/v1/completions", b, NULL, &out) == 200);
    j = body_json(out);
    CHECKF(iget(json_object_get(j, "usage"), "completion_tokens") == 2048 - 2040 + 1 &&
               !strcmp(sget(choice(j, 0), "finish_reason") ? sget(choice(j, 0), "finish_reason") : "", "length"),
           "clamped: %s", out ? out : "");
    json_decref(j);
    free(out);
    free(b);
}

/* --context-overflow prune: a prompt past -c runs with whole blocks of its middle dropped, says
 * how many in x_deja.ctx_dropped, drops the same ones when the conversation goes on (its KV
 * reused); protected ends that alone do not fit still get the 400. */
static void test_overflow_prune(const char *model) {
    struct srv s;
    const char *extra[] = {"-c", "256", "--context-overflow", "prune", NULL};
    setenv("LLAMA_OPT_ATTN_PRUNE_KEEP_FIRST", "32", 1);
    setenv("LLAMA_OPT_ATTN_PRUNE_KEEP_LAST", "64", 1);
    const bool up = srv_start(&s, model, extra);
    unsetenv("LLAMA_OPT_ATTN_PRUNE_KEEP_FIRST");
    unsetenv("LLAMA_OPT_ATTN_PRUNE_KEEP_LAST");
    if (!up) return;
    char *b = malloc(64 * 1024), *out = NULL;
    size_t len = (size_t)sprintf(b, "{\"prompt\": [");
    for (int i = 0; i < 400; i++) len += (size_t)sprintf(b + len, "%s%d", i ? ", " : "", 3 + (i * 37) % 400);
    strcpy(b + len, "], \"max_tokens\": 8, \"temperature\": 0}");
    CHECK(http(s.port, "POST", "/v1/completions", b, NULL, &out) == 200);
    json_t *j = body_json(out), *x = json_object_get(j, "x_deja");
    /* 400 + 8 in 256, blocks of 64: down to 256 - 8 - 64 = 184: blocks 1..4 dropped (the first is
     * kept, the last 64 tokens too): 144 tokens seen, and counted */
    CHECKF(iget(x, "ctx_dropped") == 256 && iget(json_object_get(j, "usage"), "prompt_tokens") == 144,
           "first: %s", out ? out : "");
    json_decref(j);
    free(out);
    /* the conversation goes on: 30 more tokens, the same blocks dropped, the rest reused */
    strcpy(b + len, "");
    for (int i = 0; i < 30; i++) len += (size_t)sprintf(b + len, ", %d", 7 + i);
    strcpy(b + len, "], \"max_tokens\": 8, \"temperature\": 0}");
    CHECK(http(s.port, "POST", "/v1/completions", b, NULL, &out) == 200);
    j = body_json(out);
    x = json_object_get(j, "x_deja");
    CHECKF(iget(x, "ctx_dropped") == 256 && iget(x, "computed") == 30 && iget(x, "reused_own") == 144,
           "second: %s", out ? out : "");
    json_decref(j);
    free(out);
    free(b);
    CHECK(srv_stop(&s) == 0);
    /* the default keeps the first 256 tokens: nothing in the middle to drop, the 400 */
    const char *extra2[] = {"-c", "256", "--context-overflow", "prune", NULL};
    if (!srv_start(&s, model, extra2)) return;
    b = ids_body(400, ", \"max_tokens\": 8");
    CHECKF(http(s.port, "POST", "/v1/completions", b, NULL, &out) == 400 && out && strstr(out, "even with its middle"),
           "protected: %s", out ? out : "");
    free(out);
    free(b);
    CHECK(srv_stop(&s) == 0);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    signal(SIGPIPE, SIG_IGN);
    char model[512];
    snprintf(model, sizeof model, "%s", test_shared_path(argv[1], "models/codelm-15m-f16.gguf"));
    struct srv s;
    const char *extra[] = {NULL};
    if (!srv_start(&s, model, extra)) TEST_END();
    port = s.port;
    test_logprobs();
    test_fim();
    test_grammar();
    test_context();
    CHECK(srv_stop(&s) == 0);
    test_no_fim(test_shared_path(argv[1], "models/stories260K.gguf"));
    test_overflow_prune(test_shared_path(argv[1], "models/stories260K.gguf"));
    test_gpu_serve(test_shared_path(argv[1], "models/stories260K.gguf"));
    TEST_END();
}
