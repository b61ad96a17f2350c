//! Goal 4: memory under a backlog with a slow sink. A subscription holds `--backlog`
//! messages; the pipeline reads it into a topic whose network path (a [`TcpCutter`] in
//! front of the emulator, this process) first runs free, so that the source's pace can be
//! measured, and is then limited to `--sink-pace` of that pace for `--backlog-seconds`.
//! The source's flow control is `--backlog-max-outstanding` messages per subtask, its
//! bytes limit and paused-split buffers are the defaults (2x flow control). The
//! pipeline's RSS and held messages (`pending_acks`) are sampled every 50 ms; the summary
//! gives the bytes each held message costs and the bound that the caps promise.

use std::time::{Duration, Instant};

use pubsub_connector_core::admin;
use pubsub_connector_core::source::policy;
use pubsub_emulator_tools::tcp_cutter::TcpCutter;
use pubsub_schema::SubscriberOptionsConfig;

use super::process::{counter_sum, scrape, Sample, Watch};
use super::{metrics_addr, run_pipeline, PROJECT};
use crate::BenchArgs;

/// Seconds the sink's path runs free while the source's pace is measured.
const PACE_SECONDS: f64 = 10.0;
/// Messages published per `publish_all` call while the backlog is built.
const PUBLISH_CHUNK: usize = 50_000;
/// Messages the raw client consumes after the run, to measure the emulator's pace.
const RAW_SAMPLE: usize = 5000;
/// Gauges sampled with each reading: held messages and their payload bytes.
const GAUGES: &[&str] = &["pending_acks", "buffered_bytes"];

/// What the controller saw: seconds since the pipeline started at which the limit was
/// set and lifted, and the source's free pace (msg/s).
struct Phases {
    limited_from_s: f64,
    limited_to_s: f64,
    pace: f64,
}

/// Goal 4: see the module docs.
pub async fn backlog(
    args: &BenchArgs,
    profile: &pubsub_schema::PubSubProfile,
    direct: &str,
) -> anyhow::Result<()> {
    let n = args.backlog;
    admin::create_topic(profile, "backlog-in").await?;
    admin::create_subscription(profile, "backlog-sub", "backlog-in", 60).await?;
    admin::create_topic(profile, "backlog-out").await?;
    admin::create_subscription(profile, "backlog-out-sub", "backlog-out", 60).await?;
    let pad = "x".repeat(args.message_bytes.saturating_sub(40));
    let t = Instant::now();
    for from in (0..n).step_by(PUBLISH_CHUNK) {
        let payloads = (from..(from + PUBLISH_CHUNK).min(n))
            .map(|i| format!("{{\"seq\":{i},\"pad\":\"{pad}\"}}").into_bytes())
            .collect();
        admin::publish_all(profile, "backlog-in", payloads, 5000).await?;
    }
    println!(
        "backlog: {n} messages of ~{} bytes published in {:.0} s; pipeline {} workers x {} pulls, \
         flow control {} messages per subtask, default bytes and buffer caps, checkpoints every {}",
        args.message_bytes,
        t.elapsed().as_secs_f64(),
        args.workers,
        args.pulls_per_worker,
        args.backlog_max_outstanding,
        args.checkpoint_interval
    );
    let cutter = TcpCutter::start(direct).await?;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'subscription' = 'backlog-sub', 'emulator-endpoint' = '{direct}', \
           'scan.parallel-pull-count' = '{}', 'scan.flow-control.max-outstanding-element-count' = '{}');
         CREATE TABLE dst (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'topic' = 'backlog-out', 'emulator-endpoint' = '{}');
         INSERT INTO dst SELECT * FROM src;",
        args.pulls_per_worker,
        args.backlog_max_outstanding,
        cutter.endpoint()
    );
    let addr = metrics_addr()?;
    let workers = args.workers.to_string();
    let extra = [
        "--workers",
        &workers,
        "--checkpoint-interval",
        &args.checkpoint_interval,
    ];
    let watch = Watch {
        addr: &addr,
        start: "messages_received",
        end: "messages_received",
        after: "rows_written",
        gauges: GAUGES,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let t0 = Instant::now();
    let pipeline = run_pipeline(args, "backlog", &sql, &extra, watch, Some(stop_rx));
    let control = async {
        let phases = control(args, &addr, &cutter, t0).await;
        let _ = stop_tx.send(());
        phases
    };
    let (run, phases) = tokio::join!(pipeline, control);
    let (run, phases) = (run?, phases?);
    // The raw client's pace on what is left of the backlog: the emulator serves a large
    // backlog far slower than a small one, and this tells the two apart from the source.
    let t = Instant::now();
    let raw = super::raw::consume(
        profile,
        "backlog-sub",
        args.workers * args.pulls_per_worker,
        RAW_SAMPLE,
    )
    .await?;
    println!(
        "backlog: the raw client consumed {raw} messages of the remaining backlog at {:.0} msg/s \
         on as many streams",
        raw as f64 / t.elapsed().as_secs_f64()
    );
    report(args, &run.samples, &phases, run.peak_kib)
}

