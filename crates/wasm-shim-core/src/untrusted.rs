//! Untrusted image content on its way to disk: digest syntax, per-app limits, a
//! streaming size-checked and digest-verified blob writer, and a bounded tar+gzip
//! extractor ([`tarball`] reads the archive). Everything writes through
//! [`crate::confined::Dir`]; every string from the image that reaches an error is
//! [`shown`] (escaped and cut).

pub mod tarball;

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

use spin_app_format::untrusted::check_path_size;
pub use spin_app_format::untrusted::{shown, shown_path, Shown};

use crate::confined::Dir;

/// Env var (shim's environment): cap on the bytes one app may materialise (layers and
/// extracted archive files together).
pub const MAX_BYTES_ENV: &str = spin_shim_settings::shim::MAX_APP_BYTES;
/// Env var (shim's environment): cap on the files and directories one app's archive
/// layers may hold.
pub const MAX_ENTRIES_ENV: &str = spin_shim_settings::shim::MAX_APP_ENTRIES;
/// Default of [`MAX_BYTES_ENV`]: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default of [`MAX_ENTRIES_ENV`].
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Largest JSON document (index, manifest, config, locked app) read into memory: 4 MiB,
/// the manifest limit registries apply.
pub const MAX_JSON_BYTES: u64 = 4 << 20;

/// Checks `digest` is `sha256:` followed by 64 lower-case hex digits; returns the hex.
pub fn digest_hex(digest: &str) -> anyhow::Result<&str> {
    match digest.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Ok(h)
        }
        _ => bail!(
            "digest \"{}\" is not of the form sha256:<64 lower-case hex digits>; the image is malformed",
            shown(digest)
        ),
    }
}

/// The per-app limits, from the shim's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one app may write.
    pub max_bytes: u64,
    /// Archive entries one app may hold.
    pub max_entries: u64,
}

impl Limits {
    /// [`MAX_BYTES_ENV`] and [`MAX_ENTRIES_ENV`] from the shim's settings, defaults where
    /// unset.
    pub fn from_env() -> anyhow::Result<Limits> {
        let s = spin_shim_settings::shim::ShimSettings::init()?;
        Ok(Limits {
            max_bytes: s.max_app_bytes,
            max_entries: s.max_app_entries,
        })
    }
}

/// What one app has used of its [`Limits`].
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    bytes: u64,
    entries: u64,
}

impl Budget {
    /// A fresh budget.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            bytes: 0,
            entries: 0,
        }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Accounts `n` more bytes of `what`.
    pub fn take_bytes(&mut self, n: u64, what: &str) -> anyhow::Result<()> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.max_bytes {
            bail!(
                "{what}: the app's content exceeds the limit of {} bytes ({MAX_BYTES_ENV} in the shim's environment)",
                self.limits.max_bytes
            );
        }
        Ok(())
    }

    fn take_entry(&mut self, what: &str) -> anyhow::Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            bail!(
                "{what}: the app's archives hold more than {} entries ({MAX_ENTRIES_ENV} in the shim's environment)",
                self.limits.max_entries
            );
        }
        Ok(())
    }
}

/// Writes one blob into a directory as it arrives: refuses more bytes than the
/// descriptor's size, hashes as it goes, and only [`BlobWriter::finish`] (size and sha256
/// equal to the descriptor's) gives it its final name `<hex>`. Dropped unfinished, the
/// partial file is removed.
pub struct BlobWriter<'a> {
    dir: &'a Dir,
    hex: String,
    tmp: String,
    file: Option<std::io::BufWriter<std::fs::File>>,
    hasher: Sha256,
    expected: u64,
    written: u64,
    what: String,
}

impl<'a> BlobWriter<'a> {
    /// Starts blob `digest` (checked with [`digest_hex`]) of `expected` bytes in `dir`.
    pub fn new(dir: &'a Dir, digest: &str, expected: i64, what: &str) -> anyhow::Result<Self> {
        let hex = digest_hex(digest)
            .with_context(|| what.to_string())?
            .to_string();
        if expected < 0 {
            bail!("{what}: descriptor size {expected} of {digest} is negative");
        }
        let tmp = format!(".partial-{hex}");
        dir.remove_file(&tmp);
        let file = dir
            .create_file(&tmp, 0o644)
            .with_context(|| what.to_string())?;
        Ok(BlobWriter {
            dir,
            hex,
            tmp,
            file: Some(std::io::BufWriter::with_capacity(256 << 10, file)),
            hasher: Sha256::new(),
            expected: expected as u64,
            written: 0,
            what: what.to_string(),
        })
    }

