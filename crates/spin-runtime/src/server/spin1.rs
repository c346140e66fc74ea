//! The Spin 1.x HTTP executor: a component exporting `fermyon:spin/inbound-http`
//! ([`crate::spin1::http`]) is called once per request with the whole request.

use std::sync::Arc;

use anyhow::{anyhow, Context};
use bytes::Bytes;
use http::{Response, StatusCode};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use super::whole_body::{full, plain, read_body, within_deadline};
use crate::runtime::{LoadedApp, PreparedComponent};
use crate::spin1::http::{InboundHttpPre, Method, Request, Response1};

/// Serves one request with a Spin 1.x handler, as Spin's `spin` executor does: the whole
/// body read first (up to [`crate::limits::MAX_BODY_BYTES`]), `uri` the path and query, `params` empty, the
/// request headers (with Spin's `spin-*` ones the server added); a method the interface
/// cannot name is answered 405, a status outside 100..=599 is a failure. The request deadline
/// (`SPIN_SHIM_REQUEST_TIMEOUT`) bounds the call: past it the answer is 504.
pub(crate) async fn call<B>(
    app: &LoadedApp,
    component: &Arc<PreparedComponent>,
    handler: &InboundHttpPre,
    req: http::Request<B>,
) -> anyhow::Result<Response<HyperOutgoingBody>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let (parts, body) = req.into_parts();
    let Some(method) = Method::from_http(&parts.method) else {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, ""));
    };
    let body = match read_body(body, "Spin 1.x").await {
        Ok(b) => b,
        Err(answer) => return Ok(answer),
    };
    let headers = parts
        .headers
        .iter()
        .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let uri = match parts.uri.path_and_query() {
        Some(p) => p.to_string(),
        None => parts.uri.to_string(),
    };
    let request = Request {
        method,
        uri,
        headers,
        params: Vec::new(),
        body: Some(body.to_vec()),
    };
    let mut store = app.new_store(component)?;
    let usage = store.data().limits.usage();
    let run = async {
        let instance = handler.pre.instantiate_async(&mut store).await?;
        if let Some(m) = &app.metrics {
            m.instantiated(&component.id);
        }
        let func = instance
            .get_typed_func::<(Request,), (Response1,)>(&mut store, handler.func)
            .map_err(anyhow::Error::from)
            .with_context(|| {
                format!(
                    "component `{}`: `fermyon:spin/inbound-http#handle-request` has an \
                     unexpected type",
                    component.id
                )
            })?;
        let (resp,): (Response1,) = func.call_async(&mut store, (request,)).await?;
        anyhow::Ok(resp)
    };
    let run = crate::metrics::cpu_timed(usage, run);
    let resp = match within_deadline(app.limits.request_timeout, &component.id, run).await {
        Ok(r) => r,
        Err(answer) => return Ok(answer),
    }
    .with_context(|| format!("component `{}`: handle-http-request failed", component.id))?;
    if !(100..=599).contains(&resp.status) {
        return Err(anyhow!(
            "component `{}` answered with HTTP status {}, which is not a status code",
            component.id,
            resp.status
        ));
    }
    let mut out = Response::new(full(resp.body.map(Bytes::from).unwrap_or_default()));
    *out.status_mut() = StatusCode::from_u16(resp.status)?;
    for (name, value) in resp.headers.unwrap_or_default() {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .with_context(|| format!("component `{}`: bad header name {name:?}", component.id))?;
        let value = http::HeaderValue::from_str(&value).with_context(|| {
            format!("component `{}`: bad value for header {name}", component.id)
        })?;
        out.headers_mut().append(name, value);
    }
    Ok(out)
}
