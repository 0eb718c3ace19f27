/*
 * request.c — JSON request bodies to engine requests (request.h): the sampling
 * fields every endpoint shares, /v1/completions and /infill bodies (prompt,
 * logprobs, the output constraint, the parts of a fill-in-the-middle prompt),
 * and the FIM prompt's token layout (server_fim_prompt, llama-server's).
 * Pure functions of the body and the vocabulary: no server state, so the
 * fuzzer (tests/fuzz/fuzz_request.c) drives them directly.
 */
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* JSON_ALLOW_NUL: "\u0000" is valid JSON (RFC 8259), and agents send it back — a model can
 * emit a byte-fallback 0x00 token, which deja writes as \u0000, and Claude Code returns that
 * text in the next turn's history (e2e/test_agent_claude failed on it with a 400).  Message
 * content keeps its length through the template (jinja_value.c takes jansson's lengths). */
json_t *server_parse_body(const char *body, size_t n) {
    json_error_t err;
    json_t *req = json_loadb(body, n, JSON_ALLOW_NUL, &err);
    if (json_is_object(req)) return req;
    if (req) {
        json_decref(req);
        dj_fail(DJ_ERR_INVALID, "the body must be a JSON object");
    } else {
        dj_fail(DJ_ERR_INVALID, "malformed JSON at line %d, column %d: %s", err.line, err.column, err.text);
    }
    return NULL;
}

/* An optional number field; false on a wrong type or a value outside [lo, hi]. */
static bool opt_num(json_t *req, const char *key, double lo, double hi, double *out) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) return false;
    *out = json_number_value(v);
    return true;
}

static bool opt_bool(json_t *req, const char *key, bool *out) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return false;
    *out = json_is_true(v);
    return true;
}

void server_completion_req_free(struct dj_completion_req *r) {
    free(r->prompt);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
    r->logprobs = -1;
}

static enum dj_status bad(int *status, const char **param, const char *field, int code) {
    *status = code;
    *param = field;
    return DJ_ERR_INVALID;
}

