//! `run`: load, plan and execute a pipeline file; print one summary line.

use std::sync::Arc;

use anyhow::Context;
use pubsub_connector_core::PubSubConnector;
use pubsub_emulator_tools::emulator::Emulator;
use pubsub_engine_runtime::{
    read_hosts, run_pipeline, ClusterConfig, JobSummary, RuntimeConfig, StopHandle,
};
use pubsub_engine_spi::{ErasedConnector, Metrics};
use pubsub_engine_sql::{parse_pipeline, plan_pipeline, resolve_schemas, PipelineSql};

use crate::metrics_http::MetricsServer;
use crate::progress::Progress;
use crate::RunArgs;

/// Every connector this binary knows.
pub fn connectors() -> Vec<Arc<dyn ErasedConnector>> {
    vec![
        Arc::new(PubSubConnector),
        Arc::new(pubsub_nexmark::NexmarkConnector),
        Arc::new(pubsub_nexmark::BlackholeConnector),
    ]
}

/// `run`'s exit code when the pipeline file cannot be read, parsed or planned, the job's
/// start refused its configuration (a `pubsub_engine_spi::ConfigError`, e.g. an option that
/// does not fit the checkpoint interval or the subscription), or the job failed in a way
/// any restart repeats (a `pubsub_engine_spi::PermanentError`, e.g. a row too large to
/// publish under `sink.failure-handler = fail`): `cluster` gives up at once instead of
/// restarting.
pub const EXIT_BAD_PIPELINE: u8 = 2;

/// An error no restart can fix (the pipeline file cannot be read, parsed or planned);
/// the command exits with [`EXIT_BAD_PIPELINE`]. Displays as the error it wraps.
#[derive(Debug)]
pub struct BadPipeline(pub anyhow::Error);

impl std::fmt::Display for BadPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for BadPipeline {}

/// Whether a table of `sql` declares no payload column, so its columns are read from its
/// schema ([`resolve_schemas`], which does I/O) before it is planned.
pub fn needs_columns(sql: &PipelineSql) -> bool {
    sql.tables
        .iter()
        .any(|t| t.fields.iter().all(|f| f.metadata_key.is_some()))
}

/// Reads and parses a pipeline file; errors name the file.
pub fn load(path: &std::path::Path) -> anyhow::Result<PipelineSql> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pipeline file {}", path.display()))?;
    parse_pipeline(&text).with_context(|| format!("in {}", path.display()))
}

fn is_pubsub(t: &pubsub_engine_sql::TableDef) -> bool {
    t.options.get("connector") == Some("pubsub")
}

/// Refuses a pipeline that `--emulator` (or `emulator --create`) cannot point at an
/// emulator: a pubsub table with `service-account-key-file` is meant for real Pub/Sub, and
/// running it there while the rest runs locally (or creating its resources in the real
/// project) would surprise. The error names the table and the fix.
pub fn check_emulator_tables(sql: &PipelineSql, flag: &str) -> Result<(), BadPipeline> {
    let keyed: Vec<(&str, &str)> = sql
        .tables
        .iter()
        .filter(|t| is_pubsub(t))
        .filter_map(|t| {
            KEY_FILE_OPTIONS
                .iter()
                .find(|k| t.options.get(k).is_some())
                .map(|k| (t.name.as_str(), *k))
        })
        .collect();
    let Some((_, key)) = keyed.first() else {
        return Ok(());
    };
    let names: Vec<&str> = keyed.iter().map(|(t, _)| *t).collect();
    Err(BadPipeline(anyhow::anyhow!(
        "{flag} points every pubsub table at a local emulator, but table{} '{}' set{} '{key}' (credentials for real Pub/Sub, which an emulator does not take): remove the option to run {} on the emulator, or run without {flag}",
        if names.len() == 1 { "" } else { "s" },
        names.join("', '"),
        if names.len() == 1 { "s" } else { "" },
        if names.len() == 1 { "it" } else { "them" },
    )))
}

