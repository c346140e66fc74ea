//! Untrusted component bytes are compiled (and Spin 4 middleware composed) in a helper
//! process, never in the root shim.
//!
//! The helper is the shim binary re-executed as `containerd-shim-spin-v2 --compile-helper`
//! (`std::process::Command`: fork immediately followed by exec, so it is never a fork of the
//! multi-threaded shim) with an empty environment. Before exec it joins the container's
//! cgroup in every hierarchy (created with the container's memory, CPU and pids limits by
//! Create, see `Placement::create_with_limits`) on v1 and hybrid hosts; on unified hosts a
//! transient cgroup of its own next to the container's, below the pod's, with the
//! container's limits and `memory.oom.group = 0` (`Placement::create_helper_cgroup`: the
//! systemd driver's scope does not exist during Create, and an OOM kill in a container
//! cgroup with kubelet's `oom.group = 1` would take the serving container with it), removed
//! when the helper ends. Either way everything it allocates is charged to the pod and held
//! by its limits; it gets `oom_score_adj` 1000 (within the pod, the kernel
//! kills the compiler first), `RLIMIT_CPU` ([`CPU_SECS_ENV`]), `RLIMIT_NOFILE` 64 and
//! `RLIMIT_CORE`/`RLIMIT_FSIZE` 0, and dies with the shim thread that started it. After
//! exec, before it reads a byte, it leaves the host's network, IPC and PID namespaces,
//! chroots into an empty deleted directory, drops every capability (bounding set included)
//! and becomes uid/gid [`HELPER_ID`] with `no_new_privs`, not dumpable, and the runtime's
//! deny-list seccomp filter plus [`HELPER_DENIED_SYSCALLS`]; then it forks the worker, PID 1 of the new PID namespace (when it ends, whatever it started ends too),
//! and reports how the worker ended.
//!
//! The shim hands the worker each input on a read-only descriptor of a file it verified (a
//! digest-named blob it wrote, or its own copy of a rootfs file it hashed) and reads the
//! result from a pipe, copying it into a cache entry it created itself, named by the
//! digest of the bytes it handed over; the helper can write nothing else. It is killed at
//! the wall-clock bound ([`TIMEOUT_ENV`]); an OOM kill (the memory cgroup's `oom_kill`
//! counter), the CPU limit or the bound fails with an error naming the component, the
//! limit and the fix ([`HelperError`]).
//!
//! The same helper unpacks Spin OCI artifacts ([`Job::Unpack`], see [`crate::artifact`] and
//! [`crate::unpack`]):
//! its inputs are then two directories it may write (the shim hands them over for the run
//! and takes them back) and one pipe per layer, and it may write files up to the app's
//! byte limit (`RLIMIT_FSIZE`); everything else above holds as for compilation.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use cgroup_placement::{Driver, Placement};
use serde::{Deserialize, Serialize};

use crate::unpack::{unpack_in_helper, UnpackJob};

/// The argument that makes the shim binary serve as a compile helper.
pub const HELPER_ARG: &str = "--compile-helper";
/// Env var (shim's environment): CPU-seconds one compilation may use (`RLIMIT_CPU` of the
/// helper, all its threads together); default
/// [`spin_shim_settings::shim::DEFAULT_COMPILE_CPU_SECS`].
pub const CPU_SECS_ENV: &str = spin_shim_settings::shim::COMPILE_CPU_SECS;
/// Env var (shim's environment): seconds a compilation in Create may take before the shim
/// kills it; default [`spin_shim_settings::shim::DEFAULT_COMPILE_TIMEOUT_SECS`].
pub const TIMEOUT_ENV: &str = spin_shim_settings::shim::COMPILE_TIMEOUT_SECS;
/// Wall-clock bound of a background (tier-up) compilation, which holds up nothing but may
/// crawl under a small CPU limit; at least [`TIMEOUT_ENV`].
pub const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(1800);
/// The uid and gid helpers run as (`nobody`).
pub const HELPER_ID: u32 = 65534;
/// System calls a helper may not make beyond the runtime's deny-list
/// (`wasm_shim_core::confine::DENIED_SYSCALLS`): every helper runs as [`HELPER_ID`], so
/// without this its supervisor (in the host's PID namespace) could signal other pods'
/// helpers. The worker, which parses the input, is PID 1 of a PID namespace of its own and
/// cannot name another process anyway; `tgkill` stays allowed for `abort`.
pub const HELPER_DENIED_SYSCALLS: &[&str] = &[
    "kill",
    "tkill",
    "rt_sigqueueinfo",
    "pidfd_open",
    "pidfd_send_signal",
];

/// Seconds between the CPU limit's SIGXCPU and the kernel's SIGKILL.
const CPU_GRACE_SECS: u64 = 5;
const NOFILE: u64 = 64;
/// The shim's copies of what a helper gets are made at or above this descriptor, so that
/// placing them at 3, 4, ... in the child never overwrites one not yet placed.
const HIGH_FD: RawFd = 64;
/// The helper's descriptors: its empty root directory, the result pipe, the inputs.
const FD_ROOT: RawFd = 3;
const FD_OUTPUT: RawFd = 4;
const FD_INPUTS: RawFd = 5;
const MAX_INPUTS: usize = 48;
const MAX_REQUEST: u64 = 1 << 20;
const MAX_REPLY: usize = 16 << 10;
const MAX_STDERR: usize = 8 << 10;
/// Longest helper message quoted in an error (it may carry parts of hostile input).
const MAX_SHOWN: usize = 1024;
/// How long the shim reads what a helper left in its pipes after it exited.
const DRAIN: Duration = Duration::from_secs(2);

