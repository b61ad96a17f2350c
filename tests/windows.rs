//! Windowed aggregates against the emulator (issue 32, items 3, 5, 6 and 8): seeded random
//! events, out of order within the table's bound, on several keys, windowed by event time
//! from an attribute. The rows written equal a plain GROUP BY over the window buckets (for
//! SESSION windows, a sessionization of each page's events), computed here from the events
//! published (the oracle), also when the windows open in
//! one run and fire in the next on another number of workers, and after a SIGKILL.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pubsub_connector_core::{admin, client};
use rand::{Rng, SeedableRng};

use crate::support::*;

const MS: i64 = 1_000;

/// One event: (page, v, event time in ms since the epoch).
pub(crate) type Event = (String, i64, i64);

/// `n` events on 5 pages, 100 ms apart from `base_ms`, each moved by up to 2 s either way
/// (less than the table's 5 s bound, so none is late: every event is within 4 s of the
/// newest published before it).
fn events(seed: u64, n: usize, base_ms: i64) -> Vec<Event> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let page = format!("p{}", rng.random_range(0..5));
            let v = rng.random_range(-1_000..1_000);
            let t = base_ms + i as i64 * 100 + rng.random_range(-2_000..=2_000);
            (page, v, t)
        })
        .collect()
}

/// A window row: (window start ms, window end ms, page) -> (n, total, lo, hi).
type Windows = BTreeMap<(i64, i64, String), (i64, i64, i64, i64)>;

/// The oracle: `GROUP BY` the 10 s bucket and page, over every event.
fn oracle(events: &[Event]) -> Windows {
    let mut out = Windows::new();
    for (page, v, t) in events {
        let start = t.div_euclid(10 * MS) * 10 * MS;
        let e = out
            .entry((start, start + 10 * MS, page.clone()))
            .or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 += v;
        e.2 = e.2.min(*v);
        e.3 = e.3.max(*v);
    }
    out
}

pub(crate) async fn publish(topic: &str, events: &[Event]) {
    use google_cloud_pubsub::model::Message;
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, topic))
        .unwrap()
        .build()
        .await
        .unwrap();
    // One at a time: concurrent batches may reach the service in any order, which would
    // put events further out of order than the table's bound (and so late).
    for (page, v, t) in events {
        let data = format!("{{\"page\": \"{page}\", \"v\": {v}}}").into_bytes();
        let attributes = HashMap::from([("ts".to_string(), t.to_string())]);
        publisher
            .publish(Message::new().set_data(data).set_attributes(attributes))
            .await
            .unwrap();
    }
}

const TUMBLE: &str = "TUMBLE(INTERVAL '10' SECOND)";

/// The pipeline: per page and `window` (its SQL), count, sum, min and max of `v`.
fn sql(t: &Topics, window: &str) -> String {
    sql_bound(t, window, "5s")
}

/// [`sql`] with out-of-orderness `bound`.
fn sql_bound(t: &Topics, window: &str, bound: &str) -> String {
    format!(
        "CREATE TABLE clicks (page TEXT, v BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'scan.event-time.attribute' = 'ts',
            'scan.watermark.out-of-orderness' = '{bound}', 'scan.watermark.idle-timeout' = '1s');
         CREATE TABLE per_page (ws TIMESTAMP, we TIMESTAMP, page TEXT, n BIGINT, total BIGINT,
            lo BIGINT, hi BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO per_page
         SELECT window.start, window.end, page, n, total, lo, hi FROM (
            SELECT {window} AS window, page, count(*) AS n, sum(v) AS total,
                   min(v) AS lo, max(v) AS hi
            FROM clicks GROUP BY window, page);",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    )
}

/// The rows on `sub` (every copy), parsed.
async fn written(sub: &str, expected: usize) -> Vec<((i64, i64, String), (i64, i64, i64, i64))> {
    let msgs = admin::drain_messages(&profile(), sub, 1, Some(expected), Duration::from_secs(5))
        .await
        .unwrap();
    let ms = |v: &serde_json::Value| -> i64 {
        let s = v.as_str().expect("a timestamp is text");
        pubsub_engine_format::parse_rfc3339(s).unwrap() / 1_000_000
    };
    msgs.iter()
        .map(|m| {
            let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            let i = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}"));
            (
                (
                    ms(&r["ws"]),
                    ms(&r["we"]),
                    r["page"].as_str().unwrap().to_string(),
                ),
                (i("n"), i("total"), i("lo"), i("hi")),
            )
        })
        .collect()
}

