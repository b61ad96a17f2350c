//! A small HTTP/2 proxy in front of the emulator (used by [`super::emulator::Emulator`]).
//!
//! The emulator never releases the streaming pull of a client that reset its stream (every
//! client does so on close) or died: it mishandles RST_STREAM and ignores a dropped TCP
//! connection, and the dead stream keeps soaking up deliveries. This proxy forwards frames
//! and, when the downstream side fails or resets, half-closes the upstream request stream
//! (an empty DATA frame with END_STREAM) instead, so the emulator ends the pull and
//! redelivers its messages after one lease extension. HTTP/1.1 (the admin clients' REST
//! calls) passes through as plain TCP. Real Pub/Sub needs none of this.
//!
//! For tests it also records every Publish request's size ([`publish_requests`]) and holds
//! one named fake, [`refuse_publish_containing`]: the INVALID_ARGUMENT the emulator never
//! returns (decision 0013).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use futures::future::poll_fn;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use tokio::net::{TcpListener, TcpStream};

use crate::wire_log;

/// The size of every Publish request (its protobuf bytes, from the gRPC frame header) the
/// proxies of this process forwarded, by the request's topic (full name): tests check that
/// the sink keeps requests within Pub/Sub's 10 MB, which the emulator does not enforce,
/// and how many requests it sent.
static PUBLISH_REQUESTS: Mutex<Option<HashMap<String, Vec<usize>>>> = Mutex::new(None);

/// A named fake for what the emulator never does: refuse a Publish request with
/// INVALID_ARGUMENT. Publish requests to a topic (full name) that contain the marker bytes
/// get that status instead of being forwarded.
static REFUSALS: Mutex<Vec<(String, Vec<u8>)>> = Mutex::new(Vec::new());

/// The largest Publish request to `topic` (a full name) forwarded so far, in bytes (0:
/// none).
pub fn largest_publish_request(topic: &str) -> usize {
    publish_requests(topic).into_iter().max().unwrap_or(0)
}

/// The size in bytes of every Publish request to `topic` (a full name) forwarded so far,
/// in arrival order.
pub fn publish_requests(topic: &str) -> Vec<usize> {
    let map = PUBLISH_REQUESTS.lock().expect("proxy lock");
    map.as_ref()
        .and_then(|m| m.get(topic).cloned())
        .unwrap_or_default()
}

/// From now on, every Publish request to `topic` (a full name) whose bytes contain
/// `marker` is refused with INVALID_ARGUMENT, as Pub/Sub refuses a request it finds
/// invalid; the emulator itself refuses none (see `sink::limits`).
pub fn refuse_publish_containing(topic: &str, marker: &[u8]) {
    assert!(
        !marker.is_empty(),
        "an empty marker would refuse everything"
    );
    REFUSALS
        .lock()
        .expect("proxy lock")
        .push((topic.to_string(), marker.to_vec()));
}

/// The topic and size of a Publish request from its first bytes: the gRPC frame header
/// (flag, 4-byte big-endian length), then field 1 (the topic) of the `PublishRequest`.
fn publish_head(head: &[u8]) -> Option<(String, usize)> {
    if head.len() < 7 || head[5] != 0x0A {
        return None;
    }
    let size = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let (mut len, mut shift, mut i) = (0usize, 0, 6);
    while i < head.len() && shift < 35 {
        len |= ((head[i] & 0x7F) as usize) << shift;
        shift += 7;
        i += 1;
        if head[i - 1] & 0x80 == 0 {
            break;
        }
    }
    let topic = head.get(i..i + len)?;
    Some((String::from_utf8_lossy(topic).into_owned(), size))
}

fn record_publish(head: &[u8]) {
    let Some((topic, size)) = publish_head(head) else {
        return;
    };
    let mut map = PUBLISH_REQUESTS.lock().expect("proxy lock");
    map.get_or_insert_with(HashMap::new)
        .entry(topic)
        .or_default()
        .push(size);
}

/// Whether a whole Publish request (gRPC frame included) is to be refused.
fn refused(request: &[u8]) -> bool {
    let Some((topic, _)) = publish_head(request) else {
        return false;
    };
    REFUSALS
        .lock()
        .expect("proxy lock")
        .iter()
        .any(|(t, m)| *t == topic && request.windows(m.len()).any(|w| w == m.as_slice()))
}

/// Starts the proxy to `127.0.0.1:upstream_port` on its own thread and runtime; returns
/// its port. It serves until the process ends. Errors if no port can be bound.
pub fn spawn(upstream_port: u16) -> anyhow::Result<u16> {
    spawn_on(upstream_port, 0)
}

/// Like [`spawn`], listening on `127.0.0.1:port` (0: any free port). Errors when the port
/// is taken.
pub fn spawn_on(upstream_port: u16, port: u16) -> anyhow::Result<u16> {
    let std_listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    std_listener.set_nonblocking(true)?;
    let port = std_listener.local_addr()?.port();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("emulator-proxy".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = TcpListener::from_std(std_listener) else {
                    return;
                };
                while let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(serve_connection(socket, upstream_port));
                }
            })
        })?;
    Ok(port)
}

