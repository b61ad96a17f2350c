//! The pipeline graph example (`examples/pipeline_graph.rs`): a pipeline built in Rust,
//! without SQL, run against the real emulator; and the graph it builds, compared with the
//! plan of the equivalent pipeline file.

use crate::support;

#[path = "../examples/pipeline_graph.rs"]
#[allow(dead_code)] // the example's `main` and `run_with_stop` are not called here
mod example;

use std::collections::HashSet;
use std::time::Duration;

use pubsub_connector_core::admin;
use support::*;

const LIMIT: Duration = Duration::from_secs(150);

/// Distinct `message_id` values of the JSON rows in `sub` (acks them).
async fn message_ids(sub: &str, expected: usize) -> HashSet<String> {
    let rows = admin::drain(&profile(), sub, 2, Some(expected), Duration::from_secs(10))
        .await
        .unwrap();
    rows.values()
        .filter_map(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
        .filter_map(|v| v["message_id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_graph_carries_every_message_to_the_sink_topic() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("graph", 60).await;
    let ids = publish_seq(&t.input, 0..1_000).await;
    let state = tempfile::tempdir().unwrap();
    let summary = tokio::time::timeout(
        LIMIT,
        example::run(PROJECT, &endpoint(), &t.input_sub, &t.output, state.path()),
    )
    .await
    .expect("the example stops once idle")
    .expect("the example runs");
    println!("pipeline_graph: {summary}");

    let got = message_ids(&t.output_sub, ids.len()).await;
    assert_eq!(
        missing(&ids, &got),
        0,
        "every message id reaches the sink topic; summary: {summary}"
    );
    // Redeliveries may add to the counts, never subtract.
    assert!(summary.messages_read >= 1_000, "{summary}");
    assert!(summary.messages_acked >= 1_000, "{summary}");
    assert!(summary.rows_written >= 1_000, "{summary}");
    assert_eq!(
        summary.messages_read,
        summary.messages_acked + summary.messages_released,
        "every message read was acknowledged or released: {summary}"
    );
    assert!(summary.checkpoints_completed >= 1, "{summary}");
    assert!(
        state.path().join("checkpoint.json").exists(),
        "checkpoints went to the state dir"
    );
    // Acknowledged means gone: nothing comes back on the input subscription.
    assert_all_acked(&t.input_sub);
}

/// The graph and its pipeline file (the SQL in the example's docs) plan to the same
/// pipeline: same query id and text, same validated table configs and columns, so the
/// runtime (and a cluster's fingerprint, and a checkpoint) cannot tell them apart.
#[test]
fn the_example_graph_plans_like_its_sql() {
    let (endpoint, sub, topic) = ("127.0.0.1:8085", "in-sub", "out");
    let graph = example::graph(PROJECT, endpoint, sub, topic).unwrap();
    let sql = pubsub_engine_sql::parse_pipeline(&format!(
        "CREATE TABLE messages (
             seq BIGINT,
             message_id TEXT NOT NULL METADATA FROM 'message-id',
             publish_time TIMESTAMP NOT NULL METADATA FROM 'publish-time'
         ) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{endpoint}',
                 'subscription' = '{sub}', 'format' = 'json', 'scan.parallel-pull-count' = '2');
         CREATE TABLE out (seq BIGINT, message_id TEXT NOT NULL, publish_time TIMESTAMP)
             WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{endpoint}',
                   'topic' = '{topic}', 'format' = 'json');
         INSERT INTO out SELECT seq, message_id, publish_time FROM messages;"
    ))
    .unwrap();
    let connectors: Vec<std::sync::Arc<dyn pubsub_engine_spi::ErasedConnector>> =
        vec![std::sync::Arc::new(pubsub_connector_core::PubSubConnector)];
    let planned = pubsub_engine_sql::plan_pipeline(&sql, &connectors).unwrap();
    assert_eq!(graph.queries.len(), 1);
    let (g, p) = (&graph.queries[0], &planned.queries[0]);
    assert_eq!(g.id, "q0");
    assert_eq!(g.id, p.id);
    assert_eq!(g.text, p.text);
    assert_eq!(g.projection, p.projection);
    assert_eq!(g.route_by, p.route_by);
    assert_eq!(g.source.connection, p.source.connection);
    assert_eq!(g.sink.connection, p.sink.connection);
}

/// A table built from typed configs meets the builder's rules and the column rules, like
/// a SQL table: a hand-made config cannot skip them.
#[test]
fn a_hand_made_config_is_checked_like_sql() {
    use pubsub_engine_spi::{ConnectionSchema, FieldType, SourceField};
    use pubsub_engine_sql::GraphTable;
    use pubsub_schema::{PubSubTable, SinkConfig, SourceConfig};
    let profile = pubsub_connector_core::client::emulator_profile("p", "127.0.0.1:8085");
    let mut bad = SourceConfig::new("s");
    bad.subscriber.parallel_pull_count = 0;
    let cols = || ConnectionSchema::json(vec![SourceField::new("seq", FieldType::Bigint)]);
    let e = GraphTable::new(
        pubsub_connector_core::PubSubConnector,
        "src",
        profile.clone(),
        PubSubTable::Source(bad),
        cols(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("table 'src'")
            && e.contains("option 'parallel_pull_count' is invalid: must be positive, was '0'"),
        "{e}"
    );
    let sink_cols = ConnectionSchema::json(vec![
        SourceField::new("seq", FieldType::Bigint),
        SourceField::new("sub", FieldType::Text).metadata_from("subscription"),
    ]);
    let e = GraphTable::new(
        pubsub_connector_core::PubSubConnector,
        "dst",
        profile,
        PubSubTable::Sink(SinkConfig::new("t")),
        sink_cols,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("a sink table writes 'attributes' and 'ordering-key'"),
        "{e}"
    );
}
