#!/usr/bin/env bash
# bench/spec_exit.sh — early-exit self-speculation (issue 14, benchmark c): decode speed
# with exit drafts vs plain decoding, same run, interleaved, and the tokens' equality.
#
# Modes, per model and prompt (greedy, THREADS threads, N tokens, EOS ignored):
#   plain          deja run
#   exit-auto      deja run --spec-sources exit            (adaptive policy; L by calibration)
#   exit-L<k>      deja run --spec-sources exit --spec-fixed --draft-exit-layer L --draft-max K
#                  (always draft K tokens from the first L layers: the cost when drafting is
#                  forced, whatever the acceptance)
# Models: codelm-15m (trained; its tied output matrix is 57 % of its weights, so an exit
# draft costs most of a pass) and the synthetic 1.1B llama (random weights: drafts are
# almost never accepted — the overhead bound).  Prints tok/s (best of R), acceptance and
# decode passes per mode, and the ratio to plain.
#
# usage: bench/spec_exit.sh [BUILD_DIR] [SHARED_DIR]
# env:   BIG (/tmp/m/1b-q4_0.gguf; "" skips it)  THREADS (2)  R (2)  K (4)
#        PROMPT (a trace prompt file; default: the first of /tmp/spec_prompts, else a code text)
#        N_SMALL (256)  N_BIG (32)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
BIG=${BIG-/tmp/m/1b-q4_0.gguf}
THREADS=${THREADS:-2}; R=${R:-2}; K=${K:-4}; N_SMALL=${N_SMALL:-256}; N_BIG=${N_BIG:-32}
DJ=$(mktemp /tmp/dj_spec_exit.XXXXXX)
cp "$BUILD/bin/deja" "$DJ"
chmod +x "$DJ"
P=$(mktemp /tmp/dj_spec_exit_prompt.XXXXXX)
trap 'rm -f "$DJ" "$P"' EXIT
if [ -n "${PROMPT:-}" ]; then cp "$PROMPT" "$P"
elif ls /tmp/spec_prompts/*.prompt.txt >/dev/null 2>&1; then cp "$(ls /tmp/spec_prompts/*.prompt.txt | head -1)" "$P"
else printf 'import json\nimport os\n\n\ndef load_config(path):\n    """Load a JSON config file."""\n' > "$P"; fi

bench_model() { # MODEL N LAYERS...
    local model=$1 n=$2; shift 2
    local modes=(plain exit-auto)
    for L in "$@"; do modes+=("exit-L$L"); done
    declare -A best acc pass ids
    for ((r = 0; r < R; r++)); do
        for m in "${modes[@]}"; do
            case $m in
            plain) extra=() ;;
            exit-auto) extra=(--spec-sources exit) ;;
            *) extra=(--spec-sources exit --spec-fixed --draft-exit-layer "${m#exit-L}" --draft-max "$K") ;;
            esac
            j=$("$DJ" run -m "$model" -f "$P" -n "$n" --ignore-eos -t "$THREADS" --json "${extra[@]}" 2>/dev/null)
            read -r tps a p h < <(python3 -c '
import json, sys
d = json.loads(sys.argv[1]); s = d["spec"]
print("%.2f %s/%s %d %d" % ((d["n_gen"] - 1) * 1000 / d["t_decode_ms"], s["accepted"], s["drafted"],
                             d["n_forward_passes"], hash(tuple(d["ids"])) & 0xffffff))' "$j")
            if [ -z "${best[$m]:-}" ] || python3 -c "import sys; sys.exit(0 if $tps > ${best[$m]} else 1)"; then best[$m]=$tps; fi
            acc[$m]=$a; pass[$m]=$p; ids[$m]=$h
        done
    done
    echo "$(basename "$model"), $n tokens, $THREADS threads, best of $R:"
    for m in "${modes[@]}"; do
        printf "  %-10s %8.1f t/s  %5.2fx  accepted/drafted %-9s  passes %4d  ids %s\n" "$m" "${best[$m]}" \
            "$(python3 -c "print(${best[$m]} / ${best[plain]})")" "${acc[$m]}" "${pass[$m]}" \
            "$([ "${ids[$m]}" = "${ids[plain]}" ] && echo equal || echo DIFFERENT)"
    done
}

bench_model "$SHARED/models/codelm-15m-f16.gguf" "$N_SMALL" 2 4 6 7
if [ -n "$BIG" ] && [ -f "$BIG" ]; then
    # the 1.1B model's context is 4096: the prompt's last 1000 characters
    tail -c 1000 "$P" > "$P.big" && mv "$P.big" "$P"
    bench_model "$BIG" "$N_BIG" 4 8 12 15
fi
