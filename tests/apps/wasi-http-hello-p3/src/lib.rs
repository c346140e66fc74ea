//! The WASIp3 counterpart of the benchmarks' hello: answers every request with 200 and a
//! fixed text body, written from a task the handler spawns (the body streams after
//! `handle` returned, as in any WASIp3 handler). Only WASI is imported, so `wasmtime serve`
//! runs it too.

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_bindgen, wit_future, wit_stream};

const BODY: &[u8] = b"hello from WASIp3\n";

struct Hello;

impl wasip3::exports::http::handler::Guest for Hello {
    async fn handle(_request: Request) -> Result<Response, ErrorCode> {
        let headers = Fields::new();
        headers
            .append("content-type", b"text/plain")
            .map_err(|e| ErrorCode::InternalError(Some(format!("content-type: {e:?}"))))?;
        let (mut body, body_reader) = wit_stream::new();
        let (trailers, trailers_reader) = wit_future::new(|| Ok(None));
        let (response, _transmitted) = Response::new(headers, Some(body_reader), trailers_reader);
        // No trailers: dropping the writer resolves the future with its default (none).
        drop(trailers);
        wit_bindgen::spawn(async move {
            // The client may have gone away; what is left unwritten then does not matter.
            let _ = body.write_all(BODY.to_vec()).await;
        });
        Ok(response)
    }
}

wasip3::http::service::export!(Hello);
