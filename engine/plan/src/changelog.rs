//! Rows of a changelog source (format `debezium_json`, issue 47): each row is one change,
//! its new row (`after`), old row (`before`) and operation side by side
//! ([`pubsub_engine_spi::changelog`]). A query evaluates its SELECT on each image apart, as
//! on the rows of an append-only table; what passes decides the change written:
//!
//! | old row passes | new row passes | change written |
//! |---|---|---|
//! | no | no | none |
//! | no | yes | `c` (a create, or an update into the rows the WHERE keeps) |
//! | yes | no | `d` (a delete, or an update out of them) |
//! | yes | yes | `u` |
//!
//! An updating aggregate takes the old rows as retractions and the new rows as rows,
//! each change's old row before its new one ([`first_stage`]).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{take, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema};
use pubsub_engine_spi::changelog::{CREATE, DELETE, OP_COLUMN, UPDATE};

use crate::eval::RowFailure;
use crate::select::SelectPlan;

/// The name of the column a retracting first stage adds before the event time: true for
/// a row to retract (a change's old row).
pub const RETRACT_COLUMN: &str = "__retract";

/// Whether `batch` is a changelog source's rows: its columns, each again as the old row,
/// then the operation (a table that merely names a column `__op` is not).
pub fn is_changes(batch: &RecordBatch) -> bool {
    let schema = batch.schema();
    let f = schema.fields();
    if f.len() % 2 == 0 || f.last().is_none_or(|l| l.name() != OP_COLUMN) {
        return false;
    }
    let n = f.len() / 2;
    (0..n).all(|i| {
        f[n + i]
            .name()
            .strip_prefix(pubsub_engine_spi::changelog::BEFORE_PREFIX)
            .is_some_and(|name| name == f[i].name())
    })
}

/// The two images of a changelog batch as rows of the table's columns.
pub struct Images {
    /// The new rows (of changes `c` and `u`), in batch order.
    pub after: RecordBatch,
    /// The change (row of the batch) of each new row.
    pub after_rows: Vec<u32>,
    /// The old rows (of changes `u` and `d`), in batch order.
    pub before: RecordBatch,
    pub before_rows: Vec<u32>,
}

/// Splits a changelog batch ([`is_changes`]) into its images.
///
/// Errors: an operation other than `c`, `u` and `d` (a bug guard: the decoder writes no
/// other).
pub fn images(batch: &RecordBatch) -> anyhow::Result<Images> {
    let n = (batch.num_columns() - 1) / 2;
    let ops = batch
        .column(2 * n)
        .as_string_opt::<i32>()
        .ok_or_else(|| anyhow::anyhow!("the changes' operation column is not TEXT"))?;
    let (mut after_rows, mut before_rows) = (Vec::new(), Vec::new());
    for i in 0..ops.len() {
        match ops.value(i) {
            CREATE => after_rows.push(i as u32),
            DELETE => before_rows.push(i as u32),
            UPDATE => {
                before_rows.push(i as u32);
                after_rows.push(i as u32);
            }
            other => anyhow::bail!("a change has operation '{other}' (c, u or d expected)"),
        }
    }
    let fields: Vec<Arc<Field>> = batch.schema().fields()[..n].to_vec();
    let schema = Arc::new(Schema::new(fields));
    let image = |from: usize, rows: &[u32]| -> anyhow::Result<RecordBatch> {
        let columns = &batch.columns()[from..from + n];
        let columns: Vec<ArrayRef> = if rows.len() == batch.num_rows() {
            columns.to_vec()
        } else {
            let idx = UInt32Array::from(rows.to_vec());
            columns
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<Result<_, _>>()?
        };
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    };
    Ok(Images {
        after: image(0, &after_rows)?,
        before: image(n, &before_rows)?,
        after_rows,
        before_rows,
    })
}

