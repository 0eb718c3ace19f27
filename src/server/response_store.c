/*
 * response_store.c — stored Responses for previous_response_id (response_store.h).
 *
 * One allocation per entry: the header, then id, input and response, each
 * followed by a NUL.  The bucket array is sized once (the next power of two
 * at or above the entry bound, at most 2^16 buckets: a store bounded to more
 * entries has longer chains, still short beside the JSON texts the server
 * copies out of them).
 */
#include "server/response_store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

struct rs_entry {
    struct rs_entry *hnext;         /* the next entry of the bucket */
    struct rs_entry *older, *newer; /* insertion order */
    uint64_t hash;
    size_t bytes; /* what the entry counts against max_bytes */
    size_t n_id, n_input, n_response;
    char data[]; /* id \0 input \0 response \0 */
};

struct dj_response_store {
    pthread_mutex_t mu;
    size_t max_entries, max_bytes;
    struct rs_entry **buckets;
    size_t n_buckets; /* a power of two */
    struct rs_entry *oldest, *newest;
    size_t n_entries, n_bytes, n_evicted;
};

enum { RS_MAX_BUCKETS = 1 << 16 };

static uint64_t id_hash(const char *id, size_t n) { return dj_fnv1a(DJ_FNV_OFFSET, id, n); }

static const char *entry_id(const struct rs_entry *e) { return e->data; }
static const char *entry_input(const struct rs_entry *e) { return e->data + e->n_id + 1; }
static const char *entry_response(const struct rs_entry *e) { return e->data + e->n_id + 1 + e->n_input + 1; }

