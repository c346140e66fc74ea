//! Key-value stores: SQLite (Spin's `type = "spin"`), Redis (`type = "redis"`, see
//! [`RedisStore`]), AWS DynamoDB (`type = "aws_dynamo"`, see [`DynamoStore`]) and Azure
//! Cosmos DB (`type = "azure_cosmos"`, see [`CosmosStore`]), the runtime
//! config that declares them, and the guest interfaces `fermyon:spin/key-value@2.0.0` (and
//! Spin 4's `spin:key-value@3.0.0`) and `wasi:keyvalue/{store,batch,atomics}@0.2.0-draft2`.
//!
//! Every backend implements [`KeyValueBackend`], whose calls the guest interfaces await: a
//! guest waiting for its store holds no async worker, and calls of concurrent requests are in
//! flight together (Redis: one multiplexed connection per store; SQLite: each call on tokio's
//! blocking pool; DynamoDB: one HTTPS exchange per call). Errors are typed per backend
//! ([`KvError`]) and reach the guest as `other(message)` naming the store.
//!
//! Store `default` lives at `<state dir>/sqlite_key_value.db` (`/.spin/sqlite_key_value.db`
//! for an app at `/`) unless the runtime config (`/runtime-config.toml`) redefines it:
//!
//! ```toml
//! [key_value_store.default]
//! type = "spin"
//! path = "data/kv.db"   # relative to the runtime config file; omitted: in memory
//! ```
//!
//! The on-disk layout is Spin's (`spin_key_value` table keyed by store label and key), so a
//! database written by `spin up` can be read here and the other way round.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rusqlite::{params, Connection, OptionalExtension as _};
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::key_value as spin_kv;
use super::bindings::wasi::keyvalue::store as wasi_store;
use super::bindings::wasi::keyvalue::{atomics as wasi_atomics, batch as wasi_batch};
use super::feature::{FeatureTable, HostFeature, Labelled};
use super::HostView;

mod cosmos;
mod dynamo;
mod redis_store;
pub use cosmos::{CosmosDefinition, CosmosKvError, CosmosStore};
pub use dynamo::{DynamoDefinition, DynamoKvError, DynamoStore};
pub use redis_store::{RedisKvError, RedisStore};

/// File name of the default store inside the state directory (as Spin names it).
pub const DEFAULT_STORE_FILE: &str = "sqlite_key_value.db";

/// At most this many stores may be open at once in one instance (Spin's `store-table-full`).
const MAX_OPEN_STORES: usize = 256;

/// How a store label is backed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreDefinition {
    /// SQLite database file (`None`: in memory, lost on exit).
    Sqlite(Option<PathBuf>),
    /// A Redis server (`url`).
    Redis(String),
    /// An AWS DynamoDB table (`type = "aws_dynamo"`).
    Dynamo(DynamoDefinition),
    /// An Azure Cosmos DB container (`type = "azure_cosmos"`).
    Cosmos(CosmosDefinition),
}

impl StoreDefinition {
    /// What identifies the backing store within the process, so that a store defined alike
    /// for several components is opened once and shared; `None` for an in-memory database
    /// (private to its app).
    pub fn shared_key(&self) -> Option<PathBuf> {
        match self {
            StoreDefinition::Sqlite(path) => path.clone(),
            StoreDefinition::Redis(url) => Some(PathBuf::from(format!("redis:{url}"))),
            StoreDefinition::Dynamo(d) => Some(PathBuf::from(format!(
                "aws_dynamo:{}/{}/{}",
                d.region,
                d.table,
                d.credentials.as_ref().map_or("", |c| c.0.as_str())
            ))),
            StoreDefinition::Cosmos(c) => Some(PathBuf::from(format!(
                "azure_cosmos:{}/{}/{}/{}",
                c.endpoint.as_deref().unwrap_or(&c.account),
                c.database,
                c.container,
                c.key
            ))),
        }
    }
}

/// The key-value host feature: `[key_value_store.<label>]`, the stores a component lists
/// (`key_value_stores`, opened once per process and database), and the guest interfaces
/// `fermyon:spin/key-value@2.0.0`, `wasi:keyvalue` and Spin 4's `spin:key-value@3.0.0`
/// (implemented on [`ComponentStores`], which holds the guest's handles).
pub struct KeyValue;

