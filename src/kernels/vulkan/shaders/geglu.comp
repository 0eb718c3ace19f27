#version 450
/* geglu.comp — G[i] = gelu(G[i]) * U[i] as the CPU's geglu (model/forward.c): GELU read from
 * ggml's f16 table (TAB: 65536 floats, dj_model.gelu_tab) at G rounded to f16, 0 for
 * G <= -10, G itself from 10.  Element-wise: a token's result does not depend on the batch.
 * The rounding to f16 is core/fp16.h's dj_f32_to_fp16 in integers (to nearest, ties to even),
 * not packHalf2x16's, whose rounding the driver chooses (lavapipe's is not to nearest) — so
 * the index, and the result, are the CPU's. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Gb { float G[]; };
layout(std430, binding = 1) readonly buffer Ub { float U[]; };
layout(std430, binding = 2) readonly buffer Tb { float TAB[]; };
layout(push_constant) uniform P { uint n; uint g_off; uint u_off; } p;

#include "f16.glsl"

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    const float x = G[p.g_off + i], u = U[p.u_off + i];
    precise float y;
    if (x <= -10.0) y = 0.0;
    else if (x >= 10.0) y = x * u;
    else y = TAB[f16_bits(x)] * u;
    G[p.g_off + i] = y;
}
