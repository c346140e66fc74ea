//! Component sources by URL: `source = { url = "https://...", digest = "sha256:..." }`, as
//! Spin's loader resolves them (`spin-loader`'s `cache.rs`): the file is downloaded once,
//! its sha256 checked against the manifest's `digest`, and kept in a cache under its
//! digest, so every later app naming the same digest reads it from there.
//!
//! The bytes come from the network and are as untrusted as an image's: only `https://` is
//! fetched (a redirect to anything else is refused), the body is capped
//! ([`MAX_BYTES_ENV`]), written to a temporary file of the cache that is removed if anything
//! fails, and named by its digest only once the digest matched. Cache entries are opened
//! `O_PATH` and inspected as every other source ([`crate::untrusted::open_regular`]);
//! nothing here parses them.
//!
//! Where a process finds them is set once per process with [`set_policy`]: spin-serve (and
//! any other host tool) downloads into [`default_cache_dir`]; the shim downloads at Create
//! into the node's cache and the runtime in the container only reads what the shim placed
//! ([`Policy::Provided`]), never the network.
//!
//! The node reaches the URL through `HTTPS_PROXY`/`ALL_PROXY` unless `NO_PROXY` names the
//! host, and trusts the platform's CA certificates (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the
//! system's bundle) and Mozilla's, as the runtime's outbound HTTPS does.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use sha2::{Digest, Sha256};

use crate::untrusted::{open_regular, shown, shown_path};

/// Env var: the largest source downloaded, in bytes (default
/// [`spin_shim_settings::shim::DEFAULT_MAX_DOWNLOAD_BYTES`]).
pub const MAX_BYTES_ENV: &str = spin_shim_settings::shim::MAX_DOWNLOAD_BYTES;
/// Env var: the longest a download may take, in seconds (default
/// [`spin_shim_settings::shim::DEFAULT_DOWNLOAD_TIMEOUT_SECS`]).
pub const TIMEOUT_ENV: &str = spin_shim_settings::shim::DOWNLOAD_TIMEOUT_SECS;
/// Env var: spin-serve's download cache (default `$XDG_CACHE_HOME/spin-serve/url-sources`,
/// else `$HOME/.cache/spin-serve/url-sources`).
pub const SERVE_CACHE_ENV: &str = spin_shim_settings::serve::SOURCE_CACHE_DIR;
/// Env var: a PEM bundle of CA certificates to trust instead of the system's bundle.
pub const CA_FILE_ENV: &str = "SSL_CERT_FILE";
/// Most redirects followed.
const MAX_REDIRECTS: u32 = 10;
/// How this process resolves a component source by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Download into this cache directory (created `0700`) unless it holds the digest.
    Download(PathBuf),
    /// Read only files another process placed in this directory, named by hex digest;
    /// never download (the runtime in a container: the shim downloaded at Create).
    Provided(PathBuf),
}

static POLICY: OnceLock<Policy> = OnceLock::new();

/// Sets how this process resolves URL sources (once; later calls must agree). Unset, a
/// process downloads into [`default_cache_dir`].
pub fn set_policy(p: Policy) -> anyhow::Result<()> {
    let set = POLICY.get_or_init(|| p.clone());
    anyhow::ensure!(
        *set == p,
        "URL sources already resolve as {set:?} in this process"
    );
    Ok(())
}

/// spin-serve's cache: [`SERVE_CACHE_ENV`] (spin-serve's settings), else
/// `$XDG_CACHE_HOME/spin-serve/url-sources`, else `$HOME/.cache/spin-serve/url-sources`,
/// else one under the temp directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = spin_shim_settings::serve::source_cache_dir() {
        return d;
    }
    // The XDG base-directory convention, not a setting of this project.
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("spin-serve")
        .join("url-sources")
}

/// The download cap ([`MAX_BYTES_ENV`]) of this process's settings: spin-serve's or the
/// shim's ([`spin_shim_settings::serve::downloads`]).
pub fn max_bytes() -> anyhow::Result<u64> {
    Ok(spin_shim_settings::serve::downloads()?.max_bytes)
}

/// The hex part of `digest` if it is `sha256:` and 64 lower-case hex digits.
pub fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// A component source by URL, as the manifest writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSource {
    /// The component id, or `trigger.<type>[<n>].component` for an inline component.
    pub id: String,
    /// The URL.
    pub url: String,
    /// `sha256:<hex>`.
    pub digest: String,
}

