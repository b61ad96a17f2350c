//! The sink's topic: checked at start, created under `create-if-needed` with the topic
//! create options (at start, and when a publish finds it gone).
//!
//! A topic recreated mid-run has no subscription, and Pub/Sub discards what is published
//! to a topic without one (issue 16, finding 6; decision 0018). "Mid-run" begins once this
//! run's start-up check found or created the topic: a later NOT_FOUND means it was
//! deleted. The sink then publishes again only once the topic has a subscription, and a
//! topic it creates mid-run carries the label [`RECREATED_LABEL`], so that every later
//! start (a restart after the failure) checks for a subscription again.

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::{MessageStoragePolicy, Topic};
use pubsub_schema::{CreateDisposition, TopicCreateConfig};

use super::PubSubSink;
use crate::client;
use crate::diagnose::{bounded, startup_error, Resource};

/// The label a sink puts on a topic it created mid-run, in place of a deleted one: such a
/// topic had no subscription when it was created. Every start checks a topic carrying it
/// for a subscription ([`require_subscription`]).
pub const RECREATED_LABEL: &str = "pubsub-connector-recreated";

/// The topic as [`ensure`] left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ensured {
    /// This call created the topic.
    pub created: bool,
    /// The topic carries [`RECREATED_LABEL`] (a sink created it mid-run, without a
    /// subscription), whoever created it.
    pub recreated: bool,
}

/// Makes sure the topic exists; `mid_run`: a publish found it gone after the start-up
/// check, so a topic created now carries [`RECREATED_LABEL`]. Errors name the topic and
/// the cause: missing under `create-never`, or for a sink of format `avro` (`avro`: a
/// topic made here would have no schema), both `pubsub_engine_spi::ConfigError`s;
/// permission; unreachable endpoint.
pub async fn ensure(sink: &PubSubSink, mid_run: bool, avro: bool) -> anyhow::Result<Ensured> {
    let profile = sink.profile();
    let name = sink.topic_name();
    let admin = client::topic_admin(profile).await?;
    match bounded(admin.get_topic().set_topic(name.clone()))
        .send()
        .await
    {
        Ok(t) => {
            return Ok(Ensured {
                created: false,
                recreated: t.labels.contains_key(RECREATED_LABEL),
            })
        }
        Err(e) if !is_not_found(&e) => {
            let error = startup_error(profile, Resource::Topic(&name), &e);
            // A name Pub/Sub refuses (too short, `goog` prefix): no restart fixes it.
            return Err(if is_code(&e, Code::InvalidArgument) {
                pubsub_engine_spi::ConfigError::wrap(error)
            } else {
                error
            });
        }
        Err(_) => {}
    }
    if sink.config().create_disposition == CreateDisposition::CreateNever {
        // No restart fixes it (exit 2; a topic deleted mid-run fails the checkpoint instead).
        return Err(pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
            "topic {name} does not exist and '{}' is 'create-never': create it, or set 'create-if-needed'",
            pubsub_table_options::CREATE_DISPOSITION
        )));
    }
    if avro {
        return Err(pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
            "topic {name} does not exist, and a sink of format 'avro' does not create it (a topic it made would have no schema): create it bound to an Avro schema"
        )));
    }
    let mut topic = with_options(
        Topic::new().set_name(name.clone()),
        &sink.config().topic_create,
    );
    if mid_run {
        topic = topic.set_labels([(RECREATED_LABEL, "true")]);
    }
    match bounded(admin.create_topic().with_request(topic))
        .send()
        .await
    {
        Ok(_) => {
            tracing::warn!(
                "created topic {name} ('{}' is 'create-if-needed'){}",
                pubsub_table_options::CREATE_DISPOSITION,
                if mid_run {
                    " in place of the deleted one"
                } else {
                    ""
                }
            );
            Ok(Ensured {
                created: true,
                recreated: mid_run,
            })
        }
        // Another subtask (or someone else) created it first: look at it again.
        Err(e) if is_code(&e, Code::AlreadyExists) => {
            let t = bounded(admin.get_topic().set_topic(name.clone()))
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("cannot describe topic {name}: {e}"))?;
            Ok(Ensured {
                created: false,
                recreated: t.labels.contains_key(RECREATED_LABEL),
            })
        }
        Err(e) => Err(anyhow::anyhow!("cannot create topic {name}: {e}")),
    }
}

/// Whether the topic has at least one subscription (one `ListTopicSubscriptions` page of
/// one; needs `pubsub.topics.listSubscriptions`). Errors name the topic.
pub async fn has_subscription(sink: &PubSubSink) -> anyhow::Result<bool> {
    let name = sink.topic_name();
    let admin = client::topic_admin(sink.profile()).await?;
    let page = bounded(
        admin
            .list_topic_subscriptions()
            .set_topic(name.clone())
            .set_page_size(1),
    )
    .send()
    .await
    .map_err(|e| anyhow::anyhow!("cannot list the subscriptions of topic {name}: {e}"))?;
    Ok(!page.subscriptions.is_empty())
}

/// What to do about a recreated topic without a subscription: logged at ERROR and the
/// error of the failed checkpoint (or start).
pub fn no_subscription_error(topic: &str) -> String {
    let id = topic.rsplit('/').next().unwrap_or(topic);
    format!(
        "topic {topic} was deleted after the job wrote into it and was recreated, but it has no subscription: Pub/Sub discards every message published to a topic without subscriptions, so rows written to it would be lost. Nothing of the checkpoint in progress is acknowledged upstream. Create a subscription on it (gcloud pubsub subscriptions create {id}-sub --topic={id}) and restart the job: the rows are read again and written there (a topic carrying the label '{RECREATED_LABEL}' is checked for a subscription at every start)"
    )
}

/// At a start: a topic a sink recreated mid-run (labelled [`RECREATED_LABEL`]) must have
/// a subscription by now. Errors (logged at ERROR) say what to do; a restart after
/// creating a subscription passes.
pub async fn require_subscription(sink: &PubSubSink, ensured: Ensured) -> anyhow::Result<()> {
    if !ensured.recreated || has_subscription(sink).await? {
        return Ok(());
    }
    let why = no_subscription_error(&sink.topic_name());
    tracing::error!("{why}");
    anyhow::bail!(why)
}

fn is_not_found(e: &google_cloud_pubsub::Error) -> bool {
    is_code(e, Code::NotFound)
}

fn is_code(e: &google_cloud_pubsub::Error, code: Code) -> bool {
    e.status().is_some_and(|s| s.code == code)
}

/// The topic create options on a topic resource; unset options keep Pub/Sub's defaults.
fn with_options(mut t: Topic, c: &TopicCreateConfig) -> Topic {
    if let Some(ms) = c.message_retention_ms {
        t = t.set_message_retention_duration(google_cloud_wkt::Duration::clamp(
            (ms / 1000) as i64,
            ((ms % 1000) * 1_000_000) as i32,
        ));
    }
    if let Some(k) = &c.kms_key_name {
        t = t.set_kms_key_name(k.clone());
    }
    if !c.allowed_persistence_regions.is_empty() {
        t = t.set_message_storage_policy(
            MessageStoragePolicy::new()
                .set_allowed_persistence_regions(c.allowed_persistence_regions.clone())
                .set_enforce_in_transit(c.enforce_in_transit),
        );
    }
    t
}
