//! Windowed joins without a runtime (issue 48, part 1): planning and its refusals with
//! positions, and the joined rows against DataFusion's batch join.
//!
//! The oracle: seeded random rows of two tables arrive interleaved, out of order within a
//! bound and some behind it, routed by join key over a number of subtasks as the runtime
//! routes them; each table's watermark is its highest event time less the bound, and the
//! join's the lower of the two; the state is snapshotted and restored onto another number
//! of subtasks in the middle. For INNER, LEFT, RIGHT and FULL joins of TUMBLE and HOP
//! windows, the rows written equal DataFusion's batch join of the two batch aggregates
//! over the rows the watermark rule keeps (a row whose window had closed by the join's
//! watermark when it arrived is late, on either side).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::window_tests::text_rows;
use crate::test_mem::Mem;
use crate::{parse_pipeline, plan_pipeline};
use pubsub_engine_plan::window::{route_converter, split_by_group};
use pubsub_engine_plan::{JoinKind, JoinState, PlannedPipeline, PlannedQuery};
use pubsub_engine_spi::ErasedConnector;

const MS: i64 = 1_000_000;

const TABLES: &str = "
CREATE TABLE clicks (k TEXT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source');
CREATE TABLE views (k TEXT, w BIGINT, n INT) WITH ('connector' = 'mem', 'role' = 'source');
CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink');
";

fn plan_sql(sql: &str) -> Result<PlannedPipeline, String> {
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let sql = parse_pipeline(sql).map_err(|e| e.to_string())?;
    plan_pipeline(&sql, &connectors).map_err(|e| e.to_string())
}

/// A join of clicks and views per `window` (a GROUP BY item) and key, `kind` as SQL.
fn join_sql(kind: &str, window: &str) -> String {
    format!(
        "INSERT INTO out
SELECT x.window.start AS xs, x.k AS xk, x.n, x.total, y.window.start AS ys, y.k AS yk, y.m, y.hi
FROM (SELECT {window} AS window, k, count(*) AS n, sum(v) AS total FROM clicks GROUP BY window, k) x
{kind} (SELECT {window} AS window, k, count(*) AS m, max(w) AS hi FROM views GROUP BY window, k) y
ON x.window = y.window AND x.k = y.k;"
    )
}

fn plan_join(kind: &str, window: &str) -> PlannedQuery {
    plan_sql(&format!("{TABLES}{}", join_sql(kind, window)))
        .unwrap()
        .queries[0]
        .clone()
}

#[test]
fn a_windowed_join_plans_both_sides_routed_by_the_join_key() {
    let q = plan_join("LEFT JOIN", "TUMBLE(INTERVAL '10' SECOND)");
    let j = q.join.as_ref().expect("a join");
    assert_eq!(j.kind, JoinKind::Left);
    assert_eq!(q.source.connection.name, "clicks");
    assert_eq!(j.right_source.connection.name, "views");
    assert!(q.window.is_none());
    // Both sides route by their one key, `k`, and match the window and the key.
    for side in &j.sides {
        assert_eq!(side.window.route, Some(vec![0]));
        assert_eq!(side.on, vec![0, 1]);
    }
    // The sink's columns come from the joined rows' select list; the right side's may be
    // NULL in a left join.
    let names: Vec<&str> = q
        .sink_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["xs", "xk", "n", "total", "ys", "yk", "m", "hi"]);
    assert!(q.sink_schema.field(4).is_nullable());
    // Each table is read once, and each gets its event time.
    let p = plan_sql(&format!(
        "{TABLES}{}",
        join_sql("JOIN", "TUMBLE(INTERVAL '10' SECOND)")
    ))
    .unwrap();
    let sources: Vec<String> = p
        .sources()
        .iter()
        .map(|(t, qs)| format!("{}:{qs:?}", t.connection.name))
        .collect();
    assert_eq!(sources, ["clicks:[0]", "views:[0]"]);
    for (t, _) in p.sources() {
        assert!(crate::plan::event_time_of(&t.connection.schema).is_some());
    }
}

