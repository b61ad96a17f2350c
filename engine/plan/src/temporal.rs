//! Dates and times checked like integers (issue 31, item 4). Arrow and DataFusion compute
//! dates and times in `i64` without a check in many places: a `DATE` into a `TIMESTAMP`
//! multiplies days by nanoseconds per day (`9999-12-31` became a date in the 1800s),
//! `date_trunc` multiplies by its unit, `date_bin` adds and subtracts, a number into a
//! `TIMESTAMP` goes through a truncating float-to-integer step, a coarser unit truncates.
//! Here every such value is computed in `i128` nanoseconds and written back only when the
//! type holds it exactly; otherwise the row fails (`TRY_CAST`: NULL). Dates and timestamps
//! are kept within the proleptic Gregorian calendar chrono reads (years -262143 to
//! 262142; a `TIMESTAMP` in nanoseconds: 1677-09-21 to 2262-04-11), so no later function
//! meets a value it cannot read.
//!
//! What cannot be checked is refused when the pipeline is planned ([`refuse_unchecked`]):
//! time zones other than UTC, `DATE64`, durations, intervals other than `INTERVAL`'s month-
//! day-nanosecond form, a number other than an integer into a timestamp of seconds.
//!
//! Casts whose meaning is to take part of a value are kept: `CAST(ts AS DATE)` is the date
//! of the instant, `CAST(ts AS TIME)` its time of day.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::cast_utils::{string_to_datetime, Parser};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{
    DataType, Date32Type, IntervalUnit, Schema, Time64NanosecondType, TimeUnit,
};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use chrono::Utc;
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, Operator};
use datafusion_physical_expr::expressions::{BinaryExpr, CastExpr, NegativeExpr, TryCastExpr};
use datafusion_physical_expr::{PhysicalExpr, ScalarFunctionExpr};

use super::number_text;
use crate::calendar::{
    build, counts, datetime_of, is_time_like, is_utc, ns_of, range_words, temporal, write,
    Temporal, Unfit, DAY, SECOND,
};
use crate::type_words::sql_type;

/// How a checked cast converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum How {
    /// Text into a date, timestamp or time, parsed at nanosecond precision.
    Parse(Temporal),
    /// Text into an `INTERVAL`: Arrow's parser.
    ParseInterval,
    /// A date, time or interval as text: Arrow's formatting.
    Format,
    /// Between dates, timestamps and times.
    Temporal(Temporal, Temporal),
    /// An integer into days, seconds or a time of day.
    FromInteger(Temporal),
    /// The integer of a date, timestamp or time into a number.
    ToNumber(Temporal),
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn how(from: &DataType, to: &DataType) -> Option<How> {
    let interval = |t: &DataType| *t == DataType::Interval(IntervalUnit::MonthDayNano);
    match (temporal(from), temporal(to)) {
        (Some(f), Some(t)) => match (f, t) {
            (Temporal::Time(_), Temporal::Date | Temporal::Instant(_))
            | (Temporal::Date, Temporal::Time(_)) => None,
            _ => Some(How::Temporal(f, t)),
        },
        (None, Some(t)) if is_text(from) => Some(How::Parse(t)),
        (None, Some(t)) if from.is_integer() => match t {
            Temporal::Instant(TimeUnit::Second) | Temporal::Date | Temporal::Time(_) => {
                Some(How::FromInteger(t))
            }
            Temporal::Instant(_) => None,
        },
        (Some(_), None) if is_text(to) => Some(How::Format),
        (Some(f), None) if number_text::handles(to) => Some(How::ToNumber(f)),
        (None, None) if is_text(from) && interval(to) => Some(How::ParseInterval),
        (None, None) if interval(from) && is_text(to) => Some(How::Format),
        _ => None,
    }
}

/// A `CAST`/`TRY_CAST` of a date, time or interval, or into one, checked.
#[derive(Debug, Clone)]
pub struct TimeCast {
    expr: Arc<dyn PhysicalExpr>,
    to: DataType,
    try_: bool,
    how: How,
}

