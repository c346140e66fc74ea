//! The single-threaded helper ("zygote") that creates containers.
//!
//! libcontainer clones the container's processes and runs Rust code in the clones, which
//! is only sound from a single-threaded process. The helper is a clone of the
//! [`crate::fork_server`], a single-threaded fork of the server made before the server
//! started any thread (so the pod's processes share the binary's relocated data), or,
//! when the fork server is not there, a fresh exec of the shim binary
//! (`<shim> --container-creation-helper`, started through `std::process::Command`, i.e.
//! fork immediately followed by exec). Either way it is single-threaded whenever it is
//! started: first before the server's tokio runtime starts, and again whenever it died or
//! ended idle. Both kinds show `<shim> --container-creation-helper` as their command line
//! and start with an empty environment. It serves create requests (JSON lines over a socketpair that is its
//! stdin) and builds each container with `as_sibling(true)`, so the container's init
//! becomes a child of the shim server (which reaps it and reports its exit status).
//! The helper never compiles Wasm; that happens in the container's init process.
//!
//! A create that gets no answer within the create timeout (`SPIN_SHIM_CREATE_TIMEOUT_SECS`
//! of the shim's settings, default [`DEFAULT_CREATE_TIMEOUT`]; a hook that never returns, a
//! wedged clone) fails
//! with an error naming the knob; the helper and the processes it started are killed and
//! the next create starts a new one.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;
use serde::{Deserialize, Serialize};

use crate::executor::ShimExecutor;
use crate::fds::{self, poll, poll_readable};
use crate::fork_server::ForkServer;
use crate::stdio;

/// Name of the container inside its own libcontainer state root (one root per container
/// keeps unix socket paths short).
pub const LIBCONTAINER_ID: &str = "c";

/// The argument that makes the shim binary serve as the container-creation helper.
pub const HELPER_ARG: &str = "--container-creation-helper";

/// How long a create may take in the helper when `SPIN_SHIM_CREATE_TIMEOUT_SECS` is unset
/// (well below kubelet's default 2 min runtime request timeout).
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Env var (the shim's settings) holding the create timeout in whole seconds.
pub const CREATE_TIMEOUT_ENV: &str = spin_shim_settings::shim::CREATE_TIMEOUT_SECS;

/// Variables of the server's environment the helper's own code reads (its log filter and
/// backtraces; libcgroups' systemd client reads the bus address), sent on its socket: the
/// helper starts with an empty environment, because every Wasm container is a clone of it
/// and its environment block is what `/proc/self/environ` shows there.
pub const HELPER_ENV: &[&str] = &["RUST_LOG", "RUST_BACKTRACE", "DBUS_SYSTEM_BUS_ADDRESS"];

/// The first line the server sends a new helper: the settings it used to inherit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelperSettings {
    /// [`HELPER_ENV`] variables set in the server's environment.
    pub env: Vec<(String, String)>,
}

impl HelperSettings {
    /// The settings from this (the server's) environment.
    pub fn from_env() -> Self {
        HelperSettings {
            env: HELPER_ENV
                .iter()
                .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
                .collect(),
        }
    }
}

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

/// One running helper as the server sees it.
struct Helper {
    stream: UnixStream,
    pid: i32,
    /// Becomes readable when the helper exits, whoever reaps it (the shim's reaper does).
    pidfd: OwnedFd,
    /// Bytes read past the last reply.
    buf: Vec<u8>,
}

/// Starts helpers from one long-lived thread: a helper gets SIGKILL when the thread that
/// started it ends (PR_SET_PDEATHSIG follows the thread), so never from a pool thread. A
/// helper comes from the [`ForkServer`] while it serves (sharing the server's relocated
/// data), else from an exec of the shim binary.
struct Spawner {
    requests: Mutex<mpsc::Sender<mpsc::SyncSender<anyhow::Result<Helper>>>>,
}

