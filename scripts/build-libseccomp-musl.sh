#!/usr/bin/env bash
# Builds a static libseccomp.a for a musl target from Debian's own source package
# (`apt-get source libseccomp`), for the release binaries (scripts/release.sh).
#
# Why from source: Debian's libseccomp-dev ships a libseccomp.a, but it is compiled against
# glibc's headers with _FORTIFY_SOURCE and references glibc-only symbols (__fprintf_chk), so
# it does not link against musl. Debian has no musl build of libseccomp, so the same source
# the Debian package is built from (with Debian's patches applied) is compiled here with the
# musl compiler wrappers of musl-tools (x86_64) and musl-dev:arm64 (aarch64, driving
# gcc-aarch64-linux-gnu). Kernel UAPI headers come from linux-libc-dev /
# linux-libc-dev-arm64-cross, exposed to the musl compiler through a private include dir.
#
# usage: build-libseccomp-musl.sh ARCH OUT_DIR   (ARCH: x86_64 | aarch64)
# Leaves OUT_DIR/lib/libseccomp.a; a second run with the same source version does nothing.
set -euo pipefail
arch="${1:?usage: build-libseccomp-musl.sh x86_64|aarch64 OUT_DIR}"
out="${2:?usage: build-libseccomp-musl.sh x86_64|aarch64 OUT_DIR}"
case "$arch" in
    x86_64)
        cc=musl-gcc host=x86_64-linux-musl
        uapi=(/usr/include/linux /usr/include/asm-generic /usr/include/x86_64-linux-gnu/asm) ;;
    aarch64)
        cc=aarch64-linux-musl-gcc host=aarch64-linux-musl
        uapi=(/usr/aarch64-linux-gnu/include/linux /usr/aarch64-linux-gnu/include/asm-generic /usr/aarch64-linux-gnu/include/asm) ;;
    *) echo "build-libseccomp-musl: unknown ARCH '$arch' (use x86_64 or aarch64)" >&2; exit 2 ;;
esac
command -v "$cc" >/dev/null || { echo "build-libseccomp-musl: $cc not found: run scripts/setup.sh" >&2; exit 1; }
for d in "${uapi[@]}"; do
    [ -d "$d" ] || { echo "build-libseccomp-musl: kernel headers $d missing: run scripts/setup.sh" >&2; exit 1; }
done

# The version of the source is the version of the installed libseccomp-dev (same Debian suite).
version="$(dpkg-query -W -f='${Version}' libseccomp-dev)"
stamp="$out/.built-$version"
[ -f "$stamp" ] && [ -f "$out/lib/libseccomp.a" ] && exit 0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq --only-source "libseccomp=$version" >/dev/null 2>&1) || {
    echo "build-libseccomp-musl: 'apt-get source libseccomp=$version' failed: the deb-src entries scripts/setup.sh adds are needed (then apt-get update)" >&2
    exit 1
}
src="$(find "$work" -maxdepth 1 -type d -name 'libseccomp-*' | head -1)"
mkdir -p "$work/uapi"
for d in "${uapi[@]}"; do ln -s "$d" "$work/uapi/$(basename "$d")"; done

rm -rf "$out" && mkdir -p "$out"
(
    cd "$src"
    # Reproducible objects: no build paths in them, and the Debian changelog's date for anything
    # that stamps one.
    export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -STimestamp)}"
    CC="$cc" CFLAGS="-O2 -fPIC -isystem $work/uapi -ffile-prefix-map=$work=/src" \
        ./configure --host="$host" --prefix="$out" --enable-static --disable-shared \
        --disable-python >"$work/configure.log" 2>&1 ||
        { tail -30 "$work/configure.log" >&2; echo "build-libseccomp-musl: configure failed" >&2; exit 1; }
    make -j"$(nproc)" -C src libseccomp.la >"$work/make.log" 2>&1 ||
        { tail -30 "$work/make.log" >&2; echo "build-libseccomp-musl: make failed" >&2; exit 1; }
    make -C src install-libLTLIBRARIES >>"$work/make.log" 2>&1
    make -C include install >>"$work/make.log" 2>&1
)
# No glibc-only symbol may be left (the reason for this script).
if nm -u "$out/lib/libseccomp.a" | grep -E '__[a-z]+_chk$' >&2; then
    echo "build-libseccomp-musl: $out/lib/libseccomp.a references glibc symbols" >&2
    exit 1
fi
touch "$stamp"
echo "build-libseccomp-musl: $out/lib/libseccomp.a ($arch, libseccomp $version)"
