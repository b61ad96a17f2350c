//! Windowed aggregates without a runtime: planning (refusals with their positions), then
//! the window state fed rows and watermarks, against results computed by hand.

use std::sync::Arc;

use arrow::array::TimestampNanosecondArray;
use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};

use super::aggregate::plan_windowed;
use super::parse::parse_pipeline;
use super::SqlError;
use pubsub_engine_plan::window::{key_converter, owner, WindowState};
use pubsub_engine_plan::SelectPlan;
use pubsub_engine_plan::{WindowKind, WindowPlan};
use pubsub_engine_spi::{
    BadData, ConnectionSchema, FieldType, Format, SourceField, TimestampFormat,
};

pub(super) const S: i64 = 1_000_000_000;

/// `src`: page TEXT, v BIGINT; the source rows carry the event time after them.
pub(super) fn src() -> ConnectionSchema {
    let f = |name: &str, t| SourceField {
        name: name.into(),
        field_type: t,
        required: false,
        metadata_key: None,
    };
    ConnectionSchema {
        event_time: None,
        format: Format::Json,
        timestamp_format: TimestampFormat::default(),
        bad_data: BadData::Fail,
        fields: vec![f("page", FieldType::Text), f("v", FieldType::Bigint)],
    }
}

pub(super) fn plan(select: &str) -> Result<(SelectPlan, WindowPlan), SqlError> {
    let sql = format!(
        "CREATE TABLE src (page TEXT, v BIGINT) WITH ('x' = 'y');\nCREATE TABLE out (a TEXT) WITH ('x' = 'y');\nINSERT INTO out {select}"
    );
    let p = parse_pipeline(&sql)?;
    let q = &p.inserts[0].query;
    plan_windowed(
        q,
        "src",
        &src(),
        (2, "__event_time"),
        false,
        crate::aggregate::DEFAULT_UPDATING,
        "INSERT INTO out",
    )
}

/// Source rows: (page, v, event time in seconds).
pub(super) fn rows(r: &[(&str, i64, i64)]) -> RecordBatch {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(r.iter().map(|x| x.0)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        r.iter().map(|x| x.2 * S),
    ));
    RecordBatch::try_from_iter([("page", page), ("v", v), ("__event_time", ts)]).unwrap()
}

/// Feeds `input` through the plan's stages, then the watermark `w` (seconds): the rows
/// written, each as text cells.
pub(super) fn run(after: &SelectPlan, state: &mut WindowState, w: i64) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for b in state.advance(w * S).unwrap() {
        out.extend(text_rows(&after.evaluate(&b).unwrap()));
    }
    out
}

/// The rows of `b`, each as its cells' text.
pub(super) fn text_rows(b: &RecordBatch) -> Vec<Vec<String>> {
    (0..b.num_rows())
        .map(|r| {
            b.columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                .collect()
        })
        .collect()
}

pub(super) fn feed(window: &WindowPlan, state: &mut WindowState, input: &[(&str, i64, i64)]) {
    let before = window.before.evaluate(&rows(input)).unwrap();
    state.update(&before).unwrap();
}

const PER_PAGE: &str = "SELECT window.start AS ws, window.end AS we, page, n, total FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS n, sum(v) AS total FROM src GROUP BY window, page)";

#[test]
fn a_tumbling_window_fires_once_when_the_watermark_passes_its_end_and_counts_late_rows() {
    let (after, window) = plan(PER_PAGE).unwrap();
    assert_eq!(window.kind, WindowKind::Tumble { width: 10 * S });
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(
        &window,
        &mut state,
        &[("a", 1, 1), ("b", 2, 3), ("a", 4, 9), ("a", 8, 12)],
    );
    // [0, 10) ends at 10 s: its last instant is 9.999999999 s.
    assert!(run(&after, &mut state, 9).is_empty());
    let fired = run(&after, &mut state, 10);
    assert_eq!(
        fired,
        vec![
            vec!["1970-01-01T00:00:00", "1970-01-01T00:00:10", "a", "2", "5"],
            vec!["1970-01-01T00:00:00", "1970-01-01T00:00:10", "b", "1", "2"],
        ]
    );
    // A row for the fired window is late: counted, never merged into it.
    feed(&window, &mut state, &[("a", 100, 5), ("c", 1, 15)]);
    assert_eq!(state.take_late(), 1);
    assert!(run(&after, &mut state, 10).is_empty(), "fires once");
    let fired = run(&after, &mut state, 25);
    assert_eq!(
        fired,
        vec![
            vec!["1970-01-01T00:00:10", "1970-01-01T00:00:20", "a", "1", "8"],
            vec!["1970-01-01T00:00:10", "1970-01-01T00:00:20", "c", "1", "1"],
        ]
    );
    assert_eq!(state.groups(), 0);
}

