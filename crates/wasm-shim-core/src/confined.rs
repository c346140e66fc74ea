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
//!
//! Files are only ever opened when they are regular files: each is first opened `O_PATH`
//! (which opens nothing) and inspected, so a FIFO (whose open blocks until a writer comes)
//! or a device node (whose open acts on the device) in a rootfs is refused, never opened.
//! Trees are removed by [`remove_tree`], without recursion, links or crossing mounts.

use std::fs::File;
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
                "path \"{}\" must be relative and stay inside its directory (no `..`, no leading `/`)",
                shown_path(rel)
            ),
        }
    }
    if out.as_os_str().is_empty() {
        bail!("path \"{}\" is empty", shown_path(rel));
    }
    Ok(out)
}

/// Every error and message about a path here shows it escaped and cut.
use spin_app_format::untrusted::{read_capped, reopen_regular, shown_path};

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
        shown_path(&self.path.join(rel)).to_string()
    }

    /// Opens the regular file `rel` for reading as the container would see it: `rel` and
    /// every link on the way resolve with this directory as `/`. Anything but a regular
    /// file (a FIFO, a device, a socket, a directory) is refused without being opened.
    pub fn open_in_root(&self, rel: &Path) -> anyhow::Result<File> {
        let fd = rustix::fs::openat2(
            &self.fd,
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ROOT_RESOLVE,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot open {} inside {}: {}",
                shown_path(rel),
                self.path.display(),
                errno_text(e)
            )
        })?;
        reopen_regular(fd)
            .map_err(|e| anyhow::anyhow!("{} inside {}: {e}", shown_path(rel), self.path.display()))
    }

    /// Reads the regular file `rel` (resolved as in [`Dir::open_in_root`]), refusing files
    /// larger than `max` bytes.
    pub fn read_in_root(&self, rel: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
        let f = self.open_in_root(rel)?;
        read_capped(
            f,
            max,
            &format!("{} inside {}", shown_path(rel), self.path.display()),
        )
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
                shown_path(rel),
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

    /// Opens the regular file `rel` below this directory for reading (no links followed;
    /// anything but a regular file is refused unopened).
    pub fn open_file(&self, rel: &Path) -> anyhow::Result<File> {
        let rel = plain_relative(rel)?;
        let fd = rustix::fs::openat2(
            &self.fd,
            &rel,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            WRITE_RESOLVE,
        )
        .map_err(|e| anyhow::anyhow!("cannot open {}: {}", self.shown(&rel), errno_text(e)))?;
        reopen_regular(fd).map_err(|e| anyhow::anyhow!("{}: {e}", self.shown(&rel)))
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

/// One directory on the way down in [`remove_tree`]: its name in its parent, its
/// identity (to check `..` leads back to it), and the subdirectories still to remove.
struct Level {
    name: std::ffi::OsString,
    id: (u64, u64),
    pending: Vec<std::ffi::OsString>,
}

fn id_of(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

/// Removes every non-directory entry of `dir` (links unfollowed) and returns the names of
/// its subdirectories.
fn clear_files(
    dir: &OwnedFd,
    shown: &dyn Fn() -> String,
) -> anyhow::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut subdirs = Vec::new();
    let entries = rustix::fs::Dir::read_from(dir)
        .map_err(|e| anyhow::anyhow!("cannot list {}: {}", shown(), errno_text(e)))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| anyhow::anyhow!("cannot list {}: {}", shown(), errno_text(e)))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            rustix::fs::FileType::Directory => true,
            rustix::fs::FileType::Unknown => {
                rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
                    .unwrap_or(false)
            }
            _ => false,
        };
        let os = std::ffi::OsStr::from_bytes(name.to_bytes()).to_os_string();
        if is_dir {
            subdirs.push(os);
        } else {
            match rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => bail!(
                    "cannot remove {}/{}: {}",
                    shown(),
                    shown_path(Path::new(&os)),
                    errno_text(e)
                ),
            }
        }
    }
    Ok(subdirs)
}

