//! Spin 1.x outbound Redis (`fermyon:spin/redis`, unversioned): each call names its server
//! and runs on a connection opened for it through `fermyon:spin/redis@2.0.0`'s host
//! implementation on the instance's [`ComponentRedis`] (the same allow-list, URL rules, TLS
//! and connection cap), closed after. Spin 1.x's error is one case, `error`; the reason is
//! logged.

use wasmtime::component::{ComponentType, Lift, Lower, Resource};
use wasmtime::StoreContextMut;

use crate::host::bindings::fermyon::spin2_0_0::redis::{
    self as v2, HostConnection, RedisParameter, RedisResult,
};
use crate::host::redis::{ComponentRedis, RedisConnection};
use crate::state::InstanceState;

/// `fermyon:spin/redis-types.error`.
#[allow(dead_code)]
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug, PartialEq)]
#[component(enum)]
#[repr(u8)]
pub enum Error {
    #[component(name = "success")]
    Success,
    #[component(name = "error")]
    Error,
}

type R<T> = wasmtime::Result<(Result<T, Error>,)>;

/// Opens `address`, runs `op` on the connection, closes it.
async fn with_connection<T, F>(state: &mut InstanceState, address: String, op: F) -> R<T>
where
    F: for<'a> FnOnce(
        &'a mut ComponentRedis,
        Resource<RedisConnection>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = wasmtime::Result<Result<T, v2::Error>>> + Send + 'a>,
    >,
{
    let host = &mut state.host.features.redis;
    let conn = match HostConnection::open(host, address.clone()).await? {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("Spin 1.x outbound Redis: cannot open {address}: {e:?}");
            return Ok((Err(Error::Error),));
        }
    };
    let rep = conn.rep();
    let r = op(host, Resource::new_borrow(rep)).await;
    HostConnection::drop(host, Resource::new_own(rep)).await?;
    Ok((r?.map_err(|e| {
        tracing::error!("Spin 1.x outbound Redis on {address}: {e:?}");
        Error::Error
    }),))
}

macro_rules! redis_func {
    ($inst:expr, $name:literal, $method:ident, ($($arg:ident : $ty:ty),*) -> $out:ty, $map:expr) => {
        $inst.func_wrap_async(
            $name,
            |mut s: StoreContextMut<'_, InstanceState>, (address, $($arg,)*): (String, $($ty,)*)| {
                Box::new(async move {
                    let (r,) = with_connection(s.data_mut(), address, |h, c| {
                        Box::pin(HostConnection::$method(h, c, $($arg),*))
                    })
                    .await?;
                    let map: fn(_) -> $out = $map;
                    Ok((r.map(map),))
                })
            },
        )?
    };
}

/// Links `fermyon:spin/redis` (unversioned).
pub(super) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<InstanceState>,
) -> anyhow::Result<()> {
    let mut i = linker.instance("fermyon:spin/redis")?;
    redis_func!(i, "publish", publish, (channel: String, payload: Vec<u8>) -> (), |v| v);
    redis_func!(i, "get", get, (key: String) -> Vec<u8>, |v: Option<Vec<u8>>| v.unwrap_or_default());
    redis_func!(i, "set", set, (key: String, value: Vec<u8>) -> (), |v| v);
    redis_func!(i, "incr", incr, (key: String) -> i64, |v| v);
    redis_func!(i, "del", del, (keys: Vec<String>) -> i64, |v: u32| i64::from(v));
    redis_func!(i, "sadd", sadd, (key: String, values: Vec<String>) -> i64, |v: u32| i64::from(v));
    redis_func!(i, "smembers", smembers, (key: String) -> Vec<String>, |v| v);
    redis_func!(i, "srem", srem, (key: String, values: Vec<String>) -> i64, |v: u32| i64::from(v));
    redis_func!(
        i,
        "execute",
        execute,
        (command: String, arguments: Vec<RedisParameter>) -> Vec<RedisResult>,
        |v| v
    );
    Ok(())
}
