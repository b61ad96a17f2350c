//! The Timely Dataflow runtime (SPEC 2.1): checkpoint epochs are Timely timestamps,
//! a source's barrier is a capability downgrade, sinks hold an epoch until their flush
//! completes, and a probe behind the sinks tells the coordinator when a checkpoint is
//! complete; only then is its metadata written and `Commit` sent to every source.

mod cluster;
mod control;
mod coordinator;
mod dataflow;
mod dedup_stage;
mod flow;
mod job;
mod job_log;
mod leader;
mod peer_panic;
mod process;
mod route;
mod state;
mod tasks;
mod watermarks;
mod window_run;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;

pub use cluster::read_hosts;
pub(crate) use flow::Flow;
pub use job::{JobError, JobSummary, StopHandle};
pub use leader::STOP_PROGRESS_LOG;
pub use state::{CheckpointMetadata, CheckpointStore, JobRecord};

use pubsub_engine_spi::{CheckpointBarrier, OperatorState, SourceOutput, TaskInfo};

/// Settings of one job run.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Timely workers (threads); each runs one subtask of every operator.
    pub workers: usize,
    /// Time between checkpoint barriers.
    pub checkpoint_interval: Duration,
    /// Where completed checkpoints are kept: a local directory path, or an object-store
    /// URL (`file://`, `s3://`, `gs://`, `az://`) that every process of a cluster reaches.
    pub state_dir: String,
    /// This process's place in a Timely cluster; `None` runs one process.
    pub cluster: Option<ClusterConfig>,
    /// Stop gracefully once no source received a message for this long.
    pub stop_when_idle: Option<Duration>,
    /// A graceful stop (signal, `--stop-when-idle`, end of input) drains: every source
    /// sends the watermark at the end of time before its final barrier, so every open
    /// window fires before the final checkpoint (Flink's `stop --drain`). Without it,
    /// open windows stay in the final checkpoint and the next run continues them.
    pub drain: bool,
    /// The most memory the open windows of one window operator subtask may hold, in
    /// bytes (an estimate: key bytes, the accumulators' own `size()` and a measured
    /// overhead per group, gauge `window_state_bytes`). Reaching it fails the job
    /// (permanently: a restart restores the same state), never grows without bound.
    pub max_window_state_bytes: u64,
    /// Rows one process holds: emitted by its sources and not yet taken by a sink, plus
    /// rows received from other processes (back-pressure bound, see `flow.rs`).
    pub max_inflight_rows: usize,
    /// How long a graceful stop may go without progress (extended while the final
    /// checkpoint advances), and the bound on the close of every task.
    pub shutdown_timeout: Duration,
    /// A checkpoint not complete this long after its barrier fails the job.
    pub checkpoint_timeout: Duration,
    /// Recorded in checkpoint metadata.
    pub job_id: String,
    /// Where every operator's and the runtime's counters and gauges live; pass a clone in
    /// to read them while the job runs (e.g. a metrics endpoint).
    pub metrics: pubsub_engine_spi::Metrics,
}

/// One process of a Timely cluster (Timely's own `-n/-p/-h`): every process runs the same
/// pipeline with the same `workers`; process 0 decides checkpoints.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This process's index, `0..hosts.len()`.
    pub process: usize,
    /// `host:port` of every process, in process order; this process listens on its own.
    pub hosts: Vec<String>,
    /// How long start-up waits for every peer to connect before failing, naming the
    /// peers that did not.
    pub connect_timeout: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: 2,
            checkpoint_interval: Duration::from_secs(10),
            state_dir: "state".to_string(),
            cluster: None,
            stop_when_idle: None,
            drain: false,
            max_window_state_bytes: 1 << 30,
            max_inflight_rows: 32_768,
            shutdown_timeout: Duration::from_secs(60),
            checkpoint_timeout: Duration::from_secs(600),
            job_id: "pipeline".to_string(),
            metrics: pubsub_engine_spi::Metrics::default(),
        }
    }
}

pub use coordinator::run_pipeline;

/// Rows in flight, with the back-pressure permits they hold.
#[derive(Clone)]
pub struct Rows {
    pub batch: RecordBatch,
    /// Returned to the job's pool when the last clone of these rows is dropped (a source
    /// read by several queries hands one clone to each of their sinks).
    pub permits: Arc<Permits>,
}

/// Back-pressure permits rows hold (see `flow.rs`); given back on drop.
pub struct Permits {
    count: u32,
    release: Release,
}

enum Release {
    Nothing,
    /// Permits of this process's sources.
    Local(Arc<flow::Flow>),
    /// Rows that arrived from process `origin`.
    Peer {
        flow: Arc<flow::Flow>,
        origin: usize,
    },
}

impl Permits {
    /// `count` permits the caller took from `flow.local` (and forgot).
    pub(crate) fn local(flow: Arc<flow::Flow>, count: u32) -> Arc<Self> {
        flow.hold(count);
        Arc::new(Permits {
            count,
            release: Release::Local(flow),
        })
    }

    /// `count` rows that arrived from process `origin`, held by this process until the
    /// sink task took them.
    pub(crate) fn peer(flow: Arc<flow::Flow>, origin: usize, count: u32) -> Arc<Self> {
        flow.hold(count);
        Arc::new(Permits {
            count,
            release: Release::Peer { flow, origin },
        })
    }

    /// Holds nothing (rows just deserialized, before their sink operator takes them over).
    pub(crate) fn none() -> Self {
        Permits {
            count: 0,
            release: Release::Nothing,
        }
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        match &self.release {
            Release::Nothing => {}
            Release::Local(flow) => {
                flow.local.add_permits(self.count as usize);
                flow.release(self.count);
            }
            Release::Peer { flow, origin } => {
                flow.release(self.count);
                flow.ack(*origin, self.count);
            }
        }
    }
}

