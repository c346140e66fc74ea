//! Looking into a container's rootfs (laid out by whoever built the image) without
//! following its links out of it: every lookup is relative to an open descriptor of the
//! rootfs, resolved by the kernel as the container would see it (`RESOLVE_IN_ROOT`), and
//! files are inspected through `O_PATH` descriptors (`fstat`), never opened.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use spin_app_format::untrusted::{shown, shown_path};
use wasm_shim_core::confined::Dir;

use crate::artifact::APP_DIR;

/// Resolution of every lookup: links and `..` stay inside the rootfs; no magic links.
const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// An `O_PATH` descriptor of `rel` inside `root` (links on the way resolved inside it; the
/// last component followed only when `follow`), or None when nothing is there.
fn lookup(root: &Dir, rel: &Path, follow: bool) -> anyhow::Result<Option<OwnedFd>> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    match rustix::fs::openat2(root.fd(), rel, flags, Mode::empty(), IN_ROOT) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => Ok(None),
        Err(e) => Err(
            anyhow::Error::from(std::io::Error::from(e)).context(format!(
                "cannot look up /{} in the container's rootfs {}",
                shown_path(rel),
                root.path().display()
            )),
        ),
    }
}

/// Whether `/rel` is a regular file as the container sees it: links resolve inside the
/// rootfs `root` (never to the host's files), the file is only `fstat`ed.
/// Inside the container (`root` is `/`) where a seccomp profile denies `openat2`, the
/// path is looked up plainly: there `/` is the rootfs, so links cannot leave it either.
pub fn is_regular_file(root: &Dir, rel: &Path) -> anyhow::Result<bool> {
    let fd = match lookup(root, rel, true) {
        Ok(Some(fd)) => fd,
        Ok(None) => return Ok(false),
        Err(e) if root.path() == Path::new("/") && denied(&e) => {
            return Ok(std::fs::metadata(root.path().join(rel)).is_ok_and(|m| m.is_file()));
        }
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    Ok(FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
}

/// Whether a lookup failed because the syscall is unavailable (seccomp, old kernel).
fn denied(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::raw_os_error)
        .is_some_and(|c| c == libc::ENOSYS || c == libc::EPERM)
}

/// Checks the rootfs' `/`[`APP_DIR`], where the shim mounts the app read-only. Absent is
/// fine; so is an empty directory: the mount point the container runtime created there
/// when the container last ran (it stays in the container's writable layer, so `docker
/// start`, `docker restart` and restart policies find it), or an image's empty
/// directory, which the mount hides. Anything else (a link, a file, a directory with
/// entries) is content the image ships at the reserved path and is refused, naming it.
pub fn check_app_mount_point(root: &Dir, id: &str) -> anyhow::Result<()> {
    let refuse = |what: String| {
        anyhow::anyhow!(
            "container {id}: the image has /{APP_DIR} ({what}), a path the shim reserves for the Spin app it mounts read-only; remove it from the image"
        )
    };
    let Some(fd) = lookup(root, Path::new(APP_DIR), false)? else {
        return Ok(());
    };
    let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {}
        FileType::Symlink => return Err(refuse("a symbolic link".into())),
        FileType::RegularFile => return Err(refuse("a file".into())),
        other => return Err(refuse(format!("a {other:?}"))),
    }
    // Listed through the O_PATH descriptor: a directory is reopened for reading only
    // after fstat said it is one, so nothing else is ever opened.
    let dir = rustix::fs::openat(
        &fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    for entry in rustix::fs::Dir::read_from(dir.as_fd()).map_err(std::io::Error::from)? {
        let entry = entry.map_err(std::io::Error::from)?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            return Err(refuse(format!("a directory holding \"{}\"", shown(name))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_resolve_inside_the_rootfs_only() {
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("spin.toml"), b"x").unwrap();
        let d = tempfile::tempdir().unwrap();
        let root = Dir::open(d.path()).unwrap();
        let rel = Path::new("spin.toml");
        assert!(!is_regular_file(&root, rel).unwrap());
        // A link to the host's file resolves to /<host path> inside the rootfs: nothing.
        std::os::unix::fs::symlink(host.path().join("spin.toml"), d.path().join("spin.toml"))
            .unwrap();
        assert!(!is_regular_file(&root, rel).unwrap());
        // A relative link climbing out stays at the rootfs' `/`.
        std::fs::remove_file(d.path().join("spin.toml")).unwrap();
        std::os::unix::fs::symlink("../../../../../../real.toml", d.path().join("spin.toml"))
            .unwrap();
        std::fs::write(d.path().join("real.toml"), b"x").unwrap();
        assert!(is_regular_file(&root, rel).unwrap());
        // A FIFO is not a regular file (and is never opened).
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(!is_regular_file(&root, Path::new("fifo")).unwrap());
        std::fs::create_dir(d.path().join("dir")).unwrap();
        assert!(!is_regular_file(&root, Path::new("dir")).unwrap());
    }

    #[test]
    fn app_mount_point_tolerates_only_an_empty_directory() {
        let d = tempfile::tempdir().unwrap();
        let root = Dir::open(d.path()).unwrap();
        let p = d.path().join(APP_DIR);
        check_app_mount_point(&root, "c").unwrap();
        // What the container runtime leaves behind: an empty directory.
        std::fs::create_dir(&p).unwrap();
        check_app_mount_point(&root, "c").unwrap();
        std::fs::write(p.join("locked.json"), b"{}").unwrap();
        let e = check_app_mount_point(&root, "c").unwrap_err().to_string();
        assert!(e.contains("reserves") && e.contains("locked.json"), "{e}");
        std::fs::remove_dir_all(&p).unwrap();
        std::fs::write(&p, b"x").unwrap();
        let e = check_app_mount_point(&root, "c").unwrap_err().to_string();
        assert!(e.contains("a file"), "{e}");
        std::fs::remove_file(&p).unwrap();
        // A link to an empty host directory is refused, not followed.
        let host = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(host.path(), &p).unwrap();
        let e = check_app_mount_point(&root, "c").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
    }
}
