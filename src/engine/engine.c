/*
 * engine.c — the engine, its sessions and the exact turn (engine.h has the
 * picture and the contract).
 *
 * Invariants, true between turns and after every failure:
 *   s->seq.n_pos == s->hist.n_tok: the history holds exactly the tokens whose
 *     K/V the sequence holds, position by position;
 *   with dedup on, the sealed blocks of a table form a prefix of it (blocks
 *     are sealed in order; a seal that fails stops the walk); with
 *     canonicalization on too, a sealed block is the only one in the pool
 *     with its (chain, parent, tokens): sealing an identical block switches
 *     to the existing one instead (off: twins are sealed side by side);
 *   the sessions of an engine are on its list; the context's current
 *     sequence is the context's own (empty) one outside engine_turn.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/status.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "kv/diff.h"
#include "kv/ckpt.h"
#include "kv/hash.h"
#include "kv/history.h"
#include "kv/persist.h"
#include "model/context.h"
#include "sample/sampler.h"

struct dj_engine_params engine_default_params(void) {
    struct dj_engine_params p;
    memset(&p, 0, sizeof p);
    p.n_ubatch = 512;
    p.chunked_prefill = true;
    p.n_threads = 1;
    p.opt = llama_opt_config_default();
    p.kv_type_k = p.kv_type_v = kv_type_default();
    p.spec = spec_default_params();
    return p;
}

size_t engine_kv_bytes_per_token(const struct dj_model *m, uint32_t type_k, uint32_t type_v) {
    const size_t n = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    if (model_kv_k_only(m)) return (size_t)m->hp.n_layer_kv * kv_row_bytes(type_k, n); /* MLA: no V rows */
    return (size_t)m->hp.n_layer_kv * (kv_row_bytes(type_k, n) + kv_row_bytes(type_v, n));
}

/* MemAvailable of /proc/meminfo in bytes; 0 if unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

/* ---- the persistent KV store (kv/persist.h; opt.persist_enabled) ----------
 *
 * Its key covers everything that changes the bits of a block: the weights (the
 * model file's content hash, kv_store_file_id, cached in <dir>/ids by device,
 * inode, size, mtime and ctime), the deja executable itself (the same scheme:
 * kernels change between builds, and the AVX2 and AVX-512 tables round
 * differently), the kernel table in use, the K and V types, the block size, the
 * KV geometry and the rope settings.  Any difference is another key: a miss,
 * never a wrong reuse.  A store that cannot be opened is a warning: serving goes
 * on without it. */
static void engine_open_store(struct dj_engine *e) {
    const struct dj_model *m = e->model;
    const struct dj_hparams *hp = &m->hp;
    const char *dir = e->cfg.persist_dir;
    if (!dir[0]) {
        dj_log(DJ_LOG_WARN, "LLAMA_OPT_PERSIST_ENABLED without LLAMA_OPT_PERSIST_DIR (--kv-dir): KV stays in memory");
        return;
    }
    if (!e->cfg.dedup_enabled) { /* blocks reach the disk when sealed and return through the pool */
        dj_log(DJ_LOG_WARN, "persistent KV needs the block pool (LLAMA_OPT_DEDUP_ENABLED=1): off");
        return;
    }
    char ids[LLAMA_OPT_PERSIST_DIR_MAX + 8];
    snprintf(ids, sizeof ids, "%s/ids", dir);
    uint8_t model_id[16], exe_id[16];
    if (!m->path || kv_store_file_id(m->path, ids, model_id) != DJ_OK ||
        kv_store_file_id("/proc/self/exe", ids, exe_id) != DJ_OK) {
        dj_log(DJ_LOG_WARN, "persistent KV off: %s", m->path ? dj_last_error() : "the model has no file path");
        return;
    }
    char desc[1024], device[320];
    ctx_device_id(e->ctx, device, sizeof device); /* a GPU's blocks are not the CPU's bits, nor another GPU's */
    int n = snprintf(desc, sizeof desc,
                     "deja-kv 1 kernels=%s k=%s v=%s v_rows=%d block=%u layers=%u kv_heads=%u head_dim=%u rot=%u "
                     "rope=%d base=%.9g llama3=%d factor=%.9g low=%.9g high=%.9g orig=%u linear=%.9g%s%s%s",
                     dj_kernels()->name, dj_type_info(e->p.kv_type_k)->name, dj_type_info(e->p.kv_type_v)->name,
                     !model_kv_k_only(m), e->block_size, kv_pool_params(e->pool)->n_layer, hp->n_head_kv, hp->head_dim,
                     hp->n_rot,
                     (int)hp->rope_type, hp->rope_freq_base, (int)hp->rope_llama3, hp->rope_factor,
                     hp->rope_low_freq_factor, hp->rope_high_freq_factor, hp->rope_orig_ctx, hp->rope_linear_scale,
                     e->mtp ? " mtp=1" : "" /* the MTP block's rows in every block, its hidden row in the states */,
                     e->ctx->gpu ? " device=" : "", e->ctx->gpu ? device : "");
    if (n < 0 || (size_t)n + 32 > sizeof desc) return;
    memcpy(desc + n, model_id, 16);
    memcpy(desc + n + 16, exe_id, 16);
    const XXH128_hash_t h0 = XXH3_128bits_withSeed(desc, (size_t)n + 32, 0);
    const XXH128_hash_t h1 = XXH3_128bits_withSeed(desc, (size_t)n + 32, 1);
    struct kv_store_params sp = kv_store_default_params();
    sp.dir = dir;
    sp.max_bytes = e->p.persist_max_bytes;
    memcpy(sp.key, &h0, 16);
    memcpy(sp.key + 16, &h1, 16);
    sp.n_layer = kv_pool_params(e->pool)->n_layer;
    sp.n_embd_kv = hp->n_head_kv * hp->head_dim;
    sp.block_size = e->block_size;
    /* ggml type ids of K and V; bit 16: no V rows (MLA's K-only geometry, persist.h) */
    sp.kv_type = e->p.kv_type_k | e->p.kv_type_v << 8 | (uint32_t)model_kv_k_only(m) << 16;
    sp.block_bytes = e->block_bytes;
    /* about 256 MiB of blocks waiting for the disk, at least 4 */
    sp.queue_max = (size_t)(256u << 20) / e->block_bytes;
    if (sp.queue_max < 4) sp.queue_max = 4;
    if (kv_store_open(&sp, &e->store) != DJ_OK) {
        dj_log(DJ_LOG_WARN, "persistent KV off: %s", dj_last_error());
        e->store = NULL;
        return;
    }
    if (!e->rs_floats || e->rs_floats > UINT32_MAX) return;
    /* hybrid models: recurrent-state checkpoints in a store of their own (another key, so
     * another folder): one record per checkpoint, its payload the whole state (engine_rs_key) */
    const XXH128_hash_t r0 = XXH3_128bits_withSeed(desc, (size_t)n + 32, 2);
    const XXH128_hash_t r1 = XXH3_128bits_withSeed(desc, (size_t)n + 32, 3);
    memcpy(sp.key, &r0, 16);
    memcpy(sp.key + 16, &r1, 16);
    sp.n_layer = hp->n_layer - hp->n_layer_kv;
    sp.n_embd_kv = (uint32_t)e->rs_floats;
    sp.kv_type = DJ_TYPE_F32 | 1u << 17; /* bit 17: a recurrent state, not K/V rows */
    sp.block_bytes = e->rs_floats * sizeof(float);
    sp.queue_max = (size_t)(256u << 20) / sp.block_bytes;
    if (sp.queue_max < 2) sp.queue_max = 2;
    if (kv_store_open(&sp, &e->rs_store) != DJ_OK) {
        dj_log(DJ_LOG_WARN, "persistent recurrent-state checkpoints off: %s", dj_last_error());
        e->rs_store = NULL;
    }
}

