//! Filesystem access confined to one directory, resolved by the kernel (`openat2`).
//!
//! The shim runs as root in the host's mount namespace and touches two kinds of trees that
//! others may have shaped: a container's rootfs (laid out by whoever pushed the image) and
//! directories the shim fills from image content. Path strings joined onto a host path
//! follow whatever links such a tree holds, so nothing here does that:
//! - [`Dir::open_in_root`] / [`Dir::read_in_root`] read *from a rootfs* with
//!   `RESOLVE_IN_ROOT`: absolute links and `..` resolve as if the directory were `/`,
//!   exactly as the container itself would see them, never above it.
//! - [`Dir::create_dir_all`], [`Dir::create_file`], [`Dir::open_dir`] *write* with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: any link on the way,
//!   `..` or an absolute path is refused (`ELOOP`/`EXDEV`), so a write can only land
//!   below the directory.
//!
//! Relative paths given to the writing calls must consist of plain components; anything
//! else is an error naming the path.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context};
use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Resolution flags of every write: stay below the directory, follow no link.
const WRITE_RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);
/// Resolution flags of reads from a rootfs: links resolve inside it, as in the container.
const ROOT_RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// An open directory; paths below it are resolved relative to the descriptor.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Checks that `rel` is a relative path of plain components (no `..`, no root, no `.`
/// except leading), returning it without a leading `./`.
pub fn plain_relative(rel: &Path) -> anyhow::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => bail!(
                "path {:?} must be relative and stay inside its directory (no `..`, no leading `/`)",
                rel
            ),
        }
    }
    if out.as_os_str().is_empty() {
        bail!("path {:?} is empty", rel);
    }
    Ok(out)
}

fn errno_text(e: rustix::io::Errno) -> String {
    match e {
        rustix::io::Errno::LOOP => "a symbolic link is in the way (links are not followed)".into(),
        rustix::io::Errno::XDEV => "it would leave the directory".into(),
        e => std::io::Error::from(e).to_string(),
    }
}

impl Dir {
    /// Opens the directory at `path` (a trusted host path: the caller chose it).
    pub fn open(path: &Path) -> anyhow::Result<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .with_context(|| format!("cannot open directory {}", path.display()))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates `path` (and missing parents, 0755) and opens it. `path` is trusted.
    pub fn create(path: &Path) -> anyhow::Result<Dir> {
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create directory {}", path.display()))?;
        Dir::open(path)
    }

