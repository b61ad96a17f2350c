//! SQL `WITH` options -> validated Pub/Sub profile and table config (SPEC 5.3, 8).
//! Every error names the option key and the rejected value.

use pubsub_engine_spi::{ConnectorOptions, OptionError};
use pubsub_schema::{
    AlignmentConfig, Authentication, DeadLetterConfig, DedupConfig, DeserializationFailurePolicy,
    Expiration, OrderingMode, PubSubProfile, PubSubTable, SourceConfig, StartPosition,
    SubscriptionConfig, SubscriptionCreateConfig,
};

mod sink;
mod to_options;
pub use sink::*;
pub use to_options::*;

pub const PROJECT: &str = "project";
/// The name of a connection profile saved by `serve`, instead of `project` and its
/// credentials (SPEC 8); resolved through [`set_profile_resolver`].
pub const CONNECTION_PROFILE: &str = "connection-profile";
pub const EMULATOR_ENDPOINT: &str = "emulator-endpoint";
/// Path of a service account key file (JSON), read by the process that runs the job; never
/// echoed in an error or log line (SPEC 5.3, 10).
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "service-account-key-file";
/// Source: one subscription id or several separated by `;` (SPEC 5.1).
pub const SUBSCRIPTION: &str = "subscription";
pub const TOPIC: &str = "topic";
pub const STARTUP_MODE: &str = "scan.startup.mode";
pub const STARTUP_TIMESTAMP_MILLIS: &str = "scan.startup.timestamp-millis";
pub const ORDERING_MODE: &str = "scan.ordering-mode";
/// `fail` (default) | `drop` | `nack` (SPEC 5.3).
pub const DESERIALIZATION_FAILURE_POLICY: &str = "scan.deserialization-failure-policy";
/// Messages that may fail in a row under a policy other than `fail` (-1: no limit).
pub const MAX_CONSECUTIVE_FAILURES: &str = "scan.max-consecutive-failures";
pub const MAX_OUTSTANDING_MESSAGES: &str = "scan.flow-control.max-outstanding-element-count";
pub const MAX_OUTSTANDING_BYTES: &str = "scan.flow-control.max-outstanding-request-bytes";
pub const SUBSCRIBER_BUFFER_MAX_MESSAGES: &str = "scan.subscriber-buffer.max-messages";
pub const SUBSCRIBER_BUFFER_MAX_BYTES: &str = "scan.subscriber-buffer.max-bytes";
pub const PAUSED_SPLIT_BUFFER_MAX_MESSAGES: &str = "scan.paused-split-buffer.max-messages";
pub const PAUSED_SPLIT_BUFFER_MAX_BYTES: &str = "scan.paused-split-buffer.max-bytes";
pub const PARALLEL_PULL_COUNT: &str = "scan.parallel-pull-count";
pub const MAX_ACK_EXTENSION_PERIOD: &str = "scan.ack.max-extension-period";
pub const MIN_DURATION_PER_ACK_EXTENSION: &str = "scan.ack.min-duration-per-extension";
pub const MAX_DURATION_PER_ACK_EXTENSION: &str = "scan.ack.max-duration-per-extension";
pub const AWAIT_ACK_CONFIRMATION: &str = "scan.ack.await-confirmation";
pub const SHUTDOWN_TIMEOUT: &str = "scan.shutdown-timeout";
pub const MAX_RECORDS_PER_FETCH: &str = "scan.max-records-per-fetch";
pub const FIRST_CHECKPOINT_TIMEOUT: &str = "scan.first-checkpoint-timeout";
pub const RATE_LIMIT: &str = "scan.rate-limit.messages-per-second";
pub const WATERMARK_IDLE_TIMEOUT: &str = "scan.watermark.idle-timeout";
/// Out-of-orderness of publish-time or attribute event time (issue 32).
pub const WATERMARK_OUT_OF_ORDERNESS: &str = "scan.watermark.out-of-orderness";
/// `on` (default) | `off`: hold the watermark behind the subscription's oldest unacked
/// message, read from a snapshot (issue 44; decision 0047).
pub const WATERMARK_BACKLOG_PROBE: &str = "scan.watermark.backlog-probe";
/// How often the backlog probe runs (at least 100 ms; default 2 s).
pub const WATERMARK_BACKLOG_PROBE_INTERVAL: &str = "scan.watermark.backlog-probe-interval";
/// Event time from an attribute: RFC 3339 or epoch milliseconds (issue 32).
pub const EVENT_TIME_ATTRIBUTE: &str = "scan.event-time.attribute";
/// `sub:topic,...`: the subscriptions to create when missing, each with its topic.
pub const AUTO_CREATE_TOPICS: &str = "scan.auto-create.topics";
pub const AUTO_CREATE_ACK_DEADLINE: &str = "scan.auto-create.ack-deadline";
pub const AUTO_CREATE_MESSAGE_ORDERING: &str = "scan.auto-create.message-ordering.enabled";
pub const AUTO_CREATE_MESSAGE_RETENTION: &str = "scan.auto-create.message-retention";
pub const AUTO_CREATE_RETAIN_ACKED: &str = "scan.auto-create.retain-acked-messages";
pub const AUTO_CREATE_EXPIRATION_TTL: &str = "scan.auto-create.expiration-ttl";
pub const AUTO_CREATE_NEVER_EXPIRE: &str = "scan.auto-create.never-expire";
pub const AUTO_CREATE_DEAD_LETTER_TOPIC: &str = "scan.auto-create.dead-letter.topic";
pub const AUTO_CREATE_DEAD_LETTER_ATTEMPTS: &str =
    "scan.auto-create.dead-letter.max-delivery-attempts";
pub const AUTO_CREATE_FILTER: &str = "scan.auto-create.filter";
/// Deduplication by a record id attribute (issue 18).
pub const DEDUP_ATTRIBUTE: &str = "scan.dedup.attribute";
pub const DEDUP_WINDOW: &str = "scan.dedup.window";
pub const DEDUP_MAX_IDS: &str = "scan.dedup.max-ids";
/// Watermark alignment (issue 32; Flink's names).
pub const ALIGNMENT_GROUP: &str = "scan.watermark.alignment.group";
pub const ALIGNMENT_MAX_DRIFT: &str = "scan.watermark.alignment.max-drift";
pub const ALIGNMENT_UPDATE_INTERVAL: &str = "scan.watermark.alignment.update-interval";

