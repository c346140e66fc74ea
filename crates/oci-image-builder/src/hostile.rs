//! Hostile images, for testing that a runtime keeps image content inside its boundary:
//! raw tar entries the ordinary builders refuse (`..`, absolute paths, links, devices,
//! FIFOs, names with newlines), gzip bombs, archives whose GNU long-name or PAX header
//! declares gigabytes, a directory tens of thousands of levels deep in a few hundred bytes,
//! an ordinary tar rootfs layer planted next to Spin artifact layers or over a rootfs, and
//! edits of an artifact's locked app (digests that are paths or that no layer carries).
//!
//! Everything here is written the way an attacker's tooling would write it (tar headers
//! filled in by hand), not the way `spin registry push` does.

use crate::spin::{LABEL_LOCKED_APP_DIGEST, MEDIA_TYPE_LOCKED_APP};
use crate::{Blob, Image, TarTree, MEDIA_TYPE_LAYER_TAR};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Write;

/// One raw tar entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEntry {
    /// A regular file (the name is written as given, `..` and `/` included).
    File(String, Vec<u8>),
    /// A directory.
    Dir(String),
    /// A symbolic link `name -> target`.
    Symlink(String, String),
    /// A hard link `name` to `target`.
    HardLink(String, String),
    /// A character device (0:0).
    CharDevice(String),
    /// A character device node with this major and minor number (`1:5` is `/dev/zero`).
    Device(String, u32, u32),
    /// A FIFO (named pipe): opening it for reading blocks until a writer comes.
    Fifo(String),
}

fn header(kind: tar::EntryType, name: &str, size: u64, mode: u32) -> Result<tar::Header> {
    let mut h = tar::Header::new_old();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(0);
    let field = &mut h.as_old_mut().name;
    if name.len() > field.len() {
        bail!(
            "raw tar entry name {name:?} is longer than {} bytes",
            field.len()
        );
    }
    field[..name.len()].copy_from_slice(name.as_bytes());
    Ok(h)
}

/// A tar stream of `entries`, names and link targets exactly as given.
pub fn raw_tar(entries: &[RawEntry]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let (mut h, data): (tar::Header, &[u8]) = match e {
            RawEntry::File(n, d) => (
                header(tar::EntryType::Regular, n, d.len() as u64, 0o644)?,
                d,
            ),
            RawEntry::Dir(n) => (header(tar::EntryType::Directory, n, 0, 0o755)?, &[]),
            RawEntry::Symlink(n, t) | RawEntry::HardLink(n, t) => {
                let kind = if matches!(e, RawEntry::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                let mut h = header(kind, n, 0, 0o777)?;
                let field = &mut h.as_old_mut().linkname;
                if t.len() > field.len() {
                    bail!("raw tar link target {t:?} is too long");
                }
                field[..t.len()].copy_from_slice(t.as_bytes());
                (h, &[])
            }
            RawEntry::CharDevice(n) => (header(tar::EntryType::Char, n, 0, 0o644)?, &[]),
            RawEntry::Device(n, major, minor) => {
                let mut h = tar::Header::new_ustar();
                h.set_entry_type(tar::EntryType::Char);
                h.set_path(n)?;
                h.set_size(0);
                h.set_mode(0o644);
                h.set_mtime(0);
                h.set_device_major(*major)?;
                h.set_device_minor(*minor)?;
                (h, &[])
            }
            RawEntry::Fifo(n) => (header(tar::EntryType::Fifo, n, 0, 0o644)?, &[]),
        };
        h.set_cksum();
        b.append(&h, data)?;
    }
    Ok(b.into_inner()?)
}

/// gzip of `data`.
pub fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

/// A tar+gzip of `files` files `<name>-<n>`, each of `each` zero bytes, compressed as it
/// is written (fast compression: the result is about 1/200 of the inflated size).
pub fn gzip_bomb(name: &str, files: usize, each: u64) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    {
        let mut b = tar::Builder::new(&mut gz);
        for i in 0..files {
            let mut h = header(tar::EntryType::Regular, &format!("{name}-{i}"), each, 0o644)?;
            h.set_cksum();
            b.append(&h, std::io::Read::take(std::io::repeat(0), each))?;
        }
        b.finish()?;
    }
    Ok(gz.finish()?)
}

