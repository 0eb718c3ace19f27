#version 450
/* moe_sum.comp — X[t][j] += w_0 O[r_0][j] + w_1 O[r_1][j] + ... : a token's k expert outputs
 * (rows r_s of O), weighted and summed in its selection order (k - 1 adds, as llama.cpp's
 * ggml_add chain and forward.c moe_ffn), then added to the residual.  `precise`: no fma
 * contraction, so the order written is the order run.  With shared experts (SH bound, sh
 * set: deja's deepseek2/glm4moe), their row joins before the residual: X + (sum + SH[t][j]).  Per (token, element): a token's result
 * reads only its own rows and weights, whatever else the ubatch holds. */
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Ob { float O[]; };
layout(std430, binding = 2) readonly buffer Tb { uint T[]; };
layout(std430, binding = 3) readonly buffer Sb { float SH[]; };
layout(push_constant) uniform P {
    uint n_el;  /* n_tok * n */
    uint n;     /* floats a row */
    uint k;     /* experts a token */
    uint tab0;  /* token t's k rows at T[tab0 + 2kt], then its k weights (float bits) */
    uint sh;    /* 1: add SH[i] to the sum */
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n_el) return;
    const uint t = i / p.n, j = i - t * p.n, b = p.tab0 + 2u * p.k * t;
    precise float acc = uintBitsToFloat(T[b + p.k]) * O[T[b] * p.n + j];
    for (uint s = 1u; s < p.k; s++) {
        precise float ws = uintBitsToFloat(T[b + p.k + s]) * O[T[b + s] * p.n + j];
        acc = acc + ws;
    }
    precise float all = p.sh != 0u ? acc + SH[i] : acc;
    precise float y = X[i] + all;
    X[i] = y;
}
