//! Typed connection profile and table config of the Pub/Sub connector (SPEC 7), with
//! JSON Schemas derived by `schemars` for an engine UI. Depends on nothing of ours.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the connector reaches Pub/Sub. `Debug` redacts the key file path.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Authentication {
    /// Application default credentials (environment, gcloud, metadata server).
    #[schemars(title = "Application default credentials")]
    ApplicationDefault,
    /// A service account key file (JSON), read where the connector runs. Its path and
    /// contents never appear in an error, log line or reply (SPEC 5.3, 10).
    #[schemars(title = "Service account key file")]
    ServiceAccountKeyFile {
        /// Path of the key file on the machine that runs the job.
        #[schemars(
            title = "Key file path",
            example = "/etc/pubsub/key.json",
            extend("writeOnly" = true, "x-sensitive" = true)
        )]
        path: String,
    },
    /// A local Pub/Sub emulator over plaintext, without credentials.
    #[schemars(title = "Emulator")]
    Emulator {
        /// `host:port` of the emulator; port 1..65535.
        #[schemars(title = "Emulator endpoint", example = "localhost:8085")]
        endpoint: String,
    },
}

impl Default for Authentication {
    fn default() -> Self {
        Authentication::ApplicationDefault
    }
}

/// Checks an emulator endpoint: `host:port`, port 1..65535, a host without `/` or spaces
/// (SPEC 5.3). The error is the reason, for the caller to name its option.
pub fn check_endpoint(v: &str) -> Result<(), &'static str> {
    let (host, port) = v.rsplit_once(':').ok_or("must be host:port")?;
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return Err("must be host:port with a host name or address");
    }
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(()),
        _ => Err("port must be 1..65535"),
    }
}

/// Never prints the key file path (SPEC 10): a profile may end up in a `{:?}`.
impl std::fmt::Debug for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Authentication::ApplicationDefault => f.write_str("ApplicationDefault"),
            Authentication::ServiceAccountKeyFile { .. } => f
                .debug_struct("ServiceAccountKeyFile")
                .field("path", &format_args!("<redacted>"))
                .finish(),
            Authentication::Emulator { endpoint } => f
                .debug_struct("Emulator")
                .field("endpoint", endpoint)
                .finish(),
        }
    }
}

/// A Pub/Sub connection profile: project and authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "Pub/Sub connection profile")]
pub struct PubSubProfile {
    /// Google Cloud project id that owns the topics and subscriptions.
    #[schemars(title = "Project", example = "my-project")]
    pub project: String,
    /// How the connector reaches Pub/Sub: application default credentials, a service
    /// account key file, or an emulator endpoint.
    #[schemars(title = "Authentication")]
    pub authentication: Authentication,
}

/// Source table config (SPEC 5). Durations are milliseconds, sizes bytes. Every field
/// maps 1:1 onto a setter of the connector's `PubSubSource` / `PubSubSubscriberOptions` /
/// `SubscriptionCreateOptions` builders, whose `build()` holds the rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(title = "Pub/Sub source")]
pub struct SourceConfig {
    /// Subscriptions to read, each optionally with the options to create it when missing.
    /// At least one; ids must be distinct.
    #[schemars(title = "Subscriptions", length(min = 1))]
    pub subscriptions: Vec<SubscriptionConfig>,
    /// Where a job's first start begins reading. Default: continue from the subscription.
    #[serde(default)]
    #[schemars(title = "Start position")]
    pub start_position: StartPosition,
    /// `none` (default) or `per-key`: keep each ordering key's order through the pipeline.
    #[serde(default)]
    #[schemars(title = "Ordering mode")]
    pub ordering_mode: OrderingMode,
    /// What to do with a message that cannot be decoded (SPEC 5.3). Default `fail`.
    #[serde(default)]
    #[schemars(title = "Deserialization failure policy")]
    pub deserialization_failure_policy: DeserializationFailurePolicy,
    /// Flow control, leases, buffers and timeouts of the subscribers (SPEC 5.3).
    #[serde(default)]
    #[schemars(title = "Subscriber options")]
    pub subscriber: SubscriberOptionsConfig,
}