/// Which compiler a helper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compiler {
    /// Cranelift, the runtime's optimizing compiler.
    Cranelift,
    /// Winch, the baseline compiler of tiered starts.
    Winch,
}

/// What a helper does with its inputs; the result goes to the shim's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Job {
    /// Compiles input 0 (`len` bytes) and writes the serialized code.
    Compile {
        /// The compiler.
        compiler: Compiler,
        /// Whether it compiles on one thread (fewer functions in flight: less memory, and
        /// the container's other threads keep its CPU quota), else on every core.
        serial: bool,
        /// The component id, for the compiler's errors.
        id: String,
        /// Length of input 0.
        len: u64,
    },
    /// Composes inputs 1.. (middleware, outermost first) in front of input 0 as the
    /// runtime does (`spin_runtime::engine::middleware::compose`) and writes the composition.
    Compose {
        /// The component id.
        id: String,
        /// Length of input 0.
        len: u64,
        /// The middleware, inputs 1...
        middleware: Vec<MiddlewarePart>,
    },
    /// Verifies and writes a Spin OCI artifact's layers, extracting its archive layers
    /// ([`UnpackJob`]): input 0 is the app's `blobs` directory, input 1
    /// its `archives` directory, inputs 2.. the layers as the shim streams them from
    /// containerd; the output is the verdict.
    Unpack(UnpackJob),
}

impl Job {
    /// The largest file the helper may write (`RLIMIT_FSIZE`): none, but for an unpack.
    fn file_size_limit(&self) -> u64 {
        match self {
            Job::Unpack(u) => u.max_bytes.max(1),
            _ => 0,
        }
    }

    /// What the helper did, for errors: "compiled" or "unpacked".
    fn done_to_it(&self) -> &'static str {
        match self {
            Job::Unpack(_) => "its layers were unpacked",
            _ => "it was compiled",
        }
    }
}

/// One middleware input of [`Job::Compose`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MiddlewarePart {
    /// How errors name it.
    pub name: String,
    /// The configuration keys it inherits; `None`: all.
    pub inherit: Option<Vec<String>>,
    /// Its length.
    pub len: u64,
}

/// One line a helper writes on its reply pipe.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    /// The worker wrote `bytes` bytes of output.
    Done { bytes: u64 },
    /// The worker could not do the job (the input's fault): its error.
    Failed { error: String },
    /// The worker reached its CPU limit (written by its SIGXCPU handler).
    CpuLimit,
    /// The helper could not set itself up (the node's fault).
    Broken { error: String },
    /// How the worker ended (written by the supervisor).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Why a helper run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The bytes are not something this compiler compiles (invalid, or a proposal Winch
    /// lacks): the helper's own error.
    Rejected,
    /// The kernel's OOM killer ended it: the container's memory limit, or the node's memory.
    Memory,
    /// It used up its CPU-seconds ([`CPU_SECS_ENV`]).
    Cpu,
    /// It ran past the wall-clock bound ([`TIMEOUT_ENV`]).
    Timeout,
    /// Its output grew past the bound for its input.
    Output,
    /// The container's cgroup is gone (the container was removed).
    Gone,
    /// Anything else: it could not start, or died otherwise.
    Failed,
}

/// A failed helper run, its message naming the component, the limit and the fix.
#[derive(Debug)]
pub struct HelperError {
    /// Why.
    pub kind: FailureKind,
    message: String,
}

impl std::fmt::Display for HelperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HelperError {}

impl HelperError {
    /// A failure of the shim itself around a helper run (`label: e`).
    pub(crate) fn shim(label: &str, e: anyhow::Error) -> HelperError {
        HelperError {
            kind: FailureKind::Failed,
            message: format!("{label}: {e:#}"),
        }
    }
}

/// Where and under which bounds helpers run for one container.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The container's cgroups: joined by every helper on v1 and hybrid hosts; on unified
    /// hosts each helper gets a transient cgroup next to them
    /// (`Placement::create_helper_cgroup`).
    placement: Placement,
    /// The container's memory limit, for messages.
    memory_limit: Option<u64>,
    cpu_secs: u64,
    timeout: Duration,
    background: bool,
    /// A root-only directory (the compile cache) for the helpers' empty roots.
    scratch: PathBuf,
    program: PathBuf,
}

