//! Key-value stores: SQLite-backed stores (Spin's `type = "spin"`), the runtime config that
//! declares them, and the guest interfaces `fermyon:spin/key-value@2.0.0` and
//! `wasi:keyvalue/{store,batch,atomics}@0.2.0-draft2`.
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
use super::HostState;

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
}

/// The sections of a runtime config file this runtime reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Store definitions by label (`[key_value_store.<label>]`).
    pub key_value_stores: BTreeMap<String, StoreDefinition>,
    /// SQLite database definitions by label (`[sqlite_database.<label>]`, see
    /// [`super::sqlite`]).
    pub sqlite_databases: BTreeMap<String, super::sqlite::DatabaseDefinition>,
    /// Where LLM inference runs (`[llm_compute]`, see [`super::llm`]).
    pub llm_compute: super::llm::LlmCompute,
    /// `[[variables_provider]]` entries, in order (see [`super::variables::Provider`]).
    pub variables_providers: Vec<super::variables::Provider>,
    /// `[[client_tls]]` entries (see [`super::tls`]).
    pub client_tls: Vec<super::tls::ClientTls>,
    /// `[outbound_networking]` and `[outbound_*]` limits (see [`super::network_policy`]).
    pub network_policy: super::network_policy::PolicyConfig,
}

impl RuntimeConfig {
    /// Reads a runtime config file (a regular file of at most 4 MiB); relative store
    /// paths resolve against its directory.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        use spin_app_format::untrusted::{read_regular, MAX_DOCUMENT_BYTES};
        let text = String::from_utf8(read_regular(path, MAX_DOCUMENT_BYTES, "runtime config")?)
            .with_context(|| format!("runtime config {} is not UTF-8 text", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("/"));
        Self::parse(&text, base, &path.display().to_string())
    }

