/*
 * fuzz_model.c — libFuzzer target for model_load: the GGUF reader, the
 * hyperparameter checks, tensor binding, llama3 rope factors and the
 * vocabulary, on whatever the fuzzer makes of a real model file.
 *
 * model_load takes a path, so each input is written to one memfd, reused
 * (truncated and rewritten), and loaded as /proc/self/fd/N.  A model that
 * loads must be usable: its vocabulary tokenizes and detokenizes a short text,
 * and when it is small enough to run in a few milliseconds (the data of a
 * layer times the layers, and the KV width, bounded below) a context of 4
 * positions is created and two tokens (the first and the last id) are decoded,
 * so a hyperparameter the loader let through that the forward pass cannot take
 * (a division by zero, an index past a table) shows up here under ASan/UBSan.
 * Logits are not checked (random weights give NaNs legitimately).
 * Seeds: tests/fuzz/seed.sh (stories260K, hand-built tiny models, the MoE/MLA golden models).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/status.h"
#include "model/context.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fd = -1;
static char path[64];
static volatile uint64_t sink;

static bool small_enough(const struct dj_model *m) {
    const struct dj_hparams *hp = &m->hp;
    const uint64_t kv = (uint64_t)hp->n_head_kv * hp->head_dim, q = (uint64_t)hp->n_head * hp->head_dim;
    /* per token and layer: the matrices' multiply-adds; the file bounds them too, but a
     * tensor may be listed under two names at one offset, so count from the shapes */
    const uint64_t ffn = hp->n_expert ? (uint64_t)hp->n_embd * hp->n_expert +
                                            3ull * hp->n_expert_used * hp->n_embd * hp->n_ff_exp
                                      : 3ull * hp->n_embd * hp->n_ff; /* MoE: the router and the chosen experts */
    const uint64_t per_layer = (uint64_t)hp->n_embd * (q + 2 * kv) + q * hp->n_embd + ffn;
    return hp->n_layer * per_layer + (uint64_t)hp->n_vocab * hp->n_embd <= (8u << 20) &&
           (uint64_t)hp->n_layer * kv <= (1u << 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fd < 0) {
        dj_log_set_level(DJ_LOG_ERROR); /* unknown-key and similar warnings would flood the output */
        fd = memfd_create("fuzz_model.gguf", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    struct dj_model *m = NULL;
    if (model_load(path, &m) != DJ_OK) return 0;

    static const char text[] = "Hello, world! 123 <s>";
    dj_token *toks = NULL;
    size_t n_tok = 0;
    if (vocab_tokenize(m->vocab, text, sizeof text - 1, true, true, &toks, &n_tok) == DJ_OK) {
        for (size_t i = 0; i < n_tok; i++) {
            if (toks[i] < 0 || (size_t)toks[i] >= vocab_n_tokens(m->vocab)) __builtin_trap();
            char piece[256];
            sink += (uint64_t)vocab_token_to_piece(m->vocab, toks[i], true, piece, sizeof piece);
        }
        free(toks);
    }

    if (small_enough(m)) {
        struct dj_ctx_params cp = ctx_default_params();
        cp.n_ctx = 4;
        struct dj_context *c = NULL;
        if (ctx_create(m, cp, &c) == DJ_OK) {
            float *logits = malloc((size_t)m->hp.n_vocab * 2 * sizeof(float));
            const dj_token two[2] = {0, (dj_token)(m->hp.n_vocab - 1)};
            if (logits && ctx_decode(c, two, 2, logits, true) == DJ_OK) {
                uint32_t bits;
                memcpy(&bits, &logits[m->hp.n_vocab], sizeof bits);
                sink += bits;
            }
            free(logits);
            ctx_free(c);
        }
    }
    model_free(m);
    return 0;
}
