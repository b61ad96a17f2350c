//! `PubSubSource::builder()`: a source table for Rust users, validated in `build()`. The
//! SQL layer fills the same config (`pubsub_table_options`) and runs it through
//! [`PubSubSource::from_config`], so every rule lives here once.

use std::collections::BTreeSet;

use pubsub_schema::{
    Authentication, DeserializationFailurePolicy, OrderingMode, PubSubProfile, SourceConfig,
    SubscriptionConfig,
};

use super::create::SubscriptionCreateOptions;
use super::options::PubSubSubscriberOptions;
use super::start_position::PubSubStartPosition;
use crate::build_error::BuildError;
use crate::client;
use crate::dead_letter::PubSubDeadLetterQueue;

/// A validated Pub/Sub source table: profile (project, credentials) and source config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubSubSource {
    profile: PubSubProfile,
    config: SourceConfig,
}

impl PubSubSource {
    pub fn builder() -> PubSubSourceBuilder {
        PubSubSourceBuilder::default()
    }

    /// Validates a profile and a table config (from SQL or the UI) through the builder.
    pub fn from_config(profile: PubSubProfile, config: SourceConfig) -> Result<Self, BuildError> {
        let mut b = PubSubSource::builder()
            .project(profile.project.clone())
            .start_position(PubSubStartPosition::from_config(config.start_position)?)
            .ordering_mode(config.ordering_mode)
            .deserialization_failure_policy(config.deserialization_failure_policy)
            .max_consecutive_failures(config.max_consecutive_failures)
            .subscriber_options(PubSubSubscriberOptions::from_config(&config.subscriber)?);
        b.authentication = profile.authentication.clone();
        if let Some(d) = &config.dead_letter {
            b = b.dead_letter_queue(PubSubDeadLetterQueue::from_config(&profile.project, d)?);
        }
        if let Some(d) = &config.dedup {
            b = b
                .dedup(
                    d.attribute.clone(),
                    std::time::Duration::from_millis(d.window_ms),
                )
                .dedup_max_ids(d.max_ids);
        }
        if let Some(a) = &config.event_time_attribute {
            b = b.event_time_attribute(a.clone());
        }
        if let Some(a) = &config.alignment {
            b = b
                .watermark_alignment(
                    a.group.clone(),
                    std::time::Duration::from_millis(a.max_drift_ms),
                )
                .watermark_alignment_update_interval(std::time::Duration::from_millis(
                    a.update_interval_ms,
                ));
        }
        for s in &config.subscriptions {
            b = match &s.create {
                Some(c) => b.subscription_with_create(
                    s.id.clone(),
                    SubscriptionCreateOptions::from_config(c)?,
                ),
                None => b.subscription(s.id.clone()),
            };
        }
        b.build()
    }

    pub fn profile(&self) -> &PubSubProfile {
        &self.profile
    }

    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    /// The full resource names of the subscriptions, in table order.
    pub fn subscription_names(&self) -> Vec<String> {
        self.config
            .subscriptions
            .iter()
            .map(|s| client::subscription_path(&self.profile.project, &s.id))
            .collect()
    }

    pub fn into_parts(self) -> (PubSubProfile, SourceConfig) {
        (self.profile, self.config)
    }
}

/// Builder of [`PubSubSource`].
#[derive(Debug, Clone, Default)]
pub struct PubSubSourceBuilder {
    project: Option<String>,
    authentication: Authentication,
    subscriptions: Vec<SubscriptionConfig>,
    start_position: PubSubStartPosition,
    ordering_mode: OrderingMode,
    policy: DeserializationFailurePolicy,
    /// `None`: the default (100).
    max_consecutive_failures: Option<i64>,
    subscriber: PubSubSubscriberOptions,
    dead_letter: Option<pubsub_schema::DeadLetterQueueConfig>,
    dedup: Option<pubsub_schema::DedupConfig>,
    dedup_max_ids: Option<u64>,
    event_time_attribute: Option<String>,
    alignment: Option<pubsub_schema::AlignmentConfig>,
    alignment_update_interval: Option<std::time::Duration>,
}

