//! The source table's job-level preparation (SPEC 5.4, 5.5), run once per job start on
//! process 0 before any source subtask of any process starts (`Connector::prepare_source`):
//! describe every subscription, create a missing one that has create options, run the
//! startup checks, then apply the start position with at most one seek per job.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use google_cloud_pubsub::model::Subscription;
use pubsub_engine_spi::{ConfigError, OperatorState};
use pubsub_schema::{DeserializationFailurePolicy, OrderingMode, SourceConfig, StartPosition};
use pubsub_table_options as keys;

use super::builder::PubSubSource;
use super::create::describe_or_create;
use super::start_position::{
    seek_once, AppliedStartPosition, PubSubStartPosition, SeekDecisions, SeekOutcome,
};
use crate::build_error::show;
use crate::client;
use crate::diagnose::{self, Resource};

/// Prepares `source` for a job start. `restored`: the source's subtask states in the last
/// completed checkpoint (empty on the job's first start); subscriptions they record as
/// positioned are not seeked again. `decisions`: seek targets an earlier start recorded
/// and where this one records its own (see [`SeekDecisions`]). `checkpoint_interval`: the job's.
///
/// Errors name the option or the subscription and the fix. Those no restart can fix are
/// [`ConfigError`]s: an option that does not fit the checkpoint interval (see
/// [`interval_checks`]), a missing subscription without create options, a failed
/// [`startup_checks`] rule, a start timestamp in the future, a missing dead-letter topic.
/// Server failures are not.
pub async fn prepare(
    source: &PubSubSource,
    restored: &BTreeMap<usize, OperatorState>,
    decisions: &SeekDecisions<'_>,
    checkpoint_interval: Duration,
) -> anyhow::Result<SeekOutcome> {
    let profile = source.profile();
    let config = source.config();
    // No server needed: refuse before any connection.
    for warning in interval_checks(config, checkpoint_interval)? {
        tracing::warn!("{warning}");
    }
    // The dead-letter topic must exist: the queue never creates it (SPEC 6.1).
    if let Some(d) = &config.dead_letter {
        let q = crate::dead_letter::PubSubDeadLetterQueue::from_config(&profile.project, d)
            .map_err(ConfigError::wrap)?
            .with_key_prefix("scan.");
        crate::dead_letter::check_not_inherited(profile, &q, "scan.")?;
        q.check_topic().await?;
    }
    let applied = AppliedStartPosition::from_state(restored);
    let admin = client::subscription_admin(profile).await?;
    let names = source.subscription_names();
    for (s, name) in config.subscriptions.iter().zip(&names) {
        let (sub, _created) =
            describe_or_create(&admin, &profile.project, name, s.create.as_ref(), |e| {
                diagnose::startup_error(profile, Resource::Subscription(name), e)
            })
            .await?;
        let warnings = startup_checks(name, &sub, config)?;
        // The warnings are about a seek, which a subscription positioned already skips.
        if applied.as_ref().is_none_or(|a| !a.covers(name)) {
            for warning in warnings {
                tracing::warn!("{warning}");
            }
        }
    }
    let position =
        PubSubStartPosition::from_config(config.start_position).map_err(ConfigError::wrap)?;
    seek_once(
        &admin,
        &names,
        position,
        applied.as_ref(),
        decisions,
        SystemTime::now(),
    )
    .await
}

