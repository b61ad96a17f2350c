//! A window subtask inside its query's sink operator (`dataflow.rs`): a windowed or
//! updating aggregate's state, or a join's two sides (windowed, or an updating join's
//! kept rows), fed in epoch order and snapshotted once an epoch is complete.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc::UnboundedSender;

use super::dataflow::WindowPlumbing;
use super::route::Payload;
use super::watermarks::{InputWatermarks, Mark};
use super::{CoordEvent, Permits, Rows, SinkEvent};
use pubsub_engine_plan::window::WindowState;
use pubsub_engine_plan::{JoinState, PlannedQuery};
use pubsub_engine_spi::Watermark;

/// A value no other run of the job uses (with overwhelming odds): the generation an
/// updating aggregate writes into its record keys (decision 0051). Not derived from the
/// checkpoint: two runs restoring one checkpoint must differ too.
fn run_generation(subtask: usize) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((
        SystemTime::now(),
        std::process::id(),
        subtask,
    ))
}

/// What a window subtask holds: an aggregate's windows, or a join's two sides.
enum Held {
    Window(WindowState),
    Join(Joined),
}

/// A join's subtask: both sides' windows (or an updating join's kept rows), advanced by
/// the lower of the two inputs' watermarks (an idle input's is left out).
struct Joined {
    state: JoinState,
    /// Each input's watermark over its upstream subtasks.
    marks: [InputWatermarks; 2],
    at: [Option<Watermark>; 2],
    /// The join's watermark, last sent on, and the highest event time sent (an idle
    /// spell between does not let a lower one through).
    sent: Option<Watermark>,
    highest: Option<i64>,
}

impl Held {
    fn groups(&self) -> u64 {
        match self {
            Held::Window(s) => s.groups(),
            Held::Join(j) => j.state.groups(),
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Held::Window(s) => s.bytes(),
            Held::Join(j) => j.state.bytes(),
        }
    }

    fn take_late(&mut self) -> u64 {
        match self {
            Held::Window(s) => s.take_late(),
            Held::Join(j) => j.state.take_late(),
        }
    }
}

/// Joined rows (in the join's schema) through the query's WHERE and select list to the
/// sink.
fn write_joined(
    query: &PlannedQuery,
    joined: &arrow::array::RecordBatch,
    sink_tx: &UnboundedSender<SinkEvent>,
) -> anyhow::Result<()> {
    let batch = query.project(joined)?;
    if batch.num_rows() > 0 {
        let _ = sink_tx.send(SinkEvent::Batch(Rows {
            batch,
            permits: Arc::new(Permits::none()),
        }));
    }
    Ok(())
}

/// The join's watermark from its inputs': the lower of two event times; an idle input's
/// is left out; `None` until both inputs said something.
fn join_watermark(at: [Option<Watermark>; 2]) -> Option<Watermark> {
    match at {
        [Some(Watermark::EventTime(a)), Some(Watermark::EventTime(b))] => {
            Some(Watermark::EventTime(a.min(b)))
        }
        [Some(Watermark::Idle), Some(w)] | [Some(w), Some(Watermark::Idle)] => Some(w),
        _ => None,
    }
}

/// A window subtask inside its query's sink operator (see `dataflow::sink_operator`).
pub(crate) struct WindowRun {
    plumbing: WindowPlumbing,
    query: PlannedQuery,
    subtask: usize,
    /// `None` once it failed (the job aborts).
    state: Option<Held>,
    /// Input by epoch, taken in epoch order, with the join input (0 or 1) it came on.
    pub stash: BTreeMap<u64, Vec<(u8, Payload)>>,
    /// The first epoch not yet snapshotted.
    next: u64,
    /// The input ended and the last state was sent.
    ended: bool,
    /// For the query writing late rows: the rows, in the late table's schema, by the
    /// epoch they arrived in, and the window's input watermark (the late table's).
    pub late_out: Vec<(u64, Payload)>,
    /// An updating aggregate: when its next flush is due (ms of processing time).
    pub next_flush: Option<i64>,
    /// An updating aggregate: its sink stamps record ids.
    record_ids: bool,
}