impl Sandbox {
    /// Helpers for the container placed at `placement`, during its Create: they run in its
    /// cgroups or next to them (see [`Sandbox`]), use `scratch` (a root-only directory) for
    /// their empty roots, and get the bounds of [`CPU_SECS_ENV`] and [`TIMEOUT_ENV`].
    /// `memory_limit` is the container's (the spec's): the limit of a helper's own cgroup
    /// when the container's does not exist yet (systemd driver), and for messages.
    pub fn for_container(
        scratch: &Path,
        placement: &Placement,
        memory_limit: Option<u64>,
    ) -> anyhow::Result<Sandbox> {
        let settings = spin_shim_settings::shim::ShimSettings::init()?;
        Ok(Sandbox {
            placement: placement.clone(),
            memory_limit,
            cpu_secs: settings.compile_cpu_secs,
            timeout: settings.compile_timeout,
            background: false,
            scratch: scratch.to_path_buf(),
            program: PathBuf::from("/proc/self/exe"),
        })
    }

    /// The sandbox of compilations after Create (tier-up): in the container's cgroups on
    /// every driver ([`Sandbox::wait_for_cgroup`]), at a lower CPU priority, with the
    /// longer [`BACKGROUND_TIMEOUT`].
    pub fn background(&self, placement: &Placement) -> Sandbox {
        Sandbox {
            placement: placement.clone(),
            timeout: self.timeout.max(BACKGROUND_TIMEOUT),
            background: true,
            ..self.clone()
        }
    }

