//! Updating joins without a runtime (issue 48, part 1; decision 0056): planning and its
//! refusals, and the joined rows against DataFusion's batch join.
//!
//! The oracle: seeded random rows of two tables arrive interleaved, out of order within a
//! bound and some behind it, routed by join key over a number of subtasks as the runtime
//! routes them; each table's watermark is its highest event time less the bound, the
//! join's the lower of the two. The rows written equal DataFusion's batch
//! `JOIN ... ON c.k = v.k WHERE abs(c.ts - v.ts) <= ttl` over the rows that were not late
//! (behind the join's watermark when they arrived), each under the record key naming its
//! two rows; with a snapshot restored onto another number of subtasks in the middle, and
//! with a crash after which the rows since the snapshot are replayed in another order.

use std::collections::BTreeMap;
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
const TTL_MS: i64 = 5_000;

const TABLES: &str = "
CREATE TABLE clicks (k TEXT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source');
CREATE TABLE views (k TEXT, w BIGINT, n INT) WITH ('connector' = 'mem', 'role' = 'source');
";

/// The changelog the joins write (its columns those of the SELECT writing it).
const OUT: &str = "CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = 'true', 'format' = 'debezium_json', 'changelog.state-ttl' = '5s');
";

const JOIN: &str = "INSERT INTO out SELECT c.k, c.v, v.w FROM clicks c JOIN views v ON c.k = v.k;";

fn plan_sql(sql: &str) -> Result<PlannedPipeline, String> {
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let sql = parse_pipeline(sql).map_err(|e| e.to_string())?;
    plan_pipeline(&sql, &connectors).map_err(|e| e.to_string())
}

fn plan_join() -> PlannedQuery {
    plan_sql(&format!("{TABLES}{OUT}{JOIN}")).unwrap().queries[0].clone()
}

#[test]
fn a_join_of_two_tables_plans_an_updating_join_keeping_rows_for_the_changelogs_ttl() {
    let q = plan_join();
    let j = q.join.as_ref().expect("a join");
    assert_eq!(j.kind, JoinKind::Inner);
    assert_eq!(j.ttl, Some(TTL_MS * MS));
    assert_eq!(q.source.connection.name, "clicks");
    assert_eq!(j.right_source.connection.name, "views");
    for side in &j.sides {
        // The first stage leads with the key, which it routes by.
        assert_eq!(side.on, vec![0]);
        assert_eq!(side.window.route, Some(vec![0]));
        assert!(
            side.window.before.carry.is_some(),
            "the record key is carried"
        );
    }
    let names: Vec<&str> = q
        .sink_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["k", "v", "w", "__record_id"]);
    // Both tables get their event time, each read once.
    let p = plan_sql(&format!("{TABLES}{OUT}{JOIN}")).unwrap();
    for (t, _) in p.sources() {
        assert!(crate::plan::event_time_of(&t.connection.schema).is_some());
    }
    assert_eq!(p.sources().len(), 2);
}

#[test]
fn updating_joins_that_are_not_built_are_refused_naming_what_and_why() {
    let cases: [(&str, &str); 9] = [
        (
            "INSERT INTO plain SELECT c.k FROM clicks c JOIN views v ON c.k = v.k;",
            "a join of two tables' rows is an updating join, which writes a changelog: declare table 'plain' with 'format' = 'debezium_json'",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c LEFT JOIN views v ON c.k = v.k;",
            "an outer join of two tables' rows is not supported: without a window it would write a row with NULLs and retract it when a match arrives",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c JOIN views v ON c.k = v.k AND c.v < v.w;",
            "the join condition `c.v < v.w` is not supported: ON takes equalities of a column of each side, ANDed (write other conditions in WHERE)",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c JOIN views v ON c.v > 3;",
            "is not supported: ON takes equalities of a column of each side",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c JOIN views v ON c.v = v.n;",
            "the join matches 'v' (BIGINT) with 'n' (INT): columns of one type match",
        ),
        (
            "INSERT INTO out SELECT c.k, count(*) AS n FROM clicks c JOIN views v ON c.k = v.k GROUP BY c.k;",
            "an aggregate (GROUP BY) over the joined rows is not supported yet",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c JOIN (SELECT TUMBLE(INTERVAL '1' SECOND) AS window, k FROM views GROUP BY window, k) v ON c.k = v.k;",
            "a join of a table's rows with a subquery is not supported",
        ),
        (
            "INSERT INTO out SELECT c.k, random() AS r FROM clicks c JOIN views v ON c.k = v.k;",
            "random is not supported",
        ),
        (
            "INSERT INTO out SELECT c.k FROM clicks c FULL JOIN views v ON c.k = v.k;",
            "(line 5, column 33)",
        ),
    ];
    let e = plan_sql(&format!(
        "{TABLES}CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json', 'changelog.flush-interval' = '2s');\n{JOIN}"
    ))
    .err()
    .expect("refused");
    assert!(
        e.contains("option 'changelog.flush-interval' of table 'out' does not apply to a join of two tables' rows"),
        "{e}"
    );
    for (insert, want) in cases {
        let sink = match insert.starts_with("INSERT INTO plain") {
            true => "CREATE TABLE plain WITH ('connector' = 'mem', 'role' = 'sink');\n",
            false => OUT,
        };
        let e = plan_sql(&format!("{TABLES}{sink}{insert}"))
            .err()
            .expect("refused");
        assert!(e.contains(want), "{insert}\n  gave: {e}\n  want: {want}");
    }
}

