//! A tar reader for untrusted archive layers: ustar, GNU (`L`/`K` long names) and PAX
//! (`x` local headers: `path`, `size`), read one 512-byte block at a time with
//! [`tar::Header`] parsing each header block.
//!
//! The `tar` crate's own reader buffers a GNU long name or a PAX header whole, whatever
//! size its header states, before a caller sees the entry: a 3 MB layer declaring a 3 GiB
//! long name drove the shim to 23.5 GB. Here every extension header's size is checked
//! against its cap ([`MAX_LONG_NAME_BYTES`], [`MAX_PAX_BYTES`]) from its header block,
//! before a byte of it is read, and nothing else is buffered: entry data is streamed to the
//! caller ([`TarReader::read_data`]) or skipped through a fixed buffer.

use std::io::{self, Read};

use anyhow::bail;
use spin_app_format::untrusted::shown;

/// Largest GNU long name or long link target read (`L`/`K` data, its NUL included): Linux
/// `PATH_MAX`.
pub const MAX_LONG_NAME_BYTES: u64 = 4096;
/// Largest PAX extended header read (`x`): 1 MiB, far above any real one (paths, times,
/// a few attributes).
pub const MAX_PAX_BYTES: u64 = 1 << 20;

const BLOCK: u64 = 512;

/// One archive member as [`TarReader::next_entry`] gives it: extension headers applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// The member's path: a GNU long name, else a PAX `path`, else the header's
    /// (ustar prefix joined), as raw bytes.
    pub path: Vec<u8>,
    /// The header's type flag.
    pub kind: tar::EntryType,
    /// Bytes of data that follow (a PAX `size` wins over the header's).
    pub size: u64,
    /// Offset of its header block in the (inflated) stream, for errors.
    pub offset: u64,
}

/// Reads members of a tar stream (see the module docs). Errors name the offset of the
/// header block at fault and the limit it exceeds.
pub struct TarReader<R> {
    inner: R,
    /// Offset in the stream of the next byte `inner` gives.
    pos: u64,
    /// Data bytes of the current member not read yet.
    remaining: u64,
    /// Padding after the current member's data.
    padding: u64,
    /// Bytes read for headers' data or skipped, since [`TarReader::take_overhead`].
    overhead: u64,
    done: bool,
}

