//! Dates, times and text into numbers through planned SQL (issue 31, items 4 and 6.1):
//! every result is exactly right, checked against a computation of its own here (the
//! proleptic Gregorian calendar in `i128`, Hinnant's algorithms; big decimals), or the row
//! fails. Inputs cover the whole range of their types: any `i64` count of any unit, any
//! `i32` day, years 0001 and 9999, instants beyond 2262.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray,
};
use datafusion_common::ScalarValue;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::parse::parse_pipeline;
use pubsub_engine_spi::{
    BadData, ConnectionSchema, FieldType, Format, SourceField, TimestampFormat,
};
use {super::select::plan_select, pubsub_engine_plan::SelectPlan};

fn field(name: &str, t: FieldType, key: Option<&str>) -> SourceField {
    SourceField {
        name: name.into(),
        field_type: t,
        required: false,
        metadata_key: key.map(str::to_string),
    }
}

/// id TEXT (message-id), a BIGINT, i INT, d DOUBLE, s TEXT, ts TIMESTAMP.
fn src() -> ConnectionSchema {
    ConnectionSchema {
        event_time: None,
        format: Format::Json,
        timestamp_format: TimestampFormat::default(),
        bad_data: BadData::Fail,
        fields: vec![
            field("id", FieldType::Text, Some("message-id")),
            field("a", FieldType::Bigint, None),
            field("i", FieldType::Int, None),
            field("d", FieldType::Double, None),
            field("s", FieldType::Text, None),
            field("ts", FieldType::Timestamp, None),
        ],
    }
}

/// One source row; unset columns are NULL.
#[derive(Debug, Clone, Default)]
struct Row {
    a: Option<i64>,
    i: Option<i32>,
    d: Option<f64>,
    s: Option<String>,
    ts: Option<i64>,
}

fn batch(rows: &[Row]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            (0..rows.len()).map(|i| format!("m{i}")),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.a))),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.i))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.d))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.s.clone()))),
        Arc::new(TimestampNanosecondArray::from_iter(
            rows.iter().map(|r| r.ts),
        )),
    ];
    RecordBatch::try_new(src().arrow_schema(), cols).unwrap()
}

/// Plans `SELECT <list> FROM src`, written on line 2 of a file.
fn plan(list: &str) -> Result<SelectPlan, String> {
    let file = format!(
        "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\nINSERT INTO out SELECT {list} FROM src;"
    );
    let p = parse_pipeline(&file).map_err(|e| e.0)?;
    plan_select(&p.inserts[0].query, "src", &src(), "INSERT INTO out").map_err(|e| e.0)
}

fn planned(list: &str) -> SelectPlan {
    plan(list).unwrap_or_else(|e| panic!("{list}: {e}"))
}

/// The first output column of `p` on `row`, or the row failure's message.
fn one(p: &SelectPlan, row: Row) -> Result<ScalarValue, String> {
    let out = p.evaluate(&batch(&[row])).map_err(|f| f.error)?;
    Ok(ScalarValue::try_from_array(out.column(0), 0).unwrap())
}

fn int(v: Result<ScalarValue, String>) -> Result<i128, String> {
    v.map(|s| match s {
        ScalarValue::Int64(Some(x)) => i128::from(x),
        ScalarValue::Int32(Some(x)) => i128::from(x),
        other => panic!("not an integer: {other:?}"),
    })
}

/// Runs `check` on `cases` values of `strategy`.
fn run<S: Strategy>(cases: u32, strategy: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner.run(&strategy, check).unwrap();
}

// The calendar, independently: Howard Hinnant's `days_from_civil` / `civil_from_days`.

fn days_from_civil(y: i128, m: i128, d: i128) -> i128 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i128) -> (i128, i128, i128) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i128::from(m <= 2), m, d)
}

const NS: i128 = 1_000_000_000;
const DAY: i128 = 86_400 * NS;

/// The calendar the engine computes in: chrono's first and last year.
fn first_day() -> i128 {
    days_from_civil(i128::from(chrono::NaiveDate::MIN.year_ce_signed()), 1, 1)
}

fn last_day() -> i128 {
    days_from_civil(i128::from(chrono::NaiveDate::MAX.year_ce_signed()), 12, 31)
}

trait YearCe {
    fn year_ce_signed(&self) -> i32;
}

impl YearCe for chrono::NaiveDate {
    fn year_ce_signed(&self) -> i32 {
        chrono::Datelike::year(self)
    }
}

/// An instant the calendar holds.
fn in_calendar(ns: i128) -> bool {
    ns >= first_day() * DAY && ns < (last_day() + 1) * DAY
}

/// Nanoseconds per unit of `TIMESTAMP(p)`.
fn per(p: u32) -> i128 {
    10i128.pow(9 - p)
}

/// `ns` as a count of `TIMESTAMP(p)` units, when the type holds it exactly.
fn as_unit(ns: i128, p: u32) -> Option<i128> {
    let per = per(p);
    (ns % per == 0 && in_calendar(ns) && i64::try_from(ns / per).is_ok()).then_some(ns / per)
}

