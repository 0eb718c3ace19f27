#!/usr/bin/env bash
# Time to first token of a long prompt computed cold vs restored from --kv-dir after a
# restart of `deja serve` (issue 13).  For each size N: a fresh directory; server 1 computes
# the N-token prompt (the repository's C sources, tokenized; max_tokens 1, temperature 0)
# and is stopped (SIGTERM: its queued blocks are written); server 2 on the same directory
# gets the same prompt — restored from the page cache (the files were just written); then,
# if this user may write /proc/sys/vm/drop_caches, server 3 after dropping the page cache —
# restored from the disk itself; and the same prompt a second time on that server — from
# memory (the pool).  Prints server-side TTFT (x_deja.ttft_ms), the client's total time, the
# positions read from disk, the directory's size, and the restore's load rate (directory
# bytes / restored TTFT).  KV_TYPE=f16 (any -ctk/-ctv type) runs the servers with that
# K and V cache type.  Before the table, the disk's sequential read bandwidth (a 1 GiB file
# read with dd after dropping the page cache), if this user may drop it.
#   [KV_TYPE=T] bench/persist_ttft.sh DEJA MODEL N1,N2,... [THREADS]
set -euo pipefail
deja=$1; model=$2; sizes=$3; threads=${4:-2}
max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -1)
work=$(mktemp -d /tmp/deja-ttft-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
cat src/*/*.c src/*/*/*.c tools/*.c tests/*/*.c > "$work/text"
head -c $((max * 8)) "$work/text" > "$work/text.head"
"$deja" tokenize -m "$model" -f "$work/text.head" > "$work/ids"
have=$(wc -w < "$work/ids")
[ "$have" -ge "$max" ] || { echo "only $have tokens of text for $max" >&2; exit 1; }

start() {
  rm -f "$work/log" # (a stale log would give the last server's port)
  "$deja" serve -m "$model" --port 0 -t "$threads" -c $((max + 64)) --kv-dir "$work/kv" \
    -ctk "${KV_TYPE:-f32}" -ctv "${KV_TYPE:-f32}" 2> "$work/log" &
  pid=$!
  for _ in $(seq 600); do
    port=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/log" 2>/dev/null)
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  cat "$work/log" >&2; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }
request() { # N -> "ttft_ms total_s reused_disk"
  local body
  body="{\"prompt\": [$(awk -v n="$1" '{for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? "," : ""), $i}' "$work/ids")], \"max_tokens\": 1, \"temperature\": 0}"
  curl -s -o "$work/out" -w '%{time_total}' -H 'Content-Type: application/json' --data-binary "$body" \
    "http://127.0.0.1:$port/v1/completions" > "$work/time"
  echo "$(jq -r '.x_deja.ttft_ms' "$work/out") $(cat "$work/time") $(jq -r '.x_deja.reused_disk' "$work/out")"
}

can_drop=0
if [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
if [ "$can_drop" = 1 ]; then
  dd if=/dev/urandom of="$work/big" bs=1M count=1024 status=none; sync; echo 3 > /proc/sys/vm/drop_caches
  echo "disk read: $(dd if="$work/big" of=/dev/null bs=4M 2>&1 | tail -1)"; rm -f "$work/big"
fi
echo "K/V cache type: ${KV_TYPE:-f32}"
printf '%8s | %12s %9s | %12s %9s %8s | %12s | %12s %9s | %9s %8s\n' N "cold ttft ms" "total s" "warm ttft ms" "total s" \
  "disk pos" "memory ms" "dropped ms" "total s" "kv-dir" "GB/s"
for n in ${sizes//,/ }; do
  rm -rf "$work/kv"
  start; read -r c_ttft c_tot _ < <(request "$n"); stop
  start; read -r w_ttft w_tot w_disk < <(request "$n"); read -r m_ttft _ _ < <(request "$n"); stop
  d_ttft=-; d_tot=-
  if [ "$can_drop" = 1 ]; then
    sync; echo 3 > /proc/sys/vm/drop_caches
    start; read -r d_ttft d_tot _ < <(request "$n"); stop
  fi
  bytes=$(du -sb "$work/kv" | cut -f1)
  printf '%8s | %12s %9s | %12s %9s %8s | %12s | %12s %9s | %9s %8s\n' "$n" "$c_ttft" "$c_tot" "$w_ttft" "$w_tot" "$w_disk" \
    "$m_ttft" "$d_ttft" "$d_tot" "$(du -sh "$work/kv" | cut -f1)" "$(awk -v b="$bytes" -v t="$w_ttft" 'BEGIN { printf "%.2f", b / (t / 1000) / 1e9 }')"
done
