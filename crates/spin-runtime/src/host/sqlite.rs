//! SQLite databases: `spin:sqlite/sqlite@3.0.0` and `fermyon:spin/sqlite@2.0.0`, with Spin's
//! rules.
//!
//! - A component may open only the databases its manifest lists in `sqlite_databases`
//!   (otherwise `access-denied`); a listed label must be defined, or the app fails to load.
//! - Database `default` is `<state dir>/sqlite_db.db` (`/.spin/sqlite_db.db` for an app at
//!   `/`, as Spin names it) unless the runtime config redefines it:
//!
//! ```toml
//! [sqlite_database.default]
//! type = "spin"
//! path = "data/app.db"   # relative to the runtime config file; omitted: in memory
//! ```
//!
//! Each guest `open` gets its own SQLite connection to the file (so `changes` and
//! `last-insert-rowid` are the guest connection's own, as in Spin); an in-memory database is
//! one connection shared by the process, or it would be empty on every open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::sqlite as v2;
use super::bindings::spin::sqlite::sqlite as v3;
use super::HostState;

/// File name of the default database inside the state directory (Spin's name).
pub const DEFAULT_DATABASE_FILE: &str = "sqlite_db.db";

/// A query result may hold at most this many bytes (Spin's `MAX_HOST_BUFFERED_BYTES`).
pub const MAX_RESULT_BYTES: usize = 128 << 20;

/// Where a database label lives (the `[sqlite_database.<label>]` tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseDefinition {
    /// A database file (`None`: in memory, lost on exit).
    Spin(Option<PathBuf>),
}

/// Parses the `sqlite_database` section of a runtime config; relative paths resolve
/// against `base_dir` (the runtime config file's directory).
pub fn parse_runtime_config(
    section: &toml::Value,
    base_dir: &Path,
    origin: &str,
) -> anyhow::Result<BTreeMap<String, DatabaseDefinition>> {
    let tables = section.as_table().with_context(|| {
        format!("{origin}: `sqlite_database` must be a table of [sqlite_database.<label>]")
    })?;
    let mut out = BTreeMap::new();
    for (label, def) in tables {
        let key = format!("sqlite_database.{label}");
        let def = def
            .as_table()
            .with_context(|| format!("{origin}: `{key}` must be a table"))?;
        let kind = def
            .get("type")
            .and_then(|t| t.as_str())
            .with_context(|| format!("{origin}: `{key}.type` is missing (use type = \"spin\")"))?;
        match kind {
            "spin" => {}
            "libsql" => anyhow::bail!(
                "{origin}: `{key}.type` = \"libsql\" (a remote libSQL database) is not \
                 supported by this runtime; use type = \"spin\" (a local SQLite file)"
            ),
            other => anyhow::bail!(
                "{origin}: `{key}.type` = \"{other}\" is not a database type; use \"spin\""
            ),
        }
        for field in def.keys() {
            if field != "type" && field != "path" {
                anyhow::bail!(
                    "{origin}: `{key}.{field}` is not a field of a \"spin\" database (it takes \
                     only `path`)"
                );
            }
        }
        let path = match def.get("path") {
            None => None,
            Some(v) => Some(
                base_dir.join(
                    v.as_str()
                        .with_context(|| format!("{origin}: `{key}.path` must be a string"))?,
                ),
            ),
        };
        out.insert(label.clone(), DatabaseDefinition::Spin(path));
    }
    Ok(out)
}

/// An opened database label.
#[derive(Debug)]
enum Database {
    File(PathBuf),
    Memory(Arc<Mutex<rusqlite::Connection>>),
}

/// The databases a component may open, by label.
#[derive(Debug, Default)]
pub struct Databases {
    allowed: BTreeMap<String, Arc<Database>>,
}

/// In-memory databases already open in this process, by (app dir, label).
type MemoryRegistry = Mutex<HashMap<(PathBuf, String), Arc<Database>>>;