impl RemoteSource {
    /// Checks the URL and digest before anything is fetched; `what` names the source.
    pub fn check(&self, what: &str) -> anyhow::Result<&str> {
        let Some(hex) = digest_hex(&self.digest) else {
            bail!(
                "{what}: `digest` = \"{}\" is not a sha256 digest; write `digest = \
                 \"sha256:<64 lower-case hex digits>\"` (the sha256 of the file at the URL)",
                shown(&self.digest)
            );
        };
        if !self.url.starts_with("https://") {
            bail!(
                "{what}: `url` = \"{}\" is not an https:// URL; only https:// sources are \
                 downloaded (serve the file over https, or ship it in the image and give its \
                 path as `source`)",
                shown(&self.url)
            );
        }
        Ok(hex)
    }

    /// The local file of this source under the process's [`Policy`]: downloaded (or found in
    /// the cache), or placed by the shim. `what` names the source in errors.
    pub fn resolve(&self, what: &str) -> anyhow::Result<PathBuf> {
        let policy = POLICY
            .get()
            .cloned()
            .unwrap_or_else(|| Policy::Download(default_cache_dir()));
        match policy {
            Policy::Download(dir) => self.fetch(&dir, what),
            Policy::Provided(dir) => self.provided(&dir, what),
        }
    }

    /// The file of this source the shim placed in `dir` (named by hex digest), a regular
    /// file; nothing is fetched.
    pub fn provided(&self, dir: &Path, what: &str) -> anyhow::Result<PathBuf> {
        let hex = self.check(what)?;
        let path = dir.join(hex);
        open_regular(&path).map_err(|e| {
            anyhow!(
                "{what}: the download of {} is not at {} ({e}); the shim places URL sources \
                 there when it creates the container",
                shown(&self.url),
                shown_path(&path)
            )
        })?;
        Ok(path)
    }

    /// The file of this source in cache `dir`, downloaded first unless the cache holds
    /// its digest. One download at a time per cache (a lock on the directory), so pods
    /// started together download a source once. `what` names the source in errors.
    pub fn fetch(&self, dir: &Path, what: &str) -> anyhow::Result<PathBuf> {
        let hex = self.check(what)?;
        let max = max_bytes()?;
        create_private_dir(dir).with_context(|| {
            format!(
                "{what}: cannot create the download cache {}",
                shown_path(dir)
            )
        })?;
        let path = dir.join(hex);
        if let Some(p) = cached(&path, max, what)? {
            return Ok(p);
        }
        let lock =
            File::open(dir).with_context(|| format!("{what}: cannot open {}", shown_path(dir)))?;
        // SAFETY: flock on a descriptor this function owns; released when it is closed.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "{what}: cannot lock {}: {}",
                shown_path(dir),
                std::io::Error::last_os_error()
            );
        }
        if let Some(p) = cached(&path, max, what)? {
            return Ok(p);
        }
        self.download(dir, hex, max, what)?;
        Ok(path)
    }

    fn download(&self, dir: &Path, hex: &str, max: u64, what: &str) -> anyhow::Result<()> {
        let url = shown(&self.url);
        let fix = "the node must reach it over https: set HTTPS_PROXY (and NO_PROXY) in the \
                   environment of the shim (containerd's) or spin-serve if it needs a proxy, \
                   SSL_CERT_FILE if its certificate is from a private CA, or ship the file in \
                   the image and give its path as `source`";
        let timeout = spin_shim_settings::serve::downloads()?.timeout;
        let agent = agent(timeout, what)?;
        let response = agent.get(&self.url).call().map_err(|e| match e {
            ureq::Error::RequireHttpsOnly(to) => anyhow!(
                "{what}: {url} redirects to {}, which is not https://; only https:// \
                 redirects are followed (fix the URL to name the final https location)",
                shown(&to)
            ),
            ureq::Error::TooManyRedirects => anyhow!(
                "{what}: {url} redirects more than {MAX_REDIRECTS} times; fix the URL to name \
                 the final location"
            ),
            e => anyhow!("{what}: cannot download {url}: {e}; {fix}"),
        })?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "{what}: cannot download {url}: the server answered {status}; check the URL \
                 (and that the file is still published there)"
            );
        }
        let body = response.into_body();
        if let Some(len) = body.content_length().filter(|&l| l > max) {
            bail!(
                "{what}: {url} is {len} bytes, more than the limit of {max} bytes \
                 ({MAX_BYTES_ENV})"
            );
        }
        // Removed when dropped: a failed download leaves nothing behind.
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-download-")
            .tempfile_in(dir)
            .with_context(|| format!("{what}: cannot write into {}", shown_path(dir)))?;
        let mut hasher = Sha256::new();
        let mut reader = body.into_reader().take(max + 1);
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{what}: downloading {url} failed after {total} bytes: {e}; {fix}"),
            };
            total += n as u64;
            if total > max {
                bail!("{what}: {url} is more than the limit of {max} bytes ({MAX_BYTES_ENV})");
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n])
                .with_context(|| format!("{what}: writing into {}", shown_path(dir)))?;
        }
        let got = hex::encode(hasher.finalize());
        if got != hex {
            bail!(
                "{what}: the file at {url} has digest sha256:{got}, but the manifest says \
                 {}; the file changed or the digest is wrong: fix `digest` (after checking \
                 the file) or the URL",
                self.digest
            );
        }
        tmp.as_file().sync_all()?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o444))?;
        tmp.persist(dir.join(hex))
            .map_err(|e| anyhow!("{what}: cannot name the download: {}", e.error))?;
        Ok(())
    }
}

