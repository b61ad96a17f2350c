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
    /// Messages of one source subtask that failed in a row (did not decode, or their rows
    /// failed in SQL) before the job fails under a policy other than `fail`: a systematic
    /// fault (a column type that does not match the data) rather than bad messages. Every
    /// message whose rows went out ends the run. -1: no limit. Default 100.
    #[serde(default = "default_max_consecutive_failures")]
    #[schemars(title = "Max consecutive failures", range(min = -1))]
    pub max_consecutive_failures: i64,
    /// Flow control, leases, buffers and timeouts of the subscribers (SPEC 5.3). Default:
    /// the default of each option.
    #[serde(default)]
    #[schemars(title = "Subscriber options")]
    pub subscriber: SubscriberOptionsConfig,
    /// The dead-letter queue, required with failure policy `dead-letter`. Default: none.
    #[serde(default)]
    #[schemars(title = "Dead-letter queue")]
    pub dead_letter: Option<DeadLetterQueueConfig>,
    /// Drop copies of a record by an attribute holding its id (e.g. what an upstream
    /// pipeline's `sink.record-id-attribute` stamps). Default: none (no deduplication).
    #[serde(default)]
    #[schemars(title = "Deduplication")]
    pub dedup: Option<DedupConfig>,
    /// The attribute holding each message's event time, as RFC 3339 text or epoch
    /// milliseconds (Beam's `timestampAttribute`); a message without it, or with a value
    /// that is neither, fails under the failure policy. Default: none (event time is the
    /// publish time).
    #[serde(default)]
    #[schemars(
        title = "Event-time attribute",
        example = "event-time",
        length(min = 1, max = 256)
    )]
    pub event_time_attribute: Option<String>,
    /// Watermark alignment (Flink's `scan.watermark.alignment.*`): a split whose watermark
    /// runs more than the drift ahead of its group's is paused until the group catches
    /// up. Default: none.
    #[serde(default)]
    #[schemars(title = "Watermark alignment")]
    pub alignment: Option<AlignmentConfig>,
}

/// A source's watermark alignment group (issue 32; decision 0042).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlignmentConfig {
    /// The group's name: every source table of a pipeline naming it is aligned with the
    /// others (Flink's `scan.watermark.alignment.group`).
    #[schemars(title = "Group", example = "page-events", length(min = 1, max = 256))]
    pub group: String,
    /// How far (ms) a split's watermark may run ahead of the group's lowest before it is
    /// paused.
    #[schemars(title = "Max drift (ms)", range(min = 1))]
    pub max_drift_ms: u64,
    /// How often (ms) a process sends its members' watermarks to the leader, which
    /// broadcasts the group's. Default 1000.
    #[serde(default = "default_alignment_update_interval_ms")]
    #[schemars(title = "Update interval (ms)", range(min = 50))]
    pub update_interval_ms: u64,
}

/// The default of `AlignmentConfig::update_interval_ms` (Flink's).
pub const DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS: u64 = 1_000;

fn default_alignment_update_interval_ms() -> u64 {
    DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS
}

/// Deduplication by a record id attribute (docs/guarantees.md): a
/// message whose attribute value was already seen within the window is acknowledged
/// with the next checkpoint and yields no row. The ids seen are checkpointed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DedupConfig {
    /// The attribute holding each record's id. Messages without it pass through
    /// (counted as `messages_without_dedup_attribute`).
    #[schemars(
        title = "Record id attribute",
        example = "record-id",
        length(min = 1, max = 256)
    )]
    pub attribute: String,
    /// How long an id is remembered, in milliseconds of publish time: a copy published
    /// up to this long after the newest message seen is dropped. Must cover how long an
    /// upstream replay can take to republish (its checkpoint interval x 3 plus its
    /// restart time). Default 600,000 (10 minutes).
    #[serde(default = "default_dedup_window_ms")]
    #[schemars(title = "Window (ms)", range(min = 1000))]
    pub window_ms: u64,
    /// The most ids one process remembers (about 100 bytes of memory and 32 bytes of
    /// checkpoint each). Reaching it fails the job, naming this option and the window:
    /// it never forgets an id early. Default 1,000,000.
    #[serde(default = "default_dedup_max_ids")]
    #[schemars(title = "Max ids", range(min = 1))]
    pub max_ids: u64,
}

