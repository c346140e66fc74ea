//! A kubelet node for the CRI tests: the `integration` crate's private containerd with its
//! CRI plugin set up as a node needs it here — the in-repo pause image as sandbox image, CNI
//! directories of its own (there is no CNI: host-network pods only), runtimes `runc` and
//! (optionally) `spin` — plus the test images, and a containerd restart for the installer
//! test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
pub use integration::{CgroupMode, Containerd, ContainerdVersion};

use crate::cgroups::Layout;

/// The sandbox image (the in-repo pause image).
pub const PAUSE_IMAGE: &str = integration::images::PAUSE;
/// A busybox-style native image with `/bin/sh` (the runc control's CPU burner).
pub const BUSYBOX_IMAGE: &str = integration::images::BUSYBOX;
/// The spin-in-container image of `tests/apps/spin-cpu` (command `/`).
pub const SPIN_CPU_IMAGE: &str = "docker.io/library/spin-cpu:test";

/// The harness mode that gives containerd the cgroup `layout`.
pub fn mode_for(layout: Layout) -> CgroupMode {
    match layout {
        Layout::Hybrid => CgroupMode::Host,
        Layout::Unified => CgroupMode::UnifiedNamespace,
    }
}

/// The header of CRI runtime `name`'s table in `version`'s config
/// (`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>]` on 1.x,
/// `[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.<name>]` on 2.x).
pub fn runtime_table_header(version: ContainerdVersion, name: &str) -> String {
    format!(
        "[plugins.\"{}\".containerd.runtimes.{name}]",
        version.cri_runtime_plugin()
    )
}

/// The runtime table that registers our shim as handler `spin`; `options`: lines of its
/// `options` table, which is written only when given (SpinKube's node config has
/// `SystemdCgroup = true` there).
pub fn spin_runtime_table(version: ContainerdVersion, options: Option<&str>) -> String {
    let header = runtime_table_header(version, "spin");
    let mut t = format!("{header}\n  runtime_type = \"io.containerd.spin.v2\"\n");
    if let Some(options) = options {
        let header = header.trim_end_matches(']');
        t.push_str(&format!("{header}.options]\n{options}\n"));
    }
    t
}

/// How a [`Node`] registers the `spin` handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinHandler<'a> {
    /// Not at all (the installer test adds it).
    Absent,
    /// `runtime_type` only.
    Plain,
    /// `runtime_type` and an `options` table with these lines.
    WithOptions(&'a str),
}

/// A private containerd configured as a kubelet node; stopped and cleaned up on drop.
pub struct Node {
    /// The running containerd (socket, ctr, log).
    pub containerd: Containerd,
    /// The cgroup layout containerd and its shims see.
    pub layout: Layout,
    cni: tempfile::TempDir,
}

impl Node {
    /// Starts containerd `version` for `layout`, with the `spin` runtime when `with_spin`.
    pub fn start(version: ContainerdVersion, layout: Layout, with_spin: bool) -> Result<Self> {
        let spin = if with_spin {
            SpinHandler::Plain
        } else {
            SpinHandler::Absent
        };
        Self::start_with(version, layout, spin)
    }

    /// Starts containerd `version` for `layout` with the `spin` handler registered as `spin`
    /// says, in the config form of that version (config version 2 on 1.x, 3 on 2.x).
    pub fn start_with(
        version: ContainerdVersion,
        layout: Layout,
        spin: SpinHandler<'_>,
    ) -> Result<Self> {
        Self::start_with_env(version, layout, spin, Vec::new())
    }

    /// [`Node::start_with`], with `env` in containerd's (and so the shims') environment, as a
    /// node's containerd unit sets it (e.g. `SSL_CERT_FILE`, `HTTPS_PROXY`).
    pub fn start_with_env(
        version: ContainerdVersion,
        layout: Layout,
        spin: SpinHandler<'_>,
        env: Vec<(String, String)>,
    ) -> Result<Self> {
        let cni = tempfile::Builder::new().prefix("cri-cni-").tempdir()?;
        let c = cni.path().display();
        let spin_table = match spin {
            SpinHandler::Absent => String::new(),
            SpinHandler::Plain => spin_runtime_table(version, None),
            SpinHandler::WithOptions(o) => spin_runtime_table(version, Some(o)),
        };
        let runtimes = format!(
            "{}\n  runtime_type = \"io.containerd.runc.v2\"\n{spin_table}",
            runtime_table_header(version, "runc")
        );
        let config = match version {
            ContainerdVersion::V1_6 | ContainerdVersion::V1_7 => integration::ContainerdConfig {
                cri_plugin: format!(
                    "  sandbox_image = \"{PAUSE_IMAGE}\"\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n\
                     [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"{c}/bin\"\n  conf_dir = \"{c}/conf\"\n"
                ),
                extra: runtimes,
                ..Default::default()
            },
            // 2.x splits the CRI plugin: runtime settings, images (the pinned sandbox image)
            // and the server (streaming).
            ContainerdVersion::V2 => integration::ContainerdConfig {
                cri_plugin: String::new(),
                extra: format!(
                    "[plugins.\"io.containerd.cri.v1.runtime\".cni]\n  bin_dirs = [\"{c}/bin\"]\n  conf_dir = \"{c}/conf\"\n\
                     [plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"{PAUSE_IMAGE}\"\n\
                     [plugins.\"io.containerd.grpc.v1.cri\"]\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n\
                     {runtimes}"
                ),
                ..Default::default()
            },
        };
        let config = integration::ContainerdConfig { env, ..config };
        let containerd = Containerd::start_with(version, mode_for(layout), &config)?;
        Ok(Node {
            containerd,
            layout,
            cni,
        })
    }

