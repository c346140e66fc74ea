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
//! A remote libSQL database (Turso, `sqld`) is `type = "libsql"` with Spin's `url` and `token`;
//! see [`libsql`].
//!
//! Each guest `open` gets its own SQLite connection to the file (so `changes` and
//! `last-insert-rowid` are the guest connection's own, as in Spin); an in-memory database is
//! one connection shared by the process, or it would be empty on every open.
//!
//! What a guest's SQL may do (every connection, see [`authorize`]):
//! - `ATTACH` (and `VACUUM INTO`, which attaches its output file) only a temporary (`''`) or
//!   in-memory (`':memory:'`) database, as Spin: a file would be created or opened anywhere
//!   the runtime can write, other components' stores included. Spin's runtime-config key
//!   `allow_attach_file = true` in `[sqlite_database.<label>]` lifts this for that database.
//!   A file name given as an expression (`ATTACH 'a' || 'b'`) is refused too.
//! - no `PRAGMA` that changes process-wide state (`temp_store_directory`,
//!   `data_store_directory`, `soft_heap_limit`, `hard_heap_limit`): they would move or
//!   starve every other database of the process.
//! - strings and blobs up to [`MAX_RESULT_BYTES`], statements up to [`MAX_SQL_BYTES`]
//!   (`sqlite3_limit`).
//!
//! Statements run on tokio's blocking threads, at most [`MAX_CONCURRENT_STATEMENTS`] at once,
//! never on the async workers that serve requests. A statement whose host call is abandoned
//! (the request deadline passed, the instance was dropped, the process is shutting down) is
//! interrupted by SQLite's progress handler within [`PROGRESS_OPS`] virtual-machine steps, so
//! a runaway query (`WITH RECURSIVE` without end) ends with its request.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::sqlite as v2;
use super::bindings::spin::sqlite::sqlite as v3;
use super::feature::{FeatureTable, HostFeature, Labelled};
use super::{HostView, MAX_OPEN_CONNECTIONS};

pub mod libsql;

/// File name of the default database inside the state directory (Spin's name).
pub const DEFAULT_DATABASE_FILE: &str = "sqlite_db.db";

/// A query result may hold at most this many bytes (Spin's `MAX_HOST_BUFFERED_BYTES`); also
/// the largest string or blob SQLite builds (`SQLITE_LIMIT_LENGTH`), since a larger value
/// could never be returned.
pub const MAX_RESULT_BYTES: usize = 128 << 20;

/// The longest SQL statement a guest may run (`SQLITE_LIMIT_SQL_LENGTH`; SQLite's default
/// is 1 GB). Values belong in parameters.
pub const MAX_SQL_BYTES: usize = 16 << 20;

/// At most this many SQLite statements run at once in the process, each on a blocking
/// thread; further calls wait (asynchronously) for one to finish.
pub const MAX_CONCURRENT_STATEMENTS: usize = 16;

/// SQLite virtual-machine steps between two checks whether the statement's host call was
/// abandoned (`sqlite3_progress_handler`).
pub const PROGRESS_OPS: i32 = 1000;

/// `PRAGMA`s whose setting changes state shared by every connection of the process.
const PROCESS_WIDE_PRAGMAS: &[&str] = &[
    "temp_store_directory",
    "data_store_directory",
    "soft_heap_limit",
    "hard_heap_limit",
];

/// Where a database label lives (the `[sqlite_database.<label>]` tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseDefinition {
    /// A local SQLite database.
    Spin {
        /// The database file (`None`: in memory, lost on exit).
        path: Option<PathBuf>,
        /// Spin's `allow_attach_file`: the guest may `ATTACH` (and `VACUUM INTO`) files.
        allow_attach_file: bool,
    },
    /// A remote libSQL database (`type = "libsql"`).
    Libsql(libsql::LibsqlDefinition),
}