#[test]
fn a_hop_puts_each_row_in_width_over_slide_windows_and_having_filters_groups() {
    let (after, window) = plan(
        "SELECT window.start AS ws, page, n FROM (SELECT HOP(INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS window, page, count(*) AS n FROM src GROUP BY window, page HAVING count(*) > 1)",
    )
    .unwrap();
    assert_eq!(
        window.kind,
        WindowKind::Hop {
            slide: 5 * S,
            width: 10 * S
        }
    );
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    // 7 s is in [0, 10) and [5, 15); 12 s in [5, 15) and [10, 20).
    feed(
        &window,
        &mut state,
        &[("a", 0, 7), ("a", 0, 12), ("b", 0, 7)],
    );
    let fired = run(&after, &mut state, 100);
    assert_eq!(fired, vec![vec!["1970-01-01T00:00:05", "a", "2"]]);
}

#[test]
fn the_state_survives_a_snapshot_and_a_restore_onto_another_number_of_subtasks() {
    let (after, window) = plan(PER_PAGE).unwrap();
    let window = Arc::new(window);
    let input: Vec<(String, i64, i64)> = (0..200)
        .map(|i| (format!("p{}", i % 13), i, i % 30))
        .collect();
    let input: Vec<(&str, i64, i64)> = input.iter().map(|(p, v, t)| (p.as_str(), *v, *t)).collect();
    let mut whole = WindowState::new(window.clone()).unwrap();
    feed(&window, &mut whole, &input[..120]);
    let snap = whole.snapshot().unwrap();
    // Snapshotting does not disturb the state.
    feed(&window, &mut whole, &input[120..]);
    let mut expected = run(&after, &mut whole, 100);
    expected.sort();
    // Restored onto three subtasks, each takes the groups it owns.
    let mut got = Vec::new();
    let mut groups = 0;
    for k in 0..3u64 {
        let mut part = WindowState::new(window.clone()).unwrap();
        part.restore(std::slice::from_ref(&snap), k, 3).unwrap();
        groups += part.groups();
        let rest: Vec<(&str, i64, i64)> = input[120..]
            .iter()
            .copied()
            .filter(|(p, _, _)| {
                let page: ArrayRef = Arc::new(StringArray::from(vec![*p]));
                let rows = key_converter(&window)
                    .unwrap()
                    .convert_columns(&[page])
                    .unwrap();
                owner(rows.row(0).as_ref(), 3) == k
            })
            .collect();
        feed(&window, &mut part, &rest);
        got.extend(run(&after, &mut part, 100));
    }
    assert_eq!(groups, 39, "13 pages in 3 windows");
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn aggregates_run_on_datafusion_accumulators_and_an_integer_sum_overflow_fails() {
    let (after, window) = plan(
        "SELECT n, d, a, lo, hi FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(DISTINCT v) AS n, avg(v) AS a, sum(v) AS d, min(v) AS lo, max(v) AS hi FROM src GROUP BY window)",
    )
    .unwrap();
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(
        &window,
        &mut state,
        &[("a", 1, 1), ("b", 1, 2), ("a", 4, 3), ("a", -3, 4)],
    );
    let fired = state.advance(100 * S).unwrap();
    let b = after.evaluate(&fired[0]).unwrap();
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 3);
    assert_eq!(b.column(1).as_primitive::<Int64Type>().value(0), 3);
    assert_eq!(b.column(2).as_primitive::<Float64Type>().value(0), 0.75);
    assert_eq!(b.column(3).as_primitive::<Int64Type>().value(0), -3);
    assert_eq!(b.column(4).as_primitive::<Int64Type>().value(0), 4);

    let mut state = WindowState::new(window.clone()).unwrap();
    feed(&window, &mut state, &[("a", i64::MAX, 1), ("a", 1, 2)]);
    let e = state.advance(100 * S).unwrap_err();
    assert!(format!("{e:#}").contains("does not fit"), "{e:#}");
}

#[test]
fn the_window_bounds_are_nanosecond_timestamps_of_the_window_a_row_falls_in() {
    let (after, window) = plan(PER_PAGE).unwrap();
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(&window, &mut state, &[("a", 1, 21)]);
    let fired = state.advance(30 * S).unwrap();
    let b = after.evaluate(&fired[0]).unwrap();
    let ws = b.column(0).as_primitive::<TimestampNanosecondType>();
    assert_eq!(ws.value(0), 20 * S);
    assert!(!ws.is_null(0));
}

