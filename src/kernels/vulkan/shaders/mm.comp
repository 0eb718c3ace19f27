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
#elif defined(WT_IQ2_XXS) || defined(WT_IQ2_XS) || defined(WT_IQ2_S) || defined(WT_IQ3_XXS) || defined(WT_IQ3_S) || \
    defined(WT_IQ1_S) || defined(WT_IQ1_M) || defined(WT_TQ1_0) || defined(WT_TQ2_0)
/* The i-quants and the ternary types, per 256-element block: unit u is sub-block ib = u % 8.
 * Their codebooks (src/kernels/quant_tables.h) are one table buffer at binding 3, in words
 * (vk.c iq_tables): ksigns_iq2xs (one byte a word), then the grids, 8-byte entries as two
 * words.  Every value is a product of an f16 scale, small integers and a grid byte, exact in
 * float — so ggml's bits (the one-hot test). */
layout(std430, binding = 3) readonly buffer Gb { uint G[]; };
#define KS_OFF 0u
#define IQ2XXS_OFF 128u
#define IQ2XS_OFF 640u
#define IQ2S_OFF 1664u
#define IQ3XXS_OFF 3712u
#define IQ3S_OFF 3968u
#define IQ1S_OFF 4480u
uint gb8(uint off, uint e, uint j) { return (G[off + 2u * e + (j >> 2)] >> (8u * (j & 3u))) & 0xFFu; } /* 8-byte entries */
uint gb4(uint off, uint e, uint j) { return (G[off + e] >> (8u * j)) & 0xFFu; }                     /* 4-byte entries */
float sgn_bit(uint s, uint j) { return ((s >> j) & 1u) != 0u ? -1.0 : 1.0; }
float sgn7(uint s7, uint j) { return sgn_bit(G[KS_OFF + s7], j); } /* a 7-bit code, its parity bit added */
#if defined(WT_IQ2_XXS) /* { f16 d; uint16 qs[32] }: per 32 two words: 4 grid indices; 4 sign codes | scale << 28 */
#define BLK 66u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u;                                                          \
    const uint idx = rd32(b + 2u + 8u * ib), aux = rd32(b + 6u + 8u * ib);                                        \
    const float db = f16(rd16(b)) * (0.5 + float(aux >> 28)) * 0.25;
#define W_EL(i)                                                                                                    \
    (db * float(gb8(IQ2XXS_OFF, (idx >> (8u * ((i) >> 3))) & 255u, (i) & 7u)) * sgn7((aux >> (7u * ((i) >> 3))) & 127u, (i) & 7u))
#elif defined(WT_IQ2_XS) /* { f16 d; uint16 qs[32] (9-bit index | 7-bit signs << 9); uint8 scales[8] } */
#define BLK 74u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, sc = rd8(b + 66u + ib);                                   \
    const float d = f16(rd16(b)), db0 = d * (0.5 + float(sc & 15u)) * 0.25, db1 = d * (0.5 + float(sc >> 4)) * 0.25;
#define IQ2XS_W(i) rd16(b + 2u + 2u * (4u * ib + ((i) >> 3)))
#define W_EL(i) (((i) < 16u ? db0 : db1) * float(gb8(IQ2XS_OFF, IQ2XS_W(i) & 511u, (i) & 7u)) * sgn7(IQ2XS_W(i) >> 9, (i) & 7u))
#elif defined(WT_IQ2_S) /* { f16 d; uint8 qs[32], signs[32], qh[8], scales[8] } */
#define BLK 82u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, sc = rd8(b + 74u + ib), qh = rd8(b + 66u + ib);          \
    const float d = f16(rd16(b)), db0 = d * (0.5 + float(sc & 15u)) * 0.25, db1 = d * (0.5 + float(sc >> 4)) * 0.25;
#define IQ2S_IDX(l) (rd8(b + 2u + 4u * ib + (l)) | ((qh << (8u - 2u * (l))) & 0x300u))
#define W_EL(i)                                                                                                    \
    (((i) < 16u ? db0 : db1) * float(gb8(IQ2S_OFF, IQ2S_IDX((i) >> 3), (i) & 7u)) *                              \
     sgn_bit(rd8(b + 34u + 4u * ib + ((i) >> 3)), (i) & 7u))
