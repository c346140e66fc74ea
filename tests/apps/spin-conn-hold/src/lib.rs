//! Connection-cap test app. `GET /?kind=<redis|pg|mysql|mqtt>&addr=<server>&hold=<url>`
//! (values unencoded: the last parameter may hold `?` and `=`) opens one connection of
//! `kind` to `addr`, uses it, sends `GET <hold>` (the test's origin answers when the test
//! lets it) while the connection stays open, uses it again and answers `200 held`; the
//! first failure answers 500 `error: <step>: <error>`.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use spin_sdk::wit::fermyon::spin2_0_0 as v2;
use spin_sdk::wit::pg4;

/// An open connection of one kind.
enum Conn {
    Redis(v2::redis::Connection),
    Pg(pg4::Connection),
    Mysql(v2::mysql::Connection),
    Mqtt(v2::mqtt::Connection),
}

fn failed(step: &str, e: impl std::fmt::Debug) -> String {
    format!("error: {step}: {e:?}")
}

/// `r`, its error worded by [`failed`] for `step`.
fn at<T, E: std::fmt::Debug>(step: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| failed(step, e))
}

impl Conn {
    fn open(kind: &str, addr: &str) -> Result<Conn, String> {
        Ok(match kind {
            "redis" => Conn::Redis(at("open", v2::redis::Connection::open(addr))?),
            "pg" => Conn::Pg(at("open", pg4::Connection::open(addr))?),
            "mysql" => Conn::Mysql(at("open", v2::mysql::Connection::open(addr))?),
            "mqtt" => Conn::Mqtt(at("open", v2::mqtt::Connection::open(addr, "", "", 30))?),
            other => return Err(format!("error: kind: unknown kind {other:?}")),
        })
    }

    /// One round trip on the connection.
    fn use_it(&self, step: &str) -> Result<(), String> {
        match self {
            Conn::Redis(c) => at(step, c.get("conn-hold")).map(drop),
            Conn::Pg(c) => at(step, c.query("SELECT 1", &[])).map(drop),
            Conn::Mysql(c) => at(step, c.query("SELECT 1", &[])).map(drop),
            Conn::Mqtt(c) => at(
                step,
                c.publish("conn-hold", b"held", v2::mqtt::Qos::AtLeastOnce),
            ),
        }
    }
}

#[http_component]
async fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let query = req.query().to_string();
    let param = |name: &str| {
        query
            .split_once(&format!("{name}="))
            .map(|(_, rest)| rest.split('&').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let (kind, hold) = (param("kind"), param("hold"));
    // `addr` is last: it runs to the end of the query.
    let addr = query
        .split_once("addr=")
        .map(|(_, a)| a)
        .unwrap_or_default();
    let conn = match Conn::open(&kind, addr).and_then(|c| c.use_it("first").map(|()| c)) {
        Ok(c) => c,
        Err(e) => return Ok(Response::new(500, e)),
    };
    if let Err(e) = spin_sdk::http::send::<_, Response>(Request::get(hold).build()).await {
        return Ok(Response::new(500, failed("hold", e)));
    }
    Ok(match conn.use_it("second") {
        Ok(()) => Response::new(200, "held"),
        Err(e) => Response::new(500, e),
    })
}