/// Removes `path` and everything below it, however deep, without recursion: one
/// descriptor for the directory being emptied and a list of names per level (memory grows
/// with the number of directories, never the stack), `..` checked against the directory
/// it must lead back to. Links are removed, never followed; a directory on another
/// filesystem (a mount point) is not entered and fails the removal, naming it (what is
/// around it is still removed). A missing `path` is not an error. For trees an image
/// shaped (an extracted archive 30,000 directories deep overflowed
/// `std::fs::remove_dir_all`'s recursion).
pub fn remove_tree(path: &Path) -> anyhow::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        bail!("refusing to remove {}: it has no parent", path.display());
    };
    let parent = rustix::fs::open(
        if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        },
        DIR_FLAGS.difference(OFlags::NOFOLLOW),
        Mode::empty(),
    );
    let parent = match parent {
        Ok(p) => p,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => bail!("cannot remove {}: {}", path.display(), errno_text(e)),
    };
    let root = match rustix::fs::openat(&parent, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            return rustix::fs::unlinkat(&parent, name, rustix::fs::AtFlags::empty()).map_err(
                |e| anyhow::anyhow!("cannot remove {}: {}", path.display(), errno_text(e)),
            );
        }
        Err(e) => bail!("cannot remove {}: {}", path.display(), errno_text(e)),
    };
    let root_dev = rustix::fs::fstat(&root)?.st_dev;
    // The path of the level being emptied, for messages only.
    let here = |levels: &[Level]| -> String {
        let mut p = path.to_path_buf();
        for l in levels.iter().skip(1) {
            p.push(&l.name);
        }
        shown_path(&p).to_string()
    };
    let mut first_error: Option<anyhow::Error> = None;
    let mut levels = vec![Level {
        name: name.to_os_string(),
        id: id_of(&rustix::fs::fstat(&root)?),
        pending: Vec::new(),
    }];
    levels[0].pending = clear_files(&root, &|| path.display().to_string())?;
    let mut cur = root;
    loop {
        let top = levels.last_mut().expect("the root level is popped last");
        if let Some(child) = top.pending.pop() {
            let fd = match rustix::fs::openat(&cur, &child, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
                    let _ = rustix::fs::unlinkat(&cur, &child, rustix::fs::AtFlags::empty());
                    continue;
                }
                Err(e) => {
                    first_error.get_or_insert(anyhow::anyhow!(
                        "cannot remove {}/{}: {}",
                        here(&levels),
                        shown_path(Path::new(&child)),
                        errno_text(e)
                    ));
                    continue;
                }
            };
            let st = rustix::fs::fstat(&fd)?;
            if st.st_dev != root_dev {
                first_error.get_or_insert(anyhow::anyhow!(
                    "not removing {}/{}: it is a mount point (another filesystem)",
                    here(&levels),
                    shown_path(Path::new(&child))
                ));
                continue;
            }
            levels.push(Level {
                name: child,
                id: id_of(&st),
                pending: Vec::new(),
            });
            let shown_here = here(&levels);
            match clear_files(&fd, &|| shown_here.clone()) {
                Ok(subdirs) => levels.last_mut().expect("just pushed").pending = subdirs,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            cur = fd;
            continue;
        }
        let done = levels.pop().expect("the loop ends when it is empty");
        let Some(up) = levels.last() else {
            match rustix::fs::unlinkat(&parent, name, rustix::fs::AtFlags::REMOVEDIR) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => {
                    first_error.get_or_insert(anyhow::anyhow!(
                        "cannot remove {}: {}",
                        path.display(),
                        errno_text(e)
                    ));
                }
            }
            break;
        };
        let fd = rustix::fs::openat(&cur, "..", DIR_FLAGS, Mode::empty())?;
        if id_of(&rustix::fs::fstat(&fd)?) != up.id {
            bail!(
                "stopped removing {}: {} was moved while it was removed",
                path.display(),
                here(&levels)
            );
        }
        if let Err(e) = rustix::fs::unlinkat(&fd, &done.name, rustix::fs::AtFlags::REMOVEDIR) {
            if e != rustix::io::Errno::NOENT {
                first_error.get_or_insert(anyhow::anyhow!(
                    "cannot remove {}/{}: {}",
                    here(&levels),
                    shown_path(Path::new(&done.name)),
                    errno_text(e)
                ));
            }
        }
        cur = fd;
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
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

    #[test]
    fn reads_refuse_fifos_and_devices_unopened() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("spin.toml"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        symlink("/spin.toml", root.join("via-link")).unwrap();
        let d = Dir::open(&root).unwrap();
        // Opening a FIFO without a writer blocks forever: refused without opening it.
        for p in ["spin.toml", "via-link", "/spin.toml"] {
            let e = d.read_in_root(Path::new(p), 100).unwrap_err().to_string();
            assert!(e.contains("a FIFO, not a regular file"), "{p}: {e}");
        }
        assert!(d.open_file(Path::new("spin.toml")).is_err());
        // A device node (made here by root, as an image's layer would have it): never
        // opened.
        if rustix::process::geteuid().is_root() {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                root.join("dev"),
                rustix::fs::FileType::CharacterDevice,
                Mode::from_raw_mode(0o644),
                rustix::fs::makedev(1, 3),
            )
            .unwrap();
            let e = d
                .read_in_root(Path::new("dev"), 100)
                .unwrap_err()
                .to_string();
            assert!(e.contains("character device"), "{e}");
        }
    }

    #[test]
    fn deep_trees_are_removed_without_recursion() {
        let t = tempfile::tempdir().unwrap();
        let canary = t.path().join("canary");
        std::fs::create_dir(&canary).unwrap();
        std::fs::write(canary.join("keep"), b"x").unwrap();
        let top = t.path().join("tree");
        std::fs::create_dir(&top).unwrap();
        // 30,000 levels, built through descriptors (the path is far over PATH_MAX), with
        // files, a FIFO and links to the canary along the way.
        let mut cur = rustix::fs::open(&top, DIR_FLAGS, Mode::empty()).unwrap();
        for i in 0..30_000 {
            if i % 5000 == 0 {
                let f = rustix::fs::openat(
                    &cur,
                    "f",
                    OFlags::CREATE | OFlags::WRONLY,
                    Mode::from_raw_mode(0o644),
                )
                .unwrap();
                drop(f);
                rustix::fs::symlinkat(&canary, &cur, "link").unwrap();
                rustix::fs::mknodat(
                    &cur,
                    "fifo",
                    rustix::fs::FileType::Fifo,
                    Mode::from_raw_mode(0o644),
                    0,
                )
                .unwrap();
            }
            rustix::fs::mkdirat(&cur, "a", Mode::from_raw_mode(0o755)).unwrap();
            cur = rustix::fs::openat(&cur, "a", DIR_FLAGS, Mode::empty()).unwrap();
        }
        drop(cur);
        // In a thread with a 256 KiB stack: no recursion.
        let p = top.clone();
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || remove_tree(&p))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!top.exists());
        assert_eq!(std::fs::read(canary.join("keep")).unwrap(), b"x");
        // Missing is fine; a link is removed, not followed.
        remove_tree(&top).unwrap();
        symlink(&canary, t.path().join("l")).unwrap();
        remove_tree(&t.path().join("l")).unwrap();
        assert!(canary.join("keep").exists());
    }
}
