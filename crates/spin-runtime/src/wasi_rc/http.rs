//! `wasi:http@0.2.0-rc-2023-10-18` on wasmtime-wasi-http's 0.2 implementation: the
//! snapshot's `types` and `outgoing-handler` imports, and its `incoming-handler` export
//! ([`ProxyPre`]), all on 0.2's resources.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::p2::bindings as l;
use wasmtime_wasi_http::{WasiHttp, WasiHttpCtxView, WasiHttpView};

/// Bindings of `wasi:http/proxy@0.2.0-rc-2023-10-18`, resources mapped to 0.2's.
#[allow(missing_docs, dead_code, clippy::all)]
mod bindings {
    macro_rules! wasi_rc_http_bindgen {
        ($path:tt) => {
            wasmtime::component::bindgen!({
                path: $path,
                world: "wasi:http/proxy@0.2.0-rc-2023-10-18",
                imports: { default: trappable },
                exports: { default: async },
                with: {
                    "wasi:io/poll.pollable": wasmtime_wasi::p2::DynPollable,
                    "wasi:io/streams.input-stream": wasmtime_wasi::p2::DynInputStream,
                    "wasi:io/streams.output-stream": wasmtime_wasi::p2::DynOutputStream,
                    "wasi:io/streams.error": wasmtime::Error,
                    "wasi:http/types.fields": wasmtime_wasi_http::p2::bindings::http::types::Fields,
                    "wasi:http/types.incoming-request": wasmtime_wasi_http::p2::bindings::http::types::IncomingRequest,
                    "wasi:http/types.outgoing-request": wasmtime_wasi_http::p2::bindings::http::types::OutgoingRequest,
                    "wasi:http/types.response-outparam": wasmtime_wasi_http::p2::bindings::http::types::ResponseOutparam,
                    "wasi:http/types.incoming-response": wasmtime_wasi_http::p2::bindings::http::types::IncomingResponse,
                    "wasi:http/types.incoming-body": wasmtime_wasi_http::p2::bindings::http::types::IncomingBody,
                    "wasi:http/types.future-trailers": wasmtime_wasi_http::p2::bindings::http::types::FutureTrailers,
                    "wasi:http/types.outgoing-response": wasmtime_wasi_http::p2::bindings::http::types::OutgoingResponse,
                    "wasi:http/types.outgoing-body": wasmtime_wasi_http::p2::bindings::http::types::OutgoingBody,
                    "wasi:http/types.future-incoming-response": wasmtime_wasi_http::p2::bindings::http::types::FutureIncomingResponse,
                },
            });
        };
    }
    include!(concat!(env!("OUT_DIR"), "/wasi_rc_http_bindings.rs"));
}

/// A component pre-instantiated for its snapshot `incoming-handler` export.
pub(crate) use bindings::ProxyPre;

use bindings::wasi::http0_2_0_rc_2023_10_18::{outgoing_handler, types as t};
use t::{
    Error, Fields, FutureIncomingResponse, FutureTrailers, IncomingBody, IncomingRequest,
    IncomingResponse, Method, OutgoingBody, OutgoingRequest, OutgoingResponse, ResponseOutparam,
    Scheme, StatusCode,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable};

/// Links the snapshot's `wasi:http/types` and `wasi:http/outgoing-handler`.
pub(super) fn add_to_linker<T: WasiHttpView + Send + 'static>(
    linker: &mut Linker<T>,
) -> anyhow::Result<()> {
    t::add_to_linker::<_, WasiHttp>(linker, |s| s.http())?;
    outgoing_handler::add_to_linker::<_, WasiHttp>(linker, |s| s.http())?;
    Ok(())
}

/// Calls the snapshot `incoming-handler` of a component instance in `store` with 0.2
/// request and response-outparam resources (as the server makes them for 0.2 handlers).
/// `instantiated` runs once the instance exists (for metrics).
pub(crate) async fn call_handle<T: Send + 'static>(
    pre: &ProxyPre<T>,
    store: &mut wasmtime::Store<T>,
    request: Resource<IncomingRequest>,
    out: Resource<ResponseOutparam>,
    instantiated: impl FnOnce(),
) -> wasmtime::Result<()> {
    let proxy = pre.instantiate_async(&mut *store).await?;
    instantiated();
    proxy
        .wasi_http0_2_0_rc_2023_10_18_incoming_handler()
        .call_handle(&mut *store, request, out)
        .await
}