impl WindowRun {
    /// `upstream`: the source subtasks sending to it (each join input's alike).
    pub fn new(
        plumbing: WindowPlumbing,
        query: PlannedQuery,
        subtask: usize,
        peers: u64,
        start_epoch: u64,
        upstream: &[u32],
    ) -> Self {
        let record_ids = query.sink.connector.sink_record_ids(&query.sink.connection);
        let mut run = WindowRun {
            plumbing,
            query,
            subtask,
            state: None,
            stash: BTreeMap::new(),
            next: start_epoch,
            ended: false,
            late_out: Vec::new(),
            next_flush: None,
            record_ids,
        };
        let restore = &run.plumbing.restore;
        let state = match (&run.query.join, &run.query.window) {
            (Some(j), _) => JoinState::new(j.clone()).and_then(|mut s| {
                s.restore(restore, subtask as u64, peers)?;
                Ok(Held::Join(Joined {
                    state: s,
                    marks: [0, 1].map(|_| InputWatermarks::new(upstream.iter().copied())),
                    at: [None, None],
                    sent: None,
                    highest: None,
                }))
            }),
            (None, Some(w)) => WindowState::new(w.clone()).and_then(|mut s| {
                s.restore(restore, subtask as u64, peers)?;
                s.start_run(run_generation(subtask), run.plumbing.restarted);
                Ok(Held::Window(s))
            }),
            (None, None) => Err(anyhow::anyhow!("{}: not a windowed query", run.query.text)),
        };
        match state {
            Ok(s) => {
                run.plumbing.groups.set(s.groups());
                run.plumbing.bytes.set(s.bytes());
                run.plumbing.restore = Vec::new();
                run.state = Some(s);
            }
            Err(e) => run.fail(e.context("the window's state could not be restored")),
        }
        run
    }

    fn fail(&mut self, e: anyhow::Error) {
        self.state = None;
        self.next_flush = None;
        let _ = self.plumbing.coordinator.send(CoordEvent::TaskFailed {
            operator_id: self.plumbing.id.clone(),
            subtask: self.subtask,
            error: format!("{e:#}"),
            permanent: pubsub_engine_spi::restart_cannot_fix(&e),
        });
    }

    /// Takes the input of every epoch up to the frontier `f` (all of it once the input
    /// ended, `None`) in epoch order, snapshotting each epoch once it is complete.
    pub fn step(
        &mut self,
        f: Option<u64>,
        watermarks: &mut InputWatermarks,
        sink_tx: &UnboundedSender<SinkEvent>,
    ) {
        if self.ended {
            return;
        }
        let ready: Vec<u64> = self
            .stash
            .keys()
            .copied()
            .filter(|k| f.is_none_or(|f| *k <= f))
            .collect();
        for k in ready {
            self.snapshot_until(k);
            let input = self.stash.remove(&k).unwrap_or_default();
            for (side, payload) in input {
                let taken = match self.state.as_mut() {
                    Some(Held::Join(j)) => {
                        Self::take_joined(j, &self.query, side, payload, sink_tx)
                    }
                    _ => self.take(k, payload, watermarks, sink_tx),
                };
                if let Err(e) = taken.and_then(|()| self.account()) {
                    self.fail(e);
                    return;
                }
            }
        }
        self.flush(f.is_none(), sink_tx);
        match f {
            Some(f) => self.snapshot_until(f),
            None => {
                self.send_snapshot(self.next, true);
                self.ended = true;
                self.next_flush = None;
            }
        }
    }

