#!/usr/bin/env python3
"""Server overhead: tiny completions against deja serve and llama-server, same model and threads.

Each server is started by this script and used for one pass; passes alternate (deja, peer,
deja, peer for --rounds 2). A pass: for 1 and for 16 concurrent clients (each a thread with
its own keep-alive connection), --requests POST /v1/completions of 1 generated token on a short
prompt (greedy; prompts share a prefix and differ in their last words, so each request computes
a few tokens); reported: requests/s and p50 / p99 latency. Then the
streaming overhead per token: the same 128-token request (ignore_eos) streamed and not streamed,
--stream-reps times each, (median stream time - median json time) / 128.
The default model is the 260K-parameter stories260K, so the model costs little and the HTTP,
JSON and scheduling path is what is measured.

usage: bench/http_overhead.py --peer /tmp/llamacpp/build/bin/llama-server [--model M] [-t 2]
       bench/http_overhead.py --peer OLD/build/bin/deja --peer-is-deja   (an older deja as the peer)
       [--requests 400] [--rounds 2]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_replay import free_port, root, shared, wait_up  # noqa: E402


def post(conn, path, body):
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
    return time.perf_counter() - t0, data


def load(port, clients, n_req):
    lat, lock = [], threading.Lock()
    per = n_req // clients

    def worker(k):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        mine = []
        for i in range(per):
            body = {"prompt": f"Once upon a time there was a little dog number {k * per + i}.", "max_tokens": 1,
                    "temperature": 0, "cache_prompt": True}
            mine.append(post(conn, "/v1/completions", body)[0])
        conn.close()
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    th = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {"rps": len(lat) / wall, "p50": lat[len(lat) // 2] * 1000, "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000}


def stream_overhead(port, reps, n=128):
    # a connection per request: llama-server closes the connection after a stream
    body = {"prompt": "Once upon a time", "max_tokens": n, "temperature": 0, "ignore_eos": True, "n_predict": n}
    tj, ts = [], []
    for _ in range(reps):
        for stream, acc in ((False, tj), (True, ts)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            acc.append(post(conn, "/v1/completions", dict(body, stream=stream))[0])
            conn.close()
    return (statistics.median(ts) - statistics.median(tj)) / n * 1e6, statistics.median(tj) / n * 1e6


def run_pass(kind, args):
    port = free_port()
    if kind == "deja" or args.peer_is_deja:
        cmd = [args.deja if kind == "deja" else args.peer, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads), "-c", "512",
               "--parallel", "16", "--queue-max", "1000"]
    else:
        cmd = [args.peer, "-m", args.model, "--port", str(port), "-t", str(args.threads), "-c", str(512 * 16),
               "-np", "16"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, proc)
        out = {c: load(port, c, args.requests) for c in (1, 16)}
        out["stream_us"], out["json_us"] = stream_overhead(port, args.stream_reps)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deja", default=os.path.join(root, "build/bin/deja"))
    ap.add_argument("--peer", required=True)
    ap.add_argument("--peer-is-deja", action="store_true",
                    help="the peer is another deja binary (an older build): a regression check")
    ap.add_argument("--model", default=os.path.join(shared, "models/stories260K.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--stream-reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    res = {"deja": [], "peer": []}
    for r in range(args.rounds):
        for kind in ("deja", "peer"):
            o = run_pass(kind, args)
            res[kind].append(o)
            print(f"round {r} {kind:5s}: 1 client {o[1]['rps']:7.1f} req/s p50 {o[1]['p50']:6.2f} ms p99 {o[1]['p99']:6.2f} ms"
                  f" | 16 clients {o[16]['rps']:7.1f} req/s p50 {o[16]['p50']:6.2f} ms p99 {o[16]['p99']:6.2f} ms"
                  f" | stream overhead {o['stream_us']:6.1f} us/token (json {o['json_us']:6.1f} us/token)", flush=True)
    for c in (1, 16):
        d = statistics.median(x[c]["rps"] for x in res["deja"])
        p = statistics.median(x[c]["rps"] for x in res["peer"])
        print(f"{c:2d} clients: deja {d:.1f} req/s, llama-server {p:.1f} req/s, ratio {d / p:.2f}x")


if __name__ == "__main__":
    main()
