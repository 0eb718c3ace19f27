#!/usr/bin/env bash
# Grammar benchmark: deja's GBNF token masks against llama.cpp's grammar sampler, same
# grammar, same vocabulary, same token-id sequences (real tool calls from agent traces).
#
#   bench/grammar.sh            build the peer harness, run every (vocab, grammar) case
#   bench/grammar.sh regen      regenerate bench/grammars/ from the tau_airline tools
#
# Per case, ROUNDS rounds of (deja, peer), interleaved so drift in machine load hits both
# alike. deja's bench (build/bench/bench_grammar) runs first and dumps the sequences it
# timed (--dump-ids); the peer (bench/peer/grammar_peer.cpp, linked to libllama) times
# the very same ids file. Without deja's bench, or when it writes no ids, the peer makes
# the ids itself from the case's traces (--make-ids) and runs alone.
#
# The peer is llama.cpp built outside this repository (never committed), in LLAMACPP
# (default /tmp/llamacpp); see bench/peer/README.md for how to build it.
#
# Environment: LLAMACPP, VOCABS, CASES, MAX_SEQ (sequences per case, evenly spaced over
# the traces' tool calls), ROUNDS, DEJA_BENCH, DEJA_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
shared=${SHARED:-$root/../shared}

LLAMACPP=${LLAMACPP:-/tmp/llamacpp}
VOCABS=${VOCABS:-"$shared/vocab/ggml-vocab-deepseek-llm.gguf $shared/models/codelm-15m-f16.gguf"}
# name:grammar:traces-glob, one per word
CASES=${CASES:-"json:$shared/golden/grammars/json.gbnf:$shared/traces/*.jsonl tools:bench/grammars/tau_airline_tools.gbnf:$shared/traces/tau_airline__*.jsonl"}
# also available: names:bench/grammars/tau_airline_names.gbnf:$shared/traces/tau_airline__*.jsonl
MAX_SEQ=${MAX_SEQ:-40}
ROUNDS=${ROUNDS:-2}

# ---- deja's bench: ASSUMED options (bench/bench_grammar.c is written in another branch;
# ---- adjust this template when it lands). Placeholders: {VOCAB} {GBNF} {TRACES} {MAX_SEQ}
# ---- {IDS} (the file deja must write: one sequence per line, space-separated token ids).
# ---- Its stdout is shown as is; a JSON line with compile_ms / mask_us|apply_us / accept_us
# ---- objects (median, p99, ...) as the peer prints is picked up for the table.
DEJA_BENCH=${DEJA_BENCH:-build/bench/bench_grammar}
DEJA_ARGS=${DEJA_ARGS:-"-v {VOCAB} -g {GBNF} --dump-ids {IDS}"}

work=$root/build/grammar-bench
peer=$work/grammar_peer
mkdir -p "$work"

peer_check() {
    local missing=0
    [ -f "$LLAMACPP/include/llama.h" ] || missing=1
    [ -f "$LLAMACPP/build/bin/libllama.so" ] || missing=1
    if [ $missing = 1 ]; then
        cat >&2 <<EOF
grammar.sh: no llama.cpp build in $LLAMACPP (need include/llama.h and build/bin/libllama.so).
Build one outside this repository (never commit it), e.g. from the snapshot used so far:
    git clone https://github.com/ggml-org/llama.cpp $LLAMACPP && git -C $LLAMACPP checkout c392e509
    cmake -S $LLAMACPP -B $LLAMACPP/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON
    cmake --build $LLAMACPP/build -j2 --target llama
or point LLAMACPP at another build.
EOF
        exit 1
    fi
}

peer_commit() {
    if [ -f "$LLAMACPP/COMMIT_BUILT" ]; then cut -c1-8 "$LLAMACPP/COMMIT_BUILT"
    else git -C "$LLAMACPP" rev-parse --short=8 HEAD 2>/dev/null || echo unknown; fi
}

peer_build() {
    peer_check
    local src=bench/peer/grammar_peer.cpp
    if [ ! -x "$peer" ] || [ "$src" -nt "$peer" ] || [ "$LLAMACPP/build/bin/libllama.so" -nt "$peer" ]; then
        echo "building $peer against $LLAMACPP ($(peer_commit))" >&2
        g++ -O2 -std=c++17 -Wall -Wextra -I"$LLAMACPP/include" -I"$LLAMACPP/ggml/include" \
            "$src" -o "$peer" -L"$LLAMACPP/build/bin" -lllama -Wl,-rpath,"$LLAMACPP/build/bin"
    fi
}

