#!/usr/bin/env bash
# The aarch64 release binary under qemu-user (qemu-user-static, no binfmt registration
# needed: qemu-aarch64-static is run explicitly):
#   1. the archive's shim is a static aarch64 executable, `--version` runs and reports the
#      aarch64 musl target, static libseccomp, wasmtime and libcontainer;
#   2. a WASI program starts the way `spin-serve` starts it: qemu-user emulates neither
#      namespaces nor cgroups, so the shim's container path cannot run there; instead
#      spin-serve, the shim's Spin runtime (crate spin-runtime) without containerd, is
#      cross-built with the release's toolchain and flags and runs under qemu: the
#      spin-command app (a command trigger: a WASI program given arguments, its exit code
#      the process's) and the spin-hello HTTP app answering a request.
# Guest apps come from GUEST_APPS_DIR (`make apps`); SPIN_SERVE_AARCH64 may name a built
# aarch64 spin-serve. Needs `scripts/release.sh aarch64` to
# have written the archive (make test-release does both).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
out="${RELEASE_OUT:-$CARGO_TARGET_DIR/dist}"
apps="${GUEST_APPS_DIR:-$root/tests/apps/target/wasm32-wasip2/release}"
qemu=qemu-aarch64-static
command -v "$qemu" >/dev/null || { echo "test-release-aarch64: $qemu missing: run scripts/setup.sh" >&2; exit 1; }
for w in spin-command.wasm spin_hello.wasm; do
    [ -f "$apps/$w" ] || { echo "test-release-aarch64: $apps/$w missing: run make apps" >&2; exit 1; }
done
archive="$(ls "$out"/containerd-shim-spin-v2-*-linux-aarch64.tar.gz 2>/dev/null | head -n 1)"
[ -n "$archive" ] || { echo "test-release-aarch64: no aarch64 archive in $out: run scripts/release.sh aarch64" >&2; exit 1; }

work="$(mktemp -d)"
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
passed=0 failed=0
check() { # name, then a command that must succeed
    local n="$1"
    shift
    if "$@"; then
        echo "test-release-aarch64: ok: $n"
        passed=$((passed + 1))
    else
        echo "test-release-aarch64: FAILED: $n" >&2
        failed=$((failed + 1))
    fi
}

(cd "$out" && sha256sum -c --quiet "$(basename "$archive").sha256")
tar -xzf "$archive" -C "$work"
shim="$(find "$work" -type f -name containerd-shim-spin-v2)"

is_static_aarch64() {
    readelf -h "$shim" | grep -q 'Machine: *AArch64' && ! readelf -lW "$shim" | grep -q INTERP &&
        ! readelf -dW "$shim" | grep -q NEEDED
}
check "archive's shim is a static aarch64 executable" is_static_aarch64

version_ok() {
    local v
    v="$("$qemu" "$shim" --version)" || return 1
    echo "$v"
    grep -q '^target: aarch64-unknown-linux-musl$' <<<"$v" &&
        grep -q '^libseccomp: linked static$' <<<"$v" &&
        grep -q '^allocator: mimalloc$' <<<"$v" &&
        grep -q '^executable: PIE (randomized base)$' <<<"$v" &&
        grep -q '^wasmtime: [0-9]' <<<"$v" && grep -q '^libcontainer: [0-9]' <<<"$v" &&
        grep -q '^features: device-filter=on ' <<<"$v"
}
check "shim --version under qemu-aarch64" version_ok

# SPIN_SERVE_AARCH64 names an aarch64 spin-serve already built (else it is built here).
serve="${SPIN_SERVE_AARCH64:-}"
if [ -z "$serve" ]; then
    start=$SECONDS
    serve="$(CARGO_NICE="${CARGO_NICE:-0}" bash "$root/scripts/release.sh" build aarch64 spin-runtime spin-serve)"
    echo "test-release-aarch64: spin-serve for aarch64 built in $((SECONDS - start)) s"
fi
readelf -h "$serve" | grep -q 'Machine: *AArch64' ||
    { echo "test-release-aarch64: $serve is not an aarch64 executable" >&2; exit 1; }

# The apps' manifests, pointing at GUEST_APPS_DIR's builds.
mkdir -p "$work/command" "$work/hello"
cat >"$work/command/spin.toml" <<EOF
spin_manifest_version = 2
[application]
name = "spin-command"
[[trigger.command]]
component = "runner"
[component.runner]
source = "$apps/spin-command.wasm"
EOF
cat >"$work/hello/spin.toml" <<EOF
spin_manifest_version = 2
[application]
name = "spin-hello"
[[trigger.http]]
route = "/hello"
component = "hello"
[component.hello]
source = "$apps/spin_hello.wasm"
environment = { COMPONENT = "hello" }
EOF

# On-demand instance allocation: the pooling allocator's start-up reservation of address
# space for every instance slot got qemu-aarch64 killed (exit 137) here; qemu-user maps
# guest reservations itself. Native arm64 nodes keep the default (pooling).
export SPIN_SHIM_POOLING=0

command_ok() {
    local o rc=0
    o="$("$qemu" "$serve" "$work/command" -- one "two words" exit-code 7)" || rc=$?
    echo "spin-command under qemu: exit $rc, stdout: $o"
    [ "$rc" = 7 ] && grep -q '^argv=.*|one|two words|exit-code|7$' <<<"$o"
}
start=$SECONDS
check "WASI command program under qemu-aarch64 (args, exit code 7)" command_ok
echo "test-release-aarch64: command run took $((SECONDS - start)) s"

http_ok() {
    "$qemu" "$serve" "$work/hello" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
    server=$!
    local addr="" i
    for i in $(seq 1 600); do
        addr="$(sed -n 's/^spin-serve: listening on http:\/\/\(.*\)$/\1/p' "$work/serve.log")"
        grep -q '^spin-serve: ready' "$work/serve.log" && [ -n "$addr" ] && break
        kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; return 1; }
        sleep 0.5
    done
    [ -n "$addr" ] || { echo "spin-serve never became ready:" >&2; cat "$work/serve.log" >&2; return 1; }
    local body
    body="$(curl -fsS --max-time 60 "http://$addr/hello")" || return 1
    echo "GET /hello under qemu: $body"
    kill -TERM "$server"
    local rc=0
    wait "$server" || rc=$?
    server=""
    grep -q 'component=hello' <<<"$body" && [ "$rc" = 0 ]
}
start=$SECONDS
check "Spin HTTP app under qemu-aarch64 answers GET /hello, exits 0 on SIGTERM" http_ok
echo "test-release-aarch64: HTTP start, request and stop took $((SECONDS - start)) s"

echo "test-release-aarch64: $passed passed, $failed failed"
[ "$failed" = 0 ]
