//! A pipeline built in Rust, without SQL: every message of a Pub/Sub subscription is
//! written to a Pub/Sub topic as JSON, with its message id and publish time.
//!
//! The same pipeline as this file of SQL (and it plans to the same pipeline):
//!
//! ```sql
//! CREATE TABLE messages (
//!     seq BIGINT,
//!     message_id TEXT NOT NULL METADATA FROM 'message-id',
//!     publish_time TIMESTAMP NOT NULL METADATA FROM 'publish-time'
//! ) WITH ('connector' = 'pubsub', 'project' = '...', 'emulator-endpoint' = '...',
//!         'subscription' = '...', 'format' = 'json', 'scan.parallel-pull-count' = '2');
//! CREATE TABLE out (seq BIGINT, message_id TEXT NOT NULL, publish_time TIMESTAMP)
//!     WITH ('connector' = 'pubsub', 'project' = '...', 'emulator-endpoint' = '...',
//!           'topic' = '...', 'format' = 'json');
//! INSERT INTO out SELECT seq, message_id, publish_time FROM messages;
//! ```
//!
//! Run it against a local emulator (see docs/pipeline-graph.md):
//!
//! ```text
//! pubsub-connector emulator --create examples/quickstart.sql
//! cargo run --release --example pipeline_graph -- 127.0.0.1:8085 bids-sub bids-out
//! ```
//!
//! Arguments: `HOST:PORT SUBSCRIPTION TOPIC [PROJECT]` (the project defaults to
//! `quickstart`, where `emulator --create examples/quickstart.sql` creates topic `bids`
//! with subscription `bids-sub`, and topic `bids-out`). The job checkpoints every second
//! into `./pipeline-graph-state`, stops once the subscription was idle for 5 s (or on
//! Ctrl-C) and prints its summary.

use std::path::Path;
use std::time::Duration;

use pubsub_connector_core::source::{PubSubSource, PubSubSubscriberOptions};
use pubsub_connector_core::PubSubConnector;
use pubsub_engine_plan::PlannedPipeline;
use pubsub_engine_runtime::{run_pipeline, JobSummary, RuntimeConfig, StopHandle};
use pubsub_engine_spi::{ConnectionSchema, FieldType, SourceField};
use pubsub_engine_sql::{GraphTable, PipelineGraph};
use pubsub_schema::{PubSubTable, SinkConfig};

/// The project `pubsub-connector emulator --create examples/quickstart.sql` uses.
pub const DEFAULT_PROJECT: &str = "quickstart";

/// The graph: subscription `subscription` -> topic `topic`, both in `project` on the
/// emulator at `endpoint` (`host:port`).
pub fn graph(
    project: &str,
    endpoint: &str,
    subscription: &str,
    topic: &str,
) -> anyhow::Result<PlannedPipeline> {
    // The source table's config, validated by the connector's builder. On Google Cloud,
    // use `.service_account_key_file(path)` or the application default credentials
    // instead of `.emulator_endpoint(...)`.
    let source = PubSubSource::builder()
        .project(project)
        .emulator_endpoint(endpoint)
        .subscription(subscription)
        .subscriber_options(
            PubSubSubscriberOptions::builder()
                .parallel_pull_count(2)
                .build()?,
        )
        .build()?;
    let (profile, source_config) = source.into_parts();

    // Each table: connector, name, profile, table config and columns.
    let messages = GraphTable::new(
        PubSubConnector,
        "messages",
        profile.clone(),
        PubSubTable::Source(source_config),
        ConnectionSchema::json(vec![
            // From the JSON payload, e.g. {"seq": 1}.
            SourceField::new("seq", FieldType::Bigint),
            // From the message's metadata.
            SourceField::new("message_id", FieldType::Text)
                .not_null()
                .metadata_from("message-id"),
            SourceField::new("publish_time", FieldType::Timestamp)
                .not_null()
                .metadata_from("publish-time"),
        ]),
    )?;
    // The sink publishes with the same profile (project and emulator).
    let out = GraphTable::new(
        PubSubConnector,
        "out",
        profile,
        PubSubTable::Sink(SinkConfig::new(topic)),
        ConnectionSchema::json(vec![
            SourceField::new("seq", FieldType::Bigint),
            SourceField::new("message_id", FieldType::Text).not_null(),
            SourceField::new("publish_time", FieldType::Timestamp),
        ]),
    )?;

    // Each sink column is filled from the source column of the same name; a missing
    // column, a type mismatch or a NOT NULL column fed by a nullable one is an error here.
    Ok(PipelineGraph::new().pipe(&messages, &out)?.build()?)
}

/// Builds the graph and runs it until the subscription was idle for 5 s; returns the
/// job's summary. Checkpoints (every second) go to `state_dir`; a later run with the same
/// `state_dir` restores from the last one.
pub async fn run(
    project: &str,
    endpoint: &str,
    subscription: &str,
    topic: &str,
    state_dir: &Path,
) -> anyhow::Result<JobSummary> {
    run_with_stop(
        project,
        endpoint,
        subscription,
        topic,
        state_dir,
        StopHandle::new(),
    )
    .await
}

/// [`run`], also stopping gracefully (after a final checkpoint) when `stop` is asked to.
pub async fn run_with_stop(
    project: &str,
    endpoint: &str,
    subscription: &str,
    topic: &str,
    state_dir: &Path,
    stop: StopHandle,
) -> anyhow::Result<JobSummary> {
    let plan = graph(project, endpoint, subscription, topic)?;
    let config = RuntimeConfig {
        workers: 2,
        checkpoint_interval: Duration::from_secs(1),
        state_dir: state_dir.display().to_string(),
        stop_when_idle: Some(Duration::from_secs(5)),
        job_id: "pipeline_graph".to_string(),
        ..RuntimeConfig::default()
    };
    run_pipeline(plan, config, stop)
        .await
        .map_err(|e| anyhow::anyhow!("the pipeline failed: {:#} ({})", e.error, e.summary))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (endpoint, subscription, topic, project) = match args.as_slice() {
        [e, s, t] => (e, s, t, DEFAULT_PROJECT),
        [e, s, t, p] => (e, s, t, p.as_str()),
        _ => anyhow::bail!("usage: pipeline_graph HOST:PORT SUBSCRIPTION TOPIC [PROJECT]"),
    };
    let stop = StopHandle::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.stop();
        }
    });
    let state_dir = Path::new("pipeline-graph-state");
    let summary = run_with_stop(project, endpoint, subscription, topic, state_dir, stop).await?;
    println!("pipeline_graph: {summary}");
    Ok(())
}
