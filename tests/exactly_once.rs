//! Exactly once across pipelines (issue 18, docs/guarantees.md "Exactly once across
//! pipelines"): the sink stamps each row with a record id that every replay repeats, and
//! the next pipeline's source drops copies by it, against the real emulator and real
//! SIGKILLs.

use crate::support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use pubsub_connector_core::admin;
use pubsub_engine_spi::record_id::{message_key, record_id, row_key, RecordProducer};
use rand::{Rng, SeedableRng};
use support::*;

const LIMIT: Duration = Duration::from_secs(300);

/// One hop: `sub` -> `topic`, stamping attribute `stamp`, deduplicating on `dedup`.
/// Leases of 10 s bring a killed run's messages back soon.
fn hop_sql(sub: &str, topic: &str, dedup: Option<&str>, stamp: &str) -> String {
    select_sql(sub, topic, dedup, stamp, "seq")
}

/// [`hop_sql`] writing `select` (an expression) as `seq`.
fn select_sql(sub: &str, topic: &str, dedup: Option<&str>, stamp: &str, select: &str) -> String {
    let dedup = dedup
        .map(|a| format!(", 'scan.dedup.attribute' = '{a}'"))
        .unwrap_or_default();
    let endpoint = endpoint();
    format!(
        "CREATE TABLE src (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{endpoint}', 'format' = 'json',
            'scan.ack.max-duration-per-extension' = '10s' {dedup});
         CREATE TABLE dst (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{topic}',
            'emulator-endpoint' = '{endpoint}', 'sink.record-id-attribute' = '{stamp}');
         INSERT INTO dst SELECT {select} AS seq FROM src;"
    )
}

/// Who writes the rows of the first query of `sql` run from a [`Workdir`] (whose file,
/// `pipeline.sql`, gives the job id `pipeline`).
fn producer(sql: &str) -> RecordProducer {
    let parsed = pubsub_engine_sql::parse_pipeline(sql).unwrap();
    let insert = &parsed.inserts[0];
    RecordProducer {
        job: "pipeline".into(),
        sink: insert.sink.clone(),
        query: "q0".into(),
        statement: insert.to_string(),
    }
}

/// Every message on `sub` as (seq, attributes), acking them, until none came for `idle`.
async fn rows(sub: &str, idle: Duration) -> Vec<(i64, HashMap<String, String>)> {
    admin::drain_messages(&profile(), sub, 2, None, idle)
        .await
        .unwrap()
        .into_iter()
        .map(|m| {
            let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            (v["seq"].as_i64().expect("seq"), m.attributes)
        })
        .collect()
}

/// The ids are those docs/guarantees.md derives, and a replay after a SIGKILL repeats them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamped_record_id_is_derived_from_the_message_and_row_and_kept_by_a_replay() {
    let t = topics("stamp", 10).await;
    let mut ids = publish_seq(&t.input, 0..20).await;
    // One message with two rows: each gets its own position.
    ids.extend(
        admin::publish_all(
            &profile(),
            &t.input,
            vec![br#"{"seq": 100} {"seq": 101}"#.to_vec()],
            1,
        )
        .await
        .unwrap(),
    );
    let sql = hop_sql(&t.input_sub, &t.output, None, "rid");
    let w = Workdir::new(&sql);
    // No checkpoint completes before the kill: the restart writes every row again.
    let mut child = w.spawn(&["--workers", "2", "--checkpoint-interval", "60s"]);
    let first = admin::drain_messages(&profile(), &t.output_sub, 2, Some(22), LIMIT)
        .await
        .unwrap();
    assert_eq!(first.len(), 22, "the first run wrote every row");
    signal(&child, "KILL");
    child.wait().await.unwrap();
    w.restart_until_idle().await;
    let mut again = rows(&t.output_sub, Duration::from_secs(5)).await;
    again.extend(first.iter().map(|m| {
        let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        (v["seq"].as_i64().unwrap(), m.attributes.clone())
    }));
    let sub = full_subscription(&t.input_sub);
    let expected = |seq: i64| {
        let (message, row) = match seq {
            100 => (&ids[20], 0),
            101 => (&ids[20], 1),
            s => (&ids[s as usize], 0),
        };
        record_id(&producer(&sql), &row_key(&message_key(&sub, message), row))
    };
    let mut copies: BTreeMap<i64, usize> = BTreeMap::new();
    for (seq, attributes) in &again {
        assert_eq!(
            attributes.get("rid"),
            Some(&expected(*seq)),
            "row {seq}: {attributes:?}"
        );
        *copies.entry(*seq).or_default() += 1;
    }
    assert_eq!(copies.len(), 22, "{copies:?}");
    assert!(
        copies.values().all(|n| *n >= 2),
        "every row was written by both runs, with one id: {copies:?}"
    );
}

