//! Topic and subscription administration plus bulk publish and drain helpers, used by
//! `quickstart`, `bench` and the integration tests.

use std::collections::HashMap;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use google_cloud_pubsub::model::Message;
use pubsub_schema::PubSubProfile;

use crate::client;

/// Creates topic `id`; an existing topic is fine.
pub async fn create_topic(profile: &PubSubProfile, id: &str) -> anyhow::Result<()> {
    let admin = client::topic_admin(profile).await?;
    let name = client::topic_path(&profile.project, id);
    match admin.create_topic().set_name(name.clone()).send().await {
        Ok(_) => Ok(()),
        Err(e) if is_already_exists(&e) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot create topic {name}: {e}")),
    }
}

/// Deletes topic `id`.
pub async fn delete_topic(profile: &PubSubProfile, id: &str) -> anyhow::Result<()> {
    let admin = client::topic_admin(profile).await?;
    let name = client::topic_path(&profile.project, id);
    admin
        .delete_topic()
        .set_topic(name.clone())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot delete topic {name}: {e}"))?;
    Ok(())
}

/// Creates subscription `id` on topic `topic` with an ack deadline in seconds (10..600);
/// an existing subscription is fine.
pub async fn create_subscription(
    profile: &PubSubProfile,
    id: &str,
    topic: &str,
    ack_deadline_s: i32,
) -> anyhow::Result<()> {
    create_subscription_with(profile, id, topic, ack_deadline_s, None).await
}

/// Creates subscription `id` on topic `topic` with a dead-letter policy forwarding to
/// topic `dead_letter_topic` after `max_delivery_attempts` (5..100) deliveries; an
/// existing subscription is fine. The dead-letter topic must exist.
pub async fn create_subscription_with_dead_letter(
    profile: &PubSubProfile,
    id: &str,
    topic: &str,
    ack_deadline_s: i32,
    dead_letter_topic: &str,
    max_delivery_attempts: i32,
) -> anyhow::Result<()> {
    let policy = google_cloud_pubsub::model::DeadLetterPolicy::new()
        .set_dead_letter_topic(client::topic_path(&profile.project, dead_letter_topic))
        .set_max_delivery_attempts(max_delivery_attempts);
    create_subscription_with(profile, id, topic, ack_deadline_s, Some(policy)).await
}

async fn create_subscription_with(
    profile: &PubSubProfile,
    id: &str,
    topic: &str,
    ack_deadline_s: i32,
    dead_letter: Option<google_cloud_pubsub::model::DeadLetterPolicy>,
) -> anyhow::Result<()> {
    let admin = client::subscription_admin(profile).await?;
    let name = client::subscription_path(&profile.project, id);
    let mut request = admin
        .create_subscription()
        .set_name(name.clone())
        .set_topic(client::topic_path(&profile.project, topic))
        .set_ack_deadline_seconds(ack_deadline_s);
    if let Some(policy) = dead_letter {
        request = request.set_dead_letter_policy(policy);
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(e) if is_already_exists(&e) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot create subscription {name}: {e}")),
    }
}

/// Deletes subscription `id`.
pub async fn delete_subscription(profile: &PubSubProfile, id: &str) -> anyhow::Result<()> {
    let admin = client::subscription_admin(profile).await?;
    let name = client::subscription_path(&profile.project, id);
    admin
        .delete_subscription()
        .set_subscription(name.clone())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot delete subscription {name}: {e}"))?;
    Ok(())
}

fn is_already_exists(e: &google_cloud_pubsub::Error) -> bool {
    e.status()
        .is_some_and(|s| s.code == google_cloud_gax::error::rpc::Code::AlreadyExists)
}

/// Publishes every payload over gRPC (REST publishing leaks the emulator's memory) with at
/// most `window` publishes in flight. Returns the message ids in payload order.
pub async fn publish_all(
    profile: &PubSubProfile,
    topic: &str,
    payloads: Vec<Vec<u8>>,
    window: usize,
) -> anyhow::Result<Vec<String>> {
    let publisher = client::publisher(profile, &client::topic_path(&profile.project, topic))?
        .set_message_count_threshold(1000)
        .set_delay_threshold(Duration::from_millis(5))
        .build()
        .await?;
    let n = payloads.len();
    let mut ids = vec![String::new(); n];
    let mut in_flight = FuturesUnordered::new();
    for (i, p) in payloads.into_iter().enumerate() {
        if in_flight.len() >= window.max(1) {
            let (j, r): (usize, Result<String, _>) = in_flight.next().await.expect("non-empty");
            ids[j] = r.map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
        }
        let fut = publisher.publish(Message::new().set_data(p));
        in_flight.push(async move { (i, fut.await) });
    }
    publisher.flush().await;
    while let Some((j, r)) = in_flight.next().await {
        ids[j] = r.map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
    }
    Ok(ids)
}

/// Reads subscription `id` with `streams` streaming pulls, acking everything, until
/// `expected` distinct messages were seen or nothing arrived for `idle`. Returns message
/// id -> payload of every distinct message.
pub async fn drain(
    profile: &PubSubProfile,
    id: &str,
    streams: usize,
    expected: Option<usize>,
    idle: Duration,
) -> anyhow::Result<HashMap<String, Vec<u8>>> {
    Ok(drain_messages(profile, id, streams, expected, idle)
        .await?
        .into_iter()
        .map(|m| (m.message_id, m.data.to_vec()))
        .collect())
}

