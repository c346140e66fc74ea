//! The SQS and NATS triggers through `spin-serve`, against real servers started here on
//! loopback ports and stopped by pid: moto's server (`scripts/install-moto.sh`, SQS's JSON
//! protocol, driven from the test by boto3 from moto's venv), `nats-server` from Debian trixie
//! (`scripts/install-nats.sh`, with JetStream) and redis-server (the guest apps
//! `spin-sqs-trigger` and `spin-nats-trigger` record each message by RPUSH to a Redis list).
//! Each app also has an HTTP route so that `common::Server` sees it listening.

mod common;
mod servers;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{app_from_manifest, make_pki, start_failure, Server};

use servers::{redis, ServerProcess as Proc};

fn redis_list(server: &Proc, key: &str) -> Vec<String> {
    let mut conn = redis::Client::open(format!("redis://{}", server.addr()))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap()
}

/// Waits (bounded, 60 s) until `cond` holds for the list `key`; returns its last reading.
fn wait_list(server: &Proc, key: &str, cond: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = redis_list(server, key);
        if cond(&l) || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (bounded, 60 s) until the server's log has `needle` `count` times.
fn wait_log(server: &Server, needle: &str, count: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if server.stderr.lock().unwrap().matches(needle).count() >= count {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

const HTTP_ROUTE: &str = "[[trigger.http]]\nroute = \"/hello\"\ncomponent = \"hello\"\n\
     [component.hello]\nsource = \"{WASM_DIR}/spin_hello.wasm\"\n";

// ---------------------------------------------------------------------------------------
// SQS

/// moto's server, driven by boto3 (from moto's venv).
struct Moto {
    proc: Proc,
}

impl Moto {
    fn start() -> Moto {
        Moto {
            proc: servers::moto(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.proc.addr())
    }

    /// Runs `code` with `sqs` a boto3 SQS client of this server; returns its stdout.
    fn boto(&self, code: &str) -> String {
        self.proc.boto_sqs(code).unwrap()
    }

    fn create_queue(&self, name: &str, visibility: u32) -> String {
        self.boto(&format!(
            "print(sqs.create_queue(QueueName='{name}', \
             Attributes={{'VisibilityTimeout': '{visibility}'}})['QueueUrl'])"
        ))
    }

    fn send(&self, queue: &str, bodies: &[&str]) {
        let bodies = serde_json::to_string(bodies).unwrap();
        self.boto(&format!(
            "for b in json.loads('{bodies}'):\n    sqs.send_message(QueueUrl='{queue}', \
             MessageBody=b, MessageAttributes={{'colour': {{'DataType': 'String', \
             'StringValue': 'blue'}}, 'blob': {{'DataType': 'Binary', 'BinaryValue': b'abc'}}}})"
        ));
    }

    /// Sends `body` to `queue` with one SendMessage request on a plain socket: no process to
    /// start, so it reaches the server within milliseconds of the call. moto does not check
    /// the signature; the Authorization header gives it the region.
    fn send_now(&self, queue: &str, body: &str) {
        use std::io::{Read, Write};
        let payload = serde_json::json!({"QueueUrl": queue, "MessageBody": body}).to_string();
        let addr = self.proc.addr();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-amz-json-1.0\r\n\
             X-Amz-Target: AmazonSQS.SendMessage\r\nAuthorization: AWS4-HMAC-SHA256 \
             Credential=testing/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, \
             Signature=00\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            payload.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.contains("MessageId"),
            "SendMessage to moto: {reply}"
        );
    }

    /// (visible, received and not yet deleted or back) messages of the queue.
    fn counts(&self, queue: &str) -> (u64, u64) {
        let out = self.boto(&format!(
            "a = sqs.get_queue_attributes(QueueUrl='{queue}', AttributeNames=['All'])['Attributes']\n\
             print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])"
        ));
        let n: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        (n[0], n[1])
    }

    /// Visible plus in-flight messages of the queue.
    fn remaining(&self, queue: &str) -> u64 {
        let out = self.boto(&format!(
            "a = sqs.get_queue_attributes(QueueUrl='{queue}', AttributeNames=['All'])['Attributes']\n\
             print(int(a['ApproximateNumberOfMessages']) + int(a['ApproximateNumberOfMessagesNotVisible']))"
        ));
        out.parse().unwrap()
    }

    fn env(&self, record: &Proc) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("RECORD_ADDRESS", format!("redis://{}", record.addr())),
        ]
    }
}

/// The spin-sqs-trigger app (as in tests/apps) polling `queue`, plus the HTTP route;
/// `extra` is added to the `[[trigger.sqs]]` entry.
fn sqs_app(queue: &str, max_messages: u32, extra: &str) -> tempfile::TempDir {
    sqs_app_waiting(queue, max_messages, 1, extra)
}

/// [`sqs_app`] long-polling `idle_wait` seconds per receive.
fn sqs_app_waiting(
    queue: &str,
    max_messages: u32,
    idle_wait: u32,
    extra: &str,
) -> tempfile::TempDir {
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"sqs-test\"\n\
         [variables]\nrecord_address = {{ required = true }}\n\
         [[trigger.sqs]]\ncomponent = \"recorder\"\nqueue_url = \"{queue}\"\n\
         max_messages = {max_messages}\nidle_wait_seconds = {idle_wait}\n\
         system_attributes = [\"ApproximateReceiveCount\"]\nmessage_attributes = [\"All\"]\n{extra}\
         [component.recorder]\nsource = \"{{WASM_DIR}}/spin_sqs_trigger.wasm\"\n\
         allowed_outbound_hosts = [\"redis://*:*\"]\n\
         [component.recorder.variables]\nrecord_address = \"{{{{ record_address }}}}\"\n\
         record_key = \"sqs-seen\"\n{HTTP_ROUTE}"
    ))
}

