//! The watermark held behind the subscription's oldest unacknowledged message (issue 44;
//! decision 0047), under the real service's delivery order as the emulator can be made to
//! show it (`tools::delivery`: a second consumer keeps the oldest messages and gives them
//! back late, behind newer ones). The windows are checked against an oracle built from
//! every message's publish time, read from a second ("witness") subscription of the same
//! topic.

use std::collections::BTreeMap;
use std::time::Duration;

use pubsub_connector_core::{admin, client};
use pubsub_emulator_tools::delivery::{GiveBack, Interference, Interloper};

use crate::support::*;

const WINDOW_MS: i64 = 5_000;

/// (window start ms, bucket) -> count.
type Counts = BTreeMap<(i64, String), i64>;

/// Real GCS notifications (`gcs-notification-json-api-v1.json`), message `i` of bucket
/// `b{i % 3}`.
fn notification(i: usize) -> Vec<u8> {
    let mut v: serde_json::Value =
        serde_json::from_slice(&fixture("gcs-notification-json-api-v1.json")).unwrap();
    v["bucket"] = format!("b{}", i % 3).into();
    v["name"] = format!("object-{i}.csv").into();
    serde_json::to_vec(&v).unwrap()
}

/// Publishes messages `range` at about `per_second`.
async fn publish_paced(topic: &str, range: std::ops::Range<usize>, per_second: usize) {
    let chunk = (per_second / 10).max(1);
    let items: Vec<usize> = range.collect();
    for part in items.chunks(chunk) {
        let started = std::time::Instant::now();
        let payloads = part.iter().map(|i| notification(*i)).collect();
        admin::publish_all(&profile(), topic, payloads, 2_000)
            .await
            .unwrap();
        if let Some(rest) = Duration::from_millis(100).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
}

fn sql(t: &Topics, extra: &str) -> String {
    format!(
        "CREATE TABLE objects (bucket TEXT, name TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'json',
            'scan.watermark.backlog-probe-interval' = '500ms' {extra});
         CREATE TABLE per_bucket (ws TIMESTAMP, bucket TEXT, n BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO per_bucket SELECT window.start, bucket, n FROM (
            SELECT TUMBLE(INTERVAL '5' SECOND) AS window, bucket, count(*) AS n
            FROM objects GROUP BY window, bucket);",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    )
}

/// Every message published, from the witness subscription: (publish ms, payload).
async fn witnessed(witness: &str, n: usize) -> Vec<(i64, serde_json::Value)> {
    let msgs = admin::drain_messages(&profile(), witness, 1, Some(n), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(msgs.len(), n, "the witness holds every message published");
    msgs.into_iter()
        .map(|m| {
            let t = m.publish_time.expect("a publish time");
            let ms = t.seconds() * 1_000 + i64::from(t.nanos()) / 1_000_000;
            (ms, serde_json::from_slice(&m.data).unwrap())
        })
        .collect()
}

/// The oracle: every message published, counted by publish-time window and bucket.
async fn oracle(witness: &str, n: usize) -> Counts {
    let mut out = Counts::new();
    for (ms, v) in witnessed(witness, n).await {
        let bucket = v["bucket"].as_str().unwrap().to_string();
        *out.entry((ms.div_euclid(WINDOW_MS) * WINDOW_MS, bucket))
            .or_default() += 1;
    }
    out
}

/// The window rows written (every copy).
async fn written(sub: &str, rows: usize) -> Vec<((i64, String), i64)> {
    let msgs = admin::drain_messages(&profile(), sub, 1, Some(rows), Duration::from_secs(5))
        .await
        .unwrap();
    msgs.iter()
        .map(|m| {
            let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            let ws =
                pubsub_engine_format::parse_rfc3339(r["ws"].as_str().unwrap()).unwrap() / 1_000_000;
            let bucket = r["bucket"].as_str().unwrap().to_string();
            ((ws, bucket), r["n"].as_i64().unwrap())
        })
        .collect()
}

/// Another consumer of subscription `id` of the test project doing `plan`.
async fn interloper(id: &str, plan: Interference) -> Interloper {
    let p = profile();
    let subscriber = client::subscriber(&p).await.unwrap();
    Interloper::start(subscriber, client::subscription_path(&p.project, id), plan)
        .await
        .unwrap()
}

/// Topics `name`, a witness subscription of the input (every message's publish time),
/// and another consumer of the input subscription doing `plan` (through the emulator's
/// half-closing proxy, as `endpoint()` is).
async fn with_another_consumer(name: &str, plan: Interference) -> (Topics, String, Interloper) {
    let t = topics(name, 10).await;
    let witness = unique(&format!("{name}-witness"));
    admin::create_subscription(&profile(), &witness, &t.input, 60)
        .await
        .unwrap();
    let other = interloper(&t.input_sub, plan).await;
    (t, witness, other)
}

/// The measured case: 2,000 messages (a 600-message backlog, then a live tail at
/// 100 per second); another consumer keeps the oldest 100 and nacks them about 6 s after
/// the pipeline started; `TUMBLE(5 s)` count per bucket on publish time, 2 workers (two
/// splits of the subscription), `--stop-when-idle --drain`. Returns (exit code, stdout,
/// stderr, the oracle, what was written).
async fn held_by_another_consumer(
    name: &str,
    extra: &str,
) -> (i32, String, String, Counts, Vec<((i64, String), i64)>) {
    let (t, witness, other) = with_another_consumer(
        name,
        Interference {
            seed: 44,
            take: 100,
            probability: 1.0,
            hold: (Duration::from_secs(12), Duration::from_secs(12)),
            give_back: GiveBack::Nack,
            window: Duration::from_secs(60),
        },
    )
    .await;
    publish_paced(&t.input, 0..600, 100).await;
    wait_until(
        "the other consumer keeps 100",
        Duration::from_secs(30),
        || other.kept() == 100,
    )
    .await;
    let w = Workdir::new(&sql(&t, extra));
    let child = w.spawn(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "8s",
        "--drain",
    ]);
    publish_paced(&t.input, 600..2_000, 100).await;
    let report = other.finish().await.unwrap();
    assert_eq!(report.kept.len(), 100, "{report:?}");
    let (code, out, err) = finish(child, Duration::from_secs(180)).await;
    let expected = oracle(&witness, 2_000).await;
    let got = written(&t.output_sub, expected.len()).await;
    (code, out, err, expected, got)
}

/// With the probe (the default): no row is late, and the windows equal the oracle over
/// every message published, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_another_consumer_gives_back_late_are_not_late_for_their_window() {
    let (code, out, err, expected, got) = held_by_another_consumer("backlog-on", "").await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("rows late"), "{out}");
    assert_eq!(got.len(), expected.len(), "each window once: {got:?}");
    let got: Counts = got.into_iter().collect();
    assert_eq!(
        got.values().sum::<i64>(),
        2_000,
        "every message counted once"
    );
    assert_eq!(got, expected);
    assert!(!err.contains("backlog probe failed"), "{err}");
}

