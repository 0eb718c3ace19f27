#!/usr/bin/env python3
"""make_tiny_gemma3.py OUT.gguf -- a tiny random-weight gemma3 model written without deja.

Standard library only (struct, random): a GGUF v3 writer of its own, so a bug that deja's
GGUF writer (`deja synth`) shared with deja's loader could not hide here; llama.cpp reads the
file with its own loader, and tests/golden/gemma holds llama.cpp's logits on it.  The bytes
depend only on this script (random.Random(seed) is stable across Python versions); the
sha256 the goldens were made on is in SHA256SUMS.

What it exercises beyond `deja synth --arch gemma3 --preset tiny`: norm weights that are not
1 (pre-, post-, q- and k-norms each their own), attention.sliding_window_pattern 2 (layers
0, 2 slide; 1, 3 global), window 8, rope.freq_base_swa, linear rope scaling of the global
layers, final_logit_softcapping, F32 matrices, and a vocabulary of its own: SentencePiece
("llama" model) with byte fallback, no space prefix, Gemma's special ids (pad 0, eos 1,
bos 2, unk 3) and the control tokens <start_of_turn> / <end_of_turn>.
"""
import random
import struct
import sys

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GGML_F32 = 0

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_CTX = 64, 4, 4, 2, 32, 128, 512


def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = s_str(key) + struct.pack("<I", typ)
    if typ == T_U32:
        out += struct.pack("<I", val)
    elif typ == T_I32:
        out += struct.pack("<i", val)
    elif typ == T_F32:
        out += struct.pack("<f", val)
    elif typ == T_BOOL:
        out += struct.pack("<B", 1 if val else 0)
    elif typ == T_STR:
        out += s_str(val)
    else:
        raise ValueError(typ)
    return out


def kv_arr(key, elem, vals):
    out = s_str(key) + struct.pack("<IIQ", T_ARR, elem, len(vals))
    for v in vals:
        if elem == T_STR:
            out += s_str(v)
        elif elem == T_F32:
            out += struct.pack("<f", v)
        elif elem == T_I32:
            out += struct.pack("<i", v)
    return out


def vocab():
    toks, scores, types = ["<pad>", "<eos>", "<bos>", "<unk>"], [0.0] * 4, [3, 3, 3, 2]
    for b in range(256):
        toks.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(6)
    toks += ["<start_of_turn>", "<end_of_turn>"]
    scores += [0.0, 0.0]
    types += [3, 3]
    pieces = ["\n", "\n\n", "\u2581", "\u2581\u2581", "\u2581\u2581\u2581\u2581"]
    pieces += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pieces += list("0123456789.,:;!?()[]{}=+-*/\"'_#<>")
    words = ("the a of and to in is it that for on with as was he she they you we this def return "
             "import class self print user model what capital france paris story once upon time there "
             "little girl named lily day sun park play happy big dog cat ran home")
    pieces += ["\u2581" + w for w in words.split()]
    pieces += ["in", "er", "on", "an", "re", "at", "en", "ing", "ed", "or", "es", "th", "he", "ll", "ou"]
    for i, p in enumerate(pieces):
        toks.append(p)
        scores.append(-1.0 - 0.01 * i)  # earlier pieces merge first
        types.append(1)
    return toks, scores, types


