//! Handling text and files that come from an app's author (an image, a manifest, a lock):
//! showing untrusted strings in errors and logs ([`shown`]), the size, length and depth
//! caps every reader applies, and opening only regular files ([`open_regular`]).
//!
//! The shim is root on the node and copies its errors into containerd's log and task
//! status, so a string from an image must never forge a log line (a newline in a tar entry
//! name) nor carry megabytes into a message: every such string goes through [`shown`].

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Characters of an untrusted string shown before it is cut.
pub const SHOWN_CHARS: usize = 256;
/// Largest manifest, runtime config or locked app read into memory: 4 MiB (the manifest
/// limit registries apply, and the shim's cap on every JSON document of an image).
pub const MAX_DOCUMENT_BYTES: u64 = 4 << 20;
/// Longest path accepted from an app (Linux `PATH_MAX`, terminating NUL excluded).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest single path component accepted from an app (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// Deepest path accepted from an app, in components: deep enough for any real app, and
/// it bounds every walk of what the app created.
pub const MAX_PATH_DEPTH: usize = 128;

/// An untrusted string as it may appear in an error or a log line (see [`shown`]).
#[derive(Clone, Copy)]
pub struct Shown<'a>(&'a [u8]);

/// `s` made safe to show: control characters (newlines included), backslashes and the
/// Unicode characters that hide or reorder text are escaped (`\n`, `\\`, `\u{202e}`),
/// invalid UTF-8 bytes are shown as `\xNN`, and after [`SHOWN_CHARS`] characters the rest
/// is cut and the whole size said: `aaaa... (1073741824 bytes)`.
pub fn shown<T: AsRef<[u8]> + ?Sized>(s: &T) -> Shown<'_> {
    Shown(s.as_ref())
}

/// A path made safe to show, as [`shown`].
pub fn shown_path(p: &Path) -> Shown<'_> {
    Shown(p.as_os_str().as_encoded_bytes())
}

/// Characters that change how the text around them reads without being visible: bidi
/// controls, zero-width characters, line and paragraph separators, the byte order mark.
pub fn is_hidden_format(c: char) -> bool {
    matches!(c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        let mut n = 0usize;
        let cut = |f: &mut fmt::Formatter<'_>| write!(f, "... ({} bytes)", self.0.len());
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if n == SHOWN_CHARS {
                    return cut(f);
                }
                n += 1;
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '\n' => f.write_str("\\n")?,
                    '\r' => f.write_str("\\r")?,
                    '\t' => f.write_str("\\t")?,
                    c if c.is_control() || is_hidden_format(c) => {
                        write!(f, "{}", c.escape_unicode())?
                    }
                    c => f.write_char(c)?,
                }
            }
            for b in chunk.invalid() {
                if n == SHOWN_CHARS {
                    return cut(f);
                }
                n += 1;
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// A TOML parse error without the input line toml quotes (a manifest of one 4 MiB line
/// would be quoted whole): `line L, column C: <message>`, the message [`shown`].
pub fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let msg = shown(e.message().trim());
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = before.iter().filter(|b| **b == b'\n').count() + 1;
            let col = before.len()
                - before
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |p| p + 1)
                + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg.to_string(),
    }
}

/// A JSON error without the input it may quote (serde quotes whole string values: a
/// 4 MiB one would be carried whole): its message [`shown`], then where it is.
pub fn json_error(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&at) {
        Some(msg) if e.line() > 0 => format!("{}{at}", shown(msg)),
        _ => shown(&full).to_string(),
    }
}

/// Checks a relative path from an app (a guest file path, an archive entry): at most
/// [`MAX_PATH_BYTES`] bytes, [`MAX_PATH_DEPTH`] components of at most [`MAX_NAME_BYTES`]
/// each. Says which limit it exceeds; `..` and roots are the caller's to judge.
pub fn check_path_size(path: &[u8]) -> Result<(), String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "it is {} bytes long, more than the limit of {MAX_PATH_BYTES} (PATH_MAX)",
            path.len()
        ));
    }
    let mut depth = 0;
    for c in path
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        depth += 1;
        if c.len() > MAX_NAME_BYTES {
            return Err(format!(
                "its component {} is {} bytes long, more than the limit of {MAX_NAME_BYTES} (NAME_MAX)",
                shown(c),
                c.len()
            ));
        }
    }
    if depth > MAX_PATH_DEPTH {
        return Err(format!(
            "it is {depth} directories deep, more than the limit of {MAX_PATH_DEPTH}"
        ));
    }
    Ok(())
}

