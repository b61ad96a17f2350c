//! `pubsub-connector chaos`: the randomized fault campaign (issue 16). For each seed it
//! publishes messages carrying sequence numbers and real payloads while a real pipeline
//! (one `run`, or a 2-process `cluster`) runs under a seeded schedule of faults (SIGKILL,
//! SIGTERM and restart, network cuts of the source and sink paths, a stalled sink), then
//! runs it to completion and checks the delivery promise (see [`check`]). The last line
//! reads `chaos: N seeds, F faults injected, M messages, L lost, D duplicates, H hangs`;
//! the exit code is 1 when any invariant failed, and each failing seed is printed with
//! its schedule and replays with `--seed`.

mod check;
mod payload;
mod pipeline;
mod schedule;
mod seed;

use std::collections::BTreeMap;

use clap::Args;
use futures::StreamExt;
use pubsub_connector_core::emulator::Emulator;

use schedule::Schedule;

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// How many seeds to run, from `--first-seed` on.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    pub first_seed: u64,
    /// Run this one seed only (replays a failing seed's schedule exactly).
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
    pub seed: Option<u64>,
    /// Processes of the pipeline under test: 1 (`run`) or 2 (`cluster`); default: odd
    /// seeds 1, even seeds 2.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=2))]
    pub processes: Option<u64>,
    /// Messages published per seed.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub messages: u64,
    /// Seeds run at once (each on its own topics, sharing one emulator).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub parallel: u64,
}

/// Runs the campaign; `Ok(false)` when an invariant failed.
pub async fn run(args: ChaosArgs) -> anyhow::Result<bool> {
    pubsub_connector_core::wire_log::enable();
    let emulator = tokio::task::spawn_blocking(Emulator::start).await??;
    let dir = std::env::temp_dir().join(format!("pubsub-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let env = seed::Env {
        exe: std::env::current_exe()?,
        proxy: emulator.endpoint(),
        direct: format!("127.0.0.1:{}", emulator.direct_port()),
        dir: dir.clone(),
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed + args.seeds).collect(),
    };
    let schedules: Vec<Schedule> = seeds
        .iter()
        .map(|&s| {
            let processes = args.processes.unwrap_or(if s % 2 == 1 { 1 } else { 2 }) as usize;
            Schedule::of(s, processes, args.messages as usize)
        })
        .collect();
    println!(
        "chaos: {} seeds ({} at once), {} messages each, work dir {}",
        schedules.len(),
        args.parallel,
        args.messages,
        dir.display()
    );
    let env = &env;
    let mut results = futures::stream::iter(schedules.iter())
        .map(|s| async move { (s, seed::run(env, s).await) })
        .buffer_unordered(args.parallel as usize);
    let mut total = Totals::default();
    while let Some((schedule, outcome)) = results.next().await {
        match outcome {
            Ok(o) => total.add(schedule, o),
            Err(e) => {
                println!("seed {}: FAILED to run: {e:#}\n{schedule}", schedule.seed);
                total.failed_seeds += 1;
            }
        }
    }
    drop(results);
    let kinds: Vec<String> = total
        .by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "faults by kind: {}",
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds.join(", ")
        }
    );
    println!(
        "chaos: {} seeds, {} faults injected, {} messages, {} lost, {} duplicates, {} hangs",
        schedules.len(),
        total.faults,
        total.messages,
        total.lost,
        total.duplicates,
        total.hangs
    );
    if total.failed_seeds == 0 && !total.noted {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(total.failed_seeds == 0)
}

#[derive(Default)]
struct Totals {
    faults: usize,
    by_kind: BTreeMap<&'static str, usize>,
    messages: usize,
    lost: usize,
    duplicates: usize,
    hangs: usize,
    failed_seeds: usize,
    /// A seed left a note: its logs are kept.
    noted: bool,
}

impl Totals {
    fn add(&mut self, schedule: &Schedule, o: check::Outcome) {
        self.faults += o.faults.len();
        for f in &o.faults {
            *self.by_kind.entry(f.kind()).or_default() += 1;
        }
        self.messages += o.published;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.hangs += o.hangs;
        let kinds: Vec<&str> = o.faults.iter().map(|f| f.kind()).collect();
        if o.violations.is_empty() {
            println!(
                "seed {}: ok in {:.0}s: {} processes, faults [{}], {} published, 0 lost, {} duplicates, {} restarts",
                o.seed,
                o.elapsed.as_secs_f64(),
                schedule.processes,
                kinds.join(", "),
                o.published,
                o.duplicates,
                o.restarts
            );
        } else {
            self.failed_seeds += 1;
            println!(
                "seed {}: FAILED after {:.0}s (replay: pubsub-connector chaos --seed {} --messages {}{})\n{schedule}first violated invariant: {}",
                o.seed,
                o.elapsed.as_secs_f64(),
                o.seed,
                schedule.messages,
                format_args!(" --processes {}", schedule.processes),
                o.violations[0]
            );
            for more in &o.violations[1..] {
                println!("  also: {more}");
            }
        }
        for n in &o.notes {
            println!("  note: {n}");
            self.noted = true;
        }
    }
}
