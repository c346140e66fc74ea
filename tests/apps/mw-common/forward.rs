// Message rebuilding shared by the middleware guests, `include!`d after their bindings
// (`OUT_DIR/bindings.rs`, see build.rs). Headers handed out by `get-headers` are immutable, so
// a middleware that changes them (or the body) builds a new message around the old one's body
// stream and trailers future, taken with `consume-body`, and keeps the rest: method, scheme,
// authority, path and options of a request, the status of a response.
//
// `consume-body` takes a `res` future through which the consumer reports how handling the
// body went to whoever built the message; `new` returns the same kind of future for the new
// message. Each rebuild relays the second into the first, so the outcome seen at the far end
// of the chain reaches the near end.

use wasi::http::types::{ErrorCode, Fields, HeaderError, Request, Response};
use wit_bindgen::{FutureReader, FutureWriter, StreamReader, StreamResult, StreamWriter};

type Outcome = Result<(), ErrorCode>;

fn internal_error(what: String) -> ErrorCode {
    ErrorCode::InternalError(Some(format!("middleware: {what}")))
}

/// A mutable copy of `headers` with `value` appended to `name`'s values.
#[allow(dead_code)]
fn append_header(headers: &Fields, name: &str, value: &str) -> Result<Fields, ErrorCode> {
    let copy = headers.clone();
    copy.append(name, value.as_bytes())
        .map_err(|e: HeaderError| internal_error(format!("append header {name}: {e:?}")))?;
    Ok(copy)
}

/// Resolves `res` with the outcome of transmitting the rebuilt message, once there is one (a
/// spawned task lives as long as the export's task, not just until it returns).
fn relay_outcome(res: FutureWriter<Outcome>, transmitted: FutureReader<Outcome>) {
    wit_bindgen::spawn(async move {
        let outcome = transmitted.await;
        // Err: the original message's consumer no longer listens.
        let _ = res.write(outcome).await;
    });
}

/// `request` with `headers` instead of its own; body and trailers are passed on as they come.
#[allow(dead_code)]
fn request_with_headers(request: Request, headers: Fields) -> Result<Request, ErrorCode> {
    let method = request.get_method();
    let scheme = request.get_scheme();
    let authority = request.get_authority();
    let path_with_query = request.get_path_with_query();
    // A child of `request`: cloned (a mutable copy) and dropped before `request` is consumed.
    let options = request.get_options().map(|o| o.clone());
    let (res, res_reader) = wit_future::new(|| Ok(()));
    let (body, trailers) = Request::consume_body(request, res_reader);
    let (forwarded, transmitted) = Request::new(headers, Some(body), trailers, options);
    let invalid = |what: &str| internal_error(format!("copy {what} of the request"));
    forwarded
        .set_method(&method)
        .map_err(|()| invalid("method"))?;
    forwarded
        .set_scheme(scheme.as_ref())
        .map_err(|()| invalid("scheme"))?;
    forwarded
        .set_authority(authority.as_deref())
        .map_err(|()| invalid("authority"))?;
    forwarded
        .set_path_with_query(path_with_query.as_deref())
        .map_err(|()| invalid("path"))?;
    relay_outcome(res, transmitted);
    Ok(forwarded)
}

/// `response` with `headers` instead of its own and, when `transform` is given, the body as
/// `transform` changes it chunk by chunk while it streams (it must keep each chunk's length,
/// as the headers, `content-length` included, are not changed for it). Trailers are passed on.
fn response_with(
    response: Response,
    headers: Fields,
    transform: Option<fn(&mut [u8])>,
) -> Result<Response, ErrorCode> {
    let status = response.get_status_code();
    let (res, res_reader) = wit_future::new(|| Ok(()));
    let (body, trailers) = Response::consume_body(response, res_reader);
    let body = match transform {
        None => body,
        Some(transform) => {
            let (writer, transformed) = wit_stream::new();
            wit_bindgen::spawn(pump(body, writer, transform));
            transformed
        }
    };
    let (rebuilt, transmitted) = Response::new(headers, Some(body), trailers);
    rebuilt
        .set_status_code(status)
        .map_err(|()| internal_error(format!("copy status {status} of the response")))?;
    relay_outcome(res, transmitted);
    Ok(rebuilt)
}

/// Reads `body` to its end, passing each chunk through `transform` into `out`; stops early when
/// `out`'s reader goes away. Dropping `out` afterwards ends the transformed stream.
async fn pump(mut body: StreamReader<u8>, mut out: StreamWriter<u8>, transform: fn(&mut [u8])) {
    loop {
        let (status, mut chunk) = body.read(Vec::with_capacity(16 * 1024)).await;
        // Dropped: the body ended (no values come with it, nor with Cancelled, which nothing
        // here asks for).
        if !matches!(status, StreamResult::Complete(_)) {
            return;
        }
        transform(&mut chunk);
        if !out.write_all(chunk).await.is_empty() {
            return;
        }
    }
}