/// Days worth trying: anywhere in `i32`, and at the edges that matter.
fn days() -> impl Strategy<Value = i32> {
    let edge = |y: i128, m: i128, d: i128| days_from_civil(y, m, d) as i32;
    let edges = vec![
        edge(1, 1, 1),
        edge(9999, 12, 31),
        edge(1677, 9, 21),
        edge(2262, 4, 11),
        edge(1970, 1, 1),
        first_day() as i32,
        last_day() as i32,
    ];
    prop_oneof![
        any::<i32>(),
        -200_000_000i32..200_000_000,
        (proptest::sample::select(edges), -3i32..=3).prop_map(|(e, k)| e.saturating_add(k)),
    ]
}

/// Counts of any unit worth trying: anywhere in `i64`, near the calendar's and the
/// nanosecond range's ends, and ordinary instants.
fn counts() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        -10_000_000_000_000i64..10_000_000_000_000,
        (
            proptest::sample::select(vec![
                i64::MIN,
                i64::MAX,
                0,
                (first_day() * 86_400) as i64,
                ((last_day() + 1) * 86_400) as i64,
                1_714_558_830_500_000_000,
            ]),
            -3i64..=3
        )
            .prop_map(|(e, k)| e.saturating_add(k)),
    ]
}

#[test]
fn a_date_into_a_timestamp_is_exact_or_fails_the_row() {
    // The reported input: 9999-12-31 into a TIMESTAMP column was a date in the 1800s.
    let p = planned("to_date(s)");
    let f = one(
        &p,
        Row {
            s: Some("9999-12-31".into()),
            ..Row::default()
        },
    )
    .unwrap_err();
    assert!(
        f.contains("9999-12-31") && f.contains("out of range for TIMESTAMP"),
        "{f}"
    );
    assert!(!f.contains("Timestamp("), "{f}");
    let plans: Vec<(u32, SelectPlan)> = [
        (9, "TIMESTAMP"),
        (6, "TIMESTAMP(6)"),
        (3, "TIMESTAMP(3)"),
        (0, "TIMESTAMP(0)"),
    ]
    .into_iter()
    .map(|(p, t)| {
        (
            p,
            planned(&format!("CAST(CAST(CAST(i AS DATE) AS {t}) AS BIGINT)")),
        )
    })
    .collect();
    // The conversions the planner inserts: a DATE compared with a TIMESTAMP, a DATE into
    // its TIMESTAMP column, TRY_CAST.
    let compare = planned("CAST(i AS DATE) <= ts");
    let column = planned("CAST(i AS DATE)");
    let try_cast = planned("TRY_CAST(CAST(i AS DATE) AS TIMESTAMP)");
    run(3000, days(), |day| {
        let row = Row {
            i: Some(day),
            ts: Some(0),
            ..Row::default()
        };
        let day = i128::from(day);
        let date = day >= first_day() && day <= last_day();
        for (p, plan) in &plans {
            let want = if date { as_unit(day * DAY, *p) } else { None };
            let got = int(one(plan, row.clone()));
            prop_assert_eq!(
                got.clone().ok(),
                want,
                "day {} into TIMESTAMP({}): {:?}",
                day,
                p,
                got
            );
        }
        let ns = date.then(|| as_unit(day * DAY, 9)).flatten();
        let got = one(&compare, row.clone());
        match ns {
            Some(ns) => prop_assert_eq!(got, Ok(ScalarValue::Boolean(Some(ns <= 0)))),
            None => prop_assert!(got.is_err(), "day {day}: {got:?}"),
        }
        let got = one(&column, row.clone());
        match ns {
            Some(ns) => prop_assert_eq!(
                got,
                Ok(ScalarValue::TimestampNanosecond(Some(ns as i64), None))
            ),
            None => prop_assert!(got.is_err(), "day {day}: {got:?}"),
        }
        if date {
            let got = one(&try_cast, row);
            prop_assert_eq!(
                got,
                Ok(ScalarValue::TimestampNanosecond(ns.map(|n| n as i64), None))
            );
        }
        Ok(())
    });
}