/// The rules between the source's options and the job's checkpoint interval (SPEC 5.3),
/// known only when the job starts. Errors ([`ConfigError`]s, naming the key, the value
/// and the interval): a non-zero `scan.ack.max-extension-period` not above the interval
/// (held messages would be redelivered before their checkpoint commits); a non-zero
/// `scan.first-checkpoint-timeout` not above it (the detector would fire before the first
/// checkpoint can complete). Returns warnings: extension disabled, or below twice the
/// interval.
pub fn interval_checks(config: &SourceConfig, interval: Duration) -> anyhow::Result<Vec<String>> {
    let c = &config.subscriber;
    // The config cannot tell a default from a value set to it; saying so helps either way.
    let defaults = pubsub_schema::SubscriberOptionsConfig::default();
    let mut warnings = Vec::new();
    let period = Duration::from_millis(c.max_ack_extension_period_ms);
    let key = keys::MAX_ACK_EXTENSION_PERIOD;
    if period.is_zero() {
        warnings.push(format!("'{key}' is 0: lease extension is disabled, so a message held longer than the stream's ack deadline is redelivered before its checkpoint commits (checkpoint interval {})", show(interval)));
    } else if period <= interval {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "option '{key}' is invalid: must exceed the checkpoint interval ({}), or a held message's lease ends before its checkpoint commits and it is redelivered, was '{}'{}",
            show(interval),
            show(period),
            if c.max_ack_extension_period_ms == defaults.max_ack_extension_period_ms { " (the default)" } else { "" }
        )));
    } else if period < interval * 2 {
        warnings.push(format!("'{key}' ({}) is less than twice the checkpoint interval ({}): a slow checkpoint will cause redeliveries", show(period), show(interval)));
    }
    let timeout = Duration::from_millis(c.first_checkpoint_timeout_ms);
    if !timeout.is_zero() && timeout <= interval {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "option '{}' is invalid: must exceed the checkpoint interval ({}) or be '0s' (off): the detector would fail the job before the first checkpoint can complete, was '{}'{}",
            keys::FIRST_CHECKPOINT_TIMEOUT,
            show(interval),
            show(timeout),
            if c.first_checkpoint_timeout_ms == defaults.first_checkpoint_timeout_ms { " (the default)" } else { "" }
        )));
    }
    Ok(warnings)
}

/// The startup checks of SPEC 5.5 on the described subscription `name`. Errors (each a
/// [`ConfigError`]): per-key ordering without message ordering; `nack` policy without a
/// dead-letter policy; ack confirmation without exactly-once delivery. Returns warnings: a
/// backwards start position on a subscription that retains no acked messages and whose
/// topic retains none.
pub fn startup_checks(
    name: &str,
    sub: &Subscription,
    config: &SourceConfig,
) -> anyhow::Result<Vec<String>> {
    subscription_rules(name, sub, config).map_err(ConfigError::wrap)?;
    let mut warnings = Vec::new();
    let backwards = matches!(
        config.start_position,
        StartPosition::EarliestRetained | StartPosition::Timestamp { .. }
    );
    if backwards && !sub.retain_acked_messages && sub.topic_message_retention_duration.is_none() {
        warnings.push(format!(
            "start position '{}' may seek subscription {name} back, but it retains no acknowledged messages and its topic has no retention: only messages never acknowledged come back",
            PubSubStartPosition::from_config(config.start_position)?.mode()
        ));
    }
    Ok(warnings)
}

