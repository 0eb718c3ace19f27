#!/usr/bin/env bash
# The peer of bench/persist_ttft.sh: llama-server's manual slot save/restore
# (--slot-save-path, POST /slots/0?action=save|restore) on the same prompts.  For each
# size N: server 1 computes the N-token prompt (n_predict 1) and saves slot 0; server 2
# restores it and gets the same prompt.  TTFT restored = the restore call's time + the
# request's prompt time (llama-server reports both); the client's totals are printed too.
#   bench/llama_slot_ttft.sh LLAMA_SERVER DEJA MODEL N1,N2,... [THREADS]
# (DEJA only tokenizes the prompt text, as bench/persist_ttft.sh does.)
set -euo pipefail
srv=$1; deja=$2; model=$3; sizes=$4; threads=${5:-2}
max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -1)
work=$(mktemp -d /tmp/llama-ttft-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
cat src/*/*.c src/*/*/*.c tools/*.c tests/*/*.c > "$work/all"
head -c $((max * 8)) "$work/all" > "$work/text"
"$deja" tokenize -m "$model" -f "$work/text" > "$work/ids"
port=$((20000 + RANDOM % 20000))
start() {
  mkdir -p "$work/slots"
  "$srv" -m "$model" --port "$port" -t "$threads" -c $((max + 64)) -np 1 --slot-save-path "$work/slots/" \
    > "$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  cat "$work/log" >&2; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }
post() { curl -s -o "$work/out" -w '%{time_total}' -H 'Content-Type: application/json' --data-binary "$2" \
  "http://127.0.0.1:$port$1"; }
printf '%8s | %13s %9s | %10s %14s %9s %9s | %9s\n' N "cold prompt ms" "total s" "restore ms" \
  "then prompt ms" "total s" "restored" "slot file"
for n in ${sizes//,/ }; do
  rm -rf "$work/slots"
  ids=$(awk -v n="$n" '{for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? "," : ""), $i}' "$work/ids")
  body="{\"prompt\": [$ids], \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": true}"
  start
  c_tot=$(post /completion "$body"); c_ms=$(jq -r '.timings.prompt_ms' "$work/out")
  post "/slots/0?action=save" '{"filename": "s.bin"}' > /dev/null
  stop
  start
  r_tot=$(post "/slots/0?action=restore" '{"filename": "s.bin"}')
  r_ms=$(jq -r '.timings.restore_ms' "$work/out"); r_n=$(jq -r '.n_restored' "$work/out")
  t_tot=$(post /completion "$body"); t_ms=$(jq -r '.timings.prompt_ms' "$work/out")
  stop
  printf '%8s | %13s %9s | %10s %14s %9s %9s | %9s\n' "$n" "$c_ms" "$c_tot" "$r_ms" "$t_ms" \
    "$(awk -v a="$r_tot" -v b="$t_tot" 'BEGIN {print a + b}')" "$r_n" "$(du -sh "$work/slots" | cut -f1)"
done
