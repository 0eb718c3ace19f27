#version 450
/* swiglu.comp — G[i] = G[i] / (1 + exp(-G[i])) * U[i] (model/forward.c swiglu), n floats.
 * Element-wise, so trivially the same for a token alone or batched; exp is the device's
 * (not glibc's expf), so not the CPU's bits. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Gb { float G[]; };
layout(std430, binding = 1) readonly buffer Ub { float U[]; };
layout(push_constant) uniform P { uint n; uint g_off; uint u_off; } p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    const float v = G[p.g_off + i];
    precise float y = v / (1.0 + exp(-v)) * U[p.u_off + i];
    G[p.g_off + i] = y;
}