fn memory_registry() -> &'static MemoryRegistry {
    static REGISTRY: std::sync::OnceLock<MemoryRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl Databases {
    /// Resolves the component's `sqlite_databases` against the runtime config's definitions
    /// (plus `default` in `state_dir`). A label without a definition is an error naming it.
    pub fn open(
        component_id: &str,
        labels: &BTreeSet<String>,
        defined: &BTreeMap<String, DatabaseDefinition>,
        state_dir: &Path,
        app_dir: &Path,
    ) -> anyhow::Result<Self> {
        let mut allowed = BTreeMap::new();
        for label in labels {
            let def = match defined.get(label) {
                Some(def) => def.clone(),
                None if label == "default" => {
                    DatabaseDefinition::Spin(Some(state_dir.join(DEFAULT_DATABASE_FILE)))
                }
                None => anyhow::bail!(
                    "component `{component_id}` uses SQLite database `{label}` \
                     (sqlite_databases), which is not defined: add [sqlite_database.{label}] \
                     with type = \"spin\" to the runtime config, or use \"default\""
                ),
            };
            let db = match def {
                DatabaseDefinition::Spin(Some(path)) => {
                    if let Some(dir) = path.parent() {
                        std::fs::create_dir_all(dir).with_context(|| {
                            format!(
                                "SQLite database `{label}`: cannot create directory {}",
                                dir.display()
                            )
                        })?;
                    }
                    // Open once now so that a bad path fails the start, not the first request.
                    rusqlite::Connection::open(&path).with_context(|| {
                        format!("SQLite database `{label}`: cannot open {}", path.display())
                    })?;
                    Arc::new(Database::File(path))
                }
                DatabaseDefinition::Spin(None) => {
                    let mut registry = memory_registry()
                        .lock()
                        .map_err(|_| anyhow::anyhow!("SQLite database registry is unusable"))?;
                    let key = (app_dir.to_path_buf(), label.clone());
                    match registry.get(&key) {
                        Some(db) => db.clone(),
                        None => {
                            let conn = rusqlite::Connection::open_in_memory()?;
                            let db = Arc::new(Database::Memory(Arc::new(Mutex::new(conn))));
                            registry.insert(key, db.clone());
                            db
                        }
                    }
                }
            };
            allowed.insert(label.clone(), db);
        }
        Ok(Databases { allowed })
    }
}

/// A guest's open connection (the resource behind both versions' `connection`).
pub struct SqliteConnection {
    conn: Arc<Mutex<rusqlite::Connection>>,
}

impl HostState {
    fn sqlite_open(&mut self, database: &str) -> Result<SqliteConnection, v3::Error> {
        let Some(db) = self.component.sqlite.allowed.get(database) else {
            tracing::error!(
                "component `{}` opened SQLite database `{database}`, which it may not use: add \
                 sqlite_databases = [\"{database}\"] to [component.{}] in spin.toml",
                self.component.id,
                self.component.id
            );
            return Err(v3::Error::AccessDenied);
        };
        let conn = match &**db {
            Database::Memory(conn) => conn.clone(),
            Database::File(path) => {
                let conn =
                    rusqlite::Connection::open(path).map_err(|e| v3::Error::Io(e.to_string()))?;
                conn.busy_timeout(std::time::Duration::from_secs(5))
                    .map_err(|e| v3::Error::Io(e.to_string()))?;
                Arc::new(Mutex::new(conn))
            }
        };
        Ok(SqliteConnection { conn })
    }

    fn sqlite_push(&mut self, conn: SqliteConnection) -> Result<u32, v3::Error> {
        self.push_connection(conn)
            .map(|r| r.rep())
            .map_err(|()| v3::Error::Io("too many connections opened".into()))
    }

    fn sqlite_conn(&mut self, rep: u32) -> Result<Arc<Mutex<rusqlite::Connection>>, v3::Error> {
        self.table()
            .get(&Resource::<SqliteConnection>::new_borrow(rep))
            .map(|c| c.conn.clone())
            .map_err(|_| v3::Error::InvalidConnection)
    }

    fn sqlite_drop(&mut self, rep: u32) -> wasmtime::Result<()> {
        self.drop_connection(Resource::<SqliteConnection>::new_own(rep))
    }
}

