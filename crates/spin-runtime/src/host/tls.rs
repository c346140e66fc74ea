//! `[[client_tls]]` of the runtime config, as Spin's outbound-networking factor defines it:
//! per component and destination host, the CA roots to trust for outbound HTTPS (a PEM
//! file, the platform's roots, webpki's) and a client certificate to present.
//!
//! Requests to hosts without an entry keep wasmtime-wasi-http's client (webpki roots).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use http::{Request, Response};
use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// Where the platform's CA bundle is on Debian-family systems.
const PLATFORM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One `[[client_tls]]` entry, loaded.
#[derive(Clone)]
pub struct ClientTls {
    /// `component_ids`.
    pub components: Vec<String>,
    /// `hosts`: `host` or `host:port`.
    pub hosts: Vec<(String, Option<u16>)>,
    /// The client config built from the entry.
    pub config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("components", &self.components)
            .field("hosts", &self.hosts)
            .finish()
    }
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        self.components == other.components
            && self.hosts == other.hosts
            && Arc::ptr_eq(&self.config, &other.config)
    }
}
impl Eq for ClientTls {}

impl ClientTls {
    /// Whether this entry covers `host` (and `port`, when the entry names one).
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(h, p)| h.eq_ignore_ascii_case(host) && p.is_none_or(|p| p == port))
    }
}

fn load_certs(path: &Path, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("{what}: cannot read {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{what}: {} is not PEM certificates", path.display()))?;
    if certs.is_empty() {
        bail!("{what}: {} holds no certificate", path.display());
    }
    Ok(certs)
}

/// Parses the `client_tls` array; relative file paths resolve against `base`.
pub fn parse_runtime_config(
    value: &toml::Value,
    base: &Path,
    origin: &str,
) -> anyhow::Result<Vec<ClientTls>> {
    let list = value.as_array().with_context(|| {
        format!("{origin}: `client_tls` must be an array of tables ([[client_tls]])")
    })?;
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let key = format!("client_tls[{i}]");
        let t = entry
            .as_table()
            .with_context(|| format!("{origin}: `{key}` must be a table"))?;
        const FIELDS: &[&str] = &[
            "component_ids",
            "hosts",
            "ca_use_platform_roots",
            "ca_use_webpki_roots",
            "ca_roots_file",
            "client_cert_file",
            "client_private_key_file",
        ];
        if let Some(unknown) = t.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            bail!("{origin}: `{key}.{unknown}` is not a field of [[client_tls]]");
        }
        let strings = |name: &str| -> anyhow::Result<Vec<String>> {
            let v = t
                .get(name)
                .and_then(|v| v.as_array())
                .with_context(|| format!("{origin}: `{key}.{name}` must be a list of strings"))?;
            let v: Vec<String> = v
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .with_context(|| format!("{origin}: `{key}.{name}` must be a list of strings"))?;
            if v.is_empty() {
                bail!("{origin}: `{key}.{name}` may not be empty");
            }
            Ok(v)
        };
        let components = strings("component_ids")?;
        let hosts = strings("hosts")?
            .into_iter()
            .map(|h| match h.rsplit_once(':') {
                Some((name, port)) => port
                    .parse::<u16>()
                    .map(|p| (name.to_string(), Some(p)))
                    .map_err(|_| anyhow::anyhow!("{origin}: `{key}.hosts`: invalid host {h:?}")),
                None => Ok((h, None)),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let flag = |name: &str| -> anyhow::Result<Option<bool>> {
            t.get(name)
                .map(|v| {
                    v.as_bool()
                        .with_context(|| format!("{origin}: `{key}.{name}` must be true or false"))
                })
                .transpose()
        };
        let path = |name: &str| -> anyhow::Result<Option<std::path::PathBuf>> {
            t.get(name)
                .map(|v| {
                    v.as_str()
                        .map(|p| base.join(p))
                        .with_context(|| format!("{origin}: `{key}.{name}` must be a path"))
                })
                .transpose()
        };
        let roots_file = path("ca_roots_file")?;
        // Spin's defaults: platform roots unless a roots file is given; webpki's off.
        let (platform, webpki) =
            match (flag("ca_use_platform_roots")?, flag("ca_use_webpki_roots")?) {
                (Some(p), Some(w)) => (p, w),
                (Some(p), None) => (p, false),
                (None, Some(w)) => (false, w),
                (None, None) => (roots_file.is_none(), false),
            };
        let what = format!("{origin}: `{key}`");
        let mut roots = rustls::RootCertStore::empty();
        if webpki {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        if platform {
            for c in load_certs(
                Path::new(PLATFORM_ROOTS),
                &format!("{what} (platform roots)"),
            )? {
                let _ = roots.add(c);
            }
        }
        if let Some(f) = &roots_file {
            for c in load_certs(f, &format!("{what}.ca_roots_file"))? {
                roots.add(c).with_context(|| {
                    format!(
                        "{what}.ca_roots_file: {} has an unusable certificate",
                        f.display()
                    )
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(roots);
        let mut config = match (path("client_cert_file")?, path("client_private_key_file")?) {
            (Some(cert), Some(key_file)) => {
                let chain = load_certs(&cert, &format!("{what}.client_cert_file"))?;
                let key = PrivateKeyDer::from_pem_file(&key_file).with_context(|| {
                    format!(
                        "{what}.client_private_key_file: {} is not a PEM private key",
                        key_file.display()
                    )
                })?;
                builder.with_client_auth_cert(chain, key).with_context(|| {
                    format!("{what}: the client certificate and key do not match")
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) => {
                bail!("{what}: client_cert_file given without client_private_key_file")
            }
            (None, Some(_)) => {
                bail!("{what}: client_private_key_file given without client_cert_file")
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        out.push(ClientTls {
            components,
            hosts,
            config: Arc::new(config),
        });
    }
    Ok(out)
}

/// Sends an HTTPS request over a connection made with `config` (HTTP/1.1), with the
/// request options' connect and first-byte timeouts (default 600 s, as wasmtime-wasi-http).
pub async fn send(
    mut req: Request<WasiBody>,
    options: Option<RequestOptions>,
    config: Arc<rustls::ClientConfig>,
) -> Result<
    (
        Response<WasiBody>,
        Box<dyn std::future::Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
> {
    let uri = req.uri().clone();
    let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(Duration::from_secs(600));
    let first_byte_timeout = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(Duration::from_secs(600));
    let tcp = match tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(s) => s.map_err(Error::Connect)?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(Error::InvalidDnsNameError)?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(Error::Tls)?;
    let (mut sender, conn) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)?
    .map_err(Error::Hyper)?;
    *req.uri_mut() = http::Uri::builder()
        .path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let conn = tokio::spawn(conn);
    let resp = tokio::time::timeout(first_byte_timeout, sender.send_request(req))
        .await
        .map_err(|_| Error::ConnectionReadTimeout)?
        .map_err(Error::Hyper)?;
    let resp = resp.map(|b| b.map_err(Error::Hyper).boxed_unsync());
    Ok((
        resp,
        Box::new(async move {
            match conn.await {
                Ok(r) => r.map_err(Error::Hyper),
                Err(_) => Err(Error::ConnectionTerminated),
            }
        }),
    ))
}
