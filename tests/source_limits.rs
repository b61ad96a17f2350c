//! The source's run-time limits (SPEC 5.3) seen from an in-memory test sink, on the real
//! emulator: flow control, lease extension, paused-split parking
//! (`scan.paused-split-buffer.*`) and the first-checkpoint detector
//! (`scan.first-checkpoint-timeout`).
//!
//! The test sink, `StalledSink` (the emulator has nothing to do with it), keeps every row
//! and samples the source's held-message gauges at every batch. It stalls in one of two
//! ways, or not at all (`Never`):
//! - `UntilParked`: its first batch waits until the source reports a parked split, so the
//!   source's emit waits for permits, its paused buffer fills, and the split is parked.
//!   Then the sink takes everything, and the reopened split must deliver every message
//!   exactly once.
//! - `Checkpoints`: it takes rows but never finishes a checkpoint, so no checkpoint
//!   completes and the source's detector must fail the job, acknowledging nothing.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, Int64Array, RecordBatch};
use async_trait::async_trait;
use pubsub_connector_core::source::{
    PubSubSource, PubSubSubscriberOptions, BUFFERED_BYTES, PENDING_ACKS, SPLITS_PARKED,
};
use pubsub_connector_core::PubSubConnector;
use pubsub_engine_runtime::{run_pipeline, JobError, JobSummary, RuntimeConfig, StopHandle};
use pubsub_engine_spi::{
    ArrowOperator, CheckpointBarrier, Connection, ConnectionSchema, ConnectionType, Connector,
    ConnectorMetadata, ConnectorOptions, ConstructedOperator, FieldType, MetadataDef,
    OperatorConfig, OperatorContext, SourceField, ROWS_WRITTEN,
};
use pubsub_engine_sql::{GraphTable, PipelineGraph};
use pubsub_schema::PubSubTable;
use support::*;

const LIMIT: Duration = Duration::from_secs(150);
/// Checkpoint every second, stop once idle for 5 s.
const QUICK: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(5));
/// How long the gated sink waits for the source to park before failing the job.
const PARK_WAIT: Duration = Duration::from_secs(60);

/// How the test sink stalls.
#[derive(Clone, Copy)]
enum Stall {
    /// It takes every batch at once.
    Never,
    /// Its first batch waits until the source parked a split.
    UntilParked,
    /// Its checkpoints never finish.
    Checkpoints,
    /// Its first two checkpoints take this long each.
    SlowCheckpoints(Duration),
}

/// A sink that keeps every `seq` it is given, in memory, and stalls. Test-only.
#[derive(Clone)]
struct StalledSink {
    stall: Stall,
    rows: Arc<Mutex<Vec<i64>>>,
    /// The most messages and payload bytes the source held, sampled at every batch.
    max_held: Arc<Mutex<(u64, u64)>>,
}

impl StalledSink {
    fn new(stall: Stall) -> Self {
        StalledSink {
            stall,
            rows: Arc::default(),
            max_held: Arc::default(),
        }
    }
}

impl Connector for StalledSink {
    type ProfileT = ();
    type TableT = ();
    fn name(&self) -> &'static str {
        "stalled-sink"
    }
    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "stalled-sink".into(),
            name: "stalled sink (tests)".into(),
            description: "keeps rows in memory and stalls".into(),
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
        anyhow::bail!("the stalled sink is built in Rust only")
    }
    fn make_operator(
        &self,
        _: (),
        _: (),
        _: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(ConstructedOperator::Operator(Box::new(StalledOperator {
            stall: self.stall,
            rows: self.rows.clone(),
            max_held: self.max_held.clone(),
            open: false,
            slow_left: 2,
        })))
    }
}

struct StalledOperator {
    stall: Stall,
    rows: Arc<Mutex<Vec<i64>>>,
    max_held: Arc<Mutex<(u64, u64)>>,
    open: bool,
    /// Slow checkpoints still to come (`SlowCheckpoints`).
    slow_left: u32,
}

