# containerd-shim-spin-v2 — build, test, demo and benchmark entry points.
# Every target installs what it needs through scripts/setup.sh (root on Debian 12).
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TARGET_DIR ?= $(CURDIR)/target
RELEASE_DIR := $(CARGO_TARGET_DIR)/release
# Integration tests find the freshly built binaries and guest apps here.
export SHIM_BIN_DIR := $(RELEASE_DIR)
export GUEST_APPS_DIR := $(CURDIR)/tests/apps/target/wasm32-wasip2/release
# Release archives (make release) and the static x86_64 shim `make test` runs on a no-libc node.
export RELEASE_OUT ?= $(CARGO_TARGET_DIR)/dist
# `make test` builds the static shim and runs clippy beside the host build, each in a target
# dir of its own (cargo locks a target dir for one build at a time).
STATIC_TARGET_DIR := $(CARGO_TARGET_DIR)/static
STATIC_SHIM_DIR := $(STATIC_TARGET_DIR)/x86_64-unknown-linux-musl/static-check
LINT_TARGET_DIR := $(CARGO_TARGET_DIR)/lint
# Cargo and rustc size their own parallelism: under `make -j` they would otherwise take their
# jobs from make's job server (one slot each, so a lone build's serial tail used one core).
ALONE := env -u MAKEFLAGS -u MFLAGS -u CARGO_MAKEFLAGS

.PHONY: all setup build build-tests apps lint fmt fmt-check test test-unit test-integration test-cri test-systemd test-kind test-k3s \
        demo bench bench-http bench-start bench-memory-release fuzz soak clean release build-static test-release

all: build

setup:
	@bash scripts/setup.sh

## build: the shim and the tools, release profile (the one profile tests use too)
build: setup
	$(ALONE) $(CARGO) build --release --workspace --bins

## build-tests: the bins, then every test binary and example (what `cargo test --release
## --workspace` runs)
build-tests: build
	$(ALONE) $(CARGO) test --release --workspace --all-targets --no-run

## apps: the guest Wasm apps used by tests, demo and benchmarks (the guests' own lints are
## not this project's gate: no clippy wrapper there)
apps: setup
	@$(ALONE) env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS bash scripts/build-apps.sh

## lint: formatting and clippy, warnings are errors
lint: fmt-check
	CARGO_TARGET_DIR=$(LINT_TARGET_DIR) $(ALONE) $(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt-check: setup
	$(CARGO) fmt --all -- --check

# `make test` lints while it builds: clippy-driver compiles the workspace's own crates (as
# `cargo clippy` runs it, its lints on, warnings denied) in the one build that tests use, instead
# of a second pass that checks every dependency again. CLIPPY_ARGS is how cargo-clippy hands
# `-- -D warnings` to the driver.
LINTED_BUILD := RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

fmt:
	$(CARGO) fmt --all

## release: static (musl, libseccomp linked in) shim archives for x86_64 and aarch64 in
## $(RELEASE_OUT), each with its .sha256; reproducible (SOURCE_DATE_EPOCH: the last commit's time)
release: setup
	@bash scripts/release.sh x86_64 aarch64

## build-static: the x86_64 static shim alone (what `make test` runs on a node without libc),
## with the static-check profile (Cargo.toml); make test-release tests the release archive's
build-static: setup
	@CARGO_TARGET_DIR=$(STATIC_TARGET_DIR) RELEASE_PROFILE=static-check $(ALONE) bash scripts/release.sh build x86_64 >/dev/null

## test: everything — lint, unit tests, real-kernel cgroup tests, containerd integration tests
## (with the x86_64 static shim on a node without libc: tests/integration/tests/static_node.rs).
## Its three builds (bins and test binaries linted by clippy as they compile, static shim,
## guest apps) run side by side, so that each one's serial stretches (one crate compiling, a
## link) leave no core idle. The tests and scripts build with the same settings (nothing is
## rebuilt); a plain `cargo build` afterwards rebuilds the workspace's own crates once.
## A failing test does not hide the rest: cargo runs every test binary (--no-fail-fast) and the
## systemd-node suites run too; the target fails at the end, naming each part that failed.
test: fmt-check
	@$(LINTED_BUILD) $(MAKE) --no-print-directory -j3 build-tests build-static apps
	@failed=(); \
	  $(LINTED_BUILD) RELEASE_SHIM_DIR=$(STATIC_SHIM_DIR) $(CARGO) test --release --workspace --no-fail-fast || failed+=("cargo test"); \
	  $(LINTED_BUILD) bash scripts/test-systemd.sh || failed+=("test-systemd"); \
	  $(LINTED_BUILD) bash scripts/test-systemd-spinkube.sh || failed+=("test-systemd-spinkube"); \
	  if [ $${#failed[@]} -gt 0 ]; then echo "make test: FAILED: $${failed[*]}" >&2; exit 1; fi

## test-release: make release, then the archives' binaries: x86_64 on a node without libc,
## aarch64 under qemu-user (--version, a WASI command and a Spin HTTP app via spin-serve)
test-release: release build apps
	@set -e; d="$$(mktemp -d)"; trap 'rm -rf "$$d"' EXIT; \
	  tar -xzf $(RELEASE_OUT)/containerd-shim-spin-v2-*-linux-x86_64.tar.gz -C "$$d" --strip-components=1; \
	  RELEASE_SHIM_DIR="$$d" $(CARGO) test --release -p integration --test static_node -- --nocapture
	@bash scripts/test-release-aarch64.sh

test-unit: setup
	$(CARGO) test --release --workspace --lib --bins

test-integration: build apps
	$(CARGO) test --release -p integration

test-cri: build apps
	$(CARGO) test --release -p cri-tests -- --nocapture

## test-kind / test-k3s: end-to-end on real clusters (needs kind / k3s or k3d, kubectl; not on CI)
test-kind: build
	@bash scripts/test-kind.sh

test-k3s: build
	@bash scripts/test-k3s.sh

test-systemd: build apps
	@bash scripts/test-systemd.sh

## demo: a Spin app in a kubelet-style pod cgroup through a private containerd
demo: build apps
	@bash scripts/demo.sh

## bench: every benchmark in one run (cold and first starts, the HTTP comparison with
## wasmtime serve and its profile, memory, density, stats); docs/benchmarks.md, raw samples
## in target/bench/. bench-http and bench-start run one part alone (reports in target/bench/).
bench: build apps
	@bash scripts/bench.sh

bench-http: build apps
	@bash scripts/bench-http.sh

bench-start: build apps
	@bash scripts/bench-start.sh

## bench-memory-release: memory per pod and density (make bench's sections 4 and 5) with the
## shim the release archives ship (static musl, mimalloc; SHIM_MUSL_MALLOC=1 and
## SHIM_LINK_NO_PIE=1 select the density builds) instead of the glibc build;
## report in target/bench/memory-release.md
bench-memory-release: build apps
	@bash scripts/bench-memory-release.sh

## fuzz: coverage-guided fuzzing of every parser of outside input (libFuzzer, stable rustc);
## FUZZ_SECONDS per target (default 100), fails on a crash or below FUZZ_MIN_EXECS in total
fuzz: build apps
	@bash scripts/fuzz.sh

## soak: SOAK_CYCLES create/start/kill/delete cycles (default 10,000; make test runs 500)
## through one pod's shim; fails on any leak or memory growth
SOAK_CYCLES ?= 10000
soak: build apps
	SOAK_CYCLES=$(SOAK_CYCLES) $(CARGO) test --release --workspace --test soak -- --nocapture

clean:
	$(CARGO) clean
	rm -rf tests/apps/target
