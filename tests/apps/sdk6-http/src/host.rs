//! `/host?op=<interface>&addr=<url>`: exercises one of Spin 4's `async func` host interfaces
//! through spin-sdk 6 (which calls their async forms; a few steps call the plain forms through
//! the SDK's `wit` bindings) and answers 200 with one `name=<value>` line per step, or 500
//! with `error: <step>: <Debug of the Spin error>` at the first failing step.
//!
//! Ops: `kv` (default store), `sqlite` (default database), `redis`, `pg`, `mqtt` (query
//! `topic`, `qos` 0..2), `mysql` (`spin:mysql/mysql@3.0.0`, which spin-sdk 6 does not wrap:
//! bound here from its WIT); `addr` (percent-encoded) names the server.
use std::fmt::Debug;

use spin_sdk::{key_value, mqtt, pg, redis, sqlite};

/// Bindings for Spin 4's `spin:mysql/mysql@3.0.0` (spin-sdk 6 wraps only the 2.0.0 form).
mod mysql3 {
    spin_sdk::wit_bindgen::generate!({
        runtime_path: "spin_sdk::wit_bindgen::rt",
        world: "sdk6-http:mysql3/mysql3",
        generate_all,
        inline: r#"
package sdk6-http:mysql3;

package spin:mysql@3.0.0 {
  interface mysql {
    variant error {
      connection-failed(string),
      bad-parameter(string),
      query-failed(string),
      value-conversion-failed(string),
      other(string),
    }
    enum db-data-type {
      boolean, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
      floating32, floating64, str, binary, other,
    }
    variant db-value {
      boolean(bool), int8(s8), int16(s16), int32(s32), int64(s64),
      uint8(u8), uint16(u16), uint32(u32), uint64(u64),
      floating32(f32), floating64(f64), str(string), binary(list<u8>),
      db-null, unsupported,
    }
    variant parameter-value {
      boolean(bool), int8(s8), int16(s16), int32(s32), int64(s64),
      uint8(u8), uint16(u16), uint32(u32), uint64(u64),
      floating32(f32), floating64(f64), str(string), binary(list<u8>),
      db-null,
    }
    record column {
      name: string,
      data-type: db-data-type,
    }
    type row = list<db-value>;
    resource connection {
      open: static async func(address: string) -> result<connection, error>;
      query: async func(statement: string, params: list<parameter-value>)
        -> result<tuple<list<column>, stream<row>, future<result<_, error>>>, error>;
      execute: async func(statement: string, params: list<parameter-value>) -> result<_, error>;
    }
  }
}

world mysql3 {
  import spin:mysql/mysql@3.0.0;
}
"#,
    });
}

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
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Collects `name=value` lines; the first error ends the script.
struct Script(Vec<String>);

impl Script {
    fn step<T: Debug, E: Debug>(&mut self, name: &str, r: Result<T, E>) -> Result<T, String> {
        match r {
            Ok(v) => {
                self.0.push(format!("{name}={v:?}"));
                Ok(v)
            }
            Err(e) => Err(format!("error: {name}: {e:?}")),
        }
    }

    fn note(&mut self, name: &str, v: impl Debug) {
        self.0.push(format!("{name}={v:?}"));
    }
}

/// Runs `op`; (status, body).
pub async fn run(query: &str) -> (u16, String) {
    let addr = query_param(query, "addr").unwrap_or_default();
    let mut s = Script(Vec::new());
    let result = match query_param(query, "op").as_deref() {
        Some("kv") => kv(&mut s).await,
        Some("sqlite") => sqlite(&mut s).await,
        Some("redis") => redis(&mut s, &addr).await,
        Some("pg") => pg(&mut s, &addr).await,
        Some("mqtt") => {
            let topic = query_param(query, "topic").unwrap_or_default();
            let qos = query_param(query, "qos").unwrap_or_default();
            mqtt(&mut s, &addr, &topic, &qos).await
        }
        Some("mysql") => mysql(&mut s, &addr).await,
        other => Err(format!("error: op: unknown op {other:?}")),
    };
    match result {
        Ok(()) => (200, s.0.join("\n") + "\n"),
        Err(e) => (500, e),
    }
}

