//! spin-demo