#[test]
fn timestamps_into_dates_times_and_other_units_are_exact_or_fail() {
    // `a` seconds as TIMESTAMP(0) (the whole calendar), and the TIMESTAMP column `ts`.
    let date = planned("CAST(CAST(CAST(a AS TIMESTAMP(0)) AS DATE) AS INT)");
    let time = planned("CAST(CAST(CAST(a AS TIMESTAMP(0)) AS TIME) AS BIGINT)");
    let finer = planned("CAST(CAST(CAST(a AS TIMESTAMP(0)) AS TIMESTAMP(3)) AS BIGINT)");
    let coarser = planned("CAST(CAST(ts AS TIMESTAMP(0)) AS BIGINT)");
    let ts_date = planned("CAST(CAST(ts AS DATE) AS INT)");
    let ts_time = planned("CAST(CAST(ts AS TIME) AS BIGINT)");
    let double = planned("CAST(ts AS DOUBLE)");
    run(3000, counts(), |v| {
        let row = Row {
            a: Some(v),
            ts: Some(v),
            ..Row::default()
        };
        let secs = i128::from(v);
        let ns = secs * NS;
        let valid = in_calendar(ns);
        let want_date = valid.then(|| secs.div_euclid(86_400));
        prop_assert_eq!(int(one(&date, row.clone())).ok(), want_date, "{}", v);
        let want_time = valid.then(|| secs.rem_euclid(86_400) * NS);
        prop_assert_eq!(int(one(&time, row.clone())).ok(), want_time, "{}", v);
        let want_ms = if valid { as_unit(ns, 3) } else { None };
        prop_assert_eq!(int(one(&finer, row.clone())).ok(), want_ms, "{}", v);
        // The column: nanoseconds.
        let n = i128::from(v);
        prop_assert_eq!(int(one(&coarser, row.clone())).ok(), as_unit(n, 0), "{}", v);
        prop_assert_eq!(
            int(one(&ts_date, row.clone())).ok(),
            Some(n.div_euclid(DAY)),
            "{}",
            v
        );
        prop_assert_eq!(
            int(one(&ts_time, row.clone())).ok(),
            Some(n.rem_euclid(DAY)),
            "{}",
            v
        );
        // A DOUBLE holds the count exactly, or the row fails (beyond 2^53 it would round).
        let exact = (v as f64) as i128 == n && (v as f64) < 9.3e18;
        let got = one(&double, row);
        prop_assert_eq!(
            got.clone().ok(),
            exact.then_some(ScalarValue::Float64(Some(v as f64))),
            "{}: {:?}",
            v,
            got
        );
        Ok(())
    });
}

#[test]
fn text_into_timestamps_keeps_every_digit_or_fails() {
    let plans: Vec<(u32, SelectPlan)> = [
        (9, "TIMESTAMP"),
        (6, "TIMESTAMP(6)"),
        (3, "TIMESTAMP(3)"),
        (0, "TIMESTAMP(0)"),
    ]
    .into_iter()
    .map(|(p, t)| (p, planned(&format!("CAST(CAST(s AS {t}) AS BIGINT)"))))
    .collect();
    let date = planned("CAST(CAST(s AS DATE) AS INT)");
    let text = (
        1i128..=9999,
        1i128..=12,
        1i128..=28,
        0i128..24,
        0i128..60,
        0i128..60,
        0usize..=9,
        0i128..1_000_000_000,
    );
    run(2000, text, |(y, mo, d, h, mi, s, digits, frac)| {
        let frac = frac - frac % 10i128.pow(9 - digits as u32);
        let mut t = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
        if digits > 0 {
            let f = format!("{frac:09}");
            t.push('.');
            t.push_str(&f[..digits]);
        }
        t.push('Z');
        let ns = days_from_civil(y, mo, d) * DAY + (h * 3600 + mi * 60 + s) * NS + frac;
        let row = Row {
            s: Some(t.clone()),
            ..Row::default()
        };
        for (p, plan) in &plans {
            let got = int(one(plan, row.clone()));
            prop_assert_eq!(
                got.clone().ok(),
                as_unit(ns, *p),
                "{} into TIMESTAMP({}): {:?}",
                t,
                p,
                got
            );
        }
        prop_assert_eq!(
            int(one(&date, row)).ok(),
            Some(days_from_civil(y, mo, d)),
            "{}",
            t
        );
        Ok(())
    });
}

/// `ns` plus `months` on the calendar (the day clamped to the month's last), independently.
fn add_months(ns: i128, months: i128) -> Option<i128> {
    let day = ns.div_euclid(DAY);
    let (y, m, d) = civil_from_days(day);
    let total = y * 12 + (m - 1) + months;
    let (y2, m2) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    let next = if m2 == 12 { (y2 + 1, 1) } else { (y2, m2 + 1) };
    let last = days_from_civil(next.0, next.1, 1) - days_from_civil(y2, m2, 1);
    let d2 = d.min(last);
    let out = days_from_civil(y2, m2, d2) * DAY + ns.rem_euclid(DAY);
    (days_from_civil(y2, m2, 1) >= first_day() && days_from_civil(y2, m2, 1) <= last_day())
        .then_some(out)
}

