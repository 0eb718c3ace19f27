/*
 * fuzz_request.c — the server's request parsers on arbitrary bodies: the
 * first byte picks /v1/completions (server_parse_completion, src/server/
 * request.c), a chat dialect (api_parse_chat, src/server/api.h: Chat
 * Completions, Responses, Messages, Messages count_tokens) or /infill
 * (server_parse_infill); the rest is the body.  Each returns a request or an
 * error with an HTTP status and a message, never crashes.  Checked on success:
 *   completions  a non-empty prompt of valid ids (or, with a suffix, the FIM parts), 1..16
 *                completions, at most 16 stop strings, logprobs -1..20, at most one
 *                output constraint (a non-empty grammar, a schema object or any object)
 *                and its field named;
 *   infill       the FIM parts (strings; input_extra chunks with a string text), one
 *                completion, no logprobs; for both, server_fim_prompt's prompt (a context
 *                size drawn from the body's length) is valid ids ending in the MID token,
 *                and within the context when there is no /infill prompt;
 *   chat         messages in api.h's shape (roles, string / null / text-part content, tool
 *                calls with string arguments, tool messages with a tool_call_id), tools
 *                non-empty with unique names or NULL (then tool_choice NONE), a NAMED choice
 *                naming one of them, n 1..16 (1 outside Chat), top_logprobs <= 20.
 * The body's bytes also drive a stream and a response of the dialect (as
 * delta text, split into pieces of every kind): every SSE event must be
 * whole and its data valid JSON, whatever bytes (invalid UTF-8 included)
 * the deltas held.
 *
 * Responses also go through the stored-response path (api.h): the parsed
 * request is bound to a small store (api_responses_attach: its own
 * previous_response_id, usually unknown: a 404 body), its response (with the
 * request's echo and namespace names, calls named after its first flattened
 * namespace tool) is kept, and the same body with previous_response_id set to
 * that response must parse, attach and translate to stored items + output +
 * its own input (checked as above, messages at least as many as before);
 * GET / DELETE of the id answer the stored object / {deleted: true}.  The
 * stream's final object (api_stream_response) must equal its last event's.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/api.h"
#include "server/request.h"
#include "server/response_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dj_vocab *vocab;
static bool loaded;

/* The constraint and FIM fields of a parsed completion or infill request. */
static void check_completion(const struct dj_completion_req *r, size_t size) {
    if (r->n < 1 || r->n > DJ_SERVER_N_MAX || r->n_stop > DJ_SERVER_STOP_MAX) abort();
    if (r->logprobs < -1 || r->logprobs > DJ_SERVER_LOGPROBS_MAX) abort();
    const struct dj_constraint_req *c = &r->cons;
    const int n_cons = (c->grammar != NULL) + (c->json_schema != NULL) + c->json_object;
    if (n_cons > 1 || (n_cons == 1) != (c->param != NULL)) abort();
    if (c->grammar && !c->grammar[0]) abort();
    if (c->json_schema && !json_is_object(c->json_schema)) abort();
    if (!r->fim) {
        if (r->n_prompt == 0) abort();
        for (size_t i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 0 || (size_t)r->prompt[i] >= vocab_n_tokens(vocab)) abort();
        return;
    }
    const struct dj_fim_req *f = &r->fr;
    if (r->prompt || !json_is_string(f->prefix) || !json_is_string(f->suffix)) abort();
    if (f->prompt && !json_is_string(f->prompt)) abort();
    size_t i;
    json_t *ch;
    json_array_foreach(f->extra, i, ch) if (!json_is_string(json_object_get(ch, "text"))) abort();
    const size_t n_ctx = 16 + size % 3000;
    dj_token *p = NULL;
    size_t n = 0;
    struct dj_fim_tokens ft;
    if (!vocab_fim_tokens(vocab, &ft)) abort(); /* the parser refused such vocabularies */
    if (server_fim_prompt(vocab, f, n_ctx, r->max_tokens, &p, &n) != DJ_OK) {
        if (!dj_last_error()[0]) abort();
        return;
    }
    if (n < 3 || p[n - 1] != ft.mid || (!f->prompt && n > n_ctx)) abort();
    for (size_t k = 0; k < n; k++)
        if (p[k] < 0 || (size_t)p[k] >= vocab_n_tokens(vocab)) abort();
    free(p);
}

static bool is_text_parts(const json_t *c) {
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        if (!json_is_string(json_object_get(p, "text")) || strcmp(json_string_value(json_object_get(p, "type")), "text"))
            return false;
    }
    return true;
}