/// The stores one component may open, and one instance's handles of them.
#[derive(Clone, Default)]
pub struct ComponentStores {
    component_id: Arc<str>,
    labels: Arc<BTreeSet<String>>,
    stores: Arc<KvStores>,
    /// Open stores and buckets (counted, at most [`MAX_OPEN_STORES`]) and CAS handles.
    table: FeatureTable,
}

impl HostFeature for KeyValue {
    const SECTIONS: &'static [&'static str] = &["key_value_store"];
    type Config = BTreeMap<String, StoreDefinition>;
    type App = Labelled<StoreDefinition>;
    type Instance = ComponentStores;

    fn parse(
        source: &super::runtime_config::Source<'_>,
    ) -> anyhow::Result<BTreeMap<String, StoreDefinition>> {
        Labelled::parse(source, "key_value_store", parse_runtime_config)
    }

    fn build(
        config: &BTreeMap<String, StoreDefinition>,
        cx: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<Self::App> {
        Labelled::build(config, cx)
    }

    fn instance(
        app: &Self::App,
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentStores> {
        let component = cx.component;
        let labels: BTreeSet<String> = component.key_value_stores.iter().cloned().collect();
        let stores = if labels.is_empty() {
            KvStores::default()
        } else {
            open_shared_stores(&labels, &app.state_dir, &app.definitions, &app.app_dir)
                .with_context(|| format!("component `{}`", component.id))?
        };
        Ok(ComponentStores {
            component_id: component.id.as_str().into(),
            labels: Arc::new(labels),
            stores: Arc::new(stores),
            table: FeatureTable::default(),
        })
    }

    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentStores,
    ) -> anyhow::Result<()> {
        type D = wasmtime::component::HasSelf<ComponentStores>;
        spin_kv::add_to_linker::<_, D>(linker, get)?;
        wasi_store::add_to_linker::<_, D>(linker, get)?;
        wasi_batch::add_to_linker::<_, D>(linker, get)?;
        wasi_atomics::add_to_linker::<_, D>(linker, get)?;
        add_spin4_to_linker(linker)
    }
}

/// Stores already open in this process, so that every component using a database shares
/// one connection (and in-memory stores are shared at all).
type StoreKey = (PathBuf, String);
fn open_stores_registry() -> &'static Mutex<HashMap<StoreKey, std::sync::Weak<KvStore>>> {
    static REGISTRY: std::sync::OnceLock<Mutex<HashMap<StoreKey, std::sync::Weak<KvStore>>>> =
        std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn open_shared_stores(
    labels: &BTreeSet<String>,
    state_dir: &Path,
    definitions: &BTreeMap<String, StoreDefinition>,
    app_dir: &Path,
) -> anyhow::Result<KvStores> {
    let mut registry = open_stores_registry()
        .lock()
        .map_err(|_| anyhow::anyhow!("key-value store registry is unusable"))?;
    registry.retain(|_, weak| weak.strong_count() > 0);
    KvStores::open_with(labels, state_dir, definitions, |label, def| {
        // In-memory stores are identified by the app they belong to.
        let key_path = def.shared_key().unwrap_or_else(|| app_dir.join(":memory:"));
        let key = (key_path, label.to_string());
        if let Some(store) = registry.get(&key).and_then(std::sync::Weak::upgrade) {
            return Ok(store);
        }
        let store = Arc::new(open_definition(label, def)?);
        registry.insert(key, Arc::downgrade(&store));
        Ok(store)
    })
}

/// The keys of each store type's section (Spin ignores others; they are logged here).
fn store_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "spin" => &["type", "path"],
        "redis" => &["type", "url"],
        "aws_dynamo" => &[
            "type",
            "table",
            "region",
            "consistent_read",
            "access_key",
            "secret_key",
            "token",
        ],
        "azure_cosmos" => &[
            "type",
            "key",
            "account",
            "database",
            "container",
            "endpoint",
        ],
        _ => &[],
    }
}

