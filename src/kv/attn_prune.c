/*
 * attn_prune.c — attention statistics per KV block and the Tier-2 pruning
 * policies (see attn_prune.h).
 */
#include "kv/attn_prune.h"

#include <stdlib.h>
#include <string.h>

enum dj_status kv_attn_init(struct kv_attn *a, uint32_t n_head, uint32_t block_size, size_t cap) {
    memset(a, 0, sizeof *a);
    if (!n_head || !block_size || !cap) return dj_fail(DJ_ERR_INVALID, "attention statistics: empty shape");
    a->n_head = n_head;
    a->block_size = block_size;
    a->cap = cap;
    a->probe_pos = KV_ATTN_NO_PROBE;
    a->mass = calloc(cap * n_head, sizeof *a->mass);
    a->probe = calloc(cap * n_head, sizeof *a->probe);
    a->weight = calloc(cap, sizeof *a->weight);
    a->avg = calloc(cap, sizeof *a->avg);
    a->dead = calloc(cap, sizeof *a->dead);
    a->skip = calloc(cap, sizeof *a->skip);
    a->tot = calloc(2 * (size_t)n_head, sizeof *a->tot);
    a->order = calloc(cap, sizeof *a->order);
    if (!a->mass || !a->probe || !a->weight || !a->avg || !a->dead || !a->skip || !a->tot || !a->order) {
        kv_attn_free(a);
        return dj_fail(DJ_ERR_NOMEM, "out of memory for attention statistics (%zu blocks, %u heads)", cap, n_head);
    }
    return DJ_OK;
}

void kv_attn_free(struct kv_attn *a) {
    free(a->mass);
    free(a->probe);
    free(a->weight);
    free(a->avg);
    free(a->dead);
    free(a->skip);
    free(a->tot);
    free(a->order);
    memset(a, 0, sizeof *a);
}

void kv_attn_turn_begin(struct kv_attn *a, size_t probe_pos) {
    for (size_t i = 0; i < a->cap * a->n_head; i++) {
        atomic_store_explicit(&a->mass[i], 0, memory_order_relaxed);
        atomic_store_explicit(&a->probe[i], 0, memory_order_relaxed);
    }
    a->probe_pos = probe_pos;
}

static void recount(struct kv_attn *a) {
    a->n_skip = 0;
    for (size_t b = 0; b < a->n_mask; b++) a->n_skip += a->skip[b] != 0;
}

void kv_attn_truncate(struct kv_attn *a, size_t n_pos) {
    const size_t nb = n_pos / a->block_size;
    if (a->n_mask > nb) {
        memset(a->skip + nb, 0, a->n_mask - nb);
        a->n_mask = nb;
        recount(a);
    }
    if (a->n_known > nb) a->n_known = nb;
}

void kv_attn_copy(struct kv_attn *dst, const struct kv_attn *src) {
    const size_t n = src->cap < dst->cap ? src->cap : dst->cap;
    memcpy(dst->skip, src->skip, n);
    memcpy(dst->weight, src->weight, n * sizeof *dst->weight);
    memcpy(dst->avg, src->avg, n * sizeof *dst->avg);
    memcpy(dst->dead, src->dead, n * sizeof *dst->dead);
    dst->n_mask = src->n_mask < n ? src->n_mask : n;
    dst->n_known = src->n_known < n ? src->n_known : n;
    recount(dst);
}

/* h2o: keys (rolling weight's bits << 32 | block), sorted descending: the highest
 * weight first, equal weights the later block first (recent context is likelier to
 * matter); weights are >= 0, so their bits order as the floats do. */
static int cmp_desc(const void *x, const void *y) {
    const uint64_t i = *(const uint64_t *)x, j = *(const uint64_t *)y;
    return i > j ? -1 : (i < j);
}

/* tot[h] = the mass of head h over blocks [0, nb) of src (the denominators of the shares). */
static void head_totals(const struct kv_attn *a, const _Atomic uint64_t *src, size_t nb, uint64_t *tot) {
    const size_t H = a->n_head;
    memset(tot, 0, H * sizeof *tot);
    for (size_t b = 0; b < nb; b++)
        for (size_t h = 0; h < H; h++) tot[h] += atomic_load_explicit(&src[b * H + h], memory_order_relaxed);
}

/* Block b's weight in src: the largest, over heads with any mass, of its share of the head's
 * total; *seen false (weight 0) when no head has any. */