#[test]
fn interval_arithmetic_is_exact_or_fails() {
    let ts = planned("CAST(ts + CAST(s AS INTERVAL) AS BIGINT)");
    let minus = planned("CAST(ts - CAST(s AS INTERVAL) AS BIGINT)");
    let seconds = planned("CAST(CAST(a AS TIMESTAMP(0)) + CAST(s AS INTERVAL) AS BIGINT)");
    let date = planned("CAST(CAST(i AS DATE) + CAST(s AS INTERVAL) AS INT)");
    let interval = (
        prop_oneof![-30i128..30, -4_000_000i128..4_000_000],
        prop_oneof![-40i128..40, -1_000_000i128..1_000_000],
        prop_oneof![
            Just(0i128),
            -100_000_000_000_000i128..100_000_000_000_000,
            (-3i128..3).prop_map(|k| k * 86_400 * NS)
        ],
    );
    run(
        3000,
        (counts(), days(), interval),
        |(v, day, (m, dd, n))| {
            let text = format!("{m} months {dd} days {n} nanoseconds");
            let row = Row {
                a: Some(v),
                i: Some(day),
                ts: Some(v),
                s: Some(text.clone()),
                ..Row::default()
            };
            let add =
                |ns: i128, sign: i128| add_months(ns, sign * m).map(|x| x + sign * (dd * DAY + n));
            // ts (nanoseconds): any i64 is an instant.
            let want = add(i128::from(v), 1).and_then(|r| as_unit(r, 9));
            prop_assert_eq!(int(one(&ts, row.clone())).ok(), want, "{} + {}", v, text);
            let want = add(i128::from(v), -1).and_then(|r| as_unit(r, 9));
            prop_assert_eq!(int(one(&minus, row.clone())).ok(), want, "{} - {}", v, text);
            // Seconds: a part of a second does not fit.
            let secs = i128::from(v) * NS;
            let want = if in_calendar(secs) {
                add(secs, 1).and_then(|r| as_unit(r, 0))
            } else {
                None
            };
            prop_assert_eq!(
                int(one(&seconds, row.clone())).ok(),
                want,
                "{}s + {}",
                v,
                text
            );
            // A DATE stays a whole day (Arrow dropped the time: + 36 hours was + 1 day).
            let day = i128::from(day);
            let want = if day >= first_day() && day <= last_day() {
                add(day * DAY, 1)
                    .filter(|r| r % DAY == 0 && in_calendar(*r))
                    .map(|r| r / DAY)
            } else {
                None
            };
            prop_assert_eq!(int(one(&date, row)).ok(), want, "day {} + {}", day, text);
            Ok(())
        },
    );
    let f = one(
        &planned("CAST(s AS DATE) + INTERVAL '36 hours'"),
        Row {
            s: Some("2024-01-02".into()),
            ..Row::default()
        },
    )
    .unwrap_err();
    assert!(f.contains("DATE does not hold a time of day"), "{f}");
}

/// `date_trunc(g, ns)`, independently.
fn trunc(ns: i128, g: &str) -> i128 {
    let day = ns.div_euclid(DAY);
    let (y, m, _) = civil_from_days(day);
    let floor = |step: i128| ns.div_euclid(step) * step;
    match g {
        "microsecond" => floor(1_000),
        "millisecond" => floor(1_000_000),
        "second" => floor(NS),
        "minute" => floor(60 * NS),
        "hour" => floor(3_600 * NS),
        "day" => day * DAY,
        // ISO weeks start on Monday; 1970-01-05 was one.
        "week" => (day - (day - 4).rem_euclid(7)) * DAY,
        "month" => days_from_civil(y, m, 1) * DAY,
        "quarter" => days_from_civil(y, (m - 1) / 3 * 3 + 1, 1) * DAY,
        _ => days_from_civil(y, 1, 1) * DAY,
    }
}

const GRANULARITIES: [&str; 10] = [
    "microsecond",
    "millisecond",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "quarter",
    "year",
];

#[test]
fn date_trunc_is_exact_or_fails() {
    let mut plans = Vec::new();
    for g in GRANULARITIES {
        plans.push((
            g,
            0,
            planned(&format!(
                "CAST(date_trunc('{g}', CAST(a AS TIMESTAMP(0))) AS BIGINT)"
            )),
        ));
        plans.push((
            g,
            3,
            planned(&format!(
                "CAST(date_trunc('{g}', to_timestamp_millis(a)) AS BIGINT)"
            )),
        ));
        plans.push((
            g,
            9,
            planned(&format!("CAST(date_trunc('{g}', ts) AS BIGINT)")),
        ));
    }
    run(1500, counts(), |v| {
        let row = Row {
            a: Some(v),
            ts: Some(v),
            ..Row::default()
        };
        for (g, p, plan) in &plans {
            let ns = i128::from(v) * per(*p);
            let want = if in_calendar(ns) {
                as_unit(trunc(ns, g), *p)
            } else {
                None
            };
            let got = int(one(plan, row.clone()));
            prop_assert_eq!(
                got.clone().ok(),
                want,
                "date_trunc('{}', {} in TIMESTAMP({})): {:?}",
                g,
                v,
                p,
                got
            );
        }
        Ok(())
    });
}

