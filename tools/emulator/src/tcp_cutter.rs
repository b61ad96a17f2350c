//! A TCP forwarder on 127.0.0.1 that a fault test can cut (every connection dropped, the
//! port closed), restore (the same port bound again) and stall (connections stay open but
//! no byte moves in either direction). It stands *in front of* the emulator proxy
//! ([`super::emulator_proxy`]): cutting there is what a client sees when the network to
//! the real service fails, while the proxy still releases the emulator's side cleanly.
//! It can also limit the bytes per second it forwards from clients to the service (a
//! slow network towards a sink's topic, for `pubsub-connector bench --backlog`).
//! Used by the end-to-end tests and by `pubsub-connector chaos`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A cuttable forwarder; dropping it cuts it for good.
pub struct TcpCutter {
    pub port: u16,
    upstream: String,
    tasks: Arc<Mutex<Tasks>>,
    /// A second handle on the listening socket: `cut` shuts it down at once, where
    /// aborting the accept task closes the port only when the runtime next polls it.
    listening: Mutex<Option<socket2::Socket>>,
    stalled: watch::Sender<bool>,
    upload: Arc<Mutex<Pace>>,
}

/// The tasks of the open port and its connections.
#[derive(Default)]
struct Tasks {
    /// Counts cuts: an accept task that finds it moved on was cut while it accepted,
    /// and drops that connection.
    cuts: u64,
    running: Vec<JoinHandle<()>>,
}

/// The upload limit, shared by every connection: a byte may leave only at its slot.
#[derive(Debug, Default)]
struct Pace {
    /// Bytes per second from clients to the service; None: unlimited.
    limit: Option<u64>,
    /// When the last reserved byte may leave.
    next: Option<Instant>,
    /// Bytes forwarded from clients to the service so far.
    uploaded: u64,
}

impl Pace {
    /// Reserves the slot for `n` bytes read at `now` and returns when they may be
    /// written: after every byte reserved before them, at `limit` bytes per second.
    fn reserve(&mut self, n: usize, now: Instant) -> Instant {
        self.uploaded += n as u64;
        let Some(limit) = self.limit else {
            return now;
        };
        let start = self.next.map_or(now, |next| next.max(now));
        let done = start + Duration::from_secs_f64(n as f64 / limit.max(1) as f64);
        self.next = Some(done);
        done
    }
}

impl TcpCutter {
    /// Starts forwarding `127.0.0.1:<free port>` to `upstream` (`host:port`). Errors when
    /// no port can be bound.
    pub async fn start(upstream: &str) -> anyhow::Result<TcpCutter> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let c = TcpCutter {
            port,
            upstream: upstream.to_string(),
            tasks: Default::default(),
            listening: Mutex::new(None),
            stalled: watch::channel(false).0,
            upload: Default::default(),
        };
        c.serve(listener)?;
        Ok(c)
    }

    /// `127.0.0.1:port`, for a table's `emulator-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn serve(&self, listener: TcpListener) -> anyhow::Result<()> {
        let second = std::os::fd::AsFd::as_fd(&listener).try_clone_to_owned()?;
        *self.listening.lock().expect("cutter lock") = Some(socket2::Socket::from(second));
        let tasks = self.tasks.clone();
        let cuts = tasks.lock().expect("cutter lock").cuts;
        let upstream = self.upstream.clone();
        let stalled = self.stalled.subscribe();
        let upload = self.upload.clone();
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let stalled = stalled.clone();
                let upload = upload.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(up) = TcpStream::connect(&upstream).await {
                        forward(down, up, stalled, upload).await;
                    }
                });
                let mut tasks = tasks.lock().expect("cutter lock");
                if tasks.cuts != cuts {
                    conn.abort();
                    return;
                }
                tasks.running.push(conn);
            }
        });
        self.tasks.lock().expect("cutter lock").running.push(accept);
        Ok(())
    }

    /// Closes the port (a connect after this returns is refused) and drops every
    /// connection (their ends close as soon as the runtime runs the aborted tasks).
    pub fn cut(&self) {
        if let Some(listening) = self.listening.lock().expect("cutter lock").take() {
            // Linux stops listening on a shutdown; the accept task then ends on its error.
            let _ = listening.shutdown(std::net::Shutdown::Read);
        }
        let mut tasks = self.tasks.lock().expect("cutter lock");
        tasks.cuts += 1;
        for t in tasks.running.drain(..) {
            t.abort();
        }
    }

    /// Binds the same port again and forwards new connections. Errors when the port
    /// cannot be bound again within 10 s.
    pub async fn restore(&self) -> anyhow::Result<()> {
        let start = Instant::now();
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if start.elapsed() < Duration::from_secs(10) => {
                    tracing::debug!("rebinding 127.0.0.1:{}: {e}", self.port);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => anyhow::bail!("cannot bind 127.0.0.1:{} again: {e}", self.port),
            }
        };
        self.serve(listener)
    }

    /// Stalls (`true`) or resumes (`false`) every connection, open and new: while
    /// stalled, nothing is read from either side, so the peers' windows fill up.
    pub fn stall(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }

    /// Limits the bytes forwarded from clients to the service to `bytes_per_second` in
    /// all (every connection, open and new, shares it); None lifts the limit. The other
    /// direction is never limited.
    pub fn limit_upload(&self, bytes_per_second: Option<u64>) {
        let mut pace = self.upload.lock().expect("cutter lock");
        pace.limit = bytes_per_second;
        pace.next = None;
    }

    /// Bytes forwarded from clients to the service so far.
    pub fn uploaded_bytes(&self) -> u64 {
        self.upload.lock().expect("cutter lock").uploaded
    }
}

