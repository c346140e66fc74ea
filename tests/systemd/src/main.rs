//! `systemd-node-scenario`: runs inside the systemd node (see `scripts/test-systemd.sh`).
//!
//! ```text
//! systemd-node-scenario --socket /run/node-containerd/containerd.sock --image localhost/spin-cpu:test \
//!     [--handler spin] [--command /] [--ctr /path/to/ctr-1.7] [--load-secs 4] [--load-path '/load?n=32'] \
//!     [--case all|systemd|cgroupfs] [--no-psi]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use systemd_node_tests::scenario::{cgroupfs_case, systemd_case, Config};

const USAGE: &str =
    "usage: systemd-node-scenario --socket PATH --image REF [--handler NAME] [--command CMD] \
[--ctr PATH] [--load-secs N] [--load-path PATH] [--case all|systemd|cgroupfs] [--no-psi]";

struct Args {
    cfg: Config,
    case: String,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args> {
    let mut socket = None;
    let mut image = None;
    let mut handler = "spin".to_string();
    let mut command = vec!["/".to_string()];
    let mut ctr = PathBuf::from("ctr");
    let mut load_secs = 4u64;
    let mut load_path = "/load?n=32".to_string();
    let mut case = "all".to_string();
    let mut require_psi = true;
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(value()?)),
            "--image" => image = Some(value()?),
            "--handler" => handler = value()?,
            "--command" => command = value()?.split_whitespace().map(String::from).collect(),
            "--ctr" => ctr = PathBuf::from(value()?),
            "--load-secs" => {
                let v = value()?;
                load_secs = v
                    .parse()
                    .with_context(|| format!("--load-secs {v:?}: not a number of seconds"))?
            }
            "--load-path" => load_path = value()?,
            "--case" => case = value()?,
            "--no-psi" => require_psi = false,
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if !matches!(case.as_str(), "all" | "systemd" | "cgroupfs") {
        bail!("--case {case:?}: expected all, systemd or cgroupfs");
    }
    Ok(Args {
        cfg: Config {
            socket: socket.with_context(|| format!("--socket is required\n{USAGE}"))?,
            image: image.with_context(|| format!("--image is required\n{USAGE}"))?,
            handler,
            command,
            ctr,
            load: Duration::from_secs(load_secs),
            load_path,
            require_psi,
        },
        case,
    })
}

async fn run(args: Args) -> Result<()> {
    if std::fs::metadata("/run/systemd/system").is_err() {
        bail!("systemd is not running here (no /run/systemd/system): run this inside the node, via make test-systemd");
    }
    if args.case != "cgroupfs" {
        let f = systemd_case(&args.cfg)
            .await
            .context("systemd driver case")?;
        println!(
            "PASS systemd driver: pod slice {} us >= 90% of scope {} us ({:.3}x), CRI cpu {} ns, {} requests",
            f.pod_usec,
            f.scope_usec,
            f.pod_usec as f64 / f.scope_usec as f64,
            f.cri_cpu_ns,
            f.requests
        );
    }
    if args.case != "systemd" {
        let f = cgroupfs_case(&args.cfg)
            .await
            .context("cgroupfs driver case")?;
        println!(
            "PASS cgroupfs driver: pod {} us, container {} us ({:.3}x)",
            f.pod_usec,
            f.container_usec,
            f.pod_usec as f64 / f.container_usec as f64
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse_args(std::env::args().skip(1)) {
        Ok(args) => run(args).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAIL: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_overrides() {
        let a = args("--socket /s --image img").unwrap();
        assert_eq!(a.cfg.handler, "spin");
        assert_eq!(a.cfg.command, vec!["/"]);
        assert_eq!(a.case, "all");
        assert!(a.cfg.require_psi);
        let a =
            args("--socket /s --image img --handler runc --case cgroupfs --no-psi --load-secs 9")
                .unwrap();
        assert_eq!(
            (a.cfg.handler.as_str(), a.case.as_str()),
            ("runc", "cgroupfs")
        );
        assert_eq!(a.cfg.load, Duration::from_secs(9));
        assert!(!a.cfg.require_psi);
    }

    #[test]
    fn bad_arguments_name_the_problem() {
        let e = |s| args(s).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(e("--image img").contains("--socket is required"));
        assert!(
            e("--socket /s --image i --case both").contains("expected all, systemd or cgroupfs")
        );
        assert!(e("--socket /s --image i --load-secs x").contains("--load-secs"));
        assert!(e("--socket").contains("--socket needs a value"));
        assert!(e("--bogus").contains("unknown argument"));
    }
}
