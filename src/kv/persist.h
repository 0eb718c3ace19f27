/*
 * persist.h — the on-disk KV block store (spec §2.3): sealed KV blocks kept as
 * one file each, so that a restarted engine (or another replica on the host or
 * on a shared filesystem) finds the K/V of a prefix it has seen before instead
 * of prefilling it again.  A standalone module: it knows nothing of the pool or
 * the model; the caller hands it opaque payload bytes and the block's identity.
 *
 * Identity.  A block is found by its chain hash (kv/hash.h) and returned only
 * when everything that decides its bits matches: the 32-byte store key (the
 * caller's hash of model content, KV type, block size, kernels, rope...), the
 * geometry, the chain hash, the parent's chain hash and the block's tokens.
 * "A mismatch is a miss, never a wrong reuse": any difference is a miss.
 *
 * Layout on disk:
 *
 *   <dir>/                              params.dir (created if missing)
 *     <32 hex: key[0..16)>/             one folder per store key
 *       0123456789abcdef.kvb            a block, named by its chain hash (16 hex digits)
 *       .tmp-<host>-<pid>-<nonce>-<n>   a write in progress (never read as a block)
 *
 * One record (= one .kvb file), every integer little-endian, written field by field:
 *
 *   off  bytes  field
 *     0      8  magic "DJKVBLK\0"
 *     8      4  format version (1)
 *    12      4  header bytes (88 in version 1: tokens start there)
 *    16     32  store key
 *    48      8  chain hash
 *    56      8  parent chain hash
 *    64      4  n_layer
 *    68      4  n_embd_kv
 *    72      4  block_size
 *    76      4  kv_type (the engine: K ggml type id | V type id << 8 | 1 << 16 when
 *               the pool has no V rows: MLA's K-only geometry, pool.h k_only)
 *    80      8  payload bytes
 *    88   4*bs  tokens[block_size], int32
 *     ..     P  payload (opaque: the K and V of every layer; K only for MLA)
 *     ..     8  XXH3-64 (seed 0) of every byte before it
 *
 *   +-------+-----+-----+-----+-------+--------+----------+--------+---------+---------+
 *   | magic | ver | hdr | key | chain | parent | geometry | tokens | payload | xxh3-64 |
 *   +-------+-----+-----+-----+-------+--------+----------+--------+---------+---------+
 *   |<------------------- header, 88 bytes --------------->|<-4*bs->|<---P--->|<---8--->|
 *
 * The trailing checksum is a promise for every format version, so a file is
 * judged intact (checksum) before its version is read: a record of another
 * version whose checksum holds is left alone (a newer deja may share the
 * folder); anything else that is not a valid record is corrupt.
 *
 * Guarantees (the tests in tests/unit/test_kv_persist.c check each):
 *  - Crash safety: the writer thread writes a uniquely named temporary file in
 *    the same folder, fsyncs it, renames it over the block's name (atomic),
 *    then fsyncs the folder.  A kill -9 at any moment leaves no file or a
 *    complete one.  Stray temporary files are removed at open (and at each
 *    rescan) when older than a minute, or written by a dead process of this
 *    host, never while their writer may be alive.
 *  - Verification on every load: size, magic, checksum, version, header size,
 *    key, geometry, chain, parent, tokens.  An identity mismatch (key,
 *    geometry, chain, parent, tokens) is a miss and the file is left alone (a
 *    hash collision is not corruption).  A structural or checksum failure is
 *    corrupt: the file is removed — only if the name still holds the very
 *    file that was read (see kv_store_get) — and is a miss too.  The process
 *    that removes it counts it (stats.corrupt, kv_store_get_totals) and logs
 *    one warning line "kv-dir: <path>: <what is wrong> — removed"; a process
 *    that finds it gone or replaced meanwhile neither counts nor logs it.
 *    Not blocks, never read nor removed: names other than <16 hex>.kvb,
 *    symlinks, folders, FIFOs; a block-named file over twice a record's size
 *    (plus 4 KiB) is a miss left for eviction, not read to be judged.
 *  - Start-up scan: kv_store_open also verifies records before anything is
 *    looked up — whole files (header and XXH3 checksum: payload damage is
 *    only seen by the checksum), the most recently used first, while the
 *    next file fits in scan_max_bytes and scan_max_ms have not passed
 *    (defaults 256 MiB and 250 ms; the time is checked between files, so a
 *    file being read is finished).  Corrupt ones are removed, counted and
 *    logged as above; the others are judged at their first load.  Without
 *    it a damaged file of the right size would stay until a lookup reached
 *    it: a put of its block finds it "present" and does not rewrite it.
 *  - Several processes on one folder need no lock: rename is atomic, so a
 *    reader opens either the old complete file or the new one.  Each process
 *    keeps an approximate index (chain -> size, last use) built by scanning
 *    the folder at open and rescanned every few seconds while a budget is
 *    enforced; a lookup of a chain the index lacks still tries the file.
 *  - Budget: with max_bytes > 0 the writer evicts least recently used blocks
 *    before a write would pass it.  "Recently used" is the file's mtime, set on
 *    every hit, so LRU holds across processes.  Eviction only unlinks: a
 *    reader that has opened the file reads it to the end (POSIX keeps an
 *    unlinked file's data while it is open) — this is how the store never
 *    removes a block a reader is loading.  With several processes writing, the
 *    total may exceed the budget until the next rescan (KV_STORE_RESCAN_S).
 *  - Disk full or any other write error (ENOSPC, EDQUOT, EFBIG, EIO, a short
 *    write, a failed fsync, close or rename): the temporary file is removed,
 *    so no partial record is ever under a block's name; the write is counted
 *    in write_errors (never in written); writes pause for retry_ms (puts in
 *    the meantime are dropped and counted), then the next put is tried.
 *    Reads go on.  Logging is per burst (failures with no successful write
 *    between them): a warning naming the folder, the step and the error for
 *    the first failure, then at most one line every KV_STORE_LOG_EVERY_S
 *    with the count since, and one info line when a write succeeds again.
 *    (A rename done but the folder's fsync failing leaves a complete record,
 *    checksum and all, counted as a failure: it may not survive a crash.)
 *    A process run under RLIMIT_FSIZE must ignore SIGXFSZ to get EFBIG
 *    rather than be killed (the store does not change signal handlers).
 *
 * Usage (one store per key; all functions are thread-safe on one store; do not
 * use a store across fork(): open it again in the child):
 *
 *   struct kv_store_params p = kv_store_default_params();
 *   p.dir = "/var/cache/deja/kv";  p.max_bytes = 20ull << 30;
 *   memcpy(p.key, key, 32);         // kv_store_file_id() of the weights, hashed with the rest
 *   p.n_layer = ..; p.n_embd_kv = ..; p.block_size = 64; p.kv_type = ..;
 *   p.block_bytes = bytes of one block's K and V;
 *   struct kv_store *s;
 *   if (kv_store_open(&p, &s) != DJ_OK) { report dj_last_error(); run without it; }
 *   // on a pool miss, before computing block i:
 *   if (kv_store_get(s, chain, parent_chain, tokens, buf)) { ...use buf... }
 *   // when a block is sealed:
 *   kv_store_put(s, chain, parent_chain, tokens, data);   // copies, returns at once
 *   kv_store_close(s);                                     // writes what is queued
 *
 * parent_chain is opaque to the store: pass whatever the caller chains from (kv/hash.h's
 * KV_CHAIN_ROOT for a sequence's first block, or 0); it only has to be the same value on
 * put and get.
 */