    /// Waits until the container's cgroups exist (under the systemd driver they appear
    /// when youki starts the scope), at most `bound`; false if they did not.
    pub fn wait_for_cgroup(&self, bound: Duration) -> bool {
        let p = &self.placement;
        let deadline = Instant::now() + bound;
        loop {
            if p.cgroup_dirs().iter().all(|d| d.is_dir()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `job` on `inputs` in a helper, copying its output into `out` (at most
    /// `max_output` bytes); `label` names the component in errors. Returns the bytes
    /// copied. Blocking; the helper is gone when this returns.
    pub fn run(
        &self,
        job: &Job,
        inputs: &[&File],
        out: &mut dyn Write,
        max_output: u64,
        label: &str,
    ) -> Result<u64, HelperError> {
        let failed = |kind, message: String| HelperError { kind, message };
        if inputs.len() > MAX_INPUTS {
            return Err(failed(
                FailureKind::Failed,
                format!(
                    "{label}: {} inputs to compose, at most {MAX_INPUTS}",
                    inputs.len()
                ),
            ));
        }
        let procs = self
            .cgroup_procs()
            .map_err(|e| failed(FailureKind::Gone, format!("{label}: {e:#}")))?;
        let own = self
            .placement
            .create_helper_cgroup(self.memory_limit)
            .map_err(|e| {
                failed(
                    FailureKind::Failed,
                    format!("{label}: cannot create the compile helper's cgroup: {e:#}"),
                )
            })?;
        let procs = match &own {
            Some(cg) => vec![
                CString::new(cg.dir().join("cgroup.procs").as_os_str().as_bytes())
                    .expect("a cgroup path has no NUL"),
            ],
            None => procs,
        };
        let request = serde_json::to_vec(job).expect("a job serialises");
        let oom_before = match &own {
            Some(_) => Some(0),
            None => self.oom_kills(),
        };
        // A helper in a cgroup of its own does not die with the container: after Create it
        // is ended once the container's cgroup is gone (the container was removed).
        let watch = own.is_some() && self.background;
        let gone = || watch && !self.placement.cgroup_dirs().iter().all(|d| d.is_dir());
        let started = self.spawn(&procs, inputs, job.file_size_limit());
        let run = started.map(|mut helper| {
            let t0 = Instant::now();
            let run = helper.exchange(&request, out, max_output, t0 + self.timeout, &gone);
            helper.end();
            (run, t0)
        });
        let oom_after = match &own {
            Some(cg) => read_oom_kills(&cg.dir().join("memory.events")),
            None => self.oom_kills(),
        };
        if let Some(cg) = own {
            let dir = cg.dir().to_path_buf();
            if let Err(e) = cg.remove() {
                tracing::warn!(cgroup = %dir.display(), "removing a compile helper's cgroup: {e:#}");
            }
        }
        let (run, t0) = run.map_err(|e| {
            failed(
                FailureKind::Failed,
                format!("{label}: cannot start the compile helper: {e:#}"),
            )
        })?;
        let run = run.map_err(|e| {
            failed(
                FailureKind::Failed,
                format!("{label}: talking to the compile helper: {e:#}"),
            )
        })?;
        let oom = oom_after.unwrap_or(0) > oom_before.unwrap_or(u64::MAX);
        let verdict = run.verdict(oom);
        if let Err((kind, _)) = &verdict {
            if run.container_gone || (*kind == FailureKind::Failed && self.cgroup_procs().is_err())
            {
                return Err(failed(
                    FailureKind::Gone,
                    format!(
                        "{label}: the container was removed while {}",
                        job.done_to_it()
                    ),
                ));
            }
        }
        match verdict {
            Ok(n) => {
                tracing::debug!(
                    component = label,
                    bytes = n,
                    ms = t0.elapsed().as_millis() as u64,
                    "compile helper done"
                );
                Ok(n)
            }
            Err((kind, detail)) => Err(failed(
                kind,
                match job {
                    Job::Unpack(_) => self.unpack_message(kind, label, &detail),
                    _ => self.message(kind, label, &detail),
                },
            )),
        }
    }

    /// The error text for `kind`: what happened, the limit, the fix.
    fn message(&self, kind: FailureKind, label: &str, detail: &str) -> String {
        let secs = self.timeout.as_secs();
        let cpu = self.cpu_secs;
        match kind {
            FailureKind::Rejected | FailureKind::Gone => detail.to_string(),
            FailureKind::Memory => match self.memory_limit {
                Some(limit) => format!(
                    "{label}: compiling it needs more memory than the container's memory limit \
                     of {} MiB (the kernel's OOM killer ended the compiler in the container's \
                     cgroup, which holds the compilation); raise the container's (pod's) memory \
                     limit, or make the component smaller",
                    limit >> 20
                ),
                _ => format!(
                    "{label}: the kernel's OOM killer ended the compiler (the node or the pod is \
                     out of memory); give the pod a memory limit that fits its compilation, or \
                     make the component smaller"
                ),
            },
            FailureKind::Cpu => format!(
                "{label}: compiling it used more than the {cpu} CPU-seconds a compilation may \
                 take ({CPU_SECS_ENV} in the shim's environment): the component is too costly to \
                 compile; make it smaller, or raise {CPU_SECS_ENV}"
            ),
            FailureKind::Timeout => format!(
                "{label}: compiling it took longer than {secs} s ({TIMEOUT_ENV} in the shim's \
                 environment; the container's CPU limit slows the compiler down); give the pod \
                 more CPU, raise {TIMEOUT_ENV}, or make the component smaller"
            ),
            FailureKind::Output => format!(
                "{label}: its compiled code grew past the bound for its size ({detail}); the \
                 component is not compilable here"
            ),
            FailureKind::Failed => {
                format!("{label}: the compile helper failed ({detail})")
            }
        }
    }

    /// The error text for `kind` of an artifact unpack ([`Job::Unpack`]): what happened,
    /// the limit, the fix.
    fn unpack_message(&self, kind: FailureKind, label: &str, detail: &str) -> String {
        let (secs, cpu) = (self.timeout.as_secs(), self.cpu_secs);
        match kind {
            FailureKind::Rejected | FailureKind::Gone => detail.to_string(),
            FailureKind::Memory => format!(
                "{label}: unpacking its layers needs more memory than the container's memory \
                 limit{} (the kernel's OOM killer ended the helper that unpacks them in the \
                 container's cgroup, which is charged for the files it writes); raise the \
                 container's (pod's) memory limit, or make the image's layers smaller",
                self.memory_limit
                    .map(|l| format!(" of {} MiB", l >> 20))
                    .unwrap_or_default()
            ),
            FailureKind::Cpu => format!(
                "{label}: unpacking its layers used more than the {cpu} CPU-seconds a helper \
                 may take ({CPU_SECS_ENV} in the shim's environment); make the layers smaller, \
                 or raise {CPU_SECS_ENV}"
            ),
            FailureKind::Timeout => format!(
                "{label}: unpacking its layers took longer than {secs} s ({TIMEOUT_ENV} in the \
                 shim's environment; the container's CPU limit slows the helper down); give \
                 the pod more CPU, raise {TIMEOUT_ENV}, or make the layers smaller"
            ),
            FailureKind::Output => {
                format!("{label}: the unpacking helper's verdict grew past its bound ({detail})")
            }
            FailureKind::Failed => format!("{label}: the unpacking helper failed ({detail})"),
        }
    }

    /// `cgroup.procs` of every hierarchy of the container's cgroup; an error when the cgroup
    /// is gone (the container was removed). Empty under the systemd driver during Create,
    /// before the container's scope exists.
    fn cgroup_procs(&self) -> anyhow::Result<Vec<CString>> {
        let p = &self.placement;
        if p.driver() == Driver::Systemd && !self.background {
            return Ok(Vec::new());
        }
        p.cgroup_dirs()
            .into_iter()
            .map(|dir| {
                anyhow::ensure!(
                    dir.is_dir(),
                    "the container's cgroup {} does not exist (the container is gone)",
                    dir.display()
                );
                Ok(CString::new(
                    dir.join("cgroup.procs").as_os_str().as_bytes(),
                )?)
            })
            .collect()
    }

    /// The OOM kills counted in the container's memory cgroup so far.
    fn oom_kills(&self) -> Option<u64> {
        let p = &self.placement;
        let file = p
            .v1_dirs()
            .into_iter()
            .find(|(c, _)| c.split(',').any(|c| c == "memory"))
            .map(|(_, d)| d.join("memory.oom_control"))
            .or_else(|| p.unified_dir().map(|d| d.join("memory.events")))?;
        read_oom_kills(&file)
    }

    fn spawn(&self, procs: &[CString], inputs: &[&File], fsize: u64) -> anyhow::Result<Running> {
        let root = empty_root(&self.scratch)?;
        let (request_r, request_w) = std::io::pipe()?;
        let (replies_r, replies_w) = std::io::pipe()?;
        let (stderr_r, stderr_w) = std::io::pipe()?;
        let (output_r, output_w) = std::io::pipe()?;
        let mut high = Vec::new();
        for fd in [root.as_fd(), output_w.as_fd()]
            .into_iter()
            .chain(inputs.iter().map(|f| f.as_fd()))
        {
            high.push(dup_high(fd)?);
        }
        let fds: Vec<RawFd> = high.iter().map(|f| f.as_raw_fd()).collect();
        let procs = procs.to_vec();
        let (background, cpu) = (self.background, self.cpu_secs);
        let mut cmd = Command::new(&self.program);
        cmd.arg0("containerd-shim-spin-v2")
            .arg(HELPER_ARG)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(request_r))
            .stdout(Stdio::from(replies_w))
            .stderr(Stdio::from(stderr_w));
        // SAFETY: `child_setup` makes only async-signal-safe system calls on memory
        // allocated before the fork (`procs`, `fds`).
        unsafe {
            cmd.pre_exec(move || child_setup(&procs, &fds, background, cpu, fsize));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("exec {} {HELPER_ARG}", self.program.display()))?;
        let pid = child.id() as i32;
        // The shim's reaper may collect its exit; the pidfd says when it happened.
        drop(child);
        drop(cmd);
        drop(high);
        let pidfd = match wasm_shim_core::fds::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: kill of the process just started (it cannot have been reaped: the
                // pidfd could not be opened only if it is gone or the kernel refuses).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return Err(e).context("pidfd_open of the compile helper");
            }
        };
        Ok(Running {
            pidfd,
            request: Some(request_w),
            replies: replies_r,
            stderr: stderr_r,
            output: output_r,
        })
    }
}

/// The OOM kills counted in `file` (`memory.oom_control` or `memory.events`).
fn read_oom_kills(file: &Path) -> Option<u64> {
    let body = std::fs::read_to_string(file).ok()?;
    Some(wasm_shim_core::oom::oom_kill_count(&body))
}

/// A directory only the shim could make, created and removed at once: the helper's root.
fn empty_root(scratch: &Path) -> anyhow::Result<OwnedFd> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    spin_runtime::engine::compile_cache::create_private_dir(scratch)?;
    let path = scratch.join(format!(
        ".tmp-root-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new()
        .mode(0o555)
        .create(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let dir = File::open(&path).with_context(|| format!("open {}", path.display()));
    let _ = std::fs::remove_dir(&path);
    Ok(dir?.into())
}

/// A close-on-exec copy of `fd` at or above [`HIGH_FD`].
fn dup_high(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    // SAFETY: fcntl on a descriptor we borrow; the result is a new descriptor or -1.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH_FD) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// In the forked child, before exec: joins the container's cgroups (all its memory is the
/// pod's from here on), dies with the shim thread, asks to be the OOM killer's first pick,
/// places its descriptors, lets nothing else cross exec, and sets its resource limits.
/// Only async-signal-safe calls.
fn child_setup(
    procs: &[CString],
    fds: &[RawFd],
    background: bool,
    cpu_secs: u64,
    fsize: u64,
) -> std::io::Result<()> {
    let check = |r: libc::c_long| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    let write_file = |path: &std::ffi::CStr, value: &[u8]| -> std::io::Result<()> {
        // SAFETY: open/write/close on a NUL-terminated path and a byte slice.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, value.as_ptr().cast(), value.len());
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            if n != value.len() as isize {
                return Err(e);
            }
        }
        Ok(())
    };
    for p in procs {
        write_file(p, b"0")?;
    }
    // SAFETY: plain system calls without pointers (prctl, setpriority, dup2, close_range).
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) as libc::c_long)?;
    }
    write_file(c"/proc/self/oom_score_adj", b"1000")?;
    if background {
        // SAFETY: as above.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
    }
    for (i, fd) in fds.iter().enumerate() {
        // SAFETY: as above.
        check(unsafe { libc::dup2(*fd, FD_ROOT + i as RawFd) } as libc::c_long)?;
    }
    // SAFETY: as above; CLOSE_RANGE_CLOEXEC keeps std's exec-error pipe working.
    check(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            FD_ROOT as libc::c_uint + fds.len() as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })?;
    let limit = |resource, soft: u64, hard: u64| -> std::io::Result<()> {
        let l = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit with a pointer to a local struct.
        check(unsafe { libc::setrlimit(resource, &l) } as libc::c_long).map(|_| ())
    };
    limit(libc::RLIMIT_CPU, cpu_secs, cpu_secs + CPU_GRACE_SECS)?;
    limit(libc::RLIMIT_CORE, 0, 0)?;
    limit(libc::RLIMIT_FSIZE, fsize, fsize)?;
    limit(libc::RLIMIT_NOFILE, NOFILE, NOFILE)?;
    Ok(())
}

