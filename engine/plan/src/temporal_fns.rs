//! The date and time functions, checked (issue 31, item 4; see [`super::temporal`]).
//! DataFusion computes them in `i64` without a check: `date_trunc` multiplies its input by
//! the unit and unwraps a result out of range (a panic), `date_bin` adds and subtracts, the
//! `to_timestamp*` functions truncate a float, a decimal or a finer unit, `to_unixtime`
//! truncates to the second, `extract(epoch ...)` rounds twice. Here each is computed in
//! `i128` nanoseconds on the calendar and written back only when its type holds the
//! result exactly; otherwise the row fails. Text is still parsed by DataFusion's own
//! functions (which refuse what they cannot parse); only their result is converted here.
//!
//! `make_date`, `make_time` and `to_char` are left as DataFusion runs them: they check
//! their arguments (chrono) and do no arithmetic a value could overflow. Every other date
//! and time function, and these over a type this module does not compute with, is refused
//! when the pipeline is planned.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Builder, Int32Builder, Int64Builder};
use arrow::compute::kernels::cast_utils::IntervalUnit as PartUnit;
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, IntervalUnit, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use chrono::{Datelike, Months, NaiveDate, NaiveDateTime, Timelike};
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::ColumnarValue;
use datafusion_physical_expr::{PhysicalExpr, ScalarFunctionExpr};

use super::number_text;
use crate::calendar::{
    build, counts, date_of, datetime_of, days_of, is_time_like, ns_of, range_words, temporal,
    unit_ns, write, Temporal, Unfit, DAY, SECOND,
};
use crate::type_words::sql_type;

/// Which function a [`TimeFn`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Func {
    DateTrunc,
    DateBin,
    DatePart,
    /// `to_timestamp` (`unit` nanoseconds, numbers are seconds) or `to_timestamp_<unit>`
    /// (numbers count `unit`s).
    ToTimestamp {
        unit: TimeUnit,
        seconds: bool,
    },
    ToDate,
    ToUnixtime,
    FromUnixtime,
    ToTime,
}

/// A date or time function computed here.
#[derive(Debug, Clone)]
pub struct TimeFn {
    name: String,
    func: Func,
    args: Vec<Arc<dyn PhysicalExpr>>,
    to: DataType,
    /// DataFusion's own parse of a text first argument: `to_timestamp` (nanoseconds) for
    /// the `to_timestamp*` functions and `to_unixtime`, the function itself for `to_date`
    /// and `to_time`.
    parse: Option<Arc<dyn PhysicalExpr>>,
}

/// The names of every DataFusion date and time function.
fn datetime_names() -> Vec<String> {
    datafusion_functions::datetime::functions()
        .iter()
        .flat_map(|f| std::iter::once(f.name().to_string()).chain(f.aliases().iter().cloned()))
        .collect()
}

