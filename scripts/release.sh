#!/usr/bin/env bash
# Release archives: a static (musl, libseccomp linked in) containerd-shim-spin-v2 for each
# architecture, packed reproducibly as
#   $RELEASE_OUT/containerd-shim-spin-v2-<version>-linux-<arch>.tar.gz  (+ .sha256 beside it)
#
# usage: release.sh [ARCH...]            build and archive (default: x86_64 aarch64)
#        release.sh build ARCH [PKG BIN] only build (the shim, or binary BIN of package PKG
#                                        with the same toolchain and flags, e.g. spin-runtime
#                                        spin-serve for the aarch64 test); prints its path
#        release.sh archive ARCH BINARY  only archive an already built binary
# Environment: CARGO_TARGET_DIR (default ./target), RELEASE_OUT (default
# $CARGO_TARGET_DIR/dist), SOURCE_DATE_EPOCH (default: the last commit's time, else 0),
# CARGO_NICE (a nice(1) level for the build, default 0), RELEASE_PROFILE (the cargo profile
# of `build`, default release; `make test` builds with static-check, see Cargo.toml),
# SHIM_MUSL_MALLOC (1: the shim allocates with musl's malloc instead of mimalloc: ~2.7 MiB
# less per idle pod at 100 pods, ~19% more instructions per request; see README).
# SHIM_LINK_NO_PIE (1: a static executable at a fixed address instead of a static-pie: ~2 MiB
# less per pod, its code and data not randomized; see README).
#
# Reproducible: same sources and toolchain give the same bytes, whatever the checkout's or
# the target dir's path: build paths are remapped in the Rust and C objects, the tar lists
# files sorted with fixed owner and mtime (SOURCE_DATE_EPOCH), gzip stores no name or time.
set -euo pipefail
shopt -s inherit_errexit
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
out="${RELEASE_OUT:-$CARGO_TARGET_DIR/dist}"
name=containerd-shim-spin-v2
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)"
[ -n "$version" ] || { echo "release: no version in [workspace.package] of Cargo.toml" >&2; exit 1; }
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH="$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)"
fi
export SOURCE_DATE_EPOCH

triple() {
    case "$1" in
        x86_64 | aarch64) echo "$1-unknown-linux-musl" ;;
        *) echo "release: unknown architecture '$1' (use x86_64 or aarch64)" >&2; return 2 ;;
    esac
}

# target_env ARCH: builds libseccomp for ARCH's musl target and exports the per-target
# compiler, linker, flags and library path for it (so call it in this shell, not in a
# command substitution). Everything is per target, so one cargo invocation can build
# several architectures.
target_env() {
    local arch="$1" t T cc sysroot
    t="$(triple "$arch")"
    T="$(echo "$t" | tr a-z- A-Z_)"
    local seccomp="$CARGO_TARGET_DIR/libseccomp-musl/$arch"
    bash "$root/scripts/build-libseccomp-musl.sh" "$arch" "$seccomp" >&2
    rustup target list --installed 2>/dev/null | grep -qx "$t" ||
        { echo "release: rust target $t not installed: run scripts/setup.sh" >&2; return 1; }
    case "$arch" in
        x86_64) cc=musl-gcc ;;
        aarch64)
            cc=aarch64-linux-musl-gcc
            # rustc links with its own self-contained musl crt and libc; the cross gcc only
            # drives the aarch64 linker.
            export "CARGO_TARGET_${T}_LINKER=aarch64-linux-gnu-gcc"
            export "AR_${t//-/_}=aarch64-linux-gnu-ar" ;;
    esac
    export "CC_${t//-/_}=$cc"
    # No build path in the objects: the checkout, the target dir, cargo's registry and the
    # toolchain are named by fixed prefixes.
    sysroot="$(rustc --print sysroot)"
    local cargo_home="${CARGO_HOME:-$HOME/.cargo}"
    local maps=("$root=/build/$name" "$CARGO_TARGET_DIR=/build/target" "$cargo_home=/cargo" "$sysroot=/rustc")
    # mimalloc (the musl builds' allocator) commits its arenas lazily: committed eagerly, as
    # by default on Linux, they are advised for transparent huge pages and a serving process
    # holds ~20 MiB more anonymous memory (measured with spin-serve: 24.6 vs 5.1 MiB).
    local rf="" cf="-O2 -DMI_DEFAULT_ARENA_EAGER_COMMIT=0"
    for m in "${maps[@]}"; do
        rf+=" --remap-path-prefix=$m"
        cf+=" -ffile-prefix-map=$m"
    done
    # SHIM_LINK_NO_PIE=1: a static executable at a fixed address instead of a static-pie, so
    # the loader writes no relocated copy of its data per pod (the shim's build.rs refuses
    # the variable for a musl build without this flag).
    if [ "${SHIM_LINK_NO_PIE:-0}" = 1 ]; then rf+=" -C relocation-model=static"; fi
    # libseccomp-sys links libseccomp statically (LIBSECCOMP_LINK_TYPE below); the archive
    # built above is found through this target's own search path, since libseccomp-sys's
    # LIBSECCOMP_LIB_PATH would be one directory for every target of the build.
    export "CARGO_TARGET_${T}_RUSTFLAGS=${rf# } -L native=$seccomp/lib"
    export "CFLAGS_${t//-/_}=$cf"
}

