//! The leader (process 0's coordinator role): decides when each checkpoint starts, learns
//! from every process's reports and from the global sinks' frontier when it is complete,
//! writes its metadata, and only then broadcasts `Commit` (SPEC 2.1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;
use std::time::{Instant, SystemTime};

use anyhow::{anyhow, Context};

use super::control::{now_ms, Control, Report};
use super::state::{CheckpointMetadata, CheckpointStore};
use super::RuntimeConfig;
use pubsub_engine_spi::{CheckpointBarrier, OperatorState};

pub(crate) type TaskKey = (String, usize);

/// What every process reported last (`Report::Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Status {
    received: u64,
    idle_capable: bool,
    pending_acks: u64,
}

/// Everything that changes while a checkpoint makes progress; a graceful stop's deadline
/// is extended whenever it changes.
#[derive(PartialEq, Eq, Clone)]
struct Progress {
    frontier: Option<Option<u64>>,
    snapshots: usize,
    completed: u64,
    received: u64,
    ended: usize,
}

pub(crate) struct Leader {
    config: RuntimeConfig,
    store: CheckpointStore,
    decisions: Sender<Control>,
    processes: usize,
    /// Every source and sink subtask of the cluster (global subtask indexes).
    sources: BTreeSet<TaskKey>,
    sinks: BTreeSet<TaskKey>,
    /// Every window operator subtask: each snapshots every checkpoint, as sources do.
    windows: BTreeSet<TaskKey>,
    /// A window subtask whose input ended: its last state, valid from that epoch on.
    final_states: BTreeMap<TaskKey, (u64, OperatorState)>,
    /// Operator id -> what it is, for errors (`sink table 'b' of q1 (INSERT INTO ...)`).
    describe: BTreeMap<String, String>,
    started: BTreeSet<TaskKey>,
    ended: BTreeSet<TaskKey>,
    end_of_input: BTreeSet<TaskKey>,
    /// Triggered, not yet completed epochs: when each was triggered, and the source
    /// snapshots received so far.
    pending: BTreeMap<u64, (Instant, BTreeMap<TaskKey, OperatorState>)>,
    /// Last reported sinks' frontier: `None` before the first report, `Some(None)` when done.
    frontier: Option<Option<u64>>,
    next_epoch: u64,
    final_epoch: Option<u64>,
    last_completed: Option<u64>,
    completed: u64,
    statuses: BTreeMap<usize, Status>,
    /// Set once a graceful stop began: the last time it made progress.
    stopping: Option<(Progress, Instant)>,
    /// Total received when it last changed, and when.
    last_received: (u64, Instant),
    /// The first epoch triggered after `last_received` changed: the idle stop waits until
    /// it completed, i.e. until every row read by then is written and committed (0: none).
    caught_up_at: u64,
    /// Whether the idle stop already said it waits for the pipeline to catch up (once per
    /// quiet spell).
    idle_wait_logged: bool,
    /// Every source reached the end of its input before every task had started: stop
    /// as soon as they have (a bounded source can finish before a slow sink connects).
    stop_once_started: Option<String>,
    /// The idle stop waits until then (after an unclean stop of the previous run).
    idle_not_before: Option<Instant>,
    /// The checkpoint whose metadata is being written, and when its barrier was sent:
    /// the write is bounded by the checkpoint timeout like the rest of the checkpoint.
    writing: Option<(u64, Instant)>,
    /// When the last progress line of a graceful stop was logged (rate limit).
    stop_progress_logged: Option<Instant>,
    /// Each process's alignment groups, and the minima last broadcast.
    alignment: pubsub_engine_spi::alignment::GroupMinima,
}