    /// An updating aggregate: writes its changes when due, or whatever changed once the
    /// input ended (`ended`), and notes when the next flush is due.
    fn flush(&mut self, ended: bool, sink_tx: &UnboundedSender<SinkEvent>) {
        let Some(Held::Window(state)) = self.state.as_mut() else {
            return;
        };
        let now = pubsub_engine_plan::window::now_ms();
        let Some((due, _)) = state.flush_due(now) else {
            return;
        };
        if due || ended {
            let query = &self.query;
            let sink = query.sink_schema.clone();
            let changes = state
                .flush(
                    now,
                    &sink,
                    self.record_ids,
                    &|rows, having| query.sink_rows(rows, having),
                    ended,
                )
                .and_then(|c| match c {
                    Some(c) => {
                        if c.evicted > 0 {
                            tracing::debug!(
                                evicted = c.evicted,
                                "{}: idle groups forgotten",
                                query.text
                            );
                        }
                        match c.batch.num_rows() {
                            0 => Ok(None),
                            _ => query.changes_for_sink(c).map(Some),
                        }
                    }
                    None => Ok(None),
                });
            match changes {
                Ok(Some(batch)) => {
                    let _ = sink_tx.send(SinkEvent::Batch(Rows {
                        batch,
                        permits: Arc::new(Permits::none()),
                    }));
                }
                Ok(None) => {}
                Err(e) => return self.fail(e),
            }
            self.plumbing.groups.set(state.groups());
            self.plumbing.bytes.set(state.bytes());
        }
        self.next_flush = state
            .flush_due(now)
            .map(|(_, next)| next)
            .filter(|n| *n < i64::MAX);
    }

    fn take(
        &mut self,
        epoch: u64,
        payload: Payload,
        watermarks: &mut InputWatermarks,
        sink_tx: &UnboundedSender<SinkEvent>,
    ) -> anyhow::Result<()> {
        let Some(Held::Window(state)) = self.state.as_mut() else {
            return Ok(());
        };
        match payload {
            Payload::Rows(rows) => {
                let b = &rows.batch;
                match &self.query.late {
                    None => state.update(b)?,
                    Some(late) => {
                        // The first stage's columns, then the source row's (`keep_source`).
                        let width = self.query.window.as_ref().map_or(0, |w| w.before.width());
                        state.update(&b.project(&(0..width).collect::<Vec<_>>())?)?;
                        if !state.late_rows().is_empty() {
                            let all: Vec<usize> = (width..b.num_columns()).collect();
                            let idx = arrow::array::UInt32Array::from(state.late_rows().to_vec());
                            let taken = arrow::compute::take_record_batch(&b.project(&all)?, &idx)?;
                            let rows = Rows {
                                batch: late.project(&taken)?,
                                permits: Arc::new(Permits::none()),
                            };
                            self.late_out.push((epoch, Payload::Rows(rows)));
                        }
                    }
                }
            }
            Payload::Mark(mark) => {
                let Some(w) = watermarks.update(mark) else {
                    return Ok(());
                };
                let _ = sink_tx.send(SinkEvent::Watermark(w));
                if self.query.late.is_some() {
                    let mark = Mark {
                        from: self.subtask as u32,
                        watermark: w,
                    };
                    self.late_out.push((epoch, Payload::Mark(mark)));
                }
                if let pubsub_engine_spi::Watermark::EventTime(ns) = w {
                    for fired in state.advance(ns)? {
                        let batch = self.query.project(&fired)?;
                        if batch.num_rows() == 0 {
                            continue;
                        }
                        let _ = sink_tx.send(SinkEvent::Batch(Rows {
                            batch,
                            permits: Arc::new(Permits::none()),
                        }));
                    }
                }
            }
        }
        Ok(())
    }