/// The window rows written at least once: a row written again must have the same values.
fn distinct(rows: Vec<((i64, i64, String), (i64, i64, i64, i64))>) -> Windows {
    let mut seen = Windows::new();
    for (k, v) in rows {
        if let Some(before) = seen.insert(k.clone(), v) {
            assert_eq!(before, v, "{k:?} was written twice with different values");
        }
    }
    seen
}

pub(crate) const BASE_MS: i64 = 1_796_342_400_000; // 2026-12-04T00:00:00Z

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_equal_a_batch_group_by_and_open_ones_fire_in_the_next_run_on_other_workers() {
    let t = topics("windows", 10).await;
    let events = events(32, 600, BASE_MS);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    open_then_drained(&Workdir::new(&sql(&t, TUMBLE)), &t, &expected).await;
}

/// Session windows (per page, closing 1 s after a page's last event) equal the sessions
/// computed here over the same events, also across a restore onto another number of
/// workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_equal_a_batch_sessionization_and_continue_in_the_next_run() {
    let t = topics("sessions", 10).await;
    let events = events(33, 600, BASE_MS);
    let expected = sessions(&events, 1_000);
    assert!(
        expected.len() > 20 && expected.values().any(|v| v.0 > 3),
        "the events make long and short sessions: {expected:?}"
    );
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql(&t, "SESSION(INTERVAL '1' SECOND)"));
    open_then_drained(&w, &t, &expected).await;
}

/// The oracle for session windows: per page, events by time, a new session where the
/// next event is `gap_ms` or more after the last.
fn sessions(events: &[Event], gap_ms: i64) -> Windows {
    let mut by_page: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for (page, v, t) in events {
        by_page.entry(page).or_default().push((*t, *v));
    }
    let mut out = Windows::new();
    for (page, mut rows) in by_page {
        rows.sort();
        let mut open: Option<(i64, i64, (i64, i64, i64, i64))> = None;
        for (t, v) in rows {
            match open.as_mut() {
                Some((_, end, agg)) if t < *end => {
                    *end = t + gap_ms;
                    *agg = (agg.0 + 1, agg.1 + v, agg.2.min(v), agg.3.max(v));
                }
                _ => {
                    if let Some((s, e, agg)) = open.take() {
                        out.insert((s, e, page.to_string()), agg);
                    }
                    open = Some((t, t + gap_ms, (1, v, v, v)));
                }
            }
        }
        if let Some((s, e, agg)) = open {
            out.insert((s, e, page.to_string()), agg);
        }
    }
    out
}

/// Run 1 on two workers, not drained: the windows the watermark passed fire, the last
/// ones (within 5 s of the newest event) stay open in the final checkpoint. Run 2 on one
/// worker (the state is redistributed), drained: the rest fire. Together: `expected`,
/// each window once.
async fn open_then_drained(w: &Workdir, t: &Topics, expected: &Windows) {
    let first = w
        .run_ok(&[
            "--workers",
            "2",
            "--checkpoint-interval",
            "500ms",
            "--stop-when-idle",
            "3s",
        ])
        .await;
    let fired = summary_count(&first, "rows written:");
    assert!(
        fired > 0 && fired < expected.len(),
        "{fired} of {}: {first}",
        expected.len()
    );
    assert!(!first.contains("rows late"), "{first}");
    let second = w
        .run_ok(&[
            "--workers",
            "1",
            "--checkpoint-interval",
            "500ms",
            "--stop-when-idle",
            "2s",
            "--drain",
        ])
        .await;
    assert_eq!(
        summary_count(&second, "rows written:"),
        expected.len() - fired,
        "{second}"
    );
    assert!(
        second.contains("watermark: end of input (drained)"),
        "{second}"
    );
    let got = written(&t.output_sub, expected.len()).await;
    assert_eq!(got.len(), expected.len(), "each window once");
    let got: Windows = got.into_iter().collect();
    assert_eq!(&got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_every_window_writes_the_same_values() {
    let t = topics("windows-kill", 10).await;
    let events = events(7, 3_000, BASE_MS);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql(&t, TUMBLE));
    let child = w.spawn(&["--workers", "2", "--checkpoint-interval", "300ms"]);
    wait_until("a checkpoint", Duration::from_secs(60), || {
        w.checkpoint_epoch().is_some_and(|e| e >= 3)
    })
    .await;
    signal(&child, "KILL");
    let _ = finish(child, Duration::from_secs(30)).await;
    let child = w.spawn(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "15s",
        "--drain",
    ]);
    let (code, out, err) = finish(child, Duration::from_secs(180)).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("rows late"), "{out}");
    // At least once at the sink: a window fired before the kill and not yet checkpointed
    // fires again, with the same values.
    assert_eq!(
        distinct(written(&t.output_sub, expected.len()).await),
        expected
    );
}

