#!/usr/bin/env bash
# quant_goldens.sh — makes tests/golden/quants (README.md there): llama.cpp's logits for
# codelm-15m quantized by llama-quantize into every file type it makes from the F16 file
# (with an importance matrix for the types that need one), and for `deja synth` tiny
# models whose matrices are random blocks of each weight type.
#
#   bench/peer/quant_goldens.sh [files|goldens|all|arch|mtp]   (default all)
#
# files:   the model files, under $QFILES (never in the repository): codelm/ (llama-quantize,
#          llama-imatrix) and synth/ (deja synth); their sha256 in tests/golden/quants/SHA256SUMS
# goldens: logits_peer on every file -> tests/golden/quants/{codelm,synth}/<name>.json
# arch:    the other architectures' deja synth files (ARCH_FILES, under $QFILES/arch; their
#          lines of SHA256SUMS replaced) and their goldens -> tests/golden/quants/arch/<name>.json
#
# Environment: LLAMACPP (a llama.cpp checkout with a CPU build in build/: llama-quantize,
# llama-imatrix and libllama; required), QFILES (where the model files go; default ../qfiles,
# beside the repository, never inside it),
# SHARED (default ../shared), DEJA (default build/bin/deja), PEER_COMMIT (the llama.cpp
# commit, recorded in each golden's "label"; default d32676d7, the snapshot used).
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMACPP=${LLAMACPP:?set LLAMACPP to a llama.cpp checkout with a CPU build in build/}
QFILES=${QFILES:-../qfiles}
SHARED=${SHARED:-../shared}
DEJA=${DEJA:-build/bin/deja}
OUT=tests/golden/quants
BIN=$(realpath "$LLAMACPP/build/bin")
F16=$SHARED/models/codelm-15m-f16.gguf
mode=${1:-all}

# llama-quantize file types made without an importance matrix (it refuses none of these)
CODELM_PLAIN="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K
              IQ4_NL IQ4_XS IQ3_S IQ3_M TQ1_0 TQ2_0 Q1_0 Q2_0 BF16"
# ... and those it refuses without one ("this quantization requires an importance matrix")
CODELM_IMATRIX="IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS Q2_K_S"
# deja synth --type: every weight type llama.cpp's CPU backend runs, as random blocks
SYNTH_TYPES="q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s
             iq1_s iq1_m tq1_0 tq2_0 mxfp4 nvfp4 q1_0 q2_0"

# other architectures: NAME:ARCH:PRESET:TYPE (deja synth, codelm's vocabulary)
ARCH_FILES="gpt-oss-tiny-f32:gpt-oss:tiny:f32 gpt-oss-tiny-mxfp4:gpt-oss:tiny:mxfp4 qwen35-tiny-f32:qwen35:tiny:f32
            qwen35moe-tiny-f32:qwen35moe:tiny:f32 qwen3next-tiny-f32:qwen3next:tiny:f32"

peer=build/logits_peer
build_peer() {
    mkdir -p build
    if [ ! -x "$peer" ] || [ bench/peer/logits_peer.cpp -nt "$peer" ] || [ "$BIN/libllama.so" -nt "$peer" ]; then
        g++ -O2 -std=c++17 -Wall -Wextra -I"$LLAMACPP/include" -I"$LLAMACPP/ggml/include" \
            bench/peer/logits_peer.cpp -o "$peer" -L"$BIN" -lllama -Wl,-rpath,"$BIN"
    fi
}

