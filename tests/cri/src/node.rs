//! A private containerd with its CRI plugin set up as a kubelet node needs it here: its own
//! root, state and socket in a temp dir, the in-repo pause image as sandbox image,
//! `restrict_oom_score_adj` (root lacks CAP_SYS_RESOURCE here), runtimes `runc` and `spin`.
//! On the unified layout it runs in a private mount namespace where the unified hierarchy
//! is bound over `/sys/fs/cgroup` (a pure cgroup v2 host).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::cgroups::Layout;

/// Which containerd release to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Debian 12's containerd 1.6 (`/usr/bin`).
    V1_6,
    /// containerd 1.7 unpacked by `scripts/install-containerd-1.7.sh`.
    V1_7,
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the release binaries are: `$SHIM_BIN_DIR`, else `$CARGO_TARGET_DIR/release`, else
/// the workspace's `target/release`.
pub fn release_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SHIM_BIN_DIR") {
        return d.into();
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("release"),
        None => repo_root().join("target/release"),
    }
}

impl Version {
    /// The directory holding `containerd`, `ctr` and `containerd-shim-runc-v2`.
    pub fn bin_dir(self) -> Result<PathBuf> {
        match self {
            Version::V1_6 => Ok("/usr/bin".into()),
            Version::V1_7 => {
                let script = repo_root().join("scripts/install-containerd-1.7.sh");
                let out = Command::new("bash")
                    .arg(&script)
                    .stderr(Stdio::inherit())
                    .output()
                    .with_context(|| format!("running {}", script.display()))?;
                ensure!(out.status.success(), "{} failed", script.display());
                Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
            }
        }
    }
}

/// A running private containerd; stopped (and its directory removed) on drop.
pub struct Containerd {
    dir: tempfile::TempDir,
    child: Option<Child>,
    bin_dir: PathBuf,
    /// The layout containerd (and the shims it starts) see.
    pub layout: Layout,
    /// The version running.
    pub version: Version,
}

/// Name of the sandbox image every node uses (imported from `target/images/pause.tar`).
pub const PAUSE_IMAGE: &str = "docker.io/library/pause:test";

impl Containerd {
    /// The CRI-related config: sandbox image, oom_score_adj restriction, CNI dirs inside the
    /// node dir (no CNI here; host-network pods only), runtimes runc and spin.
    pub fn cri_config(dir: &Path) -> String {
        format!(
            r#"[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{dir}/cni/bin"
    conf_dir = "{dir}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
            dir = dir.display()
        )
    }

    /// The base config: root, state, sockets in `dir`.
    pub fn base_config(dir: &Path) -> String {
        format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\n[grpc]\n  address = \"{d}/containerd.sock\"\n\n\
             [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\n[debug]\n  level = \"info\"\n\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n\n",
            d = dir.display()
        )
    }

    /// Starts containerd `version` for `layout` with base + CRI config and, when
    /// `with_spin` is set, the `spin` runtime (`io.containerd.spin.v2`). The shim must be
    /// on PATH: the release dir comes first.
    pub fn start(version: Version, layout: Layout, with_spin: bool) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("cri-node-").tempdir()?;
        let mut config = Self::base_config(dir.path()) + &Self::cri_config(dir.path());
        if with_spin {
            config.push_str(
                "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]\n    runtime_type = \"io.containerd.spin.v2\"\n",
            );
        }
        fs::write(dir.path().join("config.toml"), config)?;
        Self::start_with_config(version, layout, dir)
    }

    /// Starts containerd with the `config.toml` already written in `dir` (which must set
    /// root, state and the socket to `dir`, see [`Containerd::base_config`]).
    pub fn start_with_config(
        version: Version,
        layout: Layout,
        dir: tempfile::TempDir,
    ) -> Result<Self> {
        let bin_dir = version.bin_dir()?;
        let containerd = bin_dir.join("containerd");
        ensure!(
            containerd.exists(),
            "{} missing (run scripts/setup.sh)",
            containerd.display()
        );
        for d in ["cni/bin", "cni/conf"] {
            fs::create_dir_all(dir.path().join(d))?;
        }
        let path = format!(
            "{}:{}:{}",
            release_dir().display(),
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into())
        );
        let log = fs::File::create(dir.path().join("containerd.log"))?;
        let config = dir.path().join("config.toml");
        let mut cmd = match layout {
            Layout::Hybrid => {
                let mut c = Command::new(&containerd);
                c.arg("--config").arg(&config);
                c
            }
            Layout::Unified => {
                // unshare execs sh, which execs containerd: the child pid is containerd's.
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "sh", "-c"])
                    .arg("mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && exec \"$0\" --config \"$1\"")
                    .arg(&containerd)
                    .arg(&config);
                c
            }
        };
        cmd.env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", containerd.display()))?;
        let mut node = Containerd {
            dir,
            child: Some(child),
            bin_dir,
            layout,
            version,
        };
        node.wait_ready(Duration::from_secs(30))?;
        Ok(node)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait()? {
                bail!("containerd exited with {status}; log:\n{}", self.log_tail());
            }
            let ok = Command::new(self.bin_dir.join("ctr"))
                .arg("--address")
                .arg(self.socket())
                .arg("version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "containerd not ready within {timeout:?}; log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The node directory (config, log, root, state).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The gRPC socket (CRI is served on it too).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// containerd's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The last 60 lines of containerd's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Runs `ctr --address <socket> -n k8s.io <args>`.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(self.bin_dir.join("ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .context("running ctr")?;
        ensure!(
            out.status.success(),
            "ctr {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports an OCI archive into namespace `k8s.io` (where CRI looks).
    pub fn import(&self, archive: &Path) -> Result<()> {
        let archive = archive.to_str().context("non-UTF-8 archive path")?;
        self.ctr(&["image", "import", archive]).map(drop)
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s); the node directory stays.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: kill(2) on the pid of a child we started and have not reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                child.kill()?;
                child.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Stops containerd and starts it again with the same directory and config (as a node
    /// restart after a config change).
    pub fn restart(mut self) -> Result<Self> {
        self.stop()?;
        self.unmount_leftovers();
        let (version, layout) = (self.version, self.layout);
        let dir = tempfile::Builder::new().prefix("cri-unused-").tempdir()?;
        let node_dir = std::mem::replace(&mut self.dir, dir);
        drop(self);
        Self::start_with_config(version, layout, node_dir)
    }

    /// Mounts left below the node dir in this namespace (snapshot mounts of a crashed run).
    fn unmount_leftovers(&self) {
        let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let prefix = self.dir.path().to_string_lossy().into_owned();
        let mut points: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            if let Ok(c) = std::ffi::CString::new(p) {
                // SAFETY: umount2 with a valid C string; MNT_DETACH cannot leave state behind.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("cri-tests: stopping containerd: {e:#}");
        }
        self.unmount_leftovers();
    }
}
