#!/usr/bin/env bash
# interleaved.sh — agents side by side on the serving engine: `deja replay` over the traces
# (prompts capped as in docs/bench_replay.md), round-robin one turn at a time against
# --parallel N (N sessions in flight, batched decoding, chunked prefill of --n-batch tokens a
# step) and against --parallel N with chunked prefill off (a long prompt is prefilled whole in
# one step, stalling the others' decoding).  Reuse on (the defaults).  Prints wall time, TTFT
# p50/p90 over every turn, forward passes, and whether every session's logits/ids hashes equal
# the round-robin run's (they must).
#
# usage: bench/interleaved.sh [BUILD_DIR] [SHARED_DIR]
# env:   PAR (4)  NBATCH (128)  MAX_CHARS (24000)  THREADS (2)  N_GEN (32)  CTX (16384)
#        TRACES: space-separated trace files (default: every ../shared/traces/*.jsonl)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
DEJA=$BUILD/bin/deja
MODEL=$SHARED/models/codelm-15m-f16.gguf
PAR=${PAR:-4} NBATCH=${NBATCH:-128} MAX_CHARS=${MAX_CHARS:-24000} THREADS=${THREADS:-2} N_GEN=${N_GEN:-32}
CTX=${CTX:-16384}
TRACES=${TRACES:-$(ls "$SHARED"/traces/*.jsonl)}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
args=()
for t in $TRACES; do args+=(--trace "$t"); done
run() { # name extra-args...
  local name=$1
  shift
  echo "replay $name: $*" >&2
  "$DEJA" replay -m "$MODEL" "${args[@]}" --max-chars "$MAX_CHARS" -n "$N_GEN" -c "$CTX" -t "$THREADS" --json "$@" \
    >"$OUT/$name.json" 2>"$OUT/$name.err"
}
run rr
run par --parallel "$PAR" --n-batch "$NBATCH"
run par_nochunk --parallel "$PAR" --n-batch "$NBATCH" --no-chunked-prefill
python3 - "$OUT" "$PAR" "$NBATCH" <<'EOF'
import json, sys
out, par, nb = sys.argv[1], sys.argv[2], sys.argv[3]
names = [("rr", "round-robin, one turn at a time"),
         ("par", f"--parallel {par}, chunked prefill ({nb} tokens a step)"),
         ("par_nochunk", f"--parallel {par}, chunked prefill off")]
R = {n: json.load(open(f"{out}/{n}.json")) for n, _ in names}
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]
print("| run | sessions | turns | computed | forward passes | wall s | TTFT p50 ms | TTFT p90 ms | TTFT max ms | sessions equal to round-robin |")
print("|---|---|---|---|---|---|---|---|---|---|")
base = R["rr"]["sessions"]
for n, label in names:
    d = R[n]; t = d["totals"]
    ttft = [x["ttft_ms"] for x in d["turns"]]
    same = sum(a["logits_hash"] == b["logits_hash"] and a["ids_hash"] == b["ids_hash"] for a, b in zip(base, d["sessions"]))
    print(f"| {label} | {t['sessions']} | {t['turns']} | {t['n_computed']:,} | {d['n_forward_passes']:,} | "
          f"{t['t_wall_ms']/1000:.1f} | {pct(ttft, .5):.0f} | {pct(ttft, .9):.0f} | {max(ttft):.0f} | {same}/{len(base)} |")
EOF
