//! Static files app: `GET <path>` returns the guest file at `<path>` (as mounted through
//! the manifest's `files`); `GET /__list?dir=<d>` lists a directory; `PUT <path>` tries to
//! write the file and reports the outcome (files are mounted read-only, so it must fail).
use spin_sdk::http::{IntoResponse, Method, Request, Response};
use spin_sdk::http_component;

fn text(status: u16, body: String) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(body)
        .build()
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let path = req.path().to_string();
    if path == "/__list" {
        let dir = req
            .query()
            .split('&')
            .find_map(|kv| kv.strip_prefix("dir="))
            .unwrap_or("/")
            .to_string();
        return Ok(match std::fs::read_dir(&dir) {
            Ok(entries) => {
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                text(200, names.join("\n") + "\n")
            }
            Err(e) => text(404, format!("cannot list {dir}: {e}\n")),
        });
    }
    match req.method() {
        Method::Put => Ok(match std::fs::write(&path, req.body()) {
            Ok(()) => text(200, format!("wrote {path}\n")),
            Err(e) => text(403, format!("cannot write {path}: {e}\n")),
        }),
        _ => Ok(match std::fs::read(&path) {
            Ok(bytes) => Response::builder()
                .status(200)
                .header("content-type", "application/octet-stream")
                .body(bytes)
                .build(),
            Err(e) => text(404, format!("cannot read {path}: {e}\n")),
        }),
    }
}
