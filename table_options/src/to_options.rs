//! Typed configs -> SQL `WITH` options: the inverse of [`crate::profile_from_options`]
//! and [`crate::table_from_options`], for a `CREATE TABLE` written from a UI (SPEC 7).
//! Only values that differ from the defaults are written. Durations are written in `ms`,
//! sizes in bytes, so parsing them back gives exactly the config.

use pubsub_schema::{
    Authentication, DeadLetterQueueConfig, Expiration, OrderingMode, PubSubProfile, PubSubTable,
    PublisherConfig, SinkConfig, SourceConfig, StartPosition, SubscriberOptionsConfig,
    SubscriptionCreateConfig,
};

use crate::*;

/// A config that SQL options cannot hold. `field` is the JSON pointer of the value in the
/// table config (e.g. `/subscriptions/1/create`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotExpressible {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for NotExpressible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for NotExpressible {}

/// `(key, value)` pairs in the order they are written.
pub type OptionPairs = Vec<(String, String)>;

fn ms(v: u64) -> String {
    format!("{v}ms")
}

fn num(v: u64) -> String {
    v.to_string()
}

/// The profile's options: `project`, and `emulator-endpoint` or `service-account-key-file`.
/// The key file path is written as it is: callers that show the result to someone other
/// than the profile's owner must redact it (SPEC 10).
pub fn profile_to_options(p: &PubSubProfile) -> OptionPairs {
    let mut out = vec![(PROJECT.to_string(), p.project.clone())];
    out.extend(auth_options(
        &p.authentication,
        EMULATOR_ENDPOINT,
        SERVICE_ACCOUNT_KEY_FILE,
    ));
    out
}

fn auth_options(a: &Authentication, endpoint_key: &str, key_file_key: &str) -> OptionPairs {
    match a {
        Authentication::ApplicationDefault => vec![],
        Authentication::Emulator { endpoint } => vec![(endpoint_key.into(), endpoint.clone())],
        Authentication::ServiceAccountKeyFile { path } => {
            vec![(key_file_key.into(), path.clone())]
        }
    }
}

/// The table's options (without the profile's). Errors when the config holds what one
/// set of `WITH` options cannot: subscriptions whose create options differ other than in
/// their topic (SQL has one set of `scan.auto-create.*` keys).
pub fn table_to_options(t: &PubSubTable) -> Result<OptionPairs, NotExpressible> {
    match t {
        PubSubTable::Source(s) => source_to_options(s),
        PubSubTable::Sink(s) => Ok(sink_to_options(s)),
    }
}

fn source_to_options(s: &SourceConfig) -> Result<OptionPairs, NotExpressible> {
    let mut o = Out::default();
    let ids: Vec<&str> = s.subscriptions.iter().map(|c| c.id.as_str()).collect();
    o.put(SUBSCRIPTION, ids.join(";"));
    match s.start_position {
        StartPosition::ContinueFromSubscription => {}
        StartPosition::EarliestRetained => o.put(STARTUP_MODE, "earliest-retained"),
        StartPosition::Latest => o.put(STARTUP_MODE, "latest"),
        StartPosition::Timestamp { millis } => {
            o.put(STARTUP_MODE, "timestamp");
            o.put(STARTUP_TIMESTAMP_MILLIS, millis.to_string());
        }
    }
    if s.ordering_mode == OrderingMode::PerKey {
        o.put(ORDERING_MODE, "per-key");
    }
    if s.deserialization_failure_policy != Default::default() {
        o.put(
            DESERIALIZATION_FAILURE_POLICY,
            s.deserialization_failure_policy.as_str(),
        );
    }
    o.changed(
        MAX_CONSECUTIVE_FAILURES,
        s.max_consecutive_failures,
        pubsub_schema::DEFAULT_MAX_CONSECUTIVE_FAILURES,
    );
    subscriber_options(&mut o, &s.subscriber);
    auto_create_options(&mut o, s)?;
    if let Some(d) = &s.dead_letter {
        dead_letter_to_options(&mut o, "scan.", d);
    }
    if let Some(d) = &s.dedup {
        let default = pubsub_schema::DedupConfig::new(&d.attribute);
        o.put(DEDUP_ATTRIBUTE, d.attribute.clone());
        o.opt(
            DEDUP_WINDOW,
            (d.window_ms != default.window_ms).then_some(d.window_ms),
            ms,
        );
        o.changed(DEDUP_MAX_IDS, d.max_ids, default.max_ids);
    }
    o.opt(EVENT_TIME_ATTRIBUTE, s.event_time_attribute.clone(), |a| a);
    if let Some(a) = &s.alignment {
        o.put(ALIGNMENT_GROUP, a.group.clone());
        o.put(ALIGNMENT_MAX_DRIFT, ms(a.max_drift_ms));
        o.opt(
            ALIGNMENT_UPDATE_INTERVAL,
            (a.update_interval_ms != pubsub_schema::DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS)
                .then_some(a.update_interval_ms),
            ms,
        );
    }
    Ok(o.0)
}

