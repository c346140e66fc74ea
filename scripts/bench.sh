#!/usr/bin/env bash
# make bench (issue 9): through CRI on a private containerd, Spin pods vs the native hyper
# hello server under runc in the same run: cold start (empty/warm cache), HTTP (wrk at
# concurrency 1/16/64, hello and cpu n=25), memory (PSS/RSS idle and under load), density
# (BENCH_DENSITY pods, default 50, started concurrently), ContainerStats latency.
# Report: docs/benchmarks.md; raw samples and wrk output: target/bench/.
# Knobs: BENCH_RUNS (5), BENCH_DURATION (wrk s per point, 5), BENCH_DENSITY (50), BENCH_STATS (200).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run all