static float block_weight(const struct kv_attn *a, const _Atomic uint64_t *src, const uint64_t *tot, size_t b,
                          bool *seen) {
    float w = 0.0f;
    *seen = false;
    for (size_t h = 0; h < a->n_head; h++) {
        if (!tot[h]) continue;
        *seen = true;
        const float f = (float)((double)atomic_load_explicit(&src[b * a->n_head + h], memory_order_relaxed) /
                                (double)tot[h]);
        if (f > w) w = f;
    }
    return w;
}

size_t kv_attn_probe_restore(struct kv_attn *a, float threshold) {
    uint64_t *ptot = a->tot;
    head_totals(a, a->probe, a->cap, ptot);
    size_t n = 0;
    for (size_t b = 0; b < a->n_mask; b++) {
        if (!a->skip[b]) continue;
        bool seen;
        const float w = block_weight(a, a->probe, ptot, b, &seen);
        if (w >= threshold && w > 0.0f) {
            a->skip[b] = 0;
            a->dead[b] = 0;
            n++;
        }
    }
    recount(a);
    return n;
}

void kv_attn_turn_end(struct kv_attn *a, size_t n_pos, const struct kv_prune_params *p, struct kv_prune_delta *d) {
    const size_t bs = a->block_size;
    size_t nb = n_pos / bs;
    if (nb > a->cap) nb = a->cap;
    const size_t nall = (n_pos + bs - 1) / bs < a->cap ? (n_pos + bs - 1) / bs : a->cap;
    d->n_pruned = d->n_restored = 0;
    uint64_t *tot = a->tot, *ptot = a->tot + a->n_head;
    head_totals(a, a->mass, nall, tot);
    head_totals(a, a->probe, nall, ptot);
    for (size_t b = 0; b < nb; b++) {
        const bool sk = kv_attn_skipped(a, b);
        bool seen;
        const float w = block_weight(a, sk ? a->probe : a->mass, sk ? ptot : tot, b, &seen);
        if (!seen) { /* no query looked at it this turn (a skipped block without a probe): unchanged */
            if (b >= a->n_known) a->weight[b] = a->avg[b] = 0.0f, a->dead[b] = 0;
            continue;
        }
        const bool known = b < a->n_known;
        a->weight[b] = w;
        a->avg[b] = known ? 0.5f * (a->avg[b] + w) : w;
        a->dead[b] = w < p->threshold ? (known ? a->dead[b] : 0) + 1 : 0;
    }
    a->n_known = nb;
    if (!p->prune) return;

    /* protected: blocks starting before keep_first, blocks ending after n_pos - keep_last */
    const size_t first = (p->keep_first + bs - 1) / bs;
    const size_t tail = n_pos > p->keep_last ? n_pos - p->keep_last : 0;
    const size_t last = tail / bs; /* blocks [last, nb) end after tail */
    size_t n_cand = 0;
    for (size_t b = first; b < nb && b < last; b++) {
        uint32_t bits;
        memcpy(&bits, &a->avg[b], sizeof bits);
        a->order[n_cand++] = (uint64_t)bits << 32 | b;
    }
    if (p->policy == KV_PRUNE_H2O) {
        const size_t protected_tok = n_pos - n_cand * bs;
        const size_t room = p->budget > protected_tok ? (p->budget - protected_tok) / bs : 0;
        qsort(a->order, n_cand, sizeof *a->order, cmp_desc);
        for (size_t i = 0; i < n_cand; i++) {
            const size_t b = (uint32_t)a->order[i];
            const bool sk = i >= room, was = kv_attn_skipped(a, b);
            d->n_pruned += sk && !was;
            d->n_restored += !sk && was;
            a->skip[b] = sk;
        }
    } else {
        for (size_t i = 0; i < n_cand; i++) {
            const size_t b = (uint32_t)a->order[i];
            const bool was = kv_attn_skipped(a, b);
            /* a skipped block comes back when the probe gives it the threshold again */
            const bool sk = was ? a->weight[b] < p->threshold : a->dead[b] >= p->window;
            d->n_pruned += sk && !was;
            d->n_restored += !sk && was;
            a->skip[b] = sk;
        }
    }
    /* protected blocks are never skipped (keep_first / keep_last may have grown) */
    for (size_t b = 0; b < nb; b++)
        if ((b < first || b >= last) && a->skip[b]) {
            a->skip[b] = 0;
            d->n_restored += b < a->n_mask;
        }
    for (size_t b = nb; b < a->n_mask; b++) a->skip[b] = 0;
    a->n_mask = nb;
    recount(a);
}
