#!/usr/bin/env bash
# Shared by scripts/bench.sh and scripts/bench-start.sh: builds (release profile, shared
# target dir) what shim-bench needs and runs `shim-bench MODE` as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

bench_run() {
    local mode=$1
    [ "$(id -u)" = 0 ] || { echo "bench: needs root (containerd, pod cgroups); run with sudo" >&2; exit 1; }
    command -v wrk >/dev/null || { echo "bench: wrk not found (apt-get install -y wrk)" >&2; exit 1; }
    local apps="${GUEST_APPS_DIR:-$ROOT/tests/apps/target/wasm32-wasip2/release}"
    for w in spin_hello.wasm spin_cpu.wasm wasi-hello.wasm; do
        [ -f "$apps/$w" ] || { echo "bench: $apps/$w missing: run make apps" >&2; exit 1; }
    done
    cargo build --release -q --workspace --bins --example native-hello
    "$CARGO_TARGET_DIR/release/shim-bench" "$mode" 2>"$CARGO_TARGET_DIR/bench-$mode.log" \
        || { tail -40 "$CARGO_TARGET_DIR/bench-$mode.log" >&2; exit 1; }
}
