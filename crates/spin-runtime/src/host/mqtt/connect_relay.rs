//! A loopback HTTP `CONNECT` relay that pins an `mqtts://` connection to the broker
//! addresses `[outbound_networking] block_networks` already let through.
//!
//! rumqttc takes the TCP address and the TLS server name from one string and resolves the
//! name itself when it connects, so a name checked once could resolve to a blocked address
//! the second time (DNS rebinding), or to several addresses of which it picks a blocked one.
//! With a proxy set it connects to the proxy instead, asks for `CONNECT <host>:<port>` and
//! runs TLS (server name, certificate check) through the tunnel, end to end. The relay is
//! that proxy: it accepts only its own broker's `host:port` and connects to the checked
//! addresses, never resolving the name again.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest `CONNECT` request head read (rumqttc's is under 100 bytes).
const MAX_HEAD: usize = 8 * 1024;
/// How long the client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to one checked address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A relay listening on a free 127.0.0.1 port for one broker. It tunnels one connection at a
/// time (one MQTT connection, one connection-cap permit; a reconnect waits for the old
/// tunnel to close) and stops accepting when dropped.
pub(super) struct ConnectRelay {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectRelay {
    /// Starts the relay for `CONNECT host:port`, tunnelling to the first of `targets` (the
    /// network policy's checked addresses, in resolution order) that accepts.
    pub(super) async fn start(
        host: &str,
        port: u16,
        targets: Vec<SocketAddr>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let authority = Arc::<str>::from(format!("{host}:{port}"));
        let targets = Arc::<[SocketAddr]>::from(targets);
        let one_at_a_time = Arc::new(tokio::sync::Semaphore::new(1));
        let task = tokio::spawn(async move {
            loop {
                let Ok(turn) = one_at_a_time.clone().acquire_owned().await else {
                    return;
                };
                let client = match listener.accept().await {
                    Ok((client, _)) => client,
                    Err(e) => {
                        tracing::error!(
                            "outbound MQTT to {authority}: the loopback relay stopped \
                             accepting: {e}"
                        );
                        return;
                    }
                };
                let (authority, targets) = (authority.clone(), targets.clone());
                tokio::spawn(async move {
                    if let Err(e) = tunnel(client, &authority, &targets).await {
                        tracing::error!("outbound MQTT to {authority}: {e}");
                    }
                    drop(turn);
                });
            }
        });
        Ok(ConnectRelay { addr, task })
    }

    /// Where the relay listens (the proxy address given to rumqttc).
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ConnectRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one client: reads its `CONNECT` head, connects to a checked address, answers and
/// copies both ways until either side closes.
async fn tunnel(
    mut client: TcpStream,
    authority: &str,
    targets: &[SocketAddr],
) -> Result<(), String> {
    let (target, rest) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client))
        .await
        .map_err(|_| format!("no CONNECT request within {HEAD_TIMEOUT:?}"))??;
    if target != authority {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        return Err(format!(
            "CONNECT to `{target}` refused: this connection may only reach {authority}"
        ));
    }
    let mut broker = match connect_any(targets).await {
        Ok(broker) => broker,
        Err(e) => {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
            return Err(e);
        }
    };
    let _ = broker.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let io = |e: std::io::Error| format!("tunnel to the broker: {e}");
    broker.write_all(&rest).await.map_err(io)?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .map_err(io)?;
    match tokio::io::copy_bidirectional(&mut client, &mut broker).await {
        Ok(_) => Ok(()),
        // Either side going away is how an MQTT connection ends.
        Err(e) if is_hang_up(&e) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

fn is_hang_up(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | BrokenPipe | ConnectionAborted)
}

/// Reads a `CONNECT <authority> HTTP/1.x` request head (at most [`MAX_HEAD`] bytes): its
/// authority and any bytes the client sent after the head.
async fn read_head(client: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(512);
    loop {
        let mut chunk = [0u8; 1024];
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the CONNECT request: {e}"))?;
        if n == 0 {
            return Err("the client closed before its CONNECT request ended".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let (method, target) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
                if method != "CONNECT" {
                    return Err(format!("`{method}` request, not CONNECT"));
                }
                return Ok((target.to_string(), buf[len..].to_vec()));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => {
                return Err(format!("CONNECT request head over {MAX_HEAD} bytes"))
            }
            Err(e) => return Err(format!("malformed CONNECT request: {e}")),
        }
    }
}

/// Connects to the first of `targets` that accepts (each within [`CONNECT_TIMEOUT`]).
async fn connect_any(targets: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut errors = Vec::new();
    for target in targets {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => errors.push(format!("{target}: {e}")),
            Err(_) => errors.push(format!("{target}: no answer within {CONNECT_TIMEOUT:?}")),
        }
    }
    Err(format!(
        "cannot connect to the broker: {}",
        errors.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CONNECT relay for `broker.test:8883` pinned to a loopback listener.
    async fn relay_to_target() -> (ConnectRelay, TcpListener) {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = target.local_addr().unwrap();
        let relay = ConnectRelay::start("broker.test", 8883, vec![addr])
            .await
            .unwrap();
        (relay, target)
    }

    /// Sends `head` to the relay; the connection and the relay's answer head.
    async fn ask(relay: &ConnectRelay, head: &str) -> (TcpStream, String) {
        let mut c = TcpStream::connect(relay.addr()).await.unwrap();
        c.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") && c.read(&mut byte).await.unwrap() == 1 {
            answer.push(byte[0]);
        }
        (c, String::from_utf8(answer).unwrap())
    }

    /// A CONNECT for another authority is refused without any connection; the relay's own
    /// authority is tunnelled to the checked address, both ways.
    #[tokio::test]
    async fn tunnels_only_its_own_authority_to_the_checked_address() {
        let (relay, target) = relay_to_target().await;
        for head in [
            "CONNECT other.test:8883 HTTP/1.1\r\n\r\n",
            "CONNECT broker.test:1883 HTTP/1.1\r\n\r\n",
        ] {
            let (_c, answer) = ask(&relay, head).await;
            assert!(answer.starts_with("HTTP/1.1 403 "), "{head}: {answer}");
        }
        let (mut c, answer) = ask(
            &relay,
            "CONNECT broker.test:8883 HTTP/1.1\r\nHost: broker.test:8883\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        // The relay serves one client at a time, in order: the first connection the target
        // sees is the allowed CONNECT's, none was made for the refused ones.
        let (mut s, _) = target.accept().await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got)).await;
        assert!(
            matches!(read, Ok(Ok(_))) && &got == b"ping",
            "the relay connected for a refused CONNECT: {read:?}"
        );
        s.write_all(b"pong").await.unwrap();
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
    }
}
