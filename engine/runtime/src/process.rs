//! One process's coordinator: forwards its tasks' events to the leader as reports,
//! applies the leader's decisions (barriers, commits, stop, abort) to its tasks, and on
//! process 0 also runs the leader role. A failure anywhere stops this process at once
//! without acknowledging anything more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::control::{barrier, Control, Report};
use super::dataflow::WorkerWaker;
use super::job::{JobSummary, StopHandle};
use super::leader::{CheckpointWrite, Leader, TaskKey};
use super::{CoordEvent, JobShared, RuntimeConfig, SinkEvent};
use pubsub_engine_spi::{
    ControlMessage, Counter, Gauge, Metrics, PullState, StopMode, CHECKPOINTS_COMPLETED,
    CHECKPOINT_DURATION_MS, LAST_COMPLETED_EPOCH, MESSAGES_RECEIVED, RUNTIME_OPERATOR,
};

/// How often a process looks whether its alignment groups changed (each group's update
/// interval, `scan.watermark.alignment.update-interval`, is at least this).
const ALIGNMENT_CHECK: Duration = Duration::from_millis(50);

/// This process's tasks and their control channels.
#[derive(Default)]
pub(crate) struct LocalTasks {
    pub sources: Vec<(TaskKey, UnboundedSender<ControlMessage>)>,
    pub sinks: Vec<(TaskKey, UnboundedSender<SinkEvent>)>,
    /// Whether each source subtask can pull (the idle clock runs only while all can).
    pub pull_states: Vec<Arc<PullState>>,
    /// Cancels a task; used on abort for sinks and tasks still starting.
    pub task_aborts: BTreeMap<TaskKey, tokio::task::AbortHandle>,
}

pub(crate) struct ProcessCoordinator {
    process: usize,
    shared: JobShared,
    config: RuntimeConfig,
    metrics: Metrics,
    tasks: LocalTasks,
    describe: BTreeMap<String, String>,
    reports: Sender<Report>,
    waker: WorkerWaker,
    leader: Option<Leader>,
    started: BTreeSet<TaskKey>,
    ended: BTreeSet<TaskKey>,
    /// Source subtasks whose `on_close` returned: they released what they held.
    closed: BTreeSet<TaskKey>,
    /// The leader's `Stop` arrived: the final checkpoint committed.
    stop_received: bool,
    stop_requested: bool,
    pub summary: JobSummary,
    runtime: RuntimeMetrics,
}

/// The runtime's own metrics of this process (operator `runtime`, subtask = process).
struct RuntimeMetrics {
    completed: Counter,
    last_epoch: Gauge,
    duration_ms: Gauge,
    /// When each checkpoint's barrier reached this process; bounded: an entry leaves at
    /// the commit of its epoch or a later one, and the leader keeps few checkpoints open.
    barrier_at: BTreeMap<u64, std::time::Instant>,
}

