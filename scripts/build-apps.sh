#!/usr/bin/env bash
# Builds the guest Wasm apps under tests/apps for wasm32-wasip2 (and wasip1 core modules
# where a test needs one: wasi-*-p1, and the SDK proof apps sdk2-http (spin-sdk 2.x: imports
# the WASI 0.2.0-rc-2023-10-18 packages) and sdk3-http (spin-sdk 3.x), both wasip1 only, and
# sdk5-http (spin-sdk 5.x, wasip1 and wasip2)). sdk6-http (spin-sdk 6.x, Spin 4) is
# built for wasm32-wasip2 and exports the WASIp3 handler (wasi:http/handler@0.3.0-rc-2026-03-15).
# mw-header and mw-upper are Spin 4 HTTP middleware (world wasi:http/middleware, written with
# wit-bindgen against the wasip3 crate's WIT), used by mw-app in front of sdk6-http.
# wasi-http-hello-p3 is the benchmarks' WASIp3 hello (the wasip3 crate's service world, WASI
# imports only, so that `wasmtime serve` runs it too).
# Output: tests/apps/target/wasm32-wasip{1,2}/release/*.wasm
set -euo pipefail
scripts="$(cd "$(dirname "$0")" && pwd)"
cd "$scripts/../tests/apps"
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The guest workspace has its own target dir even when CARGO_TARGET_DIR points elsewhere.
export CARGO_TARGET_DIR="$PWD/target"
echo "apps: building guest apps for wasm32-wasip2"
cargo build --release --target wasm32-wasip2 --workspace --exclude sdk2-http --exclude sdk3-http --exclude 'spin1-*' --quiet
cargo build --release --target wasm32-wasip1 -p sdk2-http -p sdk3-http -p sdk5-http --quiet
# Spin 1.x-style modules (hand-written Spin 1.x ABI: core imports, handle-http-request): wasip1 only.
cargo build --release --target wasm32-wasip1 -p 'spin1-*' --quiet
if compgen -G "wasi-*-p1" >/dev/null; then
    for d in wasi-*-p1; do
        cargo build --release --target wasm32-wasip1 -p "$d" --quiet
    done
fi

# Python SDK apps (componentize-py, as Spin's http-py template builds them): py-spin-hello
# (spin-sdk 3.x, world spin-http) and py4-spin-hello (spin-sdk 4.x, Spin 4: world
# spin:up/http-trigger@4.0.0, exporting only the WASIp3 handler). The world is the `-w` of
# the componentize-py build command in the app's spin.toml, spin-http without one. Each
# requirements.txt's toolchain (~20-40 MB of wheels from PyPI) is cached in a venv under
# target/; a component is rebuilt only when its sources are newer than it.
for d in py*-*/; do
    [ -f "$d/requirements.txt" ] || continue
    d=${d%/}
    world=spin-http
    if [ -f "$d/spin.toml" ]; then
        w=$(sed -n 's/.*componentize-py -w \([^ ]*\) componentize.*/\1/p' "$d/spin.toml" | head -n1)
        [ -n "$w" ] && world=$w
    fi
    out="target/wasm32-wasip2/release/$(echo "$d" | tr - _).wasm"
    venv="target/py-venv/$(sha256sum "$d/requirements.txt" | cut -c1-12)"
    if [ ! -x "$venv/bin/componentize-py" ]; then
        echo "apps: installing $(tr '\n' ' ' < "$d/requirements.txt")into $venv"
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$d/requirements.txt"
    fi
    if [ ! -f "$out" ] || [ -n "$(find "$d" -newer "$out" -type f)" ]; then
        mkdir -p "$(dirname "$out")"
        (cd "$d" && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" \
            componentize-py -w "$world" componentize app -o "../$out.tmp" >/dev/null)
        mv "$out.tmp" "$out"
    fi
done
echo "apps: done ($(ls target/wasm32-wasip2/release/*.wasm 2>/dev/null | wc -l) wasm files)"
bash "$scripts/build-js-app.sh"
bash "$scripts/build-js-sdk-app.sh"
