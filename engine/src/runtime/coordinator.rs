//! Builds a job's tasks and Timely workers, then drives checkpoints: triggers barriers,
//! collects source snapshots, watches the sinks' frontier, writes completed checkpoints
//! and sends `Commit`, and runs graceful stops and aborts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::{Notify, Semaphore};

use super::dataflow::{run_worker, SinkPlumbing, SourcePlumbing, WorkerPlumbing};
use super::state::{CheckpointMetadata, CheckpointStore};
use super::tasks::{run_sink, run_source};
use super::{ActivatorSlot, CoordEvent, JobShared, RuntimeConfig, SinkEvent};
use crate::spi::{
    CheckpointBarrier, ConstructedOperator, ControlMessage, Metrics, OperatorContext,
    OperatorState, PullState, SourceCollector, SourceContext, StopMode, TaskInfo, MESSAGES_ACKED,
    MESSAGES_NACKED, MESSAGES_RECEIVED, ROWS_WRITTEN,
};
use crate::sql::PlannedPipeline;

/// Asks a running job to stop: gracefully (final checkpoint, commit, exit 0) or, e.g. on
/// a second signal, at once (nothing more committed, every held message released).
#[derive(Clone, Default)]
pub struct StopHandle {
    stop: Arc<Notify>,
    abort: Arc<Notify>,
}

impl StopHandle {
    pub fn new() -> Self {
        Self::default()
    }
    /// Graceful stop. During start-up (before every source connected) it stops at once:
    /// nothing was read yet.
    pub fn stop(&self) {
        self.stop.notify_one();
    }
    /// Immediate stop: the job fails with an error saying so.
    pub fn abort(&self) {
        self.abort.notify_one();
    }
    /// Resolves when a stop (graceful or not) was requested before a job listened; for
    /// work done before the job starts (e.g. starting an emulator). Consumes the request.
    pub async fn stopped(&self) {
        tokio::select! {
            _ = self.stop.notified() => {}
            _ = self.abort.notified() => {}
        }
    }
}

/// Counts reported when a job ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSummary {
    pub messages_read: u64,
    pub rows_written: u64,
    pub checkpoints_completed: u64,
    pub messages_acked: u64,
    /// Messages released for redelivery (nacked) on close or after a final barrier.
    pub messages_released: u64,
    /// Every other counter with a non-zero total (e.g. `messages_dropped`,
    /// `pull_reconnects`), by name.
    pub other_counters: BTreeMap<String, u64>,
    /// The checkpoint epoch the job restored from, if any.
    pub restored_epoch: Option<u64>,
    /// The last completed checkpoint epoch (restored or new).
    pub last_completed_epoch: Option<u64>,
}

impl fmt::Display for JobSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "messages read: {}, rows written: {}, checkpoints completed: {}, messages acknowledged: {}, messages released: {}",
            self.messages_read, self.rows_written, self.checkpoints_completed, self.messages_acked, self.messages_released
        )?;
        for (name, n) in &self.other_counters {
            write!(f, ", {}: {n}", name.replace('_', " "))?;
        }
        Ok(())
    }
}