#[test]
fn sqs_messages_reach_the_guest_and_are_deleted_only_when_it_says_so() {
    let record = redis();
    let moto = Moto::start();
    let queue = moto.create_queue("orders", 2);
    let app = sqs_app(&queue, 5, "");
    let env = moto.env(&record);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut server = Server::start(app.path(), &env);
    assert!(
        wait_log(&server, "sqs trigger polling", 1),
        "{}",
        server.stderr.lock().unwrap()
    );

    let bodies: Vec<String> = (0..12).map(|i| format!("order-{i}")).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    moto.send(&queue, &refs);
    let seen = wait_list(&record, "sqs-seen", |l| l.len() >= 12);
    for b in &bodies {
        let line = seen
            .iter()
            .find(|l| l.starts_with(&format!("{b} ")))
            .unwrap_or_else(|| panic!("{b} not handled: {seen:?}"));
        // System attribute asked for, message attributes (string and binary) as sent.
        assert!(
            line.contains("ApproximateReceiveCount=1")
                && line.contains("colour=blue")
                && line.contains("blob=bytes:3"),
            "{line}"
        );
    }
    // Deleted after `delete`: the queue empties.
    let deadline = Instant::now() + Duration::from_secs(30);
    while moto.remaining(&queue) != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        moto.remaining(&queue),
        0,
        "handled messages were not deleted"
    );

    // An error and `leave` keep the message: it comes back after the visibility timeout.
    moto.send(&queue, &["fail", "leave"]);
    let seen = wait_list(&record, "sqs-seen", |l| {
        l.iter()
            .any(|x| x.starts_with("fail ") && x.contains("ReceiveCount=2"))
            && l.iter()
                .any(|x| x.starts_with("leave ") && x.contains("ReceiveCount=2"))
    });
    assert!(
        seen.iter()
            .any(|x| x.starts_with("fail ") && x.contains("ReceiveCount=2")),
        "a failed message was not delivered again: {seen:?}"
    );
    assert!(wait_log(
        &server,
        "sqs handler returned an error: asked to fail",
        1
    ));
    assert!(wait_log(
        &server,
        "sqs handler left the message on the queue",
        1
    ));
    assert_eq!(moto.remaining(&queue), 2);

    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
}