/// The same delivery with `'scan.watermark.backlog-probe' = 'off'`: one WARN at start
/// saying what it costs, and the rows the other consumer gave back late are late (what
/// the probe prevents; the case measured on main before it, decision 0047).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_probe_the_same_delivery_makes_rows_late_and_says_so_at_start() {
    let (code, out, err, _, got) =
        held_by_another_consumer("backlog-off", ", 'scan.watermark.backlog-probe' = 'off'").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.matches("'scan.watermark.backlog-probe' = 'off'")
            .count(),
        1,
        "one WARN: {err}"
    );
    let late = summary_count(&out, "rows late:");
    assert!(late > 0, "{out}");
    let counted: i64 = got.iter().map(|(_, n)| n).sum();
    assert_eq!(
        counted + late as i64,
        2_000,
        "the late rows are the ones missing: {out}"
    );
}

/// Where a test's rows take their event time from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Time {
    /// The message's publish time.
    Publish,
    /// Attribute `ts`: this machine's clock at publish, epoch milliseconds.
    Attribute,
    /// Field `created` (epoch milliseconds, `json.timestamp-format`) of the notification,
    /// stamped at publish, through `WATERMARK FOR`.
    Column,
}

/// A window kind and its SQL.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Tumble,
    Hop,
    Session,
}

