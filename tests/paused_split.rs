//! Paused-split parking (`scan.paused-split-buffer.*`, SPEC 5.3) against the real emulator.
//!
//! Back-pressure comes from a test sink, `GatedSink` (the emulator has nothing to do with
//! it): its first batch waits until the source reports a parked split, so the source's
//! emit waits for permits, its paused buffer fills, and the split is parked. Then the sink
//! takes everything, and the reopened split must deliver every message exactly once.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, Int64Array, RecordBatch};
use async_trait::async_trait;
use pubsub_connector_core::source::{PubSubSource, PubSubSubscriberOptions, SPLITS_PARKED};
use pubsub_connector_core::PubSubConnector;
use pubsub_engine::runtime::{run_pipeline, RuntimeConfig, StopHandle};
use pubsub_engine::{
    ArrowOperator, CheckpointBarrier, Connection, ConnectionSchema, ConnectionType, Connector,
    ConnectorMetadata, ConnectorOptions, ConstructedOperator, FieldType, GraphTable, MetadataDef,
    OperatorConfig, OperatorContext, PipelineGraph, SourceField,
};
use pubsub_schema::PubSubTable;
use support::*;

const LIMIT: Duration = Duration::from_secs(150);
/// How long the gated sink waits for the source to park before failing the job.
const PARK_WAIT: Duration = Duration::from_secs(60);

/// A sink that keeps every `seq` it is given, in memory. Test-only.
#[derive(Clone, Default)]
struct GatedSink {
    rows: Arc<Mutex<Vec<i64>>>,
}

impl Connector for GatedSink {
    type ProfileT = ();
    type TableT = ();
    fn name(&self) -> &'static str {
        "gated-sink"
    }
    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "gated-sink".into(),
            name: "gated sink (tests)".into(),
            description: "keeps rows in memory; its first batch waits for a parked split".into(),
            source: false,
            sink: true,
            table_config: "{}".into(),
            connection_config: None,
        }
    }
    fn metadata_defs(&self) -> &'static [MetadataDef] {
        &[]
    }
    fn known_options(&self) -> &'static [&'static str] {
        &[]
    }
    fn table_type(&self, _: &(), _: &()) -> ConnectionType {
        ConnectionType::Sink
    }
    fn from_options(
        &self,
        _: &str,
        _: &mut ConnectorOptions,
        _: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        anyhow::bail!("the gated sink is built in Rust only")
    }
    fn make_operator(
        &self,
        _: (),
        _: (),
        _: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(ConstructedOperator::Operator(Box::new(GatedOperator {
            rows: self.rows.clone(),
            open: false,
        })))
    }
}

struct GatedOperator {
    rows: Arc<Mutex<Vec<i64>>>,
    open: bool,
}

#[async_trait]
impl ArrowOperator for GatedOperator {
    fn name(&self) -> String {
        "gated-sink".into()
    }

    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        let start = tokio::time::Instant::now();
        while !self.open {
            self.open = ctx.metrics.total(SPLITS_PARKED) > 0;
            anyhow::ensure!(
                self.open || start.elapsed() < PARK_WAIT,
                "the source parked no split within {PARK_WAIT:?} of back-pressure"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let seq = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("seq is BIGINT");
        let mut rows = self.rows.lock().unwrap();
        rows.extend(
            (0..seq.len())
                .filter(|&i| seq.is_valid(i))
                .map(|i| seq.value(i)),
        );
        Ok(())
    }

    async fn handle_checkpoint(
        &mut self,
        _: CheckpointBarrier,
        _: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_that_cannot_emit_is_parked_and_reopened_and_delivers_every_message_once() {
    const N: i64 = 3_000;
    const CAP: u64 = 50;
    let t = topics("parked", 10).await;
    publish_seq(&t.input, 0..N as usize).await;

    let source = PubSubSource::builder()
        .project(PROJECT)
        .emulator_endpoint(endpoint())
        .subscription(&t.input_sub)
        .subscriber_options(
            PubSubSubscriberOptions::builder()
                .paused_split_buffer_max_messages(CAP)
                // The stream ack deadline: what a stopped stream had in flight returns
                // after this.
                .max_duration_per_ack_extension(Duration::from_secs(10))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let (profile, config) = source.into_parts();
    let src = GraphTable::new(
        PubSubConnector,
        "src",
        profile,
        PubSubTable::Source(config),
        ConnectionSchema::json(vec![SourceField::new("seq", FieldType::Bigint)]),
    )
    .unwrap();
    let sink = GatedSink::default();
    let dst = GraphTable::new(
        sink.clone(),
        "dst",
        (),
        (),
        ConnectionSchema::json(vec![SourceField::new("seq", FieldType::Bigint)]),
    )
    .unwrap();
    let plan = PipelineGraph::new()
        .pipe(&src, &dst)
        .unwrap()
        .build()
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        workers: 1,
        checkpoint_interval: Duration::from_secs(1),
        state_dir: state.path().display().to_string(),
        stop_when_idle: Some(Duration::from_secs(5)),
        // A hundred rows fill the pipe: the source's next emit waits for the sink.
        max_inflight_rows: 100,
        job_id: "paused-split".into(),
        ..RuntimeConfig::default()
    };
    let summary = tokio::time::timeout(LIMIT, run_pipeline(plan, config, StopHandle::new()))
        .await
        .expect("the job stops once idle")
        .unwrap_or_else(|e| panic!("the job failed: {e} ({})", e.summary));
    println!("paused_split: {summary}");

    let parked = summary.other_counters.get(SPLITS_PARKED).copied();
    assert!(parked >= Some(1), "a split was parked: {summary}");
    assert!(
        summary.messages_released > CAP,
        "parking nacked the paused buffer and the delivery that would cross it: {summary}"
    );
    // Deliveries the emulator had already sent to the parked split's streams when they
    // stopped (an in-flight response) are leased to those streams until the stream ack
    // deadline ('scan.ack.max-duration-per-extension', 10 s here), then redelivered: not
    // lost, not duplicated, just late. Wait them out: what comes back now was never acked.
    let left = redelivered(&t.input_sub, Duration::from_secs(15)).await;
    let rows = sink.rows.lock().unwrap().clone();
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &rows {
        *seen.entry(*r).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no row twice, got {twice:?}; {summary}");
    let late: Vec<i64> = left
        .values()
        .map(|p| {
            serde_json::from_slice::<serde_json::Value>(p).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let both: Vec<&i64> = late.iter().filter(|s| seen.contains_key(s)).collect();
    assert!(
        both.is_empty(),
        "a row written was never acknowledged: {both:?}; {summary}"
    );
    let absent: Vec<i64> = (0..N)
        .filter(|i| !seen.contains_key(i) && !late.contains(i))
        .collect();
    assert!(
        absent.is_empty(),
        "every message is written or still unacknowledged; lost: {absent:?}; {summary}"
    );
    println!(
        "paused_split: {} written, {} redelivered after the job",
        seen.len(),
        late.len()
    );
}
