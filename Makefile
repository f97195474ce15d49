# hearth - the front door. `make run` serves... (see README); `make test` runs every test tier.
# CMake does the building underneath; this file only sequences the steps.

BUILD      ?= build
BUILD_SAN  ?= build-san
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX     ?= /usr/local
FUZZ_SECS  ?= 60
PY         := .venv/bin/python
export HEARTH_HOME ?= $(HOME)/.cache/hearth

.PHONY: all deps build run test bench clean install test-deps starter-model parity \
        test-unit test-san test-fuzz test-integration

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc \
	      -DHEARTH_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

starter-model:
	@scripts/starter-model.sh

# `make run` prepares everything, then serves the starter model: the OpenAI/Anthropic API and the
# chat page on http://127.0.0.1:8080 (HOST= and PORT= override; Ctrl-C stops it).
HOST ?= 127.0.0.1
PORT ?= 8080
run: build starter-model
	$(BUILD)/hearth serve SmolLM2-135M-Instruct.Q4_1 --host $(HOST) --port $(PORT)

test-deps: deps
	@scripts/test-deps.sh

# Every tier, in order of speed: unit (gcc, -Werror), unit again under ASan+UBSan built with
# clang (-Werror too, so both compilers stay warning-clean), fuzz smoke runs, integration.
test: test-deps build starter-model test-unit test-san test-fuzz test-integration
	@echo "make test: all tiers passed"

test-unit: build
	scripts/check-layers.sh
	ctest --test-dir $(BUILD) -L unit --output-on-failure -j$(JOBS)

test-san: deps
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	      -DHEARTH_SANITIZE=ON -DHEARTH_FUZZ=ON -DHEARTH_WERROR=ON -DHEARTH_CUDA=OFF >/dev/null
	cmake --build $(BUILD_SAN) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $(BUILD_SAN) -L unit --output-on-failure -j$(JOBS)

test-fuzz: test-san test-deps
	@scripts/fuzz-smoke.sh $(BUILD_SAN) $(FUZZ_SECS)

test-integration: build starter-model test-deps
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) -m pytest -q tests/integration tests/parity

# Regenerates the parity goldens with the reference (tests/parity/reference.py), then compares.
parity: build starter-model test-deps
	$(PY) tests/parity/make_goldens.py $(HEARTH_HOME)/models/SmolLM2-135M-Instruct.Q4_1.gguf \
	    smollm2-q4_1 --tokenizer ../shared/data/tokenizers/smollm2/tokenizer.json
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) -m pytest -q -s tests/parity

# The peer, llama-cpp-python, builds llama.cpp from source on first use (several minutes).
bench: build starter-model test-deps
	@$(PY) -c "import llama_cpp.server" 2>/dev/null || \
	    $(PY) -m pip install -q "llama-cpp-python[server]==0.3.36"
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/open_time.py
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/tokenizer_speed.py --mb 20 --rounds 3
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/engine_bench.py --threads 2 --runs 5
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/server_bench.py --threads 2 --runs 5
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/batch_bench.py --threads 2
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/agent_bench.py --threads 2 --runs 5
	@[ -f $(BUILD)/llama-3.2-1b-q4_0.gguf ] || \
	    $(PY) bench/gen_shaped_gguf.py $(BUILD)/llama-3.2-1b-q4_0.gguf --shape llama-3.2-1b
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/engine_bench.py --threads 2 --runs 3 \
	    --model $(BUILD)/llama-3.2-1b-q4_0.gguf
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/batch_bench.py --threads 2 --gen 64 --no-peer \
	    --model $(BUILD)/llama-3.2-1b-q4_0.gguf
	@[ -f $(BUILD)/llama-3.2-1b-q4_k_m.gguf ] || $(PY) bench/gen_shaped_gguf.py \
	    $(BUILD)/llama-3.2-1b-q4_k_m.gguf --shape llama-3.2-1b --type q4_k_m
	HEARTH_BUILD=$(abspath $(BUILD)) $(PY) bench/engine_bench.py --threads 2 --runs 3 \
	    --model $(BUILD)/llama-3.2-1b-q4_k_m.gguf

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)
	@if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
