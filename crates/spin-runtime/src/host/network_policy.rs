//! Operator limits on the outbound connections of an app, with Spin's runtime-config keys
//! and semantics (spinframework/spin, `crates/factor-outbound-networking`,
//! `factor-outbound-http`, `-redis`, `-pg`, `-mysql`, `-mqtt`: `src/runtime_config/spin.rs`):
//!
//! ```toml
//! [outbound_networking]
//! block_networks = ["10.0.0.0/8", "169.254.169.254/32", "private"]
//! max_total_connections = 100     # every outbound connection of the app, all kinds
//! max_socket_connections = 10     # guest wasi:sockets (this runtime grants guests none)
//!
//! [outbound_http]
//! max_connections = 10            # or the deprecated max_concurrent_requests = N (N + 1)
//! connection_pooling = false      # default true: keep-alive reuse (see outbound/http_pool.rs)
//!
//! [outbound_redis] / [outbound_pg] / [outbound_mysql]
//! max_connections = 10
//!
//! [outbound_mqtt]
//! max_connections = 10
//! max_payload_size_bytes = 65536
//! ```
//!
//! `block_networks` entries are CIDR networks (host bits are dropped, as Spin's
//! `IpNetwork::from_str_truncate` does) or `private`: every network that is not globally
//! routable (the `ip_network` crate's `is_global`, which Spin uses: loopback, RFC 1918,
//! link-local including 169.254.169.254, shared 100.64/10, unique-local fc00::/7, ...). An
//! IPv6 address that embeds an IPv4 one (`::ffff:a.b.c.d`, `::a.b.c.d`) is also checked as
//! that IPv4 address. Names are resolved once, the blocked addresses are dropped, and the
//! connection goes to one of the remaining (checked) addresses; TLS still verifies, and
//! sends as SNI, the host name. When every address is blocked the connection fails with the
//! interface's own error and the log names the address, the network and the key.
//!
//! Connection caps are semaphores shared by every component and instance of the app: a
//! connection holds a permit of its interface's cap (`max_connections`) and one of
//! `max_total_connections` while it is open; a new one waits for a permit, as in Spin.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use ip_network::IpNetwork;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::outbound::http_pool::HttpPool;

/// The runtime-config sections this module reads.
pub const SECTIONS: &[&str] = &[
    "outbound_networking",
    "outbound_http",
    "outbound_redis",
    "outbound_pg",
    "outbound_mysql",
    "outbound_mqtt",
];

/// The outbound-networking host feature: the `[outbound_networking]` and `[outbound_*]`
/// limits, one [`NetworkPolicy`] per app shared by every component and instance. It links no
/// guest interface: the outbound interfaces ask the instance's policy.
pub struct Network;

impl super::feature::HostFeature for Network {
    const SECTIONS: &'static [&'static str] = SECTIONS;
    type Config = PolicyConfig;
    type App = Arc<NetworkPolicy>;
    type Instance = Arc<NetworkPolicy>;

    fn parse(source: &super::runtime_config::Source<'_>) -> anyhow::Result<PolicyConfig> {
        let mut config = PolicyConfig::default();
        for section in SECTIONS {
            if let Some(value) = source.take(section) {
                parse_section(&mut config, section, value, source.origin())?;
            }
        }
        Ok(config)
    }

    fn build(
        config: &PolicyConfig,
        cx: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<Arc<NetworkPolicy>> {
        Ok(NetworkPolicy::for_app(&cx.host.app_dir, config))
    }

    fn instance(
        app: &Arc<NetworkPolicy>,
        _: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<Arc<NetworkPolicy>> {
        Ok(app.clone())
    }
}

/// The outbound interface a connection belongs to (its `[outbound_<kind>]` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Outbound HTTP (`wasi:http`, `fermyon:spin/http`).
    Http,
    /// Outbound Redis and Redis key-value stores.
    Redis,
    /// Outbound PostgreSQL.
    Pg,
    /// Outbound MySQL.
    Mysql,
    /// Outbound MQTT.
    Mqtt,
}

impl Kind {
    const ALL: [Kind; 5] = [Kind::Http, Kind::Redis, Kind::Pg, Kind::Mysql, Kind::Mqtt];

    fn index(self) -> usize {
        self as usize
    }

