#!/usr/bin/env bash
# deja vs llama.cpp on the same machine, interleaved per model (PEERS.md: the
# same test varies by up to 20% between passes, so compare within one run).
#   bench/compare_llamacpp.sh DEJA LLAMA_BENCH MODEL...
# LLAMA_BENCH is a llama-bench binary built from a llama.cpp checkout outside
# this repository (never committed); MODELs are GGUF files, e.g. made by
#   deja synth --arch llama --preset 1b --type f16 --vocab-from ../shared/vocab/ggml-vocab-llama-spm.gguf -o 1b-f16.gguf
#   deja quantize 1b-f16.gguf 1b-q4_0.gguf q4_0        (and q8_0, q4_k_m)
#   deja synth --arch qwen3moe --preset 30b-a3b --type q4_k_m --vocab-from ../shared/vocab/ggml-vocab-deepseek-llm.gguf -o a3b.gguf
#   deja synth --arch deepseek2 --preset v2-lite --type q4_k_m --vocab-from ../shared/vocab/ggml-vocab-deepseek-llm.gguf -o v2l.gguf
# env: THREADS (2)  REPS (3: repetitions inside one llama-bench / deja bench call)
#      ROUNDS (1: calls of each, alternating which goes first)  PP (512)  TG (128)
#      FA: llama-bench -fa value (unset: its default)  KV: -ctk/-ctv of both (unset: f16)
# Prints each call's lines, then per model and test the median t/s over the rounds and
# deja / llama.cpp.  deja's "decode reads" line gives its weight GB/s per token (MoE:
# the experts a token uses).
set -euo pipefail
deja=$1; llama=$2; shift 2
threads=${THREADS:-2}; reps=${REPS:-3}; rounds=${ROUNDS:-1}; pp=${PP:-512}; tg=${TG:-128}
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
kv=(); [ -n "${KV:-}" ] && kv=(-ctk "$KV" -ctv "$KV")
fa=(); [ -n "${FA:-}" ] && fa=(-fa "$FA")
run_llama() {
  "$llama" -m "$1" -t "$threads" -r "$reps" -p "$pp" -n "$tg" "${kv[@]}" "${fa[@]}" 2>/dev/null |
    grep -E "pp$pp|tg$tg" | sed 's/^/llama.cpp /' | tee -a "$tmp.$2"
}
run_deja() {
  "$deja" bench -m "$1" -t "$threads" -r "$reps" -p "$pp" -n "$tg" "${kv[@]}" | grep -E "pp$pp|tg$tg|decode reads" |
    sed 's/^/deja      /' | tee -a "$tmp.$2"
}
i=0
for m in "$@"; do
  i=$((i + 1)); : >"$tmp.$i"
  for r in $(seq 1 "$rounds"); do
    echo "== $m (round $r)"
    if [ $((r % 2)) -eq 1 ]; then run_llama "$m" $i; run_deja "$m" $i; else run_deja "$m" $i; run_llama "$m" $i; fi
  done
done
echo
echo "| model | test | llama.cpp t/s (median of $rounds) | deja t/s | deja / llama.cpp |"
echo "|---|---|---|---|---|"
i=0
for m in "$@"; do
  i=$((i + 1))
  python3 - "$tmp.$i" "$m" "$pp" "$tg" <<'PY'
import re, statistics, sys
path, model, pp, tg = sys.argv[1:]
ll = {f"pp{pp}": [], f"tg{tg}": []}; dj = {f"pp{pp}": [], f"tg{tg}": []}
for line in open(path):
    for test in ll:
        if re.search(rf"\b{test}\b", line):
            cells = [c.strip() for c in line.split("|")]
            if line.startswith("llama.cpp"):
                v = next(c for c in cells if "±" in c)        # llama-bench: "t/s ± sd"
                ll[test].append(float(v.split("±")[0]))
            else:
                dj[test].append(float(cells[5]))            # deja bench: median column
for test in ll:
    if ll[test] and dj[test]:
        a, b = statistics.median(ll[test]), statistics.median(dj[test])
        print(f"| {model.split('/')[-1]} | {test} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
PY
  rm -f "$tmp.$i"
done
