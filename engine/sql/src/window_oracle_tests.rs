//! The window operator against DataFusion's batch SQL (issue 32, item 8). Seeded random
//! rows come from three splits in a random interleaving, out of order within a bound and
//! some behind it; the watermark after each batch is the source's (the lowest over the
//! splits of each split's highest event time less the bound); the state is snapshotted
//! and restored in the middle. For each window kind and every aggregate, the rows written
//! equal what DataFusion's batch SQL computes over the same rows: a plain `GROUP BY` over
//! the window buckets (for SESSION, sessions found with `lag` and a running `sum`), of the
//! rows, or (row, window) pairs, that the watermark rule keeps. Late rows are exactly
//! those the rule predicts.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::window_tests::{plan, text_rows};
use pubsub_engine_plan::window::WindowState;

const MS: i64 = 1_000_000;

/// Every aggregate, as the streaming and the batch query both compute them.
const AGGREGATES: &str = "count(*) AS n, count(v) AS nv, count(DISTINCT v) AS dv, sum(v) AS total, min(v) AS lo, max(v) AS hi, avg(v) AS mean, bool_and(v > 0) AS all_pos, bool_or(v > 0) AS any_pos";
const OUT: &str = "ws, we, page, n, nv, dv, total, lo, hi, mean, all_pos, any_pos";

/// One row as it arrived: page, v, event time (ns), and the watermark it met (ns).
#[derive(Debug, Clone)]
struct Arrived {
    page: String,
    v: Option<i64>,
    t: i64,
    wm: Option<i64>,
}

/// The window kinds: (the streaming `GROUP BY` item, the batch query over table `rows`
/// that keeps what the watermark rule keeps).
fn kinds() -> Vec<(&'static str, String)> {
    let group = |from: &str| {
        format!("SELECT ws, we, page, {AGGREGATES} FROM ({from}) GROUP BY ws, we, page")
    };
    // A fixed window [ws, we) fired once the watermark reached we - 1 ns: a row (for HOP,
    // a row's window) that met such a watermark is late.
    let open = "wm IS NULL OR CAST(we AS BIGINT) - 1 > wm";
    let bucket =
        |width: &str| format!("date_bin(INTERVAL '{width}', ts, TIMESTAMP '1970-01-01T00:00:00')");
    let tumble = group(&format!(
        "SELECT * FROM (SELECT page, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM rows) WHERE {open}",
        b = bucket("10 seconds")
    ));
    // HOP(5 s, 10 s): each row is in the window starting at its 5 s bucket and the one
    // before.
    let hop = group(&format!(
        "SELECT * FROM (
            SELECT page, v, wm, {b} AS ws, {b} + INTERVAL '10 seconds' AS we FROM rows
            UNION ALL
            SELECT page, v, wm, {b} - INTERVAL '5 seconds' AS ws, {b} + INTERVAL '5 seconds' AS we FROM rows
         ) WHERE {open}",
        b = bucket("5 seconds")
    ));
    // SESSION(5 s): a row at or before the watermark is late; the others make sessions
    // per page, a new one where a row is 5 s or more after the one before.
    let session = format!(
        "WITH kept AS (SELECT page, v, ts, t FROM rows WHERE wm IS NULL OR t > wm),
         marked AS (SELECT page, v, ts, t,
             CASE WHEN t - lag(t) OVER (PARTITION BY page ORDER BY t) < 5000000000 THEN 0 ELSE 1 END AS starts
             FROM kept),
         numbered AS (SELECT page, v, ts, sum(starts) OVER (PARTITION BY page ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid
             FROM marked)
         SELECT min(ts) AS ws, max(ts) + INTERVAL '5 seconds' AS we, page, {AGGREGATES}
         FROM numbered GROUP BY page, sid"
    );
    vec![
        ("TUMBLE(INTERVAL '10' SECOND)", tumble),
        ("HOP(INTERVAL '5' SECOND, INTERVAL '10' SECOND)", hop),
        ("SESSION(INTERVAL '5' SECOND)", session),
    ]
}

