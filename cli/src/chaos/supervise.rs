//! The first hop under its fault schedule: injects each fault at its instant while
//! supervising the pipeline (a `run` that ends by itself is restarted, as `cluster`
//! restarts its children), then ends every outage, waits for the publisher and stops the
//! pipeline gracefully before the final run. It decides nothing: it records what
//! happened ([`Record`]: the faults as injected with their windows, every signalled stop
//! and how it ended, every run that ended by itself) for `rules.rs` to judge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use pubsub_connector_core::{admin, client};
use pubsub_emulator_tools::delivery::{GiveBack, Interference, Interloper};

use super::outages::{self, Outages, Window};
use super::pipeline::Pipeline;
use super::schedule::{Fault, Schedule};

/// How long a graceful stop (or an abort) may take before the campaign calls it a hang.
pub const STOP_BOUND: Duration = Duration::from_secs(120);
/// How long a kill aimed at a checkpoint write waits for one.
pub const WRITE_WATCH: Duration = Duration::from_secs(30);

/// How a start of a pipeline ended.
#[derive(Debug, Clone)]
pub enum End {
    Exited {
        status: ExitStatus,
        at: Instant,
    },
    /// Still running at the campaign's bound (then killed with its children).
    Hung {
        bound: Duration,
    },
}

/// Why the campaign signalled the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// A `term-restart` fault: SIGTERM, then a restart.
    TermRestart,
    /// An `abort` fault: SIGTERM, a second one `after` later, then a restart.
    Abort { after: Duration },
    /// The graceful stop before the final run.
    BeforeFinal,
}

/// A signalled stop and how it ended.
#[derive(Debug, Clone)]
pub struct Stop {
    pub cause: StopCause,
    /// When the start that received the signal was spawned.
    pub started: Instant,
    pub signalled: Instant,
    pub end: End,
    /// That start's stderr.
    pub log: PathBuf,
}

/// A start that ended by itself during the schedule (then restarted).
#[derive(Debug, Clone)]
pub struct SelfExit {
    pub started: Instant,
    pub status: ExitStatus,
    pub at: Instant,
    pub log: PathBuf,
}

/// A fault as injected.
#[derive(Debug, Clone)]
pub struct Injected {
    pub fault: Fault,
    pub at: Instant,
    /// The outage it caused (cuts, stalls, the recreated topic's span).
    pub window: Option<Window>,
    /// A kill aimed at a checkpoint write: what it hit (`None`: no write was seen within
    /// [`WRITE_WATCH`], the process was killed then).
    pub write: Option<&'static str>,
}

/// Everything the fault phase observed.
#[derive(Debug, Default)]
pub struct Record {
    pub injected: Vec<Injected>,
    pub stops: Vec<Stop>,
    pub exits: Vec<SelfExit>,
    /// seq -> message id of every confirmed publish.
    pub published: BTreeMap<u64, String>,
    /// Output rows read while the sink's topic was recreated (data, attributes).
    pub rows: Vec<super::check::Msg>,
}

/// The first hop's topics and subscriptions: the output topic gets a new subscription of
/// each kind whenever it is recreated.
pub struct Topics {
    pub input: String,
    pub input_sub: String,
    /// The campaign's own subscription of the input topic: every message's publish time.
    pub witness_sub: String,
    pub output: String,
    pub dead_letter: String,
    pub dead_letter_sub: String,
    /// The campaign's own subscriptions of the output topic (the at-least-once figures),
    /// one per incarnation of the topic.
    pub output_subs: Vec<String>,
    /// The second hop's subscriptions of the output topic, one per incarnation.
    pub hop2_subs: Vec<String>,
    /// The second hop's output topic and the campaign's subscription of it.
    pub last: String,
    pub last_sub: String,
    /// hop1's window rows, and the campaign's subscription of them.
    pub windows: String,
    pub windows_sub: String,
}

/// What the fault phase works on.
pub struct Ctx<'a> {
    pub direct: &'a pubsub_schema::PubSubProfile,
    /// Through the emulator's half-closing proxy: another consumer's stream must close as
    /// on the real service (a stream that vanishes strands its leases in the emulator).
    pub proxied: &'a pubsub_schema::PubSubProfile,
    pub topics: &'a mut Topics,
    pub source: &'a Outages,
    pub sink: &'a Outages,
    pub dead_letters: &'a Outages,
    pub pipeline: &'a mut Pipeline,
}