    /// Parses runtime config text; `origin` names the source in errors.
    pub fn parse(text: &str, base_dir: &Path, origin: &str) -> anyhow::Result<Self> {
        let doc: toml::Table = toml::from_str(text).map_err(|e| {
            let e = spin_app_format::untrusted::toml_error(&e, text);
            anyhow::anyhow!("{origin}: invalid TOML: {e}")
        })?;
        let mut config = RuntimeConfig::default();
        for (section, value) in &doc {
            match section.as_str() {
                "sqlite_database" => {
                    config.sqlite_databases =
                        super::sqlite::parse_runtime_config(value, base_dir, origin)?;
                    continue;
                }
                "llm_compute" => {
                    config.llm_compute = super::llm::parse_runtime_config(value, origin)?;
                    continue;
                }
                "client_tls" => {
                    config.client_tls = super::tls::parse_runtime_config(value, base_dir, origin)?;
                    continue;
                }
                s if super::network_policy::SECTIONS.contains(&s) => {
                    super::network_policy::parse_section(
                        &mut config.network_policy,
                        s,
                        value,
                        origin,
                    )?;
                    continue;
                }
                "variables_provider" | "config_provider" => {
                    config
                        .variables_providers
                        .extend(super::variables::parse_providers(
                            value, section, base_dir, origin,
                        )?);
                    continue;
                }
                _ => {}
            }
            if section != "key_value_store" {
                tracing::warn!(
                    "{origin}: section `{}` is not used by this runtime and is ignored",
                    spin_app_format::untrusted::shown(section)
                );
                continue;
            }
            let stores = value.as_table().with_context(|| {
                format!("{origin}: `key_value_store` must be a table of [key_value_store.<label>]")
            })?;
            for (label, def) in stores {
                let key = format!("key_value_store.{label}");
                let def = def
                    .as_table()
                    .with_context(|| format!("{origin}: `{key}` must be a table"))?;
                let kind = def.get("type").and_then(|t| t.as_str()).with_context(|| {
                    format!("{origin}: `{key}.type` is missing (use type = \"spin\")")
                })?;
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
                    other => anyhow::bail!(
                        "{origin}: `{key}.type` = \"{other}\" is not supported; use \"spin\" \
                         (SQLite)"
                    ),
                };
                config.key_value_stores.insert(label.clone(), store);
            }
        }
        Ok(config)
    }
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
    ) -> Result<T, String> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| format!("key-value store `{}` is unusable", self.label))?;
        f(&mut conn).map_err(|e| format!("key-value store `{}`: {e}", self.label))
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT value FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .query_row(params![self.label, key], |row| row.get(0))
                .optional()
        })
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
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
    pub fn delete(&self, key: &str) -> Result<(), String> {
        self.with_conn(|c| {
            c.prepare_cached("DELETE FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .execute(params![self.label, key])
                .map(drop)
        })
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, String> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT 1 FROM spin_key_value WHERE store = ?1 AND key = ?2")?
                .exists(params![self.label, key])
        })
    }

    /// All keys, sorted.
    pub fn keys(&self) -> Result<Vec<String>, String> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT key FROM spin_key_value WHERE store = ?1 ORDER BY key")?
                .query_map(params![self.label], |row| row.get(0))?
                .collect()
        })
    }

    /// Adds `delta` to the integer at `key` (absent: 0), stored as 8 little-endian bytes.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
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
            Some(len) => Err(format!(
                "key-value store `{label}`: key `{key}` holds {len} bytes, not a 64-bit \
                 integer (8 little-endian bytes)"
            )),
            None => Ok(result),
        }
    }

    /// Sets `key` to `value` only if its value is still `expected`; returns whether it did.
    pub fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, String> {
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
    /// `default` is SQLite in `state_dir` unless `runtime` redefines it; any other label
    /// must be declared in the runtime config.
    pub fn open_with(
        used: &BTreeSet<String>,
        state_dir: &Path,
        runtime: &RuntimeConfig,
        mut open: impl FnMut(&str, &StoreDefinition) -> anyhow::Result<Arc<KvStore>>,
    ) -> anyhow::Result<Self> {
        let mut stores = HashMap::new();
        for label in used {
            let def = match runtime.key_value_stores.get(label) {
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

/// Opens the store `label` as `def` says.
pub fn open_definition(label: &str, def: &StoreDefinition) -> anyhow::Result<KvStore> {
    match def {
        StoreDefinition::Sqlite(path) => {
            Ok(KvStore::Sqlite(SqliteStore::open(label, path.as_deref())?))
        }
        StoreDefinition::Redis(url) => Ok(KvStore::Redis(RedisStore::open(label, url)?)),
    }
}

/// An open key-value store of either type Spin's runtime config offers.
#[derive(Debug)]
pub enum KvStore {
    /// `type = "spin"`.
    Sqlite(SqliteStore),
    /// `type = "redis"`.
    Redis(RedisStore),
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            KvStore::Sqlite($s) => $e,
            KvStore::Redis($s) => $e,
        }
    };
}

impl KvStore {
    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        delegate!(self, s => s.get(key))
    }
    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        delegate!(self, s => s.set(key, value))
    }
    /// Removes `key` (absent is fine).
    pub fn delete(&self, key: &str) -> Result<(), String> {
        delegate!(self, s => s.delete(key))
    }
    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, String> {
        delegate!(self, s => s.exists(key))
    }
    /// Every key of the store.
    pub fn keys(&self) -> Result<Vec<String>, String> {
        delegate!(self, s => s.keys())
    }
    /// Adds `delta` to the integer at `key` (absent: 0).
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        delegate!(self, s => s.increment(key, delta))
    }
    /// Sets `key` to `value` only if its value is still `expected`; returns whether it did.
    pub fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, String> {
        delegate!(self, s => s.compare_and_swap(key, expected, value))
    }
}

/// A store kept in a Redis server (`[key_value_store.<label>] type = "redis"`,
/// `url = "redis://..."`, or `rediss://` over TLS verified with
/// [`super::tls::trust_store`]), as Spin's key-value-redis does it: keys as they are, values as
/// bytes, `KEYS *` for the key list, `INCRBY` for increments (Redis integers, as text),
/// `WATCH`/`MULTI` for compare-and-swap. One connection, reopened after an error.
pub struct RedisStore {
    label: String,
    client: redis::Client,
    conn: Mutex<Option<redis::Connection>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: the label only.
        f.debug_struct("RedisStore")
            .field("label", &self.label)
            .finish()
    }
}

