#version 450
/* attn.comp — causal attention of one (token, head) a workgroup over the K/V rows of the
 * token's sequence in the paged cache: position j of the sequence is row j % bs of block
 * TAB[tab_off + j / bs] (the pool's block ids; the cache is blocks of [layer][K | V][row]
 * [n_embd_kv], element offsets from push constants), keys 0 .. POS[t], or with a sliding
 * window of n_swa keys (gemma), keys POS[t] - n_swa + 1 .. POS[t].
 *
 *   s_j = (q · k_j) * scale  (gemma2: then cap tanh(s_j / cap)),  o = sum_j exp(s_j - max) v_j / sum_j exp(s_j - max)
 *
 * Online softmax over chunks of 64 positions from the first key, in a fixed order with nothing
 * shared between tokens: in a chunk, thread i scores position c + i (a dot in dimension
 * order); the chunk's max and its sum of exps meet in fixed trees; the running max M, sum
 * S and outputs are rescaled by exp(M_old - M_new); output dimension d (hd <= 256) is
 * summed by thread d % 64 over the chunk's positions in order.  Keys are hd long, values vd
 * (<= 512; MLA: the value is the first vd elements of the K row itself, v_off = k_off).  A sink (gpt-oss) is a logit
 * with no value joining the softmax: the running max starts at it and the sum at 1.  So a token's output is the
 * same bits alone or batched, and whichever blocks hold its rows; any context length. */
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float Q[]; };
#if defined(WT_F16) /* f16 elements, two a word (no 16-bit storage feature needed) */
layout(std430, binding = 1) readonly buffer KVb { uint KV[]; };
float kv(uint i) {
    const vec2 v = unpackHalf2x16(KV[i >> 1]);
    return (i & 1u) != 0u ? v.y : v.x;
}
#else
layout(std430, binding = 1) readonly buffer KVb { float KV[]; };
float kv(uint i) { return KV[i]; }
#endif
layout(std430, binding = 2) writeonly buffer Ob { float O[]; };
layout(std430, binding = 3) readonly buffer Tb { uint TAB[]; }; /* from tab0: per token [pos, table start], the tables */
layout(push_constant) uniform P {
    uint n_head;
    uint n_kv_head; /* GQA: head h reads kv head h / (n_head / n_kv_head) */
    uint hd;
    uint bs;        /* rows a block */
    uint blk_stride; /* elements a block */
    uint k_off;     /* elements from a block's start to this layer's K rows */
    uint v_off;     /* ... to its V rows */
    uint row_stride; /* elements a K (V) row: n_kv_head * hd */
    uint qs;        /* floats between tokens in Q */
    float scale;
    uint tab0;      /* TAB's first word for this dispatch */
    uint n_swa;     /* a sliding window of this many keys; 0: every key */
    float cap;      /* soft-capping of the scores; 0: none */
    uint sink0;     /* gpt-oss: head h's sink logit is TAB[sink0 + h] (float bits); 0: none */
    uint vd;        /* elements a value (head h's output at O[t * os + h * vd]) */
    uint os;        /* floats between tokens in O */
} p;

shared float sc[64];
shared float red[64];

void main() {
    const uint t = gl_WorkGroupID.y, h = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint n = TAB[p.tab0 + 2u * t] + 1u, tab = p.tab0 + TAB[p.tab0 + 2u * t + 1u];
    const uint kvh = h / (p.n_head / p.n_kv_head);
    const uint qb = t * p.qs + h * p.hd, ob = t * p.os + h * p.vd;
    float M = -1.0 / 0.0, S = 0.0;
    if (p.sink0 != 0u) { /* exp(sink - M) = 1 with M = sink; an empty window keeps it */
        M = uintBitsToFloat(TAB[p.sink0 + h]);
        S = 1.0;
    }
    float o[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    const uint first = p.n_swa != 0u && n > p.n_swa ? n - p.n_swa : 0u; /* forward.c swa_first_key */
    for (uint c0 = first; c0 < n; c0 += 64u) {
        const uint j = c0 + tid;
        float s = -1.0 / 0.0;
        if (j < n) {
            const uint base = TAB[tab + j / p.bs] * p.blk_stride + (j % p.bs) * p.row_stride + kvh * p.hd + p.k_off;
            s = 0.0;
            for (uint d = 0; d < p.hd; d++) s = fma(Q[qb + d], kv(base + d), s);
            s *= p.scale;
            if (p.cap != 0.0) s = tanh(s * (1.0 / p.cap)) * p.cap;
        }
        red[tid] = s;
        barrier();
        [[unroll]] for (uint w = 32; w > 0; w >>= 1) {
            if (tid < w) red[tid] = max(red[tid], red[tid + w]);
            barrier();
        }
        const float mn = max(M, red[0]);
        barrier();
        const float e = j < n ? exp(s - mn) : 0.0;
        sc[tid] = e;
        red[tid] = e;
        barrier();
        [[unroll]] for (uint w = 32; w > 0; w >>= 1) {
            if (tid < w) red[tid] += red[tid + w];
            barrier();
        }
        const float alpha = exp(M - mn); /* 0 at the first chunk (M = -inf) */
        S = S * alpha + red[0];
        const uint nc = min(64u, n - c0);
        [[unroll]] for (uint q = 0; q < 8; q++) {
            const uint d = tid + 64u * q;
            if (d < p.vd) {
                float a = o[q] * alpha;
                for (uint jj = 0; jj < nc; jj++) {
                    const uint jp = c0 + jj;
                    const uint base = TAB[tab + jp / p.bs] * p.blk_stride + (jp % p.bs) * p.row_stride + kvh * p.hd;
                    a = fma(sc[jj], kv(base + p.v_off + d), a);
                }
                o[q] = a;
            }
        }
        M = mn;
        barrier(); /* sc and red are rewritten by the next chunk */
    }
    [[unroll]] for (uint q = 0; q < 8; q++) {
        const uint d = tid + 64u * q;
        if (d < p.vd) O[ob + d] = o[q] / S;
    }
}
