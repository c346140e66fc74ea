//! moto's server (`scripts/install-moto.sh`: a local implementation of AWS's DynamoDB and SQS
//! APIs, from PyPI) on a free loopback port; stopped by its pid on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `moto_server`.
pub struct Moto {
    child: Child,
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
}

impl Moto {
    /// Installs moto if needed (`scripts/install-moto.sh` of `workspace_root`) and starts
    /// its server; returns once it accepts connections (60 s at most).
    pub fn start(workspace_root: &Path) -> Moto {
        let script = workspace_root.join("scripts/install-moto.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .expect("running scripts/install-moto.sh");
        assert!(out.status.success(), "install-moto.sh: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let bin = stdout
            .lines()
            .last()
            .expect("moto_server path")
            .trim()
            .to_string();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting moto_server");
        let mut moto = Moto {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(moto.addr).is_err() {
            assert!(
                moto.child.try_wait().unwrap().is_none(),
                "moto_server exited during start"
            );
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Calls DynamoDB `action` directly (moto does not check signatures: a well-formed
    /// Authorization header naming the region is enough); the status and JSON reply.
    pub fn call(&self, action: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.addr).expect("connecting to moto");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\
             content-type: application/x-amz-json-1.0\r\n\
             x-amz-target: DynamoDB_20120810.{action}\r\n\
             authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00\r\n\
             content-length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).expect("reading moto's reply");
        let text = String::from_utf8_lossy(&reply).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status from moto: {text:?}"));
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    /// Creates table `name` in Spin's key-value layout (hash key `PK`, a string).
    pub fn create_kv_table(&self, name: &str) {
        let (status, text) = self.call(
            "CreateTable",
            &format!(
                r#"{{"TableName":"{name}","KeySchema":[{{"AttributeName":"PK","KeyType":"HASH"}}],
                "AttributeDefinitions":[{{"AttributeName":"PK","AttributeType":"S"}}],
                "BillingMode":"PAY_PER_REQUEST"}}"#
            ),
        );
        assert_eq!(status, 200, "CreateTable {name}: {text}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
