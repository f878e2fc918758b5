# The README's two commands: `make demo` and `make test`. Both install what they need first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
ASAN_FULL_BUILD ?= build-asan-full
FUZZ_SECONDS ?= 15
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
BACKEND    ?= acas

# ccache keys on paths relative to the checkout, so every clone of the project (CI's included)
# shares one cache on this machine.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all bootstrap build build-asan demo test test-main test-asan test-asan-full format clean bench fuzz install

all: build

bootstrap:
	@scripts/bootstrap

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

build: bootstrap $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMAF_SANITIZE=ON -DMAF_UNIT_ONLY=ON -DMAF_BENCH=OFF

build-asan: bootstrap $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# What the configuration installs (so far the Python package: docs/python.md) under its prefix.
install: build
	cmake --install $(BUILD)

demo: build
	@BACKEND=$(BACKEND) scripts/demo $(BUILD)

test: build build-asan
	$(MAKE) --no-print-directory test-main test-asan fuzz

test-main:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE live

test-asan:
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

# libFuzzer targets (fuzz/), clang with ASan and UBSan, each run FUZZ_SECONDS from its seed corpus.
$(FUZZ_BUILD)/build.ninja:
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DMAF_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DMAF_BENCH=OFF

fuzz: bootstrap $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

# Every test, not only the unit tests, under ASan+UBSan. A second full build (about 20 minutes on
# two cores), so not part of `make test`; run it before a release and after changes to the runtime.
test-asan-full: bootstrap
	cmake -S . -B $(ASAN_FULL_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMAF_SANITIZE=ON -DMAF_BENCH=OFF
	cmake --build $(ASAN_FULL_BUILD) -j $(JOBS)
	cd $(ASAN_FULL_BUILD) && ctest --output-on-failure -j $(JOBS) -LE live

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(ASAN_FULL_BUILD)

# Benchmarks (not tests): baselines and ours side by side in one run, ratios printed last.
bench: build
	@scripts/bench $(BUILD)
