//! A WAGI (CGI) program, as Spin's `examples/wagi-http-rust` is: it reads the request from
//! its arguments, environment and standard input and writes the response, CGI headers first,
//! to standard output. What it answers depends on `PATH_INFO`:
//! - `/echo`: `Content-Type: text/plain`, then `argv=<args joined by |>`, the CGI variables
//!   `REQUEST_METHOD`, `QUERY_STRING`, `SCRIPT_NAME`, `PATH_INFO`, `X_MATCHED_ROUTE`,
//!   `CONTENT_LENGTH`, `HTTP_X_TEST`, `SERVER_SOFTWARE`, `GREETING` (one `NAME=value` per
//!   line) and `body=<stdin>`;
//! - `/created`: `Status: 201 Created` with an `X-Wagi: yes` header;
//! - `/moved`: `Location: /elsewhere` (a redirect);
//! - `/noheaders`: a body without CGI headers (the runtime answers 500);
//! - `/fail`: exits with code 3 before writing anything.
use std::io::{Read, Write};

fn main() {
    let path = std::env::var("PATH_INFO").unwrap_or_default();
    let mut out = std::io::stdout().lock();
    match path.as_str() {
        "/created" => {
            write!(out, "Status: 201 Created\nContent-Type: text/plain\nX-Wagi: yes\n\ncreated\n")
                .unwrap();
        }
        "/moved" => write!(out, "Location: /elsewhere\n\n").unwrap(),
        "/noheaders" => write!(out, "just a body\n").unwrap(),
        "/fail" => std::process::exit(3),
        _ => {
            let mut body = String::new();
            std::io::stdin().read_to_string(&mut body).unwrap();
            let args: Vec<String> = std::env::args().collect();
            write!(out, "Content-Type: text/plain\r\n\r\n").unwrap();
            writeln!(out, "argv={}", args.join("|")).unwrap();
            for name in [
                "REQUEST_METHOD",
                "QUERY_STRING",
                "SCRIPT_NAME",
                "PATH_INFO",
                "X_MATCHED_ROUTE",
                "CONTENT_LENGTH",
                "HTTP_X_TEST",
                "SERVER_SOFTWARE",
                "GREETING",
            ] {
                writeln!(out, "{name}={}", std::env::var(name).unwrap_or_default()).unwrap();
            }
            writeln!(out, "body={body}").unwrap();
        }
    }
}
