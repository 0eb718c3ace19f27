/*
 * test_vulkan.c — the Vulkan backend's shaders against the scalar reference, and their
 * invariance (src/kernels/vulkan/vk.h).  Runs on whatever device 0 is — lavapipe (Mesa's
 * Vulkan driver on the CPU, installed by `make deps`) on the development machines and in
 * CI.  Without a Vulkan build, loader or device it prints why and exits 77 (SKIP).
 *
 * What it checks, per weight type with a matmul shader (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q6_K, Q4_1, Q5_0, Q5_1, Q5_K, IQ4_NL, MXFP4, Q2_K, Q3_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0; weights quantized by the
 * reference quantizers, or random blocks with sane scales where deja has none):
 *   - dequantization is ggml's, bit for bit: with one-hot activation tokens the product
 *     is the weight itself (one exact fma, exact sums of zeros), compared with == against
 *     dj_ref_dequantize_row at 74 positions per row;
 *   - products with random activations agree with the exact (double) dot of the
 *     dequantized row within 5e-6 * sum |w a|: one invocation sums its row's 512 products
 *     in element order, one fma each (mm.comp).  The worst case of that order is 512 * 2^-24
 *     = 3e-5 of sum |w a|; rounding errors of random sign stay far below it, and 5e-6 is
 *     what is asserted (measured: it holds for every type here);
 *   - invariance, bitwise: a token alone = in a batch of 9, at another tile position (the
 *     batch shifted by one token), rows [5, 20) alone = in all 37 rows;
 *   - the same through device-local buffers written and read by staging copies
 *     (DJ_VK_STAGING=1), RMSNorm against the CPU formula (relative 1e-5) and alone =
 *     batched, and the errors: an unsupported type, a product past its buffers, a device
 *     that does not exist.
 * And the other operations of a decoder layer:
 *   - RoPE (normal and neox pairs) bitwise equal to the CPU's rotation with the same
 *     cos/sin table (the shader forbids contraction), the positions in host memory;
 *   - the residual add bitwise; SwiGLU within 4 ulp-ish (2e-6 relative + 1e-30: the
 *     device's exp is not glibc's expf);
 *   - attention over a paged K/V cache (f32 and f16 rows, GQA, 1 to 3 chunks of 64
 *     positions) against the exact double-precision softmax within 1e-5 of the largest
 *     |v|, and bitwise: a token alone = in a batch of tokens of two sequences, and the same
 *     rows in other blocks (another block table) give the same bits; a block id past
 *     the cache or a table too short is refused before anything runs;
 *   - the same with a sliding window (keys (pos - n_swa, pos]), soft-capped scores
 *     (cap tanh(s / cap)) and sink logits (gpt-oss: a logit without a value in each
 *     head's softmax), against the same reference with the window, the cap and the sinks;
 *   - gpt-oss's clamped SwiGLU within 2e-6, bias rows and per-row factors bitwise;
 *   - kv_store: new K/V rows stored into the cache mirror at their words and packed for the
 *     host, f32 as the bits and f16 bitwise the CPU's rounding (dj_f32_to_fp16) over random
 *     values and the edges (ties, subnormals, overflow, infinities, NaN);
 *   - GELU through the f16 table (geglu) bitwise the CPU's geglu: the table's value at x
 *     rounded to f16 (the shader rounds in integers as core/fp16.h) times u, 0 from -10 down,
 *     x u from 10 up — over random x, the edges, and every f16 step near 1 and -3;
 *   - MLA's attention (one K row of kv_lora + rope a position for all heads, its first kv_lora
 *     the value; DeepSeek's 576 / 512 and a small shape) against the double reference within
 *     1e-5, alone = batched, values past 512 refused;
 *   - the MoE layer's pieces: gather copies rows by index (or, without indices, row r to row
 *     r) bitwise (NaN payloads included),
 *     the weighted sum of a token's expert rows equals the CPU's order (w_0 o_0 + w_1 o_1
 *     + ..., then the residual; no contraction; with shared experts' rows, x + (sum + sh))
 *     bitwise, a token alone = batched, and rows
 *     past the source are refused; RMSNorm in place over heads (the q/k norms) equals the
 *     out-of-place result bitwise.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/ref/ref.h"
#include "kernels/vulkan/vk.h"
#include "test.h"

#define K 512
#define ROWS 37
#define NTOK 9

static uint32_t rng_state = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

static struct dj_vk_buf *upload(struct dj_vk *vk, const void *src, size_t bytes, bool host) {
    struct dj_vk_buf *b = NULL;
    if (dj_vk_buf_new(vk, bytes, host, &b) != DJ_OK) {
        fprintf(stderr, "buf_new: %s\n", dj_last_error());
        return NULL;
    }
    if (dj_vk_write(vk, b, 0, src, bytes) != DJ_OK) {
        fprintf(stderr, "write: %s\n", dj_last_error());
        dj_vk_buf_free(vk, b);
        return NULL;
    }
    return b;
}

/* C (ldc = ROWS, n_tok tokens from token t0 of a) for rows [r0, r1), read back into out */
static bool run_mm(struct dj_vk *vk, uint32_t type, const struct dj_vk_buf *w, size_t w_off, size_t ws,
                   const struct dj_vk_buf *a, int64_t t0, int64_t n_tok, int64_t r0, int64_t r1, float *out,
                   bool host) {
    struct dj_vk_buf *c = NULL;
    if (dj_vk_buf_new(vk, (size_t)n_tok * ROWS * sizeof(float), host, &c) != DJ_OK) return false;
    float *zero = calloc((size_t)n_tok * ROWS, sizeof(float));
    bool ok = zero && dj_vk_write(vk, c, 0, zero, (size_t)n_tok * ROWS * sizeof(float)) == DJ_OK &&
              dj_vk_matmul(vk, type, K, w, w_off, ws, a, (size_t)t0 * K, K, c, 0, ROWS, r0, r1, n_tok) == DJ_OK &&
              dj_vk_sync(vk) == DJ_OK && dj_vk_read(vk, c, 0, out, (size_t)n_tok * ROWS * sizeof(float)) == DJ_OK;
    if (!ok) fprintf(stderr, "matmul %s: %s\n", dj_type_name(type), dj_last_error());
    free(zero);
    dj_vk_buf_free(vk, c);
    return ok;
}

/* A row of random blocks of a type deja has no quantizer for (the i-quants' grids are searched
 * by llama.cpp's quantizer, not ours; NVFP4): random bytes, every f16 scale set to a sane value
 * (IQ1_M's is spread over its scale words' top nibbles: the sign and exponent nibble fixed). */
static void random_blocks(uint32_t type, uint8_t *dst, int64_t k) {
    const struct dj_type_info *ti = dj_type_info(type);
    const size_t nb = (size_t)(k / ti->blck);
    for (size_t i = 0; i < nb * ti->bytes; i++) dst[i] = (uint8_t)(frand() * 128.0f + 128.0f);
    for (size_t bi = 0; bi < nb; bi++) {
        uint8_t *b = dst + bi * ti->bytes;
        if (type == DJ_TYPE_IQ1_M) {
            b[55] = (uint8_t)((b[55] & 0x0F) | 0x20); /* d in [2^-7, 2^-6) */
        } else if (type != DJ_TYPE_NVFP4) { /* the others: an f16 d first */
            const uint16_t d = dj_f32_to_fp16(0.01f + 0.005f * frand());
            memcpy(b, &d, 2);
        }
    }
}

