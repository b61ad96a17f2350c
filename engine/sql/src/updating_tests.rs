//! Updating aggregates without a runtime (issue 47): planning, the changes a flush
//! writes, the TTL, and the final state a consumer builds from the changelog against
//! DataFusion's batch `GROUP BY` over the same rows, with and without a crash in the
//! middle (a run that goes on after its last checkpoint, then a restore onto another
//! number of subtasks and a replay of the rows after the checkpoint).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::TimestampNanosecondArray;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::window_tests::{plan, text_rows};
use pubsub_engine_plan::window::{key_converter, split_by_group, Changes, WindowState};
use pubsub_engine_plan::{SelectPlan, WindowKind, WindowPlan};
use pubsub_engine_spi::changelog::{CREATE, DELETE, UPDATE};

const S: i64 = 1_000_000_000;

/// What a sink does with an updating aggregate's rows (the runtime's `sink_rows`, minus
/// the cast into the sink's columns): HAVING, then the select list.
fn sink_rows(
    after: &SelectPlan,
    window: &WindowPlan,
    batch: &RecordBatch,
    having: bool,
) -> anyhow::Result<(Vec<bool>, RecordBatch)> {
    let kept: Vec<bool> = match window.having.as_ref().filter(|_| having) {
        None => vec![true; batch.num_rows()],
        Some((f, _)) => {
            let v = f.evaluate(batch)?.into_array(batch.num_rows())?;
            let b = v.as_boolean();
            (0..b.len()).map(|i| b.is_valid(i) && b.value(i)).collect()
        }
    };
    let passing = arrow::compute::filter_record_batch(batch, &BooleanArray::from(kept.clone()))?;
    Ok((kept, after.evaluate(&passing)?))
}

/// Source rows `(page, v)`; the event time does not matter to an updating aggregate.
fn rows(r: &[(String, Option<i64>)]) -> RecordBatch {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(r.iter().map(|x| &x.0)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter(r.iter().map(|x| x.1)));
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        (0..r.len()).map(|i| i as i64 * S),
    ));
    RecordBatch::try_from_iter([("page", page), ("v", v), ("__event_time", ts)]).unwrap()
}

fn one(page: &str, v: i64) -> Vec<(String, Option<i64>)> {
    vec![(page.to_string(), Some(v))]
}

/// A change as text: op, then the cells of the new row, then those of the old row.
type Change = (String, Vec<String>, Vec<String>);

fn changes(c: &Changes, width: usize) -> Vec<Change> {
    text_rows(&c.batch)
        .into_iter()
        .map(|cells| {
            let op = cells[2 * width].clone();
            (
                op,
                cells[..width].to_vec(),
                cells[width..2 * width].to_vec(),
            )
        })
        .collect()
}

struct Updating {
    after: SelectPlan,
    window: Arc<WindowPlan>,
}

impl Updating {
    fn new(select: &str) -> Self {
        let (after, window) = plan(select).unwrap();
        Updating {
            after,
            window: Arc::new(window),
        }
    }

    fn with_kind(select: &str, kind: WindowKind) -> Self {
        let (after, window) = plan(select).unwrap();
        Updating {
            after,
            window: Arc::new(WindowPlan { kind, ..window }),
        }
    }

    fn state(&self) -> WindowState {
        WindowState::new(self.window.clone()).unwrap()
    }

    fn feed(&self, state: &mut WindowState, r: &[(String, Option<i64>)], now: i64) {
        let before = self.window.before.evaluate(&rows(r)).unwrap();
        state.update_at(&before, now).unwrap();
    }

    /// A flush at `now` (ms): when due, or with `force` whenever.
    fn flush_at(
        &self,
        state: &mut WindowState,
        now: i64,
        ids: bool,
        force: bool,
    ) -> Option<Changes> {
        let sink = self.after.schema.clone();
        let rows = |b: &RecordBatch, h| sink_rows(&self.after, &self.window, b, h);
        state.flush(now, &sink, ids, &rows, force).unwrap()
    }

