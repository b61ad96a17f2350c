//! `bench`: each pipeline beside the raw client doing the same work, in the same run on
//! the same emulator (decision 0029, docs/performance.md):
//! 1. subscription -> topic, against (a) a loop that only consumes and acks and (b) a
//!    loop that publishes each payload and acks after the publish is confirmed;
//! 2. NEXMark bids -> topic, against a loop that generates the same bids and publishes
//!    them with the same batching;
//! 3. (`expressions.rs`, `windows.rs`) NEXMark bids -> blackhole: expressions and windows
//!    beside a bare projection of the same bids;
//! 4. (`probe.rs`, `latency.rs`) the backlog probe's round trip and CPU, and the window
//!    latency it adds beside the same windows without it.
//!
//! The pipelines run as their own processes (`run`), as users run them, so their CPU and
//! peak memory are their own; the baselines run in this process. The emulator's pace
//! swings from run to run, so each comparison runs `--rounds` times, the order of
//! pipeline and baseline alternating, and the medians are printed.

mod callgrind;
mod expressions;
mod instructions;
mod latency;
mod memory;
mod probe;
mod process;
mod raw;
mod windows;

use std::time::{Duration, Instant};

use pubsub_connector_core::{admin, client};
use pubsub_emulator_tools::emulator::Emulator;
use pubsub_engine_sql::parse_pipeline;

use crate::BenchArgs;
use process::{count_after, cpu_seconds_of, run_sampled, ChildRun, Watch};
use raw::Batching;

pub use instructions::{raw_same_work, RawSameWorkArgs};

pub(crate) const PROJECT: &str = "bench";
/// Every pipeline's and baseline's publish batching (the sink's defaults but the count).
const BATCHING: Batching = Batching {
    messages: 1000,
    bytes: 1_000_000,
    delay: Duration::from_millis(10),
};
/// Messages a stream may hold unacked (the source's flow control and the raw loops').
const OUTSTANDING: i64 = 100_000;
/// The sink's cap on unconfirmed publishes, for both the pipeline and the raw publisher.
const IN_FLIGHT: usize = 10_000;

/// How many sample files `--samples-dir` holds so far (they are numbered in run order).
static SAMPLES_WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `f` and returns its result, its wall seconds and this process's CPU seconds.
async fn measured<T>(
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, f64, f64)> {
    let (t, cpu) = (Instant::now(), cpu_seconds_of(std::process::id()));
    let out = f.await?;
    Ok((
        out,
        t.elapsed().as_secs_f64(),
        cpu_seconds_of(std::process::id()) - cpu,
    ))
}

/// Runs the pipeline and the baseline of round `round` one after the other, the baseline
/// first in even rounds, so that the emulator's drift falls on both alike.
async fn alternating<P, B>(
    round: u64,
    pipeline: impl std::future::Future<Output = anyhow::Result<P>>,
    baseline: impl std::future::Future<Output = anyhow::Result<B>>,
) -> anyhow::Result<(P, B)> {
    if round % 2 == 0 {
        let b = baseline.await?;
        Ok((pipeline.await?, b))
    } else {
        let p = pipeline.await?;
        Ok((p, baseline.await?))
    }
}

/// CPU seconds per 1,000 messages.
fn per_1k(cpu_s: f64, n: u64) -> f64 {
    cpu_s / (n.max(1) as f64 / 1000.0)
}

/// A free `127.0.0.1:port` for a pipeline's `--metrics-addr`.
fn metrics_addr() -> anyhow::Result<String> {
    Ok(format!(
        "127.0.0.1:{}",
        pubsub_emulator_tools::emulator::free_port()?
    ))
}

