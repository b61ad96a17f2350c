//! What each engine metric name means on the Prometheus endpoint: its family name (without
//! the `pubsub_connector_` prefix, the unit and `_total`), its unit and its HELP text.
//! One place, so the metrics table of `docs/metrics.md` and this list can be kept in step
//! (the `metrics` test fails on a family that page does not list).

use pubsub_connector_core::dead_letter::DEAD_LETTERS_PUBLISHED;
use pubsub_connector_core::sink::metrics as sink;
use pubsub_connector_core::source as src;
use pubsub_engine_spi::{
    CHECKPOINTS_COMPLETED, CHECKPOINT_DURATION_MS, INFLIGHT_ROWS, INFLIGHT_ROWS_PEAK,
    INPUT_WATERMARK_MS, LAST_COMPLETED_EPOCH, MESSAGES_ACKED, MESSAGES_NACKED,
    MESSAGES_NACK_UNSENT, MESSAGES_RECEIVED, ROWS_LATE, ROWS_WRITTEN, WINDOW_GROUPS,
    WINDOW_STATE_BYTES,
};

/// Whether a metric is a counter (only goes up) or a gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One engine metric's Prometheus description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Described {
    pub kind: Kind,
    /// Family name without prefix, unit or `_total` (e.g. `sent` for `bytes_sent`).
    pub family: &'static str,
    /// Unit suffix (`bytes`, `ms`), if any.
    pub unit: Option<&'static str>,
    /// HELP text.
    pub help: &'static str,
    /// The registry holds milliseconds and the endpoint shows seconds (unit `seconds`,
    /// the value divided by 1,000), as Prometheus names durations.
    pub millis_as_seconds: bool,
}

impl Described {
    /// The name on the endpoint: `pubsub_connector_sent_bytes_total` (the check of
    /// `docs/metrics.md`).
    #[cfg(test)]
    pub fn full_name(&self) -> String {
        let mut n = format!("{}_{}", crate::metrics_http::PREFIX, self.family);
        if let Some(u) = self.unit {
            n = format!("{n}_{u}");
        }
        if self.kind == Kind::Counter {
            n.push_str("_total");
        }
        n
    }
}

const fn d(
    kind: Kind,
    family: &'static str,
    unit: Option<&'static str>,
    help: &'static str,
) -> Described {
    Described {
        kind,
        family,
        unit,
        help,
        millis_as_seconds: false,
    }
}

/// A gauge the registry holds in milliseconds, shown in seconds.
const fn seconds(family: &'static str, help: &'static str) -> Described {
    Described {
        kind: Kind::Gauge,
        family,
        unit: Some("seconds"),
        help,
        millis_as_seconds: true,
    }
}

use Kind::{Counter, Gauge};

/// Publish errors are counted per gRPC code as `send_errors_<CODE>`; on the endpoint they
/// are one family with a `code` label.
pub const SEND_ERRORS: Described = d(
    Counter,
    "send_errors",
    None,
    "Sink publishes that failed, by gRPC code (label code; TRANSPORT, SHUTDOWN and ORDERING_KEY_PAUSED for client-side failures).",
);