fn subscriber_options(o: &mut Out, s: &SubscriberOptionsConfig) {
    let d = SubscriberOptionsConfig::default();
    o.opt(MAX_OUTSTANDING_MESSAGES, s.max_outstanding_messages, num);
    o.changed(
        MAX_OUTSTANDING_BYTES,
        s.max_outstanding_bytes,
        d.max_outstanding_bytes,
    );
    o.opt(
        SUBSCRIBER_BUFFER_MAX_MESSAGES,
        s.subscriber_buffer_max_messages,
        num,
    );
    o.opt(
        SUBSCRIBER_BUFFER_MAX_BYTES,
        s.subscriber_buffer_max_bytes,
        num,
    );
    o.opt(
        PAUSED_SPLIT_BUFFER_MAX_MESSAGES,
        s.paused_split_buffer_max_messages,
        num,
    );
    o.opt(
        PAUSED_SPLIT_BUFFER_MAX_BYTES,
        s.paused_split_buffer_max_bytes,
        num,
    );
    o.changed(
        PARALLEL_PULL_COUNT,
        s.parallel_pull_count,
        d.parallel_pull_count,
    );
    if s.max_ack_extension_period_ms != d.max_ack_extension_period_ms {
        o.put(MAX_ACK_EXTENSION_PERIOD, ms(s.max_ack_extension_period_ms));
    }
    o.opt(
        MIN_DURATION_PER_ACK_EXTENSION,
        s.min_duration_per_ack_extension_ms,
        ms,
    );
    o.opt(
        MAX_DURATION_PER_ACK_EXTENSION,
        s.max_duration_per_ack_extension_ms,
        ms,
    );
    o.opt(AWAIT_ACK_CONFIRMATION, s.await_ack_confirmation_ms, ms);
    if s.shutdown_timeout_ms != d.shutdown_timeout_ms {
        o.put(SHUTDOWN_TIMEOUT, ms(s.shutdown_timeout_ms));
    }
    o.changed(
        MAX_RECORDS_PER_FETCH,
        s.max_records_per_fetch,
        d.max_records_per_fetch,
    );
    if s.first_checkpoint_timeout_ms != d.first_checkpoint_timeout_ms {
        o.put(FIRST_CHECKPOINT_TIMEOUT, ms(s.first_checkpoint_timeout_ms));
    }
    o.opt(RATE_LIMIT, s.rate_limit_messages_per_second, num);
    if s.watermark_idle_timeout_ms != d.watermark_idle_timeout_ms {
        o.put(WATERMARK_IDLE_TIMEOUT, ms(s.watermark_idle_timeout_ms));
    }
    o.opt(
        WATERMARK_OUT_OF_ORDERNESS,
        s.watermark_out_of_orderness_ms,
        ms,
    );
    if s.watermark_backlog_probe != d.watermark_backlog_probe {
        let v = if s.watermark_backlog_probe {
            "on"
        } else {
            "off"
        };
        o.put(WATERMARK_BACKLOG_PROBE, v.to_string());
    }
    if s.watermark_backlog_probe_interval_ms != d.watermark_backlog_probe_interval_ms {
        o.put(
            WATERMARK_BACKLOG_PROBE_INTERVAL,
            ms(s.watermark_backlog_probe_interval_ms),
        );
    }
}