#[test]
fn joins_that_are_not_built_are_refused_naming_what_and_where() {
    let tumble = "TUMBLE(INTERVAL '10' SECOND)";
    let side = |w: &str, t: &str| {
        format!("(SELECT {w} AS window, k, count(*) AS n FROM {t} GROUP BY window, k)")
    };
    let cases: Vec<(String, &str)> = vec![
        (
            "INSERT INTO out SELECT clicks.k FROM clicks JOIN views ON clicks.k = views.k;".into(),
            "a join of two tables' rows is an updating join, which writes a changelog: declare table 'out' with 'format' = 'debezium_json'",
        ),
        (
            "INSERT INTO out SELECT clicks.k FROM clicks LEFT JOIN views ON clicks.k = views.k;".into(),
            "an outer join of two tables' rows is not supported: without a window it would write a row with NULLs",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k;",
                side("SESSION(INTERVAL '5' SECOND)", "clicks"),
                side("SESSION(INTERVAL '5' SECOND)", "views")
            ),
            "the left side of the join is a SESSION window",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k;",
                side(tumble, "clicks"),
                side("TUMBLE(INTERVAL '20' SECOND)", "views")
            ),
            "both sides of a join must group by the same window, and the left groups by TUMBLE(INTERVAL '10' SECOND) while the right groups by TUMBLE(INTERVAL '20' SECOND)",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.k = y.k;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "a join must match the two sides' windows",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.n < y.n;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "the join condition `x.n < y.n` is not supported: ON takes equalities",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.n = y.n;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "the join matches column 'n' of its left side, which is not one of the side's GROUP BY columns",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN (SELECT {tumble} AS window, n AS k, count(*) AS c FROM views GROUP BY window, n) y ON x.window = y.window AND x.k = y.k;",
                side(tumble, "clicks"),
            ),
            "the join matches 'k' (TEXT) with 'k' (INT): group keys of one type match",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k, count(*) AS c FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k GROUP BY x.k;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "an aggregate (GROUP BY) over the joined rows is not supported yet",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x CROSS JOIN {} y;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "CROSSJOIN joins are not supported",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window JOIN {} z ON y.window = z.window;",
                side(tumble, "clicks"),
                side(tumble, "views"),
                side(tumble, "views")
            ),
            "a join of more than two inputs is not supported yet",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.window, x.k FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "`x.window` is a window (start and end): write its start and end",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN (SELECT k, count(*) AS n FROM views GROUP BY k) y ON x.k = y.k;",
                side(tumble, "clicks"),
            ),
            "the right side of the join is an aggregate without a window",
        ),
        (
            format!(
                "INSERT INTO out SELECT k FROM {} x FULL JOIN {} y USING (window, k);",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "USING in a RIGHT or FULL join is not supported",
        ),
        // What a stateless SELECT refuses is refused over the joined rows too.
        (
            format!(
                "INSERT INTO out SELECT x.k, random() AS r FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "random is not supported",
        ),
        (
            format!(
                "INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k WHERE x.n + 0.5 > 3;",
                side(tumble, "clicks"),
                side(tumble, "views")
            ),
            "would be converted from BIGINT to",
        ),
    ];
    let e = plan_sql(&format!("{TABLES}{}", cases[1].0))
        .err()
        .expect("refused");
    assert!(e.ends_with("(line 5, column 38)"), "{e}");
    for (insert, want) in cases {
        let e = plan_sql(&format!("{TABLES}{insert}"))
            .err()
            .expect("refused");
        assert!(e.contains(want), "{insert}\n  gave: {e}\n  want: {want}");
    }
    // A subquery's refusal points into the subquery.
    let e = plan_sql(&format!(
        "{TABLES}INSERT INTO out SELECT x.k FROM {} x JOIN {} y ON x.window = y.window AND x.k = y.k;",
        side(tumble, "clicks"),
        side("SESSION(INTERVAL '5' SECOND)", "views")
    ))
    .err().expect("refused");
    assert!(
        e.contains("the right side of the join is a SESSION window"),
        "{e}"
    );
    assert!(e.contains("(line 5, column "), "{e}");
}

/// One source row as it arrived: its table (0 clicks, 1 views), key, value, event time,
/// and the join's watermark it met.
#[derive(Debug, Clone)]
struct Arrived {
    side: usize,
    k: Option<String>,
    v: Option<i64>,
    t: i64,
    wm: Option<i64>,
}

