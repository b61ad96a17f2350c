//! `UNNEST(list)` in a select list (issue 48, part 3): one row per element. The select
//! list runs in two steps around it: the inner expressions compute the lists (and the
//! columns the outer step reads) on each kept source row, the rows are expanded, and the
//! outer expressions run on the expanded rows.
//!
//! As DataFusion's SQL (and PostgreSQL, DuckDB) do: several UNNESTs in one select list
//! expand in step, the longest list giving the row count and the shorter ones padded with
//! NULL; a NULL or empty list gives no row. Each output row remembers its source row and
//! its element's position, so a row failure names the source row and a record key gets the
//! element's position (`KEY#N#E`, see [`pubsub_engine_spi::record_id`]).

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, GenericListArray, OffsetSizeTrait, RecordBatch,
    RecordBatchOptions, StringArray, UInt32Array,
};
use arrow::compute::{filter, filter_record_batch, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_physical_expr::PhysicalExpr;

/// The step of a select list that expands list columns.
pub struct UnnestPlan {
    /// On each kept source row: the lists to expand and every column the select list
    /// reads, with their SQL text.
    pub inner: Vec<(Arc<dyn PhysicalExpr>, String)>,
    /// Indexes in `inner` of the list columns expanded (each becomes its element type).
    pub lists: Vec<usize>,
    /// Columns of the source's rows appended to the expanded rows, each element's row
    /// taking its source row's value (the event time, below an aggregate).
    pub carry: Vec<usize>,
    /// The expanded rows: `inner`'s columns, each list column replaced by its elements,
    /// then the `carry` columns.
    pub schema: SchemaRef,
    /// A condition on the expanded rows (a WHERE above the UNNEST, in a subquery or a
    /// view): the rows where it is not true are dropped, as SQL's WHERE drops them.
    pub filter: Option<(Arc<dyn PhysicalExpr>, String)>,
}

impl std::fmt::Debug for UnnestPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnnestPlan")
            .field(
                "inner",
                &self.inner.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            )
            .field("lists", &self.lists)
            .field("filter", &self.filter.as_ref().map(|(_, t)| t))
            .finish()
    }
}

/// Rows expanded from a batch: for each, its row in that batch and its element's
/// position in the longest of its lists.
pub struct Expanded {
    pub batch: RecordBatch,
    pub rows: UInt32Array,
    pub elements: Vec<u32>,
}

impl UnnestPlan {
    /// Expands `inner` (the inner expressions' columns, in `inner`'s order, over
    /// `source`'s rows).
    ///
    /// Errors: a list column is not a list (a bug guard: the planner checked).
    pub fn expand(&self, inner: &[ArrayRef], source: &RecordBatch) -> anyhow::Result<Expanded> {
        let n = inner.first().map_or(0, |c| c.len());
        let lengths: Vec<Vec<usize>> = self
            .lists
            .iter()
            .map(|&i| list_lengths(&inner[i]))
            .collect::<anyhow::Result<_>>()?;
        let mut rows = Vec::new();
        let mut elements = Vec::new();
        for r in 0..n {
            let longest = lengths.iter().map(|l| l[r]).max().unwrap_or(0);
            for e in 0..longest {
                rows.push(r as u32);
                elements.push(e as u32);
            }
        }
        let rows = UInt32Array::from(rows);
        let mut columns = Vec::with_capacity(inner.len());
        for (i, c) in inner.iter().enumerate() {
            match self.lists.iter().position(|&l| l == i) {
                None => columns.push(take(c, &rows, None)?),
                Some(k) => columns.push(elements_of(c, &lengths[k], &rows, &elements)?),
            }
        }
        for &i in &self.carry {
            columns.push(take(source.column(i), &rows, None)?);
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(rows.len()));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &opts)?;
        Ok(Expanded {
            batch,
            rows,
            elements,
        })
    }

    /// The rows of `ex` where [`filter`](Self::filter) is true (all without one).
    ///
    /// Errors: the condition fails on some row, or is not BOOLEAN (with its text).
    pub fn keep(&self, ex: Expanded) -> Result<Expanded, (String, String)> {
        let Some((f, text)) = &self.filter else {
            return Ok(ex);
        };
        if ex.batch.num_rows() == 0 {
            return Ok(ex);
        }
        let fail = |e: String| (text.clone(), e);
        let mask = f
            .evaluate(&ex.batch)
            .and_then(|v| v.into_array(ex.batch.num_rows()))
            .map_err(|e| fail(crate::type_words::message(&e)))?;
        let mask = mask
            .as_boolean_opt()
            .ok_or_else(|| fail(format!("is {}, not BOOLEAN", mask.data_type())))?;
        let batch = filter_record_batch(&ex.batch, mask).map_err(|e| fail(e.to_string()))?;
        let rows = filter(&ex.rows, mask).map_err(|e| fail(e.to_string()))?;
        let elements = ex
            .elements
            .iter()
            .zip(mask.iter())
            .filter(|(_, m)| *m == Some(true))
            .map(|(e, _)| *e)
            .collect();
        Ok(Expanded {
            batch,
            rows: rows.as_primitive::<arrow::datatypes::UInt32Type>().clone(),
            elements,
        })
    }
}