/// A header the snapshot's infallible field functions were given and 0.2 refuses (a
/// forbidden or malformed name or value): the guest has no way to hear of it, so it traps.
fn header_trap(e: wasmtime_wasi_http::p2::HeaderError) -> wasmtime::Error {
    match e.downcast() {
        Ok(e) => wasmtime::format_err!("invalid HTTP header: {e:?}"),
        Err(trap) => trap,
    }
}

impl t::Host for WasiHttpCtxView<'_> {}

impl t::HostFields for WasiHttpCtxView<'_> {
    fn new(&mut self, entries: Vec<(String, Vec<u8>)>) -> wasmtime::Result<Resource<Fields>> {
        l::http::types::HostFields::from_list(self, entries).map_err(header_trap)
    }

    fn get(&mut self, f: Resource<Fields>, name: String) -> wasmtime::Result<Vec<Vec<u8>>> {
        l::http::types::HostFields::get(self, f, name)
    }

    fn set(
        &mut self,
        f: Resource<Fields>,
        name: String,
        value: Vec<Vec<u8>>,
    ) -> wasmtime::Result<()> {
        l::http::types::HostFields::set(self, f, name, value).map_err(header_trap)
    }

    fn delete(&mut self, f: Resource<Fields>, name: String) -> wasmtime::Result<()> {
        l::http::types::HostFields::delete(self, f, name).map_err(header_trap)
    }

    fn append(
        &mut self,
        f: Resource<Fields>,
        name: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<()> {
        l::http::types::HostFields::append(self, f, name, value).map_err(header_trap)
    }

    fn entries(&mut self, f: Resource<Fields>) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        l::http::types::HostFields::entries(self, f)
    }

    fn clone(&mut self, f: Resource<Fields>) -> wasmtime::Result<Resource<Fields>> {
        l::http::types::HostFields::clone(self, f)
    }

    fn drop(&mut self, rep: Resource<Fields>) -> wasmtime::Result<()> {
        l::http::types::HostFields::drop(self, rep)
    }
}

impl t::HostIncomingRequest for WasiHttpCtxView<'_> {
    fn method(&mut self, r: Resource<IncomingRequest>) -> wasmtime::Result<Method> {
        Ok(l::http::types::HostIncomingRequest::method(self, r)?.into())
    }

    fn path_with_query(
        &mut self,
        r: Resource<IncomingRequest>,
    ) -> wasmtime::Result<Option<String>> {
        l::http::types::HostIncomingRequest::path_with_query(self, r)
    }

    fn scheme(&mut self, r: Resource<IncomingRequest>) -> wasmtime::Result<Option<Scheme>> {
        Ok(l::http::types::HostIncomingRequest::scheme(self, r)?.map(Scheme::from))
    }

    fn authority(&mut self, r: Resource<IncomingRequest>) -> wasmtime::Result<Option<String>> {
        l::http::types::HostIncomingRequest::authority(self, r)
    }

    fn headers(&mut self, r: Resource<IncomingRequest>) -> wasmtime::Result<Resource<Fields>> {
        l::http::types::HostIncomingRequest::headers(self, r)
    }

    fn consume(
        &mut self,
        r: Resource<IncomingRequest>,
    ) -> wasmtime::Result<Result<Resource<IncomingBody>, ()>> {
        l::http::types::HostIncomingRequest::consume(self, r)
    }

    fn drop(&mut self, rep: Resource<IncomingRequest>) -> wasmtime::Result<()> {
        l::http::types::HostIncomingRequest::drop(self, rep)
    }
}

