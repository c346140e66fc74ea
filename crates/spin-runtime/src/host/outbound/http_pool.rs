//! Keep-alive reuse of outbound HTTP/1.1 connections (`[outbound_http] connection_pooling`,
//! on unless set to `false`, as in Spin). One pool per app, beside its
//! [`NetworkPolicy`](crate::host::network_policy::NetworkPolicy), so it ends with the app.
//!
//! A connection goes back to the pool only when its response body was read to the end, and
//! is taken again only for the same component (allow-lists are per component), host, port
//! and TLS client config (the same `Arc`; none for plain HTTP). An idle connection still
//! holds its connection-cap permits; it is closed after [`IDLE_TIMEOUT`], or earlier when a
//! new connection would wait for a permit ([`HttpPool::evict_oldest`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
use tokio::time::Instant;
use wasmtime_wasi_http::WasiBody;

/// How long an idle pooled connection stays open (hyper's client default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What a pooled connection may be reused for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    component: String,
    host: String,
    port: u16,
    /// The address of the TLS client config (`None`: plain HTTP); the idle entry holds the
    /// `Arc`, so the address cannot be taken by another config meanwhile.
    tls: Option<usize>,
}

impl Key {
    /// The key of `component`'s connections to `host:port` over `tls`.
    pub fn new(
        component: &str,
        host: &str,
        port: u16,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Key {
        Key {
            component: component.to_string(),
            host: host.to_ascii_lowercase(),
            port,
            tls: tls.map(|c| Arc::as_ptr(c) as usize),
        }
    }
}

/// An open connection, ready to go back to its pool when its response ends.
pub struct Pooled {
    pool: Weak<HttpPool>,
    key: Key,
    sender: SendRequest<WasiBody>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Pooled {
    /// The connection of `sender`, for `pool` under `key`.
    pub fn new(
        pool: &Arc<HttpPool>,
        key: Key,
        sender: SendRequest<WasiBody>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Pooled {
        Pooled {
            pool: Arc::downgrade(pool),
            key,
            sender,
            tls,
        }
    }

    /// Puts the connection back in its pool (if the app and the connection are still there).
    pub fn release(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.put(self.key, self.sender, self.tls);
        }
    }
}

struct Idle {
    sender: SendRequest<WasiBody>,
    _tls: Option<Arc<rustls::ClientConfig>>,
    since: Instant,
}

#[derive(Default)]
struct Slots {
    idle: HashMap<Key, Vec<Idle>>,
    reaper: bool,
}

/// The idle connections of one app.
#[derive(Default)]
pub struct HttpPool {
    slots: Mutex<Slots>,
}

impl std::fmt::Debug for HttpPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle: usize = self.lock().idle.values().map(Vec::len).sum();
        f.debug_struct("HttpPool").field("idle", &idle).finish()
    }
}

impl HttpPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The most recently used idle connection under `key` that is still open, if any.
    pub fn take(&self, key: &Key) -> Option<SendRequest<WasiBody>> {
        let mut slots = self.lock();
        let list = slots.idle.get_mut(key)?;
        let mut found = None;
        while let Some(idle) = list.pop() {
            if !idle.sender.is_closed() && idle.since.elapsed() < IDLE_TIMEOUT {
                found = Some(idle.sender);
                break;
            }
        }
        if list.is_empty() {
            slots.idle.remove(key);
        }
        found
    }

    /// Closes the connection idle the longest (it frees its permits), if any.
    pub fn evict_oldest(&self) -> bool {
        let mut slots = self.lock();
        let oldest = slots
            .idle
            .iter()
            .filter_map(|(k, list)| list.first().map(|i| (i.since, k.clone())))
            .min_by_key(|(since, _)| *since);
        let Some((_, key)) = oldest else {
            return false;
        };
        if let Some(list) = slots.idle.get_mut(&key) {
            list.remove(0);
            if list.is_empty() {
                slots.idle.remove(&key);
            }
        }
        true
    }

    fn put(
        self: Arc<Self>,
        key: Key,
        sender: SendRequest<WasiBody>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) {
        if sender.is_closed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut slots = self.lock();
        slots.idle.entry(key).or_default().push(Idle {
            sender,
            _tls: tls,
            since: Instant::now(),
        });
        if !slots.reaper {
            slots.reaper = true;
            runtime.spawn(reap(Arc::downgrade(&self)));
        }
    }
}

/// Closes idle connections when their idle timeout passes; ends when the pool is empty
/// (the next idle connection starts another) or gone.
async fn reap(pool: Weak<HttpPool>) {
    loop {
        let next = {
            let Some(pool) = pool.upgrade() else { return };
            let mut slots = pool.lock();
            let now = Instant::now();
            slots.idle.retain(|_, list| {
                list.retain(|i| {
                    now.duration_since(i.since) < IDLE_TIMEOUT && !i.sender.is_closed()
                });
                !list.is_empty()
            });
            let oldest = slots.idle.values().flatten().map(|i| i.since).min();
            match oldest {
                Some(since) => since + IDLE_TIMEOUT,
                None => {
                    slots.reaper = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next).await;
    }
}