static void check_chat(const struct dj_chat_req *r, enum dj_api api) {
    /* (a Responses turn continuing a stored one may add no input of its own) */
    if (!json_is_array(r->messages) || (json_array_size(r->messages) == 0 && !r->previous_response_id)) abort();
    size_t i;
    json_t *m;
    json_array_foreach(r->messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (!role) abort();
        if (!(json_is_string(c) || json_is_null(c) || (json_is_array(c) && is_text_parts(c)))) abort();
        if (!strcmp(role, "tool")) {
            if (!json_is_string(json_object_get(m, "tool_call_id"))) abort();
        } else if (!strcmp(role, "assistant")) {
            json_t *tc = json_object_get(m, "tool_calls"), *k;
            size_t j;
            json_array_foreach(tc, j, k) {
                json_t *fn = json_object_get(k, "function");
                if (!json_is_string(json_object_get(k, "id")) || !json_is_string(json_object_get(fn, "name")) ||
                    !json_is_string(json_object_get(fn, "arguments")))
                    abort();
            }
            json_t *rc = json_object_get(m, "reasoning_content");
            if (rc && !json_is_string(rc)) abort();
        } else if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user")) {
            abort();
        }
    }
    if (r->tools) {
        if (!json_is_array(r->tools) || json_array_size(r->tools) == 0) abort();
        for (size_t a = 0; a < json_array_size(r->tools); a++) {
            json_t *na = json_object_get(json_object_get(json_array_get(r->tools, a), "function"), "name");
            if (!json_is_string(na)) abort();
            for (size_t b = a + 1; b < json_array_size(r->tools); b++)
                if (json_equal(na, json_object_get(json_object_get(json_array_get(r->tools, b), "function"), "name")))
                    abort();
        }
    } else if (r->tool_choice != DJ_TOOL_NONE) {
        abort();
    }
    if (r->tool_choice == DJ_TOOL_NAMED) {
        bool found = false;
        for (size_t a = 0; a < json_array_size(r->tools); a++)
            found |= !strcmp(json_string_value(json_object_get(
                                 json_object_get(json_array_get(r->tools, a), "function"), "name")),
                             r->tool_name);
        if (!found) abort();
    }
    if (api == DJ_API_RESPONSES) {
        if (!json_is_array(r->items)) abort();
        if (r->previous_response_id && !json_is_string(json_object_get(r->root, "previous_response_id"))) abort();
        /* every flattened namespace name is one of the tools */
        const char *flat;
        json_t *e;
        json_object_foreach(json_object_get(r->resp_meta, "namespaces"), flat, e) {
            bool found = false;
            for (size_t a = 0; a < json_array_size(r->tools); a++)
                found |= !strcmp(json_string_value(json_object_get(
                                     json_object_get(json_array_get(r->tools, a), "function"), "name")),
                                 flat);
            if (!found || !json_is_string(json_object_get(e, "namespace")) || !json_is_string(json_object_get(e, "name")))
                abort();
        }
    } else if (r->items || r->resp_meta || r->previous_response_id || r->store) {
        abort();
    }
    if (r->n < 1 || r->n > DJ_SERVER_N_MAX || (api != DJ_API_CHAT && r->n != 1)) abort();
    if (r->n_stop > DJ_SERVER_STOP_MAX || r->top_logprobs > 20) abort();
    if (r->n_bias && r->sp.logit_bias != r->bias) abort();
    if (api == DJ_API_MESSAGES && r->max_tokens == 0) abort();
    /* Anthropic's thinking budget, display and cache_control: set by /v1/messages only */
    if (r->reasoning_budget < -1) abort();
    if (api != DJ_API_MESSAGES && api != DJ_API_MESSAGES_COUNT &&
        (r->reasoning_budget != -1 || r->reasoning_omitted || r->cache_control))
        abort();
}

/* Every event of the stream is whole and its data JSON. */
static void check_sse(const struct dj_sbuf *b) {
    if (b->oom) return;
    const char *s = b->p ? b->p : "";
    while (*s) {
        const char *end = strstr(s, "\n\n");
        if (!end) abort();
        const char *d = s;
        if (!strncmp(d, "event: ", 7)) {
            d = strchr(d, '\n');
            if (!d || d > end) abort();
            d++;
        }
        if (strncmp(d, "data: ", 6)) abort();
        d += 6;
        if (strncmp(d, "[DONE]\n\n", 8)) {
            json_t *j = json_loadb(d, (size_t)(end - d), JSON_ALLOW_NUL, NULL); /* NUL bytes come back escaped */
            if (!json_is_object(j)) abort();
            json_decref(j);
        }
        s = end + 2;
    }
}