impl t::HostOutgoingRequest for WasiHttpCtxView<'_> {
    /// 0.2 builds a request with setters; a value 0.2 refuses traps, as the snapshot's
    /// constructor cannot fail. An absent authority is left to the scheme's default port,
    /// as the snapshot's implementations did.
    fn new(
        &mut self,
        method: Method,
        path_with_query: Option<String>,
        scheme: Option<Scheme>,
        authority: Option<String>,
        headers: Resource<Fields>,
    ) -> wasmtime::Result<Resource<OutgoingRequest>> {
        let headers = l::http::types::HostFields::clone(self, headers)?;
        let request = l::http::types::HostOutgoingRequest::new(self, headers)?;
        let authority = authority.unwrap_or_else(|| match scheme {
            Some(Scheme::Https) | None => ":443".to_string(),
            Some(_) => ":80".to_string(),
        });
        let r = || Resource::<OutgoingRequest>::new_borrow(request.rep());
        let refused = if l::http::types::HostOutgoingRequest::set_method(self, r(), method.into())?
            .is_err()
        {
            Some("method")
        } else if l::http::types::HostOutgoingRequest::set_path_with_query(
            self,
            r(),
            path_with_query,
        )?
        .is_err()
        {
            Some("path-with-query")
        } else if l::http::types::HostOutgoingRequest::set_scheme(
            self,
            r(),
            scheme.map(Into::into),
        )?
        .is_err()
        {
            Some("scheme")
        } else if l::http::types::HostOutgoingRequest::set_authority(self, r(), Some(authority))?
            .is_err()
        {
            Some("authority")
        } else {
            None
        };
        if let Some(what) = refused {
            l::http::types::HostOutgoingRequest::drop(self, request)?;
            wasmtime::bail!("outgoing-request: invalid {what}");
        }
        Ok(request)
    }

    fn write(
        &mut self,
        r: Resource<OutgoingRequest>,
    ) -> wasmtime::Result<Result<Resource<OutgoingBody>, ()>> {
        l::http::types::HostOutgoingRequest::body(self, r)
    }

    fn drop(&mut self, rep: Resource<OutgoingRequest>) -> wasmtime::Result<()> {
        l::http::types::HostOutgoingRequest::drop(self, rep)
    }
}

impl t::HostResponseOutparam for WasiHttpCtxView<'_> {
    fn set(
        &mut self,
        param: Resource<ResponseOutparam>,
        response: Result<Resource<OutgoingResponse>, Error>,
    ) -> wasmtime::Result<()> {
        let response = response.map_err(|e| {
            l::http::types::ErrorCode::InternalError(Some(match e {
                Error::InvalidUrl(s) => format!("invalid url: {s}"),
                Error::TimeoutError(s) => format!("timeout: {s}"),
                Error::ProtocolError(s) => format!("protocol error: {s}"),
                Error::UnexpectedError(s) => format!("unexpected error: {s}"),
            }))
        });
        l::http::types::HostResponseOutparam::set(self, param, response)
    }

    fn drop(&mut self, rep: Resource<ResponseOutparam>) -> wasmtime::Result<()> {
        l::http::types::HostResponseOutparam::drop(self, rep)
    }
}

impl t::HostIncomingResponse for WasiHttpCtxView<'_> {
    fn status(&mut self, r: Resource<IncomingResponse>) -> wasmtime::Result<StatusCode> {
        l::http::types::HostIncomingResponse::status(self, r)
    }

    fn headers(&mut self, r: Resource<IncomingResponse>) -> wasmtime::Result<Resource<Fields>> {
        l::http::types::HostIncomingResponse::headers(self, r)
    }

    fn consume(
        &mut self,
        r: Resource<IncomingResponse>,
    ) -> wasmtime::Result<Result<Resource<IncomingBody>, ()>> {
        l::http::types::HostIncomingResponse::consume(self, r)
    }

    fn drop(&mut self, rep: Resource<IncomingResponse>) -> wasmtime::Result<()> {
        l::http::types::HostIncomingResponse::drop(self, rep)
    }
}

