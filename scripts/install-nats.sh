#!/usr/bin/env bash
# Fetches Debian trixie's `nats-server` package (fetch-debs.sh: apt with a temporary sources
# list, the system's apt configuration untouched) and unpacks it with `dpkg -x` into a cache
# directory outside the clone, for the NATS trigger's tests. Nothing is installed over the
# system. Prints the path of the `nats-server` executable. Idempotent.
#
# Usage: scripts/install-nats.sh   (NATS_CACHE overrides the cache directory)
set -euo pipefail
want="2.10"
cache="${NATS_CACHE:-/var/cache/containerd-shim-spin-v2/nats}"
bin="$cache/root/usr/sbin/nats-server"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v$want"; then
    echo "$bin"
    exit 0
fi
work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
bash "$(dirname "$0")/fetch-debs.sh" trixie "$cache" "$work" "nats-server=$want*" || {
    echo "install-nats: fix: set want= in $0 to a version Debian trixie has" >&2
    exit 1
}
rm -rf "$cache/root"
mkdir -p "$cache/root"
dpkg -x "$(ls "$work"/nats-server_*.deb | head -n1)" "$cache/root"
"$bin" --version >&2 || {
    echo "install-nats: $bin does not run on this host" >&2
    exit 1
}
echo "$bin"