/// Parses the `key_value_store` section of a runtime config; relative store paths resolve
/// against `base_dir` (the runtime config file's directory).
pub fn parse_runtime_config(
    value: &toml::Value,
    base_dir: &Path,
    origin: &str,
) -> anyhow::Result<BTreeMap<String, StoreDefinition>> {
    let mut out = BTreeMap::new();
    let stores = value.as_table().with_context(|| {
        format!("{origin}: `key_value_store` must be a table of [key_value_store.<label>]")
    })?;
    for (label, def) in stores {
        let key = format!("key_value_store.{label}");
        let def = def
            .as_table()
            .with_context(|| format!("{origin}: `{key}` must be a table"))?;
        let kind = def
            .get("type")
            .and_then(|t| t.as_str())
            .with_context(|| format!("{origin}: `{key}.type` is missing (use type = \"spin\")"))?;
        let str_field = |name: &str| -> anyhow::Result<Option<&str>> {
            match def.get(name) {
                None => Ok(None),
                Some(v) => v
                    .as_str()
                    .map(Some)
                    .with_context(|| format!("{origin}: `{key}.{name}` must be a string")),
            }
        };
        let store = match kind {
            "spin" => StoreDefinition::Sqlite(str_field("path")?.map(|p| base_dir.join(p))),
            "redis" => StoreDefinition::Redis(
                str_field("url")?
                    .with_context(|| format!("{origin}: `{key}.url` is missing"))?
                    .to_string(),
            ),
            "aws_dynamo" => {
                let required = |name: &str| -> anyhow::Result<String> {
                    Ok(str_field(name)?
                        .with_context(|| format!("{origin}: `{key}.{name}` is missing"))?
                        .to_string())
                };
                let consistent_read = match def.get("consistent_read") {
                    None => false,
                    Some(v) => v.as_bool().with_context(|| {
                        format!("{origin}: `{key}.consistent_read` must be true or false")
                    })?,
                };
                let credentials = match (str_field("access_key")?, str_field("secret_key")?) {
                    (Some(a), Some(s)) => Some((
                        a.to_string(),
                        s.to_string(),
                        str_field("token")?.map(str::to_string),
                    )),
                    (None, None) => None,
                    _ => anyhow::bail!(
                        "{origin}: `{key}` has only one of `access_key` and `secret_key`: \
                             give both, or neither to use the environment's AWS credentials"
                    ),
                };
                StoreDefinition::Dynamo(DynamoDefinition {
                    table: required("table")?,
                    region: required("region")?,
                    consistent_read,
                    credentials,
                })
            }
            "azure_cosmos" => {
                let required = |name: &str| -> anyhow::Result<String> {
                    Ok(str_field(name)?
                        .with_context(|| format!("{origin}: `{key}.{name}` is missing"))?
                        .to_string())
                };
                let secret = str_field("key")?.with_context(|| {
                    format!(
                        "{origin}: `{key}.key` is missing: this runtime reaches Cosmos DB \
                             with the account's key only (no Microsoft Entra ID credentials)"
                    )
                })?;
                StoreDefinition::Cosmos(CosmosDefinition {
                    key: secret.to_string(),
                    account: required("account")?,
                    database: required("database")?,
                    container: required("container")?,
                    endpoint: str_field("endpoint")?.map(str::to_string),
                })
            }
            other => anyhow::bail!(
                "{origin}: `{key}.type` = \"{other}\" is not supported; use \"spin\" \
                     (SQLite), \"redis\", \"aws_dynamo\" or \"azure_cosmos\""
            ),
        };
        super::runtime_config::warn_unknown_keys(def, store_keys(kind), &key, origin);
        out.insert(label.clone(), store);
    }
    Ok(out)
}