/// One source row as it arrived: its table (0 clicks, 1 views), key, value, event time,
/// its message's record key, and whether it was late (behind the join's watermark).
#[derive(Debug, Clone)]
struct Arrived {
    side: usize,
    k: Option<String>,
    v: Option<i64>,
    t: i64,
    id: String,
    late: bool,
}

/// The source rows of table `side` (its columns, then the hidden ones).
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
                "__record_key" => Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.id.clone()),
                )),
                _ => Arc::new(TimestampNanosecondArray::from_iter_values(
                    rows.iter().map(|r| r.t),
                )),
            }
        })
        .collect();
    RecordBatch::try_new(schema, columns).unwrap()
}

/// A run of the join over some subtasks, fed batch by batch as the runtime feeds it.
struct Run<'a> {
    q: &'a PlannedQuery,
    states: Vec<JoinState>,
    max_seen: [Option<i64>; 2],
    watermark: Option<i64>,
    written: Vec<RecordBatch>,
}

impl<'a> Run<'a> {
    fn new(q: &'a PlannedQuery, peers: u64) -> Self {
        let j = q.join.clone().unwrap();
        Run {
            q,
            states: (0..peers)
                .map(|_| JoinState::new(j.clone()).unwrap())
                .collect(),
            max_seen: [None; 2],
            watermark: None,
            written: Vec::new(),
        }
    }

    /// Feeds rows of one table; marks each late or not; then advances the watermark.
    fn feed(&mut self, rows: &mut [Arrived], bound: i64) {
        let j = self.q.join.clone().unwrap();
        let side = rows[0].side;
        for r in rows.iter_mut() {
            r.late = self.watermark.is_some_and(|w| r.t < w);
        }
        let refs: Vec<&Arrived> = rows.iter().collect();
        let batch = source_batch(self.q, side, &refs);
        let plan = &j.sides[side].window;
        let first = plan.first_stage(&batch).unwrap();
        let converter = route_converter(plan).unwrap();
        let n = self.states.len() as u64;
        for (target, part) in split_by_group(plan, &converter, &first, n).unwrap() {
            if let Some(b) = self.states[target as usize].update(side, &part).unwrap() {
                self.written.push(b);
            }
        }
        for r in rows.iter() {
            let m = &mut self.max_seen[side];
            *m = Some(m.map_or(r.t, |m| m.max(r.t)));
        }
        if let [Some(a), Some(b)] = self.max_seen {
            let w = a.min(b) - bound;
            if self.watermark.is_none_or(|c| w > c) {
                self.watermark = Some(w);
                for s in &mut self.states {
                    assert!(
                        s.advance(w).unwrap().is_none(),
                        "an updating join fires nothing"
                    );
                }
            }
        }
    }

    /// Snapshots every subtask, and restores them onto `peers` in a new run.
    fn restore_onto(&mut self, peers: u64) -> Run<'a> {
        let snaps: Vec<_> = self
            .states
            .iter_mut()
            .map(|s| s.snapshot().unwrap())
            .collect();
        let mut next = Run::new(self.q, peers);
        for (t, s) in next.states.iter_mut().enumerate() {
            s.restore(&snaps, t as u64, peers).unwrap();
        }
        next.max_seen = self.max_seen;
        next.watermark = self.watermark;
        next
    }

    fn rows(&self) -> Vec<Vec<String>> {
        self.written.iter().flat_map(text_rows).collect()
    }
}

