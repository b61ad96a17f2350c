//! TUMBLE and HOP windows: per open window (by start), a map from group key to a slot and
//! one DataFusion `GroupsAccumulator` per aggregate with a slot per group.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::Context;
use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat, take};
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::GroupsAccumulatorAdapter;

use super::{ns_text, state_batch, Input, Shared};
use crate::window::WindowPlan;

/// The key of the state in a snapshot: rows `[start, key, states..]`.
pub(super) const STATE: &str = "windows";

/// What a group costs besides its key bytes and accumulator slots: its entry in the key
/// map and the key list (measured 42–61 B for a `BIGINT` key with its 9 key bytes,
/// decision 0039).
const GROUP_OVERHEAD: usize = 48;

/// One open window: its groups and their accumulators.
struct Bin {
    slots: HashMap<Box<[u8]>, u32>,
    keys: Vec<Box<[u8]>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// Bytes of the keys.
    key_bytes: usize,
    /// The estimate of [`Bin::bytes`] when it was last taken.
    bytes: usize,
}

/// The open windows of a subtask, by start (ns).
#[derive(Default)]
pub(super) struct Bins {
    bins: BTreeMap<i64, Bin>,
    /// Groups over all open windows.
    groups: u64,
    /// The bytes estimate over all open windows.
    bytes: u64,
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
            key_bytes: 0,
            bytes: 0,
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
        self.key_bytes += key.len();
        let k: Box<[u8]> = key.into();
        self.slots.insert(k.clone(), s);
        self.keys.push(k);
        (s, true)
    }
}

impl Bin {
    /// The memory estimate: keys, their map entries, the accumulators' own `size()`.
    fn estimate(&self) -> usize {
        self.key_bytes
            + self.keys.len() * GROUP_OVERHEAD
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }
}

impl Bins {
    pub fn groups(&self) -> u64 {
        self.groups
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes the estimate of window `start` again after a change.
    fn measure(&mut self, start: i64) {
        let bin = self.bins.get_mut(&start).expect("measured windows exist");
        let now = bin.estimate();
        self.bytes = self.bytes - bin.bytes as u64 + now as u64;
        bin.bytes = now;
    }

    fn bin(&mut self, plan: &WindowPlan, start: i64) -> anyhow::Result<&mut Bin> {
        Ok(match self.bins.entry(start) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(Bin::new(plan)?),
        })
    }

    pub fn update(&mut self, shared: &mut Shared, input: &Input) -> anyhow::Result<()> {
        let plan = shared.plan.clone();
        let width = plan.kind.width();
        // Rows of each window, by start.
        let mut by_window: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for (r, &t) in input.times.iter().enumerate() {
            let mut late = false;
            for start in plan.kind.starts(t) {
                let end = start.saturating_add(width);
                if shared.watermark.is_some_and(|w| end - 1 <= w) {
                    late = true;
                } else {
                    by_window.entry(start).or_default().push(r as u32);
                }
            }
            if late {
                shared.late_row(r);
            }
        }
        for (start, rows) in by_window {
            let bin = self.bin(&plan, start)?;
            let mut added = 0;
            let mut slots = Vec::with_capacity(rows.len());
            for &r in &rows {
                let (s, new) = bin.slot(shared.key(input, r as usize));
                added += new as u64;
                slots.push(s as usize);
            }
            let idx = UInt32Array::from(rows);
            for (acc, values) in bin.accumulators.iter_mut().zip(&input.args) {
                let taken = values
                    .iter()
                    .map(|v| take(v.as_ref(), &idx, None))
                    .collect::<Result<Vec<_>, _>>()?;
                acc.update_batch(&taken, &slots, None, bin.keys.len())
                    .with_context(|| format!("{}: aggregate", plan.text))?;
            }
            self.groups += added;
            self.measure(start);
        }
        Ok(())
    }

    /// Fires every window ending at or before `w`, earliest first, one batch each.
    pub fn advance(&mut self, shared: &Shared, w: i64) -> anyhow::Result<Vec<RecordBatch>> {
        let width = shared.plan.kind.width();
        let mut out = Vec::new();
        while let Some((&start, _)) = self.bins.first_key_value() {
            let end = start.saturating_add(width);
            if end - 1 > w {
                break;
            }
            let bin = self.bins.remove(&start).expect("first exists");
            self.groups -= bin.keys.len() as u64;
            self.bytes -= bin.bytes as u64;
            out.push(emit(shared, start, end, bin)?);
        }
        Ok(out)
    }

    /// Rows `[start, key, each aggregate's state..]`, `None` without open windows.
    pub fn snapshot(&mut self, shared: &Shared) -> anyhow::Result<Option<RecordBatch>> {
        if self.bins.is_empty() {
            return Ok(None);
        }
        let mut starts: Vec<i64> = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut parts: Vec<Vec<ArrayRef>> = Vec::new();
        for (&start, bin) in self.bins.iter_mut() {
            let n = bin.keys.len();
            starts.extend(std::iter::repeat_n(start, n));
            keys.extend(bin.keys.iter().map(|k| k.as_ref()));
            let mut cols = Vec::new();
            for (acc, a) in bin.accumulators.iter_mut().zip(&shared.plan.aggregates) {
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
        Ok(Some(state_batch(columns)?))
    }

    /// Merges in the rows of a snapshot whose key `mine` says this subtask owns.
    pub fn merge_state(
        &mut self,
        shared: &Shared,
        batch: &RecordBatch,
        mine: impl Fn(&[u8]) -> bool,
    ) -> anyhow::Result<()> {
        let plan = &shared.plan;
        let starts = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let keys = batch.column(1).as_binary::<i32>();
        let mut by_window: BTreeMap<i64, (Vec<u32>, Vec<usize>)> = BTreeMap::new();
        for r in 0..batch.num_rows() {
            let key = keys.value(r);
            if !mine(key) {
                continue;
            }
            let start = starts.value(r);
            let (slot, new) = self.bin(plan, start)?.slot(key);
            self.groups += new as u64;
            let e = by_window.entry(start).or_default();
            e.0.push(r as u32);
            e.1.push(slot as usize);
        }
        for (start, (rows, slots)) in by_window {
            let bin = self.bins.get_mut(&start).expect("created above");
            let idx = UInt32Array::from(rows);
            let mut col = 2;
            for (acc, a) in bin.accumulators.iter_mut().zip(&plan.aggregates) {
                let k = a.state_fields()?.len();
                let values = (col..col + k)
                    .map(|c| take(batch.column(c).as_ref(), &idx, None))
                    .collect::<Result<Vec<_>, _>>()?;
                col += k;
                acc.merge_batch(&values, &slots, None, bin.keys.len())?;
            }
            self.measure(start);
        }
        Ok(())
    }
}

/// The rows of window `[start, end)`, in key order.
fn emit(shared: &Shared, start: i64, end: i64, mut bin: Bin) -> anyhow::Result<RecordBatch> {
    let n = bin.keys.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|a, b| bin.keys[*a as usize].cmp(&bin.keys[*b as usize]));
    let mut values = Vec::new();
    for (k, acc) in bin.accumulators.iter_mut().enumerate() {
        let v = acc.evaluate(EmitTo::All)?;
        values.push(shared.exact(k, v, || {
            format!("the window [{}, {})", ns_text(start), ns_text(end))
        })?);
    }
    let keys: Vec<&[u8]> = bin.keys.iter().map(|k| k.as_ref()).collect();
    shared.output(
        &keys,
        vec![start; n],
        vec![end; n],
        values,
        &UInt32Array::from(order),
    )
}
