//! The `nexmark` source operator.
//!
//! Subtask `i` of `p` emits the events of the table's type whose index is `i mod p`
//! (`i, i + p, i + 2p, ...`), each serialized to JSON and decoded through the
//! `SourceCollector`'s deserializer, at `events-per-second / p` events per second.
//!
//! **State and restore (at least once).** Operator state holds this subtask's next event
//! index (`next-index`) and the parallelism (`parallelism`), snapshotted at every barrier.
//! A restore with the same parallelism continues each subtask at its stored index: events
//! generated after the last completed checkpoint are generated again (identical, see
//! [`crate::events`]). A restore with another parallelism restarts every subtask at the
//! smallest stored index across all subtasks (the first index at or above it that is its
//! own), so no event is skipped; events between that index and where each old subtask
//! stopped are emitted again.
//!
//! It acknowledges nothing (`Commit` is ignored). When `event-count` is reached it calls
//! `ctx.end_of_input()` once (the job then takes a final checkpoint and stops) and keeps
//! serving control messages until it is stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use pubsub_engine_spi::{
    ControlMessage, OperatorConfig, OperatorState, SourceCollector, SourceContext,
    SourceFinishType, SourceOperator, StopMode, Watermark, MESSAGES_RECEIVED,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::events::Events;
use crate::pacer::Pacer;
use crate::NexmarkTable;

/// State key: the index of this subtask's next event (unsigned integer).
pub const STATE_NEXT_INDEX: &str = "next-index";
/// State key: the parallelism of the run that wrote the state (unsigned integer).
pub const STATE_PARALLELISM: &str = "parallelism";

/// Rows per emitted batch (the collector's `should_flush` threshold).
const BATCH_SIZE: usize = 512;
/// The longest a decoded row waits in the buffer before it is emitted.
const LINGER: Duration = Duration::from_millis(100);
/// Events generated per turn before control messages are looked at and the task yields.
const CHUNK: u64 = 512;

/// One subtask of a `nexmark` source table.
pub struct NexmarkSource {
    table: NexmarkTable,
    op: OperatorConfig,
}

impl NexmarkSource {
    pub fn new(table: NexmarkTable, op: OperatorConfig) -> Self {
        NexmarkSource { table, op }
    }
}

/// Where subtask `task` of `parallelism` starts, given every subtask's restored state
/// (keyed by the subtask index of the run that wrote it; empty on a fresh start).
///
/// Same parallelism (every subtask `0..parallelism` stored, each with this parallelism and
/// an index of its own residue): its stored index. Otherwise the first index of its own
/// residue at or above the smallest stored index. Errors if a stored entry lacks either
/// key or holds something other than an unsigned integer, naming the subtask.
pub fn start_index(
    task: usize,
    parallelism: usize,
    restored: &BTreeMap<usize, OperatorState>,
) -> anyhow::Result<u64> {
    let p = parallelism.max(1) as u64;
    let i = task as u64;
    if restored.is_empty() {
        return Ok(i);
    }
    let get = |k: usize, st: &OperatorState, key: &str| {
        st.values.get(key).and_then(Value::as_u64).ok_or_else(|| {
            anyhow::anyhow!(
                "the restored state of nexmark subtask {k} has no '{key}' (an unsigned integer): {}",
                serde_json::to_string(&st.values).unwrap_or_default()
            )
        })
    };
    let mut entries = BTreeMap::new();
    for (k, st) in restored {
        entries.insert(
            *k,
            (
                get(*k, st, STATE_NEXT_INDEX)?,
                get(*k, st, STATE_PARALLELISM)?,
            ),
        );
    }
    let same = entries.len() as u64 == p
        && entries
            .iter()
            .all(|(k, (next, par))| *par == p && (*k as u64) < p && next % p == *k as u64);
    if same {
        return Ok(entries[&task].0);
    }
    let min = entries.values().map(|(n, _)| *n).min().expect("not empty");
    Ok(min + (i + p - min % p) % p)
}

enum Next {
    Continue,
    Finish(SourceFinishType),
}

#[async_trait]
impl SourceOperator for NexmarkSource {
    fn name(&self) -> String {
        format!("nexmark-source({})", self.table.event_type.name())
    }