impl t::HostIncomingBody for WasiHttpCtxView<'_> {
    fn stream(
        &mut self,
        b: Resource<IncomingBody>,
    ) -> wasmtime::Result<Result<Resource<DynInputStream>, ()>> {
        l::http::types::HostIncomingBody::stream(self, b)
    }

    fn finish(&mut self, b: Resource<IncomingBody>) -> wasmtime::Result<Resource<FutureTrailers>> {
        l::http::types::HostIncomingBody::finish(self, b)
    }

    fn drop(&mut self, rep: Resource<IncomingBody>) -> wasmtime::Result<()> {
        l::http::types::HostIncomingBody::drop(self, rep)
    }
}

impl t::HostFutureTrailers for WasiHttpCtxView<'_> {
    fn subscribe(
        &mut self,
        f: Resource<FutureTrailers>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        l::http::types::HostFutureTrailers::subscribe(self, f)
    }

    /// The snapshot cannot say "no trailers": it gets an empty set.
    fn get(
        &mut self,
        f: Resource<FutureTrailers>,
    ) -> wasmtime::Result<Option<Result<Resource<Fields>, Error>>> {
        match l::http::types::HostFutureTrailers::get(self, f)? {
            None => Ok(None),
            Some(Ok(Ok(Some(trailers)))) => Ok(Some(Ok(trailers))),
            Some(Ok(Ok(None))) => Ok(Some(Ok(l::http::types::HostFields::new(self)?))),
            Some(Ok(Err(e))) => Ok(Some(Err(e.into()))),
            Some(Err(())) => wasmtime::bail!("future-trailers: the trailers were already taken"),
        }
    }

    fn drop(&mut self, rep: Resource<FutureTrailers>) -> wasmtime::Result<()> {
        l::http::types::HostFutureTrailers::drop(self, rep)
    }
}

impl t::HostOutgoingResponse for WasiHttpCtxView<'_> {
    fn new(
        &mut self,
        status: StatusCode,
        headers: Resource<Fields>,
    ) -> wasmtime::Result<Resource<OutgoingResponse>> {
        let headers = l::http::types::HostFields::clone(self, headers)?;
        let response = l::http::types::HostOutgoingResponse::new(self, headers)?;
        let borrowed = Resource::new_borrow(response.rep());
        if l::http::types::HostOutgoingResponse::set_status_code(self, borrowed, status)?.is_err() {
            l::http::types::HostOutgoingResponse::drop(self, response)?;
            wasmtime::bail!("outgoing-response: invalid status code {status}");
        }
        Ok(response)
    }

    fn write(
        &mut self,
        r: Resource<OutgoingResponse>,
    ) -> wasmtime::Result<Result<Resource<OutgoingBody>, ()>> {
        l::http::types::HostOutgoingResponse::body(self, r)
    }

    fn drop(&mut self, rep: Resource<OutgoingResponse>) -> wasmtime::Result<()> {
        l::http::types::HostOutgoingResponse::drop(self, rep)
    }
}

impl t::HostOutgoingBody for WasiHttpCtxView<'_> {
    fn write(
        &mut self,
        b: Resource<OutgoingBody>,
    ) -> wasmtime::Result<Result<Resource<DynOutputStream>, ()>> {
        l::http::types::HostOutgoingBody::write(self, b)
    }

    /// The snapshot's `finish` cannot fail; a body 0.2 refuses to finish (shorter or
    /// longer than its content-length) traps.
    fn finish(
        &mut self,
        b: Resource<OutgoingBody>,
        trailers: Option<Resource<Fields>>,
    ) -> wasmtime::Result<()> {
        match l::http::types::HostOutgoingBody::finish(self, b, trailers) {
            Ok(()) => Ok(()),
            Err(e) => match e.downcast() {
                Ok(code) => wasmtime::bail!("outgoing-body: finish failed: {code:?}"),
                Err(trap) => Err(trap),
            },
        }
    }

    fn drop(&mut self, rep: Resource<OutgoingBody>) -> wasmtime::Result<()> {
        l::http::types::HostOutgoingBody::drop(self, rep)
    }
}