/// As [`drain`], returning every distinct message whole (data, attributes, ordering
/// key) in the order they arrived.
///
/// Only this reader's consumer side acknowledges, and only what it returns: a stop at
/// `expected` shuts the streams down and keeps taking (and returning) what they still
/// hand over until they end, so no message is acknowledged without being returned. What
/// a stream had leased but not handed over is nacked by its shutdown. Waits at most
/// 10 s for the streams to end. What the server had sent but the client had not read yet
/// when a stop came stays leased until the streams' ack deadline (10 s) passes: a read
/// that must see everything after a stopped one waits past it, or reads another
/// subscription.
pub async fn drain_messages(
    profile: &PubSubProfile,
    id: &str,
    streams: usize,
    expected: Option<usize>,
    idle: Duration,
) -> anyhow::Result<Vec<Message>> {
    let subscriber = client::subscriber(profile).await?;
    let name = client::subscription_path(&profile.project, id);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tokens = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..streams.max(1) {
        let mut stream = subscriber
            .subscribe(name.clone())
            .set_max_lease_extension(Duration::from_secs(10))
            .build();
        tokens.push(stream.shutdown_token());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(delivery)) = stream.next().await {
                if tx.send(delivery).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut take = |(m, h): (Message, google_cloud_pubsub::subscriber::handler::Handler)| {
        h.ack();
        if seen.insert(m.message_id.clone()) {
            out.push(m);
        }
        seen.len()
    };
    let mut count = 0;
    while expected.is_none_or(|e| count < e) {
        match tokio::time::timeout(idle, rx.recv()).await {
            Ok(Some(delivery)) => count = take(delivery),
            _ => break,
        }
    }
    // Stop the streams, taking what they still hand over until each has ended; then the
    // shutdowns complete (they wait for every handed-over message to be acknowledged).
    let shutdowns = futures::future::join_all(tokens.iter().map(|t| t.shutdown()));
    let rest = async {
        while let Some(delivery) = rx.recv().await {
            take(delivery);
        }
    };
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        futures::future::join(shutdowns, rest),
    )
    .await;
    for t in tasks {
        t.abort();
    }
    Ok(out)
}

/// Creates Avro schema `id` with Avro JSON `definition`; returns its revision id.
pub async fn create_avro_schema(
    profile: &PubSubProfile,
    id: &str,
    definition: &str,
) -> anyhow::Result<String> {
    let service = client::schema_service(profile).await?;
    let schema = google_cloud_pubsub::model::Schema::new()
        .set_type(google_cloud_pubsub::model::schema::Type::Avro)
        .set_definition(definition);
    let s = service
        .create_schema()
        .set_parent(format!("projects/{}", profile.project))
        .set_schema_id(id)
        .set_schema(schema)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot create schema {id}: {e}"))?;
    Ok(s.revision_id)
}

/// Commits a new revision of Avro schema `id`; returns its revision id.
pub async fn commit_avro_revision(
    profile: &PubSubProfile,
    id: &str,
    definition: &str,
) -> anyhow::Result<String> {
    let service = client::schema_service(profile).await?;
    let name = format!("projects/{}/schemas/{id}", profile.project);
    let schema = google_cloud_pubsub::model::Schema::new()
        .set_name(name.clone())
        .set_type(google_cloud_pubsub::model::schema::Type::Avro)
        .set_definition(definition);
    let s = service
        .commit_schema()
        .set_name(name)
        .set_schema(schema)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot commit a revision of schema {id}: {e}"))?;
    Ok(s.revision_id)
}

/// Deletes revision `revision` of schema `id`.
pub async fn delete_schema_revision(
    profile: &PubSubProfile,
    id: &str,
    revision: &str,
) -> anyhow::Result<()> {
    let service = client::schema_service(profile).await?;
    let name = format!("projects/{}/schemas/{id}@{revision}", profile.project);
    service
        .delete_schema_revision()
        .set_name(name.clone())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot delete schema revision {name}: {e}"))?;
    Ok(())
}

/// Creates topic `id` bound to schema `schema_id` with `encoding` (`JSON` or `BINARY`).
pub async fn create_topic_with_schema(
    profile: &PubSubProfile,
    id: &str,
    schema_id: &str,
    encoding: &str,
) -> anyhow::Result<()> {
    use google_cloud_pubsub::model::{Encoding, SchemaSettings, Topic};
    let encoding = match encoding {
        "JSON" => Encoding::Json,
        "BINARY" => Encoding::Binary,
        other => anyhow::bail!("encoding must be JSON or BINARY, was {other}"),
    };
    let admin = client::topic_admin(profile).await?;
    let name = client::topic_path(&profile.project, id);
    let settings = SchemaSettings::new()
        .set_schema(format!("projects/{}/schemas/{schema_id}", profile.project))
        .set_encoding(encoding);
    admin
        .create_topic()
        .with_request(
            Topic::new()
                .set_name(name.clone())
                .set_schema_settings(settings),
        )
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot create topic {name}: {e}"))?;
    Ok(())
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