/// The default of `SourceConfig::max_consecutive_failures`.
pub const DEFAULT_MAX_CONSECUTIVE_FAILURES: i64 = 100;

fn default_max_consecutive_failures() -> i64 {
    DEFAULT_MAX_CONSECUTIVE_FAILURES
}

fn default_dedup_window_ms() -> u64 {
    600_000
}

fn default_dedup_max_ids() -> u64 {
    1_000_000
}

impl DedupConfig {
    /// Deduplication on `attribute` with the default window and bound.
    pub fn new(attribute: impl Into<String>) -> Self {
        DedupConfig {
            attribute: attribute.into(),
            window_ms: default_dedup_window_ms(),
            max_ids: default_dedup_max_ids(),
        }
    }
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
            max_consecutive_failures: default_max_consecutive_failures(),
            subscriber: SubscriberOptionsConfig::default(),
            dead_letter: None,
            dedup: None,
            event_time_attribute: None,
            alignment: None,
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
    /// Forward a message to a dead-letter topic after this many deliveries. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Dead-letter policy")]
    pub dead_letter: Option<DeadLetterConfig>,
    /// Pub/Sub filter expression; fixed at creation. (The emulator does not apply filters.)
    /// Unset: every message.
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
    /// A split that delivered nothing for this long (ms) stops holding the subtask's
    /// watermark back. Default 5 min; 0: never (a silent split holds it back).
    #[serde(default = "default_watermark_idle_timeout_ms")]
    #[schemars(title = "Watermark idle timeout (ms)")]
    pub watermark_idle_timeout_ms: u64,
    /// How far behind the greatest event time seen a split's watermark stays (ms), when
    /// event time is the publish time or an attribute (a `WATERMARK FOR` column carries its
    /// own). Default 1 s.
    #[serde(default)]
    #[schemars(title = "Watermark out-of-orderness (ms)")]
    pub watermark_out_of_orderness_ms: Option<u64>,
    /// Hold the watermark behind the subscription's oldest unacknowledged message, read
    /// from a snapshot's expire time at every probe interval (decision 0047). Needs
    /// `pubsub.snapshots.create` (roles/pubsub.editor); without it the job WARNs once and
    /// runs on the newest-less-bound rule alone. Default on.
    #[serde(default = "default_true")]
    #[schemars(title = "Watermark backlog probe")]
    pub watermark_backlog_probe: bool,
    /// How often (ms) the backlog probe reads the oldest unacknowledged message (two
    /// admin calls per subscription). At least 100. Default 2000.
    #[serde(default = "default_backlog_probe_interval_ms")]
    #[schemars(title = "Watermark backlog probe interval (ms)", range(min = 100))]
    pub watermark_backlog_probe_interval_ms: u64,
}

fn default_true() -> bool {
    true
}

/// The default of `watermark_backlog_probe_interval_ms` (decision 0047).
pub const DEFAULT_BACKLOG_PROBE_INTERVAL_MS: u64 = 2_000;

fn default_backlog_probe_interval_ms() -> u64 {
    DEFAULT_BACKLOG_PROBE_INTERVAL_MS
}

fn default_watermark_idle_timeout_ms() -> u64 {
    300_000
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
            watermark_idle_timeout_ms: default_watermark_idle_timeout_ms(),
            watermark_out_of_orderness_ms: None,
            watermark_backlog_probe: true,
            watermark_backlog_probe_interval_ms: DEFAULT_BACKLOG_PROBE_INTERVAL_MS,
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
    /// The message's payload is published to the table's dead-letter queue (SPEC 6.1),
    /// which is flushed before the checkpoint completes; the message is then acknowledged
    /// with it. Counted in `dead_letters_published`.
    #[schemars(title = "Publish to the dead-letter queue")]
    DeadLetter,
}

impl DeserializationFailurePolicy {
    /// The option value: `fail`, `drop`, `nack` or `dead-letter`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeserializationFailurePolicy::Fail => "fail",
            DeserializationFailurePolicy::Drop => "drop",
            DeserializationFailurePolicy::Nack => "nack",
            DeserializationFailurePolicy::DeadLetter => "dead-letter",
        }
    }
}