/// Functions left as DataFusion runs them (see the module's comment).
const KEPT: &[&str] = &["make_date", "make_time", "to_char", "to_local_time"];

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_number(t: &DataType) -> bool {
    t.is_integer()
        || t.is_floating()
        || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// `e` as a [`TimeFn`] when it is a date or time function over types computed here.
pub fn checked(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Arc<dyn PhysicalExpr>> {
    let f = e.as_any().downcast_ref::<ScalarFunctionExpr>()?;
    let name = f.fun().name();
    let types: Vec<DataType> = f
        .args()
        .iter()
        .map(|a| a.data_type(schema))
        .collect::<Result<_>>()
        .ok()?;
    let first = types.first()?.clone();
    let instant = |t: &DataType| matches!(temporal(t), Some(Temporal::Instant(_)));
    let parse_with =
        |udf: Arc<datafusion_expr::ScalarUDF>, to: DataType| -> Arc<dyn PhysicalExpr> {
            Arc::new(ScalarFunctionExpr::new(
                udf.name(),
                udf.clone(),
                f.args().to_vec(),
                Arc::new(Field::new(udf.name(), to, true)),
                Arc::new(f.config_options().clone()),
            ))
        };
    let to_timestamp_ns = || {
        parse_with(
            datafusion_functions::datetime::to_timestamp(f.config_options()),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
        )
    };
    let null = first == DataType::Null;
    let (func, parse) = match name {
        "date_trunc" if types.len() == 2 && instant(&types[1]) => (Func::DateTrunc, None),
        "date_bin"
            if (2..=3).contains(&types.len())
                && types[0] == DataType::Interval(IntervalUnit::MonthDayNano)
                && instant(&types[1])
                && types.get(2).is_none_or(instant) =>
        {
            (Func::DateBin, None)
        }
        "date_part" if types.len() == 2 && temporal(&types[1]).is_some() => (Func::DatePart, None),
        // A duration (`ts1 - ts2`) has an exact number of seconds, and no other part here.
        "date_part"
            if types.len() == 2
                && matches!(types[1], DataType::Duration(_))
                && literal_text(&f.args()[0]).is_some_and(|t| part(&t) == Ok(Part::Epoch)) =>
        {
            (Func::DatePart, None)
        }
        "to_timestamp"
        | "to_timestamp_seconds"
        | "to_timestamp_millis"
        | "to_timestamp_micros"
        | "to_timestamp_nanos" => {
            let DataType::Timestamp(unit, _) = f.return_type() else {
                return None;
            };
            let seconds = name == "to_timestamp";
            let ok = null
                || instant(&first)
                || first.is_integer()
                || (first.is_floating() && seconds)
                || (matches!(first, DataType::Decimal128(..) | DataType::Decimal256(..))
                    && (seconds || name == "to_timestamp_seconds"))
                || is_text(&first);
            if !ok || (types.len() > 1 && !is_text(&first)) {
                return None;
            }
            let parse = is_text(&first).then(to_timestamp_ns);
            (
                Func::ToTimestamp {
                    unit: *unit,
                    seconds,
                },
                parse,
            )
        }
        "to_date" => {
            let ok = null
                || is_number(&first)
                || matches!(
                    temporal(&first),
                    Some(Temporal::Date | Temporal::Instant(_))
                )
                || is_text(&first);
            if !ok || (types.len() > 1 && !is_text(&first)) {
                return None;
            }
            (Func::ToDate, is_text(&first).then(|| e.clone()))
        }
        "to_unixtime" => {
            let ok = null
                || first.is_integer()
                || first.is_floating()
                || matches!(
                    temporal(&first),
                    Some(Temporal::Date | Temporal::Instant(_))
                )
                || is_text(&first);
            if !ok || (types.len() > 1 && !is_text(&first)) {
                return None;
            }
            (Func::ToUnixtime, is_text(&first).then(to_timestamp_ns))
        }
        "from_unixtime" if first == DataType::Int64 || null => (Func::FromUnixtime, None),
        "to_time" => {
            let ok = null || instant(&first) || is_text(&first);
            if !ok || (types.len() > 1 && !is_text(&first)) {
                return None;
            }
            (Func::ToTime, is_text(&first).then(|| e.clone()))
        }
        _ => return None,
    };
    Some(Arc::new(TimeFn {
        name: name.to_string(),
        func,
        args: f.args().to_vec(),
        to: f.return_type().clone(),
        parse,
    }))
}

/// Refuses a date or time function [`checked`] left as DataFusion built it.
pub fn refusal(f: &ScalarFunctionExpr, schema: &Schema) -> std::result::Result<(), String> {
    let name = f.fun().name();
    let types: Vec<DataType> = f
        .args()
        .iter()
        .map(|a| a.data_type(schema).unwrap_or(DataType::Null))
        .collect();
    let timed = types.iter().any(is_time_like) || is_time_like(f.return_type());
    let datetime = datetime_names().iter().any(|n| n == name);
    if !(datetime || timed) || KEPT.contains(&name) {
        return Ok(());
    }
    if !datetime {
        // Any other function that takes or gives a date or time (`coalesce`, `nullif`,
        // `greatest`, ...) moves values; it computes none.
        return Ok(());
    }
    let args: Vec<String> = types.iter().map(sql_type).collect();
    Err(format!(
        "{name}({}) is not supported: its result could not be checked to be exact",
        args.join(", ")
    ))
}

/// The text of a constant argument (`date_part`'s part), if it is one.
fn literal_text(e: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let l = e
        .as_any()
        .downcast_ref::<datafusion_physical_expr::expressions::Literal>()?;
    l.value().try_as_str().flatten().map(str::to_string)
}

/// The first argument's value at row `i`, as a message shows it.
fn shown(a: &ArrayRef, i: usize) -> String {
    let s = array_value_to_string(a, i).unwrap_or_default();
    if is_text(a.data_type()) {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        s
    }
}

/// `date_trunc`'s granularities.
pub fn trunc(ns: i128, granularity: &str) -> std::result::Result<i128, Unfit> {
    let fixed = |step: i128| Ok(ns - ns.rem_euclid(step));
    match granularity {
        "microsecond" => fixed(1_000),
        "millisecond" => fixed(1_000_000),
        "second" => fixed(SECOND),
        "minute" => fixed(60 * SECOND),
        "hour" => fixed(3_600 * SECOND),
        "day" => fixed(DAY),
        "week" => {
            // 1970-01-01 was a Thursday: three days after a Monday.
            let days = ns.div_euclid(DAY);
            Ok((days - (days + 3).rem_euclid(7)) * DAY)
        }
        "month" | "quarter" | "year" => {
            let d = date_of(ns.div_euclid(DAY)).ok_or(Unfit::Range)?;
            let month = match granularity {
                "month" => d.month(),
                "quarter" => 1 + 3 * ((d.month() - 1) / 3),
                _ => 1,
            };
            let first = NaiveDate::from_ymd_opt(d.year(), month, 1).ok_or(Unfit::Range)?;
            Ok(days_of(first) * DAY)
        }
        other => Err(Unfit::Invalid(format!(
            "unsupported date_trunc granularity '{other}'; supported: microsecond, millisecond, second, minute, hour, day, week, month, quarter, year"
        ))),
    }
}

/// A `date_bin` stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stride {
    Nanos(i128),
    Months(i128),
}

/// The stride of an `INTERVAL` (DataFusion's rule: months alone, or days and nanoseconds).
pub fn stride(months: i32, days: i32, nanos: i64) -> std::result::Result<Stride, Unfit> {
    let s = if months != 0 {
        if days != 0 || nanos != 0 {
            return Err(Unfit::Invalid(
                "a date_bin stride of months cannot also have days or a time".into(),
            ));
        }
        Stride::Months(i128::from(months))
    } else {
        Stride::Nanos(i128::from(days) * DAY + i128::from(nanos))
    };
    match s {
        Stride::Nanos(n) | Stride::Months(n) if n <= 0 => Err(Unfit::Invalid(
            "the date_bin stride must be positive".into(),
        )),
        s => Ok(s),
    }
}

/// `origin` plus `months` months (the day clamped to the month's last, as DataFusion does).
fn add_months(origin: NaiveDateTime, months: i128) -> Option<NaiveDateTime> {
    let m = Months::new(u32::try_from(months.unsigned_abs()).ok()?);
    if months >= 0 {
        origin.checked_add_months(m)
    } else {
        origin.checked_sub_months(m)
    }
}

/// The start of the bin of `stride` from `origin` that holds `source` (nanoseconds).
pub fn bin(source: i128, s: Stride, origin: i128) -> std::result::Result<i128, Unfit> {
    match s {
        Stride::Nanos(step) => Ok(origin + (source - origin).div_euclid(step) * step),
        Stride::Months(step) => {
            let src = datetime_of(source).ok_or(Unfit::Range)?;
            let org = datetime_of(origin).ok_or(Unfit::Range)?;
            let diff = i128::from(src.year() - org.year()) * 12 + i128::from(src.month())
                - i128::from(org.month());
            let mut k = diff.div_euclid(step) * step;
            let mut at = add_months(org, k).ok_or(Unfit::Range)?;
            if at > src {
                k -= step;
                at = add_months(org, k).ok_or(Unfit::Range)?;
            }
            Ok(ns_of(at))
        }
    }
}

/// A `date_part` part, as DataFusion names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
    Microsecond,
    DayOfYear,
    DayOfWeekSunday0,
    DayOfWeekMonday0,
    Epoch,
}

