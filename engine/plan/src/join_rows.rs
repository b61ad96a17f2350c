//! An updating join (issue 48, part 1; decision 0056): `SELECT ... FROM a JOIN b ON a.k =
//! b.k`, two tables' rows joined as they arrive, each row kept for the join's TTL.
//!
//! A row of either side is matched at once against the other side's kept rows of its key
//! whose event times are within the TTL of its own (`|t_a - t_b| <= ttl`), then kept
//! itself. A kept row is forgotten when the join's watermark passes its event time plus
//! the TTL: a later row that is not late (not behind the watermark) is more than the TTL
//! away from it. A row behind the watermark is late: counted and dropped, as a window's.
//! So the joined rows are the batch join, with the time bound, of the rows that were not
//! late, whatever order they arrive in; and each pair of rows is one joined row whose
//! record key names both rows ([`pair_key`]), so a replay writes the same row under the
//! same record id.
//!
//! A side's rows arrive as its first stage writes them (see [`JoinSide`]): `[join keys..,
//! the table's columns.., event time]`, then the carried record key when the sink stamps
//! record ids.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{SchemaRef, TimestampNanosecondType};
use arrow::row::{RowConverter, SortField};

use crate::join::{pair_key, JoinPlan};
use crate::window::{decode, encode, owner};
use pubsub_engine_spi::OperatorState;

/// Bytes a kept row costs beyond its row bytes: its event time, its entry in its key's
/// list and in the expiry index.
const ROW_OVERHEAD: u64 = 48;

/// One subtask's state of an updating join: each side's kept rows.
pub(crate) struct RowsJoin {
    plan: Arc<JoinPlan>,
    ttl: i64,
    keys: RowConverter,
    /// Per side: every column of its first stage's rows, as Arrow row bytes.
    rows: [RowConverter; 2],
    kept: [Kept; 2],
    watermark: Option<i64>,
    late: u64,
}

/// One side's kept rows.
#[derive(Default)]
struct Kept {
    /// Join key (row bytes) -> its rows: event time and row bytes, in arrival order.
    by_key: HashMap<Box<[u8]>, Vec<(i64, Box<[u8]>)>>,
    /// Event time -> the keys holding a row of that time (once per row): what expires.
    by_time: BTreeMap<i64, Vec<Box<[u8]>>>,
    rows: u64,
    bytes: u64,
}

impl Kept {
    fn insert(&mut self, key: &[u8], t: i64, row: &[u8]) {
        self.by_key
            .entry(key.into())
            .or_default()
            .push((t, row.into()));
        self.by_time.entry(t).or_default().push(key.into());
        self.rows += 1;
        self.bytes += (key.len() + row.len()) as u64 + ROW_OVERHEAD;
    }

