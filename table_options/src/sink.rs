//! Sink `WITH` keys (SPEC 6, 8) and the dead-letter queue keys shared by both sides
//! (SPEC 6.1). Only parsing happens here; the rules live in the connector's builders,
//! whose rejections are renamed with [`sink_sql_key`] / [`dead_letter_sql_key`].

use pubsub_engine_spi::{ConnectorOptions, OptionError};
use pubsub_schema::{
    Authentication, CreateDisposition, DeadLetterQueueConfig, FailureHandler, SinkConfig,
};

use crate::{pull_ms, u32_option};

pub const CREATE_DISPOSITION: &str = "sink.create-disposition";
pub const SINK_AUTO_CREATE_MESSAGE_RETENTION: &str = "sink.auto-create.message-retention";
pub const SINK_AUTO_CREATE_KMS_KEY: &str = "sink.auto-create.kms-key-name";
/// Comma-separated regions, e.g. `europe-west1,europe-west4`.
pub const SINK_AUTO_CREATE_REGIONS: &str = "sink.auto-create.allowed-persistence-regions";
pub const SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT: &str = "sink.auto-create.enforce-in-transit";
pub const BATCH_COUNT: &str = "sink.batching.element-count-threshold";
pub const BATCH_BYTES: &str = "sink.batching.request-byte-threshold";
pub const BATCH_DELAY: &str = "sink.batching.delay-threshold";
pub const RETRY_TOTAL_TIMEOUT: &str = "sink.retry.total-timeout";
pub const RETRY_INITIAL_DELAY: &str = "sink.retry.initial-delay";
pub const RETRY_DELAY_MULTIPLIER: &str = "sink.retry.delay-multiplier";
pub const RETRY_MAX_DELAY: &str = "sink.retry.max-delay";
pub const RETRY_INITIAL_RPC_TIMEOUT: &str = "sink.retry.initial-rpc-timeout";
pub const RETRY_RPC_TIMEOUT_MULTIPLIER: &str = "sink.retry.rpc-timeout-multiplier";
pub const RETRY_MAX_RPC_TIMEOUT: &str = "sink.retry.max-rpc-timeout";
pub const RETRY_MAX_ATTEMPTS: &str = "sink.retry.max-attempts";
pub const MESSAGE_ORDERING: &str = "sink.message-ordering.enabled";
pub const MAX_IN_FLIGHT_MESSAGES: &str = "sink.in-flight.max-messages";
pub const MAX_IN_FLIGHT_BYTES: &str = "sink.in-flight.max-bytes";
pub const PUBLISH_PROGRESS_TIMEOUT: &str = "sink.publish-progress-timeout";
pub const RECOVERY_INITIAL_BACKOFF: &str = "sink.recovery.initial-backoff";
pub const RECOVERY_MAX_BACKOFF: &str = "sink.recovery.max-backoff";
pub const RECOVERY_MAX_ATTEMPTS: &str = "sink.recovery.max-attempts";
pub const MAX_CONSECUTIVE_REJECTIONS: &str = "sink.max-consecutive-rejections";
pub const SINK_SHUTDOWN_TIMEOUT: &str = "sink.shutdown-timeout";
pub const FAILURE_HANDLER: &str = "sink.failure-handler";
/// The attribute each published message carries its record id in (issue 18).
pub const RECORD_ID_ATTRIBUTE: &str = "sink.record-id-attribute";

/// The dead-letter queue keys, after the side's prefix (`sink.` or `scan.`).
pub const DLQ_TOPIC: &str = "dead-letter.topic";
pub const DLQ_KEY_FILE: &str = "dead-letter.service-account-key-file";
pub const DLQ_EMULATOR_ENDPOINT: &str = "dead-letter.emulator-endpoint";
pub const DLQ_MAX_IN_FLIGHT: &str = "dead-letter.max-in-flight-messages";
pub const DLQ_FLUSH_TIMEOUT: &str = "dead-letter.flush-timeout";
pub const DLQ_SHUTDOWN_TIMEOUT: &str = "dead-letter.shutdown-timeout";
const DLQ_SUFFIXES: [&str; 6] = [
    DLQ_TOPIC,
    DLQ_KEY_FILE,
    DLQ_EMULATOR_ENDPOINT,
    DLQ_MAX_IN_FLIGHT,
    DLQ_FLUSH_TIMEOUT,
    DLQ_SHUTDOWN_TIMEOUT,
];

