/*
 * pool.c — block storage, reference counts, LRU eviction and sequences'
 * block tables (see pool.h for the life of a block).
 *
 * Invariants (checked by tests/unit/test_kv_pool.c through the stats):
 *   in_use blocks = pinned (ref > 0) + cached (sealed, ref 0, on the LRU list);
 *   a block with ref 0 that is not sealed is never kept;
 *   free_ids holds exactly the ids that are not in_use.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "core/checked.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kv/pool_internal.h"

bool kv_type_supported(uint32_t type) {
    return type == DJ_TYPE_F32 || type == DJ_TYPE_F16 || type == DJ_TYPE_BF16 || type == DJ_TYPE_Q8_0 ||
           type == DJ_TYPE_Q4_0;
}

int kv_type_parse(const char *name) {
    const int t = dj_type_from_name(name);
    if (t < 0 || !kv_type_supported((uint32_t)t)) {
        dj_fail(DJ_ERR_INVALID, "'%s' is not a K/V cache type (f32, f16, bf16, q8_0, q4_0)", name);
        return -1;
    }
    return t;
}

uint32_t kv_type_default(void) {
    static _Atomic int cached = -1;
    int t = cached;
    if (t >= 0) return (uint32_t)t;
    t = DJ_KV_TYPE_DEFAULT;
    const char *env = getenv("DJ_KV_TYPE");
    if (env && env[0]) {
        const int e = kv_type_parse(env);
        if (e < 0) dj_log(DJ_LOG_WARN, "DJ_KV_TYPE: %s; using %s", dj_last_error(), dj_type_info(t)->name);
        else t = e;
    }
    cached = t;
    return (uint32_t)t;
}

enum dj_status kv_type_check(uint32_t type_k, uint32_t type_v, uint32_t head_dim) {
    for (int i = 0; i < 2; i++) {
        const uint32_t t = i ? type_v : type_k;
        const struct dj_type_info *ti = dj_type_info(t);
        if (!kv_type_supported(t))
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s cache type %s is not one of f32, f16, bf16, q8_0, q4_0",
                           i ? "V" : "K", ti && ti->name ? ti->name : "(unknown)");
        if (head_dim % ti->blck)
            return dj_fail(DJ_ERR_UNSUPPORTED, "%s cache type %s needs a head size that is a multiple of %u; this model's is %u",
                           i ? "V" : "K", ti->name, ti->blck, head_dim);
    }
    return DJ_OK;
}

size_t kv_row_bytes(uint32_t type, size_t n) {
    const struct dj_type_info *ti = dj_type_info(type);
    return n / ti->blck * ti->bytes;
}

enum dj_status kv_pool_create(const struct kv_pool_params *p, struct kv_pool **out) {
    if (p->n_layer == 0 || p->n_embd_kv == 0 || p->block_size == 0 || p->max_blocks == 0 ||
        p->max_blocks == KV_BLOCK_NONE)
        return dj_fail(DJ_ERR_INVALID, "KV pool: bad parameters (layers %u, kv width %u, block size %u, blocks %u)",
                       p->n_layer, p->n_embd_kv, p->block_size, p->max_blocks);
    for (int i = 0; i < (p->k_only ? 1 : 2); i++) {
        const uint32_t t = i ? p->type_v : p->type_k;
        if (!kv_type_supported(t))
            return dj_fail(DJ_ERR_UNSUPPORTED, "KV pool: %s type %s is not one of f32, f16, bf16, q8_0, q4_0",
                           i ? "V" : "K", dj_type_info(t) ? dj_type_info(t)->name : "(unknown)");
        if (p->n_embd_kv % dj_type_info(t)->blck)
            return dj_fail(DJ_ERR_UNSUPPORTED, "KV pool: %s type %s needs a row width that is a multiple of %u, not %u",
                           i ? "V" : "K", dj_type_info(t)->name, dj_type_info(t)->blck, p->n_embd_kv);
    }
    struct kv_pool *pool = calloc(1, sizeof *pool);
    const size_t k_row = kv_row_bytes(p->type_k, p->n_embd_kv), v_row = p->k_only ? 0 : kv_row_bytes(p->type_v, p->n_embd_kv);
    size_t rows, bytes;
    if (!pool || dj_mul_overflow((size_t)p->n_layer, (size_t)p->block_size, &rows) ||
        dj_mul_overflow(rows, k_row + v_row, &bytes)) {
        free(pool);
        return dj_fail(DJ_ERR_NOMEM, "KV pool: out of memory");
    }
    pool->p = *p;
    pool->k_row = k_row;
    pool->v_row = v_row;
    pool->block_bytes = bytes;
    pool->block_stride = (bytes + 63) & ~(size_t)63;
    uint32_t nb = 1;
    while (nb < p->max_blocks && nb < (1u << 30)) nb <<= 1;
    pool->bucket_mask = nb - 1;
    pool->b = calloc(p->max_blocks, sizeof *pool->b);
    pool->free_ids = malloc((size_t)p->max_blocks * sizeof *pool->free_ids);
    pool->buckets = malloc((size_t)nb * sizeof *pool->buckets);
    if (!pool->b || !pool->free_ids || !pool->buckets) {
        kv_pool_destroy(pool);
        return dj_fail(DJ_ERR_NOMEM, "KV pool: out of memory for %u blocks", p->max_blocks);
    }
    for (uint32_t i = 0; i < nb; i++) pool->buckets[i] = KV_BLOCK_NONE;
    for (uint32_t i = 0; i < p->max_blocks; i++) pool->free_ids[i] = p->max_blocks - 1 - i;
    pool->n_free = p->max_blocks;
    pool->lru_head = pool->lru_tail = KV_BLOCK_NONE;
    *out = pool;
    return DJ_OK;
}

void kv_pool_destroy(struct kv_pool *pool) {
    if (!pool) return;
    if (pool->b)
        for (uint32_t i = 0; i < pool->p.max_blocks; i++) free(pool->b[i].tokens);
    for (size_t i = 0; i < pool->n_slabs; i++) munmap(pool->slabs[i].mem, pool->slabs[i].bytes);
    free(pool->slabs);
    free(pool->b);
    free(pool->free_ids);
    free(pool->buckets);
    free(pool);
}

const struct kv_pool_params *kv_pool_params(const struct kv_pool *pool) { return &pool->p; }

void kv_pool_get_stats(const struct kv_pool *pool, struct kv_pool_stats *out) {
    out->capacity = pool->p.max_blocks;
    out->allocated = pool->n_in_use;
    out->pinned = pool->n_pinned;
    out->sealed = pool->n_sealed;
    out->evicted = pool->n_evicted;
    out->cow_copies = pool->n_cow;
    out->block_bytes = pool->block_bytes;
}

void kv_lru_remove(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    if (b->lru_prev != KV_BLOCK_NONE) pool->b[b->lru_prev].lru_next = b->lru_next;
    else pool->lru_head = b->lru_next;
    if (b->lru_next != KV_BLOCK_NONE) pool->b[b->lru_next].lru_prev = b->lru_prev;
    else pool->lru_tail = b->lru_prev;
    b->lru_prev = b->lru_next = KV_BLOCK_NONE;
}

void kv_lru_push(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    b->lru_prev = pool->lru_tail;
    b->lru_next = KV_BLOCK_NONE;
    if (pool->lru_tail != KV_BLOCK_NONE) pool->b[pool->lru_tail].lru_next = id;
    else pool->lru_head = id;
    pool->lru_tail = id;
}

/* Returns an id to the free stack; its data buffer is kept for the next user. */
static void release(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    b->in_use = false;
    b->gen++;
    pool->n_in_use--;
    pool->free_ids[pool->n_free++] = id;
}

