# Thin wrapper over CMake: the two commands a newcomer runs are `make run`
# and `make test`.  Both install missing Debian packages first.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
MAKEFLAGS  += --no-print-directory

.PHONY: all deps test-deps dev-deps build build-asan run test test-normal test-asan bench matrix fuzz tsan clean

all: build

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

dev-deps:
	@scripts/install-deps --dev

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCOHORT_SANITIZE=ON -DCOHORT_WERROR=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)

run: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target cohortd cohort-agent cohort-worker cohort
	@BUILD=$(BUILD) scripts/run

# The whole suite, in the normal build and again under ASan+UBSan.
test: test-normal test-asan

test-normal: test-deps build
	@scripts/test $(BUILD)

test-asan: test-deps build-asan
	@scripts/test $(ASAN_BUILD)

bench: test-deps build
	@$(BUILD)/bench_fsync /tmp 10
	@bench/api/run $(BUILD)
	@$(BUILD)/bench_sched
	@$(BUILD)/bench_e2e $(BUILD) 1000 200
	@$(BUILD)/bench_e2e $(BUILD) 200 1000 250
	@$(BUILD)/bench_e2e $(BUILD) 200 1000 100
	@COHORT_E2E_RUNTIME=host $(BUILD)/bench_e2e $(BUILD) 1000 200
	@COHORT_E2E_RUNTIME=host $(BUILD)/bench_e2e $(BUILD) 200 1000 100
	@bench/images/run $(BUILD)
	@$(BUILD)/bench_allreduce 2
	@bench/train/run $(BUILD)
	@node bench/console/console.bench.mjs $(BUILD) 1000 15

# ThreadSanitizer over the suites that drive cohortd's threads, the
# scheduler's and billing's included, over HTTP (not in make test: time).
# Any report stops cohortd (or an agent) and fails its suite.
TSAN_BUILD ?= build-tsan
TSAN_SUITES ?= api_flow|billing|roles|isolation|durability|limits
tsan: test-deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_SANITIZE=thread -DCOHORT_WERROR=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS)
	@scripts/test $(TSAN_BUILD) -R '^($(TSAN_SUITES))$$'

# Each libFuzzer target of tests/fuzz for FUZZ_TIME seconds (clang).
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME  ?= 300
fuzz: dev-deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_FUZZ=ON -DCOHORT_WERROR=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_all
	@scripts/fuzz $(FUZZ_BUILD) $(FUZZ_TIME)

# gcc and clang, every build type, Debian's hardening flags: all warning-free.
matrix: dev-deps
	@scripts/build-matrix

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
