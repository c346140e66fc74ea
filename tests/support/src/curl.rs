//! The curl CLI (Debian's, with HTTP/2) as a client: what it printed and whether it
//! succeeded.

use std::process::Command;

/// `-w` format that prints the HTTP version of each transfer as a `v=<version>` line.
pub const VERSION: &str = "v=%{http_version}\n";

/// What curl printed: stdout (body, then `-w` output), stderr (`-v`), exit status.
pub struct Curl {
    /// Standard output.
    pub out: String,
    /// Standard error.
    pub err: String,
    /// Whether curl exited 0.
    pub ok: bool,
}

impl Curl {
    /// Runs `curl -sS --max-time 60` with `args`.
    pub fn run(args: &[&str]) -> Curl {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "60"])
            .args(args)
            .output()
            .expect("curl (Debian package curl)");
        Curl {
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
            ok: out.status.success(),
        }
    }

    /// The HTTP version of each transfer (from [`VERSION`] lines).
    pub fn versions(&self) -> Vec<&str> {
        self.out
            .lines()
            .filter_map(|l| l.strip_prefix("v="))
            .collect()
    }
}