/// The errors of [`startup_checks`], unmarked.
fn subscription_rules(name: &str, sub: &Subscription, config: &SourceConfig) -> anyhow::Result<()> {
    if config.ordering_mode == OrderingMode::PerKey && !sub.enable_message_ordering {
        anyhow::bail!(
            "option '{}' = 'per-key' needs message ordering on subscription {name}, which has none (ordering is fixed at creation: create a subscription with message ordering, e.g. 'scan.auto-create.message-ordering.enabled' = 'true', or use ordering 'none')",
            keys::ORDERING_MODE
        );
    }
    if config.deserialization_failure_policy == DeserializationFailurePolicy::Nack
        && !sub
            .dead_letter_policy
            .as_ref()
            .is_some_and(|d| !d.dead_letter_topic.is_empty())
    {
        anyhow::bail!(
            "option '{}' = 'nack' needs a dead-letter policy on subscription {name}, which has none (a nacked message would be redelivered forever): set a dead-letter topic on the subscription, or use 'drop'",
            keys::DESERIALIZATION_FAILURE_POLICY
        );
    }
    if config.subscriber.await_ack_confirmation_ms.is_some() && !sub.enable_exactly_once_delivery {
        anyhow::bail!(
            "option '{}' needs exactly-once delivery on subscription {name}, which has none: only exactly-once subscriptions confirm acks (enable it on the subscription, or unset the option)",
            keys::AWAIT_ACK_CONFIRMATION
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_pubsub::model::DeadLetterPolicy;

    fn config(f: impl FnOnce(&mut SourceConfig)) -> SourceConfig {
        let mut c = SourceConfig::new("s");
        f(&mut c);
        c
    }

    #[test]
    fn checks_reject_what_the_subscription_cannot_do() {
        let plain = Subscription::new();
        let n = "projects/p/subscriptions/s";
        let e = startup_checks(
            n,
            &plain,
            &config(|c| c.ordering_mode = OrderingMode::PerKey),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("'scan.ordering-mode' = 'per-key'") && e.to_string().contains(n),
            "{e}"
        );
        assert!(ConfigError::is_in(&e), "no restart fixes it");
        let nack =
            config(|c| c.deserialization_failure_policy = DeserializationFailurePolicy::Nack);
        assert!(startup_checks(n, &plain, &nack)
            .unwrap_err()
            .to_string()
            .contains("dead-letter policy"));
        let with_dlq = Subscription::new().set_dead_letter_policy(
            DeadLetterPolicy::new().set_dead_letter_topic("projects/p/topics/d"),
        );
        assert!(startup_checks(n, &with_dlq, &nack).unwrap().is_empty());
        let confirm = config(|c| c.subscriber.await_ack_confirmation_ms = Some(1000));
        assert!(startup_checks(n, &plain, &confirm)
            .unwrap_err()
            .to_string()
            .contains("exactly-once"));
        let eo = Subscription::new().set_enable_exactly_once_delivery(true);
        assert!(startup_checks(n, &eo, &confirm).unwrap().is_empty());
    }

    #[test]
    fn options_must_fit_the_checkpoint_interval() {
        let ten = Duration::from_secs(10);
        let e = interval_checks(
            &config(|c| c.subscriber.max_ack_extension_period_ms = 10_000),
            ten,
        )
        .unwrap_err();
        assert!(ConfigError::is_in(&e));
        assert_eq!(
            e.to_string(),
            "option 'scan.ack.max-extension-period' is invalid: must exceed the checkpoint interval (10s), or a held message's lease ends before its checkpoint commits and it is redelivered, was '10s'"
        );
        let w = interval_checks(
            &config(|c| c.subscriber.max_ack_extension_period_ms = 15_000),
            ten,
        )
        .unwrap();
        assert!(w[0].contains("less than twice"), "{w:?}");
        let w = interval_checks(
            &config(|c| c.subscriber.max_ack_extension_period_ms = 0),
            ten,
        )
        .unwrap();
        assert!(w[0].contains("lease extension is disabled"), "{w:?}");
        let e = interval_checks(
            &config(|c| c.subscriber.first_checkpoint_timeout_ms = 1500),
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert!(ConfigError::is_in(&e));
        assert_eq!(
            e.to_string(),
            "option 'scan.first-checkpoint-timeout' is invalid: must exceed the checkpoint interval (2s) or be '0s' (off): the detector would fail the job before the first checkpoint can complete, was '1500ms'"
        );
        // Off: no bound; the defaults (60m extension) still need an interval below 1 h.
        let off = config(|c| c.subscriber.first_checkpoint_timeout_ms = 0);
        assert!(interval_checks(&off, Duration::from_secs(1800))
            .unwrap()
            .is_empty());
        assert!(interval_checks(&off, Duration::from_secs(3600))
            .unwrap_err()
            .to_string()
            .contains("'scan.ack.max-extension-period'"));
        // The default 10m detector refuses a 10m interval.
        assert!(
            interval_checks(&SourceConfig::new("s"), Duration::from_secs(600))
                .unwrap_err()
                .to_string()
                .contains("was '600s' (the default)")
        );
    }

    #[test]
    fn a_backwards_seek_without_retention_warns() {
        let n = "projects/p/subscriptions/s";
        let back = config(|c| c.start_position = StartPosition::EarliestRetained);
        let w = startup_checks(n, &Subscription::new(), &back).unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("retains no acknowledged messages"), "{w:?}");
        let retained = Subscription::new().set_retain_acked_messages(true);
        assert!(startup_checks(n, &retained, &back).unwrap().is_empty());
        let latest = config(|c| c.start_position = StartPosition::Latest);
        assert!(startup_checks(n, &Subscription::new(), &latest)
            .unwrap()
            .is_empty());
    }
}