enum dj_status engine_create(const struct dj_model *m, const struct dj_engine_params *p, struct dj_engine **out) {
    const struct dj_hparams *hp = &m->hp;
    const struct llama_opt_config *cfg = &p->opt;
    if (cfg->block_size == 0) return dj_fail(DJ_ERR_INVALID, "engine: block size 0");
    const size_t n_embd_kv = (size_t)hp->n_head_kv * hp->head_dim;
    struct dj_engine_params pm = *p;
    model_kv_types(m, &pm.kv_type_k, &pm.kv_type_v);
    p = &pm;
    enum dj_status st = model_kv_check(m, p->kv_type_k, p->kv_type_v);
    if (st) return st;
    /* drafting from the model's MTP block (source mtp): one more pool layer, its rows written by
     * every pass; the last hidden row joins each sequence's recurrent state */
    bool mtp = false;
    if (p->spec.sources & DJ_SPEC_BIT(DJ_SPEC_MTP)) {
        if (model_mtp_check(m) == DJ_OK) mtp = true;
        else dj_log(DJ_LOG_WARN, "%s: source mtp off", dj_last_error());
    }
    uint32_t pool_layers;
    size_t rs_floats;
    model_pool_shape(m, mtp, &pool_layers, &rs_floats);
    const size_t block_bytes = cfg->block_size * (engine_kv_bytes_per_token(m, p->kv_type_k, p->kv_type_v) /
                                                  (hp->n_layer_kv ? hp->n_layer_kv : 1) * pool_layers);
    const uint32_t n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    /* one context: its blocks + one for a copy on write */
    const uint64_t one_ctx = ((uint64_t)n_ctx + cfg->block_size - 1) / cfg->block_size + 1;
    uint64_t max_blocks = cfg->dedup_pool_max;
    if (p->kv_budget_mib < 0)
        return dj_fail(DJ_ERR_INVALID, "KV budget %.3f MiB is negative", p->kv_budget_mib);
    if (p->kv_budget_mib > 0) {
        double blocks = p->kv_budget_mib * 1048576.0 / (double)block_bytes;
        if (blocks < 1.0)
            return dj_fail(DJ_ERR_INVALID,
                           "KV budget %.3f MiB is smaller than one KV block (%.3f MiB: %u positions x %zu bytes of "
                           "K/V per position: %u layers x %s%zu elements)",
                           p->kv_budget_mib, (double)block_bytes / 1048576.0, cfg->block_size, block_bytes / cfg->block_size,
                           pool_layers, model_kv_k_only(m) ? "one K row of " : "K+V rows of 2 x ", n_embd_kv);
        max_blocks = blocks > 1073741824.0 ? 1073741824u : (uint64_t)blocks;
    } else if (p->kv_budget_auto) {
        /* half of what the machine has free now (the weights are mapped already), at least
         * one context */
        const uint64_t avail = mem_available();
        if (avail && one_ctx * block_bytes > avail)
            return dj_fail(DJ_ERR_NOMEM,
                           "not enough memory for one context: %u positions x %zu KiB of K/V per position = %.1f MiB, "
                           "%.1f MiB available; use a smaller -c",
                           n_ctx, block_bytes / cfg->block_size / 1024, (double)(one_ctx * block_bytes) / 1048576.0,
                           (double)avail / 1048576.0);
        max_blocks = avail ? avail / 2 / block_bytes : one_ctx * 4;
        if (max_blocks < one_ctx) max_blocks = one_ctx;
        if (max_blocks > 1073741824u) max_blocks = 1073741824u;
    }
    if (p->gpu) { /* the GPU forward pass: what it does not run yet, and a budget its K/V mirror holds */
        if (p->spec.sources & DJ_SPEC_BIT(DJ_SPEC_MTP))
            return dj_fail(DJ_ERR_UNSUPPORTED, "--device vulkan: MTP drafts do not run on the GPU yet "
                                               "(--spec-sources without mtp)");
        if (cfg->diff_enabled && cfg->diff_mode == LLAMA_OPT_DIFF_APPROX)
            return dj_fail(DJ_ERR_UNSUPPORTED, "--device vulkan: LLAMA_OPT_DIFF_MODE=approx does not run on the GPU yet");
        if (cfg->attn_prune_enabled || cfg->attn_stats_enabled)
            return dj_fail(DJ_ERR_UNSUPPORTED, "--device vulkan: attention statistics and pruning (LLAMA_OPT_ATTN_%s) do "
                           "not run on the GPU yet", cfg->attn_prune_enabled ? "PRUNE_ENABLED" : "STATS_ENABLED");
        uint64_t cap = 0;
        if ((st = ctx_gpu_blocks_max(p->gpu, block_bytes, &cap))) return st;
        if (cap < one_ctx)
            return dj_fail(DJ_ERR_NOMEM, "--device vulkan:%u: its K/V mirror holds %llu blocks of %zu bytes, fewer "
                           "than one context of %u positions needs; use a smaller -c", p->gpu - 1,
                           (unsigned long long)cap, block_bytes, n_ctx);
        if (max_blocks > cap) {
            dj_log(DJ_LOG_INFO, "--device vulkan:%u: KV budget %llu blocks (%.1f MiB), what the device's K/V mirror "
                   "holds", p->gpu - 1, (unsigned long long)cap, (double)(cap * block_bytes) / 1048576.0);
            max_blocks = cap;
        }
    }
    struct dj_engine *e = calloc(1, sizeof *e);
    if (!e) return dj_fail(DJ_ERR_NOMEM, "out of memory creating an engine");
    e->model = m;
    e->cfg = *cfg;
    e->p = *p;
    e->mtp = mtp;
    e->rs_floats = rs_floats;
    if (!mtp) e->p.spec.sources &= ~DJ_SPEC_BIT(DJ_SPEC_MTP);
    if (e->p.n_ubatch == 0) e->p.n_ubatch = 512;
    if (e->p.n_ubatch > n_ctx) e->p.n_ubatch = n_ctx;
    if (e->p.n_batch == 0) e->p.n_batch = e->p.n_ubatch;
    if (e->p.n_seq_idle_max == 0) e->p.n_seq_idle_max = 64;
    e->stats_out = p->stats_out ? p->stats_out : stderr;
    e->block_size = cfg->block_size;
    e->block_bytes = block_bytes;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    struct kv_pool_params pp = {pool_layers, (uint32_t)n_embd_kv, cfg->block_size, (uint32_t)max_blocks,
                                p->kv_type_k, p->kv_type_v, model_kv_k_only(m), rs_floats};
    st = kv_pool_create(&pp, &e->pool);
    if (st) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return st;
    }
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_ubatch = e->p.n_ubatch;
    cp.n_threads = p->n_threads;
    cp.block_size = cfg->block_size;
    cp.pool = e->pool;
    cp.mtp = mtp;
    cp.gpu = p->gpu;
    cp.rope_table_max = cfg->precompute_enabled ? cfg->precompute_rope_max : 0;
    if ((st = ctx_create(m, cp, &e->ctx))) {
        kv_pool_destroy(e->pool);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return st;
    }
    if (hp->rs_floats) { /* a hybrid model: recurrent layers have no K/V rows */
        if (cfg->diff_enabled && cfg->diff_mode == LLAMA_OPT_DIFF_APPROX) {
            engine_destroy(e);
            return dj_fail(DJ_ERR_UNSUPPORTED,
                           "LLAMA_OPT_DIFF_MODE=approx (Tier 2) reuses K/V rows after an edit; the recurrent layers of "
                           "this %s model keep no rows but one state that depends on every earlier token: use "
                           "LLAMA_OPT_DIFF_MODE=exact", hp->n_layer_kv < hp->n_layer ? "hybrid" : "recurrent");
        }
        if (p->spec.sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)) {
            dj_log(DJ_LOG_WARN, "early-exit drafts are not implemented for hybrid models (their recurrent layers "
                                "would need rolling back per layer): source exit off");
            e->p.spec.sources &= ~DJ_SPEC_BIT(DJ_SPEC_EXIT);
        }
        const size_t state_bytes = rs_floats * sizeof(float);
        if (cfg->rs_ckpt_max_mb && kv_ckpt_create(rs_floats, (size_t)cfg->rs_ckpt_max_mb << 20, &e->ckpt) != DJ_OK) {
            engine_destroy(e);
            return dj_fail(DJ_ERR_NOMEM, "out of memory creating the checkpoint store");
        }
        /* every idle engine-owned sequence keeps its live state (its end is a checkpoint too): at
         * most RS_IDLE_BUDGET of them */
        const size_t idle_max = RS_IDLE_BUDGET / state_bytes ? RS_IDLE_BUDGET / state_bytes : 1;
        if (e->p.n_seq_idle_max > idle_max) {
            dj_log(DJ_LOG_INFO, "hybrid model: %zu idle sequences kept (not %u): each holds a %.1f MiB recurrent state",
                   idle_max, e->p.n_seq_idle_max, (double)state_bytes / 1048576.0);
            e->p.n_seq_idle_max = (uint32_t)idle_max;
        }
        /* a draft of k tokens needs k rollback states: at most RS_SNAP_BUDGET of them per completion */
        e->rs_draft_max = RS_SNAP_BUDGET / state_bytes;
        if (e->rs_draft_max < 1) e->rs_draft_max = 1;
    }
    if (cfg->attn_prune_enabled || cfg->attn_stats_enabled) {
        if (hp->mla)
            dj_log(DJ_LOG_WARN, "LLAMA_OPT_ATTN_%s: MLA attention (%s) keeps no statistics yet: off",
                   cfg->attn_prune_enabled ? "PRUNE_ENABLED" : "STATS_ENABLED", m->arch_name);
        else {
            e->attn_on = true;
            e->prune = (struct kv_prune_params){cfg->attn_prune_enabled,
                                                cfg->attn_prune_policy == LLAMA_OPT_PRUNE_H2O ? KV_PRUNE_H2O
                                                                                              : KV_PRUNE_THRESHOLD,
                                                cfg->attn_prune_threshold, cfg->attn_prune_window,
                                                cfg->attn_prune_keep_first, cfg->attn_prune_keep_last,
                                                cfg->attn_prune_budget};
        }
    }
    if (e->cfg.persist_enabled) engine_open_store(e);
    if (e->p.spec.draft_max > DJ_FEED_MAX - 1) e->p.spec.draft_max = DJ_FEED_MAX - 1;
    if (e->p.spec.draft_max == 0) e->p.spec.draft_max = 16;
    if (p->spec.sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)) {
        if (hp->n_layer < 2) {
            dj_log(DJ_LOG_WARN, "early-exit drafts need at least 2 layers (the model has %u): source exit off",
                   hp->n_layer);
            e->p.spec.sources &= ~DJ_SPEC_BIT(DJ_SPEC_EXIT);
        } else if (p->spec.exit_layer >= hp->n_layer) {
            engine_destroy(e);
            return dj_fail(DJ_ERR_INVALID, "--draft-exit-layer %u: the model has %u layers (1 .. %u, or auto)",
                           p->spec.exit_layer, hp->n_layer, hp->n_layer - 1);
        } else if (p->spec.exit_layer) {
            e->exit_layer = p->spec.exit_layer;
            engine_exit_fracs(e, e->exit_layer, &e->exit_a, &e->exit_h);
        }
    }
    if (mtp) engine_mtp_fracs(e, &e->mtp_a, &e->mtp_h);
    spec_policy_init(&e->pol);
    if ((p->spec.sources & DJ_SPEC_BIT(DJ_SPEC_MEMO)) && cfg->memo_enabled && cfg->memo_trie_max > 0 &&
        !(e->memo = spec_memo_create(cfg->memo_trie_max))) {
        engine_destroy(e);
        return dj_fail(DJ_ERR_NOMEM, "out of memory creating the output memo (%u nodes)", cfg->memo_trie_max);
    }
    e->logits = malloc((size_t)hp->n_vocab * sizeof(float));
    e->work = malloc((size_t)hp->n_vocab * sizeof(float));
    e->top = malloc(100 * sizeof *e->top);
    if (!e->logits || !e->work || !e->top) {
        engine_destroy(e);
        return dj_fail(DJ_ERR_NOMEM, "out of memory creating an engine");
    }
    *out = e;
    return DJ_OK;
}