/// The extension headers [`extension_bomb`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// A GNU long name (`L`): the `tar` crate reads its data whole to name the next member.
    GnuLongName,
    /// A PAX extended header (`x`): read whole by the `tar` crate before the next member.
    Pax,
}

/// A tar+gzip whose first header is an `ext` extension header declaring `size` bytes,
/// followed by those bytes (zeros, compressed as they are written: about 1/1000 of `size`),
/// then one small regular file. A reader that buffers the extension whole holds `size`
/// bytes (and more, while its buffer grows) before it sees a member.
pub fn extension_bomb(ext: Extension, size: u64) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(match ext {
        Extension::GnuLongName => tar::EntryType::GNULongName,
        Extension::Pax => tar::EntryType::XHeader,
    });
    h.set_size(size);
    h.set_mode(0o644);
    let name = b"././@LongLink";
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_cksum();
    gz.write_all(h.as_bytes())?;
    std::io::copy(
        &mut std::io::Read::take(std::io::repeat(0), size + (512 - size % 512) % 512),
        &mut gz,
    )?;
    let mut b = tar::Builder::new(gz);
    let mut f = header(tar::EntryType::Regular, "after-the-extension", 1, 0o644)?;
    f.set_cksum();
    b.append(&f, &b"x"[..])?;
    Ok(b.into_inner()?.finish()?)
}

/// A tar+gzip holding one directory `levels` deep (`a/a/a/...`, named through a GNU long
/// name): a few hundred bytes.
pub fn deep_dir_archive(levels: usize) -> Result<Vec<u8>> {
    let path = "a/".repeat(levels);
    let mut tar = Vec::new();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNULongName);
    h.set_size(path.len() as u64 + 1);
    h.set_mode(0o644);
    let name = b"././@LongLink";
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_cksum();
    tar.extend_from_slice(h.as_bytes());
    tar.extend_from_slice(path.as_bytes());
    tar.push(0);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    let mut d = header(tar::EntryType::Directory, "a/", 0, 0o755)?;
    d.set_cksum();
    tar.extend_from_slice(d.as_bytes());
    tar.extend_from_slice(&[0; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar)?;
    Ok(gz.finish()?)
}

/// Adds a tar rootfs layer of raw `entries` on top of a rootfs image's layers (its diff id
/// appended to the config), so containerd unpacks them over the rootfs: FIFOs and device
/// nodes become real ones there.
pub fn add_raw_rootfs_layer(img: &mut Image, entries: &[RawEntry]) -> Result<()> {
    let tar = raw_tar(entries)?;
    let diff_id = crate::sha256_digest(&tar);
    img.layers.push(Blob::new(MEDIA_TYPE_LAYER_TAR, tar));
    let mut cfg: Value = serde_json::from_slice(&img.config.data)?;
    cfg["rootfs"]["diff_ids"]
        .as_array_mut()
        .context("the image config has no rootfs.diff_ids")?
        .push(Value::String(diff_id));
    img.config.data = serde_json::to_vec(&cfg)?;
    Ok(())
}

/// Puts an ordinary tar rootfs layer built from `tree` first in an artifact image (and its
/// diff id in the config), so containerd unpacks it into the container's rootfs.
pub fn plant_rootfs_layer(img: &mut Image, tree: &TarTree) -> Result<()> {
    let tar = tree.to_tar()?;
    let diff_id = crate::sha256_digest(&tar);
    img.layers.insert(0, Blob::new(MEDIA_TYPE_LAYER_TAR, tar));
    let mut cfg: Value = serde_json::from_slice(&img.config.data)?;
    cfg["rootfs"] = serde_json::json!({ "type": "layers", "diff_ids": [diff_id] });
    img.config.data = serde_json::to_vec(&cfg)?;
    Ok(())
}

/// Rewrites the locked-app layer of an artifact with `edit` and points the config's
/// lockedAppDigest label at the new layer.
pub fn edit_lock(img: &mut Image, edit: impl FnOnce(&mut Value)) -> Result<()> {
    let layer = img
        .layers
        .iter_mut()
        .find(|l| l.media_type == MEDIA_TYPE_LOCKED_APP)
        .context("the image has no locked-app layer")?;
    let mut lock: Value = serde_json::from_slice(&layer.data)?;
    edit(&mut lock);
    layer.data = serde_json::to_vec(&lock)?;
    let digest = layer.digest();
    let mut cfg: Value = serde_json::from_slice(&img.config.data)?;
    cfg["config"]["Labels"][LABEL_LOCKED_APP_DIGEST] = Value::String(digest);
    img.config.data = serde_json::to_vec(&cfg)?;
    Ok(())
}