/// Why a SQLite call failed, for either backend; the guest gets it as the interface's
/// `error` ([`From`] below), its text in `io`.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// The guest's SQL did something the rules of this module refuse.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The statement's host call was abandoned while it ran.
    #[error(
        "the statement was interrupted: its request ended (deadline, or the instance stopped) \
         while it ran"
    )]
    Interrupted,
    /// The rows are larger than [`MAX_RESULT_BYTES`].
    #[error("query result exceeds limit of {MAX_RESULT_BYTES} bytes")]
    ResultTooLarge,
    /// SQLite's own error (a local database).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// A remote libSQL database's error.
    #[error(transparent)]
    Libsql(#[from] libsql::LibsqlError),
    /// The host is shutting down.
    #[error("the SQLite host is shutting down")]
    ShuttingDown,
    /// The blocking thread running the call failed.
    #[error("the SQLite statement did not finish: {0}")]
    WorkerLost(#[source] tokio::task::JoinError),
    /// The guest holds too many connections.
    #[error("too many connections opened")]
    TooManyConnections,
    /// The database is not in the component's `sqlite_databases`.
    #[error("access denied")]
    AccessDenied,
    /// The guest's connection handle is not (or no longer) valid.
    #[error("invalid connection")]
    InvalidConnection,
}

impl From<SqliteError> for v3::Error {
    fn from(e: SqliteError) -> Self {
        match e {
            SqliteError::AccessDenied => v3::Error::AccessDenied,
            SqliteError::InvalidConnection => v3::Error::InvalidConnection,
            SqliteError::Sqlite(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) =>
            {
                v3::Error::Io(SqliteError::Interrupted.to_string())
            }
            other => v3::Error::Io(other.to_string()),
        }
    }
}

/// What the authorizer refused in a guest's statement, and how to allow it where possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `ATTACH` (or `VACUUM INTO`) of a file.
    #[error(
        "ATTACH DATABASE (or VACUUM INTO) of the file {file} is not allowed: {}",
        attach_rule(label)
    )]
    AttachFile {
        /// The file name, quoted and cut ([`shown`]).
        file: String,
        /// The database label.
        label: String,
    },
    /// `ATTACH` of a file name computed by an expression.
    #[error(
        "ATTACH DATABASE with a file name computed by an expression is not allowed: {}",
        attach_rule(label)
    )]
    AttachExpression {
        /// The database label.
        label: String,
    },
    /// A `PRAGMA` that changes process-wide state.
    #[error(
        "PRAGMA {pragma} is not allowed: it changes state shared by every database of the \
         process"
    )]
    ProcessWidePragma {
        /// The pragma, lower-cased.
        pragma: String,
    },
}

/// The attachment rule and how to lift it for database `label`.
fn attach_rule(label: &str) -> String {
    format!(
        "a component may attach only temporary ('') and in-memory (':memory:') databases (set \
         allow_attach_file = true in [sqlite_database.{label}] of the runtime config to let it \
         attach files)"
    )
}

/// The SQLite host feature: `[sqlite_database.<label>]`, the databases a component lists
/// (`sqlite_databases`), and `fermyon:spin/sqlite@2.0.0`, `spin:sqlite@3.0.0` and Spin 4's
/// `spin:sqlite@3.1.0` (implemented on [`ComponentSqlite`], which holds the guest's
/// connections).
pub struct Sqlite;

/// The databases one component may open, and one instance's connections to them.
#[derive(Clone)]
pub struct ComponentSqlite {
    component_id: Arc<str>,
    databases: Arc<Databases>,
    /// Open connections, at most [`MAX_OPEN_CONNECTIONS`].
    table: FeatureTable,
}

