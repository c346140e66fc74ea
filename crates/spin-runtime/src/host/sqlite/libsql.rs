//! SQLite databases on a libSQL server (Turso, `sqld`): Spin's `type = "libsql"`.
//!
//! ```toml
//! [sqlite_database.default]
//! type = "libsql"
//! url = "https://my-db-my-org.turso.io"   # http:// or https://, the server's base URL
//! token = "<JWT>"                          # sent as a bearer token; "" sends none
//! ```
//!
//! The client speaks Hrana 3 over HTTP with JSON (`POST <url>/v3/pipeline`, the libSQL
//! project's `HRANA_3_SPEC.md`). Each guest connection is one Hrana stream, so a transaction a
//! guest begins spans its later statements on that connection, as on a local database; the
//! stream's baton and `base_url` are carried from answer to answer, and the stream is closed
//! when the guest drops the connection. `changes` and `last-insert-rowid` are the stream's
//! last answer's `affected_row_count` and `last_insert_rowid`, as Spin's libSQL client reports
//! them. HTTPS is verified against the runtime's trust store (platform roots plus Mozilla's,
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`), through `HTTPS_PROXY`/`NO_PROXY`; the server is the
//! operator's, so `allowed_outbound_hosts` is not consulted (as in Spin). Requests run on
//! blocking threads, never on the async workers, at most [`MAX_CONCURRENT_REQUESTS`] at once,
//! each bounded by [`REQUEST_TIMEOUT`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::v3;
use super::{value_bytes, SqliteError, MAX_RESULT_BYTES};

/// At most this many Hrana requests are in flight in the process; further statements wait
/// (asynchronously) for one to finish.
pub const MAX_CONCURRENT_REQUESTS: usize = 32;

/// The longest a Hrana request may take, connection included (above the default request
/// deadline of 60 s, so that a statement the guest still waits for is not cut first).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A libSQL database definition: where it is and how to authenticate.
#[derive(Clone, PartialEq, Eq)]
pub struct LibsqlDefinition {
    /// The server's base URL (`http://` or `https://`, no trailing `/`).
    pub url: String,
    /// The bearer token (`""`: none is sent).
    pub token: String,
}

impl std::fmt::Debug for LibsqlDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibsqlDefinition")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Parses the keys of a `type = "libsql"` table (`key` is `sqlite_database.<label>`).
pub fn parse_definition(
    def: &toml::Table,
    key: &str,
    origin: &str,
) -> anyhow::Result<LibsqlDefinition> {
    for field in def.keys() {
        if !["type", "url", "token"].contains(&field.as_str()) {
            anyhow::bail!(
                "{origin}: `{key}.{field}` is not a field of a \"libsql\" database (it takes \
                 `url` and `token`)"
            );
        }
    }
    let string = |name: &str| -> anyhow::Result<String> {
        match def.get(name) {
            None => anyhow::bail!(
                "{origin}: `{key}.{name}` is missing (a \"libsql\" database takes `url`, the \
                 server's https:// address, and `token`)"
            ),
            Some(v) => v
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("{origin}: `{key}.{name}` must be a string")),
        }
    };
    let url = string("url")?;
    let token = string("token")?;
    let bad = |why: &str| {
        anyhow::anyhow!(
            "{origin}: `{key}.url` = \"{url}\" {why}; use the server's http:// or https:// \
             address (for Turso's libsql://<host>, write https://<host>)"
        )
    };
    let parsed = url::Url::parse(&url).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("does not start with http:// or https://"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("has a query or fragment"));
    }
    Ok(LibsqlDefinition {
        url: url.trim_end_matches('/').to_string(),
        token,
    })
}

/// Why a libSQL call failed; every message names the database and the server.
#[derive(Debug, thiserror::Error)]
#[error("libSQL database `{label}` at {url}: {kind}")]
pub struct LibsqlError {
    label: String,
    url: String,
    kind: LibsqlErrorKind,
}