impl PubSubSourceBuilder {
    /// The Google Cloud project that owns the subscriptions. Required.
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

    /// Read subscription `id` (an id, not a full name); it must exist at start.
    pub fn subscription(mut self, id: impl Into<String>) -> Self {
        self.subscriptions.push(SubscriptionConfig {
            id: id.into(),
            create: None,
        });
        self
    }

    /// Read subscription `id`, creating it with `create` when it does not exist.
    pub fn subscription_with_create(
        mut self,
        id: impl Into<String>,
        create: SubscriptionCreateOptions,
    ) -> Self {
        self.subscriptions.push(SubscriptionConfig {
            id: id.into(),
            create: Some(create.config().clone()),
        });
        self
    }

    /// Where the job's first start begins (default: continue from the subscription).
    pub fn start_position(mut self, p: PubSubStartPosition) -> Self {
        self.start_position = p;
        self
    }

    /// `None` (default) or `PerKey` (needs message ordering on every subscription and a
    /// parallel pull count of 1).
    pub fn ordering_mode(mut self, m: OrderingMode) -> Self {
        self.ordering_mode = m;
        self
    }

    /// What happens to a message that cannot be decoded (default `Fail`).
    pub fn deserialization_failure_policy(mut self, p: DeserializationFailurePolicy) -> Self {
        self.policy = p;
        self
    }

    /// Messages of one subtask that may fail in a row (not decoded, or rows failed in
    /// SQL) under a policy other than `Fail` before the job fails, naming the count, the
    /// policy and the last failure: a systematic fault, not bad messages. Every message
    /// whose rows went out ends the run. Default 100; -1: no limit; 0 is refused.
    pub fn max_consecutive_failures(mut self, n: i64) -> Self {
        self.max_consecutive_failures = Some(n);
        self
    }

    pub fn subscriber_options(mut self, o: PubSubSubscriberOptions) -> Self {
        self.subscriber = o;
        self
    }

    /// The dead-letter queue that policy `DeadLetter` publishes undecodable messages to
    /// (SPEC 6.1): its own topic and credentials, never the table's. Required by, and only
    /// allowed with, [`DeserializationFailurePolicy::DeadLetter`]. A topic id resolves in
    /// the queue's own project (give the table's project when building it).
    pub fn dead_letter_queue(mut self, q: PubSubDeadLetterQueue) -> Self {
        self.dead_letter = Some(q.config().clone());
        self
    }

    /// Deduplicates by attribute `attribute` (an id each copy of a record carries, e.g.
    /// an upstream sink's `record_id_attribute`): a message whose value was already seen
    /// within `window` of publish time is acknowledged with the next checkpoint and
    /// yields no row (counted `messages_deduplicated`). Messages without the attribute
    /// pass through (counted `messages_without_dedup_attribute`). The ids seen are part
    /// of the checkpoint. `window` is at least 1 s (default bound: 1,000,000 ids, see
    /// [`Self::dedup_max_ids`]). In a cluster of several processes the queries' sink
    /// operators check the ids, behind the keyed exchange (decision 0046).
    pub fn dedup(mut self, attribute: impl Into<String>, window: std::time::Duration) -> Self {
        let mut d = pubsub_schema::DedupConfig::new(attribute);
        d.window_ms = window.as_millis().try_into().unwrap_or(u64::MAX);
        self.dedup = Some(d);
        self
    }

    /// The most ids deduplication remembers per process (default 1,000,000; about 100
    /// bytes of memory and 32 bytes of checkpoint each). Reaching it fails the job: an id
    /// is never forgotten before its window ends. Needs [`Self::dedup`].
    pub fn dedup_max_ids(mut self, n: u64) -> Self {
        self.dedup_max_ids = Some(n);
        self
    }

