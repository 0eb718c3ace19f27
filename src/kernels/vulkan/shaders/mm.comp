#version 450
/* mm.comp — C[t][r] = sum_k W[r][k] * A[t][k]: one weight row per invocation (64 rows a
 * workgroup) against up to NT tokens, weights dequantized in the shader exactly as ggml
 * dequantizes them (every product of a scale and a quant is exact in float, so the values
 * are ggml's bits), activations and sums in f32.
 *
 * Invariance: an invocation sums its row's elements in order, one fma each, into one
 * accumulator per token.  Nothing depends on how many tokens share the dispatch, which
 * tile a token is in, or which rows are computed with it — so a token's result is the same
 * bits alone or batched, on one device and driver.  (No split of a row across invocations,
 * no shared memory, no barriers: the simplest fixed order, and the fastest on lavapipe;
 * a real GPU wants a row split over a subgroup with a fixed tree — issue 32's speed part.)
 * The float types take any k (a last unit shorter than 32); the block types whole blocks.
 * Compiled once per weight type (-DWT_*). */
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 1) readonly buffer Ab { float A[]; };
layout(std430, binding = 2) writeonly buffer Cb { float C[]; };
layout(push_constant) uniform P {
    uint k;      /* elements a row (a multiple of the type's block) */
    uint n_rows; /* rows in this dispatch (invocation x = row - r0) */
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

/* Q4_K / Q5_K: sub-block j's factors of the super-block at byte b ({f16 d, dmin; uint8 scales[12]}
 * first): d * scale and dmin * min, ggml's get_scale_min_k4(j) of the 12 scale bytes. */
void k4_scale_min(uint b, uint j, out float d1, out float m1) {
    uint sc, m;
    if (j < 4u) {
        sc = rd8(b + 4u + j) & 63u;
        m = rd8(b + 8u + j) & 63u;
    } else {
        sc = (rd8(b + 8u + j) & 15u) | ((rd8(b + j) >> 6) << 4);
        m = (rd8(b + 8u + j) >> 4) | ((rd8(b + 4u + j) >> 6) << 4);
    }
    d1 = f16(rd16(b)) * float(sc);
    m1 = f16(rd16(b + 2u)) * float(m);
}

/* IQ4_NL / IQ4_XS: the 16 values of a 4-bit index (ggml's kvalues_iq4nl) */
const int kv_iq4nl[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

/* Per weight type: UNIT(u) reads what unit u (elements 32u .. 32u + 31) of the row at
 * byte rb shares (its block's scales), W_EL(i) is element i of the unit, i a constant
 * after unrolling — one value at a time, no array (lavapipe keeps arrays in memory). */
#if defined(WT_F32)
#define UNIT(u) const uint b = rb + 128u * (u);
#define W_EL(i) uintBitsToFloat(rd32(b + 4u * (i)))
#elif defined(WT_F16)
#define UNIT(u) const uint b = rb + 64u * (u);
#define W_EL(i) f16(rd16(b + 2u * (i)))
#elif defined(WT_BF16)
#define UNIT(u) const uint b = rb + 64u * (u);
#define W_EL(i) bf16(rd16(b + 2u * (i)))
#elif defined(WT_Q8_0) /* { f16 d; int8 qs[32] }: q * d */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 34u * (u);                                                                                 \
    const float d = f16(rd16(b));
#define W_EL(i) (float(s8(rd8(b + 2u + (i)))) * d)
#elif defined(WT_Q4_0) /* { f16 d; uint8 qs[16] }: (nibble - 8) * d, low nibbles first */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 18u * (u);                                                                                 \
    const float d = f16(rd16(b));
#define W_EL(i) (float(int(((i) < 16u ? rd8(b + 2u + (i)) : rd8(b + 2u + (i) - 16u) >> 4) & 15u) - 8) * d)
#elif defined(WT_Q4_K) /* { f16 d, dmin; uint8 scales[12]; uint8 qs[128] } per 256 */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 144u * ((u) >> 3), j = (u) & 7u;                                                          \
    float d1, m1;                                                                                                  \
    k4_scale_min(b, j, d1, m1);                                                                                    \
    const uint q0 = b + 16u + 32u * (j >> 1), sh = 4u * (j & 1u);
#define W_EL(i) (d1 * float((rd8(q0 + (i)) >> sh) & 15u) - m1)
#elif defined(WT_Q6_K) /* { uint8 ql[128], qh[64]; int8 scales[16]; f16 d } per 256 */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 210u * ((u) >> 3), j = (u) & 7u, n = j >> 2, part = j & 3u;                             \
    const float d = f16(rd16(b + 208u));                                                                           \
    const uint ql = b + 64u * n + 32u * (part & 1u), qh = b + 128u + 32u * n, sl = 4u * (part >> 1);              \
    const float sc0 = float(s8(rd8(b + 192u + 8u * n + 2u * part))), sc1 = float(s8(rd8(b + 193u + 8u * n + 2u * part)));
#define W_EL(i)                                                                                                    \
    (d * ((i) < 16u ? sc0 : sc1) *                                                                                 \
     float(int(((rd8(ql + (i)) >> sl) & 15u) | (((rd8(qh + (i)) >> (2u * part)) & 3u) << 4)) - 32))
#elif defined(WT_Q4_1) /* { f16 d, m; uint8 qs[16] }: nibble * d + m */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 20u * (u);                                                                                 \
    const float d = f16(rd16(b)), mn = f16(rd16(b + 2u));
#define W_EL(i) (float(((i) < 16u ? rd8(b + 4u + (i)) : rd8(b + 4u + (i) - 16u) >> 4) & 15u) * d + mn)
#elif defined(WT_Q5_0) || defined(WT_Q5_1) /* { f16 d (, m); uint8 qh[4]; uint8 qs[16] }: bit i of qh is element i's 5th */
#if defined(WT_Q5_0)
#define Q5_HEAD 2u
#define UNIT(u)                                                                                                    \
    const uint b = rb + 22u * (u);                                                                                 \
    const float d = f16(rd16(b));                                                                                  \
    const uint qh = rd32(b + 2u);
#define Q5_VAL(q) (float(int(q) - 16) * d)
#else
#define Q5_HEAD 4u
#define UNIT(u)                                                                                                    \
    const uint b = rb + 24u * (u);                                                                                 \
    const float d = f16(rd16(b)), mn = f16(rd16(b + 2u));                                                          \
    const uint qh = rd32(b + 4u);
#define Q5_VAL(q) (float(q) * d + mn)
#endif
#define W_EL(i)                                                                                                    \
    Q5_VAL((((i) < 16u ? rd8(b + Q5_HEAD + 4u + (i)) : rd8(b + Q5_HEAD + 4u + (i) - 16u) >> 4) & 15u) |          \
           (((qh >> (i)) & 1u) << 4))
#elif defined(WT_Q5_K) /* { f16 d, dmin; uint8 scales[12], qh[32], qs[128] } per 256: bit j of qh[l] is the 5th */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 176u * ((u) >> 3), j = (u) & 7u;                                                          \
    float d1, m1;                                                                                                  \
    k4_scale_min(b, j, d1, m1);                                                                                    \
    const uint q0 = b + 48u + 32u * (j >> 1), sh = 4u * (j & 1u);
#define W_EL(i) (d1 * float(((rd8(q0 + (i)) >> sh) & 15u) + (((rd8(b + 16u + (i)) >> j) & 1u) << 4)) - m1)
#elif defined(WT_Q2_K) /* { uint8 scales[16] (scale | min << 4 per 16), qs[64]; f16 d, dmin } per 256 */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 84u * ((u) >> 3), j = (u) & 7u, n = j >> 2, sh = 2u * (j & 3u);                          \
    const uint s0 = rd8(b + 8u * n + 2u * (j & 3u)), s1 = rd8(b + 8u * n + 2u * (j & 3u) + 1u);                   \
    const float d = f16(rd16(b + 80u)), dmin = f16(rd16(b + 82u));                                                 \
    const float dl0 = d * float(s0 & 15u), ml0 = dmin * float(s0 >> 4);                                            \
    const float dl1 = d * float(s1 & 15u), ml1 = dmin * float(s1 >> 4);                                            \
    const uint q0 = b + 16u + 32u * n;
#define W_EL(i) ((i) < 16u ? dl0 * float((rd8(q0 + (i)) >> sh) & 3u) - ml0 : dl1 * float((rd8(q0 + (i)) >> sh) & 3u) - ml1)
#elif defined(WT_Q3_K) /* { uint8 hmask[32], qs[64], scales[12]; f16 d } per 256: (2 bits - (high bit ? 0 : 4)) * d * (scale - 32) */
/* scale k (0..15), ggml's kmask unpacking: low 4 bits from byte k (k < 8) or the high nibble of k - 8;
 * the top 2 from byte 8 + k % 4, bits 2 (k / 4) */
#define Q3_SC(k) (int((((k) < 8u ? rd8(b + 96u + (k)) : rd8(b + 96u + (k) - 8u) >> 4) & 15u) |                       \
                      (((rd8(b + 104u + ((k) & 3u)) >> (2u * ((k) >> 2))) & 3u) << 4)) - 32)
