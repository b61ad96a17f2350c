//! Updating aggregates (`GROUP BY` without a window; issue 47, decision 0051): per group
//! key, one DataFusion `Accumulator` per aggregate, the number of rows folded in, and the
//! sink row it last wrote. Every `interval` the groups rows reached since the last flush
//! are evaluated and compared with what they last wrote: a new group writes a create
//! (`c`), a changed one an update (`u`: old and new row), one whose rows were all
//! retracted, or whose row HAVING now refuses, a delete (`d`); an unchanged one writes
//! nothing. A group no row reached for `ttl` is forgotten without writing anything.
//!
//! Changes are written in key order, and each carries a record key made of its group
//! key, its number among the group's changes and both rows: a replay from a checkpoint
//! that writes the same change gives it the same record id, and a different change
//! never shares one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use anyhow::Context;
use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Int64Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use arrow::compute::take;
use arrow::datatypes::{Field, Int64Type, Schema, SchemaRef, UInt64Type};
use arrow::row::{RowConverter, SortField};
use base64::Engine as _;
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use pubsub_engine_spi::changelog::{before_column, CREATE, DELETE, OP_COLUMN, UPDATE};

use super::{retract, scalar_columns, state_batch, take_state, Input, Shared};

/// The key of the state in a snapshot: rows `[key, rows, seq, touched, written, dirty,
/// born, states..]`.
pub(super) const STATE: &str = "updating";

/// What a group costs besides its key bytes (held twice while it is dirty), its written
/// row and its accumulators' own `size()`: its map entry, the accumulators' boxes and
/// vector (an estimate from the layouts, as for a session).
const GROUP_OVERHEAD: usize = 160;

/// How often idle groups are looked for, at most (ms): a scan visits every group.
const EVICTION_SCAN_MS: i64 = 60_000;

/// Aggregates whose `evaluate` leaves their state as it was, so that a group is
/// evaluated at every flush in place; any other is evaluated on a copy of its state.
const EVALUATE_IN_PLACE: &[&str] = &[
    "count", "sum", "min", "max", "avg", "bool_and", "bool_or", "bit_and", "bit_or", "bit_xor",
];

struct Group {
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Rows folded in, less rows retracted.
    rows: i64,
    /// Changes written so far.
    seq: u64,
    /// When it was made (ms of processing time): a group forgotten for its TTL and made
    /// again numbers its changes from 1 again, under another `born`.
    born: i64,
    /// When a row last reached it (ms of processing time).
    touched: i64,
    /// The sink row it last wrote (Arrow row bytes); `None`: no row stands for it.
    written: Option<Box<[u8]>>,
    /// Its memory estimate when last taken.
    bytes: usize,
    /// What a consumer holds for it is `written`: false after a restore until its next
    /// flush (the run before may have written more since the checkpoint).
    confirmed: bool,
}

/// Turns rows of an updating aggregate's output into the sink table's rows: whether
/// each passes the query's HAVING / outer WHERE (all when the flag is false), and the
/// sink rows of those that do, in order.
pub type SinkRows<'a> = &'a dyn Fn(&RecordBatch, bool) -> anyhow::Result<(Vec<bool>, RecordBatch)>;

/// The changes of one flush, in key order.
pub struct Changes {
    /// The changelog rows (see [`pubsub_engine_spi::changelog`]), without record ids.
    pub batch: RecordBatch,
    /// Each change's record key, when asked for.
    pub record_keys: Option<Vec<String>>,
    /// Groups forgotten by this flush for being idle longer than the TTL.
    pub evicted: u64,
}

/// The groups of one subtask of an updating aggregate.
pub(super) struct Groups {
    interval_ms: i64,
    ttl_ms: i64,
    groups: HashMap<Box<[u8]>, Group>,
    /// Groups rows reached since the last flush.
    dirty: HashSet<Box<[u8]>>,
    last_flush: Option<i64>,
    next_eviction: Option<i64>,
    bytes: u64,
    /// Sink rows <-> row bytes, made at the first flush.
    converter: Option<RowConverter>,
    /// The sink's columns (names and types) as text, set at the first flush.
    columns: Option<String>,
    /// This run follows one that may have written changes after its last checkpoint
    /// (see [`Groups::start_run`]).
    restored: bool,
    /// This run's generation, in every record key: no change of this run shares a record
    /// id with one of another run (see [`Groups::start_run`]).
    generation: u64,
    /// The sink's columns as the rows last written were encoded, from the checkpoint
    /// restored: rows written under other columns are not compared (see [`Groups::flush`]).
    restored_columns: Option<String>,
    /// Retractions no row of their group matched, since the last flush.
    unmatched: u64,
}

