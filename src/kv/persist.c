/*
 * persist.c — the on-disk KV block store; the format, the guarantees and the
 * API are described in persist.h.  This file holds, in order: the record
 * codec (pure functions over a buffer, fuzzed by tests/fuzz/fuzz_kv_record.c),
 * temporary-file naming and cleanup, the approximate index, the remove-if-same
 * dance and the reporting of corrupt files, the start-up scan, the writer
 * thread (writes, failure bursts and budget eviction), the public calls, and
 * kv_store_file_id.
 *
 * Threads and locks.  `mu` guards the queue, the index and the stats; no I/O
 * is done while holding it.  `read_mu` guards the read buffer and serializes
 * kv_store_get's disk path; it is taken before `mu`, never after.  The writer
 * thread owns every write, every eviction and every rescan after open.
 *
 * Why the index is only approximate: other processes write, hit and evict in
 * the same folder without telling us.  The index serves two things only — the
 * byte total for the budget and the eviction order — and both are re-checked
 * against the file system before acting (a victim is stat'ed, and kept if its
 * mtime moved; the folder is rescanned every KV_STORE_RESCAN_S while a budget
 * is enforced, or as soon as a hit finds a file the index lacked).  Lookups
 * never trust it: a get always tries the file.
 */
#include "kv/persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/checked.h"
#include "core/status.h"

#define NS_PER_S 1000000000LL
/* A file named like a block and larger than a record cannot be a hit; it is
 * read (to tell corrupt from another geometry's record) only up to twice a
 * record plus this, so that a stray big file never costs a lookup more than a
 * couple of records' reading.  Bigger ones are a miss, left to eviction. */
#define KV_STORE_VERIFY_SLACK 4096
#define KV_STORE_EVICT_ROUNDS 8

/* ---- little-endian fields ------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* ---- the record codec ------------------------------------------------------ */

bool kv_store_record_bytes(const struct kv_store_params *p, size_t *out) {
    size_t tok, n;
    if (dj_mul_overflow((size_t)p->block_size, 4, &tok)) return false;
    if (dj_add_overflow(KV_STORE_HEADER_BYTES, tok, &n) || dj_add_overflow(n, p->block_bytes, &n) ||
        dj_add_overflow(n, KV_STORE_CHECKSUM_BYTES, &n))
        return false;
    *out = n;
    return true;
}

/* Everything but the checksum: header, tokens, payload.  out holds n = record bytes. */
static void encode_body(const struct kv_store_params *p, uint64_t chain, uint64_t parent_chain, const dj_token *tokens,
                        const void *data, uint8_t *out) {
    memcpy(out, KV_STORE_MAGIC, 8); /* 7 letters and the NUL */
    put_u32(out + 8, KV_STORE_VERSION);
    put_u32(out + 12, KV_STORE_HEADER_BYTES);
    memcpy(out + 16, p->key, KV_STORE_KEY_BYTES);
    put_u64(out + 48, chain);
    put_u64(out + 56, parent_chain);
    put_u32(out + 64, p->n_layer);
    put_u32(out + 68, p->n_embd_kv);
    put_u32(out + 72, p->block_size);
    put_u32(out + 76, p->kv_type);
    put_u64(out + 80, (uint64_t)p->block_bytes);
    uint8_t *t = out + KV_STORE_HEADER_BYTES;
    for (uint32_t i = 0; i < p->block_size; i++) put_u32(t + 4 * (size_t)i, (uint32_t)tokens[i]);
    memcpy(t + 4 * (size_t)p->block_size, data, p->block_bytes);
}

static void seal_checksum(uint8_t *rec, size_t n) {
    put_u64(rec + n - KV_STORE_CHECKSUM_BYTES, XXH3_64bits(rec, n - KV_STORE_CHECKSUM_BYTES));
}

enum dj_status kv_store_encode_record(const struct kv_store_params *p, uint64_t chain, uint64_t parent_chain,
                                      const dj_token *tokens, const void *data, uint8_t *out, size_t n) {
    size_t want;
    if (!kv_store_record_bytes(p, &want)) return dj_fail(DJ_ERR_INVALID, "kv store: record size overflows");
    if (want != n)
        return dj_fail(DJ_ERR_INVALID, "kv store: a record of this geometry is %zu bytes, the buffer %zu", want, n);
    encode_body(p, chain, parent_chain, tokens, data, out);
    seal_checksum(out, n);
    return DJ_OK;
}

enum dj_status kv_store_parse_record(const uint8_t *buf, size_t n, struct kv_store_record *out) {
    /* The smallest thing whose magic, checksum and version can be read. */
    if (n < 16 + KV_STORE_CHECKSUM_BYTES)
        return dj_fail(DJ_ERR_FORMAT, "record of %zu bytes: shorter than the %u bytes of magic, version and checksum", n,
                       16 + KV_STORE_CHECKSUM_BYTES);
    if (memcmp(buf, KV_STORE_MAGIC, 8) != 0) return dj_fail(DJ_ERR_FORMAT, "record: bad magic");
    uint64_t stored = get_u64(buf + n - KV_STORE_CHECKSUM_BYTES);
    uint64_t computed = XXH3_64bits(buf, n - KV_STORE_CHECKSUM_BYTES);
    if (stored != computed)
        return dj_fail(DJ_ERR_FORMAT, "record of %zu bytes: checksum %016" PRIx64 ", the bytes hash to %016" PRIx64, n,
                       stored, computed);
    uint32_t version = get_u32(buf + 8);
    if (version != KV_STORE_VERSION)
        return dj_fail(DJ_ERR_UNSUPPORTED, "record: format version %u, this build reads %u", version, KV_STORE_VERSION);
    uint32_t hdr = get_u32(buf + 12);
    if (hdr != KV_STORE_HEADER_BYTES)
        return dj_fail(DJ_ERR_FORMAT, "record: header of %u bytes, version %u has %u", hdr, version,
                       KV_STORE_HEADER_BYTES);
    if (n < (size_t)KV_STORE_HEADER_BYTES + KV_STORE_CHECKSUM_BYTES)
        return dj_fail(DJ_ERR_FORMAT, "record of %zu bytes: shorter than its %u-byte header and checksum", n,
                       KV_STORE_HEADER_BYTES + KV_STORE_CHECKSUM_BYTES);
    struct kv_store_record r;
    r.version = version;
    memcpy(r.key, buf + 16, KV_STORE_KEY_BYTES);
    r.chain = get_u64(buf + 48);
    r.parent_chain = get_u64(buf + 56);
    r.n_layer = get_u32(buf + 64);
    r.n_embd_kv = get_u32(buf + 68);
    r.block_size = get_u32(buf + 72);
    r.kv_type = get_u32(buf + 76);
    r.payload_bytes = get_u64(buf + 80);
    size_t tok_bytes, total;
    if (r.payload_bytes > SIZE_MAX || dj_mul_overflow((size_t)r.block_size, 4, &tok_bytes) ||
        dj_add_overflow(KV_STORE_HEADER_BYTES, tok_bytes, &total) ||
        dj_add_overflow(total, (size_t)r.payload_bytes, &total) || dj_add_overflow(total, KV_STORE_CHECKSUM_BYTES, &total))
        return dj_fail(DJ_ERR_FORMAT, "record: block_size %u and payload %" PRIu64 " bytes overflow", r.block_size,
                       r.payload_bytes);
    if (total != n)
        return dj_fail(DJ_ERR_FORMAT,
                       "record of %zu bytes: its header (block_size %u, payload %" PRIu64 " bytes) says %zu", n,
                       r.block_size, r.payload_bytes, total);
    r.tokens = buf + KV_STORE_HEADER_BYTES;
    r.payload = r.tokens + tok_bytes;
    *out = r;
    return DJ_OK;
}