#ifndef DJ_KV_PERSIST_H
#define DJ_KV_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

#define KV_STORE_MAGIC "DJKVBLK" /* 8 bytes with the NUL */
#define KV_STORE_VERSION 1u
#define KV_STORE_HEADER_BYTES 88u
#define KV_STORE_CHECKSUM_BYTES 8u
#define KV_STORE_KEY_BYTES 32u
#define KV_STORE_TMP_MAX_AGE_S 60 /* a temporary file older than this is abandoned */
#define KV_STORE_RESCAN_S 5       /* with a budget, the folder is rescanned at most this often */
#define KV_STORE_LOG_EVERY_S 600  /* a burst of failed writes logs its first failure, then this often */
#define KV_STORE_SCAN_MAX_BYTES (256ull << 20) /* default start-up scan bounds (params.scan_max_*) */
#define KV_STORE_SCAN_MAX_MS 250u
#define KV_STORE_RETRY_MS 60000u  /* default pause of writes after a failed one (params.retry_ms) */

struct kv_store_params {
    const char *dir;          /* created if missing (every component) */
    uint64_t max_bytes;       /* disk budget for this key's block files; 0 = unlimited */
    uint8_t key[KV_STORE_KEY_BYTES]; /* identity of everything that changes the bits (model
                                 content hash, KV type, block size, kernel table, rope...):
                                 computed by the caller; blocks of another key are never returned */
    uint32_t n_layer, n_embd_kv, block_size, kv_type; /* recorded in each record, checked on load */
    size_t block_bytes;       /* payload bytes per block (> 0) */
    size_t queue_max;         /* puts waiting for the writer, at most (each holds a copy of one
                                 record); past it kv_store_put drops.  0 = a read-only store */
    uint64_t scan_max_bytes;  /* start-up scan: bytes read at most (whole records)... */
    uint32_t scan_max_ms;     /* ...and milliseconds at most; either 0 = no start-up scan */
    uint32_t retry_ms;        /* after a failed write, puts are dropped this long, then tried again */
};

