//! Hostile WASI guest for the escape tests (tests/integration/tests/guest_escape.rs).
//!
//! Tries, through whatever the runtime preopened, to reach the runtime process and the host,
//! and prints one line per attempt: `ESCAPE <name>: <what it got>` when the attempt
//! succeeded, `DENIED <name>: <error>` when it failed. Then the controls, which must
//! succeed: `OK <name>: ...` or `BROKEN <name>: <error>`. Ends with `SUMMARY escapes=N
//! broken=M`, then, with argument `hold S`, prints `HOLDING` and sleeps S seconds (so the
//! test can inspect the runtime process) before it exits: 0 when nothing escaped and every
//! control worked, 1 otherwise.
//!
//! Attempts: `/proc/self/mem` opened read-write, the vDSO's first bytes read through it and
//! written back unchanged (the step before patching it); `/proc/self/environ`,
//! `/proc/1/environ` and `/proc/self/mountinfo` read; `/proc` and `/dev` listed; the cgroup
//! tree listed and `/sys/kernel` read; device nodes opened; and the same through links
//! planted in the image (`/plink -> proc`, `/data/devlink -> ../dev`); a device node the
//! image itself carries (`/devs/zero`) opened.
//! Controls: `/etc/escape-test.txt` (planted by the test) read, a file written and read back
//! under `/tmp` and under `/data`, the environment printed (`ENV NAME=VALUE`).

use std::io::{Read, Seek, SeekFrom, Write};

struct Report {
    escapes: usize,
    broken: usize,
}

impl Report {
    /// An escape attempt: success is an escape.
    fn attempt(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(got) => {
                self.escapes += 1;
                println!("ESCAPE {name}: {}", one_line(&got));
            }
            Err(e) => println!("DENIED {name}: {}", one_line(&e)),
        }
    }

    /// A control: must succeed.
    fn control(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(got) => println!("OK {name}: {}", one_line(&got)),
            Err(e) => {
                self.broken += 1;
                println!("BROKEN {name}: {}", one_line(&e));
            }
        }
    }
}

/// `s` on one line, at most 1000 characters (NULs of environ blocks shown as spaces).
fn one_line(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c == '\0' || c == '\n' { ' ' } else { c })
        .collect();
    s.chars().take(1000).collect()
}

fn err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

fn read(path: &str) -> Result<String, String> {
    let mut f = std::fs::File::open(path).map_err(|e| err("open", e))?;
    let mut b = Vec::new();
    Read::by_ref(&mut f)
        .take(64 * 1024)
        .read_to_end(&mut b)
        .map_err(|e| err("read", e))?;
    Ok(format!(
        "{} bytes: {}",
        b.len(),
        String::from_utf8_lossy(&b)
    ))
}

/// Reads an environ block; reports its size and the variable names (not their values).
fn environ(path: &str) -> Result<String, String> {
    let b = std::fs::read(path).map_err(|e| err("read", e))?;
    let mut names: Vec<String> = b
        .split(|c| *c == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let e = String::from_utf8_lossy(e);
            e.split('=').next().unwrap_or_default().to_string()
        })
        .collect();
    names.sort();
    Ok(format!("{} bytes, variables {}", b.len(), names.join(",")))
}

fn list(path: &str) -> Result<String, String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| err("read_dir", e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(format!("{} entries: {}", names.len(), names.join(",")))
}

fn open_rw(path: &str) -> Result<String, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map(|_| "opened read-write".to_string())
        .map_err(|e| err("open", e))
}

/// Opens `mem` (a `/proc/<pid>/mem`) read-write, reads the vDSO's first 16 bytes (its
/// address from `maps`) and writes them back unchanged.
fn mem_write(mem: &str, maps: &str) -> Result<String, String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mem)
        .map_err(|e| err("open", e))?;
    let maps = std::fs::read_to_string(maps).map_err(|e| err("reading maps", e))?;
    let line = maps
        .lines()
        .find(|l| l.ends_with("[vdso]"))
        .ok_or("no [vdso] in maps")?;
    let start = u64::from_str_radix(line.split('-').next().unwrap_or(""), 16)
        .map_err(|e| format!("maps line {line:?}: {e}"))?;
    let mut bytes = [0u8; 16];
    f.seek(SeekFrom::Start(start)).map_err(|e| err("seek", e))?;
    f.read_exact(&mut bytes).map_err(|e| err("read", e))?;
    f.seek(SeekFrom::Start(start)).map_err(|e| err("seek", e))?;
    f.write_all(&bytes).map_err(|e| err("write", e))?;
    Ok(format!(
        "read and rewrote the vDSO at {start:#x}: {:02x?}",
        &bytes[..8]
    ))
}

fn write_back(path: &str) -> Result<String, String> {
    let text = "written by wasi-escape";
    std::fs::write(path, text).map_err(|e| err("write", e))?;
    let back = std::fs::read_to_string(path).map_err(|e| err("read back", e))?;
    if back != text {
        return Err(format!("read back {back:?}"));
    }
    let _ = std::fs::remove_file(path);
    Ok(format!("wrote and read back {path}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut r = Report {
        escapes: 0,
        broken: 0,
    };
    r.attempt(
        "proc-self-mem-write",
        mem_write("/proc/self/mem", "/proc/self/maps"),
    );
    r.attempt("proc-self-mem-open", open_rw("/proc/self/mem"));
    r.attempt("proc-self-environ", environ("/proc/self/environ"));
    r.attempt("proc-1-environ", environ("/proc/1/environ"));
    r.attempt("proc-self-mountinfo", read("/proc/self/mountinfo"));
    r.attempt("proc-list", list("/proc"));
    r.attempt("sys-cgroup-list", list("/sys/fs/cgroup"));
    r.attempt(
        "sys-cgroup-memory",
        read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    );
    r.attempt("proc-sys-hostname", read("/proc/sys/kernel/hostname"));
    r.attempt("sys-kernel-seqnum", read("/sys/kernel/uevent_seqnum"));
    r.attempt("sys-list", list("/sys"));
    r.attempt("dev-list", list("/dev"));
    for dev in [
        "/dev/null",
        "/dev/zero",
        "/dev/urandom",
        "/dev/full",
        "/dev/tty",
        "/dev/kmsg",
    ] {
        r.attempt(&format!("dev-open{}", dev.replace('/', "-")), open_rw(dev));
    }
    r.attempt("link-proc-environ", environ("/plink/self/environ"));
    r.attempt(
        "link-proc-mem",
        mem_write("/plink/self/mem", "/plink/self/maps"),
    );
    r.attempt("link-dev-null", open_rw("/data/devlink/null"));
    r.attempt("link-proc-list", list("/plink"));
    r.attempt("image-device", open_rw("/devs/zero"));

    r.control("image-file", read("/etc/escape-test.txt"));
    r.control("write-tmp", write_back("/tmp/wasi-escape.txt"));
    r.control("write-data", write_back("/data/wasi-escape.txt"));
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    env.sort();
    for (k, v) in env {
        println!("ENV {k}={v}");
    }
    println!("SUMMARY escapes={} broken={}", r.escapes, r.broken);
    if args.get(1).map(String::as_str) == Some("hold") {
        let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
        println!("HOLDING");
        let _ = std::io::stdout().flush();
        std::thread::sleep(std::time::Duration::from_secs(secs));
    }
    std::process::exit(if r.escapes == 0 && r.broken == 0 {
        0
    } else {
        1
    });
}
