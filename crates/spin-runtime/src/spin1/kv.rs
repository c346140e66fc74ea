//! Spin 1.x key-value (`fermyon:spin/key-value`, unversioned): the same stores, access
//! rules and limits as `fermyon:spin/key-value@2.0.0`, whose host implementation this calls.
//! A 1.x store is a `u32`: the 2.0.0 store resource's handle in the instance's table.

use wasmtime::component::{ComponentType, Lift, Lower, Resource};
use wasmtime::StoreContextMut;

use crate::host::bindings::fermyon::spin2_0_0::key_value::{self as v2, HostStore};
use crate::host::kv::StoreHandle;
use crate::state::InstanceState;

/// `fermyon:spin/key-value.error`.
#[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq)]
#[component(variant)]
pub enum Error {
    #[component(name = "store-table-full")]
    StoreTableFull,
    #[component(name = "no-such-store")]
    NoSuchStore,
    #[component(name = "access-denied")]
    AccessDenied,
    #[component(name = "invalid-store")]
    InvalidStore,
    #[component(name = "no-such-key")]
    NoSuchKey,
    #[component(name = "io")]
    Io(String),
}

impl From<v2::Error> for Error {
    fn from(e: v2::Error) -> Self {
        match e {
            v2::Error::StoreTableFull => Error::StoreTableFull,
            v2::Error::NoSuchStore => Error::NoSuchStore,
            v2::Error::AccessDenied => Error::AccessDenied,
            v2::Error::Other(m) => Error::Io(m),
        }
    }
}

type R<T> = wasmtime::Result<(Result<T, Error>,)>;

fn borrow(store: u32) -> Resource<StoreHandle> {
    Resource::new_borrow(store)
}

fn conv<T>(r: wasmtime::Result<Result<T, v2::Error>>) -> R<T> {
    Ok((r?.map_err(Error::from),))
}

/// Defines `$name` as an async host function over the 2.0.0 store (the guest waits on its
/// fiber while the store's backend answers).
macro_rules! kv_func {
    ($inst:expr, $name:literal, ($($arg:ident : $ty:ty),*) -> $out:ty, |$h:ident| $body:expr) => {
        $inst.func_wrap_async(
            $name,
            |mut s: StoreContextMut<'_, InstanceState>, ($($arg,)*): ($($ty,)*)| {
                Box::new(async move {
                    let $h = &mut s.data_mut().host.features.key_value;
                    let r: $out = $body;
                    r
                })
            },
        )?
    };
}

/// Links `fermyon:spin/key-value` (unversioned).
pub(super) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<InstanceState>,
) -> anyhow::Result<()> {
    let mut i = linker.instance("fermyon:spin/key-value")?;
    kv_func!(i, "open", (name: String) -> R<u32>, |h| {
        let r = HostStore::open(h, name).await?;
        Ok((r.map(|h| h.rep()).map_err(Error::from),))
    });
    kv_func!(i, "get", (st: u32, key: String) -> R<Vec<u8>>, |h| {
        match HostStore::get(h, borrow(st), key).await? {
            Ok(Some(v)) => Ok((Ok(v),)),
            Ok(None) => Ok((Err(Error::NoSuchKey),)),
            Err(e) => Ok((Err(e.into()),)),
        }
    });
    kv_func!(i, "set", (st: u32, key: String, value: Vec<u8>) -> R<()>, |h| {
        conv(HostStore::set(h, borrow(st), key, value).await)
    });
    kv_func!(i, "delete", (st: u32, key: String) -> R<()>, |h| {
        conv(HostStore::delete(h, borrow(st), key).await)
    });
    kv_func!(i, "exists", (st: u32, key: String) -> R<bool>, |h| {
        conv(HostStore::exists(h, borrow(st), key).await)
    });
    kv_func!(i, "get-keys", (st: u32) -> R<Vec<String>>, |h| {
        conv(HostStore::get_keys(h, borrow(st)).await)
    });
    kv_func!(i, "close", (st: u32) -> wasmtime::Result<()>, |h| {
        HostStore::drop(h, Resource::new_own(st)).await
    });
    Ok(())
}
