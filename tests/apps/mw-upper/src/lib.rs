//! Test middleware for Spin 4's `dependencies.middleware`: imports and exports
//! `wasi:http/handler` (world `wasi:http/middleware`). Passes each request on to the next
//! handler as it is, and upper-cases the ASCII letters of the response body as it streams
//! (other bytes, UTF-8 sequences included, pass unchanged, so the length and with it any
//! `content-length` stay right); status, headers and trailers are the next handler's.

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
include!("../../mw-common/forward.rs");

struct Component;

export!(Component);

impl exports::wasi::http::handler::Guest for Component {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let response = wasi::http::handler::handle(request).await?;
        let headers = response.get_headers().clone();
        response_with(response, headers, Some(<[u8]>::make_ascii_uppercase))
    }
}
