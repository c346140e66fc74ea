//! Hostile-guest test app: the request chooses what the component asks of the host.
//!
//! - `/sql?db=<label>&sql=<statement>[&sql2=<statement>]`: runs a SQLite statement
//!   (`spin:sqlite@3.0.0`), then `sql2` on the same connection, and answers the last one's
//!   rows, one line each (values joined by `|`).
//! - `/pg?addr=<connection string>`: opens PostgreSQL (`spin:postgres@4.0.0`) and answers the
//!   address the server saw the connection on (`inet_server_addr()`, `unix` for a socket).
//! - `/mysql?addr=<url>`: opens MySQL (`fermyon:spin/mysql@2.0.0`) and answers the port of the
//!   server that took the connection (`@@port`, also for one reached through a Unix socket).
//! - `/redis?addr=<url>`: opens Redis (`fermyon:spin/redis@2.0.0`) and answers `PING`.
//! - `/big?mb=<n>`: answers `n` MiB of `x`.
//! - anything else: `ok`.
//!
//! Parameters are form-encoded (`%XX`, `+` for a space); a host error answers 500 with `error: <Debug of it>`.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use spin_sdk::wit::fermyon::spin2_0_0 as v2;
use spin_sdk::wit::{pg4, sqlite3};

fn param(query: &str, name: &str) -> String {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn sql(query: &str) -> Result<String, String> {
    let db = match param(query, "db") {
        d if d.is_empty() => "default".to_string(),
        d => d,
    };
    let c = sqlite3::Connection::open(&db).map_err(|e| format!("error: open: {e:?}"))?;
    let mut r = c
        .execute(&param(query, "sql"), &[])
        .map_err(|e| format!("error: execute: {e:?}"))?;
    let second = param(query, "sql2");
    if !second.is_empty() {
        r = c
            .execute(&second, &[])
            .map_err(|e| format!("error: execute sql2: {e:?}"))?;
    }
    let lines: Vec<String> = r
        .rows
        .iter()
        .map(|row| {
            row.values
                .iter()
                .map(|v| match v {
                    sqlite3::Value::Integer(i) => i.to_string(),
                    sqlite3::Value::Real(f) => f.to_string(),
                    sqlite3::Value::Text(t) => t.clone(),
                    sqlite3::Value::Blob(b) => format!("blob:{}", b.len()),
                    sqlite3::Value::Null => "NULL".into(),
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    Ok(lines.join("\n"))
}

fn pg(query: &str) -> Result<String, String> {
    let c = pg4::Connection::open(&param(query, "addr")).map_err(|e| format!("error: open: {e:?}"))?;
    let r = c
        .query(
            "SELECT COALESCE(host(inet_server_addr()), 'unix')",
            &[],
        )
        .map_err(|e| format!("error: query: {e:?}"))?;
    match r.rows.first().and_then(|row| row.first()) {
        Some(pg4::DbValue::Str(s)) => Ok(format!("server_addr={s}")),
        other => Err(format!("error: unexpected row {other:?}")),
    }
}

fn mysql(query: &str) -> Result<String, String> {
    use v2::rdbms_types::DbValue;
    let c = v2::mysql::Connection::open(&param(query, "addr"))
        .map_err(|e| format!("error: open: {e:?}"))?;
    let r = c
        .query("SELECT @@port", &[])
        .map_err(|e| format!("error: query: {e:?}"))?;
    match r.rows.first().and_then(|row| row.first()) {
        Some(DbValue::Int64(n)) => Ok(format!("server_port={n}")),
        Some(DbValue::Uint64(n)) => Ok(format!("server_port={n}")),
        Some(DbValue::Int32(n)) => Ok(format!("server_port={n}")),
        other => Err(format!("error: unexpected row {other:?}")),
    }
}

fn redis(query: &str) -> Result<String, String> {
    let c = v2::redis::Connection::open(&param(query, "addr"))
        .map_err(|e| format!("error: open: {e:?}"))?;
    let r = c
        .execute("PING", &[])
        .map_err(|e| format!("error: ping: {e:?}"))?;
    Ok(format!("ping={r:?}"))
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let query = req.query().to_string();
    let result = match req.path() {
        "/sql" => sql(&query),
        "/pg" => pg(&query),
        "/mysql" => mysql(&query),
        "/redis" => redis(&query),
        "/big" => {
            let mb: usize = param(&query, "mb").parse().unwrap_or(8);
            return Ok(Response::new(200, vec![b'x'; mb << 20]));
        }
        _ => Ok("ok".to_string()),
    };
    Ok(match result {
        Ok(body) => Response::new(200, body),
        Err(e) => Response::new(500, e),
    })
}
