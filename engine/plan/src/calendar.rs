//! The calendar the checked date and time code computes on (issue 31, item 4): instants
//! as `i128` nanoseconds since 1970-01-01 and days since then (the proleptic Gregorian
//! calendar), the Arrow types that hold them, and writing a count back only when its
//! type holds it exactly. Shared by the casts and arithmetic (`temporal.rs`) and the
//! functions (`temporal_fns.rs`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Int64Type, TimeUnit, UInt64Type};
use arrow::util::display::array_value_to_string;
use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use datafusion_common::Result;

pub const SECOND: i128 = 1_000_000_000;
pub const DAY: i128 = 86_400 * SECOND;
/// Days from 0001-01-01 (day 1 of chrono's count) to 1970-01-01.
const EPOCH_FROM_CE: i128 = 719_163;

/// Nanoseconds in one `u`.
pub fn unit_ns(u: TimeUnit) -> i128 {
    match u {
        TimeUnit::Second => SECOND,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

/// The calendar's first and last day, as days since 1970-01-01.
pub fn day_range() -> (i128, i128) {
    (days_of(NaiveDate::MIN), days_of(NaiveDate::MAX))
}

/// Days since 1970-01-01 of `d`.
pub fn days_of(d: NaiveDate) -> i128 {
    i128::from(d.num_days_from_ce()) - EPOCH_FROM_CE
}

/// The date `days` after 1970-01-01, if the calendar has it.
pub fn date_of(days: i128) -> Option<NaiveDate> {
    i32::try_from(days + EPOCH_FROM_CE)
        .ok()
        .and_then(NaiveDate::from_num_days_from_ce_opt)
}

/// True for no zone or a zone that names UTC: a TIMESTAMP holds UTC instants.
pub fn is_utc(z: &Option<Arc<str>>) -> bool {
    matches!(
        z.as_deref(),
        None | Some("UTC" | "utc" | "Etc/UTC" | "+00:00" | "+0000" | "+00" | "Z")
    )
}

/// What the integer of a date or time type counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Temporal {
    /// Days since 1970-01-01 (`DATE`).
    Date,
    /// Units since 1970-01-01T00:00:00Z (`TIMESTAMP(p)`).
    Instant(TimeUnit),
    /// Units since midnight (`TIME`).
    Time(TimeUnit),
}

/// `t` as a date or time this module computes with, if it is one.
pub fn temporal(t: &DataType) -> Option<Temporal> {
    match t {
        DataType::Date32 => Some(Temporal::Date),
        DataType::Timestamp(u, z) if is_utc(z) => Some(Temporal::Instant(*u)),
        DataType::Time32(u @ (TimeUnit::Second | TimeUnit::Millisecond))
        | DataType::Time64(u @ (TimeUnit::Microsecond | TimeUnit::Nanosecond)) => {
            Some(Temporal::Time(*u))
        }
        _ => None,
    }
}

/// True for every Arrow date, time, duration and interval type, checked or not.
pub fn is_time_like(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(..)
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Duration(_)
            | DataType::Interval(_)
    )
}

impl Temporal {
    /// Nanoseconds per step of the type's integer.
    pub fn step(self) -> i128 {
        match self {
            Temporal::Date => DAY,
            Temporal::Instant(u) | Temporal::Time(u) => unit_ns(u),
        }
    }
}

/// Why a value has no exact result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// Beyond the type's range (or the calendar's).
    Range,
    /// The type's unit cannot hold it: it would be truncated.
    Changed,
    /// Not a value at all (text that does not parse, an invalid argument): why.
    Invalid(String),
}

/// `ns` (nanoseconds since 1970-01-01, or since midnight for a time of day) as the integer
/// of `t`, when `t` holds it exactly.
pub fn write(ns: i128, t: Temporal) -> std::result::Result<i64, Unfit> {
    let step = t.step();
    if ns.rem_euclid(step) != 0 {
        return Err(Unfit::Changed);
    }
    let v = ns.div_euclid(step);
    let (lo, hi) = day_range();
    let fits = match t {
        Temporal::Date | Temporal::Instant(_) => ns >= lo * DAY && ns < (hi + 1) * DAY,
        Temporal::Time(_) => (0..DAY).contains(&ns),
    };
    match i64::try_from(v) {
        Ok(v) if fits => Ok(v),
        _ => Err(Unfit::Range),
    }
}

/// The range of `t`, in words, for messages.
pub fn range_words(t: &DataType) -> String {
    let Some(k) = temporal(t) else {
        return String::new();
    };
    let (lo, hi) = day_range();
    let (lo, hi) = match k {
        Temporal::Time(_) => (0, DAY - 1),
        Temporal::Date => (lo * DAY, hi * DAY),
        Temporal::Instant(u) => {
            let step = unit_ns(u);
            let lo = (lo * DAY).max(i128::from(i64::MIN) * step);
            let hi = ((hi + 1) * DAY - 1).min(i128::from(i64::MAX) * step);
            (lo, hi - hi.rem_euclid(step))
        }
    };
    let show = |ns: i128| {
        write(ns, k)
            .ok()
            .and_then(|v| build(t, &[Some(v)]).ok())
            .and_then(|a| array_value_to_string(&a, 0).ok())
            .unwrap_or_default()
    };
    format!("{} to {}", show(lo), show(hi))
}

/// The integers of a date, time or integer array (the count its type keeps).
pub fn counts(a: &ArrayRef) -> Result<Vec<Option<i128>>> {
    if let DataType::UInt64 = a.data_type() {
        let a = a.as_primitive::<UInt64Type>();
        return Ok(a.iter().map(|v| v.map(i128::from)).collect());
    }
    let i = cast_with_options(a, &DataType::Int64, &strict())?;
    Ok(i.as_primitive::<Int64Type>()
        .iter()
        .map(|v| v.map(i128::from))
        .collect())
}

/// An array of `to` (a [`temporal`] type) from its integers.
pub fn build(to: &DataType, values: &[Option<i64>]) -> Result<ArrayRef> {
    let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
    Ok(match to {
        DataType::Date32 | DataType::Time32(_) => {
            let i = cast_with_options(&a, &DataType::Int32, &strict())?;
            cast_with_options(&i, to, &strict())?
        }
        _ => cast_with_options(&a, to, &strict())?,
    })
}

pub fn strict() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..CastOptions::default()
    }
}

/// A date and time at `ns` nanoseconds since 1970-01-01, if the calendar has it.
pub fn datetime_of(ns: i128) -> Option<NaiveDateTime> {
    let date = date_of(ns.div_euclid(DAY))?;
    let rem = ns.rem_euclid(DAY);
    let time = NaiveTime::from_num_seconds_from_midnight_opt(
        (rem / SECOND) as u32,
        (rem % SECOND) as u32,
    )?;
    Some(date.and_time(time))
}

/// Nanoseconds since 1970-01-01 of `dt`.
pub fn ns_of(dt: NaiveDateTime) -> i128 {
    days_of(dt.date()) * DAY
        + i128::from(dt.time().num_seconds_from_midnight()) * SECOND
        + i128::from(dt.time().nanosecond())
}
