//! Host-interface test app: one route `/...`, query `op=<interface>` picks what to exercise,
//! `addr=<url>` (percent-encoded) names the server. Every op runs a fixed script against the
//! interface and answers 200 with one line per step (`name=<Debug of the result>`), or 500
//! with `error: <Debug of the Spin error>` at the first failing step. Using every interface
//! here makes the component import all of them (as componentize-py's Python SDK does).
//!
//! Ops: `sqlite3`, `sqlite2` (query `db=<label>`), `redis`, `pg4`, `pg3`, `pg2`, `mysql`,
//! `mqtt` (query `topic`, `qos` 0..2), `llm` (query `model`), `embed` (query `model`),
//! `kv`, `wasikv`, `variables` (query `name`), `config` (query `name`, through wasi:config),
//! `log` (query `msg`: printed to standard output, and with ` (stderr)` to standard error).
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use spin_sdk::wit::fermyon::spin2_0_0 as v2;
use spin_sdk::wit::{pg3, pg4, sqlite3};

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Collects `name=value` lines; the first error ends the script.
struct Script(Vec<String>);

impl Script {
    fn step<T: std::fmt::Debug, E: std::fmt::Debug>(
        &mut self,
        name: &str,
        r: Result<T, E>,
    ) -> Result<T, String> {
        match r {
            Ok(v) => {
                self.0.push(format!("{name}={v:?}"));
                Ok(v)
            }
            Err(e) => Err(format!("error: {name}: {e:?}")),
        }
    }
}

