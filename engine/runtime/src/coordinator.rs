//! Starts a job (or one process of a cluster): restores the last checkpoint, prepares
//! the source tables (process 0 only), connects the cluster, spawns this process's
//! source and sink tasks and Timely workers, then hands them to the process coordinator
//! (`process.rs`), which the leader role (`leader.rs`) drives on process 0.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use tokio::sync::mpsc;

use super::cluster::{self, Shape};
use super::dataflow::{
    run_worker, SinkPlumbing, SourcePlumbing, WorkerFlags, WorkerPlumbing, WorkerWaker,
};
use super::job::{JobError, JobSummary, StopHandle};
use super::job_log::JobLog;
use super::leader::Leader;
use super::process::{LocalTasks, ProcessCoordinator};
use super::state::{CheckpointMetadata, CheckpointStore};
use super::tasks::{run_sink, run_source};
use super::{ActivatorSlot, CoordEvent, Flow, JobShared, RuntimeConfig, SourcePort};
use pubsub_engine_plan::{PlannedPipeline, QueryChecks, RowCheck};
use pubsub_engine_spi::ConfigError;
use pubsub_engine_spi::{
    ConstructedOperator, OperatorContext, OperatorState, PrepareContext, PullState,
    SourceCollector, SourceContext, SourceOutput, SourceRuntime, TaskInfo, CHECKPOINTS_COMPLETED,
    MESSAGES_ACKED, MESSAGES_NACKED, MESSAGES_NACK_UNSENT, MESSAGES_RECEIVED, ROWS_WRITTEN,
};

