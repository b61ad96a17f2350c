//! `AND` and `OR` whose result for a row is what the row gives evaluated alone (issue 31).
//!
//! DataFusion's `BinaryExpr` decides per batch whether to evaluate its right side: not at
//! all when the left is false on every row, on the true rows only when at most 20% are
//! true, else on every row, rows the left side already decides included. So
//! `x <> 0 AND 100 / x > 1` failed on a batch holding x = 0 and x = 5, though each row
//! passes alone. Here the right side is evaluated on exactly the rows the left side does not
//! decide (AND: true or NULL; OR: false or NULL), as a one-row batch does, and the sides
//! are combined with Kleene logic.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, BooleanBuilder};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_common::{internal_err, Result};
use datafusion_expr::{ColumnarValue, Operator};
use datafusion_physical_expr::expressions::{
    BinaryExpr, Column, IsNotNullExpr, IsNullExpr, Literal, NotExpr,
};
use datafusion_physical_expr::PhysicalExpr;

/// `left AND right` (`and`) or `left OR right`.
#[derive(Debug, Clone)]
pub struct RowLocalLogic {
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
    and: bool,
    /// The right side never fails on any row: it may run on the rows the left decides
    /// (their result ignores it), sparing the copy of the others.
    right_total: bool,
}

impl RowLocalLogic {
    /// `b` as a row-local AND/OR; `None` for any other expression.
    pub fn of(b: &BinaryExpr, schema: &Schema) -> Option<Self> {
        let and = match b.op() {
            Operator::And => true,
            Operator::Or => false,
            _ => return None,
        };
        Some(RowLocalLogic {
            left: b.left().clone(),
            right: b.right().clone(),
            and,
            right_total: total(b.right(), schema),
        })
    }
}

/// Whether `e` cannot fail on any row: columns, constants, NULL tests, NOT, AND/OR and
/// comparisons of two values of one type, built from those.
fn total(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    let any = e.as_any();
    if any.is::<Column>() || any.is::<Literal>() {
        return true;
    }
    if let Some(n) = any.downcast_ref::<NotExpr>() {
        return total(n.arg(), schema);
    }
    if let Some(n) = any.downcast_ref::<IsNullExpr>() {
        return total(n.arg(), schema);
    }
    if let Some(n) = any.downcast_ref::<IsNotNullExpr>() {
        return total(n.arg(), schema);
    }
    if let Some(l) = any.downcast_ref::<RowLocalLogic>() {
        return total(&l.left, schema) && l.right_total;
    }
    let Some(b) = any.downcast_ref::<BinaryExpr>() else {
        return false;
    };
    use Operator::*;
    let same_type = match (b.left().data_type(schema), b.right().data_type(schema)) {
        (Ok(l), Ok(r)) => {
            l == r && (l.is_primitive() || l == DataType::Utf8 || l == DataType::Boolean)
        }
        _ => false,
    };
    matches!(
        b.op(),
        Eq | NotEq | Lt | LtEq | Gt | GtEq | IsDistinctFrom | IsNotDistinctFrom
    ) && same_type
        && total(b.left(), schema)
        && total(b.right(), schema)
}

/// `v` as a BOOLEAN array of `n` rows (an untyped NULL is a NULL boolean).
fn booleans(v: ColumnarValue, n: usize) -> Result<BooleanArray> {
    let a = v.into_array(n)?;
    let a: ArrayRef = match a.data_type() {
        DataType::Boolean => a,
        DataType::Null => new_null_array(&DataType::Boolean, n),
        other => return internal_err!("AND/OR of a {other} value"),
    };
    if a.len() != n {
        return internal_err!("AND/OR: {} values for {n} rows", a.len());
    }
    Ok(a.as_boolean().clone())
}

impl PhysicalExpr for RowLocalLogic {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.left.nullable(input_schema)? || self.right.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        // Zero rows: nothing to evaluate (a constant right side could fail on none).
        if n == 0 {
            return Ok(ColumnarValue::Array(new_null_array(&DataType::Boolean, 0)));
        }
        let left = booleans(self.left.evaluate(batch)?, n)?;
        // The rows whose result the right side decides: AND where the left is not false,
        // OR where it is not true.
        let open: BooleanArray = left.iter().map(|v| Some(v != Some(!self.and))).collect();
        let count = open.true_count();
        let right = if count == 0 {
            return Ok(ColumnarValue::Array(Arc::new(left)));
        } else if count == n || self.right_total {
            booleans(self.right.evaluate(batch)?, n)?
        } else {
            let part = filter_record_batch(batch, &open)?;
            let values = booleans(self.right.evaluate(&part)?, count)?;
            // Back to the batch's rows: NULL where the left decides (Kleene ignores it).
            let mut values = values.iter();
            let mut all = BooleanBuilder::with_capacity(n);
            for o in open.values().iter() {
                all.append_option(if o { values.next().flatten() } else { None });
            }
            all.finish()
        };
        let out = if self.and {
            and_kleene(&left, &right)?
        } else {
            or_kleene(&left, &right)?
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right] = <[_; 2]>::try_from(children).map_err(|_| {
            datafusion_common::DataFusionError::Internal("AND/OR has two sides".into())
        })?;
        // Whether the new right side is total is not known without a schema: assume not.
        Ok(Arc::new(RowLocalLogic {
            left,
            right,
            and: self.and,
            right_total: false,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        self.left.fmt_sql(f)?;
        write!(f, " {} ", if self.and { "AND" } else { "OR" })?;
        self.right.fmt_sql(f)?;
        write!(f, ")")
    }
}

impl fmt::Display for RowLocalLogic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.and { "AND" } else { "OR" };
        write!(f, "({} {op} {})", self.left, self.right)
    }
}

// By hand, as DataFusion's own expressions do (`dyn` fields).
impl PartialEq for RowLocalLogic {
    fn eq(&self, other: &Self) -> bool {
        self.left.eq(&other.left) && self.right.eq(&other.right) && self.and == other.and
    }
}

impl Eq for RowLocalLogic {}

impl Hash for RowLocalLogic {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.left.hash(state);
        self.right.hash(state);
        self.and.hash(state);
    }
}