impl Groups {
    /// Groups of an aggregate writing its changes every `interval` ns and forgetting
    /// groups idle for `ttl` ns (both at least a millisecond).
    pub fn new(interval: i64, ttl: i64) -> Self {
        Groups {
            interval_ms: (interval / 1_000_000).max(1),
            ttl_ms: (ttl / 1_000_000).max(1),
            groups: HashMap::new(),
            dirty: HashSet::new(),
            last_flush: None,
            next_eviction: None,
            bytes: 0,
            converter: None,
            columns: None,
            restored: false,
            generation: 0,
            restored_columns: None,
            unmatched: 0,
        }
    }

    pub fn groups(&self) -> u64 {
        self.groups.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether a flush is due at `now` (ms), and when the next one is: the changes every
    /// interval while a group changed, the look for idle groups every minute (or TTL).
    pub fn due(&self, now: i64) -> (bool, i64) {
        let next = self.changes_at(now).min(self.eviction_at(now));
        (next <= now, next)
    }

    fn changes_at(&self, now: i64) -> i64 {
        match self.dirty.is_empty() {
            true => i64::MAX,
            false => self
                .last_flush
                .map_or(now, |l| l.saturating_add(self.interval_ms)),
        }
    }

    fn eviction_at(&self, now: i64) -> i64 {
        match self.groups.is_empty() {
            true => i64::MAX,
            false => self
                .next_eviction
                .unwrap_or(now.saturating_add(self.ttl_ms.min(EVICTION_SCAN_MS))),
        }
    }

    /// Starts a run: `generation` goes into every record key it writes (a value no other
    /// run of the job uses). With `restarted`, the run before may have written changes
    /// after the checkpoint this one restored, which it will not write again the same
    /// way (Pub/Sub redelivers in another order): the next flush of every group writes
    /// its row even if it looks unchanged, groups made from now on included.
    pub fn start_run(&mut self, generation: u64, restarted: bool) {
        self.generation = generation;
        if restarted {
            self.restored = true;
            for g in self.groups.values_mut() {
                g.confirmed = false;
            }
        }
    }

    /// The sink's columns, as text, for [`Groups::restored_columns`].
    pub fn columns(&self) -> Option<&str> {
        self.columns.as_deref()
    }

    /// The sink's columns the restored rows were written under.
    pub fn restore_columns(&mut self, columns: &str) {
        self.restored_columns = Some(columns.to_string());
    }

    /// Folds rows in, by group (rows of a group in batch order).
    pub fn update(&mut self, shared: &Shared, input: &Input, now: i64) -> anyhow::Result<()> {
        let n = input.times.len();
        let mut by_key: HashMap<&[u8], Vec<u32>> = HashMap::new();
        for r in 0..n {
            by_key
                .entry(shared.key(input, r))
                .or_default()
                .push(r as u32);
        }
        for (key, rows) in by_key {
            if !self.groups.contains_key(key) {
                let group = Group {
                    accumulators: fresh(shared)?,
                    rows: 0,
                    seq: 0,
                    born: now,
                    touched: now,
                    written: None,
                    bytes: 0,
                    confirmed: !self.restored,
                };
                self.groups.insert(key.into(), group);
            }
            let group = self.groups.get_mut(key).expect("inserted above");
            // Runs of rows to fold in and rows to retract, in batch order. A retraction
            // beyond the rows the group holds has no row to retract (the group was
            // forgotten, or the changelog is out of order): counted and ignored.
            let mut at = 0;
            while at < rows.len() {
                let retract = |r: u32| input.retract.as_ref().is_some_and(|f| f[r as usize]);
                let kind = retract(rows[at]);
                let end = at
                    + rows[at..]
                        .iter()
                        .take_while(|&&r| retract(r) == kind)
                        .count();
                let mut run = &rows[at..end];
                at = end;
                if kind {
                    let held = usize::try_from(group.rows.max(0))
                        .unwrap_or(0)
                        .min(run.len());
                    self.unmatched += (run.len() - held) as u64;
                    run = &run[..held];
                }
                if run.is_empty() {
                    continue;
                }
                let all = run.len() == n;
                let idx = UInt32Array::from(run.to_vec());
                for (acc, values) in group.accumulators.iter_mut().zip(&input.args) {
                    let taken = if all {
                        values.clone()
                    } else {
                        values
                            .iter()
                            .map(|v| take(v.as_ref(), &idx, None))
                            .collect::<Result<Vec<_>, _>>()?
                    };
                    match kind {
                        false => acc.update_batch(&taken),
                        true => acc.retract_batch(&taken),
                    }
                    .with_context(|| format!("{}: aggregate", shared.plan.text))?;
                }
                group.rows += match kind {
                    false => run.len() as i64,
                    true => -(run.len() as i64),
                };
            }
            group.touched = now;
            self.bytes -= group.bytes as u64;
            group.bytes = group_bytes(key, group);
            self.bytes += group.bytes as u64;
            if !self.dirty.contains(key) {
                self.dirty.insert(key.into());
            }
        }
        Ok(())
    }

    /// Writes the changes of the groups rows reached since the last flush, in key order,
    /// and forgets groups idle for the TTL (see [`WindowState::flush`](super::WindowState::flush)).
    pub fn flush(
        &mut self,
        shared: &Shared,
        now: i64,
        sink: &SchemaRef,
        record_keys: bool,
        sink_rows: SinkRows<'_>,
        force: bool,
    ) -> anyhow::Result<Option<Changes>> {
        let evicted = match self.next_eviction {
            None => {
                self.next_eviction = Some(now.saturating_add(self.ttl_ms.min(EVICTION_SCAN_MS)));
                0
            }
            Some(t) if now >= t => self.evict(now),
            Some(_) => 0,
        };
        if self.unmatched > 0 {
            tracing::warn!(
                "{}: {} retractions reached a group holding no row to retract, and were ignored (changes of one primary key arrived out of order, or the subscription started after the row's create: publish the changelog with the primary key as the ordering key, read it with message ordering, and start from the changelog's snapshot)",
                shared.plan.text,
                std::mem::take(&mut self.unmatched)
            );
        }
        let changes_due = force || now >= self.changes_at(now);
        if self.dirty.is_empty() || !changes_due {
            return Ok((evicted > 0).then(|| Changes {
                batch: RecordBatch::new_empty(changelog_schema(sink)),
                record_keys: record_keys.then(Vec::new),
                evicted,
            }));
        }
        self.last_flush = Some(now);
        let mut keys: Vec<Box<[u8]>> = self.dirty.drain().collect();
        keys.sort_unstable();
        if self.converter.is_none() {
            let fields = sink
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            self.converter = Some(RowConverter::new(fields)?);
            self.columns = Some(format!("{:?}", sink.fields()));
        }
        // Rows written under other sink columns (the pipeline changed between runs) are
        // not compared, nor decoded: every group writes its row as new.
        if let Some(restored) = self.restored_columns.take() {
            if self.columns.as_deref() != Some(restored.as_str()) {
                for g in self.groups.values_mut() {
                    if g.written.take().is_some() {
                        g.confirmed = false;
                    }
                }
            }
        }
        let converter = self.converter.as_ref().expect("made above");

        // The new row of every group with rows: aggregate rows, then sink rows (bytes).
        let live: Vec<usize> = (0..keys.len())
            .filter(|&i| self.groups.get(&keys[i]).is_some_and(|g| g.rows > 0))
            .collect();
        let mut new_rows: Vec<Option<Box<[u8]>>> = vec![None; keys.len()];
        // A group HAVING refuses, not yet written since a restore: its row as it is,
        // for the delete that replaces what the run before the restore may have written.
        let mut refused_rows: Vec<Option<Box<[u8]>>> = vec![None; keys.len()];
        if !live.is_empty() {
            let mut values: Vec<Vec<ScalarValue>> =
                vec![Vec::with_capacity(live.len()); shared.plan.aggregates.len()];
            for &i in &live {
                let group = self.groups.get_mut(&keys[i]).expect("live");
                for (k, (acc, a)) in group
                    .accumulators
                    .iter_mut()
                    .zip(&shared.plan.aggregates)
                    .enumerate()
                {
                    values[k].push(evaluate(shared, acc, a)?);
                }
            }
            let values = values
                .into_iter()
                .enumerate()
                .map(|(k, v)| {
                    let array = ScalarValue::iter_to_array(v)?;
                    shared.exact(k, array, || "a group".to_string())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let live_keys: Vec<&[u8]> = live.iter().map(|&i| keys[i].as_ref()).collect();
            let order = UInt32Array::from_iter_values(0..live.len() as u32);
            let rows = shared.output(&live_keys, Vec::new(), Vec::new(), values, &order)?;
            let (kept, batch) = sink_rows(&rows, true)?;
            anyhow::ensure!(
                kept.len() == live.len() && batch.num_rows() == kept.iter().filter(|k| **k).count(),
                "{}: the sink rows do not match the groups",
                shared.plan.text
            );
            let bytes = converter.convert_columns(batch.columns())?;
            let mut j = 0;
            let mut refused = Vec::new();
            for (n, (&i, keep)) in live.iter().zip(&kept).enumerate() {
                if *keep {
                    new_rows[i] = Some(bytes.row(j).as_ref().into());
                    j += 1;
                } else {
                    let g = &self.groups[&keys[i]];
                    if !g.confirmed && g.written.is_none() {
                        refused.push((n as u32, i));
                    }
                }
            }
            // The select list may fail on a row HAVING refuses (HAVING guards it): such
            // a group cannot write its delete, which is said (WARN), not fatal, since
            // every restart would fail the same way.
            for (n, i) in refused {
                let subset = rows.slice(n as usize, 1);
                match sink_rows(&subset, false) {
                    Ok((_, batch)) => {
                        let bytes = converter.convert_columns(batch.columns())?;
                        refused_rows[i] = Some(bytes.row(0).as_ref().into());
                    }
                    Err(e) => tracing::warn!(
                        "{}: a group HAVING refuses could not write the delete that replaces what the run before the restart may have written for it ({e:#}): a consumer may still hold that row",
                        shared.plan.text
                    ),
                }
            }
        }

        // Compare with what each group last wrote.
        let mut ops: Vec<&str> = Vec::new();
        let mut after_rows: Vec<Box<[u8]>> = Vec::new();
        let mut after: Vec<Option<u32>> = Vec::new();
        let mut before: Vec<Option<u32>> = Vec::new();
        let mut old_rows: Vec<Box<[u8]>> = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
        for (i, key) in keys.iter().enumerate() {
            let Some(group) = self.groups.get_mut(key) else {
                continue;
            };
            // The first flush of a group after a restore writes even what looks
            // unchanged: the run before the restore may have written other rows since the
            // checkpoint, which this one must replace.
            let forced = !group.confirmed;
            group.confirmed = true;
            let new = new_rows[i].take();
            let (op, old) = match (&group.written, &new) {
                (None, None) => match refused_rows[i].take() {
                    Some(row) if forced => (Some(DELETE), Some(row)),
                    _ => (None, None),
                },
                (Some(old), Some(row)) if old == row && !forced => (None, None),
                (None, Some(_)) => (Some(CREATE), None),
                (Some(old), Some(_)) => (Some(UPDATE), Some(old.clone())),
                (Some(old), None) => (Some(DELETE), Some(old.clone())),
            };
            if let Some(op) = op {
                group.seq += 1;
                if record_keys {
                    let text =
                        |b: &Option<Box<[u8]>>| b.as_ref().map_or(String::new(), |b| b64.encode(b));
                    ids.push(format!(
                        "update/{:016x}/{}/{}/{}/{}/{}",
                        self.generation,
                        b64.encode(key),
                        group.born,
                        group.seq,
                        text(&old),
                        text(&new)
                    ));
                }
                ops.push(op);
                match &new {
                    Some(row) => {
                        after.push(Some(after_rows.len() as u32));
                        after_rows.push(row.clone());
                    }
                    None => after.push(None),
                }
                match old {
                    Some(row) => {
                        before.push(Some(old_rows.len() as u32));
                        old_rows.push(row);
                    }
                    None => before.push(None),
                }
                group.written = new;
            }
            if group.rows <= 0 {
                let g = self.groups.remove(key).expect("found above");
                self.bytes -= g.bytes as u64;
            } else {
                self.bytes -= group.bytes as u64;
                group.bytes = group_bytes(key, group);
                self.bytes += group.bytes as u64;
            }
        }
        if ops.is_empty() && evicted == 0 {
            return Ok(None);
        }

        // The changelog batch: new rows, old rows, operations.
        let parser = converter.parser();
        let spread = |rows: &[Box<[u8]>], at: Vec<Option<u32>>| -> anyhow::Result<Vec<ArrayRef>> {
            let columns = converter.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
            let at = UInt32Array::from(at);
            Ok(columns
                .iter()
                .map(|c| take(c.as_ref(), &at, None))
                .collect::<Result<Vec<_>, _>>()?)
        };
        let mut columns = spread(&after_rows, after)?;
        columns.extend(spread(&old_rows, before)?);
        columns.push(Arc::new(StringArray::from(ops)));
        let batch = RecordBatch::try_new(changelog_schema(sink), columns)?;
        Ok(Some(Changes {
            batch,
            record_keys: record_keys.then_some(ids),
            evicted,
        }))
    }

    /// Forgets the groups no row reached for the TTL, and sets the next look (a look
    /// visits every group: once a minute, or once per TTL when shorter); how many.
    fn evict(&mut self, now: i64) -> u64 {
        self.next_eviction = Some(now.saturating_add(self.ttl_ms.min(EVICTION_SCAN_MS)));
        let ttl = self.ttl_ms;
        let idle: Vec<Box<[u8]>> = self
            .groups
            .iter()
            .filter(|(k, g)| g.touched.saturating_add(ttl) <= now && !self.dirty.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &idle {
            let g = self.groups.remove(k).expect("listed above");
            self.bytes -= g.bytes as u64;
        }
        idle.len() as u64
    }

    /// Rows `[key, rows, seq, touched, written, dirty, born, each aggregate's state..]`,
    /// `None` without groups.
    pub fn snapshot(&mut self, shared: &Shared) -> anyhow::Result<Option<RecordBatch>> {
        if self.groups.is_empty() {
            return Ok(None);
        }
        let mut keys: Vec<&Box<[u8]>> = self.groups.keys().collect();
        keys.sort_unstable();
        let keys: Vec<Box<[u8]>> = keys.into_iter().cloned().collect();
        let (mut rows, mut seqs, mut touched, mut written, mut dirty, mut born) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        let mut states: Vec<Vec<ScalarValue>> = Vec::new();
        for key in &keys {
            let group = self.groups.get_mut(key).expect("listed");
            let mut row = Vec::new();
            for (acc, a) in group.accumulators.iter_mut().zip(&shared.plan.aggregates) {
                row.extend(take_state(acc, || make(shared, a))?);
            }
            rows.push(group.rows);
            seqs.push(group.seq);
            touched.push(group.touched);
            written.push(group.written.clone());
            dirty.push(self.dirty.contains(key));
            born.push(group.born);
            states.push(row);
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(BinaryArray::from_iter_values(keys.iter())),
            Arc::new(Int64Array::from(rows)),
            Arc::new(UInt64Array::from(seqs)),
            Arc::new(Int64Array::from(touched)),
            Arc::new(BinaryArray::from_iter(written.iter().map(|w| w.as_deref()))),
            Arc::new(BooleanArray::from(dirty)),
            Arc::new(Int64Array::from(born)),
        ];
        columns.extend(scalar_columns(&states)?);
        Ok(Some(state_batch(columns)?))
    }

    /// Takes in the rows of a snapshot whose key `mine` says this subtask owns.
    pub fn merge_state(
        &mut self,
        shared: &Shared,
        batch: &RecordBatch,
        mine: impl Fn(&[u8]) -> bool,
    ) -> anyhow::Result<()> {
        let keys = batch.column(0).as_binary::<i32>();
        let rows = batch.column(1).as_primitive::<Int64Type>();
        let seqs = batch.column(2).as_primitive::<UInt64Type>();
        let touched = batch.column(3).as_primitive::<Int64Type>();
        let written = batch.column(4).as_binary::<i32>();
        let dirty = batch.column(5).as_boolean();
        let born = batch.column(6).as_primitive::<Int64Type>();
        let widths = shared
            .plan
            .aggregates
            .iter()
            .map(|a| retract::state_width(a, shared.plan.retracting, &shared.plan.before.schema))
            .collect::<datafusion_common::Result<Vec<usize>>>()?;
        for r in 0..batch.num_rows() {
            let key = keys.value(r);
            if !mine(key) {
                continue;
            }
            let mut accumulators = fresh(shared)?;
            let mut col = 7;
            for (acc, k) in accumulators.iter_mut().zip(&widths) {
                let k = *k;
                let state: Vec<ArrayRef> = (col..col + k)
                    .map(|c| batch.column(c).slice(r, 1))
                    .collect();
                col += k;
                acc.merge_batch(&state)?;
            }
            let mut group = Group {
                accumulators,
                rows: rows.value(r),
                seq: seqs.value(r),
                born: born.value(r),
                touched: touched.value(r),
                written: written.is_valid(r).then(|| written.value(r).into()),
                bytes: 0,
                confirmed: !self.restored,
            };
            group.bytes = group_bytes(key, &group);
            self.bytes += group.bytes as u64;
            if let Some(old) = self.groups.insert(key.into(), group) {
                self.bytes -= old.bytes as u64;
            }
            if dirty.value(r) {
                self.dirty.insert(key.into());
            }
        }
        Ok(())
    }
}

/// The schema of a changelog batch over sink rows `sink` (see
/// [`pubsub_engine_spi::changelog`]): every column nullable.
pub fn changelog_schema(sink: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = sink
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.extend(
        sink.fields()
            .iter()
            .map(|f| Field::new(before_column(f.name()), f.data_type().clone(), true)),
    );
    fields.push(Field::new(
        OP_COLUMN,
        arrow::datatypes::DataType::Utf8,
        false,
    ));
    Arc::new(Schema::new(fields))
}

/// Aggregate `a`'s value from `acc`, leaving `acc`'s state as it was.
fn evaluate(
    shared: &Shared,
    acc: &mut Box<dyn Accumulator>,
    a: &Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>,
) -> anyhow::Result<ScalarValue> {
    // A retracting plan's accumulators evaluate in place (see `retract`).
    if shared.plan.retracting || (!a.is_distinct() && EVALUATE_IN_PLACE.contains(&a.fun().name())) {
        return Ok(acc.evaluate()?);
    }
    let state = take_state(acc, || make(shared, a))?;
    let arrays = state
        .iter()
        .map(|v| v.to_array())
        .collect::<Result<Vec<_>, _>>()?;
    let mut copy = make(shared, a)?;
    copy.merge_batch(&arrays)?;
    Ok(copy.evaluate()?)
}

/// A fresh accumulator of aggregate `a` (one that retracts for a retracting plan).
fn make(
    shared: &Shared,
    a: &Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>,
) -> datafusion_common::Result<Box<dyn Accumulator>> {
    retract::accumulator(a, shared.plan.retracting, &shared.plan.before.schema)
}

fn group_bytes(key: &[u8], g: &Group) -> usize {
    2 * key.len()
        + g.written.as_ref().map_or(0, |w| w.len())
        + GROUP_OVERHEAD
        + g.accumulators.iter().map(|a| a.size()).sum::<usize>()
}

fn fresh(shared: &Shared) -> anyhow::Result<Vec<Box<dyn Accumulator>>> {
    Ok(shared
        .plan
        .aggregates
        .iter()
        .map(|a| make(shared, a))
        .collect::<Result<_, _>>()?)
}
