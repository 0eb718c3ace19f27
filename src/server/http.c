/*
 * http.c — the HTTP/1.1 server of http.h: one I/O thread (epoll, level
 * triggered) owns every connection that is not being answered; a detached
 * worker thread per request being answered owns that one until it hands it
 * back.  The I/O thread alone opens and closes sockets and edits the
 * connection list (under h->mu, which http_stop and the workers' hand-back
 * also take); a worker touches only its own connection.
 *
 *   connection states (I/O thread):  HEAD ──▶ BODY ──▶ BUSY (worker) ──▶ IDLE ──▶ HEAD ...
 *                                      └──────┴──▶ LINGER (answered an error: drain, close)
 *
 * Deadlines are fixed when a state is entered (HEAD: first byte or accept;
 * BODY: end of head; IDLE: end of the last answer; LINGER: 2 s) and checked by
 * a sweep every 100 ms, so bytes arriving never extend them.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum cstate { C_HEAD, C_BODY, C_BUSY, C_IDLE, C_LINGER, C_DEAD };

enum { LINGER_MS = 2000, LINGER_BYTES = 1 << 20, SWEEP_MS = 100, READ_CHUNK = 16384 };

struct http_req {
    struct conn *c;
    bool responded, aborted;
};

struct conn {
    struct conn *prev, *next; /* h->conns */
    struct conn *ret_next;    /* h->returned */
    struct http_server *h;
    int fd;
    uint32_t ip;              /* network order */
    enum cstate st;
    int64_t t_phase, deadline; /* ms, monotonic */
    struct http_parser hp;
    char *pend;               /* bytes read past the last request (pipelined), not parsed yet */
    size_t n_pend;
    size_t n_drained;         /* LINGER */
    bool sent_continue, close_after;
    struct http_req q;
};

struct http_server {
    struct http_params p;
    int lfd, epfd, wakefd;
    bool listening;           /* I/O thread: lfd is in the epoll set */
    uint16_t port;
    pthread_t io;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn *conns;       /* every open connection, busy ones included */
    size_t n_conns;
    struct conn *returned;    /* answered, waiting for the I/O thread */
    struct conn *dead;        /* I/O thread: closed during this batch of events, freed after it
                                 (a later event of the batch may still name one) */
    size_t n_busy;
    bool io_gone;             /* the I/O thread has exited: workers close their own */
    atomic_bool stop, quiesce;
    struct http_stats st;
};