pub fn part(text: &str) -> std::result::Result<Part, Unfit> {
    let t = text
        .strip_prefix(['\'', '"'])
        .and_then(|s| s.strip_suffix(['\'', '"']))
        .unwrap_or(text);
    if let Ok(u) = t.parse::<PartUnit>() {
        return match u {
            PartUnit::Year => Ok(Part::Year),
            PartUnit::Month => Ok(Part::Month),
            PartUnit::Week => Ok(Part::Week),
            PartUnit::Day => Ok(Part::Day),
            PartUnit::Hour => Ok(Part::Hour),
            PartUnit::Minute => Ok(Part::Minute),
            PartUnit::Second => Ok(Part::Second),
            PartUnit::Millisecond => Ok(Part::Millisecond),
            PartUnit::Microsecond => Ok(Part::Microsecond),
            _ => Err(Unfit::Invalid(format!(
                "date part '{text}' is not supported"
            ))),
        };
    }
    match t.to_lowercase().as_str() {
        "qtr" | "quarter" => Ok(Part::Quarter),
        "doy" => Ok(Part::DayOfYear),
        "dow" => Ok(Part::DayOfWeekSunday0),
        "isodow" => Ok(Part::DayOfWeekMonday0),
        "epoch" => Ok(Part::Epoch),
        _ => Err(Unfit::Invalid(format!(
            "date part '{text}' is not supported"
        ))),
    }
}