/// Every sink-only key.
pub const SINK_OPTIONS: &[&str] = &[
    CREATE_DISPOSITION,
    SINK_AUTO_CREATE_MESSAGE_RETENTION,
    SINK_AUTO_CREATE_KMS_KEY,
    SINK_AUTO_CREATE_REGIONS,
    SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT,
    BATCH_COUNT,
    BATCH_BYTES,
    BATCH_DELAY,
    RETRY_TOTAL_TIMEOUT,
    RETRY_INITIAL_DELAY,
    RETRY_DELAY_MULTIPLIER,
    RETRY_MAX_DELAY,
    RETRY_INITIAL_RPC_TIMEOUT,
    RETRY_RPC_TIMEOUT_MULTIPLIER,
    RETRY_MAX_RPC_TIMEOUT,
    RETRY_MAX_ATTEMPTS,
    MESSAGE_ORDERING,
    MAX_IN_FLIGHT_MESSAGES,
    MAX_IN_FLIGHT_BYTES,
    PUBLISH_PROGRESS_TIMEOUT,
    RECOVERY_INITIAL_BACKOFF,
    RECOVERY_MAX_BACKOFF,
    RECOVERY_MAX_ATTEMPTS,
    MAX_CONSECUTIVE_REJECTIONS,
    SINK_SHUTDOWN_TIMEOUT,
    FAILURE_HANDLER,
    RECORD_ID_ATTRIBUTE,
    "sink.dead-letter.topic",
    "sink.dead-letter.service-account-key-file",
    "sink.dead-letter.emulator-endpoint",
    "sink.dead-letter.max-in-flight-messages",
    "sink.dead-letter.flush-timeout",
    "sink.dead-letter.shutdown-timeout",
];

/// The source's dead-letter keys (`scan.dead-letter.*`).
pub const SOURCE_DEAD_LETTER_OPTIONS: &[&str] = &[
    "scan.dead-letter.topic",
    "scan.dead-letter.service-account-key-file",
    "scan.dead-letter.emulator-endpoint",
    "scan.dead-letter.max-in-flight-messages",
    "scan.dead-letter.flush-timeout",
    "scan.dead-letter.shutdown-timeout",
];

/// The SQL key of a sink builder option (`PubSubSink` / `PublisherOptions` /
/// `TopicCreateOptions` setter, named by its config path), or `None`.
pub fn sink_sql_key(option: &str) -> Option<&'static str> {
    Some(match option {
        "create_disposition" => CREATE_DISPOSITION,
        "topic_create.message_retention" => SINK_AUTO_CREATE_MESSAGE_RETENTION,
        "topic_create.kms_key_name" => SINK_AUTO_CREATE_KMS_KEY,
        "topic_create.allowed_persistence_regions" => SINK_AUTO_CREATE_REGIONS,
        "topic_create.enforce_in_transit" => SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT,
        "publisher.batching_element_count_threshold" => BATCH_COUNT,
        "publisher.batching_request_byte_threshold" => BATCH_BYTES,
        "publisher.batching_delay_threshold" => BATCH_DELAY,
        "publisher.retry_total_timeout" => RETRY_TOTAL_TIMEOUT,
        "publisher.retry_initial_delay" => RETRY_INITIAL_DELAY,
        "publisher.retry_delay_multiplier" => RETRY_DELAY_MULTIPLIER,
        "publisher.retry_max_delay" => RETRY_MAX_DELAY,
        "publisher.retry_initial_rpc_timeout" => RETRY_INITIAL_RPC_TIMEOUT,
        "publisher.retry_rpc_timeout_multiplier" => RETRY_RPC_TIMEOUT_MULTIPLIER,
        "publisher.retry_max_rpc_timeout" => RETRY_MAX_RPC_TIMEOUT,
        "publisher.retry_max_attempts" => RETRY_MAX_ATTEMPTS,
        "publisher.message_ordering" => MESSAGE_ORDERING,
        "publisher.max_in_flight_messages" => MAX_IN_FLIGHT_MESSAGES,
        "publisher.max_in_flight_bytes" => MAX_IN_FLIGHT_BYTES,
        "publisher.publish_progress_timeout" => PUBLISH_PROGRESS_TIMEOUT,
        "publisher.recovery_initial_backoff" => RECOVERY_INITIAL_BACKOFF,
        "publisher.recovery_max_backoff" => RECOVERY_MAX_BACKOFF,
        "publisher.recovery_max_attempts" => RECOVERY_MAX_ATTEMPTS,
        "publisher.max_consecutive_rejections" => MAX_CONSECUTIVE_REJECTIONS,
        "publisher.shutdown_timeout" => SINK_SHUTDOWN_TIMEOUT,
        "failure_handler" => FAILURE_HANDLER,
        "record_id_attribute" => RECORD_ID_ATTRIBUTE,
        "topic" => crate::TOPIC,
        "project" => crate::PROJECT,
        "emulator_endpoint" => crate::EMULATOR_ENDPOINT,
        other => return dead_letter_sql_key("sink.", other),
    })
}