/// The options that carry credentials for real Pub/Sub: the table's and its dead-letter
/// queue's.
const KEY_FILE_OPTIONS: [&str; 3] = [
    "service-account-key-file",
    "sink.dead-letter.service-account-key-file",
    "scan.dead-letter.service-account-key-file",
];

/// Points every pubsub table without an endpoint at `endpoint` (a table that sets its own
/// `emulator-endpoint` keeps it); a dead-letter queue without its own endpoint gets its
/// table's. Call [`check_emulator_tables`] first.
pub fn use_emulator(sql: &mut PipelineSql, endpoint: &str) {
    for t in &mut sql.tables {
        if is_pubsub(t) {
            t.options.insert_if_absent("emulator-endpoint", endpoint);
            // A queue without its own endpoint follows its table's: dead letters land on
            // the emulator the table uses (the private one, or the table's own).
            let table_endpoint = t
                .options
                .get("emulator-endpoint")
                .unwrap_or(endpoint)
                .to_string();
            for side in ["sink.", "scan."] {
                if t.options.get(&format!("{side}dead-letter.topic")).is_some() {
                    t.options.insert_if_absent(
                        &format!("{side}dead-letter.emulator-endpoint"),
                        &table_endpoint,
                    );
                }
            }
        }
    }
}

/// Runs `sql` until stopped by SIGINT/SIGTERM, idleness or failure; returns the summary
/// (also on failure, inside the error's context). With `create_resources` (an emulator),
/// the topics and subscriptions the pipeline names are created first. Every counter and
/// gauge of the job is kept in `metrics`.
pub async fn execute(
    sql: &PipelineSql,
    args: &RunArgs,
    stop: StopHandle,
    create_resources: bool,
    metrics: Metrics,
) -> Result<JobSummary, (anyhow::Error, Option<JobSummary>)> {
    let plan = plan_pipeline(sql, &connectors()).map_err(|e| (anyhow::Error::from(e), None))?;
    if create_resources {
        let lines = crate::resources::create_all(&plan)
            .await
            .map_err(|e| (e, None))?;
        for l in lines {
            tracing::info!("{l}");
        }
        tracing::info!(
            "the private emulator of --emulator stops with the job, and what the job wrote goes with it: to read the output afterwards, start one with `pubsub-connector emulator --port 8085 --create PIPELINE.sql` in another terminal, set 'emulator-endpoint' = '127.0.0.1:8085' in the tables and run without --emulator"
        );
    }
    let cluster = cluster_config(args).map_err(|e| (e, None))?;
    let job_id = crate::job::job_id(args.job_id.as_deref(), &args.pipeline)
        .map_err(|e| (anyhow::Error::from(BadPipeline(e)), None))?;
    let config = RuntimeConfig {
        workers: args.workers.max(1),
        checkpoint_interval: args.checkpoint_interval,
        checkpoint_timeout: args.checkpoint_timeout,
        state_dir: crate::job::state_dir(args.state_dir.as_deref(), &job_id),
        cluster,
        stop_when_idle: args.stop_when_idle,
        drain: args.drain,
        shutdown_timeout: args.shutdown_timeout,
        max_inflight_rows: args.max_inflight_rows,
        max_window_state_bytes: args.max_window_state_bytes,
        job_id,
        metrics,
        ..RuntimeConfig::default()
    };
    let result = run_pipeline(plan, config, stop).await;
    result.map_err(|e| (e.error, Some(e.summary)))
}

