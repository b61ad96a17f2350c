//! The window operator's state (issue 32, items 3 and 5; decisions 0039 and 0040): rows
//! are folded into DataFusion accumulators per group and window as they arrive; a window
//! fires once, when the watermark passes its end, writing one row per group; a row for a
//! window that has fired is late: counted and dropped.
//!
//! [`fixed`] holds TUMBLE and HOP windows (one `GroupsAccumulator` per aggregate and
//! window start, a slot per group), [`session`] SESSION windows (one `Accumulator` per
//! aggregate and session, merged when a row bridges two sessions).
//!
//! The dataflow (`dataflow.rs`) owns the epochs: it feeds rows and watermarks in epoch
//! order and snapshots the state when an epoch is complete, so a checkpoint holds exactly
//! the rows of the epochs it covers.

mod fixed;
mod rank;
mod retract;
mod session;
mod stage;
mod updating;

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StringArray, StructArray,
    TimestampNanosecondArray, UInt32Array,
};
use arrow::compute::{cast_with_options, take, CastOptions};
use arrow::datatypes::{DataType, Field, Schema, TimestampNanosecondType};
use arrow::row::{RowConverter, Rows, SortField};
use base64::Engine as _;

use pubsub_engine_spi::OperatorState;
pub use rank::{window_expr, BoundWindowFunction, RankPlan};
pub use stage::{WindowKind, WindowPlan};
pub use updating::{changelog_schema, Changes, SinkRows};

/// An updating aggregate's snapshot: the sink columns its written rows are encoded for.
const SINK_COLUMNS: &str = "sink_columns";

/// Processing time in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The subtask (of `peers`) that owns group key `key` (Arrow row bytes): every process
/// of the same binary computes the same.
pub fn owner(key: &[u8], peers: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() % peers.max(1)
}