void kv_pool_evict(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    DJ_ASSERT(b->in_use && b->ref == 0 && b->sealed);
    kv_lru_remove(pool, id);
    kv_index_remove(pool, id);
    pool->n_evicted++;
    release(pool, id);
}

/* Memory for one more block: the current slab's next piece, or a new slab of ~32 MiB (at
 * least one block, at most the blocks the budget has left), 2 MiB aligned, huge pages
 * asked.  NULL when memory is out. */
static uint8_t *carve(struct kv_pool *pool) {
    struct kv_slab *sl = pool->n_slabs ? &pool->slabs[pool->n_slabs - 1] : NULL;
    if (!sl || sl->used + pool->block_stride > sl->bytes) {
        if (pool->n_slabs == pool->cap_slabs) {
            const size_t cap = pool->cap_slabs ? 2 * pool->cap_slabs : 16;
            struct kv_slab *ns = realloc(pool->slabs, cap * sizeof *ns);
            if (!ns) return NULL;
            pool->slabs = ns;
            pool->cap_slabs = cap;
        }
        size_t n = ((size_t)32 << 20) / pool->block_stride;
        const size_t left = (size_t)pool->p.max_blocks - pool->n_carved;
        if (n > left) n = left;
        if (n < 1) n = 1;
        size_t bytes;
        if (dj_mul_overflow(n, pool->block_stride, &bytes)) return NULL;
        bytes = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
        void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(mem, bytes, MADV_HUGEPAGE);
#endif
        sl = &pool->slabs[pool->n_slabs++];
        *sl = (struct kv_slab){mem, bytes, 0};
    }
    uint8_t *d = (uint8_t *)sl->mem + sl->used;
    sl->used += pool->block_stride;
    pool->n_carved++;
    return d;
}

