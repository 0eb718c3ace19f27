#!/usr/bin/env bash
# arch_models.sh — deja vs llama.cpp on the model families of issue 30 at real sizes (pp512,
# tg128, -t 2, interleaved: bench/compare_llamacpp.sh), on `deja synth` files with random
# weights in the types the released files use:
#   gpt-oss  --preset 20b  --type mxfp4            (gpt-oss-20b's shapes, every matrix MXFP4)
#   gemma3   --preset 4b   --type q4_k_m           (Gemma 3 4B)
#   glm4moe  --preset air  --type q4_k_m --layers $GLM_LAYERS   (GLM-4.5-Air's layer shape)
#   mistral3 --preset devstral --type q4_k_m --layers $DEV_LAYERS (Devstral Small 2's layer shape)
# GLM-4.5-Air (46 layers, ~60 GB at Q4_K_M) and Devstral (40 layers, ~14 GB) run with fewer
# layers (default 3 and 10) so a file fits this machine's memory and the runs take minutes: the
# ratio per layer is what compares the engines.  Vocabulary: codelm's (32k tokens) for all, so
# the output matrix is smaller than the real models' (gpt-oss 201k, Gemma 262k).
#   bench/arch_models.sh DEJA LLAMA_BENCH DIR
# DIR: where the files are written once (tens of GB; never in the repository).
# env: SHARED (../shared)  REPS (2)  GLM_LAYERS (3)  DEV_LAYERS (10)  MODELS (all four: oss gemma glm dev)
set -euo pipefail
deja=$1; llama=$2; dir=$3
shared=${SHARED:-../shared}
voc=$shared/models/codelm-15m-f16.gguf
mkdir -p "$dir"
make_one() { # name arch preset type [layers]
    local f=$dir/$1.gguf
    [ -f "$f" ] && return 0
    local extra=()
    [ -n "${5:-}" ] && extra=(--layers "$5")
    "$deja" synth --arch "$2" --preset "$3" --type "$4" --vocab-from "$voc" -o "$f" -t 2 "${extra[@]}" >&2
}
files=()
for m in ${MODELS:-oss gemma glm dev}; do
    case $m in
    oss) make_one gpt-oss-20b-mxfp4 gpt-oss 20b mxfp4; files+=("$dir/gpt-oss-20b-mxfp4.gguf") ;;
    gemma) make_one gemma3-4b-q4_k_m gemma3 4b q4_k_m; files+=("$dir/gemma3-4b-q4_k_m.gguf") ;;
    glm) make_one "glm45air-${GLM_LAYERS:-3}l-q4_k_m" glm4moe air q4_k_m "${GLM_LAYERS:-3}"
         files+=("$dir/glm45air-${GLM_LAYERS:-3}l-q4_k_m.gguf") ;;
    dev) make_one "devstral-${DEV_LAYERS:-10}l-q4_k_m" mistral3 devstral q4_k_m "${DEV_LAYERS:-10}"
         files+=("$dir/devstral-${DEV_LAYERS:-10}l-q4_k_m.gguf") ;;
    *) echo "arch_models.sh: unknown model '$m' (oss gemma glm dev)" >&2; exit 2 ;;
    esac
done
"$deja" bench --membw -t 2 | tail -1
REPS=${REPS:-2} bench/compare_llamacpp.sh "$deja" "$llama" "${files[@]}"
"$deja" bench --membw -t 2 | tail -1