void engine_destroy(struct dj_engine *e) {
    if (!e) return;
    engine_drop_requests(e);
    kv_store_close(e->store); /* writes what is queued */
    kv_store_close(e->rs_store);
    while (e->sessions) engine_session_destroy(e->sessions);
    ctx_free(e->ctx); /* its own sequence lives in the pool: free the context first */
    kv_pool_destroy(e->pool);
    spec_memo_destroy(e->memo);
    kv_ckpt_destroy(e->ckpt);
    free(e->rs_snap);
    free(e->b_snap);
    free(e->rs_puts);
    free(e->logits);
    free(e->work);
    free(e->idle_refs);
    free(e->idle_ids);
    free(e->top);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_out);
    free(e->b_seq);
    free(e->b_logits);
    free(e->b_start);
    free(e->b_hidden);
    free(e->xs.cs);
    free(e->xs.tok);
    free(e->xs.pos);
    free(e->xs.out);
    free(e->xs.seq);
    free(e->xs.hid);
    free(e->xs.lg);
    free(e->ent);
    free(e->text);
    free(e->cancels);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

enum dj_status engine_new_session(struct dj_engine *e, bool anon, struct dj_session **out) {
    struct dj_session *s = calloc(1, sizeof *s);
    if (!s) return dj_fail(DJ_ERR_NOMEM, "out of memory creating a session");
    s->e = e;
    s->anon = anon;
    kv_seq_init(&s->seq, e->pool);
    kv_history_init(&s->hist, e->block_size);
    s->next = e->sessions;
    if (e->sessions) e->sessions->prev = s;
    e->sessions = s;
    *out = s;
    return DJ_OK;
}

