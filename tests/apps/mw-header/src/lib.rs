//! Test middleware for Spin 4's `dependencies.middleware`: imports and exports
//! `wasi:http/handler` (world `wasi:http/middleware`). Forwards each request to the next
//! handler with `x-middleware: header` appended to its headers (method, target, options, body
//! and trailers unchanged), and returns that handler's response with `x-middleware-seen:
//! header` appended (status, body and trailers unchanged).

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
include!("../../mw-common/forward.rs");

const NAME: &str = "header";

struct Component;

export!(Component);

impl exports::wasi::http::handler::Guest for Component {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let headers = append_header(&request.get_headers(), "x-middleware", NAME)?;
        let request = request_with_headers(request, headers)?;
        let response = wasi::http::handler::handle(request).await?;
        let headers = append_header(&response.get_headers(), "x-middleware-seen", NAME)?;
        response_with(response, headers, None)
    }
}