/// Source keys (SPEC 8), in the order of docs/options.md.
pub const SOURCE_OPTIONS: &[&str] = &[
    STARTUP_MODE,
    STARTUP_TIMESTAMP_MILLIS,
    ORDERING_MODE,
    DESERIALIZATION_FAILURE_POLICY,
    MAX_CONSECUTIVE_FAILURES,
    MAX_OUTSTANDING_MESSAGES,
    MAX_OUTSTANDING_BYTES,
    SUBSCRIBER_BUFFER_MAX_MESSAGES,
    SUBSCRIBER_BUFFER_MAX_BYTES,
    PAUSED_SPLIT_BUFFER_MAX_MESSAGES,
    PAUSED_SPLIT_BUFFER_MAX_BYTES,
    PARALLEL_PULL_COUNT,
    MAX_ACK_EXTENSION_PERIOD,
    MIN_DURATION_PER_ACK_EXTENSION,
    MAX_DURATION_PER_ACK_EXTENSION,
    AWAIT_ACK_CONFIRMATION,
    SHUTDOWN_TIMEOUT,
    MAX_RECORDS_PER_FETCH,
    FIRST_CHECKPOINT_TIMEOUT,
    RATE_LIMIT,
    WATERMARK_IDLE_TIMEOUT,
    WATERMARK_OUT_OF_ORDERNESS,
    WATERMARK_BACKLOG_PROBE,
    WATERMARK_BACKLOG_PROBE_INTERVAL,
    EVENT_TIME_ATTRIBUTE,
    ALIGNMENT_GROUP,
    ALIGNMENT_MAX_DRIFT,
    ALIGNMENT_UPDATE_INTERVAL,
    AUTO_CREATE_TOPICS,
    AUTO_CREATE_ACK_DEADLINE,
    AUTO_CREATE_MESSAGE_ORDERING,
    AUTO_CREATE_MESSAGE_RETENTION,
    AUTO_CREATE_RETAIN_ACKED,
    AUTO_CREATE_EXPIRATION_TTL,
    AUTO_CREATE_NEVER_EXPIRE,
    AUTO_CREATE_DEAD_LETTER_TOPIC,
    AUTO_CREATE_DEAD_LETTER_ATTEMPTS,
    AUTO_CREATE_FILTER,
    DEDUP_ATTRIBUTE,
    DEDUP_WINDOW,
    DEDUP_MAX_IDS,
];

/// The keys shared by both sides and the source keys.
const BASE_OPTIONS: &[&str] = &[
    CONNECTION_PROFILE,
    PROJECT,
    EMULATOR_ENDPOINT,
    SERVICE_ACCOUNT_KEY_FILE,
    SUBSCRIPTION,
    TOPIC,
    STARTUP_MODE,
    STARTUP_TIMESTAMP_MILLIS,
    ORDERING_MODE,
    DESERIALIZATION_FAILURE_POLICY,
    MAX_CONSECUTIVE_FAILURES,
    MAX_OUTSTANDING_MESSAGES,
    MAX_OUTSTANDING_BYTES,
    SUBSCRIBER_BUFFER_MAX_MESSAGES,
    SUBSCRIBER_BUFFER_MAX_BYTES,
    PAUSED_SPLIT_BUFFER_MAX_MESSAGES,
    PAUSED_SPLIT_BUFFER_MAX_BYTES,
    PARALLEL_PULL_COUNT,
    MAX_ACK_EXTENSION_PERIOD,
    MIN_DURATION_PER_ACK_EXTENSION,
    MAX_DURATION_PER_ACK_EXTENSION,
    AWAIT_ACK_CONFIRMATION,
    SHUTDOWN_TIMEOUT,
    MAX_RECORDS_PER_FETCH,
    FIRST_CHECKPOINT_TIMEOUT,
    RATE_LIMIT,
    WATERMARK_IDLE_TIMEOUT,
    WATERMARK_OUT_OF_ORDERNESS,
    WATERMARK_BACKLOG_PROBE,
    WATERMARK_BACKLOG_PROBE_INTERVAL,
    EVENT_TIME_ATTRIBUTE,
    ALIGNMENT_GROUP,
    ALIGNMENT_MAX_DRIFT,
    ALIGNMENT_UPDATE_INTERVAL,
    AUTO_CREATE_TOPICS,
    AUTO_CREATE_ACK_DEADLINE,
    AUTO_CREATE_MESSAGE_ORDERING,
    AUTO_CREATE_MESSAGE_RETENTION,
    AUTO_CREATE_RETAIN_ACKED,
    AUTO_CREATE_EXPIRATION_TTL,
    AUTO_CREATE_NEVER_EXPIRE,
    AUTO_CREATE_DEAD_LETTER_TOPIC,
    AUTO_CREATE_DEAD_LETTER_ATTEMPTS,
    AUTO_CREATE_FILTER,
    DEDUP_ATTRIBUTE,
    DEDUP_WINDOW,
    DEDUP_MAX_IDS,
];

/// Every key this layer understands.
pub static KNOWN_OPTIONS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| [BASE_OPTIONS, SOURCE_DEAD_LETTER_OPTIONS, SINK_OPTIONS].concat());

