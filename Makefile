# The two commands of the README: `make run` (install, build, train the seed CNN on the best
# device) and `make test` (build and run every test). Other targets are for development.
BUILD ?= build
EPOCHS ?= 25
MODEL ?= cnn
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
JOBS ?= $(shell nproc)

.PHONY: run test build deps bench ci format-check clean

run: deps build
	$(BUILD)/trident devices
	$(BUILD)/trident train --model $(MODEL) --epochs $(EPOCHS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure --timeout 3000
	@# The suite runs on every device found; say which compiled-in backends had none (skipped).
	@$(BUILD)/trident devices | grep -E '^[a-z]+: 0 devices' | sed 's/^/skipped backend: /' || true

deps:
	bash scripts/install_deps.sh

# What CI runs (.ci/run): a -Werror build of the default configuration and the whole suite, a
# -Werror build without OpenCL, NCCL and MPI, and fast tagged tests under ASan + UBSan
# (scripts/ci.sh).
ci: deps
	bash scripts/ci.sh

# Reports files that differ from .clang-format (not enforced yet; needs clang-format-14).
format-check:
	bash scripts/check_format.sh

build:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

bench: build
	bash scripts/install_deps.sh --bench
	/usr/bin/python3 bench/run_bench.py --bench $(BUILD)/bench/trident_bench --rounds 2
	/usr/bin/python3 bench/plot_results.py

clean:
	rm -rf $(BUILD)
