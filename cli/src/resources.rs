//! Creates the topics and subscriptions a pipeline names, on an emulator (`emulator
//! --create`, `run --emulator`), so a pipeline can run against a fresh emulator at once.

use pubsub_connector_core::admin;
use pubsub_engine::sql::{PlannedPipeline, PlannedTable};
use pubsub_schema::{PubSubProfile, PubSubTable};

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

/// Creates every sink topic, and for every source subscription its topic (see
/// [`topic_for_subscription`]) and the subscription itself (60 s ack deadline). Existing
/// resources are left as they are. Returns one line per table saying what it uses.
pub async fn create_all(plan: &PlannedPipeline) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for t in plan.queries.iter().flat_map(|q| [&q.source, &q.sink]) {
        if !done.insert(t.connection.name.clone()) {
            continue;
        }
        let Some((profile, table)) = pubsub_table(t) else {
            continue;
        };
        match table {
            PubSubTable::Source(s) => {
                for sub in &s.subscriptions {
                    // A subscription with create options is created by the job itself.
                    if sub.create.is_some() {
                        continue;
                    }
                    let topic = topic_for_subscription(&sub.id);
                    admin::create_topic(&profile, topic).await?;
                    admin::create_subscription(&profile, &sub.id, topic, 60).await?;
                    lines.push(format!(
                        "table '{}': subscription projects/{p}/subscriptions/{} on topic projects/{p}/topics/{topic} (publish there to feed it)",
                        t.connection.name,
                        sub.id,
                        p = profile.project
                    ));
                }
            }
            PubSubTable::Sink(s) => {
                admin::create_topic(&profile, &s.topic).await?;
                lines.push(format!(
                    "table '{}': topic projects/{}/topics/{}",
                    t.connection.name, profile.project, s.topic
                ));
            }
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--emulator` and `emulator --create` leave tables of other connectors alone: no
    /// endpoint option (which `nexmark` would refuse as unknown), nothing to create.
    #[tokio::test]
    async fn tables_of_other_connectors_are_skipped() {
        let mut sql = pubsub_engine::sql::parse_pipeline(
            "CREATE TABLE b (price BIGINT) WITH ('connector' = 'nexmark');
             CREATE TABLE d (price BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO d SELECT price FROM b;",
        )
        .unwrap();
        crate::pipeline::use_emulator(&mut sql, "127.0.0.1:1");
        let plan = pubsub_engine::sql::plan_pipeline(&sql, &crate::pipeline::connectors()).unwrap();
        assert!(create_all(&plan).await.unwrap().is_empty());
    }

    #[test]
    fn subscription_topics() {
        assert_eq!(topic_for_subscription("bids-sub"), "bids");
        assert_eq!(topic_for_subscription("bids"), "bids");
        assert_eq!(topic_for_subscription("-sub"), "-sub");
    }
}