/// `scan.auto-create.*`: the topics of every subscription to create, and the first one's
/// other options, which every other one must share.
fn auto_create_options(o: &mut Out, s: &SourceConfig) -> Result<(), NotExpressible> {
    let creates: Vec<(usize, &str, &SubscriptionCreateConfig)> = s
        .subscriptions
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.create.as_ref().map(|cr| (i, c.id.as_str(), cr)))
        .collect();
    let Some((_, _, first)) = creates.first() else {
        return Ok(());
    };
    let same = |c: &SubscriptionCreateConfig| SubscriptionCreateConfig {
        topic: String::new(),
        ..c.clone()
    };
    if let Some((i, _, _)) = creates.iter().find(|(_, _, c)| same(c) != same(first)) {
        return Err(NotExpressible {
            field: format!("/subscriptions/{i}/create"),
            message: "SQL options hold one set of 'scan.auto-create.*' options for every subscription to create: give this subscription the same create options as the first one (only the topic may differ)".into(),
        });
    }
    let pairs: Vec<String> = creates
        .iter()
        .map(|(_, id, c)| format!("{id}:{}", c.topic))
        .collect();
    o.put(AUTO_CREATE_TOPICS, pairs.join(","));
    o.opt(AUTO_CREATE_ACK_DEADLINE, first.ack_deadline_ms, ms);
    if first.message_ordering {
        o.put(AUTO_CREATE_MESSAGE_ORDERING, "true");
    }
    o.opt(
        AUTO_CREATE_MESSAGE_RETENTION,
        first.message_retention_ms,
        ms,
    );
    if first.retain_acked_messages {
        o.put(AUTO_CREATE_RETAIN_ACKED, "true");
    }
    match first.expiration {
        None => {}
        Some(Expiration::Ttl { ttl_ms }) => o.put(AUTO_CREATE_EXPIRATION_TTL, ms(ttl_ms)),
        Some(Expiration::Never) => o.put(AUTO_CREATE_NEVER_EXPIRE, "true"),
    }
    if let Some(d) = &first.dead_letter {
        o.put(AUTO_CREATE_DEAD_LETTER_TOPIC, d.topic.clone());
        // Parsing reads a missing count as 5.
        if d.max_delivery_attempts != 5 {
            o.put(
                AUTO_CREATE_DEAD_LETTER_ATTEMPTS,
                d.max_delivery_attempts.to_string(),
            );
        }
    }
    o.opt(AUTO_CREATE_FILTER, first.filter.clone(), |f| f);
    Ok(())
}

fn sink_to_options(s: &SinkConfig) -> OptionPairs {
    let mut o = Out::default();
    o.put(TOPIC, s.topic.clone());
    if s.create_disposition != Default::default() {
        o.put(CREATE_DISPOSITION, s.create_disposition.as_str());
    }
    let t = &s.topic_create;
    o.opt(
        SINK_AUTO_CREATE_MESSAGE_RETENTION,
        t.message_retention_ms,
        ms,
    );
    o.opt(SINK_AUTO_CREATE_KMS_KEY, t.kms_key_name.clone(), |k| k);
    if !t.allowed_persistence_regions.is_empty() {
        o.put(
            SINK_AUTO_CREATE_REGIONS,
            t.allowed_persistence_regions.join(","),
        );
    }
    if t.enforce_in_transit {
        o.put(SINK_AUTO_CREATE_ENFORCE_IN_TRANSIT, "true");
    }
    publisher_options(&mut o, &s.publisher);
    if s.failure_handler != Default::default() {
        o.put(FAILURE_HANDLER, s.failure_handler.as_str());
    }
    if let Some(d) = &s.dead_letter {
        dead_letter_to_options(&mut o, "sink.", d);
    }
    o.opt(RECORD_ID_ATTRIBUTE, s.record_id_attribute.clone(), |a| a);
    o.0
}