static char listen_tag, wake_tag; /* epoll data for the two non-connection fds */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct http_params http_default_params(void) {
    struct http_params p = {0};
    p.host = "127.0.0.1";
    p.conn_max = 1024;
    p.head_timeout_ms = 10000;
    p.body_timeout_ms = 60000;
    p.idle_timeout_ms = 600000;
    p.write_timeout_ms = 600000;
    p.head_max = 32 << 10;
    p.body_max = 8 << 20;
    return p;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Worker side: all of buf, waiting up to write_timeout for each bit of progress. */
static bool write_all(struct conn *c, const char *buf, size_t n, bool more) {
    while (n > 0) {
        const ssize_t k = send(c->fd, buf, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (k > 0) {
            buf += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {c->fd, POLLOUT, 0};
            const int r = poll(&pf, 1, (int)c->h->p.write_timeout_ms);
            if (r > 0 && !(pf.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
            if (r == 0) atomic_fetch_add(&c->h->st.write_timeouts, 1);
            if (r < 0 && errno == EINTR) continue;
        }
        return false;
    }
    return true;
}

/* The status line and headers (malloc'd); n_body < 0: chunked (or, HTTP/1.0, till close). */
static char *format_head(struct conn *c, unsigned status, const char *ctype, long long n_body,
                         const char *const *headers, bool keep, size_t *len) {
    size_t cap = 256 + (ctype ? strlen(ctype) : 0);
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2) cap += strlen(headers[i]) + strlen(headers[i + 1]) + 4;
    char *h = malloc(cap);
    if (!h) return NULL;
    size_t o = (size_t)snprintf(h, cap, "HTTP/1.1 %u %s\r\n", status, http_status_text(status));
    if (ctype) o += (size_t)snprintf(h + o, cap - o, "Content-Type: %s\r\n", ctype);
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        o += (size_t)snprintf(h + o, cap - o, "%s: %s\r\n", headers[i], headers[i + 1]);
    if (n_body >= 0) o += (size_t)snprintf(h + o, cap - o, "Content-Length: %lld\r\n", n_body);
    else if (c->hp.msg.http_minor >= 1) o += (size_t)snprintf(h + o, cap - o, "Transfer-Encoding: chunked\r\n");
    o += (size_t)snprintf(h + o, cap - o, "Connection: %s\r\n\r\n", keep ? "keep-alive" : "close");
    *len = o;
    return h;
}

static bool req_keep(const struct http_req *q) {
    return q->c->hp.msg.keep_alive && !atomic_load(&q->c->h->stop) && !atomic_load(&q->c->h->quiesce);
}

bool http_respond(struct http_req *q, unsigned status, const char *ctype, const char *body, size_t n,
                  const char *const *headers) {
    if (q->responded || q->aborted) return false;
    q->responded = true;
    struct conn *c = q->c;
    const bool keep = req_keep(q);
    size_t nh = 0;
    char *head = format_head(c, status, ctype, (long long)n, headers, keep, &nh);
    const bool head_only = !strcmp(c->hp.msg.method, "HEAD");
    bool ok = head && write_all(c, head, nh, !head_only && n > 0);
    free(head);
    if (ok && !head_only && n) ok = write_all(c, body, n, false);
    if (!ok || !keep) c->close_after = true;
    return ok;
}

bool http_respond_stream(struct http_req *q, unsigned status, const char *ctype, const char *const *headers,
                         long (*read)(void *cls, char *buf, size_t cap), void *cls) {
    if (q->responded || q->aborted) return false;
    q->responded = true;
    struct conn *c = q->c;
    const bool chunked = c->hp.msg.http_minor >= 1;
    const bool keep = chunked && req_keep(q);
    size_t nh = 0;
    char *head = format_head(c, status, ctype, -1, headers, keep, &nh);
    bool ok = head && write_all(c, head, nh, true);
    free(head);
    enum { CAP = 4096, PRE = 16 };
    char buf[PRE + CAP + 2];
    while (ok) {
        const long k = read(cls, buf + PRE, CAP);
        if (k < 0) { /* cut short: no last chunk, and the connection closes */
            ok = false;
            break;
        }
        if (k == 0) {
            if (chunked) ok = write_all(c, "0\r\n\r\n", 5, false);
            break;
        }
        if (!chunked) {
            ok = write_all(c, buf + PRE, (size_t)k, false);
            continue;
        }
        char pre[PRE + 1];
        const int np = snprintf(pre, sizeof pre, "%lx\r\n", (unsigned long)k);
        memcpy(buf + PRE - np, pre, (size_t)np);
        memcpy(buf + PRE + k, "\r\n", 2);
        ok = write_all(c, buf + PRE - np, (size_t)np + (size_t)k + 2, false);
    }
    if (!ok || !keep) c->close_after = true;
    return ok;
}

void http_abort(struct http_req *q) {
    if (q->responded) return;
    q->aborted = true;
    q->c->close_after = true;
}

const struct http_msg *http_req_msg(const struct http_req *q) { return &q->c->hp.msg; }
int http_req_fd(const struct http_req *q) { return q->c->fd; }

/* I/O thread: a short answer on a non-blocking socket (an error: small, fits the socket
 * buffer of a fresh connection; what does not fit is dropped with the connection). */
static void send_now(int fd, unsigned status, const char *body) {
    char head[256];
    const size_t n = strlen(body);
    const int nh = snprintf(head, sizeof head,
                            "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n",
                            status, http_status_text(status), n);
    if (send(fd, head, (size_t)nh, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE) == nh)
        (void)!send(fd, body, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static char *error_json(struct http_server *h, const char *path, unsigned status, const char *msg) {
    char *b = h->p.error_body ? h->p.error_body(h->p.user, path, status, msg) : NULL;
    if (b) return b;
    b = malloc(64);
    if (b) snprintf(b, 64, "{\"error\":{\"message\":\"HTTP %u\"}}", status);
    return b;
}

/* ---- connections (I/O thread) ------------------------------------------------------------ */

static void conn_free(struct conn *c) {
    http_parse_free(&c->hp);
    free(c->pend);
    free(c);
}

/* Unlinks (h->mu held) and closes c's socket. */
static void conn_unlink(struct http_server *h, struct conn *c) {
    if (c->prev) c->prev->next = c->next;
    else h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->n_conns--;
    close(c->fd);
    atomic_fetch_sub(&h->st.open, 1);
}

/* I/O thread, c not busy: closes it now, frees it after the current batch of events. */
static void conn_close(struct http_server *h, struct conn *c) {
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, NULL); /* ENOENT when not in the set: harmless */
    pthread_mutex_lock(&h->mu);
    conn_unlink(h, c);
    pthread_mutex_unlock(&h->mu);
    c->st = C_DEAD;
    c->next = h->dead;
    h->dead = c;
}

static void enter(struct conn *c, enum cstate st, unsigned ms) {
    c->st = st;
    c->t_phase = now_ms();
    c->deadline = c->t_phase + ms;
}

/* Answers an error and lingers: the client reads the answer, the connection then closes. */
static void conn_refuse(struct http_server *h, struct conn *c, unsigned status, const char *msg) {
    char *body = error_json(h, c->hp.head_done ? c->hp.msg.path : NULL, status, msg);
    if (body) send_now(c->fd, status, body);
    free(body);
    shutdown(c->fd, SHUT_WR);
    enter(c, C_LINGER, LINGER_MS);
    c->n_drained = 0;
}

static void *worker_main(void *arg);

/* A complete request: a worker answers it.  The fd leaves the epoll set meanwhile. */
static void dispatch(struct http_server *h, struct conn *c) {
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->st = C_BUSY;
    memset(&c->q, 0, sizeof c->q);
    c->q.c = c;
    c->close_after = false;
    pthread_mutex_lock(&h->mu);
    h->n_busy++;
    pthread_mutex_unlock(&h->mu);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    const int rc = pthread_create(&t, &a, worker_main, c);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        pthread_mutex_lock(&h->mu);
        h->n_busy--;
        pthread_mutex_unlock(&h->mu);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(h->epfd, EPOLL_CTL_ADD, c->fd, &ev);
        atomic_fetch_add(&h->st.refused, 1);
        conn_refuse(h, c, 503, "the server cannot start a thread for this request");
    }
}

/* Feeds bytes to c's parser: answers errors, dispatches a complete request (keeping
 * what follows it for later). */
static void conn_feed(struct http_server *h, struct conn *c, const char *data, size_t n) {
    while (n > 0) {
        if (c->st == C_IDLE) enter(c, C_HEAD, h->p.head_timeout_ms);
        size_t used = 0;
        const enum http_event ev = http_parse_feed(&c->hp, data, n, &used);
        data += used;
        n -= used;
        if (c->st == C_HEAD && c->hp.head_done && !c->hp.err_status) enter(c, C_BODY, h->p.body_timeout_ms);
        if (ev == HTTP_ERROR) {
            atomic_fetch_add(&h->st.bad_requests, 1);
            conn_refuse(h, c, c->hp.err_status, c->hp.err_msg);
            return;
        }
        if (ev == HTTP_DONE) {
            free(c->pend);
            c->pend = NULL;
            c->n_pend = 0;
            if (n) {
                if (!(c->pend = malloc(n))) {
                    conn_refuse(h, c, 503, "out of memory");
                    return;
                }
                memcpy(c->pend, data, n);
                c->n_pend = n;
            }
            dispatch(h, c);
            return;
        }
        if (c->st == C_BODY && c->hp.msg.expect_continue && !c->sent_continue) {
            c->sent_continue = true; /* the head is accepted: now the client may send its body */
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            (void)!send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (used == 0) break; /* cannot happen with NEED_MORE; never spin */
    }
}

static void conn_readable(struct http_server *h, struct conn *c) {
    char buf[READ_CHUNK];
    for (int rounds = 0; rounds < 4; rounds++) { /* at most 64 KiB per wake-up: fairness */
        const ssize_t k = recv(c->fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) { /* EOF or error: a request cut short is dropped; nothing to answer */
            conn_close(h, c);
            return;
        }
        if (c->st == C_LINGER) {
            c->n_drained += (size_t)k;
            if (c->n_drained > LINGER_BYTES) {
                conn_close(h, c);
                return;
            }
            continue;
        }
        conn_feed(h, c, buf, (size_t)k);
        if (c->st == C_BUSY || c->st == C_LINGER) return;
    }
}

/* The connection to close to make room: never a busy one; a lingering one first (it is
 * closing anyway), then the one whose wait began longest ago, whatever it waits for (an
 * idle keep-alive connection dates from the end of its last answer, one sending a request
 * from its accept or first byte).  So a flood of new connections evicts its own oldest
 * members, not the keep-alive connection a client used a moment ago.  by_ip: only
 * connections from ip (the per-address cap). */
static struct conn *pick_victim(struct http_server *h, uint32_t ip, bool by_ip) {
    struct conn *best = NULL;
    for (struct conn *c = h->conns; c; c = c->next) {
        if (c->st == C_BUSY || c->st == C_DEAD || (by_ip && c->ip != ip)) continue;
        if (!best || (c->st == C_LINGER && best->st != C_LINGER) ||
            ((c->st == C_LINGER) == (best->st == C_LINGER) && c->t_phase < best->t_phase))
            best = c;
    }
    return best;
}

static size_t count_ip(const struct http_server *h, uint32_t ip) {
    size_t n = 0;
    for (const struct conn *c = h->conns; c; c = c->next) n += c->ip == ip;
    return n;
}

static void evict(struct http_server *h, struct conn *v) {
    atomic_fetch_add(&h->st.evicted, 1);
    conn_close(h, v);
}

/* A new connection: within the budget, or room made by closing a waiting one, or 503. */
static void admit(struct http_server *h, int fd, uint32_t ip) {
    atomic_fetch_add(&h->st.accepted, 1);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* SSE tokens go out at once */
    if (h->p.conn_per_ip && count_ip(h, ip) >= h->p.conn_per_ip) {
        struct conn *v = pick_victim(h, ip, true);
        if (!v) goto refuse;
        evict(h, v);
    }
    if (h->n_conns >= h->p.conn_max) {
        struct conn *v = pick_victim(h, 0, false);
        if (!v) goto refuse;
        evict(h, v);
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) goto refuse;
    c->h = h;
    c->fd = fd;
    c->ip = ip;
    http_parse_init(&c->hp, h->p.head_max, h->p.body_max, h->p.on_head, h->p.user);
    enter(c, C_HEAD, h->p.head_timeout_ms);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        conn_free(c);
        goto refuse;
    }
    pthread_mutex_lock(&h->mu);
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    pthread_mutex_unlock(&h->mu);
    atomic_fetch_add(&h->st.open, 1);
    return;
refuse:
    atomic_fetch_add(&h->st.refused, 1);
    {
        char *body = error_json(h, NULL, 503, "the server has no free connection: every one is answering a request");
        if (body) send_now(fd, 503, body);
        free(body);
    }
    close(fd);
}

static void accept_all(struct http_server *h) {
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        const int fd = accept4(h->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) { /* out of descriptors: free one waiting */
                struct conn *v = pick_victim(h, 0, false);
                if (v) {
                    evict(h, v);
                    continue;
                }
                /* none to free: stop listening until the next sweep (level-triggered epoll would spin) */
                epoll_ctl(h->epfd, EPOLL_CTL_DEL, h->lfd, NULL);
                h->listening = false;
            }
            return;
        }
        admit(h, fd, a.sin_addr.s_addr);
    }
}

/* A connection a worker has answered. */
static void take_back(struct http_server *h, struct conn *c) {
    if (c->close_after) {
        if (c->q.aborted) atomic_fetch_add(&h->st.aborted, 1);
        conn_close(h, c);
        return;
    }
    http_parse_next(&c->hp);
    c->sent_continue = false;
    enter(c, C_IDLE, h->p.idle_timeout_ms);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        conn_close(h, c);
        return;
    }
    if (c->n_pend) { /* a pipelined request */
        char *p = c->pend;
        const size_t n = c->n_pend;
        c->pend = NULL;
        c->n_pend = 0;
        conn_feed(h, c, p, n);
        free(p);
    }
}

