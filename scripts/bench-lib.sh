#!/usr/bin/env bash
# Shared by scripts/bench.sh and scripts/bench-start.sh: builds (release profile, shared
# target dir) what shim-bench needs and runs `shim-bench MODE` as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

# The `wasmtime` CLI the HTTP comparison runs (`wasmtime serve`): the wasmtime-cli crate at
# the wasmtime version our Cargo.lock resolved, installed once under the target dir (its
# own build dir there, so a second bench reuses it). Exports WASMTIME_BIN, WASMTIME_VERSION.
install_wasmtime_cli() {
    local v dir
    v="$(awk '/^name = "wasmtime"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)"
    [ -n "$v" ] || { echo "bench: no wasmtime version in Cargo.lock" >&2; exit 1; }
    dir="$CARGO_TARGET_DIR/bench-tools/wasmtime-cli-$v"
    if [ ! -x "$dir/bin/wasmtime" ]; then
        echo "bench: installing wasmtime-cli $v (once; about 10 min on 2 cores)" >&2
        CARGO_TARGET_DIR="$CARGO_TARGET_DIR/bench-tools/build" \
            cargo install -q --locked --version "=$v" --root "$dir" wasmtime-cli >&2
    fi
    export WASMTIME_BIN="$dir/bin/wasmtime" WASMTIME_VERSION="$v"
}

# What every bench needs: root, wrk, the guest apps, and the glibc build of the shim, the
# tools and the native server (release profile).
bench_preflight() {
    [ "$(id -u)" = 0 ] || { echo "bench: needs root (containerd, pod cgroups); run with sudo" >&2; exit 1; }
    command -v wrk >/dev/null || { echo "bench: wrk not found (apt-get install -y wrk)" >&2; exit 1; }
    local apps="${GUEST_APPS_DIR:-$ROOT/tests/apps/target/wasm32-wasip2/release}" w
    for w in spin_hello.wasm spin_cpu.wasm wasi-hello.wasm; do
        [ -f "$apps/$w" ] || { echo "bench: $apps/$w missing: run make apps" >&2; exit 1; }
    done
    cargo build --release -q --workspace --bins --example native-hello
}

bench_run() {
    local mode=$1
    bench_preflight
    install_wasmtime_cli
    # spin-serve as the release archives build it (static musl, mimalloc): the HTTP
    # comparison's `spin-serve (musl)` rows. About 9 min the first time, seconds after.
    echo "bench: building spin-serve for x86_64-unknown-linux-musl (scripts/release.sh)" >&2
    BENCH_SPIN_SERVE_MUSL="$(bash scripts/release.sh build x86_64 spin-runtime spin-serve 2>"$CARGO_TARGET_DIR/bench-musl-build.log")" \
        || { tail -20 "$CARGO_TARGET_DIR/bench-musl-build.log" >&2; exit 1; }
    export BENCH_SPIN_SERVE_MUSL
    "$CARGO_TARGET_DIR/release/shim-bench" "$mode" 2>"$CARGO_TARGET_DIR/bench-$mode.log" \
        || { tail -40 "$CARGO_TARGET_DIR/bench-$mode.log" >&2; exit 1; }
}