/// A checkpoint write in flight ([`Leader::start_write`]): the event loop selects on it,
/// so signals, reports and the checkpoint timeout are serviced while it runs.
pub(crate) struct CheckpointWrite {
    pub epoch: u64,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Logged (INFO) while a graceful stop makes progress, at most once per second: `cluster`
/// extends its own stop deadline on each such line (see cli/src/cluster.rs).
pub const STOP_PROGRESS_LOG: &str = "graceful stop in progress";

impl Leader {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: RuntimeConfig,
        store: CheckpointStore,
        decisions: Sender<Control>,
        processes: usize,
        sources: BTreeSet<TaskKey>,
        sinks: BTreeSet<TaskKey>,
        windows: BTreeSet<TaskKey>,
        describe: BTreeMap<String, String>,
        restored_epoch: Option<u64>,
    ) -> Self {
        let _ = decisions.send(Control::Hello { restored_epoch });
        Leader {
            config,
            store,
            decisions,
            processes,
            sources,
            sinks,
            windows,
            final_states: BTreeMap::new(),
            describe,
            started: BTreeSet::new(),
            ended: BTreeSet::new(),
            end_of_input: BTreeSet::new(),
            pending: BTreeMap::new(),
            frontier: None,
            next_epoch: restored_epoch.map_or(1, |e| e + 1),
            final_epoch: None,
            last_completed: restored_epoch,
            completed: 0,
            statuses: BTreeMap::new(),
            stopping: None,
            last_received: (0, Instant::now()),
            caught_up_at: 0,
            idle_wait_logged: false,
            stop_once_started: None,
            idle_not_before: None,
            writing: None,
            stop_progress_logged: None,
            alignment: Default::default(),
        }
    }

    /// Broadcasts a decision to every process (including this one).
    pub fn decide(&self, c: Control) {
        let _ = self.decisions.send(c);
    }

    pub fn name(&self, operator_id: &str) -> String {
        self.describe
            .get(operator_id)
            .cloned()
            .unwrap_or_else(|| operator_id.to_string())
    }

    fn all_started(&self) -> bool {
        self.sources
            .iter()
            .chain(self.sinks.iter())
            .all(|k| self.started.contains(k))
    }

    fn progress(&self) -> Progress {
        Progress {
            frontier: self.frontier,
            snapshots: self.pending.values().map(|(_, s)| s.len()).sum(),
            completed: self.completed,
            received: self.statuses.values().map(|s| s.received).sum(),
            ended: self.ended.len(),
        }
    }

    /// The job is done: the final checkpoint committed and every task of the cluster ended.
    pub fn finished(&self) -> bool {
        self.final_epoch.is_some()
            && self.pending.is_empty()
            && self.writing.is_none()
            && self.ended.len() == self.sources.len() + self.sinks.len()
    }

    /// Periodic barrier: skipped while 2 checkpoints are still in progress.
    pub fn tick(&mut self) {
        if self.final_epoch.is_some() {
            return;
        }
        if self.pending.len() < 2 {
            self.trigger(false);
        } else {
            tracing::debug!(
                "checkpoint skipped: {} still in progress",
                self.pending.len()
            );
        }
    }

    /// Starts a graceful stop (final checkpoint, commit, stop). During start-up (before
    /// every source and sink of the cluster connected) it fails the job instead: nothing
    /// was read yet.
    pub fn request_stop(&mut self, why: &str) -> anyhow::Result<()> {
        if self.final_epoch.is_some() {
            return Ok(());
        }
        if !self.all_started() {
            return Err(anyhow!(
                "stopped during start-up (not every source and sink had connected): nothing was acknowledged"
            ));
        }
        tracing::info!("{why}: taking a final checkpoint");
        self.trigger(true);
        self.stopping = Some((self.progress(), Instant::now()));
        Ok(())
    }

