//! Deterministic tar archives: image rootfs layers, Spin archive layers and the outer
//! OCI image-layout archive are all written by [`TarTree`].

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

/// One entry of a [`TarTree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A regular file with its content and permission bits.
    File {
        /// File content.
        data: Vec<u8>,
        /// Permission bits, e.g. `0o755`.
        mode: u32,
    },
    /// A directory.
    Dir,
    /// A symbolic link to `target`.
    Symlink {
        /// Link target, written as is.
        target: String,
    },
}

/// A file tree kept in memory and written as a tar archive with fixed owners (0:0) and
/// mtime 0, so the same input always gives the same bytes (and digest).
#[derive(Debug, Clone, Default)]
pub struct TarTree {
    nodes: BTreeMap<String, Node>,
}

/// Normalises an in-archive path: no leading `/`, no `.`/`..`, `/` separators.
pub fn normalize(path: &str) -> Result<String> {
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => parts.push(
                p.to_str()
                    .with_context(|| format!("path {path:?} is not UTF-8"))?
                    .to_string(),
            ),
            Component::ParentDir | Component::Prefix(_) => {
                bail!("path {path:?} leaves the image root (`..`); use a path inside it")
            }
        }
    }
    Ok(parts.join("/"))
}

impl TarTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert(&mut self, path: &str, node: Node) -> Result<()> {
        let path = normalize(path)?;
        if path.is_empty() {
            bail!("cannot add an entry at the archive root itself");
        }
        let mut parent = String::new();
        for part in path.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            match self.nodes.get(&parent) {
                None => {
                    self.nodes.insert(parent.clone(), Node::Dir);
                }
                Some(Node::Dir) => {}
                Some(_) => bail!("cannot add {path:?}: its parent {parent:?} is not a directory"),
            }
        }
        self.nodes.insert(path, node);
        Ok(())
    }

    /// Adds a file with `data` at `path` (parents are created).
    pub fn add_file(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<()> {
        self.insert(path, Node::File { data, mode })
    }

    /// Adds an (empty) directory at `path`.
    pub fn add_dir(&mut self, path: &str) -> Result<()> {
        if !matches!(self.nodes.get(&normalize(path)?), Some(Node::Dir)) {
            self.insert(path, Node::Dir)?;
        }
        Ok(())
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    pub fn add_symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.insert(
            path,
            Node::Symlink {
                target: target.to_string(),
            },
        )
    }

    /// Copies a host file (content and permission bits) to `path`.
    pub fn add_host_file(&mut self, host: &Path, path: &str) -> Result<()> {
        let data = fs::read(host)
            .with_context(|| format!("cannot read {}: check the path exists", host.display()))?;
        let mode = fs::metadata(host)?.permissions().mode() & 0o7777;
        self.add_file(path, data, mode)
    }

    /// Copies a host directory tree (files, directories, symlinks) below `prefix`.
    pub fn add_host_tree(&mut self, host_dir: &Path, prefix: &str) -> Result<()> {
        let meta = fs::symlink_metadata(host_dir).with_context(|| {
            format!(
                "cannot read directory {}: check it exists",
                host_dir.display()
            )
        })?;
        if !meta.is_dir() {
            bail!("{} is not a directory", host_dir.display());
        }
        let mut entries: Vec<_> = fs::read_dir(host_dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let name = name
                .to_str()
                .with_context(|| format!("file name {name:?} is not UTF-8"))?;
            let dest = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            let ft = e.file_type()?;
            if ft.is_symlink() {
                let target = fs::read_link(e.path())?;
                self.add_symlink(&dest, &target.to_string_lossy())?;
            } else if ft.is_dir() {
                self.add_dir(&dest)?;
                self.add_host_tree(&e.path(), &dest)?;
            } else if ft.is_file() {
                self.add_host_file(&e.path(), &dest)?;
            } else {
                bail!(
                    "{} is neither a file, a directory nor a symlink; remove it from the tree",
                    e.path().display()
                );
            }
        }
        Ok(())
    }

    /// Whether the tree has an entry at `path`.
    pub fn contains(&self, path: &str) -> bool {
        normalize(path).is_ok_and(|p| self.nodes.contains_key(&p))
    }

    /// The entries, sorted by path.
    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }

    /// Writes the tree as an uncompressed tar archive.
    pub fn to_tar(&self) -> Result<Vec<u8>> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, node) in &self.nodes {
            let mut h = tar::Header::new_ustar();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            match node {
                Node::File { data, mode } => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, path, data.as_slice())?;
                }
                Node::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o755);
                    h.set_size(0);
                    b.append_data(&mut h, format!("{path}/"), std::io::empty())?;
                }
                Node::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, path, target)?;
                }
            }
        }
        Ok(b.into_inner()?)
    }

    /// Writes the tree as a gzip-compressed tar archive (fixed header, no timestamp).
    pub fn to_tar_gz(&self) -> Result<Vec<u8>> {
        let tar = self.to_tar()?;
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &tar)?;
        Ok(gz.finish()?)
    }

    /// Reads an uncompressed tar archive (files, directories, symlinks) back into a tree.
    pub fn from_tar(bytes: &[u8]) -> Result<Self> {
        let mut t = Self::new();
        let mut a = tar::Archive::new(bytes);
        for e in a.entries()? {
            let mut e = e?;
            let path = e.path()?.to_string_lossy().into_owned();
            match e.header().entry_type() {
                tar::EntryType::Directory => t.add_dir(&path)?,
                tar::EntryType::Symlink => {
                    let target = e
                        .link_name()?
                        .context("symlink without target")?
                        .to_string_lossy()
                        .into_owned();
                    t.add_symlink(&path, &target)?;
                }
                tar::EntryType::Regular => {
                    let mode = e.header().mode()?;
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut e, &mut data)?;
                    t.add_file(&path, data, mode)?;
                }
                other => bail!("unexpected tar entry type {other:?} at {path}"),
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_created_and_output_is_deterministic() {
        let mut t = TarTree::new();
        t.add_file("/a/b/c.txt", b"hi".to_vec(), 0o644).unwrap();
        t.add_symlink("bin/sh", "busybox").unwrap();
        assert!(t.contains("a") && t.contains("a/b") && t.contains("bin"));
        let one = t.to_tar().unwrap();
        assert_eq!(one, t.clone().to_tar().unwrap());
        let back = TarTree::from_tar(&one).unwrap();
        assert_eq!(back.nodes(), t.nodes());
        assert_eq!(t.to_tar_gz().unwrap(), t.to_tar_gz().unwrap());
    }

    #[test]
    fn escaping_paths_are_rejected() {
        let mut t = TarTree::new();
        let err = t.add_file("../etc/passwd", vec![], 0o644).unwrap_err();
        assert!(err.to_string().contains("leaves the image root"), "{err}");
        t.add_file("f", vec![], 0o644).unwrap();
        assert!(t.add_file("f/g", vec![], 0o644).is_err());
    }
}
