//! Timely operators: a source operator fed by a source task, a sink operator that
//! forwards rows to a sink task and holds each epoch's capability until that task has
//! made the epoch durable, and a control dataflow that broadcasts the leader's decisions
//! and carries every process's reports to the leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::{source, Operator};
use timely::dataflow::operators::vec::{Broadcast, Input};
use timely::dataflow::operators::{Capability, Exchange, Probe};
use timely::dataflow::ProbeHandle;
use tokio::sync::mpsc::UnboundedSender;

use super::control::{Control, Report};
use super::route::{split_by_key, Routed};
use super::{ActivatorSlot, CoordEvent, Flow, Permits, Rows, SinkEvent, SourceEvent};
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

/// One worker's ends of the control dataflow. Only the leader's worker 0 feeds
/// decisions and receives reports; only the first worker of each process feeds reports
/// and delivers decisions to its process's coordinator.
#[derive(Default)]
pub(crate) struct ControlPlumbing {
    /// Global worker 0: the leader's decisions, to broadcast to every worker.
    pub decisions: Option<Receiver<Control>>,
    /// Global worker 0: where every process's reports arrive.
    pub to_leader: Option<UnboundedSender<Report>>,
    /// First worker of each process: this process's reports for the leader.
    pub reports: Option<Receiver<Report>>,
    /// First worker of each process: where the leader's decisions are delivered.
    pub to_process: Option<UnboundedSender<Control>>,
    /// First worker of each process: registers its thread so that a new decision or
    /// report wakes it at once instead of after its park timeout.
    pub waker: Option<WorkerWaker>,
}

/// Wakes a parked Timely worker thread (Timely parks with `std::thread::park_timeout`).
#[derive(Clone, Default)]
pub(crate) struct WorkerWaker(Arc<std::sync::OnceLock<std::thread::Thread>>);

impl WorkerWaker {
    pub fn wake(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }
}

/// Everything one worker builds its dataflow from.
#[derive(Default)]
pub(crate) struct WorkerPlumbing {
    pub sources: Vec<SourcePlumbing>,
    pub sinks: Vec<SinkPlumbing>,
    pub control: ControlPlumbing,
}

/// Flags a process's coordinator sets for its workers.
#[derive(Clone, Default)]
pub(crate) struct WorkerFlags {
    /// The job failed: drop the dataflows (after a short flush of reports, so peers hear).
    pub abort: Arc<AtomicBool>,
    /// This process's coordinator is done: close the control inputs so the control
    /// dataflow can complete once every process closed its own.
    pub done: Arc<AtomicBool>,
    /// Part of a cluster: an aborting worker steps a little longer so peers hear why.
    pub cluster: bool,
}

/// How long an aborting worker keeps stepping so its last reports (the failure) reach
/// the leader and the leader's abort reaches every process.
const ABORT_FLUSH: Duration = Duration::from_millis(300);