/// Source rows of `src` (page, v) with their event time.
fn batch(rows: &[Arrived]) -> RecordBatch {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.page)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        rows.iter().map(|r| r.t),
    ));
    RecordBatch::try_from_iter([("page", page), ("v", v), ("__event_time", ts)]).unwrap()
}

/// Each row of `batches` as text cells, sorted.
fn cells(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = batches.iter().flat_map(text_rows).collect();
    out.sort();
    out
}

/// Streams `arrivals` (batches of `per_batch`) through the window of `group_item`,
/// snapshotting and restoring after batch `cut`: the rows written, and the rows counted
/// late. Each arrival's `wm` is set to the watermark it met.
fn stream(
    group_item: &str,
    arrivals: &mut [Arrived],
    splits_of: &[usize],
    per_batch: usize,
    bound: i64,
    cut: usize,
) -> (Vec<Vec<String>>, u64) {
    let select = format!(
        "SELECT window.start AS ws, window.end AS we, page, n, nv, dv, total, lo, hi, mean, all_pos, any_pos FROM (SELECT {group_item} AS window, page, {AGGREGATES} FROM src GROUP BY window, page)"
    );
    let (after, window) = plan(&select).unwrap();
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    let mut max_seen = [None::<i64>; 3];
    let mut watermark: Option<i64> = None;
    let mut written = Vec::new();
    let mut late = 0;
    let fire = |state: &mut WindowState, w: i64, written: &mut Vec<RecordBatch>| {
        for b in state.advance(w).unwrap() {
            written.push(after.evaluate(&b).unwrap());
        }
    };
    for (i, chunk) in arrivals.chunks_mut(per_batch).enumerate() {
        for r in chunk.iter_mut() {
            r.wm = watermark;
        }
        let rows = batch(chunk);
        state
            .update(&window.before.evaluate(&rows).unwrap())
            .unwrap();
        let first = i * per_batch;
        for (j, r) in chunk.iter().enumerate() {
            let s = &mut max_seen[splits_of[first + j]];
            *s = Some(s.map_or(r.t, |m| m.max(r.t)));
        }
        if i == cut {
            late += state.take_late();
            let snap = state.snapshot().unwrap();
            state = WindowState::new(window.clone()).unwrap();
            state.restore(&[snap], 0, 1).unwrap();
        }
        // The source's watermark: none until every split delivered, never lowered.
        if let Some(lowest) = max_seen.iter().copied().collect::<Option<Vec<i64>>>() {
            let w = lowest.into_iter().min().unwrap() - bound;
            if watermark.is_none_or(|c| w > c) {
                watermark = Some(w);
                fire(&mut state, w, &mut written);
            }
        }
    }
    // `--drain`: the end of time.
    fire(&mut state, i64::MAX, &mut written);
    (cells(&written), late + state.take_late())
}

/// What DataFusion's batch SQL computes with `query` over `arrivals` (as table `rows`).
fn batch_sql(query: &str, arrivals: &[Arrived]) -> Vec<Vec<String>> {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(
        arrivals.iter().map(|r| &r.page),
    ));
    let v: ArrayRef = Arc::new(Int64Array::from_iter(arrivals.iter().map(|r| r.v)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        arrivals.iter().map(|r| r.t),
    ));
    let t: ArrayRef = Arc::new(Int64Array::from_iter_values(arrivals.iter().map(|r| r.t)));
    let wm: ArrayRef = Arc::new(Int64Array::from_iter(arrivals.iter().map(|r| r.wm)));
    let rows =
        RecordBatch::try_from_iter([("page", page), ("v", v), ("ts", ts), ("t", t), ("wm", wm)])
            .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("rows", rows).unwrap();
        let df = ctx
            .sql(&format!("SELECT {OUT} FROM ({query})"))
            .await
            .unwrap();
        df.collect().await.unwrap()
    });
    cells(&out)
}