/// Runs one statement, as Spin does: every row, every column, the byte cap on the result.
fn execute(
    conn: &Mutex<rusqlite::Connection>,
    statement: &str,
    parameters: Vec<v3::Value>,
) -> Result<v3::QueryResult, v3::Error> {
    use rusqlite::types::{Value, ValueRef};
    let io = |e: rusqlite::Error| v3::Error::Io(e.to_string());
    let conn = conn
        .lock()
        .map_err(|_| v3::Error::Io("the database connection is unusable".into()))?;
    let mut stmt = conn.prepare_cached(statement).map_err(io)?;
    let columns: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let params = parameters.into_iter().map(|p| match p {
        v3::Value::Integer(i) => Value::Integer(i),
        v3::Value::Real(r) => Value::Real(r),
        v3::Value::Text(t) => Value::Text(t),
        v3::Value::Blob(b) => Value::Blob(b),
        v3::Value::Null => Value::Null,
    });
    let mut rows = stmt.query(rusqlite::params_from_iter(params)).map_err(io)?;
    let mut out = Vec::new();
    let mut bytes = std::mem::size_of::<v3::QueryResult>();
    while let Some(row) = rows.next().map_err(io)? {
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            let value = match row.get_ref(i).map_err(io)? {
                ValueRef::Null => v3::Value::Null,
                ValueRef::Integer(i) => v3::Value::Integer(i),
                ValueRef::Real(r) => v3::Value::Real(r),
                ValueRef::Text(t) => v3::Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => v3::Value::Blob(b.to_vec()),
            };
            bytes += std::mem::size_of::<v3::Value>()
                + match &value {
                    v3::Value::Text(t) => t.len(),
                    v3::Value::Blob(b) => b.len(),
                    _ => 0,
                };
            values.push(value);
        }
        if bytes > MAX_RESULT_BYTES {
            return Err(v3::Error::Io(format!(
                "query result exceeds limit of {MAX_RESULT_BYTES} bytes"
            )));
        }
        out.push(v3::RowResult { values });
    }
    Ok(v3::QueryResult { columns, rows: out })
}

impl v3::Host for HostState {}

impl v3::HostConnection for HostState {
    fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<v3::Connection>, v3::Error>> {
        Ok(self
            .sqlite_open(&database)
            .and_then(|c| self.sqlite_push(c))
            .map(Resource::new_own))
    }

    fn execute(
        &mut self,
        connection: Resource<v3::Connection>,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<v3::QueryResult, v3::Error>> {
        Ok(self
            .sqlite_conn(connection.rep())
            .and_then(|conn| execute(&conn, &statement, parameters)))
    }

    fn last_insert_rowid(&mut self, connection: Resource<v3::Connection>) -> wasmtime::Result<i64> {
        let conn = self.sqlite_conn(connection.rep())?;
        let conn = conn.lock().map_err(|_| v3::Error::InvalidConnection)?;
        Ok(conn.last_insert_rowid())
    }

    fn changes(&mut self, connection: Resource<v3::Connection>) -> wasmtime::Result<u64> {
        let conn = self.sqlite_conn(connection.rep())?;
        let conn = conn.lock().map_err(|_| v3::Error::InvalidConnection)?;
        Ok(conn.changes())
    }

    fn drop(&mut self, connection: Resource<v3::Connection>) -> wasmtime::Result<()> {
        self.sqlite_drop(connection.rep())
    }
}

fn to_v2_error(e: v3::Error) -> v2::Error {
    match e {
        v3::Error::NoSuchDatabase => v2::Error::NoSuchDatabase,
        v3::Error::AccessDenied => v2::Error::AccessDenied,
        v3::Error::InvalidConnection => v2::Error::InvalidConnection,
        v3::Error::DatabaseFull => v2::Error::DatabaseFull,
        v3::Error::Io(s) => v2::Error::Io(s),
    }
}

fn to_v2_value(v: v3::Value) -> v2::Value {
    match v {
        v3::Value::Integer(i) => v2::Value::Integer(i),
        v3::Value::Real(r) => v2::Value::Real(r),
        v3::Value::Text(t) => v2::Value::Text(t),
        v3::Value::Blob(b) => v2::Value::Blob(b),
        v3::Value::Null => v2::Value::Null,
    }
}

fn from_v2_value(v: v2::Value) -> v3::Value {
    match v {
        v2::Value::Integer(i) => v3::Value::Integer(i),
        v2::Value::Real(r) => v3::Value::Real(r),
        v2::Value::Text(t) => v3::Value::Text(t),
        v2::Value::Blob(b) => v3::Value::Blob(b),
        v2::Value::Null => v3::Value::Null,
    }
}

impl v2::Host for HostState {}

impl v2::HostConnection for HostState {
    fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<v2::Connection>, v2::Error>> {
        Ok(self
            .sqlite_open(&database)
            .and_then(|c| self.sqlite_push(c))
            .map(Resource::new_own)
            .map_err(to_v2_error))
    }

    fn execute(
        &mut self,
        connection: Resource<v2::Connection>,
        statement: String,
        parameters: Vec<v2::Value>,
    ) -> wasmtime::Result<Result<v2::QueryResult, v2::Error>> {
        let params = parameters.into_iter().map(from_v2_value).collect();
        Ok(self
            .sqlite_conn(connection.rep())
            .and_then(|conn| execute(&conn, &statement, params))
            .map(|r| v2::QueryResult {
                columns: r.columns,
                rows: r
                    .rows
                    .into_iter()
                    .map(|row| v2::RowResult {
                        values: row.values.into_iter().map(to_v2_value).collect(),
                    })
                    .collect(),
            })
            .map_err(to_v2_error))
    }

