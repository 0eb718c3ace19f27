#!/usr/bin/env python3
"""tensor_digest.py — the tensor digest of GGUF files (tests/golden/quants/README.md).

    python3 bench/peer/tensor_digest.py FILE.gguf...   ->  "<hex>  FILE" per file

sha256 over every tensor, in the byte order of their names: the name, a 0 byte, the
type (u32 LE), n_dims (u32 LE), ne[0..n_dims) (u64 LE each), then the tensor's bytes.
Two files with the same digest hold the same tensors (names, types, shapes, data)
whatever their order, alignment or metadata: test_quant_golden compares the digest
of a `deja quantize` file with that of llama-quantize's file.  A GGUF parser of its
own (no `gguf` package: version 0.17.1 does not know types 40-42).
"""
import hashlib
import struct
import sys

# (elements per block, bytes per block) by ggml type id (ggml.c's type_traits)
TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}
SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def digest(path):
    with open(path, 'rb') as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from('<' + fmt, buf, pos)
        pos += struct.calcsize('<' + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take('Q')
        s = buf[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take('I'), take('Q')
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    if buf[:4] != b'GGUF':
        raise ValueError(f'{path}: not a GGUF file')
    pos = 4
    take('I')  # version
    n_tensors, n_kv = take('Q'), take('Q')
    alignment = 32
    for _ in range(n_kv):
        key = string()
        v = value(take('I'))
        if key == b'general.alignment':
            alignment = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take('I')
        ne = [take('Q') for _ in range(n_dims)]
        t = take('I')
        off = take('Q')
        infos.append((name, n_dims, ne, t, off))
    data = (pos + alignment - 1) // alignment * alignment
    h = hashlib.sha256()
    for name, n_dims, ne, t, off in sorted(infos):
        blck, bb = TYPES[t]
        n = ne[0] // blck * bb
        for d in ne[1:]:
            n *= d
        h.update(name + b'\0' + struct.pack('<II', t, n_dims) + b''.join(struct.pack('<Q', d) for d in ne))
        h.update(buf[data + off:data + off + n])
    return h.hexdigest()


if __name__ == '__main__':
    for p in sys.argv[1:]:
        print(f'{digest(p)}  {p}')
