/*
 * test_kv_persist.c — the on-disk KV block store (src/kv/persist.h):
 *  - round trip: put, get from the queue and from disk, reopen, the record's
 *    bytes as documented (magic, version, header size, key, chain, checksum);
 *  - a mismatch is a miss and leaves the file alone: another key (in another
 *    folder, or differing only in its last byte), chain, parent, tokens,
 *    geometry, format version;
 *  - corruption: a record cut at every length and every bit of every byte
 *    flipped → never a hit, corrupt counted, the file removed, one log line
 *    per record;
 *  - the start-up scan: a record damaged at the right size is removed by
 *    kv_store_open (counted, logged, in /metrics), so a put of its block
 *    writes it again; bounded by bytes (the oldest left to its first load),
 *    off with a zero bound;
 *  - foreign things in the folders (random names and contents, wrong magic, a
 *    folder, a symlink and a FIFO named like blocks) → no crash, never read as
 *    blocks, never removed (except a block-named file that is not a record:
 *    that one is corrupt);
 *  - temporary files: a complete record left in a temp file is never read;
 *    open removes those of dead writers and old ones, keeps young ones of live
 *    writers;
 *  - budget: bytes stay under max_bytes, the least recently used block goes
 *    first, a hit from another store (another process's view) protects a
 *    block, an open reader still reads an evicted file;
 *  - two processes reading and writing one folder (with evictions) for two
 *    seconds: every hit bit-exact, nothing corrupt;
 *  - kill -9 of a writing child at random moments, 50 times: a fresh open
 *    finds only complete records and no leftover temp files;
 *  - a write error (EFBIG from RLIMIT_FSIZE in a child): one warning, writes
 *    paused, later puts dropped, reads still served, no temp file left;
 *  - failed writes with no pause (retry_ms 0): each counted as a failure and
 *    not as a write (stats, process totals, /metrics), one warning per burst,
 *    an info line when writes work again, no partial file;
 *  - kv_store_file_id: the XXH3-128 of the content, cached (a doctored cache
 *    entry is returned: the file was not read again), a changed file (even
 *    with its old size and mtime) gets a new id, errors name the path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kv/hash.h"
#include "kv/persist.h"
#include "server/metrics.h"
#include "test.h"

enum { NL = 2, W = 3, BS = 4, KV_TYPE = 1, BB = 2 * NL * BS * W * 4 /* K and V, f32 */ };
enum { REC = KV_STORE_HEADER_BYTES + 4 * BS + BB + KV_STORE_CHECKSUM_BYTES }; /* 304 bytes */

static char root[256];

/* ---- blocks with contents derived from an id ---------------------------- */

struct blk {
    uint64_t chain, parent;
    dj_token tok[BS];
    uint8_t data[BB];
};

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Block id: its own one-block sequence, chained from the root like kv/hash.h does. */
static void make_blk(uint64_t id, struct blk *b) {
    uint64_t x = id * 1000003u + 17;
    for (int i = 0; i < BS; i++) b->tok[i] = (dj_token)(splitmix(&x) % 200000) - 1000;
    for (int i = 0; i < BB; i++) b->data[i] = (uint8_t)splitmix(&x);
    b->parent = KV_CHAIN_ROOT;
    b->chain = kv_hash_chain(b->parent, b->tok, BS);
}

static struct kv_store_params params(const char *dir, uint8_t key_byte) {
    struct kv_store_params p = kv_store_default_params();
    p.dir = dir;
    for (int i = 0; i < 32; i++) p.key[i] = (uint8_t)(key_byte + i);
    p.n_layer = NL;
    p.n_embd_kv = W;
    p.block_size = BS;
    p.kv_type = KV_TYPE;
    p.block_bytes = BB;
    return p;
}

static struct kv_store *open_store(const struct kv_store_params *p) {
    struct kv_store *s = NULL;
    enum dj_status st = kv_store_open(p, &s);
    CHECKF(st == DJ_OK, "kv_store_open: %s", dj_last_error());
    return s;
}

static bool get_blk(struct kv_store *s, const struct blk *b) {
    uint8_t out[BB];
    memset(out, 0xee, sizeof out);
    if (!kv_store_get(s, b->chain, b->parent, b->tok, out)) return false;
    if (memcmp(out, b->data, BB) != 0) {
        fprintf(stderr, "FAIL: a hit with wrong data (chain %016" PRIx64 ")\n", b->chain);
        test_failed++;
        return false;
    }
    return true;
}

static struct kv_store_stats stats(struct kv_store *s) {
    struct kv_store_stats st;
    kv_store_get_stats(s, &st);
    return st;
}

/* ---- files ---------------------------------------------------------------- */

static void blk_path(struct kv_store *s, uint64_t chain, char *out, size_t n) {
    snprintf(out, n, "%s/%016" PRIx64 ".kvb", kv_store_key_dir(s), chain);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, buf, n) == (ssize_t)n);
    close(fd);
}

/* Files in dir whose name starts with prefix (regular ones), and their bytes. */
static size_t count_files(const char *dir, const char *prefix, uint64_t *bytes) {
    DIR *d = opendir(dir);
    size_t n = 0;
    if (bytes) *bytes = 0;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 || (de->d_name[0] == '.' && !prefix[0])) continue;
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        n++;
        if (bytes) *bytes += (uint64_t)st.st_size;
    }
    closedir(d);
    return n;
}

/* Block files (*.kvb) of a folder and their bytes. */
static size_t count_blocks(const char *dir, uint64_t *bytes) {
    DIR *d = opendir(dir);
    size_t n = 0;
    if (bytes) *bytes = 0;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l != 20 || strcmp(de->d_name + 16, ".kvb") != 0) continue;
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        n++;
        if (bytes) *bytes += (uint64_t)st.st_size;
    }
    closedir(d);
    return n;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void subdir(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", root, name);
    rm_rf(out);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The host part of the store's temp names (persist.c: alphanumerics, others → '_'). */
static void host_part(char *out, size_t n) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) strcpy(h, "localhost");
    size_t j = 0;
    for (size_t i = 0; h[i] && j < 32 && j + 1 < n; i++) {
        char c = h[i];
        bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        out[j++] = ok ? c : '_';
    }
    out[j] = '\0';
}

/* ---- stderr, /metrics ---------------------------------------------------------- */

/* stderr into a file between capture_begin and capture_end, which returns what
 * was written (malloc'd) and copies to the real stderr the lines that are not
 * the store's ("kv-dir:"), so that a CHECK's message is not lost. */
struct capture {
    int saved;
    char path[600];
};

