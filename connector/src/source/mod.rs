//! The Pub/Sub source: the table's builder ([`PubSubSource`]), its job-level preparation
//! (creation, startup checks and the seek-once, see [`prepare`]) and the reader subtask
//! ([`SourceReader`]): StreamingPull streams of each split feed one bounded channel; the
//! run loop decodes messages into rows, tracks every handle per split (see [`tracker`])
//! and acks only on `Commit` of the checkpoint a message was bound to.
//!
//! Streams are kept alive across ends and retryable failures (see [`pull`]): one WARN per
//! incident naming the subscription and the cause, an INFO with the downtime when it
//! recovers, counter `pull_reconnects`. Permanent statuses fail the job.
//!
//! `ctx.set_can_pull` reports whether the subtask is reading: false before the streams
//! open, while flow control holds it (held messages or bytes at the limit) and while any
//! stream reconnects; the runtime's `--stop-when-idle` clock runs only while it is true.
//!
//! Memory: each held message costs its payload plus the tracker entry, the client's
//! handle and lease bookkeeping. Measured (`measure_memory_per_held_message` in
//! tests/source.rs, emulator, 4 streams): holding 50,000 ~12-byte messages with a 1 h
//! checkpoint interval grew the `pubsub-connector run` RSS from 21 MiB to 46 MiB, about
//! 540 bytes per held message besides its payload. The default element limit (250,000
//! per stream at the 10 s default interval) thus costs ~135 MB per stream at most besides
//! payloads; `scan.flow-control.max-outstanding-request-bytes` (100 MB) bounds payloads.

pub mod backlog;
pub mod backoff;
pub mod builder;
pub mod create;
pub use pubsub_engine_spi::dedup;
pub mod event_time;
mod lease;
mod metadata;
pub mod options;
mod park;
pub mod policy;
pub mod prepare;
mod pull;
pub(crate) use builder::check_attribute_key;
pub(crate) use pull::drain_buffered;
pub mod rate;
mod reader;
pub mod splits;
pub mod start_position;
pub mod tracker;

pub use builder::{PubSubSource, PubSubSourceBuilder};

/// Under format `avro`: the schema revision a message was written with, and its encoding.
pub type AvroWriterOf = (
    std::sync::Arc<pubsub_engine_format::avro::AvroSchema>,
    pubsub_engine_format::avro::AvroEncoding,
);
pub use create::{SubscriptionCreateOptions, SubscriptionCreateOptionsBuilder};
pub use metadata::metadata_values;
pub use options::{PubSubSubscriberOptions, PubSubSubscriberOptionsBuilder};
pub use pubsub_schema::{DeserializationFailurePolicy, OrderingMode};
pub use pull::DEFAULT_STREAM_ACK_DEADLINE;
pub use reader::SourceReader;
pub use start_position::PubSubStartPosition;

