//! What travels through Timely besides rows: `Control` decisions made by process 0 (the
//! leader) and broadcast to every worker, and `Report`s from every process to the leader.
//! Both ride a small control dataflow next to the data dataflow, so a cluster needs no
//! network layer of its own (SPEC 2.1, issue 6).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use pubsub_engine_spi::CheckpointBarrier;

/// A decision of the leader, delivered to every process in the order it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Control {
    /// Sent first: the checkpoint the leader restored (`None`: a fresh start). A process
    /// that restored another one fails: the processes read different state.
    Hello { restored_epoch: Option<u64> },
    /// Close epoch `epoch` at every source subtask.
    Checkpoint {
        epoch: u64,
        min_epoch: u64,
        /// Milliseconds since the Unix epoch when the leader triggered it.
        timestamp_ms: u64,
        then_stop: bool,
    },
    /// Checkpoint `epoch` is complete and its metadata durable: acknowledge up to it.
    Commit { epoch: u64 },
    /// The final checkpoint committed: stop sources and close sinks.
    Stop,
    /// Per alignment group, each process's lowest watermark of its members that are not
    /// idle (`pubsub_engine_spi::alignment`); a process with none is absent.
    Alignment {
        groups: std::collections::BTreeMap<String, std::collections::BTreeMap<usize, i64>>,
    },
    /// The job failed: stop at once, acknowledge nothing more, exit non-zero.
    Abort { reason: String },
}

impl Control {
    pub fn checkpoint(barrier: &CheckpointBarrier) -> Self {
        Control::Checkpoint {
            epoch: barrier.epoch,
            min_epoch: barrier.min_epoch,
            timestamp_ms: barrier
                .timestamp
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            then_stop: barrier.then_stop,
        }
    }
}

/// Rebuilds the barrier a `Control::Checkpoint` carries.
pub(crate) fn barrier(
    epoch: u64,
    min_epoch: u64,
    timestamp_ms: u64,
    then_stop: bool,
) -> CheckpointBarrier {
    CheckpointBarrier {
        epoch,
        min_epoch,
        timestamp: UNIX_EPOCH + Duration::from_millis(timestamp_ms),
        then_stop,
    }
}

/// From a process to the leader. Subtask indexes are global (`process * workers + i`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Report {
    Started {
        operator_id: String,
        subtask: usize,
    },
    /// A source (or window) subtask closed `epoch`; `state` is its operator state as JSON
    /// text (Timely's bincode cannot carry `serde_json::Value`). `through_end`: the
    /// subtask's input ended, so the state holds for `epoch` and every later one.
    Snapshot {
        operator_id: String,
        subtask: usize,
        epoch: u64,
        through_end: bool,
        state: String,
    },
    Finished {
        operator_id: String,
        subtask: usize,
    },
    EndOfInput {
        operator_id: String,
        subtask: usize,
    },
    /// Something failed in `process`; the job must stop everywhere.
    Failed {
        process: usize,
        error: String,
    },
    /// `process` got SIGINT/SIGTERM (or was asked to stop).
    StopRequested {
        process: usize,
    },
    /// For `--stop-when-idle`: messages received so far in `process`, whether every
    /// source subtask there has started and can pull, and how many messages its source
    /// subtasks hold unacknowledged (gauge `pending_acks`; 0 where none reports it).
    Status {
        process: usize,
        received: u64,
        idle_capable: bool,
        pending_acks: u64,
    },
    /// The lowest watermark of each alignment group's members in `process` (`None`:
    /// none has one), sent when it changed, at most once per update interval.
    Alignment {
        process: usize,
        groups: std::collections::BTreeMap<String, Option<i64>>,
    },
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
