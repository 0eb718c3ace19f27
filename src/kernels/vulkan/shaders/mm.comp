#version 450
/* mm.comp — C[t][r] = sum_k W[r][k] * A[t][k]: one weight row per workgroup against up
 * to NT tokens, weights dequantized in the shader exactly as ggml dequantizes them
 * (every product of a scale and a quant is exact in float, so the values are ggml's
 * bits), activations and sums in f32.
 *
 * Invariance: thread i takes the 32-element units i, i + 64, ... of the row, each in
 * element order with one fma per element, then the 64 partial sums meet in a fixed
 * tree.  Nothing depends on how many tokens share the dispatch, which tile a token is
 * in, or which rows are computed with it — so a token's result is the same bits alone
 * or batched, on one device and driver.  Compiled once per weight type (-DWT_*). */
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 1) readonly buffer Ab { float A[]; };
layout(std430, binding = 2) writeonly buffer Cb { float C[]; };
layout(push_constant) uniform P {
    uint k;      /* elements a row (a multiple of the type's block) */
    uint n_rows; /* rows in this dispatch (workgroup x = row - r0) */
    uint n_tok;
    uint ws;     /* bytes a weight row */
    uint w_off;  /* byte offset of row 0 in W */
    uint as_;    /* floats between tokens in A */
    uint ldc;    /* floats between tokens in C */
    uint r0;     /* first row of this dispatch */
    uint a_off;  /* float offset of token 0 in A */
    uint c_off;  /* float offset of token 0 in C */
} p;

#include "common.glsl"

#define NT 4
shared float red[NT][64];

/* unit u (elements 32u .. 32u + 31) of the row at byte rb, into v */
void dq32(uint rb, uint u, out float v[32]) {
#if defined(WT_F32)
    const uint b = rb + 128u * u;
    [[unroll]] for (uint i = 0; i < 32; i++) v[i] = uintBitsToFloat(rd32(b + 4u * i));
#elif defined(WT_F16)
    const uint b = rb + 64u * u;
    [[unroll]] for (uint i = 0; i < 32; i++) v[i] = f16(rd16(b + 2u * i));
#elif defined(WT_BF16)
    const uint b = rb + 64u * u;
    [[unroll]] for (uint i = 0; i < 32; i++) v[i] = bf16(rd16(b + 2u * i));
#elif defined(WT_Q8_0) /* { f16 d; int8 qs[32] }: d * q */
    const uint b = rb + 34u * u;
    const float d = f16(rd16(b));
    [[unroll]] for (uint i = 0; i < 32; i++) v[i] = float(s8(rd8(b + 2u + i))) * d;
#elif defined(WT_Q4_0) /* { f16 d; uint8 qs[16] }: (nibble - 8) * d, low nibbles first */
    const uint b = rb + 18u * u;
    const float d = f16(rd16(b));
    [[unroll]] for (uint i = 0; i < 16; i++) {
        const uint q = rd8(b + 2u + i);
        v[i] = float(int(q & 15u) - 8) * d;
        v[i + 16] = float(int(q >> 4) - 8) * d;
    }
#elif defined(WT_Q4_K) /* { f16 d, dmin; uint8 scales[12]; uint8 qs[128] } per 256 */
    const uint b = rb + 144u * (u >> 3), j = u & 7u;
    const float d = f16(rd16(b)), dmin = f16(rd16(b + 2u));
    uint sc, m; /* ggml's get_scale_min_k4(j) */
    if (j < 4u) {
        sc = rd8(b + 4u + j) & 63u;
        m = rd8(b + 8u + j) & 63u;
    } else {
        sc = (rd8(b + 8u + j) & 15u) | ((rd8(b + j) >> 6) << 4);
        m = (rd8(b + 8u + j) >> 4) | ((rd8(b + 4u + j) >> 6) << 4);
    }
    const float d1 = d * float(sc), m1 = dmin * float(m);
    const uint q0 = b + 16u + 32u * (j >> 1), sh = 4u * (j & 1u);
    [[unroll]] for (uint i = 0; i < 32; i++) v[i] = d1 * float((rd8(q0 + i) >> sh) & 15u) - m1;
#elif defined(WT_Q6_K) /* { uint8 ql[128], qh[64]; int8 scales[16]; f16 d } per 256 */
    const uint b = rb + 210u * (u >> 3), j = u & 7u, n = j >> 2, part = j & 3u;
    const float d = f16(rd16(b + 208u));
    const uint ql = b + 64u * n + 32u * (part & 1u), qh = b + 128u + 32u * n, sl = 4u * (part >> 1);
    [[unroll]] for (uint i = 0; i < 32; i++) {
        const int q = int(((rd8(ql + i) >> sl) & 15u) | (((rd8(qh + i) >> (2u * part)) & 3u) << 4)) - 32;
        const float sc = float(s8(rd8(b + 192u + 8u * n + i / 16u + 2u * part)));
        v[i] = d * sc * float(q);
    }
#else
#error "mm.comp: no weight type (-DWT_...)"
#endif
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint r = p.r0 + gl_WorkGroupID.x;
    const uint t0 = gl_WorkGroupID.y * NT;
    const uint rb = p.w_off + r * p.ws;
    float acc[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) acc[t] = 0.0;
    for (uint u = tid; u < p.k / 32u; u += 64u) {
        float v[32];
        dq32(rb, u, v);
        [[unroll]] for (uint t = 0; t < NT; t++) {
            if (t0 + t < p.n_tok) {
                const uint ab = p.a_off + (t0 + t) * p.as_ + 32u * u;
                [[unroll]] for (uint i = 0; i < 32; i++) acc[t] = fma(v[i], A[ab + i], acc[t]);
            }
        }
    }
    [[unroll]] for (uint t = 0; t < NT; t++) red[t][tid] = acc[t];
    barrier();
    [[unroll]] for (uint s = 32; s > 0; s >>= 1) {
        if (tid < s) {
            [[unroll]] for (uint t = 0; t < NT; t++) red[t][tid] += red[t][tid + s];
        }
        barrier();
    }
    if (tid < NT && t0 + tid < p.n_tok) C[p.c_off + (t0 + tid) * p.ldc + r] = red[tid][0];
}