/// Copies of a record are dropped and acknowledged, messages without the attribute pass,
/// and the ids seen survive a restart (they are in the checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_drops_copies_by_their_id_and_remembers_them_across_a_restart() {
    let t = topics("dedup", 10).await;
    let publish = |seq: usize, rid: Option<String>| {
        let topic = t.input.clone();
        async move {
            let attributes: HashMap<String, String> =
                rid.map(|r| ("rid".to_string(), r)).into_iter().collect();
            publish_with_attributes(
                &topic,
                format!("{{\"seq\": {seq}}}").into_bytes(),
                attributes,
            )
            .await
        }
    };
    // Records r0..r9 twice each (seq i and 10 + i), and 3 messages without an id.
    for i in 0..20 {
        publish(i, Some(format!("r{}", i % 10))).await;
    }
    for i in 20..23 {
        publish(i, None).await;
    }
    let sql = hop_sql(&t.input_sub, &t.output, Some("rid"), "out-id");
    let w = Workdir::new(&sql);
    let args = [
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "5s",
    ];
    let run = || w.run_ok(&args);
    let stdout = run().await;
    assert_eq!(
        summary_count(&stdout, "messages deduplicated:"),
        10,
        "{stdout}"
    );
    assert_eq!(
        summary_count(&stdout, "messages without dedup attribute:"),
        3,
        "{stdout}"
    );
    assert_eq!(
        summary_count(&stdout, "messages acknowledged:"),
        23,
        "{stdout}"
    );
    let out = rows(&t.output_sub, Duration::from_secs(5)).await;
    let seqs: Vec<i64> = out.iter().map(|(s, _)| *s).collect();
    assert_eq!(out.len(), 13, "{seqs:?}");
    // One copy of each record (whichever came first), each with the id derived from the
    // record's id, and every message without one.
    let mut by_record: HashMap<i64, i64> = HashMap::new();
    for (seq, attributes) in &out {
        if *seq >= 20 {
            continue;
        }
        let r = seq % 10;
        assert!(
            by_record.insert(r, *seq).is_none(),
            "two copies of r{r}: {seqs:?}"
        );
        assert_eq!(
            attributes.get("out-id"),
            Some(&record_id(&producer(&sql), &row_key(&format!("r{r}"), 0)))
        );
    }
    assert_eq!(by_record.len(), 10);
    assert!((20..23).all(|s| seqs.contains(&s)), "{seqs:?}");

    // A third copy of every record after a restart: all dropped, from the checkpoint.
    for i in 0..10 {
        publish(30 + i, Some(format!("r{i}"))).await;
    }
    let stdout = run().await;
    assert_eq!(
        summary_count(&stdout, "messages deduplicated:"),
        10,
        "{stdout}"
    );
    assert!(
        rows(&t.output_sub, Duration::from_secs(5)).await.is_empty(),
        "a copy passed after the restart"
    );
    assert!(redelivered(&t.input_sub, Duration::from_secs(3))
        .await
        .is_empty());
}

