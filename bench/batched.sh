#!/usr/bin/env bash
# batched.sh — aggregate decode throughput of N concurrent sequences, deja's serving
# engine (`deja bench --batch`) against llama.cpp's llama-batched-bench, same model
# file, threads and shapes (each sequence its own npp-token prompt, ntg generated tokens),
# interleaved: for each round and model, deja then llama.cpp.  Prints S_PP and S_TG per N
# for both and the ratio deja / llama.cpp of the median over rounds.
#
# usage: bench/batched.sh DEJA LLAMA_BATCHED_BENCH MODEL.gguf [MODEL2.gguf ...]
#        env: THREADS (2) NPP (512) NTG (128) NPL (1,2,4,8,16) ROUNDS (2)
# llama.cpp is built in a scratch directory from a fetched snapshot, never committed.
set -euo pipefail
DEJA=$1 LLAMA=$2
shift 2
THREADS=${THREADS:-2} NPP=${NPP:-512} NTG=${NTG:-128} NPL=${NPL:-1,2,4,8,16} ROUNDS=${ROUNDS:-2}
max_n=$(echo "$NPL" | tr ',' '\n' | sort -n | tail -1)
ctx=$(( max_n * (NPP + NTG) + 256 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# rows "N S_PP S_TG" from a llama-batched-bench style markdown table on stdin
rows() { awk -F'|' '$2 ~ /^ *[0-9]+ *$/ && NF >= 11 { gsub(/ /, ""); print $4, $7, $9 }'; }
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for r in $(seq 1 "$ROUNDS"); do
    "$DEJA" bench -m "$model" -t "$THREADS" -p "$NPP" -n "$NTG" --batch "$NPL" | rows > "$out/$name.deja.$r"
    "$LLAMA" -m "$model" -t "$THREADS" -c "$ctx" -b 2048 -ub 512 -npp "$NPP" -ntg "$NTG" -npl "$NPL" 2>/dev/null \
      | rows > "$out/$name.llama.$r"
  done
  echo "## $name  (-t $THREADS, npp $NPP, ntg $NTG, $ROUNDS rounds interleaved; t/s, median over rounds)"
  echo "| N | llama.cpp S_PP | deja S_PP | llama.cpp S_TG | deja S_TG | S_TG ratio |"
  echo "|---|---|---|---|---|---|"
  for n in $(echo "$NPL" | tr ',' ' '); do
    med() { # median of column $2 for N=$n over the files $1.*
      cat "$1".* | awk -v n="$n" -v c="$2" '$1 == n { print $c }' | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit } print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
    }
    lpp=$(med "$out/$name.llama" 2) dpp=$(med "$out/$name.deja" 2)
    ltg=$(med "$out/$name.llama" 3) dtg=$(med "$out/$name.deja" 3)
    ratio=$(awk -v a="$dtg" -v b="$ltg" 'BEGIN { printf (b > 0 ? "%.2f" : "nan"), a / b }')
    echo "| $n | $lpp | $dpp | $ltg | $dtg | $ratio |"
  done
  echo
done