#[test]
fn date_bin_is_exact_or_fails() {
    // (stride, months or nanoseconds, origin in nanoseconds, origin as SQL)
    let strides = [
        ("15 minutes", None, 15 * 60 * NS),
        ("1 day", None, DAY),
        ("7 days 1 nanosecond", None, 7 * DAY + 1),
        ("1 month", Some(1), 0),
        ("3 months", Some(3), 0),
        ("13 months", Some(13), 0),
    ];
    let origins = [
        (None, 0i128),
        (
            Some("TIMESTAMP '2000-01-31T12:00:00'"),
            days_from_civil(2000, 1, 31) * DAY + 12 * 3_600 * NS,
        ),
        (Some("TIMESTAMP '1970-01-01T00:00:00.000000001'"), 1),
    ];
    let mut plans = Vec::new();
    for (text, months, step) in strides {
        for (origin_sql, origin) in origins {
            let o = origin_sql.map(|o| format!(", {o}")).unwrap_or_default();
            for (p, source) in [(0, "CAST(a AS TIMESTAMP(0))"), (9, "ts")] {
                let sql = format!("CAST(date_bin(INTERVAL '{text}', {source}{o}) AS BIGINT)");
                plans.push((months, step, origin, p, planned(&sql), sql));
            }
        }
    }
    run(1000, counts(), |v| {
        let row = Row {
            a: Some(v),
            ts: Some(v),
            ..Row::default()
        };
        for (months, step, origin, p, plan, sql) in &plans {
            let src = i128::from(v) * per(*p);
            let got = int(one(plan, row.clone()));
            if !in_calendar(src) {
                prop_assert!(
                    got.is_err(),
                    "{}: {} outside the calendar: {:?}",
                    sql,
                    v,
                    got
                );
                continue;
            }
            // The bin start r: r <= src < the next bin's start, on the origin's grid.
            let want = match months {
                None => Some(origin + (src - origin).div_euclid(*step) * step),
                Some(k) => {
                    let (oy, om, _) = civil_from_days(origin.div_euclid(DAY));
                    let (sy, sm, _) = civil_from_days(src.div_euclid(DAY));
                    let diff = (sy - oy) * 12 + (sm - om);
                    (-2..=1)
                        .map(|j| (diff.div_euclid(*k) + j) * k)
                        .filter_map(|n| Some((add_months(*origin, n)?, add_months(*origin, n + k))))
                        .find(|(at, next)| *at <= src && next.is_none_or(|x| src < x))
                        .map(|(at, _)| at)
                }
            };
            let want = want.and_then(|r| as_unit(r, *p));
            prop_assert_eq!(got.clone().ok(), want, "{} at {}: {:?}", sql, v, got);
        }
        Ok(())
    });
}

/// The exact decimal text of `ns` nanoseconds in seconds (`-1.5`, `3`), independently.
fn seconds_text(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let (s, f) = (
        ns.unsigned_abs() / NS as u128,
        ns.unsigned_abs() % NS as u128,
    );
    let f = format!("{f:09}");
    let f = f.trim_end_matches('0');
    if f.is_empty() {
        format!("{sign}{s}")
    } else {
        format!("{sign}{s}.{f}")
    }
}

#[test]
fn date_part_is_exact_or_fails() {
    let parts = [
        "year",
        "quarter",
        "month",
        "week",
        "day",
        "hour",
        "minute",
        "second",
        "millisecond",
        "microsecond",
        "doy",
        "dow",
        "isodow",
        "epoch",
    ];
    let plans: Vec<(&str, u32, SelectPlan)> = parts
        .iter()
        .flat_map(|part| {
            [
                (
                    *part,
                    0,
                    planned(&format!("date_part('{part}', CAST(a AS TIMESTAMP(0)))")),
                ),
                (*part, 9, planned(&format!("date_part('{part}', ts)"))),
            ]
        })
        .collect();
    run(1500, counts(), |v| {
        let row = Row {
            a: Some(v),
            ts: Some(v),
            ..Row::default()
        };
        for (part, p, plan) in &plans {
            let ns = i128::from(v) * per(*p);
            let got = one(plan, row.clone());
            if !in_calendar(ns) {
                prop_assert!(got.is_err(), "{} of {}: {:?}", part, v, got);
                continue;
            }
            let day = ns.div_euclid(DAY);
            let (y, m, d) = civil_from_days(day);
            let tod = ns.rem_euclid(DAY);
            let (sec, sub) = (tod / NS % 60, tod % NS);
            let isodow = (day + 3).rem_euclid(7);
            let thursday = day - isodow + 3;
            let iso_year = civil_from_days(thursday).0;
            let want: Option<i128> = match *part {
                "year" => Some(y),
                "quarter" => Some((m - 1) / 3 + 1),
                "month" => Some(m),
                "week" => Some((thursday - days_from_civil(iso_year, 1, 1)) / 7 + 1),
                "day" => Some(d),
                "hour" => Some(tod / (3_600 * NS)),
                "minute" => Some(tod / (60 * NS) % 60),
                "second" => Some(sec),
                "millisecond" => Some(sec * 1_000 + sub / 1_000_000),
                "microsecond" => Some(sec * 1_000_000 + sub / 1_000),
                "doy" => Some(day - days_from_civil(y, 1, 1) + 1),
                "dow" => Some((day + 4).rem_euclid(7)),
                "isodow" => Some(isodow),
                _ => None,
            };
            match want {
                Some(w) => prop_assert_eq!(int(got), Ok(w), "{} of {} ({})", part, v, p),
                None => {
                    // epoch: the DOUBLE that prints as the exact number of seconds, or none.
                    let text = seconds_text(ns);
                    let held = text.parse::<f64>().ok().filter(|f| format!("{f}") == text);
                    prop_assert_eq!(
                        got.clone().ok(),
                        held.map(|f| ScalarValue::Float64(Some(f))),
                        "epoch of {} ({}): {:?}",
                        v,
                        p,
                        got
                    );
                }
            }
        }
        Ok(())
    });
}

