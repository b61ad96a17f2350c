//! Windowed joins against the emulator (issue 48, part 1): seeded random events on two
//! topics, out of order within the tables' bound, on keys that overlap only in part,
//! windowed by event time from an attribute. On a two-process cluster one of whose
//! processes is SIGKILLed, a FULL JOIN of the two windowed aggregates writes each
//! (window, key) once with the values a join of the oracle's two GROUP BYs gives.

use std::collections::BTreeMap;
use std::time::Duration;

use pubsub_connector_core::admin;
use rand::{Rng, SeedableRng};

use crate::support::*;
use crate::windows::{publish, Event, BASE_MS};

/// `n` events on `pages`, 100 ms apart from `base_ms`, each moved by up to 2 s.
fn events(seed: u64, n: usize, pages: std::ops::Range<u32>, base_ms: i64) -> Vec<Event> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let page = format!("p{}", rng.random_range(pages.clone()));
            let v = rng.random_range(-1_000..1_000);
            let t = base_ms + i as i64 * 100 + rng.random_range(-2_000..=2_000);
            (page, v, t)
        })
        .collect()
}

/// (window start ms, page) -> (count, sum of v).
type Side = BTreeMap<(i64, String), (i64, i64)>;

fn per_window(events: &[Event]) -> Side {
    let mut out = Side::new();
    for (page, v, t) in events {
        let e = out
            .entry((t.div_euclid(10_000) * 10_000, page.clone()))
            .or_default();
        e.0 += 1;
        e.1 += v;
    }
    out
}

/// A joined row: (window start ms, page) -> (clicks, clicks' total, views).
type Joined = BTreeMap<(i64, String), (Option<i64>, Option<i64>, Option<i64>)>;

/// The oracle: a full outer join of the two GROUP BYs on window and page.
fn full_join(clicks: &Side, views: &Side) -> Joined {
    let mut out = Joined::new();
    for (k, (n, total)) in clicks {
        out.insert(k.clone(), (Some(*n), Some(*total), None));
    }
    for (k, (m, _)) in views {
        out.entry(k.clone()).or_insert((None, None, None)).2 = Some(*m);
    }
    out
}

fn table(name: &str, sub: &str) -> String {
    format!(
        "CREATE TABLE {name} (page TEXT, v BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'scan.event-time.attribute' = 'ts',
            'scan.watermark.out-of-orderness' = '10m', 'scan.watermark.idle-timeout' = '1s');",
        e = endpoint()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_join_of_two_windowed_aggregates_on_two_processes_after_one_is_sigkilled() {
    let clicks_t = topics("join-clicks", 10).await;
    let views_t = topics("join-views", 10).await;
    // Pages p0..p5 and p3..p8, over windows that overlap in part: some (window, page)
    // pairs are on one side only.
    let clicks = events(48, 1_500, 0..6, BASE_MS);
    let views = events(49, 1_000, 3..9, BASE_MS + 40_000);
    let expected = full_join(&per_window(&clicks), &per_window(&views));
    publish(&clicks_t.input, &clicks).await;
    publish(&views_t.input, &views).await;
    let w = Workdir::new(&format!(
        "{}\n{}\n
         CREATE TABLE joined (ws TIMESTAMP, page TEXT, clicks BIGINT, total BIGINT, views BIGINT)
         WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
               'emulator-endpoint' = '{e}');
         INSERT INTO joined
         SELECT coalesce(c.window.start, v.window.start), coalesce(c.page, v.page),
                c.n, c.total, v.m
         FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS n,
                      sum(v) AS total FROM clicks GROUP BY window, page) c
         FULL JOIN (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS m
                    FROM views GROUP BY window, page) v
         ON c.window = v.window AND c.page = v.page;",
        table("clicks", &clicks_t.input_sub),
        table("views", &views_t.input_sub),
        out = clicks_t.output,
        e = endpoint()
    ));
    let (stdout, stderr) = crate::cluster::run_killing_process_1(&w, &["--drain"]).await;
    assert!(
        !stderr.contains("rows late") && !stdout.contains("rows late"),
        "{stdout}\n{stderr}"
    );
    let msgs = admin::drain_messages(
        &profile(),
        &clicks_t.output_sub,
        1,
        Some(expected.len()),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let mut got = Joined::new();
    for m in &msgs {
        let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        let ws =
            pubsub_engine_format::parse_rfc3339(r["ws"].as_str().unwrap()).unwrap() / 1_000_000;
        let key = (ws, r["page"].as_str().unwrap().to_string());
        let row = (
            r["clicks"].as_i64(),
            r["total"].as_i64(),
            r["views"].as_i64(),
        );
        assert!(
            got.insert(key.clone(), row).is_none(),
            "{key:?} written twice"
        );
    }
    assert_eq!(got, expected);
    // Both sides' windows were in the checkpoint: every input was acknowledged.
    for sub in [&clicks_t.input_sub, &views_t.input_sub] {
        let left = admin::drain(&profile(), sub, 2, None, Duration::from_secs(3))
            .await
            .unwrap();
        assert!(left.is_empty(), "{} messages left on {sub}", left.len());
    }
}