/// The SQL key of a builder option (the connector's builder setter / table config field
/// name, e.g. `parallel_pull_count`), so a builder's rejection names what the user wrote.
/// Unknown names come back unchanged.
pub fn sql_key(option: &str) -> &str {
    match option {
        "project" => PROJECT,
        "emulator_endpoint" => EMULATOR_ENDPOINT,
        "subscription" => SUBSCRIPTION,
        "start_position" => STARTUP_TIMESTAMP_MILLIS,
        "ordering_mode" => ORDERING_MODE,
        "deserialization_failure_policy" => DESERIALIZATION_FAILURE_POLICY,
        "max_consecutive_failures" => MAX_CONSECUTIVE_FAILURES,
        "max_outstanding_messages" => MAX_OUTSTANDING_MESSAGES,
        "max_outstanding_bytes" => MAX_OUTSTANDING_BYTES,
        "subscriber_buffer_max_messages" => SUBSCRIBER_BUFFER_MAX_MESSAGES,
        "subscriber_buffer_max_bytes" => SUBSCRIBER_BUFFER_MAX_BYTES,
        "paused_split_buffer_max_messages" => PAUSED_SPLIT_BUFFER_MAX_MESSAGES,
        "paused_split_buffer_max_bytes" => PAUSED_SPLIT_BUFFER_MAX_BYTES,
        "parallel_pull_count" => PARALLEL_PULL_COUNT,
        "max_ack_extension_period" => MAX_ACK_EXTENSION_PERIOD,
        "min_duration_per_ack_extension" => MIN_DURATION_PER_ACK_EXTENSION,
        "max_duration_per_ack_extension" => MAX_DURATION_PER_ACK_EXTENSION,
        "await_ack_confirmation" => AWAIT_ACK_CONFIRMATION,
        "shutdown_timeout" => SHUTDOWN_TIMEOUT,
        "max_records_per_fetch" => MAX_RECORDS_PER_FETCH,
        "first_checkpoint_timeout" => FIRST_CHECKPOINT_TIMEOUT,
        "rate_limit_messages_per_second" => RATE_LIMIT,
        "watermark_idle_timeout" => WATERMARK_IDLE_TIMEOUT,
        "watermark_out_of_orderness" => WATERMARK_OUT_OF_ORDERNESS,
        "watermark_backlog_probe" => WATERMARK_BACKLOG_PROBE,
        "watermark_backlog_probe_interval" => WATERMARK_BACKLOG_PROBE_INTERVAL,
        "event_time_attribute" => EVENT_TIME_ATTRIBUTE,
        "alignment.group" => ALIGNMENT_GROUP,
        "alignment.max_drift" => ALIGNMENT_MAX_DRIFT,
        "alignment.update_interval" => ALIGNMENT_UPDATE_INTERVAL,
        "topic" => AUTO_CREATE_TOPICS,
        "ack_deadline" => AUTO_CREATE_ACK_DEADLINE,
        "enable_message_ordering" => AUTO_CREATE_MESSAGE_ORDERING,
        "message_retention" => AUTO_CREATE_MESSAGE_RETENTION,
        "retain_acked_messages" => AUTO_CREATE_RETAIN_ACKED,
        "expiration_ttl" => AUTO_CREATE_EXPIRATION_TTL,
        "never_expire" => AUTO_CREATE_NEVER_EXPIRE,
        "dead_letter_topic" => AUTO_CREATE_DEAD_LETTER_TOPIC,
        "max_delivery_attempts" => AUTO_CREATE_DEAD_LETTER_ATTEMPTS,
        "dedup.attribute" => DEDUP_ATTRIBUTE,
        "dedup.window" => DEDUP_WINDOW,
        "dedup.max_ids" => DEDUP_MAX_IDS,
        "filter" => AUTO_CREATE_FILTER,
        other => dead_letter_sql_key("scan.", other).unwrap_or(other),
    }
}