/// Open windows over `--max-window-state-bytes` fail the job (exit 2: a restore brings
/// the same state back) naming the flag; nothing is lost: the next run with room writes
/// every window, with the values the oracle gives. The failed run's messages come back
/// in whatever order the service redelivers them, so the bound is longer than the test:
/// no row can be late, and every window fires at the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_state_limit_fails_the_job_naming_the_flag_and_loses_nothing() {
    let t = topics("windows-limit", 10).await;
    let events = events(34, 300, BASE_MS);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql_bound(&t, TUMBLE, "10m"));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "300ms",
        "--max-window-state-bytes",
        "600",
        "--stop-when-idle",
        "5s",
    ]);
    let (code, _, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("over the limit of 600 (max_window_state_bytes, `--max-window-state-bytes`)"),
        "{err}"
    );
    let out = w
        .run_ok(&["--workers", "2", "--stop-when-idle", "3s", "--drain"])
        .await;
    assert!(!out.contains("rows late"), "{out}");
    assert_eq!(
        distinct(written(&t.output_sub, expected.len()).await),
        expected
    );
}

/// Issue 47, item 3, in a window's output: aggregates (BIGINT) into INT columns are
/// checked conversions. Every window whose values fit is written exactly (the oracle);
/// a sum that does not fit INT fails the job (exit 2: a window row has no message to set
/// aside), naming the value and the column, never wrapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_aggregate_into_narrower_columns_is_checked() {
    let narrow = |sql: String| {
        let narrowed = sql
            .replace("n BIGINT, total BIGINT,", "n INT, total INT,")
            .replace("lo BIGINT, hi BIGINT)", "lo INT, hi INT)");
        assert_eq!(narrowed.matches(" INT,").count(), 3, "{narrowed}");
        narrowed
    };
    let t = topics("windows-narrow", 10).await;
    let events = events(47, 200, BASE_MS);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&narrow(sql_bound(&t, TUMBLE, "10m")));
    let out = w
        .run_ok(&["--workers", "1", "--stop-when-idle", "3s", "--drain"])
        .await;
    assert!(!out.contains("rows late"), "{out}");
    assert_eq!(
        distinct(written(&t.output_sub, expected.len()).await),
        expected
    );

    let t = topics("windows-narrow-over", 10).await;
    let big = 2_000_000_000;
    let events: Vec<Event> = vec![
        ("p0".into(), big, BASE_MS + 100),
        ("p0".into(), big, BASE_MS + 200),
        ("p1".into(), 1, BASE_MS + 300),
    ];
    publish(&t.input, &events).await;
    let w = Workdir::new(&narrow(sql_bound(&t, TUMBLE, "10m")));
    let child = w.spawn(&["--workers", "1", "--stop-when-idle", "3s", "--drain"]);
    let (code, _, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("4000000000 does not fit column 'total' of table 'per_page' (INT: -2147483648 to 2147483647)"),
        "{err}"
    );
}

/// On a cluster of two processes (one worker each, under the `cluster` supervisor) the
/// windows equal the oracle after process 1 is SIGKILLed and the cluster restarts from
/// its last checkpoint: group keys and watermarks cross the processes, and the window
/// state of both is in the checkpoint and restored. The bound is longer than the test,
/// so however the killed run's messages come back none is late, and every window fires
/// at the drain, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_write_the_windows_after_one_is_sigkilled() {
    let t = topics("windows-cluster", 10).await;
    let events = events(35, 2_000, BASE_MS);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql_bound(&t, TUMBLE, "10m"));
    let (stdout, stderr) = crate::cluster::run_killing_process_1(&w, &["--drain"]).await;
    assert!(
        !stderr.contains("rows late") && !stdout.contains("rows late"),
        "{stdout}\n{stderr}"
    );
    let got = written(&t.output_sub, expected.len()).await;
    assert_eq!(got.len(), expected.len(), "each window once");
    let got: Windows = got.into_iter().collect();
    assert_eq!(got, expected);
}