/// From a source task to its Timely source operator.
pub(crate) enum SourceEvent {
    Batch(Rows),
    /// The subtask's watermark, after every row it emitted before.
    Watermark(pubsub_engine_spi::Watermark),
    /// Close epoch `e`: downgrade the capability to `e + 1`.
    Barrier(u64),
    /// No more output (after a `then_stop` barrier).
    Finished,
}

/// From a Timely sink operator (and the coordinator) to its sink task.
pub(crate) enum SinkEvent {
    Batch(Rows),
    /// The sink operator's input watermark changed (after every row it covers).
    Watermark(pubsub_engine_spi::Watermark),
    Checkpoint(CheckpointBarrier),
    Commit(u64),
    Close,
}

/// To the coordinator.
#[derive(Debug)]
pub(crate) enum CoordEvent {
    /// A source or sink subtask's `on_start` succeeded.
    TaskStarted {
        operator_id: String,
        subtask: usize,
    },
    SourceSnapshot {
        operator_id: String,
        subtask: usize,
        epoch: u64,
        state: OperatorState,
    },
    /// A window subtask's state after `epoch` (JSON text of an `OperatorState`);
    /// `through_end`: its input ended, so it holds for every later epoch too.
    WindowSnapshot {
        operator_id: String,
        subtask: usize,
        epoch: u64,
        through_end: bool,
        state: String,
    },
    /// The least epoch still held at the sinks' outputs; `None` once the dataflow is done.
    Frontier(Option<u64>),
    TaskFailed {
        operator_id: String,
        subtask: usize,
        error: String,
        /// The error is a [`pubsub_engine_spi::ConfigError`] or [`pubsub_engine_spi::PermanentError`]: no restart
        /// fixes it (exit 2).
        permanent: bool,
    },
    TaskFinished {
        operator_id: String,
        subtask: usize,
    },
    /// A source subtask's `on_close` returned (after `TaskFinished` or `TaskFailed`): what
    /// it held is released. An abort waits for this, not for the failure report, which is
    /// sent first so the job fails fast.
    TaskClosed {
        operator_id: String,
        subtask: usize,
    },
    /// A bounded source subtask emitted all of its input.
    EndOfInput {
        operator_id: String,
        subtask: usize,
    },
}

pub(crate) type ActivatorSlot = Arc<Mutex<Option<timely::scheduling::SyncActivator>>>;

pub(crate) fn activate(slot: &ActivatorSlot) {
    if let Some(a) = slot.lock().expect("activator lock").as_ref() {
        let _ = a.activate();
    }
}

/// The runtime's end of one source subtask (the SPI's [`SourceOutput`]): its rows,
/// watermarks and barriers go to the subtask's Timely source operator, which is woken;
/// its snapshots and end of input go to the coordinator.
pub(crate) struct SourcePort {
    pub tx: std::sync::mpsc::Sender<SourceEvent>,
    pub activator: ActivatorSlot,
    pub flow: Arc<Flow>,
    pub coordinator: tokio::sync::mpsc::UnboundedSender<CoordEvent>,
}

impl SourcePort {
    fn send(&self, event: SourceEvent) -> anyhow::Result<()> {
        self.tx
            .send(event)
            .map_err(|_| anyhow::anyhow!("the dataflow has shut down"))?;
        activate(&self.activator);
        Ok(())
    }
}

impl SourceOutput for SourcePort {
    fn permits(&self) -> &tokio::sync::Semaphore {
        &self.flow.local
    }

    fn max_batch_rows(&self) -> u32 {
        self.flow.local_max
    }

    fn batch(&self, batch: RecordBatch, permits: u32) -> anyhow::Result<()> {
        self.send(SourceEvent::Batch(Rows {
            batch,
            permits: Permits::local(self.flow.clone(), permits),
        }))
    }

    fn watermark(&self, watermark: pubsub_engine_spi::Watermark) -> anyhow::Result<()> {
        self.send(SourceEvent::Watermark(watermark))
    }

    fn barrier(&self, epoch: u64) -> anyhow::Result<()> {
        self.send(SourceEvent::Barrier(epoch))
    }

    fn finished(&self) -> anyhow::Result<()> {
        self.send(SourceEvent::Finished)
    }

    fn snapshot(&self, task: &TaskInfo, epoch: u64, state: OperatorState) {
        let _ = self.coordinator.send(CoordEvent::SourceSnapshot {
            operator_id: task.operator_id.clone(),
            subtask: task.task_index,
            epoch,
            state,
        });
    }

    fn end_of_input(&self, task: &TaskInfo) {
        let _ = self.coordinator.send(CoordEvent::EndOfInput {
            operator_id: task.operator_id.clone(),
            subtask: task.task_index,
        });
    }
}

/// Shared by everything in one job.
#[derive(Clone)]
pub(crate) struct JobShared {
    pub flow: Arc<flow::Flow>,
    pub coordinator: tokio::sync::mpsc::UnboundedSender<CoordEvent>,
    /// Set when the job fails: workers drop their dataflows, sinks skip queued rows.
    pub aborted: Arc<std::sync::atomic::AtomicBool>,
    /// Watermark alignment groups of this process's sources.
    pub alignment: Arc<pubsub_engine_spi::alignment::Alignment>,
}

impl JobShared {
    /// Fails the job fast: wakes every source waiting for back-pressure permits (their
    /// `collect` errors) and tells workers and sinks to stop.
    pub fn abort(&self) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::Release);
        self.flow.local.close();
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::Acquire)
    }
}