    fn flush(&self, state: &mut WindowState) -> Vec<Change> {
        let width = self.after.schema.fields().len();
        self.flush_at(state, 0, false, true)
            .map(|c| changes(&c, width))
            .unwrap_or_default()
    }
}

fn c(op: &str, after: &[&str], before: &[&str]) -> Change {
    let cells = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
    (op.to_string(), cells(after), cells(before))
}

#[test]
fn an_aggregate_without_a_window_plans_as_updating_with_its_having_apart() {
    let u = Updating::new("SELECT page, count(*) AS n FROM src GROUP BY page HAVING count(*) > 1");
    assert_eq!(
        u.window.kind,
        WindowKind::Updating {
            interval: S,
            ttl: 24 * 3600 * S
        }
    );
    assert_eq!(u.window.window_at, None);
    assert!(u.window.having.is_some());
    assert!(u.after.filter.is_none());
    // Over the whole stream: one group, no key.
    let all = Updating::new("SELECT count(*) AS n FROM src");
    assert_eq!(all.window.keys, 0);
    assert_eq!(all.window.window_at, None);
}

#[test]
fn a_flush_writes_creates_and_updates_in_key_order_and_nothing_for_an_unchanged_group() {
    let u = Updating::new("SELECT page, max(v) AS hi, count(*) AS n FROM src GROUP BY page");
    let mut state = u.state();
    u.feed(&mut state, &[one("b", 2), one("a", 5)].concat(), 0);
    assert_eq!(
        u.flush(&mut state),
        vec![
            c(CREATE, &["a", "5", "1"], &["", "", ""]),
            c(CREATE, &["b", "2", "1"], &["", "", ""])
        ]
    );
    assert!(u.flush(&mut state).is_empty(), "nothing changed");
    u.feed(&mut state, &one("a", 3), 0);
    assert_eq!(
        u.flush(&mut state),
        vec![c(UPDATE, &["a", "5", "2"], &["a", "5", "1"])]
    );
    // A row that leaves the output as it was writes nothing.
    let u = Updating::new("SELECT page, max(v) AS hi FROM src GROUP BY page");
    let mut state = u.state();
    u.feed(&mut state, &one("a", 5), 0);
    assert_eq!(u.flush(&mut state).len(), 1);
    u.feed(&mut state, &one("a", 3), 0);
    assert!(u.flush(&mut state).is_empty());
}

#[test]
fn a_group_having_refuses_writes_a_delete_and_comes_back_as_a_create() {
    let u = Updating::new("SELECT page, sum(v) AS total FROM src GROUP BY page HAVING sum(v) > 0");
    let mut state = u.state();
    u.feed(&mut state, &one("a", 4), 0);
    assert_eq!(u.flush(&mut state), vec![c(CREATE, &["a", "4"], &["", ""])]);
    u.feed(&mut state, &one("a", -9), 0);
    assert_eq!(u.flush(&mut state), vec![c(DELETE, &["", ""], &["a", "4"])]);
    u.feed(&mut state, &one("a", 1), 0);
    assert!(
        u.flush(&mut state).is_empty(),
        "-4: still refused, nothing stands"
    );
    u.feed(&mut state, &one("a", 10), 0);
    assert_eq!(u.flush(&mut state), vec![c(CREATE, &["a", "6"], &["", ""])]);
}

const MS: i64 = 1_000_000;

