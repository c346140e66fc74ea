//! Test middleware for Spin 4's `dependencies.middleware`: imports and exports
//! `wasi:http/handler` (world `wasi:http/middleware`). Forwards each request to the next
//! handler with `x-middleware: header` appended to its headers (method, target, options, body
//! and trailers unchanged), and returns that handler's response with `x-middleware-seen:
//! header` appended (status, body and trailers unchanged). A request carrying
//! `x-mw-env: NAME` also gets response header `x-mw-env: <the middleware's env var NAME, or
//! "unset">`: reading the environment is what a middleware may only do when it inherits the
//! component's `environment` configuration (else the runtime cuts it off and the call traps).

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
include!("../../mw-common/forward.rs");

const NAME: &str = "header";

struct Component;

export!(Component);

impl exports::wasi::http::handler::Guest for Component {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let env_probe = request
            .get_headers()
            .get("x-mw-env")
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let headers = append_header(&request.get_headers(), "x-middleware", NAME)?;
        let request = request_with_headers(request, headers)?;
        let response = wasi::http::handler::handle(request).await?;
        let mut headers = append_header(&response.get_headers(), "x-middleware-seen", NAME)?;
        if let Some(var) = env_probe {
            let value = std::env::var(&var).unwrap_or_else(|_| "unset".to_string());
            headers = append_header(&headers, "x-mw-env", &value)?;
        }
        response_with(response, headers, None)
    }
}
