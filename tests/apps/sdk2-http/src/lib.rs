//! SDK proof app built against spin-sdk 2.x (see ../../sdk-common/handler.rs).
const SDK: &str = "2";
include!("../../sdk-common/handler.rs");
