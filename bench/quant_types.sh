#!/usr/bin/env bash
# quant_types.sh — every weight type against llama.cpp on llama.cpp's own files (issue 29).
#
#   bench/quant_types.sh DEJA LLAMACPP_BUILD DIR
#
# DIR holds 1b-f16.gguf, made by
#   deja synth --arch llama --preset 1b --type f16 --vocab-from ../shared/vocab/ggml-vocab-llama-spm.gguf -o DIR/1b-f16.gguf
# and this script makes (once) one file per type with LLAMACPP_BUILD/bin/llama-quantize, all
# matrices of that type (--pure): the types without an importance matrix directly; MXFP4
# as Q8_0 with every matrix overridden to mxfp4 (llama-quantize has no dense MXFP4 file
# type); the importance-matrix types with an imatrix of 4 chunks of golden/codelm's text
# (llama-imatrix) and output/token_embd at Q6_K (llama.cpp has no imatrix rows for them).
# Then bench/compare_llamacpp.sh on every file (llama-bench and deja bench interleaved,
# -t 2 -p 512 -n 128), and `deja bench --membw` before and after.
# env: TYPES (default below)  SHARED (../shared)  REPS (2)
set -euo pipefail
deja=$1; lb=$2; dir=$3
shared=${SHARED:-../shared}
q=$lb/bin/llama-quantize
TYPES=${TYPES:-"Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS MXFP4 TQ1_0 TQ2_0 IQ2_XXS IQ3_XXS IQ1_S IQ3_S"}
cd "$dir"
for t in $TYPES; do
  f=l1b-$t.gguf   # (a name starting with a digit is read by llama-quantize as a type)
  [ -f "$f" ] && continue
  case $t in
  MXFP4) "$q" --pure --tensor-type 'attn_.*'=mxfp4 --tensor-type 'ffn_.*'=mxfp4 --output-tensor-type mxfp4 \
           --token-embedding-type mxfp4 1b-f16.gguf "$f" Q8_0 2 ;;
  IQ1_*|IQ2_*|IQ3_XXS|IQ3_S)
    [ -f imatrix-1b.gguf ] || "$lb/bin/llama-imatrix" -m 1b-f16.gguf -f "$shared/golden/codelm/codelm_ppl_text.txt" \
                                -c 512 --chunks 4 -t 2 -o imatrix-1b.gguf
    "$q" --pure --output-tensor-type q6_K --token-embedding-type q6_K --imatrix imatrix-1b.gguf 1b-f16.gguf "$f" "$t" 2 ;;
  *) "$q" --pure 1b-f16.gguf "$f" "$t" 2 ;;
  esac >"log-$t.txt" 2>&1
done
cd - >/dev/null
"$deja" bench --membw -t 2 | tail -1
files=(); for t in $TYPES; do files+=("$dir/l1b-$t.gguf"); done
REPS=${REPS:-2} bench/compare_llamacpp.sh "$deja" "$lb/bin/llama-bench" "${files[@]}"
"$deja" bench --membw -t 2 | tail -1