/// Runs a planned pipeline until it is stopped (via `stop`, `stop_when_idle` or the end
/// of every source's input) or fails. With `config.cluster`, this is one process of a
/// Timely cluster: every process runs this with the same plan, process 0 leads.
///
/// Restores from the last checkpoint in `config.state_dir`; new epochs continue above it.
/// Returns the summary of a graceful stop, or the error that failed the job; in both
/// cases nothing was acknowledged that a completed checkpoint did not cover. Errors
/// before the start: the state cannot be opened or read; a source table's job-level
/// preparation (`Connector::prepare_source`, run on process 0 only, before the cluster
/// is connected) fails (`table 'NAME': ...`); a peer process cannot be reached within
/// the connect timeout (naming its `host:port`); the job id is not a valid one, or the
/// state location holds another job's checkpoint or job record (a [`ConfigError`]: a job
/// never restores another's state, issue 31 item 5).
pub async fn run_pipeline(
    mut plan: PlannedPipeline,
    config: RuntimeConfig,
    stop: StopHandle,
) -> Result<JobSummary, JobError> {
    let metrics = config.metrics.clone();
    let mut summary = JobSummary::default();
    let fail = |error: anyhow::Error, summary: &JobSummary| JobError {
        error,
        summary: summary.clone(),
    };
    let (process, processes) = match &config.cluster {
        Some(c) => (c.process, c.hosts.len()),
        None => (0, 1),
    };
    let leads = process == 0;
    plan.bind_job(&config.job_id)
        .map_err(|e| fail(ConfigError::wrap(e), &summary))?;
    if processes > 1 {
        plan.dedup_in_dataflow()
            .map_err(|e| fail(ConfigError::wrap(anyhow!(e)), &summary))?;
    }
    // Only the leader writes checkpoints; the other processes read the same state.
    let store = CheckpointStore::open(&config.state_dir, leads)
        .await
        .map_err(|e| fail(e, &summary))?;
    let restored = store.load().await.map_err(|e| fail(e, &summary))?;
    let start_epoch = restored.as_ref().map_or(1, |m| m.epoch + 1);
    if let Some(m) = &restored {
        tracing::info!(epoch = m.epoch, "restoring from checkpoint {}", m.epoch);
        if m.job_id != config.job_id {
            let e =
                super::state::another_jobs_state("checkpoint", &store, &m.job_id, &config.job_id);
            return Err(fail(ConfigError::wrap(e), &summary));
        }
        summary.restored_epoch = Some(m.epoch);
        summary.last_completed_epoch = Some(m.epoch);
    }

    // Job-level preparation of every source table, once per start, on process 0 only,
    // before the cluster is connected: the other processes wait in `cluster::connect`
    // for process 0's listener, which opens only after this, so no subtask anywhere
    // starts before every table was prepared (decision 0008).
    // The job record is written before any source is prepared, so a first-start decision
    // is durable before it is acted on (issue 16, finding 1).
    let job_log = if leads {
        let log = JobLog::start(store.clone(), &config.job_id, redelivery_horizon(&plan))
            .await
            .map_err(|e| fail(e, &summary))?;
        prepare_sources(&plan, &config, restored.as_ref(), &log, &stop)
            .await
            .map_err(|e| fail(e, &summary))?;
        Some(log)
    } else {
        None
    };

    let workers = config.workers.max(1);
    let total_workers = workers * processes;
    let first_worker = process * workers;

    // Connect the cluster before any task starts: nothing is read until every process is
    // there, and a peer that cannot be reached fails the start naming it.
    let (builders, comms) = match config.cluster.clone() {
        Some(c) => {
            let shape = Shape {
                processes,
                workers,
                fingerprint: fingerprint(&plan),
            };
            tracing::info!(
                "process {process} of {processes} (pid {}): connecting to the cluster: {}",
                std::process::id(),
                c.hosts.join(", ")
            );
            tokio::task::spawn_blocking(move || cluster::connect(&c, shape))
                .await
                .map_err(|e| fail(anyhow!("cluster connect panicked: {e}"), &summary))?
                .map_err(|e| fail(e, &summary))?
        }
        None => timely::CommunicationConfig::Process(workers)
            .try_build()
            .map_err(|e| fail(anyhow!("cannot start Timely workers: {e}"), &summary))?,
    };

    // Process 0 wrote this run's job record before the cluster connected, so every
    // process reads the same count here. A record that cannot be read counts as an
    // earlier run (the cautious side: a missing sink topic then needs a subscription).
    let first_run = restored.is_none()
        && match &job_log {
            Some(log) => log.first_run().await,
            None => match store.load_job_record().await {
                Ok(r) => r.is_none_or(|r| r.runs == 1),
                Err(e) => {
                    tracing::warn!("{e:#}: treating this run as a restart");
                    false
                }
            },
        };

    let (coord_tx, coord_rx) = mpsc::unbounded_channel();
    let waker = WorkerWaker::default();
    let (flow, acks_rx) = Flow::new(
        process,
        processes,
        workers,
        config.max_inflight_rows,
        &metrics,
        waker.clone(),
    );
    let shared = JobShared {
        flow,
        coordinator: coord_tx.clone(),
        aborted: Arc::new(AtomicBool::new(false)),
        alignment: Arc::new(pubsub_engine_spi::alignment::Alignment::new(process)),
    };
    let flags = WorkerFlags {
        abort: shared.aborted.clone(),
        done: Arc::new(AtomicBool::new(false)),
        cluster: processes > 1,
    };

    let source_tables = plan.sources();
    let mut per_worker: Vec<WorkerPlumbing> =
        (0..workers).map(|_| WorkerPlumbing::default()).collect();
    let mut local = LocalTasks::default();
    let mut tasks = Vec::new();
    let mut describe: BTreeMap<String, String> = BTreeMap::new();
    let mut all_sources = BTreeSet::new();
    let mut all_sinks = BTreeSet::new();
    let mut all_windows = BTreeSet::new();
    for (table, _) in &source_tables {
        let name = &table.connection.name;
        let src_id = format!("source-{name}");
        describe.insert(src_id.clone(), format!("source table '{name}'"));
        all_sources.extend((0..total_workers).map(|g| (src_id.clone(), g)));
    }
    for q in &plan.queries {
        let name = &q.sink.connection.name;
        let sink_id = format!("{}-sink-{name}", q.id);
        describe.insert(
            sink_id.clone(),
            format!("sink table '{name}' of {} ({})", q.id, q.text),
        );
        all_sinks.extend((0..total_workers).map(|g| (sink_id.clone(), g)));
        if pubsub_engine_plan::dedup_columns(&q.source).is_some() {
            let dedup_id = super::dedup_stage::stage_id(&q.id, name);
            describe.insert(
                dedup_id.clone(),
                format!("the deduplication of {} ({})", q.id, q.text),
            );
            all_windows.extend((0..total_workers).map(|g| (dedup_id.clone(), g)));
        }
        // A join's two sides snapshot as one window operator.
        if q.window.is_some() || q.join.is_some() {
            let window_id = format!("{}-window", q.id);
            describe.insert(
                window_id.clone(),
                format!("the window of {} ({})", q.id, q.text),
            );
            all_windows.extend((0..total_workers).map(|g| (window_id.clone(), g)));
        }
    }
    let run = {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
    for (w, plumbing) in per_worker.iter_mut().enumerate() {
        // Subtask indexes are global across the cluster.
        let g = first_worker + w;
        let restored_state = |id: &str| -> OperatorState {
            restored
                .as_ref()
                .and_then(|m| m.operators.get(id))
                .and_then(|s| s.get(&g))
                .cloned()
                .unwrap_or_default()
        };
        // Every subtask's restored state of operator `id`.
        let restored_states = |id: &str| -> Vec<OperatorState> {
            restored
                .as_ref()
                .and_then(|m| m.operators.get(id))
                .map(|s| s.values().cloned().collect())
                .unwrap_or_default()
        };
        // Every subtask's restored state of every query's deduplication of table `table`.
        let restored_stages = |table: &str| -> Vec<OperatorState> {
            restored
                .iter()
                .flat_map(|m| m.operators.iter())
                .filter(|(id, _)| super::dedup_stage::is_stage_of(id, table))
                .flat_map(|(_, s)| s.values().cloned())
                .collect()
        };
        let task = |id: &str, name: &str| TaskInfo {
            job_id: config.job_id.clone(),
            operator_id: id.to_string(),
            operator_name: name.to_string(),
            task_index: g,
            parallelism: total_workers,
            run,
        };
        // One reader set per source table, however many queries read it.
        for (table, _) in &source_tables {
            let name = &table.connection.name;
            let src_id = format!("source-{name}");
            let mut op_config = table.operator_config();
            op_config.drop_replays = plan.queries.iter().any(|q| {
                (q.window.is_some() || q.join.is_some())
                    && q.reads().iter().any(|(t, _)| &t.connection.name == name)
            });
            op_config.dedup_in_dataflow =
                processes > 1 && table.connector.source_dedup(&table.connection).is_some();
            let ConstructedOperator::Source(src_op) = table
                .connector
                .make_operator(&table.connection, op_config)
                .map_err(|e| fail(e.context(format!("table '{name}'")), &summary))?
            else {
                return Err(fail(
                    anyhow!("table '{name}' did not build a source"),
                    &summary,
                ));
            };
            let (control_tx, control_rx) = mpsc::unbounded_channel();
            let (source_tx, source_rx) = std::sync::mpsc::channel();
            let source_activator: ActivatorSlot = Arc::new(Mutex::new(None));
            let out_schema = table.connection.schema.rows_schema();
            let pull_state = Arc::new(PullState::default());
            local.pull_states.push(pull_state.clone());
            let port: Arc<dyn SourceOutput> = Arc::new(SourcePort {
                tx: source_tx,
                activator: source_activator.clone(),
                flow: shared.flow.clone(),
                coordinator: coord_tx.clone(),
            });
            let ctx = SourceContext {
                task_info: task(&src_id, name),
                out_schema: out_schema.clone(),
                control_rx,
                metrics: metrics.clone(),
                state: restored_state(&src_id),
                restored_subtasks: restored
                    .as_ref()
                    .and_then(|m| m.operators.get(&src_id))
                    .cloned()
                    .unwrap_or_default(),
                // As one process, the ids its queries held in a cluster (decision 0046).
                restored_dedup: restored_stages(name),
                checkpoint_interval: config.checkpoint_interval,
                runtime: SourceRuntime {
                    output: port.clone(),
                    pull_state: pull_state.clone(),
                    drain: config.drain,
                    alignment: shared.alignment.clone(),
                },
            };
            let mut collector = SourceCollector::new(out_schema, port, pull_state);
            collector.set_row_checks(Arc::new(QueryChecks(
                plan.queries
                    .iter()
                    // A late-rows query reads what its window hands it, not the source.
                    .filter(|q| q.late_of.is_none())
                    .flat_map(|q| {
                        q.reads()
                            .into_iter()
                            .filter(|(t, _)| &t.connection.name == name)
                            .map(|(_, select)| RowCheck {
                                text: q.text.clone(),
                                select,
                                changes: q.reads_changes(),
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            )));
            local.sources.push(((src_id.clone(), g), control_tx));
            let t = spawn_task(
                run_source(src_op, ctx, collector, shared.clone()),
                &src_id,
                g,
                &shared,
            );
            local
                .task_aborts
                .insert((src_id.clone(), g), t.abort_handle());
            tasks.push(t);
            plumbing.sources.push(SourcePlumbing {
                id: src_id,
                source_rx,
                source_activator,
            });
        }
        for q in &plan.queries {
            let name = &q.sink.connection.name;
            let sink_id = format!("{}-sink-{name}", q.id);
            let ConstructedOperator::Operator(sink_op) = q
                .sink
                .connector
                .make_operator(&q.sink.connection, q.sink.operator_config())
                .map_err(|e| fail(e.context(format!("table '{name}'")), &summary))?
            else {
                return Err(fail(
                    anyhow!("table '{name}' did not build a sink"),
                    &summary,
                ));
            };
            let source_index = source_tables
                .iter()
                .position(|(t, _)| t.connection.name == q.source.connection.name)
                .expect("every query's source is planned");
            let join_source_index = q.join.as_ref().map(|j| {
                source_tables
                    .iter()
                    .position(|(t, _)| t.connection.name == j.right_source.connection.name)
                    .expect("a join's right table is planned")
            });
            let (sink_tx, sink_rx) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let sink_activator: ActivatorSlot = Arc::new(Mutex::new(None));
            let sctx = OperatorContext {
                task_info: task(&sink_id, name),
                in_schema: q.sink_schema.clone(),
                metrics: metrics.clone(),
                state: restored_state(&sink_id),
                first_run,
            };
            local.sinks.push(((sink_id.clone(), g), sink_tx.clone()));
            let t = spawn_task(
                run_sink(
                    sink_op,
                    sctx,
                    sink_rx,
                    done_tx,
                    sink_activator.clone(),
                    shared.clone(),
                ),
                &sink_id,
                g,
                &shared,
            );
            local
                .task_aborts
                .insert((sink_id.clone(), g), t.abort_handle());
            tasks.push(t);
            let window = (q.window.is_some() || q.join.is_some()).then(|| {
                let id = format!("{}-window", q.id);
                super::dataflow::WindowPlumbing {
                    restore: restored
                        .as_ref()
                        .and_then(|m| m.operators.get(&id))
                        .map(|s| s.values().cloned().collect())
                        .unwrap_or_default(),
                    late: metrics.counter(pubsub_engine_spi::ROWS_LATE, &id, g),
                    groups: metrics.gauge(pubsub_engine_spi::WINDOW_GROUPS, &id, g),
                    bytes: metrics.gauge(pubsub_engine_spi::WINDOW_STATE_BYTES, &id, g),
                    max_bytes: config.max_window_state_bytes,
                    coordinator: coord_tx.clone(),
                    // Only the leader read the previous run's record; elsewhere a
                    // restart is taken as unclean (an extra change per group at most).
                    restarted: !first_run && !job_log.as_ref().is_some_and(|l| l.previous_clean),
                    id,
                }
            });
            let dedup = pubsub_engine_plan::dedup_columns(&q.source).map(|columns| {
                let id = super::dedup_stage::stage_id(&q.id, &q.source.connection.name);
                // The first query reading the table counts its messages.
                let counts = plan
                    .queries
                    .iter()
                    .find(|o| o.source.connection.name == q.source.connection.name)
                    .is_some_and(|o| o.id == q.id);
                let src_id = format!("source-{}", q.source.connection.name);
                super::dedup_stage::DedupPlumbing {
                    // The table's ids, from the queries of the last run, or from its source
                    // when it ran as one process.
                    restore: restored_stages(&q.source.connection.name)
                        .into_iter()
                        .chain(restored_states(&src_id))
                        .collect(),
                    columns,
                    counters: counts.then(|| {
                        (
                            metrics.counter(
                                pubsub_engine_spi::dedup::MESSAGES_DEDUPLICATED,
                                &id,
                                g,
                            ),
                            metrics.counter(
                                pubsub_engine_spi::dedup::MESSAGES_BEHIND_DEDUP_WINDOW,
                                &id,
                                g,
                            ),
                        )
                    }),
                    coordinator: coord_tx.clone(),
                    id,
                }
            });
            plumbing.sinks.push(SinkPlumbing {
                id: sink_id,
                query: q.clone(),
                source_index,
                join_source_index,
                sink_tx,
                sink_done_rx: done_rx,
                sink_activator,
                window,
                dedup,
            });
        }
    }

    // Control plumbing: this process's first worker feeds its reports to Timely and
    // delivers the leader's decisions here; on the leader it also feeds the decisions and
    // receives every process's reports.
    let (reports_tx, reports_rx) = std::sync::mpsc::channel();
    let (deliver_tx, deliver_rx) = mpsc::unbounded_channel();
    per_worker[0].control.reports = Some(reports_rx);
    per_worker[0].control.to_process = Some(deliver_tx);
    per_worker[0].control.acks = Some(acks_rx);
    let wake_at_end = waker.clone();
    per_worker[0].control.waker = Some(waker.clone());
    let mut leader_rx = None;
    let leader = if leads {
        let (decisions_tx, decisions_rx) = std::sync::mpsc::channel();
        let (to_leader_tx, to_leader) = mpsc::unbounded_channel();
        per_worker[0].control.decisions = Some(decisions_rx);
        per_worker[0].control.to_leader = Some(to_leader_tx);
        leader_rx = Some(to_leader);
        let mut leader = Leader::new(
            config.clone(),
            store,
            decisions_tx,
            processes,
            all_sources,
            all_sinks,
            all_windows,
            describe.clone(),
            summary.restored_epoch,
        );
        if let Some(until) = job_log.as_ref().and_then(|l| l.leases_until) {
            hold_idle_for_dead_leases(&mut leader, until, &config);
        }
        Some(leader)
    } else {
        None
    };

    let slots: Arc<Mutex<Vec<Option<WorkerPlumbing>>>> =
        Arc::new(Mutex::new(per_worker.into_iter().map(Some).collect()));
    let timely_thread = {
        let flags = flags.clone();
        let coord = coord_tx.clone();
        let flow = shared.flow.clone();
        std::thread::Builder::new()
            .name("timely".into())
            .spawn(move || {
                let report = coord.clone();
                let result = timely::execute::execute_from(
                    builders,
                    comms,
                    timely::WorkerConfig::default(),
                    move |worker| {
                        let index = worker.index();
                        let plumbing = slots.lock().expect("plumbing lock")[index - first_worker]
                            .take()
                            .expect("each worker takes its plumbing once");
                        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_worker(
                                worker,
                                plumbing,
                                start_epoch,
                                coord.clone(),
                                flags.clone(),
                                flow.clone(),
                            )
                        }));
                        if let Err(panic) = run {
                            let _ = coord.send(CoordEvent::TaskFailed {
                                operator_id: "timely-worker".into(),
                                subtask: index,
                                error: format!("panicked: {}", panic_message(&*panic)),
                                permanent: false,
                            });
                            // Timely steps a worker until its dataflows finish: drop them.
                            for id in worker.installed_dataflows() {
                                worker.drop_dataflow(id);
                            }
                        }
                    },
                )
                .and_then(|guards| {
                    guards
                        .join()
                        .into_iter()
                        .collect::<Result<Vec<_>, _>>()
                        .map(|_| ())
                });
                if let Err(e) = &result {
                    let _ = report.send(CoordEvent::TaskFailed {
                        operator_id: "timely".into(),
                        subtask: 0,
                        error: format!("Timely workers failed: {e}"),
                        permanent: false,
                    });
                }
                result
            })
            .map_err(|e| fail(anyhow!("cannot start Timely workers: {e}"), &summary))?
    };
    drop(coord_tx);

    let mut coordinator = ProcessCoordinator::new(
        process,
        shared.clone(),
        config.clone(),
        metrics.clone(),
        local,
        describe,
        reports_tx,
        waker,
        leader,
        summary.clone(),
    );
    let result = coordinator
        .drive(coord_rx, deliver_rx, leader_rx, stop)
        .await;
    if result.is_err() {
        shared.abort();
    }
    // Let the workers close the control inputs and finish.
    flags.done.store(true, std::sync::atomic::Ordering::Release);
    wake_at_end.wake();
    // Bounded: a task that does not end in time is cancelled (its handles drop and nack).
    // After a failure the abort already waited for the sources: do not wait long again.
    let wait = if result.is_err() {
        config.shutdown_timeout.min(AFTER_ABORT_WAIT)
    } else {
        config.shutdown_timeout
    };
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(wait, futures::future::join_all(tasks))
        .await
        .is_err()
    {
        tracing::warn!("tasks did not end within {wait:?}: cancelling them");
        for a in aborts {
            a.abort();
        }
    }
    let join = tokio::task::spawn_blocking(move || timely_thread.join());
    match tokio::time::timeout(wait, join).await {
        Ok(Ok(Ok(Ok(())))) => {}
        Ok(Ok(Ok(Err(e)))) => tracing::warn!("timely workers ended with an error: {e}"),
        _ => tracing::warn!("timely workers did not end in time"),
    }
    let mut summary = coordinator.summary.clone();
    summary.messages_read = metrics.total(MESSAGES_RECEIVED);
    summary.rows_written = metrics.total(ROWS_WRITTEN);
    summary.messages_acked = metrics.total(MESSAGES_ACKED);
    summary.messages_not_released = metrics.total(MESSAGES_NACK_UNSENT);
    summary.messages_released = metrics
        .total(MESSAGES_NACKED)
        .saturating_sub(summary.messages_not_released);
    for name in metrics.counter_names() {
        let standard = [
            MESSAGES_RECEIVED,
            ROWS_WRITTEN,
            MESSAGES_ACKED,
            MESSAGES_NACKED,
            MESSAGES_NACK_UNSENT,
            // Printed as `checkpoints completed` already.
            CHECKPOINTS_COMPLETED,
        ];
        let n = metrics.total(&name);
        if n > 0 && !standard.contains(&name.as_str()) {
            summary.other_counters.insert(name, n);
        }
    }
    let marks: Vec<u64> = metrics
        .gauge_samples()
        .into_iter()
        .filter(|m| m.name == pubsub_engine_spi::INPUT_WATERMARK_MS)
        .map(|m| m.value)
        .collect();
    summary.watermark_ms = marks.iter().min().copied().filter(|ms| *ms > 0);
    match result {
        Ok(()) => {
            if let Some(log) = &job_log {
                log.mark_clean().await;
            }
            Ok(summary)
        }
        Err(error) => Err(JobError { error, summary }),
    }
}

/// The longest redelivery horizon of the plan's source tables (see
/// `Connector::redelivery_horizon`).
fn redelivery_horizon(plan: &PlannedPipeline) -> Duration {
    plan.sources()
        .iter()
        .map(|(t, _)| t.connector.redelivery_horizon(&t.connection))
        .max()
        .unwrap_or_default()
}

/// After an unclean stop the messages a dead run held come back only when their leases
/// run out, at the latest at `until`: `--stop-when-idle` must not take the quiet before
/// then for "caught up" (issue 16, finding 15).
fn hold_idle_for_dead_leases(
    leader: &mut Leader,
    until: std::time::SystemTime,
    config: &RuntimeConfig,
) {
    let wait = until
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    if config.stop_when_idle.is_some() {
        tracing::info!(
            "an earlier run of this job may still hold messages leased (it did not stop cleanly, or its streams closed less than one lease extension ago): they come back when their leases run out, so --stop-when-idle waits at least {wait:?} before it may stop"
        );
    }
    leader.hold_idle_until(std::time::Instant::now() + wait);
}

/// Runs `Connector::prepare_source` for every source table of `plan`, in plan order, with
/// the subtask states the last completed checkpoint holds for its source operator. The
/// first error ends it, naming the table; an abort (second stop signal) cancels it.
async fn prepare_sources(
    plan: &PlannedPipeline,
    config: &RuntimeConfig,
    restored: Option<&CheckpointMetadata>,
    log: &JobLog,
    stop: &StopHandle,
) -> anyhow::Result<()> {
    for (table, _) in plan.sources() {
        let name = &table.connection.name;
        let operator_id = format!("source-{name}");
        let ctx = PrepareContext {
            job_id: config.job_id.clone(),
            processes: config.cluster.as_ref().map_or(1, |c| c.hosts.len()),
            restored_subtasks: restored
                .and_then(|m| m.operators.get(&operator_id))
                .cloned()
                .unwrap_or_default(),
            checkpoint_interval: config.checkpoint_interval,
            recorded_decision: log.recorded(&operator_id).await,
            decision_log: log.decision_log(&operator_id),
        };
        tracing::info!(
            restored_subtasks = ctx.restored_subtasks.len(),
            "preparing source table '{name}'"
        );
        let prepare = table.connector.prepare_source(&table.connection, ctx);
        tokio::select! {
            r = prepare => r.map_err(|e| e.context(format!("table '{name}'")))?,
            _ = stop.abort.notified() => anyhow::bail!(
                "aborted by a second stop signal while preparing source table '{name}': nothing was read"
            ),
        }
    }
    Ok(())
}

/// Identifies a pipeline across the processes of a cluster: its statements and every
/// table's connector, options (as validated config) and columns.
fn fingerprint(plan: &PlannedPipeline) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for q in &plan.queries {
        q.id.hash(&mut h);
        // Every process must stamp the same record ids.
        q.job.hash(&mut h);
        q.text.hash(&mut h);
        for t in q.tables() {
            t.connection.name.hash(&mut h);
            t.connection.connector.hash(&mut h);
            t.connection.config.to_string().hash(&mut h);
            format!("{:?}", t.connection.schema).hash(&mut h);
        }
    }
    h.finish()
}

/// Spawns a task; a panic in it is reported to the coordinator as a task failure.
fn spawn_task(
    fut: impl std::future::Future<Output = ()> + Send + 'static,
    operator_id: &str,
    subtask: usize,
    shared: &JobShared,
) -> tokio::task::JoinHandle<()> {
    use futures::FutureExt;
    let operator_id = operator_id.to_string();
    let coordinator = shared.coordinator.clone();
    tokio::spawn(async move {
        if let Err(panic) = std::panic::AssertUnwindSafe(fut).catch_unwind().await {
            let error = format!("panicked: {}", panic_message(&*panic));
            let _ = coordinator.send(CoordEvent::TaskFailed {
                operator_id: operator_id.clone(),
                subtask,
                error,
                permanent: false,
            });
            // Its `on_close` will not run: an abort has nothing to wait for.
            let _ = coordinator.send(CoordEvent::TaskClosed {
                operator_id,
                subtask,
            });
        }
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// After a failure, the abort already waited (up to `--shutdown-timeout`) for the sources
/// to release what they hold: the tasks still running get this much more, then are
/// cancelled.
const AFTER_ABORT_WAIT: Duration = Duration::from_secs(10);