bool kv_store_record_matches(const struct kv_store_record *r, const struct kv_store_params *p, uint64_t chain,
                             uint64_t parent_chain, const dj_token *tokens) {
    if (memcmp(r->key, p->key, KV_STORE_KEY_BYTES) != 0) return false;
    if (r->n_layer != p->n_layer || r->n_embd_kv != p->n_embd_kv || r->block_size != p->block_size ||
        r->kv_type != p->kv_type || r->payload_bytes != (uint64_t)p->block_bytes)
        return false;
    if (r->chain != chain || r->parent_chain != parent_chain) return false;
    for (uint32_t i = 0; i < r->block_size; i++)
        if (get_u32(r->tokens + 4 * (size_t)i) != (uint32_t)tokens[i]) return false;
    return true;
}

/* ---- time, paths, errno text ---------------------------------------------- */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* For durations (scan bound, write pause, log spacing): immune to clock changes. */
static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t mtime_ns(const struct stat *st) { return (int64_t)st->st_mtim.tv_sec * NS_PER_S + st->st_mtim.tv_nsec; }

static const char *errno_text(int err, char *buf, size_t n) { return strerror_r(err, buf, n); /* GNU: returns the text */ }

/* pread until n bytes or EOF; the bytes read, or -1 on an I/O error. */
static ssize_t read_full(int fd, uint8_t *buf, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = pread(fd, buf + off, n - off, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        off += (size_t)r;
    }
    return (ssize_t)off;
}

/* mkdir -p: creates every missing component of path. 0 or an errno. */
static int mkdir_p(const char *path) {
    char tmp[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof tmp) return ENAMETOOLONG;
    memcpy(tmp, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return errno;
        tmp[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* fsync of a folder, so that a rename in it is durable.  Filesystems that
 * cannot sync a folder say EINVAL: nothing more can be done there. */
static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
    close(fd);
    return err;
}

/* 16 lowercase hex digits + ".kvb" → the chain hash; anything else is not a block name. */
static bool parse_block_name(const char *name, uint64_t *chain) {
    if (strlen(name) != 20 || strcmp(name + 16, ".kvb") != 0) return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint64_t)d;
    }
    *chain = v;
    return true;
}

/* ---- temporary files ------------------------------------------------------
 * Named ".tmp-<host>-<pid>-<nonce>-<counter>": unique among the processes of
 * one folder (the host tells replicas on a shared filesystem apart, the pid
 * processes of one host, the counter the writes of one process), and enough
 * for a later process to tell whether the writer may still be alive.  The
 * nonce is drawn once per process, so a restarted container that got the same
 * pid does not mistake its predecessor's leftovers for its own writes. */

static pthread_once_t tmp_once = PTHREAD_ONCE_INIT;
static char tmp_host[33];
static uint32_t tmp_nonce;
static atomic_uint_fast64_t tmp_counter;

static void tmp_init(void) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) strcpy(h, "localhost");
    size_t j = 0;
    for (size_t i = 0; h[i] && j < sizeof tmp_host - 1; i++) {
        char c = h[i];
        bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        tmp_host[j++] = ok ? c : '_'; /* '-' separates the fields */
    }
    tmp_host[j] = '\0';
    if (getrandom(&tmp_nonce, sizeof tmp_nonce, GRND_NONBLOCK) != (ssize_t)sizeof tmp_nonce)
        tmp_nonce = (uint32_t)(now_ns() ^ ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull >> 17));
}

/* dir/.tmp-...: a fresh temporary name in dir (for writes and set-asides). */
static void tmp_path(const char *dir, char *out, size_t n) {
    pthread_once(&tmp_once, tmp_init);
    uint64_t c = atomic_fetch_add(&tmp_counter, 1);
    snprintf(out, n, "%s/.tmp-%s-%ld-%08" PRIx32 "-%" PRIu64, dir, tmp_host, (long)getpid(), tmp_nonce, c);
}

/* May the stray temporary file `name` (with stat st) be removed?  Only when its
 * writer cannot be alive: older than KV_STORE_TMP_MAX_AGE_S, or written on this
 * host by a process that is gone (or by an earlier process with our pid).  Never
 * one of this process's own writes in flight. */