    /// The runtime-config section of this interface.
    pub fn section(self) -> &'static str {
        match self {
            Kind::Http => "outbound_http",
            Kind::Redis => "outbound_redis",
            Kind::Pg => "outbound_pg",
            Kind::Mysql => "outbound_mysql",
            Kind::Mqtt => "outbound_mqtt",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Http => "HTTP",
            Kind::Redis => "Redis",
            Kind::Pg => "PostgreSQL",
            Kind::Mysql => "MySQL",
            Kind::Mqtt => "MQTT",
        }
    }
}

/// The parsed limits of the runtime config's `[outbound_*]` sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    block_networks: Vec<IpNetwork>,
    block_private: bool,
    max_total_connections: Option<usize>,
    max_socket_connections: Option<usize>,
    /// `max_connections` of each [`Kind`], by [`Kind::index`].
    max_connections: [Option<usize>; 5],
    http_connection_pooling: Option<bool>,
    mqtt_max_payload_size_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkingToml {
    #[serde(default)]
    block_networks: Vec<String>,
    max_socket_connections: Option<usize>,
    max_total_connections: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpToml {
    connection_pooling: Option<bool>,
    max_connections: Option<usize>,
    max_concurrent_requests: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectionsToml {
    max_connections: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MqttToml {
    max_connections: Option<usize>,
    max_payload_size_bytes: Option<usize>,
}

const KEYS_HINT: &str = "see README's runtime config table for the keys of each \
    [outbound_*] section";

/// Reads `[section]` (one of [`SECTIONS`]) into `config`; errors name `origin`, the section
/// and what to write instead.
pub fn parse_section(
    config: &mut PolicyConfig,
    section: &str,
    value: &toml::Value,
    origin: &str,
) -> anyhow::Result<()> {
    fn read<T: serde::de::DeserializeOwned>(
        value: &toml::Value,
        section: &str,
        origin: &str,
    ) -> anyhow::Result<T> {
        value.clone().try_into().map_err(|e: toml::de::Error| {
            anyhow::anyhow!(
                "{origin}: [{section}]: {}; {KEYS_HINT}",
                e.message().trim_end()
            )
        })
    }
    let kind = Kind::ALL.into_iter().find(|k| k.section() == section);
    match (section, kind) {
        ("outbound_networking", _) => {
            let t: NetworkingToml = read(value, section, origin)?;
            for entry in &t.block_networks {
                if entry == "private" {
                    config.block_private = true;
                    continue;
                }
                let net = IpNetwork::from_str_truncate(entry).map_err(|e| {
                    anyhow::anyhow!(
                        "{origin}: [outbound_networking] block_networks: `{}` is not an IP \
                         network in CIDR notation ({e}) or the keyword `private`; write e.g. \
                         \"10.0.0.0/8\", \"169.254.169.254/32\" or \"private\"",
                        spin_app_format::untrusted::shown(entry)
                    )
                })?;
                config.block_networks.push(net);
            }
            config.max_socket_connections = t.max_socket_connections;
            config.max_total_connections = t.max_total_connections;
        }
        ("outbound_http", Some(kind)) => {
            let t: HttpToml = read(value, section, origin)?;
            config.max_connections[kind.index()] =
                match (t.max_connections, t.max_concurrent_requests) {
                    (Some(_), Some(_)) => anyhow::bail!(
                        "{origin}: [outbound_http] sets both `max_connections` and \
                         `max_concurrent_requests`; keep `max_connections` only"
                    ),
                    (Some(n), None) => Some(n),
                    (None, Some(n)) => {
                        tracing::warn!(
                            "{origin}: [outbound_http] `max_concurrent_requests` is deprecated; \
                             use `max_connections` (`max_concurrent_requests = {n}` allows \
                             {} connections, as in Spin)",
                            n.saturating_add(1)
                        );
                        Some(n.saturating_add(1))
                    }
                    (None, None) => None,
                };
            config.http_connection_pooling = t.connection_pooling;
        }
        ("outbound_mqtt", Some(kind)) => {
            let t: MqttToml = read(value, section, origin)?;
            config.max_connections[kind.index()] = t.max_connections;
            config.mqtt_max_payload_size_bytes = t.max_payload_size_bytes;
        }
        (_, Some(kind)) => {
            let t: ConnectionsToml = read(value, section, origin)?;
            config.max_connections[kind.index()] = t.max_connections;
        }
        (_, None) => anyhow::bail!("{origin}: [{section}] is not an outbound section"),
    }
    Ok(())
}

/// A refused or failed outbound connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Every address of the destination is in a blocked network.
    #[error("{0}")]
    Blocked(String),
    /// The name did not resolve.
    #[error("DNS lookup of {host} failed: {error}")]
    Dns {
        /// The host name.
        host: String,
        /// The resolver's error.
        error: std::io::Error,
    },
    /// No address accepted the connection.
    #[error("connecting to {host}:{port} failed: {error}")]
    Connect {
        /// The host name or address.
        host: String,
        /// The port.
        port: u16,
        /// The last error.
        error: std::io::Error,
    },
    /// The connect timeout passed.
    #[error("connecting to {host}:{port} timed out")]
    Timeout {
        /// The host name or address.
        host: String,
        /// The port.
        port: u16,
    },
}

/// The permits an open connection holds; dropping it frees them.
#[derive(Debug, Default)]
pub struct Permit {
    _kind: Option<OwnedSemaphorePermit>,
    _total: Option<OwnedSemaphorePermit>,
}

/// The limits of one app, with its connection semaphores (shared by every component and
/// instance of the app: see [`NetworkPolicy::for_app`]).
#[derive(Debug, Default)]
pub struct NetworkPolicy {
    config: PolicyConfig,
    total: Option<Arc<Semaphore>>,
    per_kind: [Option<Arc<Semaphore>>; 5],
    /// The app's idle outbound HTTP connections; `None` with `connection_pooling = false`
    /// (and in the default policy, which has no app).
    http_pool: Option<Arc<HttpPool>>,
}

impl NetworkPolicy {
    /// The policy of `config`, with fresh semaphores.
    pub fn new(config: PolicyConfig) -> Self {
        let sem = |n: Option<usize>| n.map(|n| Arc::new(Semaphore::new(n)));
        let per_kind = config.max_connections.map(sem);
        if let Some(total) = config.max_total_connections {
            for kind in Kind::ALL {
                if let Some(n) = config.max_connections[kind.index()].filter(|n| *n > total) {
                    tracing::warn!(
                        "[{}] max_connections ({n}) exceeds [outbound_networking] \
                         max_total_connections ({total}); the total is the effective cap",
                        kind.section()
                    );
                }
            }
        }
        NetworkPolicy {
            total: sem(config.max_total_connections),
            per_kind,
            http_pool: config
                .http_connection_pooling
                .unwrap_or(true)
                .then(Default::default),
            config,
        }
    }

    /// The app's outbound HTTP connection pool, unless `connection_pooling = false`.
    pub fn http_pool(&self) -> Option<&Arc<HttpPool>> {
        self.http_pool.as_ref()
    }

    /// Whether a new `kind` connection would wait for a permit now.
    pub fn would_wait(&self, kind: Kind) -> bool {
        [&self.per_kind[kind.index()], &self.total]
            .into_iter()
            .flatten()
            .any(|s| s.available_permits() == 0)
    }

    /// The policy of the app in `app_dir` with `config`: one per app and process, so that
    /// every component and instance shares the caps.
    pub fn for_app(app_dir: &std::path::Path, config: &PolicyConfig) -> Arc<Self> {
        type Registry = Mutex<HashMap<(PathBuf, String), Weak<NetworkPolicy>>>;
        static REGISTRY: OnceLock<Registry> = OnceLock::new();
        let key = (app_dir.to_path_buf(), format!("{config:?}"));
        let mut registry = REGISTRY
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        registry.retain(|_, w| w.strong_count() > 0);
        if let Some(p) = registry.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        let policy = Arc::new(NetworkPolicy::new(config.clone()));
        registry.insert(key, Arc::downgrade(&policy));
        policy
    }

    /// `[outbound_mqtt] max_payload_size_bytes`, if set.
    pub fn mqtt_max_payload_size_bytes(&self) -> Option<usize> {
        self.config.mqtt_max_payload_size_bytes
    }

    /// The blocked network `ip` is in (`private` or the CIDR as configured), if any.
    pub fn check(&self, ip: IpAddr) -> Option<String> {
        if self.config.block_private && !IpNetwork::from(ip).is_global() {
            return Some("private".into());
        }
        if let Some(net) = self.config.block_networks.iter().find(|n| n.contains(ip)) {
            return Some(net.to_string());
        }
        match ip {
            IpAddr::V6(v6) => v6.to_ipv4().and_then(|v4| self.check(IpAddr::V4(v4))),
            IpAddr::V4(_) => None,
        }
    }

    /// Whether any network is blocked.
    pub fn blocks_any(&self) -> bool {
        self.config.block_private || !self.config.block_networks.is_empty()
    }

    /// Resolves `host` (a name or an IP address) once and returns its addresses on `port`
    /// that are not blocked. When every one is blocked, the error (also logged) names the
    /// component, the address, the network and the runtime-config key.
    pub async fn resolve(
        &self,
        component: &str,
        kind: Kind,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, ConnectError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let mut addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|error| ConnectError::Dns {
                    host: host.to_string(),
                    error,
                })?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ConnectError::Dns {
                host: host.to_string(),
                error: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
            });
        }
        if !self.blocks_any() {
            return Ok(addrs);
        }
        let mut blocked = Vec::new();
        addrs.retain(|a| match self.check(a.ip()) {
            Some(net) => {
                blocked.push((a.ip(), net));
                false
            }
            None => true,
        });
        if addrs.is_empty() {
            let list = blocked
                .iter()
                .map(|(ip, net)| format!("{ip} (in {net})"))
                .collect::<Vec<_>>()
                .join(", ");
            let msg = format!(
                "component `{component}`: outbound {} connection to {host}:{port} refused: \
                 destination IP prohibited: {list} blocked by [outbound_networking] \
                 block_networks in the runtime config",
                kind.name()
            );
            tracing::error!("{msg}");
            return Err(ConnectError::Blocked(msg));
        }
        Ok(addrs)
    }

    /// Waits for a permit of `kind`'s cap, then of the total cap (Spin's order: never hold
    /// a total permit while waiting for an interface's).
    pub async fn acquire(&self, kind: Kind) -> Permit {
        async fn one(s: &Option<Arc<Semaphore>>) -> Option<OwnedSemaphorePermit> {
            // The semaphores are never closed.
            s.as_ref()?.clone().acquire_owned().await.ok()
        }
        let kind_permit = one(&self.per_kind[kind.index()]).await;
        let total = one(&self.total).await;
        Permit {
            _kind: kind_permit,
            _total: total,
        }
    }

    /// Connects to `host:port` for `component`: resolves once ([`Self::resolve`]), takes a
    /// permit ([`Self::acquire`]) and tries the allowed addresses in order, within
    /// `timeout` for all of them.
    pub async fn connect(
        &self,
        component: &str,
        kind: Kind,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<(tokio::net::TcpStream, Permit), ConnectError> {
        let addrs = self.resolve(component, kind, host, port).await?;
        let permit = self.acquire(kind).await;
        let attempt = async {
            let mut last = None;
            for addr in &addrs {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            Err(ConnectError::Connect {
                host: host.to_string(),
                port,
                error: last.unwrap_or_else(|| std::io::ErrorKind::NotFound.into()),
            })
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(stream)) => Ok((stream, permit)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ConnectError::Timeout {
                host: host.to_string(),
                port,
            }),
        }
    }
}

