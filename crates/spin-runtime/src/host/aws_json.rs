//! A client for AWS's JSON protocol (`POST /` with `x-amz-target: <prefix>.<Action>` and a
//! JSON body, signed with SigV4 by the `aws-sigv4` crate): what the DynamoDB key-value store
//! speaks; and [`send`], the one-request HTTP(S) transport it and the Cosmos DB store use.
//! HTTPS is verified with the platform's trust store ([`super::tls::trust_store`]).

use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::Value;

/// Bound on connecting, the TLS handshake, and each exchange.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest reply read.
const MAX_REPLY: usize = 16 << 20;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No answer: connection, TLS, timeout, or a reply that is not the service's JSON.
    #[error("{0:#}")]
    Transport(anyhow::Error),
    /// The service answered with an error (`__type`, e.g. `ResourceNotFoundException`).
    #[error("HTTP {status}: {kind}: {message}")]
    Service {
        /// The HTTP status.
        status: u16,
        /// The error type without its namespace.
        kind: String,
        /// The service's message.
        message: String,
    },
}

impl AwsError {
    /// Whether the service answered with error type `kind`.
    pub fn is(&self, kind: &str) -> bool {
        matches!(self, AwsError::Service { kind: k, .. } if k == kind)
    }
}

/// Static credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
#[derive(Clone)]
pub struct AwsCredentials {
    /// The access key id.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
    /// The session token of temporary credentials.
    pub token: Option<String>,
}

/// One AWS service endpoint called as one identity.
pub struct AwsJsonClient {
    endpoint: http::Uri,
    region: String,
    service: &'static str,
    target_prefix: &'static str,
    identity: aws_smithy_runtime_api::client::identity::Identity,
}

impl std::fmt::Debug for AwsJsonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Credentials left out.
        f.debug_struct("AwsJsonClient")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish()
    }
}

impl AwsJsonClient {
    /// A client of `service` (signing name, e.g. `dynamodb`) at `endpoint` (an http:// or
    /// https:// URL); `target_prefix` starts each `x-amz-target` (e.g. `DynamoDB_20120810`).
    pub fn new(
        endpoint: &str,
        region: &str,
        service: &'static str,
        target_prefix: &'static str,
        credentials: AwsCredentials,
    ) -> anyhow::Result<Self> {
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|e| anyhow!("`{endpoint}` is not a URL such as https://host[:port]: {e}"))?;
        check_endpoint(&uri)?;
        let identity = aws_credential_types::Credentials::new(
            credentials.access_key,
            credentials.secret_key,
            credentials.token,
            None,
            "runtime-config",
        )
        .into();
        Ok(AwsJsonClient {
            endpoint: uri,
            region: region.to_string(),
            service,
            target_prefix,
            identity,
        })
    }

    /// The signed request of `action` with `body`.
    fn request(&self, action: &str, body: Vec<u8>) -> anyhow::Result<http::Request<Full<Bytes>>> {
        let authority = self.endpoint.authority().map(|a| a.as_str()).unwrap_or("");
        let mut request = http::Request::builder()
            .method("POST")
            .uri(&self.endpoint)
            .header("host", authority)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("{}.{action}", self.target_prefix))
            .body(())?;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name(self.service)
            .time(SystemTime::now())
            .settings(aws_sigv4::http_request::SigningSettings::default())
            .build()?
            .into();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
            .collect();
        let signable = aws_sigv4::http_request::SignableRequest::new(
            "POST",
            self.endpoint.to_string(),
            headers.into_iter(),
            aws_sigv4::http_request::SignableBody::Bytes(&body),
        )?;
        let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
            .context("cannot sign the request")?
            .into_parts();
        instructions.apply_to_request_http1x(&mut request);
        let path = self.endpoint.path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = http::Uri::builder().path_and_query(path).build()?;
        Ok(request.map(|()| Full::new(Bytes::from(body))))
    }

    /// Calls `action` with `body`; the reply's JSON, or the service's error.
    pub async fn call(&self, action: &str, body: &Value) -> Result<Value, AwsError> {
        let request = serde_json::to_vec(body)
            .map_err(anyhow::Error::from)
            .and_then(|b| self.request(action, b))
            .map_err(AwsError::Transport)?;
        let reply = send(&self.endpoint, request)
            .await
            .map_err(AwsError::Transport)?;
        let (status, bytes) = (reply.status(), reply.into_body());
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                AwsError::Transport(anyhow!(
                    "HTTP {status}: the reply is not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                ))
            })?
        };
        if status.is_success() {
            return Ok(value);
        }
        let field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or("");
        let kind = field("__type");
        Err(AwsError::Service {
            status: status.as_u16(),
            kind: kind.rsplit('#').next().unwrap_or(kind).to_string(),
            message: match field("message") {
                "" => field("Message").to_string(),
                m => m.to_string(),
            },
        })
    }
}

/// Checks that `endpoint` is an http:// or https:// URL with a host.
pub fn check_endpoint(endpoint: &http::Uri) -> anyhow::Result<()> {
    if !matches!(endpoint.scheme_str(), Some("https" | "http")) {
        bail!("`{endpoint}`: use an http:// or https:// URL");
    }
    if endpoint.host().is_none() {
        bail!("`{endpoint}` has no host");
    }
    Ok(())
}

/// Sends `request` to `endpoint` (checked by [`check_endpoint`]) over a new connection, TLS
/// for https:// (verified with the platform's trust store): the one place these clients
/// connect. The reply's status, headers and body (at most [`MAX_REPLY`] bytes).
pub async fn send(
    endpoint: &http::Uri,
    request: http::Request<Full<Bytes>>,
) -> anyhow::Result<http::Response<Bytes>> {
    let tls = endpoint.scheme_str() == Some("https");
    let host = endpoint.host().unwrap_or_default();
    let port = endpoint.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::time::timeout(IO_TIMEOUT, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| anyhow!("no connection to {host}:{port} within {IO_TIMEOUT:?}"))?
        .with_context(|| format!("cannot connect to {host}:{port}"))?;
    if !tls {
        return exchange(tcp, request).await;
    }
    let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
    let config = super::tls::trust_store().data.config.clone();
    let stream = tokio::time::timeout(
        IO_TIMEOUT,
        tokio_rustls::TlsConnector::from(config).connect(name, tcp),
    )
    .await
    .map_err(|_| anyhow!("no TLS handshake with {host} within {IO_TIMEOUT:?}"))?
    .context("TLS handshake (verified with the platform's trust store)")?;
    exchange(stream, request).await
}

/// One HTTP/1.1 exchange over `io`, bounded by [`IO_TIMEOUT`].
async fn exchange<S>(
    io: S,
    request: http::Request<Full<Bytes>>,
) -> anyhow::Result<http::Response<Bytes>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    let conn = tokio::spawn(conn);
    let result = tokio::time::timeout(IO_TIMEOUT, async {
        let (head, body) = sender.send_request(request).await?.into_parts();
        let body = http_body_util::Limited::new(body, MAX_REPLY)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the reply: {e}"))?
            .to_bytes();
        anyhow::Ok(http::Response::from_parts(head, body))
    })
    .await
    .map_err(|_| anyhow!("no reply within {IO_TIMEOUT:?}"));
    conn.abort();
    result?
}
