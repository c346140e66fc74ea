//! The Spin application format, with no runtime attached: `spin.toml` version 2 in
//! ([`manifest`]), the locked app in and out ([`locked`]), typed trigger configuration
//! ([`trigger`]), the `allowed_http_hosts` conversion ([`hosts`]) and the OCI artifact media
//! types ([`oci`]), component sources by URL ([`remote`]), the id rules both the manifest
//! and the lock check ([`ids`]), and how untrusted text and files are shown and read
//! ([`untrusted`]).
//!
//! Everything here is written from Spin's own definitions (the `spin-manifest`,
//! `spin-locked-app`, `spin-loader`, `spin-http` and `spin-oci` crates), so a lock this crate
//! writes is one Spin reads, and a lock Spin writes (from `spin up` or `spin registry push`)
//! is one this crate reads. The Spin runtime, the shim and the OCI image builder all go
//! through it.

#![warn(missing_docs)]

pub mod hosts;
pub mod ids;
pub mod locked;
pub mod manifest;
pub mod oci;
mod ordered;
pub mod remote;
pub mod trigger;
pub mod untrusted;

pub use locked::{ContentPath, ContentRef, LockedApp, LockedComponent, LockedTrigger};
pub use manifest::{LocalApp, LocalFile};
pub use ordered::OrderedMap;
pub use trigger::{
    CommandTriggerConfig, CronTriggerConfig, HttpExecutor, HttpRoute, HttpTriggerConfig,
    MqttTriggerConfig, MqttTriggerMetadata, RedisTriggerConfig, RedisTriggerMetadata,
    TriggerConfig,
};
