#!/usr/bin/env bash
# make bench-start (issue 5): cold start through CRI (RunPodSandbox + CreateContainer +
# StartContainer -> first HTTP 200 of spin-hello) with an empty and a warm compile cache,
# median of BENCH_RUNS (default 5) runs, beside the native hyper hello server under runc.
# Report: target/bench/start.md; raw samples: target/bench/samples-start.txt.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run start