static bool tmp_abandoned(const char *name, const struct stat *st, int64_t now) {
    pthread_once(&tmp_once, tmp_init);
    bool old = now - mtime_ns(st) > (int64_t)KV_STORE_TMP_MAX_AGE_S * NS_PER_S;
    /* ".tmp-" host "-" pid "-" nonce "-" counter, parsed from the right */
    char buf[256];
    if (strlen(name) >= sizeof buf) return old;
    strcpy(buf, name);
    char *f[3];
    for (int i = 0; i < 3; i++) {
        char *d = strrchr(buf, '-');
        if (!d || d < buf + 5) return old;
        f[i] = d + 1;
        *d = '\0';
    }
    const char *host = buf + 5;
    char *end;
    errno = 0;
    long pid = strtol(f[2], &end, 10);
    if (errno || *end || end == f[2] || pid <= 0) return old;
    unsigned long nonce = strtoul(f[1], &end, 16);
    if (*end || end == f[1]) return old;
    bool mine = strcmp(host, tmp_host) == 0 && pid == (long)getpid() && nonce == tmp_nonce;
    if (mine) return false;
    if (old) return true;
    if (strcmp(host, tmp_host) != 0) return false; /* another host: its pids mean nothing here */
    if (pid == (long)getpid()) return true;        /* our pid, another nonce: a dead predecessor */
    if (pid > INT32_MAX) return true;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* ---- the index: chain -> (bytes, last use), open addressing ---------------- */

struct kv_index_entry {
    uint64_t chain;
    uint64_t size;
    int64_t last_use; /* ns since the epoch: the file's mtime, or when we wrote or hit it */
    bool used;
};

struct kv_index {
    struct kv_index_entry *e;
    size_t cap; /* a power of two, or 0 */
    size_t n;
    uint64_t bytes; /* sum of size */
};

static size_t idx_home(const struct kv_index *x, uint64_t chain) {
    return (size_t)((chain * 0x9e3779b97f4a7c15ull) >> 17) & (x->cap - 1);
}

static struct kv_index_entry *idx_find(struct kv_index *x, uint64_t chain) {
    if (!x->cap) return NULL;
    for (size_t i = idx_home(x, chain);; i = (i + 1) & (x->cap - 1)) {
        if (!x->e[i].used) return NULL;
        if (x->e[i].chain == chain) return &x->e[i];
    }
}

/* Inserts or updates; false (nothing changed) when growing fails — the index is
 * approximate, so a block it lacks costs only budget accuracy. */
static bool idx_put(struct kv_index *x, uint64_t chain, uint64_t size, int64_t last_use) {
    struct kv_index_entry *e = idx_find(x, chain);
    if (e) {
        x->bytes = x->bytes - e->size + size;
        e->size = size;
        e->last_use = last_use;
        return true;
    }
    if ((x->n + 1) * 2 > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        struct kv_index_entry *ne = calloc(cap, sizeof *ne);
        if (!ne) return false;
        struct kv_index old = *x;
        x->e = ne;
        x->cap = cap;
        for (size_t i = 0; i < old.cap; i++) {
            if (!old.e[i].used) continue;
            size_t j = idx_home(x, old.e[i].chain);
            while (x->e[j].used) j = (j + 1) & (cap - 1);
            x->e[j] = old.e[i];
        }
        free(old.e);
    }
    size_t i = idx_home(x, chain);
    while (x->e[i].used) i = (i + 1) & (x->cap - 1);
    x->e[i] = (struct kv_index_entry){chain, size, last_use, true};
    x->n++;
    x->bytes += size;
    return true;
}

/* Removes by backward shift (no tombstones, so probes stay short). */
static void idx_del(struct kv_index *x, uint64_t chain) {
    struct kv_index_entry *e = idx_find(x, chain);
    if (!e) return;
    size_t i = (size_t)(e - x->e);
    x->bytes -= e->size;
    x->n--;
    for (size_t j = (i + 1) & (x->cap - 1); x->e[j].used; j = (j + 1) & (x->cap - 1)) {
        size_t h = idx_home(x, x->e[j].chain);
        /* entry j may move to the hole i if its home is not in (i, j] cyclically */
        bool between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!between) {
            x->e[i] = x->e[j];
            i = j;
        }
    }
    x->e[i].used = false;
}

/* ---- the store ------------------------------------------------------------- */

struct kv_queue_item {
    struct kv_queue_item *next;
    uint64_t chain, parent_chain;
    uint8_t rec[]; /* the record, its checksum filled by the writer */
};

struct kv_store {
    struct kv_store_params p; /* p.dir points at root */
    char *root;               /* params.dir, copied */
    char *kdir;               /* root/<32 hex of key[0..16)> */
    size_t rec_bytes;

    pthread_mutex_t mu; /* everything below up to read_mu */
    pthread_cond_t cv_work, cv_done;
    struct kv_queue_item *head, *tail;
    struct kv_queue_item *writing; /* taken off the queue, not yet renamed into place */
    size_t n_queued;
    uint64_t n_enqueued, n_finished; /* for flush: puts queued / taken care of, since open */
    bool stop;
    struct kv_index idx;
    bool idx_stale;
    int64_t last_scan;
    struct kv_store_stats st;
    /* failed writes (write_item): writes_disabled until paused_until (mono_ns);
     * the burst since the last successful write, and its last log line */
    int64_t paused_until;
    uint64_t burst_failures, burst_logged_failures;
    int64_t burst_logged_at;
    /* corrupt files that could not be removed (a read-only folder), already
     * reported: a later get of one is a silent miss */
    uint64_t *unremovable;
    size_t n_unremovable, cap_unremovable;

    pthread_mutex_t read_mu; /* the disk path of kv_store_get */
    uint8_t *rbuf;           /* rec_bytes */

    pthread_t writer;
};

/* kv_store_get_totals: every store of the process, updated with st. */
static atomic_uint_fast64_t total_written, total_write_failures, total_corrupt;

void kv_store_get_totals(struct kv_store_totals *out) {
    out->written = atomic_load(&total_written);
    out->write_failures = atomic_load(&total_write_failures);
    out->corrupt = atomic_load(&total_corrupt);
}

static void block_path(const struct kv_store *s, uint64_t chain, char *out, size_t n) {
    snprintf(out, n, "%s/%016" PRIx64 ".kvb", s->kdir, chain);
}

