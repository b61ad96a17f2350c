//! `bench --instructions N`: instructions per message of goal 1's pipeline and of the raw
//! client loop doing the same work, counted by callgrind (issue 45, decision 0049).
//!
//! Each side runs as its own process under `valgrind --tool=callgrind`, twice per round:
//! once over a base of N/4 messages and once over N/4 + N, each on a subscription of its
//! own holding the same messages. The difference of the two counts, divided by N, is the count per
//! message: start-up, planning, connecting and the idle wait before the stop are alike in
//! both runs and cancel. Instruction counts do not move with the machine's load or its
//! clock, unlike the CPU seconds of the wall-clock comparisons; they omit the kernel (the
//! system calls' own work), which those include. The raw loop's count moves by up to 12%
//! between rounds (the client's lease extensions follow thread timing), the pipeline's by
//! up to 1.5%: the medians of `--rounds` are reported (decision 0049).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pubsub_connector_core::admin;
use pubsub_schema::PubSubProfile;

use super::callgrind::{self, Counts, COMPONENTS};
use super::{payloads, subscription_to_topic_sql, summary, PROJECT};
use crate::BenchArgs;

/// The pipeline's checkpoint interval under callgrind. The run is about 50x slower than
/// natively, so at the bench's 1 s a checkpoint would cover some 400 messages instead of
/// 15,000 and their timing would move the count: two runs at 1 s differed by 2.3%, at
/// 10 s (`run`'s default) by 0.4% (decision 0049).
const CHECKPOINT_INTERVAL: &str = "10s";

/// Longest a run under callgrind may take (about 50x slower than natively).
const RUN_TIMEOUT: Duration = Duration::from_secs(1800);

/// The two sides.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Pipeline,
    Raw,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Pipeline => "pipeline",
            Side::Raw => "raw",
        }
    }
}