/// An open SQLite-backed store.
#[derive(Debug)]
pub struct SqliteStore {
    label: String,
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store `label` in the database at `path`
    /// (`None`: in memory).
    pub fn open(label: &str, path: Option<&Path>) -> anyhow::Result<Self> {
        let conn = match path {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).with_context(|| {
                        format!(
                            "key-value store `{label}`: cannot create directory {}",
                            dir.display()
                        )
                    })?;
                }
                Connection::open(path).with_context(|| {
                    format!("key-value store `{label}`: cannot open {}", path.display())
                })?
            }
            None => Connection::open_in_memory()?,
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS spin_key_value (
                store TEXT NOT NULL,
                key   TEXT NOT NULL,
                value BLOB NOT NULL,
                PRIMARY KEY (store, key)
            )",
        )
        .with_context(|| format!("key-value store `{label}`: cannot create its table"))?;
        Ok(SqliteStore {
            label: label.to_string(),
            conn: Mutex::new(conn),
        })
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, KvError> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| self.error(SqliteKvError::Poisoned))?;
        f(&mut conn).map_err(|e| self.error(SqliteKvError::Sql(e)))
    }

    fn error(&self, source: SqliteKvError) -> KvError {
        KvError::Sqlite {
            label: self.label.clone(),
            source,
        }
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT value FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .query_row(params![self.label, key], |row| row.get(0))
                .optional()
        })
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.with_conn(|c| {
            c.prepare_cached(
                "INSERT INTO spin_key_value (store, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT(store, key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![self.label, key, value])
            .map(drop)
        })
    }

    /// Removes `key` (no error if absent).
    pub fn delete(&self, key: &str) -> Result<(), KvError> {
        self.with_conn(|c| {
            c.prepare_cached("DELETE FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .execute(params![self.label, key])
                .map(drop)
        })
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, KvError> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT 1 FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .exists(params![self.label, key])
        })
    }

    /// All keys, sorted.
    pub fn keys(&self) -> Result<Vec<String>, KvError> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT key FROM spin_key_value WHERE store = ?1 ORDER BY key")?
                .query_map(params![self.label], |row| row.get(0))?
                .collect()
        })
    }

    /// Adds `delta` to the integer at `key` (absent: 0), stored as 8 little-endian bytes.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        let label = self.label.clone();
        let mut bad_value = None;
        let result = self.with_conn(|c| {
            let tx = c.transaction()?;
            let current: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM spin_key_value WHERE store = ?1 AND key = ?2",
                    params![label, key],
                    |row| row.get(0),
                )
                .optional()?;
            let current = match current {
                None => 0,
                Some(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                    Ok(b) => i64::from_le_bytes(b),
                    Err(_) => {
                        bad_value = Some(bytes.len());
                        return Ok(0);
                    }
                },
            };
            let new = current.wrapping_add(delta);
            tx.execute(
                "INSERT INTO spin_key_value (store, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT(store, key) DO UPDATE SET value = excluded.value",
                params![label, key, new.to_le_bytes().to_vec()],
            )?;
            tx.commit()?;
            Ok(new)
        })?;
        match bad_value {
            Some(len) => Err(self.error(SqliteKvError::NotAnInteger {
                key: key.to_string(),
                len,
            })),
            None => Ok(result),
        }
    }

    /// Sets `key` to `value` only if its value is still `expected`; returns whether it did.
    pub fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError> {
        let label = self.label.clone();
        self.with_conn(|c| {
            let tx = c.transaction()?;
            let current: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM spin_key_value WHERE store = ?1 AND key = ?2",
                    params![label, key],
                    |row| row.get(0),
                )
                .optional()?;
            if current.as_deref() != expected {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO spin_key_value (store, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT(store, key) DO UPDATE SET value = excluded.value",
                params![label, key, value],
            )?;
            tx.commit()?;
            Ok(true)
        })
    }
}

/// The stores of one app, opened at start.
#[derive(Debug, Default)]
pub struct KvStores {
    stores: HashMap<String, Arc<KvStore>>,
}

impl KvStores {
    /// Opens every store label in `used` (a component's `key_value_stores`) with `open`.
    /// `default` is SQLite in `state_dir` unless `definitions` (the runtime config's)
    /// redefines it; any other label must be declared in the runtime config.
    pub fn open_with(
        used: &BTreeSet<String>,
        state_dir: &Path,
        definitions: &BTreeMap<String, StoreDefinition>,
        mut open: impl FnMut(&str, &StoreDefinition) -> anyhow::Result<Arc<KvStore>>,
    ) -> anyhow::Result<Self> {
        let mut stores = HashMap::new();
        for label in used {
            let def = match definitions.get(label) {
                Some(def) => def.clone(),
                None if label == "default" => {
                    StoreDefinition::Sqlite(Some(state_dir.join(DEFAULT_STORE_FILE)))
                }
                None => anyhow::bail!(
                    "key-value store `{label}` is listed in key_value_stores but not defined: \
                     add [key_value_store.{label}] with type = \"spin\" to the runtime config \
                     (runtime-config.toml)"
                ),
            };
            let store = open(label, &def)?;
            tracing::debug!(store = %label, "opened key-value store");
            stores.insert(label.clone(), store);
        }
        Ok(KvStores { stores })
    }

    /// The store with this label, if open.
    pub fn get(&self, label: &str) -> Option<&Arc<KvStore>> {
        self.stores.get(label)
    }
}