impl ProcessCoordinator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        process: usize,
        shared: JobShared,
        config: RuntimeConfig,
        metrics: Metrics,
        tasks: LocalTasks,
        describe: BTreeMap<String, String>,
        reports: Sender<Report>,
        waker: WorkerWaker,
        leader: Option<Leader>,
        summary: JobSummary,
    ) -> Self {
        let runtime = RuntimeMetrics {
            completed: metrics.counter(CHECKPOINTS_COMPLETED, RUNTIME_OPERATOR, process),
            last_epoch: metrics.gauge(LAST_COMPLETED_EPOCH, RUNTIME_OPERATOR, process),
            duration_ms: metrics.gauge(CHECKPOINT_DURATION_MS, RUNTIME_OPERATOR, process),
            barrier_at: BTreeMap::new(),
        };
        runtime
            .last_epoch
            .set(summary.last_completed_epoch.unwrap_or(0));
        ProcessCoordinator {
            process,
            shared,
            config,
            metrics,
            tasks,
            describe,
            reports,
            waker,
            leader,
            started: BTreeSet::new(),
            ended: BTreeSet::new(),
            closed: BTreeSet::new(),
            stop_received: false,
            stop_requested: false,
            summary,
            runtime,
        }
    }

    fn report(&self, r: Report) {
        let _ = self.reports.send(r);
        self.waker.wake();
    }

    /// Broadcasts a leader decision (leader only) and wakes the worker that feeds it.
    fn decide(&self, c: Control) {
        if let Some(l) = &self.leader {
            l.decide(c);
            self.waker.wake();
        }
    }

    fn name(&self, operator_id: &str) -> String {
        self.describe
            .get(operator_id)
            .cloned()
            .unwrap_or_else(|| operator_id.to_string())
    }

    fn local_total(&self) -> usize {
        self.tasks.sources.len() + self.tasks.sinks.len()
    }

    fn done(&self) -> bool {
        self.stop_received
            && self.ended.len() == self.local_total()
            && self.leader.as_ref().is_none_or(|l| l.finished())
    }

    /// Sends this process's alignment minima to the leader when they changed and the
    /// smallest update interval of its members has passed since the last send.
    fn send_alignment(
        &self,
        sent: &mut (Option<BTreeMap<String, Option<i64>>>, tokio::time::Instant),
    ) {
        let a = &self.shared.alignment;
        let Some(every) = a.update_interval() else {
            return;
        };
        let now = tokio::time::Instant::now();
        if sent.0.is_some() && now < sent.1 + every {
            return;
        }
        let local = a.local();
        if sent.0.as_ref() != Some(&local) {
            self.report(Report::Alignment {
                process: self.process,
                groups: local.clone(),
            });
            *sent = (Some(local), now);
        }
    }

    fn status(&self) -> Report {
        let started = self
            .tasks
            .sources
            .iter()
            .all(|(k, _)| self.started.contains(k));
        Report::Status {
            process: self.process,
            received: self.metrics.total(MESSAGES_RECEIVED),
            idle_capable: started && self.tasks.pull_states.iter().all(|p| p.is_idle_capable()),
            pending_acks: self.metrics.gauge_total(pubsub_engine_spi::PENDING_ACKS),
        }
    }

    /// Runs until this process is done (the leader's `Stop` arrived and every local task
    /// ended; on the leader, every task of the cluster ended) or the job fails.
    pub async fn drive(
        &mut self,
        mut events: UnboundedReceiver<CoordEvent>,
        mut decisions: UnboundedReceiver<Control>,
        mut leader_reports: Option<UnboundedReceiver<Report>>,
        stop: StopHandle,
    ) -> anyhow::Result<()> {
        let interval = self
            .config
            .checkpoint_interval
            .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let status_every = self
            .config
            .stop_when_idle
            .map_or(Duration::from_millis(500), |d| {
                (d / 4).clamp(Duration::from_millis(50), Duration::from_millis(500))
            });
        let mut status_tick = tokio::time::interval(status_every);
        let mut watchdog = tokio::time::interval(Duration::from_millis(250));
        // Alignment groups: checked this often, sent once per update interval if changed.
        let mut alignment_tick = tokio::time::interval(ALIGNMENT_CHECK);
        alignment_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut alignment_sent: (Option<BTreeMap<String, Option<i64>>>, tokio::time::Instant) =
            (None, tokio::time::Instant::now());
        let leads = self.leader.is_some();
        // The leader's checkpoint write in flight: awaited here among the other events,
        // never inline, so a store that hangs cannot stall signals or the watchdog.
        let mut writing: Option<CheckpointWrite> = None;

        let outcome: anyhow::Result<()> = loop {
            if writing.is_none() {
                writing = self.leader.as_mut().and_then(|l| l.start_write());
            }
            if self.done() {
                break Ok(());
            }
            let step: anyhow::Result<()> = tokio::select! {
                _ = stop.abort.notified() => {
                    Err(anyhow!("aborted by a second stop signal: nothing more is committed; every held message is released for redelivery"))
                }
                _ = stop.stop.notified(), if !self.stop_requested => {
                    self.stop_requested = true;
                    self.report(Report::StopRequested { process: self.process });
                    Ok(())
                }
                _ = ticker.tick(), if leads => {
                    if let Some(l) = self.leader.as_mut() {
                        l.tick();
                    }
                    Ok(())
                }
                _ = status_tick.tick() => {
                    self.report(self.status());
                    match self.leader.as_mut() {
                        Some(l) => l.idle_check(),
                        None => Ok(()),
                    }
                }
                _ = alignment_tick.tick() => {
                    self.send_alignment(&mut alignment_sent);
                    Ok(())
                }
                _ = watchdog.tick(), if leads => {
                    match self.leader.as_mut() {
                        Some(l) => l.watchdog(),
                        None => Ok(()),
                    }
                }
                ev = events.recv() => match ev {
                    Some(ev) => self.on_event(ev),
                    None => Err(anyhow!("every task and worker ended unexpectedly")),
                },
                c = decisions.recv() => match c {
                    Some(c) => self.on_decision(c),
                    None => Err(self.why_closed(&mut events, "the leader's decisions").await),
                },
                r = recv_opt(&mut leader_reports) => match r {
                    Some(r) => match self.leader.as_mut() {
                        Some(l) => l.on_report(r),
                        None => Ok(()),
                    },
                    None => Err(self.why_closed(&mut events, "reports").await),
                },
                (epoch, outcome) = write_done(&mut writing) => {
                    writing = None;
                    match self.leader.as_mut() {
                        Some(l) => l.written(epoch, outcome).map(|()| {
                            tracing::info!(
                                epoch,
                                read = self.metrics.total(MESSAGES_RECEIVED),
                                "checkpoint {epoch} completed"
                            );
                        }),
                        None => Ok(()),
                    }
                }
            };
            if let Err(e) = step {
                break Err(e);
            }
            // The leader may have decided something: wake the worker that broadcasts it.
            self.waker.wake();
        };
        if let Some(w) = writing.take() {
            // Failed or aborted meanwhile: the checkpoint is not committed either way.
            w.task.abort();
        }
        if let Err(e) = &outcome {
            tracing::error!("job failed: {e:#}");
            // Tell everyone: the leader decides an abort; another process reports its
            // failure to the leader, which then decides it.
            match self.leader.as_ref() {
                Some(_) => self.decide(Control::Abort {
                    reason: format!("{e:#}"),
                }),
                None => self.report(Report::Failed {
                    process: self.process,
                    error: format!("{e:#}"),
                }),
            }
            self.abort(&mut events).await;
        }
        outcome
    }

    /// A control channel closed because a Timely worker ended (usually a panic on a dead
    /// peer's socket): report that failure, which arrives on `events` right after.
    async fn why_closed(
        &mut self,
        events: &mut UnboundedReceiver<CoordEvent>,
        what: &str,
    ) -> anyhow::Error {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, events.recv()).await {
            if let Err(e) = self.on_event(ev) {
                return e;
            }
        }
        anyhow!("the Timely workers stopped delivering {what}")
    }

    fn on_event(&mut self, ev: CoordEvent) -> anyhow::Result<()> {
        match ev {
            CoordEvent::TaskStarted {
                operator_id,
                subtask,
            } => {
                self.started.insert((operator_id.clone(), subtask));
                self.report(Report::Started {
                    operator_id,
                    subtask,
                });
            }
            CoordEvent::SourceSnapshot {
                operator_id,
                subtask,
                epoch,
                state,
            } => {
                let state = serde_json::to_string(&state)?;
                self.report(Report::Snapshot {
                    operator_id,
                    subtask,
                    epoch,
                    through_end: false,
                    state,
                });
            }
            CoordEvent::WindowSnapshot {
                operator_id,
                subtask,
                epoch,
                through_end,
                state,
            } => {
                self.report(Report::Snapshot {
                    operator_id,
                    subtask,
                    epoch,
                    through_end,
                    state,
                });
            }
            CoordEvent::Frontier(f) => {
                if let Some(l) = self.leader.as_mut() {
                    l.on_frontier(f);
                }
            }
            CoordEvent::TaskFailed {
                operator_id,
                subtask,
                error,
                permanent,
            } => {
                self.ended.insert((operator_id.clone(), subtask));
                // Timely's network threads panic when a peer's socket closes; the
                // workers then find their queues poisoned.
                if super::peer_panic::is_cascade(&error) {
                    // The panic's own text (`MergeQueue poisoned.`) says nothing to a
                    // user: the peer's loss is the cause, logged where it was seen.
                    tracing::debug!("a Timely worker panicked after a peer was lost: {error}");
                    return Err(anyhow!(
                        "lost the connection to another process of the cluster (it failed or was killed); nothing more is acknowledged"
                    ));
                }
                let e = anyhow!(
                    "{} subtask {subtask} failed: {error}",
                    self.name(&operator_id)
                );
                // A configuration error found when a task starts, or a failure any restart
                // repeats, ends the run like one found when the job is prepared: exit 2.
                return Err(if permanent {
                    pubsub_engine_spi::PermanentError::wrap(e)
                } else {
                    e
                });
            }
            CoordEvent::TaskFinished {
                operator_id,
                subtask,
            } => {
                self.ended.insert((operator_id.clone(), subtask));
                self.report(Report::Finished {
                    operator_id,
                    subtask,
                });
            }
            CoordEvent::TaskClosed {
                operator_id,
                subtask,
            } => {
                self.closed.insert((operator_id, subtask));
            }
            CoordEvent::EndOfInput {
                operator_id,
                subtask,
            } => self.report(Report::EndOfInput {
                operator_id,
                subtask,
            }),
        }
        Ok(())
    }

    fn on_decision(&mut self, c: Control) -> anyhow::Result<()> {
        match c {
            Control::Hello { restored_epoch } => {
                if restored_epoch != self.summary.restored_epoch {
                    let says = |e: Option<u64>| {
                        e.map_or("no checkpoint".to_string(), |e| format!("checkpoint {e}"))
                    };
                    return Err(anyhow!(
                        "process {} restored {} but process 0 restored {}: every process of a cluster must use the same --state-dir",
                        self.process,
                        says(self.summary.restored_epoch),
                        says(restored_epoch)
                    ));
                }
            }
            Control::Checkpoint {
                epoch,
                min_epoch,
                timestamp_ms,
                then_stop,
            } => {
                self.runtime
                    .barrier_at
                    .insert(epoch, std::time::Instant::now());
                let b = barrier(epoch, min_epoch, timestamp_ms, then_stop);
                for (_, tx) in &self.tasks.sources {
                    let _ = tx.send(ControlMessage::Checkpoint(b));
                }
            }
            Control::Commit { epoch } => {
                self.summary.checkpoints_completed += 1;
                self.summary.last_completed_epoch = Some(epoch);
                self.runtime.committed(epoch);
                for (_, tx) in &self.tasks.sources {
                    let _ = tx.send(ControlMessage::Commit { epoch });
                }
                for (_, tx) in &self.tasks.sinks {
                    let _ = tx.send(SinkEvent::Commit(epoch));
                }
                if self.leader.is_none() {
                    tracing::info!(epoch, "checkpoint {epoch} committed");
                }
            }
            Control::Stop => {
                self.stop_received = true;
                for (_, tx) in &self.tasks.sources {
                    let _ = tx.send(ControlMessage::Stop {
                        mode: StopMode::Graceful,
                    });
                }
                for (_, tx) in &self.tasks.sinks {
                    let _ = tx.send(SinkEvent::Close);
                }
            }
            Control::Alignment { groups } => self.shared.alignment.set_minima(groups),
            Control::Abort { reason } => {
                if self.leader.is_none() {
                    return Err(anyhow!("the cluster is stopping: {reason}"));
                }
            }
        }
        Ok(())
    }

    /// Stops every local task at once (sources release what they hold) and waits,
    /// bounded, for them to end.
    async fn abort(&mut self, events: &mut UnboundedReceiver<CoordEvent>) {
        self.shared.abort();
        self.waker.wake();
        for (_, tx) in &self.tasks.sources {
            let _ = tx.send(ControlMessage::Stop {
                mode: StopMode::Immediate,
            });
        }
        for (_, tx) in &self.tasks.sinks {
            let _ = tx.send(SinkEvent::Close);
        }
        // Nothing more will be committed, so a sink has nothing left to finish: cancel it
        // at once (it may be stuck on an unresponsive endpoint). So is a task still in
        // `on_start`: it reads no control message and holds nothing. Started sources are
        // left to release (nack) what they hold; their close is bounded.
        let sinks: BTreeSet<TaskKey> = self.tasks.sinks.iter().map(|(k, _)| k.clone()).collect();
        let mut releasing = BTreeSet::new();
        for (key, handle) in &self.tasks.task_aborts {
            let cancel = sinks.contains(key) || !self.started.contains(key);
            if cancel && !self.ended.contains(key) {
                handle.abort();
                self.ended.insert(key.clone());
            } else if !cancel && !self.closed.contains(key) {
                releasing.insert(key.clone());
            }
        }
        // Wait for each started source's `on_close`, not for its end of `run`: a source
        // whose `collect` failed because the dataflow shut down reports that failure
        // first and releases after it.
        // Each source bounds its own release (the Pub/Sub source by `scan.shutdown-timeout`,
        // 5 s by default); this is only the backstop. A shorter fixed cap here cancelled
        // sources whose nacks were still being sent (issue 16, finding 7).
        let deadline = tokio::time::Instant::now() + self.config.shutdown_timeout;
        while !releasing.is_empty() {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(CoordEvent::TaskClosed {
                    operator_id,
                    subtask,
                })) => {
                    let key = (operator_id, subtask);
                    releasing.remove(&key);
                    self.ended.insert(key.clone());
                    self.closed.insert(key);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

impl RuntimeMetrics {
    /// Checkpoint `epoch` committed: count it and time it from its barrier.
    fn committed(&mut self, epoch: u64) {
        self.completed.add(1);
        self.last_epoch.set(epoch);
        if let Some(at) = self.barrier_at.get(&epoch) {
            self.duration_ms.set(at.elapsed().as_millis() as u64);
        }
        // A commit covers every earlier epoch too.
        self.barrier_at = self.barrier_at.split_off(&(epoch + 1));
    }
}

/// The outcome of the checkpoint write in flight; pending forever when there is none.
async fn write_done(
    w: &mut Option<CheckpointWrite>,
) -> (u64, Result<anyhow::Result<()>, tokio::task::JoinError>) {
    match w {
        Some(w) => (w.epoch, (&mut w.task).await),
        None => std::future::pending().await,
    }
}

async fn recv_opt<T>(rx: &mut Option<UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