#[test]
fn a_group_idle_for_the_ttl_is_forgotten_without_a_change_and_starts_again() {
    let u = Updating::with_kind(
        "SELECT page, count(*) AS n FROM src GROUP BY page",
        WindowKind::Updating {
            interval: 100 * MS,
            ttl: 10_000 * MS,
        },
    );
    let mut state = u.state();
    u.feed(&mut state, &one("a", 1), 0);
    assert_eq!(state.flush_due(0), Some((true, 0)), "never flushed");
    assert_eq!(
        u.flush_at(&mut state, 0, false, false)
            .unwrap()
            .batch
            .num_rows(),
        1
    );
    // Nothing changed: the next flush is the look for idle groups, a TTL on.
    assert_eq!(state.flush_due(50), Some((false, 10_000)));
    u.feed(&mut state, &one("b", 1), 5_000);
    assert_eq!(
        state.flush_due(5_000),
        Some((true, 100)),
        "overdue since 100"
    );
    assert_eq!(
        u.flush_at(&mut state, 5_000, false, false)
            .unwrap()
            .batch
            .num_rows(),
        1
    );
    let flushed = u.flush_at(&mut state, 12_000, false, false).unwrap();
    assert_eq!(flushed.evicted, 1, "a was last reached at 0");
    assert_eq!(flushed.batch.num_rows(), 0);
    assert_eq!(state.groups(), 1, "b was reached at 5,000");
    u.feed(&mut state, &one("a", 1), 13_000);
    let again = u.flush_at(&mut state, 13_000, false, false).unwrap();
    assert_eq!(changes(&again, 2), vec![c(CREATE, &["a", "1"], &["", ""])]);
}

#[test]
fn an_interval_longer_than_the_look_for_idle_groups_is_kept() {
    let u = Updating::with_kind(
        "SELECT page, count(*) AS n FROM src GROUP BY page",
        WindowKind::Updating {
            interval: 120_000 * MS,
            ttl: 24 * 3_600_000 * MS,
        },
    );
    let mut state = u.state();
    u.feed(&mut state, &one("a", 1), 0);
    assert!(u.flush_at(&mut state, 0, false, false).is_some());
    u.feed(&mut state, &one("a", 1), 1_000);
    // The look for idle groups is due at 60 s; the changes only at 120 s.
    assert_eq!(state.flush_due(60_000), Some((true, 60_000)));
    assert!(u.flush_at(&mut state, 60_000, false, false).is_none());
    assert_eq!(state.flush_due(60_001), Some((false, 120_000)));
    let c2 = u.flush_at(&mut state, 120_000, false, false).unwrap();
    assert_eq!(changes(&c2, 2), vec![c(UPDATE, &["a", "2"], &["a", "1"])]);
}

#[test]
fn after_a_restart_each_groups_next_flush_writes_its_row_even_if_unchanged() {
    let u = Updating::new("SELECT page, sum(v) AS total FROM src GROUP BY page HAVING sum(v) > 0");
    let mut state = u.state();
    u.feed(&mut state, &[one("a", 5), one("b", 5)].concat(), 0);
    assert_eq!(u.flush(&mut state).len(), 2);
    let snap = state.snapshot().unwrap();
    // The run went on after its checkpoint: a +3, and c appeared, then crashed.
    u.feed(&mut state, &[one("a", 3), one("c", 2)].concat(), 0);
    assert_eq!(u.flush(&mut state).len(), 2);
    // The replay takes a's +3 and -3 in one flush, and c's +2 and -2: unchanged for a,
    // and nothing for c, yet the consumer holds 8 for a and 2 for c.
    let replay = |restarted: bool| {
        let mut state = u.state();
        state.restore(&[snap.clone()], 0, 1).unwrap();
        state.start_run(1, restarted);
        u.feed(
            &mut state,
            &[one("a", 3), one("c", 2), one("a", -3), one("c", -2)].concat(),
            0,
        );
        (u.flush(&mut state), state)
    };
    let (written, mut state) = replay(true);
    assert_eq!(
        written,
        vec![
            c(UPDATE, &["a", "5"], &["a", "5"]),
            c(DELETE, &["", ""], &["c", "0"])
        ]
    );
    // Once written, a group is back to writing changes only.
    u.feed(&mut state, &one("a", 0), 0);
    assert!(u.flush(&mut state).is_empty());
    // After a clean stop nothing was written past the checkpoint: nothing is forced.
    assert!(replay(false).0.is_empty());
}