/// Waits for the first message, measures the source's pace with the sink's path free
/// for [`PACE_SECONDS`], then limits the path to `--sink-pace` of the bytes it carried
/// per message for `--backlog-seconds`. Errors when no message arrives within 60 s.
async fn control(
    args: &BenchArgs,
    addr: &str,
    cutter: &TcpCutter,
    t0: Instant,
) -> anyhow::Result<Phases> {
    // Rows written, not messages received: a split that parks nacks what it paused and
    // reads it again, so received counts redeliveries. (A row is counted when Pub/Sub
    // confirms its publish.)
    let written = || async { counter_sum(&scrape(addr).await, "rows_written") };
    let first = Instant::now();
    while written().await == 0 {
        anyhow::ensure!(
            first.elapsed() < Duration::from_secs(60),
            "the pipeline wrote no row within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (r0, b0, p0) = (written().await, cutter.uploaded_bytes(), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(PACE_SECONDS)).await;
    let (r1, b1) = (written().await, cutter.uploaded_bytes());
    anyhow::ensure!(
        r1 > r0,
        "no row was written in the {PACE_SECONDS} s with the sink free: the backlog of \
         {} drained before the slowed phase; use a larger --backlog",
        args.backlog
    );
    let pace = (r1 - r0) as f64 / p0.elapsed().as_secs_f64();
    // The sink's bytes on the wire per row written (payload, attributes, gRPC framing).
    let wire = (b1 - b0) as f64 / (r1 - r0) as f64;
    let limit = (args.sink_pace * pace * wire).max(1.0) as u64;
    cutter.limit_upload(Some(limit));
    let limited_from_s = t0.elapsed().as_secs_f64();
    println!(
        "backlog: pipeline pace {pace:.0} rows/s with the sink free ({wire:.0} wire bytes per row); \
         sink path limited to {limit} bytes/s ({}x) for {} s",
        args.sink_pace, args.backlog_seconds
    );
    tokio::time::sleep(Duration::from_secs(args.backlog_seconds)).await;
    // Lifted, so that the stop's final checkpoint does not wait on the slow path.
    cutter.limit_upload(None);
    Ok(Phases {
        limited_from_s,
        limited_to_s: t0.elapsed().as_secs_f64(),
        pace,
    })
}

/// Prints the figures of goal 4 from the samples.
fn report(args: &BenchArgs, s: &[Sample], p: &Phases, peak_kib: u64) -> anyhow::Result<()> {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let idle = s
        .iter()
        .take_while(|x| x.started == 0)
        .last()
        .ok_or_else(|| anyhow::anyhow!("no sample before the first message"))?;
    let limited: Vec<&Sample> = s
        .iter()
        .filter(|x| x.at_s >= p.limited_from_s && x.at_s <= p.limited_to_s)
        .collect();
    anyhow::ensure!(limited.len() >= 4, "too few samples under the limit");
    // The sink's pace under the limit: rows written (confirmed publishes) over
    // the limited phase, against the free source pace.
    let (a, b) = (limited[0], limited[limited.len() - 1]);
    // Nothing written under the limit: the backlog ran out (or what was left is leased
    // to parked splits' closed streams, which the emulator holds for the stream ack
    // deadline), so the figures below would describe an idle process.
    anyhow::ensure!(
        b.after > a.after,
        "no row was written while the sink was slowed: the backlog of {} ran out (or \
         what is left is leased to parked splits' closed streams until the stream ack \
         deadline); use a larger --backlog, e.g. 1000000",
        args.backlog
    );
    let sink_pace = (b.after - a.after) as f64 / (b.at_s - a.at_s);
    let half = limited.len() / 2;
    let mean_mib =
        |xs: &[&Sample]| xs.iter().map(|x| mib(x.rss_kib)).sum::<f64>() / xs.len() as f64;
    let (first_half, second_half) = (mean_mib(&limited[..half]), mean_mib(&limited[half..]));
    let rss_max = limited.iter().map(|x| x.rss_kib).max().unwrap_or(0);
    let rss_min = limited.iter().map(|x| x.rss_kib).min().unwrap_or(0);
    // Bytes per held message: what the process holds above its idle RSS, over the
    // messages it holds, at the sample holding the most (RSS rises with held messages
    // and stays near its high-water mark after they are freed: the allocator keeps the
    // pages, so the highest RSS sample may hold few).
    let top = s
        .iter()
        .max_by_key(|x| x.gauges[0])
        .expect("samples under the limit");
    let held_max = top.gauges[0];
    let per_held =
        (top.rss_kib.saturating_sub(idle.rss_kib) * 1024) as f64 / held_max.max(1) as f64;
    println!(
        "backlog: sink pace under the limit {sink_pace:.0} rows/s = {:.2} of the free pace",
        sink_pace / p.pace
    );
    println!(
        "backlog RSS under the limit: {:.0} to {:.0} MiB over {:.0} s (mean of first half {first_half:.0} MiB, \
         second half {second_half:.0} MiB); idle before the first message {:.0} MiB; peak of the run {:.0} MiB",
        mib(rss_min),
        mib(rss_max),
        p.limited_to_s - p.limited_from_s,
        mib(idle.rss_kib),
        mib(peak_kib)
    );
    println!(
        "backlog held messages: at most {held_max} (pending_acks, all subtasks, at {:.0} s); {per_held:.0} bytes \
         of RSS above idle per held message there ({:.0} bytes of payload each)",
        top.at_s,
        top.gauges[1] as f64 / held_max.max(1) as f64,
    );
    // The caps per subtask (one split each: one subscription, `--workers` subtasks):
    // taken messages (flow control) and paused ones (2x flow control), in messages and
    // payload bytes; whichever binds first.
    let interval = crate::parse_positive_duration(&args.checkpoint_interval)
        .map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e}"))?;
    let payload = top.gauges[1] as f64 / top.gauges[0].max(1) as f64;
    let count = policy::effective_max_outstanding(
        Some(args.backlog_max_outstanding),
        interval,
        args.pulls_per_worker as u32,
    );
    let bytes = SubscriberOptionsConfig::default().max_outstanding_bytes as f64;
    let by_bytes = |bytes: f64| (bytes / payload.max(1.0)) as u64;
    let taken = count.min(by_bytes(bytes));
    let paused = (2 * count).min(by_bytes(2.0 * bytes));
    let held_cap = args.workers as u64 * (taken + paused);
    let bound_kib = idle.rss_kib + (held_cap as f64 * per_held / 1024.0) as u64;
    println!(
        "backlog bound: idle {:.0} MiB + {held_cap} held messages at most ({} subtasks x ({taken} taken + \
         {paused} paused)) x {per_held:.0} bytes = {:.0} MiB; peak {:.0} MiB is {:.2} of it",
        mib(idle.rss_kib),
        args.workers,
        mib(bound_kib),
        mib(peak_kib),
        peak_kib as f64 / bound_kib as f64
    );
    println!(
        "ratio RSS second half/first half under the limit: {:.2}",
        second_half / first_half
    );
    Ok(())
}
