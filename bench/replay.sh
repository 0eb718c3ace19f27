#!/usr/bin/env bash
# bench/replay.sh — exact multi-turn KV reuse on real agent traces (issue 4).
#
# Replays the traces (all sessions interleaved round-robin, as one server sees
# them) on codelm-15m with reuse on (LLAMA_OPT_DIFF_ENABLED=1
# LLAMA_OPT_DEDUP_ENABLED=1) and off (both 0: every prompt recomputed), in one
# run, and prints: prefill tokens computed, the exact minimum (the replay
# tool's independent model: tokens after the longest reusable prefix,
# block-rounded for cross-session hits), wall time, TTFT median/p90, the
# ratios, and whether the logits/ids hashes of the two runs are equal.  Then
# KV block memory with dedup on vs off for 8 interleaved sessions of one
# harness (OpenHands CodeAct mock sessions) and for the 5 tau-bench airline
# sessions.
#
# usage: bench/replay.sh [BUILD_DIR] [SHARED_DIR]
# env:   MAX_CHARS (24000)  THREADS (2)  N_GEN (32)  CTX (16384)
#        TRACES: space-separated trace files (default: every ../shared/traces/*.jsonl)
#        OFF_TRACES: the traces of the reuse-off run (default: TRACES); a subset
#          when the full baseline takes too long — the script then also reruns
#          reuse on over that subset so the ratio compares like with like.
#        OUT: folder for the JSON results (default: a temporary one)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
DEJA=$BUILD/bin/deja
MODEL=$SHARED/models/codelm-15m-f16.gguf
MAX_CHARS=${MAX_CHARS:-24000}
THREADS=${THREADS:-2}
N_GEN=${N_GEN:-32}
CTX=${CTX:-16384}
OUT=${OUT:-$(mktemp -d /tmp/dj_bench_replay.XXXXXX)}
mkdir -p "$OUT"
TRACES=${TRACES:-$(ls "$SHARED"/traces/*.jsonl)}
OFF_TRACES=${OFF_TRACES:-$TRACES}

args() { for t in $1; do printf -- '--trace %s ' "$t"; done; }

replay() { # name diff dedup traces
    local name=$1 diff=$2 dedup=$3 traces=$4
    echo "replay $name (diff $diff, dedup $dedup): $(echo $traces | wc -w) traces" >&2
    LLAMA_OPT_DIFF_ENABLED=$diff LLAMA_OPT_DEDUP_ENABLED=$dedup \
        "$DEJA" replay -m "$MODEL" $(args "$traces") --max-chars "$MAX_CHARS" -n "$N_GEN" -c "$CTX" -t "$THREADS" \
        --json >"$OUT/$name.json" 2>"$OUT/$name.err"
}

replay on 1 1 "$TRACES"
if [ "$OFF_TRACES" != "$TRACES" ]; then replay on_subset 1 1 "$OFF_TRACES"; fi
replay off 0 0 "$OFF_TRACES"
HARNESS8=$(ls "$SHARED"/traces/openhands_mock__CodeAct*.jsonl | head -8)
TAU=$(ls "$SHARED"/traces/tau_airline__*.jsonl)
replay mem8_dedup 1 1 "$HARNESS8"
replay mem8_nodedup 1 0 "$HARNESS8"
replay tau_dedup 1 1 "$TAU"
replay tau_nodedup 1 0 "$TAU"

python3 - "$OUT" "$([ "$OFF_TRACES" != "$TRACES" ] && echo on_subset || echo on)" <<'EOF'
import json, sys
out, on_sub = sys.argv[1], sys.argv[2]
R = {n: json.load(open(f"{out}/{n}.json")) for n in
     ["on", on_sub, "off", "mem8_dedup", "mem8_nodedup", "tau_dedup", "tau_nodedup"]}
def row(name, r):
    t = r["totals"]
    return (f"| {name} | {t['sessions']} | {t['turns']} | {t['n_prompt']} | {t['n_computed']} | {t['n_min_computed']} | "
            f"{t['t_wall_ms']/1000:.1f} | {t['t_prefill_ms']/1000:.1f} | {t['ttft_median_ms']:.1f} | {t['ttft_p90_ms']:.1f} |")
print("| run | sessions | turns | prompt tokens | computed | exact minimum | wall s | prefill s | TTFT median ms | TTFT p90 ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
print(row("reuse on (all traces)", R["on"]))
if on_sub != "on": print(row("reuse on (baseline subset)", R[on_sub]))
print(row("reuse off", R["off"]))
on, off = R[on_sub]["totals"], R["off"]["totals"]
print()
print(f"ratio off/on over the same traces: computed {off['n_computed']/on['n_computed']:.1f}x, "
      f"wall {off['t_wall_ms']/on['t_wall_ms']:.1f}x, prefill {off['t_prefill_ms']/on['t_prefill_ms']:.1f}x, "
      f"TTFT median {off['ttft_median_ms']/on['ttft_median_ms']:.1f}x")
same = R[on_sub]["logits_hash"] == R["off"]["logits_hash"] and R[on_sub]["ids_hash"] == R["off"]["ids_hash"]
print(f"logits_hash/ids_hash equal on vs off: {same} ({R['off']['logits_hash']} / {R['off']['ids_hash']})")
for n in ["on", on_sub]:
    t = R[n]["totals"]
    print(f"{n}: computed {t['n_computed']} vs exact minimum {t['n_min_computed']}: "
          f"{'equal' if t['n_computed'] == t['n_min_computed'] else 'DIFFERENT'} "
          f"(evicted {t['kv_blocks_evicted']}, parked {t['sessions_parked']}, pool hits {t['dedup_blocks_hit']})")
print()
print("| sessions | dedup | peak KV blocks allocated | peak pinned | MiB (peak allocated) | pool hits |")
print("|---|---|---|---|---|---|")
for a, b, label in [("mem8_dedup", "mem8_nodedup", "8 OpenHands CodeAct mock"), ("tau_dedup", "tau_nodedup", "5 tau-bench airline")]:
    for n, d in [(a, "on"), (b, "off")]:
        t = R[n]["totals"]
        print(f"| {label} | {d} | {t['kv_blocks_peak']} | {t['kv_blocks_pinned_peak']} | "
              f"{t['kv_blocks_peak']*t['kv_block_bytes']/2**20:.0f} | {t['dedup_blocks_hit']} |")
EOF
echo "results: $OUT" >&2
