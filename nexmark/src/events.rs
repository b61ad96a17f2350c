//! NEXMark events by index, and their JSON payloads.
//!
//! Events come from the `nexmark` crate (0.2) with its default configuration, except the
//! base time, which is fixed at [`BASE_TIME_MS`] so that event `n` is identical on every
//! run (a restore regenerates exactly the rows it replays). Index `n` counts events of one
//! type only: bid `n` is the `n`-th bid of the NEXMark stream.
//!
//! Each event is serialized with nexmark's serde as a flat JSON object whose keys are the
//! struct's field names:
//!
//! | type | keys (JSON type) |
//! |---|---|
//! | `bid` | `auction`, `bidder`, `price` (numbers), `channel`, `url` (strings), `date_time` (number), `extra` (string) |
//! | `auction` | `id` (number), `item_name`, `description` (strings), `initial_bid`, `reserve`, `date_time`, `expires`, `seller`, `category` (numbers), `extra` (string) |
//! | `person` | `id` (number), `name`, `email_address`, `credit_card`, `city`, `state` (strings), `date_time` (number), `extra` (string) |
//!
//! `date_time` and `expires` are integers: **milliseconds since the Unix epoch**. Declare
//! them `BIGINT`, or `TIMESTAMP` with `'json.timestamp-format' = 'epoch-millis'` (the
//! default `rfc3339` refuses a number).

use arrow::array::RecordBatch;
use bytes::Bytes;
use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};
use nexmark::EventGenerator;
use pubsub_engine_format::Deserializer;
use pubsub_engine_spi::ConnectionSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The time of event number 0, in milliseconds since the Unix epoch:
/// 2015-07-15T00:00:00Z, the base time of the Beam/Java NEXMark generator. Later events
/// are spaced by the generator's default 10,000 events per second of event time,
/// whatever `events-per-second` is.
pub const BASE_TIME_MS: u64 = 1_436_918_400_000;

/// Which NEXMark events a table reads (`event-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Bid,
    Auction,
    Person,
}

impl EventKind {
    /// Parses an `event-type` value.
    pub fn parse(v: &str) -> Option<EventKind> {
        match v {
            "bid" => Some(EventKind::Bid),
            "auction" => Some(EventKind::Auction),
            "person" => Some(EventKind::Person),
            _ => None,
        }
    }

    /// The option value, for messages.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Bid => "bid",
            EventKind::Auction => "auction",
            EventKind::Person => "person",
        }
    }

    /// The JSON keys of this event type (nexmark's serde field names), which are the
    /// column names a table may declare.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            EventKind::Bid => &[
                "auction",
                "bidder",
                "price",
                "channel",
                "url",
                "date_time",
                "extra",
            ],
            EventKind::Auction => &[
                "id",
                "item_name",
                "description",
                "initial_bid",
                "reserve",
                "date_time",
                "expires",
                "seller",
                "category",
                "extra",
            ],
            EventKind::Person => &[
                "id",
                "name",
                "email_address",
                "credit_card",
                "city",
                "state",
                "date_time",
                "extra",
            ],
        }
    }

    fn nexmark(self) -> EventType {
        match self {
            EventKind::Bid => EventType::Bid,
            EventKind::Auction => EventType::Auction,
            EventKind::Person => EventType::Person,
        }
    }
}

/// Events of one type with indexes `first, first + step, first + 2 * step, ...`.
pub struct Events {
    generator: EventGenerator,
}

impl Events {
    /// `step` must be at least 1.
    pub fn new(kind: EventKind, first: u64, step: u64) -> Self {
        let config = NexmarkConfig {
            base_time: BASE_TIME_MS,
            ..NexmarkConfig::default()
        };
        Events {
            generator: EventGenerator::new(config)
                .with_type_filter(kind.nexmark())
                .with_offset(first)
                .with_step(step.max(1)),
        }
    }

    /// The index of the event `next_json` returns next.
    pub fn next_index(&self) -> u64 {
        self.generator.offset()
    }

    /// The next event as a JSON object (nexmark's serde of the event's struct).
    pub fn next_json(&mut self) -> Bytes {
        let event = self.generator.next().expect("the generator is endless");
        let json = match &event {
            Event::Bid(b) => serde_json::to_vec(b),
            Event::Auction(a) => serde_json::to_vec(a),
            Event::Person(p) => serde_json::to_vec(p),
        };
        Bytes::from(json.expect("nexmark events serialize"))
    }
}

/// Decodes event 0 with the table's declared columns: a column type that cannot hold the
/// field (e.g. `channel BIGINT`, or `date_time TIMESTAMP` read as `rfc3339`) is refused at
/// plan time with the engine's decode error naming the column.
pub fn check_decodes(kind: EventKind, schema: &ConnectionSchema) -> anyhow::Result<()> {
    let mut d = Deserializer::new(schema)?;
    let payload = Events::new(kind, 0, 1).next_json();
    d.deserialize(&payload, &[]).map_err(|e| {
        anyhow::anyhow!(
            "nexmark {} event 0 does not decode into the declared columns: {e}",
            kind.name()
        )
    })?;
    let _: Option<RecordBatch> = d.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_deterministic_flat_objects_with_the_documented_keys() {
        for kind in [EventKind::Bid, EventKind::Auction, EventKind::Person] {
            let a = Events::new(kind, 3, 2).next_json();
            let b = Events::new(kind, 3, 1).next_json();
            assert_eq!(a, b, "event 3 of {kind:?} is the same however reached");
            let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
            let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
            keys.sort();
            let mut want = kind.fields().to_vec();
            want.sort();
            assert_eq!(keys, want, "{v}");
            assert!(v["date_time"].as_u64().unwrap() >= BASE_TIME_MS, "{v}");
        }
    }

    #[test]
    fn indexes_advance_by_step() {
        let mut e = Events::new(EventKind::Bid, 1, 4);
        assert_eq!(e.next_index(), 1);
        let first = e.next_json();
        assert_eq!(e.next_index(), 5);
        assert_eq!(first, Events::new(EventKind::Bid, 1, 1).next_json());
        assert_ne!(e.next_json(), first);
    }
}