#[test]
fn no_two_changes_share_a_record_key_across_restarts_and_evictions() {
    let u = Updating::with_kind(
        "SELECT page, count(*) AS n FROM src GROUP BY page",
        WindowKind::Updating {
            interval: 100 * MS,
            ttl: 1_000 * MS,
        },
    );
    let keys = |state: &mut WindowState, now: i64| {
        u.flush_at(state, now, true, true)
            .unwrap()
            .record_keys
            .unwrap()
    };
    let mut state = u.state();
    state.start_run(7, false);
    u.feed(&mut state, &one("a", 1), 0);
    let first = keys(&mut state, 0);
    let snap = state.snapshot().unwrap();
    u.feed(&mut state, &one("a", 1), 0);
    let second = keys(&mut state, 0);
    // A restart from the checkpoint writes the same change (1 -> 2) under another key:
    // a consumer that drops copies by record id keeps it (the run before may have
    // written other changes since, which this one must replace).
    let mut restarted = u.state();
    restarted.restore(&[snap], 0, 1).unwrap();
    restarted.start_run(8, true);
    u.feed(&mut restarted, &one("a", 1), 0);
    let replayed = keys(&mut restarted, 0);
    assert_eq!(first.len() + second.len() + replayed.len(), 3);
    assert_ne!(replayed, second);
    assert_ne!(first, second);
    // A group forgotten for its TTL and made again writes its first change again, under
    // another key.
    let mut state = u.state();
    state.start_run(7, false);
    u.feed(&mut state, &one("a", 1), 0);
    let before = keys(&mut state, 0);
    assert!(u
        .flush_at(&mut state, 5_000, true, false)
        .is_some_and(|c| c.evicted == 1));
    u.feed(&mut state, &one("a", 1), 6_000);
    let after = keys(&mut state, 6_000);
    assert_eq!((before.len(), after.len()), (1, 1));
    assert_ne!(before, after);
}

/// Every aggregate, as the streaming and the batch query both compute them, with a
/// HAVING that a group passes and fails again as rows arrive.
const QUERY: &str = "SELECT page, count(*) AS n, count(v) AS nv, count(DISTINCT v) AS dv, sum(v) AS total, min(v) AS lo, max(v) AS hi, avg(v) AS mean, bool_and(v > 0) AS all_pos, bool_or(v > 0) AS any_pos FROM src GROUP BY page HAVING sum(v) > 0 OR sum(v) IS NULL";

/// A consumer of the changelog: the row standing for each group (by its first cell).
#[derive(Default)]
struct Consumer {
    rows: BTreeMap<String, Vec<String>>,
    /// Check that each change's old row is the one standing (no crash in between).
    strict: bool,
}

impl Consumer {
    fn apply(&mut self, changes: &[Change]) {
        for (op, after, before) in changes {
            let key = if op == DELETE { &before[0] } else { &after[0] };
            let standing = self.rows.get(key);
            if self.strict {
                match op.as_str() {
                    CREATE => assert_eq!(standing, None, "{key}: a create over a row"),
                    _ => assert_eq!(standing, Some(before), "{key}: old row of {op}"),
                }
            }
            match op.as_str() {
                DELETE => {
                    self.rows.remove(key);
                }
                _ => {
                    self.rows.insert(key.clone(), after.clone());
                }
            }
        }
    }
}