fn padding_of(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

impl<R: Read> TarReader<R> {
    /// A reader of the tar stream `inner`.
    pub fn new(inner: R) -> Self {
        TarReader {
            inner,
            pos: 0,
            remaining: 0,
            padding: 0,
            overhead: 0,
            done: false,
        }
    }

    /// Bytes the reader consumed besides members' data handed out (extension headers'
    /// data, members' data skipped; not headers nor padding) since the last call: for the
    /// caller's byte budget.
    pub fn take_overhead(&mut self) -> u64 {
        std::mem::take(&mut self.overhead)
    }

    /// Reads the current member's data; 0 at its end.
    pub fn read_data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(self.remaining.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the archive ends inside a member's data ({} bytes missing)",
                    self.remaining
                ),
            ));
        }
        self.remaining -= n as u64;
        self.pos += n as u64;
        Ok(n)
    }

    /// Skips `n` bytes of data nobody read, accounted as overhead, then `padding`.
    fn skip(&mut self, data: u64, padding: u64) -> anyhow::Result<()> {
        let mut buf = [0u8; 8192];
        self.overhead = self.overhead.saturating_add(data);
        let mut n = data + padding;
        while n > 0 {
            let want = buf.len().min(n as usize);
            let got = self.inner.read(&mut buf[..want])?;
            if got == 0 {
                bail!(
                    "the archive ends inside a member's data at offset {}",
                    self.pos
                );
            }
            n -= got as u64;
            self.pos += got as u64;
        }
        Ok(())
    }

    /// Reads one block; None at a clean end of the stream.
    fn block(&mut self) -> anyhow::Result<Option<[u8; 512]>> {
        let mut b = [0u8; 512];
        let mut got = 0;
        while got < b.len() {
            let n = self.inner.read(&mut b[got..])?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                bail!(
                    "the archive ends inside a header block at offset {}",
                    self.pos
                );
            }
            got += n;
            self.pos += n as u64;
        }
        Ok(Some(b))
    }

    /// The data of an extension header of `size` bytes (at most `max`, checked by the
    /// caller), and its padding.
    fn extension_data(&mut self, size: u64) -> anyhow::Result<Vec<u8>> {
        let mut data = vec![0u8; size as usize];
        let mut got = 0;
        while got < data.len() {
            let n = self.inner.read(&mut data[got..])?;
            if n == 0 {
                bail!(
                    "the archive ends inside an extension header at offset {}",
                    self.pos
                );
            }
            got += n;
            self.pos += n as u64;
        }
        self.overhead = self.overhead.saturating_add(size);
        self.skip(0, padding_of(size))?;
        Ok(data)
    }

    /// The next member, its GNU long name or PAX `path` and `size` applied; None at the
    /// end of the archive (two zero blocks, or the end of the stream). Whatever of the
    /// previous member was not read is skipped. Only links (`K`) and names (`L`) of at
    /// most [`MAX_LONG_NAME_BYTES`] and PAX headers of at most [`MAX_PAX_BYTES`] are read;
    /// a larger one is an error before any of it is.
    pub fn next_entry(&mut self) -> anyhow::Result<Option<TarEntry>> {
        if self.done {
            return Ok(None);
        }
        let (rest, padding) = (self.remaining, self.padding);
        self.remaining = 0;
        self.padding = 0;
        self.skip(rest, padding)?;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link = false;
        let mut pax: Option<(Option<Vec<u8>>, Option<u64>)> = None;
        loop {
            let offset = self.pos;
            let Some(block) = self.block()? else {
                if long_name.is_some() || long_link || pax.is_some() {
                    bail!("the archive ends after an extension header, without the member it describes");
                }
                self.done = true;
                return Ok(None);
            };
            if block.iter().all(|b| *b == 0) {
                if long_name.is_some() || long_link || pax.is_some() {
                    bail!("an extension header at offset {offset} describes no member (the archive ends)");
                }
                self.done = true;
                return Ok(None);
            }
            let h = tar::Header::from_byte_slice(&block);
            let sum: u32 = block[..148]
                .iter()
                .chain(&block[156..])
                .map(|b| *b as u32)
                .sum::<u32>()
                + 8 * 32;
            match h.cksum() {
                Ok(c) if c == sum => {}
                _ => bail!("the header block at offset {offset} has a wrong checksum (not a tar archive, or a corrupt one)"),
            }
            let kind = h.entry_type();
            let size = h.entry_size().map_err(|_| {
                anyhow::anyhow!("the header block at offset {offset} has an unreadable size field")
            })?;
            match kind {
                tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {
                    let what = if kind == tar::EntryType::GNULongName {
                        "long name"
                    } else {
                        "long link target"
                    };
                    if size > MAX_LONG_NAME_BYTES {
                        bail!(
                            "a GNU {what} header at offset {offset} states {size} bytes; names are limited to {MAX_LONG_NAME_BYTES} bytes (PATH_MAX)"
                        );
                    }
                    let taken = if kind == tar::EntryType::GNULongName {
                        long_name.is_some()
                    } else {
                        long_link
                    };
                    if taken {
                        bail!("two GNU {what} headers describe the member after offset {offset}");
                    }
                    let mut data = self.extension_data(size)?;
                    if data.last() == Some(&0) {
                        data.pop();
                    }
                    if kind == tar::EntryType::GNULongName {
                        long_name = Some(data);
                    } else {
                        long_link = true;
                    }
                }
                tar::EntryType::XHeader => {
                    if size > MAX_PAX_BYTES {
                        bail!(
                            "a PAX extended header at offset {offset} states {size} bytes; PAX headers are limited to {MAX_PAX_BYTES} bytes"
                        );
                    }
                    if pax.is_some() {
                        bail!("two PAX extended headers describe the member after offset {offset}");
                    }
                    let data = self.extension_data(size)?;
                    pax = Some(parse_pax(&data, offset)?);
                }
                _ => {
                    let (pax_path, pax_size) = pax.take().unwrap_or_default();
                    let size = pax_size.unwrap_or(size);
                    let path = long_name
                        .take()
                        .or(pax_path)
                        .unwrap_or_else(|| h.path_bytes().into_owned());
                    self.remaining = size;
                    self.padding = padding_of(size);
                    return Ok(Some(TarEntry {
                        path,
                        kind,
                        size,
                        offset,
                    }));
                }
            }
        }
    }
}

