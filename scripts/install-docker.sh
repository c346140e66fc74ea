#!/usr/bin/env bash
# Fetches Debian's Docker Engine (`docker.io`, `docker-cli`, `tini`) from another Debian
# suite (fetch-debs.sh: apt with a temporary sources list, the system's apt configuration
# untouched, only the .deb files downloaded) and unpacks them with `dpkg -x` into a cache
# directory, as install-containerd-deb.sh does for containerd; nothing is installed over
# the system. Idempotent: with dockerd of that version in place it only prints the root.
#
# Usage: scripts/install-docker.sh 26|28   -> prints the unpacked root, e.g.
#        /var/cache/.../docker-28/root (dockerd in usr/sbin, docker and tini in usr/bin)
#   26: Debian trixie's docker.io 26.1.x (runs with containerd 1.7, install-containerd-1.7.sh)
#   28: Debian sid's docker.io 28.x     (runs with containerd 2.x, install-containerd-2.sh)
# Env:   DOCKER_CACHE  cache dir (default /var/cache/containerd-shim-spin-v2/docker-<26|28>)
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 26|28" >&2; exit 2; }
case "$1" in
    26) suite=trixie want=26. ;;
    28) suite=sid want=28. ;;
    *) echo "install-docker: unknown Docker line $1; fix: pass 26 or 28" >&2; exit 2 ;;
esac
cache="${DOCKER_CACHE:-/var/cache/containerd-shim-spin-v2/docker-$1}"
name="install-docker ($suite docker.io $want)"
root="$cache/root"

if [ -x "$root/usr/bin/docker" ] &&
    "$root/usr/sbin/dockerd" --version 2>/dev/null | grep -q "version $want"; then
    echo "$root"
    exit 0
fi

work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
# The client is its own package in newer Debian releases (part of docker.io before);
# tini is dockerd's `--init`. Fetched when the suite has them.
bash "$(dirname "$0")/fetch-debs.sh" "$suite" "$cache" "$work" "docker.io=$want*" \
    "?docker-cli=$want*" "?tini" || {
    echo "$name: fix: use the Docker line Debian $suite carries now" >&2
    exit 1
}
rm -rf "$cache/root"
mkdir -p "$cache/root"
for deb in "$work"/*.deb; do
    dpkg -x "$deb" "$cache/root"
done
for bin in sbin/dockerd bin/docker; do
    if ! "$root/usr/$bin" --version >&2; then
        echo "$name: $root/usr/$bin is missing or does not run on this host" >&2
        exit 1
    fi
done
echo "$root"
