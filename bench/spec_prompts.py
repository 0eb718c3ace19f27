#!/usr/bin/env python3
"""bench/spec_prompts.py — prompt files for the speculative-decoding benchmark (bench/spec.sh).

Reconstructs every trace's prompts (../shared/traces/README.md: prompt of turn k =
prompt of turn k-1 [:keep] + text, in code points) and writes, for two turns per trace
(the middle and the last of the turns with a recorded response), a prompt that fits
codelm-15m (training context 2048): the prompt's last N characters, N shrunk until the
prompt is at most MAX_TOKENS tokens (counted with `deja tokenize`), started at a
<|im_start|> boundary when one lies in the first quarter of the cut, and ending with
<|im_start|>assistant\\n so the model writes the assistant turn.  The turn's recorded
response goes next to it (for teacher-forced simulations).

Each trace is tagged edit-heavy or other by measuring how much of its recorded responses
echo the prompt: the fraction of the responses' whitespace-token 8-grams that occur in
the (full) prompt of the same turn, over all the trace's turns with a response, after
undoing JSON string escapes in both (code quoted in tool-call arguments); edit-heavy when
that fraction >= --edit-threshold (0.15: on the 27 traces with responses the fractions
are <= 0.097 or >= 0.162).  The character 32-gram fraction is reported too.

usage: bench/spec_prompts.py [--traces DIR] [--out DIR] [--model GGUF] [--deja BIN]
                             [--max-tokens N] [--edit-threshold F] [TRACE.jsonl ...]
writes OUT/<session>__t<turn>.prompt.txt, OUT/<session>__t<turn>.response.txt,
       OUT/manifest.tsv (one line per prompt) and OUT/traces.tsv (one line per trace).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

IM_START = "<|im_start|>"
ASSIST = "<|im_start|>assistant\n"


def prompts_of(path):
    """[(turn, prompt, response)] for every line of a trace file."""
    out, p = [], ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            x = json.loads(line)
            p = p[: x["keep"]] + x["text"]
            if "n_chars" in x and len(p) != x["n_chars"]:
                sys.exit(f"{path}: turn {x['turn']}: reconstructed {len(p)} chars, n_chars {x['n_chars']}")
            out.append((x["turn"], p, x.get("response")))
    return out


def ngrams(seq, n):
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]


def unescape(s):
    """Undo JSON string escapes, so code quoted in a tool call's arguments matches the
    same code shown raw in a tool result."""
    return s.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")


def echo_words(prompt, response, n=8):
    """(matched, total) whitespace-token n-grams of the (JSON-unescaped) response that occur
    in the (JSON-unescaped) prompt."""
    pw = set(ngrams(unescape(prompt).split(), n))
    rw = ngrams(unescape(response).split(), n)
    return sum(1 for g in rw if g in pw), len(rw)


def echo(prompt, response, n=8, nc=32):
    """echo_words, and (matched, total) character nc-grams of the response that occur in
    the prompt, both JSON-unescaped."""
    mw, tw = echo_words(prompt, response, n)
    prompt, response = unescape(prompt), unescape(response)
    pc = {prompt[i:i + nc] for i in range(len(prompt) - nc + 1)}
    rc = [response[i:i + nc] for i in range(len(response) - nc + 1)]
    mc = sum(1 for g in rc if g in pc)
    return mw, tw, mc, len(rc)


class Counter:
    def __init__(self, deja, model, tmp):
        self.deja, self.model, self.tmp = deja, model, tmp

    def __call__(self, text):
        if not self.deja:
            return (len(text) + 2) // 3  # no tokenizer: ~3 characters a token on this data
        with open(self.tmp, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([self.deja, "tokenize", "-m", self.model, "-f", self.tmp],
                           capture_output=True, text=True, check=True)
        return len(r.stdout.split())


def cut(prompt, max_tokens, count):
    """The prompt's tail that fits max_tokens, starting at <|im_start|> if one is near."""
    if not prompt.endswith(ASSIST):
        prompt = prompt + ASSIST
    n = min(len(prompt), 3 * max_tokens)
    while True:
        tail = prompt[-n:]
        if n < len(prompt):
            i = tail.find(IM_START, 0, max(len(tail) // 4, 1))
            if i > 0:
                tail = tail[i:]
        k = count(tail)
        if k <= max_tokens or n < 64:
            return tail, k
        n = int(n * max_tokens / k * 0.97)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--traces-dir", default=os.path.join(here, "..", "..", "shared", "traces"))
    ap.add_argument("--out", default="/tmp/spec_prompts")
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "shared", "models", "codelm-15m-f16.gguf"))
    ap.add_argument("--deja", default=os.environ.get("DEJA", os.path.join(here, "..", "build", "bin", "deja")))
    ap.add_argument("--max-tokens", type=int, default=1550)
    ap.add_argument("--edit-threshold", type=float, default=0.15)
    a = ap.parse_args()
    traces = a.traces or sorted(glob.glob(os.path.join(a.traces_dir, "*.jsonl")))
    deja = a.deja if os.access(a.deja, os.X_OK) else None
    if not deja:
        print(f"note: {a.deja} not found; token counts estimated as chars/3", file=sys.stderr)
    os.makedirs(a.out, exist_ok=True)
    count = Counter(deja, a.model, os.path.join(a.out, ".count.tmp"))
    man = open(os.path.join(a.out, "manifest.tsv"), "w")
    man.write("name\tsession\tturn\tclass\ttrace_echo_w8\tturn_echo_w8_cut\tn_chars\tn_tokens\n")
    tr = open(os.path.join(a.out, "traces.tsv"), "w")
    tr.write("session\tn_resp\techo_w8\techo_c32\tclass\n")
    for path in traces:
        session = os.path.basename(path)[: -len(".jsonl")]
        turns = [t for t in prompts_of(path) if t[2]]
        if not turns:
            print(f"{session}: no recorded responses, skipped", file=sys.stderr)
            continue
        mw = tw = mc = tc = 0
        for _, p, r in turns:
            a1, b1, c1, d1 = echo(p, r)
            mw, tw, mc, tc = mw + a1, tw + b1, mc + c1, tc + d1
        fw, fc = mw / max(tw, 1), mc / max(tc, 1)
        cls = "edit" if fw >= a.edit_threshold else "other"
        tr.write(f"{session}\t{len(turns)}\t{fw:.3f}\t{fc:.3f}\t{cls}\n")
        pick = sorted({len(turns) // 2, len(turns) - 1}) if len(turns) > 1 else [0]
        for i in pick:
            turn, p, r = turns[i]
            text, k = cut(p, a.max_tokens, count)
            name = f"{session}__t{turn}"
            with open(os.path.join(a.out, name + ".prompt.txt"), "w", encoding="utf-8") as f:
                f.write(text)
            with open(os.path.join(a.out, name + ".response.txt"), "w", encoding="utf-8") as f:
                f.write(r)
            m, t, _, _ = echo(text, r)
            man.write(f"{name}\t{session}\t{turn}\t{cls}\t{fw:.3f}\t{m / max(t, 1):.3f}\t{len(text)}\t{k}\n")
        print(f"{session}: {len(turns)} responses, echo w8 {fw:.3f} c32 {fc:.3f} -> {cls}", file=sys.stderr)
    man.close()
    tr.close()
    try:
        os.remove(os.path.join(a.out, ".count.tmp"))
    except OSError:
        pass


if __name__ == "__main__":
    main()
