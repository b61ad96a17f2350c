//! `SubscriptionCreateOptions` (SPEC 5.5; the reference connector's
//! `SubscriptionCreateOptions.Builder`), creating a missing subscription with them, and the
//! startup checks run on every subscription before any reader pulls.

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::client::SubscriptionAdmin;
use google_cloud_pubsub::model::{DeadLetterPolicy, ExpirationPolicy, Subscription};
use pubsub_schema::{DeadLetterConfig, Expiration, SubscriptionCreateConfig};

use crate::build_error::{show, whole_ms, BuildError};
use crate::client;

/// Pub/Sub's ack deadline range, whole seconds (`Subscription.ack_deadline_seconds`).
pub const ACK_DEADLINE_RANGE_S: (u64, u64) = (10, 600);
/// Pub/Sub's message retention range (`Subscription.message_retention_duration`).
pub const RETENTION_RANGE: (Duration, Duration) = (
    Duration::from_secs(600),
    Duration::from_secs(31 * 24 * 3600),
);
/// The shortest expiration TTL Pub/Sub accepts (`ExpirationPolicy.ttl`).
pub const MIN_EXPIRATION_TTL: Duration = Duration::from_secs(24 * 3600);
/// Pub/Sub's range of `DeadLetterPolicy.max_delivery_attempts`.
pub const DELIVERY_ATTEMPTS_RANGE: (u32, u32) = (5, 100);

/// Validated options to create a missing subscription with. Applied at creation only: an
/// existing subscription is never updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionCreateOptions {
    config: SubscriptionCreateConfig,
}

impl SubscriptionCreateOptions {
    /// A builder; `topic` is required.
    pub fn builder() -> SubscriptionCreateOptionsBuilder {
        SubscriptionCreateOptionsBuilder::default()
    }

    /// Validates a table config's create options through the builder.
    pub fn from_config(c: &SubscriptionCreateConfig) -> Result<Self, BuildError> {
        SubscriptionCreateOptionsBuilder {
            config: Some(c.clone()),
            bad: None,
        }
        .build()
    }

    pub fn config(&self) -> &SubscriptionCreateConfig {
        &self.config
    }
}

/// Builder of [`SubscriptionCreateOptions`].
#[derive(Debug, Clone, Default)]
pub struct SubscriptionCreateOptionsBuilder {
    config: Option<SubscriptionCreateConfig>,
    /// A duration that cannot be stored exactly: refused by `build()`.
    bad: Option<BuildError>,
}

impl SubscriptionCreateOptionsBuilder {
    fn c(&mut self) -> &mut SubscriptionCreateConfig {
        self.config.get_or_insert_with(|| SubscriptionCreateConfig {
            topic: String::new(),
            ack_deadline_ms: None,
            message_ordering: false,
            message_retention_ms: None,
            retain_acked_messages: false,
            expiration: None,
            dead_letter: None,
            filter: None,
        })
    }

    fn ms(&mut self, option: &'static str, d: Duration) -> Option<u64> {
        match whole_ms(option, d) {
            Ok(ms) => Some(ms),
            Err(e) => {
                self.bad.get_or_insert(e);
                None
            }
        }
    }