/// How long connecting to a store's Redis server may take.
const REDIS_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl RedisStore {
    /// Checks the URL; connects on first use (the server may start after the app).
    pub fn open(label: &str, url: &str) -> anyhow::Result<Self> {
        let client =
            super::tls::redis_client(url, &super::tls::trust_store().data).map_err(|e| {
                anyhow::anyhow!(
                    "key-value store `{label}`: `url` is not a usable Redis URL ({e}): use \
                 redis://[user:password@]host[:port][/db], or rediss:// for TLS (verified \
                 with the platform's trust store: SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs)"
                )
            })?;
        Ok(RedisStore {
            label: label.to_string(),
            client,
            conn: Mutex::new(None),
        })
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| format!("key-value store `{}` is unusable", self.label))?;
        if guard.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(REDIS_CONNECT_TIMEOUT)
                .map_err(|e| {
                    format!(
                        "key-value store `{}`: cannot connect to Redis: {e}",
                        self.label
                    )
                })?;
            *guard = Some(c);
        }
        let conn = guard.as_mut().expect("connected above");
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    *guard = None;
                }
                Err(format!("key-value store `{}`: {e}", self.label))
            }
        }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.with_conn(|c| redis::cmd("GET").arg(key).query(c))
    }
    fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        self.with_conn(|c| redis::cmd("SET").arg(key).arg(value).query(c))
    }
    fn delete(&self, key: &str) -> Result<(), String> {
        self.with_conn(|c| redis::cmd("DEL").arg(key).query::<i64>(c).map(|_| ()))
    }
    fn exists(&self, key: &str) -> Result<bool, String> {
        self.with_conn(|c| redis::cmd("EXISTS").arg(key).query(c))
    }
    fn keys(&self) -> Result<Vec<String>, String> {
        self.with_conn(|c| redis::cmd("KEYS").arg("*").query(c))
    }
    fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        self.with_conn(|c| redis::cmd("INCRBY").arg(key).arg(delta).query(c))
    }
    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, String> {
        self.with_conn(|c| {
            redis::cmd("WATCH").arg(key).query::<()>(c)?;
            let current: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(c)?;
            if current.as_deref() != expected {
                redis::cmd("UNWATCH").query::<()>(c)?;
                return Ok(false);
            }
            // EXEC answers nil when the watched key changed meanwhile.
            let done: Option<Vec<redis::Value>> = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key)
                .arg(value)
                .query(c)?;
            Ok(done.is_some())
        })
    }
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

impl HostState {
    fn open_store(&mut self, label: &str) -> Result<Arc<KvStore>, OpenError> {
        if !self.component.key_value_stores.contains(label) {
            tracing::warn!(
                "component `{}` tried to open key-value store `{label}`, which is not in its \
                 key_value_stores {:?}",
                self.component.id,
                self.component.key_value_stores
            );
            return Err(OpenError::AccessDenied);
        }
        if self.open_stores >= MAX_OPEN_STORES {
            return Err(OpenError::TableFull);
        }
        let store = self
            .component
            .kv
            .get(label)
            .cloned()
            .ok_or(OpenError::NoSuchStore)?;
        self.open_stores += 1;
        Ok(store)
    }

    /// Opens `label` for the guest, mapping refusals with `refused`.
    fn open_handle<E>(
        &mut self,
        label: &str,
        refused: fn(OpenError) -> E,
    ) -> wasmtime::Result<Result<Resource<StoreHandle>, E>> {
        match self.open_store(label) {
            Ok(store) => Ok(Ok(self.table().push(StoreHandle(store))?)),
            Err(e) => Ok(Err(refused(e))),
        }
    }

    /// Runs `op` on the store behind a guest handle; store errors become `err(message)`.
    fn on_store<T, E>(
        &mut self,
        handle: &Resource<StoreHandle>,
        err: fn(String) -> E,
        op: impl FnOnce(&KvStore) -> Result<T, String>,
    ) -> wasmtime::Result<Result<T, E>> {
        let store = self.table().get(handle)?.0.clone();
        Ok(op(&store).map_err(err))
    }

    fn close_store(&mut self, handle: Resource<StoreHandle>) -> wasmtime::Result<()> {
        self.table().delete(handle)?;
        self.open_stores = self.open_stores.saturating_sub(1);
        Ok(())
    }
}

type SpinResult<T> = wasmtime::Result<Result<T, spin_kv::Error>>;
type Handle = Resource<StoreHandle>;

impl spin_kv::Host for HostState {}

impl spin_kv::HostStore for HostState {
    fn open(&mut self, label: String) -> SpinResult<Handle> {
        self.open_handle(&label, |e| match e {
            OpenError::AccessDenied => spin_kv::Error::AccessDenied,
            OpenError::NoSuchStore => spin_kv::Error::NoSuchStore,
            OpenError::TableFull => spin_kv::Error::StoreTableFull,
        })
    }

