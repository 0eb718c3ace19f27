#version 450
/* rmsnorm.comp — y = x / sqrt(mean(x^2) + eps) * w, one token a workgroup.  The sum of
 * squares: thread i takes elements i, i + 64, ... (one fma each), then a fixed tree —
 * the same order for a token whatever else is in the dispatch.  (The CPU sums in
 * double; the GPU result is not the CPU's bits, and need not be.) */
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Wb { float Wn[]; };
layout(std430, binding = 2) writeonly buffer Yb { float Y[]; };
layout(push_constant) uniform P {
    uint n;     /* elements a token */
    uint n_tok;
    uint xs;    /* floats between tokens in X */
    uint ys;    /* floats between tokens in Y */
    float eps;
} p;

shared float red[64];

void main() {
    const uint tid = gl_LocalInvocationID.x, t = gl_WorkGroupID.x;
    const uint xb = t * p.xs, yb = t * p.ys;
    float s = 0.0;
    for (uint i = tid; i < p.n; i += 64u) s = fma(X[xb + i], X[xb + i], s);
    red[tid] = s;
    barrier();
    [[unroll]] for (uint h = 32; h > 0; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(p.n) + p.eps);
    for (uint i = tid; i < p.n; i += 64u) Y[yb + i] = X[xb + i] * scale * Wn[i];
}