/// The shim's end of a running helper.
struct Running {
    pidfd: OwnedFd,
    request: Option<std::io::PipeWriter>,
    replies: std::io::PipeReader,
    stderr: std::io::PipeReader,
    output: std::io::PipeReader,
}

/// What a helper run left.
#[derive(Debug, Default)]
struct Run {
    output: u64,
    output_eof: bool,
    too_large: bool,
    timed_out: bool,
    /// Ended because the container's cgroup disappeared.
    container_gone: bool,
    replies: Vec<u8>,
    stderr: Vec<u8>,
}

impl Running {
    /// Sends the request, then copies the output into `out` and collects replies and
    /// stderr until the helper exits (or `deadline`, or too much output, or `gone()`, asked
    /// at least once a second: then it is killed).
    fn exchange(
        &mut self,
        request: &[u8],
        out: &mut dyn Write,
        max_output: u64,
        deadline: Instant,
        gone: &dyn Fn() -> bool,
    ) -> anyhow::Result<Run> {
        if let Some(mut w) = self.request.take() {
            // A helper that died before reading it is reported below.
            let _ = w.write_all(request);
        }
        for f in [
            self.replies.as_fd(),
            self.stderr.as_fd(),
            self.output.as_fd(),
        ] {
            set_nonblocking(f)?;
        }
        let mut run = Run::default();
        let mut buf = vec![0u8; 64 << 10];
        let mut open = [true; 3];
        let mut exited_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if exited_at.is_none() && now >= deadline {
                run.timed_out = true;
                break;
            }
            if exited_at.is_none() && gone() {
                run.container_gone = true;
                break;
            }
            if let Some(t) = exited_at {
                if !open.iter().any(|o| *o) || now >= t + DRAIN {
                    break;
                }
            }
            let until = exited_at.map_or(deadline, |t| t + DRAIN);
            let ms = until
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, 1000) as u16;
            let pipes = [
                self.output.as_fd(),
                self.replies.as_fd(),
                self.stderr.as_fd(),
            ];
            let mut watched: Vec<BorrowedFd<'_>> = pipes
                .iter()
                .zip(open)
                .filter(|(_, o)| *o)
                .map(|(f, _)| *f)
                .collect();
            if exited_at.is_none() {
                watched.push(self.pidfd.as_fd());
            }
            let ready = poll_readable(&watched, ms)?;
            let mut r = ready.iter();
            for (i, pipe) in [&mut self.output, &mut self.replies, &mut self.stderr]
                .into_iter()
                .enumerate()
            {
                if !open[i] || !r.next().copied().unwrap_or(false) {
                    continue;
                }
                match pipe.read(&mut buf) {
                    Ok(0) => open[i] = false,
                    Ok(n) => match i {
                        0 => {
                            run.output += n as u64;
                            if run.output > max_output {
                                run.too_large = true;
                                return Ok(run);
                            }
                            out.write_all(&buf[..n])
                                .context("writing the compiled code")?;
                        }
                        1 => keep(&mut run.replies, &buf[..n], MAX_REPLY),
                        _ => keep(&mut run.stderr, &buf[..n], MAX_STDERR),
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if exited_at.is_none() && r.next().copied().unwrap_or(false) {
                exited_at = Some(Instant::now());
            }
        }
        run.output_eof = !open[0];
        Ok(run)
    }

    /// Kills the helper (its worker dies with it, and with the worker its PID namespace)
    /// and collects its exit unless the shim's reaper already did.
    fn end(&self) {
        let _ = wasm_shim_core::fds::pidfd_signal(self.pidfd.as_fd(), libc::SIGKILL);
        let _ = poll_readable(&[self.pidfd.as_fd()], 5000);
        // SAFETY: waitid on our pidfd into a zeroed siginfo; ECHILD once reaped elsewhere.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PIDFD,
                self.pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            );
        }
    }
}

