/*
 * fuzz_kv_record.c — libFuzzer target for the KV store's record parser
 * (kv_store_parse_record, src/kv/persist.h) and the file path of kv_store_get.
 *
 * Input: byte 0 = options, the rest = one record.
 *   bit 0  recompute the trailing XXH3-64 first, so that the fuzzer explores
 *          headers past the checksum (it could never forge one by chance)
 *   bit 1  also write the record as a block file and load it with
 *          kv_store_get from a store of the seeds' geometry and key
 * Checked, beyond ASan/UBSan: a record that parses re-encodes to the same
 * bytes and its pointers lie inside the input; a load hits exactly when the
 * record parses and matches, returns its payload, and a corrupt file is gone
 * afterwards.  Seeds: tests/fuzz/seed.sh (valid records of that geometry).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/status.h"
#include "kv/persist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;
static struct kv_store *store;
static struct kv_store_params sp; /* the seeds' geometry: 1 layer, 2 wide, 2 tokens, 16 payload bytes */

static void open_store(void) {
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/fuzz_kv_record.%ld", (long)getpid());
    sp = kv_store_default_params();
    sp.dir = dir;
    for (int i = 0; i < 32; i++) sp.key[i] = (uint8_t)(i + 1);
    sp.n_layer = 1;
    sp.n_embd_kv = 2;
    sp.block_size = 2;
    sp.kv_type = 1;
    sp.block_bytes = 16;
    dj_log_set_level(DJ_LOG_ERROR); /* one warning per corrupt record would flood the output */
    if (kv_store_open(&sp, &store) != DJ_OK) __builtin_trap();
}

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t opt = data[0];
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1); /* an exact-size copy: ASan sees any read past the end */
    if (!buf) return 0;
    memcpy(buf, data + 1, n);
    if ((opt & 1) && n >= 8) {
        uint64_t h = XXH3_64bits(buf, n - 8);
        for (int i = 0; i < 8; i++) buf[n - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    }

    struct kv_store_record r;
    enum dj_status st = kv_store_parse_record(buf, n, &r);
    dj_token *tok = NULL;
    if (st == DJ_OK) {
        if (r.tokens < buf || r.payload < r.tokens || r.payload + r.payload_bytes + 8 != buf + n) __builtin_trap();
        if (r.payload_bytes) sink += r.payload[0] + r.payload[r.payload_bytes - 1];
        /* re-encode from the parsed fields: the same bytes */
        struct kv_store_params p = kv_store_default_params();
        memcpy(p.key, r.key, 32);
        p.n_layer = r.n_layer;
        p.n_embd_kv = r.n_embd_kv;
        p.block_size = r.block_size;
        p.kv_type = r.kv_type;
        p.block_bytes = (size_t)r.payload_bytes;
        tok = malloc(((size_t)r.block_size ? r.block_size : 1) * sizeof *tok);
        if (!tok) __builtin_trap();
        for (uint32_t i = 0; i < r.block_size; i++) tok[i] = (dj_token)rd32(r.tokens + 4 * (size_t)i);
        uint8_t *enc = malloc(n);
        if (!enc || kv_store_encode_record(&p, r.chain, r.parent_chain, tok, r.payload, enc, n) != DJ_OK ||
            memcmp(enc, buf, n) != 0)
            __builtin_trap();
        free(enc);
        if (!kv_store_record_matches(&r, &p, r.chain, r.parent_chain, tok)) __builtin_trap();
    }

    if ((opt & 2) && n <= 4096) {
        if (!store) open_store();
        /* the block the record claims to be (or a fixed one), as the store would name it */
        uint64_t chain = st == DJ_OK ? r.chain : 0x0123456789abcdefull;
        uint64_t parent = st == DJ_OK ? r.parent_chain : 0;
        dj_token want_tok[2] = {0, 0};
        if (st == DJ_OK && r.block_size == 2)
            for (int i = 0; i < 2; i++) want_tok[i] = tok[i];
        char path[256];
        snprintf(path, sizeof path, "%s/%016" PRIx64 ".kvb", kv_store_key_dir(store), chain);
        FILE *f = fopen(path, "wb");
        if (!f) __builtin_trap();
        if (n && fwrite(buf, 1, n, f) != n) __builtin_trap();
        fclose(f);
        struct kv_store_stats s0, s1;
        kv_store_get_stats(store, &s0);
        uint8_t out[16];
        memset(out, 0x5a, sizeof out);
        bool hit = kv_store_get(store, chain, parent, want_tok, out);
        kv_store_get_stats(store, &s1);
        bool should = st == DJ_OK && r.block_size == 2 && kv_store_record_matches(&r, &sp, chain, parent, want_tok);
        if (hit != should) __builtin_trap();
        if (hit && memcmp(out, r.payload, 16) != 0) __builtin_trap();
        struct stat sb;
        bool there = stat(path, &sb) == 0;
        bool corrupt = s1.corrupt != s0.corrupt;
        if (corrupt != (st == DJ_ERR_FORMAT) || (corrupt && there)) __builtin_trap();
        unlink(path);
    }
    free(tok);
    free(buf);
    return 0;
}
