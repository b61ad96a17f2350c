//! A windowed join (issue 48, part 1; decision 0055): two windowed aggregates with the
//! same window, joined on their windows and group keys.
//!
//! Each side is a windowed aggregate of its own table ([`WindowPlan`], routed by the join
//! keys, so that the rows of one key of both sides meet on one subtask) and the side's
//! own HAVING and select list ([`JoinSide::after`]). Both sides' windows advance with
//! one watermark, the lower of the two inputs' (as Flink's and Arroyo's joins do): a
//! window fires on both sides at once, and its rows are joined then, written once.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};

use crate::join_rows::RowsJoin;
use crate::pipeline::PlannedTable;
use crate::select::SelectPlan;
use crate::window::{WindowPlan, WindowState};
use pubsub_engine_spi::OperatorState;

/// Which rows of a side without a match are written (with NULLs for the other side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
}

impl JoinKind {
    /// As SQL writes it (`LEFT JOIN`).
    pub fn sql(&self) -> &'static str {
        match self {
            JoinKind::Inner => "JOIN",
            JoinKind::Left => "LEFT JOIN",
            JoinKind::Right => "RIGHT JOIN",
            JoinKind::Full => "FULL JOIN",
        }
    }

    fn keeps(&self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinKind::Full, _) | (JoinKind::Left, 0) | (JoinKind::Right, 1)
        )
    }
}

/// One side of a join: a windowed aggregate, or (an updating join) a table's rows.
pub struct JoinSide {
    /// Its aggregate (rows routed by the join keys, [`WindowPlan::route`]); its output
    /// carries each group's record key. An updating join's side uses only its first stage
    /// (`before`: `[join keys.., the table's columns.., event time]`, then the carried
    /// record key) and route.
    pub window: Arc<WindowPlan>,
    /// The side's HAVING and select list on the rows its window fires, with the record
    /// key carried last; an updating join's: the table's columns as they are.
    pub after: Arc<SelectPlan>,
    /// The columns matched, in pairs, with the other side's, of equal types on both
    /// sides: of `after`'s rows, the window and group keys; of an updating join's first
    /// stage, its leading join keys.
    pub on: Vec<usize>,
}

/// A windowed join: the query's `source` is the left side's table.
pub struct JoinPlan {
    pub kind: JoinKind,
    /// The right side's table.
    pub right_source: PlannedTable,
    /// Left (0) and right (1).
    pub sides: [JoinSide; 2],
    /// The joined rows: the left side's columns, then the right's (nullable on the side
    /// an outer join may miss), then the record key (TEXT).
    pub schema: SchemaRef,
    /// The statement, for errors.
    pub text: String,
    /// An updating join of two tables' rows (decision 0056): how long each side's rows
    /// are kept, in nanoseconds of event time (see [`crate::join_rows`]); `None` for a
    /// windowed join.
    pub ttl: Option<i64>,
}

impl std::fmt::Debug for JoinPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinPlan")
            .field("kind", &self.kind)
            .field("right_source", &self.right_source.connection.name)
            .field("left", &self.sides[0].window)
            .field("right", &self.sides[1].window)
            .finish()
    }
}

