//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! The shim lives in `wasm-shim-core`, Spin in `spin-engine`; this binary joins them.
//! `containerd-shim-spin-v2 doctor` inspects the node instead (see `node-doctor`);
//! `containerd-shim-spin-v2 --version` prints the build (see `version`);
//! `--compile-helper` is the shim's own compile helper (see `spin_engine::compile_helper`).

use std::path::PathBuf;

mod version;

/// The musl builds (the release binaries) allocate with mimalloc: with musl's own malloc the
/// request path costs about a third more than in the glibc build. A build with
/// `SHIM_MUSL_MALLOC=1` (cfg `shim_musl_malloc`, see build.rs) keeps musl's malloc, which
/// holds less memory per pod.
#[cfg(all(target_env = "musl", not(shim_musl_malloc)))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `doctor [--run] [--json] [--config FILE] [--containerd BIN] [--kubelet-config FILE]`
/// (see `node_doctor::cli`). `--run` execs `spin-shim-doctor` beside this binary, which has
/// the test pod's CRI client and image builder; the shim does not link them.
fn doctor(args: &[String]) -> i32 {
    let parsed = match node_doctor::cli::DoctorArgs::parse(args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let names = wasm_shim_core::engine::ShimNames::new(spin_engine::NAME);
    let target = node_doctor::Target {
        shim_binary: format!("containerd-shim-{}-v2", names.engine),
        runtime_type: names.runtime_id,
        handler: spin_engine::NAME.to_string(),
        cache_dir_env: spin_engine::cache_mount::DIR_ENV.to_string(),
        cache_default: PathBuf::from(spin_engine::cache_mount::DEFAULT_DIR),
    };
    if parsed.run {
        return exec_test_pod_doctor(&target, args);
    }
    parsed.report(&target, None)
}

/// Replaces this process with `spin-shim-doctor --target <json> <args>`, the binary beside
/// this one; returns only if that fails (exit code 2, the error on stderr).
fn exec_test_pod_doctor(target: &node_doctor::Target, args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let bin = dir.join(DOCTOR_RUN_BIN);
    let json = serde_json::to_string(target).expect("a Target serializes");
    let err = std::process::Command::new(&bin)
        .arg("--target")
        .arg(json)
        .args(args)
        .exec();
    eprintln!(
        "doctor --run: cannot run {}: {err}; the test pod (a CRI client and a probe image) lives \
         in `{DOCTOR_RUN_BIN}`, not in the shim (release archives ship the shim alone): build \
         it with `cargo build --release -p {DOCTOR_RUN_BIN}` and put it beside the shim, or \
         leave --run out",
        bin.display()
    );
    2
}

/// The binary with `doctor --run`'s test pod (crate `crates/spin-shim-doctor`).
const DOCTOR_RUN_BIN: &str = "spin-shim-doctor";

fn main() {
    // First: the compile helper confines itself before it does anything else.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == spin_engine::compile_helper::HELPER_ARG)
    {
        spin_engine::compile_helper::helper_main();
    }
    spin_engine::quiet_library_backtraces();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("doctor") {
        std::process::exit(doctor(&args[2..]));
    }
    // containerd's flag parser takes -v / -version / --version too: all print the same.
    if matches!(
        args.get(1).map(String::as_str),
        Some("version" | "--version" | "-version" | "-v")
    ) {
        print!(
            "{}",
            version::render(&version::build_info(), &version::device_filter_probe())
        );
        return;
    }
    // run_shim checks every setting of the shim before it serves.
    wasm_shim_core::run_shim(std::sync::Arc::new(spin_engine::SpinEngine));
}
