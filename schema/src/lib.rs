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
    #[schemars(title = "Authentication")]
    pub authentication: Authentication,
}

/// Source options (SPEC 5.3). Durations are milliseconds, sizes bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceConfig {
    /// Subscription id (not the full resource name) to read.
    #[schemars(title = "Subscription", example = "bids-sub", extend("format" = "autocomplete"))]
    pub subscription: String,
    /// Messages held unacknowledged per subtask (everything received since the last
    /// completed checkpoint); reading pauses at the limit. Size it >= peak msg/s x
    /// checkpoint interval. Unset (the default): sized at start from the checkpoint
    /// interval and the parallel pull count so the source does not throttle
    /// (10,000 msg/s per stream x 2.5 checkpoint intervals, at least 1000; 250,000 per
    /// stream at a 10 s interval). A held message costs ~540 bytes of memory besides its
    /// payload (measured); the bytes limit stays the memory bound.
    #[schemars(title = "Max outstanding messages", range(min = 1))]
    pub max_outstanding_messages: Option<u64>,
    /// Payload bytes held unacknowledged per subtask; reading pauses at the limit.
    #[schemars(title = "Max outstanding bytes", range(min = 1))]
    pub max_outstanding_bytes: u64,
    /// StreamingPull streams per subtask.
    #[schemars(title = "Parallel pull count", range(min = 1))]
    pub parallel_pull_count: u32,
    /// How long the client keeps extending the lease of a held message (ms). Must exceed
    /// the checkpoint interval.
    #[schemars(title = "Max ack extension period (ms)")]
    pub max_ack_extension_period_ms: u64,
    /// Length of each lease extension, and the stream's ack deadline (ms, 10 s..600 s);
    /// unset: the client's default (60 s). Also bounds how soon messages held by a crashed
    /// process are redelivered.
    #[schemars(title = "Max duration per ack extension (ms)")]
    pub max_duration_per_ack_extension_ms: Option<u64>,
    /// What to do with a message that cannot be decoded (SPEC 5.3). Default `fail`.
    #[serde(default)]
    #[schemars(title = "Deserialization failure policy")]
    pub deserialization_failure_policy: DeserializationFailurePolicy,
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

impl SourceConfig {
    /// A config with the SPEC 5.3 defaults.
    pub fn new(subscription: impl Into<String>) -> Self {
        SourceConfig {
            subscription: subscription.into(),
            max_outstanding_messages: None,
            max_outstanding_bytes: 100_000_000,
            parallel_pull_count: 1,
            max_ack_extension_period_ms: 3_600_000,
            max_duration_per_ack_extension_ms: None,
            deserialization_failure_policy: DeserializationFailurePolicy::Fail,
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
