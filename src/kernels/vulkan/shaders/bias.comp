#version 450
/* bias.comp — Y[y_off + r * n + i] += B[b_off + i] for n_rows rows of n floats: a bias row
 * added to every token's row (qwen2's q/k/v, gpt-oss's attention and expert biases), or, with
 * a per-token factor table, Y[...] *= F[r] (mistral3's query temperature).  Element-wise: the
 * CPU's bits for the add and the product. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Yb { float Y[]; };
layout(std430, binding = 1) readonly buffer Bb { float B[]; };
layout(push_constant) uniform P {
    uint n_el;  /* n_rows * n */
    uint n;
    uint y_off;
    uint b_off; /* the bias row, or (scale) the first factor */
    uint scale; /* 0: add B's row; 1: multiply by B[b_off + r] */
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n_el) return;
    const uint r = i / p.n;
    precise float y;
    if (p.scale != 0u) y = Y[p.y_off + i] * B[p.b_off + r];
    else y = Y[p.y_off + i] + B[p.b_off + i - r * p.n];
    Y[p.y_off + i] = y;
}
