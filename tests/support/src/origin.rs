//! A loopback HTTP/1.1 origin that counts the requests open at once: it answers `200 ok`
//! and closes; a holding origin keeps each request open until the test releases one. For
//! the connection caps and `block_networks` tests (spin-serve and CRI pods).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the origin saw: requests open now, the most open at once, requests answered.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Requests read and not yet answered.
    pub open: usize,
    /// The most requests open at once.
    pub most: usize,
    /// Requests answered.
    pub served: usize,
}

/// The origin; its thread stops on drop (held requests are then answered).
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<(Mutex<Seen>, Condvar)>,
    releases: Arc<(Mutex<usize>, Condvar)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Origin {
    /// Listens on `bind` (`ip:port`, port 0 for any); with `hold`, each request waits until
    /// [`Origin::release`] lets one go.
    pub fn start(bind: &str, hold: bool) -> Origin {
        let listener =
            TcpListener::bind(bind).unwrap_or_else(|e| panic!("cannot listen on {bind}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<(Mutex<Seen>, Condvar)> = Default::default();
        let releases: Arc<(Mutex<usize>, Condvar)> = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, r, st) = (seen.clone(), releases.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut handlers = Vec::new();
            while !st.load(Ordering::SeqCst) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (s, r, st) = (s.clone(), r.clone(), st.clone());
                handlers.push(std::thread::spawn(move || serve(conn, hold, &s, &r, &st)));
            }
            for h in handlers {
                let _ = h.join();
            }
        });
        Origin {
            addr,
            seen,
            releases,
            stop,
            thread: Some(thread),
        }
    }

    /// What it saw so far.
    pub fn seen(&self) -> Seen {
        *self.seen.0.lock().unwrap()
    }

    /// Requests answered so far.
    pub fn served(&self) -> usize {
        self.seen().served
    }

    /// Waits (30 s) until `at_least` requests are open at once; returns (open, most), or
    /// what was open when the time ran out.
    pub fn wait_open(&self, at_least: usize) -> Result<(usize, usize), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = self.seen.0.lock().unwrap();
        while seen.open < at_least {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} requests open at the origin after 30 s, not {at_least}",
                    seen.open
                ));
            }
            seen = self
                .seen
                .1
                .wait_timeout(seen, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        Ok((seen.open, seen.most))
    }

    /// Lets one held request be answered.
    pub fn release(&self) {
        *self.releases.0.lock().unwrap() += 1;
        self.releases.1.notify_all();
    }
}

fn serve(
    mut conn: std::net::TcpStream,
    hold: bool,
    s: &(Mutex<Seen>, Condvar),
    r: &(Mutex<usize>, Condvar),
    stop: &AtomicBool,
) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    {
        let mut seen = s.0.lock().unwrap();
        seen.open += 1;
        seen.most = seen.most.max(seen.open);
        s.1.notify_all();
    }
    if hold {
        let mut n = r.0.lock().unwrap();
        while *n == 0 && !stop.load(Ordering::SeqCst) {
            n = r.1.wait_timeout(n, Duration::from_millis(100)).unwrap().0;
        }
        *n = n.saturating_sub(1);
    }
    // Counted before the reply leaves: a client holding the 200 must find it counted.
    s.0.lock().unwrap().served += 1;
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
    drop(conn);
    let mut seen = s.0.lock().unwrap();
    seen.open -= 1;
    s.1.notify_all();
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.releases.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
