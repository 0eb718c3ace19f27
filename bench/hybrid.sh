#!/usr/bin/env bash
# hybrid.sh — a Qwen3.5-35B-A3B-shaped hybrid model (Gated DeltaNet + gated attention, 256
# experts + a shared one) against llama.cpp on the same file:
#   1. pp512 / tg128, -t 2, interleaved (bench/compare_llamacpp.sh);
#   2. agent sessions replayed over HTTP (bench/http_replay.py): deja serve against
#      llama-server, prompt tokens evaluated per turn and wall time;
#   3. the cost of MTP drafts (--spec-sources mtp): decode t/s of `deja run -n 64` without
#      drafts, with 1 and 2 MTP drafts forced every step (--spec-fixed), with the adaptive
#      policy, and with lookup+memo, interleaved REPS times.  Random weights: the block's drafts
#      are never accepted, so this measures what drafting costs when it does not pay.
# The file: `deja synth --arch qwen35moe --preset 35b-a3b --type q4_k_m --layers $LAYERS`
# (random weights; 40 layers at Q4_K_M are ~20 GB: LAYERS (default 8, every fourth one full
# attention) keeps the runs to minutes; the per-layer ratio is what compares the engines).
# Vocabulary: codelm's (32k tokens), smaller than Qwen's 248k output matrix.
#   bench/hybrid.sh DEJA LLAMA_BIN_DIR DIR
# LLAMA_BIN_DIR: a llama.cpp build's bin/ (llama-bench, llama-server; never committed).
# DIR: where the file is written once.  env: SHARED (../shared)  LAYERS (8)  REPS (2)
#      SKIP_BENCH / SKIP_HTTP / SKIP_MTP (1: skip that part)  HTTP_ARGS (extra http_replay.py arguments)
set -euo pipefail
deja=$1; lb=$2; dir=$3
shared=${SHARED:-../shared}
layers=${LAYERS:-8}
mkdir -p "$dir"
f=$dir/qwen35moe-35b-a3b-${layers}l-q4_k_m.gguf
[ -f "$f" ] || "$deja" synth --arch qwen35moe --preset 35b-a3b --type q4_k_m --layers "$layers" \
    --vocab-from "$shared/models/codelm-15m-f16.gguf" -o "$f" -t 2 >&2
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    "$deja" bench --membw -t 2 | tail -1
    REPS=${REPS:-2} bench/compare_llamacpp.sh "$deja" "$lb/llama-bench" "$f"
fi
if [ "${SKIP_HTTP:-0}" != 1 ]; then
    python3 bench/http_replay.py --deja "$deja" --peer "$lb/llama-server" --model "$f" -t 2 ${HTTP_ARGS:-}
fi
if [ "${SKIP_MTP:-0}" != 1 ]; then
    prompt=$'import json\nimport os\n\n\ndef load_config(path):\n    """Load a JSON config file."""\n'
    for r in $(seq "${REPS:-2}"); do
        for cfg in "--no-spec" "--spec-sources mtp --spec-fixed --draft-max 1" \
            "--spec-sources mtp --spec-fixed --draft-max 2" "--spec-sources mtp" "--spec-sources lookup,memo"; do
            # shellcheck disable=SC2086
            o=$("$deja" run -m "$f" -n 64 -t 2 -p "$prompt" $cfg 2>&1 >/dev/null | tr '\n' ' ')
            echo "mtp-cost rep $r [$cfg]: $(grep -oE 'decode [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ t/s\)' <<<"$o")" \
                "$(grep -oE 'mtp [0-9]+/[0-9]+ in [0-9]+ rounds' <<<"$o" || true)"
        done
    done
fi