enum dj_status server_parse_sampling(json_t *req, const struct dj_sampling_keys *k, struct dj_sampling_req *out,
                                     int *http_status, const char **param) {
    struct dj_sampling_req r = {0};
    *param = NULL;
    *http_status = 400;
    r.sp = sampler_default_params(); /* llama-server's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05 */
    double temp = r.sp.temp, top_p = r.sp.top_p, min_p = r.sp.min_p, top_k = r.sp.top_k, fp = 0, pp = 0, rpn = 1,
           nc = 1, seed = -1, max_tokens = 0;
    static const struct {
        const char *key;
        double lo, hi;
    } fields[] = {{"temperature", 0, 100}, {"top_p", 0, 1}, {"min_p", 0, 1}, {"top_k", 0, 1e9},
                  {"frequency_penalty", -2, 2}, {"presence_penalty", -2, 2}, {"repeat_penalty", 0.0001, 100},
                  {"n", 1, DJ_SERVER_N_MAX}, {"seed", -9.2e18, 1.8e19}};
    double *dst[] = {&temp, &top_p, &min_p, &top_k, &fp, &pp, &rpn, &nc, &seed};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!k->n && dst[i] == &nc) continue;
        if (!opt_num(req, fields[i].key, fields[i].lo, fields[i].hi, dst[i])) {
            dj_fail(DJ_ERR_INVALID, "'%s' must be a number in [%g, %g]", fields[i].key, fields[i].lo, fields[i].hi);
            return bad(http_status, param, fields[i].key, 400);
        }
    }
    const char *mt_key = NULL; /* the token limit's field, for its messages */
    for (size_t i = 2; i-- > 0;) { /* every name is checked; the first present wins */
        const char *key = k->max_tokens[i];
        if (!key) continue;
        json_t *v = json_object_get(req, key);
        if (!v || json_is_null(v)) continue;
        double x = 0;
        if (!opt_num(req, key, 1, 1e9, &x)) {
            dj_fail(DJ_ERR_INVALID, "'%s' must be a number in [%g, %g]", key, 1.0, 1e9);
            return bad(http_status, param, key, 400);
        }
        max_tokens = x;
        mt_key = key;
    }
    r.sp.temp = (float)temp;
    r.sp.top_p = (float)top_p;
    r.sp.min_p = (float)min_p;
    r.sp.top_k = (int32_t)top_k;
    r.sp.freq_penalty = (float)fp;
    r.sp.presence_penalty = (float)pp;
    r.sp.repeat_penalty = (float)rpn;
    r.has_seed = json_is_number(json_object_get(req, "seed"));
    if (r.has_seed) r.sp.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)(int64_t)seed;
    r.n = (uint32_t)nc;
    r.max_tokens = (size_t)max_tokens;
    if (nc != (double)r.n || max_tokens != (double)r.max_tokens) {
        const char *key = nc != (double)r.n ? "n" : mt_key;
        dj_fail(DJ_ERR_INVALID, "'%s' must be an integer", key);
        return bad(http_status, param, key, 400);
    }
    json_t *js = k->stop ? json_object_get(req, k->stop) : NULL;
    if (json_is_string(js)) {
        r.stop[r.n_stop++] = json_string_value(js);
    } else if (json_is_array(js)) {
        size_t i;
        json_t *x;
        json_array_foreach(js, i, x) {
            if (!json_is_string(x) || r.n_stop == DJ_SERVER_STOP_MAX) {
                dj_fail(DJ_ERR_INVALID, "%s must be a string or an array of at most %d strings", k->stop,
                        DJ_SERVER_STOP_MAX);
                return bad(http_status, param, k->stop, 400);
            }
            r.stop[r.n_stop++] = json_string_value(x);
        }
    } else if (js && !json_is_null(js)) {
        dj_fail(DJ_ERR_INVALID, "%s must be a string or an array of strings", k->stop);
        return bad(http_status, param, k->stop, 400);
    }
    static const char *const bools[] = {"stream", "ignore_eos"};
    bool *bdst[] = {&r.stream, &r.ignore_eos};
    for (size_t i = 0; i < 2; i++)
        if (!opt_bool(req, bools[i], bdst[i])) {
            dj_fail(DJ_ERR_INVALID, "'%s' must be a boolean", bools[i]);
            return bad(http_status, param, bools[i], 400);
        }
    json_t *so = k->stream_options ? json_object_get(req, "stream_options") : NULL;
    if (so && !json_is_null(so) && (!json_is_object(so) || !opt_bool(so, "include_usage", &r.include_usage))) {
        dj_fail(DJ_ERR_INVALID, "stream_options must be an object with a boolean include_usage");
        return bad(http_status, param, "stream_options", 400);
    }
    *out = r;
    return DJ_OK;
}

/* The output constraint: grammar, json_schema, response_format (at most one). */
static enum dj_status parse_constraint(json_t *req, struct dj_constraint_req *c, int *http_status, const char **param) {
    memset(c, 0, sizeof *c);
    json_t *g = json_object_get(req, "grammar");
    if (g && !json_is_null(g)) {
        if (!json_is_string(g)) {
            dj_fail(DJ_ERR_INVALID, "grammar must be a string (GBNF)");
            return bad(http_status, param, "grammar", 400);
        }
        if (json_string_length(g)) { /* "" is no grammar, as llama-server */
            c->grammar = json_string_value(g);
            c->param = "grammar";
        }
    }
    json_t *js = json_object_get(req, "json_schema");
    if (js && !json_is_null(js)) {
        if (!json_is_object(js)) {
            dj_fail(DJ_ERR_INVALID, "json_schema must be a JSON Schema object");
            return bad(http_status, param, "json_schema", 400);
        }
        if (c->param) {
            dj_fail(DJ_ERR_INVALID, "give either grammar or json_schema, not both");
            return bad(http_status, param, "json_schema", 400);
        }
        c->json_schema = js;
        c->param = "json_schema";
    }
    json_t *rf = json_object_get(req, "response_format");
    if (!rf || json_is_null(rf)) return DJ_OK;
    if (!json_is_object(rf)) {
        dj_fail(DJ_ERR_INVALID, "response_format must be an object");
        return bad(http_status, param, "response_format", 400);
    }
    const char *type = json_string_value(json_object_get(rf, "type"));
    json_t *schema = NULL;
    const char *at = NULL; /* the schema's field, for its error */
    if (type && !strcmp(type, "text")) return DJ_OK;
    if (type && !strcmp(type, "json_object")) {
        schema = json_object_get(rf, "schema"); /* llama-server's extension */
        at = "response_format.schema";
    } else if (type && !strcmp(type, "json_schema")) {
        json_t *o = json_object_get(rf, "json_schema");
        if (!json_is_object(o)) {
            dj_fail(DJ_ERR_INVALID, "response_format.json_schema must be an object with the schema in 'schema'");
            return bad(http_status, param, "response_format.json_schema", 400);
        }
        schema = json_object_get(o, "schema");
        at = "response_format.json_schema.schema";
    } else {
        dj_fail(DJ_ERR_INVALID, "response_format.type must be 'text', 'json_object' or 'json_schema'");
        return bad(http_status, param, "response_format.type", 400);
    }
    if (json_is_null(schema)) schema = NULL;
    if (schema && !json_is_object(schema)) {
        dj_fail(DJ_ERR_INVALID, "%s must be a JSON Schema object", at);
        return bad(http_status, param, at, 400);
    }
    if (c->param) {
        dj_fail(DJ_ERR_INVALID, "give one of grammar, json_schema and response_format, not several");
        return bad(http_status, param, "response_format", 400);
    }
    c->json_schema = schema;
    c->json_object = !schema; /* no schema: any JSON object */
    c->param = "response_format";
    return DJ_OK;
}

