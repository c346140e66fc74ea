//! A Spin 1.x-style HTTP module with the exact import and export names of an app built with
//! the Spin Go SDK 2.2.1 (`tinygo build -target=wasip1 -buildmode=c-shared`, the SDK's
//! wit-bindgen 0.2 C bindings): it exports `handle-http-request`, `canonical_abi_realloc`,
//! `canonical_abi_free`, the SDK's marker functions `spin-sdk-version-2.2.1`,
//! `spin-sdk-language-go` and `spin-sdk-commit-<commit>`, and `_initialize` (a reactor); it
//! imports `spin-config`, `wasi-outbound-http` and `key-value` besides WASI preview 1.
//! TinyGo is not reachable from this build environment, so the module is written in Rust
//! against the Go SDK's WIT (its `wit/` at v2.2.1) with the bindings in `spin1.rs`.

mod spin1;

spin1::export_handle_http_request!("go-sdk-2.2.1");

extern "C" {
    fn __wasm_call_ctors();
}

/// A reactor's initializer, as TinyGo's `-buildmode=c-shared` exports it (and wasi-libc's
/// crt1-reactor defines it): runs the module's constructors once, before any other export.
///
/// # Safety
/// Called once by the host, before any other export.
#[export_name = "_initialize"]
pub unsafe extern "C" fn initialize() {
    __wasm_call_ctors();
}

/// The Go SDK's version marker (sdk_version/sdk-version-go-template.c).
#[export_name = "spin-sdk-version-2.2.1"]
pub extern "C" fn spin_sdk_version() {}

/// The Go SDK's language marker.
#[export_name = "spin-sdk-language-go"]
pub extern "C" fn spin_sdk_language() {}

/// The Go SDK's commit marker (v2.2.1's commit).
#[export_name = "spin-sdk-commit-72a5788f5a7c637fc42926341eb361b717617324"]
pub extern "C" fn spin_sdk_commit() {}
