#!/usr/bin/env bash
# HTTP benchmark (make bench-http): `shim-bench http` runs wrk against spin-serve (spin-hello,
# spin-cpu) beside the native hyper hello server in the same run; see tools/bench/src/http.rs
# for the method. Knobs: BENCH_DURATION (s, default 10), BENCH_REPS (default 3), BENCH_CONNS
# ("1 16 64"). Raw wrk output: target/bench/http-*.txt; summary: target/bench/http-summary.md.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run http