/* Removes the file at path if it is still the file described by `seen` (same
 * device and inode; with check_mtime, also not touched since).  Unlinking by
 * name after a check would race with a process that renames a fresh copy over
 * the name in between; so the file is first renamed aside (atomic), the file
 * that moved is checked, and if it is not the one judged, it is put back with
 * link() — which fails if yet another copy took the name meanwhile, a copy as
 * valid as it.  0 when the judged file was removed; ENOENT when it was gone
 * already or another file holds the name now; else the errno of the rename
 * that failed (EACCES, EROFS...: the file stays). */
static int remove_if_same(const struct kv_store *s, const char *path, const struct stat *seen, bool check_mtime) {
    char aside[PATH_MAX];
    tmp_path(s->kdir, aside, sizeof aside);
    if (rename(path, aside) != 0) return errno ? errno : EIO;
    struct stat st;
    bool same = lstat(aside, &st) == 0 && st.st_dev == seen->st_dev && st.st_ino == seen->st_ino &&
                (!check_mtime || mtime_ns(&st) == mtime_ns(seen));
    if (same) {
        unlink(aside);
        return 0;
    }
    if (link(aside, path) == 0 || errno == EEXIST) {
        unlink(aside);
    } else if (rename(aside, path) != 0) { /* no hard links here: rename back (may replace an equal copy) */
        unlink(aside);
    }
    return ENOENT;
}

/* A block file judged corrupt (why: what is wrong, the parser's message):
 * removed if it is still the file read, then counted and logged — once: the
 * process whose removal succeeded reports it; one that finds it gone or
 * replaced says nothing (another process or thread reported it).  A file that
 * cannot be removed (a read-only folder) is reported the first time only.
 * Takes mu; called with read_mu held, or from the start-up scan. */
static void drop_corrupt(struct kv_store *s, const char *path, uint64_t chain, const struct stat *seen,
                         const char *why) {
    int err = remove_if_same(s, path, seen, false);
    if (err == ENOENT) return;
    pthread_mutex_lock(&s->mu);
    bool seen_before = false;
    for (size_t i = 0; err && i < s->n_unremovable; i++) seen_before |= s->unremovable[i] == chain;
    if (err && !seen_before && s->n_unremovable == s->cap_unremovable) {
        size_t cap = s->cap_unremovable ? 2 * s->cap_unremovable : 8;
        uint64_t *nu = realloc(s->unremovable, cap * sizeof *nu);
        if (nu) {
            s->unremovable = nu;
            s->cap_unremovable = cap;
        }
    }
    if (err && !seen_before && s->n_unremovable < s->cap_unremovable) s->unremovable[s->n_unremovable++] = chain;
    if (!seen_before) {
        s->st.corrupt++;
        atomic_fetch_add(&total_corrupt, 1);
    }
    pthread_mutex_unlock(&s->mu);
    if (seen_before) return;
    char eb[128];
    if (err == 0) dj_log(DJ_LOG_WARN, "kv-dir: %s: %s — removed", path, why);
    else dj_log(DJ_LOG_WARN, "kv-dir: %s: %s — cannot be removed: %s", path, why, errno_text(err, eb, sizeof eb));
}

/* Rebuilds the index from the folder and removes abandoned temporary files.
 * Runs at open and then on the writer thread only. */
static void rescan(struct kv_store *s) {
    struct kv_index nx = {0};
    int64_t now = now_ns();
    DIR *d = opendir(s->kdir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            struct stat st;
            uint64_t chain;
            if (strncmp(de->d_name, ".tmp-", 5) == 0) {
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                    tmp_abandoned(de->d_name, &st, now))
                    unlinkat(dirfd(d), de->d_name, 0);
                continue;
            }
            if (!parse_block_name(de->d_name, &chain)) continue; /* not ours: never touched */
            if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
            idx_put(&nx, chain, (uint64_t)st.st_size, mtime_ns(&st));
        }
        closedir(d);
    }
    pthread_mutex_lock(&s->mu);
    struct kv_index old = s->idx;
    s->idx = nx;
    s->idx_stale = false;
    s->last_scan = now;
    pthread_mutex_unlock(&s->mu);
    free(old.e);
}

struct kv_victim {
    uint64_t chain;
    int64_t last_use;
};

static int victim_cmp(const void *a, const void *b) {
    const struct kv_victim *x = a, *y = b;
    if (x->last_use != y->last_use) return x->last_use < y->last_use ? -1 : 1;
    return x->chain < y->chain ? -1 : x->chain > y->chain;
}