/// Streams `input` in batches of `per_batch` through `peers` subtasks (rows routed by
/// group key), flushing after every `flush_every` batches. With a crash `(cut, extra,
/// peers_after)`: a checkpoint after batch `cut`, the run goes on for `extra` batches
/// (its changes reach the consumer), then the job restarts from the checkpoint on
/// `peers_after` subtasks and replays every batch after `cut`.
fn stream(
    input: &[(String, Option<i64>)],
    per_batch: usize,
    flush_every: usize,
    peers: u64,
    crash: Option<(usize, usize, u64)>,
) -> BTreeMap<String, Vec<String>> {
    let u = Updating::new(QUERY);
    let converter = key_converter(&u.window).unwrap();
    let width = u.after.schema.fields().len();
    let mut consumer = Consumer {
        strict: crash.is_none(),
        ..Default::default()
    };
    let batches: Vec<&[(String, Option<i64>)]> = input.chunks(per_batch).collect();
    let mut states: Vec<WindowState> = (0..peers).map(|_| u.state()).collect();
    let flush_all = |states: &mut Vec<WindowState>, consumer: &mut Consumer| {
        for s in states.iter_mut() {
            if let Some(c) = u.flush_at(s, 0, true, true) {
                consumer.apply(&changes(&c, width));
            }
        }
    };
    let feed = |states: &mut Vec<WindowState>, b: &[(String, Option<i64>)]| {
        let before = u.window.before.evaluate(&rows(b)).unwrap();
        let n = states.len() as u64;
        for (t, part) in split_by_group(&u.window, &converter, &before, n).unwrap() {
            states[t as usize].update_at(&part, 0).unwrap();
        }
    };
    let mut i = 0;
    let mut checkpoint: Option<(usize, Vec<pubsub_engine_spi::OperatorState>)> = None;
    let mut crashed = false;
    while i < batches.len() {
        feed(&mut states, batches[i]);
        if (i + 1) % flush_every == 0 {
            flush_all(&mut states, &mut consumer);
        }
        if let Some((cut, extra, peers_after)) = crash {
            if i == cut && checkpoint.is_none() {
                let snaps = states.iter_mut().map(|s| s.snapshot().unwrap()).collect();
                checkpoint = Some((i, snaps));
            }
            if !crashed && (i == cut + extra || i + 1 == batches.len()) {
                if let Some((at, snaps)) = checkpoint.take() {
                    crashed = true;
                    states = (0..peers_after)
                        .map(|t| {
                            let mut s = u.state();
                            s.restore(&snaps, t, peers_after).unwrap();
                            s.start_run(100 + t, true);
                            s
                        })
                        .collect();
                    i = at + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    flush_all(&mut states, &mut consumer);
    consumer.rows
}

/// What DataFusion's batch SQL computes with [`QUERY`] over `input`, by group.
fn batch_sql(input: &[(String, Option<i64>)]) -> BTreeMap<String, Vec<String>> {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(input.iter().map(|r| &r.0)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter(input.iter().map(|r| r.1)));
    let src = RecordBatch::try_from_iter([("page", page), ("v", v)]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("src", src).unwrap();
        ctx.sql(QUERY).await.unwrap().collect().await.unwrap()
    });
    out.iter()
        .flat_map(text_rows)
        .map(|r| (r[0].clone(), r))
        .collect()
}

fn input_of(raw: &[(u8, Option<i64>)]) -> Vec<(String, Option<i64>)> {
    raw.iter().map(|(p, v)| (format!("p{p}"), *v)).collect()
}

#[test]
fn a_run_with_a_crash_and_a_rescale_ends_in_the_batch_sqls_state() {
    let raw: Vec<(u8, Option<i64>)> = (0..120)
        .map(|i: i64| {
            let page = i % 5;
            // Pages 0, 3 and 4 end above zero, 1 and 2 below; each crosses on the way.
            let lean = if page == 0 { 0 } else { page - 2 };
            (page as u8, (i % 9 != 0).then_some((i * 7) % 13 - 6 + lean))
        })
        .collect();
    let input = input_of(&raw);
    let want = batch_sql(&input);
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(stream(&input, 4, 2, 1, None), want);
    assert_eq!(stream(&input, 4, 2, 2, Some((5, 6, 3))), want);
    assert_eq!(stream(&input, 3, 1, 3, Some((10, 4, 1))), want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_changelogs_final_state_equals_datafusions_batch_group_by(
        raw in prop::collection::vec((0u8..5, prop::option::weighted(0.9, -20i64..20)), 1..120),
        per_batch in 1usize..10,
        flush_every in 1usize..4,
        peers in 1u64..4,
        crash in prop::option::of((0usize..12, 0usize..6, 1u64..4)),
    ) {
        let input = input_of(&raw);
        prop_assert_eq!(stream(&input, per_batch, flush_every, peers, crash), batch_sql(&input));
    }
}

/// Plans `insert` over `src (page TEXT, v BIGINT)` into `out`, declared by `out`.
fn plan_into(out: &str, insert: &str) -> Result<pubsub_engine_plan::PlannedPipeline, String> {
    let sql = super::parse_pipeline(&format!(
        "CREATE TABLE src (page TEXT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source');
{out};
{insert}"
    ))
    .map_err(|e| e.0)?;
    let connectors: Vec<Arc<dyn pubsub_engine_spi::ErasedConnector>> =
        vec![Arc::new(crate::test_mem::Mem)];
    super::plan_pipeline(&sql, &connectors).map_err(|e| e.0)
}

#[test]
fn an_updating_query_into_a_table_that_is_not_a_changelog_is_refused_with_the_way_on() {
    let e = plan_into(
        "CREATE TABLE out (page TEXT, n BIGINT) WITH ('connector' = 'mem', 'role' = 'sink')",
        "INSERT INTO out SELECT page, count(*) FROM src GROUP BY page",
    )
    .err()
    .unwrap();
    assert!(
        e.contains("an aggregate without a window is an updating aggregate")
            && e.contains(
                "table 'out' has format 'json': declare it with 'format' = 'debezium_json'"
            )
            && e.contains("(line 3, column 30)"),
        "{e}"
    );
    let p = plan_into(
        "CREATE TABLE out (page TEXT, n BIGINT) WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json', 'changelog.flush-interval' = '250ms', 'changelog.state-ttl' = '1h')",
        "INSERT INTO out SELECT page, count(*) FROM src GROUP BY page",
    )
    .unwrap();
    let q = &p.queries[0];
    assert!(q.is_updating());
    assert_eq!(
        q.window.as_ref().unwrap().kind,
        WindowKind::Updating {
            interval: S / 4,
            ttl: 3600 * S
        }
    );
}

#[test]
fn changelog_options_name_their_key_and_value_when_refused() {
    let refused = |with: &str, needle: &str| {
        let e = plan_into(
            &format!("CREATE TABLE out (page TEXT, n BIGINT) WITH ('connector' = 'mem', 'role' = 'sink'{with})"),
            "INSERT INTO out SELECT page, v FROM src",
        )
        .err()
        .unwrap();
        assert!(e.contains(needle), "{with}: {e}");
    };
    refused(
        ", 'changelog.flush-interval' = '1s'",
        "option 'changelog.flush-interval' applies to format 'debezium_json' only (a changelog), was '1s'",
    );
    refused(
        ", 'format' = 'debezium_json', 'changelog.state-ttl' = 'soon'",
        "changelog.state-ttl",
    );
    refused(
        ", 'format' = 'debezium_json', 'changelog.flush-interval' = '0s'",
        "option 'changelog.flush-interval' is invalid: must be at least 1 ms, was '0s'",
    );
    refused(
        ", 'format' = 'debezium'",
        "must be json, raw_string, raw_bytes, avro or debezium_json, was 'debezium'",
    );
    let e = super::parse_pipeline(
        "CREATE TABLE src (page TEXT) WITH ('connector' = 'mem', 'role' = 'source', 'format' = 'debezium_json');
CREATE TABLE out (page TEXT) WITH ('connector' = 'mem', 'role' = 'sink');
INSERT INTO out SELECT page FROM src",
    )
    .ok()
    .and_then(|sql| {
        let connectors: Vec<Arc<dyn pubsub_engine_spi::ErasedConnector>> =
            vec![Arc::new(crate::test_mem::Mem)];
        super::plan_pipeline(&sql, &connectors).err()
    })
    .unwrap()
    .0;
    assert!(
        e.contains("a changelog source (format 'debezium_json') needs a primary key"),
        "{e}"
    );
}

#[test]
fn an_ordering_key_of_the_group_key_alone_is_taken_and_any_other_refused() {
    let out = "CREATE TABLE out (page TEXT, n BIGINT, ok TEXT) WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json', 'key' = 'ok')";
    plan_into(
        out,
        "INSERT INTO out SELECT page, count(*), upper(page) FROM src GROUP BY page",
    )
    .unwrap();
    let e = plan_into(
        out,
        "INSERT INTO out SELECT page, count(*) AS n, CAST(count(*) AS TEXT) AS k FROM src GROUP BY page",
    )
    .err()
    .unwrap();
    assert!(
        e.contains("when the ordering key is made of its GROUP BY columns alone"),
        "{e}"
    );
}
