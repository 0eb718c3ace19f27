#!/bin/sh
# seed.sh NAME SHARED_DIR CORPUS_DIR — fills CORPUS_DIR with seed inputs for
# the fuzzer NAME from the shared test data (never committed; see Makefile's
# `fuzz` target).  Unknown names get no seeds (the fuzzer starts empty).
#   fuzz_gguf       every .gguf in models/ and vocab/ cut to its first 64 KB
#                   (the metadata is what the reader parses; libFuzzer's
#                   default -max_len follows the seeds), plus the whole
#                   files under 1.5 MB so that tensor data is reached too
#                   and a small hand-built file with every value kind
#                   (nested and string arrays, alignment, a q8_0 tensor)
#   fuzz_tokenizer  the vocab test inputs (*.inp)
#   fuzz_trace      the first 3 lines of every trace in traces/, cut to 16 KB
#   fuzz_grammar    the llama.cpp example grammars in golden/grammars/*.gbnf
#   fuzz_model      models/stories260K.gguf and golden/moe's four MoE/MLA models
#                   whole; when $DEJA names a deja binary (the Makefile passes
#                   build/bin/deja), `deja synth --preset tiny` files of the
#                   architectures no other seed has (qwen35, qwen35moe, qwen3next
#                   hybrids, gpt-oss, gemma3, glm4moe, mistral3) in q8_0 with
#                   stories260K's 512-token vocabulary; and three hand-built tiny
#                   models (5-token SPM vocab, 1 layer): a llama in f32 with
#                   llama3 rope scaling in its metadata, a qwen2 (biases) with
#                   q8_0/q4_0/f16/bf16 weights, a qwen3 (q/k norms) with
#                   q4_K/q6_K weights, and three qwen3s with the 21 other
#                   weight types (seven each) — every weight type the loader binds,
#                   each small enough that the target also runs them
#   fuzz_json_schema  hand-written JSON schemas (every supported keyword; strings
#                   under several constraints: pattern with lengths, allOf
#                   patterns and formats, the uri/hostname/ipv6 formats; tools
#                   arrays), each after one options byte
#   fuzz_request    request bodies of /v1/completions (logprobs, suffix, grammar,
#                   json_schema, response_format), the three chat dialects (Claude
#                   Code-like; Codex-like Responses with namespace tools,
#                   previous_response_id, effort and every field Codex sends; OpenAI
#                   SDK-like) and /infill (llama.vscode-like), each after its selector byte
#   fuzz_toolcall   hand-written tools arrays (string / integer / enum / nested /
#                   optional / nullable / anyOf parameters, odd names), each
#                   after a family byte and an options byte, for every family
#   fuzz_toolparse  hand-written model outputs, a few per tool-call family
#                   (reasoning, content, one and two calls, a cut call),
#                   each after its options byte (family | tools | reasoning)
#                   and a split-seed byte
#   fuzz_kv_record  hand-built KV store records (see its section below)
#   fuzz_spec       the node-bound byte 64 or 200, then the first 4 KB of a few traces
#                   (as op/length/token bytes: real text repeats, which the sources index)
#   fuzz_http       raw HTTP/1.1 request streams (a chat POST with Content-Length, a
#                   chunked one with a trailer, two pipelined GETs, Expect: 100-continue,
#                   absolute-form, and the smuggling shapes of issue 28: two
#                   Content-Lengths, CL + TE, a space before a colon, xchunked, a
#                   2^64-1 chunk, %00 in the path), each after a split byte
#   fuzz_jinja      every chat template in golden/chat_templates/templates/ (the
#                   50 real templates of the golden renders), twice: after the
#                   options byte 1 (a plain chat) and 6 (a tool loop with tools
#                   and reasoning, add_generation_prompt; see fuzz_jinja.c)
set -eu
# Byte semantics: ${#s} below is a length in bytes only in the C locale (under C.UTF-8
# the vocab's U+2581 counted as one, and every hand-built model's token list overran).
export LC_ALL=C

