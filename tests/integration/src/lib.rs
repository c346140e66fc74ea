//! Integration-test harness: a private containerd (1.6, 1.7 or 2.x) with its own root, state and
//! socket in a temp dir, the freshly built shim first on its PATH, optionally inside a
//! private mount namespace where the unified cgroup hierarchy is bind-mounted over
//! `/sys/fs/cgroup` (a simulated pure cgroup v2 host).
//!
//! ```no_run
//! use integration::{CgroupMode, Containerd, ContainerdVersion};
//! let c = Containerd::start(ContainerdVersion::V1_6, CgroupMode::Host).unwrap();
//! let out = c.ctr().args(["version"]).output().unwrap();
//! assert!(out.status.success());
//! // dropped: tasks killed and deleted, containerd stopped by pid, leftovers removed
//! ```
//!
//! Environment: `SHIM_BIN_DIR` (default `<workspace>/target/release`), `GUEST_APPS_DIR`
//! (default `<workspace>/tests/apps/target/wasm32-wasip2/release`),
//! `INTEGRATION_RUNTIME` (runtime the shim tests use, default `io.containerd.spin.v2`;
//! `io.containerd.runc.v2` to exercise the harness without our shim).

#![warn(missing_docs)]

pub mod app_forms;
pub mod cgroups;
pub mod images;
pub mod sdk_apps;

use anyhow::{bail, ensure, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use cgroups::{CgroupGuard, CgroupLine};
pub use images::TestImages;

/// The runtime type of our shim.
pub const SPIN_RUNTIME: &str = "io.containerd.spin.v2";
/// containerd namespace used by [`Containerd::ctr`].
pub const NAMESPACE: &str = "shimtest";

/// Which containerd to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerdVersion {
    /// containerd 1.6 from Debian 12 (`/usr/bin/containerd`).
    V1_6,
    /// containerd 1.7.24 from Debian trixie, unpacked by `scripts/install-containerd-1.7.sh`.
    V1_7,
    /// containerd 2.x from Debian sid (2.1.9 when added), unpacked by
    /// `scripts/install-containerd-2.sh`; configured with config version 3.
    V2,
}

impl ContainerdVersion {
    /// The plugin whose table holds the CRI runtime settings (`containerd.runtimes.<name>`,
    /// `cni`, `restrict_oom_score_adj`): `io.containerd.grpc.v1.cri` on 1.x,
    /// `io.containerd.cri.v1.runtime` on 2.x.
    pub fn cri_runtime_plugin(self) -> &'static str {
        match self {
            ContainerdVersion::V1_6 | ContainerdVersion::V1_7 => "io.containerd.grpc.v1.cri",
            ContainerdVersion::V2 => "io.containerd.cri.v1.runtime",
        }
    }
}

/// Which cgroup layout containerd and its shims see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// The host as it is (hybrid v1 + unified on these machines).
    Host,
    /// A private mount namespace with `/sys/fs/cgroup/unified` bind-mounted over
    /// `/sys/fs/cgroup`: a pure cgroup v2 host as far as containerd and the shim can tell.
    UnifiedNamespace,
}

/// Extra configuration for [`Containerd::start_with`].
#[derive(Debug, Clone, Default)]
pub struct ContainerdConfig {
    /// Lines placed inside the `[plugins."<ContainerdVersion::cri_runtime_plugin>"]` table
    /// (`io.containerd.grpc.v1.cri` on 1.x, `io.containerd.cri.v1.runtime` on 2.x), which
    /// the harness always writes with `restrict_oom_score_adj = true`, needed on these hosts.
    pub cri_plugin: String,
    /// TOML appended at the end of the config (e.g. runtime tables such as
    /// `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin]`).
    pub extra: String,
    /// Environment for containerd, and so for the shims it starts (e.g.
    /// `SPIN_SHIM_STATE_DIR` for a private state dir).
    pub env: Vec<(String, String)>,
    /// Start containerd (and so its shims and their containers) under a seccomp filter
    /// that fails bpf(2) with EPERM: a node whose kernel refuses eBPF programs.
    pub deny_bpf: bool,
    /// The directory whose `containerd-shim-spin-v2` containerd starts, instead of
    /// [`shim_bin_dir`] (e.g. a release build for another target).
    pub shim_dir: Option<PathBuf>,
    /// Start containerd on a node without libc (see [`NoLibcNode`]): only static binaries
    /// (such as the release shim) run there.
    pub no_libc: bool,
}

