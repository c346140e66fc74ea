//! `allowed_outbound_hosts`: parsing the patterns and checking outbound URLs, with the
//! rules Spin documents.
//!
//! A pattern is `<scheme>://<host>[:<port>]` (a trailing `/` is accepted, a path is not):
//! - scheme: a name such as `https`, or `*` for any;
//! - host: a name or IP address (case-insensitive), `*` for any, `*.example.com` for any
//!   subdomain (not `example.com` itself), a CIDR range such as `10.0.0.0/8`, or `self`
//!   (`self.alt`) for requests to the app itself (relative URLs);
//! - port: a number, a range `8000..8010` (end excluded), `*` for any; when omitted, the
//!   scheme's well-known port (http 80, https 443, redis 6379, ...), and a scheme without
//!   one needs an explicit port.
//!
//! `{{ variable }}` templates are expanded with the app variables before parsing.
//!
//! Requests to the app itself leave through [`ChainSlot`]: service chaining
//! (`http://<component>.spin.internal/...`, [`chaining_target`]) goes in-process to the
//! serving app, a self request ([`is_self_request`]) to its own listener.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::{Arc, OnceLock, Weak};

use wasmtime_wasi_http::WasiBody;

/// The well-known port of a scheme, used when a pattern or a URL gives none.
pub fn well_known_port(scheme: &str) -> Option<u16> {
    Some(match scheme {
        "http" => 80,
        "https" => 443,
        "redis" | "rediss" => 6379,
        "mqtt" => 1883,
        "mqtts" => 8883,
        "postgres" => 5432,
        "mysql" => 3306,
        _ => return None,
    })
}

/// One parsed `allowed_outbound_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    original: String,
    scheme: Option<String>,
    host: HostPattern,
    ports: PortPattern,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    /// `*.example.com`, stored as `.example.com`.
    Subdomains(String),
    ToSelf,
    Name(String),
    Ip(IpAddr),
    Cidr(IpAddr, u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortPattern {
    Any,
    One(u16),
    Range(Range<u16>),
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

const FORMAT_HINT: &str = "entries of allowed_outbound_hosts have the form \
    <scheme>://<host>[:<port>], with `*` wildcards (e.g. \"https://*.example.com\", \
    \"http://127.0.0.1:8080\", \"*://*:*\" to allow everything)";

impl AllowedHost {
    /// Parses one entry (templates already expanded).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let original = entry.to_string();
        let text = entry.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!("`{text}` has no scheme; {FORMAT_HINT}"));
        };
        let scheme = if scheme == "*" {
            None
        } else if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphabetic()) {
            Some(scheme.to_ascii_lowercase())
        } else {
            return Err(format!(
                "`{text}`: scheme `{scheme}` must be letters only or `*`; {FORMAT_HINT}"
            ));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = split_host_port(rest)
            .ok_or_else(|| format!("`{text}`: malformed host or port; {FORMAT_HINT}"))?;
        let host = parse_host(host).map_err(|e| format!("`{text}`: {e}; {FORMAT_HINT}"))?;
        let ports = match port {
            None => {
                let default = scheme.as_deref().and_then(well_known_port).ok_or_else(|| {
                    format!(
                        "`{text}`: no port given and scheme `{}` has no well-known port: add \
                         `:<port>` or `:*`",
                        scheme.as_deref().unwrap_or("*")
                    )
                })?;
                PortPattern::One(default)
            }
            Some("*") => PortPattern::Any,
            Some(p) => parse_ports(p).map_err(|e| format!("`{text}`: {e}"))?,
        };
        Ok(AllowedHost {
            original,
            scheme,
            host,
            ports,
        })
    }

    /// Whether this entry allows `scheme://host:port` (`port` `None`: the scheme's default).
    /// `host` `None` means a relative URL (a request to the app itself).
    pub fn allows(&self, scheme: &str, host: Option<&str>, port: Option<u16>) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        let Some(host) = host else {
            return matches!(self.host, HostPattern::Any | HostPattern::ToSelf);
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let host_ok = match &self.host {
            HostPattern::Any => true,
            HostPattern::Subdomains(suffix) => host.ends_with(suffix.as_str()),
            HostPattern::ToSelf => false,
            HostPattern::Name(name) => &host == name,
            HostPattern::Ip(ip) => host.parse::<IpAddr>().is_ok_and(|h| &h == ip),
            HostPattern::Cidr(net, bits) => host
                .parse::<IpAddr>()
                .is_ok_and(|h| cidr_contains(*net, *bits, h)),
        };
        if !host_ok {
            return false;
        }
        let Some(port) = port.or_else(|| well_known_port(scheme)) else {
            return matches!(self.ports, PortPattern::Any);
        };
        match &self.ports {
            PortPattern::Any => true,
            PortPattern::One(p) => *p == port,
            PortPattern::Range(r) => r.contains(&port),
        }
    }
}

