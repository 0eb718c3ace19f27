/*
 * vk_none.c — the Vulkan backend of a build without it (glslc or the Vulkan headers were
 * not found at configure time; `make deps` installs both): no devices, and why.
 */
#include "core/status.h"
#include "kernels/vulkan/vk.h"

static const char why[] = "this deja was built without the Vulkan backend (glslc or vulkan/vulkan.h missing at "
                          "build time: make deps installs glslc and libvulkan-dev)";

bool dj_vk_built(void) { return false; }
enum dj_status dj_vk_devices(struct dj_vk_device_info *out, size_t cap, size_t *n_out) {
    (void)out;
    (void)cap;
    *n_out = 0;
    return DJ_OK;
}
const char *dj_vk_why_none(void) { return why; }
enum dj_status dj_vk_open(int index, struct dj_vk **out) {
    (void)index;
    *out = NULL;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
void dj_vk_close(struct dj_vk *vk) { (void)vk; }
const struct dj_vk_device_info *dj_vk_info(const struct dj_vk *vk) {
    (void)vk;
    return NULL;
}
enum dj_status dj_vk_buf_new(struct dj_vk *vk, size_t bytes, bool host, struct dj_vk_buf **out) {
    (void)vk, (void)bytes, (void)host;
    *out = NULL;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
void dj_vk_buf_free(struct dj_vk *vk, struct dj_vk_buf *b) { (void)vk, (void)b; }
size_t dj_vk_buf_bytes(const struct dj_vk_buf *b) {
    (void)b;
    return 0;
}
enum dj_status dj_vk_write(struct dj_vk *vk, struct dj_vk_buf *b, size_t off, const void *src, size_t n) {
    (void)vk, (void)b, (void)off, (void)src, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_read(struct dj_vk *vk, const struct dj_vk_buf *b, size_t off, void *dst, size_t n) {
    (void)vk, (void)b, (void)off, (void)dst, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
bool dj_vk_matmul_supports(uint32_t wtype) {
    (void)wtype;
    return false;
}
enum dj_status dj_vk_matmul(struct dj_vk *vk, uint32_t wtype, int64_t k, const struct dj_vk_buf *w, size_t w_off,
                            size_t ws, const struct dj_vk_buf *a, size_t a_off, size_t as, struct dj_vk_buf *c,
                            size_t c_off, size_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    (void)vk, (void)wtype, (void)k, (void)w, (void)w_off, (void)ws, (void)a, (void)a_off, (void)as, (void)c;
    (void)c_off, (void)ldc, (void)r0, (void)r1, (void)n_tok;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_rmsnorm(struct dj_vk *vk, const struct dj_vk_buf *x, size_t xs, const struct dj_vk_buf *w,
                             struct dj_vk_buf *y, size_t ys, int64_t n, int64_t n_tok, float eps) {
    (void)vk, (void)x, (void)xs, (void)w, (void)y, (void)ys, (void)n, (void)n_tok, (void)eps;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_rope(struct dj_vk *vk, struct dj_vk_buf *x, size_t x_off, size_t xs, int64_t n_tok, int n_heads,
                          int hd, int n_rot, bool neox, const struct dj_vk_buf *cs, size_t cs_w, const uint32_t *pos) {
    (void)vk, (void)x, (void)x_off, (void)xs, (void)n_tok, (void)n_heads, (void)hd, (void)n_rot, (void)neox;
    (void)cs, (void)cs_w, (void)pos;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_swiglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                            size_t u_off, int64_t n) {
    (void)vk, (void)g, (void)g_off, (void)u, (void)u_off, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_swiglu_oai(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                                size_t u_off, int64_t n) {
    (void)vk, (void)g, (void)g_off, (void)u, (void)u_off, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_sigmoid_mul(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *g,
                                 size_t g_off, int64_t n) {
    (void)vk, (void)y, (void)y_off, (void)g, (void)g_off, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_add_bias(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *b,
                              size_t b_off, int64_t n, int64_t n_rows) {
    (void)vk, (void)y, (void)y_off, (void)b, (void)b_off, (void)n, (void)n_rows;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_scale_rows(struct dj_vk *vk, struct dj_vk_buf *y, int64_t n, int64_t n_rows, const float *f) {
    (void)vk, (void)y, (void)n, (void)n_rows, (void)f;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_add(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *x, size_t x_off,
                         int64_t n) {
    (void)vk, (void)y, (void)y_off, (void)x, (void)x_off, (void)n;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_attn(struct dj_vk *vk, const struct dj_vk_attn_shape *a, const struct dj_vk_buf *q,
                          const struct dj_vk_buf *kv, struct dj_vk_buf *o, int64_t n_tok, const uint32_t *pos,
                          const uint32_t *tab_start, const uint32_t *blocks, size_t n_blocks) {
    (void)vk, (void)a, (void)q, (void)kv, (void)o, (void)n_tok, (void)pos, (void)tab_start, (void)blocks;
    (void)n_blocks;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_geglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u, size_t u_off,
                           int64_t n, const struct dj_vk_buf *tab) {
    (void)vk, (void)g, (void)g_off, (void)u, (void)u_off, (void)n, (void)tab;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_kv_store(struct dj_vk *vk, struct dj_vk_buf *mirror, const struct dj_vk_buf *src, size_t ss,
                              int64_t n_tok, int64_t n_el, bool f16, const uint32_t *word, struct dj_vk_buf *out,
                              size_t out_word) {
    (void)vk, (void)mirror, (void)src, (void)ss, (void)n_tok, (void)n_el, (void)f16, (void)word, (void)out, (void)out_word;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_gather(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, size_t ys, const struct dj_vk_buf *x,
                            size_t x_off, size_t xs, int64_t w, const uint32_t *idx, int64_t n_rows) {
    (void)vk, (void)y, (void)y_off, (void)ys, (void)x, (void)x_off, (void)xs, (void)w, (void)idx, (void)n_rows;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_moe_sum(struct dj_vk *vk, struct dj_vk_buf *x, const struct dj_vk_buf *o, int64_t n, int64_t n_tok,
                             int k, const uint32_t *rows, const float *wts, const struct dj_vk_buf *sh) {
    (void)vk, (void)x, (void)o, (void)n, (void)n_tok, (void)k, (void)rows, (void)wts, (void)sh;
    return dj_fail(DJ_ERR_UNSUPPORTED, "%s", why);
}
enum dj_status dj_vk_sync(struct dj_vk *vk) {
    (void)vk;
    return DJ_OK;
}
