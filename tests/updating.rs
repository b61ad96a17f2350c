//! Updating aggregates into a Debezium changelog on the emulator (issue 47): seeded random
//! clicks on several pages, `GROUP BY page` without a window, a HAVING that pages pass and
//! fail again. A consumer applies the changelog in delivery order (each page's changes
//! carry the page as their ordering key); the state it ends with equals a plain GROUP BY
//! over every click (the oracle), without a crash (where every change's old row must be
//! the one standing), after a SIGKILL, and on a cluster of two processes after one is
//! SIGKILLed.

use std::collections::BTreeMap;
use std::time::Duration;

use pubsub_connector_core::admin;
use rand::{Rng, SeedableRng};

use crate::support::*;
use crate::windows::{publish, Event, BASE_MS};

/// A page's row: (n, total, lo, hi).
type Row = (i64, i64, i64, i64);

/// `n` clicks on 6 pages, `v` from -100 to 100: a page's sum crosses the HAVING bound
/// both ways.
fn clicks(seed: u64, n: usize) -> Vec<Event> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let page = format!("p{}", rng.random_range(0..6));
            (page, rng.random_range(-100..=100), BASE_MS + i as i64 * 10)
        })
        .collect()
}

/// The oracle: count, sum, min and max per page, for the pages whose sum is above -150.
fn oracle(events: &[Event]) -> BTreeMap<String, Row> {
    let mut out: BTreeMap<String, Row> = BTreeMap::new();
    for (page, v, _) in events {
        let e = out
            .entry(page.clone())
            .or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 += v;
        e.2 = e.2.min(*v);
        e.3 = e.3.max(*v);
    }
    out.retain(|_, r| r.1 > -150);
    out
}

/// The pipeline; `rate`: the source's messages per second (0: no limit), so that a kill
/// lands while it reads.
fn sql(t: &Topics, rate: u32) -> String {
    let limit = match rate {
        0 => String::new(),
        r => format!(", 'scan.rate-limit.messages-per-second' = '{r}'"),
    };
    format!(
        "CREATE TABLE clicks (page TEXT, v BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}'{limit});
         CREATE TABLE per_page (page TEXT, n BIGINT, total BIGINT, lo BIGINT, hi BIGINT,
            k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}', 'format' = 'debezium_json',
            'sink.message-ordering.enabled' = 'true', 'sink.record-id-attribute' = 'rid',
            'changelog.flush-interval' = '100ms');
         INSERT INTO per_page
         SELECT page, count(*), sum(v), min(v), max(v), page AS k FROM clicks
         GROUP BY page HAVING sum(v) > -150;",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    )
}

/// Applies the changelog on `sub` in delivery order: the rows standing at the end, and
/// how many changes were read. `strict`: each change's old row must be the one standing
/// (no crash in between), and no record id repeats.
async fn apply(sub: &str, strict: bool) -> (BTreeMap<String, Row>, usize) {
    let msgs = admin::drain_messages(&profile(), sub, 1, None, Duration::from_secs(5))
        .await
        .unwrap();
    let row = |v: &serde_json::Value| -> Option<(String, Row)> {
        if v.is_null() {
            return None;
        }
        let i = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"));
        Some((
            v["page"].as_str().unwrap().to_string(),
            (i("n"), i("total"), i("lo"), i("hi")),
        ))
    };
    let mut standing: BTreeMap<String, Row> = BTreeMap::new();
    let mut ids = std::collections::HashSet::new();
    for m in &msgs {
        let c: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        let (before, after) = (row(&c["before"]), row(&c["after"]));
        let op = c["op"].as_str().unwrap();
        let page = after.as_ref().or(before.as_ref()).unwrap().0.clone();
        assert_eq!(m.ordering_key, page, "{c}");
        assert!(m.attributes.contains_key("rid"), "{c}");
        if strict {
            assert!(ids.insert(m.attributes["rid"].clone()), "{c} twice");
            assert_eq!(
                standing.get(&page),
                before.as_ref().map(|b| &b.1),
                "{c}: its old row is the one standing"
            );
        }
        match (op, after) {
            ("c" | "u", Some((_, r))) => {
                standing.insert(page, r);
            }
            ("d", None) => {
                standing.remove(&page);
            }
            _ => panic!("not a change: {c}"),
        }
    }
    (standing, msgs.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changelog_applied_in_order_ends_in_the_batch_group_by() {
    let t = topics("updating", 10).await;
    let events = clicks(47, 600);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql(&t, 0));
    let out = w
        .run_ok(&[
            "--workers",
            "2",
            "--checkpoint-interval",
            "300ms",
            "--stop-when-idle",
            "3s",
        ])
        .await;
    let (got, changes) = apply(&t.output_sub, true).await;
    assert_eq!(got, expected);
    assert!(changes >= expected.len(), "{changes} changes: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_the_changelog_ends_in_the_same_state() {
    let t = topics("updating-kill", 10).await;
    let events = clicks(48, 2_000);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql(&t, 500));
    let child = w.spawn(&["--workers", "2", "--checkpoint-interval", "300ms"]);
    wait_until("a checkpoint", Duration::from_secs(60), || {
        w.checkpoint_epoch().is_some_and(|e| e >= 3)
    })
    .await;
    signal(&child, "KILL");
    let _ = finish(child, Duration::from_secs(30)).await;
    w.restart_until_idle().await;
    let (got, _) = apply(&t.output_sub, false).await;
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_end_the_changelog_in_the_same_state_after_one_is_sigkilled() {
    let t = topics("updating-cluster", 10).await;
    let events = clicks(49, 1_500);
    let expected = oracle(&events);
    publish(&t.input, &events).await;
    let w = Workdir::new(&sql(&t, 400));
    crate::cluster::run_killing_process_1(&w, &[]).await;
    let (got, _) = apply(&t.output_sub, false).await;
    assert_eq!(got, expected);
}

/// `examples/changelog.sql`, as the README runs it, on 3,000 of the quickstart's bids: every
/// auction's last row counts its bids and every bid was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changelog_example_runs_on_the_quickstart_data() {
    let stdout = run_example("changelog.sql").await;
    assert!(
        stdout.contains("bids counted in their last rows: 3000")
            && stdout.contains("quickstart ok: every auction's last row counts its bids"),
        "{stdout}"
    );
}
