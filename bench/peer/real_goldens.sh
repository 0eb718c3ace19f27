#!/bin/bash
# real_goldens.sh — llama.cpp's output on the two real models of tests/realmodels (SmolLM2-135M-
# Instruct Q4_1, Gemma 3 270M Q4_K_M), the goldens of tests/model/test_real_golden.c, written
# into tests/golden/real (its README.md lists what each file holds and the numbers measured).
#
#   LLAMACPP=/path/to/llama.cpp bench/peer/real_goldens.sh
#
# LLAMACPP: a llama.cpp source tree at d32676d7 with a CPU build in $LLAMACPP/build (shared
# libraries: targets llama and llama-perplexity, bench/peer/README.md).  The models come from
# tests/realmodels/fetch.sh (the pinned PyPI wheels, sha256-checked).  Run from the repository.
set -euo pipefail
: "${LLAMACPP:?set LLAMACPP to a llama.cpp source tree with a CPU build in \$LLAMACPP/build}"
L=$LLAMACPP
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
G=$ROOT/tests/golden/real
SHARED=${SHARED:-$ROOT/../shared}
LABEL="llama.cpp d32676d7"
PEER=$ROOT/build/peer
PPL_TEXT=golden/tinystories_sample.txt # relative to the shared folder
PPL_CTX=512
PPL_CHUNKS=4

M=$(bash "$ROOT/tests/realmodels/fetch.sh")
mkdir -p "$PEER"
for h in tokenize_peer logits_peer; do
    g++ -O2 -std=c++17 -Wall -Wextra -I"$L/include" -I"$L/ggml/include" "$ROOT/bench/peer/$h.cpp" -o "$PEER/$h" \
        -L"$L/build/bin" -lllama -Wl,-rpath,"$L/build/bin"
done

for pair in smollm2:SmolLM2-135M-Instruct.Q4_1.gguf gemma3:gemma-3-270m-q4_k_m.gguf; do
    name=${pair%%:*} file=$M/${pair#*:}
    "$PEER/tokenize_peer" -m "$file" -p "$G/texts.json" -o "$G/$name-tokens.json" --label "$LABEL"
    "$PEER/logits_peer" -m "$file" -p "$G/prompts_$name.json" -o "$G/$name-logits.json" --steps 32 --top-k 64 \
        --top-steps 4 -t 1 --label "$LABEL"
    # perplexity: the defaults otherwise (f16 K/V, n_batch 2048, flash attention auto = on for
    # the CPU), as `deja perplexity` has them; then with flash attention off, llama.cpp's own
    # spread (recorded, not the reference)
    log=$(mktemp) log_fa=$(mktemp)
    "$L/build/bin/llama-perplexity" -m "$file" -f "$SHARED/$PPL_TEXT" -c $PPL_CTX --chunks $PPL_CHUNKS -t 2 >"$log" 2>&1
    "$L/build/bin/llama-perplexity" -m "$file" -f "$SHARED/$PPL_TEXT" -c $PPL_CTX --chunks $PPL_CHUNKS -t 2 -fa off \
        >"$log_fa" 2>&1
    python3 - "$log" "$log_fa" "$G/$name-ppl.json" "$PPL_TEXT" $PPL_CTX $PPL_CHUNKS "$LABEL" "${pair#*:}" <<'PY'
import json, re, sys
log, log_fa, out, text, ctx, chunks, label, model = sys.argv[1:]
def parse(path):
    s = open(path).read()
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", s)
    per_chunk = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", s)]
    if not final or len(per_chunk) != int(chunks):
        sys.exit(f"llama-perplexity: no final estimate or {len(per_chunk)} chunk values in {path}")
    return float(final.group(1)), float(final.group(2)), per_chunk
ppl, err, by_chunk = parse(log)
ppl_fa, _, by_chunk_fa = parse(log_fa)
cmd = f"llama-perplexity -m {model} -f ../shared/{text} -c {ctx} --chunks {chunks} -t 2"
json.dump({"model": model, "label": label, "text": text, "n_ctx": int(ctx), "n_chunks": int(chunks),
           "cache_type": "f16", "ppl": ppl, "ppl_err": err, "ppl_by_chunk": by_chunk, "command": cmd,
           "ppl_fa_off": ppl_fa, "ppl_by_chunk_fa_off": by_chunk_fa, "command_fa_off": cmd + " -fa off"},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
PY
    rm -f "$log" "$log_fa"
done
echo "real_goldens.sh: wrote $G/{smollm2,gemma3}-{tokens,logits,ppl}.json"