pub async fn instructions(
    args: &BenchArgs,
    profile: &PubSubProfile,
    direct: &str,
) -> anyhow::Result<()> {
    let valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output();
    anyhow::ensure!(
        valgrind.as_ref().is_ok_and(|o| o.status.success()),
        "bench --instructions runs the pipeline under callgrind: install valgrind (apt-get install valgrind)"
    );
    let n = args.instructions;
    let base = (n / 4).max(100);
    let sizes = [base, base + n];
    let dir = match &args.samples_dir {
        Some(d) => d.clone(),
        None => {
            std::env::temp_dir().join(format!("pubsub-bench-instructions-{}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&dir)?;
    for t in ["instr-out-pipeline", "instr-out-raw"] {
        admin::create_topic(profile, t).await?;
        admin::create_subscription(profile, &format!("{t}-sub"), t, 600).await?;
    }
    let rounds = args.rounds as usize;
    for size in sizes {
        let topic = format!("instr-in-{size}");
        admin::create_topic(profile, &topic).await?;
        for round in 0..rounds {
            for side in [Side::Pipeline, Side::Raw] {
                admin::create_subscription(profile, &sub(side, size, round), &topic, 600).await?;
            }
        }
        admin::publish_all(profile, &topic, payloads(size, args.message_bytes), 5000).await?;
    }
    println!(
        "instructions (callgrind): {n} messages of ~{} bytes over a base of {base}, rounds: {rounds}; pipeline \
         {} workers x {} pulls, checkpoints every {}; raw same-work loop on {} streams; callgrind files in {}",
        args.message_bytes,
        args.workers,
        args.pulls_per_worker,
        CHECKPOINT_INTERVAL,
        args.workers * args.pulls_per_worker,
        dir.display()
    );
    let mut splits: [Vec<Split>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (i, side) in [Side::Pipeline, Side::Raw].into_iter().enumerate() {
            let mut counts = Vec::new();
            for size in sizes {
                counts.push(run_counted(args, side, size, round, direct, &dir).await?);
            }
            let split = Split::between(&counts[0], &counts[1], n);
            println!(
                "round {round}: {} {} instructions over {base} messages, {} over {}: {} per message",
                side.name(),
                thousands(counts[0].total as i64),
                thousands(counts[1].total as i64),
                sizes[1],
                thousands(split.total)
            );
            splits[i].push(split);
        }
    }
    let [pipes, raws] = splits.map(|v| {
        let totals: Vec<f64> = v.iter().map(|s| s.total as f64).collect();
        (totals, v)
    });
    println!(
        "{}",
        summary("instructions per message, pipeline", &pipes.0, 0)
    );
    println!(
        "{}",
        summary("instructions per message, raw same work", &raws.0, 0)
    );
    let ratios: Vec<f64> = pipes
        .0
        .iter()
        .zip(&raws.0)
        .map(|(p, r)| p / r.max(1.0))
        .collect();
    println!(
        "{}",
        summary("ratio instructions pipeline/raw same work", &ratios, 2)
    );
    // The split and the functions of each side's median round.
    let (pipe, raw) = (median_split(pipes.1), median_split(raws.1));
    println!(
        "{:<52} {:>10} {:>10}",
        "per message, by component", "pipeline", "raw"
    );
    for (i, name) in COMPONENTS.iter().enumerate() {
        let (p, r) = (pipe.components[i], raw.components[i]);
        if p.abs() >= 50 || r.abs() >= 50 {
            println!("  {name:<50} {:>10} {:>10}", thousands(p), thousands(r));
        }
    }
    for (side, split) in [("pipeline", pipe), ("raw same work", raw)] {
        println!("{side}: the {TOP_FUNCTIONS} dearest functions per message (own instructions)");
        for (f, ir) in &split.top {
            let f: String = f.chars().take(150).collect();
            println!("  {ir:>8.0}  {f}");
        }
    }
    Ok(())
}

/// The round whose total is the median (the lower middle one of an even count).
fn median_split(mut v: Vec<Split>) -> Split {
    v.sort_by_key(|s| s.total);
    let mid = (v.len() - 1) / 2;
    v.swap_remove(mid)
}

/// Per message: the total, each component and each function, (large - small) / n.
struct Split {
    total: i64,
    components: Vec<i64>,
    /// The functions that cost the most per message, dearest first.
    top: Vec<(String, f64)>,
}

/// How many of the dearest functions are printed for each side.
const TOP_FUNCTIONS: usize = 30;

impl Split {
    fn between(small: &Counts, large: &Counts, n: usize) -> Split {
        let by = |c: &Counts| {
            let mut v = vec![0i64; COMPONENTS.len()];
            for (f, ir) in &c.by_function {
                let i = COMPONENTS
                    .iter()
                    .position(|x| *x == callgrind::component(f))
                    .expect("a listed component");
                v[i] += *ir as i64;
            }
            v
        };
        let (s, l) = (by(small), by(large));
        let n = n.max(1) as i64;
        let mut top: Vec<(String, f64)> = large
            .by_function
            .iter()
            .map(|(f, ir)| {
                let before = small.by_function.get(f).copied().unwrap_or(0);
                (f.clone(), (*ir as f64 - before as f64) / n as f64)
            })
            .collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        top.truncate(TOP_FUNCTIONS);
        Split {
            total: (large.total as i64 - small.total as i64) / n,
            components: l.iter().zip(&s).map(|(l, s)| (l - s) / n).collect(),
            top,
        }
    }
}

fn sub(side: Side, size: usize, round: usize) -> String {
    format!("instr-{}-{size}-{round}", side.name())
}

/// Runs `side` over the `size` messages of its subscription under callgrind and reads its
/// counts; fails unless every message was acknowledged.
async fn run_counted(
    args: &BenchArgs,
    side: Side,
    size: usize,
    round: usize,
    direct: &str,
    dir: &Path,
) -> anyhow::Result<Counts> {
    let label = format!("{}-{size}-{round}", side.name());
    let out_file = dir.join(format!("callgrind.{label}.out"));
    let mut cmd = tokio::process::Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--quiet"])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    let done_line = match side {
        Side::Pipeline => {
            let sql = subscription_to_topic_sql(
                args,
                &sub(side, size, round),
                "instr-out-pipeline",
                direct,
            );
            let work = dir.join(&label);
            // A fresh state directory: a checkpoint left by an earlier run would restore.
            let _ = std::fs::remove_dir_all(&work);
            std::fs::create_dir_all(&work)?;
            std::fs::write(work.join("bench.sql"), sql)?;
            cmd.arg(pipeline_bin(args)?)
                .arg("run")
                .arg(work.join("bench.sql"))
                .args(["--workers", &args.workers.to_string()])
                .args(["--checkpoint-interval", CHECKPOINT_INTERVAL])
                // Idle is measured from the last message: a slow start under callgrind
                // does not end the run early, and the wait is alike in both runs.
                .args(["--stop-when-idle", "5s"])
                .arg("--state-dir")
                .arg(work.join("state"));
            "messages acknowledged:"
        }
        Side::Raw => {
            cmd.arg(std::env::current_exe()?)
                .arg("bench-raw-same-work")
                .args(["--emulator", direct])
                .args(["--subscription", &sub(side, size, round)])
                .args(["--topic", "instr-out-raw"])
                .args([
                    "--streams",
                    &(args.workers * args.pulls_per_worker).to_string(),
                ])
                .args(["--messages", &size.to_string()]);
            "acked:"
        }
    };
    let out = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{} over {size} messages under callgrind took over {RUN_TIMEOUT:?}",
                side.name()
            )
        })??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let acked = super::count_after(&stdout, done_line);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    anyhow::ensure!(
        out.status.success() && acked as usize == size,
        "{label} (round {round}: {} over {size} messages under callgrind) acknowledged {acked} ({}); its \
         callgrind file is {}; the last lines of its stderr: {}",
        side.name(),
        out.status,
        out_file.display(),
        lines[lines.len().saturating_sub(20)..].join(" | ")
    );
    let text = std::fs::read_to_string(&out_file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", out_file.display()))?;
    callgrind::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", out_file.display()))
}

/// The binary the pipelines run (`--pipeline-bin`, else this one).
pub fn pipeline_bin(args: &BenchArgs) -> anyhow::Result<PathBuf> {
    Ok(match &args.pipeline_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    })
}

/// `1234567` as `1,234,567`.
fn thousands(v: i64) -> String {
    let s = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// `bench-raw-same-work` (hidden): the raw loop of [`super::raw::same_work`] as a process of
/// its own, so that callgrind counts it alone. Prints `acked: N`.
pub async fn raw_same_work(a: RawSameWorkArgs) -> anyhow::Result<()> {
    let profile = pubsub_connector_core::client::emulator_profile(PROJECT, &a.emulator);
    let (acked, _) = super::raw::same_work(
        &profile,
        &a.subscription,
        &a.topic,
        a.streams,
        a.messages,
        super::OUTSTANDING,
        super::BATCHING,
    )
    .await?;
    println!("acked: {acked}");
    Ok(())
}

#[derive(clap::Args)]
pub struct RawSameWorkArgs {
    /// The emulator's `host:port`.
    #[arg(long)]
    emulator: String,
    #[arg(long)]
    subscription: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 8)]
    streams: usize,
    #[arg(long)]
    messages: usize,
}
