#!/usr/bin/env bash
# Memory per pod (issue 40): a Spin hello pod beside a native one (runc), idle after 200
# requests and under load: PSS of the shim server, its container-creation helper and the
# container; then density (BENCH_DENSITY pods of each, default 100, started concurrently).
# Report: target/bench/memory.md; raw samples: target/bench/samples-memory.txt.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_run memory