static bool fits(struct kv_store *s, uint64_t need) {
    pthread_mutex_lock(&s->mu);
    bool ok = s->idx.bytes <= s->p.max_bytes && need <= s->p.max_bytes - s->idx.bytes;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Evicts least recently used blocks until `need` more bytes fit the budget.
 * Each victim is stat'ed first: gone → forgotten; touched by a hit since we
 * looked (mtime newer) → its age updated and kept for now; otherwise removed
 * if still the same file.  Gives up after a few rounds (then the write goes
 * ahead slightly over budget rather than livelock against busy readers). */
static void make_room(struct kv_store *s, uint64_t need) {
    pthread_mutex_lock(&s->mu);
    bool scan = s->idx_stale || now_ns() - s->last_scan > (int64_t)KV_STORE_RESCAN_S * NS_PER_S;
    pthread_mutex_unlock(&s->mu);
    if (scan) rescan(s);
    for (int round = 0; round < KV_STORE_EVICT_ROUNDS; round++) {
        if (fits(s, need)) return;
        pthread_mutex_lock(&s->mu);
        size_t n = 0;
        struct kv_victim *v = malloc((s->idx.n ? s->idx.n : 1) * sizeof *v);
        for (size_t i = 0; v && i < s->idx.cap; i++)
            if (s->idx.e[i].used) v[n++] = (struct kv_victim){s->idx.e[i].chain, s->idx.e[i].last_use};
        pthread_mutex_unlock(&s->mu);
        if (!v) return;
        qsort(v, n, sizeof *v, victim_cmp);
        for (size_t i = 0; i < n && !fits(s, need); i++) {
            char path[PATH_MAX];
            struct stat st;
            block_path(s, v[i].chain, path, sizeof path);
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
                pthread_mutex_lock(&s->mu);
                idx_del(&s->idx, v[i].chain);
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            if (mtime_ns(&st) > v[i].last_use) {
                pthread_mutex_lock(&s->mu);
                idx_put(&s->idx, v[i].chain, (uint64_t)st.st_size, mtime_ns(&st));
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            bool removed = remove_if_same(s, path, &st, true) == 0;
            pthread_mutex_lock(&s->mu);
            idx_del(&s->idx, v[i].chain);
            if (removed) s->st.evicted++;
            else s->idx_stale = true; /* someone else's file is there now */
            pthread_mutex_unlock(&s->mu);
        }
        free(v);
    }
}

/* ---- the start-up scan (persist.h) ---------------------------------------------
 * Whole records, the most recently used first (the blocks the next prompts
 * are likeliest to load, and whose chains a damaged file would cut), while the
 * next file fits in scan_max_bytes and scan_max_ms have not passed.  Reading
 * is the cost (XXH3 hashes far faster than a disk reads); the listing and the
 * stat of every file were done by rescan already.  Runs in kv_store_open
 * before the writer thread starts; the order is the index's last use (mtime). */
static void scan_at_open(struct kv_store *s) {
    const int64_t t0 = mono_ns();
    const uint64_t max_bytes = s->p.scan_max_bytes;
    const int64_t max_ns = (int64_t)s->p.scan_max_ms * 1000000;
    size_t n = 0;
    struct kv_victim *v = malloc((s->idx.n ? s->idx.n : 1) * sizeof *v);
    for (size_t i = 0; v && i < s->idx.cap; i++)
        if (s->idx.e[i].used) v[n++] = (struct kv_victim){s->idx.e[i].chain, s->idx.e[i].last_use};
    if (!v || !max_bytes || !max_ns) {
        s->st.scan_unchecked = s->idx.n;
        free(v);
        return;
    }
    qsort(v, n, sizeof *v, victim_cmp); /* oldest first: walked from the end */
    uint64_t bytes = 0, checked = 0, unchecked = 0;
    for (size_t k = n; k-- > 0;) {
        char path[PATH_MAX];
        block_path(s, v[k].chain, path, sizeof path);
        struct kv_index_entry *e = idx_find(&s->idx, v[k].chain);
        uint64_t size = e ? e->size : 0;
        if (size > 2 * (uint64_t)s->rec_bytes + KV_STORE_VERIFY_SLACK) continue; /* not judged (as in get) */
        if (size > max_bytes - bytes || mono_ns() - t0 >= max_ns) {
            unchecked = k + 1; /* this one and the older ones */
            break;
        }
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
            close(fd); /* changed since the listing: its first load judges it */
            continue;
        }
        uint8_t *buf = size <= s->rec_bytes ? s->rbuf : malloc((size_t)size);
        ssize_t got = buf ? read_full(fd, buf, (size_t)size) : -1;
        close(fd);
        if (got >= 0) {
            bytes += (uint64_t)got;
            checked++;
            struct kv_store_record r;
            if (kv_store_parse_record(buf, (size_t)got, &r) == DJ_ERR_FORMAT) {
                drop_corrupt(s, path, v[k].chain, &st, dj_last_error());
                idx_del(&s->idx, v[k].chain);
            }
        }
        if (buf != s->rbuf) free(buf);
    }
    free(v);
    s->st.scan_checked = checked;
    s->st.scan_unchecked = unchecked;
    s->st.scan_bytes = bytes;
    s->st.scan_us = (uint64_t)(mono_ns() - t0) / 1000;
    dj_log(unchecked ? DJ_LOG_INFO : DJ_LOG_DEBUG,
           "kv-dir: %s: start-up scan verified %" PRIu64 " records (%.1f MiB in %.0f ms), %" PRIu64
           " left to be verified when first read",
           s->kdir, checked, (double)bytes / (1 << 20), (double)s->st.scan_us / 1000, unchecked);
}

/* Writes rec[n] to path through a temporary file: create, write, fsync,
 * close, rename, fsync the folder.  0, or an errno with *stage naming the step
 * that failed (the temporary file is removed then). */
static int write_record(struct kv_store *s, const char *path, const uint8_t *rec, size_t n, const char **stage) {
    char tmp[PATH_MAX];
    tmp_path(s->kdir, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && mkdir_p(s->kdir) == 0) /* the folder was removed under us */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        *stage = "creating a temporary file";
        return errno;
    }
    int err = 0;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, rec + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            *stage = "writing";
            goto fail;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        err = errno;
        *stage = "fsync";
        goto fail;
    }
    int rc = close(fd); /* NFS reports write errors here */
    fd = -1;
    if (rc != 0) {
        err = errno;
        *stage = "closing";
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        *stage = "renaming into place";
        goto fail;
    }
    if ((err = fsync_dir(s->kdir)) != 0) { /* the record is in place and complete; the disk is in trouble */
        *stage = "fsync of the folder";
        return err;
    }
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    return err;
}

/* Writes are paused after a failed one (writes_disabled) until paused_until.
 * Called with mu held; true when writes are allowed now. */
static bool writes_allowed(struct kv_store *s) {
    if (s->st.writes_disabled && mono_ns() >= s->paused_until) s->st.writes_disabled = false;
    return !s->st.writes_disabled;
}

/* A failed write (err at `stage`): counted, writes paused for retry_ms, and
 * logged per burst — the first failure since the last successful write, then
 * at most once every KV_STORE_LOG_EVERY_S, so a full disk costs a line every
 * ten minutes, not one per block.  Called with mu held; releases it. */
