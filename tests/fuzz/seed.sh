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
set -eu

# Little-endian writers for the hand-built seed (POSIX sh arithmetic is 64-bit).
byte() { printf "\\$(printf '%03o' "$1")"; }
u32() { byte $(($1 & 255)); byte $((($1 >> 8) & 255)); byte $((($1 >> 16) & 255)); byte $((($1 >> 24) & 255)); }
u64() { u32 $(($1 & 4294967295)); u32 $((($1 >> 32) & 4294967295)); }
str() { u64 ${#1}; printf '%s' "$1"; }
zeros() { i=0; while [ $i -lt "$1" ]; do byte 0; i=$((i + 1)); done; }

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
exit 0
