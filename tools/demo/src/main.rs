//! `kubelet-demo`: the `make demo` program.
//!
//! Runs the sample CPU-load Spin app the way a Kubernetes node would: a private containerd
//! (own root, state and socket) with our shim registered as runtime handler `spin`, a
//! kubelet-style Burstable pod cgroup named by the systemd driver, RunPodSandbox and
//! CreateContainer through CRI, then an HTTP request, a few seconds of load and the figures
//! `kubectl top` and the HPA would see. Everything it created is removed at the end, also on
//! Ctrl-C or SIGTERM.
//!
//! Usage:
//! - `kubelet-demo` — run the demo; with `DEMO_KEEP=1` leave the app running and print how
//!   to call it and how to stop it. `DEMO_LOAD_SECS` (1..=60, default 5) sets the load.
//! - `kubelet-demo images` — build the image archives (pause, spin-cpu) if missing or stale.
//! - `kubelet-demo stop <state file>` — tear down a demo left running by `DEMO_KEEP=1`.
//!
//! The demo itself runs in a worker process of its own process group, so a Ctrl-C on the
//! terminal reaches only this supervisor (which turns it into SIGTERM for the worker) and
//! never the private containerd, which would otherwise exit and orphan the pod.

mod demo;

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};

/// The line a kept worker prints once the app is ready; the supervisor stops there.
const READY_MARKER: &str = "--- kubelet-demo: ready ---";
/// Name of the state file inside a kept demo's state directory.
const STATE_FILE: &str = "demo.state";
/// How long the supervisor and `stop` wait for the worker's teardown.
const TEARDOWN_WAIT: Duration = Duration::from_secs(180);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubelet-demo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match args
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] => supervise().await,
            ["images"] => demo::build_images().map(|_| 0),
            ["stop", state] => stop(Path::new(state)).await,
            ["__worker", mode, rest @ ..] => demo::worker(mode, rest.first().copied()).await,
            _ => bail!(
                "unknown arguments {args:?}; usage: kubelet-demo | kubelet-demo images | \
                 kubelet-demo stop <state file>"
            ),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kubelet-demo: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `true` when `DEMO_KEEP` asks to leave the app running.
fn keep_requested() -> bool {
    matches!(
        std::env::var("DEMO_KEEP").as_deref(),
        Ok(v) if !v.is_empty() && v != "0"
    )
}

/// Starts the worker in its own process group and waits for it, turning SIGINT/SIGTERM
/// into a SIGTERM for the worker (which then tears down). With `DEMO_KEEP=1` the worker's
/// output goes to a log in a state directory, echoed here until the app is ready.
async fn supervise() -> Result<u8> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the demo creates cgroups and runs containerd: run it as root (sudo make demo)");
    }
    let exe = std::env::current_exe().context("finding the kubelet-demo binary")?;
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.process_group(0).stdin(std::process::Stdio::null());
    let keep = keep_requested();
    let state_dir = if keep {
        let dir = tempfile::Builder::new()
            .prefix("kubelet-demo-")
            .tempdir_in("/tmp")
            .context("creating the state directory in /tmp")?
            .keep();
        let log = std::fs::File::create(dir.join("demo.log"))?;
        cmd.args(["__worker", "keep"])
            .arg(&dir)
            .stdout(log.try_clone()?)
            .stderr(log);
        Some(dir)
    } else {
        cmd.args(["__worker", "run"]);
        None
    };
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the worker {}", exe.display()))?;
    let pid = child.id().context("the worker exited at once")?;
    if let Some(dir) = &state_dir {
        std::fs::write(dir.join(STATE_FILE), format!("pid={pid}\n"))?;
    }
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut echo = state_dir.as_ref().map(|d| LogEcho::new(d.join("demo.log")));
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut interrupted_at: Option<Instant> = None;
    loop {
        tokio::select! {
            status = child.wait() => {
                if let Some(e) = echo.as_mut() {
                    e.pump();
                }
                let status = status?;
                if let Some(dir) = &state_dir {
                    // The worker is gone: nothing is left to stop.
                    let _ = std::fs::remove_dir_all(dir);
                }
                if interrupted_at.is_some() {
                    println!("==> interrupted: everything the demo created is removed");
                    return Ok(0);
                }
                return Ok(status.code().map(|c| c as u8).unwrap_or(1));
            }
            _ = sigint.recv() => interrupt(pid, &mut interrupted_at),
            _ = sigterm.recv() => interrupt(pid, &mut interrupted_at),
            _ = tick.tick() => {
                if let (Some(e), Some(dir)) = (echo.as_mut(), &state_dir) {
                    if e.pump() {
                        // The app runs on; the worker holds it until `stop`.
                        println!("\nStop it (removes the pod, containerd, cgroups, temp dirs):");
                        println!("  {} stop {}", exe.display(), dir.join(STATE_FILE).display());
                        return Ok(0);
                    }
                }
                if interrupted_at.is_some_and(|t| t.elapsed() > TEARDOWN_WAIT) {
                    bail!("the worker (pid {pid}) did not finish its teardown within {TEARDOWN_WAIT:?}");
                }
            }
        }
    }
}

