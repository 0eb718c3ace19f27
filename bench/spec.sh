#!/usr/bin/env bash
# bench/spec.sh — exact speculative decoding without a draft model: deja vs llama.cpp.
#
# For each prompt (files written by bench/spec_prompts.py), interleaved — every mode once
# per repetition, the order reversed on odd repetitions — greedy (temp 0), THREADS
# threads, N generated tokens with EOS disabled so every run generates the same count:
#   deja            deja run --json (plain decoding)
#   deja-spec       deja run --spec --json (skipped, with a note, while deja lacks --spec)
#   llama           llama-cli -no-cnv --no-display-prompt (plain decoding; tok/s from
#                   llama_perf "eval time", which excludes prompt processing)
#   llama-lookup    llama-lookup (prompt lookup / n-gram cache, default --draft 16, no
#                   static or dynamic cache files; tok/s from its "decoded" line)
#   llama-lookahead llama-lookahead (W 15, N 5, G 15 compiled in; -c CTX_LA -np 16)
#   server-<type>   llama-server --spec-type <type> for every ngram-* type its --help
#                   lists (none in llama.cpp before they were added); POST /completion,
#                   tok/s = timings.predicted_per_second, drafts = draft_n/draft_n_accepted
# and prints a table per prompt (best of R tok/s per mode, acceptance where the tool reports
# it) and a summary: geometric mean over prompts of each mode's tok/s and of its ratios to
# llama plain and to deja plain, for edit-heavy prompts, the others, and all (the class
# comes from the prompt folder's manifest.tsv).  Checks: llama-lookup's and the server
# modes' text starts with llama plain's (exact under greedy), deja-spec's ids equal deja
# plain's, and (for information) whether deja plain's text equals llama plain's.
# deja is copied to a temporary file at the start (the build it comes from may change).
#
# usage: bench/spec.sh [PROMPT_DIR | FILE.prompt.txt ...]     (default /tmp/spec_prompts)
# env:   DEJA (build/bin/deja)  MODEL (../shared/models/codelm-15m-f16.gguf)
#        LLAMA_DIR: llama.cpp checkout with build/bin/llama-{cli,lookup,lookahead,server}
#          built outside this repository, never committed (default /tmp/llamacpp)
#        N (256)  R (2)  THREADS (2)  CTX (2048)  CTX_LA (4096: lookahead's KV needs room
#          for its 31 sequences)  PORT (18480: first llama-server port)
#        MODES: space-separated subset of the modes above (default: all available;
#          "server" stands for every server-ngram-* mode)
#        OUT: folder for the raw outputs and results.tsv (default: a temporary one)
#        SUMMARY_ONLY=1: run nothing, only summarize the runs already in OUT (e.g. of
#          an interrupted run; pass the same prompts for their manifest)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEJA=${DEJA:-$HERE/../build/bin/deja}
MODEL=${MODEL:-$HERE/../../shared/models/codelm-15m-f16.gguf}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llamacpp}
LB=$LLAMA_DIR/build/bin
N=${N:-256}; R=${R:-2}; THREADS=${THREADS:-2}; CTX=${CTX:-2048}; CTX_LA=${CTX_LA:-4096}
PORT=${PORT:-18480}
OUT=${OUT:-$(mktemp -d /tmp/dj_bench_spec.XXXXXX)}
MODES=${MODES:-deja deja-spec llama llama-lookup llama-lookahead server}
mkdir -p "$OUT"

