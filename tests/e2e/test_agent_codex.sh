#!/bin/bash
# test_agent_codex.sh SHARED DEJA — Codex CLI (npm @openai/codex, pinned in tests/npm/package.json),
# unchanged, against `deja serve` through the OpenAI Responses API with the settings
# docs/SERVER.md gives (a [model_providers.deja] entry with wire_api = "responses" and an API key
# from the environment): `codex exec` for one turn, then `codex exec resume --last` for the second
# turn of the same session, with its default instructions and tools (function tools, a
# namespace tool, hosted tools, reasoning, include, prompt_cache_key, store: false).  Checks in
# tests/agents/lib.sh.
AGENT="Codex CLI"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_npm codex
CODEX="$HERE/npm/node_modules/.bin/codex"
"$CODEX" --version >/dev/null 2>&1 || { echo "SKIP: the codex binary does not run on this platform"; exit 77; }
agent_serve
mkdir -p "$TMP/home/.codex" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
cat >"$TMP/home/.codex/config.toml" <<TOML
model = "local"
model_provider = "deja"
[model_providers.deja]
name = "deja"
base_url = "http://127.0.0.1:$PORT/v1"
env_key = "DEJA_API_KEY"
wire_api = "responses"
TOML
codex_run() { # codex_run ARGS...: one `codex exec` in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$TMP/home" CODEX_HOME="$TMP/home/.codex" DEJA_API_KEY="$KEY" \
        timeout 240 "$CODEX" exec --skip-git-repo-check "$@" </dev/null >>"$OUT" 2>&1)
}
codex_run "list the files in this directory"
RC1=$?
N1=$(agent_n_requests)
codex_run resume --last "now say done"
RC2=$?
# Codex's words for a reply cut at the output cap; it reports every HTTP and stream failure
# on an "ERROR:" line (the status and the server's message)
CAP='Incomplete response returned, reason: max_output_tokens'
agent_check_exit $RC1 "$CAP" '^ERROR:|stream disconnected|unexpected status'
agent_check_exit $RC2 "$CAP" '^ERROR:|stream disconnected|unexpected status'
agent_check_server 2 "$N1"
agent_finish