enum dj_status engine_session_create(struct dj_engine *e, struct dj_session **out) {
    return engine_new_session(e, false, out);
}

void engine_session_destroy(struct dj_session *s) {
    if (!s) return;
    struct dj_engine *e = s->e;
    DJ_ASSERT(!s->busy);
    if (e->ctx->seq == &s->seq) ctx_set_seq(e->ctx, NULL);
    if (s->prev) s->prev->next = s->next;
    else e->sessions = s->next;
    if (s->next) s->next->prev = s->prev;
    kv_seq_free(&s->seq);
    kv_history_free(&s->hist);
    if (s->attn) kv_attn_free(s->attn);
    free(s->attn);
    ovf_free(&s->ovf);
    free(s);
}

const dj_token *engine_session_tokens(const struct dj_session *s, size_t *n) {
    *n = s->hist.n_tok;
    return s->hist.tok;
}

size_t engine_session_n_blocks(const struct dj_session *s) { return s->seq.n_blocks; }
enum dj_ctx_overflow engine_overflow(const struct dj_engine *e) { return e->p.overflow; }
size_t engine_session_attn(const struct dj_session *s, const float **weight, const uint8_t **skip) {
    *weight = s->attn ? s->attn->weight : NULL;
    *skip = s->attn ? s->attn->skip : NULL;
    return s->attn ? s->attn->n_known : 0;
}
const struct llama_opt_config *engine_config(const struct dj_engine *e) { return &e->cfg; }
void engine_get_stats(const struct dj_engine *e, struct llama_opt_stats *out) {
    *out = e->stats;
    out->precompute_rope_hits = e->ctx->rope_hits; /* counted by the forward pass */
    if (e->store) { /* blocks the writer thread put on disk, or found there: not the failed or dropped ones */
        struct kv_store_stats ks;
        kv_store_get_stats(e->store, &ks);
        out->persist_saves = ks.written + ks.present;
    }
}
void engine_pool_stats(const struct dj_engine *e, struct kv_pool_stats *out) { kv_pool_get_stats(e->pool, out); }
bool engine_persist_on(const struct dj_engine *e) { return e->store != NULL; }
uint32_t engine_block_size(const struct dj_engine *e) { return e->block_size; }
uint32_t engine_n_ctx(const struct dj_engine *e) { return e->ctx->p.n_ctx; }
uint64_t engine_n_forward(const struct dj_engine *e) { return e->n_forward; }

uint32_t engine_n_blocks_idle(struct dj_engine *e) {
    struct kv_pool_stats ps;
    kv_pool_get_stats(e->pool, &ps);
    if (!e->idle_refs) {
        e->idle_refs = calloc(ps.capacity ? ps.capacity : 1, sizeof *e->idle_refs);
        e->idle_ids = malloc((ps.capacity ? ps.capacity : 1) * sizeof *e->idle_ids);
        if (!e->idle_refs || !e->idle_ids) {
            free(e->idle_refs);
            free(e->idle_ids);
            e->idle_refs = NULL;
            e->idle_ids = NULL;
            return 0;
        }
    }
    /* the references idle sessions hold, per block: a block whose every reference is an
     * idle session's is freed (or cached) when those sessions are parked */
    uint32_t n_ids = 0;
    for (const struct dj_session *o = e->sessions; o; o = o->next) {
        if (o->busy) continue;
        for (size_t i = 0; i < o->seq.n_blocks; i++) {
            const uint32_t id = o->seq.table[i];
            if (id >= ps.capacity) continue;
            if (e->idle_refs[id]++ == 0) e->idle_ids[n_ids++] = id;
        }
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_ids; i++) {
        const uint32_t id = e->idle_ids[i];
        n += e->idle_refs[id] == kv_pool_refcount(e->pool, id);
        e->idle_refs[id] = 0;
    }
    return n;
}

void engine_peak_blocks(const struct dj_engine *e, uint32_t *allocated, uint32_t *pinned) {
    *allocated = e->peak_allocated;
    *pinned = e->peak_pinned;
}

/* ---- a turn ----------------------------------------------------------------- */

/* Keeps the first n positions of the session (sequence and history together). */
void session_truncate(struct dj_session *s, size_t n) {
    kv_seq_truncate(&s->seq, n);
    kv_history_truncate(&s->hist, n);
    if (s->n_exact > n) s->n_exact = n;
    if (s->attn) kv_attn_truncate(s->attn, n);
    if (n == 0) ovf_free(&s->ovf);
    const size_t nb = n / s->e->block_size;
    if (s->n_sealed > nb) s->n_sealed = nb;
}

/* ---- attention statistics and pruning (Tier 2) --------------------------------- */

static enum dj_status session_attn(struct dj_engine *e, struct dj_session *s) {
    if (s->attn) return DJ_OK;
    struct kv_attn *a = malloc(sizeof *a);
    if (!a) return dj_fail(DJ_ERR_NOMEM, "out of memory for attention statistics");
    const size_t cap = e->ctx->p.n_ctx / e->block_size + 2;
    enum dj_status st = kv_attn_init(a, e->model->hp.n_head, e->block_size, cap);
    if (st) {
        free(a);
        return st;
    }
    s->attn = a;
    return DJ_OK;
}

enum dj_status engine_attn_begin(struct dj_engine *e, struct dj_session *s, size_t n_prompt) {
    enum dj_status st = session_attn(e, s);
    if (st) return st;
    kv_attn_turn_begin(s->attn, n_prompt ? n_prompt - 1 : KV_ATTN_NO_PROBE);
    s->seq.attn = s->attn;
    return DJ_OK;
}

