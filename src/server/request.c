/*
 * request.c — JSON request bodies to engine requests (request.h).
 */
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

json_t *server_parse_body(const char *body, size_t n) {
    json_error_t err;
    json_t *req = json_loadb(body, n, 0, &err);
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

enum dj_status server_parse_completion(const struct dj_vocab *v, const char *alias, const char *body, size_t n,
                                       struct dj_completion_req *out, int *http_status, const char **param) {
    struct dj_completion_req r = {0};
    *param = NULL;
    *http_status = 400;
    if (!(r.root = server_parse_body(body, n))) return DJ_ERR_INVALID;
    json_t *req = r.root;
    enum dj_status st = DJ_OK;
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_null(model) && (!json_is_string(model) || strcmp(json_string_value(model), alias))) {
        dj_fail(DJ_ERR_INVALID, "model '%s' is not served here (this server has '%s')",
                json_is_string(model) ? json_string_value(model) : "?", alias);
        st = bad(http_status, param, "model", 404);
        goto fail;
    }
    json_t *jp = json_object_get(req, "prompt");
    if (json_is_string(jp)) {
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
    if (r.n_prompt == 0) {
        dj_fail(DJ_ERR_INVALID, "the prompt is empty and the model adds no BOS token");
        st = bad(http_status, param, "prompt", 400);
        goto fail;
    }

    struct dj_sampling_req sr;
    static const struct dj_sampling_keys keys = {{"max_tokens", NULL}, "stop", true, true};
    if ((st = server_parse_sampling(req, &keys, &sr, http_status, param)) != DJ_OK) goto fail;
    r.sp = sr.sp;
    r.has_seed = sr.has_seed;
    r.max_tokens = sr.max_tokens;
    r.n = sr.n;
    memcpy(r.stop, sr.stop, sizeof r.stop);
    r.n_stop = sr.n_stop;
    r.stream = sr.stream;
    r.include_usage = sr.include_usage;
    r.ignore_eos = sr.ignore_eos;
    json_t *salt = json_object_get(req, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt)) {
            dj_fail(DJ_ERR_INVALID, "cache_salt must be a string");
            st = bad(http_status, param, "cache_salt", 400);
            goto fail;
        }
        r.cache_salt = json_string_value(salt);
    }
    *out = r;
    return DJ_OK;
fail:
    server_completion_req_free(&r);
    return st;
}
