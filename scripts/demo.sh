#!/usr/bin/env bash
# `make demo`: runs the sample CPU-load Spin app as a Kubernetes node would — a private
# containerd with our shim as runtime handler `spin`, a kubelet-style Burstable pod cgroup
# (systemd driver names), CRI RunPodSandbox/CreateContainer — prints its HTTP response, the
# container's cgroup beside the pod's, the CPU / working set / PSI figures after a few
# seconds of load, then removes everything (also on Ctrl-C).
#
#   DEMO_KEEP=1       leave the app running; prints a curl line and the stop command
#   DEMO_LOAD_SECS=N  seconds of load (1..60, default 5)
#
# Idempotent: a second run reuses the built binaries, guest apps and image archives.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
if [ "$(id -u)" != 0 ]; then
    echo "demo: run as root (it runs containerd and creates cgroups): sudo make demo" >&2
    exit 1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
release="$CARGO_TARGET_DIR/release"
export SHIM_BIN_DIR="${SHIM_BIN_DIR:-$release}"
export GUEST_APPS_DIR="${GUEST_APPS_DIR:-$root/tests/apps/target/wasm32-wasip2/release}"

echo "demo: [1/4] setup (containerd 1.6, runc, protoc, wasm32-wasip2 target)"
bash scripts/setup.sh

echo "demo: [2/4] binaries: the shim and kubelet-demo (release profile)"
if [ -x "$SHIM_BIN_DIR/containerd-shim-spin-v2" ] && [ -x "$release/kubelet-demo" ]; then
    echo "demo:       reusing $SHIM_BIN_DIR/containerd-shim-spin-v2 and $release/kubelet-demo"
else
    cargo build --release --workspace --bins
fi

echo "demo: [3/4] the cpu load Spin app and its image"
if [ -f "$GUEST_APPS_DIR/spin_cpu.wasm" ]; then
    echo "demo:       reusing $GUEST_APPS_DIR/spin_cpu.wasm"
else
    bash scripts/build-apps.sh
fi
"$release/kubelet-demo" images | sed 's/^ */demo:       /'

echo "demo: [4/4] the pod (Ctrl-C at any point removes everything)"
# exec: Ctrl-C and SIGTERM reach kubelet-demo directly; it tears down, then exits 0.
exec "$release/kubelet-demo"