/// `examples/join.sql`, as the docs run it: each auction's bids per window beside its
/// high bids, every bid counted in one window and acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_join_example_runs_on_the_quickstart_data() {
    let stdout = run_example("join.sql").await;
    assert!(
        stdout.contains("quickstart ok: every bid was counted in exactly one window"),
        "{stdout}"
    );
}

/// An updating join (decision 0056) of the two topics' rows on page, each row kept for
/// the changelog's 3 s TTL of event time, into a `debezium_json` topic, on a two-process
/// cluster one of whose processes is SIGKILLed: every pair of rows on one page at most
/// 3 s apart is written as a create, and a pair written again (a replay) carries the same
/// record id, so a reader that drops repeated ids sees each pair exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updating_join_writes_each_pair_within_the_ttl_once_by_record_id_after_a_sigkill() {
    let clicks_t = topics("join-rows-clicks", 10).await;
    let views_t = topics("join-rows-views", 10).await;
    // Each event's value is its own (clicks 0.., views 100000..): a joined row names its
    // two events.
    let unique = |events: Vec<Event>, from: i64| -> Vec<Event> {
        let numbered = events.into_iter().enumerate();
        numbered
            .map(|(i, (p, _, t))| (p, from + i as i64, t))
            .collect()
    };
    let clicks = unique(events(56, 1_500, 0..6, BASE_MS), 0);
    let views = unique(events(57, 1_000, 3..9, BASE_MS + 40_000), 100_000);
    let mut expected: Vec<(String, i64, i64)> = Vec::new();
    for (page, c, tc) in &clicks {
        for (vpage, v, tv) in &views {
            if page == vpage && (tc - tv).abs() <= 3_000 {
                expected.push((page.clone(), *c, *v));
            }
        }
    }
    expected.sort();
    assert!(expected.len() > 1_000, "{} pairs", expected.len());
    publish(&clicks_t.input, &clicks).await;
    publish(&views_t.input, &views).await;
    let w = Workdir::new(&format!(
        "{}\n{}\n
         CREATE TABLE pairs WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
               'topic' = '{out}', 'emulator-endpoint' = '{e}', 'format' = 'debezium_json',
               'changelog.state-ttl' = '3s', 'sink.record-id-attribute' = 'rid');
         INSERT INTO pairs
         SELECT c.page, c.v AS click, v.v AS view
         FROM clicks c JOIN views v ON c.page = v.page;",
        table("clicks", &clicks_t.input_sub),
        table("views", &views_t.input_sub),
        out = clicks_t.output,
        e = endpoint()
    ));
    let (stdout, stderr) = crate::cluster::run_killing_process_1(&w, &["--drain"]).await;
    assert!(
        !stderr.contains("rows late") && !stdout.contains("rows late"),
        "{stdout}\n{stderr}"
    );
    let msgs = admin::drain_messages(
        &profile(),
        &clicks_t.output_sub,
        2,
        None,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let mut by_id: BTreeMap<String, (String, i64, i64)> = BTreeMap::new();
    for m in &msgs {
        let change: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        assert_eq!(change["op"], "c", "{change}");
        assert!(change["before"].is_null(), "{change}");
        let r = &change["after"];
        let row = (
            r["page"].as_str().unwrap().to_string(),
            r["click"].as_i64().unwrap(),
            r["view"].as_i64().unwrap(),
        );
        let rid = m.attributes.get("rid").expect("a record id").clone();
        if let Some(before) = by_id.insert(rid.clone(), row.clone()) {
            assert_eq!(before, row, "record id {rid} was written with two rows");
        }
    }
    let mut got: Vec<(String, i64, i64)> = by_id.into_values().collect();
    got.sort();
    let missing: Vec<_> = expected
        .iter()
        .filter(|r| got.binary_search(r).is_err())
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} pairs, missing e.g. {missing:?}",
        got.len(),
        expected.len()
    );
    assert_eq!(got, expected, "each pair once by record id, and no other");
    for sub in [&clicks_t.input_sub, &views_t.input_sub] {
        let left = admin::drain(&profile(), sub, 2, None, Duration::from_secs(3))
            .await
            .unwrap();
        assert!(left.is_empty(), "{} messages left on {sub}", left.len());
    }
}

