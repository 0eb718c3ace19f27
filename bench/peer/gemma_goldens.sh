#!/usr/bin/env bash
# gemma_goldens.sh — makes tests/golden/gemma (README.md there): llama.cpp's logits on tiny
# random-weight gemma3 / gemma2 models, two written by `deja synth` and one by
# tests/golden/gemma/make_tiny_gemma3.py (a GGUF writer of its own, standard library only).
#
#   LLAMACPP=/path/to/llama.cpp bench/peer/gemma_goldens.sh
#
# Environment: LLAMACPP (a llama.cpp checkout with a CPU build in build/: libllama; required),
# GFILES (where the model files go; default ../gfiles, beside the repository, never inside it),
# SHARED (default ../shared), DEJA (default build/bin/deja), PEER_COMMIT (recorded in each
# golden's "label"; default d32676d7, the snapshot used).
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMACPP=${LLAMACPP:?set LLAMACPP to a llama.cpp checkout with a CPU build in build/}
GFILES=${GFILES:-../gfiles}
SHARED=${SHARED:-../shared}
DEJA=${DEJA:-build/bin/deja}
OUT=tests/golden/gemma
BIN=$(realpath "$LLAMACPP/build/bin")
label="llama.cpp ${PEER_COMMIT:-d32676d7}"

peer=build/logits_peer
mkdir -p build "$GFILES"
if [ ! -x "$peer" ] || [ bench/peer/logits_peer.cpp -nt "$peer" ] || [ "$BIN/libllama.so" -nt "$peer" ]; then
    g++ -O2 -std=c++17 -Wall -Wextra -I"$LLAMACPP/include" -I"$LLAMACPP/ggml/include" \
        bench/peer/logits_peer.cpp -o "$peer" -L"$BIN" -lllama -Wl,-rpath,"$BIN"
fi
for a in gemma3 gemma2; do
    "$DEJA" synth --arch $a --preset tiny --vocab-from "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
        -o "$GFILES/tiny-$a.gguf" -t 1 2> /dev/null
done
python3 $OUT/make_tiny_gemma3.py "$GFILES/py-gemma3.gguf"
(cd "$GFILES" && sha256sum tiny-gemma3.gguf tiny-gemma2.gguf py-gemma3.gguf) > $OUT/SHA256SUMS
for a in gemma3 gemma2; do
    "$peer" -m "$GFILES/tiny-$a.gguf" -p $OUT/prompts.json -o $OUT/tiny-$a.json --steps 32 --label "$label" 2> /dev/null
done
"$peer" -m "$GFILES/py-gemma3.gguf" -p $OUT/prompts_py.json -o $OUT/py-gemma3.json --steps 32 --label "$label" 2> /dev/null
