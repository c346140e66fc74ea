//! SDK proof app built against spin-sdk 3.x (see ../../sdk-common/handler.rs).
const SDK: &str = "3";
include!("../../sdk-common/handler.rs");

/// No routes beyond the shared handler's.
fn extra_route(_route: &str) -> Option<(u16, String)> {
    None
}
