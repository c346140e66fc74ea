//! Outbound PostgreSQL: `spin:postgres/postgres@4.0.0`, `spin:postgres/postgres@3.0.0` and
//! `fermyon:spin/postgres@2.0.0` on `tokio-postgres`, with Spin's type mapping (the newest
//! version's values, converted down for the older ones exactly as Spin converts them).
//!
//! `open` takes a libpq connection string or URL; every host and every `hostaddr` in it must
//! be allowed by the component's `allowed_outbound_hosts` (`postgres://host:port`), else
//! `connection-failed` ("address postgres://... is not permitted", Spin's text); Unix-socket
//! hosts are refused (see `ComponentPg::pg_check_allowed`). TLS as in Spin: unless
//! `sslmode=disable`, the server is asked for TLS (`prefer`, the default, goes on in plain
//! TCP only when the server has no TLS; `require`, `verify-ca` and `verify-full` insist) and
//! its certificate is always verified, with the component's `[[client_tls]]` entry for the
//! host or the default trust store (see [`super::tls`]), plus the CA a guest gives with
//! `connection-builder.set-ca-root`.

// Errors are the WIT's `error` variant (large, as in Spin, which allows it the same way).
#![allow(clippy::result_large_err)]

use std::pin::pin;

use anyhow::{anyhow, Context as _};
use bytes::BufMut as _;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::Row;
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::{postgres as v2, rdbms_types as v2t};
use super::bindings::spin::postgres3_0_0::postgres as v3;
use super::bindings::spin::postgres4_0_0::postgres as v4;
use super::connections::{Connections, OutboundInterface};
use super::sqlite::MAX_RESULT_BYTES;
use super::HostView;

/// The outbound PostgreSQL host feature: `spin:postgres/postgres@4.0.0`, `@3.0.0`,
/// `fermyon:spin/postgres@2.0.0` (with the `rdbms-types` it shares with MySQL) and Spin 4's
/// `spin:postgres/postgres@4.2.0`, implemented on [`ComponentPg`].
pub struct OutboundPg;

/// One instance's outbound PostgreSQL.
pub type ComponentPg = Connections<OutboundPg>;

impl OutboundInterface for OutboundPg {
    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentPg,
    ) -> anyhow::Result<()> {
        type D = wasmtime::component::HasSelf<ComponentPg>;
        v2t::add_to_linker::<_, D>(linker, get)?;
        v2::add_to_linker::<_, D>(linker, get)?;
        v3::add_to_linker::<_, D>(linker, get)?;
        v4::add_to_linker::<_, D>(linker, get)?;
        add_spin4_to_linker(linker)
    }
}

/// A guest's open connection (the resource behind every version's `connection`).
pub struct PgConnection {
    client: std::sync::Arc<tokio_postgres::Client>,
    /// The app's connection-cap permits, held while the connection is open.
    _permit: super::network_policy::Permit,
}

fn conn_failed(msg: impl Into<String>) -> v4::Error {
    v4::Error::ConnectionFailed(msg.into())
}

