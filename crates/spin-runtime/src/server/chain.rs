//! Requests from a component to its own app, as Spin handles them:
//! - **service chaining**: `http://<component>.spin.internal/<path>` goes in-process to that
//!   component (private routes included), bypassing the router, as if `/<path>` had
//!   matched a `/...` route; the allow-list must say `http://<component>.spin.internal` or
//!   `http://*.spin.internal`;
//! - **self requests**: a relative URL (or host `self.alt`) goes to the app's own HTTP
//!   listener, routed like any request; the allow-list must say `http://self`.
//!
//! The host side (which URL goes where, the app's
//! [`ChainSlot`](crate::host::outbound::ChainSlot)) is [`crate::host::outbound`]; this is
//! the server's side: the loaded app answering a chained request. Spin's `parse_service_chaining_target`, `RouteMatch::synthetic` and
//! `prepare_request` (factor-outbound-http) are the definitions followed.

use http::Request;
use wasmtime_wasi_http::{Error, WasiBody};

use crate::host::outbound::{ChainedResponse, LocalApp, SERVICE_CHAINING_DOMAIN};
use crate::runtime::LoadedApp;

impl LocalApp for LoadedApp {
    fn call_component<'a>(
        &'a self,
        target: &'a str,
        req: Request<WasiBody>,
    ) -> ChainedResponse<'a> {
        Box::pin(async move {
            let Some(component) = self.component(target) else {
                tracing::error!(
                    "service chaining request to http://{target}.{SERVICE_CHAINING_DOMAIN}: the app has no HTTP component `{target}`"
                );
                return Err(Error::DestinationNotFound);
            };
            super::call_chained(self, &component, req).await
        })
    }
}