/// The SQL key of a `PubSubDeadLetterQueue` builder option (`dead_letter.topic`, ...)
/// under `prefix` (`sink.` or `scan.`), or `None`.
pub fn dead_letter_sql_key(prefix: &str, option: &str) -> Option<&'static str> {
    let suffix = match option {
        "dead_letter.topic" => DLQ_TOPIC,
        "dead_letter.service_account_key_file" => DLQ_KEY_FILE,
        "dead_letter.emulator_endpoint" => DLQ_EMULATOR_ENDPOINT,
        "dead_letter.max_in_flight_messages" => DLQ_MAX_IN_FLIGHT,
        "dead_letter.flush_timeout" => DLQ_FLUSH_TIMEOUT,
        "dead_letter.shutdown_timeout" => DLQ_SHUTDOWN_TIMEOUT,
        _ => return None,
    };
    let list = if prefix == "scan." {
        SOURCE_DEAD_LETTER_OPTIONS
    } else {
        &SINK_OPTIONS[SINK_OPTIONS.len() - DLQ_SUFFIXES.len()..]
    };
    list.iter().copied().find(|k| k.ends_with(suffix))
}

/// Maps the sink keys onto the table config (parsing only).
pub(crate) fn sink_options(
    o: &mut ConnectorOptions,
    topic: String,
) -> Result<SinkConfig, OptionError> {
    let mut c = SinkConfig::new(topic);
    if let Some(d) = o.pull_opt_with(CREATE_DISPOSITION, |v| {
        match v.trim().to_ascii_lowercase().as_str() {
            "create-if-needed" => Ok(CreateDisposition::CreateIfNeeded),
            "create-never" => Ok(CreateDisposition::CreateNever),
            _ => Err("must be one of 'create-if-needed', 'create-never'".to_string()),
        }
    })? {
        c.create_disposition = d;
    }
    let t = &mut c.topic_create;
    t.message_retention_ms = pull_ms(o, SINK_AUTO_CREATE_MESSAGE_RETENTION)?;
    t.kms_key_name = o.pull_opt_str(SINK_AUTO_CREATE_KMS_KEY)?;
    if let Some(v) = o.pull_opt_str(SINK_AUTO_CREATE_REGIONS)? {
        t.allowed_persistence_regions = v.split(',').map(|r| r.trim().to_string()).collect();
    }
    t.enforce_in_transit = o
        .pull_opt_bool(SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT)?
        .unwrap_or(false);

    let p = &mut c.publisher;
    if let Some(v) = o.pull_opt_u64(BATCH_COUNT)? {
        p.batching_element_count_threshold = u32_option(BATCH_COUNT, v)?;
    }
    if let Some(v) = o.pull_opt_data_size_bytes(BATCH_BYTES)? {
        p.batching_request_byte_threshold = u32_option(BATCH_BYTES, v)?;
    }
    if let Some(v) = pull_ms(o, BATCH_DELAY)? {
        p.batching_delay_threshold_ms = v;
    }
    let r = &mut p.retry;
    r.total_timeout_ms = pull_ms(o, RETRY_TOTAL_TIMEOUT)?;
    r.initial_delay_ms = pull_ms(o, RETRY_INITIAL_DELAY)?;
    r.delay_multiplier = pull_f64(o, RETRY_DELAY_MULTIPLIER)?;
    r.max_delay_ms = pull_ms(o, RETRY_MAX_DELAY)?;
    r.initial_rpc_timeout_ms = pull_ms(o, RETRY_INITIAL_RPC_TIMEOUT)?;
    r.rpc_timeout_multiplier = pull_f64(o, RETRY_RPC_TIMEOUT_MULTIPLIER)?;
    r.max_rpc_timeout_ms = pull_ms(o, RETRY_MAX_RPC_TIMEOUT)?;
    if let Some(v) = o.pull_opt_u64(RETRY_MAX_ATTEMPTS)? {
        r.max_attempts = Some(u32_option(RETRY_MAX_ATTEMPTS, v)?);
    }
    if let Some(v) = o.pull_opt_bool(MESSAGE_ORDERING)? {
        p.message_ordering = v;
    }
    if let Some(v) = o.pull_opt_u64(MAX_IN_FLIGHT_MESSAGES)? {
        p.max_in_flight_messages = v;
    }
    if let Some(v) = o.pull_opt_data_size_bytes(MAX_IN_FLIGHT_BYTES)? {
        p.max_in_flight_bytes = v;
    }
    if let Some(v) = pull_ms(o, PUBLISH_PROGRESS_TIMEOUT)? {
        p.publish_progress_timeout_ms = v;
    }
    if let Some(v) = pull_ms(o, RECOVERY_INITIAL_BACKOFF)? {
        p.recovery.initial_backoff_ms = v;
    }
    if let Some(v) = pull_ms(o, RECOVERY_MAX_BACKOFF)? {
        p.recovery.max_backoff_ms = v;
    }
    if let Some(v) = o.pull_opt_u64(RECOVERY_MAX_ATTEMPTS)? {
        p.recovery.max_attempts = u32_option(RECOVERY_MAX_ATTEMPTS, v)?;
    }
    if let Some(v) = pull_i64(o, MAX_CONSECUTIVE_REJECTIONS)? {
        p.max_consecutive_rejections = v;
    }
    if let Some(v) = pull_ms(o, SINK_SHUTDOWN_TIMEOUT)? {
        p.shutdown_timeout_ms = v;
    }
    if let Some(h) = o.pull_opt_with(FAILURE_HANDLER, |v| {
        match v.trim().to_ascii_lowercase().as_str() {
            "fail" => Ok(FailureHandler::Fail),
            "log-and-drop" => Ok(FailureHandler::LogAndDrop),
            "dead-letter" => Ok(FailureHandler::DeadLetter),
            _ => Err("must be one of 'fail', 'log-and-drop', 'dead-letter'".to_string()),
        }
    })? {
        c.failure_handler = h;
    }
    c.dead_letter = dead_letter_options(o, "sink.")?;
    c.record_id_attribute = o.pull_opt_str(RECORD_ID_ATTRIBUTE)?;
    Ok(c)
}

