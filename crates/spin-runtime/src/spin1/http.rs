//! Spin 1.x HTTP: the inbound `fermyon:spin/inbound-http` export (`handle-request`, one
//! call with the whole request, as Spin's `spin` executor makes it) and the outbound
//! `fermyon:spin/http` import (`send-request`), which goes through the same allow-list,
//! service chaining, self requests and client TLS as wasi:http's outbound requests.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use wasmtime::component::{ComponentExportIndex, ComponentType, InstancePre, Lift, Lower};
use wasmtime::StoreContextMut;
use wasmtime_wasi_http::WasiHttpHooks;

use crate::state::InstanceState;

pub use crate::limits::MAX_BODY_BYTES;

/// `fermyon:spin/http-types.method`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug, PartialEq)]
#[component(enum)]
#[repr(u8)]
pub enum Method {
    #[component(name = "get")]
    Get,
    #[component(name = "post")]
    Post,
    #[component(name = "put")]
    Put,
    #[component(name = "delete")]
    Delete,
    #[component(name = "patch")]
    Patch,
    #[component(name = "head")]
    Head,
    #[component(name = "options")]
    Options,
}

/// `fermyon:spin/http-types.request`.
#[derive(ComponentType, Lift, Lower, Clone, Debug)]
#[component(record)]
pub struct Request {
    pub(crate) method: Method,
    pub(crate) uri: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) params: Vec<(String, String)>,
    pub(crate) body: Option<Vec<u8>>,
}

/// `fermyon:spin/http-types.response`.
#[derive(ComponentType, Lift, Lower, Clone, Debug)]
#[component(record)]
pub struct Response1 {
    pub(crate) status: u16,
    pub(crate) headers: Option<Vec<(String, String)>>,
    pub(crate) body: Option<Vec<u8>>,
}

/// `fermyon:spin/http-types.http-error` (every case of the interface; the host never
/// answers `success` or `too-many-requests`).
#[allow(dead_code)]
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug, PartialEq)]
#[component(enum)]
#[repr(u8)]
pub enum HttpError {
    #[component(name = "success")]
    Success,
    #[component(name = "destination-not-allowed")]
    DestinationNotAllowed,
    #[component(name = "invalid-url")]
    InvalidUrl,
    #[component(name = "request-error")]
    RequestError,
    #[component(name = "runtime-error")]
    RuntimeError,
    #[component(name = "too-many-requests")]
    TooManyRequests,
}

impl Method {
    pub(crate) fn from_http(m: &http::Method) -> Option<Self> {
        Some(match *m {
            http::Method::GET => Method::Get,
            http::Method::POST => Method::Post,
            http::Method::PUT => Method::Put,
            http::Method::DELETE => Method::Delete,
            http::Method::PATCH => Method::Patch,
            http::Method::HEAD => Method::Head,
            http::Method::OPTIONS => Method::Options,
            _ => return None,
        })
    }

    fn to_http(self) -> http::Method {
        match self {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
            Method::Put => http::Method::PUT,
            Method::Delete => http::Method::DELETE,
            Method::Patch => http::Method::PATCH,
            Method::Head => http::Method::HEAD,
            Method::Options => http::Method::OPTIONS,
        }
    }
}

/// The `fermyon:spin/inbound-http` `handle-request` export of a pre-instantiated component.
#[derive(Clone)]
pub(crate) struct InboundHttpPre {
    pub(crate) pre: InstancePre<InstanceState>,
    pub(crate) func: ComponentExportIndex,
}

impl InboundHttpPre {
    /// The handler of `pre`, if its component exports `fermyon:spin/inbound-http`.
    pub(crate) fn new(pre: &InstancePre<InstanceState>) -> Option<Self> {
        let component = pre.component();
        let iface = component.get_export_index(None, super::HTTP_EXPORT.1)?;
        let func = component.get_export_index(Some(&iface), "handle-request")?;
        Some(InboundHttpPre {
            pre: pre.clone(),
            func,
        })
    }
}

/// Fails, naming component `id`, when it exports `fermyon:spin/inbound-http` without its
/// `handle-request` function.
pub(crate) fn check_handler(
    component: &wasmtime::component::Component,
    id: &str,
) -> anyhow::Result<()> {
    let iface = component.get_export_index(None, super::HTTP_EXPORT.1);
    if iface
        .and_then(|i| component.get_export_index(Some(&i), "handle-request"))
        .is_none()
    {
        anyhow::bail!(
            "component `{id}` exports `{}` without its `handle-request` function; a Spin 1.x \
             HTTP module exports `handle-http-request`, or rebuild it with a current Spin SDK",
            super::HTTP_EXPORT.1
        );
    }
    Ok(())
}

/// Links `fermyon:spin/http` (unversioned) `send-request`.
pub(super) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<InstanceState>,
) -> anyhow::Result<()> {
    linker.instance("fermyon:spin/http")?.func_wrap_async(
        "send-request",
        |mut store: StoreContextMut<'_, InstanceState>, (req,): (Request,)| {
            let span =
                crate::host::import_span("fermyon:spin/http", "send-request", &store.data().host);
            let fut = send(store.data_mut(), req);
            Box::new(tracing::Instrument::instrument(
                async move { Ok((fut.await,)) },
                span,
            ))
        },
    )?;
    Ok(())
}

/// Sends a Spin 1.x outbound request through the host's outbound hook: the allow-list
/// (`destination-not-allowed`), chaining, self requests (a relative `uri`) and client TLS;
/// the response body is read whole (at most [`MAX_BODY_BYTES`]).
fn send(
    state: &mut InstanceState,
    req: Request,
) -> impl std::future::Future<Output = Result<Response1, HttpError>> + Send + 'static {
    let prepared = (|| {
        let uri: http::Uri = req.uri.parse().map_err(|_| HttpError::InvalidUrl)?;
        if crate::host::check_outbound(&state.host, &uri).is_err() {
            return Err(HttpError::DestinationNotAllowed);
        }
        let mut builder = http::Request::builder()
            .method(req.method.to_http())
            .uri(uri);
        for (n, v) in &req.headers {
            builder = builder.header(n, v);
        }
        let body = Full::new(Bytes::from(req.body.unwrap_or_default()))
            .map_err(|never| match never {})
            .boxed_unsync();
        let request = builder.body(body).map_err(|_| HttpError::RequestError)?;
        Ok(WasiHttpHooks::send_request(
            &mut state.host,
            request,
            None,
            Box::new(async { Ok(()) }),
        ))
    })();
    async move {
        let fut = prepared?;
        let (resp, io) = Box::into_pin(fut).await.map_err(|e| {
            tracing::debug!("Spin 1.x outbound request failed: {e:?}");
            match e {
                wasmtime_wasi_http::Error::HttpRequestDenied => HttpError::DestinationNotAllowed,
                wasmtime_wasi_http::Error::HttpRequestUriInvalid => HttpError::InvalidUrl,
                _ => HttpError::RequestError,
            }
        })?;
        let io = tokio::spawn(Box::into_pin(io));
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|_| HttpError::RuntimeError)?
            .to_bytes();
        io.abort();
        let headers = parts
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_string())))
            .collect();
        Ok(Response1 {
            status: parts.status.as_u16(),
            headers: Some(headers),
            body: Some(body.to_vec()),
        })
    }
}