void engine_attn_end(struct dj_engine *e, struct dj_session *s, struct dj_turn_result *r) {
    struct kv_prune_delta d;
    kv_attn_turn_end(s->attn, s->seq.n_pos, &e->prune, &d);
    s->attn->probe_pos = KV_ATTN_NO_PROBE;
    e->stats.attn_blocks_pruned += d.n_pruned;
    e->stats.attn_tokens_pruned += d.n_pruned * e->block_size;
    e->stats.attn_blocks_restored += d.n_restored;
    r->n_attn_pruned = d.n_pruned * e->block_size;
    r->n_attn_restored += d.n_restored * e->block_size; /* after those the probe restored at once */
}

enum dj_status engine_attn_fork(struct dj_engine *e, const struct dj_session *s0, struct dj_session *s) {
    if (!s0->attn) return DJ_OK;
    enum dj_status st = session_attn(e, s);
    if (st) return st;
    kv_attn_copy(s->attn, s0->attn);
    s->attn->probe_pos = KV_ATTN_NO_PROBE;
    s->seq.attn = s->attn;
    return DJ_OK;
}

/* Drops the pins of the least recently used idle session other than keep
 * that holds anything: its sealed blocks stay cached (found again by chain
 * hash), the rest is freed; an engine-owned one is destroyed.  Returns false
 * when there is none. */
bool engine_park_one(struct dj_engine *e, const struct dj_session *keep) {
    struct dj_session *victim = NULL;
    for (struct dj_session *o = e->sessions; o; o = o->next)
        if (o != keep && !o->busy && o->seq.n_blocks > 0 && (!victim || o->last_used < victim->last_used)) victim = o;
    if (!victim) return false;
    if (victim->anon) engine_session_destroy(victim);
    else session_truncate(victim, 0);
    return true;
}

void engine_park_idle(struct dj_engine *e) {
    while (engine_park_one(e, NULL)) {
    }
}

/* A pool miss: block (chain c, after the block parent whose chain is parent_chain,
 * tokens bt) from the disk store into a fresh pool block, sealed there so other
 * sequences find it in memory next.  Returns its id with one reference (the
 * caller's), or KV_BLOCK_NONE (not on disk, or no memory for it). */
static uint32_t load_block(struct dj_engine *e, uint64_t c, uint64_t parent_chain, uint32_t parent,
                           const dj_token *bt) {
    uint32_t id;
    if (kv_pool_alloc(e->pool, &id) != DJ_OK) return KV_BLOCK_NONE;
    if (!kv_store_get(e->store, c, parent_chain, bt, kv_pool_data(e->pool, id)) ||
        kv_pool_seal(e->pool, id, c, parent, bt) != DJ_OK) {
        kv_pool_unref(e->pool, id); /* not sealed: freed */
        return KV_BLOCK_NONE;
    }
    return id;
}

/* Step 2: full blocks of the prompt found in the pool, from the block that
 * holds position seq.n_pos (see engine.h).  Returns the positions gained. */
static enum dj_status reuse_pool(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                                 size_t *own, size_t *from_store) {
    const size_t bs = e->block_size;
    size_t k = s->seq.n_pos / bs, n_chain;
    const uint64_t *chains = kv_history_chain(&s->hist, &n_chain);
    DJ_ASSERT(n_chain >= k);
    uint64_t chain = k ? chains[k - 1] : s->hist.root;
    uint32_t parent = k ? s->seq.table[k - 1] : KV_BLOCK_NONE;
    bool last_from_disk = false;
    while ((k + 1) * bs <= n) { /* a block ending at the prompt's end: see below */
        const dj_token *bt = prompt + k * bs;
        uint64_t c = kv_hash_chain(chain, bt, bs);
        e->stats.dedup_blocks_total++;
        uint32_t id = kv_pool_lookup(e->pool, c, parent, bt);
        bool from_disk = false;
        if (id == KV_BLOCK_NONE && e->store) {
            id = load_block(e, c, chain, parent, bt);
            from_disk = id != KV_BLOCK_NONE;
        }
        if (id == KV_BLOCK_NONE) break;
        if (s->seq.n_pos > k * bs) { /* a partly matching own block: the pool's is whole */
            session_truncate(s, k * bs);
            *own = k * bs;
        }
        enum dj_status st = kv_seq_append_block(&s->seq, id);
        if (from_disk) kv_pool_unref(e->pool, id); /* load_block's reference: the sequence holds it now */
        if (st) return st;
        if ((st = kv_history_append(&s->hist, bt, bs))) {
            kv_seq_truncate(&s->seq, k * bs);
            return st;
        }
        if (s->n_exact == k * bs) s->n_exact += bs;
        last_from_disk = from_disk;
        if (from_disk) {
            *from_store += bs;
            e->stats.persist_loads++;
            e->stats.persist_tokens_restored += bs;
        } else {
            e->stats.dedup_blocks_hit++;
            e->stats.dedup_tokens_saved += bs;
        }
        chain = c;
        parent = id;
        k++;
    }
    /* The last prompt token is always computed (its logits start the turn).  A block that
     * ends at the prompt's end is still taken, and its last row given back: computing that
     * one token (the block copied on write) costs less than its bs tokens. */
    if (s->seq.n_pos == n) {
        session_truncate(s, n - 1);
        if (last_from_disk) {
            (*from_store)--;
            e->stats.persist_tokens_restored--;
        }
    }
    return DJ_OK;
}

/* Step 5: seals the full blocks not sealed yet, in order.  With
 * LLAMA_OPT_CANON_ENABLED (the default), a block identical to a sealed one
 * (same chain hash, parent and tokens: the same K/V bits, DESIGN.md §1) is
 * dropped for it (canonicalization): one physical block per distinct prefix,
 * and the sessions that computed it chain their next blocks onto one parent.
 *
 * With it off, every block is sealed as it is, twin or not: the session keeps
 * its own copy, and the index may then hold several blocks with one key.  A
 * lookup returns any of them, each the bits a recomputation gives; since the
 * next blocks chain onto their own parent's id, two sessions that computed
 * the same prefix hold two parallel chains.  Sealed, the copy stays findable
 * (the session's own reuse after parking, other sessions), evictable like any
 * cached block, and goes to the disk store, where a second put of a chain
 * finds its file present (kv/persist.h).  Leaving it private instead would
 * keep every later block of the session private too (a block is sealed only
 * after its parent) and out of the store. */
