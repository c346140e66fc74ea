//! `spin-shim-doctor --target <json> [doctor arguments]`: `containerd-shim-spin-v2 doctor
//! --run`. The shim execs this binary (found beside it) with its [`node_doctor::Target`] as
//! JSON, so the test pod's CRI client and probe-image builder are not linked into the shim.

mod run;

const USAGE: &str = "usage: spin-shim-doctor --target <json> [doctor arguments]\n  started by `containerd-shim-spin-v2 doctor --run`, which passes its target; run that instead";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (target, rest) = match args.split_first() {
        Some((flag, rest)) if flag == "--target" && !rest.is_empty() => {
            match serde_json::from_str::<node_doctor::Target>(&rest[0]) {
                Ok(t) => (t, &rest[1..]),
                Err(e) => {
                    eprintln!("spin-shim-doctor: --target is not a doctor target ({e})\n{USAGE}");
                    std::process::exit(2);
                }
            }
        }
        _ => {
            eprintln!("spin-shim-doctor: no --target <json>\n{USAGE}");
            std::process::exit(2);
        }
    };
    let parsed = match node_doctor::cli::DoctorArgs::parse(rest) {
        Ok(p) => p,
        Err(code) => std::process::exit(code),
    };
    std::process::exit(parsed.report(&target, Some(&run::test_pod)));
}