static void sweep(struct http_server *h) {
    const int64_t t = now_ms();
    struct conn *next;
    for (struct conn *c = h->conns; c; c = next) {
        next = c->next;
        if (c->st == C_BUSY || t < c->deadline) continue;
        char msg[128];
        switch (c->st) {
        case C_HEAD:
            atomic_fetch_add(&h->st.head_timeouts, 1);
            if (!http_parse_started(&c->hp)) { /* sent nothing: nothing to answer */
                conn_close(h, c);
                break;
            }
            snprintf(msg, sizeof msg, "the request head did not arrive within %u ms", h->p.head_timeout_ms);
            conn_refuse(h, c, 408, msg);
            break;
        case C_BODY:
            atomic_fetch_add(&h->st.body_timeouts, 1);
            snprintf(msg, sizeof msg, "the request body did not arrive within %u ms of its head", h->p.body_timeout_ms);
            conn_refuse(h, c, 408, msg);
            break;
        case C_IDLE:
            atomic_fetch_add(&h->st.idle_closed, 1);
            conn_close(h, c);
            break;
        default:
            conn_close(h, c);
        }
    }
    if (!h->listening && h->lfd >= 0 && !atomic_load(&h->quiesce)) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
        if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->lfd, &ev) == 0) h->listening = true;
    }
}

