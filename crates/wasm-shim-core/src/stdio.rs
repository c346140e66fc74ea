//! Opens the stdio paths containerd hands a task (FIFOs from `ctr`/CRI, or files).

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context as _};

fn plain_path(uri: &str) -> anyhow::Result<&str> {
    if let Some(p) = uri.strip_prefix("file://") {
        return Ok(p);
    }
    if uri.contains("://") {
        bail!(
            "stdio URI `{uri}` is not supported by {}: use a FIFO or file path (or file://)",
            crate::shim_names().runtime_id
        );
    }
    Ok(uri)
}

/// Opens a stdout/stderr destination. An empty path gives /dev/null. A FIFO is opened
/// read-write so the open never blocks while the reader is not there yet; the container
/// holds the only writer, so the reader sees EOF when the container exits.
pub fn open_output(uri: &str) -> anyhow::Result<OwnedFd> {
    if uri.is_empty() {
        return Ok(OpenOptions::new().write(true).open("/dev/null")?.into());
    }
    let path = plain_path(uri)?;
    let is_fifo = Path::new(path)
        .metadata()
        .map(|m| m.file_type().is_fifo())
        .unwrap_or(false);
    let f = if is_fifo {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
    } else {
        OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
    }
    .with_context(|| format!("opening task output {path}"))?;
    Ok(f.into())
}

/// Opens the stdin source (None when the task has no stdin). A FIFO is opened without
/// blocking for a writer.
pub fn open_stdin(uri: &str) -> anyhow::Result<Option<OwnedFd>> {
    if uri.is_empty() {
        return Ok(None);
    }
    let path = plain_path(uri)?;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("opening task stdin {path}"))?;
    // Back to blocking reads for the program.
    let fd: OwnedFd = f.into();
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    let flags = nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(Some(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn fifo_output_gives_eof_after_writer_closes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Opening must not block although no reader exists yet.
        let w = open_output(p.to_str().unwrap()).unwrap();
        let mut r = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .unwrap();
        let mut wf = std::fs::File::from(w);
        wf.write_all(b"hello").unwrap();
        drop(wf);
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }

    #[test]
    fn file_and_empty_paths() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.txt");
        let uri = format!("file://{}", p.display());
        let mut f = std::fs::File::from(open_output(&uri).unwrap());
        f.write_all(b"x").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        open_output("").unwrap();
        assert!(open_stdin("").unwrap().is_none());
        let e = open_output("binary:///usr/bin/logger").unwrap_err();
        assert!(e.to_string().contains("binary:///usr/bin/logger"));
    }
}