    /// Forgets every row of event time before `before`.
    fn expire(&mut self, before: i64) {
        let later = self.by_time.split_off(&before);
        let gone = std::mem::replace(&mut self.by_time, later);
        // Each key once: its list is filtered in one pass however many of its rows go.
        let mut keys: Vec<Box<[u8]>> = gone.into_values().flatten().collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let Some(list) = self.by_key.get_mut(&key) else {
                continue;
            };
            let (key_len, bytes) = (key.len() as u64, &mut self.bytes);
            let rows = &mut self.rows;
            list.retain(|(t, row)| {
                let keep = *t >= before;
                if !keep {
                    *rows -= 1;
                    *bytes -= key_len + row.len() as u64 + ROW_OVERHEAD;
                }
                keep
            });
            if list.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

impl RowsJoin {
    pub(crate) fn new(plan: Arc<JoinPlan>, ttl: i64) -> anyhow::Result<Self> {
        let schema = |s: usize| stage_schema(&plan, s);
        let key_fields = plan.sides[0]
            .on
            .iter()
            .map(|&i| SortField::new(schema(0).field(i).data_type().clone()))
            .collect();
        let all = |s: usize| -> anyhow::Result<RowConverter> {
            Ok(RowConverter::new(
                schema(s)
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?)
        };
        Ok(RowsJoin {
            keys: RowConverter::new(key_fields)?,
            rows: [all(0)?, all(1)?],
            kept: [Kept::default(), Kept::default()],
            watermark: None,
            late: 0,
            ttl,
            plan,
        })
    }

    /// Rows of side `side`'s first stage: each joined with the other side's kept rows of
    /// its key within the TTL, then kept. Returns the joined rows (in the plan's
    /// [`schema`](JoinPlan::schema)), `None` when none matched.
    pub(crate) fn update(
        &mut self,
        side: usize,
        batch: &RecordBatch,
    ) -> anyhow::Result<Option<RecordBatch>> {
        let (keys, valid) = self.key_rows(side, batch)?;
        let rows = self.rows[side].convert_columns(batch.columns())?;
        let times = event_times(&self.plan, side, batch)?;
        let other = 1 - side;
        // Pairs: (row of `batch`, row bytes of the other side's match).
        let mut mine: Vec<u32> = Vec::new();
        let mut theirs: Vec<&[u8]> = Vec::new();
        let mut keep: Vec<usize> = Vec::new();
        for (i, t) in times.iter().enumerate() {
            if self.watermark.is_some_and(|w| *t < w) {
                self.late += 1;
                continue;
            }
            // A NULL key matches nothing, now or later: not kept.
            if !valid[i] {
                continue;
            }
            if let Some(list) = self.kept[other].by_key.get(keys.row(i).as_ref()) {
                for (u, row) in list {
                    if t.abs_diff(*u) <= self.ttl as u64 {
                        mine.push(i as u32);
                        theirs.push(row);
                    }
                }
            }
            keep.push(i);
        }
        let joined = match mine.is_empty() {
            true => None,
            false => {
                let parser = self.rows[other].parser();
                let matched =
                    self.rows[other].convert_rows(theirs.iter().map(|r| parser.parse(r)))?;
                let arriving = UInt32Array::from(mine);
                let arriving: Vec<ArrayRef> = batch
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &arriving, None))
                    .collect::<Result<_, _>>()?;
                let (left, right) = match side {
                    0 => (arriving, matched),
                    _ => (matched, arriving),
                };
                Some(self.joined(&left, &right)?)
            }
        };
        for i in keep {
            self.kept[side].insert(keys.row(i).as_ref(), times[i], rows.row(i).as_ref());
        }
        Ok(joined)
    }

    /// The joined rows from both sides' first-stage columns, pair by pair: the left
    /// side's table columns, the right's, then the record key.
    fn joined(&self, left: &[ArrayRef], right: &[ArrayRef]) -> anyhow::Result<RecordBatch> {
        let mut columns = Vec::new();
        let mut record_keys: [Option<&StringArray>; 2] = [None, None];
        for (s, cols) in [left, right].into_iter().enumerate() {
            let (range, key_at) = layout(&self.plan, s);
            columns.extend(cols[range].iter().cloned());
            record_keys[s] = key_at.and_then(|k| cols[k].as_string_opt::<i32>());
        }
        let n = left.first().map_or(0, |c| c.len());
        let ids: StringArray = match record_keys {
            // The sink stamps no record ids: the key is never read.
            [None, None] => std::iter::repeat_n(Some("join"), n).collect(),
            [l, r] => (0..n)
                .map(|i| Some(pair_key([l.map(|k| k.value(i)), r.map(|k| k.value(i))])))
                .collect(),
        };
        columns.push(Arc::new(ids));
        RecordBatch::try_new(self.plan.schema.clone(), columns)
            .with_context(|| format!("{}: the joined rows do not fit", self.plan.text))
    }

    /// The join's watermark advanced to `w`: forgets the rows it passed by more than the
    /// TTL.
    pub(crate) fn advance(&mut self, w: i64) {
        if self.watermark.is_some_and(|c| c >= w) {
            return;
        }
        self.watermark = Some(w);
        let before = w.saturating_sub(self.ttl);
        for k in &mut self.kept {
            k.expire(before);
        }
    }

    /// Keys holding rows, over both sides.
    pub(crate) fn groups(&self) -> u64 {
        self.kept.iter().map(|k| k.by_key.len() as u64).sum()
    }

    /// An estimate of the memory both sides' kept rows hold, in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.kept.iter().map(|k| k.bytes).sum()
    }

