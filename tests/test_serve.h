/*
 * test_serve.h — what the end-to-end tests of `deja serve` share: start a
 * server on a free loopback port (its stderr read up to "ready on"), stop it
 * with SIGTERM, one HTTP/1.1 request per connection (chunked bodies decoded),
 * and the SSE and OpenAI-error helpers.  Used by tests/e2e/test_serve.c and
 * tests/e2e/test_serve_completions.c.
 */
#ifndef DJ_TEST_SERVE_H
#define DJ_TEST_SERVE_H

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_run.h"

struct srv {
    pid_t pid;
    int err_fd;
    unsigned port;
};

/* Starts `deja serve` and reads its stderr up to the line with `marker` ("ready on": the model
 * is loaded; "listening on": the socket is open, the model may still be loading). */
static inline bool srv_start_until(struct srv *s, const char *model, const char *const *extra, const char *marker) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    char *argv[32] = {(char *)deja_bin, "serve", "-m", (char *)model, "--port", "0", "--kv-budget", "64"};
    int n = 8;
    for (size_t i = 0; extra && extra[i] && n < 30; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    s->err_fd = fd[0];
    char line[512];
    const char *p = NULL;
    char want[64];
    snprintf(want, sizeof want, "%s http://127.0.0.1:", marker);
    for (int tries = 0; tries < 16 && !p; tries++) { /* start-up notes come before the marker */
        size_t k = 0;
        while (k + 1 < sizeof line && read(fd[0], line + k, 1) == 1 && line[k] != '\n') k++;
        line[k] = 0;
        if (k == 0) break;
        p = strstr(line, want);
        if (p) p += strlen(want);
    }
    s->port = p ? (unsigned)atoi(p) : 0;
    CHECKF(s->port > 0, "server did not start: %s", line);
    return s->port > 0;
}

static inline bool srv_start(struct srv *s, const char *model, const char *const *extra) {
    return srv_start_until(s, model, extra, "ready on");
}

static inline int srv_stop(struct srv *s) {
    kill(s->pid, SIGTERM);
    int st = 0;
    waitpid(s->pid, &st, 0);
    close(s->err_fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whether the head (n bytes) says "Transfer-Encoding: chunked" (streams). */
static inline bool http_chunked(const char *head, size_t n) {
    const char *te = memmem(head, n, "Transfer-Encoding: chunked", 26);
    return te != NULL;
}

/* A chunked body's data, the chunk headers removed (malloc'd): an SSE event may span chunks. */
static inline char *http_dechunk(const char *p) {
    char *out = malloc(strlen(p) + 1), *o = out;
    for (;;) {
        char *end = NULL;
        const unsigned long n = strtoul(p, &end, 16);
        const char *data = end ? strstr(end, "\r\n") : NULL;
        if (n == 0 || !data || strlen(data + 2) < n) break;
        memcpy(o, data + 2, n);
        o += n;
        p = data + 2 + n;
        if (!strncmp(p, "\r\n", 2)) p += 2;
    }
    *o = 0;
    return out;
}

/* One request on its own connection; returns the status, *body the body (malloc'd; a
 * chunked body decoded). */
static inline int http(unsigned port, const char *method, const char *path, const char *body, const char *auth, char **out) {
    *out = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    char hdr[512];
    const size_t nb = body ? strlen(body) : 0;
    int nh = snprintf(hdr, sizeof hdr,
                      "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n%s%s%s\r\n",
                      method, path, nb, auth ? "Authorization: Bearer " : "", auth ? auth : "", auth ? "\r\n" : "");
    if (write(fd, hdr, (size_t)nh) != nh || (nb && write(fd, body, nb) != (ssize_t)nb)) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    close(fd);
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    const char *b = strstr(buf, "\r\n\r\n");
    *out = b && http_chunked(buf, (size_t)(b - buf)) ? http_dechunk(b + 4) : strdup(b ? b + 4 : "");
    free(buf);
    return status;
}

/* Streams: join the texts of every `data: {...}` event, and check the stream ended with [DONE]. */
static inline char *sse_text(const char *raw, bool *done, json_t **usage) {
    size_t cap = 4096, n = 0;
    char *t = calloc(1, cap);
    *done = strstr(raw, "data: [DONE]") != NULL;
    for (const char *p = raw; (p = strstr(p, "data: {")); p += 6) {
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        const char *s = json_string_value(json_object_get(ch, "text"));
        if (s) {
            size_t l = strlen(s);
            if (n + l + 1 > cap) t = realloc(t, cap = (n + l + 1) * 2);
            memcpy(t + n, s, l + 1);
            n += l;
        }
        if (usage && json_object_get(j, "usage")) *usage = json_incref(json_object_get(j, "usage"));
        json_decref(j);
    }
    return t;
}

static inline json_t *body_json(const char *b) { return json_loads(b ? b : "", 0, NULL); }

static inline const char *choice_text(json_t *j, size_t i) {
    return json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), i), "text"));
}

static inline bool is_error(const char *body, const char *param) {
    json_t *j = body_json(body);
    json_t *e = json_object_get(j, "error");
    bool ok = json_is_string(json_object_get(e, "message")) && json_is_string(json_object_get(e, "type")) &&
              (!param || !strcmp(json_string_value(json_object_get(e, "param")) ? json_string_value(json_object_get(e, "param")) : "", param));
    json_decref(j);
    return ok;
}

/* The JSON of every `data: {...}` event of a stream, in order (an array; [DONE] left out). */
static inline json_t *sse_events(const char *raw) {
    json_t *all = json_array();
    for (const char *p = raw; (p = strstr(p, "data: {")); p += 6) {
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        if (j) json_array_append_new(all, j);
    }
    return all;
}

#endif