    /// The topic the subscription is created on: an id in the profile's project, or a
    /// full `projects/P/topics/T` name (it may live in another project). Required.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.c().topic = topic.into();
        self
    }

    /// The initial ack deadline, a whole number of seconds in 10 s..600 s (Pub/Sub stores
    /// seconds; a remainder is refused, not dropped). Default: Pub/Sub's 10 s. The client
    /// extends leases beyond it (see `max_ack_extension_period`).
    pub fn ack_deadline(mut self, d: Duration) -> Self {
        let ms = self.ms("ack_deadline", d);
        self.c().ack_deadline_ms = ms;
        self
    }

    /// Deliver messages of one ordering key in order; needed by ordering mode `per-key`.
    /// Fixed at creation. Default false.
    pub fn enable_message_ordering(mut self, on: bool) -> Self {
        self.c().message_ordering = on;
        self
    }

    /// How long unacknowledged messages are kept, 10 min..31 days (Pub/Sub's range).
    /// Default: Pub/Sub's 7 days.
    pub fn message_retention(mut self, d: Duration) -> Self {
        let ms = self.ms("message_retention", d);
        self.c().message_retention_ms = ms;
        self
    }

    /// Keep acknowledged messages for the retention period, so a backwards seek can
    /// replay them. Default false.
    pub fn retain_acked_messages(mut self, on: bool) -> Self {
        self.c().retain_acked_messages = on;
        self
    }

    /// Delete the subscription after this long without activity, at least 1 day.
    /// Default: Pub/Sub's 31 days. Replaces an earlier `never_expire` (last call wins).
    pub fn expiration_ttl(mut self, d: Duration) -> Self {
        if let Some(ms) = self.ms("expiration_ttl", d) {
            self.c().expiration = Some(Expiration::Ttl { ttl_ms: ms });
        }
        self
    }

    /// Never delete the subscription for inactivity. Replaces an earlier
    /// `expiration_ttl` (last call wins).
    pub fn never_expire(mut self) -> Self {
        self.c().expiration = Some(Expiration::Never);
        self
    }

    /// Forward a message to `topic` (an id or a full name; it must exist) after
    /// `max_delivery_attempts` deliveries (5..100, Pub/Sub's range). Deliveries count, not
    /// causes: restarts raise the count too.
    pub fn dead_letter_policy(
        mut self,
        topic: impl Into<String>,
        max_delivery_attempts: u32,
    ) -> Self {
        self.c().dead_letter = Some(DeadLetterConfig {
            topic: topic.into(),
            max_delivery_attempts,
        });
        self
    }

    /// A Pub/Sub filter expression; only matching messages are delivered. Fixed at
    /// creation. (The emulator does not apply filters.)
    pub fn filter(mut self, filter: impl Into<String>) -> Self {
        self.c().filter = Some(filter.into());
        self
    }

    /// Validates every rule above. Errors name the setter and the value.
    pub fn build(mut self) -> Result<SubscriptionCreateOptions, BuildError> {
        if let Some(e) = self.bad.take() {
            return Err(e);
        }
        let c = self.c().clone();
        check_topic("topic", &c.topic)?;
        if let Some(ms) = c.ack_deadline_ms {
            let d = Duration::from_millis(ms);
            let (lo, hi) = ACK_DEADLINE_RANGE_S;
            if ms % 1000 != 0 {
                return Err(BuildError::new(
                    "ack_deadline",
                    show(d),
                    "must be a whole number of seconds (Pub/Sub stores seconds)",
                ));
            }
            if !(lo..=hi).contains(&(ms / 1000)) {
                return Err(BuildError::new(
                    "ack_deadline",
                    show(d),
                    "must be between 10s and 600s",
                ));
            }
        }
        if let Some(ms) = c.message_retention_ms {
            let d = Duration::from_millis(ms);
            if d < RETENTION_RANGE.0 || d > RETENTION_RANGE.1 {
                return Err(BuildError::new(
                    "message_retention",
                    show(d),
                    "must be between 10 minutes and 31 days",
                ));
            }
        }
        if let Some(Expiration::Ttl { ttl_ms }) = c.expiration {
            let d = Duration::from_millis(ttl_ms);
            if d < MIN_EXPIRATION_TTL {
                return Err(BuildError::new(
                    "expiration_ttl",
                    show(d),
                    "must be at least 1 day",
                ));
            }
        }
        if let Some(dl) = &c.dead_letter {
            check_topic("dead_letter_topic", &dl.topic)?;
            let (lo, hi) = DELIVERY_ATTEMPTS_RANGE;
            if !(lo..=hi).contains(&dl.max_delivery_attempts) {
                return Err(BuildError::new(
                    "max_delivery_attempts",
                    dl.max_delivery_attempts,
                    "must be between 5 and 100 (Pub/Sub's range)",
                ));
            }
        }
        if let Some(f) = &c.filter {
            if f.trim().is_empty() {
                return Err(BuildError::new("filter", f, "must not be blank"));
            }
        }
        Ok(SubscriptionCreateOptions { config: c })
    }
}

