#!/usr/bin/env python3
"""needle.py DEJA MODEL [TRIALS] — the retrieval check of issue 33 item 5: does an answer
still copy a needle (an error line) from an old tool result when Tier-2 attention pruning
is on?

Per trial, one agent transcript as text over /v1/completions:
  - the user asks to run the tests; the agent's command; the tool result (~50 lines of test
    log, one of them the needle `ERROR: test_<name> failed: <Kind>Error code <n>`);
  - FILLER more turns, each a file dump (~50 lines) the agent read;
  - the user asks for the failing line and the transcript ends in "ERROR:"; 24 tokens are
    generated greedily; a hit is the needle's whole line.
Every turn before the question is sent as its own request (max_tokens 1), as an agent would,
so that the pruning policy runs at each turn's end.  Two servers answer the same
conversations: exact (Tier 2 off) and pruned (POLICY env, default h2o with BUDGET 1024).
Prints, per server, the trials whose answer contains the needle, and the tokens skipped.

env: FILLER (6)  POLICY (h2o)  BUDGET (1024)  THRESHOLD (0.001)  WINDOW (10)  CTX (8192)
"""
import json
import os
import random
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "soak"))
import deja_serve  # noqa: E402

deja, model = sys.argv[1], sys.argv[2]
trials = int(sys.argv[3]) if len(sys.argv) > 3 else 20
FILLER = int(os.environ.get("FILLER", "6"))
CTX = os.environ.get("CTX", "8192")


def start(env_extra):
    return deja_serve.start(deja, ["-m", model, "-c", CTX, "-t", "2", "--no-spec"], env_extra, "needle")


def chat(port, prompt, n):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


WORDS = ("parse load config value index result path error import client server cache token "
         "buffer stream reader writer handler request response session").split()


def log_lines(rng, needle, n=50):
    lines = [f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(WORDS)}_{rng.choice(WORDS)} PASSED"
             for _ in range(n)]
    lines.insert(rng.randrange(5, n - 5), needle)
    return "\n".join(lines)


def file_dump(rng, n=50):
    return "\n".join(f"    {rng.choice(WORDS)}_{rng.randint(0, 99)} = {rng.choice(WORDS)}({rng.choice(WORDS)})"
                     for _ in range(n))


def conversation(rng):
    """The transcript as plain text (a base model copies by induction; the chat templates of the
    small test models do not make them answer better): the turns' prompts, then the question,
    which ends in "ERROR:" so that the answer is the rest of the line."""
    name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
    needle = f"ERROR: test_{name} failed: {rng.choice(['Value', 'Key', 'Type', 'Index'])}Error code {rng.randint(100, 999)}"
    t = ("System: you are a coding agent.\nUser: run the test suite and tell me what fails.\n"
         "Agent: running pytest -q\nTool output:\n" + log_lines(rng, needle) + "\n")
    turns = [t]
    for i in range(FILLER):
        t += f"Agent: let me read src/module_{i}.py\nTool output:\n" + file_dump(rng) + "\n"
        turns.append(t)
    t += "User: copy the failing line of the test output.\nAgent: the failing line was\nERROR:"
    return turns, t, needle

policy = {"LLAMA_OPT_ATTN_PRUNE_ENABLED": "1", "LLAMA_OPT_ATTN_PRUNE_POLICY": os.environ.get("POLICY", "h2o"),
          "LLAMA_OPT_ATTN_PRUNE_BUDGET": os.environ.get("BUDGET", "1024"),
          "LLAMA_OPT_ATTN_PRUNE_THRESHOLD": os.environ.get("THRESHOLD", "0.001"),
          "LLAMA_OPT_ATTN_PRUNE_WINDOW": os.environ.get("WINDOW", "10")}
servers = {"exact": start({}), "pruned": start(policy)}
hits = {k: 0 for k in servers}
skipped = 0
prompt_tok = 0
rng = random.Random(7)
for t in range(trials):
    turns, final, needle = conversation(rng)
    for k, (_, port) in servers.items():
        for msgs in turns:
            chat(port, msgs, 1)
        r = chat(port, final, 24)
        text = "ERROR:" + (r["choices"][0]["text"] or "")
        hits[k] += needle in text
        if k == "pruned":
            skipped += r.get("x_deja", {}).get("attn_skipped", 0)
            prompt_tok += r["usage"]["prompt_tokens"]
    print(f"trial {t}: exact {hits['exact']}, pruned {hits['pruned']} so far", flush=True)
print(json.dumps({"trials": trials, "filler_turns": FILLER, "policy": policy, "exact_copied": hits["exact"],
                  "pruned_copied": hits["pruned"], "final_prompt_tokens_mean": prompt_tok / trials,
                  "final_attn_skipped_mean": skipped / trials}))
for p, _ in servers.values():
    p.terminate()
    p.wait()
