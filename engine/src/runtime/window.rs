//! The window operator's state (issue 32, items 3 and 5; decision 0039): per open window,
//! a map from group key (Arrow row bytes) to a slot, and one DataFusion
//! `GroupsAccumulator` per aggregate with a slot per group. Rows are folded in as they
//! arrive; a window fires once, when the watermark passes its end, writing one row per
//! group; a row for a window that has fired is late: counted and dropped.
//!
//! The dataflow (`dataflow.rs`) owns the epochs: it feeds rows and watermarks in epoch
//! order and snapshots the state when an epoch is complete, so a checkpoint holds exactly
//! the rows of the epochs it covers.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int64Array, RecordBatch, RecordBatchOptions,
    StringArray, StructArray, TimestampNanosecondArray, UInt32Array,
};
use arrow::compute::{cast_with_options, concat, take, CastOptions};
use arrow::datatypes::{DataType, Field, Schema, TimestampNanosecondType};
use arrow::row::{RowConverter, SortField};
use base64::Engine as _;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::GroupsAccumulatorAdapter;

use crate::spi::OperatorState;
use crate::sql::WindowPlan;

/// The subtask (of `peers`) that owns group key `key` (Arrow row bytes): every process
/// of the same binary computes the same.
pub(crate) fn owner(key: &[u8], peers: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() % peers.max(1)
}

/// The key converter of `plan`: one per operator and one per router, alike.
pub(crate) fn key_converter(plan: &WindowPlan) -> anyhow::Result<RowConverter> {
    let fields = plan.before.schema.fields()[..plan.keys]
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// Splits the rows of a window's first stage by the subtask owning their group key
/// (all to subtask 0 without keys). Order within a target is kept.
pub(crate) fn split_by_group(
    plan: &WindowPlan,
    converter: &RowConverter,
    batch: &RecordBatch,
    peers: u64,
) -> anyhow::Result<Vec<(u64, RecordBatch)>> {
    if plan.keys == 0 || peers == 1 {
        return Ok(vec![(0, batch.clone())]);
    }
    let rows = converter.convert_columns(&batch.columns()[..plan.keys])?;
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

/// One open window: its groups and their accumulators.
struct Bin {
    slots: HashMap<Box<[u8]>, u32>,
    keys: Vec<Box<[u8]>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// The state of one subtask of a window operator.
pub(crate) struct WindowState {
    plan: Arc<WindowPlan>,
    converter: RowConverter,
    /// Open windows by start (ns).
    bins: BTreeMap<i64, Bin>,
    /// The operator's watermark: windows ending at or before it have fired.
    watermark: Option<i64>,
    /// Rows dropped as late since the last call of [`take_late`](Self::take_late).
    late: u64,
    /// Groups over all open windows (the memory limit counts these).
    groups: u64,
}

fn accumulator(a: &Arc<AggregateFunctionExpr>) -> anyhow::Result<Box<dyn GroupsAccumulator>> {
    if a.groups_accumulator_supported() {
        return Ok(a.create_groups_accumulator()?);
    }
    let a = a.clone();
    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
        a.create_accumulator()
    })))
}

impl Bin {
    fn new(plan: &WindowPlan) -> anyhow::Result<Self> {
        Ok(Bin {
            slots: HashMap::new(),
            keys: Vec::new(),
            accumulators: plan
                .aggregates
                .iter()
                .map(accumulator)
                .collect::<anyhow::Result<_>>()?,
        })
    }

    /// The slot of `key`, new ones appended; whether it is new.
    fn slot(&mut self, key: &[u8]) -> (u32, bool) {
        if let Some(&s) = self.slots.get(key) {
            return (s, false);
        }
        let s = self.keys.len() as u32;
        let k: Box<[u8]> = key.into();
        self.slots.insert(k.clone(), s);
        self.keys.push(k);
        (s, true)
    }
}

impl WindowState {
    pub fn new(plan: Arc<WindowPlan>) -> anyhow::Result<Self> {
        Ok(WindowState {
            converter: key_converter(&plan)?,
            plan,
            bins: BTreeMap::new(),
            watermark: None,
            late: 0,
            groups: 0,
        })
    }

    /// Groups over all open windows.
    pub fn groups(&self) -> u64 {
        self.groups
    }