impl Spawner {
    fn start(stderr: Option<OwnedFd>, fork_server: Option<ForkServer>) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<mpsc::SyncSender<anyhow::Result<Helper>>>();
        std::thread::Builder::new()
            .name("helper-spawner".into())
            .spawn(move || {
                let mut fork_server = fork_server;
                for reply in rx {
                    let forked = fork_server
                        .as_ref()
                        .map(|f| fork_helper(f, stderr.as_ref()));
                    let helper = match forked {
                        Some(Ok(h)) => Ok(h),
                        Some(Err(e)) => {
                            tracing::warn!(
                                "the fork server could not start a container-creation helper \
                                 ({e:#}); exec'ing helpers from now on"
                            );
                            fork_server = None;
                            spawn_helper(stderr.as_ref())
                        }
                        None => spawn_helper(stderr.as_ref()),
                    };
                    let _ = reply.send(helper);
                }
            })
            .context("starting the container-creation helper's spawner thread")?;
        Ok(Spawner {
            requests: Mutex::new(tx),
        })
    }

    fn spawn(&self) -> anyhow::Result<Helper> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(tx)
            .map_err(|_| anyhow!("the container-creation helper's spawner thread is gone"))?;
        rx.recv()
            .map_err(|_| anyhow!("the container-creation helper's spawner thread is gone"))?
    }
}

/// The server's handle on the helper: starts it, talks to it, replaces it when it died or
/// hung.
pub struct Client {
    helper: Mutex<Option<Helper>>,
    /// When the last create ended (read and written with `helper` locked).
    last_create: Mutex<Instant>,
    spawner: Spawner,
}

/// Starts one helper process (called on the spawner's thread).
fn spawn_helper(stderr: Option<&OwnedFd>) -> anyhow::Result<Helper> {
    let (ours, theirs) = UnixStream::pair().context("socketpair for the helper")?;
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let stderr = match stderr {
        Some(fd) => Stdio::from(fd.try_clone()?),
        None => Stdio::null(),
    };
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0(&exe)
        .arg(HELPER_ARG)
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: prctl is async-signal-safe; it runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting the container-creation helper ({})", exe.display()))?;
    let pid = child.id() as i32;
    // The shim's reaper collects the helper's exit; the pidfd tells us about it.
    drop(child);
    let pidfd = fds::pidfd_open(pid)
        .with_context(|| format!("pidfd_open of the container-creation helper (pid {pid})"))?;
    Helper::started(ours, pid, pidfd)
}

/// Starts one helper through the fork server.
fn fork_helper(fork_server: &ForkServer, stderr: Option<&OwnedFd>) -> anyhow::Result<Helper> {
    let (ours, theirs) = UnixStream::pair().context("socketpair for the helper")?;
    let (pid, pidfd) = fork_server.spawn(OwnedFd::from(theirs), stderr.map(|e| e.as_fd()))?;
    Helper::started(ours, pid, pidfd)
}

impl Helper {
    /// A helper just started on `ours`' peer: sends it its settings.
    fn started(ours: UnixStream, pid: i32, pidfd: OwnedFd) -> anyhow::Result<Helper> {
        let mut settings = serde_json::to_vec(&HelperSettings::from_env())?;
        settings.push(b'\n');
        // A few hundred bytes into an empty socket buffer: never blocks.
        (&ours)
            .write_all(&settings)
            .context("sending the container-creation helper its settings")?;
        ours.set_nonblocking(true)?;
        tracing::debug!(pid, "container-creation helper started");
        Ok(Helper {
            stream: ours,
            pid,
            pidfd,
            buf: Vec::new(),
        })
    }
}

impl Helper {
    fn exited(&self) -> bool {
        poll_readable(&[self.pidfd.as_fd()], 0)
            .map(|r| r[0])
            .unwrap_or(true)
    }

    /// Sends one request line.
    fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        let mut rest = line;
        while !rest.is_empty() {
            match self.stream.write(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let fd = self.stream.as_fd();
                    let _ = poll(&[(fd, libc::POLLOUT)], 1000);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits for one reply line until `deadline`.
    fn recv(&mut self, deadline: Instant) -> Result<String, Failure> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Failure::TimedOut);
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            let ready = poll_readable(&[self.stream.as_fd(), self.pidfd.as_fd()], ms)
                .map_err(|e| Failure::Io(e.into()))?;
            if ready[0] {
                let mut chunk = [0u8; 4096];
                match self.stream.read(&mut chunk) {
                    Ok(0) => return Err(Failure::Exited),
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => return Err(Failure::Io(e.into())),
                }
            } else if ready[1] {
                return Err(Failure::Exited);
            }
        }
    }

    /// Kills the helper and the processes it started itself (hooks; the containers'
    /// processes are the server's children and are the failed create's to clean up).
    fn kill(&self) {
        // A helper that is gone takes no signal; that is all an error here can say.
        let signal = |sig: i32| {
            let _ = fds::pidfd_signal(self.pidfd.as_fd(), sig);
        };
        if self.exited() {
            // Its pid may already name another process: nothing to look up by it.
            return;
        }
        // Stopped first, so it starts nothing new while its children are found.
        signal(libc::SIGSTOP);
        for child in children_of(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        signal(libc::SIGKILL);
    }
}