impl LibsqlError {
    /// Whether the statement itself failed (the guest's SQL), not the server or the network.
    pub fn is_statement_error(&self) -> bool {
        matches!(self.kind, LibsqlErrorKind::Statement { .. })
    }
}

/// What went wrong talking to a libSQL server.
#[derive(Debug, thiserror::Error)]
pub enum LibsqlErrorKind {
    /// No answer: connection, TLS or timeout.
    #[error("the request failed: {err}{hint}", err = .0, hint = trust_hint(.0))]
    Transport(#[source] ureq::Error),
    /// The server answered with an HTTP error status.
    #[error("the server answered HTTP {status}: {message}{hint}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The Hrana error's message, or the answer's text.
        message: String,
        /// What to check, for statuses that have one cause.
        hint: String,
    },
    /// The server ran the statement and it failed.
    #[error("{message}")]
    Statement {
        /// The Hrana error's message (with its code when the server gave one).
        message: String,
    },
    /// The answer is not Hrana 3 over HTTP.
    #[error("the answer is not a Hrana 3 pipeline response: {0}")]
    Protocol(String),
    /// A parameter JSON cannot carry.
    #[error(
        "parameter {index} is the real {value}, which Hrana's JSON encoding cannot carry (only \
         finite numbers)"
    )]
    NonFiniteParameter {
        /// 1-based position of the parameter.
        index: usize,
        /// The value.
        value: f64,
    },
}

/// How to trust the server, when the error is its certificate.
fn trust_hint(e: &ureq::Error) -> &'static str {
    if e.to_string().contains("certificate") {
        " (a server signed by a private CA is trusted through SSL_CERT_FILE or SSL_CERT_DIR)"
    } else {
        ""
    }
}

/// A libSQL database: its definition and the HTTP client shared by its connections.
pub struct LibsqlDatabase {
    label: String,
    def: LibsqlDefinition,
    agent: ureq::Agent,
}

impl std::fmt::Debug for LibsqlDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibsqlDatabase")
            .field("label", &self.label)
            .field("url", &self.def.url)
            .finish_non_exhaustive()
    }
}

impl LibsqlDatabase {
    /// The database `label` defined by `def`; nothing is sent until a guest runs a statement.
    pub fn new(label: &str, def: LibsqlDefinition) -> Arc<Self> {
        Arc::new(LibsqlDatabase {
            label: label.to_string(),
            def,
            agent: agent(),
        })
    }

    fn error(&self, kind: LibsqlErrorKind) -> LibsqlError {
        LibsqlError {
            label: self.label.clone(),
            url: self.def.url.clone(),
            kind,
        }
    }

    /// Posts one pipeline to `url` and reads the answer (on a blocking thread).
    fn post(&self, url: &str, body: &serde_json::Value) -> Result<PipelineResp, LibsqlError> {
        let mut req = self
            .agent
            .post(url)
            .header("content-type", "application/json");
        if !self.def.token.is_empty() {
            req = req.header("authorization", format!("Bearer {}", self.def.token));
        }
        let mut answer = req
            .send(body.to_string())
            .map_err(|e| self.error(LibsqlErrorKind::Transport(e)))?;
        let status = answer.status().as_u16();
        // JSON and base64 make a result up to about 4/3 larger than its values.
        let bytes = answer
            .body_mut()
            .with_config()
            .limit(2 * MAX_RESULT_BYTES as u64)
            .read_to_vec()
            .map_err(|e| self.error(LibsqlErrorKind::Transport(e)))?;
        if !(200..300).contains(&status) {
            let message = match serde_json::from_slice::<HranaError>(&bytes) {
                Ok(e) => e.to_string(),
                Err(_) => spin_app_format::untrusted::shown(&bytes).to_string(),
            };
            let label = &self.label;
            let hint = match status {
                401 | 403 => {
                    format!(" (check `token` in [sqlite_database.{label}] of the runtime config)")
                }
                404 => format!(
                    " (check `url` in [sqlite_database.{label}]: the server's base address, \
                     without /v3)"
                ),
                _ => String::new(),
            };
            return Err(self.error(LibsqlErrorKind::Status {
                status,
                message,
                hint,
            }));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| self.error(LibsqlErrorKind::Protocol(e.to_string())))
    }
}