/// The cluster flags of `run` as the runtime's `ClusterConfig`; `None` for one process.
/// Errors name the flag: a missing or malformed --hosts file, a --process out of range, or
/// a --hosts file whose line count is not --processes.
fn cluster_config(args: &RunArgs) -> anyhow::Result<Option<ClusterConfig>> {
    if args.processes <= 1 {
        anyhow::ensure!(
            args.process == 0,
            "--process {} needs --processes above it (the cluster has 1 process)",
            args.process
        );
        return Ok(None);
    }
    anyhow::ensure!(
        !args.emulator,
        "--emulator starts one emulator per process: with --processes {}, start one with `pubsub-connector emulator --create {}` and set 'emulator-endpoint' in the pipeline",
        args.processes,
        args.pipeline.display()
    );
    let Some(path) = &args.hosts else {
        anyhow::bail!(
            "--processes {} needs --hosts FILE (one host:port per process)",
            args.processes
        );
    };
    let hosts = read_hosts(path)?;
    anyhow::ensure!(
        hosts.len() == args.processes,
        "--hosts file {} lists {} addresses but --processes is {}",
        path.display(),
        hosts.len(),
        args.processes
    );
    anyhow::ensure!(
        args.process < args.processes,
        "--process {} is out of range: use 0..{}",
        args.process,
        args.processes - 1
    );
    Ok(Some(ClusterConfig {
        process: args.process,
        hosts,
        connect_timeout: args.connect_timeout,
    }))
}

/// Installs SIGINT/SIGTERM handling for the whole command: the first signal asks for a
/// graceful stop, the second aborts at once. Returns the handle the job listens to.
pub fn stop_on_signals() -> StopHandle {
    let stop = StopHandle::new();
    let handle = stop.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let Ok(mut int) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!(
            "signal received: stopping (after a final checkpoint once every source and sink is running, at once during start-up); send another signal to abort at once"
        );
        handle.stop();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!(
            "second signal received: aborting; held messages are released for redelivery"
        );
        handle.abort();
    });
    stop
}

/// The `pipeline` label of every metric: the pipeline file's stem (`drain` for
/// `jobs/drain.sql`).
pub fn pipeline_label(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

pub fn print_summary(summary: &JobSummary) {
    println!("pubsub-connector: {summary}");
}

pub async fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let stop = stop_on_signals();
    let mut sql = load(&args.pipeline).map_err(BadPipeline)?;
    // Planned here too (cheap, no I/O) so that an invalid pipeline exits with 2; a table
    // whose columns come from its schema is planned once they are read (below).
    let derives = needs_columns(&sql);
    if !derives {
        plan_pipeline(&sql, &connectors()).map_err(|e| BadPipeline(e.into()))?;
    }
    if args.emulator {
        check_emulator_tables(&sql, "--emulator")?;
    }
    // Bound before the job starts: an address that cannot be bound exits 2 before
    // anything was read, and no scrape misses the start.
    let metrics_server = match &args.metrics_addr {
        Some(addr) => {
            let server = MetricsServer::bind(addr).await.map_err(BadPipeline)?;
            tracing::info!("metrics at http://{}/metrics", server.addr());
            Some(server)
        }
        None => None,
    };
    let _emulator = if args.emulator {
        let emu = tokio::select! {
            emu = tokio::task::spawn_blocking(Emulator::start) => emu??,
            _ = stop.stopped() => anyhow::bail!("stopped while the emulator was starting"),
        };
        tracing::info!("Pub/Sub emulator listening on {}", emu.endpoint());
        use_emulator(&mut sql, &emu.endpoint());
        Some(emu)
    } else {
        None
    };
    // Columns derived from, or checked against, the schemas tables are bound to (I/O only
    // for such tables, e.g. format avro); then planned with them.
    resolve_schemas(&mut sql, &connectors()).await?;
    if derives {
        plan_pipeline(&sql, &connectors()).map_err(|e| BadPipeline(e.into()))?;
    }
    let who = if args.processes > 1 {
        format!(" (process {} of {})", args.process, args.processes)
    } else {
        String::new()
    };
    let metrics = Metrics::default();
    let serving = metrics_server.map(|s| s.serve(metrics.clone(), pipeline_label(&args.pipeline)));
    let progress = Progress::start(metrics.clone());
    let result = execute(&sql, &args, stop, args.emulator, metrics).await;
    // The status line is cleared before the summary; the endpoint ends with the job.
    progress.finish().await;
    if let Some(s) = serving {
        s.shutdown().await;
    }
    match result {
        Ok(summary) => {
            println!("pubsub-connector{who}: {summary}");
            Ok(())
        }
        Err((e, summary)) => {
            if let Some(s) = summary {
                println!("pubsub-connector{who}: {s}");
            }
            Err(e)
        }
    }
}