/// The input value at `i`, as a message shows it.
fn shown(a: &ArrayRef, i: usize) -> String {
    let s = array_value_to_string(a, i).unwrap_or_default();
    if is_text(a.data_type()) {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        s
    }
}

/// The row failure of a value `shown` that `to` does not hold.
pub fn cast_failure(shown: &str, to: &DataType, why: &Unfit) -> DataFusionError {
    let ty = sql_type(to);
    DataFusionError::Execution(match why {
        Unfit::Range => {
            let range = range_words(to);
            if range.is_empty() {
                format!("CAST of {shown} to {ty}: out of range for {ty}")
            } else {
                format!("CAST of {shown} to {ty}: out of range for {ty} ({range})")
            }
        }
        Unfit::Changed => format!(
            "CAST of {shown} to {ty} would change the value: {ty} does not hold all of it; round it first with date_trunc(), or use TRY_CAST for NULL"
        ),
        Unfit::Invalid(why) => format!("CAST of {shown} to {ty}: {why}"),
    })
}

impl TimeCast {
    /// The value of row `i` of `input`, converted.
    fn one(&self, counts: &[Option<i128>], i: usize) -> std::result::Result<Option<i64>, Unfit> {
        let Some(v) = counts.get(i).copied().flatten() else {
            return Ok(None);
        };
        let out = match self.how {
            How::Temporal(f, t) => {
                let ns = v * f.step();
                let ns = match (f, t) {
                    (Temporal::Instant(_), Temporal::Date) => ns.div_euclid(DAY) * DAY,
                    (Temporal::Instant(_), Temporal::Time(_)) => ns.rem_euclid(DAY),
                    _ => ns,
                };
                write(ns, t)?
            }
            How::FromInteger(t) => write(v * t.step(), t)?,
            How::Parse(_) | How::ParseInterval | How::Format | How::ToNumber(_) => {
                unreachable!("converted by whole arrays")
            }
        };
        Ok(Some(out))
    }

    fn convert(&self, input: &ArrayRef) -> Result<ArrayRef> {
        let opts = CastOptions {
            safe: self.try_,
            ..CastOptions::default()
        };
        let fail = |i: usize, why: Unfit| cast_failure(&shown(input, i), &self.to, &why);
        match self.how {
            How::Format | How::ParseInterval => {
                cast_with_options(input, &self.to, &opts).map_err(|e| {
                    let i = (0..input.len()).find(|&i| input.is_valid(i)).unwrap_or(0);
                    match self.how {
                        How::ParseInterval => {
                            fail(i, Unfit::Invalid(format!("not an INTERVAL ({e})")))
                        }
                        _ => DataFusionError::ArrowError(Box::new(e), None),
                    }
                })
            }
            How::Parse(t) => {
                let text = cast_with_options(input, &DataType::Utf8, &CastOptions::default())?;
                let text = text.as_string::<i32>();
                let mut out = Vec::with_capacity(text.len());
                for i in 0..text.len() {
                    if text.is_null(i) {
                        out.push(None);
                        continue;
                    }
                    match parse(text.value(i), t) {
                        Ok(v) => out.push(Some(v)),
                        Err(_) if self.try_ => out.push(None),
                        Err(why) => return Err(fail(i, why)),
                    }
                }
                build(&self.to, &out)
            }
            How::ToNumber(_) => {
                let counts = counts(input)?;
                let mut out: Vec<ScalarValue> = Vec::with_capacity(counts.len());
                let null = ScalarValue::try_from(&self.to)?;
                for (i, c) in counts.iter().enumerate() {
                    match c.map(|v| count_to_number(v, &self.to)) {
                        None => out.push(null.clone()),
                        Some(Ok(v)) => out.push(v),
                        Some(Err(_)) if self.try_ => out.push(null.clone()),
                        Some(Err(why)) => return Err(fail(i, why)),
                    }
                }
                if out.is_empty() {
                    return Ok(arrow::array::new_empty_array(&self.to));
                }
                ScalarValue::iter_to_array(out)
            }
            How::Temporal(..) | How::FromInteger(_) => {
                let counts = counts(input)?;
                let mut out = Vec::with_capacity(counts.len());
                for i in 0..counts.len() {
                    match self.one(&counts, i) {
                        Ok(v) => out.push(v),
                        Err(_) if self.try_ => out.push(None),
                        Err(why) => return Err(fail(i, why)),
                    }
                }
                build(&self.to, &out)
            }
        }
    }
}

