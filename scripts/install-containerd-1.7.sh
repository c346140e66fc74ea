#!/usr/bin/env bash
# Fetches containerd 1.7.24 from Debian trixie and unpacks it into a cache directory
# (see install-containerd-deb.sh). Idempotent.
#
# Usage: scripts/install-containerd-1.7.sh        -> prints e.g. /var/cache/.../usr/bin
# Env:   CONTAINERD17_CACHE   cache dir (default /var/cache/containerd-shim-spin-v2/containerd-1.7)
#        CONTAINERD17_VERSION package version prefix (default 1.7.24)
set -euo pipefail
exec bash "$(dirname "$0")/install-containerd-deb.sh" trixie "${CONTAINERD17_VERSION:-1.7.24}" \
    "${CONTAINERD17_CACHE:-/var/cache/containerd-shim-spin-v2/containerd-1.7}"
