//! Inbound TLS of the HTTP trigger: `SPIN_TLS_CERT` and `SPIN_TLS_KEY` (Spin's
//! `spin up --tls-cert/--tls-key`) name PEM files in the container; when both are set the
//! listener serves TLS only, offering HTTP/2 (`h2`) and HTTP/1.1 by ALPN.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Env var: PEM file of the server certificate chain (leaf first).
pub const TLS_CERT_ENV: &str = "SPIN_TLS_CERT";
/// Env var: PEM file of the server certificate's private key (PKCS#8, PKCS#1 or SEC1).
pub const TLS_KEY_ENV: &str = "SPIN_TLS_KEY";

/// The listener's TLS configuration, read once at start (before the runtime confines
/// itself), shared by every connection.
#[derive(Clone)]
pub struct InboundTls {
    acceptor: tokio_rustls::TlsAcceptor,
    cert_path: String,
}

impl std::fmt::Debug for InboundTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundTls")
            .field("cert", &self.cert_path)
            .finish_non_exhaustive()
    }
}

impl InboundTls {
    /// Reads [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`] through `lookup`: `None` when neither is
    /// set (plain HTTP); an error naming the variable and the file when only one is set, a
    /// file cannot be read, holds no certificate or key, or the key does not match the
    /// certificate.
    pub fn from_lookup<'a>(
        lookup: impl Fn(&str) -> Option<&'a str>,
    ) -> anyhow::Result<Option<InboundTls>> {
        let get = |k| lookup(k).filter(|v| !v.is_empty());
        match (get(TLS_CERT_ENV), get(TLS_KEY_ENV)) {
            (None, None) => Ok(None),
            (Some(_), None) => bail!(
                "{TLS_CERT_ENV} is set but {TLS_KEY_ENV} is not: set both (the PEM certificate \
                 chain and its private key) to serve TLS, or neither to serve plain HTTP"
            ),
            (None, Some(_)) => bail!(
                "{TLS_KEY_ENV} is set but {TLS_CERT_ENV} is not: set both (the PEM certificate \
                 chain and its private key) to serve TLS, or neither to serve plain HTTP"
            ),
            (Some(cert), Some(key)) => Self::from_files(Path::new(cert), Path::new(key)).map(Some),
        }
    }

    /// Loads the PEM certificate chain at `cert` and the private key at `key`.
    pub fn from_files(cert: &Path, key: &Path) -> anyhow::Result<InboundTls> {
        let certs = read_certs(cert)?;
        let key_der = read_key(key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow!("cannot configure TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, key_der)
            .map_err(|e| {
                anyhow!(
                    "{TLS_KEY_ENV}=`{}` cannot serve the certificate of {TLS_CERT_ENV}=`{}`: \
                     {e} (give the private key that belongs to the certificate's leaf)",
                    key.display(),
                    cert.display()
                )
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(InboundTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            cert_path: cert.display().to_string(),
        })
    }

    /// The acceptor that runs each connection's handshake.
    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
}

fn read_file(var: &str, path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        anyhow!(
            "{var}=`{}`: cannot read the {what}: {e} (give the path of a PEM file inside the \
             container)",
            path.display()
        )
    })
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = read_file(TLS_CERT_ENV, path, "certificate chain")?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow!(
                "{TLS_CERT_ENV}=`{}` is not a valid PEM file: {e}",
                path.display()
            )
        })?;
    if certs.is_empty() {
        bail!(
            "{TLS_CERT_ENV}=`{}` holds no certificate: give a PEM file with `-----BEGIN \
             CERTIFICATE-----` blocks, the server's certificate first",
            path.display()
        );
    }
    Ok(certs)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = read_file(TLS_KEY_ENV, path, "private key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        let why = match e {
            rustls::pki_types::pem::Error::NoItemsFound => "it holds no private key".to_string(),
            e => format!("it is not a valid PEM private key: {e}"),
        };
        anyhow!(
            "{TLS_KEY_ENV}=`{}`: {why} (give a PEM file with a `-----BEGIN PRIVATE KEY-----`, \
             `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    #[test]
    fn neither_is_plain_http_and_one_alone_is_refused() {
        assert!(InboundTls::from_lookup(lookup(&[])).unwrap().is_none());
        let e = InboundTls::from_lookup(lookup(&[(TLS_CERT_ENV, "/c.pem")])).unwrap_err();
        assert!(e.to_string().contains("SPIN_TLS_KEY is not"), "{e}");
        let e = InboundTls::from_lookup(lookup(&[(TLS_KEY_ENV, "/k.pem")])).unwrap_err();
        assert!(e.to_string().contains("SPIN_TLS_CERT is not"), "{e}");
    }

    #[test]
    fn missing_and_invalid_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing.pem");
        let e = InboundTls::from_files(&missing, &missing).unwrap_err();
        assert!(e.to_string().contains("SPIN_TLS_CERT="), "{e}");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let junk = d.path().join("junk.pem");
        std::fs::write(&junk, "not pem at all\n").unwrap();
        let e = InboundTls::from_files(&junk, &junk).unwrap_err();
        assert!(e.to_string().contains("holds no certificate"), "{e}");
        assert!(e.to_string().contains("junk.pem"), "{e}");
    }
}