/// Two hops, A: input -> X stamping `a-id`, B: X -> Y deduplicating on `a-id` and
/// stamping `b-id`, with 20,000 messages and SIGKILLs at random instants (the seed is
/// printed; `EXACTLY_ONCE_SEED=N` replays it). `kills` lists which pipeline dies, in
/// order. With `b_cluster`, B runs as a supervised cluster of 2 processes of 1 worker
/// (decision 0046: copies reach either process), and killing B kills its process 1 (at
/// most once), which the supervisor restarts. Returns Y's rows as (seq, b-id).
async fn two_hops(name: &str, kills: &[char], b_cluster: bool) -> Vec<(i64, String)> {
    const N: usize = 20_000;
    let a = topics(&format!("{name}-a"), 10).await;
    // X is A's output; B reads X's subscription and writes Y.
    let y = unique(&format!("{name}-y"));
    let y_sub = unique(&format!("{name}-y-sub"));
    admin::create_topic(&profile(), &y).await.unwrap();
    admin::create_subscription(&profile(), &y_sub, &y, 60)
        .await
        .unwrap();
    let wa = Workdir::new(&hop_sql(&a.input_sub, &a.output, None, "a-id"));
    let wb = Workdir::new(&hop_sql(&a.output_sub, &y, Some("a-id"), "b-id"));
    let seed: u64 = std::env::var("EXACTLY_ONCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{name}: seed {seed}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    publish_seq(&a.input, 0..N).await;
    let args = ["--workers", "2", "--checkpoint-interval", "1s"];
    let cluster_args = [
        "--processes",
        "2",
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
    ];
    let mut ca = wa.spawn(&args);
    let mut cb = if b_cluster {
        wb.spawn_cluster(&cluster_args)
    } else {
        wb.spawn(&args)
    };
    let b_lines = b_cluster.then(|| collect_lines(cb.stderr.take().expect("piped")));
    for who in kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..6_000))).await;
        if let (&'B', Some(lines)) = (who, &b_lines) {
            wait_until("B's process 1 to start", LIMIT, || {
                crate::cluster::pid_of_process_1(lines).is_some()
            })
            .await;
            crate::cluster::sigkill(crate::cluster::pid_of_process_1(lines).expect("started"));
            continue;
        }
        let child = if *who == 'A' { &mut ca } else { &mut cb };
        signal(child, "KILL");
        child.wait().await.unwrap();
        *child = if *who == 'A' {
            wa.spawn(&args)
        } else {
            wb.spawn(&args)
        };
    }
    // Once each restarted run completed a checkpoint of its own (so it is up and handles
    // signals), stop both cleanly: A first, then B once idle.
    let since = (wa.checkpoint_epoch(), wb.checkpoint_epoch());
    wait_until("a checkpoint of each restarted run", LIMIT, || {
        wa.checkpoint_epoch() > since.0 && wb.checkpoint_epoch() > since.1
    })
    .await;
    let mut deduplicated = 0;
    for (child, w) in [(ca, &wa), (cb, &wb)] {
        signal(&child, "TERM");
        let (code, stdout, stderr) = finish(child, LIMIT).await;
        let stderr = match (&b_lines, std::ptr::eq(w, &wb)) {
            (Some(lines), true) => lines.lock().unwrap().join("\n"),
            _ => stderr,
        };
        assert_eq!(code, 0, "stderr: {stderr}");
        let (again, _) = w.restart_until_idle().await;
        for out in [stdout, again] {
            if out.contains("messages deduplicated:") {
                deduplicated += summary_count(&out, "messages deduplicated:");
            }
        }
    }
    let y: Vec<(i64, String)> = rows(&y_sub, Duration::from_secs(10))
        .await
        .into_iter()
        .map(|(seq, attributes)| (seq, attributes["b-id"].clone()))
        .collect();
    // What the kills cost, for the record (how many copies depends on the instants).
    println!(
        "{name}: B dropped {deduplicated} copies after its last start; Y holds {} rows",
        y.len()
    );
    y
}