impl NetworkPolicy {
    /// The connection config that makes a Redis client of `who` resolve through this
    /// policy ([`RedisResolver`]).
    pub fn redis_config(self: &Arc<Self>, who: &str) -> redis::AsyncConnectionConfig {
        redis::AsyncConnectionConfig::new().set_dns_resolver(RedisResolver {
            policy: self.clone(),
            who: who.to_string(),
        })
    }
}

/// A Redis DNS resolver that drops blocked addresses (Spin's `SpinDnsResolver`): give it to
/// `redis::AsyncConnectionConfig::set_dns_resolver`, so the client connects only to checked
/// addresses of the one resolution.
pub struct RedisResolver {
    /// The app's policy.
    pub policy: Arc<NetworkPolicy>,
    /// The component (or store) that connects, for the log line.
    pub who: String,
}

impl redis::io::AsyncDNSResolver for RedisResolver {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        host: &'b str,
        port: u16,
    ) -> redis::RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let addrs = self
                .policy
                .resolve(&self.who, Kind::Redis, host, port)
                .await
                .map_err(|e| {
                    redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        e.to_string(),
                    ))
                })?;
            Ok(Box::new(addrs.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<PolicyConfig> {
        let doc: toml::Table = toml::from_str(text)?;
        let mut config = PolicyConfig::default();
        for (section, value) in &doc {
            parse_section(&mut config, section, value, "rc.toml")?;
        }
        Ok(config)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn block_networks_block_what_they_name_and_nothing_else() {
        let p = NetworkPolicy::new(
            parse(
                "[outbound_networking]\nblock_networks = [\"123.123.1.1/16\", \
                 \"2001::/96\", \"169.254.169.254/32\"]",
            )
            .unwrap(),
        );
        // Host bits are dropped, as Spin's from_str_truncate does.
        assert_eq!(
            p.check(ip("123.123.200.1")).as_deref(),
            Some("123.123.0.0/16")
        );
        assert!(p.check(ip("2001::1000")).is_some());
        assert!(p.check(ip("::ffff:123.123.123.123")).is_some());
        assert!(p.check(ip("169.254.169.254")).is_some());
        for ok in [
            "123.100.1.1",
            "2002::1",
            "169.254.169.253",
            "127.0.0.1",
            "10.0.0.1",
        ] {
            assert_eq!(p.check(ip(ok)), None, "{ok}");
        }
    }

    #[test]
    fn private_is_every_network_that_is_not_global() {
        let p = NetworkPolicy::new(
            parse("[outbound_networking]\nblock_networks = [\"private\"]").unwrap(),
        );
        for private in [
            "0.0.0.0",
            "10.10.10.10",
            "100.64.1.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "192.168.1.1",
            "::1",
            "::ffff:10.10.10.10",
            "fc00::f00d",
            "fe80::1",
        ] {
            assert_eq!(
                p.check(ip(private)).as_deref(),
                Some("private"),
                "{private}"
            );
        }
        for public in ["123.123.123.123", "8.8.8.8", "2600::beef"] {
            assert_eq!(p.check(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn keys_are_spins_and_bad_input_names_the_fix() {
        let c = parse(
            "[outbound_networking]\nmax_total_connections = 3\n[outbound_http]\n\
             max_concurrent_requests = 0\n[outbound_mqtt]\nmax_payload_size_bytes = 10\n\
             [outbound_pg]\nmax_connections = 2",
        )
        .unwrap();
        assert_eq!(c.max_total_connections, Some(3));
        // Spin's deprecated key: N allows N + 1.
        assert_eq!(c.max_connections[Kind::Http.index()], Some(1));
        assert_eq!(c.max_connections[Kind::Pg.index()], Some(2));
        assert_eq!(c.mqtt_max_payload_size_bytes, Some(10));
        // Pooling is Spin's default; `connection_pooling = false` turns it off.
        assert!(NetworkPolicy::new(c).http_pool().is_some());
        let off = parse("[outbound_http]\nconnection_pooling = false").unwrap();
        assert!(NetworkPolicy::new(off).http_pool().is_none());

        let e = parse("[outbound_networking]\nblock_networks = [\"10.0.0.1\"]").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("rc.toml") && e.contains("`10.0.0.1`"), "{e}");
        assert!(e.contains("CIDR") && e.contains("private"), "{e}");
        let e =
            parse("[outbound_http]\nmax_connections = 1\nmax_concurrent_requests = 1").unwrap_err();
        assert!(
            format!("{e}").contains("keep `max_connections` only"),
            "{e}"
        );
        let e = parse("[outbound_redis]\nmax_conections = 1").unwrap_err();
        let e = format!("{e}");
        assert!(
            e.contains("[outbound_redis]") && e.contains("max_conections"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_name_resolving_only_to_blocked_addresses_is_refused() {
        let p = NetworkPolicy::new(
            parse("[outbound_networking]\nblock_networks = [\"127.0.0.0/8\", \"::1/128\"]")
                .unwrap(),
        );
        let e = p
            .resolve("c", Kind::Http, "localhost", 80)
            .await
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("127.0.0.1 (in 127.0.0.0/8)"), "{e}");
        assert!(
            e.contains("block_networks") && e.contains("component `c`"),
            "{e}"
        );
        assert!(p.resolve("c", Kind::Http, "[::2]", 80).await.is_ok());
    }

    #[tokio::test]
    async fn caps_hold_one_permit_of_each_level() {
        let p = Arc::new(NetworkPolicy::new(
            parse("[outbound_networking]\nmax_total_connections = 2\n[outbound_pg]\nmax_connections = 1")
                .unwrap(),
        ));
        let available = |s: &Option<Arc<Semaphore>>| s.as_ref().unwrap().available_permits();
        let a = p.acquire(Kind::Pg).await;
        assert_eq!(available(&p.per_kind[Kind::Pg.index()]), 0);
        assert_eq!(available(&p.total), 1);
        // A Redis connection takes the other total permit; a second PostgreSQL one waits.
        let b = p.acquire(Kind::Redis).await;
        assert_eq!(available(&p.total), 0);
        let waiting = tokio::spawn({
            let p = p.clone();
            async move { p.acquire(Kind::Pg).await }
        });
        drop(a);
        drop(b);
        waiting.await.unwrap();
    }
}
