#!/usr/bin/env python3
"""gen_vectors.py — writes tests/kernels/vectors/<type>.djqv: raw blocks of a ggml weight type
and their float values as two independent implementations compute them.

  (a) the gguf Python package's numpy dequantizers (gguf.quants.dequantize; gguf 0.17.1 has
      every type here but MXFP4, NVFP4, Q1_0 and Q2_0);
  (b) llama.cpp's own reference dequantizer, ggml_get_type_traits(type)->to_float of
      libggml-base (ggml-quants.c's dequantize_row_*), run by bench/peer/quant_vectors_peer.c
      against a scratch llama.cpp build (snapshot d32676d7).

The script fails unless (a) and (b) agree bit for bit wherever (a) exists; the file records
which sources produced its values.  deja's reference and kernel dequantizers must then equal
them bit for bit (tests/kernels/test_quant_vectors.c).

Blocks: seeded random bytes, with the scale fields made sane (finite, modest): f16 scales
of magnitude 2^-12 .. 2^-3 with random signs, except in blocks 1, 2, 3 of every type: an f16
scale of zero, a subnormal one and one near -2^4; MXFP4's E8M0 exponent in 110..140 with
blocks at e = 0, 1, 2 (the subnormal paths); NVFP4's UE4M3 bytes left fully random (every
byte is finite there; the first two blocks hold 0, 0x7f (E4M3's NaN, read as 0), 0xff, 0x80
(bit 7 is ignored), 1 and 7 (subnormal), 8 and 0x7e (largest)).

File format (little-endian):
  char magic[4] = "DJQV"; u32 version = 1; u32 ggml type id; u32 n_blocks; u32 block bytes;
  u32 block elements; u32 sources (bit 0: llama.cpp to_float, bit 1: gguf numpy); u32 0;
  u8 blocks[n_blocks * block bytes]; f32 values[n_blocks * block elements]

Usage: gen_vectors.py --peer /tmp/quant_vectors_peer [--out tests/kernels/vectors]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    from gguf import quants as gguf_quants
    from gguf.constants import GGMLQuantizationType
except ImportError:  # the script requires (b) only; (a) is checked where present
    gguf_quants = None

# name, ggml id, block elements, block bytes, f16 scale offsets (or the scale format); the i-th
# type's blocks come from numpy.random.default_rng(1000 + i)
TYPES = [
    ("q4_0", 2, 32, 18, [0]), ("q4_1", 3, 32, 20, [0, 2]), ("q5_0", 6, 32, 22, [0]),
    ("q5_1", 7, 32, 24, [0, 2]), ("q8_0", 8, 32, 34, [0]), ("q2_K", 10, 256, 84, [80, 82]),
    ("q3_K", 11, 256, 110, [108]), ("q4_K", 12, 256, 144, [0, 2]), ("q5_K", 13, 256, 176, [0, 2]),
    ("q6_K", 14, 256, 210, [208]), ("iq2_xxs", 16, 256, 66, [0]), ("iq2_xs", 17, 256, 74, [0]),
    ("iq3_xxs", 18, 256, 98, [0]), ("iq1_s", 19, 256, 50, [0]), ("iq4_nl", 20, 32, 18, [0]),
    ("iq3_s", 21, 256, 110, [0]), ("iq2_s", 22, 256, 82, [0]), ("iq4_xs", 23, 256, 136, [0]),
    ("iq1_m", 29, 256, 56, "iq1_m"), ("tq1_0", 34, 256, 54, [52]), ("tq2_0", 35, 256, 66, [64]),
    ("mxfp4", 39, 32, 17, "e8m0"), ("nvfp4", 40, 64, 36, "ue4m3"), ("q1_0", 41, 128, 18, [0]),
    ("q2_0", 42, 64, 18, [0]),
]


def n_blocks(blck):  # 1024 elements, at least 8 blocks: a few KB per type
    return max(1024 // blck, 8)


def f16_bits(v):
    return int(np.array(v, dtype=np.float16).view(np.uint16))


def sane_f16(rng, ib):
    if ib == 1:
        return 0x0000  # zero scale
    if ib == 2:
        return int(rng.integers(1, 0x400))  # subnormal f16
    if ib == 3:
        return f16_bits(-(1 + rng.random()) * 8.0)  # near 2^4
    mag = (1 + rng.random()) * 2.0 ** -int(rng.integers(4, 13))
    return f16_bits(-mag if rng.integers(2) else mag)


def make_blocks(name, blck, nbytes, scales, seed):
    rng = np.random.default_rng(seed)
    nb = n_blocks(blck)
    raw = bytearray(rng.integers(0, 256, size=nb * nbytes, dtype=np.uint8).tobytes())
    for ib in range(nb):
        base = ib * nbytes
        if scales == "e8m0":
            raw[base] = ib if ib < 3 else int(rng.integers(110, 141))
        elif scales == "ue4m3":  # random bytes (all finite), and the special ones first
            if ib < 2:
                raw[base:base + 4] = bytes([[0x00, 0x7F, 0xFF, 0x80], [0x01, 0x07, 0x08, 0x7E]][ib])
        elif scales == "iq1_m":
            h = sane_f16(rng, ib)
            for k in range(4):  # nibble k of the f16 scale = top nibble of scale word k
                off = base + 48 + 2 * k
                w = struct.unpack_from("<H", raw, off)[0]
                struct.pack_into("<H", raw, off, (w & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12))
        else:
            for off in scales:
                struct.pack_into("<H", raw, base + off, sane_f16(rng, ib))
    return bytes(raw)


def peer(peer_bin, tid, raw):
    with tempfile.TemporaryDirectory() as tmp:
        fin, fout = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.f32")
        open(fin, "wb").write(raw)
        subprocess.run([peer_bin, str(tid), fin, fout], check=True)
        return np.fromfile(fout, dtype="<f4")


def gguf_values(tid, raw):
    if gguf_quants is None:
        return None
    try:
        qt = GGMLQuantizationType(tid)
    except ValueError:
        return None
    try:
        return gguf_quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qt).astype("<f4").reshape(-1)
    except NotImplementedError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True, help="quant_vectors_peer binary (bench/peer/README.md)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    for seed, (name, tid, blck, nbytes, scales) in enumerate(TYPES):
        info = subprocess.run([args.peer, "--info", str(tid)], check=True, capture_output=True, text=True).stdout.split()
        if info != [name, str(blck), str(nbytes)]:
            sys.exit(f"{name}: llama.cpp says {info}, expected {[name, blck, nbytes]}")
        raw = make_blocks(name, blck, nbytes, scales, 1000 + seed)
        b = peer(args.peer, tid, raw)
        if b.size != n_blocks(blck) * blck or not np.all(np.isfinite(b)):
            sys.exit(f"{name}: llama.cpp gave {b.size} values, finite: {np.all(np.isfinite(b))}")
        sources = 1
        a = gguf_values(tid, raw)
        if a is not None:
            diff = np.nonzero(a.view(np.uint32) != b.view(np.uint32))[0]
            if diff.size:
                i = diff[0]
                sys.exit(f"{name}: gguf and llama.cpp differ in {diff.size} values, first #{i}: {a[i]!r} vs {b[i]!r}")
            sources |= 2
        nb = n_blocks(blck)
        with open(os.path.join(args.out, f"{name}.djqv"), "wb") as f:
            f.write(b"DJQV" + struct.pack("<7I", 1, tid, nb, nbytes, blck, sources, 0))
            f.write(raw)
            f.write(b.astype("<f4").tobytes())
        print(f"{name:8s} {nb:3d} blocks  llama.cpp{' = gguf' if sources & 2 else ' (gguf has no ' + name + ')'}")


if __name__ == "__main__":
    main()
