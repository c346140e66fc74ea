#!/usr/bin/env bash
# Fetches Debian's `containerd` package from another Debian suite (fetch-debs.sh: apt
# with a temporary sources list, so the system's own apt configuration is untouched) and
# unpacks it with `dpkg -x` into a cache directory. Idempotent: a later run with the
# binary in place only prints the binary directory. Used by install-containerd-1.7.sh (trixie) and
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

work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
bash "$(dirname "$0")/fetch-debs.sh" "$suite" "$cache" "$work" "containerd=$want*" || {
    echo "$name: fix: set the version variable of the calling script to an available version" >&2
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