/// A topic id or `projects/P/topics/T` (non-blank parts, no surrounding spaces).
fn check_topic(option: &'static str, t: &str) -> Result<(), BuildError> {
    let ok_part = |p: &str| !p.is_empty() && p.trim() == p && !p.contains('/');
    let ok = match t.split('/').collect::<Vec<_>>().as_slice() {
        [id] => ok_part(id),
        ["projects", p, "topics", id] => ok_part(p) && ok_part(id),
        _ => false,
    };
    if !ok {
        let why = if t.is_empty() {
            "a topic is required"
        } else {
            "must be a topic id or projects/PROJECT/topics/TOPIC"
        };
        return Err(BuildError::new(option, t, why));
    }
    Ok(())
}

/// A topic option as a full resource name.
pub fn topic_name(project: &str, t: &str) -> String {
    if t.starts_with("projects/") {
        t.to_string()
    } else {
        client::topic_path(project, t)
    }
}

/// The `Subscription` to create for `name` with `c`.
pub fn subscription_request(
    project: &str,
    name: &str,
    c: &SubscriptionCreateConfig,
) -> Subscription {
    let mut s = Subscription::new()
        .set_name(name.to_string())
        .set_topic(topic_name(project, &c.topic))
        .set_enable_message_ordering(c.message_ordering)
        .set_retain_acked_messages(c.retain_acked_messages);
    if let Some(ms) = c.ack_deadline_ms {
        s = s.set_ack_deadline_seconds((ms / 1000) as i32);
    }
    if let Some(ms) = c.message_retention_ms {
        s = s.set_message_retention_duration(wkt_duration(ms));
    }
    match c.expiration {
        Some(Expiration::Ttl { ttl_ms }) => {
            s = s.set_expiration_policy(ExpirationPolicy::new().set_ttl(wkt_duration(ttl_ms)));
        }
        // A policy without a TTL: never expires.
        Some(Expiration::Never) => s = s.set_expiration_policy(ExpirationPolicy::new()),
        None => {}
    }
    if let Some(dl) = &c.dead_letter {
        s = s.set_dead_letter_policy(
            DeadLetterPolicy::new()
                .set_dead_letter_topic(topic_name(project, &dl.topic))
                .set_max_delivery_attempts(dl.max_delivery_attempts as i32),
        );
    }
    if let Some(f) = &c.filter {
        s = s.set_filter(f.clone());
    }
    s
}

fn wkt_duration(ms: u64) -> google_cloud_wkt::Duration {
    google_cloud_wkt::Duration::clamp((ms / 1000) as i64, ((ms % 1000) * 1_000_000) as i32)
}

/// Describes subscription `name`; creates it with `create` when it does not exist
/// (ALREADY_EXISTS from a concurrent creator counts as success), never updates it.
/// Errors: missing without create options (naming the fix; a `pubsub_engine_spi::ConfigError`,
/// no restart creates it), or any admin failure.
pub async fn describe_or_create(
    admin: &SubscriptionAdmin,
    project: &str,
    name: &str,
    create: Option<&SubscriptionCreateConfig>,
    describe_error: impl Fn(&google_cloud_pubsub::Error) -> anyhow::Error,
) -> anyhow::Result<(Subscription, bool)> {
    let got = crate::diagnose::bounded(admin.get_subscription().set_subscription(name.to_string()))
        .send()
        .await;
    match got {
        Ok(s) => {
            if let Some(c) = create {
                warn_if_different(&s, &subscription_request(project, name, c));
            }
            Ok((s, false))
        }
        Err(e) if code(&e) == Some(Code::NotFound) => {
            let Some(c) = create else {
                // A restart finds it missing again: not restartable.
                return Err(pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
                    "subscription {name} does not exist: create it (gcloud pubsub subscriptions create), or let the source create it with 'scan.auto-create.topics' = '{}:TOPIC'",
                    name.rsplit('/').next().unwrap_or(name)
                )));
            };
            let req = subscription_request(project, name, c);
            let created = crate::diagnose::bounded(admin.create_subscription().with_request(req))
                .send()
                .await;
            match created {
                Ok(s) => {
                    tracing::info!("created subscription {name} on {}", s.topic);
                    Ok((s, true))
                }
                Err(e) if code(&e) == Some(Code::AlreadyExists) => {
                    let s = crate::diagnose::bounded(
                        admin.get_subscription().set_subscription(name.to_string()),
                    )
                    .send()
                    .await
                    .map_err(|e| describe_error(&e))?;
                    warn_if_different(&s, &subscription_request(project, name, c));
                    Ok((s, false))
                }
                Err(e) => Err(anyhow::anyhow!(
                    "cannot create subscription {name} on topic {}: {e}",
                    topic_name(project, &c.topic)
                )),
            }
        }
        Err(e) => Err(describe_error(&e)),
    }
}