impl ComponentPg {
    /// Checks every place `config` makes tokio-postgres connect to against
    /// `allowed_outbound_hosts`, pairing hosts, `hostaddr`s and ports as its `connect` does:
    /// entry `i` connects to `hostaddr[i]` when given (the host name is then only a name) and
    /// else to `host[i]`, on `port[i]` (or the one port, or 5432). Every host and every
    /// `hostaddr` must be allowed (Spin checks only the hosts, so `host=allowed
    /// hostaddr=elsewhere` went elsewhere). A Unix-socket host (`host=/dir`) is refused as in
    /// Spin, and so is a string whose hosts, addresses and ports tokio-postgres could not
    /// pair, before anything is connected.
    fn pg_check_allowed(&self, config: &tokio_postgres::Config) -> Result<(), v4::Error> {
        let hosts = config.get_hosts();
        let addrs = config.get_hostaddrs();
        let ports = config.get_ports();
        if hosts.is_empty() && addrs.is_empty() {
            return Err(conn_failed(
                "the connection string names no host: give host=<name> or a \
                 postgres://<host>:<port> URL",
            ));
        }
        if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
            return Err(conn_failed(format!(
                "the connection string names {} hosts and {} hostaddrs: give one hostaddr per \
                 host, or none",
                hosts.len(),
                addrs.len()
            )));
        }
        let targets = hosts.len().max(addrs.len());
        if ports.len() > 1 && ports.len() != targets {
            return Err(conn_failed(format!(
                "the connection string names {} ports for {targets} hosts: give one port, or \
                 one per host",
                ports.len()
            )));
        }
        for i in 0..targets {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match hosts.get(i) {
                Some(tokio_postgres::config::Host::Tcp(name)) => self.pg_target(name, port)?,
                Some(tokio_postgres::config::Host::Unix(_)) => {
                    return Err(conn_failed("Unix sockets are not supported on WebAssembly"));
                }
                None => {}
            }
            if let Some(addr) = addrs.get(i) {
                self.pg_target(&addr.to_string(), port)?;
            }
        }
        Ok(())
    }

    /// Whether the component may connect to `host` (a name or an IP address) on `port`.
    fn pg_target(&self, host: &str, port: u16) -> Result<(), v4::Error> {
        let authority = if host.parse::<std::net::Ipv6Addr>().is_ok() {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        if self
            .outbound()
            .outbound_allowed(&format!("postgres://{authority}"), "postgres")
        {
            Ok(())
        } else {
            Err(conn_failed(format!(
                "address postgres://{authority} is not permitted"
            )))
        }
    }

    /// The connection config of `address`, if the component may connect there.
    fn pg_config(&self, address: &str) -> Result<tokio_postgres::Config, v4::Error> {
        // libpq's verifying modes: tokio-postgres knows them as `require`, and this runtime
        // verifies the certificate and host name in every TLS mode.
        let address = address
            .replace("sslmode=verify-full", "sslmode=require")
            .replace("sslmode=verify-ca", "sslmode=require");
        let config = address
            .parse::<tokio_postgres::Config>()
            .map_err(|e| conn_failed(e.to_string()))?;
        self.pg_check_allowed(&config)?;
        Ok(config)
    }

    /// The TLS connector for `config` (none for `sslmode=disable`), trusting `ca_root` too.
    fn pg_tls(
        &self,
        config: &tokio_postgres::Config,
        ca_root: Option<&str>,
    ) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, v4::Error> {
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable {
            return Ok(None);
        }
        let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
            (Some(tokio_postgres::config::Host::Tcp(h)), _) => h.clone(),
            (_, Some(a)) => a.to_string(),
            _ => String::new(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let mut tls = super::tls::data_tls_for(self.outbound().client_tls().entries(), &host, port);
        if let Some(pem) = ca_root {
            tls = tls
                .with_extra_roots(pem.as_bytes())
                .map_err(|e| v4::Error::Other(format!("invalid root certificate: {e:#}")))?;
        }
        Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(
            (*tls.config).clone(),
        )))
    }

    /// Adds a connected client to the instance's table; its handle's rep.
    fn pg_push(
        &mut self,
        (client, permit): (tokio_postgres::Client, super::network_policy::Permit),
    ) -> Result<u32, v4::Error> {
        let conn = PgConnection {
            client: std::sync::Arc::new(client),
            _permit: permit,
        };
        let res = self
            .push_connection(conn)
            .map_err(|_| conn_failed("too many connections"))?;
        Ok(res.rep())
    }

    async fn pg_open(&mut self, address: &str, ca_root: Option<&str>) -> Result<u32, v4::Error> {
        let config = self.pg_config(address)?;
        let tls = self.pg_tls(&config, ca_root)?;
        let outbound = self.outbound();
        let client = pg_connect(outbound.network_policy(), outbound.id(), &config, tls).await?;
        self.pg_push(client)
    }

    fn pg_client(&mut self, rep: u32) -> Result<std::sync::Arc<tokio_postgres::Client>, v4::Error> {
        self.table()
            .get(&Resource::<PgConnection>::new_borrow(rep))
            .map(|c| c.client.clone())
            .map_err(|_| conn_failed("no connection found"))
    }

    async fn pg_execute(
        &mut self,
        rep: u32,
        statement: &str,
        params: Vec<v4::ParameterValue>,
    ) -> Result<u64, v4::Error> {
        pg_execute(self.pg_client(rep)?, statement, params).await
    }

    async fn pg_query(
        &mut self,
        rep: u32,
        statement: &str,
        params: Vec<v4::ParameterValue>,
    ) -> Result<v4::RowSet, v4::Error> {
        pg_query(self.pg_client(rep)?, statement, params).await
    }
}

/// Connects as `config` says (over TLS with `tls`, plain TCP without), trying its hosts in
/// order, each through the app's network policy: resolved once, blocked addresses dropped,
/// a connection-cap permit taken; TLS verifies the host name.
async fn pg_connect(
    policy: &super::network_policy::NetworkPolicy,
    component: &str,
    config: &tokio_postgres::Config,
    mut tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<(tokio_postgres::Client, super::network_policy::Permit), v4::Error> {
    use tokio_postgres::config::Host;
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(std::time::Duration::from_secs(600));
    let mut last = conn_failed("the connection string names no host");
    for i in 0..hosts.len().max(addrs.len()) {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let addr = addrs.get(i).map(|a| a.to_string());
        let name = match hosts.get(i) {
            Some(Host::Tcp(name)) => name.clone(),
            _ => addr.clone().unwrap_or_default(),
        };
        let target = addr.as_deref().unwrap_or(&name);
        let (stream, permit) = match policy
            .connect(
                component,
                super::network_policy::Kind::Pg,
                target,
                port,
                timeout,
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                last = conn_failed(e.to_string());
                continue;
            }
        };
        let connected = match tls.as_mut() {
            Some(tls) => {
                let tls = <_ as tokio_postgres::tls::MakeTlsConnect<tokio::net::TcpStream>>::make_tls_connect(tls, &name)
                    .map_err(|e| conn_failed(format!("TLS for {name}: {e}")))?;
                config
                    .connect_raw(stream, tls)
                    .await
                    .map(|(client, connection)| {
                        spawn_connection(connection);
                        client
                    })
            }
            None => config.connect_raw(stream, tokio_postgres::NoTls).await.map(
                |(client, connection)| {
                    spawn_connection(connection);
                    client
                },
            ),
        };
        match connected {
            Ok(client) => return Ok((client, permit)),
            Err(e) => last = conn_failed(format!("{e:?}")),
        }
    }
    Err(last)
}

/// Drives a connection until its client is dropped (the guest drops the resource).
fn spawn_connection<S, T>(connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("PostgreSQL connection closed: {e}");
        }
    });
}

/// Runs a command; the number of rows it affected.
async fn pg_execute(
    client: std::sync::Arc<tokio_postgres::Client>,
    statement: &str,
    params: Vec<v4::ParameterValue>,
) -> Result<u64, v4::Error> {
    let params = params
        .iter()
        .map(to_sql)
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(|e| v4::Error::ValueConversionFailed(format!("{e:?}")))?;
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect();
    client.execute(statement, &refs).await.map_err(query_failed)
}