static void capture_begin(struct capture *c, const char *name) {
    fflush(stderr);
    snprintf(c->path, sizeof c->path, "%s/%s.stderr", root, name);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    c->saved = dup(2);
    CHECK(fd >= 0 && c->saved >= 0);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

static char *capture_end(struct capture *c) {
    fflush(stderr);
    if (c->saved >= 0) {
        dup2(c->saved, 2);
        close(c->saved);
    }
    size_t n = 0;
    char *t = test_read_file(c->path, &n);
    for (char *l = t; l && *l;) {
        char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l + 1) : strlen(l);
        if (!memmem(l, len, "kv-dir:", 7)) fwrite(l, 1, len, stderr);
        l += len;
    }
    return t ? t : strdup("");
}

/* Lines of text that contain needle. */
static size_t lines_with(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        if (memmem(l, len, needle, strlen(needle))) n++;
        l += len + (e != NULL);
    }
    return n;
}

/* The value of a counter in GET /metrics' text, with its HELP line; -1 when absent. */
static double metric(const char *name) {
    struct dj_metrics m;
    metrics_init(&m);
    char *text = metrics_render(&m);
    metrics_destroy(&m);
    char help[128], line[128];
    snprintf(help, sizeof help, "# HELP %s ", name);
    snprintf(line, sizeof line, "\n%s ", name);
    const char *at = text && strstr(text, help) ? strstr(text, line) : NULL;
    double v = at ? strtod(at + strlen(line), NULL) : -1;
    free(text);
    return v;
}

/* ---- the tests -------------------------------------------------------------- */