/// The `{prefix}dead-letter.*` keys (prefix `sink.` or `scan.`): `None` when no key is
/// set; other keys without `topic` are refused.
pub(crate) fn dead_letter_options(
    o: &mut ConnectorOptions,
    prefix: &str,
) -> Result<Option<DeadLetterQueueConfig>, OptionError> {
    let key = |suffix: &str| format!("{prefix}{suffix}");
    let topic = o.pull_opt_str(&key(DLQ_TOPIC))?;
    let key_file = o.pull_opt_str(&key(DLQ_KEY_FILE))?;
    let endpoint = o.pull_opt_str(&key(DLQ_EMULATOR_ENDPOINT))?;
    let in_flight = pull_i64(o, &key(DLQ_MAX_IN_FLIGHT))?;
    let flush = pull_ms(o, &key(DLQ_FLUSH_TIMEOUT))?;
    let shutdown = pull_ms(o, &key(DLQ_SHUTDOWN_TIMEOUT))?;
    let Some(topic) = topic else {
        let set = [
            (key_file.is_some(), DLQ_KEY_FILE),
            (endpoint.is_some(), DLQ_EMULATOR_ENDPOINT),
            (in_flight.is_some(), DLQ_MAX_IN_FLIGHT),
            (flush.is_some(), DLQ_FLUSH_TIMEOUT),
            (shutdown.is_some(), DLQ_SHUTDOWN_TIMEOUT),
        ];
        if let Some((_, k)) = set.iter().find(|(s, _)| *s) {
            return Err(OptionError::Conflict {
                message: format!(
                    "option '{}' needs '{}' (the dead-letter topic)",
                    key(k),
                    key(DLQ_TOPIC)
                ),
            });
        }
        return Ok(None);
    };
    let mut c = DeadLetterQueueConfig::new(topic);
    c.authentication = match (key_file, endpoint) {
        (Some(_), Some(_)) => {
            return Err(OptionError::Conflict {
                message: format!(
                    "options '{}' and '{}' cannot both be set: an emulator takes no credentials",
                    key(DLQ_KEY_FILE),
                    key(DLQ_EMULATOR_ENDPOINT)
                ),
            })
        }
        (Some(path), None) => Authentication::ServiceAccountKeyFile { path },
        (None, Some(endpoint)) => Authentication::Emulator {
            endpoint: endpoint.trim().to_string(),
        },
        (None, None) => Authentication::ApplicationDefault,
    };
    if let Some(v) = in_flight {
        c.max_in_flight_messages = v;
    }
    if let Some(v) = flush {
        c.flush_timeout_ms = v;
    }
    if let Some(v) = shutdown {
        c.shutdown_timeout_ms = v;
    }
    Ok(Some(c))
}