impl Run {
    /// The output length, or why there is none.
    fn verdict(&self, oom_killed: bool) -> Result<u64, (FailureKind, String)> {
        if self.timed_out {
            return Err((FailureKind::Timeout, String::new()));
        }
        if self.too_large {
            return Err((FailureKind::Output, format!("{} bytes", self.output)));
        }
        let replies: Vec<Reply> = self
            .replies
            .split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect();
        let mut done = None;
        let mut exited = None;
        for r in &replies {
            match r {
                Reply::Failed { error } => {
                    return Err((FailureKind::Rejected, shown(error, MAX_SHOWN)))
                }
                Reply::Broken { error } => {
                    return Err((FailureKind::Failed, shown(error, MAX_SHOWN)));
                }
                Reply::CpuLimit => return Err((FailureKind::Cpu, String::new())),
                Reply::Done { bytes } => done = Some(*bytes),
                Reply::Exited { code, signal } => exited = Some((*code, *signal)),
            }
        }
        if let Some((_, Some(libc::SIGXCPU))) = exited {
            return Err((FailureKind::Cpu, String::new()));
        }
        if oom_killed {
            return Err((FailureKind::Memory, String::new()));
        }
        match (done, exited) {
            (Some(n), Some((Some(0), None))) if self.output_eof && n == self.output => Ok(n),
            _ => {
                let how = match exited {
                    Some((_, Some(sig))) => format!("killed by signal {sig}"),
                    Some((Some(code), _)) => format!("exit code {code}"),
                    _ => "it ended without a report".to_string(),
                };
                let stderr = String::from_utf8_lossy(&self.stderr);
                let stderr = stderr.trim();
                Err((
                    FailureKind::Failed,
                    if stderr.is_empty() {
                        how
                    } else {
                        format!("{how}: {}", shown(stderr, MAX_SHOWN))
                    },
                ))
            }
        }
    }
}

