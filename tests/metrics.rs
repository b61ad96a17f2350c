//! `run --metrics-addr`: a real process on the real emulator serves GET /metrics in the
//! Prometheus text format while it runs; its counters move, carry the pipeline, operator
//! and subtask labels, agree with the exit summary, and every family is in docs/metrics.md.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(120);

/// One sample of a scrape: family name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed scrape: samples and each family's `# TYPE` and `# HELP`.
#[derive(Debug, Default)]
struct Scrape {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
}

impl Scrape {
    /// Sum of `name` over every label set.
    fn sum(&self, name: &str) -> f64 {
        self.of(name).map(|s| s.value).sum()
    }
    fn of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

/// Parses the Prometheus text format as this endpoint writes it (no escapes in label
/// values, no timestamps); panics on a line it does not understand.
fn parse(text: &str) -> Scrape {
    let mut out = Scrape::default();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            out.types.insert(name.into(), kind.into());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            out.helps.insert(name.into(), help.into());
        } else if line.starts_with('#') {
            continue;
        } else {
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').expect("closing brace")),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("label=value");
                    (k.to_string(), v.trim_matches('"').to_string())
                })
                .collect();
            out.samples.push(Sample {
                name: name.into(),
                labels,
                value: value.parse().unwrap_or_else(|_| panic!("value in {line}")),
            });
        }
    }
    out
}

/// `GET /metrics` over a plain TCP connection; `None` while nothing listens.
async fn scrape(addr: &str) -> Option<Scrape> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("a scrape answers within 10 s")
        .ok()?;
    let raw = String::from_utf8(raw).expect("UTF-8 reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    Some(parse(body))
}