/// A node without libc, for [`ContainerdConfig::no_libc`]: containerd runs in a private
/// mount namespace whose `/usr/lib` and `/usr/lib64` (and so, merged-/usr, `/lib` and
/// `/lib64`) are empty tmpfs mounts, so there is no dynamic loader and no libc for anything
/// it starts (as on a scratch- or Alpine-based node image). containerd itself is a glibc
/// program: it runs through a private copy of its loader and the libraries `ldd` lists, kept
/// in the instance dir (as a node image would keep them under a private path), started as
/// `<private ld.so> --library-path <private dir> containerd ...`.
#[derive(Debug, Clone)]
pub struct NoLibcNode {
    /// The private loader.
    pub loader: PathBuf,
    /// The directory of the private libraries.
    pub lib_dir: PathBuf,
}

/// Directories hidden by empty tmpfs mounts on a [`NoLibcNode`].
pub const NO_LIBC_HIDDEN: &[&str] = &["/usr/lib", "/usr/lib64"];

impl NoLibcNode {
    /// Copies `binary`'s loader and shared libraries (as `ldd` lists them) into `dir`.
    pub fn prepare(binary: &Path, dir: &Path) -> Result<Self> {
        let out = output_with_timeout(Command::new("ldd").arg(binary), Duration::from_secs(30))?;
        ensure!(
            out.status.success(),
            "ldd {} failed (is it a dynamic executable?): {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir_all(dir)?;
        let mut loader = None;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the loader's
            // `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has no path.
            let line = line.trim();
            let path = match line.split_once(" => ") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line
                    .split_whitespace()
                    .next()
                    .filter(|p| p.starts_with('/')),
            };
            let Some(path) = path.filter(|p| p.starts_with('/')) else {
                continue;
            };
            let src = Path::new(path);
            let name = src.file_name().context("library path without a name")?;
            let dst = dir.join(name);
            std::fs::copy(src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
            if line.split_once(" => ").is_none() {
                loader = Some(dst);
            }
        }
        let loader =
            loader.with_context(|| format!("ldd {} names no dynamic loader", binary.display()))?;
        Ok(Self {
            loader,
            lib_dir: dir.to_path_buf(),
        })
    }

    /// `sh -c` script (run by the static busybox of busybox-static, which needs no libc
    /// either) that hides the libraries, then execs `$0 --library-path $1 $2 --config $3`.
    fn script() -> String {
        let mut s = String::new();
        for d in NO_LIBC_HIDDEN {
            s.push_str(&format!(
                "/bin/busybox mount -t tmpfs -o ro,mode=0755 nolibc {d} && "
            ));
        }
        s.push_str("exec \"$0\" --library-path \"$1\" \"$2\" --config \"$3\"");
        s
    }
}