#[test]
fn to_timestamp_and_its_kin_are_exact_or_fail() {
    let from_double = planned("CAST(to_timestamp(d) AS BIGINT)");
    let millis = planned("CAST(to_timestamp_millis(a) AS BIGINT)");
    let seconds = planned("CAST(to_timestamp_seconds(ts) AS BIGINT)");
    let unixtime = planned("to_unixtime(ts)");
    let date = planned("CAST(to_date(d) AS INT)");
    let doubles = prop_oneof![
        any::<f64>(),
        (-20_000_000_000i64..20_000_000_000, 0u32..=12)
            .prop_map(|(m, k)| m as f64 / 10f64.powi(k as i32)),
        proptest::sample::select(vec![
            1.5,
            0.1,
            1e-9,
            1e-10,
            -1e-9,
            9.2e9,
            9.3e9,
            -9.3e9,
            f64::NAN,
            f64::INFINITY,
            1700000000.123
        ]),
    ];
    run(3000, (doubles, counts()), |(d, v)| {
        let row = Row {
            d: Some(d),
            a: Some(v),
            ts: Some(v),
            ..Row::default()
        };
        // A DOUBLE of seconds: its shortest spelling, exact in nanoseconds, or the row fails.
        let text = format!("{d}");
        let exact_ns = || -> Option<i128> {
            if !d.is_finite() {
                return None;
            }
            let (int_part, frac) = text.split_once('.').unwrap_or((&text, ""));
            if frac.len() > 9 {
                return None;
            }
            let neg = int_part.starts_with('-');
            let units: i128 = int_part.trim_start_matches('-').parse().ok()?;
            let f: i128 = format!("{frac:0<9}").parse().ok()?;
            let ns = units.checked_mul(NS)?.checked_add(f)?;
            Some(if neg { -ns } else { ns })
        };
        let want = exact_ns().and_then(|ns| as_unit(ns, 9));
        let got = int(one(&from_double, row.clone()));
        prop_assert_eq!(got.clone().ok(), want, "to_timestamp({}): {:?}", d, got);
        // to_date of a number counts days: a whole one, in the calendar.
        let want = (d.is_finite() && !text.contains('.'))
            .then(|| text.parse::<i128>().ok())
            .flatten()
            .filter(|day| *day >= first_day() && *day <= last_day());
        prop_assert_eq!(int(one(&date, row.clone())).ok(), want, "to_date({})", d);
        // Counts of a named unit, and whole seconds of a TIMESTAMP.
        let ms = i128::from(v) * 1_000_000;
        let want = if in_calendar(ms) {
            as_unit(ms, 3)
        } else {
            None
        };
        prop_assert_eq!(
            int(one(&millis, row.clone())).ok(),
            want,
            "to_timestamp_millis({})",
            v
        );
        let n = i128::from(v);
        prop_assert_eq!(
            int(one(&seconds, row.clone())).ok(),
            as_unit(n, 0),
            "to_timestamp_seconds({})",
            v
        );
        let want = (n % NS == 0).then_some(n / NS);
        prop_assert_eq!(int(one(&unixtime, row)).ok(), want, "to_unixtime({})", v);
        Ok(())
    });
}

