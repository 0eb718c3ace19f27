/* common.glsl — byte access to a storage buffer of 32-bit words, and the scalar
 * conversions every shader shares.  Weight blocks (18, 34, 210 bytes ...) are not
 * 4-byte aligned, so shaders read bytes out of words: no 8- or 16-bit storage
 * extension is needed, and every Vulkan 1.1 device runs them. */

uint rd8(uint o) { return (W[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
/* o even: the 16 bits at o (little-endian, as in the file) */
uint rd16(uint o) { return (W[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu; }
uint rd32(uint o) { return rd16(o) | (rd16(o + 2u) << 16); }
float f16(uint h) { return unpackHalf2x16(h).x; }
float bf16(uint h) { return uintBitsToFloat(h << 16); }
int s8(uint b) { return int(b << 24) >> 24; }
