#!/usr/bin/env bash
# Decode/prefill speed with and without one busy core (another process spinning),
# interleaving the engines within each round: the machine is shared, so compare
# only within a round and report medians over rounds (docs/BENCHMARKS.md).
#   bench/contention.sh MODEL ENGINE...
# ENGINE is NAME=PATH[@THREADS]: a deja binary (`deja bench`) or, if NAME starts
# with "llama", a llama-bench binary built from a llama.cpp checkout outside this
# repository (never committed); @THREADS overrides THREADS for that engine.  Environment: ROUNDS (5), THREADS (2),
# PP (0) and TG (64) tokens, REPS (3) repetitions a measurement, LOADS ("0 1":
# busy processes to start), QUIET (90) and TRIES (20): a block (one load level,
# every engine once) counts only if the CPU was at least QUIET % idle during the
# second before it and the second after it (nothing else of note ran); else it
# is run again, up to TRIES times, waiting for a quiet second in between.
# Prints one line a measurement of a counted block:
#   round load engine t/s
# and "# dropped ..." for each block thrown away.
set -euo pipefail
model=$1; shift
rounds=${ROUNDS:-5}; threads=${THREADS:-2}; pp=${PP:-0}; tg=${TG:-64}; reps=${REPS:-3}
loads=${LOADS:-"0 1"}; quiet=${QUIET:-90}; tries=${TRIES:-20}

idle_pct() { # % idle over 1 s, from /proc/stat
  local a b
  read -r -a a < /proc/stat; sleep 1; read -r -a b < /proc/stat
  local ta=0 tb=0 i
  for i in 1 2 3 4 5 6 7 8; do ta=$((ta + a[i])); tb=$((tb + b[i])); done
  echo $(( 100 * ((b[4] + b[5]) - (a[4] + a[5])) / (tb - ta + 1) ))
}

busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; busy=(); }
trap stop_busy EXIT

measure() { # name path[@threads] -> t/s
  local name=$1 bin=${2%@*} threads=$threads
  [[ $2 == *@* ]] && threads=${2##*@}
  if [[ $name == llama* ]]; then
    "$bin" -m "$model" -t "$threads" -p "$pp" -n "$tg" -r "$reps" -o csv 2>/dev/null |
      tail -n 1 | awk -F'","' '{ gsub(/"/, "", $NF); print $(NF-1) }'
  else
    "$bin" bench -m "$model" -t "$threads" -p "$pp" -n "$tg" -r "$reps" --json |
      sed -E 's/.*"'"$([ "$tg" -gt 0 ] && echo tg_tps || echo pp_tps)"'": ([0-9.]+).*/\1/'
  fi
}

for ((r = 1; r <= rounds; r++)); do
  for load in $loads; do
    for ((try = 1; try <= tries; try++)); do
      for ((w = 0; w < 30; w++)); do before=$(idle_pct); [ "$before" -ge "$quiet" ] && break; done
      for ((k = 0; k < load; k++)); do sh -c 'while :; do :; done' & busy+=($!); done
      [ "$load" -gt 0 ] && sleep 0.5
      lines=()
      for e in "$@"; do lines+=("$r $load ${e%%=*} $(measure "${e%%=*}" "${e#*=}")"); done
      stop_busy
      after=$(idle_pct)
      if [ "$before" -ge "$quiet" ] && [ "$after" -ge "$quiet" ]; then printf '%s\n' "${lines[@]}"; break; fi
      echo "# dropped round $r load $load (idle $before% before, $after% after): ${lines[*]}"
    done
  done
done