/// Why a SQLite store call failed.
#[derive(Debug, thiserror::Error)]
pub enum SqliteKvError {
    /// SQLite refused the statement (e.g. the database file is locked or read-only).
    #[error("{0}")]
    Sql(#[source] rusqlite::Error),
    /// `increment` found a value that is not a 64-bit integer.
    #[error("key `{key}` holds {len} bytes, not a 64-bit integer (8 little-endian bytes)")]
    NotAnInteger {
        /// The key.
        key: String,
        /// The length of its value.
        len: usize,
    },
    /// An earlier call panicked while holding the connection.
    #[error("the store's connection is unusable after an earlier call failed inside SQLite")]
    Poisoned,
    /// The blocking thread running the call ended without an answer.
    #[error("the SQLite call did not finish: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Why a key-value store call failed: the store's label and its backend's own error.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A `type = "spin"` (SQLite) store.
    #[error("key-value store `{label}`: {source}")]
    Sqlite {
        /// The store's label.
        label: String,
        /// What failed.
        source: SqliteKvError,
    },
    /// A `type = "redis"` store.
    #[error("key-value store `{label}`: {source}")]
    Redis {
        /// The store's label.
        label: String,
        /// What failed.
        source: RedisKvError,
    },
    /// A `type = "aws_dynamo"` store.
    #[error("key-value store `{label}`: {source}")]
    Dynamo {
        /// The store's label.
        label: String,
        /// What failed.
        source: DynamoKvError,
    },
    /// A `type = "azure_cosmos"` store.
    #[error("key-value store `{label}`: {source}")]
    Cosmos {
        /// The store's label.
        label: String,
        /// What failed.
        source: CosmosKvError,
    },
}

/// The operations every key-value backend provides; the guest interfaces await them, so a
/// call waiting for its backend holds no async worker.
#[async_trait::async_trait]
pub trait KeyValueBackend: Send + Sync + std::fmt::Debug {
    /// The value of `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError>;
    /// Sets `key` to `value`.
    async fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError>;
    /// Removes `key` (absent is fine).
    async fn delete(&self, key: &str) -> Result<(), KvError>;
    /// Whether `key` has a value.
    async fn exists(&self, key: &str) -> Result<bool, KvError>;
    /// Every key of the store.
    async fn keys(&self) -> Result<Vec<String>, KvError>;
    /// Adds `delta` to the integer at `key` (absent: 0).
    async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError>;
    /// Sets `key` to `value` only if its value is still `expected`; returns whether it did.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError>;
}

/// A SQLite store called from async code: every call runs on tokio's blocking pool, off the
/// async workers.
#[derive(Debug)]
struct BlockingSqlite(Arc<SqliteStore>);

impl BlockingSqlite {
    async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce(&SqliteStore) -> Result<T, KvError> + Send + 'static,
    ) -> Result<T, KvError> {
        let store = self.0.clone();
        tokio::task::spawn_blocking(move || call(&store))
            .await
            .map_err(|e| self.0.error(SqliteKvError::Task(e)))?
    }
}

#[async_trait::async_trait]
impl KeyValueBackend for BlockingSqlite {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let key = key.to_string();
        self.run(move |s| s.get(&key)).await
    }
    async fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        let (key, value) = (key.to_string(), value.to_vec());
        self.run(move |s| s.set(&key, &value)).await
    }
    async fn delete(&self, key: &str) -> Result<(), KvError> {
        let key = key.to_string();
        self.run(move |s| s.delete(&key)).await
    }
    async fn exists(&self, key: &str) -> Result<bool, KvError> {
        let key = key.to_string();
        self.run(move |s| s.exists(&key)).await
    }
    async fn keys(&self) -> Result<Vec<String>, KvError> {
        self.run(SqliteStore::keys).await
    }
    async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        let key = key.to_string();
        self.run(move |s| s.increment(&key, delta)).await
    }
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError> {
        let (key, expected, value) = (
            key.to_string(),
            expected.map(<[u8]>::to_vec),
            value.to_vec(),
        );
        self.run(move |s| s.compare_and_swap(&key, expected.as_deref(), &value))
            .await
    }
}

/// An open key-value store of any type the runtime config offers; its operations are
/// [`KeyValueBackend`]'s.
#[derive(Debug)]
pub struct KvStore(Box<dyn KeyValueBackend>);

impl KvStore {
    /// A store served by `backend`.
    pub fn new(backend: impl KeyValueBackend + 'static) -> Self {
        KvStore(Box::new(backend))
    }
}

