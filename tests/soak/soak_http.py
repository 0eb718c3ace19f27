#!/usr/bin/env python3
"""soak_http.py DEJA MODEL [SLOW] [SECONDS] — `make soak-http`: a normal client's latency
while SLOW (2,000) connections trickle request heads at the server, one byte a second
each, reconnecting whenever the server closes one (so the pressure never lets up).

Phases alternate (quiet, attacked, quiet, attacked, ...; SECONDS each) so that the
machine's drift lands on both sides; the normal client sends the same small
/v1/completions request back to back in every phase.  Prints, per phase and in
all, requests done, failures, p50 / p99 / max latency, and the attacked/quiet
ratio of the medians.  Exits 1 if a normal request failed or took over 1 s.
The server runs with its defaults but --conn-max 1024 (the default) and
--header-timeout 10: the slow connections outnumber the budget two to one.
"""
import json
import os
import resource
import selectors
import socket
import sys
import threading
import time

import deja_serve

deja, model = sys.argv[1], sys.argv[2]
slow_n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
phase_s = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
if hard < slow_n + 64:
    sys.exit(f"soak_http: {hard} descriptors allowed, {slow_n + 64} needed")

srv, port = deja_serve.start(deja, ["-m", model, "--kv-budget", "64"], who="soak_http")

BODY = json.dumps({"prompt": "Once upon a time", "max_tokens": 8}).encode()
REQ = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY


def one_request(sock):
    t0 = time.monotonic()
    sock.sendall(REQ)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = int([h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0])
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        rest += chunk
    status = int(head.split(b" ")[1])
    return status, time.monotonic() - t0


def normal_phase(seconds):
    lat, fails = [], 0
    end = time.monotonic() + seconds
    sock = None
    while time.monotonic() < end:
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            status, dt = one_request(sock)
            if status != 200:
                fails += 1
            lat.append(dt)
        except OSError:
            fails += 1
            sock = None
    if sock:
        sock.close()
    return lat, fails


class Slowloris:
    HEAD = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000

    def __init__(self, n):
        self.n, self.stop, self.reconnects = n, False, 0
        self.sel = selectors.DefaultSelector()
        self.pos = {}

    def open_one(self):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        self.pos[s] = 0
        self.sel.register(s, selectors.EVENT_READ)

    def drop(self, s):
        self.sel.unregister(s)
        del self.pos[s]
        s.close()
        self.reconnects += 1

    def run(self):
        for _ in range(self.n):
            self.open_one()
        while not self.stop:
            for key, _ in self.sel.select(timeout=0):  # closed by the server: reopen
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.drop(s)
                    self.open_one()
            for s in list(self.pos):  # a byte each
                try:
                    s.send(self.HEAD[self.pos[s] % len(self.HEAD):][:1])
                    self.pos[s] += 1
                except (BlockingIOError, OSError):
                    pass
            time.sleep(1.0)
        for s in list(self.pos):
            self.sel.unregister(s)
            s.close()


def stats(lat):
    if not lat:
        return "no requests"
    lat = sorted(lat)
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
    return f"{len(lat)} requests, p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, max {lat[-1] * 1000:.1f} ms"


quiet, attacked, failures = [], [], 0
for rnd in range(3):
    lat, f = normal_phase(phase_s)
    quiet += lat
    failures += f
    print(f"round {rnd + 1} quiet:    {stats(lat)}, {f} failed", flush=True)
    sl = Slowloris(slow_n)
    th = threading.Thread(target=sl.run)
    th.start()
    time.sleep(2.0)  # the slow connections are open and trickling
    lat, f = normal_phase(phase_s)
    attacked += lat
    failures += f
    sl.stop = True
    th.join()
    print(f"round {rnd + 1} attacked: {stats(lat)}, {f} failed ({slow_n} slow connections, "
          f"{sl.reconnects} reopened after the server closed them)", flush=True)

med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
print(f"quiet:    {stats(quiet)}")
print(f"attacked: {stats(attacked)}")
print(f"median attacked/quiet: {med(attacked) / med(quiet):.2f}x; failures: {failures}")
srv.terminate()
srv.wait()
worst = max(attacked + quiet) if attacked + quiet else 99
sys.exit(1 if failures or worst > 1.0 else 0)