pub(crate) fn invalid(key: &str, value: impl ToString, reason: &str) -> OptionError {
    OptionError::Invalid {
        key: key.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Validates `host:port` (port 1..65535, host non-empty). Source: SPEC 5.3.
pub fn parse_endpoint(value: &str) -> Result<String, OptionError> {
    let v = value.trim();
    pubsub_schema::check_endpoint(v).map_err(|why| invalid(EMULATOR_ENDPOINT, value, why))?;
    Ok(v.to_string())
}

/// A resource id: non-blank, no surrounding whitespace, no `/` (SPEC 5.1).
fn parse_id(key: &str, value: String) -> Result<String, OptionError> {
    if value.trim().is_empty() || value.trim() != value || value.contains('/') {
        return Err(invalid(
            key,
            value,
            "must be a non-blank id without '/' or surrounding spaces",
        ));
    }
    Ok(value)
}

/// Pulls the profile options: `project` and at most one of `emulator-endpoint` and
/// `service-account-key-file` (neither: application default credentials). The key file is
/// only named here, read where a client is built; its path is never echoed.
pub fn profile_from_options(options: &mut ConnectorOptions) -> Result<PubSubProfile, OptionError> {
    if let Some(name) = options.pull_opt_str(CONNECTION_PROFILE)? {
        return saved_profile(options, name);
    }
    let project = parse_id(PROJECT, options.pull_str(PROJECT)?)?;
    let endpoint = options.pull_opt_str(EMULATOR_ENDPOINT)?;
    let key_file = options.pull_opt_str(SERVICE_ACCOUNT_KEY_FILE)?;
    let authentication = match (endpoint, key_file) {
        (Some(_), Some(_)) => {
            return Err(OptionError::Conflict {
                message: format!("options '{EMULATOR_ENDPOINT}' and '{SERVICE_ACCOUNT_KEY_FILE}' cannot both be set: an emulator takes no credentials"),
            })
        }
        (Some(e), None) => Authentication::Emulator {
            endpoint: parse_endpoint(&e)?,
        },
        (None, Some(path)) if path.trim().is_empty() => {
            return Err(invalid(
                SERVICE_ACCOUNT_KEY_FILE,
                "",
                "must be the path of a service account key file (JSON), not blank",
            ))
        }
        (None, Some(path)) => Authentication::ServiceAccountKeyFile { path },
        (None, None) => Authentication::ApplicationDefault,
    };
    Ok(PubSubProfile {
        project,
        authentication,
    })
}

/// Looks up saved connection profiles by name: `Err` is the reason, shown after the name.
pub type ProfileResolver = dyn Fn(&str) -> Result<PubSubProfile, String> + Send + Sync;

static RESOLVER: std::sync::OnceLock<Box<ProfileResolver>> = std::sync::OnceLock::new();

/// Sets how `'connection-profile' = 'name'` is resolved (the binary: from its
/// `--data-dir`). The first call wins; later calls are ignored.
pub fn set_profile_resolver(resolver: Box<ProfileResolver>) {
    let _ = RESOLVER.set(resolver);
}

/// `connection-profile`: the saved profile, alone (a table that names one takes
/// `project` and the credentials from it).
fn saved_profile(
    options: &mut ConnectorOptions,
    name: String,
) -> Result<PubSubProfile, OptionError> {
    let keys = options.keys();
    if let Some(k) = [PROJECT, EMULATOR_ENDPOINT, SERVICE_ACCOUNT_KEY_FILE]
        .into_iter()
        .find(|k| keys.iter().any(|x| x == k))
    {
        return Err(OptionError::Conflict {
            message: format!("options '{CONNECTION_PROFILE}' and '{k}' cannot both be set: the saved profile '{name}' holds the project and the credentials"),
        });
    }
    let Some(resolve) = RESOLVER.get() else {
        return Err(invalid(
            CONNECTION_PROFILE,
            &name,
            "saved connection profiles are not available here",
        ));
    };
    resolve(&name).map_err(|why| invalid(CONNECTION_PROFILE, &name, &why))
}

/// Pulls the table options. A table with `subscription` is a source, with `topic` a
/// sink; exactly one must be given, and options of the other side are rejected.
pub fn table_from_options(options: &mut ConnectorOptions) -> Result<PubSubTable, OptionError> {
    let subscription = options.pull_opt_str(SUBSCRIPTION)?;
    let topic = options.pull_opt_str(TOPIC)?;
    let keys = options.keys();
    match (subscription, topic) {
        (Some(_), Some(_)) => Err(OptionError::Conflict {
            message: format!("options '{SUBSCRIPTION}' and '{TOPIC}' cannot both be set: a table reads a subscription or writes a topic"),
        }),
        (None, None) => {
            // A misspelled 'subscription' or 'topic' is the likely cause: name it.
            let hint = keys.iter().find_map(|k| {
                pubsub_engine_spi::suggest(k, &[SUBSCRIPTION, TOPIC]).map(|s| (k.clone(), s))
            });
            let mut message = format!("set option '{SUBSCRIPTION}' (a source) or '{TOPIC}' (a sink)");
            if let Some((k, s)) = hint {
                message.push_str(&format!(": unknown option '{k}', did you mean '{s}'?"));
            }
            Err(OptionError::Conflict { message })
        }
        (Some(sub), None) => {
            if let Some(k) = keys.iter().find(|k| SINK_OPTIONS.contains(&k.as_str())) {
                return Err(OptionError::Conflict { message: format!("option '{k}' applies to sinks, but this table reads subscription '{sub}'") });
            }
            source_options(options, &sub).map(PubSubTable::Source)
        }
        (None, Some(topic)) => {
            if let Some(k) = keys.iter().find(|k| {
                SOURCE_OPTIONS.contains(&k.as_str())
                    || SOURCE_DEAD_LETTER_OPTIONS.contains(&k.as_str())
            }) {
                return Err(OptionError::Conflict { message: format!("option '{k}' applies to sources, but this table writes topic '{topic}'") });
            }
            sink::sink_options(options, parse_id(TOPIC, topic)?).map(PubSubTable::Sink)
        }
    }
}

/// Maps the source keys onto the table config, field by field. Only parsing happens here
/// (numbers, durations, sizes, enums, lists); the rules live in the connector's builders,
/// whose rejections the connector renames with [`sql_key`].
fn source_options(
    o: &mut ConnectorOptions,
    subscriptions: &str,
) -> Result<SourceConfig, OptionError> {
    let ids: Vec<String> = subscriptions
        .split(';')
        .map(|s| s.trim().to_string())
        .collect();
    if ids.iter().any(String::is_empty) {
        return Err(invalid(
            SUBSCRIPTION,
            subscriptions,
            "must be subscription ids separated by ';', none blank",
        ));
    }
    let mut c = SourceConfig::new(String::new());
    c.subscriptions = ids
        .into_iter()
        .map(|id| SubscriptionConfig { id, create: None })
        .collect();
    c.start_position = start_position(o)?;
    if let Some(m) = o.pull_opt_with(ORDERING_MODE, parse_ordering_mode)? {
        c.ordering_mode = m;
    }
    if let Some(p) = o.pull_opt_with(DESERIALIZATION_FAILURE_POLICY, parse_failure_policy)? {
        c.deserialization_failure_policy = p;
    }
    if let Some(v) = sink::pull_i64(o, MAX_CONSECUTIVE_FAILURES)? {
        c.max_consecutive_failures = v;
    }
    let s = &mut c.subscriber;
    s.max_outstanding_messages = o.pull_opt_u64(MAX_OUTSTANDING_MESSAGES)?;
    if let Some(v) = o.pull_opt_data_size_bytes(MAX_OUTSTANDING_BYTES)? {
        s.max_outstanding_bytes = v;
    }
    s.subscriber_buffer_max_messages = o.pull_opt_u64(SUBSCRIBER_BUFFER_MAX_MESSAGES)?;
    s.subscriber_buffer_max_bytes = o.pull_opt_data_size_bytes(SUBSCRIBER_BUFFER_MAX_BYTES)?;
    s.paused_split_buffer_max_messages = o.pull_opt_u64(PAUSED_SPLIT_BUFFER_MAX_MESSAGES)?;
    s.paused_split_buffer_max_bytes = o.pull_opt_data_size_bytes(PAUSED_SPLIT_BUFFER_MAX_BYTES)?;
    if let Some(v) = o.pull_opt_u64(PARALLEL_PULL_COUNT)? {
        s.parallel_pull_count = u32_option(PARALLEL_PULL_COUNT, v)?;
    }
    if let Some(v) = pull_ms(o, MAX_ACK_EXTENSION_PERIOD)? {
        s.max_ack_extension_period_ms = v;
    }
    s.min_duration_per_ack_extension_ms = pull_ms(o, MIN_DURATION_PER_ACK_EXTENSION)?;
    s.max_duration_per_ack_extension_ms = pull_ms(o, MAX_DURATION_PER_ACK_EXTENSION)?;
    s.await_ack_confirmation_ms = pull_ms(o, AWAIT_ACK_CONFIRMATION)?;
    if let Some(v) = pull_ms(o, SHUTDOWN_TIMEOUT)? {
        s.shutdown_timeout_ms = v;
    }
    if let Some(v) = o.pull_opt_u64(MAX_RECORDS_PER_FETCH)? {
        s.max_records_per_fetch = u32_option(MAX_RECORDS_PER_FETCH, v)?;
    }
    if let Some(v) = pull_ms(o, FIRST_CHECKPOINT_TIMEOUT)? {
        s.first_checkpoint_timeout_ms = v;
    }
    s.rate_limit_messages_per_second = o.pull_opt_u64(RATE_LIMIT)?;
    if let Some(v) = pull_ms(o, WATERMARK_IDLE_TIMEOUT)? {
        s.watermark_idle_timeout_ms = v;
    }
    s.watermark_out_of_orderness_ms = pull_ms(o, WATERMARK_OUT_OF_ORDERNESS)?;
    if let Some(on) = o.pull_opt_with(WATERMARK_BACKLOG_PROBE, parse_on_off)? {
        s.watermark_backlog_probe = on;
    }
    if let Some(v) = o.pull_opt_with(WATERMARK_BACKLOG_PROBE_INTERVAL, parse_probe_interval)? {
        s.watermark_backlog_probe_interval_ms = v;
    }
    c.event_time_attribute = o.pull_opt_str(EVENT_TIME_ATTRIBUTE)?;
    auto_create(o, &mut c.subscriptions)?;
    c.dead_letter = sink::dead_letter_options(o, "scan.")?;
    c.dedup = dedup_options(o)?;
    c.alignment = alignment_options(o)?;
    Ok(c)
}

/// `scan.watermark.alignment.*`: `None` without a group; a group needs its drift, and the
/// drift and interval alone are refused.
fn alignment_options(o: &mut ConnectorOptions) -> Result<Option<AlignmentConfig>, OptionError> {
    let group = o.pull_opt_str(ALIGNMENT_GROUP)?;
    let drift = pull_ms(o, ALIGNMENT_MAX_DRIFT)?;
    let every = pull_ms(o, ALIGNMENT_UPDATE_INTERVAL)?;
    let Some(group) = group else {
        if let Some(k) = [
            (drift.is_some(), ALIGNMENT_MAX_DRIFT),
            (every.is_some(), ALIGNMENT_UPDATE_INTERVAL),
        ]
        .iter()
        .find_map(|(set, k)| set.then_some(*k))
        {
            return Err(OptionError::Conflict {
                message: format!("option '{k}' needs '{ALIGNMENT_GROUP}' (the name of the group whose sources are aligned)"),
            });
        }
        return Ok(None);
    };
    let Some(max_drift_ms) = drift else {
        return Err(OptionError::Conflict {
            message: format!("option '{ALIGNMENT_GROUP}' = '{group}' needs '{ALIGNMENT_MAX_DRIFT}' (how far a split's watermark may run ahead of the group's, e.g. '30s')"),
        });
    };
    Ok(Some(AlignmentConfig {
        group,
        max_drift_ms,
        update_interval_ms: every.unwrap_or(pubsub_schema::DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS),
    }))
}

/// `scan.dedup.*`: `None` without the attribute; the window and bound alone are refused.
fn dedup_options(o: &mut ConnectorOptions) -> Result<Option<DedupConfig>, OptionError> {
    let attribute = o.pull_opt_str(DEDUP_ATTRIBUTE)?;
    let window = pull_ms(o, DEDUP_WINDOW)?;
    let max_ids = o.pull_opt_u64(DEDUP_MAX_IDS)?;
    let Some(attribute) = attribute else {
        if let Some(k) = [
            (window.is_some(), DEDUP_WINDOW),
            (max_ids.is_some(), DEDUP_MAX_IDS),
        ]
        .iter()
        .find_map(|(set, k)| set.then_some(*k))
        {
            return Err(OptionError::Conflict {
                message: format!("option '{k}' needs '{DEDUP_ATTRIBUTE}' (the attribute holding each record's id)"),
            });
        }
        return Ok(None);
    };
    let mut d = DedupConfig::new(attribute);
    if let Some(w) = window {
        d.window_ms = w;
    }
    if let Some(m) = max_ids {
        d.max_ids = m;
    }
    Ok(Some(d))
}

/// `scan.startup.mode` (+ `scan.startup.timestamp-millis`, only with mode `timestamp`).
fn start_position(o: &mut ConnectorOptions) -> Result<StartPosition, OptionError> {
    let mode = o.pull_opt_str(STARTUP_MODE)?;
    let millis = o.pull_opt_with(STARTUP_TIMESTAMP_MILLIS, |v| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| "must be epoch milliseconds (an integer)".to_string())
    })?;
    let p = match mode.as_deref().map(|m| m.trim().to_ascii_lowercase()) {
        None => StartPosition::ContinueFromSubscription,
        Some(m) => match m.as_str() {
            "continue-from-subscription" => StartPosition::ContinueFromSubscription,
            "earliest-retained" => StartPosition::EarliestRetained,
            "latest" => StartPosition::Latest,
            "timestamp" => match millis {
                Some(millis) => return Ok(StartPosition::Timestamp { millis }),
                None => {
                    return Err(OptionError::Conflict {
                        message: format!("option '{STARTUP_MODE}' = 'timestamp' needs '{STARTUP_TIMESTAMP_MILLIS}' (epoch milliseconds)"),
                    })
                }
            },
            _ => {
                return Err(invalid(
                    STARTUP_MODE,
                    mode.unwrap_or_default(),
                    "must be one of 'continue-from-subscription', 'earliest-retained', 'latest', 'timestamp'",
                ))
            }
        },
    };
    if let Some(ms) = millis {
        return Err(OptionError::Conflict {
            message: format!(
                "option '{STARTUP_TIMESTAMP_MILLIS}' ('{ms}') applies only with '{STARTUP_MODE}' = 'timestamp'"
            ),
        });
    }
    Ok(p)
}