static void *io_main(void *arg) {
    struct http_server *h = arg;
    struct epoll_event evs[64];
    int64_t last_sweep = now_ms();
    while (!atomic_load(&h->stop)) {
        const int n = epoll_wait(h->epfd, evs, 64, SWEEP_MS);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &listen_tag) {
                accept_all(h);
            } else if (tag == &wake_tag) {
                uint64_t v;
                (void)!read(h->wakefd, &v, sizeof v);
                pthread_mutex_lock(&h->mu);
                struct conn *r = h->returned;
                h->returned = NULL;
                pthread_mutex_unlock(&h->mu);
                while (r) {
                    struct conn *nx = r->ret_next;
                    take_back(h, r);
                    r = nx;
                }
            } else {
                struct conn *c = tag;
                if (c->st != C_DEAD && c->st != C_BUSY) conn_readable(h, c);
            }
        }
        if (atomic_load(&h->quiesce) && h->lfd >= 0) {
            if (h->listening) epoll_ctl(h->epfd, EPOLL_CTL_DEL, h->lfd, NULL);
            close(h->lfd);
            h->lfd = -1;
            h->listening = false;
        }
        const int64_t t = now_ms();
        if (t - last_sweep >= SWEEP_MS) {
            sweep(h);
            last_sweep = t;
        }
        while (h->dead) {
            struct conn *d = h->dead;
            h->dead = d->next;
            conn_free(d);
        }
    }
    /* closing time: every connection not being answered */
    struct conn *next;
    for (struct conn *c = h->conns; c; c = next) {
        next = c->next;
        if (c->st != C_BUSY) conn_close(h, c);
    }
    while (h->dead) {
        struct conn *d = h->dead;
        h->dead = d->next;
        conn_free(d);
    }
    return NULL;
}