#[test]
fn sqs_keeps_polling_through_a_server_outage() {
    let record = redis();
    let mut moto = Moto::start();
    let queue = moto.create_queue("jobs", 30);
    let app = sqs_app(&queue, 5, "");
    let env = moto.env(&record);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(app.path(), &env);
    assert!(wait_log(&server, "sqs trigger polling", 1));
    moto.send(&queue, &["before"]);
    wait_list(&record, "sqs-seen", |l| !l.is_empty());

    // moto keeps its queues in memory: after the restart the queue is made again.
    moto.proc.restart();
    assert!(
        wait_log(&server, "sqs trigger cannot receive messages", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    let again = moto.create_queue("jobs", 30);
    assert_eq!(again, queue);
    moto.send(&queue, &["after"]);
    let seen = wait_list(&record, "sqs-seen", |l| {
        l.iter().any(|x| x.starts_with("after "))
    });
    assert!(seen.iter().any(|x| x.starts_with("after ")), "{seen:?}");
}

#[test]
fn sqs_stop_leaves_no_message_received_and_unhandled() {
    let record = redis();
    let moto = Moto::start();
    // A long visibility timeout: a message taken and dropped would stay invisible 60 s.
    let queue = moto.create_queue("stopping", 60);
    // Receives long-poll 5 s: one is in flight whenever the queue is idle.
    let app = sqs_app_waiting(&queue, 5, 5, "");
    let env = moto.env(&record);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut server = Server::start(app.path(), &env);
    assert!(wait_log(&server, "sqs trigger polling", 1));
    // A message handled before the stop proves a receive is out and served.
    moto.send_now(&queue, "first");
    wait_list(&record, "sqs-seen", |l| l.len() == 1);
    // The stop lands while the next long poll waits; messages come right after it. A
    // receive dropped at the stop would leave them to moto's still-waiting poll: received
    // (invisible for 60 s) and never handled.
    server.signal("TERM");
    assert!(wait_log(&server, "SIGTERM received", 1));
    for body in ["late0", "late1", "late2"] {
        moto.send_now(&queue, body);
    }
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
    let log = server.stderr.lock().unwrap().clone();
    assert!(!log.contains("drain timeout"), "{log}");
    let handled = redis_list(&record, "sqs-seen")
        .iter()
        .filter(|l| l.starts_with("late"))
        .count() as u64;
    let (visible, invisible) = moto.counts(&queue);
    let released = log.contains("sqs trigger stopping: released");
    println!(
        "sqs stop with a receive in flight: {handled} of 3 handled (and deleted) before the exit, \
         {visible} visible, {invisible} received and not handled; released at once: {released}"
    );
    assert_eq!(
        (invisible, handled + visible),
        (0, 3),
        "(received but neither handled nor released, handled + visible) after the stop\n{log}"
    );

    // Released messages go to the next consumer at once (not after 60 s), each once.
    let mut server = Server::start(app.path(), &env);
    let seen = wait_list(&record, "sqs-seen", |l| {
        ["late0", "late1", "late2"]
            .iter()
            .all(|b| l.iter().any(|x| x.starts_with(&format!("{b} "))))
    });
    for b in ["late0", "late1", "late2"] {
        let n = seen
            .iter()
            .filter(|x| x.starts_with(&format!("{b} ")))
            .count();
        assert_eq!(n, 1, "{b} handled {n} times: {seen:?}");
    }
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
    assert_eq!(moto.counts(&queue), (0, 0), "every message deleted");
}

/// `queue_url`, `max_messages`, more keys, environment, what the error names.
type SqsCase<'a> = (
    &'a str,
    u32,
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [&'a str],
);

#[test]
fn sqs_settings_and_credentials_fail_the_start_naming_them() {
    let record = redis();
    let creds: &[(&str, &str)] = &[("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")];
    let cases: [SqsCase; 5] = [
        (
            "https://sqs.example",
            5,
            "",
            creds,
            &["[[trigger.sqs]]", "queue_url", "https://sqs.example"],
        ),
        (
            "https://sqs.us-east-1.amazonaws.com/123456789012/q",
            5,
            "",
            &[],
            &[
                "[[trigger.sqs]]",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
            ],
        ),
        (
            "http://127.0.0.1:1/123456789012/q",
            5,
            "",
            creds,
            &["[[trigger.sqs]]", "AWS_REGION"],
        ),
        (
            "http://127.0.0.1:1/123456789012/q",
            11,
            "",
            creds,
            &["[[trigger.sqs]]", "max_messages", "1 to 10"],
        ),
        (
            "http://127.0.0.1:1/123456789012/q",
            5,
            "visibility = 3\n",
            creds,
            &["[[trigger.sqs]]", "unknown field `visibility`"],
        ),
    ];
    for (queue, max, extra, env, needles) in cases {
        let app = sqs_app(queue, max, extra);
        let mut env = env.to_vec();
        let addr = format!("redis://{}", record.addr());
        env.push(("RECORD_ADDRESS", addr.as_str()));
        let err = start_failure(app.path(), &env);
        for n in needles {
            assert!(err.contains(n), "{queue}: expected `{n}` in:\n{err}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// NATS

/// A NATS client of the test (async-nats on its own runtime).
struct NatsClient {
    rt: tokio::runtime::Runtime,
    client: async_nats::Client,
}

impl NatsClient {
    fn connect(server: &Proc) -> NatsClient {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = format!("nats://{}", server.addr());
        let client = rt.block_on(async_nats::connect(url.as_str())).unwrap();
        NatsClient { rt, client }
    }

    fn publish(&self, subject: &str, payloads: &[String]) {
        self.rt.block_on(async {
            for p in payloads {
                self.client
                    .publish(subject.to_string(), p.clone().into())
                    .await
                    .unwrap();
            }
            self.client.flush().await.unwrap();
        });
    }
}

fn nats_app(trigger: &str) -> tempfile::TempDir {
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"nats-test\"\n\
         [variables]\nnats_address = {{ required = true }}\nrecord_address = {{ required = true }}\n\
         [application.trigger.nats]\naddress = \"{{{{ nats_address }}}}\"\n\
         [[trigger.nats]]\ncomponent = \"recorder\"\n{trigger}\n\
         [component.recorder]\nsource = \"{{WASM_DIR}}/spin_nats_trigger.wasm\"\n\
         allowed_outbound_hosts = [\"redis://*:*\"]\n\
         [component.recorder.variables]\nrecord_address = \"{{{{ record_address }}}}\"\n\
         record_key = \"nats-seen\"\n{HTTP_ROUTE}"
    ))
}

fn nats_env(nats: &Proc, record: &Proc) -> Vec<(String, String)> {
    vec![
        ("NATS_ADDRESS".into(), format!("nats://{}", nats.addr())),
        (
            "RECORD_ADDRESS".into(),
            format!("redis://{}", record.addr()),
        ),
    ]
}

fn start_app(app: &Path, env: &[(String, String)]) -> Server {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start(app, &env)
}

#[test]
fn nats_messages_reach_the_guest_and_survive_a_server_restart() {
    let record = redis();
    let mut nats = servers::nats();
    let app = nats_app("subject = \"orders.>\"\nqueue_group = \"workers\"");
    let server = start_app(app.path(), &nats_env(&nats, &record));
    assert!(
        wait_log(&server, "nats trigger subscribed", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    assert!(wait_log(&server, "nats trigger connected", 1));
    let publisher = NatsClient::connect(&nats);
    let first: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    publisher.publish("orders.new", &first);
    publisher.publish("orders.eu.paid", &["fail".to_string()]);
    publisher.publish("other.subject", &["ignored".to_string()]);
    publisher.rt.block_on(async {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("trace", "t1");
        publisher
            .client
            .publish_with_headers("orders.h", headers, "with-header".into())
            .await
            .unwrap();
        publisher.client.flush().await.unwrap();
    });
    let mut want: Vec<String> = first.iter().map(|m| format!("orders.new {m}")).collect();
    want.push("orders.h with-header h:trace=t1".into());
    let seen = wait_list(&record, "nats-seen", |l| l.len() >= want.len());
    assert_eq!(
        seen, want,
        "in order, once each, only the subscribed subjects"
    );
    assert!(wait_log(
        &server,
        "nats handler returned an error: asked to fail",
        1
    ));
    drop(publisher);

    // The server goes away and comes back on the same port: the trigger reconnects and
    // subscribes again; core NATS does not keep messages, so probe until one arrives.
    nats.restart();
    assert!(
        wait_log(&server, "nats trigger lost its connection", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    assert!(wait_log(&server, "nats trigger connected", 2));
    let publisher = NatsClient::connect(&nats);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while !redis_list(&record, "nats-seen")
        .iter()
        .any(|l| l.starts_with("orders.probe "))
    {
        assert!(
            Instant::now() < deadline,
            "no message reached the guest after the restart"
        );
        publisher.publish("orders.probe", &[format!("p{n}")]);
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let second: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    publisher.publish("orders.new", &second);
    let seen = wait_list(&record, "nats-seen", |l| {
        l.iter().filter(|x| x.starts_with("orders.new b")).count() == 10
    });
    let got: Vec<&String> = seen
        .iter()
        .filter(|x| x.starts_with("orders.new b"))
        .collect();
    assert_eq!(got.len(), 10, "{seen:?}");

    let mut server = server;
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
}

#[test]
fn nats_jetstream_durable_consumer_gets_what_was_published_while_it_was_down() {
    let record = redis();
    let nats = servers::nats();
    let publisher = NatsClient::connect(&nats);
    publisher.rt.block_on(async {
        let js = async_nats::jetstream::new(publisher.client.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "JOBS".into(),
            subjects: vec!["jobs.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    });
    // Published before the app runs: the stream keeps them for the consumer.
    let early: Vec<String> = (0..3).map(|i| format!("early{i}")).collect();
    let js_publish = |subject: &str, payloads: &[String]| {
        publisher.rt.block_on(async {
            let js = async_nats::jetstream::new(publisher.client.clone());
            for p in payloads {
                js.publish(subject.to_string(), p.clone().into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        })
    };
    js_publish("jobs.build", &early);
    let app = nats_app(
        "subject = \"jobs.>\"\njetstream = { stream = \"JOBS\", durable = \"spin-jobs\" }",
    );
    let mut server = start_app(app.path(), &nats_env(&nats, &record));
    assert!(
        wait_log(&server, "JetStream pull consumer", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    js_publish("jobs.test", &["late".to_string(), "fail".to_string()]);
    let mut want: Vec<String> = early.iter().map(|m| format!("jobs.build {m}")).collect();
    want.push("jobs.test late".into());
    let seen = wait_list(&record, "nats-seen", |l| l.len() >= want.len());
    assert_eq!(seen, want);
    // `fail` is NAKed and delivered again.
    assert!(wait_log(
        &server,
        "nats handler returned an error: asked to fail",
        2
    ));
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));

    // The durable consumer acknowledged everything before `fail` (stream sequence 5).
    let (floor, pending) = publisher.rt.block_on(async {
        let js = async_nats::jetstream::new(publisher.client.clone());
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
            .get_stream("JOBS")
            .await
            .unwrap()
            .get_consumer("spin-jobs")
            .await
            .unwrap();
        let info = consumer.info().await.unwrap();
        (info.ack_floor.stream_sequence, info.num_pending)
    });
    assert_eq!((floor, pending), (4, 0), "(ack floor, not delivered)");
}

#[test]
fn nats_settings_fail_the_start_naming_them() {
    let cases = [
        ("subject = \"orders..new\"", "key `subject`"),
        ("queue_group = \"w\"", "subject"),
        (
            "subject = \"a\"\njetstream = { stream = \"S\", consumer = \"c\", durable = \"d\" }",
            "exclude each other",
        ),
    ];
    for (trigger, needle) in cases {
        let app = nats_app(trigger);
        let err = start_failure(
            app.path(),
            &[
                ("NATS_ADDRESS", "nats://127.0.0.1:1"),
                ("RECORD_ADDRESS", "redis://127.0.0.1:1"),
            ],
        );
        assert!(
            err.contains(needle) && err.contains("[[trigger.nats]]"),
            "{trigger}: expected `{needle}` in:\n{err}"
        );
    }
    let app = nats_app("subject = \"a\"");
    let err = start_failure(
        app.path(),
        &[
            ("NATS_ADDRESS", "redis://127.0.0.1:1"),
            ("RECORD_ADDRESS", "redis://127.0.0.1:1"),
        ],
    );
    assert!(
        err.contains("nats://") && err.contains("redis://127.0.0.1:1"),
        "{err}"
    );
    // spin-hello is an HTTP component: the NATS trigger names the export it lacks.
    let manifest = format!(
        "spin_manifest_version = 2\n[application]\nname = \"n\"\n\
         [application.trigger.nats]\naddress = \"nats://127.0.0.1:1\"\n\
         [[trigger.nats]]\nsubject = \"a\"\ncomponent = \"hello\"\n{HTTP_ROUTE}"
    );
    let err = start_failure(app_from_manifest(&manifest).path(), &[]);
    assert!(
        err.contains("spin:nats-trigger/inbound-nats@0.1.0"),
        "{err}"
    );
}

/// A subscriber's connection to a `tls://` NATS server that trusts `ca` (async-nats on the
/// test's own runtime).
fn nats_tls_client(nats: &Proc, ca: &Path) -> NatsClient {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!("tls://{}", nats.addr());
    let client = rt
        .block_on(
            async_nats::ConnectOptions::new()
                .add_root_certificates(ca.to_path_buf())
                .require_tls(true)
                .connect(url.as_str()),
        )
        .unwrap();
    NatsClient { rt, client }
}

#[test]
fn nats_over_tls_is_verified_against_the_trust_store() {
    let record = redis();
    let pki = tempfile::tempdir().unwrap();
    make_pki(pki.path());
    let nats = servers::nats_tls(pki.path());
    let app = nats_app("subject = \"orders.>\"");
    let record_address = format!("redis://{}", record.addr());
    let mut env = vec![
        ("NATS_ADDRESS".to_string(), format!("tls://{}", nats.addr())),
        ("RECORD_ADDRESS".to_string(), record_address),
    ];
    // Not trusted: the handshake is refused and the log says why and what to do.
    let mut untrusted = start_app(app.path(), &env);
    assert!(
        wait_log(&untrusted, "certificate is refused", 1),
        "{}",
        untrusted.stderr.lock().unwrap()
    );
    let log = untrusted.stderr.lock().unwrap().clone();
    assert!(
        log.contains("UnknownIssuer") && log.contains("SSL_CERT_FILE"),
        "the refusal names the reason and the fix:\n{log}"
    );
    assert!(!log.contains("nats trigger connected"), "{log}");
    untrusted.signal("TERM");
    assert_eq!(untrusted.wait_exit(Duration::from_secs(30)), Some(0));

    // The private CA named by SSL_CERT_FILE: connected over TLS, messages handled.
    let ca = pki.path().join("ca.pem");
    env.push(("SSL_CERT_FILE".to_string(), ca.display().to_string()));
    let mut server = start_app(app.path(), &env);
    assert!(
        wait_log(&server, "nats trigger connected", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    let publisher = nats_tls_client(&nats, &ca);
    // Core NATS keeps nothing for a subscription not yet made: probe until one lands.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while redis_list(&record, "nats-seen").is_empty() {
        assert!(
            Instant::now() < deadline,
            "nothing reached the guest over TLS"
        );
        publisher.publish("orders.probe", &[format!("p{n}")]);
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    publisher.publish("orders.tls", &sent);
    let want: Vec<String> = sent.iter().map(|m| format!("orders.tls {m}")).collect();
    let seen = wait_list(&record, "nats-seen", |l| {
        l.iter().filter(|x| x.starts_with("orders.tls ")).count() >= want.len()
    });
    let got: Vec<&String> = seen
        .iter()
        .filter(|x| x.starts_with("orders.tls "))
        .collect();
    assert_eq!(
        got,
        want.iter().collect::<Vec<_>>(),
        "over TLS, in order, once each"
    );
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
}

/// Creates the stream `JOBS` of subjects `jobs.>` (JetStream's API over NATS).
fn jobs_stream(nats: &Proc) {
    let created = nats
        .nats_request(
            "$JS.API.STREAM.CREATE.JOBS",
            r#"{"name":"JOBS","subjects":["jobs.>"]}"#,
        )
        .unwrap();
    assert!(created.contains("\"config\""), "{created}");
}

/// Serves the app and waits (bounded) until its JetStream consumer runs.
fn start_jetstream_app(app: &Path, nats: &Proc, record: &Proc) -> Server {
    let server = start_app(app, &nats_env(nats, record));
    assert!(
        wait_log(&server, "JetStream pull consumer", 1),
        "{}",
        server.stderr.lock().unwrap()
    );
    server
}

#[test]
fn nats_jetstream_durable_consumer_continues_after_a_server_restart() {
    let record = redis();
    let mut nats = servers::nats();
    jobs_stream(&nats);
    let app = nats_app(
        "subject = \"jobs.>\"\njetstream = { stream = \"JOBS\", durable = \"spin-jobs\" }",
    );
    let mut server = start_jetstream_app(app.path(), &nats, &record);
    let before: Vec<String> = (0..3).map(|i| format!("a{i}")).collect();
    nats.jetstream_publish("jobs.a", &before).unwrap();
    wait_list(&record, "nats-seen", |l| l.len() >= 3);

    // The server restarts with its store: stream and durable consumer survive; the
    // trigger reconnects and the consumer continues where it was.
    nats.restart();
    assert!(
        wait_log(&server, "nats trigger connected", 2),
        "{}",
        server.stderr.lock().unwrap()
    );
    let after: Vec<String> = (0..3).map(|i| format!("b{i}")).collect();
    // JetStream answers once it has recovered its store: retry the first publish.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = nats.jetstream_publish("jobs.b", &after[..1]) {
        assert!(
            Instant::now() < deadline,
            "JetStream did not come back: {e}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    nats.jetstream_publish("jobs.b", &after[1..]).unwrap();
    let mut want: Vec<String> = before.iter().map(|m| format!("jobs.a {m}")).collect();
    want.extend(after.iter().map(|m| format!("jobs.b {m}")));
    let seen = wait_list(&record, "nats-seen", |l| l.len() >= want.len());
    assert_eq!(
        seen,
        want,
        "in order, once each, across the restart\n{}",
        server.stderr.lock().unwrap()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let floor = loop {
        let info = nats
            .nats_request("$JS.API.CONSUMER.INFO.JOBS.spin-jobs", "")
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&info).unwrap();
        let floor = v.pointer("/ack_floor/stream_seq").and_then(|f| f.as_u64());
        if floor == Some(6) || Instant::now() > deadline {
            break floor;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(floor, Some(6), "every message acknowledged");
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
}

#[test]
fn nats_jetstream_handler_longer_than_the_ack_wait_is_not_redelivered_meanwhile() {
    let record = redis();
    let nats = servers::nats();
    jobs_stream(&nats);
    // An existing consumer with a 1 s ack wait; the guest takes 1.5 s per `slow` message.
    let created = nats
        .nats_request(
            "$JS.API.CONSUMER.CREATE.JOBS.quick",
            r#"{"stream_name":"JOBS","config":{"durable_name":"quick","ack_policy":"explicit","ack_wait":1000000000,"filter_subject":"jobs.>"}}"#,
        )
        .unwrap();
    assert!(created.contains("\"ack_wait\""), "{created}");
    let app =
        nats_app("subject = \"jobs.>\"\njetstream = { stream = \"JOBS\", consumer = \"quick\" }");
    let mut server = start_jetstream_app(app.path(), &nats, &record);
    let slow: Vec<String> = vec!["slow0".into(), "slow1".into(), "end".into()];
    nats.jetstream_publish("jobs.s", &slow).unwrap();
    let seen = wait_list(&record, "nats-seen", |l| {
        l.iter().any(|x| x == "jobs.s end")
    });
    let want: Vec<String> = slow.iter().map(|m| format!("jobs.s {m}")).collect();
    assert_eq!(
        seen, want,
        "each once: no redelivery while the handler runs"
    );
    // The server delivered each message once (a redelivery counts as a delivery).
    let info = nats
        .nats_request("$JS.API.CONSUMER.INFO.JOBS.quick", "")
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        v.pointer("/delivered/consumer_seq")
            .and_then(|d| d.as_u64()),
        Some(3),
        "deliveries: {info}"
    );
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
}

/// The field at `pointer` of consumer `consumer` of stream `JOBS` (`$JS.API.CONSUMER.INFO`).
fn consumer_field(nats: &Proc, consumer: &str, pointer: &str) -> Option<u64> {
    let info = nats
        .nats_request(&format!("$JS.API.CONSUMER.INFO.JOBS.{consumer}"), "")
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&info).ok()?;
    v.pointer(pointer).and_then(serde_json::Value::as_u64)
}

#[test]
fn nats_jetstream_stop_acknowledges_the_message_in_flight_before_exiting() {
    let record = redis();
    let nats = servers::nats();
    jobs_stream(&nats);
    let app = nats_app(
        "subject = \"jobs.>\"\njetstream = { stream = \"JOBS\", durable = \"spin-jobs\" }",
    );
    // 1.5 s each: whenever one is recorded, the next one is in flight.
    let slow: Vec<String> = (0..8).map(|i| format!("slow{i}")).collect();
    let mut handled = 0;
    let mut per_stop = Vec::new();
    for stop in 1..=3 {
        let mut server = start_jetstream_app(app.path(), &nats, &record);
        if stop == 1 {
            nats.jetstream_publish("jobs.slow", &slow).unwrap();
        }
        wait_list(&record, "nats-seen", |l| l.len() > handled);
        server.signal("TERM");
        assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
        let log = server.stderr.lock().unwrap().clone();
        assert!(!log.contains("drain timeout"), "{log}");
        let now = redis_list(&record, "nats-seen").len();
        assert!(now > handled, "stop {stop}: nothing handled\n{log}");
        per_stop.push(now - handled);
        handled = now;
        // Read once the process is gone: what it settled, the server has.
        let floor = consumer_field(&nats, "spin-jobs", "/ack_floor/stream_seq");
        let pending = consumer_field(&nats, "spin-jobs", "/num_ack_pending");
        assert_eq!(
            (floor, pending),
            (Some(handled as u64), Some(0)),
            "stop {stop}: {handled} messages handled; (ack floor, delivered and not settled) \
             after the exit\n{log}"
        );
    }
    // The next run gets the rest at once: each message once, in order.
    let mut server = start_jetstream_app(app.path(), &nats, &record);
    let seen = wait_list(&record, "nats-seen", |l| l.len() >= slow.len());
    let want: Vec<String> = slow.iter().map(|m| format!("jobs.slow {m}")).collect();
    assert_eq!(seen, want, "once each, in order, across three stops");
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer_field(&nats, "spin-jobs", "/ack_floor/stream_seq") != Some(8) {
        assert!(
            Instant::now() < deadline,
            "not every message was acknowledged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
    println!("nats stops with a handler in flight: handled per run {per_stop:?}, each acknowledged before the exit");
}