/* Once flushed, put = written + present + dropped + write_errors. */
struct kv_store_stats {
    uint64_t put;          /* kv_store_put calls */
    uint64_t written;      /* records written and renamed into place */
    uint64_t present;      /* puts not written because the block's file already existed */
    uint64_t dropped;      /* puts not written: queue full, writes paused, or larger than max_bytes */
    uint64_t write_errors; /* writes that failed (each pauses writes for retry_ms) */
    uint64_t hit, miss;    /* kv_store_get results */
    uint64_t corrupt;      /* corrupt files this store removed (start-up scan or a get), or could not remove (once each) */
    uint64_t evicted;      /* files removed for the budget */
    uint64_t bytes_on_disk; /* this process's estimate of the key folder's block bytes */
    uint64_t scan_checked, scan_unchecked; /* start-up scan: records verified / left to their first load */
    uint64_t scan_bytes, scan_us;          /* start-up scan: bytes read, microseconds taken */
    bool writes_disabled;  /* paused after a failed write (puts are dropped) */
};

/* Totals of every store of this process since it started, for GET /metrics
 * (server/metrics.c reads them without a store: the engine that owns the
 * store is not thread-safe). */
struct kv_store_totals {
    uint64_t written;        /* records written and renamed into place */
    uint64_t write_failures; /* writes that failed (write_errors) */
    uint64_t corrupt;        /* corrupt files found (as stats.corrupt) */
};
void kv_store_get_totals(struct kv_store_totals *out);

struct kv_store;

/* dir NULL, no budget, a zero key and geometry (the caller fills them), queue_max 32,
 * a start-up scan of at most 256 MiB and 250 ms, writes retried 60 s after a failure. */
struct kv_store_params kv_store_default_params(void);

/* Creates the folders, removes abandoned temporary files, scans the folder
 * into the index, verifies records within the start-up scan's bounds (above)
 * and starts the writer thread.  *out set only on DJ_OK.
 * DJ_ERR_INVALID for a missing dir, block_size or block_bytes 0, or a record
 * size that overflows; DJ_ERR_IO (with the path and errno text) when the
 * folder cannot be created or opened. */
enum dj_status kv_store_open(const struct kv_store_params *p, struct kv_store **out);
/* Writes what is queued, joins the writer thread, frees.  Accepts NULL. */
void kv_store_close(struct kv_store *s);

/* Copies tokens[block_size] and data[block_bytes] into the write queue and
 * returns at once (no I/O on the caller's thread).  false = dropped (queue
 * full, writes disabled, read-only store), counted in stats.dropped. */
