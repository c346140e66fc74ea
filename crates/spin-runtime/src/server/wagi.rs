//! The WAGI executor (`executor = { type = "wagi" }` of an HTTP trigger), as Spin's: the
//! component is a WASI command run once per request in a fresh instance, with the request as
//! CGI gives it (RFC 3875) and the response read from its standard output.
//!
//! - argv: the `argv` template (Spin's default `${SCRIPT_NAME} ${ARGS}`) split on spaces,
//!   `${SCRIPT_NAME}` the request path and `${ARGS}` the query's pairs, each key followed by
//!   its value when it has one (URL-decoded).
//! - environment: the component's `environment`, then the CGI variables (`REQUEST_METHOD`,
//!   `QUERY_STRING`, `CONTENT_LENGTH`, `CONTENT_TYPE`, `SCRIPT_NAME`, `PATH_INFO`,
//!   `PATH_TRANSLATED`, `X_RAW_PATH_INFO`, `SERVER_NAME`, `SERVER_PORT`, `SERVER_PROTOCOL`,
//!   `SERVER_SOFTWARE`, `GATEWAY_INTERFACE`, `REMOTE_ADDR`, `REMOTE_HOST`, `X_FULL_URL`,
//!   `X_MATCHED_ROUTE`, ...), each request header as `HTTP_<NAME>` (but `Authorization` and
//!   `Connection`), and Spin's routing values as `X_*` (from the `spin-*` headers the server
//!   added: `X_BASE_PATH`, `X_COMPONENT_ROUTE`, `X_RAW_COMPONENT_ROUTE`, `X_CLIENT_ADDR`).
//! - stdin: the request body (at most [`MAX_BODY_BYTES`]).
//! - stdout: CGI headers, a blank line, the body (at most [`MAX_BODY_BYTES`]). `Content-Type`,
//!   `Location` (302 unless `Status` says otherwise) or `Status: <code> [reason]` must be
//!   among the headers; any other well-formed header is passed on. A program that writes
//!   nothing, or no such header, answers 500 naming the component.
//!
//! The request deadline (`SPIN_SHIM_REQUEST_TIMEOUT`) bounds the run: past it the answer is
//! 504. `exit(0)` is success; another exit code or a trap is logged and answered 500.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::runtime::{LoadedApp, PreparedComponent, WagiPre};

pub use super::whole_body::MAX_BODY_BYTES;
use super::whole_body::{full, plain, read_body, within_deadline};

/// The CGI version WAGI follows.
const GATEWAY_INTERFACE: &str = "CGI/1.1";
/// `SERVER_SOFTWARE`, as Spin's.
const SERVER_SOFTWARE: &str = "WAGI/1";

pub use crate::app::http_trigger::WagiConfig;

/// argv for a request to `path` with query `query`, from `template`.
fn argv(template: &str, path: &str, query: &str) -> Vec<String> {
    let mut args = Vec::new();
    for word in template.split_whitespace() {
        match word {
            "${SCRIPT_NAME}" => args.push(path.to_string()),
            "${ARGS}" => {
                for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
                    args.push(k.into_owned());
                    if !v.is_empty() {
                        args.push(v.into_owned());
                    }
                }
            }
            other => args.push(
                other
                    .replace("${SCRIPT_NAME}", path)
                    .replace("${ARGS}", query),
            ),
        }
    }
    args
}