/// Splits `rows` into batches of up to `per_batch` rows of one table in a row.
fn batches(rows: &[Arrived], per_batch: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let mut end = start;
        while end < rows.len() && end - start < per_batch && rows[end].side == rows[start].side {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// DataFusion's batch join, with the time bound, over the rows that were not late: the
/// joined rows as the join writes them (both tables' columns, then the record key).
fn batch_join(arrivals: &[Arrived]) -> Vec<Vec<String>> {
    let table = |side: usize| {
        let rows: Vec<&Arrived> = arrivals
            .iter()
            .filter(|r| r.side == side && !r.late)
            .collect();
        let k: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.clone())));
        let v: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v)));
        let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.t)));
        let id: ArrayRef = Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.clone()),
        ));
        RecordBatch::try_from_iter([("k", k), ("v", v), ("ts", ts), ("id", id)]).unwrap()
    };
    let query = format!(
        "SELECT c.k, c.v, v.k AS vk, v.v AS w, 1 AS n,
                'join/' || length(c.id) || ':' || c.id || '/' || length(v.id) || ':' || v.id AS key
         FROM clicks c JOIN views v ON c.k = v.k
         WHERE abs(c.ts - v.ts) <= {}",
        TTL_MS * MS
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

/// Rows of two tables (keys, NULLs, event times over a minute), roughly in event-time
/// order: shuffled within buckets of `spread` ms.
fn arrivals(spread: i64) -> impl Strategy<Value = (Vec<Arrived>, usize, usize, [u64; 2])> {
    let row = (
        0usize..2,
        prop::option::weighted(0.95, 0usize..4),
        prop::option::weighted(0.9, -50i64..50),
        0i64..60_000,
    );
    (
        prop::collection::vec(row, 1..150),
        1usize..8,
        0usize..40,
        (1u64..4, 1u64..4),
    )
        .prop_map(move |(rows, per_batch, cut, (a, b))| {
            let mut rows: Vec<Arrived> = rows
                .into_iter()
                .enumerate()
                .map(|(i, (side, k, v, t))| Arrived {
                    side,
                    k: k.map(|k| format!("k{k}")),
                    v,
                    t: t * MS,
                    id: format!("m{i}#0"),
                    late: false,
                })
                .collect();
            rows.sort_by_key(|r| r.t / (spread * MS));
            (rows, per_batch, cut, [a, b])
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Out of order within the bound and beyond it (late rows), restored onto another
    /// number of subtasks after batch `cut`.
    #[test]
    fn joined_rows_equal_datafusions_batch_join_with_the_time_bound(
        (mut rows, per_batch, cut, peers) in arrivals(7_000),
    ) {
        let q = plan_join();
        let bound = 3_000 * MS;
        let mut run = Run::new(&q, peers[0]);
        let mut written = Vec::new();
        for (i, r) in batches(&rows, per_batch).into_iter().enumerate() {
            run.feed(&mut rows[r], bound);
            if i == cut {
                written.extend(run.rows());
                run = run.restore_onto(peers[1]);
            }
        }
        written.extend(run.rows());
        written.sort();
        prop_assert_eq!(written, batch_join(&rows));
    }

    /// A crash: the run goes on past its last snapshot (after batch `cut`) and writes;
    /// a new run restores the snapshot and takes the rows since it again, in other
    /// batches and another order within the bound. Each record key is written with one
    /// row, and the record keys written are the batch join's.
    #[test]
    fn after_a_crash_the_replay_writes_the_same_rows_under_the_same_record_keys(
        (mut rows, per_batch, cut, peers) in arrivals(3_000),
        replay_batch in 1usize..8,
        seed in any::<u64>(),
    ) {
        let q = plan_join();
        let bound = 3_000 * MS;
        let all = batches(&rows, per_batch);
        let cut = cut.min(all.len() - 1);
        let mut run = Run::new(&q, peers[0]);
        let mut restored = None;
        let mut before_snapshot = Vec::new();
        for (i, r) in all.iter().enumerate() {
            run.feed(&mut rows[r.clone()], bound);
            if i == cut {
                before_snapshot = run.rows();
                restored = Some(run.restore_onto(peers[1]));
            }
        }
        let mut replay = restored.expect("cut within the batches");
        // The rows since the snapshot, shuffled within each 3 s bucket of event time.
        let since = all[cut].end;
        let mut again: Vec<Arrived> = rows[since..].to_vec();
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut keyed: Vec<(i64, u64, Arrived)> =
            again.drain(..).map(|r| (r.t / (3_000 * MS), next(), r)).collect();
        keyed.sort_by_key(|(b, n, _)| (*b, *n));
        let mut again: Vec<Arrived> = keyed.into_iter().map(|(_, _, r)| r).collect();
        for r in batches(&again, replay_batch) {
            replay.feed(&mut again[r], bound);
        }
        prop_assert!(rows.iter().chain(&again).all(|r| !r.late), "within the bound: nothing is late");
        let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in run.rows().into_iter().chain(replay.rows()) {
            let key = row.last().unwrap().clone();
            if let Some(seen) = by_key.get(&key) {
                prop_assert_eq!(seen, &row, "record key {} written with two rows", key);
            }
            by_key.insert(key, row);
        }
        let mut union: Vec<Vec<String>> = by_key.into_values().collect();
        union.sort();
        let expected = batch_join(&rows);
        prop_assert_eq!(&union, &expected);
        // Nothing rests on what the crashed run wrote after its snapshot: the rows
        // written up to it and the replay's are every row.
        let mut kept: Vec<Vec<String>> = before_snapshot.into_iter().chain(replay.rows()).collect();
        kept.sort();
        kept.dedup();
        prop_assert_eq!(kept, expected);
    }
}

/// Rows are forgotten once the watermark passes their event time plus the TTL: the state
/// empties, and a row within the TTL of a forgotten one would have been late.
#[test]
fn kept_rows_are_forgotten_when_the_watermark_passes_their_time_plus_the_ttl() {
    let q = plan_join();
    let mut run = Run::new(&q, 1);
    let row = |side: usize, t: i64, i: usize| Arrived {
        side,
        k: Some("a".into()),
        v: Some(1),
        t: t * MS,
        id: format!("m{i}#0"),
        late: false,
    };
    run.feed(&mut [row(0, 1_000, 0)], 0);
    run.feed(&mut [row(1, 6_000, 1)], 0); // exactly the TTL apart: joined
    assert_eq!(run.rows().len(), 1);
    let kept = run.states[0].bytes();
    assert!(kept > 0 && run.states[0].groups() == 2, "{kept}");
    eprintln!("state estimate: {} bytes per kept row (k TEXT, v BIGINT / k TEXT, w BIGINT, n INT, record key)", kept / 2);
    // The watermark reaches 6 s: the 1 s row is exactly the TTL behind it, still kept,
    // and joins a row at 6 s (not late: at the watermark).
    run.feed(&mut [row(0, 12_000, 2)], 0);
    assert_eq!(run.watermark, Some(6_000 * MS));
    run.feed(&mut [row(1, 6_000, 3)], 0);
    assert_eq!(run.rows().len(), 2, "the 1 s row joined the second 6 s row");
    // Both tables move on past 6 s + TTL: every row before 7 s is forgotten.
    run.feed(&mut [row(1, 12_000, 4)], 0);
    assert_eq!(run.watermark, Some(12_000 * MS));
    assert_eq!(run.rows().len(), 3, "the two rows at 12 s join");
    assert_eq!(run.states[0].groups(), 2);
    assert!(run.states[0].bytes() <= kept, "only the 12 s rows are kept");
    // A row behind the watermark is late: counted, not joined.
    run.feed(&mut [row(0, 11_000, 5)], 0);
    assert_eq!(run.rows().len(), 3);
    assert_eq!(run.states[0].take_late(), 1);
    // Record keys name both rows' record keys, each with its length.
    let keys: Vec<String> = run
        .rows()
        .iter()
        .map(|r| r.last().unwrap().clone())
        .collect();
    assert_eq!(
        keys,
        [
            "join/4:m0#0/4:m1#0",
            "join/4:m0#0/4:m3#0",
            "join/4:m2#0/4:m4#0"
        ]
    );
}

/// A self-join on two columns into a changelog that stamps no record ids: each side
/// reads the same rows, pairs match on both columns, and rows come out in order.
#[test]
fn a_self_join_on_two_columns_without_record_ids_pairs_rows_equal_on_both() {
    let q = plan_sql(&format!(
        "{TABLES}CREATE TABLE pairs WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json');
         INSERT INTO pairs SELECT a.k, a.v, b.v AS bv FROM clicks a JOIN clicks b USING (k, v);"
    ))
    .unwrap()
    .queries[0]
        .clone();
    let j = q.join.as_ref().unwrap();
    assert_eq!(j.sides[0].on, vec![0, 1]);
    assert!(j.sides[0].window.before.carry.is_none());
    let mut run = Run::new(&q, 2);
    let row = |side: usize, k: &str, v: i64| Arrived {
        side,
        k: Some(k.into()),
        v: Some(v),
        t: 1_000 * MS,
        id: String::new(),
        late: false,
    };
    // A self-join reads each message on both sides.
    let rows = [("a", 1), ("a", 2), ("b", 1), ("a", 1)];
    for side in 0..2 {
        let mut batch: Vec<Arrived> = rows.iter().map(|(k, v)| row(side, k, *v)).collect();
        run.feed(&mut batch, 0);
    }
    let mut got: Vec<Vec<String>> = run.rows();
    got.sort();
    // Both sides' columns (k, v), then the record key no sink reads.
    let pair = |k: &str, v: &str| [k, v, k, v, "join"].map(String::from).to_vec();
    // (a, 1) twice on each side: 4 pairs; (a, 2) and (b, 1) with themselves.
    let mut want = vec![pair("a", "1"); 4];
    want.push(pair("a", "2"));
    want.push(pair("b", "1"));
    want.sort();
    assert_eq!(got, want);
    let sink = q.project(&run.written[0]).unwrap();
    let schema = sink.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "v", "bv"]);
}