impl SourceConfig {
    /// A config reading `subscription` (an id) with every default of SPEC 5.3.
    pub fn new(subscription: impl Into<String>) -> Self {
        SourceConfig {
            subscriptions: vec![SubscriptionConfig {
                id: subscription.into(),
                create: None,
            }],
            start_position: StartPosition::default(),
            ordering_mode: OrderingMode::default(),
            deserialization_failure_policy: DeserializationFailurePolicy::default(),
            subscriber: SubscriberOptionsConfig::default(),
        }
    }
}

/// One subscription of a source table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionConfig {
    /// Subscription id (not the full resource name).
    #[schemars(title = "Subscription", example = "bids-sub", extend("format" = "autocomplete", "x-autocomplete" = "subscriptions"))]
    pub id: String,
    /// Create the subscription with these options when it does not exist (never updated).
    /// Unset: a missing subscription fails the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Create when missing")]
    pub create: Option<SubscriptionCreateConfig>,
}

/// How to create a missing subscription (SPEC 5.5). Applied at creation only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionCreateConfig {
    /// Topic id in the profile's project, or a full `projects/P/topics/T` name.
    #[schemars(title = "Topic", example = &"bids", extend("format" = "autocomplete", "x-autocomplete" = "topics"))]
    pub topic: String,
    /// Initial ack deadline (ms, a whole number of seconds, 10 s..600 s). Unset: Pub/Sub's
    /// default (10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Ack deadline (ms)")]
    pub ack_deadline_ms: Option<u64>,
    /// Deliver messages of one ordering key in order. Default false; fixed at creation.
    #[serde(default)]
    #[schemars(title = "Message ordering")]
    pub message_ordering: bool,
    /// How long unacknowledged messages are kept (ms, 10 min..31 days). Unset: 7 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Message retention (ms)")]
    pub message_retention_ms: Option<u64>,
    /// Keep acknowledged messages for the retention period, so a backwards seek replays
    /// them. Default false.
    #[serde(default)]
    #[schemars(title = "Retain acked messages")]
    pub retain_acked_messages: bool,
    /// When an inactive subscription is deleted. Unset: Pub/Sub's default (31 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Expiration")]
    pub expiration: Option<Expiration>,
    /// Forward a message to a dead-letter topic after this many deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Dead-letter policy")]
    pub dead_letter: Option<DeadLetterConfig>,
    /// Pub/Sub filter expression; fixed at creation. (The emulator does not apply filters.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Filter", example = "attributes.kind = \"bid\"")]
    pub filter: Option<String>,
}

/// A subscription's expiration policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Expiration {
    /// Deleted after this long without activity (ms, at least 1 day, whole seconds).
    #[schemars(title = "After a time without activity")]
    Ttl {
        /// Time without activity before deletion, in milliseconds (at least 1 day).
        #[schemars(title = "TTL (ms)")]
        ttl_ms: u64,
    },
    /// Never deleted for inactivity.
    #[schemars(title = "Never")]
    Never,
}

/// A subscription's dead-letter policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterConfig {
    /// Topic id in the profile's project, or a full `projects/P/topics/T` name. It must exist.
    #[schemars(title = "Dead-letter topic", example = "bids-dead", extend("format" = "autocomplete", "x-autocomplete" = "topics"))]
    pub topic: String,
    /// Deliveries before a message is forwarded (5..100).
    #[schemars(title = "Max delivery attempts", range(min = 5, max = 100))]
    pub max_delivery_attempts: u32,
}

