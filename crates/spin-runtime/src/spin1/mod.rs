//! Spin 1.x-style modules: wasip1 core modules written against Spin's first interfaces
//! (wit-bindgen 0.2's ABI): they export `handle-http-request` (HTTP trigger) or
//! `handle-redis-message` (Redis trigger) and import `spin-config`, `wasi-outbound-http`,
//! `key-value`, `outbound-redis`, ... as core module names. The Spin Go SDK up to 2.x
//! (TinyGo) builds such modules, and so did Rust's spin-sdk 1.x.
//!
//! wit-bindgen 0.2's lowering of these interfaces is the canonical ABI's for the same types
//! (flat parameters, a return area for compound results, `canonical_abi_realloc` for what
//! the host hands the guest), and Spin 2 published the same interfaces as the unversioned
//! `fermyon:spin` WIT package. So a module is adapted by renaming, not by an adapter of its
//! own: each import is moved to its `fermyon:spin/<interface>` name, the two exports to
//! their `fermyon:spin/inbound-http#handle-request` and
//! `fermyon:spin/inbound-redis#handle-message` names, the world (that package's `host`
//! world, keeping only the exports the module has) is embedded, and `wit-component` makes
//! the component with the WASI preview1 reactor adapter. The HTTP export is called by
//! [`http`]; `fermyon:spin/inbound-redis` is what the Redis trigger already calls.

pub(crate) mod http;
mod kv;
mod redis;

pub use crate::engine::spin1::{check, componentize, is_spin1_module, HTTP_EXPORT, REDIS_EXPORT};

/// Adds the Spin 1.x interfaces the host does not link elsewhere (`fermyon:spin/http`,
/// `fermyon:spin/key-value`, `fermyon:spin/redis`, unversioned) to `linker`.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<crate::state::InstanceState>,
) -> anyhow::Result<()> {
    http::add_to_linker(linker)?;
    kv::add_to_linker(linker)?;
    redis::add_to_linker(linker)?;
    Ok(())
}