    /// Takes each message's event time from attribute `attribute`: RFC 3339 text
    /// (`2024-05-01T12:00:00.5Z`, as format `json` reads it) or epoch milliseconds
    /// (`1714564800500`), Beam's `timestampAttribute`. A message without the attribute,
    /// or whose value is neither or outside the TIMESTAMP range, is a row failure under
    /// the failure policy. The watermark follows it with
    /// [`PubSubSubscriberOptionsBuilder::watermark_out_of_orderness`](super::options::PubSubSubscriberOptionsBuilder::watermark_out_of_orderness).
    /// Default: event time is the publish time.
    pub fn event_time_attribute(mut self, attribute: impl Into<String>) -> Self {
        self.event_time_attribute = Some(attribute.into());
        self
    }

    /// Watermark alignment (Flink's `scan.watermark.alignment.group` and `.max-drift`,
    /// decision 0042): every source table of a pipeline in group `group` is aligned; a
    /// split whose watermark is more than `max_drift` ahead of the group's (the lowest of
    /// its subtasks that have one and are not idle, over every process) takes no
    /// deliveries into rows: they wait in its paused buffer up to the
    /// `scan.paused-split-buffer.*` caps, where the split is parked (its messages nacked,
    /// never emitted), until the group catches up. `max_drift`: whole milliseconds, at
    /// least 1 ms. A source with no watermark (nothing delivered yet) or an idle one does
    /// not hold the group back. Default: no alignment.
    pub fn watermark_alignment(
        mut self,
        group: impl Into<String>,
        max_drift: std::time::Duration,
    ) -> Self {
        self.alignment = Some(pubsub_schema::AlignmentConfig {
            group: group.into(),
            max_drift_ms: max_drift.as_millis().try_into().unwrap_or(u64::MAX),
            update_interval_ms: pubsub_schema::DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS,
        });
        self
    }

    /// How often each process sends its aligned sources' watermarks to the leader
    /// (Flink's `scan.watermark.alignment.update-interval`); at least 50 ms, default 1 s.
    /// Needs [`Self::watermark_alignment`].
    pub fn watermark_alignment_update_interval(mut self, every: std::time::Duration) -> Self {
        self.alignment_update_interval = Some(every);
        self
    }

