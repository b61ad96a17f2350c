//! An explicit `CAST` or `TRY_CAST` between numbers that could change a value (SPEC 8: "a
//! value that does not fit exactly is refused, never rounded or truncated"). Arrow's casts
//! truncate a float into an integer (`CAST(2.7 AS BIGINT)` = 2) and round a decimal or a
//! float into fewer digits. Here such a value is a row failure under `CAST` and NULL under
//! `TRY_CAST`; rounding is the user's to write (`round`, `trunc`, `floor`, `ceil`). Casts
//! that keep every value ([`is_exact`]) are left as DataFusion built them. Text into numbers
//! and every date and time cast are checked by `number_text` and `temporal` (issue 31).

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder};
use arrow::compute::kernels::cmp::neq;
use arrow::compute::{cast_with_options, nullif, CastOptions};
use arrow::datatypes::{DataType, Float64Type, Schema};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::ColumnarValue;
use datafusion_physical_expr::expressions::{CastExpr, TryCastExpr};
use datafusion_physical_expr::PhysicalExpr;

use super::coercion::is_exact;
use crate::type_words::sql_type;

/// `e` as an [`ExactCast`] when it is a `CAST`/`TRY_CAST` from an input of `schema` that
/// could change a value; `None` for every other expression and for exact casts.
pub fn exact_cast(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<ExactCast> {
    let (expr, to, try_) = if let Some(c) = e.as_any().downcast_ref::<CastExpr>() {
        (c.expr(), c.cast_type(), false)
    } else if let Some(c) = e.as_any().downcast_ref::<TryCastExpr>() {
        (c.expr(), c.cast_type(), true)
    } else {
        return None;
    };
    let from = expr.data_type(schema).ok()?;
    checked(&from, to).then(|| ExactCast {
        expr: expr.clone(),
        to: to.clone(),
        try_,
        into: None,
    })
}

/// `expr` converted into a narrower integer sink column of Arrow type `to` (issue 47:
/// `BIGINT` into `INT`, `BIGINT UNSIGNED` into `BIGINT`, a signed integer into an
/// unsigned one): a value that does not fit fails its row, never wraps. `column` names
/// the sink column for the error (`column 'n' of table 'dst'`). `expr` is an integer:
/// the check relies on a lenient cast between integers giving NULL out of range.
pub fn into_sink_column(
    expr: Arc<dyn PhysicalExpr>,
    to: DataType,
    column: String,
) -> Arc<dyn PhysicalExpr> {
    Arc::new(ExactCast {
        expr,
        to,
        try_: false,
        into: Some(column),
    })
}

/// Casts whose changed values this module finds: between numbers (integers, floats,
/// decimals).
fn checked(from: &DataType, to: &DataType) -> bool {
    !is_exact(from, to) && from.is_numeric() && to.is_numeric()
}

/// `CAST(expr AS to)` (`try_` false: a changed value fails the row) or `TRY_CAST` (`try_`
/// true: a changed value is NULL).
#[derive(Debug, Clone)]
pub struct ExactCast {
    expr: Arc<dyn PhysicalExpr>,
    to: DataType,
    try_: bool,
    /// The sink column an INSERT converts into (see [`into_sink_column`]).
    into: Option<String>,
}

impl ExactCast {
    /// The rows where `out` (the cast of `input`) is not the same value as `input`.
    fn changed(&self, input: &ArrayRef, out: &ArrayRef) -> Result<BooleanArray> {
        let n = input.len();
        let both = |i: usize| input.is_valid(i) && out.is_valid(i);
        let mut changed = BooleanBufferBuilder::new(n);
        let lenient = CastOptions {
            safe: true,
            ..CastOptions::default()
        };
        let back = cast_with_options(out, input.data_type(), &lenient)?;
        if input.data_type().is_floating() {
            // IEEE equality: -0.0 = 0.0; NaN stays NaN (arrow's `neq` orders totally).
            let a = cast_with_options(input, &DataType::Float64, &lenient)?;
            let b = cast_with_options(&back, &DataType::Float64, &lenient)?;
            let (a, b) = (
                a.as_primitive::<Float64Type>(),
                b.as_primitive::<Float64Type>(),
            );
            for i in 0..n {
                let (x, y) = (a.value(i), b.value(i));
                let same = b.is_valid(i) && (x == y || (x.is_nan() && y.is_nan()));
                changed.append(both(i) && !same);
            }
        } else {
            let ne = neq(input, &back)?;
            for i in 0..n {
                changed.append(both(i) && (back.is_null(i) || ne.value(i)));
            }
        }
        Ok(BooleanArray::new(changed.finish(), None))
    }
}

impl PhysicalExpr for ExactCast {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.try_ || self.expr.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let value = self.expr.evaluate(batch)?;
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let input = value.into_array(if scalar { 1 } else { batch.num_rows() })?;
        let opts = CastOptions {
            safe: self.try_ || self.into.is_some(),
            ..CastOptions::default()
        };
        let mut out = cast_with_options(&input, &self.to, &opts)?;
        if let Some(column) = &self.into {
            // Between integers a lenient cast keeps a value exactly or, out of range, gives
            // NULL: a NULL the input did not have is the one check needed.
            if out.null_count() > input.null_count() {
                let i = (0..input.len())
                    .find(|&i| input.is_valid(i) && out.is_null(i))
                    .unwrap_or(0);
                return Err(DataFusionError::Execution(format!(
                    "{} does not fit {column} ({}: {}); a {} written to it is checked, never wrapped",
                    array_value_to_string(&input, i).unwrap_or_default(),
                    sql_type(&self.to),
                    integer_range(&self.to),
                    sql_type(input.data_type()),
                )));
            }
            return columnar(out, scalar);
        }
        let changed = self.changed(&input, &out)?;
        if changed.true_count() > 0 {
            if self.try_ {
                out = nullif(&out, &changed)?;
            } else {
                let i = (0..changed.len()).find(|&i| changed.value(i)).unwrap_or(0);
                let show = |a: &ArrayRef| array_value_to_string(a, i).unwrap_or_default();
                return Err(DataFusionError::Execution(format!(
                    "CAST of {} to {} would change the value (to {}); round it first with round(), trunc(), floor() or ceil(), or use TRY_CAST for NULL",
                    show(&input),
                    sql_type(&self.to),
                    show(&out)
                )));
            }
        }
        columnar(out, scalar)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.expr]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(ExactCast {
            expr: children[0].clone(),
            ..(*self).clone()
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", if self.try_ { "TRY_CAST" } else { "CAST" })?;
        self.expr.fmt_sql(f)?;
        write!(f, " AS {})", sql_type(&self.to))
    }
}

/// `out` as the value kind its input had: a one-row array back to a scalar.
fn columnar(out: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// The values an integer type holds, for errors.
fn integer_range(t: &DataType) -> String {
    use DataType::*;
    match t {
        Int8 => format!("{} to {}", i8::MIN, i8::MAX),
        Int16 => format!("{} to {}", i16::MIN, i16::MAX),
        Int32 => format!("{} to {}", i32::MIN, i32::MAX),
        Int64 => format!("{} to {}", i64::MIN, i64::MAX),
        UInt8 => format!("0 to {}", u8::MAX),
        UInt16 => format!("0 to {}", u16::MAX),
        UInt32 => format!("0 to {}", u32::MAX),
        UInt64 => format!("0 to {}", u64::MAX),
        other => sql_type(other),
    }
}

impl fmt::Display for ExactCast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.try_ { "TRY_CAST" } else { "CAST" };
        write!(f, "EXACT_{name}({} AS {:?})", self.expr, self.to)
    }
}

// By hand, as DataFusion's own casts do (rust-lang/rust#78808 with `dyn` fields).
impl PartialEq for ExactCast {
    fn eq(&self, other: &Self) -> bool {
        self.expr.eq(&other.expr)
            && self.to == other.to
            && self.try_ == other.try_
            && self.into == other.into
    }
}

impl Eq for ExactCast {}

impl Hash for ExactCast {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.expr.hash(state);
        self.to.hash(state);
        self.try_.hash(state);
        self.into.hash(state);
    }
}
