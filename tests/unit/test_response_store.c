/*
 * test_response_store.c — the bounded store of Responses (src/server/response_store.h):
 * get returns exactly what was put (NUL bytes included); replacing an id; eviction
 * oldest first by the entry bound and by the byte bound (with the byte count the
 * header promises), never the entry being put; an entry too large alone is refused
 * and evicts nothing; delete; a zero bound stores nothing; unknown ids are
 * DJ_ERR_NOT_FOUND with a message; and four threads putting, getting and deleting
 * at once keep the bounds and never read a freed entry (run under ASan/TSan).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/response_store.h"
#include "test.h"

/* The entry's texts equal in and resp. */
static bool has(struct dj_response_store *s, const char *id, const char *in, const char *resp) {
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (response_store_get(s, id, &a, &na, &b, &nb) != DJ_OK) return false;
    const bool ok = na == strlen(in) && nb == strlen(resp) && !strcmp(a, in) && !strcmp(b, resp);
    free(a);
    free(b);
    return ok;
}

static bool gone(struct dj_response_store *s, const char *id) {
    char *a = (char *)"untouched";
    const enum dj_status st = response_store_get(s, id, &a, NULL, NULL, NULL);
    return st == DJ_ERR_NOT_FOUND && !strcmp(a, "untouched") && strstr(dj_last_error(), id) != NULL;
}

/* Bytes an entry counts: the header's promise (header + id, input, response, each with a NUL).
 * The header's size is measured: the bytes of a one-entry store with empty texts minus 3 NULs
 * and the id. */
static size_t header_bytes(void) {
    struct dj_response_store *s = NULL;
    size_t n = 0, bytes = 0;
    if (response_store_create(4, 1 << 20, &s) != DJ_OK) return 0;
    response_store_put(s, "x", "", 0, "", 0);
    response_store_stats(s, &n, &bytes, NULL);
    response_store_destroy(s);
    return n == 1 ? bytes - 4 : 0;
}

static void test_basic(void) {
    struct dj_response_store *s = NULL;
    CHECK(response_store_create(8, 1 << 20, &s) == DJ_OK);
    CHECK(response_store_put(s, "resp_a", "[1]", 3, "{\"id\":\"resp_a\"}", 15) == DJ_OK);
    CHECK(has(s, "resp_a", "[1]", "{\"id\":\"resp_a\"}"));
    CHECK(gone(s, "resp_b"));
    CHECK(gone(s, "resp_"));   /* a prefix of a stored id */
    CHECK(gone(s, "resp_aa")); /* an extension of it */
    /* only the wanted text */
    char *r = NULL;
    size_t nr = 0;
    CHECK(response_store_get(s, "resp_a", NULL, NULL, &r, &nr) == DJ_OK && nr == 15 && r && r[0] == '{');
    free(r);
    /* NUL bytes inside the texts come back whole */
    CHECK(response_store_put(s, "resp_nul", "a\0b", 3, "\0", 1) == DJ_OK);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(response_store_get(s, "resp_nul", &a, &na, &b, &nb) == DJ_OK);
    CHECK(na == 3 && a && !memcmp(a, "a\0b", 4) && nb == 1 && b && b[0] == 0 && b[1] == 0);
    free(a);
    free(b);
    /* replacing an id keeps one entry with the new texts */
    size_t n = 0;
    CHECK(response_store_put(s, "resp_a", "[2]", 3, "{}", 2) == DJ_OK);
    response_store_stats(s, &n, NULL, NULL);
    CHECK(n == 2 && has(s, "resp_a", "[2]", "{}"));
    /* delete */
    CHECK(response_store_delete(s, "resp_a"));
    CHECK(!response_store_delete(s, "resp_a"));
    CHECK(!response_store_delete(s, ""));
    CHECK(gone(s, "resp_a"));
    response_store_stats(s, &n, NULL, NULL);
    CHECK(n == 1);
    /* bad puts */
    CHECK(response_store_put(s, "", "x", 1, "y", 1) == DJ_ERR_INVALID);
    CHECK(response_store_put(s, NULL, "x", 1, "y", 1) == DJ_ERR_INVALID);
    CHECK(response_store_get(s, NULL, &a, NULL, NULL, NULL) == DJ_ERR_NOT_FOUND);
    response_store_destroy(s);
    response_store_destroy(NULL);
}

static void test_evict_by_count(void) {
    struct dj_response_store *s = NULL;
    CHECK(response_store_create(3, 1 << 20, &s) == DJ_OK);
    char id[16], in[16];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "r%d", i);
        snprintf(in, sizeof in, "in%d", i);
        CHECK(response_store_put(s, id, in, strlen(in), "{}", 2) == DJ_OK);
    }
    size_t n = 0, ev = 0;
    response_store_stats(s, &n, NULL, &ev);
    CHECK(n == 3 && ev == 2);
    CHECK(gone(s, "r0") && gone(s, "r1"));
    CHECK(has(s, "r2", "in2", "{}") && has(s, "r3", "in3", "{}") && has(s, "r4", "in4", "{}"));
    /* a get does not make r2 younger: the next put evicts it, not r3 */
    CHECK(response_store_put(s, "r5", "in5", 3, "{}", 2) == DJ_OK);
    CHECK(gone(s, "r2") && has(s, "r3", "in3", "{}"));
    /* replacing r3 makes it the newest: r4 goes next */
    CHECK(response_store_put(s, "r3", "in3b", 4, "{}", 2) == DJ_OK);
    CHECK(response_store_put(s, "r6", "in6", 3, "{}", 2) == DJ_OK);
    CHECK(gone(s, "r4") && has(s, "r3", "in3b", "{}") && has(s, "r5", "in5", "{}") && has(s, "r6", "in6", "{}"));
    response_store_destroy(s);
}