/// Runs a query; every row, at most [`MAX_RESULT_BYTES`] of them.
async fn pg_query(
    client: std::sync::Arc<tokio_postgres::Client>,
    statement: &str,
    params: Vec<v4::ParameterValue>,
) -> Result<v4::RowSet, v4::Error> {
    use futures::TryStreamExt as _;
    let params = params
        .iter()
        .map(to_sql)
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(|e| v4::Error::BadParameter(format!("{e:?}")))?;
    let mut results = pin!(client
        .query_raw(statement, params)
        .await
        .map_err(query_failed)?);
    let mut columns = None;
    let mut bytes = std::mem::size_of::<v4::RowSet>();
    let mut rows = Vec::new();
    let collected: anyhow::Result<()> = async {
        while let Some(row) = results.try_next().await? {
            if columns.is_none() {
                columns = Some(
                    row.columns()
                        .iter()
                        .map(|c| v4::Column {
                            name: c.name().to_owned(),
                            data_type: data_type(c.type_()),
                        })
                        .collect::<Vec<_>>(),
                );
            }
            let values = (0..row.len())
                .map(|i| db_value(&row, i))
                .collect::<anyhow::Result<Vec<_>>>()?;
            bytes += values.iter().map(value_size).sum::<usize>();
            if bytes > MAX_RESULT_BYTES {
                anyhow::bail!("query result exceeds limit of {MAX_RESULT_BYTES} bytes");
            }
            rows.push(values);
        }
        Ok(())
    }
    .await;
    collected.map_err(|e| v4::Error::QueryFailed(v4::QueryError::Text(format!("{e:?}"))))?;
    Ok(v4::RowSet {
        columns: columns.unwrap_or_default(),
        rows,
    })
}

fn query_failed(e: tokio_postgres::Error) -> v4::Error {
    let flattened = format!("{e:?}");
    let error = match e.as_db_error() {
        None => v4::QueryError::Text(flattened),
        Some(db) => {
            let mut extras = Vec::new();
            let mut extra = |name: &str, value: Option<String>| {
                if let Some(v) = value {
                    extras.push((name.to_string(), v));
                }
            };
            extra("column", db.column().map(str::to_owned));
            extra("constraint", db.constraint().map(str::to_owned));
            extra("routine", db.routine().map(str::to_owned));
            extra("hint", db.hint().map(str::to_owned));
            extra("table", db.table().map(str::to_owned));
            extra("datatype", db.datatype().map(str::to_owned));
            extra("schema", db.schema().map(str::to_owned));
            extra("file", db.file().map(str::to_owned));
            extra("line", db.line().map(|l| l.to_string()));
            extra("where_", db.where_().map(str::to_owned));
            v4::QueryError::DbError(v4::DbError {
                as_text: flattened,
                severity: db.severity().to_owned(),
                code: db.code().code().to_owned(),
                message: db.message().to_owned(),
                detail: db.detail().map(str::to_owned),
                extras,
            })
        }
    };
    v4::Error::QueryFailed(error)
}

fn data_type(ty: &Type) -> v4::DbDataType {
    use v4::DbDataType as D;
    match *ty {
        Type::BOOL => D::Boolean,
        Type::BYTEA => D::Binary,
        Type::FLOAT4 => D::Floating32,
        Type::FLOAT8 => D::Floating64,
        Type::INT2 => D::Int16,
        Type::INT4 => D::Int32,
        Type::INT8 => D::Int64,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR => D::Str,
        Type::TIMESTAMP | Type::TIMESTAMPTZ => D::Datetime,
        Type::DATE => D::Date,
        Type::TIME => D::Time,
        Type::UUID => D::Uuid,
        Type::JSONB => D::Jsonb,
        Type::NUMERIC => D::Decimal,
        Type::INT4_RANGE => D::RangeInt32,
        Type::INT8_RANGE => D::RangeInt64,
        Type::NUM_RANGE => D::RangeDecimal,
        Type::INT4_ARRAY => D::ArrayInt32,
        Type::INT8_ARRAY => D::ArrayInt64,
        Type::NUMERIC_ARRAY => D::ArrayDecimal,
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY | Type::BPCHAR_ARRAY => D::ArrayStr,
        Type::INTERVAL => D::Interval,
        _ => D::Other(ty.name().to_owned()),
    }
}

/// Reads column `i`, NULL as `db-null`.
fn get<'a, T: FromSql<'a>, W>(
    row: &'a Row,
    i: usize,
    convert: impl FnOnce(T) -> anyhow::Result<W>,
    ctor: impl FnOnce(W) -> v4::DbValue,
) -> anyhow::Result<v4::DbValue> {
    Ok(match row.try_get::<_, Option<T>>(i)? {
        Some(v) => ctor(convert(v)?),
        None => v4::DbValue::DbNull,
    })
}

fn same<T>(v: T) -> anyhow::Result<T> {
    Ok(v)
}

type WitRange<T> = (
    Option<(T, v4::RangeBoundKind)>,
    Option<(T, v4::RangeBoundKind)>,
);

fn bound_kind(t: postgres_range::BoundType) -> v4::RangeBoundKind {
    match t {
        postgres_range::BoundType::Inclusive => v4::RangeBoundKind::Inclusive,
        postgres_range::BoundType::Exclusive => v4::RangeBoundKind::Exclusive,
    }
}

fn pg_bound_kind(k: v4::RangeBoundKind) -> postgres_range::BoundType {
    match k {
        v4::RangeBoundKind::Inclusive => postgres_range::BoundType::Inclusive,
        v4::RangeBoundKind::Exclusive => postgres_range::BoundType::Exclusive,
    }
}

