#!/bin/bash
# test_agents.sh SHARED DEJA — a real coding-agent CLI against `deja serve`:
# opencode (npm opencode-ai, pinned in tests/npm/package.json, installed by
# `make test`) runs two turns of one session non-interactively (`opencode run`,
# then `opencode run --continue`) through its OpenAI-compatible provider
# pointed at a loopback deja serving codelm.  The model's answers do not
# matter; the agent's request/response loop must complete: opencode exits 0
# and prints no error (on stderr), every request it made was answered 200 (streamed chat
# completions with its ~7,900-token system prompt and its tool definitions),
# and turn 2's main request reused at least half its prompt from turn 1.  opencode runs in a scratch HOME with its update check,
# default plugins, model-list fetch, LSP downloads and sharing turned off.
set -u
SHARED=$1
DEJA=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v node >/dev/null; then
    echo "SKIP: node is not installed (opencode's npm package needs it to install)"
    exit 77
fi
if [ ! -x "$HERE/npm/node_modules/.bin/opencode" ]; then
    (cd "$HERE/npm" && npm install --no-audit --no-fund --loglevel=error) || { echo "FAIL: npm install in tests/npm"; exit 1; }
fi
OC="$HERE/npm/node_modules/.bin/opencode"
if ! "$OC" --version >/dev/null 2>&1; then
    echo "SKIP: the opencode binary does not run on this platform"
    exit 77
fi
TMP=$(mktemp -d)
LOG="$TMP/serve.log"
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
# opencode's system prompt is ~7,900 tokens: a 16k context; -n 64 caps what opencode does not
"$DEJA" serve -m "$SHARED/models/codelm-15m-f16.gguf" --port 0 --alias local -t 2 -c 16384 \
    --kv-budget 512 -n 64 2>"$LOG" &
PID=$!
PORT=
for _ in $(seq 1 100); do
    PORT=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$LOG")
    [ -n "$PORT" ] && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "FAIL: the server did not start:"; cat "$LOG"; exit 1
fi
mkdir -p "$TMP/home" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
cat >"$TMP/proj/opencode.json" <<EOF
{"\$schema": "https://opencode.ai/config.json",
 "provider": {"deja": {"npm": "@ai-sdk/openai-compatible", "name": "deja",
   "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "sk-local"},
   "models": {"local": {"name": "local", "limit": {"context": 16384, "output": 64}}}}},
 "model": "deja/local", "small_model": "deja/local", "autoupdate": false, "share": "disabled"}
EOF
H="$TMP/home"
RC=0
agent() { # agent ARGS...: one `opencode run` in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$H" XDG_CONFIG_HOME="$H/.config" XDG_CACHE_HOME="$H/.cache" \
        XDG_DATA_HOME="$H/.local/share" XDG_STATE_HOME="$H/.local/state" OPENCODE_DISABLE_AUTOUPDATE=1 \
        OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
        OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1 OPENCODE_DISABLE_EXTERNAL_SKILLS=1 \
        timeout 240 "$OC" run --model deja/local "$@" >>"$TMP/out.txt" 2>>"$TMP/err.txt")
}
# turn 1, then turn 2 of the same session (--continue): its prompt is turn 1's and more
agent "list the files in this directory"
ORC=$?
N1=$(grep -c 'POST /v1/chat/completions stream' "$LOG")
[ $ORC -eq 0 ] && { agent --continue "now say done"; ORC=$?; }
if [ $ORC -ne 0 ]; then echo "FAIL: opencode run exited $ORC"; RC=1; fi
# opencode reports an API error on stderr as "Error: MESSAGE" (ANSI-coloured) and exits 1 —
# checked with a wrong API key.  Its stdout is the model's free text, which may say "error".
if sed 's/\x1b\[[0-9;]*m//g' "$TMP/err.txt" | grep -q "Error"; then
    echo "FAIL: opencode printed an error:"; sed 's/\x1b\[[0-9;]*m//g' "$TMP/err.txt" | grep "Error" | head -5; RC=1
fi
N=$(grep -c 'POST /v1/chat/completions stream' "$LOG")
if [ "$N1" -lt 1 ] || [ "$N" -le "$N1" ]; then echo "FAIL: streamed chat requests: $N1 in turn 1, $N in all"; RC=1; fi
if grep -q 'finish error' "$LOG"; then echo "FAIL: a generation failed"; RC=1; fi
METRICS=$(node -e 'fetch(process.argv[1]).then(r => r.text()).then(t => process.stdout.write(t))' "http://127.0.0.1:$PORT/metrics")
BAD=$(printf '%s\n' "$METRICS" | grep -E '^deja_http_responses_total\{code="[45][0-9][0-9]"\} [1-9]')
if [ -n "$BAD" ]; then echo "FAIL: error responses: $BAD"; RC=1; fi
# turn 2's main request (the longest prompt) reuses at least half of its prompt from turn 1
BEST=$(grep 'POST /v1/chat/completions' "$LOG" | tail -n +$((N1 + 1)) |
       sed -n 's/.*prompt \([0-9]*\) cached \([0-9]*\).*/\1 \2/p' | sort -n | tail -1)
if [ -z "$BEST" ] || [ "${BEST#* }" -lt $(( ${BEST% *} / 2 )) ]; then
    echo "FAIL: turn 2's longest prompt reused too little: prompt/cached '$BEST'"; RC=1
fi
echo "opencode: exit $ORC, $N chat requests ($N1 in turn 1):"
grep 'POST /v1/chat/completions' "$LOG" | sed 's/^/  /'
kill -INT $PID
wait $PID
SRC=$?
PID=
if [ $SRC -ne 0 ]; then echo "FAIL: deja serve exited $SRC after SIGINT"; RC=1; fi
if [ $RC -ne 0 ]; then
    echo "--- opencode stdout ---"; tail -c 2000 "$TMP/out.txt"
    echo "--- opencode stderr ---"; tail -c 2000 "$TMP/err.txt"
    echo "--- server log ---"; tail -30 "$LOG"
fi
exit $RC