impl HostFeature for Sqlite {
    const SECTIONS: &'static [&'static str] = &["sqlite_database"];
    type Config = BTreeMap<String, DatabaseDefinition>;
    type App = Labelled<DatabaseDefinition>;
    type Instance = ComponentSqlite;

    fn parse(
        source: &super::runtime_config::Source<'_>,
    ) -> anyhow::Result<BTreeMap<String, DatabaseDefinition>> {
        Labelled::parse(source, "sqlite_database", parse_runtime_config)
    }

    fn build(
        config: &BTreeMap<String, DatabaseDefinition>,
        cx: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<Self::App> {
        Labelled::build(config, cx)
    }

    fn instance(
        app: &Self::App,
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentSqlite> {
        let component = cx.component;
        let labels: BTreeSet<String> = component.sqlite_databases.iter().cloned().collect();
        Ok(ComponentSqlite {
            component_id: component.id.as_str().into(),
            databases: Arc::new(Databases::open(
                &component.id,
                &labels,
                &app.definitions,
                &app.state_dir,
                &app.app_dir,
            )?),
            table: FeatureTable::default(),
        })
    }

    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentSqlite,
    ) -> anyhow::Result<()> {
        type D = wasmtime::component::HasSelf<ComponentSqlite>;
        v2::add_to_linker::<_, D>(linker, get)?;
        v3::add_to_linker::<_, D>(linker, get)?;
        add_spin4_to_linker(linker)
    }
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
            "libsql" => {
                let def = libsql::parse_definition(def, &key, origin)?;
                out.insert(label.clone(), DatabaseDefinition::Libsql(def));
                continue;
            }
            other => anyhow::bail!(
                "{origin}: `{key}.type` = \"{other}\" is not a database type; use \"spin\" \
                 (a local SQLite file) or \"libsql\" (a libSQL server, with `url` and `token`)"
            ),
        }
        for field in def.keys() {
            if !["type", "path", "allow_attach_file"].contains(&field.as_str()) {
                anyhow::bail!(
                    "{origin}: `{key}.{field}` is not a field of a \"spin\" database (it takes \
                     `path` and `allow_attach_file`)"
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
        let allow_attach_file = match def.get("allow_attach_file") {
            None => false,
            Some(v) => v.as_bool().with_context(|| {
                format!("{origin}: `{key}.allow_attach_file` must be true or false")
            })?,
        };
        out.insert(
            label.clone(),
            DatabaseDefinition::Spin {
                path,
                allow_attach_file,
            },
        );
    }
    Ok(out)
}

/// One SQLite connection with the rules above applied.
struct Sql {
    conn: rusqlite::Connection,
    /// Why the authorizer refused something in the statement being prepared.
    refused: Arc<Mutex<Option<Refusal>>>,
}

impl std::fmt::Debug for Sql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sql").finish_non_exhaustive()
    }
}

/// A connection shared by the guest handles (and, in memory, the instances) using it; a
/// statement holds it for its whole run.
type SharedSql = Arc<tokio::sync::Mutex<Sql>>;

/// Whether the guest's SQL may do `action`; `Err` says what was refused and how to allow
/// it where that is possible.
fn authorize(action: AuthAction<'_>, label: &str, allow_attach_file: bool) -> Result<(), Refusal> {
    match action {
        AuthAction::Attach {
            filename: "" | ":memory:",
        } => Ok(()),
        _ if allow_attach_file
            && matches!(
                action,
                AuthAction::Attach { .. }
                    | AuthAction::Unknown {
                        code: rusqlite::ffi::SQLITE_ATTACH,
                        ..
                    }
            ) =>
        {
            Ok(())
        }
        AuthAction::Attach { filename } => Err(Refusal::AttachFile {
            file: shown(filename),
            label: label.to_string(),
        }),
        AuthAction::Unknown {
            code: rusqlite::ffi::SQLITE_ATTACH,
            ..
        } => Err(Refusal::AttachExpression {
            label: label.to_string(),
        }),
        AuthAction::Pragma {
            pragma_name,
            pragma_value: Some(_),
        } if PROCESS_WIDE_PRAGMAS
            .iter()
            .any(|p| p.eq_ignore_ascii_case(pragma_name)) =>
        {
            Err(Refusal::ProcessWidePragma {
                pragma: pragma_name.to_ascii_lowercase(),
            })
        }
        _ => Ok(()),
    }
}