impl t::HostFutureIncomingResponse for WasiHttpCtxView<'_> {
    fn get(
        &mut self,
        f: Resource<FutureIncomingResponse>,
    ) -> wasmtime::Result<Option<Result<Result<Resource<IncomingResponse>, Error>, ()>>> {
        Ok(l::http::types::HostFutureIncomingResponse::get(self, f)?
            .map(|taken| taken.map(|r| r.map_err(Error::from))))
    }

    fn subscribe(
        &mut self,
        f: Resource<FutureIncomingResponse>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        l::http::types::HostFutureIncomingResponse::subscribe(self, f)
    }

    fn drop(&mut self, rep: Resource<FutureIncomingResponse>) -> wasmtime::Result<()> {
        l::http::types::HostFutureIncomingResponse::drop(self, rep)
    }
}

impl outgoing_handler::Host for WasiHttpCtxView<'_> {
    /// Sends through 0.2's handler (so through the runtime's `send_request` hook and its
    /// `allowed_outbound_hosts` check); the snapshot's millisecond timeouts become 0.2's
    /// request options.
    fn handle(
        &mut self,
        request: Resource<OutgoingRequest>,
        options: Option<t::RequestOptions>,
    ) -> wasmtime::Result<Result<Resource<FutureIncomingResponse>, Error>> {
        use l::http::types::HostRequestOptions as O;
        let options = match options {
            None => None,
            Some(o) => {
                let opts = O::new(self)?;
                let b = || Resource::new_borrow(opts.rep());
                let ns = |ms: Option<u32>| ms.map(|ms| u64::from(ms) * 1_000_000);
                let ok = O::set_connect_timeout(self, b(), ns(o.connect_timeout_ms))?.is_ok()
                    && O::set_first_byte_timeout(self, b(), ns(o.first_byte_timeout_ms))?.is_ok()
                    && O::set_between_bytes_timeout(self, b(), ns(o.between_bytes_timeout_ms))?
                        .is_ok();
                if !ok {
                    O::drop(self, opts)?;
                    return Ok(Err(Error::InvalidUrl(
                        "request-options: a timeout out of range".to_string(),
                    )));
                }
                Some(opts)
            }
        };
        let rep = options.as_ref().map(|o| o.rep());
        let sent =
            l::http::outgoing_handler::Host::handle(self, request, rep.map(Resource::new_borrow));
        if let Some(rep) = rep {
            O::drop(self, Resource::new_own(rep))?;
        }
        match sent {
            Ok(future) => Ok(Ok(future)),
            Err(e) => Ok(Err(e.downcast()?.into())),
        }
    }
}

super::convert! {
    enum l::http::types::Method [<=>] Method {
        Get, Head, Post, Put, Delete, Connect, Options, Trace, Patch, Other(x),
    }
    enum l::http::types::Scheme [<=>] Scheme { Http, Https, Other(x) }
}

/// 0.2's typed error codes as the snapshot's four kinds.
impl From<l::http::types::ErrorCode> for Error {
    fn from(e: l::http::types::ErrorCode) -> Error {
        use l::http::types::ErrorCode as C;
        match e {
            C::DnsTimeout
            | C::ConnectionTimeout
            | C::ConnectionReadTimeout
            | C::ConnectionWriteTimeout
            | C::HttpResponseTimeout => Error::TimeoutError(e.to_string()),
            C::HttpRequestUriInvalid | C::HttpRequestUriTooLong | C::DestinationNotFound => {
                Error::InvalidUrl(e.to_string())
            }
            C::HttpProtocolError
            | C::HttpResponseIncomplete
            | C::HttpResponseHeaderSectionSize(_)
            | C::HttpResponseHeaderSize(_)
            | C::HttpResponseBodySize(_)
            | C::HttpResponseTrailerSectionSize(_)
            | C::HttpResponseTrailerSize(_)
            | C::HttpResponseTransferCoding(_)
            | C::HttpResponseContentCoding(_) => Error::ProtocolError(e.to_string()),
            _ => Error::UnexpectedError(e.to_string()),
        }
    }
}