/// Adds a layer, returning its digest.
pub fn add_layer(img: &mut Image, media_type: &str, data: Vec<u8>) -> String {
    let b = Blob::new(media_type, data);
    let d = b.digest();
    let at = img
        .layers
        .iter()
        .position(|l| l.media_type == MEDIA_TYPE_LOCKED_APP)
        .unwrap_or(img.layers.len());
    img.layers.insert(at, b);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn raw_entries_keep_their_hostile_names() {
        let tar = raw_tar(&[
            RawEntry::File("../escape".into(), b"x".to_vec()),
            RawEntry::File("/abs".into(), b"y".to_vec()),
            RawEntry::Symlink("l".into(), "/etc".into()),
            RawEntry::HardLink("h".into(), "/etc/passwd".into()),
            RawEntry::CharDevice("c".into()),
            RawEntry::Dir("d".into()),
        ])
        .unwrap();
        let mut ar = tar::Archive::new(&tar[..]);
        let got: Vec<(Vec<u8>, tar::EntryType, Option<Vec<u8>>)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path_bytes().into_owned(),
                    e.header().entry_type(),
                    e.link_name_bytes().map(|l| l.into_owned()),
                )
            })
            .collect();
        assert_eq!(got[0].0, b"../escape");
        assert_eq!(got[1].0, b"/abs");
        assert_eq!(got[2].1, tar::EntryType::Symlink);
        assert_eq!(got[2].2.as_deref(), Some(&b"/etc"[..]));
        assert_eq!(got[3].1, tar::EntryType::Link);
        assert_eq!(got[4].1, tar::EntryType::Char);
    }

    #[test]
    fn special_files_and_deep_dirs_are_written_as_asked() {
        let tar = raw_tar(&[
            RawEntry::Fifo("spin.toml".into()),
            RawEntry::Device("zero".into(), 1, 5),
            RawEntry::Symlink("a\nFORGED".into(), "/etc".into()),
        ])
        .unwrap();
        let mut ar = tar::Archive::new(&tar[..]);
        let got: Vec<(Vec<u8>, tar::EntryType, Option<u32>)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path_bytes().into_owned(),
                    h.entry_type(),
                    h.device_minor().unwrap(),
                )
            })
            .collect();
        assert_eq!(got[0].1, tar::EntryType::Fifo);
        assert_eq!((got[1].1, got[1].2), (tar::EntryType::Char, Some(5)));
        assert_eq!(got[2].0, b"a\nFORGED");
        let deep = deep_dir_archive(30_000).unwrap();
        assert!(deep.len() < 512, "{} bytes", deep.len());
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&deep[..]));
        let e = ar.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.path_bytes().len(), 60_000);
    }

    #[test]
    fn extension_bombs_declare_their_size() {
        for ext in [Extension::GnuLongName, Extension::Pax] {
            let gz = extension_bomb(ext, 8 << 20).unwrap();
            assert!(gz.len() < 64 << 10, "{} bytes", gz.len());
            let mut head = [0u8; 512];
            flate2::read::GzDecoder::new(&gz[..])
                .read_exact(&mut head)
                .unwrap();
            let h = tar::Header::from_byte_slice(&head);
            assert_eq!(h.entry_size().unwrap(), 8 << 20);
        }
    }

    #[test]
    fn bomb_is_small_and_inflates() {
        let gz = gzip_bomb("zeros", 1, 32 << 20).unwrap();
        assert!(gz.len() < (32 << 20) / 100, "{} bytes", gz.len());
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&gz[..]));
        let mut e = ar.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.header().size().unwrap(), 32 << 20);
        assert_eq!(e.path_bytes().as_ref(), b"zeros-0");
        let mut n = 0u64;
        let mut buf = vec![0; 1 << 16];
        loop {
            let r = e.read(&mut buf).unwrap();
            if r == 0 {
                break;
            }
            n += r as u64;
        }
        assert_eq!(n, 32 << 20);
    }
}