/// Runs the schedule: the pipeline is already started at `t0` and `publisher` publishes
/// meanwhile. Returns with every outage over, every message published and the pipeline
/// stopped (gracefully, or past its bound).
pub async fn run(
    cx: Ctx<'_>,
    schedule: &Schedule,
    t0: Instant,
    publisher: tokio::task::JoinHandle<anyhow::Result<BTreeMap<u64, String>>>,
) -> anyhow::Result<Record> {
    let Ctx {
        direct,
        proxied,
        topics,
        source,
        sink,
        dead_letters,
        pipeline,
    } = cx;
    let mut rec = Record::default();
    let mut restores = Vec::new();
    let mut interlopers = Vec::new();
    for timed in &schedule.faults {
        let at = tokio::time::Instant::from(t0 + timed.at);
        supervise_until(pipeline, at, &mut rec).await?;
        let now = Instant::now();
        let mut injected = Injected {
            fault: timed.fault.clone(),
            at: now,
            window: None,
            write: None,
        };
        let outage = |o: &Outages, for_: Duration| Window {
            path: o.path,
            from: now,
            to: now + for_,
        };
        let done = match &timed.fault {
            Fault::Kill { process } => {
                let done = pipeline.kill_process(*process);
                if done && schedule.processes == 1 {
                    pipeline.wait().await.ok();
                    pipeline.start(None)?;
                }
                done
            }
            Fault::TermRestart => {
                let done = stop(pipeline, StopCause::TermRestart, &mut rec).await;
                if done {
                    pipeline.start(None)?;
                }
                done
            }
            Fault::Abort { after } => {
                let done = stop(pipeline, StopCause::Abort { after: *after }, &mut rec).await;
                if done {
                    pipeline.start(None)?;
                }
                done
            }
            Fault::CutSource { for_ } => {
                restores.push(source.begin(*for_, false).await);
                injected.window = Some(outage(source, *for_));
                true
            }
            Fault::CutSink { for_ } => {
                restores.push(sink.begin(*for_, false).await);
                injected.window = Some(outage(sink, *for_));
                true
            }
            Fault::StallSink { for_ } => {
                restores.push(sink.begin(*for_, true).await);
                injected.window = Some(outage(sink, *for_));
                true
            }
            Fault::CutDeadLetter { for_ } => {
                restores.push(dead_letters.begin(*for_, false).await);
                injected.window = Some(outage(dead_letters, *for_));
                true
            }
            Fault::KillInCheckpointWrite => {
                let target = pipeline.pid_of(0);
                if target.is_some() {
                    injected.write = checkpoint_write(&pipeline.state_dir(), WRITE_WATCH).await;
                }
                let done = target.is_some_and(super::pipeline::kill);
                if let Some(w) = injected.write {
                    tracing::debug!("chaos: seed {}: SIGKILL {w}", schedule.seed);
                }
                injected.at = Instant::now();
                if done && schedule.processes == 1 {
                    pipeline.wait().await.ok();
                    pipeline.start(None)?;
                }
                done
            }
            Fault::TakeAndNack { keep, hold, for_ } => {
                let plan = interference(schedule.seed, *keep, *for_, GiveBack::Nack, *hold);
                interlopers.push(interloper(proxied, &topics.input_sub, plan).await?);
                true
            }
            Fault::ExpireLeases { keep, for_ } => {
                let hold = Duration::from_secs(1);
                let plan = interference(schedule.seed, *keep, *for_, GiveBack::LeaseExpiry, hold);
                interlopers.push(interloper(proxied, &topics.input_sub, plan).await?);
                true
            }
            Fault::RecreateSinkTopic { gap } => {
                let from = Instant::now();
                recreate_sink_topic(direct, sink, topics, *gap, &mut rec).await?;
                injected.window = Some(Window {
                    path: outages::Path::Sink,
                    from,
                    to: Instant::now(),
                });
                true
            }
        };
        if done {
            rec.injected.push(injected);
        }
    }
    // Every outage ends and every message is published before the final run.
    let mut publisher = publisher;
    rec.published = loop {
        tokio::select! {
            status = pipeline.wait() => {
                self_exit(pipeline, status?, &mut rec);
                pipeline.start(None)?;
            }
            p = &mut publisher => break p??,
        }
    };
    for mut r in restores {
        loop {
            tokio::select! {
                status = pipeline.wait() => {
                    self_exit(pipeline, status?, &mut rec);
                    pipeline.start(None)?;
                }
                done = &mut r => break done?,
            }
        }
    }
    // Every message another consumer kept is given back before the final run.
    for i in interlopers {
        let mut finish = Box::pin(i.finish());
        loop {
            tokio::select! {
                status = pipeline.wait() => {
                    self_exit(pipeline, status?, &mut rec);
                    pipeline.start(None)?;
                }
                r = &mut finish => {
                    let report = r?;
                    tracing::debug!("chaos: seed {}: another consumer kept {} and passed {}", schedule.seed, report.kept.len(), report.passed);
                    break;
                }
            }
        }
    }
    // An outage's window ends when it really ended (the port bound again), which can be
    // later than scheduled: a start refused meanwhile is explained by it.
    for inj in &mut rec.injected {
        let o = match inj.fault {
            Fault::CutSource { .. } => source,
            Fault::CutSink { .. } | Fault::StallSink { .. } => sink,
            Fault::CutDeadLetter { .. } => dead_letters,
            _ => continue,
        };
        if let Some(w) = inj.window.as_mut() {
            if let Some(end) = o.ended_after(w.to) {
                w.to = end;
            }
        }
    }
    // The graceful stop before the final run tests a graceful stop: it waits until the
    // running start is [`FINAL_STOP_AGE`] old (a stop during start-up is what the
    // `term-restart` and `abort` faults may hit).
    let old_enough = pipeline
        .started
        .map_or_else(Instant::now, |s| s + FINAL_STOP_AGE);
    supervise_until(pipeline, old_enough.into(), &mut rec).await?;
    stop(pipeline, StopCause::BeforeFinal, &mut rec).await;
    Ok(rec)
}