enum dj_status kv_pool_alloc(struct kv_pool *pool, uint32_t *out) {
    if (pool->n_free == 0) {
        if (pool->lru_head == KV_BLOCK_NONE)
            return dj_fail(DJ_ERR_NOMEM,
                           "KV cache budget exhausted: all %u blocks (%zu KiB each) are pinned by live sequences",
                           pool->p.max_blocks, pool->block_bytes / 1024);
        kv_pool_evict(pool, pool->lru_head);
    }
    uint32_t id = pool->free_ids[pool->n_free - 1];
    struct kv_block *b = &pool->b[id];
    if (!b->data && !(b->data = carve(pool)))
        return dj_fail(DJ_ERR_NOMEM, "KV cache: out of memory allocating a block of %zu KiB",
                       pool->block_bytes / 1024);
    pool->n_free--;
    b->in_use = true;
    b->sealed = false;
    b->ref = 1;
    b->last_turn = pool->turn;
    b->lru_prev = b->lru_next = b->hnext = KV_BLOCK_NONE;
    pool->n_in_use++;
    pool->n_pinned++;
    *out = id;
    return DJ_OK;
}

void kv_pool_ref(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    DJ_ASSERT(b->in_use);
    if (b->ref++ == 0) {
        kv_lru_remove(pool, id); /* a cached block becomes pinned */
        pool->n_pinned++;
    }
    b->last_turn = pool->turn;
}

void kv_pool_unref(struct kv_pool *pool, uint32_t id) {
    struct kv_block *b = &pool->b[id];
    DJ_ASSERT(b->in_use && b->ref > 0);
    b->last_turn = pool->turn;
    if (--b->ref > 0) return;
    pool->n_pinned--;
    if (b->sealed) kv_lru_push(pool, id);
    else release(pool, id);
}

uint32_t kv_pool_refcount(const struct kv_pool *pool, uint32_t id) { return pool->b[id].ref; }
bool kv_pool_is_sealed(const struct kv_pool *pool, uint32_t id) { return pool->b[id].sealed; }

void *kv_pool_k(const struct kv_pool *pool, uint32_t id, uint32_t il) {
    return pool->b[id].data + (size_t)il * pool->p.block_size * pool->k_row;
}

void *kv_pool_v(const struct kv_pool *pool, uint32_t id, uint32_t il) {
    if (pool->p.k_only) return NULL;
    return pool->b[id].data + ((size_t)pool->p.n_layer * pool->k_row + (size_t)il * pool->v_row) * pool->p.block_size;
}

size_t kv_pool_k_row_bytes(const struct kv_pool *pool) { return pool->k_row; }
size_t kv_pool_v_row_bytes(const struct kv_pool *pool) { return pool->v_row; }
void *kv_pool_data(const struct kv_pool *pool, uint32_t id) { return pool->b[id].data; }
uint32_t kv_pool_gen(const struct kv_pool *pool, uint32_t id) { return pool->b[id].gen; }

/* ---- sequences ---------------------------------------------------------------- */

void kv_seq_init(struct kv_seq *s, struct kv_pool *pool) {
    memset(s, 0, sizeof *s);
    s->pool = pool;
}

void kv_seq_free(struct kv_seq *s) {
    if (!s->pool) return;
    for (size_t i = 0; i < s->n_blocks; i++) kv_pool_unref(s->pool, s->table[i]);
    free(s->table);
    free(s->rs);
    memset(s, 0, sizeof *s);
}

size_t kv_seq_rs_floats(const struct kv_seq *s) { return s->pool->p.rs_floats; }
bool kv_seq_rs_ok(const struct kv_seq *s) { return s->pool->p.rs_floats == 0 || s->rs_pos == s->n_pos; }

/* The state buffer, allocated as zeros (the state before position 0). */
static enum dj_status rs_alloc(struct kv_seq *s) {
    if (s->rs || s->pool->p.rs_floats == 0) return DJ_OK;
    s->rs = calloc(s->pool->p.rs_floats, sizeof(float));
    if (!s->rs)
        return dj_fail(DJ_ERR_NOMEM, "KV cache: out of memory for a recurrent state of %zu floats",
                       s->pool->p.rs_floats);
    return DJ_OK;
}

enum dj_status kv_seq_rs_set(struct kv_seq *s, const float *rs) {
    if (s->pool->p.rs_floats == 0) return DJ_OK;
    enum dj_status st = rs_alloc(s);
    if (st) return st;
    memcpy(s->rs, rs, s->pool->p.rs_floats * sizeof(float));
    s->rs_pos = s->n_pos;
    return DJ_OK;
}

