#!/usr/bin/env bash
# Fetches Debian's `containerd` package from another Debian suite (apt with a temporary
# sources list, so the system's own apt configuration is untouched) and unpacks it with
# `dpkg -x` into a cache directory. Idempotent: a later run with the binary in place only
# prints the binary directory. Used by install-containerd-1.7.sh (trixie) and
# install-containerd-2.sh (sid).
#
# Usage: scripts/install-containerd-deb.sh SUITE VERSION_PREFIX CACHE_DIR  -> prints CACHE_DIR/root/usr/bin
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 SUITE VERSION_PREFIX CACHE_DIR" >&2; exit 2; }
suite="$1"
want="$2"
cache="$3"
name="install-containerd ($suite $want)"
bindir="$cache/root/usr/bin"

if [ -x "$bindir/containerd" ] && "$bindir/containerd" --version 2>/dev/null | grep -q " $want"; then
    echo "$bindir"
    exit 0
fi

mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial"
work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
echo "deb http://deb.debian.org/debian $suite main" >"$work/$suite.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/$suite.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$cache/apt/lists"
    -o "Dir::Cache::Archives=$cache/apt/archives"
    -o "APT::Get::List-Cleanup=0"
)
echo "$name: fetching the $suite package index" >&2
apt-get "${apt_opts[@]}" update -qq >&2
# Only the .deb file is fetched (no install, no dependency resolution against the host).
(cd "$work" && apt-get "${apt_opts[@]}" download "containerd=$want*" >&2) || {
    echo "$name: containerd $want is not in Debian $suite; available:" >&2
    apt-cache "${apt_opts[@]}" policy containerd >&2 || true
    echo "fix: set the version variable of the calling script to an available version" >&2
    exit 1
}
deb="$(ls "$work"/containerd_*.deb | head -n1)"
rm -rf "$cache/root"
mkdir -p "$cache/root"
dpkg -x "$deb" "$cache/root"
if ! "$bindir/containerd" --version >&2; then
    echo "$name: $bindir/containerd does not run on this host" >&2
    exit 1
fi
echo "$bindir"
