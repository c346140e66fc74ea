//! Outbound Redis: `fermyon:spin/redis@2.0.0` on the `redis` crate, as Spin implements it.
//!
//! `open` is allowed only to addresses in the component's `allowed_outbound_hosts`
//! (`redis://host:port`; an address without a scheme is taken as `redis://`); a denied
//! address is `invalid-address`, as in Spin, and the log names the entry to add. Unix
//! sockets (`redis+unix://`, `unix://`) are refused. `rediss://` connects over TLS,
//! verified with the component's `[[client_tls]]` entry for the host or the default trust
//! store (see [`super::tls`]); the allow-list entry names `rediss://host:port`.
//!
//! Also `spin:redis/redis@3.0.0` (Spin 4), on the same connections; Spin 1.x's unversioned
//! form is [`crate::spin1`]'s.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, FromRedisValue, Value};
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::redis as v2;
use super::connections::{Connections, OutboundInterface};
use super::{ComponentHost, HostView};
use v2::{Error, RedisParameter, RedisResult};

/// The outbound Redis host feature: `fermyon:spin/redis@2.0.0` and `spin:redis/redis@3.0.0`,
/// implemented on [`ComponentRedis`].
pub struct OutboundRedis;

/// One instance's outbound Redis.
pub type ComponentRedis = Connections<OutboundRedis>;

impl OutboundInterface for OutboundRedis {
    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentRedis,
    ) -> anyhow::Result<()> {
        v2::add_to_linker::<_, wasmtime::component::HasSelf<ComponentRedis>>(linker, get)?;
        add_spin4_to_linker(linker)
    }
}

/// A guest's open connection (the resource behind `connection`).
pub struct RedisConnection {
    conn: MultiplexedConnection,
    /// The app's connection-cap permits, held while the connection is open.
    _permit: super::network_policy::Permit,
}

fn other(e: impl std::fmt::Display) -> Error {
    Error::Other(e.to_string())
}

impl ComponentRedis {
    fn redis(
        &mut self,
        connection: &Resource<RedisConnection>,
    ) -> Result<MultiplexedConnection, Error> {
        // A multiplexed connection is a cheap handle on one shared socket.
        self.table()
            .get(connection)
            .map(|c| c.conn.clone())
            .map_err(|_| Error::Other("could not find connection for resource".into()))
    }

    /// Adds a connection to the guest's handles, unless too many are open.
    fn push(&mut self, conn: RedisConnection) -> Result<Resource<RedisConnection>, Error> {
        self.push_connection(conn)
            .map_err(|_| Error::TooManyConnections)
    }
}

/// The guest's connection, or the call's `Err` result.
macro_rules! connection {
    ($state:expr, $resource:expr) => {
        match $state.redis(&$resource) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        }
    };
}

impl v2::Host for ComponentRedis {}