    /// Rows dropped as late since the last call.
    pub(crate) fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// `watermark` and each side's kept rows (`left`, `right`: Arrow IPC, base64, in the
    /// side's first-stage schema).
    pub(crate) fn snapshot(&self) -> anyhow::Result<OperatorState> {
        let mut state = OperatorState::default();
        state
            .values
            .insert("watermark".into(), serde_json::json!(self.watermark));
        for (s, name) in ROW_SIDES.iter().enumerate() {
            let parser = self.rows[s].parser();
            let rows = self.kept[s]
                .by_key
                .values()
                .flatten()
                .map(|(_, r)| parser.parse(r));
            let columns = self.rows[s].convert_rows(rows)?;
            let opts = arrow::array::RecordBatchOptions::new()
                .with_row_count(Some(self.kept[s].rows as usize));
            let batch =
                RecordBatch::try_new_with_options(stage_schema(&self.plan, s), columns, &opts)?;
            state
                .values
                .insert(name.to_string(), serde_json::json!(encode(&batch)?));
        }
        Ok(state)
    }

    /// Keeps the rows whose key this subtask (`subtask` of `peers`) owns from every
    /// subtask's snapshot of the last checkpoint, and the lowest of their watermarks.
    pub(crate) fn restore(
        &mut self,
        states: &[OperatorState],
        subtask: u64,
        peers: u64,
    ) -> anyhow::Result<()> {
        for state in states {
            if let Some(w) = state.values.get("watermark").and_then(|v| v.as_i64()) {
                self.watermark = Some(self.watermark.map_or(w, |c| c.min(w)));
            }
            for (s, name) in ROW_SIDES.iter().enumerate() {
                let text = state.values.get(*name).and_then(|v| v.as_str()).ok_or_else(|| {
                    anyhow!(
                        "{}: the checkpoint holds no {name} rows of the join (was it taken by another query?)",
                        self.plan.text
                    )
                })?;
                for batch in decode(text)? {
                    if batch.schema().fields() != stage_schema(&self.plan, s).fields() {
                        return Err(anyhow!(
                            "{}: the join's {name} rows in the checkpoint have other columns: the pipeline changed; start a new job",
                            self.plan.text
                        ));
                    }
                    let (keys, _) = self.key_rows(s, &batch)?;
                    let rows = self.rows[s].convert_columns(batch.columns())?;
                    let times = event_times(&self.plan, s, &batch)?;
                    for (i, t) in times.iter().enumerate() {
                        let key = keys.row(i);
                        if owner(key.as_ref(), peers) == subtask {
                            self.kept[s].insert(key.as_ref(), *t, rows.row(i).as_ref());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The join keys of `batch`'s rows (side `side`'s first stage) and whether each is
    /// free of NULLs.
    fn key_rows(
        &self,
        side: usize,
        batch: &RecordBatch,
    ) -> anyhow::Result<(arrow::row::Rows, Vec<bool>)> {
        let cols: Vec<ArrayRef> = self.plan.sides[side]
            .on
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let rows = self.keys.convert_columns(&cols)?;
        let valid = (0..batch.num_rows())
            .map(|r| cols.iter().all(|c| c.is_valid(r)))
            .collect();
        Ok((rows, valid))
    }
}

const ROW_SIDES: [&str; 2] = ["left_rows", "right_rows"];

/// The schema of side `s`'s first-stage rows (with the carried record key).
fn stage_schema(plan: &JoinPlan, s: usize) -> SchemaRef {
    let before = &plan.sides[s].window.before;
    match &before.carry {
        Some((_, schema)) => schema.clone(),
        None => before.schema.clone(),
    }
}

/// Where side `s`'s table columns are among its first-stage columns, and its record key.
fn layout(plan: &JoinPlan, s: usize) -> (std::ops::Range<usize>, Option<usize>) {
    let before = &plan.sides[s].window.before;
    let n = plan.sides[s].on.len();
    let time_at = before.exprs.len() - 1;
    (n..time_at, before.carry.as_ref().map(|_| time_at + 1))
}

/// The event time of each row of side `s`'s first stage (its last expression).
fn event_times(plan: &JoinPlan, s: usize, batch: &RecordBatch) -> anyhow::Result<Vec<i64>> {
    let at = plan.sides[s].window.before.exprs.len() - 1;
    let c = batch
        .column(at)
        .as_primitive_opt::<TimestampNanosecondType>()
        .ok_or_else(|| anyhow!("{}: a side's event time is not a TIMESTAMP", plan.text))?;
    if c.null_count() > 0 {
        return Err(anyhow!("{}: a row has no event time", plan.text));
    }
    Ok(c.values().to_vec())
}