/// A failed job with what it did before failing.
#[derive(Debug)]
pub struct JobError {
    pub error: anyhow::Error,
    pub summary: JobSummary,
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for JobError {}

/// Runs a planned pipeline until it is stopped (via `stop`, or `stop_when_idle`) or fails.
///
/// Restores from the last checkpoint in `config.state_dir`; new epochs continue above it.
/// Returns the summary of a graceful stop, or the error that failed the job; in both
/// cases nothing was acknowledged that a completed checkpoint did not cover.
pub async fn run_pipeline(
    plan: PlannedPipeline,
    config: RuntimeConfig,
    stop: StopHandle,
) -> Result<JobSummary, JobError> {
    let metrics = Metrics::default();
    let mut summary = JobSummary::default();
    let fail = |error: anyhow::Error, summary: &JobSummary| JobError {
        error,
        summary: summary.clone(),
    };
    let store = CheckpointStore::open(&config.state_dir, true).await.map_err(|e| fail(e, &summary))?;
    let restored = store.load().await.map_err(|e| fail(e, &summary))?;
    let start_epoch = restored.as_ref().map_or(1, |m| m.epoch + 1);
    if let Some(m) = &restored {
        tracing::info!(epoch = m.epoch, "restoring from checkpoint {}", m.epoch);
        if m.job_id != config.job_id {
            tracing::warn!(
                "the checkpoint in {} was written by job '{}', this is '{}': operator state is matched by operator id",
                config.state_dir,
                m.job_id,
                config.job_id
            );
        }
        summary.restored_epoch = Some(m.epoch);
        summary.last_completed_epoch = Some(m.epoch);
    }

    let workers = config.workers.max(1);
    let (coord_tx, coord_rx) = mpsc::unbounded_channel();
    let max_permits = config.max_inflight_rows.clamp(1, u32::MAX as usize / 2);
    let shared = JobShared {
        permits: Arc::new(Semaphore::new(max_permits)),
        coordinator: coord_tx.clone(),
        aborted: Arc::new(AtomicBool::new(false)),
    };

    let source_tables = plan.sources();
    let mut per_worker: Vec<WorkerPlumbing> =
        (0..workers).map(|_| WorkerPlumbing::default()).collect();
    let mut sources = Vec::new();
    let mut sinks = Vec::new();
    let mut tasks = Vec::new();
    let mut pull_states = Vec::new();
    let mut task_aborts = BTreeMap::new();
    let mut describe: BTreeMap<String, String> = BTreeMap::new();
    for (w, plumbing) in per_worker.iter_mut().enumerate() {
        let restored_state = |id: &str| -> OperatorState {
            restored
                .as_ref()
                .and_then(|m| m.operators.get(id))
                .and_then(|s| s.get(&w))
                .cloned()
                .unwrap_or_default()
        };
        let task = |id: &str, name: &str| TaskInfo {
            job_id: config.job_id.clone(),
            operator_id: id.to_string(),
            operator_name: name.to_string(),
            task_index: w,
            parallelism: workers,
        };
        // One reader set per source table, however many queries read it.
        for (table, _) in &source_tables {
            let name = &table.connection.name;
            let src_id = format!("source-{name}");
            describe.insert(src_id.clone(), format!("source table '{name}'"));
            let ConstructedOperator::Source(src_op) = table
                .connector
                .make_operator(&table.connection, table.operator_config())
                .map_err(|e| fail(e.context(format!("table '{name}'")), &summary))?
            else {
                return Err(fail(
                    anyhow!("table '{name}' did not build a source"),
                    &summary,
                ));
            };
            let (control_tx, control_rx) = mpsc::unbounded_channel();
            let (source_tx, source_rx) = std::sync::mpsc::channel();
            let source_activator: ActivatorSlot = Arc::new(Mutex::new(None));
            let out_schema = table.connection.schema.arrow_schema();
            let pull_state = Arc::new(PullState::default());
            pull_states.push(pull_state.clone());
            let ctx = SourceContext {
                task_info: task(&src_id, name),
                out_schema: out_schema.clone(),
                control_rx,
                metrics: metrics.clone(),
                state: restored_state(&src_id),
                checkpoint_interval: config.checkpoint_interval,
                coordinator: coord_tx.clone(),
                pull_state: pull_state.clone(),
            };
            let collector = SourceCollector::new(
                out_schema,
                source_tx,
                source_activator.clone(),
                shared.permits.clone(),
                max_permits as u32,
                pull_state,
            );
            sources.push(((src_id.clone(), w), control_tx));
            let t = spawn_task(
                run_source(src_op, ctx, collector, shared.clone()),
                &src_id,
                w,
                &shared,
            );
            task_aborts.insert((src_id.clone(), w), t.abort_handle());
            tasks.push(t);
            plumbing.sources.push(SourcePlumbing {
                id: src_id,
                source_rx,
                source_activator,
            });
        }
        for q in &plan.queries {
            let name = &q.sink.connection.name;
            let sink_id = format!("{}-sink-{name}", q.id);
            describe.insert(
                sink_id.clone(),
                format!("sink table '{name}' of {} ({})", q.id, q.text),
            );
            let ConstructedOperator::Operator(sink_op) = q
                .sink
                .connector
                .make_operator(&q.sink.connection, q.sink.operator_config())
                .map_err(|e| fail(e.context(format!("table '{name}'")), &summary))?
            else {
                return Err(fail(
                    anyhow!("table '{name}' did not build a sink"),
                    &summary,
                ));
            };
            let source_index = source_tables
                .iter()
                .position(|(t, _)| t.connection.name == q.source.connection.name)
                .expect("every query's source is planned");
            let (sink_tx, sink_rx) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let sink_activator: ActivatorSlot = Arc::new(Mutex::new(None));
            let sctx = OperatorContext {
                task_info: task(&sink_id, name),
                in_schema: q.sink_schema.clone(),
                metrics: metrics.clone(),
                state: restored_state(&sink_id),
            };
            sinks.push(((sink_id.clone(), w), sink_tx.clone()));
            let t = spawn_task(
                run_sink(
                    sink_op,
                    sctx,
                    sink_rx,
                    done_tx,
                    sink_activator.clone(),
                    shared.clone(),
                ),
                &sink_id,
                w,
                &shared,
            );
            task_aborts.insert((sink_id.clone(), w), t.abort_handle());
            tasks.push(t);
            plumbing.sinks.push(SinkPlumbing {
                id: sink_id,
                query: q.clone(),
                source_index,
                sink_tx,
                sink_done_rx: done_rx,
                sink_activator,
            });
        }
    }

    let abort = shared.aborted.clone();
    let slots: Arc<Mutex<Vec<Option<WorkerPlumbing>>>> =
        Arc::new(Mutex::new(per_worker.into_iter().map(Some).collect()));
    let timely_thread = {
        let abort = abort.clone();
        let coord = coord_tx.clone();
        std::thread::Builder::new()
            .name("timely".into())
            .spawn(move || {
                let report = coord.clone();
                let result = timely::execute(timely::Config::process(workers), move |worker| {
                    let index = worker.index();
                    let queries = slots.lock().expect("plumbing lock")[index]
                        .take()
                        .expect("each worker takes its plumbing once");
                    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_worker(worker, queries, start_epoch, coord.clone(), abort.clone())
                    }));
                    if let Err(panic) = run {
                        let _ = coord.send(CoordEvent::TaskFailed {
                            operator_id: "timely-worker".into(),
                            subtask: index,
                            error: format!("panicked: {}", panic_message(&*panic)),
                        });
                        // Timely steps a worker until its dataflows finish: drop them.
                        for id in worker.installed_dataflows() {
                            worker.drop_dataflow(id);
                        }
                    }
                })
                .and_then(|guards| {
                    guards
                        .join()
                        .into_iter()
                        .collect::<Result<Vec<_>, _>>()
                        .map(|_| ())
                });
                if let Err(e) = &result {
                    let _ = report.send(CoordEvent::TaskFailed {
                        operator_id: "timely".into(),
                        subtask: 0,
                        error: format!("Timely workers failed: {e}"),
                    });
                }
                result
            })
            .map_err(|e| fail(anyhow!("cannot start Timely workers: {e}"), &summary))?
    };
    drop(coord_tx);

    let mut coordinator = Coordinator {
        shared: shared.clone(),
        config: config.clone(),
        store,
        metrics: metrics.clone(),
        sources,
        sinks,
        pull_states,
        describe,
        started: BTreeSet::new(),
        task_aborts,
        pending: BTreeMap::new(),
        frontier: None,
        next_epoch: start_epoch,
        final_epoch: None,
        ended: BTreeSet::new(),
        summary: summary.clone(),
    };
    let result = coordinator.drive(coord_rx, stop).await;
    if result.is_err() {
        shared.abort();
    }
    // Bounded: a task that does not end in time is cancelled (its handles drop and nack).
    // After a failure the abort already waited for the sources: do not wait long again.
    let wait = if result.is_err() {
        config.shutdown_timeout.min(ABORT_WAIT)
    } else {
        config.shutdown_timeout
    };
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(wait, futures::future::join_all(tasks))
        .await
        .is_err()
    {
        tracing::warn!("tasks did not end within {wait:?}: cancelling them");
        for a in aborts {
            a.abort();
        }
    }
    let join = tokio::task::spawn_blocking(move || timely_thread.join());
    match tokio::time::timeout(wait, join).await {
        Ok(Ok(Ok(Ok(())))) => {}
        Ok(Ok(Ok(Err(e)))) => tracing::warn!("timely workers ended with an error: {e}"),
        _ => tracing::warn!("timely workers did not end in time"),
    }
    let mut summary = coordinator.summary.clone();
    summary.messages_read = metrics.total(MESSAGES_RECEIVED);
    summary.rows_written = metrics.total(ROWS_WRITTEN);
    summary.messages_acked = metrics.total(MESSAGES_ACKED);
    summary.messages_released = metrics.total(MESSAGES_NACKED);
    for name in metrics.counter_names() {
        let standard = [
            MESSAGES_RECEIVED,
            ROWS_WRITTEN,
            MESSAGES_ACKED,
            MESSAGES_NACKED,
        ];
        let n = metrics.total(&name);
        if n > 0 && !standard.contains(&name.as_str()) {
            summary.other_counters.insert(name, n);
        }
    }
    match result {
        Ok(()) => Ok(summary),
        Err(error) => Err(JobError { error, summary }),
    }
}

