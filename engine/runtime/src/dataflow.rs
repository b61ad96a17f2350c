//! Timely operators: a source operator fed by a source task, a sink operator that
//! forwards rows to a sink task and holds each epoch's capability until that task has
//! made the epoch durable, and a control dataflow that broadcasts the leader's decisions
//! and carries every process's reports to the leader.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arrow::array::RecordBatch;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::{source, Operator};
use timely::dataflow::operators::vec::{Broadcast, Input};
use timely::dataflow::operators::{Capability, Concat, Exchange, Probe};
use timely::dataflow::ProbeHandle;
use tokio::sync::mpsc::UnboundedSender;

use super::control::{Control, Report};
use super::dedup_stage::DedupRun;
use super::route::{split_by_key, Payload, Routed};
use super::watermarks::{InputWatermarks, Mark};
use super::window_run::WindowRun;
use super::{ActivatorSlot, CoordEvent, Flow, Permits, Rows, SinkEvent, SourceEvent};
use pubsub_engine_plan::PlannedQuery;
use pubsub_engine_spi::CheckpointBarrier;

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
    /// A join: the index of the source its right side reads.
    pub join_source_index: Option<usize>,
    pub sink_tx: UnboundedSender<SinkEvent>,
    pub sink_done_rx: Receiver<u64>,
    pub sink_activator: ActivatorSlot,
    /// A windowed query: its window runs in the sink operator, before the sink task.
    pub window: Option<WindowPlumbing>,
    /// A query over a deduplicating table in a cluster: the check runs in the sink
    /// operator, behind the exchange by record id (decision 0046).
    pub dedup: Option<super::dedup_stage::DedupPlumbing>,
}