/* The fields both endpoints share after their own: sampling (keys k), cache_salt,
 * the output constraint. */
static enum dj_status parse_common(json_t *req, const struct dj_sampling_keys *k, struct dj_completion_req *r,
                                   int *http_status, const char **param) {
    struct dj_sampling_req sr;
    enum dj_status st;
    if ((st = server_parse_sampling(req, k, &sr, http_status, param)) != DJ_OK) return st;
    r->sp = sr.sp;
    r->has_seed = sr.has_seed;
    r->max_tokens = sr.max_tokens;
    r->n = sr.n;
    memcpy(r->stop, sr.stop, sizeof r->stop);
    r->n_stop = sr.n_stop;
    r->stream = sr.stream;
    r->include_usage = sr.include_usage;
    r->ignore_eos = sr.ignore_eos;
    json_t *salt = json_object_get(req, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt)) {
            dj_fail(DJ_ERR_INVALID, "cache_salt must be a string");
            return bad(http_status, param, "cache_salt", 400);
        }
        r->cache_salt = json_string_value(salt);
    }
    return parse_constraint(req, &r->cons, http_status, param);
}

/* The body, and its model (absent, null or this server's alias). */
static enum dj_status parse_root(const char *alias, const char *body, size_t n, struct dj_completion_req *r,
                                 int *http_status, const char **param) {
    memset(r, 0, sizeof *r);
    r->logprobs = -1;
    *param = NULL;
    *http_status = 400;
    if (!(r->root = server_parse_body(body, n))) return DJ_ERR_INVALID;
    json_t *model = json_object_get(r->root, "model");
    if (model && !json_is_null(model) && (!json_is_string(model) || strcmp(json_string_value(model), alias))) {
        dj_fail(DJ_ERR_INVALID, "model '%s' is not served here (this server has '%s')",
                json_is_string(model) ? json_string_value(model) : "?", alias);
        return bad(http_status, param, "model", 404);
    }
    return DJ_OK;
}