/// Where a job's first start begins reading (SPEC 5.4). Anything but
/// `continue-from-subscription` seeks the subscription, which moves it for every consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum StartPosition {
    /// Wherever the subscription already is; no seek.
    #[default]
    #[schemars(title = "Continue from the subscription")]
    ContinueFromSubscription,
    /// The oldest message the subscription retains.
    #[schemars(title = "Earliest retained")]
    EarliestRetained,
    /// Only messages published after the job's first start (one instant for all).
    #[schemars(title = "Latest")]
    Latest,
    /// Messages published at or after this instant.
    #[schemars(title = "From a timestamp")]
    Timestamp {
        /// Unix epoch milliseconds.
        #[schemars(title = "Timestamp (epoch ms)", example = 1764460800000i64)]
        millis: i64,
    },
}

/// Whether the source keeps each ordering key's order (SPEC 5.3, 5.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OrderingMode {
    /// No order is kept across messages.
    #[default]
    #[schemars(title = "None")]
    None,
    /// Rows of one ordering key keep their publish order through the pipeline; needs
    /// subscriptions with message ordering and one stream per split.
    #[schemars(title = "Per key")]
    PerKey,
}

/// Subscriber options (SPEC 5.3; the reference connector's `PubSubSubscriberOptions`).
/// Limits are per source subtask. Durations are milliseconds, sizes bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriberOptionsConfig {
    /// Messages held unacknowledged per subtask (everything received since the last
    /// completed checkpoint); reading pauses at the limit. Size it >= peak msg/s x
    /// checkpoint interval. Unset (the default): sized at start from the checkpoint
    /// interval and the parallel pull count so the source does not throttle (10,000
    /// msg/s per stream x 2.5 checkpoint intervals, at least 1000). A held message costs
    /// ~540 bytes of memory besides its payload (measured).
    #[schemars(title = "Max outstanding messages", range(min = 1))]
    pub max_outstanding_messages: Option<u64>,
    /// Payload bytes held unacknowledged per subtask; reading pauses at the limit.
    /// Default 100 MB.
    #[schemars(title = "Max outstanding bytes", range(min = 1))]
    pub max_outstanding_bytes: u64,
    /// Hard cap on messages held per subtask: a delivery that would cross it is nacked
    /// before it is tracked, and reading pauses. Unset: no cap beyond flow control.
    #[schemars(title = "Subscriber buffer max messages", range(min = 1))]
    pub subscriber_buffer_max_messages: Option<u64>,
    /// Hard cap on payload bytes held per subtask, as above. Unset: none.
    #[schemars(title = "Subscriber buffer max bytes", range(min = 1))]
    pub subscriber_buffer_max_bytes: Option<u64>,
    /// A split holding more messages than this while its rows cannot be emitted is
    /// parked: its messages are nacked and its streams replaced. Unset: 2 x the effective
    /// max outstanding messages.
    #[schemars(title = "Paused split buffer max messages", range(min = 1))]
    pub paused_split_buffer_max_messages: Option<u64>,
    /// As above, in payload bytes. Unset: 2 x max outstanding bytes.
    #[schemars(title = "Paused split buffer max bytes", range(min = 1))]
    pub paused_split_buffer_max_bytes: Option<u64>,
    /// StreamingPull streams per split. Default 1; must be 1 with ordering `per-key`.
    #[schemars(title = "Parallel pull count", range(min = 1))]
    pub parallel_pull_count: u32,
    /// How long the client keeps extending a held message's lease (ms). Default 1 h;
    /// 0 disables extension; must exceed the checkpoint interval.
    #[schemars(title = "Max ack extension period (ms)")]
    pub max_ack_extension_period_ms: u64,
    /// Shortest lease extension (ms, 10 s..600 s; the client's range). Unset: 10 s.
    #[schemars(title = "Min duration per ack extension (ms)")]
    pub min_duration_per_ack_extension_ms: Option<u64>,
    /// Length of each lease extension and the stream's ack deadline (ms, 10 s..600 s).
    /// Unset: the client's default (60 s). Also bounds how soon messages held by a crashed
    /// process are redelivered.
    #[schemars(title = "Max duration per ack extension (ms)")]
    pub max_duration_per_ack_extension_ms: Option<u64>,
    /// Wait this long (ms) at each commit for the server to confirm the acks (exactly-once
    /// subscriptions); the job fails when they are not confirmed in time. Unset: acks are
    /// fire and forget.
    #[schemars(title = "Await ack confirmation (ms)", range(min = 1))]
    pub await_ack_confirmation_ms: Option<u64>,
    /// Bounds the whole close of a subtask, all its streams together (ms). Default 5 s.
    #[schemars(title = "Shutdown timeout (ms)", range(min = 1))]
    pub shutdown_timeout_ms: u64,
    /// Messages taken from a split's streams in one go before the others are served.
    /// Default 1000.
    #[schemars(title = "Max records per fetch", range(min = 1))]
    pub max_records_per_fetch: u32,
    /// A subtask holding unacknowledged messages with no completed checkpoint after this
    /// long (ms) fails the job (checkpointing off or too slow). Default 10 min; 0 disables.
    #[schemars(title = "First checkpoint timeout (ms)")]
    pub first_checkpoint_timeout_ms: u64,
    /// Messages per second per subtask at most. Unset: no limit.
    #[schemars(title = "Rate limit (messages/s)", range(min = 1))]
    pub rate_limit_messages_per_second: Option<u64>,
}

