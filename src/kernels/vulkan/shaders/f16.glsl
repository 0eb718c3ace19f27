/* f16.glsl — f32 to f16 bits as core/fp16.h's dj_f32_to_fp16, in the same integer steps (to
 * nearest, ties to even; NaN keeps its top payload bits), so a shader's f16 is the CPU's: not
 * packHalf2x16, whose rounding the driver chooses (lavapipe's is not to nearest). */
uint f16_bits(float f) {
    const uint x = floatBitsToUint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sign;
        const uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint r = m >> shift;
        const uint rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (r & 1u) != 0u)) r++;
        return sign | r;
    }
    uint r = (ax >> 13) - (112u << 10);
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) r++;
    return sign | r;
}