/// Sink table config (SPEC 6). Durations are milliseconds, sizes bytes. Every field maps
/// onto a setter of the connector's `PubSubSink` / `PublisherOptions` /
/// `TopicCreateOptions` / `PubSubDeadLetterQueue` builders, whose `build()` holds the rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(title = "Pub/Sub sink")]
pub struct SinkConfig {
    /// Topic id (not the full resource name) to publish to.
    #[schemars(
        title = "Topic",
        example = "bids-out",
        extend("format" = "autocomplete", "x-autocomplete" = "topics")
    )]
    pub topic: String,
    /// `create-if-needed` (default): a missing topic is created with `topicCreate`, at
    /// start and whenever a publish finds it gone; a topic recreated mid-run is published
    /// to only once it has a subscription (Pub/Sub discards what a topic without one
    /// receives), else the checkpoint fails; `create-never`: a missing topic fails.
    #[serde(default)]
    #[schemars(title = "Create disposition")]
    pub create_disposition: CreateDisposition,
    /// How a topic this sink creates is configured (only with `create-if-needed`).
    /// Default: Pub/Sub's defaults.
    #[serde(default)]
    #[schemars(title = "Topic create options")]
    pub topic_create: TopicCreateConfig,
    /// Batching, retry, ordering, in-flight caps and timeouts of the publisher. Default:
    /// the default of each option.
    #[serde(default)]
    #[schemars(title = "Publisher options")]
    pub publisher: PublisherConfig,
    /// What happens to a row the encoder rejects or a message Pub/Sub rejects on its own
    /// (over a limit, INVALID_ARGUMENT alone). Default `fail`.
    #[serde(default)]
    #[schemars(title = "Failure handler")]
    pub failure_handler: FailureHandler,
    /// The dead-letter queue, required with failure handler `dead-letter`. Default: none.
    #[serde(default)]
    #[schemars(title = "Dead-letter queue")]
    pub dead_letter: Option<DeadLetterQueueConfig>,
    /// Stamp every published message with this attribute, holding the row's record id:
    /// the same on every replay of the row, so a consumer deduplicating on it (e.g. a
    /// source with `scan.dedup.attribute`) sees each record once. Derived from the source
    /// message (or the upstream record id its source deduplicates on), the query and the
    /// row's position (docs/guarantees.md). An attribute key: at most
    /// 256 bytes, not starting with `goog`. Default: none.
    #[serde(default)]
    #[schemars(
        title = "Record id attribute",
        example = "record-id",
        length(min = 1, max = 256)
    )]
    pub record_id_attribute: Option<String>,
}

impl SinkConfig {
    /// A config publishing to `topic` (an id) with every default of SPEC 6.
    pub fn new(topic: impl Into<String>) -> Self {
        SinkConfig {
            topic: topic.into(),
            create_disposition: CreateDisposition::default(),
            topic_create: TopicCreateConfig::default(),
            publisher: PublisherConfig::default(),
            failure_handler: FailureHandler::default(),
            dead_letter: None,
            record_id_attribute: None,
        }
    }
}

/// Whether a sink creates its topic (SPEC 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CreateDisposition {
    /// Create the topic when it is missing (at start or mid-run), then publish.
    #[default]
    #[schemars(title = "Create if needed")]
    CreateIfNeeded,
    /// Never create: a missing topic fails the job (at start) or the checkpoint.
    #[schemars(title = "Create never")]
    CreateNever,
}

impl CreateDisposition {
    /// The option value: `create-if-needed` or `create-never`.
    pub fn as_str(self) -> &'static str {
        match self {
            CreateDisposition::CreateIfNeeded => "create-if-needed",
            CreateDisposition::CreateNever => "create-never",
        }
    }
}

/// Settings of a topic the sink creates (SPEC 6); unset fields keep Pub/Sub's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicCreateConfig {
    /// How long the topic keeps messages (ms), 10 minutes to 31 days. Unset: not retained.
    #[serde(default)]
    #[schemars(
        title = "Message retention (ms)",
        range(min = 600_000, max = 2_678_400_000u64)
    )]
    pub message_retention_ms: Option<u64>,
    /// Cloud KMS key that encrypts the topic's messages:
    /// `projects/P/locations/L/keyRings/R/cryptoKeys/K`. Unset: Google-managed encryption.
    #[serde(default)]
    #[schemars(
        title = "KMS key name",
        example = "projects/p/locations/us/keyRings/r/cryptoKeys/k"
    )]
    pub kms_key_name: Option<String>,
    /// Regions where messages may be stored, e.g. `europe-west1`. Empty: any region.
    #[serde(default)]
    #[schemars(title = "Allowed persistence regions", example = "europe-west1")]
    pub allowed_persistence_regions: Vec<String>,
    /// Also restrict where messages travel in transit to the allowed regions (needs
    /// allowed persistence regions). Default false.
    #[serde(default)]
    #[schemars(title = "Enforce in transit")]
    pub enforce_in_transit: bool,
}