/// The `path` and `size` records of a PAX header (others are ignored, as by the `tar`
/// crate); a malformed record is an error.
fn parse_pax(data: &[u8], offset: u64) -> anyhow::Result<(Option<Vec<u8>>, Option<u64>)> {
    let (mut path, mut size) = (None, None);
    for rec in tar::PaxExtensions::new(data) {
        let rec = rec.map_err(|_| {
            anyhow::anyhow!("the PAX extended header at offset {offset} has a malformed record")
        })?;
        match rec.key_bytes() {
            b"path" => path = Some(rec.value_bytes().to_vec()),
            b"size" => {
                let v = rec.value_bytes();
                size = Some(
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "the PAX extended header at offset {offset} has size {}, not a whole number",
                                shown(v)
                            )
                        })?,
                );
            }
            _ => {}
        }
    }
    Ok((path, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header block of `kind` stating `size` bytes, named `name`, checksummed.
    fn header(kind: tar::EntryType, name: &[u8], size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_cksum();
        h
    }

    fn member(out: &mut Vec<u8>, kind: tar::EntryType, name: &[u8], data: &[u8]) {
        out.extend_from_slice(header(kind, name, data.len() as u64).as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len() + padding_of(data.len() as u64) as usize, 0);
    }

    fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
        let body = [key.as_bytes(), b"=", value, b"\n"].concat();
        let mut len = body.len() + 1;
        while format!("{len} ").len() + body.len() != len {
            len += 1;
        }
        [format!("{len} ").as_bytes(), &body].concat()
    }

    fn all(tar: &[u8]) -> anyhow::Result<Vec<(TarEntry, Vec<u8>)>> {
        let mut r = TarReader::new(tar);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut data = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                let n = r.read_data(&mut buf)?;
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
            }
            out.push((e, data));
        }
        Ok(out)
    }

    #[test]
    fn reads_what_the_tar_crate_writes() {
        let mut b = tar::Builder::new(Vec::new());
        let long = format!("{}/file.txt", "d".repeat(200));
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        b.append_data(&mut h, &long, &b"hello"[..]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(0);
        h.set_entry_type(tar::EntryType::Directory);
        b.append_data(&mut h, "a/b/", &[][..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        b.append_data(&mut h, "short", &b"abc"[..]).unwrap();
        let tar = b.into_inner().unwrap();
        let got = all(&tar).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0.path, long.as_bytes());
        assert_eq!(got[0].1, b"hello");
        assert_eq!(got[1].0.kind, tar::EntryType::Directory);
        assert_eq!(got[1].0.path, b"a/b/");
        assert_eq!(
            (got[2].0.path.as_slice(), got[2].1.as_slice()),
            (&b"short"[..], &b"abc"[..])
        );
        // Unread data is skipped.
        let mut r = TarReader::new(&tar[..]);
        assert_eq!(r.next_entry().unwrap().unwrap().path, long.as_bytes());
        assert_eq!(r.next_entry().unwrap().unwrap().path, b"a/b/");
        assert_eq!(r.next_entry().unwrap().unwrap().path, b"short");
        assert!(r.next_entry().unwrap().is_none());
    }

    #[test]
    fn reads_what_python_tarfile_writes() {
        // The fuzz seeds: GNU, PAX and ustar archives written by Python's tarfile.
        let gnu = all(include_bytes!(
            "../../../../fuzz/seeds/tar_layer/gnu-long-name.tar"
        ))
        .unwrap();
        let long = format!("static/{}/index.html", "d".repeat(120));
        assert_eq!(gnu[1].0.path, long.as_bytes());
        assert_eq!(gnu[1].1, b"<h1>hi</h1>");
        let pax = all(include_bytes!("../../../../fuzz/seeds/tar_layer/pax.tar")).unwrap();
        let name = format!("assets/{}.txt", "p".repeat(150));
        assert_eq!(
            (pax[0].0.path.as_slice(), pax[0].1.as_slice()),
            (name.as_bytes(), &b"pax content"[..])
        );
        assert_eq!(pax[1].0.path, "café.txt".as_bytes());
        let ustar = all(include_bytes!("../../../../fuzz/seeds/tar_layer/ustar.tar")).unwrap();
        assert_eq!(ustar[1].0.path, b"a/b.txt");
        assert_eq!(ustar[1].1, b"hello");
    }

    #[test]
    fn pax_path_and_size_apply_to_the_next_member() {
        let mut tar = Vec::new();
        let pax = [
            pax_record("path", b"from/pax.txt"),
            pax_record("size", b"4"),
            pax_record("mtime", b"1.5"),
        ]
        .concat();
        member(&mut tar, tar::EntryType::XHeader, b"PaxHeader", &pax);
        // The header says 100 bytes; PAX says 4, and wins, as in the tar crate.
        tar.extend_from_slice(header(tar::EntryType::Regular, b"ignored", 100).as_bytes());
        tar.extend_from_slice(b"data");
        tar.resize(tar.len() + 508, 0);
        member(&mut tar, tar::EntryType::Regular, b"next", b"x");
        let got = all(&tar).unwrap();
        assert_eq!(got[0].0.path, b"from/pax.txt");
        assert_eq!(got[0].1, b"data");
        assert_eq!(got[1].0.path, b"next");
        let mut r = TarReader::new(&tar[..]);
        r.next_entry().unwrap();
        assert_eq!(r.take_overhead(), pax.len() as u64);
        // Data nobody read counts too.
        r.next_entry().unwrap();
        assert_eq!(r.take_overhead(), 4);
    }

    #[test]
    fn huge_extension_headers_are_refused_from_their_header() {
        for (kind, want) in [
            (
                tar::EntryType::GNULongName,
                "long name header at offset 0 states 3221225472 bytes",
            ),
            (tar::EntryType::GNULongLink, "long link target header"),
            (
                tar::EntryType::XHeader,
                "PAX extended header at offset 0 states 3221225472 bytes",
            ),
        ] {
            // A reader that fails if more than the header block is read: the cap applies
            // before any of the 3 GiB is.
            let block = header(kind, b"././@LongLink", 3 << 30);
            let r = block.as_bytes().chain(FailAfter);
            let e = TarReader::new(r).next_entry().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        // Just under the caps is read.
        let mut tar = Vec::new();
        let name = vec![b'n'; 4095];
        member(
            &mut tar,
            tar::EntryType::GNULongName,
            b"././@LongLink",
            &[&name[..], b"\0"].concat(),
        );
        member(&mut tar, tar::EntryType::Regular, b"x", b"");
        assert_eq!(all(&tar).unwrap()[0].0.path, name);
    }

    struct FailAfter;
    impl Read for FailAfter {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            panic!("read past the header block")
        }
    }

    #[test]
    fn malformed_archives_are_errors() {
        let mut tar = Vec::new();
        member(&mut tar, tar::EntryType::Regular, b"a", b"abc");
        let mut bad = tar.clone();
        bad[0] = b'b';
        let e = all(&bad).unwrap_err().to_string();
        assert!(e.contains("checksum") && e.contains("offset 0"), "{e}");
        let e = all(&tar[..700]).unwrap_err().to_string();
        assert!(e.contains("ends inside"), "{e}");
        let e = all(&tar[..100]).unwrap_err().to_string();
        assert!(e.contains("header block"), "{e}");
        use tar::EntryType::{GNULongName, Regular, XHeader};
        let bad_size = pax_record("size", b"-1\x1b");
        type Members<'a> = &'a [(tar::EntryType, &'a [u8])];
        let cases: [(Members, &str); 4] = [
            (
                &[(GNULongName, b"a\0"), (GNULongName, b"b\0"), (Regular, b"")],
                "two GNU long name",
            ),
            (&[(GNULongName, b"a\0")], "without the member"),
            (
                &[(XHeader, b"99 path=x\n"), (Regular, b"")],
                "malformed record",
            ),
            (
                &[(XHeader, &bad_size), (Regular, b"")],
                "not a whole number",
            ),
        ];
        for (members, want) in cases {
            let mut tar = Vec::new();
            for (kind, data) in members {
                member(&mut tar, *kind, b"x", data);
            }
            let e = all(&tar).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\x1b'), "{e}");
        }
        // An empty stream and the end-of-archive blocks are clean ends.
        assert!(all(b"").unwrap().is_empty());
        assert!(all(&[0u8; 1024]).unwrap().is_empty());
    }
}
