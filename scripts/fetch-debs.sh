#!/usr/bin/env bash
# Downloads .deb files from another Debian suite without touching the system's apt
# configuration: apt runs with a temporary sources list, and its package lists and
# archives live in a cache directory. Only the named packages are fetched (no install,
# no dependency resolution against the host). Used by install-containerd-deb.sh and
# install-docker.sh, which unpack the files with `dpkg -x`.
#
# Usage: scripts/fetch-debs.sh SUITE CACHE_DIR OUT_DIR PACKAGE[=VERSION*]...
#   A package prefixed with `?` is fetched only if the suite has it.
set -euo pipefail

[ $# -ge 4 ] || { echo "usage: $0 SUITE CACHE_DIR OUT_DIR PACKAGE[=VERSION*]..." >&2; exit 2; }
suite="$1"
cache="$2"
out="$3"
shift 3

mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial" "$out"
list="$(mktemp)"
trap 'rm -f "$list"' EXIT
echo "deb http://deb.debian.org/debian $suite main" >"$list"
apt_opts=(
    -o "Dir::Etc::SourceList=$list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$cache/apt/lists"
    -o "Dir::Cache::Archives=$cache/apt/archives"
    -o "APT::Get::List-Cleanup=0"
)
echo "fetch-debs: fetching the $suite package index" >&2
apt-get "${apt_opts[@]}" update -qq >&2
for spec in "$@"; do
    optional=""
    if [ "${spec#\?}" != "$spec" ]; then
        optional=1
        spec="${spec#\?}"
    fi
    pkg="${spec%%=*}"
    if [ -n "$optional" ] && ! apt-cache "${apt_opts[@]}" show "$pkg" >/dev/null 2>&1; then
        continue
    fi
    (cd "$out" && apt-get "${apt_opts[@]}" download "$spec" >&2) || {
        echo "fetch-debs: $spec is not in Debian $suite; available:" >&2
        apt-cache "${apt_opts[@]}" policy "$pkg" >&2 || true
        exit 1
    }
done