static void test_type(struct dj_vk *vk, uint32_t type, bool host) {
    size_t rb;
    CHECK(dj_row_bytes(type, K, &rb));
    const size_t w_off = 6; /* rows start off word boundaries: the shaders read bytes out of words */
    uint8_t *wq = calloc(1, w_off + ROWS * rb);
    float *wf = malloc(sizeof(float) * K), *deq = malloc(sizeof(float) * ROWS * K);
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < K; i++) wf[i] = frand() * (1.0f + (float)(r % 5));
        if (type == DJ_TYPE_F32) memcpy(wq + w_off + r * rb, wf, rb);
        else if (!dj_ref_quantize_row(type, wf, wq + w_off + r * rb, K)) random_blocks(type, wq + w_off + r * rb, K);
        CHECK(dj_ref_dequantize_row(type, wq + w_off + r * rb, deq + (size_t)r * K, K));
    }
    struct dj_vk_buf *w = upload(vk, wq, w_off + ROWS * rb, host);
    CHECKF(w, "%s: upload", dj_type_name(type));
    if (!w) goto out;

    /* one-hot tokens: the products are the dequantized weights, exactly */
    {
        enum { NH = K / 7 + 1 };
        float *a1 = calloc((size_t)NH * K, sizeof(float)), *c1 = malloc(sizeof(float) * NH * ROWS);
        for (int t = 0; t < NH; t++) a1[(size_t)t * K + 7 * t] = 1.0f;
        struct dj_vk_buf *ab = upload(vk, a1, (size_t)NH * K * sizeof(float), true);
        struct dj_vk_buf *cb = NULL;
        int bad = 0;
        if (ab && dj_vk_buf_new(vk, (size_t)NH * ROWS * sizeof(float), true, &cb) == DJ_OK &&
            dj_vk_matmul(vk, type, K, w, w_off, rb, ab, 0, K, cb, 0, ROWS, 0, ROWS, NH) == DJ_OK &&
            dj_vk_read(vk, cb, 0, c1, (size_t)NH * ROWS * sizeof(float)) == DJ_OK) {
            for (int t = 0; t < NH; t++)
                for (int r = 0; r < ROWS; r++)
                    if (c1[t * ROWS + r] != deq[(size_t)r * K + 7 * t] && bad++ < 3)
                        fprintf(stderr, "%s: row %d element %d: GPU %.9g, ggml %.9g\n", dj_type_name(type), r, 7 * t,
                                c1[t * ROWS + r], deq[(size_t)r * K + 7 * t]);
        } else {
            bad = -1;
            fprintf(stderr, "%s one-hot: %s\n", dj_type_name(type), dj_last_error());
        }
        CHECKF(bad == 0, "%s: %d dequantized weights differ from ggml's", dj_type_name(type), bad);
        dj_vk_buf_free(vk, cb);
        dj_vk_buf_free(vk, ab);
        free(a1);
        free(c1);
    }

    /* random activations: NTOK + 1 tokens, so the batch can be shifted by one */
    float *a = malloc(sizeof(float) * (NTOK + 1) * K);
    for (int i = 0; i < (NTOK + 1) * K; i++) a[i] = frand();
    struct dj_vk_buf *ab = upload(vk, a, sizeof(float) * (NTOK + 1) * K, true);
    float *batch = malloc(sizeof(float) * NTOK * ROWS), *one = malloc(sizeof(float) * ROWS),
          *shift = malloc(sizeof(float) * NTOK * ROWS), *part = malloc(sizeof(float) * ROWS);
    if (ab && run_mm(vk, type, w, w_off, rb, ab, 0, NTOK, 0, ROWS, batch, host)) {
        int bad = 0;
        for (int t = 0; t < NTOK; t++)
            for (int r = 0; r < ROWS; r++) {
                double e = 0, m = 0;
                for (int i = 0; i < K; i++) {
                    const double p = (double)deq[(size_t)r * K + i] * a[(size_t)t * K + i];
                    e += p;
                    m += fabs(p);
                }
                if (fabs(batch[t * ROWS + r] - e) > 5e-6 * m + 1e-30 && bad++ < 3)
                    fprintf(stderr, "%s: token %d row %d: GPU %.9g, exact %.9g (sum |wa| %.3g)\n", dj_type_name(type),
                            t, r, batch[t * ROWS + r], e, m);
            }
        CHECKF(bad == 0, "%s: %d products outside the bound", dj_type_name(type), bad);
        /* alone = batched, at another tile position, and a row range alone */
        int diff = 0;
        for (int t = 0; t < NTOK; t++) {
            if (!run_mm(vk, type, w, w_off, rb, ab, t, 1, 0, ROWS, one, host)) {
                diff = -1;
                break;
            }
            diff += memcmp(one, batch + t * ROWS, sizeof(float) * ROWS) != 0;
        }
        CHECKF(diff == 0, "%s: %d tokens differ alone and batched", dj_type_name(type), diff);
        /* tokens 1..NTOK: token t of the batch now sits at position t - 1 of its tile */
        if (run_mm(vk, type, w, w_off, rb, ab, 1, NTOK, 0, ROWS, shift, host))
            CHECKF(!memcmp(shift, batch + ROWS, sizeof(float) * (NTOK - 1) * ROWS), "%s: a shifted batch differs",
                   dj_type_name(type));
        else
            CHECK(0);
        if (run_mm(vk, type, w, w_off, rb, ab, 4, 1, 5, 20, part, host))
            CHECKF(!memcmp(part + 5, batch + 4 * ROWS + 5, sizeof(float) * 15), "%s: rows 5-19 alone differ",
                   dj_type_name(type));
        else
            CHECK(0);
    } else {
        CHECKF(0, "%s: matmul failed", dj_type_name(type));
    }
    dj_vk_buf_free(vk, ab);
    free(a);
    free(batch);
    free(one);
    free(shift);
    free(part);
out:
    dj_vk_buf_free(vk, w);
    free(wq);
    free(wf);
    free(deq);
}

