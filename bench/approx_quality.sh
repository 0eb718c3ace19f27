#!/usr/bin/env bash
# bench/approx_quality.sh — what Tier-2 reuse after an edit (LLAMA_OPT_DIFF_MODE=approx)
# costs in quality and saves in prefill, on the OpenHands traces (the sessions that edit
# the middle of their prompt).
#
# For each LLAMA_OPT_DIFF_RECOMPUTE fraction, `deja replay --compare-exact` replays every
# OpenHands trace (stopped at its first prompt > MAX_CHARS characters) twice in lockstep:
# an exact engine generates N_GEN tokens greedily per turn, the approximate one is fed the
# same tokens (teacher forcing); every step's next-token distributions are compared:
# KL(exact || approx) and top-1 agreement, over all turns and over the turns that reused
# something approximately.  Also: positions reused approximately, recomputed after the
# probe, probed, computed in full, and both engines' prefill time (same process, same turns).
#
# usage: bench/approx_quality.sh [BUILD_DIR] [SHARED_DIR]
# env:   FRACTIONS ("0 0.15 0.3 0.5 1")  MAX_CHARS (24000)  THREADS (2)  N_GEN (32)
#        CTX (16384)  MODEL (codelm-15m-f16)  OUT (a temporary folder for the JSON results)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
DEJA=$BUILD/bin/deja
MODEL=${MODEL:-$SHARED/models/codelm-15m-f16.gguf}
FRACTIONS=${FRACTIONS:-0 0.15 0.3 0.5 1}
MAX_CHARS=${MAX_CHARS:-24000}
THREADS=${THREADS:-2}
N_GEN=${N_GEN:-32}
CTX=${CTX:-16384}
OUT=${OUT:-$(mktemp -d /tmp/dj_bench_approx.XXXXXX)}
mkdir -p "$OUT"
ARGS=()
for t in "$SHARED"/traces/openhands*.jsonl; do ARGS+=(--trace "$t"); done

for f in $FRACTIONS; do
    echo "approx, LLAMA_OPT_DIFF_RECOMPUTE=$f" >&2
    LLAMA_OPT_DIFF_MODE=approx LLAMA_OPT_DIFF_RECOMPUTE=$f \
        "$DEJA" replay -m "$MODEL" "${ARGS[@]}" --max-chars "$MAX_CHARS" -n "$N_GEN" -c "$CTX" -t "$THREADS" \
        --compare-exact --json >"$OUT/approx_$f.json" 2>"$OUT/approx_$f.err"
done

python3 - "$OUT" $FRACTIONS <<'EOF'
import json, sys
out, fractions = sys.argv[1], sys.argv[2:]
print("| recompute | turns (with approx reuse) | prompt tokens | reused exactly | reused approx | recomputed after probe | probed | computed | prefill s approx / exact | mean KL, approx turns | max KL | top-1 agree, approx turns | top-1 agree, all turns |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for f in fractions:
    r = json.load(open(f"{out}/approx_{f}.json"))
    t, q = r["totals"], r["approx_quality"]
    a, al = q["approx_turns"], q["all_turns"]
    print(f"| {f} | {t['turns']} ({a['turns']}) | {t['n_prompt']} | {t['n_reused_own'] + t['n_reused_pool']} | "
          f"{t['n_reused_approx']} | {t['n_blend']} | {t['n_probed']} | {t['n_computed']} | "
          f"{t['t_prefill_ms']/1000:.1f} / {q['exact_prefill_ms']/1000:.1f} | {a['kl_mean']:.2e} | {al['kl_max']:.2f} | "
          f"{a['top1_agree']:.4f} | {al['top1_agree']:.4f} |")
EOF
echo "results: $OUT" >&2
