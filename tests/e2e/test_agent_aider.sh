#!/bin/bash
# test_agent_aider.sh SHARED DEJA — Aider (PyPI aider-chat, pinned with hashes in
# tests/python/requirements.txt, installed into a venv outside the repository), unchanged,
# against `deja serve` through Chat Completions with the settings docs/SERVER.md gives
# (--model openai/local --openai-api-base URL/v1 --openai-api-key KEY): one `--message` run
# that edits a file, then a second run that restores the chat history (the same session's
# second turn).  LITELLM_LOCAL_MODEL_COST_MAP=1 keeps litellm from fetching its price list
# (the test machine is offline).  Checks in tests/agents/lib.sh.
AGENT="Aider"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_venv
agent_serve
mkdir -p "$TMP/home" "$TMP/proj"
printf 'def hello():\n    print("hi")\n' >"$TMP/proj/hello.py"
aider_run() { # aider_run ARGS...: one non-interactive run in the scratch project and HOME
    (cd "$TMP/proj" && HOME="$TMP/home" LITELLM_LOCAL_MODEL_COST_MAP=True \
        timeout 240 "$VENV/bin/aider" --model openai/local --openai-api-base "http://127.0.0.1:$PORT/v1" \
        --openai-api-key "$KEY" --yes-always --no-git --no-auto-commits --no-show-model-warnings --no-check-update \
        --analytics-disable --no-pretty --no-stream "$@" hello.py </dev/null >>"$OUT" 2>&1)
}
aider_run --message "add a docstring to hello"
RC1=$?
N1=$(agent_n_requests)
aider_run --restore-chat-history --message "now say done"
RC2=$?
# Aider's words for a reply cut at the output cap ("... has hit a token limit!", then it goes on
# and exits 0); litellm's exceptions name the error class
CAP='has hit a token limit'
ERR='APIError|APIConnectionError|BadRequestError|AuthenticationError|NotFoundError|InternalServerError|litellm\.[A-Za-z]*Error'
agent_check_exit $RC1 "$CAP" "$ERR"
agent_check_exit $RC2 "$CAP" "$ERR"
agent_check_server 2 "$N1"
agent_finish