/// The CGI environment of a request (see the module docs).
fn cgi_env(parts: &http::request::Parts, content_length: usize) -> Vec<(String, String)> {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let matched = header("spin-matched-route");
    let script_name = matched.strip_suffix("/...").unwrap_or(&matched).to_string();
    let raw_path_info = header("spin-path-info");
    let path_info = percent_decode(&raw_path_info);
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_else(|| "localhost".into());
    let (server_name, server_port) = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            (h.to_string(), p.to_string())
        }
        _ => (host.clone(), "80".to_string()),
    };
    let client = header("spin-client-addr");
    let client_ip = client
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| client.clone());
    let mut env = vec![
        ("AUTH_TYPE".into(), String::new()),
        ("CONTENT_LENGTH".into(), content_length.to_string()),
        ("CONTENT_TYPE".into(), header("content-type")),
        ("GATEWAY_INTERFACE".into(), GATEWAY_INTERFACE.into()),
        (
            "QUERY_STRING".into(),
            parts.uri.query().unwrap_or("").to_string(),
        ),
        ("REMOTE_ADDR".into(), client_ip.clone()),
        ("REMOTE_HOST".into(), client_ip),
        ("REMOTE_USER".into(), String::new()),
        ("REQUEST_METHOD".into(), parts.method.to_string()),
        ("SCRIPT_NAME".into(), script_name),
        ("PATH_INFO".into(), path_info.clone()),
        ("PATH_TRANSLATED".into(), path_info),
        ("X_RAW_PATH_INFO".into(), raw_path_info),
        ("SERVER_NAME".into(), server_name),
        ("SERVER_PORT".into(), server_port),
        ("SERVER_PROTOCOL".into(), format!("{:?}", parts.version)),
        ("SERVER_SOFTWARE".into(), SERVER_SOFTWARE.into()),
        ("X_MATCHED_ROUTE".into(), matched),
        ("X_FULL_URL".into(), header("spin-full-url")),
        ("X_BASE_PATH".into(), header("spin-base-path")),
        ("X_COMPONENT_ROUTE".into(), header("spin-component-route")),
        (
            "X_RAW_COMPONENT_ROUTE".into(),
            header("spin-raw-component-route"),
        ),
        ("X_CLIENT_ADDR".into(), client),
    ];
    for (name, value) in &parts.headers {
        let key = format!(
            "HTTP_{}",
            name.as_str().to_ascii_uppercase().replace('-', "_")
        );
        if key == "HTTP_AUTHORIZATION" || key == "HTTP_CONNECTION" {
            continue;
        }
        env.push((key, value.to_str().unwrap_or("CORRUPT VALUE").to_string()));
    }
    env
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// The HTTP response a CGI program's `stdout` describes (see the module docs); `Err` names
/// what is wrong with it.
pub fn compose_response(stdout: &[u8]) -> Result<Response<Bytes>, String> {
    // Headers end at the first empty line (`\n\n`, carriage returns ignored).
    let mut head = Vec::new();
    let mut body_at = None;
    let mut last = 0u8;
    for (i, &b) in stdout.iter().enumerate() {
        if b == b'\r' {
            continue;
        }
        if b == b'\n' && last == b'\n' {
            body_at = Some(i + 1);
            break;
        }
        head.push(b);
        last = b;
    }
    let Some(body_at) = body_at else {
        return Err("its output has no blank line after the CGI headers".into());
    };
    let head = String::from_utf8(head).map_err(|_| "its CGI headers are not UTF-8".to_string())?;
    let mut resp = Response::new(Bytes::copy_from_slice(&stdout[body_at..]));
    let (mut sufficient, mut explicit_status) = (false, false);
    let mut location = None;
    for line in head.trim().lines() {
        let Some((name, value)) = line.split_once(':') else {
            tracing::warn!(header = %line, "WAGI: a CGI header line without `:` is ignored");
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        match name.to_ascii_lowercase().as_str() {
            "status" => {
                sufficient = true;
                explicit_status = true;
                let code = value.split_once(' ').map(|(c, _)| c).unwrap_or(value);
                *resp.status_mut() = code
                    .parse::<StatusCode>()
                    .map_err(|_| format!("its `Status: {value}` is not an HTTP status"))?;
            }
            "location" => {
                sufficient = true;
                location = Some(
                    HeaderValue::from_str(value)
                        .map_err(|_| format!("its `Location` value {value:?} is not valid"))?,
                );
            }
            lower => {
                if lower == "content-type" {
                    sufficient = true;
                }
                match (
                    HeaderName::from_bytes(lower.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    (Ok(n), Ok(v)) => {
                        resp.headers_mut().append(n, v);
                    }
                    _ => tracing::warn!(header = %name, "WAGI: an invalid CGI header is ignored"),
                }
            }
        }
    }
    if let Some(l) = location {
        resp.headers_mut().insert(http::header::LOCATION, l);
        if !explicit_status {
            *resp.status_mut() = StatusCode::FOUND;
        }
    }
    if !sufficient {
        return Err(
            "its CGI headers have none of `Content-Type`, `Location` or `Status`".to_string(),
        );
    }
    Ok(resp)
}

/// Serves one request by running the WAGI component (see the module docs).
pub(crate) async fn call<B>(
    app: &LoadedApp,
    component: &Arc<PreparedComponent>,
    pre: &WagiPre,
    req: http::Request<B>,
) -> anyhow::Result<Response<HyperOutgoingBody>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let id = &component.id;
    let (parts, body) = req.into_parts();
    let body = match read_body(body, "WAGI").await {
        Ok(b) => b,
        Err(answer) => return Ok(answer),
    };
    let args = argv(
        &pre.config.argv,
        parts.uri.path(),
        parts.uri.query().unwrap_or(""),
    );
    let env = cgi_env(&parts, body.len());
    let stdout = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(MAX_BODY_BYTES);
    let mut store = app.new_cgi_store(component, &args, &env, body, stdout.clone())?;
    let usage = store.data().limits.usage();
    let run = async {
        let command = pre.command.instantiate_async(&mut store).await?;
        if let Some(m) = &app.metrics {
            m.instantiated(id);
        }
        command.wasi_cli_run().call_run(&mut store).await
    };
    let ended = match within_deadline(
        app.limits.request_timeout,
        id,
        crate::metrics::cpu_timed(usage, run),
    )
    .await
    {
        Ok(r) => r,
        Err(answer) => return Ok(answer),
    };
    let failed = match ended {
        Ok(Ok(())) => None,
        Ok(Err(())) => Some("its main returned an error".to_string()),
        Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(wasmtime_wasi::I32Exit(0)) => None,
            Some(wasmtime_wasi::I32Exit(code)) => Some(format!("it exited with code {code}")),
            None => Some(format!("{e:#}")),
        },
    };
    if let Some(why) = failed {
        tracing::error!(component = %id, "WAGI component failed: {why}");
        return Ok(plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("WAGI component `{id}` failed\n"),
        ));
    }
    drop(store);
    let out = stdout.contents();
    if out.is_empty() {
        tracing::error!(
            component = %id,
            "the component is run by the WAGI executor but wrote nothing to stdout; check the \
             trigger's `executor` in spin.toml"
        );
        return Ok(plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("WAGI component `{id}` wrote no response\n"),
        ));
    }
    match compose_response(&out) {
        Ok(r) => Ok(r.map(full)),
        Err(why) => {
            tracing::error!(component = %id, "WAGI response: {why}");
            Ok(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("WAGI component `{id}`: {why}\n"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_follows_the_template() {
        let t = "${SCRIPT_NAME} ${ARGS}";
        assert_eq!(argv(t, "/hello", ""), ["/hello"]);
        assert_eq!(
            argv(t, "/hello", "a=1&flag&b=x%20y"),
            ["/hello", "a", "1", "flag", "b", "x y"]
        );
        assert_eq!(
            argv("prog --path=${SCRIPT_NAME}", "/p", "q"),
            ["prog", "--path=/p"]
        );
    }

    #[test]
    fn responses_need_a_content_type_location_or_status() {
        let r = compose_response(b"Content-Type: text/plain\r\nX-A: 1\r\n\r\nhello\n").unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-a"], "1");
        assert_eq!(&r.body()[..], b"hello\n");
        let r = compose_response(b"Location: /there\n\n").unwrap();
        assert_eq!(r.status(), 302);
        assert_eq!(r.headers()["location"], "/there");
        let r =
            compose_response(b"Status: 404 Not Found\nContent-Type: text/plain\n\nnope").unwrap();
        assert_eq!(r.status(), 404);
        assert!(compose_response(b"X-A: 1\n\nbody")
            .unwrap_err()
            .contains("none of"));
        assert!(compose_response(b"just text")
            .unwrap_err()
            .contains("blank line"));
        assert!(compose_response(b"Status: abc\n\n")
            .unwrap_err()
            .contains("not an HTTP status"));
    }
}