    /// Validates: a project; at least one subscription, ids well-formed and distinct; the
    /// emulator endpoint; per-key ordering with one stream per split and, on subscriptions
    /// it would create, message ordering; policy `dead-letter` with a dead-letter queue,
    /// and a queue only with that policy; at least one consecutive failure, or -1.
    /// Errors name the setter and the value.
    pub fn build(self) -> Result<PubSubSource, BuildError> {
        let project = self.project.unwrap_or_default();
        check_id("project", &project)?;
        let max_consecutive_failures = self
            .max_consecutive_failures
            .unwrap_or(pubsub_schema::DEFAULT_MAX_CONSECUTIVE_FAILURES);
        if max_consecutive_failures < 1 && max_consecutive_failures != -1 {
            return Err(BuildError::new(
                "max_consecutive_failures",
                max_consecutive_failures,
                "must be at least 1, or -1 for no limit",
            ));
        }
        match (&self.dead_letter, self.policy) {
            (None, DeserializationFailurePolicy::DeadLetter) => {
                return Err(BuildError::between(
                    "deserialization_failure_policy",
                    "dead_letter.topic",
                    "dead-letter",
                    "needs a dead-letter queue: set {other}",
                ))
            }
            (Some(d), p) if p != DeserializationFailurePolicy::DeadLetter => {
                return Err(BuildError::between(
                    "dead_letter.topic",
                    "deserialization_failure_policy",
                    &d.topic,
                    format!(
                        "is set, but {{other}} is '{}', so nothing would be dead-lettered: set {{other}} to 'dead-letter' or remove the dead-letter queue",
                        p.as_str()
                    ),
                ))
            }
            _ => {}
        }
        if let Authentication::Emulator { endpoint } = &self.authentication {
            pubsub_schema::check_endpoint(endpoint)
                .map_err(|why| BuildError::new("emulator_endpoint", endpoint, why))?;
        }
        if self.subscriptions.is_empty() {
            return Err(BuildError::new(
                "subscription",
                "",
                "at least one subscription is required",
            ));
        }
        let mut seen = BTreeSet::new();
        for s in &self.subscriptions {
            check_id("subscription", &s.id)?;
            if !seen.insert(s.id.as_str()) {
                return Err(BuildError::new("subscription", &s.id, "is listed twice"));
            }
        }
        let mut dedup = self.dedup;
        match (&mut dedup, self.dedup_max_ids) {
            (None, Some(n)) => {
                return Err(BuildError::new(
                    "dedup.max_ids",
                    n,
                    "needs a deduplication attribute: set dedup.attribute",
                ))
            }
            (Some(d), Some(n)) => d.max_ids = n,
            _ => {}
        }
        if let Some(d) = &dedup {
            check_attribute_key("dedup.attribute", &d.attribute)?;
            if d.window_ms < 1_000 {
                return Err(BuildError::new(
                    "dedup.window",
                    format!("{}ms", d.window_ms),
                    "must be at least 1s",
                ));
            }
            if d.max_ids == 0 {
                return Err(BuildError::new("dedup.max_ids", 0, "must be at least 1"));
            }
        }
        if let Some(a) = &self.event_time_attribute {
            check_attribute_key("event_time_attribute", a)?;
        }
        let alignment = alignment(self.alignment, self.alignment_update_interval)?;
        let streams = self.subscriber.config().parallel_pull_count;
        if self.ordering_mode == OrderingMode::PerKey {
            if streams != 1 {
                return Err(BuildError::between(
                    "parallel_pull_count",
                    "ordering_mode",
                    streams,
                    "must be 1 with {other} 'per-key': several streams of one subscription deliver a key's messages out of order",
                ));
            }
            if let Some(s) = self
                .subscriptions
                .iter()
                .find(|s| s.create.as_ref().is_some_and(|c| !c.message_ordering))
            {
                return Err(BuildError::between(
                    "ordering_mode",
                    "enable_message_ordering",
                    "per-key",
                    format!(
                        "needs message ordering, but subscription '{}' would be created without it: set {{other}}",
                        s.id
                    ),
                ));
            }
        }
        Ok(PubSubSource {
            profile: PubSubProfile {
                project,
                authentication: self.authentication,
            },
            config: SourceConfig {
                subscriptions: self.subscriptions,
                start_position: self.start_position.config(),
                ordering_mode: self.ordering_mode,
                deserialization_failure_policy: self.policy,
                max_consecutive_failures,
                subscriber: self.subscriber.config().clone(),
                dead_letter: self.dead_letter,
                dedup,
                event_time_attribute: self.event_time_attribute,
                alignment,
            },
        })
    }
}

/// Checks an alignment group and applies its update interval.
fn alignment(
    a: Option<pubsub_schema::AlignmentConfig>,
    every: Option<std::time::Duration>,
) -> Result<Option<pubsub_schema::AlignmentConfig>, BuildError> {
    let Some(mut a) = a else {
        return match every {
            Some(d) => Err(BuildError::new(
                "alignment.update_interval",
                format!("{}ms", d.as_millis()),
                "needs a watermark alignment group: set alignment.group",
            )),
            None => Ok(None),
        };
    };
    if a.group.trim().is_empty() || a.group.len() > 256 {
        return Err(BuildError::new(
            "alignment.group",
            &a.group,
            "must be 1 to 256 characters, not blank",
        ));
    }
    if a.max_drift_ms == 0 {
        return Err(BuildError::new(
            "alignment.max_drift",
            "0ms",
            "must be at least 1ms",
        ));
    }
    if let Some(d) = every {
        if d.subsec_nanos() % 1_000_000 != 0 || d < std::time::Duration::from_millis(50) {
            return Err(BuildError::new(
                "alignment.update_interval",
                format!("{d:?}"),
                "must be whole milliseconds, at least 50ms",
            ));
        }
        a.update_interval_ms = d.as_millis().try_into().unwrap_or(u64::MAX);
    }
    Ok(Some(a))
}