#define UNIT(u)                                                                                                    \
    const uint b = rb + 110u * ((u) >> 3), j = (u) & 7u, n = j >> 2, sh = 2u * (j & 3u);                          \
    const float d = f16(rd16(b + 108u));                                                                           \
    const float dl0 = d * float(Q3_SC(8u * n + 2u * (j & 3u))), dl1 = d * float(Q3_SC(8u * n + 2u * (j & 3u) + 1u)); \
    const uint q0 = b + 32u + 32u * n;
#define W_EL(i)                                                                                                    \
    (((i) < 16u ? dl0 : dl1) * float(int((rd8(q0 + (i)) >> sh) & 3u) - (((rd8(b + (i)) >> j) & 1u) != 0u ? 0 : 4)))
#elif defined(WT_IQ4_XS) /* { f16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128] } per 256 */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 136u * ((u) >> 3), ib = (u) & 7u;                                                         \
    const uint ls = ((rd8(b + 4u + ib / 2u) >> (4u * (ib & 1u))) & 15u) | (((rd16(b + 2u) >> (2u * ib)) & 3u) << 4); \
    const float dl = f16(rd16(b)) * float(int(ls) - 32);                                                           \
    const uint q0 = b + 8u + 16u * ib;
#define W_EL(i) (dl * float(kv_iq4nl[((i) < 16u ? rd8(q0 + (i)) : rd8(q0 + (i) - 16u) >> 4) & 15u]))
#elif defined(WT_IQ4_NL) /* { f16 d; uint8 qs[16] }: d * kvalues_iq4nl[nibble] */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 18u * (u);                                                                                 \
    const float d = f16(rd16(b));
