#version 450
/* rope.comp — rotates n_rot dims of every head of each token in place, with the cos/sin
 * row of the token's position taken from a host-computed table (model/forward.c rope_row:
 * row p = [cos θ_0 .. cos θ_{n_rot/2-1} | sin θ_0 ..]), so every variant the CPU path
 * has (llama3 factors, YaRN, linear scaling, gemma's local setting) is one table.  Pairs
 * (2i, 2i+1) or, neox, (i, i + n_rot/2).  `precise`: no contraction, so with the same
 * table the result is the CPU's bits (x0 c - x1 s, x0 s + x1 c, each rounded). */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Cb { float CS[]; };
layout(std430, binding = 2) readonly buffer Pb { uint POS[]; };
layout(push_constant) uniform P {
    uint n_tok;
    uint n_heads;
    uint hd;      /* floats a head */
    uint n_rot;   /* dims rotated, from the head's start (even, <= hd) */
    uint neox;
    uint xs;      /* floats between tokens in X */
    uint cs_w;    /* floats a table row */
    uint x_off;   /* float offset of token 0's head 0 in X */
    uint pos0;    /* POS's first word for this dispatch */
} p;

void main() {
    const uint t = gl_WorkGroupID.x, half_ = p.n_rot / 2u;
    const uint row = POS[p.pos0 + t] * p.cs_w;
    for (uint j = gl_LocalInvocationID.x; j < p.n_heads * half_; j += 64u) {
        const uint h = j / half_, i = j % half_;
        const uint base = p.x_off + t * p.xs + h * p.hd;
        const uint a = base + (p.neox != 0u ? i : 2u * i), b = base + (p.neox != 0u ? i + half_ : 2u * i + 1u);
        const float c = CS[row + i], s = CS[row + half_ + i];
        const float x0 = X[a], x1 = X[b];
        precise float y0 = x0 * c - x1 * s;
        precise float y1 = x0 * s + x1 * c;
        X[a] = y0;
        X[b] = y1;
    }
}
