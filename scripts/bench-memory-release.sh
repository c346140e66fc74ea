#!/usr/bin/env bash
# Memory per pod (issue 40) of the shim as the release archives ship it: static musl,
# mimalloc unless SHIM_MUSL_MALLOC=1, a static-pie unless SHIM_LINK_NO_PIE=1
# (`scripts/release.sh build x86_64`), where `make bench` measures the glibc build. The
# report's first line names the binary, its allocator and whether it is a PIE.
# The same `shim-bench memory` run (a hello pod beside a native one, idle and under load, then
# BENCH_DENSITY pods of each, default 100), with the release shim first on containerd's PATH.
# Report: target/bench/memory-release.md; raw samples: target/bench/samples-memory.txt.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

# shim-bench, the native server and the CRI tools come from the glibc build; only the shim
# differs (the glibc shim in target/release stays a PIE whatever SHIM_LINK_NO_PIE says). The
# release build takes about 13 min the first time, seconds after.
(
    unset SHIM_LINK_NO_PIE
    bench_preflight
) || exit 1
echo "bench: building the release shim for x86_64-unknown-linux-musl (scripts/release.sh)" >&2
shim="$(bash scripts/release.sh build x86_64 2>"$CARGO_TARGET_DIR/bench-release-shim-build.log")" \
    || { tail -20 "$CARGO_TARGET_DIR/bench-release-shim-build.log" >&2; exit 1; }
bin="$CARGO_TARGET_DIR/bench/release-shim-bin"
rm -rf "$bin"
mkdir -p "$bin"
for f in "$CARGO_TARGET_DIR"/release/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then ln -s "$f" "$bin/"; fi
done
ln -s "$CARGO_TARGET_DIR/release/examples" "$bin/examples"
rm -f "$bin/containerd-shim-spin-v2"
cp "$shim" "$bin/containerd-shim-spin-v2"

SHIM_BIN_DIR="$bin" "$CARGO_TARGET_DIR/release/shim-bench" memory \
    2>"$CARGO_TARGET_DIR/bench-memory-release.log" \
    || { tail -40 "$CARGO_TARGET_DIR/bench-memory-release.log" >&2; exit 1; }
report="$CARGO_TARGET_DIR/bench/memory-release.md"
{
    echo "Shim: the release build, $(file -b "$shim" | cut -d, -f1-2,4), $("$shim" --version | grep -E '^(allocator|executable):' | paste -sd, | sed 's/,/, /'), $(date -u '+%Y-%m-%d %H:%M') UTC."
    echo
    cat "$CARGO_TARGET_DIR/bench/memory.md"
} >"$report"
rm -f "$CARGO_TARGET_DIR/bench/memory.md"
echo "report: $report"
