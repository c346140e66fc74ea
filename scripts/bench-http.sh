#!/usr/bin/env bash
# make bench-http: the request path side by side in one run (`shim-bench http`, method in
# tools/bench/src/http.rs): the native hyper server, `wasmtime serve` (wasmtime-cli at our
# wasmtime version, installed by bench-lib.sh), `spin-serve`, and the app in a CRI pod through
# the shim; hello and fib(25) at each concurrency; servers pinned to CPU 0, wrk to CPU 1; then
# a perf profile of spin-serve. Knobs: BENCH_DURATION (s, default 5), BENCH_REPS (default 3),
# BENCH_CONNS ("1 16 64"). Raw wrk output and the profile: target/bench/; report:
# target/bench/http.md. `shim-bench http-local` runs the same without containerd.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run http
