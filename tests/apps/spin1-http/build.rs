// A binary exports only `_start` unless told: export Spin 1.x's functions too, as TinyGo's
// `-target=wasi` builds of Spin 1.x-era Go apps did.
fn main() {
    for name in [
        "handle-http-request",
        "handle-redis-message",
        "canonical_abi_realloc",
        "canonical_abi_free",
    ] {
        println!("cargo:rustc-link-arg-bins=--export={name}");
    }
}
