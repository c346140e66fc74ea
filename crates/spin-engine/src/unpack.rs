//! The helper's side of unpacking a Spin OCI artifact: what the shim asks
//! ([`UnpackJob`]), what the helper does with its inputs (`unpack_in_helper`) and its
//! verdict (`Unpacked`). The shim's side, which streams the layers from containerd and
//! takes the written directories back, is [`crate::artifact`]; the helper process that
//! runs this is [`crate::compile_helper`].

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use wasm_shim_core::confined::Dir;
use wasm_shim_core::untrusted::{extract_tar_gz, BlobWriter, Budget, Limits};

/// One layer of an [`UnpackJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnpackLayer {
    /// Its digest (`sha256:<hex>`), checked as it is written.
    pub digest: String,
    /// Its size, as its descriptor states.
    pub size: i64,
    /// Whether it is a `tar+gzip` archive layer, extracted into `archives/<hex>/`.
    pub archive: bool,
    /// How errors name it.
    pub what: String,
}

/// What the unpacking helper does (the compile helper's `Job::Unpack`): writes each
/// layer into `blobs/<hex>` with its size and sha256 checked, and extracts the archive
/// layers, all within one budget of these limits ([`Limits`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnpackJob {
    /// [`Limits::max_bytes`].
    pub max_bytes: u64,
    /// [`Limits::max_entries`].
    pub max_entries: u64,
    /// The layers, in the order the shim streams them.
    pub layers: Vec<UnpackLayer>,
}

/// The unpacking helper's verdict (its output).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Unpacked {
    /// sha256 hex of every file of the archive layers (each also `blobs/<hex>`).
    pub(crate) files: Vec<String>,
    /// Bytes written.
    pub(crate) bytes: u64,
}

/// The helper's side of an unpack (run by the compile helper's worker, confined, as its
/// unprivileged uid): `input(i)` takes the helper's input `i` (0: the `blobs` directory,
/// 1: the `archives` directory, 2..: the layers' pipes, in the job's order). Writes every
/// layer from its pipe with [`BlobWriter`] (size and sha256 checked), extracts the archive
/// layers with [`extract_tar_gz`] under one [`Budget`], and returns the verdict.
pub(crate) fn unpack_in_helper(
    job: UnpackJob,
    mut input: impl FnMut(usize) -> File,
) -> anyhow::Result<Vec<u8>> {
    let blobs = helper_dir(input(0)).context("the blobs directory")?;
    let archives = helper_dir(input(1)).context("the archives directory")?;
    let mut budget = Budget::new(Limits {
        max_bytes: job.max_bytes,
        max_entries: job.max_entries,
    });
    let mut files = Vec::new();
    let mut buf = vec![0u8; 128 << 10];
    for (i, layer) in job.layers.iter().enumerate() {
        let mut src = input(i + 2);
        let mut w = BlobWriter::new(&blobs, &layer.digest, layer.size, &layer.what)?;
        loop {
            let n = match src.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).with_context(|| layer.what.clone()),
            };
            if n == 0 {
                break;
            }
            w.write(&buf[..n], &mut budget)?;
        }
        let hex = w.finish()?;
        drop(src);
        if layer.archive {
            // Not `Dir::open_file`, which reopens through `/proc`: the helper has none, and
            // wrote this file itself.
            let src = rustix::fs::openat(
                blobs.fd(),
                hex.as_str(),
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map(File::from)
            .map_err(std::io::Error::from)
            .with_context(|| format!("{}: reopening it to extract it", layer.what))?;
            let dest = archives.create_dir_all(Path::new(&hex))?;
            let x = extract_tar_gz(
                std::io::BufReader::new(src),
                &dest,
                &blobs,
                &mut budget,
                &layer.what,
            )?;
            files.extend(x.file_digests);
        }
    }
    Ok(serde_json::to_vec(&Unpacked {
        files,
        bytes: budget.bytes(),
    })?)
}

/// A [`Dir`] of the directory descriptor `fd` (the helper is chrooted into an empty
/// directory: the descriptor is its only way to it).
fn helper_dir(fd: File) -> anyhow::Result<Dir> {
    nix::unistd::fchdir(std::os::fd::AsRawFd::as_raw_fd(&fd))?;
    let dir = Dir::open(Path::new("."));
    nix::unistd::chdir("/")?;
    dir
}
