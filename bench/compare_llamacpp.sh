#!/usr/bin/env bash
# deja vs llama.cpp on the same machine, interleaved per model (PEERS.md: the
# same test varies by up to 20% between passes, so compare within one run).
#   bench/compare_llamacpp.sh DEJA LLAMA_BENCH MODEL... 
# LLAMA_BENCH is a llama-bench binary built from a llama.cpp checkout outside
# this repository (never committed); MODELs are GGUF files, e.g. made by
#   deja synth --arch llama --preset 1b --type f16 --vocab-from ../shared/vocab/ggml-vocab-llama-spm.gguf -o 1b-f16.gguf
#   deja quantize 1b-f16.gguf 1b-q4_0.gguf q4_0        (and q8_0, q4_k_m)
set -euo pipefail
deja=$1; llama=$2; shift 2
threads=${THREADS:-2}; reps=${REPS:-3}
for m in "$@"; do
  echo "== $m"
  "$llama" -m "$m" -t "$threads" -r "$reps" -p 512 -n 128 2>/dev/null | grep -E "pp512|tg128" | sed 's/^/llama.cpp /'
  "$deja" bench -m "$m" -t "$threads" -r "$reps" -p 512 -n 128 | grep -E "pp512|tg128|decode reads" | sed 's/^/deja      /'
done
