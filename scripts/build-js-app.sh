#!/usr/bin/env bash
# Builds tests/apps/js-hello into tests/apps/target/js/js_hello.wasm with componentize-js
# (npm registry, pinned) for the wasi:http proxy world, as a JS Spin app is built. The WIT
# is wasmtime-wasi-http's own (the host's), relabelled 0.2.10, the version StarlingMonkey
# in this componentize-js exports. Skipped when the output is newer than its inputs.
# Cost: ~20 s npm install (once) + ~30 s componentize on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
app="$root/tests/apps/js-hello"
out_dir="$root/tests/apps/target/js"
out="$out_dir/js_hello.wasm"
if [ -f "$out" ] && [ "$out" -nt "$app/app.js" ] && [ "$out" -nt "$0" ]; then
    echo "js-app: $out is up to date"
    exit 0
fi
command -v npm >/dev/null || { echo "js-app: npm is missing (run scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$out_dir/tool"
if [ ! -x "$out_dir/tool/node_modules/.bin/componentize-js" ]; then
    echo "js-app: installing componentize-js"
    (cd "$out_dir/tool" && { [ -f package.json ] || npm init -y >/dev/null; } &&
        npm install --no-audit --no-fund --silent @bytecodealliance/componentize-js@0.23.0)
fi
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
http_crate="$(cd "$root" && cargo metadata --format-version 1 --locked 2>/dev/null |
    python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"]=="wasmtime-wasi-http"))')"
wit="$out_dir/wit"
rm -rf "$wit" && mkdir -p "$wit/deps"
cp "$http_crate"/wit/deps/*.wit "$wit/deps/"
# Relabel the packages 0.2.10 (drop feature gates newer than that; @deprecated needs them).
sed -i -E 's/@0\.2\.[0-9]+/@0.2.10/g; /@deprecated/d; s/^(\s*)@since\(version = 0\.2\.1[1-9]\)/\1/' "$wit"/deps/*.wit
cat > "$wit/world.wit" <<'WIT'
package local:js-hello;

world app {
  include wasi:http/proxy@0.2.10;
}
WIT
echo "js-app: componentize-js $app/app.js"
(cd "$out_dir" && ./tool/node_modules/.bin/componentize-js --wit "$wit" -n app -o "$out.partial" "$app/app.js" >/dev/null)
mv "$out.partial" "$out"
echo "js-app: $out ($(stat -c %s "$out") bytes)"