/// A delivery fault's plan: keeps a seeded 30% of what it is offered, up to `keep`, for
/// `for_`, giving each back after 1 s to `hold`.
fn interference(
    seed: u64,
    keep: usize,
    for_: Duration,
    give_back: GiveBack,
    hold: Duration,
) -> Interference {
    Interference {
        seed,
        take: keep,
        probability: 0.3,
        hold: (Duration::from_secs(1).min(hold), hold),
        give_back,
        window: for_,
    }
}

/// How old the running start is at least when the stop before the final run is sent.
pub const FINAL_STOP_AGE: Duration = Duration::from_secs(3);

/// Supervises the pipeline until `until`: a start that ends by itself is recorded and
/// started again. Also a start that ended just before (not yet reaped).
async fn supervise_until(
    pipeline: &mut Pipeline,
    until: tokio::time::Instant,
    rec: &mut Record,
) -> anyhow::Result<()> {
    loop {
        if let Some(status) = pipeline.try_wait() {
            self_exit(pipeline, status, rec);
            pipeline.start(None)?;
        }
        tokio::select! {
            status = pipeline.wait() => {
                self_exit(pipeline, status?, rec);
                pipeline.start(None)?;
            }
            _ = tokio::time::sleep_until(until) => {
                // One that ended at this very instant is not signalled as if running.
                if let Some(status) = pipeline.try_wait() {
                    self_exit(pipeline, status, rec);
                    pipeline.start(None)?;
                }
                return Ok(());
            }
        }
    }
}

/// Records a start that ended by itself.
fn self_exit(pipeline: &Pipeline, status: ExitStatus, rec: &mut Record) {
    rec.exits.push(SelfExit {
        started: pipeline.started.unwrap_or_else(Instant::now),
        status,
        at: Instant::now(),
        log: pipeline.current_log().1,
    });
}