impl Kind {
    fn sql(self) -> &'static str {
        match self {
            Kind::Tumble => "TUMBLE(INTERVAL '5' SECOND)",
            Kind::Hop => "HOP(INTERVAL '2' SECOND, INTERVAL '4' SECOND)",
            Kind::Session => "SESSION(INTERVAL '500' MILLISECOND)",
        }
    }

    /// The oracle: (start ms, end ms, bucket) -> count, over (event ms, bucket) of every
    /// message.
    fn windows(self, rows: &[(i64, String)]) -> BTreeMap<(i64, i64, String), i64> {
        let mut out = BTreeMap::new();
        match self {
            Kind::Tumble => {
                for (t, b) in rows {
                    let s = t.div_euclid(5_000) * 5_000;
                    *out.entry((s, s + 5_000, b.clone())).or_default() += 1;
                }
            }
            Kind::Hop => {
                for (t, b) in rows {
                    let last = t.div_euclid(2_000) * 2_000;
                    for s in [last - 2_000, last] {
                        *out.entry((s, s + 4_000, b.clone())).or_default() += 1;
                    }
                }
            }
            Kind::Session => {
                let mut by: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
                for (t, b) in rows {
                    by.entry(b).or_default().push(*t);
                }
                for (b, mut ts) in by {
                    ts.sort();
                    let mut open: Option<(i64, i64, i64)> = None;
                    for t in ts {
                        match open.as_mut() {
                            Some((_, end, n)) if t < *end => {
                                *end = t + 500;
                                *n += 1;
                            }
                            _ => {
                                if let Some((s, e, n)) = open.take() {
                                    out.insert((s, e, b.to_string()), n);
                                }
                                open = Some((t, t + 500, 1));
                            }
                        }
                    }
                    if let Some((s, e, n)) = open {
                        out.insert((s, e, b.to_string()), n);
                    }
                }
            }
        }
        out
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Publishes messages `range` in bursts of 50, one burst every 500 ms (so sessions of a
/// 500 ms gap close between bursts); for `Time::Attribute` and `Time::Column` each
/// carries its publishing time, recorded in `times` (message index -> ms).
async fn publish_bursts(
    topic: &str,
    range: std::ops::Range<usize>,
    time: Time,
    times: &mut BTreeMap<usize, i64>,
) {
    use google_cloud_pubsub::model::Message;
    let publisher = pubsub_connector_core::client::publisher(
        &profile(),
        &pubsub_connector_core::client::topic_path(PROJECT, topic),
    )
    .unwrap()
    .build()
    .await
    .unwrap();
    let items: Vec<usize> = range.collect();
    for burst in items.chunks(50) {
        let started = std::time::Instant::now();
        let mut pending = Vec::new();
        for &i in burst {
            let at = now_ms();
            times.insert(i, at);
            let mut v: serde_json::Value = serde_json::from_slice(&notification(i)).unwrap();
            let mut m = Message::new();
            match time {
                Time::Publish => {}
                Time::Attribute => {
                    m = m.set_attributes([("ts".to_string(), at.to_string())]);
                }
                Time::Column => v["created"] = at.into(),
            }
            pending.push(publisher.publish(m.set_data(serde_json::to_vec(&v).unwrap())));
        }
        for p in pending {
            p.await.unwrap();
        }
        if let Some(rest) = Duration::from_millis(500).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    publisher.flush().await;
}

/// The matrix's pipeline: `kind` windows, count per bucket, over `time`; `source_with`
/// is appended to the source table's options.
fn matrix_sql(t: &Topics, time: Time, kind: Kind, source_with: &str) -> String {
    let (columns, with) = match time {
        Time::Publish => ("bucket TEXT, name TEXT", ""),
        Time::Attribute => (
            "bucket TEXT, name TEXT",
            ", 'scan.event-time.attribute' = 'ts'",
        ),
        Time::Column => (
            "bucket TEXT, name TEXT, created TIMESTAMP, WATERMARK FOR created AS created - INTERVAL '1' SECOND",
            ", 'json.timestamp-format' = 'epoch-millis'",
        ),
    };
    format!(
        "CREATE TABLE objects ({columns}) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'json', 'scan.watermark.idle-timeout' = '30s',
            'scan.watermark.backlog-probe-interval' = '500ms' {with}{source_with});
         CREATE TABLE per_bucket (ws TIMESTAMP, we TIMESTAMP, bucket TEXT, n BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO per_bucket SELECT window.start, window.end, bucket, n FROM (
            SELECT {window} AS window, bucket, count(*) AS n
            FROM objects GROUP BY window, bucket);",
        sub = t.input_sub,
        out = t.output,
        e = endpoint(),
        window = kind.sql(),
    )
}

/// How a matrix run is driven.
#[derive(Debug, Clone, Copy)]
enum Drive {
    /// One `run` on `workers` workers.
    Run { workers: usize },
    /// One `run` on 2 workers, SIGKILLed after its third checkpoint, then run again.
    Killed,
    /// A `cluster` of 2 processes of 1 worker each.
    Cluster,
}

/// The other consumer of the matrix: it keeps a seeded 15% of what it is offered over the
/// first 10 s and gives each back 2 to 8 s later (`give_back`).
fn interference(give_back: GiveBack) -> Interference {
    Interference {
        seed: 44,
        take: 150,
        probability: 0.15,
        hold: (Duration::from_secs(2), Duration::from_secs(8)),
        give_back,
        window: Duration::from_secs(10),
    }
}

/// A backlog of 400 messages and a live tail of 600 (bursts of 50 every 500 ms) under
/// another consumer (`interference`): the window rows equal the oracle over every message
/// published, none late, each window with one value. `source_with` is appended to the
/// source table's options, `idle` is `--stop-when-idle`. Returns the run's (last)
/// stdout and stderr.
async fn under_simulated_delivery(
    name: &str,
    time: Time,
    kind: Kind,
    give_back: GiveBack,
    drive: Drive,
    source_with: &str,
    idle: &str,
) -> (String, String) {
    let (t, witness, other) = with_another_consumer(name, interference(give_back)).await;
    let mut times = BTreeMap::new();
    publish_bursts(&t.input, 0..400, time, &mut times).await;
    let w = Workdir::new(&matrix_sql(&t, time, kind, source_with));
    let common = [
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        idle,
        "--drain",
    ];
    let mut child = match drive {
        Drive::Run { workers } => {
            let workers = workers.to_string();
            let mut args = vec!["--workers", workers.as_str()];
            args.extend(common);
            w.spawn(&args)
        }
        Drive::Killed => w.spawn(&["--workers", "2", "--checkpoint-interval", "1s"]),
        Drive::Cluster => {
            let mut args = vec!["--processes", "2", "--workers", "1"];
            args.extend(common);
            w.spawn_cluster(&args)
        }
    };
    publish_bursts(&t.input, 400..1_000, time, &mut times).await;
    if let Drive::Killed = drive {
        wait_until("three checkpoints", Duration::from_secs(60), || {
            w.checkpoint_epoch().is_some_and(|e| e >= 3)
        })
        .await;
        signal(&child, "KILL");
        let _ = finish(child, Duration::from_secs(30)).await;
        child = w.spawn(&[
            "--workers",
            "2",
            "--checkpoint-interval",
            "1s",
            "--stop-when-idle",
            "15s",
            "--drain",
        ]);
    }
    let report = other.finish().await.unwrap();
    assert!(
        report.kept.len() >= 20,
        "the other consumer kept some: {report:?}"
    );
    let (code, out, err) = finish(child, Duration::from_secs(240)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("rows late") && !err.contains("rows late"),
        "{out}\n{err}"
    );
    let label = format!("{time:?} {kind:?} {drive:?}");
    assert_equals_oracle(&witness, 1_000, &times, time, kind, &t.output_sub, &label).await;
    (out, err)
}

/// The window rows written to `output_sub` (each window once, or again with the same
/// count) equal `kind`'s windows over the `n` messages the witness subscription holds, on
/// event time `time` (`times`: message index -> ms, for a column or an attribute).
async fn assert_equals_oracle(
    witness: &str,
    n: usize,
    times: &BTreeMap<usize, i64>,
    time: Time,
    kind: Kind,
    output_sub: &str,
    label: &str,
) {
    let rows: Vec<(i64, String)> = witnessed(witness, n)
        .await
        .into_iter()
        .map(|(published, v)| {
            let bucket = v["bucket"].as_str().unwrap().to_string();
            let i: usize = v["name"].as_str().unwrap()["object-".len()..]
                .trim_end_matches(".csv")
                .parse()
                .unwrap();
            let ms = match time {
                Time::Publish => published,
                Time::Attribute | Time::Column => times[&i],
            };
            (ms, bucket)
        })
        .collect();
    let expected = kind.windows(&rows);
    let got = admin::drain_messages(&profile(), output_sub, 1, None, Duration::from_secs(5))
        .await
        .unwrap();
    let ms = |v: &serde_json::Value| {
        pubsub_engine_format::parse_rfc3339(v.as_str().unwrap()).unwrap() / 1_000_000
    };
    let mut seen: BTreeMap<(i64, i64, String), i64> = BTreeMap::new();
    for m in got {
        let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        let key = (
            ms(&r["ws"]),
            ms(&r["we"]),
            r["bucket"].as_str().unwrap().to_string(),
        );
        let n = r["n"].as_i64().unwrap();
        if let Some(before) = seen.insert(key.clone(), n) {
            assert_eq!(before, n, "{key:?} written twice with different counts");
        }
    }
    assert_eq!(seen, expected, "{label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tumble_on_publish_time_under_late_nacks_on_two_splits_equals_the_oracle() {
    under_simulated_delivery(
        "bl-tumble",
        Time::Publish,
        Kind::Tumble,
        GiveBack::Nack,
        Drive::Run { workers: 2 },
        "",
        "12s",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_on_an_attribute_under_expired_leases_equals_the_oracle() {
    under_simulated_delivery(
        "bl-hop",
        Time::Attribute,
        Kind::Hop,
        GiveBack::LeaseExpiry,
        Drive::Run { workers: 1 },
        "",
        "12s",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_on_a_watermark_for_column_after_a_sigkill_equals_the_oracle() {
    under_simulated_delivery(
        "bl-session",
        Time::Column,
        Kind::Session,
        GiveBack::Nack,
        Drive::Killed,
        "",
        "12s",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tumble_on_a_cluster_of_two_processes_under_late_nacks_equals_the_oracle() {
    under_simulated_delivery(
        "bl-cluster",
        Time::Publish,
        Kind::Tumble,
        GiveBack::Nack,
        Drive::Cluster,
        "",
        "12s",
    )
    .await;
}

/// Parking under back-pressure: flow control lets the subtask hold 100 messages until a
/// checkpoint commits, and its paused buffer holds 10 more, so the backlog parks the
/// split again and again (each park nacks what it held; what the emulator had already
/// sent its stopped streams comes back after the 10 s stream ack deadline). Those
/// messages are unacked at the service until they come back, so the probe holds the
/// watermark behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_splits_under_late_nacks_lose_nothing_and_make_nothing_late() {
    let (out, _) = under_simulated_delivery(
        "bl-parked",
        Time::Publish,
        Kind::Tumble,
        GiveBack::Nack,
        Drive::Run { workers: 1 },
        ", 'scan.flow-control.max-outstanding-element-count' = '100',
           'scan.paused-split-buffer.max-messages' = '10',
           'scan.ack.max-duration-per-extension' = '10s'",
        "20s",
    )
    .await;
    assert!(summary_count(&out, "splits parked:") >= 1, "{out}");
}

/// Watermark alignment under the simulated delivery: `slow` reads a backlog published
/// before the job started at 40 messages per second, `fast` a live tail that another
/// consumer takes from and gives back late. With a drift of 2 s allowed, `fast` pauses
/// behind `slow` and parks at its paused-buffer cap (its messages nacked), then runs free
/// once `slow` is idle. Each table's windows equal the oracle over its own messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alignment_pauses_and_parks_under_late_nacks_and_both_tables_equal_the_oracle() {
    let (slow, slow_witness, slow_other) = with_another_consumer(
        "bl-align-slow",
        Interference {
            take: 0,
            ..interference(GiveBack::Nack)
        },
    )
    .await;
    let (fast, fast_witness, fast_other) =
        with_another_consumer("bl-align-fast", interference(GiveBack::Nack)).await;
    let (mut slow_times, mut fast_times) = (BTreeMap::new(), BTreeMap::new());
    publish_bursts(&slow.input, 0..400, Time::Publish, &mut slow_times).await;
    let table = |name: &str, sub: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (bucket TEXT, name TEXT) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
                'emulator-endpoint' = '{e}', 'format' = 'json',
                'scan.watermark.backlog-probe-interval' = '500ms',
                'scan.watermark.idle-timeout' = '3s',
                'scan.watermark.alignment.group' = 'g',
                'scan.watermark.alignment.max-drift' = '2s',
                'scan.watermark.alignment.update-interval' = '100ms'{extra});
             CREATE TABLE {name}_out (ws TIMESTAMP, we TIMESTAMP, bucket TEXT, n BIGINT) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
                'emulator-endpoint' = '{e}');
             INSERT INTO {name}_out SELECT window.start, window.end, bucket, n FROM (
                SELECT TUMBLE(INTERVAL '5' SECOND) AS window, bucket, count(*) AS n
                FROM {name} GROUP BY window, bucket);\n",
            out = if name == "slow" {
                &slow.output
            } else {
                &fast.output
            },
            e = endpoint()
        )
    };
    let sql = table(
        "slow",
        &slow.input_sub,
        ", 'scan.rate-limit.messages-per-second' = '40'",
    ) + &table(
        "fast",
        &fast.input_sub,
        ", 'scan.paused-split-buffer.max-messages' = '20',
           'scan.ack.max-duration-per-extension' = '10s'",
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&[
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "20s",
        "--drain",
    ]);
    publish_bursts(&fast.input, 0..600, Time::Publish, &mut fast_times).await;
    let report = fast_other.finish().await.unwrap();
    assert!(
        report.kept.len() >= 20,
        "the other consumer kept some: {report:?}"
    );
    slow_other.finish().await.unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(240)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("rows late") && !err.contains("rows late"),
        "{out}\n{err}"
    );
    assert!(summary_count(&out, "alignment pauses:") >= 1, "{out}");
    assert!(
        err.contains("is paused by watermark alignment and its paused buffer is full"),
        "the fast split was parked at its cap: {err}"
    );
    assert_equals_oracle(
        &slow_witness,
        400,
        &slow_times,
        Time::Publish,
        Kind::Tumble,
        &slow.output_sub,
        "slow",
    )
    .await;
    assert_equals_oracle(
        &fast_witness,
        600,
        &fast_times,
        Time::Publish,
        Kind::Tumble,
        &fast.output_sub,
        "fast",
    )
    .await;
}

/// Found by chaos seeds 12 and 19, which hung: another consumer on a subscription that
/// went quiet never woke at the end of its window, so `finish` waited for ever. It ends
/// at the end of its window now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_consumer_on_a_quiet_subscription_finishes_when_its_window_ends() {
    let t = topics("bl-quiet", 10).await;
    let other = interloper(
        &t.input_sub,
        Interference {
            window: Duration::from_secs(1),
            ..interference(GiveBack::Nack)
        },
    )
    .await;
    let report = tokio::time::timeout(Duration::from_secs(20), other.finish())
        .await
        .expect("finished after its 1 s window")
        .unwrap();
    assert!(report.kept.is_empty(), "{report:?}");
}