files() {
    mkdir -p "$QFILES/codelm" "$QFILES/synth"
    for t in $CODELM_PLAIN; do
        "$BIN/llama-quantize" "$F16" "$QFILES/codelm/codelm-$t.gguf" "$t" 1 > "$QFILES/codelm/log-$t.txt" 2>&1
    done
    # the importance matrix: codelm's perplexity text (60,000 characters of an agent prompt).
    # Run inside $QFILES/codelm with bare file names: llama-imatrix records the text's path
    # and llama-quantize the imatrix's, so the files' sha256 would depend on the directories.
    local f16abs
    f16abs=$(realpath "$F16")
    cp "$SHARED/golden/codelm/codelm_ppl_text.txt" "$QFILES/codelm/codelm_ppl_text.txt"
    (
        cd "$QFILES/codelm"
        "$BIN/llama-imatrix" -m "$f16abs" -f codelm_ppl_text.txt -c 512 -t 2 -o imatrix.gguf > log-imatrix.txt 2>&1
        for t in $CODELM_IMATRIX; do
            "$BIN/llama-quantize" --imatrix imatrix.gguf "$f16abs" "codelm-$t.gguf" "$t" 1 > "log-$t.txt" 2>&1
        done
    )
    for t in $SYNTH_TYPES; do
        "$DEJA" synth --arch llama --preset tiny --type "$t" --vocab-from "$F16" -o "$QFILES/synth/tiny-$t.gguf" -t 1 \
            2> /dev/null
    done
    {
        (cd "$QFILES/codelm" && sha256sum imatrix.gguf codelm-*.gguf | sed 's|  |  codelm/|')
        (cd "$QFILES/synth" && sha256sum tiny-*.gguf | sed 's|  |  synth/|')
    } > "$OUT/SHA256SUMS"
    # what test_quant_golden compares a `deja quantize` file with: its tensors, not its layout
    (cd "$QFILES" && python3 "$OLDPWD/bench/peer/tensor_digest.py" codelm/codelm-*.gguf) > "$OUT/DIGESTS"
}

goldens() {
    build_peer
    mkdir -p "$OUT/codelm" "$OUT/synth"
    local label="llama.cpp ${PEER_COMMIT:-d32676d7}"
    for t in $CODELM_PLAIN $CODELM_IMATRIX; do
        "$peer" -m "$QFILES/codelm/codelm-$t.gguf" -p "$OUT/prompts.json" -o "$OUT/codelm/codelm-$t.json" \
            --label "$label" 2>&1 | grep -v control-looking
    done
    for t in $SYNTH_TYPES; do
        "$peer" -m "$QFILES/synth/tiny-$t.gguf" -p "$OUT/prompts.json" -o "$OUT/synth/tiny-$t.json" \
            --label "$label" 2>&1 | grep -v control-looking
    done
}

# the MTP block of the qwen35 hybrids (bench/peer/mtp_peer.cpp) -> tests/golden/quants/arch/<name>.mtp.json
MTP_FILES="qwen35-tiny-f32 qwen35moe-tiny-f32"
mtp() {
    local mpeer=build/mtp_peer label="llama.cpp ${PEER_COMMIT:-d32676d7}" name
    mkdir -p build
    g++ -O2 -std=c++17 -Wall -Wextra -I"$LLAMACPP/include" -I"$LLAMACPP/ggml/include" -I"$LLAMACPP/src" \
        bench/peer/mtp_peer.cpp -o "$mpeer" -L"$BIN" -lllama -lggml-base -Wl,-rpath,"$BIN"
    for name in $MTP_FILES; do # the files arch() wrote
        "$mpeer" -m "$QFILES/arch/$name.gguf" -p "$OUT/prompts.json" -o "$OUT/arch/$name.mtp.json" --label "$label" \
            2> /dev/null
    done
}

arch() {
    build_peer
    mkdir -p "$QFILES/arch" "$OUT/arch"
    local label="llama.cpp ${PEER_COMMIT:-d32676d7}" e name a p t
    for e in $ARCH_FILES; do
        IFS=: read -r name a p t <<< "$e"
        "$DEJA" synth --arch "$a" --preset "$p" --type "$t" --vocab-from "$F16" -o "$QFILES/arch/$name.gguf" -t 1 \
            2> /dev/null
        "$peer" -m "$QFILES/arch/$name.gguf" -p "$OUT/prompts.json" -o "$OUT/arch/$name.json" --label "$label" 2>&1 |
            grep -v control-looking
    done
    {
        grep -v '  arch/' "$OUT/SHA256SUMS" || true
        (cd "$QFILES/arch" && sha256sum *.gguf | sed 's|  |  arch/|')
    } > "$OUT/SHA256SUMS.new"
    mv "$OUT/SHA256SUMS.new" "$OUT/SHA256SUMS"
}

case $mode in
    files) files ;;
    goldens) goldens ;;
    all) files; goldens; arch; mtp ;;
    arch) arch; mtp ;;
    mtp) mtp ;;
    *) echo "usage: $0 [files|goldens|all|arch|mtp]" >&2; exit 2 ;;
esac