    /// Appends a chunk, accounted in `budget`.
    pub fn write(&mut self, chunk: &[u8], budget: &mut Budget) -> anyhow::Result<()> {
        self.written += chunk.len() as u64;
        if self.written > self.expected {
            bail!(
                "{}: content sha256:{} is larger than the {} bytes its descriptor states",
                self.what,
                self.hex,
                self.expected
            );
        }
        budget.take_bytes(chunk.len() as u64, &self.what)?;
        self.hasher.update(chunk);
        self.file
            .as_mut()
            .expect("open until finish")
            .write_all(chunk)
            .with_context(|| format!("{}: writing {}", self.what, self.dir.path().display()))
    }

    /// Checks size and digest and renames the blob into place; returns its file name.
    pub fn finish(mut self) -> anyhow::Result<String> {
        let file = self.file.take().expect("open until finish");
        file.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_data().map(|_| f))
            .with_context(|| format!("{}: writing {}", self.what, self.dir.path().display()))?;
        if self.written != self.expected {
            bail!(
                "{}: content sha256:{} has {} bytes, its descriptor states {}; the image is corrupt",
                self.what,
                self.hex,
                self.written,
                self.expected
            );
        }
        let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if got != self.hex {
            bail!(
                "{what}: content sha256:{hex} is corrupt in containerd's content store (its {n} bytes hash to sha256:{got}); delete it (`ctr content rm sha256:{hex}`) and re-import or re-pull the image",
                what = self.what,
                hex = self.hex,
                n = self.written
            );
        }
        self.dir.rename(&self.tmp, &self.hex)?;
        self.tmp.clear();
        Ok(self.hex.clone())
    }
}

impl Drop for BlobWriter<'_> {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            self.dir.remove_file(&self.tmp);
        }
    }
}

/// What [`extract_tar_gz`] produced.
#[derive(Debug, Default)]
pub struct Extracted {
    /// sha256 hex of every regular file, each also linked as `blobs/<hex>`.
    pub file_digests: Vec<String>,
}

/// The path of an archive entry as a plain relative path, or an error naming it: no
/// `..`, no root, within `PATH_MAX`, `NAME_MAX` and [`spin_app_format::untrusted::MAX_PATH_DEPTH`] directories.
fn entry_path(raw: &[u8], what: &str) -> anyhow::Result<PathBuf> {
    let shown_raw = shown(raw);
    check_path_size(raw)
        .map_err(|e| anyhow::anyhow!("{what}: entry `{shown_raw}` is refused: {e}"))?;
    let raw = Path::new(std::ffi::OsStr::from_bytes(raw));
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                bail!(
                    "{what}: entry `{shown_raw}` contains `..`; archive entries must stay inside the archive"
                )
            }
            Component::RootDir | Component::Prefix(_) => {
                bail!("{what}: entry `{shown_raw}` is an absolute path; archive entries must be relative")
            }
        }
    }
    Ok(out)
}