/// `part` of the value `ns` of kind `k` (an integer part), as DataFusion defines it.
pub fn int_part(ns: i128, k: Temporal, p: Part) -> std::result::Result<i32, Unfit> {
    if let Temporal::Time(_) = k {
        let s = (ns / SECOND) as i32;
        let sub = (ns % SECOND) as i32;
        return match p {
            Part::Hour => Ok(s / 3_600),
            Part::Minute => Ok(s / 60 % 60),
            Part::Second => Ok(s % 60),
            Part::Millisecond => Ok(s % 60 * 1_000 + sub / 1_000_000),
            Part::Microsecond => Ok(s % 60 * 1_000_000 + sub / 1_000),
            _ => Err(Unfit::Invalid(
                format!("a TIME has no {p:?}").to_lowercase(),
            )),
        };
    }
    let dt = datetime_of(ns).ok_or(Unfit::Range)?;
    let (d, t) = (dt.date(), dt.time());
    Ok(match p {
        Part::Year => d.year(),
        Part::Quarter => (d.month0() / 3 + 1) as i32,
        Part::Month => d.month() as i32,
        Part::Week => d.iso_week().week() as i32,
        Part::Day => d.day() as i32,
        Part::DayOfYear => d.ordinal() as i32,
        Part::DayOfWeekSunday0 => d.weekday().num_days_from_sunday() as i32,
        Part::DayOfWeekMonday0 => d.weekday().num_days_from_monday() as i32,
        Part::Hour => t.hour() as i32,
        Part::Minute => t.minute() as i32,
        Part::Second => t.second() as i32,
        Part::Millisecond => (t.second() * 1_000 + t.nanosecond() / 1_000_000) as i32,
        Part::Microsecond => (t.second() * 1_000_000 + t.nanosecond() / 1_000) as i32,
        Part::Epoch => unreachable!("epoch is a DOUBLE"),
    })
}

/// `v × 10^-digits` as exact decimal text (`-12.5`, `3`), trailing zeros dropped.
pub fn decimal_text(v: i128, digits: u32) -> String {
    let p = 10i128.pow(digits);
    let (int, frac) = (
        v.unsigned_abs() / p.unsigned_abs(),
        v.unsigned_abs() % p.unsigned_abs(),
    );
    let sign = if v < 0 { "-" } else { "" };
    if frac == 0 {
        return format!("{sign}{int}");
    }
    let frac = format!("{frac:0width$}", width = digits as usize);
    format!("{sign}{int}.{}", frac.trim_end_matches('0'))
}

