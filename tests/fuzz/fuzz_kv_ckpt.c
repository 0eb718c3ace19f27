/*
 * fuzz_kv_ckpt.c — libFuzzer target for the recurrent-state checkpoint store
 * (src/kv/ckpt.h), driven by sequences of operations against a reference model.
 *
 * Input: byte 0 = the budget (in states; 1-8), then 4-byte operations:
 *   op & 3 == 0, 1  put: namespace (op >> 2) & 1, length 1 + b1 % 48 of the input's token
 *                   string chosen by b2 (four strings over a 3-token alphabet, so prefixes
 *                   collide often)
 *   op & 3 == 2     find: the same fields, plus a floor b3 % (length + 1)
 *   op & 3 == 3     clear
 * A state's floats are a function of its key (namespace, tokens), so any state returned
 * can be checked.  Checked, beyond ASan/UBSan: find returns 0 or a length within
 * [floor, n] whose prefix was put in that namespace (and not cleared since), with that
 * prefix's state; a checkpoint put and not evicted since is found (the reference model
 * follows the store's LRU order exactly); the byte count never exceeds the budget and
 * equals the reference's.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { RS = 6, MAXN = 48, NSTR = 4, MAXE = 512 };

struct ref {
    uint64_t root;
    size_t n;
    int s; /* which string */
    uint64_t used;
};

static void fill_state(float *rs, uint64_t root, const dj_token *t, size_t n) {
    uint64_t h = 1469598103934665603ull ^ root;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)t[i]) * 1099511628211ull;
    for (int i = 0; i < RS; i++) rs[i] = (float)((h >> (i * 8)) & 0xff) + (float)n;
}

static size_t ent_bytes(size_t n) { return n * sizeof(dj_token) + RS * sizeof(float); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const size_t budget = (size_t)(1 + data[0] % 8) * ent_bytes(MAXN / 2);
    struct kv_ckpt_store *cs;
    if (kv_ckpt_create(RS, budget, &cs) != DJ_OK) abort();
    /* four token strings; string k's tokens from the input's bytes, else a fixed pattern */
    dj_token str[NSTR][MAXN];
    for (int k = 0; k < NSTR; k++)
        for (int i = 0; i < MAXN; i++) str[k][i] = (dj_token)((i * (k + 1) + (i > 20 ? k : 0)) % 3);
    static struct ref refs[MAXE];
    size_t n_ref = 0, ref_bytes = 0;
    uint64_t tick = 0;
    float rs[RS], want[RS];
    for (size_t at = 1; at + 4 <= size; at += 4) {
        const uint8_t op = data[at], b1 = data[at + 1], b2 = data[at + 2], b3 = data[at + 3];
        const uint64_t root = (op >> 2) & 1;
        const int s = b2 % NSTR;
        const size_t n = 1 + b1 % MAXN;
        tick++;
        if ((op & 3) <= 1) {
            fill_state(rs, root, str[s], n);
            const bool kept = kv_ckpt_put(cs, root, str[s], n, rs);
            /* the reference: refresh an equal key, else evict LRU until it fits */
            size_t e = n_ref;
            for (size_t i = 0; i < n_ref; i++)
                if (refs[i].root == root && refs[i].n == n && memcmp(str[refs[i].s], str[s], n * sizeof(dj_token)) == 0)
                    e = i;
            if (e < n_ref) {
                if (!kept) abort();
                refs[e].used = tick;
                continue;
            }
            if (ent_bytes(n) > budget) {
                if (kept) abort();
                continue;
            }
            while (ref_bytes + ent_bytes(n) > budget) {
                size_t v = 0;
                for (size_t i = 1; i < n_ref; i++)
                    if (refs[i].used < refs[v].used) v = i;
                ref_bytes -= ent_bytes(refs[v].n);
                refs[v] = refs[--n_ref];
            }
            if (!kept) abort(); /* fits: only an allocation failure could refuse it */
            if (n_ref == MAXE) abort();
            refs[n_ref++] = (struct ref){root, n, s, tick};
            ref_bytes += ent_bytes(n);
        } else if ((op & 3) == 2) {
            const size_t lo = b3 % (n + 1);
            const float *got = NULL;
            const size_t m = kv_ckpt_find(cs, root, str[s], n, lo, &got);
            /* the reference's answer: the longest held prefix in [lo, n] */
            size_t best = 0, bi = 0;
            for (size_t i = 0; i < n_ref; i++)
                if (refs[i].root == root && refs[i].n <= n && refs[i].n >= lo && refs[i].n > best &&
                    memcmp(str[refs[i].s], str[s], refs[i].n * sizeof(dj_token)) == 0) {
                    best = refs[i].n;
                    bi = i;
                }
            if (m != best) abort();
            if (m) {
                fill_state(want, root, str[s], m);
                if (!got || memcmp(got, want, sizeof want) != 0) abort();
                refs[bi].used = tick;
            }
        } else {
            kv_ckpt_clear(cs);
            n_ref = 0;
            ref_bytes = 0;
        }
        struct kv_ckpt_stats st;
        kv_ckpt_get_stats(cs, &st);
        if (st.bytes > st.max_bytes || st.bytes != ref_bytes || st.n != n_ref) abort();
    }
    kv_ckpt_destroy(cs);
    return 0;
}