impl TopicCreateConfig {
    /// Whether any create option is set.
    pub fn is_set(&self) -> bool {
        *self != TopicCreateConfig::default()
    }
}

/// Publisher options (SPEC 6). Durations in ms, sizes in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PublisherConfig {
    /// Messages per publish request, 1..1000 (Pub/Sub's limit). Default 100.
    #[schemars(title = "Batch element count", range(min = 1, max = 1000))]
    pub batching_element_count_threshold: u32,
    /// Payload bytes per publish request (the request's framing comes on top and stays
    /// within Pub/Sub's 10 MB). Default 1000000.
    #[schemars(title = "Batch request bytes", range(min = 1, max = 10_000_000))]
    pub batching_request_byte_threshold: u32,
    /// How long a message may wait for its batch to fill (ms). Default 10.
    #[schemars(title = "Batch delay (ms)")]
    pub batching_delay_threshold_ms: u64,
    /// How the client retries a failed publish request. Default: the client's retry
    /// (retryable codes for 600 s, backoff 1 s doubling to 60 s).
    #[schemars(title = "Retry")]
    pub retry: RetryConfig,
    /// Keep each ordering key's order (rows carrying an `ordering-key` column value need
    /// it). Default false.
    #[schemars(title = "Message ordering")]
    pub message_ordering: bool,
    /// Publishes awaiting their result per subtask; writing waits at the cap. Default 1000.
    #[schemars(title = "Max in-flight messages", range(min = 1))]
    pub max_in_flight_messages: u64,
    /// Bytes of publishes awaiting their result per subtask. Default 64 MiB.
    #[schemars(title = "Max in-flight bytes", range(min = 1))]
    pub max_in_flight_bytes: u64,
    /// Fail when no publish completes for this long while some are in flight (ms); every
    /// completion restarts it; a warning comes at a tenth. Default 600000.
    #[schemars(title = "Publish progress timeout (ms)", range(min = 1))]
    pub publish_progress_timeout_ms: u64,
    /// Backoff of the sink's own republish after a failed request (ms, doubling, jittered).
    /// Default: 500 ms doubling to 10 s, 10 attempts.
    #[schemars(title = "Recovery")]
    pub recovery: RecoveryConfig,
    /// Messages rejected on their own in a row before the sink fails; -1: no limit.
    /// Default 100.
    #[schemars(title = "Max consecutive rejections", range(min = -1))]
    pub max_consecutive_rejections: i64,
    /// How long closing waits for publishes in flight (ms). Default 30000.
    #[schemars(title = "Shutdown timeout (ms)", range(min = 1))]
    pub shutdown_timeout_ms: u64,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            batching_element_count_threshold: 100,
            batching_request_byte_threshold: 1_000_000,
            batching_delay_threshold_ms: 10,
            retry: RetryConfig::default(),
            message_ordering: false,
            max_in_flight_messages: 1000,
            max_in_flight_bytes: 64 * 1024 * 1024,
            publish_progress_timeout_ms: 600_000,
            recovery: RecoveryConfig::default(),
            max_consecutive_rejections: 100,
            shutdown_timeout_ms: 30_000,
        }
    }
}