/// `path` if the cache holds it as a regular file of at most `max` bytes.
fn cached(path: &Path, max: u64, what: &str) -> anyhow::Result<Option<PathBuf>> {
    match open_regular(path) {
        Ok(f) => {
            let len = f.metadata()?.len();
            anyhow::ensure!(
                len <= max,
                "{what}: the cached download {} has {len} bytes, more than the limit of {max} \
                 ({MAX_BYTES_ENV})",
                shown_path(path)
            );
            Ok(Some(path.to_path_buf()))
        }
        Err(crate::untrusted::OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => bail!("{what}: cache entry {}: {e}", shown_path(path)),
    }
}

/// Creates `dir` (and parents) and makes it `0700`.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// An HTTPS-only client: redirects to https only, the proxy from the environment, the CA
/// certificates of [`roots`], `timeout` for the whole download.
fn agent(timeout: Duration, what: &str) -> anyhow::Result<ureq::Agent> {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(roots().with_context(|| what.to_string())?)
        .build();
    Ok(ureq::Agent::config_builder()
        .https_only(true)
        .max_redirects(MAX_REDIRECTS)
        .http_status_as_error(false)
        .proxy(ureq::Proxy::try_from_env())
        .timeout_connect(Some(Duration::from_secs(30).min(timeout)))
        .timeout_global(Some(timeout))
        .tls_config(tls)
        .build()
        .new_agent())
}

/// The CA certificates to trust, as the runtime's outbound HTTPS trusts them: the
/// platform's (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the system's bundle, found as
/// OpenSSL finds it) and Mozilla's. An unreadable `SSL_CERT_FILE` is an error here, not a
/// warning: the download would fail later with a less helpful one.
fn roots() -> anyhow::Result<ureq::tls::RootCerts> {
    let found = rustls_native_certs::load_native_certs();
    if let Some(e) = found.errors.first() {
        bail!("the CA certificates: {e} (check {CA_FILE_ENV} / SSL_CERT_DIR)");
    }
    let certs: Vec<_> = found
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c).to_owned())
        .chain(
            webpki_root_certs::TLS_SERVER_ROOT_CERTS
                .iter()
                .map(|c| ureq::tls::Certificate::from_der(c).to_owned()),
        )
        .collect();
    Ok(ureq::tls::RootCerts::new_with_certs(&certs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url: &str, digest: &str) -> RemoteSource {
        RemoteSource {
            id: "c".into(),
            url: url.into(),
            digest: digest.into(),
        }
    }

    #[test]
    fn checks_digest_and_scheme_before_fetching() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert!(source("https://x/y.wasm", &good).check("c").is_ok());
        let e = source("https://x/y.wasm", "sha256:ABC")
            .check("c")
            .unwrap_err();
        assert!(e.to_string().contains("not a sha256 digest"), "{e}");
        let e = source("https://x/y.wasm", &format!("sha256:{}", "A".repeat(64)))
            .check("c")
            .unwrap_err();
        assert!(e.to_string().contains("64 lower-case"), "{e}");
        let e = source("http://x/y.wasm", &good).check("c").unwrap_err();
        assert!(e.to_string().contains("not an https:// URL"), "{e}");
        let e = source("file:///etc/passwd", &good).check("c").unwrap_err();
        assert!(e.to_string().contains("not an https:// URL"), "{e}");
    }

    #[test]
    fn provided_directory_is_read_not_fetched() {
        let d = tempfile::tempdir().unwrap();
        let hex = "b".repeat(64);
        let s = source("https://127.0.0.1:1/never", &format!("sha256:{hex}"));
        let e = s.provided(d.path(), "c").unwrap_err();
        assert!(e.to_string().contains("the shim places URL sources"), "{e}");
        std::fs::write(d.path().join(&hex), b"\0asm").unwrap();
        assert_eq!(s.provided(d.path(), "c").unwrap(), d.path().join(&hex));
        std::fs::remove_file(d.path().join(&hex)).unwrap();
        nix_mkfifo(&d.path().join(&hex));
        let e = s.provided(d.path(), "c").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    fn nix_mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
}