/// The client: [`crate::host::tls::http_agent`] with [`REQUEST_TIMEOUT`].
fn agent() -> ureq::Agent {
    crate::host::tls::http_agent(REQUEST_TIMEOUT)
}

/// The process-wide bound on Hrana requests in flight.
fn request_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS))
}

/// A guest connection: one Hrana stream.
#[derive(Debug)]
pub struct LibsqlConnection {
    db: Arc<LibsqlDatabase>,
    /// Held by the blocking thread for a whole request, so requests on the stream are serial
    /// (as Hrana requires) even when a guest abandons one.
    stream: Arc<Mutex<Stream>>,
}

/// A stream's state between requests.
#[derive(Debug, Default)]
struct Stream {
    baton: Option<String>,
    base_url: Option<String>,
    changes: u64,
    last_insert_rowid: i64,
}

impl LibsqlConnection {
    /// A new connection to `db` (its stream opens with the first statement).
    pub fn new(db: Arc<LibsqlDatabase>) -> Self {
        LibsqlConnection {
            db,
            stream: Arc::default(),
        }
    }

    /// Runs one statement on the stream and returns every row (under [`MAX_RESULT_BYTES`]).
    pub async fn execute(
        &self,
        statement: String,
        parameters: Vec<v3::Value>,
    ) -> Result<v3::QueryResult, SqliteError> {
        let args = parameters
            .into_iter()
            .enumerate()
            .map(|(i, v)| to_hrana(i + 1, v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|kind| self.db.error(kind))?;
        let request = serde_json::json!({
            "type": "execute",
            "stmt": { "sql": statement, "args": args, "want_rows": true },
        });
        let slot = request_slots()
            .acquire()
            .await
            .map_err(|_| SqliteError::ShuttingDown)?;
        let (db, stream) = (self.db.clone(), self.stream.clone());
        let result = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let mut stream = stream.lock().unwrap_or_else(|p| p.into_inner());
            let mut answer = pipeline(&db, &mut stream, request)?;
            let result = match answer.pop() {
                Some(StreamResult::Ok { response }) => response
                    .result
                    .ok_or_else(|| db.error(LibsqlErrorKind::Protocol("no `result`".into())))?,
                Some(StreamResult::Error { error }) => {
                    return Err(db.error(LibsqlErrorKind::Statement {
                        message: error.to_string(),
                    }))
                }
                None => {
                    return Err(db.error(LibsqlErrorKind::Protocol("no `results`".into())));
                }
            };
            stream.changes = result.affected_row_count;
            if let Some(rowid) = &result.last_insert_rowid {
                stream.last_insert_rowid = rowid.parse().map_err(|_| {
                    db.error(LibsqlErrorKind::Protocol(format!(
                        "`last_insert_rowid` {rowid:?} is not an integer"
                    )))
                })?;
            }
            Ok(result)
        })
        .await
        .map_err(SqliteError::WorkerLost)?
        .inspect_err(|e| {
            if !e.is_statement_error() {
                tracing::warn!("{e}");
            }
        })?;
        to_query_result(result).map_err(|kind| match kind {
            None => SqliteError::ResultTooLarge,
            Some(kind) => self.db.error(kind).into(),
        })
    }

    /// `changes` after the last statement (waits for one running on the stream).
    pub async fn changes(&self) -> u64 {
        self.read(|s| s.changes).await
    }

    /// `last-insert-rowid` after the last statement (waits for one running on the stream).
    pub async fn last_insert_rowid(&self) -> i64 {
        self.read(|s| s.last_insert_rowid).await
    }

    async fn read<T: Send + 'static>(&self, f: fn(&Stream) -> T) -> T {
        let stream = self.stream.clone();
        let read = move || f(&stream.lock().unwrap_or_else(|p| p.into_inner()));
        match tokio::task::spawn_blocking(read.clone()).await {
            Ok(v) => v,
            // The blocking pool is gone (shutdown): the lock is free by now.
            Err(_) => read(),
        }
    }
}

