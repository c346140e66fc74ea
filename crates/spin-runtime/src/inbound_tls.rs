//! Inbound TLS of the HTTP trigger: `SPIN_TLS_CERT` and `SPIN_TLS_KEY` (Spin's
//! `spin up --tls-cert/--tls-key`) name PEM files in the container; when both are set the
//! listener serves TLS only, offering HTTP/2 (`h2`) and HTTP/1.1 by ALPN.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Env var: PEM file of the server certificate chain (leaf first).
pub const TLS_CERT_ENV: &str = spin_shim_settings::container::TLS_CERT;
/// Env var: PEM file of the server certificate's private key (PKCS#8, PKCS#1 or SEC1).
pub const TLS_KEY_ENV: &str = spin_shim_settings::container::TLS_KEY;

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
    /// Loads the files the settings name ([`TLS_CERT_ENV`] and [`TLS_KEY_ENV`], both or
    /// neither: [`spin_shim_settings::container::ContainerSettings::tls`]): `None` serves
    /// plain HTTP; an error names the variable and the file when a file cannot be read, holds
    /// no certificate or key, or the key does not match the certificate.
    pub fn from_settings(tls: Option<&(PathBuf, PathBuf)>) -> anyhow::Result<Option<InboundTls>> {
        tls.map(|(cert, key)| Self::from_files(cert, key))
            .transpose()
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

    use spin_shim_settings::container::ContainerSettings;

    fn settings(pairs: &[(&str, &str)]) -> Result<ContainerSettings, String> {
        let env: Vec<_> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ContainerSettings::from_env(&env).map_err(|e| e.to_string())
    }

    #[test]
    fn neither_is_plain_http_and_one_alone_is_refused() {
        let none = settings(&[]).unwrap();
        assert!(InboundTls::from_settings(none.tls.as_ref())
            .unwrap()
            .is_none());
        let e = settings(&[(TLS_CERT_ENV, "/c.pem")]).unwrap_err();
        assert!(e.contains("SPIN_TLS_KEY is not"), "{e}");
        let e = settings(&[(TLS_KEY_ENV, "/k.pem")]).unwrap_err();
        assert!(e.contains("SPIN_TLS_CERT is not"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing.pem");
        let both = settings(&[
            (TLS_CERT_ENV, missing.to_str().unwrap()),
            (TLS_KEY_ENV, missing.to_str().unwrap()),
        ])
        .unwrap();
        let e = InboundTls::from_settings(both.tls.as_ref()).unwrap_err();
        assert!(e.to_string().contains("SPIN_TLS_CERT="), "{e}");
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
