#!/usr/bin/env bash
# make bench: every benchmark in one run, through CRI on a private containerd, each beside a
# baseline measured in the same run: cold start (empty/warm cache, vs a native hyper server
# under runc), first start of Rust/JavaScript/Python SDK apps (spin-serve, cold and warm),
# the request path side by side (native, wasmtime serve, spin-serve, the shim; hello and
# fib(25) at concurrency 1/16/64) with a perf profile of spin-serve, memory (PSS/RSS idle and
# under load), density (BENCH_DENSITY pods, default 100, started concurrently), ContainerStats
# latency. Report: docs/benchmarks.md; raw samples, wrk output and the profile: target/bench/.
# Knobs: BENCH_RUNS (5), BENCH_DURATION (wrk s per point, 5), BENCH_REPS (3),
# BENCH_START_COLD (3), BENCH_START_WARM (5), BENCH_DENSITY (100), BENCH_STATS (200).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run all
