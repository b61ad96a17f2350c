//! Evaluating a [`SelectPlan`] on a batch of source rows: the WHERE condition drops rows
//! where it is not true, the select list computes the output columns. A row whose
//! expression fails (a CAST of text that is no number, a division by zero, an integer
//! overflow) is a row failure naming that row, never a NULL (SPEC 8, issue 17). A row's
//! result is what it gives evaluated alone, whatever else its batch holds (issue 31).

use std::sync::Arc;

use arrow::array::{new_empty_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::compute::{cast_with_options, filter_record_batch, CastOptions};
use arrow::datatypes::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::ScalarValue;
use datafusion_expr::Operator;
use datafusion_physical_expr::expressions::{BinaryExpr, Literal, NegativeExpr};
use datafusion_physical_expr::PhysicalExpr;

use super::exact_cast::exact_cast;
use super::row_local::RowLocalLogic;
use crate::select::SelectPlan;
use crate::type_words::message;

/// One row that no expression could compute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFailure {
    /// The row's index in the batch evaluated.
    pub row: usize,
    /// The row's message id, when the source table declares a `message-id` column.
    pub message_id: Option<String>,
    /// The expression, as written in SQL.
    pub expr: String,
    /// What went wrong, with the value when the error gives it.
    pub error: String,
    /// The batch failed but none of its rows fails alone: a bug of this program (an
    /// expression whose result depends on the other rows, issue 31). No row is blamed.
    pub internal: bool,
}

impl std::fmt::Display for RowFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.internal {
            return write!(
                f,
                "internal error: `{}` failed on a batch ({}) but on none of its rows alone; no row is blamed (please report this)",
                self.expr, self.error
            );
        }
        match &self.message_id {
            Some(id) => write!(f, "message {id}")?,
            None => write!(f, "row {} of its batch", self.row)?,
        }
        write!(f, ": `{}` failed: {}", self.expr, self.error)
    }
}

impl std::error::Error for RowFailure {}

/// `e` with nothing silently wrong: integer `+ - *` and unary minus fail on overflow
/// instead of wrapping (DataFusion's default wraps), and a `CAST` that would change a
/// value fails (a `TRY_CAST` gives NULL) instead of rounding or truncating it
/// ([`exact_cast`]); `AND`/`OR` evaluate their right side on exactly the rows their left
/// side does not decide, as a row alone does ([`RowLocalLogic`]).
pub fn checked_exprs(
    e: Arc<dyn PhysicalExpr>,
    schema: &arrow::datatypes::Schema,
) -> Arc<dyn PhysicalExpr> {
    e.transform_up(|x| {
        // Dates, times and text into numbers (issue 31): checked in their own module.
        if let Some(c) = super::temporal::checked(&x, schema) {
            return Ok(Transformed::yes(c));
        }
        if let Some(c) = exact_cast(&x, schema) {
            return Ok(Transformed::yes(Arc::new(c) as Arc<dyn PhysicalExpr>));
        }
        if let Some(b) = x.as_any().downcast_ref::<BinaryExpr>() {
            if let Some(l) = RowLocalLogic::of(b, schema) {
                return Ok(Transformed::yes(Arc::new(l) as Arc<dyn PhysicalExpr>));
            }
            if matches!(
                b.op(),
                Operator::Plus | Operator::Minus | Operator::Multiply
            ) {
                let checked = BinaryExpr::new(b.left().clone(), *b.op(), b.right().clone())
                    .with_fail_on_overflow(true);
                return Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>));
            }
        }
        if let Some(n) = x.as_any().downcast_ref::<NegativeExpr>() {
            let ty = n.arg().data_type(schema).unwrap_or(DataType::Null);
            if let Ok(zero) = ScalarValue::new_zero(&ty) {
                if zero.data_type().is_integer() {
                    let checked = BinaryExpr::new(
                        Arc::new(Literal::new(zero)),
                        Operator::Minus,
                        n.arg().clone(),
                    )
                    .with_fail_on_overflow(true);
                    return Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>));
                }
            }
        }
        Ok(Transformed::no(x))
    })
    .map(|t| t.data)
    .expect("the rewrite cannot fail")
}

impl SelectPlan {
    /// How many leading columns of [`evaluate`](Self::evaluate)'s rows are the select
    /// list and the carried record key: with `keep_source`, the source's columns follow.
    pub fn width(&self) -> usize {
        self.schema.fields().len() + self.carry.is_some() as usize
    }