#[test]
fn casts_and_functions_that_could_not_be_checked_are_refused_when_planned() {
    for (list, words) in [
        (
            "CAST(d AS TIMESTAMP)",
            &["DOUBLE", "TIMESTAMP", "to_timestamp"][..],
        ),
        ("CAST(i AS TIMESTAMP)", &["INT", "TIMESTAMP", "BIGINT"]),
        (
            "CAST(a AS TIMESTAMP(3))",
            &["BIGINT", "TIMESTAMP(3)", "to_timestamp_millis"],
        ),
        ("CAST(1.5 AS TIMESTAMP)", &["DOUBLE", "TIMESTAMP"]),
        ("arrow_cast(ts, 'Date64')", &["TIMESTAMP", "not supported"]),
        ("ts AT TIME ZONE 'Europe/Paris'", &["Europe/Paris", "UTC"]),
        ("date_part('second', ts - ts)", &["date_part", "DURATION"]),
        (
            "date_bin(INTERVAL '1 hour', CAST(ts AS TIME))",
            &["date_bin", "TIME"],
        ),
    ] {
        let e = plan(list).map(|_| ()).unwrap_err();
        for w in words {
            assert!(e.contains(w), "{list}: '{e}' should say '{w}'");
        }
        assert!(e.contains("(line 2, column "), "{list}: {e}");
    }
    // What is checked plans: seconds since 1970 from a BIGINT, durations' seconds.
    for list in [
        "CAST(a AS TIMESTAMP)",
        "extract(epoch FROM ts - CAST(s AS DATE))",
        "date_trunc('hour', to_timestamp_millis(a))",
        "make_date(2024, 1, 1)",
        "to_char(ts, '%Y')",
    ] {
        plan(list).unwrap_or_else(|e| panic!("{list}: {e}"));
    }
}

/// The texts of the report, and more that are not numbers, into every numeric type.
#[test]
fn text_that_is_not_a_number_fails_the_row_for_every_numeric_type() {
    let types = [
        "BIGINT",
        "INT",
        "SMALLINT",
        "TINYINT",
        "BIGINT UNSIGNED",
        "DOUBLE",
        "FLOAT",
        "DECIMAL(10, 2)",
        "DECIMAL(50, 4)",
    ];
    for text in [
        "", " ", "-", "+", ".", "-.", " 12 ", "12 ", "1,5", "1e", "0x1F", "twelve",
    ] {
        for t in types {
            let cast = planned(&format!("CAST(CAST(s AS {t}) AS TEXT)"));
            let f = one(
                &cast,
                Row {
                    s: Some(text.into()),
                    ..Row::default()
                },
            )
            .unwrap_err();
            assert!(
                f.contains("not a number") && f.contains(t),
                "{text:?} into {t}: {f}"
            );
            let try_cast = planned(&format!("CAST(TRY_CAST(s AS {t}) AS TEXT)"));
            assert_eq!(
                one(
                    &try_cast,
                    Row {
                        s: Some(text.into()),
                        ..Row::default()
                    }
                ),
                Ok(ScalarValue::Utf8(None)),
                "{text:?} into {t}"
            );
        }
    }
    let cast = planned("CAST(CAST(s AS DECIMAL(10, 2)) AS TEXT)");
    for (text, want) in [
        ("12", "12.00"),
        ("-.5", "-0.50"),
        ("1e2", "100.00"),
        ("+7.10", "7.10"),
    ] {
        assert_eq!(
            one(
                &cast,
                Row {
                    s: Some(text.into()),
                    ..Row::default()
                }
            ),
            Ok(ScalarValue::Utf8(Some(want.into()))),
            "{text}"
        );
    }
}

/// A number as the grammar writes it, read here by hand: sign, digits with at most one
/// point (at least one digit), an optional exponent; or a float's words.
fn is_number(t: &str) -> bool {
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" || (t == body && lower == "nan") {
        return true;
    }
    let (mant, exp) = match body.find(['e', 'E']) {
        Some(k) => (&body[..k], Some(&body[k + 1..])),
        None => (body, None),
    };
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit())
    });
    let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
    (!ip.is_empty() || !fp.is_empty())
        && ip.bytes().all(|c| c.is_ascii_digit())
        && fp.bytes().all(|c| c.is_ascii_digit())
        && exp_ok
}