/// Scrapes until `cond` holds on a scrape; fails naming `what` after [`LIMIT`].
async fn scrape_until(addr: &str, what: &str, cond: impl Fn(&Scrape) -> bool) -> Scrape {
    let start = Instant::now();
    loop {
        if let Some(s) = scrape(addr).await {
            if cond(&s) {
                return s;
            }
        }
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const RECEIVED: &str = "pubsub_connector_messages_received_total";
const ACKED: &str = "pubsub_connector_messages_acked_total";
const WRITTEN: &str = "pubsub_connector_rows_written_total";
const PENDING: &str = "pubsub_connector_pending_acks";

/// Every input message read, written and acknowledged, and nothing held.
fn drained(s: &Scrape, n: f64) -> bool {
    s.sum(ACKED) >= n && s.sum(WRITTEN) >= n && s.of(PENDING).count() > 0 && s.sum(PENDING) == 0.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_while_running_and_match_the_exit_summary() {
    let t = topics("metrics", 60).await;
    let wd = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let addr = format!("127.0.0.1:{}", closed_port());
    let child = wd.spawn(&["--checkpoint-interval", "1s", "--metrics-addr", &addr]);

    // Bound before the job starts: it answers before anything was read.
    let first = scrape_until(&addr, "the endpoint", |_| true).await;
    assert_eq!(first.sum(ACKED), 0.0);

    publish_seq(&t.input, 0..2500).await;
    let half = scrape_until(&addr, "the first 2500 messages acknowledged", |s| {
        drained(s, 2500.0)
    })
    .await;
    publish_seq(&t.input, 2500..5000).await;
    let done = scrape_until(&addr, "all 5000 messages acknowledged", |s| {
        drained(s, 5000.0)
    })
    .await;
    assert!(done.sum(RECEIVED) > half.sum(RECEIVED) && half.sum(RECEIVED) > first.sum(RECEIVED));
    assert!(done.sum(ACKED) > half.sum(ACKED) && half.sum(ACKED) > first.sum(ACKED));

    // Labels: the pipeline file's stem, the operator id and the subtask (2 workers).
    for name in [RECEIVED, ACKED, WRITTEN, PENDING] {
        let subtasks: Vec<&str> = done
            .of(name)
            .map(|s| s.labels["subtask"].as_str())
            .collect();
        assert_eq!(subtasks.len(), 2, "{name}: {subtasks:?}");
        for s in done.of(name) {
            assert_eq!(s.labels["pipeline"], "pipeline", "{s:?}");
            let op = &s.labels["operator"];
            assert!(op == "source-src" || op.ends_with("-sink-dst"), "{s:?}");
        }
    }
    // The runtime's own: checkpoints completed, the last epoch and its duration.
    let runtime = |name: &str| {
        let v: Vec<&Sample> = done.of(name).collect();
        assert_eq!(v.len(), 1, "{name}: {v:?}");
        assert_eq!(
            (
                v[0].labels["operator"].as_str(),
                v[0].labels["subtask"].as_str()
            ),
            ("runtime", "0")
        );
        v[0].value
    };
    assert!(runtime("pubsub_connector_checkpoints_completed_total") >= 1.0);
    assert!(runtime("pubsub_connector_last_completed_epoch") >= 1.0);
    runtime("pubsub_connector_checkpoint_duration_ms");

    // Every family has HELP and a type that fits its name, and a row in docs/metrics.md.
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
        .unwrap();
    for (name, kind) in &done.types {
        assert!(
            done.helps.get(name).is_some_and(|h| !h.is_empty()),
            "{name} has no HELP"
        );
        assert!(name.starts_with("pubsub_connector_"), "{name}");
        assert_eq!(
            name.ends_with("_total"),
            kind == "counter",
            "{name} is a {kind}"
        );
        assert!(
            page.contains(&format!("| `{name}` | {kind} |")),
            "docs/metrics.md's Metrics table has no row for {name} ({kind})"
        );
    }

    // Everything is acknowledged and nothing held, so the final checkpoint adds nothing:
    // the summary's counts are the last scrape's.
    signal(&child, "TERM");
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        summary_count(&stdout, "messages read:") as f64,
        done.sum(RECEIVED),
        "{stdout}"
    );
    assert_eq!(
        summary_count(&stdout, "rows written:") as f64,
        done.sum(WRITTEN),
        "{stdout}"
    );
    assert_eq!(
        summary_count(&stdout, "messages acknowledged:") as f64,
        done.sum(ACKED),
        "{stdout}"
    );
    // The endpoint ended with the job.
    assert!(
        scrape(&addr).await.is_none(),
        "the endpoint outlived the job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_address_in_use_exits_2_naming_the_option() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // Nothing is read: the endpoint is bound before the job connects anywhere.
    let t = Topics {
        input: "never-in".into(),
        input_sub: "never-in-sub".into(),
        output: "never-out".into(),
        output_sub: "never-out-sub".into(),
    };
    let wd = Workdir::new(&pipeline_sql(
        &t,
        &format!("127.0.0.1:{}", closed_port()),
        "",
    ));
    let child = wd.spawn(&["--metrics-addr", &addr]);
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("--metrics-addr {addr}")),
        "stderr: {stderr}"
    );
    drop(taken);
}

const OLDEST: &str = "pubsub_connector_oldest_unacked_message_age_seconds";
const LAG: &str = "pubsub_connector_event_time_lag_seconds";

/// The age gauges (issue 18): while a checkpoint is pending, the oldest held message's
/// age rises with the clock; once the checkpoint commits, nothing is held and both fall
/// to 0. Each series is per subtask and carries the subscription's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_unacked_age_rises_until_the_checkpoint_commits() {
    let t = topics("ages", 60).await;
    let wd = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let addr = format!("127.0.0.1:{}", closed_port());
    // Checkpoints 8 s apart: messages published just after one wait up to 8 s for the next.
    let child = wd.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "8s",
        "--metrics-addr",
        &addr,
    ]);
    scrape_until(&addr, "the first checkpoint", |s| {
        s.sum("pubsub_connector_last_completed_epoch") >= 1.0 && s.of(OLDEST).count() == 1
    })
    .await;
    let n = 300.0;
    publish_seq(&t.input, 0..300).await;
    // (when, oldest age, event-time lag) of every scrape holding all n and acking none.
    let mut held = Vec::new();
    let done = loop {
        let s = scrape_until(&addr, "a scrape", |_| true).await;
        if s.sum(ACKED) >= n {
            break s;
        }
        if s.sum(PENDING) == n && s.sum(ACKED) == 0.0 {
            held.push((Instant::now(), s.sum(OLDEST), s.sum(LAG)));
            let series: Vec<&Sample> = s.of(OLDEST).collect();
            assert_eq!(series.len(), 1, "{series:?}");
            assert_eq!(
                series[0].labels["subscription"],
                format!("projects/{PROJECT}/subscriptions/{}", t.input_sub)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (first, last) = (
        held.first().expect("a scrape while all messages were held"),
        held.last().expect("a scrape while all messages were held"),
    );
    let waited = last.0.duration_since(first.0).as_secs_f64();
    assert!(waited >= 2.0, "held for only {waited} s: {held:?}");
    // The age follows the clock (to within the scrape's own timing) and the newest held
    // message is never older than the oldest.
    assert!(
        last.1 - first.1 >= waited - 1.0,
        "the oldest age rose by {} s in {waited} s: {held:?}",
        last.1 - first.1
    );
    assert!(
        held.iter()
            .all(|(_, oldest, lag)| lag <= oldest && *lag > 0.0),
        "{held:?}"
    );
    // Committed: the next scrape that holds nothing shows both at 0.
    let after = scrape_until(&addr, "nothing held after the commit", |s| {
        s.sum(PENDING) == 0.0
    })
    .await;
    assert!(done.sum(ACKED) >= n);
    assert_eq!((after.sum(OLDEST), after.sum(LAG)), (0.0, 0.0));
    signal(&child, "TERM");
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
}