bool kv_store_put(struct kv_store *s, uint64_t chain, uint64_t parent_chain, const dj_token *tokens, const void *data);
/* Looks for the block among the puts not yet written, then on disk.  true only for a
 * record whose header, key, geometry, chain, parent, tokens and checksum all
 * verify; data[block_bytes] is written only then.  A hit sets the file's mtime
 * (its LRU age).  A corrupt file is counted, removed if its name still holds
 * the file that was read (by renaming it aside, checking the inode, and
 * putting back a file another process renamed there meanwhile), and is a miss.
 * Reads are serialized per store (one read buffer). */
bool kv_store_get(struct kv_store *s, uint64_t chain, uint64_t parent_chain, const dj_token *tokens, void *data);
/* Waits until every put made before the call is written or dropped. */
void kv_store_flush(struct kv_store *s);
void kv_store_get_stats(const struct kv_store *s, struct kv_store_stats *out);
/* <dir>/<key hex> — the folder holding this store's records (owned by the store). */
const char *kv_store_key_dir(const struct kv_store *s);

/* Content hash (XXH3-128, canonical big-endian bytes) of a file — the model's
 * weights — for the caller's store key.  Hashing gigabytes takes seconds, so
 * the result is cached in cache_dir (created if missing; NULL = no cache) in a
 * file "fileid-<xxh3-128 of the stat line, hex>" holding
 *
 *   deja-file-id 1 dev=<st_dev> ino=<st_ino> size=<bytes> mtime=<s>.<ns> ctime=<s>.<ns> path=<realpath>
 *   xxh3-128=<32 hex>
 *
 * and reused only when the first line equals the file's current one byte for
 * byte.  Any change of the file (a rewrite, a copy over it, touch) changes its
 * mtime or ctime — ctime cannot be set back by utimes, unlike mtime — and so
 * gets a new hash.  A file that changes while it is hashed is an error
 * (DJ_ERR_IO), never a hash of a mix.  A cache that cannot be written only
 * costs the next call a rehash.  out set only on DJ_OK. */
enum dj_status kv_store_file_id(const char *path, const char *cache_dir, uint8_t out[16]);

/* ---- the record codec (exposed for the tests and tests/fuzz/fuzz_kv_record.c) ---- */

/* One record's fields as parsed; tokens and payload point into the parsed buffer. */
struct kv_store_record {
    uint32_t version;
    uint8_t key[KV_STORE_KEY_BYTES];
    uint64_t chain, parent_chain;
    uint32_t n_layer, n_embd_kv, block_size, kv_type;
    uint64_t payload_bytes;
    const uint8_t *tokens;  /* block_size little-endian int32 */
    const uint8_t *payload; /* payload_bytes */
};

/* Bytes of one record for these params; false when it overflows size_t. */
bool kv_store_record_bytes(const struct kv_store_params *p, size_t *out);
/* Encodes a record into out[n] (n = kv_store_record_bytes).  DJ_ERR_INVALID if n differs. */
enum dj_status kv_store_encode_record(const struct kv_store_params *p, uint64_t chain, uint64_t parent_chain,
                                      const dj_token *tokens, const void *data, uint8_t *out, size_t n);
/* Parses buf[n] as one whole record, checking every length against n before
 * use.  DJ_OK: a valid version-1 record, *out filled.  DJ_ERR_UNSUPPORTED: an
 * intact record (its checksum holds) of another format version — not ours to
 * judge.  DJ_ERR_FORMAT: corrupt (short, bad magic, bad checksum, bad header
 * size, lengths that disagree with n); the message says which. */
enum dj_status kv_store_parse_record(const uint8_t *buf, size_t n, struct kv_store_record *out);
/* true when a parsed record is the block asked for under params p: key,
 * geometry, chain, parent and tokens all equal. */
bool kv_store_record_matches(const struct kv_store_record *r, const struct kv_store_params *p, uint64_t chain,
                             uint64_t parent_chain, const dj_token *tokens);

#endif