static void test_rmsnorm(struct dj_vk *vk) {
    enum { N = 300, NT = 5 };
    float x[NT * N], wn[N], y[NT * N], y1[N];
    for (int i = 0; i < NT * N; i++) x[i] = frand() * 3.0f;
    for (int i = 0; i < N; i++) wn[i] = frand();
    struct dj_vk_buf *xb = upload(vk, x, sizeof x, true), *wb = upload(vk, wn, sizeof wn, true), *yb = NULL;
    CHECK(xb && wb && dj_vk_buf_new(vk, sizeof y, true, &yb) == DJ_OK);
    if (!yb) goto out;
    CHECK(dj_vk_rmsnorm(vk, xb, N, wb, yb, N, N, NT, 1e-5f) == DJ_OK);
    CHECK(dj_vk_read(vk, yb, 0, y, sizeof y) == DJ_OK);
    int bad = 0;
    for (int t = 0; t < NT; t++) {
        double s = 0;
        for (int i = 0; i < N; i++) s += (double)x[t * N + i] * x[t * N + i];
        const double sc = 1.0 / sqrt(s / N + 1e-5);
        for (int i = 0; i < N; i++) {
            const double e = x[t * N + i] * sc * wn[i];
            if (fabs(y[t * N + i] - e) > 1e-5 * fabs(e) + 1e-7 && bad++ < 3)
                fprintf(stderr, "rmsnorm: token %d element %d: GPU %.9g, exact %.9g\n", t, i, y[t * N + i], e);
        }
    }
    CHECKF(bad == 0, "rmsnorm: %d elements outside 1e-5", bad);
    /* token 3 alone (its x rows as a buffer of one token) = in the batch */
    struct dj_vk_buf *x1 = upload(vk, x + 3 * N, sizeof(float) * N, true), *y1b = NULL;
    CHECK(x1 && dj_vk_buf_new(vk, sizeof y1, true, &y1b) == DJ_OK);
    if (x1 && y1b) {
        CHECK(dj_vk_rmsnorm(vk, x1, N, wb, y1b, N, N, 1, 1e-5f) == DJ_OK);
        CHECK(dj_vk_read(vk, y1b, 0, y1, sizeof y1) == DJ_OK);
        CHECK(!memcmp(y1, y + 3 * N, sizeof y1));
    }
    dj_vk_buf_free(vk, x1);
    dj_vk_buf_free(vk, y1b);
out:
    dj_vk_buf_free(vk, xb);
    dj_vk_buf_free(vk, wb);
    dj_vk_buf_free(vk, yb);
}


static void test_rope_add_swiglu(struct dj_vk *vk) {
    enum { NT = 3, NH = 4, HD = 16, NROT = 12, W = NROT };
    float x[NT * NH * HD], cs[40 * W], y[NT * NH * HD];
    const uint32_t pos[NT] = {0, 17, 39};
    for (int i = 0; i < NT * NH * HD; i++) x[i] = frand() * 4.0f;
    for (int p = 0; p < 40; p++)
        for (int i = 0; i < NROT / 2; i++) {
            const double th = p * pow(10000.0, -2.0 * i / NROT);
            cs[p * W + i] = (float)cos(th);
            cs[p * W + NROT / 2 + i] = (float)sin(th);
        }
    for (int neox = 0; neox < 2; neox++) {
        struct dj_vk_buf *xb = upload(vk, x, sizeof x, true), *cb = upload(vk, cs, sizeof cs, true);
        CHECK(xb && cb && dj_vk_rope(vk, xb, 0, NH * HD, NT, NH, HD, NROT, neox, cb, W, pos) == DJ_OK);
        CHECK(xb && dj_vk_read(vk, xb, 0, y, sizeof y) == DJ_OK);
        int bad = 0;
        for (int t = 0; t < NT; t++) /* the CPU's rope_rotate, -ffp-contract=off */
            for (int h = 0; h < NH; h++) {
                float v[HD];
                memcpy(v, x + (t * NH + h) * HD, sizeof v);
                const float *c = cs + pos[t] * W, *sn = c + NROT / 2;
                for (int i = 0; i < NROT / 2; i++) {
                    const int a = neox ? i : 2 * i, b = neox ? i + NROT / 2 : 2 * i + 1;
                    const float x0 = v[a], x1 = v[b];
                    volatile float p0 = x0 * c[i], p1 = x1 * sn[i], p2 = x0 * sn[i], p3 = x1 * c[i];
                    v[a] = p0 - p1;
                    v[b] = p2 + p3;
                }
                bad += memcmp(v, y + (t * NH + h) * HD, sizeof v) != 0;
            }
        CHECKF(bad == 0, "rope (neox %d): %d heads differ from the CPU's rotation", neox, bad);
        const uint32_t far[1] = {40}; /* past the table */
        CHECK(xb && dj_vk_rope(vk, xb, 0, NH * HD, 1, NH, HD, NROT, neox, cb, W, far) == DJ_ERR_INVALID);
        dj_vk_buf_free(vk, xb);
        dj_vk_buf_free(vk, cb);
    }
    /* add and swiglu over n = 1000 floats at offsets */
    enum { N = 1000 };
    float g[N + 7], u[N + 3], r[N + 7];
    for (int i = 0; i < N + 7; i++) g[i] = frand() * 8.0f;
    for (int i = 0; i < N + 3; i++) u[i] = frand() * 2.0f;
    struct dj_vk_buf *gb = upload(vk, g, sizeof g, true), *ub = upload(vk, u, sizeof u, true);
    CHECK(gb && ub && dj_vk_add(vk, gb, 7, ub, 3, N) == DJ_OK && dj_vk_read(vk, gb, 0, r, sizeof r) == DJ_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += r[7 + i] != g[7 + i] + u[3 + i];
    for (int i = 0; i < 7; i++) bad += r[i] != g[i];
    CHECKF(bad == 0, "add: %d elements differ", bad);
    CHECK(gb && dj_vk_write(vk, gb, 0, g, sizeof g) == DJ_OK);
    CHECK(gb && ub && dj_vk_swiglu(vk, gb, 7, ub, 3, N) == DJ_OK && dj_vk_read(vk, gb, 0, r, sizeof r) == DJ_OK);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double v = g[7 + i], e = v / (1.0 + exp(-v)) * u[3 + i];
        if (fabs(r[7 + i] - e) > 2e-6 * fabs(e) + 1e-30 && bad++ < 3)
            fprintf(stderr, "swiglu: %d: GPU %.9g, exact %.9g\n", i, r[7 + i], e);
    }
    CHECKF(bad == 0, "swiglu: %d elements outside 2e-6", bad);
    CHECK(gb && ub && dj_vk_add(vk, gb, 8, ub, 3, N) == DJ_ERR_INVALID); /* past g's end */
    dj_vk_buf_free(vk, gb);
    dj_vk_buf_free(vk, ub);
}

/* A cache of NB blocks of 2 layers x [K | V] x bs rows x (NKV * hd), layer 1 used; sequence
 * A's positions in blocks tabA, B's in tabB.  The same rows are written again in other
 * blocks (tabA2, tabB2) to show the result does not depend on where rows live. */