async fn serve_connection(mut socket: TcpStream, upstream_port: u16) {
    // The admin clients speak HTTP/1.1 (REST): pass those bytes through untouched. Only
    // HTTP/2 (gRPC, which starts with the "PRI * HTTP/2.0" preface) is proxied per frame.
    let mut head = [0u8; 3];
    let is_h2 = matches!(socket.peek(&mut head).await, Ok(3) if &head == b"PRI");
    if !is_h2 {
        if let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream_port)).await {
            let _ = tokio::io::copy_bidirectional(&mut socket, &mut up).await;
        }
        return;
    }
    let Ok(mut downstream) = h2::server::handshake(socket).await else {
        return;
    };
    let Ok(up_socket) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
        return;
    };
    let Ok((upstream, up_conn)) = h2::client::handshake(up_socket).await else {
        return;
    };
    tokio::spawn(async move {
        let _ = up_conn.await;
    });
    while let Some(Ok((req, respond))) = downstream.accept().await {
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let (parts, down_body) = req.into_parts();
            let publish = parts.uri.path() == "/google.pubsub.v1.Publisher/Publish";
            let tap = wire_log::enabled()
                .then(|| wire_log::Rpc::of(parts.uri.path()).map(wire_log::CallTap::new))
                .flatten();
            let mut respond = respond;
            // Under a refusal rule, a (unary) Publish request is read whole to decide.
            let body = if publish && !REFUSALS.lock().expect("proxy lock").is_empty() {
                let Some(request) = read_all(down_body).await else {
                    return;
                };
                if refused(&request) {
                    let _ = respond.send_response(invalid_argument(), true);
                    return;
                }
                Ok(request)
            } else {
                Err(down_body)
            };
            let Ok(mut upstream) = upstream.ready().await else {
                return;
            };
            let up_req = Request::from_parts(parts, ());
            let Ok((resp_fut, up_send)) = upstream.send_request(up_req, false) else {
                return;
            };
            match body {
                Ok(request) => {
                    if let Some(tap) = &tap {
                        tap.request(&mut wire_log::Frames::default(), &request);
                    }
                    tokio::spawn(async move {
                        record_publish(&request);
                        let mut up = up_send;
                        if send_all(&mut up, Bytes::from(request)).await.is_ok() {
                            let _ = up.send_data(Bytes::new(), true);
                        }
                    });
                }
                Err(down_body) => {
                    tokio::spawn(forward_request_body(
                        down_body,
                        up_send,
                        publish,
                        tap.clone(),
                    ));
                }
            }
            let Ok(resp) = resp_fut.await else { return };
            let (parts, up_body) = resp.into_parts();
            if let (Some(tap), Some(status)) = (&tap, parts.headers.get("grpc-status")) {
                tap.status(status.to_str().ok());
            }
            let Ok(down_send) = respond.send_response(Response::from_parts(parts, ()), false)
            else {
                drain(up_body).await;
                return;
            };
            forward_response_body(up_body, down_send, tap).await;
        });
    }
}

/// Downstream request body -> upstream; on a downstream failure, half-close upstream.
async fn forward_request_body(
    mut body: RecvStream,
    mut up: SendStream<Bytes>,
    publish: bool,
    tap: Option<wire_log::CallTap>,
) {
    let mut head = Vec::new();
    let mut frames = wire_log::Frames::default();
    loop {
        match body.data().await {
            Some(Ok(chunk)) => {
                if publish && head.len() < 512 {
                    let before = head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(512 - before)]);
                    if head.len() == 512 || before == 0 {
                        record_publish(&head);
                    }
                }
                let _ = body.flow_control().release_capacity(chunk.len());
                let tapped = tap.as_ref().map(|_| chunk.clone());
                if send_all(&mut up, chunk).await.is_err() {
                    return;
                }
                if let (Some(tap), Some(chunk)) = (&tap, tapped) {
                    tap.request(&mut frames, &chunk);
                }
            }
            Some(Err(_)) => {
                let _ = up.send_data(Bytes::new(), true);
                return;
            }
            None => {
                match body.trailers().await {
                    Ok(Some(t)) => {
                        let _ = up.send_trailers(t);
                    }
                    _ => {
                        let _ = up.send_data(Bytes::new(), true);
                    }
                }
                return;
            }
        }
    }
}

/// Upstream response body and trailers -> downstream. When downstream fails, the upstream
/// body is drained to its end instead of dropped: dropping it would reset the upstream
/// stream (RST_STREAM, which the emulator mishandles) right after the request side's
/// half-close, and the emulator would keep the dead pull.
async fn forward_response_body(
    mut body: RecvStream,
    mut down: SendStream<Bytes>,
    tap: Option<wire_log::CallTap>,
) {
    let mut frames = wire_log::Frames::default();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else {
            down.send_reset(h2::Reason::CANCEL);
            return;
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        if let Some(tap) = &tap {
            tap.response(&mut frames, &chunk);
        }
        if send_all(&mut down, chunk).await.is_err() {
            drain(body).await;
            return;
        }
    }
    match body.trailers().await {
        Ok(Some(t)) => {
            if let (Some(tap), Some(status)) = (&tap, t.get("grpc-status")) {
                tap.status(status.to_str().ok());
            }
            let _ = down.send_trailers(t);
        }
        _ => {
            let _ = down.send_data(Bytes::new(), true);
        }
    }
}

/// A whole request body, or `None` when the client went away.
async fn read_all(mut body: RecvStream) -> Option<Vec<u8>> {
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    Some(all)
}

/// A trailers-only gRPC response with status 3 (INVALID_ARGUMENT).
fn invalid_argument() -> Response<()> {
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "3")
        .header(
            "grpc-message",
            "refused by the test proxy (a named fake: the emulator refuses no request)",
        )
        .body(())
        .expect("static response")
}

/// Reads an upstream body to its end, discarding it.
async fn drain(mut body: RecvStream) {
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
    }
}

/// Sends `data` respecting the peer's flow-control window.
async fn send_all(stream: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e),
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        if granted == 0 {
            continue;
        }
        let part = data.split_to(granted.min(data.len()));
        stream.send_data(part, false)?;
    }
    Ok(())
}