/// Splits `host[:port]`, with IPv6 addresses in brackets (`[::1]:8080`). CIDR ranges keep
/// their `/bits` in the host part.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(inner) = s.strip_prefix('[') {
        let (host, after) = inner.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match s.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address or network.
        Some((h, _)) if h.contains(':') => Some((s, None)),
        Some((h, p)) => Some((h, Some(p))),
        None => Some((s, None)),
    }
}

fn parse_host(host: &str) -> Result<HostPattern, String> {
    let host = host.trim().to_ascii_lowercase();
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if host == "*" {
        return Ok(HostPattern::Any);
    }
    if host == "self" || host == "self.alt" {
        return Ok(HostPattern::ToSelf);
    }
    if let Some((addr, bits)) = host.split_once('/') {
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("host `{host}` has a path; paths are not allowed"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits: u8 = bits
            .parse()
            .ok()
            .filter(|b| *b <= max)
            .ok_or_else(|| format!("CIDR range `{host}` needs a prefix length 0..={max}"))?;
        return Ok(HostPattern::Cidr(addr, bits));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostPattern::Ip(ip));
    }
    if let Some(domain) = host.strip_prefix("*.") {
        if domain.is_empty() || domain.contains('*') {
            return Err(format!(
                "host `{host}`: a wildcard may only stand for the leading subdomains"
            ));
        }
        return Ok(HostPattern::Subdomains(format!(".{domain}")));
    }
    if host.contains('*') {
        return Err(format!(
            "host `{host}`: a wildcard may only stand for the leading subdomains (`*.domain`)"
        ));
    }
    if host
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'))
    {
        return Err(format!("host `{host}` is not a valid host name"));
    }
    Ok(HostPattern::Name(host))
}

fn parse_ports(p: &str) -> Result<PortPattern, String> {
    let num = |s: &str| {
        s.parse::<u16>()
            .map_err(|_| format!("port `{s}` is not a number 0..=65535"))
    };
    if let Some((a, b)) = p.split_once("..") {
        let (a, b) = (num(a)?, num(b)?);
        if a >= b {
            return Err(format!("port range `{p}` is empty (the end is excluded)"));
        }
        return Ok(PortPattern::Range(a..b));
    }
    Ok(PortPattern::One(num(p)?))
}

fn cidr_contains(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            (u32::from(n) & mask) == (u32::from(i) & mask)
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            (u128::from(n) & mask) == (u128::from(i) & mask)
        }
        _ => false,
    }
}

/// `scheme://host[:port]` of a URL-like text, without user info, path, query or fragment,
/// for logs (those parts may carry tokens).
pub fn origin_only(text: &str) -> String {
    let text = text.trim();
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, text),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    match scheme {
        Some(s) => format!("{s}://{authority}"),
        None => authority.to_string(),
    }
}

/// A component's whole allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    entries: Vec<AllowedHost>,
}

