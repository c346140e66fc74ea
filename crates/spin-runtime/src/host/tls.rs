//! `[[client_tls]]` of the runtime config, as Spin's outbound-networking factor defines it:
//! per component and destination host, the CA roots to trust for outbound HTTPS (a PEM
//! file, the platform's roots, webpki's) and a client certificate to present.
//!
//! Everything else that goes out over TLS (HTTPS without an entry, `rediss://`, PostgreSQL
//! `sslmode`, MySQL `ssl-mode`, `mqtts://`) verifies the server with [`trust_store`]: the
//! platform's roots as Spin 4's rustls-platform-verifier finds them on Linux
//! (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the image's `/etc/ssl/certs` and the other
//! OpenSSL locations) plus Mozilla's roots (webpki-root-certs), as Spin 4's defaults
//! (`ca_use_platform_roots` and `ca_use_webpki_roots` both on). Verification is never off.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use http::{Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// One `[[client_tls]]` entry, loaded.
#[derive(Clone)]
pub struct ClientTls {
    /// `component_ids`.
    pub components: Vec<String>,
    /// `hosts`: `host` or `host:port`.
    pub hosts: Vec<(String, Option<u16>)>,
    /// The client config built from the entry (HTTP/1.1 ALPN).
    pub config: Arc<rustls::ClientConfig>,
    /// The same trust and client certificate for the other protocols.
    pub data: DataTls,
}

/// The TLS settings of a connection to a data service (Redis, PostgreSQL, MySQL, MQTT): a
/// rustls config without ALPN, and the same roots and client certificate as PEM for the
/// clients that take PEM (redis, mysql_async).
#[derive(Clone)]
pub struct DataTls {
    /// The rustls config (no ALPN).
    pub config: Arc<rustls::ClientConfig>,
    /// The trusted roots, PEM.
    pub roots_pem: Arc<Vec<u8>>,
    /// The client certificate chain and private key, PEM, if one is presented.
    pub client_pem: Option<Arc<(Vec<u8>, Vec<u8>)>>,
}

/// The process's default trust store (see the module doc), read once, on first use.
pub struct TrustStore {
    /// The roots that came from the platform (webpki's not included).
    pub platform: Vec<CertificateDer<'static>>,
    /// The rustls config for HTTPS (HTTP/1.1 ALPN).
    pub http: Arc<rustls::ClientConfig>,
    /// The settings for data services.
    pub data: DataTls,
}

/// Reads the platform's roots: `SSL_CERT_FILE`/`SSL_CERT_DIR` when set, else the OpenSSL
/// locations of the image. Unreadable files are logged (named) and skipped.
fn platform_roots() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(
            "TLS trust store: {e}; its certificates are not trusted (check SSL_CERT_FILE / \
             SSL_CERT_DIR or the image's /etc/ssl/certs)"
        );
    }
    found.certs
}

/// PEM text of `certs`.
fn to_pem(certs: &[CertificateDer<'_>]) -> Vec<u8> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for c in certs {
        let b64 = base64::engine::general_purpose::STANDARD.encode(c.as_ref());
        out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    out
}

/// A rustls config builder with ring and the safe protocol versions, trusting `roots`
/// (certificates rustls cannot use as anchors are skipped, as rustls-platform-verifier does).
fn builder(
    roots: &[CertificateDer<'static>],
) -> anyhow::Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>> {
    let mut store = rustls::RootCertStore::empty();
    store.add_parsable_certificates(roots.iter().cloned());
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_root_certificates(store))
}

/// A blocking HTTP client (ureq) for the runtime's own requests to operator-configured
/// services (secret stores, libSQL): the [`trust_store`]'s roots (platform plus Mozilla's),
/// the proxy from the environment (`HTTPS_PROXY`/`NO_PROXY`), HTTP error statuses returned
/// as answers, each exchange bounded by `timeout`.
pub(crate) fn http_agent(timeout: std::time::Duration) -> ureq::Agent {
    let store = trust_store();
    let roots: Vec<_> = store
        .platform
        .iter()
        .chain(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter())
        .map(|c| ureq::tls::Certificate::from_der(c).to_owned())
        .collect();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(ureq::Proxy::try_from_env())
        .timeout_global(Some(timeout))
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
                .build(),
        )
        .build()
        .new_agent()
}

