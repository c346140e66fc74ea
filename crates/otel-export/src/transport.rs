//! How exporters reach the collector: the export runtime, an HTTP/1.1 client with rustls for
//! OTLP/HTTP, and the TLS settings of gRPC channels.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full, Limited};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::{OtlpConfig, Tls};

/// gRPC metadata from the configured headers.
pub(crate) fn grpc_metadata(config: &OtlpConfig) -> anyhow::Result<tonic::metadata::MetadataMap> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (k, v) in &config.headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .with_context(|| format!("OTLP header name {k:?} is not valid gRPC metadata"))?;
        let value = v
            .parse()
            .with_context(|| format!("OTLP header {k:?} has a value that is not ASCII"))?;
        metadata.insert(key, value);
    }
    Ok(metadata)
}

/// Collector answers wait at most this long (the SDK's default export timeout).
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP/HTTP client for `config` (rustls for `https://`).
pub(crate) fn http_client(
    config: &OtlpConfig,
    handle: &tokio::runtime::Handle,
) -> anyhow::Result<OtlpHttpClient> {
    let tls = config.tls.as_ref().map(rustls_config).transpose()?;
    Ok(OtlpHttpClient {
        tls,
        handle: handle.clone(),
        timeout: EXPORT_TIMEOUT,
    })
}

/// The exporters' own runtime: tonic and hyper need a reactor, and the SDK's batch and
/// periodic threads have none.
pub(crate) fn export_runtime() -> anyhow::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otel-export")
        .enable_all()
        .build()
        .context("cannot start the OpenTelemetry export runtime")?;
    Ok(RT.get_or_init(|| rt))
}

/// Polls a future with the export runtime entered, so that the tonic exporters' timers and
/// channels work when the SDK drives them from its own threads.
pub(crate) struct Entered<F> {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) fut: F,
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is never moved out of the pinned `Entered`.
        let this = unsafe { self.get_unchecked_mut() };
        let _guard = this.handle.enter();
        unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx)
    }
}

fn read_pem(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn certs(path: &std::path::Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = read_pem(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} is not a PEM certificate file", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// The rustls client configuration for `tls` (ring, Mozilla roots plus the CA file).
pub(crate) fn rustls_config(tls: &Tls) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(ca) = &tls.ca {
        for cert in certs(ca)? {
            roots
                .add(cert)
                .with_context(|| format!("{}: a certificate is not a valid CA", ca.display()))?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .context("TLS setup")?
    .with_root_certificates(roots);
    let config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let pem = read_pem(key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&pem)
                .with_context(|| format!("{} holds no PEM private key", key.display()))?;
            builder
                .with_client_auth_cert(certs(cert)?, key_der)
                .context("the OTLP client certificate and key do not match")?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The tonic TLS settings for `tls`.
pub(crate) fn tonic_tls(tls: &Tls) -> anyhow::Result<tonic::transport::ClientTlsConfig> {
    let mut config = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
    if let Some(ca) = &tls.ca {
        certs(ca)?;
        config = config.ca_certificate(tonic::transport::Certificate::from_pem(read_pem(ca)?));
    }
    if let (Some(cert), Some(key)) = (&tls.client_cert, &tls.client_key) {
        config = config.identity(tonic::transport::Identity::from_pem(
            read_pem(cert)?,
            read_pem(key)?,
        ));
    }
    Ok(config)
}

/// Largest collector response read (the SDK's own clients use the same cap).
const MAX_RESPONSE: usize = 4 << 20;

/// OTLP/HTTP client: one HTTP/1.1 connection per export (batches are seconds apart), over
/// rustls for `https://`, run on the export runtime so any thread may call it.
#[derive(Debug, Clone)]
pub(crate) struct OtlpHttpClient {
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) timeout: Duration,
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (tls, timeout) = (self.tls.clone(), self.timeout);
        let task = self.handle.spawn(async move {
            match tokio::time::timeout(timeout, send(tls, request)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer from the collector within {timeout:?}").into()),
            }
        });
        task.await?
    }
}

async fn send(
    tls: Option<Arc<rustls::ClientConfig>>,
    mut request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri().clone();
    let host = uri
        .host()
        .ok_or("the OTLP endpoint has no host")?
        .to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.clone());
    *request.uri_mut() = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse()?;
    request
        .headers_mut()
        .insert(http::header::HOST, authority.parse()?);
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    tcp.set_nodelay(true)?;
    if https {
        let config = tls.ok_or("https endpoint without TLS settings")?;
        let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        exchange(stream, request).await
    } else {
        exchange(tcp, request).await
    }
}

async fn exchange<S>(stream: S, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let response = sender.send_request(request.map(Full::new)).await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| format!("reading the collector's answer: {e}"))?
        .to_bytes();
    drop(sender);
    conn.abort();
    Ok(Response::from_parts(parts, body))
}
