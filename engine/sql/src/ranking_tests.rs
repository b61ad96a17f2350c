//! Window functions over a window's rows (issue 48, part 2): top-N per window planned and
//! run without a runtime, refusals with their positions, and an oracle: for seeded random
//! rows out of order (some late), spread over several subtasks by the window's exchange
//! and restored onto another number of them in the middle, the rows written equal what
//! DataFusion's batch window functions compute over the batch `GROUP BY`'s rows.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::window_tests::{feed, plan, run, text_rows, S};
use pubsub_engine_plan::window::{route_converter, split_by_group, WindowState};

const TOP2: &str = "SELECT window.start AS ws, page, n, row_num FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY n DESC) AS row_num
    FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS n
          FROM src GROUP BY window, page)
) WHERE row_num <= 2";

#[test]
fn top_n_writes_the_n_rows_of_each_window_ties_broken_by_the_group_key() {
    let (after, window) = plan(TOP2).unwrap();
    assert_eq!(
        window.route,
        Some(vec![]),
        "by the window alone: one subtask"
    );
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    // [0, 10): c 3, a 2, b 2, d 1 -> c, then a before b (tie on n, a < b).
    feed(
        &window,
        &mut state,
        &[
            ("b", 1, 1),
            ("c", 1, 2),
            ("a", 1, 3),
            ("d", 1, 4),
            ("c", 1, 5),
            ("b", 1, 6),
            ("a", 1, 7),
            ("c", 1, 8),
            ("e", 1, 15),
        ],
    );
    let t0 = "1970-01-01T00:00:00";
    assert_eq!(
        run(&after, &mut state, 10),
        vec![vec![t0, "c", "3", "1"], vec![t0, "a", "2", "2"],]
    );
    // The next window ranks its own rows only.
    assert_eq!(
        run(&after, &mut state, 20),
        vec![vec!["1970-01-01T00:00:10", "e", "1", "1"]]
    );
}

#[test]
fn rank_dense_rank_and_lag_run_per_partition_of_window_and_key() {
    let select = "SELECT page, g, n, rk, drk, prev FROM (
        SELECT *, RANK() OVER (PARTITION BY window, g ORDER BY n DESC) AS rk,
                  DENSE_RANK() OVER (PARTITION BY window, g ORDER BY n DESC) AS drk,
                  LAG(page) OVER (PARTITION BY window, g ORDER BY n DESC) AS prev
        FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, v % 2 AS g, count(*) AS n
              FROM src GROUP BY window, page, g))";
    let (after, window) = plan(select).unwrap();
    // Keys: page (0), g (1); the partition routes by g alone.
    assert_eq!(window.route, Some(vec![1]));
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(
        &window,
        &mut state,
        &[
            ("a", 1, 1),
            ("a", 1, 2),
            ("b", 3, 3),
            ("b", 3, 4),
            ("c", 5, 5),
            ("d", 2, 6),
        ],
    );
    // g = 0: d 1. g = 1: a 2, b 2, c 1 -> ranks 1, 1, 3; dense 1, 1, 2.
    assert_eq!(
        run(&after, &mut state, 10),
        vec![
            vec!["d", "0", "1", "1", "1", ""],
            vec!["a", "1", "2", "1", "1", ""],
            vec!["b", "1", "2", "1", "1", "a"],
            vec!["c", "1", "1", "3", "2", "b"],
        ]
    );
}

#[test]
fn window_functions_are_refused_where_they_cannot_run_with_the_reason_and_position() {
    let agg = |kind: &str| {
        format!("SELECT {kind} AS window, page, v % 2 AS g, count(*) AS n, sum(v) AS total FROM src GROUP BY window, page, g")
    };
    let tumble = agg("TUMBLE(INTERVAL '10' SECOND)");
    let cases: Vec<(String, &str)> = vec![
        (
            format!("SELECT page, r FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY n) AS r FROM ({tumble}))"),
            "the PARTITION BY must hold the window",
        ),
        (
            format!("SELECT page, r FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window, n ORDER BY n) AS r FROM ({tumble}))"),
            "PARTITION BY n: a partition is made of the window and GROUP BY keys",
        ),
        (
            format!("SELECT page, r FROM (SELECT *, sum(n) OVER (PARTITION BY window) AS r FROM ({tumble}))"),
            "aggregate function sum over a window (OVER) is not supported yet",
        ),
        (
            format!("SELECT page, r FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY n) AS r FROM ({}))", agg("SESSION(INTERVAL '10' SECOND)")),
            "over a SESSION window's rows is not supported",
        ),
        (
            "SELECT page, r FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY page ORDER BY n) AS r FROM (SELECT page, count(*) AS n FROM src GROUP BY page))".to_string(),
            "over an aggregate without a window is not supported yet",
        ),
        (
            format!("SELECT page, r, q FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY n) AS r, ROW_NUMBER() OVER (PARTITION BY window ORDER BY total) AS q FROM ({tumble}))"),
            "different OVER (...) clauses",
        ),
    ];
    for (select, want) in cases {
        let e = plan(&select).unwrap_err().0;
        assert!(e.contains(want), "{select}\n  gave: {e}");
        assert!(e.contains("line "), "no position: {e}");
    }
    // Without a windowed aggregate below: refused, saying where it runs.
    let e = plan_stateless("SELECT page, ROW_NUMBER() OVER (ORDER BY v) AS r FROM src");
    assert!(
        e.contains("runs over the rows of a windowed aggregate only"),
        "{e}"
    );
}