# Writes the tool-call schema and grammars of bench/grammars/ from the <tools> block of
# tau_airline__0's system prompt, with llama.cpp's own JSON-schema converter.
regen() {
    peer_check
    local conv=$LLAMACPP/examples/json_schema_to_grammar.py
    local trace=$shared/traces/tau_airline__0.jsonl out=bench/grammars commit
    commit=$(peer_commit)
    mkdir -p "$out"
    python3 - "$trace" "$out" <<'EOF'
import json, re, sys
trace, out = sys.argv[1], sys.argv[2]
text = json.loads(open(trace).readline())["text"]
block = re.search(r"<tools>\n(.*?)\n</tools>", text, re.S).group(1)
tools = [json.loads(l)["function"] for l in block.split("\n") if l.strip()]
full = {"anyOf": [{"type": "object",
                   "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                   "required": ["name", "arguments"]} for t in tools]}
names = {"type": "object",
         "properties": {"name": {"enum": [t["name"] for t in tools]}, "arguments": {"type": "object"}},
         "required": ["name", "arguments"]}
for fn, s in (("tau_airline_tools.schema.json", full), ("tau_airline_names.schema.json", names)):
    with open(f"{out}/{fn}", "w") as f:
        json.dump(s, f, indent=1)
        f.write("\n")
print(len(tools), "tools:", " ".join(t["name"] for t in tools), file=sys.stderr)
EOF
    {
        echo "# GENERATED by bench/grammar.sh regen; do not edit."
        echo "# Tool calls for the 14 tools of ../shared/traces/tau_airline__0.jsonl (the <tools> block of"
        echo "# its system prompt): {\"name\": TOOL, \"arguments\": TOOL's parameters schema}, one anyOf"
        echo "# branch per tool (tau_airline_tools.schema.json), converted by llama.cpp's"
        echo "# examples/json_schema_to_grammar.py (llama.cpp $commit)."
        python3 "$conv" "$out/tau_airline_tools.schema.json"
    } > "$out/tau_airline_tools.gbnf"
    {
        echo "# GENERATED by bench/grammar.sh regen; do not edit."
        echo "# Tool calls for the tools of ../shared/traces/tau_airline__0.jsonl, names only:"
        echo "# {\"name\": one of the 14 tool names, \"arguments\": any JSON object}"
        echo "# (tau_airline_names.schema.json), converted by llama.cpp's"
        echo "# examples/json_schema_to_grammar.py (llama.cpp $commit)."
        python3 "$conv" "$out/tau_airline_names.schema.json"
    } > "$out/tau_airline_names.gbnf"
    wc -l "$out"/*.gbnf >&2
}

if [ "${1:-}" = regen ]; then regen; exit 0; fi
[ $# = 0 ] || { echo "usage: bench/grammar.sh [regen]" >&2; exit 2; }

peer_build
label="llama.cpp $(peer_commit)"
have_deja=0
if [ -x "$DEJA_BENCH" ]; then have_deja=1; else
    echo "note: $DEJA_BENCH not built; running the peer alone on ids it makes itself" >&2
fi

results=$work/results.jsonl
: > "$results"
echo "load before: $(uptime)"
for vocab in $VOCABS; do
    for c in $CASES; do
        name=${c%%:*}; rest=${c#*:}; gbnf=${rest%%:*}; traces=${rest#*:}
        vname=$(basename "$vocab" .gguf)
        ids=$work/$vname.$name.ids
        rm -f "$ids"
        echo "== $vname  $name ($(basename "$gbnf"))"
        for r in $(seq 1 "$ROUNDS"); do
            if [ $have_deja = 1 ]; then
                dump=$work/$vname.$name.deja$r.ids
                args=${DEJA_ARGS//\{VOCAB\}/$vocab}; args=${args//\{GBNF\}/$gbnf}
                args=${args//\{TRACES\}/$traces}; args=${args//\{MAX_SEQ\}/$MAX_SEQ}
                args=${args//\{IDS\}/$dump}
                # word splitting of $args is intended (a template of options)
                # shellcheck disable=SC2086
                "$DEJA_BENCH" $args | tee "$work/deja.out"
                grep '^{' "$work/deja.out" | sed "s/^{/{\"_side\":\"deja\",\"_case\":\"$vname $name\",/" >> "$results" || true
                if [ -s "$dump" ]; then
                    if [ ! -s "$ids" ]; then cp "$dump" "$ids"
                    elif ! cmp -s "$dump" "$ids"; then echo "WARNING: deja round $r timed other sequences than round 1" >&2; fi
                fi
            fi
            if [ ! -s "$ids" ]; then
                [ $have_deja = 0 ] || echo "WARNING: deja wrote no ids ($DEJA_ARGS); the peer makes its own, the two did not time the same sequences" >&2
                "$peer" -m "$vocab" --make-ids "$traces" "$ids" --max-seq "$MAX_SEQ" 2> >(grep -v '^load:' >&2)
            fi
            "$peer" -m "$vocab" -g "$gbnf" -i "$ids" --label "$label" 2> >(grep -v '^load:' >&2) | tee "$work/peer.out"
            grep '^{' "$work/peer.out" | sed "s/^{/{\"_side\":\"llama.cpp\",\"_case\":\"$vname $name\",/" >> "$results"
        done
    done
done
echo "load after:  $(uptime)"

# Table: per case and side, the median over rounds of each statistic (one round: itself);
# the last column is how many times longer the peer's median mask takes than deja's.
python3 - "$results" <<'EOF'
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    try: j = json.loads(line)
    except ValueError: continue
    rows.setdefault((j["_case"], j["_side"]), []).append(j)
def get(j, keys, field):
    for k in keys:
        v = j.get(k)
        if isinstance(v, dict) and field in v: return v[field]
        if isinstance(v, (int, float)) and field == "median": return v
    return None
def med(js, keys, field):
    xs = [x for x in (get(j, keys, field) for j in js) if x is not None]
    return st.median(xs) if xs else float("nan")
mask = ("mask_us", "apply_us")
print(f"{'case':<38}{'side':<10}{'rounds':>6}{'tokens':>8}{'compile ms':>11}"
      f"{'mask med us':>12}{'p99':>10}{'accept med':>11}{'p99':>8}{'peer/deja mask':>16}")
for (case, side), js in sorted(rows.items()):
    n = js[0].get("n_tok", js[0].get("n_tokens", ""))
    ratio = ""
    if side == "deja" and (case, "llama.cpp") in rows:
        ratio = f"{med(rows[(case, 'llama.cpp')], mask, 'median') / med(js, mask, 'median'):.1f}x"
    print(f"{case:<38}{side:<10}{len(js):>6}{n:>8}{med(js, ('compile_ms',), 'median'):>11.2f}"
          f"{med(js, mask, 'median'):>12.1f}{med(js, mask, 'p99'):>10.1f}"
          f"{med(js, ('accept_us',), 'median'):>11.1f}{med(js, ('accept_us',), 'p99'):>8.1f}{ratio:>16}")
EOF