if [ $# -eq 0 ]; then set -- /tmp/spec_prompts; fi
PROMPTS=()
for a in "$@"; do
    if [ -d "$a" ]; then PROMPTS+=("$a"/*.prompt.txt); else PROMPTS+=("$a"); fi
done
MANIFEST=$(dirname "${PROMPTS[0]}")/manifest.tsv

DJ=$(mktemp /tmp/dj_bench_spec_deja.XXXXXX)
cp "$DEJA" "$DJ"
chmod +x "$DJ"
SERVER_PIDS=()
cleanup() {
    for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -f "$DJ"
}
trap cleanup EXIT

# which modes run
want() { case " $MODES " in *" $1 "*) return 0;; esac; return 1; }
RUN=()
NOTES=()
want deja && RUN+=(deja)
if want deja-spec; then
    if "$DJ" run --help 2>&1 | grep -q -- '--spec'; then RUN+=(deja-spec)
    else NOTES+=("deja-spec skipped: this deja's 'run --help' has no --spec"); fi
fi
for m in llama:llama-cli llama-lookup:llama-lookup llama-lookahead:llama-lookahead; do
    mode=${m%%:*}; bin=${m#*:}
    if want "$mode"; then
        if [ -x "$LB/$bin" ]; then RUN+=("$mode"); else NOTES+=("$mode skipped: no $LB/$bin"); fi
    fi
done
if want server; then
    if [ -x "$LB/llama-server" ] && "$LB/llama-server" --help 2>&1 | grep -q -- '--spec-type'; then
        types=$("$LB/llama-server" --help 2>&1 | grep -A3 -- '--spec-type' | grep -o 'ngram-[a-z0-9-]*' | sort -u)
        p=$PORT
        for t in $types; do
            "$LB/llama-server" -m "$MODEL" -t "$THREADS" -c "$CTX" --port "$p" --spec-type "$t" \
                -np 1 --no-webui >"$OUT/server-$t.log" 2>&1 &
            SERVER_PIDS+=($!)
            echo "$t $p" >>"$OUT/servers.txt"
            RUN+=("server-$t"); p=$((p + 1))
        done
        for l in $(cut -d' ' -f2 "$OUT/servers.txt"); do
            for _ in $(seq 120); do
                curl -sf "http://127.0.0.1:$l/health" >/dev/null 2>&1 && break; sleep 0.5
            done
        done
    else
        NOTES+=("server ngram modes skipped: $LB/llama-server has no --spec-type")
    fi
fi
server_port() { awk -v t="$1" '$1 == t { print $2 }' "$OUT/servers.txt"; }

[ -x "$LB/llama-cli" ] && git -C "$LLAMA_DIR" log -1 --format='llama.cpp %H %cd' >"$OUT/version.txt" 2>/dev/null || true
{
    echo "modes: ${RUN[*]}"; for n in "${NOTES[@]}"; do echo "note: $n"; done
    echo "N $N  R $R  threads $THREADS  model $MODEL"; cat "$OUT/version.txt" 2>/dev/null || true
} | tee "$OUT/header.txt" >&2

run_mode() { # mode prompt rawprefix
    local mode=$1 f=$2 o=$3
    case $mode in
    deja)      "$DJ" run -m "$MODEL" -f "$f" -n "$N" --temp 0 -t "$THREADS" --ignore-eos --json >"$o.out" 2>"$o.err" ;;
    deja-spec) "$DJ" run -m "$MODEL" -f "$f" -n "$N" --temp 0 -t "$THREADS" --ignore-eos --json --spec >"$o.out" 2>"$o.err" ;;
    llama)     "$LB/llama-cli" -m "$MODEL" -f "$f" -n "$N" --temp 0 -t "$THREADS" --ignore-eos -c "$CTX" \
                   -no-cnv --no-display-prompt </dev/null >"$o.out" 2>"$o.err" ;;
    llama-lookup) "$LB/llama-lookup" -m "$MODEL" -f "$f" -n "$N" --temp 0 -t "$THREADS" --ignore-eos -c "$CTX" \
                   >"$o.out" 2>"$o.err" ;;
    llama-lookahead) "$LB/llama-lookahead" -m "$MODEL" -f "$f" -n "$N" --temp 0 -t "$THREADS" --ignore-eos \
                   -c "$CTX_LA" -np 16 >"$o.out" 2>"$o.err" ;;
    server-*)  python3 - "$f" "$(server_port "${mode#server-}")" "$N" >"$o.out" 2>"$o.err" <<'EOF'
import json, sys, urllib.request
prompt = open(sys.argv[1], encoding="utf-8").read()
body = {"prompt": prompt, "n_predict": int(sys.argv[3]), "temperature": 0, "top_k": 1,
        "ignore_eos": True, "cache_prompt": False, "seed": 0}
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[2]}/completion", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=600).read().decode())
EOF
    ;;
    esac || echo "$mode failed on $f (rc $?)" >&2
}

for f in "${PROMPTS[@]}"; do
    [ -n "${SUMMARY_ONLY:-}" ] && break
    name=$(basename "$f" .prompt.txt)
    mkdir -p "$OUT/$name"
    for ((r = 0; r < R; r++)); do
        if ((r % 2 == 0)); then order=("${RUN[@]}"); else order=(); for ((i = ${#RUN[@]} - 1; i >= 0; i--)); do order+=("${RUN[i]}"); done; fi
        for mode in "${order[@]}"; do
            echo "$name rep $r $mode" >&2
            run_mode "$mode" "$f" "$OUT/$name/$mode.$r"
        done
    done
done

python3 - "$OUT" "$MANIFEST" "$R" "${RUN[@]}" <<'EOF' | tee "$OUT/summary.txt"
import json, math, os, re, sys
out, manifest, R, modes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
cls = {}
if os.path.exists(manifest):
    for line in open(manifest).read().splitlines()[1:]:
        c = line.split("\t"); cls[c[0]] = c[3]

def rd(p):
    try: return open(p, encoding="utf-8", errors="replace").read()
    except OSError: return ""

def parse(mode, o):
    """(tok/s, drafted, accepted, text, ids) of one run, None where absent."""
    so, se = rd(o + ".out"), rd(o + ".err")
    if mode.startswith("deja"):
        try: d = json.loads(so)
        except ValueError: return None
        tps = d["n_gen"] / d["t_decode_ms"] * 1e3 if d.get("t_decode_ms") else None
        sp, dr, ac = d.get("spec"), d.get("n_drafted"), None
        if isinstance(sp, dict):
            def tot(k):
                if isinstance(sp.get(k), (int, float)): return sp[k]
                v = [x[k] for x in sp.values() if isinstance(x, dict) and isinstance(x.get(k), (int, float))]
                return sum(v) if v else None
            dr = tot("n_drafted") or tot("drafted") or dr
            ac = tot("n_accepted") or tot("accepted")
        return tps, dr, ac, d.get("text"), d.get("ids")
    if mode == "llama":
        m = re.search(r"^llama_perf_context_print:\s+eval time =\s+([\d.]+) ms /\s+(\d+) runs", se, re.M)
        return (int(m[2]) / float(m[1]) * 1e3 if m else None), None, None, so, None
    if mode in ("llama-lookup", "llama-lookahead"):
        m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", se)
        tps = int(m[1]) / float(m[2]) if m else None
        g = lambda k: (int(re.search(rf"^{k}\s*=\s*(\d+)", se, re.M)[1]) if re.search(rf"^{k}\s*=\s*(\d+)", se, re.M) else None)
        if mode == "llama-lookup": dr, ac = g("n_drafted"), g("n_accept")
        else: dr, ac = None, g("n_accept")
        text = re.sub(r" - draft candidate: token=-?\d+\n", "", so)
        return tps, dr, ac, text, None
    if mode.startswith("server-"):
        try: d = json.loads(so)
        except ValueError: return None
        t = d.get("timings", {})
        return t.get("predicted_per_second"), t.get("draft_n"), t.get("draft_n_accepted"), d.get("content"), None
    return None

def gen_of_echo(text, prompt):
    """The generated part of llama-lookup's stdout: it echoes the prompt's tokens first."""
    t = text[2:] if text.startswith("\n\n") else text
    for bos in ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<s>"):
        if t.startswith(bos): t = t[len(bos):]
    return t[len(prompt):] if t.startswith(prompt) else None

def gm(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None

names = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))
               and all(os.path.exists(os.path.join(out, d, f"{m}.{R - 1}.err")) for m in modes))
rows, res, checks = [], {}, []
raw = open(os.path.join(out, "results.tsv"), "w")
raw.write("prompt\tclass\tmode\trep\ttok_s\tdrafted\taccepted\n")
for name in names:
    prompt = rd(os.path.join(os.path.dirname(manifest), name + ".prompt.txt"))
    res[name] = {}
    for mode in modes:
        runs = [parse(mode, os.path.join(out, name, f"{mode}.{r}")) for r in range(R)]
        runs = [x for x in runs if x and x[0]]
        for r, x in enumerate(runs):
            raw.write(f"{name}\t{cls.get(name, '?')}\t{mode}\t{r}\t{x[0]:.2f}\t{x[1]}\t{x[2]}\n")
        if runs:
            best = max(x[0] for x in runs)
            med = sorted(x[0] for x in runs)[len(runs) // 2] if len(runs) % 2 else sum(sorted(x[0] for x in runs)[len(runs) // 2 - 1:len(runs) // 2 + 1]) / 2
            res[name][mode] = dict(best=best, med=med, dr=runs[0][1], ac=runs[0][2], text=runs[0][3], ids=runs[0][4])
    base = res[name].get("llama")
    for mode in modes:
        x = res[name].get(mode)
        if not x or not base: continue
        if mode == "llama-lookup" or mode == "llama-lookahead":
            g = gen_of_echo(x["text"] or "", prompt)
            # llama-cli prints a newline before the generated text; compare without edge whitespace
            ok = None if g is None else g.lstrip().startswith(base["text"].strip())
            x["eq"] = ok
        elif mode.startswith("server-"):
            x["eq"] = (x["text"] or "").lstrip().startswith(base["text"].strip())
    if "deja-spec" in res[name] and "deja" in res[name]:
        res[name]["deja-spec"]["eq"] = res[name]["deja-spec"]["ids"] == res[name]["deja"]["ids"]
    if "deja" in res[name] and base:
        a, b = (res[name]["deja"]["text"] or "").lstrip(), (base["text"] or "").strip()
        n = min(len(a), len(b))
        res[name]["deja"]["eq_llama"] = a[:n] == b[:n]

print("tok/s = best of %d runs (decode only); acc = accepted/drafted of the first run; eq = output check" % R)
for name in names:
    print(f"\n{name} [{cls.get(name, '?')}]")
    for mode in modes:
        x = res[name].get(mode)
        if not x: print(f"  {mode:18s} (no result)"); continue
        acc = ""
        if x["ac"] is not None and x["dr"] is not None: acc = f"acc {x['ac']}/{x['dr']}"
        elif x["ac"] is not None: acc = f"acc {x['ac']}"
        elif x["dr"]: acc = f"drafted {x['dr']}"
        eq = ""
        if "eq" in x: eq = {True: "eq llama" if not mode.startswith("deja") else "ids eq deja", False: "DIFFERS", None: "eq n/a"}[x["eq"]]
        if "eq_llama" in x: eq = "text eq llama" if x["eq_llama"] else "text differs from llama"
        print(f"  {mode:18s} {x['best']:8.1f} tok/s (median {x['med']:7.1f})  {acc:16s} {eq}")

print("\nsummary: geometric mean over prompts of best-of-R tok/s, and of the per-prompt ratios")
for group in ("edit", "other", "all"):
    ps = [n for n in names if group == "all" or cls.get(n) == group]
    if not ps: continue
    print(f"\n[{group}] {len(ps)} prompts")
    print(f"  {'mode':18s} {'tok/s':>8s} {'/llama':>8s} {'/deja':>8s}")
    for mode in modes:
        v = [res[n][mode]["best"] for n in ps if mode in res[n]]
        rl = [res[n][mode]["best"] / res[n]["llama"]["best"] for n in ps if mode in res[n] and "llama" in res[n]]
        rd_ = [res[n][mode]["best"] / res[n]["deja"]["best"] for n in ps if mode in res[n] and "deja" in res[n]]
        f = lambda z: f"{z:8.3f}" if z else f"{'-':>8s}"
        print(f"  {mode:18s} {f(gm(v))} {f(gm(rl))} {f(gm(rd_))}  (n={len(v)})")
for mode in modes:
    e = [res[n][mode].get("eq") for n in names if mode in res[n] and "eq" in res[n][mode]]
    if e: print(f"check {mode}: output equal on {sum(1 for z in e if z)}/{len(e)} prompts ({sum(1 for z in e if z is None)} not checkable)")
e = [res[n]["deja"].get("eq_llama") for n in names if "deja" in res[n] and "eq_llama" in res[n]["deja"]]
if e: print(f"info: deja plain text equals llama plain text (common prefix) on {sum(e)}/{len(e)} prompts")
EOF
echo "raw outputs and results.tsv in $OUT" >&2