/// Logs a WARN when an existing subscription differs from what its create options ask
/// for: it is used as it is (never updated), which a user who changed
/// `scan.auto-create.*` may not expect.
fn warn_if_different(existing: &Subscription, wanted: &Subscription) {
    let diffs = differences(existing, wanted);
    if !diffs.is_empty() {
        tracing::warn!(
            "subscription {} already exists and differs from its create options ({}): it is used as it is, never updated; delete it to have it created anew, or align 'scan.auto-create.*'",
            existing.name,
            diffs.join("; ")
        );
    }
}

/// The settings the create options ask for (`wanted`, from `subscription_request`) that
/// `existing` does not have, as `field: existing X, asked Y`. Settings the options leave
/// unset are not compared.
pub fn differences(existing: &Subscription, wanted: &Subscription) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |field: &str, is: String, asked: String| {
        if is != asked {
            out.push(format!("{field}: existing {is}, asked {asked}"));
        }
    };
    check("topic", existing.topic.clone(), wanted.topic.clone());
    check(
        "message ordering",
        existing.enable_message_ordering.to_string(),
        wanted.enable_message_ordering.to_string(),
    );
    check(
        "retain acked messages",
        existing.retain_acked_messages.to_string(),
        wanted.retain_acked_messages.to_string(),
    );
    if wanted.ack_deadline_seconds != 0 {
        check(
            "ack deadline (s)",
            existing.ack_deadline_seconds.to_string(),
            wanted.ack_deadline_seconds.to_string(),
        );
    }
    if let Some(d) = &wanted.message_retention_duration {
        check(
            "message retention (s)",
            existing
                .message_retention_duration
                .as_ref()
                .map_or("unset".into(), |e| e.seconds().to_string()),
            d.seconds().to_string(),
        );
    }
    if let Some(dl) = &wanted.dead_letter_policy {
        let show = |p: Option<&DeadLetterPolicy>| {
            p.map_or("none".to_string(), |p| {
                format!("{} after {}", p.dead_letter_topic, p.max_delivery_attempts)
            })
        };
        check(
            "dead-letter policy",
            show(existing.dead_letter_policy.as_ref()),
            show(Some(dl)),
        );
    }
    if !wanted.filter.is_empty() {
        check("filter", existing.filter.clone(), wanted.filter.clone());
    }
    out
}