impl AllowedHosts {
    /// Parses a component's `allowed_outbound_hosts`, expanding `{{ var }}` templates with
    /// `render` first. Errors name the component and the entry.
    pub fn parse(
        component_id: &str,
        entries: &[String],
        render: impl Fn(&str) -> Result<String, String>,
    ) -> anyhow::Result<Self> {
        if entries.len() == 1 && entries[0].trim() == "insecure:allow-all" {
            anyhow::bail!(
                "component `{component_id}`: allowed_outbound_hosts = [\"insecure:allow-all\"] \
                 is not supported; use \"*://*:*\" to allow all outbound traffic"
            );
        }
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let expanded = render(entry).map_err(|e| {
                anyhow::anyhow!("component `{component_id}` allowed_outbound_hosts: {e}")
            })?;
            let parsed = AllowedHost::parse(&expanded).map_err(|e| {
                let shown = origin_only(entry);
                if entry.contains("{{") {
                    // The expanded value may hold a secret: name the entry as written.
                    anyhow::anyhow!(
                        "component `{component_id}` allowed_outbound_hosts: `{shown}` does not \
                         expand to a valid entry (the expanded value is not shown); \
                         {FORMAT_HINT}"
                    )
                } else {
                    let e = e.replace(entry.trim(), &shown);
                    anyhow::anyhow!("component `{component_id}` allowed_outbound_hosts: {e}")
                }
            })?;
            out.push(parsed);
        }
        Ok(AllowedHosts { entries: out })
    }

    /// Whether any entry allows `uri`. A URI without an authority is a request to the
    /// app itself; a URI without a scheme is taken as `http`.
    pub fn allows_uri(&self, uri: &http::Uri) -> bool {
        let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
        let host = uri.host();
        let port = uri.port_u16();
        self.entries
            .iter()
            .any(|e| e.allows(&scheme, host.filter(|h| !h.is_empty()), port))
    }

    /// The entries as written (after template expansion).
    pub fn entries(&self) -> &[AllowedHost] {
        &self.entries
    }
}

/// Parses an outbound (non-HTTP) address the way Spin's `OutboundUrl::parse` does, into
/// (scheme, host, port): a userinfo part is percent-encoded first (passwords may hold any
/// character), and an address that is not a URL with a host is retried with
/// `{default_scheme}://` in front (so `127.0.0.1:6379` is `redis://127.0.0.1:6379`).
pub fn parse_outbound_url(
    address: &str,
    default_scheme: &str,
) -> Option<(String, String, Option<u16>)> {
    let address = encode_userinfo(address);
    let parsed = match url::Url::parse(&address) {
        Ok(u) if u.has_host() => u,
        _ => url::Url::parse(&format!("{default_scheme}://{address}")).ok()?,
    };
    let host = parsed.host_str()?.to_string();
    Some((parsed.scheme().to_string(), host, parsed.port()))
}

/// Percent-encodes the userinfo (`user:password@`) of `address`, as Spin does before
/// parsing it.
fn encode_userinfo(address: &str) -> String {
    let Some(at) = address.find('@') else {
        return address.to_string();
    };
    let start = address.find("://").map(|e| e + 3).unwrap_or(0);
    let path = address[start..]
        .find('/')
        .map(|p| p + start)
        .unwrap_or(usize::MAX);
    if at < start || at >= path {
        return address.to_string();
    }
    let mut out = address[..start].to_string();
    for b in address[start..at].bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push_str(&address[at..]);
    out
}

pub mod http_pool;

/// The future that drives an outbound HTTP connection until it closes.
pub type ConnectionTask =
    Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>;

