#!/usr/bin/env bash
# Builds tests/apps/js-sdk-hello into tests/apps/target/js/js_sdk_hello.wasm the way Spin's
# http-js template does (spin-js-sdk tag spin/templates/v3.6, the newest whose packages the
# npm registry serves): `npm ci`, then `npm run build` = esbuild bundle (build.mjs,
# SpinEsbuildPlugin) + `j2w` from @spinframework/build-tools 1.0.7 (componentize-js 0.19)
# for the world merged from the dependencies' package.json "witDependencies"
# (@spinframework/wasi-http-proxy 1.0.1: exports wasi:http/incoming-handler@0.2.3).
# package.json names @bytecodealliance/preview2-shim, which build-tools imports but declares
# only as an optional peer: `npm install` without a lock happens to hoist it, `npm ci` of the
# committed lock (reproducible builds) would not.
# node_modules is cached in tests/apps/target/js/sdk-tool and reinstalled when package.json
# or package-lock.json change; skipped when the output is newer than its inputs.
# Cost: ~25 s npm ci (once, ~390 MB) + ~20-30 s build on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
app="$root/tests/apps/js-sdk-hello"
out_dir="$root/tests/apps/target/js"
out="$out_dir/js_sdk_hello.wasm"
tool="$out_dir/sdk-tool"
if [ -f "$out" ] && [ "$out" -nt "$0" ] &&
    [ -z "$(find "$app" -newer "$out" -type f -not -name spin.toml -print -quit)" ]; then
    echo "js-sdk-app: $out is up to date"
    exit 0
fi
command -v npm >/dev/null || { echo "js-sdk-app: npm is missing (run scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$tool"
if ! cmp -s "$app/package.json" "$tool/package.json" ||
    ! cmp -s "$app/package-lock.json" "$tool/package-lock.json" ||
    [ ! -x "$tool/node_modules/.bin/j2w" ]; then
    echo "js-sdk-app: npm ci (@spinframework/build-tools, esbuild, itty-router)"
    rm -rf "$tool/node_modules"
    cp "$app/package.json" "$app/package-lock.json" "$tool/"
    (cd "$tool" && npm ci --no-audit --no-fund --silent)
fi
# The template's layout, with the cached node_modules beside the sources.
rm -rf "$tool/src" "$tool/build" "$tool/dist"
cp -r "$app/src" "$app/build.mjs" "$tool/"
echo "js-sdk-app: npm run build"
(cd "$tool" && npm run --silent build >/dev/null)
# j2w reports a componentize failure but exits 0: check the output exists.
[ -s "$tool/dist/js-sdk-hello.wasm" ] || { echo "js-sdk-app: j2w wrote no component" >&2; exit 1; }
mv "$tool/dist/js-sdk-hello.wasm" "$out.partial"
mv "$out.partial" "$out"
echo "js-sdk-app: $out ($(stat -c %s "$out") bytes)"
