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
    openssl
    # make bench profiles the request path (perf record -e cpu-clock).
    linux-perf)
# Release binaries (scripts/release.sh): static musl builds for x86_64 and aarch64, with
# libseccomp compiled from Debian's source package by the musl compilers
# (scripts/build-libseccomp-musl.sh says why), and qemu-user for the aarch64 test.
need_pkgs+=(musl-tools musl-dev:arm64 gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu
    linux-libc-dev-arm64-cross gperf dpkg-dev qemu-user-static)
# componentize-js (the JS test app) runs on node with npm; a node already installed (e.g.
# NodeSource's, which bundles npm) is used as it is.
command -v npm >/dev/null || need_pkgs+=(nodejs npm)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# musl-dev:arm64 (the aarch64 musl headers, libc and gcc wrapper) is a foreign-architecture
# package; `apt-get source libseccomp` needs deb-src entries. Both change apt's lists.
apt_changed=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt_changed=1
fi
src_list=/etc/apt/sources.list.d/containerd-shim-spin-v2-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    suite="$(. /etc/os-release && echo "$VERSION_CODENAME")"
    cat >"$src_list" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_changed=1
fi
if [ "${#missing[@]}" -gt 0 ] || [ "$apt_changed" = 1 ]; then
    echo "setup: installing ${missing[*]:-nothing (apt sources changed: updating lists)}"
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
    for t in wasm32-wasip2 wasm32-wasip1 x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
        rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    done
fi
echo "setup: done"