    fn get(&mut self, this: Handle, key: String) -> SpinResult<Option<Vec<u8>>> {
        self.on_store(&this, spin_kv::Error::Other, |s| s.get(&key))
    }

    fn set(&mut self, this: Handle, key: String, value: Vec<u8>) -> SpinResult<()> {
        self.on_store(&this, spin_kv::Error::Other, |s| s.set(&key, &value))
    }

    fn delete(&mut self, this: Handle, key: String) -> SpinResult<()> {
        self.on_store(&this, spin_kv::Error::Other, |s| s.delete(&key))
    }

    fn exists(&mut self, this: Handle, key: String) -> SpinResult<bool> {
        self.on_store(&this, spin_kv::Error::Other, |s| s.exists(&key))
    }

    fn get_keys(&mut self, this: Handle) -> SpinResult<Vec<String>> {
        self.on_store(&this, spin_kv::Error::Other, KvStore::keys)
    }

    fn drop(&mut self, this: Handle) -> wasmtime::Result<()> {
        self.close_store(this)
    }
}

type WasiResult<T> = wasmtime::Result<Result<T, wasi_store::Error>>;

impl wasi_store::Host for HostState {
    fn open(&mut self, identifier: String) -> WasiResult<Handle> {
        self.open_handle(&identifier, |e| match e {
            OpenError::AccessDenied => wasi_store::Error::AccessDenied,
            OpenError::NoSuchStore => wasi_store::Error::NoSuchStore,
            OpenError::TableFull => wasi_store::Error::Other(format!(
                "too many open stores (at most {MAX_OPEN_STORES})"
            )),
        })
    }
}

impl wasi_store::HostBucket for HostState {
    fn get(&mut self, this: Handle, key: String) -> WasiResult<Option<Vec<u8>>> {
        self.on_store(&this, wasi_store::Error::Other, |s| s.get(&key))
    }

    fn set(&mut self, this: Handle, key: String, value: Vec<u8>) -> WasiResult<()> {
        self.on_store(&this, wasi_store::Error::Other, |s| s.set(&key, &value))
    }

    fn delete(&mut self, this: Handle, key: String) -> WasiResult<()> {
        self.on_store(&this, wasi_store::Error::Other, |s| s.delete(&key))
    }

    fn exists(&mut self, this: Handle, key: String) -> WasiResult<bool> {
        self.on_store(&this, wasi_store::Error::Other, |s| s.exists(&key))
    }

    fn list_keys(
        &mut self,
        this: Handle,
        cursor: Option<String>,
    ) -> WasiResult<wasi_store::KeyResponse> {
        // One page holds every key after the cursor (keys are sorted); no next cursor.
        self.on_store(&this, wasi_store::Error::Other, |s| {
            let keys = s.keys()?;
            let keys = match cursor {
                Some(after) => keys.into_iter().filter(|k| *k > after).collect(),
                None => keys,
            };
            Ok(wasi_store::KeyResponse { keys, cursor: None })
        })
    }

    fn drop(&mut self, this: Handle) -> wasmtime::Result<()> {
        self.close_store(this)
    }
}

impl wasi_batch::Host for HostState {
    fn get_many(
        &mut self,
        bucket: Handle,
        keys: Vec<String>,
    ) -> WasiResult<Vec<(String, Option<Vec<u8>>)>> {
        self.on_store(&bucket, wasi_store::Error::Other, |s| {
            keys.into_iter()
                .map(|key| s.get(&key).map(|value| (key, value)))
                .collect()
        })
    }

    fn set_many(&mut self, bucket: Handle, key_values: Vec<(String, Vec<u8>)>) -> WasiResult<()> {
        self.on_store(&bucket, wasi_store::Error::Other, |s| {
            key_values.iter().try_for_each(|(k, v)| s.set(k, v))
        })
    }

    fn delete_many(&mut self, bucket: Handle, keys: Vec<String>) -> WasiResult<()> {
        self.on_store(&bucket, wasi_store::Error::Other, |s| {
            keys.iter().try_for_each(|k| s.delete(k))
        })
    }
}

impl wasi_atomics::Host for HostState {
    fn increment(&mut self, bucket: Handle, key: String, delta: i64) -> WasiResult<i64> {
        self.on_store(&bucket, wasi_store::Error::Other, |s| {
            s.increment(&key, delta)
        })
    }

