//! Outbound MySQL: `fermyon:spin/mysql@2.0.0` on `mysql_async`, with Spin's type mapping.
//!
//! `open` takes a `mysql://user:password@host:port/db` URL, allowed only when the
//! component's `allowed_outbound_hosts` has it (`mysql://host:port`), else
//! `connection-failed` ("address ... is not permitted", Spin's text). Connections are TCP
//! to that host; as in Spin, an `ssl-mode` (or `sslmode`) other than `DISABLED` requires
//! TLS, whose server certificate and host name are always verified, with the component's
//! `[[client_tls]]` entry for the host or the default trust store (see [`super::tls`]).
//! `socket=` (any Unix socket) and `prefer_socket=true` are refused;
//! mysql_async's default of reconnecting over the Unix socket the server names
//! (`@@socket`) is turned off.

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::{FromValue, Queryable as _};
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::{mysql as v2, rdbms_types as v2t};
use super::connections::{Connections, OutboundInterface};
use super::sqlite::MAX_RESULT_BYTES;
use super::HostView;
use v2t::{Column, DbDataType, DbValue, Error, ParameterValue, RowSet};

/// The outbound MySQL host feature: `fermyon:spin/mysql@2.0.0` (its `rdbms-types` are
/// linked by [`super::pg::OutboundPg`]) and Spin 4's `spin:mysql/mysql@3.0.0`, implemented on
/// [`ComponentMysql`].
pub struct OutboundMysql;

/// One instance's outbound MySQL.
pub type ComponentMysql = Connections<OutboundMysql>;

impl OutboundInterface for OutboundMysql {
    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentMysql,
    ) -> anyhow::Result<()> {
        v2::add_to_linker::<_, wasmtime::component::HasSelf<ComponentMysql>>(linker, get)?;
        add_spin4_to_linker(linker)
    }
}

/// A guest's open connection (the resource behind `connection`). Behind a lock so that a
/// Spin 4 guest's concurrent calls on one connection run one after the other.
pub struct MysqlConnection {
    conn: std::sync::Arc<tokio::sync::Mutex<mysql_async::Conn>>,
    /// The app's connection-cap permits, held while the connection is open.
    _permit: super::network_policy::Permit,
}

fn is_ssl_param(name: &str) -> bool {
    ["ssl-mode", "sslmode"].contains(&name.to_lowercase().as_str())
}

