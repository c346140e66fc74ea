//! Small filesystem helpers shared by the placement and metrics code.

use std::fs::DirEntry;
use std::io::ErrorKind;
use std::path::Path;

use anyhow::Context;

/// The entries of `dir`; empty when `dir` does not exist (a cgroup may vanish any time).
pub(crate) fn dir_entries(dir: &Path) -> anyhow::Result<Vec<DirEntry>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    entries
        .map(|e| e.with_context(|| format!("listing {}", dir.display())))
        .collect()
}
