#version 450
/* add.comp — Y[i] += X[i], n floats (the residual stream): the CPU's bits. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Yb { float Y[]; };
layout(std430, binding = 1) readonly buffer Xb { float X[]; };
layout(push_constant) uniform P { uint n; uint y_off; uint x_off; } p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    Y[p.y_off + i] = Y[p.y_off + i] + X[p.x_off + i];
}
