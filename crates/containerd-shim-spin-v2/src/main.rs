//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! The shim lives in `wasm-shim-core`, Spin in `spin-engine`; this binary joins them.

fn main() {
    wasm_shim_core::run_shim(std::sync::Arc::new(spin_engine::SpinEngine));
}