/// The key converter of `plan`: one per operator and one per router, alike.
pub fn key_converter(plan: &WindowPlan) -> anyhow::Result<RowConverter> {
    let fields = plan.before.schema.fields()[..plan.keys]
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// The converter of the columns `plan`'s rows are routed by ([`WindowPlan::route_columns`]):
/// one per router.
pub fn route_converter(plan: &WindowPlan) -> anyhow::Result<RowConverter> {
    let fields = plan
        .route_columns()
        .into_iter()
        .map(|i| SortField::new(plan.before.schema.field(i).data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// Splits the rows of a window's first stage by the subtask owning their group key (its
/// routed columns, [`WindowPlan::route_columns`]; all to subtask 0 without any), with
/// `converter` from [`route_converter`]. Order within a target is kept.
pub fn split_by_group(
    plan: &WindowPlan,
    converter: &RowConverter,
    batch: &RecordBatch,
    peers: u64,
) -> anyhow::Result<Vec<(u64, RecordBatch)>> {
    let route = plan.route_columns();
    if route.is_empty() || peers == 1 {
        return Ok(vec![(0, batch.clone())]);
    }
    let columns: Vec<ArrayRef> = route.iter().map(|&i| batch.column(i).clone()).collect();
    let rows = converter.convert_columns(&columns)?;
    let mut by: Vec<Vec<u32>> = vec![Vec::new(); peers as usize];
    for (i, r) in rows.iter().enumerate() {
        by[owner(r.as_ref(), peers) as usize].push(i as u32);
    }
    let mut out = Vec::new();
    for (t, idx) in by.into_iter().enumerate() {
        if idx.is_empty() {
            continue;
        }
        let idx = UInt32Array::from(idx);
        out.push((t as u64, arrow::compute::take_record_batch(batch, &idx)?));
    }
    Ok(out)
}

/// The state of one subtask of a window operator.
pub struct WindowState {
    shared: Shared,
    store: Store,
}

enum Store {
    Fixed(fixed::Bins),
    Session(session::Sessions),
    Updating(updating::Groups),
}

/// What both kinds of window keep alike.
struct Shared {
    plan: Arc<WindowPlan>,
    converter: RowConverter,
    /// The operator's watermark: windows ending at or before it have fired.
    watermark: Option<i64>,
    /// Rows dropped as late since the last call of [`WindowState::take_late`].
    late: u64,
    /// Their indexes in the batch of the last `update`, when the table writes late rows to
    /// a table (`scan.late-rows.table`).
    late_rows: Option<Vec<u32>>,
    /// The routed key columns and their converter, when the plan routes by some keys only.
    route: Option<(Vec<usize>, RowConverter)>,
}

/// A batch of the window's first stage, read: event times, group keys and the
/// aggregates' arguments (per aggregate, per argument).
struct Input {
    times: Vec<i64>,
    keys: Rows,
    args: Vec<Vec<ArrayRef>>,
    /// A retracting plan's rows: true for a row to retract (a change's old row).
    retract: Option<Vec<bool>>,
}

impl WindowState {
    pub fn new(plan: Arc<WindowPlan>) -> anyhow::Result<Self> {
        let store = match plan.kind {
            WindowKind::Session { gap } => Store::Session(session::Sessions::new(gap)),
            WindowKind::Updating { interval, ttl } => {
                Store::Updating(updating::Groups::new(interval, ttl))
            }
            _ => Store::Fixed(fixed::Bins::default()),
        };
        Ok(WindowState {
            shared: Shared {
                converter: key_converter(&plan)?,
                route: match &plan.route {
                    Some(r) => Some((r.clone(), route_converter(&plan)?)),
                    None => None,
                },
                late_rows: plan.before.keep_source.then(Vec::new),
                plan,
                watermark: None,
                late: 0,
            },
            store,
        })
    }

    /// Open groups over all open windows (one per group and window; per session for
    /// SESSION windows).
    pub fn groups(&self) -> u64 {
        match &self.store {
            Store::Fixed(b) => b.groups(),
            Store::Session(s) => s.groups(),
            Store::Updating(u) => u.groups(),
        }
    }

    /// An estimate of the memory the open windows hold, in bytes: key bytes, the
    /// accumulators' own `size()` and a measured overhead per group (decision 0039).
    pub fn bytes(&self) -> u64 {
        match &self.store {
            Store::Fixed(b) => b.bytes(),
            Store::Session(s) => s.bytes(),
            Store::Updating(u) => u.bytes(),
        }
    }

    /// Rows dropped as late since the last call.
    pub fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.shared.late)
    }

    /// The indexes of the rows of the last `update` that were late, in batch order
    /// (empty unless the plan's first stage keeps the source row).
    pub fn late_rows(&self) -> &[u32] {
        self.shared.late_rows.as_deref().unwrap_or_default()
    }

    /// Folds in rows of the window's first stage (`[keys.., arguments.., event time]`).
    /// A row is late when a window it belongs to has fired: counted, not folded into that
    /// window (for HOP, its open windows still take it; for SESSION, a row at or before
    /// the watermark is late, since it could join a session that fired).
    ///
    /// Errors: an aggregate failed on the rows, or a row has no event time (a bug guard:
    /// the source refuses such rows).
    pub fn update(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        self.update_at(batch, now_ms())
    }

    /// [`update`](Self::update) at processing time `now` (ms since the Unix epoch): when
    /// an updating aggregate's groups were last reached, for their TTL.
    pub fn update_at(&mut self, batch: &RecordBatch, now: i64) -> anyhow::Result<()> {
        if let Some(rows) = &mut self.shared.late_rows {
            rows.clear();
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let input = self.shared.read(batch)?;
        match &mut self.store {
            Store::Fixed(b) => b.update(&mut self.shared, &input),
            Store::Session(s) => s.update(&mut self.shared, &input),
            Store::Updating(u) => u.update(&self.shared, &input, now),
        }
    }

    /// The watermark advanced to `w` (never backwards): fires every window ending at or
    /// before it, in the window's output schema, the same rows in the same order on every
    /// run (TUMBLE and HOP: a batch per window, earliest first, rows in key order;
    /// SESSION: one batch, by end, then key).
    ///
    /// Errors: a result does not fit its column exactly (an integer `sum` overflowed).
    pub fn advance(&mut self, w: i64) -> anyhow::Result<Vec<RecordBatch>> {
        if self.shared.watermark.is_some_and(|c| w <= c) {
            return Ok(Vec::new());
        }
        self.shared.watermark = Some(w);
        let fired = match &mut self.store {
            Store::Fixed(b) => b.advance(&self.shared, w)?,
            Store::Session(s) => s.advance(&self.shared, w)?,
            // Its changes are written by `flush`, at an interval.
            Store::Updating(_) => Vec::new(),
        };
        let plan = &self.shared.plan;
        match &plan.rank {
            None => Ok(fired),
            Some(r) => fired.iter().map(|b| r.rank(b, &plan.text)).collect(),
        }
    }

    /// An updating aggregate: whether its changes are due (`interval` passed since the
    /// last [`flush`](Self::flush) and a group changed), and when the next one is, in ms
    /// of processing time. `None` for a window.
    pub fn flush_due(&self, now_ms: i64) -> Option<(bool, i64)> {
        match &self.store {
            Store::Updating(u) => Some(u.due(now_ms)),
            _ => None,
        }
    }

    /// An updating aggregate: writes the change of every group whose row changed since
    /// the last flush, when the interval passed or with `force` (see [`updating`]), and
    /// forgets groups idle longer than the TTL when a look for them is due;
    /// `None` when nothing changed (and always for a window). `sink_rows` turns rows of
    /// the aggregate's output into the sink table's rows (`sink`, without a record id;
    /// see [`SinkRows`]). With `record_keys`, each change also gets its record key.
    ///
    /// Errors (permanent): a result does not fit its column, or `sink_rows` failed.
    pub fn flush(
        &mut self,
        now_ms: i64,
        sink: &arrow::datatypes::SchemaRef,
        record_keys: bool,
        sink_rows: updating::SinkRows<'_>,
        force: bool,
    ) -> anyhow::Result<Option<updating::Changes>> {
        match &mut self.store {
            Store::Updating(u) => {
                u.flush(&self.shared, now_ms, sink, record_keys, sink_rows, force)
            }
            _ => Ok(None),
        }
    }

    /// The state as an [`OperatorState`]: `watermark` (ns or null) and the open windows
    /// (Arrow IPC, base64: a row per open group-window with its bounds, key bytes and each
    /// aggregate's partial state, which `merge_batch` reads back).
    pub fn snapshot(&mut self) -> anyhow::Result<OperatorState> {
        let mut state = OperatorState::default();
        state
            .values
            .insert("watermark".into(), serde_json::json!(self.shared.watermark));
        if let Some(c) = match &self.store {
            Store::Updating(u) => u.columns(),
            _ => None,
        } {
            state
                .values
                .insert(SINK_COLUMNS.into(), serde_json::json!(c));
        }
        let (name, batch) = match &mut self.store {
            Store::Fixed(b) => (fixed::STATE, b.snapshot(&self.shared)?),
            Store::Session(s) => (session::STATE, s.snapshot(&self.shared)?),
            Store::Updating(u) => (updating::STATE, u.snapshot(&self.shared)?),
        };
        if let Some(batch) = batch {
            state
                .values
                .insert(name.into(), serde_json::json!(encode(&batch)?));
        }
        Ok(state)
    }

    /// An updating aggregate starts a run: `generation` (a value no other run of the job
    /// uses) goes into its record keys, and with `restarted` (a run before may have
    /// written changes after its last checkpoint) every group's next flush writes its row
    /// (see [`updating`]). Call after [`restore`](Self::restore).
    pub fn start_run(&mut self, generation: u64, restarted: bool) {
        if let Store::Updating(u) = &mut self.store {
            u.start_run(generation, restarted);
        }
    }

    /// Restores the groups this subtask (`subtask` of `peers`) owns from the snapshots of
    /// every subtask of the last checkpoint (any number of them: a restore onto another
    /// number of workers redistributes the groups), and the lowest of their watermarks.
    pub fn restore(
        &mut self,
        states: &[OperatorState],
        subtask: u64,
        peers: u64,
    ) -> anyhow::Result<()> {
        let name = match &self.store {
            Store::Fixed(_) => fixed::STATE,
            Store::Session(_) => session::STATE,
            Store::Updating(_) => updating::STATE,
        };
        for s in states {
            // A join's snapshot holds its sides apart (`join.rs`): not this query's state.
            if s.values.contains_key("left") || s.values.contains_key("right") {
                return Err(anyhow!(
                    "{}: the checkpoint holds a join's state under this query's id, not a window's: the pipeline changed; start a new job (another --job-id or state directory)",
                    self.shared.plan.text
                ));
            }
            if let (Store::Updating(u), Some(c)) = (
                &mut self.store,
                s.values.get(SINK_COLUMNS).and_then(|v| v.as_str()),
            ) {
                u.restore_columns(c);
            }
            if let Some(w) = s.values.get("watermark").and_then(|v| v.as_i64()) {
                let c = &mut self.shared.watermark;
                *c = Some(c.map_or(w, |c| c.min(w)));
            }
            let Some(text) = s.values.get(name).and_then(|v| v.as_str()) else {
                continue;
            };
            for batch in decode(text)? {
                let undecoded = std::cell::Cell::new(false);
                let mine = |key: &[u8]| match self.shared.owner_of(key, peers) {
                    Some(o) => o == subtask,
                    None => {
                        undecoded.set(true);
                        false
                    }
                };
                match &mut self.store {
                    Store::Fixed(b) => b.merge_state(&self.shared, &batch, mine)?,
                    Store::Session(s) => s.merge_state(&self.shared, &batch, mine)?,
                    Store::Updating(u) => u.merge_state(&self.shared, &batch, mine)?,
                }
                if undecoded.get() {
                    return Err(anyhow!(
                        "{}: a group key in the checkpoint is not one of this query's keys",
                        self.shared.plan.text
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Shared {
    /// The subtask (of `peers`) the router sends the rows of group key `key` (its row
    /// bytes) to: by the routed columns alone when the plan routes by some keys.
    /// `None`: the key does not decode as this plan's (a bug guard).
    fn owner_of(&self, key: &[u8], peers: u64) -> Option<u64> {
        if self.plan.keys == 0 {
            return Some(0);
        }
        let Some((columns, converter)) = &self.route else {
            return Some(owner(key, peers));
        };
        if columns.is_empty() {
            return Some(0);
        }
        let parser = self.converter.parser();
        let row = parser.parse(key);
        let routed = self.converter.convert_rows([row]).and_then(|all| {
            converter.convert_columns(&columns.iter().map(|&i| all[i].clone()).collect::<Vec<_>>())
        });
        routed.ok().map(|r| owner(r.row(0).as_ref(), peers))
    }

    /// Counts row `r` of the batch being folded in as late.
    fn late_row(&mut self, r: usize) {
        self.late += 1;
        if let Some(rows) = &mut self.late_rows {
            rows.push(r as u32);
        }
    }

    fn read(&self, batch: &RecordBatch) -> anyhow::Result<Input> {
        let n = batch.num_rows();
        let ts = batch
            .column(batch.num_columns() - 1)
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| anyhow!("{}: event time is not a TIMESTAMP", self.plan.text))?;
        if ts.null_count() > 0 {
            return Err(anyhow!("{}: a row has no event time", self.plan.text));
        }
        let keys = self
            .converter
            .convert_columns(&batch.columns()[..self.plan.keys])?;
        let args = self
            .plan
            .aggregates
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<datafusion_common::Result<Vec<_>>>()
            })
            .collect::<datafusion_common::Result<_>>()
            .with_context(|| format!("{}: the aggregates' arguments", self.plan.text))?;
        let retract = match self.plan.retracting {
            false => None,
            true => {
                let r = batch
                    .column(batch.num_columns() - 2)
                    .as_boolean_opt()
                    .filter(|r| r.null_count() == 0)
                    .ok_or_else(|| {
                        anyhow!("{}: the rows do not say which retract", self.plan.text)
                    })?;
                Some(r.iter().map(|v| v == Some(true)).collect())
            }
        };
        Ok(Input {
            times: ts.values().to_vec(),
            keys,
            args,
            retract,
        })
    }

    /// A group's key bytes (empty without keys: one group per window).
    fn key<'a>(&self, input: &'a Input, row: usize) -> &'a [u8] {
        if self.plan.keys == 0 {
            &[]
        } else {
            input.keys.row(row).data()
        }
    }

    /// Casts aggregate `k`'s results to its output column exactly; `window` names the
    /// window in the error.
    ///
    /// Errors (permanent): a value does not fit (an integer `sum` overflowed).
    fn exact(
        &self,
        k: usize,
        v: ArrayRef,
        window: impl Fn() -> String,
    ) -> anyhow::Result<ArrayRef> {
        let at = usize::from(self.plan.window_at.is_some());
        let field = self.plan.output.field(self.plan.keys + at + k);
        if v.data_type() == field.data_type() {
            return Ok(v);
        }
        let exact = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        cast_with_options(&v, field.data_type(), &exact).map_err(|e| {
            pubsub_engine_spi::PermanentError::wrap(anyhow!(
                "{}: `{}` of {} does not fit {}: {e}",
                self.plan.text,
                field.name(),
                window(),
                field.data_type()
            ))
        })
    }

    /// The rows of fired groups in the output schema: row `i` is group `keys[i]` of the
    /// window `[starts[i], ends[i])` with aggregate values `values[..][i]` (of the output
    /// types), written in the order `order`.
    fn output(
        &self,
        keys: &[&[u8]],
        starts: Vec<i64>,
        ends: Vec<i64>,
        values: Vec<ArrayRef>,
        order: &UInt32Array,
    ) -> anyhow::Result<RecordBatch> {
        let n = keys.len();
        let parser = self.converter.parser();
        let key_columns = self
            .converter
            .convert_rows(keys.iter().map(|k| parser.parse(k)))?;
        let out = &self.plan.output;
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut key_columns = key_columns.into_iter();
        let window = usize::from(self.plan.window_at.is_some());
        for i in 0..self.plan.keys + window {
            if Some(i) == self.plan.window_at {
                let t = out.field(i).data_type();
                columns.push(window_column(t, &starts, &ends)?);
            } else {
                columns.push(key_columns.next().expect("one column per key"));
            }
        }
        columns.extend(values);
        if out.fields().len() > columns.len() {
            let hex = |k: &[u8]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let ids: StringArray = (0..n)
                .map(|i| Some(format!("window/{}/{}/{}", starts[i], ends[i], hex(keys[i]))))
                .collect();
            columns.push(Arc::new(ids));
        }
        let columns = columns
            .iter()
            .map(|c| take(c.as_ref(), order, None))
            .collect::<Result<Vec<_>, _>>()?;
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            out.clone(),
            columns,
            &opts,
        )?)
    }
}

/// The window column: `{start, end}` per row.
fn window_column(t: &DataType, starts: &[i64], ends: &[i64]) -> anyhow::Result<ArrayRef> {
    let DataType::Struct(fields) = t else {
        return Err(anyhow!("the window column is {t}, not a STRUCT"));
    };
    let s: ArrayRef = Arc::new(TimestampNanosecondArray::from(starts.to_vec()));
    let e: ArrayRef = Arc::new(TimestampNanosecondArray::from(ends.to_vec()));
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        vec![s, e],
        None,
    )?))
}

