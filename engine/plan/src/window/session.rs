//! SESSION windows: per group key, the open sessions (disjoint, by start), each with one
//! DataFusion `Accumulator` per aggregate. A row at time `t` opens `[t, t + gap)`; every
//! open session of its key that this overlaps merges with it (their partial states are
//! merged with `merge_batch`), so a session ends `gap` after its last row. A session fires
//! when the watermark passes its end.
//!
//! A row at or before the watermark is late: a session that fired ended at or before the
//! watermark, so only such a row could belong to one. Rows after it never reach a fired
//! session, which makes the sessions of the rows taken independent of their order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Context;
use arrow::array::{ArrayRef, AsArray, BinaryArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat, take};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;

use super::{ns_text, scalar_columns, state_batch, take_state, Input, Shared};

/// The key of the state in a snapshot: rows `[start, end, key, states..]`.
pub(super) const STATE: &str = "sessions";

/// What a session costs besides its key bytes (held twice) and its accumulators' own
/// `size()`: its entries in the two indexes and the accumulators' boxes (an estimate from
/// the layouts: two B-tree entries of 24–40 B with their share of the nodes, a vector,
/// a box per aggregate).
const SESSION_OVERHEAD: usize = 160;

/// One open session of a key.
struct Session {
    end: i64,
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Its memory estimate when last taken.
    bytes: usize,
}

/// The open sessions of a subtask.
pub(super) struct Sessions {
    gap: i64,
    /// Per key, its sessions by start (ns).
    by_key: HashMap<Box<[u8]>, BTreeMap<i64, Session>>,
    /// Every open session as `(end, key, start)`: the firing order.
    by_end: BTreeSet<(i64, Box<[u8]>, i64)>,
    /// The memory estimate over all open sessions.
    bytes: u64,
}

impl Sessions {
    pub fn new(gap: i64) -> Self {
        Sessions {
            gap,
            by_key: HashMap::new(),
            by_end: BTreeSet::new(),
            bytes: 0,
        }
    }

    pub fn groups(&self) -> u64 {
        self.by_end.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn update(&mut self, shared: &mut Shared, input: &Input) -> anyhow::Result<()> {
        // Rows taken, per key, by time.
        let mut by_key: HashMap<&[u8], Vec<(i64, u32)>> = HashMap::new();
        for (r, &t) in input.times.iter().enumerate() {
            if shared.watermark.is_some_and(|w| t <= w) {
                shared.late_row(r);
                continue;
            }
            by_key
                .entry(shared.key(input, r))
                .or_default()
                .push((t, r as u32));
        }
        let mut keys: Vec<_> = by_key.into_iter().collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, mut rows) in keys {
            rows.sort_unstable();
            // Runs of rows less than `gap` apart: one session each, before the merge.
            let mut i = 0;
            while i < rows.len() {
                let start = rows[i].0;
                let mut end = start.saturating_add(self.gap);
                let mut j = i + 1;
                while j < rows.len() && rows[j].0 < end {
                    end = rows[j].0.saturating_add(self.gap);
                    j += 1;
                }
                let idx = UInt32Array::from_iter_values(rows[i..j].iter().map(|r| r.1));
                self.absorb(shared, key, start, end, |accs| {
                    for (acc, values) in accs.iter_mut().zip(&input.args) {
                        let taken = values
                            .iter()
                            .map(|v| take(v.as_ref(), &idx, None))
                            .collect::<Result<Vec<_>, _>>()?;
                        acc.update_batch(&taken)?;
                    }
                    Ok(())
                })
                .with_context(|| format!("{}: aggregate", shared.plan.text))?;
                i = j;
            }
        }
        Ok(())
    }

