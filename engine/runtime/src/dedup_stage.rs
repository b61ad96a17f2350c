//! `scan.dedup.*` in a cluster (decision 0046): a query's source rows are routed by the
//! hash of their record's id, so every copy of a record reaches the one worker owning
//! it, and that worker's sink operator drops the rows of a message whose id another
//! message put in.
//!
//! Rows are checked as they arrive, in any epoch order (no row waits for an earlier
//! epoch): each id is tagged with the epoch that put it in and, while that epoch is
//! open, the message. The snapshot of epoch `e` holds the ids of epochs `<= e` only, so a
//! checkpoint holds exactly the ids of the rows it covers: a row written in a later epoch
//! than a copy it dropped is replayed, not taken for a copy, if that later epoch never
//! completes. The other rows of the message that put an id in (same message, same epoch)
//! are kept; a redelivery of it in a later epoch is a copy, as one process has it. A
//! message without an id (NULL key) is never a copy.

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch, TimestampNanosecondArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, TimeUnit};
use tokio::sync::mpsc::UnboundedSender;

use super::CoordEvent;
use pubsub_engine_plan::DedupColumns;
use pubsub_engine_spi::dedup::{id_hash, id_of_row_key, owner_of, Check, SeenSet, STATE_KEY};
use pubsub_engine_spi::{Counter, OperatorState};

/// The operator id of query `query`'s deduplication of source table `table`
/// (`q0-dedup-clicks`): its snapshots and metrics.
pub(crate) fn stage_id(query: &str, table: &str) -> String {
    format!("{query}-dedup-{table}")
}