enum dj_status server_parse_completion(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                       struct dj_completion_req *out, int *http_status, const char **param) {
    struct dj_completion_req r;
    enum dj_status st = parse_root(alias, body, n, &r, http_status, param);
    if (st != DJ_OK) goto fail;
    json_t *req = r.root;
    json_t *echo = json_object_get(req, "echo");
    if (echo && !json_is_null(echo) && !json_is_false(echo)) {
        dj_fail(DJ_ERR_INVALID, json_is_true(echo) ? "echo is not supported (deja does not return the prompt or its "
                                                     "logprobs): leave it out or send false"
                                                   : "echo must be a boolean");
        st = bad(http_status, param, "echo", 400);
        goto fail;
    }
    json_t *jp = json_object_get(req, "prompt");
    json_t *suffix = json_object_get(req, "suffix");
    if (suffix && !json_is_null(suffix) && !json_is_string(suffix)) {
        dj_fail(DJ_ERR_INVALID, "suffix must be a string");
        st = bad(http_status, param, "suffix", 400);
        goto fail;
    }
    /* an empty suffix is a plain completion: clients send "" when the cursor is at the end */
    r.fim = json_is_string(suffix) && json_string_length(suffix) > 0;
    if (r.fim) {
        struct dj_fim_tokens ft;
        if (!vocab_fim_tokens(v, &ft)) {
            dj_fail(DJ_ERR_INVALID, DJ_SERVER_NO_FIM " (suffix needs them)");
            st = bad(http_status, param, "suffix", 400);
            goto fail;
        }
        if (!json_is_string(jp)) {
            dj_fail(DJ_ERR_INVALID, "with suffix, prompt must be a string (the text before the hole)");
            st = bad(http_status, param, "prompt", 400);
            goto fail;
        }
        r.fr.prefix = jp;
        r.fr.suffix = suffix;
    } else if (json_is_string(jp)) {
        if (vocab_tokenize(v, json_string_value(jp), json_string_length(jp), true, true, &r.prompt, &r.n_prompt) != DJ_OK) {
            st = bad(http_status, param, "prompt", 400);
            goto fail;
        }
    } else if (json_is_array(jp) && json_array_size(jp) > 0) {
        r.n_prompt = json_array_size(jp);
        if (!(r.prompt = malloc(r.n_prompt * sizeof *r.prompt))) {
            st = dj_fail(DJ_ERR_NOMEM, "out of memory");
            *http_status = 500;
            goto fail;
        }
        for (size_t i = 0; i < r.n_prompt; i++) {
            json_t *t = json_array_get(jp, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || (size_t)json_integer_value(t) >= vocab_n_tokens(v)) {
                dj_fail(DJ_ERR_INVALID, "prompt[%zu] is not a token id of this model (0..%zu)", i, vocab_n_tokens(v) - 1);
                st = bad(http_status, param, "prompt", 400);
                goto fail;
            }
            r.prompt[i] = (dj_token)json_integer_value(t);
        }
    } else {
        dj_fail(DJ_ERR_INVALID, "prompt must be a string or a non-empty array of token ids");
        st = bad(http_status, param, "prompt", 400);
        goto fail;
    }
    if (!r.fim && r.n_prompt == 0) {
        dj_fail(DJ_ERR_INVALID, "the prompt is empty and the model adds no BOS token");
        st = bad(http_status, param, "prompt", 400);
        goto fail;
    }
    json_t *lp = json_object_get(req, "logprobs");
    if (lp && !json_is_null(lp)) {
        if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > DJ_SERVER_LOGPROBS_MAX) {
            dj_fail(DJ_ERR_INVALID, "logprobs must be an integer in [0, %d]: the alternatives listed per token",
                    DJ_SERVER_LOGPROBS_MAX);
            st = bad(http_status, param, "logprobs", 400);
            goto fail;
        }
        r.logprobs = (int32_t)json_integer_value(lp);
    }
    static const struct dj_sampling_keys keys = {{"max_tokens", NULL}, "stop", true, true};
    if ((st = parse_common(req, &keys, &r, http_status, param)) != DJ_OK) goto fail;
    *out = r;
    return DJ_OK;
fail:
    server_completion_req_free(&r);
    return st;
}

/* An optional string field of /infill (absent or null: none). */
static bool opt_str(json_t *req, const char *key, json_t **out) {
    json_t *x = json_object_get(req, key);
    *out = NULL;
    if (!x || json_is_null(x)) return true;
    if (!json_is_string(x)) return false;
    *out = x;
    return true;
}

