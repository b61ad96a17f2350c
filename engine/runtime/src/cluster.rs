//! Connects the processes of a Timely cluster. Timely's own connect loop retries forever
//! and prints to stdout; this one is bounded by `--connect-timeout`, names the peer it
//! could not reach, and checks that every process runs the same shape of job before
//! handing the sockets to Timely (`initialize_networking_from_sockets`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::ProcessBuilder;
use timely::communication::{AllocatorBuilder, Hooks};

use super::ClusterConfig;

/// Greeting each connecting process sends: magic, its index, the cluster size, its
/// workers and a fingerprint of the pipeline, so a stray or mismatched peer is refused.
const MAGIC: u64 = 0x7075_6273_7562_0001; // "pubsub" + protocol version 1
const HELLO_LEN: usize = 5 * 8;

/// What every process of one job must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub processes: usize,
    pub workers: usize,
    /// Hash of the pipeline's planned tables and queries.
    pub fingerprint: u64,
}

/// Opens a connection to every peer (lower indexes are dialled, higher ones accepted, as
/// Timely does) and returns Timely's allocators for this process's workers plus the guard
/// that keeps the network threads alive.
///
/// This is the start-up gate of the cluster: the listener is bound here, not earlier, and
/// a process returns only once it exchanged greetings with every peer. Every process but
/// 0 dials process 0, so none returns (and starts a subtask) before process 0 called this,
/// which it does only after preparing every source table (`Connector::prepare_source`);
/// the time that takes counts against the others' `connect_timeout` (decision 0008).
///
/// Errors: this process's own address cannot be bound; a lower-indexed peer cannot be
/// reached, or a higher-indexed one did not connect, within `connect_timeout` (naming its
/// index and `host:port`); a peer greets with another cluster size, worker count or
/// pipeline.
pub(crate) fn connect(
    cfg: &ClusterConfig,
    shape: Shape,
) -> anyhow::Result<(Vec<AllocatorBuilder>, Box<dyn std::any::Any + Send>)> {
    let me = cfg.process;
    let n = cfg.hosts.len();
    anyhow::ensure!(
        n == shape.processes,
        "--hosts lists {n} addresses but --processes is {}",
        shape.processes
    );
    anyhow::ensure!(
        me < n,
        "--process {me} is out of range: the cluster has {n} processes (0..{})",
        n - 1
    );
    let deadline = Instant::now() + cfg.connect_timeout;
    let own = &cfg.hosts[me];
    let listener = TcpListener::bind(own.as_str())
        .with_context(|| format!("process {me} cannot listen on {own} (its line in --hosts)"))?;
    listener.set_nonblocking(true)?;

    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    // Dial every lower-indexed peer, then accept every higher-indexed one; a peer dials
    // us only after it has its own listener, so neither side can block the other.
    for (peer, addr) in cfg.hosts.iter().enumerate().take(me) {
        let mut stream = dial(peer, addr, deadline, cfg.connect_timeout)?;
        stream.write_all(&hello(me, shape))?;
        // Wait for the peer's own greeting: a peer that refuses us (another shape) closes
        // the connection, and nothing may start before every peer agreed. Bounded by
        // --connect-timeout: whatever listens there may never answer.
        stream.set_read_timeout(Some(remaining(deadline)))?;
        let from = stream.peer_addr()?;
        let answer = read_hello(&mut stream, me, shape, from);
        match answer {
            Ok(p) if p == peer => {}
            Ok(p) => bail!("{addr} answered as process {p}, not process {peer}: check the --hosts file"),
            Err(e) if e.downcast_ref::<Mismatch>().is_some() => return Err(e),
            Err(e) if timed_out(&e) => bail!(
                "process {peer} at {addr} accepted the connection but did not greet within {:?} (--connect-timeout): is a pubsub-connector process of this job listening there?",
                cfg.connect_timeout
            ),
            Err(_) => bail!(
                "process {peer} at {addr} refused this process: it runs another pipeline or other --processes/--workers (its log names the difference)"
            ),
        }
        stream.set_read_timeout(None)?;
        sockets[peer] = Some(stream);
    }
    // Connections that did not greet in time, named if the wait runs out.
    let mut silent: Vec<SocketAddr> = Vec::new();
    while let Some(missing) = (me + 1..n).find(|&p| sockets[p].is_none()) {
        if Instant::now() >= deadline {
            let also = if silent.is_empty() {
                String::new()
            } else {
                let from: Vec<String> = silent.iter().map(|a| a.to_string()).collect();
                format!(
                    "; connections from {} did not greet (not a process of this job?)",
                    from.join(", ")
                )
            };
            bail!(
                "process {me} waited {:?} (--connect-timeout) for process {missing} ({}) to connect: start every process with the same --hosts file{also}",
                cfg.connect_timeout,
                cfg.hosts[missing]
            );
        }
        match listener.accept() {
            Ok((mut stream, from)) => {
                stream.set_nonblocking(false)?;
                // At most 5 s per connection, and never past the deadline: a client that
                // connects and says nothing cannot hold the start-up.
                stream.set_read_timeout(Some(remaining(deadline).min(Duration::from_secs(5))))?;
                match read_hello(&mut stream, me, shape, from) {
                    Ok(peer) if peer > me && peer < n && sockets[peer].is_none() => {
                        stream.write_all(&hello(me, shape))?;
                        stream.set_read_timeout(None)?;
                        stream.set_nodelay(true)?;
                        sockets[peer] = Some(stream);
                    }
                    Ok(peer) => {
                        tracing::warn!(%from, peer, "ignoring an unexpected or repeated connection")
                    }
                    Err(e) if e.downcast_ref::<Mismatch>().is_some() => return Err(e),
                    Err(e) => {
                        tracing::warn!(%from, "ignoring a connection that did not greet: {e:#}");
                        silent.push(from);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("process {me} cannot accept on {own}"))
            }
        }
    }
    // From here a dead peer makes Timely's threads panic: one line instead of pages.
    super::peer_panic::install(cfg.hosts.clone());
    let hooks = Hooks::default();
    let process_allocators =
        ProcessBuilder::new_typed_vector(shape.workers, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) =
        initialize_networking_from_sockets(process_allocators, sockets, me, shape.workers, hooks)
            .map_err(|e| anyhow!("cannot start Timely networking: {e}"))?;
    Ok((
        builders.into_iter().map(AllocatorBuilder::Tcp).collect(),
        Box::new(guard),
    ))
}

/// Time left until `deadline`, at least 1 ms (a zero read timeout is refused).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Whether a greeting read failed because its timeout passed.
fn timed_out(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}

fn dial(peer: usize, addr: &str, deadline: Instant, budget: Duration) -> anyhow::Result<TcpStream> {
    let mut last_error = String::from("no address");
    loop {
        let resolved: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve process {peer}'s address {addr} in --hosts"))?
            .collect();
        for sa in &resolved {
            match TcpStream::connect_timeout(sa, Duration::from_secs(1)) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last_error = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            // Process 0 opens its port only after preparing every source table (creating
            // and checking subscriptions, a first start's seek): that time counts here.
            let hint = if peer == 0 {
                "; process 0 listens only once it prepared every source table: see its log, or raise --connect-timeout"
            } else {
                ""
            };
            bail!(
                "cannot reach process {peer} at {addr} within {budget:?} (--connect-timeout): {last_error}; is it running with the same --hosts file?{hint}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn hello(me: usize, shape: Shape) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    let words = [
        MAGIC,
        me as u64,
        shape.processes as u64,
        shape.workers as u64,
        shape.fingerprint,
    ];
    for (i, w) in words.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// A peer of this job that runs with another shape: fatal, unlike a stray connection.
#[derive(Debug)]
struct Mismatch(String);

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Mismatch {}

fn read_hello(
    stream: &mut TcpStream,
    me: usize,
    shape: Shape,
    from: SocketAddr,
) -> anyhow::Result<usize> {
    let mut buf = [0u8; HELLO_LEN];
    stream.read_exact(&mut buf)?;
    let word = |i: usize| u64::from_be_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    anyhow::ensure!(word(0) == MAGIC, "not a pubsub-connector process");
    let peer = word(1) as usize;
    let theirs = Shape {
        processes: word(2) as usize,
        workers: word(3) as usize,
        fingerprint: word(4),
    };
    if theirs != shape {
        let what = if theirs.processes != shape.processes {
            format!(
                "--processes {} (this process: {})",
                theirs.processes, shape.processes
            )
        } else if theirs.workers != shape.workers {
            format!(
                "--workers {} (this process: {})",
                theirs.workers, shape.workers
            )
        } else {
            "a different pipeline (its statements, tables, columns or WITH options differ)"
                .to_string()
        };
        return Err(Mismatch(format!(
            "process {peer} (from {from}) runs with {what}: every process of a cluster must run the same pipeline with the same --processes and --workers (this is process {me})"
        ))
        .into());
    }
    Ok(peer)
}

/// Reads a `--hosts` file: one `host:port` per line; blank lines and `#` comments are
/// skipped. Errors name the file and line.
pub fn read_hosts(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --hosts file {}", path.display()))?;
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let ok = line
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        anyhow::ensure!(
            ok,
            "--hosts file {} line {}: '{line}' is not host:port",
            path.display(),
            i + 1
        );
        anyhow::ensure!(
            !line.ends_with(":0"),
            "--hosts file {} line {}: '{line}' has port 0; every process needs a fixed port",
            path.display(),
            i + 1
        );
        anyhow::ensure!(
            !hosts.iter().any(|h| h == line),
            "--hosts file {} line {}: '{line}' is listed twice; every process needs its own host:port",
            path.display(),
            i + 1
        );
        hosts.push(line.to_string());
    }
    Ok(hosts)
}