impl v2::HostConnection for ComponentRedis {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<RedisConnection>, Error>> {
        let target = (self.redis_client(&address), self.outbound().clone());
        let conn = match connect(target).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self.push(conn))
    }

    async fn publish(
        &mut self,
        connection: Resource<RedisConnection>,
        channel: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn
            .publish::<_, _, ()>(&channel, &payload)
            .await
            .map_err(other))
    }

    async fn get(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.get::<_, Option<Vec<u8>>>(&key).await.map_err(other))
    }

    async fn set(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.set::<_, _, ()>(&key, &value).await.map_err(other))
    }

    async fn incr(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<i64, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.incr::<_, _, i64>(&key, 1).await.map_err(other))
    }

    async fn del(
        &mut self,
        connection: Resource<RedisConnection>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<u32, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.del::<_, u32>(&keys).await.map_err(other))
    }

    async fn sadd(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn
            .sadd::<_, _, u32>(&key, &values)
            .await
            .map_err(type_error_or_other))
    }

    async fn smembers(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Vec<String>, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.smembers::<_, Vec<String>>(&key).await.map_err(other))
    }

    async fn srem(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, Error>> {
        let mut conn = connection!(self, connection);
        Ok(conn.srem::<_, _, u32>(&key, &values).await.map_err(other))
    }

    async fn execute(
        &mut self,
        connection: Resource<RedisConnection>,
        command: String,
        arguments: Vec<RedisParameter>,
    ) -> wasmtime::Result<Result<Vec<RedisResult>, Error>> {
        let mut conn = connection!(self, connection);
        Ok(execute(&mut conn, &command, &arguments).await)
    }

    async fn drop(&mut self, connection: Resource<RedisConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

/// Runs `command` with `arguments`; the reply flattened into Spin's result list, at most
/// [`super::sqlite::MAX_RESULT_BYTES`] of it.
async fn execute(
    conn: &mut MultiplexedConnection,
    command: &str,
    arguments: &[RedisParameter],
) -> Result<Vec<RedisResult>, Error> {
    let mut cmd = redis::cmd(command);
    for arg in arguments {
        match arg {
            RedisParameter::Int64(v) => cmd.arg(v),
            RedisParameter::Binary(v) => cmd.arg(v),
        };
    }
    let results = cmd.query_async::<Results>(conn).await.map_err(other)?.0;
    let size: usize = results
        .iter()
        .map(|r| {
            std::mem::size_of::<RedisResult>()
                + match r {
                    RedisResult::Binary(b) => b.len(),
                    RedisResult::Status(s) => s.len(),
                    _ => 0,
                }
        })
        .sum();
    if size > super::sqlite::MAX_RESULT_BYTES {
        return Err(Error::Other(format!(
            "query result exceeds limit of {} bytes",
            super::sqlite::MAX_RESULT_BYTES
        )));
    }
    Ok(results)
}

/// Spin's `type-error` for a command on a key holding another type (the server's
/// WRONGTYPE), else `other`.
fn type_error_or_other(e: redis::RedisError) -> Error {
    if e.code() == Some("WRONGTYPE") || e.kind() == redis::ErrorKind::UnexpectedReturnType {
        Error::TypeError
    } else {
        other(e)
    }
}

impl ComponentRedis {
    /// The client for `address`, if the component may connect there: the address is checked
    /// as Spin checks it, then the host and port the redis crate will connect to (its own
    /// parse of the URL) are checked again. A Unix socket (`redis+unix://`, `unix://`) is
    /// refused, as PostgreSQL's are in Spin: the allow-list names network hosts only.
    /// Refusals are `invalid-address` (Spin's), logged with the reason.
    fn redis_client(&self, address: &str) -> Result<redis::Client, Error> {
        let outbound = self.outbound();
        if !outbound.outbound_allowed(address, "redis") {
            return Err(Error::InvalidAddress);
        }
        let client = redis::Client::open(address).map_err(|_| Error::InvalidAddress)?;
        let (scheme, host, port) = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => ("redis", host, *port),
            redis::ConnectionAddr::TcpTls { host, port, .. } => ("rediss", host, *port),
            _ => {
                tracing::error!(
                    "component `{}` tried to open Redis over a Unix socket ({}): Unix sockets \
                     are not supported on WebAssembly; use a redis://host:port address in \
                     allowed_outbound_hosts",
                    outbound.id(),
                    super::outbound::origin_only(address)
                );
                return Err(Error::InvalidAddress);
            }
        };
        let shown = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        if !outbound.outbound_allowed(&format!("{scheme}://{shown}:{port}"), "redis") {
            return Err(Error::InvalidAddress);
        }
        if scheme == "redis" {
            return Ok(client);
        }
        let tls = super::tls::data_tls_for(outbound.client_tls().entries(), host, port);
        super::tls::redis_client(address, &tls).map_err(|e| {
            tracing::error!(
                "component `{}`: Redis address {}: {e:#}",
                outbound.id(),
                super::outbound::origin_only(address)
            );
            Error::InvalidAddress
        })
    }
}

/// Connects with `client` (from [`ComponentRedis::redis_client`]) under the app's network
/// policy: a connection-cap permit is held, and the host resolves through the policy
/// (blocked addresses dropped; all blocked: `other`, as Spin).
async fn connect(
    (client, outbound): (Result<redis::Client, Error>, Arc<ComponentHost>),
) -> Result<RedisConnection, Error> {
    let client = client?;
    let policy = outbound.network_policy();
    let permit = policy.acquire(super::network_policy::Kind::Redis).await;
    let conn = client
        .get_multiplexed_async_connection_with_config(&policy.redis_config(outbound.id()))
        .await
        .map_err(other)?;
    Ok(RedisConnection {
        conn,
        _permit: permit,
    })
}

/// A command's reply flattened into Spin's result list (nested arrays and sets are
/// flattened; maps, attributes, verbatim strings and pushes are type errors, as in Spin).
struct Results(Vec<RedisResult>);

impl FromRedisValue for Results {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        fn unsupported(what: &str) -> redis::ParsingError {
            format!("Could not convert Redis response: Redis {what} type is not supported").into()
        }
        fn append(out: &mut Vec<RedisResult>, value: Value) -> Result<(), redis::ParsingError> {
            match value {
                Value::Nil => out.push(RedisResult::Nil),
                Value::Int(v) => out.push(RedisResult::Int64(v)),
                Value::BulkString(b) => out.push(RedisResult::Binary(b)),
                Value::SimpleString(s) => out.push(RedisResult::Status(s)),
                Value::Okay => out.push(RedisResult::Status("OK".into())),
                Value::Array(items) | Value::Set(items) => {
                    for item in items {
                        append(out, item)?;
                    }
                }
                Value::Double(v) => out.push(RedisResult::Binary(v.to_string().into_bytes())),
                Value::Boolean(v) => out.push(RedisResult::Int64(i64::from(v))),
                Value::BigNumber(v) => out.push(RedisResult::Binary(v)),
                Value::Map(_) => return Err(unsupported("Map")),
                Value::Attribute { .. } => return Err(unsupported("Attribute")),
                Value::VerbatimString { .. } => {
                    return Err(unsupported("string with format attribute"))
                }
                Value::Push { .. } => return Err(unsupported("Pub/Sub")),
                Value::ServerError(err) => return Err(format!("Server error: {err:?}").into()),
                other => return Err(format!("Redis reply {other:?} is not supported").into()),
            }
            Ok(())
        }
        let mut out = Vec::new();
        append(&mut out, value)?;
        Ok(Results(out))
    }
}