# build ARCH... | build ARCH PKG BIN: one cargo build of the shim binary alone (or of BIN of PKG) for
# each ARCH's musl target (host build scripts and proc macros are compiled once for all);
# prints the binaries' paths, one line each, in the order of ARCH.
build() {
    local pkg="$name" bin_name="$name" arches=("$@") targets=() a
    # ARCH PKG BIN: another binary of the workspace, for one architecture.
    if [ "$#" -eq 3 ] && ! triple "$2" >/dev/null 2>&1; then
        arches=("$1") pkg="$2" bin_name="$3"
    fi
    for a in "${arches[@]}"; do
        target_env "$a"
        targets+=(--target "$(triple "$a")")
    done
    export LIBSECCOMP_LINK_TYPE=static
    unset LIBSECCOMP_LIB_PATH
    # The release profile's line tables are stripped from the archive anyway: not generating
    # them saves compile and link time. Incremental compilation (on in the profile) partitions
    # code by the history of the target dir, so it is off for a byte-reproducible binary.
    export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_INCREMENTAL=0
    local profile="${RELEASE_PROFILE:-release}"
    nice -n "${CARGO_NICE:-0}" cargo build --locked --profile "$profile" "${targets[@]}" \
        -p "$pkg" --bin "$bin_name" >&2
    for a in "${arches[@]}"; do
        local bin="$CARGO_TARGET_DIR/$(triple "$a")/$profile/$bin_name"
        # A release binary must need no loader: refuse one with an interpreter or a needed
        # shared library (a static-pie has a DYNAMIC segment, for its own relocation, and
        # nothing else).
        if readelf -lW "$bin" | grep -q INTERP || readelf -dW "$bin" | grep -q NEEDED; then
            echo "release: $bin is not statically linked" >&2
            readelf -d "$bin" >&2 || true
            return 1
        fi
        echo "$bin"
    done
}

# archive ARCH BINARY: the tar.gz and its .sha256 in $out.
# The archive holds one member, `containerd-shim-spin-v2`, at its root, as runtime-class-
# manager's downloader expects: it unpacks the archive into the installer's asset directory,
# renaming `containerd-shim-*` members after the Shim resource, and its node installer then
# installs every file there as a shim (so a LICENSE or a directory level would break it).
archive() {
    local arch="$1" bin="$2"
    [ -x "$bin" ] || { echo "release: $bin is not an executable file" >&2; return 1; }
    local base="$name-$version-linux-$arch"
    local objcopy=objcopy machine want
    case "$arch" in
        x86_64) want="X86-64" ;;
        aarch64) want="AArch64" objcopy=aarch64-linux-gnu-objcopy ;;
        *) triple "$arch" >/dev/null ;;
    esac
    machine="$(readelf -h "$bin" 2>/dev/null | sed -n 's/^ *Machine: *//p')"
    [[ "$machine" == *"$want"* ]] ||
        { echo "release: $bin is not an $arch ELF executable (machine: ${machine:-not ELF})" >&2; return 1; }
    local stage
    stage="$(mktemp -d)"
    mkdir -p "$out"
    # Without the DWARF line tables of the release profile (most of the file); the symbol
    # table stays, so a panic's backtrace still names functions.
    "$objcopy" --strip-debug "$bin" "$stage/$name"
    chmod 0755 "$stage/$name"
    # Fixed mtime, owner and mode; gzip -n stores no name or timestamp.
    tar -C "$stage" --sort=name --format=gnu --mtime="@$SOURCE_DATE_EPOCH" \
        --owner=0 --group=0 --numeric-owner -cf - "$name" | gzip -9 -n >"$out/$base.tar.gz"
    rm -rf "$stage"
    (cd "$out" && sha256sum "$base.tar.gz" >"$base.tar.gz.sha256")
    echo "release: $out/$base.tar.gz $(cut -d' ' -f1 "$out/$base.tar.gz.sha256") ($(stat -c %s "$out/$base.tar.gz") bytes)"
}

case "${1:-}" in
    build) build "${2:?usage: release.sh build ARCH [PKG BIN]}" "${@:3}" ;;
    archive) archive "${2:?usage: release.sh archive ARCH BINARY}" "${3:?usage: release.sh archive ARCH BINARY}" ;;
    *)
        arches=("$@")
        [ "${#arches[@]}" -gt 0 ] || arches=(x86_64 aarch64)
        for a in "${arches[@]}"; do triple "$a" >/dev/null; done
        start=$SECONDS
        mapfile -t bins < <(build "${arches[@]}")
        [ "${#bins[@]}" -eq "${#arches[@]}" ] || { echo "release: the build failed" >&2; exit 1; }
        echo "release: built ${arches[*]} in $((SECONDS - start)) s" >&2
        for i in "${!arches[@]}"; do
            archive "${arches[$i]}" "${bins[$i]}"
        done ;;
esac
