#!/usr/bin/env bash
# real_models.sh — deja vs llama.cpp on the two real instruct models of the tests (tests/realmodels:
# SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M), pp512 and tg128 at -t 2, interleaved per
# model and alternating which engine goes first (bench/compare_llamacpp.sh).  Run on a quiet
# machine; docs/BENCHMARKS.md ("The real models") takes its table.
#   bench/real_models.sh [DEJA] [LLAMA_BENCH]
# DEJA: build/bin/deja; LLAMA_BENCH: $LLAMACPP/build/bin/llama-bench (a llama.cpp build outside
# the repository, bench/peer/README.md).  env: ROUNDS (2), REPS (3), and compare_llamacpp.sh's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
deja=${1:-$ROOT/build/bin/deja}
llama=${2:-${LLAMACPP:?give LLAMA_BENCH or set LLAMACPP}/build/bin/llama-bench}
M=$(bash "$ROOT/tests/realmodels/fetch.sh")
ROUNDS=${ROUNDS:-2} REPS=${REPS:-3} THREADS=2 PP=512 TG=128 \
    bash "$ROOT/bench/compare_llamacpp.sh" "$deja" "$llama" \
    "$M/SmolLM2-135M-Instruct.Q4_1.gguf" "$M/gemma-3-270m-q4_k_m.gguf"