fn run(op: &str, query: &str) -> Result<Vec<String>, String> {
    let param = |n: &str| query_param(query, n).unwrap_or_default();
    let addr = param("addr");
    let mut s = Script(Vec::new());
    match op {
        "sqlite3" => {
            let db = query_param(query, "db").unwrap_or_else(|| "default".into());
            let c = s.step("open", sqlite3::Connection::open(&db))?;
            use sqlite3::Value as V;
            s.step(
                "create",
                c.execute(
                    "CREATE TABLE IF NOT EXISTS pets (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, weight REAL, photo BLOB)",
                    &[],
                )
                .map(|r| r.rows.len()),
            )?;
            s.step(
                "insert",
                c.execute(
                    "INSERT INTO pets (name, age, weight, photo) VALUES (?, ?, ?, ?)",
                    &[
                        V::Text("rex".into()),
                        V::Integer(3),
                        V::Real(4.5),
                        V::Blob(vec![1, 2]),
                    ],
                )
                .map(|r| r.rows.len()),
            )?;
            s.0.push(format!("changes={}", c.changes()));
            s.0.push(format!("rowid={}", c.last_insert_rowid()));
            let r = s.step(
                "select",
                c.execute(
                    "SELECT name, age, weight, photo, NULL AS empty FROM pets WHERE id = ?",
                    &[V::Integer(c.last_insert_rowid())],
                ),
            )?;
            s.0.push(format!("columns={:?}", r.columns));
            s.0.push(format!("row={:?}", r.rows.first().map(|r| &r.values)));
            s.step(
                "count",
                c.execute("SELECT COUNT(*) FROM pets", &[])
                    .map(|r| r.rows[0].values.clone()),
            )?;
            s.0.push(format!(
                "bad_sql={:?}",
                c.execute("SELECT * FROM nowhere", &[]).map(|_| ())
            ));
        }
        "sqlite2" => {
            let db = query_param(query, "db").unwrap_or_else(|| "default".into());
            let c = s.step("open", v2::sqlite::Connection::open(&db))?;
            use v2::sqlite::Value as V;
            s.step(
                "create",
                c.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)", &[])
                    .map(|r| r.rows.len()),
            )?;
            s.step(
                "insert",
                c.execute("INSERT INTO notes VALUES (?)", &[V::Text("hello".into())])
                    .map(|r| r.rows.len()),
            )?;
            let r = s.step(
                "select",
                c.execute("SELECT body, 42 FROM notes LIMIT 1", &[]),
            )?;
            s.0.push(format!("row={:?}", r.rows.first().map(|r| &r.values)));
        }
        "redis" => {
            use v2::redis::{RedisParameter as P, RedisResult as R};
            let c = s.step("open", v2::redis::Connection::open(&addr))?;
            s.step("set", c.set("greeting", &b"hello".to_vec()))?;
            s.step(
                "get",
                c.get("greeting")
                    .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned())),
            )?;
            s.step("get_missing", c.get("nothing-here"))?;
            s.step("incr", c.incr("counter"))?;
            s.step("incr", c.incr("counter"))?;
            s.step("sadd", c.sadd("set", &["a".into(), "b".into(), "c".into()]))?;
            s.step("srem", c.srem("set", &["b".into()]))?;
            s.step(
                "smembers",
                c.smembers("set").map(|mut m| {
                    m.sort();
                    m
                }),
            )?;
            s.step(
                "del",
                c.del(&["greeting".into(), "counter".into(), "set".into()]),
            )?;
            s.step(
                "execute",
                c.execute(
                    "APPEND",
                    &[P::Binary(b"log".to_vec()), P::Binary(b"abc".to_vec())],
                ),
            )?;
            s.step(
                "execute_get",
                c.execute("GET", &[P::Binary(b"log".to_vec())]).map(|r| {
                    r.into_iter()
                        .map(|v| match v {
                            R::Binary(b) => format!("binary:{}", String::from_utf8_lossy(&b)),
                            other => format!("{other:?}"),
                        })
                        .collect::<Vec<_>>()
                }),
            )?;
            s.step(
                "execute_del",
                c.execute("DEL", &[P::Binary(b"log".to_vec())]),
            )?;
            s.step("publish", c.publish("news", &b"extra".to_vec()))?;
            s.step("sadd_wrong_type", {
                let _ = c.set("scalar", &b"x".to_vec());
                let r = c.sadd("scalar", &["a".into()]);
                let _ = c.del(&["scalar".into()]);
                Ok::<String, ()>(match r {
                    Ok(n) => format!("ok {n}"),
                    Err(e) => format!("{e:?}"),
                })
            })?;
        }
        "pg4" => {
            use pg4::ParameterValue as P;
            let c = s.step("open", pg4::Connection::open(&addr))?;
            s.step("drop", c.execute("DROP TABLE IF EXISTS things4", &[]))?;
            s.step(
                "create",
                c.execute(
                    "CREATE TABLE things4 (id SERIAL PRIMARY KEY, name TEXT NOT NULL, n INT4, big INT8, small INT2, ok BOOL, f4 FLOAT4, f8 FLOAT8, raw BYTEA, d DATE, t TIME, ts TIMESTAMP, u UUID, j JSONB, dec NUMERIC, r INT4RANGE, arr INT4[], strs TEXT[], iv INTERVAL, other INET)",
                    &[],
                ),
            )?;
            s.step(
                "insert",
                c.execute(
                    "INSERT INTO things4 (name, n, big, small, ok, f4, f8, raw, d, t, ts, u, j, dec, r, arr, strs, iv, other) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, '127.0.0.1'), ($1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
                    &[
                        P::Str("widget".into()),
                        P::Int32(7),
                        P::Int64(1 << 40),
                        P::Int16(-3),
                        P::Boolean(true),
                        P::Floating32(1.5),
                        P::Floating64(2.25),
                        P::Binary(vec![0, 255]),
                        P::Date((2024, 2, 29)),
                        P::Time((13, 14, 15, 0)),
                        P::Datetime((2024, 2, 29, 13, 14, 15, 0)),
                        P::Uuid("67e55044-10b1-426f-9247-bb680e5fe0c8".into()),
                        P::Jsonb(br#"{"a":[1,2]}"#.to_vec()),
                        P::Decimal("12.345".into()),
                        P::RangeInt32((Some((1, pg4::RangeBoundKind::Inclusive)), Some((5, pg4::RangeBoundKind::Exclusive)))),
                        P::ArrayInt32(vec![Some(1), None, Some(3)]),
                        P::ArrayStr(vec![Some("x".into()), None]),
                        P::Interval(pg4::Interval { micros: 1_000_000, days: 2, months: 3 }),
                    ],
                ),
            )?;
            let r = s.step("query", c.query("SELECT name, n, big, small, ok, f4, f8, raw, d, t, ts, u, j, dec, r, arr, strs, iv, other FROM things4 ORDER BY id", &[]))?;
            s.0.push(format!(
                "columns={:?}",
                r.columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type))
                    .collect::<Vec<_>>()
            ));
            for (i, row) in r.rows.iter().enumerate() {
                s.0.push(format!("row{i}={row:?}"));
            }
            s.step(
                "param",
                c.query("SELECT $1::INT8 + 1 AS next", &[P::Int64(41)])
                    .map(|r| r.rows),
            )?;
            match c.query("SELECT * FROM no_such_table", &[]) {
                Ok(_) => s.0.push("missing_table=ok".into()),
                Err(pg4::Error::QueryFailed(pg4::QueryError::DbError(e))) => s.0.push(format!(
                    "missing_table=db-error code={} message={}",
                    e.code, e.message
                )),
                Err(e) => s.0.push(format!("missing_table={e:?}")),
            }
        }
        "pg3" => {
            use pg3::ParameterValue as P;
            let c = s.step("open", pg3::Connection::open(&addr))?;
            s.step("drop", c.execute("DROP TABLE IF EXISTS things3", &[]))?;
            s.step(
                "create",
                c.execute(
                    "CREATE TABLE things3 (name TEXT, n INT4, d DATE, ts TIMESTAMP, u UUID)",
                    &[],
                ),
            )?;
            s.step(
                "insert",
                c.execute(
                    "INSERT INTO things3 VALUES ($1, $2, $3, $4, gen_random_uuid())",
                    &[
                        P::Str("gadget".into()),
                        P::Int32(9),
                        P::Date((2023, 12, 31)),
                        P::Datetime((2023, 12, 31, 23, 59, 58, 0)),
                    ],
                ),
            )?;
            let r = s.step(
                "query",
                c.query("SELECT name, n, d, ts, u FROM things3", &[]),
            )?;
            s.0.push(format!(
                "columns={:?}",
                r.columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type))
                    .collect::<Vec<_>>()
            ));
            s.0.push(format!("row={:?}", r.rows.first()));
        }
        "pg2" => {
            use v2::rdbms_types::ParameterValue as P;
            let c = s.step("open", v2::postgres::Connection::open(&addr))?;
            s.step("drop", c.execute("DROP TABLE IF EXISTS things2", &[]))?;
            s.step(
                "create",
                c.execute("CREATE TABLE things2 (name TEXT, n INT8)", &[]),
            )?;
            s.step(
                "insert",
                c.execute(
                    "INSERT INTO things2 VALUES ($1, $2)",
                    &[P::Str("gizmo".into()), P::Int64(-5)],
                ),
            )?;
            let r = s.step("query", c.query("SELECT name, n FROM things2", &[]))?;
            s.0.push(format!(
                "columns={:?}",
                r.columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type))
                    .collect::<Vec<_>>()
            ));
            s.0.push(format!("row={:?}", r.rows.first()));
            s.0.push(format!(
                "unsigned={:?}",
                c.execute("SELECT $1", &[P::Uint8(1)]).map(|_| ())
            ));
        }
        "mysql" => {
            use v2::rdbms_types::ParameterValue as P;
            let c = s.step("open", v2::mysql::Connection::open(&addr))?;
            s.step("drop", c.execute("DROP TABLE IF EXISTS pets", &[]))?;
            s.step(
                "create",
                c.execute(
                    "CREATE TABLE pets (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(64) NOT NULL, age TINYINT UNSIGNED, score DOUBLE, photo VARBINARY(16), big BIGINT, note TEXT)",
                    &[],
                ),
            )?;
            s.step(
                "insert",
                c.execute(
                    "INSERT INTO pets (name, age, score, photo, big, note) VALUES (?, ?, ?, ?, ?, ?), (?, NULL, NULL, NULL, NULL, NULL)",
                    &[
                        P::Str("rex".into()),
                        P::Uint8(3),
                        P::Floating64(9.5),
                        P::Binary(vec![7, 8]),
                        P::Int64(-(1 << 40)),
                        P::Str("good dog".into()),
                        P::Str("tom".into()),
                    ],
                ),
            )?;
            let r = s.step(
                "query",
                c.query(
                    "SELECT id, name, age, score, photo, big, note FROM pets ORDER BY id",
                    &[],
                ),
            )?;
            s.0.push(format!(
                "columns={:?}",
                r.columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type))
                    .collect::<Vec<_>>()
            ));
            for (i, row) in r.rows.iter().enumerate() {
                s.0.push(format!("row{i}={row:?}"));
            }
            s.0.push(format!(
                "bad_sql={:?}",
                c.query("SELECT * FROM no_such_table", &[])
                    .map(|_| ())
                    .is_err()
            ));
        }
        "mqtt" => {
            use v2::mqtt::Qos;
            let qos = match param("qos").as_str() {
                "0" => Qos::AtMostOnce,
                "2" => Qos::ExactlyOnce,
                _ => Qos::AtLeastOnce,
            };
            let c = s.step("open", v2::mqtt::Connection::open(&addr, "", "", 30))?;
            let topic = param("topic");
            s.step(
                "publish",
                c.publish(&topic, &format!("hello {}", param("qos")).into_bytes(), qos),
            )?;
        }
        "llm" => {
            let r = s.step(
                "infer",
                v2::llm::infer(
                    &param("model"),
                    "Say hi",
                    Some(v2::llm::InferencingParams {
                        max_tokens: 5,
                        repeat_penalty: 1.0,
                        repeat_penalty_last_n_token_count: 1,
                        temperature: 0.0,
                        top_k: 1,
                        top_p: 1.0,
                    }),
                ),
            )?;
            s.0.push(format!("text={}", r.text));
        }
        "embed" => {
            s.step(
                "embed",
                v2::llm::generate_embeddings(&param("model"), &["one".into(), "two".into()]),
            )?;
        }
        "kv" => {
            let store = s.step("open", v2::key_value::Store::open("default"))?;
            s.step("set", store.set("k", b"v"))?;
            s.step("get", store.get("k"))?;
        }
        "wasikv" => {
            use spin_sdk::wit::wasi::keyvalue::{atomics, batch, store};
            let bucket = s.step("open", store::open("default"))?;
            s.step("incr", atomics::increment(&bucket, "n", 2))?;
            s.step(
                "get_many",
                batch::get_many(&bucket, &["n".to_string()]).map(|v| v.len()),
            )?;
        }
        "variables" => {
            s.step("get", v2::variables::get(&param("name")))?;
        }
        "config" => {
            s.step(
                "get",
                spin_sdk::wit::wasi::config::store::get(&param("name")),
            )?;
        }
        "log" => {
            // The guest's standard output and error (exported as OpenTelemetry logs).
            let msg = param("msg");
            println!("{msg}");
            eprintln!("{msg} (stderr)");
            s.0.push(format!("logged={msg}"));
        }
        other => return Err(format!("error: unknown op `{other}`")),
    }
    Ok(s.0)
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let query = req.query().to_string();
    let op = query_param(&query, "op").unwrap_or_default();
    Ok(match run(&op, &query) {
        Ok(lines) => Response::new(200, lines.join("\n")),
        Err(e) => Response::new(500, e),
    })
}
