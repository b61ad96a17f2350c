//! A Debezium changelog read from the emulator (issue 47): a seeded random history of
//! creates, updates and deletes of 40 rows (rounds changing each row once), published as
//! Debezium change events with the row's primary key as ordering key, read from a
//! subscription with message ordering.
//! An updating aggregate over it (`GROUP BY page`, pages left with no row deleted) and a
//! stateless projection (`WHERE v > 0`, rows moving in and out of it) each write a
//! changelog; a consumer applying each in delivery order ends with what a batch query
//! computes over the rows the history leaves (the oracle), without a crash, after a
//! SIGKILL, and on a cluster of two processes after one is SIGKILLed.

use std::collections::BTreeMap;
use std::time::Duration;

use pubsub_connector_core::{admin, client};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::support::*;

/// A row of the source: page and v, by id.
type Rows = BTreeMap<i64, (String, i64)>;

/// A page's row: (n, total, lo, hi).
type PageRow = (i64, i64, i64, i64);

/// `phases` rounds of changes of rows 0..40 on 6 pages, each round changing every row
/// once, in a random order, as Debezium events (id, payload); the rows left.
fn history(seed: u64, phases: usize) -> (Vec<Vec<(i64, String)>>, Rows) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Rows::new();
    let mut out = Vec::new();
    let image = |id: i64, r: &(String, i64)| json!({"id": id, "page": r.0, "v": r.1});
    let mut lsn = 0i64;
    for _ in 0..phases {
        let mut ids: Vec<i64> = (0..40).collect();
        // A shuffle: rows change in another order each round.
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.random_range(0..=i));
        }
        let mut phase = Vec::new();
        for id in ids {
            let new = (
                format!("p{}", rng.random_range(0..6)),
                rng.random_range(-100..=100),
            );
            let (op, before, after) = match rows.get(&id).cloned() {
                None => ("c", Value::Null, image(id, &new)),
                Some(old) if rng.random_range(0..4) == 0 => ("d", image(id, &old), Value::Null),
                Some(old) => ("u", image(id, &old), image(id, &new)),
            };
            match op {
                "d" => rows.remove(&id),
                _ => rows.insert(id, new),
            };
            lsn += 1;
            let event = json!({
                "before": before, "after": after, "op": op,
                "source": {"connector": "postgresql", "db": "shop", "table": "clicks", "lsn": lsn},
                "ts_ms": 1_706_000_000_000i64 + lsn, "transaction": null
            });
            phase.push((id, event.to_string()));
        }
        out.push(phase);
    }
    (out, rows)
}

/// Per page: count, sum, min and max of the rows left, for the pages whose sum is above
/// -150 (the HAVING).
fn oracle(rows: &Rows) -> BTreeMap<String, PageRow> {
    let mut out: BTreeMap<String, PageRow> = BTreeMap::new();
    for (page, v) in rows.values() {
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

struct Setup {
    input: String,
    input_sub: String,
    per_page: String,
    per_page_sub: String,
    mirror: String,
    mirror_sub: String,
}

async fn setup(name: &str) -> Setup {
    let p = profile();
    let s = Setup {
        input: unique(&format!("{name}-in")),
        input_sub: unique(&format!("{name}-in-sub")),
        per_page: unique(&format!("{name}-pages")),
        per_page_sub: unique(&format!("{name}-pages-sub")),
        mirror: unique(&format!("{name}-mirror")),
        mirror_sub: unique(&format!("{name}-mirror-sub")),
    };
    for t in [&s.input, &s.per_page, &s.mirror] {
        admin::create_topic(&p, t).await.unwrap();
    }
    let subs = client::subscription_admin(&p).await.unwrap();
    subs.create_subscription()
        .set_name(client::subscription_path(PROJECT, &s.input_sub))
        .set_topic(client::topic_path(PROJECT, &s.input))
        .set_ack_deadline_seconds(10)
        .set_enable_message_ordering(true)
        .send()
        .await
        .unwrap();
    admin::create_subscription(&p, &s.per_page_sub, &s.per_page, 60)
        .await
        .unwrap();
    admin::create_subscription(&p, &s.mirror_sub, &s.mirror, 60)
        .await
        .unwrap();
    s
}

/// Publishes each event with its row's id as ordering key (each row's changes in order);
/// the message ids.
async fn publish(topic: &str, events: &[(i64, String)]) -> Vec<String> {
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, topic))
        .unwrap()
        .build()
        .await
        .unwrap();
    let futs: Vec<_> = events
        .iter()
        .map(|(id, e)| {
            publisher.publish(
                google_cloud_pubsub::model::Message::new()
                    .set_data(e.clone())
                    .set_ordering_key(id.to_string()),
            )
        })
        .collect();
    let mut ids = Vec::new();
    for f in futs {
        ids.push(f.await.unwrap());
    }
    ids
}

