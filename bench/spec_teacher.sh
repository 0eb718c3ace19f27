#!/usr/bin/env bash
# bench/spec_teacher.sh — speculative decoding against real agent outputs, by simulation
# (issue 14, benchmark b).
#
# codelm-15m is too small to write what the recorded agents wrote, so this replays every
# trace with `deja replay --teacher-force`: each turn "generates" its recorded response (the
# trace's `response`, tokenized; at most N_GEN tokens) — the model computes its logits at
# every position as if it had written those tokens, and drafts are checked against them.
# This is a SIMULATION of a model that writes the recorded responses: it measures how often
# each draft source is right on real agent outputs and what verifying the drafts costs on
# this machine and model; a real model writing those responses would see the same
# acceptance but its own cost per row.
#
# Two runs over all traces (round-robin, one engine: the output memo learns from every
# earlier turn of every session, as a server's would): speculation off (--no-spec) and on
# (--spec: lookup + memo, adaptive), then per trace and in total: decode tokens, decode time
# off/on and the speedup, acceptance per source, tokens per decode pass, and whether the
# logits/ids hashes of the two runs are equal (they must be: exactness).  A trace is
# "edit-heavy" when at least 15 % of its responses' whitespace 8-grams occur in its prompts
# (bench/spec_prompts.py's echo_words, the measure of its prompt set's classes).
#
# usage: bench/spec_teacher.sh [BUILD_DIR] [SHARED_DIR]
# env:   MAX_CHARS (24000: a trace stops at its first longer prompt)  THREADS (2)
#        N_GEN (512)  CTX (16384)  TRACES (default: every ../shared/traces/*.jsonl)
#        SPEC ("--spec"; e.g. "--spec --spec-fixed" or "--spec-sources lookup")
#        OUT: folder for the JSON results (default: a temporary one)
set -euo pipefail
BUILD=${1:-build}
SHARED=${2:-../shared}
MODEL=$SHARED/models/codelm-15m-f16.gguf
MAX_CHARS=${MAX_CHARS:-24000}
THREADS=${THREADS:-2}
N_GEN=${N_GEN:-512}
CTX=${CTX:-16384}
SPEC=${SPEC:---spec}
OUT=${OUT:-$(mktemp -d /tmp/dj_spec_teacher.XXXXXX)}
mkdir -p "$OUT"
if [ -z "${TRACES:-}" ]; then TRACES=$(ls "$SHARED"/traces/*.jsonl); fi
DJ=$(mktemp /tmp/dj_spec_teacher_deja.XXXXXX)
cp "$BUILD/bin/deja" "$DJ"
chmod +x "$DJ"
trap 'rm -f "$DJ"' EXIT
args=()
for t in $TRACES; do args+=(--trace "$t"); done
common=(-m "$MODEL" -c "$CTX" -t "$THREADS" --max-chars "$MAX_CHARS" --teacher-force -n "$N_GEN" --json "${args[@]}")
echo "spec_teacher: $(echo "$TRACES" | wc -w) traces, max $MAX_CHARS chars, responses up to $N_GEN tokens, $THREADS threads"
echo "  off: deja replay ${common[*]:0:12} ... --no-spec"
"$DJ" replay "${common[@]}" --no-spec > "$OUT/off.json" 2> "$OUT/off.err"
echo "  on:  deja replay ${common[*]:0:12} ... $SPEC"
# shellcheck disable=SC2086
"$DJ" replay "${common[@]}" $SPEC > "$OUT/on.json" 2> "$OUT/on.err"
python3 - "$(dirname "$0")" "$OUT" "$SHARED" $TRACES <<'EOF'
import json, math, sys
bench, out, shared, traces = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
off = json.load(open(out + "/off.json"))
on = json.load(open(out + "/on.json"))

sys.path.insert(0, bench)
from spec_prompts import echo_words, prompts_of  # the same measure as the prompt set's classes

def echo_share(path):
    """Share of the recorded responses' whitespace 8-grams found in the prompts."""
    hit = grams = 0
    for _, prompt, response in prompts_of(path):
        if response:
            m, t = echo_words(prompt, response)
            hit, grams = hit + m, grams + t
    return hit / grams if grams else 0.0

cls = {}
for path in traces:
    first = json.loads(open(path).readline())
    cls[first.get("session") or path.rsplit("/", 1)[-1]] = "edit" if echo_share(path) >= 0.15 else "other"

def per_session(d):
    s = {}
    for t in d["turns"]:
        x = s.setdefault(t["session"], {"gen": 0, "ms": 0.0, "drafted": 0, "acc": 0, "turns": 0})
        x["gen"] += t["n_gen"]; x["ms"] += t["t_decode_ms"]; x["turns"] += 1
        x["drafted"] += t.get("n_drafted", 0); x["acc"] += t.get("n_draft_accepted", 0)
    return s

a, b = per_session(off), per_session(on)
print("%-58s %5s %6s %9s %9s %7s %8s %8s" % ("session", "class", "tokens", "off ms", "on ms", "speedup", "drafted", "accepted"))
groups = {"edit": [], "other": [], "all": []}
for k in sorted(a):
    x, y = a[k], b.get(k)
    if not y or x["gen"] == 0 or y["ms"] <= 0:
        continue
    sp = x["ms"] / y["ms"]
    c = cls.get(k, "other")
    groups[c].append((x, y)); groups["all"].append((x, y))
    print("%-58.58s %5s %6d %9.1f %9.1f %6.2fx %8d %8d" % (k, c, x["gen"], x["ms"], y["ms"], sp, y["drafted"], y["acc"]))
print()
for g, v in groups.items():
    if not v:
        continue
    gen = sum(x["gen"] for x, _ in v); ms0 = sum(x["ms"] for x, _ in v); ms1 = sum(y["ms"] for _, y in v)
    geo = math.exp(sum(math.log(x["ms"] / y["ms"]) for x, y in v) / len(v))
    dr = sum(y["drafted"] for _, y in v); ac = sum(y["acc"] for _, y in v)
    print("%-5s %2d sessions: %6d tokens, decode %.1f t/s off, %.1f t/s on: %.2fx (geomean over sessions %.2fx); "
          "drafted %d, accepted %d (%.1f %%)" % (g, len(v), gen, gen * 1000 / ms0, gen * 1000 / ms1, ms0 / ms1, geo,
                                                  dr, ac, 100.0 * ac / dr if dr else 0.0))
s = on["spec"]
print("\nspec (on): acceptance %.3f, %.2f tokens per decode pass; by source:" % (s["acceptance"], s["tokens_per_pass"]))
for src, v in s["by_source"].items():
    if v["proposed"] or v["drafted"]:
        print("  %-8s proposed %6d, rounds %6d, drafted %7d, accepted %7d (%.1f %%)" % (
            src, v["proposed"], v["rounds"], v["drafted"], v["accepted"],
            100.0 * v["accepted"] / v["drafted"] if v["drafted"] else 0.0))
print("  acceptance by draft position: " + " ".join("%.2f" % (p[1] / p[0]) for p in s["by_position"][:12] if p[0]))
print("decode passes: off %d, on %d" % (off["n_decode_passes"], on["n_decode_passes"]))
same = off["logits_hash"] == on["logits_hash"] and off["ids_hash"] == on["ids_hash"]
print("hashes equal (exact): %s" % ("yes" if same else "NO"))
sys.exit(0 if same else 1)
EOF