fn plan_stateless(select: &str) -> String {
    let sql = format!(
        "CREATE TABLE src (page TEXT, v BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'format' = 'json');\nCREATE TABLE out (page TEXT, r BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'format' = 'json');\nINSERT INTO out {select}"
    );
    let p = super::parse::parse_pipeline(&sql).unwrap();
    let src = super::window_tests::src();
    super::select::plan_select(&p.inserts[0].query, "src", &src, "INSERT INTO out")
        .map(|_| ())
        .unwrap_err()
        .0
}

/// One row as it arrived: page, v, event time (ns), and the watermark it met.
#[derive(Debug, Clone)]
struct Arrived {
    page: String,
    v: i64,
    t: i64,
    wm: Option<i64>,
}

const KINDS: [&str; 2] = [
    "TUMBLE(INTERVAL '10' SECOND)",
    "HOP(INTERVAL '5' SECOND, INTERVAL '10' SECOND)",
];

/// The streaming query: per window and parity of v, the two pages with the most rows,
/// with their rank, dense rank and the total of the page before them.
fn streaming(kind: &str) -> String {
    format!(
        "SELECT window.start AS ws, g, page, n, total, rn, rk, drk, prev FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY window, g ORDER BY n DESC) AS rn,
                      RANK() OVER (PARTITION BY window, g ORDER BY n DESC) AS rk,
                      DENSE_RANK() OVER (PARTITION BY window, g ORDER BY n DESC) AS drk,
                      LAG(total) OVER (PARTITION BY window, g ORDER BY n DESC) AS prev
            FROM (SELECT {kind} AS window, page, v % 2 AS g, count(*) AS n, sum(v) AS total
                  FROM src GROUP BY window, page, g)
        ) WHERE rn <= 2"
    )
}

/// The same over table `rows` in batch: the window buckets a row (for HOP, each of its
/// windows) is in, kept when its window had not fired when the row arrived; ties broken
/// by page, as the streaming ranking documents.
fn batch_query(kind: &str) -> String {
    let b = |w: &str| format!("date_bin(INTERVAL '{w}', ts, TIMESTAMP '1970-01-01T00:00:00')");
    let pairs = if kind.starts_with("TUMBLE") {
        format!(
            "SELECT page, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM rows",
            b = b("10 seconds")
        )
    } else {
        format!(
            "SELECT page, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM rows
             UNION ALL
             SELECT page, v, wm, {b} - INTERVAL '5 seconds' AS ws, {b} + INTERVAL '5 seconds' AS we FROM rows",
            b = b("5 seconds")
        )
    };
    let over = "OVER (PARTITION BY ws, g ORDER BY n DESC, page)";
    format!(
        "SELECT ws, g, page, n, total, rn, rk, drk, prev FROM (
            SELECT *, ROW_NUMBER() {over} AS rn, RANK() OVER (PARTITION BY ws, g ORDER BY n DESC) AS rk,
                      DENSE_RANK() OVER (PARTITION BY ws, g ORDER BY n DESC) AS drk,
                      LAG(total) {over} AS prev
            FROM (SELECT ws, page, v % 2 AS g, count(*) AS n, sum(v) AS total
                  FROM ({pairs}) WHERE wm IS NULL OR CAST(we AS BIGINT) - 1 > wm
                  GROUP BY ws, page, g)
        ) WHERE rn <= 2"
    )
}

fn source_rows(a: &[Arrived]) -> RecordBatch {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(a.iter().map(|r| &r.page)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter_values(a.iter().map(|r| r.v)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        a.iter().map(|r| r.t),
    ));
    RecordBatch::try_from_iter([("page", page), ("v", v), ("__event_time", ts)]).unwrap()
}