static void write_failed(struct kv_store *s, int err, const char *stage) {
    const int64_t now = mono_ns();
    s->paused_until = now + (int64_t)s->p.retry_ms * 1000000;
    s->st.writes_disabled = s->p.retry_ms > 0;
    bool first = s->burst_failures++ == 0;
    bool log = first || now - s->burst_logged_at >= (int64_t)KV_STORE_LOG_EVERY_S * NS_PER_S;
    uint64_t since = s->burst_failures - s->burst_logged_failures;
    if (log) {
        s->burst_logged_at = now;
        s->burst_logged_failures = s->burst_failures;
    }
    pthread_mutex_unlock(&s->mu);
    if (!log) return;
    char eb[128];
    if (first && s->p.retry_ms)
        dj_log(DJ_LOG_WARN, "kv-dir: %s: %s failed: %s; writes to the KV store pause for %.0f s, then are tried again; reads go on",
               s->kdir, stage, errno_text(err, eb, sizeof eb), s->p.retry_ms / 1000.0);
    else if (first)
        dj_log(DJ_LOG_WARN, "kv-dir: %s: %s failed: %s; reads go on", s->kdir, stage, errno_text(err, eb, sizeof eb));
    else
        dj_log(DJ_LOG_WARN, "kv-dir: %s: %s failed: %s; %" PRIu64 " failed writes since the last such line", s->kdir,
               stage, errno_text(err, eb, sizeof eb), since);
}

static void write_item(struct kv_store *s, struct kv_queue_item *it) {
    pthread_mutex_lock(&s->mu);
    bool disabled = !writes_allowed(s);
    if (disabled) s->st.dropped++;
    pthread_mutex_unlock(&s->mu);
    if (disabled) return;

    char path[PATH_MAX];
    struct stat st;
    block_path(s, it->chain, path, sizeof path);
    /* Already there (written by us or another process, or kept from a previous
     * run): not rewritten.  If that file is bad, the get that finds it removes
     * it and a later put writes the block again. */
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == s->rec_bytes) {
        pthread_mutex_lock(&s->mu);
        s->st.present++;
        if (!idx_find(&s->idx, it->chain)) idx_put(&s->idx, it->chain, s->rec_bytes, mtime_ns(&st));
        pthread_mutex_unlock(&s->mu);
        return;
    }
    if (s->p.max_bytes) {
        if (s->rec_bytes > s->p.max_bytes) {
            pthread_mutex_lock(&s->mu);
            s->st.dropped++;
            pthread_mutex_unlock(&s->mu);
            return;
        }
        make_room(s, s->rec_bytes);
    }
    seal_checksum(it->rec, s->rec_bytes);
    const char *stage = "";
    int err = write_record(s, path, it->rec, s->rec_bytes, &stage);
    pthread_mutex_lock(&s->mu);
    if (err == 0) {
        s->st.written++;
        atomic_fetch_add(&total_written, 1);
        idx_put(&s->idx, it->chain, s->rec_bytes, now_ns());
        uint64_t burst = s->burst_failures;
        s->burst_failures = s->burst_logged_failures = 0;
        pthread_mutex_unlock(&s->mu);
        if (burst) dj_log(DJ_LOG_INFO, "kv-dir: %s: writes work again, after %" PRIu64 " failed", s->kdir, burst);
        return;
    }
    s->st.write_errors++;
    atomic_fetch_add(&total_write_failures, 1);
    if (strcmp(stage, "fsync of the folder") == 0) /* renamed, complete: on disk, maybe not durable */
        idx_put(&s->idx, it->chain, s->rec_bytes, now_ns());
    /* Our temporary file vanished before the rename: another process judged it
     * abandoned (it was over a minute old).  One lost write, not a disk fault. */
    if (err == ENOENT && strcmp(stage, "renaming into place") == 0) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    write_failed(s, err, stage); /* unlocks */
}

static void *writer_main(void *arg) {
    struct kv_store *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv_work, &s->mu);
        if (!s->head) break; /* stop, and the queue is written */
        struct kv_queue_item *it = s->head;
        s->head = it->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        s->writing = it;
        pthread_mutex_unlock(&s->mu);
        write_item(s, it);
        pthread_mutex_lock(&s->mu);
        s->writing = NULL;
        free(it);
        s->n_finished++;
        pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public calls ------------------------------------------------------------ */

struct kv_store_params kv_store_default_params(void) {
    struct kv_store_params p;
    memset(&p, 0, sizeof p);
    p.queue_max = 32;
    p.scan_max_bytes = KV_STORE_SCAN_MAX_BYTES;
    p.scan_max_ms = KV_STORE_SCAN_MAX_MS;
    p.retry_ms = KV_STORE_RETRY_MS;
    return p;
}

static void store_free(struct kv_store *s) {
    free(s->unremovable);
    free(s->rbuf);
    free(s->idx.e);
    free(s->kdir);
    free(s->root);
    free(s);
}

enum dj_status kv_store_open(const struct kv_store_params *p, struct kv_store **out) {
    if (!p || !out) return dj_fail(DJ_ERR_INVALID, "kv store: NULL params");
    if (!p->dir || !p->dir[0]) return dj_fail(DJ_ERR_INVALID, "kv store: no folder given");
    if (p->block_size == 0) return dj_fail(DJ_ERR_INVALID, "kv store %s: block size 0", p->dir);
    if (p->block_bytes == 0) return dj_fail(DJ_ERR_INVALID, "kv store %s: block_bytes 0", p->dir);
    size_t rec;
    if (!kv_store_record_bytes(p, &rec))
        return dj_fail(DJ_ERR_INVALID, "kv store %s: a record of block_size %u and %zu payload bytes overflows", p->dir,
                       p->block_size, p->block_bytes);
    /* the longest path built: kdir + "/.tmp-" host(32) pid(20) nonce(8) counter(20) + dashes */
    if (strlen(p->dir) + 1 + 32 + 100 >= PATH_MAX)
        return dj_fail(DJ_ERR_INVALID, "kv store: folder name of %zu bytes is too long", strlen(p->dir));