/// Sends an outbound HTTP request of `component` (HTTP/1.1; over TLS with `tls`) under the
/// app's `policy` ([`super::network_policy`]): the host is resolved once, blocked addresses
/// are dropped (all blocked: `DestinationIpProhibited`, as Spin), the connection waits for a
/// permit of `[outbound_http] max_connections` and `max_total_connections` and holds it
/// until it closes, and TLS verifies the host name. The request options' connect,
/// first-byte and between-bytes timeouts apply (default 600 s each, as wasmtime-wasi-http).
/// With the policy's connection pool ([`http_pool`]), an idle connection of the same
/// component, origin and TLS config is reused (it was checked when it was made), and the
/// connection goes back to the pool when the response body was read to its end.
pub async fn send_http(
    policy: &super::network_policy::NetworkPolicy,
    component: &str,
    mut req: http::Request<wasmtime_wasi_http::WasiBody>,
    options: Option<wasmtime_wasi_http::RequestOptions>,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Result<(http::Response<wasmtime_wasi_http::WasiBody>, ConnectionTask), wasmtime_wasi_http::Error>
{
    use super::network_policy::{ConnectError, Kind};
    use std::time::Duration;
    use wasmtime_wasi_http::Error;

    let uri = req.uri().clone();
    let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?.to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let option = |f: fn(&wasmtime_wasi_http::RequestOptions) -> Option<Duration>| {
        options
            .as_ref()
            .and_then(f)
            .unwrap_or(Duration::from_secs(600))
    };
    let connect_timeout = option(|o| o.connect_timeout);
    let first_byte_timeout = option(|o| o.first_byte_timeout);
    let between_bytes_timeout = option(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));
    *req.uri_mut() = http::Uri::builder()
        .path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let respond = |resp: http::Response<hyper::body::Incoming>,
                   reuse: Option<http_pool::Pooled>| {
        resp.map(|incoming| {
            use http_body_util::BodyExt as _;
            BetweenBytes {
                incoming,
                timeout: between_bytes_timeout,
                deadline: Box::pin(tokio::time::sleep(between_bytes_timeout)),
                reuse,
            }
            .boxed_unsync()
        })
    };

    let pool = policy.http_pool();
    let key = http_pool::Key::new(component, &host, port, tls.as_ref());
    if let Some(pool) = pool {
        // Idle connections first; one that closed meanwhile gives the request back.
        while let Some(mut sender) = pool.take(&key) {
            if !matches!(
                tokio::time::timeout(connect_timeout, sender.ready()).await,
                Ok(Ok(()))
            ) {
                continue;
            }
            let sent = tokio::time::timeout(first_byte_timeout, sender.try_send_request(req))
                .await
                .map_err(|_| Error::ConnectionReadTimeout)?;
            match sent {
                Ok(resp) => {
                    let reuse = http_pool::Pooled::new(pool, key, sender, tls);
                    return Ok((respond(resp, Some(reuse)), Box::new(async { Ok(()) })));
                }
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(Error::Hyper(e.into_error())),
                },
            }
        }
        if policy.would_wait(Kind::Http) {
            pool.evict_oldest();
        }
    }

    let (tcp, permit) = policy
        .connect(component, Kind::Http, &host, port, connect_timeout)
        .await
        .map_err(|e| match e {
            ConnectError::Blocked(_) => Error::DestinationIpProhibited,
            ConnectError::Dns { .. } => Error::DnsError {
                rcode: Some("address not available".into()),
                info_code: Some(0),
            },
            ConnectError::Connect { error, .. } => Error::Connect(error),
            ConnectError::Timeout { .. } => Error::ConnectionTimeout,
        })?;
    let io: Box<dyn Io> = match &tls {
        None => Box::new(tcp),
        Some(config) => {
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(Error::InvalidDnsNameError)?;
            Box::new(
                tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| {
                        tracing::warn!(
                            "outbound HTTPS to {host}:{port}: TLS handshake failed: {e} (a \
                             server signed by a private CA is trusted through SSL_CERT_FILE / \
                             SSL_CERT_DIR or a [[client_tls]] ca_roots_file in the runtime \
                             config)"
                        );
                        Error::Tls(e)
                    })?,
            )
        }
    };
    let (mut sender, conn) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)?
    .map_err(Error::Hyper)?;
    let conn = tokio::spawn(async move {
        let r = conn.await;
        drop(permit);
        r
    });
    let resp = tokio::time::timeout(first_byte_timeout, sender.send_request(req))
        .await
        .map_err(|_| Error::ConnectionReadTimeout)?
        .map_err(Error::Hyper)?;
    if let Some(pool) = pool {
        // The connection outlives this request: its task is the pool's, not the guest's.
        let reuse = http_pool::Pooled::new(pool, key, sender, tls);
        return Ok((respond(resp, Some(reuse)), Box::new(async { Ok(()) })));
    }
    Ok((
        respond(resp, None),
        Box::new(async move {
            match conn.await {
                Ok(r) => r.map_err(Error::Hyper),
                Err(_) => Err(Error::ConnectionTerminated),
            }
        }),
    ))
}