/// `scan.auto-create.*`: create options for the subscriptions named in
/// `scan.auto-create.topics` (`sub:topic,...`); the other keys apply to each of them.
fn auto_create(
    o: &mut ConnectorOptions,
    subs: &mut [SubscriptionConfig],
) -> Result<(), OptionError> {
    let topics = o.pull_opt_str(AUTO_CREATE_TOPICS)?;
    let mut template = SubscriptionCreateConfig {
        topic: String::new(),
        ack_deadline_ms: pull_ms(o, AUTO_CREATE_ACK_DEADLINE)?,
        message_ordering: o
            .pull_opt_bool(AUTO_CREATE_MESSAGE_ORDERING)?
            .unwrap_or(false),
        message_retention_ms: pull_ms(o, AUTO_CREATE_MESSAGE_RETENTION)?,
        retain_acked_messages: o.pull_opt_bool(AUTO_CREATE_RETAIN_ACKED)?.unwrap_or(false),
        expiration: None,
        dead_letter: None,
        filter: o.pull_opt_str(AUTO_CREATE_FILTER)?,
    };
    let ttl = pull_ms(o, AUTO_CREATE_EXPIRATION_TTL)?;
    let never = o.pull_opt_bool(AUTO_CREATE_NEVER_EXPIRE)?;
    template.expiration = match (ttl, never) {
        (Some(_), Some(true)) => {
            return Err(OptionError::Conflict {
                message: format!("options '{AUTO_CREATE_EXPIRATION_TTL}' and '{AUTO_CREATE_NEVER_EXPIRE}' = 'true' contradict each other: set one"),
            })
        }
        (Some(ttl_ms), _) => Some(Expiration::Ttl { ttl_ms }),
        (None, Some(true)) => Some(Expiration::Never),
        (None, _) => None,
    };
    let dl_topic = o.pull_opt_str(AUTO_CREATE_DEAD_LETTER_TOPIC)?;
    let dl_attempts = o.pull_opt_u64(AUTO_CREATE_DEAD_LETTER_ATTEMPTS)?;
    template.dead_letter = match (dl_topic, dl_attempts) {
        (Some(topic), attempts) => Some(DeadLetterConfig {
            topic,
            max_delivery_attempts: match attempts {
                Some(a) => u32_option(AUTO_CREATE_DEAD_LETTER_ATTEMPTS, a)?,
                None => 5,
            },
        }),
        (None, Some(_)) => {
            return Err(OptionError::Conflict {
                message: format!("option '{AUTO_CREATE_DEAD_LETTER_ATTEMPTS}' needs '{AUTO_CREATE_DEAD_LETTER_TOPIC}'"),
            })
        }
        (None, None) => None,
    };
    let Some(topics) = topics else {
        let set = template.ack_deadline_ms.is_some()
            || template.message_ordering
            || template.message_retention_ms.is_some()
            || template.retain_acked_messages
            || template.expiration.is_some()
            || template.dead_letter.is_some()
            || template.filter.is_some();
        if set {
            return Err(OptionError::Conflict {
                message: format!("the 'scan.auto-create.*' options need '{AUTO_CREATE_TOPICS}' = 'subscription:topic,...' naming the subscriptions to create"),
            });
        }
        return Ok(());
    };
    for pair in topics.split(',') {
        let Some((sub, topic)) = pair.split_once(':') else {
            return Err(invalid(
                AUTO_CREATE_TOPICS,
                &topics,
                "must be 'subscription:topic' pairs separated by ','",
            ));
        };
        let (sub, topic) = (sub.trim(), topic.trim());
        let Some(target) = subs.iter_mut().find(|s| s.id == sub) else {
            return Err(invalid(
                AUTO_CREATE_TOPICS,
                &topics,
                &format!("names subscription '{sub}', which is not in '{SUBSCRIPTION}'"),
            ));
        };
        if target.create.is_some() {
            return Err(invalid(
                AUTO_CREATE_TOPICS,
                &topics,
                &format!("names subscription '{sub}' twice"),
            ));
        }
        target.create = Some(SubscriptionCreateConfig {
            topic: topic.to_string(),
            ..template.clone()
        });
    }
    Ok(())
}