enum dj_status kv_seq_clone(struct kv_seq *dst, const struct kv_seq *src) {
    kv_seq_init(dst, src->pool);
    if (src->n_blocks > 0) {
        dst->table = malloc(src->n_blocks * sizeof *dst->table);
        if (!dst->table) return dj_fail(DJ_ERR_NOMEM, "KV cache: out of memory copying a block table");
        memcpy(dst->table, src->table, src->n_blocks * sizeof *dst->table);
        dst->n_blocks = dst->cap = src->n_blocks;
        for (size_t i = 0; i < dst->n_blocks; i++) kv_pool_ref(src->pool, dst->table[i]);
    }
    dst->n_pos = src->n_pos;
    dst->rs_pos = src->rs_pos;
    if (src->rs) {
        if (rs_alloc(dst)) {
            kv_seq_free(dst);
            kv_seq_init(dst, src->pool);
            return DJ_ERR_NOMEM;
        }
        memcpy(dst->rs, src->rs, src->pool->p.rs_floats * sizeof(float));
    }
    return DJ_OK;
}

static enum dj_status table_push(struct kv_seq *s, uint32_t id) {
    if (s->n_blocks == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        uint32_t *t = realloc(s->table, cap * sizeof *t);
        if (!t) return dj_fail(DJ_ERR_NOMEM, "KV cache: out of memory growing a block table");
        s->table = t;
        s->cap = cap;
    }
    s->table[s->n_blocks++] = id;
    return DJ_OK;
}

enum dj_status kv_seq_prepare(struct kv_seq *s, size_t n) {
    struct kv_pool *pool = s->pool;
    const size_t bs = pool->p.block_size, end = s->n_pos + n;
    enum dj_status st = rs_alloc(s);
    if (st) return st;
    size_t lb = s->n_pos / bs;
    if (n > 0 && lb < s->n_blocks) {
        uint32_t old = s->table[lb];
        if (pool->b[old].sealed || pool->b[old].ref > 1) { /* copy on write */
            uint32_t id;
            kv_pool_ref(pool, old); /* keep it alive while allocation may evict */
            if ((st = kv_pool_alloc(pool, &id))) {
                kv_pool_unref(pool, old);
                return st;
            }
            memcpy(pool->b[id].data, pool->b[old].data, pool->block_bytes);
            kv_pool_unref(pool, old);
            kv_pool_unref(pool, old);
            s->table[lb] = id;
            pool->n_cow++;
        }
    }
    while (s->n_blocks * bs < end) {
        uint32_t id;
        if ((st = kv_pool_alloc(pool, &id))) return st;
        if ((st = table_push(s, id))) {
            kv_pool_unref(pool, id);
            return st;
        }
    }
    return DJ_OK;
}

void kv_seq_advance(struct kv_seq *s, size_t n) {
    DJ_ASSERT(s->n_pos + n <= s->n_blocks * s->pool->p.block_size);
    s->n_pos += n;
}

void kv_seq_truncate(struct kv_seq *s, size_t n_pos) {
    DJ_ASSERT(n_pos <= s->n_pos);
    const size_t bs = s->pool->p.block_size, keep = (n_pos + bs - 1) / bs;
    while (s->n_blocks > keep) kv_pool_unref(s->pool, s->table[--s->n_blocks]);
    s->n_pos = n_pos;
    if (n_pos == 0) { /* the state before any token: zeros */
        if (s->rs) memset(s->rs, 0, s->pool->p.rs_floats * sizeof(float));
        s->rs_pos = 0;
    } else if (s->rs_pos != n_pos) {
        s->rs_pos = KV_RS_NONE;
    }
}

void kv_seq_replace_block(struct kv_seq *s, size_t b, uint32_t id) {
    DJ_ASSERT(b < s->n_blocks);
    kv_pool_ref(s->pool, id);
    kv_pool_unref(s->pool, s->table[b]);
    s->table[b] = id;
}

enum dj_status kv_seq_append_block(struct kv_seq *s, uint32_t id) {
    const size_t bs = s->pool->p.block_size;
    DJ_ASSERT(s->n_pos % bs == 0 && s->n_pos / bs == s->n_blocks);
    enum dj_status st = table_push(s, id);
    if (st) return st;
    kv_pool_ref(s->pool, id);
    s->n_pos += bs;
    if (s->pool->p.rs_floats) s->rs_pos = KV_RS_NONE; /* a block brings K/V rows, not the recurrent state */
    return DJ_OK;
}