/* The name the model calls with: meta's first flattened namespace tool, else "f\xff". */
static const char *call_name(const json_t *meta) {
    void *it = json_object_iter(json_object_get(meta, "namespaces"));
    return it ? json_object_iter_key(it) : "f\xff";
}

/* A stream and a response of dialect api whose deltas are the input's bytes (meta: the parsed
 * Responses request's, or NULL). */
static void fuzz_output(enum dj_api api, const uint8_t *data, size_t size, const json_t *meta) {
    struct dj_api_stream *st = api_stream_new(api, "id_1", "m", 1, 2, true, size);
    if (!st) return;
    struct dj_sbuf b = {0};
    api_stream_set_meta(st, meta);
    api_stream_set_reasoning_omitted(st, size & 8); /* Messages: reasoning in the signature */
    api_stream_start(st, &b);
    char ids[4][16];
    uint32_t n_tools = 0;
    for (size_t i = 0; i + 1 < size && i < 4096;) {
        const uint8_t ctl = data[i++];
        size_t n = 1 + (ctl >> 4);
        if (n > size - i) n = size - i;
        struct dj_chat_delta d = {0};
        d.kind = (enum dj_chat_delta_kind)(ctl & 3);
        d.text = (const char *)data + i;
        d.n = n;
        d.tool_index = (ctl >> 2) & 1 ? n_tools - (n_tools > 0) : n_tools;
        if (d.kind == DJ_DELTA_TOOL_START) {
            snprintf(ids[n_tools & 3], sizeof ids[0], "call_%u", n_tools);
            d.id = ids[n_tools & 3];
            d.name = call_name(meta);
            d.tool_index = n_tools++;
        }
        api_stream_delta(st, (ctl >> 3) & 1, &d, NULL, &b);
        i += n;
    }
    api_stream_finish_seq(st, 0, size & 1 ? DJ_FINISH_LENGTH : DJ_FINISH_STOP, size & 2 ? "\xc3" : NULL, &b);
    char msg[64];
    snprintf(msg, sizeof msg, "%.*s", (int)(size < 63 ? size : 63), (const char *)data);
    if (size & 4) api_stream_error(st, msg, &b);
    struct dj_chat_usage u = {.prompt = size, .cached = size / 2, .completion = size, .cache_write = size / 4};
    const size_t before = b.n;
    api_stream_end(st, &u, &b);
    check_sse(&b);
    /* the final object a server stores is the one the last event carried */
    json_t *fin = api_stream_response(st);
    if (fin && !b.oom) {
        const char *last = strstr(b.p + before, "data: ");
        json_t *ev = last ? json_loads(last + 6, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, NULL) : NULL;
        if (!ev || !json_equal(json_object_get(ev, "response"), fin)) abort();
        json_decref(ev);
    }
    json_decref(fin);
    sbuf_free(&b);
    api_stream_free(st);

    struct dj_chat_call call = {.name = (char *)call_name(meta), .args = (char *)data, .n_args = size};
    snprintf(call.id, sizeof call.id, "call_x");
    struct dj_chat_choice c = {.content = (char *)data, .n_content = size, .reasoning = (char *)data,
                               .n_reasoning = size / 2, .calls = &call, .n_calls = size & 1,
                               .finish = size & 2 ? DJ_FINISH_LENGTH : DJ_FINISH_STOP, .reasoning_omitted = size & 8};
    json_t *j = api_response(api, "id_1", "m", 1, &c, 1, &u);
    api_responses_apply_meta(j, meta);
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (j && !txt) abort();
    free(txt);
    json_decref(j);
}

static struct dj_response_store *store;