/// An attribute key (Pub/Sub's rule): 1 to 256 bytes, not starting with `goog` (reserved
/// for Google).
pub(crate) fn check_attribute_key(option: &'static str, key: &str) -> Result<(), BuildError> {
    if key.is_empty() || key.len() > 256 {
        return Err(BuildError::new(
            option,
            key,
            "must be an attribute key of 1 to 256 bytes",
        ));
    }
    if key.to_ascii_lowercase().starts_with("goog") {
        return Err(BuildError::new(
            option,
            key,
            "must not start with 'goog' (reserved by Pub/Sub)",
        ));
    }
    Ok(())
}

/// A resource id: non-blank, no surrounding whitespace, no `/` (SPEC 5.1).
pub(crate) fn check_id(option: &'static str, id: &str) -> Result<(), BuildError> {
    if id.trim().is_empty() || id.trim() != id || id.contains('/') {
        return Err(BuildError::new(
            option,
            id,
            "must be a non-blank id without '/' or surrounding spaces",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> PubSubSourceBuilder {
        PubSubSource::builder()
            .project("p")
            .emulator_endpoint("localhost:8085")
    }

    #[test]
    fn builds_and_round_trips_through_config() {
        let create = SubscriptionCreateOptions::builder()
            .topic("t")
            .build()
            .unwrap();
        let s = base()
            .subscription("a")
            .subscription_with_create("b", create)
            .start_position(PubSubStartPosition::latest())
            .build()
            .unwrap();
        assert_eq!(
            s.subscription_names(),
            ["projects/p/subscriptions/a", "projects/p/subscriptions/b"]
        );
        let (profile, config) = s.clone().into_parts();
        assert_eq!(PubSubSource::from_config(profile, config).unwrap(), s);
    }

    #[test]
    fn rejections_name_the_setter() {
        let e = |b: PubSubSourceBuilder| b.build().unwrap_err().to_string();
        assert!(e(base()).contains("at least one subscription"));
        assert!(e(base().subscription("a").subscription("a")).contains("listed twice"));
        assert!(e(base().subscription("a/b")).contains("'subscription'"));
        assert_eq!(
            crate::sql_error(
                base()
                    .subscription("a")
                    .max_consecutive_failures(0)
                    .build()
                    .unwrap_err()
            )
            .to_string(),
            "option 'scan.max-consecutive-failures' is invalid: must be at least 1, or -1 for no limit, was '0'"
        );
        assert!(e(base().subscription("a").max_consecutive_failures(-2)).contains("'-2'"));
        for n in [-1, 1, 100, i64::MAX] {
            let s = base()
                .subscription("a")
                .max_consecutive_failures(n)
                .build()
                .unwrap();
            assert_eq!(s.config().max_consecutive_failures, n);
        }
        let s = base().subscription("a").build().unwrap();
        assert_eq!(s.config().max_consecutive_failures, 100);
        assert!(e(PubSubSource::builder().subscription("a")).contains("'project'"));
        assert!(
            e(base().subscription("a").emulator_endpoint("nope")).contains("'emulator_endpoint'")
        );
        let two_streams = PubSubSubscriberOptions::builder()
            .parallel_pull_count(2)
            .build()
            .unwrap();
        assert_eq!(
            e(base()
                .subscription("a")
                .ordering_mode(OrderingMode::PerKey)
                .subscriber_options(two_streams)),
            "option 'parallel_pull_count' is invalid: must be 1 with 'ordering_mode' 'per-key': several streams of one subscription deliver a key's messages out of order, was '2'"
        );
        let unordered = SubscriptionCreateOptions::builder()
            .topic("t")
            .build()
            .unwrap();
        assert!(e(base()
            .subscription_with_create("a", unordered)
            .ordering_mode(OrderingMode::PerKey))
        .contains("would be created without it"));
    }

    fn queue(topic: &str) -> PubSubDeadLetterQueue {
        PubSubDeadLetterQueue::builder()
            .project("p")
            .topic(topic)
            .emulator_endpoint("localhost:8086")
            .build()
            .unwrap()
    }

    #[test]
    fn dead_letter_policy_and_queue_go_together() {
        let s = base()
            .subscription("a")
            .deserialization_failure_policy(DeserializationFailurePolicy::DeadLetter)
            .dead_letter_queue(queue("dead"))
            .build()
            .unwrap();
        let d = s.config().dead_letter.as_ref().unwrap();
        assert_eq!(d.topic, "dead");
        // The queue keeps its own endpoint, not the table's.
        assert_eq!(
            d.authentication,
            Authentication::Emulator {
                endpoint: "localhost:8086".into()
            }
        );
        let (profile, config) = s.clone().into_parts();
        assert_eq!(PubSubSource::from_config(profile, config).unwrap(), s);

        let e = base()
            .subscription("a")
            .deserialization_failure_policy(DeserializationFailurePolicy::DeadLetter)
            .build()
            .unwrap_err();
        assert_eq!(e.option, "deserialization_failure_policy");
        assert_eq!(
            crate::sql_error(e).to_string(),
            "option 'scan.deserialization-failure-policy' is invalid: needs a dead-letter queue: set 'scan.dead-letter.topic', was 'dead-letter'"
        );
        let e = base()
            .subscription("a")
            .deserialization_failure_policy(DeserializationFailurePolicy::Drop)
            .dead_letter_queue(queue("dead"))
            .build()
            .unwrap_err();
        assert_eq!((e.option, e.value.as_str()), ("dead_letter.topic", "dead"));
        let e = crate::sql_error(e).to_string();
        assert!(
            e.starts_with("option 'scan.dead-letter.topic' is invalid: is set, but 'scan.deserialization-failure-policy' is 'drop'"),
            "{e}"
        );
    }

    #[test]
    fn queue_rules_are_checked_by_from_config_with_sql_keys() {
        let mut config = SourceConfig::new("a");
        config.deserialization_failure_policy = DeserializationFailurePolicy::DeadLetter;
        let mut d = pubsub_schema::DeadLetterQueueConfig::new("dead");
        d.max_in_flight_messages = -5;
        config.dead_letter = Some(d);
        let profile = crate::client::emulator_profile("p", "localhost:8085");
        let e = PubSubSource::from_config(profile, config).unwrap_err();
        assert_eq!(
            crate::sql_error(e).to_string(),
            "option 'scan.dead-letter.max-in-flight-messages' is invalid: must be positive, 0 (write-through) or -1 (unbounded until the flush), was '-5'"
        );
    }

    #[test]
    fn dedup_rules_name_their_sql_keys() {
        let e = |b: PubSubSourceBuilder| crate::sql_error(b.build().unwrap_err()).to_string();
        let a = || base().subscription("a");
        let ok = a()
            .dedup("record-id", std::time::Duration::from_secs(90))
            .dedup_max_ids(10)
            .build()
            .unwrap();
        let d = ok.config().dedup.as_ref().unwrap();
        assert_eq!(
            (d.attribute.as_str(), d.window_ms, d.max_ids),
            ("record-id", 90_000, 10)
        );
        assert_eq!(
            e(a().dedup("googclient_x", std::time::Duration::from_secs(60))),
            "option 'scan.dedup.attribute' is invalid: must not start with 'goog' (reserved by Pub/Sub), was 'googclient_x'"
        );
        assert_eq!(
            e(a().dedup("", std::time::Duration::from_secs(60))),
            "option 'scan.dedup.attribute' is invalid: must be an attribute key of 1 to 256 bytes, was ''"
        );
        assert_eq!(
            e(a().dedup("id", std::time::Duration::from_millis(999))),
            "option 'scan.dedup.window' is invalid: must be at least 1s, was '999ms'"
        );
        assert_eq!(
            e(a()
                .dedup("id", std::time::Duration::from_secs(60))
                .dedup_max_ids(0)),
            "option 'scan.dedup.max-ids' is invalid: must be at least 1, was '0'"
        );
        assert!(e(a().dedup_max_ids(5)).contains("needs a deduplication attribute"));
    }

    #[test]
    fn alignment_rules_name_their_sql_keys() {
        use std::time::Duration;
        let e = |b: PubSubSourceBuilder| crate::sql_error(b.build().unwrap_err()).to_string();
        let a = || base().subscription("a");
        let ok = a()
            .watermark_alignment("clicks", Duration::from_secs(30))
            .watermark_alignment_update_interval(Duration::from_millis(200))
            .build()
            .unwrap();
        let c = ok.config().alignment.as_ref().unwrap();
        assert_eq!(
            (c.group.as_str(), c.max_drift_ms, c.update_interval_ms),
            ("clicks", 30_000, 200)
        );
        // Through the config (SQL, the wizard) and back.
        let again = PubSubSource::from_config(ok.profile().clone(), ok.config().clone()).unwrap();
        assert_eq!(again.config().alignment, ok.config().alignment);
        assert_eq!(
            e(a().watermark_alignment(" ", Duration::from_secs(1))),
            "option 'scan.watermark.alignment.group' is invalid: must be 1 to 256 characters, not blank, was ' '"
        );
        assert_eq!(
            e(a().watermark_alignment("g", Duration::ZERO)),
            "option 'scan.watermark.alignment.max-drift' is invalid: must be at least 1ms, was '0ms'"
        );
        assert!(e(a()
            .watermark_alignment("g", Duration::from_secs(1))
            .watermark_alignment_update_interval(Duration::from_millis(10)))
        .contains("option 'scan.watermark.alignment.update-interval' is invalid: must be whole milliseconds, at least 50ms"));
        assert!(
            e(a().watermark_alignment_update_interval(Duration::from_secs(1)))
                .contains("needs a watermark alignment group")
        );
    }

    #[test]
    fn event_time_rules_name_their_sql_keys() {
        use crate::source::options::PubSubSubscriberOptions;
        use std::time::Duration;
        let e = |b: PubSubSourceBuilder| crate::sql_error(b.build().unwrap_err()).to_string();
        let a = || base().subscription("a");
        let ok = a()
            .event_time_attribute("eventTime")
            .subscriber_options(
                PubSubSubscriberOptions::builder()
                    .watermark_out_of_orderness(Duration::from_secs(30))
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        assert_eq!(
            ok.config().event_time_attribute.as_deref(),
            Some("eventTime")
        );
        assert_eq!(
            ok.config().subscriber.watermark_out_of_orderness_ms,
            Some(30_000)
        );
        assert_eq!(
            e(a().event_time_attribute("goog-time")),
            "option 'scan.event-time.attribute' is invalid: must not start with 'goog' (reserved by Pub/Sub), was 'goog-time'"
        );
        assert_eq!(
            e(a().event_time_attribute("x".repeat(257))),
            format!("option 'scan.event-time.attribute' is invalid: must be an attribute key of 1 to 256 bytes, was '{}'", "x".repeat(257))
        );
        let bound = |d: Duration| {
            crate::sql_error(
                PubSubSubscriberOptions::builder()
                    .watermark_out_of_orderness(d)
                    .build()
                    .unwrap_err(),
            )
            .to_string()
        };
        assert!(
            bound(Duration::from_secs(300 * 366 * 86_400))
                .starts_with("option 'scan.watermark.out-of-orderness' is invalid: must be less than 106,752 days"),
            "{}",
            bound(Duration::from_secs(300 * 366 * 86_400))
        );
        assert!(bound(Duration::from_micros(1_500)).contains("whole number of milliseconds"));
    }
}