#[test]
fn every_numeric_cast_of_text_agrees_on_what_is_a_number() {
    let types = [
        "BIGINT",
        "INT",
        "BIGINT UNSIGNED",
        "DOUBLE",
        "FLOAT",
        "DECIMAL(10, 2)",
        "DECIMAL(38, 10)",
    ];
    let plans: Vec<(&str, SelectPlan)> = types
        .iter()
        .map(|t| (*t, planned(&format!("CAST(CAST(s AS {t}) AS TEXT)"))))
        .collect();
    let double = planned("CAST(s AS DOUBLE)");
    let json = planned("json_get_int(s, 'k')");
    let texts = prop_oneof![
        "[+-]?[0-9]{0,4}(\\.[0-9]{0,3})?([eE][+-]?[0-9]{1,2})?",
        "[ +\\-.0-9eEinfatyINFATY]{0,6}",
        "\\PC{0,4}",
    ];
    run(3000, texts, |text| {
        let row = Row {
            s: Some(text.clone()),
            ..Row::default()
        };
        let number = is_number(&text);
        for (t, p) in &plans {
            let got = one(p, row.clone());
            if number {
                prop_assert!(
                    !got.as_ref().is_err_and(|e| e.contains("not a number")),
                    "{:?} is a number for {}: {:?}",
                    text,
                    t,
                    got
                );
            } else {
                prop_assert!(
                    got.as_ref().is_err_and(|e| e.contains("not a number")),
                    "{:?} is not a number for {}: {:?}",
                    text,
                    t,
                    got
                );
            }
        }
        // A number is a DOUBLE, rounded once (Rust's parser), unless a finite text is
        // beyond its range.
        if number {
            let want: f64 = text.parse().unwrap();
            let finite_text = !text.to_ascii_lowercase().contains(['i', 'n']);
            match one(&double, row.clone()) {
                Ok(ScalarValue::Float64(Some(v))) => {
                    prop_assert!(
                        v == want || (v.is_nan() && want.is_nan()),
                        "{:?}: {}",
                        text,
                        v
                    )
                }
                other => prop_assert!(finite_text && want.is_infinite(), "{:?}: {:?}", text, other),
            }
        }
        // json_get_int reads a string as CAST(text AS BIGINT) does.
        let doc = serde_json::json!({ "k": text }).to_string();
        let got = one(
            &json,
            Row {
                s: Some(doc),
                ..Row::default()
            },
        )
        .ok();
        let want = one(&plans[0].1, row).ok().map(|v| match v {
            ScalarValue::Utf8(Some(s)) => ScalarValue::Int64(Some(s.parse().unwrap())),
            other => other,
        });
        prop_assert_eq!(got, want, "{:?}", text);
        Ok(())
    });
    // As proto3 JSON writes an int64, and as the decoder reads one: 1e2 is 100.
    let json_doc = |doc: &str| {
        one(
            &json,
            Row {
                s: Some(doc.into()),
                ..Row::default()
            },
        )
    };
    assert_eq!(
        json_doc(r#"{"k": "1e2"}"#),
        Ok(ScalarValue::Int64(Some(100)))
    );
    assert_eq!(json_doc(r#"{"k": 1e2}"#), Ok(ScalarValue::Int64(Some(100))));
    assert!(json_doc(r#"{"k": " 12"}"#).is_err());
}

/// Row failures name the SQL types the user wrote, never Arrow's.
#[test]
fn row_failures_name_sql_types() {
    let arrow_words = [
        "Int8",
        "Int16",
        "Int32",
        "Int64",
        "UInt",
        "Float32",
        "Float64",
        "Utf8",
        "Decimal128",
        "Decimal256",
        "Timestamp(",
        "Date32",
        "Time64",
        "Interval(",
        "Duration(",
    ];
    for (list, row, sql) in [
        (
            "CAST(CAST(s AS DECIMAL(10, 2)) AS TEXT)",
            Row {
                s: Some("1.239".into()),
                ..Row::default()
            },
            "DECIMAL(10, 2)",
        ),
        (
            "CAST(CAST(s AS DECIMAL) AS TEXT)",
            Row {
                s: Some("x".into()),
                ..Row::default()
            },
            "DECIMAL(38, 10)",
        ),
        (
            "CAST(s AS TIMESTAMP)",
            Row {
                s: Some("x".into()),
                ..Row::default()
            },
            "TIMESTAMP",
        ),
        (
            "CAST(CAST(s AS TIMESTAMP(3)) AS TEXT)",
            Row {
                s: Some("2024-01-01T00:00:00.0001Z".into()),
                ..Row::default()
            },
            "TIMESTAMP(3)",
        ),
        (
            "CAST(s AS BIGINT)",
            Row {
                s: Some("x".into()),
                ..Row::default()
            },
            "BIGINT",
        ),
        (
            "CAST(a AS INT)",
            Row {
                a: Some(1 << 40),
                ..Row::default()
            },
            "INT",
        ),
        (
            "CAST(CAST(a AS TINYINT) AS INT)",
            Row {
                a: Some(300),
                ..Row::default()
            },
            "TINYINT",
        ),
        (
            "CAST(d AS BIGINT)",
            Row {
                d: Some(1e300),
                ..Row::default()
            },
            "BIGINT",
        ),
        (
            "CAST(s AS BOOLEAN)",
            Row {
                s: Some("maybe".into()),
                ..Row::default()
            },
            "BOOLEAN",
        ),
        (
            "CAST(CAST(s AS DATE) AS TEXT)",
            Row {
                s: Some("x".into()),
                ..Row::default()
            },
            "DATE",
        ),
        (
            "CAST(CAST(s AS INTERVAL) AS TEXT)",
            Row {
                s: Some("x".into()),
                ..Row::default()
            },
            "INTERVAL",
        ),
        (
            "CAST(a AS DATE)",
            Row {
                a: Some(1 << 40),
                ..Row::default()
            },
            "DATE",
        ),
        (
            "ts + INTERVAL '1000 years'",
            Row {
                ts: Some(0),
                ..Row::default()
            },
            "TIMESTAMP",
        ),
    ] {
        let f = one(&planned(list), row).unwrap_err();
        assert!(f.contains(sql), "{list}: '{f}' should name {sql}");
        for w in arrow_words {
            assert!(!f.contains(w), "{list}: '{f}' names Arrow's {w}");
        }
    }
}