/// Streams `arrivals` in batches of `per_batch` through `peers` subtasks (rows routed as
/// the window's exchange routes them), restoring every snapshot onto `peers_after`
/// subtasks after batch `cut`. The watermark is the highest event time less `bound`.
fn stream(
    kind: &str,
    arrivals: &mut [Arrived],
    per_batch: usize,
    bound: i64,
    cut: usize,
    (peers, peers_after): (u64, u64),
) -> Vec<Vec<String>> {
    let (after, window) = plan(&streaming(kind)).unwrap();
    let window = Arc::new(window);
    let converter = route_converter(&window).unwrap();
    let mut states: Vec<WindowState> = (0..peers)
        .map(|_| WindowState::new(window.clone()).unwrap())
        .collect();
    let mut out = Vec::new();
    let mut watermark: Option<i64> = None;
    let mut max_t: Option<i64> = None;
    for (i, chunk) in arrivals.chunks_mut(per_batch).enumerate() {
        for r in chunk.iter_mut() {
            r.wm = watermark;
            max_t = Some(max_t.map_or(r.t, |m| m.max(r.t)));
        }
        let first = window.before.evaluate(&source_rows(chunk)).unwrap();
        let n = states.len() as u64;
        for (to, part) in split_by_group(&window, &converter, &first, n).unwrap() {
            states[to as usize].update(&part).unwrap();
        }
        if i == cut {
            let snaps: Vec<_> = states.iter_mut().map(|s| s.snapshot().unwrap()).collect();
            states = (0..peers_after)
                .map(|k| {
                    let mut s = WindowState::new(window.clone()).unwrap();
                    s.restore(&snaps, k, peers_after).unwrap();
                    s
                })
                .collect();
        }
        let w = max_t.unwrap() - bound;
        if watermark.is_none_or(|c| w > c) {
            watermark = Some(w);
            for s in &mut states {
                for b in s.advance(w).unwrap() {
                    out.extend(text_rows(&after.evaluate(&b).unwrap()));
                }
            }
        }
    }
    for s in &mut states {
        for b in s.advance(i64::MAX).unwrap() {
            out.extend(text_rows(&after.evaluate(&b).unwrap()));
        }
    }
    out.sort();
    out
}

fn batch_sql(query: &str, a: &[Arrived]) -> Vec<Vec<String>> {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(a.iter().map(|r| &r.page)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter_values(a.iter().map(|r| r.v)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        a.iter().map(|r| r.t),
    ));
    let wm: ArrayRef = Arc::new(Int64Array::from_iter(a.iter().map(|r| r.wm)));
    let rows =
        RecordBatch::try_from_iter([("page", page), ("v", v), ("ts", ts), ("wm", wm)]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let batches = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("rows", rows).unwrap();
        ctx.sql(query).await.unwrap().collect().await.unwrap()
    });
    let mut out: Vec<Vec<String>> = batches.iter().flat_map(text_rows).collect();
    out.sort();
    out
}

/// Rows (page, v, jitter ms), 400 ms apart before the jitter.
fn arrivals(input: &[(u8, i64, i64)]) -> Vec<Arrived> {
    input
        .iter()
        .enumerate()
        .map(|(i, (page, v, jitter))| Arrived {
            page: format!("p{page}"),
            v: *v,
            t: (i as i64 * 400 + jitter).max(0) * 1_000_000 + 1_000_000 * S,
            wm: None,
        })
        .collect()
}

fn check(
    input: &[(u8, i64, i64)],
    per_batch: usize,
    bound_ms: i64,
    cut: usize,
    peers: (u64, u64),
) -> usize {
    let mut written = 0;
    for kind in KINDS {
        let mut a = arrivals(input);
        let got = stream(kind, &mut a, per_batch, bound_ms * 1_000_000, cut, peers);
        assert_eq!(got, batch_sql(&batch_query(kind), &a), "{kind}");
        written += got.len();
    }
    written
}

#[test]
fn top_n_with_late_rows_across_a_rescale_equals_the_batch_sql() {
    let input: Vec<(u8, i64, i64)> = (0..200)
        .map(|i: i64| {
            (
                (i * 7 % 6) as u8,
                i % 9 - 3,
                if i % 11 == 0 {
                    -6_000
                } else {
                    (i * 53) % 1_500
                },
            )
        })
        .collect();
    assert!(check(&input, 5, 800, 13, (3, 2)) > 10);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn top_n_and_rank_functions_equal_datafusions_batch_window_functions(
        input in prop::collection::vec((0u8..6, -9i64..9, -6_000i64..3_000), 1..150),
        per_batch in 1usize..10,
        bound_ms in 0i64..4_000,
        cut in 0usize..20,
        peers in 1u64..4,
        peers_after in 1u64..4,
    ) {
        check(&input, per_batch, bound_ms, cut, (peers, peers_after));
    }
}