fn publisher_options(o: &mut Out, p: &PublisherConfig) {
    let d = PublisherConfig::default();
    o.changed(
        BATCH_COUNT,
        p.batching_element_count_threshold,
        d.batching_element_count_threshold,
    );
    o.changed(
        BATCH_BYTES,
        p.batching_request_byte_threshold,
        d.batching_request_byte_threshold,
    );
    if p.batching_delay_threshold_ms != d.batching_delay_threshold_ms {
        o.put(BATCH_DELAY, ms(p.batching_delay_threshold_ms));
    }
    let r = &p.retry;
    o.opt(RETRY_TOTAL_TIMEOUT, r.total_timeout_ms, ms);
    o.opt(RETRY_INITIAL_DELAY, r.initial_delay_ms, ms);
    o.opt(RETRY_DELAY_MULTIPLIER, r.delay_multiplier, |f| {
        f.to_string()
    });
    o.opt(RETRY_MAX_DELAY, r.max_delay_ms, ms);
    o.opt(RETRY_INITIAL_RPC_TIMEOUT, r.initial_rpc_timeout_ms, ms);
    o.opt(
        RETRY_RPC_TIMEOUT_MULTIPLIER,
        r.rpc_timeout_multiplier,
        |f| f.to_string(),
    );
    o.opt(RETRY_MAX_RPC_TIMEOUT, r.max_rpc_timeout_ms, ms);
    o.opt(RETRY_MAX_ATTEMPTS, r.max_attempts, |a| a.to_string());
    if p.message_ordering {
        o.put(MESSAGE_ORDERING, "true");
    }
    o.changed(
        MAX_IN_FLIGHT_MESSAGES,
        p.max_in_flight_messages,
        d.max_in_flight_messages,
    );
    o.changed(
        MAX_IN_FLIGHT_BYTES,
        p.max_in_flight_bytes,
        d.max_in_flight_bytes,
    );
    if p.publish_progress_timeout_ms != d.publish_progress_timeout_ms {
        o.put(PUBLISH_PROGRESS_TIMEOUT, ms(p.publish_progress_timeout_ms));
    }
    let (rc, rd) = (&p.recovery, &d.recovery);
    if rc.initial_backoff_ms != rd.initial_backoff_ms {
        o.put(RECOVERY_INITIAL_BACKOFF, ms(rc.initial_backoff_ms));
    }
    if rc.max_backoff_ms != rd.max_backoff_ms {
        o.put(RECOVERY_MAX_BACKOFF, ms(rc.max_backoff_ms));
    }
    o.changed(RECOVERY_MAX_ATTEMPTS, rc.max_attempts, rd.max_attempts);
    o.changed(
        MAX_CONSECUTIVE_REJECTIONS,
        p.max_consecutive_rejections,
        d.max_consecutive_rejections,
    );
    if p.shutdown_timeout_ms != d.shutdown_timeout_ms {
        o.put(SINK_SHUTDOWN_TIMEOUT, ms(p.shutdown_timeout_ms));
    }
}

fn dead_letter_to_options(o: &mut Out, prefix: &str, d: &DeadLetterQueueConfig) {
    let key = |suffix: &str| format!("{prefix}{suffix}");
    let defaults = DeadLetterQueueConfig::new(String::new());
    o.put(&key(DLQ_TOPIC), d.topic.clone());
    for (k, v) in auth_options(
        &d.authentication,
        &key(DLQ_EMULATOR_ENDPOINT),
        &key(DLQ_KEY_FILE),
    ) {
        o.put(&k, v);
    }
    if d.max_in_flight_messages != defaults.max_in_flight_messages {
        o.put(
            &key(DLQ_MAX_IN_FLIGHT),
            d.max_in_flight_messages.to_string(),
        );
    }
    if d.flush_timeout_ms != defaults.flush_timeout_ms {
        o.put(&key(DLQ_FLUSH_TIMEOUT), ms(d.flush_timeout_ms));
    }
    if d.shutdown_timeout_ms != defaults.shutdown_timeout_ms {
        o.put(&key(DLQ_SHUTDOWN_TIMEOUT), ms(d.shutdown_timeout_ms));
    }
}

/// The pairs being written.
#[derive(Default)]
struct Out(OptionPairs);

impl Out {
    fn put(&mut self, key: &str, value: impl Into<String>) {
        self.0.push((key.to_string(), value.into()));
    }
    fn opt<T>(&mut self, key: &str, value: Option<T>, show: impl Fn(T) -> String) {
        if let Some(v) = value {
            self.put(key, show(v));
        }
    }
    fn changed<T: PartialEq + ToString>(&mut self, key: &str, value: T, default: T) {
        if value != default {
            self.put(key, value.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
