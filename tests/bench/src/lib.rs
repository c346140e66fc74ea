//! shim-bench
