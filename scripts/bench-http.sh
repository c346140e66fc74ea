#!/usr/bin/env bash
# HTTP benchmark (make bench-http): wrk against spin-serve running the spin-hello and
# spin-cpu (fib(25)) guest apps, beside a native hyper hello server measured in the
# same run, at concurrency 1/16/64. Each point is run BENCH_REPS times; the summary
# gives the median requests/s and the p50/p99 latency of the median run, and the ratio
# to the native server. Raw wrk output: target/bench/http-*.txt; summary:
# target/bench/http-summary.md.
#
# Knobs: BENCH_DURATION (s, default 10), BENCH_REPS (default 3), BENCH_CONNS ("1 16 64").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
DURATION="${BENCH_DURATION:-10}"
REPS="${BENCH_REPS:-3}"
CONNS="${BENCH_CONNS:-1 16 64}"
OUT="$ROOT/target/bench"
APPS="${GUEST_APPS_DIR:-$ROOT/tests/apps/target/wasm32-wasip2/release}"
mkdir -p "$OUT"

command -v wrk >/dev/null || { echo "bench-http: wrk not found (apt-get install -y wrk)" >&2; exit 1; }
for w in spin_hello.wasm spin_cpu.wasm; do
    [ -f "$APPS/$w" ] || { echo "bench-http: $APPS/$w missing: run make apps" >&2; exit 1; }
done
cargo build --release -q --workspace --bins --example native-hello
BIN="$CARGO_TARGET_DIR/release"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME CMD...: runs CMD, waits for its "listening on http://ADDR" line, sets ADDR.
start() {
    local name=$1; shift
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    local pid=$! i
    for i in $(seq 1 600); do
        ADDR=$(sed -n 's#.*listening on http://##p' "$WORK/$name.out" | head -1)
        [ -n "$ADDR" ] && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$WORK/$name.err" >&2; echo "bench-http: $name exited" >&2; exit 1; }
        sleep 0.1
    done
    echo "bench-http: $name did not start" >&2; exit 1
}

# App dirs with manifests pointing at the built wasm files.
for app in spin-hello spin-cpu; do
    mkdir -p "$WORK/$app"
    sed "s#\.\./target/wasm32-wasip2/release/#$APPS/#" "tests/apps/$app/spin.toml" >"$WORK/$app/spin.toml"
done
export SPIN_SHIM_COMPILE_CACHE_DIR="$WORK/cache" RUST_LOG=warn

start native "$BIN/examples/native-hello" --listen 127.0.0.1:0; NATIVE=$ADDR
start hello "$BIN/spin-serve" "$WORK/spin-hello" --listen 127.0.0.1:0; HELLO=$ADDR
start cpu "$BIN/spin-serve" "$WORK/spin-cpu" --listen 127.0.0.1:0; CPU=$ADDR

declare -A URL=([native]="http://$NATIVE/hello" [spin-hello]="http://$HELLO/hello" [spin-cpu]="http://$CPU/?n=25")
TARGETS=(native spin-hello spin-cpu)
# Sanity: each answers 200 before we measure.
for t in "${TARGETS[@]}"; do
    code=$(curl -s -o /dev/null -w '%{http_code}' "${URL[$t]}" 2>/dev/null || echo none)
    [ "$code" = 200 ] || { echo "bench-http: ${URL[$t]} answered $code" >&2; exit 1; }
done

# to_ms "1.23ms" | "456.00us" | "1.2s" -> milliseconds
to_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else printf "%s", v }'
}

declare -A RPS P50 P99
for t in "${TARGETS[@]}"; do
    # Warm-up (first instantiations, connection setup).
    wrk -t1 -c4 -d2s "${URL[$t]}" >/dev/null
    for c in $CONNS; do
        threads=$(( c < 2 ? 1 : 2 ))
        rows=()
        for r in $(seq 1 "$REPS"); do
            raw="$OUT/http-$t-c$c-r$r.txt"
            wrk -t"$threads" -c"$c" -d"${DURATION}s" --latency "${URL[$t]}" >"$raw"
            rps=$(awk '/^Requests\/sec:/ {print $2}' "$raw")
            p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$raw")")
            p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$raw")")
            errs=$(awk '/Non-2xx|Socket errors/' "$raw")
            [ -z "$errs" ] || echo "bench-http: $t c=$c run $r: $errs" >&2
            rows+=("$rps $p50 $p99")
            echo "  $t c=$c run $r: $rps req/s, p50 ${p50} ms, p99 ${p99} ms"
        done
        median=$(printf '%s\n' "${rows[@]}" | sort -n -k1,1 | awk -v n="$REPS" 'NR == int((n + 1) / 2)')
        read -r RPS[$t,$c] P50[$t,$c] P99[$t,$c] <<<"$median"
    done
done

SUMMARY="$OUT/http-summary.md"
{
    echo "# HTTP benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo
    echo "wrk, ${DURATION}s per run, median of $REPS runs; $(nproc) CPUs shared by wrk and the server."
    echo "native = hyper hello server; spin-hello = /hello of tests/apps/spin-hello; spin-cpu = fib(25) per request."
    echo
    echo "| target | conns | req/s | p50 ms | p99 ms | req/s vs native |"
    echo "|---|---:|---:|---:|---:|---:|"
    for t in "${TARGETS[@]}"; do
        for c in $CONNS; do
            ratio=$(awk -v a="${RPS[$t,$c]}" -v b="${RPS[native,$c]}" 'BEGIN { printf "%.3f", a / b }')
            echo "| $t | $c | ${RPS[$t,$c]} | ${P50[$t,$c]} | ${P99[$t,$c]} | $ratio |"
        done
    done
} >"$SUMMARY"
cat "$SUMMARY"