fn text(v: Option<Vec<u8>>) -> Option<String> {
    v.map(|b| String::from_utf8_lossy(&b).into_owned())
}

async fn kv(s: &mut Script) -> Result<(), String> {
    let denied = key_value::Store::open("not-listed").await.err();
    s.note("open_unlisted", denied);
    let store = key_value::Store::open_default()
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    s.step("set_a", store.set("a", b"apple").await)?;
    s.step("set_b", store.set("b", b"banana").await)?;
    s.step("set_c", store.set("c", b"cherry").await)?;
    s.step("get_a", store.get("a").await.map(text))?;
    s.step("get_missing", store.get("zzz").await.map(text))?;
    s.step("exists_b", store.exists("b").await)?;
    s.step("delete_b", store.delete("b").await)?;
    s.step("exists_b_after", store.exists("b").await)?;
    s.step("delete_missing", store.delete("zzz").await)?;
    let mut keys = s.step("get_keys", store.get_keys().await.collect().await)?;
    keys.sort();
    s.note("keys_sorted", keys);
    Ok(())
}

async fn sqlite(s: &mut Script) -> Result<(), String> {
    use sqlite::Value;
    let denied = sqlite::Connection::open("not-listed").await.err();
    s.note("open_unlisted", denied);
    let db = sqlite::Connection::open_default()
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    let created = db
        .execute(
            "CREATE TABLE IF NOT EXISTS pets (id INTEGER PRIMARY KEY, name TEXT, weight REAL, photo BLOB)",
            [],
        )
        .await;
    let created = created.map_err(|e| format!("error: create: {e:?}"))?;
    s.step("create", created.result().await)?;
    s.step(
        "delete_all",
        db.execute("DELETE FROM pets", []).await.map(|_| ()),
    )?;
    for (name, weight) in [("rex", 12.5), ("tom", 4.25)] {
        let r = db
            .execute(
                "INSERT INTO pets (name, weight, photo) VALUES (?, ?, ?)",
                [
                    Value::Text(name.into()),
                    Value::Real(weight),
                    Value::Blob(vec![1, 2, 3]),
                ],
            )
            .await;
        s.step("insert", r.map(|_| ()))?;
    }
    s.note("changes", db.changes().await);
    s.note(
        "last_insert_rowid_positive",
        db.last_insert_rowid().await > 0,
    );
    let result = db
        .execute(
            "SELECT name, weight, photo, NULL AS empty FROM pets WHERE weight > ? ORDER BY name",
            [Value::Real(1.0)],
        )
        .await
        .map_err(|e| format!("error: select: {e:?}"))?;
    s.note("columns", result.columns().to_vec());
    s.step("rows", result.collect().await.map(|rows| rows.len()))?;
    let again = db
        .execute(
            "SELECT name, weight, photo, NULL FROM pets ORDER BY name",
            [],
        )
        .await
        .map_err(|e| format!("error: select: {e:?}"))?;
    let rows = again
        .collect()
        .await
        .map_err(|e| format!("error: select_rows: {e:?}"))?;
    for (i, row) in rows.iter().enumerate() {
        s.note(&format!("row{i}"), &row.values);
    }
    let missing = db.execute("SELECT * FROM no_such_table", []).await.err();
    s.note("missing_table", missing);

    // The plain (not async) forms, through the SDK's bindings.
    use sqlite::wit::sqlite as plain;
    let conn =
        plain::Connection::open("default").map_err(|e| format!("error: plain_open: {e:?}"))?;
    let r = conn.execute("SELECT count(*) FROM pets", &[]);
    let r = r.map(|q| {
        let rows: Vec<_> = q.rows.into_iter().map(|r| r.values).collect();
        (q.columns, rows)
    });
    s.step("plain_count", r)?;
    let r = conn.execute(
        "INSERT INTO pets (name) VALUES (?)",
        &[Value::Text("plain".into())],
    );
    s.step("plain_insert", r.map(|q| q.rows.len()))?;
    s.note("plain_changes", conn.changes());
    s.note("plain_rowid_positive", conn.last_insert_rowid() > 0);
    s.note(
        "plain_missing_table",
        conn.execute("SELECT * FROM no_such_table", &[]).err(),
    );
    Ok(())
}

