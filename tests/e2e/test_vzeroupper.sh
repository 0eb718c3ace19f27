#!/usr/bin/env bash
# test_vzeroupper.sh — every function in the deja binary that uses 256- or 512-bit registers
# also executes vzeroupper (GCC puts it before each return).  A kernel reached through a
# function pointer that takes a vector argument gets none: it returns with the upper halves
# dirty, and the SSE code after it (expf in ffn_swiglu) runs many times slower — measured
# twice: prefill at half speed on an AVX2 machine (stop 43), and ffn_swiglu + expf at 22 % of
# an IQ4_NL decode on a Xeon (2026-11-29, the 32-block types' mask argument).  So kernels take
# vectors by pointer, and this test finds any that do not.
#   test_vzeroupper.sh SHARED DEJA
set -euo pipefail
deja=$2
command -v objdump >/dev/null || { echo "SKIP: no objdump"; exit 77; }
case $(uname -m) in x86_64 | i?86) ;; *) echo "SKIP: not x86"; exit 77 ;; esac
bad=$(objdump -d --no-show-raw-insn "$deja" | awk '
  function flush() { if (fn != "" && vec && ret && !vz) print fn }
  /^[0-9a-f]+ <.*>:$/ { flush(); fn = $2; vec = 0; vz = 0; ret = 0; next }
  /%[yz]mm/ { vec = 1 }
  /vzeroupper/ { vz = 1 }
  /\tret/ { ret = 1 }
  END { flush() }')
n=$(objdump -d --no-show-raw-insn "$deja" | grep -c vzeroupper || true)
echo "vzeroupper instructions: $n"
[ "$n" -gt 100 ] || { echo "FAIL: too few vzeroupper ($n): is this the deja binary with its kernels?"; exit 1; }
if [ -n "$bad" ]; then
  echo "FAIL: functions using ymm/zmm registers without vzeroupper (a vector argument?):"
  echo "$bad"
  exit 1
fi
echo "PASS"