static void test_attn_case(struct dj_vk *vk, int hd, int bs, int n_a, int n_b, bool f16, uint32_t n_swa, float cap,
                           bool with_sinks) {
    enum { NB = 40, NH = 4, NKV = 2, NL = 2 };
    const size_t row = (size_t)NKV * hd, blk = (size_t)NL * 2 * bs * row;
    const size_t k_off = (size_t)1 * 2 * bs * row, v_off = k_off + (size_t)bs * row; /* layer 1 */
    float *cache = calloc(NB * blk, sizeof(float));
    const int nba = (n_a + bs - 1) / bs, nbb = (n_b + bs - 1) / bs;
    uint32_t blocks[4 * 12];
    CHECK(2 * (nba + nbb) <= 4 * 12 && 2 * (nba + nbb) <= NB);
    /* tables: A, B, then A2, B2 (other ids, reversed order) */
    int nblk = 0;
    for (int i = 0; i < nba; i++) blocks[nblk++] = (uint32_t)(3 + 2 * i);
    for (int i = 0; i < nbb; i++) blocks[nblk++] = (uint32_t)(4 + 2 * i);
    for (int i = 0; i < nba; i++) blocks[nblk++] = (uint32_t)(NB - 1 - i);
    for (int i = 0; i < nbb; i++) blocks[nblk++] = (uint32_t)(NB - 1 - nba - i);
    const int seq_n[2] = {n_a, n_b}, seq_t[2] = {0, nba}, seq_t2[2] = {nba + nbb, 2 * nba + nbb};
    float *kvals = malloc(sizeof(float) * 2 * (size_t)(n_a > n_b ? n_a : n_b) * row * 2);
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < seq_n[s]; j++)
            for (size_t e = 0; e < 2 * row; e++) {
                float v = frand() * (e < row ? 2.0f : 1.0f);
                if (f16) v = dj_fp16_to_f32(dj_f32_to_fp16(v));
                const size_t in_blk = (size_t)(j % bs) * row + (e < row ? k_off + e : v_off + e - row);
                cache[blocks[seq_t[s] + j / bs] * blk + in_blk] = v;
                cache[blocks[seq_t2[s] + j / bs] * blk + in_blk] = v;
            }
    free(kvals);
    /* the tokens: A at 0, n_a - 1, n_a / 2; B at n_b - 1, 1 */
    enum { NT = 5 };
    const uint32_t pos[NT] = {0, (uint32_t)n_a - 1, (uint32_t)n_a / 2, (uint32_t)n_b - 1, 1};
    const int sq[NT] = {0, 0, 0, 1, 1};
    uint32_t ts[NT], ts2[NT];
    for (int t = 0; t < NT; t++) ts[t] = (uint32_t)seq_t[sq[t]], ts2[t] = (uint32_t)seq_t2[sq[t]];
    const size_t qs = (size_t)NH * hd;
    float *q = malloc(sizeof(float) * NT * qs), *o = malloc(sizeof(float) * NT * qs),
          *o2 = malloc(sizeof(float) * NT * qs), *o1 = malloc(sizeof(float) * qs);
    for (size_t i = 0; i < NT * qs; i++) q[i] = frand();
    float sinks[NH];
    for (int h = 0; h < NH; h++) sinks[h] = frand() * 2.0f;
    struct dj_vk_buf *kvb = NULL;
    if (f16) {
        uint16_t *h = malloc(sizeof(uint16_t) * NB * blk);
        for (size_t i = 0; i < NB * blk; i++) h[i] = dj_f32_to_fp16(cache[i]);
        kvb = upload(vk, h, sizeof(uint16_t) * NB * blk, false);
        free(h);
    } else {
        kvb = upload(vk, cache, sizeof(float) * NB * blk, false);
    }
    struct dj_vk_buf *qb = upload(vk, q, sizeof(float) * NT * qs, true), *ob = NULL, *q1 = NULL;
    CHECK(kvb && qb && dj_vk_buf_new(vk, sizeof(float) * NT * qs, true, &ob) == DJ_OK);
    const struct dj_vk_attn_shape sh = {NH, NKV, (uint32_t)hd, (uint32_t)bs, blk, k_off, v_off, row, qs,
                                        1.0f / sqrtf((float)hd), f16, n_swa, cap, with_sinks ? sinks : NULL};
    if (!kvb || !qb || !ob) goto out;
    CHECK(dj_vk_attn(vk, &sh, qb, kvb, ob, NT, pos, ts, blocks, (size_t)nblk) == DJ_OK);
    CHECK(dj_vk_read(vk, ob, 0, o, sizeof(float) * NT * qs) == DJ_OK);
    int bad = 0;
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV), n = (int)pos[t] + 1;
            const int j0 = n_swa && n > (int)n_swa ? n - (int)n_swa : 0; /* the window's first key */
            double *sc = malloc(sizeof(double) * n), mx = -INFINITY, sum = 0, vmax = 0;
            for (int j = 0; j < j0; j++) sc[j] = 0;
            for (int j = j0; j < n; j++) {
                const float *kr = cache + blocks[ts[t] + j / bs] * blk + k_off + (size_t)(j % bs) * row + kvh * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)q[t * qs + h * hd + d] * kr[d];
                sc[j] = s * (1.0f / sqrtf((float)hd));
                if (cap != 0) sc[j] = cap * tanh(sc[j] / cap);
                if (sc[j] > mx) mx = sc[j];
            }
            if (with_sinks && sinks[h] > mx) mx = sinks[h];
            if (with_sinks) sum += exp(sinks[h] - mx); /* a logit without a value */
            for (int j = j0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int d = 0; d < hd; d++) {
                double e = 0;
                for (int j = j0; j < n; j++) {
                    const float v = cache[blocks[ts[t] + j / bs] * blk + v_off + (size_t)(j % bs) * row + kvh * hd + d];
                    e += sc[j] / sum * v;
                    if (fabs(v) > vmax) vmax = fabs(v);
                }
                const float g = o[t * qs + h * hd + d];
                if (fabs(g - e) > 1e-5 * vmax && bad++ < 3)
                    fprintf(stderr, "attn hd %d%s: token %d head %d dim %d: GPU %.9g, exact %.9g\n", hd,
                            f16 ? " f16" : "", t, h, d, g, e);
            }
            free(sc);
        }
    CHECKF(bad == 0, "attn hd %d bs %d%s window %u cap %g sinks %d: %d outputs outside 1e-5", hd, bs, f16 ? " f16" : "",
           n_swa, cap, with_sinks, bad);
    /* the same rows in other blocks: the same bits */
    CHECK(dj_vk_attn(vk, &sh, qb, kvb, ob, NT, pos, ts2, blocks, (size_t)nblk) == DJ_OK);
    CHECK(dj_vk_read(vk, ob, 0, o2, sizeof(float) * NT * qs) == DJ_OK);
    CHECKF(!memcmp(o, o2, sizeof(float) * NT * qs), "attn hd %d: other blocks, other bits", hd);
    /* each token alone */
    int diff = 0;
    for (int t = 0; t < NT; t++) {
        struct dj_vk_buf *q1b = upload(vk, q + t * qs, sizeof(float) * qs, true), *o1b = NULL;
        if (!q1b || dj_vk_buf_new(vk, sizeof(float) * qs, true, &o1b) != DJ_OK ||
            dj_vk_attn(vk, &sh, q1b, kvb, o1b, 1, &pos[t], &ts[t], blocks, (size_t)nblk) != DJ_OK ||
            dj_vk_read(vk, o1b, 0, o1, sizeof(float) * qs) != DJ_OK)
            diff = -100;
        else
            diff += memcmp(o1, o + t * qs, sizeof(float) * qs) != 0;
        dj_vk_buf_free(vk, q1b);
        dj_vk_buf_free(vk, o1b);
    }
    CHECKF(diff == 0, "attn hd %d: %d tokens differ alone and batched", hd, diff);
    /* refusals: a block past the cache, a table too short */
    const uint32_t bad_blocks[1] = {NB}, zero = 0, late = (uint32_t)bs;
    CHECK(dj_vk_attn(vk, &sh, qb, kvb, ob, 1, &zero, &zero, bad_blocks, 1) == DJ_ERR_INVALID);
    CHECK(dj_vk_attn(vk, &sh, qb, kvb, ob, 1, &late, &zero, blocks, 1) == DJ_ERR_INVALID);
