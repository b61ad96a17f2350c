//! `PubSubSink::builder()`, `PublisherOptions::builder()`, `TopicCreateOptions::builder()`:
//! a sink table for Rust users, validated in `build()`. The SQL layer fills the same
//! config (`pubsub_table_options`) and runs it through [`PubSubSink::from_config`], so
//! every rule lives here once. Options are named by their config path
//! (`publisher.max_in_flight_bytes`), which `pubsub_table_options::sink_sql_key` renames.

use std::time::Duration;

use pubsub_schema::{
    Authentication, CreateDisposition, DeadLetterQueueConfig, FailureHandler, PubSubProfile,
    PublisherConfig, RecoveryConfig, RetryConfig, SinkConfig, TopicCreateConfig,
};

use super::limits::{max_batch_bytes, MAX_MESSAGES_PER_REQUEST};
use crate::build_error::{show, whole_ms, BuildError};
use crate::client;
use crate::source::builder::check_id;

/// A validated Pub/Sub sink table: profile (project, credentials) and sink config.
#[derive(Debug, Clone, PartialEq)]
pub struct PubSubSink {
    profile: PubSubProfile,
    config: SinkConfig,
}

impl PubSubSink {
    pub fn builder() -> PubSubSinkBuilder {
        PubSubSinkBuilder::default()
    }

    /// Validates a profile and a table config (from SQL or the UI) through the builders.
    pub fn from_config(profile: PubSubProfile, config: SinkConfig) -> Result<Self, BuildError> {
        let mut b = PubSubSink::builder()
            .project(profile.project.clone())
            .topic(config.topic.clone())
            .create_disposition(config.create_disposition)
            .topic_create_options(TopicCreateOptions::from_config(&config.topic_create)?)
            .publisher_options(PublisherOptions::from_config(&config.publisher)?)
            .failure_handler(config.failure_handler);
        if let Some(a) = config.record_id_attribute {
            b = b.record_id_attribute(a);
        }
        b.authentication = profile.authentication;
        b.dead_letter = config.dead_letter;
        b.build()
    }

    pub fn profile(&self) -> &PubSubProfile {
        &self.profile
    }

    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// The topic's full resource name.
    pub fn topic_name(&self) -> String {
        client::topic_path(&self.profile.project, &self.config.topic)
    }

    pub fn into_parts(self) -> (PubSubProfile, SinkConfig) {
        (self.profile, self.config)
    }
}

/// Builder of [`PubSubSink`].
#[derive(Debug, Clone, Default)]
pub struct PubSubSinkBuilder {
    project: Option<String>,
    authentication: Authentication,
    topic: Option<String>,
    create_disposition: CreateDisposition,
    topic_create: TopicCreateOptions,
    publisher: PublisherOptions,
    failure_handler: FailureHandler,
    dead_letter: Option<DeadLetterQueueConfig>,
    record_id_attribute: Option<String>,
}