    /// Another handle on the same directory.
    pub fn try_clone(&self) -> anyhow::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// The host path this directory was opened at (for messages and bind mounts).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn shown(&self, rel: &Path) -> String {
        self.path.join(rel).display().to_string()
    }

    /// Opens `rel` for reading as the container would see it: `rel` and every link on
    /// the way resolve with this directory as `/`.
    pub fn open_in_root(&self, rel: &Path) -> anyhow::Result<File> {
        let fd = rustix::fs::openat2(
            &self.fd,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            ROOT_RESOLVE,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot open {} inside {}: {}",
                rel.display(),
                self.path.display(),
                errno_text(e)
            )
        })?;
        let f = File::from(fd);
        let md = f.metadata()?;
        if !md.is_file() {
            bail!(
                "{} inside {} is not a regular file",
                rel.display(),
                self.path.display()
            );
        }
        Ok(f)
    }

    /// Reads the regular file `rel` (resolved as in [`Dir::open_in_root`]), refusing files
    /// larger than `max` bytes.
    pub fn read_in_root(&self, rel: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
        let f = self.open_in_root(rel)?;
        let len = f.metadata()?.len();
        if len > max {
            bail!(
                "{} inside {} has {len} bytes, more than the limit of {max}",
                rel.display(),
                self.path.display()
            );
        }
        let mut out = Vec::with_capacity(len as usize);
        f.take(max + 1).read_to_end(&mut out)?;
        if out.len() as u64 > max {
            bail!(
                "{} inside {} grew past the limit of {max} bytes while read",
                rel.display(),
                self.path.display()
            );
        }
        Ok(out)
    }

    /// Whether anything (a link included, not followed) exists at `rel`, resolved as the
    /// container would see it.
    pub fn exists_in_root(&self, rel: &Path) -> anyhow::Result<bool> {
        match rustix::fs::openat2(
            &self.fd,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ROOT_RESOLVE,
        ) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => bail!(
                "cannot look up {} inside {}: {}",
                rel.display(),
                self.path.display(),
                errno_text(e)
            ),
        }
    }

    /// Opens the existing directory `rel` below this one (no links followed).
    pub fn open_dir(&self, rel: &Path) -> anyhow::Result<Dir> {
        let rel = plain_relative(rel)?;
        let fd = rustix::fs::openat2(
            &self.fd,
            &rel,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            WRITE_RESOLVE,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot open directory {}: {}",
                self.shown(&rel),
                errno_text(e)
            )
        })?;
        Ok(Dir {
            fd,
            path: self.path.join(&rel),
        })
    }

    /// Creates `rel` and its missing parents (0755) below this directory, refusing links
    /// on the way, and opens it.
    pub fn create_dir_all(&self, rel: &Path) -> anyhow::Result<Dir> {
        let rel = plain_relative(rel)?;
        let mut cur = self.try_clone()?;
        for c in rel.components() {
            match rustix::fs::mkdirat(&cur.fd, c.as_os_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => bail!(
                    "cannot create directory {}: {}",
                    cur.shown(Path::new(c.as_os_str())),
                    errno_text(e)
                ),
            }
            cur = cur.open_dir(Path::new(c.as_os_str()))?;
        }
        Ok(cur)
    }

    /// Creates the new regular file `name` (a single component) in this directory with
    /// `mode`; fails if anything already exists there.
    pub fn create_file(&self, name: &str, mode: u32) -> anyhow::Result<File> {
        let rel = plain_relative(Path::new(name))?;
        if rel.components().count() != 1 {
            bail!("file name {name:?} must be a single path component");
        }
        let fd = rustix::fs::openat2(
            &self.fd,
            &rel,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
            WRITE_RESOLVE,
        )
        .map_err(|e| anyhow::anyhow!("cannot create {}: {}", self.shown(&rel), errno_text(e)))?;
        Ok(File::from(fd))
    }

    /// Opens the regular file `rel` below this directory for reading (no links followed).
    pub fn open_file(&self, rel: &Path) -> anyhow::Result<File> {
        let rel = plain_relative(rel)?;
        let fd = rustix::fs::openat2(
            &self.fd,
            &rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            WRITE_RESOLVE,
        )
        .map_err(|e| anyhow::anyhow!("cannot open {}: {}", self.shown(&rel), errno_text(e)))?;
        Ok(File::from(fd))
    }

    /// Whether the single component `name` exists in this directory (not followed).
    pub fn contains(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Renames `from` to `to` (single components, both in this directory).
    pub fn rename(&self, from: &str, to: &str) -> anyhow::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(|e| {
            anyhow::anyhow!(
                "cannot rename {} to {to}: {}",
                self.shown(Path::new(from)),
                errno_text(e)
            )
        })
    }

    /// Removes the file `name` (a single component) from this directory, if present.
    pub fn remove_file(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty());
    }

    /// Links the file `rel` (below `from`) as `name` in this directory; no links followed.
    pub fn hard_link(&self, from: &Dir, rel: &Path, name: &str) -> anyhow::Result<()> {
        let rel = plain_relative(rel)?;
        rustix::fs::linkat(&from.fd, &rel, &self.fd, name, rustix::fs::AtFlags::empty()).map_err(
            |e| {
                anyhow::anyhow!(
                    "cannot link {} as {}: {}",
                    from.shown(&rel),
                    self.shown(Path::new(name)),
                    errno_text(e)
                )
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::symlink;

    #[test]
    fn writes_refuse_links_and_escapes() {
        let t = tempfile::tempdir().unwrap();
        let canary = t.path().join("canary");
        std::fs::create_dir(&canary).unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        symlink(&canary, root.join("link")).unwrap();
        symlink("../canary", root.join("rel-link")).unwrap();
        let d = Dir::open(&root).unwrap();
        for bad in ["link/x", "rel-link/x", "../canary/x", "/tmp/x"] {
            let e = d.create_dir_all(Path::new(bad)).unwrap_err();
            assert!(
                format!("{e:#}").contains(bad) || format!("{e:#}").contains("link"),
                "{bad}: {e:#}"
            );
        }
        let e = d.open_dir(Path::new("link")).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(d.create_file("link", 0o644).is_err());
        assert!(d.create_file("a/b", 0o644).is_err());
        assert_eq!(std::fs::read_dir(&canary).unwrap().count(), 0);

        let sub = d.create_dir_all(Path::new("a/b/c")).unwrap();
        let mut f = sub.create_file("f", 0o644).unwrap();
        f.write_all(b"hi").unwrap();
        assert_eq!(std::fs::read(root.join("a/b/c/f")).unwrap(), b"hi");
        // O_EXCL: an existing name is never reused.
        assert!(sub.create_file("f", 0o644).is_err());
        sub.rename("f", "g").unwrap();
        assert!(sub.contains("g") && !sub.contains("f"));
        d.create_dir_all(Path::new("a/b/c")).unwrap();
    }

    #[test]
    fn reads_resolve_links_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("host-secret"), b"host").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), b"container").unwrap();
        symlink("/etc/passwd", root.join("abs")).unwrap();
        symlink("../../host-secret", root.join("up")).unwrap();
        let d = Dir::open(&root).unwrap();
        // An absolute link means the container's /etc/passwd, not the host's.
        assert_eq!(d.read_in_root(Path::new("abs"), 100).unwrap(), b"container");
        assert_eq!(
            d.read_in_root(Path::new("/etc/passwd"), 100).unwrap(),
            b"container"
        );
        // `..` stops at the root: the host file is never reached.
        assert!(d.read_in_root(Path::new("up"), 100).is_err());
        assert!(d.read_in_root(Path::new("../host-secret"), 100).is_err());
        let e = d
            .read_in_root(Path::new("etc/passwd"), 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("limit of 3"), "{e}");
        assert!(d.read_in_root(Path::new("etc"), 100).is_err());
        assert!(d.exists_in_root(Path::new("abs")).unwrap());
        assert!(!d.exists_in_root(Path::new("none")).unwrap());
    }

    #[test]
    fn plain_relative_rejects_escapes() {
        assert_eq!(
            plain_relative(Path::new("./a/b")).unwrap(),
            Path::new("a/b")
        );
        for bad in ["/a", "a/../b", "..", "", "."] {
            assert!(plain_relative(Path::new(bad)).is_err(), "{bad}");
        }
    }
}
