//! Fixtures shared by the workspace's test suites (spin-runtime's, the integration and CRI
//! tests): each starts something real on a loopback address and stops it on drop.
//! - [`servers`]: redis-server, PostgreSQL, MariaDB and mosquitto from Debian's packages;
//! - [`otlp`]: an OTLP collector (gRPC and HTTP, plain or TLS) that records what it is sent;
//! - [`https_origin`]: an HTTPS origin with a private CA, for URL component sources.

pub mod https_origin;
pub mod otlp;
pub mod servers;