impl std::ops::Deref for KvStore {
    type Target = dyn KeyValueBackend;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// Opens the store `label` as `def` says.
pub fn open_definition(label: &str, def: &StoreDefinition) -> anyhow::Result<KvStore> {
    Ok(match def {
        StoreDefinition::Sqlite(path) => KvStore::new(BlockingSqlite(Arc::new(SqliteStore::open(
            label,
            path.as_deref(),
        )?))),
        StoreDefinition::Redis(url) => KvStore::new(RedisStore::open(label, url)?),
        StoreDefinition::Dynamo(d) => KvStore::new(DynamoStore::open(label, d)?),
        StoreDefinition::Cosmos(c) => KvStore::new(CosmosStore::open(label, c)?),
    })
}

/// Why a component cannot open a store.
pub(crate) enum OpenError {
    AccessDenied,
    NoSuchStore,
    TableFull,
}

/// Guest handle of an open store: `fermyon:spin/key-value` `store` and
/// `wasi:keyvalue/store` `bucket` alike.
pub struct StoreHandle(Arc<KvStore>);
/// A compare-and-swap handle (`wasi:keyvalue/atomics` `cas`).
pub struct Cas {
    store: Arc<KvStore>,
    key: String,
    current: Option<Vec<u8>>,
}

impl ComponentStores {
    fn open_store(&mut self, label: &str) -> Result<Resource<StoreHandle>, OpenError> {
        if !self.labels.contains(label) {
            tracing::warn!(
                "component `{}` tried to open key-value store `{label}`, which is not in its \
                 key_value_stores {:?}",
                self.component_id,
                self.labels
            );
            return Err(OpenError::AccessDenied);
        }
        if self.table.counted() >= MAX_OPEN_STORES {
            return Err(OpenError::TableFull);
        }
        let store = self
            .stores
            .get(label)
            .cloned()
            .ok_or(OpenError::NoSuchStore)?;
        self.table
            .push_counted(StoreHandle(store), MAX_OPEN_STORES)
            .map_err(|_| OpenError::TableFull)
    }

    /// Opens `label` for the guest, mapping refusals with `refused`.
    fn open_handle<E>(
        &mut self,
        label: &str,
        refused: fn(OpenError) -> E,
    ) -> wasmtime::Result<Result<Resource<StoreHandle>, E>> {
        Ok(self.open_store(label).map_err(refused))
    }

    /// The store behind a guest handle (awaited after this borrow of the instance ends).
    fn store_of(&mut self, handle: &Resource<StoreHandle>) -> wasmtime::Result<Arc<KvStore>> {
        Ok(self.table.get().get(handle)?.0.clone())
    }

    fn close_store(&mut self, handle: Resource<StoreHandle>) -> wasmtime::Result<()> {
        self.table.delete_counted(handle)?;
        Ok(())
    }

    fn table(&mut self) -> &mut wasmtime::component::ResourceTable {
        self.table.get()
    }
}

type SpinResult<T> = wasmtime::Result<Result<T, spin_kv::Error>>;
type Handle = Resource<StoreHandle>;

/// A store's error as the guest sees it.
fn spin_err(e: KvError) -> spin_kv::Error {
    spin_kv::Error::Other(e.to_string())
}
fn wasi_err(e: KvError) -> wasi_store::Error {
    wasi_store::Error::Other(e.to_string())
}

impl spin_kv::Host for ComponentStores {}

impl spin_kv::HostStore for ComponentStores {
    async fn open(&mut self, label: String) -> SpinResult<Handle> {
        self.open_handle(&label, |e| match e {
            OpenError::AccessDenied => spin_kv::Error::AccessDenied,
            OpenError::NoSuchStore => spin_kv::Error::NoSuchStore,
            OpenError::TableFull => spin_kv::Error::StoreTableFull,
        })
    }

    async fn get(&mut self, this: Handle, key: String) -> SpinResult<Option<Vec<u8>>> {
        Ok(self.store_of(&this)?.get(&key).await.map_err(spin_err))
    }

    async fn set(&mut self, this: Handle, key: String, value: Vec<u8>) -> SpinResult<()> {
        Ok(self
            .store_of(&this)?
            .set(&key, &value)
            .await
            .map_err(spin_err))
    }

    async fn delete(&mut self, this: Handle, key: String) -> SpinResult<()> {
        Ok(self.store_of(&this)?.delete(&key).await.map_err(spin_err))
    }

    async fn exists(&mut self, this: Handle, key: String) -> SpinResult<bool> {
        Ok(self.store_of(&this)?.exists(&key).await.map_err(spin_err))
    }

    async fn get_keys(&mut self, this: Handle) -> SpinResult<Vec<String>> {
        Ok(self.store_of(&this)?.keys().await.map_err(spin_err))
    }

