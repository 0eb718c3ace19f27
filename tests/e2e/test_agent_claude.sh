#!/bin/bash
# test_agent_claude.sh SHARED DEJA — Claude Code (npm @anthropic-ai/claude-code, pinned in
# tests/npm/package.json), unchanged, against `deja serve` through the Anthropic Messages API
# with the settings docs/SERVER.md gives (ANTHROPIC_BASE_URL + ANTHROPIC_AUTH_TOKEN, a key):
# `claude -p` for one turn, then `claude -p --continue` for the second turn of the same
# session, with its default system prompt and tools (a system message inside `messages`,
# thinking adaptive, context_management, output_config, cache_control, ?beta=true, a
# HEAD /api/hello probe).  Checks in tests/agents/lib.sh.
AGENT="Claude Code"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_npm claude
CLAUDE="$HERE/npm/node_modules/.bin/claude"
"$CLAUDE" --version >/dev/null 2>&1 || { echo "SKIP: the claude binary does not run on this platform"; exit 77; }
agent_serve
mkdir -p "$TMP/home" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
claude_run() { # claude_run ARGS...: one non-interactive run in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$TMP/home" XDG_CONFIG_HOME="$TMP/home/.config" \
        ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" ANTHROPIC_AUTH_TOKEN="$KEY" \
        CLAUDE_CODE_MAX_OUTPUT_TOKENS=32 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 240 "$CLAUDE" -p "$@" >>"$OUT" 2>&1)
}
claude_run "list the files in this directory"
RC1=$?
N1=$(agent_n_requests)
claude_run --continue "now say done"
RC2=$?
# Claude Code's words for a reply cut at CLAUDE_CODE_MAX_OUTPUT_TOKENS; "API Error" covers
# every HTTP and protocol failure it reports (it prints the status and the server's message)
CAP='response exceeded the [0-9]+ output token maximum'
agent_check_exit $RC1 "$CAP" '^API Error|Connection error|Invalid API key|Failed to connect'
agent_check_exit $RC2 "$CAP" '^API Error|Connection error|Invalid API key|Failed to connect'
agent_check_server 2 "$N1"
# turn 2 re-sent turn 1: its first request must have reused at least the whole system prompt
FIRST2=$(grep '^deja serve: POST /v1/messages' "$LOG" | sed -n "$((N1 + 1))p" | sed -n 's/.*prompt \([0-9]*\) cached \([0-9]*\).*/\1 \2/p')
[ -n "$FIRST2" ] && [ "${FIRST2#* }" -ge $(( ${FIRST2% *} * 9 / 10 )) ] || fail "turn 2's first request reused too little: prompt/cached '$FIRST2'"
agent_finish