/// A memory table (`CREATE TABLE` without `WITH`, issue: Arroyo's memory tables) written
/// by one INSERT and read by another, the reader first in the file, writes what the same
/// pipeline written with a view writes: the oracle's windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_table_writes_what_the_same_view_writes() {
    const AGGREGATE: &str = "SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS n, sum(v) AS total, min(v) AS lo, max(v) AS hi FROM clicks GROUP BY window, page";
    let memory = format!(
        "CREATE TABLE counted (ws TIMESTAMP, we TIMESTAMP, page TEXT, n BIGINT, total BIGINT,
            lo BIGINT, hi BIGINT);
         INSERT INTO per_page SELECT ws, we, page, n, total, lo, hi FROM counted;
         INSERT INTO counted
         SELECT window.start, window.end, page, n, total, lo, hi FROM ({AGGREGATE});"
    );
    let view = format!(
        "CREATE VIEW counted AS
         SELECT window.start AS ws, window.end AS we, page, n, total, lo, hi FROM ({AGGREGATE});
         INSERT INTO per_page SELECT ws, we, page, n, total, lo, hi FROM counted;"
    );
    let events = events(53, 150, BASE_MS);
    let expected = oracle(&events);
    let mut got = Vec::new();
    for (name, statements) in [("windows-memory", &memory), ("windows-memory-view", &view)] {
        let t = topics(name, 10).await;
        publish(&t.input, &events).await;
        let tables = sql_bound(&t, TUMBLE, "10m");
        let tables = &tables[..tables.find("INSERT INTO per_page").unwrap()];
        let w = Workdir::new(&format!("{tables}{statements}"));
        let out = w
            .run_ok(&["--workers", "1", "--stop-when-idle", "3s", "--drain"])
            .await;
        assert!(!out.contains("rows late"), "{out}");
        got.push(distinct(written(&t.output_sub, expected.len()).await));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(got[0], expected);
}

/// Top-N per window (issue 48, part 2): on two processes, one SIGKILLed, the two pages
/// with the most events of each window, ranked by `ROW_NUMBER`, ties broken by page,
/// equal the oracle's windows ranked the same way; every row is written once per window
/// (a repeated row has the same values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_per_window_on_two_processes_after_one_is_sigkilled() {
    let t = topics("windows-top-n", 10).await;
    let events = events(48, 1_500, BASE_MS);
    let mut by_window: BTreeMap<(i64, i64), Vec<(String, (i64, i64, i64, i64))>> = BTreeMap::new();
    for ((ws, we, page), v) in oracle(&events) {
        by_window.entry((ws, we)).or_default().push((page, v));
    }
    let mut expected = Windows::new();
    for ((ws, we), mut rows) in by_window {
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        for (k, (page, (n, total, _, hi))) in rows.into_iter().take(2).enumerate() {
            expected.insert((ws, we, page), (n, total, k as i64 + 1, hi));
        }
    }
    publish(&t.input, &events).await;
    let tables = sql_bound(&t, TUMBLE, "10m");
    let tables = &tables[..tables.find("INSERT INTO per_page").unwrap()];
    let w = Workdir::new(&format!(
        "{tables}
         INSERT INTO per_page
         SELECT window.start, window.end, page, n, total, CAST(row_num AS BIGINT), hi FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY n DESC) AS row_num
            FROM (SELECT {TUMBLE} AS window, page, count(*) AS n, sum(v) AS total,
                         max(v) AS hi
                  FROM clicks GROUP BY window, page)
         ) WHERE row_num <= 2;"
    ));
    let (stdout, stderr) = crate::cluster::run_killing_process_1(&w, &["--drain"]).await;
    assert!(
        !stderr.contains("rows late") && !stdout.contains("rows late"),
        "{stdout}\n{stderr}"
    );
    let got = distinct(written(&t.output_sub, expected.len()).await);
    assert_eq!(got, expected);
}

/// `examples/top_n.sql`, as the docs run it, on 3,000 of the quickstart's bids: each
/// window's top auctions are ranked by bids and every bid was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_top_n_example_runs_on_the_quickstart_data() {
    let stdout = run_example("top_n.sql").await;
    assert!(
        stdout.contains("quickstart ok: each window's top auctions are ranked by bids"),
        "{stdout}"
    );
}