    /// Rows dropped as late since the last call.
    pub fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// Folds in rows of the window's first stage (`[keys.., arguments.., event time]`).
    /// A row whose window already fired is late: counted, not folded in (for HOP, a row
    /// is late when one of its windows fired; its open ones still take it).
    ///
    /// Errors: an aggregate failed on the rows (a bug guard for a NULL event time).
    pub fn update(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
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
        let width = self.plan.kind.width();
        // Rows of each window, by start.
        let mut by_window: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for r in 0..n {
            let t = ts.value(r);
            let mut late = false;
            for start in self.plan.kind.starts(t) {
                let end = start.saturating_add(width);
                if self.watermark.is_some_and(|w| end - 1 <= w) {
                    late = true;
                } else {
                    by_window.entry(start).or_default().push(r as u32);
                }
            }
            if late {
                self.late += 1;
            }
        }
        let args: Vec<Vec<ArrayRef>> = self
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
        for (start, rows) in by_window {
            let bin = match self.bins.entry(start) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(Bin::new(&self.plan)?),
            };
            let mut slots = Vec::with_capacity(rows.len());
            for &r in &rows {
                // Without keys, one group per window.
                let (s, new) = if self.plan.keys == 0 {
                    bin.slot(&[])
                } else {
                    bin.slot(keys.row(r as usize).as_ref())
                };
                self.groups += new as u64;
                slots.push(s as usize);
            }
            let idx = UInt32Array::from(rows);
            for (acc, values) in bin.accumulators.iter_mut().zip(&args) {
                let taken = values
                    .iter()
                    .map(|v| take(v.as_ref(), &idx, None))
                    .collect::<Result<Vec<_>, _>>()?;
                acc.update_batch(&taken, &slots, None, bin.keys.len())
                    .with_context(|| format!("{}: aggregate", self.plan.text))?;
            }
        }
        Ok(())
    }

    /// The watermark advanced to `w` (never backwards): fires every window ending at or
    /// before it, earliest first, one batch each (rows in key order), in the window's
    /// output schema.
    ///
    /// Errors: a result does not fit its column exactly (an integer `sum` overflowed).
    pub fn advance(&mut self, w: i64) -> anyhow::Result<Vec<RecordBatch>> {
        if self.watermark.is_some_and(|c| w <= c) {
            return Ok(Vec::new());
        }
        self.watermark = Some(w);
        let width = self.plan.kind.width();
        let mut out = Vec::new();
        while let Some((&start, _)) = self.bins.first_key_value() {
            let end = start.saturating_add(width);
            if end - 1 > w {
                break;
            }
            let bin = self.bins.remove(&start).expect("first exists");
            self.groups -= bin.keys.len() as u64;
            out.push(self.emit(start, end, bin)?);
        }
        Ok(out)
    }

    fn emit(&self, start: i64, end: i64, mut bin: Bin) -> anyhow::Result<RecordBatch> {
        let n = bin.keys.len();
        // Rows in key order: the same rows in the same order on every run.
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|a, b| bin.keys[*a as usize].cmp(&bin.keys[*b as usize]));
        let order = UInt32Array::from(order);
        let parser = self.converter.parser();
        let key_columns = self
            .converter
            .convert_rows(bin.keys.iter().map(|k| parser.parse(k)))?;
        let out = &self.plan.output;
        let window = window_column(out.field(self.plan.window_at).data_type(), start, end, n)?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut keys = key_columns.into_iter();
        let groups = self.plan.keys + 1;
        for i in 0..groups {
            if i == self.plan.window_at {
                columns.push(window.clone());
            } else {
                columns.push(keys.next().expect("one column per key"));
            }
        }
        let exact = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        for (k, acc) in bin.accumulators.iter_mut().enumerate() {
            let v = acc.evaluate(EmitTo::All)?;
            let field = out.field(groups + k);
            let v = if v.data_type() == field.data_type() {
                v
            } else {
                cast_with_options(&v, field.data_type(), &exact).map_err(|e| {
                    crate::spi::PermanentError::wrap(anyhow!(
                        "{}: `{}` of the window [{}, {}) does not fit {}: {e}",
                        self.plan.text,
                        field.name(),
                        ns_text(start),
                        ns_text(end),
                        field.data_type()
                    ))
                })?
            };
            columns.push(v);
        }
        if out.fields().len() > columns.len() {
            let hex = |k: &[u8]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let ids: StringArray = bin
                .keys
                .iter()
                .map(|k| Some(format!("window/{start}/{end}/{}", hex(k))))
                .collect();
            columns.push(Arc::new(ids));
        }
        let columns = columns
            .iter()
            .map(|c| take(c.as_ref(), &order, None))
            .collect::<Result<Vec<_>, _>>()?;
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            out.clone(),
            columns,
            &opts,
        )?)
    }

    /// The state as an [`OperatorState`]: `watermark` (ns or null) and `windows` (Arrow
    /// IPC, base64: a row per open group-window with its start, key bytes and each
    /// aggregate's partial state, which `merge_batch` reads back).
    pub fn snapshot(&mut self) -> anyhow::Result<OperatorState> {
        let mut state = OperatorState::default();
        state
            .values
            .insert("watermark".into(), serde_json::json!(self.watermark));
        if self.bins.is_empty() {
            return Ok(state);
        }
        let mut starts: Vec<i64> = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut parts: Vec<Vec<ArrayRef>> = Vec::new();
        for (&start, bin) in self.bins.iter_mut() {
            let n = bin.keys.len();
            starts.extend(std::iter::repeat_n(start, n));
            keys.extend(bin.keys.iter().map(|k| k.as_ref()));
            let mut cols = Vec::new();
            for (acc, a) in bin.accumulators.iter_mut().zip(&self.plan.aggregates) {
                // `state` drains: merge it back into a fresh accumulator.
                let s = acc.state(EmitTo::All)?;
                let mut fresh = accumulator(a)?;
                let all: Vec<usize> = (0..n).collect();
                fresh.merge_batch(&s, &all, None, n)?;
                *acc = fresh;
                cols.extend(s);
            }
            parts.push(cols);
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(starts)),
            Arc::new(BinaryArray::from(keys)),
        ];
        for c in 0..parts[0].len() {
            let pieces: Vec<&dyn Array> = parts.iter().map(|p| p[c].as_ref()).collect();
            columns.push(concat(&pieces)?);
        }
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let mut buf = Vec::new();
        {
            let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &schema)?;
            w.write(&batch)?;
            w.finish()?;
        }
        state.values.insert(
            "windows".into(),
            serde_json::json!(base64::engine::general_purpose::STANDARD.encode(buf)),
        );
        Ok(state)
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
        for s in states {
            if let Some(w) = s.values.get("watermark").and_then(|v| v.as_i64()) {
                self.watermark = Some(self.watermark.map_or(w, |c| c.min(w)));
            }
            let Some(text) = s.values.get("windows").and_then(|v| v.as_str()) else {
                continue;
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .context("window state is not base64")?;
            let reader = arrow::ipc::reader::StreamReader::try_new(&bytes[..], None)?;
            for batch in reader {
                self.merge_state(&batch?, subtask, peers)?;
            }
        }
        Ok(())
    }

    fn merge_state(&mut self, batch: &RecordBatch, subtask: u64, peers: u64) -> anyhow::Result<()> {
        let starts = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let keys = batch.column(1).as_binary::<i32>();
        let mut by_window: BTreeMap<i64, (Vec<u32>, Vec<usize>)> = BTreeMap::new();
        for r in 0..batch.num_rows() {
            let key = keys.value(r);
            if owner(key, peers) != subtask && self.plan.keys > 0 {
                continue;
            }
            if self.plan.keys == 0 && subtask != 0 {
                continue;
            }
            let start = starts.value(r);
            let bin = match self.bins.entry(start) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(Bin::new(&self.plan)?),
            };
            let (slot, new) = bin.slot(key);
            self.groups += new as u64;
            let e = by_window.entry(start).or_default();
            e.0.push(r as u32);
            e.1.push(slot as usize);
        }
        for (start, (rows, slots)) in by_window {
            let bin = self.bins.get_mut(&start).expect("created above");
            let idx = UInt32Array::from(rows);
            let mut col = 2;
            for (acc, a) in bin.accumulators.iter_mut().zip(&self.plan.aggregates) {
                let k = a.state_fields()?.len();
                let values = (col..col + k)
                    .map(|c| take(batch.column(c).as_ref(), &idx, None))
                    .collect::<Result<Vec<_>, _>>()?;
                col += k;
                acc.merge_batch(&values, &slots, None, bin.keys.len())?;
            }
        }
        Ok(())
    }
}

/// The window column: `n` times `{start, end}`.
fn window_column(t: &DataType, start: i64, end: i64, n: usize) -> anyhow::Result<ArrayRef> {
    let DataType::Struct(fields) = t else {
        return Err(anyhow!("the window column is {t}, not a STRUCT"));
    };
    let s: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![start; n]));
    let e: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![end; n]));
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