/// A duration option in whole milliseconds (the config's unit; finer values are refused,
/// never rounded). Errors show the value as written.
pub(crate) fn pull_ms(o: &mut ConnectorOptions, key: &str) -> Result<Option<u64>, OptionError> {
    o.pull_opt_with(key, |v| {
        let d = pubsub_engine_spi::duration::parse_duration(v)?;
        if d.subsec_nanos() % 1_000_000 != 0 {
            return Err("must be a whole number of milliseconds".to_string());
        }
        u64::try_from(d.as_millis()).map_err(|_| "is too long".to_string())
    })
}

pub(crate) fn u32_option(key: &str, v: u64) -> Result<u32, OptionError> {
    u32::try_from(v).map_err(|_| invalid(key, v, "must be at most 4294967295"))
}

/// The shortest `scan.watermark.backlog-probe-interval`.
pub const MIN_BACKLOG_PROBE_INTERVAL_MS: u64 = 100;

/// A probe interval: whole milliseconds, at least [`MIN_BACKLOG_PROBE_INTERVAL_MS`].
fn parse_probe_interval(v: &str) -> Result<u64, String> {
    let d = pubsub_engine_spi::duration::parse_duration(v)?;
    let ms = u64::try_from(d.as_millis()).map_err(|_| "is too long".to_string())?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err("must be a whole number of milliseconds".to_string());
    }
    if ms < MIN_BACKLOG_PROBE_INTERVAL_MS {
        return Err(format!("must be at least {MIN_BACKLOG_PROBE_INTERVAL_MS}ms (each probe is two admin calls per subscription)"));
    }
    Ok(ms)
}

/// `on` | `off`, case-insensitive.
fn parse_on_off(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("must be one of 'on', 'off'".to_string()),
    }
}

/// `none` | `per-key`, case-insensitive.
fn parse_ordering_mode(v: &str) -> Result<OrderingMode, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "none" => Ok(OrderingMode::None),
        "per-key" => Ok(OrderingMode::PerKey),
        _ => Err("must be one of 'none', 'per-key'".to_string()),
    }
}