    async fn run(
        &mut self,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<SourceFinishType> {
        collector.initialize_deserializer(&self.op.schema, BATCH_SIZE, LINGER)?;
        let kind = self.table.event_type;
        let parallelism = ctx.task_info.parallelism.max(1);
        let task = ctx.task_info.task_index;
        let start = start_index(task, parallelism, &ctx.restored_subtasks)?;
        if !ctx.restored_subtasks.is_empty() {
            let stored = ctx
                .state
                .values
                .get(STATE_NEXT_INDEX)
                .and_then(Value::as_u64);
            if stored == Some(start) {
                tracing::info!(
                    subtask = task,
                    "nexmark {} source resumes at event {start}",
                    kind.name()
                );
            } else {
                tracing::info!(
                    subtask = task,
                    "nexmark {} source restored with another parallelism (now {parallelism}): restarts at event {start}, the smallest stored index; events after it emitted before are emitted again",
                    kind.name()
                );
            }
        }
        let mut events = Events::new(kind, start, parallelism as u64);
        let received = ctx.counter(MESSAGES_RECEIVED);
        let per_subtask = self.table.events_per_second as f64 / parallelism as f64;
        let mut pacer = Pacer::new(per_subtask, std::time::Instant::now());
        let count = self.table.event_count;
        let save = |ctx: &mut SourceContext, next: u64| {
            ctx.state
                .values
                .insert(STATE_NEXT_INDEX.into(), Value::from(next));
            ctx.state
                .values
                .insert(STATE_PARALLELISM.into(), Value::from(parallelism as u64));
        };
        save(ctx, events.next_index());
        // With `WATERMARK FOR`: the out-of-orderness (ns) and the highest event time seen.
        let bound = self
            .op
            .schema
            .event_time
            .as_ref()
            .map(|e| i64::try_from(e.out_of_orderness.as_nanos()).unwrap_or(i64::MAX));
        let mut highest: Option<i64> = None;
        let mut stopping = false;
        let mut ended = false;
        loop {
            let exhausted = count.is_some_and(|c| events.next_index() >= c);
            if exhausted && !ended {
                collector.flush_buffer().await?;
                tracing::info!(
                    subtask = task,
                    "nexmark {} source emitted its share of 'event-count'",
                    kind.name()
                );
                ctx.end_of_input();
                ended = true;
            }
            let allowance = if stopping || exhausted {
                0
            } else {
                pacer.allowance(std::time::Instant::now(), CHUNK)
            };
            if allowance == 0 {
                let due = (!stopping && !exhausted)
                    .then(|| pacer.next_due())
                    .flatten()
                    .map(Instant::from_std);
                let flush_at = collector.flush_deadline().map(Instant::from_std);
                let wake = match (due, flush_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                tokio::select! {
                    biased;
                    ctrl = ctx.control_rx.recv() => {
                        save(ctx, events.next_index());
                        if let Next::Finish(f) = on_control(ctrl, ctx, collector, &mut stopping).await? {
                            return Ok(f);
                        }
                    }
                    _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {}
                }
                if collector.should_flush() {
                    collector.flush_buffer().await?;
                }
                continue;
            }
            while let Ok(ctrl) = ctx.control_rx.try_recv() {
                save(ctx, events.next_index());
                if let Next::Finish(f) =
                    on_control(Some(ctrl), ctx, collector, &mut stopping).await?
                {
                    return Ok(f);
                }
            }
            if stopping {
                continue;
            }
            let mut n = 0;
            while n < allowance && count.is_none_or(|c| events.next_index() < c) {
                let index = events.next_index();
                let payload = events.next_json();
                collector.deserialize_slice(&payload, &[]).map_err(|e| {
                    anyhow::anyhow!(
                        "nexmark {} event {index} does not decode into the declared columns: {e}",
                        kind.name()
                    )
                })?;
                n += 1;
                if bound.is_some() {
                    highest = highest.max(collector.last_event_time());
                }
                if collector.should_flush() {
                    collector.flush_buffer().await?;
                }
            }
            if let (Some(bound), Some(t)) = (bound, highest) {
                collector.emit_watermark(Watermark::EventTime(t.saturating_sub(bound)))?;
            }
            pacer.consumed(n);
            received.add(n);
            tokio::task::yield_now().await;
        }
    }
}

/// Handles one control message; `state` must already hold the next index.
async fn on_control(
    ctrl: Option<ControlMessage>,
    ctx: &mut SourceContext,
    collector: &mut SourceCollector,
    stopping: &mut bool,
) -> anyhow::Result<Next> {
    match ctrl {
        Some(ControlMessage::Checkpoint(barrier)) => {
            if barrier.then_stop {
                *stopping = true;
            }
            ctx.start_checkpoint(barrier, collector).await?;
            Ok(Next::Continue)
        }
        // Nothing to acknowledge: the events are regenerated on restore.
        Some(ControlMessage::Commit { .. }) => Ok(Next::Continue),
        Some(ControlMessage::Stop {
            mode: StopMode::Graceful,
        }) => Ok(Next::Finish(SourceFinishType::Graceful)),
        Some(ControlMessage::Stop {
            mode: StopMode::Immediate,
        })
        | None => Ok(Next::Finish(SourceFinishType::Immediate)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(next: u64, par: u64) -> OperatorState {
        let mut s = OperatorState::default();
        s.values.insert(STATE_NEXT_INDEX.into(), next.into());
        s.values.insert(STATE_PARALLELISM.into(), par.into());
        s
    }

    #[test]
    fn fresh_start_begins_at_the_subtask_index() {
        assert_eq!(start_index(0, 2, &BTreeMap::new()).unwrap(), 0);
        assert_eq!(start_index(1, 2, &BTreeMap::new()).unwrap(), 1);
    }

    #[test]
    fn same_parallelism_continues_each_subtask() {
        let r = BTreeMap::from([(0, state(100, 2)), (1, state(51, 2))]);
        assert_eq!(start_index(0, 2, &r).unwrap(), 100);
        assert_eq!(start_index(1, 2, &r).unwrap(), 51);
    }

    #[test]
    fn another_parallelism_restarts_from_the_smallest_index() {
        let r = BTreeMap::from([(0, state(100, 2)), (1, state(51, 2))]);
        // Every index >= 51 not yet emitted lies at or above each subtask's start.
        let starts: Vec<u64> = (0..3).map(|i| start_index(i, 3, &r).unwrap()).collect();
        assert_eq!(starts, vec![51, 52, 53]);
        assert_eq!(start_index(0, 1, &r).unwrap(), 51);
        // Fewer subtasks stored than now (the state came from a smaller job).
        let r = BTreeMap::from([(0, state(10, 1))]);
        assert_eq!(start_index(0, 2, &r).unwrap(), 10);
        assert_eq!(start_index(1, 2, &r).unwrap(), 11);
    }

    #[test]
    fn a_broken_state_names_the_subtask_and_key() {
        let mut s = OperatorState::default();
        s.values.insert(STATE_NEXT_INDEX.into(), "x".into());
        let e = start_index(0, 1, &BTreeMap::from([(0, s)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("subtask 0 has no 'next-index'"), "{e}");
    }
}