/// Whether operator id `id` is the deduplication of table `table` by any query. Every
/// query reading a table checks all its rows (before any WHERE), so each holds the same
/// ids: a restore takes them from all, whichever queries the pipeline has now, as one
/// process keeps one set per table.
pub(crate) fn is_stage_of(id: &str, table: &str) -> bool {
    id.split_once("-dedup-").is_some_and(|(q, t)| {
        t == table
            && q.strip_prefix('q')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// One worker's deduplication subtask of a query ([`stage_id`]).
pub(crate) struct DedupPlumbing {
    /// [`stage_id`]: its snapshots' operator id.
    pub id: String,
    /// The restored states to take the ids this worker owns from: every subtask's of
    /// every query's deduplication of the table ([`is_stage_of`]), and the source
    /// table's (a job that ran as one process before).
    pub restore: Vec<OperatorState>,
    pub columns: DedupColumns,
    /// `messages_deduplicated` and `messages_behind_dedup_window`, counted by the first
    /// query reading the table only (once per message: its row `#0`).
    pub counters: Option<(Counter, Counter)>,
    pub coordinator: UnboundedSender<CoordEvent>,
}

/// The hashes of the record ids of a batch's rows (`None` for a row without one).
fn hashes(batch: &RecordBatch, key: usize) -> anyhow::Result<Vec<Option<u128>>> {
    let column = batch.column(key);
    let keys = column.as_string_opt::<i32>().ok_or_else(|| {
        anyhow::anyhow!(
            "the deduplication key column is {}, not TEXT",
            column.data_type()
        )
    })?;
    Ok((0..keys.len())
        .map(|i| {
            (keys.is_valid(i) && !keys.value(i).is_empty())
                .then(|| id_hash(id_of_row_key(keys.value(i))))
        })
        .collect())
}

/// Splits `batch` by the worker of `peers` owning each row's record id; rows without one
/// stay on worker `own`. Order within a target is kept.
pub(crate) fn split_by_id(
    batch: &RecordBatch,
    key: usize,
    peers: u64,
    own: u64,
) -> anyhow::Result<Vec<(u64, RecordBatch)>> {
    let mut by_target: Vec<Vec<u32>> = vec![Vec::new(); peers as usize];
    for (row, h) in hashes(batch, key)?.into_iter().enumerate() {
        let target = h.map_or(own, |h| owner_of(h, peers));
        by_target[target as usize].push(row as u32);
    }
    super::route::parts(batch, by_target)
}

/// A query's deduplication on one worker, inside its sink operator.
pub(crate) struct DedupRun {
    plumbing: DedupPlumbing,
    subtask: usize,
    /// `None` once it failed (the job aborts).
    set: Option<SeenSet>,
    /// The first epoch not yet snapshotted.
    next: u64,
    ended: bool,
}

impl DedupRun {
    /// Restores the ids this worker (`subtask` of `peers`) owns; a state it cannot read
    /// fails the job, naming the stage.
    pub fn new(plumbing: DedupPlumbing, subtask: usize, peers: u64, start_epoch: u64) -> Self {
        let mut set = SeenSet::new(&plumbing.columns.spec);
        let restored = plumbing.restore.iter().try_for_each(|state| {
            let Some(ids) = state.values.get(STATE_KEY) else {
                return Ok(());
            };
            set.restore_owned(ids, |h| {
                (owner_of(h, peers) == subtask as u64).then_some(subtask)
            })
        });
        let mut run = DedupRun {
            plumbing,
            subtask,
            set: Some(set),
            next: start_epoch,
            ended: false,
        };
        run.plumbing.restore = Vec::new();
        if restored.is_ok() {
            tracing::info!(
                "{}: deduplicating behind the exchange by record id, {} ids restored for worker {subtask}",
                run.plumbing.id,
                run.set.as_ref().map_or(0, SeenSet::len)
            );
        }
        if let Err(e) = restored {
            run.fail(e.context(format!(
                "the deduplication ids of {} could not be restored",
                run.plumbing.id
            )));
        }
        run
    }

    /// Fails the job (the coordinator aborts it), naming this stage's error.
    pub fn fail(&mut self, e: anyhow::Error) {
        self.set = None;
        let _ = self.plumbing.coordinator.send(CoordEvent::TaskFailed {
            operator_id: self.plumbing.id.clone(),
            subtask: self.subtask,
            error: format!("{e:#}"),
            permanent: pubsub_engine_spi::restart_cannot_fix(&e),
        });
    }

    /// The rows of `batch` (source rows of epoch `epoch`) that are no copy; `None` once
    /// it failed (the job aborts).
    pub fn filter(&mut self, epoch: u64, batch: &RecordBatch) -> Option<RecordBatch> {
        match self.try_filter(epoch, batch) {
            Ok(b) => Some(b),
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    fn try_filter(&mut self, epoch: u64, batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
        let subtask = self.subtask;
        let Some(set) = self.set.as_mut() else {
            anyhow::bail!("the deduplication of {} failed", self.plumbing.id);
        };
        let c = &self.plumbing.columns;
        let hashes = hashes(batch, c.key)?;
        let published = batch.column(c.published);
        let published = match published.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, _) => published
                .as_any()
                .downcast_ref::<TimestampNanosecondArray>()
                .expect("a nanosecond timestamp"),
            other => anyhow::bail!("the deduplication publish time column is {other}"),
        };
        let keys = batch.column(c.key).as_string::<i32>();
        let messages = batch
            .column(c.message)
            .as_string_opt::<i32>()
            .ok_or_else(|| anyhow::anyhow!("the deduplication message column is not TEXT"))?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        for (row, h) in hashes.into_iter().enumerate() {
            let Some(h) = h else {
                keep.push(true);
                continue;
            };
            // The message's first row counts it (and is dropped with its message).
            let first_row = keys.value(row).ends_with("#0");
            let ms = published
                .is_valid(row)
                .then(|| published.value(row).div_euclid(1_000_000))
                .unwrap_or(i64::MIN);
            // Never 0 (0 is "unknown": restored ids, which every row is a copy of).
            let message = (id_hash(messages.value(row)) as u64) | 1;
            match set.check_hash(h, ms, subtask, epoch, message)? {
                Check::Duplicate => {
                    if let (true, Some((dropped, _))) = (first_row, &self.plumbing.counters) {
                        dropped.add(1);
                    }
                    keep.push(false);
                }
                Check::SameMessage => keep.push(true),
                Check::New { behind, .. } => {
                    if let (true, true, Some((_, late))) =
                        (behind, first_row, &self.plumbing.counters)
                    {
                        late.add(1);
                    }
                    keep.push(true);
                }
            }
        }
        if keep.iter().all(|k| *k) {
            return Ok(batch.clone());
        }
        Ok(filter_record_batch(batch, &BooleanArray::from(keep))?)
    }

    /// Snapshots every epoch the input frontier `f` passed (all of them once the input
    /// ended, `None`).
    pub fn step(&mut self, f: Option<u64>) {
        if self.ended {
            return;
        }
        match f {
            Some(f) => {
                // Once per epoch completed, not per activation.
                if let (true, Some(set)) = (self.next < f, self.set.as_mut()) {
                    set.close_epochs_before(f);
                }
                while self.next < f {
                    let e = self.next;
                    self.send(e, false, e);
                    self.next += 1;
                }
            }
            None => {
                self.send(self.next, true, u64::MAX);
                self.ended = true;
            }
        }
    }

    /// Sends the ids of epochs `<= through` as the snapshot of `epoch`.
    fn send(&mut self, epoch: u64, through_end: bool, through: u64) {
        let Some(set) = self.set.as_ref() else {
            return;
        };
        let mut state = OperatorState::default();
        state.values.insert(
            STATE_KEY.into(),
            set.snapshot_through(self.subtask, through),
        );
        let state = match serde_json::to_string(&state) {
            Ok(s) => s,
            Err(e) => {
                self.fail(
                    anyhow::Error::from(e)
                        .context(format!("the deduplication state of epoch {epoch}")),
                );
                return;
            }
        };
        let _ = self.plumbing.coordinator.send(CoordEvent::WindowSnapshot {
            operator_id: self.plumbing.id.clone(),
            subtask: self.subtask,
            epoch,
            through_end,
            state,
        });
    }
}

#[cfg(test)]
#[path = "dedup_stage_tests.rs"]
mod tests;
