#!/usr/bin/env bash
# Installs everything the build, the tests and the demo need on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped quickly.
set -euo pipefail

need_pkgs=(containerd runc busybox-static protobuf-compiler libseccomp-dev pkg-config wrk iproute2 util-linux curl ca-certificates systemd-container
    # Servers the Spin host-interface tests start on loopback (never as services).
    redis-server postgresql mariadb-server mosquitto
    # The metrics test scrapes the app with a real Prometheus.
    prometheus
    # componentize-py (Python SDK test apps) runs from a venv.
    python3-venv
    # openssl s_server and the CLI make the TLS test server and its certificates.
    openssl)
# componentize-js (the JS test app) runs on node with npm; a node already installed (e.g.
# NodeSource's, which bundles npm) is used as it is.
command -v npm >/dev/null || need_pkgs+=(nodejs npm)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The system containerd that the package starts is never used by the project: tests and the
# demo run their own private instances. Stop the packaged service if some init started it.
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
    systemctl disable --now redis-server postgresql mariadb mosquitto prometheus prometheus-node-exporter >/dev/null 2>&1 || true
fi

if command -v rustup >/dev/null; then
    for t in wasm32-wasip2 wasm32-wasip1; do
        rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    done
fi
echo "setup: done"
