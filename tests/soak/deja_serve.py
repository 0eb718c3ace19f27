"""deja_serve.py — `deja serve` for the Python soaks and benchmarks (tests/soak/*.py,
bench/needle.py): start(deja, args, env) runs `deja serve ARGS --port 0` and returns the
process and the port it printed; its log is drained on a thread so the server never blocks
writing it.  Exits the script with a message when the server does not start."""
import os
import subprocess
import sys
import threading


def start(deja, args, env=None, who="deja_serve"):
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.Popen([deja, "serve", "--port", "0"] + list(args), stderr=subprocess.PIPE, text=True, env=full)
    port = None
    for line in p.stderr:
        if "ready on http://127.0.0.1:" in line:
            port = int(line.rsplit(":", 1)[1])
            break
    if port is None:
        sys.exit(f"{who}: the server did not start")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port