void seal_blocks(struct dj_engine *e, struct dj_session *s) {
    const size_t bs = e->block_size;
    size_t nb;
    const uint64_t *chains = kv_history_chain(&s->hist, &nb);
    DJ_ASSERT(nb == s->seq.n_pos / bs);
    for (size_t b = s->n_sealed; b < nb && (b + 1) * bs <= s->n_exact; b++) { /* approximate rows stay private */
        uint32_t id = s->seq.table[b];
        if (kv_pool_is_sealed(e->pool, id)) {
            if (s->n_sealed == b) s->n_sealed = b + 1;
            continue;
        }
        uint32_t parent = b ? s->seq.table[b - 1] : KV_BLOCK_NONE;
        if (parent != KV_BLOCK_NONE && !kv_pool_is_sealed(e->pool, parent)) return; /* a seal failed */
        const dj_token *bt = s->hist.tok + b * bs;
        uint32_t other = KV_BLOCK_NONE;
        if (e->cfg.canon_enabled) {
            e->stats.canon_entries_total++;
            other = kv_pool_lookup(e->pool, chains[b], parent, bt);
        }
        if (other != KV_BLOCK_NONE) {
            kv_seq_replace_block(&s->seq, b, other); /* ours (not sealed, ours alone) is freed */
            e->stats.canon_entries_deduped++;
            e->stats.canon_bytes_saved += e->block_bytes;
        } else if (kv_pool_seal(e->pool, id, chains[b], parent, bt) != DJ_OK) {
            dj_log(DJ_LOG_WARN, "%s (block %zu stays private)", dj_last_error(), b);
            return;
        } else if (e->store) { /* a copy to the writer thread's queue: no I/O here (saves: engine_get_stats) */
            kv_store_put(e->store, chains[b], b ? chains[b - 1] : s->hist.root, bt, kv_pool_data(e->pool, id));
        }
        if (s->n_sealed == b) s->n_sealed = b + 1;
    }
}

/* ---- Tier 2: approximate reuse after an edit (LLAMA_OPT_DIFF_MODE=approx) ----
 *
 * After steps 1-2 the sequence holds the exact prefix [0, P).  The diff of
 * the session's old tokens against the prompt gives KEEP spans after the
 * edit; their tokens (spans of at least diff_min_unchanged, never the last
 * prompt token) are "mapped": prompt position j was old position o.  Then:
 *
 *   a. rows P..n-1 are appended: mapped ones get the old K (every layer,
 *      rotated by j - o: model_rope_shift) and V; the others zeros;
 *   b. probe (CacheBlend): the unmapped tokens' layer-0 K/V are computed (a
 *      projection, no attention), then every mapped token runs layer 0 and
 *      layer 1's K/V projection; the distance of its fresh layer-1 K to the
 *      reused one says how much the edit changed it;
 *   c. the diff_recompute fraction of mapped tokens with the largest
 *      distance, plus every unmapped token, are recomputed through all
 *      layers at their positions (ctx_decode_at); the rest keep the reused
 *      rows (layers 0-1 fresh from the probe, deeper ones approximate).
 *
 * The rows after P are approximate: s->n_exact stays P, so they (and what is
 * generated after them) are never sealed into the shared pool. */

struct blend_cand {
    double dev;
    uint32_t j;
};

static int cmp_cand(const void *a, const void *b) {
    const struct blend_cand *x = a, *y = b;
    if (x->dev != y->dev) return x->dev > y->dev ? -1 : 1; /* largest deviation first */
    return x->j < y->j ? -1 : x->j > y->j;
}

/* pos/tok = the positions P + j (and their prompt tokens) of [P, P + R)
 * whose src[j] is >= 0 (mapped: mapped true) or < 0; returns how many. */
static size_t gather(const int64_t *src, bool mapped, size_t P, size_t R, const dj_token *prompt, uint32_t *pos,
                     dj_token *tok) {
    size_t m = 0;
    for (size_t j = 0; j < R; j++)
        if ((src[j] >= 0) == mapped) {
            pos[m] = (uint32_t)(P + j);
            tok[m++] = prompt[P + j];
        }
    return m;
}

/* old/n_old and snap: the session's tokens and sequence before the turn.
 * *done: the prompt's K/V and the last position's logits are computed.  A
 * resource failure here is not an error: the turn falls back to exact. */
static enum dj_status approx_reuse(struct dj_engine *e, struct dj_session *s, const dj_token *old, size_t n_old,
                                   const struct kv_seq *snap, const dj_token *prompt, size_t n,
                                   struct dj_turn_result *r, bool *done) {
    const struct dj_hparams *hp = &e->model->hp;
    const size_t P = s->seq.n_pos, bs = e->block_size, R = n - P, kv = (size_t)hp->n_head_kv * hp->head_dim;
    *done = false;
    if (P + 1 >= n) return DJ_OK;
    struct diff_result d;
    if (diff_compute(old, n_old, prompt, n, bs, &d) != DJ_OK) return DJ_OK;
    int64_t *src = malloc(R * sizeof *src);
    uint32_t *pos = malloc(R * sizeof *pos);
    dj_token *tok = malloc(R * sizeof *tok);
    double *dev = malloc(R * sizeof *dev);
    struct blend_cand *cand = malloc(R * sizeof *cand);
    float *krow = malloc(kv * sizeof *krow); /* a K row as floats, for the rotation */
    enum dj_status st = DJ_OK;
    if (!src || !pos || !tok || !dev || !cand || !krow) goto out;
    size_t n_map = 0;
    for (size_t j = 0; j < R; j++) src[j] = -1;
    for (size_t i = 0; i < d.n_spans; i++) {
        const struct diff_span *sp = &d.spans[i];
        if (sp->op != DIFF_KEEP || sp->length < e->cfg.diff_min_unchanged) continue;
        for (size_t k = 0; k < sp->length; k++) {
            const size_t j = sp->curr_start + k;
            if (j < P || j + 1 >= n) continue;
            src[j - P] = (int64_t)(sp->prev_start + k);
            n_map++;
        }
    }
    if (n_map == 0) goto out;

    /* a. rows P..n-1 */
    while ((st = kv_seq_prepare(&s->seq, R)) == DJ_ERR_NOMEM && engine_park_one(e, s)) r->n_parked++;
    if (st) { /* no room for the new rows beside the old ones: compute exactly instead */
        kv_seq_truncate(&s->seq, P);
        st = DJ_OK;
        goto out;
    }
    for (size_t j = 0; j < R; j++)
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            void *kd = kv_seq_k(&s->seq, il, P + j, (uint32_t)bs), *vd = kv_seq_v(&s->seq, il, P + j, (uint32_t)bs);
            if (src[j] < 0) { /* zeros of any K/V type are all-zero bytes */
                memset(kd, 0, kv_pool_k_row_bytes(e->pool));
                if (vd) memset(vd, 0, kv_pool_v_row_bytes(e->pool)); /* NULL: a K-only (MLA) pool */
                continue;
            }
            memcpy(kd, kv_seq_k(snap, il, (size_t)src[j], (uint32_t)bs), kv_pool_k_row_bytes(e->pool));
            if (vd) memcpy(vd, kv_seq_v(snap, il, (size_t)src[j], (uint32_t)bs), kv_pool_v_row_bytes(e->pool));
            const int64_t delta = (int64_t)(P + j) - src[j];
            if (delta) { /* in the cache's type: to floats, rotated, back (one more rounding) */
                kv_row_to_f32(e->p.kv_type_k, kd, krow, kv);
                model_rope_shift_layer(e->model, il, krow, (int)hp->n_head_kv, delta);
                kv_row_from_f32(e->p.kv_type_k, krow, kd, kv);
            }
        }
    kv_seq_advance(&s->seq, R);
    if ((st = kv_history_append(&s->hist, prompt + P, R))) {
        kv_seq_truncate(&s->seq, P);
        goto out;
    }

    /* b. the probe.  A new token's layer-0 K/V is a projection of its
     * embedding at its position: computing it (probe to layer 0) is all the
     * candidates' layer-0 attention needs from the new tokens, which step c
     * recomputes whole anyway.  Then the candidates: layer 0, layer-1 K/V. */
    const size_t n_new = gather(src, false, P, R, prompt, pos, tok);
    if (n_new && (st = ctx_probe_k(e->ctx, tok, pos, n_new, 0, dev))) goto fail;
    const size_t n_cand = gather(src, true, P, R, prompt, pos, tok);
    if ((st = ctx_probe_k(e->ctx, tok, pos, n_cand, hp->n_layer > 1 ? 1 : 0, dev))) goto fail;

    /* c. recompute the new tokens and the candidates that deviate most */
    for (size_t i = 0; i < n_cand; i++) cand[i] = (struct blend_cand){dev[i], pos[i] - (uint32_t)P};
    qsort(cand, n_cand, sizeof *cand, cmp_cand);
    size_t n_sel = (size_t)ceil((double)e->cfg.diff_recompute * (double)n_map);
    if (n_sel > n_map) n_sel = n_map;
    for (size_t i = 0; i < n_sel; i++) src[cand[i].j] = -1;
    const size_t n_c = gather(src, false, P, R, prompt, pos, tok);
    if ((st = ctx_decode_at(e->ctx, tok, pos, n_c, e->logits))) goto fail;

    r->n_reused_approx = n_map - n_sel;
    r->n_blend = n_sel;
    r->n_probed = n_map;
    r->n_computed = n_c;
    e->stats.diff_tokens_approx += n_map - n_sel;
    e->stats.diff_tokens_blend += n_sel;
    e->stats.diff_tokens_probed += n_map;
    *done = true;
    goto out;
