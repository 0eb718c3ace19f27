/*
 * metrics.h — the server's Prometheus metrics (GET /metrics, text format
 * 0.0.4).  Names are llama-server's where one is equivalent
 * (prompt_tokens_total, tokens_predicted_total, requests_processing,
 * requests_deferred, ...) under a `deja_` prefix, plus what deja adds:
 * prefix-cache queries and hits in tokens by source, KV blocks by state, TTFT
 * and inter-token latency histograms, grammar-skipped tokens, every
 * optimization counter, and the two gauges the Gateway API Inference
 * Extension reads (queue length, KV utilisation).
 *
 * The prefix is `deja_`, not `deja:` as llama-server's `llamacpp:`:
 * `promtool check metrics` rejects ':' in names (colons are reserved for
 * recording rules).
 *
 * Thread-safe: connection threads and the engine thread record, any thread
 * renders.
 */
#ifndef DJ_SERVER_METRICS_H
#define DJ_SERVER_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "spec/spec.h"
#include "kv/pool.h"
#include "opt/opt.h"
#include "server/http.h"

enum { DJ_METRICS_BUCKETS = 14 };

struct dj_histogram {
    uint64_t count[DJ_METRICS_BUCKETS + 1]; /* per bucket (not cumulative); the last is +Inf */
    double sum;
    uint64_t n;
};

/* What the engine thread copies after each step (the engine is not thread-safe). */
struct dj_engine_snapshot {
    size_t running, waiting;
    struct kv_pool_stats pool;
    uint32_t idle_blocks; /* of pool.pinned, those only idle sessions hold (engine_n_blocks_idle) */
    struct llama_opt_stats opt;
    uint64_t n_forward;
};

struct dj_metrics {
    pthread_mutex_t mu;
    uint64_t requests[6];       /* by kind: completions, chat, responses, messages, other, errors */
    uint64_t http_status[6];    /* 2xx .. 5xx by first digit (index 2..5) */
    uint64_t prompt_tokens, cached_own, cached_pool, cached_disk, cached_approx, computed;
    uint64_t predicted, forced;
    uint64_t drafted[DJ_SPEC_N_SRC], draft_accepted[DJ_SPEC_N_SRC]; /* by draft source (spec/spec.h) */
    uint64_t finished[5];       /* by enum dj_finish */
    uint64_t busy_rejected;     /* 503 when the queue is full */
    double prompt_seconds, predicted_seconds;
    struct dj_histogram ttft, itl, e2e, queue;
    struct dj_engine_snapshot snap;
    const struct http_stats *http; /* the HTTP layer's counters (metrics_set_http), or NULL */
};

enum dj_metric_kind { DJ_MK_COMPLETIONS, DJ_MK_CHAT, DJ_MK_RESPONSES, DJ_MK_MESSAGES, DJ_MK_OTHER };

void metrics_init(struct dj_metrics *m);
void metrics_destroy(struct dj_metrics *m);
void metrics_count_request(struct dj_metrics *m, enum dj_metric_kind kind);
void metrics_count_status(struct dj_metrics *m, unsigned http_status);
void metrics_count_busy(struct dj_metrics *m);
/* One finished completion (each of a request's n). */
void metrics_observe_done(struct dj_metrics *m, const struct dj_turn_result *r);
/* The gap between two tokens of one completion, in seconds. */
void metrics_observe_itl(struct dj_metrics *m, double seconds);
void metrics_set_snapshot(struct dj_metrics *m, const struct dj_engine_snapshot *s);
/* The HTTP layer's counters to render (they outlive m's use). */
void metrics_set_http(struct dj_metrics *m, const struct http_stats *h);

/* The exposition text (malloc'd, NUL-terminated); NULL when out of memory. */
char *metrics_render(struct dj_metrics *m);

#endif