/// Runs `sql` as `pubsub-connector run --metrics-addr <watch.addr>` with `extra`
/// arguments in a scratch directory, sampled every 50 ms and watched by `watch` (see
/// [`Watch`]); `stop` ends it with SIGTERM (see [`run_sampled`]). With `--samples-dir`
/// the samples go to `<name>-<n>.csv` there.
async fn run_pipeline(
    args: &BenchArgs,
    name: &str,
    sql: &str,
    extra: &[&str],
    watch: Watch<'_>,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> anyhow::Result<ChildRun> {
    run_command(args, "run", name, sql, extra, watch, stop).await
}

/// [`run_pipeline`] with another subcommand of this binary (`cluster`): the child's own
/// CPU only (a `cluster` supervisor's children are not counted), `watch` on the metrics of
/// process 0.
async fn run_command(
    args: &BenchArgs,
    command: &str,
    name: &str,
    sql: &str,
    extra: &[&str],
    watch: Watch<'_>,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> anyhow::Result<ChildRun> {
    parse_pipeline(sql)?; // fail here, not in the child, on a bad statement
    let dir = std::env::temp_dir().join(format!("pubsub-bench-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("bench.sql"), sql)?;
    let mut cmd = std::process::Command::new(instructions::pipeline_bin(args)?);
    cmd.arg(command)
        .args(["--metrics-addr", watch.addr])
        .arg(dir.join("bench.sql"))
        .args(extra)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "warn");
    // Each scrape costs the pipeline CPU: 50 ms keeps it under 1% of a run.
    let out = run_sampled(cmd, Duration::from_millis(50), watch, stop).await;
    if let (Ok(run), Some(dir)) = (&out, &args.samples_dir) {
        std::fs::create_dir_all(dir)?;
        let n = SAMPLES_WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        run.write_csv(&dir.join(format!("{name}-{n}.csv")), &watch)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Watched by counters `start`, `end` and `after` (see [`Watch`]), no gauges.
fn counters<'a>(addr: &'a str, (start, end, after): (&'a str, &'a str, &'a str)) -> Watch<'a> {
    Watch {
        addr,
        start,
        end,
        after,
        gauges: &[],
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1, was 0");
    anyhow::ensure!(
        args.latency_seconds == 0 || args.latency_seconds >= 10,
        "--latency-seconds must be 0 (skip) or at least 10 (whole windows mid-stream), was {}",
        args.latency_seconds
    );
    crate::parse_positive_duration(&args.checkpoint_interval)
        .map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e}"))?;
    if args.messages
        + args.sink_messages as usize
        + args.backlog
        + args.probes
        + args.latency_seconds as usize
        + args.instructions
        > 0
    {
        let emu = tokio::task::spawn_blocking(Emulator::start).await??;
        // Talk to the emulator directly: the half-closing proxy would run in this process
        // and add its CPU to the baselines'. Nothing here is killed, so it is not needed.
        let direct = format!("127.0.0.1:{}", emu.direct_port());
        let profile = client::emulator_profile(PROJECT, &direct);
        if args.messages > 0 {
            subscription_to_topic(&args, &profile, &direct).await?;
        }
        if args.sink_messages > 0 {
            generator_to_topic(&args, &profile, &direct).await?;
        }
        if args.backlog > 0 {
            memory::backlog(&args, &profile, &direct).await?;
        }
        if args.probes > 0 {
            probe::probes(&args, &profile).await?;
        }
        if args.latency_seconds > 0 {
            latency::window_latency(&args, &profile, &direct).await?;
        }
        if args.instructions > 0 {
            instructions::instructions(&args, &profile, &direct).await?;
        }
    }
    if args.expression_rows > 0 {
        expressions::expressions(&args).await?;
    }
    if args.window_rows > 0 {
        windows::windows(&args).await?;
    }
    Ok(())
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `label: median (round values)`, each with `digits` decimals.
fn summary(label: &str, v: &[f64], digits: usize) -> String {
    let each: Vec<String> = v.iter().map(|x| format!("{x:.digits$}")).collect();
    format!(
        "{label}: {:.digits$} (rounds: {})",
        median(v.to_vec()),
        each.join(", ")
    )
}

/// Goal 1's messages: `{"seq":i,"pad":"xx..."}` of `bytes` bytes (at least 40).
fn payloads(n: usize, bytes: usize) -> Vec<Vec<u8>> {
    let pad = "x".repeat(bytes.saturating_sub(40));
    (0..n)
        .map(|i| format!("{{\"seq\":{i},\"pad\":\"{pad}\"}}").into_bytes())
        .collect()
}

/// Goal 1's `INSERT` (`--select`, `--where`).
fn query(args: &BenchArgs) -> String {
    let where_ = args
        .where_
        .as_deref()
        .map(|w| format!(" WHERE {w}"))
        .unwrap_or_default();
    format!("INSERT INTO dst SELECT {} FROM src{where_};", args.select)
}

/// Goal 1's pipeline: `subscription` -> [`query`] -> `topic`, with the raw loops' flow
/// control and publish batching.
fn subscription_to_topic_sql(
    args: &BenchArgs,
    subscription: &str,
    topic: &str,
    direct: &str,
) -> String {
    format!(
        "CREATE TABLE src (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'subscription' = '{subscription}', 'emulator-endpoint' = '{direct}', 'scan.parallel-pull-count' = '{p}', \
           'scan.flow-control.max-outstanding-element-count' = '{OUTSTANDING}', \
           'scan.deserialization-failure-policy' = '{policy}');
         CREATE TABLE dst (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'topic' = '{topic}', 'emulator-endpoint' = '{direct}', \
           'sink.batching.element-count-threshold' = '{count}', 'sink.in-flight.max-messages' = '{OUTSTANDING}');
         {query}",
        p = args.pulls_per_worker,
        policy = args.failure_policy,
        count = BATCHING.messages,
        query = query(args),
    )
}

/// One round of goal 1.
struct Round1 {
    raw_rate: f64,
    same_rate: f64,
    same_cpu_1k: f64,
    pipe_rate: f64,
    streaming_rate: f64,
    cpu_1k: f64,
    streaming_cpu_1k: f64,
    peak_mib: u64,
}

/// Goal 1: subscription -> decode -> encode -> topic.
async fn subscription_to_topic(
    args: &BenchArgs,
    profile: &pubsub_schema::PubSubProfile,
    direct: &str,
) -> anyhow::Result<()> {
    let streams = args.workers * args.pulls_per_worker;
    for t in ["bench-in", "bench-out", "bench-raw-out"] {
        admin::create_topic(profile, t).await?;
    }
    let mut subs = vec!["warmup".to_string()];
    for r in 0..args.rounds {
        subs.extend(["raw", "same", "pipe"].map(|k| format!("{k}-{r}")));
    }
    for s in &subs {
        admin::create_subscription(profile, s, "bench-in", 60).await?;
    }
    // Each output topic has a subscription no one reads, so the emulator stores what
    // either publishes alike.
    admin::create_subscription(profile, "bench-out-sub", "bench-out", 60).await?;
    admin::create_subscription(profile, "bench-raw-out-sub", "bench-raw-out", 60).await?;
    admin::publish_all(
        profile,
        "bench-in",
        payloads(args.messages, args.message_bytes),
        5000,
    )
    .await?;
    let query = query(args);
    println!(
        "subscription -> topic: {} messages of ~{} bytes, rounds: {}; raw loops on {streams} streams; \
         pipeline {} workers x {} pulls: {query} (policy '{}')",
        args.messages, args.message_bytes, args.rounds, args.workers, args.pulls_per_worker, args.failure_policy
    );
    // Warm the emulator's JIT before measuring.
    raw::consume(profile, "warmup", streams, args.messages).await?;

    let mut rounds = Vec::new();
    for r in 0..args.rounds {
        let sql = subscription_to_topic_sql(args, &format!("pipe-{r}"), "bench-out", direct);
        let workers = args.workers.to_string();
        let extra = [
            "--workers",
            &workers,
            "--stop-when-idle",
            "2s",
            "--checkpoint-interval",
            &args.checkpoint_interval,
        ];
        let addr = metrics_addr()?;
        let pipeline = run_pipeline(
            args,
            "subscription",
            &sql,
            &extra,
            // Rate: first to last message read (the reads are not gated by acks: flow
            // control holds all of them). The sink counts rows written, and the source
            // acks, only when a checkpoint completes, so ending there would measure the
            // checkpoint interval; the CPU runs on to the last ack.
            counters(
                &addr,
                ("messages_received", "messages_received", "messages_acked"),
            ),
            None,
        );
        let baselines = async {
            let (raw, raw_s, _) = measured(raw::consume(
                profile,
                &format!("raw-{r}"),
                streams,
                args.messages,
            ))
            .await?;
            let ((same, same_s), _, same_cpu) = measured(raw::same_work(
                profile,
                &format!("same-{r}"),
                "bench-raw-out",
                streams,
                args.messages,
                OUTSTANDING,
                BATCHING,
            ))
            .await?;
            anyhow::ensure!(
                raw == args.messages && same == args.messages,
                "a baseline did not finish every message: consume {raw}, same work {same} of {}",
                args.messages
            );
            anyhow::Ok((
                raw as f64 / raw_s,
                same as f64 / same_s,
                per_1k(same_cpu, same as u64),
            ))
        };
        let (run, (raw_rate, same_rate, same_cpu_1k)) = alternating(r, pipeline, baselines).await?;
        let read = count_after(&run.stdout, "messages read:");
        let acked = count_after(&run.stdout, "messages acknowledged:");
        anyhow::ensure!(
            acked as usize == args.messages,
            "the pipeline acknowledged {acked} of {} messages",
            args.messages
        );
        let streaming = run
            .streaming(args.messages as u64)
            .ok_or_else(|| anyhow::anyhow!("the pipeline never received a message"))?;
        let round = Round1 {
            raw_rate,
            same_rate,
            same_cpu_1k,
            // The idle wait is not work: take it out of the pipeline's time.
            pipe_rate: acked as f64 / (run.wall_s - 2.0).max(0.001),
            streaming_rate: acked as f64 / streaming.wall_s,
            cpu_1k: per_1k(run.cpu_s, read),
            streaming_cpu_1k: per_1k(streaming.cpu_s, acked),
            peak_mib: run.peak_kib / 1024,
        };
        println!(
            "round {r}: raw consume {:.0} msg/s; raw same work {:.0} msg/s, {:.4} s CPU per 1,000; \
             pipeline {:.0} msg/s whole run (first message {:.2} s after start), {:.0} msg/s streaming \
             (first to last message read), {:.4} s CPU per 1,000 to the last ack, last ack {:.2} s after \
             the last read (at the next checkpoint)",
            round.raw_rate, round.same_rate, round.same_cpu_1k, round.pipe_rate, streaming.start_s,
            round.streaming_rate, round.streaming_cpu_1k, streaming.after_s
        );
        rounds.push(round);
    }
    let col = |f: fn(&Round1) -> f64| rounds.iter().map(f).collect::<Vec<_>>();
    println!(
        "{}",
        summary("ratio pipeline/raw", &col(|r| r.pipe_rate / r.raw_rate), 2)
    );
    println!(
        "{}",
        summary(
            "ratio pipeline/raw same work",
            &col(|r| r.streaming_rate / r.same_rate),
            2
        )
    );
    println!(
        "{} s per 1,000 messages (process total, sampled)",
        summary("pipeline CPU", &col(|r| r.cpu_1k), 4)
    );
    println!(
        "{} s per 1,000 messages (first message read to last ack)",
        summary("pipeline streaming CPU", &col(|r| r.streaming_cpu_1k), 4)
    );
    println!(
        "{} s per 1,000 messages",
        summary("raw same work CPU", &col(|r| r.same_cpu_1k), 4)
    );
    println!(
        "{}",
        summary(
            "ratio CPU pipeline/raw same work",
            &col(|r| r.streaming_cpu_1k / r.same_cpu_1k),
            2
        )
    );
    let peak = rounds.iter().map(|r| r.peak_mib).max().unwrap_or(0);
    println!("pipeline peak RSS: {peak} MiB");
    Ok(())
}

/// Goal 2: NEXMark bids -> encode -> topic.
async fn generator_to_topic(
    args: &BenchArgs,
    profile: &pubsub_schema::PubSubProfile,
    direct: &str,
) -> anyhow::Result<()> {
    let n = args.sink_messages;
    let mut topics = vec!["sink-warmup".to_string()];
    for r in 0..args.rounds {
        topics.extend([format!("sink-raw-{r}"), format!("sink-pipe-{r}")]);
    }
    for t in &topics {
        admin::create_topic(profile, t).await?;
        admin::create_subscription(profile, &format!("{t}-sub"), t, 60).await?;
    }
    println!("nexmark -> topic: {n} bids, rounds: {}", args.rounds);
    raw::publish_generated(profile, "sink-warmup", n.min(20_000), BATCHING, IN_FLIGHT).await?;
    let bids = expressions::nexmark_bids(n);
    let (mut rate, mut cpu, mut peak) = (Vec::new(), Vec::new(), 0);
    for r in 0..args.rounds {
        let sql = format!(
            "CREATE TABLE bids{bids}
             CREATE TABLE dst (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, \
               date_time TIMESTAMP, extra TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
               'topic' = 'sink-pipe-{r}', 'emulator-endpoint' = '{direct}', 'json.timestamp-format' = 'epoch-millis', \
               'sink.batching.element-count-threshold' = '{count}', 'sink.in-flight.max-messages' = '{IN_FLIGHT}');
             INSERT INTO dst SELECT * FROM bids;",
            count = BATCHING.messages,
        );
        // A sink counts its rows written when a checkpoint collects their confirmations:
        // checkpoints every 100 ms keep that count within 0.1 s of the publishes (at the
        // default 1 s, a 2 s run would be measured to the next whole second).
        let addr = metrics_addr()?;
        let pipeline = run_pipeline(
            args,
            "sink",
            &sql,
            &["--workers", "1", "--checkpoint-interval", "100ms"],
            counters(&addr, ("rows_written", "rows_written", "rows_written")),
            None,
        );
        let topic = format!("sink-raw-{r}");
        let baseline = measured(raw::publish_generated(
            profile, &topic, n, BATCHING, IN_FLIGHT,
        ));
        let (run, (raw, raw_s, raw_cpu)) = alternating(r, pipeline, baseline).await?;
        let written = count_after(&run.stdout, "rows written:");
        anyhow::ensure!(
            written == n && raw as u64 == n,
            "not every bid was published: pipeline {written}, raw {raw} of {n}"
        );
        let streaming = run
            .streaming(n)
            .ok_or_else(|| anyhow::anyhow!("the sink never wrote a row"))?;
        let (raw_rate, pipe_rate) = (raw as f64 / raw_s, written as f64 / streaming.wall_s);
        let (raw_1k, sink_1k) = (per_1k(raw_cpu, n), per_1k(streaming.cpu_s, n));
        println!(
            "round {r}: raw publisher {raw_rate:.0} msg/s, {raw_1k:.4} s CPU per 1,000; sink {pipe_rate:.0} msg/s \
             first to last confirmed row (first {:.2} s after start, whole run {:.2} s), {sink_1k:.4} s CPU per 1,000",
            streaming.start_s, run.wall_s
        );
        rate.push(pipe_rate / raw_rate);
        cpu.push(sink_1k / raw_1k);
        peak = peak.max(run.peak_kib / 1024);
    }
    println!("{}", summary("ratio sink/raw publisher", &rate, 2));
    println!("{}", summary("ratio CPU sink/raw publisher", &cpu, 2));
    println!("sink peak RSS: {peak} MiB");
    Ok(())
}