fail:
    session_truncate(s, P);
out:
    diff_result_free(&d);
    free(src);
    free(pos);
    free(tok);
    free(dev);
    free(cand);
    free(krow);
    return st;
}

/* ---- hybrid models: recurrent-state checkpoints --------------------------------
 *
 * Steps 1-2 find K/V rows for the prompt's first L positions (the session's own,
 * pool blocks).  A recurrent layer needs its state at L as well; the session holds it
 * only when nothing was truncated or appended (kv_seq_rs_ok).  Otherwise the prompt
 * resumes at the latest checkpoint c <= L of its own tokens: positions [c, L) are
 * computed again, through every layer (a recurrent layer's input there is the output
 * of the attention layers below it), rewriting the same K/V bits; the blocks they
 * fill are matched to the pool's again when sealed (canonicalization). */
/* The on-disk identity of a checkpoint after the first p (> 0) tokens of s's history
 * (p <= hist.n_tok): a record of the block store (kv/persist.h) whose "block" is the
 * last, possibly partial, block of the prefix: tokens [k bs, p) padded with -1 to bs
 * (pad), chained onto the chain hash of the full blocks before it (parent).  The store
 * verifies the parent chain and every padded token: the same guarantee as a K/V block. */
static uint64_t engine_rs_key(const struct dj_engine *e, const struct dj_session *s, size_t p, uint64_t *parent,
                              dj_token *pad) {
    const size_t bs = e->block_size, k = (p - 1) / bs;
    size_t nc;
    const uint64_t *chains = kv_history_chain(&s->hist, &nc);
    DJ_ASSERT(p <= s->hist.n_tok && k <= nc);
    *parent = k ? chains[k - 1] : s->hist.root;
    for (size_t i = 0; i < bs; i++) pad[i] = k * bs + i < p ? s->hist.tok[k * bs + i] : -1;
    return kv_hash_chain(*parent, pad, bs);
}

static void rs_disk_put(struct dj_engine *e, const struct dj_session *s, size_t p, const float *rs) {
    if (!e->rs_store || p == 0 || p > s->hist.n_tok) return;
    dj_token pad[KV_RS_PAD_MAX];
    if (e->block_size > KV_RS_PAD_MAX) return;
    uint64_t parent;
    const uint64_t c = engine_rs_key(e, s, p, &parent, pad);
    kv_store_put(e->rs_store, c, parent, pad, rs); /* copies; the writer thread writes it */
}

/* A checkpoint on disk after p tokens of s's history, with lo < p <= hi: the latest of
 * the last KV_RS_PROBE positions, then of the interval's block boundaries below them.
 * Returns p with the state in out, or 0. */
static size_t rs_disk_find(struct dj_engine *e, const struct dj_session *s, size_t lo, size_t hi, float *out) {
    if (!e->rs_store || e->block_size > KV_RS_PAD_MAX) return 0;
    dj_token pad[KV_RS_PAD_MAX];
    uint64_t parent, c;
    size_t p = hi;
    for (; p > lo && hi - p < KV_RS_PROBE; p--) { /* the ends of earlier prompts and outputs lie anywhere */
        c = engine_rs_key(e, s, p, &parent, pad);
        if (kv_store_get(e->rs_store, c, parent, pad, out)) return p;
    }
    const size_t every = (size_t)e->cfg.rs_ckpt_interval * e->block_size;
    for (size_t b = every ? p / every * every : 0; b > lo; b -= every) { /* further back: the interval's */
        c = engine_rs_key(e, s, b, &parent, pad);
        if (kv_store_get(e->rs_store, c, parent, pad, out)) return b;
    }
    return 0;
}

enum dj_status engine_rs_resume(struct dj_engine *e, struct dj_session *s, const dj_token *prompt,
                                struct dj_turn_result *r) {
    const size_t L = s->seq.n_pos;
    const float *rs = NULL;
    size_t c = L ? kv_ckpt_find(e->ckpt, s->hist.root, prompt, L, 1, &rs) : 0;
    float *disk = NULL;
    if (e->rs_store && c < L && (disk = malloc(e->rs_floats * sizeof *disk))) {
        const size_t d = rs_disk_find(e, s, c, L, disk); /* s->hist holds the prompt's first L tokens */
        if (d > c) {
            c = d;
            rs = disk;
            r->n_reused_ckpt_disk = d;
            if (e->ckpt) kv_ckpt_put(e->ckpt, s->hist.root, s->hist.tok, d, disk); /* found in memory next */
        }
    }
    session_truncate(s, c);
    if (c && kv_seq_rs_set(&s->seq, rs) != DJ_OK) { /* no memory for the state: from the start */
        session_truncate(s, 0);
        c = 0;
        r->n_reused_ckpt_disk = 0;
    }
    free(disk);
    if (c) {
        e->stats.rs_ckpt_hits++;
        e->stats.rs_tokens_restored += c;
    }
    e->stats.rs_tokens_recomputed += L - c;
    /* what is reused is the first c positions: the own prefix first, then pool blocks */
    if (r->n_reused_own > c) r->n_reused_own = c;
    r->n_reused_pool = c - r->n_reused_own;
    if (r->n_reused_disk > r->n_reused_pool) r->n_reused_disk = r->n_reused_pool;
    r->n_reused_ckpt = c;
    r->n_kv_recomputed = L - c;
    return DJ_OK;
}

