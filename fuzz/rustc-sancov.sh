#!/bin/sh
# RUSTC_WRAPPER of the fuzz build. Adds libFuzzer's coverage instrumentation (SanitizerCoverage
# through stable `-C` flags, the ones cargo-fuzz passes) to the crates whose code the targets
# exercise: ours and the parsers they call. Everything else (wasmtime, libcontainer, tokio...)
# is compiled plain, which keeps the build and every execution cheaper. scripts/fuzz.sh builds
# with an explicit --target, so cargo compiles build scripts, proc macros and their
# dependencies separately and without --target: those stay plain too (a build script linked
# against an instrumented protobuf misses libFuzzer's __sanitizer_cov_* symbols).
rustc="$1"
shift
name=""
prev=""
for_target=""
for a in "$@"; do
    [ "$prev" = "--crate-name" ] && name="$a"
    [ "$a" = "--target" ] && for_target=1
    prev="$a"
done
[ -n "$for_target" ] || exec "$rustc" "$@"
case "$name" in
    cgroup_placement | wasm_shim_core | spin_runtime | spin_app_format | \
    cgroups_path | mountinfo | runtime_options | spin_manifest | locked_app | oci_manifest | \
    serde_json | toml | toml_edit | toml_parser | toml_datetime | winnow | protobuf | base64 | glob)
        exec "$rustc" "$@" \
            -Cpasses=sancov-module \
            -Cllvm-args=-sanitizer-coverage-level=4 \
            -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
            -Cllvm-args=-sanitizer-coverage-pc-table \
            -Cllvm-args=-sanitizer-coverage-trace-compares
        ;;
esac
exec "$rustc" "$@"