/// `select` on `batch`: the rows the WHERE keeps (their indexes in `batch`) and the select
/// list's rows for them. A failure names its row in `batch`.
pub fn select_kept(
    select: &SelectPlan,
    batch: &RecordBatch,
) -> Result<(Vec<u32>, RecordBatch), RowFailure> {
    let all = || (0..batch.num_rows() as u32).collect::<Vec<u32>>();
    let kept = match &select.filter {
        Some((f, _)) if batch.num_rows() > 0 => {
            let mask = f
                .evaluate(batch)
                .and_then(|v| v.into_array(batch.num_rows()))
                .ok()
                .and_then(|m| m.as_boolean_opt().cloned());
            match mask {
                Some(m) => (0..m.len())
                    .filter(|&i| m.is_valid(i) && m.value(i))
                    .map(|i| i as u32)
                    .collect(),
                // The plan's own evaluation names the failing row.
                None => return Err(select.evaluate(batch).err().unwrap_or_else(|| internal())),
            }
        }
        _ => all(),
    };
    let sub = if kept.len() == batch.num_rows() {
        batch.clone()
    } else {
        take_record_batch(batch, &UInt32Array::from(kept.clone())).map_err(|e| RowFailure {
            internal: true,
            error: e.to_string(),
            ..internal()
        })?
    };
    match select.evaluate(&sub) {
        Ok(out) if out.num_rows() == kept.len() => Ok((kept, out)),
        Ok(_) => Err(internal()),
        Err(mut f) => {
            if !f.internal {
                f.row = kept[f.row] as usize;
            }
            Err(f)
        }
    }
}

fn internal() -> RowFailure {
    RowFailure {
        row: 0,
        message_id: None,
        expr: "WHERE".into(),
        error: "the condition kept other rows on a second evaluation".into(),
        internal: true,
    }
}