fn code(e: &google_cloud_pubsub::Error) -> Option<Code> {
    e.status().map(|s| s.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: SubscriptionCreateOptionsBuilder) -> String {
        b.build().unwrap_err().to_string()
    }

    #[test]
    fn topic_is_required_and_checked() {
        assert_eq!(
            err(SubscriptionCreateOptions::builder()),
            "option 'topic' is invalid: a topic is required, was ''"
        );
        assert!(err(SubscriptionCreateOptions::builder().topic("a/b")).contains("projects/PROJECT"));
        let o = SubscriptionCreateOptions::builder()
            .topic("projects/other/topics/t")
            .build()
            .unwrap();
        assert_eq!(
            topic_name("p", &o.config().topic),
            "projects/other/topics/t"
        );
        assert_eq!(topic_name("p", "t"), "projects/p/topics/t");
    }

    #[test]
    fn every_rule_names_the_setter_and_value() {
        let b = || SubscriptionCreateOptions::builder().topic("t");
        assert_eq!(
            err(b().ack_deadline(Duration::from_millis(10_500))),
            "option 'ack_deadline' is invalid: must be a whole number of seconds (Pub/Sub stores seconds), was '10500ms'"
        );
        assert!(err(b().ack_deadline(Duration::from_secs(5))).contains("between 10s and 600s"));
        assert!(err(b().message_retention(Duration::from_secs(60))).contains("10 minutes"));
        assert!(err(b().expiration_ttl(Duration::from_secs(3600))).contains("at least 1 day"));
        assert!(err(b().dead_letter_policy("d", 4))
            .contains("between 5 and 100 (Pub/Sub's range), was '4'"));
        assert!(err(b().dead_letter_policy("d", 101)).contains("was '101'"));
        assert!(err(b().filter(" ")).contains("'filter'"));
    }

    #[test]
    fn expiration_last_call_wins_and_request_carries_every_field() {
        let day = Duration::from_secs(24 * 3600);
        let o = SubscriptionCreateOptions::builder()
            .topic("t")
            .never_expire()
            .expiration_ttl(2 * day)
            .build()
            .unwrap();
        assert_eq!(
            o.config().expiration,
            Some(Expiration::Ttl {
                ttl_ms: 172_800_000
            })
        );
        let o = SubscriptionCreateOptions::builder()
            .topic("t")
            .expiration_ttl(2 * day)
            .never_expire()
            .ack_deadline(Duration::from_secs(30))
            .enable_message_ordering(true)
            .message_retention(day)
            .retain_acked_messages(true)
            .dead_letter_policy("dead", 5)
            .filter("attributes.k = \"v\"")
            .build()
            .unwrap();
        assert_eq!(o.config().expiration, Some(Expiration::Never));
        let r = subscription_request("p", "projects/p/subscriptions/s", o.config());
        assert_eq!(r.topic, "projects/p/topics/t");
        assert_eq!(r.ack_deadline_seconds, 30);
        assert!(r.enable_message_ordering && r.retain_acked_messages);
        assert_eq!(r.message_retention_duration.unwrap().seconds(), 86_400);
        assert!(
            r.expiration_policy.unwrap().ttl.is_none(),
            "never expire: no TTL"
        );
        let dl = r.dead_letter_policy.unwrap();
        assert_eq!(
            (dl.dead_letter_topic.as_str(), dl.max_delivery_attempts),
            ("projects/p/topics/dead", 5)
        );
        assert_eq!(r.filter, "attributes.k = \"v\"");
    }

    #[test]
    fn an_existing_subscription_is_compared_only_on_what_the_options_ask_for() {
        let c = SubscriptionCreateOptions::builder()
            .topic("t")
            .enable_message_ordering(true)
            .dead_letter_policy("dlq", 5)
            .build()
            .unwrap();
        let wanted = subscription_request("p", "projects/p/subscriptions/s", c.config());
        assert!(differences(&wanted, &wanted).is_empty());
        let existing = wanted
            .clone()
            .set_topic("projects/p/topics/other")
            .set_enable_message_ordering(false)
            .set_ack_deadline_seconds(30)
            .set_dead_letter_policy(
                DeadLetterPolicy::new()
                    .set_dead_letter_topic("projects/p/topics/dlq")
                    .set_max_delivery_attempts(10),
            );
        let d = differences(&existing, &wanted);
        assert_eq!(
            d,
            vec![
                "topic: existing projects/p/topics/other, asked projects/p/topics/t".to_string(),
                "message ordering: existing false, asked true".to_string(),
                "dead-letter policy: existing projects/p/topics/dlq after 10, asked projects/p/topics/dlq after 5".to_string(),
            ],
            "the ack deadline is not compared: the options leave it unset"
        );
    }
}
