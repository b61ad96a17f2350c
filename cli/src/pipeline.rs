//! `run`: load, plan and execute a pipeline file; print one summary line.

use std::sync::Arc;

use anyhow::Context;
use pubsub_connector_core::emulator::Emulator;
use pubsub_connector_core::PubSubConnector;
use pubsub_engine::runtime::{run_pipeline, JobSummary, RuntimeConfig, StopHandle};
use pubsub_engine::sql::{parse_pipeline, plan_pipeline, PipelineSql};
use pubsub_engine::ErasedConnector;

use crate::RunArgs;

/// Every connector this binary knows.
pub fn connectors() -> Vec<Arc<dyn ErasedConnector>> {
    vec![Arc::new(PubSubConnector)]
}

/// Reads and parses a pipeline file; errors name the file.
pub fn load(path: &std::path::Path) -> anyhow::Result<PipelineSql> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pipeline file {}", path.display()))?;
    parse_pipeline(&text).with_context(|| format!("in {}", path.display()))
}

/// Points every pubsub table without an endpoint at `endpoint`.
pub fn use_emulator(sql: &mut PipelineSql, endpoint: &str) {
    for t in &mut sql.tables {
        let mut probe = t.options.clone();
        if probe.pull_opt_str("connector").ok().flatten().as_deref() == Some("pubsub") {
            t.options.insert_if_absent("emulator-endpoint", endpoint);
        }
    }
}

/// Runs `sql` until stopped by SIGINT/SIGTERM, idleness or failure; returns the summary
/// (also on failure, inside the error's context).
pub async fn execute(
    sql: &PipelineSql,
    args: &RunArgs,
) -> Result<JobSummary, (anyhow::Error, Option<JobSummary>)> {
    let plan = plan_pipeline(sql, &connectors()).map_err(|e| (anyhow::Error::from(e), None))?;
    let config = RuntimeConfig {
        workers: args.workers.max(1),
        checkpoint_interval: args.checkpoint_interval,
        state_dir: args.state_dir.clone(),
        stop_when_idle: args.stop_when_idle,
        job_id: args.pipeline.display().to_string(),
        ..RuntimeConfig::default()
    };
    let stop = StopHandle::new();
    let signals = tokio::spawn(stop_on_signal(stop.clone()));
    let result = run_pipeline(plan, config, stop).await;
    signals.abort();
    result.map_err(|e| (e.error, Some(e.summary)))
}

async fn stop_on_signal(stop: StopHandle) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("signal received: stopping after a final checkpoint");
    stop.stop();
}

pub fn print_summary(summary: &JobSummary) {
    println!("pubsub-connector: {summary}");
}

pub async fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let mut sql = load(&args.pipeline)?;
    let _emulator = if args.emulator {
        let emu = tokio::task::spawn_blocking(Emulator::start).await??;
        tracing::info!("Pub/Sub emulator listening on {}", emu.endpoint());
        use_emulator(&mut sql, &emu.endpoint());
        Some(emu)
    } else {
        None
    };
    match execute(&sql, &args).await {
        Ok(summary) => {
            print_summary(&summary);
            Ok(())
        }
        Err((e, summary)) => {
            if let Some(s) = summary {
                print_summary(&s);
            }
            Err(e)
        }
    }
}