/// Installs a seccomp filter failing bpf(2) with EPERM in this process and its future
/// children (x86_64 syscalls; others pass). Root holds CAP_SYS_ADMIN, so no
/// `no_new_privs` is needed (and none is set: the containers' setuid programs still work).
fn deny_bpf_syscall() -> std::io::Result<()> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: 0x15, // BPF_JMP | BPF_JEQ | BPF_K
        jt,
        jf,
        k,
    };
    let filter = [
        stmt(0x20, 4), // A = seccomp_data.arch
        jeq(AUDIT_ARCH_X86_64, 0, 3),
        stmt(0x20, 0), // A = seccomp_data.nr
        jeq(libc::SYS_bpf as u32, 0, 1),
        stmt(0x06, SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(0x06, SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` and the filter it points to outlive the call.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Root of the cargo workspace.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Directory of the built shim (`SHIM_BIN_DIR` or `<workspace>/target/release`).
pub fn shim_bin_dir() -> PathBuf {
    std::env::var_os("SHIM_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release"))
}

/// Directory of the built guest apps (`GUEST_APPS_DIR` or the apps workspace target).
pub fn guest_apps_dir() -> PathBuf {
    std::env::var_os("GUEST_APPS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("tests/apps/target/wasm32-wasip2/release"))
}

/// Runtime the shim tests use (`INTEGRATION_RUNTIME`, default [`SPIN_RUNTIME`]).
pub fn test_runtime() -> String {
    std::env::var("INTEGRATION_RUNTIME").unwrap_or_else(|_| SPIN_RUNTIME.to_string())
}

/// True when running as root; otherwise prints a loud skip message.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("\n!!!!! SKIPPED {test}: integration tests need root (run as root: sudo -E cargo test --release -p integration) !!!!!\n");
    false
}

/// For a root-only test: `None` (after a loud skip message) when not root; otherwise a
/// guard serialising such tests within the test binary (one containerd at a time on
/// these 2-core machines).
pub fn root_test(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !require_root(test) {
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Checks that the shim binary exists, with the command that builds it.
pub fn require_shim() -> Result<PathBuf> {
    let p = shim_bin_dir().join("containerd-shim-spin-v2");
    ensure!(
        p.is_file(),
        "shim binary {} is missing: run `make build` (or cargo build --release -p containerd-shim-spin-v2)",
        p.display()
    );
    Ok(p)
}

/// A private containerd 1.7 on host cgroups with the WASI hello image imported, for
/// containers of one pod ([`SleeperPod::run`]); the shims keep their state in a directory of
/// the pod's own. Dropped: containerd stops, then the cgroups go.
pub struct SleeperPod {
    /// The containerd.
    pub c: Containerd,
    /// The pod's cgroup root (`/<root>/<id>` per container).
    pub root: String,
    /// The pod's id (its containers' `io.kubernetes.cri.sandbox-id`).
    pub pod: String,
    _guard: CgroupGuard,
    _state: tempfile::TempDir,
    _images: tempfile::TempDir,
}

impl SleeperPod {
    /// Starts the containerd, with `env` beside `SPIN_SHIM_STATE_DIR` in its environment;
    /// names start with `prefix`.
    pub fn start(prefix: &str, env: Vec<(String, String)>) -> Result<Self> {
        let images = tempfile::tempdir()?;
        let built = TestImages::build(images.path())?;
        let state = tempfile::Builder::new().prefix(prefix).tempdir_in("/run")?;
        let mut all = vec![(
            "SPIN_SHIM_STATE_DIR".to_string(),
            state.path().display().to_string(),
        )];
        all.extend(env);
        let config = ContainerdConfig {
            env: all,
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
        c.import(&built.wasi_hello, false)?;
        let root = unique(prefix);
        Ok(SleeperPod {
            c,
            _guard: CgroupGuard::new(&root),
            root,
            pod: unique(&format!("{prefix}pod")),
            _state: state,
            _images: images,
        })
    }

    /// Runs `/wasi-hello.wasm sleep 60` as container `id` of the pod with `ctr run -d` on
    /// the test runtime: the task's pid once it runs.
    pub fn run(&self, id: &str) -> Result<i32> {
        let c = &self.c;
        let o = output_with_timeout(
            c.ctr().args([
                "run",
                "-d",
                "--runtime",
                &test_runtime(),
                "--cgroup",
                &format!("/{}/{id}", self.root),
                "--annotation",
                &format!("io.kubernetes.cri.sandbox-id={}", self.pod),
                images::WASI_HELLO,
                id,
                "/wasi-hello.wasm",
                "sleep",
                "60",
            ]),
            Duration::from_secs(90),
        )?;
        ensure!(
            o.status.success(),
            "ctr run {id} failed: {}{}\nlog tail:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            c.log_tail(20)
        );
        c.wait_task_status(id, "RUNNING", Duration::from_secs(30))
    }

    /// The shim server of the pod's task `pid` (its parent, checked to be a server).
    pub fn server_of(&self, pid: i32) -> Result<i32> {
        let server = ppid(pid).context("no parent (shim server) for the task")?;
        ensure!(
            cmdline(server).iter().any(|x| x == "-socket"),
            "the parent {server} of task {pid} is not a shim server: {:?}",
            cmdline(server)
        );
        Ok(server)
    }
}

/// Runs `cmd` with piped stdout/stderr, killing it after `timeout`.
pub fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {desc}"))?;
    wait_child(child, timeout).with_context(|| desc)
}

/// Waits for a child started with piped stdout/stderr, killing it after `timeout`.
pub fn wait_child(mut child: Child, timeout: Duration) -> Result<Output> {
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t1 = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let t2 = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let status: ExitStatus = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = t2.join().unwrap_or_default();
            bail!(
                "timed out after {timeout:?}; stderr: {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: t1.join().unwrap_or_default(),
        stderr: t2.join().unwrap_or_default(),
    })
}

/// Polls `f` every 50 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The binary directory an install script prints on its last line (run once per process).
fn installed_bin_dir(
    cell: &'static OnceLock<std::result::Result<PathBuf, String>>,
    script: &str,
    what: &str,
) -> Result<PathBuf> {
    cell.get_or_init(|| install_script(script, &[]).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!("{what} unavailable: {e}"))
}

/// Runs the install script `script` (relative to the workspace) with `args` and returns
/// the directory it prints last (the scripts fetch into a cache and print where).
pub fn install_script(script: &str, args: &[&str]) -> Result<PathBuf> {
    let script = workspace_root().join(script);
    let out = output_with_timeout(
        Command::new("bash").arg(&script).args(args),
        Duration::from_secs(600),
    )?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    Ok(PathBuf::from(dir))
}

/// A private containerd instance; stopped and cleaned up on drop.
pub struct Containerd {
    version: ContainerdVersion,
    mode: CgroupMode,
    dir: tempfile::TempDir,
    bin_dir: PathBuf,
    child: Option<Child>,
    pid: i32,
    /// containerd's environment (PATH with the shim first, then the config's).
    env: Vec<(String, String)>,
    /// See [`ContainerdConfig::deny_bpf`].
    deny_bpf: bool,
    /// See [`ContainerdConfig::no_libc`].
    no_libc: Option<NoLibcNode>,
}

impl Containerd {
    /// Starts a containerd of `version` in `mode` with the default config.
    pub fn start(version: ContainerdVersion, mode: CgroupMode) -> Result<Self> {
        Self::start_with(version, mode, &ContainerdConfig::default())
    }

    /// Starts a containerd with extra configuration (see [`ContainerdConfig`]).
    pub fn start_with(
        version: ContainerdVersion,
        mode: CgroupMode,
        config: &ContainerdConfig,
    ) -> Result<Self> {
        static V17: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
        static V2: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
        let bin_dir = match version {
            ContainerdVersion::V1_6 => PathBuf::from("/usr/bin"),
            ContainerdVersion::V1_7 => {
                installed_bin_dir(&V17, "scripts/install-containerd-1.7.sh", "containerd 1.7")?
            }
            ContainerdVersion::V2 => {
                installed_bin_dir(&V2, "scripts/install-containerd-2.sh", "containerd 2.x")?
            }
        };
        let containerd = bin_dir.join("containerd");
        ensure!(
            containerd.is_file(),
            "{} is missing: run scripts/setup.sh (containerd 1.6), scripts/install-containerd-1.7.sh \
             or scripts/install-containerd-2.sh",
            containerd.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("shim-it-")
            .tempdir_in("/tmp")?;
        let d = dir.path();
        // containerd 2.x enables NRI by default on a fixed host socket: private instances
        // running side by side must not share it.
        let (config_version, nri) = match version {
            ContainerdVersion::V1_6 | ContainerdVersion::V1_7 => (2, ""),
            ContainerdVersion::V2 => (
                3,
                "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n",
            ),
        };
        let toml = format!(
            r#"version = {config_version}
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  level = "info"
{nri}[plugins."{cri_plugin}"]
  restrict_oom_score_adj = true
{cri}
{extra}
"#,
            cri_plugin = version.cri_runtime_plugin(),
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("containerd.sock").display(),
            cri = config.cri_plugin,
            extra = config.extra,
        );
        let cfg = d.join("config.toml");
        std::fs::write(&cfg, toml)?;
        let no_libc = if config.no_libc {
            ensure!(
                mode == CgroupMode::Host,
                "a no-libc node runs with CgroupMode::Host only"
            );
            ensure!(
                Path::new("/bin/busybox").is_file(),
                "/bin/busybox is missing: run scripts/setup.sh (busybox-static)"
            );
            Some(NoLibcNode::prepare(&containerd, &d.join("node-libs"))?)
        } else {
            None
        };
        // The shim first, then the containerd package's own binaries (runc shim), then PATH.
        let path = format!(
            "{}:{}:{}",
            config
                .shim_dir
                .clone()
                .unwrap_or_else(shim_bin_dir)
                .display(),
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into())
        );
        let mut env = vec![("PATH".to_string(), path)];
        env.extend(config.env.iter().cloned());
        let mut me = Self {
            version,
            mode,
            dir,
            bin_dir,
            child: None,
            pid: 0,
            env,
            deny_bpf: config.deny_bpf,
            no_libc,
        };
        me.launch()?;
        Ok(me)
    }

    /// Starts the daemon with the instance's config and waits until it answers.
    fn launch(&mut self) -> Result<()> {
        let containerd = self.bin_dir.join("containerd");
        let cfg = self.dir().join("config.toml");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join("containerd.log"))?;
        let mut cmd = match (&self.no_libc, self.mode) {
            (Some(node), _) => {
                let mut c = Command::new("unshare");
                c.args([
                    "--mount",
                    "--propagation",
                    "private",
                    "/bin/busybox",
                    "sh",
                    "-c",
                ])
                .arg(NoLibcNode::script())
                .arg(&node.loader)
                .arg(&node.lib_dir)
                .arg(&containerd)
                .arg(&cfg);
                c
            }
            (None, CgroupMode::Host) => {
                let mut c = Command::new(&containerd);
                c.arg("--config").arg(&cfg);
                c
            }
            (None, CgroupMode::UnifiedNamespace) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "sh", "-c"])
                    .arg("mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && exec \"$0\" --config \"$1\"")
                    .arg(&containerd)
                    .arg(&cfg);
                c
            }
        };
        if self.deny_bpf {
            use std::os::unix::process::CommandExt;
            // SAFETY: the hook only makes prctl calls, which are async-signal-safe.
            unsafe {
                cmd.pre_exec(deny_bpf_syscall);
            }
        }
        let child = cmd
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", containerd.display()))?;
        self.pid = child.id() as i32;
        self.child = Some(child);
        let ready = wait_for(Duration::from_secs(30), || {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Some(false);
            }
            let ok = output_with_timeout(self.ctr().arg("version"), Duration::from_secs(5))
                .map(|o| o.status.success())
                .unwrap_or(false);
            ok.then_some(true)
        });
        if ready != Some(true) {
            bail!(
                "containerd {:?} ({:?}) did not come up; log tail:\n{}",
                self.version,
                self.mode,
                self.log_tail(40)
            );
        }
        Ok(())
    }

    /// Stops containerd (SIGTERM; its shims and tasks keep running, as on a node) and
    /// starts it again with the same config, root and state.
    pub fn restart(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(self.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if wait_for(Duration::from_secs(15), || child.try_wait().ok().flatten()).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.launch()
    }

    /// containerd's version.
    pub fn version(&self) -> ContainerdVersion {
        self.version
    }
    /// The cgroup mode.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }
    /// containerd's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
    /// The instance's temp dir (config, root, state, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    /// The gRPC socket path.
    pub fn socket(&self) -> PathBuf {
        self.dir().join("containerd.sock")
    }
    /// The root directory.
    pub fn root(&self) -> PathBuf {
        self.dir().join("root")
    }
    /// The state directory.
    pub fn state(&self) -> PathBuf {
        self.dir().join("state")
    }
    /// Directory holding this version's `containerd` and `ctr`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The last `n` lines of containerd's log (shim logs included).
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir().join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// A `ctr` command for this instance in namespace [`NAMESPACE`].
    pub fn ctr(&self) -> Command {
        self.ctr_ns(NAMESPACE)
    }

    /// A `ctr` command for this instance in namespace `ns`.
    pub fn ctr_ns(&self, ns: &str) -> Command {
        let mut c = Command::new(self.bin_dir.join("ctr"));
        c.arg("--address")
            .arg(self.socket())
            .arg("--namespace")
            .arg(ns);
        c
    }

    /// Runs `ctr <args>` with a timeout and returns its output (whatever its status).
    pub fn ctr_output(&self, args: &[&str], timeout: Duration) -> Result<Output> {
        output_with_timeout(self.ctr().args(args), timeout)
    }

    /// Runs `ctr <args>` and fails (with stderr and the log tail) unless it succeeds.
    pub fn ctr_ok(&self, args: &[&str]) -> Result<String> {
        self.ctr_ok_in(NAMESPACE, args)
    }

    /// [`Containerd::ctr_ok`] in containerd namespace `ns` (CRI uses `k8s.io`).
    pub fn ctr_ok_in(&self, ns: &str, args: &[&str]) -> Result<String> {
        self.ctr_ok_in_within(ns, args, Duration::from_secs(60))
    }

    /// [`Containerd::ctr_ok_in`] with its own timeout.
    pub fn ctr_ok_in_within(&self, ns: &str, args: &[&str], timeout: Duration) -> Result<String> {
        let out = output_with_timeout(self.ctr_ns(ns).args(args), timeout)?;
        if !out.status.success() {
            bail!(
                "ctr {} failed ({}): {}\ncontainerd log tail:\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log_tail(15)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports an image archive. `wasm_platform`: the image's platform is not linux/amd64
    /// (adds `--all-platforms`; on containerd 1.6 also `--no-unpack`, as it cannot unpack
    /// non-tar layers).
    pub fn import(&self, archive: &Path, wasm_platform: bool) -> Result<String> {
        self.import_in(NAMESPACE, archive, wasm_platform)
    }

    /// [`Containerd::import`] into containerd namespace `ns` (CRI uses `k8s.io`).
    pub fn import_in(&self, ns: &str, archive: &Path, wasm_platform: bool) -> Result<String> {
        let a = archive.to_string_lossy();
        let mut args = vec!["image", "import"];
        if wasm_platform {
            args.push("--all-platforms");
            if self.version == ContainerdVersion::V1_6 {
                args.push("--no-unpack");
            }
        }
        args.push(&a);
        self.ctr_ok_in(ns, &args)
    }

    /// The host pid of a task (from `ctr task ls`), if it is listed.
    pub fn task_pid(&self, id: &str) -> Option<i32> {
        self.task_list()
            .ok()?
            .into_iter()
            .find(|t| t.0 == id)
            .map(|t| t.1)
    }

    /// `ctr task ls` as (id, pid, status).
    pub fn task_list(&self) -> Result<Vec<(String, i32, String)>> {
        let out = self.ctr_ok(&["task", "ls"])?;
        Ok(out
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.to_string(),
                    f.get(1)?.parse().ok()?,
                    f.get(2)?.to_string(),
                ))
            })
            .collect())
    }

    /// Waits until task `id` has `status` (e.g. `RUNNING`), returning its pid.
    pub fn wait_task_status(&self, id: &str, status: &str, timeout: Duration) -> Result<i32> {
        let found = wait_for(timeout, || {
            let t = self.task_list().ok()?.into_iter().find(|t| t.0 == id)?;
            if t.2 == status {
                return Some(Some(t.1));
            }
            // A task that already stopped will never become RUNNING: stop waiting.
            (status == "RUNNING" && t.2 == "STOPPED").then_some(None)
        })
        .flatten();
        found.with_context(|| {
            format!(
                "task {id} did not reach {status} within {timeout:?}; tasks: {:?}\nlog tail:\n{}",
                self.task_list().unwrap_or_default(),
                self.log_tail(15)
            )
        })
    }

    /// `ctr run --rm --net-host` (attached) of `image` with this shim as its runtime, in a
    /// fresh test cgroup (removed after), with `extra` options before the image and `cmd`
    /// after the id; waits up to `timeout` for it to exit. Returns ctr's exit code and its
    /// stdout followed by its stderr.
    pub fn run_to_exit(
        &self,
        image: &str,
        extra: &[&str],
        cmd: &[&str],
        timeout: Duration,
    ) -> Result<(Option<i32>, String)> {
        let id = unique("run");
        let root = unique("runtest-");
        let _guard = CgroupGuard::new(&root);
        let cgroup = format!("/{root}/{id}");
        let runtime = test_runtime();
        let mut args = vec![
            "run",
            "--rm",
            "--net-host",
            "--runtime",
            &runtime,
            "--cgroup",
            &cgroup,
        ];
        args.extend(extra);
        args.extend([image, &id]);
        args.extend(cmd);
        let out = self.ctr_output(&args, timeout);
        self.force_remove(&id);
        let out = out?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.code(), text))
    }

    /// Kills (SIGKILL), deletes the task and the container `id`; errors are ignored.
    pub fn force_remove(&self, id: &str) {
        let t = Duration::from_secs(20);
        let _ = self.ctr_output(&["task", "kill", "-s", "SIGKILL", id], t);
        let _ = wait_for(Duration::from_secs(10), || {
            (!self
                .task_list()
                .ok()?
                .iter()
                .any(|x| x.0 == id && x.2 == "RUNNING"))
            .then_some(())
        });
        let _ = self.ctr_output(&["task", "delete", "-f", id], t);
        let _ = self.ctr_output(&["container", "delete", id], t);
    }

    /// Pids of shim processes serving this instance (their `-address` is our socket).
    pub fn shim_pids(&self) -> Vec<i32> {
        let sock = self.socket();
        let sock = sock.to_string_lossy();
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if pid == self.pid {
                continue;
            }
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_shim = args.first().is_some_and(|a| a.contains("containerd-shim"));
            if is_shim && args.windows(2).any(|w| w[0] == "-address" && w[1] == sock) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Mount points (as containerd sees them) below this instance's temp dir.
    pub fn mounts(&self) -> Vec<String> {
        let info =
            std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid)).unwrap_or_default();
        let prefix = self.dir().to_string_lossy().into_owned();
        cgroups::mount_points(&info)
            .into_iter()
            .filter(|m| m.starts_with(&prefix))
            .collect()
    }

    /// Number of open file descriptors of containerd.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    fn cleanup(&mut self) {
        // Remove what tests left: tasks and containers in every namespace.
        if self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        {
            let nss = self
                .ctr_output(&["namespace", "ls", "-q"], Duration::from_secs(10))
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for ns in nss.lines().map(str::trim).filter(|n| !n.is_empty()) {
                let t = Duration::from_secs(20);
                let ids = output_with_timeout(self.ctr_ns(ns).args(["container", "ls", "-q"]), t)
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                for id in ids.lines().map(str::trim).filter(|i| !i.is_empty()) {
                    let _ = output_with_timeout(
                        self.ctr_ns(ns).args(["task", "kill", "-s", "SIGKILL", id]),
                        t,
                    );
                    std::thread::sleep(Duration::from_millis(200));
                    let _ =
                        output_with_timeout(self.ctr_ns(ns).args(["task", "delete", "-f", id]), t);
                    let _ =
                        output_with_timeout(self.ctr_ns(ns).args(["container", "delete", id]), t);
                }
            }
        }
        let shims = self.shim_pids();
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(self.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let exited = wait_for(Duration::from_secs(10), || child.try_wait().ok().flatten());
            if exited.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for p in shims {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Host-namespace leftovers (Host mode): unmount below our dir, deepest first.
        let prefix = self.dir().to_string_lossy().into_owned();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mps: Vec<String> = cgroups::mount_points(&info)
            .into_iter()
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mps.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mps {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// The names in directory `dir`, sorted (empty when it cannot be read).
pub fn dir_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The parent pid of `pid` (from `/proc/<pid>/stat`), if the process exists.
pub fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
}

/// Pids whose parent is `pid`, sorted.
pub fn children(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = all_pids().filter(|p| ppid(*p) == Some(pid)).collect();
    v.sort();
    v
}

/// The arguments of process `pid` (empty when it is gone or a zombie).
pub fn cmdline(pid: i32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Pids of live (not zombie) processes whose arguments are exactly `args`.
pub fn pids_running(args: &[&str]) -> Vec<i32> {
    all_pids().filter(|p| cmdline(*p) == args).collect()
}

/// Pids of every process on the host (from `/proc`).
pub fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
}

/// A unique suffix for names (pid, time and a counter), lowercase hex.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}{:x}{:x}{:x}",
        std::process::id(),
        t & 0xfffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A kubelet-style pod uid (dashed, lowercase hex), unique per call.
pub fn pod_uid() -> String {
    let u = format!("{:0>32}", unique(""));
    let u = &u[u.len() - 32..];
    format!(
        "{}-{}-{}-{}-{}",
        &u[0..8],
        &u[8..12],
        &u[12..16],
        &u[16..20],
        &u[20..32]
    )
}

/// A free TCP port on 127.0.0.1 (bound and released; tests then hand it to a server).
pub fn free_loopback_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A plain HTTP/1.0 GET on 127.0.0.1:port with a 20 s read timeout; returns (status, body).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP response: {resp:?}"))?;
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Ok((status, body.to_string()))
}

/// A Spin app started by [`Containerd::run_spin_app`]: detached, host network, listening on
/// `127.0.0.1:port`, in its own cgroup subtree. Dropping it removes the container, then
/// the subtree.
pub struct SpinApp<'a> {
    containerd: &'a Containerd,
    /// The container (and task) id.
    pub id: String,
    /// The loopback port the app listens on (`SPIN_HTTP_LISTEN_ADDR`).
    pub port: u16,
    _guard: CgroupGuard,
}

impl Containerd {
    /// `ctr run -d --net-host` of image `image` with command `/` under the test runtime, the
    /// app listening on a free loopback port, `extra` added to `ctr run`'s options; waits
    /// until the task is RUNNING. `Err` carries `ctr run`'s failure text when create fails.
    pub fn run_spin_app(&self, image: &str, extra: &[String]) -> Result<SpinApp<'_>> {
        let id = unique("spin");
        let root = unique("spintest-");
        let app = SpinApp {
            containerd: self,
            _guard: CgroupGuard::new(&root),
            port: free_loopback_port()?,
            id,
        };
        let listen = format!("SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{}", app.port);
        let cgroup = format!("/{root}/{}", app.id);
        let runtime = test_runtime();
        let mut args = vec![
            "run",
            "-d",
            "--net-host",
            "--runtime",
            &runtime,
            "--cgroup",
            &cgroup,
            "--env",
            &listen,
        ];
        args.extend(extra.iter().map(String::as_str));
        args.extend([image, &app.id, "/"]);
        // Create compiles the app in the shim: a large component on a loaded machine can
        // take more than the usual minute.
        self.ctr_ok_in_within(NAMESPACE, &args, Duration::from_secs(300))?;
        self.wait_task_status(&app.id, "RUNNING", Duration::from_secs(30))?;
        Ok(app)
    }
}

impl SpinApp<'_> {
    /// GET `path` until the app answers (30 s); the error names the port and shows
    /// containerd's log tail.
    pub fn get(&self, path: &str) -> Result<(u16, String)> {
        wait_for(Duration::from_secs(30), || http_get(self.port, path).ok()).with_context(|| {
            format!(
                "no HTTP answer on 127.0.0.1:{} within 30 s\n{}",
                self.port,
                self.containerd.log_tail(20)
            )
        })
    }
}

impl Drop for SpinApp<'_> {
    fn drop(&mut self) {
        self.containerd.force_remove(&self.id);
    }
}

/// Runs `containerd-shim-spin-v2 doctor --json` with `args` and returns (exit code, report).
pub fn doctor_json(args: &[&std::ffi::OsStr]) -> Result<(i32, serde_json::Value)> {
    let shim = shim_bin_dir().join("containerd-shim-spin-v2");
    let out = Command::new(&shim)
        .args(["doctor", "--json"])
        .args(args)
        .output()
        .with_context(|| format!("running {} doctor", shim.display()))?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "doctor printed no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((out.status.code().unwrap_or(-1), report))
}

/// The verdict and detail of check `name` in a doctor report.
pub fn doctor_check(report: &serde_json::Value, name: &str) -> Result<(String, String)> {
    let c = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["check"] == name)
        .with_context(|| format!("no `{name}` check in {report}"))?;
    Ok((
        c["verdict"].as_str().unwrap_or_default().to_string(),
        c["detail"].as_str().unwrap_or_default().to_string(),
    ))
}