/// Rows each late by the watermark rule, computed here from what each row met.
fn predicted_late(group_item: &str, arrivals: &[Arrived]) -> u64 {
    arrivals
        .iter()
        .filter(|r| {
            let Some(wm) = r.wm else { return false };
            let fired = |start: i64, width: i64| start + width - 1 <= wm;
            let floor = |t: i64, w: i64| t.div_euclid(w) * w;
            match group_item.split('(').next().unwrap() {
                "TUMBLE" => fired(floor(r.t, 10_000 * MS), 10_000 * MS),
                "HOP" => {
                    let b = floor(r.t, 5_000 * MS);
                    fired(b, 10_000 * MS) || fired(b - 5_000 * MS, 10_000 * MS)
                }
                _ => r.t <= wm,
            }
        })
        .count() as u64
}

/// The rows of `input` ((split, page, v, jitter ms)): each split advances 300 ms per row
/// (split 2 faster), moved by the jitter: the slowest holds the watermark back and the
/// others' rows run ahead of it. Returns the arrivals and each one's split.
fn arrivals(input: &[(usize, u8, Option<i64>, i64)]) -> (Vec<Arrived>, Vec<usize>) {
    let mut next = [0i64; 3];
    let mut arrivals = Vec::new();
    let mut splits_of = Vec::new();
    for (split, page, v, jitter) in input {
        next[*split] += 300 + 200 * *split as i64;
        let t = (next[*split] + jitter).max(0) * MS + 1_000_000_000_000 * MS;
        arrivals.push(Arrived {
            page: format!("p{page}"),
            v: *v,
            t,
            wm: None,
        });
        splits_of.push(*split);
    }
    (arrivals, splits_of)
}

/// Streams `input` through every window kind and checks the rows against the batch SQL
/// and the late count against the rule; returns (rows written, rows late) per kind.
fn check(
    input: &[(usize, u8, Option<i64>, i64)],
    per_batch: usize,
    bound_ms: i64,
    cut: usize,
) -> Vec<(usize, u64)> {
    let (arrived, splits_of) = arrivals(input);
    kinds()
        .into_iter()
        .map(|(group_item, query)| {
            let mut a = arrived.clone();
            let (got, late) = stream(
                group_item,
                &mut a,
                &splits_of,
                per_batch,
                bound_ms * MS,
                cut,
            );
            assert_eq!(
                late,
                predicted_late(group_item, &a),
                "late rows of {group_item}"
            );
            assert_eq!(got, batch_sql(&query, &a), "{group_item}");
            (got.len(), late)
        })
        .collect()
}

#[test]
fn a_run_with_late_rows_in_every_kind_equals_the_batch_sql() {
    // Split 0 is slow, split 2 fast; rows of split 0 with a large negative jitter arrive
    // behind the watermark the others set.
    let input: Vec<(usize, u8, Option<i64>, i64)> = (0..150)
        .map(|i: i64| {
            let split = (i % 3) as usize;
            let v = (i % 11 != 0).then_some(i % 17 - 8);
            let jitter = if i % 7 == 0 { -7_000 } else { (i * 37) % 2_000 };
            (split, (i % 4) as u8, v, jitter)
        })
        .collect();
    for (kind, (rows, late)) in ["TUMBLE", "HOP", "SESSION"]
        .iter()
        .zip(check(&input, 4, 500, 9))
    {
        assert!(rows >= 4 && late > 0, "{kind}: {rows} rows, {late} late");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn every_window_kind_and_aggregate_equals_datafusions_batch_sql(
        input in prop::collection::vec(
            (0usize..3, 0u8..4, prop::option::weighted(0.9, -20i64..20), -8_000i64..8_000),
            1..160,
        ),
        per_batch in 1usize..12,
        bound_ms in 0i64..6_000,
        cut in 0usize..20,
    ) {
        check(&input, per_batch, bound_ms, cut);
    }
}