    /// The node's directory (config, log, state).
    pub fn dir(&self) -> &Path {
        self.containerd.dir()
    }

    /// The CRI (= containerd gRPC) socket.
    pub fn socket(&self) -> PathBuf {
        self.containerd.socket()
    }

    /// Imports an image archive into namespace `k8s.io`, where CRI looks.
    pub fn import(&self, archive: &Path) -> Result<()> {
        let out = integration::output_with_timeout(
            self.containerd
                .ctr_ns("k8s.io")
                .args(["image", "import"])
                .arg(archive),
            Duration::from_secs(120),
        )?;
        ensure!(
            out.status.success(),
            "ctr -n k8s.io image import {} failed: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// The containerd log tail, for error messages.
    pub fn log_tail(&self) -> String {
        self.containerd.log_tail(40)
    }

    /// Stops this containerd (by its pid) and starts a new one on the same directory and
    /// config, as a node restart after a config change (hybrid layout only). The returned
    /// guard stops the new process; drop it before the node.
    pub fn restart(&self) -> Result<Restarted> {
        ensure!(
            self.layout == Layout::Hybrid,
            "restart is supported on the host layout only"
        );
        let pid = nix::unistd::Pid::from_raw(self.containerd.pid());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("stopping containerd")?;
        let gone = integration::wait_for(Duration::from_secs(15), || {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.containerd.pid()))
                .unwrap_or_default();
            (stat.is_empty() || stat.contains(") Z")).then_some(())
        });
        ensure!(
            gone.is_some(),
            "containerd {} did not stop within 15 s",
            self.containerd.pid()
        );
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir().join("containerd.log"))?;
        let path = format!(
            "{}:{}:{}",
            integration::shim_bin_dir().display(),
            self.containerd.bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(self.containerd.bin_dir().join("containerd"))
            .arg("--config")
            .arg(self.dir().join("config.toml"))
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("restarting containerd")?;
        let restarted = Restarted { child: Some(child) };
        let up = integration::wait_for(Duration::from_secs(30), || {
            integration::output_with_timeout(
                self.containerd.ctr().arg("version"),
                Duration::from_secs(5),
            )
            .ok()
            .filter(|o| o.status.success())
            .map(drop)
        });
        if up.is_none() {
            bail!(
                "containerd did not come back after the restart; log:\n{}",
                self.log_tail()
            );
        }
        Ok(restarted)
    }
}

/// A containerd started by [`Node::restart`]; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Restarted {
    child: Option<Child>,
}

impl Drop for Restarted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if integration::wait_for(Duration::from_secs(10), || child.try_wait().ok().flatten())
                .is_none()
            {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Node({:?}, {:?}, cni {})",
            self.containerd.version(),
            self.layout,
            self.cni.path().display()
        )
    }
}

/// The image archives the CRI tests import.
#[derive(Debug, Clone)]
pub struct Images {
    /// Pause (sandbox) image.
    pub pause: PathBuf,
    /// Busybox-style native image.
    pub busybox: PathBuf,
    /// spin-in-container image of the CPU load app.
    pub spin_cpu: PathBuf,
}

impl Images {
    /// Builds the archives into `dir`: pause and busybox through the integration crate,
    /// spin-cpu from `tests/apps/spin-cpu` (needs `scripts/build-apps.sh` first).
    pub fn build(dir: &Path) -> Result<Self> {
        let base = integration::images::TestImages::build(dir)?;
        let app = integration::workspace_root().join("tests/apps/spin-cpu");
        let spin_cpu = dir.join("spin-cpu.tar");
        oci_image_builder::spin::container_image(SPIN_CPU_IMAGE, &app, &[])
            .with_context(|| {
                format!(
                    "building {SPIN_CPU_IMAGE} from {} (fix: scripts/build-apps.sh)",
                    app.display()
                )
            })?
            .write_archive(&spin_cpu)?;
        Ok(Images {
            pause: base.pause,
            busybox: base.busybox,
            spin_cpu,
        })
    }

    /// Every archive.
    pub fn all(&self) -> [&Path; 3] {
        [&self.pause, &self.busybox, &self.spin_cpu]
    }
}