/// Every engine metric name this binary's connectors and runtime use, with its
/// description. Sources: the pubsub source (the nexmark source counts
/// `messages_received`); `records_skipped` is shared by sources and sinks.
pub const CATALOG: &[(&str, Described)] = &[
    (MESSAGES_RECEIVED, d(Counter, "messages_received", None, "Messages a source received from its service, redeliveries included.")),
    (MESSAGES_ACKED, d(Counter, "messages_acked", None, "Messages a source acknowledged after the checkpoint they belong to completed.")),
    (MESSAGES_NACKED, d(Counter, "messages_nacked", None, "Messages a source released for redelivery (nack).")),
    (MESSAGES_NACK_UNSENT, d(Counter, "messages_nack_unsent", None, "Nacked messages whose nack was not confirmed sent before the source closed (they return when their lease runs out).")),
    (src::MESSAGES_DROPPED, d(Counter, "messages_dropped", None, "Messages that failed to decode and were acknowledged under policy drop.")),
    (src::MESSAGES_NACKED_BAD, d(Counter, "messages_nacked_bad", None, "Messages that failed to decode and were nacked under policy nack.")),
    (src::MESSAGES_REJECTED, d(Counter, "messages_rejected", None, "Deliveries nacked because they would cross a subscriber buffer cap (scan.subscriber-buffer.*).")),
    (src::RECORDS_SKIPPED, d(Counter, "records_skipped", None, "Source: messages that yielded no row; sink: rows the log-and-drop handler dropped.")),
    (src::RECORDS_IN_ERROR, d(Counter, "records_in_error", None, "Messages that failed to decode, whatever the policy did with them.")),
    (src::FETCHES, d(Counter, "fetches", None, "Batches of rows a source emitted.")),
    (src::ACKS_CONFIRMED, d(Counter, "acks_confirmed", None, "Acknowledgements the server confirmed (scan.ack.await-confirmation).")),
    (src::PULL_RECONNECTS, d(Counter, "pull_reconnects", None, "Streaming pull reopen attempts after a stream ended or failed.")),
    (src::SPLITS_PARKED, d(Counter, "splits_parked", None, "Splits parked because their paused buffer was full (scan.paused-split-buffer.*).")),
    (src::MESSAGES_DEDUPLICATED, d(Counter, "messages_deduplicated", None, "Messages dropped as copies of a record already seen (scan.dedup.attribute), acknowledged with the next checkpoint. In a cluster of several processes, counted by the sink operator of the first query reading the table (operator q{N}-dedup-{table}).")),
    (src::MESSAGES_WITHOUT_DEDUP_ATTRIBUTE, d(Counter, "messages_without_dedup_attribute", None, "Messages without the deduplication attribute or with an empty value, passed through (scan.dedup.attribute).")),
    (src::MESSAGES_BEHIND_DEDUP_WINDOW, d(Counter, "messages_behind_dedup_window", None, "Messages delivered more than scan.dedup.window behind the newest publish time seen: outside the deduplication guarantee (a copy may pass).")),
    (DEAD_LETTERS_PUBLISHED, d(Counter, "dead_letters_published", None, "Dead letters the dead-letter topic confirmed (source policy dead-letter or sink failure handler).")),
    (src::PENDING_ACKS, d(Gauge, "pending_acks", None, "Messages a source subtask holds: received, not yet acknowledged.")),
    (src::BUFFERED_BYTES, d(Gauge, "buffered", Some("bytes"), "Payload bytes of the messages a source subtask holds.")),
    (src::PENDING_CHECKPOINTS, d(Gauge, "pending_checkpoints", None, "Checkpoints with messages bound to them, not yet committed.")),
    (src::CHECKPOINT_LAG_MS, d(Gauge, "checkpoint_lag", Some("ms"), "Milliseconds since the source subtask's last commit (or its start).")),
    (src::OLDEST_UNACKED_MESSAGE_AGE_MS, seconds("oldest_unacked_message_age", "Seconds since the publish time of the oldest message a source subtask holds from a subscription (received, not yet acknowledged; 0: none held).")),
    (src::MESSAGES_REPLAYED, d(Counter, "messages_replayed", None, "Redeliveries of messages the restored checkpoint already holds (their ack was lost in a crash or kill), acknowledged at once and not read again: only for a table read by a windowed query, whose state already counts them.")),
    (src::MESSAGES_BEHIND_WATERMARK, d(Counter, "messages_behind_watermark", None, "Messages whose event time (publish time, the scan.event-time.attribute, or the table's WATERMARK FOR column) was at or behind their source subtask's watermark when they arrived (rows a window would count as late).")),
    (src::WATERMARK_MS, seconds("watermark_timestamp", "A source subtask's watermark, in seconds since the Unix epoch: the highest event time (publish time, the scan.event-time.attribute, or the table's WATERMARK FOR column) each of its splits delivered less the out-of-orderness, lowest over the splits that are not idle, and for a table a window reads no later than its subscriptions' oldest unacked message less the out-of-orderness (scan.watermark.backlog-probe; 0: none yet).")),
    (src::WATERMARK_LAG_MS, seconds("watermark_lag", "Seconds from a source subtask's watermark to now (0: no watermark yet).")),
    (src::SPLITS_PAUSED_FOR_ALIGNMENT, d(Gauge, "splits_paused_for_alignment", None, "Splits of a source subtask paused now by watermark alignment (scan.watermark.alignment.*): their watermark is more than the max drift ahead of their group's.")),
    (src::ALIGNMENT_PAUSES, d(Counter, "alignment_pauses", None, "Times watermark alignment paused a split of a source subtask (scan.watermark.alignment.*).")),
    (src::WATERMARK_HELD_BY, d(Gauge, "watermark_held_by", None, "1 for the rule that holds a source subtask's watermark now (label rule: newest, backlog, idle, alignment), 0 for the others; only for a table a window reads (decision 0047).")),
    (src::BACKLOG_OLDEST_UNACKED_AGE_MS, seconds("backlog_oldest_unacked_age", "Seconds since the publish time of a subscription's oldest unacknowledged message at the service (the backlog probe's last answer, scan.watermark.backlog-probe), messages this job holds until its checkpoint commits included.")),
    (src::BACKLOG_PROBES, d(Counter, "backlog_probes", None, "Backlog probes that answered: a snapshot created, its expire time read, deleted (scan.watermark.backlog-probe-interval).")),
    (src::BACKLOG_PROBE_FAILURES, d(Counter, "backlog_probe_failures", None, "Backlog probes that failed: the watermark stayed at its last safe value.")),
    (src::SOURCE_IDLE, d(Gauge, "source_idle", None, "1 while every split of a source subtask is idle (scan.watermark.idle-timeout): it does not hold watermarks back.")),
    (src::EVENT_TIME_LAG_MS, seconds("event_time_lag", "Seconds since the publish time of the newest message a source subtask holds from a subscription (0: none held).")),
    (INPUT_WATERMARK_MS, seconds("input_watermark_timestamp", "A sink subtask's input watermark, in seconds since the Unix epoch: the lowest watermark of the source subtasks that send to it and are not idle, carried through the dataflow behind their rows (0: not every one sent one yet).")),
    (ROWS_LATE, d(Counter, "rows_late", None, "Rows a window operator subtask found late: their window had fired already (for HOP, one of their windows). Dropped, or written to the source table's `scan.late-rows.table`.")),
    (WINDOW_GROUPS, d(Gauge, "window_groups", None, "Groups a window operator subtask holds over its open windows (one per group key per window; for an updating join, the keys holding kept rows, per side): what its state and memory grow with.")),
    (WINDOW_STATE_BYTES, d(Gauge, "window_state", Some("bytes"), "The memory estimate of a window operator subtask's open windows: key bytes, the accumulators' own size and a measured overhead per group; for an updating join, its kept rows' key and row bytes plus 48 each (bounded by --max-window-state-bytes).")),
    (ROWS_WRITTEN, d(Counter, "rows_written", None, "Rows a sink wrote and saw confirmed (Pub/Sub: records sent).")),
    (sink::BYTES_SENT, d(Counter, "sent", Some("bytes"), "Bytes of message data Pub/Sub confirmed to a sink.")),
    (sink::RECORDS_REJECTED, d(Counter, "records_rejected", None, "Rows routed to the sink's failure handler (encoder rejections, messages rejected alone).")),
    (sink::TOPICS_CREATED, d(Counter, "topics_created", None, "Topics a sink created (create-if-needed).")),
    (sink::IN_FLIGHT_MESSAGES, d(Gauge, "in_flight_messages", None, "Publishes awaiting their result.")),
    (sink::IN_FLIGHT_BYTES, d(Gauge, "in_flight", Some("bytes"), "Bytes of publishes awaiting their result.")),
    (sink::PARKED_MESSAGES, d(Gauge, "parked_messages", None, "Messages a sink holds for a repair (topic creation, republish).")),
    (pubsub_nexmark::BYTES_ENCODED, d(Counter, "encoded", Some("bytes"), "Bytes the blackhole sink encoded.")),
    (CHECKPOINTS_COMPLETED, d(Counter, "checkpoints_completed", None, "Checkpoints whose commit reached this process.")),
    (LAST_COMPLETED_EPOCH, d(Gauge, "last_completed_epoch", None, "Epoch of the last completed checkpoint, restored or new (0: none).")),
    (CHECKPOINT_DURATION_MS, d(Gauge, "checkpoint_duration", Some("ms"), "Milliseconds from the last completed checkpoint's barrier to its commit on this process.")),
    (INFLIGHT_ROWS, d(Gauge, "inflight_rows", None, "Rows this process holds: read by its sources and not yet taken by a sink or sent on, plus rows routed here from other processes (bounded by --max-inflight-rows).")),
    (INFLIGHT_ROWS_PEAK, d(Gauge, "inflight_rows_peak", None, "The highest inflight_rows of this process since it started.")),
];