    /// A join's input: rows of side `side` fold into its windows (an updating join's are
    /// joined at once and kept); a watermark may advance the join's, which fires and joins
    /// both sides' windows that it closed (or forgets an updating join's expired rows).
    fn take_joined(
        j: &mut Joined,
        query: &PlannedQuery,
        side: u8,
        payload: Payload,
        sink_tx: &UnboundedSender<SinkEvent>,
    ) -> anyhow::Result<()> {
        let side = usize::from(side).min(1);
        match payload {
            Payload::Rows(rows) => {
                // An updating join writes its rows as they match.
                match j.state.update(side, &rows.batch)? {
                    Some(joined) => write_joined(query, &joined, sink_tx),
                    None => Ok(()),
                }
            }
            Payload::Mark(mark) => {
                let Some(w) = j.marks[side].update(mark) else {
                    return Ok(());
                };
                j.at[side] = Some(w);
                let Some(w) = join_watermark(j.at) else {
                    return Ok(());
                };
                // Never backwards (an input back from idle below the other's).
                let forward = match w {
                    Watermark::EventTime(b) => j.highest.is_none_or(|a| b > a),
                    Watermark::Idle => j.sent != Some(Watermark::Idle),
                };
                if !forward {
                    return Ok(());
                }
                j.sent = Some(w);
                if let Watermark::EventTime(b) = w {
                    j.highest = Some(b);
                }
                let _ = sink_tx.send(SinkEvent::Watermark(w));
                let Watermark::EventTime(ns) = w else {
                    return Ok(());
                };
                match j.state.advance(ns)? {
                    Some(joined) => write_joined(query, &joined, sink_tx),
                    None => Ok(()),
                }
            }
        }
    }

    /// After each input: counts the rows found late, sets the state gauges and checks
    /// the state limit (`max_window_state_bytes`).
    fn account(&mut self) -> anyhow::Result<()> {
        let Some(state) = self.state.as_mut() else {
            return Ok(());
        };
        self.plumbing.late.add(state.take_late());
        let (groups, bytes, max) = (state.groups(), state.bytes(), self.plumbing.max_bytes);
        self.plumbing.groups.set(groups);
        self.plumbing.bytes.set(bytes);
        if bytes <= max {
            return Ok(());
        }
        let (what, held, way) = match (&self.query.window, &*state) {
            (Some(w), Held::Window(_)) if self.query.is_updating() => (
                w.text.as_str(),
                "groups of the updating aggregate",
                "keys fewer or 'changelog.state-ttl' shorter",
            ),
            (Some(w), Held::Window(_)) => (
                w.text.as_str(),
                "open windows",
                "windows shorter or keys fewer",
            ),
            (_, Held::Join(j)) if j.state.is_updating() => (
                self.query.text.as_str(),
                "kept rows of both sides of the join",
                "'changelog.state-ttl' shorter, or align the two tables' watermarks ('scan.watermark.alignment.group')",
            ),
            _ => (
                self.query.text.as_str(),
                "open windows of both sides of the join",
                "windows shorter or keys fewer",
            ),
        };
        Err(pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
            "{what}: the {held} of worker {} hold about {bytes} bytes in {groups} groups, over the limit of {max} (max_window_state_bytes, `--max-window-state-bytes`): raise it, or make {way}",
            self.subtask,
        )))
    }

    /// Snapshots epochs `next..k`: complete, and their input taken.
    fn snapshot_until(&mut self, k: u64) {
        if self.next >= k {
            return;
        }
        // The state is the same for each of these epochs: serialized once.
        let Some(state) = self.serialize(self.next) else {
            return;
        };
        while self.next < k {
            self.send(self.next, false, state.clone());
            self.next += 1;
        }
    }

    fn send_snapshot(&mut self, epoch: u64, through_end: bool) {
        if let Some(state) = self.serialize(epoch) {
            self.send(epoch, through_end, state);
        }
    }

    /// The state as JSON text; `None` when it failed (the job aborts) or could not be
    /// written (`epoch` names it in the error).
    fn serialize(&mut self, epoch: u64) -> Option<String> {
        let snapshot = match self.state.as_mut()? {
            Held::Window(s) => s.snapshot(),
            Held::Join(j) => j.state.snapshot(),
        };
        let snapshot =
            snapshot.and_then(|s| serde_json::to_string(&s).map_err(anyhow::Error::from));
        match snapshot {
            Ok(state) => Some(state),
            Err(e) => {
                self.fail(e.context(format!("the window's state of epoch {epoch}")));
                None
            }
        }
    }

    fn send(&self, epoch: u64, through_end: bool, state: String) {
        let _ = self.plumbing.coordinator.send(CoordEvent::WindowSnapshot {
            operator_id: self.plumbing.id.clone(),
            subtask: self.subtask,
            epoch,
            through_end,
            state,
        });
    }
}