/// The headline: A killed twice and B once, each restarted on its state. Y holds every
/// input; grouped by B's record id there are exactly 20,000 groups, each holding copies
/// of one input only (B's own crash republishes its open checkpoints with their ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hops_with_kills_give_every_record_one_id_downstream() {
    let y = two_hops("eo-kills", &['A', 'B', 'A'], false).await;
    assert_one_id_per_record(&y);
}

/// The same with B a cluster of 2 processes, its process 1 killed once: its copies and
/// its deduplication state cross processes (decision 0046).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hops_with_kills_and_the_second_a_cluster_give_every_record_one_id_downstream() {
    let y = two_hops("eo-kills-cluster", &['A', 'B', 'A'], true).await;
    assert_one_id_per_record(&y);
}

fn assert_one_id_per_record(y: &[(i64, String)]) {
    let mut groups: HashMap<&str, HashSet<i64>> = HashMap::new();
    for (seq, id) in y {
        groups.entry(id.as_str()).or_default().insert(*seq);
    }
    let seqs: HashSet<i64> = y.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 20_000, "every input reached Y at least once");
    assert_eq!(groups.len(), 20_000, "one id per record");
    assert!(
        groups.values().all(|s| s.len() == 1),
        "a group holds copies of one input only"
    );
}

/// Only A is killed: B deduplicates A's replays, so Y holds every input exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hops_with_the_first_killed_write_every_record_once() {
    let y = two_hops("eo-a", &['A', 'A'], false).await;
    let seqs: HashSet<i64> = y.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 20_000, "every input reached Y");
    assert_eq!(y.len(), 20_000, "and exactly once");
}

/// Only A is killed and B is a cluster of 2 processes: A's replays reach either of B's
/// processes, and B drops them behind its exchange by record id (decision 0046), so Y
/// holds every input exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hops_with_the_first_killed_and_the_second_a_cluster_write_every_record_once() {
    let y = two_hops("eo-a-cluster", &['A', 'A'], true).await;
    let seqs: HashSet<i64> = y.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 20_000, "every input reached Y");
    assert_eq!(y.len(), 20_000, "and exactly once");
}

/// Issue 31, item 2: two pipelines, each deduplicating on one upstream id (through a
/// subscription of its own) and writing different rows to one topic stamped with record
/// ids, and a deduplicating reader of that topic. Both files are `pipeline.sql` (one
/// default job id) with one sink name: the ids named only the query's index, so each
/// pair collided and the reader dropped one of each (50 of 100) before the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pipelines_into_one_topic_keep_every_row_for_a_deduplicating_reader() {
    const N: i64 = 50;
    let t = topics("fan-in", 10).await;
    let second = unique("fan-in-in-sub2");
    let (y, y_sub) = (unique("fan-in-y"), unique("fan-in-y-sub"));
    admin::create_subscription(&profile(), &second, &t.input, 10)
        .await
        .unwrap();
    admin::create_topic(&profile(), &y).await.unwrap();
    admin::create_subscription(&profile(), &y_sub, &y, 60)
        .await
        .unwrap();
    for i in 0..N {
        let rid = HashMap::from([("rid".to_string(), format!("r{i}"))]);
        publish_with_attributes(&t.input, format!("{{\"seq\": {i}}}").into_bytes(), rid).await;
    }
    let one = select_sql(&t.input_sub, &t.output, Some("rid"), "out-id", "seq");
    let two = select_sql(&second, &t.output, Some("rid"), "out-id", "seq + 1000");
    let reader = hop_sql(&t.output_sub, &y, Some("out-id"), "y-id");
    let args = ["--checkpoint-interval", "1s", "--stop-when-idle", "5s"];
    for sql in [&one, &two, &reader] {
        Workdir::new(sql).run_ok(&args).await;
    }
    let mut got: Vec<i64> = rows(&y_sub, Duration::from_secs(5))
        .await
        .into_iter()
        .map(|(seq, _)| seq)
        .collect();
    got.sort_unstable();
    let want: Vec<i64> = (0..N).chain(1000..1000 + N).collect();
    assert_eq!(got, want, "every row of both pipelines, once");
}