/// A plain or TLS stream of an outbound HTTP connection.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// A response body that fails with `ConnectionReadTimeout` when no frame comes within the
/// request's between-bytes timeout. A pooled connection (`reuse`) goes back to its pool when
/// the body ends.
struct BetweenBytes {
    incoming: hyper::body::Incoming,
    timeout: std::time::Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    reuse: Option<http_pool::Pooled>,
}

impl Drop for BetweenBytes {
    fn drop(&mut self) {
        // A body with nothing (more) to read, dropped unread: the connection is idle.
        if hyper::body::Body::is_end_stream(&self.incoming) {
            if let Some(reuse) = self.reuse.take() {
                reuse.release();
            }
        }
    }
}

impl hyper::body::Body for BetweenBytes {
    type Data = bytes::Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::future::Future as _;
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = tokio::time::Instant::now() + self.timeout;
                self.deadline.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.reuse = None;
                Poll::Ready(Some(Err(wasmtime_wasi_http::Error::Hyper(e))))
            }
            Poll::Ready(None) => {
                if let Some(reuse) = self.reuse.take() {
                    reuse.release();
                }
                Poll::Ready(None)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.reuse = None;
                    Poll::Ready(Some(Err(wasmtime_wasi_http::Error::ConnectionReadTimeout)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}

/// Whether a request URL addresses the app itself: no host (wasmtime-wasi-http gives a
/// relative URL an empty host) or host `self.alt`.
pub fn is_self_request(uri: &http::Uri) -> bool {
    match uri.authority() {
        None => true,
        Some(a) => a.host().is_empty() || a.host().eq_ignore_ascii_case("self.alt"),
    }
}

/// The service-chaining domain.
pub const SERVICE_CHAINING_DOMAIN: &str = "spin.internal";

/// The component a URL chains to: `<id>` of host `<id>.spin.internal` (any port).
pub fn chaining_target(uri: &http::Uri) -> Option<String> {
    let host = uri.authority().map(|a| a.host().trim())?;
    let (first, rest) = host.split_once('.')?;
    (rest.eq_ignore_ascii_case(SERVICE_CHAINING_DOMAIN) && !first.is_empty())
        .then(|| first.to_string())
}

/// The answer to a service-chaining request: the callee's response, or why there is none.
pub type ChainedResponse<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<http::Response<WasiBody>, wasmtime_wasi_http::Error>,
            > + Send
            + 'a,
    >,
>;

/// The app as its components' service-chaining requests reach it, in-process: the HTTP
/// server's loaded app, bound to a [`ChainSlot`] when it starts serving.
pub trait LocalApp: Send + Sync {
    /// Sends `req` (its chaining host and transport headers already removed) to this app's
    /// HTTP component `target`, private routes included.
    fn call_component<'a>(
        &'a self,
        target: &'a str,
        req: http::Request<WasiBody>,
    ) -> ChainedResponse<'a>;
}

/// Where an app's components send requests to their own app: the serving app (for
/// service chaining) and its listener (for self requests), set when the app starts serving.
#[derive(Default)]
pub struct ChainSlot {
    app: OnceLock<Weak<dyn LocalApp>>,
    origin: OnceLock<SocketAddr>,
}

impl fmt::Debug for ChainSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainSlot")
            .field("serving", &self.app.get().is_some())
            .field("origin", &self.origin.get())
            .finish()
    }
}