/// Rows `{"k": "k{t % 10}", "n": t, "ts": 2026-12-04T00:00:00Z + t s}` for t in `from..to`.
fn seconds(from: usize, to: usize) -> Vec<Vec<u8>> {
    (from..to)
        .map(|t| {
            let ts = format!(
                "2026-12-04T{:02}:{:02}:{:02}Z",
                t / 3600,
                t / 60 % 60,
                t % 60
            );
            format!("{{\"k\": \"k{}\", \"n\": {t}, \"ts\": \"{ts}\"}}", t % 10).into_bytes()
        })
        .collect()
}

/// Runs an updating join of a backlog (`slow`: event times 0..300 s, read at 50 messages
/// a second) beside a live topic 200 s ahead (`fast`: 200..500 s, all published at once),
/// each row kept for 5 s of event time, under a state limit of 20,000 bytes; with
/// `aligned`, both tables in one watermark alignment group (10 s drift). Returns the exit
/// code, stdout, stderr and the pairs written (slow n, fast n).
async fn backlog_beside_live(aligned: bool) -> (i32, String, String, Vec<(i64, i64)>) {
    let name = if aligned {
        "join-aligned"
    } else {
        "join-unaligned"
    };
    let slow = topics(&format!("{name}-slow"), 10).await;
    let fast = topics(&format!("{name}-fast"), 10).await;
    admin::publish_all(&profile(), &slow.input, seconds(0, 300), 2000)
        .await
        .unwrap();
    admin::publish_all(&profile(), &fast.input, seconds(200, 500), 2000)
        .await
        .unwrap();
    let align = match aligned {
        true => ", 'scan.watermark.alignment.group' = 'g', 'scan.watermark.alignment.max-drift' = '10s', 'scan.watermark.alignment.update-interval' = '100ms'",
        false => "",
    };
    let table = |name: &str, sub: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (k TEXT, n BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
                'emulator-endpoint' = '{e}', 'scan.watermark.idle-timeout' = '3s'{align}{extra});\n",
            e = endpoint()
        )
    };
    let w = Workdir::new(&format!(
        "{}{}CREATE TABLE pairs WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
               'topic' = '{out}', 'emulator-endpoint' = '{e}', 'format' = 'debezium_json',
               'changelog.state-ttl' = '5s');
         INSERT INTO pairs SELECT s.n AS slow_n, f.n AS fast_n
         FROM slow s JOIN fast f ON s.k = f.k;",
        table(
            "slow",
            &slow.input_sub,
            ", 'scan.rate-limit.messages-per-second' = '50'"
        ),
        table("fast", &fast.input_sub, ""),
        out = slow.output,
        e = endpoint()
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "500ms",
        "--stop-when-idle",
        "5s",
        "--max-window-state-bytes",
        "20000",
    ]);
    let (code, out, err) = finish(child, Duration::from_secs(240)).await;
    let msgs = admin::drain_messages(
        &profile(),
        &slow.output_sub,
        1,
        None,
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    let mut pairs: Vec<(i64, i64)> = msgs
        .iter()
        .map(|m| {
            let change: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            let r = &change["after"];
            (r["slow_n"].as_i64().unwrap(), r["fast_n"].as_i64().unwrap())
        })
        .collect();
    pairs.sort();
    (code, out, err, pairs)
}

/// Watermark alignment bounds an updating join's state (issue 48): the join's watermark
/// is the lower of its two tables', so while a backlog is read beside a live topic the
/// live rows cannot be forgotten. Without alignment all 300 live rows are kept at once
/// and the join fails over its state limit; with it the live table pauses 10 s ahead of
/// the backlog, the join keeps a few dozen rows, and every pair (same key, at most 5 s
/// apart: the 100 rows of equal time) is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermark_alignment_bounds_an_updating_joins_state_beside_a_backlog() {
    let (code, out, err, _) = backlog_beside_live(false).await;
    assert_eq!(
        code, 2,
        "over the state limit without alignment: {out}\n{err}"
    );
    assert!(
        err.contains("kept rows of both sides of the join of worker 0 hold about")
            && err.contains("over the limit of 20000"),
        "{err}"
    );
    let (code, out, err, pairs) = backlog_beside_live(true).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(summary_count(&out, "alignment pauses:") >= 1, "{out}");
    let expected: Vec<(i64, i64)> = (200..300).map(|t| (t, t)).collect();
    assert_eq!(pairs, expected, "{out}\n{err}");
}

/// `examples/join_rows.sql`, as the docs run it: each bid joined with the higher bids of
/// its bidder on its auction, exactly the pairs of the bids published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_updating_join_example_runs_on_the_quickstart_data() {
    let stdout = run_example("join_rows.sql").await;
    assert!(
        stdout.contains(
            "quickstart ok: each bid was joined with the higher bids of its bidder on its auction"
        ),
        "{stdout}"
    );
}