enum dj_status server_parse_infill(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                   struct dj_completion_req *out, int *http_status, const char **param) {
    struct dj_completion_req r;
    enum dj_status st = parse_root(alias, body, n, &r, http_status, param);
    if (st != DJ_OK) goto fail;
    json_t *req = r.root;
    struct dj_fim_tokens ft;
    if (!vocab_fim_tokens(v, &ft)) {
        dj_fail(DJ_ERR_INVALID, DJ_SERVER_NO_FIM " (/infill needs them)");
        st = bad(http_status, param, NULL, 400);
        goto fail;
    }
    r.fim = true;
    static const char *const req_keys[2] = {"input_prefix", "input_suffix"};
    json_t **dst[2] = {&r.fr.prefix, &r.fr.suffix};
    for (size_t i = 0; i < 2; i++)
        if (!opt_str(req, req_keys[i], dst[i]) || !*dst[i]) {
            dj_fail(DJ_ERR_INVALID, "%s is required (a string)", req_keys[i]);
            st = bad(http_status, param, req_keys[i], 400);
            goto fail;
        }
    if (!opt_str(req, "prompt", &r.fr.prompt)) {
        dj_fail(DJ_ERR_INVALID, "prompt must be a string (the text after input_prefix)");
        st = bad(http_status, param, "prompt", 400);
        goto fail;
    }
    json_t *ex = json_object_get(req, "input_extra");
    if (ex && !json_is_null(ex)) {
        if (!json_is_array(ex)) {
            dj_fail(DJ_ERR_INVALID, "input_extra must be an array of {\"filename\": string, \"text\": string}");
            st = bad(http_status, param, "input_extra", 400);
            goto fail;
        }
        size_t i;
        json_t *c;
        json_array_foreach(ex, i, c) {
            json_t *fn = json_object_get(c, "filename");
            if (!json_is_string(json_object_get(c, "text")) || (fn && !json_is_null(fn) && !json_is_string(fn))) {
                dj_fail(DJ_ERR_INVALID, "input_extra[%zu] must be an object with a string text and an optional "
                        "string filename", i);
                st = bad(http_status, param, "input_extra", 400);
                goto fail;
            }
        }
        r.fr.extra = ex;
    }
    /* n_predict: -1 no limit, 0 no text (llama.vscode's warm-up request); else the limit */
    json_t *np = json_object_get(req, "n_predict");
    if (np && !json_is_null(np)) {
        if (!json_is_integer(np) || json_integer_value(np) < -1 || json_integer_value(np) > 1000000000) {
            dj_fail(DJ_ERR_INVALID, "n_predict must be an integer in [-1, 1e9] (-1: no limit)");
            st = bad(http_status, param, "n_predict", 400);
            goto fail;
        }
        r.no_predict = json_integer_value(np) == 0;
        if (json_integer_value(np) <= 0) json_object_del(req, "n_predict"); /* not a limit */
    }
    json_t *rt = json_object_get(req, "return_tokens");
    if (rt && !json_is_null(rt) && !json_is_boolean(rt)) {
        dj_fail(DJ_ERR_INVALID, "return_tokens must be a boolean");
        st = bad(http_status, param, "return_tokens", 400);
        goto fail;
    }
    r.return_tokens = json_is_true(rt);
    static const struct dj_sampling_keys keys = {{"n_predict", "max_tokens"}, "stop", false, false};
    if ((st = parse_common(req, &keys, &r, http_status, param)) != DJ_OK) goto fail;
    *out = r;
    return DJ_OK;
fail:
    server_completion_req_free(&r);
    return st;
}

/* ---- the fill-in-the-middle prompt ---------------------------------------------------- */

struct toks {
    dj_token *p;
    size_t n, cap;
};

static bool toks_push(struct toks *t, const dj_token *x, size_t n) {
    if (t->n + n > t->cap) {
        size_t cap = (t->n + n) * 2 + 16;
        dj_token *np = realloc(t->p, cap * sizeof *np);
        if (!np) return false;
        t->p = np;
        t->cap = cap;
    }
    if (n) memcpy(t->p + t->n, x, n * sizeof *x);
    t->n += n;
    return true;
}

/* Appends the tokens of s[0..n) (no BOS/EOS). */
static enum dj_status toks_text(struct toks *t, const struct dj_vocab *v, const char *s, size_t n, bool parse_special) {
    dj_token *ids = NULL;
    size_t n_ids = 0;
    enum dj_status st = vocab_tokenize(v, s, n, false, parse_special, &ids, &n_ids);
    if (st != DJ_OK) return st;
    const bool ok = toks_push(t, ids, n_ids);
    free(ids);
    return ok ? DJ_OK : dj_fail(DJ_ERR_NOMEM, "out of memory building a fill-in-the-middle prompt");
}

