//! `bench`: the same messages consumed (a) by a pipeline subscription -> topic and (b) by
//! a minimal raw-client loop with the same number of streaming pulls that acks at once.
//! Prints both throughputs, their ratio and the pipeline's CPU per 1,000 messages.

use std::time::{Duration, Instant};

use pubsub_connector_core::{admin, client, emulator::Emulator};
use pubsub_engine::sql::parse_pipeline;

use crate::BenchArgs;

const PROJECT: &str = "bench";

/// CPU seconds (user + system) process `pid` used so far, from /proc/PID/stat.
fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size of process `pid` in KiB (VmHWM from /proc/PID/status).
fn peak_rss_kib_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

async fn raw_loop(
    profile: &pubsub_schema::PubSubProfile,
    sub: &str,
    streams: usize,
    n: usize,
) -> anyhow::Result<usize> {
    let got = admin::drain(profile, sub, streams, Some(n), Duration::from_secs(15)).await?;
    Ok(got.len())
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let emu = tokio::task::spawn_blocking(Emulator::start).await??;
    // Talk to the emulator directly: the half-closing proxy would run in this process and
    // add its CPU to the pipeline's. Nothing here is killed, so it is not needed.
    let direct = format!("127.0.0.1:{}", emu.direct_port());
    let profile = client::emulator_profile(PROJECT, &direct);
    let streams = args.workers * args.pulls_per_worker;
    for t in ["bench-in", "bench-out"] {
        admin::create_topic(&profile, t).await?;
    }
    for s in ["warmup-sub", "raw-sub", "pipe-sub"] {
        admin::create_subscription(&profile, s, "bench-in", 60).await?;
    }
    admin::create_subscription(&profile, "bench-out-sub", "bench-out", 60).await?;
    let payloads: Vec<Vec<u8>> = (0..args.messages)
        .map(|i| {
            let pad = "x".repeat(args.message_bytes.saturating_sub(40));
            format!("{{\"seq\":{i},\"pad\":\"{pad}\"}}").into_bytes()
        })
        .collect();
    admin::publish_all(&profile, "bench-in", payloads, 5000).await?;
    println!(
        "published {} messages of ~{} bytes to 3 subscriptions",
        args.messages, args.message_bytes
    );
    // Warm the emulator's JIT before measuring.
    raw_loop(&profile, "warmup-sub", streams, args.messages).await?;

    let t = Instant::now();
    let raw = raw_loop(&profile, "raw-sub", streams, args.messages).await?;
    let raw_s = t.elapsed().as_secs_f64();

    let where_ = args
        .where_
        .as_deref()
        .map(|w| format!(" WHERE {w}"))
        .unwrap_or_default();
    let query = format!("INSERT INTO dst SELECT {} FROM src{where_};", args.select);
    println!("pipeline: {query} (policy '{}')", args.failure_policy);
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'subscription' = 'pipe-sub', 'emulator-endpoint' = '{ep}', 'scan.parallel-pull-count' = '{p}', \
           'scan.flow-control.max-outstanding-element-count' = '100000', \
           'scan.deserialization-failure-policy' = '{policy}');
         CREATE TABLE dst (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', \
           'topic' = 'bench-out', 'emulator-endpoint' = '{ep}', 'sink.batching.element-count-threshold' = '1000');
         {query}",
        ep = direct,
        p = args.pulls_per_worker,
        policy = args.failure_policy,
    );
    parse_pipeline(&sql)?; // fail here, not in the child, on a bad statement
    let dir = std::env::temp_dir().join(format!("pubsub-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("bench.sql"), &sql)?;
    // The pipeline runs as its own process, as users run it, so its CPU and peak memory
    // are measured alone: sampled from /proc every 50 ms until it exits.
    let t = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("run")
        .arg(dir.join("bench.sql"))
        .args([
            "--workers",
            &args.workers.to_string(),
            "--checkpoint-interval",
            "1s",
            "--stop-when-idle",
            "2s",
        ])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let (mut cpu, mut peak) = (0.0f64, 0u64);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        cpu = cpu.max(cpu_seconds_of(child.id()));
        peak = peak.max(peak_rss_kib_of(child.id()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The idle wait is not work: take it out of the pipeline's time.
    let pipe_s = (t.elapsed().as_secs_f64() - 2.0).max(0.001);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout)?;
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(status.success(), "the pipeline failed: {stdout}");
    let count = |label: &str| -> u64 {
        stdout
            .split(label)
            .nth(1)
            .and_then(|r| {
                r.trim_start()
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    let (read, written, acked) = (
        count("messages read:"),
        count("rows written:"),
        count("messages acknowledged:"),
    );

    let raw_rate = raw as f64 / raw_s;
    let pipe_rate = acked as f64 / pipe_s;
    println!("raw client loop ({streams} streams): {raw} messages, {raw_rate:.0} msg/s");
    println!(
        "pipeline ({} workers x {} pulls): {read} read, {written} written, {acked} acknowledged, {pipe_rate:.0} msg/s",
        args.workers, args.pulls_per_worker
    );
    println!("ratio pipeline/raw: {:.2}", pipe_rate / raw_rate);
    println!(
        "pipeline CPU: {:.3} s per 1,000 messages (process total, sampled)",
        cpu / (read.max(1) as f64 / 1000.0)
    );
    println!("pipeline peak RSS: {} MiB", peak / 1024);
    Ok(())
}
