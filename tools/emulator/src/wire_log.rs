//! A log of the Pub/Sub RPCs the emulator proxy ([`super::emulator_proxy`]) forwards,
//! decoded from their gRPC frames: what reached the server and when. The fault campaign
//! (`pubsub-connector chaos`) checks the delivery promise against it: every message the
//! source acknowledged had the rows derived from it confirmed by a Publish response first.
//!
//! Off unless [`enable`]d (then every forwarded Pull, Acknowledge, ModifyAckDeadline and
//! Publish is decoded; the cost is a copy of each frame). Only the fields the checks need
//! are decoded, by a minimal protobuf wire reader (field numbers from
//! `google/pubsub/v1/pubsub.proto`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);
static EVENTS: Mutex<Vec<WireEvent>> = Mutex::new(Vec::new());

/// One decoded RPC message, stamped when the proxy forwarded it.
#[derive(Debug, Clone, PartialEq)]
pub struct WireEvent {
    pub at: Instant,
    pub kind: WireKind,
}

/// What the server was told, or answered.
#[derive(Debug, Clone, PartialEq)]
pub enum WireKind {
    /// A StreamingPull response delivered these messages on `subscription` (full name).
    Delivered {
        subscription: String,
        messages: Vec<Delivery>,
    },
    /// Acknowledge of these ack IDs reached the server (the request was forwarded whole).
    Acked {
        subscription: String,
        ack_ids: Vec<String>,
    },
    /// ModifyAckDeadline to `seconds` (0: a nack) reached the server.
    Deadline {
        subscription: String,
        seconds: i64,
        ack_ids: Vec<String>,
    },
    /// The server confirmed a Publish to `topic` (full name): grpc-status 0 received.
    Published { topic: String, data: Vec<Vec<u8>> },
}

/// One received message of a StreamingPull response.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub ack_id: String,
    pub message_id: String,
    pub data: Vec<u8>,
    pub delivery_attempt: i64,
}

/// Starts recording (for the life of the process).
pub fn enable() {
    ENABLED.store(true, Ordering::Release);
}

pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Every event recorded so far, in the order recorded.
pub fn events() -> Vec<WireEvent> {
    EVENTS.lock().expect("wire log lock").clone()
}

/// Removes and returns the events `keep` selects (e.g. one campaign seed's resources),
/// in the order recorded, so a long campaign does not hold every seed's events.
pub fn take(mut keep: impl FnMut(&WireKind) -> bool) -> Vec<WireEvent> {
    let mut all = EVENTS.lock().expect("wire log lock");
    let (taken, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *all)
        .into_iter()
        .partition(|e| keep(&e.kind));
    *all = rest;
    taken
}

impl WireKind {
    /// The subscription or topic (full name) the event concerns.
    pub fn resource(&self) -> &str {
        match self {
            WireKind::Delivered { subscription, .. }
            | WireKind::Acked { subscription, .. }
            | WireKind::Deadline { subscription, .. } => subscription,
            WireKind::Published { topic, .. } => topic,
        }
    }
}

fn push(kind: WireKind) {
    EVENTS.lock().expect("wire log lock").push(WireEvent {
        at: Instant::now(),
        kind,
    });
}

/// The RPCs decoded, by gRPC path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rpc {
    StreamingPull,
    Acknowledge,
    ModifyAckDeadline,
    Publish,
}

impl Rpc {
    pub(crate) fn of(path: &str) -> Option<Rpc> {
        Some(match path {
            "/google.pubsub.v1.Subscriber/StreamingPull" => Rpc::StreamingPull,
            "/google.pubsub.v1.Subscriber/Acknowledge" => Rpc::Acknowledge,
            "/google.pubsub.v1.Subscriber/ModifyAckDeadline" => Rpc::ModifyAckDeadline,
            "/google.pubsub.v1.Publisher/Publish" => Rpc::Publish,
            _ => return None,
        })
    }
}

/// What one call's request side told its response side (the subscription of a pull, the
/// messages of a publish).
#[derive(Debug, Default)]
struct Call {
    subscription: String,
    topic: String,
    data: Vec<Vec<u8>>,
}

/// Taps one call: feed it the request and response bytes as they are forwarded.
#[derive(Debug, Clone)]
pub(crate) struct CallTap {
    rpc: Rpc,
    call: Arc<Mutex<Call>>,
}

/// Collects one direction's bytes into whole gRPC messages (5-byte header, then the
/// protobuf; compressed messages are skipped: no Pub/Sub client here compresses).
#[derive(Debug, Default)]
pub(crate) struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8])) {
        self.buf.extend_from_slice(chunk);
        loop {
            if self.buf.len() < 5 {
                return;
            }
            let len =
                u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
            if self.buf.len() < 5 + len {
                return;
            }
            if self.buf[0] == 0 {
                each(&self.buf[5..5 + len]);
            }
            self.buf.drain(..5 + len);
        }
    }
}