#elif defined(WT_IQ3_XXS) /* { f16 d; uint8 qs[64] (4-element grid indices); uint32 signs | scale << 28 [8] } */
#define BLK 98u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, aux = rd32(b + 66u + 4u * ib);                           \
    const float db = f16(rd16(b)) * (0.5 + float(aux >> 28)) * 0.5;
#define W_EL(i)                                                                                                    \
    (db * float(gb4(IQ3XXS_OFF, rd8(b + 2u + 8u * ib + 2u * ((i) >> 3) + (((i) >> 2) & 1u)), (i) & 3u)) *         \
     sgn7((aux >> (7u * ((i) >> 3))) & 127u, (i) & 7u))
#elif defined(WT_IQ3_S) /* { f16 d; uint8 qs[64], qh[8], signs[32], scales[4] } */
#define BLK 110u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, qh = rd8(b + 66u + ib);                                   \
    const float db = f16(rd16(b)) * float(1u + 2u * ((rd8(b + 106u + ib / 2u) >> (4u * (ib & 1u))) & 15u));
/* element i: group l = i / 8, its half h = (i / 4) % 2: index qs[8ib + 2l + h] | bit 2l + h of qh << 8 */
#define IQ3S_IDX(i) (rd8(b + 2u + 8u * ib + ((i) >> 2)) | (((qh >> ((i) >> 2)) & 1u) << 8))
#define W_EL(i) (db * float(gb4(IQ3S_OFF, IQ3S_IDX(i), (i) & 3u)) * sgn_bit(rd8(b + 74u + 4u * ib + ((i) >> 3)), (i) & 7u))
#elif defined(WT_IQ1_S) /* { f16 d; uint8 qs[32]; uint16 qh[8] }: dl * (grid + delta) */
#define BLK 50u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, qh = rd16(b + 34u + 2u * ib);                            \
    const float dl = f16(rd16(b)) * float(2u * ((qh >> 12) & 7u) + 1u), delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
#define W_EL(i)                                                                                                    \
    (dl * (float(s8(gb8(IQ1S_OFF, rd8(b + 2u + 4u * ib + ((i) >> 3)) | (((qh >> (3u * ((i) >> 3))) & 7u) << 8),    \
                        (i) & 7u))) + delta))
#elif defined(WT_IQ1_M) /* { uint8 qs[32], qh[16], scales[8] } (the f16 d in the scales' top nibbles) */
#define BLK 56u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), ib = (u) & 7u, sc = rd16(b + 48u + 2u * (ib >> 1));                     \
    const float d = f16((rd16(b + 48u) >> 12) | ((rd16(b + 50u) >> 8) & 0xF0u) | ((rd16(b + 52u) >> 4) & 0xF00u) |   \
                        (rd16(b + 54u) & 0xF000u));                                                                \
    const float dl1 = d * float(2u * ((sc >> (6u * (ib & 1u))) & 7u) + 1u);                                       \
    const float dl2 = d * float(2u * ((sc >> (6u * (ib & 1u) + 3u)) & 7u) + 1u);
/* group l: its qh byte (2ib + l / 2), nibble l % 2: 3 high index bits, then the sign of delta */
#define IQ1M_QH(l) (rd8(b + 32u + 2u * ib + ((l) >> 1)) >> (4u * ((l) & 1u)))
#define W_EL(i)                                                                                                    \
    (((i) < 16u ? dl1 : dl2) *                                                                                     \
     (float(s8(gb8(IQ1S_OFF, rd8(b + 4u * ib + ((i) >> 3)) | ((IQ1M_QH((i) >> 3) & 7u) << 8), (i) & 7u))) +     \
      ((IQ1M_QH((i) >> 3) & 8u) != 0u ? -0.125 : 0.125)))