/// Text as the integer of `t`: parsed to the nanosecond, then written exactly.
pub fn parse(s: &str, t: Temporal) -> std::result::Result<i64, Unfit> {
    let ns = match t {
        Temporal::Date => match Date32Type::parse(s) {
            Some(days) => i128::from(days) * DAY,
            None => return Err(Unfit::Invalid("not a date (YYYY-MM-DD)".into())),
        },
        Temporal::Instant(_) => match string_to_datetime(&Utc, s) {
            Ok(dt) => i128::from(dt.timestamp()) * SECOND + i128::from(dt.timestamp_subsec_nanos()),
            Err(_) => {
                return Err(Unfit::Invalid(
                    "not a date and time (RFC 3339, e.g. 2024-05-01T10:00:00Z)".into(),
                ))
            }
        },
        Temporal::Time(_) => match Time64NanosecondType::parse(s) {
            Some(ns) => i128::from(ns),
            None => return Err(Unfit::Invalid("not a time of day (HH:MM:SS[.f])".into())),
        },
    };
    write(ns, t)
}

/// The integer `v` of a date, time or timestamp as a value of the number type `to`,
/// exactly.
pub fn count_to_number(v: i128, to: &DataType) -> std::result::Result<ScalarValue, Unfit> {
    match to {
        DataType::Float64 => {
            let f = v as f64;
            (f as i128 == v)
                .then_some(ScalarValue::Float64(Some(f)))
                .ok_or(Unfit::Changed)
        }
        DataType::Float32 => {
            let f = v as f32;
            (f as i128 == v)
                .then_some(ScalarValue::Float32(Some(f)))
                .ok_or(Unfit::Changed)
        }
        _ => number_text::convert(&v.to_string(), to).map_err(|_| Unfit::Range),
    }
}

impl PhysicalExpr for TimeCast {
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
        let out = self.convert(&input)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.expr]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(TimeCast {
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

impl fmt::Display for TimeCast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.try_ { "TRY_CAST" } else { "CAST" };
        write!(f, "TIME_{name}({} AS {:?})", self.expr, self.to)
    }
}

impl PartialEq for TimeCast {
    fn eq(&self, other: &Self) -> bool {
        self.expr.eq(&other.expr) && self.to == other.to && self.try_ == other.try_
    }
}

impl Eq for TimeCast {}

impl Hash for TimeCast {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.expr.hash(state);
        self.to.hash(state);
        self.try_.hash(state);
    }
}

