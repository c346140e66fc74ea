//! `containerd-shim-spin-v2 doctor [--run] [--json] [--config FILE] [--containerd BIN]
//! [--kubelet-config FILE]`: the arguments, and the report printed from them.
//!
//! `--run` (a test pod through CRI) is not linked into the shim: the shim hands it to the
//! `spin-shim-doctor` binary beside it (see [`DoctorArgs::run`]).

use std::path::PathBuf;

use crate::{Check, Facts, Options, Target};

/// The usage text.
pub const USAGE: &str = "usage: containerd-shim-spin-v2 doctor [--run] [--json] [--config FILE] [--containerd BIN] [--kubelet-config FILE]\n  --run  also run a test pod through containerd's CRI socket and compare its pod and container CPU as kubelet would (needs the spin-shim-doctor binary beside the shim)";

/// The parsed arguments of `doctor`.
#[derive(Debug, Clone, Default)]
pub struct DoctorArgs {
    /// Where to look.
    pub opts: Options,
    /// `--json`: the report as JSON.
    pub json: bool,
    /// `--run`: also run the test pod.
    pub run: bool,
}

/// The test pod: `spin-shim-doctor`'s check, run after the node's checks with their facts.
pub type TestPod<'a> = &'a dyn Fn(&Target, &Facts) -> Check;

impl DoctorArgs {
    /// Parses `args` (after `doctor`). `Err(exit code)` when the arguments are wrong (the
    /// error and the usage are printed on stderr) or were `--help` (usage on stdout, 0).
    pub fn parse(args: &[String]) -> Result<Self, i32> {
        let mut parsed = Self::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| match it.next() {
                Some(v) => Ok(PathBuf::from(v)),
                None => {
                    eprintln!("doctor: {name} needs a value\n{USAGE}");
                    Err(2)
                }
            };
            match a.as_str() {
                "--json" => parsed.json = true,
                "--run" => parsed.run = true,
                "--config" => parsed.opts.config = Some(value("--config")?),
                "--containerd" => parsed.opts.containerd = Some(value("--containerd")?),
                "--kubelet-config" => parsed.opts.kubelet_config = Some(value("--kubelet-config")?),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Err(0);
                }
                other => {
                    eprintln!("doctor: unknown argument `{other}`\n{USAGE}");
                    return Err(2);
                }
            }
        }
        Ok(parsed)
    }

    /// Inspects the node for `target`, runs `test_pod` when `--run` asked for it, prints the
    /// report and returns the exit code ([`crate::Report::exit_code`]). `--run` without a
    /// `test_pod` is an error (2) naming the binary that has it.
    pub fn report(&self, target: &Target, test_pod: Option<TestPod<'_>>) -> i32 {
        let test_pod = match (self.run, test_pod) {
            (true, None) => {
                eprintln!(
                    "doctor: --run is not in this binary: run `spin-shim-doctor` (built beside the \
                     shim by `cargo build --release --workspace`), or leave --run out"
                );
                return 2;
            }
            (true, Some(t)) => Some(t),
            (false, _) => None,
        };
        let mut report = crate::inspect(target, &self.opts);
        if let Some(test_pod) = test_pod {
            let check = test_pod(target, &report.facts);
            report.checks.push(check);
        }
        if self.json {
            println!("{}", report.json());
        } else {
            print!("{}", report.text());
        }
        report.exit_code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_every_option_and_refuses_the_rest() {
        let p = DoctorArgs::parse(&args(&["--run", "--json", "--config", "/c.toml"])).unwrap();
        assert!(p.run && p.json);
        assert_eq!(p.opts.config, Some(PathBuf::from("/c.toml")));
        assert_eq!(DoctorArgs::parse(&args(&["--config"])).unwrap_err(), 2);
        assert_eq!(DoctorArgs::parse(&args(&["--bogus"])).unwrap_err(), 2);
        assert_eq!(DoctorArgs::parse(&args(&["--help"])).unwrap_err(), 0);
    }

    #[test]
    fn run_without_the_test_pod_is_an_error() {
        let p = DoctorArgs::parse(&args(&["--run"])).unwrap();
        let target = Target {
            runtime_type: "io.containerd.spin.v2".into(),
            shim_binary: "containerd-shim-spin-v2".into(),
            handler: "spin".into(),
            cache_dir_env: "X".into(),
            cache_default: PathBuf::from("/nonexistent"),
        };
        assert_eq!(p.report(&target, None), 2);
    }
}