# Little-endian writers for the hand-built seed (POSIX sh arithmetic is 64-bit).
byte() { printf "\\$(printf '%03o' "$1")"; }
u32() { byte $(($1 & 255)); byte $((($1 >> 8) & 255)); byte $((($1 >> 16) & 255)); byte $((($1 >> 24) & 255)); }
u64() { u32 $(($1 & 4294967295)); u32 $((($1 >> 32) & 4294967295)); }
str() { u64 ${#1}; printf '%s' "$1"; }
zeros() { i=0; while [ $i -lt "$1" ]; do printf '\000'; i=$((i + 1)); done; }

every_kind() {
    printf 'GGUF'; u32 3; u64 2; u64 9
    str general.architecture; u32 8; str llama
    str general.alignment; u32 4; u32 32
    str k.u8; u32 0; byte 7
    str k.i16; u32 3; byte 254; byte 255
    str k.f32; u32 6; u32 1069547520
    str k.f64; u32 12; u64 4609434218613702656
    str k.bool; u32 7; byte 1
    str k.strs; u32 9; u32 8; u64 3; str a; str ""; str "b c"
    str k.nested; u32 9; u32 9; u64 2; u32 4; u64 2; u32 1; u32 2; u32 8; u64 1; str x
    str w; u32 2; u64 4; u64 2; u32 0; u64 0
    str q; u32 1; u64 32; u32 8; u64 32
}
# ---- fuzz_model: tiny models, built in three parts (metadata, tensor infos, data) ----
# Weight bytes: consecutive slices of stories260K's f32 weights (real small values;
# as quantized blocks, varied bytes), deterministic and fast; without that file a
# 31-bit LCG (one process per byte: slow, but the same kind of bytes).  Ones: 1.0f.
SRC_OFF=131072
R=12345
rnd() { R=$(((R * 1103515245 + 12345) & 2147483647)); }
src_bytes() { # N
    if [ -f "$SRC" ]; then
        SRC_OFF=$(((SRC_OFF + 31) / 32 * 32))
        tail -c +$((SRC_OFF + 1)) "$SRC" | head -c "$1"
        SRC_OFF=$((SRC_OFF + $1))
    else
        i=0; while [ $i -lt "$1" ]; do rnd; byte $(((R >> 16) & 255)); i=$((i + 1)); done
    fi
}
ones() { i=0; while [ $i -lt "$1" ]; do printf '\000\000\200\077'; i=$((i + 1)); done; }
kv_u32() { { str "$1"; u32 4; u32 "$2"; } >> "$KVF"; NKV=$((NKV + 1)); }
kv_f32() { { str "$1"; u32 6; u32 "$2"; } >> "$KVF"; NKV=$((NKV + 1)); } # value as IEEE bits
kv_str() { { str "$1"; u32 8; str "$2"; } >> "$KVF"; NKV=$((NKV + 1)); }
# tensor NAME TYPE NBYTES KIND NE0 [NE1]; KIND: f (f32 weights), o (f32 ones), r (block bytes)
tensor() {
    name=$1 ty=$2 nb=$3 kind=$4 ne0=$5
    { str "$name"; if [ $# -ge 6 ]; then u32 2; u64 "$ne0"; u64 "$6"; else u32 1; u64 "$ne0"; fi; u32 "$ty"; u64 "$OFF"; } >> "$TIF"
    dlen=$(wc -c < "$DATF")
    zeros $((OFF - dlen)) >> "$DATF"
    case $kind in
    o) ones $((nb / 4)) ;;
    *) src_bytes "$nb" ;;
    esac >> "$DATF"
    OFF=$(((OFF + nb + 31) / 32 * 32))
    NT=$((NT + 1))
}
model_begin() { # ARCH E N_LAYER N_HEAD N_HEAD_KV HEAD_DIM N_FF
    KVF=$TMPD/kv TIF=$TMPD/ti DATF=$TMPD/data
    : > "$KVF"; : > "$TIF"; : > "$DATF"
    NKV=0 NT=0 OFF=0
    kv_str general.architecture "$1"
    kv_u32 "$1.context_length" 64
    kv_u32 "$1.embedding_length" "$2"
    kv_u32 "$1.block_count" "$3"
    kv_u32 "$1.attention.head_count" "$4"
    kv_u32 "$1.attention.head_count_kv" "$5"
    kv_u32 "$1.attention.key_length" "$6"
    kv_u32 "$1.rope.dimension_count" "$6"
    kv_u32 "$1.feed_forward_length" "$7"
    kv_f32 "$1.rope.freq_base" 1176256512 # 10000
    kv_f32 "$1.attention.layer_norm_rms_epsilon" 925353388 # 1e-5
    # an SPM vocab of 5 tokens: <unk> <s> </s> "\342\226\201a" (U+2581 a) b
    { str tokenizer.ggml.tokens; u32 9; u32 8; u64 5; str "<unk>"; str "<s>"; str "</s>"; str "$(printf '\342\226\201a')"; str b; } >> "$KVF"
    { str tokenizer.ggml.scores; u32 9; u32 6; u64 5; u32 0; u32 0; u32 0; u32 3212836864; u32 3221225472; } >> "$KVF"
    { str tokenizer.ggml.token_type; u32 9; u32 5; u64 5; u32 2; u32 3; u32 3; u32 1; u32 1; } >> "$KVF"
    NKV=$((NKV + 3))
    kv_str tokenizer.ggml.model llama
    kv_u32 tokenizer.ggml.bos_token_id 1
    kv_u32 tokenizer.ggml.eos_token_id 2
    kv_u32 tokenizer.ggml.unknown_token_id 0
}
model_end() { # OUT
    { printf 'GGUF'; u32 3; u64 "$NT"; u64 "$NKV"; cat "$KVF" "$TIF"; } > "$1"
    size=$(wc -c < "$1")
    zeros $(((32 - size % 32) % 32)) >> "$1"
    cat "$DATF" >> "$1"
    dlen=$(wc -c < "$DATF")
    zeros $((OFF - dlen)) >> "$1"
}
# F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q6_K 14, BF16 30
tiny_llama_f32() {
    model_begin llama 8 1 2 1 4 16
    kv_str llama.rope.scaling.type llama3
    kv_f32 llama.rope.scaling.factor 1090519040 # 8
    kv_u32 llama.rope.scaling.original_context_length 16
    tensor token_embd.weight 0 160 f 8 5
    tensor output_norm.weight 0 32 o 8
    tensor blk.0.attn_norm.weight 0 32 o 8
    tensor blk.0.attn_q.weight 0 256 f 8 8
    tensor blk.0.attn_k.weight 0 128 f 8 4
    tensor blk.0.attn_v.weight 0 128 f 8 4
    tensor blk.0.attn_output.weight 0 256 f 8 8
    tensor blk.0.ffn_norm.weight 0 32 o 8
    tensor blk.0.ffn_gate.weight 0 512 f 8 16
    tensor blk.0.ffn_up.weight 0 512 f 8 16
    tensor blk.0.ffn_down.weight 0 512 f 16 8
    model_end "$1"
}
tiny_qwen2_mixed() { # E 32, 2 heads of 16, 1 KV head, n_ff 32
    model_begin qwen2 32 1 2 1 16 32
    tensor token_embd.weight 8 170 r 32 5
    tensor output.weight 1 320 r 32 5
    tensor output_norm.weight 0 128 o 32
    tensor blk.0.attn_norm.weight 0 128 o 32
    tensor blk.0.attn_q.weight 2 576 r 32 32
    tensor blk.0.attn_q.bias 0 128 f 32
    tensor blk.0.attn_k.weight 1 1024 r 32 16
    tensor blk.0.attn_k.bias 0 64 f 16
    tensor blk.0.attn_v.weight 30 1024 r 32 16
    tensor blk.0.attn_v.bias 0 64 f 16
    tensor blk.0.attn_output.weight 8 1088 r 32 32
    tensor blk.0.ffn_norm.weight 0 128 o 32
    tensor blk.0.ffn_gate.weight 8 1088 r 32 32
    tensor blk.0.ffn_up.weight 2 576 r 32 32
    tensor blk.0.ffn_down.weight 1 2048 r 32 32
    model_end "$1"
}
tiny_qwen3_kquants() { # E 256 (a q4_K/q6_K row), 2 heads of 8, 1 KV head, n_ff 16
    model_begin qwen3 256 1 2 1 8 16
    tensor token_embd.weight 12 720 r 256 5
    tensor output_norm.weight 0 1024 o 256
    tensor blk.0.attn_norm.weight 0 1024 o 256
    tensor blk.0.attn_q.weight 12 2304 r 256 16
    tensor blk.0.attn_k.weight 14 1680 r 256 8
    tensor blk.0.attn_v.weight 12 1152 r 256 8
    tensor blk.0.attn_q_norm.weight 0 32 o 8
    tensor blk.0.attn_k_norm.weight 0 32 o 8
    tensor blk.0.attn_output.weight 1 8192 r 16 256
    tensor blk.0.ffn_norm.weight 0 1024 o 256
    tensor blk.0.ffn_gate.weight 14 3360 r 256 16
    tensor blk.0.ffn_up.weight 12 2304 r 256 16
    tensor blk.0.ffn_down.weight 30 8192 r 16 256
    model_end "$1"
}
# The other weight types, seven to a model (every matrix a 256-element row, so every
# block size fits): 32/64/128-element blocks; k-quants and ternary; the IQ grids.
# Q4_1 3, Q5_0 6, Q5_1 7, Q2_K 10, Q3_K 11, Q5_K 13, IQ2_XXS 16, IQ2_XS 17, IQ3_XXS 18,
# IQ1_S 19, IQ4_NL 20, IQ3_S 21, IQ2_S 22, IQ4_XS 23, IQ1_M 29, TQ1_0 34, TQ2_0 35,
# MXFP4 39, NVFP4 40, Q1_0 41, Q2_0 42.  Args: the types of token_embd, attn_q, attn_k,
# attn_v, ffn_gate, ffn_up, output and their bytes per 256-element row.
tiny_qwen3_types() { # OUT  T_EMB B_EMB  T_Q B_Q  T_K B_K  T_V B_V  T_G B_G  T_U B_U  T_O B_O
    out=$1; shift
    model_begin qwen3 256 1 2 1 8 16
    tensor token_embd.weight "$1" $((5 * $2)) r 256 5
    tensor output.weight "${13}" $((5 * ${14})) r 256 5
    tensor output_norm.weight 0 1024 o 256
    tensor blk.0.attn_norm.weight 0 1024 o 256
    tensor blk.0.attn_q.weight "$3" $((16 * $4)) r 256 16
    tensor blk.0.attn_k.weight "$5" $((8 * $6)) r 256 8
    tensor blk.0.attn_v.weight "$7" $((8 * $8)) r 256 8
    tensor blk.0.attn_q_norm.weight 0 32 o 8
    tensor blk.0.attn_k_norm.weight 0 32 o 8
    tensor blk.0.attn_output.weight 1 8192 r 16 256
    tensor blk.0.ffn_norm.weight 0 1024 o 256
    tensor blk.0.ffn_gate.weight "$9" $((16 * ${10})) r 256 16
    tensor blk.0.ffn_up.weight "${11}" $((16 * ${12})) r 256 16
    tensor blk.0.ffn_down.weight 30 8192 r 16 256
    model_end "$out"
}
tiny_qwen3_small_blocks() { tiny_qwen3_types "$1" 3 160 6 176 7 192 20 144 39 136 40 144 42 72; }
tiny_qwen3_kquants2() { tiny_qwen3_types "$1" 10 84 11 110 13 176 23 136 34 54 35 66 41 36; }
tiny_qwen3_iquants() { tiny_qwen3_types "$1" 16 66 17 74 22 82 18 98 21 110 19 50 29 56; }

if [ $# -ne 3 ]; then
    echo "usage: $0 NAME SHARED_DIR CORPUS_DIR" >&2
    exit 2
fi
name=$1 shared=$2 corpus=$3
mkdir -p "$corpus"
case "$name" in
fuzz_gguf)
    for f in "$shared"/models/*.gguf "$shared"/vocab/*.gguf; do
        [ -f "$f" ] || continue
        base=$(basename "$f" .gguf)
        rm -f "$corpus/$base.head64k.gguf" "$corpus/$base.gguf" # an earlier run's copies may be read-only
        head -c 65536 "$f" > "$corpus/$base.head64k.gguf"
        size=$(wc -c < "$f")
        if [ "$size" -le 1572864 ]; then
            cat "$f" > "$corpus/$base.gguf"
        fi
    done
    rm -f "$corpus/every_kind.gguf"
    every_kind > "$corpus/every_kind.gguf"
    size=$(wc -c < "$corpus/every_kind.gguf")
    { zeros $(((32 - size % 32) % 32)); zeros 32; zeros 34; } >> "$corpus/every_kind.gguf"
    ;;
fuzz_tokenizer)
    for f in "$shared"/vocab/*.inp; do
        [ -f "$f" ] || continue
        rm -f "$corpus/$(basename "$f")"
        cat "$f" > "$corpus/$(basename "$f")"
    done
    ;;
fuzz_model)
    rm -f "$corpus/stories260K.gguf" "$corpus/tiny_llama_f32.gguf" "$corpus/tiny_qwen2_mixed.gguf" \
        "$corpus/tiny_qwen3_kquants.gguf" "$corpus/tiny_qwen3_small_blocks.gguf" "$corpus/tiny_qwen3_kquants2.gguf" \
        "$corpus/tiny_qwen3_iquants.gguf"
    [ -f "$shared/models/stories260K.gguf" ] && cat "$shared/models/stories260K.gguf" > "$corpus/stories260K.gguf"
    TMPD=$(mktemp -d) SRC=$shared/models/stories260K.gguf
    tiny_llama_f32 "$corpus/tiny_llama_f32.gguf"
    tiny_qwen2_mixed "$corpus/tiny_qwen2_mixed.gguf"
    tiny_qwen3_kquants "$corpus/tiny_qwen3_kquants.gguf"
    tiny_qwen3_small_blocks "$corpus/tiny_qwen3_small_blocks.gguf"
    tiny_qwen3_kquants2 "$corpus/tiny_qwen3_kquants2.gguf"
    tiny_qwen3_iquants "$corpus/tiny_qwen3_iquants.gguf"
    rm -rf "$TMPD"
    # the MoE / MLA golden models (qwen3moe, Mixtral-style llama, deepseek2 with and
    # without q LoRA): experts, routers, MLA tensors and the K-only cache
    for f in qwen3moe-tiny mixtral-tiny deepseek2-lite-tiny deepseek2-v3-tiny; do
        rm -f "$corpus/$f.gguf"
        [ -f "$shared/golden/moe/$f.gguf" ] && cat "$shared/golden/moe/$f.gguf" > "$corpus/$f.gguf"
    done
    if [ -n "${DEJA:-}" ] && [ -x "$DEJA" ] && [ -f "$shared/models/stories260K.gguf" ]; then
        for a in qwen35 qwen35moe qwen3next gpt-oss gemma3 glm4moe mistral3; do
            rm -f "$corpus/synth-$a.gguf"
            "$DEJA" synth --arch "$a" --preset tiny --type q8_0 --vocab-from "$shared/models/stories260K.gguf" \
                -t 1 -o "$corpus/synth-$a.gguf" >/dev/null 2>&1 || echo "seed.sh: deja synth --arch $a failed" >&2
        done
    fi
    ;;
fuzz_grammar)
    for f in "$shared"/golden/grammars/*.gbnf; do
        [ -f "$f" ] || continue
        rm -f "$corpus/$(basename "$f")"
        cat "$f" > "$corpus/$(basename "$f")"
    done
    ;;
fuzz_jinja)
    for f in "$shared"/golden/chat_templates/templates/*.jinja; do
        [ -f "$f" ] || continue
        base=$(basename "$f" .jinja)
        rm -f "$corpus/$base.chat.jinja" "$corpus/$base.tools.jinja"
        { printf '\001'; cat "$f"; } > "$corpus/$base.chat.jinja"
        { printf '\006'; cat "$f"; } > "$corpus/$base.tools.jinja"
    done
    ;;
fuzz_trace)
    for f in "$shared"/traces/*.jsonl; do
        [ -f "$f" ] || continue
        rm -f "$corpus/$(basename "$f")"
        head -n 3 "$f" | head -c 16384 > "$corpus/$(basename "$f")"
    done
    ;;
*)
    ;;
esac

# ---- fuzz_json_schema (begin) ----
json_schema_seeds() { # CORPUS: one file a schema, the first byte the options (see fuzz_json_schema.c)
    i=0
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        f="$1/schema$i.json"
        rm -f "$f"
        { printf '\001'; printf '%s' "$line"; } > "$f"
        i=$((i + 1))
    done <<'SCHEMAS'
{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name"],"additionalProperties":false}
{"type":"array","prefixItems":[{"type":"string","format":"date"},{"enum":["a",1,null]}],"items":{"type":"number","exclusiveMinimum":-3,"maximum":7},"minItems":1,"maxItems":5}
{"type":"string","pattern":"^(?:[A-Z]{2,3}|x+)-\\d{1,4}(\\.[a-f0-9]*)?$"}
{"anyOf":[{"type":"string","format":"uuid"},{"type":"string","format":"date-time"},{"const":{"k":[true,false]}}]}
{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"}
{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"additionalProperties":{"type":"boolean"}}],"oneOf":[{"required":["b"]},{"properties":{"a":{"minimum":5}}}]}
{"type":["string","null","integer"],"maxLength":3,"minimum":-10,"description":"d","title":"t","examples":[1],"default":null}
{"type":"object","properties":{"ab":{},"abc":false},"additionalProperties":true,"minProperties":0}
{"type":"string","format":"email"}
{"type":"string","minLength":1200,"maxLength":2500}
{"type":"string","allOf":[{"pattern":"^[^\\n\\r]*$"},{"pattern":"^[\\s\\S]{0,300}$"}]}
{"type":"string","pattern":"^wf_[a-z0-9-]{6,}$","maxLength":524288}
{"type":"string","pattern":"ab|^c","minLength":3,"maxLength":9}
{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","minLength":2,"maxLength":40}
{"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"array","items":{"type":"string","format":"email","maxLength":24}}}
{"allOf":[{"type":"string","pattern":"^a"},{"pattern":"b$"},{"format":"hostname"}],"maxLength":30}
{"type":"object","properties":{"u":{"type":"string","format":"uri"},"r":{"type":"string","format":"uri-reference"},"h":{"type":"string","format":"hostname","maxLength":20},"i":{"type":"string","format":"ipv6"},"p":{"type":"string","format":"uri","pattern":"^https://"}}}
[{"type":"function","function":{"name":"SendMessage","parameters":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"to":{"type":"string","allOf":[{"pattern":"^[^\\n\\r]*$"},{"pattern":"^[\\s\\S]{0,300}$"}]},"message":{"default":"","type":"string"}},"required":["to","message"],"additionalProperties":false}}},{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"url":{"type":"string","format":"uri"},"n":{"type":"integer","minimum":0,"maximum":9007199254740991}}}}}]
[{"type":"function","function":{"name":"f","description":"x","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}},{"type":"function","function":{"name":"g"}}]
SCHEMAS
}
case "$name" in
fuzz_json_schema) json_schema_seeds "$corpus" ;;
esac
# ---- fuzz_json_schema (end) ----

# fuzz_request: request bodies, one a file, each after the byte that picks the parser
# (fuzz_request.c): 0 /v1/completions, 1 chat completions, 2 responses, 3 messages,
# 4 messages/count_tokens, 5 /infill
if [ "$name" = fuzz_request ]; then
    i=0
    while IFS=' ' read -r sel line; do
        [ -n "$line" ] || continue
        f="$corpus/req$i.json"
        rm -f "$f"
        { printf "\\$(printf '%03o' "$sel")"; printf '%s' "$line"; } > "$f"
        i=$((i + 1))
    done <<'BODIES'
0 {"prompt": "def fib(n):", "max_tokens": 20, "temperature": 0}
0 {"prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}, "n": 2, "seed": 5}
0 {"model": "m", "prompt": "x", "stop": ["\n", "END"], "top_k": 40, "top_p": 0.9, "min_p": 0.05, "ignore_eos": true}
0 {"prompt": "x", "frequency_penalty": 0.5, "presence_penalty": -0.5, "repeat_penalty": 1.1, "max_tokens": 1, "cache_salt": "s"}
0 {"prompt": "def fib(n):", "max_tokens": 24, "temperature": 0, "logprobs": 5, "echo": false, "stream": true}
0 {"prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))\n", "max_tokens": 16, "temperature": 0.2, "stop": ["\n\n"]}
0 {"prompt": "Answer:", "grammar": "root ::= (\"yes\" | \"no\") \".\"", "logprobs": 0}
0 {"prompt": "x", "json_schema": {"type": "object", "properties": {"lang": {"enum": ["c", "py"]}}, "required": ["lang"]}}
0 {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array", "items": {"type": "integer"}}}}}
0 {"prompt": "x", "response_format": {"type": "json_object", "schema": {"type": "object"}}, "logprobs": 20}
5 {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}, {"text": "MAX = 10\n"}], "prompt": "return", "n_predict": 128, "top_k": 40, "top_p": 0.99, "stream": false, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": true, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "n_indent": 4}
5 {"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a.c", "text": "int main(void) { return 0; }\n"}], "prompt": "", "n_predict": 0, "samplers": [], "cache_prompt": true, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}
5 {"input_prefix": "x = ", "input_suffix": "\n", "grammar": "root ::= [0-9]+", "n_predict": -1, "return_tokens": true, "stream": true, "seed": 3, "stop": ["\n"]}
1 {"model": "m", "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "18C"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false, "stream": true, "stream_options": {"include_usage": true}}
1 {"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}], "reasoning_content": "r"}, {"role": "function", "name": "f", "content": "x"}], "n": 3, "max_completion_tokens": 64, "max_tokens": 9, "seed": -1, "stop": "END", "logprobs": true, "top_logprobs": 3, "logit_bias": {"15": -100, "7": 2.5}, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}}, "reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": false}, "cache_salt": "s1", "ignore_eos": true, "top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1}
1 {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}], "logit_bias": [[5, false], [6, -1]], "response_format": {"type": "json_object"}, "tool_choice": "required"}
2 {"model": "m", "instructions": "You are Codex.", "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>"}]}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}, {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}], "content": [{"type": "reasoning_text", "text": "I should run ls"}], "encrypted_content": null}, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running ls."}]}, {"type": "function_call", "call_id": "call_a", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"}, {"type": "function_call_output", "call_id": "call_a", "output": "a.txt"}, {"role": "user", "content": "thanks"}], "tools": [{"type": "function", "name": "shell", "description": "Runs a command", "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}, "strict": false}, {"type": "web_search"}], "tool_choice": "auto", "parallel_tool_calls": false, "reasoning": {"effort": "medium", "summary": "auto"}, "store": false, "stream": true, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc"}
2 {"input": "hello", "max_output_tokens": 256, "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "array"}, "strict": true}}, "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "f"}, "previous_response_id": null}
2 {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}, {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "ok"}]}, {"type": "item_reference", "id": "x"}]}
2 {"model": "m", "stream": true, "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}], "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false, "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}, {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [{"type": "function", "name": "close_agent", "strict": false, "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}, {"type": "function", "name": "_spawn", "defer_loading": true}, {"type": "custom", "name": "x"}]}, {"type": "web_search", "external_web_access": false}], "tool_choice": "auto", "parallel_tool_calls": true, "reasoning": {"summary": "auto"}, "store": false, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "01a2206a", "client_metadata": {"turn_id": "t"}}
2 {"input": [{"role": "user", "content": "find bob"}, {"type": "function_call", "call_id": "c1", "name": "lookup", "namespace": "crm", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c1", "output": "bob"}], "tools": [{"type": "namespace", "name": "crm_", "description": "CRM", "tools": [{"type": "function", "name": "lookup"}]}, {"type": "function", "name": "plain"}], "tool_choice": {"type": "function", "name": "lookup", "namespace": "crm"}, "instructions": "Be brief.", "store": true, "metadata": {"a": "b"}, "service_tier": "auto", "safety_identifier": "s", "truncation": "auto", "user": "u", "text": {"verbosity": "low"}, "top_logprobs": 2, "background": false, "max_tool_calls": 3, "temperature": 0.2, "top_p": 0.9}
2 {"previous_response_id": "resp_fz", "input": [{"type": "function_call_output", "call_id": "call_s", "output": "x"}], "reasoning": {"effort": "none"}, "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}}
2 {"input": "hi", "reasoning": {"effort": "xhigh"}, "chat_template_kwargs": {"enable_thinking": false}, "conversation": null, "prompt": null, "stream_options": {"include_obfuscation": false}, "context_management": [{"type": "compaction"}]}
2 {"input": "hi", "background": true, "conversation": "conv_1", "prompt": {"id": "p"}}
2 {"previous_response_id": "resp_1", "input": []}
3 {"model": "claude-sonnet-4-5-20250929", "max_tokens": 32000, "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=cli; cch=a5145;"}, {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"}, {"type": "text", "text": "fix the bug"}]}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "Let me look.", "signature": "sig"}, {"type": "text", "text": "I'll read it."}, {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/a.py"}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "print(1)"}], "is_error": false}, {"type": "text", "text": "go on"}]}], "tools": [{"name": "Read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}, {"type": "web_search_20250305", "name": "web_search"}], "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}, "temperature": 1, "stop_sequences": ["</answer>"], "stream": true, "thinking": {"type": "enabled", "budget_tokens": 10000}, "metadata": {"user_id": "u1"}}
3 {"max_tokens": 5, "system": "Be terse.", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}], "tools": [{"name": "a", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "a"}, "top_k": 5, "top_p": 0.9, "thinking": {"type": "disabled"}}
3 {"model": "claude-opus-5-5", "max_tokens": 128000, "stream": true, "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.93d; cc_entrypoint=sdk-cli;"}, {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": [{"type": "text", "text": "list the files"}]}, {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "deja1.SG0sIG9rLg=="}, {"type": "thinking", "thinking": "", "signature": "deja1.=x=="}, {"type": "text", "text": "ok"}]}, {"role": "user", "content": "go"}], "thinking": {"type": "adaptive", "display": "omitted"}, "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}, {"type": "clear_tool_uses_20250919"}]}, "output_config": {"effort": "max", "format": {"type": "json_schema", "schema": {"type": "object"}}}, "metadata": {"user_id": "{}"}, "service_tier": "auto"}
3 {"max_tokens": 9, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}], "thinking": {"type": "enabled", "budget_tokens": 0}, "output_format": {"type": "json_schema", "schema": {}}, "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}
4 {"model": "claude-opus-4-1", "messages": [{"role": "user", "content": [{"type": "text", "text": "count me"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}], "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
4 {"system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": "how many tokens?"}], "tool_choice": {"type": "any"}, "tools": [{"name": "x"}]}
BODIES
fi
# ---- fuzz_toolparse (begin) ----
toolparse_seeds() { # CORPUS: one output a file, byte 0 = 0x60 | family (tools and reasoning on), byte 1 'S'
    while IFS='	' read -r fam base text; do
        [ -n "$fam" ] || continue
        f="$1/$base.txt"
        rm -f "$f"
        { printf "\\$(printf '%03o' $((96 + fam)))"; printf 'S'; printf '%b' "$text"; } > "$f"
    done <<'OUTPUTS'
1	hermes	<think>\nhmm\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", "n": [1, 2.5e-3, true, null]}}\n</tool_call>\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>
1	hermes_cut	<tool_call>\n{"name": "edit", "arguments": {"path": "a\\u00e9\\ud83d\\ude00", "x": [1, {"y": "z
1	hermes_str	<tool_call>{"arguments": "{\\"q\\": 1}", "name": "s"}</tool_call> <tool_call> not a call
2	qwen3_coder	<think>\nok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, France\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{"a": [true]}\n</parameter>\n</function>\n</tool_call>
3	llama3	{"name": "get_weather", "parameters": {"location": "Paris"}}
3	llama3_tag	Sure.<|python_tag|>{"name": "f", "parameters": {"a": 1}}<|eom_id|><|python_tag|>print("hi")<|eom_id|>
4	mistral	[THINK]plan[/THINK]Ok[TOOL_CALLS]get_weather[CALL_ID]Xk3P9aQ2z[ARGS]{"location": "Tokyo"}[TOOL_CALLS]f[ARGS]{}
4	mistral_list	[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}, "id": "Xk3P9aQ2z"}, {"name": "b", "arguments": {}}]
5	deepseek_v3	<think>\nr\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"location": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
6	deepseek_v31	<think></think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
7	functionary_v31	Let me see.<function=get_weather>{"location": "Paris"}</function><function=f>{}</function>
8	functionary_v32	all\nLet me see.>>>get_weather\n{"location": "Paris"}>>>python\nprint(1)
9	command_r	<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"location": "Paris"}}\n]<|END_ACTION|>
10	granite	<think>t</think><response>Ok</response><|tool_call|>[{"name": "get_weather", "arguments": {"location": "Paris"}}]
11	gpt_oss	<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Paris"}<|call|>
11	gpt_oss_final	<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>Hello!
12	kimi_k2	<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
13	glm	<think>r</think>Ok<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>
14	deepseek_v4	</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="include" string="false">["wind"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>
15	kimi_k3	<|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>Ok<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="location" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>
16	muse	 to=self<|message|>think<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="location">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>
17	lfm2	<think>r</think><|tool_call_start|>[get_weather(location='Paris', days=3, opts={'a': True, "b": None}), f()]<|tool_call_end|>
18	gemma4	<|channel>thought\nr<channel|><|tool_call>call:get_weather{location:<|"|>Paris<|"|>,days:3,opts:{a:true}}<tool_call|>Done.
19	solar	<|think|>r<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>Xk3P9aQ2z<|tool_call:name|>get_weather<|tool_call:args|>{"location": "Paris"}<|tool_call:end|><|calls|>
20	nemotron	<think>\nr\n</think>\nOk\n<TOOLCALL>[{"name": "get_weather", "arguments": {"location": "Paris"}}]</TOOLCALL>
21	apriel	Here are my reasoning steps:\nr\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": "get_weather", "arguments": {"location": "Paris"}, "id": "x"}]</tool_calls>\n[END FINAL RESPONSE]
22	minimax_m1	<tool_calls>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n{"name": "f", "arguments": {}}\n</tool_calls>
23	firefunction	Sure. functools[{"name": "get_weather", "arguments": {"location": "Paris"}}]
24	gigachat	Ok.<|function_call|>{"name": "get_weather", "arguments": {"location": "Paris"}}
OUTPUTS
}
case "$name" in
fuzz_toolparse) toolparse_seeds "$corpus" ;;
esac
# ---- fuzz_toolparse (end) ----
# ---- fuzz_toolcall (begin) ----
# fuzz_toolcall: byte 0 the family (mod DJ_TOOL_FORMAT_N = 19), byte 1 the options
# (fuzz_toolcall.c), then a tools array; every tools line for every family, options rotating.
if [ "$name" = fuzz_toolcall ]; then
    i=0
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        fam=0
        while [ $fam -lt 19 ]; do
            f="$corpus/tools$i-$fam.json"
            rm -f "$f"
            opt=$(( (i * 37 + fam * 11) % 256 ))
            { printf "\\$(printf '%03o' "$fam")"; printf "\\$(printf '%03o' "$opt")"; printf '%s' "$line"; } > "$f"
            fam=$((fam + 1))
        done
        i=$((i + 1))
    done <<'TOOLS'
[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"},"days":{"type":"integer"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"options":{"type":"object","properties":{"wind":{"type":"boolean"}},"required":["wind"]},"note":{"type":"string"}},"required":["location","days","unit","options"]}}},{"type":"function","function":{"name":"ping"}}]
[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":["integer","null"]},"e":{"enum":["a b","42",7,null]},"c":{"const":"x"},"a":{"type":"array","items":{"type":"number"}},"any":{}},"required":["n"]}}}]
[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"integer"}]},"y":{"$ref":"#/$defs/y"}},"$defs":{"y":{"type":"string"}}}}}]
[{"name":"get weather","parameters":{"type":"object","properties":{"k>ey":{"type":"string"}}}},{"type":"function","function":{"name":"a[b"}},{"type":"function","function":{"name":"x\ny"}}]
[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"string","pattern":"^a+$","minLength":2}},"required":["s"],"additionalProperties":false}}}]
[{"type":"function","function":{"name":"fs/read.v2","parameters":{"type":"object","properties":{"a</arg_key>":{"type":"string"},"b":{"type":"integer"},"c":{"oneOf":[{"type":"string"}]}},"required":["b"]}}},{"type":"function","function":{"name":"a<b"}},{"type":"function","function":{"name":"a:b"}}]
TOOLS
fi
# ---- fuzz_toolcall (end) ----

# ---- fuzz_kv_record (begin) ----
# fuzz_kv_record: byte 0 the options (fuzz_kv_record.c: 1 = fix the checksum, 2 = load
# it through a store too), then one record of the target's store geometry (1 layer,
# n_embd_kv 2, 2 tokens, 16 payload bytes, key 01..20); its checksum is left zero for
# the target to fill.  Variants: another version, another kv_type, a longer block.
kv_record() { # OPT VERSION HDR KV_TYPE BLOCK_SIZE
    byte "$1"; printf 'DJKVBLK\000'; u32 "$2"; u32 "$3"
    k=1; while [ $k -le 32 ]; do byte $k; k=$((k + 1)); done
    u64 81985529216486895; u64 1311768467463790320
    u32 1; u32 2; u32 "$5"; u32 "$4"; u64 16
    t=0; while [ $t -lt "$5" ]; do u32 $((1000 + t)); t=$((t + 1)); done
    k=0; while [ $k -lt 16 ]; do byte $((k * 17)); k=$((k + 1)); done
    zeros 8
}
if [ "$name" = fuzz_kv_record ]; then
    kv_record 3 1 88 1 2 > "$corpus/record.bin"
    kv_record 1 1 88 1 2 > "$corpus/record_parse_only.bin"
    kv_record 3 2 88 1 2 > "$corpus/record_v2.bin"
    kv_record 3 1 88 7 2 > "$corpus/record_kv_type.bin"
    kv_record 3 1 88 1 5 > "$corpus/record_block5.bin"
    kv_record 2 1 88 1 2 > "$corpus/record_bad_checksum.bin"
fi
# ---- fuzz_kv_record (end) ----

# ---- fuzz_spec (begin) ----
if [ "$name" = fuzz_spec ]; then
    for f in "$shared"/traces/tau_airline__0.jsonl "$shared"/traces/openhands_mock__CodeActSWEAgent_test_edits.jsonl; do
        [ -f "$f" ] || continue
        { byte 64; head -c 4096 "$f"; } > "$corpus/$(basename "$f").64"
        { byte 200; head -c 4096 "$f"; } > "$corpus/$(basename "$f").200"
    done
fi
# ---- fuzz_spec (end) ----

http_seeds() {
    i=0
    for req in \
        'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' \
        'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3\r\n:1}\r\n0\r\nX-T: 1\r\n\r\n' \
        'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' \
        'POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n{ }' \
        'GET http://h:1/v1/mod%65ls?x=1 HTTP/1.0\r\n\r\n' \
        'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\n{}' \
        'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /s HTTP/1.1\r\n\r\n' \
        'POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n' \
        'POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n' \
        'POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc' \
        'POST /v1/chat/completions%00x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n'; do
        for split in 0 1 7; do
            { byte $split; printf "%b" "$req"; } > "$1/http_${i}_$split"
        done
        i=$((i + 1))
    done
}
case "$name" in
fuzz_http) http_seeds "$corpus" ;;
esac
exit 0