/// Spawns a task; a panic in it is reported to the coordinator as a task failure.
fn spawn_task(
    fut: impl std::future::Future<Output = ()> + Send + 'static,
    operator_id: &str,
    subtask: usize,
    shared: &JobShared,
) -> tokio::task::JoinHandle<()> {
    use futures::FutureExt;
    let operator_id = operator_id.to_string();
    let coordinator = shared.coordinator.clone();
    tokio::spawn(async move {
        if let Err(panic) = std::panic::AssertUnwindSafe(fut).catch_unwind().await {
            let error = format!("panicked: {}", panic_message(&*panic));
            let _ = coordinator.send(CoordEvent::TaskFailed {
                operator_id,
                subtask,
                error,
            });
        }
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

type TaskKey = (String, usize);

/// The longest an aborted job waits for its sources to release what they hold (their own
/// close is bounded by the source's shutdown timeout, 5 s).
const ABORT_WAIT: Duration = Duration::from_secs(10);

struct Coordinator {
    shared: JobShared,
    config: RuntimeConfig,
    store: CheckpointStore,
    metrics: Metrics,
    sources: Vec<(TaskKey, UnboundedSender<ControlMessage>)>,
    sinks: Vec<(TaskKey, UnboundedSender<SinkEvent>)>,
    /// Whether each source subtask can pull (the idle clock runs only while all can).
    pull_states: Vec<Arc<PullState>>,
    /// Operator id -> what it is, for errors (`sink table 'b' of q1 (INSERT INTO ...)`).
    describe: BTreeMap<String, String>,
    /// Subtasks whose `on_start` finished.
    started: BTreeSet<TaskKey>,
    /// Cancels a task; used on abort for tasks still starting (they hold nothing yet).
    task_aborts: BTreeMap<TaskKey, tokio::task::AbortHandle>,
    /// Triggered, not yet completed epochs: when each was triggered, and the source
    /// snapshots received so far.
    pending: BTreeMap<u64, (Instant, BTreeMap<TaskKey, OperatorState>)>,
    /// Last reported sinks' frontier: `None` before the first report, `Some(None)` when done.
    frontier: Option<Option<u64>>,
    next_epoch: u64,
    final_epoch: Option<u64>,
    ended: BTreeSet<TaskKey>,
    summary: JobSummary,
}

/// Everything that changes while a checkpoint makes progress; a graceful stop's deadline
/// is extended whenever it changes.
#[derive(PartialEq, Eq, Clone)]
struct Progress {
    frontier: Option<Option<u64>>,
    snapshots: usize,
    completed: u64,
    written: u64,
    acked: u64,
    ended: usize,
}

impl Coordinator {
    fn progress(&self) -> Progress {
        Progress {
            frontier: self.frontier,
            snapshots: self.pending.values().map(|(_, s)| s.len()).sum(),
            completed: self.summary.checkpoints_completed,
            written: self.metrics.total(ROWS_WRITTEN),
            acked: self.metrics.total(MESSAGES_ACKED),
            ended: self.ended.len(),
        }
    }

    fn all_started(&self) -> bool {
        self.sources
            .iter()
            .map(|(k, _)| k)
            .chain(self.sinks.iter().map(|(k, _)| k))
            .all(|k| self.started.contains(k))
    }

    fn name(&self, operator_id: &str) -> String {
        self.describe
            .get(operator_id)
            .cloned()
            .unwrap_or_else(|| operator_id.to_string())
    }

    /// What a pending checkpoint still waits for, for timeout errors.
    fn waiting_for(&self, epoch: u64) -> String {
        let snaps = self.pending.get(&epoch).map_or(0, |(_, s)| s.len());
        if snaps < self.sources.len() {
            let missing: Vec<String> = self
                .sources
                .iter()
                .map(|(k, _)| k)
                .filter(|k| {
                    !self
                        .pending
                        .get(&epoch)
                        .is_some_and(|(_, s)| s.contains_key(*k))
                })
                .map(|(op, i)| format!("{} subtask {i}", self.name(op)))
                .collect();
            format!("barriers from {}", missing.join(", "))
        } else {
            let sinks: BTreeSet<String> = self
                .sinks
                .iter()
                .map(|((op, _), _)| self.name(op))
                .collect();
            let frontier = match self.frontier.flatten() {
                Some(f) => format!("the sinks are done with epochs before {f}"),
                None => "no sink has reported progress yet".to_string(),
            };
            format!(
                "the sinks to make it durable ({frontier}): {}",
                sinks.into_iter().collect::<Vec<_>>().join("; ")
            )
        }
    }

    async fn drive(
        &mut self,
        mut events: UnboundedReceiver<CoordEvent>,
        stop: StopHandle,
    ) -> anyhow::Result<()> {
        let interval = self
            .config
            .checkpoint_interval
            .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let idle_every = self
            .config
            .stop_when_idle
            .map_or(Duration::from_secs(3600), |d| {
                (d / 4).clamp(Duration::from_millis(50), Duration::from_millis(500))
            });
        let mut idle_check = tokio::time::interval(idle_every);
        let mut watchdog = tokio::time::interval(Duration::from_millis(250));
        let mut last_received = (0u64, Instant::now());
        // Set once a graceful stop began: the last time it made progress.
        let mut stopping: Option<(Progress, Instant)> = None;
        let total_tasks = self.sources.len() + self.sinks.len();

        let outcome: anyhow::Result<()> = loop {
            if self.final_epoch.is_some()
                && self.pending.is_empty()
                && self.ended.len() == total_tasks
            {
                break Ok(());
            }
            tokio::select! {
                _ = stop.abort.notified() => {
                    break Err(anyhow!("aborted by a second stop signal: nothing more is committed; every held message is released for redelivery"));
                }
                _ = ticker.tick(), if self.final_epoch.is_none() => {
                    if self.pending.len() < 2 {
                        self.trigger(false);
                    } else {
                        tracing::debug!("checkpoint skipped: {} still in progress", self.pending.len());
                    }
                }
                _ = stop.stop.notified(), if self.final_epoch.is_none() => {
                    if !self.all_started() {
                        break Err(anyhow!(
                            "stopped during start-up (not every source and sink had connected): nothing was acknowledged"
                        ));
                    }
                    tracing::info!("stop requested: taking a final checkpoint");
                    self.trigger(true);
                    stopping = Some((self.progress(), Instant::now()));
                }
                _ = idle_check.tick(), if self.final_epoch.is_none() && self.config.stop_when_idle.is_some() => {
                    let idle_for = self.config.stop_when_idle.unwrap_or_default();
                    let received = self.metrics.total(MESSAGES_RECEIVED);
                    // Only time in which every source could pull counts (issue 5): time held
                    // by flow control, back-pressure, a reconnect or start-up does not.
                    let all_can_pull = self.all_started()
                        && self.pull_states.iter().all(|p| p.is_idle_capable());
                    if received != last_received.0 || !all_can_pull {
                        last_received = (received, Instant::now());
                    } else if last_received.1.elapsed() >= idle_for {
                        tracing::info!("no message received for {idle_for:?} while every source could pull: stopping");
                        self.trigger(true);
                        stopping = Some((self.progress(), Instant::now()));
                    }
                }
                _ = watchdog.tick() => {
                    if let Some((&epoch, (at, _))) = self.pending.first_key_value() {
                        if at.elapsed() >= self.config.checkpoint_timeout {
                            break Err(anyhow!(
                                "checkpoint {epoch} did not complete within --checkpoint-timeout {:?}: still waiting for {}",
                                self.config.checkpoint_timeout,
                                self.waiting_for(epoch)
                            ));
                        }
                    }
                    if let Some((last, since)) = &mut stopping {
                        let now = self.progress();
                        if now != *last {
                            *last = now;
                            *since = Instant::now();
                        } else if since.elapsed() >= self.config.shutdown_timeout {
                            let epoch = self.final_epoch.unwrap_or_default();
                            break Err(anyhow!(
                                "graceful stop made no progress for {:?}: final checkpoint {epoch} is still waiting for {}",
                                self.config.shutdown_timeout,
                                self.waiting_for(self.pending.keys().next().copied().unwrap_or(epoch))
                            ));
                        }
                    }
                }
                ev = events.recv() => {
                    let Some(ev) = ev else { break Err(anyhow!("every task and worker ended unexpectedly")) };
                    match ev {
                        CoordEvent::TaskStarted { operator_id, subtask } => {
                            self.started.insert((operator_id, subtask));
                        }
                        CoordEvent::SourceSnapshot { operator_id, subtask, epoch, state } => {
                            if let Some((_, p)) = self.pending.get_mut(&epoch) {
                                p.insert((operator_id, subtask), state);
                            }
                        }
                        CoordEvent::Frontier(f) => self.frontier = Some(f),
                        CoordEvent::EndOfInput { .. } => {}
                        CoordEvent::TaskFailed { operator_id, subtask, error } => {
                            self.ended.insert((operator_id.clone(), subtask));
                            break Err(anyhow!("{} subtask {subtask} failed: {error}", self.name(&operator_id)));
                        }
                        CoordEvent::TaskFinished { operator_id, subtask } => {
                            if self.final_epoch.is_none() || !self.pending.is_empty() {
                                tracing::warn!(%operator_id, subtask, "task finished before the job stopped");
                            }
                            self.ended.insert((operator_id, subtask));
                        }
                    }
                    if let Err(e) = self.complete_ready().await {
                        break Err(e);
                    }
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::error!("job failed: {e:#}");
            self.abort(&mut events, total_tasks).await;
        }
        outcome
    }

    /// Sends barrier `next_epoch` to every source.
    fn trigger(&mut self, then_stop: bool) {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let barrier = CheckpointBarrier {
            epoch,
            min_epoch: self.summary.last_completed_epoch.map_or(1, |e| e + 1),
            timestamp: SystemTime::now(),
            then_stop,
        };
        tracing::debug!(epoch, then_stop, "checkpoint triggered");
        self.pending
            .insert(epoch, (Instant::now(), BTreeMap::new()));
        if then_stop {
            self.final_epoch = Some(epoch);
        }
        for (_, tx) in &self.sources {
            let _ = tx.send(ControlMessage::Checkpoint(barrier));
        }
    }

    /// Completes, in order, every pending epoch that the sinks' frontier has passed and
    /// every source has snapshotted: write metadata, then commit.
    async fn complete_ready(&mut self) -> anyhow::Result<()> {
        while let Some((&epoch, (_, snaps))) = self.pending.first_key_value() {
            let passed = match self.frontier {
                Some(None) => true,
                Some(Some(f)) => f > epoch,
                None => false,
            };
            if !passed || snaps.len() < self.sources.len() {
                return Ok(());
            }
            let snaps = self
                .pending
                .remove(&epoch)
                .map(|(_, s)| s)
                .unwrap_or_default();
            let mut operators: BTreeMap<String, BTreeMap<usize, OperatorState>> = BTreeMap::new();
            for ((op, subtask), state) in snaps {
                operators.entry(op).or_default().insert(subtask, state);
            }
            let meta = CheckpointMetadata {
                version: 1,
                job_id: self.config.job_id.clone(),
                epoch,
                completed_at_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                operators,
            };
            self.store
                .write(&meta)
                .await
                .with_context(|| format!("checkpoint {epoch} could not be written"))?;
            self.summary.checkpoints_completed += 1;
            self.summary.last_completed_epoch = Some(epoch);
            for (_, tx) in &self.sources {
                let _ = tx.send(ControlMessage::Commit { epoch });
            }
            for (_, tx) in &self.sinks {
                let _ = tx.send(SinkEvent::Commit(epoch));
            }
            tracing::info!(
                epoch,
                read = self.metrics.total(MESSAGES_RECEIVED),
                written = self.metrics.total(ROWS_WRITTEN),
                acked = self.metrics.total(MESSAGES_ACKED),
                "checkpoint {epoch} completed"
            );
            if self.final_epoch == Some(epoch) {
                for (_, tx) in &self.sources {
                    let _ = tx.send(ControlMessage::Stop {
                        mode: StopMode::Graceful,
                    });
                }
                for (_, tx) in &self.sinks {
                    let _ = tx.send(SinkEvent::Close);
                }
            }
        }
        Ok(())
    }

    /// Stops every task at once (sources release what they hold) and waits, bounded, for
    /// them to end.
    async fn abort(&mut self, events: &mut UnboundedReceiver<CoordEvent>, total_tasks: usize) {
        self.shared.abort();
        for (_, tx) in &self.sources {
            let _ = tx.send(ControlMessage::Stop {
                mode: StopMode::Immediate,
            });
        }
        for (_, tx) in &self.sinks {
            let _ = tx.send(SinkEvent::Close);
        }
        // Nothing more will be committed, so a sink has nothing left to finish: cancel it
        // at once (it may be stuck on an unresponsive endpoint). So is a task still in
        // `on_start`: it reads no control message and holds nothing. Started sources are
        // left to release (nack) what they hold; their close is bounded.
        let sinks: BTreeSet<TaskKey> = self.sinks.iter().map(|(k, _)| k.clone()).collect();
        for (key, handle) in &self.task_aborts {
            let cancel = sinks.contains(key) || !self.started.contains(key);
            if cancel && !self.ended.contains(key) {
                handle.abort();
                self.ended.insert(key.clone());
            }
        }
        let deadline = tokio::time::Instant::now() + self.config.shutdown_timeout.min(ABORT_WAIT);
        while self.ended.len() < total_tasks {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(CoordEvent::TaskFailed {
                    operator_id,
                    subtask,
                    ..
                }))
                | Ok(Some(CoordEvent::TaskFinished {
                    operator_id,
                    subtask,
                })) => {
                    self.ended.insert((operator_id, subtask));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}
