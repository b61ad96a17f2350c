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
