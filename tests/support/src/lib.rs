//! Fixtures shared by the workspace's test suites (spin-runtime's, the integration and CRI
//! tests): each starts something real on a loopback address and stops it on drop.
//! - [`servers`]: redis-server, PostgreSQL, MariaDB and mosquitto from Debian's packages;
//! - [`otlp`]: an OTLP collector (gRPC and HTTP, plain or TLS) that records what it is sent;
//! - [`https_origin`]: an HTTPS origin with a private CA, for URL component sources;
//! - [`pki`]: a private CA with server and client certificates (openssl CLI);
//! - [`curl`] and [`grpc`]: real HTTP/2 and gRPC clients (curl, tonic);
//! - [`moto`]: moto's DynamoDB/SQS server; [`origin`]: an HTTP origin counting open requests;
//! - [`secret_store`]: an HTTPS JSON stand-in for secret stores (Vault, Key Vault);
//! - [`libsql`]: a libSQL (Hrana 3 over HTTP) stand-in backed by real SQLite;
//! - [`cosmos`]: an Azure Cosmos DB (REST API) stand-in for the key-value store.

pub mod cosmos;
pub mod curl;
pub mod grpc;
pub mod https_origin;
pub mod libsql;
pub mod moto;
pub mod origin;
pub mod otlp;
pub mod pki;
pub mod secret_store;
pub mod servers;