static void *worker_main(void *arg) {
    struct conn *c = arg;
    struct http_server *h = c->h;
    h->p.on_request(h->p.user, &c->q);
    if (!c->q.responded && !c->q.aborted) http_abort(&c->q);
    pthread_mutex_lock(&h->mu);
    h->n_busy--;
    if (h->io_gone) { /* nobody to hand it to */
        conn_unlink(h, c);
        conn_free(c);
    } else {
        c->ret_next = h->returned;
        h->returned = c;
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    const uint64_t one = 1;
    (void)!write(h->wakefd, &one, sizeof one);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------- */

int http_start(const struct http_params *pin, struct http_server **out, char *err, size_t cap) {
    struct http_server *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    h->p = *pin;
    h->lfd = h->epfd = h->wakefd = -1;
    if (!h->p.conn_max) h->p.conn_max = 1024;
    /* each connection is a descriptor: raise the soft limit to the hard one, and keep the
     * budget inside it (64 kept for the model, the KV store, logs) */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 128 && h->p.conn_max > rl.rlim_cur - 64) {
            fprintf(stderr, "deja serve: --conn-max %zu is over the descriptor limit (%llu): using %llu\n", h->p.conn_max,
                    (unsigned long long)rl.rlim_cur, (unsigned long long)(rl.rlim_cur - 64));
            h->p.conn_max = (size_t)(rl.rlim_cur - 64);
        }
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(h->p.port);
    if (inet_pton(AF_INET, h->p.host, &addr.sin_addr) != 1) {
        snprintf(err, cap, "--host '%s' is not an IPv4 address", h->p.host);
        goto fail;
    }
    h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (h->lfd < 0 || setsockopt(h->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(h->lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(h->lfd, 511) != 0) {
        snprintf(err, cap, "cannot listen on %s:%u: %s", h->p.host, h->p.port, strerror(errno));
        goto fail;
    }
    socklen_t al = sizeof addr;
    getsockname(h->lfd, (struct sockaddr *)&addr, &al);
    h->port = ntohs(addr.sin_port);
    h->epfd = epoll_create1(EPOLL_CLOEXEC);
    h->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &listen_tag};
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = &wake_tag};
    if (h->epfd < 0 || h->wakefd < 0 || epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->lfd, &le) != 0 ||
        epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wakefd, &we) != 0) {
        snprintf(err, cap, "cannot set up epoll: %s", strerror(errno));
        goto fail;
    }
    h->listening = true;
    if (pthread_create(&h->io, NULL, io_main, h) != 0) {
        snprintf(err, cap, "cannot start the I/O thread");
        goto fail;
    }
    *out = h;
    return 0;