    async fn drop(&mut self, this: Handle) -> wasmtime::Result<()> {
        self.close_store(this)
    }
}

type WasiResult<T> = wasmtime::Result<Result<T, wasi_store::Error>>;

impl wasi_store::Host for ComponentStores {
    async fn open(&mut self, identifier: String) -> WasiResult<Handle> {
        self.open_handle(&identifier, |e| match e {
            OpenError::AccessDenied => wasi_store::Error::AccessDenied,
            OpenError::NoSuchStore => wasi_store::Error::NoSuchStore,
            OpenError::TableFull => wasi_store::Error::Other(format!(
                "too many open stores (at most {MAX_OPEN_STORES})"
            )),
        })
    }
}

impl wasi_store::HostBucket for ComponentStores {
    async fn get(&mut self, this: Handle, key: String) -> WasiResult<Option<Vec<u8>>> {
        Ok(self.store_of(&this)?.get(&key).await.map_err(wasi_err))
    }

    async fn set(&mut self, this: Handle, key: String, value: Vec<u8>) -> WasiResult<()> {
        Ok(self
            .store_of(&this)?
            .set(&key, &value)
            .await
            .map_err(wasi_err))
    }

    async fn delete(&mut self, this: Handle, key: String) -> WasiResult<()> {
        Ok(self.store_of(&this)?.delete(&key).await.map_err(wasi_err))
    }

    async fn exists(&mut self, this: Handle, key: String) -> WasiResult<bool> {
        Ok(self.store_of(&this)?.exists(&key).await.map_err(wasi_err))
    }

    async fn list_keys(
        &mut self,
        this: Handle,
        cursor: Option<String>,
    ) -> WasiResult<wasi_store::KeyResponse> {
        // One page holds every key after the cursor (keys are sorted); no next cursor.
        let keys = match self.store_of(&this)?.keys().await {
            Ok(keys) => keys,
            Err(e) => return Ok(Err(wasi_err(e))),
        };
        let keys = match cursor {
            Some(after) => keys.into_iter().filter(|k| *k > after).collect(),
            None => keys,
        };
        Ok(Ok(wasi_store::KeyResponse { keys, cursor: None }))
    }

    async fn drop(&mut self, this: Handle) -> wasmtime::Result<()> {
        self.close_store(this)
    }
}

impl wasi_batch::Host for ComponentStores {
    async fn get_many(
        &mut self,
        bucket: Handle,
        keys: Vec<String>,
    ) -> WasiResult<Vec<(String, Option<Vec<u8>>)>> {
        let store = self.store_of(&bucket)?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            match store.get(&key).await {
                Ok(value) => out.push((key, value)),
                Err(e) => return Ok(Err(wasi_err(e))),
            }
        }
        Ok(Ok(out))
    }

    async fn set_many(
        &mut self,
        bucket: Handle,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> WasiResult<()> {
        let store = self.store_of(&bucket)?;
        for (k, v) in &key_values {
            if let Err(e) = store.set(k, v).await {
                return Ok(Err(wasi_err(e)));
            }
        }
        Ok(Ok(()))
    }

    async fn delete_many(&mut self, bucket: Handle, keys: Vec<String>) -> WasiResult<()> {
        let store = self.store_of(&bucket)?;
        for k in &keys {
            if let Err(e) = store.delete(k).await {
                return Ok(Err(wasi_err(e)));
            }
        }
        Ok(Ok(()))
    }
}

impl wasi_atomics::Host for ComponentStores {
    async fn increment(&mut self, bucket: Handle, key: String, delta: i64) -> WasiResult<i64> {
        Ok(self
            .store_of(&bucket)?
            .increment(&key, delta)
            .await
            .map_err(wasi_err))
    }

    async fn swap(
        &mut self,
        cas: Resource<Cas>,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), wasi_atomics::CasError>> {
        let (store, key, current) = {
            let c = self.table().get(&cas)?;
            (c.store.clone(), c.key.clone(), c.current.clone())
        };
        match store
            .compare_and_swap(&key, current.as_deref(), &value)
            .await
        {
            Ok(true) => {
                self.table().delete(cas)?;
                Ok(Ok(()))
            }
            // The value changed since `cas` was made: hand the handle back to the guest.
            Ok(false) => Ok(Err(wasi_atomics::CasError::CasFailed(cas))),
            Err(e) => {
                self.table().delete(cas)?;
                Ok(Err(wasi_atomics::CasError::StoreError(wasi_err(e))))
            }
        }
    }
}

impl wasi_atomics::HostCas for ComponentStores {
    async fn new(&mut self, bucket: Handle, key: String) -> WasiResult<Resource<Cas>> {
        let store = self.store_of(&bucket)?;
        match store.get(&key).await {
            Ok(current) => Ok(Ok(self.table().push(Cas {
                store,
                key,
                current,
            })?)),
            Err(e) => Ok(Err(wasi_err(e))),
        }
    }