    /// Makes `[start, end)` a session of `key`, merged with every open session of the key
    /// it overlaps, then folds into it with `fold`.
    fn absorb(
        &mut self,
        shared: &Shared,
        key: &[u8],
        mut start: i64,
        mut end: i64,
        fold: impl FnOnce(&mut [Box<dyn Accumulator>]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sessions = self.by_key.entry(key.into()).or_default();
        // Open sessions are disjoint, so those overlapping end last among those starting
        // before `end`.
        let overlapping: Vec<i64> = sessions
            .range(..end)
            .rev()
            .take_while(|(_, s)| s.end > start)
            .map(|(&s, _)| s)
            .collect();
        let mut merged: Option<Session> = None;
        for s in overlapping.into_iter().rev() {
            let mut session = sessions.remove(&s).expect("listed above");
            self.by_end.remove(&(session.end, Box::from(key), s));
            self.bytes -= session.bytes as u64;
            start = start.min(s);
            end = end.max(session.end);
            match merged.as_mut() {
                None => merged = Some(session),
                Some(into) => {
                    for (to, from) in into.accumulators.iter_mut().zip(&mut session.accumulators) {
                        let state = from
                            .state()?
                            .iter()
                            .map(|v| v.to_array())
                            .collect::<Result<Vec<_>, _>>()?;
                        to.merge_batch(&state)?;
                    }
                }
            }
        }
        let mut session = match merged {
            Some(s) => s,
            None => Session {
                end,
                accumulators: fresh(shared)?,
                bytes: 0,
            },
        };
        session.end = end;
        fold(&mut session.accumulators)?;
        session.bytes = 2 * key.len()
            + SESSION_OVERHEAD
            + session.accumulators.iter().map(|a| a.size()).sum::<usize>();
        self.bytes += session.bytes as u64;
        self.by_end.insert((end, key.into(), start));
        sessions.insert(start, session);
        Ok(())
    }

    /// Fires every session ending at or before `w`: one batch, by end, then key.
    pub fn advance(&mut self, shared: &Shared, w: i64) -> anyhow::Result<Vec<RecordBatch>> {
        let mut fired = Vec::new();
        while let Some(first) = self.by_end.first() {
            if first.0 - 1 > w {
                break;
            }
            let (end, key, start) = self.by_end.pop_first().expect("first exists");
            let sessions = self.by_key.get_mut(&key).expect("indexed");
            let session = sessions.remove(&start).expect("indexed");
            self.bytes -= session.bytes as u64;
            if sessions.is_empty() {
                self.by_key.remove(&key);
            }
            fired.push((start, end, key, session));
        }
        if fired.is_empty() {
            return Ok(Vec::new());
        }
        let n = fired.len();
        let mut columns: Vec<Vec<ArrayRef>> =
            vec![Vec::with_capacity(n); shared.plan.aggregates.len()];
        for (start, end, _, session) in fired.iter_mut() {
            for (k, acc) in session.accumulators.iter_mut().enumerate() {
                let v = acc.evaluate()?.to_array()?;
                let (start, end) = (*start, *end);
                columns[k].push(shared.exact(k, v, || {
                    format!("the session [{}, {})", ns_text(start), ns_text(end))
                })?);
            }
        }
        let values = columns
            .iter()
            .map(|parts| {
                let parts: Vec<&dyn arrow::array::Array> =
                    parts.iter().map(|p| p.as_ref()).collect();
                concat(&parts)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let keys: Vec<&[u8]> = fired.iter().map(|f| f.2.as_ref()).collect();
        let starts = fired.iter().map(|f| f.0).collect();
        let ends = fired.iter().map(|f| f.1).collect();
        let order = UInt32Array::from_iter_values(0..n as u32);
        Ok(vec![shared.output(&keys, starts, ends, values, &order)?])
    }

    /// Rows `[start, end, key, each aggregate's state..]`, `None` without open sessions.
    pub fn snapshot(&mut self, shared: &Shared) -> anyhow::Result<Option<RecordBatch>> {
        if self.by_end.is_empty() {
            return Ok(None);
        }
        let (mut starts, mut ends, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        let mut states: Vec<Vec<ScalarValue>> = Vec::new();
        for (end, key, start) in &self.by_end {
            let session = self
                .by_key
                .get_mut(key)
                .and_then(|s| s.get_mut(start))
                .expect("indexed");
            let mut row = Vec::new();
            for (acc, a) in session.accumulators.iter_mut().zip(&shared.plan.aggregates) {
                row.extend(take_state(acc, || a.create_accumulator())?);
            }
            starts.push(*start);
            ends.push(*end);
            keys.push(key.as_ref());
            states.push(row);
        }
        let mut columns: Vec<ArrayRef> = vec![
            std::sync::Arc::new(Int64Array::from(starts)),
            std::sync::Arc::new(Int64Array::from(ends)),
            std::sync::Arc::new(BinaryArray::from(keys)),
        ];
        columns.extend(scalar_columns(&states)?);
        Ok(Some(state_batch(columns)?))
    }

    /// Merges in the rows of a snapshot whose key `mine` says this subtask owns.
    pub fn merge_state(
        &mut self,
        shared: &Shared,
        batch: &RecordBatch,
        mine: impl Fn(&[u8]) -> bool,
    ) -> anyhow::Result<()> {
        let starts = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let ends = batch
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let keys = batch.column(2).as_binary::<i32>();
        let widths = shared
            .plan
            .aggregates
            .iter()
            .map(|a| Ok(a.state_fields()?.len()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for r in 0..batch.num_rows() {
            let key = keys.value(r);
            if !mine(key) {
                continue;
            }
            self.absorb(shared, key, starts.value(r), ends.value(r), |accs| {
                let mut col = 3;
                for (acc, k) in accs.iter_mut().zip(&widths) {
                    let state: Vec<ArrayRef> = (col..col + k)
                        .map(|c| batch.column(c).slice(r, 1))
                        .collect();
                    col += k;
                    acc.merge_batch(&state)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

fn fresh(shared: &Shared) -> anyhow::Result<Vec<Box<dyn Accumulator>>> {
    Ok(shared
        .plan
        .aggregates
        .iter()
        .map(|a| a.create_accumulator())
        .collect::<Result<_, _>>()?)
}