impl PubSubSinkBuilder {
    /// The Google Cloud project that owns the topic. Required.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Talk to a Pub/Sub emulator at `host:port` (plaintext, no credentials).
    pub fn emulator_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.authentication = Authentication::Emulator {
            endpoint: endpoint.into(),
        };
        self
    }

    /// Authenticate with the service account key file at `path`, read when the job starts.
    pub fn service_account_key_file(mut self, path: impl Into<String>) -> Self {
        self.authentication = Authentication::ServiceAccountKeyFile { path: path.into() };
        self
    }

    /// Authenticate with application default credentials (the default).
    pub fn application_default_credentials(mut self) -> Self {
        self.authentication = Authentication::ApplicationDefault;
        self
    }

    /// The topic id to publish to (not the full name). Required.
    pub fn topic(mut self, id: impl Into<String>) -> Self {
        self.topic = Some(id.into());
        self
    }

    /// Create a missing topic (`CreateIfNeeded`, the default) or fail (`CreateNever`).
    /// Under `CreateIfNeeded` a topic missing at a start is created as it is; one deleted
    /// mid-run (a NOT_FOUND after this run's start-up check found or created it) is
    /// recreated, labelled `pubsub-connector-recreated`, and published to again only once
    /// it has a subscription (Pub/Sub discards what a topic without one receives): until
    /// then the checkpoint waits the recovery backoff, then fails (ERROR, nothing
    /// acknowledged); every later start checks a labelled topic for a subscription.
    pub fn create_disposition(mut self, d: CreateDisposition) -> Self {
        self.create_disposition = d;
        self
    }

    /// How a topic this sink creates is configured (only with `CreateIfNeeded`).
    pub fn topic_create_options(mut self, o: TopicCreateOptions) -> Self {
        self.topic_create = o;
        self
    }

    pub fn publisher_options(mut self, o: PublisherOptions) -> Self {
        self.publisher = o;
        self
    }

    /// What happens to a row the encoder rejects or a message rejected on its own
    /// (default `Fail`). `DeadLetter` needs [`Self::dead_letter_queue`].
    pub fn failure_handler(mut self, h: FailureHandler) -> Self {
        self.failure_handler = h;
        self
    }

    /// Stamps every published message with attribute `name` holding the row's record
    /// id (32 hex digits, the same on every replay of the row; see
    /// `pubsub_engine_spi::record_id` for the derivation), so that a consumer deduplicating
    /// on it (a source with `dedup_attribute`) sees each record once. `name` is an
    /// attribute key: 1 to 256 bytes, not starting with `goog` (Pub/Sub's rule).
    pub fn record_id_attribute(mut self, name: impl Into<String>) -> Self {
        self.record_id_attribute = Some(name.into());
        self
    }

    /// The dead-letter queue for failure handler `DeadLetter` (SPEC 6.1).
    pub fn dead_letter_queue(mut self, c: DeadLetterQueueConfig) -> Self {
        self.dead_letter = Some(c);
        self
    }

    /// Validates: a project and a topic id; the emulator endpoint; create options only
    /// with `CreateIfNeeded`; a dead-letter queue exactly with failure handler
    /// `DeadLetter`. Errors name the option and the value.
    pub fn build(self) -> Result<PubSubSink, BuildError> {
        let project = self.project.unwrap_or_default();
        check_id("project", &project)?;
        let topic = self.topic.unwrap_or_default();
        check_id("topic", &topic)?;
        if let Authentication::Emulator { endpoint } = &self.authentication {
            pubsub_schema::check_endpoint(endpoint)
                .map_err(|why| BuildError::new("emulator_endpoint", endpoint, why))?;
        }
        let create = self.topic_create.0;
        if self.create_disposition == CreateDisposition::CreateNever {
            let set = [
                (
                    create.message_retention_ms.is_some(),
                    "topic_create.message_retention",
                ),
                (create.kms_key_name.is_some(), "topic_create.kms_key_name"),
                (
                    !create.allowed_persistence_regions.is_empty(),
                    "topic_create.allowed_persistence_regions",
                ),
                (create.enforce_in_transit, "topic_create.enforce_in_transit"),
            ];
            if let Some((_, option)) = set.iter().find(|(s, _)| *s) {
                return Err(BuildError::between(
                    option,
                    "create_disposition",
                    "set",
                    "applies only to a topic the sink creates, but {other} is 'create-never'",
                ));
            }
        }
        match (self.failure_handler, &self.dead_letter) {
            (FailureHandler::DeadLetter, None) => {
                return Err(BuildError::between(
                    "failure_handler",
                    "dead_letter.topic",
                    "dead-letter",
                    "needs a dead-letter queue: set {other}",
                ))
            }
            (h, Some(d)) if h != FailureHandler::DeadLetter => {
                return Err(BuildError::between(
                    "dead_letter.topic",
                    "failure_handler",
                    &d.topic,
                    "is used only with {other} 'dead-letter'",
                ))
            }
            _ => {}
        }
        if let Some(d) = &self.dead_letter {
            crate::dead_letter::PubSubDeadLetterQueue::from_config(&project, d)?;
        }
        if let Some(a) = &self.record_id_attribute {
            crate::source::check_attribute_key("record_id_attribute", a)?;
        }
        Ok(PubSubSink {
            profile: PubSubProfile {
                project,
                authentication: self.authentication,
            },
            config: SinkConfig {
                topic,
                create_disposition: self.create_disposition,
                topic_create: create,
                publisher: self.publisher.0,
                failure_handler: self.failure_handler,
                dead_letter: self.dead_letter,
                record_id_attribute: self.record_id_attribute,
            },
        })
    }
}

/// Publisher options (SPEC 6): batching, retry, ordering, in-flight caps, timeouts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublisherOptions(PublisherConfig);

impl PublisherOptions {
    pub fn builder() -> PublisherOptionsBuilder {
        PublisherOptionsBuilder::default()
    }

    /// Validates a config (from SQL or the UI) through the builder.
    pub fn from_config(c: &PublisherConfig) -> Result<Self, BuildError> {
        PublisherOptionsBuilder { c: c.clone() }.build()
    }

