//! SQL `WITH` options -> validated Pub/Sub profile and table config (SPEC 5.3, 8).
//! Every error names the option key and the rejected value.

use std::time::Duration;

use pubsub_engine::{ConnectorOptions, OptionError};
use pubsub_schema::{
    Authentication, DeserializationFailurePolicy, PubSubProfile, PubSubTable, SinkConfig,
    SourceConfig,
};

pub const PROJECT: &str = "project";
pub const EMULATOR_ENDPOINT: &str = "emulator-endpoint";
/// Path of a service account key file (JSON), read by the process that runs the job; never
/// echoed in an error or log line (SPEC 5.3, 10).
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "service-account-key-file";
pub const SUBSCRIPTION: &str = "subscription";
pub const TOPIC: &str = "topic";
pub const MAX_OUTSTANDING_MESSAGES: &str = "scan.flow-control.max-outstanding-element-count";
pub const MAX_OUTSTANDING_BYTES: &str = "scan.flow-control.max-outstanding-request-bytes";
pub const PARALLEL_PULL_COUNT: &str = "scan.parallel-pull-count";
pub const MAX_ACK_EXTENSION_PERIOD: &str = "scan.ack.max-extension-period";
pub const MAX_DURATION_PER_ACK_EXTENSION: &str = "scan.ack.max-duration-per-extension";
/// `fail` (default) | `drop` | `nack` (SPEC 5.3).
pub const DESERIALIZATION_FAILURE_POLICY: &str = "scan.deserialization-failure-policy";
pub const BATCH_COUNT: &str = "sink.batching.element-count-threshold";
pub const BATCH_BYTES: &str = "sink.batching.request-byte-threshold";
pub const BATCH_DELAY: &str = "sink.batching.delay-threshold";
pub const MAX_IN_FLIGHT_MESSAGES: &str = "sink.in-flight.max-messages";

/// Every key this layer understands.
pub const KNOWN_OPTIONS: &[&str] = &[
    PROJECT,
    EMULATOR_ENDPOINT,
    SERVICE_ACCOUNT_KEY_FILE,
    SUBSCRIPTION,
    TOPIC,
    MAX_OUTSTANDING_MESSAGES,
    MAX_OUTSTANDING_BYTES,
    PARALLEL_PULL_COUNT,
    MAX_ACK_EXTENSION_PERIOD,
    MAX_DURATION_PER_ACK_EXTENSION,
    DESERIALIZATION_FAILURE_POLICY,
    BATCH_COUNT,
    BATCH_BYTES,
    BATCH_DELAY,
    MAX_IN_FLIGHT_MESSAGES,
];

const SOURCE_ONLY: &[&str] = &[
    MAX_OUTSTANDING_MESSAGES,
    MAX_OUTSTANDING_BYTES,
    PARALLEL_PULL_COUNT,
    MAX_ACK_EXTENSION_PERIOD,
    MAX_DURATION_PER_ACK_EXTENSION,
    DESERIALIZATION_FAILURE_POLICY,
];
const SINK_ONLY: &[&str] = &[
    BATCH_COUNT,
    BATCH_BYTES,
    BATCH_DELAY,
    MAX_IN_FLIGHT_MESSAGES,
];

fn invalid(key: &str, value: impl ToString, reason: &str) -> OptionError {
    OptionError::Invalid {
        key: key.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Validates `host:port` (port 1..65535, host non-empty). Source: SPEC 5.3.
pub fn parse_endpoint(value: &str) -> Result<String, OptionError> {
    let bad = |reason: &str| invalid(EMULATOR_ENDPOINT, value, reason);
    let v = value.trim();
    let (host, port) = v.rsplit_once(':').ok_or_else(|| bad("must be host:port"))?;
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return Err(bad("must be host:port with a host name or address"));
    }
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(v.to_string()),
        _ => Err(bad("port must be 1..65535")),
    }
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
                pubsub_engine::suggest(k, &[SUBSCRIPTION, TOPIC]).map(|s| (k.clone(), s))
            });
            let mut message = format!("set option '{SUBSCRIPTION}' (a source) or '{TOPIC}' (a sink)");
            if let Some((k, s)) = hint {
                message.push_str(&format!(": unknown option '{k}', did you mean '{s}'?"));
            }
            Err(OptionError::Conflict { message })
        }
        (Some(sub), None) => {
            if let Some(k) = keys.iter().find(|k| SINK_ONLY.contains(&k.as_str())) {
                return Err(OptionError::Conflict { message: format!("option '{k}' applies to sinks, but this table reads subscription '{sub}'") });
            }
            source_options(options, parse_id(SUBSCRIPTION, sub)?).map(PubSubTable::Source)
        }
        (None, Some(topic)) => {
            if let Some(k) = keys.iter().find(|k| SOURCE_ONLY.contains(&k.as_str())) {
                return Err(OptionError::Conflict { message: format!("option '{k}' applies to sources, but this table writes topic '{topic}'") });
            }
            sink_options(options, parse_id(TOPIC, topic)?).map(PubSubTable::Sink)
        }
    }
}