impl Drop for LibsqlConnection {
    /// Closes the stream on the server (best effort; the server also ends idle streams).
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (db, stream) = (self.db.clone(), self.stream.clone());
        runtime.spawn_blocking(move || {
            let mut stream = stream.lock().unwrap_or_else(|p| p.into_inner());
            if stream.baton.is_some() {
                if let Err(e) = pipeline(&db, &mut stream, serde_json::json!({"type": "close"})) {
                    tracing::debug!("closing a stream: {e}");
                }
            }
        });
    }
}

/// Sends `request` on `stream` and returns its results, carrying the baton and base URL on.
fn pipeline(
    db: &LibsqlDatabase,
    stream: &mut Stream,
    request: serde_json::Value,
) -> Result<Vec<StreamResult>, LibsqlError> {
    let url = format!(
        "{}/v3/pipeline",
        stream
            .base_url
            .as_deref()
            .unwrap_or(&db.def.url)
            .trim_end_matches('/')
    );
    let body = serde_json::json!({ "baton": stream.baton, "requests": [request] });
    match db.post(&url, &body) {
        Ok(answer) => {
            stream.baton = answer.baton;
            if answer.base_url.is_some() || stream.baton.is_none() {
                stream.base_url = answer.base_url;
            }
            Ok(answer.results)
        }
        Err(e) => {
            // An HTTP error ends the stream (Hrana over HTTP): the next statement opens one.
            stream.baton = None;
            stream.base_url = None;
            Err(e)
        }
    }
}

/// A guest value as a Hrana `Value`.
fn to_hrana(index: usize, v: v3::Value) -> Result<serde_json::Value, LibsqlErrorKind> {
    use serde_json::json;
    Ok(match v {
        v3::Value::Integer(i) => json!({"type": "integer", "value": i.to_string()}),
        v3::Value::Real(r) if !r.is_finite() => {
            return Err(LibsqlErrorKind::NonFiniteParameter { index, value: r })
        }
        v3::Value::Real(r) => json!({"type": "float", "value": r}),
        v3::Value::Text(t) => json!({"type": "text", "value": t}),
        v3::Value::Blob(b) => {
            json!({"type": "blob", "base64": base64::engine::general_purpose::STANDARD.encode(b)})
        }
        v3::Value::Null => json!({"type": "null"}),
    })
}

/// A statement result as the guest's; `Err(None)`: larger than [`MAX_RESULT_BYTES`].
fn to_query_result(r: StmtResult) -> Result<v3::QueryResult, Option<LibsqlErrorKind>> {
    // Padding is optional in what servers send.
    let base64 = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let columns: Vec<String> = r
        .cols
        .into_iter()
        .map(|c| c.name.unwrap_or_default())
        .collect();
    let mut bytes = std::mem::size_of::<v3::QueryResult>();
    let mut rows = Vec::with_capacity(r.rows.len());
    for row in r.rows {
        let mut values = Vec::with_capacity(row.len());
        for v in row {
            let value = match v {
                HranaValue::Null => v3::Value::Null,
                HranaValue::Integer { value } => {
                    v3::Value::Integer(value.as_i64().ok_or_else(|| {
                        Some(LibsqlErrorKind::Protocol(format!(
                            "integer value {value:?} is not a 64-bit integer"
                        )))
                    })?)
                }
                HranaValue::Float { value } => v3::Value::Real(value),
                HranaValue::Text { value } => v3::Value::Text(value),
                HranaValue::Blob { base64: b64 } => v3::Value::Blob(
                    base64
                        .decode(b64.as_bytes())
                        .map_err(|e| Some(LibsqlErrorKind::Protocol(format!("blob value: {e}"))))?,
                ),
            };
            bytes += value_bytes(&value);
            values.push(value);
        }
        if bytes > MAX_RESULT_BYTES {
            return Err(None);
        }
        rows.push(v3::RowResult { values });
    }
    Ok(v3::QueryResult { columns, rows })
}