/// Publishes the rounds one after another, each once every message of the one before was
/// acknowledged (seen on the wire), for the crash tests: the emulator redelivers the
/// messages a killed run held only after their lease, and meanwhile delivers newer
/// messages of the same ordering key (the real service holds them back), so a row's
/// changes would reach the restarted run out of order. With one change per row in
/// flight, each row's changes arrive in order as the service delivers them.
fn publish_rounds(
    topic: String,
    sub: String,
    rounds: Vec<Vec<(i64, String)>>,
) -> tokio::task::JoinHandle<()> {
    use pubsub_emulator_tools::wire_log::{events, WireKind};
    let sub = client::subscription_path(PROJECT, &sub);
    tokio::spawn(async move {
        for round in rounds {
            let ids: std::collections::HashSet<String> =
                publish(&topic, &round).await.into_iter().collect();
            wait_until("a round acknowledged", Duration::from_secs(120), || {
                let log = events();
                let mut acked = std::collections::HashSet::new();
                for e in &log {
                    if let WireKind::Acked {
                        subscription,
                        ack_ids,
                    } = &e.kind
                    {
                        if *subscription == sub {
                            acked.extend(ack_ids.iter().cloned());
                        }
                    }
                }
                let mut done = std::collections::HashSet::new();
                for e in &log {
                    if let WireKind::Delivered {
                        subscription,
                        messages,
                    } = &e.kind
                    {
                        if *subscription == sub {
                            for m in messages {
                                if acked.contains(&m.ack_id) && ids.contains(&m.message_id) {
                                    done.insert(m.message_id.clone());
                                }
                            }
                        }
                    }
                }
                done.len() == ids.len()
            })
            .await;
        }
    })
}

/// The pipeline; `rate`: the source's messages per second (0: no limit).
fn sql(s: &Setup, rate: u32) -> String {
    let limit = match rate {
        0 => String::new(),
        r => format!(", 'scan.rate-limit.messages-per-second' = '{r}'"),
    };
    format!(
        "CREATE TABLE cdc (id BIGINT PRIMARY KEY, page TEXT, v BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'debezium_json'{limit});
         CREATE TABLE per_page (page TEXT, n BIGINT, total BIGINT, lo BIGINT, hi BIGINT,
            k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{pages}',
            'emulator-endpoint' = '{e}', 'format' = 'debezium_json',
            'sink.message-ordering.enabled' = 'true', 'changelog.flush-interval' = '100ms');
         CREATE TABLE mirror (id BIGINT, page TEXT, v BIGINT,
            k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{mirror}',
            'emulator-endpoint' = '{e}', 'format' = 'debezium_json',
            'sink.message-ordering.enabled' = 'true');
         INSERT INTO per_page
         SELECT page, count(*), sum(v), min(v), max(v), page AS k FROM cdc
         GROUP BY page HAVING sum(v) > -150;
         INSERT INTO mirror SELECT id, upper(page) AS page, v, CAST(id AS TEXT) AS k
         FROM cdc WHERE v > 0;",
        sub = s.input_sub,
        pages = s.per_page,
        mirror = s.mirror,
        e = endpoint()
    )
}

