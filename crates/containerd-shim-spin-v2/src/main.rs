//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! The shim lives in `wasm-shim-core`, Spin in `spin-engine`; this binary joins them.
//! `containerd-shim-spin-v2 doctor` inspects the node instead (see `node-doctor`);
//! `containerd-shim-spin-v2 --version` prints the build (see `version`);
//! `--compile-helper` is the shim's own compile helper (see `spin_engine::compile_helper`).

use std::path::PathBuf;

mod version;

/// The musl builds (the release binaries) allocate with mimalloc: with musl's own malloc the
/// request path costs about a third more than in the glibc build.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DOCTOR_USAGE: &str = "usage: containerd-shim-spin-v2 doctor [--run] [--json] [--config FILE] [--containerd BIN] [--kubelet-config FILE]\n  --run  also run a test pod through containerd's CRI socket and compare its pod and container CPU as kubelet would";

/// `doctor [--run] [--json] [--config FILE] [--containerd BIN] [--kubelet-config FILE]`.
fn doctor(args: &[String]) -> i32 {
    let mut opts = node_doctor::Options::default();
    let mut json = false;
    let mut run = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| match it.next() {
            Some(v) => Some(PathBuf::from(v)),
            None => {
                eprintln!("doctor: {name} needs a value\n{DOCTOR_USAGE}");
                None
            }
        };
        match a.as_str() {
            "--json" => json = true,
            "--run" => run = true,
            "--config" => match value("--config") {
                Some(v) => opts.config = Some(v),
                None => return 2,
            },
            "--containerd" => match value("--containerd") {
                Some(v) => opts.containerd = Some(v),
                None => return 2,
            },
            "--kubelet-config" => match value("--kubelet-config") {
                Some(v) => opts.kubelet_config = Some(v),
                None => return 2,
            },
            "-h" | "--help" => {
                println!("{DOCTOR_USAGE}");
                return 0;
            }
            other => {
                eprintln!("doctor: unknown argument `{other}`\n{DOCTOR_USAGE}");
                return 2;
            }
        }
    }
    let names = wasm_shim_core::engine::ShimNames::new(spin_engine::NAME);
    let target = node_doctor::Target {
        shim_binary: format!("containerd-shim-{}-v2", names.engine),
        runtime_type: names.runtime_id,
        handler: spin_engine::NAME.to_string(),
        cache_dir_env: spin_engine::cache_mount::DIR_ENV.to_string(),
        cache_default: PathBuf::from(spin_engine::cache_mount::DEFAULT_DIR),
    };
    let mut report = node_doctor::inspect(&target, &opts);
    if run {
        let check = node_doctor::run::test_pod(&target, &report.facts);
        report.checks.push(check);
    }
    if json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    report.exit_code()
}

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
    wasm_shim_core::run_shim(std::sync::Arc::new(spin_engine::SpinEngine));
}
