//! Engine and compilation, the layer above the app model and below host features and
//! instances: the process's wasmtime engines ([`config`]), the compile plan of an app
//! ([`plan`]), the compiled-component cache ([`compile_cache`]), tiered compilation's
//! compile side ([`tier`]), and what turns shipped Wasm into the component that is compiled
//! (wasip1 modules: [`componentize`], Spin 1.x modules: [`spin1`]; WASIp3 snapshot
//! components: [`retarget`]; Spin 4 middleware composed in front of a component:
//! [`middleware`]). Nothing here imports instances, the HTTP server or triggers.

pub mod compile_cache;
pub mod componentize;
mod config;
pub mod middleware;
pub mod plan;
pub mod retarget;
pub mod spin1;
pub mod tier;

pub use config::{create_engine, engine, engine_with_memory_cap, PoolResidency, POOLING_ENV};
