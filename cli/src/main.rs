//! `pubsub-connector`: run SQL pipelines between Pub/Sub subscriptions and topics on the
//! Timely runtime (SPEC 9).

mod bench;
mod chaos;
mod cluster;
mod job;
mod metrics_catalog;
mod metrics_http;
mod pipeline;
mod progress;
mod quickstart;
mod quickstart_builds;
mod quickstart_join;
mod resources;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pubsub-connector",
    version,
    about = "Google Cloud Pub/Sub source and sink pipelines, acknowledged only after each checkpoint"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline file of CREATE TABLE and INSERT INTO ... SELECT statements.
    Run(RunArgs),
    /// Run a pipeline as a cluster of --processes `run` processes on this machine,
    /// restarting them all from the last completed checkpoint when one fails.
    Cluster(cluster::ClusterArgs),
    /// Start an emulator, publish 100,000 NEXMark bids, run examples/quickstart.sql, check every bid arrived.
    Quickstart(QuickstartArgs),
    /// Compare pipeline throughput with a raw client loop on the emulator.
    Bench(BenchArgs),
    /// Run a local Pub/Sub emulator (behind the half-closing proxy) until Ctrl-C, creating
    /// the topics and subscriptions a pipeline file names.
    Emulator(EmulatorArgs),
    /// Print the JSON Schema (draft-07) of the connection profile or the table config,
    /// exactly as committed under schema/; without an argument, both in one object.
    Schema(SchemaArgs),
    /// Serve the connection wizard (a web page) and its REST API (docs/rest-api.md);
    /// saved profiles and tables go to --data-dir.
    Serve(ServeArgs),
    /// The randomized fault campaign: runs real pipelines on a local emulator under seeded
    /// faults (kills, restarts, network cuts, a stalled sink) and checks that no message
    /// is lost, acknowledged early or duplicated outside a replay; exit 1 on a violation.
    Chaos(chaos::ChaosArgs),
    /// `bench --instructions`' raw same-work loop as a process of its own (for callgrind).
    #[command(hide = true)]
    BenchRawSameWork(bench::RawSameWorkArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (`host:port`). Requests must name it (or `localhost`,
    /// `127.0.0.1`, `[::1]` with its port) as their Host. A non-loopback address requires
    /// --auth-token-file.
    #[arg(long, default_value = "127.0.0.1:5115")]
    listen: String,
    /// A file holding the token every API request (`/v1/...`) must carry as
    /// `Authorization: Bearer TOKEN` (surrounding whitespace ignored). Required when
    /// --listen is not a loopback address. A file, not a flag value, so that the token
    /// does not show in `ps`; the wizard asks for it once per browser tab.
    #[arg(long, value_name = "PATH")]
    auth_token_file: Option<PathBuf>,
    /// Where profiles and tables are saved (`connections.sqlite`). Default:
    /// $XDG_DATA_HOME/pubsub-connector, else ~/.local/share/pubsub-connector.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

async fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(pubsub_server::default_data_dir);
    let bad = |e: anyhow::Error| pipeline::BadPipeline(e);
    let token = match &args.auth_token_file {
        Some(path) => Some(pubsub_server::guard::AuthToken::from_file(path).map_err(bad)?),
        None => None,
    };
    // Checked before binding: a non-loopback address without a token is never listened on.
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(&args.listen)
        .await
        .map_err(|e| {
            bad(anyhow::anyhow!(
                "--listen {}: not a host:port this machine can resolve: {e}",
                args.listen
            ))
        })?
        .collect();
    if token.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(bad(anyhow::anyhow!(
            "--listen {}: not a loopback address, so others could use the saved profiles through it; pass --auth-token-file PATH (a file holding the token every API request must carry), or listen on 127.0.0.1",
            args.listen
        ))
        .into());
    }
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| {
            pipeline::BadPipeline(anyhow::anyhow!(
                "--listen {}: cannot listen there: {e}",
                args.listen
            ))
        })?;
    let addr = listener.local_addr()?;
    let access = pubsub_server::guard::Access::new(&args.listen, addr, token);
    println!(
        "pubsub-connector: the connection wizard is at http://{addr}/ (API under /v1{}; profiles and tables saved in {}); Ctrl-C stops it",
        if access.has_token() {
            ", each request with the token of --auth-token-file"
        } else {
            ""
        },
        data_dir.display()
    );
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    pubsub_server::serve(listener, data_dir, access, shutdown).await
}