/// The record key of each expanded row: its source row's key (`KEY#N`) and its
/// element's position, `KEY#N#E`.
pub fn element_keys(keys: &ArrayRef, ex: &Expanded) -> anyhow::Result<ArrayRef> {
    let keys = keys
        .as_string_opt::<i32>()
        .ok_or_else(|| anyhow::anyhow!("the record key is not TEXT"))?;
    let out: StringArray = ex
        .rows
        .values()
        .iter()
        .zip(&ex.elements)
        .map(|(&r, e)| {
            let r = r as usize;
            keys.is_valid(r).then(|| format!("{}#{e}", keys.value(r)))
        })
        .collect();
    Ok(Arc::new(out))
}

/// Each row's list length (0 for a NULL list).
fn list_lengths(c: &ArrayRef) -> anyhow::Result<Vec<usize>> {
    fn of<O: OffsetSizeTrait>(l: &GenericListArray<O>) -> Vec<usize> {
        (0..l.len())
            .map(|r| {
                if l.is_null(r) {
                    0
                } else {
                    (l.value_offsets()[r + 1] - l.value_offsets()[r]).as_usize()
                }
            })
            .collect()
    }
    match c.data_type() {
        DataType::List(_) => Ok(of(c.as_list::<i32>())),
        DataType::LargeList(_) => Ok(of(c.as_list::<i64>())),
        other => Err(anyhow::anyhow!("UNNEST of {other}, not a list")),
    }
}

/// The elements of list column `c` for the expanded rows (`rows`, `elements`): NULL past
/// the end of a row's list.
fn elements_of(
    c: &ArrayRef,
    lengths: &[usize],
    rows: &UInt32Array,
    elements: &[u32],
) -> anyhow::Result<ArrayRef> {
    let (values, starts): (ArrayRef, Vec<usize>) = match c.data_type() {
        DataType::List(_) => {
            let l = c.as_list::<i32>();
            let s = l.value_offsets().iter().map(|o| *o as usize).collect();
            (l.values().clone(), s)
        }
        DataType::LargeList(_) => {
            let l = c.as_list::<i64>();
            let s = l.value_offsets().iter().map(|o| *o as usize).collect();
            (l.values().clone(), s)
        }
        other => return Err(anyhow::anyhow!("UNNEST of {other}, not a list")),
    };
    if rows.is_empty() {
        return Ok(new_null_array(values.data_type(), 0).slice(0, 0));
    }
    let idx: UInt32Array = rows
        .values()
        .iter()
        .zip(elements)
        .map(|(&r, &e)| {
            let r = r as usize;
            ((e as usize) < lengths[r]).then(|| (starts[r] + e as usize) as u32)
        })
        .collect();
    Ok(take(&values, &idx, None)?)
}