/// The DOUBLE whose shortest spelling is exactly the decimal `text`, if there is one: a
/// DOUBLE holds a decimal value when it reads and prints as it (0.1 does; 0.1 + 0.2, which
/// prints 0.30000000000000004, is not 0.3).
pub fn exact_f64(text: &str) -> Option<f64> {
    let f: f64 = text.parse().ok()?;
    (f.is_finite() && format!("{f}") == text).then_some(f)
}

/// Seconds since 1970-01-01 (`k`'s epoch) of the value `ns` as a DOUBLE, if one holds it.
pub fn epoch(ns: i128) -> std::result::Result<f64, Unfit> {
    exact_f64(&decimal_text(ns, 9)).ok_or(Unfit::Changed)
}

/// Nanoseconds of a number of seconds a DOUBLE holds, when its shortest spelling has at
/// most nine digits after the point.
pub fn seconds_f64(f: f64) -> std::result::Result<i128, Unfit> {
    if !f.is_finite() {
        return Err(Unfit::Range);
    }
    let text = format!("{f}");
    match number_text::parse(&text).map(|n| n.to_decimal128(38, 9)) {
        Some(Ok(ns)) => Ok(ns),
        Some(Err(number_text::Unfit::Fraction)) => Err(Unfit::Changed),
        _ => Err(Unfit::Range),
    }
}

/// The exact integer of a number array's row (`None`: NULL), for arguments that count.
fn integers(a: &ArrayRef) -> Result<Vec<Option<std::result::Result<i128, Unfit>>>> {
    let t = a.data_type();
    if t.is_integer() {
        return Ok(counts(a)?.into_iter().map(|v| v.map(Ok)).collect());
    }
    let text = cast_with_options(a, &DataType::Utf8, &CastOptions::default())?;
    let text = text.as_string::<i32>();
    Ok((0..text.len())
        .map(|i| {
            text.is_valid(i).then(|| {
                let s = text.value(i);
                if t.is_floating() {
                    let f: f64 = s.parse().map_err(|_| Unfit::Range)?;
                    if !f.is_finite() {
                        return Err(Unfit::Range);
                    }
                    return seconds_f64(f).and_then(|ns| {
                        if ns % SECOND == 0 {
                            Ok(ns / SECOND)
                        } else {
                            Err(Unfit::Changed)
                        }
                    });
                }
                match number_text::parse(s).map(|n| n.to_i128()) {
                    Some(Ok(v)) => Ok(v),
                    Some(Err(number_text::Unfit::Fraction)) => Err(Unfit::Changed),
                    _ => Err(Unfit::Range),
                }
            })
        })
        .collect())
}

/// Nanoseconds of a decimal array's rows, read as `unit_ns` nanoseconds per unit.
fn decimals_ns(a: &ArrayRef, per: i128) -> Result<Vec<Option<std::result::Result<i128, Unfit>>>> {
    let text = cast_with_options(a, &DataType::Utf8, &CastOptions::default())?;
    let text = text.as_string::<i32>();
    let digits = match per {
        SECOND => 9,
        1_000_000 => 6,
        1_000 => 3,
        _ => 0,
    };
    Ok((0..text.len())
        .map(|i| {
            text.is_valid(i).then(|| {
                match number_text::parse(text.value(i)).map(|n| n.to_decimal128(38, digits)) {
                    Some(Ok(v)) => Ok(v * (per / 10i128.pow(digits as u32))),
                    Some(Err(number_text::Unfit::Fraction)) => Err(Unfit::Changed),
                    _ => Err(Unfit::Range),
                }
            })
        })
        .collect())
}

