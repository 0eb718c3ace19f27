/*
 * test_serve.c — `deja serve` over real sockets on a free loopback port:
 * health, models, completions (the same text as `deja run`, streamed and
 * not, prefix reuse reported as cached_tokens, n = 2; speculation, on by
 * default, drafted from the output memo), 4 concurrent streams
 * equal to sequential runs with the same seeds, a disconnected stream is
 * cancelled (with --parallel 1 the next request does not wait behind it),
 * a full queue answers 503 + Retry-After,
 * bad requests get OpenAI-shaped 4xx errors, --api-key, SIGTERM exits 0;
 * --kv-dir: after a restart the prompt's blocks come from disk with the same
 * texts, damaged block files and a kill -9 change nothing, and two servers on
 * one directory at once reuse each other's blocks.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "test.h"
#include "test_run.h"
#include "test_serve.h"

struct conc {
    unsigned port;
    int seed;
    char *text;
};

static void *conc_main(void *arg) {
    struct conc *c = arg;
    char body[256], *out;
    snprintf(body, sizeof body,
             "{\"prompt\": \"def parse(line):\", \"max_tokens\": 24, \"temperature\": 0.9, \"seed\": %d, \"stream\": true}",
             c->seed);
    http(c->port, "POST", "/v1/completions", body, NULL, &out);
    bool done;
    c->text = sse_text(out ? out : "", &done, NULL);
    free(out);
    return NULL;
}

/* While the model loads, /health says 503 "loading model" and the API endpoints 503: the model
 * "file" is a FIFO, so loading blocks in open() until the test opens its other end; the loader
 * then refuses it (not a regular file), and the server exits 1 with the loader's message. */
static void test_loading(void) {
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/deja-test-serve-%d.gguf", (int)getpid());
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) {
        CHECKF(0, "mkfifo %s failed", fifo);
        return;
    }
    struct srv s;
    if (srv_start_until(&s, fifo, NULL, "listening on")) {
        char *out = NULL;
        CHECK(http(s.port, "GET", "/health", NULL, NULL, &out) == 503 && out && strstr(out, "loading model"));
        free(out);
        CHECK(http(s.port, "POST", "/v1/chat/completions", "{\"messages\": []}", NULL, &out) == 503 &&
              is_error(out, NULL) && strstr(out, "loading"));
        free(out);
        /* opening the write end lets the loader's open() return; it then refuses the FIFO
         * (not a regular file) — possibly before anything could be written, so nothing is */
        int fd = open(fifo, O_WRONLY);
        CHECK(fd >= 0);
        if (fd >= 0) close(fd);
        char err[1024];
        size_t k = 0;
        ssize_t r;
        while (k + 1 < sizeof err && (r = read(s.err_fd, err + k, sizeof err - 1 - k)) > 0) k += (size_t)r;
        err[k] = 0;
        CHECKF(strstr(err, "deja serve:") && strstr(err, fifo), "stderr: %s", err);
        CHECK(srv_stop(&s) == 1);
    }
    unlink(fifo);
}

/* --kv-dir: a request, the server stopped (SIGTERM: the queued blocks are written) and
 * started again on the same directory: the same request gets its prompt's blocks from disk
 * (x_deja.reused_disk, counted in cached_tokens) and the same text, greedy and seeded; then a
 * block file damaged and a kill -9 in the middle of serving: still the same texts. */