/// The client's retry of a publish request; unset fields keep the defaults (retryable
/// codes for 600 s, backoff 100 ms growing 4x to 2 s, each wait drawn below it). Durations
/// in ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RetryConfig {
    /// Give up retrying a request after this long (ms); refused with message ordering.
    /// Unset: the client's (600 s).
    #[schemars(title = "Total timeout (ms)", range(min = 1))]
    pub total_timeout_ms: Option<u64>,
    /// Delay before the first retry (ms). Unset: 100 ms.
    #[schemars(title = "Initial retry delay (ms)", range(min = 1))]
    pub initial_delay_ms: Option<u64>,
    /// Factor between successive retry delays, at least 1. Unset: 4.
    #[schemars(title = "Retry delay multiplier", range(min = 1))]
    pub delay_multiplier: Option<f64>,
    /// Longest delay between retries (ms): how soon a sink publishes again once its
    /// endpoint is back. Unset: 2 s (or the initial delay, if longer).
    #[schemars(title = "Max retry delay (ms)", range(min = 1))]
    pub max_delay_ms: Option<u64>,
    /// Timeout of the first attempt (ms). Unset: no timeout per attempt.
    #[schemars(title = "Initial RPC timeout (ms)", range(min = 1))]
    pub initial_rpc_timeout_ms: Option<u64>,
    /// Factor between successive attempts' timeouts, at least 1. Unset: 1 (every attempt
    /// gets the initial RPC timeout).
    #[schemars(title = "RPC timeout multiplier", range(min = 1))]
    pub rpc_timeout_multiplier: Option<f64>,
    /// Longest attempt timeout (ms). Unset: no cap besides the total timeout.
    #[schemars(title = "Max RPC timeout (ms)", range(min = 1))]
    pub max_rpc_timeout_ms: Option<u64>,
    /// Attempts per request, the first included; refused with message ordering. Unset: no
    /// limit besides the total timeout.
    #[schemars(title = "Max attempts", range(min = 1))]
    pub max_attempts: Option<u32>,
}

impl RetryConfig {
    /// Whether a cap on retrying (total timeout or attempts) is set.
    pub fn has_caps(&self) -> bool {
        self.total_timeout_ms.is_some() || self.max_attempts.is_some()
    }
}

/// The sink's own republish after a failed request (SPEC 6). Durations in ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RecoveryConfig {
    /// First backoff (ms). Default 500.
    #[schemars(title = "Initial backoff (ms)", range(min = 1))]
    pub initial_backoff_ms: u64,
    /// Longest backoff (ms); each doubles up to it, jittered. Default 10000.
    #[schemars(title = "Max backoff (ms)", range(min = 1))]
    pub max_backoff_ms: u64,
    /// Republish attempts of one failed message before the checkpoint fails. Default 10.
    #[schemars(title = "Max attempts", range(min = 1))]
    pub max_attempts: u32,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            initial_backoff_ms: 500,
            max_backoff_ms: 10_000,
            max_attempts: 10,
        }
    }
}

/// What the sink does with a row it cannot publish on its own (SPEC 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailureHandler {
    /// Fail the job, naming the row and the reason.
    #[default]
    #[schemars(title = "Fail")]
    Fail,
    /// Log it (rate-limited), count it in `records_skipped` and go on.
    #[schemars(title = "Log and drop")]
    LogAndDrop,
    /// Publish it to the dead-letter queue.
    #[schemars(title = "Dead letter")]
    DeadLetter,
}

impl FailureHandler {
    /// The option value: `fail`, `log-and-drop` or `dead-letter`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureHandler::Fail => "fail",
            FailureHandler::LogAndDrop => "log-and-drop",
            FailureHandler::DeadLetter => "dead-letter",
        }
    }
}

/// A dead-letter queue (SPEC 6.1): a publisher to an existing topic with its own
/// credentials. Durations in ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterQueueConfig {
    /// The topic: an id in the table's project, or `projects/P/topics/T`. It must exist.
    #[schemars(
        title = "Dead-letter topic",
        example = "bids-dead-letters",
        extend("format" = "autocomplete", "x-autocomplete" = "topics")
    )]
    pub topic: String,
    /// How the queue reaches Pub/Sub; not inherited from the table. Default: application
    /// default credentials.
    #[serde(default)]
    #[schemars(title = "Dead-letter authentication")]
    pub authentication: Authentication,
    /// Publishes in flight before an offer waits for them: 0 publishes each one
    /// synchronously, -1 waits only at the checkpoint. Default 1000.
    #[serde(default = "default_dlq_in_flight")]
    #[schemars(title = "Max in-flight dead letters", range(min = -1))]
    pub max_in_flight_messages: i64,
    /// Budget of one wait for the queue's publishes (ms). Default 60000.
    #[serde(default = "default_dlq_flush_timeout")]
    #[schemars(title = "Flush timeout (ms)", range(min = 1))]
    pub flush_timeout_ms: u64,
    /// How long closing waits for the queue's publisher (ms), after the sink's own.
    /// Default 30000.
    #[serde(default = "default_dlq_shutdown_timeout")]
    #[schemars(title = "Shutdown timeout (ms)", range(min = 1))]
    pub shutdown_timeout_ms: u64,
}

