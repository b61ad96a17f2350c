//! The window latency the backlog probe adds (issue 44, decision 0047): a live stream of
//! `--latency-seconds` seconds at 200 messages per second through `TUMBLE(1 s)` count on
//! publish time into a topic, three ways in each round: the probe off, on at its default
//! interval (2 s), and on every 500 ms. A window row's latency is its publish time at the
//! output topic less its window's end. Printed: the median and 90th percentile per way,
//! the medians' difference to the probe off (what the probe adds), and the pipeline's CPU
//! per 1,000 messages per way (the probe's task runs in the pipeline's process).
//!
//! What the probe adds: a window fires once the watermark passes its end plus the
//! out-of-orderness (1 s) on either way; with the probe, also once the subscription's
//! oldest unacked message is past that, and the source acks only after a checkpoint
//! commits (`--checkpoint-interval`, 1 s by default here, 10 s in `run`) and the reading
//! is at most one probe interval old.

use std::time::{Duration, Instant};

use pubsub_connector_core::admin;
use pubsub_schema::PubSubProfile;

use super::process::Watch;
use super::{metrics_addr, per_1k, run_pipeline, summary, PROJECT};
use crate::BenchArgs;

const PER_SECOND: usize = 200;

/// One way of running the windows.
#[derive(Clone, Copy)]
struct Way {
    name: &'static str,
    with: &'static str,
}

const WAYS: [Way; 3] = [
    Way {
        name: "probe off",
        with: "'scan.watermark.backlog-probe' = 'off'",
    },
    Way {
        name: "probe every 2 s (default)",
        with: "'scan.watermark.backlog-probe' = 'on'",
    },
    Way {
        name: "probe every 500 ms",
        with: "'scan.watermark.backlog-probe-interval' = '500ms'",
    },
];