/// One worker's window subtask of a windowed query.
pub(crate) struct WindowPlumbing {
    /// `q{index}-window`: its snapshots' operator id.
    pub id: String,
    /// The snapshots of every subtask of the restored checkpoint (each keeps its own groups).
    pub restore: Vec<pubsub_engine_spi::OperatorState>,
    pub late: pubsub_engine_spi::Counter,
    pub groups: pubsub_engine_spi::Gauge,
    pub bytes: pubsub_engine_spi::Gauge,
    /// `RuntimeConfig::max_window_state_bytes`.
    pub max_bytes: u64,
    pub coordinator: UnboundedSender<CoordEvent>,
    /// An earlier run of the job may have written changes after its last checkpoint: it
    /// did not stop cleanly (or this process cannot tell).
    pub restarted: bool,
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
    /// First worker of each process: (origin process, rows) its sinks took from other
    /// processes, to send back to their origin as credits (see `flow.rs`).
    pub acks: Option<Receiver<(usize, u32)>>,
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
/// on each process's first worker are exchanged to worker 0; acks of routed rows fed on
/// each process's first worker go to the first worker of the rows' origin process. Each
/// input's time advances after every send only to push the data out: their progress
/// means nothing.
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
        acks,
    } = plumbing.control;
    if let Some(w) = &waker {
        let _ = w.0.set(std::thread::current());
    }
    let (mut decision_in, mut report_in, mut ack_in) = worker.dataflow::<u64, _, _>(|scope| {
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
        // (origin process, acking process, rows) to the origin's first worker.
        let (ack_in, acks_stream) = scope.new_input::<(u64, u64, u64)>();
        let workers = flow.workers as u64;
        let credited = flow.clone();
        acks_stream
            .exchange(move |a: &(u64, u64, u64)| a.0 * workers)
            .sink(Pipeline, "control-acks", move |(input, _)| {
                input.for_each(|_, data| {
                    for (_, from, n) in data.drain(..) {
                        credited.credit(from as usize, n as u32);
                    }
                });
            });
        (Some(decision_in), Some(report_in), Some(ack_in))
    });
    // Inputs this worker never feeds are closed at once.
    if decisions.is_none() {
        decision_in = None;
    }
    if reports.is_none() {
        report_in = None;
    }
    if acks.is_none() {
        ack_in = None;
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
            let rows = source::<u64, CapacityContainerBuilder<Vec<Payload>>, _, _>(
                scope.clone(),
                &id,
                move |cap, info| {
                    *source_activator.lock().expect("activator lock") =
                        Some(worker_ref.sync_activator_for(info.address.to_vec()));
                    let mut cap: Option<Capability<u64>> = Some(cap.delayed(&start_epoch));
                    move |output| {
                        while let Some(c) = cap.as_mut() {
                            match source_rx.try_recv() {
                                Ok(SourceEvent::Batch(rows)) => {
                                    output.session(&*c).give(Payload::Rows(rows))
                                }
                                Ok(SourceEvent::Watermark(watermark)) => {
                                    output.session(&*c).give(Payload::Mark(Mark {
                                        from: index as u32,
                                        watermark,
                                    }))
                                }
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

        // Each windowed query's late rows, for the query writing them (planned after it).
        let mut late_rows = BTreeMap::new();
        for sink in plumbing.sinks {
            if let Some(of) = sink.query.late_of.clone() {
                let Some(rows) = late_rows.remove(&of) else {
                    panic!("the late rows of {of} are planned after it");
                };
                // Written by the worker whose window found them late (no exchange), with
                // that window's input watermark.
                sink_operator(
                    rows,
                    Pipeline,
                    sink,
                    &probe,
                    flow.clone(),
                    vec![index as u32],
                    start_epoch,
                );
                continue;
            }
            let id = sink.query.id.clone();
            let peers = scope.peers() as u64;
            let processes = (peers as usize).div_ceil(flow.workers);
            // The sink subtasks a source subtask's rows (and so its watermarks) may reach:
            // every one under a keyed exchange, else the one on its own worker.
            let keyed = sink.query.route_by.is_some()
                || sink.query.window.is_some()
                || sink.query.join.is_some()
                || sink.dedup.is_some();
            let dedup_key = sink.dedup.as_ref().map(|d| d.columns.key);
            let upstream_of = move |w: u64| -> Vec<u64> {
                if keyed {
                    (0..peers).collect()
                } else {
                    vec![w]
                }
            };
            // Symmetric: the source subtasks whose watermarks a sink subtask gets.
            let upstream: Vec<u32> = upstream_of(index as u64)
                .into_iter()
                .map(|w| w as u32)
                .collect();
            // A join reads two tables (each side by its own window's route); any other
            // query one.
            let inputs = match &sink.query.join {
                Some(j) => vec![
                    (0u8, sink.source_index, Some(j.sides[0].window.clone())),
                    (
                        1u8,
                        sink.join_source_index
                            .expect("a join's right table is read"),
                        Some(j.sides[1].window.clone()),
                    ),
                ],
                None => vec![(0u8, sink.source_index, sink.query.window.clone())],
            };
            let mut routed_inputs = Vec::new();
            for (side, stream_index, side_window) in inputs {
                let op_id = sink.id.clone();
                let query = sink.query.clone();
                let coord = coordinator.clone();
                // Project in the reading worker, and pick the sink subtask of each row. Rows
                // for another process go once it gave credits for them (`flow.rs`); until
                // then they wait here, in order, holding their epoch's capability.
                let flow_r = flow.clone();
                let worker_ref = scope.worker();
                let name = match side {
                    0 => format!("{}-route", sink.id),
                    _ => format!("{}-route-right", sink.id),
                };
                let routed = streams[stream_index]
                    .clone()
                    .unary::<CapacityContainerBuilder<Vec<Routed>>, _, _, _>(
                        Pipeline,
                        &name,
                        move |_cap, info| {
                            flow_r.register_router(
                                worker_ref.sync_activator_for(info.address.to_vec()),
                            );
                            let mut failed = false;
                            let converter = side_window
                                .as_ref()
                                .and_then(|w| pubsub_engine_plan::window::route_converter(w).ok());
                            let mut waiting: Vec<VecDeque<(Capability<u64>, Routed)>> =
                                (0..processes).map(|_| VecDeque::new()).collect();
                            move |input, output| {
                                for (to, queue) in waiting.iter_mut().enumerate() {
                                    while let Some((_, r)) = queue.front() {
                                        if !flow_r.try_send(to, r.num_rows() as u32) {
                                            break;
                                        }
                                        let (cap, r) = queue.pop_front().expect("front exists");
                                        output.session(&cap).give(r);
                                    }
                                }
                                input.for_each(|cap, data| {
                                    let Some(cap) = cap.retain_least(0) else {
                                        return;
                                    };
                                    let mut session = output.session(&cap);
                                    for payload in data.drain(..) {
                                        if failed {
                                            continue;
                                        }
                                        let rows = match payload {
                                            Payload::Rows(rows) => rows,
                                            Payload::Mark(mark) => {
                                                // To every sink subtask this one may send rows
                                                // to, behind the rows waiting for credits.
                                                for target in upstream_of(index as u64) {
                                                    let routed = Routed {
                                                        target,
                                                        origin: process,
                                                        payload: Payload::Mark(mark),
                                                        side,
                                                    };
                                                    let to = flow_r.process_of(target);
                                                    if to == flow_r.process
                                                        || waiting[to].is_empty()
                                                    {
                                                        session.give(routed);
                                                    } else {
                                                        waiting[to]
                                                            .push_back((cap.clone(), routed));
                                                    }
                                                }
                                                continue;
                                            }
                                        };
                                        let parts = match (&side_window, &converter) {
                                            (Some(w), Some(c)) => before(&query, w, &rows.batch)
                                                .and_then(|batch| {
                                                    pubsub_engine_plan::window::split_by_group(
                                                        w, c, &batch, peers,
                                                    )
                                                }),
                                            // Source rows, projected behind the check.
                                            _ if dedup_key.is_some() => {
                                                super::dedup_stage::split_by_id(
                                                    &rows.batch,
                                                    dedup_key.expect("checked"),
                                                    peers,
                                                    index as u64,
                                                )
                                            }
                                            _ => query.project(&rows.batch).and_then(|batch| {
                                                match query.route_by {
                                                    Some(col) => split_by_key(
                                                        &batch,
                                                        col,
                                                        peers,
                                                        index as u64,
                                                    ),
                                                    None => Ok(vec![(index as u64, batch)]),
                                                }
                                            }),
                                        };
                                        let parts = match parts {
                                            Ok(parts) => parts,
                                            Err(e) => {
                                                failed = true;
                                                let _ = coord.send(CoordEvent::TaskFailed {
                                                    operator_id: op_id.clone(),
                                                    subtask: index,
                                                    error: format!("{e:#}"),
                                                    permanent:
                                                        pubsub_engine_spi::restart_cannot_fix(&e),
                                                });
                                                continue;
                                            }
                                        };
                                        for (target, batch) in parts {
                                            // Rows the WHERE dropped: nothing to write; their
                                            // messages are acknowledged with this epoch.
                                            if batch.num_rows() == 0 {
                                                continue;
                                            }
                                            let to = flow_r.process_of(target);
                                            let routed = |batch| Routed {
                                                target,
                                                origin: process,
                                                payload: Payload::Rows(Rows {
                                                    batch,
                                                    permits: rows.permits.clone(),
                                                }),
                                                side,
                                            };
                                            if to == flow_r.process {
                                                session.give(routed(batch));
                                                continue;
                                            }
                                            for part in slices(&batch, flow_r.window_max as usize) {
                                                let n = part.num_rows() as u32;
                                                if waiting[to].is_empty() && flow_r.try_send(to, n)
                                                {
                                                    session.give(routed(part));
                                                } else {
                                                    waiting[to]
                                                        .push_back((cap.clone(), routed(part)));
                                                }
                                            }
                                        }
                                    }
                                });
                            }
                        },
                    );
                routed_inputs.push(routed);
            }
            let mut routed_inputs = routed_inputs.into_iter();
            let mut routed = routed_inputs.next().expect("a query reads a table");
            for other in routed_inputs {
                routed = routed.concat(other);
            }
            let late = if keyed {
                sink_operator(
                    routed,
                    timely::dataflow::channels::pact::Exchange::new(|r: &Routed| r.target),
                    sink,
                    &probe,
                    flow.clone(),
                    upstream,
                    start_epoch,
                )
            } else {
                sink_operator(
                    routed,
                    Pipeline,
                    sink,
                    &probe,
                    flow.clone(),
                    upstream,
                    start_epoch,
                )
            };
            late_rows.insert(id, late);
        }
    });

    let mut reported: Option<Option<u64>> = None;
    let mut aborting: Option<Instant> = None;
    loop {
        // Read before draining: whatever the coordinator sent before it set `done` (the
        // last report of a process, e.g. that its tasks ended) is then forwarded in this
        // pass, before the inputs close. Read after, it could close them on a report
        // still queued, and the leader would wait out the stop's deadline for it.
        let done = flags.done.load(Ordering::Acquire);
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
        if let (Some(rx), Some(input)) = (&acks, ack_in.as_mut()) {
            let mut by_origin: BTreeMap<usize, u64> = BTreeMap::new();
            while let Ok((origin, n)) = rx.try_recv() {
                *by_origin.entry(origin).or_default() += n as u64;
            }
            if !by_origin.is_empty() {
                for (origin, n) in by_origin {
                    input.send((origin as u64, flow.process as u64, n));
                }
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
            if done {
                decision_in = None;
                report_in = None;
                ack_in = None;
            }
            let frontier = probe.with_frontier(|f| f.first().copied());
            if index == 0 && reported != Some(frontier) {
                let _ = coordinator.send(CoordEvent::Frontier(frontier));
                reported = Some(frontier);
            }
            if frontier.is_none()
                && decision_in.is_none()
                && report_in.is_none()
                && ack_in.is_none()
            {
                break;
            }
        }
        worker.step_or_park(Some(Duration::from_millis(10)));
    }
}

/// The first stage of a windowed query on a source batch (planned by the SQL front end's `aggregate.rs`).
fn before(
    query: &PlannedQuery,
    w: &pubsub_engine_plan::WindowPlan,
    batch: &RecordBatch,
) -> anyhow::Result<RecordBatch> {
    w.first_stage(batch).map_err(|f| {
        pubsub_engine_spi::PermanentError::wrap(
            anyhow::Error::new(f).context(format!("{}: row failure", query.text)),
        )
    })
}

/// `batch` in slices of at most `max` rows (zero-copy).
fn slices(batch: &RecordBatch, max: usize) -> Vec<RecordBatch> {
    let max = max.max(1);
    if batch.num_rows() <= max {
        return vec![batch.clone()];
    }
    (0..batch.num_rows())
        .step_by(max)
        .map(|o| batch.slice(o, max.min(batch.num_rows() - o)))
        .collect()
}

/// The sink operator of one query on one worker: forwards rows to its sink task, holds
/// a capability for every epoch it got rows in, asks the task to checkpoint an epoch once
/// the input frontier passed it, and releases the epoch only after the task made it
/// durable. `pact` is `Pipeline` (rows stay on their worker) or an exchange by key.
///
/// A windowed query's window runs here, ahead of the sink task: its input is taken in
/// epoch order (rows of a later epoch wait until every earlier one is complete), and its
/// state is snapshotted once an epoch is complete, so a checkpoint holds exactly the rows
/// of the epochs it covers; what a window writes when it fires goes to the sink task in
/// the epoch whose watermark fired it.
///
/// Its output is the rows a window found late, in the epoch they arrived in, when the
/// query writes them to a table (`scan.late-rows.table`).
fn sink_operator<'scope, P>(
    rows: timely::dataflow::StreamVec<'scope, u64, Routed>,
    pact: P,
    sink: SinkPlumbing,
    probe: &ProbeHandle<u64>,
    flow: Arc<Flow>,
    upstream: Vec<u32>,
    start_epoch: u64,
) -> timely::dataflow::StreamVec<'scope, u64, Routed>
where
    P: timely::dataflow::channels::pact::ParallelizationContract<u64, Vec<Routed>>,
{
    let SinkPlumbing {
        id,
        query,
        sink_tx,
        sink_done_rx,
        sink_activator,
        window,
        dedup,
        ..
    } = sink;
    let worker_ref = rows.scope().worker();
    let subtask = worker_ref.index();
    let peers = worker_ref.peers() as u64;
    let mut dedup = dedup.map(|d| DedupRun::new(d, subtask, peers, start_epoch));
    let mut window =
        window.map(|w| WindowRun::new(w, query.clone(), subtask, peers, start_epoch, &upstream));
    rows.unary_frontier::<CapacityContainerBuilder<Vec<Routed>>, _, _, _>(
        pact,
        &id,
        move |_cap, info| {
            *sink_activator.lock().expect("activator lock") =
                Some(worker_ref.sync_activator_for(info.address.to_vec()));
            let mut held: BTreeMap<u64, Capability<u64>> = BTreeMap::new();
            let mut requested: BTreeSet<u64> = BTreeSet::new();
            let mut watermarks = InputWatermarks::new(upstream);
            // An updating aggregate flushes on processing time: wake for the next flush
            // (at most one wake-up asked for at a time).
            let timer = worker_ref.activator_for(info.address.clone());
            // The flush time asked for (ms), and when the timer fires (monotonic).
            let mut wake_at: Option<(i64, Instant)> = None;
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(&t) = cap.least() else { return };
                    if !held.contains_key(&t) {
                        if let Some(c) = cap.retain_least(0) {
                            held.insert(t, c);
                        }
                    }
                    for r in data.drain(..) {
                        let payload = match r.payload {
                            Payload::Rows(mut rows) => {
                                if r.origin != flow.process as u32 {
                                    // From another process: held here until taken (by
                                    // the sink task or the window), then its credits
                                    // go back to the origin.
                                    let n = rows.batch.num_rows() as u32;
                                    rows.permits =
                                        Permits::peer(flow.clone(), r.origin as usize, n);
                                }
                                Payload::Rows(rows)
                            }
                            mark => mark,
                        };
                        if let Some(w) = window.as_mut() {
                            w.stash.entry(t).or_default().push((r.side, payload));
                            continue;
                        }
                        match payload {
                            Payload::Rows(rows) => match dedup.as_mut() {
                                None => {
                                    let _ = sink_tx.send(SinkEvent::Batch(rows));
                                }
                                Some(d) => {
                                    // Source rows: the copies out, then the SELECT.
                                    let Some(batch) = d.filter(t, &rows.batch) else {
                                        continue;
                                    };
                                    if batch.num_rows() == 0 {
                                        continue;
                                    }
                                    match query.project(&batch) {
                                        Ok(batch) if batch.num_rows() > 0 => {
                                            let _ = sink_tx.send(SinkEvent::Batch(Rows {
                                                batch,
                                                permits: rows.permits,
                                            }));
                                        }
                                        Ok(_) => {}
                                        Err(e) => d.fail(e),
                                    }
                                }
                            },
                            Payload::Mark(mark) => {
                                if let Some(w) = watermarks.update(mark) {
                                    let _ = sink_tx.send(SinkEvent::Watermark(w));
                                }
                            }
                        }
                    }
                });
                if let Some(d) = dedup.as_mut() {
                    d.step(frontier.frontier().first().copied());
                }
                if let Some(w) = window.as_mut() {
                    let f = frontier.frontier().first().copied();
                    w.step(f, &mut watermarks, &sink_tx);
                    if let Some(next) = w.next_flush {
                        // Re-armed once the timer asked for has fired (by the monotonic
                        // clock: the wall clock may say it is early), or for an earlier
                        // flush.
                        let now = pubsub_engine_plan::window::now_ms();
                        if wake_at.is_none_or(|(t, at)| Instant::now() >= at || next < t) {
                            let after = u64::try_from(next.saturating_sub(now)).unwrap_or(0);
                            let after = Duration::from_millis(after.clamp(1, 3_600_000));
                            timer.activate_after(after);
                            wake_at = Some((next, Instant::now() + after));
                        }
                    }
                    for (epoch, payload) in w.late_out.drain(..) {
                        // Held until this query's sink made the epoch durable, which it
                        // cannot do before the window took the epoch's input.
                        let cap = held
                            .get(&epoch)
                            .expect("an epoch's capability is held while its input is taken");
                        output.session(cap).give(Routed {
                            target: subtask as u64,
                            origin: flow.process as u32,
                            payload,
                            side: 0,
                        });
                    }
                }
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
    .probe_with(probe)
}