static enum dj_status toks_json(struct toks *t, const struct dj_vocab *v, const json_t *s, bool parse_special) {
    return s ? toks_text(t, v, json_string_value(s), json_string_length(s), parse_special) : DJ_OK;
}

size_t server_fim_batch(size_t n_ctx) { return n_ctx / 2 < 2048 ? n_ctx / 2 : 2048; }

enum dj_status server_fim_prompt(const struct dj_vocab *v, const struct dj_fim_req *f, size_t n_ctx, size_t n_predict,
                                 dj_token **out, size_t *n_out) {
    struct dj_fim_tokens ft;
    if (!vocab_fim_tokens(v, &ft)) return dj_fail(DJ_ERR_UNSUPPORTED, DJ_SERVER_NO_FIM);
    struct toks extra = {0}, pre = {0}, suf = {0}, prompt = {0}, all = {0};
    enum dj_status st = DJ_OK;
    static const char snippet[] = "\n\n--- snippet ---\n\n";
    if (ft.rep >= 0 && (!toks_push(&extra, &ft.rep, 1) || (st = toks_text(&extra, v, "myproject\n", 10, false))))
        goto done;
    size_t i;
    json_t *c;
    json_array_foreach(f->extra, i, c) {
        if (ft.sep >= 0) {
            const json_t *fn = json_object_get(c, "filename");
            const char *name = json_is_string(fn) ? json_string_value(fn) : "tmp";
            const size_t n_name = json_is_string(fn) ? json_string_length(fn) : 3;
            char *line = malloc(n_name + 2);
            if (!line || !toks_push(&extra, &ft.sep, 1)) {
                free(line);
                st = dj_fail(DJ_ERR_NOMEM, "out of memory building a fill-in-the-middle prompt");
                goto done;
            }
            memcpy(line, name, n_name);
            line[n_name] = '\n';
            st = toks_text(&extra, v, line, n_name + 1, false);
            free(line);
        } else {
            st = toks_text(&extra, v, snippet, sizeof snippet - 1, false);
        }
        if (st || (st = toks_json(&extra, v, json_object_get(c, "text"), false))) goto done;
    }
    if (ft.sep >= 0 && (!toks_push(&extra, &ft.sep, 1) || (st = toks_text(&extra, v, "filename\n", 9, false))))
        goto done;
    if ((st = toks_json(&pre, v, f->prefix, false)) || (st = toks_json(&suf, v, f->suffix, false)) ||
        (st = toks_json(&prompt, v, f->prompt, true)))
        goto done;
    /* llama-server's budgets: the prefix's end and the suffix's start (3:1), extra context in what is left */
    const size_t b = server_fim_batch(n_ctx), np = n_predict ? n_predict : 1;
    const size_t n_pre = pre.n < 3 * (b / 4) ? pre.n : 3 * (b / 4);
    const size_t suf_room = b / 4 > 2 + prompt.n ? b / 4 - 2 - prompt.n : 0;
    const size_t n_suf = suf.n < suf_room ? suf.n : suf_room;
    const size_t extra_room = n_ctx > b + 2 && np <= (n_ctx - b - 2) / 2 ? n_ctx - b - 2 - 2 * np : 0;
    const size_t n_extra = extra.n < extra_room ? extra.n : extra_room;
    const dj_token bos = vocab_bos(v);
    const bool ok = toks_push(&all, n_extra ? extra.p + extra.n - n_extra : NULL, n_extra) &&
                    (!vocab_add_bos(v) || bos < 0 || toks_push(&all, &bos, 1)) && toks_push(&all, &ft.pre, 1) &&
                    toks_push(&all, n_pre ? pre.p + pre.n - n_pre : NULL, n_pre) && toks_push(&all, prompt.p, prompt.n) &&
                    toks_push(&all, &ft.suf, 1) && toks_push(&all, suf.p, n_suf) && toks_push(&all, &ft.mid, 1);
    if (!ok) {
        st = dj_fail(DJ_ERR_NOMEM, "out of memory building a fill-in-the-middle prompt");
        goto done;
    }
    *out = all.p;
    *n_out = all.n;
    all.p = NULL;
done:
    free(extra.p);
    free(pre.p);
    free(suf.p);
    free(prompt.p);
    free(all.p);
    return st;
}