impl CallTap {
    pub(crate) fn new(rpc: Rpc) -> Self {
        CallTap {
            rpc,
            call: Arc::default(),
        }
    }

    /// Request bytes forwarded upstream. Acks and deadlines count once the request
    /// message is whole: it is then on its way to the server.
    pub(crate) fn request(&self, frames: &mut Frames, chunk: &[u8]) {
        frames.feed(chunk, |m| {
            let mut call = self.call.lock().expect("tap lock");
            match self.rpc {
                Rpc::StreamingPull => {
                    if let Some(s) = first_string(m, 1) {
                        call.subscription = s;
                    }
                    // Acks and deadline changes sent on the stream itself.
                    let acks = strings(m, 2);
                    if !acks.is_empty() {
                        push(WireKind::Acked {
                            subscription: call.subscription.clone(),
                            ack_ids: acks,
                        });
                    }
                    let ids = strings(m, 4);
                    let secs = varints(m, 3);
                    if !ids.is_empty() && ids.len() == secs.len() {
                        for (id, s) in ids.into_iter().zip(secs) {
                            push(WireKind::Deadline {
                                subscription: call.subscription.clone(),
                                seconds: s as i64,
                                ack_ids: vec![id],
                            });
                        }
                    }
                }
                Rpc::Acknowledge => push(WireKind::Acked {
                    subscription: first_string(m, 1).unwrap_or_default(),
                    ack_ids: strings(m, 2),
                }),
                Rpc::ModifyAckDeadline => push(WireKind::Deadline {
                    subscription: first_string(m, 1).unwrap_or_default(),
                    seconds: varints(m, 3).first().copied().unwrap_or(0) as i64,
                    ack_ids: strings(m, 4),
                }),
                Rpc::Publish => {
                    call.topic = first_string(m, 1).unwrap_or_default();
                    call.data = fields(m)
                        .filter(|(n, _)| *n == 2)
                        .filter_map(|(_, v)| match v {
                            Value::Bytes(msg) => Some(first_bytes(msg, 1).unwrap_or_default()),
                            Value::Varint(_) => None,
                        })
                        .collect();
                }
            }
        });
    }

    /// Response bytes forwarded downstream.
    pub(crate) fn response(&self, frames: &mut Frames, chunk: &[u8]) {
        if self.rpc != Rpc::StreamingPull {
            return;
        }
        frames.feed(chunk, |m| {
            let subscription = self.call.lock().expect("tap lock").subscription.clone();
            let messages = fields(m)
                .filter(|(n, _)| *n == 1)
                .filter_map(|(_, v)| match v {
                    Value::Bytes(rm) => Some(delivery(rm)),
                    Value::Varint(_) => None,
                })
                .collect();
            push(WireKind::Delivered {
                subscription,
                messages,
            });
        });
    }

    /// The response's trailers (or headers of a trailers-only response) carried
    /// `grpc-status`; a Publish with status 0 is confirmed now.
    pub(crate) fn status(&self, grpc_status: Option<&str>) {
        if self.rpc == Rpc::Publish && grpc_status == Some("0") {
            let mut call = self.call.lock().expect("tap lock");
            push(WireKind::Published {
                topic: call.topic.clone(),
                data: std::mem::take(&mut call.data),
            });
        }
    }
}

fn delivery(received: &[u8]) -> Delivery {
    let message = first_bytes(received, 2).unwrap_or_default();
    Delivery {
        ack_id: first_string(received, 1).unwrap_or_default(),
        message_id: first_string(&message, 3).unwrap_or_default(),
        data: first_bytes(&message, 1).unwrap_or_default(),
        delivery_attempt: varints(received, 3).first().copied().unwrap_or(0) as i64,
    }
}

/// A protobuf field value: varint, or length-delimited bytes (fixed-width fields are
/// skipped: none of the decoded messages has one that matters).
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of a protobuf message, in order; stops at the first malformed byte.
fn fields(b: &[u8]) -> impl Iterator<Item = (u64, Value<'_>)> {
    let mut i = 0;
    std::iter::from_fn(move || loop {
        let key = varint(b, &mut i)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => return Some((number, Value::Varint(varint(b, &mut i)?))),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let v = b.get(i..i.checked_add(len)?)?;
                i += len;
                return Some((number, Value::Bytes(v)));
            }
            1 => i += 8,
            5 => i += 4,
            _ => return None,
        }
    })
}

fn first_bytes(b: &[u8], field: u64) -> Option<Vec<u8>> {
    fields(b).find_map(|(n, v)| match v {
        Value::Bytes(x) if n == field => Some(x.to_vec()),
        _ => None,
    })
}

