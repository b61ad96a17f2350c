//! `WATERMARK FOR` and Arroyo's event-time WITH options, parsed and checked.

use std::time::Duration;

use super::*;
use crate::parse_pipeline;

const SINK: &str = "CREATE TABLE dst (n BIGINT) WITH ('connector' = 'c');";

/// The event time of the first table of `sql` (a pipeline file without INSERT).
fn event(sql: &str) -> Result<Option<EventTime>, String> {
    let p = parse_pipeline(&format!("{sql} {SINK}")).map_err(|e| e.to_string())?;
    let t = &p.tables[0];
    let mut options = t.options.clone();
    event_time(&t.name, &t.fields, t.watermark.as_ref(), &mut options).map_err(|e| e.to_string())
}

fn table(columns: &str, with: &str) -> String {
    format!("CREATE TABLE src ({columns}) WITH ('connector' = 'c'{with});")
}

fn ok(columns: &str, with: &str) -> (String, Duration) {
    let e = event(&table(columns, with))
        .unwrap()
        .expect("an event time");
    (e.column, e.out_of_orderness)
}

fn refused(columns: &str, with: &str) -> String {
    event(&table(columns, with)).expect_err("refused")
}

#[test]
fn the_clause_gives_the_column_and_its_out_of_orderness() {
    let s = |n| Duration::from_secs(n);
    for (clause, delay) in [
        ("WATERMARK FOR ts AS ts - INTERVAL '5' SECOND", s(5)),
        ("WATERMARK FOR ts AS ts - INTERVAL '1 minute'", s(60)),
        ("watermark for ts as (ts - interval '2' minute)", s(120)),
        ("WATERMARK FOR ts AS ts - INTERVAL '1' DAY", s(86_400)),
        (
            "WATERMARK FOR ts AS ts - INTERVAL '0.25' SECOND",
            Duration::from_millis(250),
        ),
        ("WATERMARK FOR ts AS ts", Duration::ZERO),
        ("WATERMARK FOR ts", DEFAULT_DELAY),
    ] {
        assert_eq!(
            ok(&format!("n BIGINT, ts TIMESTAMP, {clause}"), ""),
            ("ts".into(), delay),
            "{clause}"
        );
    }
    // Anywhere among the columns, on a metadata column too.
    assert_eq!(
        ok(
            "n BIGINT, WATERMARK FOR pt AS pt - INTERVAL '3' SECOND, pt TIMESTAMP METADATA FROM 'publish-time'",
            ""
        ),
        ("pt".into(), s(3))
    );
    // First in the list.
    assert_eq!(
        ok("WATERMARK FOR ts AS ts, n BIGINT, ts TIMESTAMP", ""),
        ("ts".into(), Duration::ZERO)
    );
    // No clause, no option: the connector's own timestamp.
    assert_eq!(event(&table("n BIGINT", "")).unwrap(), None);
}

#[test]
fn each_table_gets_its_own_clause() {
    let p = parse_pipeline(
        "CREATE TABLE a (t TIMESTAMP) WITH ('connector' = 'c');
         CREATE TABLE b (t TIMESTAMP, WATERMARK FOR t AS t - INTERVAL '7' SECOND) WITH ('connector' = 'c');
         CREATE TABLE c (u TIMESTAMP, WATERMARK FOR u) WITH ('connector' = 'c');",
    )
    .unwrap();
    let marks: Vec<Option<(String, Option<Duration>)>> = p
        .tables
        .iter()
        .map(|t| t.watermark.as_ref().map(|w| (w.column.clone(), w.delay)))
        .collect();
    assert_eq!(
        marks,
        [
            None,
            Some(("t".into(), Some(Duration::from_secs(7)))),
            Some(("u".into(), None))
        ]
    );
    assert_eq!(p.tables[1].watermark.as_ref().unwrap().at.line, 2);
}

#[test]
fn arroyo_options_name_the_same_thing() {
    let cols = "n BIGINT, ts TIMESTAMP";
    assert_eq!(
        ok(cols, ", 'event_time_field' = 'ts'"),
        ("ts".into(), DEFAULT_DELAY)
    );
    assert_eq!(
        ok(
            cols,
            ", 'event_time_field' = 'ts', 'watermark_field' = 'ts'"
        ),
        ("ts".into(), Duration::ZERO)
    );
    let e = refused(cols, ", 'event_time_field' = 'ts', 'watermark_field' = 'n'");
    assert!(e.contains("'watermark_field'") && e.contains("'n'"), "{e}");
    let e = refused(cols, ", 'watermark_field' = 'ts'");
    assert!(e.contains("needs option 'event_time_field'"), "{e}");
    let e = refused(
        "ts TIMESTAMP, WATERMARK FOR ts",
        ", 'event_time_field' = 'ts'",
    );
    assert!(e.contains("use one"), "{e}");
}

#[test]
fn what_is_not_an_event_time_or_a_bound_is_refused_by_name_and_position() {
    let cases: &[(&str, &str)] = &[
        (
            "ts TIMESTAMP, WATERMARK FOR ts AS ts + INTERVAL '5' SECOND",
            "must be 'ts' or 'ts - INTERVAL",
        ),
        (
            "ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '-5' SECOND",
            "is negative",
        ),
        (
            "ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' MONTH",
            "months",
        ),
        (
            "ts TIMESTAMP, u TIMESTAMP, WATERMARK FOR ts AS u - INTERVAL '1' SECOND",
            "must be 'ts'",
        ),
        ("ts TIMESTAMP, WATERMARK FOR ts AS ts - 5", "must be 'ts'"),
        (
            "ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL 'soon'",
            "is not an interval",
        ),
        (
            "ts TIMESTAMP, WATERMARK FOR ts AS ts garbage",
            "expected ',' or ')'",
        ),
    ];
    for (columns, want) in cases {
        let e = refused(columns, "");
        assert!(e.contains(want), "{columns}: {e}");
        assert!(e.contains("(line 1, column "), "{columns}: {e}");
    }
    let e = refused("ts TIMESTAMP, WATERMARK FOR ts, WATERMARK FOR ts AS ts", "");
    assert!(
        e.contains("table 'src' has a second WATERMARK FOR clause (line 1, column 51)"),
        "{e}"
    );
    let e = event("CREATE TABLE src (ts TIMESTAMP) WITH ('connector' = 'c', WATERMARK FOR ts);")
        .expect_err("refused");
    // Only a column list takes the clause: in WITH it is a syntax error at its place.
    assert!(e.contains("found: FOR at Line: 1, Column: 68"), "{e}");
    let e = refused("n BIGINT, WATERMARK FOR ts", "");
    assert!(
        e.contains("no column 'ts'") && e.contains("table 'src'"),
        "{e}"
    );
    let e = refused("n BIGINT, WATERMARK FOR n", "");
    assert!(e.contains("must be TIMESTAMP, 'n' is BIGINT"), "{e}");
    let e = refused("n BIGINT", ", 'event_time_field' = 'n'");
    assert!(e.contains("option 'event_time_field' ('n')"), "{e}");
}