/// A guest-chosen string for an error: quoted, escaped, at most 200 characters.
fn shown(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
        None => format!("{text:?}"),
    }
}

/// Opens a connection to `path` (`None`: a new in-memory database) with this module's rules.
fn connect(path: Option<&Path>, label: &str, allow_attach_file: bool) -> rusqlite::Result<Sql> {
    use rusqlite::limits::Limit;
    let conn = match path {
        Some(path) => rusqlite::Connection::open(path)?,
        None => rusqlite::Connection::open_in_memory()?,
    };
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_RESULT_BYTES as i32);
    conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES as i32);
    let refused = Arc::new(Mutex::new(None));
    let record = refused.clone();
    let label = label.to_string();
    conn.authorizer(Some(move |ctx: AuthContext<'_>| {
        match authorize(ctx.action, &label, allow_attach_file) {
            Ok(()) => Authorization::Allow,
            Err(why) => {
                *record.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                Authorization::Deny
            }
        }
    }));
    Ok(Sql { conn, refused })
}

/// The process-wide bound on statements running at once.
fn statement_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| tokio::sync::Semaphore::new(MAX_CONCURRENT_STATEMENTS))
}

/// Sets its flag when dropped: the host call waiting for a statement was abandoned.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` on `sql` on a blocking thread (one of [`MAX_CONCURRENT_STATEMENTS`]); if this
/// future is dropped before it finishes, the running statement is interrupted.
async fn run_blocking<T: Send + 'static>(
    sql: &SharedSql,
    work: impl FnOnce(&mut Sql) -> T + Send + 'static,
) -> Result<T, SqliteError> {
    let slot = statement_slots()
        .acquire()
        .await
        .map_err(|_| SqliteError::ShuttingDown)?;
    let mut sql = sql.clone().lock_owned().await;
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon = AbandonOnDrop(abandoned.clone());
    let task = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        sql.conn.progress_handler(
            PROGRESS_OPS,
            Some(move || abandoned.load(Ordering::Relaxed)),
        );
        let out = work(&mut sql);
        sql.conn.progress_handler(0, None::<fn() -> bool>);
        out
    });
    task.await.map_err(SqliteError::WorkerLost)
}