fn first_string(b: &[u8], field: u64) -> Option<String> {
    first_bytes(b, field).map(|x| String::from_utf8_lossy(&x).into_owned())
}

fn strings(b: &[u8], field: u64) -> Vec<String> {
    fields(b)
        .filter_map(|(n, v)| match v {
            Value::Bytes(x) if n == field => Some(String::from_utf8_lossy(x).into_owned()),
            _ => None,
        })
        .collect()
}

/// Every varint of `field`, packed or not.
fn varints(b: &[u8], field: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (n, v) in fields(b) {
        if n != field {
            continue;
        }
        match v {
            Value::Varint(x) => out.push(x),
            Value::Bytes(packed) => {
                let mut i = 0;
                while i < packed.len() {
                    match varint(packed, &mut i) {
                        Some(x) => out.push(x),
                        None => break,
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(field: u64, wire: u64) -> Vec<u8> {
        enc_varint((field << 3) | wire)
    }

    fn enc_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(field: u64, v: &[u8]) -> Vec<u8> {
        let mut out = key(field, 2);
        out.extend(enc_varint(v.len() as u64));
        out.extend_from_slice(v);
        out
    }

    fn grpc(m: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend((m.len() as u32).to_be_bytes());
        out.extend_from_slice(m);
        out
    }

    #[test]
    fn a_streaming_pull_response_split_across_chunks_decodes_each_delivery() {
        let mut message = bytes_field(1, b"{\"seq\":7}");
        message.extend(bytes_field(3, b"mid-7"));
        let mut received = bytes_field(1, b"ack-7");
        received.extend(bytes_field(2, &message));
        received.extend(key(3, 0));
        received.extend(enc_varint(2));
        let response = grpc(&bytes_field(1, &received));
        let tap = CallTap::new(Rpc::StreamingPull);
        let mut req = Frames::default();
        tap.request(
            &mut req,
            &grpc(&bytes_field(1, b"projects/p/subscriptions/s-wire")),
        );
        let mut frames = Frames::default();
        let (a, b) = response.split_at(9);
        tap.response(&mut frames, a);
        tap.response(&mut frames, b);
        let got: Vec<_> = events()
            .into_iter()
            .filter_map(|e| match e.kind {
                WireKind::Delivered {
                    subscription,
                    messages,
                } if subscription == "projects/p/subscriptions/s-wire" => Some(messages),
                _ => None,
            })
            .collect();
        assert_eq!(
            got,
            vec![vec![Delivery {
                ack_id: "ack-7".into(),
                message_id: "mid-7".into(),
                data: b"{\"seq\":7}".to_vec(),
                delivery_attempt: 2,
            }]]
        );
    }

    #[test]
    fn acks_deadlines_and_confirmed_publishes_are_recorded() {
        let sub = b"projects/p/subscriptions/s-wire2";
        let mut ack = bytes_field(1, sub);
        ack.extend(bytes_field(2, b"a1"));
        ack.extend(bytes_field(2, b"a2"));
        CallTap::new(Rpc::Acknowledge).request(&mut Frames::default(), &grpc(&ack));
        let mut nack = bytes_field(1, sub);
        nack.extend(key(3, 0));
        nack.extend(enc_varint(0));
        nack.extend(bytes_field(4, b"a3"));
        CallTap::new(Rpc::ModifyAckDeadline).request(&mut Frames::default(), &grpc(&nack));
        let mut publish = bytes_field(1, b"projects/p/topics/t-wire");
        publish.extend(bytes_field(2, &bytes_field(1, b"row-1")));
        let tap = CallTap::new(Rpc::Publish);
        tap.request(&mut Frames::default(), &grpc(&publish));
        tap.status(Some("14"));
        tap.status(Some("0"));
        let mine: Vec<WireKind> = events()
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| match k {
                WireKind::Acked { subscription, .. } | WireKind::Deadline { subscription, .. } => {
                    subscription.as_bytes() == sub
                }
                WireKind::Published { topic, .. } => topic == "projects/p/topics/t-wire",
                _ => false,
            })
            .collect();
        assert_eq!(
            mine,
            vec![
                WireKind::Acked {
                    subscription: String::from_utf8_lossy(sub).into(),
                    ack_ids: vec!["a1".into(), "a2".into()]
                },
                WireKind::Deadline {
                    subscription: String::from_utf8_lossy(sub).into(),
                    seconds: 0,
                    ack_ids: vec!["a3".into()]
                },
                WireKind::Published {
                    topic: "projects/p/topics/t-wire".into(),
                    data: vec![b"row-1".to_vec()]
                },
            ],
            "a failed publish (status 14) is not a confirmation"
        );
    }
}