out:
    dj_vk_buf_free(vk, kvb);
    dj_vk_buf_free(vk, qb);
    dj_vk_buf_free(vk, ob);
    dj_vk_buf_free(vk, q1);
    free(cache);
    free(q);
    free(o);
    free(o2);
    free(o1);
}

/* MLA's attention (deepseek2, absorbed): one K row of D = kv_lora + rope floats a position,
 * shared by all heads (n_kv_head 1), the value its first VD = kv_lora; outputs VD a head, H VD
 * a token.  Against the double reference within 1e-5 of the largest |v|; a token alone =
 * batched.  DeepSeek's real shape (576 / 512) and a small one. */
static void test_attn_mla(struct dj_vk *vk, int D, int VD, int n_pos) {
    enum { H = 4, BS = 16, NB = 12, NT = 3 };
    const size_t blk = (size_t)BS * D;
    float *cache = calloc(NB * blk, sizeof(float));
    uint32_t blocks[NB];
    const int nblk = (n_pos + BS - 1) / BS;
    CHECK(nblk <= NB);
    for (int i = 0; i < nblk; i++) blocks[i] = (uint32_t)((i * 5 + 3) % NB);
    for (int j = 0; j < n_pos; j++)
        for (int e = 0; e < D; e++) cache[blocks[j / BS] * blk + (size_t)(j % BS) * D + e] = frand();
    const uint32_t pos[NT] = {0, (uint32_t)n_pos / 2, (uint32_t)n_pos - 1}, ts[NT] = {0, 0, 0};
    float *q = malloc(sizeof(float) * NT * H * D), *o = malloc(sizeof(float) * NT * H * VD),
          *o1 = malloc(sizeof(float) * H * VD);
    for (int i = 0; i < NT * H * D; i++) q[i] = frand() * 0.3f;
    struct dj_vk_buf *kvb = upload(vk, cache, sizeof(float) * NB * blk, false), *qb = upload(vk, q, sizeof(float) * NT * H * D, true),
                     *ob = NULL;
    CHECK(kvb && qb && dj_vk_buf_new(vk, sizeof(float) * NT * H * VD, true, &ob) == DJ_OK);
    const float scale = 0.07f;
    const struct dj_vk_attn_shape sh = {H, 1, (uint32_t)D, BS, blk, 0, 0, (size_t)D, (size_t)H * D, scale, false, 0, 0,
                                        NULL, (uint32_t)VD, (size_t)H * VD};
    CHECK(kvb && qb && ob && dj_vk_attn(vk, &sh, qb, kvb, ob, NT, pos, ts, blocks, (size_t)nblk) == DJ_OK &&
          dj_vk_read(vk, ob, 0, o, sizeof(float) * NT * H * VD) == DJ_OK);
    int bad = 0;
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < H; h++) {
            const int n = (int)pos[t] + 1;
            double *sc = malloc(sizeof(double) * n), mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                const float *kr = cache + blocks[j / BS] * blk + (size_t)(j % BS) * D;
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)q[(t * H + h) * D + d] * kr[d];
                sc[j] = s * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int d = 0; d < VD; d++) {
                double e = 0;
                for (int j = 0; j < n; j++) e += sc[j] / sum * cache[blocks[j / BS] * blk + (size_t)(j % BS) * D + d];
                bad += fabs(o[(t * H + h) * VD + d] - e) > 1e-5;
            }
            free(sc);
        }
    CHECKF(bad == 0, "attn MLA %d/%d: %d outputs outside 1e-5", D, VD, bad);
    int diff = 0;
    for (int t = 0; t < NT; t++) {
        struct dj_vk_buf *q1 = upload(vk, q + t * H * D, sizeof(float) * H * D, true), *o1b = NULL;
        if (!q1 || dj_vk_buf_new(vk, sizeof(float) * H * VD, true, &o1b) != DJ_OK ||
            dj_vk_attn(vk, &sh, q1, kvb, o1b, 1, &pos[t], &ts[t], blocks, (size_t)nblk) != DJ_OK ||
            dj_vk_read(vk, o1b, 0, o1, sizeof(float) * H * VD) != DJ_OK)
            diff = -100;
        else
            diff += memcmp(o1, o + t * H * VD, sizeof(float) * H * VD) != 0;
        dj_vk_buf_free(vk, q1);
        dj_vk_buf_free(vk, o1b);
    }
    CHECKF(diff == 0, "attn MLA %d/%d: %d tokens differ alone and batched", D, VD, diff);
    struct dj_vk_attn_shape wide = sh;
    wide.vd = 513;
    CHECK(kvb && dj_vk_attn(vk, &wide, qb, kvb, ob, 1, pos, ts, blocks, (size_t)nblk) == DJ_ERR_INVALID);
    dj_vk_buf_free(vk, kvb);
    dj_vk_buf_free(vk, qb);
    dj_vk_buf_free(vk, ob);
    free(cache);
    free(q);
    free(o);
    free(o1);
}

static void test_attn(struct dj_vk *vk) {
    test_attn_mla(vk, 40, 32, 37);
    test_attn_mla(vk, 576, 512, 150);
    test_attn_case(vk, 8, 4, 11, 6, false, 0, 0, false);
    test_attn_case(vk, 80, 16, 150, 70, false, 0, 0, false); /* 3 chunks; hd past 64: two dims a thread */
    test_attn_case(vk, 80, 16, 150, 70, true, 0, 0, false);
    /* gemma: a sliding window (from a key past a block's start: 150 - 70 = 80 is block 5's,
     * 150 - 67 = 83 is not; 2 chunks), soft-capped scores (gemma2's 50, and 1: most capped) */
    test_attn_case(vk, 80, 16, 150, 70, false, 67, 0, false);
    test_attn_case(vk, 32, 16, 150, 70, true, 16, 50.0f, false);
    test_attn_case(vk, 32, 4, 40, 30, false, 0, 1.0f, false);
    /* gpt-oss: sink logits (and with a window of 16, as its sliding layers) */
    test_attn_case(vk, 64, 16, 150, 70, false, 0, 0, true);
    test_attn_case(vk, 64, 16, 150, 70, true, 16, 0, true);
}

static float gelu_ref(float x) { /* the tanh form, as src/model/gemma.c's table */
    return (float)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * (double)x * x * x))));
}