/// Connection options from the guest's URL (the `ssl-mode` parameter removed, as Spin does)
/// and whether it asks for TLS; always over TCP: parameters that would connect to a Unix
/// socket are refused.
fn options(address: &str) -> Result<(mysql_async::Opts, bool), Error> {
    let url = url::Url::parse(address).map_err(|e| Error::ConnectionFailed(e.to_string()))?;
    for (k, v) in url.query_pairs() {
        if k.eq_ignore_ascii_case("socket") {
            return Err(Error::ConnectionFailed(
                "the `socket` parameter (a Unix socket) is not supported on WebAssembly: \
                 connect over TCP to a host in allowed_outbound_hosts"
                    .into(),
            ));
        }
        if k.eq_ignore_ascii_case("prefer_socket") && v != "false" {
            return Err(Error::ConnectionFailed(format!(
                "prefer_socket={v} (reconnecting over the Unix socket the server names) is not \
                 supported on WebAssembly: leave the parameter out"
            )));
        }
    }
    let tls = url
        .query_pairs()
        .any(|(k, v)| is_ssl_param(&k) && !v.eq_ignore_ascii_case("disabled"));
    let rest: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !is_ssl_param(k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut cleaned = url.clone();
    cleaned.set_query(None);
    if !rest.is_empty() {
        cleaned.query_pairs_mut().extend_pairs(rest);
    }
    let opts = mysql_async::Opts::from_url(cleaned.as_str())
        .map_err(|e| Error::ConnectionFailed(format!("{e:?}")))?;
    let opts = mysql_async::OptsBuilder::from_opts(opts)
        .prefer_socket(false)
        .socket(None::<String>)
        .into();
    Ok((opts, tls))
}

/// mysql_async's TLS options for `tls`: its roots only (not mysql_async's built-in list),
/// with the client certificate if there is one; verification stays on.
fn ssl_opts(tls: &super::tls::DataTls) -> mysql_async::SslOpts {
    mysql_async::SslOpts::default()
        .with_root_certs(vec![tls.roots_pem.to_vec().into()])
        .with_disable_built_in_roots(true)
        .with_client_identity(
            tls.client_pem
                .as_ref()
                .map(|p| mysql_async::ClientIdentity::new(p.0.clone().into(), p.1.clone().into())),
        )
}

fn to_value(p: ParameterValue) -> mysql_async::Value {
    use mysql_async::Value;
    match p {
        ParameterValue::Boolean(v) => Value::from(v),
        ParameterValue::Int8(v) => Value::from(v),
        ParameterValue::Int16(v) => Value::from(v),
        ParameterValue::Int32(v) => Value::from(v),
        ParameterValue::Int64(v) => Value::from(v),
        ParameterValue::Uint8(v) => Value::from(v),
        ParameterValue::Uint16(v) => Value::from(v),
        ParameterValue::Uint32(v) => Value::from(v),
        ParameterValue::Uint64(v) => Value::from(v),
        ParameterValue::Floating32(v) => Value::from(v),
        ParameterValue::Floating64(v) => Value::from(v),
        ParameterValue::Str(v) => Value::from(v),
        ParameterValue::Binary(v) => Value::from(v),
        ParameterValue::DbNull => Value::NULL,
    }
}

fn data_type(column: &mysql_async::Column) -> DbDataType {
    use ColumnType as C;
    let ty = column.column_type();
    let signed = !column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    let binary = column.flags().contains(ColumnFlags::BINARY_FLAG);
    if ty.is_numeric_type() {
        match (ty, signed) {
            (C::MYSQL_TYPE_DOUBLE, _) => DbDataType::Floating64,
            (C::MYSQL_TYPE_FLOAT, _) => DbDataType::Floating32,
            (C::MYSQL_TYPE_INT24 | C::MYSQL_TYPE_LONG, true) => DbDataType::Int32,
            (C::MYSQL_TYPE_INT24 | C::MYSQL_TYPE_LONG, false) => DbDataType::Uint32,
            (C::MYSQL_TYPE_LONGLONG, true) => DbDataType::Int64,
            (C::MYSQL_TYPE_LONGLONG, false) => DbDataType::Uint64,
            (C::MYSQL_TYPE_SHORT, true) => DbDataType::Int16,
            (C::MYSQL_TYPE_SHORT, false) => DbDataType::Uint16,
            (C::MYSQL_TYPE_TINY, true) => DbDataType::Int8,
            (C::MYSQL_TYPE_TINY, false) => DbDataType::Uint8,
            _ => DbDataType::Other,
        }
    } else if ty.is_character_type() {
        match (ty, binary) {
            (C::MYSQL_TYPE_BLOB, false) => DbDataType::Str,
            (C::MYSQL_TYPE_BLOB | C::MYSQL_TYPE_LONG_BLOB | C::MYSQL_TYPE_MEDIUM_BLOB, _) => {
                DbDataType::Binary
            }
            (C::MYSQL_TYPE_STRING | C::MYSQL_TYPE_VAR_STRING, true) => DbDataType::Binary,
            (C::MYSQL_TYPE_STRING | C::MYSQL_TYPE_VAR_STRING, false) => DbDataType::Str,
            _ => DbDataType::Other,
        }
    } else {
        DbDataType::Other
    }
}

fn convert<T: FromValue>(v: mysql_async::Value) -> Result<T, Error> {
    mysql_async::from_value_opt::<T>(v).map_err(|e| Error::ValueConversionFailed(e.to_string()))
}

fn db_value(value: Option<mysql_async::Value>, column: Option<&Column>) -> Result<DbValue, Error> {
    let (value, column) = match (value, column) {
        (None, _) | (Some(mysql_async::Value::NULL), Some(_)) => return Ok(DbValue::DbNull),
        (Some(_), None) => return Err(Error::Other("a row has more values than columns".into())),
        (Some(v), Some(c)) => (v, c),
    };
    Ok(match column.data_type {
        DbDataType::Binary => DbValue::Binary(convert(value)?),
        DbDataType::Boolean => DbValue::Boolean(convert(value)?),
        DbDataType::Floating32 => DbValue::Floating32(convert(value)?),
        DbDataType::Floating64 => DbValue::Floating64(convert(value)?),
        DbDataType::Int8 => DbValue::Int8(convert(value)?),
        DbDataType::Int16 => DbValue::Int16(convert(value)?),
        DbDataType::Int32 => DbValue::Int32(convert(value)?),
        DbDataType::Int64 => DbValue::Int64(convert(value)?),
        DbDataType::Str => DbValue::Str(convert(value)?),
        DbDataType::Uint8 => DbValue::Uint8(convert(value)?),
        DbDataType::Uint16 => DbValue::Uint16(convert(value)?),
        DbDataType::Uint32 => DbValue::Uint32(convert(value)?),
        DbDataType::Uint64 => DbValue::Uint64(convert(value)?),
        DbDataType::Other => {
            return Err(Error::ValueConversionFailed(format!(
                "Cannot convert value {value:?} in column {} data type {:?}",
                column.name, column.data_type
            )))
        }
    })
}

fn value_size(v: &DbValue) -> usize {
    std::mem::size_of::<DbValue>()
        + match v {
            DbValue::Str(s) => s.len(),
            DbValue::Binary(b) => b.len(),
            _ => 0,
        }
}

impl ComponentMysql {
    fn mysql(
        &mut self,
        connection: &Resource<MysqlConnection>,
    ) -> Result<std::sync::Arc<tokio::sync::Mutex<mysql_async::Conn>>, Error> {
        self.table()
            .get(connection)
            .map(|c| c.conn.clone())
            .map_err(|_| Error::ConnectionFailed("no connection found".into()))
    }

    /// Adds a connection to the guest's handles, unless too many are open.
    fn push(&mut self, conn: MysqlConnection) -> Result<Resource<MysqlConnection>, Error> {
        self.push_connection(conn)
            .map_err(|_| Error::ConnectionFailed("too many connections".into()))
    }

    /// What [`connect`] needs to open `address`.
    fn target(&self, address: &str) -> Target {
        (
            self.mysql_options(address),
            self.outbound().network_policy().clone(),
            self.outbound().id().to_string(),
        )
    }

    /// The options to connect to `address` with, if the component may: the address is
    /// checked as Spin checks it, then the host and port mysql_async will connect to (its own
    /// parse of the URL) are checked again, so the two parsers cannot disagree about where
    /// the connection goes. A refusal is `connection-failed` (Spin's text).
    fn mysql_options(&self, address: &str) -> Result<mysql_async::Opts, Error> {
        let refused = || Error::ConnectionFailed(format!("address {address} is not permitted"));
        if !self.outbound().outbound_allowed(address, "mysql") {
            return Err(refused());
        }
        let (opts, tls) = options(address)?;
        let host = opts.ip_or_hostname();
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let allowed = format!("mysql://{host}:{}", opts.tcp_port());
        if !self.outbound().outbound_allowed(&allowed, "mysql") {
            return Err(refused());
        }
        if !tls {
            return Ok(opts);
        }
        let tls = super::tls::data_tls_for(
            self.outbound().client_tls().entries(),
            &host,
            opts.tcp_port(),
        );
        Ok(mysql_async::OptsBuilder::from_opts(opts)
            .ssl_opts(Some(ssl_opts(&tls)))
            .into())
    }
}

/// The options to connect with (or the refusal), the app's network policy and the
/// component's id.
type Target = (
    Result<mysql_async::Opts, Error>,
    std::sync::Arc<super::network_policy::NetworkPolicy>,
    String,
);

/// Connects with `opts` (from [`ComponentMysql::mysql_options`]) through the app's network
/// policy: the host is resolved once, blocked addresses are dropped and mysql_async connects
/// to the checked ones (TLS still verifies the host name); a connection-cap permit is held.
async fn connect((opts, policy, component): Target) -> Result<MysqlConnection, Error> {
    use super::network_policy::Kind;
    let opts = opts?;
    let (host, port) = (opts.ip_or_hostname().to_string(), opts.tcp_port());
    let addrs = policy
        .resolve(&component, Kind::Mysql, &host, port)
        .await
        .map_err(|e| Error::ConnectionFailed(e.to_string()))?;
    let permit = policy.acquire(Kind::Mysql).await;
    let ips: Vec<std::net::IpAddr> = addrs.iter().map(|a| a.ip()).collect();
    let opts = mysql_async::OptsBuilder::from_opts(opts).resolved_ips(Some(ips));
    let conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| Error::ConnectionFailed(format!("{e:?}")))?;
    Ok(MysqlConnection {
        conn: std::sync::Arc::new(tokio::sync::Mutex::new(conn)),
        _permit: permit,
    })
}