impl Drop for TcpCutter {
    fn drop(&mut self) {
        self.cut();
    }
}

async fn forward(
    down: TcpStream,
    up: TcpStream,
    stalled: watch::Receiver<bool>,
    upload: Arc<Mutex<Pace>>,
) {
    let (dr, dw) = down.into_split();
    let (ur, uw) = up.into_split();
    let a = pump(dr, uw, stalled.clone(), Some(upload));
    let b = pump(ur, dw, stalled, None);
    // Either side closing ends the connection, as `copy_bidirectional` would on error.
    tokio::select! {
        _ = a => {}
        _ = b => {}
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut stalled: watch::Receiver<bool>,
    pace: Option<Arc<Mutex<Pace>>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // What was read when a stall began is held until it ends.
        if stalled.wait_for(|s| !*s).await.is_err() {
            return;
        }
        if let Some(pace) = &pace {
            let at = pace.lock().expect("cutter lock").reserve(n, Instant::now());
            tokio::time::sleep_until(at.into()).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[test]
    fn the_upload_limit_gives_each_read_its_slot_after_every_earlier_one() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert_eq!(pace.reserve(500, t0), t0, "unlimited: at once");
        pace.limit = Some(1000);
        let ms = |at: Instant| at.duration_since(t0).as_millis();
        assert_eq!(ms(pace.reserve(500, t0)), 500);
        assert_eq!(ms(pace.reserve(250, t0)), 750, "queued behind the first");
        let later = t0 + Duration::from_secs(2);
        assert_eq!(
            ms(pace.reserve(1000, later)),
            3000,
            "idle time is not saved up"
        );
        assert_eq!(pace.uploaded, 2250);
    }

    /// The port is closed when `cut` returns, before the runtime runs any task: a
    /// caller that connects right after a cut must be refused (CI failure of stop 51,
    /// where the aborted accept task still held the listener).
    #[tokio::test]
    async fn the_port_is_closed_when_cut_returns() {
        let cutter = TcpCutter::start(&echo_server().await).await.unwrap();
        for round in 0..20 {
            let mut s = TcpStream::connect(cutter.endpoint()).await.unwrap();
            assert_eq!(roundtrip(&mut s, b"up").await.unwrap(), b"up");
            cutter.cut();
            let refused = std::net::TcpStream::connect(cutter.endpoint());
            assert!(refused.is_err(), "round {round}: connected after the cut");
            cutter.restore().await.unwrap();
        }
    }

    #[tokio::test]
    async fn forwards_cuts_restores_and_stalls() {
        let cutter = TcpCutter::start(&echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(cutter.endpoint()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"one").await.unwrap(), b"one");
        cutter.cut();
        let after_cut =
            tokio::time::timeout(Duration::from_secs(5), roundtrip(&mut s, b"two")).await;
        assert!(
            matches!(after_cut, Ok(Err(_))),
            "a cut connection fails: {after_cut:?}"
        );
        assert!(
            TcpStream::connect(cutter.endpoint()).await.is_err(),
            "the port is closed"
        );
        cutter.restore().await.unwrap();
        let mut s = TcpStream::connect(cutter.endpoint()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"three").await.unwrap(), b"three");
        cutter.stall(true);
        let stalled =
            tokio::time::timeout(Duration::from_millis(300), roundtrip(&mut s, b"four")).await;
        assert!(stalled.is_err(), "nothing moves while stalled");
        cutter.stall(false);
        let mut rest = vec![0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut rest))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rest, b"four", "what was held moves on once resumed");
    }
}
