#!/bin/bash
# test_agent_opencode.sh SHARED DEJA — opencode (npm opencode-ai, pinned in tests/npm/package.json),
# unchanged, against `deja serve` through Chat Completions with the settings docs/SERVER.md gives
# (an @ai-sdk/openai-compatible provider in the project's opencode.json): `opencode run`, then
# `opencode run --continue` for the second turn of the same session, with its default system
# prompt (~7,900 tokens) and tools.  opencode runs in a scratch HOME with its update check,
# default plugins, model-list fetch, LSP downloads and sharing turned off.  Checks in
# tests/agents/lib.sh.
AGENT="opencode"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_npm opencode
OC="$HERE/npm/node_modules/.bin/opencode"
"$OC" --version >/dev/null 2>&1 || { echo "SKIP: the opencode binary does not run on this platform"; exit 77; }
agent_serve
mkdir -p "$TMP/home" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
cat >"$TMP/proj/opencode.json" <<JSON
{"\$schema": "https://opencode.ai/config.json",
 "provider": {"deja": {"npm": "@ai-sdk/openai-compatible", "name": "deja",
   "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "$KEY"},
   "models": {"local": {"name": "local", "limit": {"context": 65536, "output": 32}}}}},
 "model": "deja/local", "small_model": "deja/local", "autoupdate": false, "share": "disabled"}
JSON
H="$TMP/home"
oc_run() { # oc_run ARGS...: one `opencode run` in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$H" XDG_CONFIG_HOME="$H/.config" XDG_CACHE_HOME="$H/.cache" \
        XDG_DATA_HOME="$H/.local/share" XDG_STATE_HOME="$H/.local/state" OPENCODE_DISABLE_AUTOUPDATE=1 \
        OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
        OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1 OPENCODE_DISABLE_EXTERNAL_SKILLS=1 \
        timeout 240 "$OC" run --model deja/local "$@" </dev/null >>"$OUT" 2>&1)
}
oc_run "list the files in this directory"
RC1=$?
N1=$(agent_n_requests)
oc_run --continue "now say done"
RC2=$?
# opencode reports an API error as "Error: MESSAGE" (checked with a wrong API key) and exits 1;
# a reply cut at the output cap is not an error for it (it exits 0)
agent_check_exit $RC1 "" '^Error|APIError|AI_'
agent_check_exit $RC2 "" '^Error|APIError|AI_'
agent_check_server 2 "$N1"
agent_finish
