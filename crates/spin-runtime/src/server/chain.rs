//! Requests from a component to its own app, as Spin handles them:
//! - **service chaining**: `http://<component>.spin.internal/<path>` goes in-process to that
//!   component (private routes included), bypassing the router, as if `/<path>` had
//!   matched a `/...` route; the allow-list must say `http://<component>.spin.internal` or
//!   `http://*.spin.internal`;
//! - **self requests**: a relative URL (or host `self.alt`) goes to the app's own HTTP
//!   listener, routed like any request; the allow-list must say `http://self`.
//!
//! Spin's `parse_service_chaining_target`, `RouteMatch::synthetic` and
//! `prepare_request` (factor-outbound-http) are the definitions followed.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};

use http::Request;
use wasmtime_wasi_http::{Error, WasiBody};

use crate::runtime::LoadedApp;

/// The service-chaining domain.
pub const SERVICE_CHAINING_DOMAIN: &str = "spin.internal";

/// The component a URL chains to: `<id>` of host `<id>.spin.internal` (any port).
pub fn chaining_target(uri: &http::Uri) -> Option<String> {
    let host = uri.authority().map(|a| a.host().trim())?;
    let (first, rest) = host.split_once('.')?;
    (rest.eq_ignore_ascii_case(SERVICE_CHAINING_DOMAIN) && !first.is_empty())
        .then(|| first.to_string())
}

pub use crate::host::outbound::is_self_request;

/// Where an app's components send requests to their own app: the loaded app (for
/// chaining) and its listener (for self requests), set when the app starts serving.
#[derive(Debug, Default)]
pub struct ChainSlot {
    app: OnceLock<Weak<LoadedApp>>,
    origin: OnceLock<SocketAddr>,
}

impl ChainSlot {
    /// Binds the slot to the serving app and its listen address (first call wins).
    pub(crate) fn bind(&self, app: &Arc<LoadedApp>, origin: SocketAddr) {
        let _ = self.app.set(Arc::downgrade(app));
        let _ = self.origin.set(origin);
    }

    /// The app's listen address, once serving.
    pub fn origin(&self) -> Option<SocketAddr> {
        self.origin.get().copied()
    }

    /// Rewrites a self request to the app's own listener (`http://<listen addr><path>`,
    /// no `Host` header, as Spin does), or fails when the app is not serving.
    pub fn to_self(&self, req: &mut Request<WasiBody>) -> Result<(), Error> {
        let Some(origin) = self.origin() else {
            tracing::error!("outbound request to a relative URL, but the app has no HTTP listener");
            return Err(Error::HttpRequestUriInvalid);
        };
        let paq = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        *req.uri_mut() = format!("http://{origin}{paq}")
            .parse()
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        req.headers_mut().remove(http::header::HOST);
        Ok(())
    }

    /// Sends a service-chaining request to component `target` in-process.
    pub async fn call(
        &self,
        target: &str,
        mut req: Request<WasiBody>,
    ) -> Result<http::Response<WasiBody>, Error> {
        let Some(app) = self.app.get().and_then(Weak::upgrade) else {
            tracing::error!(
                target,
                "service chaining request, but the app is not serving"
            );
            return Err(Error::InternalError(Some(
                "service chaining: the app is not serving".into(),
            )));
        };
        let Some(component) = app.component(target) else {
            tracing::error!(
                "service chaining request to http://{target}.{SERVICE_CHAINING_DOMAIN}: the app has no HTTP component `{target}`"
            );
            return Err(Error::DestinationNotFound);
        };
        // As Spin's `strip_forbidden_headers`: the chaining host and transport headers are
        // not the callee's business.
        let headers = req.headers_mut();
        if headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|h| {
                chaining_target(&format!("http://{h}/").parse().unwrap_or_default()).is_some()
            })
        {
            headers.remove(http::header::HOST);
        }
        headers.remove(http::header::CONNECTION);
        super::call_chained(&app, &component, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaining_hosts_as_spin_parses_them() {
        let t = |u: &str| chaining_target(&u.parse().unwrap());
        assert_eq!(t("http://back.spin.internal/x"), Some("back".into()));
        assert_eq!(t("http://back.spin.internal:8080/"), Some("back".into()));
        assert_eq!(t("http://back.spin.internal.example.com/"), None);
        assert_eq!(t("http://spin.internal/"), None);
        assert_eq!(t("/relative"), None);
        assert!(is_self_request(&"/relative".parse().unwrap()));
        assert!(is_self_request(&"http://self.alt/x".parse().unwrap()));
        assert!(!is_self_request(&"http://example.com/x".parse().unwrap()));
    }
}