fn default_dlq_in_flight() -> i64 {
    1000
}
fn default_dlq_flush_timeout() -> u64 {
    60_000
}
fn default_dlq_shutdown_timeout() -> u64 {
    30_000
}

impl DeadLetterQueueConfig {
    /// A queue publishing to `topic` with application default credentials and every
    /// default of SPEC 6.1.
    pub fn new(topic: impl Into<String>) -> Self {
        DeadLetterQueueConfig {
            topic: topic.into(),
            authentication: Authentication::ApplicationDefault,
            max_in_flight_messages: default_dlq_in_flight(),
            flush_timeout_ms: default_dlq_flush_timeout(),
            shutdown_timeout_ms: default_dlq_shutdown_timeout(),
        }
    }
}

/// A Pub/Sub table: read a subscription or write a topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[schemars(title = "Pub/Sub table")]
pub enum PubSubTable {
    Source(SourceConfig),
    Sink(SinkConfig),
}

/// The JSON Schema (draft-07, the dialect form libraries read best) of `T`,
/// pretty-printed with a trailing newline, as committed under `schema/`.
fn render<T: JsonSchema>() -> String {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let schema = generator.into_root_schema_for::<T>();
    serde_json::to_string_pretty(&schema).expect("schema serializes") + "\n"
}

/// The JSON Schema of the profile: the text of `schema/profile.json`.
pub fn profile_schema() -> String {
    render::<PubSubProfile>()
}

/// The JSON Schema of the table config: the text of `schema/table.json`.
pub fn table_schema() -> String {
    render::<PubSubTable>()
}

