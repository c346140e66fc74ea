//! Spin 1.x key-value (`fermyon:spin/key-value`, unversioned): the same stores, access
//! rules and limits as `fermyon:spin/key-value@2.0.0`, whose host implementation this calls.
//! A 1.x store is a `u32`: the 2.0.0 store resource's handle in the instance's table.

use wasmtime::component::{ComponentType, Lift, Lower, Resource};
use wasmtime::StoreContextMut;

use crate::host::bindings::fermyon::spin2_0_0::key_value::{self as v2, HostStore};
use crate::host::kv::StoreHandle;
use crate::InstanceState;

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

/// Links `fermyon:spin/key-value` (unversioned).
pub(super) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<InstanceState>,
) -> anyhow::Result<()> {
    type S<'a> = StoreContextMut<'a, InstanceState>;
    let mut i = linker.instance("fermyon:spin/key-value")?;
    i.func_wrap("open", |mut s: S<'_>, (name,): (String,)| -> R<u32> {
        let r = HostStore::open(&mut s.data_mut().host, name)?;
        Ok((r.map(|h| h.rep()).map_err(Error::from),))
    })?;
    i.func_wrap(
        "get",
        |mut s: S<'_>, (st, key): (u32, String)| -> R<Vec<u8>> {
            match HostStore::get(&mut s.data_mut().host, borrow(st), key)? {
                Ok(Some(v)) => Ok((Ok(v),)),
                Ok(None) => Ok((Err(Error::NoSuchKey),)),
                Err(e) => Ok((Err(e.into()),)),
            }
        },
    )?;
    i.func_wrap(
        "set",
        |mut s: S<'_>, (st, key, value): (u32, String, Vec<u8>)| -> R<()> {
            conv(HostStore::set(
                &mut s.data_mut().host,
                borrow(st),
                key,
                value,
            ))
        },
    )?;
    i.func_wrap(
        "delete",
        |mut s: S<'_>, (st, key): (u32, String)| -> R<()> {
            conv(HostStore::delete(&mut s.data_mut().host, borrow(st), key))
        },
    )?;
    i.func_wrap(
        "exists",
        |mut s: S<'_>, (st, key): (u32, String)| -> R<bool> {
            conv(HostStore::exists(&mut s.data_mut().host, borrow(st), key))
        },
    )?;
    i.func_wrap(
        "get-keys",
        |mut s: S<'_>, (st,): (u32,)| -> R<Vec<String>> {
            conv(HostStore::get_keys(&mut s.data_mut().host, borrow(st)))
        },
    )?;
    i.func_wrap(
        "close",
        |mut s: S<'_>, (st,): (u32,)| -> wasmtime::Result<()> {
            HostStore::drop(&mut s.data_mut().host, Resource::new_own(st))
        },
    )?;
    Ok(())
}
