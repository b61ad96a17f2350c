//! Sink counters and gauges (SPEC 6), per subtask; the runtime sums them by name.

use pubsub_engine_spi::{Counter, Gauge, OperatorContext, ROWS_WRITTEN};

/// Bytes of message data Pub/Sub confirmed.
pub const BYTES_SENT: &str = "bytes_sent";
/// Failed publishes, one counter per gRPC code: `send_errors_NOT_FOUND`, ...
pub const SEND_ERRORS_PREFIX: &str = "send_errors_";
/// Rows the failure handler `log-and-drop` dropped.
pub const RECORDS_SKIPPED: &str = "records_skipped";
/// Rows routed to the failure handler (encoder rejections and messages rejected alone).
pub const RECORDS_REJECTED: &str = "records_rejected";
/// Publishes awaiting their result (gauge, messages).
pub const IN_FLIGHT_MESSAGES: &str = "in_flight_messages";
/// Bytes of publishes awaiting their result (gauge).
pub const IN_FLIGHT_BYTES: &str = "in_flight_bytes";
/// Messages waiting for a repair (topic creation, republish) (gauge).
pub const PARKED_MESSAGES: &str = "parked_messages";
/// Topics the sink created.
pub const TOPICS_CREATED: &str = "topics_created";

/// The sink subtask's metrics.
#[derive(Clone, Default)]
pub struct SinkMetrics {
    /// Records sent: rows Pub/Sub confirmed (`rows_written`).
    pub sent: Counter,
    pub bytes_sent: Counter,
    pub skipped: Counter,
    pub rejected: Counter,
    pub in_flight: Gauge,
    pub in_flight_bytes: Gauge,
    pub parked: Gauge,
    pub topics_created: Counter,
}

impl SinkMetrics {
    pub fn new(ctx: &OperatorContext) -> Self {
        SinkMetrics {
            sent: ctx.counter(ROWS_WRITTEN),
            bytes_sent: ctx.counter(BYTES_SENT),
            skipped: ctx.counter(RECORDS_SKIPPED),
            rejected: ctx.counter(RECORDS_REJECTED),
            in_flight: ctx.gauge(IN_FLIGHT_MESSAGES),
            in_flight_bytes: ctx.gauge(IN_FLIGHT_BYTES),
            parked: ctx.gauge(PARKED_MESSAGES),
            topics_created: ctx.counter(TOPICS_CREATED),
        }
    }
}