/// Signals a stop (`cause` says how) and waits at most [`STOP_BOUND`] for it; records it.
/// False when no start was running (nothing signalled).
async fn stop(pipeline: &mut Pipeline, cause: StopCause, rec: &mut Record) -> bool {
    let started = pipeline.started.unwrap_or_else(Instant::now);
    let signalled = Instant::now();
    if !pipeline.signal(libc::SIGTERM) {
        return false;
    }
    let bound = tokio::time::Instant::from(signalled + STOP_BOUND);
    if let StopCause::Abort { after } = cause {
        // The second SIGTERM aborts, unless the graceful stop ended first.
        tokio::select! {
            s = pipeline.wait() => {
                if let Ok(status) = s {
                    rec.stops.push(Stop {
                        cause,
                        started,
                        signalled,
                        end: End::Exited { status, at: Instant::now() },
                        log: pipeline.current_log().1,
                    });
                }
                return true;
            }
            _ = tokio::time::sleep(after) => { pipeline.signal(libc::SIGTERM); }
        }
    }
    let end = match pipeline
        .wait_at_most(bound.saturating_duration_since(tokio::time::Instant::now()))
        .await
    {
        Some(status) => End::Exited {
            status,
            at: Instant::now(),
        },
        None => End::Hung { bound: STOP_BOUND },
    };
    rec.stops.push(Stop {
        cause,
        started,
        signalled,
        end,
        log: pipeline.current_log().1,
    });
    true
}

/// Waits (polling every millisecond, up to `limit`) for process 0's next checkpoint
/// write in the local state directory `state`: its temp file appearing (under way), or
/// else `checkpoint.json` replaced (landed, its acknowledgements maybe not sent yet).
/// Returns which, or `None` after `limit`.
async fn checkpoint_write(state: &Path, limit: Duration) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    let (file, tmp) = (
        state.join("checkpoint.json"),
        state.join("checkpoint.json.tmp"),
    );
    let stamp = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.ino(), m.mtime_nsec()));
    let before = stamp(&file);
    let _ = std::fs::remove_file(&tmp); // left by an earlier kill
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if tmp.exists() {
            return Some("during a checkpoint write (temp file written, not yet renamed)");
        }
        if stamp(&file) != before {
            return Some("right after a checkpoint write landed");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Deletes the sink's topic and creates it again `gap` later with a new subscription of
/// each kind (the campaign's and the second hop's). The sink is stalled while what the
/// campaign's old subscription holds is read (into `rec.rows`) and the topic deleted, and
/// again while it is created with its subscriptions: in between, the sink finds it gone
/// (and may create it itself). The second hop's old subscription keeps its backlog (a
/// subscription outlives its topic) and is read by the second hop like the new one.
async fn recreate_sink_topic(
    direct: &pubsub_schema::PubSubProfile,
    sink: &Outages,
    topics: &mut Topics,
    gap: Duration,
    rec: &mut Record,
) -> anyhow::Result<()> {
    // An outage in progress ends first (its restore must not be overtaken).
    while sink.active().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sink.hold().await;
    let old = topics
        .output_subs
        .last()
        .expect("the output topic's first subscription")
        .clone();
    rec.rows
        .extend(super::seed::drain_msgs(direct, &old).await?);
    admin::delete_topic(direct, &topics.output).await?;
    sink.end().await;
    tokio::time::sleep(gap).await;
    sink.hold().await;
    // The sink may have created it meanwhile (create-if-needed): then it waits for a
    // subscription, which this gives it.
    if let Err(e) = admin::create_topic(direct, &topics.output).await {
        tracing::debug!("chaos: {} not created here: {e:#}", topics.output);
    }
    let n = topics.output_subs.len();
    let (sub, hop2) = (
        format!("{}-sub-r{n}", topics.output),
        format!("{}-hop2-r{n}", topics.output),
    );
    admin::create_subscription(direct, &sub, &topics.output, 60).await?;
    admin::create_subscription(direct, &hop2, &topics.output, 60).await?;
    topics.output_subs.push(sub);
    topics.hop2_subs.push(hop2);
    sink.end().await;
    Ok(())
}

/// Another consumer of subscription `id` of `profile`'s project (the emulator, proxied).
async fn interloper(
    profile: &pubsub_schema::PubSubProfile,
    id: &str,
    plan: Interference,
) -> anyhow::Result<Interloper> {
    let subscriber = client::subscriber(profile).await?;
    Interloper::start(
        subscriber,
        client::subscription_path(&profile.project, id),
        plan,
    )
    .await
}