fn source_options(
    o: &mut ConnectorOptions,
    subscription: String,
) -> Result<SourceConfig, OptionError> {
    let mut c = SourceConfig::new(subscription);
    if let Some(v) = o.pull_opt_nonzero_u64(MAX_OUTSTANDING_MESSAGES)? {
        c.max_outstanding_messages = Some(v);
    }
    if let Some(v) = o.pull_opt_with(MAX_OUTSTANDING_BYTES, positive_size)? {
        c.max_outstanding_bytes = v;
    }
    if let Some(v) = o.pull_opt_nonzero_u64(PARALLEL_PULL_COUNT)? {
        c.parallel_pull_count = u32::try_from(v)
            .map_err(|_| invalid(PARALLEL_PULL_COUNT, v, "must be at most 4294967295"))?;
    }
    if let Some(d) = o.pull_opt_duration(MAX_ACK_EXTENSION_PERIOD)? {
        c.max_ack_extension_period_ms = d.as_millis() as u64;
    }
    if let Some(d) = o.pull_opt_duration(MAX_DURATION_PER_ACK_EXTENSION)? {
        // The client clamps this to 10 s..600 s; reject what it would silently change.
        if d < Duration::from_secs(10) || d > Duration::from_secs(600) {
            return Err(invalid(
                MAX_DURATION_PER_ACK_EXTENSION,
                format!("{d:?}"),
                "must be between 10s and 600s",
            ));
        }
        c.max_duration_per_ack_extension_ms = Some(d.as_millis() as u64);
    }
    if let Some(p) = o.pull_opt_with(DESERIALIZATION_FAILURE_POLICY, parse_failure_policy)? {
        c.deserialization_failure_policy = p;
    }
    Ok(c)
}

fn sink_options(o: &mut ConnectorOptions, topic: String) -> Result<SinkConfig, OptionError> {
    let mut c = SinkConfig::new(topic);
    if let Some(v) = o.pull_opt_nonzero_u64(BATCH_COUNT)? {
        // Pub/Sub accepts at most 1000 messages per publish request.
        if v > 1000 {
            return Err(invalid(
                BATCH_COUNT,
                v,
                "must be at most 1000 (Pub/Sub's messages per request)",
            ));
        }
        c.batching_element_count_threshold = v as u32;
    }
    if let Some(v) = o.pull_opt_with(BATCH_BYTES, positive_size)? {
        // Pub/Sub's request size limit is 10 MB.
        if v > 10_000_000 {
            return Err(invalid(
                BATCH_BYTES,
                v,
                "must be at most 10000000 (Pub/Sub's request limit)",
            ));
        }
        c.batching_request_byte_threshold = v as u32;
    }
    if let Some(d) = o.pull_opt_duration(BATCH_DELAY)? {
        c.batching_delay_threshold_ms = d.as_millis() as u64;
    }
    if let Some(v) = o.pull_opt_nonzero_u64(MAX_IN_FLIGHT_MESSAGES)? {
        c.max_in_flight_messages = v;
    }
    Ok(c)
}

/// `fail` | `drop` | `nack`, case-insensitive.
fn parse_failure_policy(v: &str) -> Result<DeserializationFailurePolicy, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "fail" => Ok(DeserializationFailurePolicy::Fail),
        "drop" => Ok(DeserializationFailurePolicy::Drop),
        "nack" => Ok(DeserializationFailurePolicy::Nack),
        _ => Err("must be one of 'fail', 'drop', 'nack'".to_string()),
    }
}

fn positive_size(v: &str) -> Result<u64, String> {
    match pubsub_engine::duration::parse_data_size(v)? {
        0 => Err("must be positive".to_string()),
        n => Ok(n),
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
        assert_eq!(s.parallel_pull_count, 4);
        assert_eq!(s.max_ack_extension_period_ms, 1_800_000);
        assert_eq!(s.max_outstanding_messages, None);
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
            (PARALLEL_PULL_COUNT, "0"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "option 'scan.parallel-pull-count' is invalid: must be positive, was '0'"
        );
        let e =
            table_from_options(&mut opts(&[("topic", "t"), (BATCH_COUNT, "5000")])).unwrap_err();
        assert!(e.to_string().contains(BATCH_COUNT), "{e}");
        let e = table_from_options(&mut opts(&[("topic", "t"), (PARALLEL_PULL_COUNT, "2")]))
            .unwrap_err();
        assert!(e.to_string().contains("applies to sources"), "{e}");
        let e = table_from_options(&mut opts(&[("subscription", "a/b")])).unwrap_err();
        assert!(e.to_string().contains("'subscription'"), "{e}");
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
        assert_eq!(s.max_outstanding_messages, Some(7));
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
}
