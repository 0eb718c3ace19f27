#!/usr/bin/env bash
# Decode speed at depth for each K/V cache type (issue 13): for each model and depth D,
# rounds of every type in turn (interleaved, so drift of the machine hits all alike):
#   deja bench -m MODEL -p 0 -n NTG -d D -r 1 -t THREADS -ctk T -ctv T      (tokens/s after D cached)
# and, if LLAMA_BATCHED_BENCH is set, the peer in the same round:
#   llama-batched-bench -m MODEL -c D+NTG+8 -npp D -ntg NTG -npl 1 -ctk T -ctv T -fa    (S_TG)
# (llama.cpp needs flash attention for a quantized V; f32 is not one of its flash-attention
# V types on every build, so its f32 row runs without -fa.)  Prints one line per
# (model, depth, type, engine, round): tokens/s.
#   bench/kv_types.sh DEJA "MODEL1 MODEL2" "4096 16384" [ROUNDS] [THREADS] [NTG]
set -euo pipefail
deja=$1; models=$2; depths=$3; rounds=${4:-3}; threads=${5:-2}; ntg=${6:-32}
types="f32 f16 bf16 q8_0 q4_0"
for model in $models; do
  for d in $depths; do
    for r in $(seq "$rounds"); do
      for t in $types; do
        tps=$("$deja" bench -m "$model" -p 0 -n "$ntg" -d "$d" -r 1 -t "$threads" -ctk "$t" -ctv "$t" --json 2>/dev/null |
          sed -n 's/.*"tg_tps": \([0-9.]*\).*/\1/p')
        echo "$(basename "$model") d=$d $t deja round=$r ${tps:-error}"
        if [ -n "${LLAMA_BATCHED_BENCH:-}" ] && [ "$t" != bf16 ]; then
          fa=-fa; [ "$t" = f32 ] && fa=
          out=$("$LLAMA_BATCHED_BENCH" -m "$model" -c $((d + ntg + 8)) -b 2048 -ub 512 -npp "$d" -ntg "$ntg" -npl 1 \
            -t "$threads" -ctk "$t" -ctv "$t" $fa 2>/dev/null | grep '^|' | tail -1 || true)
          # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
          stg=$(awk -F'|' '{gsub(/ /, "", $9); print $9}' <<<"$out")
          echo "$(basename "$model") d=$d $t llama.cpp round=$r ${stg:-error}"
        fi
      done
    done
  done
done