void engine_rs_checkpoint(struct dj_engine *e, struct dj_session *s) {
    if (s->seq.n_pos == 0 || !kv_seq_rs_ok(&s->seq) || !s->seq.rs || s->hist.n_tok != s->seq.n_pos) return;
    engine_rs_save(e, s, s->seq.n_pos, s->seq.rs);
}

void engine_rs_save(struct dj_engine *e, struct dj_session *s, size_t p, const float *rs) {
    if (e->ckpt && kv_ckpt_put(e->ckpt, s->hist.root, s->hist.tok, p, rs)) e->stats.rs_ckpt_saves++;
    rs_disk_put(e, s, p, rs);
}

/* Steps 1-2 of a prompt on s (and Tier 2): see engine_internal.h. */
enum dj_status engine_reuse_prompt(struct dj_engine *e, struct dj_session *s, const dj_token *prompt, size_t n,
                                   struct dj_turn_result *r, bool *prefilled) {
    enum dj_status st = DJ_OK;
    *prefilled = false;
    /* 1. the session's own prefix */
    size_t own = 0;
    if (e->cfg.diff_enabled) own = diff_common_prefix(s->hist.tok, s->hist.n_tok, prompt, n);
    if (own >= n) own = n - 1;
    /* Tier 2: an edit with tokens after it: keep the old sequence for its KEEP spans */
    struct kv_seq snap = {0};
    dj_token *old = NULL;
    size_t n_old = 0;
    if (e->cfg.diff_enabled && e->cfg.diff_mode == LLAMA_OPT_DIFF_APPROX && own < s->hist.n_tok &&
        n - own > e->cfg.diff_min_unchanged && (old = malloc(s->hist.n_tok * sizeof *old))) {
        if (kv_seq_clone(&snap, &s->seq) == DJ_OK) {
            n_old = s->hist.n_tok;
            memcpy(old, s->hist.tok, n_old * sizeof *old);
        }
    }
    session_truncate(s, own);

    /* 2. pool blocks */
    r->n_reused_disk = 0;
    if (e->cfg.dedup_enabled && (st = reuse_pool(e, s, prompt, n, &own, &r->n_reused_disk))) goto done;
    r->n_reused_own = own;
    r->n_reused_pool = s->seq.n_pos - own;
    /* hybrid models: the recurrent layers resume only where their state is known */
    if (!kv_seq_rs_ok(&s->seq) && (st = engine_rs_resume(e, s, prompt, r))) goto done;

    /* 3. what is left is computed by the scheduler (Tier 2: part of it reused approximately here) */
    r->n_computed = n - s->seq.n_pos;
    if (n_old) {
        ctx_set_seq(e->ctx, &s->seq);
        st = approx_reuse(e, s, old, n_old, &snap, prompt, n, r, prefilled);
        ctx_set_seq(e->ctx, NULL);
        kv_seq_free(&snap);
        n_old = 0;
        if (st) goto done;
    }
    if (e->cfg.diff_enabled) {
        e->stats.diff_tokens_total += n;
        e->stats.diff_tokens_unchanged += r->n_reused_own;
        e->stats.diff_tokens_recomputed += r->n_computed;
    }
done:
    if (n_old) kv_seq_free(&snap); /* a failure before step 3 */
    free(old);
    return st;
}

void engine_spec_counts(const struct dj_engine *e, struct dj_spec_counts *out, uint32_t *memo_nodes,
                        uint32_t *memo_records) {
    if (out) *out = e->spec_tot;
    if (memo_nodes) *memo_nodes = spec_memo_n_nodes(e->memo);
    if (memo_records) *memo_records = spec_memo_n_records(e->memo);
}

double engine_spec_beta(const struct dj_engine *e, size_t n_rows) { return spec_policy_beta(&e->pol, n_rows); }

uint64_t engine_n_forward_prefill(const struct dj_engine *e) { return e->n_forward_prefill; }

static double weight_bytes(const struct dj_weight *w) { return w->data ? (double)w->row_bytes * (double)w->ne1 : 0.0; }

/* Weight bytes one token reads in layer y (a NextN block: with its eh_proj). */
static double layer_bytes(const struct dj_model *m, const struct dj_layer *y) {
    double b = weight_bytes(&y->wq) + weight_bytes(&y->wk) + weight_bytes(&y->wv) + weight_bytes(&y->wo) +
               weight_bytes(&y->w_gate) + weight_bytes(&y->w_up) + weight_bytes(&y->w_down) +
               weight_bytes(&y->ssm_in) + weight_bytes(&y->ssm_qkv) + weight_bytes(&y->ssm_z) +
               weight_bytes(&y->ssm_out) + weight_bytes(&y->ffn_gate_shexp) + weight_bytes(&y->ffn_up_shexp) +
               weight_bytes(&y->ffn_down_shexp) + weight_bytes(&y->nextn_eh_proj);
    if (m->hp.n_expert) /* a token reads the router and its n_expert_used experts */
        b += weight_bytes(&y->ffn_gate_inp) + (weight_bytes(&y->ffn_gate_exps) + weight_bytes(&y->ffn_up_exps) +
                                               weight_bytes(&y->ffn_down_exps)) *
                                                  (double)m->hp.n_expert_used / (double)m->hp.n_expert;
    return b;
}

void engine_exit_fracs(const struct dj_engine *e, uint32_t L, double *a, double *h) {
    const struct dj_model *m = e->model;
    double below = 0.0, all = 0.0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const double b = layer_bytes(m, &m->layers[il]);
        all += b;
        if (il < L) below += b;
    }
    const double head = weight_bytes(&m->output);
    all += head;
    *a = all > 0 ? below / all : 0.0;
    *h = all > 0 ? head / all : 0.0;
}

void engine_mtp_fracs(const struct dj_engine *e, double *a, double *h) {
    const struct dj_model *m = e->model;
    double all = 0.0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) all += layer_bytes(m, &m->layers[il]);
    const struct dj_layer *L = &m->layers[m->hp.n_layer];
    const double head = weight_bytes(L->nextn_head.data ? &L->nextn_head : &m->output);
    all += weight_bytes(&m->output);
    *a = all > 0 ? layer_bytes(m, L) / all : 0.0;
    *h = all > 0 ? head / all : 0.0;
}