/// A scalar text argument's value (granularity, part), as DataFusion requires.
fn scalar_text(v: &ColumnarValue, what: &str) -> Result<String> {
    match v {
        ColumnarValue::Scalar(s) => match s.try_as_str() {
            Some(Some(t)) => Ok(t.to_string()),
            _ => Err(DataFusionError::Execution(format!(
                "{what} must be a constant text that is not NULL"
            ))),
        },
        ColumnarValue::Array(_) => Err(DataFusionError::Execution(format!(
            "{what} must be a constant text, not a column"
        ))),
    }
}

impl TimeFn {
    fn failure(&self, arg: &str, why: Unfit) -> DataFusionError {
        let ty = sql_type(&self.to);
        let call = format!("{}({arg})", self.name);
        DataFusionError::Execution(match why {
            Unfit::Range => {
                let range = range_words(&self.to);
                if range.is_empty() {
                    format!("{call}: the result is out of range for {ty}")
                } else {
                    format!("{call}: the result is out of range for {ty} ({range})")
                }
            }
            Unfit::Changed => match self.func {
                Func::DatePart => format!(
                    "{call}: a DOUBLE does not hold the number of seconds exactly; use date_trunc() first, or CAST the TIMESTAMP to BIGINT (its count of units)"
                ),
                Func::ToUnixtime => format!(
                    "{call}: a BIGINT of seconds does not hold a fraction of a second; use date_trunc('second', ...) first"
                ),
                _ => format!(
                    "{call}: {ty} does not hold the result exactly (it would be truncated); round it first with date_trunc(), round() or trunc()"
                ),
            },
            Unfit::Invalid(why) => format!("{call}: {why}"),
        })
    }