/// The source rows of table `side` (its columns, then the hidden event time).
fn source_batch(q: &PlannedQuery, side: usize, rows: &[&Arrived]) -> RecordBatch {
    let table = match side {
        0 => &q.source,
        _ => &q.join.as_ref().unwrap().right_source,
    };
    let schema = table.connection.schema.arrow_schema();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match f.name().as_str() {
                "k" => Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.clone()))),
                "v" | "w" => Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
                "n" => Arc::new(arrow::array::Int32Array::from_iter(
                    rows.iter().map(|_| Some(1)),
                )),
                _ => Arc::new(TimestampNanosecondArray::from_iter_values(
                    rows.iter().map(|r| r.t),
                )),
            }
        })
        .collect();
    RecordBatch::try_new(schema, columns).unwrap()
}

/// Streams `arrivals` (batches of `per_batch`, each of one table) through the join over
/// `peers[0]` subtasks, restoring onto `peers[1]` after batch `cut`: the rows written, as
/// sorted text. Each arrival's `wm` is set to the join's watermark it met.
fn stream(
    q: &PlannedQuery,
    arrivals: &mut [Arrived],
    per_batch: usize,
    bound: i64,
    cut: usize,
    peers: [u64; 2],
) -> Vec<Vec<String>> {
    let j = q.join.clone().unwrap();
    let converters = [0, 1].map(|s| route_converter(&j.sides[s].window).unwrap());
    let new_states =
        |n: u64| -> Vec<JoinState> { (0..n).map(|_| JoinState::new(j.clone()).unwrap()).collect() };
    let mut n = peers[0];
    let mut states = new_states(n);
    let mut max_seen = [None::<i64>; 2];
    let mut watermark: Option<i64> = None;
    let mut written: Vec<RecordBatch> = Vec::new();
    let fire = |states: &mut Vec<JoinState>, w: i64, written: &mut Vec<RecordBatch>| {
        for s in states.iter_mut() {
            if let Some(b) = s.advance(w).unwrap() {
                written.push(q.project(&b).unwrap());
            }
        }
    };
    let mut i = 0;
    let mut start = 0;
    while start < arrivals.len() {
        // A batch is rows of one table in a row.
        let side = arrivals[start].side;
        let mut end = start;
        while end < arrivals.len() && end - start < per_batch && arrivals[end].side == side {
            end += 1;
        }
        for r in &mut arrivals[start..end] {
            r.wm = watermark;
        }
        let rows: Vec<&Arrived> = arrivals[start..end].iter().collect();
        let batch = source_batch(q, side, &rows);
        let plan = &j.sides[side].window;
        let first = plan.first_stage(&batch).unwrap();
        for (target, part) in split_by_group(plan, &converters[side], &first, n).unwrap() {
            states[target as usize].update(side, &part).unwrap();
        }
        for r in &rows {
            let m = &mut max_seen[side];
            *m = Some(m.map_or(r.t, |m| m.max(r.t)));
        }
        if i == cut {
            let snaps: Vec<_> = states.iter_mut().map(|s| s.snapshot().unwrap()).collect();
            n = peers[1];
            states = new_states(n);
            for (t, s) in states.iter_mut().enumerate() {
                s.restore(&snaps, t as u64, n).unwrap();
            }
        }
        // Each table's watermark is its highest event time less the bound; the join's
        // the lower of the two, once both have one.
        if let [Some(a), Some(b)] = max_seen {
            let w = a.min(b) - bound;
            if watermark.is_none_or(|c| w > c) {
                watermark = Some(w);
                fire(&mut states, w, &mut written);
            }
        }
        start = end;
        i += 1;
    }
    fire(&mut states, i64::MAX, &mut written);
    let mut out: Vec<Vec<String>> = written.iter().flat_map(text_rows).collect();
    out.sort();
    out
}