async fn redis(s: &mut Script, addr: &str) -> Result<(), String> {
    use redis::{RedisParameter, RedisResult};
    let conn = redis::Connection::open(addr)
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    s.step("set", conn.set("spin4-key", b"hello").await)?;
    s.step("get", conn.get("spin4-key").await.map(text))?;
    s.step("get_missing", conn.get("spin4-missing").await.map(text))?;
    s.step("incr", conn.incr("spin4-counter").await)?;
    s.step("incr", conn.incr("spin4-counter").await)?;
    s.step("sadd", conn.sadd("spin4-set", ["a", "b", "c"]).await)?;
    s.step("srem", conn.srem("spin4-set", ["b"]).await)?;
    let mut members = s.step("smembers", conn.smembers("spin4-set").await)?;
    members.sort();
    s.note("smembers_sorted", members);
    s.note("sadd_wrong_type", conn.sadd("spin4-key", ["x"]).await.err());
    s.step(
        "del",
        conn.del(["spin4-key", "spin4-counter", "spin4-set"]).await,
    )?;
    let r = conn
        .execute(
            "SET",
            [
                RedisParameter::Binary(b"spin4-exec".to_vec()),
                RedisParameter::Binary(b"abc".to_vec()),
            ],
        )
        .await;
    s.step("execute_set", r)?;
    let r = conn
        .execute("GET", [RedisParameter::Binary(b"spin4-exec".to_vec())])
        .await
        .map(|v| {
            v.into_iter()
                .map(|r| match r {
                    RedisResult::Binary(b) => format!("binary:{}", String::from_utf8_lossy(&b)),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
        });
    s.step("execute_get", r)?;
    s.step(
        "execute_del",
        conn.execute("DEL", [RedisParameter::Binary(b"spin4-exec".to_vec())])
            .await,
    )?;
    s.step("publish", conn.publish("spin4-channel", b"hi").await)?;
    Ok(())
}

async fn pg(s: &mut Script, addr: &str) -> Result<(), String> {
    let conn = pg::Connection::open(addr.to_string())
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    s.step(
        "create",
        conn.execute(
            "CREATE TABLE IF NOT EXISTS spin4_pets (name TEXT NOT NULL, age INT, weight FLOAT8)",
            Vec::<pg::ParameterValue>::new(),
        )
        .await,
    )?;
    s.step(
        "delete_all",
        conn.execute("DELETE FROM spin4_pets", Vec::<pg::ParameterValue>::new())
            .await,
    )?;
    let r = conn
        .execute(
            "INSERT INTO spin4_pets VALUES ($1, $2, $3), ($4, NULL, NULL)",
            vec![
                pg::ParameterValue::Str("rex".into()),
                pg::ParameterValue::Int32(3),
                pg::ParameterValue::Floating64(12.5),
                pg::ParameterValue::Str("tom".into()),
            ],
        )
        .await;
    s.step("insert", r)?;
    let result = conn
        .query(
            "SELECT name, age, weight FROM spin4_pets ORDER BY name",
            Vec::<pg::ParameterValue>::new(),
        )
        .await
        .map_err(|e| format!("error: query: {e:?}"))?;
    let columns: Vec<String> = result
        .columns()
        .iter()
        .map(|c| format!("{}:{:?}", c.name, c.data_type))
        .collect();
    s.note("columns", columns);
    let rows = result
        .collect()
        .await
        .map_err(|e| format!("error: rows: {e:?}"))?;
    for (i, row) in rows.iter().enumerate() {
        let name: Option<String> = row.get("name");
        let age: Option<Option<i32>> = row.get("age");
        let weight: Option<Option<f64>> = row.get("weight");
        s.note(&format!("row{i}"), (name, age, weight));
    }
    let missing = conn
        .query(
            "SELECT * FROM no_such_table",
            Vec::<pg::ParameterValue>::new(),
        )
        .await
        .err()
        .map(|e| format!("{e:?}"))
        .unwrap_or_default();
    s.note("missing_table_is_42P01", missing.contains("42P01"));

    // The plain (not async) forms and the connection builder, through the SDK's bindings.
    use pg::wit::postgres as plain;
    let c = plain::Connection::open(addr).map_err(|e| format!("error: plain_open: {e:?}"))?;
    let r = c.query("SELECT count(*)::INT4 AS n FROM spin4_pets", &[]);
    s.step("plain_count", r.map(|set| set.rows))?;
    s.step(
        "plain_execute",
        c.execute("DELETE FROM spin4_pets WHERE age IS NULL", &[]),
    )?;
    let builder = plain::ConnectionBuilder::new(addr);
    s.note(
        "builder_set_ca_root",
        builder
            .set_ca_root("-----BEGIN CERTIFICATE-----")
            .err()
            .is_some(),
    );
    let built = builder
        .build_async()
        .await
        .map_err(|e| format!("error: build_async: {e:?}"))?;
    let r = built
        .execute_async("DROP TABLE spin4_pets".into(), Vec::new())
        .await;
    s.step("built_drop_table", r)?;
    let builder = plain::ConnectionBuilder::new(addr);
    s.step("builder_build", builder.build().map(|_| ()))?;
    Ok(())
}

async fn mqtt(s: &mut Script, addr: &str, topic: &str, qos: &str) -> Result<(), String> {
    let qos = match qos {
        "0" => mqtt::Qos::AtMostOnce,
        "1" => mqtt::Qos::AtLeastOnce,
        _ => mqtt::Qos::ExactlyOnce,
    };
    let conn = mqtt::Connection::open(addr, "", "", 30)
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    let payload = format!("spin4 {}", topic.rsplit('/').next().unwrap_or(""));
    s.step(
        "publish",
        conn.publish(topic, payload.into_bytes(), qos).await,
    )?;
    Ok(())
}

async fn mysql(s: &mut Script, addr: &str) -> Result<(), String> {
    use mysql3::spin::mysql::mysql::{Connection, ParameterValue as P};
    let conn = Connection::open(addr.to_string())
        .await
        .map_err(|e| format!("error: open: {e:?}"))?;
    let create = "CREATE TABLE IF NOT EXISTS spin4_pets \
                  (id INT NOT NULL, name VARCHAR(20), age TINYINT UNSIGNED, photo BLOB)";
    s.step("create", conn.execute(create.into(), vec![]).await)?;
    s.step(
        "delete_all",
        conn.execute("DELETE FROM spin4_pets".into(), vec![]).await,
    )?;
    let insert = "INSERT INTO spin4_pets (id, name, age, photo) VALUES (?, ?, ?, ?)";
    let rows = [
        vec![
            P::Int32(1),
            P::Str("rex".into()),
            P::Uint8(3),
            P::Binary(vec![7, 8]),
        ],
        vec![P::Int32(2), P::Str("tom".into()), P::DbNull, P::DbNull],
    ];
    for params in rows {
        s.step("insert", conn.execute(insert.into(), params).await)?;
    }
    let select = "SELECT id, name, age, photo FROM spin4_pets ORDER BY id";
    let (columns, rows, done) = conn
        .query(select.into(), vec![])
        .await
        .map_err(|e| format!("error: query: {e:?}"))?;
    let columns: Vec<String> = columns
        .iter()
        .map(|c| format!("{}:{:?}", c.name, c.data_type))
        .collect();
    s.note("columns", columns);
    let rows = rows.collect().await;
    s.step("done", done.await)?;
    for (i, row) in rows.iter().enumerate() {
        s.note(&format!("row{i}"), row);
    }
    let bad = conn.query("SELEC nonsense".into(), vec![]).await.err();
    s.note(
        "bad_sql_is_query_failed",
        matches!(bad, Some(mysql3::spin::mysql::mysql::Error::QueryFailed(_))),
    );
    s.step(
        "drop_table",
        conn.execute("DROP TABLE spin4_pets".into(), vec![]).await,
    )?;
    Ok(())
}
