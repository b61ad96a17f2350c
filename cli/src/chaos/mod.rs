//! `pubsub-connector chaos`: the randomized fault campaign (issues 16 and 31). For each
//! seed it publishes messages carrying sequence numbers and real payloads (JSON, or Avro
//! on alternate seeds) while a real pipeline, hop1 (one `run`, or a 2-process `cluster`),
//! runs under a seeded schedule of faults (SIGKILL, SIGTERM and restart, aborts, network
//! cuts of the source, sink and dead-letter paths, a stalled sink, a recreated sink
//! topic); then runs hop1 to completion and hop2, which deduplicates hop1's output on its
//! record ids, and checks the delivery promise: at least once through hop1, exactly once
//! through hop2 (see `check.rs`), windows equal to a batch GROUP BY of what hop1 wrote
//! (`window_check.rs`), and every process outcome (see `rules.rs`). The last
//! lines read
//! `chaos: N seeds, F faults injected, M messages, L lost, D duplicates, H hangs` and
//! `chaos end to end: N seeds, M messages, L lost, D duplicates after deduplication`;
//! the exit code is 1 when any invariant failed, and each failing seed is printed with
//! its schedule and replays with `--seed`. docs/fault-testing.md says more.
//!
//! Modules: `schedule` (what a seed decides), `payload` (what is published and what must
//! come out), `sql` (the two pipelines), `pipeline` (their processes), `outages` (the
//! cutters' bookkeeping), `supervise` (the fault loop, which records and decides
//! nothing), `seed` (one seed in order), `check` (the data invariants) and `rules` (the
//! verdicts on stops, exits and hangs).

mod check;
mod outages;
mod payload;
mod pipeline;
mod rules;
mod schedule;
mod seed;
mod sql;
mod supervise;
mod window_check;

use std::collections::BTreeMap;

use clap::Args;
use futures::StreamExt;
use pubsub_emulator_tools::emulator::Emulator;

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
    /// The input's format: json or avro; default: seeds 4k..4k+3 json for even k, avro
    /// for odd k (so every pair of process and worker counts meets both).
    #[arg(long, value_parser = ["json", "avro"])]
    pub format: Option<String>,
    /// Messages published per seed.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub messages: u64,
    /// Seeds run at once (each on its own topics, sharing one emulator).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub parallel: u64,
}

/// Runs the campaign; `Ok(false)` when an invariant failed.
pub async fn run(args: ChaosArgs) -> anyhow::Result<bool> {
    pubsub_emulator_tools::wire_log::enable();
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
            let format = match args.format.as_deref() {
                Some("avro") => payload::Format::Avro,
                Some(_) => payload::Format::Json,
                None if (s / 4) % 2 == 1 => payload::Format::Avro,
                None => payload::Format::Json,
            };
            Schedule::of(s, processes, format, args.messages as usize)
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
    total.print(schedules.len());
    let ok = total.failed_seeds == 0 && total.e2e_lost == 0 && total.e2e_duplicates == 0;
    if ok && !total.noted {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(ok)
}

/// A seed's or a fault kind's figures.
#[derive(Default, Clone, Copy)]
struct Figures {
    seeds: usize,
    faults: usize,
    lost: usize,
    duplicates: usize,
    e2e_duplicates: usize,
    violations: usize,
}

#[derive(Default)]
struct Totals {
    faults: usize,
    messages: usize,
    lost: usize,
    duplicates: usize,
    e2e_lost: usize,
    e2e_duplicates: usize,
    hangs: usize,
    failed_seeds: usize,
    /// By fault kind; a seed counts under each kind it injected (`none`: no fault could
    /// be injected).
    by_kind: BTreeMap<&'static str, Figures>,
    /// A seed left a note: its logs are kept.
    noted: bool,
}

impl Totals {
    fn add(&mut self, schedule: &Schedule, o: check::Outcome) {
        self.faults += o.faults.len();
        self.messages += o.published;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.e2e_lost += o.e2e_lost;
        self.e2e_duplicates += o.e2e_duplicates;
        self.hangs += o.hangs;
        let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
        for f in &o.faults {
            *kinds.entry(f.kind()).or_default() += 1;
        }
        if kinds.is_empty() {
            kinds.insert("none", 0);
        }
        for (kind, n) in &kinds {
            let k = self.by_kind.entry(kind).or_default();
            k.seeds += 1;
            k.faults += n;
            k.lost += o.lost;
            k.duplicates += o.duplicates;
            k.e2e_duplicates += o.e2e_duplicates;
            k.violations += o.violations.len();
        }
        let names: Vec<&str> = o.faults.iter().map(|f| f.kind()).collect();
        let format = o.format.map_or("?", payload::Format::name);
        if o.violations.is_empty() {
            println!(
                "seed {}: ok in {:.0}s: {}, {format} input, faults [{}], {} published, 0 lost, {} ({} after deduplication), {}",
                o.seed,
                o.elapsed.as_secs_f64(),
                check::count(schedule.processes, "process", "processes"),
                names.join(", "),
                o.published,
                check::count(o.duplicates, "duplicate", "duplicates"),
                o.e2e_duplicates,
                check::count(o.restarts, "restart", "restarts"),
            );
        } else {
            self.failed_seeds += 1;
            println!(
                "seed {}: FAILED after {:.0}s (replay: pubsub-connector chaos --seed {} --messages {} --processes {} --format {})\n{schedule}first violated invariant: {}",
                o.seed,
                o.elapsed.as_secs_f64(),
                o.seed,
                schedule.messages,
                schedule.processes,
                schedule.format.name(),
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

    fn print(&self, seeds: usize) {
        println!("by fault kind (a seed counts under each kind it injected):");
        println!(
            "  {:<26} {:>5} {:>6} {:>5} {:>17} {:>16} {:>10}",
            "kind",
            "seeds",
            "faults",
            "lost",
            "dup. before dedup",
            "dup. after dedup",
            "violations"
        );
        for (kind, f) in &self.by_kind {
            println!(
                "  {kind:<26} {:>5} {:>6} {:>5} {:>17} {:>16} {:>10}",
                f.seeds, f.faults, f.lost, f.duplicates, f.e2e_duplicates, f.violations
            );
        }
        println!(
            "chaos: {} seeds, {} faults injected, {} messages, {} lost, {} duplicates, {} hangs",
            seeds, self.faults, self.messages, self.lost, self.duplicates, self.hangs
        );
        println!(
            "chaos end to end: {} seeds, {} messages, {} lost, {} duplicates after deduplication",
            seeds, self.messages, self.e2e_lost, self.e2e_duplicates
        );
    }
}
