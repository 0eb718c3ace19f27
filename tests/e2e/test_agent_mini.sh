#!/bin/bash
# test_agent_mini.sh SHARED DEJA — mini-SWE-agent (PyPI mini-swe-agent, pinned with hashes in
# tests/python/requirements.txt, installed into a venv outside the repository), unchanged,
# against `deja serve` through Chat Completions (litellm) with its bundled mini.yaml and a local
# OpenAI-compatible model config (model openai/local, model_kwargs api_base and max_tokens, cost
# tracking off): one run of the agent, in yolo mode, limited to two steps (two requests: the
# second is the first conversation and more).  Checks in tests/agents/lib.sh.
AGENT="mini-SWE-agent"
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../agents/lib.sh"
agent_venv
agent_serve
mkdir -p "$TMP/home" "$TMP/proj"
printf 'hello\n' >"$TMP/proj/README.txt"
(cd "$TMP/proj" && HOME="$TMP/home" MSWEA_CONFIGURED=true LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_KEY="$KEY" \
    timeout 240 "$VENV/bin/mini" -m openai/local -t "list the files in this directory" --yolo --exit-immediately \
    -c mini.yaml -c agent.step_limit=2 -c agent.cost_limit=0 -c model.model_kwargs.api_base="http://127.0.0.1:$PORT/v1" \
    -c model.model_kwargs.max_tokens=32 -c model.cost_tracking=ignore_errors -o "$TMP/traj.json" </dev/null >>"$OUT" 2>&1)
RC1=$?
# it ends on its step limit (LimitsExceeded, exit 0); a reply cut at the cap is fed back to the
# model as "reached the output token limit (finish_reason=length)"; API failures are litellm's
agent_check_exit $RC1 "" 'APIError|APIConnectionError|BadRequestError|AuthenticationError|NotFoundError|InternalServerError|Traceback'
agent_check_server 2 1
# its trajectory says how it ended: the step limit, not an error
python3 - "$TMP/traj.json" <<'PY' || fail "the trajectory does not show a clean end on the step limit"
import json, sys
t = json.load(open(sys.argv[1]))
info = t.get("info", {})
status = info.get("exit_status") or info.get("submission_status")
assert status in ("LimitsExceeded", "Submitted"), status
PY
agent_finish