    /// Sends barrier `next_epoch` to every source subtask of the cluster.
    fn trigger(&mut self, then_stop: bool) {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let barrier = CheckpointBarrier {
            epoch,
            min_epoch: self.last_completed.map_or(1, |e| e + 1),
            timestamp: SystemTime::now(),
            then_stop,
        };
        tracing::debug!(epoch, then_stop, "checkpoint triggered");
        let finals = self
            .final_states
            .iter()
            .filter(|(_, (from, _))| *from <= epoch)
            .map(|(k, (_, s))| (k.clone(), s.clone()))
            .collect();
        self.pending.insert(epoch, (Instant::now(), finals));
        if then_stop {
            self.final_epoch = Some(epoch);
        }
        self.decide(Control::checkpoint(&barrier));
    }

    pub fn on_frontier(&mut self, f: Option<u64>) {
        self.frontier = Some(f);
    }

    /// Applies one process's report. Errors fail the job (a failure anywhere).
    pub fn on_report(&mut self, report: Report) -> anyhow::Result<()> {
        match report {
            Report::Started {
                operator_id,
                subtask,
            } => {
                self.started.insert((operator_id, subtask));
                if self.all_started() {
                    if let Some(why) = self.stop_once_started.take() {
                        self.request_stop(&why)?;
                    }
                }
            }
            Report::Snapshot {
                operator_id,
                subtask,
                epoch,
                through_end,
                state,
            } => {
                let state: OperatorState = serde_json::from_str(&state).with_context(|| {
                    format!("snapshot of {operator_id} subtask {subtask} is not valid JSON")
                })?;
                let key = (operator_id, subtask);
                if through_end {
                    // The subtask's input ended: this state holds for every later epoch.
                    for (_, (_, p)) in self.pending.range_mut(epoch..) {
                        p.entry(key.clone()).or_insert_with(|| state.clone());
                    }
                    self.final_states.insert(key, (epoch, state));
                } else if let Some((_, p)) = self.pending.get_mut(&epoch) {
                    p.insert(key, state);
                }
            }
            Report::Finished {
                operator_id,
                subtask,
            } => {
                if self.final_epoch.is_none() {
                    tracing::warn!(%operator_id, subtask, "task finished before the job stopped");
                }
                self.ended.insert((operator_id, subtask));
            }
            Report::EndOfInput {
                operator_id,
                subtask,
            } => {
                self.end_of_input.insert((operator_id, subtask));
                if self.final_epoch.is_none()
                    && self.sources.iter().all(|k| self.end_of_input.contains(k))
                {
                    let why = "every source reached the end of its input".to_string();
                    if self.all_started() {
                        self.request_stop(&why)?;
                    } else {
                        self.stop_once_started = Some(why);
                    }
                }
            }
            Report::Failed { process, error } => {
                return Err(if self.processes > 1 {
                    anyhow!("process {process}: {error}")
                } else {
                    anyhow!("{error}")
                });
            }
            Report::StopRequested { process } => {
                let why = if self.processes > 1 {
                    format!("stop requested on process {process}")
                } else {
                    "stop requested".to_string()
                };
                self.request_stop(&why)?;
            }
            Report::Status {
                process,
                received,
                idle_capable,
                pending_acks,
            } => {
                self.statuses.insert(
                    process,
                    Status {
                        received,
                        idle_capable,
                        pending_acks,
                    },
                );
            }
            Report::Alignment { process, groups } => {
                if let Some(groups) = self.alignment.on_report(process, groups) {
                    self.decide(Control::Alignment { groups });
                }
            }
        }
        Ok(())
    }

    /// `--stop-when-idle` does not stop before `t` (see
    /// `coordinator::hold_idle_after_unclean_stop`).
    pub fn hold_idle_until(&mut self, t: Instant) {
        self.idle_not_before = Some(t);
    }