/// Nanoseconds since the epoch as RFC 3339 text (UTC), for messages.
fn ns_text(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%Y-%m-%dT%H:%M:%S%.fZ")
        .to_string()
}

/// Aggregate `a`'s partial state in `acc` (DataFusion's `state()`, which may drain the
/// accumulator: the state is merged back into a fresh one, which replaces it).
fn take_state(
    acc: &mut Box<dyn datafusion_expr::Accumulator>,
    make: impl Fn() -> datafusion_common::Result<Box<dyn datafusion_expr::Accumulator>>,
) -> anyhow::Result<Vec<datafusion_common::ScalarValue>> {
    let state = acc.state()?;
    let arrays = state
        .iter()
        .map(|v| v.to_array())
        .collect::<Result<Vec<_>, _>>()?;
    let mut again = make()?;
    again.merge_batch(&arrays)?;
    *acc = again;
    Ok(state)
}

/// One column per position of `rows` (rows of scalars, all of one width).
fn scalar_columns(rows: &[Vec<datafusion_common::ScalarValue>]) -> anyhow::Result<Vec<ArrayRef>> {
    let width = rows.first().map_or(0, |r| r.len());
    (0..width)
        .map(|c| {
            Ok(datafusion_common::ScalarValue::iter_to_array(
                rows.iter().map(|r| r[c].clone()),
            )?)
        })
        .collect()
}

/// A batch of `columns` (named `c0`, `c1`, ...).
fn state_batch(columns: Vec<ArrayRef>) -> anyhow::Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `batch` as Arrow IPC stream bytes in base64.
pub(crate) fn encode(batch: &RecordBatch) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(buf))
}

pub(crate) fn decode(text: &str) -> anyhow::Result<Vec<RecordBatch>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .context("window state is not base64")?;
    let reader = arrow::ipc::reader::StreamReader::try_new(&bytes[..], None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}
