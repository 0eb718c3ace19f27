#!/usr/bin/env bash
# Replay of the traces with a restart between every turn — the worst case of think-time
# eviction — with the persistent KV store off and on (issue 13).
#
# One `deja replay --restart-each-turn` per setting: all sessions interleaved round-robin, and
# before every turn but the first the engine and the model are destroyed and loaded again (in
# the same process: nothing in memory survives; the store's queued writes finish first), so a
# turn reuses only what --kv-dir gives back.  Off: every turn computes its whole prompt.  On: a
# fresh --kv-dir at the start, then each turn computes only what is not on disk.  Both with
# LLAMA_OPT_DIFF_ENABLED=1 LLAMA_OPT_DEDUP_ENABLED=1 (persistence needs the pool), block 64.
# Prints, per harness (the trace name before "__") and in total: turns, prompt tokens, tokens
# computed, tokens reused from disk, prefill seconds (sum of the turns'), off vs on; then wall
# time (restarts included), restart time, the check that on computes exactly the replay's
# modelled minimum, whether the logits/ids hashes of the two runs are equal, and the size of
# the directory at the end.
#
# usage: bench/persist_restart.sh [BUILD_DIR] [SHARED_DIR]
# env:   MAX_CHARS (24000, as bench/replay.sh)  THREADS (2)  N_GEN (32)  CTX (16384)
#        TRACES: space-separated trace files (default: every SHARED/traces/*.jsonl)
#        OUT: folder for the JSON results and the kv directory (default: a temporary one)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
DEJA=$BUILD/bin/deja
MODEL=$SHARED/models/codelm-15m-f16.gguf
MAX_CHARS=${MAX_CHARS:-24000}
THREADS=${THREADS:-2}
N_GEN=${N_GEN:-32}
CTX=${CTX:-16384}
OUT=${OUT:-$(mktemp -d /tmp/dj_bench_persist_restart.XXXXXX)}
mkdir -p "$OUT"
TRACES=${TRACES:-$(ls "$SHARED"/traces/*.jsonl)}
args=()
for t in $TRACES; do args+=(--trace "$t"); done

replay() { # name, extra args
    local name=$1
    shift
    echo "replay --restart-each-turn $name: $(echo $TRACES | wc -w) traces ($(date -u +%H:%M:%S) UTC)" >&2
    LLAMA_OPT_DIFF_ENABLED=1 LLAMA_OPT_DEDUP_ENABLED=1 LLAMA_OPT_BLOCK_SIZE=64 \
    LLAMA_OPT_PERSIST_ENABLED=0 LLAMA_OPT_PERSIST_DIR= \
        "$DEJA" replay -m "$MODEL" "${args[@]}" --max-chars "$MAX_CHARS" -n "$N_GEN" -c "$CTX" -t "$THREADS" \
        --restart-each-turn --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
}

rm -rf "$OUT/kv"
replay off
replay on --kv-dir "$OUT/kv"
KV_BYTES=$(du -sb "$OUT/kv" | cut -f1)

python3 - "$OUT" "$KV_BYTES" <<'EOF'
import json, sys
from collections import OrderedDict
out, kv_bytes = sys.argv[1], int(sys.argv[2])
R = {n: json.load(open(f"{out}/{n}.json")) for n in ["off", "on"]}
def per_harness(r):
    h = OrderedDict()
    for t in r["turns"]:
        k = t["session"].split("__")[0]
        a = h.setdefault(k, {"turns": 0, "n_prompt": 0, "n_computed": 0, "n_reused_disk": 0, "prefill": 0.0, "sessions": set()})
        a["turns"] += 1
        a["n_prompt"] += t["n_prompt"]
        a["n_computed"] += t["n_computed"]
        a["n_reused_disk"] += t["n_reused_disk"]
        a["prefill"] += t["t_prefill_ms"] / 1000
        a["sessions"].add(t["session"])
    return h
H = {n: per_harness(R[n]) for n in R}
print("| harness | sessions | turns | prompt tokens | computed, off | computed, on | reused from disk, on | prefill s, off | prefill s, on | computed off/on |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
def row(name, a, b, sessions):
    print(f"| {name} | {sessions} | {a['turns']} | {a['n_prompt']:,} | {a['n_computed']:,} | {b['n_computed']:,} | "
          f"{b['n_reused_disk']:,} | {a['prefill']:.1f} | {b['prefill']:.1f} | {a['n_computed'] / max(b['n_computed'], 1):.1f}x |")
for k in sorted(H["off"]):
    row(k, H["off"][k], H["on"][k], len(H["off"][k]["sessions"]))
toff, ton = R["off"]["totals"], R["on"]["totals"]
tot = lambda t: {"turns": t["turns"], "n_prompt": t["n_prompt"], "n_computed": t["n_computed"],
                 "n_reused_disk": t["n_reused_disk"], "prefill": t["t_prefill_ms"] / 1000}
row("**total**", tot(toff), tot(ton), toff["sessions"])
print()
for n in ["off", "on"]:
    t, r = R[n]["totals"], R[n]
    print(f"{n}: wall {t['t_wall_ms']/1000:.1f} s (of which {r['t_restart_ms']/1000:.1f} s in {r['restarts']} restarts), "
          f"prefill {t['t_prefill_ms']/1000:.1f} s, decode {t['t_decode_ms']/1000:.1f} s, "
          f"TTFT median {t['ttft_median_ms']:.1f} ms, p90 {t['ttft_p90_ms']:.1f} ms; computed {t['n_computed']:,} "
          f"vs modelled minimum {t['n_min_computed']:,} ({'equal' if t['n_computed'] == t['n_min_computed'] else 'DIFFERENT'}); "
          f"persist {r['persist']}, blocks saved {r['persist_saves']:,}, loaded {r['persist_loads']:,}")
print(f"off/on: computed {toff['n_computed']/ton['n_computed']:.1f}x, wall {toff['t_wall_ms']/ton['t_wall_ms']:.1f}x, "
      f"prefill {toff['t_prefill_ms']/ton['t_prefill_ms']:.1f}x, TTFT median {toff['ttft_median_ms']/ton['ttft_median_ms']:.1f}x")
same = R["off"]["logits_hash"] == R["on"]["logits_hash"] and R["off"]["ids_hash"] == R["on"]["ids_hash"]
print(f"logits_hash/ids_hash equal off vs on: {same} ({R['on']['logits_hash']} / {R['on']['ids_hash']})")
print(f"--kv-dir at the end: {kv_bytes / 2**20:.0f} MiB")
EOF
echo "results: $OUT" >&2