impl Default for SubscriberOptionsConfig {
    /// The defaults of SPEC 5.3.
    fn default() -> Self {
        SubscriberOptionsConfig {
            max_outstanding_messages: None,
            max_outstanding_bytes: 100_000_000,
            subscriber_buffer_max_messages: None,
            subscriber_buffer_max_bytes: None,
            paused_split_buffer_max_messages: None,
            paused_split_buffer_max_bytes: None,
            parallel_pull_count: 1,
            max_ack_extension_period_ms: 3_600_000,
            min_duration_per_ack_extension_ms: None,
            max_duration_per_ack_extension_ms: None,
            await_ack_confirmation_ms: None,
            shutdown_timeout_ms: 5_000,
            max_records_per_fetch: 1000,
            first_checkpoint_timeout_ms: 600_000,
            rate_limit_messages_per_second: None,
        }
    }
}

/// What the source does with a message its format cannot decode (SPEC 5.3,
/// `scan.deserialization-failure-policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeserializationFailurePolicy {
    /// The job fails naming the message id and the reason; the message is not
    /// acknowledged (it is nacked, so it is redelivered to the next run).
    #[default]
    #[schemars(title = "Fail the job")]
    Fail,
    /// The message is acknowledged with the next checkpoint, like a message that yielded
    /// zero rows, and counted in `messages_dropped`. Its data is lost.
    #[schemars(title = "Drop (acknowledge) the message")]
    Drop,
    /// The message is nacked at once and counted in `messages_nacked_bad`; Pub/Sub
    /// redelivers it until the subscription's dead-letter policy forwards it. Requires a
    /// dead-letter policy on the subscription (checked at start).
    #[schemars(title = "Nack the message (dead-letter it)")]
    Nack,
}

impl DeserializationFailurePolicy {
    /// The option value: `fail`, `drop` or `nack`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeserializationFailurePolicy::Fail => "fail",
            DeserializationFailurePolicy::Drop => "drop",
            DeserializationFailurePolicy::Nack => "nack",
        }
    }
}

/// Sink options (SPEC 6): publisher batching.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkConfig {
    /// Topic id (not the full resource name) to publish to. It must exist.
    #[schemars(title = "Topic", example = "bids-out", extend("format" = "autocomplete"))]
    pub topic: String,
    /// Messages per publish request.
    #[schemars(title = "Batch element count", range(min = 1, max = 1000))]
    pub batching_element_count_threshold: u32,
    /// Bytes per publish request.
    #[schemars(title = "Batch request bytes", range(min = 1, max = 10_000_000))]
    pub batching_request_byte_threshold: u32,
    /// How long a message may wait for its batch to fill (ms).
    #[schemars(title = "Batch delay (ms)")]
    pub batching_delay_threshold_ms: u64,
    /// Publishes awaiting their result per subtask; writing pauses at the limit.
    #[schemars(title = "Max in-flight messages", range(min = 1))]
    pub max_in_flight_messages: u64,
}