static void test_geglu(struct dj_vk *vk) {
    enum { N = 3000 };
    float *tab = malloc(65536 * sizeof(float)), g[N], u[N], r[N];
    for (uint32_t h = 0; h < 65536; h++) tab[h] = dj_fp16_to_f32(dj_f32_to_fp16(gelu_ref(dj_fp16_to_f32((uint16_t)h))));
    for (int i = 0; i < N; i++) {
        g[i] = i < 2000 ? frand() * 12.0f /* past -10 and 10 at both ends */
                        : (i < 2500 ? 1.0f : -3.0f) + (float)(i % 500) * 0x1p-12f; /* ties between f16 steps */
        u[i] = frand() * 2.0f;
    }
    g[0] = -10.0f, g[1] = 10.0f, g[2] = 9.999f, g[3] = -9.999f, g[4] = 0.0f, g[5] = 1e-9f;
    struct dj_vk_buf *tb = upload(vk, tab, 65536 * sizeof(float), false), *gb = upload(vk, g, sizeof g, true),
                     *ub = upload(vk, u, sizeof u, true);
    CHECK(tb && gb && ub && dj_vk_geglu(vk, gb, 0, ub, 0, N, tb) == DJ_OK && dj_vk_read(vk, gb, 0, r, sizeof r) == DJ_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) { /* forward.c geglu, -ffp-contract=off */
        const float x = g[i], want = x <= -10.0f ? 0.0f : x >= 10.0f ? x * u[i] : tab[dj_f32_to_fp16(x)] * u[i];
        if (memcmp(&r[i], &want, 4) && bad++ < 3)
            fprintf(stderr, "geglu: x %.9g u %.9g: GPU %.9g, CPU %.9g\n", x, u[i], r[i], want);
    }
    CHECKF(bad == 0, "geglu: %d of %d elements differ from the CPU's", bad, N);
    CHECK(gb && ub && dj_vk_geglu(vk, gb, 0, ub, 0, N, gb) == DJ_ERR_INVALID); /* a table too small */
    dj_vk_buf_free(vk, tb);
    dj_vk_buf_free(vk, gb);
    dj_vk_buf_free(vk, ub);
    free(tab);
}

static void test_moe_ops(struct dj_vk *vk) {
    enum { N = 70, NT = 5, KS = 3, NR = NT * KS, NX = 9 };
    /* gather: rows of N words of x (NX rows, 80 apart, from word 4) by index, NaN payloads kept */
    uint32_t x[4 + 80 * NX], y[NR * N + 2], idx[NR];
    for (size_t i = 0; i < sizeof x / 4; i++) x[i] = 0x7fc00000u | (uint32_t)(i * 2654435761u >> 12);
    for (int r = 0; r < NR; r++) idx[r] = (uint32_t)(r * 7 % NX);
    struct dj_vk_buf *xb = upload(vk, x, sizeof x, true), *yb = NULL;
    CHECK(dj_vk_buf_new(vk, sizeof y, true, &yb) == DJ_OK);
    CHECK(xb && yb && dj_vk_gather(vk, yb, 2, N, xb, 4, 80, N, idx, NR) == DJ_OK);
    CHECK(yb && dj_vk_read(vk, yb, 0, y, sizeof y) == DJ_OK);
    int bad = 0;
    for (int r = 0; r < NR; r++) bad += memcmp(y + 2 + r * N, x + 4 + idx[r] * 80, N * 4) != 0;
    CHECKF(bad == 0, "gather: %d rows differ", bad);
    { /* into rows N + 3 words apart: the rows land there, the 3 words between stay */
        uint32_t *z = calloc(NR * (N + 3), 4), *got = malloc(NR * (N + 3) * 4);
        struct dj_vk_buf *zb = upload(vk, z, NR * (N + 3) * 4, true);
        CHECK(zb && xb && dj_vk_gather(vk, zb, 0, N + 3, xb, 4, 80, N, idx, NR) == DJ_OK &&
              dj_vk_read(vk, zb, 0, got, NR * (N + 3) * 4) == DJ_OK);
        int bad2 = 0;
        for (int r = 0; r < NR; r++) {
            bad2 += memcmp(got + r * (N + 3), x + 4 + idx[r] * 80, N * 4) != 0;
            bad2 += got[r * (N + 3) + N] != 0 || got[r * (N + 3) + N + 1] != 0 || got[r * (N + 3) + N + 2] != 0;
        }
        CHECKF(bad2 == 0, "gather into strided rows: %d rows wrong", bad2);
        /* no index table: row r of x to row r of y (the strided copies of MLA and gated attention) */
        CHECK(zb && xb && dj_vk_gather(vk, zb, 0, N + 3, xb, 4, 80, N, NULL, NX) == DJ_OK &&
              dj_vk_read(vk, zb, 0, got, NX * (N + 3) * 4) == DJ_OK);
        bad2 = 0;
        for (int r = 0; r < NX; r++) bad2 += memcmp(got + r * (N + 3), x + 4 + r * 80, N * 4) != 0;
        CHECKF(bad2 == 0, "gather without indices: %d rows wrong", bad2);
        CHECK(zb && xb && dj_vk_gather(vk, zb, 0, N, xb, 4, 80, N, NULL, NX + 1) == DJ_ERR_INVALID);
        dj_vk_buf_free(vk, zb);
        free(z);
        free(got);
    }
    const uint32_t far[1] = {NX};
    CHECK(xb && yb && dj_vk_gather(vk, yb, 0, N, xb, 4, 80, N, far, 1) == DJ_ERR_INVALID);
    CHECK(xb && yb && dj_vk_gather(vk, yb, 3, N, xb, 4, 80, N, idx, NR) == DJ_ERR_INVALID); /* past y's end */
    dj_vk_buf_free(vk, xb);
    dj_vk_buf_free(vk, yb);
    /* moe_sum: NT tokens, KS experts each, rows of the expert outputs in a shuffled order */
    float o[NR * N], res[NT * N], w[NR], got[NT * N], one[N];
    uint32_t rows[NR];
    for (int i = 0; i < NR * N; i++) o[i] = frand() * 3.0f;
    for (int i = 0; i < NT * N; i++) res[i] = frand();
    for (int i = 0; i < NR; i++) {
        w[i] = frand() * 0.5f + 0.5f;
        rows[i] = (uint32_t)((i * 11 + 4) % NR);
    }
    struct dj_vk_buf *ob = upload(vk, o, sizeof o, true), *rb = upload(vk, res, sizeof res, true);
    CHECK(ob && rb && dj_vk_moe_sum(vk, rb, ob, N, NT, KS, rows, w, NULL) == DJ_OK);
    CHECK(rb && dj_vk_read(vk, rb, 0, got, sizeof got) == DJ_OK);
    bad = 0;
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < N; j++) { /* forward.c moe_ffn's sum, -ffp-contract=off */
            float acc = w[t * KS] * o[rows[t * KS] * N + j];
            for (int s = 1; s < KS; s++) {
                const float ws = w[t * KS + s] * o[rows[t * KS + s] * N + j];
                acc = acc + ws;
            }
            bad += got[t * N + j] != res[t * N + j] + acc;
        }
    CHECKF(bad == 0, "moe_sum: %d elements differ from the CPU's order", bad);
    /* token 3 alone (its residual row at 0 of a one-token buffer) = in the batch */
    struct dj_vk_buf *r1 = upload(vk, res + 3 * N, N * sizeof(float), true);
    CHECK(ob && r1 && dj_vk_moe_sum(vk, r1, ob, N, 1, KS, rows + 3 * KS, w + 3 * KS, NULL) == DJ_OK);
    CHECK(r1 && dj_vk_read(vk, r1, 0, one, sizeof one) == DJ_OK);
    CHECK(!memcmp(one, got + 3 * N, sizeof one));
    /* with shared experts' rows: x + (sum + sh) */
    float shr[NT * N], got2[NT * N];
    for (int i = 0; i < NT * N; i++) shr[i] = frand();
    struct dj_vk_buf *shb = upload(vk, shr, sizeof shr, true);
    CHECK(rb && dj_vk_write(vk, rb, 0, res, sizeof res) == DJ_OK);
    CHECK(ob && rb && shb && dj_vk_moe_sum(vk, rb, ob, N, NT, KS, rows, w, shb) == DJ_OK);
    CHECK(rb && dj_vk_read(vk, rb, 0, got2, sizeof got2) == DJ_OK);
    bad = 0;
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < N; j++) {
            float acc = w[t * KS] * o[rows[t * KS] * N + j];
            for (int s = 1; s < KS; s++) {
                const float ws = w[t * KS + s] * o[rows[t * KS + s] * N + j];
                acc = acc + ws;
            }
            bad += got2[t * N + j] != res[t * N + j] + (acc + shr[t * N + j]);
        }
    CHECKF(bad == 0, "moe_sum with shared rows: %d elements differ from the CPU's order", bad);
    dj_vk_buf_free(vk, shb);
    const uint32_t bad_rows[KS] = {0, NR, 1};
    CHECK(ob && r1 && dj_vk_moe_sum(vk, r1, ob, N, 1, KS, bad_rows, w, NULL) == DJ_ERR_INVALID);
    dj_vk_buf_free(vk, ob);
    dj_vk_buf_free(vk, rb);
    dj_vk_buf_free(vk, r1);
    /* RMSNorm in place over 6 heads of 32 (the q/k norms) = out of place */
    enum { HD = 32, NHD = 6 };
    float h[NHD * HD], nw[HD], a[NHD * HD], b[NHD * HD];
    for (int i = 0; i < NHD * HD; i++) h[i] = frand() * 2.0f;
    for (int i = 0; i < HD; i++) nw[i] = frand() + 1.5f;
    struct dj_vk_buf *hb = upload(vk, h, sizeof h, true), *wb = upload(vk, nw, sizeof nw, true), *ab = NULL;
    CHECK(dj_vk_buf_new(vk, sizeof a, true, &ab) == DJ_OK);
    CHECK(hb && wb && ab && dj_vk_rmsnorm(vk, hb, HD, wb, ab, HD, HD, NHD, 1e-6f) == DJ_OK &&
          dj_vk_rmsnorm(vk, hb, HD, wb, hb, HD, HD, NHD, 1e-6f) == DJ_OK);
    CHECK(ab && hb && dj_vk_read(vk, ab, 0, a, sizeof a) == DJ_OK && dj_vk_read(vk, hb, 0, b, sizeof b) == DJ_OK);
    CHECKF(!memcmp(a, b, sizeof a), "rmsnorm in place differs from out of place");
    dj_vk_buf_free(vk, hb);
    dj_vk_buf_free(vk, wb);
    dj_vk_buf_free(vk, ab);
}