static void test_evict_by_bytes(void) {
    const size_t hdr = header_bytes();
    CHECK(hdr >= 3 * sizeof(size_t)); /* the header holds at least the three lengths */
    /* each entry: id "rN" (2) + input 100 + response 10, each with a NUL */
    const size_t per = hdr + 3 + 101 + 11;
    struct dj_response_store *s = NULL;
    CHECK(response_store_create(100, 3 * per + per / 2, &s) == DJ_OK); /* room for 3.5 entries */
    char in[101];
    memset(in, 'x', 100);
    in[100] = 0;
    char id[8];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK(response_store_put(s, id, in, 100, "0123456789", 10) == DJ_OK);
    }
    size_t n = 0, bytes = 0, ev = 0;
    response_store_stats(s, &n, &bytes, &ev);
    CHECK(n == 3 && bytes == 3 * per && ev == 0);
    CHECK(response_store_put(s, "r3", in, 100, "0123456789", 10) == DJ_OK);
    response_store_stats(s, &n, &bytes, &ev);
    CHECK(n == 3 && bytes == 3 * per && ev == 1 && gone(s, "r0") && has(s, "r1", in, "0123456789"));
    /* a large entry evicts as many of the oldest as it needs, and nothing more */
    char *big = malloc(2 * per);
    memset(big, 'y', 2 * per);
    CHECK(response_store_put(s, "big", big, 2 * per - hdr - 20, "", 0) == DJ_OK);
    response_store_stats(s, &n, &bytes, &ev);
    CHECK(gone(s, "r1") && gone(s, "r2") && has(s, "r3", in, "0123456789"));
    CHECK(n == 2 && ev == 3 && bytes <= 3 * per + per / 2);
    /* an entry over the whole bound alone: refused, nothing evicted */
    CHECK(response_store_put(s, "huge", big, 2 * per, big, 2 * per) == DJ_ERR_INVALID);
    CHECK(strstr(dj_last_error(), "huge") != NULL);
    response_store_stats(s, &n, NULL, &ev);
    CHECK(n == 2 && ev == 3 && gone(s, "huge"));
    free(big);
    response_store_destroy(s);

    /* a zero bound stores nothing */
    CHECK(response_store_create(0, 1 << 20, &s) == DJ_OK);
    CHECK(response_store_put(s, "a", "x", 1, "y", 1) == DJ_ERR_INVALID && gone(s, "a"));
    response_store_destroy(s);
    CHECK(response_store_create(10, 0, &s) == DJ_OK);
    CHECK(response_store_put(s, "a", "x", 1, "y", 1) == DJ_ERR_INVALID && gone(s, "a"));
    response_store_destroy(s);
}

/* Many ids (more than buckets): every one found until evicted. */
static void test_many(void) {
    struct dj_response_store *s = NULL;
    CHECK(response_store_create(200000, (size_t)1 << 30, &s) == DJ_OK);
    char id[32];
    bool ok = true;
    for (int i = 0; i < 100000; i++) {
        snprintf(id, sizeof id, "resp_%08d", i);
        ok = ok && response_store_put(s, id, id, strlen(id), "", 0) == DJ_OK;
    }
    CHECK(ok);
    for (int i = 0; i < 100000; i += 997) {
        snprintf(id, sizeof id, "resp_%08d", i);
        ok = ok && has(s, id, id, "");
    }
    CHECK(ok);
    response_store_destroy(s);
}

struct thr {
    struct dj_response_store *s;
    int t;
    int bad;
};

static void *worker(void *arg) {
    struct thr *x = arg;
    char id[32], in[64];
    for (int i = 0; i < 3000; i++) {
        const int k = (i * 7 + x->t) % 50;
        snprintf(id, sizeof id, "resp_%d", k);
        snprintf(in, sizeof in, "[\"input of %d\"]", k);
        switch ((i + x->t) % 4) {
        case 0:
        case 1: response_store_put(x->s, id, in, strlen(in), "{}", 2); break;
        case 2: {
            char *a = NULL;
            size_t na = 0;
            if (response_store_get(x->s, id, &a, &na, NULL, NULL) == DJ_OK) {
                /* the entry of id always holds its own input, whoever stored it */
                if (na != strlen(in) || strcmp(a, in)) x->bad++;
                free(a);
            }
            break;
        }
        default: response_store_delete(x->s, id); break;
        }
    }
    return NULL;
}

static void test_threads(void) {
    struct dj_response_store *s = NULL;
    CHECK(response_store_create(20, 1 << 20, &s) == DJ_OK);
    pthread_t th[4];
    struct thr x[4];
    for (int t = 0; t < 4; t++) {
        x[t] = (struct thr){s, t, 0};
        pthread_create(&th[t], NULL, worker, &x[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    size_t n = 0, bytes = 0;
    response_store_stats(s, &n, &bytes, NULL);
    CHECK(n <= 20);
    for (int t = 0; t < 4; t++) CHECK(x[t].bad == 0);
    /* the byte count is the sum of what is left: delete everything and it is 0 */
    char id[32];
    for (int k = 0; k < 50; k++) {
        snprintf(id, sizeof id, "resp_%d", k);
        response_store_delete(s, id);
    }
    response_store_stats(s, &n, &bytes, NULL);
    CHECK(n == 0 && bytes == 0);
    response_store_destroy(s);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_basic();
    test_evict_by_count();
    test_evict_by_bytes();
    test_many();
    test_threads();
    TEST_END();
}
