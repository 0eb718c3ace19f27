/*
 * metrics.c — Prometheus text exposition of the server's counters (metrics.h).
 */
#include "server/metrics.h"

#include "kv/persist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TTFT_LE[DJ_METRICS_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                   1, 2.5, 5, 10, 25, 60, 120};
static const double ITL_LE[DJ_METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                                  0.08, 0.1, 0.25, 0.5, 1, 2.5, 5};
static const double E2E_LE[DJ_METRICS_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600};

void metrics_init(struct dj_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_destroy(struct dj_metrics *m) { pthread_mutex_destroy(&m->mu); }

void metrics_count_request(struct dj_metrics *m, enum dj_metric_kind kind) {
    pthread_mutex_lock(&m->mu);
    m->requests[kind]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_status(struct dj_metrics *m, unsigned http_status) {
    const unsigned d = http_status / 100;
    if (d < 2 || d > 5) return;
    pthread_mutex_lock(&m->mu);
    m->http_status[d]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_busy(struct dj_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->busy_rejected++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_observe(struct dj_histogram *h, const double *le, double v) {
    size_t i = 0;
    while (i < DJ_METRICS_BUCKETS && v > le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->n++;
}

void metrics_observe_done(struct dj_metrics *m, const struct dj_turn_result *r) {
    pthread_mutex_lock(&m->mu);
    /* prompt figures are the request's: count them once, with completion 0 */
    if (r->index == 0) {
        m->prompt_tokens += r->n_prompt;
        m->cached_own += r->n_reused_own;
        m->cached_pool += r->n_reused_pool - r->n_reused_disk; /* in memory; the rest came from --kv-dir */
        m->cached_disk += r->n_reused_disk;
        m->cached_approx += r->n_reused_approx;
        m->computed += r->n_computed;
        m->prompt_seconds += r->t_prefill_ms / 1000.0;
        hist_observe(&m->queue, TTFT_LE, r->t_queue_ms / 1000.0);
        if (r->finish != DJ_FINISH_ERROR && r->n_gen > 0) hist_observe(&m->ttft, TTFT_LE, r->t_ttft_ms / 1000.0);
    }
    m->predicted += r->n_gen;
    m->forced += r->n_forced;
    for (int i = 0; i < DJ_SPEC_N_SRC; i++) {
        m->drafted[i] += r->spec.drafted[i];
        m->draft_accepted[i] += r->spec.accepted[i];
    }
    m->predicted_seconds += r->t_decode_ms / 1000.0;
    if ((unsigned)r->finish < sizeof m->finished / sizeof m->finished[0]) m->finished[r->finish]++;
    hist_observe(&m->e2e, E2E_LE, (r->t_queue_ms + r->t_prefill_ms + r->t_decode_ms) / 1000.0);
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe_itl(struct dj_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->itl, ITL_LE, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_snapshot(struct dj_metrics *m, const struct dj_engine_snapshot *s) {
    pthread_mutex_lock(&m->mu);
    m->snap = *s;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_http(struct dj_metrics *m, const struct http_stats *h) {
    pthread_mutex_lock(&m->mu);
    m->http = h;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ------------------------------------------------------------------ */

struct out {
    char *p;
    size_t n, cap;
    bool oom;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)k < o->cap - o->n) {
            o->n += (size_t)k;
            return;
        }
        const size_t cap = (o->cap + (size_t)k + 1) * 2;
        char *np = realloc(o->p, cap);
        if (!np) {
            o->oom = true;
            return;
        }
        o->p = np;
        o->cap = cap;
    }
}

static void head(struct out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP deja_%s %s\n# TYPE deja_%s %s\n", name, help, name, type);
}

static void scalar(struct out *o, const char *name, const char *type, const char *help, double v) {
    head(o, name, type, help);
    put(o, "deja_%s %.17g\n", name, v);
}

static void histogram(struct out *o, const char *name, const char *help, const struct dj_histogram *h,
                      const double *le) {
    head(o, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < DJ_METRICS_BUCKETS; i++) {
        cum += h->count[i];
        put(o, "deja_%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
    }
    cum += h->count[DJ_METRICS_BUCKETS];
    put(o, "deja_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    put(o, "deja_%s_sum %.17g\ndeja_%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

char *metrics_render(struct dj_metrics *mm) {
    pthread_mutex_lock(&mm->mu);
    const struct dj_metrics m = *mm; /* a consistent copy; render without the lock */
    pthread_mutex_unlock(&mm->mu);
    struct out o = {0};
    const struct dj_engine_snapshot *s = &m.snap;

    /* llama-server's names (llamacpp:X there) */
    scalar(&o, "prompt_tokens_total", "counter", "Prompt tokens of all requests (cached ones included).",
           (double)m.prompt_tokens);
    scalar(&o, "prompt_seconds_total", "counter", "Time spent computing prompts (admission to first logits).",
           m.prompt_seconds);
    scalar(&o, "tokens_predicted_total", "counter", "Tokens generated (sampled and grammar-forced).",
           (double)m.predicted);
    scalar(&o, "tokens_predicted_seconds_total", "counter", "Time spent generating (first token to the end).",
           m.predicted_seconds);
    scalar(&o, "requests_processing", "gauge", "Requests admitted and running.", (double)s->running);
    scalar(&o, "requests_deferred", "gauge", "Requests waiting for admission (KV budget or --parallel).",
           (double)s->waiting);
    scalar(&o, "n_decode_total", "counter", "Batched forward passes run.", (double)s->n_forward);

    /* the Gateway API Inference Extension's two gauges (vLLM's num_requests_waiting, kv_cache_usage_perc) */
    scalar(&o, "num_requests_waiting", "gauge", "Requests queued for admission (inference-gateway queue length).",
           (double)s->waiting);
    const double cap = s->pool.capacity ? (double)s->pool.capacity : 1.0;
    const uint32_t idle = s->idle_blocks <= s->pool.pinned ? s->idle_blocks : s->pool.pinned;
    const uint32_t used = s->pool.pinned - idle;
    scalar(&o, "kv_cache_usage_perc", "gauge",
           "Fraction of the KV block budget held by running requests (0..1; inference-gateway KV utilisation).",
           (double)used / cap);

    head(&o, "kv_blocks", "gauge",
         "KV blocks of the budget by state: used (held by running requests), idle (held only by idle sessions "
         "for their next turn; released when memory is needed), cached (reusable), free.");
    const uint32_t cached = s->pool.allocated >= s->pool.pinned ? s->pool.allocated - s->pool.pinned : 0;
    const uint32_t freeb = s->pool.capacity >= s->pool.allocated ? s->pool.capacity - s->pool.allocated : 0;
    put(&o,
        "deja_kv_blocks{state=\"used\"} %u\ndeja_kv_blocks{state=\"idle\"} %u\ndeja_kv_blocks{state=\"cached\"} %u\n"
        "deja_kv_blocks{state=\"free\"} %u\n",
        used, idle, cached, freeb);
    scalar(&o, "kv_blocks_evicted_total", "counter", "Cached KV blocks evicted to make room.", (double)s->pool.evicted);

    /* prefix reuse: vLLM's prefix_cache_queries / hits, in tokens, hits by source */
    scalar(&o, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           (double)m.prompt_tokens);
    head(&o, "prefix_cache_hits_total", "counter", "Prompt tokens reused instead of computed, by source.");
    put(&o,
        "deja_prefix_cache_hits_total{source=\"own\"} %llu\ndeja_prefix_cache_hits_total{source=\"pool\"} %llu\n"
        "deja_prefix_cache_hits_total{source=\"disk\"} %llu\ndeja_prefix_cache_hits_total{source=\"approx\"} %llu\n",
        (unsigned long long)m.cached_own, (unsigned long long)m.cached_pool, (unsigned long long)m.cached_disk,
        (unsigned long long)m.cached_approx);
    scalar(&o, "prompt_tokens_computed_total", "counter", "Prompt tokens computed through every layer.",
           (double)m.computed);
    scalar(&o, "tokens_grammar_skipped_total", "counter",
           "Generated tokens a grammar forced, emitted without a forward pass of their own.", (double)m.forced);
    head(&o, "draft_tokens_total", "counter", "Draft tokens fed for verification, by draft source.");
    for (int i = 0; i < DJ_SPEC_N_SRC; i++)
        put(&o, "deja_draft_tokens_total{source=\"%s\"} %llu\n", spec_src_name((enum dj_spec_src)i),
            (unsigned long long)m.drafted[i]);
    head(&o, "draft_tokens_accepted_total", "counter", "Draft tokens the sampler confirmed (each saved a pass), by source.");
    for (int i = 0; i < DJ_SPEC_N_SRC; i++)
        put(&o, "deja_draft_tokens_accepted_total{source=\"%s\"} %llu\n", spec_src_name((enum dj_spec_src)i),
            (unsigned long long)m.draft_accepted[i]);

    static const char *const kinds[] = {"completions", "chat", "responses", "messages", "other"};
    head(&o, "requests_total", "counter", "HTTP requests by API.");
    for (size_t i = 0; i < 5; i++) put(&o, "deja_requests_total{api=\"%s\"} %llu\n", kinds[i], (unsigned long long)m.requests[i]);
    head(&o, "http_responses_total", "counter", "HTTP responses by status class.");
    for (unsigned d = 2; d <= 5; d++) put(&o, "deja_http_responses_total{code=\"%ux\"} %llu\n", d, (unsigned long long)m.http_status[d]);
    scalar(&o, "requests_rejected_busy_total", "counter", "Requests refused with 503 because the queue was full.",
           (double)m.busy_rejected);
    head(&o, "completions_finished_total", "counter", "Completions by finish reason.");
    for (int f = DJ_FINISH_STOP; f <= DJ_FINISH_ERROR; f++)
        put(&o, "deja_completions_finished_total{reason=\"%s\"} %llu\n", engine_finish_name((enum dj_finish)f),
            (unsigned long long)m.finished[f]);

    if (m.http) { /* the HTTP layer (http.h): connections and what closed them */
        const struct http_stats *h = m.http;
        scalar(&o, "http_connections", "gauge", "Client connections open.", (double)atomic_load(&h->open));
        scalar(&o, "http_connections_accepted_total", "counter", "Client connections accepted.",
               (double)atomic_load(&h->accepted));
        head(&o, "http_connections_closed_total", "counter",
             "Connections the server closed before a handler answered, by reason: evicted (to make room under "
             "--conn-max / --conn-per-ip), refused (503: every connection busy), head_timeout / body_timeout "
             "(--header-timeout / --body-timeout), idle (keep-alive past --timeout), bad_request (framing errors "
             "and refusals before the body: 400, 401, 413, 415, 431, ...), write_timeout (a client that stopped "
             "reading), aborted (answered with nothing: the client left or cancelled).");
        const struct {
            const char *reason;
            unsigned long long n;
        } rs[] = {{"evicted", atomic_load(&h->evicted)},
                  {"refused", atomic_load(&h->refused)},
                  {"head_timeout", atomic_load(&h->head_timeouts)},
                  {"body_timeout", atomic_load(&h->body_timeouts)},
                  {"idle", atomic_load(&h->idle_closed)},
                  {"bad_request", atomic_load(&h->bad_requests)},
                  {"write_timeout", atomic_load(&h->write_timeouts)},
                  {"aborted", atomic_load(&h->aborted)}};
        for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
            put(&o, "deja_http_connections_closed_total{reason=\"%s\"} %llu\n", rs[i].reason, rs[i].n);
    }

    histogram(&o, "time_to_first_token_seconds", "Submit to first generated token.", &m.ttft, TTFT_LE);
    histogram(&o, "inter_token_latency_seconds", "Time between two tokens of one completion as streamed.", &m.itl,
              ITL_LE);
    histogram(&o, "request_latency_seconds", "Submit to the end of a completion.", &m.e2e, E2E_LE);
    histogram(&o, "request_queue_seconds", "Submit to admission.", &m.queue, TTFT_LE);

    /* the persistent KV store (--kv-dir): totals of the process, read from kv/persist.h */
    struct kv_store_totals kt;
    kv_store_get_totals(&kt);
    scalar(&o, "persist_writes_total", "counter", "KV blocks written to --kv-dir (complete, renamed into place).",
           (double)kt.written);
    scalar(&o, "persist_save_failures_total", "counter",
           "KV block writes to --kv-dir that failed (disk full, I/O error, fsync or rename); none left a partial record.",
           (double)kt.write_failures);
    scalar(&o, "persist_corrupt_total", "counter",
           "Corrupt KV block files found in --kv-dir (start-up scan or a load), each removed and logged.",
           (double)kt.corrupt);

    /* every optimization counter of the engine (docs/CONFIG.md), Tier 2 reuse included */
    for (size_t i = 0; i < llama_opt_stats_n_fields(); i++) {
        char name[96];
        snprintf(name, sizeof name, "opt_%s", llama_opt_stats_field_name(i));
        const size_t ln = strlen(name);
        const bool total = ln > 6 && !strcmp(name + ln - 6, "_total");
        if (!total) strncat(name, "_total", sizeof name - ln - 1);
        char help[160];
        snprintf(help, sizeof help, "Optimization counter %s (LLAMA_OPT_STATS; docs/CONFIG.md).",
                 llama_opt_stats_field_name(i));
        scalar(&o, name, "counter", help, (double)llama_opt_stats_get(&s->opt, i));
    }
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