    async fn current(&mut self, this: Resource<Cas>) -> WasiResult<Option<Vec<u8>>> {
        Ok(Ok(self.table().get(&this)?.current.clone()))
    }

    async fn drop(&mut self, this: Resource<Cas>) -> wasmtime::Result<()> {
        self.table().delete(this)?;
        Ok(())
    }
}

// ---- spin:key-value/key-value@3.0.0 (Spin 4) ----
//
// The `async func` form of `fermyon:spin/key-value@2.0.0`: the same stores, access rules and
// errors (its `error` variant is the 2.0.0 one, case for case). `get-keys` streams the keys
// and resolves its future once they are all read.

mod v3 {
    use wasmtime::component::{FutureReader, Resource, StreamReader};

    use super::{spin_err, spin_kv, ComponentStores, OpenError, StoreHandle};
    use crate::host::{stream_and_future, with_host, Accessor, HostState, HostView};

    type Error = spin_kv::Error;
    type Handle = Resource<StoreHandle>;

    /// Runs `f` on the instance's key-value state (between awaits).
    fn with_stores<T: HostView, R>(
        acc: &Accessor<T>,
        f: impl FnOnce(&mut ComponentStores) -> R,
    ) -> R {
        with_host(acc, |h| f(&mut h.features.key_value))
    }

    pub(super) fn close(h: &mut HostState, this: Handle) -> wasmtime::Result<()> {
        h.features.key_value.close_store(this)
    }

    pub(super) async fn open<T: HostView>(
        acc: &Accessor<T>,
        label: String,
    ) -> wasmtime::Result<Result<Handle, Error>> {
        with_stores(acc, |h| {
            h.open_handle(&label, |e| match e {
                OpenError::AccessDenied => Error::AccessDenied,
                OpenError::NoSuchStore => Error::NoSuchStore,
                OpenError::TableFull => Error::StoreTableFull,
            })
        })
    }

    pub(super) async fn get<T: HostView>(
        acc: &Accessor<T>,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
        let store = with_stores(acc, |h| h.store_of(&this))?;
        Ok(store.get(&key).await.map_err(spin_err))
    }

    pub(super) async fn set<T: HostView>(
        acc: &Accessor<T>,
        this: Handle,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        let store = with_stores(acc, |h| h.store_of(&this))?;
        Ok(store.set(&key, &value).await.map_err(spin_err))
    }

    pub(super) async fn delete<T: HostView>(
        acc: &Accessor<T>,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<(), Error>> {
        let store = with_stores(acc, |h| h.store_of(&this))?;
        Ok(store.delete(&key).await.map_err(spin_err))
    }

    pub(super) async fn exists<T: HostView>(
        acc: &Accessor<T>,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<bool, Error>> {
        let store = with_stores(acc, |h| h.store_of(&this))?;
        Ok(store.exists(&key).await.map_err(spin_err))
    }

    pub(super) async fn get_keys<T: HostView>(
        acc: &Accessor<T>,
        this: Handle,
    ) -> wasmtime::Result<(StreamReader<String>, FutureReader<Result<(), Error>>)> {
        let store = with_stores(acc, |h| h.store_of(&this))?;
        match store.keys().await.map_err(spin_err) {
            Ok(keys) => stream_and_future(acc, keys, Ok(())),
            Err(e) => stream_and_future(acc, Vec::new(), Err(e)),
        }
    }
}

/// Adds `spin:key-value/key-value@3.0.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    const INTERFACE: &str = "key-value";
    let mut inst = linker.instance("spin:key-value/key-value@3.0.0")?;
    host_resource!(inst, "store", StoreHandle, v3::close);
    async_func!(inst, INTERFACE, "[static]store.open", v3::open, (label: String));
    async_func!(inst, INTERFACE, "[method]store.get", v3::get, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.set", v3::set, (this: Handle, key: String, value: Vec<u8>));
    async_func!(inst, INTERFACE, "[method]store.delete", v3::delete, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.exists", v3::exists, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.get-keys", v3::get_keys, (this: Handle));
    Ok(())
}