#[async_trait]
impl ArrowOperator for StalledOperator {
    fn name(&self) -> String {
        "stalled-sink".into()
    }

    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        let start = tokio::time::Instant::now();
        while matches!(self.stall, Stall::UntilParked) && !self.open {
            self.open = ctx.metrics.total(SPLITS_PARKED) > 0;
            anyhow::ensure!(
                self.open || start.elapsed() < PARK_WAIT,
                "the source parked no split within {PARK_WAIT:?} of back-pressure"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        {
            let mut m = self.max_held.lock().unwrap();
            m.0 = m.0.max(ctx.metrics.gauge_total(PENDING_ACKS));
            m.1 = m.1.max(ctx.metrics.gauge_total(BUFFERED_BYTES));
        }
        let seq = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("seq is BIGINT");
        ctx.counter(ROWS_WRITTEN).add(seq.len() as u64);
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
        match self.stall {
            Stall::Checkpoints => std::future::pending::<()>().await,
            Stall::SlowCheckpoints(d) if self.slow_left > 0 => {
                self.slow_left -= 1;
                tokio::time::sleep(d).await;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Runs subscription `sub` -> `sink` (column `seq`) with `options`, one worker, a
/// checkpoint every `interval` and `max_inflight_rows` rows in flight, until no message
/// came for `idle`.
async fn run_job(
    sub: &str,
    options: PubSubSubscriberOptions,
    sink: &StalledSink,
    max_inflight_rows: usize,
    (interval, idle): (Duration, Duration),
) -> Result<JobSummary, JobError> {
    let source = PubSubSource::builder()
        .project(PROJECT)
        .emulator_endpoint(endpoint())
        .subscription(sub)
        .subscriber_options(options)
        .build()
        .unwrap();
    let (profile, config) = source.into_parts();
    let columns = || ConnectionSchema::json(vec![SourceField::new("seq", FieldType::Bigint)]);
    let src = GraphTable::new(
        PubSubConnector,
        "src",
        profile,
        PubSubTable::Source(config),
        columns(),
    )
    .unwrap();
    let dst = GraphTable::new(sink.clone(), "dst", (), (), columns()).unwrap();
    let plan = PipelineGraph::new()
        .pipe(&src, &dst)
        .unwrap()
        .build()
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        workers: 1,
        checkpoint_interval: interval,
        // Longer than the test: only the source's own detector may end a stalled run.
        checkpoint_timeout: Duration::from_secs(600),
        state_dir: state.path().display().to_string(),
        stop_when_idle: Some(idle),
        max_inflight_rows,
        job_id: "stalled-sink".into(),
        ..RuntimeConfig::default()
    };
    tokio::time::timeout(LIMIT, run_pipeline(plan, config, StopHandle::new()))
        .await
        .expect("the job ends within the limit")
}

/// [`run_job`], which must succeed; prints the summary.
async fn run_ok(
    sub: &str,
    options: PubSubSubscriberOptions,
    sink: &StalledSink,
    max_inflight_rows: usize,
    timing: (Duration, Duration),
) -> JobSummary {
    let summary = run_job(sub, options, sink, max_inflight_rows, timing)
        .await
        .unwrap_or_else(|e| panic!("the job failed: {e} ({})", e.summary));
    println!("source_limits: {summary}");
    summary
}

/// The `seq` values of JSON payloads.
fn seqs<'a>(payloads: impl IntoIterator<Item = &'a Vec<u8>>) -> Vec<i64> {
    payloads
        .into_iter()
        .map(|p| {
            serde_json::from_slice::<serde_json::Value>(p).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_that_cannot_emit_is_parked_and_reopened_and_delivers_every_message_once() {
    const N: i64 = 3_000;
    const CAP: u64 = 50;
    let t = topics("parked", 10).await;
    publish_seq(&t.input, 0..N as usize).await;
    let options = PubSubSubscriberOptions::builder()
        .paused_split_buffer_max_messages(CAP)
        // The stream ack deadline: what a stopped stream had in flight returns after this.
        .max_duration_per_ack_extension(Duration::from_secs(10))
        .build()
        .unwrap();
    let sink = StalledSink::new(Stall::UntilParked);
    // A hundred rows fill the pipe: the source's next emit waits for the sink.
    let summary = run_ok(&t.input_sub, options, &sink, 100, QUICK).await;

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
    let late = seqs(left.values());
    // Written or still unacknowledged, each exactly once: a row both written and back
    // again would be one whose ack was lost.
    let mut all = sink.rows.lock().unwrap().clone();
    all.extend(&late);
    each_once(&all, N).unwrap_or_else(|e| panic!("{e}; {summary}"));
    println!("source_limits: {} redelivered after the job", late.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_checkpoints_never_complete_fails_by_the_first_checkpoint_timeout() {
    const N: usize = 200;
    let t = topics("no-checkpoint", 10).await;
    publish_seq(&t.input, 0..N).await;
    let options = PubSubSubscriberOptions::builder()
        .first_checkpoint_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let sink = StalledSink::new(Stall::Checkpoints);
    let e = run_job(&t.input_sub, options, &sink, 10_000, QUICK)
        .await
        .expect_err("no checkpoint completes, so the source's detector fails the job");
    let msg = format!("{e}");
    assert!(
        msg.contains("checkpointing is off or too slow")
            && msg.contains("'scan.first-checkpoint-timeout'")
            && msg.contains("3s"),
        "the error names the cause, the option and its value: {msg}"
    );
    assert_eq!(e.summary.checkpoints_completed, 0, "{}", e.summary);
    assert_eq!(e.summary.messages_acked, 0, "{}", e.summary);
    // Rows reached the sink but no checkpoint committed them: every message comes back.
    assert!(!sink.rows.lock().unwrap().is_empty(), "rows were emitted");
    let back = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    let mut got = seqs(back.values());
    got.sort_unstable();
    got.dedup();
    assert_eq!(
        got,
        (0..N as i64).collect::<Vec<_>>(),
        "nothing was acknowledged"
    );
}

/// Every `seq` of 0..n exactly once in `rows`, else what went wrong.
fn each_once(rows: &[i64], n: i64) -> Result<(), String> {
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for r in rows {
        *seen.entry(*r).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    let absent: Vec<i64> = (0..n).filter(|i| !seen.contains_key(i)).collect();
    if twice.is_empty() && absent.is_empty() {
        Ok(())
    } else {
        Err(format!("twice: {twice:?}, absent: {absent:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_bounds_what_a_subtask_holds_and_everything_arrives() {
    const N: i64 = 600;
    const MESSAGES: u64 = 40;
    // Payloads `{"seq": N}` are 10..12 bytes: the byte limit binds first (~33 messages).
    const BYTES: u64 = 400;
    // While flow control holds taking back, deliveries wait in a paused buffer of 10.
    const PAUSED: u64 = 10;
    let t = topics("flow-control", 10).await;
    publish_seq(&t.input, 0..N as usize).await;
    let options = PubSubSubscriberOptions::builder()
        .max_outstanding_messages(MESSAGES)
        .max_outstanding_bytes(BYTES)
        .paused_split_buffer_max_messages(PAUSED)
        // A park's stranded deliveries come back within this (the stream ack deadline).
        .max_duration_per_ack_extension(Duration::from_secs(10))
        .build()
        .unwrap();
    let sink = StalledSink::new(Stall::Never);
    let summary = run_ok(&t.input_sub, options, &sink, 10_000, QUICK).await;
    each_once(&sink.rows.lock().unwrap(), N).unwrap_or_else(|e| panic!("{e}; {summary}"));
    let (messages, bytes) = *sink.max_held.lock().unwrap();
    println!("source_limits: held at most {messages} messages, {bytes} bytes");
    // Taking stops once a limit is reached, so one message may land past the byte limit;
    // the paused buffer holds at most PAUSED more (the one that would cross it parks).
    assert!(
        messages <= MESSAGES + PAUSED,
        "held {messages} messages, limits {MESSAGES} + {PAUSED} paused"
    );
    assert!(
        bytes < BYTES + 12 * (PAUSED + 1),
        "held {bytes} bytes, limit {BYTES} + {PAUSED} paused messages"
    );
    assert!(
        bytes > 0,
        "the gauges were sampled while messages were held"
    );
    // 600 messages through a ~33-message window take many commits.
    assert!(summary.checkpoints_completed >= 5, "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_outlive_the_ack_deadline_until_the_checkpoint_commits() {
    const N: i64 = 300;
    // The subscription's and the stream's ack deadline are 10 s; a checkpoint comes every
    // 15 s, so every message is held past its deadline and must keep its lease.
    let t = topics("leases", 10).await;
    publish_seq(&t.input, 0..N as usize).await;
    let options = PubSubSubscriberOptions::builder()
        .max_duration_per_ack_extension(Duration::from_secs(10))
        .build()
        .unwrap();
    let sink = StalledSink::new(Stall::Never);
    let timing = (Duration::from_secs(15), Duration::from_secs(20));
    let summary = run_ok(&t.input_sub, options, &sink, 10_000, timing).await;
    each_once(&sink.rows.lock().unwrap(), N).unwrap_or_else(|e| panic!("{e}; {summary}"));
    assert_eq!(summary.rows_written, N as u64, "{summary}");
    assert_eq!(
        summary.messages_read, N as u64,
        "no message was redelivered while held: {summary}"
    );
    assert_eq!(summary.messages_acked, N as u64, "{summary}");
    assert!(summary.checkpoints_completed >= 1, "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_held_at_flow_control_past_the_ack_deadline_writes_each_message_once() {
    const N: i64 = 1_000;
    // Flow control stops taking at 100 held messages; the first checkpoints take 15 s, past
    // the 10 s ack deadline. The emulator does not enforce flow control, so deliveries keep
    // arriving meanwhile: left unpolled in the stream they would expire, come back, and be
    // written twice (the acks of expired copies are lost).
    let t = topics("held-at-limit", 10).await;
    publish_seq(&t.input, 0..N as usize).await;
    let options = PubSubSubscriberOptions::builder()
        .max_outstanding_messages(100)
        .max_duration_per_ack_extension(Duration::from_secs(10))
        .build()
        .unwrap();
    let sink = StalledSink::new(Stall::SlowCheckpoints(Duration::from_secs(15)));
    let summary = run_ok(&t.input_sub, options, &sink, 10_000, QUICK).await;
    each_once(&sink.rows.lock().unwrap(), N).unwrap_or_else(|e| panic!("{e}; {summary}"));
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(
        left.is_empty(),
        "{} messages were never acknowledged",
        left.len()
    );
}