    fn drop(&mut self, connection: Resource<v2::Connection>) -> wasmtime::Result<()> {
        self.sqlite_drop(connection.rep())
    }
}

// ---- spin:sqlite/sqlite@3.1.0 (Spin 4) ----
//
// 3.0.0's functions, plus `async func` forms of each (`open-async`, `execute-async`,
// `last-insert-rowid-async`, `changes-async`) with the same rules and errors; the types are
// 3.0.0's. `execute-async` returns the columns and a stream of the rows (read under the same
// byte cap as `execute`), and a future resolving once they are all delivered.

mod v3_1 {
    use wasmtime::component::{FutureReader, Resource, StreamReader};

    use super::v3::{self, HostConnection as _};
    use super::HostState;
    use crate::host::{stream_and_future, with_host, Accessor};

    pub(super) type Conn = Resource<v3::Connection>;
    type Opened = wasmtime::Result<Result<Conn, v3::Error>>;
    type Rows = (
        Vec<String>,
        StreamReader<v3::RowResult>,
        FutureReader<Result<(), v3::Error>>,
    );

    pub(super) fn open(h: &mut HostState, database: String) -> Opened {
        h.open(database)
    }

    pub(super) fn execute(
        h: &mut HostState,
        this: Conn,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<v3::QueryResult, v3::Error>> {
        h.execute(this, statement, parameters)
    }

    pub(super) fn last_insert_rowid(h: &mut HostState, this: Conn) -> wasmtime::Result<i64> {
        h.last_insert_rowid(this)
    }

    pub(super) fn changes(h: &mut HostState, this: Conn) -> wasmtime::Result<u64> {
        h.changes(this)
    }

    pub(super) fn drop(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.sqlite_drop(this.rep())
    }

    pub(super) async fn open_async(acc: &Accessor, database: String) -> Opened {
        with_host(acc, |h| h.open(database))
    }

    pub(super) async fn execute_async(
        acc: &Accessor,
        this: Conn,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<Rows, v3::Error>> {
        let conn = match with_host(acc, |h| h.sqlite_conn(this.rep())) {
            Ok(conn) => conn,
            Err(e) => return Ok(Err(e)),
        };
        match super::execute(&conn, &statement, parameters) {
            Ok(result) => {
                let (rows, done) = stream_and_future(acc, result.rows, Ok(()))?;
                Ok(Ok((result.columns, rows, done)))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    pub(super) async fn last_insert_rowid_async(
        acc: &Accessor,
        this: Conn,
    ) -> wasmtime::Result<i64> {
        with_host(acc, |h| h.last_insert_rowid(this))
    }

    pub(super) async fn changes_async(acc: &Accessor, this: Conn) -> wasmtime::Result<u64> {
        with_host(acc, |h| h.changes(this))
    }
}

/// Adds `spin:sqlite/sqlite@3.1.0`.
pub(super) fn add_spin4_to_linker(
    linker: &mut wasmtime::component::Linker<crate::InstanceState>,
) -> anyhow::Result<()> {
    use v3_1::Conn;
    const INTERFACE: &str = "sqlite";
    let mut inst = linker.instance("spin:sqlite/sqlite@3.1.0")?;
    host_resource!(inst, "connection", SqliteConnection, v3_1::drop);
    sync_func!(inst, INTERFACE, "[static]connection.open", v3_1::open, (database: String));
    sync_func!(inst, INTERFACE, "[method]connection.execute", v3_1::execute, (this: Conn, statement: String, parameters: Vec<v3::Value>));
    sync_func!(inst, INTERFACE, "[method]connection.last-insert-rowid", v3_1::last_insert_rowid, (this: Conn));
    sync_func!(inst, INTERFACE, "[method]connection.changes", v3_1::changes, (this: Conn));
    async_func!(inst, INTERFACE, "[static]connection.open-async", v3_1::open_async, (database: String));
    async_func!(inst, INTERFACE, "[method]connection.execute-async", v3_1::execute_async, (this: Conn, statement: String, parameters: Vec<v3::Value>));
    async_func!(inst, INTERFACE, "[method]connection.last-insert-rowid-async", v3_1::last_insert_rowid_async, (this: Conn));
    async_func!(inst, INTERFACE, "[method]connection.changes-async", v3_1::changes_async, (this: Conn));
    Ok(())
}
