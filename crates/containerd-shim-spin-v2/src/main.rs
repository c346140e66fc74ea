//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! Everything lives in `containerd-shim-wasm`; this binary plugs in the Spin engine.

fn main() {
    containerd_shim_wasm::run_shim(
        "io.containerd.spin.v2",
        Some(spin_runtime::run_in_container),
    );
}
