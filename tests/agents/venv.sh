#!/bin/bash
# tests/agents/venv.sh — the Python agents' virtual environment, outside the repository:
# ${DEJA_TEST_CACHE:-~/.cache/deja-tests}/venv, made and filled from tests/python/requirements.txt
# (every package pinned with its hashes: pip --require-hashes --no-deps) when missing or when the
# requirements changed.  Prints the venv's path.  One install at a time (flock): `make test`
# runs it once before the tests (py-deps), and parallel tests that find it missing wait for one.
# Regenerate the requirements (the two agents and their dependencies) with pip-tools:
#   pip-compile --generate-hashes --allow-unsafe --no-header -o requirements.txt requirements.in
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DEJA_TEST_CACHE:-$HOME/.cache/deja-tests}
VENV="$CACHE/venv"
REQ="$HERE/python/requirements.txt"
mkdir -p "$CACHE"
exec 9>"$CACHE/venv.lock"
flock 9
if [ ! -f "$VENV/.deja-requirements" ] || ! cmp -s "$REQ" "$VENV/.deja-requirements"; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    if ! "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$REQ" >"$CACHE/pip.log" 2>&1; then
        echo "venv.sh: pip install -r tests/python/requirements.txt failed (log: $CACHE/pip.log):" >&2
        tail -20 "$CACHE/pip.log" >&2
        rm -rf "$VENV"
        exit 1
    fi
    cp "$REQ" "$VENV/.deja-requirements"
fi
echo "$VENV"