    struct kv_store *s = calloc(1, sizeof *s);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "kv store %s: out of memory", p->dir);
    s->p = *p;
    s->rec_bytes = rec;
    s->root = strdup(p->dir);
    s->kdir = malloc(strlen(p->dir) + 1 + 32 + 1);
    s->rbuf = malloc(rec);
    if (!s->root || !s->kdir || !s->rbuf) {
        store_free(s);
        return dj_fail(DJ_ERR_NOMEM, "kv store %s: out of memory (a record is %zu bytes)", p->dir, rec);
    }
    s->p.dir = s->root;
    char *k = s->kdir + sprintf(s->kdir, "%s/", p->dir);
    for (int i = 0; i < 16; i++) k += sprintf(k, "%02x", p->key[i]);

    int err = mkdir_p(s->kdir);
    if (err) {
        char eb[128];
        enum dj_status st = dj_fail(DJ_ERR_IO, "kv store: cannot create the folder %s: %s", s->kdir,
                                    errno_text(err, eb, sizeof eb));
        store_free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->read_mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    rescan(s);
    scan_at_open(s);
    if ((err = pthread_create(&s->writer, NULL, writer_main, s)) != 0) {
        char eb[128];
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->read_mu);
        pthread_cond_destroy(&s->cv_work);
        pthread_cond_destroy(&s->cv_done);
        enum dj_status st = dj_fail(DJ_ERR_NOMEM, "kv store %s: cannot start the writer thread: %s", s->kdir,
                                    errno_text(err, eb, sizeof eb));
        store_free(s);
        return st;
    }
    *out = s;
    return DJ_OK;
}

void kv_store_close(struct kv_store *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->writer, NULL); /* it writes the queue out first */
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->read_mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    store_free(s);
}

