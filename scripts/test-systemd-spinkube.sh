#!/usr/bin/env bash
# The systemd node scenario (scripts/test-systemd.sh) with SpinKube's node config: containerd
# 1.7 (scripts/install-containerd-1.7.sh) and the `spin` runtime's `options` table
# `SystemdCgroup = true` (scripts/systemd-node/containerd-spinkube.toml). Same needs and
# environment as test-systemd.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(bash "$repo/scripts/install-containerd-1.7.sh")"
export NODE_CONTAINERD_BIN="$bin/containerd"
export NODE_CONTAINERD_CONFIG="$repo/scripts/systemd-node/containerd-spinkube.toml"
exec bash "$repo/scripts/test-systemd.sh" "$@"