    /// `--stop-when-idle`: stops once no process received a message for the configured
    /// time while every source subtask of the cluster could pull, and the pipeline is
    /// caught up end to end (decision 0032): no source subtask holds a message
    /// unacknowledged, and the first checkpoint triggered after the last message arrived
    /// has completed (every row read by then was confirmed by its sinks and committed).
    /// Until then it waits, saying so once.
    pub fn idle_check(&mut self) -> anyhow::Result<()> {
        let Some(idle_for) = self.config.stop_when_idle else {
            return Ok(());
        };
        // Messages a dead predecessor held are still leased to it.
        if self.idle_not_before.is_some_and(|t| Instant::now() < t) {
            self.last_received = (self.last_received.0, Instant::now());
            return Ok(());
        }
        if self.final_epoch.is_some() {
            return Ok(());
        }
        let received: u64 = self.statuses.values().map(|s| s.received).sum();
        // Only time in which every source could pull counts (issue 5): time held by flow
        // control, back-pressure, a reconnect or start-up does not.
        let all_can_pull = self.all_started()
            && self.statuses.len() == self.processes
            && self.statuses.values().all(|s| s.idle_capable);
        if received != self.last_received.0 {
            self.caught_up_at = self.next_epoch;
            self.idle_wait_logged = false;
        }
        if received != self.last_received.0 || !all_can_pull {
            self.last_received = (received, Instant::now());
            return Ok(());
        }
        if self.last_received.1.elapsed() < idle_for {
            return Ok(());
        }
        let quiet = format!("no message received for {idle_for:?} while every source could pull");
        match self.behind() {
            None => self.request_stop(&quiet),
            Some(behind) => {
                // The checkpoint that would catch up is not yet due: take it now rather
                // than a whole interval later.
                if self.next_epoch <= self.caught_up_at && self.pending.len() < 2 {
                    self.trigger(false);
                }
                if !self.idle_wait_logged {
                    self.idle_wait_logged = true;
                    tracing::info!(
                        "{quiet}, but the pipeline is not caught up: {behind}; the idle stop waits until it is"
                    );
                }
                Ok(())
            }
        }
    }

    /// What keeps the pipeline from being caught up end to end, if anything.
    fn behind(&self) -> Option<String> {
        let pending: u64 = self.statuses.values().map(|s| s.pending_acks).sum();
        let committed =
            self.caught_up_at == 0 || self.last_completed.is_some_and(|c| c >= self.caught_up_at);
        match (pending, committed) {
            (0, true) => None,
            (0, false) => Some(format!(
                "checkpoint {} (the first after the last message arrived) is not complete: a row read is not yet written by its sink or not committed",
                self.caught_up_at
            )),
            (n, _) => Some(format!(
                "{n} messages received are not yet acknowledged (their rows are not yet written by every sink, or their checkpoint not committed)"
            )),
        }
    }

    /// Fails a checkpoint that takes longer than `--checkpoint-timeout`, and a graceful
    /// stop that makes no progress for the shutdown timeout.
    pub fn watchdog(&mut self) -> anyhow::Result<()> {
        if let Some((epoch, at)) = self.writing {
            if at.elapsed() >= self.config.checkpoint_timeout {
                return Err(anyhow!(
                    "checkpoint {epoch} did not complete within --checkpoint-timeout {:?}: the write of its metadata to the checkpoint store {} has not returned",
                    self.config.checkpoint_timeout,
                    self.store.describe()
                ));
            }
        }
        if let Some((&epoch, (at, _))) = self.pending.first_key_value() {
            if at.elapsed() >= self.config.checkpoint_timeout {
                return Err(anyhow!(
                    "checkpoint {epoch} did not complete within --checkpoint-timeout {:?}: still waiting for {}",
                    self.config.checkpoint_timeout,
                    self.waiting_for(epoch)
                ));
            }
        }
        let now = self.progress();
        let writing = self.writing;
        if let Some((last, since)) = &mut self.stopping {
            if now != *last {
                *last = now;
                *since = Instant::now();
                let due = self
                    .stop_progress_logged
                    .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
                if due {
                    self.stop_progress_logged = Some(Instant::now());
                    tracing::info!(
                        "{STOP_PROGRESS_LOG}: the final checkpoint advanced (the stop's deadline of {:?} without progress starts again)",
                        self.config.shutdown_timeout
                    );
                }
            } else if since.elapsed() >= self.config.shutdown_timeout {
                let epoch = self.final_epoch.unwrap_or_default();
                let waiting = self.pending.keys().next().copied();
                return Err(anyhow!(
                    "graceful stop made no progress for {:?}: {}",
                    self.config.shutdown_timeout,
                    match (waiting, writing) {
                        (Some(e), _) => format!(
                            "final checkpoint {epoch} is still waiting for {}",
                            self.waiting_for(e)
                        ),
                        (None, Some((e, _))) => format!(
                            "checkpoint {e} is still being written to the checkpoint store {}",
                            self.store.describe()
                        ),
                        (None, None) => format!(
                            "final checkpoint {epoch} committed, still waiting for {} to end",
                            self.unended()
                        ),
                    }
                ));
            }
        }
        Ok(())
    }