/// Applies the changelog on `sub` in delivery order, keyed by `key` of each row: the rows
/// standing at the end. Every change's ordering key is its row's key; `strict`: each
/// change's old row is the one standing (no crash in between).
async fn apply(sub: &str, key: &str, strict: bool) -> BTreeMap<String, Value> {
    let msgs = admin::drain_messages(&profile(), sub, 1, None, Duration::from_secs(5))
        .await
        .unwrap();
    let mut standing: BTreeMap<String, Value> = BTreeMap::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for m in &msgs {
        let c: Value = serde_json::from_slice(&m.data).unwrap();
        let (before, after) = (&c["before"], &c["after"]);
        let row = if after.is_null() { before } else { after };
        let k = text(&row[key]);
        assert_eq!(m.ordering_key, k, "{c}");
        if strict {
            let old = (!before.is_null()).then_some(before);
            assert_eq!(
                standing.get(&k),
                old,
                "{c}: its old row is the one standing"
            );
        }
        match c["op"].as_str().unwrap() {
            "c" | "u" => standing.insert(k, after.clone()),
            "d" => standing.remove(&k),
            _ => panic!("not a change: {c}"),
        };
    }
    standing
}

/// What the consumers hold, as the oracles' types.
async fn results(s: &Setup, strict: bool) -> (BTreeMap<String, PageRow>, Rows) {
    let pages = apply(&s.per_page_sub, "page", strict)
        .await
        .into_iter()
        .map(|(k, v)| {
            let i = |f: &str| v[f].as_i64().unwrap_or_else(|| panic!("{f} in {v}"));
            (k, (i("n"), i("total"), i("lo"), i("hi")))
        })
        .collect();
    let mirror = apply(&s.mirror_sub, "id", strict)
        .await
        .into_values()
        .map(|v| {
            let page = v["page"].as_str().unwrap().to_lowercase();
            (v["id"].as_i64().unwrap(), (page, v["v"].as_i64().unwrap()))
        })
        .collect();
    (pages, mirror)
}

/// The mirror's oracle: the rows left with `v > 0`.
fn kept(rows: &Rows) -> Rows {
    rows.iter()
        .filter(|(_, r)| r.1 > 0)
        .map(|(k, r)| (*k, r.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_changelog_feeds_an_updating_aggregate_and_a_projection() {
    let s = setup("cdc").await;
    let (rounds, rows) = history(47, 15);
    publish(&s.input, &rounds.concat()).await;
    let w = Workdir::new(&sql(&s, 0));
    w.run_ok(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "300ms",
        "--stop-when-idle",
        "3s",
    ])
    .await;
    let (pages, mirror) = results(&s, true).await;
    assert_eq!(pages, oracle(&rows));
    assert_eq!(mirror, kept(&rows));
    assert!(
        pages.len() >= 3 && mirror.len() >= 5,
        "{pages:?} {mirror:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_both_changelogs_end_in_the_same_state() {
    pubsub_emulator_tools::wire_log::enable();
    let s = setup("cdc-kill").await;
    let (rounds, rows) = history(48, 30);
    let publisher = publish_rounds(s.input.clone(), s.input_sub.clone(), rounds);
    let w = Workdir::new(&sql(&s, 0));
    let child = w.spawn(&["--workers", "2", "--checkpoint-interval", "300ms"]);
    wait_until("a checkpoint", Duration::from_secs(60), || {
        w.checkpoint_epoch().is_some_and(|e| e >= 5)
    })
    .await;
    signal(&child, "KILL");
    let _ = finish(child, Duration::from_secs(30)).await;
    w.restart_until_idle().await;
    publisher.await.unwrap();
    let (pages, mirror) = results(&s, false).await;
    assert_eq!(pages, oracle(&rows));
    assert_eq!(mirror, kept(&rows));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_end_both_changelogs_in_the_same_state_after_one_is_sigkilled() {
    pubsub_emulator_tools::wire_log::enable();
    let s = setup("cdc-cluster").await;
    let (rounds, rows) = history(49, 30);
    let publisher = publish_rounds(s.input.clone(), s.input_sub.clone(), rounds);
    let w = Workdir::new(&sql(&s, 0));
    crate::cluster::run_killing_process_1(&w, &[]).await;
    publisher.await.unwrap();
    let (pages, mirror) = results(&s, false).await;
    assert_eq!(pages, oracle(&rows));
    assert_eq!(mirror, kept(&rows));
}