def main():
    out_path = sys.argv[1]
    rng = random.Random(20250611)
    toks, scores, types = vocab()
    n_vocab = len(toks)

    def rand(n, scale):
        return [(rng.random() * 2.0 - 1.0) * scale for _ in range(n)]

    def norm(n):
        return [1.0 + (rng.random() * 2.0 - 1.0) * 0.3 for _ in range(n)]

    E, Q, KV, F = N_EMBD, N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM, N_FF
    tensors = [("token_embd.weight", [E, n_vocab], rand(E * n_vocab, 0.5)),
               ("output_norm.weight", [E], norm(E))]
    for il in range(N_LAYER):
        p = "blk.%d." % il
        tensors += [
            (p + "attn_norm.weight", [E], norm(E)),
            (p + "attn_q.weight", [E, Q], rand(E * Q, 0.15)),
            (p + "attn_k.weight", [E, KV], rand(E * KV, 0.15)),
            (p + "attn_v.weight", [E, KV], rand(E * KV, 0.15)),
            (p + "attn_q_norm.weight", [HEAD_DIM], norm(HEAD_DIM)),
            (p + "attn_k_norm.weight", [HEAD_DIM], norm(HEAD_DIM)),
            (p + "attn_output.weight", [Q, E], rand(Q * E, 0.15)),
            (p + "post_attention_norm.weight", [E], norm(E)),
            (p + "ffn_norm.weight", [E], norm(E)),
            (p + "ffn_gate.weight", [E, F], rand(E * F, 0.15)),
            (p + "ffn_up.weight", [E, F], rand(E * F, 0.15)),
            (p + "ffn_down.weight", [F, E], rand(F * E, 0.15)),
            (p + "post_ffw_norm.weight", [E], norm(E)),
        ]

    a = "gemma3"
    kvs = [
        kv("general.architecture", T_STR, a),
        kv("general.name", T_STR, "tiny gemma3 (make_tiny_gemma3.py)"),
        kv("general.alignment", T_U32, ALIGN),
        kv(a + ".context_length", T_U32, N_CTX),
        kv(a + ".embedding_length", T_U32, E),
        kv(a + ".block_count", T_U32, N_LAYER),
        kv(a + ".feed_forward_length", T_U32, F),
        kv(a + ".attention.head_count", T_U32, N_HEAD),
        kv(a + ".attention.head_count_kv", T_U32, N_HEAD_KV),
        kv(a + ".attention.key_length", T_U32, HEAD_DIM),
        kv(a + ".attention.value_length", T_U32, HEAD_DIM),
        kv(a + ".attention.layer_norm_rms_epsilon", T_F32, 1e-6),
        kv(a + ".attention.sliding_window", T_U32, 8),
        kv(a + ".attention.sliding_window_pattern", T_U32, 2),
        kv(a + ".rope.freq_base", T_F32, 100000.0),
        kv(a + ".rope.freq_base_swa", T_F32, 5000.0),
        kv(a + ".rope.scaling.type", T_STR, "linear"),
        kv(a + ".rope.scaling.factor", T_F32, 4.0),
        kv(a + ".final_logit_softcapping", T_F32, 10.0),
        kv("tokenizer.ggml.model", T_STR, "llama"),
        kv("tokenizer.ggml.pre", T_STR, "default"),
        kv_arr("tokenizer.ggml.tokens", T_STR, toks),
        kv_arr("tokenizer.ggml.scores", T_F32, scores),
        kv_arr("tokenizer.ggml.token_type", T_I32, types),
        kv("tokenizer.ggml.bos_token_id", T_U32, 2),
        kv("tokenizer.ggml.eos_token_id", T_U32, 1),
        kv("tokenizer.ggml.unknown_token_id", T_U32, 3),
        kv("tokenizer.ggml.padding_token_id", T_U32, 0),
        kv("tokenizer.ggml.add_bos_token", T_BOOL, True),
        kv("tokenizer.ggml.add_eos_token", T_BOOL, False),
        kv("tokenizer.ggml.add_space_prefix", T_BOOL, False),
    ]

    infos, datas, off = b"", [], 0
    for name, ne, vals in tensors:
        assert len(vals) == eval("*".join(map(str, ne)))
        infos += s_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", GGML_F32, off)
        data = struct.pack("<%df" % len(vals), *vals)
        pad = (-len(data)) % ALIGN
        datas.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(out_path, "wb") as f:
        f.write(head)
        for d in datas:
            f.write(d)


if __name__ == "__main__":
    main()