/// The committed `schema/profile.json` (a test fails when it drifts from the code).
pub const PROFILE_JSON: &str = include_str!("../profile.json");
/// The committed `schema/table.json`.
pub const TABLE_JSON: &str = include_str!("../table.json");

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

    /// Every property of both schemas with the object that holds it: (path, property,
    /// whether the holder lists it as required).
    fn all_properties() -> Vec<(String, serde_json::Value, bool)> {
        let mut out = Vec::new();
        for schema in [table_schema(), profile_schema()] {
            let v: serde_json::Value = serde_json::from_str(&schema).unwrap();
            collect(String::new(), &v, &mut out);
        }
        fn collect(
            path: String,
            v: &serde_json::Value,
            out: &mut Vec<(String, serde_json::Value, bool)>,
        ) {
            match v {
                serde_json::Value::Object(m) => {
                    let required: Vec<&str> = m
                        .get("required")
                        .and_then(|r| r.as_array())
                        .map(|r| r.iter().filter_map(|s| s.as_str()).collect())
                        .unwrap_or_default();
                    if let Some(serde_json::Value::Object(props)) = m.get("properties") {
                        for (k, p) in props {
                            out.push((
                                format!("{path}.{k}"),
                                p.clone(),
                                required.contains(&k.as_str()),
                            ));
                        }
                    }
                    for (k, child) in m {
                        collect(format!("{path}/{k}"), child, out);
                    }
                }
                serde_json::Value::Array(a) => {
                    for (i, child) in a.iter().enumerate() {
                        collect(format!("{path}[{i}]"), child, out);
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn text(p: &serde_json::Value, key: &str) -> String {
        p.get(key)
            .and_then(|d| d.as_str())
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn the_committed_schema_files_match_the_code() {
        // `PUBSUB_UPDATE_SCHEMAS=1 cargo test --release --workspace --lib` rewrites them.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/");
        for (file, committed, generated) in [
            ("profile.json", PROFILE_JSON, profile_schema()),
            ("table.json", TABLE_JSON, table_schema()),
        ] {
            if std::env::var_os("PUBSUB_UPDATE_SCHEMAS").is_some() {
                std::fs::write(format!("{dir}{file}"), &generated).unwrap();
                continue;
            }
            assert!(
                committed == generated,
                "schema/{file} drifted from the code: run `pubsub-connector schema {}` > schema/{file} (or PUBSUB_UPDATE_SCHEMAS=1 cargo test --release --workspace --lib) and commit it",
                file.trim_end_matches(".json")
            );
        }
    }

    #[test]
    fn durations_say_ms_and_optional_properties_say_their_default() {
        for (path, p, required) in all_properties() {
            if p.get("const").is_some() {
                continue;
            }
            let (title, description) = (text(&p, "title"), text(&p, "description"));
            if path.ends_with("Ms") {
                assert!(
                    title.contains("(ms)"),
                    "{path}: title '{title}' names no unit"
                );
            }
            if !required {
                assert!(
                    ["Default", "default", "Unset", "Empty"]
                        .iter()
                        .any(|w| description.contains(w)),
                    "{path}: an optional property's description gives no default: {description}"
                );
            }
        }
    }

    #[test]
    fn free_text_has_an_example_and_resource_ids_autocomplete() {
        for (path, p, _) in all_properties() {
            let is_string = p.get("type") == Some(&serde_json::json!("string"))
                || p.get("type") == Some(&serde_json::json!(["string", "null"]));
            if is_string && p.get("enum").is_none() && p.get("const").is_none() {
                assert!(p.get("examples").is_some(), "{path} has no example: {p}");
            }
            let name = path.rsplit('.').next().unwrap();
            if name == "topic" || path.ends_with("subscriptions/items.id") {
                assert_eq!(text(&p, "format"), "autocomplete", "{path}");
                assert!(p.get("x-autocomplete").is_some(), "{path}");
            }
        }
    }

    #[test]
    fn the_key_file_path_is_marked_sensitive() {
        let profile = profile_schema();
        let v: serde_json::Value = serde_json::from_str(&profile).unwrap();
        let sensitive: Vec<String> = all_properties()
            .into_iter()
            .filter(|(_, p, _)| p.get("x-sensitive") == Some(&serde_json::json!(true)))
            .map(|(path, _, _)| path)
            .collect();
        assert!(
            !sensitive.is_empty() && sensitive.iter().all(|p| p.ends_with(".path")),
            "{sensitive:?}"
        );
        assert!(profile.contains("\"writeOnly\": true"), "{v}");
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

    #[test]
    fn the_table_schema_lists_every_sink_and_dead_letter_option() {
        let v: serde_json::Value = serde_json::from_str(&table_schema()).unwrap();
        let defs = &v["definitions"];
        let names = |def: &str| -> Vec<String> {
            let mut n: Vec<String> = defs[def]["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("{def} is not in the schema"))
                .keys()
                .cloned()
                .collect();
            n.sort();
            n
        };
        let sorted = |names: &[&str]| {
            let mut n: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            n.sort();
            n
        };
        for (def, fields) in [
            (
                "SinkConfig",
                &[
                    "topic",
                    "createDisposition",
                    "topicCreate",
                    "publisher",
                    "failureHandler",
                    "deadLetter",
                    "recordIdAttribute",
                ][..],
            ),
            (
                "TopicCreateConfig",
                &[
                    "messageRetentionMs",
                    "kmsKeyName",
                    "allowedPersistenceRegions",
                    "enforceInTransit",
                ],
            ),
            (
                "PublisherConfig",
                &[
                    "batchingElementCountThreshold",
                    "batchingRequestByteThreshold",
                    "batchingDelayThresholdMs",
                    "retry",
                    "messageOrdering",
                    "maxInFlightMessages",
                    "maxInFlightBytes",
                    "publishProgressTimeoutMs",
                    "recovery",
                    "maxConsecutiveRejections",
                    "shutdownTimeoutMs",
                ],
            ),
            (
                "RetryConfig",
                &[
                    "totalTimeoutMs",
                    "initialDelayMs",
                    "delayMultiplier",
                    "maxDelayMs",
                    "initialRpcTimeoutMs",
                    "rpcTimeoutMultiplier",
                    "maxRpcTimeoutMs",
                    "maxAttempts",
                ],
            ),
            (
                "RecoveryConfig",
                &["initialBackoffMs", "maxBackoffMs", "maxAttempts"],
            ),
            (
                "DeadLetterQueueConfig",
                &[
                    "topic",
                    "authentication",
                    "maxInFlightMessages",
                    "flushTimeoutMs",
                    "shutdownTimeoutMs",
                ],
            ),
        ] {
            assert_eq!(names(def), sorted(fields), "{def}");
        }
    }
}