    pub fn config(&self) -> &PublisherConfig {
        &self.0
    }
}

/// Builder of [`PublisherOptions`]; every setter's default is SPEC 6's.
#[derive(Debug, Clone, Default)]
pub struct PublisherOptionsBuilder {
    c: PublisherConfig,
}

impl PublisherOptionsBuilder {
    /// Messages per publish request, 1..=1000 (Pub/Sub's limit). Default 100.
    pub fn batching_element_count_threshold(mut self, n: u32) -> Self {
        self.c.batching_element_count_threshold = n;
        self
    }
    /// Payload bytes per request; at most what keeps the request within Pub/Sub's
    /// 10,485,760 bytes with the element count's worst framing, and at most the client's
    /// 10,000,000 (which binds up to 531 messages; 9,572,455 for 1000). Default 1,000,000.
    pub fn batching_request_byte_threshold(mut self, bytes: u32) -> Self {
        self.c.batching_request_byte_threshold = bytes;
        self
    }
    /// How long a message waits for its batch to fill; whole ms. Default 10 ms.
    pub fn batching_delay_threshold(mut self, d: Duration) -> Self {
        self.c.batching_delay_threshold_ms = ms_or_max(d);
        self
    }
    /// Stop retrying a request after this long. Not with message ordering.
    pub fn retry_total_timeout(mut self, d: Duration) -> Self {
        self.c.retry.total_timeout_ms = Some(ms_or_max(d));
        self
    }
    pub fn retry_initial_delay(mut self, d: Duration) -> Self {
        self.c.retry.initial_delay_ms = Some(ms_or_max(d));
        self
    }
    /// Factor between retry delays, at least 1.
    pub fn retry_delay_multiplier(mut self, f: f64) -> Self {
        self.c.retry.delay_multiplier = Some(f);
        self
    }
    pub fn retry_max_delay(mut self, d: Duration) -> Self {
        self.c.retry.max_delay_ms = Some(ms_or_max(d));
        self
    }
    /// Timeout of a request's first attempt.
    pub fn retry_initial_rpc_timeout(mut self, d: Duration) -> Self {
        self.c.retry.initial_rpc_timeout_ms = Some(ms_or_max(d));
        self
    }
    /// Factor between attempts' timeouts, at least 1.
    pub fn retry_rpc_timeout_multiplier(mut self, f: f64) -> Self {
        self.c.retry.rpc_timeout_multiplier = Some(f);
        self
    }
    pub fn retry_max_rpc_timeout(mut self, d: Duration) -> Self {
        self.c.retry.max_rpc_timeout_ms = Some(ms_or_max(d));
        self
    }
    /// Attempts per request, the first included. Not with message ordering.
    pub fn retry_max_attempts(mut self, n: u32) -> Self {
        self.c.retry.max_attempts = Some(n);
        self
    }
    /// Keep each ordering key's order; an ordered publisher retries forever (bounded by
    /// the publish progress timeout). Default off.
    pub fn message_ordering(mut self, on: bool) -> Self {
        self.c.message_ordering = on;
        self
    }
    /// Publishes awaiting their result; writing waits at the cap. Default 1000.
    pub fn max_in_flight_messages(mut self, n: u64) -> Self {
        self.c.max_in_flight_messages = n;
        self
    }
    /// Bytes of publishes awaiting their result. Default 64 MiB.
    pub fn max_in_flight_bytes(mut self, n: u64) -> Self {
        self.c.max_in_flight_bytes = n;
        self
    }
    /// Fail when no publish completes for this long while some are in flight; a warning
    /// comes at a tenth. Default 600 s.
    pub fn publish_progress_timeout(mut self, d: Duration) -> Self {
        self.c.publish_progress_timeout_ms = ms_or_max(d);
        self
    }
    /// The sink's own republish backoff: starts at `initial`, doubles up to `max`,
    /// jittered; a message is republished at most `attempts` times. Default 500 ms, 10 s, 10.
    pub fn recovery(mut self, initial: Duration, max: Duration, attempts: u32) -> Self {
        self.c.recovery = RecoveryConfig {
            initial_backoff_ms: ms_or_max(initial),
            max_backoff_ms: ms_or_max(max),
            max_attempts: attempts,
        };
        self
    }
    /// Messages rejected on their own in a row before the sink fails; -1: no limit.
    /// Default 100.
    pub fn max_consecutive_rejections(mut self, n: i64) -> Self {
        self.c.max_consecutive_rejections = n;
        self
    }
    /// How long closing waits for publishes in flight. Default 30 s.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.c.shutdown_timeout_ms = ms_or_max(d);
        self
    }

    /// Validates every rule of SPEC 6; errors name the option and the value.
    pub fn build(self) -> Result<PublisherOptions, BuildError> {
        let c = self.c;
        let count = c.batching_element_count_threshold;
        if !(1..=MAX_MESSAGES_PER_REQUEST).contains(&count) {
            return Err(BuildError::new(
                "publisher.batching_element_count_threshold",
                count,
                "must be between 1 and 1000 (Pub/Sub's messages per request)",
            ));
        }
        let bytes = u64::from(c.batching_request_byte_threshold);
        if bytes == 0 || bytes > max_batch_bytes(count) {
            return Err(BuildError::between(
                "publisher.batching_request_byte_threshold",
                "publisher.batching_element_count_threshold",
                bytes,
                format!(
                    "must be between 1 and {} with {{other}} {count}: at most the client's {} and, for a request of {count} messages, room for their framing within Pub/Sub's {}-byte request limit",
                    max_batch_bytes(count),
                    super::limits::CLIENT_MAX_BATCH_BYTES,
                    super::limits::MAX_REQUEST_BYTES
                ),
            ));
        }
        check_retry(&c.retry, c.message_ordering)?;
        positive("publisher.max_in_flight_messages", c.max_in_flight_messages)?;
        positive("publisher.max_in_flight_bytes", c.max_in_flight_bytes)?;
        positive_ms(
            "publisher.publish_progress_timeout",
            c.publish_progress_timeout_ms,
        )?;
        let r = &c.recovery;
        positive_ms("publisher.recovery_initial_backoff", r.initial_backoff_ms)?;
        positive_ms("publisher.recovery_max_backoff", r.max_backoff_ms)?;
        if r.initial_backoff_ms > r.max_backoff_ms {
            return Err(BuildError::between(
                "publisher.recovery_initial_backoff",
                "publisher.recovery_max_backoff",
                show(Duration::from_millis(r.initial_backoff_ms)),
                format!(
                    "must be at most {{other}} ({})",
                    show(Duration::from_millis(r.max_backoff_ms))
                ),
            ));
        }
        positive("publisher.recovery_max_attempts", u64::from(r.max_attempts))?;
        if c.max_consecutive_rejections < 1 && c.max_consecutive_rejections != -1 {
            return Err(BuildError::new(
                "publisher.max_consecutive_rejections",
                c.max_consecutive_rejections,
                "must be positive, or -1 for no limit",
            ));
        }
        positive_ms("publisher.shutdown_timeout", c.shutdown_timeout_ms)?;
        Ok(PublisherOptions(c))
    }
}