/// Why [`open_regular`] refused a file.
#[derive(Debug)]
pub enum OpenError {
    /// It exists but is not a regular file (a FIFO, a device, a socket, a directory):
    /// the kind, in words.
    NotRegular(&'static str),
    /// Opening or inspecting it failed.
    Io(std::io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotRegular(kind) => write!(
                f,
                "it is {kind}, not a regular file (only regular files are read)"
            ),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// A file type in words, for errors.
pub fn file_kind(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Turns an `O_PATH` descriptor into a file open for reading, if it is a regular file.
/// The file is inspected before it is opened, so a FIFO (whose open blocks until a writer
/// comes) or a device (whose open acts on it) is never opened; the reopen goes through
/// `/proc/self/fd`.
pub fn reopen_regular(opath: OwnedFd) -> Result<File, OpenError> {
    reopen(File::from(opath), Path::new(PROC_FDS), None)
}

/// Where a process's descriptors can be opened again by number.
const PROC_FDS: &str = "/proc/self/fd";

/// Opens `path` (links followed) for reading if it is a regular file, never opening a
/// FIFO, device or socket (see [`reopen_regular`]). Where `/proc/self/fd` cannot be used
/// (no procfs, or a Landlock domain without it) the path is opened again non-blocking (a
/// FIFO put there meanwhile cannot hold it up) and must be the file inspected.
pub fn open_regular(path: &Path) -> Result<File, OpenError> {
    let probe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    reopen(probe, Path::new(PROC_FDS), Some(path))
}

fn reopen(probe: File, proc_fds: &Path, fallback: Option<&Path>) -> Result<File, OpenError> {
    let md = probe.metadata()?;
    if !md.file_type().is_file() {
        return Err(OpenError::NotRegular(file_kind(md.file_type())));
    }
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(p)
    };
    let f = match (
        open(&proc_fds.join(probe.as_raw_fd().to_string())),
        fallback,
    ) {
        (Ok(f), _) => f,
        // No procfs, or one the process may not use (a Landlock domain without /proc).
        (Err(_), Some(path)) => open(path)?,
        (Err(e), _) => return Err(e.into()),
    };
    let now = f.metadata()?;
    if (now.dev(), now.ino()) != (md.dev(), md.ino()) || !now.file_type().is_file() {
        return Err(OpenError::NotRegular("a file replaced while it was opened"));
    }
    Ok(f)
}

/// Reads the regular file `path` of at most `max` bytes; errors name `what` (shown) and
/// the rule.
pub fn read_regular(path: &Path, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    let f = open_regular(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", shown_path(path)))?;
    read_capped(f, max, &format!("{what} {}", shown_path(path)))
}

/// Reads `f` whole if it holds at most `max` bytes (also when it grows while read).
pub fn read_capped(f: File, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max {
        anyhow::bail!("{what} has {len} bytes, more than the limit of {max}");
    }
    let mut out = Vec::with_capacity(len as usize);
    f.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| anyhow::anyhow!("cannot read {what}: {e}"))?;
    if out.len() as u64 > max {
        anyhow::bail!("{what} grew past the limit of {max} bytes while it was read");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_cuts() {
        assert_eq!(shown("plain name.txt").to_string(), "plain name.txt");
        assert_eq!(
            shown("a\nINFO forged line\r\t\\x").to_string(),
            "a\\nINFO forged line\\r\\t\\\\x"
        );
        assert_eq!(shown("\u{1b}[31m").to_string(), "\\u{1b}[31m");
        assert_eq!(
            shown("evil\u{202e}txt.exe").to_string(),
            "evil\\u{202e}txt.exe"
        );
        assert_eq!(shown(&b"ok\xff\xfe"[..]).to_string(), "ok\\xff\\xfe");
        assert_eq!(shown("né").to_string(), "né");
        let big = "x".repeat(1 << 20);
        let s = shown(&big).to_string();
        assert_eq!(s, format!("{}... (1048576 bytes)", "x".repeat(SHOWN_CHARS)));
        let exact = "y".repeat(SHOWN_CHARS);
        assert_eq!(shown(&exact).to_string(), exact);
        // Even a string that is all escapes stays bounded.
        let nl = "\n".repeat(10_000);
        assert!(shown(&nl).to_string().len() < 4 * SHOWN_CHARS);
        assert!(!shown(&nl).to_string().contains('\n'));
        assert_eq!(format!("{:?}", shown("a\"b")), "\"a\"b\"");
        assert_eq!(shown_path(Path::new("/a\nb")).to_string(), "/a\\nb");
    }

    #[test]
    fn toml_errors_do_not_quote_the_input() {
        let line = format!("name = \"{}\" x", "a".repeat(1 << 20));
        let text = format!("spin_manifest_version = 2\n{line}\n");
        let e = toml::from_str::<toml::Table>(&text).unwrap_err();
        assert!(e.to_string().len() > 1 << 20, "toml quotes the line");
        let m = toml_error(&e, &text);
        assert!(m.starts_with("line 2, column "), "{m}");
        assert!(m.len() < 1024, "{}", m.len());
    }

    #[test]
    fn json_errors_do_not_quote_the_input() {
        let text = format!("{{\"a\": \"{}\"}}", "b".repeat(1 << 20));
        let e = serde_json::from_str::<std::collections::BTreeMap<String, u32>>(&text).unwrap_err();
        assert!(e.to_string().len() > 1 << 20, "serde quotes the value");
        let m = json_error(&e);
        assert!(
            m.len() < 1024 && m.ends_with("line 1 column 1048584"),
            "{m}"
        );
    }

    #[test]
    fn path_sizes_are_capped() {
        assert!(check_path_size(b"a/b/c.txt").is_ok());
        assert!(check_path_size(&[b'a'; 255]).is_ok());
        let e = check_path_size(&[b'a'; 256]).unwrap_err();
        assert!(e.contains("NAME_MAX"), "{e}");
        let deep = "a/".repeat(MAX_PATH_DEPTH);
        assert!(check_path_size(deep.as_bytes()).is_ok());
        let e = check_path_size("a/".repeat(MAX_PATH_DEPTH + 1).as_bytes()).unwrap_err();
        assert!(e.contains("129 directories deep"), "{e}");
        let e = check_path_size("ab/".repeat(2000).as_bytes()).unwrap_err();
        assert!(e.contains("PATH_MAX"), "{e}");
    }

    #[test]
    fn only_regular_files_are_opened() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("f");
        std::fs::write(&file, b"data").unwrap();
        assert_eq!(read_regular(&file, 10, "file").unwrap(), b"data");
        let e = read_regular(&file, 3, "file").unwrap_err().to_string();
        assert!(e.contains("limit of 3"), "{e}");
        // A FIFO without a writer: opening it for reading would block forever.
        let fifo = t.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = read_regular(&fifo, 10, "manifest").unwrap_err().to_string();
        assert!(e.contains("a FIFO") && e.contains("manifest"), "{e}");
        let e = open_regular(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        let e = open_regular(t.path()).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        // A link to a FIFO is followed, and refused.
        std::os::unix::fs::symlink(&fifo, t.path().join("link")).unwrap();
        assert!(open_regular(&t.path().join("link")).is_err());
        // Without a usable /proc the path is opened again, and must be the file inspected.
        let opath = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
                .open(p)
                .unwrap()
        };
        let no_proc = Path::new("/nonexistent-proc");
        let mut f = reopen(opath(&file), no_proc, Some(&file)).unwrap();
        let mut got = String::new();
        f.read_to_string(&mut got).unwrap();
        assert_eq!(got, "data");
        let other = t.path().join("other");
        std::fs::write(&other, b"other").unwrap();
        let e = reopen(opath(&file), no_proc, Some(&other))
            .unwrap_err()
            .to_string();
        assert!(e.contains("replaced"), "{e}");
        assert!(reopen(opath(&file), no_proc, None).is_err());
    }
}