/// Appends `data` to `buf` up to `max` bytes.
fn keep(buf: &mut Vec<u8>, data: &[u8], max: usize) {
    let room = max.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

/// `s` with control characters escaped, cut at `max` bytes: untrusted text (a name from a
/// manifest, a helper's message) as errors and logs quote it. Other characters are kept,
/// so text escaped before (a helper's error quoting an entry name) is not escaped twice.
pub(crate) fn shown(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 8));
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if out.len() > max {
        let mut cut = max;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: fcntl flag get/set on a descriptor we borrow.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Which of `fds` are readable (or hung up) within `ms` milliseconds.
fn poll_readable(fds: &[BorrowedFd<'_>], ms: u16) -> std::io::Result<Vec<bool>> {
    use nix::poll::{PollFd, PollFlags};
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    loop {
        match nix::poll::poll(&mut pfds, ms) {
            Ok(_) => return Ok(pfds.iter().map(|p| p.any().unwrap_or(true)).collect()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The helper's side: `containerd-shim-spin-v2 --compile-helper`, started by
/// [`Sandbox::run`]. Never returns.
pub fn helper_main() -> ! {
    let started_by_shim = nix::sys::stat::fstat(FD_OUTPUT).is_ok_and(|st| {
        nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
            == nix::sys::stat::SFlag::S_IFIFO
    });
    if !started_by_shim {
        eprintln!(
            "{HELPER_ARG} is the shim's own compile helper: the shim starts it with its \
             inputs on descriptors 3 and up; it is not meant to be run by hand"
        );
        std::process::exit(2);
    }
    if let Err(e) = confine() {
        reply(&Reply::Broken {
            error: format!("the compile helper cannot confine itself: {e:#}"),
        });
        std::process::exit(1);
    }
    // SAFETY: the process is single-threaded: it was just exec'd and started no thread.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: prctl without pointers.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            std::process::exit(worker())
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => supervise(child),
        Err(e) => {
            reply(&Reply::Broken {
                error: format!("the compile helper cannot fork its worker: {e}"),
            });
            std::process::exit(1);
        }
    }
}

/// Confines the calling process as a compile helper confines itself before it reads a
/// byte (see the module docs): it expects its empty root directory at descriptor 3 and
/// must be single-threaded. Public so that a test can check from outside what a process
/// confined this way can still reach.
pub fn confine() -> anyhow::Result<()> {
    use caps::CapSet;
    use nix::sched::CloneFlags;
    use nix::unistd::{Gid, Uid};
    nix::sched::unshare(
        CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWIPC,
    )
    .context("unshare (PID, network, IPC)")?;
    nix::unistd::fchdir(FD_ROOT).context("fchdir to the empty root")?;
    nix::unistd::chroot(".").context("chroot to the empty root")?;
    nix::unistd::chdir("/").context("chdir /")?;
    nix::unistd::close(FD_ROOT).context("close the root's descriptor")?;
    for cap in caps::all() {
        // Capabilities this kernel does not know cannot be dropped (EINVAL).
        let _ = caps::drop(None, CapSet::Bounding, cap);
    }
    nix::unistd::setgroups(&[]).context("setgroups")?;
    let (uid, gid) = (Uid::from_raw(HELPER_ID), Gid::from_raw(HELPER_ID));
    nix::unistd::setresgid(gid, gid, gid).context("setresgid")?;
    nix::unistd::setresuid(uid, uid, uid).context("setresuid")?;
    caps::clear(None, CapSet::Inheritable).context("clearing inheritable capabilities")?;
    caps::clear(None, CapSet::Ambient).context("clearing ambient capabilities")?;
    // SAFETY: prctl without pointers.
    unsafe {
        anyhow::ensure!(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0,
            "no_new_privs: {}",
            std::io::Error::last_os_error()
        );
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    wasm_shim_core::confine::load_deny_list(HELPER_DENIED_SYSCALLS)
        .context("the seccomp filter")?;
    anyhow::ensure!(
        caps::read(None, CapSet::Permitted)?.is_empty()
            && caps::read(None, CapSet::Effective)?.is_empty()
            && nix::unistd::getuid().as_raw() == HELPER_ID,
        "capabilities or uid were not dropped"
    );
    Ok(())
}

/// Writes one reply line (one write: lines of the two processes never interleave).
fn reply(r: &Reply) {
    let mut line = serde_json::to_vec(r).expect("a reply serialises");
    line.push(b'\n');
    // SAFETY: fd 1 is the reply pipe for the helper's whole life; not closed here.
    let mut out = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(1) });
    let _ = out.write_all(&line);
}

/// The supervisor: closes what only the worker uses (so the output pipe ends with the
/// worker), waits for it and reports how it ended.
fn supervise(worker: nix::unistd::Pid) -> ! {
    // SAFETY: close_range and close on descriptors this process no longer uses.
    unsafe {
        libc::close(0);
        libc::syscall(
            libc::SYS_close_range,
            FD_OUTPUT as libc::c_uint,
            libc::c_uint::MAX,
            0,
        );
    }
    use nix::sys::wait::WaitStatus;
    let status = loop {
        match nix::sys::wait::waitpid(worker, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    };
    let (code, signal) = match status {
        Ok(WaitStatus::Exited(_, c)) => (Some(c), None),
        Ok(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
        _ => (None, None),
    };
    reply(&Reply::Exited { code, signal });
    std::process::exit(0)
}

extern "C" fn on_cpu_limit(_: libc::c_int) {
    const LINE: &[u8] = b"\"cpu_limit\"\n";
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(1, LINE.as_ptr().cast(), LINE.len());
        libc::_exit(3);
    }
}

/// The worker: reads the job and its inputs, does it, writes the output and one reply.
fn worker() -> i32 {
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        libc::signal(
            libc::SIGXCPU,
            on_cpu_limit as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    match work() {
        Ok(bytes) => {
            reply(&Reply::Done { bytes });
            0
        }
        Err(e) => {
            reply(&Reply::Failed {
                error: shown(&format!("{e:#}"), MAX_SHOWN),
            });
            1
        }
    }
}

fn work() -> anyhow::Result<u64> {
    use spin_runtime::engine::compile_cache::{entry_compile_engine, precompile_component};
    let mut request = Vec::new();
    std::io::stdin()
        .take(MAX_REQUEST)
        .read_to_end(&mut request)?;
    let job: Job = serde_json::from_slice(&request).context("the compile request")?;
    let bytes = match job {
        Job::Compile {
            compiler,
            serial,
            id,
            len,
        } => {
            let wasm = read_input(0, len)?;
            let engine = entry_compile_engine(compiler == Compiler::Winch, !serial)?;
            precompile_component(&engine, &wasm, &id)?
        }
        Job::Compose {
            id,
            len,
            middleware,
        } => {
            let primary = read_input(0, len)?;
            let mut parts = Vec::new();
            for (i, m) in middleware.into_iter().enumerate() {
                let bytes = read_input(i + 1, m.len)?;
                let inherit = m
                    .inherit
                    .map_or(spin_runtime::engine::middleware::Inherit::All, |keys| {
                        spin_runtime::engine::middleware::Inherit::Some(keys)
                    });
                parts.push((m.name, inherit, bytes));
            }
            spin_runtime::engine::middleware::compose(&id, &primary, &parts)?
        }
        Job::Unpack(job) => unpack_in_helper(job, input)?,
    };
    // SAFETY: the output pipe the shim placed at FD_OUTPUT; owned from here on.
    let mut out = unsafe { File::from_raw_fd(FD_OUTPUT) };
    out.write_all(&bytes).context("writing the output")?;
    Ok(bytes.len() as u64)
}

/// Input `i` of the worker, owned (closed when dropped).
pub(crate) fn input(i: usize) -> File {
    // SAFETY: the descriptor the shim placed for input `i`, taken once by the job that
    // reads it.
    unsafe { File::from_raw_fd(FD_INPUTS + i as RawFd) }
}

/// Input `i`, exactly `len` bytes from its start (an input shared by several jobs keeps
/// its file offset wherever the last one left it).
fn read_input(i: usize, len: u64) -> anyhow::Result<Vec<u8>> {
    // SAFETY: the descriptor the shim placed for input `i`; borrowed, not closed here.
    let f = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(FD_INPUTS + i as RawFd) });
    let size = usize::try_from(len).context("input length")?;
    let mut buf = vec![0u8; size];
    f.read_exact_at(&mut buf, 0)
        .with_context(|| format!("reading input {i} ({len} bytes)"))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_name_what_ended_the_helper() {
        let run = |replies: &str, output: u64| Run {
            output,
            output_eof: true,
            replies: replies.as_bytes().to_vec(),
            ..Run::default()
        };
        let ok = "{\"done\":{\"bytes\":7}}\n{\"exited\":{\"code\":0,\"signal\":null}}\n";
        assert_eq!(run(ok, 7).verdict(false), Ok(7));
        // Output shorter than reported: not trusted.
        assert_eq!(
            run(ok, 6).verdict(false).unwrap_err().0,
            FailureKind::Failed
        );
        let cpu = "\"cpu_limit\"\n{\"exited\":{\"code\":3,\"signal\":null}}\n";
        assert_eq!(run(cpu, 0).verdict(false).unwrap_err().0, FailureKind::Cpu);
        let killed = "{\"exited\":{\"code\":null,\"signal\":9}}\n";
        assert_eq!(
            run(killed, 0).verdict(true).unwrap_err().0,
            FailureKind::Memory
        );
        let e = run(killed, 0).verdict(false).unwrap_err();
        assert_eq!(e, (FailureKind::Failed, "killed by signal 9".to_string()));
        let bad = format!(
            "{{\"failed\":{{\"error\":\"invalid \\n{}\"}}}}\n",
            "x".repeat(5000)
        );
        let (kind, msg) = run(&bad, 0).verdict(false).unwrap_err();
        assert_eq!(kind, FailureKind::Rejected);
        assert!(msg.len() <= MAX_SHOWN + 3 && !msg.contains('\n'), "{msg}");
        // Text a helper escaped already is not escaped twice; control characters are.
        assert_eq!(
            shown("entry `a\\nb` \"x\"\t", 100),
            "entry `a\\nb` \"x\"\\t"
        );
        let timed_out = Run {
            timed_out: true,
            ..run(ok, 7)
        };
        assert_eq!(
            timed_out.verdict(false).unwrap_err().0,
            FailureKind::Timeout
        );
    }
}