    fn unended(&self) -> String {
        let names: BTreeSet<String> = self
            .sources
            .iter()
            .chain(self.sinks.iter())
            .filter(|k| !self.ended.contains(*k))
            .map(|(op, i)| format!("{} subtask {i}", self.name(op)))
            .collect();
        names.into_iter().collect::<Vec<_>>().join(", ")
    }

    /// What a pending checkpoint still waits for, for timeout errors.
    fn waiting_for(&self, epoch: u64) -> String {
        let snaps = self.pending.get(&epoch).map_or(0, |(_, s)| s.len());
        if snaps < self.sources.len() + self.windows.len() {
            let missing: Vec<String> = self
                .sources
                .iter()
                .chain(self.windows.iter())
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
            let sinks: BTreeSet<String> = self.sinks.iter().map(|(op, _)| self.name(op)).collect();
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

    /// Starts writing the oldest pending checkpoint once the sinks' frontier has passed
    /// it and every source subtask has snapshotted it, unless a write is in flight
    /// (checkpoints are written one at a time, in order). The returned task runs the
    /// store's write; pass its outcome to [`written`](Self::written).
    pub fn start_write(&mut self) -> Option<CheckpointWrite> {
        if self.writing.is_some() {
            return None;
        }
        let (&epoch, (_, snaps)) = self.pending.first_key_value()?;
        let passed = match self.frontier {
            Some(None) => true,
            Some(Some(f)) => f > epoch,
            None => false,
        };
        if !passed || snaps.len() < self.sources.len() + self.windows.len() {
            return None;
        }
        let (triggered, snaps) = self.pending.remove(&epoch)?;
        let mut operators: BTreeMap<String, BTreeMap<usize, OperatorState>> = BTreeMap::new();
        for ((op, subtask), state) in snaps {
            operators.entry(op).or_default().insert(subtask, state);
        }
        let meta = CheckpointMetadata {
            version: 1,
            job_id: self.config.job_id.clone(),
            epoch,
            completed_at_ms: now_ms(),
            operators,
        };
        self.writing = Some((epoch, triggered));
        let store = self.store.clone();
        let task = tokio::spawn(async move {
            store
                .write(&meta)
                .await
                .with_context(|| format!("checkpoint {epoch} could not be written"))
        });
        Some(CheckpointWrite { epoch, task })
    }

    /// The write of checkpoint `epoch` ended: on success the checkpoint is complete, so
    /// broadcast `Commit` (and `Stop` after the final one). Errors: the write failed.
    pub fn written(
        &mut self,
        epoch: u64,
        outcome: Result<anyhow::Result<()>, tokio::task::JoinError>,
    ) -> anyhow::Result<()> {
        self.writing = None;
        match outcome {
            Ok(result) => result?,
            Err(e) => return Err(anyhow!("checkpoint {epoch} could not be written: {e}")),
        }
        self.completed += 1;
        self.last_completed = Some(epoch);
        self.decide(Control::Commit { epoch });
        if self.final_epoch == Some(epoch) {
            self.decide(Control::Stop);
        }
        Ok(())
    }
}
