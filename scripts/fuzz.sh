#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets in fuzz/ (stable toolchain, coverage through
# rustc's SanitizerCoverage flags, see fuzz/rustc-sancov.sh) and runs each for a bounded
# time, two at a time on the machine's two cores. Fails on any crash, leak-free timeout or
# out-of-memory report of libFuzzer, and when the executions of the whole run stay below
# FUZZ_MIN_EXECS. Inputs that crashed are kept in $FUZZ_DIR/artifacts for a regression test.
#
#   FUZZ_SECONDS     seconds per target (default 100)
#   FUZZ_MIN_EXECS   executions the run must reach in total (default 10000000)
#   FUZZ_TARGETS     space-separated subset (default: every target in fuzz/Cargo.toml)
#   FUZZ_JOBS        targets run at once (default 2)
#   FUZZ_DIR         build and corpus directory (default $CARGO_TARGET_DIR/fuzz)
#   FUZZ_SHIM=0      only the cgroup-placement targets (no wasmtime/libcontainer build)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${FUZZ_SECONDS:-100}"
min_execs="${FUZZ_MIN_EXECS:-10000000}"
jobs="${FUZZ_JOBS:-2}"
dir="${FUZZ_DIR:-${CARGO_TARGET_DIR:-$repo/target}/fuzz}"
all_targets=$(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' "$repo/fuzz/Cargo.toml" | grep -v '^spin_shim_fuzz$')
# An explicit target keeps build scripts and proc macros out of the instrumentation
# (fuzz/rustc-sancov.sh).
host=$(rustc -vV | sed -n 's/^host: //p')
cargo_flags=()
if [ "${FUZZ_SHIM:-1}" = 0 ]; then
    cargo_flags=(--no-default-features)
    all_targets="cgroups_path mountinfo runtime_options"
fi
targets="${FUZZ_TARGETS:-$all_targets}"

command -v c++ >/dev/null || { echo "fuzz: a C++ compiler is needed to build libFuzzer (apt-get install g++)" >&2; exit 1; }

echo "fuzz: building $(echo $targets | wc -w) targets into $dir/build"
RUSTC_WRAPPER="$repo/fuzz/rustc-sancov.sh" CARGO_TARGET_DIR="$dir/build" \
    cargo build --release --manifest-path "$repo/fuzz/Cargo.toml" --bins --target "$host" "${cargo_flags[@]}"
bin="$dir/build/$host/release"

# Seed corpora: committed seeds plus inputs this repository already holds in the form
# real users produce them (app manifests, mountinfo captured on the hosts we support).
seed() { # target, files...
    local t="$1"
    shift
    mkdir -p "$dir/corpus/$t"
    for f in "$@"; do
        [ -f "$f" ] && cp "$f" "$dir/corpus/$t/seed-$(sha256sum "$f" | cut -c1-16)"
    done
    return 0
}
for t in $targets; do
    seed "$t" "$repo"/fuzz/seeds/"$t"/*
done
seed spin_manifest "$repo"/tests/apps/*/spin.toml
# mountinfo seeds get the flag byte (bit 0: /sys/fs/cgroup is cgroup2) the target reads first.
mkdir -p "$dir/corpus/mountinfo"
for f in "$repo"/crates/cgroup-placement/tests/fixtures/mountinfo/* /proc/self/mountinfo; do
    n="$(basename "$f")"
    { printf '\0'; cat "$f"; } >"$dir/corpus/mountinfo/seed-hybrid-$n"
    { printf '\1'; cat "$f"; } >"$dir/corpus/mountinfo/seed-unified-$n"
done

# Artifacts as `spin registry push` lays them out (our image builder mirrors it): their index,
# manifests and locked-app configs seed the OCI reader and the locked-app parser.
builder="${SHIM_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/release}/oci-image-builder"
if [ -x "$builder" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    for app in "$repo"/tests/apps/spin-*/; do
        n="$(basename "$app")"
        for layout in "" --archive-layers; do
            "$builder" spin-artifact --name "docker.io/library/$n:fuzz" --app "$app" $layout \
                -o "$work/$n.tar" >/dev/null 2>&1 || continue
            mkdir -p "$work/$n$layout"
            tar -xf "$work/$n.tar" -C "$work/$n$layout"
            for b in "$work/$n$layout"/index.json "$work/$n$layout"/blobs/sha256/*; do
                [ "$(stat -c %s "$b")" -le 65536 ] || continue
                if grep -q '"spin_lock_version"' "$b"; then seed locked_app "$b"
                elif grep -q '"schemaVersion"' "$b"; then seed oci_manifest "$b"
                fi
            done
        done
    done
else
    echo "fuzz: $builder not built: OCI and locked-app targets start from the committed seeds only"
fi

mkdir -p "$dir/artifacts" "$dir/logs"
run_one() {
    local t="$1"
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a parser must not balloon.
    "$bin/$t" "$dir/corpus/$t" -max_total_time="$seconds" -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$dir/artifacts/$t-" >"$dir/logs/$t.log" 2>&1
}
status=0
running=0
declare -A pids=()
for t in $targets; do
    run_one "$t" &
    pids[$t]=$!
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
total=0
printf '%-18s %14s %10s %s\n' target execs exec/s result
for t in $targets; do
    rc=0
    wait "${pids[$t]}" || rc=$?
    log="$dir/logs/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    execs="${execs:-0}"
    total=$((total + execs))
    if [ "$rc" = 0 ]; then
        result=ok
    else
        result="FAILED (exit $rc, see $log)"
        status=1
        grep -E 'ERROR: libFuzzer|panicked at|SUMMARY|Test unit written' "$log" | head -n 8 >&2 || true
    fi
    printf '%-18s %14s %10s %s\n' "$t" "$execs" "${rate:-?}" "$result"
done
echo "fuzz: $total executions in total ($(echo $targets | wc -w) targets x ${seconds}s)"
if [ "$total" -lt "$min_execs" ]; then
    echo "fuzz: fewer than FUZZ_MIN_EXECS=$min_execs executions" >&2
    status=1
fi
exit "$status"
