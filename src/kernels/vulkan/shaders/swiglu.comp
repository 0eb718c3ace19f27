#version 450
/* swiglu.comp — G[i] = G[i] / (1 + exp(-G[i])) * U[i] (model/forward.c swiglu), n floats;
 * with -DWT_OAI gpt-oss's clamped form (forward.c swiglu_oai: alpha 1.702, limit 7):
 * x = min(G, 7), y = clamp(U, -7, 7), G = x / (1 + exp(-1.702 x)) * (y + 1); with -DWT_SIGMUL
 * G = G * sigmoid(U).
 * Element-wise, so trivially the same for a token alone or batched; exp is the device's
 * (not glibc's expf), so not the CPU's bits. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Gb { float G[]; };
layout(std430, binding = 1) readonly buffer Ub { float U[]; };
layout(push_constant) uniform P { uint n; uint g_off; uint u_off; } p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
#if defined(WT_SIGMUL) /* G = G * sigmoid(U): the hybrids' gated attention output (forward.c) */
    const float g = G[p.g_off + i], u = U[p.u_off + i];
    precise float y = g * (1.0 / (1.0 + exp(-u)));
#elif defined(WT_OAI)
    const float g = G[p.g_off + i], u = U[p.u_off + i];
    const float v = 7.0 < g ? 7.0 : g; /* std::min(g, limit): a NaN g stays g */
    const float w = u < -7.0 ? -7.0 : (u > 7.0 ? 7.0 : u);
    precise float y = v / (1.0 + exp(1.702 * -v)) * (w + 1.0);
#else
    const float v = G[p.g_off + i];
    precise float y = v / (1.0 + exp(-v)) * U[p.u_off + i];
#endif
    G[p.g_off + i] = y;
}
