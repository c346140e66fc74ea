#!/usr/bin/env bash
# Builds the native and WASI test/demo image archives with oci-image-builder.
# Output: $OUT (default target/images): pause.tar, busybox.tar, wasi-hello.tar
# Import:  ctr -n default image import target/images/pause.tar   (linux/amd64: no platform flags)
# Needs: gcc (static libc), busybox-static (scripts/setup.sh), `make build` and `make apps`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/target/images}"
bin="${SHIM_BIN_DIR:-$root/target/release}/oci-image-builder"
apps="${GUEST_APPS_DIR:-$root/tests/apps/target/wasm32-wasip2/release}"
[ -x "$bin" ] || { echo "build.sh: $bin missing; run: cargo build --release -p oci-image-builder" >&2; exit 1; }
mkdir -p "$out"
gcc -static -O2 -o "$out/pause" "$root/tests/images/pause/pause.c"
"$bin" native --name docker.io/library/pause:test --file "$out/pause:/pause" \
    --entrypoint /pause -o "$out/pause.tar"
[ -x /bin/busybox ] || { echo "build.sh: /bin/busybox missing; apt-get install busybox-static" >&2; exit 1; }
links=()
for a in sh ls cat echo sleep true false env id ps kill mount grep; do links+=(--symlink "/bin/$a:busybox"); done
"$bin" native --name docker.io/library/busybox:test --file /bin/busybox:/bin/busybox "${links[@]}" \
    --cmd /bin/sh -o "$out/busybox.tar"
if [ -f "$apps/wasi-hello.wasm" ]; then
    "$bin" wasi --name docker.io/library/wasi-hello:test --wasm "$apps/wasi-hello.wasm" -o "$out/wasi-hello.tar"
else
    echo "build.sh: $apps/wasi-hello.wasm missing (make apps); skipped wasi-hello.tar" >&2
fi