/// `fail` | `drop` | `nack` | `dead-letter`, case-insensitive.
fn parse_failure_policy(v: &str) -> Result<DeserializationFailurePolicy, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "fail" => Ok(DeserializationFailurePolicy::Fail),
        "drop" => Ok(DeserializationFailurePolicy::Drop),
        "nack" => Ok(DeserializationFailurePolicy::Nack),
        "dead-letter" => Ok(DeserializationFailurePolicy::DeadLetter),
        _ => Err("must be one of 'fail', 'drop', 'nack', 'dead-letter'".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> ConnectorOptions {
        ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn endpoint_is_parsed_eagerly() {
        let e = profile_from_options(&mut opts(&[
            ("project", "p"),
            ("emulator-endpoint", "localhost"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "option 'emulator-endpoint' is invalid: must be host:port, was 'localhost'"
        );
        let e = parse_endpoint("localhost:0").unwrap_err().to_string();
        assert!(e.contains("1..65535") && e.contains("'localhost:0'"), "{e}");
        assert_eq!(parse_endpoint("127.0.0.1:8085").unwrap(), "127.0.0.1:8085");
    }

    #[test]
    fn source_options_with_defaults() {
        let mut o = opts(&[
            ("subscription", "s"),
            (PARALLEL_PULL_COUNT, "4"),
            (MAX_ACK_EXTENSION_PERIOD, "30m"),
        ]);
        let PubSubTable::Source(s) = table_from_options(&mut o).unwrap() else {
            panic!("source expected")
        };
        assert_eq!(s.subscriber.parallel_pull_count, 4);
        assert_eq!(s.subscriber.max_ack_extension_period_ms, 1_800_000);
        assert_eq!(s.subscriber.max_outstanding_messages, None);
        assert_eq!(
            s.deserialization_failure_policy,
            DeserializationFailurePolicy::Fail
        );
        assert!(o.is_empty());
    }

    #[test]
    fn bad_values_name_key() {
        let e = table_from_options(&mut opts(&[
            ("subscription", "s"),
            (PARALLEL_PULL_COUNT, "many"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("'scan.parallel-pull-count'"), "{e}");
        let e =
            table_from_options(&mut opts(&[("topic", "t"), (BATCH_COUNT, "many")])).unwrap_err();
        assert!(e.to_string().contains(BATCH_COUNT), "{e}");
        let e = table_from_options(&mut opts(&[("topic", "t"), (PARALLEL_PULL_COUNT, "2")]))
            .unwrap_err();
        assert!(e.to_string().contains("applies to sources"), "{e}");
    }

    #[test]
    fn failure_policy_is_parsed_naming_key_and_value() {
        for (v, want) in [
            ("fail", DeserializationFailurePolicy::Fail),
            ("DROP", DeserializationFailurePolicy::Drop),
            ("nack", DeserializationFailurePolicy::Nack),
        ] {
            let PubSubTable::Source(s) = table_from_options(&mut opts(&[
                ("subscription", "s"),
                (DESERIALIZATION_FAILURE_POLICY, v),
            ]))
            .unwrap() else {
                panic!("source expected")
            };
            assert_eq!(s.deserialization_failure_policy, want);
        }
        let e = table_from_options(&mut opts(&[
            ("subscription", "s"),
            (DESERIALIZATION_FAILURE_POLICY, "skip"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(DESERIALIZATION_FAILURE_POLICY) && e.contains("'skip'"),
            "{e}"
        );
        let e = table_from_options(&mut opts(&[
            ("topic", "t"),
            (DESERIALIZATION_FAILURE_POLICY, "drop"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("applies to sources"), "{e}");
        let PubSubTable::Source(s) = table_from_options(&mut opts(&[
            ("subscription", "s"),
            (MAX_OUTSTANDING_MESSAGES, "7"),
        ]))
        .unwrap() else {
            panic!("source expected")
        };
        assert_eq!(s.subscriber.max_outstanding_messages, Some(7));
    }

    #[test]
    fn misspelled_subscription_gets_did_you_mean() {
        let e = table_from_options(&mut opts(&[("subscripton", "s")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'subscripton'") && e.contains("did you mean 'subscription'"),
            "{e}"
        );
        let e = table_from_options(&mut opts(&[("topc", "t")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'topic'"), "{e}");
    }

    fn source(pairs: &[(&str, &str)]) -> Result<SourceConfig, OptionError> {
        let mut o = opts(pairs);
        let t = table_from_options(&mut o)?;
        assert!(o.is_empty(), "every key is taken: {:?}", o.keys());
        match t {
            PubSubTable::Source(s) => Ok(s),
            PubSubTable::Sink(_) => panic!("source expected"),
        }
    }

    #[test]
    fn every_scan_key_maps_onto_its_field() {
        let s = source(&[
            ("subscription", "a; b"),
            (STARTUP_MODE, "latest"),
            (ORDERING_MODE, "per-key"),
            (MAX_CONSECUTIVE_FAILURES, "-1"),
            (MAX_OUTSTANDING_BYTES, "10mb"),
            (SUBSCRIBER_BUFFER_MAX_MESSAGES, "11"),
            (SUBSCRIBER_BUFFER_MAX_BYTES, "12"),
            (PAUSED_SPLIT_BUFFER_MAX_MESSAGES, "13"),
            (PAUSED_SPLIT_BUFFER_MAX_BYTES, "14"),
            (MIN_DURATION_PER_ACK_EXTENSION, "15s"),
            (MAX_DURATION_PER_ACK_EXTENSION, "16s"),
            (AWAIT_ACK_CONFIRMATION, "17ms"),
            (SHUTDOWN_TIMEOUT, "18s"),
            (MAX_RECORDS_PER_FETCH, "19"),
            (FIRST_CHECKPOINT_TIMEOUT, "0s"),
            (RATE_LIMIT, "21"),
            (WATERMARK_IDLE_TIMEOUT, "0s"),
            (AUTO_CREATE_TOPICS, "b:t"),
            (AUTO_CREATE_ACK_DEADLINE, "30s"),
            (AUTO_CREATE_MESSAGE_ORDERING, "true"),
            (AUTO_CREATE_MESSAGE_RETENTION, "1 day"),
            (AUTO_CREATE_RETAIN_ACKED, "true"),
            (AUTO_CREATE_NEVER_EXPIRE, "true"),
            (AUTO_CREATE_DEAD_LETTER_TOPIC, "dead"),
            (AUTO_CREATE_DEAD_LETTER_ATTEMPTS, "7"),
            (AUTO_CREATE_FILTER, "attributes.k = \"v\""),
            (DEDUP_ATTRIBUTE, "record-id"),
            (DEDUP_WINDOW, "90s"),
            (DEDUP_MAX_IDS, "5000"),
        ])
        .unwrap();
        let ids: Vec<_> = s.subscriptions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(s.start_position, StartPosition::Latest);
        assert_eq!(s.ordering_mode, OrderingMode::PerKey);
        assert_eq!(s.max_consecutive_failures, -1);
        let o = &s.subscriber;
        assert_eq!(o.max_outstanding_bytes, 10_000_000);
        assert_eq!(
            (
                o.subscriber_buffer_max_messages,
                o.subscriber_buffer_max_bytes
            ),
            (Some(11), Some(12))
        );
        assert_eq!(
            (
                o.paused_split_buffer_max_messages,
                o.paused_split_buffer_max_bytes
            ),
            (Some(13), Some(14))
        );
        assert_eq!(
            (
                o.min_duration_per_ack_extension_ms,
                o.max_duration_per_ack_extension_ms
            ),
            (Some(15_000), Some(16_000))
        );
        assert_eq!(o.await_ack_confirmation_ms, Some(17));
        assert_eq!(o.shutdown_timeout_ms, 18_000);
        assert_eq!(o.max_records_per_fetch, 19);
        assert_eq!(o.first_checkpoint_timeout_ms, 0);
        assert_eq!(o.rate_limit_messages_per_second, Some(21));
        assert_eq!(o.watermark_idle_timeout_ms, 0);
        assert!(s.subscriptions[0].create.is_none());
        let c = s.subscriptions[1].create.as_ref().unwrap();
        assert_eq!(c.topic, "t");
        assert_eq!(c.ack_deadline_ms, Some(30_000));
        assert!(c.message_ordering && c.retain_acked_messages);
        assert_eq!(c.message_retention_ms, Some(86_400_000));
        assert_eq!(c.expiration, Some(Expiration::Never));
        assert_eq!(
            c.dead_letter,
            Some(DeadLetterConfig {
                topic: "dead".into(),
                max_delivery_attempts: 7
            })
        );
        assert_eq!(c.filter.as_deref(), Some("attributes.k = \"v\""));
        assert_eq!(
            s.dedup,
            Some(DedupConfig {
                attribute: "record-id".into(),
                window_ms: 90_000,
                max_ids: 5_000
            })
        );
        // Watermark alignment: a group needs its drift; the drift and interval need a group.
        let a = source(&[
            ("subscription", "a"),
            (ALIGNMENT_GROUP, "clicks"),
            (ALIGNMENT_MAX_DRIFT, "30s"),
        ])
        .unwrap()
        .alignment
        .unwrap();
        assert_eq!(
            (a.group.as_str(), a.max_drift_ms, a.update_interval_ms),
            ("clicks", 30_000, 1_000)
        );
        let a = source(&[
            ("subscription", "a"),
            (ALIGNMENT_GROUP, "clicks"),
            (ALIGNMENT_MAX_DRIFT, "1m"),
            (ALIGNMENT_UPDATE_INTERVAL, "200ms"),
        ])
        .unwrap()
        .alignment
        .unwrap();
        assert_eq!((a.max_drift_ms, a.update_interval_ms), (60_000, 200));
        let e = |pairs: &[(&str, &str)]| source(pairs).unwrap_err().to_string();
        let no_drift = e(&[("subscription", "a"), (ALIGNMENT_GROUP, "clicks")]);
        assert!(
            no_drift.contains("'scan.watermark.alignment.group' = 'clicks' needs 'scan.watermark.alignment.max-drift'"),
            "{no_drift}"
        );
        for k in [ALIGNMENT_MAX_DRIFT, ALIGNMENT_UPDATE_INTERVAL] {
            let alone = e(&[("subscription", "a"), (k, "1s")]);
            assert!(
                alone.contains(&format!("'{k}' needs 'scan.watermark.alignment.group'")),
                "{alone}"
            );
        }
        let bad = e(&[
            ("subscription", "a"),
            (ALIGNMENT_GROUP, "clicks"),
            (ALIGNMENT_MAX_DRIFT, "soon"),
        ]);
        assert!(
            bad.contains("scan.watermark.alignment.max-drift") && bad.contains("soon"),
            "{bad}"
        );
        // The backlog probe: on by default, 'off' turns it off, the interval has a floor.
        let d = source(&[("subscription", "a")]).unwrap().subscriber;
        assert_eq!(
            (
                d.watermark_backlog_probe,
                d.watermark_backlog_probe_interval_ms
            ),
            (true, 2_000)
        );
        let p = source(&[
            ("subscription", "a"),
            (WATERMARK_BACKLOG_PROBE, "OFF"),
            (WATERMARK_BACKLOG_PROBE_INTERVAL, "500ms"),
        ])
        .unwrap()
        .subscriber;
        assert_eq!(
            (
                p.watermark_backlog_probe,
                p.watermark_backlog_probe_interval_ms
            ),
            (false, 500)
        );
        for (k, v, why) in [
            (
                WATERMARK_BACKLOG_PROBE,
                "sometimes",
                "must be one of 'on', 'off'",
            ),
            (WATERMARK_BACKLOG_PROBE_INTERVAL, "0s", "at least 100ms"),
            (WATERMARK_BACKLOG_PROBE_INTERVAL, "99ms", "at least 100ms"),
            (WATERMARK_BACKLOG_PROBE_INTERVAL, "-1s", ""),
            (
                WATERMARK_BACKLOG_PROBE_INTERVAL,
                "100.5ms",
                "whole number of milliseconds",
            ),
        ] {
            let e = source(&[("subscription", "a"), (k, v)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(k) && e.contains(v) && e.contains(why),
                "{k} = {v}: {e}"
            );
        }
        // The window and the bound need the attribute.
        let e = source(&[("subscription", "a"), (DEDUP_WINDOW, "1m")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'scan.dedup.window' needs 'scan.dedup.attribute'"),
            "{e}"
        );
    }

    #[test]
    fn start_position_and_auto_create_conflicts_name_their_keys() {
        let e = |pairs: &[(&str, &str)]| source(pairs).unwrap_err().to_string();
        let s = source(&[
            ("subscription", "a"),
            (STARTUP_MODE, "timestamp"),
            (STARTUP_TIMESTAMP_MILLIS, "1700000000000"),
        ])
        .unwrap();
        assert_eq!(
            s.start_position,
            StartPosition::Timestamp {
                millis: 1_700_000_000_000
            }
        );
        assert!(e(&[("subscription", "a"), (STARTUP_MODE, "timestamp")])
            .contains(STARTUP_TIMESTAMP_MILLIS));
        assert!(e(&[("subscription", "a"), (STARTUP_TIMESTAMP_MILLIS, "5")])
            .contains("applies only with"));
        assert!(e(&[("subscription", "a"), (STARTUP_MODE, "newest")]).contains("'newest'"));
        assert!(
            e(&[("subscription", "a"), (AUTO_CREATE_ACK_DEADLINE, "30s")])
                .contains(AUTO_CREATE_TOPICS)
        );
        assert!(e(&[("subscription", "a"), (AUTO_CREATE_TOPICS, "b:t")])
            .contains("not in 'subscription'"));
        assert!(
            e(&[("subscription", "a"), (AUTO_CREATE_TOPICS, "a")]).contains("'subscription:topic'")
        );
        assert!(e(&[("subscription", "a;"),]).contains("none blank"));
        assert!(e(&[
            ("subscription", "a"),
            (AUTO_CREATE_TOPICS, "a:t"),
            (AUTO_CREATE_EXPIRATION_TTL, "2 days"),
            (AUTO_CREATE_NEVER_EXPIRE, "true")
        ])
        .contains("contradict"));
        assert!(e(&[("subscription", "a"), (SHUTDOWN_TIMEOUT, "1.5ms")])
            .contains("whole number of milliseconds"));
        assert_eq!(sql_key("parallel_pull_count"), PARALLEL_PULL_COUNT);
        assert_eq!(
            sql_key("max_consecutive_failures"),
            MAX_CONSECUTIVE_FAILURES
        );
        // Parsed as an integer here; its rule (at least 1, or -1) is the builder's.
        assert_eq!(
            source(&[("subscription", "a"), (MAX_CONSECUTIVE_FAILURES, "0")])
                .unwrap()
                .max_consecutive_failures,
            0
        );
        assert!(
            e(&[("subscription", "a"), (MAX_CONSECUTIVE_FAILURES, "many")]).contains(
                "'scan.max-consecutive-failures' is invalid: must be an integer, was 'many'"
            )
        );
        assert_eq!(
            source(&[("subscription", "a")])
                .unwrap()
                .max_consecutive_failures,
            100
        );
        for k in SOURCE_OPTIONS {
            assert!(KNOWN_OPTIONS.contains(k), "{k}");
        }
    }
}