/// Counter: decode failures acknowledged under policy `drop`.
pub const MESSAGES_DROPPED: &str = "messages_dropped";
/// Counter: decode failures nacked under policy `nack`.
pub const MESSAGES_NACKED_BAD: &str = "messages_nacked_bad";
/// Counter: deliveries nacked before tracking because they would cross a subscriber
/// buffer cap (`scan.subscriber-buffer.*`).
pub const MESSAGES_REJECTED: &str = "messages_rejected";
/// Counter: messages that yielded zero rows (acknowledged with their checkpoint).
pub const RECORDS_SKIPPED: &str = "records_skipped";
/// Counter: messages that failed to decode, whatever the policy did with them.
pub const RECORDS_IN_ERROR: &str = "records_in_error";
/// Counter: batches of rows emitted (a fetch ends at `scan.max-records-per-fetch`
/// messages or after 50 ms).
pub const FETCHES: &str = "fetches";
/// Counter: acks the server confirmed at a commit (`scan.ack.await-confirmation`).
pub const ACKS_CONFIRMED: &str = "acks_confirmed";
/// Counter: streaming pull reopen attempts after a stream ended or failed.
pub const PULL_RECONNECTS: &str = "pull_reconnects";
/// Counter: splits parked because they could not emit and their paused buffer was full
/// (`scan.paused-split-buffer.*`); each reopens once it can emit again.
pub const SPLITS_PARKED: &str = "splits_parked";
pub use pubsub_engine_spi::dedup::{MESSAGES_BEHIND_DEDUP_WINDOW, MESSAGES_DEDUPLICATED};
/// Counter: messages without the deduplication attribute, or with an empty value
/// (passed through).
pub const MESSAGES_WITHOUT_DEDUP_ATTRIBUTE: &str = "messages_without_dedup_attribute";
/// Gauge: messages held (received, not yet acknowledged) by the subtask.
pub const PENDING_ACKS: &str = "pending_acks";
/// Gauge: payload bytes held by the subtask.
pub const BUFFERED_BYTES: &str = "buffered_bytes";
/// Gauge: checkpoints with messages bound to them, not yet committed.
pub const PENDING_CHECKPOINTS: &str = "pending_checkpoints";
/// Gauge: milliseconds since the subtask's last commit (or its start).
pub const CHECKPOINT_LAG_MS: &str = "checkpoint_lag_ms";
/// Gauge per subtask and subscription (label `subscription`): milliseconds from the
/// publish time of the oldest message held (received, not yet acknowledged) to now; 0
/// when none is held. Rises while a checkpoint is stalled, falls when one commits.
pub const OLDEST_UNACKED_MESSAGE_AGE_MS: &str = "oldest_unacked_message_age_ms";
/// Gauge per subtask and subscription (label `subscription`): milliseconds from the
/// publish time of the newest message held to now (how far behind the data being
/// processed is); 0 when none is held.
pub const EVENT_TIME_LAG_MS: &str = "event_time_lag_ms";
/// Gauge: the subtask's watermark, milliseconds since the Unix epoch (0 until every split
/// that is not idle delivered): the highest event time each split delivered, less the
/// out-of-orderness, lowest over the splits; never lowered (decisions 0035, 0038).
pub const WATERMARK_MS: &str = "watermark_ms";
/// Gauge: milliseconds from the subtask's watermark to now (0 before it has one).
pub const WATERMARK_LAG_MS: &str = "watermark_lag_ms";
/// Gauge: 1 while every split of the subtask is idle (`scan.watermark.idle-timeout`).
pub const SOURCE_IDLE: &str = "source_idle";
/// Counter: messages whose publish time was at or behind the subtask's watermark when
/// they arrived (rows a window would count as late).
pub const MESSAGES_BEHIND_WATERMARK: &str = "messages_behind_watermark";
/// Counter: redeliveries of messages the restored checkpoint already holds (their ack was
/// lost in a crash), acked at once without rows, for a table read by a window.
pub const MESSAGES_REPLAYED: &str = "messages_replayed";
/// Gauge: the subtask's splits paused now by watermark alignment
/// (`scan.watermark.alignment.*`): their watermark is more than the drift ahead of their
/// group's.
pub const SPLITS_PAUSED_FOR_ALIGNMENT: &str = "splits_paused_for_alignment";
/// Counter: times watermark alignment paused one of the subtask's splits.
pub const ALIGNMENT_PAUSES: &str = "alignment_pauses";
/// Gauge per subtask and rule (label `rule`: `newest`, `backlog`, `idle`, `alignment`): 1
/// for the rule that holds the subtask's watermark now, 0 for the others (decision 0047).
/// Only for a table a window reads.
pub const WATERMARK_HELD_BY: &str = "watermark_held_by";
/// Gauge per subscription (label `subscription`), kept by the subtask that probes it:
/// milliseconds from the publish time of the subscription's oldest unacknowledged message
/// (the service's, from a snapshot's expire time) to now, at the last probe that answered.
/// Counts the messages the job itself holds until its checkpoint commits.
pub const BACKLOG_OLDEST_UNACKED_AGE_MS: &str = "backlog_oldest_unacked_age_ms";
/// Counter: backlog probes that answered (`scan.watermark.backlog-probe-interval`).
pub const BACKLOG_PROBES: &str = "backlog_probes";
/// Counter: backlog probes that failed; the watermark held at its last safe value.
pub const BACKLOG_PROBE_FAILURES: &str = "backlog_probe_failures";

/// The window and bound of `d`, with the options naming them.
pub(crate) fn dedup_spec(d: &pubsub_schema::DedupConfig) -> dedup::DedupSpec {
    dedup::DedupSpec {
        window_ms: d.window_ms,
        max_ids: d.max_ids,
        window_option: pubsub_table_options::DEDUP_WINDOW,
        max_ids_option: pubsub_table_options::DEDUP_MAX_IDS,
        attribute_option: pubsub_table_options::DEDUP_ATTRIBUTE,
    }
}