    /// The rows of `batch` (the source table's rows) where the WHERE condition is true,
    /// as the select list's columns (schema: `fields`), in their order.
    ///
    /// Errors: the first row (in batch order) on which the condition or an expression
    /// fails.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<RecordBatch, RowFailure> {
        match self.evaluate_all(batch) {
            Ok(out) => Ok(out),
            Err(whole) => Err(self.narrow(batch, whole)),
        }
    }

    fn evaluate_all(&self, batch: &RecordBatch) -> Result<RecordBatch, (String, String)> {
        let fail = |text: &str, e: String| (text.to_string(), e);
        // Nothing is evaluated on zero rows: a constant (`1 / 0`) would fail on none, and a
        // row the WHERE drops must not fail the select list.
        let kept = match &self.filter {
            Some((f, text)) if batch.num_rows() > 0 => {
                let mask = f
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(|e| fail(text, message(&e)))?;
                let mask = mask
                    .as_boolean_opt()
                    .ok_or_else(|| fail(text, format!("is {}, not BOOLEAN", mask.data_type())))?;
                // NULL is not true: the row is dropped, as SQL's WHERE does.
                filter_record_batch(batch, mask).map_err(|e| fail(text, e.to_string()))?
            }
            _ => batch.clone(),
        };
        let exact = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        // UNNEST: the select list runs on the expanded rows (`unnest.rs`).
        let expanded = match &self.unnest {
            Some(u) if kept.num_rows() > 0 => {
                let inner = u
                    .inner
                    .iter()
                    .map(|(e, text)| {
                        e.evaluate(&kept)
                            .and_then(|v| v.into_array(kept.num_rows()))
                            .map_err(|x| fail(text, message(&x)))
                    })
                    .collect::<Result<Vec<ArrayRef>, _>>()?;
                let ex = u
                    .expand(&inner, &kept)
                    .map_err(|x| fail("UNNEST", x.to_string()))?;
                Some(u.keep(ex)?)
            }
            Some(u) => Some(crate::unnest::Expanded {
                batch: RecordBatch::new_empty(u.schema.clone()),
                rows: arrow::array::UInt32Array::from(Vec::<u32>::new()),
                elements: Vec::new(),
            }),
            None => None,
        };
        let rows = expanded.as_ref().map_or(&kept, |x| &x.batch);
        let columns = self
            .exprs
            .iter()
            .zip(self.schema.fields())
            .map(|((e, text), field)| {
                if rows.num_rows() == 0 {
                    return Ok(new_empty_array(field.data_type()));
                }
                let v = e
                    .evaluate(rows)
                    .and_then(|v| v.into_array(rows.num_rows()))
                    .map_err(|x| fail(text, message(&x)))?;
                if v.data_type() == field.data_type() {
                    return Ok(v);
                }
                // Only exact conversions were planned (see `select::field_type`).
                cast_with_options(&v, field.data_type(), &exact)
                    .map_err(|x| fail(text, x.to_string()))
            })
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        let (mut schema, mut columns) = match &self.carry {
            None => (self.schema.clone(), columns),
            Some((i, schema)) => {
                let mut columns = columns;
                columns.push(match &expanded {
                    None => kept.column(*i).clone(),
                    // Each element its own record key: `KEY#N#E`.
                    Some(x) => crate::unnest::element_keys(kept.column(*i), x)
                        .map_err(|e| fail("UNNEST", e.to_string()))?,
                });
                (schema.clone(), columns)
            }
        };
        if self.keep_source {
            let fields: Vec<_> = schema
                .fields()
                .iter()
                .chain(kept.schema().fields())
                .cloned()
                .collect();
            schema = Arc::new(arrow::datatypes::Schema::new(fields));
            match &expanded {
                None => columns.extend(kept.columns().iter().cloned()),
                Some(x) => {
                    for c in kept.columns() {
                        columns.push(
                            arrow::compute::take(c, &x.rows, None)
                                .map_err(|e| fail("UNNEST", e.to_string()))?,
                        );
                    }
                }
            }
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
        RecordBatch::try_new_with_options(schema, columns, &opts).map_err(|e| {
            // A NULL from an expression planned as NOT NULL: a bug guard, reported per row.
            fail("SELECT", e.to_string())
        })
    }

    /// Bisects `batch` for its first failing row. Expressions are deterministic and
    /// row-local (`checked_exprs`), so a slice fails exactly when one of its rows does; a
    /// row found that passes alone is an internal error, never blamed.
    fn narrow(&self, batch: &RecordBatch, whole: (String, String)) -> RowFailure {
        let (mut lo, mut len) = (0, batch.num_rows());
        while len > 1 {
            let half = len / 2;
            if self.evaluate_all(&batch.slice(lo, half)).is_err() {
                len = half;
            } else {
                lo += half;
                len -= half;
            }
        }
        let ((expr, error), internal) = match self.evaluate_all(&batch.slice(lo, len.min(1))) {
            Err(one) => (one, false),
            Ok(_) => (whole, true),
        };
        let message_id = self.message_id.filter(|_| !internal).and_then(|i| {
            let c = batch.column(i);
            let s = c.as_string_opt::<i32>()?;
            (lo < s.len() && s.is_valid(lo)).then(|| s.value(lo).to_string())
        });
        RowFailure {
            row: lo,
            message_id,
            expr,
            error,
            internal,
        }
    }
}