#elif defined(WT_TQ1_0) /* { uint8 qs[48] (5 base-3 digits a byte), qh[4] (4); f16 d } */
#define BLK 54u
/* digit n of byte q: ((q * 3^n mod 256) * 3) >> 8 (ggml's) */
uint tq1_digit(uint q, uint n) {
    const uint p3 = n == 0u ? 1u : n == 1u ? 3u : n == 2u ? 9u : n == 3u ? 27u : 81u;
    return (((q * p3) & 255u) * 3u) >> 8;
}
/* element e of the block: 0..159 digit e / 32 of qs[e % 32]; 160..239 digit (e - 160) / 16 of
 * qs[32 + e % 16]; 240..255 digit (e - 240) / 4 of qh[e % 4] */
uint tq1_el(uint b, uint e) {
    if (e < 160u) return tq1_digit(rd8(b + (e & 31u)), e >> 5);
    if (e < 240u) return tq1_digit(rd8(b + 32u + (e & 15u)), (e - 160u) >> 4);
    return tq1_digit(rd8(b + 48u + (e & 3u)), (e - 240u) >> 2);
}
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), t1e = 32u * ((u) & 7u);                                                  \
    const float d = f16(rd16(b + 52u));
#define W_EL(i) (float(int(tq1_el(b, t1e + (i))) - 1) * d)
#elif defined(WT_TQ2_0) /* { uint8 qs[64]; f16 d }: element 128c + 32l + m: bits 2l of qs[32c + m] */
#define BLK 66u
#define UNIT(u)                                                                                                    \
    const uint b = rb + BLK * ((u) >> 3), c = ((u) & 7u) >> 2, l = (u) & 3u;                                       \
    const float d = f16(rd16(b + 64u));
#define W_EL(i) (float(int((rd8(b + 32u * c + (i)) >> (2u * l)) & 3u) - 1) * d)
#endif
#elif defined(WT_NVFP4) /* { uint8 d[4] (UE4M3 per 16); uint8 qs[32] } per 64: kvalues_fp4[nibble] * ue4m3_half(d[s]) */
const int kv_fp4[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
float ue4m3_half(uint x) { /* quant_tables.h dj_ue4m3_to_f32_half */
    if (x == 0u || x == 0x7fu) return 0.0;
    const uint e = (x >> 3) & 15u, m = x & 7u;
    if (e == 0u) return float(m) * (1.0 / 1024.0);
    return uintBitsToFloat(((e - 7u + 127u - 1u) << 23) | (m << 20));
}
#define UNIT(u)                                                                                                    \
    const uint b = rb + 36u * ((u) >> 1), s0 = 2u * ((u) & 1u);                                                   \
    const float d0 = ue4m3_half(rd8(b + s0)), d1 = ue4m3_half(rd8(b + s0 + 1u));
/* element i: sub-block s0 + i / 16, k = i % 16: the low nibble of qs[8s + k] for k < 8, else the high of qs[8s + k - 8] */
#define NV_Q(i) ((rd8(b + 4u + 8u * (s0 + ((i) >> 4)) + ((i) & 7u)) >> (4u * (((i) >> 3) & 1u))) & 15u)
#define W_EL(i) (float(kv_fp4[NV_Q(i)]) * ((i) < 16u ? d0 : d1))
#elif defined(WT_Q1_0) /* { f16 d; uint8 qs[16] } per 128: bit ? d : -d */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 18u * ((u) >> 2), q0 = b + 2u + 4u * ((u) & 3u);                                           \
    const float d = f16(rd16(b));
#define W_EL(i) (((rd8(q0 + ((i) >> 3)) >> ((i) & 7u)) & 1u) != 0u ? d : -d)
#elif defined(WT_Q2_0) /* { f16 d; uint8 qs[16] } per 64: (q - 1) * d, 2 bits */
#define UNIT(u)                                                                                                    \
    const uint b = rb + 18u * ((u) >> 1), q0 = b + 2u + 8u * ((u) & 1u);                                           \
    const float d = f16(rd16(b));
#define W_EL(i) (float(int((rd8(q0 + ((i) >> 2)) >> (2u * ((i) & 3u))) & 3u) - 1) * d)
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
