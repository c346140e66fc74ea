//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.

fn main() {
    containerd_shim_wasm::run_shim("io.containerd.spin.v2", None);
}