static void test_params(void) {
    char dir[512];
    subdir("params", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = NULL;
    p.dir = NULL;
    CHECK(kv_store_open(&p, &s) == DJ_ERR_INVALID && s == NULL && strstr(dj_last_error(), "no folder"));
    p = params(dir, 1);
    p.block_size = 0;
    CHECK(kv_store_open(&p, &s) == DJ_ERR_INVALID && s == NULL && strstr(dj_last_error(), "block size 0"));
    p = params(dir, 1);
    p.block_bytes = SIZE_MAX - 10;
    CHECK(kv_store_open(&p, &s) == DJ_ERR_INVALID && s == NULL && strstr(dj_last_error(), "overflows"));
    /* a folder below a regular file cannot be created */
    char file[600], below[700];
    snprintf(file, sizeof file, "%s/plainfile", root);
    write_bytes(file, "x", 1);
    snprintf(below, sizeof below, "%s/sub", file);
    p = params(below, 1);
    CHECK(kv_store_open(&p, &s) == DJ_ERR_IO && s == NULL && strstr(dj_last_error(), below));
    kv_store_close(NULL);
}

static void test_round_trip(void) {
    char dir[512];
    subdir("rt/a/b", dir, sizeof dir); /* two missing levels: created */
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    struct blk b[10];
    int hits = 0;
    for (int i = 0; i < 10; i++) {
        make_blk((uint64_t)i, &b[i]);
        CHECK(kv_store_put(s, b[i].chain, b[i].parent, b[i].tok, b[i].data));
        hits += get_blk(s, &b[i]); /* from the queue or the disk */
    }
    CHECK(hits == 10);
    kv_store_flush(s);
    struct kv_store_stats st = stats(s);
    CHECK(st.put == 10 && st.written == 10 && st.dropped == 0 && st.write_errors == 0);
    CHECK(st.bytes_on_disk == 10 * REC && !st.writes_disabled);
    /* the same block again: already there, not rewritten */
    CHECK(kv_store_put(s, b[0].chain, b[0].parent, b[0].tok, b[0].data));
    kv_store_flush(s);
    st = stats(s);
    CHECK(st.written == 10 && st.present == 1);
    CHECK(st.put == st.written + st.present + st.dropped + st.write_errors);

    /* the record's bytes, as documented in persist.h */
    char path[1024];
    blk_path(s, b[3].chain, path, sizeof path);
    size_t n = 0;
    uint8_t *f = (uint8_t *)test_read_file(path, &n);
    CHECK(f && n == REC);
    if (f && n == REC) {
        uint8_t enc[REC];
        CHECK(kv_store_encode_record(&p, b[3].chain, b[3].parent, b[3].tok, b[3].data, enc, REC) == DJ_OK);
        CHECK(memcmp(enc, f, REC) == 0);
        CHECK(memcmp(f, "DJKVBLK\0", 8) == 0 && f[8] == 1 && f[9] == 0 && f[12] == 88 && f[13] == 0);
        CHECK(memcmp(f + 16, p.key, 32) == 0);
        uint64_t c = 0, x = 0;
        for (int i = 7; i >= 0; i--) c = c << 8 | f[48 + i];
        for (int i = 7; i >= 0; i--) x = x << 8 | f[REC - 8 + (size_t)i];
        CHECK(c == b[3].chain && x == XXH3_64bits(f, REC - 8));
        CHECK(memcmp(f + 88 + 4 * BS, b[3].data, BB) == 0);
        struct kv_store_record r;
        CHECK(kv_store_parse_record(f, n, &r) == DJ_OK && kv_store_record_matches(&r, &p, b[3].chain, b[3].parent, b[3].tok));
        CHECK(kv_store_encode_record(&p, 0, 0, b[3].tok, b[3].data, enc, REC - 1) == DJ_ERR_INVALID);
    }
    free(f);
    kv_store_close(s);

    /* a new process's view: the index rebuilt from the folder */
    s = open_store(&p);
    if (!s) return;
    st = stats(s);
    CHECK(st.bytes_on_disk == 10 * REC && st.written == 0);
    /* a block another store (process) writes after this one's scan: still found */
    struct kv_store *o = open_store(&p);
    struct blk late;
    make_blk(10, &late);
    if (o) CHECK(kv_store_put(o, late.chain, late.parent, late.tok, late.data));
    kv_store_close(o);
    CHECK(get_blk(s, &late) && stats(s).bytes_on_disk == 11 * REC);
    hits = 0;
    for (int i = 0; i < 10; i++) hits += get_blk(s, &b[i]);
    CHECK(hits == 10);
    st = stats(s);
    CHECK(st.hit == 11 && st.miss == 0 && st.corrupt == 0);
    kv_store_close(s);
}

static void test_mismatch(void) {
    char dir[512], path[1024];
    subdir("mismatch", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    struct blk b, c;
    make_blk(1, &b);
    make_blk(2, &c);
    CHECK(kv_store_put(s, b.chain, b.parent, b.tok, b.data));
    kv_store_flush(s);
    blk_path(s, b.chain, path, sizeof path);
    uint8_t out[BB];

    CHECK(!get_blk(s, &c)); /* another chain: no file */
    CHECK(!kv_store_get(s, b.chain, b.parent + 1, b.tok, out)); /* another parent */
    dj_token t2[BS];
    memcpy(t2, b.tok, sizeof t2);
    t2[BS - 1] ^= 1;
    CHECK(!kv_store_get(s, b.chain, b.parent, t2, out)); /* other tokens, same chain: a collision */
    CHECK(exists(path));

    /* another key: another folder */
    struct kv_store_params q = params(dir, 2);
    struct kv_store *o = open_store(&q);
    CHECK(o && strcmp(kv_store_key_dir(o), kv_store_key_dir(s)) != 0);
    if (o) CHECK(!get_blk(o, &b));
    kv_store_close(o);
    /* a key differing only past its first 16 bytes: the same folder, the header says no */
    q = params(dir, 1);
    q.key[31] ^= 0x80;
    o = open_store(&q);
    CHECK(o && strcmp(kv_store_key_dir(o), kv_store_key_dir(s)) == 0);
    if (o) CHECK(!get_blk(o, &b) && stats(o).corrupt == 0);
    kv_store_close(o);
    /* geometry: kv_type (same size) and n_layer (another record size) */
    q = params(dir, 1);
    q.kv_type = KV_TYPE + 1;
    o = open_store(&q);
    if (o) CHECK(!get_blk(o, &b) && stats(o).corrupt == 0);
    kv_store_close(o);
    q = params(dir, 1);
    q.n_layer = NL + 1;
    q.block_bytes = BB / NL * (NL + 1);
    o = open_store(&q);
    if (o) {
        uint8_t big[BB / NL * (NL + 1)];
        CHECK(!kv_store_get(o, b.chain, b.parent, b.tok, big) && stats(o).corrupt == 0);
    }
    kv_store_close(o);
    q = params(dir, 1);
    q.block_size = BS - 1; /* tokens are compared over the store's block size */
    q.block_bytes = BB;
    o = open_store(&q);
    if (o) CHECK(!kv_store_get(o, b.chain, b.parent, b.tok, out) && stats(o).corrupt == 0);
    kv_store_close(o);
    CHECK(exists(path)); /* a mismatch never removes the file */
    CHECK(get_blk(s, &b));
    struct kv_store_stats st = stats(s);
    CHECK(st.corrupt == 0 && st.hit == 1 && st.miss == 3);

    /* a record of another format version with a valid checksum: not ours to judge, left alone */
    uint8_t rec[REC];
    CHECK(kv_store_encode_record(&p, b.chain, b.parent, b.tok, b.data, rec, REC) == DJ_OK);
    rec[8] = 2;
    uint64_t h = XXH3_64bits(rec, REC - 8);
    for (int i = 0; i < 8; i++) rec[REC - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    struct kv_store_record r;
    CHECK(kv_store_parse_record(rec, REC, &r) == DJ_ERR_UNSUPPORTED && strstr(dj_last_error(), "version 2"));
    write_bytes(path, rec, REC);
    CHECK(!get_blk(s, &b) && stats(s).corrupt == 0 && exists(path));
    kv_store_close(s);
}

/* The record of block b, written by hand (as a crashed or broken writer would). */
static void corrupt_cases(void) {
    char dir[512], path[1024];
    subdir("corrupt", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    struct blk b;
    make_blk(7, &b);
    uint8_t good[REC], bad[REC + 1];
    CHECK(kv_store_encode_record(&p, b.chain, b.parent, b.tok, b.data, good, REC) == DJ_OK);
    blk_path(s, b.chain, path, sizeof path);
    uint64_t corrupt = 0, wrong = 0, kept = 0;
    struct capture cap;
    capture_begin(&cap, "corrupt");

    /* every truncation, and one byte too many */
    for (size_t len = 0; len <= REC + 1; len++) {
        if (len == REC) continue;
        memcpy(bad, good, REC);
        bad[REC] = 0;
        write_bytes(path, bad, len);
        wrong += get_blk(s, &b);
        kept += exists(path);
        corrupt++;
    }
    /* every bit of every byte */
    for (size_t off = 0; off < REC; off++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, good, REC);
            bad[off] ^= (uint8_t)(1u << bit);
            write_bytes(path, bad, REC);
            wrong += get_blk(s, &b);
            kept += exists(path);
            corrupt++;
        }
    char *log = capture_end(&cap);
    CHECKF(wrong == 0 && kept == 0, "%" PRIu64 " wrong hits, %" PRIu64 " corrupt files kept", wrong, kept);
    /* one line per corrupt record: "deja: warning: kv-dir: <path>: <what> — removed" */
    CHECKF(lines_with(log, "kv-dir: ") == corrupt && lines_with(log, " — removed") == corrupt &&
               lines_with(log, path) == corrupt && lines_with(log, "checksum") > 0 && lines_with(log, "shorter") > 0,
           "%zu log lines for %" PRIu64 " corrupt records", lines_with(log, "kv-dir: "), corrupt);
    free(log);
    struct kv_store_stats st = stats(s);
    CHECKF(st.corrupt == corrupt && st.hit == 0 && st.miss == corrupt, "corrupt %" PRIu64 " of %" PRIu64, st.corrupt,
           corrupt);
    printf("corrupt records: %" PRIu64 " (cut at every length, every bit flipped): all misses, all removed\n", corrupt);

    /* valid checksums over bad headers: still corrupt */
    struct kv_store_record r;
    memcpy(bad, good, REC);
    bad[12] = 96; /* header size */
    uint64_t h = XXH3_64bits(bad, REC - 8);
    for (int i = 0; i < 8; i++) bad[REC - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    CHECK(kv_store_parse_record(bad, REC, &r) == DJ_ERR_FORMAT && strstr(dj_last_error(), "header of 96"));
    memcpy(bad, good, REC);
    bad[72] = BS + 1; /* block_size: the lengths no longer add up */
    h = XXH3_64bits(bad, REC - 8);
    for (int i = 0; i < 8; i++) bad[REC - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    CHECK(kv_store_parse_record(bad, REC, &r) == DJ_ERR_FORMAT && strstr(dj_last_error(), "says"));
    memcpy(bad, good, REC);
    bad[87] = 0xff; /* payload bytes near 2^64: overflow-checked */
    h = XXH3_64bits(bad, REC - 8);
    for (int i = 0; i < 8; i++) bad[REC - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    CHECK(kv_store_parse_record(bad, REC, &r) == DJ_ERR_FORMAT);
    write_bytes(path, bad, REC);
    capture_begin(&cap, "corrupt2");
    CHECK(!get_blk(s, &b) && !exists(path));
    free(capture_end(&cap));

    /* and the good record still loads */
    write_bytes(path, good, REC);
    CHECK(get_blk(s, &b));
    kv_store_close(s);
}

/* Flips one bit of the byte at off, the file keeping its size. */
static void flip_at(const char *path, off_t off) {
    int fd = open(path, O_RDWR);
    uint8_t c = 0;
    CHECK(fd >= 0 && pread(fd, &c, 1, off) == 1);
    c ^= 0x04;
    CHECK(fd >= 0 && pwrite(fd, &c, 1, off) == 1);
    if (fd >= 0) close(fd);
}

static void set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

/* The start-up scan (persist.h).  A record damaged at the right size — one
 * payload bit — is found by kv_store_open before any lookup: removed, counted
 * (stats, the process totals, /metrics) and logged in one line; and a put of
 * its block writes it afresh (left there, the file would count as "present"
 * and stay until a lookup reached it).  Bounded by bytes: the most recently
 * used records first, the oldest left to its first load.  A zero bound: no
 * scan. */
static void test_scan(void) {
    char dir[512], path[3][1024];
    subdir("scan", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    struct blk b[3];
    for (int i = 0; i < 3; i++) {
        make_blk(600 + (uint64_t)i, &b[i]);
        CHECK(kv_store_put(s, b[i].chain, b[i].parent, b[i].tok, b[i].data));
        blk_path(s, b[i].chain, path[i], sizeof path[i]);
    }
    kv_store_close(s);
    const off_t payload = KV_STORE_HEADER_BYTES + 4 * BS;
    flip_at(path[1], payload + 5);
    for (int i = 0; i < 3; i++) set_mtime(path[i], 1000000000 + 100 * i); /* b[0] the least recently used */

    struct kv_store_totals t0, t1;
    kv_store_get_totals(&t0);
    const double m0 = metric("deja_persist_corrupt_total");
    struct capture cap;
    capture_begin(&cap, "scan");
    s = open_store(&p);
    char *log = capture_end(&cap);
    kv_store_get_totals(&t1);
    if (!s) {
        free(log);
        return;
    }
    struct kv_store_stats st = stats(s);
    CHECKF(!exists(path[1]) && exists(path[0]) && exists(path[2]), "the damaged record is still there");
    CHECKF(st.corrupt == 1 && t1.corrupt == t0.corrupt + 1, "corrupt %" PRIu64 ", totals %" PRIu64 " -> %" PRIu64,
           st.corrupt, t0.corrupt, t1.corrupt);
    CHECK(st.scan_checked == 3 && st.scan_unchecked == 0 && st.scan_bytes == 3 * REC && st.hit + st.miss == 0);
    CHECKF(lines_with(log, "kv-dir: ") == 1 && lines_with(log, "deja: warning: kv-dir: ") == 1 &&
               lines_with(log, path[1]) == 1 && lines_with(log, "checksum") == 1 &&
               lines_with(log, " — removed") == 1,
           "stderr: %s", log);
    printf("start-up scan: %s", log);
    free(log);
    CHECKF(metric("deja_persist_corrupt_total") == m0 + 1 && m0 == (double)t0.corrupt, "/metrics: %g -> %g", m0,
           metric("deja_persist_corrupt_total"));
    CHECK(get_blk(s, &b[0]) && get_blk(s, &b[2]) && !get_blk(s, &b[1]) && stats(s).corrupt == 1);
    CHECK(kv_store_put(s, b[1].chain, b[1].parent, b[1].tok, b[1].data));
    kv_store_flush(s);
    st = stats(s);
    CHECK(st.written == 1 && st.present == 0 && get_blk(s, &b[1]));
    kv_store_close(s);

    /* room for two records: b[1] (just written) and b[2] are verified; b[0], the
     * least recently used and damaged, waits for its first load */
    flip_at(path[0], payload + 1);
    set_mtime(path[0], 1000000000); /* (after the write, which sets it) */
    p.scan_max_bytes = 2 * REC + REC / 2;
    capture_begin(&cap, "scan2");
    s = open_store(&p);
    log = capture_end(&cap);
    if (!s) {
        free(log);
        return;
    }
    st = stats(s);
    CHECK(st.scan_checked == 2 && st.scan_unchecked == 1 && st.scan_bytes == 2 * REC && st.corrupt == 0 &&
          exists(path[0]));
    CHECKF(lines_with(log, "deja: info: kv-dir: ") == 1 && lines_with(log, "verified 2 records") == 1 &&
               lines_with(log, "1 left") == 1,
           "stderr: %s", log);
    free(log);
    capture_begin(&cap, "scan3");
    CHECK(!get_blk(s, &b[0]) && stats(s).corrupt == 1 && !exists(path[0])); /* judged at first touch, as before */
    log = capture_end(&cap);
    CHECK(lines_with(log, path[0]) == 1);
    free(log);
    kv_store_close(s);

    /* a zero bound: no scan */
    flip_at(path[2], payload + 2);
    p.scan_max_bytes = 1 << 20;
    p.scan_max_ms = 0;
    s = open_store(&p);
    if (!s) return;
    st = stats(s);
    CHECK(st.scan_checked == 0 && st.scan_unchecked == 2 && st.corrupt == 0 && exists(path[2]));
    kv_store_close(s);
}

static void test_foreign(void) {
    char dir[512], kdir[1024], path[1200], other[1024];
    subdir("foreign", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    snprintf(kdir, sizeof kdir, "%s", kv_store_key_dir(s));
    uint64_t seed = 99;
    /* random names and contents, in the root and in the key folder */
    const char *where[2] = {dir, kdir};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 20; i++) {
            char name[40];
            int len = 1 + (int)(splitmix(&seed) % 30);
            for (int j = 0; j < len; j++) name[j] = "abcdefABCDEF0123456789._-xyz"[splitmix(&seed) % 28];
            name[len] = '\0';
            if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strncmp(name, ".tmp-", 5) == 0) continue;
            uint8_t junk[512];
            size_t n = splitmix(&seed) % sizeof junk;
            for (size_t j = 0; j < n; j++) junk[j] = (uint8_t)splitmix(&seed);
            if (i % 3 == 0 && n > 16) memcpy(junk, "DJKVBLK\0", 8); /* the magic, then junk */
            snprintf(path, sizeof path, "%s/%s", where[w], name);
            if (strlen(name) == 20 && strcmp(name + 16, ".kvb") == 0) continue; /* would be a block name */
            write_bytes(path, junk, n);
        }
    snprintf(path, sizeof path, "%s/ABCDEF0123456789.kvb", kdir); /* uppercase: not a block name */
    write_bytes(path, "junk", 4);
    size_t foreign_files = count_files(kdir, "", NULL) + count_files(dir, "", NULL);

    struct blk d, l, f, m, ok;
    make_blk(100, &d);
    make_blk(101, &l);
    make_blk(102, &f);
    make_blk(103, &m);
    make_blk(104, &ok);
    /* a folder named like a block */
    blk_path(s, d.chain, path, sizeof path);
    CHECK(mkdir(path, 0755) == 0);
    /* a symlink named like a block, to a valid record of that block */
    uint8_t rec[REC];
    CHECK(kv_store_encode_record(&p, l.chain, l.parent, l.tok, l.data, rec, REC) == DJ_OK);
    snprintf(other, sizeof other, "%s/target.bin", dir);
    write_bytes(other, rec, REC);
    blk_path(s, l.chain, path, sizeof path);
    CHECK(symlink(other, path) == 0);
    /* a FIFO named like a block: must not hang the reader */
    blk_path(s, f.chain, path, sizeof path);
    CHECK(mkfifo(path, 0644) == 0);
    /* a block-named file with the wrong magic: in our folder under a block's
     * name, it is a broken record — corrupt, removed */
    blk_path(s, m.chain, path, sizeof path);
    memcpy(rec, "NOTMAGIC", 8);
    write_bytes(path, rec, REC);

    CHECK(!get_blk(s, &d) && !get_blk(s, &l) && !get_blk(s, &f) && !get_blk(s, &m));
    CHECK(stats(s).corrupt == 1 && !exists(path));
    /* a block-named file far larger than a record: not read (a miss), not judged, left alone */
    struct blk big;
    make_blk(106, &big);
    blk_path(s, big.chain, path, sizeof path);
    CHECK(truncate(path, 0) != 0); /* (absent) */
    int bfd = open(path, O_WRONLY | O_CREAT, 0644);
    CHECK(bfd >= 0 && ftruncate(bfd, 3 * REC + 4096) == 0);
    if (bfd >= 0) close(bfd);
    CHECK(!get_blk(s, &big) && stats(s).corrupt == 1 && exists(path));
    CHECK(unlink(path) == 0);
    CHECK(kv_store_put(s, ok.chain, ok.parent, ok.tok, ok.data));
    kv_store_close(s);

    /* a fresh open scans all of it; a small budget evicts only our blocks */
    p.max_bytes = REC;
    s = open_store(&p);
    if (!s) return;
    CHECK(stats(s).bytes_on_disk == REC);
    struct blk e;
    make_blk(105, &e);
    CHECK(kv_store_put(s, e.chain, e.parent, e.tok, e.data));
    kv_store_flush(s);
    CHECK(get_blk(s, &e) && !get_blk(s, &ok) && !get_blk(s, &d) && !get_blk(s, &l) && !get_blk(s, &f));
    struct kv_store_stats st = stats(s);
    CHECK(st.corrupt == 0 && st.evicted == 1 && st.bytes_on_disk == REC);
    kv_store_close(s);
    CHECKF(count_files(kdir, "", NULL) + count_files(dir, "", NULL) == foreign_files + 1 /* target.bin */ + 1 /* e */,
           "foreign files removed");
    char p2[1100];
    snprintf(p2, sizeof p2, "%s/%016" PRIx64 ".kvb", kdir, d.chain);
    struct stat sb;
    CHECK(lstat(p2, &sb) == 0 && S_ISDIR(sb.st_mode));
    snprintf(p2, sizeof p2, "%s/%016" PRIx64 ".kvb", kdir, l.chain);
    CHECK(lstat(p2, &sb) == 0 && S_ISLNK(sb.st_mode) && exists(other));
    snprintf(p2, sizeof p2, "%s/%016" PRIx64 ".kvb", kdir, f.chain);
    CHECK(lstat(p2, &sb) == 0 && S_ISFIFO(sb.st_mode));
}

static void test_tmp_files(void) {
    char dir[512], kdir[1024], host[40];
    subdir("tmp", dir, sizeof dir);
    host_part(host, sizeof host);
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    snprintf(kdir, sizeof kdir, "%s", kv_store_key_dir(s));
    struct blk b;
    make_blk(200, &b);
    uint8_t rec[REC];
    CHECK(kv_store_encode_record(&p, b.chain, b.parent, b.tok, b.data, rec, REC) == DJ_OK);

    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char t_dead[1200], t_live[1200], t_live_old[1200], t_remote[1200], t_remote_old[1200], t_odd[1200];
    snprintf(t_dead, sizeof t_dead, "%s/.tmp-%s-%ld-0000abcd-3", kdir, host, (long)dead);
    snprintf(t_live, sizeof t_live, "%s/.tmp-%s-%ld-0000abcd-4", kdir, host, (long)getppid());
    snprintf(t_live_old, sizeof t_live_old, "%s/.tmp-%s-%ld-0000abcd-5", kdir, host, (long)getppid());
    snprintf(t_remote, sizeof t_remote, "%s/.tmp-otherhost-%ld-0000abcd-6", kdir, (long)dead);
    snprintf(t_remote_old, sizeof t_remote_old, "%s/.tmp-otherhost-%ld-0000abcd-7", kdir, (long)dead);
    snprintf(t_odd, sizeof t_odd, "%s/.tmp-garbage", kdir);
    const char *all[] = {t_dead, t_live, t_live_old, t_remote, t_remote_old, t_odd};
    for (int i = 0; i < 6; i++) write_bytes(all[i], rec, REC); /* complete records, never renamed */
    struct timespec old[2] = {{time(NULL) - 120, 0}, {time(NULL) - 120, 0}};
    CHECK(utimensat(AT_FDCWD, t_live_old, old, 0) == 0 && utimensat(AT_FDCWD, t_remote_old, old, 0) == 0);

    CHECK(!get_blk(s, &b)); /* a temp file is never a block */
    kv_store_close(s);
    s = open_store(&p); /* cleans up */
    if (!s) return;
    CHECK(!get_blk(s, &b) && stats(s).bytes_on_disk == 0);
    CHECK(!exists(t_dead) && exists(t_live) && !exists(t_live_old) && exists(t_remote) && !exists(t_remote_old) &&
          exists(t_odd));
    kv_store_close(s);
}

static void test_budget(void) {
    char dir[512], path[1024];
    subdir("budget", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    p.max_bytes = 5 * REC;
    struct kv_store *s = open_store(&p);
    if (!s) return;
    struct blk b[40];
    for (int i = 0; i < 40; i++) make_blk(300 + (uint64_t)i, &b[i]);
    for (int i = 0; i < 5; i++) {
        CHECK(kv_store_put(s, b[i].chain, b[i].parent, b[i].tok, b[i].data));
        kv_store_flush(s);
    }
    CHECK(stats(s).bytes_on_disk == 5 * REC && stats(s).evicted == 0);
    CHECK(get_blk(s, &b[0])); /* 0 is now the most recently used; 1 the least */
    CHECK(kv_store_put(s, b[5].chain, b[5].parent, b[5].tok, b[5].data));
    kv_store_flush(s);
    blk_path(s, b[1].chain, path, sizeof path);
    CHECK(stats(s).evicted == 1 && !exists(path));
    CHECK(get_blk(s, &b[0]) && !get_blk(s, &b[1]) && get_blk(s, &b[2]) && get_blk(s, &b[5]));

    /* another store on the folder (another process's view) hits 3, which this
     * store's index thinks old: the file's mtime tells, so 4 goes first */
    struct kv_store *o = open_store(&p);
    usleep(30000); /* past the file system's coarse timestamp tick */
    if (o) CHECK(get_blk(o, &b[3]));
    kv_store_close(o);
    CHECK(kv_store_put(s, b[6].chain, b[6].parent, b[6].tok, b[6].data));
    kv_store_flush(s);
    blk_path(s, b[4].chain, path, sizeof path);
    CHECK(!exists(path));
    blk_path(s, b[3].chain, path, sizeof path);
    CHECK(exists(path));

    /* a reader that opened a file before its eviction reads it whole (POSIX) */
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    for (int i = 7; i < 40; i++) {
        CHECK(kv_store_put(s, b[i].chain, b[i].parent, b[i].tok, b[i].data));
        if (i % 4 == 0) kv_store_flush(s);
    }
    kv_store_flush(s);
    CHECK(!exists(path));
    uint8_t rec[REC + 1];
    struct kv_store_record r;
    CHECK(fd >= 0 && read(fd, rec, sizeof rec) == (ssize_t)REC && kv_store_parse_record(rec, REC, &r) == DJ_OK &&
          memcmp(r.payload, b[3].data, BB) == 0);
    if (fd >= 0) close(fd);

    uint64_t bytes;
    size_t n = count_blocks(kv_store_key_dir(s), &bytes);
    struct kv_store_stats st = stats(s);
    CHECKF(n == 5 && bytes <= p.max_bytes && st.bytes_on_disk == bytes, "%zu files, %" PRIu64 " bytes", n, bytes);
    CHECK(st.written == 40 && st.evicted == 35 && st.corrupt == 0);
    for (int i = 35; i < 40; i++) CHECK(get_blk(s, &b[i]));
    kv_store_close(s);

    /* a record larger than the budget is never written */
    p.max_bytes = REC - 1;
    s = open_store(&p);
    if (!s) return;
    CHECK(kv_store_put(s, b[0].chain, b[0].parent, b[0].tok, b[0].data));
    kv_store_flush(s);
    CHECK(stats(s).dropped == 1 && stats(s).written == 0);
    kv_store_close(s);
}

/* ---- several processes -------------------------------------------------------- */

enum { N_SHARED_IDS = 120 };

/* A child: puts and gets random blocks of a shared id space for `seconds`;
 * exits 0 when every hit was bit-exact and nothing was corrupt. */
static void churn_child(const char *dir, uint64_t seed, double seconds) {
    struct kv_store_params p = params(dir, 1);
    p.max_bytes = 40 * REC; /* evictions race with the other process's reads */
    struct kv_store *s = NULL;
    if (kv_store_open(&p, &s) != DJ_OK) _exit(2);
    int before = test_failed;
    uint64_t hits = 0, ops = 0;
    double t0 = now_s();
    while (now_s() - t0 < seconds) {
        struct blk b;
        make_blk(splitmix(&seed) % N_SHARED_IDS, &b);
        if (splitmix(&seed) & 1) {
            kv_store_put(s, b.chain, b.parent, b.tok, b.data);
            if ((ops & 15) == 0) kv_store_flush(s);
        } else {
            hits += get_blk(s, &b);
        }
        ops++;
    }
    struct kv_store_stats st = stats(s);
    kv_store_close(s);
    printf("  process %ld: %" PRIu64 " ops, %" PRIu64 " hits, %" PRIu64 " written, %" PRIu64 " evicted, corrupt %" PRIu64 "\n",
           (long)getpid(), ops, hits, st.written, st.evicted, st.corrupt);
    fflush(stdout);
    _exit(test_failed == before && st.corrupt == 0 && st.write_errors == 0 && hits > 0 ? 0 : 1);
}

static void test_two_processes(void) {
    char dir[512];
    subdir("procs", dir, sizeof dir);
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) churn_child(dir, 1, 2.0);
    pid_t b = fork();
    if (b == 0) churn_child(dir, 2, 2.0);
    int sa = -1, sb = -1;
    waitpid(a, &sa, 0);
    waitpid(b, &sb, 0);
    CHECKF(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "process a: status %d", sa);
    CHECKF(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "process b: status %d", sb);
    /* what is left: every record complete and right */
    struct kv_store_params p = params(dir, 1);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    int hits = 0;
    for (uint64_t i = 0; i < N_SHARED_IDS; i++) {
        struct blk bl;
        make_blk(i, &bl);
        hits += get_blk(s, &bl);
    }
    struct kv_store_stats st = stats(s);
    CHECK(hits > 0 && st.corrupt == 0 && (uint64_t)hits * REC == st.bytes_on_disk);
    CHECK(count_files(kv_store_key_dir(s), ".tmp-", NULL) == 0);
    kv_store_close(s);
}

static void test_kill9(void) {
    char dir[512];
    subdir("kill9", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    p.queue_max = 8;
    uint64_t seed = 4242;
    enum { ITER = 50, PER = 1000 };
    for (int it = 0; it < ITER; it++) {
        int ready[2];
        CHECK(pipe(ready) == 0);
        pid_t c = fork();
        if (c == 0) {
            struct kv_store *s = NULL;
            if (kv_store_open(&p, &s) != DJ_OK) _exit(2);
            if (write(ready[1], "r", 1) != 1) _exit(3); /* the clock starts once the store is open */
            for (uint64_t k = 0;; k++) {
                struct blk b;
                make_blk((uint64_t)it * PER + k % PER, &b);
                kv_store_put(s, b.chain, b.parent, b.tok, b.data);
            }
        }
        char r;
        close(ready[1]);
        CHECK(read(ready[0], &r, 1) == 1);
        close(ready[0]);
        usleep((useconds_t)(splitmix(&seed) % 25000));
        kill(c, SIGKILL);
        int status;
        waitpid(c, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    struct kv_store *s = open_store(&p);
    if (!s) return;
    const char *kdir = kv_store_key_dir(s);
    CHECKF(count_files(kdir, ".tmp-", NULL) == 0, "leftover temp files after open"); /* their writers are dead */
    /* every file is a complete record, and loads bit-exact */
    size_t n_files = count_blocks(kdir, NULL), hits = 0;
    for (uint64_t it = 0; it < ITER; it++)
        for (uint64_t k = 0; k < PER; k++) {
            struct blk b;
            make_blk(it * PER + k, &b);
            char path[1024];
            blk_path(s, b.chain, path, sizeof path);
            if (!exists(path)) continue;
            size_t n = 0;
            uint8_t *f = (uint8_t *)test_read_file(path, &n);
            struct kv_store_record r;
            CHECK(f && kv_store_parse_record(f, n, &r) == DJ_OK);
            free(f);
            hits += get_blk(s, &b);
        }
    struct kv_store_stats st = stats(s);
    CHECKF(hits == n_files && st.corrupt == 0 && n_files > 0, "%zu files, %zu hits, %" PRIu64 " corrupt", n_files, hits,
           st.corrupt);
    printf("kill -9: %d writers killed, %zu complete blocks found, 0 partial\n", ITER, n_files);
    kv_store_close(s);
}

/* ---- write errors ----------------------------------------------------------------- */

/* A child whose stderr goes to a pipe (RLIMIT_FSIZE would cut a file), with SIGXFSZ ignored
 * (a write past the limit fails with EFBIG instead of killing it).  Returns fork's pid. */
static pid_t fork_piped(int pfd[2]) {
    CHECK(pipe(pfd) == 0);
    fflush(stdout);
    fflush(stderr);
    const pid_t c = fork();
    if (c == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        signal(SIGXFSZ, SIG_IGN);
    }
    return c;
}

/* The parent's side: the child's stderr into err (cap bytes, NUL-terminated), its wait status. */
static int wait_piped(pid_t c, int pfd[2], char *err, size_t cap) {
    close(pfd[1]);
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(pfd[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(pfd[0]);
    int status = 0;
    waitpid(c, &status, 0);
    return status;
}

static void test_write_error(void) {
    char dir[512], path[1024];
    subdir("wfail", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    struct blk old, nw, nw2;
    make_blk(500, &old);
    make_blk(501, &nw);
    make_blk(502, &nw2);
    struct kv_store *s = open_store(&p);
    if (!s) return;
    CHECK(kv_store_put(s, old.chain, old.parent, old.tok, old.data));
    kv_store_close(s);
    int pfd[2];
    const pid_t c = fork_piped(pfd);
    if (c == 0) {
        struct rlimit rl = {REC / 2, REC / 2};
        setrlimit(RLIMIT_FSIZE, &rl);
        if (kv_store_open(&p, &s) != DJ_OK) _exit(100);
        int fails = 0;
        fails += !kv_store_put(s, nw.chain, nw.parent, nw.tok, nw.data); /* queued; the write fails */
        kv_store_flush(s);
        struct kv_store_stats st = stats(s);
        fails += !(st.writes_disabled && st.write_errors == 1 && st.written == 0);
        fails += kv_store_put(s, nw2.chain, nw2.parent, nw2.tok, nw2.data); /* dropped */
        st = stats(s);
        fails += !(st.dropped == 1 && st.put == 2);
        fails += !get_blk(s, &old); /* reads go on */
        fails += get_blk(s, &nw);
        fails += count_files(kv_store_key_dir(s), ".tmp-", NULL) != 0;
        kv_store_close(s);
        _exit(fails);
    }
    char err[4096];
    const int status = wait_piped(c, pfd, err, sizeof err);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "write-error child: status %d", status);
    int lines = 0;
    for (const char *q = err; *q; q++) lines += *q == '\n';
    CHECKF(lines == 1 && strstr(err, "warning") && strstr(err, dir) && strstr(err, "File too large"), "stderr: %s", err);
    printf("write error: %s", err);
    s = open_store(&p);
    if (!s) return;
    blk_path(s, nw.chain, path, sizeof path);
    CHECK(!exists(path) && get_blk(s, &old));
    kv_store_close(s);
}

/* Failed writes are failures, not writes.  In a child, RLIMIT_FSIZE below a
 * record makes every write fail with EFBIG — an error from the kernel, as
 * ENOSPC would be, and one root gets too (a read-only folder would not stop
 * root).  retry_ms 0: no pause, every put is tried.  20 puts → write_errors
 * 20 and written 0 in the stats, in the process totals and in /metrics; no
 * block or temporary file left; ONE warning for the burst.  The limit lifted,
 * the next write succeeds (an info line); lowered again, a new burst and a new
 * warning. */
static void test_write_failures(void) {
    char dir[512];
    subdir("wfail2", dir, sizeof dir);
    struct kv_store_params p = params(dir, 1);
    p.retry_ms = 0;
    int pfd[2];
    const pid_t c = fork_piped(pfd);
    if (c == 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_FSIZE, &rl);
        const rlim_t hard = rl.rlim_max;
        rl.rlim_cur = REC / 2;
        setrlimit(RLIMIT_FSIZE, &rl);
        struct kv_store *s = NULL;
        if (kv_store_open(&p, &s) != DJ_OK) _exit(100);
        struct kv_store_totals t0, t1;
        kv_store_get_totals(&t0);
        int bad = 0; /* the exit status: one bit per failed check */
        for (int i = 0; i < 20; i++) {
            struct blk b;
            make_blk(700 + (uint64_t)i, &b);
            bad |= !kv_store_put(s, b.chain, b.parent, b.tok, b.data);
            kv_store_flush(s); /* one at a time: each is tried, none dropped for a full queue */
        }
        struct kv_store_stats st = stats(s);
        kv_store_get_totals(&t1);
        bad |= 2 * !(st.write_errors == 20 && st.written == 0 && st.dropped == 0);
        bad |= 4 * !(t1.write_failures == t0.write_failures + 20 && t1.written == t0.written);
        bad |= 8 * !(metric("deja_persist_save_failures_total") == (double)t1.write_failures &&
                          metric("deja_persist_writes_total") == (double)t1.written);
        bad |= 16 * (count_blocks(kv_store_key_dir(s), NULL) != 0 || count_files(kv_store_key_dir(s), ".tmp-", NULL) != 0);
        /* the disk has room again: written, one info line; then full again: a new burst */
        rl.rlim_cur = hard;
        setrlimit(RLIMIT_FSIZE, &rl);
        struct blk ok, ko;
        make_blk(750, &ok);
        make_blk(751, &ko);
        kv_store_put(s, ok.chain, ok.parent, ok.tok, ok.data);
        kv_store_flush(s);
        rl.rlim_cur = REC / 2;
        setrlimit(RLIMIT_FSIZE, &rl);
        kv_store_put(s, ko.chain, ko.parent, ko.tok, ko.data);
        kv_store_flush(s);
        st = stats(s);
        bad |= 32 * !(st.written == 1 && st.write_errors == 21 && get_blk(s, &ok) && !get_blk(s, &ko));
        kv_store_close(s);
        _exit(bad);
    }
    char err[8192];
    const int status = wait_piped(c, pfd, err, sizeof err);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "write-failure child: status %d; stderr: %s", status, err);
    CHECKF(lines_with(err, "") == 3 && lines_with(err, "deja: warning: kv-dir: ") == 2 &&
               lines_with(err, "File too large") == 2 && lines_with(err, "deja: info: kv-dir: ") == 1 &&
               lines_with(err, "writes work again, after 20 failed") == 1,
           "stderr: %s", err);
    printf("write failures: 21 counted, 0 written, stderr:\n%s", err);
}

/* ---- kv_store_file_id ----------------------------------------------------------- */

static void test_file_id(void) {
    char dir[512], file[600], cache[600], link_path[600];
    subdir("fileid", dir, sizeof dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(file, sizeof file, "%s/weights.bin", dir);
    snprintf(cache, sizeof cache, "%s/cache/sub", dir);
    snprintf(link_path, sizeof link_path, "%s/link.bin", dir);
    enum { N = 3 << 20 };
    uint8_t *buf = malloc(N);
    uint64_t x = 5;
    for (size_t i = 0; i < N; i++) buf[i] = (uint8_t)splitmix(&x);
    write_bytes(file, buf, N);
    XXH128_canonical_t want;
    XXH128_canonicalFromHash(&want, XXH3_128bits(buf, N));

    uint8_t id1[16], id2[16], id3[16], id4[16];
    CHECKF(kv_store_file_id(file, cache, id1) == DJ_OK, "%s", dj_last_error());
    CHECK(memcmp(id1, want.digest, 16) == 0);
    CHECK(count_files(cache, "fileid-", NULL) == 1);
    CHECK(kv_store_file_id(file, cache, id2) == DJ_OK && memcmp(id1, id2, 16) == 0);
    CHECK(symlink(file, link_path) == 0); /* another name, the same file: the same cache entry */
    CHECK(kv_store_file_id(link_path, cache, id2) == DJ_OK && memcmp(id1, id2, 16) == 0);
    CHECK(count_files(cache, "fileid-", NULL) == 1);

    /* the second call reads the cache, not the file: a doctored entry comes back */
    DIR *d = opendir(cache);
    struct dirent *de;
    char entry[1200] = "";
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, "fileid-", 7) == 0) snprintf(entry, sizeof entry, "%s/%s", cache, de->d_name);
    if (d) closedir(d);
    size_t n = 0;
    char *c = test_read_file(entry, &n);
    CHECK(c && strncmp(c, "deja-file-id 1 dev=", 19) == 0 && strstr(c, "path=") && n > 43);
    if (c && n > 43) {
        CHECK(strncmp(c + n - 43, "\nxxh3-128=", 10) == 0);
        memset(c + n - 33, '0', 31);
        c[n - 2] = '7';
        write_bytes(entry, c, n);
        CHECK(kv_store_file_id(file, cache, id2) == DJ_OK && id2[15] == 7 && id2[0] == 0);
        c[n - 2] = 'Z'; /* a damaged entry: ignored, the file hashed again */
        write_bytes(entry, c, n);
        CHECK(kv_store_file_id(file, cache, id2) == DJ_OK && memcmp(id1, id2, 16) == 0);
    }
    free(c);

    /* change a byte, keep the size: a new id */
    struct stat st0;
    CHECK(stat(file, &st0) == 0);
    usleep(20000);
    buf[12345] ^= 1;
    int fd = open(file, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, buf + 12345, 1, 12345) == 1);
    if (fd >= 0) close(fd);
    XXH128_canonicalFromHash(&want, XXH3_128bits(buf, N));
    CHECK(kv_store_file_id(file, cache, id3) == DJ_OK && memcmp(id3, id1, 16) != 0 && memcmp(id3, want.digest, 16) == 0);
    /* ...even with the old mtime put back (touch -d): the ctime moved */
    usleep(20000);
    buf[777] ^= 1;
    fd = open(file, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, buf + 777, 1, 777) == 1);
    if (fd >= 0) close(fd);
    struct timespec ts[2] = {st0.st_atim, st0.st_mtim};
    CHECK(utimensat(AT_FDCWD, file, ts, 0) == 0);
    XXH128_canonicalFromHash(&want, XXH3_128bits(buf, N));
    CHECK(kv_store_file_id(file, cache, id4) == DJ_OK && memcmp(id4, id3, 16) != 0 && memcmp(id4, want.digest, 16) == 0);
    CHECK(kv_store_file_id(file, NULL, id2) == DJ_OK && memcmp(id4, id2, 16) == 0); /* no cache */

    char missing[700];
    snprintf(missing, sizeof missing, "%s/nope.gguf", dir);
    memset(id2, 0xaa, 16);
    CHECK(kv_store_file_id(missing, cache, id2) == DJ_ERR_IO && strstr(dj_last_error(), "nope.gguf") && id2[0] == 0xaa);
    CHECK(kv_store_file_id(dir, cache, id2) == DJ_ERR_IO && strstr(dj_last_error(), "not a regular file"));
    free(buf);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/dj_kv_persist_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"params", test_params},       {"round trip", test_round_trip}, {"mismatch", test_mismatch},
        {"corrupt", corrupt_cases},    {"scan", test_scan},             {"foreign", test_foreign},
        {"tmp files", test_tmp_files},
        {"budget", test_budget},       {"two processes", test_two_processes}, {"kill -9", test_kill9},
        {"write error", test_write_error}, {"write failures", test_write_failures}, {"file id", test_file_id},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        double t0 = now_s();
        int f0 = test_failed;
        tests[i].fn();
        printf("%-14s %s  %.2f s\n", tests[i].name, test_failed == f0 ? "ok" : "FAILED", now_s() - t0);
        fflush(stdout);
    }
    if (!test_failed) rm_rf(root);
    else fprintf(stderr, "left %s for inspection\n", root);
    TEST_END();
}