/// The description of engine metric `name`, or `None` for one the catalog does not know
/// (a connector's own; exposed under its own name with a generic HELP).
pub fn describe(name: &str) -> Option<Described> {
    CATALOG.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
}

/// Splits a per-code publish error counter (`send_errors_NOT_FOUND`) into its code.
pub fn send_error_code(name: &str) -> Option<&str> {
    name.strip_prefix(sink::SEND_ERRORS_PREFIX)
}

/// A metric name Prometheus accepts (`[a-zA-Z_][a-zA-Z0-9_]*`), for names no entry
/// describes.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) || s.is_empty() {
        s.insert(0, '_');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_errors_become_one_family_with_a_code() {
        assert_eq!(send_error_code("send_errors_NOT_FOUND"), Some("NOT_FOUND"));
        assert_eq!(send_error_code("rows_written"), None);
    }

    #[test]
    fn unknown_names_are_made_valid() {
        assert_eq!(sanitize("a-b.c"), "a_b_c");
        assert_eq!(sanitize("9x"), "_9x");
        assert!(describe("no_such_metric").is_none());
    }

    /// The metrics table of `docs/metrics.md` lists every metric of the catalog (the
    /// `metrics` test checks the same of every family a real scrape shows).
    #[test]
    fn the_metrics_page_lists_every_metric() {
        let page = include_str!("../../docs/metrics.md");
        let mut missing: Vec<String> = CATALOG
            .iter()
            .map(|(_, d)| d.full_name())
            .chain([SEND_ERRORS.full_name()])
            .filter(|n| !page.contains(&format!("| `{n}` |")))
            .collect();
        missing.dedup();
        assert!(
            missing.is_empty(),
            "docs/metrics.md's Metrics table lacks: {missing:?}"
        );
    }

    #[test]
    fn names_carry_their_unit_and_counters_end_in_total() {
        assert_eq!(
            describe("oldest_unacked_message_age_ms")
                .unwrap()
                .full_name(),
            "pubsub_connector_oldest_unacked_message_age_seconds"
        );
        assert_eq!(
            describe("bytes_sent").unwrap().full_name(),
            "pubsub_connector_sent_bytes_total"
        );
        assert_eq!(
            describe("checkpoint_lag_ms").unwrap().full_name(),
            "pubsub_connector_checkpoint_lag_ms"
        );
        assert_eq!(
            describe("messages_acked").unwrap().full_name(),
            "pubsub_connector_messages_acked_total"
        );
    }
}