    /// The output for `rows` rows of evaluated arguments.
    fn compute(&self, batch: &RecordBatch, args: &[ArrayRef]) -> Result<ArrayRef> {
        let n = args.first().map_or(0, |a| a.len());
        let first = &args[0];
        let fail = |i: usize, why: Unfit| self.failure(&shown(first, i), why);
        let out_k = temporal(&self.to);
        // Nanosecond results written as `self.to`.
        let finish = |values: Vec<Option<std::result::Result<i128, Unfit>>>| -> Result<ArrayRef> {
            let k = out_k.expect("a date or time result");
            let mut out = Vec::with_capacity(values.len());
            for (i, v) in values.into_iter().enumerate() {
                match v {
                    None => out.push(None),
                    Some(Ok(ns)) => out.push(Some(write(ns, k).map_err(|e| fail(i, e))?)),
                    Some(Err(e)) => return Err(fail(i, e)),
                }
            }
            build(&self.to, &out)
        };
        let ns_of_arg = |a: &ArrayRef| -> Result<Vec<Option<i128>>> {
            let k = temporal(a.data_type()).expect("checked when planned");
            Ok(counts(a)?
                .into_iter()
                .map(|v| v.map(|v| v * k.step()))
                .collect())
        };
        let parsed = |b: &RecordBatch| -> Result<Option<Vec<Option<i128>>>> {
            match &self.parse {
                Some(p) if is_text(first.data_type()) => {
                    let v = p.evaluate(b)?.into_array(n)?;
                    Ok(Some(ns_of_arg(&v)?))
                }
                _ => Ok(None),
            }
        };
        let null = *first.data_type() == DataType::Null;
        match self.func {
            Func::ToTimestamp { unit, seconds } => {
                if null {
                    return finish(vec![None; n]);
                }
                if let Some(ns) = parsed(batch)? {
                    return finish(ns.into_iter().map(|v| v.map(Ok)).collect());
                }
                let t = first.data_type();
                let per = if seconds { SECOND } else { unit_ns(unit) };
                let values = if temporal(t).is_some() {
                    ns_of_arg(first)?.into_iter().map(|v| v.map(Ok)).collect()
                } else if t.is_integer() {
                    counts(first)?
                        .into_iter()
                        .map(|v| v.map(|v| Ok(v * per)))
                        .collect()
                } else if t.is_floating() {
                    let f = cast_with_options(first, &DataType::Float64, &CastOptions::default())?;
                    f.as_primitive::<arrow::datatypes::Float64Type>()
                        .iter()
                        .map(|v| v.map(seconds_f64))
                        .collect()
                } else {
                    decimals_ns(first, per)?
                };
                finish(values)
            }
            Func::ToDate => {
                if null {
                    return finish(vec![None; n]);
                }
                if let Some(ns) = parsed(batch)? {
                    return finish(ns.into_iter().map(|v| v.map(Ok)).collect());
                }
                let values = match temporal(first.data_type()) {
                    Some(_) => ns_of_arg(first)?
                        .into_iter()
                        .map(|v| v.map(|ns| Ok(ns.div_euclid(DAY) * DAY)))
                        .collect(),
                    None => integers(first)?
                        .into_iter()
                        .map(|v| v.map(|d| d.map(|d| d * DAY)))
                        .collect(),
                };
                finish(values)
            }
            Func::ToTime => {
                if null {
                    return finish(vec![None; n]);
                }
                if let Some(ns) = parsed(batch)? {
                    return finish(ns.into_iter().map(|v| v.map(Ok)).collect());
                }
                let values = ns_of_arg(first)?
                    .into_iter()
                    .map(|v| v.map(|ns| Ok(ns.rem_euclid(DAY))))
                    .collect();
                finish(values)
            }
            Func::FromUnixtime => {
                let values = counts(first)?
                    .into_iter()
                    .map(|v| v.map(|s| Ok(s * SECOND)))
                    .collect();
                finish(values)
            }
            Func::ToUnixtime => {
                let seconds: Vec<Option<std::result::Result<i128, Unfit>>> = if null {
                    vec![None; n]
                } else if let Some(ns) = parsed(batch)? {
                    ns.into_iter().map(|v| v.map(whole_seconds)).collect()
                } else if temporal(first.data_type()).is_some() {
                    ns_of_arg(first)?
                        .into_iter()
                        .map(|v| v.map(whole_seconds))
                        .collect()
                } else {
                    integers(first)?
                };
                let mut b = Int64Builder::with_capacity(n);
                for (i, v) in seconds.into_iter().enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(Ok(s)) => {
                            b.append_value(i64::try_from(s).map_err(|_| fail(i, Unfit::Range))?)
                        }
                        Some(Err(e)) => return Err(fail(i, e)),
                    }
                }
                Ok(Arc::new(b.finish()))
            }
            Func::DateTrunc | Func::DateBin | Func::DatePart => {
                unreachable!("computed in evaluate")
            }
        }
    }

    fn date_trunc(&self, granularity: &str, source: &ArrayRef) -> Result<ArrayRef> {
        let g = granularity.to_lowercase();
        let k = temporal(source.data_type()).expect("checked when planned");
        let mut out = Vec::with_capacity(source.len());
        for (i, v) in counts(source)?.into_iter().enumerate() {
            let Some(v) = v else {
                out.push(None);
                continue;
            };
            let r = trunc(v * k.step(), &g).and_then(|ns| write(ns, k));
            out.push(Some(r.map_err(|e| {
                self.failure(&format!("'{granularity}', {}", shown(source, i)), e)
            })?));
        }
        build(&self.to, &out)
    }

    fn date_bin(&self, s: Stride, source: &ArrayRef, origin: i128) -> Result<ArrayRef> {
        let k = temporal(source.data_type()).expect("checked when planned");
        let mut out = Vec::with_capacity(source.len());
        for (i, v) in counts(source)?.into_iter().enumerate() {
            let Some(v) = v else {
                out.push(None);
                continue;
            };
            let r = bin(v * k.step(), s, origin).and_then(|ns| write(ns, k));
            out.push(Some(r.map_err(|e| self.failure(&shown(source, i), e))?));
        }
        build(&self.to, &out)
    }

    fn date_part(&self, p: Part, source: &ArrayRef) -> Result<ArrayRef> {
        let (k, step) = match source.data_type() {
            DataType::Duration(u) => (None, unit_ns(*u)),
            t => {
                let k = temporal(t).expect("checked when planned");
                (Some(k), k.step())
            }
        };
        let values = counts(source)?;
        let fail = |i: usize, e: Unfit| {
            self.failure(&format!("{p:?}, {}", shown(source, i)).to_lowercase(), e)
        };
        if p == Part::Epoch {
            let mut b = Float64Builder::with_capacity(values.len());
            for (i, v) in values.into_iter().enumerate() {
                match v {
                    None => b.append_null(),
                    Some(v) => b.append_value(epoch(v * step).map_err(|e| fail(i, e))?),
                }
            }
            return Ok(Arc::new(b.finish()));
        }
        let mut b = Int32Builder::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            match v {
                None => b.append_null(),
                Some(v) => {
                    let k = k.ok_or_else(|| {
                        fail(i, Unfit::Invalid("a duration has only an epoch".into()))
                    })?;
                    b.append_value(int_part(v * step, k, p).map_err(|e| fail(i, e))?)
                }
            }
        }
        Ok(Arc::new(b.finish()))
    }
}