/// Forwards an interrupt to the worker once.
fn interrupt(pid: u32, interrupted_at: &mut Option<Instant>) {
    if interrupted_at.is_none() {
        println!("\n==> interrupted: tearing down (pod, containerd, cgroups, temp dirs)...");
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        *interrupted_at = Some(Instant::now());
    }
}

/// Echoes a growing log file to stdout, line by line, until the ready marker.
struct LogEcho {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl LogEcho {
    fn new(path: PathBuf) -> Self {
        LogEcho {
            path,
            offset: 0,
            partial: String::new(),
        }
    }

    /// Prints the complete lines added since the last call; `true` once the ready marker
    /// has been read (the marker itself is not printed).
    fn pump(&mut self) -> bool {
        let mut out = std::io::stdout().lock();
        let ready = self.pump_into(&mut out);
        let _ = out.flush();
        ready
    }

    /// [`LogEcho::pump`] writing to `out`.
    fn pump_into(&mut self, out: &mut impl Write) -> bool {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return false;
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut buf).is_err() {
            return false;
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            if line.trim_end() == READY_MARKER {
                return true;
            }
            let _ = out.write_all(line.as_bytes());
        }
        false
    }
}

/// Reads the worker pid from a state file written by a `DEMO_KEEP=1` run.
fn read_state(state: &Path) -> Result<u32> {
    let text = std::fs::read_to_string(state).with_context(|| {
        format!(
            "reading {} (the state file a DEMO_KEEP=1 run printed; is the demo still running?)",
            state.display()
        )
    })?;
    parse_state(&text).with_context(|| format!("{}: no valid `pid=<n>` line", state.display()))
}

fn parse_state(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())
        .filter(|p| *p > 0)
}

/// `kubelet-demo stop <state file>`: SIGTERM to the kept worker, wait for its teardown,
/// show what it printed, remove the state directory.
async fn stop(state: &Path) -> Result<u8> {
    let pid = read_state(state)?;
    let dir = state
        .parent()
        .context("the state file has no directory")?
        .to_path_buf();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    if !cmdline.contains("__worker") || !cmdline.contains(&*dir.to_string_lossy()) {
        std::fs::remove_dir_all(&dir).ok();
        bail!(
            "process {pid} of {} is not the kept demo (it ended already?); removed {}",
            state.display(),
            dir.display()
        );
    }
    println!("==> stopping the demo (worker pid {pid})");
    let log = dir.join("demo.log");
    let mut echo = LogEcho::new(log.clone());
    // Show only the teardown: what the log held so far was shown at start-up.
    echo.offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).context("signalling the worker")?;
    let deadline = Instant::now() + TEARDOWN_WAIT;
    while cri_tests::scenario::process_alive(pid) {
        if Instant::now() > deadline {
            bail!(
                "worker {pid} did not finish its teardown within {TEARDOWN_WAIT:?}; its log: {}",
                dir.join("demo.log").display()
            );
        }
        echo.pump();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    echo.pump();
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    println!("==> stopped; removed {}", dir.display());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_pid() {
        assert_eq!(parse_state("pid=1234\n"), Some(1234));
        assert_eq!(parse_state("x=1\npid= 77 \n"), Some(77));
        assert_eq!(parse_state("pid=0\n"), None);
        assert_eq!(parse_state("pid=abc\n"), None);
        assert_eq!(parse_state(""), None);
    }

    #[test]
    fn log_echo_stops_at_marker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "one\ntwo").unwrap();
        let mut echo = LogEcho::new(path.clone());
        let mut shown = Vec::new();
        assert!(!echo.pump_into(&mut shown));
        assert_eq!(shown, b"one\n");
        assert_eq!(echo.partial, "two");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "\n{READY_MARKER}\nafter").unwrap();
        assert!(echo.pump_into(&mut shown));
        assert_eq!(
            shown, b"one\ntwo\n",
            "the marker and what follows are not shown"
        );
    }
}
