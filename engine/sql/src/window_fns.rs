//! `TUMBLE(width)`, `HOP(slide, width)` and `SESSION(gap)`: window functions written as
//! group items (Arroyo's form, issue 32 item 3). To DataFusion's planner they are scalar
//! functions returning the window as `STRUCT<start TIMESTAMP, end TIMESTAMP>`, so that
//! `window.start` plans in an outer SELECT; they are never evaluated: the window operator
//! computes each row's windows from its event time (`plan/src/window/`).

use std::any::Any;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, IntervalUnit, TimeUnit};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(crate) const TUMBLE: &str = "tumble";
pub(crate) const HOP: &str = "hop";
pub(crate) const SESSION: &str = "session";

/// The Arrow type of a window: `start` (inclusive) and `end` (exclusive), nanoseconds.
pub(crate) fn window_type() -> DataType {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    DataType::Struct(Fields::from(vec![
        Field::new("start", ts.clone(), false),
        Field::new("end", ts, false),
    ]))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowFn {
    name: &'static str,
    /// The intervals it takes, named for errors.
    params: &'static [&'static str],
    signature: Signature,
}

impl ScalarUDFImpl for WindowFn {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if args.len() != self.params.len() {
            return plan_err!(
                "{}({}) takes {} INTERVAL argument(s), got {}",
                self.name.to_uppercase(),
                self.params.join(", "),
                self.params.len(),
                args.len()
            );
        }
        for (a, p) in args.iter().zip(self.params) {
            if !matches!(a, DataType::Interval(_)) {
                return plan_err!(
                    "{}: {p} must be an INTERVAL (e.g. INTERVAL '1' MINUTE), was {a}",
                    self.name.to_uppercase()
                );
            }
        }
        Ok(window_type())
    }

    /// Never NULL, whatever its arguments: every row is in a window, whose bounds a
    /// `NOT NULL` sink column takes.
    fn return_field_from_args(
        &self,
        args: datafusion_expr::ReturnFieldArgs,
    ) -> Result<arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(Field::new(
            self.name,
            self.return_type(&types)?,
            false,
        )))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "{} is a window: it belongs in GROUP BY, where the window operator computes it",
            self.name.to_uppercase()
        )
    }
}

/// The three window functions, for the planner's catalog.
pub(crate) fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        (TUMBLE, &["width"][..]),
        (HOP, &["slide", "width"][..]),
        (SESSION, &["gap"][..]),
    ]
    .into_iter()
    .map(|(name, params)| {
        Arc::new(ScalarUDF::new_from_impl(WindowFn {
            name,
            params,
            signature: Signature::variadic_any(Volatility::Immutable),
        }))
    })
    .collect()
}

/// Whether `e` is a call of a window function; its name.
pub(crate) fn window_call(e: &Expr) -> Option<(&str, &[Expr])> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    match e {
        Expr::ScalarFunction(f) if [TUMBLE, HOP, SESSION].contains(&f.func.name()) => {
            Some((f.func.name(), &f.args))
        }
        _ => None,
    }
}

/// A constant INTERVAL argument as nanoseconds: `Err` names what is wrong (not a
/// constant, months or years, which have no fixed length).
pub(crate) fn interval_ns(e: &Expr) -> std::result::Result<i64, String> {
    let e = match e {
        Expr::Cast(c) => c.expr.as_ref(),
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let v = match e {
        Expr::Literal(v, _) => v,
        other => return Err(format!("`{other}` is not a constant INTERVAL")),
    };
    let (months, days, nanos): (i64, i64, i128) = match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) => {
            (i.months as i64, i.days as i64, i.nanoseconds as i128)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            (0, i.days as i64, i.milliseconds as i128 * 1_000_000)
        }
        ScalarValue::IntervalYearMonth(Some(m)) => (*m as i64, 0, 0),
        other => {
            let t = other.data_type();
            return Err(match t {
                DataType::Interval(IntervalUnit::YearMonth) => "is NULL".into(),
                _ => format!("is {t}, not an INTERVAL"),
            });
        }
    };
    if months != 0 {
        return Err(
            "counts months or years, which have no fixed length; write days or smaller units"
                .into(),
        );
    }
    let ns = days as i128 * 86_400_000_000_000 + nanos;
    i64::try_from(ns).map_err(|_| "is longer than 292 years".to_string())
}