impl JoinPlan {
    /// Joins the rows both sides' windows fired (each in its `after`'s schema, the record
    /// key last) into [`schema`](Self::schema)'s rows: a hash join on the `on` columns, a
    /// NULL never matching. Rows come in the left side's order with its matches in the
    /// right's order, then the right's rows without a match (a right or full join): the
    /// same rows in the same order on every run. Each row's record key is made of its
    /// sides' ([`pair_key`]): one per pair of groups.
    pub fn join(&self, left: &RecordBatch, right: &RecordBatch) -> anyhow::Result<RecordBatch> {
        let key_types: Vec<SortField> = self.sides[0]
            .on
            .iter()
            .map(|&i| SortField::new(left.schema().field(i).data_type().clone()))
            .collect();
        let converter = RowConverter::new(key_types)?;
        let keys = |b: &RecordBatch, side: usize| -> anyhow::Result<_> {
            let cols: Vec<ArrayRef> = self.sides[side]
                .on
                .iter()
                .map(|&i| b.column(i).clone())
                .collect();
            let rows = converter.convert_columns(&cols)?;
            let valid: Vec<bool> = (0..b.num_rows())
                .map(|r| cols.iter().all(|c| c.is_valid(r)))
                .collect();
            Ok((rows, valid))
        };
        let (lrows, lvalid) = keys(left, 0)?;
        let (rrows, rvalid) = keys(right, 1)?;
        let mut build: HashMap<&[u8], Vec<u32>> = HashMap::new();
        for (r, row) in rrows.iter().enumerate() {
            if rvalid[r] {
                build.entry(row.data()).or_default().push(r as u32);
            }
        }
        let mut li: Vec<Option<u32>> = Vec::new();
        let mut ri: Vec<Option<u32>> = Vec::new();
        let mut matched = vec![false; right.num_rows()];
        for (l, row) in lrows.iter().enumerate() {
            let found = lvalid[l].then(|| build.get(row.data())).flatten();
            match found {
                Some(rs) => {
                    for &r in rs {
                        matched[r as usize] = true;
                        li.push(Some(l as u32));
                        ri.push(Some(r));
                    }
                }
                None if self.kind.keeps(0) => {
                    li.push(Some(l as u32));
                    ri.push(None);
                }
                None => {}
            }
        }
        if self.kind.keeps(1) {
            for (r, m) in matched.iter().enumerate() {
                if !m {
                    li.push(None);
                    ri.push(Some(r as u32));
                }
            }
        }
        let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut record_keys: Vec<[Option<&str>; 2]> = vec![[None, None]; li.len()];
        for (side, (b, idx)) in [(left, &li), (right, &ri)].into_iter().enumerate() {
            let n = b.num_columns() - 1;
            for c in b.columns()[..n].iter() {
                columns.push(take(c.as_ref(), idx, None)?);
            }
            let ks = b
                .column(n)
                .as_string_opt::<i32>()
                .ok_or_else(|| anyhow!("{}: a side's rows carry no record key", self.text))?;
            for (k, i) in idx.iter().enumerate() {
                record_keys[k][side] = i.map(|i| ks.value(i as usize));
            }
        }
        let ids: StringArray = record_keys.iter().map(|k| Some(pair_key(*k))).collect();
        columns.push(Arc::new(ids));
        RecordBatch::try_new(self.schema.clone(), columns)
            .with_context(|| format!("{}: the joined rows do not fit", self.text))
    }
}

/// The record key of a joined row from its sides' (`None`: a side an outer join lacks):
/// `join/<left>/<right>`, each side as `<length>:<key>` or `-`, so that no two pairs give
/// one string whatever their keys hold.
pub fn pair_key([l, r]: [Option<&str>; 2]) -> String {
    let side = |k: Option<&str>| k.map_or("-".to_string(), |k| format!("{}:{k}", k.len()));
    format!("join/{}/{}", side(l), side(r))
}

/// The state of one subtask of a join: each side's open windows, or an updating join's
/// kept rows.
pub struct JoinState {
    plan: Arc<JoinPlan>,
    /// A windowed join's sides (none for an updating join).
    sides: Vec<WindowState>,
    rows: Option<RowsJoin>,
}

impl JoinState {
    pub fn new(plan: Arc<JoinPlan>) -> anyhow::Result<Self> {
        let rows = match plan.ttl {
            Some(ttl) => Some(RowsJoin::new(plan.clone(), ttl)?),
            None => None,
        };
        let sides = match rows {
            Some(_) => Vec::new(),
            None => vec![
                WindowState::new(plan.sides[0].window.clone())?,
                WindowState::new(plan.sides[1].window.clone())?,
            ],
        };
        Ok(JoinState { plan, sides, rows })
    }

    /// Folds in rows of side `side`'s first stage (see [`WindowState::update`]); an
    /// updating join joins them at once: the joined rows, in [`JoinPlan::schema`].
    pub fn update(
        &mut self,
        side: usize,
        batch: &RecordBatch,
    ) -> anyhow::Result<Option<RecordBatch>> {
        match &mut self.rows {
            Some(r) => r.update(side, batch),
            None => self.sides[side].update(batch).map(|()| None),
        }
    }