/// Checks `select` on both images of a changelog batch: the first failing change (row of
/// `batch`), if any.
pub fn check_images(select: &SelectPlan, batch: &RecordBatch) -> Result<(), RowFailure> {
    let img = images(batch).map_err(|e| RowFailure {
        error: format!("{e:#}"),
        ..internal()
    })?;
    let mut first: Option<RowFailure> = None;
    for (image, rows) in [
        (&img.before, &img.before_rows),
        (&img.after, &img.after_rows),
    ] {
        if let Err(mut f) = select.evaluate(image) {
            if !f.internal {
                f.row = rows[f.row] as usize;
            }
            if first.as_ref().is_none_or(|g| f.row < g.row) {
                first = Some(f);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// The changes `batch` (a changelog source's rows) makes to the rows `select` writes, with
/// `sink` turning the select list's rows into sink rows (`declared` columns, then the
/// record id when the sink stamps them): a batch of the changelog layout (the sink's
/// declared columns as the new row, each again as the old row, the operation, then the
/// record id of the change's message), one change per change whose images pass as the
/// table in this module's header says.
pub fn project_changes(
    select: &SelectPlan,
    batch: &RecordBatch,
    declared: usize,
    sink: &dyn Fn(&RecordBatch) -> anyhow::Result<RecordBatch>,
    fail: &dyn Fn(RowFailure) -> anyhow::Error,
) -> anyhow::Result<RecordBatch> {
    let img = images(batch)?;
    let n = batch.num_rows();
    let mut at = [vec![None; n], vec![None; n]];
    let mut rows = Vec::new();
    for (side, (image, of)) in [
        (&img.after, &img.after_rows),
        (&img.before, &img.before_rows),
    ]
    .into_iter()
    .enumerate()
    {
        let (kept, out) = select_kept(select, image).map_err(|mut f| {
            if !f.internal {
                f.row = of[f.row] as usize;
            }
            fail(f)
        })?;
        for (j, k) in kept.iter().enumerate() {
            at[side][of[*k as usize] as usize] = Some(j as u32);
        }
        rows.push(sink(&out)?);
    }
    let (after, before) = (&rows[0], &rows[1]);
    let (mut a_idx, mut b_idx, mut ops) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let op = match (at[1][i], at[0][i]) {
            (None, None) => continue,
            (None, Some(_)) => CREATE,
            (Some(_), None) => DELETE,
            (Some(_), Some(_)) => UPDATE,
        };
        a_idx.push(at[0][i]);
        b_idx.push(at[1][i]);
        ops.push(op);
    }
    let a_idx = UInt32Array::from(a_idx);
    let b_idx = UInt32Array::from(b_idx);
    let schema = after.schema();
    let mut fields: Vec<Field> = schema.fields()[..declared]
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.extend(schema.fields()[..declared].iter().map(|f| {
        Field::new(
            pubsub_engine_spi::changelog::before_column(f.name()),
            f.data_type().clone(),
            true,
        )
    }));
    fields.push(Field::new(OP_COLUMN, DataType::Utf8, false));
    let mut columns = Vec::new();
    for c in &after.columns()[..declared] {
        columns.push(take(c.as_ref(), &a_idx, None)?);
    }
    for c in &before.columns()[..declared] {
        columns.push(take(c.as_ref(), &b_idx, None)?);
    }
    columns.push(Arc::new(arrow::array::StringArray::from(ops)) as ArrayRef);
    if schema.fields().len() > declared {
        // The record id: the change's message's, the same in both images.
        let f = schema.field(declared);
        let a = take(after.column(declared).as_ref(), &a_idx, None)?;
        let b = take(before.column(declared).as_ref(), &b_idx, None)?;
        let valid = BooleanArray::from((0..a.len()).map(|i| a.is_valid(i)).collect::<Vec<_>>());
        columns.push(arrow::compute::kernels::zip::zip(&valid, &a, &b)?);
        fields.push(f.clone());
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// A retracting first stage on a changelog batch: `select` (rows out `[keys.., arguments..,
/// event time]`) on each image, as one batch `[keys.., arguments.., retract, event time]`
/// holding each change's old row (retract true) before its new row, in change order.
///
/// Errors: a row failure, naming the change's row in `batch`.
pub fn first_stage(select: &SelectPlan, batch: &RecordBatch) -> Result<RecordBatch, RowFailure> {
    let img = images(batch).map_err(|e| RowFailure {
        error: format!("{e:#}"),
        ..internal()
    })?;
    let mut parts = Vec::new();
    for (image, of, retract) in [
        (&img.before, &img.before_rows, true),
        (&img.after, &img.after_rows, false),
    ] {
        let (kept, out) = select_kept(select, image).map_err(|mut f| {
            if !f.internal {
                f.row = of[f.row] as usize;
            }
            f
        })?;
        parts.push((
            kept.iter().map(|&k| of[k as usize]).collect::<Vec<u32>>(),
            out,
            retract,
        ));
    }
    // Merge in change order, the old row first.
    let mut order: Vec<(u32, bool, usize)> = Vec::new();
    for (p, (changes, _, retract)) in parts.iter().enumerate() {
        for (j, c) in changes.iter().enumerate() {
            order.push((*c, !*retract, p * (1 << 31) + j));
        }
    }
    order.sort_unstable();
    let width = select.schema.fields().len();
    let mut fields: Vec<Arc<Field>> = select.schema.fields().to_vec();
    fields.insert(
        width - 1,
        Arc::new(Field::new(RETRACT_COLUMN, DataType::Boolean, false)),
    );
    let wrap = |e: arrow::error::ArrowError| RowFailure {
        error: e.to_string(),
        ..internal()
    };
    let mut columns = Vec::with_capacity(width + 1);
    for c in 0..width {
        if c == width - 1 {
            let r: BooleanArray = order.iter().map(|(_, new, _)| Some(!new)).collect();
            columns.push(Arc::new(r) as ArrayRef);
        }
        let sources: Vec<&dyn Array> = parts.iter().map(|(_, b, _)| b.column(c).as_ref()).collect();
        let idx: Vec<(usize, usize)> = order
            .iter()
            .map(|(_, _, k)| (k >> 31, k & ((1 << 31) - 1)))
            .collect();
        columns.push(arrow::compute::interleave(&sources, &idx).map_err(wrap)?);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(wrap)
}