/// DataFusion's batch join of the batch aggregates over the rows the watermark rule keeps.
fn batch_join(kind: &str, window: &str, arrivals: &[Arrived]) -> Vec<Vec<String>> {
    let table = |side: usize| {
        let rows: Vec<&Arrived> = arrivals.iter().filter(|r| r.side == side).collect();
        let k: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.clone())));
        let v: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v)));
        let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|r| r.t),
        ));
        let wm: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.wm)));
        RecordBatch::try_from_iter([("k", k), ("v", v), ("ts", ts), ("wm", wm)]).unwrap()
    };
    // Each (row, window) pair; a window [ws, we) fired once the watermark reached we - 1.
    let bucket = |w: &str| format!("date_bin(INTERVAL '{w}', ts, TIMESTAMP '1970-01-01T00:00:00')");
    let pairs = match window {
        "tumble" => format!(
            "SELECT k, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM {{t}}",
            b = bucket("10 seconds")
        ),
        _ => format!(
            "SELECT k, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM {{t}}
             UNION ALL
             SELECT k, v, wm, {b} - INTERVAL '5 seconds' AS ws, {b} + INTERVAL '5 seconds' AS we FROM {{t}}",
            b = bucket("5 seconds")
        ),
    };
    let kept = |t: &str| {
        format!(
            "SELECT * FROM ({}) WHERE wm IS NULL OR CAST(we AS BIGINT) - 1 > wm",
            pairs.replace("{t}", t)
        )
    };
    let query = format!(
        "SELECT x.ws AS xs, x.k AS xk, x.n, x.total, y.ws AS ys, y.k AS yk, y.m, y.hi
         FROM (SELECT ws, k, count(*) AS n, sum(v) AS total FROM ({}) GROUP BY ws, k) x
         {kind} (SELECT ws, k, count(*) AS m, max(v) AS hi FROM ({}) GROUP BY ws, k) y
         ON x.ws = y.ws AND x.k = y.k",
        kept("clicks"),
        kept("views")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("clicks", table(0)).unwrap();
        ctx.register_batch("views", table(1)).unwrap();
        ctx.sql(&query).await.unwrap().collect().await.unwrap()
    });
    let mut rows: Vec<Vec<String>> = out.iter().flat_map(text_rows).collect();
    rows.sort();
    rows
}

fn arrivals() -> impl Strategy<Value = (Vec<Arrived>, usize, usize, [u64; 2])> {
    // (side, key, value, event time in ms, lateness in ms) ...
    let row = (
        0usize..2,
        prop::option::weighted(0.95, 0usize..4),
        prop::option::weighted(0.9, -50i64..50),
        0i64..60_000,
    );
    (
        prop::collection::vec(row, 1..120),
        1usize..8,
        0usize..30,
        (1u64..4, 1u64..4),
    )
        .prop_map(|(rows, per_batch, cut, (a, b))| {
            let mut rows: Vec<Arrived> = rows
                .into_iter()
                .map(|(side, k, v, t)| Arrived {
                    side,
                    k: k.map(|k| format!("k{k}")),
                    v,
                    t: t * MS,
                    wm: None,
                })
                .collect();
            // Roughly in event-time order, out of order within the bound and beyond it.
            rows.sort_by_key(|r| r.t / (7_000 * MS));
            (rows, per_batch, cut, [a, b])
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn joined_rows_equal_datafusions_batch_join_of_what_the_watermark_keeps(
        (mut rows, per_batch, cut, peers) in arrivals(),
    ) {
        for (window, group) in [
            ("tumble", "TUMBLE(INTERVAL '10' SECOND)"),
            ("hop", "HOP(INTERVAL '5' SECOND, INTERVAL '10' SECOND)"),
        ] {
            for kind in ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"] {
                let q = plan_join(kind, group);
                let streamed = stream(&q, &mut rows, per_batch, 3_000 * MS, cut, peers);
                let expected = batch_join(kind, window, &rows);
                prop_assert_eq!(streamed, expected, "{} {}", kind, group);
            }
        }
    }
}

/// A name both sides hold (`n`, `k`) reads each side's own column: a LEFT JOIN's right
/// count is nullable and a DOUBLE average stays DOUBLE, whatever the left side's `n` is.
#[test]
fn a_name_on_both_sides_keeps_each_sides_type_and_nullability() {
    let tumble = "TUMBLE(INTERVAL '10' SECOND)";
    let q = plan_sql(&format!(
        "{TABLES}INSERT INTO out SELECT x.k, x.n AS xn, y.n AS yn, y.a FROM
         (SELECT {tumble} AS window, k, count(*) AS n FROM clicks GROUP BY window, k) x
         LEFT JOIN (SELECT {tumble} AS window, k, count(*) AS n, avg(w) AS a FROM views GROUP BY window, k) y
         ON x.window = y.window AND x.k = y.k;"
    ))
    .unwrap()
    .queries[0]
        .clone();
    let f = |i: usize| q.sink.connection.schema.fields[i].clone();
    assert!(f(1).required, "x.n is a left count: never NULL");
    assert!(
        !f(2).required,
        "y.n is NULL where the right side has no row"
    );
    assert_eq!(f(3).field_type, pubsub_engine_spi::FieldType::Double);
}
