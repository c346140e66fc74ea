//! The single-threaded helper ("zygote") that creates containers.
//!
//! libcontainer clones the container's processes and runs Rust code in the clones, which
//! is only sound from a single-threaded process. The shim server forks this helper before
//! its tokio runtime starts; the helper serves create requests (JSON lines over a
//! socketpair) and builds each container with `as_sibling(true)`, so the container's init
//! becomes a child of the shim server (which reaps it and reports its exit status).
//! The helper never compiles Wasm; that happens in the container's init process.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{anyhow, Context as _};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;
use serde::{Deserialize, Serialize};

use crate::executor::ShimExecutor;
use crate::stdio;

/// Name of the container inside its own libcontainer state root (one root per container
/// keeps unix socket paths short).
pub const LIBCONTAINER_ID: &str = "c";

/// A request to create one container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateRequest {
    /// The bundle directory (holds the rewritten config.json).
    pub bundle: PathBuf,
    /// libcontainer state root for this container.
    pub state_root: PathBuf,
    /// Whether youki should use its systemd cgroup driver (from the placement).
    pub systemd: bool,
    /// stdin path from containerd ("" = none).
    pub stdin: String,
    /// stdout path from containerd ("" = /dev/null).
    pub stdout: String,
    /// stderr path from containerd ("" = /dev/null).
    pub stderr: String,
}

/// The tokio side's handle on the zygote.
pub struct Client {
    stream: Mutex<BufReader<UnixStream>>,
    /// Pid of the zygote process.
    pub pid: i32,
}

impl Client {
    /// Sends a create request and waits for the container's init pid. Blocking: call it
    /// from `spawn_blocking`.
    pub fn create(&self, req: &CreateRequest) -> anyhow::Result<i32> {
        let mut stream = self
            .stream
            .lock()
            .map_err(|_| anyhow!("zygote channel poisoned"))?;
        let mut line = serde_json::to_string(req)?;
        line.push('\n');
        stream
            .get_mut()
            .write_all(line.as_bytes())
            .context("the shim's container-creation helper is gone (write failed)")?;
        let mut reply = String::new();
        let n = stream
            .read_line(&mut reply)
            .context("reading the container-creation helper's reply")?;
        if n == 0 {
            return Err(anyhow!(
                "the shim's container-creation helper exited (pid {}); see the shim log",
                self.pid
            ));
        }
        let res: Result<i32, String> = serde_json::from_str(&reply)?;
        res.map_err(|e| anyhow!(e))
    }
}

/// Forks the zygote. Must be called while the process is single-threaded.
pub fn spawn(executor: ShimExecutor) -> anyhow::Result<Client> {
    let (parent, child) = UnixStream::pair().context("socketpair for the zygote")?;
    // SAFETY: called before any other thread exists (before the tokio runtime starts).
    match unsafe { nix::unistd::fork() }.context("fork zygote")? {
        nix::unistd::ForkResult::Parent { child: pid } => {
            drop(child);
            Ok(Client {
                stream: Mutex::new(BufReader::new(parent)),
                pid: pid.as_raw(),
            })
        }
        nix::unistd::ForkResult::Child => {
            drop(parent);
            // SAFETY: plain prctl; exit when the shim server dies.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            // Our stdout is the pipe `start` reads the address from: let go of it.
            if let Ok(null) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
            {
                use std::os::fd::AsRawFd;
                // SAFETY: dup2 onto the standard descriptors.
                unsafe {
                    libc::dup2(null.as_raw_fd(), 0);
                    libc::dup2(null.as_raw_fd(), 1);
                }
            }
            serve(child, executor);
            // SAFETY: leave without running the parent's atexit handlers.
            unsafe { libc::_exit(0) }
        }
    }
}

fn serve(stream: UnixStream, executor: ShimExecutor) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut writer = stream;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let res: Result<i32, String> = match serde_json::from_str::<CreateRequest>(&line) {
            Ok(req) => {
                // A panic must not take the helper (and every later create) down.
                let exec = executor.clone();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(&req, exec))) {
                    Ok(r) => r.map_err(|e| format!("{e:#}")),
                    Err(_) => Err(format!(
                        "creating the container from {} panicked; see the shim log",
                        req.bundle.display()
                    )),
                }
            }
            Err(e) => Err(format!("bad create request: {e}")),
        };
        let mut out = serde_json::to_string(&res).unwrap_or_else(|_| "{\"Err\":\"?\"}".into());
        out.push('\n');
        if writer.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

fn build(req: &CreateRequest, executor: ShimExecutor) -> anyhow::Result<i32> {
    let stdin: Option<OwnedFd> = stdio::open_stdin(&req.stdin)?;
    let stdout = stdio::open_output(&req.stdout)?;
    let stderr = stdio::open_output(&req.stderr)?;
    let mut builder = ContainerBuilder::new(LIBCONTAINER_ID.to_string(), SyscallType::default())
        .with_root_path(&req.state_root)
        .with_context(|| format!("libcontainer state root {}", req.state_root.display()))?
        .with_executor(executor)
        .with_stdout(stdout)
        .with_stderr(stderr);
    if let Some(stdin) = stdin {
        builder = builder.with_stdin(stdin);
    }
    let container = builder
        .as_init(&req.bundle)
        .with_systemd(req.systemd)
        .as_sibling(true)
        .with_detach(true)
        .build()
        .map_err(|e| anyhow!("creating the container from {}: {e}", req.bundle.display()))?;
    container
        .pid()
        .map(|p| p.as_raw())
        .ok_or_else(|| anyhow!("libcontainer reported no init pid"))
}
