#!/usr/bin/env bash
# Soak (make soak; not part of make test): `deja serve --kv-dir` killed with SIGKILL at
# random moments while four sessions' chat requests run, ITER times.  After every kill a fresh server on the same directory
# answers the four requests again; each answer — text and top-5 logprobs of every generated
# token, printed by jansson with 17 significant digits — must equal the cold reference
# computed once without --kv-dir.  Whatever the kill left on disk (no file, a complete one,
# a temporary file) is either restored bitwise or recomputed; nothing else is acceptable.
#   tests/soak/kill9_kvdir.sh DEJA MODEL [ITER]
set -euo pipefail
deja=$1; model=$2; iter=${3:-200}
work=$(mktemp -d /tmp/deja-soak-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
cat src/*/*.c > "$work/all"
# four chat turns (top-5 logprobs asked): A (6000 characters of C), A + 1200 more, A + 2400
# more, and B (another 5000): long prompts sharing prefixes, as an agent's turns do
body() { # $1 offset, $2 length -> a request body
  head -c $(($1 + $2 - 1)) "$work/all" | tail -c "$2" | jq -Rs '{messages: [{role: "user", content: .}], max_tokens: 8,
    temperature: 0, logprobs: true, top_logprobs: 5}' > "$work/body$3"
}
body 1 6000 0; body 1 7200 1; body 1 8400 2; body 20001 5000 3
start() { # $1: extra args
  rm -f "$work/log"
  # shellcheck disable=SC2086
  "$deja" serve -m "$model" --port 0 -t 2 -c 4096 --kv-budget 256 $1 2> "$work/log" &
  pid=$!
  for _ in $(seq 300); do
    port=$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/log" 2>/dev/null)
    [ -n "$port" ] && return 0
    sleep 0.05
  done
  echo "server did not start" >&2; cat "$work/log" >&2; exit 1
}
ask() { # $1: index -> the answer's text and logprobs, one line
  curl -s -H 'Content-Type: application/json' --max-time 60 --data-binary @"$work/body$1" \
    "http://127.0.0.1:$port/v1/chat/completions" | jq -c '[.choices[0].message.content, .choices[0].logprobs]'
}
start ""
for k in 0 1 2 3; do ask $k > "$work/ref$k"; done
kill -TERM "$pid"; wait "$pid" || true; pid=
grep -q '"top_logprobs"' "$work/ref0" || { echo "no reference answer with logprobs" >&2; exit 1; }

bad=0; restored=0
for i in $(seq "$iter"); do
  start "--kv-dir $work/kv"
  for k in 0 1 2 3; do ask $k > /dev/null 2>&1 & done
  sleep "0.$((RANDOM % 1000))"
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
  wait || true # the clients
  start "--kv-dir $work/kv"
  for k in 0 1 2 3; do
    ask $k > "$work/got"
    if ! cmp -s "$work/got" "$work/ref$k"; then
      bad=$((bad + 1)); echo "iteration $i, request $k: differs from the cold run" >&2
    fi
  done
  restored=$((restored + $(sed -n 's/.*, disk \([0-9]*\)).*/\1/p' "$work/log" | awk '{s += $1} END {print s + 0}')))
  kill -TERM "$pid"; wait "$pid" || true; pid=
done
files=$(find "$work/kv" -name '*.kvb' | wc -l)
echo "kill9_kvdir: $iter kills, $((iter * 4)) checked answers ($restored prompt positions restored from disk), $bad differing; $files block files on disk"
[ "$bad" = 0 ]
