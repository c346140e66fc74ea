//! The Redis-backed key-value store (`type = "redis"`): one multiplexed async connection per
//! store, shared by every instance's calls, so calls from concurrent requests are pipelined on
//! the socket instead of queueing behind each other.

use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue};

use super::{KeyValueBackend, KvError};

/// How long connecting to a store's Redis server may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sets `KEYS[1]` to `ARGV[3]` only if it is absent (`ARGV[1]` = "0") or holds `ARGV[2]`
/// (`ARGV[1]` = "1"); 1 when it did. A script runs atomically on the server, so
/// compare-and-swap needs no per-connection `WATCH`, which a shared connection cannot keep.
const COMPARE_AND_SWAP: &str = "local v = redis.call('GET', KEYS[1]) \
    if (ARGV[1] == '0' and v == false) or (ARGV[1] == '1' and v == ARGV[2]) then \
    redis.call('SET', KEYS[1], ARGV[3]) return 1 end return 0";

/// Why a Redis store call failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisKvError {
    /// No connection could be made (refused, TLS handshake, timeout, authentication).
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] redis::RedisError),
    /// The server answered a command with an error, or the connection failed during it.
    #[error("{0}")]
    Command(#[source] redis::RedisError),
}

/// A store kept in a Redis server (`[key_value_store.<label>] type = "redis"`,
/// `url = "redis://..."`, or `rediss://` over TLS verified with
/// [`crate::host::tls::trust_store`]), as Spin's key-value-redis does it: keys as they are,
/// values as bytes, `KEYS *` for the key list, `INCRBY` for increments (Redis integers, as
/// text), an atomic script for compare-and-swap. Connects on first use and again after the
/// connection failed.
pub struct RedisStore {
    label: String,
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: the label only.
        f.debug_struct("RedisStore")
            .field("label", &self.label)
            .finish()
    }
}

impl RedisStore {
    /// Checks the URL; connects on first use (the server may start after the app).
    pub fn open(label: &str, url: &str) -> anyhow::Result<Self> {
        let client = crate::host::tls::redis_client(url, &crate::host::tls::trust_store().data)
            .map_err(|e| {
                anyhow::anyhow!(
                    "key-value store `{label}`: `url` is not a usable Redis URL ({e}): use \
                     redis://[user:password@]host[:port][/db], or rediss:// for TLS (verified \
                     with the platform's trust store: SSL_CERT_FILE, SSL_CERT_DIR, \
                     /etc/ssl/certs)"
                )
            })?;
        Ok(RedisStore {
            label: label.to_string(),
            client,
            conn: tokio::sync::Mutex::new(None),
        })
    }

    fn error(&self, e: RedisKvError) -> KvError {
        KvError::Redis {
            label: self.label.clone(),
            source: e,
        }
    }

    /// Opens a connection to the store's server: the one place this store connects.
    async fn connect(&self) -> Result<MultiplexedConnection, KvError> {
        // No response timeout, as with the blocking connection this replaces: a slow server
        // is bounded by the request's own deadline.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error(RedisKvError::Connect(e)))
    }

    /// A handle on the shared connection, connecting first if there is none.
    async fn connection(&self) -> Result<MultiplexedConnection, KvError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref() {
            return Ok(c.clone());
        }
        let c = self.connect().await?;
        *conn = Some(c.clone());
        Ok(c)
    }

    /// Runs `cmd`; a failed connection is dropped so that the next call reconnects.
    async fn query<T: FromRedisValue>(&self, cmd: Cmd) -> Result<T, KvError> {
        let mut c = self.connection().await?;
        match cmd.query_async(&mut c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    *self.conn.lock().await = None;
                }
                Err(self.error(RedisKvError::Command(e)))
            }
        }
    }
}

fn cmd(name: &str) -> Cmd {
    redis::cmd(name)
}

#[async_trait::async_trait]
impl KeyValueBackend for RedisStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.query(cmd("GET").arg(key).clone()).await
    }
    async fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.query(cmd("SET").arg(key).arg(value).clone()).await
    }
    async fn delete(&self, key: &str) -> Result<(), KvError> {
        self.query::<i64>(cmd("DEL").arg(key).clone())
            .await
            .map(drop)
    }
    async fn exists(&self, key: &str) -> Result<bool, KvError> {
        self.query(cmd("EXISTS").arg(key).clone()).await
    }
    async fn keys(&self) -> Result<Vec<String>, KvError> {
        self.query(cmd("KEYS").arg("*").clone()).await
    }
    async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        self.query(cmd("INCRBY").arg(key).arg(delta).clone()).await
    }
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError> {
        let c = cmd("EVAL")
            .arg(COMPARE_AND_SWAP)
            .arg(1)
            .arg(key)
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .arg(value)
            .clone();
        self.query::<i64>(c).await.map(|n| n == 1)
    }
}
