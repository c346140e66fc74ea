#!/usr/bin/env bash
# Fetches containerd 2.x from Debian sid (2.1.9 when this was written) and unpacks it into
# a cache directory (see install-containerd-deb.sh). Idempotent.
#
# Usage: scripts/install-containerd-2.sh          -> prints e.g. /var/cache/.../usr/bin
# Env:   CONTAINERD2_CACHE    cache dir (default /var/cache/containerd-shim-spin-v2/containerd-2)
#        CONTAINERD2_VERSION  package version prefix (default 2.)
set -euo pipefail
exec bash "$(dirname "$0")/install-containerd-deb.sh" sid "${CONTAINERD2_VERSION:-2.}" \
    "${CONTAINERD2_CACHE:-/var/cache/containerd-shim-spin-v2/containerd-2}"