/* swiglu_oai against forward.c's swiglu_oai formula (2e-6: the device's exp); add_bias and
 * scale_rows bitwise. */
static void test_bias_oai(struct dj_vk *vk) {
    enum { N = 600, W = 40, R = 15 };
    float g[N], u[N], r[N];
    for (int i = 0; i < N; i++) {
        g[i] = frand() * 12.0f; /* past the limit of 7 both ways */
        u[i] = frand() * 12.0f;
    }
    struct dj_vk_buf *gb = upload(vk, g, sizeof g, true), *ub = upload(vk, u, sizeof u, true);
    CHECK(gb && ub && dj_vk_swiglu_oai(vk, gb, 0, ub, 0, N) == DJ_OK && dj_vk_read(vk, gb, 0, r, sizeof r) == DJ_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const double x = g[i] < 7 ? g[i] : 7, y = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        const double e = x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
        bad += fabs(r[i] - e) > 2e-6 * fabs(e) + 1e-30;
    }
    CHECKF(bad == 0, "swiglu_oai: %d elements outside 2e-6", bad);
    /* rows [3, 3 + R) of W floats (from float 3 * W + 5) get bias row 2 of b; then each row times its factor */
    float y[5 + 20 * W], b[4 * W], f[R], want[5 + 20 * W], ry[5 + 20 * W];
    for (int i = 0; i < 5 + 20 * W; i++) y[i] = frand();
    for (int i = 0; i < 4 * W; i++) b[i] = frand();
    for (int i = 0; i < R; i++) f[i] = frand() * 3.0f;
    struct dj_vk_buf *yb = upload(vk, y, sizeof y, true), *bb = upload(vk, b, sizeof b, true);
    CHECK(yb && bb && dj_vk_add_bias(vk, yb, 5 + 3 * W, bb, 2 * W, W, R) == DJ_OK);
    memcpy(want, y, sizeof y);
    for (int rr = 0; rr < R; rr++)
        for (int i = 0; i < W; i++) want[5 + (3 + rr) * W + i] = y[5 + (3 + rr) * W + i] + b[2 * W + i];
    CHECK(yb && dj_vk_read(vk, yb, 0, ry, sizeof y) == DJ_OK);
    CHECKF(!memcmp(ry, want, sizeof y), "add_bias differs from the CPU's add");
    CHECK(yb && dj_vk_scale_rows(vk, yb, W, R, f) == DJ_OK && dj_vk_read(vk, yb, 0, ry, sizeof y) == DJ_OK);
    for (int rr = 0; rr < R; rr++)
        for (int i = 0; i < W; i++) want[rr * W + i] *= f[rr];
    CHECKF(!memcmp(ry, want, sizeof y), "scale_rows differs from the CPU's product");
    CHECK(yb && bb && dj_vk_add_bias(vk, yb, 0, bb, 3 * W + 1, W, 1) == DJ_ERR_INVALID); /* past b's end */
    dj_vk_buf_free(vk, gb);
    dj_vk_buf_free(vk, ub);
    dj_vk_buf_free(vk, yb);
    dj_vk_buf_free(vk, bb);
}

/* kv_store: rows of 24 f32 elements (stride 30) into a mirror at given words and packed into
 * out; f16 as the CPU's kv_row_from_f32 (dj_f32_to_fp16) over random values and the edges
 * (ties between f16 steps, subnormals, overflow, infinities, NaN), f32 as the bits. */