// ---- Hrana 3 over HTTP, JSON encoding (what this client reads) ----

#[derive(Deserialize)]
struct PipelineResp {
    baton: Option<String>,
    base_url: Option<String>,
    results: Vec<StreamResult>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum StreamResult {
    Ok { response: StreamResponse },
    Error { error: HranaError },
}

#[derive(Deserialize)]
struct StreamResponse {
    /// Present in `execute` responses (a `close` response has none).
    result: Option<StmtResult>,
}

#[derive(Deserialize, Debug)]
struct HranaError {
    message: String,
    code: Option<String>,
}

impl std::fmt::Display for HranaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) if !self.message.contains(code.as_str()) => {
                write!(f, "{} ({code})", self.message)
            }
            _ => f.write_str(&self.message),
        }
    }
}

#[derive(Deserialize)]
struct StmtResult {
    cols: Vec<Col>,
    rows: Vec<Vec<HranaValue>>,
    #[serde(default)]
    affected_row_count: u64,
    last_insert_rowid: Option<String>,
}

#[derive(Deserialize)]
struct Col {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum HranaValue {
    Null,
    /// The spec's JSON form is a string; a number is read too.
    Integer {
        value: IntegerText,
    },
    Float {
        value: f64,
    },
    Text {
        value: String,
    },
    Blob {
        base64: String,
    },
}

/// A 64-bit integer as a JSON string (the spec) or number.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum IntegerText {
    Text(String),
    Number(i64),
}

impl IntegerText {
    fn as_i64(&self) -> Option<i64> {
        match self {
            IntegerText::Text(t) => t.parse().ok(),
            IntegerText::Number(n) => Some(*n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<LibsqlDefinition> {
        let value: toml::Table = toml::from_str(text).unwrap();
        parse_definition(&value, "sqlite_database.db", "runtime-config.toml")
    }

    #[test]
    fn definitions_take_spins_keys_and_http_urls() {
        let def =
            parse("type = \"libsql\"\nurl = \"https://db.example.com/\"\ntoken = \"t\"\n").unwrap();
        assert_eq!(def.url, "https://db.example.com");
        assert_eq!(def.token, "t");
        assert!(!format!("{def:?}").contains("\"t\""));
        let e = parse("type = \"libsql\"\nurl = \"libsql://db.turso.io\"\ntoken = \"t\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`sqlite_database.db.url`") && e.contains("https://<host>"),
            "{e}"
        );
        let e = parse("type = \"libsql\"\nurl = \"https://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`sqlite_database.db.token` is missing"), "{e}");
        let e = parse("type = \"libsql\"\nurl = \"https://x\"\ntoken = \"t\"\npath = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`sqlite_database.db.path` is not a field"),
            "{e}"
        );
    }

    #[test]
    fn values_round_trip_through_hranas_json() {
        let values = vec![
            v3::Value::Integer(i64::MIN),
            v3::Value::Real(-1.5),
            v3::Value::Text("zoë".into()),
            v3::Value::Blob(vec![0, 255, 7]),
            v3::Value::Null,
        ];
        let json: Vec<_> = values
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, v)| to_hrana(i + 1, v).unwrap())
            .collect();
        assert_eq!(json[0]["value"], "-9223372036854775808");
        let result: StmtResult = serde_json::from_value(serde_json::json!({
            "cols": [{"name": "a"}, {"name": null}, {"name": "c"}, {"name": "d"}, {"name": "e"}],
            "rows": [json],
            "affected_row_count": 0,
            "last_insert_rowid": null,
        }))
        .unwrap();
        let back = to_query_result(result).unwrap();
        assert_eq!(back.columns, ["a", "", "c", "d", "e"]);
        assert_eq!(format!("{:?}", back.rows[0].values), format!("{values:?}"));
        assert!(matches!(
            to_hrana(2, v3::Value::Real(f64::INFINITY)),
            Err(LibsqlErrorKind::NonFiniteParameter { index: 2, .. })
        ));
    }
}