#define W_EL(i) (d * float(kv_iq4nl[((i) < 16u ? rd8(b + 2u + (i)) : rd8(b + 2u + (i) - 16u) >> 4) & 15u]))
#elif defined(WT_MXFP4) /* { uint8 e (E8M0); uint8 qs[16] }: kvalues_mxfp4[nibble] * 2^(e - 128) */
const int kv_mxfp4[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
#define UNIT(u)                                                                                                    \
    const uint b = rb + 17u * (u), e = rd8(b);                                                                     \
    const float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); /* ggml_e8m0_to_fp32_half */
#define W_EL(i) (float(kv_mxfp4[((i) < 16u ? rd8(b + 1u + (i)) : rd8(b + 1u + (i) - 16u) >> 4) & 15u]) * d)
#else
#error "mm.comp: no weight type (-DWT_...)"
#endif

void main() {
    const uint ir = gl_GlobalInvocationID.x;
    if (ir >= p.n_rows) return;
    const uint r = p.r0 + ir;
    const uint t0 = gl_WorkGroupID.y * NT;
    const uint rb = p.w_off + r * p.ws;
    const uint nu = (p.k + 31u) / 32u;
    uint ab[NT]; /* token t's activations; a token past n_tok reads the last one, unstored */
    [[unroll]] for (uint t = 0; t < NT; t++) ab[t] = p.a_off + min(t0 + t, p.n_tok - 1u) * p.as_;
    float acc[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) acc[t] = 0.0;
    for (uint u = 0; u < nu; u++) {
        UNIT(u)
        const uint e0 = 32u * u;
        if (e0 + 32u <= p.k) {
            [[unroll]] for (uint i = 0; i < 32u; i++) {
                const float w = W_EL(i);
                [[unroll]] for (uint t = 0; t < NT; t++) acc[t] = fma(w, A[ab[t] + e0 + i], acc[t]);
            }
        } else { /* the float types' short last unit */
            for (uint i = 0; i < p.k - e0; i++) {
                const float w = W_EL(i);
                [[unroll]] for (uint t = 0; t < NT; t++) acc[t] = fma(w, A[ab[t] + e0 + i], acc[t]);
            }
        }
    }
    [[unroll]] for (uint t = 0; t < NT; t++)
        if (t0 + t < p.n_tok) C[p.c_off + (t0 + t) * p.ldc + r] = acc[t];
}