/// Why a request got no reply.
enum Failure {
    TimedOut,
    Exited,
    Io(anyhow::Error),
}

/// Pids whose parent is `pid` (from /proc; this kernel has no `/proc/<pid>/task/*/children`).
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

impl Client {
    /// Starts the helper. `stderr`: where the helper logs (the server's log), else nowhere;
    /// `fork_server`: where helpers come from while it serves (else each is an exec).
    pub fn start(stderr: Option<OwnedFd>, fork_server: Option<ForkServer>) -> anyhow::Result<Self> {
        let spawner = Spawner::start(stderr, fork_server)?;
        let helper = spawner.spawn()?;
        Ok(Client {
            helper: Mutex::new(Some(helper)),
            last_create: Mutex::new(Instant::now()),
            spawner,
        })
    }

    /// Starts a thread that ends the helper once no create has come for `period`: closing
    /// its socket with no request in flight (the helper lock is held), so it exits after
    /// its last reply; the next create starts a new one, as after a crash. A pod creates its
    /// containers in the first seconds of its life (and again only on a restart), while an
    /// idle helper holds about 0.3 MiB of its own in every pod. Its containers are
    /// the server's children, not the helper's: they run on.
    pub fn spawn_idle_close(self: &std::sync::Arc<Self>, period: Duration) {
        let client = std::sync::Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("helper-idle".into())
            .stack_size(64 * 1024)
            .spawn(move || loop {
                std::thread::sleep(period);
                let Some(client) = client.upgrade() else {
                    return;
                };
                let mut slot = client.helper.lock().unwrap_or_else(PoisonError::into_inner);
                let idle = client
                    .last_create
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .elapsed();
                if idle >= period {
                    if let Some(h) = slot.take() {
                        tracing::debug!(pid = h.pid, "ending the idle container-creation helper");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::debug!("starting the helper's idle thread: {e}");
        }
    }

    /// The create timeout of the shim's settings (see the module docs).
    fn timeout(&self) -> anyhow::Result<Duration> {
        Ok(spin_shim_settings::shim::ShimSettings::init()?.create_timeout)
    }

    /// Sends a create request and waits for the container's init pid. Blocking: call it
    /// from `spawn_blocking`. Creates are served one at a time. Afterwards the server gives
    /// back what the create made it map and allocate ([`crate::memory`]).
    pub fn create(&self, req: &CreateRequest) -> anyhow::Result<i32> {
        let pid = self.request(req);
        crate::memory::release_idle_memory();
        pid
    }

    /// [`Client::create`]'s request and reply.
    fn request(&self, req: &CreateRequest) -> anyhow::Result<i32> {
        let timeout = self.timeout()?;
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        let mut slot = self.helper.lock().unwrap_or_else(PoisonError::into_inner);
        // A helper that died since the last create is replaced; a request that could not
        // be written reached nobody and goes to a new helper once.
        let mut attempts = 0;
        let deadline = loop {
            attempts += 1;
            if slot.as_ref().is_none_or(|h| h.exited()) {
                if let Some(old) = slot.take() {
                    tracing::warn!(
                        pid = old.pid,
                        "the container-creation helper exited; starting a new one"
                    );
                }
                *slot = Some(self.spawner.spawn()?);
            }
            let h = slot.as_mut().expect("set above");
            match h.send(&line) {
                Ok(()) => break Instant::now() + timeout,
                Err(e) if attempts < 2 => {
                    tracing::warn!(pid = h.pid, "writing to the container-creation helper: {e}");
                    *slot = None;
                }
                Err(e) => {
                    *slot = None;
                    return Err(e)
                        .context("sending the create request to a new container-creation helper");
                }
            }
        };
        let h = slot.as_mut().expect("set above");
        let reply = match h.recv(deadline) {
            Ok(reply) => reply,
            Err(failure) => {
                let pid = h.pid;
                h.kill();
                *slot = None;
                let bundle = req.bundle.display();
                return Err(match failure {
                    Failure::TimedOut => anyhow!(
                        "creating the container from {bundle} did not finish within {} s \
                         ({}; a createRuntime or prestart hook that does not return, or an \
                         overloaded node): the container-creation helper (pid {pid}) was \
                         killed and a new one serves the next create; raise {} if the node \
                         is just slow",
                        timeout.as_secs(),
                        CREATE_TIMEOUT_ENV,
                        CREATE_TIMEOUT_ENV
                    ),
                    Failure::Exited => anyhow!(
                        "the container-creation helper (pid {pid}) exited while creating the \
                         container from {bundle}; a new one serves the next create (see the \
                         shim log)"
                    ),
                    Failure::Io(e) => e.context(format!(
                        "reading the container-creation helper's (pid {pid}) reply for {bundle}"
                    )),
                });
            }
        };
        *self
            .last_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        let res: Result<i32, String> = serde_json::from_str(&reply)
            .with_context(|| format!("the container-creation helper's reply {reply:?}"))?;
        res.map_err(|e| anyhow!(e))
    }
}

/// How long this shim gives a container's creation: [`CREATE_TIMEOUT_ENV`] of the shim's
/// settings, else (unset or invalid) [`DEFAULT_CREATE_TIMEOUT`].
pub fn configured_create_timeout() -> Duration {
    spin_shim_settings::shim::ShimSettings::init()
        .map(|s| s.create_timeout)
        .unwrap_or(DEFAULT_CREATE_TIMEOUT)
}

/// The helper's main (`<shim> --container-creation-helper`): serves create requests on the
/// socket that is its stdin until the server closes it, then exits.
pub fn helper_main(executor: ShimExecutor) -> ! {
    // stdin must be the socketpair the server made (not a terminal, file or pipe).
    // SAFETY: fstat into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 || (st.st_mode & libc::S_IFMT) != libc::S_IFSOCK {
        eprintln!(
            "{HELPER_ARG} is the shim's own container-creation helper: the shim server starts \
             it with a socket as stdin; it is not meant to be run by hand"
        );
        std::process::exit(2);
    }
    // Move the socket to fd 3 (close-on-exec, so native containers never inherit it), close
    // every other descriptor inherited from the server (Wasm containers never exec, so they
    // would hold its sockets for their lifetime), and give 0 and 1 to /dev/null; stderr
    // stays the server's log.
    const SOCK: libc::c_int = 3;
    if let Err(e) = fds::keep_only(0, SOCK) {
        eprintln!("container-creation helper: moving its socket to fd {SOCK}: {e}");
        std::process::exit(1);
    }
    let sock = SOCK;
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 onto the standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    // SAFETY: `sock` is a fresh descriptor owned by nobody else.
    let stream = unsafe { UnixStream::from_raw_fd(sock) };
    let Ok(clone) = stream.try_clone() else {
        std::process::exit(1)
    };
    let mut reader = std::io::BufReader::new(clone);
    // The settings line first: the environment is empty (see HELPER_ENV). Set in this
    // process's memory only (the block /proc shows stays empty); a Wasm container's init
    // replaces it with the spec's env before its engine runs.
    let mut line = String::new();
    let settings = match std::io::BufRead::read_line(&mut reader, &mut line) {
        Ok(n) if n > 0 => serde_json::from_str::<HelperSettings>(&line).unwrap_or_default(),
        _ => std::process::exit(0),
    };
    for (k, v) in &settings.env {
        // Single-threaded: nothing reads the environment concurrently.
        std::env::set_var(k, v);
    }
    crate::logging::init(false, "");
    serve(reader, stream, executor);
    std::process::exit(0)
}

fn serve(mut reader: std::io::BufReader<UnixStream>, stream: UnixStream, executor: ShimExecutor) {
    let mut writer = stream;
    loop {
        let mut line = String::new();
        match std::io::BufRead::read_line(&mut reader, &mut line) {
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
        // Idle until the next create, which may never come.
        crate::memory::release_idle_memory();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_found_by_parent_pid() {
        let mut kid = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let found = children_of(std::process::id() as i32);
        let _ = kid.kill();
        let _ = kid.wait();
        assert!(found.contains(&(kid.id() as i32)), "{found:?}");
    }
}