fn range_to_wit<T: PartialOrd + postgres_range::Normalizable, U>(
    r: postgres_range::Range<T>,
    f: impl Fn(&T) -> U,
) -> WitRange<U> {
    (
        r.lower().map(|b| (f(&b.value), bound_kind(b.type_))),
        r.upper().map(|b| (f(&b.value), bound_kind(b.type_))),
    )
}

fn range_to_pg<T: PartialOrd + postgres_range::Normalizable + Clone, U>(
    (lower, upper): &WitRange<U>,
    f: impl Fn(&U) -> anyhow::Result<T>,
) -> anyhow::Result<postgres_range::Range<T>> {
    let lower = match lower {
        Some((v, k)) => Some(postgres_range::RangeBound::new(f(v)?, pg_bound_kind(*k))),
        None => None,
    };
    let upper = match upper {
        Some((v, k)) => Some(postgres_range::RangeBound::new(f(v)?, pg_bound_kind(*k))),
        None => None,
    };
    Ok(postgres_range::Range::new(lower, upper))
}

fn db_value(row: &Row, i: usize) -> anyhow::Result<v4::DbValue> {
    use chrono::{Datelike as _, Timelike as _};
    use v4::DbValue as V;
    let date = |d: chrono::NaiveDate| -> anyhow::Result<(i32, u8, u8)> {
        Ok((d.year(), d.month().try_into()?, d.day().try_into()?))
    };
    let time = |t: chrono::NaiveTime| -> anyhow::Result<(u8, u8, u8, u32)> {
        Ok((
            t.hour().try_into()?,
            t.minute().try_into()?,
            t.second().try_into()?,
            t.nanosecond(),
        ))
    };
    let column = &row.columns()[i];
    match *column.type_() {
        Type::BOOL => get(row, i, same, V::Boolean),
        Type::BYTEA => get(row, i, same, V::Binary),
        Type::FLOAT4 => get(row, i, same, V::Floating32),
        Type::FLOAT8 => get(row, i, same, V::Floating64),
        Type::INT2 => get(row, i, same, V::Int16),
        Type::INT4 => get(row, i, same, V::Int32),
        Type::INT8 => get(row, i, same, V::Int64),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR => get(row, i, same, V::Str),
        Type::TIMESTAMP => get(
            row,
            i,
            |v: chrono::NaiveDateTime| {
                let (y, m, d) = date(v.date())?;
                let (h, mi, s, ns) = time(v.time())?;
                Ok((y, m, d, h, mi, s, ns))
            },
            V::Datetime,
        ),
        Type::TIMESTAMPTZ => get(
            row,
            i,
            |v: chrono::DateTime<chrono::Utc>| {
                let v = v.naive_utc();
                let (y, m, d) = date(v.date())?;
                let (h, mi, s, ns) = time(v.time())?;
                Ok((y, m, d, h, mi, s, ns))
            },
            V::Datetime,
        ),
        Type::DATE => get(row, i, date, V::Date),
        Type::TIME => get(row, i, time, V::Time),
        Type::UUID => get(row, i, |v: uuid::Uuid| Ok(v.to_string()), V::Uuid),
        Type::JSONB => get(
            row,
            i,
            |v: serde_json::Value| serde_json::to_vec(&v).context("invalid JSON from database"),
            V::Jsonb,
        ),
        Type::NUMERIC => get(
            row,
            i,
            |v: rust_decimal::Decimal| Ok(v.to_string()),
            V::Decimal,
        ),
        Type::INT4_RANGE => get(
            row,
            i,
            |r: postgres_range::Range<i32>| Ok(range_to_wit(r, |v| *v)),
            V::RangeInt32,
        ),
        Type::INT8_RANGE => get(
            row,
            i,
            |r: postgres_range::Range<i64>| Ok(range_to_wit(r, |v| *v)),
            V::RangeInt64,
        ),
        Type::NUM_RANGE => get(
            row,
            i,
            |r: postgres_range::Range<Decimal>| Ok(range_to_wit(r, |v| v.0.to_string())),
            V::RangeDecimal,
        ),
        Type::INT4_ARRAY => get(row, i, same, V::ArrayInt32),
        Type::INT8_ARRAY => get(row, i, same, V::ArrayInt64),
        Type::NUMERIC_ARRAY => get(
            row,
            i,
            |v: Vec<Option<rust_decimal::Decimal>>| {
                Ok(v.iter().map(|d| d.map(|d| d.to_string())).collect())
            },
            V::ArrayDecimal,
        ),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY | Type::BPCHAR_ARRAY => {
            get(row, i, same, V::ArrayStr)
        }
        Type::INTERVAL => get(row, i, |v: Interval| Ok(v.0), V::Interval),
        _ => get(row, i, |v: Raw| Ok(v.0), V::Unsupported),
    }
}

fn value_size(v: &v4::DbValue) -> usize {
    use v4::DbValue as V;
    std::mem::size_of::<v4::DbValue>()
        + match v {
            V::Str(s) | V::Uuid(s) | V::Decimal(s) => s.len(),
            V::Binary(b) | V::Jsonb(b) | V::Unsupported(b) => b.len(),
            V::ArrayStr(a) | V::ArrayDecimal(a) => a
                .iter()
                .map(|s| s.as_ref().map_or(0, String::len) + 24)
                .sum(),
            V::ArrayInt32(a) => a.len() * 8,
            V::ArrayInt64(a) => a.len() * 16,
            V::RangeDecimal((l, u)) => {
                l.as_ref().map_or(0, |b| b.0.len()) + u.as_ref().map_or(0, |b| b.0.len())
            }
            _ => 0,
        }
}

