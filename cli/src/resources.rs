//! Creates the topics and subscriptions a pipeline names, on an emulator (`emulator
//! --create`, `run --emulator`), so a pipeline can run against a fresh emulator at once.

use pubsub_connector_core::dead_letter::PubSubDeadLetterQueue;
use pubsub_connector_core::source::create::describe_or_create;
use pubsub_connector_core::{admin, client};
use pubsub_engine_plan::{PlannedPipeline, PlannedTable};
use pubsub_schema::{
    Authentication, OrderingMode, PubSubProfile, PubSubTable, SubscriptionCreateConfig,
};

/// The topic a created subscription is attached to: the subscription id without a
/// trailing `-sub` (`bids-sub` -> `bids`), else the same id.
pub fn topic_for_subscription(subscription: &str) -> &str {
    match subscription.strip_suffix("-sub") {
        Some(t) if !t.is_empty() => t,
        _ => subscription,
    }
}

fn pubsub_table(t: &PlannedTable) -> Option<(PubSubProfile, PubSubTable)> {
    if t.connection.connector != "pubsub" {
        return None;
    }
    let profile = serde_json::from_value(t.connection.config["profile"].clone()).ok()?;
    let table = serde_json::from_value(t.connection.config["table"].clone()).ok()?;
    Some((profile, table))
}

/// The subscription created on a sink topic so that what the job writes can be read:
/// `TOPIC-read` (not `TOPIC-sub`, the name a downstream pipeline's source would use, so
/// that reading it by hand takes nothing from such a pipeline).
pub fn read_subscription(topic: &str) -> String {
    format!("{topic}-read")
}

/// Creates every sink topic with a subscription to read it ([`read_subscription`]; Pub/Sub
/// keeps nothing a topic without subscription receives), and for every source
/// subscription its topic (see [`topic_for_subscription`]) and the subscription itself
/// (60 s ack deadline; with message ordering for a table with
/// `'scan.ordering-mode' = 'per-key'`, which needs it, and for a sink with
/// `'sink.message-ordering.enabled'`). Existing resources are left as they are. Returns
/// one line per table saying what it uses (and, for a sink, how to read it).
pub async fn create_all(plan: &PlannedPipeline) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for t in plan.queries.iter().flat_map(|q| q.tables()) {
        if !done.insert(t.connection.name.clone()) {
            continue;
        }
        let Some((profile, table)) = pubsub_table(t) else {
            continue;
        };
        let dead_letter = match &table {
            PubSubTable::Source(s) => s.dead_letter.as_ref(),
            PubSubTable::Sink(s) => s.dead_letter.as_ref(),
        };
        // The queue never creates its topic; on its emulator this does (where the queue
        // publishes: its own endpoint, not the table's).
        if let Some(d) =
            dead_letter.filter(|d| matches!(d.authentication, Authentication::Emulator { .. }))
        {
            let queue = PubSubDeadLetterQueue::from_config(&profile.project, d)?;
            let name = queue.topic().to_string();
            // `projects/P/topics/T`, validated by the queue's builder.
            let mut parts = name.split('/');
            let (project, id) = (parts.nth(1), parts.nth(1));
            let queue_profile = PubSubProfile {
                project: project.unwrap_or_default().to_string(),
                authentication: d.authentication.clone(),
            };
            admin::create_topic(&queue_profile, id.unwrap_or_default()).await?;
            lines.push(format!(
                "table '{}': dead-letter topic {name}",
                t.connection.name
            ));
        }
        match table {
            PubSubTable::Source(s) => {
                for sub in &s.subscriptions {
                    // A subscription with create options is created by the job itself.
                    if sub.create.is_some() {
                        continue;
                    }
                    let topic = topic_for_subscription(&sub.id);
                    admin::create_topic(&profile, topic).await?;
                    let ordered = s.ordering_mode == OrderingMode::PerKey;
                    create_subscription(&profile, &sub.id, topic, ordered).await?;
                    lines.push(format!(
                        "table '{}': subscription projects/{p}/subscriptions/{}{} on topic projects/{p}/topics/{topic} (publish there to feed it)",
                        t.connection.name,
                        sub.id,
                        if ordered { " (message ordering)" } else { "" },
                        p = profile.project
                    ));
                }
            }
            PubSubTable::Sink(s) => {
                admin::create_topic(&profile, &s.topic).await?;
                let read = read_subscription(&s.topic);
                let ordered = s.publisher.message_ordering;
                create_subscription(&profile, &read, &s.topic, ordered).await?;
                let endpoint = match &profile.authentication {
                    Authentication::Emulator { endpoint } => endpoint.as_str(),
                    _ => "HOST:PORT",
                };
                lines.push(format!(
                    "table '{}': topic projects/{p}/topics/{}; read what the job writes from subscription projects/{p}/subscriptions/{read}, e.g. curl -s -X POST http://{endpoint}/v1/projects/{p}/subscriptions/{read}:pull -H 'content-type: application/json' -d '{{\"maxMessages\": 10}}' (data is base64; ack the ackIds with :acknowledge)",
                    t.connection.name,
                    s.topic,
                    p = profile.project
                ));
            }
        }
    }
    Ok(lines)
}

/// Creates subscription `id` on `topic` (60 s ack deadline, message ordering if
/// `ordered`) unless it exists, through the source's own creation path.
async fn create_subscription(
    profile: &PubSubProfile,
    id: &str,
    topic: &str,
    ordered: bool,
) -> anyhow::Result<()> {
    let subs = client::subscription_admin(profile).await?;
    let name = client::subscription_path(&profile.project, id);
    let create = SubscriptionCreateConfig {
        topic: topic.to_string(),
        ack_deadline_ms: Some(60_000),
        message_ordering: ordered,
        message_retention_ms: None,
        retain_acked_messages: false,
        expiration: None,
        dead_letter: None,
        filter: None,
    };
    describe_or_create(&subs, &profile.project, &name, Some(&create), |e| {
        anyhow::anyhow!("cannot describe subscription {name}: {e}")
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--emulator` and `emulator --create` leave tables of other connectors alone: no
    /// endpoint option (which `nexmark` would refuse as unknown), nothing to create.
    #[tokio::test]
    async fn tables_of_other_connectors_are_skipped() {
        let mut sql = pubsub_engine_sql::parse_pipeline(
            "CREATE TABLE b (price BIGINT) WITH ('connector' = 'nexmark');
             CREATE TABLE d (price BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO d SELECT price FROM b;",
        )
        .unwrap();
        crate::pipeline::use_emulator(&mut sql, "127.0.0.1:1");
        let plan = pubsub_engine_sql::plan_pipeline(&sql, &crate::pipeline::connectors()).unwrap();
        assert!(create_all(&plan).await.unwrap().is_empty());
    }

    #[test]
    fn subscription_topics() {
        assert_eq!(topic_for_subscription("bids-sub"), "bids");
        assert_eq!(topic_for_subscription("bids"), "bids");
        assert_eq!(topic_for_subscription("-sub"), "-sub");
    }
}