/// An opened database label.
#[derive(Debug)]
enum Database {
    File {
        path: PathBuf,
        label: String,
        allow_attach_file: bool,
    },
    Memory(SharedSql),
    Libsql(Arc<libsql::LibsqlDatabase>),
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
                None if label == "default" => DatabaseDefinition::Spin {
                    path: Some(state_dir.join(DEFAULT_DATABASE_FILE)),
                    allow_attach_file: false,
                },
                None => anyhow::bail!(
                    "component `{component_id}` uses SQLite database `{label}` \
                     (sqlite_databases), which is not defined: add [sqlite_database.{label}] \
                     with type = \"spin\" to the runtime config, or use \"default\""
                ),
            };
            let (path, allow_attach_file) = match def {
                DatabaseDefinition::Spin {
                    path,
                    allow_attach_file,
                } => (path, allow_attach_file),
                DatabaseDefinition::Libsql(def) => {
                    let db = Database::Libsql(libsql::LibsqlDatabase::new(label, def));
                    allowed.insert(label.clone(), Arc::new(db));
                    continue;
                }
            };
            let db = match path {
                Some(path) => {
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
                    Arc::new(Database::File {
                        path,
                        label: label.clone(),
                        allow_attach_file,
                    })
                }
                None => {
                    let mut registry = memory_registry()
                        .lock()
                        .map_err(|_| anyhow::anyhow!("SQLite database registry is unusable"))?;
                    let key = (app_dir.to_path_buf(), label.clone());
                    match registry.get(&key) {
                        Some(db) => db.clone(),
                        None => {
                            let sql = connect(None, label, allow_attach_file)?;
                            let db =
                                Arc::new(Database::Memory(Arc::new(tokio::sync::Mutex::new(sql))));
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
    backend: Backend,
}

/// Where a guest connection's statements run.
#[derive(Clone)]
enum Backend {
    /// A local database's connection.
    Local(SharedSql),
    /// A stream on a libSQL server.
    Libsql(Arc<libsql::LibsqlConnection>),
}

impl ComponentSqlite {
    /// The database `database` if the component lists it, else `access-denied` (logged with
    /// the fix).
    fn sqlite_database(&self, database: &str) -> Result<Arc<Database>, SqliteError> {
        self.databases
            .allowed
            .get(database)
            .cloned()
            .ok_or_else(|| {
                tracing::error!(
                    "component `{}` opened SQLite database `{database}`, which it may not \
                     use: add sqlite_databases = [\"{database}\"] to [component.{}] in \
                     spin.toml",
                    self.component_id,
                    self.component_id
                );
                SqliteError::AccessDenied
            })
    }

    async fn sqlite_open(&mut self, database: &str) -> Result<u32, SqliteError> {
        let conn = open_database(self.sqlite_database(database)?).await?;
        self.sqlite_push(conn)
    }

    fn sqlite_push(&mut self, conn: SqliteConnection) -> Result<u32, SqliteError> {
        self.table
            .push_counted(conn, MAX_OPEN_CONNECTIONS)
            .map(|r| r.rep())
            .map_err(|_| SqliteError::TooManyConnections)
    }

    fn sqlite_conn(&mut self, rep: u32) -> Result<Backend, SqliteError> {
        self.table
            .get()
            .get(&Resource::<SqliteConnection>::new_borrow(rep))
            .map(|c| c.backend.clone())
            .map_err(|_| SqliteError::InvalidConnection)
    }

    fn sqlite_drop(&mut self, rep: u32) -> wasmtime::Result<()> {
        self.table
            .delete_counted(Resource::<SqliteConnection>::new_own(rep))
            .map(drop)
    }
}

/// A new guest connection to `db` (a file is opened on a blocking thread; the in-memory
/// database's one connection is shared; a libSQL stream opens with its first statement).
async fn open_database(db: Arc<Database>) -> Result<SqliteConnection, SqliteError> {
    let (path, label, allow_attach_file) = match &*db {
        Database::Memory(sql) => {
            return Ok(SqliteConnection {
                backend: Backend::Local(sql.clone()),
            })
        }
        Database::Libsql(remote) => {
            return Ok(SqliteConnection {
                backend: Backend::Libsql(Arc::new(libsql::LibsqlConnection::new(remote.clone()))),
            })
        }
        Database::File {
            path,
            label,
            allow_attach_file,
        } => (path.clone(), label.clone(), *allow_attach_file),
    };
    let opened =
        tokio::task::spawn_blocking(move || connect(Some(&path), &label, allow_attach_file))
            .await
            .map_err(SqliteError::WorkerLost)??;
    Ok(SqliteConnection {
        backend: Backend::Local(Arc::new(tokio::sync::Mutex::new(opened))),
    })
}

/// Runs one statement, as Spin does (every row, every column, the byte cap on the result):
/// on a local database off the async workers and interrupted if the call is abandoned.
async fn execute(
    backend: Backend,
    statement: String,
    parameters: Vec<v3::Value>,
) -> Result<v3::QueryResult, SqliteError> {
    let sql = match backend {
        Backend::Local(sql) => sql,
        Backend::Libsql(remote) => return remote.execute(statement, parameters).await,
    };
    run_blocking(&sql, move |sql| {
        sql.refused.lock().unwrap_or_else(|p| p.into_inner()).take();
        let result = execute_on(&sql.conn, &statement, parameters);
        match (
            result,
            sql.refused.lock().unwrap_or_else(|p| p.into_inner()).take(),
        ) {
            (Err(_), Some(why)) => Err(why.into()),
            (result, _) => result,
        }
    })
    .await?
}

/// [`execute`]'s work on the blocking thread.
fn execute_on(
    conn: &rusqlite::Connection,
    statement: &str,
    parameters: Vec<v3::Value>,
) -> Result<v3::QueryResult, SqliteError> {
    use rusqlite::types::{Value, ValueRef};
    let mut stmt = conn.prepare_cached(statement)?;
    let columns: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let params = parameters.into_iter().map(|p| match p {
        v3::Value::Integer(i) => Value::Integer(i),
        v3::Value::Real(r) => Value::Real(r),
        v3::Value::Text(t) => Value::Text(t),
        v3::Value::Blob(b) => Value::Blob(b),
        v3::Value::Null => Value::Null,
    });
    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
    let mut out = Vec::new();
    let mut bytes = std::mem::size_of::<v3::QueryResult>();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            let value = match row.get_ref(i)? {
                ValueRef::Null => v3::Value::Null,
                ValueRef::Integer(i) => v3::Value::Integer(i),
                ValueRef::Real(r) => v3::Value::Real(r),
                ValueRef::Text(t) => v3::Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => v3::Value::Blob(b.to_vec()),
            };
            bytes += value_bytes(&value);
            values.push(value);
        }
        if bytes > MAX_RESULT_BYTES {
            return Err(SqliteError::ResultTooLarge);
        }
        out.push(v3::RowResult { values });
    }
    Ok(v3::QueryResult { columns, rows: out })
}

/// What `value` counts toward a result's [`MAX_RESULT_BYTES`] (its size and its bytes).
fn value_bytes(value: &v3::Value) -> usize {
    std::mem::size_of::<v3::Value>()
        + match value {
            v3::Value::Text(t) => t.len(),
            v3::Value::Blob(b) => b.len(),
            _ => 0,
        }
}

/// `last-insert-rowid` of a connection (after any statement running on it).
async fn last_insert_rowid(backend: Backend) -> i64 {
    match backend {
        Backend::Local(sql) => sql.lock().await.conn.last_insert_rowid(),
        Backend::Libsql(remote) => remote.last_insert_rowid().await,
    }
}

/// `changes` of a connection (after any statement running on it).
async fn changes(backend: Backend) -> u64 {
    match backend {
        Backend::Local(sql) => sql.lock().await.conn.changes(),
        Backend::Libsql(remote) => remote.changes().await,
    }
}

impl v3::Host for ComponentSqlite {}

impl v3::HostConnection for ComponentSqlite {
    async fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<v3::Connection>, v3::Error>> {
        Ok(self
            .sqlite_open(&database)
            .await
            .map(Resource::new_own)
            .map_err(Into::into))
    }

    async fn execute(
        &mut self,
        connection: Resource<v3::Connection>,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<v3::QueryResult, v3::Error>> {
        Ok(match self.sqlite_conn(connection.rep()) {
            Ok(backend) => execute(backend, statement, parameters).await,
            Err(e) => Err(e),
        }
        .map_err(Into::into))
    }

    async fn last_insert_rowid(
        &mut self,
        connection: Resource<v3::Connection>,
    ) -> wasmtime::Result<i64> {
        Ok(last_insert_rowid(self.sqlite_conn(connection.rep())?).await)
    }

    async fn changes(&mut self, connection: Resource<v3::Connection>) -> wasmtime::Result<u64> {
        Ok(changes(self.sqlite_conn(connection.rep())?).await)
    }

    async fn drop(&mut self, connection: Resource<v3::Connection>) -> wasmtime::Result<()> {
        self.sqlite_drop(connection.rep())
    }
}

fn to_v2_error(e: SqliteError) -> v2::Error {
    match v3::Error::from(e) {
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

impl v2::Host for ComponentSqlite {}

impl v2::HostConnection for ComponentSqlite {
    async fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<v2::Connection>, v2::Error>> {
        Ok(self
            .sqlite_open(&database)
            .await
            .map(Resource::new_own)
            .map_err(to_v2_error))
    }

    async fn execute(
        &mut self,
        connection: Resource<v2::Connection>,
        statement: String,
        parameters: Vec<v2::Value>,
    ) -> wasmtime::Result<Result<v2::QueryResult, v2::Error>> {
        let params = parameters.into_iter().map(from_v2_value).collect();
        let result = match self.sqlite_conn(connection.rep()) {
            Ok(backend) => execute(backend, statement, params).await,
            Err(e) => Err(e),
        };
        Ok(result
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

    async fn drop(&mut self, connection: Resource<v2::Connection>) -> wasmtime::Result<()> {
        self.sqlite_drop(connection.rep())
    }
}

// ---- spin:sqlite/sqlite@3.1.0 (Spin 4) ----
//
// 3.0.0's functions, plus `async func` forms of each (`open-async`, `execute-async`,
// `last-insert-rowid-async`, `changes-async`) with the same rules and errors; the types are
// 3.0.0's. `execute-async` returns the columns and a stream of the rows (read under the same
// byte cap as `execute`), and a future resolving once they are all delivered. The plain
// functions block the guest (on its fiber), never the thread.

mod v3_1 {
    use wasmtime::component::{FutureReader, Resource, StreamReader};

    use super::v3::{self, HostConnection as _};
    use super::ComponentSqlite;
    use crate::host::{stream_and_future, with_host, Accessor, HostState, HostView};

    pub(super) type Conn = Resource<v3::Connection>;
    type Opened = wasmtime::Result<Result<Conn, v3::Error>>;
    type Rows = (
        Vec<String>,
        StreamReader<v3::RowResult>,
        FutureReader<Result<(), v3::Error>>,
    );

    /// Runs `f` on the instance's SQLite state (between awaits).
    fn with_sqlite<T: HostView, R>(
        acc: &Accessor<T>,
        f: impl FnOnce(&mut ComponentSqlite) -> R,
    ) -> R {
        with_host(acc, |h| f(&mut h.features.sqlite))
    }

    pub(super) async fn open(h: &mut HostState, database: String) -> Opened {
        h.features.sqlite.open(database).await
    }

    pub(super) async fn execute(
        h: &mut HostState,
        this: Conn,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<v3::QueryResult, v3::Error>> {
        h.features.sqlite.execute(this, statement, parameters).await
    }

    pub(super) async fn last_insert_rowid(h: &mut HostState, this: Conn) -> wasmtime::Result<i64> {
        h.features.sqlite.last_insert_rowid(this).await
    }

    pub(super) async fn changes(h: &mut HostState, this: Conn) -> wasmtime::Result<u64> {
        h.features.sqlite.changes(this).await
    }

    pub(super) fn drop(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.features.sqlite.sqlite_drop(this.rep())
    }

    pub(super) async fn open_async<T: HostView>(acc: &Accessor<T>, database: String) -> Opened {
        let db = match with_sqlite(acc, |h| h.sqlite_database(&database)) {
            Ok(db) => db,
            Err(e) => return Ok(Err(e.into())),
        };
        let conn = match super::open_database(db).await {
            Ok(conn) => conn,
            Err(e) => return Ok(Err(e.into())),
        };
        Ok(with_sqlite(acc, |h| h.sqlite_push(conn))
            .map(Resource::new_own)
            .map_err(Into::into))
    }

    pub(super) async fn execute_async<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> wasmtime::Result<Result<Rows, v3::Error>> {
        let backend = match with_sqlite(acc, |h| h.sqlite_conn(this.rep())) {
            Ok(backend) => backend,
            Err(e) => return Ok(Err(e.into())),
        };
        match super::execute(backend, statement, parameters).await {
            Ok(result) => {
                let (rows, done) = stream_and_future(acc, result.rows, Ok(()))?;
                Ok(Ok((result.columns, rows, done)))
            }
            Err(e) => Ok(Err(e.into())),
        }
    }

    pub(super) async fn last_insert_rowid_async<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
    ) -> wasmtime::Result<i64> {
        let backend = with_sqlite(acc, |h| h.sqlite_conn(this.rep()))?;
        Ok(super::last_insert_rowid(backend).await)
    }

    pub(super) async fn changes_async<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
    ) -> wasmtime::Result<u64> {
        let backend = with_sqlite(acc, |h| h.sqlite_conn(this.rep()))?;
        Ok(super::changes(backend).await)
    }
}

/// Adds `spin:sqlite/sqlite@3.1.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    use v3_1::Conn;
    const INTERFACE: &str = "sqlite";
    let mut inst = linker.instance("spin:sqlite/sqlite@3.1.0")?;
    host_resource!(inst, "connection", SqliteConnection, v3_1::drop);
    blocking_func!(inst, INTERFACE, "[static]connection.open", v3_1::open, (database: String));
    blocking_func!(inst, INTERFACE, "[method]connection.execute", v3_1::execute, (this: Conn, statement: String, parameters: Vec<v3::Value>));
    blocking_func!(inst, INTERFACE, "[method]connection.last-insert-rowid", v3_1::last_insert_rowid, (this: Conn));
    blocking_func!(inst, INTERFACE, "[method]connection.changes", v3_1::changes, (this: Conn));
    async_func!(inst, INTERFACE, "[static]connection.open-async", v3_1::open_async, (database: String));
    async_func!(inst, INTERFACE, "[method]connection.execute-async", v3_1::execute_async, (this: Conn, statement: String, parameters: Vec<v3::Value>));
    async_func!(inst, INTERFACE, "[method]connection.last-insert-rowid-async", v3_1::last_insert_rowid_async, (this: Conn));
    async_func!(inst, INTERFACE, "[method]connection.changes-async", v3_1::changes_async, (this: Conn));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_attach_file_is_spins_runtime_config_key() {
        let parse = |text: &str| {
            let value: toml::Value = toml::from_str(text).unwrap();
            parse_runtime_config(&value, Path::new("/app"), "runtime-config.toml")
        };
        let defs = parse("[a]\ntype = \"spin\"\npath = \"a.db\"\nallow_attach_file = true\n[b]\ntype = \"spin\"\n")
            .unwrap();
        assert_eq!(
            defs["a"],
            DatabaseDefinition::Spin {
                path: Some(PathBuf::from("/app/a.db")),
                allow_attach_file: true
            }
        );
        assert_eq!(
            defs["b"],
            DatabaseDefinition::Spin {
                path: None,
                allow_attach_file: false
            }
        );
        let e = parse("[a]\ntype = \"spin\"\nallow_attach_file = \"yes\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("`sqlite_database.a.allow_attach_file` must be true or false"),
            "{e}"
        );
    }

    #[test]
    fn the_authorizer_refuses_files_and_process_wide_pragmas() {
        let attach = |filename| AuthAction::Attach { filename };
        let computed = AuthAction::Unknown {
            code: rusqlite::ffi::SQLITE_ATTACH,
            arg1: None,
            arg2: None,
        };
        let pragma = |pragma_name, pragma_value| AuthAction::Pragma {
            pragma_name,
            pragma_value,
        };
        assert!(authorize(attach(""), "db", false).is_ok());
        assert!(authorize(attach(":memory:"), "db", false).is_ok());
        let e = authorize(attach("/etc/x.db"), "db", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"/etc/x.db\"") && e.contains("[sqlite_database.db]"),
            "{e}"
        );
        assert!(authorize(computed, "db", false).is_err());
        assert!(authorize(attach("/etc/x.db"), "db", true).is_ok());
        assert!(authorize(computed, "db", true).is_ok());
        assert!(authorize(pragma("TEMP_STORE_DIRECTORY", Some("/x")), "db", true).is_err());
        assert!(authorize(pragma("hard_heap_limit", Some("1")), "db", false).is_err());
        assert!(authorize(pragma("temp_store_directory", None), "db", false).is_ok());
        assert!(authorize(pragma("journal_mode", Some("wal")), "db", false).is_ok());
        let long = "x".repeat(5000);
        let e = authorize(attach(&long), "db", false)
            .unwrap_err()
            .to_string();
        assert!(e.len() < 700 && e.contains("(5000 bytes)"), "{e}");
    }
}
