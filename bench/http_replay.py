#!/usr/bin/env python3
"""Agent sessions over HTTP: deja serve against llama-server, same model, same threads.

Replays ../shared/traces through POST /v1/completions with the rendered prompts (prompt of
turn k = prompt of turn k-1 cut to `keep` characters + `text`), several sessions at once (one
client thread each, turns in order), a few generated tokens per turn, greedy. Each server is
started by this script, used for one pass over all sessions, and stopped; the passes alternate
(deja, peer, deja, peer for --rounds 2). Reported per server: prompt tokens evaluated (deja:
x_deja.computed; llama-server: timings.prompt_n), TTFT p50/p90 (first streamed text), total
wall time, and the ratios.

usage: bench/http_replay.py --peer /tmp/llamacpp/build/bin/llama-server [--model M] [-t 2]
       [--traces a,b,c,d] [--max-chars 24000] [-n 8] [--rounds 1]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.path.join(os.path.dirname(root), "shared")


def prompts_of(trace, max_chars):
    out, prev = [], ""
    with open(trace) as f:
        for line in f:
            t = json.loads(line)
            p = prev[: t["keep"]] + t["text"]
            if len(p) > max_chars:
                break
            out.append(p)
            prev = p
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_up(port, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.2)
    sys.exit("server did not come up")


def one_turn(port, prompt, n):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    ttft, evaluated, text = None, None, ""
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            for ch in j.get("choices") or []:
                if ch.get("text") and ttft is None:
                    ttft = time.time() - t0
                text += ch.get("text") or ""
            if "x_deja" in j:
                evaluated = j["x_deja"]["computed"]
            if "timings" in j:
                evaluated = j["timings"].get("prompt_n", evaluated)
    return (ttft if ttft is not None else time.time() - t0), evaluated, text, time.time() - t0


def run_pass(kind, args, sessions):
    port = free_port()
    if kind == "deja":
        cmd = [args.deja, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
               "-c", str(args.ctx), "-n", str(args.n)]
    else:
        cmd = [args.peer, "-m", args.model, "--port", str(port), "-t", str(args.threads), "-c",
               str(args.ctx * args.parallel), "-np", str(args.parallel)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, proc)
        results = {}
        texts = {}

        def worker(name, prompts):
            res, tx = [], []
            for p in prompts:
                ttft, ev, text, total = one_turn(port, p, args.n)
                res.append((ttft, ev, total))
                tx.append(text)
            results[name] = res
            texts[name] = tx

        t0 = time.time()
        th = [threading.Thread(target=worker, args=(k, v)) for k, v in sessions.items()]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.time() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    ttfts = [x[0] for r in results.values() for x in r]
    ev = [x[1] for r in results.values() for x in r]
    return {"wall": wall, "ttft": ttfts, "evaluated": sum(e for e in ev if e is not None),
            "missing": sum(1 for e in ev if e is None), "turns": len(ttfts), "texts": texts, "per_turn": results}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deja", default=os.path.join(root, "build/bin/deja"))
    ap.add_argument("--peer", required=True)
    ap.add_argument("--model", default=os.path.join(shared, "models/codelm-15m-f16.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-chars", type=int, default=24000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--per-turn", action="store_true", help="print a row per turn (the first round)")
    ap.add_argument("--traces", default="tau_airline__7,openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_1,"
                    "mini_swe_agent__deepseek_chat_test_1-100__django__django-11039,claude_code__cctrace_f33cdb42")
    a = ap.parse_args()
    sessions = {}
    for name in a.traces.split(","):
        sessions[name] = prompts_of(os.path.join(shared, "traces", name + ".jsonl"), a.max_chars)
    n_turns = sum(len(v) for v in sessions.values())
    n_chars = sum(len(p) for v in sessions.values() for p in v)
    print(f"{len(sessions)} sessions, {n_turns} turns, {n_chars} prompt characters, -n {a.n}, -t {a.threads}, "
          f"{a.parallel} at once; load {os.getloadavg()[0]:.2f}")
    out = {"deja": [], "llama-server": []}
    for r in range(a.rounds):
        for kind in ("deja", "llama-server"):
            res = run_pass(kind, a, sessions)
            out[kind].append(res)
            t = sorted(res["ttft"])
            print(f"round {r + 1} {kind:<13} wall {res['wall']:7.1f} s  prompt tokens evaluated {res['evaluated']:>8}"
                  f"{' (' + str(res['missing']) + ' turns unreported)' if res['missing'] else ''}  TTFT p50 "
                  f"{1000 * statistics.median(t):7.0f} ms  p90 {1000 * t[int(0.9 * (len(t) - 1))]:7.0f} ms", flush=True)
    d, p = out["deja"], out["llama-server"]
    if a.per_turn:  # the first round's turns: prompt tokens evaluated and request time, each server
        print("\n| session | turn | prompt chars | deja evaluated | deja s | llama-server evaluated | llama-server s |")
        print("|---|---|---|---|---|---|---|")
        for name, prompts in sessions.items():
            for k, pr in enumerate(prompts):
                x, y = d[0]["per_turn"][name][k], p[0]["per_turn"][name][k]
                fmt = lambda e: "-" if e is None else str(e)
                print(f"| {name[:28]} | {k} | {len(pr)} | {fmt(x[1])} | {x[2]:.1f} | {fmt(y[1])} | {y[2]:.1f} |")
    wd = statistics.median(x["wall"] for x in d)
    wp = statistics.median(x["wall"] for x in p)
    ed = statistics.median(x["evaluated"] for x in d)
    ep = statistics.median(x["evaluated"] for x in p)
    print(f"\nllama-server / deja: wall {wp / wd:.2f}x, prompt tokens evaluated {ep / ed if ed else float('nan'):.2f}x")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