/// `e` checked, when it is a cast, arithmetic or function this module (or
/// [`number_text`]) checks: the hook of `eval::checked_exprs`. `None` leaves `e` as it is;
/// [`refuse_unchecked`] then refuses what should have been checked.
pub fn checked(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Arc<dyn PhysicalExpr>> {
    let (expr, to, try_) = if let Some(c) = e.as_any().downcast_ref::<CastExpr>() {
        (c.expr(), c.cast_type(), false)
    } else if let Some(c) = e.as_any().downcast_ref::<TryCastExpr>() {
        (c.expr(), c.cast_type(), true)
    } else if let Some(b) = e.as_any().downcast_ref::<BinaryExpr>() {
        return TimeArith::new(b, schema).map(|a| Arc::new(a) as Arc<dyn PhysicalExpr>);
    } else {
        return super::temporal_fns::checked(e, schema);
    };
    let from = expr.data_type(schema).ok()?;
    if from == *to || from == DataType::Null {
        return None;
    }
    if is_text(&from) && number_text::handles(to) {
        return Some(Arc::new(number_text::TextToNumber {
            expr: expr.clone(),
            to: to.clone(),
            try_,
        }));
    }
    if !(is_time_like(&from) || is_time_like(to)) {
        return None;
    }
    let how = how(&from, to)?;
    Some(Arc::new(TimeCast {
        expr: expr.clone(),
        to: to.clone(),
        try_,
        how,
    }))
}

/// Refuses, when the pipeline is planned, a date or time computation [`checked`] left as
/// DataFusion built it: a cast, arithmetic or function over dates and times it does not
/// check, a time zone other than UTC, a type it does not compute with.
pub fn refuse_unchecked(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> std::result::Result<(), String> {
    let ty = |x: &Arc<dyn PhysicalExpr>| x.data_type(schema).unwrap_or(DataType::Null);
    let out = ty(e);
    if let DataType::Timestamp(_, z) = &out {
        if !is_utc(z) {
            return Err(format!(
                "a TIMESTAMP in time zone '{}' is not supported: a TIMESTAMP is UTC here, and computations in other zones are not checked",
                z.as_deref().unwrap_or_default()
            ));
        }
    }
    if let Some(c) = e.as_any().downcast_ref::<CastExpr>() {
        cast_refusal(&ty(c.expr()), c.cast_type())?;
    } else if let Some(c) = e.as_any().downcast_ref::<TryCastExpr>() {
        cast_refusal(&ty(c.expr()), c.cast_type())?;
    } else if let Some(b) = e.as_any().downcast_ref::<BinaryExpr>() {
        let (l, r) = (ty(b.left()), ty(b.right()));
        let arithmetic = matches!(
            b.op(),
            Operator::Plus
                | Operator::Minus
                | Operator::Multiply
                | Operator::Divide
                | Operator::Modulo
        );
        if arithmetic && (is_time_like(&l) || is_time_like(&r)) && !exact_arithmetic(b.op(), &l, &r)
        {
            return Err(format!(
                "{} {} {} is not supported: this arithmetic on dates and times is not checked",
                sql_type(&l),
                b.op(),
                sql_type(&r)
            ));
        }
    } else if let Some(f) = e.as_any().downcast_ref::<ScalarFunctionExpr>() {
        super::temporal_fns::refusal(f, schema)?;
    } else if let Some(n) = e.as_any().downcast_ref::<NegativeExpr>() {
        // Arrow negates an interval wrapping (-(-2147483648 months)).
        let t = ty(n.arg());
        if is_time_like(&t) {
            return Err(format!(
                "-{} is not supported: write the negative value (INTERVAL '-1 day') or subtract",
                sql_type(&t)
            ));
        }
    }
    if matches!(
        out,
        DataType::Date64 | DataType::Interval(IntervalUnit::YearMonth | IntervalUnit::DayTime)
    ) {
        return Err(format!(
            "{} is not supported: write DATE, TIMESTAMP, TIME or INTERVAL",
            sql_type(&out)
        ));
    }
    for c in e.children() {
        refuse_unchecked(c, schema)?;
    }
    Ok(())
}

fn cast_refusal(from: &DataType, to: &DataType) -> std::result::Result<(), String> {
    if from == to || *from == DataType::Null {
        return Ok(());
    }
    // Arrow casts arrays element by element unchecked (a DOUBLE[] into BIGINT[] truncates)
    // and writes one as TEXT in its own format: only a cast that changes no element.
    let list = |t: &DataType| {
        matches!(
            t,
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
        )
    };
    if (list(from) || list(to)) && !from.equals_datatype(to) {
        return Err(format!(
            "CAST from {} to {} is not supported: the elements of an array are not converted checked; UNNEST it and CAST each element",
            sql_type(from),
            sql_type(to)
        ));
    }
    if is_text(from) && to.is_numeric() && !number_text::handles(to) {
        return Err(format!("CAST of TEXT to {} is not supported", sql_type(to)));
    }
    if !(is_time_like(from) || is_time_like(to)) {
        return Ok(());
    }
    if how(from, to).is_some() {
        // `checked` would have taken it: a bug guard.
        return Err(format!(
            "CAST from {} to {} was not checked",
            sql_type(from),
            sql_type(to)
        ));
    }
    let hint = match temporal(to) {
        Some(Temporal::Instant(_)) if from.is_numeric() => {
            " (a BIGINT CAST AS TIMESTAMP counts seconds since 1970-01-01; CAST the number to BIGINT first, or use to_timestamp(x) for seconds with a fraction, to_timestamp_millis(x), to_timestamp_micros(x) or to_timestamp_nanos(x))"
        }
        _ => "",
    };
    Err(format!(
        "CAST from {} to {} is not supported: it could not be checked to keep the value{hint}",
        sql_type(from),
        sql_type(to)
    ))
}

/// `CAST(d AS TIMESTAMP)` etc. into the column type of an output, checked: for
/// `select::plan_select`, where an expression's type differs from its column's.
pub fn output_cast(
    e: Arc<dyn PhysicalExpr>,
    from: &DataType,
    to: &DataType,
) -> Arc<dyn PhysicalExpr> {
    match how(from, to) {
        Some(how @ How::Temporal(..)) => Arc::new(TimeCast {
            expr: e,
            to: to.clone(),
            try_: false,
            how,
        }),
        _ => e,
    }
}

/// Arithmetic on dates and times that Arrow computes exactly with `checked_exprs`'s
/// overflow checks: the difference of two timestamps or two dates (a duration), and sums
/// and differences of durations or of intervals.
fn exact_arithmetic(op: &Operator, l: &DataType, r: &DataType) -> bool {
    let interval = DataType::Interval(IntervalUnit::MonthDayNano);
    if !matches!(op, Operator::Plus | Operator::Minus) {
        return false;
    }
    match (l, r) {
        (DataType::Interval(_), DataType::Interval(_)) => *l == interval && l == r,
        (DataType::Duration(a), DataType::Duration(b)) => a == b,
        (DataType::Timestamp(a, _), DataType::Duration(b)) => a == b && temporal(l).is_some(),
        (DataType::Duration(a), DataType::Timestamp(b, _)) => {
            *op == Operator::Plus && a == b && temporal(r).is_some()
        }
        _ => {
            *op == Operator::Minus
                && l == r
                && matches!(temporal(l), Some(Temporal::Date | Temporal::Instant(_)))
        }
    }
}

/// `date_or_timestamp ± INTERVAL` (or `INTERVAL + date_or_timestamp`), checked: months on
/// the calendar (the day clamped to the month's last, as Arrow does), then days, then the
/// time, in `i128` nanoseconds; the result must fit its type, and a DATE must stay a whole
/// day (Arrow dropped the time: `DATE '2024-01-02' + INTERVAL '36 hours'` was 2024-01-03).
#[derive(Debug, Clone)]
pub struct TimeArith {
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
    op: Operator,
    /// True when the interval is the left operand.
    interval_left: bool,
    to: DataType,
}

impl TimeArith {
    fn new(b: &BinaryExpr, schema: &Schema) -> Option<Self> {
        let interval = DataType::Interval(IntervalUnit::MonthDayNano);
        let (l, r) = (
            b.left().data_type(schema).ok()?,
            b.right().data_type(schema).ok()?,
        );
        let dated =
            |t: &DataType| matches!(temporal(t), Some(Temporal::Date | Temporal::Instant(_)));
        let interval_left = match b.op() {
            Operator::Plus | Operator::Minus if dated(&l) && r == interval => false,
            Operator::Plus if l == interval && dated(&r) => true,
            _ => return None,
        };
        let to = b.data_type(schema).ok()?;
        temporal(&to)?;
        Some(TimeArith {
            left: b.left().clone(),
            right: b.right().clone(),
            op: *b.op(),
            interval_left,
            to,
        })
    }
}

/// `ns` plus `months` months (on the calendar), `days` days and `nanos` nanoseconds.
pub fn add_interval(
    ns: i128,
    months: i128,
    days: i128,
    nanos: i128,
) -> std::result::Result<i128, Unfit> {
    let mut ns = ns;
    if months != 0 {
        let dt = datetime_of(ns).ok_or(Unfit::Range)?;
        let m =
            chrono::Months::new(u32::try_from(months.unsigned_abs()).map_err(|_| Unfit::Range)?);
        let moved = if months > 0 {
            dt.checked_add_months(m)
        } else {
            dt.checked_sub_months(m)
        };
        ns = ns_of(moved.ok_or(Unfit::Range)?);
    }
    Ok(ns + days * DAY + nanos)
}

impl PhysicalExpr for TimeArith {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.left.nullable(input_schema)? || self.right.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let (l, r) = (self.left.evaluate(batch)?, self.right.evaluate(batch)?);
        let scalar = matches!(
            (&l, &r),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let n = if scalar { 1 } else { batch.num_rows() };
        let (l, r) = (l.into_array(n)?, r.into_array(n)?);
        let (value, interval) = if self.interval_left {
            (&r, &l)
        } else {
            (&l, &r)
        };
        let k = temporal(value.data_type()).expect("checked when planned");
        let out_k = temporal(&self.to).expect("checked when planned");
        let intervals = interval.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        let sign: i128 = if self.op == Operator::Minus { -1 } else { 1 };
        let mut out = Vec::with_capacity(n);
        for (i, v) in counts(value)?.into_iter().enumerate() {
            let (Some(v), true) = (v, intervals.is_valid(i)) else {
                out.push(None);
                continue;
            };
            let iv = intervals.value(i);
            let res = add_interval(
                v * k.step(),
                sign * i128::from(iv.months),
                sign * i128::from(iv.days),
                sign * i128::from(iv.nanoseconds),
            )
            .and_then(|ns| write(ns, out_k));
            match res {
                Ok(x) => out.push(Some(x)),
                Err(why) => {
                    let what = format!("{} {} {}", shown(&l, i), self.op, shown(&r, i));
                    let ty = sql_type(&self.to);
                    return Err(DataFusionError::Execution(match why {
                        Unfit::Changed if out_k == Temporal::Date => format!(
                            "{what}: a DATE does not hold a time of day; CAST the DATE AS TIMESTAMP first"
                        ),
                        Unfit::Changed => format!(
                            "{what}: {ty} does not hold the result exactly (it would be truncated); CAST to a finer TIMESTAMP first"
                        ),
                        _ => format!(
                            "{what}: the result is out of range for {ty} ({})",
                            range_words(&self.to)
                        ),
                    }));
                }
            }
        }
        let out = build(&self.to, &out)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(TimeArith {
            left: children[0].clone(),
            right: children[1].clone(),
            ..(*self).clone()
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.left.fmt_sql(f)?;
        write!(f, " {} ", self.op)?;
        self.right.fmt_sql(f)
    }
}

impl fmt::Display for TimeArith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CHECKED({} {} {})", self.left, self.op, self.right)
    }
}

impl PartialEq for TimeArith {
    fn eq(&self, other: &Self) -> bool {
        self.left.eq(&other.left) && self.right.eq(&other.right) && self.op == other.op
    }
}

impl Eq for TimeArith {}

impl Hash for TimeArith {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.left.hash(state);
        self.right.hash(state);
        self.op.hash(state);
    }
}
