#!/usr/bin/env bash
# Removes the workspace's own build outputs (every hash of every workspace package) from a
# target dir, keeping the compiled dependencies.
#
# Why: a target dir kept between fresh clones (CI's cache in .ci/run) gains a new copy of every
# workspace binary, test binary and rlib per commit (~4 GiB: each test binary links wasmtime)
# while the old ones stay. The cache grew to 26 GiB and a CI run failed with ENOSPC in the
# middle of the tests. A fresh clone rebuilds the workspace's crates anyway (new mtimes), so
# removing them first costs no build time.
#
# Usage: scripts/prune-target.sh [TARGET_DIR]   (default: $CARGO_TARGET_DIR, else ./target)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:-${CARGO_TARGET_DIR:-$root/target}}"
# Nothing built there yet (a fresh machine, where cargo may not even be installed yet).
[ -d "$target/release" ] || [ -d "$target/lint/release" ] || [ -d "$target/static" ] || exit 0
command -v cargo >/dev/null || { echo "prune-target: no cargo on PATH, nothing pruned" >&2; exit 0; }
cd "$root"

mapfile -t packages < <(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)["packages"]]')
[ "${#packages[@]}" -gt 0 ] || { echo "prune-target: no workspace packages found" >&2; exit 1; }
args=()
for p in "${packages[@]}"; do args+=(-p "$p"); done

before=$(du -sm "$target" | cut -f1)
# The three target dirs `make test` builds into (Makefile: release, LINT_TARGET_DIR,
# STATIC_TARGET_DIR), each with the profile it uses.
[ -d "$target/release" ] && CARGO_TARGET_DIR="$target" cargo clean -q --release "${args[@]}"
[ -d "$target/lint/release" ] && CARGO_TARGET_DIR="$target/lint" cargo clean -q --release "${args[@]}"
[ -d "$target/static/x86_64-unknown-linux-musl" ] &&
    CARGO_TARGET_DIR="$target/static" cargo clean -q --profile static-check \
        --target x86_64-unknown-linux-musl "${args[@]}"
after=$(du -sm "$target" | cut -f1)
echo "prune-target: $target: ${before} MiB -> ${after} MiB (workspace outputs removed, dependencies kept)"