impl SinkConfig {
    /// A config with the client's batching defaults (100 messages, 1 MB, 10 ms).
    pub fn new(topic: impl Into<String>) -> Self {
        SinkConfig {
            topic: topic.into(),
            batching_element_count_threshold: 100,
            batching_request_byte_threshold: 1_000_000,
            batching_delay_threshold_ms: 10,
            max_in_flight_messages: 1000,
        }
    }
}

/// A Pub/Sub table: read a subscription or write a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[schemars(title = "Pub/Sub table")]
pub enum PubSubTable {
    Source(SourceConfig),
    Sink(SinkConfig),
}

/// The JSON Schema of the profile, pretty-printed.
pub fn profile_schema() -> String {
    serde_json::to_string_pretty(&schemars::schema_for!(PubSubProfile)).expect("schema serializes")
}

/// The JSON Schema of the table config, pretty-printed.
pub fn table_schema() -> String {
    serde_json::to_string_pretty(&schemars::schema_for!(PubSubTable)).expect("schema serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every property of every object in `schema`, with its path.
    fn properties<'a>(
        path: String,
        v: &'a serde_json::Value,
        out: &mut Vec<(String, &'a serde_json::Value)>,
    ) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Object(props)) = m.get("properties") {
                    for (k, p) in props {
                        out.push((format!("{path}.{k}"), p));
                    }
                }
                for (k, child) in m {
                    properties(format!("{path}/{k}"), child, out);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    properties(format!("{path}[{i}]"), child, out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_table_and_profile_property_has_a_title_and_a_description() {
        for schema in [table_schema(), profile_schema()] {
            let v: serde_json::Value = serde_json::from_str(&schema).unwrap();
            let mut props = Vec::new();
            properties(String::new(), &v, &mut props);
            assert!(
                props.len() > 20 || schema.contains("profile"),
                "{}",
                props.len()
            );
            for (path, p) in props {
                // A property that only refers to a definition is described there; an enum's
                // tag (`"const"`) is described by its variant.
                if (p.get("$ref").is_some() && p.as_object().is_some_and(|o| o.len() == 1))
                    || p.get("const").is_some()
                {
                    continue;
                }
                assert!(p.get("title").is_some(), "{path} has no title: {p}");
                assert!(
                    p.get("description").is_some(),
                    "{path} has no description: {p}"
                );
            }
        }
    }

    #[test]
    fn the_table_schema_lists_every_subscriber_option() {
        let s = table_schema();
        for field in [
            "maxOutstandingMessages",
            "maxOutstandingBytes",
            "subscriberBufferMaxMessages",
            "subscriberBufferMaxBytes",
            "pausedSplitBufferMaxMessages",
            "pausedSplitBufferMaxBytes",
            "parallelPullCount",
            "maxAckExtensionPeriodMs",
            "minDurationPerAckExtensionMs",
            "maxDurationPerAckExtensionMs",
            "awaitAckConfirmationMs",
            "shutdownTimeoutMs",
            "maxRecordsPerFetch",
            "firstCheckpointTimeoutMs",
            "rateLimitMessagesPerSecond",
            "startPosition",
            "orderingMode",
            "ackDeadlineMs",
            "messageOrdering",
            "messageRetentionMs",
            "retainAckedMessages",
            "expiration",
            "deadLetter",
            "maxDeliveryAttempts",
            "filter",
        ] {
            assert!(s.contains(&format!("\"{field}\"")), "{field} missing");
        }
    }
}
