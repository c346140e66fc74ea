#!/usr/bin/env bash
# Fetches containerd 1.7.24 from Debian trixie (apt with a temporary sources list, so the
# system's own apt configuration is untouched) and unpacks it with `dpkg -x` into a cache
# directory. Idempotent: a second run only prints the binary directory.
#
# Usage: scripts/install-containerd-1.7.sh        -> prints e.g. /var/cache/.../usr/bin
# Env:   CONTAINERD17_CACHE   cache dir (default /var/cache/containerd-shim-spin-v2/containerd-1.7)
#        CONTAINERD17_VERSION package version prefix (default 1.7.24)
set -euo pipefail

cache="${CONTAINERD17_CACHE:-/var/cache/containerd-shim-spin-v2/containerd-1.7}"
want="${CONTAINERD17_VERSION:-1.7.24}"
bindir="$cache/root/usr/bin"

if [ -x "$bindir/containerd" ] && "$bindir/containerd" --version 2>/dev/null | grep -q " $want"; then
    echo "$bindir"
    exit 0
fi

mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial"
work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
echo "deb http://deb.debian.org/debian trixie main" >"$work/trixie.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/trixie.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$cache/apt/lists"
    -o "Dir::Cache::Archives=$cache/apt/archives"
    -o "APT::Get::List-Cleanup=0"
)
echo "install-containerd-1.7: fetching the trixie package index" >&2
apt-get "${apt_opts[@]}" update -qq >&2
# Only the .deb file is fetched (no install, no dependency resolution against the host).
(cd "$work" && apt-get "${apt_opts[@]}" download "containerd=$want*" >&2) || {
    echo "install-containerd-1.7: containerd $want is not in Debian trixie; available:" >&2
    apt-cache "${apt_opts[@]}" policy containerd >&2 || true
    echo "fix: set CONTAINERD17_VERSION to an available version" >&2
    exit 1
}
deb="$(ls "$work"/containerd_*.deb | head -n1)"
rm -rf "$cache/root"
mkdir -p "$cache/root"
dpkg -x "$deb" "$cache/root"
if ! "$bindir/containerd" --version >&2; then
    echo "install-containerd-1.7: $bindir/containerd does not run on this host" >&2
    exit 1
fi
echo "$bindir"
