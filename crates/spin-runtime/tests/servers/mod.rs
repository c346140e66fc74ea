//! Re-export of the shared fixture in `tests/support` (crate `test-support`).
#![allow(unused_imports)]
pub use test_support::servers::*;