#[derive(Args)]
struct SchemaArgs {
    /// `profile` (schema/profile.json) or `table` (schema/table.json).
    which: Option<SchemaKind>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SchemaKind {
    Profile,
    Table,
}

fn schema_command(args: SchemaArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let text = match args.which {
        Some(SchemaKind::Profile) => pubsub_schema::profile_schema(),
        Some(SchemaKind::Table) => pubsub_schema::table_schema(),
        None => {
            let both = serde_json::json!({
                "profile": serde_json::from_str::<serde_json::Value>(&pubsub_schema::profile_schema())?,
                "table": serde_json::from_str::<serde_json::Value>(&pubsub_schema::table_schema())?,
            });
            serde_json::to_string_pretty(&both)? + "\n"
        }
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

#[derive(Args)]
struct EmulatorArgs {
    /// Port of the endpoint to print and use (`127.0.0.1:PORT`); 0 picks a free one.
    #[arg(long, default_value_t = 8085)]
    port: u16,
    /// Create the topics and subscriptions this pipeline file names (a subscription
    /// `x-sub` is created on topic `x`, any other subscription on a topic of its own name).
    #[arg(long)]
    create: Option<PathBuf>,
}

/// Options shared by every command that runs a pipeline.
#[derive(Args, Clone)]
pub struct RunArgs {
    /// The pipeline file (SQL statements separated by `;`).
    pub pipeline: PathBuf,
    /// Timely worker threads; each runs one subtask of every source and sink.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256).map(usize::from))]
    pub workers: usize,
    /// Time between checkpoints (e.g. 500ms, 10s, 5m; a bare number is seconds); at least 10ms.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub checkpoint_interval: Duration,
    /// Where the last completed checkpoint is kept, and a restart resumes from: a local
    /// directory, or an object-store URL (file://, s3://, gs://, az://) that every
    /// process of a cluster can reach. Default: state/JOB_ID (one per pipeline).
    #[arg(long)]
    pub state_dir: Option<String>,
    /// The job's name in its checkpoints (another job's are refused) and in the record ids
    /// its sinks stamp: ASCII letters, digits, '.', '_', '-'. Default: the pipeline file's
    /// name without its extension.
    #[arg(long, value_parser = job::parse_job_id)]
    pub job_id: Option<String>,
    /// Stop gracefully once no message was received for this long while every source
    /// could pull (time held by flow control, back-pressure or a reconnect does not count).
    #[arg(long, value_parser = parse_positive_duration)]
    pub stop_when_idle: Option<Duration>,
    /// On a graceful stop (a signal, --stop-when-idle, the end of a bounded input),
    /// advance the watermark to the end of time first, so that every open window fires
    /// before the final checkpoint (Flink's `stop --drain`). Without it, open windows
    /// stay in the checkpoint and the next run continues them.
    #[arg(long)]
    pub drain: bool,
    /// A checkpoint not complete this long after its barrier fails the job.
    #[arg(long, default_value = "10m", value_parser = parse_positive_duration)]
    pub checkpoint_timeout: Duration,
    /// Start a local Pub/Sub emulator, point every pubsub table without an
    /// 'emulator-endpoint' at it, and create the topics and subscriptions the pipeline
    /// names (as `emulator --create` does).
    #[arg(long)]
    pub emulator: bool,
    /// Processes in the Timely cluster (each runs --workers workers); 1 runs alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    pub processes: usize,
    /// This process's index in the cluster, 0..processes; process 0 decides checkpoints.
    #[arg(long, default_value_t = 0)]
    pub process: usize,
    /// File of one host:port per line, one per process in order (as Timely's -h); this
    /// process listens on its own line. Required with --processes above 1.
    #[arg(long)]
    pub hosts: Option<PathBuf>,
    /// How long start-up waits for every peer process before failing.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub connect_timeout: Duration,
    /// How long a graceful stop may go without progress of its final checkpoint before
    /// the job fails (extended while it advances); also bounds the close of every task.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration)]
    pub shutdown_timeout: Duration,
    /// Rows read and not yet taken by a sink, in this process (the back-pressure bound:
    /// its sources wait while it is reached).
    #[arg(long, default_value_t = 32_768, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000).map(|n| n as usize))]
    pub max_inflight_rows: usize,
    /// The most memory the open windows of one worker's window operator may hold, in
    /// bytes (an estimate, gauge `window_state_bytes`); reaching it fails the job.
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_window_state_bytes: u64,
    /// Where `serve` saved the connection profiles that tables name with
    /// 'connection-profile'. Default: as `serve`'s.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Serve GET /metrics (Prometheus text format) on this host:port while the job runs;
    /// bound before the job starts (an address that cannot be bound exits 2).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
}

#[derive(Args)]
struct QuickstartArgs {
    /// Bids to publish.
    #[arg(long, default_value_t = 100_000)]
    bids: usize,
    /// The example pipeline.
    #[arg(long, default_value = "examples/quickstart.sql")]
    pipeline: PathBuf,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256).map(usize::from))]
    workers: usize,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Messages of the subscription -> topic benchmark (0 skips it).
    #[arg(long, default_value_t = 50_000)]
    pub messages: usize,
    /// NEXMark bids of the generator -> topic (sink) benchmark (0 skips it).
    #[arg(long, default_value_t = 500_000)]
    pub sink_messages: u64,
    /// Bids of the expressions benchmark (a filter and four expressions beside a bare
    /// projection, NEXMark -> blackhole; docs/performance.md goal 6; 0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub expression_rows: u64,
    /// Bids of the windows benchmark (TUMBLE(10 s) count and max price per auction beside
    /// a stateless projection, NEXMark -> blackhole, issue 32 item 7; 0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub window_rows: u64,
    /// Messages of the memory benchmark's backlog (a sink slowed under a backlog;
    /// docs/performance.md goal 4; 0, the default, skips it). It publishes the backlog
    /// first (~1 GB for 1,000,000 messages of 1 KiB, in the emulator's memory), lets the
    /// sink run free for 10 s, then slows it: the backlog must outlast the run (the
    /// benchmark fails if no row is written while the sink is slowed), e.g. 1000000.
    #[arg(long, default_value_t = 0)]
    pub backlog: usize,
    /// The memory benchmark's `scan.flow-control.max-outstanding-element-count` (messages
    /// held per subtask; the paused-split buffers hold 2x this more by default).
    #[arg(long, default_value_t = 2500, value_parser = clap::value_parser!(u64).range(1..))]
    pub backlog_max_outstanding: u64,
    /// Seconds the memory benchmark runs with its sink slowed.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub backlog_seconds: u64,
    /// The memory benchmark's sink pace, as a fraction of the source's free pace
    /// (0 < F <= 1).
    #[arg(long, default_value_t = 0.1, value_parser = pace_fraction)]
    pub sink_pace: f64,
    /// The subscription -> topic pipeline's and the window latency runs' checkpoint
    /// interval (`run --checkpoint-interval`): a source acks only after a checkpoint
    /// commits. (The sink benchmark checkpoints every 100 ms, see docs/performance.md.)
    #[arg(long, default_value = "1s", value_parser = checked_duration)]
    pub checkpoint_interval: String,
    /// Backlog probes to time, one after another (issue 44; 0 skips them).
    #[arg(long, default_value_t = 50)]
    pub probes: usize,
    /// Seconds of live messages (200 per second) through `TUMBLE(1 s)` with the backlog
    /// probe off, on at 2 s and on at 500 ms: the window latency the probe adds (issue
    /// 44; 0 skips it).
    #[arg(long, default_value_t = 20)]
    pub latency_seconds: u64,
    /// How many times each comparison runs (pipeline and baseline in alternating order);
    /// the summary lines give the medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
    /// Write each pipeline run's samples (every 50 ms: seconds, CPU seconds, RSS in KiB
    /// and the watched counters) as `<benchmark>-<n>.csv` into this directory.
    #[arg(long, value_name = "DIR")]
    pub samples_dir: Option<std::path::PathBuf>,
    /// Payload bytes per message (at least 40: the JSON around the padding).
    #[arg(long, default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(40..).map(|v| v as usize))]
    pub message_bytes: usize,
    /// Timely workers of the pipeline run (1 to 256, as `run --workers`).
    #[arg(long, default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=256).map(|v| v as usize))]
    pub workers: usize,
    /// Streaming pulls per worker (the raw loop opens workers x this many; at least 1).
    #[arg(long, default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..).map(|v| v as usize))]
    pub pulls_per_worker: usize,
    /// The pipeline's select list over `src (seq BIGINT, pad TEXT)`, written into `dst
    /// (seq BIGINT, pad TEXT)` by position, e.g. `seq * 2, upper(pad)`.
    #[arg(long, default_value = "*")]
    pub select: String,
    /// The pipeline's WHERE condition, e.g. `seq % 10 <> 3` (none by default).
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// The source's `scan.deserialization-failure-policy`: under `drop`, `nack` or
    /// `dead-letter` the source evaluates the SELECT once more to find failing rows.
    #[arg(long, default_value = "fail")]
    pub failure_policy: String,
    /// Messages of the instruction count (issue 45; 0, the default, skips it): goal 1's
    /// pipeline and the raw same-work loop each run under `valgrind --tool=callgrind` over
    /// N/4 and N/4 + N messages, `--rounds` times; the difference / N is the count per
    /// message, printed with its split by component and the dearest functions
    /// (docs/performance.md). 20000 takes about a minute a round here.
    #[arg(long, default_value_t = 0)]
    pub instructions: usize,
    /// The binary whose `run` the pipelines are (default: this one), e.g. an earlier
    /// build, to measure before and after a change with the same baselines.
    #[arg(long, value_name = "PATH")]
    pub pipeline_bin: Option<std::path::PathBuf>,
}

