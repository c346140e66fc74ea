//! The seam between the shim and what runs in its containers.
//!
//! A shim binary hands [`crate::run_shim`] one [`Engine`] (e.g. Spin); plain WASI
//! ([`crate::wasi::WasiEngine`]) is built in, and ELF binaries or shebang scripts run natively through
//! libcontainer's default executor. The engine's [`Engine::name`] names the shim
//! ([`ShimNames`]): runtime id, per-container state file and state directory.
//!
//! An engine takes part twice per container:
//! - [`Engine::prepare`] in Create, in the shim's tokio process before the container exists:
//!   it may fetch content from containerd ([`crate::content`]), write below the
//!   container's state root and add mounts or env to the spec;
//! - [`Engine::can_handle`] and [`Engine::run`] in the container's init process, after
//!   pivot_root (the first engine that can handle the entrypoint runs it).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use libcontainer::oci_spec::runtime::Spec;

/// Names derived from an engine name `<e>`: runtime id `io.containerd.<e>.v2`, state file
/// `<e>-shim-state.json` in the bundle. The state directory is the shim's settings'
/// (`SPIN_SHIM_STATE_DIR`, default `/run/spin-shim`; keep it short: unix socket paths must
/// stay under 108 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimNames {
    /// The engine name.
    pub engine: String,
    /// containerd runtime id (`io.containerd.<e>.v2`), also used in error messages.
    pub runtime_id: String,
    /// The per-container state file in the bundle.
    pub state_file: String,
}

impl ShimNames {
    /// The names for engine `engine`.
    pub fn new(engine: &str) -> Self {
        ShimNames {
            engine: engine.to_string(),
            runtime_id: format!("io.containerd.{engine}.v2"),
            state_file: format!("{engine}-shim-state.json"),
        }
    }

    /// The base directory of the libcontainer state roots: the shim's settings'
    /// ([`spin_shim_settings::shim::state_dir`], which `delete` reads too).
    pub fn state_dir(&self) -> PathBuf {
        spin_shim_settings::shim::state_dir()
    }
}

/// A container's entrypoint as an engine sees it.
#[derive(Debug, Clone)]
pub struct Entrypoint<'a> {
    /// The process args (`args[0]` is the entrypoint).
    pub args: &'a [String],
    /// The process environment.
    pub env: &'a [(String, String)],
    /// The process working directory inside the container.
    pub cwd: &'a Path,
    /// The container's root directory: `/` in the container, a rootfs path in tests.
    pub root: &'a Path,
    /// The container's memory limit in bytes from its OCI spec
    /// (`linux.resources.memory.limit`), when it sets a positive one. Inside the container
    /// the cgroup's limit cannot always be read (on cgroup v1 hosts `/sys/fs/cgroup` is an
    /// empty tmpfs there), so engines take the smaller of both.
    pub memory_limit: Option<u64>,
}

impl Entrypoint<'_> {
    /// The container's `PATH`, if set.
    pub fn path_env(&self) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
    }

    /// `args[0]` resolved as execvp does (see [`resolve`]): the
    /// in-container path, or None when no such file exists.
    pub fn resolve(&self) -> Option<PathBuf> {
        let entry = self.args.first()?;
        resolve(entry, self.path_env(), self.cwd, self.root)
    }

    /// Where in-container path `p` is from here (below [`Entrypoint::root`]).
    pub fn host_path(&self, p: &Path) -> PathBuf {
        self.root.join(p.strip_prefix("/").unwrap_or(p))
    }
}

/// What [`Engine::prepare`] works on.
pub struct Prepare<'a> {
    /// containerd's container id.
    pub id: &'a str,
    /// containerd namespace.
    pub namespace: &'a str,
    /// The bundle directory.
    pub bundle: &'a Path,
    /// The container's rootfs on the host (mounted). Its content (links included) is the
    /// image's: read it through [`crate::confined::Dir`], never write into it.
    pub rootfs: &'a Path,
    /// The container's shim-owned state directory (root only, removed on delete): where an
    /// engine keeps what it materialises for the container.
    pub state_root: &'a Path,
    /// Where the container's cgroups are. They exist already, with the container's
    /// memory, CPU and pids limits (except under the systemd driver, whose scope youki
    /// starts with the container): helpers an engine runs on the image's content join them.
    pub placement: &'a cgroup_placement::Placement,
    /// The spec youki will read (saved by the shim after every engine prepared).
    pub spec: &'a mut Spec,
    /// containerd's gRPC address (the shim's `-address`), empty if containerd gave none.
    pub containerd_address: &'a str,
}

impl Prepare<'_> {
    /// The process args of the spec.
    pub fn args(&self) -> Vec<String> {
        self.spec
            .process()
            .as_ref()
            .and_then(|p| p.args().clone())
            .unwrap_or_default()
    }
}

/// One kind of workload the shim runs (see the module docs).
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// Short lower-case name (`spin`, `wasi`); names the shim ([`ShimNames`]).
    fn name(&self) -> &'static str;

    /// Media types of the OCI image layers this engine reads from containerd's content
    /// store (empty: it reads its program from the rootfs only).
    fn layer_media_types(&self) -> &'static [&'static str];

    /// Whether this engine runs the entrypoint. `Err` refuses the container with a message
    /// naming the entrypoint (the entrypoint is this engine's, but unusable).
    fn can_handle(&self, entry: &Entrypoint) -> Result<bool, String>;

    /// Called in Create for every container, before it exists; an engine acts only on
    /// containers it will run. The default does nothing.
    async fn prepare(&self, _prepare: &mut Prepare<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Runs the workload in the container's init process and returns its exit code; the
    /// engine reports its own errors on stderr, and a failure to start or run the workload
    /// also with [`crate::termination::report_start_failure`] (the container's termination
    /// message). The process is single-threaded when this is
    /// called; before any guest code runs (and before starting a thread) the engine must
    /// confine it with [`crate::confine::Confinement::apply`].
    fn run(&self, entry: &Entrypoint) -> i32;
}

/// Reads up to `buf.len()` bytes from the start of `path`.
pub(crate) fn read_head(path: &Path, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut n = 0;
    while n < buf.len() {
        let r = f.read(&mut buf[n..])?;
        if r == 0 {
            break;
        }
        n += r;
    }
    Ok(n)
}

/// Resolves `entry` the way execvp does: a name containing `/` is used as is (relative to
/// `cwd`), other names are searched in `PATH`, then (for `.wasm` files) in `cwd`.
/// Returns the in-container path.
pub(crate) fn resolve(
    entry: &str,
    path_env: Option<&str>,
    cwd: &Path,
    root: &Path,
) -> Option<PathBuf> {
    let in_root = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let in_cwd = || {
        let p = cwd.join(entry);
        in_root(&p).is_file().then_some(p)
    };
    if entry.contains('/') {
        return in_cwd();
    }
    let path_env =
        path_env.unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    path_env
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(entry))
        .find(|p| in_root(p).is_file())
        .or_else(|| entry.ends_with(".wasm").then(in_cwd).flatten())
}