/// Runs a query; every row, at most [`MAX_RESULT_BYTES`] of them.
async fn query(
    conn: &mut mysql_async::Conn,
    statement: &str,
    params: Vec<ParameterValue>,
) -> Result<RowSet, Error> {
    use futures::TryStreamExt as _;
    let params = mysql_async::Params::Positional(params.into_iter().map(to_value).collect());
    let mut result = conn
        .exec_iter(statement, params)
        .await
        .map_err(|e| Error::QueryFailed(format!("{e:?}")))?;
    let columns: Vec<Column> = result
        .columns()
        .map(|cols| {
            cols.iter()
                .map(|c| Column {
                    name: c.name_str().into_owned(),
                    data_type: data_type(c),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut stream = result
        .stream::<mysql_async::Row>()
        .await
        .map_err(|e| Error::Other(e.to_string()))?
        .ok_or_else(|| Error::Other("unable to stream query result".into()))?;
    let mut rows = Vec::new();
    let mut bytes = std::mem::size_of::<RowSet>();
    while let Some(mut row) = stream
        .try_next()
        .await
        .map_err(|e| Error::Other(e.to_string()))?
    {
        let values = (0..row.len())
            .map(|i| db_value(row.take(i), columns.get(i)))
            .collect::<Result<Vec<_>, _>>()?;
        bytes += values.iter().map(value_size).sum::<usize>();
        if bytes > MAX_RESULT_BYTES {
            return Err(Error::Other(format!(
                "query result exceeds limit of {MAX_RESULT_BYTES} bytes"
            )));
        }
        rows.push(values);
    }
    Ok(RowSet { columns, rows })
}

/// Runs a command.
async fn execute(
    conn: &mut mysql_async::Conn,
    statement: &str,
    params: Vec<ParameterValue>,
) -> Result<(), Error> {
    let params = mysql_async::Params::Positional(params.into_iter().map(to_value).collect());
    conn.exec_batch(statement, [params])
        .await
        .map_err(|e| Error::QueryFailed(format!("{e:?}")))
}

impl v2::Host for ComponentMysql {}

impl v2::HostConnection for ComponentMysql {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<MysqlConnection>, Error>> {
        let conn = match connect(self.target(&address)).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self.push(conn))
    }

    async fn query(
        &mut self,
        connection: Resource<MysqlConnection>,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> wasmtime::Result<Result<RowSet, Error>> {
        let conn = match self.mysql(&connection) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let mut conn = conn.lock().await;
        Ok(query(&mut conn, &statement, params).await)
    }

    async fn execute(
        &mut self,
        connection: Resource<MysqlConnection>,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> wasmtime::Result<Result<(), Error>> {
        let conn = match self.mysql(&connection) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let mut conn = conn.lock().await;
        Ok(execute(&mut conn, &statement, params).await)
    }

    async fn drop(&mut self, connection: Resource<MysqlConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

// ---- spin:mysql/mysql@3.0.0 (Spin 4) ----
//
// The `async func` form of `fermyon:spin/mysql@2.0.0` (its types are 2.0.0's rdbms-types,
// case for case): the same allow-list check, type mapping and errors. `query` returns the
// columns and a stream of the rows (read under the same byte cap as 2.0.0's), and a future
// resolving once they are all delivered.

mod v3 {
    use wasmtime::component::{FutureReader, Resource, StreamReader};

    use super::{Column, ComponentMysql, DbValue, Error, MysqlConnection, ParameterValue};
    use crate::host::{stream_and_future, with_host, Accessor, HostState, HostView};

    pub(super) type Conn = Resource<MysqlConnection>;
    type R<T> = wasmtime::Result<Result<T, Error>>;
    type Rows = (
        Vec<Column>,
        StreamReader<Vec<DbValue>>,
        FutureReader<Result<(), Error>>,
    );

    /// Runs `f` on the instance's outbound MySQL state (between awaits).
    fn with_mysql<T: HostView, R>(
        acc: &Accessor<T>,
        f: impl FnOnce(&mut ComponentMysql) -> R,
    ) -> R {
        with_host(acc, |h| f(&mut h.features.mysql))
    }

    pub(super) fn close(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.features.mysql.close_connection(this)
    }

    pub(super) async fn open<T: HostView>(acc: &Accessor<T>, address: String) -> R<Conn> {
        let target = with_mysql(acc, |h| h.target(&address));
        let conn = match super::connect(target).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(with_mysql(acc, |h| h.push(conn)))
    }

    pub(super) async fn query<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> R<Rows> {
        let conn = match with_mysql(acc, |h| h.mysql(&this)) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let result = super::query(&mut *conn.lock().await, &statement, params).await;
        match result {
            Ok(set) => {
                let (rows, done) = stream_and_future(acc, set.rows, Ok(()))?;
                Ok(Ok((set.columns, rows, done)))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    pub(super) async fn execute<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> R<()> {
        let conn = match with_mysql(acc, |h| h.mysql(&this)) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let result = super::execute(&mut *conn.lock().await, &statement, params).await;
        Ok(result)
    }
}

/// Adds `spin:mysql/mysql@3.0.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    use v3::Conn;
    const INTERFACE: &str = "mysql";
    let mut inst = linker.instance("spin:mysql/mysql@3.0.0")?;
    host_resource!(inst, "connection", MysqlConnection, v3::close);
    async_func!(inst, INTERFACE, "[static]connection.open", v3::open, (address: String));
    async_func!(inst, INTERFACE, "[method]connection.query", v3::query, (this: Conn, statement: String, params: Vec<ParameterValue>));
    async_func!(inst, INTERFACE, "[method]connection.execute", v3::execute, (this: Conn, statement: String, params: Vec<ParameterValue>));
    Ok(())
}