/// Builds this worker's dataflows and steps them until every sink is done and the
/// process's coordinator is done, or `flags.abort` is set.
///
/// Data: each source table is one Timely source whose stream feeds the sink operator of
/// every query reading it (Timely clones the batches; the back-pressure permits they hold
/// are returned when the last clone is dropped). Global worker 0 reports the sinks'
/// frontier to the coordinator whenever it changes: Timely's progress tracking is global,
/// so an epoch has passed it only when every sink of every query on every process has
/// made it durable.
///
/// Control: decisions fed on global worker 0 are broadcast to every worker; reports fed
/// on each process's first worker are exchanged to worker 0. Each input's time advances
/// after every send only to push the data out: their progress means nothing.
pub(crate) fn run_worker(
    worker: &mut timely::worker::Worker,
    plumbing: WorkerPlumbing,
    start_epoch: u64,
    coordinator: UnboundedSender<CoordEvent>,
    flags: WorkerFlags,
    flow: Arc<Flow>,
) {
    let process = flow.process as u32;
    let probe: ProbeHandle<u64> = ProbeHandle::new();
    let index = worker.index();
    let ControlPlumbing {
        decisions,
        to_leader,
        reports,
        to_process,
        waker,
    } = plumbing.control;
    if let Some(w) = &waker {
        let _ = w.0.set(std::thread::current());
    }
    let (mut decision_in, mut report_in) = worker.dataflow::<u64, _, _>(|scope| {
        let (decision_in, decisions_stream) = scope.new_input::<Control>();
        decisions_stream
            .broadcast()
            .sink(Pipeline, "control-deliver", move |(input, _)| {
                input.for_each(|_, data| {
                    for c in data.drain(..) {
                        if let Some(tx) = &to_process {
                            let _ = tx.send(c);
                        }
                    }
                });
            });
        let (report_in, reports_stream) = scope.new_input::<Report>();
        reports_stream.exchange(|_: &Report| 0u64).sink(
            Pipeline,
            "control-reports",
            move |(input, _)| {
                input.for_each(|_, data| {
                    for r in data.drain(..) {
                        if let Some(tx) = &to_leader {
                            let _ = tx.send(r);
                        }
                    }
                });
            },
        );
        (Some(decision_in), Some(report_in))
    });
    // Inputs this worker never feeds are closed at once.
    if decisions.is_none() {
        decision_in = None;
    }
    if reports.is_none() {
        report_in = None;
    }
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
            let peers = scope.peers() as u64;
            let op_id = sink.id.clone();
            let query = sink.query.clone();
            let coord = coordinator.clone();
            // Project in the reading worker, and pick the sink subtask of each row.
            let routed = streams[sink.source_index]
                .clone()
                .unary::<CapacityContainerBuilder<Vec<Routed>>, _, _, _>(
                    Pipeline,
                    &format!("{}-route", sink.id),
                    move |_cap, _info| {
                        let mut failed = false;
                        move |input, output| {
                            input.for_each(|cap, data| {
                                let mut session = output.session(&cap);
                                for rows in data.drain(..) {
                                    if failed {
                                        continue;
                                    }
                                    let parts = query.project(&rows.batch).and_then(|batch| {
                                        match query.route_by {
                                            Some(col) => {
                                                split_by_key(&batch, col, peers, index as u64)
                                            }
                                            None => Ok(vec![(index as u64, batch)]),
                                        }
                                    });
                                    match parts {
                                        Ok(parts) => {
                                            for (target, batch) in parts {
                                                session.give(Routed {
                                                    target,
                                                    origin: process,
                                                    rows: Rows {
                                                        batch,
                                                        permits: rows.permits.clone(),
                                                    },
                                                });
                                            }
                                        }
                                        Err(e) => {
                                            failed = true;
                                            let _ = coord.send(CoordEvent::TaskFailed {
                                                operator_id: op_id.clone(),
                                                subtask: index,
                                                error: format!("{e:#}"),
                                                permanent: crate::restart_cannot_fix(&e),
                                            });
                                        }
                                    }
                                }
                            });
                        }
                    },
                );
            if sink.query.route_by.is_some() {
                sink_operator(
                    routed,
                    timely::dataflow::channels::pact::Exchange::new(|r: &Routed| r.target),
                    sink,
                    &probe,
                    flow.clone(),
                );
            } else {
                sink_operator(routed, Pipeline, sink, &probe, flow.clone());
            }
        }
    });

    let mut reported: Option<Option<u64>> = None;
    let mut aborting: Option<Instant> = None;
    loop {
        if let (Some(rx), Some(input)) = (&decisions, decision_in.as_mut()) {
            let mut sent = false;
            while let Ok(c) = rx.try_recv() {
                input.send(c);
                sent = true;
            }
            if sent {
                // Advancing the time (not just flushing) makes the exchange behind the
                // input send its buffers now.
                let next = *input.time() + 1;
                input.advance_to(next);
            }
        }
        if let (Some(rx), Some(input)) = (&reports, report_in.as_mut()) {
            let mut sent = false;
            while let Ok(r) = rx.try_recv() {
                input.send(r);
                sent = true;
            }
            if sent {
                // Advancing the time (not just flushing) makes the exchange behind the
                // input send its buffers now.
                let next = *input.time() + 1;
                input.advance_to(next);
            }
        }
        if flags.abort.load(Ordering::Acquire) {
            let since = *aborting.get_or_insert_with(Instant::now);
            if since.elapsed() >= ABORT_FLUSH || !flags.cluster {
                // Timely steps a worker until its dataflows finish after this returns; an
                // aborted dataflow still holds capabilities, so drop it explicitly.
                for id in worker.installed_dataflows() {
                    worker.drop_dataflow(id);
                }
                break;
            }
        } else {
            if flags.done.load(Ordering::Acquire) {
                decision_in = None;
                report_in = None;
            }
            let frontier = probe.with_frontier(|f| f.first().copied());
            if index == 0 && reported != Some(frontier) {
                let _ = coordinator.send(CoordEvent::Frontier(frontier));
                reported = Some(frontier);
            }
            if frontier.is_none() && decision_in.is_none() && report_in.is_none() {
                break;
            }
        }
        worker.step_or_park(Some(Duration::from_millis(10)));
    }
}

/// The sink operator of one query on one worker: forwards rows to its sink task, holds
/// a capability for every epoch it got rows in, asks the task to checkpoint an epoch once
/// the input frontier passed it, and releases the epoch only after the task made it
/// durable. `pact` is `Pipeline` (rows stay on their worker) or an exchange by key.
fn sink_operator<'scope, P>(
    rows: timely::dataflow::StreamVec<'scope, u64, Routed>,
    pact: P,
    sink: SinkPlumbing,
    probe: &ProbeHandle<u64>,
    flow: Arc<Flow>,
) where
    P: timely::dataflow::channels::pact::ParallelizationContract<u64, Vec<Routed>>,
{
    let SinkPlumbing {
        id,
        sink_tx,
        sink_done_rx,
        sink_activator,
        ..
    } = sink;
    let worker_ref = rows.scope().worker();
    rows.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        pact,
        &id,
        move |_cap, info| {
            *sink_activator.lock().expect("activator lock") =
                Some(worker_ref.sync_activator_for(info.address.to_vec()));
            let mut held: BTreeMap<u64, Capability<u64>> = BTreeMap::new();
            let mut requested: BTreeSet<u64> = BTreeSet::new();
            move |(input, frontier), _output| {
                input.for_each(|cap, data| {
                    let Some(&t) = cap.least() else { return };
                    if !held.contains_key(&t) {
                        if let Some(c) = cap.retain_least(0) {
                            held.insert(t, c);
                        }
                    }
                    for mut r in data.drain(..) {
                        if r.origin != flow.process as u32 {
                            // From another process: held here until the sink task took it.
                            let n = r.rows.batch.num_rows() as u32;
                            r.rows.permits = Permits::peer(flow.clone(), r.origin as usize, n);
                        }
                        let _ = sink_tx.send(SinkEvent::Batch(r.rows));
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
    .probe_with(probe);
}