enum dj_status response_store_create(size_t max_entries, size_t max_bytes, struct dj_response_store **out) {
    struct dj_response_store *s = calloc(1, sizeof *s);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "response store: out of memory");
    s->max_entries = max_entries;
    s->max_bytes = max_bytes;
    size_t nb = 16;
    while (nb < max_entries && nb < RS_MAX_BUCKETS) nb *= 2;
    s->n_buckets = nb;
    s->buckets = calloc(nb, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return dj_fail(DJ_ERR_NOMEM, "response store: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return DJ_OK;
}

void response_store_destroy(struct dj_response_store *s) {
    if (!s) return;
    for (struct rs_entry *e = s->oldest; e;) {
        struct rs_entry *nx = e->newer;
        free(e);
        e = nx;
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* s->mu held.  The entry of id, and the link that points at it (for unlinking). */
static struct rs_entry *find(struct dj_response_store *s, const char *id, size_t n, uint64_t h,
                             struct rs_entry ***link) {
    struct rs_entry **p = &s->buckets[h & (s->n_buckets - 1)];
    for (; *p; p = &(*p)->hnext) {
        struct rs_entry *e = *p;
        if (e->hash == h && e->n_id == n && !memcmp(entry_id(e), id, n)) {
            if (link) *link = p;
            return e;
        }
    }
    return NULL;
}

/* s->mu held.  Unlinks e from its bucket and the age list and frees it. */
static void remove_entry(struct dj_response_store *s, struct rs_entry *e) {
    struct rs_entry **link = NULL;
    find(s, entry_id(e), e->n_id, e->hash, &link);
    DJ_ASSERT(link && *link == e);
    *link = e->hnext;
    if (e->older) e->older->newer = e->newer;
    else s->oldest = e->newer;
    if (e->newer) e->newer->older = e->older;
    else s->newest = e->older;
    s->n_entries--;
    s->n_bytes -= e->bytes;
    free(e);
}

enum dj_status response_store_put(struct dj_response_store *s, const char *id, const char *input, size_t n_input,
                                  const char *response, size_t n_response) {
    const size_t n_id = id ? strlen(id) : 0;
    if (n_id == 0) return dj_fail(DJ_ERR_INVALID, "response store: an empty response id");
    /* header + the three texts with their NULs, overflow-checked */
    size_t bytes = sizeof(struct rs_entry);
    const size_t parts[3] = {n_id, n_input, n_response};
    for (int i = 0; i < 3; i++) {
        if (parts[i] > SIZE_MAX - 1 - bytes)
            return dj_fail(DJ_ERR_INVALID, "response store: response '%.64s' is too large", id);
        bytes += parts[i] + 1;
    }
    if (s->max_entries == 0 || bytes > s->max_bytes)
        return dj_fail(DJ_ERR_INVALID, "response store: response '%.64s' (%zu bytes) is over the store's bound (%zu bytes, %zu entries)",
                       id, bytes, s->max_bytes, s->max_entries);
    struct rs_entry *e = malloc(bytes);
    if (!e) return dj_fail(DJ_ERR_NOMEM, "response store: out of memory for '%.64s' (%zu bytes)", id, bytes);
    e->hash = id_hash(id, n_id);
    e->bytes = bytes;
    e->n_id = n_id;
    e->n_input = n_input;
    e->n_response = n_response;
    char *p = e->data;
    memcpy(p, id, n_id);
    p[n_id] = 0;
    p += n_id + 1;
    if (n_input) memcpy(p, input, n_input);
    p[n_input] = 0;
    p += n_input + 1;
    if (n_response) memcpy(p, response, n_response);
    p[n_response] = 0;

    pthread_mutex_lock(&s->mu);
    struct rs_entry *old = find(s, id, n_id, e->hash, NULL);
    if (old) remove_entry(s, old);
    /* make room: the new entry fits on its own (checked above) */
    while (s->oldest && (s->n_entries + 1 > s->max_entries || s->n_bytes + bytes > s->max_bytes)) {
        remove_entry(s, s->oldest);
        s->n_evicted++;
    }
    struct rs_entry **b = &s->buckets[e->hash & (s->n_buckets - 1)];
    e->hnext = *b;
    *b = e;
    e->newer = NULL;
    e->older = s->newest;
    if (s->newest) s->newest->newer = e;
    else s->oldest = e;
    s->newest = e;
    s->n_entries++;
    s->n_bytes += bytes;
    pthread_mutex_unlock(&s->mu);
    return DJ_OK;
}

static char *copy_text(const char *src, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        if (n) memcpy(p, src, n);
        p[n] = 0;
    }
    return p;
}

enum dj_status response_store_get(struct dj_response_store *s, const char *id, char **input, size_t *n_input,
                                  char **response, size_t *n_response) {
    const size_t n_id = id ? strlen(id) : 0;
    pthread_mutex_lock(&s->mu);
    struct rs_entry *e = n_id ? find(s, id, n_id, id_hash(id, n_id), NULL) : NULL;
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        return dj_fail(DJ_ERR_NOT_FOUND, "no stored response '%.64s'", id ? id : "");
    }
    char *in = input ? copy_text(entry_input(e), e->n_input) : NULL;
    char *resp = response ? copy_text(entry_response(e), e->n_response) : NULL;
    const size_t ni = e->n_input, nr = e->n_response;
    pthread_mutex_unlock(&s->mu);
    if ((input && !in) || (response && !resp)) {
        free(in);
        free(resp);
        return dj_fail(DJ_ERR_NOMEM, "response store: out of memory copying '%.64s'", id);
    }
    if (input) *input = in;
    if (n_input) *n_input = ni;
    if (response) *response = resp;
    if (n_response) *n_response = nr;
    return DJ_OK;
}

bool response_store_delete(struct dj_response_store *s, const char *id) {
    const size_t n_id = id ? strlen(id) : 0;
    if (!n_id) return false;
    pthread_mutex_lock(&s->mu);
    struct rs_entry *e = find(s, id, n_id, id_hash(id, n_id), NULL);
    if (e) remove_entry(s, e);
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

void response_store_stats(struct dj_response_store *s, size_t *n_entries, size_t *n_bytes, size_t *n_evicted) {
    pthread_mutex_lock(&s->mu);
    if (n_entries) *n_entries = s->n_entries;
    if (n_bytes) *n_bytes = s->n_bytes;
    if (n_evicted) *n_evicted = s->n_evicted;
    pthread_mutex_unlock(&s->mu);
}
