#!/usr/bin/env bash
# Tokenizer encoding speed (one thread): `make bench` or
#   bench/tokenize.sh build/bin/deja ../shared
# Corpora: deja's own C sources concatenated (source code, as agents send it)
# and the first 60,000 characters of a real agent prompt (golden/codelm).
set -euo pipefail
deja=${1:-build/bin/deja}
shared=${2:-../shared}
out=$(dirname "$deja")/../bench
mkdir -p "$out"
code="$out/code.txt"
# Sorted so the corpus is the same for the same tree.
find src tools tests -name '*.[ch]' | LC_ALL=C sort | xargs cat > "$code"
for vocab in vocab/ggml-vocab-deepseek-coder.gguf vocab/ggml-vocab-gpt-2.gguf vocab/ggml-vocab-llama-spm.gguf; do
  for text in "$code" "$shared/golden/codelm/codelm_ppl_text.txt"; do
    "$deja" tokenize -m "$shared/$vocab" --no-bos --bench "$text"
  done
done
