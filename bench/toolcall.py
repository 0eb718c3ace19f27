#!/usr/bin/env python3
"""Tool-call generation on codelm with the tools of real agent traces: what schema-aware
skipping (LLAMA_OPT_SCHEMA_SKIP_ENABLED) saves, and what constraining costs.

For each trace with a <tools> block: its OpenAI-style tools array goes to
`deja run --tools F --tool-choice required` (Hermes <tool_call> format); the prompt is a
short ChatML conversation (the tool names in the system message, the trace's first user
message) so that it fits codelm's 2048-token context.  Every (trace, seed) runs three
ways, interleaved: grammar with skipping off, grammar with skipping on, and unconstrained
(no grammar, same prompt and seed).  Reported per mode: tokens generated, forward passes
while generating, tokens emitted without a pass (forced) or accepted as drafts, decode
wall time; and whether the outputs of off and on are identical (they must be).

usage: bench/toolcall.py [--deja build/bin/deja] [--model M] [--seeds 1,2,3] [-n 192]
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.path.join(os.path.dirname(root), "shared")


def tools_of(trace):
    with open(trace) as f:
        first = json.loads(f.readline())
    text = first["text"]
    blocks = re.findall(r"<tools>\n(.*?)\n</tools>", text, re.S)
    if not blocks:
        return None, None
    tools = [json.loads(line) for line in blocks[-1].split("\n") if line.strip()]
    m = re.search(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text, re.S)
    user = m.group(1) if m else "Please help."
    return tools, user[:600]


def run(deja, model, tools_file, prompt, seed, n, mode):
    cmd = [deja, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0.7", "--seed", str(seed), "--json"]
    env = dict(os.environ)
    if mode != "free":
        cmd += ["--tools", tools_file, "--tool-choice", "required"]
        env["LLAMA_OPT_SCHEMA_SKIP_ENABLED"] = "1" if mode == "on" else "0"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"deja run failed ({mode}): {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deja", default=os.path.join(root, "build/bin/deja"))
    ap.add_argument("--model", default=os.path.join(shared, "models/codelm-15m-f16.gguf"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("-n", type=int, default=192)
    ap.add_argument("--traces", default="tau_airline__7,tau_airline__5,"
                    "openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_0,"
                    "mini_swe_agent__deepseek_chat_test_1-100__django__django-11039")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = []
    tmp = tempfile.mkdtemp(prefix="deja-toolcall-")
    for name in a.traces.split(","):
        path = os.path.join(shared, "traces", name + ".jsonl")
        tools, user = tools_of(path)
        if not tools:
            print(f"{name}: no <tools> block, skipped", file=sys.stderr)
            continue
        tf = os.path.join(tmp, name + ".tools.json")
        with open(tf, "w") as f:
            json.dump(tools, f)
        names = ", ".join(t["function"]["name"] for t in tools)
        prompt = (f"<|im_start|>system\nYou are an agent. Call one of these tools: {names}.<|im_end|>\n"
                  f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
        for seed in seeds:
            r = {m: run(a.deja, a.model, tf, prompt, seed, a.n, m) for m in ("off", "on", "free")}
            same = r["off"]["ids"] == r["on"]["ids"] and r["off"]["text"] == r["on"]["text"]
            rows.append((name, seed, r, same))
            print(f"{name[:40]:<40} seed {seed}: " + "  ".join(
                f"{m}: {r[m]['n_gen']} tok {r[m]['n_forward_passes']} passes {r[m]['t_decode_ms']:.0f} ms"
                for m in ("off", "on", "free")) + f"  skipped {r['on']['schema_tokens_skipped']}"
                f" drafts {r['on']['schema_tokens_inferred']}/{r['on']['n_drafted']}  identical {same}")
    if not rows:
        sys.exit("no trace with tools")
    print()
    print(f"{'mode':<28}{'tokens':>8}{'passes':>8}{'passes/tok':>11}{'decode ms':>11}{'ms/tok':>8}")
    for m, label in (("off", "grammar, skipping off"), ("on", "grammar, skipping on"), ("free", "unconstrained")):
        tok = sum(r[m]["n_gen"] for _, _, r, _ in rows)
        fw = sum(r[m]["n_forward_passes"] for _, _, r, _ in rows)
        ms = sum(r[m]["t_decode_ms"] for _, _, r, _ in rows)
        print(f"{label:<28}{tok:>8}{fw:>8}{fw / tok:>11.3f}{ms:>11.0f}{ms / tok:>8.2f}")
    sk = sum(r["on"]["schema_tokens_skipped"] for _, _, r, _ in rows)
    inf = sum(r["on"]["schema_tokens_inferred"] for _, _, r, _ in rows)
    dr = sum(r["on"]["n_drafted"] for _, _, r, _ in rows)
    tot = sum(r["on"]["schema_tokens_total"] for _, _, r, _ in rows)
    ratio = [r["off"]["t_decode_ms"] / r["on"]["t_decode_ms"] for _, _, r, _ in rows if r["on"]["t_decode_ms"] > 0]
    print(f"\nskipping on: {sk} of {tot} tokens forced (no pass), {inf} drafts accepted of {dr} drafted "
          f"({100.0 * (sk + inf) / tot:.1f} % of the tokens without a pass of their own)")
    print(f"decode time off/on per run: median {statistics.median(ratio):.2f}x (min {min(ratio):.2f}, max {max(ratio):.2f})")
    print(f"outputs identical with skipping on and off: {sum(1 for *_, s in rows if s)} of {len(rows)}")
    if not all(s for *_, s in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