static void test_kv_store(struct dj_vk *vk) {
    enum { NT = 6, NE = 24, SS = 30, MW = 400 };
    float src[NT * SS];
    for (int i = 0; i < NT * SS; i++) src[i] = frand() * 3.0f;
    const float edge[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-20f, 3 * 0x1p-25f, 0x1p-25f, 65519.0f, 65520.0f,
                          1e9f, -1e9f, INFINITY, -INFINITY, NAN, -0.0f, 5.9604645e-08f, 6.1035156e-05f, -2.5f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) src[SS + i] = edge[i];
    const uint32_t word[NT] = {7, 100, 40, 250, 300, 160};
    for (int f16 = 0; f16 < 2; f16++) {
        const int rw = f16 ? NE / 2 : NE;
        uint32_t zero[MW] = {0}, m[MW], o[NT * NE + 3];
        struct dj_vk_buf *mb = upload(vk, zero, sizeof zero, false), *sb = upload(vk, src, sizeof src, true), *ob = NULL;
        CHECK(dj_vk_buf_new(vk, sizeof o, true, &ob) == DJ_OK);
        CHECK(mb && sb && ob && dj_vk_kv_store(vk, mb, sb, SS, NT, NE, f16, word, ob, 3) == DJ_OK &&
              dj_vk_read(vk, mb, 0, m, sizeof m) == DJ_OK && dj_vk_read(vk, ob, 0, o, sizeof o) == DJ_OK);
        int bad = 0;
        uint32_t want[MW] = {0};
        for (int t = 0; t < NT; t++) {
            uint8_t row[NE * 4];
            if (f16)
                for (int i = 0; i < NE; i++) {
                    const uint16_t h = dj_f32_to_fp16(src[t * SS + i]);
                    memcpy(row + 2 * i, &h, 2);
                }
            else
                memcpy(row, src + t * SS, NE * 4);
            memcpy(want + word[t], row, (size_t)rw * 4);
            bad += memcmp(o + 3 + t * rw, row, (size_t)rw * 4) != 0;
        }
        bad += memcmp(m, want, sizeof m) != 0;
        CHECKF(bad == 0, "kv_store %s: %d rows differ from the CPU's", f16 ? "f16" : "f32", bad);
        const uint32_t far[1] = {MW - rw + 1};
        CHECK(mb && sb && ob && dj_vk_kv_store(vk, mb, sb, SS, 1, NE, f16, far, ob, 0) == DJ_ERR_INVALID);
        dj_vk_buf_free(vk, mb);
        dj_vk_buf_free(vk, sb);
        dj_vk_buf_free(vk, ob);
    }
}

static void test_errors(struct dj_vk *vk) {
    struct dj_vk *none = NULL;
    CHECK(dj_vk_open(99, &none) == DJ_ERR_NOT_FOUND && !none);
    CHECK(strstr(dj_last_error(), "no such device"));
    CHECK(!dj_vk_matmul_supports(DJ_TYPE_Q8_K)); /* an activation type, not a weight's */
    struct dj_vk_buf *w = NULL, *a = NULL, *c = NULL;
    CHECK(dj_vk_buf_new(vk, 0, true, &w) == DJ_ERR_INVALID && !w);
    CHECK(dj_vk_buf_new(vk, 64 * 18, true, &w) == DJ_OK); /* 64 blocks of q4_0: 4 rows of 512 */
    CHECK(dj_vk_buf_new(vk, sizeof(float) * 2 * K, true, &a) == DJ_OK);
    CHECK(dj_vk_buf_new(vk, sizeof(float) * 2 * 8, true, &c) == DJ_OK);
    if (w && a && c) {
        CHECK(dj_vk_matmul(vk, DJ_TYPE_Q8_K, K, w, 0, 584, a, 0, K, c, 0, 8, 0, 4, 2) == DJ_ERR_UNSUPPORTED);
        CHECK(dj_vk_matmul(vk, DJ_TYPE_Q4_0, K, w, 0, 288, a, 0, K, c, 0, 8, 0, 5, 2) == DJ_ERR_INVALID); /* row 5 */
        CHECK(dj_vk_matmul(vk, DJ_TYPE_Q4_0, K, w, 0, 288, a, 0, K, c, 0, 8, 0, 4, 3) == DJ_ERR_INVALID); /* token 3 */
        CHECK(dj_vk_matmul(vk, DJ_TYPE_Q4_0, 500, w, 0, 288, a, 0, K, c, 0, 8, 0, 4, 2) == DJ_ERR_INVALID); /* k */
        CHECK(dj_vk_matmul(vk, DJ_TYPE_Q4_0, K, w, 0, 288, a, 0, K, c, 0, 8, 0, 4, 2) == DJ_OK);
        CHECK(dj_vk_sync(vk) == DJ_OK);
        uint8_t big[16];
        CHECK(dj_vk_read(vk, c, 60, big, 16) == DJ_ERR_INVALID);
    }
    dj_vk_buf_free(vk, w);
    dj_vk_buf_free(vk, a);
    dj_vk_buf_free(vk, c);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    struct dj_vk_device_info dev[8];
    size_t n = 0;
    if (!dj_vk_built() || dj_vk_devices(dev, 8, &n) != DJ_OK || n == 0) {
        printf("SKIP: no Vulkan device: %s\n", n ? dj_last_error() : dj_vk_why_none());
        return 77;
    }
    struct dj_vk *vk = NULL;
    if (dj_vk_open(0, &vk) != DJ_OK) {
        fprintf(stderr, "FAIL: vulkan:0 (%s) does not open: %s\n", dev[0].name, dj_last_error());
        return 1;
    }
    printf("device: vulkan:0 %s\n", dj_vk_info(vk)->name);
    static const uint32_t types[] = {DJ_TYPE_F32,  DJ_TYPE_F16,  DJ_TYPE_BF16, DJ_TYPE_Q8_0, DJ_TYPE_Q4_0,
                                     DJ_TYPE_Q4_K, DJ_TYPE_Q6_K, DJ_TYPE_Q4_1, DJ_TYPE_Q5_0, DJ_TYPE_Q5_1,
                                     DJ_TYPE_Q5_K, DJ_TYPE_IQ4_NL, DJ_TYPE_MXFP4, DJ_TYPE_Q2_K, DJ_TYPE_Q3_K,
                                     DJ_TYPE_IQ4_XS, DJ_TYPE_IQ2_XXS, DJ_TYPE_IQ2_XS, DJ_TYPE_IQ2_S, DJ_TYPE_IQ3_XXS,
                                     DJ_TYPE_IQ3_S, DJ_TYPE_IQ1_S, DJ_TYPE_IQ1_M, DJ_TYPE_TQ1_0, DJ_TYPE_TQ2_0,
                                     DJ_TYPE_NVFP4, DJ_TYPE_Q1_0, DJ_TYPE_Q2_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CHECK(dj_vk_matmul_supports(types[i]));
        test_type(vk, types[i], true);
    }
    /* device-local weights and results through the staging copies */
    setenv("DJ_VK_STAGING", "1", 1);
    test_type(vk, DJ_TYPE_Q4_K, false);
    test_type(vk, DJ_TYPE_F16, false);
    unsetenv("DJ_VK_STAGING");
    test_rmsnorm(vk);
    test_rope_add_swiglu(vk);
    test_attn(vk);
    test_moe_ops(vk);
    test_geglu(vk);
    test_bias_oai(vk);
    test_kv_store(vk);
    test_errors(vk);
    dj_vk_close(vk);
    TEST_END();
}