fn pull_f64(o: &mut ConnectorOptions, key: &str) -> Result<Option<f64>, OptionError> {
    o.pull_opt_with(key, |v| match v.trim().parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err("must be a number".to_string()),
    })
}

pub(crate) fn pull_i64(o: &mut ConnectorOptions, key: &str) -> Result<Option<i64>, OptionError> {
    o.pull_opt_with(key, |v| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| "must be an integer".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_schema::PubSubTable;

    fn sink(pairs: &[(&str, &str)]) -> Result<SinkConfig, OptionError> {
        let mut o = ConnectorOptions::new(
            [("project", "p"), ("topic", "out")]
                .iter()
                .chain(pairs)
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        match crate::table_from_options(&mut o)? {
            PubSubTable::Sink(s) => Ok(s),
            PubSubTable::Source(_) => panic!("sink expected"),
        }
    }

    #[test]
    fn every_sink_key_maps_onto_its_field() {
        let pairs = [
            (CREATE_DISPOSITION, "create-never"),
            (SINK_AUTO_CREATE_MESSAGE_RETENTION, "1 day"),
            (
                SINK_AUTO_CREATE_KMS_KEY,
                "projects/p/locations/l/keyRings/r/cryptoKeys/k",
            ),
            (SINK_AUTO_CREATE_REGIONS, "europe-west1, europe-west4"),
            (SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT, "true"),
            (BATCH_COUNT, "11"),
            (BATCH_BYTES, "12kb"),
            (BATCH_DELAY, "13ms"),
            (RETRY_TOTAL_TIMEOUT, "14s"),
            (RETRY_INITIAL_DELAY, "15ms"),
            (RETRY_DELAY_MULTIPLIER, "1.6"),
            (RETRY_MAX_DELAY, "17s"),
            (RETRY_INITIAL_RPC_TIMEOUT, "18s"),
            (RETRY_RPC_TIMEOUT_MULTIPLIER, "1.9"),
            (RETRY_MAX_RPC_TIMEOUT, "20s"),
            (RETRY_MAX_ATTEMPTS, "21"),
            (MESSAGE_ORDERING, "true"),
            (MAX_IN_FLIGHT_MESSAGES, "22"),
            (MAX_IN_FLIGHT_BYTES, "23mib"),
            (PUBLISH_PROGRESS_TIMEOUT, "24s"),
            (RECOVERY_INITIAL_BACKOFF, "25ms"),
            (RECOVERY_MAX_BACKOFF, "26s"),
            (RECOVERY_MAX_ATTEMPTS, "27"),
            (MAX_CONSECUTIVE_REJECTIONS, "-1"),
            (SINK_SHUTDOWN_TIMEOUT, "28s"),
            (FAILURE_HANDLER, "dead-letter"),
            (RECORD_ID_ATTRIBUTE, "record-id"),
            ("sink.dead-letter.topic", "dead"),
            ("sink.dead-letter.emulator-endpoint", "127.0.0.1:8085"),
            ("sink.dead-letter.max-in-flight-messages", "-1"),
            ("sink.dead-letter.flush-timeout", "29s"),
            ("sink.dead-letter.shutdown-timeout", "30s"),
        ];
        // Every sink key but the key file (which excludes the emulator endpoint) is set.
        let set: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        let unset: Vec<&&str> = SINK_OPTIONS.iter().filter(|k| !set.contains(k)).collect();
        assert_eq!(unset, [&"sink.dead-letter.service-account-key-file"]);
        let c = sink(&pairs).unwrap();
        assert_eq!(c.topic, "out");
        assert_eq!(c.create_disposition, CreateDisposition::CreateNever);
        let t = &c.topic_create;
        assert_eq!(t.message_retention_ms, Some(86_400_000));
        assert_eq!(
            t.kms_key_name.as_deref(),
            Some("projects/p/locations/l/keyRings/r/cryptoKeys/k")
        );
        assert_eq!(
            t.allowed_persistence_regions,
            ["europe-west1", "europe-west4"]
        );
        assert!(t.enforce_in_transit);
        let p = &c.publisher;
        assert_eq!(
            (
                p.batching_element_count_threshold,
                p.batching_request_byte_threshold,
                p.batching_delay_threshold_ms
            ),
            (11, 12_000, 13)
        );
        let r = &p.retry;
        assert_eq!(r.total_timeout_ms, Some(14_000));
        assert_eq!(r.initial_delay_ms, Some(15));
        assert_eq!(r.delay_multiplier, Some(1.6));
        assert_eq!(r.max_delay_ms, Some(17_000));
        assert_eq!(r.initial_rpc_timeout_ms, Some(18_000));
        assert_eq!(r.rpc_timeout_multiplier, Some(1.9));
        assert_eq!(r.max_rpc_timeout_ms, Some(20_000));
        assert_eq!(r.max_attempts, Some(21));
        assert!(p.message_ordering);
        assert_eq!(p.max_in_flight_messages, 22);
        assert_eq!(p.max_in_flight_bytes, 23 << 20);
        assert_eq!(p.publish_progress_timeout_ms, 24_000);
        assert_eq!(
            (
                p.recovery.initial_backoff_ms,
                p.recovery.max_backoff_ms,
                p.recovery.max_attempts
            ),
            (25, 26_000, 27)
        );
        assert_eq!(p.max_consecutive_rejections, -1);
        assert_eq!(p.shutdown_timeout_ms, 28_000);
        assert_eq!(c.failure_handler, FailureHandler::DeadLetter);
        assert_eq!(c.record_id_attribute.as_deref(), Some("record-id"));
        let d = c.dead_letter.as_ref().unwrap();
        assert_eq!(d.topic, "dead");
        assert_eq!(
            d.authentication,
            Authentication::Emulator {
                endpoint: "127.0.0.1:8085".into()
            }
        );
        assert_eq!(
            (
                d.max_in_flight_messages,
                d.flush_timeout_ms,
                d.shutdown_timeout_ms
            ),
            (-1, 29_000, 30_000)
        );
        // The key file, the one key left.
        let d = sink(&[
            ("sink.dead-letter.topic", "dead"),
            ("sink.dead-letter.service-account-key-file", "/k.json"),
        ])
        .unwrap()
        .dead_letter
        .unwrap();
        assert_eq!(
            d.authentication,
            Authentication::ServiceAccountKeyFile {
                path: "/k.json".into()
            }
        );
    }

    #[test]
    fn dead_letter_options_name_their_key_on_either_side() {
        for suffix in DLQ_SUFFIXES {
            let option = suffix.replace('-', "_");
            for prefix in ["sink.", "scan."] {
                assert_eq!(
                    dead_letter_sql_key(prefix, &option),
                    Some(format!("{prefix}{suffix}").as_str()),
                    "{option}"
                );
            }
            assert_eq!(sink_sql_key(&option), dead_letter_sql_key("sink.", &option));
        }
    }
}