/// Whole seconds of `ns`, or [`Unfit::Changed`].
fn whole_seconds(ns: i128) -> std::result::Result<i128, Unfit> {
    if ns % SECOND == 0 {
        Ok(ns / SECOND)
    } else {
        Err(Unfit::Changed)
    }
}

impl PhysicalExpr for TimeFn {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(true)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let values: Vec<ColumnarValue> = self
            .args
            .iter()
            .map(|a| a.evaluate(batch))
            .collect::<Result<_>>()?;
        let scalar = values.iter().all(|v| matches!(v, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { batch.num_rows() };
        let out = match self.func {
            Func::DateTrunc => {
                let g = scalar_text(&values[0], "the date_trunc granularity")?;
                self.date_trunc(&g, &values[1].to_array(n)?)?
            }
            Func::DatePart => {
                let text = scalar_text(&values[0], "the date_part part")?;
                let p = part(&text).map_err(|e| self.failure(&format!("'{text}', ..."), e))?;
                self.date_part(p, &values[1].to_array(n)?)?
            }
            Func::DateBin => {
                let ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(iv))) = &values[0]
                else {
                    return Err(DataFusionError::Execution(
                        "the date_bin stride must be a constant INTERVAL that is not NULL".into(),
                    ));
                };
                let s = stride(iv.months, iv.days, iv.nanoseconds)
                    .map_err(|e| self.failure("...", e))?;
                let origin = match values.get(2) {
                    None => 0,
                    Some(ColumnarValue::Scalar(o)) => {
                        let a = o.to_array()?;
                        let k = temporal(a.data_type()).expect("checked when planned");
                        match counts(&a)?.first().copied().flatten() {
                            Some(v) => v * k.step(),
                            None => {
                                return Err(DataFusionError::Execution(
                                    "the date_bin origin must not be NULL".into(),
                                ))
                            }
                        }
                    }
                    Some(ColumnarValue::Array(_)) => {
                        return Err(DataFusionError::Execution(
                            "the date_bin origin must be a constant, not a column".into(),
                        ))
                    }
                };
                self.date_bin(s, &values[1].to_array(n)?, origin)?
            }
            _ => {
                let arrays: Vec<ArrayRef> = values
                    .iter()
                    .map(|v| v.to_array(n))
                    .collect::<Result<_>>()?;
                if scalar && self.parse.is_some() {
                    // The parse evaluates on the batch; one row of it is the scalar's.
                    let out = self.compute(&batch.slice(0, batch.num_rows().min(1)), &arrays)?;
                    return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
                }
                self.compute(batch, &arrays)?
            }
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.args.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(TimeFn {
            args: children,
            ..(*self).clone()
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            a.fmt_sql(f)?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for TimeFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CHECKED_{}(", self.name)?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{a}")?;
        }
        write!(f, ")")
    }
}

impl PartialEq for TimeFn {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.args.len() == other.args.len()
            && self.args.iter().zip(&other.args).all(|(a, b)| a.eq(b))
    }
}

impl Eq for TimeFn {}

impl Hash for TimeFn {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        for a in &self.args {
            a.hash(state);
        }
    }
}