    fn swap(
        &mut self,
        cas: Resource<Cas>,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), wasi_atomics::CasError>> {
        let swapped = {
            let c = self.table().get(&cas)?;
            c.store
                .compare_and_swap(&c.key, c.current.as_deref(), &value)
        };
        match swapped {
            Ok(true) => {
                self.table().delete(cas)?;
                Ok(Ok(()))
            }
            // The value changed since `cas` was made: hand the handle back to the guest.
            Ok(false) => Ok(Err(wasi_atomics::CasError::CasFailed(cas))),
            Err(e) => {
                self.table().delete(cas)?;
                Ok(Err(wasi_atomics::CasError::StoreError(
                    wasi_store::Error::Other(e),
                )))
            }
        }
    }
}

impl wasi_atomics::HostCas for HostState {
    fn new(&mut self, bucket: Handle, key: String) -> WasiResult<Resource<Cas>> {
        let store = self.table().get(&bucket)?.0.clone();
        match store.get(&key) {
            Ok(current) => Ok(Ok(self.table().push(Cas {
                store,
                key,
                current,
            })?)),
            Err(e) => Ok(Err(wasi_store::Error::Other(e))),
        }
    }

    fn current(&mut self, this: Resource<Cas>) -> WasiResult<Option<Vec<u8>>> {
        Ok(Ok(self.table().get(&this)?.current.clone()))
    }

    fn drop(&mut self, this: Resource<Cas>) -> wasmtime::Result<()> {
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

    use super::{spin_kv, KvStore, OpenError, StoreHandle};
    use crate::host::{stream_and_future, with_host, Accessor};

    type Error = spin_kv::Error;
    type Handle = Resource<StoreHandle>;

    pub(super) async fn open(
        acc: &Accessor,
        label: String,
    ) -> wasmtime::Result<Result<Handle, Error>> {
        with_host(acc, |h| {
            h.open_handle(&label, |e| match e {
                OpenError::AccessDenied => Error::AccessDenied,
                OpenError::NoSuchStore => Error::NoSuchStore,
                OpenError::TableFull => Error::StoreTableFull,
            })
        })
    }

    pub(super) async fn get(
        acc: &Accessor,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
        with_host(acc, |h| h.on_store(&this, Error::Other, |s| s.get(&key)))
    }

    pub(super) async fn set(
        acc: &Accessor,
        this: Handle,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        with_host(acc, |h| {
            h.on_store(&this, Error::Other, |s| s.set(&key, &value))
        })
    }

    pub(super) async fn delete(
        acc: &Accessor,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<(), Error>> {
        with_host(acc, |h| h.on_store(&this, Error::Other, |s| s.delete(&key)))
    }

    pub(super) async fn exists(
        acc: &Accessor,
        this: Handle,
        key: String,
    ) -> wasmtime::Result<Result<bool, Error>> {
        with_host(acc, |h| h.on_store(&this, Error::Other, |s| s.exists(&key)))
    }

    pub(super) async fn get_keys(
        acc: &Accessor,
        this: Handle,
    ) -> wasmtime::Result<(StreamReader<String>, FutureReader<Result<(), Error>>)> {
        let keys = with_host(acc, |h| h.on_store(&this, Error::Other, KvStore::keys))?;
        match keys {
            Ok(keys) => stream_and_future(acc, keys, Ok(())),
            Err(e) => stream_and_future(acc, Vec::new(), Err(e)),
        }
    }
}

/// Adds `spin:key-value/key-value@3.0.0`.
pub(super) fn add_spin4_to_linker(
    linker: &mut wasmtime::component::Linker<crate::InstanceState>,
) -> anyhow::Result<()> {
    const INTERFACE: &str = "key-value";
    let mut inst = linker.instance("spin:key-value/key-value@3.0.0")?;
    host_resource!(inst, "store", StoreHandle, HostState::close_store);
    async_func!(inst, INTERFACE, "[static]store.open", v3::open, (label: String));
    async_func!(inst, INTERFACE, "[method]store.get", v3::get, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.set", v3::set, (this: Handle, key: String, value: Vec<u8>));
    async_func!(inst, INTERFACE, "[method]store.delete", v3::delete, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.exists", v3::exists, (this: Handle, key: String));
    async_func!(inst, INTERFACE, "[method]store.get-keys", v3::get_keys, (this: Handle));
    Ok(())
}