/// Publishes `{"seq": i}` at [`PER_SECOND`] for `seconds`, in chunks every 100 ms.
async fn publish_live(profile: &PubSubProfile, topic: &str, seconds: u64) -> anyhow::Result<()> {
    let chunk = PER_SECOND / 10;
    for c in 0..seconds as usize * 10 {
        let started = Instant::now();
        let payloads = (c * chunk..(c + 1) * chunk)
            .map(|i| format!("{{\"seq\":{i}}}").into_bytes())
            .collect();
        admin::publish_all(profile, topic, payloads, chunk).await?;
        if let Some(rest) = Duration::from_millis(100).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    Ok(())
}

/// One run: (window latencies in ms, CPU seconds per 1,000 messages).
async fn measure(
    args: &BenchArgs,
    profile: &PubSubProfile,
    direct: &str,
    id: &str,
    way: Way,
) -> anyhow::Result<(Vec<f64>, f64)> {
    let (input, sub, output, out_sub) = (
        format!("{id}-in"),
        format!("{id}-in-sub"),
        format!("{id}-out"),
        format!("{id}-out-sub"),
    );
    admin::create_topic(profile, &input).await?;
    admin::create_topic(profile, &output).await?;
    admin::create_subscription(profile, &sub, &input, 60).await?;
    admin::create_subscription(profile, &out_sub, &output, 60).await?;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'subscription' = '{sub}', 'emulator-endpoint' = '{direct}', {with});
         CREATE TABLE dst (ws TIMESTAMP, n BIGINT) WITH ('connector' = 'pubsub', \
           'project' = '{PROJECT}', 'topic' = '{output}', 'emulator-endpoint' = '{direct}');
         INSERT INTO dst SELECT window.start, n FROM (
           SELECT TUMBLE(INTERVAL '1' SECOND) AS window, count(*) AS n FROM src GROUP BY window);",
        with = way.with
    );
    let addr = metrics_addr()?;
    let watch = Watch {
        addr: &addr,
        start: "messages_received",
        end: "messages_received",
        after: "messages_acked",
        gauges: &[
            "watermark_lag_ms",
            "backlog_oldest_unacked_age_ms",
            "pending_acks",
        ],
    };
    let extra = [
        "--workers",
        "1",
        "--stop-when-idle",
        "5s",
        "--checkpoint-interval",
        &args.checkpoint_interval,
    ];
    let started_ms = pubsub_connector_core::source::backlog::unix_ms() as i64;
    let (run, published) = tokio::join!(
        run_pipeline(args, "latency", &sql, &extra, watch, None),
        async {
            // The pipeline's first pull opens while this waits: what follows is live.
            tokio::time::sleep(Duration::from_secs(1)).await;
            publish_live(profile, &input, args.latency_seconds).await
        }
    );
    let (run, ()) = (run?, published?);
    let n = (PER_SECOND as u64) * args.latency_seconds;
    let read = super::process::count_after(&run.stdout, "messages read:");
    anyhow::ensure!(read == n, "{}: {read} of {n} messages read", way.name);
    let rows = admin::drain_messages(profile, &out_sub, 1, None, Duration::from_secs(3)).await?;
    // Windows wholly inside the live stream, from 2 s after its start to 2 s before its
    // end: the last ones fire on neither way (the newest event less 1 s never passes
    // them) before the idle stop.
    let last_ms = started_ms + 1_000 + 1_000 * args.latency_seconds as i64 - 2_000;
    let mut latencies = Vec::new();
    for m in rows {
        let row: serde_json::Value = serde_json::from_slice(&m.data)?;
        let ws = row["ws"]
            .as_str()
            .and_then(|s| pubsub_engine_format::parse_rfc3339(s).ok())
            .ok_or_else(|| anyhow::anyhow!("a window row without its start: {row}"))?
            / 1_000_000;
        let end = ws + 1_000;
        let t = m
            .publish_time
            .ok_or_else(|| anyhow::anyhow!("a row without a publish time"))?;
        let written = t.seconds() * 1_000 + i64::from(t.nanos()) / 1_000_000;
        if ws >= started_ms + 3_000 && end <= last_ms {
            latencies.push((written - end) as f64);
        }
    }
    anyhow::ensure!(
        latencies.len() + 7 >= args.latency_seconds as usize,
        "{}: only {} whole windows written during the live stream",
        way.name,
        latencies.len()
    );
    for name in [&sub, &out_sub] {
        let _ = admin::delete_subscription(profile, name).await;
    }
    for name in [&input, &output] {
        let _ = admin::delete_topic(profile, name).await;
    }
    Ok((latencies, per_1k(run.cpu_s, n)))
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// `--latency-seconds` of live messages through each way, `--rounds` times.
pub async fn window_latency(
    args: &BenchArgs,
    profile: &PubSubProfile,
    direct: &str,
) -> anyhow::Result<()> {
    println!(
        "window latency: {} s of {PER_SECOND} messages/s live through TUMBLE(1 s) count on \
         publish time (out-of-orderness 1 s, checkpoints every {}), 1 worker, rounds: {}; \
         latency = the row's publish time at the output less its window's end",
        args.latency_seconds, args.checkpoint_interval, args.rounds
    );
    let mut medians = vec![Vec::new(); WAYS.len()];
    let mut cpus = vec![Vec::new(); WAYS.len()];
    for r in 0..args.rounds {
        // The order of the ways rotates by round, so the emulator's drift falls on each.
        for k in 0..WAYS.len() {
            let i = (k + r as usize) % WAYS.len();
            let id = format!("latency-{r}-{i}");
            let (lat, cpu) = measure(args, profile, direct, &id, WAYS[i]).await?;
            println!(
                "round {r}: {}: {} windows, latency median {:.0} ms, p90 {:.0} ms; {cpu:.4} s CPU per 1,000",
                WAYS[i].name,
                lat.len(),
                percentile(lat.clone(), 0.5),
                percentile(lat.clone(), 0.9)
            );
            medians[i].push(percentile(lat, 0.5));
            cpus[i].push(cpu);
        }
    }
    for (i, way) in WAYS.iter().enumerate() {
        println!(
            "{} ms",
            summary(
                &format!("window latency median, {}", way.name),
                &medians[i],
                0
            )
        );
        println!(
            "{} s per 1,000 messages",
            summary(&format!("CPU, {}", way.name), &cpus[i], 4)
        );
        if i > 0 {
            let added: Vec<f64> = medians[i]
                .iter()
                .zip(&medians[0])
                .map(|(on, off)| on - off)
                .collect();
            println!(
                "{} ms",
                summary(&format!("latency the probe adds, {}", way.name), &added, 0)
            );
        }
    }
    Ok(())
}