fn check_retry(r: &RetryConfig, ordering: bool) -> Result<(), BuildError> {
    if ordering {
        let cap = [
            (
                r.total_timeout_ms.map(|v| show(Duration::from_millis(v))),
                "publisher.retry_total_timeout",
            ),
            (
                r.max_attempts.map(|v| v.to_string()),
                "publisher.retry_max_attempts",
            ),
        ];
        if let Some((Some(v), option)) = cap.into_iter().find(|(v, _)| v.is_some()) {
            return Err(BuildError::between(
                option,
                "publisher.message_ordering",
                v,
                "cannot be set with {other}: an ordered publisher retries until it succeeds (bounded by the publish progress timeout), since giving up on one message would reorder its key",
            ));
        }
    }
    for (v, option) in [
        (r.total_timeout_ms, "publisher.retry_total_timeout"),
        (r.initial_delay_ms, "publisher.retry_initial_delay"),
        (r.max_delay_ms, "publisher.retry_max_delay"),
        (
            r.initial_rpc_timeout_ms,
            "publisher.retry_initial_rpc_timeout",
        ),
        (r.max_rpc_timeout_ms, "publisher.retry_max_rpc_timeout"),
    ] {
        if let Some(v) = v {
            positive_ms(option, v)?;
        }
    }
    for (v, option) in [
        (r.delay_multiplier, "publisher.retry_delay_multiplier"),
        (
            r.rpc_timeout_multiplier,
            "publisher.retry_rpc_timeout_multiplier",
        ),
    ] {
        if let Some(f) = v {
            if !(f.is_finite() && f >= 1.0) {
                return Err(BuildError::new(option, f, "must be a number of at least 1"));
            }
        }
    }
    if let Some(0) = r.max_attempts {
        return Err(BuildError::new(
            "publisher.retry_max_attempts",
            0,
            "must be positive",
        ));
    }
    for (lo, hi, lo_name, hi_name) in [
        (
            r.initial_delay_ms,
            r.max_delay_ms,
            "publisher.retry_initial_delay",
            "publisher.retry_max_delay",
        ),
        (
            r.initial_rpc_timeout_ms,
            r.max_rpc_timeout_ms,
            "publisher.retry_initial_rpc_timeout",
            "publisher.retry_max_rpc_timeout",
        ),
    ] {
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo > hi {
                return Err(BuildError::between(
                    lo_name,
                    hi_name,
                    show(Duration::from_millis(lo)),
                    format!(
                        "must be at most {{other}} ({})",
                        show(Duration::from_millis(hi))
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Settings of a topic the sink creates (SPEC 6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicCreateOptions(TopicCreateConfig);

impl TopicCreateOptions {
    pub fn builder() -> TopicCreateOptionsBuilder {
        TopicCreateOptionsBuilder::default()
    }

    /// Validates a config (from SQL or the UI) through the builder.
    pub fn from_config(c: &TopicCreateConfig) -> Result<Self, BuildError> {
        TopicCreateOptionsBuilder { c: c.clone() }.build()
    }

    pub fn config(&self) -> &TopicCreateConfig {
        &self.0
    }
}

/// Builder of [`TopicCreateOptions`].
#[derive(Debug, Clone, Default)]
pub struct TopicCreateOptionsBuilder {
    c: TopicCreateConfig,
}

/// Pub/Sub's topic message retention range: 10 minutes to 31 days.
const RETENTION_MS: std::ops::RangeInclusive<u64> = 600_000..=31 * 86_400_000;

impl TopicCreateOptionsBuilder {
    /// How long the topic keeps messages, 10 minutes..31 days (whole ms).
    pub fn message_retention(mut self, d: Duration) -> Self {
        self.c.message_retention_ms = Some(ms_or_max(d));
        self
    }
    /// `projects/P/locations/L/keyRings/R/cryptoKeys/K`.
    pub fn kms_key_name(mut self, name: impl Into<String>) -> Self {
        self.c.kms_key_name = Some(name.into());
        self
    }
    /// Regions where messages may be stored, e.g. `europe-west1`.
    pub fn allowed_persistence_regions(
        mut self,
        regions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.c.allowed_persistence_regions = regions.into_iter().map(Into::into).collect();
        self
    }
    /// Restrict transit to the allowed regions too (needs allowed regions).
    pub fn enforce_in_transit(mut self, on: bool) -> Self {
        self.c.enforce_in_transit = on;
        self
    }

    pub fn build(self) -> Result<TopicCreateOptions, BuildError> {
        let c = self.c;
        if let Some(ms) = c.message_retention_ms {
            if !RETENTION_MS.contains(&ms) {
                return Err(BuildError::new(
                    "topic_create.message_retention",
                    show(Duration::from_millis(ms)),
                    "must be between 10 minutes and 31 days (Pub/Sub's range)",
                ));
            }
        }
        if let Some(k) = &c.kms_key_name {
            let parts: Vec<&str> = k.split('/').collect();
            let shape = parts.len() == 8
                && parts[0] == "projects"
                && parts[2] == "locations"
                && parts[4] == "keyRings"
                && parts[6] == "cryptoKeys"
                && [1, 3, 5, 7].iter().all(|&i| !parts[i].trim().is_empty());
            if !shape {
                return Err(BuildError::new(
                    "topic_create.kms_key_name",
                    k,
                    "must be projects/P/locations/L/keyRings/R/cryptoKeys/K",
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in &c.allowed_persistence_regions {
            if r.trim().is_empty() || r.trim() != r || r.contains(char::is_whitespace) {
                return Err(BuildError::new(
                    "topic_create.allowed_persistence_regions",
                    r,
                    "must be region names such as 'europe-west1', none blank",
                ));
            }
            if !seen.insert(r) {
                return Err(BuildError::new(
                    "topic_create.allowed_persistence_regions",
                    r,
                    "is listed twice",
                ));
            }
        }
        if c.enforce_in_transit && c.allowed_persistence_regions.is_empty() {
            return Err(BuildError::between(
                "topic_create.enforce_in_transit",
                "topic_create.allowed_persistence_regions",
                true,
                "needs {other}: it restricts transit to those regions",
            ));
        }
        Ok(TopicCreateOptions(c))
    }
}

fn ms_or_max(d: Duration) -> u64 {
    whole_ms("", d).unwrap_or(u64::MAX)
}

fn positive(option: &'static str, v: u64) -> Result<(), BuildError> {
    if v == 0 {
        return Err(BuildError::new(option, v, "must be positive"));
    }
    Ok(())
}

fn positive_ms(option: &'static str, ms: u64) -> Result<(), BuildError> {
    if ms == 0 {
        return Err(BuildError::new(option, "0s", "must be at least 1ms"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: PublisherOptionsBuilder) -> String {
        b.build().unwrap_err().to_string()
    }

    #[test]
    fn publisher_rules_name_the_option_and_value() {
        let b = PublisherOptions::builder;
        assert!(err(b().batching_element_count_threshold(1001))
            .starts_with("option 'publisher.batching_element_count_threshold' is invalid"));
        assert!(err(b().batching_request_byte_threshold(10_000_001))
            .contains("must be between 1 and 10000000"));
        assert!(b()
            .batching_request_byte_threshold(10_000_000)
            .build()
            .is_ok());
        assert!(err(b()
            .batching_element_count_threshold(1000)
            .batching_request_byte_threshold(9_572_456))
        .contains("must be between 1 and 9572455"));
        assert!(err(b().message_ordering(true).retry_max_attempts(3))
            .starts_with("option 'publisher.retry_max_attempts' is invalid: cannot be set with 'publisher.message_ordering'"));
        assert!(err(b()
            .message_ordering(true)
            .retry_total_timeout(Duration::from_secs(60)))
        .contains("was '60s'"));
        assert!(b()
            .message_ordering(true)
            .retry_initial_delay(Duration::from_millis(100))
            .build()
            .is_ok());
        assert!(err(b().retry_delay_multiplier(0.5)).contains("at least 1"));
        assert!(err(b()
            .retry_initial_rpc_timeout(Duration::from_secs(20))
            .retry_max_rpc_timeout(Duration::from_secs(10)))
        .contains("must be at most 'publisher.retry_max_rpc_timeout' (10s)"));
        assert!(err(b().max_consecutive_rejections(0)).contains("or -1"));
        assert!(b().max_consecutive_rejections(-1).build().is_ok());
        assert!(
            err(b().recovery(Duration::from_secs(20), Duration::from_secs(10), 3))
                .contains("recovery_initial_backoff")
        );
        assert!(err(b().max_in_flight_bytes(0)).contains("must be positive"));
        assert!(err(b().shutdown_timeout(Duration::ZERO)).contains("at least 1ms"));
    }

    #[test]
    fn topic_create_rules() {
        let b = TopicCreateOptions::builder;
        assert!(b()
            .message_retention(Duration::from_secs(60))
            .build()
            .unwrap_err()
            .to_string()
            .contains("10 minutes"));
        assert!(b().kms_key_name("key").build().is_err());
        assert!(b()
            .kms_key_name("projects/p/locations/us/keyRings/r/cryptoKeys/k")
            .build()
            .is_ok());
        assert!(b().enforce_in_transit(true).build().is_err());
        assert!(b()
            .allowed_persistence_regions(["europe-west1", "europe-west1"])
            .build()
            .is_err());
    }

    #[test]
    fn sink_rules() {
        let base = || PubSubSink::builder().project("p").topic("t");
        assert!(base().build().is_ok());
        let e = base()
            .create_disposition(CreateDisposition::CreateNever)
            .topic_create_options(
                TopicCreateOptions::builder()
                    .message_retention(Duration::from_secs(3600))
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap_err();
        assert_eq!(e.option, "topic_create.message_retention");
        let e = base()
            .failure_handler(FailureHandler::DeadLetter)
            .build()
            .unwrap_err();
        assert_eq!(e.option, "failure_handler");
        let e = base()
            .dead_letter_queue(DeadLetterQueueConfig::new("dlq"))
            .build()
            .unwrap_err();
        assert_eq!(e.option, "dead_letter.topic");
        assert!(base().topic("a/b").build().is_err());
        // The last authentication setter wins.
        let auth = |b: PubSubSinkBuilder| b.build().unwrap().profile().authentication.clone();
        assert_eq!(
            auth(
                base()
                    .service_account_key_file("/k.json")
                    .emulator_endpoint("h:1")
            ),
            Authentication::Emulator {
                endpoint: "h:1".into()
            }
        );
        assert_eq!(
            auth(
                base()
                    .emulator_endpoint("h:1")
                    .application_default_credentials()
            ),
            Authentication::ApplicationDefault
        );
    }
}
