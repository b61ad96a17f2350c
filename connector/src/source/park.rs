//! The paused buffer of a split (SPEC 5.3, "paused-split buffer").
//!
//! While a subtask cannot emit (its flush waits for back-pressure permits), it keeps
//! taking deliveries from every stream, because a stream that is not polled leaves the
//! messages in its HTTP/2 window unleased: they outlive the stream's ack deadline and are
//! redelivered while the first copy is still on its way (see the client notes in
//! `shared/reference`). What it takes waits here, tracked (so leased and deduplicated) but
//! not decoded, until the flush completes. A split whose paused buffer would cross its cap
//! is parked by the reader: everything here is nacked, its streams are stopped, and fresh
//! ones open once it can emit again.

use std::collections::VecDeque;

use bytes::Bytes;
use pubsub_engine_format::FieldValue;

/// A delivery taken while paused: tracked by its split's ack tracker, not yet decoded.
pub(super) struct Held {
    pub id: super::tracker::MessageId,
    pub payload: Bytes,
    /// The message's metadata column values, in declared order.
    pub meta: Vec<FieldValue>,
    /// The message's attributes and ordering key, kept only under the `dead-letter`
    /// policy (a dead letter carries them); `None` otherwise, costing nothing.
    pub context: Option<Box<MessageContext>>,
    /// Under deduplication, the message's record id attribute and its publish time (Unix
    /// ms); `None` without deduplication or without the attribute.
    pub dedup: Option<Box<(String, i64)>>,
    /// Under format `avro`: the schema revision and encoding the message was written
    /// with, or why it cannot be decoded; `None` for other formats.
    pub writer: Option<Result<crate::source::AvroWriterOf, String>>,
    /// The message's event time (its publish time, or its `scan.event-time.attribute`;
    /// ns since the Unix epoch), observed by the watermark when it is decoded; `None`
    /// outside the range of an `i64` or when the attribute gives none.
    pub event_ns: Option<i64>,
    /// Why the event-time attribute gives no event time: the message fails at decode,
    /// under the failure policy. `None` otherwise.
    pub event_error: Option<Box<str>>,
}

/// What a dead letter carries of its original message besides the payload.
pub(super) struct MessageContext {
    pub attributes: std::collections::HashMap<String, String>,
    pub ordering_key: String,
}

/// The paused caps of a split: messages, and payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PausedCaps {
    pub messages: u64,
    pub bytes: u64,
}

/// The deliveries a split took while the subtask could not emit, in delivery order.
#[derive(Default)]
pub(super) struct PausedBuffer {
    held: VecDeque<Held>,
    bytes: u64,
}

impl PausedBuffer {
    /// Whether one more delivery of `size` payload bytes would cross `caps`.
    pub fn would_cross(&self, size: u64, caps: PausedCaps) -> bool {
        self.held.len() as u64 + 1 > caps.messages || self.bytes + size > caps.bytes
    }

    pub fn push(&mut self, h: Held) {
        self.bytes += h.payload.len() as u64;
        self.held.push_back(h);
    }

    /// The oldest delivery, to decode now that the subtask can emit again.
    pub fn pop(&mut self) -> Option<Held> {
        let h = self.held.pop_front()?;
        self.bytes -= h.payload.len() as u64;
        Some(h)
    }

    /// Empties the buffer (the split is parked); returns the message ids to release.
    pub fn take_ids(&mut self) -> Vec<super::tracker::MessageId> {
        self.bytes = 0;
        self.held.drain(..).map(|h| h.id).collect()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Payload bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, size: usize) -> Held {
        Held {
            id: id.into(),
            payload: Bytes::from(vec![b'x'; size]),
            meta: Vec::new(),
            context: None,
            dedup: None,
            writer: None,
            event_ns: None,
            event_error: None,
        }
    }

    #[test]
    fn a_delivery_that_would_cross_either_cap_is_refused_and_the_order_is_kept() {
        let caps = PausedCaps {
            messages: 2,
            bytes: 10,
        };
        let mut b = PausedBuffer::default();
        assert!(!b.would_cross(4, caps));
        b.push(held("a", 4));
        assert!(b.would_cross(7, caps), "4 + 7 bytes cross the byte cap");
        assert!(!b.would_cross(6, caps), "4 + 6 bytes reach it exactly");
        b.push(held("b", 6));
        assert!(
            b.would_cross(0, caps),
            "a third message crosses the message cap"
        );
        assert_eq!(b.pop().map(|h| h.id), Some("a".into()));
        assert!(!b.would_cross(4, caps));
        b.push(held("c", 4));
        assert_eq!(b.take_ids(), vec!["b".into(), "c".into()]);
        assert!(b.is_empty());
        assert!(
            !b.would_cross(10, caps),
            "taking the ids frees the bytes too"
        );
    }
}