    /// Whether this is an updating join (rows kept for a TTL, no windows).
    pub fn is_updating(&self) -> bool {
        self.rows.is_some()
    }

    /// The join's watermark advanced to `w`: fires every window ending at or before it on
    /// both sides and joins their rows (see [`JoinPlan::join`]); `None` when no window
    /// fired.
    ///
    /// Errors: a side's window or select list failed on a row (permanent: a replay fails
    /// alike).
    pub fn advance(&mut self, w: i64) -> anyhow::Result<Option<RecordBatch>> {
        if let Some(r) = &mut self.rows {
            r.advance(w);
            return Ok(None);
        }
        let mut fired = Vec::new();
        for (side, state) in self.sides.iter_mut().enumerate() {
            let after = &self.plan.sides[side].after;
            let mut rows = Vec::new();
            for b in state.advance(w)? {
                rows.push(after.evaluate(&b).map_err(|f| {
                    pubsub_engine_spi::PermanentError::wrap(
                        anyhow::Error::new(f).context(format!("{}: row failure", self.plan.text)),
                    )
                })?);
            }
            fired.push(concat_batches(&after_schema(after), &rows)?);
        }
        if fired.iter().all(|b| b.num_rows() == 0) {
            return Ok(None);
        }
        self.plan.join(&fired[0], &fired[1]).map(Some)
    }

    /// Open groups over both sides' open windows.
    pub fn groups(&self) -> u64 {
        if let Some(r) = &self.rows {
            return r.groups();
        }
        self.sides.iter().map(|s| s.groups()).sum()
    }

    /// An estimate of the memory both sides' open windows hold, in bytes.
    pub fn bytes(&self) -> u64 {
        if let Some(r) = &self.rows {
            return r.bytes();
        }
        self.sides.iter().map(|s| s.bytes()).sum()
    }

    /// Rows dropped as late on either side since the last call.
    pub fn take_late(&mut self) -> u64 {
        if let Some(r) = &mut self.rows {
            return r.take_late();
        }
        self.sides.iter_mut().map(|s| s.take_late()).sum()
    }

    /// Both sides' snapshots (see [`WindowState::snapshot`]) under `left` and `right`.
    pub fn snapshot(&mut self) -> anyhow::Result<OperatorState> {
        if let Some(r) = &self.rows {
            return r.snapshot();
        }
        let mut state = OperatorState::default();
        for (name, side) in SIDES.iter().zip(self.sides.iter_mut()) {
            state
                .values
                .insert(name.to_string(), serde_json::to_value(side.snapshot()?)?);
        }
        Ok(state)
    }

    /// Restores the groups this subtask owns on each side from every subtask's snapshot
    /// of the last checkpoint (see [`WindowState::restore`]).
    pub fn restore(
        &mut self,
        states: &[OperatorState],
        subtask: u64,
        peers: u64,
    ) -> anyhow::Result<()> {
        if let Some(r) = &mut self.rows {
            return r.restore(states, subtask, peers);
        }
        for (name, side) in SIDES.iter().zip(self.sides.iter_mut()) {
            let mine = states
                .iter()
                .map(|s| match s.values.get(*name) {
                    Some(v) => serde_json::from_value::<OperatorState>(v.clone())
                        .with_context(|| format!("the {name} side of a join's checkpoint")),
                    None => Err(anyhow!(
                        "{}: the checkpoint holds no {name} side of the join (was it taken by another query?)",
                        self.plan.text
                    )),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            side.restore(&mine, subtask, peers)?;
        }
        Ok(())
    }
}

const SIDES: [&str; 2] = ["left", "right"];

/// The rows `after` writes: its output columns, then the carried record key.
fn after_schema(after: &SelectPlan) -> SchemaRef {
    match &after.carry {
        Some((_, s)) => s.clone(),
        None => after.schema.clone(),
    }
}
