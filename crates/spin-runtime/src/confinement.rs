//! How the process running an app confines itself before any guest code runs, and the
//! confinement in force (set once by [`crate::Runner`] in a container; read by the loaded
//! app when it opens `files` mounts).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// How the process running an app confines itself before any guest code runs: the shim's
/// container runtime gives one ([`crate::InContainer`]); spin-serve runs without.
pub trait Confinement: Send + Sync + std::fmt::Debug {
    /// Confines the process. Called once, on the process's only thread, after the engine
    /// exists and the HTTP listener is bound, before any other thread starts or the app is
    /// loaded; an error stops the app before it serves.
    fn confine(&self) -> anyhow::Result<()>;

    /// The host directories to preopen for a `files` directory `source`, each with its path
    /// relative to the mount's destination (`[(source, "")]` when the source is shown whole).
    /// An error refuses a source the guest may not see (it resolves into procfs, sysfs, the
    /// device nodes, ...).
    fn files_view(&self, source: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>>;

    /// Refuses a single `files` entry whose host file the guest may not see.
    fn check_file(&self, path: &Path) -> anyhow::Result<()>;

    /// Called once the app's triggers run: the process may give back memory that only
    /// its start needed (loading, compiling). Does nothing by default.
    fn serving(&self) {}
}

/// The process's confinement: one process, one confinement.
static CONFINEMENT: OnceLock<Arc<dyn Confinement>> = OnceLock::new();

/// Records `c` as the process's confinement (the first call wins).
pub(crate) fn set(c: Arc<dyn Confinement>) {
    let _ = CONFINEMENT.set(c);
}

/// The confinement the process applied, if any.
pub(crate) fn confinement() -> Option<&'static Arc<dyn Confinement>> {
    CONFINEMENT.get()
}
