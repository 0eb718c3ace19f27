/*
 * vk.h — the Vulkan compute backend (DESIGN.md §2: kernels/vulkan is the only code that
 * sees Vulkan headers; this header does not include them).
 *
 * The Vulkan loader (libvulkan.so.1) is opened at run time, not linked: a deja binary
 * starts on a machine without it and simply lists no devices.  DJ_VULKAN_LOADER names
 * another loader file.  Shaders are GLSL compiled to SPIR-V by glslc at build time and
 * embedded in the binary (src/kernels/vulkan/shaders); a build without glslc or the
 * Vulkan headers compiles vk_none.c instead, which reports that and lists nothing.
 *
 * What it has: device enumeration, a compute context per device, buffers (device-local
 * weights uploaded through a staging buffer; host-visible activations), and the operations
 * of every layer deja runs — matmul for every weight type, norms, rope, attention over the
 * paged cache (windows, caps, sinks, MLA's latent rows), the FFN activations, the MoE
 * gather and sum, biases, the K/V store — each with its invariance contract.  The model's
 * forward pass over them is src/model/forward_vk.c (docs/ARCHITECTURE.md, "GPU").
 *
 * Exactness: a GPU result need not equal the CPU's bits, but every output element has
 * one fixed reduction order that depends only on its own row, token and position, so on
 * one device and driver a token's result is the same bits alone or batched, in any tile or
 * row range.
 *
 * Errors: every function that can fail returns an enum dj_status and leaves the message
 * in dj_last_error() (core/status.h).
 */
#ifndef DJ_KERNELS_VULKAN_VK_H
#define DJ_KERNELS_VULKAN_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"

/* True when this build has the backend (glslc and the Vulkan headers were found). */
bool dj_vk_built(void);

struct dj_vk_device_info {
    char name[256];
    uint32_t vendor_id, device_id;
    uint32_t api_version;  /* VK_MAKE_API_VERSION form */
    uint32_t driver_version; /* vendor-specific encoding; part of the persistent store's key */
    const char *type;      /* "discrete", "integrated", "virtual", "cpu", "other" */
    uint64_t device_local_bytes; /* the largest device-local heap */
    uint32_t subgroup_size;
    uint64_t max_storage_buffer_range;
    uint32_t max_workgroup_count[3];
};

/* Every device the loader reports, in its order (the N of --device vulkan:N), at most
 * cap of them into out; *n_out = how many there are.  No loader or no device: DJ_OK
 * with *n_out = 0 and dj_vk_why_none() saying why. */
enum dj_status dj_vk_devices(struct dj_vk_device_info *out, size_t cap, size_t *n_out);
/* Why the last dj_vk_devices found nothing ("" when it found devices). */
const char *dj_vk_why_none(void);

struct dj_vk;     /* a device's compute context: queue, pipelines, command buffer */
struct dj_vk_buf; /* a storage buffer on that device */

enum dj_status dj_vk_open(int index, struct dj_vk **out);
void dj_vk_close(struct dj_vk *vk);
const struct dj_vk_device_info *dj_vk_info(const struct dj_vk *vk);

/* host: mapped host-visible memory (activations, results read back); otherwise
 * device-local memory written through a staging copy (weights). */
enum dj_status dj_vk_buf_new(struct dj_vk *vk, size_t bytes, bool host, struct dj_vk_buf **out);
void dj_vk_buf_free(struct dj_vk *vk, struct dj_vk_buf *b);
size_t dj_vk_buf_bytes(const struct dj_vk_buf *b);
/* Copies in or out; they wait for the work recorded so far (dj_vk_sync) first. */
enum dj_status dj_vk_write(struct dj_vk *vk, struct dj_vk_buf *b, size_t off, const void *src, size_t n);
enum dj_status dj_vk_read(struct dj_vk *vk, const struct dj_vk_buf *b, size_t off, void *dst, size_t n);

/* Recorded work: each call appends a dispatch (after a barrier on the previous ones) to
 * the context's command buffer; dj_vk_sync submits it and waits. */

/* Weight types with a matmul shader. */
bool dj_vk_matmul_supports(uint32_t wtype);
/* C[t * ldc + r] = sum_k W[r][k] * A[t * as + k] for rows [r0, r1) and tokens [0, n_tok):
 * W's rows ws bytes apart from byte w_off of w (k elements of wtype each), A and C f32.
 * Element offsets and strides are in floats; a_off/c_off place A and C in their buffers. */
enum dj_status dj_vk_matmul(struct dj_vk *vk, uint32_t wtype, int64_t k, const struct dj_vk_buf *w, size_t w_off,
                            size_t ws, const struct dj_vk_buf *a, size_t a_off, size_t as, struct dj_vk_buf *c,
                            size_t c_off, size_t ldc, int64_t r0, int64_t r1, int64_t n_tok);
/* Y[t] = X[t] / sqrt(mean(X[t]^2) + eps) * w, n elements a token, f32. */
enum dj_status dj_vk_rmsnorm(struct dj_vk *vk, const struct dj_vk_buf *x, size_t xs, const struct dj_vk_buf *w,
                             struct dj_vk_buf *y, size_t ys, int64_t n, int64_t n_tok, float eps);

/* RoPE in place: n_heads heads of hd floats a token (token t at x_off + t * xs), the first
 * n_rot of each rotated by the cos/sin row pos[t] of the table cs (rows of cs_w floats:
 * n_rot/2 cosines then n_rot/2 sines; model/forward.c rope_row's table); neox pairs (i,
 * i + n_rot/2), else (2i, 2i+1).  pos: host memory, n_tok positions (copied). */