struct pers_out { char *greedy, *seeded; json_int_t disk, cached, prompt; };
static void pers_requests(unsigned port, struct pers_out *o) {
    static char prompt[4096];
    size_t n = 0;
    for (int i = 0; i < 24 && n + 160 < sizeof prompt; i++)
        n += (size_t)snprintf(prompt + n, sizeof prompt - n, "def f%d(x):\\n    return x * %d + %d\\n\\n", i, i, i * i);
    char req[8192];
    const char *kind[2] = {"\"temperature\": 0", "\"temperature\": 1.0, \"seed\": 11"};
    for (int k = 0; k < 2; k++) {
        snprintf(req, sizeof req, "{\"prompt\": \"%s\", \"max_tokens\": 16, %s}", prompt, kind[k]);
        char *out = NULL;
        CHECK(http(port, "POST", "/v1/completions", req, NULL, &out) == 200);
        json_t *j = body_json(out);
        const char *t = choice_text(j, 0);
        if (k == 0) {
            o->greedy = strdup(t ? t : "");
            json_t *u = json_object_get(j, "usage");
            o->prompt = json_integer_value(json_object_get(u, "prompt_tokens"));
            o->cached = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
            o->disk = json_integer_value(json_object_get(json_object_get(j, "x_deja"), "reused_disk"));
        } else {
            o->seeded = strdup(t ? t : "");
        }
        json_decref(j);
        free(out);
    }
}
static void test_persist(const char *model) {
    char dir[] = "/tmp/deja-test-kvdir-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECKF(0, "mkdtemp");
        return;
    }
    const char *extra[] = {"--kv-dir", dir, NULL};
    struct srv s;
    struct pers_out a = {0}, b = {0}, c = {0}, d = {0};
    long long n_corrupt = -1;
    if (srv_start(&s, model, extra)) {
        pers_requests(s.port, &a);
        CHECK(srv_stop(&s) == 0);
    }
    CHECKF(a.prompt > 128 && a.disk == 0 && a.cached == 0, "first run: prompt %lld, cached %lld, disk %lld",
           (long long)a.prompt, (long long)a.cached, (long long)a.disk);
    if (srv_start(&s, model, extra)) { /* a restart: the prompt's full blocks come from disk */
        pers_requests(s.port, &b);
        char *m = NULL;
        CHECK(http(s.port, "GET", "/metrics", NULL, NULL, &m) == 200);
        const char *dm = m ? strstr(m, "deja_prefix_cache_hits_total{source=\"disk\"} ") : NULL;
        CHECKF(dm && atoll(dm + strlen("deja_prefix_cache_hits_total{source=\"disk\"} ")) == (long long)b.disk,
               "/metrics: %s", dm ? dm : "no disk source");
        free(m);
        CHECK(srv_stop(&s) == 0);
    }
    CHECKF(b.disk >= 128 && b.cached >= b.disk, "after a restart: cached %lld, from disk %lld of %lld",
           (long long)b.cached, (long long)b.disk, (long long)b.prompt);
    CHECKF(a.greedy && b.greedy && !strcmp(a.greedy, b.greedy), "greedy '%s' vs restored '%s'", a.greedy, b.greedy);
    CHECKF(a.seeded && b.seeded && !strcmp(a.seeded, b.seeded), "seeded '%s' vs restored '%s'", a.seeded, b.seeded);
    /* damage every block file (a byte in the middle), then serve and kill -9 mid-way */
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "for f in %s/*/*.kvb; do printf 'X' | dd of=\"$f\" bs=1 seek=4000 conv=notrunc status=none; done", dir);
    CHECK(system(cmd) == 0);
    if (srv_start(&s, model, extra)) {
        pers_requests(s.port, &c);
        /* the damaged files were found (by the start-up scan, or a load) and counted */
        char *m = NULL;
        const char *mk = "\ndeja_persist_corrupt_total ";
        CHECK(http(s.port, "GET", "/metrics", NULL, NULL, &m) == 200);
        const char *cm = m ? strstr(m, mk) : NULL;
        n_corrupt = cm ? atoll(cm + strlen(mk)) : -1;
        CHECKF(n_corrupt >= 1 && strstr(m, "# HELP deja_persist_corrupt_total "),
               "/metrics: %s", cm ? cm + 1 : "no deja_persist_corrupt_total");
        free(m);
        kill(s.pid, SIGKILL);
        waitpid(s.pid, NULL, 0);
        close(s.err_fd);
    }
    CHECKF(c.disk == 0 && c.greedy && a.greedy && !strcmp(a.greedy, c.greedy) && c.seeded && !strcmp(a.seeded, c.seeded),
           "damaged files: from disk %lld, '%s' / '%s'", (long long)c.disk, c.greedy, c.seeded);
    if (srv_start(&s, model, extra)) { /* after the kill: whatever is on disk verifies, or is recomputed */
        pers_requests(s.port, &d);
        CHECK(srv_stop(&s) == 0);
    }
    CHECKF(d.greedy && a.greedy && !strcmp(a.greedy, d.greedy) && d.seeded && !strcmp(a.seeded, d.seeded),
           "after kill -9: '%s' / '%s'", d.greedy, d.seeded);
    /* two servers on one directory at once: B gets the blocks A wrote (a new prompt: A's
     * first 300 characters of it are new, so nothing of it is on disk before A runs) */
    struct srv s2;
    struct pers_out e = {0}, f = {0};
    snprintf(cmd, sizeof cmd, "rm -rf %s/*", dir);
    CHECK(system(cmd) == 0);
    if (srv_start(&s, model, extra)) {
        if (srv_start(&s2, model, extra)) {
            pers_requests(s.port, &e);
            for (int w = 0; w < 100; w++) { /* A's writer thread: the blocks reach the disk shortly after */
                snprintf(cmd, sizeof cmd, "test $(ls %s/*/*.kvb 2>/dev/null | wc -l) -ge 7", dir);
                if (system(cmd) == 0) break;
                usleep(20000);
            }
            pers_requests(s2.port, &f);
            CHECK(srv_stop(&s2) == 0);
        }
        CHECK(srv_stop(&s) == 0);
    }
    CHECKF(e.disk == 0 && f.disk >= 128 && e.greedy && f.greedy && !strcmp(e.greedy, a.greedy) &&
               !strcmp(f.greedy, a.greedy) && f.seeded && !strcmp(f.seeded, a.seeded),
           "two servers: A from disk %lld, B from disk %lld (A's blocks), '%s' / '%s'", (long long)e.disk,
           (long long)f.disk, e.greedy, f.greedy);
    free(e.greedy);
    free(e.seeded);
    free(f.greedy);
    free(f.seeded);
    printf("--kv-dir: restart restored %lld of %lld prompt positions from disk; damaged files (%lld counted in "
           "/metrics) and kill -9: same texts; a second server on the directory reused %lld positions of the first's\n",
           (long long)b.disk, (long long)b.prompt, n_corrupt, (long long)f.disk);
    struct pers_out *all[4] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; i++) {
        free(all[i]->greedy);
        free(all[i]->seeded);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    signal(SIGPIPE, SIG_IGN);
    char model[512];
    snprintf(model, sizeof model, "%s", test_shared_path(argv[1], "models/codelm-15m-f16.gguf"));
    struct srv s;
    /* --spec-fixed: speculation stays as serve defaults it (on, lookup + memo), but drafts the
     * longest proposal instead of following the adaptive policy, whose lengths depend on measured
     * step times (under load it may draft nothing, and the memo check below would fail) */
    const char *extra[] = {"--body-max", "4096", "--spec-fixed", NULL};
    if (!srv_start(&s, model, extra)) TEST_END();
    char *out = NULL;

    CHECK(http(s.port, "GET", "/health", NULL, NULL, &out) == 200 && strstr(out, "ok"));
    free(out);
    CHECK(http(s.port, "GET", "/v1/models", NULL, NULL, &out) == 200 && strstr(out, "codelm-15m-f16.gguf"));
    free(out);

    /* the same greedy text as deja run */
    char *run_out = NULL;
    CHECK(RUN(&run_out, "run", "-m", model, "-p", "def fib(n):", "-n", "20", "--json") == 0);
    json_t *rj = json_loads(strstr(run_out, "{\"prompt_ids\"") ? strstr(run_out, "{\"prompt_ids\"") : "", JSON_DISABLE_EOF_CHECK, NULL);
    const char *want = json_string_value(json_object_get(rj, "text"));
    const char *req = "{\"prompt\": \"def fib(n):\", \"max_tokens\": 20, \"temperature\": 0}";
    CHECK(http(s.port, "POST", "/v1/completions", req, NULL, &out) == 200);
    json_t *j = body_json(out);
    CHECKF(want && choice_text(j, 0) && !strcmp(want, choice_text(j, 0)), "server '%s' vs run '%s'", choice_text(j, 0), want);
    json_t *u = json_object_get(j, "usage");
    CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 20);
    json_decref(j);
    free(out);
    /* again: the prompt is reused from the cache (all but its last token), same text */
    CHECK(http(s.port, "POST", "/v1/completions", req, NULL, &out) == 200);
    j = body_json(out);
    CHECK(want && choice_text(j, 0) && !strcmp(want, choice_text(j, 0)));
    const json_int_t np = json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens"));
    const json_int_t nc = json_integer_value(
        json_object_get(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
    CHECKF(np > 1 && nc == np - 1, "cached %lld of %lld", (long long)nc, (long long)np);
    CHECK(json_is_object(json_object_get(j, "x_deja")));
    json_decref(j);
    free(out);
    /* cache_salt: another namespace reuses nothing the first time, its own prefix after; same text */
    const char *sreq = "{\"prompt\": \"def fib(n):\", \"max_tokens\": 20, \"temperature\": 0, \"cache_salt\": \"t1\"}";
    for (int k = 0; k < 2; k++) {
        CHECK(http(s.port, "POST", "/v1/completions", sreq, NULL, &out) == 200);
        j = body_json(out);
        const json_int_t c = json_integer_value(
            json_object_get(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
        CHECKF(c == (k ? np - 1 : 0), "salted request %d: cached %lld", k, (long long)c);
        CHECK(want && choice_text(j, 0) && !strcmp(want, choice_text(j, 0)));
        json_decref(j);
        free(out);
    }
    /* streamed: the same text, [DONE], usage on request */
    CHECK(http(s.port, "POST", "/v1/completions",
               "{\"prompt\": \"def fib(n):\", \"max_tokens\": 20, \"temperature\": 0, \"stream\": true, "
               "\"stream_options\": {\"include_usage\": true}}",
               NULL, &out) == 200);
    bool done = false;
    json_t *usage = NULL;
    char *st = sse_text(out, &done, &usage);
    CHECKF(done && want && !strcmp(st, want), "stream '%s'", st);
    CHECK(usage && json_integer_value(json_object_get(usage, "completion_tokens")) == 20);
    json_decref(usage);
    free(st);
    free(out);
    json_decref(rj);
    free(run_out);
    /* speculation is on by default (no --spec given): the repeats above drafted the first answer
     * from the output memo, and every answer still equals deja run's (plain decoding) */
    CHECK(http(s.port, "GET", "/metrics", NULL, NULL, &out) == 200);
    const char *mk = "deja_draft_tokens_accepted_total{source=\"memo\"} ";
    const char *mm = out ? strstr(out, mk) : NULL;
    CHECKF(mm && atoll(mm + strlen(mk)) > 0, "/metrics: no memo draft accepted: %s", mm ? mm : "(missing)");
    free(out);
    /* n = 2 with a seed: two choices, reproducible */
    const char *req2 = "{\"prompt\": \"import\", \"max_tokens\": 12, \"temperature\": 1.0, \"seed\": 5, \"n\": 2}";
    char *out2 = NULL;
    CHECK(http(s.port, "POST", "/v1/completions", req2, NULL, &out) == 200);
    CHECK(http(s.port, "POST", "/v1/completions", req2, NULL, &out2) == 200);
    j = body_json(out);
    json_t *j2 = body_json(out2);
    CHECK(json_array_size(json_object_get(j, "choices")) == 2 && choice_text(j, 1) && choice_text(j2, 1) &&
          !strcmp(choice_text(j, 0), choice_text(j2, 0)) && !strcmp(choice_text(j, 1), choice_text(j2, 1)));
    json_decref(j);
    json_decref(j2);
    free(out);
    free(out2);

    /* 4 concurrent streams = the same requests one at a time */
    struct conc cs[4], seq[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        seq[i] = (struct conc){s.port, 100 + i, NULL};
        conc_main(&seq[i]);
    }
    for (int i = 0; i < 4; i++) {
        cs[i] = (struct conc){s.port, 100 + i, NULL};
        pthread_create(&th[i], NULL, conc_main, &cs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(cs[i].text && seq[i].text && cs[i].text[0] && !strcmp(cs[i].text, seq[i].text),
               "stream %d: '%s' vs '%s'", i, cs[i].text, seq[i].text);
        free(cs[i].text);
        free(seq[i].text);
    }

    /* bad input: 4xx with an OpenAI-shaped error, the server goes on */
    CHECK(http(s.port, "POST", "/v1/completions", "{bad json", NULL, &out) == 400 && is_error(out, NULL));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "[1, 2]", NULL, &out) == 400 && is_error(out, NULL));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": 7}", NULL, &out) == 400 && is_error(out, "prompt"));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 0}", NULL, &out) == 400 &&
          is_error(out, "max_tokens"));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}", NULL, &out) == 400 &&
          is_error(out, "temperature"));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": [1, 99999999]}", NULL, &out) == 400 && is_error(out, "prompt"));
    free(out);
    CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"model\": \"gpt-9\"}", NULL, &out) == 404 &&
          is_error(out, "model"));
    free(out);
    CHECK(http(s.port, "POST", "/v1/nothing", "{}", NULL, &out) == 404 && is_error(out, NULL));
    free(out);
    CHECK(http(s.port, "GET", "/v1/completions", NULL, NULL, &out) == 405 && is_error(out, NULL));
    free(out);
    char big[6000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    memcpy(big, "{\"prompt\": \"", 12);
    CHECK(http(s.port, "POST", "/v1/completions", big, NULL, &out) == 413 && is_error(out, NULL));
    free(out);
    /* a prompt past the context (2048) */
    size_t nl = 3 * 2048 * 6;
    char *lng = malloc(nl + 64);
    strcpy(lng, "{\"prompt\": [");
    for (int i = 0; i < 3000; i++) strcat(lng, i ? ", 100" : "100");
    strcat(lng, "]}");
    CHECK(http(s.port, "POST", "/tokenize", "{\"content\": \"hello world\"}", NULL, &out) == 200 && strstr(out, "tokens"));
    free(out);
    CHECK(http(s.port, "POST", "/detokenize", "{\"tokens\": [31702, 1835]}", NULL, &out) == 200 &&
          strstr(out, "hello world"));
    free(out);

    /* codelm's ChatML markers are text in its vocabulary: a chat turn ends at the string
     * "<|im_end|>" (not shown), reported as finish "stop" */
    CHECK(http(s.port, "POST", "/v1/chat/completions",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"Write a python function that adds two "
               "numbers\"}], \"max_tokens\": 200, \"seed\": 1}",
               NULL, &out) == 200);
    j = body_json(out);
    {
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        const char *fr = json_string_value(json_object_get(c0, "finish_reason"));
        const char *tx = json_string_value(json_object_get(json_object_get(c0, "message"), "content"));
        CHECKF(fr && !strcmp(fr, "stop") && tx && !strstr(tx, "<|im_end|>"), "finish %s, content '%s'", fr ? fr : "-",
               tx ? tx : "-");
    }
    json_decref(j);
    free(out);
    /* Anthropic: the request's model is echoed; a stop sequence is named, streamed or not */
    const char *areq = "{\"model\": \"claude-test-1\", \"max_tokens\": 60, \"stop_sequences\": [\"e\"], "
                       "\"messages\": [{\"role\": \"user\", \"content\": \"Explain the code\"}]%s}";
    char abody[256];
    snprintf(abody, sizeof abody, areq, "");
    CHECK(http(s.port, "POST", "/v1/messages", abody, NULL, &out) == 200);
    j = body_json(out);
    CHECKF(!strcmp(json_string_value(json_object_get(j, "model")) ? json_string_value(json_object_get(j, "model")) : "",
                   "claude-test-1") &&
               json_is_string(json_object_get(j, "stop_reason")) &&
               !strcmp(json_string_value(json_object_get(j, "stop_reason")), "stop_sequence") &&
               json_is_string(json_object_get(j, "stop_sequence")) &&
               !strcmp(json_string_value(json_object_get(j, "stop_sequence")), "e"),
           "%s", out);
    json_decref(j);
    free(out);
    snprintf(abody, sizeof abody, areq, ", \"stream\": true");
    CHECK(http(s.port, "POST", "/v1/messages", abody, NULL, &out) == 200);
    CHECKF(out && strstr(out, "\"model\":\"claude-test-1\"") && strstr(out, "\"stop_reason\":\"stop_sequence\"") &&
               strstr(out, "\"stop_sequence\":\"e\""),
           "%s", out ? out : "");
    free(out);
    CHECK(srv_stop(&s) == 0);

    /* larger body limit for the long prompt; --parallel 1 for the disconnect test; an API key */
    const char *extra2[] = {"--parallel", "1", "--queue-max", "1", "--api-key", "sekrit", NULL};
    if (srv_start(&s, model, extra2)) {
        CHECK(http(s.port, "POST", "/v1/completions", lng, "sekrit", &out) == 400 && is_error(out, NULL));
        free(out);
        CHECK(http(s.port, "GET", "/v1/models", NULL, NULL, &out) == 401 && is_error(out, NULL));
        free(out);
        CHECK(http(s.port, "GET", "/v1/models", NULL, "wrong", &out) == 401);
        free(out);
        CHECK(http(s.port, "GET", "/health", NULL, NULL, &out) == 200);
        free(out);
        /* two streams of up to 2000 tokens: one runs, one waits; a third request finds the
         * queue full (503 + Retry-After); then both are dropped after their first bytes */
        int fds[2];
        const char *sb = "{\"prompt\": \"def\", \"max_tokens\": 2000, \"stream\": true, \"ignore_eos\": true}";
        for (int k = 0; k < 2; k++) {
            fds[k] = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {0};
            a.sin_family = AF_INET;
            a.sin_port = htons((uint16_t)s.port);
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            CHECK(connect(fds[k], (struct sockaddr *)&a, sizeof a) == 0);
            char hdr[512];
            int nh = snprintf(hdr, sizeof hdr,
                              "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
                              "Content-Length: %zu\r\n\r\n%s",
                              strlen(sb), sb);
            CHECK(write(fds[k], hdr, (size_t)nh) == nh);
        }
        char tmp[256];
        CHECK(read(fds[0], tmp, sizeof tmp) > 0);
        struct timespec pause_ts = {0, 200 * 1000 * 1000};
        nanosleep(&pause_ts, NULL); /* the second request is submitted and queued */
        CHECK(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1}", "sekrit", &out) == 503 &&
              is_error(out, NULL));
        free(out);
        close(fds[0]);
        close(fds[1]);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int code, tries = 0;
        /* as a client honouring Retry-After: the dropped streams take a moment to be noticed */
        while (tries++ < 60 && (code = http(s.port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1}", "sekrit",
                            &out)) == 503) {
            free(out);
            nanosleep(&pause_ts, NULL);
        }
        CHECK(code == 200);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        /* not cancelled, it would hold the only slot for its 2000 tokens (~8 s here) */
        CHECKF(secs < 3.0, "the request after a dropped stream waited %.1f s", secs);
        free(out);
        CHECK(srv_stop(&s) == 0);
    }
    free(lng);
    test_loading();
    test_persist(model);
    TEST_END();
}