/// The process's default trust store: the platform's roots plus Mozilla's.
pub fn trust_store() -> &'static TrustStore {
    static STORE: std::sync::OnceLock<TrustStore> = std::sync::OnceLock::new();
    STORE.get_or_init(|| {
        // The redis and mysql_async clients build their configs with the process default
        // provider: make it ring, as everywhere else here (no-op if one is installed).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let platform = platform_roots();
        let platform_count = platform.len();
        let mut roots = platform.clone();
        roots.extend(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
        tracing::debug!(
            "TLS trust store: {platform_count} platform roots and {} of Mozilla's",
            webpki_root_certs::TLS_SERVER_ROOT_CERTS.len()
        );
        let config = builder(&roots)
            .expect("ring supports the safe default protocol versions")
            .with_no_client_auth();
        let mut http = config.clone();
        http.alpn_protocols = vec![b"http/1.1".to_vec()];
        TrustStore {
            platform,
            http: Arc::new(http),
            data: DataTls {
                config: Arc::new(config),
                roots_pem: Arc::new(to_pem(&roots)),
                client_pem: None,
            },
        }
    })
}

/// The TLS settings for a connection to `host:port` from `component`: its `[[client_tls]]`
/// entry for that host if it has one, else the default trust store.
pub fn data_tls_for(entries: &[ClientTls], host: &str, port: u16) -> DataTls {
    let default = trust_store();
    entries
        .iter()
        .find(|t| t.covers(host.trim_matches(['[', ']']), port))
        .map(|t| t.data.clone())
        .unwrap_or_else(|| default.data.clone())
}

/// Opens a Redis client for `url`; a `rediss://` URL gets `tls` (its roots and client
/// certificate). Certificate verification cannot be turned off: `#insecure` is refused.
pub fn redis_client(url: &str, tls: &DataTls) -> anyhow::Result<redis::Client> {
    let client = redis::Client::open(url)?;
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => bail!(
            "`#insecure` turns off certificate verification, which this runtime does not do; \
             remove it and trust the server's CA (SSL_CERT_FILE, or [[client_tls]] \
             ca_roots_file in the runtime config)"
        ),
        redis::ConnectionAddr::TcpTls { .. } => Ok(redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: tls.client_pem.as_ref().map(|p| redis::ClientTlsConfig {
                    client_cert: p.0.clone(),
                    client_key: p.1.clone(),
                }),
                root_cert: Some(tls.roots_pem.to_vec()),
            },
        )?),
        _ => Ok(client),
    }
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

/// The client-TLS host feature: `[[client_tls]]`, and for each component the entries that
/// name it. It links no guest interface: outbound HTTP, Redis, PostgreSQL, MySQL and MQTT
/// ask the instance's [`ComponentTls`].
pub struct ClientTlsFeature;

/// The `[[client_tls]]` entries naming one component.
#[derive(Clone, Default)]
pub struct ComponentTls(Arc<[ClientTls]>);

impl ComponentTls {
    /// The entries of `all` that name component `id`.
    pub fn for_component(all: &[ClientTls], id: &str) -> Self {
        ComponentTls(
            all.iter()
                .filter(|t| t.components.iter().any(|c| c == id))
                .cloned()
                .collect(),
        )
    }

    /// The entries, in the runtime config's order.
    pub fn entries(&self) -> &[ClientTls] {
        &self.0
    }

    /// The client config for an HTTPS request to `uri`: the first entry covering its host
    /// and port, else the default trust store ([`trust_store`]); `None` for plain HTTP.
    pub fn for_https(&self, uri: &http::Uri) -> Option<Arc<rustls::ClientConfig>> {
        if uri.scheme_str() != Some("https") {
            return None;
        }
        let host = uri.host()?;
        let port = uri.port_u16().unwrap_or(443);
        self.0
            .iter()
            .find(|t| t.covers(host, port))
            .map(|t| t.config.clone())
            .or_else(|| Some(trust_store().http.clone()))
    }
}