fail:
    if (h->lfd >= 0) close(h->lfd);
    if (h->epfd >= 0) close(h->epfd);
    if (h->wakefd >= 0) close(h->wakefd);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    return -1;
}

uint16_t http_port(const struct http_server *h) { return h->port; }
struct http_stats *http_get_stats(struct http_server *h) { return &h->st; }

void http_quiesce(struct http_server *h) {
    if (!h) return;
    atomic_store(&h->quiesce, true);
    const uint64_t one = 1;
    (void)!write(h->wakefd, &one, sizeof one);
}

/* h->mu held: waits until no worker runs or ms pass (ms < 0: no limit). */
static void wait_workers(struct http_server *h, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    while (h->n_busy > 0) {
        if (ms < 0) pthread_cond_wait(&h->cv, &h->mu);
        else if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0) break;
    }
}

void http_stop(struct http_server *h, int grace_ms) {
    if (!h) return;
    atomic_store(&h->stop, true);
    const uint64_t one = 1;
    (void)!write(h->wakefd, &one, sizeof one);
    pthread_join(h->io, NULL);
    pthread_mutex_lock(&h->mu);
    h->io_gone = true;
    /* answered while the I/O thread was leaving */
    for (struct conn *c = h->returned, *nx; c; c = nx) {
        nx = c->ret_next;
        conn_unlink(h, c);
        conn_free(c);
    }
    h->returned = NULL;
    wait_workers(h, grace_ms);
    /* still writing to clients that do not read: cut them off, their writes then fail */
    for (struct conn *c = h->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    wait_workers(h, -1);
    pthread_mutex_unlock(&h->mu);
    if (h->lfd >= 0) close(h->lfd);
    close(h->epfd);
    close(h->wakefd);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}