impl ChainSlot {
    /// Binds the slot to the serving app and its listen address (first call wins).
    pub fn bind<A: LocalApp + 'static>(&self, app: &Arc<A>, origin: SocketAddr) {
        let app: Weak<A> = Arc::downgrade(app);
        let app: Weak<dyn LocalApp> = app;
        let _ = self.app.set(app);
        let _ = self.origin.set(origin);
    }

    /// The app's listen address, once serving.
    pub fn origin(&self) -> Option<SocketAddr> {
        self.origin.get().copied()
    }

    /// Rewrites a self request to the app's own listener (`http://<listen addr><path>`,
    /// no `Host` header, as Spin does), or fails when the app is not serving.
    pub fn to_self(
        &self,
        req: &mut http::Request<WasiBody>,
    ) -> Result<(), wasmtime_wasi_http::Error> {
        let Some(origin) = self.origin() else {
            tracing::error!("outbound request to a relative URL, but the app has no HTTP listener");
            return Err(wasmtime_wasi_http::Error::HttpRequestUriInvalid);
        };
        let paq = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        *req.uri_mut() = format!("http://{origin}{paq}")
            .parse()
            .map_err(|_| wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
        req.headers_mut().remove(http::header::HOST);
        Ok(())
    }

    /// Sends a service-chaining request to component `target` in-process.
    pub async fn call(
        &self,
        target: &str,
        mut req: http::Request<WasiBody>,
    ) -> Result<http::Response<WasiBody>, wasmtime_wasi_http::Error> {
        let Some(app) = self.app.get().and_then(Weak::upgrade) else {
            tracing::error!(
                target,
                "service chaining request, but the app is not serving"
            );
            return Err(wasmtime_wasi_http::Error::InternalError(Some(
                "service chaining: the app is not serving".into(),
            )));
        };
        // As Spin's `strip_forbidden_headers`: the chaining host and transport headers are
        // not the callee's business.
        let headers = req.headers_mut();
        if headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|h| {
                chaining_target(&format!("http://{h}/").parse().unwrap_or_default()).is_some()
            })
        {
            headers.remove(http::header::HOST);
        }
        headers.remove(http::header::CONNECTION);
        app.call_component(target, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbound_urls_parse_as_spin_parses_them() {
        let p = |a: &str, s: &str| parse_outbound_url(a, s);
        assert_eq!(
            p("redis://127.0.0.1:6379", "redis"),
            Some(("redis".into(), "127.0.0.1".into(), Some(6379)))
        );
        assert_eq!(
            p("127.0.0.1:6380", "redis"),
            Some(("redis".into(), "127.0.0.1".into(), Some(6380)))
        );
        assert_eq!(
            p("localhost:5432", "postgres"),
            Some(("postgres".into(), "localhost".into(), Some(5432)))
        );
        assert_eq!(
            p("mysql://user:p%w@rd@db.example.com:3306/app", "mysql"),
            Some(("mysql".into(), "db.example.com".into(), Some(3306)))
        );
        assert_eq!(
            p("mqtt://[::1]:1883?client_id=x", "mqtt"),
            Some(("mqtt".into(), "[::1]".into(), Some(1883)))
        );
        assert_eq!(
            p("redis://host", "redis"),
            Some(("redis".into(), "host".into(), None))
        );
    }

    #[test]
    fn chaining_hosts_as_spin_parses_them() {
        let t = |u: &str| chaining_target(&u.parse().unwrap());
        assert_eq!(t("http://back.spin.internal/x"), Some("back".into()));
        assert_eq!(t("http://back.spin.internal:8080/"), Some("back".into()));
        assert_eq!(t("http://back.spin.internal.example.com/"), None);
        assert_eq!(t("http://spin.internal/"), None);
        assert_eq!(t("/relative"), None);
        assert!(is_self_request(&"/relative".parse().unwrap()));
        assert!(is_self_request(&"http://self.alt/x".parse().unwrap()));
        assert!(!is_self_request(&"http://example.com/x".parse().unwrap()));
    }

    #[test]
    fn outbound_checks_use_the_schemes_default_port() {
        let hosts =
            AllowedHosts::parse("c", &["redis://127.0.0.1".into()], |e| Ok(e.into())).unwrap();
        let allow = |a: &str| {
            let (s, h, p) = parse_outbound_url(a, "redis").unwrap();
            hosts.entries().iter().any(|e| e.allows(&s, Some(&h), p))
        };
        assert!(allow("redis://127.0.0.1"));
        assert!(allow("redis://127.0.0.1:6379"));
        assert!(allow("127.0.0.1:6379"));
        assert!(!allow("redis://127.0.0.1:6380"));
        assert!(!allow("rediss://127.0.0.1:6379"));
        assert!(!allow("redis://127.0.0.2"));
    }
}
