//! Timely operators: a source operator fed by a source task, and a sink operator that
//! forwards rows to a sink task and holds each epoch's capability until that task has
//! made the epoch durable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::{source, Operator};
use timely::dataflow::operators::{Capability, Probe};
use timely::dataflow::ProbeHandle;
use tokio::sync::mpsc::UnboundedSender;

use super::{ActivatorSlot, CoordEvent, Rows, SinkEvent, SourceEvent};
use crate::spi::CheckpointBarrier;
use crate::sql::PlannedQuery;

/// One worker's end of a source table's channel.
pub(crate) struct SourcePlumbing {
    pub id: String,
    pub source_rx: Receiver<SourceEvent>,
    pub source_activator: ActivatorSlot,
}

/// One worker's ends of one query's sink channels.
pub(crate) struct SinkPlumbing {
    pub id: String,
    pub query: PlannedQuery,
    /// Index of the source (in `WorkerPlumbing::sources`) whose rows this query reads.
    pub source_index: usize,
    pub sink_tx: UnboundedSender<SinkEvent>,
    pub sink_done_rx: Receiver<u64>,
    pub sink_activator: ActivatorSlot,
}

/// Everything one worker builds its dataflow from.
#[derive(Default)]
pub(crate) struct WorkerPlumbing {
    pub sources: Vec<SourcePlumbing>,
    pub sinks: Vec<SinkPlumbing>,
}

/// Builds this worker's dataflow and steps it until every sink is done or `abort` is set.
/// Each source table is one Timely source whose stream feeds the sink operator of every
/// query reading it (Timely clones the batches; the back-pressure permits they hold are
/// returned when the last clone is dropped). Worker 0 reports the sinks' frontier to the
/// coordinator whenever it changes: an epoch is complete only when every sink of every
/// query has made it durable.
pub(crate) fn run_worker(
    worker: &mut timely::worker::Worker,
    plumbing: WorkerPlumbing,
    start_epoch: u64,
    coordinator: UnboundedSender<CoordEvent>,
    abort: Arc<AtomicBool>,
) {
    let probe: ProbeHandle<u64> = ProbeHandle::new();
    let index = worker.index();
    worker.dataflow::<u64, _, _>(|scope| {
        let mut streams = Vec::new();
        for src in plumbing.sources {
            let SourcePlumbing {
                id,
                source_rx,
                source_activator,
            } = src;
            let worker_ref = scope.worker();
            let rows = source::<u64, CapacityContainerBuilder<Vec<Rows>>, _, _>(
                scope.clone(),
                &id,
                move |cap, info| {
                    *source_activator.lock().expect("activator lock") =
                        Some(worker_ref.sync_activator_for(info.address.to_vec()));
                    let mut cap: Option<Capability<u64>> = Some(cap.delayed(&start_epoch));
                    move |output| {
                        while let Some(c) = cap.as_mut() {
                            match source_rx.try_recv() {
                                Ok(SourceEvent::Batch(rows)) => output.session(&*c).give(rows),
                                Ok(SourceEvent::Barrier(e)) => {
                                    if e + 1 > *c.time() {
                                        c.downgrade(&(e + 1));
                                    }
                                }
                                Ok(SourceEvent::Finished) => cap = None,
                                // The task is gone without finishing: it reported a failure and
                                // the job aborts. Hold the epoch so nothing after it completes.
                                Err(TryRecvError::Disconnected) | Err(TryRecvError::Empty) => break,
                            }
                        }
                    }
                },
            );
            streams.push(rows);
        }

        for sink in plumbing.sinks {
            let SinkPlumbing {
                id,
                query,
                source_index,
                sink_tx,
                sink_done_rx,
                sink_activator,
            } = sink;
            let worker_ref = scope.worker();
            let coord = coordinator.clone();
            let op_id = id.clone();
            streams[source_index]
                .clone()
                .unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
                    Pipeline,
                    &id,
                    move |_cap, info| {
                        *sink_activator.lock().expect("activator lock") =
                            Some(worker_ref.sync_activator_for(info.address.to_vec()));
                        let mut held: BTreeMap<u64, Capability<u64>> = BTreeMap::new();
                        let mut requested: BTreeSet<u64> = BTreeSet::new();
                        let mut failed = false;
                        move |(input, frontier), _output| {
                            input.for_each(|cap, data| {
                                let Some(&t) = cap.least() else { return };
                                if !held.contains_key(&t) {
                                    if let Some(c) = cap.retain_least(0) {
                                        held.insert(t, c);
                                    }
                                }
                                for rows in data.drain(..) {
                                    if failed {
                                        continue;
                                    }
                                    match query.project(&rows.batch) {
                                        Ok(batch) => {
                                            let _ = sink_tx.send(SinkEvent::Batch(Rows {
                                                batch,
                                                permits: rows.permits,
                                            }));
                                        }
                                        Err(e) => {
                                            failed = true;
                                            let _ = coord.send(CoordEvent::TaskFailed {
                                                operator_id: op_id.clone(),
                                                subtask: index,
                                                error: format!("{e:#}"),
                                            });
                                        }
                                    }
                                }
                            });
                            // Every row of epoch e has arrived once the frontier passed e.
                            for &e in held.keys() {
                                if !frontier.less_equal(&e) && requested.insert(e) {
                                    let barrier = CheckpointBarrier {
                                        epoch: e,
                                        min_epoch: e,
                                        timestamp: SystemTime::now(),
                                        then_stop: false,
                                    };
                                    let _ = sink_tx.send(SinkEvent::Checkpoint(barrier));
                                }
                            }
                            while let Ok(done) = sink_done_rx.try_recv() {
                                held.retain(|e, _| *e > done);
                                requested.retain(|e| *e > done);
                            }
                        }
                    },
                )
                .probe_with(&probe);
        }
    });

    let mut reported: Option<Option<u64>> = None;
    loop {
        if abort.load(Ordering::Acquire) {
            // Timely steps a worker until its dataflows finish after this returns; an
            // aborted dataflow still holds capabilities, so drop it explicitly.
            for id in worker.installed_dataflows() {
                worker.drop_dataflow(id);
            }
            break;
        }
        let frontier = probe.with_frontier(|f| f.first().copied());
        if index == 0 && reported != Some(frontier) {
            let _ = coordinator.send(CoordEvent::Frontier(frontier));
            reported = Some(frontier);
        }
        if frontier.is_none() {
            break;
        }
        worker.step_or_park(Some(Duration::from_millis(20)));
    }
}