/// Extracts the tar+gzip `src` into `dest` and links every regular file into `blobs` as
/// `<its sha256>`. Only regular files and directories are accepted: a symlink, hard link,
/// device, `..` or absolute entry fails naming `what` (the layer) and the entry, as does
/// exceeding `budget` (members' data, extension headers and skipped data count as bytes,
/// members as entries), a name or path over `NAME_MAX`/`PATH_MAX`, a path more than
/// [`spin_app_format::untrusted::MAX_PATH_DEPTH`] directories deep, or an extension header over its cap
/// ([`tarball`]). Blocking (run it off the async workers); memory stays bounded by the
/// copy buffer and the capped headers whatever the archive inflates to or declares.
pub fn extract_tar_gz(
    src: impl Read,
    dest: &Dir,
    blobs: &Dir,
    budget: &mut Budget,
    what: &str,
) -> anyhow::Result<Extracted> {
    let mut out = Extracted::default();
    let mut ar = tarball::TarReader::new(flate2::read::GzDecoder::new(src));
    let mut buf = vec![0u8; 128 << 10];
    loop {
        let entry = ar
            .next_entry()
            .map_err(|e| anyhow::anyhow!("{what}: not a valid tar+gzip archive: {e:#}"))?;
        budget.take_bytes(ar.take_overhead(), what)?;
        let Some(entry) = entry else { break };
        let shown_raw = shown(&entry.path);
        let path = entry_path(&entry.path, what)?;
        budget.take_entry(what)?;
        let kind = entry.kind;
        if kind.is_dir() {
            if !path.as_os_str().is_empty() {
                dest.create_dir_all(&path)
                    .with_context(|| format!("{what}: entry `{shown_raw}`"))?;
            }
            continue;
        }
        if !kind.is_file() {
            let k = if kind.is_symlink() {
                "a symbolic link"
            } else if kind.is_hard_link() {
                "a hard link"
            } else {
                "not a regular file or directory"
            };
            bail!(
                "{what}: entry `{shown_raw}` is {k}; Spin archive layers may hold only regular files and directories"
            );
        }
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            bail!("{what}: entry `{shown_raw}` has no usable file name");
        };
        let declared = entry.size;
        if budget.bytes().saturating_add(declared) > budget.limits.max_bytes {
            budget.take_bytes(
                declared,
                &format!("{what}: entry `{shown_raw}` ({declared} bytes)"),
            )?;
        }
        let parent = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => dest.create_dir_all(p)?,
            None => dest.try_clone()?,
        };
        let mut file = parent
            .create_file(&name, 0o644)
            .with_context(|| format!("{what}: entry `{shown_raw}`"))?;
        let mut hasher = Sha256::new();
        loop {
            let n = ar
                .read_data(&mut buf)
                .with_context(|| format!("{what}: entry `{shown_raw}`: corrupt data"))?;
            if n == 0 {
                break;
            }
            budget.take_bytes(n as u64, &format!("{what}: entry `{shown_raw}`"))?;
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])?;
        }
        drop(file);
        let hex = hex::encode(hasher.finalize());
        if !blobs.contains(&hex) {
            blobs.hard_link(&parent, Path::new(&name), &hex)?;
        }
        out.file_digests.push(hex);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: u64, max_entries: u64) -> Limits {
        Limits {
            max_bytes,
            max_entries,
        }
    }

    fn digest(data: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(data)))
    }

    #[test]
    fn digests_must_be_sha256_lower_hex() {
        let good = digest(b"x");
        assert_eq!(digest_hex(&good).unwrap(), &good[7..]);
        for bad in [
            "sha256:/".to_string(),
            "sha256:../x".to_string(),
            "sha256:".to_string(),
            good.to_uppercase(),
            format!("sha512:{}", &good[7..]),
            format!("{good}0"),
            format!("sha256:{}/..", &good[7..69]),
        ] {
            let e = digest_hex(&bad).unwrap_err().to_string();
            assert!(e.contains("sha256:<64"), "{bad}: {e}");
        }
    }

    #[test]
    fn blob_writer_checks_size_and_digest() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let mut b = Budget::new(limits(1000, 10));
        let data = b"hello world";
        let dg = digest(data);
        let mut w = BlobWriter::new(&d, &dg, data.len() as i64, "layer 0").unwrap();
        w.write(&data[..5], &mut b).unwrap();
        w.write(&data[5..], &mut b).unwrap();
        let name = w.finish().unwrap();
        assert_eq!(std::fs::read(t.path().join(name)).unwrap(), data);

        // Longer than the descriptor: stops at the first byte too many.
        let mut w = BlobWriter::new(&d, &digest(b"other"), 3, "layer 1").unwrap();
        let e = w.write(b"other", &mut b).unwrap_err().to_string();
        assert!(e.contains("larger than the 3 bytes"), "{e}");
        drop(w);
        // Shorter, and corrupt: named, and nothing is left behind.
        let w = BlobWriter::new(&d, &digest(b"abc"), 5, "layer 2").unwrap();
        assert!(w
            .finish()
            .unwrap_err()
            .to_string()
            .contains("descriptor states 5"));
        let mut w = BlobWriter::new(&d, &digest(b"abc"), 3, "layer 3").unwrap();
        w.write(b"abd", &mut b).unwrap();
        let e = w.finish().unwrap_err().to_string();
        assert!(e.contains("corrupt") && e.contains(&digest(b"abd")), "{e}");
        let names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [dg[7..].to_string()]);
        // The budget counts across blobs.
        let mut small = Budget::new(limits(4, 10));
        let mut w = BlobWriter::new(&d, &digest(b"12345"), 5, "layer 4").unwrap();
        let e = w.write(b"12345", &mut small).unwrap_err().to_string();
        assert!(
            e.contains("limit of 4 bytes") && e.contains(MAX_BYTES_ENV),
            "{e}"
        );
        assert!(BlobWriter::new(&d, "sha256:../x", 1, "layer 5").is_err());
    }

    fn tar_gz(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        let tar = b.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // set_path refuses `..`; write the raw name as a hostile archive would.
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, data).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, path: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o777);
        h.set_link_name(target).unwrap();
        h.set_path(path).unwrap();
        h.set_cksum();
        b.append(&h, &[][..]).unwrap();
    }

    fn dirs(t: &Path) -> (Dir, Dir) {
        std::fs::create_dir_all(t.join("dest")).unwrap();
        std::fs::create_dir_all(t.join("blobs")).unwrap();
        (
            Dir::open(&t.join("dest")).unwrap(),
            Dir::open(&t.join("blobs")).unwrap(),
        )
    }

    #[test]
    fn extracts_files_and_links_them_as_blobs() {
        let t = tempfile::tempdir().unwrap();
        let (dest, blobs) = dirs(t.path());
        let gz = tar_gz(|b| {
            file(b, "./static/a.txt", b"hello");
            file(b, "b.txt", b"hello");
            file(b, "c/d/e.txt", b"bye");
        });
        let mut budget = Budget::new(limits(1000, 10));
        let x = extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 1").unwrap();
        assert_eq!(x.file_digests.len(), 3);
        assert_eq!(
            std::fs::read(t.path().join("dest/static/a.txt")).unwrap(),
            b"hello"
        );
        assert_eq!(
            std::fs::read(t.path().join("dest/c/d/e.txt")).unwrap(),
            b"bye"
        );
        assert_eq!(
            std::fs::read(t.path().join("blobs").join(&digest(b"bye")[7..])).unwrap(),
            b"bye"
        );
        assert_eq!(budget.bytes(), 13);
    }

    #[test]
    fn hostile_archives_fail_naming_layer_and_entry() {
        let t = tempfile::tempdir().unwrap();
        let canary = t.path().join("canary");
        std::fs::create_dir(&canary).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (tar_gz(|b| file(b, "../canary/x", b"x")), "contains `..`"),
            (tar_gz(|b| file(b, "/canary/x", b"x")), "absolute path"),
            (
                tar_gz(|b| link(b, tar::EntryType::Symlink, "l", canary.to_str().unwrap())),
                "symbolic link",
            ),
            (
                tar_gz(|b| link(b, tar::EntryType::Link, "h", "/etc/passwd")),
                "hard link",
            ),
            (
                tar_gz(|b| {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Char);
                    h.set_path("dev").unwrap();
                    h.set_size(0);
                    h.set_cksum();
                    b.append(&h, &[][..]).unwrap();
                }),
                "not a regular file",
            ),
            (b"not gzip".to_vec(), "layer 7"),
        ];
        for (i, (gz, want)) in cases.iter().enumerate() {
            let d = t.path().join(format!("case{i}"));
            let (dest, blobs) = dirs(&d);
            let mut budget = Budget::new(limits(1000, 10));
            let e = extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 7").unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains(want) && e.contains("layer 7"), "case {i}: {e}");
        }
        assert_eq!(std::fs::read_dir(&canary).unwrap().count(), 0);
    }

    /// A tar+gzip whose first member is a GNU long-name header of `name`, then a directory
    /// header carrying it (the `tar` crate writes this form for paths over 100 bytes).
    fn long_name_dir(name: &[u8]) -> Vec<u8> {
        let mut tar = Vec::new();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(name.len() as u64 + 1);
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_cksum();
        tar.extend_from_slice(h.as_bytes());
        tar.extend_from_slice(name);
        tar.push(0);
        tar.resize(tar.len().div_ceil(512) * 512, 0);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.as_old_mut().name[..4].copy_from_slice(b"deep");
        h.set_cksum();
        tar.extend_from_slice(h.as_bytes());
        tar.extend_from_slice(&[0; 1024]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn deep_and_long_paths_are_refused_before_anything_is_created() {
        let t = tempfile::tempdir().unwrap();
        let cases: [(Vec<u8>, &[&str]); 3] = [
            // 30,000 levels in one entry, a few hundred bytes compressed: its GNU long
            // name (60,000 bytes) is over PATH_MAX, refused from its header.
            ("a/".repeat(30_000).into_bytes(), &["limited to 4096 bytes"]),
            // Deeper than 128 levels but within PATH_MAX: refused naming the depth.
            (
                "a/".repeat(200).into_bytes(),
                &["200 directories deep", "limit of 128"],
            ),
            // A component over NAME_MAX.
            (vec![b'n'; 300], &["NAME_MAX", "... (300 bytes)"]),
        ];
        for (i, (name, wants)) in cases.iter().enumerate() {
            let gz = long_name_dir(name);
            assert!(gz.len() < 1024, "{}", gz.len());
            let (dest, blobs) = dirs(&t.path().join(format!("{i}")));
            let mut budget = Budget::new(limits(1 << 20, 10));
            let e = format!(
                "{:#}",
                extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 4").unwrap_err()
            );
            assert!(e.contains("layer 4"), "{e}");
            for w in *wants {
                assert!(e.contains(w), "case {i}: {e}");
            }
            let made = std::fs::read_dir(t.path().join(format!("{i}/dest"))).unwrap();
            assert_eq!(made.count(), 0, "case {i}");
        }
        // 128 levels are fine.
        let gz = long_name_dir("a/".repeat(128).as_bytes());
        let (dest, blobs) = dirs(&t.path().join("ok"));
        let mut budget = Budget::new(limits(1 << 20, 10));
        extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 7").unwrap();
    }

    #[test]
    fn huge_long_name_is_refused_from_its_header() {
        // A header that says its long name is 3 GiB, followed by nothing: the cap applies
        // before a byte of it is read, and memory stays where it was.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(3 << 30);
        h.set_cksum();
        let gz = {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(h.as_bytes()).unwrap();
            gz.finish().unwrap()
        };
        let t = tempfile::tempdir().unwrap();
        let (dest, blobs) = dirs(t.path());
        let mut budget = Budget::new(limits(1 << 40, 10));
        let e = format!(
            "{:#}",
            extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 1").unwrap_err()
        );
        assert!(
            e.contains("layer 1")
                && e.contains("states 3221225472 bytes")
                && e.contains("PATH_MAX"),
            "{e}"
        );
    }

    #[test]
    fn entry_names_are_escaped_in_errors() {
        let t = tempfile::tempdir().unwrap();
        let gz = tar_gz(|b| link(b, tar::EntryType::Symlink, "x\nINFO forged", "/etc"));
        let gz2 = tar_gz(|b| {
            link(
                b,
                tar::EntryType::Symlink,
                "a\nINFO wasm_shim_core: forged line",
                "/etc",
            )
        });
        for (i, gz) in [gz, gz2].iter().enumerate() {
            let (dest, blobs) = dirs(&t.path().join(format!("{i}")));
            let mut budget = Budget::new(limits(1000, 10));
            let e = format!(
                "{:#}",
                extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 1").unwrap_err()
            );
            assert!(!e.contains('\n') && e.contains("\\nINFO"), "{e}");
        }
    }

    #[test]
    fn bombs_stop_at_the_limits() {
        let t = tempfile::tempdir().unwrap();
        // 64 MiB of zeros in one entry, against a 1 MiB cap: refused from the header.
        let gz = {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            {
                let mut b = tar::Builder::new(&mut gz);
                let mut h = tar::Header::new_gnu();
                h.set_size(64 << 20);
                h.set_mode(0o644);
                h.set_path("zeros").unwrap();
                h.set_cksum();
                b.append(&h, std::io::repeat(0).take(64 << 20)).unwrap();
                b.finish().unwrap();
            }
            gz.finish().unwrap()
        };
        assert!(gz.len() < 1 << 20);
        let (dest, blobs) = dirs(&t.path().join("a"));
        let mut budget = Budget::new(limits(1 << 20, 10));
        let e = format!(
            "{:#}",
            extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 2").unwrap_err()
        );
        assert!(
            e.contains("layer 2") && e.contains("limit of 1048576 bytes"),
            "{e}"
        );
        // Many empty files against an entry cap.
        let gz = tar_gz(|b| {
            for i in 0..20 {
                file(b, &format!("f{i}"), b"");
            }
        });
        let (dest, blobs) = dirs(&t.path().join("b"));
        let mut budget = Budget::new(limits(1 << 20, 10));
        let e = format!(
            "{:#}",
            extract_tar_gz(&gz[..], &dest, &blobs, &mut budget, "layer 3").unwrap_err()
        );
        assert!(
            e.contains("more than 10 entries") && e.contains(MAX_ENTRIES_ENV),
            "{e}"
        );
    }
}
