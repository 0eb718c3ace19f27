#version 450
/* gather.comp — row i of Y (ys words apart) is row I[i] of X (w words each): a copy, the source's bits (words,
 * not floats, so nothing is converted).  The MoE layer's rows of each expert's tokens; the
 * rows whose logits are wanted. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Yb { uint Y[]; };
layout(std430, binding = 1) readonly buffer Xb { uint X[]; };
layout(std430, binding = 2) readonly buffer Ib { uint I[]; };
layout(push_constant) uniform P {
    uint n;     /* n_rows * w */
    uint w;     /* words a row */
    uint xs;    /* words between rows of X */
    uint x_off;
    uint y_off;
    uint idx0;  /* the first index in I; 0xFFFFFFFF: no indices, row i is row i of X */
    uint ys;    /* words between rows of Y */
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    const uint r = i / p.w, j = i - r * p.w;
    const uint src = p.idx0 == 0xFFFFFFFFu ? r : I[p.idx0 + r];
    Y[p.y_off + r * p.ys + j] = X[p.x_off + src * p.xs + j];
}