// ---- spin:redis/redis@3.0.0 (Spin 4) ----
//
// The `async func` form of `fermyon:spin/redis@2.0.0`: the same allow-list check, commands,
// reply mapping and errors (its types are 2.0.0's, case for case).

mod v3 {
    use redis::AsyncCommands as _;
    use wasmtime::component::Resource;

    use super::{
        other, type_error_or_other, ComponentRedis, Error, RedisConnection, RedisParameter,
        RedisResult,
    };
    use crate::host::{with_host, Accessor, HostState, HostView};

    pub(super) type Conn = Resource<RedisConnection>;
    type R<T> = wasmtime::Result<Result<T, Error>>;

    /// Runs `f` on the instance's outbound Redis state (between awaits).
    fn with_redis<T: HostView, R>(
        acc: &Accessor<T>,
        f: impl FnOnce(&mut ComponentRedis) -> R,
    ) -> R {
        with_host(acc, |h| f(&mut h.features.redis))
    }

    /// The guest connection's multiplexed handle, or the call's `Err` result.
    macro_rules! conn {
        ($acc:expr, $this:expr) => {
            match with_redis($acc, |r| r.redis(&$this)) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            }
        };
    }

    pub(super) fn close(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.features.redis.close_connection(this)
    }

    pub(super) async fn open<T: HostView>(acc: &Accessor<T>, address: String) -> R<Conn> {
        let target = with_redis(acc, |r| (r.redis_client(&address), r.outbound().clone()));
        let conn = match super::connect(target).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(with_redis(acc, |r| r.push(conn)))
    }

    pub(super) async fn publish<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        channel: String,
        payload: Vec<u8>,
    ) -> R<()> {
        let mut c = conn!(acc, this);
        Ok(c.publish::<_, _, ()>(&channel, &payload)
            .await
            .map_err(other))
    }

    pub(super) async fn get<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        key: String,
    ) -> R<Option<Vec<u8>>> {
        let mut c = conn!(acc, this);
        Ok(c.get::<_, Option<Vec<u8>>>(&key).await.map_err(other))
    }

    pub(super) async fn set<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        key: String,
        value: Vec<u8>,
    ) -> R<()> {
        let mut c = conn!(acc, this);
        Ok(c.set::<_, _, ()>(&key, &value).await.map_err(other))
    }

    pub(super) async fn incr<T: HostView>(acc: &Accessor<T>, this: Conn, key: String) -> R<i64> {
        let mut c = conn!(acc, this);
        Ok(c.incr::<_, _, i64>(&key, 1).await.map_err(other))
    }

    pub(super) async fn del<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        keys: Vec<String>,
    ) -> R<u32> {
        let mut c = conn!(acc, this);
        Ok(c.del::<_, u32>(&keys).await.map_err(other))
    }

    pub(super) async fn sadd<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        key: String,
        values: Vec<String>,
    ) -> R<u32> {
        let mut c = conn!(acc, this);
        Ok(c.sadd::<_, _, u32>(&key, &values)
            .await
            .map_err(type_error_or_other))
    }

    pub(super) async fn smembers<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        key: String,
    ) -> R<Vec<String>> {
        let mut c = conn!(acc, this);
        Ok(c.smembers::<_, Vec<String>>(&key).await.map_err(other))
    }

    pub(super) async fn srem<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        key: String,
        values: Vec<String>,
    ) -> R<u32> {
        let mut c = conn!(acc, this);
        Ok(c.srem::<_, _, u32>(&key, &values).await.map_err(other))
    }

    pub(super) async fn execute<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        command: String,
        arguments: Vec<RedisParameter>,
    ) -> R<Vec<RedisResult>> {
        let mut c = conn!(acc, this);
        Ok(super::execute(&mut c, &command, &arguments).await)
    }
}

