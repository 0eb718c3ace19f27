/*
 * fuzz_spec.c — libFuzzer target for the draft sources (spec/spec.h): the
 * output memo's record/evict/draft bookkeeping and prompt lookup, driven by
 * arbitrary token streams.  They parse nothing, but they keep an index over
 * whatever a client's prompt and the model's output hold, so hostile token
 * sequences (long repeats, one token over and over, huge outputs against a
 * tiny trie) must never break them.
 *
 * Input: byte 0 = the memo's node bound (1 .. 256), then commands of 2+ bytes:
 *   op 0: record an output of the next n = byte tokens
 *   op 1: draft from the memo for a context of the next n tokens
 *   op 2: append the next n tokens to the lookup and draft from it
 * tokens are bytes mod 16 (so repeats are common).  Checked beyond ASan/UBSan:
 * the memo stays within its bound, drafts stay within their caps, and every
 * lookup draft is the continuation of a real earlier occurrence of the last token.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint32_t cap = 1u + data[0];
    struct spec_memo *m = spec_memo_create(cap);
    if (!m) return 0;
    struct spec_lookup l;
    spec_lookup_init(&l);
    dj_token buf[256], out[64];
    for (size_t i = 1; i + 1 < size;) {
        const uint8_t op = data[i] % 3;
        size_t n = data[i + 1];
        i += 2;
        if (n > size - i) n = size - i;
        for (size_t k = 0; k < n; k++) buf[k] = (dj_token)(data[i + k] % 16);
        i += n;
        uint32_t match;
        float p;
        if (op == 0) {
            spec_memo_record(m, buf, n);
            if (spec_memo_n_nodes(m) > cap) abort();
        } else if (op == 1) {
            const size_t nd = spec_memo_draft(m, buf, n, out, 63, &match, &p);
            if (nd > 63 || (nd && (match == 0 || match > n || !(p > 0.0f && p <= 1.0f)))) abort();
        } else {
            if (spec_lookup_append(&l, buf, n) != DJ_OK) break;
            const size_t nd = spec_lookup_draft(&l, out, 63, &match);
            if (nd > 63) abort();
            if (nd) {
                /* out is l.tok[j+1 ..] for some j < n-1 whose token is the last one */
                bool found = false;
                for (size_t j = 0; j + 1 < l.n && !found; j++)
                    found = l.tok[j] == l.tok[l.n - 1] && j + 1 + nd <= l.n &&
                            !memcmp(l.tok + j + 1, out, nd * sizeof *out);
                if (!found || match == 0) abort();
            }
        }
    }
    spec_lookup_free(&l);
    spec_memo_destroy(m);
    return 0;
}
