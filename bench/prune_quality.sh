#!/usr/bin/env bash
# bench/prune_quality.sh — what Tier-2 attention pruning (LLAMA_OPT_ATTN_PRUNE_*) costs in
# quality and saves in time, on a long agent session.
#
# For each policy, `deja replay --compare-exact` replays the trace twice in lockstep: an exact
# engine generates N_GEN tokens greedily per turn, the pruning one is fed the same tokens
# (teacher forcing); every step's next-token distributions are compared: KL(exact || pruned)
# and top-1 agreement, over all turns and over the turns that skipped anything.  Also: tokens
# skipped per turn and both engines' prefill and decode time (same process, same turns).
#
# usage: bench/prune_quality.sh [BUILD_DIR] [SHARED_DIR]
# env:   POLICIES ("threshold:0.001:10 threshold:0.01:2 h2o:2048 h2o:1024")  TRACE (a 93-turn mini-SWE-agent session)
#        MODEL (codelm-15m-f16)  MAX_TURNS (93) MAX_CHARS (26000: where SmolLM2 fits in 8192)  THREADS (2)  N_GEN (16)  CTX (8192)
#        OUT (a temporary folder for the JSON results)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
DEJA=$BUILD/bin/deja
MODEL=${MODEL:-$SHARED/models/codelm-15m-f16.gguf}
TRACE=${TRACE:-$SHARED/traces/mini_swe_agent__deepseek_lite_dev_noparallel__marshmallow-code__marshmallow-1343.jsonl}
POLICIES=${POLICIES:-threshold:0.001:10 threshold:0.01:2 h2o:2048 h2o:1024}
MAX_TURNS=${MAX_TURNS:-93}
MAX_CHARS=${MAX_CHARS:-26000}
THREADS=${THREADS:-2}
N_GEN=${N_GEN:-16}
CTX=${CTX:-8192}
OUT=${OUT:-$(mktemp -d /tmp/dj_bench_prune.XXXXXX)}
mkdir -p "$OUT"

for p in $POLICIES; do
    IFS=: read -r pol a b <<<"$p"
    if [ "$pol" = h2o ]; then
        env=(LLAMA_OPT_ATTN_PRUNE_POLICY=h2o LLAMA_OPT_ATTN_PRUNE_BUDGET="$a")
    else
        env=(LLAMA_OPT_ATTN_PRUNE_POLICY=threshold LLAMA_OPT_ATTN_PRUNE_THRESHOLD="$a" LLAMA_OPT_ATTN_PRUNE_WINDOW="$b")
    fi
    echo "pruning: $p" >&2
    env LLAMA_OPT_ATTN_PRUNE_ENABLED=1 "${env[@]}" \
        "$DEJA" replay -m "$MODEL" --trace "$TRACE" --max-turns "$MAX_TURNS" --max-chars "$MAX_CHARS" -n "$N_GEN" -c "$CTX" -t "$THREADS" \
        --compare-exact --json >"$OUT/prune_$p.json" 2>"$OUT/prune_$p.err"
done

python3 - "$OUT" $POLICIES <<'PY'
import json, sys
out, pols = sys.argv[1], sys.argv[2:]
print("| policy | turns (skipping) | prompt tokens, last turn | tokens skipped, last turn | mean KL, skipping turns | max KL | top-1 agree, skipping turns | top-1, all turns | prefill s pruned / exact | decode s pruned (exact: see text) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in pols:
    r = json.load(open(f"{out}/prune_{p}.json"))
    q = r["approx_quality"]; a, al = q["approx_turns"], q["all_turns"]; t = r["turns"]
    print(f"| {p} | {al['turns']} ({a['turns']}) | {t[-1]['n_prompt']} | {t[-1].get('n_attn_skipped', 0)} | "
          f"{a['kl_mean']:.2e} | {al['kl_max']:.3f} | {a['top1_agree']:.4f} | {al['top1_agree']:.4f} | "
          f"{r['totals']['t_prefill_ms']/1000:.1f} / {q['exact_prefill_ms']/1000:.1f} | {r['totals']['t_decode_ms']/1000:.1f} |")
PY
echo "results: $OUT" >&2
