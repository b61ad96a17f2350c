//! The sink's topic: checked at start, created under `create-if-needed` with the topic
//! create options (at start, and when a publish finds it gone).

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::{MessageStoragePolicy, Topic};
use pubsub_schema::{CreateDisposition, TopicCreateConfig};

use super::PubSubSink;
use crate::client;
use crate::diagnose::{bounded, startup_error, Resource};

/// Makes sure the topic exists; returns whether this call created it. Errors name the
/// topic and the cause: missing under `create-never` (a `pubsub_engine::ConfigError`),
/// permission, unreachable endpoint.
pub async fn ensure(sink: &PubSubSink) -> anyhow::Result<bool> {
    let profile = sink.profile();
    let name = sink.topic_name();
    let admin = client::topic_admin(profile).await?;
    match bounded(admin.get_topic().set_topic(name.clone()))
        .send()
        .await
    {
        Ok(_) => return Ok(false),
        Err(e) if !is_not_found(&e) => {
            let error = startup_error(profile, Resource::Topic(&name), &e);
            // A name Pub/Sub refuses (too short, `goog` prefix): no restart fixes it.
            return Err(if is_code(&e, Code::InvalidArgument) {
                pubsub_engine::ConfigError::wrap(error)
            } else {
                error
            });
        }
        Err(_) => {}
    }
    if sink.config().create_disposition == CreateDisposition::CreateNever {
        // No restart fixes it (exit 2; a topic deleted mid-run fails the checkpoint instead).
        return Err(pubsub_engine::ConfigError::wrap(anyhow::anyhow!(
            "topic {name} does not exist and '{}' is 'create-never': create it, or set 'create-if-needed'",
            pubsub_table_options::CREATE_DISPOSITION
        )));
    }
    let topic = with_options(
        Topic::new().set_name(name.clone()),
        &sink.config().topic_create,
    );
    match bounded(admin.create_topic().with_request(topic))
        .send()
        .await
    {
        Ok(_) => {
            tracing::warn!(
                "created topic {name} ('{}' is 'create-if-needed')",
                pubsub_table_options::CREATE_DISPOSITION
            );
            Ok(true)
        }
        Err(e)
            if e.status()
                .is_some_and(|s| s.code == google_cloud_gax::error::rpc::Code::AlreadyExists) =>
        {
            Ok(false)
        }
        Err(e) => Err(anyhow::anyhow!("cannot create topic {name}: {e}")),
    }
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