#[test]
fn windows_are_refused_with_their_reason_and_position() {
    let refused = |select: &str, needle: &str| {
        let e = plan(select).unwrap_err().0;
        assert!(e.contains(needle), "{select}\n{e}");
        e
    };
    let e = refused(
        "SELECT count(*) FROM src GROUP BY HOP(INTERVAL '3' SECOND, INTERVAL '10' SECOND)",
        "the width of HOP (10 s) must be a multiple of its slide (3 s)",
    );
    assert!(e.contains("(line 3, column 51)"), "{e}");
    refused(
        "SELECT count(*) FROM src GROUP BY TUMBLE(INTERVAL '0' SECOND)",
        "the width of TUMBLE must be longer than zero",
    );
    refused(
        "SELECT count(*) FROM src GROUP BY TUMBLE(INTERVAL '1' MONTH)",
        "months or years",
    );
    refused(
        "SELECT count(*) FROM src GROUP BY SESSION(INTERVAL '-1' MINUTE)",
        "the gap of SESSION must be longer than zero",
    );
    refused(
        "SELECT TUMBLE(INTERVAL '1' SECOND) AS window, count(*) FROM src GROUP BY window",
        "write window.start and window.end in an outer SELECT",
    );
    refused(
        "SELECT first_value(v) FROM src GROUP BY TUMBLE(INTERVAL '1' SECOND)",
        "depends on the order rows arrive in",
    );
    // Found by a newcomer: FILTER was a syntax error pointing at the window's INTERVAL.
    refused(
        "SELECT count(*) FILTER (WHERE v > 1) FROM src GROUP BY TUMBLE(INTERVAL '1' SECOND)",
        "FILTER (WHERE ...) is not supported yet: put the condition in the argument, e.g. count(CASE WHEN cond THEN 1 END)",
    );
    // Without GROUP BY, the stateless planner says what is missing.
    let stateless = |select: &str| {
        let sql = format!(
            "CREATE TABLE src (page TEXT, v BIGINT) WITH ('x' = 'y');\nCREATE TABLE out (a TEXT) WITH ('x' = 'y');\nINSERT INTO out {select}"
        );
        let p = parse_pipeline(&sql).unwrap();
        super::select::plan_select(&p.inserts[0].query, "src", &src(), "INSERT INTO out")
            .unwrap_err()
            .0
    };
    let e = stateless("SELECT count(*) FROM src");
    assert!(e.contains("count needs a window: GROUP BY TUMBLE"), "{e}");
    let e = stateless("SELECT TUMBLE(INTERVAL '1' SECOND) FROM src");
    assert!(
        e.contains("TUMBLE is a window: it belongs in GROUP BY"),
        "{e}"
    );
    // Found by a newcomer: a window made in a subquery under the aggregate.
    refused(
        "SELECT window.start, page, count(*) AS n FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page FROM src) GROUP BY window, page",
        "TUMBLE is a window: it belongs in the GROUP BY of the SELECT that aggregates",
    );
    refused(
        "SELECT count(*) FROM src GROUP BY ROLLUP (page, v)",
        "unknown function 'rollup'",
    );
    refused(
        "SELECT n FROM (SELECT page AS n FROM src)",
        "a subquery in FROM is supported over a windowed aggregate only",
    );
}

#[test]
fn a_window_row_carries_a_record_key_from_its_bounds_and_group_key() {
    let sql = format!(
        "CREATE TABLE src (page TEXT, v BIGINT) WITH ('x' = 'y');\nCREATE TABLE out (a TEXT) WITH ('x' = 'y');\nINSERT INTO out {PER_PAGE}"
    );
    let p = parse_pipeline(&sql).unwrap();
    let (after, window) = plan_windowed(
        &p.inserts[0].query,
        "src",
        &src(),
        (2, "__event_time"),
        true,
        crate::aggregate::DEFAULT_UPDATING,
        "INSERT INTO out",
    )
    .unwrap();
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(
        &window,
        &mut state,
        &[("a", 1, 1), ("b", 1, 2), ("a", 1, 15)],
    );
    let mut keys = Vec::new();
    for b in state.advance(100 * S).unwrap() {
        let b = after.evaluate(&b).unwrap();
        let k = b.columns().last().unwrap().as_string::<i32>().clone();
        keys.extend(k.iter().map(|s| s.unwrap().to_string()));
    }
    // One key per window and group, the same on every run: bounds, then the key bytes.
    assert_eq!(keys.len(), 3);
    assert!(keys[0].starts_with("window/0/10000000000/"), "{keys:?}");
    assert!(
        keys[2].starts_with("window/10000000000/20000000000/"),
        "{keys:?}"
    );
    let distinct: std::collections::HashSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), 3);
}

/// A window's bounds are never NULL, nor is a count: a sink column NOT NULL takes them.
#[test]
fn window_bounds_and_counts_are_never_null() {
    let (after, _) = plan(
        "SELECT window.start AS ws, window.end AS we, n, total FROM (SELECT TUMBLE(INTERVAL '1' SECOND) AS window, count(*) AS n, sum(v) AS total FROM src GROUP BY window)",
    )
    .unwrap();
    let required: Vec<(&str, bool)> = after
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.required))
        .collect();
    assert_eq!(
        required,
        vec![("ws", true), ("we", true), ("n", true), ("total", false)]
    );
}
