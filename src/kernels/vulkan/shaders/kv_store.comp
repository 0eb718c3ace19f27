#version 450
/* kv_store.comp — a layer's new K (or V) rows, f32 in S (token t at t * ss), written in the
 * pool's row format (f32, or f16 two to a word, rounded as the CPU's kv_row_from_f32) into the
 * device's mirror of the pool (M, the word where token t's row starts: T[tab0 + t]) and packed
 * into O (from word o_off, rows of rw words) for the host's copy of the pool, read back once a
 * ubatch.  So the rows need no readback before the attention that uses them, and the host's
 * bytes are the mirror's. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Mb { uint M[]; };
layout(std430, binding = 1) readonly buffer Sb { float S[]; };
layout(std430, binding = 2) writeonly buffer Ob { uint O[]; };
layout(std430, binding = 3) readonly buffer Tb { uint T[]; };
layout(push_constant) uniform P {
    uint n;     /* n_tok * rw */
    uint rw;    /* words a row */
    uint ss;    /* floats between tokens in S */
    uint f16;   /* 1: f16 elements */
    uint o_off;
    uint tab0;
} p;

#include "f16.glsl"

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    const uint t = i / p.rw, w = i - t * p.rw, s = t * p.ss;
    const uint bits = p.f16 != 0u ? f16_bits(S[s + 2u * w]) | (f16_bits(S[s + 2u * w + 1u]) << 16)
                                  : floatBitsToUint(S[s + w]);
    M[T[p.tab0 + t] + w] = bits;
    O[p.o_off + i] = bits;
}