enum dj_status dj_vk_rope(struct dj_vk *vk, struct dj_vk_buf *x, size_t x_off, size_t xs, int64_t n_tok, int n_heads,
                          int hd, int n_rot, bool neox, const struct dj_vk_buf *cs, size_t cs_w, const uint32_t *pos);
/* g[i] = silu(g[i]) * u[i] for n floats from g_off / u_off; with oai, gpt-oss's clamped form
 * (model/forward.c swiglu_oai). */
enum dj_status dj_vk_swiglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                            size_t u_off, int64_t n);
enum dj_status dj_vk_swiglu_oai(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                                size_t u_off, int64_t n);
/* y[i] = y[i] * sigmoid(g[i]) for n floats (the hybrids' gated attention). */
enum dj_status dj_vk_sigmoid_mul(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *g,
                                 size_t g_off, int64_t n);
/* y[y_off + r n + i] += b[b_off + i] for n_rows rows of n floats (a bias row on every row). */
enum dj_status dj_vk_add_bias(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *b,
                              size_t b_off, int64_t n, int64_t n_rows);
/* y[r n + i] *= f[r] for n_rows rows of n floats; f: host memory (copied). */
enum dj_status dj_vk_scale_rows(struct dj_vk *vk, struct dj_vk_buf *y, int64_t n, int64_t n_rows, const float *f);
/* y[i] += x[i] for n floats from y_off / x_off. */
enum dj_status dj_vk_add(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *x, size_t x_off,
                         int64_t n);

/* Attention over a paged K/V cache on the device: blocks of blk_stride elements (f32, or
 * f16 with kv_f16), block b's layer rows at b * blk_stride + k_off (K) and + v_off (V),
 * rows row_stride elements apart, kv head j at j * hd in a row. */
struct dj_vk_attn_shape {
    uint32_t n_head, n_kv_head, hd; /* GQA: head h reads kv head h / (n_head / n_kv_head); keys of hd */
    uint32_t bs;                    /* rows a block */
    size_t blk_stride, k_off, v_off, row_stride;
    size_t qs;                      /* floats between tokens in q and o */
    float scale;                    /* the scores' factor (1/sqrt(hd)) */
    bool kv_f16;
    uint32_t n_swa;                 /* a sliding window: token t sees positions (pos[t] - n_swa, pos[t]]; 0: all */
    float softcap;                  /* scores soft-capped: cap tanh(s / cap) (gemma2); 0: none */
    const float *sinks;             /* gpt-oss: n_head sink logits (host memory, copied), or NULL */
    uint32_t vd;                    /* values of vd elements (<= 512); 0: hd (then hd <= 512) */
    size_t os;                      /* floats between tokens in o; 0: qs (then o's heads are vd apart) */
};
/* o[t] = softmax(q[t] K^T * scale) V over positions 0 .. pos[t] of token t's sequence (head h's
 * output at o + t * os + h * vd), whose
 * position j is in block blocks[tab_start[t] + j / bs], row j % bs.  pos, tab_start and
 * blocks are host memory (checked against the cache's size, then copied). */
enum dj_status dj_vk_attn(struct dj_vk *vk, const struct dj_vk_attn_shape *a, const struct dj_vk_buf *q,
                          const struct dj_vk_buf *kv, struct dj_vk_buf *o, int64_t n_tok, const uint32_t *pos,
                          const uint32_t *tab_start, const uint32_t *blocks, size_t n_blocks);
/* g[i] = gelu(g[i]) * u[i] for n floats, GELU through tab (65536 floats: the value of every
 * f16 bit pattern, dj_model.gelu_tab) at g rounded to f16; 0 for g <= -10 and g * u from 10
 * (forward.c geglu, the CPU's f16 table). */
enum dj_status dj_vk_geglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u, size_t u_off,
                           int64_t n, const struct dj_vk_buf *tab);
/* A layer's new K (or V) rows, n_tok of n_el f32 elements in src (ss floats apart), stored in
 * the pool's row format — f32, or f16 (n_el even) rounded as the CPU's kv_row_from_f32 — at
 * word word[t] of mirror (host memory, checked, copied), and packed into out from word
 * out_word (n_tok rows of n_el (f16: n_el / 2) words) for the host's copy. */
enum dj_status dj_vk_kv_store(struct dj_vk *vk, struct dj_vk_buf *mirror, const struct dj_vk_buf *src, size_t ss,
                              int64_t n_tok, int64_t n_el, bool f16, const uint32_t *word, struct dj_vk_buf *out,
                              size_t out_word);
/* Row r of y (from y_off, rows ys floats apart) = row idx[r] of x (from x_off, rows xs floats
 * apart), w floats each, for n_rows rows: a copy of the bits.  idx: host memory (checked,
 * copied), or NULL for row r of x (a strided copy: no index table). */
enum dj_status dj_vk_gather(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, size_t ys, const struct dj_vk_buf *x,
                            size_t x_off, size_t xs, int64_t w, const uint32_t *idx, int64_t n_rows);
/* The MoE layer's weighted sum into the residual: x[t] += w[t,0] o[rows[t,0]] + ... +
 * w[t,k-1] o[rows[t,k-1]] (rows of n floats; the k products added in that order, then x);
 * with sh (n_tok rows of n floats, or NULL) x[t] += (that sum + sh[t]).
 * rows and wts: host memory, n_tok * k each (checked, copied). */
enum dj_status dj_vk_moe_sum(struct dj_vk *vk, struct dj_vk_buf *x, const struct dj_vk_buf *o, int64_t n, int64_t n_tok,
                             int k, const uint32_t *rows, const float *wts, const struct dj_vk_buf *sh);
enum dj_status dj_vk_sync(struct dj_vk *vk);

#endif