/* The stored-response path of a parsed Responses request r (see the header). */
static void fuzz_store(struct dj_chat_req *r, const uint8_t *data, size_t size) {
    if (!store && response_store_create(8, 1 << 20, &store) != DJ_OK) return;
    json_t *err = NULL;
    unsigned http = 0;
    if (api_responses_attach(r, store, &err, &http) != DJ_OK) {
        if (!err || (http != 404 && http != 400 && http != 500) || !json_is_object(json_object_get(err, "error"))) abort();
        json_decref(err);
        return;
    }
    if (err) abort();
    /* this turn's response (its output: a reasoning item, text and a call of the request's names) */
    struct dj_chat_call call = {.name = (char *)call_name(r->resp_meta), .args = (char *)data, .n_args = size};
    snprintf(call.id, sizeof call.id, "call_s");
    struct dj_chat_choice c = {.content = (char *)data, .n_content = size / 2, .reasoning = (char *)data,
                               .n_reasoning = size / 3, .calls = &call, .n_calls = size & 1,
                               .finish = size & 2 ? DJ_FINISH_LENGTH : DJ_FINISH_STOP};
    struct dj_chat_usage u = {.prompt = size, .completion = size};
    json_t *resp = api_response(DJ_API_RESPONSES, "resp_fz", "m", 1, &c, 1, &u);
    api_responses_apply_meta(resp, r->resp_meta);
    if (!resp || api_responses_keep(store, r->items, resp) != DJ_OK) {
        json_decref(resp);
        return;
    }
    json_t *got = api_responses_get(store, "resp_fz", &err);
    if (!got || !json_equal(got, resp)) abort();
    json_decref(got);
    /* the same body continuing resp_fz */
    json_t *next = json_copy(r->root);
    char *txt = next && !json_object_set_new(next, "previous_response_id", json_string("resp_fz"))
                    ? json_dumps(next, JSON_COMPACT | JSON_ENCODE_ANY)
                    : NULL;
    json_decref(next);
    struct dj_chat_req r2;
    memset(&r2, 0, sizeof r2);
    int status = 0;
    const char *param = NULL;
    if (txt && api_parse_chat(DJ_API_RESPONSES, "m", txt, strlen(txt), &r2, &status, &param) == DJ_OK) {
        const size_t own = json_array_size(r2.items);
        if (api_responses_attach(&r2, store, &err, &http) == DJ_OK) {
            check_chat(&r2, DJ_API_RESPONSES);
            if (json_array_size(r2.items) != json_array_size(r->items) + json_array_size(json_object_get(resp, "output")) + own)
                abort();
        } else if (http != 500) {
            abort(); /* resp_fz was just stored: only a failure to read it back may fail */
        } else {
            json_decref(err);
        }
        api_chat_req_free(&r2);
    }
    free(txt);
    json_t *del = api_responses_delete(store, "resp_fz", &err);
    if (!del || !json_is_true(json_object_get(del, "deleted"))) abort();
    json_decref(del);
    if (api_responses_get(store, "resp_fz", &err) || !err) abort();
    json_decref(err);
    json_decref(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        loaded = true;
        const char *dir = getenv("DJ_SHARED_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-deepseek-coder.gguf", dir && *dir ? dir : "../shared");
        if (dj_vocab_load_file(path, &vocab) != DJ_OK) vocab = NULL;
    }
    if (size == 0) return 0;
    const unsigned which = data[0] % 6;
    const char *body = (const char *)data + 1;
    const size_t n = size - 1;
    int status = 0;
    const char *param = NULL;
    if (which == 0 || which == 5) {
        if (!vocab) return 0;
        struct dj_completion_req r = {0};
        const enum dj_status st = which == 0 ? server_parse_completion(vocab, "m", body, n, &r, &status, &param)
                                             : server_parse_infill(vocab, "m", body, n, &r, &status, &param);
        if (st == DJ_OK) {
            if (which == 5 && (!r.fim || r.n != 1 || r.logprobs != -1)) abort();
            check_completion(&r, size);
            server_completion_req_free(&r);
        } else if ((status != 400 && status != 404 && status != 500) || !dj_last_error()[0] || r.root || r.prompt) {
            abort();
        }
        return 0;
    }
    const enum dj_api api = (enum dj_api)(which - 1);
    struct dj_chat_req r;
    memset(&r, 0, sizeof r);
    json_t *meta = NULL;
    if (api_parse_chat(api, "m", body, n, &r, &status, &param) == DJ_OK) {
        check_chat(&r, api);
        meta = json_incref(r.resp_meta);
        if (api == DJ_API_RESPONSES) fuzz_store(&r, (const uint8_t *)body, n);
        api_chat_req_free(&r);
    } else {
        if (status != 400 && status != 404 && status != 500) abort();
        if (!dj_last_error()[0]) abort();
        json_t *e = api_error_json(api, (unsigned)status, param, dj_last_error());
        if (!e) abort();
        json_decref(e);
    }
    fuzz_output(api, (const uint8_t *)body, n, meta);
    json_decref(meta);
    return 0;
}