bool kv_store_put(struct kv_store *s, uint64_t chain, uint64_t parent_chain, const dj_token *tokens, const void *data) {
    if (!s) return false;
    pthread_mutex_lock(&s->mu);
    s->st.put++;
    bool take = tokens && data && writes_allowed(s) && s->n_queued < s->p.queue_max;
    if (!take) s->st.dropped++;
    pthread_mutex_unlock(&s->mu);
    if (!take) return false;

    struct kv_queue_item *it = malloc(sizeof *it + s->rec_bytes);
    if (it) {
        it->next = NULL;
        it->chain = chain;
        it->parent_chain = parent_chain;
        encode_body(&s->p, chain, parent_chain, tokens, data, it->rec);
    }
    pthread_mutex_lock(&s->mu);
    /* checked again: another thread may have filled the queue meanwhile */
    if (!it || s->st.writes_disabled || s->n_queued >= s->p.queue_max) {
        s->st.dropped++;
        pthread_mutex_unlock(&s->mu);
        free(it);
        return false;
    }
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    s->n_queued++;
    s->n_enqueued++;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void kv_store_flush(struct kv_store *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->n_enqueued;
    while (s->n_finished < target) pthread_cond_wait(&s->cv_done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Tokens of a queued record (little-endian in it) against the caller's. */
static bool queued_matches(const struct kv_store *s, const struct kv_queue_item *it, uint64_t chain,
                           uint64_t parent_chain, const dj_token *tokens) {
    if (it->chain != chain || it->parent_chain != parent_chain) return false;
    const uint8_t *t = it->rec + KV_STORE_HEADER_BYTES;
    for (uint32_t i = 0; i < s->p.block_size; i++)
        if (get_u32(t + 4 * (size_t)i) != (uint32_t)tokens[i]) return false;
    return true;
}

bool kv_store_get(struct kv_store *s, uint64_t chain, uint64_t parent_chain, const dj_token *tokens, void *data) {
    if (!s || !tokens || !data) return false;

    /* A block still waiting for the writer, or being written, is served from
     * memory (the writer only fills the checksum, past the bytes read here). */
    pthread_mutex_lock(&s->mu);
    for (const struct kv_queue_item *it = s->writing ? s->writing : s->head; it;
         it = it == s->writing ? s->head : it->next) {
        if (!queued_matches(s, it, chain, parent_chain, tokens)) continue;
        memcpy(data, it->rec + KV_STORE_HEADER_BYTES + 4 * (size_t)s->p.block_size, s->p.block_bytes);
        s->st.hit++;
        pthread_mutex_unlock(&s->mu);
        return true;
    }
    pthread_mutex_unlock(&s->mu);

    char path[PATH_MAX];
    block_path(s, chain, path, sizeof path);
    pthread_mutex_lock(&s->read_mu);
    bool hit = false, corrupt = false, gone = false;
    /* O_NOFOLLOW: a symlink is not a block of ours; O_NONBLOCK: a FIFO named
     * like a block must not hang us (fstat rejects it next). */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    memset(&st, 0, sizeof st);
    if (fd < 0) {
        gone = errno == ENOENT;
    } else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               (uint64_t)st.st_size <= 2 * (uint64_t)s->rec_bytes + KV_STORE_VERIFY_SLACK) {
        size_t size = (size_t)st.st_size;
        uint8_t *buf = size <= s->rec_bytes ? s->rbuf : malloc(size);
        ssize_t got = buf ? read_full(fd, buf, size) : -1;
        if (got >= 0) { /* an I/O error is a miss, not a verdict on the file */
            struct kv_store_record r;
            enum dj_status ps = kv_store_parse_record(buf, (size_t)got, &r);
            if (ps == DJ_OK && kv_store_record_matches(&r, &s->p, chain, parent_chain, tokens)) {
                memcpy(data, r.payload, s->p.block_bytes);
                futimens(fd, NULL); /* mtime = now: its LRU age, seen by every process */
                hit = true;
            } else if (ps == DJ_ERR_FORMAT) {
                corrupt = true;
                drop_corrupt(s, path, chain, &st, dj_last_error());
            }
        }
        if (buf != s->rbuf) free(buf);
    }
    if (fd >= 0) close(fd);
    pthread_mutex_unlock(&s->read_mu);

    pthread_mutex_lock(&s->mu);
    if (hit) {
        s->st.hit++;
        if (!idx_find(&s->idx, chain)) s->idx_stale = true; /* another process writes here too */
        idx_put(&s->idx, chain, (uint64_t)st.st_size, now_ns());
    } else {
        s->st.miss++;
        if (corrupt || gone) idx_del(&s->idx, chain);
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

void kv_store_get_stats(const struct kv_store *s, struct kv_store_stats *out) {
    struct kv_store *m = (struct kv_store *)s; /* the lock is not part of the value */
    pthread_mutex_lock(&m->mu);
    *out = m->st;
    out->bytes_on_disk = m->idx.bytes;
    pthread_mutex_unlock(&m->mu);
}

const char *kv_store_key_dir(const struct kv_store *s) { return s->kdir; }

/* ---- kv_store_file_id ---------------------------------------------------------- */

static int64_t ctime_ns(const struct stat *st) { return (int64_t)st->st_ctim.tv_sec * NS_PER_S + st->st_ctim.tv_nsec; }

/* The cache's first line for a file: everything that changes when its content can have. */
static int file_id_line(const char *real, const struct stat *st, char *out, size_t n) {
    return snprintf(out, n, "deja-file-id 1 dev=%" PRIu64 " ino=%" PRIu64 " size=%" PRId64 " mtime=%" PRId64 ".%09ld ctime=%" PRId64 ".%09ld path=%s",
                    (uint64_t)st->st_dev, (uint64_t)st->st_ino, (int64_t)st->st_size, (int64_t)st->st_mtim.tv_sec,
                    (long)st->st_mtim.tv_nsec, (int64_t)st->st_ctim.tv_sec, (long)st->st_ctim.tv_nsec, real);
}

static bool same_version(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           mtime_ns(a) == mtime_ns(b) && ctime_ns(a) == ctime_ns(b);
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The cached id for `line`, if the cache file holds exactly line + "\nxxh3-128=<hex>\n". */
static bool file_id_cached(const char *cpath, const char *line, size_t line_len, uint8_t out[16]) {
    size_t want = line_len + 1 + 9 + 32 + 1;
    int fd = open(cpath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    char *buf = malloc(want + 1);
    ssize_t got = buf ? read_full(fd, (uint8_t *)buf, want + 1) : -1;
    close(fd);
    bool ok = got == (ssize_t)want && memcmp(buf, line, line_len) == 0 &&
              memcmp(buf + line_len, "\nxxh3-128=", 10) == 0 && buf[want - 1] == '\n';
    uint8_t id[16];
    for (int i = 0; ok && i < 16; i++) {
        int hi = hexval(buf[line_len + 10 + 2 * i]), lo = hexval(buf[line_len + 11 + 2 * i]);
        if (hi < 0 || lo < 0) ok = false;
        else id[i] = (uint8_t)(hi << 4 | lo);
    }
    free(buf);
    if (ok) memcpy(out, id, 16);
    return ok;
}

static void file_id_store(const char *cache_dir, const char *cpath, const char *line, const uint8_t id[16]) {
    char tmp[PATH_MAX];
    tmp_path(cache_dir, tmp, sizeof tmp);
    FILE *f = fopen(tmp, "wbx");
    if (!f) goto fail;
    fprintf(f, "%s\nxxh3-128=", line);
    for (int i = 0; i < 16; i++) fprintf(f, "%02x", id[i]);
    fputc('\n', f);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, cpath) == 0) return;
    unlink(tmp);
fail:
    dj_log(DJ_LOG_DEBUG, "kv store: cannot write the file id cache %s (the next call hashes again)", cpath);
}

enum dj_status kv_store_file_id(const char *path, const char *cache_dir, uint8_t out[16]) {
    char eb[128];
    if (!path || !out) return dj_fail(DJ_ERR_INVALID, "kv_store_file_id: NULL path");
    char *real = realpath(path, NULL);
    if (!real) return dj_fail(DJ_ERR_IO, "%s: %s", path, errno_text(errno, eb, sizeof eb));
    enum dj_status ret = DJ_OK;
    char *line = NULL, *cpath = NULL;
    XXH3_state_t *xs = NULL;
    uint8_t *chunk = NULL;
    int fd = open(real, O_RDONLY | O_CLOEXEC);
    struct stat st0, st1;
    if (fd < 0 || fstat(fd, &st0) != 0) {
        ret = dj_fail(DJ_ERR_IO, "%s: %s", path, errno_text(errno, eb, sizeof eb));
        goto out;
    }
    if (!S_ISREG(st0.st_mode)) {
        ret = dj_fail(DJ_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    int len = file_id_line(real, &st0, NULL, 0);
    line = malloc((size_t)len + 1);
    if (!line) {
        ret = dj_fail(DJ_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    file_id_line(real, &st0, line, (size_t)len + 1);
    if (cache_dir) {
        char name[8 + 32 + 1];
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(line, (size_t)len));
        char *q = name + sprintf(name, "fileid-");
        for (int i = 0; i < 16; i++) q += sprintf(q, "%02x", c.digest[i]);
        cpath = malloc(strlen(cache_dir) + 1 + sizeof name);
        if (!cpath) {
            ret = dj_fail(DJ_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        sprintf(cpath, "%s/%s", cache_dir, name);
        if (file_id_cached(cpath, line, (size_t)len, out)) goto out;
    }
    enum { CHUNK = 4 << 20 };
    xs = XXH3_createState();
    chunk = malloc(CHUNK);
    if (!xs || !chunk) {
        ret = dj_fail(DJ_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    XXH3_128bits_reset(xs);
    for (off_t off = 0;;) {
        ssize_t r = pread(fd, chunk, CHUNK, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            ret = dj_fail(DJ_ERR_IO, "%s: reading at byte %lld: %s", path, (long long)off, errno_text(errno, eb, sizeof eb));
            goto out;
        }
        if (r == 0) break;
        XXH3_128bits_update(xs, chunk, (size_t)r);
        off += r;
    }
    if (fstat(fd, &st1) != 0 || !same_version(&st0, &st1)) {
        ret = dj_fail(DJ_ERR_IO, "%s: the file changed while it was being hashed", path);
        goto out;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(xs));
    memcpy(out, c.digest, 16);
    if (cache_dir) {
        if (mkdir_p(cache_dir) == 0) file_id_store(cache_dir, cpath, line, out);
        else dj_log(DJ_LOG_DEBUG, "kv store: cannot create the file id cache folder %s", cache_dir);
    }
out:
    if (fd >= 0) close(fd);
    XXH3_freeState(xs);
    free(chunk);
    free(cpath);
    free(line);
    free(real);
    return ret;
}