/// Adds `spin:redis/redis@3.0.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    use v3::Conn;
    const INTERFACE: &str = "redis";
    let mut inst = linker.instance("spin:redis/redis@3.0.0")?;
    host_resource!(inst, "connection", RedisConnection, v3::close);
    async_func!(inst, INTERFACE, "[static]connection.open", v3::open, (address: String));
    async_func!(inst, INTERFACE, "[method]connection.publish", v3::publish, (this: Conn, channel: String, payload: Vec<u8>));
    async_func!(inst, INTERFACE, "[method]connection.get", v3::get, (this: Conn, key: String));
    async_func!(inst, INTERFACE, "[method]connection.set", v3::set, (this: Conn, key: String, value: Vec<u8>));
    async_func!(inst, INTERFACE, "[method]connection.incr", v3::incr, (this: Conn, key: String));
    async_func!(inst, INTERFACE, "[method]connection.del", v3::del, (this: Conn, keys: Vec<String>));
    async_func!(inst, INTERFACE, "[method]connection.sadd", v3::sadd, (this: Conn, key: String, values: Vec<String>));
    async_func!(inst, INTERFACE, "[method]connection.smembers", v3::smembers, (this: Conn, key: String));
    async_func!(inst, INTERFACE, "[method]connection.srem", v3::srem, (this: Conn, key: String, values: Vec<String>));
    async_func!(inst, INTERFACE, "[method]connection.execute", v3::execute, (this: Conn, command: String, arguments: Vec<RedisParameter>));
    Ok(())
}
