#!/usr/bin/env bash
# Builds the guest Wasm apps under tests/apps for wasm32-wasip2 (and wasip1 core modules
# where a test needs one). Output: tests/apps/target/wasm32-wasip2/release/*.wasm
set -euo pipefail
scripts="$(cd "$(dirname "$0")" && pwd)"
cd "$scripts/../tests/apps"
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The guest workspace has its own target dir even when CARGO_TARGET_DIR points elsewhere.
export CARGO_TARGET_DIR="$PWD/target"
echo "apps: building guest apps for wasm32-wasip2"
cargo build --release --target wasm32-wasip2 --quiet
if compgen -G "wasi-*-p1" >/dev/null; then
    for d in wasi-*-p1; do
        cargo build --release --target wasm32-wasip1 -p "$d" --quiet
    done
fi
echo "apps: done ($(ls target/wasm32-wasip2/release/*.wasm 2>/dev/null | wc -l) wasm files)"
bash "$scripts/build-js-app.sh"