impl super::feature::HostFeature for ClientTlsFeature {
    const SECTIONS: &'static [&'static str] = &["client_tls"];
    type Config = Vec<ClientTls>;
    type App = Vec<ClientTls>;
    type Instance = ComponentTls;

    fn parse(source: &super::runtime_config::Source<'_>) -> anyhow::Result<Vec<ClientTls>> {
        match source.take("client_tls") {
            Some(v) => parse_runtime_config(v, source.base_dir(), source.origin()),
            None => Ok(Vec::new()),
        }
    }

    fn build(
        config: &Vec<ClientTls>,
        _: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<Vec<ClientTls>> {
        Ok(config.clone())
    }

    fn instance(
        app: &Vec<ClientTls>,
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentTls> {
        Ok(ComponentTls::for_component(app, &cx.component.id))
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
        let mut roots = Vec::new();
        if webpki {
            roots.extend(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
        }
        if platform {
            let store = trust_store();
            if store.platform.is_empty() {
                bail!(
                    "{what}: ca_use_platform_roots is set but the platform has no CA \
                     certificates (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs); give \
                     ca_roots_file or ca_use_webpki_roots = true"
                );
            }
            roots.extend(store.platform.iter().cloned());
        }
        if let Some(f) = &roots_file {
            for c in load_certs(f, &format!("{what}.ca_roots_file"))? {
                let mut probe = rustls::RootCertStore::empty();
                probe.add(c.clone()).with_context(|| {
                    format!(
                        "{what}.ca_roots_file: {} has an unusable certificate",
                        f.display()
                    )
                })?;
                roots.push(c);
            }
        }
        let builder = builder(&roots)?;
        let mut client_pem = None;
        let mut config = match (path("client_cert_file")?, path("client_private_key_file")?) {
            (Some(cert), Some(key_file)) => {
                let chain = load_certs(&cert, &format!("{what}.client_cert_file"))?;
                let key = PrivateKeyDer::from_pem_file(&key_file).with_context(|| {
                    format!(
                        "{what}.client_private_key_file: {} is not a PEM private key",
                        key_file.display()
                    )
                })?;
                let key_pem = std::fs::read(&key_file).with_context(|| {
                    format!(
                        "{what}.client_private_key_file: cannot read {}",
                        key_file.display()
                    )
                })?;
                client_pem = Some(Arc::new((to_pem(&chain), key_pem)));
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
        let data = DataTls {
            config: Arc::new(config.clone()),
            roots_pem: Arc::new(to_pem(&roots)),
            client_pem,
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        out.push(ClientTls {
            components,
            hosts,
            config: Arc::new(config),
            data,
        });
    }
    Ok(out)
}

/// Sends an HTTPS request over a connection made with `config` (HTTP/1.1), with the
/// request options' timeouts (default 600 s, as wasmtime-wasi-http), to a destination the
/// operator chose (no app network policy applies: see [`super::outbound::send_http`]).
pub async fn send(
    req: Request<WasiBody>,
    options: Option<RequestOptions>,
    config: Arc<rustls::ClientConfig>,
) -> Result<(Response<WasiBody>, super::outbound::ConnectionTask), Error> {
    let unrestricted = super::network_policy::NetworkPolicy::default();
    super::outbound::send_http(&unrestricted, "", req, options, Some(config)).await
}

impl DataTls {
    /// These settings with the PEM certificates in `pem` trusted as well (PostgreSQL's
    /// `connection-builder.set-ca-root`, which Spin adds to the platform's roots).
    pub fn with_extra_roots(&self, pem: &[u8]) -> anyhow::Result<DataTls> {
        let extra = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .context("the CA root is not PEM certificates")?;
        if extra.is_empty() {
            bail!("the CA root holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
        }
        let mut roots = CertificateDer::pem_slice_iter(&self.roots_pem)
            .collect::<Result<Vec<_>, _>>()
            .context("trusted roots")?;
        for c in &extra {
            rustls::RootCertStore::empty()
                .add(c.clone())
                .context("the CA root is not a usable CA certificate")?;
        }
        roots.extend(extra);
        let builder = builder(&roots)?;
        let config = match &self.client_pem {
            Some(p) => {
                let chain = CertificateDer::pem_slice_iter(&p.0)
                    .collect::<Result<Vec<_>, _>>()
                    .context("client certificate")?;
                let key = PrivateKeyDer::from_pem_slice(&p.1).context("client private key")?;
                builder.with_client_auth_cert(chain, key)?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(DataTls {
            config: Arc::new(config),
            roots_pem: Arc::new(to_pem(&roots)),
            client_pem: self.client_pem.clone(),
        })
    }
}
