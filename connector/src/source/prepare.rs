//! The source table's job-level preparation (SPEC 5.4, 5.5), run once per job start on
//! process 0 before any source subtask of any process starts (`Connector::prepare_source`):
//! describe every subscription, create a missing one that has create options, run the
//! startup checks, then apply the start position with at most one seek per job.

use std::time::SystemTime;

use google_cloud_pubsub::model::Subscription;
use pubsub_schema::{DeserializationFailurePolicy, OrderingMode, SourceConfig, StartPosition};
use pubsub_table_options as keys;

use super::builder::PubSubSource;
use super::create::describe_or_create;
use super::start_position::{seek_once, PubSubStartPosition, SeekOutcome};
use crate::client;
use crate::diagnose::{self, Resource};

/// Prepares `source` for a job start. `restored`: a checkpoint of this source exists, so
/// the job's first start already ran (no seek). Errors name the subscription and the fix.
pub async fn prepare(source: &PubSubSource, restored: bool) -> anyhow::Result<SeekOutcome> {
    let profile = source.profile();
    let config = source.config();
    let admin = client::subscription_admin(profile).await?;
    let names = source.subscription_names();
    for (s, name) in config.subscriptions.iter().zip(&names) {
        let (sub, _created) =
            describe_or_create(&admin, &profile.project, name, s.create.as_ref(), |e| {
                diagnose::startup_error(profile, Resource::Subscription(name), e)
            })
            .await?;
        for warning in startup_checks(name, &sub, config)? {
            tracing::warn!("{warning}");
        }
    }
    let position = PubSubStartPosition::from_config(config.start_position)?;
    seek_once(&admin, &names, position, restored, SystemTime::now()).await
}

/// The startup checks of SPEC 5.5 on the described subscription `name`. Errors: per-key
/// ordering without message ordering; `nack` policy without a dead-letter policy; ack
/// confirmation without exactly-once delivery. Returns warnings: a backwards start
/// position on a subscription that retains no acked messages and whose topic retains none.
pub fn startup_checks(
    name: &str,
    sub: &Subscription,
    config: &SourceConfig,
) -> anyhow::Result<Vec<String>> {
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
