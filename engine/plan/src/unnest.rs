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
use arrow::compute::take;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_physical_expr::PhysicalExpr;

/// The step of a select list that expands list columns.
pub struct UnnestPlan {
    /// On each kept source row: the lists to expand and every column the select list
    /// reads, with their SQL text.
    pub inner: Vec<(Arc<dyn PhysicalExpr>, String)>,
    /// Indexes in `inner` of the list columns expanded (each becomes its element type).
    pub lists: Vec<usize>,
    /// The expanded rows: `inner`'s columns, each list column replaced by its elements.
    pub schema: SchemaRef,
}

impl std::fmt::Debug for UnnestPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnnestPlan")
            .field(
                "inner",
                &self.inner.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            )
            .field("lists", &self.lists)
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
    /// Expands `inner` (the inner expressions' columns, in `inner`'s order).
    ///
    /// Errors: a list column is not a list (a bug guard: the planner checked).
    pub fn expand(&self, inner: &[ArrayRef]) -> anyhow::Result<Expanded> {
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
        let opts = RecordBatchOptions::new().with_row_count(Some(rows.len()));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &opts)?;
        Ok(Expanded {
            batch,
            rows,
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