/// A fraction in (0, 1], for `--sink-pace`.
fn pace_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("'{s}' is not a fraction in (0, 1], e.g. 0.1")),
    }
}

/// The text of a duration [`parse_positive_duration`] takes, to pass on to a child `run`.
fn checked_duration(s: &str) -> Result<String, String> {
    parse_positive_duration(s).map(|_| s.to_string())
}

/// A duration of at least 10 ms: shorter checkpoint or idle periods only burn CPU.
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = pubsub_engine_spi::duration::parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("'{s}' is too short: use at least 10ms"));
    }
    Ok(d)
}

/// `emulator`: start, create what a pipeline names, print the endpoint, wait for Ctrl-C.
async fn emulator_command(args: EmulatorArgs) -> anyhow::Result<()> {
    // Refuse a pipeline it cannot create for before starting anything.
    let sql = match &args.create {
        Some(path) => {
            let sql = pipeline::load(path).map_err(pipeline::BadPipeline)?;
            pipeline::check_emulator_tables(&sql, "emulator --create")?;
            Some(sql)
        }
        None => None,
    };
    let port = args.port;
    let emu = tokio::task::spawn_blocking(move || {
        pubsub_emulator_tools::emulator::Emulator::start_on(port)
    })
    .await??;
    if let Some(mut sql) = sql {
        pipeline::use_emulator(&mut sql, &emu.endpoint());
        let plan = pubsub_engine_sql::plan_pipeline(&sql, &pipeline::connectors())?;
        for line in resources::create_all(&plan).await? {
            println!("created {line}");
        }
    }
    println!("Pub/Sub emulator ready at {}", emu.endpoint());
    println!("use 'emulator-endpoint' = '{}' in WITH (...), or PUBSUB_EMULATOR_HOST={} for other tools; Ctrl-C stops it", emu.endpoint(), emu.endpoint());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(emu);
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        // Around the live progress line when one is drawn on a terminal.
        .with_writer(progress::log_writer)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
                // sqlparser logs the whole SQL text at debug, and with it the path of a
                // 'service-account-key-file' (SPEC 10): capped whatever RUST_LOG says.
                .add_directive("sqlparser=info".parse().expect("valid directive")),
        )
        .init();
    let cli = Cli::parse();
    // 'connection-profile' = 'name' in any pipeline resolves against this directory.
    let data_dir = match &cli.command {
        Command::Run(a) => a.data_dir.clone(),
        Command::Cluster(a) => a.data_dir.clone(),
        _ => None,
    };
    pubsub_table_options::set_profile_resolver(pubsub_server::profile_resolver(
        data_dir.unwrap_or_else(pubsub_server::default_data_dir),
    ));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Run(args) => pipeline::run_command(args).await,
            Command::Cluster(args) => cluster::run(args).await,
            Command::Quickstart(q) => quickstart::run(q.bids, q.pipeline, q.workers).await,
            Command::Bench(b) => bench::run(b).await,
            Command::BenchRawSameWork(a) => bench::raw_same_work(a).await,
            Command::Emulator(e) => emulator_command(e).await,
            Command::Schema(s) => schema_command(s),
            Command::Serve(s) => serve_command(s).await,
            Command::Chaos(c) => match chaos::run(c).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!(
                    "the fault campaign found violations (see above)"
                )),
                Err(e) => Err(e),
            },
        }
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // A pipeline that cannot be planned, an option the job's start refused (e.g.
            // against the checkpoint interval or the subscription), or a failure any
            // restart repeats (bad data under policy `fail`, a locked state directory):
            // no restart helps.
            if e.downcast_ref::<pipeline::BadPipeline>().is_some()
                || pubsub_engine_spi::restart_cannot_fix(&e)
            {
                ExitCode::from(pipeline::EXIT_BAD_PIPELINE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod bench_args_tests {
    use super::{Cli, Command};
    use clap::Parser;

    fn bench(args: &[&str]) -> Result<super::BenchArgs, String> {
        let argv = ["pubsub-connector", "bench"].iter().chain(args);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Bench(b),
            }) => Ok(b),
            Ok(_) => unreachable!("parsed as bench"),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Values that made `bench` hang (0 streams for the raw loop) or print NaN are
    /// refused by the parser, naming the flag and the value.
    #[test]
    fn bench_refuses_sizes_that_cannot_run() {
        for (flag, value) in [
            ("--workers", "0"),
            ("--workers", "257"),
            ("--pulls-per-worker", "0"),
            ("--message-bytes", "39"),
            ("--sink-pace", "0"),
            ("--sink-pace", "1.5"),
            ("--sink-pace", "NaN"),
            ("--backlog-max-outstanding", "0"),
            ("--backlog-seconds", "0"),
            ("--rounds", "0"),
        ] {
            let Err(e) = bench(&[&format!("{flag}={value}")]) else {
                panic!("{flag}={value} was accepted");
            };
            assert!(e.contains(flag) && e.contains(value), "{flag}={value}: {e}");
        }
        let b = bench(&[
            "--workers",
            "1",
            "--message-bytes",
            "40",
            "--sink-pace",
            "1",
        ])
        .unwrap();
        assert_eq!((b.workers, b.message_bytes, b.sink_pace), (1, 40, 1.0));
    }
}