fn decimal(s: &str) -> anyhow::Result<rust_decimal::Decimal> {
    rust_decimal::Decimal::from_str_exact(s).with_context(|| format!("invalid decimal {s}"))
}

fn to_sql(v: &v4::ParameterValue) -> anyhow::Result<Box<dyn ToSql + Send + Sync>> {
    use v4::ParameterValue as P;
    Ok(match v {
        P::Boolean(v) => Box::new(*v),
        P::Int8(v) => Box::new(*v),
        P::Int16(v) => Box::new(*v),
        P::Int32(v) => Box::new(*v),
        P::Int64(v) => Box::new(*v),
        P::Floating32(v) => Box::new(*v),
        P::Floating64(v) => Box::new(*v),
        P::Str(v) => Box::new(v.clone()),
        P::Binary(v) => Box::new(v.clone()),
        P::Date((y, m, d)) => Box::new(
            chrono::NaiveDate::from_ymd_opt(*y, (*m).into(), (*d).into())
                .ok_or_else(|| anyhow!("invalid date y={y}, m={m}, d={d}"))?,
        ),
        P::Time((h, mi, s, ns)) => Box::new(
            chrono::NaiveTime::from_hms_nano_opt((*h).into(), (*mi).into(), (*s).into(), *ns)
                .ok_or_else(|| anyhow!("invalid time {h}:{mi}:{s}:{ns}"))?,
        ),
        P::Datetime((y, m, d, h, mi, s, ns)) => {
            let date = chrono::NaiveDate::from_ymd_opt(*y, (*m).into(), (*d).into())
                .ok_or_else(|| anyhow!("invalid date y={y}, m={m}, d={d}"))?;
            let time =
                chrono::NaiveTime::from_hms_nano_opt((*h).into(), (*mi).into(), (*s).into(), *ns)
                    .ok_or_else(|| anyhow!("invalid time {h}:{mi}:{s}:{ns}"))?;
            Box::new(chrono::NaiveDateTime::new(date, time))
        }
        P::Timestamp(v) => Box::new(
            chrono::DateTime::<chrono::Utc>::from_timestamp(*v, 0)
                .ok_or_else(|| anyhow!("invalid epoch timestamp {v}"))?,
        ),
        P::Uuid(v) => {
            Box::new(uuid::Uuid::parse_str(v).with_context(|| format!("invalid UUID {v}"))?)
        }
        P::Jsonb(v) => Box::new(
            serde_json::from_slice::<serde_json::Value>(v)
                .with_context(|| format!("invalid JSON {}", String::from_utf8_lossy(v)))?,
        ),
        P::Decimal(v) => Box::new(decimal(v)?),
        P::RangeInt32(r) => Box::new(range_to_pg(r, |v: &i32| Ok(*v))?),
        P::RangeInt64(r) => Box::new(range_to_pg(r, |v: &i64| Ok(*v))?),
        P::RangeDecimal(r) => Box::new(range_to_pg(r, |v: &String| Ok(Decimal(decimal(v)?)))?),
        P::ArrayInt32(v) => Box::new(v.clone()),
        P::ArrayInt64(v) => Box::new(v.clone()),
        P::ArrayDecimal(v) => Box::new(
            v.iter()
                .map(|d| d.as_deref().map(decimal).transpose())
                .collect::<anyhow::Result<Vec<_>>>()?,
        ),
        P::ArrayStr(v) => Box::new(v.clone()),
        P::Interval(v) => Box::new(Interval(*v)),
        P::DbNull => Box::new(Null),
    })
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// SQL NULL for any parameter type.
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(
        &self,
        _ty: &Type,
        _out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, BoxError> {
        Ok(tokio_postgres::types::IsNull::Yes)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        _ty: &Type,
        _out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, BoxError> {
        Ok(tokio_postgres::types::IsNull::Yes)
    }
}

/// A column of a type Spin does not map: its raw bytes.
struct Raw(Vec<u8>);

impl FromSql<'_> for Raw {
    fn from_sql(_ty: &Type, raw: &[u8]) -> Result<Self, BoxError> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// PostgreSQL `interval` in its binary form: microseconds, days, months (big-endian).
#[derive(Debug)]
struct Interval(v4::Interval);

impl ToSql for Interval {
    tokio_postgres::types::to_sql_checked!();

    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, BoxError> {
        out.put_i64(self.0.micros);
        out.put_i32(self.0.days);
        out.put_i32(self.0.months);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

impl FromSql<'_> for Interval {
    fn from_sql(_ty: &Type, raw: &[u8]) -> Result<Self, BoxError> {
        let raw: [u8; 16] = raw
            .try_into()
            .map_err(|_| format!("an interval is 16 bytes, got {}", raw.len()))?;
        let (micros, rest) = raw.split_at(8);
        let (days, months) = rest.split_at(4);
        Ok(Interval(v4::Interval {
            micros: i64::from_be_bytes(micros.try_into()?),
            days: i32::from_be_bytes(days.try_into()?),
            months: i32::from_be_bytes(months.try_into()?),
        }))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

/// A decimal usable as a range bound (`numrange`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct Decimal(rust_decimal::Decimal);

impl ToSql for Decimal {
    tokio_postgres::types::to_sql_checked!();

    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, BoxError> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <rust_decimal::Decimal as ToSql>::accepts(ty)
    }
}

impl FromSql<'_> for Decimal {
    fn from_sql(ty: &Type, raw: &[u8]) -> Result<Self, BoxError> {
        Ok(Decimal(rust_decimal::Decimal::from_sql(ty, raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        <rust_decimal::Decimal as FromSql>::accepts(ty)
    }
}

impl postgres_range::Normalizable for Decimal {
    fn normalize<S: postgres_range::BoundSided>(
        bound: postgres_range::RangeBound<S, Self>,
    ) -> postgres_range::RangeBound<S, Self> {
        bound
    }
}

// ---- spin:postgres/postgres@4.0.0 ----

impl v4::Host for ComponentPg {}

impl v4::HostConnection for ComponentPg {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, v4::Error>> {
        Ok(self.pg_open(&address, None).await.map(Resource::new_own))
    }

    async fn query(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> wasmtime::Result<Result<v4::RowSet, v4::Error>> {
        Ok(self.pg_query(connection.rep(), &statement, params).await)
    }

    async fn execute(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, v4::Error>> {
        Ok(self.pg_execute(connection.rep(), &statement, params).await)
    }

    async fn drop(&mut self, connection: Resource<PgConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

// ---- spin:postgres/postgres@3.0.0 ----

fn v3_error(e: v4::Error) -> v3::Error {
    match e {
        v4::Error::ConnectionFailed(s) => v3::Error::ConnectionFailed(s),
        v4::Error::BadParameter(s) => v3::Error::BadParameter(s),
        v4::Error::QueryFailed(v4::QueryError::Text(s)) => v3::Error::QueryFailed(s),
        v4::Error::QueryFailed(v4::QueryError::DbError(e)) => v3::Error::QueryFailed(e.as_text),
        v4::Error::ValueConversionFailed(s) => v3::Error::ValueConversionFailed(s),
        v4::Error::Other(s) => v3::Error::Other(s),
    }
}

fn v3_param(p: v3::ParameterValue) -> v4::ParameterValue {
    use v3::ParameterValue as P3;
    use v4::ParameterValue as P;
    match p {
        P3::Boolean(v) => P::Boolean(v),
        P3::Int8(v) => P::Int8(v),
        P3::Int16(v) => P::Int16(v),
        P3::Int32(v) => P::Int32(v),
        P3::Int64(v) => P::Int64(v),
        P3::Floating32(v) => P::Floating32(v),
        P3::Floating64(v) => P::Floating64(v),
        P3::Str(v) => P::Str(v),
        P3::Binary(v) => P::Binary(v),
        P3::Date(v) => P::Date(v),
        P3::Time(v) => P::Time(v),
        P3::Datetime(v) => P::Datetime(v),
        P3::Timestamp(v) => P::Timestamp(v),
        P3::DbNull => P::DbNull,
    }
}

fn v3_rowset(r: v4::RowSet) -> v3::RowSet {
    use v3::DbDataType as T3;
    use v3::DbValue as V3;
    use v4::DbDataType as T;
    use v4::DbValue as V;
    v3::RowSet {
        columns: r
            .columns
            .into_iter()
            .map(|c| v3::Column {
                name: c.name,
                data_type: match c.data_type {
                    T::Boolean => T3::Boolean,
                    T::Int8 => T3::Int8,
                    T::Int16 => T3::Int16,
                    T::Int32 => T3::Int32,
                    T::Int64 => T3::Int64,
                    T::Floating32 => T3::Floating32,
                    T::Floating64 => T3::Floating64,
                    T::Str => T3::Str,
                    T::Binary => T3::Binary,
                    T::Date => T3::Date,
                    T::Time => T3::Time,
                    T::Datetime => T3::Datetime,
                    T::Timestamp => T3::Timestamp,
                    _ => T3::Other,
                },
            })
            .collect(),
        rows: r
            .rows
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|v| match v {
                        V::Boolean(v) => V3::Boolean(v),
                        V::Int8(v) => V3::Int8(v),
                        V::Int16(v) => V3::Int16(v),
                        V::Int32(v) => V3::Int32(v),
                        V::Int64(v) => V3::Int64(v),
                        V::Floating32(v) => V3::Floating32(v),
                        V::Floating64(v) => V3::Floating64(v),
                        V::Str(v) => V3::Str(v),
                        V::Binary(v) => V3::Binary(v),
                        V::Date(v) => V3::Date(v),
                        V::Time(v) => V3::Time(v),
                        V::Datetime(v) => V3::Datetime(v),
                        V::Timestamp(v) => V3::Timestamp(v),
                        V::DbNull => V3::DbNull,
                        _ => V3::Unsupported,
                    })
                    .collect()
            })
            .collect(),
    }
}

impl v3::Host for ComponentPg {}

impl v3::HostConnection for ComponentPg {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, v3::Error>> {
        Ok(self
            .pg_open(&address, None)
            .await
            .map(Resource::new_own)
            .map_err(v3_error))
    }

    async fn query(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v3::ParameterValue>,
    ) -> wasmtime::Result<Result<v3::RowSet, v3::Error>> {
        let params = params.into_iter().map(v3_param).collect();
        Ok(self
            .pg_query(connection.rep(), &statement, params)
            .await
            .map(v3_rowset)
            .map_err(v3_error))
    }

    async fn execute(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v3::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, v3::Error>> {
        let params = params.into_iter().map(v3_param).collect();
        Ok(self
            .pg_execute(connection.rep(), &statement, params)
            .await
            .map_err(v3_error))
    }

    async fn drop(&mut self, connection: Resource<PgConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

// ---- fermyon:spin/postgres@2.0.0 (rdbms-types) ----

fn v2_error(e: v4::Error) -> v2t::Error {
    match e {
        v4::Error::ConnectionFailed(s) => v2t::Error::ConnectionFailed(s),
        v4::Error::BadParameter(s) => v2t::Error::BadParameter(s),
        v4::Error::QueryFailed(v4::QueryError::Text(s)) => v2t::Error::QueryFailed(s),
        v4::Error::QueryFailed(v4::QueryError::DbError(e)) => v2t::Error::QueryFailed(e.as_text),
        v4::Error::ValueConversionFailed(s) => v2t::Error::ValueConversionFailed(s),
        v4::Error::Other(s) => v2t::Error::Other(s),
    }
}

fn v2_params(params: Vec<v2t::ParameterValue>) -> Result<Vec<v4::ParameterValue>, v2t::Error> {
    use v2t::ParameterValue as P2;
    use v4::ParameterValue as P;
    params
        .into_iter()
        .map(|p| {
            Ok(match p {
                P2::Boolean(v) => P::Boolean(v),
                P2::Int8(v) => P::Int8(v),
                P2::Int16(v) => P::Int16(v),
                P2::Int32(v) => P::Int32(v),
                P2::Int64(v) => P::Int64(v),
                P2::Uint8(_) | P2::Uint16(_) | P2::Uint32(_) | P2::Uint64(_) => {
                    return Err(v2t::Error::ValueConversionFailed(
                        "Postgres does not support unsigned integers".to_owned(),
                    ))
                }
                P2::Floating32(v) => P::Floating32(v),
                P2::Floating64(v) => P::Floating64(v),
                P2::Str(v) => P::Str(v),
                P2::Binary(v) => P::Binary(v),
                P2::DbNull => P::DbNull,
            })
        })
        .collect()
}

fn v2_rowset(r: v4::RowSet) -> v2t::RowSet {
    use v2t::DbDataType as T2;
    use v2t::DbValue as V2;
    use v4::DbDataType as T;
    use v4::DbValue as V;
    v2t::RowSet {
        columns: r
            .columns
            .into_iter()
            .map(|c| v2t::Column {
                name: c.name,
                data_type: match c.data_type {
                    T::Boolean => T2::Boolean,
                    T::Int8 => T2::Int8,
                    T::Int16 => T2::Int16,
                    T::Int32 => T2::Int32,
                    T::Int64 => T2::Int64,
                    T::Floating32 => T2::Floating32,
                    T::Floating64 => T2::Floating64,
                    T::Str => T2::Str,
                    T::Binary => T2::Binary,
                    _ => T2::Other,
                },
            })
            .collect(),
        rows: r
            .rows
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|v| match v {
                        V::Boolean(v) => V2::Boolean(v),
                        V::Int8(v) => V2::Int8(v),
                        V::Int16(v) => V2::Int16(v),
                        V::Int32(v) => V2::Int32(v),
                        V::Int64(v) => V2::Int64(v),
                        V::Floating32(v) => V2::Floating32(v),
                        V::Floating64(v) => V2::Floating64(v),
                        V::Str(v) => V2::Str(v),
                        V::Binary(v) => V2::Binary(v),
                        V::DbNull => V2::DbNull,
                        _ => V2::Unsupported,
                    })
                    .collect()
            })
            .collect(),
    }
}

impl v2::Host for ComponentPg {}

impl v2::HostConnection for ComponentPg {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, v2t::Error>> {
        Ok(self
            .pg_open(&address, None)
            .await
            .map(Resource::new_own)
            .map_err(v2_error))
    }

    async fn query(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v2t::ParameterValue>,
    ) -> wasmtime::Result<Result<v2t::RowSet, v2t::Error>> {
        let params = match v2_params(params) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self
            .pg_query(connection.rep(), &statement, params)
            .await
            .map(v2_rowset)
            .map_err(v2_error))
    }

    async fn execute(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<v2t::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, v2t::Error>> {
        let params = match v2_params(params) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self
            .pg_execute(connection.rep(), &statement, params)
            .await
            .map_err(v2_error))
    }

    async fn drop(&mut self, connection: Resource<PgConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

impl v2t::Host for ComponentPg {}

// ---- spin:postgres/postgres@4.2.0 (Spin 4) ----
//
// 4.0.0's functions with the same types, plus 4.1's `connection-builder` and 4.2's `async
// func` forms (`open-async`, `query-async`, `execute-async`, `build-async`), with the same
// allow-list check, type mapping and errors. `query-async` returns the columns and a stream
// of the rows (read under the same byte cap as `query`), and a future resolving once they are
// all delivered.

/// A `connection-builder`: the address to open and the CA root to trust too.
pub struct PgConnectionBuilder {
    address: String,
    ca_root: Option<String>,
}

mod v4_2 {
    use wasmtime::component::{FutureReader, Resource, StreamReader};

    use super::{v4, ComponentPg, PgConnection, PgConnectionBuilder};
    use crate::host::{stream_and_future, with_host, Accessor, HostState, HostView};

    pub(super) type Conn = Resource<PgConnection>;
    pub(super) type Builder = Resource<PgConnectionBuilder>;
    type R<T> = wasmtime::Result<Result<T, v4::Error>>;
    type Rows = (
        Vec<v4::Column>,
        StreamReader<Vec<v4::DbValue>>,
        FutureReader<Result<(), v4::Error>>,
    );

    /// Runs `f` on the instance's outbound PostgreSQL state (between awaits).
    fn with_pg<T: HostView, R>(acc: &Accessor<T>, f: impl FnOnce(&mut ComponentPg) -> R) -> R {
        with_host(acc, |h| f(&mut h.features.pg))
    }

    pub(super) async fn open(h: &mut HostState, address: String) -> R<Conn> {
        let h = &mut h.features.pg;
        Ok(h.pg_open(&address, None).await.map(Resource::new_own))
    }

    pub(super) async fn query(
        h: &mut HostState,
        this: Conn,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> R<v4::RowSet> {
        Ok(h.features.pg.pg_query(this.rep(), &statement, params).await)
    }

    pub(super) async fn execute(
        h: &mut HostState,
        this: Conn,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> R<u64> {
        Ok(h.features
            .pg
            .pg_execute(this.rep(), &statement, params)
            .await)
    }

    pub(super) fn drop(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.features.pg.close_connection(this)
    }

    pub(super) async fn open_async<T: HostView>(acc: &Accessor<T>, address: String) -> R<Conn> {
        open_with_root_async(acc, address, None).await
    }

    async fn open_with_root_async<T: HostView>(
        acc: &Accessor<T>,
        address: String,
        ca_root: Option<String>,
    ) -> R<Conn> {
        let setup = with_pg(acc, |h| {
            let config = h.pg_config(&address)?;
            let tls = h.pg_tls(&config, ca_root.as_deref())?;
            Ok((
                config,
                tls,
                h.outbound().network_policy().clone(),
                h.outbound().id().to_string(),
            ))
        });
        let (config, tls, policy, id) = match setup {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let client = match super::pg_connect(&policy, &id, &config, tls).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(with_pg(acc, |h| h.pg_push(client)).map(Resource::new_own))
    }

    pub(super) async fn query_async<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> R<Rows> {
        let client = match with_pg(acc, |h| h.pg_client(this.rep())) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        match super::pg_query(client, &statement, params).await {
            Ok(set) => {
                let (rows, done) = stream_and_future(acc, set.rows, Ok(()))?;
                Ok(Ok((set.columns, rows, done)))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    pub(super) async fn execute_async<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        statement: String,
        params: Vec<v4::ParameterValue>,
    ) -> R<u64> {
        let client = match with_pg(acc, |h| h.pg_client(this.rep())) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(super::pg_execute(client, &statement, params).await)
    }

    pub(super) fn builder_new(h: &mut HostState, address: String) -> wasmtime::Result<Builder> {
        Ok(h.features.pg.table().push(PgConnectionBuilder {
            address,
            ca_root: None,
        })?)
    }

    /// Checks the PEM now (Spin's "invalid root certificate"), keeps it for `build`.
    pub(super) fn builder_set_ca_root(
        h: &mut HostState,
        this: Builder,
        certificate: String,
    ) -> R<()> {
        if let Err(e) = crate::host::tls::trust_store()
            .data
            .with_extra_roots(certificate.as_bytes())
        {
            return Ok(Err(v4::Error::Other(format!(
                "invalid root certificate: {e:#}"
            ))));
        }
        h.features.pg.table().get_mut(&this)?.ca_root = Some(certificate);
        Ok(Ok(()))
    }

    fn builder_info(
        h: &mut ComponentPg,
        this: &Builder,
    ) -> wasmtime::Result<(String, Option<String>)> {
        let b = h.table().get(this)?;
        Ok((b.address.clone(), b.ca_root.clone()))
    }

    pub(super) async fn builder_build(h: &mut HostState, this: Builder) -> R<Conn> {
        let h = &mut h.features.pg;
        let (address, ca_root) = builder_info(h, &this)?;
        Ok(h.pg_open(&address, ca_root.as_deref())
            .await
            .map(Resource::new_own))
    }

    pub(super) async fn builder_build_async<T: HostView>(
        acc: &Accessor<T>,
        this: Builder,
    ) -> R<Conn> {
        let (address, ca_root) = with_pg(acc, |h| builder_info(h, &this))?;
        open_with_root_async(acc, address, ca_root).await
    }

    pub(super) fn builder_drop(h: &mut HostState, this: Builder) -> wasmtime::Result<()> {
        h.features.pg.table().delete(this)?;
        Ok(())
    }
}

/// Adds `spin:postgres/postgres@4.2.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    use v4::ParameterValue as P;
    use v4_2::{Builder, Conn};
    const INTERFACE: &str = "postgres";
    let mut inst = linker.instance("spin:postgres/postgres@4.2.0")?;
    host_resource!(inst, "connection", PgConnection, v4_2::drop);
    host_resource!(
        inst,
        "connection-builder",
        PgConnectionBuilder,
        v4_2::builder_drop
    );
    blocking_func!(inst, INTERFACE, "[static]connection.open", v4_2::open, (address: String));
    blocking_func!(inst, INTERFACE, "[method]connection.query", v4_2::query, (this: Conn, statement: String, params: Vec<P>));
    blocking_func!(inst, INTERFACE, "[method]connection.execute", v4_2::execute, (this: Conn, statement: String, params: Vec<P>));
    async_func!(inst, INTERFACE, "[static]connection.open-async", v4_2::open_async, (address: String));
    async_func!(inst, INTERFACE, "[method]connection.query-async", v4_2::query_async, (this: Conn, statement: String, params: Vec<P>));
    async_func!(inst, INTERFACE, "[method]connection.execute-async", v4_2::execute_async, (this: Conn, statement: String, params: Vec<P>));
    sync_func!(inst, INTERFACE, "[constructor]connection-builder", v4_2::builder_new, (address: String));
    sync_func!(inst, INTERFACE, "[method]connection-builder.set-ca-root", v4_2::builder_set_ca_root, (this: Builder, certificate: String));
    blocking_func!(inst, INTERFACE, "[method]connection-builder.build", v4_2::builder_build, (this: Builder));
    async_func!(inst, INTERFACE, "[method]connection-builder.build-async", v4_2::builder_build_async, (this: Builder));
    Ok(())
}
